"""``keystream encrypt|decrypt --value``: a small value on the command line, base64 or JSON out."""

from __future__ import annotations

import base64
import json
import os

from keystream_cli import RunCli
from keystream_client.cli import EXIT_INTEGRITY, EXIT_IO, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE


def _ok(result: object) -> bytes:
    assert getattr(result, "returncode", None) == EXIT_OK, getattr(result, "stderr", b"").decode()
    stdout: bytes = getattr(result, "stdout", b"")
    return stdout


def test_value_round_trip_prints_base64_then_text(cli: RunCli, key: str) -> None:
    for text in ("hello", "grüße ✓ with spaces", ""):
        ciphertext = _ok(cli("encrypt", "--key", key, "--value", text))
        assert ciphertext.count(b"\n") == 1 and ciphertext.endswith(b"\n")
        assert len(base64.b64decode(ciphertext.strip(), validate=True)) > len(text.encode())
        plain = _ok(cli("decrypt", "--key", key, "--value", ciphertext.decode().strip()))
        assert plain == text.encode() + b"\n"


def test_value_json_output(cli: RunCli, key: str) -> None:
    sealed = json.loads(
        _ok(cli("encrypt", "--key", key, "--value", "hello", "--json", "--associated-data", "a"))
    )
    assert set(sealed) == {"key", "key_version", "ciphertext"}
    assert (sealed["key"], sealed["key_version"]) == (key, 1)
    opened = json.loads(
        _ok(cli("decrypt", "--key", key, "--value", sealed["ciphertext"], "--json", "--associated-data", "a"))
    )
    assert opened == {"key": key, "key_version": 1, "plaintext": base64.b64encode(b"hello").decode()}

    raw = json.loads(_ok(cli("encrypt", "--key", key, "--format", "raw", "--value", "hi", "--json")))
    assert set(raw) == {"key", "key_version", "ciphertext", "iv"} and len(bytes.fromhex(raw["iv"])) == 16
    args = ["--format", "raw", "--iv", raw["iv"], "--key-version", str(raw["key_version"])]
    assert _ok(cli("decrypt", "--key", key, *args, "--value", raw["ciphertext"])) == b"hi\n"


def test_binary_plaintext_needs_json(cli: RunCli, key: str) -> None:
    binary = b"\xff\xfe\x00" + os.urandom(32)
    sealed = _ok(cli("encrypt", "--key", key, "-", "-", input=binary))
    value = base64.b64encode(sealed).decode()
    as_text = cli("decrypt", "--key", key, "--value", value)
    assert as_text.returncode == EXIT_IO and as_text.stdout == b""
    assert as_text.stderr.decode().splitlines() == [
        "keystream: error: the plaintext is binary (not UTF-8 text): use --json for it as base64"
    ]
    opened = json.loads(_ok(cli("decrypt", "--key", key, "--value", value, "--json")))
    assert base64.b64decode(opened["plaintext"]) == binary


def test_value_errors(cli: RunCli, key: str) -> None:
    sealed = _ok(cli("encrypt", "--key", key, "--value", "hello")).decode().strip()
    wrong_ad = cli("decrypt", "--key", key, "--value", sealed, "--associated-data", "other")
    assert wrong_ad.returncode == EXIT_INTEGRITY and wrong_ad.stdout == b""
    assert len(wrong_ad.stderr.splitlines()) == 1 and b"decryption_failed" in wrong_ad.stderr

    missing = cli("encrypt", "--key", "no-such-key", "--value", "x")
    assert missing.returncode == EXIT_NOT_FOUND and len(missing.stderr.splitlines()) == 1

    for args in (
        ["decrypt", "--key", key, "--value", "not base64!"],
        ["encrypt", "--key", key, "--value", "x", "in.txt", "out.ks"],
        ["encrypt", "--key", key, "in.txt"],
        ["encrypt", "--key", key, "in.txt", "out.ks", "--json"],
        ["decrypt", "--key", key, "--format", "raw", "--value", sealed],
    ):
        usage = cli(*args)
        assert usage.returncode == EXIT_USAGE, args
        assert usage.stderr.startswith(f"usage: keystream {args[0]} ".encode()), usage.stderr

"""``keystream rewrap`` and ``keystream batch rewrap`` against a real server: a file sealed under an old
version comes back sealed under the latest one and opens to the same bytes; --value, --json, --key-version;
a rewrap-only token; one-line errors with their exit codes."""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from keystream_cli import RunCli
from keystream_client.cli import (
    EXIT_AUTH,
    EXIT_INTEGRITY,
    EXIT_ITEMS_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
)

AD = ("--associated-data", "object=42")


def _one_error_line(stderr: bytes) -> str:
    lines = stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("keystream: error: "), stderr
    return lines[0]


def _rotate(cli: RunCli, key: str) -> None:
    result = cli("keys", "rotate", key)
    assert result.returncode == EXIT_OK, result.stderr


def test_rewrap_a_file_under_the_latest_version(cli: RunCli, key: str, tmp_path: Path) -> None:
    plain, sealed, rewrapped, opened = (
        tmp_path / name for name in ("plain", "sealed", "rewrapped", "opened")
    )
    plain.write_bytes(os.urandom(300_000))
    assert cli("encrypt", str(plain), str(sealed), "--key", key, "-q", *AD).returncode == EXIT_OK
    _rotate(cli, key)
    result = cli("rewrap", str(sealed), str(rewrapped), "--key", key, "-q", *AD)
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stderr == b""
    decrypted = cli("decrypt", str(rewrapped), str(opened), "--key", key, "-q", "--key-version", "2", *AD)
    assert decrypted.returncode == EXIT_OK, decrypted.stderr
    assert opened.read_bytes() == plain.read_bytes()
    piped = cli("rewrap", "-", "-", "--key", key, "-q", *AD, input=sealed.read_bytes())
    assert piped.returncode == EXIT_OK and len(piped.stdout) == sealed.stat().st_size

    wrong_version = cli(
        "rewrap", str(sealed), str(tmp_path / "no"), "--key", key, "-q", "--key-version", "2", *AD
    )
    assert wrong_version.returncode == EXIT_INTEGRITY
    assert (
        "decryption_failed" in _one_error_line(wrong_version.stderr)
        or "verif" in wrong_version.stderr.decode()
    )
    assert not (tmp_path / "no").exists()
    raw = cli("rewrap", str(sealed), str(tmp_path / "no"), "--key", key, "--format", "raw")
    assert raw.returncode == EXIT_USAGE  # rewrap has no --format: sealed only


def test_value_json_and_a_rewrap_only_token(cli: RunCli, key: str) -> None:
    encrypted = cli("encrypt", "--key", key, "--value", "hello")
    assert encrypted.returncode == EXIT_OK, encrypted.stderr
    _rotate(cli, key)
    created = cli("tokens", "create", "--scope", "rewrap", "--key-pattern", key, "--json")
    assert created.returncode == EXIT_OK, created.stderr
    env = {"KEYSTREAM_TOKEN": json.loads(created.stdout)["token"]}
    result = cli("rewrap", "--key", key, "--value", encrypted.stdout.decode().strip(), "--json", env=env)
    assert result.returncode == EXIT_OK, result.stderr
    answer = json.loads(result.stdout)
    assert set(answer) == {"key", "key_version", "ciphertext"} and answer["key_version"] == 2
    refused = cli("decrypt", "--key", key, "--value", answer["ciphertext"], env=env)
    assert refused.returncode == EXIT_AUTH
    assert "'decrypt' scope" in _one_error_line(refused.stderr)
    opened = cli("decrypt", "--key", key, "--value", answer["ciphertext"])
    assert opened.returncode == EXIT_OK and opened.stdout == b"hello\n"
    text = cli("rewrap", "--key", key, "--value", answer["ciphertext"])
    assert text.returncode == EXIT_OK
    assert base64.b64decode(text.stdout.strip(), validate=True) != base64.b64decode(answer["ciphertext"])


def test_errors_are_one_line(cli: RunCli, key: str, tmp_path: Path) -> None:
    missing = cli("rewrap", "--key", "rw-no-such-key", "--value", "AAAA")
    assert missing.returncode == EXIT_NOT_FOUND
    assert "rw-no-such-key" in _one_error_line(missing.stderr)
    garbage = cli("rewrap", "--key", key, "--value", base64.b64encode(b"garbage" * 10).decode())
    assert garbage.returncode == EXIT_INTEGRITY
    _one_error_line(garbage.stderr)
    not_base64 = cli("rewrap", "--key", key, "--value", "not base64!")
    assert not_base64.returncode == EXIT_USAGE  # a usage error, with usage, as decrypt --value's
    assert b"--value must be base64" in not_base64.stderr


def test_batch_rewrap(cli: RunCli, key: str, tmp_path: Path) -> None:
    source = tmp_path / "items.jsonl"
    source.write_text(
        "\n".join(
            json.dumps(record)
            for record in (
                {"plaintext": base64.b64encode(b"one").decode(), "reference": "a"},
                {
                    "plaintext": base64.b64encode(b"two").decode(),
                    "associated_data": base64.b64encode(b"x").decode(),
                },
            )
        )
        + "\n"
    )
    sealed = cli("batch", "encrypt", "--key", key, "--input", str(source))
    assert sealed.returncode == EXIT_OK, sealed.stderr
    _rotate(cli, key)
    lines = sealed.stdout + json.dumps({"ciphertext": base64.b64encode(b"garbage").decode()}).encode() + b"\n"
    rewrapped = cli("batch", "rewrap", "--key", key, "--input", "-", input=lines)
    assert rewrapped.returncode == EXIT_ITEMS_FAILED
    assert "1 of 3 items failed (lines 3)" in _one_error_line(rewrapped.stderr)
    out = [json.loads(line) for line in rewrapped.stdout.splitlines()]
    assert [r.get("key_version") for r in out] == [2, 2, None]
    assert out[0]["reference"] == "a" and out[2]["error"]["code"] == "decryption_failed"
    opened = cli(
        "batch", "decrypt", "--key", key, "--input", "-", "--key-version", "2", input=rewrapped.stdout
    )
    assert opened.returncode == EXIT_ITEMS_FAILED  # the failed line has no ciphertext
    plain = [
        base64.b64decode(r["plaintext"])
        for r in map(json.loads, opened.stdout.splitlines())
        if "plaintext" in r
    ]
    assert plain == [b"one", b"two"]

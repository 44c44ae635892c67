"""``keystream datakey`` against a real server: the printed data key is what ``keystream decrypt`` returns for
the printed ciphertext (both schemes, with associated data); --no-plaintext, --type, --json; one-line errors
with their exit codes, never showing a data key."""

from __future__ import annotations

import base64
import itertools
import json
from pathlib import Path

import pytest

from keystream_cli import RunCli
from keystream_client.cli import EXIT_AUTH, EXIT_IO, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE

_names = itertools.count()


def _key(cli: RunCli, scheme: str = "ctr-hmac") -> str:
    name = f"dk-{scheme}-{next(_names)}"
    result = cli("keys", "create", name, "--segment-size", "4KiB", "--scheme", scheme)
    assert result.returncode == 0, result.stderr
    return name


def _decrypt(cli: RunCli, key: str, ciphertext: bytes, tmp_path: Path, *extra: str) -> bytes:
    sealed = tmp_path / f"sealed-{next(_names)}.bin"
    sealed.write_bytes(ciphertext)
    result = cli("decrypt", str(sealed), "-", "--key", key, "--quiet", *extra)
    assert result.returncode == EXIT_OK, result.stderr
    return bytes(result.stdout)


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
def test_json_data_key_is_what_decrypt_returns(cli: RunCli, tmp_path: Path, scheme: str) -> None:
    key = _key(cli, scheme)
    result = cli("datakey", "--key", key, "--json", "--associated-data", "object=42")
    assert result.returncode == EXIT_OK, result.stderr
    answer = json.loads(result.stdout)
    assert set(answer) == {"ciphertext", "key_version", "plaintext"} and answer["key_version"] == 1
    data_key = base64.b64decode(answer["plaintext"], validate=True)
    assert len(data_key) == 32
    ciphertext = base64.b64decode(answer["ciphertext"], validate=True)
    assert _decrypt(cli, key, ciphertext, tmp_path, "--associated-data", "object=42") == data_key
    wrong = tmp_path / "wrong.bin"
    wrong.write_bytes(ciphertext)
    refused = cli("decrypt", str(wrong), "-", "--key", key, "--quiet")  # without the associated data
    assert refused.returncode != EXIT_OK


def test_text_output_type_and_no_plaintext(cli: RunCli, tmp_path: Path) -> None:
    key = _key(cli)
    ad_file = tmp_path / "ad.bin"
    ad_file.write_bytes(b"\x00binary\xffcontext")
    result = cli("datakey", "--key", key, "--type", "aes128", "--associated-data-file", str(ad_file))
    assert result.returncode == EXIT_OK, result.stderr
    lines = dict(line.split(":", 1) for line in result.stdout.decode().splitlines())
    assert set(lines) == {"key_version", "ciphertext", "plaintext"}
    assert lines["key_version"].strip() == "1"
    data_key = base64.b64decode(lines["plaintext"].strip(), validate=True)
    assert len(data_key) == 16
    ciphertext = base64.b64decode(lines["ciphertext"].strip(), validate=True)
    assert _decrypt(cli, key, ciphertext, tmp_path, "--associated-data-file", str(ad_file)) == data_key

    wrapped = cli("datakey", "--key", key, "--no-plaintext", "--json")
    assert wrapped.returncode == EXIT_OK, wrapped.stderr
    answer = json.loads(wrapped.stdout)
    assert set(answer) == {"ciphertext", "key_version"}
    assert len(_decrypt(cli, key, base64.b64decode(answer["ciphertext"]), tmp_path)) == 32
    text = cli("datakey", "--key", key, "--no-plaintext")
    assert text.returncode == EXIT_OK and b"plaintext" not in text.stdout


def _one_error_line(stderr: bytes) -> str:
    lines = stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("keystream: error: "), stderr
    assert "usage:" not in lines[0]
    return lines[0]


def test_encrypt_only_token_gets_the_sealed_key_but_not_the_plaintext(cli: RunCli) -> None:
    key = _key(cli)
    created = cli("tokens", "create", "--scope", "encrypt", "--key-pattern", key, "--json")
    assert created.returncode == EXIT_OK, created.stderr
    token = json.loads(created.stdout)["token"]
    env = {"KEYSTREAM_TOKEN": token}
    refused = cli("datakey", "--key", key, env=env)
    assert refused.returncode == EXIT_AUTH
    assert "'decrypt' scope" in _one_error_line(refused.stderr)
    assert refused.stdout == b""
    wrapped = cli("datakey", "--key", key, "--no-plaintext", "--json", env=env)
    assert wrapped.returncode == EXIT_OK, wrapped.stderr
    assert "plaintext" not in json.loads(wrapped.stdout)


def test_errors_are_one_line_with_their_exit_codes(cli: RunCli, tmp_path: Path) -> None:
    missing_key = cli("datakey", "--key", "dk-no-such-key")
    assert missing_key.returncode == EXIT_NOT_FOUND
    assert "dk-no-such-key" in _one_error_line(missing_key.stderr)
    key = _key(cli)
    no_file = cli("datakey", "--key", key, "--associated-data-file", str(tmp_path / "absent"))
    assert no_file.returncode == EXIT_IO
    assert "--associated-data-file" in _one_error_line(no_file.stderr)
    bad_type = cli("datakey", "--key", key, "--type", "aes192")
    assert bad_type.returncode == EXIT_USAGE and b"usage:" in bad_type.stderr  # argparse's own usage error
    both = cli("datakey", "--key", key, "--associated-data", "a", "--associated-data-file", "b")
    assert both.returncode == EXIT_USAGE

"""``keystream hmac``, ``verify``, ``random`` and ``hash`` against a real server: a tag verifies (exit 0)
and a changed input does not (exit 4); file, stdin and --value inputs agree; --json; errors and exit codes."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path

from keystream_cli import RunCli
from keystream_client.cli import EXIT_AUTH, EXIT_INTEGRITY, EXIT_IO, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE


def test_hmac_and_verify(cli: RunCli, tmp_path: Path) -> None:
    assert cli("keys", "create", "cli-macs").returncode == EXIT_OK
    data = tmp_path / "body.json"
    data.write_bytes(b'{"order": 42, "paid": true}\n')
    made = cli("hmac", "--key", "cli-macs", str(data))
    assert made.returncode == EXIT_OK, made.stderr
    tag = made.stdout.decode().strip()
    assert tag.startswith("ks:v1:")
    piped = cli("hmac", "--key", "cli-macs", "-", input=data.read_bytes())
    assert piped.stdout.decode().strip() == tag
    inline = cli("hmac", "--key", "cli-macs", "--value", '{"order": 42, "paid": true}\n', "--json")
    assert json.loads(inline.stdout) == {"hmac": tag, "key_version": 1}
    good = cli("verify", "--key", "cli-macs", "--hmac", tag, str(data))
    assert (good.returncode, good.stdout.decode().strip()) == (EXIT_OK, "valid")
    bad = cli("verify", "--key", "cli-macs", "--hmac", tag, "--value", "tampered")
    assert (bad.returncode, bad.stdout.decode().strip()) == (EXIT_INTEGRITY, "invalid")
    as_json = cli("verify", "--key", "cli-macs", "--hmac", tag, "--value", "tampered", "--json")
    assert json.loads(as_json.stdout) == {"valid": False}
    long_tag = cli("hmac", "--key", "cli-macs", "--algorithm", "sha2-512", "--value", "x")
    assert len(base64.b64decode(long_tag.stdout.decode().strip().split(":")[2])) == 64


def test_errors(cli: RunCli, tmp_path: Path) -> None:
    missing = cli("hmac", "--key", "cli-no-such-key", "--value", "x")
    assert missing.returncode == EXIT_NOT_FOUND and missing.stderr.count(b"\n") == 1, missing.stderr
    unreadable = cli("hmac", "--key", "cli-macs", str(tmp_path / "absent"))
    assert unreadable.returncode == EXIT_IO and b"cannot read" in unreadable.stderr
    no_input = cli("hmac", "--key", "cli-macs")
    assert no_input.returncode == EXIT_USAGE
    both = cli("hash", "--value", "x", str(tmp_path / "absent"))
    assert both.returncode == EXIT_USAGE
    malformed = cli("verify", "--key", "cli-macs", "--hmac", "nonsense", "--value", "x")
    assert malformed.returncode not in (EXIT_OK, EXIT_INTEGRITY) and b"ks:v" in malformed.stderr
    created = cli("tokens", "create", "--scope", "verify", "--key-pattern", "cli-*", "--json")
    narrow = {"KEYSTREAM_TOKEN": json.loads(created.stdout)["token"]}
    refused = cli("hmac", "--key", "cli-macs", "--value", "x", env=narrow)
    assert refused.returncode == EXIT_AUTH, refused.stderr


def test_random_and_hash(cli: RunCli, tmp_path: Path) -> None:
    first = cli("random")
    assert first.returncode == EXIT_OK and len(base64.b64decode(first.stdout.strip())) == 32
    hexed = cli("random", "--bytes", "48", "--hex").stdout.decode().strip()
    assert len(bytes.fromhex(hexed)) == 48
    assert cli("random", "--bytes", "0").returncode != EXIT_OK
    data = tmp_path / "data.bin"
    data.write_bytes(bytes(range(256)) * 4)
    digest = cli("hash", str(data)).stdout.decode().strip()
    assert digest == hashlib.sha256(data.read_bytes()).hexdigest()
    sha3 = cli("hash", "--algorithm", "sha3-256", "--base64", "--value", "abc").stdout.decode().strip()
    assert base64.b64decode(sha3) == hashlib.sha3_256(b"abc").digest()

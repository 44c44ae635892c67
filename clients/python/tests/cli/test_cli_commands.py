"""``keystream`` keys/tokens commands, --help everywhere, and the documented exit codes."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from keystream_cli import RunCli
from keystream_client import cli as keystream_cli
from keystream_client.cli import (
    EXIT_API_ERROR,
    EXIT_AUTH,
    EXIT_CONFLICT,
    EXIT_CONNECTION,
    EXIT_IO,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_USAGE,
)
from keystream_server import RunningServer, free_port

COMMANDS = [
    [],
    ["keys"],
    ["keys", "create"],
    ["keys", "import"],
    ["keys", "import-version"],
    ["keys", "trim"],
    ["keys", "list"],
    ["keys", "show"],
    ["keys", "rotate"],
    ["keys", "config"],
    ["keys", "delete"],
    ["tokens"],
    ["tokens", "create"],
    ["tokens", "list"],
    ["tokens", "delete"],
    ["tokens", "self"],
    ["tokens", "renew"],
    ["encrypt"],
    ["decrypt"],
    ["batch"],
    ["batch", "encrypt"],
    ["batch", "decrypt"],
    ["datakey"],
    ["backends"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "keystream")
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        keystream_cli.main([*command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: keystream {' '.join(command)}".rstrip())
    assert "-h, --help" in out


def test_installed_console_script_runs() -> None:
    script = Path(sys.executable).parent / "keystream"
    assert script.exists(), "pyproject declares the keystream console script; `pip install -e .` creates it"
    result = subprocess.run([str(script), "--help"], capture_output=True, timeout=60, check=False)
    assert result.returncode == EXIT_OK
    assert b"exit codes" in result.stdout


def _json(result: subprocess.CompletedProcess[bytes]) -> object:
    assert result.returncode == EXIT_OK, result.stderr.decode()
    return json.loads(result.stdout)


def test_keys_commands(cli: RunCli) -> None:
    created = _json(
        cli("keys", "create", "cli-keys", "--type", "aes128", "--segment-size", "64KiB", "--json")
    )
    assert isinstance(created, dict)
    assert (created["name"], created["type"], created["segment_size"]) == ("cli-keys", "aes128", 65536)

    listing = _json(cli("keys", "list", "--json"))
    assert isinstance(listing, list) and "cli-keys" in {k["name"] for k in listing}
    table = cli("keys", "list")
    assert table.returncode == EXIT_OK and b"cli-keys" in table.stdout and b"NAME" in table.stdout

    shown = cli("keys", "show", "cli-keys")
    assert shown.returncode == EXIT_OK and b"type:                   aes128" in shown.stdout

    rotated = _json(cli("keys", "rotate", "cli-keys", "--json"))
    assert isinstance(rotated, dict) and rotated["latest_version"] == 2
    configured = _json(cli("keys", "config", "cli-keys", "--min-decryption-version", "2", "--json"))
    assert isinstance(configured, dict) and configured["min_decryption_version"] == 2

    refused = cli("keys", "delete", "cli-keys")
    assert refused.returncode == EXIT_CONFLICT
    assert b"deletion_not_allowed" in refused.stderr
    assert cli("keys", "config", "cli-keys", "--deletion-allowed").returncode == EXIT_OK
    assert cli("keys", "delete", "cli-keys").returncode == EXIT_OK
    missing = cli("keys", "show", "cli-keys")
    assert missing.returncode == EXIT_NOT_FOUND and b"key_not_found" in missing.stderr


def test_keys_create_with_scheme(cli: RunCli) -> None:
    created = _json(cli("keys", "create", "cli-gcm", "--scheme", "gcm", "--json"))
    assert isinstance(created, dict) and created["scheme"] == "gcm"
    default = _json(cli("keys", "create", "cli-ctr", "--json"))
    assert isinstance(default, dict) and default["scheme"] == "ctr-hmac"
    shown = cli("keys", "show", "cli-gcm")
    assert shown.returncode == EXIT_OK and b"scheme:                 gcm" in shown.stdout
    table = cli("keys", "list").stdout.decode()
    assert "SCHEME" in table.splitlines()[0]
    assert any(line.split()[:3] == ["cli-gcm", "aes256", "gcm"] for line in table.splitlines())
    bad = cli("keys", "create", "cli-bad-scheme", "--scheme", "aes-gcm")
    assert bad.returncode == EXIT_USAGE and b"invalid choice" in bad.stderr


def test_keys_auto_rotate_period(cli: RunCli, tmp_path: Path) -> None:
    created = _json(cli("keys", "create", "cli-rot", "--auto-rotate-period", "24h", "--json"))
    assert isinstance(created, dict) and created["auto_rotate_period"] == 86_400
    shown = cli("keys", "show", "cli-rot")
    assert shown.returncode == EXIT_OK and b"auto_rotate_period:     86400s (1d)" in shown.stdout
    table = cli("keys", "list").stdout.decode()
    assert table.splitlines()[0].split()[-1] == "AUTO_ROTATE"
    assert any(line.split()[0] == "cli-rot" and line.endswith("86400s (1d)") for line in table.splitlines())
    configured = _json(cli("keys", "config", "cli-rot", "--auto-rotate-period", "1h30m", "--json"))
    assert isinstance(configured, dict) and configured["auto_rotate_period"] == 5400
    off = cli("keys", "config", "cli-rot", "--auto-rotate-period", "0")
    assert off.returncode == EXIT_OK and b"auto_rotate_period:     off" in off.stdout
    short = cli("keys", "config", "cli-rot", "--auto-rotate-period", "30m")
    assert short.returncode == EXIT_API_ERROR
    assert b"at least 3600 seconds (1h), got 1800" in short.stderr
    material = tmp_path / "k.bin"
    material.write_bytes(os.urandom(16))
    imported = _json(
        cli("keys", "import", "cli-rot-imp", str(material), "--auto-rotate-period", "7d", "--json")
    )
    assert isinstance(imported, dict) and imported["auto_rotate_period"] == 604_800


def test_keys_import_from_file_and_stdin(cli: RunCli, tmp_path: Path) -> None:
    raw = tmp_path / "key.bin"
    raw.write_bytes(os.urandom(32))
    imported = _json(cli("keys", "import", "cli-imported", str(raw), "--scheme", "gcm", "--json"))
    assert isinstance(imported, dict) and imported["imported"] is True and imported["type"] == "aes256"
    assert imported["scheme"] == "gcm"

    encoded = base64.b64encode(os.urandom(16))
    from_stdin = cli(
        "keys", "import", "cli-imported-b64", "-", "--encoding", "base64", "--json", input=encoded
    )
    assert json.loads(from_stdin.stdout)["type"] == "aes128"

    short = tmp_path / "short.bin"
    short.write_bytes(b"x" * 10)
    bad = cli("keys", "import", "cli-bad", str(short))
    assert bad.returncode == EXIT_USAGE and b"16, 24, 32 or 64 bytes" in bad.stderr


def test_keys_import_and_import_version_wrapped(cli: RunCli, tmp_path: Path) -> None:
    first, second = tmp_path / "v1.bin", tmp_path / "v2.hex"
    first.write_bytes(os.urandom(16))
    second.write_text(os.urandom(16).hex())
    made = _json(cli("keys", "import", "cli-wrapped", str(first), "--wrapped", "--json"))
    assert isinstance(made, dict) and (made["imported"], made["type"]) == (True, "aes128")
    added = cli(
        "keys",
        "import-version",
        "cli-wrapped",
        "--file",
        str(second),
        "--encoding",
        "hex",
        "--wrapped",
        "--json",
    )
    assert added.returncode == EXIT_OK and json.loads(added.stdout)["latest_version"] == 2
    wrong = cli("keys", "import-version", "cli-wrapped", "--file", str(tmp_path / "v1.bin"), "--wrapped")
    assert wrong.returncode == EXIT_OK  # 16 bytes fit an aes128 key: a third version
    too_long = tmp_path / "long.bin"
    too_long.write_bytes(os.urandom(32))
    refused = cli("keys", "import-version", "cli-wrapped", "--file", str(too_long), "--wrapped")
    assert refused.returncode != EXIT_OK and b"16 bytes" in refused.stderr


def test_keys_import_version_and_trim(cli: RunCli, tmp_path: Path) -> None:
    assert cli("keys", "create", "cli-life", "--type", "aes128").returncode == EXIT_OK
    material = tmp_path / "v2.hex"
    material.write_text(os.urandom(16).hex())
    added = _json(
        cli("keys", "import-version", "cli-life", "--file", str(material), "--encoding", "hex", "--json")
    )
    assert isinstance(added, dict) and (added["latest_version"], added["imported"]) == (2, True)
    from_stdin = cli("keys", "import-version", "cli-life", "--file", "-", "--json", input=os.urandom(16))
    assert json.loads(from_stdin.stdout)["latest_version"] == 3

    wrong = tmp_path / "v3.bin"
    wrong.write_bytes(os.urandom(32))
    refused = cli("keys", "import-version", "cli-life", "--file", str(wrong))
    assert refused.returncode != EXIT_OK and b"16 bytes" in refused.stderr
    no_argv = cli("keys", "import-version", "cli-life", base64.b64encode(os.urandom(16)).decode())
    assert no_argv.returncode == EXIT_USAGE

    too_far = cli("keys", "trim", "cli-life", "--min-available-version", "3")
    assert too_far.returncode != EXIT_OK and b"min_decryption_version" in too_far.stderr
    assert cli("keys", "config", "cli-life", "--min-decryption-version", "3").returncode == EXIT_OK
    trimmed = _json(cli("keys", "trim", "cli-life", "--min-available-version", "3", "--json"))
    assert isinstance(trimmed, dict) and [v["version"] for v in trimmed["versions"]] == [3]
    assert cli("keys", "trim", "cli-life", "--min-available-version", "0").returncode == EXIT_USAGE


def test_keys_create_with_options(cli: RunCli) -> None:
    made = _json(cli("keys", "create", "cli-opts", "--derived", "--exportable", "--json"))
    assert isinstance(made, dict)
    assert (made["derived"], made["exportable"], made["allow_plaintext_backup"]) == (True, True, False)
    refused = cli("keys", "create", "cli-conv", "--convergent-encryption")
    assert refused.returncode != EXIT_OK and b"convergent_encryption requires derived" in refused.stderr


def test_keys_export(cli: RunCli) -> None:
    assert cli("keys", "create", "cli-export").returncode == EXIT_OK
    refused = cli("keys", "export", "cli-export")
    assert refused.returncode != EXIT_OK and b"not exportable" in refused.stderr
    assert cli("keys", "config", "cli-export", "--exportable").returncode == EXIT_OK
    exported = _json(cli("keys", "export", "cli-export"))
    assert isinstance(exported, dict) and list(exported) == ["1"]
    assert len(base64.b64decode(exported["1"])) == 32
    latest = _json(cli("keys", "export", "cli-export", "--version", "latest"))
    assert latest == exported


def test_keys_backup_and_restore(cli: RunCli, tmp_path: Path) -> None:
    assert cli("keys", "create", "cli-backup").returncode == EXIT_OK
    refused = cli("keys", "backup", "cli-backup")
    assert refused.returncode != EXIT_OK and b"cannot be backed up" in refused.stderr
    assert cli("keys", "config", "cli-backup", "--allow-plaintext-backup").returncode == EXIT_OK
    made = cli("keys", "backup", "cli-backup")
    assert made.returncode == EXIT_OK, made.stderr
    blob = tmp_path / "cli-backup.blob"
    blob.write_bytes(made.stdout)
    assert cli("keys", "rotate", "cli-backup").returncode == EXIT_OK
    exists = cli("keys", "restore", "--file", str(blob))
    assert exists.returncode != EXIT_OK and b"restore with force" in exists.stderr
    restored = _json(cli("keys", "restore", "--file", "-", "--force", "--json", input=made.stdout))
    assert isinstance(restored, dict) and restored["latest_version"] == 1
    assert cli("keys", "restore", "--file", str(tmp_path / "missing")).returncode != EXIT_OK


def test_tokens_commands(cli: RunCli, key: str) -> None:
    created = cli("tokens", "create", "--scope", "encrypt", "--key-pattern", key, "--description", "ci job")
    assert created.returncode == EXIT_OK, created.stderr
    token = created.stdout.decode().strip()
    assert token.startswith("ks_") and b"shown only once" in created.stderr
    token_id = token.split("_")[1]

    listing = _json(cli("tokens", "list", "--json"))
    assert isinstance(listing, list)
    mine = next(t for t in listing if t["id"] == token_id)
    assert mine["scopes"] == ["encrypt"] and mine["description"] == "ci job"
    assert token not in json.dumps(listing)

    forbidden = cli("keys", "create", "other", env={"KEYSTREAM_TOKEN": token})
    assert forbidden.returncode == EXIT_AUTH and b"403" in forbidden.stderr

    assert cli("tokens", "delete", token_id).returncode == EXIT_OK
    revoked = cli("keys", "list", env={"KEYSTREAM_TOKEN": token})
    assert revoked.returncode == EXIT_AUTH and b"401" in revoked.stderr
    assert cli("tokens", "delete", token_id).returncode == EXIT_NOT_FOUND


def test_tokens_ttl_self_and_renew(cli: RunCli) -> None:
    created = cli("tokens", "create", "--scope", "encrypt", "--ttl", "600", "--max-ttl", "900", "--json")
    assert created.returncode == EXIT_OK, created.stderr
    body = _json(created)
    assert body["ttl"] == 600 and body["expires_at"] and body["max_expires_at"]
    mine = {"KEYSTREAM_TOKEN": body["token"]}

    shown = cli("tokens", "self", "--json", env=mine)
    assert shown.returncode == EXIT_OK, shown.stderr
    assert _json(shown) == {key: value for key, value in body.items() if key != "token"}
    table = cli("tokens", "self", env=mine)
    assert b"EXPIRES" in table.stdout and body["id"].encode() in table.stdout

    renewed = cli("tokens", "renew", "--ttl", "700", env=mine)
    assert renewed.returncode == EXIT_OK and renewed.stderr == b"", renewed.stderr
    capped = cli("tokens", "renew", "--ttl", "5000", "--json", env=mine)
    assert capped.returncode == EXIT_OK, capped.stderr
    assert _json(capped)["capped"] is True
    assert _json(capped)["expires_at"] == _json(capped)["max_expires_at"]
    plain_capped = cli("tokens", "renew", "--ttl", "5000", env=mine)
    assert b"capped at its max_expires_at" in plain_capped.stderr

    forever = cli("tokens", "renew")  # the root token has no ttl: one line, the API's 400
    assert forever.returncode == EXIT_API_ERROR
    assert forever.stderr.decode().count("\n") == 1 and "nothing to renew" in forever.stderr.decode()
    assert b"Traceback" not in forever.stderr

    usage = cli("tokens", "create", "--scope", "encrypt", "--max-ttl", "60")
    assert usage.returncode == EXIT_USAGE and b"--max-ttl needs --ttl" in usage.stderr
    assert cli("tokens", "create", "--scope", "encrypt", "--ttl", "0").returncode == EXIT_USAGE


def test_usage_and_connection_exit_codes(cli: RunCli, server: RunningServer, tmp_path: Path) -> None:
    assert cli("keys", "list", env={"KEYSTREAM_TOKEN": ""}).returncode == EXIT_AUTH
    assert cli("keys", "frobnicate").returncode == EXIT_USAGE
    assert cli("encrypt", "--key", "k", "--format", "zip", "a", "b").returncode == EXIT_USAGE
    assert cli("keys", "config", "k").returncode == EXIT_USAGE  # nothing to change

    unreachable = cli("keys", "list", "--url", f"http://127.0.0.1:{free_port()}")
    assert unreachable.returncode == EXIT_CONNECTION and b"cannot reach" in unreachable.stderr
    # Flags work before the command too, and override the environment.
    assert cli("--url", f"http://127.0.0.1:{free_port()}", "keys", "list").returncode == EXIT_CONNECTION
    assert cli("--url", server.url, "keys", "list").returncode == EXIT_OK

    missing_input = cli("encrypt", "--key", "k", str(tmp_path / "nope"), str(tmp_path / "out"))
    assert missing_input.returncode == EXIT_IO and b"input not found" in missing_input.stderr


def test_backends_and_version(cli: RunCli, server: RunningServer) -> None:
    table = cli("backends")
    assert table.returncode == EXIT_OK and table.stdout.startswith(b"NAME")
    listing = json.loads(cli("backends", "--json").stdout)
    names = {b["name"] for b in listing["backends"] if b["available"]}
    assert set(server.backends) <= names
    for name in server.backends:
        assert name.encode() in table.stdout
    version = cli("--version")
    assert version.returncode == EXIT_OK and version.stdout.startswith(b"keystream ")


def test_server_commands_are_not_client_commands(capsys: pytest.CaptureFixture[str]) -> None:
    """``serve`` is ``keystream-server serve`` and ``bench`` is ``make bench`` now."""
    for command in (["serve"], ["bench", "--report-only"]):
        with pytest.raises(SystemExit) as done:
            keystream_cli.main(command)
        assert done.value.code == EXIT_USAGE
        assert "invalid choice" in capsys.readouterr().err


def test_timestamps_are_printed_as_the_http_api_writes_them(cli: RunCli, server: RunningServer) -> None:
    """One form for times everywhere: ``...Z`` as over HTTP, never ``+00:00`` (key show, key JSON, token
    tables and JSON, tokens renew)."""
    assert cli("keys", "create", "cli-times").returncode == EXIT_OK
    over_http = httpx.get(
        f"{server.url}/v1/keys/cli-times", headers={"Authorization": f"Bearer {server.token}"}, timeout=10
    ).json()
    assert over_http["created_at"].endswith("Z")
    shown = cli("keys", "show", "cli-times").stdout.decode()
    assert f"created_at:             {over_http['created_at']}\n" in shown
    assert f"  version 1: created {over_http['versions'][0]['created_at']}\n" in shown
    as_json = _json(cli("keys", "show", "cli-times", "--json"))
    assert isinstance(as_json, dict)
    assert (as_json["created_at"], as_json["updated_at"]) == (
        over_http["created_at"],
        over_http["updated_at"],
    )
    assert as_json["versions"] == over_http["versions"]

    created = _json(cli("tokens", "create", "--scope", "encrypt", "--ttl", "600", "--json"))
    assert isinstance(created, dict)
    mine = {"KEYSTREAM_TOKEN": created["token"]}
    token_http = httpx.get(
        f"{server.url}/v1/tokens/self", headers={"Authorization": f"Bearer {created['token']}"}, timeout=10
    ).json()
    for field in ("created_at", "expires_at", "max_expires_at"):
        assert created[field] == token_http[field] and token_http[field].endswith("Z"), field
    row = cli("tokens", "self", env=mine).stdout.decode().splitlines()[1]
    assert token_http["created_at"] in row.split() and token_http["expires_at"] in row.split()
    renewed = cli("tokens", "renew", env=mine).stdout.decode().strip()
    assert renewed.endswith("Z") and "+00:00" not in renewed
    everything = shown + json.dumps(as_json) + row + cli("tokens", "list").stdout.decode()
    assert "+00:00" not in everything

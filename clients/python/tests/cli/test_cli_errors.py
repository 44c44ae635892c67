"""How ``keystream`` reports errors: a usage line only for usage errors, else exactly one stderr line.

Runtime errors (input missing, output exists, no token, error answers of the service, an unreachable
service) once printed the top-level usage banner, or a second "stdout is incomplete" line, before the error.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from keystream_cli import RunCli
from keystream_client.cli import (
    EXIT_API_ERROR,
    EXIT_AUTH,
    EXIT_CONNECTION,
    EXIT_INTEGRITY,
    EXIT_IO,
    EXIT_NOT_FOUND,
    EXIT_USAGE,
)
from keystream_server import free_port


def _one_error_line(stderr: bytes) -> str:
    """The single ``keystream: error: ...`` line of ``stderr`` (fails on anything more)."""
    lines = stderr.decode().splitlines()
    assert len(lines) == 1, stderr.decode()
    assert lines[0].startswith("keystream: error: "), lines[0]
    return lines[0]


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    plain = tmp_path / "plain.txt"
    plain.write_bytes(b"hello")
    garbage = tmp_path / "garbage.ks"
    garbage.write_bytes(os.urandom(300))
    existing = tmp_path / "existing.out"
    existing.write_bytes(b"keep me")
    return {
        "plain": str(plain),
        "garbage": str(garbage),
        "existing": str(existing),
        "missing": str(tmp_path / "missing.txt"),
        "out": str(tmp_path / "new.out"),
    }


RUNTIME_ERRORS = [
    pytest.param(
        ["encrypt", "--key", "{key}", "{missing}", "{out}"],
        {},
        EXIT_IO,
        "input not found",
        id="missing input",
    ),
    pytest.param(
        ["encrypt", "--key", "{key}", "{plain}", "{existing}"], {}, EXIT_IO, "--force", id="output exists"
    ),
    pytest.param(["keys", "list"], {"KEYSTREAM_TOKEN": ""}, EXIT_AUTH, "no token", id="no token"),
    pytest.param(
        ["encrypt", "--key", "{key}", "{plain}", "-"],
        {"KEYSTREAM_TOKEN": ""},
        EXIT_AUTH,
        "no token",
        id="no token, encrypt",
    ),
    pytest.param(
        ["encrypt", "--key", "no-such-key", "{plain}", "-"],
        {},
        EXIT_NOT_FOUND,
        "key_not_found",
        id="unknown key to stdout",
    ),
    pytest.param(["keys", "show", "no-such-key"], {}, EXIT_NOT_FOUND, "key_not_found", id="unknown key"),
    pytest.param(
        ["decrypt", "--key", "{key}", "{garbage}", "-"],
        {},
        EXIT_INTEGRITY,
        "decryption_failed",
        id="bad ciphertext to stdout",
    ),
    pytest.param(
        ["encrypt", "--key", "{key}", "--backend", "zz", "{plain}", "-"],
        {},
        EXIT_API_ERROR,
        "HTTP 400",
        id="backend not enabled",
    ),
    pytest.param(
        ["encrypt", "--key", "{key}", "--associated-data-file", "{missing}", "{plain}", "{out}"],
        {},
        EXIT_IO,
        "missing.txt",
        id="associated data file missing",
    ),
    pytest.param(
        ["keys", "list"],
        {"KEYSTREAM_URL": "http://127.0.0.1:{port}"},
        EXIT_CONNECTION,
        "cannot reach",
        id="unreachable",
    ),
]


@pytest.mark.parametrize(("args", "env", "code", "says"), RUNTIME_ERRORS)
def test_runtime_errors_are_one_line(
    cli: RunCli, key: str, files: dict[str, str], args: list[str], env: dict[str, str], code: int, says: str
) -> None:
    values = {**files, "key": key, "port": str(free_port())}
    result = cli(*(arg.format(**values) for arg in args), env={k: v.format(**values) for k, v in env.items()})
    assert result.returncode == code, result.stderr.decode()
    assert says in _one_error_line(result.stderr)
    assert not Path(files["out"]).exists()
    assert Path(files["existing"]).read_bytes() == b"keep me"


USAGE_ERRORS = [
    ("unknown format", ["encrypt", "--key", "k", "--format", "zip", "a", "b"], "encrypt"),
    ("missing --key", ["decrypt", "a", "b"], "decrypt"),
    ("nothing to change", ["keys", "config", "k"], "keys config"),
    ("IN is OUT", ["encrypt", "--key", "k", "{plain}", "{plain}"], "encrypt"),
    ("bad --iv", ["encrypt", "--key", "k", "--format", "raw", "--iv", "zz", "{plain}", "-"], "encrypt"),
    ("raw decrypt without --iv", ["decrypt", "--key", "k", "--format", "raw", "{plain}", "-"], "decrypt"),
    ("bad --url", ["keys", "list", "--url", "ftp://example"], "keys list"),
]


@pytest.mark.parametrize(("args", "command"), [c[1:] for c in USAGE_ERRORS], ids=[c[0] for c in USAGE_ERRORS])
def test_usage_errors_show_the_command_usage(
    cli: RunCli, files: dict[str, str], args: list[str], command: str
) -> None:
    result = cli(*(arg.format(**files) for arg in args))
    assert result.returncode == EXIT_USAGE
    lines = result.stderr.decode().splitlines()
    assert lines[0].startswith(f"usage: keystream {command} "), lines
    assert lines[-1].startswith(f"keystream {command}: error: "), lines
    assert result.stdout == b""

"""``keystream-server``: --help everywhere, the console script, and ``serve``'s refusals (exit 2, one line).

The serve tests moved here from the client CLI's tests when ``keystream serve`` became
``keystream-server serve``; a successful start is covered by every test that starts a real server
(``clients/python/tests/keystream_server.py`` runs the console script).
"""

from __future__ import annotations

import base64
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from app import admin
from app.admin import EXIT_OK, EXIT_USAGE

REPO = Path(__file__).resolve().parents[3]
COMMANDS = [[], ["serve"], ["keystore"], ["keystore", "copy"]]
TIMEOUT = 60


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    """``python -m app.admin serve ARGS`` with no ``KEYSTREAM_*`` settings but ``env``."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "app.admin", "serve", *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        timeout=TIMEOUT,
        check=False,
    )


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "keystream-server")
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        admin.main([*command, "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: keystream-server {' '.join(command)}".rstrip())
    assert "-h, --help" in out


def test_client_commands_are_not_server_commands(capsys: pytest.CaptureFixture[str]) -> None:
    for command in (["keys", "list"], ["encrypt"], ["bench"]):
        with pytest.raises(SystemExit) as done:
            admin.main(command)
        assert done.value.code == EXIT_USAGE
        assert "invalid choice" in capsys.readouterr().err


def test_installed_console_script_runs() -> None:
    script = Path(sys.executable).parent / "keystream-server"
    assert script.exists(), (
        "pyproject declares the keystream-server console script; `pip install -e .` creates it"
    )
    result = subprocess.run([str(script), "--help"], capture_output=True, timeout=TIMEOUT, check=False)
    assert result.returncode == EXIT_OK
    assert b"serve" in result.stdout and b"exit codes" in result.stdout


def test_serve_rejects_bad_settings(tmp_path: Path) -> None:
    result = _serve("--backend", "quantum", "--data-dir", str(tmp_path / "data"), "--port", "0")
    assert result.returncode == EXIT_USAGE
    assert b"invalid settings" in result.stderr and b"quantum" in result.stderr
    assert not (tmp_path / "data").exists()  # nothing was bootstrapped


def test_serve_refuses_a_transit_mount_over_its_own_paths_in_one_line(tmp_path: Path) -> None:
    result = _serve(
        "--data-dir", str(tmp_path / "data"), "--port", "0", env={"KEYSTREAM_TRANSIT_MOUNT": "keys"}
    )
    assert result.returncode == EXIT_USAGE, result.stderr
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and b"Traceback" not in result.stderr, result.stderr.decode()
    assert lines[0].startswith(
        "keystream-server: error: cannot start: KEYSTREAM_TRANSIT_MOUNT 'keys' starts with"
    )
    assert not (tmp_path / "data").exists()  # refused before the bootstrap


def test_serve_refuses_an_unusable_master_key_in_one_line(tmp_path: Path) -> None:
    """A master.key open to other users stops the start with one error line and exit 2, not a traceback."""
    data = tmp_path / "data"
    data.mkdir(mode=0o700)
    key_file = data / "master.key"
    key_file.write_text(base64.b64encode(bytes(32)).decode())
    key_file.chmod(0o640)
    result = _serve("--data-dir", str(data), "--port", "0")
    assert result.returncode == EXIT_USAGE, result.stderr
    assert b"Traceback" not in result.stderr
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("keystream-server: error: cannot start: ")
    assert "master.key" in lines[0] and "chmod 600" in lines[0]
    assert not (data / "keystore.db").exists()  # refused before the keystore was opened


def test_serve_does_not_echo_a_malformed_secret(tmp_path: Path) -> None:
    """Security review M1: a typo'd root token (often the real one) must not reach the start-up error."""
    secret = "ks_zz_MySuperSecretRootToken123"
    result = _serve("--data-dir", str(tmp_path / "data"), "--port", "0", env={"KEYSTREAM_ROOT_TOKEN": secret})
    assert result.returncode == EXIT_USAGE
    assert b"invalid settings" in result.stderr and b"root_token" in result.stderr
    assert b"MySuperSecret" not in result.stderr + result.stdout


def test_serve_refuses_a_prometheus_url_with_credentials_without_echoing_them(tmp_path: Path) -> None:
    """The console's browser would be handed the URL: a password in it is refused, and not repeated."""
    env = {"KEYSTREAM_UI_PROMETHEUS_URL": "http://ops:Hunter2Hunter2@prometheus:9090"}
    result = _serve("--data-dir", str(tmp_path / "data"), "--port", "0", env=env)
    assert result.returncode == EXIT_USAGE, result.stderr
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("keystream-server: error: cannot start: invalid settings: ")
    assert "KEYSTREAM_UI_PROMETHEUS_URL: must not hold a user or password" in lines[0], lines[0]
    assert b"Hunter2" not in result.stderr + result.stdout and b"ops:" not in result.stderr
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"KEYSTREAM_WORKERS": "abc"}, "KEYSTREAM_WORKERS: Input should be a valid integer"),
        ({"KEYSTREAM_PORT": "99999"}, "KEYSTREAM_PORT: Input should be less than or equal to 65535"),
        (
            {"KEYSTREAM_WORKERS": "0", "KEYSTREAM_LOG_LEVEL": "loud"},
            "KEYSTREAM_WORKERS: Input should be greater than or equal to 1; KEYSTREAM_LOG_LEVEL: ",
        ),
        ({"KEYSTREAM_TLS_CERT_FILE": "c.pem"}, "tls_cert_file and tls_key_file go together"),
    ],
    ids=["not an integer", "out of range", "two fields", "a rule over fields"],
)
def test_invalid_settings_are_one_line_naming_the_variable(
    tmp_path: Path, env: dict[str, str], expected: str
) -> None:
    """pydantic's own text was 5 lines for one bad field (with a documentation link) after a usage line."""
    result = _serve("--data-dir", str(tmp_path / "data"), env=env)
    assert result.returncode == EXIT_USAGE, result.stderr
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1, result.stderr.decode()
    assert lines[0].startswith("keystream-server: error: cannot start: invalid settings: "), lines[0]
    assert expected in lines[0], lines[0]
    assert "pydantic" not in lines[0]
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_in_use_is_one_line_and_exit_2(tmp_path: Path, workers: str) -> None:
    """A second `make run` died with a 21-line traceback (OSError: [Errno 98]) and exit 1 (2 workers) or
    uvicorn's log line and exit 3 (1 worker); both are refused before the first-start banner now."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        result = _serve(
            "--data-dir", str(tmp_path / "data"), "--port", str(port), "--workers", workers,
            env={"KEYSTREAM_MASTER_KEY": base64.b64encode(bytes(32)).decode()},
        )  # fmt: skip
    assert result.returncode == EXIT_USAGE, result.stderr
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and b"Traceback" not in result.stderr, result.stderr.decode()
    assert lines[0] == (
        f"keystream-server: error: cannot start: cannot listen on KEYSTREAM_HOST 127.0.0.1 KEYSTREAM_PORT "
        f"{port}: address already in use: another process listens there (stop it, or choose another "
        "KEYSTREAM_PORT)"
    )
    assert result.stdout == b""  # no banner: nothing was bootstrapped
    assert not (tmp_path / "data").exists()


def test_serve_help_states_the_settings_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    """Each default ``serve --help`` names is the setting's real default (workers follow the CPU count)."""
    from app.core.config import Settings

    with pytest.raises(SystemExit):
        admin.main(["serve", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    fields = Settings.model_fields
    assert f"KEYSTREAM_HOST, default {fields['host'].default}" in text
    assert f"KEYSTREAM_PORT, default {fields['port'].default}" in text
    assert f"KEYSTREAM_DATA_DIR, default ./{fields['data_dir'].default}" in text
    assert fields["workers"].default_factory is not None
    assert "KEYSTREAM_WORKERS, default: the CPUs this process may run on, at most 64" in text
    assert fields["workers"].metadata and "at most 64" in str(fields["workers"].description)


@pytest.mark.parametrize("case", ["missing", "a directory", "open to others"])
def test_an_unusable_master_key_file_is_one_line_naming_the_setting(tmp_path: Path, case: str) -> None:
    """The line said "cannot open master key file ..." without the variable that named the file."""
    key_file = tmp_path / "master.key"
    if case == "a directory":
        key_file.mkdir()
    elif case == "open to others":
        key_file.write_text(base64.b64encode(bytes(32)).decode())
        key_file.chmod(0o644)
    result = _serve(
        "--data-dir", str(tmp_path / "data"), "--port", "0", env={"KEYSTREAM_MASTER_KEY_FILE": str(key_file)}
    )
    assert result.returncode == EXIT_USAGE, result.stderr
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and b"Traceback" not in result.stderr, result.stderr.decode()
    prefix = "keystream-server: error: cannot start: KEYSTREAM_MASTER_KEY_FILE: "
    assert lines[0].startswith(
        (f"{prefix}master key file {key_file}", f"{prefix}cannot open master key file")
    ), lines[0]
    assert str(key_file) in lines[0]

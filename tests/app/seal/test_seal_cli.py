"""``operator init`` and ``serve`` with the pkcs11 seal, as subprocesses against a SoftHSM2 token.

``init`` creates the master key in the token once and records an audit line that ``audit verify`` accepts;
every refused start (library, token, PIN, key, a keystore sealed by another seal) is one line naming what
failed, exit code 2, no traceback and no PIN.
"""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path

from app.admin import EXIT_OK, EXIT_USAGE
from tests.admin_process import run_admin
from tests.softhsm import SoftHsmToken


def run(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``python -m app.admin ARGS`` with no ``KEYSTREAM_*`` settings but ``env``."""
    return run_admin(*args, env=env)


def one_line_error(result: subprocess.CompletedProcess[str], secret: str) -> str:
    """The one error line of a refused command; ``secret`` (a PIN, a key; ``"-"``: none) is not printed."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("keystream-server: error: "), result.stderr
    assert "Traceback" not in result.stderr
    assert secret == "-" or secret not in result.stderr + result.stdout
    return lines[0]


def pkcs11_env(token: SoftHsmToken, data_dir: Path, **overrides: str) -> dict[str, str]:
    return {**token.environment(), "KEYSTREAM_DATA_DIR": str(data_dir), **overrides}


def serve_refusal(env: dict[str, str], pin: str) -> str:
    result = run("serve", "--host", "127.0.0.1", "--port", "0", env=env)
    assert result.returncode == EXIT_USAGE, result.stderr
    return one_line_error(result, pin)


def test_init_creates_the_key_once_and_audits_it(token: SoftHsmToken, tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    env = pkcs11_env(token, tmp_path / "data", KEYSTREAM_AUDIT_LOG=str(log))
    first = run("operator", "init", env=env)
    assert first.returncode == EXIT_OK, first.stderr
    assert "created the master key in it" in first.stdout
    again = run("operator", "init", env=env)
    assert again.returncode == EXIT_OK, again.stderr
    assert "already there" in again.stdout
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and '"operation":"init"' in lines[0].replace(" ", "")
    assert not (tmp_path / "data" / "master.key").exists()  # nothing of the file seal was made
    verified = run("audit", "verify", str(log), env=env)
    assert verified.returncode == EXIT_OK, verified.stderr


def test_serve_refuses_with_one_line(token: SoftHsmToken, tmp_path: Path) -> None:
    data = tmp_path / "data"
    line = serve_refusal(pkcs11_env(token, data), token.pin)
    assert "KEYSTREAM_PKCS11_KEY_LABEL" in line and "operator init" in line
    assert run("operator", "init", env=pkcs11_env(token, data)).returncode == EXIT_OK
    line = serve_refusal(pkcs11_env(token, data, KEYSTREAM_PKCS11_PIN="9876"), "9876")
    assert "KEYSTREAM_PKCS11_PIN" in line and "refused the PIN" in line
    line = serve_refusal(pkcs11_env(token, data, KEYSTREAM_PKCS11_TOKEN_LABEL="absent"), token.pin)
    assert "KEYSTREAM_PKCS11_TOKEN_LABEL" in line and "'absent'" in line
    line = serve_refusal(pkcs11_env(token, data, KEYSTREAM_PKCS11_LIB=str(tmp_path / "none.so")), token.pin)
    assert "KEYSTREAM_PKCS11_LIB" in line
    line = serve_refusal(pkcs11_env(token, data, KEYSTREAM_PKCS11_KEY_LABEL="other"), token.pin)
    assert "KEYSTREAM_PKCS11_KEY_LABEL" in line and "'other'" in line


def test_a_keystore_of_another_seal_is_refused(token: SoftHsmToken, tmp_path: Path) -> None:
    data = tmp_path / "data"
    master = base64.b64encode(os.urandom(32)).decode()
    file_env = {"KEYSTREAM_DATA_DIR": str(data), "KEYSTREAM_MASTER_KEY": master}
    assert run("operator", "init", env=file_env).returncode == EXIT_OK
    init = run("operator", "init", env=pkcs11_env(token, data))
    assert init.returncode == EXIT_USAGE
    line = one_line_error(init, token.pin)
    assert "is sealed by the file seal" in line and "migrate-seal --to pkcs11" in line
    line = serve_refusal(pkcs11_env(token, data), token.pin)
    assert "is sealed by the file seal" in line
    other = base64.b64encode(os.urandom(32)).decode()
    line = serve_refusal({**file_env, "KEYSTREAM_MASTER_KEY": other}, other)
    assert "the master key does not match keystore" in line
    assert master not in line

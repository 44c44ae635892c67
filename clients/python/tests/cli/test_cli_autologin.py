"""``keystream`` logging in by itself (``KEYSTREAM_ROLE`` and ``KEYSTREAM_JWT_FILE``, no token) against a real
server: a command runs with the login's token; a bad file is exit code 5 naming the file, a refused login
exit code 1, and neither prints the JWT."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jwt_login import ROLE, configure, k8s_jwt
from keystream_cli import RunCli
from keystream_client.cli import EXIT_API_ERROR, EXIT_AUTH, EXIT_OK, EXIT_USAGE
from keystream_server import RunningServer


@pytest.fixture(scope="module", autouse=True)
def configured(server: RunningServer) -> None:
    configure(server.url, server.token)


def pod(jwt_file: Path) -> dict[str, str]:
    """The environment of a pod: a role and a JWT file, no token."""
    return {"KEYSTREAM_TOKEN": "", "KEYSTREAM_ROLE": ROLE, "KEYSTREAM_JWT_FILE": str(jwt_file)}


def test_a_command_logs_in_by_itself(cli: RunCli, tmp_path: Path) -> None:
    jwt_file = tmp_path / "keystream"
    jwt = k8s_jwt()
    jwt_file.write_text(jwt + "\n")
    created = cli("keys", "create", "login-cli-auto")
    assert created.returncode == EXIT_OK, created.stderr
    own = cli("tokens", "self", "--json", env=pod(jwt_file))
    assert own.returncode == EXIT_OK, own.stderr
    subject = "system:serviceaccount:apps:worker"
    assert json.loads(own.stdout)["metadata"] == {"role": ROLE, "subject": subject}
    sealed = cli("encrypt", "--key", "login-cli-auto", "--value", "from a pod", env=pod(jwt_file))
    assert sealed.returncode == EXIT_OK, sealed.stderr
    assert jwt.encode() not in own.stdout + own.stderr + sealed.stderr


def test_a_bad_file_or_a_refused_login(cli: RunCli, tmp_path: Path) -> None:
    missing = cli("keys", "list", env=pod(tmp_path / "absent"))
    assert missing.returncode == EXIT_AUTH
    assert b"the JWT file" in missing.stderr and b"cannot be read" in missing.stderr
    garbage = tmp_path / "garbage"
    garbage.write_text("ks_not-a-jwt-but-secret")
    not_a_jwt = cli("keys", "list", env=pod(garbage))
    assert not_a_jwt.returncode == EXIT_AUTH and b"does not hold a JWT" in not_a_jwt.stderr
    assert b"not-a-jwt-but-secret" not in not_a_jwt.stderr
    other = tmp_path / "other"
    jwt = k8s_jwt(namespace="other")
    other.write_text(jwt)
    refused = cli("keys", "list", env=pod(other))
    assert refused.returncode == EXIT_API_ERROR and b"matches none" in refused.stderr
    assert b"automatic login through role" in refused.stderr and jwt.encode() not in refused.stderr
    half = cli("keys", "list", env={"KEYSTREAM_TOKEN": "", "KEYSTREAM_ROLE": ROLE})
    assert half.returncode == EXIT_USAGE and b"without a JWT file" in half.stderr

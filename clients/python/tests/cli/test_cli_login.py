"""``keystream login jwt --role R --jwt-file F [--json]`` against a real server: the token on stdout, the
JWT never printed, refusals with the CLI's exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jwt_login import ROLE, configure, k8s_jwt
from keystream_cli import RunCli
from keystream_server import RunningServer


@pytest.fixture(scope="module", autouse=True)
def configured(server: RunningServer) -> None:
    configure(server.url, server.token)


def test_login_jwt_prints_the_token(cli: RunCli, tmp_path: Path) -> None:
    jwt_file = tmp_path / "token"
    jwt = k8s_jwt()
    jwt_file.write_text(jwt + "\n")  # as the kubelet's file may end
    no_token = {"KEYSTREAM_TOKEN": ""}
    printed = cli("login", "jwt", "--role", ROLE, "--jwt-file", str(jwt_file), env=no_token)
    assert printed.returncode == 0, printed.stderr
    token = printed.stdout.decode().strip()
    assert token.startswith("ks_") and b"subject system:serviceaccount:apps:worker" in printed.stderr
    own = cli("tokens", "self", "--json", env={"KEYSTREAM_TOKEN": token})
    assert json.loads(own.stdout)["metadata"]["role"] == ROLE
    as_json = cli("login", "jwt", "--role", ROLE, "--jwt-file", str(jwt_file), "--json", env=no_token)
    answer = json.loads(as_json.stdout)
    assert answer["token"].startswith("ks_") and answer["metadata"]["role"] == ROLE
    for result in (printed, as_json):
        assert jwt.encode() not in result.stdout + result.stderr


def test_login_jwt_refusals(cli: RunCli, tmp_path: Path) -> None:
    jwt_file = tmp_path / "token"
    jwt_file.write_text(k8s_jwt(namespace="other"))
    refused = cli("login", "jwt", "--role", ROLE, "--jwt-file", str(jwt_file))
    assert refused.returncode == 1 and b"matches none" in refused.stderr
    missing = cli("login", "jwt", "--role", ROLE, "--jwt-file", str(tmp_path / "absent"))
    assert missing.returncode == 2 and b"cannot read the JWT file" in missing.stderr

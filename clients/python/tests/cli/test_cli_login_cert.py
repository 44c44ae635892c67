"""``keystream login cert --role R [--json]`` against a real server with mTLS: the token on stdout for the
certificate given with ``--client-cert``/``--client-key`` (or the environment), refusals with the CLI's exit
codes."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from cert_login import ROLE, SUBJECT, CertServer, cert_server
from keystream_cli import CLI_TIMEOUT, KEYSTREAM
from keystream_client.cli import EXIT_API_ERROR, EXIT_CONNECTION, EXIT_OK
from keystream_server import REPO


@pytest.fixture(scope="module")
def running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CertServer]:
    with cert_server(tmp_path_factory.mktemp("cli-cert-login")) as started:
        yield started


def run(running: CertServer, *args: str, **env: str) -> subprocess.CompletedProcess[bytes]:
    environment = running.server.env()
    environment.update({"KEYSTREAM_TOKEN": "", "KEYSTREAM_CACERT": str(running.pki.ca), **env})
    return subprocess.run(
        [*KEYSTREAM, *args], cwd=REPO, env=environment, capture_output=True, timeout=CLI_TIMEOUT, check=False
    )


def test_login_cert_prints_the_token(running: CertServer) -> None:
    certificate = ["--client-cert", str(running.pki.client_cert), "--client-key", str(running.pki.client_key)]
    printed = run(running, "login", "cert", "--role", ROLE, *certificate)
    assert printed.returncode == EXIT_OK, printed.stderr
    token = printed.stdout.decode().strip()
    assert token.startswith("ks_") and f"role {ROLE}; subject {SUBJECT}".encode() in printed.stderr
    own = run(running, "tokens", "self", "--json", *certificate, KEYSTREAM_TOKEN=token)
    assert own.returncode == EXIT_OK, own.stderr
    assert json.loads(own.stdout)["metadata"] == {"role": ROLE, "subject": SUBJECT}
    from_environment = {
        "KEYSTREAM_CLIENT_CERT": str(running.pki.client_cert),
        "KEYSTREAM_CLIENT_KEY": str(running.pki.client_key),
    }
    as_json = run(running, "login", "cert", "--role", ROLE, "--json", **from_environment)
    assert as_json.returncode == EXIT_OK, as_json.stderr
    answer = json.loads(as_json.stdout)
    assert answer["token"].startswith("ks_") and answer["metadata"] == {"role": ROLE, "subject": SUBJECT}


def test_login_cert_refusals(running: CertServer) -> None:
    stranger = ["--client-cert", str(running.stranger[0]), "--client-key", str(running.stranger[1])]
    refused = run(running, "login", "cert", "--role", ROLE, *stranger)
    assert refused.returncode == EXIT_API_ERROR and b"login refused" in refused.stderr
    assert refused.stdout == b"" and b"Traceback" not in refused.stderr
    no_certificate = run(running, "login", "cert", "--role", ROLE)  # the server closes the connection
    assert no_certificate.returncode == EXIT_CONNECTION and b"Traceback" not in no_certificate.stderr
    assert no_certificate.stdout == b""

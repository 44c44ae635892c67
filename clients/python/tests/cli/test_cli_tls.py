"""``keystream`` over https: ``--cacert`` (and ``KEYSTREAM_CACERT``), ``--client-cert``/``--client-key`` for
mTLS, and one-line errors for a wrong CA or a missing file; servers with certificates from :mod:`tls_ca`."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import keystream_server
from keystream_cli import CLI_TIMEOUT, KEYSTREAM
from keystream_client.cli import EXIT_CONNECTION, EXIT_OK, EXIT_USAGE
from keystream_server import REPO, RunningServer
from tls_ca import TlsFiles, make_ca_files


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_ca_files(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def tls_server(pki: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("cli-tls")
    server = keystream_server.start(base / "data", base / "server.log", pki)
    try:
        yield server
    finally:
        keystream_server.stop(server.process)


@pytest.fixture(scope="module")
def mtls_server(pki: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    base = tmp_path_factory.mktemp("cli-mtls")
    server = keystream_server.start(base / "data", base / "server.log", pki, mtls=True)
    try:
        yield server
    finally:
        keystream_server.stop(server.process)


def run(
    server: RunningServer, *args: str, stdin: bytes = b"", **env: str
) -> subprocess.CompletedProcess[bytes]:
    environment = server.env()
    environment.update(env)
    return subprocess.run(
        [*KEYSTREAM, *args],
        cwd=REPO,
        env=environment,
        input=stdin,
        capture_output=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


def one_error_line(result: subprocess.CompletedProcess[bytes]) -> str:
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], result.stderr.decode()
    return lines[0]


def test_cacert_round_trip(tls_server: RunningServer, pki: TlsFiles) -> None:
    assert run(tls_server, "--cacert", str(pki.ca), "keys", "create", "cli-tls").returncode == EXIT_OK
    plaintext = os.urandom(500_000)
    sealed = run(
        tls_server, "encrypt", "--key", "cli-tls", "--cacert", str(pki.ca), "-", "-", stdin=plaintext
    )
    assert sealed.returncode == EXIT_OK, sealed.stderr
    opened = run(
        tls_server, "decrypt", "--key", "cli-tls", "-", "-", stdin=sealed.stdout, KEYSTREAM_CACERT=str(pki.ca)
    )
    assert opened.returncode == EXIT_OK, opened.stderr
    assert opened.stdout == plaintext


def test_wrong_ca_fails_with_one_line(tls_server: RunningServer, pki: TlsFiles, tmp_path: Path) -> None:
    (tmp_path / "in").write_bytes(b"data")
    into, out = str(tmp_path / "in"), str(tmp_path / "out")
    for args in (
        ["--cacert", str(pki.other_ca), "keys", "list"],
        ["encrypt", "--key", "x", "--cacert", str(pki.other_ca), into, out],
    ):
        result = run(tls_server, *args, stdin=b"data")
        assert result.returncode == EXIT_CONNECTION, result.stderr
        line = one_error_line(result)
        assert not (tmp_path / "out").exists()
        assert (
            line.startswith("keystream: error: cannot reach the service")
            and "certificate verify failed" in line
        )
    missing = tmp_path / "nope.pem"
    result = run(tls_server, "--cacert", str(missing), "keys", "list")
    assert result.returncode == EXIT_USAGE
    # A file that cannot be loaded is a runtime error: one line, no usage banner (issue 11 item 14).
    assert one_error_line(result) == f"keystream: error: CA bundle {missing}: No such file or directory"


def test_mtls_client_certificate(mtls_server: RunningServer, pki: TlsFiles) -> None:
    ca = ["--cacert", str(pki.ca)]
    client = ["--client-cert", str(pki.client_cert), "--client-key", str(pki.client_key)]
    assert run(mtls_server, *ca, *client, "keys", "create", "cli-mtls").returncode == EXIT_OK
    sealed = run(mtls_server, *ca, *client, "encrypt", "--key", "cli-mtls", "-", "-", stdin=b"secret data")
    assert sealed.returncode == EXIT_OK, sealed.stderr
    by_env = run(
        mtls_server,
        "decrypt",
        "--key",
        "cli-mtls",
        "-",
        "-",
        stdin=sealed.stdout,
        KEYSTREAM_CACERT=str(pki.ca),
        KEYSTREAM_CLIENT_CERT=str(pki.client_cert),
        KEYSTREAM_CLIENT_KEY=str(pki.client_key),
    )
    assert by_env.returncode == EXIT_OK and by_env.stdout == b"secret data", by_env.stderr
    refused = run(mtls_server, *ca, "keys", "list")
    assert refused.returncode == EXIT_CONNECTION
    assert "requires a client certificate" in one_error_line(refused)
    no_cert = run(mtls_server, *ca, "--client-key", str(pki.client_key), "keys", "list")
    assert no_cert.returncode == EXIT_USAGE and b"--client-key needs --client-cert" in no_cert.stderr


def test_http_url_against_an_https_server_says_to_use_https(
    tls_server: RunningServer, tmp_path: Path
) -> None:
    """A TLS server closes a plain HTTP request without answering: that read as a response cut short (exit 4,
    the integrity code), and for streams h11's internal words leaked into the message."""
    plain = tls_server.url.replace("https://", "http://")
    authority = tls_server.url.removeprefix("https://")
    (tmp_path / "in").write_bytes(os.urandom(300_000))
    (tmp_path / "items").write_bytes(b'{"plaintext": "aGk="}\n')
    commands: list[tuple[list[str], bytes]] = [
        (["keys", "list"], b""),
        (["datakey", "--key", "x"], b""),
        (["encrypt", "--key", "x", "--value", "hi"], b""),
        (["encrypt", "--key", "x", str(tmp_path / "in"), str(tmp_path / "out")], b""),
        (["decrypt", "--key", "x", "-", "-"], os.urandom(300_000)),
        (["batch", "encrypt", "--key", "x", "--input", str(tmp_path / "items")], b""),
    ]
    for args, stdin in commands:
        result = run(tls_server, *args, stdin=stdin, KEYSTREAM_URL=plain)
        assert result.returncode == EXIT_CONNECTION, (args, result.stderr)
        line = one_error_line(result)
        assert f"the server at {authority} speaks TLS (HTTPS)" in line, (args, line)
        assert f"use https://{authority}" in line, (args, line)
        assert "cut short" not in line and "ConnectionClosed" not in line and "role=" not in line, line
        if args[0] != "batch":  # batch notes any stdout failure as incomplete output
            assert "discard" not in line, line  # nothing was written
        assert not (tmp_path / "out").exists()

"""HTTPS against a real server with real handshakes: certificates from a throwaway CA made in the test.

Covers: a sealed stream round trip through the client and through curl on two workers (each worker must
serve TLS), TLS 1.1 refused while 1.2 works, mTLS (no client certificate: no connection; with one: the token
is still required), the refusal of plain HTTP on a non-loopback address and its override, and one-line
start-up errors for unusable TLS files.
"""

from __future__ import annotations

import os
import shutil
import socket
import ssl
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bench.service_process import (
    MASTER_KEY,
    REPO,
    ROOT_TOKEN,
    Server,
    ServerTlsFiles,
    free_port,
    start_server,
    stop_server,
)
from keystream_client import KeystreamClient, KeystreamConnectionError
from tls_ca import TlsFiles, make_ca_files

#: A documentation address (RFC 5737) that is no interface of this machine: the refusal happens before any
#: bind, and the allowed start fails to bind it, so no test ever listens beyond loopback.
NON_LOOPBACK = "192.0.2.1"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    return make_ca_files(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def https_server(pki: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """Two workers serving HTTPS (no client certificates)."""
    base = tmp_path_factory.mktemp("https")
    tls = ServerTlsFiles(pki.server_cert, pki.server_key, pki.ca)
    running = start_server(base / "data", base / "server.log", tls=tls, KEYSTREAM_WORKERS="2")
    try:
        yield running
    finally:
        stop_server(running)


@pytest.fixture(scope="module")
def mtls_server(pki: TlsFiles, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("mtls")
    tls = ServerTlsFiles(
        pki.server_cert, pki.server_key, pki.ca, pki.ca, client_cert=(pki.client_cert, pki.client_key)
    )
    running = start_server(base / "data", base / "server.log", tls=tls)
    try:
        yield running
    finally:
        stop_server(running)


def test_sealed_stream_round_trip_over_https_on_every_worker(https_server: Server, pki: TlsFiles) -> None:
    plaintext = os.urandom((3 << 20) + 12345)
    with KeystreamClient(https_server.url, ROOT_TOKEN, verify=str(pki.ca)) as ks:
        ks.create_key("tls-stream", segment_size=64 * 1024)
        # Fresh connections spread over both workers (SO_REUSEPORT); each must complete a handshake.
        for _ in range(8):
            sealed = ks.encrypt("tls-stream", plaintext, associated_data=b"over https")
            assert ks.decrypt("tls-stream", sealed.data, associated_data=b"over https").data == plaintext
    # 24 fresh connections: the kernel hashes each to one of the two workers' sockets, so a worker without
    # TLS would fail about half of them (all 24 landing on one worker: odds 2**-23).
    for _ in range(24):
        with https_server.client() as client:
            response = client.get("/healthz")
            assert response.status_code == 200
            assert response.url.scheme == "https"


def test_curl_with_cacert_round_trip(https_server: Server, pki: TlsFiles, tmp_path: Path) -> None:
    assert shutil.which("curl"), "curl is missing: make tools (scripts/install-tools.sh) installs it"
    auth = f"Authorization: Bearer {ROOT_TOKEN}"
    octets = "Content-Type: application/octet-stream"
    created = subprocess.run(
        ["curl", "-sS", "--fail-with-body", "--cacert", str(pki.ca), "-H", auth, "-H",
         "Content-Type: application/json", "-d", '{"name": "curl-tls"}', f"{https_server.url}/v1/keys"],
        capture_output=True, timeout=30,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    plaintext = os.urandom(200_000)
    (tmp_path / "plain").write_bytes(plaintext)
    base = ["curl", "-sS", "--fail-with-body", "--cacert", str(pki.ca), "-H", auth, "-H", octets]
    sealed = subprocess.run(
        [*base, "--data-binary", f"@{tmp_path / 'plain'}", f"{https_server.url}/v1/keys/curl-tls/encrypt"],
        capture_output=True, timeout=30, check=True,
    )  # fmt: skip
    opened = subprocess.run(
        [*base, "--data-binary", "@-", f"{https_server.url}/v1/keys/curl-tls/decrypt"],
        input=sealed.stdout, capture_output=True, timeout=30, check=True,
    )  # fmt: skip
    assert opened.stdout == plaintext
    untrusted = subprocess.run(
        ["curl", "-sS", f"{https_server.url}/healthz"], capture_output=True, timeout=30
    )  # the system store does not know the throwaway CA
    assert untrusted.returncode == 60, untrusted.stderr
    plain = subprocess.run(
        ["curl", "-sS", f"http://127.0.0.1:{https_server.port}/healthz"], capture_output=True, timeout=30
    )
    assert plain.returncode != 0 and b"ok" not in plain.stdout


def _handshake(server: Server, context: ssl.SSLContext) -> str:
    with (
        socket.create_connection((server.host, server.port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        answer = tls.recv(4096)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        return str(tls.version())


def _context_for(pki: TlsFiles, version: ssl.TLSVersion) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca))
    # Let this client offer old versions at all (OpenSSL's default security level forbids them client-side),
    # so that the refusal comes from the server.
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLS 1.0 and 1.1 are: that is the point
        context.minimum_version = version
        context.maximum_version = version
    return context


def test_tls_1_1_is_refused_and_1_2_works(https_server: Server, pki: TlsFiles) -> None:
    assert _handshake(https_server, _context_for(pki, ssl.TLSVersion.TLSv1_2)) == "TLSv1.2"
    assert _handshake(https_server, _context_for(pki, ssl.TLSVersion.TLSv1_3)) == "TLSv1.3"
    for old in (ssl.TLSVersion.TLSv1_1, ssl.TLSVersion.TLSv1):
        # The same client settings but the version: the server ends the handshake (an alert or a bare close).
        with pytest.raises((ssl.SSLError, ConnectionError)):
            _handshake(https_server, _context_for(pki, old))


def test_mtls_requires_a_client_certificate_and_still_a_token(mtls_server: Server, pki: TlsFiles) -> None:
    without = ServerTlsFiles(pki.server_cert, pki.server_key, pki.ca).ssl_context()
    # TLS 1.3 finishes the client's side of the handshake before the server checks the certificate, so the
    # refusal (an alert) shows on the first read.
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{mtls_server.url}/healthz", verify=without, timeout=10)
    foreign = make_ca_files(pki.ca.parent / "foreign")
    stranger = ssl.create_default_context(cafile=str(pki.ca))
    stranger.load_cert_chain(
        foreign.client_cert, foreign.client_key
    )  # issued by a CA the server does not trust
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{mtls_server.url}/healthz", verify=stranger, timeout=10)

    verify = mtls_server.verify
    assert httpx.get(f"{mtls_server.url}/healthz", verify=verify, timeout=10).status_code == 200
    # The certificate opens the connection; the API still needs a token.
    assert httpx.get(f"{mtls_server.url}/v1/keys", verify=verify, timeout=10).status_code == 401
    with mtls_server.client() as client:
        assert client.get("/v1/keys").status_code == 200
    with KeystreamClient(
        mtls_server.url, ROOT_TOKEN, verify=str(pki.ca), cert=(str(pki.client_cert), str(pki.client_key))
    ) as ks:
        ks.create_key("mtls-key")
        sealed = ks.encrypt("mtls-key", b"x" * 300_000)  # the h11 streaming transport presents it too
        assert ks.decrypt("mtls-key", sealed.data).data == b"x" * 300_000
    with KeystreamClient(mtls_server.url, ROOT_TOKEN, verify=str(pki.ca)) as ks:
        with pytest.raises(KeystreamConnectionError, match="requires a client certificate"):
            ks.encrypt("mtls-key", b"no certificate")  # the h11 transport
        with pytest.raises(KeystreamConnectionError, match="requires a client certificate"):
            ks.list_keys()  # httpx


def _serve(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``keystream-server serve`` in a subprocess (it must stop on its own); its exit code and output."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    full.pop("PROMETHEUS_MULTIPROC_DIR", None)
    full.update(
        {
            "KEYSTREAM_DATA_DIR": str(tmp_path / "data"),
            "KEYSTREAM_MASTER_KEY": MASTER_KEY,
            "KEYSTREAM_ROOT_TOKEN": ROOT_TOKEN,
            "KEYSTREAM_WORKERS": "1",
            "KEYSTREAM_PORT": str(free_port()),
            **env,
        }
    )
    return subprocess.run(
        [sys.executable, "-m", "app.admin", "serve"],
        cwd=REPO,
        env=full,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_plain_http_on_a_non_loopback_address_is_refused(tmp_path: Path) -> None:
    result = _serve(tmp_path, KEYSTREAM_HOST=NON_LOOPBACK)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "refusing plain HTTP on 192.0.2.1" in lines[0]
    assert "KEYSTREAM_TLS_DISABLE=true" in lines[0]
    assert not (tmp_path / "data").exists()  # refused before anything was created


def test_tls_disable_allows_plain_http_with_a_warning(tmp_path: Path) -> None:
    # Allowed: the start gets past the check and logs the warning, then fails to bind the foreign address.
    result = _serve(tmp_path, KEYSTREAM_HOST=NON_LOOPBACK, KEYSTREAM_TLS_DISABLE="true")
    output = result.stdout + result.stderr
    assert "refusing" not in output
    assert "WARNING:  serving plain HTTP on 192.0.2.1 (KEYSTREAM_TLS_DISABLE=true)" in output, output
    # The start-up failure (192.0.2.1 is no address of this machine) is one line naming the setting.
    assert result.returncode == 2, output
    errors = [line for line in result.stderr.splitlines() if line.startswith("keystream-server: error:")]
    assert len(errors) == 1 and "Traceback" not in output, output
    assert "cannot listen on KEYSTREAM_HOST 192.0.2.1" in errors[0]


def test_loopback_stays_plain_http_without_a_warning(tmp_path: Path) -> None:
    running = start_server(tmp_path / "data", tmp_path / "server.log", KEYSTREAM_LOG_LEVEL="info")
    try:
        assert httpx.get(f"{running.url}/healthz", timeout=5).status_code == 200
        assert running.url.startswith("http://127.0.0.1:")
    finally:
        stop_server(running)
    assert "plain HTTP" not in running.log.read_text()


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("missing cert", "KEYSTREAM_TLS_CERT_FILE {dir}/missing.pem: No such file or directory"),
        ("missing key", "KEYSTREAM_TLS_KEY_FILE {dir}/missing.key: No such file or directory"),
        ("mismatched key", "not a PEM certificate chain and its matching private key"),
        ("not PEM", "not a PEM certificate chain and its matching private key"),
        ("missing client CA", "KEYSTREAM_TLS_CLIENT_CA_FILE {dir}/missing-ca.pem: No such file or directory"),
        ("empty client CA", "KEYSTREAM_TLS_CLIENT_CA_FILE"),
        ("cert without key", "tls_cert_file and tls_key_file go together"),
    ],
)
def test_bad_tls_files_stop_the_start_with_one_line(
    pki: TlsFiles, tmp_path: Path, case: str, expected: str
) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    cert, key = str(pki.server_cert), str(pki.server_key)
    env = {
        "missing cert": {
            "KEYSTREAM_TLS_CERT_FILE": str(tmp_path / "missing.pem"),
            "KEYSTREAM_TLS_KEY_FILE": key,
        },
        "missing key": {
            "KEYSTREAM_TLS_CERT_FILE": cert,
            "KEYSTREAM_TLS_KEY_FILE": str(tmp_path / "missing.key"),
        },
        "mismatched key": {"KEYSTREAM_TLS_CERT_FILE": cert, "KEYSTREAM_TLS_KEY_FILE": str(pki.client_key)},
        "not PEM": {"KEYSTREAM_TLS_CERT_FILE": str(junk), "KEYSTREAM_TLS_KEY_FILE": key},
        "missing client CA": {
            "KEYSTREAM_TLS_CERT_FILE": cert,
            "KEYSTREAM_TLS_KEY_FILE": key,
            "KEYSTREAM_TLS_CLIENT_CA_FILE": str(tmp_path / "missing-ca.pem"),
        },
        "empty client CA": {
            "KEYSTREAM_TLS_CERT_FILE": cert,
            "KEYSTREAM_TLS_KEY_FILE": key,
            "KEYSTREAM_TLS_CLIENT_CA_FILE": str(junk),
        },
        "cert without key": {"KEYSTREAM_TLS_CERT_FILE": cert},
    }[case]
    result = _serve(tmp_path, KEYSTREAM_HOST="127.0.0.1", **env)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("keystream-server: error:")]
    assert len(errors) == 1, result.stderr
    assert expected.format(dir=tmp_path) in errors[0] or expected in result.stderr, result.stderr
    assert "PRIVATE KEY" not in result.stderr

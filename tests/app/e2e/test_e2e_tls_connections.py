"""Connections that never complete a TLS handshake, against a real two-worker HTTPS server with 1,024 fds.

uvicorn's TLS (uvloop's SSL protocol) hands a connection to the HTTP protocol only once its handshake is
complete, so the connection cap and the idle eviction never saw a silent connection, and uvloop gives a
handshake 60 s: about 2,000 silent TCP connections (1,024 fds per worker) left ``/healthz`` unanswered
(0 of 5) for a minute, as ``accept`` failed for want of a descriptor.
"""

from __future__ import annotations

import errno
import resource
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.service_process import Server, ServerTlsFiles, start_server, stop_server
from tls_ca import make_ca_files

pytestmark = [pytest.mark.e2e, pytest.mark.serial]  # a 3,000-connection flood and handshake timeouts: alone
OPEN_FILES = 1024  # each worker's fd limit: max_connections defaults to 1024 - 64
SILENT = 3000  # more than both workers' descriptors together
HANDSHAKE_TIMEOUT = 5.0  # the default: the flood is still held (evictions needed) while the probes run


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("tls-limits")
    pki = make_ca_files(base / "pki")
    tls = ServerTlsFiles(pki.server_cert, pki.server_key, pki.ca)
    server = start_server(
        base / "data",
        base / "server.log",
        tls=tls,
        open_files=OPEN_FILES,
        KEYSTREAM_WORKERS="2",
        KEYSTREAM_HANDSHAKE_TIMEOUT=str(HANDSHAKE_TIMEOUT),
    )
    try:
        yield server
    finally:
        stop_server(server)


def _raise_own_fd_limit(needed: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < needed:
        if hard != resource.RLIM_INFINITY and hard < needed:
            pytest.fail(f"this test needs {needed} file descriptors; the hard limit is {hard}")
        resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))


def _open_silent(server: Server, count: int) -> list[socket.socket]:
    """``count`` TCP connections that send nothing (non-blocking connects, so a full backlog cannot stall)."""
    sockets = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        code = sock.connect_ex((server.host, server.port))
        assert code in (0, errno.EINPROGRESS), errno.errorcode.get(code, code)
        sockets.append(sock)
    return sockets


def _healthz_over_tls(server: Server, context: ssl.SSLContext) -> bool:
    try:
        with (
            socket.create_connection((server.host, server.port), timeout=5) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            return tls.recv(4096).startswith(b"HTTP/1.1 200 ")
    except (OSError, ssl.SSLError):
        return False


def test_silent_connections_leave_healthz_answering_over_tls(tls_server: Server) -> None:
    assert tls_server.tls is not None
    context = tls_server.tls.ssl_context()
    _raise_own_fd_limit(SILENT + 256)
    silent = _open_silent(tls_server, SILENT)
    try:
        time.sleep(1.0)  # the workers accept (and evict) the flood
        answered = [_healthz_over_tls(tls_server, context) for _ in range(5)]
    finally:
        for sock in silent:
            sock.close()
    assert answered == [True] * 5  # before: [False] * 5 (accept failed: EMFILE) for uvloop's 60 s
    time.sleep(0.5)
    assert "idle evicted at max_connections" in Path(tls_server.log).read_text()


def test_a_handshake_that_never_finishes_is_closed_at_its_deadline(tls_server: Server) -> None:
    with socket.create_connection((tls_server.host, tls_server.port)) as sock:
        sock.sendall(b"\x16\x03\x01")  # the first bytes of a ClientHello, then nothing
        sock.settimeout(HANDSHAKE_TIMEOUT + 10)
        start = time.perf_counter()
        try:
            received = sock.recv(4096)
        except ConnectionResetError:
            received = b""
        seconds = time.perf_counter() - start
    assert received == b""
    assert seconds < HANDSHAKE_TIMEOUT + 2, seconds  # before: uvloop's 60 s

"""Start and stop a real Keystream server (``app.server.serve``) in a subprocess on 127.0.0.1 and a free port.

Shared by the service benchmark and the end-to-end tests.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import os
import resource
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import httpx

ROOT_TOKEN = "ks_00112233aabbccdd_service-root-secret-0123456789abcdef"
MASTER_KEY = base64.b64encode(bytes(range(100, 132))).decode()
REPO = Path(__file__).resolve().parents[1]


@functools.cache
def default_verify() -> ssl.SSLContext:
    """httpx's default ``verify=`` (its CA bundle, certificates verified), made once per process.

    Without a context httpx builds this one for every client it makes, ``httpx.get`` included, and reading the
    CA bundle is most of the cost of a client: 77 ms each on a loaded 2-core machine, against 0.5 ms with a
    context made once. A test that opens a fresh connection per request (so every worker of a server gets
    some) or polls ``/healthz`` makes hundreds of clients; one context serves them all (httpx only reads it).
    """
    return httpx.create_ssl_context()


def free_port() -> int:
    """A port nobody listens on right now (bound once and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True)
class ServerTlsFiles:
    """HTTPS for :func:`start_server`: the server's certificate and key, the CA that issued it (the probes
    verify against it) and, for mTLS, the client CA bundle the server requires plus a client certificate and
    key for the probes."""

    cert_file: Path
    key_file: Path
    ca_file: Path
    client_ca_file: Path | None = None
    client_cert: tuple[Path, Path] | None = None

    def env(self) -> dict[str, str]:
        """The ``KEYSTREAM_TLS_*`` settings."""
        env = {"KEYSTREAM_TLS_CERT_FILE": str(self.cert_file), "KEYSTREAM_TLS_KEY_FILE": str(self.key_file)}
        if self.client_ca_file is not None:
            env["KEYSTREAM_TLS_CLIENT_CA_FILE"] = str(self.client_ca_file)
        return env

    def ssl_context(self, *, client_cert: bool = True) -> ssl.SSLContext:
        """A client context trusting ``ca_file``, with the client certificate when there is one."""
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if client_cert and self.client_cert is not None:
            context.load_cert_chain(*self.client_cert)
        return context


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    host: str
    port: int
    log: Path
    tls: ServerTlsFiles | None = None

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {ROOT_TOKEN}"}

    @property
    def verify(self) -> ssl.SSLContext | bool:
        """httpx's ``verify=`` for this server (its CA and client certificate under TLS, else
        :func:`default_verify`)."""
        return self.tls.ssl_context() if self.tls is not None else default_verify()

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.auth, timeout=60, verify=self.verify)


def start_server(
    data_dir: Path,
    log: Path,
    *,
    root_token: str | None = ROOT_TOKEN,
    open_files: int | None = None,
    tls: ServerTlsFiles | None = None,
    settings: Mapping[str, str] | None = None,
    repo: Path = REPO,
    **env_overrides: str,
) -> Server:
    """Run ``serve()`` with ``KEYSTREAM_*`` overrides and wait (<= 30 s) until ``/healthz`` answers.

    ``repo`` is the checkout whose ``app`` runs (another one: a benchmark's baseline; it must be built).

    ``tls`` serves HTTPS with those files (``Server.url`` is then ``https://``; ``Server.client()`` verifies
    against ``tls.ca_file`` and presents ``tls.client_cert``).

    ``root_token=None`` lets the server generate one and print it (first-start banner) into ``log``.
    ``open_files`` sets the server's soft and hard ``RLIMIT_NOFILE`` (as a small systemd limit would).
    ``settings`` are ``KEYSTREAM_*`` overrides as a mapping (built by the caller), applied before
    ``env_overrides``.

    Raises:
        RuntimeError: the process exited or never became healthy (the log tail is in the message).
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(
        {
            "KEYSTREAM_DATA_DIR": str(data_dir),
            "KEYSTREAM_PORT": str(port),
            "KEYSTREAM_HOST": "127.0.0.1",
            "KEYSTREAM_MASTER_KEY": MASTER_KEY,
            "KEYSTREAM_LOG_LEVEL": "warning",
            "KEYSTREAM_TIMEOUT_GRACEFUL_SHUTDOWN": "3",
            # One worker unless a caller asks for more: tests inspect the server process itself (fds, RSS).
            "KEYSTREAM_WORKERS": "1",
        }
    )
    if root_token is not None:
        env["KEYSTREAM_ROOT_TOKEN"] = root_token
    if tls is not None:
        env.update(tls.env())
    env.update(settings or {})
    env.update(env_overrides)
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-c", "from app.server import serve; serve()"],
            cwd=repo,
            env=env,
            stdout=handle,
            stderr=subprocess.STDOUT,
            preexec_fn=None if open_files is None else lambda: _limit_open_files(open_files),
        )
    server = Server(process, "127.0.0.1", port, log, tls)
    verify = server.verify
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{server.url}/healthz", timeout=1, verify=verify).status_code == 200:
                return server
        except httpx.HTTPError:
            time.sleep(0.1)
    stop_server(server)
    raise RuntimeError(f"server did not start: {log.read_text()[-2000:]}")


def _limit_open_files(count: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (count, count))


def stop_server(server: Server) -> None:
    """SIGTERM, then SIGKILL after 15 s."""
    server.process.terminate()
    try:
        server.process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout=5)


@contextlib.contextmanager
def started_servers(
    count: int, data_dir: Path, log_dir: Path, **env_overrides: str
) -> Iterator[list[Server]]:
    """``count`` servers sharing one keystore, as replicas do: the SQLite file in ``data_dir``, or the
    database of a ``KEYSTREAM_DATABASE_URL`` override. Logs ``log_dir/replica-<i>.log``. Every server started
    is stopped on exit, also when a later one fails to start."""
    servers: list[Server] = []
    try:
        for index in range(count):
            servers.append(start_server(data_dir, log_dir / f"replica-{index}.log", settings=env_overrides))
        yield servers
    finally:
        for server in reversed(servers):
            stop_server(server)

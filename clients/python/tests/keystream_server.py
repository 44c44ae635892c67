"""A real Keystream server for the client and CLI tests: ``keystream-server serve`` in a subprocess.

Listens on 127.0.0.1 and a free port, keeps its keystore in a temp dir, uses a fixed root token
(``KEYSTREAM_ROOT_TOKEN``) and allows key import. ``start(..., tls=files)`` serves HTTPS with certificates
from :mod:`tls_ca` (and, with ``mtls=True``, requires client certificates from the same CA). Started
through the server distribution's console script (next to this interpreter), so that command is exercised
too. Used by ``client/``, ``cli/`` and the
distribution test (each starts one). The server distribution must be installed (``make test`` does it);
when it is not, :func:`start` raises and the tests fail.
"""

from __future__ import annotations

import base64
import functools
import os
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tls_ca import TlsFiles

ROOT_TOKEN = "ks_c11e0000cafe_client-cli-tests-root-secret-0123"
MASTER_KEY = base64.b64encode(bytes(range(1, 33))).decode()
REPO = Path(__file__).resolve().parents[3]
#: The server's console script in this interpreter's environment.
SERVER_SCRIPT = Path(sys.executable).parent / "keystream-server"
STARTUP_SECONDS = 30


def free_port() -> int:
    """A port that was free a moment ago on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RunningServer:
    """A started server process and how to reach it."""

    process: subprocess.Popen[bytes]
    url: str
    token: str
    log: Path
    backends: tuple[str, ...]
    tls: TlsFiles | None = None

    @property
    def fast_backend(self) -> str | None:
        """``aesni`` when the server has it, else None."""
        return "aesni" if "aesni" in self.backends else None

    def env(self) -> dict[str, str]:
        """Environment for a CLI subprocess talking to this server."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
        env.pop("PYTHONPATH", None)  # the client is installed; it must not need the server's source tree
        env.update({"KEYSTREAM_URL": self.url, "KEYSTREAM_TOKEN": self.token})
        return env


@functools.cache
def default_verify() -> ssl.SSLContext:
    """httpx's default ``verify=`` made once: httpx reads its whole CA bundle again for every client (or
    ``httpx.get``) made without one, most of a client's cost (77 ms on a loaded 2-core machine)."""
    return httpx.create_ssl_context()


def _verify(tls: TlsFiles | None, mtls: bool) -> ssl.SSLContext | bool:
    if tls is None:
        return default_verify()
    context = ssl.create_default_context(cafile=str(tls.ca))
    if mtls:
        context.load_cert_chain(tls.client_cert, tls.client_key)
    return context


def start(
    data_dir: Path,
    log: Path,
    tls: TlsFiles | None = None,
    *,
    mtls: bool = False,
    settings: dict[str, str] | None = None,
) -> RunningServer:
    """Start ``keystream-server serve`` and wait for ``/healthz``; ``settings`` adds ``KEYSTREAM_*``
    environment variables (e.g. lower batch limits).

    ``tls`` serves HTTPS with its server certificate (``url`` is then ``https://``); ``mtls`` also requires
    client certificates issued by ``tls.ca``.

    Raises:
        RuntimeError: the console script is missing, or the server exited or did not answer within
            STARTUP_SECONDS.
    """
    if not SERVER_SCRIPT.is_file():
        raise RuntimeError(f"{SERVER_SCRIPT} is missing: install the server distribution (pip install -e .)")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(
        {
            "KEYSTREAM_ROOT_TOKEN": ROOT_TOKEN,
            "KEYSTREAM_MASTER_KEY": MASTER_KEY,
            "KEYSTREAM_ALLOW_KEY_IMPORT": "true",
            "KEYSTREAM_LOG_LEVEL": "warning",
            "KEYSTREAM_TIMEOUT_GRACEFUL_SHUTDOWN": "3",
            # One worker: these tests check the client against one server's answers. With a worker per
            # CPU (the default) a token revoked through one worker is refused by the others within the
            # bounded staleness of docs/operations.md, not at once (test_e2e_propagation.py measures it).
            "KEYSTREAM_WORKERS": "1",
            "PYTHONPATH": str(REPO),
            **(settings or {}),
        }
    )
    if tls is not None:
        env["KEYSTREAM_TLS_CERT_FILE"] = str(tls.server_cert)
        env["KEYSTREAM_TLS_KEY_FILE"] = str(tls.server_key)
        if mtls:
            env["KEYSTREAM_TLS_CLIENT_CA_FILE"] = str(tls.ca)
    command = [str(SERVER_SCRIPT), "serve", "--host", "127.0.0.1", "--port", str(port)]
    command += ["--data-dir", str(data_dir)]
    with log.open("wb") as handle:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT)
    url = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    verify = _verify(tls, mtls)
    deadline = time.monotonic() + STARTUP_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited with {process.returncode}: {log.read_text()[-2000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=1, verify=verify).status_code == 200:
                listing = httpx.get(
                    f"{url}/v1/backends",
                    headers={"Authorization": f"Bearer {ROOT_TOKEN}"},
                    timeout=5,
                    verify=verify,
                ).json()
                backends = tuple(b["name"] for b in listing["backends"] if b["available"] and b["enabled"])
                return RunningServer(process, url, ROOT_TOKEN, log, backends, tls)
        except httpx.HTTPError:
            time.sleep(0.1)
    stop(process)
    raise RuntimeError(f"server did not start in {STARTUP_SECONDS} s: {log.read_text()[-2000:]}")


def stop(process: subprocess.Popen[bytes]) -> None:
    """Terminate the server process (kill after 15 s)."""
    if process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout=15)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=5)


def running(base: Path, settings: dict[str, str] | None = None) -> Iterator[RunningServer]:
    """Generator for a fixture: start, yield, stop."""
    server = start(base / "data", base / "server.log", settings=settings)
    try:
        yield server
    finally:
        stop(server.process)

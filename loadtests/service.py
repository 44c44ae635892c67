"""Start a throw-away Keystream process for a load test or an integration test.

The process listens on 127.0.0.1 on a free port, keeps its keystore in a temporary data directory that is
removed afterwards, and gets a random root token through ``KEYSTREAM_ROOT_TOKEN`` (passed in the environment,
never on a command line).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

#: The repository root (the service is started from here so ``app`` and ``aescore`` import).
REPO_ROOT = Path(__file__).resolve().parent.parent


class ServiceError(RuntimeError):
    """The service did not start, or died while it was needed."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, read it, close)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def new_root_token() -> str:
    """A root token in the service's ``ks_<hex id>_<secret>`` shape."""
    return f"ks_{secrets.token_hex(8)}_{secrets.token_hex(24)}"


def wait_for_http(url: str, timeout: float, process: subprocess.Popen[bytes] | None = None) -> None:
    """Poll ``url`` until it answers 200.

    Raises:
        ServiceError: ``process`` exited, or ``timeout`` seconds passed without a 200.
    """
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise ServiceError(f"process exited with code {process.returncode} before {url} answered")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
                last_error = f"status {response.status}"
        except (urllib.error.URLError, OSError) as exc:
            last_error = str(exc)
        time.sleep(0.1)
    raise ServiceError(f"{url} did not answer 200 within {timeout:.0f} s ({last_error})")


def stop_process(process: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
    """SIGTERM (graceful), then SIGKILL after ``timeout`` seconds; returns the exit code."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=timeout)
    return process.returncode


@dataclass
class Service:
    """A running Keystream process."""

    url: str
    token: str = field(repr=False)
    data_dir: Path
    log_path: Path
    process: subprocess.Popen[bytes] = field(repr=False)

    def log_tail(self, lines: int = 40) -> str:
        """The last lines of the service's combined stdout/stderr."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


@contextlib.contextmanager
def keystream_service(
    *,
    enabled_backends: str | None = None,
    workers: int = 1,
    extra_env: Mapping[str, str] | None = None,
    startup_timeout: float = 60.0,
    log_dir: Path | None = None,
) -> Iterator[Service]:
    """Run Keystream on 127.0.0.1 for the duration of the ``with`` block.

    Args:
        enabled_backends: ``KEYSTREAM_ENABLED_BACKENDS`` (comma-separated); ``None`` = the service's default
            (every available backend).
        workers: uvicorn worker processes.
        extra_env: more ``KEYSTREAM_*`` settings.
        startup_timeout: seconds to wait for ``/readyz``.
        log_dir: where to keep the service log (default: the temporary data directory's parent).

    Yields:
        The running service; it is stopped and its data directory removed when the block exits.

    Raises:
        ServiceError: the service did not become ready (the message includes the end of its log).
    """
    port = free_port()
    work_dir = Path(tempfile.mkdtemp(prefix="keystream-load-"))
    data_dir = work_dir / "data"
    log_path = (log_dir or work_dir) / "keystream-service.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    token = new_root_token()
    env = {key: value for key, value in os.environ.items() if not key.startswith("KEYSTREAM_")}
    env.update(
        {
            "KEYSTREAM_HOST": "127.0.0.1",
            "KEYSTREAM_PORT": str(port),
            "KEYSTREAM_DATA_DIR": str(data_dir),
            "KEYSTREAM_ROOT_TOKEN": token,
            "KEYSTREAM_WORKERS": str(workers),
            "KEYSTREAM_LOG_LEVEL": "warning",
            "KEYSTREAM_TIMEOUT_GRACEFUL_SHUTDOWN": "5",
        }
    )
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    if enabled_backends:
        env["KEYSTREAM_ENABLED_BACKENDS"] = enabled_backends
    if extra_env:
        env.update(extra_env)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", "from app.server import serve; serve()"],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    service = Service(
        url=f"http://127.0.0.1:{port}", token=token, data_dir=data_dir, log_path=log_path, process=process
    )
    try:
        try:
            wait_for_http(f"{service.url}/readyz", startup_timeout, process)
        except ServiceError as exc:
            raise ServiceError(f"{exc}\n--- service log ---\n{service.log_tail()}") from exc
        yield service
    finally:
        stop_process(process)
        shutil.rmtree(
            work_dir, ignore_errors=True
        )  # the data directory, and the log unless log_dir was given

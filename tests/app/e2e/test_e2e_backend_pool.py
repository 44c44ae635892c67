"""The python backend's process pool comes back after its worker is killed (issue 11 item 2), real server.

Before the fix, once the pool's worker process was killed every ``backend=python`` request answered 500
forever, while ``/readyz`` and ``/v1/backends`` still said the backend was available.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from bench.service_process import Server, start_server, stop_server

pytestmark = pytest.mark.e2e
BODY = b"p" * (1 << 20)  # about 0.3 s of pure-Python AES in the worker: the kill lands during the call


@pytest.fixture(scope="module")
def python_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    base = tmp_path_factory.mktemp("pool")
    # The body is read whole (one crypto call, answered in one piece), so the failure is a clean response.
    server = start_server(
        base / "data",
        base / "server.log",
        KEYSTREAM_ENABLED_BACKENDS="aesni,python",
        KEYSTREAM_SMALL_BODY_MAX_BYTES=str(2 << 20),
    )
    try:
        with server.client() as client:
            assert client.post("/v1/keys", json={"name": "k"}).status_code == 201
        yield server
    finally:
        stop_server(server)


def _pool_worker(server_pid: int) -> int:
    """The pid of the server's process-pool worker (a ``multiprocessing`` spawn child, not its tracker)."""
    workers = []
    for task in Path(f"/proc/{server_pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            if b"spawn_main" in cmdline:
                workers.append(int(child))
    assert len(workers) == 1, workers
    return workers[0]


def _cpu_ticks(pid: int) -> int:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def _restarts(client: httpx.Client) -> int:
    backends = client.get("/v1/backends").json()["backends"]
    (python,) = [entry for entry in backends if entry["name"] == "python"]
    assert python["available"] is True
    return int(python["restarts"])


def _encrypt(client: httpx.Client) -> httpx.Response:
    return client.post("/v1/keys/k/encrypt", params={"backend": "python"}, content=BODY)


def test_killed_pool_worker_gives_503_retry_after_then_the_pool_is_rebuilt(python_server: Server) -> None:
    with python_server.client() as client:
        assert _encrypt(client).status_code == 200  # the pool's worker is running
        assert _restarts(client) == 0
        worker = _pool_worker(python_server.process.pid)
        idle = _cpu_ticks(worker)
        with ThreadPoolExecutor(1) as executor:
            pending = executor.submit(_encrypt, client)
            deadline = time.monotonic() + 20
            while _cpu_ticks(worker) < idle + 3:  # 30 ms of CPU: it is inside the request's crypto call
                assert time.monotonic() < deadline and not pending.done(), "the call never reached the worker"
                time.sleep(0.005)
            os.kill(worker, signal.SIGKILL)
            failed = pending.result(timeout=60)

        assert failed.status_code == 503, failed.text
        assert failed.headers["Retry-After"] == "1"
        assert failed.json()["error"]["code"] == "backend_restarting"

        again = _encrypt(client)
        assert again.status_code == 200, again.text
        opened = client.post("/v1/keys/k/decrypt", params={"backend": "python"}, content=again.content)
        assert opened.status_code == 200 and opened.content == BODY
        assert _pool_worker(python_server.process.pid) != worker
        assert _restarts(client) == 1
        assert client.get("/readyz").status_code == 200
        metrics = client.get("/metrics").text
        assert 'keystream_backend_pool_restarts_total{backend="python"} 1.0' in metrics

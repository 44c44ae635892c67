"""The python backend's process pool survives the death of its worker (issue 11 item 2).

Before the fix a killed worker left the pool broken for good: every later call raised ``BrokenProcessPool``
(500) while ``/v1/backends`` still said the backend was available.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import pytest

import aescore
from app.core.metrics import BACKEND_POOL_RESTARTS
from app.errors import BackendRestartingError, BackendUnavailableError
from app.services.offload import ProcessOffloadBackend

KEY = bytes(range(16))
COUNTER = bytes(16)
BIG = 4 << 20  # about a second and a half in the pure-Python backend: still running when its worker dies


@pytest.fixture
def offload() -> Iterator[ProcessOffloadBackend]:
    backend = ProcessOffloadBackend(1)
    backend.start()
    try:
        yield backend
    finally:
        backend.shutdown()


def _pool(backend: ProcessOffloadBackend) -> ProcessPoolExecutor:
    pool = backend._pool
    assert pool is not None
    return pool


def _kill_worker(backend: ProcessOffloadBackend) -> None:
    (pid,) = _pool(backend)._processes  # type: ignore[attr-defined]
    os.kill(pid, signal.SIGKILL)


def _wait_until_submitted(backend: ProcessOffloadBackend, calls: int) -> None:
    deadline = time.monotonic() + 10
    while len(_pool(backend)._pending_work_items) < calls:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the calls never reached the pool"
        time.sleep(0.005)


def _restarts_metric() -> float:
    return BACKEND_POOL_RESTARTS.labels(backend="python")._value.get()


def _expected(data: bytes) -> bytes:
    python = aescore.get_backend("python")
    result = python.ctr_xor(python.expand_key(KEY), COUNTER, data)
    assert result is not None
    return result


def test_a_call_whose_worker_dies_gets_restarting_and_the_next_call_works(
    offload: ProcessOffloadBackend,
) -> None:
    key = offload.expand_key(KEY)
    metric_before = _restarts_metric()
    errors: list[BaseException] = []

    def big_call() -> None:
        try:
            offload.ctr_xor(key, COUNTER, bytes(BIG))
        except BaseException as exc:
            errors.append(exc)

    callers = [threading.Thread(target=big_call) for _ in range(2)]  # one running, one queued
    for thread in callers:
        thread.start()
    _wait_until_submitted(offload, 2)
    _kill_worker(offload)
    for thread in callers:
        thread.join(timeout=30)

    assert len(errors) == 2
    assert all(isinstance(exc, BackendRestartingError) for exc in errors), errors
    assert all(isinstance(exc, BackendUnavailableError) for exc in errors)  # a 503 whatever the handler
    assert offload.restarts == 1  # two calls saw the same breakage: one rebuild
    assert _restarts_metric() == metric_before + 1
    assert offload.ctr_xor(key, COUNTER, b"hello world") == _expected(b"hello world")
    assert offload.restarts == 1


def test_a_worker_that_died_while_idle_is_replaced_without_failing_a_call(
    offload: ProcessOffloadBackend,
) -> None:
    key = offload.expand_key(KEY)
    broken = _pool(offload)
    _kill_worker(offload)
    deadline = time.monotonic() + 10
    while not broken._broken:  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the pool never noticed its dead worker"
        time.sleep(0.01)

    assert offload.ctr_xor(key, COUNTER, b"x" * 100) == _expected(b"x" * 100)
    assert offload.restarts == 1
    assert offload._pool is not broken


def test_restarting_error_is_a_503_with_retry_after() -> None:
    from app.api.errors import keystream_error_response

    response = keystream_error_response(BackendRestartingError("restarting"))
    assert response.status_code == 503
    assert response.headers["Retry-After"] == "1"
    assert b'"code":"backend_restarting"' in response.body

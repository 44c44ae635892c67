"""The python backend's process pool survives the death of its worker (issue 11 item 2).

Before the fix a killed worker left the pool broken for good: every later call raised ``BrokenProcessPool``
(500) while ``/v1/backends`` still said the backend was available.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor

import prometheus_client
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
    (pid,) = _pool(backend)._processes
    os.kill(pid, signal.SIGKILL)


def _wait_until_submitted(backend: ProcessOffloadBackend, calls: int) -> None:
    deadline = time.monotonic() + 10
    while len(_pool(backend)._pending_work_items) < calls:
        assert time.monotonic() < deadline, "the calls never reached the pool"
        time.sleep(0.005)


def _restarts_metric() -> float:
    return float(BACKEND_POOL_RESTARTS.labels(backend="python")._value.get())


def test_the_restarts_series_exists_at_zero_before_any_restart() -> None:
    """An alert on ``increase()`` sees the first restart only if the series was exported before it."""
    with contextlib.suppress(KeyError):
        BACKEND_POOL_RESTARTS.remove("python")
    ProcessOffloadBackend(1)  # not started: no pool, no restart
    exposition = prometheus_client.generate_latest(prometheus_client.REGISTRY).decode()
    assert 'keystream_backend_pool_restarts_total{backend="python"} 0.0' in exposition


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
    while not broken._broken:
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


# -- AES-GCM in the pool (issue 13: gcm keys on the python backend) --


def test_gcm_runs_whole_in_the_pool_with_the_python_backends_bytes_and_errors(
    offload: ProcessOffloadBackend,
) -> None:
    key = offload.gcm_key(bytearray(KEY))
    reference = aescore.get_backend("python").gcm_key(KEY)
    nonce, data, ad = bytes(range(12)), bytes(range(256)) * 40, b"context"
    sealed = key.encrypt(memoryview(nonce), data, ad)
    assert sealed == reference.encrypt(nonce, data, ad)
    assert key.decrypt(nonce, memoryview(sealed), ad) == data
    assert key.decrypt(nonce, reference.encrypt(nonce, b"", None), None) == b""
    out = bytearray(len(data) + 16)
    assert key.encrypt_into(nonce, data, ad, out) == len(out) and bytes(out) == sealed
    tampered = bytearray(sealed)
    tampered[7] ^= 1
    with pytest.raises(aescore.InvalidTag):
        key.decrypt(nonce, bytes(tampered), ad)
    with pytest.raises(ValueError, match="nonce must be 12 bytes"):
        key.encrypt(bytes(11), data, None)
    with pytest.raises(TypeError):
        key.encrypt(nonce, "text", None)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        offload.gcm_key(bytes(15))
    assert (key.backend_name, key.key_size) == ("python", 16)
    assert KEY.hex() not in repr(key)


def test_gcm_in_the_pool_costs_the_calling_process_almost_no_cpu(offload: ProcessOffloadBackend) -> None:
    """The default composition ran the pure-Python GHASH in the caller's thread: ~0.16 s of CPU per MiB with
    the GIL held, which the event loop then waited for. In the pool the caller only ships bytes and waits."""
    key = offload.gcm_key(KEY)
    key.encrypt(bytes(12), b"warm", None)
    start = time.process_time()
    sealed = key.encrypt(bytes(12), bytes(1 << 20), None)
    spent = time.process_time() - start
    assert len(sealed) == (1 << 20) + 16
    assert spent < 0.05, f"the calling process spent {spent:.3f} s of CPU on a pooled 1 MiB AES-GCM"

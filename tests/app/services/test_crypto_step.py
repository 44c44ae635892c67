"""Where crypto runs (the backend's ``runs_inline``, not its name) and the one timing/metrics path."""

from __future__ import annotations

import threading

from prometheus_client import REGISTRY

import aescore
from app.services.crypto_step import CryptoStep, raw_step, run_timed
from app.services.offload import ProcessOffloadBackend, run_crypto

PYTHON = aescore.get_backend("python")


class InlinePython(type(PYTHON)):  # type: ignore[misc]
    """The python backend claiming to be cheap enough for the event loop (as aesni does)."""

    name = "inline-python"
    runs_inline = True


def test_runs_inline_is_declared_by_the_backends() -> None:
    assert aescore.Backend.runs_inline is False  # the safe default for a new backend
    assert PYTHON.runs_inline is False
    assert ProcessOffloadBackend.runs_inline is False
    if aescore.available_backends().get("aesni") is None:
        assert aescore.get_backend("aesni").runs_inline is True


async def test_run_crypto_stays_on_the_loop_only_for_inline_backends_and_small_work() -> None:
    loop_thread = threading.get_ident()
    assert await run_crypto(InlinePython(), 10, 100, threading.get_ident) == loop_thread
    assert await run_crypto(InlinePython(), 101, 100, threading.get_ident) != loop_thread
    assert await run_crypto(PYTHON, 10, 100, threading.get_ident) != loop_thread


def test_a_step_offloads_unless_the_backend_runs_inline() -> None:
    expanded = PYTHON.expand_key(bytes(16))
    assert raw_step(PYTHON, "encrypt", expanded, bytes(16), 0, inline_max=1 << 20).offloads
    inline = InlinePython()
    assert not CryptoStep(inline, "encrypt", "raw", bytes, inline_max=1 << 20).offloads
    small_limit = CryptoStep(inline, "encrypt", "raw", bytes, inline_max=1000)
    assert small_limit.offloads  # 1 MiB chunks would exceed the inline limit


async def test_run_timed_counts_bytes_and_times_the_work_once() -> None:
    labels = {"backend": "python", "operation": "encrypt", "format": "sealed"}
    before_count = REGISTRY.get_sample_value("keystream_crypto_seconds_count", labels) or 0.0
    before_bytes = (
        REGISTRY.get_sample_value(
            "keystream_crypto_bytes_total", {"backend": "python", "operation": "encrypt"}
        )
        or 0.0
    )
    assert await run_timed(PYTHON, "encrypt", "sealed", 123, -1, lambda: "done") == "done"
    assert REGISTRY.get_sample_value("keystream_crypto_seconds_count", labels) == before_count + 1
    after_bytes = REGISTRY.get_sample_value(
        "keystream_crypto_bytes_total", {"backend": "python", "operation": "encrypt"}
    )
    assert after_bytes == before_bytes + 123

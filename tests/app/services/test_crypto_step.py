"""Where crypto runs (the backend's ``runs_inline``, not its name) and the one timing/metrics path."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest
from anyio import CapacityLimiter
from prometheus_client import REGISTRY

import aescore
from app.formats.sealed import KeyParameters, SealedDecryptor, SealedEncryptor, SealedRewrapper
from app.keycache import CacheMissError
from app.services.crypto_step import CryptoStep, raw_step, sealed_step
from app.services.crypto_work import (
    OFF_LOOP,
    TRIAL_OVERHEAD_BYTES,
    TRIAL_THREADS,
    run_inline,
    run_timed,
    trial_limiter,
    trial_work,
)
from app.services.offload import ProcessOffloadBackend, run_crypto, runs_on_loop

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


@pytest.mark.parametrize("backend", [InlinePython(), PYTHON])
@pytest.mark.parametrize("nbytes", [0, 99, 100, 101])
async def test_run_timed_runs_where_run_crypto_would(backend: aescore.Backend, nbytes: int) -> None:
    """run_timed decides the inline case itself (without run_crypto's call): the same rule, runs_on_loop."""
    loop_thread = threading.get_ident()
    expected = runs_on_loop(backend, nbytes, 100)
    assert (await run_crypto(backend, nbytes, 100, threading.get_ident) == loop_thread) is expected
    ran_in = await run_timed(backend, "encrypt", "raw", nbytes, 100, threading.get_ident)
    assert (ran_in == loop_thread) is expected


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


class ThreadRecordingDecryptor(SealedDecryptor):
    """A decryptor that records the thread each ``update_pieces``/``finalize_pieces`` call ran in."""

    def __init__(self, *args: Any, limiter: CapacityLimiter, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.threads: list[int] = []
        self.limiter = limiter
        self.tokens_held: list[float] = []

    def update_pieces(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        self.threads.append(threading.get_ident())
        self.tokens_held.append(self.limiter.borrowed_tokens)
        return super().update_pieces(data)

    def finalize_pieces(self) -> list[bytes]:
        self.threads.append(threading.get_ident())
        self.tokens_held.append(self.limiter.borrowed_tokens)
        return super().finalize_pieces()


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
@pytest.mark.parametrize(("versions", "leaves_the_loop"), [(1, False), (2, False), (40, True)])
async def test_a_trial_over_many_key_versions_leaves_the_event_loop(
    versions: int, leaves_the_loop: bool, scheme: str
) -> None:
    """Trying the first segment under each candidate version (a decrypt without key_version) is crypto work
    like any other: past the inline budget it runs in a thread (issue 11 item 4). 40 versions of a 1000-byte
    message count 40 HKDFs and 40 HMACs, more than the 1 MiB budget; one or two stay inline."""
    backend = InlinePython()
    candidates = [(version, os.urandom(32)) for version in range(versions, 0, -1)]
    sealer = SealedEncryptor(candidates[-1][1], KeyParameters("aes128", 4096, scheme), b"", backend)
    message = sealer.update(b"m" * 1000) + sealer.finalize()
    decryptor = ThreadRecordingDecryptor(
        candidates, KeyParameters("aes128", 4096, scheme), b"", backend, limiter=trial_limiter()
    )
    step = sealed_step(backend, "decrypt", decryptor, 4096, inline_max=1 << 20, candidates=versions)

    assert await step.run_whole(message) == b"m" * 1000
    assert decryptor.version == 1
    loop_thread = threading.get_ident()
    assert all((thread != loop_thread) is leaves_the_loop for thread in decryptor.threads)
    # Off the loop, trials hold this loop's trial limiter: at most TRIAL_THREADS run at once.
    assert decryptor.tokens_held == [1 if leaves_the_loop else 0] * len(decryptor.threads)
    assert trial_limiter() is decryptor.limiter and trial_limiter().total_tokens == TRIAL_THREADS


def test_trial_work_counts_each_candidate_on_the_first_segment_only() -> None:
    assert trial_work(5000, 4096, 1) == 5000
    assert trial_work(5000, 4096, 3) == 5000 + 2 * 4096 + 3 * TRIAL_OVERHEAD_BYTES
    assert trial_work(100, 4096, 2) == 100 + 100 + 2 * TRIAL_OVERHEAD_BYTES


def test_a_rewrap_step_weighs_each_byte_twice() -> None:
    """A rewrap opens and seals each segment: 1 MiB segments are 2 MiB of work, over the 1 MiB inline budget,
    so the step leaves the loop and the pump overlaps receive, transform and send (a sealed encrypt or
    decrypt of the same key stays inline)."""
    backend = InlinePython()
    material = os.urandom(32)
    segment = 1 << 20

    def rewrapper() -> SealedRewrapper:
        decryptor = SealedDecryptor([(1, material)], KeyParameters("aes256", segment), b"", backend)
        return SealedRewrapper(
            decryptor, SealedEncryptor(material, KeyParameters("aes256", segment), b"", backend)
        )

    encryptor = SealedEncryptor(material, KeyParameters("aes256", segment), b"", backend)
    assert not sealed_step(backend, "encrypt", encryptor, segment, inline_max=1 << 20).offloads
    assert sealed_step(backend, "rewrap", rewrapper(), segment, inline_max=1 << 20).offloads
    assert not sealed_step(backend, "rewrap", rewrapper(), segment, inline_max=2 << 20).offloads


def _crypto_counts(backend: str, operation: str) -> tuple[float, float]:
    """(observations of keystream_crypto_seconds, keystream_crypto_bytes_total) of sealed work."""
    seconds = REGISTRY.get_sample_value(
        "keystream_crypto_seconds_count", {"backend": backend, "operation": operation, "format": "sealed"}
    )
    total = REGISTRY.get_sample_value(
        "keystream_crypto_bytes_total", {"backend": backend, "operation": operation}
    )
    return seconds or 0.0, total or 0.0


def test_run_inline_answers_only_work_that_stays_on_the_loop() -> None:
    """run_inline (run_timed without a coroutine) runs and counts work run_timed would run on the loop, and
    leaves the rest alone (nothing run, nothing counted) for run_timed to take off the loop."""
    inline = InlinePython()
    before = _crypto_counts("inline-python", "encrypt")
    assert run_inline(inline, "encrypt", "sealed", 100, 100, lambda: "done") == "done"
    assert _crypto_counts("inline-python", "encrypt") == (before[0] + 1, before[1] + 100)
    ran: list[int] = []
    for backend, nbytes, cost in ((inline, 101, None), (inline, 10, 101), (PYTHON, 10, None)):
        counts = _crypto_counts(backend.name, "encrypt")
        done = run_inline(backend, "encrypt", "sealed", nbytes, 100, lambda: ran.append(1), cost=cost)
        assert done is OFF_LOOP
        assert _crypto_counts(backend.name, "encrypt") == counts
    assert ran == []


async def test_work_that_needs_the_keystore_runs_again_off_the_loop_counted_once() -> None:
    """Work that ran on the loop and raised CacheMissError runs again in a worker thread: its bytes are
    counted once."""
    loop_thread = threading.get_ident()
    threads: list[int] = []

    def work() -> str:
        threads.append(threading.get_ident())
        if threading.get_ident() == loop_thread:
            raise CacheMissError("k")
        return "opened"

    before = _crypto_counts("inline-python", "decrypt")
    with pytest.raises(CacheMissError):
        run_inline(InlinePython(), "decrypt", "sealed", 10, 100, work)
    assert await run_timed(InlinePython(), "decrypt", "sealed", 10, 100, work) == "opened"
    assert threads[:2] == [loop_thread, loop_thread] and threads[2] != loop_thread
    assert _crypto_counts("inline-python", "decrypt")[1] == before[1] + 20  # 10 bytes by each call

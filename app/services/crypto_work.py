"""One piece of crypto work: what it weighs, where it runs, and its metrics.

The streaming routes' :class:`~app.services.crypto_step.CryptoStep` and the whole messages of
:mod:`app.services.sealing` both run their crypto through here: :func:`run_timed` counts the bytes, runs the
work inline or off the event loop as :func:`~app.services.offload.run_crypto` decides, and times the crypto
alone into ``keystream_crypto_seconds``; :func:`crypto_metrics` is the one place those metrics are
labelled. A sealed decrypt without ``key_version`` tries the first segment under every candidate version:
:func:`trial_work` says what that trial weighs, and :func:`trial_limiter` bounds how many run off the loop
at once.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Coroutine
from types import CoroutineType
from typing import Any, TypeVar, cast

from anyio import CapacityLimiter, to_thread
from anyio.lowlevel import RunVar

import aescore
from app.core.metric_buffer import BufferedCounter, BufferedHistogram, Observer
from app.core.metrics import CRYPTO_BYTES, CRYPTO_SECONDS
from app.keycache import CacheMissError
from app.services.offload import run_crypto

T = TypeVar("T")

#: What trying one more key version on a first segment costs besides its HMAC over the segment (HKDF in
#: Python, ~30 us), counted as bytes of segment work (HMAC-SHA256: ~1 ns per byte) against the inline budget.
TRIAL_OVERHEAD_BYTES = 32 * 1024


#: Trials that leave the event loop run at most this many at a time per worker process: two garbage clients
#: each keeping a thread busy on a 2-CPU host left the loop one CPU to share with both (measured under load:
#: /healthz p99 58-63 ms with two trial threads, 20-50 ms with one, and more decrypts per second, too).
TRIAL_THREADS = 1
_trial_limiter: RunVar[CapacityLimiter] = RunVar("keystream_trial_limiter")


def trial_limiter() -> CapacityLimiter:
    """This event loop's limiter for trial decryptions over several key versions (:data:`TRIAL_THREADS`)."""
    try:
        return _trial_limiter.get()
    except LookupError:
        limiter = CapacityLimiter(TRIAL_THREADS)
        _trial_limiter.set(limiter)
        return limiter


def trial_work(nbytes: int, first_segment_bytes: int, candidates: int) -> int:
    """The crypto to count for ``nbytes`` whose first ``first_segment_bytes`` are tried under ``candidates``
    key versions (a sealed decrypt without ``key_version``): each candidate costs an HKDF and an HMAC over
    the first segment, so a trial over many versions leaves the event loop like any other big work.
    """
    if candidates <= 1:
        return nbytes
    first = min(nbytes, first_segment_bytes)
    return nbytes + (candidates - 1) * first + candidates * TRIAL_OVERHEAD_BYTES


@functools.lru_cache(maxsize=64)
def crypto_metrics(backend: str, operation: str, fmt: str) -> tuple[BufferedHistogram, BufferedCounter]:
    """The labelled ``keystream_crypto_seconds`` / ``_bytes_total`` children (``labels()`` is not free),
    recorded through :mod:`app.core.metric_buffer`."""
    return (
        BufferedHistogram(CRYPTO_SECONDS.labels(backend=backend, operation=operation, format=fmt)),
        BufferedCounter(CRYPTO_BYTES.labels(backend=backend, operation=operation)),
    )


def timed(seconds: Observer, work: Callable[[], T]) -> T:
    """Run ``work`` and observe its duration in ``seconds`` (also when it raises)."""
    start = time.perf_counter()
    try:
        return work()
    finally:
        seconds.observe(time.perf_counter() - start)


async def timed_async(seconds: Observer, work: Awaitable[T]) -> T:
    """Await ``work`` and observe its duration in ``seconds`` (also when it raises)."""
    start = time.perf_counter()
    try:
        return await work
    finally:
        seconds.observe(time.perf_counter() - start)


class OffLoop:
    """The type of :data:`OFF_LOOP`."""

    __slots__ = ()


#: What :func:`run_inline` returns for work :func:`run_timed` would run off the event loop.
OFF_LOOP = OffLoop()


def run_inline(
    backend: aescore.Backend,
    operation: str,
    fmt: str,
    nbytes: int,
    inline_max: int,
    work: Callable[[], T],
    *,
    cost: int | None = None,
) -> T | OffLoop:
    """:func:`run_timed` for work that runs on the event loop, without a coroutine: count ``nbytes``, run
    ``work`` timed and return what it returns; :data:`OFF_LOOP` (nothing counted, nothing run) for work that
    leaves the loop: ``await`` :func:`run_timed` then.

    Raises:
        CacheMissError: ``work`` ran (counted and timed) and needs a keystore read: ``await``
            :func:`run_again_off_loop` then, as :func:`run_timed` does.
        Exception: whatever ``work`` raises.
    """
    weight = nbytes if cost is None else cost
    if not backend.runs_inline or weight > inline_max:  # = not runs_on_loop(), as run_crypto decides
        return OFF_LOOP
    seconds, counter = crypto_metrics(backend.name, operation, fmt)
    counter.inc(nbytes)
    # run_crypto's inline case, timed as timed() times it, without their calls and a closure.
    start = time.perf_counter()
    try:
        return work()
    finally:
        seconds.observe(time.perf_counter() - start)


async def run_again_off_loop(
    backend: aescore.Backend,
    operation: str,
    fmt: str,
    work: Callable[[], T],
    limiter: CapacityLimiter | None = None,
) -> T:
    """Run ``work`` again, timed, in a worker thread: it ran on the loop (already counted) and raised
    :class:`~app.keycache.CacheMissError` (a ciphertext no cached version opens: the key's versions are read
    again, :func:`app.services.keys.decryption_keys`), so it runs where that read may wait."""
    seconds, _ = crypto_metrics(backend.name, operation, fmt)
    return await to_thread.run_sync(functools.partial(timed, seconds, work), limiter=limiter)


def run_now(
    backend: aescore.Backend,
    operation: str,
    fmt: str,
    nbytes: int,
    inline_max: int,
    work: Callable[[], T],
    *,
    cost: int | None = None,
    limiter: CapacityLimiter | None = None,
) -> T | Coroutine[Any, Any, T]:
    """:func:`run_timed` without a coroutine of its own where none is needed: what ``work`` returns when it
    runs on the event loop (:func:`run_inline`), else a coroutine that runs it off the loop, or again off
    the loop after a :class:`~app.keycache.CacheMissError` (:func:`run_again_off_loop`). For callers that
    answer a small body without a coroutine; everyone else awaits :func:`run_timed`.

    Raises:
        Exception: whatever ``work`` raises on the loop (other than ``CacheMissError``).
    """
    try:
        done = run_inline(backend, operation, fmt, nbytes, inline_max, work, cost=cost)
    except CacheMissError:
        return run_again_off_loop(backend, operation, fmt, work, limiter)
    if isinstance(done, OffLoop):
        return _run_off_loop(backend, operation, fmt, nbytes, inline_max, work, cost, limiter)
    return done


async def _run_off_loop(
    backend: aescore.Backend,
    operation: str,
    fmt: str,
    nbytes: int,
    inline_max: int,
    work: Callable[[], T],
    cost: int | None,
    limiter: CapacityLimiter | None,
) -> T:
    """Count ``nbytes`` and run ``work`` timed where :func:`~app.services.offload.run_crypto` puts work that
    :func:`run_inline` left (off the loop); a ``CacheMissError`` runs it again
    (:func:`run_again_off_loop`)."""
    seconds, counter = crypto_metrics(backend.name, operation, fmt)
    counter.inc(nbytes)
    weight = nbytes if cost is None else cost
    try:
        # (partials, not lambdas: a lambda makes cells of work and seconds on every call)
        return await run_crypto(backend, weight, inline_max, functools.partial(timed, seconds, work), limiter)
    except CacheMissError:
        return await run_again_off_loop(backend, operation, fmt, work, limiter)


async def run_timed(
    backend: aescore.Backend,
    operation: str,
    fmt: str,
    nbytes: int,
    inline_max: int,
    work: Callable[[], T],
    *,
    cost: int | None = None,
    limiter: CapacityLimiter | None = None,
) -> T:
    """Count ``nbytes``, then run ``work`` timed, inline (:func:`run_inline`) or off the loop as
    :func:`~app.services.offload.run_crypto` decides (:func:`run_now`, awaited when it answers a coroutine).

    ``cost``: the bytes of work that decision weighs when they differ from ``nbytes`` (a trial over
    several key versions, :func:`trial_work`); ``limiter``: as :func:`~app.services.offload.run_crypto`
    (:func:`trial_limiter`).
    ``work`` must be repeatable: if it ran on the loop and raised :class:`~app.keycache.CacheMissError` (it
    needs a keystore read), it runs again in a worker thread (:func:`run_again_off_loop`).

    Raises:
        Exception: whatever ``work`` raises.
    """
    done = run_now(backend, operation, fmt, nbytes, inline_max, work, cost=cost, limiter=limiter)
    if isinstance(done, CoroutineType):  # run_now's own coroutines (no work returns one)
        return cast(T, await done)
    return cast(T, done)

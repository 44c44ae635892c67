"""The per-request crypto step: where each call runs (event loop, thread, process) and how long it took.

:class:`CryptoStep` wraps a format's ``update``/``finalize`` for the streaming routes; :func:`run_timed`
runs one synchronous piece of work the same way (whole sealed messages: :mod:`app.services.sealing`). Both
time the crypto alone into ``keystream_crypto_seconds`` and count ``keystream_crypto_bytes_total`` through
:func:`crypto_metrics`, the one place those metrics are labelled.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from anyio import CapacityLimiter, to_thread
from anyio.lowlevel import RunVar
from prometheus_client import Counter, Histogram

import aescore
from app.core.metrics import CRYPTO_BYTES, CRYPTO_SECONDS
from app.formats.raw import AsyncRawCipher, RawCipher
from app.formats.sealed import (
    SealedDecryptor,
    SealedEncryptor,
    SealedRewrapper,
)
from app.keycache import CacheMissError
from app.services.offload import run_crypto
from app.services.pipeline import Pieces, send_pieces

T = TypeVar("T")
#: A sealed format object the streaming routes drive.
SealedCipher = SealedEncryptor | SealedDecryptor | SealedRewrapper

#: Least bytes a stage of the streaming pipeline holds before the stage upstream waits.
PIPELINE_MIN_BYTES = 1 << 20
#: Safety margin for estimating buffered bytes: more than a header (40 bytes) plus a few tags.
HEADER_MAX_BYTES = 256
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
def crypto_metrics(backend: str, operation: str, fmt: str) -> tuple[Histogram, Counter]:
    """The labelled ``keystream_crypto_seconds`` / ``_bytes_total`` children (``labels()`` is not free)."""
    return (
        CRYPTO_SECONDS.labels(backend=backend, operation=operation, format=fmt),
        CRYPTO_BYTES.labels(backend=backend, operation=operation),
    )


def timed(seconds: Histogram, work: Callable[[], T]) -> T:
    """Run ``work`` and observe its duration in ``seconds`` (also when it raises)."""
    start = time.perf_counter()
    try:
        return work()
    finally:
        seconds.observe(time.perf_counter() - start)


async def timed_async(seconds: Histogram, work: Awaitable[T]) -> T:
    """Await ``work`` and observe its duration in ``seconds`` (also when it raises)."""
    start = time.perf_counter()
    try:
        return await work
    finally:
        seconds.observe(time.perf_counter() - start)


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
    """Count ``nbytes``, then run ``work`` timed, inline or off the loop as :func:`run_crypto` decides.

    ``cost``: the bytes of work that decision weighs when they differ from ``nbytes`` (a trial over
    several key versions, :func:`trial_work`); ``limiter``: as :func:`run_crypto` (:func:`trial_limiter`).
    ``work`` must be repeatable: if it ran on the loop and raised :class:`~app.keycache.CacheMissError` (it
    needs a keystore read), it runs again in a worker thread.

    Raises:
        Exception: whatever ``work`` raises.
    """
    seconds, counter = crypto_metrics(backend.name, operation, fmt)
    counter.inc(nbytes)
    weight = nbytes if cost is None else cost
    try:
        return await run_crypto(backend, weight, inline_max, lambda: timed(seconds, work), limiter)
    except CacheMissError:
        # It ran on the loop and needs the keystore (a ciphertext no cached version opens: the key's versions
        # are read again, :func:`app.services.keys.decryption_keys`): run it again where the read may wait.
        return await to_thread.run_sync(lambda: timed(seconds, work), limiter=limiter)


class CryptoStep:
    """One streaming transform: runs each call off the event loop when needed and times the work alone.

    Args:
        backend: the backend doing the work (its ``runs_inline`` decides whether small calls stay inline).
        operation: ``encrypt``, ``decrypt`` or ``rewrap`` (a metrics label).
        fmt: ``sealed`` or ``raw`` (a metrics label).
        update: the format's synchronous ``update`` (returns output pieces).
        finalize: the format's ``finalize``; ``None`` when the format has no tail (raw).
        inline_max: most bytes of crypto a call may do on the event loop (``inline_crypto_max_bytes``).
        async_update: an awaitable ``update`` that replaces ``update`` (raw CTR through ``ctr_xor_async``).
        segment_size: sealed: the key's segment size (calls below one segment only buffer).
        buffered: sealed: bytes the format holds for its next segment.
        candidates: sealed decrypt: how many key versions the next segment may be tried under (1 once the
            first segment verified); counted by :func:`trial_work` in deciding where a call runs.
        passes: how many times the format goes over each byte (a rewrap opens and seals: 2), weighed in
            deciding where a call runs.
        reads_keystore: sealed decrypt: true while the next call that completes a segment may read the
            keystore (the decryptor may ask for more key versions); such a call runs in a worker thread.
    """

    def __init__(
        self,
        backend: aescore.Backend,
        operation: str,
        fmt: str,
        update: Callable[[bytes], Pieces],
        finalize: Callable[[], Pieces] | None = None,
        *,
        inline_max: int,
        async_update: Callable[[bytes], Awaitable[bytes]] | None = None,
        segment_size: int | None = None,
        buffered: Callable[[], int] | None = None,
        candidates: Callable[[], int] | None = None,
        passes: int = 1,
        reads_keystore: Callable[[], bool] | None = None,
    ) -> None:
        self._backend = backend
        self._passes = passes
        # Sealed formats only buffer until a segment is complete: below this many held bytes an update is a
        # copy, never crypto, and runs inline whatever the backend (the header is at most 40 bytes).
        self._buffer_only_below = segment_size - HEADER_MAX_BYTES if segment_size is not None else 0
        self._segment_size = segment_size or 0
        self._async_update = async_update
        # AES-NI work up to inline_crypto_max_bytes (1 MiB) runs on the event loop: raw CTR is tens of
        # microseconds per MiB, a sealed segment ~0.7 ms (HMAC-SHA256). In a worker thread the sealed HMAC
        # would overlap the loop's I/O in principle, but the worker must win the GIL back after every
        # GIL-free HMAC call while the loop is busy in Python, and measured end to end that hand-off cost more
        # than the overlap gained: 0.49 GB/s in a thread vs 0.59 GB/s inline, echo 0.95 GB/s (see the
        # service README). Bigger work (segments over the limit, big chunks) still goes to the thread pool.
        self._inline_max = inline_max
        self._update = update
        self._finalize = finalize
        self._seconds, self._bytes = crypto_metrics(backend.name, operation, fmt)
        self._buffered = buffered
        self._candidates = candidates
        self._reads_keystore = reads_keystore
        #: Bytes each stage of a :func:`~app.services.pipeline.pipeline` may hold: one segment or 1 MiB.
        self.pipeline_bytes = max(segment_size or 0, PIPELINE_MIN_BYTES)

    @property
    def offloads(self) -> bool:
        """True when big calls leave the event loop (then reading ahead overlaps network and crypto)."""
        return (
            self._async_update is not None
            or not self._backend.runs_inline
            or max(self._segment_size, 1 << 20) * self._passes > self._inline_max
        )

    async def update(self, data: bytes) -> Pieces:
        """Transform one chunk.

        Raises:
            KeystreamError: the format refused the data (a segment that does not verify, past 2**64...).
        """
        self._bytes.inc(len(data))
        if self._async_update is not None:
            return await timed_async(self._seconds, self._async_update(data))
        held = len(data) + (self._buffered() if self._buffered is not None else 0)
        if held < self._buffer_only_below:
            return self._update(data)  # at most the 40-byte header comes out: no segment is complete yet
        # Sealed: the crypto is the segments this call completes; the rest of the held bytes is only copied.
        work = held - held % self._segment_size if self._segment_size else held
        return await run_crypto(
            self._backend,
            self._with_trials(work * self._passes),
            self._call_inline_max(),
            lambda: timed(self._seconds, lambda: self._update(data)),
            self._trial_limiter(),
        )

    def _call_inline_max(self) -> int:
        """``inline_max`` for the next call: -1 (a worker thread) while it may read the keystore."""
        if self._reads_keystore is not None and self._reads_keystore():
            return -1
        return self._inline_max

    def _trial_limiter(self) -> CapacityLimiter | None:
        """:func:`trial_limiter` while the next call may try several key versions, else ``None``."""
        if self._candidates is None or self._candidates() <= 1:
            return None
        return trial_limiter()

    def _with_trials(self, nbytes: int) -> int:
        """``nbytes`` plus the cost of trying the first segment under each candidate key version."""
        if self._candidates is None:
            return nbytes
        return trial_work(nbytes, self._segment_size, self._candidates())

    async def finalize(self) -> Pieces:
        """Flush the last segment (sealed) or nothing (raw).

        Raises:
            KeystreamError: as the format's ``finalize`` (a truncated sealed ciphertext...).
        """
        finalize = self._finalize
        if finalize is None:
            return b""
        held = self._buffered() if self._buffered is not None else 0
        return await run_crypto(
            self._backend,
            self._with_trials(held * self._passes),
            self._call_inline_max(),
            lambda: timed(self._seconds, finalize),
            self._trial_limiter(),
        )

    async def run_whole(self, data: bytes) -> bytes:
        """Transform a complete (small) body in one call: ``update`` then ``finalize``.

        Raises:
            KeystreamError: as :meth:`update` and :meth:`finalize`.
        """
        finalize = self._finalize
        if self._async_update is not None:
            return b"".join(send_pieces(await self.update(data)))
        self._bytes.inc(len(data))

        def work() -> bytes:
            out = send_pieces(self._update(data))
            if finalize is not None:
                out += send_pieces(finalize())
            return out[0] if len(out) == 1 else b"".join(out)

        return await run_crypto(
            self._backend,
            self._with_trials(len(data) * self._passes),
            self._call_inline_max(),
            lambda: timed(self._seconds, work),
            self._trial_limiter(),
        )


def raw_step(
    backend: aescore.Backend,
    operation: str,
    expanded: aescore.ExpandedKey,
    iv: bytes,
    offset: int,
    *,
    inline_max: int,
) -> CryptoStep:
    """A raw CTR step: :class:`~app.formats.raw.AsyncRawCipher` when the backend ``supports_async``,
    else :class:`~app.formats.raw.RawCipher`.

    Raises:
        BadRequestError: ``offset`` is negative or not below 2**64.
    """
    if backend.supports_async:
        cipher = AsyncRawCipher(expanded, backend, iv, offset)
        return CryptoStep(backend, operation, "raw", bytes, inline_max=inline_max, async_update=cipher.update)
    raw = RawCipher(expanded, backend, iv, offset)
    return CryptoStep(backend, operation, "raw", raw.update, inline_max=inline_max)


def sealed_step(
    backend: aescore.Backend,
    operation: str,
    cipher: SealedCipher,
    segment_size: int,
    *,
    inline_max: int,
    candidates: int = 1,
) -> CryptoStep:
    """A sealed step over a :class:`~app.formats.sealed.SealedEncryptor`, ``SealedDecryptor`` or
    ``SealedRewrapper`` (which opens and seals each byte: weighed twice in deciding where a call runs).

    ``candidates``: a decryptor's (or rewrapper's) number of candidate key versions; until one verifies the
    first segment, the trial over all of them counts as crypto work (:func:`trial_work`), so a large trial
    leaves the loop.
    """
    pending: Callable[[], int] | None = None
    reads_keystore: Callable[[], bool] | None = None
    if isinstance(cipher, SealedDecryptor | SealedRewrapper):
        opener = cipher
        reads_keystore = lambda: opener.may_call_more_candidates  # noqa: E731
        if candidates > 1:
            pending = lambda: candidates if opener.version is None else 1  # noqa: E731
    return CryptoStep(
        backend,
        operation,
        "sealed",
        cipher.update_pieces,
        cipher.finalize_pieces,
        inline_max=inline_max,
        segment_size=segment_size,
        buffered=lambda: cipher.buffered,
        candidates=pending,
        passes=2 if isinstance(cipher, SealedRewrapper) else 1,
        reads_keystore=reads_keystore,
    )

"""The streaming routes' crypto step: a format's ``update``/``finalize`` driven chunk by chunk.

:class:`CryptoStep` wraps a format object (:func:`raw_step`, :func:`sealed_step`) and works out, per call,
how much crypto it does (a sealed format only buffers until a segment is complete; a trial over several key
versions weighs more) and so where it may run: the call goes through
:func:`app.services.offload.run_crypto` (event loop, thread or the python backend's process pool), timed and
counted with :mod:`app.services.crypto_work`'s metrics, as whole messages are (:mod:`app.services.sealing`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from anyio import CapacityLimiter

import aescore
from app.formats.raw import AsyncRawCipher, RawCipher
from app.formats.sealed import (
    SealedDecryptor,
    SealedEncryptor,
    SealedRewrapper,
)
from app.services.crypto_work import crypto_metrics, timed, timed_async, trial_limiter, trial_work
from app.services.offload import run_crypto
from app.services.pipeline import Pieces, send_pieces

#: A sealed format object the streaming routes drive.
SealedCipher = SealedEncryptor | SealedDecryptor | SealedRewrapper

#: Least bytes a stage of the streaming pipeline holds before the stage upstream waits.
PIPELINE_MIN_BYTES = 1 << 20
#: Safety margin for estimating buffered bytes: more than a header (40 bytes) plus a few tags.
HEADER_MAX_BYTES = 256


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

    An encryptor that seals in pieces (:attr:`~app.formats.sealed.SealedEncryptor.seals_in_pieces`) does
    crypto on every byte of every call, not only on calls that complete a segment: its step is weighed as a
    raw one's (each call's work is its own chunk).
    """
    in_pieces = isinstance(cipher, SealedEncryptor) and cipher.seals_in_pieces
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
        segment_size=None if in_pieces else segment_size,
        buffered=None if in_pieces else lambda: cipher.buffered,
        candidates=pending,
        passes=2 if isinstance(cipher, SealedRewrapper) else 1,
        reads_keystore=reads_keystore,
    )

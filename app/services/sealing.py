"""Sealing and opening whole sealed messages, one or many, and where that work runs.

Every route that holds whole messages comes here: the streaming routes' small bodies (Content-Length up to
``small_body_max_bytes``, read whole), the batch routes and data keys. Each call makes one call of the
format's batch crypto (:func:`app.formats.sealed.seal_many` / ``open_many``, or ``seal_one`` /
``open_one`` for a small body: one native call on a backend with a native sealer, a
:class:`~app.formats.sealed.SealedEncryptor` or ``SealedDecryptor`` per message otherwise), whose bytes are
those the streaming encryptor writes. It is counted and timed as ``encrypt`` or
``decrypt`` / ``sealed`` in the crypto metrics (:func:`app.services.crypto_work.run_timed`).

Where it runs (:func:`_inline_max`): on the event loop up to ``inline_crypto_max_bytes`` when the backend
seals the scheme natively (a 100 x 1 KiB batch is ~0.2 ms of C, cheaper than a thread hand-off) or for one
small body (as a streaming segment would run); else the per-message Python path costs tens of microseconds
per message, so only a handful of small messages stay on the loop. A decrypt without ``key_version`` tries
each message's first segment under every candidate version: that trial counts as crypto work
(:func:`~app.services.crypto_work.trial_work`) and leaves the loop under the trial limiter when it is large.
Backends that do not run inline leave the loop whatever these limits say.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from functools import partial
from typing import TypeVar

import aescore
from app.core.config import Settings
from app.errors import PayloadTooLargeError
from app.formats.sealed import (
    KeyParameters,
    SealedDecryptionError,
    SealedDecryptor,
    native_isa,
    open_many,
    open_one,
    seal_many,
    seal_one,
)
from app.keycache import ResolvedKey
from app.services.crypto_step import CryptoStep, sealed_step
from app.services.crypto_work import (
    run_now,
    run_timed,
    trial_limiter,
    trial_work,
)
from app.services.keys import DecryptionKeys, sealed_encryptor

T = TypeVar("T")
#: One opened message: its plaintext and the key version that verified it, or why it did not open.
Opened = tuple[bytes, int] | SealedDecryptionError

#: Without a native sealer, batches of up to this many messages and bytes run on the event loop; others in
#: a worker thread.
PYTHON_INLINE_MAX_ITEMS = 4
PYTHON_INLINE_MAX_BYTES = 16 * 1024


def _inline_max(settings: Settings, backend: aescore.Backend, scheme: str, count: int) -> int:
    """Most bytes of a batch's crypto that may run on the event loop (-1: none; see the module doc). (One
    small body of a streaming route, :func:`seal_message` and :meth:`Opening.whole`, runs there up to
    ``inline_crypto_max_bytes`` whatever the backend, as a streaming segment would.)"""
    if native_isa(backend, scheme) is not None:
        return settings.inline_crypto_max_bytes
    return PYTHON_INLINE_MAX_BYTES if count <= PYTHON_INLINE_MAX_ITEMS else -1


async def _run(
    settings: Settings,
    backend: aescore.Backend,
    parameters: KeyParameters,
    operation: str,
    data: Sequence[bytes],
    work: Callable[[], T],
    *,
    candidates: int = 1,
) -> T:
    nbytes = sum(map(len, data))
    several = candidates > 1
    segment_size = parameters.segment_size
    cost = sum(trial_work(len(item), segment_size, candidates) for item in data) if several else nbytes
    return await run_timed(
        backend,
        operation,
        "sealed",
        nbytes,
        _inline_max(settings, backend, parameters.scheme, len(data)),
        work,
        cost=cost,
        limiter=trial_limiter() if several else None,
    )


async def seal_messages(
    settings: Settings,
    backend: aescore.Backend,
    key: ResolvedKey,
    data: Sequence[bytes],
    associated_data: Sequence[bytes],
) -> list[bytes | PayloadTooLargeError]:
    """Seal each of ``data`` (with the associated data at the same index) under ``key``, in its scheme.

    Returns:
        Per message its sealed message, or the error of one that would need more than 2**32 segments.
    """
    return await _run(
        settings,
        backend,
        key.parameters,
        "encrypt",
        data,
        lambda: seal_many(key.material, key.parameters, data, associated_data, backend),
    )


async def open_messages(
    settings: Settings,
    backend: aescore.Backend,
    keys: DecryptionKeys,
    data: Sequence[bytes],
    associated_data: Sequence[bytes],
) -> list[Opened]:
    """Open each of ``data`` (with the associated data at the same index) under ``keys``: newest first, then
    ``keys.more`` once for the messages none of them opened, as a :class:`SealedDecryptor` does.

    Returns:
        Per message its ``(plaintext, key version)``, or the error saying why it did not open (the
        decryptor's wording; no plaintext of it).
    """
    parameters = keys.first.parameters
    candidates = keys.materials
    return await _run(
        settings,
        backend,
        parameters,
        "decrypt",
        data,
        lambda: open_many(candidates, parameters, data, associated_data, backend, more_candidates=keys.more),
        candidates=len(candidates),
    )


def seal_message(
    settings: Settings, backend: aescore.Backend, key: ResolvedKey, associated_data: bytes, data: bytes
) -> bytes | Awaitable[bytes]:
    """Seal ``data``, a streaming route's small body, as one sealed message under ``key``: the sealed
    message itself when the work runs on the event loop (every small body on aesni: no coroutine), else an
    awaitable of it.

    Raises:
        PayloadTooLargeError: the message would need more than 2**32 segments (from the awaitable, when
            there is one).
    """
    # seal_messages for one message, without its two coroutines: one small body runs where a streaming
    # segment would (on the loop up to inline_crypto_max_bytes), counted as its own bytes.
    # A partial, not a lambda: no cells of its arguments and no frame of its own around seal_one.
    work = partial(seal_one, key.material, key.parameters, data, associated_data, backend)
    return run_now(backend, "encrypt", "sealed", len(data), settings.inline_crypto_max_bytes, work)


def sealing_step(
    backend: aescore.Backend,
    key: ResolvedKey,
    associated_data: bytes,
    inline_max: int,
    expected_length: int | None = None,
) -> CryptoStep:
    """The crypto step of a streaming route's sealed encrypt whose body is not small: a fresh encryptor
    (new salt and nonce prefix) under ``key``. With the body's ``expected_length`` (its Content-Length) a
    ``gcm`` key seals each request chunk as it arrives where the backend can, instead of gathering segments.

    Raises:
        PayloadTooLargeError: ``expected_length`` needs more than 2**32 segments.
    """
    encryptor = sealed_encryptor(key, associated_data, backend, expected_length)
    return sealed_step(backend, "encrypt", encryptor, key.parameters.segment_size, inline_max=inline_max)


class Opening:
    """A streaming route's sealed decrypt of one body: opened whole when small (:meth:`whole`), else
    streamed through a decryptor's crypto step; and the key version that verified it, once output exists
    (for ``Keystream-Key-Version``)."""

    __slots__ = ("_associated_data", "_backend", "_decryptor", "_keys", "_settings", "_version")

    def __init__(
        self, settings: Settings, backend: aescore.Backend, keys: DecryptionKeys, associated_data: bytes
    ) -> None:
        self._settings = settings
        self._backend = backend
        self._keys = keys
        self._associated_data = associated_data
        self._version: int | None = None
        self._decryptor: SealedDecryptor | None = None

    def whole(self, body: bytes) -> bytes | Awaitable[bytes]:
        """Open a small body as one whole sealed message, in one call (natively on aesni): no decryptor, no
        stream; the version that verified it is kept for :meth:`key_version`. The plaintext itself when the
        work runs on the event loop (every small body on aesni whose version is cached: no coroutine), else
        an awaitable of it.

        :func:`open_messages` for one message, without its two coroutines (as :func:`seal_message`), through
        :func:`~app.formats.sealed.open_one`; only several candidates are weighed as a trial
        (:func:`trial_work`).

        Raises:
            SealedDecryptionError: the message does not verify (the decryptor's wording; no plaintext; from
                the awaitable, when there is one).
        """
        backend = self._backend
        keys = self._keys
        keyed = keys.candidates
        first = keyed[0]
        parameters = first.parameters
        several = len(keyed) > 1
        # One candidate (the usual case) is passed without the materials property's list comprehension.
        candidates = keys.materials if several else [(first.version, first.material)]
        # A partial, not a nested function: no function and cells of what it uses on every call; every
        # argument by position (a partial with a keyword builds and merges a dict on every call).
        work = partial(open_one, candidates, parameters, body, self._associated_data, backend, keys.more)
        nbytes = len(body)
        # Off the loop, or again off it when no cached version opened it (the key's versions are read again).
        opened = run_now(
            backend,
            "decrypt",
            "sealed",
            nbytes,
            self._settings.inline_crypto_max_bytes,  # (one small body runs where a segment would)
            work,
            cost=trial_work(nbytes, parameters.segment_size, len(keyed)) if several else None,
            limiter=trial_limiter() if several else None,
        )
        if isinstance(opened, tuple):  # it opened, on the loop (an error or a coroutine is no tuple)
            plaintext, self._version = opened
            return plaintext
        if isinstance(opened, SealedDecryptionError):
            raise opened
        return self._opened_off_loop(opened)

    async def _opened_off_loop(self, opened: Awaitable[Opened]) -> bytes:
        """:meth:`whole`'s work where it runs off the event loop."""
        one = await opened
        if isinstance(one, SealedDecryptionError):
            raise one
        plaintext, self._version = one
        return plaintext

    def stream(self) -> CryptoStep:
        """A step over a decryptor that tries the candidate versions on the first segment."""
        self._decryptor = self._keys.sealed_decryptor(self._associated_data, self._backend)
        return sealed_step(
            self._backend,
            "decrypt",
            self._decryptor,
            self._keys.first.parameters.segment_size,
            inline_max=self._settings.inline_crypto_max_bytes,
            candidates=len(self._keys.candidates),
        )

    def key_version(self) -> int | None:
        """The version that verified the body (the first segment, when streamed)."""
        return self._decryptor.version if self._decryptor is not None else self._version

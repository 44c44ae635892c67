"""Which key versions an encrypt or a decrypt uses: written once, shared by the streaming and batch routes.

Lookups go through the :class:`~app.keycache.KeyCache`: a hit is answered on the event loop, a miss (SQLite
read, unwrap, key expansion: about half a millisecond) in a worker thread (:func:`from_cache`).

* Encrypt uses the latest version, or an explicit ``key_version`` that exists and is not below the key's
  ``min_decryption_version`` (a ciphertext nobody may decrypt is refused up front).
* Decrypt tries an explicit ``key_version`` only, or the versions from the latest down to
  ``min_decryption_version``, at most ``max_decrypt_versions`` of them (the key cache's bound); without
  ``key_version`` a ciphertext that verifies under none of the cached versions gets one fresh read of the
  key's versions (another worker may have rotated the key less than ``key_metadata_ttl`` ago).
* Rewrap opens with the decrypt candidates and seals under the latest version (:func:`sealed_rewrapper`).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from anyio import to_thread

import aescore
from app.core.secret_memory import KeyMaterial
from app.errors import ServiceUnavailableError
from app.formats.sealed import SealedDecryptor, SealedEncryptor, SealedRewrapper
from app.keycache import CacheMissError, KeyCache, ResolvedKey

T = TypeVar("T")

__all__ = [
    "DecryptionKeys",
    "decryption_keys",
    "encryption_key",
    "from_cache",
    "on_event_loop",
    "sealed_encryptor",
    "sealed_rewrapper",
]


async def from_cache(lookup: Callable[[bool], T]) -> T:
    """Run a key cache ``lookup(cached_only)``: on the event loop when it hits, else in a worker thread.

    A hit is a dict lookup; a miss reads SQLite and unwraps key material (about half a millisecond), which
    would stall every other request on the loop.

    Raises:
        Exception: whatever ``lookup`` raises other than :class:`~app.keycache.CacheMissError`.
    """
    try:
        return lookup(True)
    except CacheMissError:
        return await to_thread.run_sync(lookup, False)


async def encryption_key(
    keycache: KeyCache, name: str, backend: aescore.Backend, version: int | None
) -> ResolvedKey:
    """The key version to encrypt with: the latest, or ``version`` when given.

    Raises:
        KeyNotFoundError: no such key.
        KeyVersionNotFoundError: ``version`` does not exist.
        BadRequestError: ``version`` is below the key's ``min_decryption_version`` (nobody could decrypt).
        KeyUnwrapError: the stored material does not unwrap under the master key.
    """
    if version is None:
        return await from_cache(lambda cached: keycache.resolve(name, None, backend, cached_only=cached))
    return (await _candidates(keycache, name, backend, version))[0]


async def rewrap_target(keycache: KeyCache, name: str, backend: aescore.Backend) -> ResolvedKey:
    """The key version a rewrap seals under: the latest, after a fresh read of the key's metadata.

    The cached latest may trail a rotation made through another worker or replica by the change log's
    propagation delay, and an input sealed under that newer version would come out sealed under an older one.
    One keystore read per rewrap request (rewrap is not the small-message hot path). If the keystore cannot
    be read, the cached latest is used, as encrypt would.

    Raises:
        KeyNotFoundError: no such key.
        KeyUnwrapError: the stored material does not unwrap under the master key.
    """
    try:
        await to_thread.run_sync(keycache.refresh, name)
    except ServiceUnavailableError:
        pass  # the cached metadata, while the change log still vouches for it (see app.services.coherence)
    return await encryption_key(keycache, name, backend, None)


async def _candidates(
    keycache: KeyCache, name: str, backend: aescore.Backend, version: int | None
) -> list[ResolvedKey]:
    return await from_cache(
        lambda cached: keycache.decryption_candidates(name, backend, version, cached_only=cached)
    )


@dataclass(frozen=True)
class DecryptionKeys:
    """The versions a ciphertext of one key may be decrypted with, newest first, and how to find more.

    Attributes:
        candidates: at least one resolved version; all share their ``parameters`` (type, segment size and
            scheme).
        more: for a :class:`~app.formats.sealed.SealedDecryptor`'s ``more_candidates`` (``None`` when an
            explicit version was asked for). It re-reads the key's versions at most once per instance, however
            many messages (a batch) call it, and never on the event loop (it raises
            :class:`~app.keycache.CacheMissError` there: run the work again in a thread).
    """

    candidates: list[ResolvedKey]
    more: Callable[[], list[tuple[int, KeyMaterial]]] | None

    @property
    def materials(self) -> list[tuple[int, KeyMaterial]]:
        """``(version, material)`` of every candidate, newest first, as the sealed format takes them."""
        return [(key.version, key.material) for key in self.candidates]

    @property
    def first(self) -> ResolvedKey:
        """The newest candidate (for raw decrypt, the one version asked for)."""
        return self.candidates[0]

    def sealed_decryptor(self, associated_data: bytes, backend: aescore.Backend) -> SealedDecryptor:
        """A decryptor for one sealed message over these candidates.

        Raises:
            TypeError, ValueError: as :class:`~app.formats.sealed.SealedDecryptor`.
        """
        return SealedDecryptor(
            self.materials, self.first.parameters, associated_data, backend, more_candidates=self.more
        )


async def decryption_keys(
    keycache: KeyCache, name: str, backend: aescore.Backend, version: int | None
) -> DecryptionKeys:
    """The versions that may decrypt: ``version`` alone, or latest down to ``min_decryption_version``.

    An explicit ``version`` newer than the cached metadata re-reads the metadata first (another worker may
    have rotated the key), so it is found at once rather than after ``key_metadata_ttl``.

    Raises:
        KeyNotFoundError: no such key.
        KeyVersionNotFoundError: ``version`` does not exist.
        BadRequestError: ``version`` is below the key's ``min_decryption_version``.
        KeyUnwrapError: stored material does not unwrap under the master key.
    """
    candidates = await _candidates(keycache, name, backend, version)
    more = _fresh_candidates(keycache, name, backend) if version is None else None
    return DecryptionKeys(candidates, more)


def on_event_loop() -> bool:
    """True in the thread that runs an event loop (where nothing may wait on the keystore)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _fresh_candidates(
    keycache: KeyCache, name: str, backend: aescore.Backend
) -> Callable[[], list[tuple[int, KeyMaterial]]]:
    """A decryptor's ``more_candidates``: the key's versions after a fresh read of its metadata, read at most
    once per instance.

    Called on the event loop (crypto small enough to run inline), it reads nothing and raises
    :class:`~app.keycache.CacheMissError`: :func:`app.services.crypto_work.run_timed` then runs the whole
    (repeatable) work again in a worker thread, where the read may wait for the database. The streaming
    routes never call it on the loop (:class:`app.services.crypto_step.CryptoStep` runs a call that may
    need it in a thread).
    """

    @functools.cache
    def more() -> list[tuple[int, KeyMaterial]]:
        if on_event_loop():
            raise CacheMissError(name)
        return keycache.refreshed_candidates(name, backend)

    return more


def sealed_encryptor(key: ResolvedKey, associated_data: bytes, backend: aescore.Backend) -> SealedEncryptor:
    """A fresh encryptor (new salt and nonce prefix) for one sealed message under ``key``.

    Raises:
        TypeError, ValueError: as :class:`~app.formats.sealed.SealedEncryptor`.
    """
    return SealedEncryptor(key.material, key.parameters, associated_data, backend)


def sealed_rewrapper(
    keys: DecryptionKeys, target: ResolvedKey, associated_data: bytes, backend: aescore.Backend
) -> SealedRewrapper:
    """A rewrapper for one sealed message: opened under ``keys``, sealed afresh under ``target`` (new salt
    and nonce prefix), with the same ``associated_data`` for both (a rewrap never changes what a ciphertext
    is bound to).

    Raises:
        TypeError, ValueError: as :class:`~app.formats.sealed.SealedDecryptor` and ``SealedEncryptor``.
    """
    return SealedRewrapper(
        keys.sealed_decryptor(associated_data, backend), sealed_encryptor(target, associated_data, backend)
    )

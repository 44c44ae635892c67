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

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from anyio import to_thread

import aescore
from app.formats.sealed import SealedDecryptor, SealedEncryptor, SealedRewrapper
from app.keycache import CacheMissError, KeyCache, ResolvedKey

T = TypeVar("T")

__all__ = [
    "DecryptionKeys",
    "decryption_keys",
    "encryption_key",
    "from_cache",
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
        candidates: at least one resolved version; all share ``key_type``, ``scheme`` and ``segment_size``.
        more: for a :class:`~app.formats.sealed.SealedDecryptor`'s ``more_candidates`` (``None`` when an
            explicit version was asked for). It re-reads the key's versions at most once per instance, however
            many messages (a batch) call it.
    """

    candidates: list[ResolvedKey]
    more: Callable[[], list[tuple[int, bytes]]] | None

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
            [(key.version, key.material) for key in self.candidates],
            self.first.key_type,
            self.first.segment_size,
            associated_data,
            backend,
            more_candidates=self.more,
            scheme=self.first.scheme,
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
    more = (
        functools.cache(functools.partial(keycache.refreshed_candidates, name, backend))
        if version is None
        else None
    )
    return DecryptionKeys(candidates, more)


def sealed_encryptor(key: ResolvedKey, associated_data: bytes, backend: aescore.Backend) -> SealedEncryptor:
    """A fresh encryptor (new salt and nonce prefix) for one sealed message under ``key``.

    Raises:
        TypeError, ValueError: as :class:`~app.formats.sealed.SealedEncryptor`.
    """
    return SealedEncryptor(
        key.material, key.key_type, key.segment_size, associated_data, backend, scheme=key.scheme
    )


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

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

A ``derived`` key's versions are never used as they are: the native API works under the per-context key
:func:`~app.formats.derivation.derive_native` makes from a version and the request's ``context``, which such
a key requires and any other key refuses (:func:`with_context`). ``raw=True`` skips that for the Transit API,
which derives Vault's way itself (:mod:`app.services.transit`).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from typing import NamedTuple, TypeVar

from anyio import to_thread

import aescore
from app.core.secret_memory import KeyMaterial
from app.errors import BadRequestError, ServiceUnavailableError
from app.formats.derivation import derive_native
from app.formats.sealed import SealedDecryptor, SealedEncryptor, SealedRewrapper
from app.keycache import CacheMissError, KeyCache, ResolvedKey

T = TypeVar("T")
#: ``tuple.__new__``: builds a named tuple from its fields without the Python-level ``__new__`` its class
#: call runs (every decrypt builds a :class:`DecryptionKeys`).
_new_tuple = tuple.__new__

__all__ = [
    "DecryptionKeys",
    "cached_decryption_keys",
    "cached_encryption_key",
    "decryption_keys",
    "encryption_key",
    "from_cache",
    "on_event_loop",
    "sealed_encryptor",
    "sealed_rewrapper",
    "with_context",
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


def with_context(key: ResolvedKey, context: bytes | None, backend: aescore.Backend) -> ResolvedKey:
    """``key`` as the native API uses it: a derived key's per-context key for ``context``, any other key as
    it is.

    Raises:
        BadRequestError: a derived key without ``context``, a ``context`` for a key that is not derived, or
            a context that is empty or too long.
    """
    if not key.options.derived:
        if context is not None:
            raise BadRequestError(
                f"key {key.name!r} is not derived: a context is only for keys created with derived true"
            )
        return key
    if context is None:
        raise BadRequestError(
            f"key {key.name!r} is derived: every operation needs a context (base64; the Keystream-Context "
            "header on the streaming routes)"
        )
    material = derive_native(key.material, context)
    return dataclasses.replace(key, material=material, expanded=backend.expand_key(material))


def _encryption_key(
    keycache: KeyCache, name: str, backend: aescore.Backend, version: int | None, cached_only: bool
) -> ResolvedKey:
    """The key version :func:`encryption_key` uses, before any context: the latest, or ``version`` (checked
    as a decrypt would check it: not below ``min_decryption_version``)."""
    if version is None:
        return keycache.resolve(name, None, backend, cached_only=cached_only)
    return keycache.decryption_candidates(name, backend, version, cached_only=cached_only)[0]


def cached_encryption_key(
    keycache: KeyCache,
    name: str,
    backend: aescore.Backend,
    version: int | None,
    context: bytes | None = None,
    *,
    raw: bool = False,
) -> ResolvedKey | None:
    """:func:`encryption_key` when the key cache holds the answer, without a coroutine (every encrypt of a
    key in use); ``None`` when it needs the keystore: then ``await`` :func:`encryption_key`.

    Raises:
        As :func:`encryption_key`, for what the cache knows (a key the cache does not know is ``None``).
    """
    try:
        key = _encryption_key(keycache, name, backend, version, True)
    except CacheMissError:
        return None
    if raw or (context is None and not key.options.derived):  # with_context would give it as it is
        return key
    return with_context(key, context, backend)


async def encryption_key(
    keycache: KeyCache,
    name: str,
    backend: aescore.Backend,
    version: int | None,
    context: bytes | None = None,
    *,
    raw: bool = False,
) -> ResolvedKey:
    """The key version to encrypt with: the latest, or ``version`` when given; for a derived key its
    per-context key for ``context`` (:func:`with_context`), unless ``raw``. A cache hit is answered on the
    event loop (:func:`cached_encryption_key`), a miss in a worker thread.

    Raises:
        KeyNotFoundError: no such key.
        KeyVersionNotFoundError: ``version`` does not exist.
        BadRequestError: ``version`` is below the key's ``min_decryption_version`` (nobody could decrypt), or
            ``context`` does not fit the key (:func:`with_context`).
        KeyUnwrapError: the stored material does not unwrap under the master key.
    """
    key = cached_encryption_key(keycache, name, backend, version, context, raw=raw)
    if key is not None:
        return key
    key = await to_thread.run_sync(_encryption_key, keycache, name, backend, version, False)
    return key if raw else with_context(key, context, backend)


async def rewrap_target(
    keycache: KeyCache, name: str, backend: aescore.Backend, context: bytes | None = None
) -> ResolvedKey:
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
    return await encryption_key(keycache, name, backend, None, context)


class DecryptionKeys(NamedTuple):
    """The versions a ciphertext of one key may be decrypted with, newest first, and how to find more.

    A named tuple: as immutable as a frozen dataclass, and built in ~60% of its time (every decrypt builds
    one; a frozen dataclass sets each field through ``object.__setattr__``).

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


def cached_decryption_keys(
    keycache: KeyCache,
    name: str,
    backend: aescore.Backend,
    version: int | None,
    context: bytes | None = None,
    *,
    raw: bool = False,
    candidates: list[ResolvedKey] | None = None,
) -> DecryptionKeys | None:
    """:func:`decryption_keys` when the key cache holds the versions, without a coroutine (every decrypt
    of a key in use); ``None`` when they need the keystore: then ``await`` :func:`decryption_keys`.

    ``candidates``: the versions :func:`decryption_keys` read, taken instead of the cache's (so what
    becomes of them is written once).

    Raises:
        As :func:`decryption_keys`, for what the cache knows (a key the cache does not know is ``None``).
    """
    if candidates is None:
        try:
            candidates = keycache.decryption_candidates(name, backend, version, cached_only=True)
        except CacheMissError:
            return None
    if not raw:
        for key in candidates:
            if context is not None or key.options.derived:  # else with_context gives each key as it is
                candidates = _with_context_each(candidates, context, backend)
                break
    more = _FreshCandidates(keycache, name, backend, None if raw else context) if version is None else None
    # = DecryptionKeys(candidates, more) without the named tuple's Python-level __new__
    return _new_tuple(DecryptionKeys, (candidates, more))


async def decryption_keys(
    keycache: KeyCache,
    name: str,
    backend: aescore.Backend,
    version: int | None,
    context: bytes | None = None,
    *,
    raw: bool = False,
) -> DecryptionKeys:
    """The versions that may decrypt: ``version`` alone, or latest down to ``min_decryption_version``; for a
    derived key their per-context keys for ``context`` (:func:`with_context`), unless ``raw``. A cache hit
    is answered on the event loop (:func:`cached_decryption_keys`), a miss in a worker thread.

    An explicit ``version`` newer than the cached metadata re-reads the metadata first (another worker may
    have rotated the key), so it is found at once rather than after ``key_metadata_ttl``.

    Raises:
        KeyNotFoundError: no such key.
        KeyVersionNotFoundError: ``version`` does not exist.
        BadRequestError: ``version`` is below the key's ``min_decryption_version``, or ``context`` does not
            fit the key.
        KeyUnwrapError: stored material does not unwrap under the master key.
    """
    keys = cached_decryption_keys(keycache, name, backend, version, context, raw=raw)
    if keys is None:
        read = await to_thread.run_sync(keycache.decryption_candidates, name, backend, version)
        keys = cached_decryption_keys(keycache, name, backend, version, context, raw=raw, candidates=read)
        assert keys is not None  # (given the candidates, it has its answer)
    return keys


def _with_context_each(
    candidates: list[ResolvedKey], context: bytes | None, backend: aescore.Backend
) -> list[ResolvedKey]:
    """:func:`with_context` of each candidate (a function of its own: a comprehension in
    :func:`decryption_keys` would make cells of its arguments on every call)."""
    return [with_context(key, context, backend) for key in candidates]


def on_event_loop() -> bool:
    """True in the thread that runs an event loop (where nothing may wait on the keystore)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _FreshCandidates:
    """The key's versions after a fresh read of its metadata, read at most once per instance.

    Called on the event loop (crypto small enough to run inline), it reads nothing and raises
    :class:`~app.keycache.CacheMissError`: :func:`app.services.crypto_work.run_timed` then runs the whole
    (repeatable) work again in a worker thread, where the read may wait for the database. The streaming
    routes never call it on the loop (:class:`app.services.crypto_step.CryptoStep` runs a call that may
    need it in a thread). With a ``context`` (a derived key's), each version's per-context key.

    A class rather than a ``functools.cache``-wrapped closure: every decrypt without ``key_version`` makes
    one, and it is almost never called; building a cache wrapper cost about 4% of a 1 KiB decrypt.
    """

    __slots__ = ("_backend", "_context", "_found", "_keycache", "_name")

    def __init__(
        self, keycache: KeyCache, name: str, backend: aescore.Backend, context: bytes | None
    ) -> None:
        self._keycache = keycache
        self._name = name
        self._backend = backend
        self._context = context
        self._found: list[tuple[int, KeyMaterial]] | None = None

    def __call__(self) -> list[tuple[int, KeyMaterial]]:
        if self._found is not None:
            return self._found
        if on_event_loop():
            raise CacheMissError(self._name)
        fresh = self._keycache.refreshed_candidates(self._name, self._backend)
        context = self._context
        if context is not None:
            fresh = [(version, derive_native(material, context)) for version, material in fresh]
        self._found = fresh
        return fresh


def sealed_encryptor(
    key: ResolvedKey, associated_data: bytes, backend: aescore.Backend, expected_length: int | None = None
) -> SealedEncryptor:
    """A fresh encryptor (new salt and nonce prefix) for one sealed message under ``key``; given the
    plaintext's ``expected_length``, a ``gcm`` key seals each piece as it comes where the backend can.

    Raises:
        TypeError, ValueError, PayloadTooLargeError: as :class:`~app.formats.sealed.SealedEncryptor`.
    """
    return SealedEncryptor(
        key.material, key.parameters, associated_data, backend, expected_length=expected_length
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

"""Deterministic encryption under ``aes256-siv`` keys: which versions, and where the AES-SIV work runs.

The batch routes serve these keys (:mod:`app.formats.siv`: Tink's ``DeterministicAead``); every other
route refuses them (:class:`~app.keycache.KeyCache` does). Versions follow the native rules
(:mod:`app.services.keys`): encrypt takes the latest version, or an explicit one not below
``min_decryption_version``; decrypt tries an explicit ``key_version`` only, or the versions from the latest
down to ``min_decryption_version``, and a ciphertext no cached version opens gets one fresh read of the
key's versions (another worker may have rotated the key).

AES-SIV runs in OpenSSL, not in an aescore backend, so its metrics carry ``backend="openssl"`` and
``format="siv"``. It runs on the event loop up to ``inline_crypto_max_bytes`` of work (a trial over several
versions weighs its bytes once per version), else in a worker thread.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from anyio import to_thread

from app.core.config import Settings
from app.core.secret_memory import KeyMaterial
from app.errors import ServiceUnavailableError
from app.formats.siv import Opened, open_all, seal_all
from app.keycache import DETERMINISTIC_KEY_TYPE, CacheMissError, DeterministicKey, KeyCache
from app.services.crypto_work import crypto_metrics, timed, trial_limiter
from app.services.keys import from_cache, on_event_loop

__all__ = [
    "DETERMINISTIC_KEY_TYPE",
    "DeterministicKeys",
    "Opened",
    "deterministic_decryption_keys",
    "deterministic_encryption_key",
    "deterministic_rewrap_target",
    "is_deterministic",
    "open_deterministic",
    "seal_deterministic",
]

T = TypeVar("T")
#: The ``backend`` label of AES-SIV's crypto metrics: pyca/cryptography's OpenSSL does the work.
LIBRARY = "openssl"
#: The ``format`` label of AES-SIV's crypto metrics.
FORMAT = "siv"


async def is_deterministic(keycache: KeyCache, name: str) -> bool:
    """True when key ``name`` is an ``aes256-siv`` key (from cached metadata when it is fresh).

    Raises:
        BadRequestError: invalid key name.
        KeyNotFoundError: no such key.
    """
    info = await from_cache(lambda cached: keycache.key_info(name, cached_only=cached))
    return info.key_type == DETERMINISTIC_KEY_TYPE


async def deterministic_encryption_key(
    keycache: KeyCache, name: str, version: int | None
) -> DeterministicKey:
    """The version of ``aes256-siv`` key ``name`` to encrypt with: the latest, or ``version`` when given.

    Raises:
        KeyNotFoundError: no such key.
        KeyVersionNotFoundError: ``version`` does not exist.
        BadRequestError: not an ``aes256-siv`` key, or ``version`` is below its ``min_decryption_version``.
        KeyUnwrapError: the stored material does not unwrap under the master key.
    """
    if version is None:
        return await from_cache(lambda cached: keycache.deterministic_key(name, cached_only=cached))
    return (await deterministic_decryption_keys(keycache, name, version)).candidates[0]


async def deterministic_rewrap_target(keycache: KeyCache, name: str) -> DeterministicKey:
    """The version of ``aes256-siv`` key ``name`` a rewrap encrypts under: the latest, after a fresh read of
    the key's metadata (as :func:`app.services.keys.rewrap_target`, whose reasons hold here too).

    Raises:
        KeyNotFoundError: no such key.
        BadRequestError: not an ``aes256-siv`` key.
        KeyUnwrapError: the stored material does not unwrap under the master key.
    """
    try:
        await to_thread.run_sync(keycache.refresh, name)
    except ServiceUnavailableError:
        pass  # the cached metadata, while the change log still vouches for it (see app.services.coherence)
    return await deterministic_encryption_key(keycache, name, None)


@dataclass(frozen=True)
class DeterministicKeys:
    """The versions an ``aes256-siv`` ciphertext may be opened with, newest first, and how to find more.

    Attributes:
        candidates: at least one version.
        more: :func:`app.formats.siv.open_all`'s ``more_candidates`` (``None`` when an explicit version was
            asked for): the key's versions after a fresh read, read at most once per instance, never on the
            event loop (it raises :class:`~app.keycache.CacheMissError` there: the work runs again in a
            thread).
    """

    candidates: list[DeterministicKey]
    more: Callable[[], list[tuple[int, KeyMaterial]]] | None

    @property
    def materials(self) -> list[tuple[int, KeyMaterial]]:
        """``(version, material)`` of every candidate, newest first, as the format takes them."""
        return [(key.version, key.material) for key in self.candidates]


async def deterministic_decryption_keys(
    keycache: KeyCache, name: str, version: int | None
) -> DeterministicKeys:
    """The versions of ``aes256-siv`` key ``name`` that may decrypt: ``version`` alone, or the latest down to
    ``min_decryption_version``.

    Raises:
        KeyNotFoundError: no such key.
        KeyVersionNotFoundError: ``version`` does not exist.
        BadRequestError: not an ``aes256-siv`` key, or ``version`` is below its ``min_decryption_version``.
        KeyUnwrapError: stored material does not unwrap under the master key.
    """
    candidates = await from_cache(
        lambda cached: keycache.deterministic_candidates(name, version, cached_only=cached)
    )
    return DeterministicKeys(candidates, _fresh_candidates(keycache, name) if version is None else None)


def _fresh_candidates(keycache: KeyCache, name: str) -> Callable[[], list[tuple[int, KeyMaterial]]]:
    """``more``: the key's versions after a fresh read of its metadata, at most once, never on the loop."""

    @functools.cache
    def more() -> list[tuple[int, KeyMaterial]]:
        if on_event_loop():
            raise CacheMissError(name)
        return keycache.refreshed_deterministic_candidates(name)

    return more


async def seal_deterministic(
    settings: Settings, key: DeterministicKey, data: Sequence[bytes], associated_data: Sequence[bytes]
) -> list[bytes]:
    """Encrypt each of ``data`` (with the associated data at the same index) under ``key``: Tink's
    deterministic AEAD output, the same bytes for the same plaintext and associated data."""
    material = key.material
    return await _run(settings, "encrypt", data, 1, lambda: seal_all(material, data, associated_data))


async def open_deterministic(
    settings: Settings, keys: DeterministicKeys, data: Sequence[bytes], associated_data: Sequence[bytes]
) -> list[Opened]:
    """Open each of ``data`` (with the associated data at the same index) under ``keys``, newest first, then
    ``keys.more`` once for those none of them opened.

    Returns:
        Per ciphertext its ``(plaintext, key version)``, or the error saying why it did not open.
    """
    materials = keys.materials
    return await _run(
        settings,
        "decrypt",
        data,
        len(materials),
        lambda: open_all(materials, data, associated_data, more_candidates=keys.more),
    )


async def _run(
    settings: Settings, operation: str, data: Sequence[bytes], candidates: int, work: Callable[[], T]
) -> T:
    """Count and time ``work`` over ``data``: on the loop when its weight (bytes times ``candidates``) fits
    ``inline_crypto_max_bytes``, else in a thread (under the trial limiter when it tries several versions);
    run again in a thread if it needs the keystore (:class:`~app.keycache.CacheMissError` on the loop)."""
    seconds, counter = crypto_metrics(LIBRARY, operation, FORMAT)
    nbytes = sum(map(len, data))
    counter.inc(nbytes)
    if nbytes * candidates <= settings.inline_crypto_max_bytes:
        try:
            return timed(seconds, work)
        except CacheMissError:
            pass  # a ciphertext no cached version opened: the key's versions are read again, off the loop
    limiter = trial_limiter() if candidates > 1 else None
    return await to_thread.run_sync(lambda: timed(seconds, work), limiter=limiter)

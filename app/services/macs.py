"""Which key version an HMAC is made or checked under, and its signer (see :mod:`app.formats.mac`).

``hmac`` takes the version an encrypt would (latest, or an explicit one not below
``min_decryption_version``); ``verify`` the version its tag names, under the rules a decrypt of that version
follows (:mod:`app.services.keys`).
"""

from __future__ import annotations

import aescore
from app.formats.mac import Signer, parse_tag
from app.keycache import KeyCache
from app.services.keys import decryption_keys, encryption_key

__all__ = ["Signer", "check_key", "parse_tag", "signer", "verifier"]


async def signer(
    keycache: KeyCache,
    backend: aescore.Backend,
    name: str,
    version: int | None,
    algorithm: str,
    context: bytes | None = None,
    *,
    raw: bool = False,
) -> Signer:
    """A signer under the key's latest version, or ``version`` (a derived key's per-context key for
    ``context`` unless ``raw``: the Transit API keys HMACs of a derived key as of any key, as Vault does).

    Raises:
        KeyNotFoundError, KeyVersionNotFoundError, BadRequestError: as
        :func:`~app.services.keys.encryption_key`; BadRequestError for an unknown ``algorithm``.
    """
    resolved = await encryption_key(keycache, name, backend, version, context, raw=raw)
    return Signer(resolved.material, resolved.version, algorithm)


async def verifier(
    keycache: KeyCache,
    backend: aescore.Backend,
    name: str,
    version: int,
    algorithm: str,
    context: bytes | None = None,
    *,
    raw: bool = False,
) -> Signer:
    """A signer under ``version``, which a decrypt may use (not below ``min_decryption_version``; ``context``
    and ``raw`` as for :func:`signer`).

    Raises:
        KeyNotFoundError, KeyVersionNotFoundError, BadRequestError: as
        :func:`~app.services.keys.decryption_keys`; BadRequestError for an unknown ``algorithm``.
    """
    keys = await decryption_keys(keycache, name, backend, version, context, raw=raw)
    return Signer(keys.first.material, keys.first.version, algorithm)


async def check_key(keycache: KeyCache, backend: aescore.Backend, name: str) -> None:
    """Nothing when the key exists.

    Raises:
        KeyNotFoundError: it does not.
    """
    await decryption_keys(keycache, name, backend, None, raw=True)

"""The key versions the Transit-compatible API encrypts, decrypts and makes HMACs under.

Versions follow the native rules (:mod:`app.services.keys`): encrypt takes the latest version or an explicit
one not below ``min_decryption_version``; decrypt and verify take the version the text names, refused below
``min_decryption_version``. The ciphertexts are Transit's layout (:mod:`app.formats.transit`), not the sealed
format; HMACs are :mod:`app.formats.mac`'s under the ``vault:`` prefix.
"""

from __future__ import annotations

import aescore
from app.errors import BadRequestError
from app.formats.mac import Signer, parse_tag
from app.formats.transit import HMAC_PREFIX, TransitCipher, parse_text
from app.keycache import DETERMINISTIC_KEY_TYPE, KeyCache
from app.keystore import KeyInfo
from app.services.keys import decryption_keys, encryption_key

__all__ = [
    "HMAC_PREFIX",
    "KEY_TYPES",
    "Signer",
    "TransitCipher",
    "check_key",
    "decryption_cipher",
    "encryption_cipher",
    "parse_hmac",
    "parse_text",
    "transit_type",
]

#: The Transit key types a key is created with, and the native key type each one is.
KEY_TYPES = {"aes256-gcm96": "aes256", "aes128-gcm96": "aes128"}


def transit_type(info: KeyInfo) -> str:
    """The Transit type key ``info`` reads as (``aes192``, which Vault lacks, reads ``aes192-gcm96``).

    Raises:
        BadRequestError: an ``aes256-siv`` key: Vault has no such type (its deterministic mode is convergent
            encryption on a derived key), so the Transit API neither makes nor serves one.
    """
    if info.key_type == DETERMINISTIC_KEY_TYPE:
        raise BadRequestError(
            f"key {info.name!r} is {DETERMINISTIC_KEY_TYPE} (deterministic AES-SIV), which has no Transit "
            "type: use it through the native batch routes under /v1/keys"
        )
    return f"{info.key_type}-gcm96"


async def encryption_cipher(
    keycache: KeyCache, backend: aescore.Backend, name: str, version: int | None
) -> TransitCipher:
    """A Transit cipher under the key's latest version, or ``version``.

    Raises:
        KeyNotFoundError, KeyVersionNotFoundError, BadRequestError: as
        :func:`~app.services.keys.encryption_key`.
    """
    resolved = await encryption_key(keycache, name, backend, version)
    return TransitCipher(resolved.material, resolved.version)


async def decryption_cipher(
    keycache: KeyCache, backend: aescore.Backend, name: str, version: int
) -> TransitCipher:
    """A Transit cipher under ``version``, which a decrypt may use (not below ``min_decryption_version``).

    Raises:
        KeyNotFoundError, KeyVersionNotFoundError, BadRequestError: as
        :func:`~app.services.keys.decryption_keys`.
    """
    keys = await decryption_keys(keycache, name, backend, version)
    return TransitCipher(keys.first.material, keys.first.version)


async def check_key(keycache: KeyCache, backend: aescore.Backend, name: str) -> None:
    """Nothing when key ``name`` exists (checked before a batch's items, so an empty batch on an unknown or
    invalid name fails as a single request would).

    Raises:
        KeyNotFoundError: it does not.
    """
    await decryption_keys(keycache, name, backend, None)


def parse_hmac(text: str) -> tuple[int, bytes]:
    """The version and raw HMAC of a Transit HMAC text, ``vault:v<version>:<base64>``.

    Raises:
        BadRequestError: another shape, or a digest of no supported algorithm's length.
    """
    return parse_tag(text, prefix=HMAC_PREFIX)

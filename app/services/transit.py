"""The key versions the Transit-compatible API encrypts, decrypts and makes HMACs under.

Versions follow the native rules (:mod:`app.services.keys`): encrypt takes the latest version or an explicit
one not below ``min_decryption_version``; decrypt and verify take the version the text names, refused below
``min_decryption_version``. The ciphertexts are Transit's layout (:mod:`app.formats.transit`), not the sealed
format; HMACs are :mod:`app.formats.mac`'s under the ``vault:`` prefix.

A ``derived`` key needs a ``context`` (Vault's error when it is missing) and works under the per-context key
Vault would derive (:func:`~app.formats.derivation.derive_transit`), with a convergent key's nonce key after
it; a key that is not derived ignores a context, as Vault does.
"""

from __future__ import annotations

import aescore
from app.core.schemes import Scheme
from app.errors import BadRequestError
from app.formats.derivation import derive_transit
from app.formats.mac import Signer, parse_tag
from app.formats.transit import HMAC_PREFIX, TransitCipher, decode_text, parse_text, split_text
from app.keycache import DETERMINISTIC_KEY_TYPE, KeyCache, ResolvedKey
from app.keystore import KeyInfo
from app.services.keys import decryption_keys, encryption_key

__all__ = [
    "HMAC_PREFIX",
    "KEY_TYPES",
    "MISSING_CONTEXT",
    "Signer",
    "TransitCipher",
    "check_key",
    "decode_text",
    "decryption_cipher",
    "encryption_cipher",
    "parse_hmac",
    "parse_text",
    "split_text",
    "transit_type",
]

#: Vault's answer to an operation on a derived key without a context.
MISSING_CONTEXT = (
    "missing 'context' for key derivation; the key was created using a derived key, which means additional, "
    "per-request information must be included in order to perform operations with the key"
)
#: Bytes of a convergent key's nonce key (Vault's HMAC key of convergent version 3).
NONCE_KEY_SIZE = 32

#: The Transit key types a key is created with, and the native key type each one is.
KEY_TYPES = {"aes256-gcm96": "aes256", "aes128-gcm96": "aes128"}
#: The scheme of keys created (or imported) through the Transit API: their native ciphertexts use AES-GCM too.
TRANSIT_SCHEME: Scheme = "gcm"


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


def _cipher(key: ResolvedKey, context: bytes | None, sealing: bool) -> TransitCipher:
    """The Transit cipher of ``key``: its material, or a derived key's per-context key (and, to seal under
    a convergent key, its nonce key).

    Raises:
        BadRequestError: a derived key without a context, or a context that is empty or too long.
    """
    if not key.options.derived:
        return TransitCipher(key.material, key.version)
    if not context:
        raise BadRequestError(MISSING_CONTEXT)
    size = len(key.material)
    if sealing and key.options.convergent_encryption:
        derived = derive_transit(key.material, context, size + NONCE_KEY_SIZE)
        return TransitCipher(derived[:size], key.version, nonce_key=derived[size:])
    return TransitCipher(derive_transit(key.material, context, size), key.version)


async def encryption_cipher(
    keycache: KeyCache, backend: aescore.Backend, name: str, version: int | None, context: bytes | None = None
) -> TransitCipher:
    """A Transit cipher under the key's latest version, or ``version`` (a derived key's for ``context``).

    Raises:
        KeyNotFoundError, KeyVersionNotFoundError, BadRequestError: as
        :func:`~app.services.keys.encryption_key`; BadRequestError too for a derived key without a context.
    """
    resolved = await encryption_key(keycache, name, backend, version, raw=True)
    return _cipher(resolved, context, sealing=True)


async def decryption_cipher(
    keycache: KeyCache, backend: aescore.Backend, name: str, version: int, context: bytes | None = None
) -> TransitCipher:
    """A Transit cipher under ``version``, which a decrypt may use (not below ``min_decryption_version``; a
    derived key's for ``context``).

    Raises:
        KeyNotFoundError, KeyVersionNotFoundError, BadRequestError: as
        :func:`~app.services.keys.decryption_keys`; BadRequestError too for a derived key without a context.
    """
    keys = await decryption_keys(keycache, name, backend, version, raw=True)
    return _cipher(keys.first, context, sealing=False)


async def check_key(keycache: KeyCache, backend: aescore.Backend, name: str) -> None:
    """Nothing when key ``name`` exists (checked before a batch's items, so an empty batch on an unknown or
    invalid name fails as a single request would).

    Raises:
        KeyNotFoundError: it does not.
    """
    await decryption_keys(keycache, name, backend, None, raw=True)


def parse_hmac(text: str) -> tuple[int, bytes]:
    """The version and raw HMAC of a Transit HMAC text, ``vault:v<version>:<base64>``.

    Raises:
        BadRequestError: another shape, or a digest of no supported algorithm's length.
    """
    return parse_tag(text, prefix=HMAC_PREFIX)

"""Wrapped key import (bring your own key) for the native API and the Transit API: the service's wrapping
key, made on first use and shared by every worker and replica through the keystore, and the material a
caller wrapped under its public half.

The key pair is RSA-4096 (:mod:`app.formats.wrapped_import`); its private half is kept by the keystore under
the seal (:mod:`app.keystore.wrapping_key`) and never leaves this module but as the public PEM. Both functions
block (a keystore read, an RSA operation, and on first use an RSA-4096 key generation): call them in a
thread.
"""

from __future__ import annotations

from typing import Literal

from app.errors import ForbiddenError
from app.formats.wrapped_import import (
    DEFAULT_HASH_FUNCTION,
    MAX_CIPHERTEXT_BASE64,
    new_wrapping_private_key,
    public_key_pem,
    unwrap_material,
)
from app.keystore import KeyStore

__all__ = [
    "DEFAULT_HASH_FUNCTION",
    "MAX_CIPHERTEXT_BASE64",
    "HashFunction",
    "require_import_enabled",
    "unwrap_imported_material",
    "wrapping_public_key",
]

#: The OAEP hashes a wrapped import may name (Vault's ``hash_function`` values).
HashFunction = Literal["SHA1", "SHA224", "SHA256", "SHA384", "SHA512"]


def require_import_enabled(allowed: bool) -> None:
    """Refuse an import (plain or wrapped, native or Transit) or the wrapping key while
    ``KEYSTREAM_ALLOW_KEY_IMPORT`` (``allowed``) is off.

    Raises:
        ForbiddenError: it is off (403, naming the setting).
    """
    if not allowed:
        raise ForbiddenError("key import is disabled (set KEYSTREAM_ALLOW_KEY_IMPORT=true)")


def wrapping_public_key(keystore: KeyStore) -> str:
    """The wrapping key's public half as PEM (SubjectPublicKeyInfo), made and stored on first use.

    Raises:
        KeyUnwrapError: the stored key does not unwrap under the seal (503 ``key_unwrap_failed``).
        ServiceUnavailableError: the keystore cannot serve now.
    """
    return public_key_pem(keystore.import_wrapping_key(new_wrapping_private_key))


def unwrap_imported_material(keystore: KeyStore, ciphertext: str, hash_function: str) -> memoryview:
    """The material inside a wrapped import's base64 ``ciphertext`` (RSA-OAEP with ``hash_function`` of an
    ephemeral AES key, then AES key wrap with padding of the material), in locked memory.

    Raises:
        WrappedImportError: a bad hash function or ciphertext (400; the message names no byte of it).
        KeyUnwrapError, ServiceUnavailableError: as :func:`wrapping_public_key`.
    """
    return unwrap_material(keystore.import_wrapping_key(new_wrapping_private_key), ciphertext, hash_function)

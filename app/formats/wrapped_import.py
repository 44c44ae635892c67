"""Wrapped key import (bring your own key): the service's RSA wrapping key and the unwrapping of material
sent under it, in the layout Vault's Transit and the cloud KMSs take (PKCS#11's ``CKM_RSA_AES_KEY_WRAP``).

The caller makes a random 32-byte AES key (the ephemeral key), wraps the material with it by AES key wrap
with padding (RFC 5649, "KWP"), encrypts the ephemeral key to the service's RSA-4096 public key with
RSA-OAEP (the same hash for OAEP and MGF1, no label) and sends, base64-encoded::

    ciphertext = RSA-OAEP(public key, ephemeral key)   (512 bytes for RSA-4096)
              || KWP(ephemeral key, material)         (material length rounded up to 8, plus 8 bytes)

which is what Vault's key wrapping guide describes and ``vault transit import`` sends, so material never
travels in plaintext, even without TLS. Everything cryptographic here is pyca/cryptography's. No error
message names a byte of the ciphertext, the ephemeral key or the material.
"""

from __future__ import annotations

import binascii
from base64 import b64decode
from typing import Final

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap_with_padding

from app.core.secret_memory import secret_copy
from app.errors import BadRequestError

__all__ = [
    "DEFAULT_HASH_FUNCTION",
    "HASH_FUNCTIONS",
    "WRAPPING_KEY_BITS",
    "WrappedImportError",
    "new_wrapping_private_key",
    "public_key_pem",
    "unwrap_material",
]

#: The wrapping key's size, as Vault's (its ``wrapping_key`` is always RSA-4096).
WRAPPING_KEY_BITS: Final = 4096
#: The ephemeral AES key's size: Vault refuses any other.
EPHEMERAL_KEY_SIZE: Final = 32
#: OAEP's hash (also MGF1's), by the names Vault's ``hash_function`` takes.
HASH_FUNCTIONS: Final[dict[str, type[hashes.HashAlgorithm]]] = {
    "SHA1": hashes.SHA1,
    "SHA224": hashes.SHA224,
    "SHA256": hashes.SHA256,
    "SHA384": hashes.SHA384,
    "SHA512": hashes.SHA512,
}
DEFAULT_HASH_FUNCTION: Final = "SHA256"
#: The lengths of material any key type takes (aes128, aes192, aes256, aes256-siv).
MATERIAL_SIZES: Final = (16, 24, 32, 64)
#: Longest base64 ciphertext accepted: the RSA block and the KWP of 64 bytes of material, with room to spare.
MAX_CIPHERTEXT_BASE64: Final = 1024


class WrappedImportError(BadRequestError):
    """A wrapped import's ciphertext cannot be opened: its length, the RSA-OAEP block or the key wrap's
    integrity check is wrong (the message says which, never a byte of it)."""

    code = "bad_wrapped_key"


def new_wrapping_private_key() -> bytes:
    """A new RSA-4096 private key (public exponent 65537), as unencrypted PKCS#8 DER.

    The DER is a ``bytes`` object (pyca/cryptography serialises into one): the caller wraps it under the seal
    at once and drops it. Takes about a second of CPU.
    """
    key = rsa.generate_private_key(public_exponent=65537, key_size=WRAPPING_KEY_BITS)
    return key.private_bytes(
        serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _private_key(private_der: bytes | memoryview) -> rsa.RSAPrivateKey:
    """The wrapping key loaded from its DER.

    pyca/cryptography's RSA consistency check is skipped: it costs about 0.3 s of CPU per load for a 4096-bit
    key, and this key is trusted (generated here by pyca/cryptography, and read back only from the seal's
    authenticated blob, which a changed byte fails to open).
    """
    key = serialization.load_der_private_key(
        bytes(private_der), password=None, unsafe_skip_rsa_key_validation=True
    )
    if not isinstance(key, rsa.RSAPrivateKey) or key.key_size != WRAPPING_KEY_BITS:
        raise ValueError("the stored wrapping key is not an RSA-4096 private key")
    return key


def public_key_pem(private_der: bytes | memoryview) -> str:
    """The public half of the wrapping key ``private_der`` as PEM (``-----BEGIN PUBLIC KEY-----``, X.509
    SubjectPublicKeyInfo: what Vault's ``wrapping_key`` answers and ``x509.ParsePKIXPublicKey`` reads)."""
    public = _private_key(private_der).public_key()
    pem = public.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return pem.decode("ascii")


def check_hash_function(name: str) -> type[hashes.HashAlgorithm]:
    """OAEP's hash class for Vault's ``hash_function`` name.

    Raises:
        WrappedImportError: not one of :data:`HASH_FUNCTIONS` (the message lists them).
    """
    algorithm = HASH_FUNCTIONS.get(name)
    if algorithm is None:
        raise WrappedImportError(
            f"hash_function must be one of {', '.join(HASH_FUNCTIONS)}, got {name[:16]!r}"
        )
    return algorithm


def unwrap_material(private_der: bytes | memoryview, ciphertext: str, hash_function: str) -> memoryview:
    """The material inside a wrapped import's base64 ``ciphertext`` (layout in the module docstring), in
    locked memory (a read-only view, zeroed once dropped).

    Args:
        private_der: the wrapping key (PKCS#8 DER, from the keystore).
        ciphertext: standard base64 of the RSA-OAEP block followed by the KWP of the material.
        hash_function: OAEP's hash, by Vault's name (``SHA256`` by default there).

    Raises:
        WrappedImportError: not base64; shorter than the RSA block plus one key wrap; the RSA block does not
            decrypt (another wrapping key, another hash function); the ephemeral key is not 32 bytes; the key
            wrap's integrity check fails. The material's length is the caller's to check.
    """
    algorithm = check_hash_function(hash_function)
    if len(ciphertext) > MAX_CIPHERTEXT_BASE64:
        raise WrappedImportError(
            f"ciphertext is too long: at most {MAX_CIPHERTEXT_BASE64} base64 characters (an RSA-4096 block "
            "and the key wrap of at most 64 bytes of material)"
        )
    try:
        blob = b64decode(ciphertext, validate=True)
    except (binascii.Error, ValueError):
        raise WrappedImportError("ciphertext must be standard base64") from None
    block = WRAPPING_KEY_BITS // 8
    wrapped = blob[block:]
    if len(blob) < block + 16 or len(wrapped) % 8:
        raise WrappedImportError(
            f"ciphertext must be the {block}-byte RSA-OAEP block of the ephemeral AES key followed by the "
            "AES key wrap (with padding) of the material, a multiple of 8 bytes and at least 16; got "
            f"{len(blob)} bytes"
        )
    key = _private_key(private_der)
    oaep = padding.OAEP(mgf=padding.MGF1(algorithm=algorithm()), algorithm=algorithm(), label=None)
    try:
        ephemeral = key.decrypt(blob[:block], oaep)
    except ValueError:
        raise WrappedImportError(
            f"the ciphertext's RSA-OAEP block does not decrypt under this service's wrapping key with "
            f"{hash_function}: wrap with the public key from wrapping_key and the same hash_function"
        ) from None
    if len(ephemeral) != EPHEMERAL_KEY_SIZE:
        raise WrappedImportError(
            f"the ephemeral AES key must be {EPHEMERAL_KEY_SIZE} bytes, got {len(ephemeral)}"
        )
    try:
        material = aes_key_unwrap_with_padding(ephemeral, wrapped)
    except InvalidUnwrap:
        raise WrappedImportError(
            "the material's AES key wrap does not verify under the ephemeral key (corrupt or mismatched "
            "ciphertext)"
        ) from None
    if len(material) not in MATERIAL_SIZES:
        raise WrappedImportError(
            f"the wrapped material must be {', '.join(map(str, MATERIAL_SIZES))} bytes, got {len(material)}"
        )
    # pyca/cryptography returns ``bytes`` (the ephemeral key and the material, dropped here); the material
    # the keystore wraps is a copy in locked memory.
    return secret_copy(material).readonly()

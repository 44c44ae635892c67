"""A client-side wrap for wrapped key import, made as Vault's key wrapping guide describes and as
``vault transit import`` does, with pyca/cryptography: a random 32-byte ephemeral AES key, the material
wrapped under it by AES key wrap with padding (RFC 5649), the ephemeral key encrypted to the service's
RSA public key with RSA-OAEP (the same hash for OAEP and MGF1, an empty label), the two concatenated and
base64-encoded. Tests of the service's unwrapping use it as the independent other side.
"""

from __future__ import annotations

import base64
import os

from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.hazmat.primitives.keywrap import aes_key_wrap_with_padding

#: Vault's ``hash_function`` names.
HASHES: dict[str, type[hashes.HashAlgorithm]] = {
    "SHA1": hashes.SHA1,
    "SHA224": hashes.SHA224,
    "SHA256": hashes.SHA256,
    "SHA384": hashes.SHA384,
    "SHA512": hashes.SHA512,
}


def vault_wrap(
    public_key_pem: str, material: bytes, hash_function: str = "SHA256", ephemeral_key: bytes | None = None
) -> str:
    """Base64 of RSA-OAEP(public key, ephemeral AES key) || KWP(ephemeral AES key, material)."""
    public = serialization.load_pem_public_key(public_key_pem.encode())
    assert isinstance(public, rsa.RSAPublicKey)
    ephemeral = os.urandom(32) if ephemeral_key is None else ephemeral_key
    algorithm = HASHES[hash_function]
    wrapped_key = public.encrypt(
        ephemeral, padding.OAEP(mgf=padding.MGF1(algorithm=algorithm()), algorithm=algorithm(), label=None)
    )
    return base64.b64encode(wrapped_key + aes_key_wrap_with_padding(ephemeral, material)).decode()

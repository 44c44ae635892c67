"""Wrapped import on the client side: key material wrapped under the service's wrapping key before it is
sent, so it never travels in clear (even without TLS).

The layout is Vault's "bring your own key" (PKCS#11's ``CKM_RSA_AES_KEY_WRAP``): a random 32-byte AES key,
the material wrapped under it by AES key wrap with padding (RFC 5649), the AES key encrypted to the service's
RSA public key with RSA-OAEP-SHA256 (MGF1-SHA256, no label), the two concatenated and base64-encoded. The
cryptography comes from pyca/cryptography, the optional ``wrapped`` extra of this distribution
(``pip install 'keystream-client[wrapped]'``); nothing else in the client needs it.
"""

from __future__ import annotations

import base64
import os

__all__ = ["wrap_for_import"]


def wrap_for_import(public_key_pem: str, material: bytes) -> str:
    """The base64 ``ciphertext`` of ``material`` wrapped under the RSA public key ``public_key_pem``.

    Raises:
        ImportError: pyca/cryptography is not installed (the message names the extra to install).
        ValueError: ``public_key_pem`` is not an RSA public key in PEM.
    """
    try:
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import padding, rsa
        from cryptography.hazmat.primitives.keywrap import aes_key_wrap_with_padding
    except ImportError as exc:
        raise ImportError(
            "wrapped import needs pyca/cryptography: pip install 'keystream-client[wrapped]'"
        ) from exc
    public = serialization.load_pem_public_key(public_key_pem.encode("ascii"))
    if not isinstance(public, rsa.RSAPublicKey):
        raise ValueError("the service's wrapping key is not an RSA public key")
    ephemeral = os.urandom(32)
    oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=None)
    wrapped = public.encrypt(ephemeral, oaep) + aes_key_wrap_with_padding(ephemeral, material)
    return base64.b64encode(wrapped).decode("ascii")

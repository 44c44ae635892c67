"""Wrapped key import's cryptography (:mod:`app.formats.wrapped_import`): an RSA-4096 wrapping key whose
public half is PKIX PEM, material wrapped as Vault's guide says (``tests/byok.py``) unwrapped with every
``hash_function`` Vault allows, and every bad ciphertext refused with a message that names no byte of it.
"""

from __future__ import annotations

import base64
import os

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from app.errors import BadRequestError
from app.formats.wrapped_import import (
    WrappedImportError,
    new_wrapping_private_key,
    public_key_pem,
    unwrap_material,
)
from tests.byok import HASHES, vault_wrap


@pytest.fixture(scope="module")
def private_der() -> bytes:
    return new_wrapping_private_key()


@pytest.fixture(scope="module")
def public_pem(private_der: bytes) -> str:
    return public_key_pem(private_der)


def test_the_wrapping_key_is_rsa_4096_with_a_pkix_pem_public_half(
    private_der: bytes, public_pem: str
) -> None:
    assert public_pem.startswith("-----BEGIN PUBLIC KEY-----\n")
    public = serialization.load_pem_public_key(public_pem.encode())
    assert isinstance(public, rsa.RSAPublicKey) and public.key_size == 4096
    assert public.public_numbers().e == 65537
    assert "PRIVATE" not in public_pem


@pytest.mark.parametrize("hash_function", sorted(HASHES))
@pytest.mark.parametrize("length", [16, 24, 32, 64])
def test_material_wrapped_as_vault_does_unwraps(
    private_der: bytes, public_pem: str, hash_function: str, length: int
) -> None:
    material = os.urandom(length)
    opened = unwrap_material(private_der, vault_wrap(public_pem, material, hash_function), hash_function)
    assert bytes(opened) == material
    assert isinstance(opened, memoryview) and opened.readonly


def _refused(private_der: bytes, ciphertext: str, hash_function: str = "SHA256") -> str:
    with pytest.raises(WrappedImportError) as caught:
        unwrap_material(private_der, ciphertext, hash_function)
    assert isinstance(caught.value, BadRequestError)  # answered 400
    return str(caught.value)


def test_bad_ciphertexts_are_refused_without_their_bytes(private_der: bytes, public_pem: str) -> None:
    material = bytes(range(32))
    good = vault_wrap(public_pem, material)
    raw = base64.b64decode(good)
    assert "base64" in _refused(private_der, "not base64!")
    assert "got 100 bytes" in _refused(private_der, base64.b64encode(raw[:100]).decode())
    assert "multiple of 8" in _refused(private_der, base64.b64encode(raw + b"x").decode())
    assert "too long" in _refused(private_der, "A" * 2000)
    assert "does not decrypt" in _refused(private_der, good, "SHA512")  # another OAEP hash
    flipped = bytearray(raw)
    flipped[-1] ^= 1
    assert "does not verify" in _refused(private_der, base64.b64encode(bytes(flipped)).decode())
    short_key = vault_wrap(public_pem, material, ephemeral_key=os.urandom(16))
    assert "must be 32 bytes, got 16" in _refused(private_der, short_key)
    odd_material = vault_wrap(public_pem, os.urandom(20))
    assert "got 20" in _refused(private_der, odd_material)
    assert "hash_function must be one of SHA1, SHA224, SHA256, SHA384, SHA512" in _refused(
        private_der, good, "MD5"
    )
    for message in (_refused(private_der, good, "SHA1"), _refused(private_der, odd_material)):
        assert material.hex() not in message and good[:40] not in message


def test_another_wrapping_key_s_ciphertext_does_not_decrypt(private_der: bytes) -> None:
    other_public = public_key_pem(new_wrapping_private_key())
    assert "does not decrypt" in _refused(private_der, vault_wrap(other_public, os.urandom(32)))

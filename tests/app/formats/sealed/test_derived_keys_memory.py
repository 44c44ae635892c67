"""Per-message derived keys are written by aescore's C HKDF into locked memory and zeroed once dropped.

Before, ``hkdf_sha256`` built them with ``hmac.digest``: every block, the output and the HMAC key that
``hmac.new`` required were ``bytes`` left in freed heap memory after each message.
"""

from __future__ import annotations

import gc
import hashlib
import hmac
import os

import pytest
from Crypto.Hash import SHA256
from Crypto.Protocol.KDF import HKDF

import aescore
from app.audit import audit_keys_for, derive_audit_keys
from app.core.secret_memory import SLOT_SIZE, SecretBuffer
from app.formats.sealed import (
    AlreadyFinalizedError,
    derive_gcm_key,
    derive_keys,
    derive_secret,
    hmac_sha256_states,
)
from app.formats.sealed.segments import GcmSegmentKeys, SegmentKeys, segment_keys
from app.seal import FileSeal

AESNI = aescore.get_backend("aesni")


def _slot_of(view: memoryview) -> memoryview:
    """The chunk memory under a secret's view, which does not keep the secret alive."""
    owner = view.obj
    assert isinstance(owner, SecretBuffer)
    start = owner._slot * SLOT_SIZE
    return memoryview(owner._chunk.memory)[start : start + SLOT_SIZE]


def _hkdf(ikm: bytes, salt: bytes, info: bytes, length: int) -> bytes:
    return bytes(HKDF(ikm, length, salt or bytes(32), SHA256, context=info))


@pytest.mark.parametrize("derived_size", [16, 24, 32])
def test_ctr_hmac_and_gcm_keys_are_views_of_locked_memory_zeroed_when_dropped(derived_size: int) -> None:
    ikm, salt, ad = os.urandom(32), os.urandom(derived_size), b"associated data"
    expected = _hkdf(ikm, salt, ad, derived_size + 32)
    aes_key, mac_key = derive_keys(memoryview(ikm), salt, ad, derived_size)
    assert (bytes(aes_key), bytes(mac_key)) == (expected[:derived_size], expected[derived_size:])
    assert aes_key.readonly and isinstance(aes_key.obj, SecretBuffer) and aes_key.obj is mac_key.obj
    slot = _slot_of(aes_key)
    del aes_key, mac_key
    gc.collect()
    assert bytes(slot) == bytes(SLOT_SIZE)

    gcm_key = derive_gcm_key(ikm, salt, ad, derived_size)
    assert bytes(gcm_key) == expected[:derived_size] and isinstance(gcm_key.obj, SecretBuffer)


def test_derive_secret_refuses_what_locked_memory_cannot_hold() -> None:
    with pytest.raises(ValueError, match="1 to 64 bytes"):
        derive_secret(os.urandom(32), b"salt", b"info", 65)
    with pytest.raises(ValueError, match="1 to 64 bytes"):
        derive_secret(os.urandom(32), b"salt", b"info", 0)


@pytest.mark.parametrize("key_size", [0, 1, 32, 64, 65, 200])
def test_hmac_states_give_hmac_sha256(key_size: int) -> None:
    key = os.urandom(key_size)
    inner, outer = hmac_sha256_states(memoryview(key))
    inner.update(b"message")
    outer.update(inner.digest())
    assert outer.digest() == hmac.new(key, b"message", hashlib.sha256).digest()


def test_a_messages_segment_keys_hold_no_bytes_copy_of_the_derived_keys() -> None:
    """The AES key stays a view of locked memory until expanded; the MAC key only as two hash states."""
    ikm, salt = os.urandom(32), os.urandom(32)
    keys = segment_keys("ctr-hmac", ikm, salt, b"ad", 32, bytes(7), AESNI)
    assert isinstance(keys, SegmentKeys)
    expected = _hkdf(ikm, salt, b"ad", 64)
    assert isinstance(keys._aes_key, memoryview) and isinstance(keys._aes_key.obj, SecretBuffer)
    held = [getattr(keys, name) for name in SegmentKeys.__slots__]
    assert not [
        value
        for value in held
        if isinstance(value, bytes) and (expected[:32] in value or expected[32:] in value)
    ]
    nonce = bytes(16)
    assert keys.tag(nonce, b"ciphertext") == hmac.new(expected[32:], nonce + b"ciphertext", "sha256").digest()


def test_the_file_seal_derives_the_audit_keys_into_locked_memory_as_before() -> None:
    """Same keys as the standard library's HKDF gave (logs written before keep verifying), now written in
    place by the seal."""
    master_key = os.urandom(32)
    keys = audit_keys_for(FileSeal(master_key))
    expected = _hkdf(master_key, b"keystream-audit", b"keystream audit hash key v1", 32) + _hkdf(
        master_key, b"keystream-audit", b"keystream audit chain key v1", 32
    )
    assert bytes(keys.material) == expected and isinstance(keys.material.obj, SecretBuffer)
    assert bytes(derive_audit_keys(master_key).material) == expected
    out = memoryview(bytearray(32))
    with pytest.raises(ValueError):
        FileSeal(master_key).derive_key_into(b"salt", b"info", out[:0])


def _assert_forgotten(keys: SegmentKeys | GcmSegmentKeys) -> None:
    if isinstance(keys, SegmentKeys):
        assert (keys._aes_key, keys._expanded) == (None, None)
    else:
        assert keys._gcm is None


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
def test_finalize_zeroes_the_derived_keys_while_the_encryptor_and_decryptor_live_on(scheme: str) -> None:
    """A worker thread keeps its last job (and the encryptor in it) until its next one: the core images of a
    server still held the last streamed message's AES key in aescore's schedule after the wipe."""
    from app.formats.sealed import KeyParameters, SealedDecryptor, SealedEncryptor

    ikm = os.urandom(32)
    parameters = KeyParameters("aes128", 4096, scheme)
    encryptor = SealedEncryptor(ikm, parameters, b"ad", AESNI)
    keys = encryptor._keys
    aes_key = keys._aes_key if isinstance(keys, SegmentKeys) else None
    sealed = encryptor.update(os.urandom(10000)) + encryptor.finalize()
    size = sealed[0] - 8
    derived = _hkdf(ikm, sealed[1 : 1 + size], b"ad", size + (32 if scheme == "ctr-hmac" else 0))
    if aes_key is not None:
        slot = _slot_of(aes_key)
        del aes_key
        assert derived[:size] not in bytes(slot)  # freed and zeroed though the encryptor lives
    _assert_forgotten(encryptor._keys)
    decryptor = SealedDecryptor([(1, ikm)], parameters, b"ad", AESNI)
    assert len(decryptor.update(sealed) + decryptor.finalize()) == 10000
    opened = decryptor._keys
    assert opened is not None
    _assert_forgotten(opened)
    with pytest.raises(AlreadyFinalizedError):
        opened.seal(bytes(16), memoryview(b"x"), 16)

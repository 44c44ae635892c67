"""AES-256-GCM under a master key held in secret memory, leaving no copy of the key behind.

The file and shamir seals keep their master key in locked memory (:mod:`app.core.secret_memory`). Each call
here builds the key schedule with aescore's ``aesni`` backend, which zeroes it when the call drops it;
pycryptodome frees its schedules without zeroing them (the first two AES-256 round keys are the key itself,
left in freed heap memory), so it serves only a CPU without AES-NI. Standard GCM either way: blobs are the
same bytes whichever library made them.
"""

from __future__ import annotations

from Crypto.Cipher import AES

import aescore
from aescore.errors import BackendUnavailableError, InvalidTag
from app.core.secret_memory import secret_buffer

from .base import SealUnwrapError
from .blob import TAG_SIZE

__all__ = ["open_blob", "open_blob_secret", "seal_blob"]


def _aesni(key: memoryview) -> aescore.AesGcm | None:
    try:
        return aescore.AesGcm("aesni", key)
    except BackendUnavailableError:
        return None


def seal_blob(key: memoryview, nonce: bytes, plaintext: bytes | memoryview, associated_data: bytes) -> bytes:
    """``ciphertext || tag`` of ``plaintext`` (any buffer, read in place) under ``key``."""
    gcm = _aesni(key)
    if gcm is not None:
        return gcm.encrypt(nonce, plaintext, associated_data)
    cipher = AES.new(key, AES.MODE_GCM, nonce=nonce)
    cipher.update(associated_data)
    ciphertext, tag = cipher.encrypt_and_digest(plaintext)
    return bytes(ciphertext) + bytes(tag)


def _open_into(key: memoryview, nonce: bytes, sealed: bytes, associated_data: bytes, out: memoryview) -> None:
    gcm = _aesni(key)
    try:
        if gcm is not None:
            gcm.decrypt_into(nonce, sealed, associated_data, out)
            return
        cipher = AES.new(key, AES.MODE_GCM, nonce=nonce)
        cipher.update(associated_data)
        cipher.decrypt_and_verify(sealed[:-TAG_SIZE], sealed[-TAG_SIZE:], output=out)
    except (InvalidTag, ValueError):
        out[:] = bytes(len(out))
        raise SealUnwrapError("the blob does not authenticate") from None


def open_blob(key: memoryview, nonce: bytes, sealed: bytes, associated_data: bytes) -> bytes:
    """The plaintext of ``ciphertext || tag``.

    Raises:
        SealUnwrapError: shorter than a tag, or the tag does not verify (another key, associated data,
            corruption).
    """
    if len(sealed) < TAG_SIZE:
        raise SealUnwrapError("the blob does not authenticate")
    out = bytearray(len(sealed) - TAG_SIZE)
    _open_into(key, nonce, sealed, associated_data, memoryview(out))
    return bytes(out)


def open_blob_secret(key: memoryview, nonce: bytes, sealed: bytes, associated_data: bytes) -> memoryview:
    """:func:`open_blob` straight into locked memory: a read-only view (zeroed when the last view goes).

    Raises:
        SealUnwrapError: as :func:`open_blob`.
        ValueError: the plaintext is empty or longer than a secret buffer holds (64 bytes).
    """
    if len(sealed) < TAG_SIZE:
        raise SealUnwrapError("the blob does not authenticate")
    secret = secret_buffer(len(sealed) - TAG_SIZE)
    _open_into(key, nonce, sealed, associated_data, secret.view())
    return secret.readonly()

"""A sealed message's length from its plaintext's and back (what a streamed answer's Content-Length is).

:func:`plaintext_length` is checked against the decryptor itself, for every ciphertext length up to a few
segments: a ciphertext of each length is built segment by segment (properly sealed where a segment can hold
its tag, including a last segment holding only its tag, which the encryptor never writes but the decryptor
accepts), and the decryptor's outcome must match: the same plaintext length, or the same error.
"""

from __future__ import annotations

import os

import pytest

import aescore
from app.formats.sealed import (
    KeyParameters,
    SealedDecryptionError,
    SealedDecryptor,
    ciphertext_length,
    plaintext_length,
)
from app.formats.sealed.format import NONCE_PREFIX_SIZE
from app.formats.sealed.segments import segment_keys

IKM = bytes(range(32))
#: The smallest segments each scheme allows for aes128 (header 24 bytes), and a little more.
SEGMENT_SIZES = {"ctr-hmac": (57, 64), "gcm": (41, 48)}


def _sealed_of_length(length: int, parameters: KeyParameters, backend: aescore.Backend) -> bytes:
    """``length`` bytes laid out as the decryptor reads them: header, then segments of the key's sizes, each
    sealed with its index and last flag when it can hold its tag, random bytes when it cannot."""
    header_size = parameters.header_length
    if length <= header_size:
        return bytes([header_size]) + os.urandom(max(0, length - 1)) if length else b""
    salt = os.urandom(parameters.derived_key_size)
    prefix = os.urandom(NONCE_PREFIX_SIZE)
    keys = segment_keys(parameters.scheme, IKM, salt, b"", parameters.derived_key_size, prefix, backend)
    out = [bytes([header_size]) + salt + prefix]
    left, index = length - header_size, 0
    while left:
        size = min(left, parameters.segment_size - (header_size if index == 0 else 0))
        left -= size
        if size < keys.tag_size:
            out.append(os.urandom(size))
        else:
            plaintext = memoryview(os.urandom(size - keys.tag_size))
            out += keys.seal(keys.nonce(index, last=not left), plaintext, 1 << 20)
        index += 1
    return b"".join(out)


def _decrypted_length(ciphertext: bytes, parameters: KeyParameters, backend: aescore.Backend) -> int:
    decryptor = SealedDecryptor([(1, IKM)], parameters, b"", backend)
    return len(decryptor.update(ciphertext) + decryptor.finalize())


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
def test_every_ciphertext_length_has_the_decryptors_plaintext_length_or_its_error(scheme: str) -> None:
    backend = aescore.get_backend("python")
    for segment_size in SEGMENT_SIZES[scheme]:
        parameters = KeyParameters("aes128", segment_size, scheme)
        for length in range(0, 4 * segment_size + 3):
            ciphertext = _sealed_of_length(length, parameters, backend)
            assert len(ciphertext) == length
            try:
                expected: int | str = _decrypted_length(ciphertext, parameters, backend)
            except SealedDecryptionError as exc:
                expected = str(exc)
            try:
                computed: int | str = plaintext_length(length, "aes128", segment_size, scheme)
            except SealedDecryptionError as exc:
                assert not exc.plaintext_released
                computed = str(exc)
            assert computed == expected, (scheme, segment_size, length)


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
@pytest.mark.parametrize("key_type", ["aes128", "aes192", "aes256"])
def test_it_inverts_ciphertext_length(scheme: str, key_type: str) -> None:
    for segment_size in (SEGMENT_SIZES[scheme][1] + 16, 4096, 1 << 20):
        for size in (0, 1, 4095, 4096, 4097, 1 << 20, (1 << 20) + 1, 10 << 20, 12_345_678):
            sealed = ciphertext_length(size, key_type, segment_size, scheme)
            assert plaintext_length(sealed, key_type, segment_size, scheme) == size


def test_an_impossible_length_names_what_is_wrong_before_any_plaintext() -> None:
    with pytest.raises(SealedDecryptionError, match="shorter than the 40-byte header") as short:
        plaintext_length(39, "aes256", 4096)
    assert short.value.segment_index is None and not short.value.plaintext_released
    with pytest.raises(SealedDecryptionError, match="segment 0 is missing"):
        plaintext_length(40, "aes256", 4096)
    with pytest.raises(SealedDecryptionError, match="segment 1 is truncated: 31 bytes") as tail:
        plaintext_length(4096 + 31, "aes256", 4096)
    assert tail.value.segment_index == 1
    with pytest.raises(SealedDecryptionError, match="2\\*\\*32"):
        plaintext_length(40 + (2**32 + 1) * 4096, "aes256", 4096, "gcm")


@pytest.mark.parametrize("value", [-1, 1.5, True, "10"])
def test_a_length_that_is_no_count_of_bytes_is_refused(value: object) -> None:
    with pytest.raises((TypeError, ValueError)):
        plaintext_length(value, "aes256", 4096)  # type: ignore[arg-type]

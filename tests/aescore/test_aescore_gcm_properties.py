"""Property tests: AesGcm on every backend and aesni path against cryptography's AESGCM (OpenSSL).

All key sizes, data of 0..5000 bytes (biased to the batch and tail boundaries of the vector paths),
associated data of 0..300 bytes; any single-bit change of the tag, the ciphertext, the associated data or the
nonce is rejected, and ``decrypt_into`` then leaves zeros.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from hypothesis import given, settings
from hypothesis import strategies as st

import aescore

PropertySettings = Callable[[int], settings]

keys = st.sampled_from([16, 24, 32]).flatmap(lambda size: st.binary(min_size=size, max_size=size))
#: Around 16 (block), 64 (zmm), 128 (xmm batch), 256 (ymm/zmm batch) and their multiples, and anywhere.
lengths = st.one_of(
    st.integers(0, 5000),
    st.builds(lambda n, d: max(0, n * 16 + d), st.integers(0, 40), st.integers(-2, 2)),
)
associated_lengths = st.one_of(st.integers(0, 300), st.sampled_from([0, 15, 16, 17, 255, 256, 257]))


def _bytes(length: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(length)


def test_matches_cryptography_both_ways(
    gcm_backend: aescore.Backend, gcm_property_settings: PropertySettings
) -> None:
    @gcm_property_settings(150)
    @given(key=keys, length=lengths, associated=associated_lengths, seed=st.integers(0, 2**32))
    def check(key: bytes, length: int, associated: int, seed: int) -> None:
        nonce, data, ad = _bytes(12, seed), _bytes(length, seed + 1), _bytes(associated, seed + 2)
        ours, reference = aescore.AesGcm(gcm_backend, key), AESGCM(key)
        sealed = ours.encrypt(nonce, data, ad or None)
        assert sealed == reference.encrypt(nonce, data, ad or None)
        assert ours.decrypt(nonce, sealed, ad) == data
        out = bytearray(length + 16)
        assert ours.encrypt_into(nonce, data, ad, out) == length + 16 and out == sealed
        plain = bytearray(length)
        assert ours.decrypt_into(nonce, out, ad, plain) == length and plain == data

    check()


@pytest.mark.parametrize("part", ["tag", "ciphertext", "associated_data", "nonce"])
def test_any_changed_bit_is_rejected(
    gcm_backend: aescore.Backend, gcm_property_settings: PropertySettings, part: str
) -> None:
    @gcm_property_settings(40)
    @given(
        key=keys, length=lengths, associated=associated_lengths, seed=st.integers(0, 2**32), data=st.data()
    )
    def check(key: bytes, length: int, associated: int, seed: int, data: st.DataObject) -> None:
        nonce, message, ad = (
            bytearray(_bytes(12, seed)),
            _bytes(length, seed + 1),
            bytearray(_bytes(associated, seed)),
        )
        sealed = bytearray(AESGCM(key).encrypt(bytes(nonce), message, bytes(ad)))
        if part == "tag":
            target, low = sealed, length
        elif part == "ciphertext":
            target, low = sealed, 0
            if length == 0:
                return
        elif part == "associated_data":
            target, low = ad, 0
            if associated == 0:
                return
        else:
            target, low = nonce, 0
        high = length if part == "ciphertext" else len(target)
        position = data.draw(st.integers(low, high - 1))
        target[position] ^= 1 << data.draw(st.integers(0, 7))
        gcm = aescore.AesGcm(gcm_backend, key)
        with pytest.raises(aescore.InvalidTag):
            gcm.decrypt(nonce, sealed, ad)
        out = bytearray(b"\xa5" * length)
        with pytest.raises(aescore.InvalidTag):
            gcm.decrypt_into(nonce, sealed, ad, out)
        assert out == bytes(length)

    check()

"""Published known-answer vectors, run on every backend.

NIST SP 800-38A (2001) Appendix F.5.1-F.5.6: CTR-AES128/192/256 encrypt and decrypt, four blocks from the
initial counter block f0f1...feff. FIPS-197 Appendix B and C.1-C.3: one block each, computed here as the first
keystream block of a counter equal to the plaintext block (AES_K(counter) XOR 0^128).
"""

from __future__ import annotations

import pytest

import aescore

SP800_38A_COUNTER = bytes.fromhex("f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")
SP800_38A_PLAINTEXT = bytes.fromhex(
    "6bc1bee22e409f96e93d7e117393172a"
    "ae2d8a571e03ac9c9eb76fac45af8e51"
    "30c81c46a35ce411e5fbc1191a0a52ef"
    "f69f2445df4f9b17ad2b417be66c3710"
)
#: (section, key, ciphertext); the decrypt sections F.5.2/F.5.4/F.5.6 are the same vectors read backwards.
SP800_38A_CTR = [
    (
        "F.5.1 CTR-AES128",
        "2b7e151628aed2a6abf7158809cf4f3c",
        "874d6191b620e3261bef6864990db6ce9806f66b7970fdff8617187bb9fffdff"
        "5ae4df3edbd5d35e5b4f09020db03eab1e031dda2fbe03d1792170a0f3009cee",
    ),
    (
        "F.5.3 CTR-AES192",
        "8e73b0f7da0e6452c810f32b809079e562f8ead2522c6b7b",
        "1abc932417521ca24f2b0459fe7e6e0b090339ec0aa6faefd5ccc2c6f4ce8e94"
        "1e36b26bd1ebc670d1bd1d665620abf74f78a7f6d29809585a97daec58c6b050",
    ),
    (
        "F.5.5 CTR-AES256",
        "603deb1015ca71be2b73aef0857d77811f352c073b6108d72d9810a30914dff4",
        "601ec313775789a5b7a7f504bbf3d228f443e3ca4d62b59aca84e990cacaf5c5"
        "2b0930daa23de94ce87017ba2d84988ddfc9c58db67aada613c2dd08457941a6",
    ),
]

FIPS_197 = [
    (
        "B AES-128",
        "2b7e151628aed2a6abf7158809cf4f3c",
        "3243f6a8885a308d313198a2e0370734",
        "3925841d02dc09fbdc118597196a0b32",
    ),
    (
        "C.1 AES-128",
        "000102030405060708090a0b0c0d0e0f",
        "00112233445566778899aabbccddeeff",
        "69c4e0d86a7b0430d8cdb78070b4c55a",
    ),
    (
        "C.2 AES-192",
        "000102030405060708090a0b0c0d0e0f1011121314151617",
        "00112233445566778899aabbccddeeff",
        "dda97ca4864cdfe06eaf70a0ec0d7191",
    ),
    (
        "C.3 AES-256",
        "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f",
        "00112233445566778899aabbccddeeff",
        "8ea2b7ca516745bfeafc49904b496089",
    ),
]


@pytest.mark.parametrize(("section", "key", "ciphertext"), SP800_38A_CTR, ids=[v[0] for v in SP800_38A_CTR])
def test_sp800_38a_ctr_encrypt(backend: aescore.Backend, section: str, key: str, ciphertext: str) -> None:
    expanded = backend.expand_key(bytes.fromhex(key))
    assert backend.ctr_xor(expanded, SP800_38A_COUNTER, SP800_38A_PLAINTEXT) == bytes.fromhex(ciphertext)


@pytest.mark.parametrize(("section", "key", "ciphertext"), SP800_38A_CTR, ids=[v[0] for v in SP800_38A_CTR])
def test_sp800_38a_ctr_decrypt(backend: aescore.Backend, section: str, key: str, ciphertext: str) -> None:
    """F.5.2, F.5.4, F.5.6: decryption is the same keystream XOR."""
    expanded = backend.expand_key(bytes.fromhex(key))
    assert backend.ctr_xor(expanded, SP800_38A_COUNTER, bytes.fromhex(ciphertext)) == SP800_38A_PLAINTEXT


@pytest.mark.parametrize(("section", "key", "ciphertext"), SP800_38A_CTR, ids=[v[0] for v in SP800_38A_CTR])
def test_sp800_38a_block_by_block_with_offsets(
    backend: aescore.Backend, section: str, key: str, ciphertext: str
) -> None:
    """Each block (and an odd split) decrypted alone at its keystream offset gives the same bytes."""
    expanded = backend.expand_key(bytes.fromhex(key))
    expected = bytes.fromhex(ciphertext)
    for start, stop in [(0, 16), (16, 32), (32, 48), (48, 64), (5, 37), (63, 64)]:
        piece = backend.ctr_xor(expanded, SP800_38A_COUNTER, SP800_38A_PLAINTEXT[start:stop], start)
        assert piece == expected[start:stop], (start, stop)


@pytest.mark.parametrize(
    ("section", "key", "plaintext", "ciphertext"), FIPS_197, ids=[v[0] for v in FIPS_197]
)
def test_fips197_single_block(
    backend: aescore.Backend, section: str, key: str, plaintext: str, ciphertext: str
) -> None:
    expanded = backend.expand_key(bytes.fromhex(key))
    assert backend.ctr_xor(expanded, bytes.fromhex(plaintext), bytes(16)) == bytes.fromhex(ciphertext)

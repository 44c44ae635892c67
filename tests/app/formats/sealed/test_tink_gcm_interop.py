"""The ``gcm`` scheme against Google Tink's own AesGcmHkdfStreaming (the ``tink`` PyPI package), both ways.

Tink's ``AES128_GCM_HKDF_4KB``, ``AES256_GCM_HKDF_4KB`` and ``AES256_GCM_HKDF_1MB`` templates (plus aes128 at
1 MiB), with and without associated data, at every segment boundary -1/0/+1: Tink encrypts and we decrypt,
we encrypt and Tink decrypts, and both ciphertexts have the length :func:`ciphertext_length` predicts.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
import tink

import aescore
from app.formats import sealed
from app.formats.sealed import (
    GCM_TAG_SIZE,
    KeyParameters,
    SealedDecryptionError,
    SealedDecryptor,
    SealedEncryptor,
    ciphertext_length,
    header_length,
)

TinkFactory = Callable[..., Any]
GCM = "gcm"
ASSOCIATED_DATA = b"keystream:test:gcm-associated-data"
TEMPLATES_4KB = [("aes128", 4096), ("aes256", 4096)]
TEMPLATES_1MB = [("aes128", 1 << 20), ("aes256", 1 << 20)]


def material_for(key_type: str, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(sealed.DERIVED_KEY_SIZE[key_type])


def plaintext_of(size: int, seed: int = 11) -> bytes:
    return random.Random(seed * 1_000_003 + size).randbytes(size)


def boundary_sizes(key_type: str, segment_size: int, later_boundaries: int) -> list[int]:
    """0, 1, and every segment boundary -1/0/+1: the end of segment 0 (shorter by the header), then later."""
    first = segment_size - header_length(key_type) - GCM_TAG_SIZE
    sizes = {0, 1}
    for k in range(later_boundaries + 1):
        boundary = first + k * (segment_size - GCM_TAG_SIZE)
        sizes |= {boundary - 1, boundary, boundary + 1}
    return sorted(sizes)


def chunks(data: bytes) -> list[bytes]:
    rng = random.Random(len(data))
    parts, position = [], 0
    while position < len(data):  # uneven chunks, as an HTTP body arrives
        step = rng.randint(1, 200_000)
        parts.append(data[position : position + step])
        position += step
    return parts


def ours_encrypt(
    material: bytes, key_type: str, segment_size: int, plaintext: bytes, ad: bytes, backend: aescore.Backend
) -> bytes:
    encryptor = SealedEncryptor(material, KeyParameters(key_type, segment_size, GCM), ad, backend)
    return b"".join([*(encryptor.update(part) for part in chunks(plaintext)), encryptor.finalize()])


def ours_decrypt(
    candidates: list[tuple[int, bytes]],
    key_type: str,
    segment_size: int,
    ciphertext: bytes,
    ad: bytes,
    backend: aescore.Backend,
) -> tuple[bytes, int | None]:
    decryptor = SealedDecryptor(candidates, KeyParameters(key_type, segment_size, GCM), ad, backend)
    parts = [decryptor.update(part) for part in chunks(ciphertext)]
    parts.append(decryptor.finalize())
    return b"".join(parts), decryptor.version


def check_both_ways(
    tink_factory: TinkFactory,
    key_type: str,
    segment_size: int,
    sizes: list[int],
    backend: aescore.Backend,
    ad: bytes = ASSOCIATED_DATA,
) -> None:
    material = material_for(key_type)
    tink_aead = tink_factory([(42, material)], sealed.DERIVED_KEY_SIZE[key_type], segment_size, GCM)
    for size in sizes:
        plaintext = plaintext_of(size)
        ours = ours_encrypt(material, key_type, segment_size, plaintext, ad, backend)
        assert len(ours) == ciphertext_length(size, key_type, segment_size, GCM), f"size {size}"
        assert tink_aead.decrypt(ours, ad) == plaintext, f"Tink cannot decrypt ours, size {size}"
        theirs = tink_aead.encrypt(plaintext, ad)
        assert len(theirs) == len(ours), f"size {size}"
        assert ours_decrypt([(3, material)], key_type, segment_size, theirs, ad, backend) == (plaintext, 3)


@pytest.mark.parametrize("ad", [ASSOCIATED_DATA, b""], ids=["with-ad", "without-ad"])
@pytest.mark.parametrize(("key_type", "segment_size"), TEMPLATES_4KB)
def test_4kb_templates_both_ways_at_every_boundary(
    tink_factory: TinkFactory, key_type: str, segment_size: int, ad: bytes, backend: aescore.Backend
) -> None:
    sizes = boundary_sizes(key_type, segment_size, 2)
    check_both_ways(tink_factory, key_type, segment_size, sizes, backend, ad)


@pytest.mark.parametrize("ad", [ASSOCIATED_DATA, b""], ids=["with-ad", "without-ad"])
@pytest.mark.parametrize(("key_type", "segment_size"), TEMPLATES_1MB)
def test_1mb_templates_both_ways_at_first_and_second_boundary(
    tink_factory: TinkFactory, key_type: str, segment_size: int, ad: bytes, fast_backend: aescore.Backend
) -> None:
    sizes = boundary_sizes(key_type, segment_size, 1)
    check_both_ways(tink_factory, key_type, segment_size, sizes, fast_backend, ad)


def test_hwsim_backend_interoperates_too(tink_factory: TinkFactory) -> None:
    if aescore.available_backends().get("hwsim", "missing") is not None:
        pytest.fail("the hwsim backend must be installed for this test")
    backend = aescore.get_backend("hwsim")
    check_both_ways(tink_factory, "aes128", 4096, [0, 4096 - 40 - 16, 9000], backend)


def test_smallest_segment_size_is_tinks_smallest_too(
    tink_factory: TinkFactory, backend: aescore.Backend
) -> None:
    segment_size = sealed.min_segment_size("aes128", GCM)  # segment 0 holds a single plaintext byte
    assert segment_size == 1 + 16 + 7 + 16 + 1
    check_both_ways(tink_factory, "aes128", segment_size, [0, 1, 2, 3, 30, 100], backend)


def test_tink_ciphertext_fed_byte_by_byte(tink_factory: TinkFactory, backend: aescore.Backend) -> None:
    material = material_for("aes128", seed=5)
    tink_aead = tink_factory([(1, material)], 16, 4096, GCM)
    plaintext = plaintext_of(4096 * 3 - 24 - 3 * 16)  # ends exactly on a segment boundary
    ciphertext = tink_aead.encrypt(plaintext, ASSOCIATED_DATA, write_size=1000)
    decryptor = SealedDecryptor([(1, material)], KeyParameters("aes128", 4096, GCM), ASSOCIATED_DATA, backend)
    recovered = b"".join(decryptor.update(ciphertext[i : i + 1]) for i in range(len(ciphertext)))
    assert recovered + decryptor.finalize() == plaintext
    assert decryptor.segments_verified == 3


def test_tink_detects_our_tampering_and_wrong_associated_data(
    tink_factory: TinkFactory, backend: aescore.Backend
) -> None:
    material = material_for("aes256")
    tink_aead = tink_factory([(9, material)], 32, 4096, GCM)
    ciphertext = bytearray(
        ours_encrypt(material, "aes256", 4096, plaintext_of(10_000), ASSOCIATED_DATA, backend)
    )
    with pytest.raises(tink.TinkError):
        tink_aead.decrypt(bytes(ciphertext), b"other associated data")
    ciphertext[5000] ^= 1
    with pytest.raises(tink.TinkError):
        tink_aead.decrypt(bytes(ciphertext), ASSOCIATED_DATA)


def test_no_plaintext_of_a_tampered_segment(tink_factory: TinkFactory, backend: aescore.Backend) -> None:
    material = material_for("aes128", seed=3)
    plaintext = plaintext_of(3 * 4096)
    ciphertext = bytearray(tink_factory([(1, material)], 16, 4096, GCM).encrypt(plaintext, ASSOCIATED_DATA))
    ciphertext[4096 + 100] ^= 0x80  # segment 1
    decryptor = SealedDecryptor([(1, material)], KeyParameters("aes128", 4096, GCM), ASSOCIATED_DATA, backend)
    assert decryptor.update(bytes(ciphertext[:4096])) == b""  # segment 0 complete, but maybe the last: held
    released = decryptor.update(bytes(ciphertext[4096:4097]))  # not the last: verified and released
    assert released == plaintext[: 4096 - 24 - 16]
    with pytest.raises(SealedDecryptionError, match="segment 1 failed authentication") as caught:
        decryptor.update(bytes(ciphertext[4097:]))
    assert caught.value.plaintext_released is True and caught.value.segment_index == 1


def test_a_ctr_hmac_ciphertext_does_not_open_as_gcm_nor_the_reverse(backend: aescore.Backend) -> None:
    material = material_for("aes256", seed=4)
    plaintext = plaintext_of(5000)
    for written, read in (("ctr-hmac", GCM), (GCM, "ctr-hmac")):
        encryptor = SealedEncryptor(material, KeyParameters("aes256", 4096, written), b"", backend)
        ciphertext = encryptor.update(plaintext) + encryptor.finalize()
        decryptor = SealedDecryptor([(1, material)], KeyParameters("aes256", 4096, read), b"", backend)
        with pytest.raises(SealedDecryptionError, match="segment 0 does not authenticate"):
            decryptor.update(ciphertext)
            decryptor.finalize()


def test_rotated_tink_keyset_decrypts_with_the_matching_version(
    tink_factory: TinkFactory, backend: aescore.Backend
) -> None:
    old, new = material_for("aes256", seed=1), material_for("aes256", seed=2)
    plaintext = plaintext_of(9000)
    from_old = tink_factory([(11, old)], 32, 4096, GCM).encrypt(plaintext, ASSOCIATED_DATA)
    candidates = [(2, new), (1, old)]
    assert ours_decrypt(candidates, "aes256", 4096, from_old, ASSOCIATED_DATA, backend) == (plaintext, 1)
    both = tink_factory([(12, new), (11, old)], 32, 4096, GCM)
    ours = ours_encrypt(old, "aes256", 4096, plaintext, ASSOCIATED_DATA, backend)
    assert both.decrypt(ours, ASSOCIATED_DATA) == plaintext

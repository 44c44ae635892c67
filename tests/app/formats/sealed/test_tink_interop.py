"""The sealed format against Google Tink's own AesCtrHmacStreaming (the ``tink`` PyPI package), both ways."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest

import aescore
from app.formats import sealed
from app.formats.sealed import (
    TAG_SIZE,
    KeyParameters,
    SealedDecryptor,
    SealedEncryptor,
    ciphertext_length,
    header_length,
)

#: conftest's ``tink_factory``: (keys as (key id, material), derived key size, segment size) -> Tink wrapper.
TinkFactory = Callable[..., Any]

ASSOCIATED_DATA = b"keystream:test:associated-data"
# (key type, segment size) of the AES128_CTR_HMAC_SHA256_4KB, AES256_CTR_HMAC_SHA256_4KB and _1MB templates.
TEMPLATES_4KB = [("aes128", 4096), ("aes256", 4096)]
TEMPLATE_1MB = ("aes256", 1 << 20)


def material_for(key_type: str, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(sealed.DERIVED_KEY_SIZE[key_type])


def plaintext_of(size: int, seed: int = 7) -> bytes:
    return random.Random(seed * 1_000_003 + size).randbytes(size)


def boundary_sizes(key_type: str, segment_size: int, later_boundaries: int) -> list[int]:
    """0, 1, and every segment boundary -1/0/+1: the end of segment 0, then of the next segments."""
    first = segment_size - header_length(key_type) - TAG_SIZE
    sizes = {0, 1}
    for k in range(later_boundaries + 1):
        boundary = first + k * (segment_size - TAG_SIZE)
        sizes |= {boundary - 1, boundary, boundary + 1}
    return sorted(sizes)


def keystream_encrypt(
    material: bytes, key_type: str, segment_size: int, plaintext: bytes, backend: aescore.Backend
) -> bytes:
    encryptor = SealedEncryptor(material, KeyParameters(key_type, segment_size), ASSOCIATED_DATA, backend)
    rng = random.Random(len(plaintext))
    parts, position = [], 0
    while position < len(plaintext):  # uneven chunks, as an HTTP body arrives
        step = rng.randint(1, 200_000)
        parts.append(encryptor.update(plaintext[position : position + step]))
        position += step
    parts.append(encryptor.finalize())
    return b"".join(parts)


def keystream_decrypt(
    candidates: list[tuple[int, bytes]],
    key_type: str,
    segment_size: int,
    ciphertext: bytes,
    backend: aescore.Backend,
) -> tuple[bytes, int | None]:
    decryptor = SealedDecryptor(candidates, KeyParameters(key_type, segment_size), ASSOCIATED_DATA, backend)
    rng = random.Random(len(ciphertext))
    parts, position = [], 0
    while position < len(ciphertext):
        step = rng.randint(1, 200_000)
        parts.append(decryptor.update(ciphertext[position : position + step]))
        position += step
    parts.append(decryptor.finalize())
    return b"".join(parts), decryptor.version


def check_both_ways(
    tink_factory: TinkFactory, key_type: str, segment_size: int, sizes: list[int], backend: aescore.Backend
) -> None:
    material = material_for(key_type)
    tink_aead = tink_factory([(42, material)], sealed.DERIVED_KEY_SIZE[key_type], segment_size)
    for size in sizes:
        plaintext = plaintext_of(size)
        ours = keystream_encrypt(material, key_type, segment_size, plaintext, backend)
        assert len(ours) == ciphertext_length(size, key_type, segment_size)
        assert tink_aead.decrypt(ours, ASSOCIATED_DATA) == plaintext, f"Tink cannot decrypt ours, size {size}"
        theirs = tink_aead.encrypt(plaintext, ASSOCIATED_DATA)
        assert len(theirs) == len(ours), f"size {size}"
        assert keystream_decrypt([(3, material)], key_type, segment_size, theirs, backend) == (plaintext, 3)


@pytest.mark.parametrize(("key_type", "segment_size"), TEMPLATES_4KB)
def test_4kb_templates_both_ways_at_every_boundary(
    tink_factory: TinkFactory, key_type: str, segment_size: int, backend: aescore.Backend
) -> None:
    check_both_ways(tink_factory, key_type, segment_size, boundary_sizes(key_type, segment_size, 2), backend)


def test_aes256_1mb_template_both_ways_at_first_and_second_boundary(
    tink_factory: TinkFactory, fast_backend: aescore.Backend
) -> None:
    key_type, segment_size = TEMPLATE_1MB
    check_both_ways(
        tink_factory, key_type, segment_size, boundary_sizes(key_type, segment_size, 1), fast_backend
    )


@pytest.mark.parametrize(("key_type", "segment_size"), [*TEMPLATES_4KB, TEMPLATE_1MB])
def test_several_mib_both_ways(
    tink_factory: TinkFactory, key_type: str, segment_size: int, fast_backend: aescore.Backend
) -> None:
    check_both_ways(tink_factory, key_type, segment_size, [3 * (1 << 20) + 12345], fast_backend)


def test_tink_ciphertext_written_in_small_pieces_decrypts_fed_byte_by_byte(
    tink_factory: TinkFactory, backend: aescore.Backend
) -> None:
    material = material_for("aes128", seed=5)
    tink_aead = tink_factory([(1, material)], 16, 4096)
    plaintext = plaintext_of(4096 * 3 - 56 - 3 * 32)  # ends exactly on a segment boundary
    ciphertext = tink_aead.encrypt(plaintext, ASSOCIATED_DATA, write_size=1000)
    decryptor = SealedDecryptor([(1, material)], KeyParameters("aes128", 4096), ASSOCIATED_DATA, backend)
    recovered = b"".join(decryptor.update(ciphertext[i : i + 1]) for i in range(len(ciphertext)))
    assert recovered + decryptor.finalize() == plaintext
    assert decryptor.segments_verified == 3


def test_smallest_segment_size_is_tinks_smallest_too(
    tink_factory: TinkFactory, backend: aescore.Backend
) -> None:
    segment_size = sealed.min_segment_size("aes128")  # segment 0 holds a single plaintext byte
    check_both_ways(tink_factory, "aes128", segment_size, [0, 1, 2, 3, 30, 100], backend)


def test_tink_detects_our_tampering_and_wrong_associated_data(
    tink_factory: TinkFactory, backend: aescore.Backend
) -> None:
    import tink

    material = material_for("aes256")
    tink_aead = tink_factory([(9, material)], 32, 4096)
    ciphertext = bytearray(keystream_encrypt(material, "aes256", 4096, plaintext_of(10_000), backend))
    with pytest.raises(tink.TinkError):
        tink_aead.decrypt(bytes(ciphertext), b"other associated data")
    ciphertext[5000] ^= 1
    with pytest.raises(tink.TinkError):
        tink_aead.decrypt(bytes(ciphertext), ASSOCIATED_DATA)


def test_rotated_tink_keyset_decrypts_with_the_matching_version(
    tink_factory: TinkFactory, backend: aescore.Backend
) -> None:
    old, new = material_for("aes256", seed=1), material_for("aes256", seed=2)
    plaintext = plaintext_of(9000)
    from_old_key = tink_factory([(11, old)], 32, 4096).encrypt(plaintext, ASSOCIATED_DATA)
    from_new_key = tink_factory([(12, new)], 32, 4096).encrypt(plaintext, ASSOCIATED_DATA)
    candidates = [(2, new), (1, old)]
    assert keystream_decrypt(candidates, "aes256", 4096, from_old_key, backend) == (plaintext, 1)
    assert keystream_decrypt(candidates, "aes256", 4096, from_new_key, backend) == (plaintext, 2)
    # And Tink, holding both keys, reads what we wrote with the old one.
    both = tink_factory([(12, new), (11, old)], 32, 4096)
    assert (
        both.decrypt(keystream_encrypt(old, "aes256", 4096, plaintext, backend), ASSOCIATED_DATA) == plaintext
    )

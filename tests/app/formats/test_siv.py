"""AES-SIV deterministic encryption against RFC 5297's vector and Tink's DeterministicAead, both ways."""

from __future__ import annotations

import random

import pytest
import tink

from app.errors import DecryptionFailedError
from app.formats.siv import KEY_SIZE, SIV_SIZE, SivCipher, open_all, seal_all
from tests.app.formats.conftest import tink_deterministic_aead

#: Plaintext lengths: empty, one byte, around the 16-byte block and SIV, a few blocks, 4 KiB + 1.
LENGTHS = [0, 1, 15, 16, 17, 31, 32, 33, 100, 4097]
#: Associated data: none (one empty component, as Tink passes it), short, and longer than a block.
ASSOCIATED_DATA = [b"", b"orders.email", bytes(range(40))]


def material(seed: int) -> bytes:
    return random.Random(seed).randbytes(KEY_SIZE)


def plaintext_of(size: int) -> bytes:
    return random.Random(size * 7919).randbytes(size)


def test_rfc5297_a1_deterministic_authenticated_encryption_example() -> None:
    key = bytes.fromhex("fffefdfcfbfaf9f8f7f6f5f4f3f2f1f0f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff")
    associated_data = bytes.fromhex("101112131415161718191a1b1c1d1e1f2021222324252627")
    plaintext = bytes.fromhex("112233445566778899aabbccddee")
    expected = bytes.fromhex("85632d07c6e8f37f950acd320a2ecc9340c02b9690c4dc04daef7f6afe5c")
    cipher = SivCipher(key)
    assert cipher.encrypt(plaintext, associated_data) == expected
    assert cipher.decrypt(expected, associated_data) == plaintext


@pytest.mark.parametrize("associated_data", ASSOCIATED_DATA)
@pytest.mark.parametrize("length", LENGTHS)
def test_keystream_output_is_tinks_output_and_each_opens_the_other(
    length: int, associated_data: bytes
) -> None:
    key = material(1)
    tink_daead = tink_deterministic_aead([(42, key)])
    plaintext = plaintext_of(length)
    (ours,) = seal_all(key, [plaintext], [associated_data])
    assert len(ours) == SIV_SIZE + length
    assert ours == tink_daead.encrypt_deterministically(plaintext, associated_data)
    assert tink_daead.decrypt_deterministically(ours, associated_data) == plaintext
    theirs = tink_daead.encrypt_deterministically(plaintext, associated_data)
    assert open_all([(3, key)], [theirs], [associated_data]) == [(plaintext, 3)]


def test_same_plaintext_and_associated_data_give_the_same_ciphertext_and_nothing_else_does() -> None:
    key = material(2)
    sealed = seal_all(key, [b"alice", b"alice", b"alice", b"bob"], [b"a", b"a", b"b", b"a"])
    assert sealed[0] == sealed[1]
    assert len(set(sealed[1:])) == 3
    assert seal_all(material(3), [b"alice"], [b"a"]) != sealed[:1]


def test_a_rotated_key_opens_old_ciphertexts_under_the_version_that_made_them() -> None:
    old, new = material(4), material(5)
    tink_old = tink_deterministic_aead([(1, old)])
    ciphertexts = [
        tink_old.encrypt_deterministically(b"v1 value", b"ad"),
        *seal_all(new, [b"v2 value"], [b"ad"]),
    ]
    assert open_all([(2, new), (1, old)], ciphertexts, [b"ad", b"ad"]) == [(b"v1 value", 1), (b"v2 value", 2)]


def test_more_candidates_are_asked_once_and_only_for_ciphertexts_no_candidate_opened() -> None:
    v1, v2, v3 = material(6), material(7), material(8)
    calls: list[int] = []

    def more() -> list[tuple[int, bytes]]:
        calls.append(1)
        return [(3, v3), (2, v2), (1, v1)]

    all_known = open_all([(2, v2)], seal_all(v2, [b"x", b"y"], [b"", b""]), [b"", b""], more_candidates=more)
    assert all_known == [(b"x", 2), (b"y", 2)]
    assert calls == []
    ciphertexts = (
        seal_all(v3, [b"new"], [b""]) + seal_all(v1, [b"old"], [b""]) + seal_all(v2, [b"mid"], [b""])
    )
    opened = open_all([(2, v2)], ciphertexts, [b"", b"", b""], more_candidates=more)
    assert opened == [(b"new", 3), (b"old", 1), (b"mid", 2)]
    assert calls == [1]


def test_wrong_associated_data_tampering_and_truncation_fail_each_item_alone_and_name_no_bytes() -> None:
    key = material(9)
    (good,) = seal_all(key, [b"secret value"], [b"ad"])
    tampered = good[:-1] + bytes([good[-1] ^ 1])
    results = open_all(
        [(5, key), (4, material(10))], [good, good, tampered, good[:15]], [b"ad", b"other", b"ad", b"ad"]
    )
    assert results[0] == (b"secret value", 5)
    for failed in results[1:3]:
        assert isinstance(failed, DecryptionFailedError)
        assert "tried 5, 4" in str(failed)
        assert "wrong associated data" in str(failed)
    assert isinstance(results[3], DecryptionFailedError)
    assert "15 bytes, shorter than the 16-byte synthetic IV" in str(results[3])
    for failed in results[1:]:
        assert key.hex() not in str(failed) and good.hex() not in str(failed)


def test_tink_refuses_what_another_key_made_and_so_does_keystream() -> None:
    (ours,) = seal_all(material(11), [b"value"], [b""])
    with pytest.raises(tink.TinkError):
        tink_deterministic_aead([(1, material(12))]).decrypt_deterministically(ours, b"")
    assert isinstance(open_all([(1, material(12))], [ours], [b""])[0], DecryptionFailedError)


@pytest.mark.parametrize("size", [0, 16, 31, 63, 65])
def test_key_material_of_another_size_is_refused_with_its_length(size: int) -> None:
    with pytest.raises(ValueError, match=f"32, 48 or 64 bytes long, got {size} bytes"):
        SivCipher(bytes(size))


def test_key_material_of_another_type_is_refused_and_the_repr_shows_no_key() -> None:
    with pytest.raises(TypeError, match="must be bytes-like, got str"):
        SivCipher("k" * 64)  # type: ignore[arg-type]
    assert repr(SivCipher(material(13))) == "SivCipher()"


def test_open_all_needs_a_candidate() -> None:
    with pytest.raises(ValueError, match="at least one"):
        open_all([], [b"x" * 16], [b""])

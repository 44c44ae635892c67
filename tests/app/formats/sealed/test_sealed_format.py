"""The sealed format on its own: layout against an independent implementation, streaming, every failure."""

from __future__ import annotations

import hashlib
import hmac
import random

import pytest
from Crypto.Cipher import AES
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

import aescore
from app.api.errors import http_status
from app.errors import DecryptionFailedError, PayloadTooLargeError
from app.formats import sealed
from app.formats.sealed import (
    MAX_SEGMENTS,
    TAG_SIZE,
    AlreadyFinalizedError,
    KeyParameters,
    SealedDecryptionError,
    SealedDecryptor,
    SealedEncryptor,
    ciphertext_length,
    header_length,
    messages,
    min_segment_size,
)
from app.formats.sealed import randomness as sealed_randomness

AD = b"tenant=7;file=report.pdf"
KEY_TYPES = ("aes128", "aes192", "aes256")
SEGMENT = 4096


def key(key_type: str, seed: int = 1) -> bytes:
    return random.Random(seed).randbytes(sealed.DERIVED_KEY_SIZE[key_type])


def data(size: int, seed: int = 3) -> bytes:
    return random.Random(seed).randbytes(size)


@pytest.fixture
def fixed_randomness(monkeypatch: pytest.MonkeyPatch) -> bytes:
    """Make salts and nonce prefixes reproducible; returns the byte stream they are cut from."""
    stream = bytes(range(100, 200))
    monkeypatch.setattr(sealed_randomness, "random_bytes", lambda n: stream[:n])
    return stream


def encrypt(
    material: bytes,
    plaintext: bytes,
    backend: aescore.Backend,
    key_type: str = "aes128",
    segment_size: int = SEGMENT,
    associated_data: bytes = AD,
    chunk: int | None = None,
) -> bytes:
    encryptor = SealedEncryptor(material, KeyParameters(key_type, segment_size), associated_data, backend)
    step = chunk or max(len(plaintext), 1)
    parts = [encryptor.update(plaintext[i : i + step]) for i in range(0, len(plaintext), step)]
    return b"".join(parts) + encryptor.finalize()


def decrypt(
    candidates: list[tuple[int, bytes]],
    ciphertext: bytes,
    backend: aescore.Backend,
    key_type: str = "aes128",
    segment_size: int = SEGMENT,
    associated_data: bytes = AD,
) -> bytes:
    decryptor = SealedDecryptor(candidates, KeyParameters(key_type, segment_size), associated_data, backend)
    return decryptor.update(ciphertext) + decryptor.finalize()


def reference_encrypt(
    material: bytes, plaintext: bytes, key_type: str, segment_size: int, salt: bytes, prefix: bytes
) -> bytes:
    """The format written from its description with pyca/cryptography HKDF and pycryptodome AES-CTR."""
    size = sealed.DERIVED_KEY_SIZE[key_type]
    derived = HKDF(algorithm=hashes.SHA256(), length=size + 32, salt=salt, info=AD).derive(material)
    aes_key, mac_key = derived[:size], derived[size:]
    header = bytes([1 + size + 7]) + salt + prefix
    first = segment_size - len(header) - 32
    later = segment_size - 32
    pieces = [plaintext[:first]] + [plaintext[i : i + later] for i in range(first, len(plaintext), later)]
    out = [header]
    for index, piece in enumerate(pieces):
        nonce = prefix + index.to_bytes(4, "big") + bytes([index == len(pieces) - 1]) + bytes(4)
        body = AES.new(aes_key, AES.MODE_CTR, nonce=b"", initial_value=nonce).encrypt(piece)
        out += [body, hmac.new(mac_key, nonce + body, hashlib.sha256).digest()]
    return b"".join(out)


# --- layout ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_bytes_match_an_independent_implementation(
    key_type: str, backend: aescore.Backend, fixed_randomness: bytes
) -> None:
    size = sealed.DERIVED_KEY_SIZE[key_type]
    salt, prefix = fixed_randomness[:size], fixed_randomness[:7]
    material = key(key_type)
    first = SEGMENT - header_length(key_type) - TAG_SIZE
    for length in (0, 1, first - 1, first, first + 1, first + SEGMENT - 32, 10_000):
        plaintext = data(length)
        expected = reference_encrypt(material, plaintext, key_type, SEGMENT, salt, prefix)
        assert encrypt(material, plaintext, backend, key_type) == expected, length
        assert len(expected) == ciphertext_length(length, key_type, SEGMENT)


def test_sizes_follow_tinks_rules() -> None:
    assert [header_length(t) for t in KEY_TYPES] == [24, 32, 40]
    assert [min_segment_size(t) for t in KEY_TYPES] == [57, 65, 73]
    assert ciphertext_length(0, "aes256", 1 << 20) == 40 + 32
    assert ciphertext_length((1 << 20) - 72, "aes256", 1 << 20) == 1 << 20  # exactly one full segment
    assert ciphertext_length((1 << 20) - 71, "aes256", 1 << 20) == (1 << 20) + 1 + 32
    with pytest.raises(ValueError, match="aes128, aes192, aes256"):
        header_length("aes512")
    with pytest.raises(ValueError, match="segment_size must be between 57"):
        SealedEncryptor(key("aes128"), KeyParameters("aes128", 56), AD, aescore.get_backend("python"))
    with pytest.raises(TypeError, match="segment_size must be an int"):
        sealed.validate_segment_size("aes128", 4096.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at least 32 bytes"):
        SealedEncryptor(bytes(16), KeyParameters("aes256", SEGMENT), AD, aescore.get_backend("python"))
    with pytest.raises(PayloadTooLargeError, match=r"4294967296 segments"):
        ciphertext_length(MAX_SEGMENTS * (SEGMENT - 32), "aes128", SEGMENT)


def test_key_parameters_are_checked_once_and_required_as_one_object(backend: aescore.Backend) -> None:
    """The type, segment size and scheme are checked when KeyParameters is built; the format's entry points
    take that object and refuse anything else with a TypeError naming what they got."""
    with pytest.raises(ValueError, match="aes128, aes192, aes256"):
        KeyParameters("aes512", SEGMENT)
    with pytest.raises(ValueError, match="scheme"):
        KeyParameters("aes128", SEGMENT, "gcm-siv")
    with pytest.raises(ValueError, match=r"segment_size must be between 41 .* scheme gcm, got 32"):
        KeyParameters("aes128", 32, "gcm")
    parameters = KeyParameters("aes192", SEGMENT, "gcm")
    assert (parameters.derived_key_size, parameters.header_length) == (24, 32)
    assert parameters == KeyParameters("aes192", SEGMENT, "gcm") != KeyParameters("aes192", SEGMENT)
    for call in (
        lambda: SealedEncryptor(key("aes128"), ("aes128", SEGMENT), AD, backend),  # type: ignore[arg-type]
        lambda: SealedDecryptor([(1, key("aes128"))], "aes128", AD, backend),  # type: ignore[arg-type]
        lambda: sealed.seal_many(key("aes128"), None, [b""], [AD], backend),  # type: ignore[arg-type]
        lambda: sealed.open_many([(1, key("aes128"))], SEGMENT, [b""], [AD], backend),  # type: ignore[arg-type]
    ):
        with pytest.raises(TypeError, match="parameters must be KeyParameters, got"):
            call()


def test_fresh_salt_and_nonce_prefix_per_message(backend: aescore.Backend) -> None:
    material = key("aes256")
    headers = {
        SealedEncryptor(material, KeyParameters("aes256", SEGMENT), AD, backend).header for _ in range(20)
    }
    assert len(headers) == 20
    assert all(h[0] == 40 and len(h) == 40 for h in headers)


# --- streaming -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("key_type", KEY_TYPES)
def test_round_trip_for_every_key_type(key_type: str, backend: aescore.Backend) -> None:
    material = key(key_type)
    for length in (0, 1, 4000, 4095, 4096, 12_345):
        plaintext = data(length)
        ciphertext = encrypt(material, plaintext, backend, key_type)
        assert decrypt([(1, material)], ciphertext, backend, key_type) == plaintext


def test_random_chunking_gives_identical_ciphertext(
    backend: aescore.Backend, fixed_randomness: bytes
) -> None:
    material = key("aes256")
    plaintext = data(5 * SEGMENT + 17)
    whole = encrypt(material, plaintext, backend, "aes256")
    rng = random.Random(99)
    for _ in range(15):
        encryptor = SealedEncryptor(material, KeyParameters("aes256", SEGMENT), AD, backend)
        cuts = sorted(rng.sample(range(1, len(plaintext)), rng.randint(1, 40)))
        pieces = [plaintext[a:b] for a, b in zip([0, *cuts], [*cuts, len(plaintext)], strict=True)]
        out = [encryptor.update(bytearray(p) if i % 2 else memoryview(p)) for i, p in enumerate(pieces)]
        out.append(encryptor.update(b""))
        assert b"".join(out) + encryptor.finalize() == whole


def test_decrypt_fed_one_byte_at_a_time(backend: aescore.Backend) -> None:
    material = key("aes128")
    plaintext = data(3 * SEGMENT)
    ciphertext = encrypt(material, plaintext, backend)
    decryptor = SealedDecryptor([(1, material)], KeyParameters("aes128", SEGMENT), AD, backend)
    out = b"".join(decryptor.update(ciphertext[i : i + 1]) for i in range(len(ciphertext)))
    assert out + decryptor.finalize() == plaintext


def test_encryptor_holds_at_most_one_segment(backend: aescore.Backend) -> None:
    material = key("aes128")
    first = SEGMENT - 24 - 32
    encryptor = SealedEncryptor(material, KeyParameters("aes128", SEGMENT), AD, backend)
    assert encryptor.update(data(first)) == encryptor.header  # segment 0 full, but it may be the last one
    out = encryptor.update(b"x")  # now it is known not to be the last
    assert len(out) == SEGMENT - 24
    assert encryptor.segments_sealed == 1
    rng = random.Random(5)
    for _ in range(200):
        encryptor.update(data(rng.randint(0, 3 * SEGMENT), seed=rng.randint(0, 99)))
        assert encryptor._pending.fill <= SEGMENT - TAG_SIZE


def test_decryptor_releases_a_segment_only_once_it_knows_whether_it_is_last(backend: aescore.Backend) -> None:
    material = key("aes128")
    plaintext = data(2 * SEGMENT)
    ciphertext = encrypt(material, plaintext, backend)
    decryptor = SealedDecryptor([(1, material)], KeyParameters("aes128", SEGMENT), AD, backend)
    assert decryptor.update(ciphertext[:SEGMENT]) == b""  # header + complete segment 0: could still be last
    assert decryptor.version is None and decryptor.segments_verified == 0
    released = decryptor.update(ciphertext[SEGMENT : SEGMENT + 1])
    assert released == plaintext[: SEGMENT - 56]
    assert decryptor.version == 1 and decryptor.segments_verified == 1
    assert (
        decryptor.update(ciphertext[SEGMENT + 1 :]) == plaintext[SEGMENT - 56 : SEGMENT - 56 + SEGMENT - 32]
    )
    assert decryptor.finalize() == plaintext[2 * SEGMENT - 88 :]


def test_use_after_finalize_is_refused(backend: aescore.Backend) -> None:
    material = key("aes128")
    encryptor = SealedEncryptor(material, KeyParameters("aes128", SEGMENT), AD, backend)
    ciphertext = encryptor.finalize()
    with pytest.raises(AlreadyFinalizedError):
        encryptor.update(b"more")
    with pytest.raises(AlreadyFinalizedError):
        encryptor.finalize()
    decryptor = SealedDecryptor([(1, material)], KeyParameters("aes128", SEGMENT), AD, backend)
    assert decryptor.update(ciphertext) + decryptor.finalize() == b""
    with pytest.raises(AlreadyFinalizedError):
        decryptor.update(b"")
    with pytest.raises(TypeError, match="bytes-like"):
        SealedEncryptor(material, KeyParameters("aes128", SEGMENT), AD, backend).update("text")  # type: ignore[arg-type]


def test_reprs_show_no_key_material(backend: aescore.Backend) -> None:
    material = bytes.fromhex("00112233445566778899aabbccddeeff")
    encryptor = SealedEncryptor(material, KeyParameters("aes128", SEGMENT), AD, backend)
    decryptor = SealedDecryptor([(1, material)], KeyParameters("aes128", SEGMENT), AD, backend)
    for text in (repr(encryptor), repr(decryptor)):
        assert material.hex() not in text and "0011" not in text


# --- failures --------------------------------------------------------------------------------------------


def failure(
    candidates: list[tuple[int, bytes]],
    ciphertext: bytes,
    backend: aescore.Backend,
    associated_data: bytes = AD,
    chunk: int = 1000,
) -> tuple[SealedDecryptionError, bytes]:
    """Decrypt in chunks; return the error and the plaintext released before it."""
    decryptor = SealedDecryptor(candidates, KeyParameters("aes128", SEGMENT), associated_data, backend)
    released = bytearray()
    with pytest.raises(SealedDecryptionError) as caught:
        for i in range(0, len(ciphertext), chunk):
            released += decryptor.update(ciphertext[i : i + chunk])
        released += decryptor.finalize()
    error = caught.value
    assert isinstance(error, DecryptionFailedError)
    assert http_status(error) == 400 and error.code == "decryption_failed"
    for _, material in candidates:
        assert material.hex() not in error.message and material.hex().upper() not in error.message
    with pytest.raises(AlreadyFinalizedError):  # a failed decryptor stays failed
        decryptor.update(b"")
    return error, bytes(released)


@pytest.fixture
def sample(backend: aescore.Backend) -> tuple[bytes, bytes, bytes]:
    """(key, plaintext, ciphertext) of 4 segments: 4040 + 4064 + 4064 + 832 plaintext bytes."""
    material = key("aes128")
    plaintext = data(13_000)
    return material, plaintext, encrypt(material, plaintext, backend)


def segment_bounds(index: int) -> tuple[int, int]:
    """Byte range of segment ``index`` (tag included) in an aes128 ciphertext with 4 KiB segments."""
    start = 24 if index == 0 else SEGMENT * index
    return start, SEGMENT * (index + 1)


@pytest.mark.parametrize(
    ("position", "segment"),
    [
        (0, None),
        (1, 0),
        (16, 0),
        (17, 0),
        (23, 0),
        (24, 0),
        (SEGMENT - 1, 0),
        (SEGMENT + 5, 1),
        (3 * SEGMENT + 9, 3),
    ],
    ids=["length-byte", "salt", "salt-end", "prefix", "prefix-end", "body0", "tag0", "body1", "last"],
)
def test_any_flipped_bit_is_detected(
    sample: tuple[bytes, bytes, bytes], backend: aescore.Backend, position: int, segment: int | None
) -> None:
    material, plaintext, ciphertext = sample
    tampered = bytearray(ciphertext)
    tampered[position] ^= 0x04
    error, released = failure([(1, material)], bytes(tampered), backend)
    assert error.segment_index == segment
    assert (f"segment {segment}" in error.message) if segment is not None else ("header" in error.message)
    assert error.plaintext_released == (segment is not None and segment > 0)
    assert plaintext.startswith(released)
    assert len(released) == (0 if segment in (None, 0) else segment_bounds(segment)[0] - 24 - 32 * segment)


def test_later_failure_is_distinguishable_and_releases_only_verified_plaintext(
    sample: tuple[bytes, bytes, bytes], backend: aescore.Backend
) -> None:
    material, plaintext, ciphertext = sample
    tampered = bytearray(ciphertext)
    tampered[segment_bounds(2)[0] + 100] ^= 1
    error, released = failure([(1, material)], bytes(tampered), backend, chunk=len(tampered))
    assert (error.segment_index, error.plaintext_released) == (2, True)
    assert released == b""  # one update call: it raised before returning anything
    error, released = failure([(1, material)], bytes(tampered), backend, chunk=SEGMENT)
    assert released == plaintext[: 2 * SEGMENT - 24 - 64]


@pytest.mark.parametrize("cut", [1, 31, 32, 33, 832 + 32, 832 + 32 + 1])
def test_truncation_is_detected(
    sample: tuple[bytes, bytes, bytes], backend: aescore.Backend, cut: int
) -> None:
    material, _, ciphertext = sample
    error, _ = failure([(1, material)], ciphertext[:-cut], backend)
    # Cutting >= 864 bytes removes the last segment: segment 2 then ends the stream, which its tag denies.
    assert error.segment_index == (2 if cut >= 864 else 3)
    assert error.plaintext_released


def test_truncated_to_header_or_less(sample: tuple[bytes, bytes, bytes], backend: aescore.Backend) -> None:
    material, _, ciphertext = sample
    error, _ = failure([(1, material)], ciphertext[:24], backend)
    assert (error.segment_index, error.plaintext_released) == (0, False)
    assert "segment 0 is missing" in error.message
    for length in (0, 1, 23):
        error, _ = failure([(1, material)], ciphertext[:length], backend)
        assert (error.segment_index, error.plaintext_released) == (None, False)
        assert "header" in error.message
    error, _ = failure([(1, material)], ciphertext[: 24 + 31], backend)
    assert error.segment_index == 0 and "truncated" in error.message


@pytest.mark.parametrize("extra", [b"\x00", bytes(32), bytes(100)])
def test_appended_bytes_are_detected(
    sample: tuple[bytes, bytes, bytes], backend: aescore.Backend, extra: bytes
) -> None:
    material, _, ciphertext = sample
    error, _ = failure([(1, material)], ciphertext + extra, backend)
    assert error.segment_index == 3  # the real last segment is now read as not-last


def test_reordered_or_duplicated_segments_are_detected(
    sample: tuple[bytes, bytes, bytes], backend: aescore.Backend
) -> None:
    material, _, ciphertext = sample
    s1, s2 = (ciphertext[slice(*segment_bounds(i))] for i in (1, 2))
    head, tail = ciphertext[: segment_bounds(1)[0]], ciphertext[segment_bounds(3)[0] :]
    error, _ = failure([(1, material)], head + s2 + s1 + tail, backend)
    assert error.segment_index == 1
    error, _ = failure([(1, material)], head + s1 + s1 + tail, backend)
    assert error.segment_index == 2


def test_wrong_associated_data_or_key_fails_on_segment_zero(
    sample: tuple[bytes, bytes, bytes], backend: aescore.Backend
) -> None:
    material, _, ciphertext = sample
    error, _ = failure([(1, material)], ciphertext, backend, associated_data=AD + b"!")
    assert (error.segment_index, error.plaintext_released) == (0, False)
    assert "tried 1" in error.message
    error, _ = failure([(5, key("aes128", 2)), (4, key("aes128", 3))], ciphertext, backend)
    assert (error.segment_index, error.plaintext_released) == (0, False)
    assert "tried 5, 4" in error.message


def test_the_versions_tried_are_named_in_runs() -> None:
    """A 300-version key's failure names its 64 candidates in a few words, not 64 numbers."""
    assert "(tried 300 to 237)" in messages.no_key(0, range(300, 236, -1))
    assert "(tried 12, 9 to 7, 5, 4)" in messages.no_key(0, [4, 5, 7, 8, 9, 12, 8])
    assert "(tried 1)" in messages.no_key(0, [1])


def test_candidates_are_tried_newest_first_and_the_verifying_one_sticks(
    backend: aescore.Backend, fixed_randomness: bytes
) -> None:
    keys = {version: key("aes128", seed=version) for version in (1, 2, 3)}
    plaintext = data(3 * SEGMENT)
    by_version = {version: encrypt(material, plaintext, backend) for version, material in keys.items()}
    candidates = sorted(keys.items(), reverse=True)
    for version, ciphertext in by_version.items():
        decryptor = SealedDecryptor(candidates, KeyParameters("aes128", SEGMENT), AD, backend)
        assert decryptor.update(ciphertext) + decryptor.finalize() == plaintext
        assert decryptor.version == version
    # Same salt and nonce prefix (fixed randomness): segment 0 from version 2, the rest from version 1.
    spliced = by_version[2][:SEGMENT] + by_version[1][SEGMENT:]
    error, released = failure(candidates, spliced, backend)
    assert error.segment_index == 1 and released == plaintext[: SEGMENT - 56]


def test_segment_counter_never_wraps(backend: aescore.Backend) -> None:
    material = key("aes128")
    encryptor = SealedEncryptor(material, KeyParameters("aes128", SEGMENT), AD, backend)
    encryptor.update(b"")
    encryptor._index = MAX_SEGMENTS - 1  # pretend 2**32 - 1 segments went out (16 TiB at 4 KiB)
    encryptor.update(data(SEGMENT - 32 + 1))  # segment 2**32 - 1 is sealed: the last u32 value
    assert encryptor.segments_sealed == MAX_SEGMENTS
    with pytest.raises(PayloadTooLargeError, match="4294967296 segments"):
        encryptor.finalize()
    with pytest.raises(ValueError, match="segment index"):
        sealed.segment_nonce(bytes(7), MAX_SEGMENTS, True)

    ciphertext = encrypt(material, data(3 * SEGMENT), backend)
    decryptor = SealedDecryptor([(1, material)], KeyParameters("aes128", SEGMENT), AD, backend)
    decryptor.update(ciphertext[: SEGMENT + 1])
    decryptor._index = MAX_SEGMENTS
    with pytest.raises(SealedDecryptionError, match="2\\*\\*32-segment limit") as caught:
        decryptor.update(ciphertext[SEGMENT + 1 :])
    assert caught.value.segment_index == MAX_SEGMENTS


def test_decryptor_rejects_bad_arguments(backend: aescore.Backend) -> None:
    with pytest.raises(ValueError, match="at least one"):
        SealedDecryptor([], KeyParameters("aes128", SEGMENT), AD, backend)
    with pytest.raises(TypeError, match="key version must be an int"):
        SealedDecryptor([("1", key("aes128"))], KeyParameters("aes128", SEGMENT), AD, backend)  # type: ignore[list-item]
    with pytest.raises(TypeError, match="associated_data"):
        SealedDecryptor([(1, key("aes128"))], KeyParameters("aes128", SEGMENT), "ad", backend)  # type: ignore[arg-type]


def test_more_candidates_are_asked_once_and_only_when_no_candidate_verifies(backend: aescore.Backend) -> None:
    old, new = key("aes128", seed=1), key("aes128", seed=2)
    plaintext = data(3 * SEGMENT)
    asked: list[int] = []

    def more() -> list[tuple[int, bytes]]:
        asked.append(1)
        return [(2, new), (1, old)]  # (1, old) was tried already: skipped

    decryptor = SealedDecryptor(
        [(1, old)], KeyParameters("aes128", SEGMENT), AD, backend, more_candidates=more
    )
    ciphertext = encrypt(new, plaintext, backend)
    assert decryptor.update(ciphertext) + decryptor.finalize() == plaintext
    assert decryptor.version == 2 and asked == [1]
    # A ciphertext of a cached version never asks.
    quiet = SealedDecryptor([(1, old)], KeyParameters("aes128", SEGMENT), AD, backend, more_candidates=more)
    assert quiet.update(encrypt(old, plaintext, backend)) + quiet.finalize() == plaintext
    assert asked == [1]


def test_more_candidates_that_do_not_verify_either_fail_cleanly(backend: aescore.Backend) -> None:
    asked: list[int] = []

    def more() -> list[tuple[int, bytes]]:
        asked.append(1)
        return [(2, key("aes128", seed=2))]

    decryptor = SealedDecryptor(
        [(1, key("aes128"))], KeyParameters("aes128", SEGMENT), AD, backend, more_candidates=more
    )
    with pytest.raises(SealedDecryptionError, match=r"tried 2, 1\)") as caught:
        decryptor.update(encrypt(key("aes128", seed=3), data(100), backend))
        decryptor.finalize()
    assert caught.value.segment_index == 0 and not caught.value.plaintext_released
    assert asked == [1]


@pytest.mark.parametrize("segment_size", [SEGMENT, 3 * sealed.PIECE_SIZE + 100])
def test_pieces_concatenate_to_the_same_bytes(backend: aescore.Backend, segment_size: int) -> None:
    material = key("aes256")
    plaintext = data(2 * segment_size + 12_345)
    encryptor = SealedEncryptor(material, KeyParameters("aes256", segment_size), AD, backend)
    pieces = [encryptor.update_pieces(plaintext[i : i + 70_000]) for i in range(0, len(plaintext), 70_000)]
    last = encryptor.finalize_pieces()
    flat = [piece for group in pieces for piece in group] + last
    assert all(0 < len(piece) <= sealed.PIECE_SIZE for piece in flat)
    ciphertext = b"".join(flat)
    assert len(ciphertext) == ciphertext_length(len(plaintext), "aes256", segment_size)
    decryptor = SealedDecryptor([(1, material)], KeyParameters("aes256", segment_size), AD, backend)
    assert decryptor.buffered == 0
    opened = decryptor.update_pieces(ciphertext[:-1])
    assert decryptor.buffered > 0 and all(len(piece) <= sealed.PIECE_SIZE for piece in opened)
    tail = decryptor.update_pieces(ciphertext[-1:]) + decryptor.finalize_pieces()
    assert b"".join(opened + tail) == plaintext
    assert decrypt([(1, material)], ciphertext, backend, "aes256", segment_size) == plaintext


def test_buffered_counts_the_held_plaintext(backend: aescore.Backend) -> None:
    encryptor = SealedEncryptor(key("aes128"), KeyParameters("aes128", SEGMENT), AD, backend)
    assert encryptor.buffered == 0
    encryptor.update(bytes(100))
    assert encryptor.buffered == 100
    first = SEGMENT - header_length("aes128") - TAG_SIZE
    encryptor.update(bytes(first - 100))  # segment 0 is full but waits for a byte beyond it
    assert encryptor.buffered == first
    encryptor.update(b"x")  # now segment 0 is sealed and out
    assert encryptor.buffered == 1

"""A gcm encryptor told the plaintext's length seals each piece as it comes: the same bytes as gathering
whole segments, for the same salt and nonce prefix, whatever the chunking; a plaintext longer or shorter
than declared fails, never yielding a wrong ciphertext.

The salt and nonce prefix are injected (``randomness.random_bytes``), so two encryptors of the same
plaintext must agree byte for byte; sizes sit at the segment edges (the first segment is shorter by the
header), and chunkings are random (1-byte pieces, empty updates, pieces across segment edges).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable

import pytest

import aescore
from app.errors import BadRequestError, PayloadTooLargeError
from app.formats.sealed import (
    AlreadyFinalizedError,
    KeyParameters,
    SealedDecryptor,
    SealedEncryptor,
    ciphertext_length,
    randomness,
)

IKM = bytes(range(32))
SEGMENT = 512


def _aesni() -> aescore.Backend:
    reason = aescore.available_backends().get("aesni")
    if reason is not None:
        pytest.skip(f"aesni unavailable: {reason}")
    return aescore.get_backend("aesni")


def _fixed_randomness(seed: int) -> Callable[[int], bytes]:
    """A stand-in for the CSPRNG that gives every encryptor made after it the same salt and nonce prefix."""
    return lambda size: random.Random(seed).randbytes(size)


def _sizes(parameters: KeyParameters) -> list[int]:
    later = parameters.segment_size - 16
    first = later - parameters.header_length
    edges = {
        0,
        1,
        15,
        16,
        17,
        first - 1,
        first,
        first + 1,
        first + later - 1,
        first + later,
        first + later + 1,
    }
    return sorted(edges | {first + 3 * later, first + 3 * later + 1, first + 4 * later - 1, 7000})


def _chunks(rng: random.Random, data: bytes) -> list[bytes]:
    pieces, position = [], 0
    while position < len(data):
        size = rng.choice((0, 1, 15, 16, 17, 100, 511, 512, 513, 2000, rng.randrange(1, 3000)))
        pieces.append(data[position : position + size])
        position += size
    return pieces


def _encrypt(encryptor: SealedEncryptor, chunks: list[bytes]) -> bytes:
    out = [b"".join(encryptor.update_pieces(chunk)) for chunk in chunks]
    return b"".join(out) + b"".join(encryptor.finalize_pieces())


@pytest.mark.parametrize("key_type", ["aes128", "aes256"])
def test_sealing_in_pieces_gives_the_gathered_bytes_for_any_chunking(
    monkeypatch: pytest.MonkeyPatch, key_type: str
) -> None:
    backend = _aesni()
    parameters = KeyParameters(key_type, SEGMENT, "gcm")
    rng = random.Random(f"in pieces {key_type}")
    for size in _sizes(parameters):
        plaintext = rng.randbytes(size)
        monkeypatch.setattr(randomness, "random_bytes", _fixed_randomness(size))
        gathered = SealedEncryptor(IKM, parameters, b"ad", backend)
        assert not gathered.seals_in_pieces
        expected = _encrypt(gathered, [plaintext])
        assert len(expected) == ciphertext_length(size, key_type, SEGMENT, "gcm")
        for _ in range(8):
            chunks = _chunks(rng, plaintext)
            in_pieces = SealedEncryptor(IKM, parameters, b"ad", backend, expected_length=size)
            assert in_pieces.seals_in_pieces
            assert _encrypt(in_pieces, chunks) == expected, (size, [len(chunk) for chunk in chunks])
            assert in_pieces.buffered == 0
        decryptor = SealedDecryptor([(1, IKM)], parameters, b"ad", backend)
        assert decryptor.update(expected) + decryptor.finalize() == plaintext


def test_each_piece_comes_out_at_once_and_each_tag_with_its_segments_last_byte() -> None:
    backend = _aesni()
    parameters = KeyParameters("aes256", SEGMENT, "gcm")
    first = SEGMENT - 16 - parameters.header_length
    encryptor = SealedEncryptor(IKM, parameters, b"", backend, expected_length=first + 100)
    assert sum(map(len, encryptor.update_pieces(bytes(10)))) == parameters.header_length + 10
    assert sum(map(len, encryptor.update_pieces(bytes(first - 10)))) == first - 10 + 16  # segment 0 sealed
    assert encryptor.segments_sealed == 1
    assert sum(map(len, encryptor.update_pieces(bytes(100)))) == 100 + 16  # the last one too
    assert encryptor.finalize_pieces() == []
    assert encryptor.segments_sealed == 2


def test_a_longer_plaintext_than_declared_fails_before_its_output() -> None:
    backend = _aesni()
    parameters = KeyParameters("aes256", SEGMENT, "gcm")
    encryptor = SealedEncryptor(IKM, parameters, b"", backend, expected_length=1000)
    encryptor.update_pieces(bytes(999))
    with pytest.raises(BadRequestError, match="runs past the 1000 bytes declared for it"):
        encryptor.update_pieces(bytes(2))
    with pytest.raises(AlreadyFinalizedError):
        encryptor.finalize_pieces()


@pytest.mark.parametrize("declared", [0, 1, 1000])
def test_a_shorter_plaintext_than_declared_fails_at_the_end(declared: int) -> None:
    backend = _aesni()
    parameters = KeyParameters("aes256", SEGMENT, "gcm")
    encryptor = SealedEncryptor(IKM, parameters, b"", backend, expected_length=declared)
    if declared:
        encryptor.update_pieces(bytes(declared - 1))
        with pytest.raises(BadRequestError, match=f"ended after {declared - 1} of the {declared} bytes"):
            encryptor.finalize_pieces()
    else:
        with pytest.raises(BadRequestError, match="runs past the 0 bytes"):
            encryptor.update_pieces(b"x")


@pytest.mark.parametrize(("scheme", "backend_name"), [("ctr-hmac", "aesni"), ("gcm", "python")])
def test_other_keys_gather_but_still_hold_the_plaintext_to_its_declared_length(
    monkeypatch: pytest.MonkeyPatch, scheme: str, backend_name: str
) -> None:
    """ctr-hmac has no GCM; the python backend's GCM encrypts whole messages only: both gather, as before."""
    if aescore.available_backends().get(backend_name) is not None:
        pytest.skip(f"{backend_name} unavailable")
    backend = aescore.get_backend(backend_name)
    parameters = KeyParameters("aes256", 1024, scheme)
    plaintext = os.urandom(3000)
    monkeypatch.setattr(randomness, "random_bytes", _fixed_randomness(7))
    expected = _encrypt(SealedEncryptor(IKM, parameters, b"", backend), [plaintext])
    declared = SealedEncryptor(IKM, parameters, b"", backend, expected_length=3000)
    assert not declared.seals_in_pieces
    assert _encrypt(declared, [plaintext[:1234], plaintext[1234:]]) == expected
    short = SealedEncryptor(IKM, parameters, b"", backend, expected_length=3001)
    short.update_pieces(plaintext)
    with pytest.raises(BadRequestError, match="ended after 3000 of the 3001 bytes"):
        short.finalize_pieces()


def test_a_declared_length_past_the_segment_limit_is_refused_up_front() -> None:
    parameters = KeyParameters("aes256", SEGMENT, "gcm")
    with pytest.raises(PayloadTooLargeError):
        SealedEncryptor(IKM, parameters, b"", _aesni(), expected_length=(2**32 + 1) * SEGMENT)
    with pytest.raises(ValueError, match=">= 0"):
        SealedEncryptor(IKM, parameters, b"", _aesni(), expected_length=-1)

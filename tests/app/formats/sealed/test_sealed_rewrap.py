""":class:`SealedRewrapper`: a sealed stream opened under one key version and sealed under another as it
flows (issue 12 item 4). Tink, given only the new material, opens the output; no plaintext of a segment that
does not verify ever reaches the encryptor; the output does not depend on how the input is split."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import cast

import pytest

import aescore
from app.formats.sealed import (
    KeyParameters,
    SealedDecryptionError,
    SealedDecryptor,
    SealedEncryptor,
    SealedRewrapper,
    header_length,
    tag_size_of,
)
from tests.app.formats.conftest import TinkStreamingAead

SEGMENT = 4096
AD = b"keystream:test:rewrap"
OLD, NEW = os.urandom(32), os.urandom(32)


def _seal(material: bytes, plaintext: bytes, backend: aescore.Backend, scheme: str) -> bytes:
    encryptor = SealedEncryptor(material, KeyParameters("aes256", SEGMENT, scheme), AD, backend)
    return encryptor.update(plaintext) + encryptor.finalize()


def _rewrapper(
    backend: aescore.Backend, scheme: str, encryptor: SealedEncryptor | None = None
) -> SealedRewrapper:
    decryptor = SealedDecryptor([(2, NEW), (1, OLD)], KeyParameters("aes256", SEGMENT, scheme), AD, backend)
    return SealedRewrapper(
        decryptor, encryptor or SealedEncryptor(NEW, KeyParameters("aes256", SEGMENT, scheme), AD, backend)
    )


def _split(data: bytes, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    parts, position = [], 0
    while position < len(data):
        step = rng.randint(1, 3 * SEGMENT)
        parts.append(data[position : position + step])
        position += step
    return parts


def _run(rewrapper: SealedRewrapper, parts: list[bytes]) -> bytes:
    out = [piece for part in parts for piece in rewrapper.update_pieces(part)]
    out += rewrapper.finalize_pieces()
    return b"".join(out)


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
@pytest.mark.parametrize("size", [0, 1, SEGMENT - 100, SEGMENT, 7 * SEGMENT + 3])
def test_tink_opens_the_rewrapped_stream_with_the_new_material(
    backend: aescore.Backend,
    tink_factory: Callable[..., TinkStreamingAead],
    scheme: str,
    size: int,
) -> None:
    plaintext = os.urandom(size)
    old = _seal(OLD, plaintext, backend, scheme)
    rewrapper = _rewrapper(backend, scheme)
    rewrapped = _run(rewrapper, _split(old, size))
    assert rewrapper.version == 1
    assert len(rewrapped) == len(old)
    assert rewrapped[1:33] != old[1:33]  # a fresh salt
    assert tink_factory([(5, NEW)], 32, SEGMENT, scheme).decrypt(rewrapped, AD) == plaintext


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
def test_no_output_before_the_first_segment_verified(fast_backend: aescore.Backend, scheme: str) -> None:
    old = _seal(OLD, os.urandom(3 * SEGMENT), fast_backend, scheme)
    rewrapper = _rewrapper(fast_backend, scheme)
    assert rewrapper.update_pieces(old[: SEGMENT - 1]) == []  # the new header waits for the old segment
    assert rewrapper.buffered == SEGMENT - 1 - header_length("aes256")
    header = rewrapper.update_pieces(old[SEGMENT - 1 : SEGMENT + 1])
    assert len(b"".join(header)) == header_length("aes256")


class _RecordingEncryptor:
    """Stands in for a SealedEncryptor and records the plaintext it is given."""

    def __init__(self) -> None:
        self.received = bytearray()

    def update_pieces(self, data: bytes) -> list[bytes]:
        self.received += data
        return []

    def finalize_pieces(self) -> list[bytes]:
        return []


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
def test_a_segment_that_does_not_verify_never_reaches_the_encryptor(
    fast_backend: aescore.Backend, scheme: str
) -> None:
    plaintext = os.urandom(6 * SEGMENT)
    old = bytearray(_seal(OLD, plaintext, fast_backend, scheme))
    old[3 * SEGMENT + 5] ^= 1  # in segment 3
    recorder = _RecordingEncryptor()
    rewrapper = _rewrapper(fast_backend, scheme, cast(SealedEncryptor, recorder))
    with pytest.raises(SealedDecryptionError, match="segment 3"):
        for start in range(0, len(old), SEGMENT):
            rewrapper.update_pieces(bytes(old[start : start + SEGMENT]))
    verified = 3 * SEGMENT - header_length("aes256") - 3 * tag_size_of(scheme)
    assert bytes(recorder.received) == plaintext[:verified]


def test_truncation_fails_at_finalize(fast_backend: aescore.Backend) -> None:
    old = _seal(OLD, os.urandom(4 * SEGMENT), fast_backend, "ctr-hmac")
    rewrapper = _rewrapper(fast_backend, "ctr-hmac")
    rewrapper.update_pieces(old[: 2 * SEGMENT])
    with pytest.raises(SealedDecryptionError):
        rewrapper.finalize_pieces()

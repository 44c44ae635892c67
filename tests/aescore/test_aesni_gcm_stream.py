"""AES-GCM fed in pieces on aesni (``GcmKey.encryptor``): the same ciphertext and tag as ``cryptography``'s
AESGCM over the joined pieces, on every GCM path this CPU has, for splits that cut blocks anywhere (1- and
15-byte pieces, empty updates, pieces across the bulk code's batch edges), AES-128/192/256, with and without
associated data; and the object's rules (refused after finalize, errors before output, no key in its repr).
"""

from __future__ import annotations

import mmap
import os
import pickle
import random
import subprocess
import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

import aescore
from aescore.ctr import _aesni

if _aesni.unavailable_reason() is not None:
    pytest.skip(f"aesni backend unavailable: {_aesni.unavailable_reason()}", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
#: Message lengths: empty, within a block, around the 8/16/32-block batches of the three paths, and longer.
LENGTHS = (0, 1, 15, 16, 17, 127, 128, 129, 255, 511, 512, 513, 1000, 4096 + 3, 70_001)
#: Piece sizes a split draws from: the block's edges, the batches' edges, and anything.
PIECES = (0, 1, 2, 15, 16, 17, 31, 33, 127, 128, 129, 256, 511, 512, 513, 1024)


def _split(rng: random.Random, length: int) -> list[int]:
    """Piece sizes adding up to ``length``, with empty pieces here and there."""
    sizes: list[int] = []
    left = length
    while left:
        size = min(left, rng.choice(PIECES) if rng.random() < 0.8 else rng.randrange(1, left + 1))
        sizes.append(size)
        left -= size
    for _ in range(rng.randrange(3)):
        sizes.insert(rng.randrange(len(sizes) + 1), 0)
    return sizes


def check_splits(isa: str, rounds: int = 6) -> int:
    """Encrypt every length under ``rounds`` random splits per key size and associated data, through
    ``update`` and through ``update_into`` (in place), and compare with cryptography; returns the count."""
    rng = random.Random(f"gcm stream splits {isa}")
    backend = _aesni.AesniBackend(isa=isa, threads=1)
    checked = 0
    for key_size in (16, 24, 32):
        key = rng.randbytes(key_size)
        ours, theirs = backend.gcm_key(key), AESGCM(key)
        for length in LENGTHS:
            for aad in (None, rng.randbytes(20)):
                for _ in range(rounds):
                    nonce, data = rng.randbytes(12), rng.randbytes(length)
                    expected = theirs.encrypt(nonce, data, aad)
                    sizes = _split(rng, length)
                    encryption = ours.encryptor(nonce, aad)
                    pieces, position = [], 0
                    for size in sizes:
                        piece = encryption.update(data[position : position + size])
                        assert len(piece) == size
                        pieces.append(piece)
                        position += size
                    assert b"".join(pieces) + encryption.finalize() == expected, (isa, key_size, sizes)
                    buffer = bytearray(data)
                    encryption = ours.encryptor(nonce, aad)
                    position = 0
                    for size in sizes:
                        part = memoryview(buffer)[position : position + size]
                        assert encryption.update_into(part, part) == size
                        position += size
                    assert bytes(buffer) + encryption.finalize() == expected
                    checked += 1
    return checked


@pytest.mark.parametrize("isa", ["aesni", "vaes256", "vaes512"])
def test_random_splits_match_cryptography(isa: str) -> None:
    if isa not in _aesni.supported_isas() or _aesni.gcm_isa(isa) != isa:
        pytest.skip(f"no {isa} GCM path on this CPU")
    assert check_splits(isa) == 3 * len(LENGTHS) * 2 * 6


def test_the_legacy_sse_build_of_the_aesni_path_too() -> None:
    code = (
        "from aescore.ctr import _aesni; from tests.aescore.test_aesni_gcm_stream import check_splits; "
        "print(_aesni.gcm_xmm_encoding(), check_splits('aesni', 2))"
    )
    env = {**os.environ, "KEYSTREAM_GCM_XMM": "sse"}
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["sse", str(3 * len(LENGTHS) * 2 * 2)]


def test_one_byte_at_a_time_over_several_batches() -> None:
    key, nonce = bytes(range(32)), bytes(12)
    data = os.urandom(1100)
    encryption = _aesni.AesniBackend().gcm_key(key).encryptor(nonce, b"header")
    ciphertext = b"".join(encryption.update(data[i : i + 1]) for i in range(len(data)))
    assert ciphertext + encryption.finalize() == AESGCM(key).encrypt(nonce, data, b"header")


def test_it_is_refused_after_finalize_and_says_nothing_of_the_key() -> None:
    key = bytes(range(16))
    gcm_key = _aesni.AesniBackend().gcm_key(key)
    encryption = gcm_key.encryptor(bytes(12), None)
    assert isinstance(encryption, aescore.GcmEncryptor)
    assert key.hex() not in repr(encryption)
    encryption.update(b"abc")
    tag = encryption.finalize()
    assert len(tag) == 16
    for call in (
        lambda: encryption.update(b"x"),
        lambda: encryption.update_into(b"", bytearray(1)),
        encryption.finalize,
    ):
        with pytest.raises(aescore.AlreadyFinalizedError, match="new nonce"):
            call()
    assert "finalized=True" in repr(encryption)
    with pytest.raises(TypeError):
        pickle.dumps(gcm_key.encryptor(bytes(12), None))
    with pytest.raises(TypeError):
        _aesni.AesniGcmEncryptor()


def test_bad_arguments_fail_before_any_output() -> None:
    gcm_key = _aesni.AesniBackend().gcm_key(bytes(16))
    with pytest.raises(ValueError, match="nonce must be 12 bytes"):
        gcm_key.encryptor(bytes(11), None)
    with pytest.raises(TypeError, match="associated_data"):
        gcm_key.encryptor(bytes(12), "text")  # type: ignore[arg-type]
    encryption = gcm_key.encryptor(bytes(12), None)
    with pytest.raises(TypeError, match="data"):
        encryption.update("text")  # type: ignore[arg-type]
    out = bytearray(b"\x55" * 4)
    with pytest.raises(ValueError, match="out must hold at least 5 bytes"):
        encryption.update_into(b"hello", out)
    assert out == b"\x55" * 4
    with pytest.raises(TypeError, match="read-only"):
        encryption.update_into(b"hello", memoryview(bytearray(8)).toreadonly())
    # Still usable after a refused argument: nothing was encrypted.
    assert encryption.update(b"hello") + encryption.finalize() == AESGCM(bytes(16)).encrypt(
        bytes(12), b"hello", None
    )


def test_a_message_past_the_counter_fails_before_any_output(tmp_path: Path) -> None:
    """A sparse file mapped read-only stands in for the bytes that would pass 2**36 - 32."""
    path = tmp_path / "sparse"
    with path.open("wb") as handle:
        handle.truncate(aescore.AesGcm.max_data_bytes)
    with path.open("rb") as handle:
        view = memoryview(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ))
    encryption = _aesni.AesniBackend().gcm_key(bytes(16)).encryptor(bytes(12), None)
    assert len(encryption.update(b"0123456789abcdefX")) == 17
    out = bytearray(b"\x55" * 64)
    with pytest.raises(aescore.CounterOverflowError, match="GCM's 32-bit block counter"):
        encryption.update_into(view[: len(view) - 16], out)
    assert out == b"\x55" * 64
    with pytest.raises(aescore.AlreadyFinalizedError):  # a failed encryption stays failed
        encryption.finalize()


def test_the_python_backend_declares_it_has_none() -> None:
    """The composed GCM of the other backends encrypts whole messages only: callers then gather."""
    assert aescore.get_backend("python").gcm_key(bytes(16)).encryptor(bytes(12), None) is None

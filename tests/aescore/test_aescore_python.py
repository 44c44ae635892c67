"""The python backend's internals: its two code paths agree with each other and with AES at their seams."""

from __future__ import annotations

import pytest
from Crypto.Cipher import AES

import aescore
from aescore.ctr import _python, _python_bulk

TOP = 1 << 128


@pytest.fixture(scope="module")
def python() -> aescore.Backend:
    return aescore.get_backend("python")


def _reference(key: bytes, counter: int, blocks: int) -> bytes:
    return AES.new(key, AES.MODE_CTR, nonce=b"", initial_value=counter).encrypt(bytes(16 * blocks))


def test_sbox_is_the_fips197_sbox() -> None:
    sbox = _python._SBOX
    assert sorted(sbox) == list(range(256))  # a permutation
    assert (sbox[0x00], sbox[0x01], sbox[0x53], sbox[0xFF]) == (0x63, 0x7C, 0xED, 0x16)  # FIPS-197 Figure 7
    assert all(sbox[x] != x and sbox[x] != x ^ 0xFF for x in range(256))  # no fixed or opposite fixed points


@pytest.mark.parametrize("key_size", [16, 24, 32])
@pytest.mark.parametrize(
    "counter",
    [0, 250, TOP - 1, TOP - 20, (1 << 64) - 3, 0xFF, 0x1FF],
    ids=["zero", "near-byte-carry", "last", "wrap-inside", "64-bit-carry", "byte-edge", "run-edge"],
)
def test_both_paths_agree_around_the_threshold(python: aescore.Backend, key_size: int, counter: int) -> None:
    key = bytes(range(7, 7 + key_size))
    expanded = python.expand_key(key)
    assert isinstance(expanded, _python.PythonExpandedKey)
    threshold = _python.BULK_MIN_BLOCKS
    for blocks in (1, 2, threshold - 1, threshold, threshold + 1, 300):
        expected = _reference(key, counter, blocks)
        assert _python._keystream(expanded, counter, blocks) == expected, blocks
        assert _python_bulk.keystream(expanded.bulk_tables(), counter, blocks) == expected, blocks


def test_bulk_path_across_chunks_and_the_wrap(python: aescore.Backend) -> None:
    key = bytes(range(32))
    expanded = python.expand_key(key)
    assert isinstance(expanded, _python.PythonExpandedKey)
    blocks = _python_bulk.CHUNK_BLOCKS + 37
    for counter in (5, TOP - _python_bulk.CHUNK_BLOCKS - 3, TOP - 100):
        expected = _reference(key, counter, blocks)
        assert _python_bulk.keystream(expanded.bulk_tables(), counter, blocks) == expected


def test_reports_itself_not_constant_time(python: aescore.Backend) -> None:
    assert python.constant_time is False
    assert python.info() == {"name": "python", "constant_time": False}
    assert "not constant-time" in (_python.__doc__ or "").lower()

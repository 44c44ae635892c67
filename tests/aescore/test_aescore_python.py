"""The python backend's internals: its two code paths agree with each other and with AES at their seams."""

from __future__ import annotations

import os

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


def _bytes_inside(value: object, depth: int = 0) -> list[bytes]:
    """Every ``bytes`` reachable from ``value`` through slots, tuples and lists (a few levels deep)."""
    if isinstance(value, bytes):
        return [value]
    if depth > 4:
        return []
    if isinstance(value, tuple | list):
        return [found for item in value for found in _bytes_inside(item, depth + 1)]
    names = [name for cls in type(value).__mro__ for name in getattr(cls, "__slots__", ())]
    return [found for name in names for found in _bytes_inside(getattr(value, name, None), depth + 1)]


@pytest.mark.parametrize("key_size", [16, 24, 32])
def test_an_expanded_key_and_a_gcm_key_hold_no_bytes_copy_of_the_key(
    python: aescore.Backend, key_size: int
) -> None:
    """Round keys 0 and 1 are the key itself: kept as ``bytes`` they outlive the locked memory they came from
    (the AES-128 key lay byte for byte in every expanded key, and so in freed memory afterwards)."""
    key = bytearray(os.urandom(key_size))  # not a run such as range(): the shared tables hold every run
    expanded = python.expand_key(key)
    assert isinstance(expanded, _python.PythonExpandedKey)
    expanded.bulk_tables()
    halves = [bytes(key[:16]), bytes(key[16:])] if key_size == 32 else [bytes(key)]
    held = _bytes_inside(expanded) + _bytes_inside(python.gcm_key(key))
    assert held  # the walk does reach the key's bytes objects (the last round key, the tables)
    assert not [part for part in held for half in halves if half in part]
    assert python.ctr_xor(expanded, bytes(16), bytes(16)) == _reference(bytes(key), 0, 1)


def test_key_view_checks_the_key_and_reads_it_in_place() -> None:
    key = bytearray(16)
    view = aescore.key_view(key)
    key[0] = 1
    assert view[0] == 1  # a view of the caller's memory, not a copy
    with pytest.raises(aescore.AesCoreValueError, match="key must be 16, 24 or 32 bytes"):
        aescore.key_view(bytes(15))
    with pytest.raises(aescore.AesCoreTypeError):
        aescore.key_view("sixteen chars!!!")

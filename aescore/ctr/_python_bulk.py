"""Bulk path of the ``python`` backend: many counter blocks at once with whole-buffer operations.

Like the rest of the ``python`` backend this is **not constant-time** (``bytes.translate`` is a table lookup
indexed by key- and data-dependent bytes).

For ``n`` blocks the AES state of all blocks is one ``16 * n``-byte buffer (block ``i`` at bytes
``16 i .. 16 i + 15``, each block column-major as in FIPS-197), so every step of a round runs in C over the
whole buffer and Python only pays a few dozen calls per round, whatever ``n`` is:

* AddRoundKey of the previous round, SubBytes and ShiftRows together: for each of the 16 byte positions, one
  strided slice (``state[source::16]``, that position in every block) goes through ``bytes.translate``
  with the 256-byte table ``x -> S(x ^ key_byte)`` and lands at its ShiftRows destination.
* MixColumns on the buffer as one big integer, all columns at once: with ``d = a ^ rot8(a)`` (``rot8`` moves
  each row of a 4-byte column up by one), ``b = a ^ d ^ rot16(d) ^ xtime(d)``; the rotations and ``xtime`` are
  shifts and masks with byte-periodic masks.

Above a few dozen blocks this is several times faster than the T-table path (see ``_python.py``), which
handles short inputs where the fixed cost of ~40 calls per round dominates.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

__all__ = ["CHUNK_BLOCKS", "KeyTables", "bulk_tables", "keystream"]

#: Per key: for rounds 1..Nr the 16 tables (by destination byte) of AddRoundKey(previous) + SubBytes, and
#: the 16 tables of the final AddRoundKey.
KeyTables = tuple[tuple[tuple[bytes, ...], ...], tuple[bytes, ...]]

#: Blocks per chunk: 64 KiB buffers stay in the CPU caches and bound the memory of a call.
CHUNK_BLOCKS = 4096
_MASK128 = (1 << 128) - 1
#: ShiftRows: destination byte 4c + r takes source byte 4((c + r) mod 4) + r.
_SHIFT_ROWS_SOURCE = tuple(4 * ((p // 4 + p % 4) % 4) + p % 4 for p in range(16))
_IDENTITY = int.from_bytes(bytes(range(256)), "big")
_ALL_ONES_BYTES = int.from_bytes(b"\x01" * 256, "big")


def _xor_table(byte: int) -> bytes:
    return (_IDENTITY ^ (_ALL_ONES_BYTES * byte)).to_bytes(256, "big")


@functools.cache
def _sub_tables(sbox: bytes) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """For every key byte k: the tables x -> S(x ^ k) and x -> x ^ k."""
    xor = tuple(_xor_table(byte) for byte in range(256))
    return tuple(table.translate(sbox) for table in xor), xor


def _byte(round_key: int, position: int) -> int:
    """Byte ``position`` (0 = first) of a 128-bit big-endian round key."""
    return (round_key >> (8 * (15 - position))) & 0xFF


def bulk_tables(round_keys: Sequence[int], sbox: bytes) -> KeyTables:
    """The translation tables of one key (see :data:`KeyTables`) from its Nr + 1 round keys (128-bit ints:
    never ``bytes``, whose first one or two would be the key itself)."""
    substitute, xor = _sub_tables(sbox)
    rounds = tuple(
        tuple(substitute[_byte(key, source)] for source in _SHIFT_ROWS_SOURCE) for key in round_keys[:-1]
    )
    return rounds, tuple(xor[_byte(round_keys[-1], position)] for position in range(16))


def _periodic(pattern: bytes, blocks: int) -> int:
    return int.from_bytes(pattern * (16 * blocks // len(pattern)), "big")


@functools.cache
def _chunk_constants() -> tuple[int, ...]:
    """Masks and the counter-index ramp for a full chunk; shorter inputs shift them down."""
    ramp = int.from_bytes(b"".join(i.to_bytes(16, "big") for i in range(CHUNK_BLOCKS)), "big")
    ones = _periodic(b"\x00" * 15 + b"\x01", CHUNK_BLOCKS)
    return (
        ones,
        ramp,
        _periodic(b"\xff\xff\xff\x00", CHUNK_BLOCKS),
        _periodic(b"\x00\x00\x00\xff", CHUNK_BLOCKS),
        _periodic(b"\xff\xff\x00\x00", CHUNK_BLOCKS),
        _periodic(b"\x00\x00\xff\xff", CHUNK_BLOCKS),
        _periodic(b"\x7f", CHUNK_BLOCKS),
        _periodic(b"\x01", CHUNK_BLOCKS),
    )


def _chunk(tables: KeyTables, counter: int, blocks: int) -> bytearray:
    """Keystream of ``blocks`` (<= CHUNK_BLOCKS) blocks whose counters do not wrap."""
    length = 16 * blocks
    constants = _chunk_constants()
    if blocks != CHUNK_BLOCKS:
        drop = 128 * (CHUNK_BLOCKS - blocks)
        constants = tuple(value >> drop for value in constants)
    ones, ramp, high3, low1, high2, low2, low7, bit0 = constants
    state = (counter * ones + ramp).to_bytes(length, "big")
    sources = _SHIFT_ROWS_SOURCE
    round_tables, final_tables = tables
    for substitute in round_tables[:-1]:
        shifted = bytearray(length)
        for destination in range(16):
            shifted[destination::16] = state[sources[destination] :: 16].translate(substitute[destination])
        a = int.from_bytes(shifted, "big")
        d = a ^ ((a << 8) & high3) ^ ((a >> 24) & low1)
        a ^= d ^ ((d << 16) & high2) ^ ((d >> 16) & low2) ^ ((d & low7) << 1) ^ (((d >> 7) & bit0) * 0x1B)
        state = a.to_bytes(length, "big")
    substitute = round_tables[-1]
    result = bytearray(length)
    for destination in range(16):
        result[destination::16] = (
            state[sources[destination] :: 16]
            .translate(substitute[destination])
            .translate(final_tables[destination])
        )
    return result


def keystream(tables: KeyTables, counter: int, blocks: int) -> bytes:
    """Keystream blocks AES(counter), AES(counter + 1)... (the counter wraps mod 2**128)."""
    parts = []
    while blocks:
        run = min(blocks, CHUNK_BLOCKS, (1 << 128) - counter)
        parts.append(_chunk(tables, counter, run))
        blocks -= run
        counter = (counter + run) & _MASK128
    return b"".join(parts)

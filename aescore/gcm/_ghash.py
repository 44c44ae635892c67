"""GHASH (NIST SP 800-38D 6.4) in pure Python, with 8-bit tables.

**Not constant-time**: the tables are indexed by bytes of the hash state, which depend on the hash key and
the data, so cache timing can leak the hash key ``H`` (and with it the ability to forge tags). It serves the
``python`` backend (itself not constant-time) and is the independent reference the tests check the C code
against; the ``aesni`` backend has its own carry-less-multiply GHASH.

Representation: a 16-byte block is the int ``int.from_bytes(block, "big")``, so the spec's bit 0 (the
coefficient of ``x**0``) is the int's most significant bit, and multiplying by ``x`` is a right shift that
folds the bit falling off the end back with ``R = 0xE1 || 0**120`` (SP 800-38D Algorithm 1).

Tables (Shoup's method): ``X * H`` is linear in ``X``, so it is the XOR, over the 16 byte positions ``i``,
of ``T[i][X_i]`` where ``T[i][b]`` is the product of ``H`` with byte value ``b`` placed at position ``i``.
That is 16 x 256 precomputed 128-bit ints per hash key (about 4,000 XORs to build, a millisecond) and 16
lookups per block.
"""

from __future__ import annotations

import struct

__all__ = ["PythonGhash", "gf_multiply"]

_R = 0xE1 << 120
_LENGTHS = struct.Struct(">QQ")


def gf_multiply(x: int, y: int) -> int:
    """``x * y`` in GCM's field, bit by bit (SP 800-38D Algorithm 1); slow, used to build tables and check."""
    z = 0
    v = y
    for bit in range(127, -1, -1):
        if (x >> bit) & 1:
            z ^= v
        v = (v >> 1) ^ _R if v & 1 else v >> 1
    return z


def _tables(h: int) -> tuple[tuple[int, ...], ...]:
    # powers[k] = x**k * H: the product of H with the block whose only set bit is the spec's bit k.
    powers = []
    v = h
    for _ in range(128):
        powers.append(v)
        v = (v >> 1) ^ _R if v & 1 else v >> 1
    tables = []
    for position in range(16):
        table = [0] * 256
        for bit in range(7, -1, -1):  # byte value 0x80 >> bit is the spec's bit 8 * position + bit;
            # smallest value first, so table[low] is complete for every low < value
            single = powers[8 * position + bit]
            value = 0x80 >> bit
            for low in range(value):
                table[value | low] = table[low] ^ single
        tables.append(tuple(table))
    return tuple(tables)


class PythonGhash:
    """GHASH under one hash key ``H``; immutable and thread-safe. Not constant-time (module docstring).

    Args:
        hash_key: the 16-byte ``H = AES_K(0**128)``.
    """

    __slots__ = ("_tables",)

    def __init__(self, hash_key: bytes) -> None:
        self._tables = _tables(int.from_bytes(hash_key, "big"))

    def _absorb(self, state: int, data: memoryview) -> int:
        t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15 = self._tables
        length = len(data)
        whole = length - length % 16
        from_bytes = int.from_bytes
        for start in range(0, whole, 16):
            # fmt: off
            b0, b1, b2, b3, b4, b5, b6, b7, b8, b9, b10, b11, b12, b13, b14, b15 = (
                state ^ from_bytes(data[start : start + 16], "big")
            ).to_bytes(16, "big")
            state = (
                t0[b0] ^ t1[b1] ^ t2[b2] ^ t3[b3] ^ t4[b4] ^ t5[b5] ^ t6[b6] ^ t7[b7]
                ^ t8[b8] ^ t9[b9] ^ t10[b10] ^ t11[b11] ^ t12[b12] ^ t13[b13] ^ t14[b14] ^ t15[b15]
            )
            # fmt: on
        if whole != length:  # the last partial block, padded with zeros
            padded = bytes(data[whole:]) + bytes(16 - (length - whole))
            state = self._multiply(state ^ from_bytes(padded, "big"))
        return state

    def _multiply(self, value: int) -> int:
        result = 0
        for table, byte in zip(self._tables, value.to_bytes(16, "big"), strict=True):
            result ^= table[byte]
        return result

    def digest(self, associated_data: memoryview, ciphertext: memoryview) -> bytes:
        """GHASH of ``A || pad || C || pad || len64(A) || len64(C)`` (lengths in bits): GCM's ``S``.

        Returns:
            The 16-byte hash; the GCM tag is this XORed with ``AES_K(J0)``.
        """
        state = self._absorb(0, associated_data)
        state = self._absorb(state, ciphertext)
        lengths = _LENGTHS.pack(8 * len(associated_data), 8 * len(ciphertext))
        return self._multiply(state ^ int.from_bytes(lengths, "big")).to_bytes(16, "big")

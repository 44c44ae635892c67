"""The ``python`` backend: AES-CTR in pure Python with T-tables.

**Not constant-time.** Every round indexes lookup tables with bytes that depend on the key and on the
counter, so cache timing can leak key material to an attacker who shares the machine or can time requests
precisely. Use the ``aesni`` backend wherever that matters; this one is a portable fallback and an independent
reference for the tests.

Two code paths, chosen by length (both pure Python, no numpy, no C of ours):

* Short inputs (fewer than ``BULK_MIN_BLOCKS`` blocks): classic T-tables, one block at a time. T-tables fold
  SubBytes, ShiftRows and MixColumns, so a round is 16 lookups XORed with the round key; the 16 tables are
  indexed by input byte position and hold each column's word already shifted to its place in a 128-bit int,
  so the state is one int, split into 16 byte locals by one ``int.to_bytes`` unpacking. Rounds are unrolled
  and round keys are ints in locals. Counter-mode caching: within a run of up to 256 blocks only the counter's
  last byte changes, so round 1 varies in one lookup and round 2 in four; the rest of both rounds is computed
  once per run. The last full round's tables also apply the final ShiftRows, so the final round (SubBytes and
  AddRoundKey) runs over the whole keystream at once with ``bytes.translate`` and one big-integer XOR.
* Longer inputs: ``_python_bulk``, which runs each AES step over all blocks at once with ``bytes.translate``,
  strided slices and big-integer shifts and masks (about 6x faster per block than the T-tables here).

The XOR with the data is one big-integer XOR (``int.from_bytes``) over the whole buffer.
"""

from __future__ import annotations

from itertools import repeat

from .._interface import Backend, BytesLike, ExpandedKey
from .._validate import (
    BLOCK_SIZE,
    as_readable,
    as_writable,
    check_counter,
    check_length,
    check_offset,
    foreign_key,
    key_view,
)
from ..errors import AesCoreTypeError
from . import _python_bulk

__all__ = ["PythonBackend", "PythonExpandedKey"]

#: From this many blocks on, the whole-buffer path of ``_python_bulk`` is faster than the T-table rounds.
BULK_MIN_BLOCKS = 12
_MASK128 = (1 << 128) - 1
_LOW96 = (1 << 96) - 1


def _xtime(value: int) -> int:
    value <<= 1
    return value ^ 0x11B if value & 0x100 else value


def _make_sbox() -> list[int]:
    # S(x) = affine(x^-1) over GF(2^8) with the AES polynomial x^8 + x^4 + x^3 + x + 1 (FIPS-197 5.1.1).
    sbox = [0x63] * 256
    p = q = 1
    while True:
        p ^= _xtime(p)  # p *= 3 walks the multiplicative group...
        q ^= q << 1  # ...and q /= 3 walks it backwards, so q == p^-1
        q ^= q << 2
        q ^= q << 4
        q &= 0xFF
        if q & 0x80:
            q ^= 0x09
        x = q ^ ((q << 1) | (q >> 7)) ^ ((q << 2) | (q >> 6)) ^ ((q << 3) | (q >> 5)) ^ ((q << 4) | (q >> 4))
        sbox[p] = (x ^ 0x63) & 0xFF
        if p == 1:
            return sbox


_SBOX = _make_sbox()
_SBOX_BYTES = bytes(_SBOX)
# Te_r[x]: the MixColumns column of S(x) entering at row r, as a big-endian word (rows 0..3 = bytes 3..0).
_TE0 = [(_xtime(s) << 24) | (s << 16) | (s << 8) | (_xtime(s) ^ s) for s in _SBOX]
_TE = [[((w >> (8 * r)) | (w << (32 - 8 * r))) & 0xFFFFFFFF for w in _TE0] for r in range(4)]


def _column_of(position: int) -> int:
    """Output column fed by the state byte at ``position`` (= 4 * column + row) after ShiftRows."""
    return (position // 4 - position % 4) % 4


# _T[p][x]: round contribution of byte value x at state position p, placed in the 128-bit state int.
_T = [[w << (96 - 32 * _column_of(p)) for w in _TE[p % 4]] for p in range(16)]


def _shift_rows_placed(word: int, column: int) -> int:
    """Place a column word in the 128-bit state with ShiftRows already applied (row r moves left by r)."""
    placed = 0
    for row in range(4):
        byte = (word >> (24 - 8 * row)) & 0xFF
        placed |= byte << (8 * (15 - (4 * ((column - row) % 4) + row)))
    return placed


def _shift_rows(state: int) -> int:
    return sum(_shift_rows_placed((state >> (96 - 32 * c)) & 0xFFFFFFFF, c) for c in range(4))


# _Z: like _T, but its output is already ShiftRows-permuted for the final round.
_Z = [[_shift_rows_placed(w, _column_of(p)) for w in _TE[p % 4]] for p in range(16)]


def _round(state: int, round_key: int) -> int:
    """One full round (SubBytes, ShiftRows, MixColumns, AddRoundKey); used once per run of blocks."""
    result = round_key
    for table, value in zip(_T, state.to_bytes(16, "big"), strict=True):
        result ^= table[value]
    return result


def _expand(key: memoryview) -> list[int]:
    """FIPS-197 5.2 key expansion into 4 * (rounds + 1) big-endian 32-bit words (``key`` read in place)."""
    nk = len(key) // 4
    words = [int.from_bytes(key[4 * i : 4 * i + 4], "big") for i in range(nk)]
    rcon = 1
    sbox = _SBOX
    for i in range(nk, 4 * (nk + 7)):
        temp = words[i - 1]
        if i % nk == 0:  # RotWord, SubWord, Rcon
            temp = (
                (sbox[(temp >> 16) & 0xFF] << 24)
                | (sbox[(temp >> 8) & 0xFF] << 16)
                | (sbox[temp & 0xFF] << 8)
                | sbox[temp >> 24]
            ) ^ (rcon << 24)
            rcon = _xtime(rcon)
        elif nk > 6 and i % nk == 4:  # SubWord only, AES-256
            temp = (
                (sbox[temp >> 24] << 24)
                | (sbox[(temp >> 16) & 0xFF] << 16)
                | (sbox[(temp >> 8) & 0xFF] << 8)
                | sbox[temp & 0xFF]
            )
        words.append(words[i - nk] ^ temp)
    return words


class PythonExpandedKey(ExpandedKey):
    """Round keys of the ``python`` backend as 128-bit ints. Its repr shows no key material.

    The key is read in place and never copied into ``bytes``: round keys 0 and 1 are the key itself, and a
    ``bytes`` object holding them would lie byte for byte in freed memory after the key's owner zeroed its
    copy. The ints (30-bit digits) and tables are the pure-Python core's nature; they cannot be zeroed and go
    when the object is freed.
    """

    __slots__ = (
        "_bulk",
        "_column0",
        "_key_size",
        "_keys",
        "_last",
        "_last_full",
        "_round_keys",
        "_rounds",
    )

    def __init__(self, key: memoryview) -> None:
        words = _expand(key)
        self._key_size = len(key)
        self._rounds = len(words) // 4 - 1
        keys = [
            (words[i] << 96) | (words[i + 1] << 64) | (words[i + 2] << 32) | words[i + 3]
            for i in range(0, len(words), 4)
        ]
        #: k0 .. k12 (zero-padded for short keys) for the unrolled rounds.
        self._keys = tuple(keys[:-2]) + (0,) * (15 - len(keys))
        self._last_full = _shift_rows(keys[-2])
        self._last = keys[-1].to_bytes(16, "big")
        self._round_keys = tuple(keys)
        self._bulk: _python_bulk.KeyTables | None = None
        # Round 1, column 0 as a function of the counter's last byte (the AddRoundKey of round 0 folded in).
        first = _TE[3]
        low = keys[0] & 0xFF
        self._column0 = [first[value ^ low] for value in range(256)]

    def bulk_tables(self) -> _python_bulk.KeyTables:
        """The bulk path's translation tables, built on first use (a benign race: both results are equal)."""
        tables = self._bulk
        if tables is None:
            tables = self._bulk = _python_bulk.bulk_tables(self._round_keys, _SBOX_BYTES)
        return tables

    @property
    def backend_name(self) -> str:
        return "python"

    @property
    def key_size(self) -> int:
        return self._key_size


def _states(key: PythonExpandedKey, counter: int, blocks: int) -> list[int]:
    """The state before the final round of AES(counter + i) for i < blocks, ShiftRows applied."""
    t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, t10, t11, t12, t13, t14, t15 = _T
    z0, z1, z2, z3, z4, z5, z6, z7, z8, z9, z10, z11, z12, z13, z14, z15 = _Z
    k0, k1, k2, k3, k4, k5, k6, k7, k8, k9, k10, k11, k12 = key._keys
    k_last_full = key._last_full
    rounds = key._rounds
    column0 = key._column0
    to_bytes = int.to_bytes
    unused_round2 = t0[0] ^ t1[0] ^ t2[0] ^ t3[0]
    states: list[int] = []
    append = states.append
    while blocks:
        # A run: counters that differ only in their last byte.
        low = counter & 0xFF
        run = min(256 - low, blocks)
        base1 = _round((counter ^ k0) & ~0xFF, k1) ^ t15[0]
        high1 = base1 >> 96
        base2 = _round(base1 & _LOW96, k2) ^ unused_round2
        for last_byte in range(low, low + run):
            w = high1 ^ column0[last_byte]
            state = base2 ^ t0[w >> 24] ^ t1[(w >> 16) & 0xFF] ^ t2[(w >> 8) & 0xFF] ^ t3[w & 0xFF]
            # fmt: off
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = to_bytes(state, 16)
            state = (
                t0[a0] ^ t1[a1] ^ t2[a2] ^ t3[a3]
                ^ t4[a4] ^ t5[a5] ^ t6[a6] ^ t7[a7]
                ^ t8[a8] ^ t9[a9] ^ t10[a10] ^ t11[a11]
                ^ t12[a12] ^ t13[a13] ^ t14[a14] ^ t15[a15]
                ^ k3
            )
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = to_bytes(state, 16)
            state = (
                t0[a0] ^ t1[a1] ^ t2[a2] ^ t3[a3]
                ^ t4[a4] ^ t5[a5] ^ t6[a6] ^ t7[a7]
                ^ t8[a8] ^ t9[a9] ^ t10[a10] ^ t11[a11]
                ^ t12[a12] ^ t13[a13] ^ t14[a14] ^ t15[a15]
                ^ k4
            )
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = to_bytes(state, 16)
            state = (
                t0[a0] ^ t1[a1] ^ t2[a2] ^ t3[a3]
                ^ t4[a4] ^ t5[a5] ^ t6[a6] ^ t7[a7]
                ^ t8[a8] ^ t9[a9] ^ t10[a10] ^ t11[a11]
                ^ t12[a12] ^ t13[a13] ^ t14[a14] ^ t15[a15]
                ^ k5
            )
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = to_bytes(state, 16)
            state = (
                t0[a0] ^ t1[a1] ^ t2[a2] ^ t3[a3]
                ^ t4[a4] ^ t5[a5] ^ t6[a6] ^ t7[a7]
                ^ t8[a8] ^ t9[a9] ^ t10[a10] ^ t11[a11]
                ^ t12[a12] ^ t13[a13] ^ t14[a14] ^ t15[a15]
                ^ k6
            )
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = to_bytes(state, 16)
            state = (
                t0[a0] ^ t1[a1] ^ t2[a2] ^ t3[a3]
                ^ t4[a4] ^ t5[a5] ^ t6[a6] ^ t7[a7]
                ^ t8[a8] ^ t9[a9] ^ t10[a10] ^ t11[a11]
                ^ t12[a12] ^ t13[a13] ^ t14[a14] ^ t15[a15]
                ^ k7
            )
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = to_bytes(state, 16)
            state = (
                t0[a0] ^ t1[a1] ^ t2[a2] ^ t3[a3]
                ^ t4[a4] ^ t5[a5] ^ t6[a6] ^ t7[a7]
                ^ t8[a8] ^ t9[a9] ^ t10[a10] ^ t11[a11]
                ^ t12[a12] ^ t13[a13] ^ t14[a14] ^ t15[a15]
                ^ k8
            )
            if rounds > 10:  # AES-192 and AES-256
                a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = to_bytes(state, 16)
                state = (
                    t0[a0] ^ t1[a1] ^ t2[a2] ^ t3[a3]
                    ^ t4[a4] ^ t5[a5] ^ t6[a6] ^ t7[a7]
                    ^ t8[a8] ^ t9[a9] ^ t10[a10] ^ t11[a11]
                    ^ t12[a12] ^ t13[a13] ^ t14[a14] ^ t15[a15]
                    ^ k9
                )
                a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = to_bytes(state, 16)
                state = (
                    t0[a0] ^ t1[a1] ^ t2[a2] ^ t3[a3]
                    ^ t4[a4] ^ t5[a5] ^ t6[a6] ^ t7[a7]
                    ^ t8[a8] ^ t9[a9] ^ t10[a10] ^ t11[a11]
                    ^ t12[a12] ^ t13[a13] ^ t14[a14] ^ t15[a15]
                    ^ k10
                )
                if rounds > 12:  # AES-256
                    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = to_bytes(state, 16)
                    state = (
                        t0[a0] ^ t1[a1] ^ t2[a2] ^ t3[a3]
                        ^ t4[a4] ^ t5[a5] ^ t6[a6] ^ t7[a7]
                        ^ t8[a8] ^ t9[a9] ^ t10[a10] ^ t11[a11]
                        ^ t12[a12] ^ t13[a13] ^ t14[a14] ^ t15[a15]
                        ^ k11
                    )
                    a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = to_bytes(state, 16)
                    state = (
                        t0[a0] ^ t1[a1] ^ t2[a2] ^ t3[a3]
                        ^ t4[a4] ^ t5[a5] ^ t6[a6] ^ t7[a7]
                        ^ t8[a8] ^ t9[a9] ^ t10[a10] ^ t11[a11]
                        ^ t12[a12] ^ t13[a13] ^ t14[a14] ^ t15[a15]
                        ^ k12
                    )
            # The last full round; z tables leave the state ShiftRows-permuted for the final round.
            a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11, a12, a13, a14, a15 = to_bytes(state, 16)
            state = (
                z0[a0] ^ z1[a1] ^ z2[a2] ^ z3[a3]
                ^ z4[a4] ^ z5[a5] ^ z6[a6] ^ z7[a7]
                ^ z8[a8] ^ z9[a9] ^ z10[a10] ^ z11[a11]
                ^ z12[a12] ^ z13[a13] ^ z14[a14] ^ z15[a15]
                ^ k_last_full
            )
            # fmt: on
            append(state)
        blocks -= run
        counter = (counter + run) & _MASK128
    return states


def _keystream(key: PythonExpandedKey, counter: int, blocks: int) -> bytes:
    """Keystream blocks AES(counter), AES(counter + 1)... (the counter wraps mod 2**128)."""
    if blocks >= BULK_MIN_BLOCKS:
        return _python_bulk.keystream(key.bulk_tables(), counter, blocks)
    states = _states(key, counter, blocks)
    before_final = b"".join(map(int.to_bytes, states, repeat(16)))
    return (
        int.from_bytes(before_final.translate(_SBOX_BYTES), "big") ^ int.from_bytes(key._last * blocks, "big")
    ).to_bytes(16 * blocks, "big")


class PythonBackend(Backend):
    """AES-CTR in pure Python (T-tables). Portable and slow, and **not constant-time**.

    Table lookups are indexed by key- and data-dependent bytes, so the running time and cache footprint leak
    information about the key. Thread-safe: it keeps no mutable state.
    """

    name = "python"
    constant_time = False

    def expand_key(self, key: BytesLike) -> ExpandedKey:
        """Expand a 16, 24 or 32-byte AES key into round keys.

        Raises:
            TypeError: ``key`` is not bytes-like (:class:`aescore.AesCoreTypeError`).
            ValueError: ``key`` has another length (:class:`aescore.AesCoreValueError`).
        """
        return PythonExpandedKey(key_view(key))

    def ctr_xor(
        self,
        expanded_key: ExpandedKey,
        initial_counter: BytesLike,
        data: BytesLike,
        offset: int = 0,
        out: bytearray | memoryview | None = None,
    ) -> bytes | None:
        """XOR ``data`` with the keystream from byte ``offset``; see :meth:`aescore.Backend.ctr_xor`.

        Not constant-time (see the class docstring).

        Raises:
            TypeError: wrong argument types, a read-only ``out``, or a key from another backend.
            ValueError: a counter that is not 16 bytes, a negative or too large offset, or a too-small
                ``out``.
        """
        if not isinstance(expanded_key, PythonExpandedKey):
            raise AesCoreTypeError(foreign_key("expanded_key", "python", expanded_key))
        counter = int.from_bytes(check_counter(initial_counter), "big")
        view = as_readable("data", data)
        offset = check_offset(offset)
        length = len(view)
        check_length(offset, length)
        target = as_writable("out", out, length) if out is not None else None
        if length == 0:
            return None if target is not None else b""
        first_block, skip = divmod(offset, BLOCK_SIZE)
        blocks = (skip + length + BLOCK_SIZE - 1) // BLOCK_SIZE
        stream = _keystream(expanded_key, (counter + first_block) & _MASK128, blocks)
        result = (int.from_bytes(view, "big") ^ int.from_bytes(stream[skip : skip + length], "big")).to_bytes(
            length, "big"
        )
        if target is None:
            return result
        target[:length] = result
        return None

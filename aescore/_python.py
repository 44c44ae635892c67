"""The ``python`` backend: AES-CTR in pure Python with T-tables.

**Not constant-time.** Every round indexes lookup tables with bytes that depend on the key and on the
counter, so cache timing can leak key material to an attacker who shares the machine or can time requests
precisely. Use the ``aesni`` backend wherever that matters; this one exists as a portable fallback and as an
independent reference for the tests.
"""

from __future__ import annotations

from ._interface import Backend, BytesLike, ExpandedKey
from ._validate import (
    BLOCK_SIZE,
    as_readable,
    as_writable,
    check_counter,
    check_key,
    check_length,
    check_offset,
)
from .errors import AesCoreTypeError

__all__ = ["PythonBackend"]

_MASK128 = (1 << 128) - 1


def _xtime(value: int) -> int:
    value <<= 1
    return value ^ 0x11B if value & 0x100 else value


def _make_sbox() -> list[int]:
    # S(x) = affine(x^-1) over GF(2^8) with the AES polynomial x^8 + x^4 + x^3 + x + 1 (FIPS-197 5.1.1).
    sbox = [0] * 256
    p = q = 1
    while True:
        p = p ^ _xtime(p)  # p *= 3 walks the multiplicative group
        q ^= q << 1  # q /= 3
        q ^= q << 2
        q ^= q << 4
        q &= 0xFF
        if q & 0x80:
            q ^= 0x09
        x = q ^ ((q << 1) | (q >> 7)) ^ ((q << 2) | (q >> 6)) ^ ((q << 3) | (q >> 5)) ^ ((q << 4) | (q >> 4))
        sbox[p] = (x ^ 0x63) & 0xFF
        if p == 1:
            break
    sbox[0] = 0x63
    return sbox


_SBOX = _make_sbox()
#: T-tables: Te0[x] = (2s, s, s, 3s) for s = S(x), Te1..Te3 its byte rotations (SubBytes+MixColumns folded).
_TE0 = [(_xtime(s) << 24) | (s << 16) | (s << 8) | (_xtime(s) ^ s) for s in _SBOX]
_TE1 = [((w >> 8) | (w << 24)) & 0xFFFFFFFF for w in _TE0]
_TE2 = [((w >> 16) | (w << 16)) & 0xFFFFFFFF for w in _TE0]
_TE3 = [((w >> 24) | (w << 8)) & 0xFFFFFFFF for w in _TE0]


def _expand(key: bytes) -> list[int]:
    """FIPS-197 5.2 key expansion into 4 * (rounds + 1) big-endian 32-bit words."""
    nk = len(key) // 4
    rounds = nk + 6
    words = [int.from_bytes(key[4 * i : 4 * i + 4], "big") for i in range(nk)]
    rcon = 1
    sbox = _SBOX
    for i in range(nk, 4 * (rounds + 1)):
        temp = words[i - 1]
        if i % nk == 0:
            temp = (
                (sbox[(temp >> 16) & 0xFF] << 24)
                | (sbox[(temp >> 8) & 0xFF] << 16)
                | (sbox[temp & 0xFF] << 8)
                | sbox[temp >> 24]
            ) ^ (rcon << 24)
            rcon = _xtime(rcon)
        elif nk > 6 and i % nk == 4:
            temp = (
                (sbox[temp >> 24] << 24)
                | (sbox[(temp >> 16) & 0xFF] << 16)
                | (sbox[(temp >> 8) & 0xFF] << 8)
                | sbox[temp & 0xFF]
            )
        words.append(words[i - nk] ^ temp)
    return words


class PythonExpandedKey(ExpandedKey):
    """Round keys of the ``python`` backend (a tuple of 32-bit ints). Its repr shows no key material."""

    __slots__ = ("_key_size", "_round_keys")

    def __init__(self, key: bytes) -> None:
        self._key_size = len(key)
        self._round_keys = tuple(_expand(key))

    @property
    def backend_name(self) -> str:
        return "python"

    @property
    def key_size(self) -> int:
        return self._key_size


def _keystream(round_keys: tuple[int, ...], counter: int, blocks: int) -> bytes:
    """Return ``blocks`` keystream blocks AES(counter), AES(counter + 1)... (counter wraps mod 2**128)."""
    te0, te1, te2, te3, sbox = _TE0, _TE1, _TE2, _TE3, _SBOX
    rounds = len(round_keys) // 4 - 1
    out = bytearray()
    for _ in range(blocks):
        s0 = (counter >> 96) ^ round_keys[0]
        s1 = ((counter >> 64) & 0xFFFFFFFF) ^ round_keys[1]
        s2 = ((counter >> 32) & 0xFFFFFFFF) ^ round_keys[2]
        s3 = (counter & 0xFFFFFFFF) ^ round_keys[3]
        for r in range(1, rounds):
            k = 4 * r
            t0 = te0[s0 >> 24] ^ te1[(s1 >> 16) & 255] ^ te2[(s2 >> 8) & 255] ^ te3[s3 & 255] ^ round_keys[k]
            t1 = (
                te0[s1 >> 24]
                ^ te1[(s2 >> 16) & 255]
                ^ te2[(s3 >> 8) & 255]
                ^ te3[s0 & 255]
                ^ round_keys[k + 1]
            )
            t2 = (
                te0[s2 >> 24]
                ^ te1[(s3 >> 16) & 255]
                ^ te2[(s0 >> 8) & 255]
                ^ te3[s1 & 255]
                ^ round_keys[k + 2]
            )
            t3 = (
                te0[s3 >> 24]
                ^ te1[(s0 >> 16) & 255]
                ^ te2[(s1 >> 8) & 255]
                ^ te3[s2 & 255]
                ^ round_keys[k + 3]
            )
            s0, s1, s2, s3 = t0, t1, t2, t3
        k = 4 * rounds
        block = (
            (
                (sbox[s0 >> 24] << 24)
                | (sbox[(s1 >> 16) & 255] << 16)
                | (sbox[(s2 >> 8) & 255] << 8)
                | sbox[s3 & 255]
            )
            ^ round_keys[k],
            (
                (sbox[s1 >> 24] << 24)
                | (sbox[(s2 >> 16) & 255] << 16)
                | (sbox[(s3 >> 8) & 255] << 8)
                | sbox[s0 & 255]
            )
            ^ round_keys[k + 1],
            (
                (sbox[s2 >> 24] << 24)
                | (sbox[(s3 >> 16) & 255] << 16)
                | (sbox[(s0 >> 8) & 255] << 8)
                | sbox[s1 & 255]
            )
            ^ round_keys[k + 2],
            (
                (sbox[s3 >> 24] << 24)
                | (sbox[(s0 >> 16) & 255] << 16)
                | (sbox[(s1 >> 8) & 255] << 8)
                | sbox[s2 & 255]
            )
            ^ round_keys[k + 3],
        )
        for word in block:
            out += word.to_bytes(4, "big")
        counter = (counter + 1) & _MASK128
    return bytes(out)


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
        return PythonExpandedKey(check_key(key))

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
            raise AesCoreTypeError(
                "expanded_key must come from the 'python' backend's expand_key, "
                f"got {type(expanded_key).__name__}"
            )
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
        stream = _keystream(expanded_key._round_keys, (counter + first_block) & _MASK128, blocks)
        result = (int.from_bytes(view, "big") ^ int.from_bytes(stream[skip : skip + length], "big")).to_bytes(
            length, "big"
        )
        if target is None:
            return result
        target[:length] = result
        return None

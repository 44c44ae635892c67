"""The raw format: plain AES-CTR exactly as aescore computes it, with random access by byte offset.

Keystream block ``i`` is ``AES_K(IV + i)``: the 16-byte IV read as one big-endian 128-bit counter that wraps
modulo 2**128 (pyaes's ``Counter``, pyperformance's ``crypto_pyaes``). Byte ``offset`` of the stream is byte
``offset % 16`` of keystream block ``offset // 16``, so any slice can be processed on its own. Raw mode has no
integrity protection, and reusing an IV with the same key over different data reveals their XOR: pick a fresh
IV (:func:`new_iv`) for every message.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable

import aescore
from aescore import MAX_STREAM_LENGTH, CounterOverflowError, CtrStream
from app.errors import BadRequestError

__all__ = [
    "IV_SIZE",
    "AsyncRawCipher",
    "RawCipher",
    "check_offset",
    "check_range",
    "format_iv",
    "new_iv",
    "parse_iv",
]

#: AES block size: the IV is one counter block.
IV_SIZE = 16

_IV_PATTERN = re.compile(r"[0-9A-Fa-f]{32}")


def parse_iv(value: str) -> bytes:
    """Parse the ``iv`` query parameter: exactly 32 hexadecimal digits (16 bytes), any case.

    Raises:
        BadRequestError: ``value`` is not 32 hex digits (the message names ``iv`` and the format).
    """
    if not isinstance(value, str) or _IV_PATTERN.fullmatch(value) is None:
        got = f"{len(value)} characters" if isinstance(value, str) else type(value).__name__
        if isinstance(value, str) and len(value) == 2 * IV_SIZE:
            got += " with non-hex characters"
        raise BadRequestError(f"iv must be 32 hexadecimal digits (16 bytes), got {got}")
    return bytes.fromhex(value)


def format_iv(iv: bytes) -> str:
    """The ``Keystream-IV`` header form of ``iv``: 32 lowercase hex digits."""
    return bytes(iv).hex()


def new_iv() -> bytes:
    """A fresh random IV from ``os.urandom`` (16 bytes)."""
    return os.urandom(IV_SIZE)


def check_offset(offset: int) -> int:
    """Check a stream position: an integer from 0 to ``aescore.MAX_STREAM_LENGTH - 1``.

    Raises:
        BadRequestError: ``offset`` is not an integer, negative, or not below 2**64.
    """
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise BadRequestError(f"offset must be an integer, got {type(offset).__name__}")
    if not 0 <= offset < MAX_STREAM_LENGTH:
        raise BadRequestError(f"offset must be between 0 and 2**64-1, got {offset}")
    return offset


def check_range(offset: int, length: int) -> None:
    """Refuse ``length`` bytes at ``offset`` when they run past the last keystream byte (2**64 - 1).

    Raises:
        BadRequestError: ``offset + length`` exceeds ``aescore.MAX_STREAM_LENGTH`` (the message names both).
    """
    if offset + length > MAX_STREAM_LENGTH:
        raise _past_end(offset, length)


def _past_end(offset: int, length: int) -> BadRequestError:
    return BadRequestError(
        f"offset + length must not exceed 2**64 bytes: offset {offset} + {length} bytes goes past "
        "the end of the keystream"
    )


class RawCipher:
    """AES-CTR over one stream position, advancing as data passes (encrypt and decrypt are the same).

    Output is independent of chunking: ``update(a) + update(b) == update(a + b)``.

    Args:
        expanded: the key expanded by ``backend``.
        backend: the aescore backend doing the work.
        iv: 16 bytes, the counter block of keystream byte 0 (from :func:`parse_iv` or :func:`new_iv`).
        offset: the stream byte position of the first byte passed to :meth:`update`.

    Raises:
        BadRequestError: ``offset`` is negative or not below 2**64.
        TypeError: ``expanded`` comes from another backend, or ``iv`` is not bytes-like.
        ValueError: ``iv`` is not 16 bytes.
    """

    __slots__ = ("_stream",)

    def __init__(
        self, expanded: aescore.ExpandedKey, backend: aescore.Backend, iv: bytes, offset: int = 0
    ) -> None:
        self._stream = CtrStream(backend, expanded, iv, counter_bits=128)
        self._stream.seek(check_offset(offset))

    @property
    def offset(self) -> int:
        """The stream byte position of the next byte to process."""
        return self._stream.offset

    def update(self, data: bytes | bytearray | memoryview) -> bytes:
        """Transform ``data`` and advance :attr:`offset` by its length.

        Raises:
            TypeError: ``data`` is not bytes-like.
            BadRequestError: the data would run past byte 2**64 of the keystream.
        """
        try:
            return self._stream.update(data)
        except CounterOverflowError as exc:
            raise _past_end(self.offset, len(data)) from exc

    def update_into(self, data: bytes | bytearray | memoryview, out: bytearray | memoryview) -> None:
        """Transform ``data`` into the first ``len(data)`` bytes of ``out`` (which may be ``data`` itself).

        Raises:
            TypeError: ``data`` is not bytes-like or ``out`` is not writable.
            ValueError: ``out`` is shorter than ``data``.
            BadRequestError: the data would run past byte 2**64 of the keystream.
        """
        try:
            self._stream.update_into(data, out)
        except CounterOverflowError as exc:
            raise _past_end(self.offset, len(data)) from exc

    def __repr__(self) -> str:
        return f"<RawCipher backend={self._stream.backend.name!r} offset={self.offset}>"


class AsyncRawCipher:
    """:class:`RawCipher` through a backend's ``ctr_xor_async`` (hwsim: a loop turn's jobs share a doorbell).

    Same arguments, same output, same range rule; :meth:`update` is awaited instead of called.

    Raises:
        BadRequestError: ``offset`` is negative or not below 2**64.
        TypeError: ``backend`` does not declare ``supports_async``.
    """

    __slots__ = ("_ctr_xor_async", "_expanded", "_iv", "_offset")

    def __init__(
        self, expanded: aescore.ExpandedKey, backend: aescore.Backend, iv: bytes, offset: int = 0
    ) -> None:
        if not backend.supports_async:
            raise TypeError(f"backend {backend.name!r} does not support ctr_xor_async; use RawCipher")
        self._ctr_xor_async: Callable[..., Awaitable[bytes]] = backend.ctr_xor_async
        self._expanded = expanded
        self._iv = iv
        self._offset = check_offset(offset)

    @property
    def offset(self) -> int:
        """The stream byte position of the next byte to process."""
        return self._offset

    async def update(self, data: bytes) -> bytes:
        """Transform ``data`` at the current position and advance.

        Raises:
            BadRequestError: the data would run past byte 2**64 of the keystream.
        """
        check_range(self._offset, len(data))
        out = await self._ctr_xor_async(self._expanded, self._iv, data, self._offset)
        self._offset += len(data)
        return out

    def __repr__(self) -> str:
        return f"<AsyncRawCipher offset={self._offset}>"

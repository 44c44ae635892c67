"""A seekable AES-CTR stream over any backend, with fixed-width counter overflow checks."""

from __future__ import annotations

from ._interface import Backend, BytesLike, ExpandedKey
from ._registry import get_backend
from ._validate import (
    BLOCK_SIZE,
    MAX_STREAM_LENGTH,
    as_readable,
    as_writable,
    check_counter,
    check_offset,
    not_a_backend,
)
from .errors import AesCoreTypeError, AesCoreValueError, CounterOverflowError

__all__ = ["COUNTER_BITS", "CtrStream"]

#: Allowed counter widths. 128: the whole block counts and wraps mod 2**128 (pyaes). 32/64: NIST SP 800-38A
#: B.2 nonce || counter; the high ``128 - w`` bits are a fixed nonce and the stream ends at 2**w blocks.
COUNTER_BITS = (32, 64, 128)


class CtrStream:
    """Encrypt or decrypt a stream with AES-CTR, in chunks of any size, with random access.

    Output is identical for any chunking: ``update(a) + update(b) == update(a + b)``.

    Counter block layout (16 bytes, big-endian): ``nonce (128 - counter_bits bits) | counter (counter_bits)``.
    Keystream block ``i`` is ``AES_K(initial_counter + i)``. With ``counter_bits`` 32 or 64, a call that would
    need a counter past ``2**counter_bits - 1`` raises :class:`~aescore.CounterOverflowError` before producing
    any output and leaves the position unchanged; the counter never silently wraps into the nonce.

    Args:
        backend: a :class:`~aescore.Backend` (or a backend name).
        key_or_expanded_key: 16/24/32 key bytes, or an expanded key from ``backend``.
        initial_counter: 16 bytes.
        counter_bits: 32, 64 or 128.

    Raises:
        TypeError: wrong argument types.
        ValueError: wrong key/counter sizes or an unsupported ``counter_bits``.
    """

    __slots__ = ("_backend", "_counter", "_expanded_key", "_limit", "_offset")

    def __init__(
        self,
        backend: Backend | str,
        key_or_expanded_key: BytesLike | ExpandedKey,
        initial_counter: BytesLike,
        counter_bits: int = 128,
    ) -> None:
        if isinstance(backend, str):
            backend = get_backend(backend)
        if not isinstance(backend, Backend):
            raise AesCoreTypeError(not_a_backend(backend))
        if isinstance(counter_bits, bool) or not isinstance(counter_bits, int):
            raise AesCoreTypeError(f"counter_bits must be an int, got {type(counter_bits).__name__}")
        if counter_bits not in COUNTER_BITS:
            raise AesCoreValueError(f"counter_bits must be 32, 64 or 128, got {counter_bits}")
        self._backend = backend
        if isinstance(key_or_expanded_key, ExpandedKey):
            if key_or_expanded_key.backend_name != backend.name:
                raise AesCoreTypeError(
                    f"expanded key comes from backend {key_or_expanded_key.backend_name!r}, "
                    f"not {backend.name!r}"
                )
            self._expanded_key = key_or_expanded_key
        else:
            self._expanded_key = backend.expand_key(key_or_expanded_key)
        self._counter = check_counter(initial_counter)
        if counter_bits == 128:
            self._limit = MAX_STREAM_LENGTH
        else:
            low = int.from_bytes(self._counter, "big") & ((1 << counter_bits) - 1)
            blocks_left = (1 << counter_bits) - low
            self._limit = min(blocks_left * BLOCK_SIZE, MAX_STREAM_LENGTH)
        self._offset = 0

    @property
    def offset(self) -> int:
        """The keystream byte position of the next byte to process."""
        return self._offset

    @property
    def backend(self) -> Backend:
        return self._backend

    def seek(self, offset: int) -> None:
        """Move to keystream byte ``offset`` (CTR is seekable: no earlier bytes are needed).

        Raises:
            TypeError: ``offset`` is not an int.
            ValueError: ``offset`` is negative or too large.
        """
        self._offset = check_offset(offset)

    def _reserve(self, length: int) -> int:
        start = self._offset
        if start + length > self._limit:
            raise CounterOverflowError(
                f"counter would overflow: processing {length} bytes at offset {start} needs keystream up to "
                f"byte {start + length}, but a {self._limit_bits()} counter starting here allows "
                f"{self._limit} bytes"
            )
        return start

    def _limit_bits(self) -> str:
        return "128-bit" if self._limit == MAX_STREAM_LENGTH else "fixed-width"

    def update(self, data: BytesLike) -> bytes:
        """Process ``data`` and return the result.

        Raises:
            TypeError: ``data`` is not bytes-like.
            CounterOverflowError: a 32/64-bit counter would run out.
        """
        length = len(as_readable("data", data))
        start = self._reserve(length)
        result = self._backend.ctr_xor(self._expanded_key, self._counter, data, start)
        assert result is not None
        self._offset = start + length
        return result

    def update_into(self, data: BytesLike, out: bytearray | memoryview) -> None:
        """Process ``data`` into the first ``len(data)`` bytes of ``out`` (which may be ``data``).

        Raises:
            TypeError: ``data`` is not bytes-like or ``out`` is not writable.
            ValueError: ``out`` is shorter than ``data``.
            CounterOverflowError: a 32/64-bit counter would run out.
        """
        length = len(as_readable("data", data))
        as_writable("out", out, length)
        start = self._reserve(length)
        self._backend.ctr_xor(self._expanded_key, self._counter, data, start, out)
        self._offset = start + length

    def __repr__(self) -> str:
        return f"<CtrStream backend={self._backend.name!r} offset={self._offset}>"

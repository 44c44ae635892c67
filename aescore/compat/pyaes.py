"""pyaes-compatible AES-CTR on aescore's fastest backend: ``from aescore.compat import pyaes``.

Code written for pyaes 1.6.1's CTR mode (for example pyperformance's ``crypto_pyaes`` benchmark) runs
unchanged and produces the same bytes:

>>> from aescore.compat import pyaes
>>> ciphertext = pyaes.AESModeOfOperationCTR(b"k" * 16).encrypt(b"attack at dawn")
>>> pyaes.AESModeOfOperationCTR(b"k" * 16).decrypt(ciphertext)
b'attack at dawn'

Semantics kept from pyaes 1.6.1:

* ``Counter(initial_value=1)`` is a 128-bit big-endian counter that wraps to 0; ``AESModeOfOperationCTR(key)``
  without a counter starts at 1.
* The counter object is stateful and shared: each keystream block generated increments it, so a second
  ``AESModeOfOperationCTR`` given the same ``Counter`` continues where the first stopped. Subclasses that
  override ``increment`` (or any object with ``value`` and ``increment()``) are honoured, block by block.
* The keystream continues across ``encrypt``/``decrypt`` calls, including the unused tail of a partial block;
  ``decrypt`` is ``encrypt``.
* ``str`` input is taken as Latin-1 code points (pyaes maps characters with ``ord``).

Differences: ``Counter.value`` returns a new list (mutating it does not change the counter), bad keys raise
:class:`aescore.AesCoreValueError`/:class:`aescore.AesCoreTypeError` (subclasses of ``ValueError``/
``TypeError``, as pyaes raises), and bytes-like inputs other than ``bytes`` are accepted. Only the CTR mode
is provided. The backend is ``aescore.get_backend()`` (``$KEYSTREAM_BACKEND``, else ``aesni`` when
available, else ``python``), looked up once, on first use; pass ``backend=`` to choose another.

.. warning:: Without AES-NI (or with ``KEYSTREAM_BACKEND=python``) this falls back to the ``python`` backend,
   which is NOT constant-time: its table lookups leak key-dependent cache timing to code sharing the host.
   Fine for benchmarks and tests; for real keys require ``backend="aesni"`` (it raises when unavailable)
   instead of relying on the fallback.

``AESModeOfOperationCTR`` is a small C class (``aescore.compat._pyaes_fast``) when the extension is built: its
constructor and a fresh object's first call (all of crypto_pyaes) run without Python frames; every other case
runs the same Python code as :class:`PythonAESModeOfOperationCTR`, the pure-Python class, which is used when
the extension is missing or ``$KEYSTREAM_PYAES_COMPAT`` is ``python``.
"""

from __future__ import annotations

import os
from typing import Protocol

from .._interface import Backend, BytesLike, ExpandedKey
from .._registry import get_backend

__all__ = ["AESModeOfOperationCTR", "Counter", "PythonAESModeOfOperationCTR"]

_MASK128 = (1 << 128) - 1
_COUNTER_ONE = (1).to_bytes(16, "big")
_default_backend: Backend | None = None


def _backend(name: str | Backend | None) -> Backend:
    global _default_backend
    if name is None:
        backend = _default_backend
        if backend is None:
            backend = _default_backend = get_backend()
        return backend
    if isinstance(name, Backend):
        return name
    return get_backend(name)


class _CounterLike(Protocol):
    @property
    def value(self) -> list[int] | bytes: ...

    def increment(self) -> None: ...


class Counter:
    """A 128-bit counter for CTR mode, as in pyaes: big-endian, incremented per block, wraps to 0.

    Args:
        initial_value: the first counter block as an integer (reduced mod 2**128, so -1 is all ones).

    Raises:
        TypeError: ``initial_value`` is not an int.
    """

    __slots__ = ("_value",)

    def __init__(self, initial_value: int = 1) -> None:
        if type(initial_value) is not int and (
            isinstance(initial_value, bool) or not isinstance(initial_value, int)
        ):
            raise TypeError(f"initial_value must be an int, got {type(initial_value).__name__}")
        self._value = initial_value & _MASK128

    @property
    def value(self) -> list[int]:
        """The current counter block as a list of 16 byte values (a copy)."""
        return list(self._value.to_bytes(16, "big"))

    def increment(self) -> None:
        """Increment the counter (overflow rolls back to 0)."""
        self._value = (self._value + 1) & _MASK128

    def __repr__(self) -> str:
        return f"Counter(initial_value={self._value:#x})"


class PythonAESModeOfOperationCTR:
    """AES in counter mode with pyaes 1.6.1's interface; encryption and decryption are the same operation.

    The pure-Python implementation; :data:`AESModeOfOperationCTR` is the same class with its hot path in C
    when the ``aescore.compat._pyaes_fast`` extension is built (and ``$KEYSTREAM_PYAES_COMPAT`` is not
    ``python``).
    Never encrypt two different messages with the same key and overlapping counter values.

    Args:
        key: 16, 24 or 32 bytes.
        counter: a :class:`Counter` (or any object with ``value`` and ``increment()``); default
            ``Counter(1)``.
        backend: an aescore backend or its name; default ``aescore.get_backend()``.

    Raises:
        TypeError: ``key`` is not bytes-like.
        ValueError: ``key`` is not 16, 24 or 32 bytes long.
        aescore.BackendUnavailableError: the requested backend cannot run here.
    """

    name = "Counter (CTR)"
    __slots__ = ("_backend", "_consumed", "_counter", "_expanded_key", "_tail_block", "_tail_left")

    def __init__(
        self,
        key: BytesLike,
        counter: Counter | _CounterLike | None = None,
        *,
        backend: str | Backend | None = None,
    ) -> None:
        backend = (_default_backend or _backend(None)) if backend is None else _backend(backend)
        self._backend = backend
        self._expanded_key: ExpandedKey = backend.expand_key(key)
        #: The caller's counter object; None while this object runs on its private ``Counter(1)``, whose state
        #: is then only ``_consumed``, the bytes processed so far (cheap to keep: the crypto_pyaes hot path).
        #: A caller's counter sets ``_consumed`` to -1 so that such objects never take the hot path.
        self._counter: Counter | _CounterLike | None = counter
        self._consumed = 0 if counter is None else -1
        #: Bytes of the last keystream block generated still unused, and that block's counter value.
        self._tail_left = 0
        self._tail_block = 0

    def __repr__(self) -> str:
        bits = self._expanded_key.key_size * 8
        return f"<AESModeOfOperationCTR backend={self._backend.name!r} key_size={bits}>"

    def encrypt(self, plaintext: BytesLike | str) -> bytes:
        """Encrypt (or decrypt) the next ``len(plaintext)`` bytes of the stream.

        Raises:
            TypeError: ``plaintext`` is not bytes-like or str.
            ValueError: a ``str`` holds a character above U+00FF.
        """
        if self._consumed or isinstance(plaintext, str):  # not fresh, a caller's counter, or a str
            return _encrypt_general(self, plaintext)
        # Hot path (crypto_pyaes): a fresh object on its private counter, which starts at 1.
        result = self._backend.ctr_xor(self._expanded_key, _COUNTER_ONE, plaintext)
        assert result is not None
        self._consumed = len(result)
        return result

    decrypt = encrypt


class _CtrState(Protocol):
    """What the shared general path reads and writes on either implementation."""

    _backend: Backend
    _expanded_key: ExpandedKey
    _counter: Counter | _CounterLike | None
    _consumed: int
    _tail_left: int
    _tail_block: int

    def encrypt(self, plaintext: BytesLike | str) -> bytes: ...


def _encrypt_general(ctr: _CtrState, plaintext: BytesLike | str) -> bytes:
    """Everything off the hot path: str input, a caller's counter, keystream left from the last call."""
    if isinstance(plaintext, str):
        plaintext = plaintext.encode("latin-1")
    counter = ctr._counter
    if counter is None:
        consumed = ctr._consumed
        if not consumed:  # still fresh (the input was a str): the hot path can take it now
            return ctr.encrypt(plaintext)
        # From now on this object keeps its position in an explicit Counter, as pyaes does.
        following = 1 + ((consumed + 15) >> 4)
        ctr._tail_left = -consumed & 15
        ctr._tail_block = (following - 1) & _MASK128
        counter = ctr._counter = Counter(following)
        ctr._consumed = -1
    if type(counter) is not Counter:
        return _encrypt_generic(ctr, counter, plaintext)
    left = ctr._tail_left
    length = memoryview(plaintext).nbytes
    if left:
        start = ctr._tail_block
        if length <= left:
            result = _xor(ctr, start, plaintext, 16 - left)
            ctr._tail_left = left - length
            return result
        if counter._value != (start + 1) & _MASK128:  # the shared counter moved: not contiguous
            head = _xor(ctr, start, plaintext[:left], 16 - left)
            ctr._tail_left = 0
            return head + _encrypt_general(ctr, plaintext[left:])
        offset = 16 - left
    else:
        start = counter._value
        offset = 0
    result = _xor(ctr, start, plaintext, offset)
    position = offset + length
    blocks = (position + 15) >> 4
    ctr._tail_left = -position & 15
    ctr._tail_block = (start + blocks - 1) & _MASK128
    counter._value = (start + blocks) & _MASK128
    return result


def _xor(ctr: _CtrState, block: int, data: BytesLike, offset: int) -> bytes:
    result = ctr._backend.ctr_xor(ctr._expanded_key, block.to_bytes(16, "big"), data, offset)
    assert result is not None
    return result


def _encrypt_generic(ctr: _CtrState, counter: _CounterLike, data: BytesLike) -> bytes:
    """Any counter object: read ``value`` and call ``increment()`` once per block, as pyaes does."""
    view = memoryview(data).cast("B")
    out = bytearray(len(view))
    done = 0
    left = ctr._tail_left
    if left and len(view):
        take = min(left, len(view))
        out[:take] = _xor(ctr, ctr._tail_block, view[:take], 16 - left)
        ctr._tail_left = left - take
        done = take
    while done < len(view):
        block = int.from_bytes(bytes(counter.value), "big")
        counter.increment()
        take = min(16, len(view) - done)
        out[done : done + take] = _xor(ctr, block, view[done : done + take], 0)
        ctr._tail_block = block
        ctr._tail_left = 16 - take
        done += take
    return bytes(out)


def _fast_class() -> type[PythonAESModeOfOperationCTR] | None:
    """The C class from ``aescore.compat._pyaes_fast``, or None if it is not built or
    ``$KEYSTREAM_PYAES_COMPAT`` is ``python``."""
    if os.environ.get("KEYSTREAM_PYAES_COMPAT", "").strip().lower() == "python":
        return None
    try:
        from . import _pyaes_fast
    except ImportError:
        return None
    _pyaes_fast.configure(_backend, _encrypt_general)
    return _pyaes_fast.AESModeOfOperationCTR  # type: ignore[return-value]  # same interface, C class


#: The class to use: the C hot path when available, else :class:`PythonAESModeOfOperationCTR`.
AESModeOfOperationCTR = _fast_class() or PythonAESModeOfOperationCTR

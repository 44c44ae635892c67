"""Argument checks shared by the pure-Python code paths, and the one home of every validation message.

The Cython backend performs the same checks in C-speed code; where one fails it builds its message with the
functions below (error paths only, so the Python call costs nothing on the fast path). Each wording exists
once, here, so the backends cannot drift apart; the shared test suite holds every backend to them.
"""

from __future__ import annotations

from .errors import AesCoreTypeError, AesCoreValueError

BLOCK_SIZE = 16
KEY_SIZES = (16, 24, 32)
#: Bytes of keystream a 64-bit byte offset addresses: ``offset + length`` never exceeds this (the one home of
#: the limit; exported as :data:`aescore.MAX_STREAM_LENGTH`).
MAX_STREAM_LENGTH = 2**64

BytesLike = bytes | bytearray | memoryview


def _type_name(value: object) -> str:
    return type(value).__name__


def not_bytes_like(name: str, value: object) -> str:
    """``name`` got ``value``, which is not bytes, bytearray or memoryview."""
    return f"{name} must be bytes-like (bytes, bytearray or memoryview), got {_type_name(value)}"


def not_bytes_like_or_none(name: str, value: object) -> str:
    """``name`` (which may be ``None``) got ``value``, which is not bytes-like."""
    return f"{name} must be bytes-like (bytes, bytearray or memoryview) or None, got {_type_name(value)}"


def not_contiguous(name: str) -> str:
    """``name`` is a strided buffer; the cores read and write flat memory."""
    return f"{name} must be a C-contiguous buffer"


def not_writable_type(name: str, value: object) -> str:
    """``name`` must receive output but ``value`` is not a writable buffer type."""
    return (
        f"{name} must be a writable bytes-like object (bytearray or writable memoryview), "
        f"got {_type_name(value)}"
    )


def read_only(name: str) -> str:
    """``name`` is a read-only view of a writable type."""
    return f"{name} must be writable, got a read-only buffer"


def wrong_key_length(length: int) -> str:
    """An AES key of ``length`` bytes (allowed: 16, 24, 32)."""
    return f"key must be 16, 24 or 32 bytes long, got {length} bytes"


def wrong_length(name: str, expected: int, length: int) -> str:
    """A fixed-size argument (counter block, nonce, hash key) of the wrong size."""
    return f"{name} must be {expected} bytes long, got {length} bytes"


def offset_not_int(value: object) -> str:
    """The keystream offset is not an int."""
    return f"offset must be an int, got {_type_name(value)}"


def offset_out_of_range(offset: int) -> str:
    """The keystream offset is negative or past the 64-bit byte range."""
    return f"offset must be between 0 and 2**64-1, got {offset}"


#: ``offset + len(data)`` would run past the keystream a 64-bit byte offset addresses.
PAST_STREAM_END = "offset + len(data) must not exceed 2**64 bytes of keystream"


def out_too_small(name: str, needed: int, what: str, length: int) -> str:
    """Output buffer ``name`` holds ``length`` bytes, fewer than ``needed`` (``what`` says why that many)."""
    return f"{name} must hold at least {needed} bytes ({what}), got {length}"


def too_long_for_gcm(name: str, limit: str, length: int) -> str:
    """``name`` exceeds GCM's 32-bit block counter (``limit`` is the bound as written, e.g. 2**36 - 32)."""
    return f"{name} must be at most {limit} bytes (GCM's 32-bit block counter), got {length} bytes"


def foreign_key(name: str, backend: str, value: object) -> str:
    """An expanded key from another backend was passed to ``backend``."""
    return f"{name} must come from the {backend!r} backend's expand_key, got {_type_name(value)}"


def not_a_backend(value: object) -> str:
    """Something other than a :class:`aescore.Backend` or a backend name was given as a backend."""
    return f"backend must be an aescore Backend or name, got {_type_name(value)}"


def as_readable(name: str, value: object) -> memoryview:
    """Return a flat byte view of ``value`` or raise ``TypeError`` naming ``name``."""
    if isinstance(value, str) or not isinstance(value, bytes | bytearray | memoryview):
        raise AesCoreTypeError(not_bytes_like(name, value))
    view = memoryview(value)
    if not view.c_contiguous:
        raise AesCoreValueError(not_contiguous(name))
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def key_view(key: object) -> memoryview:
    """Return a flat byte view of the AES key ``key``, checked but not copied, or raise ``TypeError`` or
    ``ValueError``: a key held in memory its owner zeroes (a locked secret buffer) is read in place, never
    copied into a ``bytes`` object that would outlive it."""
    view = as_readable("key", key)
    if len(view) not in KEY_SIZES:
        raise AesCoreValueError(wrong_key_length(len(view)))
    return view


def check_key(key: object) -> bytes:
    """Return a checked copy of the AES key ``key`` (for holders that must keep it: a simulated key slot)."""
    return bytes(key_view(key))


def check_counter(initial_counter: object) -> bytes:
    view = as_readable("initial_counter", initial_counter)
    if len(view) != BLOCK_SIZE:
        raise AesCoreValueError(wrong_length("initial_counter", BLOCK_SIZE, len(view)))
    return bytes(view)


def check_offset(offset: object) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise AesCoreTypeError(offset_not_int(offset))
    if offset < 0 or offset >= MAX_STREAM_LENGTH:
        raise AesCoreValueError(offset_out_of_range(offset))
    return offset


def check_length(offset: int, length: int) -> None:
    if offset + length > MAX_STREAM_LENGTH:
        raise AesCoreValueError(PAST_STREAM_END)


def as_writable(name: str, value: object, needed: int) -> memoryview:
    """Return a writable flat byte view of ``value`` holding at least ``needed`` bytes."""
    if not isinstance(value, bytearray | memoryview):
        raise AesCoreTypeError(not_writable_type(name, value))
    view = memoryview(value)
    if view.readonly:
        raise AesCoreTypeError(read_only(name))
    if not view.c_contiguous:
        raise AesCoreValueError(not_contiguous(name))
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if len(view) < needed:
        raise AesCoreValueError(out_too_small(name, needed, "len(data)", len(view)))
    return view

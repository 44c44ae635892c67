"""Argument checks shared by the pure-Python code paths.

The Cython backend performs the same checks in C-speed code and raises the same messages; the shared test
suite holds both to them.
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


def as_readable(name: str, value: object) -> memoryview:
    """Return a flat byte view of ``value`` or raise ``TypeError`` naming ``name``."""
    if isinstance(value, str) or not isinstance(value, bytes | bytearray | memoryview):
        raise AesCoreTypeError(
            f"{name} must be bytes-like (bytes, bytearray or memoryview), got {_type_name(value)}"
        )
    view = memoryview(value)
    if not view.c_contiguous:
        raise AesCoreValueError(f"{name} must be a C-contiguous buffer")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view


def check_key(key: object) -> bytes:
    view = as_readable("key", key)
    if len(view) not in KEY_SIZES:
        raise AesCoreValueError(f"key must be 16, 24 or 32 bytes long, got {len(view)} bytes")
    return bytes(view)


def check_counter(initial_counter: object) -> bytes:
    view = as_readable("initial_counter", initial_counter)
    if len(view) != BLOCK_SIZE:
        raise AesCoreValueError(f"initial_counter must be 16 bytes long, got {len(view)} bytes")
    return bytes(view)


def check_offset(offset: object) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise AesCoreTypeError(f"offset must be an int, got {_type_name(offset)}")
    if offset < 0 or offset >= MAX_STREAM_LENGTH:
        raise AesCoreValueError(f"offset must be between 0 and 2**64-1, got {offset}")
    return offset


def check_length(offset: int, length: int) -> None:
    if offset + length > MAX_STREAM_LENGTH:
        raise AesCoreValueError("offset + len(data) must not exceed 2**64 bytes of keystream")


def as_writable(name: str, value: object, needed: int) -> memoryview:
    """Return a writable flat byte view of ``value`` holding at least ``needed`` bytes."""
    if not isinstance(value, bytearray | memoryview):
        raise AesCoreTypeError(
            f"{name} must be a writable bytes-like object (bytearray or writable memoryview), "
            f"got {_type_name(value)}"
        )
    view = memoryview(value)
    if view.readonly:
        raise AesCoreTypeError(f"{name} must be writable, got a read-only buffer")
    if not view.c_contiguous:
        raise AesCoreValueError(f"{name} must be a C-contiguous buffer")
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    if len(view) < needed:
        raise AesCoreValueError(f"{name} must hold at least {needed} bytes (len(data)), got {len(view)}")
    return view

"""Standard base64 (RFC 4648, ``+/``, padded) of request and response payloads: the one codec the JSON routes
use, fast where the strict standard-library reader was slow.

:func:`decode` accepts exactly what ``binascii.a2b_base64(text, strict_mode=True)`` accepts, returns the same
bytes, and raises the same exception with the same message for everything else: that strict reader stays the
judge. The speed comes from pybase64 (libbase64's SIMD decoder and encoder in C; AVX-512 VBMI, AVX2, SSE or
NEON picked at run time): for 1 KiB, about 0.5 µs to decode with ``validate=True`` against 3.2 µs for the
strict reader, and 0.24 µs to encode against 1.4 µs for ``base64.b64encode(...).decode()`` (Zen 4,
2026-11-28; docs/benchmarks.md).

How the two readers differ, checked over every string of a few small alphabets up to 5 to 8 characters and
over mutated encodings around 1 KiB (``tests/app/core/test_base64_codec.py`` keeps that comparison):
pybase64 with ``validate=True`` accepts no string the strict reader refuses and decodes every string both
accept to the same bytes (non-canonical trailing bits included: both ignore them); it refuses a few the
strict reader accepts, padding past a whole group (``"QUJD="``, ``"QUJD==="``). So a text pybase64 refuses
is read again by the strict reader, whose answer (its bytes, or its error) is the answer. Malformed input
pays both readers; well-formed input pays pybase64 alone.

Without pybase64's C extension (a platform with no wheel and no compiler), pybase64 runs its pure-Python
fallback, which validates with the standard library and is no faster than the strict reader; the answers
stay the same (the comparison test runs over that fallback too), only the speed is lost.
"""

from __future__ import annotations

import binascii

import pybase64

__all__ = ["decode", "encode"]

#: pybase64's reader and writer (the C extension's when it is installed, else its pure-Python fallback).
_fast_decode = pybase64.b64decode
_fast_encode = pybase64.b64encode_as_string


def decode(text: str) -> bytes:
    """The bytes of standard, padded base64 ``text``, read as ``binascii.a2b_base64(text, strict_mode=True)``
    reads it: no whitespace, no URL-safe characters, no data after the padding.

    Raises:
        binascii.Error: malformed base64 (the strict reader's message).
        ValueError: ``text`` holds a character outside ASCII (the strict reader's message).
    """
    try:
        return _fast_decode(text, validate=True)
    except (binascii.Error, ValueError):
        # Either malformed (the strict reader refuses it too, with its own message) or one of the few texts
        # only the strict reader accepts (padding past a whole group): its answer is the answer.
        return binascii.a2b_base64(text, strict_mode=True)


def encode(data: bytes | bytearray | memoryview) -> str:
    """Standard, padded base64 of ``data`` as text, without a newline: ``base64.b64encode(data).decode()``."""
    return _fast_encode(data)

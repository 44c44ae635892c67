"""HKDF-SHA256 (RFC 5869) written into a caller's buffer, for keys that must live in locked memory.

:func:`hkdf_sha256_into` writes ``len(out)`` bytes into ``out`` (a writable buffer the caller locks and
zeroes) and returns nothing: no ``bytes`` object ever holds the output. The work is ``sealing/hkdf.c`` over
the sealed core's SHA-256 (SHA-NI or scalar), which zeroes its intermediate values (the pseudorandom key,
the HMAC states, the last block) before returning. A build without the native extension falls back to the
standard library's HMAC, whose blocks pass through ``bytes``; :func:`native` says which runs. The extension
is imported at the first call, not with aescore.
"""

from __future__ import annotations

import hashlib
import hmac
from functools import cache
from types import ModuleType

from ._validate import BytesLike, as_readable, as_writable
from .errors import AesCoreValueError

__all__ = ["HKDF_SHA256_MAX_LENGTH", "hkdf_sha256_into", "native"]

#: The longest output: 255 blocks of SHA-256's 32 bytes (RFC 5869 2.3).
HKDF_SHA256_MAX_LENGTH = 255 * 32


@cache
def _extension() -> ModuleType | None:
    try:
        from .sealing import _sealed
    except ImportError:  # built without the extension
        return None
    return _sealed


def native() -> bool:
    """True when the C core runs (the extension is built)."""
    return _extension() is not None


def hkdf_sha256_into(ikm: BytesLike, salt: BytesLike, info: BytesLike, out: bytearray | memoryview) -> None:
    """Write HKDF-SHA256 of ``ikm`` with ``salt`` and ``info`` into all of ``out`` (``len(out)`` bytes).

    An empty ``salt`` is RFC 5869's default (32 zero bytes). Every argument is read or written in place.

    Raises:
        TypeError: an argument is not bytes-like, or ``out`` is not a writable buffer
            (:class:`aescore.AesCoreTypeError`).
        ValueError: ``out`` is empty or longer than :data:`HKDF_SHA256_MAX_LENGTH`, or an argument is not
            contiguous (:class:`aescore.AesCoreValueError`).
    """
    ikm_view, salt_view, info_view = (
        as_readable("ikm", ikm),
        as_readable("salt", salt),
        as_readable("info", info),
    )
    out_view = as_writable("out", out, 0)
    if not 0 < len(out_view) <= HKDF_SHA256_MAX_LENGTH:
        raise AesCoreValueError(
            f"out must hold 1 to {HKDF_SHA256_MAX_LENGTH} bytes (HKDF-SHA256's output), got {len(out_view)}"
        )
    extension = _extension()
    if extension is not None:
        extension.hkdf_sha256_into(ikm_view, salt_view, info_view, out_view)
    else:
        _python_into(ikm_view, salt_view, info_view, out_view)


def _python_into(ikm: memoryview, salt: memoryview, info: memoryview, out: memoryview) -> None:
    """The fallback: RFC 5869 over :func:`hmac.digest` (OpenSSL cleanses its contexts; the blocks are
    ``bytes``)."""
    prk = hmac.digest(salt if len(salt) else bytes(hashlib.sha256().digest_size), ikm, "sha256")
    block = b""
    written = 0
    counter = 1
    while written < len(out):
        block = hmac.digest(prk, block + bytes(info) + bytes([counter]), "sha256")
        take = min(len(block), len(out) - written)
        out[written : written + take] = block[:take]
        written += take
        counter += 1

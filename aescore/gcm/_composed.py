"""AES-GCM (NIST SP 800-38D) limits, argument checks, and the composition every backend gets by default.

With a 12-byte nonce ``N`` the pre-counter block is ``J0 = N || 0x00000001``; the tag mask is ``AES_K(J0)``
and data block ``i`` (from 0) is XORed with ``AES_K(N || i + 2)``, the last four bytes a big-endian 32-bit
counter (``inc32``). Counter values run from 2 to at most ``2**32 - 1``, so the data is at most
``2**32 - 2`` blocks: :data:`MAX_DATA_BYTES`. Within that limit ``inc32`` never wraps, so the 128-bit
counter arithmetic of :meth:`aescore.Backend.ctr_xor` gives the same blocks.

The tag is ``GHASH_H(A, C) xor AES_K(J0)`` with ``H = AES_K(0**128)`` (truncated tags are not offered).

The Cython backend repeats these checks in its own code with the same messages; the shared test suite holds
every backend to them.
"""

from __future__ import annotations

import hmac
from collections.abc import Callable
from typing import Protocol

from .._keys import ExpandedKey, GcmKey
from .._validate import (
    BytesLike,
    as_readable,
    as_writable,
    key_view,
    not_bytes_like_or_none,
    out_too_small,
    too_long_for_gcm,
    wrong_length,
)
from ..errors import AesCoreTypeError, AesCoreValueError, CounterOverflowError, InvalidTag

__all__ = [
    "MAX_DATA_BYTES",
    "NONCE_SIZE",
    "TAG_SIZE",
    "ComposedGcmKey",
    "CtrCore",
    "Ghash",
    "check_associated_data",
    "check_data_length",
    "check_nonce",
    "check_out",
]

NONCE_SIZE = 12
TAG_SIZE = 16
#: Longest plaintext (and ciphertext without its tag): 2**32 - 2 blocks of GCM's 32-bit block counter.
MAX_DATA_BYTES = 2**36 - 32
_J0_SUFFIX = b"\x00\x00\x00\x01"
_ZERO_BLOCK = bytes(16)


class CtrCore(Protocol):
    """What the composition needs of a backend: its name, key expansion and AES-CTR.

    A protocol rather than :class:`aescore.Backend` itself, so this module does not import the interface
    that offers it as the default ``gcm_key`` (the interface imports this module).
    """

    @property
    def name(self) -> str:
        """The backend's name (``GcmKey.backend_name``)."""
        ...

    def expand_key(self, key: BytesLike) -> ExpandedKey:
        """Expand an AES key."""
        ...

    def ctr_xor(
        self,
        expanded_key: ExpandedKey,
        initial_counter: BytesLike,
        data: BytesLike,
        offset: int = 0,
        out: bytearray | memoryview | None = None,
    ) -> bytes | None:
        """AES-CTR from ``initial_counter``; see :meth:`aescore.Backend.ctr_xor`."""
        ...


class Ghash(Protocol):
    """A GHASH implementation for one hash key."""

    def digest(self, associated_data: memoryview, ciphertext: memoryview) -> bytes:
        """GHASH over the padded associated data, ciphertext and lengths block (16 bytes)."""
        ...


def check_nonce(nonce: object) -> bytes:
    """Return the nonce as bytes, or raise ``TypeError``/``ValueError`` naming ``nonce``."""
    view = as_readable("nonce", nonce)
    if len(view) != NONCE_SIZE:
        raise AesCoreValueError(wrong_length("nonce", NONCE_SIZE, len(view)))
    return bytes(view)


def check_associated_data(associated_data: object) -> memoryview:
    """Return a byte view of ``associated_data`` (empty for ``None``) or raise ``TypeError``."""
    if associated_data is None:
        return memoryview(b"")
    try:
        return as_readable("associated_data", associated_data)
    except AesCoreTypeError:
        raise AesCoreTypeError(not_bytes_like_or_none("associated_data", associated_data)) from None


def check_data_length(name: str, length: int, tag_bytes: int = 0) -> None:
    """Raise :class:`~aescore.CounterOverflowError` if ``length - tag_bytes`` exceeds GCM's limit."""
    if length - tag_bytes > MAX_DATA_BYTES:
        limit = "2**36 - 32" if tag_bytes == 0 else "2**36 - 16"
        raise CounterOverflowError(too_long_for_gcm(name, limit, length))


def check_out(out: object, needed: int, what: str) -> memoryview:
    """Return a writable view of ``out`` holding at least ``needed`` bytes (``what`` explains the size)."""
    view = as_writable("out", out, 0)
    if len(view) < needed:
        raise AesCoreValueError(out_too_small("out", needed, what, len(view)))
    return view


def _xor16(left: bytes, right: bytes) -> bytes:
    return (int.from_bytes(left, "big") ^ int.from_bytes(right, "big")).to_bytes(16, "big")


class ComposedGcmKey(GcmKey):
    """AES-GCM from a backend's ``ctr_xor`` and a separate GHASH; thread-safe.

    Each message takes one ``ctr_xor`` call over ``16 zero bytes || data`` from counter ``J0``, which yields
    the tag mask ``AES_K(J0)`` and the data's keystream together. Decryption hashes the ciphertext and checks
    the tag before anything is written to the caller's buffer; the plaintext of a failed message only ever
    exists in a private buffer that is dropped.

    Args:
        backend: the backend computing AES-CTR.
        key: 16, 24 or 32 bytes.
        ghash: builds the GHASH for a hash key ``H``.

    Raises:
        TypeError: ``key`` is not bytes-like.
        ValueError: ``key`` has another length.
    """

    __slots__ = ("_backend", "_expanded_key", "_ghash", "_key_size")

    def __init__(self, backend: CtrCore, key: BytesLike, ghash: Callable[[bytes], Ghash]) -> None:
        material = key_view(key)
        self._backend = backend
        self._key_size = len(material)
        self._expanded_key = backend.expand_key(material)
        hash_key = backend.ctr_xor(self._expanded_key, _ZERO_BLOCK, _ZERO_BLOCK)
        assert hash_key is not None
        self._ghash = ghash(hash_key)

    @property
    def backend_name(self) -> str:
        return self._backend.name

    @property
    def key_size(self) -> int:
        return self._key_size

    def _stream(self, nonce: bytes, data: memoryview) -> bytes:
        result = self._backend.ctr_xor(self._expanded_key, nonce + _J0_SUFFIX, _ZERO_BLOCK + data)
        assert result is not None
        return result

    def _seal_checked(
        self, nonce: object, data: object, associated_data: object
    ) -> tuple[bytes, memoryview, memoryview]:
        checked_nonce = check_nonce(nonce)
        view = as_readable("data", data)
        associated = check_associated_data(associated_data)
        return checked_nonce, view, associated

    def _seal(self, checked_nonce: bytes, view: memoryview, associated: memoryview) -> tuple[bytes, bytes]:
        check_data_length("data", len(view))
        stream = self._stream(checked_nonce, view)
        ciphertext = stream[16:]
        return ciphertext, _xor16(self._ghash.digest(associated, memoryview(ciphertext)), stream[:16])

    def _open(self, nonce: bytes, ciphertext_and_tag: memoryview, associated: memoryview) -> bytes | None:
        if len(ciphertext_and_tag) < TAG_SIZE:
            return None
        ciphertext, tag = ciphertext_and_tag[:-TAG_SIZE], ciphertext_and_tag[-TAG_SIZE:]
        digest = self._ghash.digest(associated, ciphertext)
        stream = self._stream(nonce, ciphertext)
        if not hmac.compare_digest(_xor16(digest, stream[:16]), tag):
            return None
        return stream[16:]

    def encrypt(self, nonce: BytesLike, data: BytesLike, associated_data: BytesLike | None) -> bytes:
        ciphertext, tag = self._seal(*self._seal_checked(nonce, data, associated_data))
        return ciphertext + tag

    def encrypt_into(
        self,
        nonce: BytesLike,
        data: BytesLike,
        associated_data: BytesLike | None,
        out: bytearray | memoryview,
    ) -> int:
        checked_nonce, view, associated = self._seal_checked(nonce, data, associated_data)
        as_writable("out", out, 0)
        check_data_length("data", len(view))
        target = check_out(out, len(view) + TAG_SIZE, "len(data) + 16")
        ciphertext, tag = self._seal(checked_nonce, view, associated)
        target[: len(ciphertext)] = ciphertext
        target[len(ciphertext) : len(ciphertext) + TAG_SIZE] = tag
        return len(ciphertext) + TAG_SIZE

    def _decrypt_checked(
        self, nonce: object, ciphertext_and_tag: object, associated_data: object
    ) -> tuple[bytes, memoryview, memoryview]:
        checked_nonce = check_nonce(nonce)
        view = as_readable("ciphertext_and_tag", ciphertext_and_tag)
        associated = check_associated_data(associated_data)
        check_data_length("ciphertext_and_tag", len(view), TAG_SIZE)
        return checked_nonce, view, associated

    def decrypt(
        self, nonce: BytesLike, ciphertext_and_tag: BytesLike, associated_data: BytesLike | None
    ) -> bytes:
        plaintext = self._open(*self._decrypt_checked(nonce, ciphertext_and_tag, associated_data))
        if plaintext is None:
            raise InvalidTag("authentication failed: the tag does not match")
        return plaintext

    def decrypt_into(
        self,
        nonce: BytesLike,
        ciphertext_and_tag: BytesLike,
        associated_data: BytesLike | None,
        out: bytearray | memoryview,
    ) -> int:
        as_writable("out", out, 0)
        checked_nonce, view, associated = self._decrypt_checked(nonce, ciphertext_and_tag, associated_data)
        length = max(len(view) - TAG_SIZE, 0)
        target = check_out(out, length, "len(ciphertext_and_tag) - 16")
        plaintext = self._open(checked_nonce, view, associated)
        if plaintext is None:
            target[:length] = bytes(length)
            raise InvalidTag("authentication failed: the tag does not match")
        target[:length] = plaintext
        return length

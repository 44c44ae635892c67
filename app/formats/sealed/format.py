"""The sealed format's facts: sizes, header, segment nonces, HKDF, argument checks and the format's errors.

Functions that depend on the key's scheme (:mod:`app.core.schemes`) take it as ``scheme``, ``ctr-hmac`` when
omitted.

The wire format is described in :mod:`app.formats.sealed`.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import aescore
from app.core.schemes import CTR_HMAC, GCM, SCHEMES
from app.core.secret_memory import KeyMaterial, secret_buffer
from app.errors import DecryptionFailedError, PayloadTooLargeError
from app.formats.mac import hmac_states

#: Bytes of AES key derived per message, by key type.
DERIVED_KEY_SIZE: dict[str, int] = {"aes128": 16, "aes192": 24, "aes256": 32}
#: HMAC-SHA256 tag after every ``ctr-hmac`` segment (Tink's templates use the full 32 bytes).
TAG_SIZE = 32
#: AES-GCM tag after every ``gcm`` segment.
GCM_TAG_SIZE = 16
#: Tag bytes after every segment, by scheme.
TAG_SIZES: dict[str, int] = {CTR_HMAC: TAG_SIZE, GCM: GCM_TAG_SIZE}
#: HMAC key derived per message, after the AES key.
HMAC_KEY_SIZE = 32
#: Random nonce prefix in the header.
NONCE_PREFIX_SIZE = 7
#: The segment number is a u32 in the nonce: segments 0 .. 2**32 - 1.
MAX_SEGMENTS = 2**32
#: Tink stores the ciphertext segment size as a signed 32-bit int.
MAX_SEGMENT_SIZE = 2**31 - 1
#: Tink refuses input key material shorter than this (or than the derived key).
MIN_IKM_SIZE = 16

if TYPE_CHECKING:
    from _hashlib import HASH

SHA256 = hashlib.sha256
NONCE_SUFFIX = bytes(4)


def tag_size_of(scheme: str) -> int:
    """Tag bytes after every segment of ``scheme``: 32 (``ctr-hmac``) or 16 (``gcm``).

    Raises:
        ValueError: unknown ``scheme`` (the message lists the allowed ones).
    """
    size = TAG_SIZES.get(scheme) if isinstance(scheme, str) else None
    if size is None:
        raise ValueError(f"scheme must be one of {', '.join(SCHEMES)}, got {scheme!r}")
    return size


def derived_key_size_of(key_type: str) -> int:
    """AES key bytes derived per message for ``key_type``.

    Raises:
        ValueError: unknown ``key_type`` (the message lists the allowed ones).
    """
    size = DERIVED_KEY_SIZE.get(key_type) if isinstance(key_type, str) else None
    if size is None:
        raise ValueError(f"key_type must be one of {', '.join(DERIVED_KEY_SIZE)}, got {key_type!r}")
    return size


def header_length(key_type: str) -> int:
    """Header bytes for ``key_type``: 1 length byte + salt (derived key size) + 7-byte nonce prefix.

    Raises:
        ValueError: unknown ``key_type``.
    """
    return 1 + derived_key_size_of(key_type) + NONCE_PREFIX_SIZE


def min_segment_size(key_type: str, scheme: str = CTR_HMAC) -> int:
    """Smallest ciphertext segment size for ``key_type`` (Tink's rule: header + tag + at least 1 byte).

    Raises:
        ValueError: unknown ``key_type`` or ``scheme``.
    """
    return header_length(key_type) + tag_size_of(scheme) + 1


def validate_segment_size(key_type: str, segment_size: int, scheme: str = CTR_HMAC) -> None:
    """Check that ``segment_size`` works for ``key_type`` and ``scheme``.

    Raises:
        TypeError: ``segment_size`` is not an int.
        ValueError: unknown ``key_type`` or ``scheme``, or ``segment_size`` outside
            ``min_segment_size(key_type, scheme) .. MAX_SEGMENT_SIZE``.
    """
    minimum = min_segment_size(key_type, scheme)
    if isinstance(segment_size, bool) or not isinstance(segment_size, int):
        raise TypeError(f"segment_size must be an int, got {type(segment_size).__name__}")
    if not minimum <= segment_size <= MAX_SEGMENT_SIZE:
        raise ValueError(
            f"segment_size must be between {minimum} (header + {tag_size_of(scheme)}-byte tag + 1 byte) and "
            f"{MAX_SEGMENT_SIZE} for {key_type} keys of scheme {scheme}, got {segment_size}"
        )


def ciphertext_length(plaintext_length: int, key_type: str, segment_size: int, scheme: str = CTR_HMAC) -> int:
    """Exact sealed ciphertext length for a plaintext of ``plaintext_length`` bytes (header included).

    Raises:
        TypeError: ``plaintext_length`` or ``segment_size`` is not an int.
        ValueError: a negative length, an unknown ``key_type`` or ``scheme`` or an unusable ``segment_size``.
        PayloadTooLargeError: the plaintext needs more than 2**32 segments.
    """
    validate_segment_size(key_type, segment_size, scheme)
    check_length("plaintext_length", plaintext_length)
    tag_size = tag_size_of(scheme)
    plaintext_segment = segment_size - tag_size
    # As Tink: the header occupies the front of segment 0, so count it with the plaintext.
    full_segments, rest = divmod(plaintext_length + header_length(key_type), plaintext_segment)
    segments = full_segments + (1 if rest else 0)
    if segments > MAX_SEGMENTS:
        raise PayloadTooLargeError(too_many_segments_message(segment_size))
    return full_segments * segment_size + (rest + tag_size if rest else 0)


def check_length(name: str, value: object) -> int:
    """``value`` if it is a byte count: an int (not a bool) of at least 0.

    Raises:
        TypeError: it is not an int (the message names ``name``).
        ValueError: it is negative.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


def too_many_segments_message(segment_size: int) -> str:
    """The error text for a message that would need segment number 2**32."""
    return (
        f"the sealed format numbers segments with 32 bits: at most {MAX_SEGMENTS} segments of "
        f"{segment_size} bytes per message"
    )


def segment_nonce(nonce_prefix: bytes, index: int, last: bool, scheme: str = CTR_HMAC) -> bytes:
    """The nonce of segment ``index``: ``nonce_prefix (7) | index (u32 BE) | last (1 byte)``, then for
    ``ctr-hmac`` 4 zero bytes (16 bytes: the AES-CTR initial counter block), for ``gcm`` nothing (12 bytes:
    the AES-GCM nonce).

    Raises:
        ValueError: ``nonce_prefix`` is not 7 bytes, ``index`` is outside ``0 .. 2**32 - 1`` or an unknown
            ``scheme``.
    """
    if len(nonce_prefix) != NONCE_PREFIX_SIZE:
        raise ValueError(f"nonce_prefix must be {NONCE_PREFIX_SIZE} bytes, got {len(nonce_prefix)}")
    if not 0 <= index < MAX_SEGMENTS:
        raise ValueError(f"segment index must be between 0 and {MAX_SEGMENTS - 1}, got {index}")
    suffix = NONCE_SUFFIX if tag_size_of(scheme) == TAG_SIZE else b""
    return bytes(nonce_prefix) + index.to_bytes(4, "big") + (b"\x01" if last else b"\x00") + suffix


def derive_secret(ikm: KeyMaterial, salt: bytes, info: bytes, length: int) -> memoryview:
    """HKDF-SHA256 (RFC 5869) of ``length`` bytes (1 to 64) of ``ikm``, ``salt`` and ``info``, written by
    aescore's C core straight into locked memory (:mod:`app.core.secret_memory`): a read-only view, zeroed
    once its last view is dropped. No ``bytes`` object holds the derived key.

    Raises:
        ValueError: ``length`` is not in 1 .. 64.
    """
    buffer = secret_buffer(length)
    aescore.hkdf_sha256_into(ikm, salt, info, buffer.view())
    return buffer.readonly()


def hmac_sha256_states(key: bytes | memoryview) -> tuple[HASH, HASH]:
    """HMAC-SHA256's (RFC 2104) inner and outer SHA-256 states after the padded ``key``
    (:func:`app.formats.mac.hmac_states`): no ``bytes`` copy of the key is made."""
    return hmac_states(SHA256, key)


def derive_keys(
    ikm: KeyMaterial, salt: bytes, associated_data: bytes, derived_key_size: int
) -> tuple[memoryview, memoryview]:
    """``ctr-hmac``'s per-message keys as Tink derives them: one HKDF-SHA256 output of
    ``derived_key_size + 32`` bytes, split in two.

    Args:
        ikm: the key's material.
        salt: the header's salt.
        associated_data: the HKDF ``info``.
        derived_key_size: AES key bytes (16, 24 or 32).

    Returns:
        ``(aes_key, hmac_key)``: two views of one locked buffer (:func:`derive_secret`).
    """
    output = derive_secret(ikm, salt, associated_data, derived_key_size + HMAC_KEY_SIZE)
    return output[:derived_key_size], output[derived_key_size:]


def derive_gcm_key(
    ikm: KeyMaterial, salt: bytes, associated_data: bytes, derived_key_size: int
) -> memoryview:
    """``gcm``'s per-message AES-GCM key as Tink derives it: HKDF-SHA256 of ``derived_key_size`` bytes with
    the header's salt and the associated data as ``info``, in locked memory (:func:`derive_secret`)."""
    return derive_secret(ikm, salt, associated_data, derived_key_size)


#: The buffer types the helpers below take besides ``bytes`` (a tuple: ``isinstance`` with ``A | B`` builds
#: the union at every call, and these run on every message).
_WRITABLE_BUFFERS = (bytearray, memoryview)
_BUFFERS = (bytes, bytearray, memoryview)


def as_bytes(name: str, value: object) -> bytes:
    """A ``bytes`` copy of a bytes-like ``value``.

    Raises:
        TypeError: ``value`` is not bytes-like (the message names ``name``).
    """
    if not isinstance(value, _BUFFERS):
        raise TypeError(f"{name} must be bytes-like, got {type(value).__name__}")
    return bytes(value)


def as_key_material(name: str, value: object) -> bytes | memoryview:
    """Key material without a copy: ``bytes`` as given, any other buffer as a flat read-only view of it.

    The key cache hands out views of locked memory (:mod:`app.core.secret_memory`); a ``bytes`` copy per
    message would leave the material in freed heap memory, where core dumps find it.

    Raises:
        TypeError: ``value`` is not bytes-like (the message names ``name``).
    """
    if isinstance(value, bytes):
        return value
    if (
        type(value) is memoryview
        and value.readonly
        and value.format == "B"
        and value.ndim == 1
        and value.c_contiguous
    ):
        return value  # already such a view (the key cache's material): half the cost of a new one
    if not isinstance(value, _WRITABLE_BUFFERS):
        raise TypeError(f"{name} must be bytes-like, got {type(value).__name__}")
    return memoryview(value).cast("B").toreadonly()


def as_view(data: object) -> memoryview:
    """A flat unsigned-byte view of ``data`` (no copy).

    Raises:
        TypeError: ``data`` is not bytes-like.
    """
    if not isinstance(data, _BUFFERS):
        raise TypeError(
            f"data must be bytes-like (bytes, bytearray or memoryview), got {type(data).__name__}"
        )
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def check_ikm(ikm: KeyMaterial, derived_key_size: int) -> None:
    """Tink's rule for input key material: at least 16 bytes and at least the derived key size.

    Raises:
        ValueError: ``ikm`` is too short (the message gives lengths only, never bytes).
    """
    needed = max(MIN_IKM_SIZE, derived_key_size)
    if len(ikm) < needed:
        raise ValueError(f"key material must be at least {needed} bytes, got {len(ikm)}")


#: ``update_pieces``/``finalize_pieces`` return output in pieces of at most this many bytes (tags and the
#: header are pieces of their own).
PIECE_SIZE = 256 * 1024


class AlreadyFinalizedError(RuntimeError):
    """``update`` or ``finalize`` was called after ``finalize`` (or after a failure)."""


class SealedDecryptionError(DecryptionFailedError):
    """A sealed ciphertext failed to decrypt.

    Attributes:
        segment_index: the segment that failed (``None`` when the header itself is bad or missing).
        plaintext_released: ``True`` when earlier segments were verified and their plaintext returned, i.e.
            the caller may already have sent output: an HTTP response must then be aborted, not completed
            (before any output a clean 400 is possible).
    """

    def __init__(self, message: str, *, segment_index: int | None, plaintext_released: bool) -> None:
        super().__init__(message)
        self.segment_index = segment_index
        self.plaintext_released = plaintext_released

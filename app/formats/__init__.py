"""Ciphertext formats of the service.

- :mod:`app.formats.sealed`: the default, authenticated format, byte-compatible with Google Tink's
  ``AesCtrHmacStreaming`` streaming AEAD (segments of a key-defined size, each with an HMAC-SHA256 tag).
- :mod:`app.formats.raw`: plain AES-CTR with a caller-visible IV and random access by byte offset.

Both are synchronous, with no shared state between instances: the HTTP layer decides where they run.
"""

from __future__ import annotations

from .raw import IV_SIZE, MAX_STREAM_LENGTH, RawCipher, format_iv, new_iv, parse_iv
from .sealed import (
    DERIVED_KEY_SIZE,
    MAX_SEGMENT_SIZE,
    MAX_SEGMENTS,
    TAG_SIZE,
    AlreadyFinalizedError,
    SealedDecryptionError,
    SealedDecryptor,
    SealedEncryptor,
    ciphertext_length,
    header_length,
    min_segment_size,
    validate_segment_size,
)

__all__ = [
    "DERIVED_KEY_SIZE",
    "IV_SIZE",
    "MAX_SEGMENTS",
    "MAX_SEGMENT_SIZE",
    "MAX_STREAM_LENGTH",
    "TAG_SIZE",
    "AlreadyFinalizedError",
    "RawCipher",
    "SealedDecryptionError",
    "SealedDecryptor",
    "SealedEncryptor",
    "ciphertext_length",
    "format_iv",
    "header_length",
    "min_segment_size",
    "new_iv",
    "parse_iv",
    "validate_segment_size",
]

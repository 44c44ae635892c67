"""Ciphertext formats of the service.

- :mod:`app.formats.sealed`: the default, authenticated format, byte-compatible with Google Tink's
  streaming AEADs (segments of a key-defined size): ``AesCtrHmacStreaming`` (each segment with an
  HMAC-SHA256 tag) or ``AesGcmHkdfStreaming`` (AES-GCM per segment), as the key's scheme says.
- :mod:`app.formats.raw`: plain AES-CTR with a caller-visible IV and random access by byte offset.
- :mod:`app.formats.siv`: deterministic AES-SIV for ``aes256-siv`` keys (Tink's ``DeterministicAead``),
  whole small messages only, for the batch routes.

All are synchronous (raw also has :class:`~app.formats.raw.AsyncRawCipher` for backends with
``ctr_xor_async``), with no shared state between instances: the services layer decides where they run.
The stream limit is :data:`aescore.MAX_STREAM_LENGTH`; errors are :mod:`app.errors` (no web imports).
"""

from __future__ import annotations

from .raw import IV_SIZE, AsyncRawCipher, RawCipher, format_iv, new_iv, parse_iv
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
    "TAG_SIZE",
    "AlreadyFinalizedError",
    "AsyncRawCipher",
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

"""The sealed format: Google Tink's streaming AEADs, byte for byte: ``AesCtrHmacStreaming`` (scheme
``ctr-hmac``) and ``AesGcmHkdfStreaming`` (scheme ``gcm``). A key's scheme is fixed at its creation
(:mod:`app.core.schemes`); the two share the header, the segment layout and the key derivation.

Wire format of ``ctr-hmac`` (all integers big-endian)::

    ciphertext = header | segment_0 | segment_1 | ... | segment_n
    header     = header_length (1 byte, = 1 + D + 7) | salt (D bytes, random) | nonce_prefix (7 bytes, random)
    segment_i  = AES-CTR(aes_key, nonce_i, plaintext_i) | HMAC-SHA256(mac_key, nonce_i | ciphertext_i)
    nonce_i    = nonce_prefix (7) | i (u32) | last (1 byte: 1 for segment_n, else 0) | 0x00000000 (4)

``D`` is the derived key size: 16 for aes128 keys, 32 for aes256 keys (Tink's ``AES128_CTR_HMAC_SHA256_*`` and
``AES256_CTR_HMAC_SHA256_*`` templates) and 24 for aes192 keys (the same construction, but Tink has no such
template, so aes192 ciphertexts do not decrypt with Tink). Per message, ``HKDF-SHA256(ikm = key material,
salt, info = associated data)`` yields ``D + 32`` bytes: the AES key, then the HMAC key. ``nonce_i`` is the
initial counter block of segment ``i``; the counter counts AES blocks in its low 32 bits, which a segment of
at most 2**31 bytes never carries out of.

Every ciphertext segment is ``segment_size`` bytes (a property of the key, tag included) except the first,
which is ``header_length`` bytes shorter so that header and first segment together fill one segment, and
the last, which may be shorter (at least the 32-byte tag: an empty plaintext is one empty last segment).
Since the last-segment flag is authenticated, truncation at a segment boundary, appended data and reordered
segments all fail the tag check.

``gcm`` (Tink's ``AES128_GCM_HKDF_*`` and ``AES256_GCM_HKDF_*`` templates) differs only per segment::

    segment_i  = AES-GCM(aes_key, nonce_i, plaintext_i, no associated data)   (ciphertext | 16-byte tag)
    nonce_i    = nonce_prefix (7) | i (u32) | last (1 byte)                   (12 bytes)

with ``aes_key = HKDF-SHA256(ikm, salt, info = associated data)`` of ``D`` bytes (no HMAC key). The tag is
16 bytes, so segments carry 16 more plaintext bytes than ``ctr-hmac``'s, and the smallest segment size is
``header_length + 16 + 1``. The decryptor releases a segment's plaintext only after its GCM tag verifies
(aescore's ``AesGcm.decrypt`` returns none otherwise).

The package: :mod:`.format` (sizes, header, nonces, HKDF, the format's errors), :mod:`.parameters` (a key's
type, segment size and scheme, checked once and passed as one object), :mod:`.segments` (per-message
keys and the segment buffer), :mod:`.encryptor` and :mod:`.decryptor`, :mod:`.lengths` (a message's
length from its plaintext's and back), :mod:`.rewrap` (the two chained: a stream sealed again as it flows),
:mod:`.messages` (what a failed decryption says) and :mod:`.batch` (whole messages, many per native call).
Import from here.
"""

from __future__ import annotations

from .batch import native_isa, open_many, open_one, seal_many, seal_one
from .decryptor import SealedDecryptor
from .encryptor import SealedEncryptor
from .format import (
    DERIVED_KEY_SIZE,
    GCM_TAG_SIZE,
    HMAC_KEY_SIZE,
    MAX_SEGMENT_SIZE,
    MAX_SEGMENTS,
    NONCE_PREFIX_SIZE,
    PIECE_SIZE,
    TAG_SIZE,
    TAG_SIZES,
    AlreadyFinalizedError,
    SealedDecryptionError,
    ciphertext_length,
    derive_gcm_key,
    derive_keys,
    derive_secret,
    header_length,
    hmac_sha256_states,
    min_segment_size,
    segment_nonce,
    tag_size_of,
    validate_segment_size,
)
from .lengths import plaintext_length
from .parameters import KeyParameters
from .rewrap import SealedRewrapper

__all__ = [
    "DERIVED_KEY_SIZE",
    "GCM_TAG_SIZE",
    "HMAC_KEY_SIZE",
    "MAX_SEGMENTS",
    "MAX_SEGMENT_SIZE",
    "NONCE_PREFIX_SIZE",
    "PIECE_SIZE",
    "TAG_SIZE",
    "TAG_SIZES",
    "AlreadyFinalizedError",
    "KeyParameters",
    "SealedDecryptionError",
    "SealedDecryptor",
    "SealedEncryptor",
    "SealedRewrapper",
    "ciphertext_length",
    "derive_gcm_key",
    "derive_keys",
    "derive_secret",
    "header_length",
    "hmac_sha256_states",
    "min_segment_size",
    "native_isa",
    "open_many",
    "open_one",
    "plaintext_length",
    "seal_many",
    "seal_one",
    "segment_nonce",
    "tag_size_of",
    "validate_segment_size",
]

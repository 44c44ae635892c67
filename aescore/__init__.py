"""aescore: AES-CTR through interchangeable backends.

>>> import aescore
>>> backend = aescore.get_backend("python")
>>> ek = backend.expand_key(bytes(16))
>>> backend.ctr_xor(ek, bytes(16), b"hello").hex()
'0e8c27b880'

``aescore.AesGcm(backend, key)`` adds AES-GCM (``encrypt``/``decrypt`` like ``cryptography``'s AESGCM).

Callers ask a backend what it offers through declared capabilities, never through its name:
``runs_inline`` (cheap enough for an event loop), ``supports_async`` (``ctr_xor_async`` overlaps a device)
and ``sealed_batch()`` (a native :class:`SealedBatch` for whole sealed messages, or ``None``); a GCM key's
``encryptor(nonce, associated_data)`` (an AES-GCM encryption fed in pieces, :class:`GcmEncryptor`, or
``None`` where messages are encrypted whole only).
``key_view(key)`` checks an AES key as every backend does and returns a view of it, never a copy: key
material stays in the memory its owner locks and zeroes. ``hkdf_sha256_into(ikm, salt, info, out)`` derives
a key (HKDF-SHA256, in C) straight into such memory.

Backends: ``aesni`` (Cython over AES-NI/VAES intrinsics; constant-time), ``python`` (pure Python T-tables;
**not constant-time**: its table lookups depend on key and data, so do not use it where an attacker can time
it), and ``hwsim`` (a simulated accelerator, registered by the ``hwsim`` package through the
``aescore.backends`` entry point).

The default backend is ``$KEYSTREAM_BACKEND`` if set, else ``aesni`` when the CPU supports it, else
``python``.
"""

from __future__ import annotations

from ._interface import Backend, BytesLike, ExpandedKey, GcmEncryptor, GcmKey, SealedBatch, SealedItemStatus
from ._registry import (
    ENTRY_POINT_GROUP,  # noqa: F401  (importable from aescore as before, outside __all__)
    BackendFactory,  # noqa: F401
    available_backends,
    default_backend_name,
    get_backend,
    register_backend,
)
from ._validate import MAX_STREAM_LENGTH, key_view
from .errors import (
    AesCoreError,
    AesCoreTypeError,
    AesCoreValueError,
    AlreadyFinalizedError,
    BackendUnavailableError,
    CounterOverflowError,
    InvalidTag,
    UnknownBackendError,
)
from .gcm.aes_gcm import AesGcm
from .kdf import HKDF_SHA256_MAX_LENGTH, hkdf_sha256_into
from .stream import COUNTER_BITS, CtrStream

__all__ = [
    "COUNTER_BITS",
    "HKDF_SHA256_MAX_LENGTH",
    "MAX_STREAM_LENGTH",
    "AesCoreError",
    "AesCoreTypeError",
    "AesCoreValueError",
    "AesGcm",
    "AlreadyFinalizedError",
    "Backend",
    "BackendUnavailableError",
    "BytesLike",
    "CounterOverflowError",
    "CtrStream",
    "ExpandedKey",
    "GcmEncryptor",
    "GcmKey",
    "InvalidTag",
    "SealedBatch",
    "SealedItemStatus",
    "UnknownBackendError",
    "available_backends",
    "default_backend_name",
    "get_backend",
    "hkdf_sha256_into",
    "key_view",
    "register_backend",
]

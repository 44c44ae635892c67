"""Per-context keys of a ``derived`` key: one key version serves many tenants without sharing material.

A key created with ``derived`` never uses a version's material directly: every operation names a
``context`` (any bytes, e.g. a tenant or a row id) and works under a key derived from the material and the
context with HKDF-SHA256 (RFC 5869), no salt. Two derivations, one per API, since each must match what its
ciphertexts are read with:

* **native API** (the sealed and raw formats, data keys, HMACs): ``info`` = :data:`NATIVE_CONTEXT_LABEL`
  (``b"keystream derived key v1"`` and one zero byte) followed by the context, as many bytes as the material
  (the derived key is then an ordinary key of the same type, and the formats derive their own keys from it as
  for any key);
* **Transit API** (:mod:`app.formats.transit`): ``info`` = the context alone, 16 or 32 bytes for AES-GCM
  plus 32 for a convergent key's nonce key, which is Vault's and OpenBao's ``hkdf_sha256`` derivation, so a
  derived key moved from Vault decrypts its old ciphertexts here.

The derived key is written by aescore's C HKDF straight into locked memory (:mod:`app.core.secret_memory`);
no ``bytes`` object holds it.
"""

from __future__ import annotations

import aescore
from app.core.secret_memory import SLOT_SIZE, secret_buffer
from app.errors import BadRequestError

__all__ = ["MAX_CONTEXT_BYTES", "NATIVE_CONTEXT_LABEL", "check_context", "derive_native", "derive_transit"]

#: The label that starts the HKDF ``info`` of a native per-context key; the context follows it.
NATIVE_CONTEXT_LABEL = b"keystream derived key v1\x00"
#: Longest context accepted (bytes, once decoded): a context names a tenant or a record, not data.
MAX_CONTEXT_BYTES = 4096


def check_context(context: bytes) -> bytes:
    """``context`` when it may derive a key.

    Raises:
        BadRequestError: it is empty or longer than :data:`MAX_CONTEXT_BYTES` (the message gives the length,
            never the bytes).
    """
    if not 1 <= len(context) <= MAX_CONTEXT_BYTES:
        raise BadRequestError(
            f"context must be 1 to {MAX_CONTEXT_BYTES} bytes once decoded, got {len(context)} bytes"
        )
    return context


def _derive(material: bytes | memoryview, info: bytes, length: int) -> memoryview:
    if not 1 <= length <= SLOT_SIZE:
        raise ValueError(f"a derived key holds 1 to {SLOT_SIZE} bytes, got {length}")
    buffer = secret_buffer(length)
    view = buffer.view()
    aescore.hkdf_sha256_into(material, b"", info, view)
    view.release()
    return buffer.readonly()


def derive_native(material: bytes | memoryview, context: bytes) -> memoryview:
    """The per-context key of ``material`` for the native API: HKDF-SHA256, no salt, ``info`` =
    :data:`NATIVE_CONTEXT_LABEL` + ``context``, ``len(material)`` bytes, as a read-only view of locked memory
    (zeroed once the last view is dropped).

    Raises:
        BadRequestError: ``context`` is empty or too long.
    """
    return _derive(material, NATIVE_CONTEXT_LABEL + check_context(context), len(material))


def derive_transit(material: bytes | memoryview, context: bytes, length: int) -> memoryview:
    """The per-context key of ``material`` for the Transit API, as Vault derives it (``hkdf_sha256``):
    HKDF-SHA256, no salt, ``info`` = ``context``, ``length`` bytes, as a read-only view of locked memory.

    Raises:
        BadRequestError: ``context`` is empty or too long.
    """
    return _derive(material, check_context(context), length)

"""The layout of a wrapped blob, and which seal and master key generation made it.

Two layouts, told apart by the first byte:

* ``0x01 | nonce (12) | ciphertext | tag (16)``: AES-256-GCM under the master key in memory. The file seal
  writes this (generation 1), byte for byte as Keystream did before seals existed, so every data directory
  and database keeps working, and an older release can still read what the file seal writes.
* ``0x02 | seal kind (1) | generation (4, big-endian) | nonce (12) | ciphertext | tag (16)``: any other seal,
  and every seal's master key generations >= 2 (an online rotation's, :mod:`app.seal.keyring`).
  The six header bytes are part of the AES-GCM associated data, so a blob cannot be relabelled as another
  seal's or generation's.

Seal kind numbers: 1 file, 2 pkcs11, 3 shamir. A number is never reused for another kind.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

__all__ = [
    "FORMAT_FILE_V1",
    "FORMAT_V2",
    "NONCE_SIZE",
    "TAG_SIZE",
    "V2_HEADER_SIZE",
    "BlobOrigin",
    "blob_origin",
    "v2_header",
]

FORMAT_FILE_V1 = 0x01
FORMAT_V2 = 0x02
NONCE_SIZE = 12
TAG_SIZE = 16
V2_HEADER_SIZE = 6
_KIND_NUMBERS = {"file": 1, "pkcs11": 2, "shamir": 3}
_KIND_NAMES = {number: kind for kind, number in _KIND_NUMBERS.items()}
_HEADER = struct.Struct(">BBI")


@dataclass(frozen=True)
class BlobOrigin:
    """Which seal kind and master key generation wrapped a blob."""

    kind: str
    generation: int


def v2_header(kind: str, generation: int) -> bytes:
    """The six header bytes of a ``0x02`` blob.

    Raises:
        ValueError: unknown ``kind``, or ``generation`` outside 1 .. 2**32 - 1.
    """
    if kind not in _KIND_NUMBERS:
        raise ValueError(f"unknown seal kind {kind!r}; known: {', '.join(_KIND_NUMBERS)}")
    if not 1 <= generation < 2**32:
        raise ValueError(f"a master key generation must be in 1 .. 2**32 - 1, got {generation}")
    return _HEADER.pack(FORMAT_V2, _KIND_NUMBERS[kind], generation)


def blob_origin(blob: bytes) -> BlobOrigin | None:
    """The seal kind and generation a blob's header names, or ``None`` when it is no blob of ours."""
    if len(blob) >= 1 + NONCE_SIZE + TAG_SIZE and blob[0] == FORMAT_FILE_V1:
        return BlobOrigin("file", 1)
    if len(blob) >= V2_HEADER_SIZE + NONCE_SIZE + TAG_SIZE and blob[0] == FORMAT_V2:
        _, number, generation = _HEADER.unpack_from(blob)
        kind = _KIND_NAMES.get(number)
        if kind is not None and generation >= 1:
            return BlobOrigin(kind, generation)
    return None

"""Typing stub for the Cython extension ``aescore.sealing._sealed`` (documented in ``_sealed.pyx``)."""

from collections.abc import Sequence
from typing import Final

SHA256_IMPL_NAMES: Final[tuple[str, ...]]
GIL_RELEASE_BYTES: Final[int]
NONCE_PREFIX_SIZE: Final[int]
SCHEMES: Final[tuple[str, ...]]
ITEM_OK: Final[int]
ITEM_SHORT_HEADER: Final[int]
ITEM_BAD_HEADER: Final[int]
ITEM_MISSING_SEGMENT: Final[int]
ITEM_SHORT_SEGMENT: Final[int]
ITEM_NO_KEY: Final[int]
ITEM_BAD_TAG: Final[int]
ITEM_TOO_MANY_SEGMENTS: Final[int]

def sha256_impls() -> tuple[str, ...]: ...
def get_sha256_impl() -> str: ...
def set_sha256_impl(name: str) -> None: ...
def unavailable_reason() -> str | None: ...
def seal_many(
    ikm: bytes | bytearray | memoryview,
    derived_size: int,
    segment_size: int,
    plaintexts: Sequence[bytes],
    associated_data: Sequence[bytes],
    randomness: bytes,
    isa: str,
    scheme: str = "ctr-hmac",
) -> list[bytes | None]: ...
def open_many(
    candidates: Sequence[bytes | bytearray | memoryview],
    derived_size: int,
    segment_size: int,
    ciphertexts: Sequence[bytes],
    associated_data: Sequence[bytes],
    isa: str,
    scheme: str = "ctr-hmac",
) -> list[tuple[bytes | None, int, int, int]]: ...
def sha256(data: bytes, impl: str = "auto") -> bytes: ...
def hmac_sha256(key: bytes, data: bytes, impl: str = "auto") -> bytes: ...

HKDF_SHA256_MAX_LENGTH: Final[int]

def hkdf_sha256_into(
    ikm: bytes | bytearray | memoryview,
    salt: bytes | bytearray | memoryview,
    info: bytes | bytearray | memoryview,
    out: bytearray | memoryview,
) -> None: ...

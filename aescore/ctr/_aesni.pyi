"""Typing stub for the Cython extension ``aescore.ctr._aesni`` (see ``_aesni.pyx`` for the documentation)."""

from typing import ClassVar, Final, overload

from .._interface import Backend, BytesLike, ExpandedKey, GcmKey

ISA_NAMES: Final[tuple[str, ...]]
GIL_RELEASE_BYTES: Final[int]
MIN_BYTES_PER_THREAD: Final[int]
MAX_THREADS: Final[int]
STREAM_MIN_BYTES: Final[int]

def supported_isas() -> tuple[str, ...]: ...
def get_isa() -> str: ...
def set_isa(name: str) -> None: ...
def get_threads() -> int: ...
def set_threads(threads: int) -> None: ...
def unavailable_reason() -> str | None: ...
def gcm_isa(name: str | None = None) -> str: ...
def gcm_xmm_encoding() -> str: ...
def probe(kind: str, isa: str, iterations: int) -> int: ...
def _availability(
    cpu_isas: int, isa_setting: str, threads_setting: str
) -> tuple[str | None, str | None, int | None]: ...

class AesniExpandedKey(ExpandedKey):
    @property
    def backend_name(self) -> str: ...
    @property
    def key_size(self) -> int: ...

class AesniGcmKey(GcmKey):
    @property
    def backend_name(self) -> str: ...
    @property
    def key_size(self) -> int: ...
    def encrypt(self, nonce: BytesLike, data: BytesLike, associated_data: BytesLike | None) -> bytes: ...
    def encrypt_into(
        self,
        nonce: BytesLike,
        data: BytesLike,
        associated_data: BytesLike | None,
        out: bytearray | memoryview,
    ) -> int: ...
    def decrypt(
        self, nonce: BytesLike, ciphertext_and_tag: BytesLike, associated_data: BytesLike | None
    ) -> bytes: ...
    def decrypt_into(
        self,
        nonce: BytesLike,
        ciphertext_and_tag: BytesLike,
        associated_data: BytesLike | None,
        out: bytearray | memoryview,
    ) -> int: ...

class AesniGhash:
    def __init__(self, hash_key: BytesLike) -> None: ...
    def digest(self, associated_data: BytesLike, ciphertext: BytesLike) -> bytes: ...

class AesniBackend(Backend):
    name: ClassVar[str]
    def __init__(self, isa: str | None = None, threads: int | None = None) -> None: ...
    def expand_key(self, key: BytesLike) -> AesniExpandedKey: ...
    @overload
    def ctr_xor(
        self,
        expanded_key: ExpandedKey,
        initial_counter: BytesLike,
        data: BytesLike,
        offset: int = 0,
        out: None = None,
    ) -> bytes: ...
    @overload
    def ctr_xor(
        self,
        expanded_key: ExpandedKey,
        initial_counter: BytesLike,
        data: BytesLike,
        offset: int = 0,
        *,
        out: bytearray | memoryview,
    ) -> None: ...
    @overload
    def ctr_xor(
        self,
        expanded_key: ExpandedKey,
        initial_counter: BytesLike,
        data: BytesLike,
        offset: int,
        out: bytearray | memoryview,
    ) -> None: ...
    @overload
    def ctr_xor(
        self,
        expanded_key: ExpandedKey,
        initial_counter: BytesLike,
        data: BytesLike,
        offset: int = 0,
        out: bytearray | memoryview | None = None,
    ) -> bytes | None: ...
    def ghash(self, hash_key: bytes) -> AesniGhash: ...
    def gcm_key(self, key: BytesLike) -> AesniGcmKey: ...
    def info(self) -> dict[str, str | int | bool | None]: ...

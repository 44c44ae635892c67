"""Typing stub for the Cython extension ``aescore.compat._pyaes_fast`` (see ``_pyaes_fast.pyx``)."""

from collections.abc import Callable
from typing import Any, ClassVar

from .._interface import Backend, BytesLike, ExpandedKey

def configure(
    resolve_backend: Callable[[str | Backend | None], Backend],
    encrypt_general: Callable[[AESModeOfOperationCTR, BytesLike | str], bytes],
) -> None: ...

class AESModeOfOperationCTR:
    name: ClassVar[str]
    _backend: Backend
    _expanded_key: ExpandedKey
    _counter: Any  # aescore.compat.pyaes.Counter, a caller's counter object, or None
    _consumed: int
    _tail_left: int
    _tail_block: int
    def __init__(
        self, key: BytesLike, counter: Any = None, *, backend: str | Backend | None = None
    ) -> None: ...
    def encrypt(self, plaintext: BytesLike | str) -> bytes: ...
    def decrypt(self, ciphertext: BytesLike | str) -> bytes: ...

"""The opaque key objects a backend hands out: an expanded AES key for CTR and a key prepared for GCM.

They live apart from :mod:`aescore._interface` so that the GCM composition
(:mod:`aescore.gcm._composed`), which builds a :class:`GcmKey` from any backend's CTR, depends on them
without depending on the backend interface that offers it as the default.
"""

from __future__ import annotations

import abc
from typing import Any

from ._validate import BytesLike

__all__ = ["ExpandedKey", "GcmKey"]


class ExpandedKey(abc.ABC):
    """An opaque, immutable, thread-safe expanded AES key produced by one backend.

    It can be reused for any number of ``ctr_xor`` calls of the backend that made it. Its ``repr`` shows the
    backend and key size only, never key material.
    """

    __slots__ = ()

    @property
    @abc.abstractmethod
    def backend_name(self) -> str:
        """Name of the backend that expanded this key."""

    @property
    @abc.abstractmethod
    def key_size(self) -> int:
        """Key size in bytes: 16, 24 or 32."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} backend={self.backend_name!r} key_size={self.key_size * 8} bits>"

    def __reduce__(self) -> Any:
        raise TypeError("expanded keys cannot be pickled")


class GcmKey(abc.ABC):
    """An AES key prepared for AES-GCM by one backend (round keys and GHASH key material); thread-safe.

    :class:`aescore.AesGcm` is the public face and documents the contract; each method validates its
    arguments itself (same rules and messages on every backend). Its ``repr`` shows no key material.
    """

    __slots__ = ()

    @property
    @abc.abstractmethod
    def backend_name(self) -> str:
        """Name of the backend that prepared this key."""

    @property
    @abc.abstractmethod
    def key_size(self) -> int:
        """Key size in bytes: 16, 24 or 32."""

    @abc.abstractmethod
    def encrypt(self, nonce: BytesLike, data: BytesLike, associated_data: BytesLike | None) -> bytes:
        """``ciphertext || tag``; see :meth:`aescore.AesGcm.encrypt`."""

    @abc.abstractmethod
    def encrypt_into(
        self,
        nonce: BytesLike,
        data: BytesLike,
        associated_data: BytesLike | None,
        out: bytearray | memoryview,
    ) -> int:
        """Write ``ciphertext || tag`` to ``out``; see :meth:`aescore.AesGcm.encrypt_into`."""

    @abc.abstractmethod
    def decrypt(
        self, nonce: BytesLike, ciphertext_and_tag: BytesLike, associated_data: BytesLike | None
    ) -> bytes:
        """The verified plaintext; see :meth:`aescore.AesGcm.decrypt`."""

    @abc.abstractmethod
    def decrypt_into(
        self,
        nonce: BytesLike,
        ciphertext_and_tag: BytesLike,
        associated_data: BytesLike | None,
        out: bytearray | memoryview,
    ) -> int:
        """Write the verified plaintext to ``out``; see :meth:`aescore.AesGcm.decrypt_into`."""

    def __repr__(self) -> str:
        return f"<{type(self).__name__} backend={self.backend_name!r} key_size={self.key_size * 8} bits>"

    def __reduce__(self) -> Any:
        raise TypeError("GCM keys cannot be pickled")

"""The opaque key objects a backend hands out: an expanded AES key for CTR, a key prepared for GCM, and an
AES-GCM encryption fed in pieces, which a GCM key may offer.

They live apart from :mod:`aescore._interface` so that the GCM composition
(:mod:`aescore.gcm._composed`), which builds a :class:`GcmKey` from any backend's CTR, depends on them
without depending on the backend interface that offers it as the default.
"""

from __future__ import annotations

import abc
from typing import Any

from ._validate import BytesLike

__all__ = ["ExpandedKey", "GcmEncryptor", "GcmKey"]


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


class GcmEncryptor(abc.ABC):
    """One AES-GCM encryption fed in pieces: :meth:`update` (or :meth:`update_into`) for each, then
    :meth:`finalize` for the tag; obtained from :meth:`GcmKey.encryptor`.

    The ciphertext is that of :meth:`GcmKey.encrypt` over the pieces joined, written as each piece arrives
    (each call returns exactly its own piece's ciphertext), and the tag is the same. Encryption only: a
    decryption fed in pieces would hand out plaintext before the tag is checked. Not for two threads at once;
    it refuses use after :meth:`finalize`. Its ``repr`` shows no key material.
    """

    __slots__ = ()

    @abc.abstractmethod
    def update(self, data: BytesLike) -> bytes:
        """Encrypt the next piece; returns its ciphertext (``len(data)`` bytes).

        Raises:
            TypeError: ``data`` is not bytes-like.
            CounterOverflowError: the message would pass ``2**36 - 32`` bytes (nothing is written; the
                encryption is then unusable).
            AlreadyFinalizedError: after :meth:`finalize` or a failure.
        """

    @abc.abstractmethod
    def update_into(self, data: BytesLike, out: bytearray | memoryview) -> int:
        """:meth:`update` into the first ``len(data)`` bytes of ``out`` (which may be ``data`` itself);
        returns ``len(data)``.

        Raises:
            As :meth:`update`; also TypeError for a read-only ``out``, ValueError for a too small one.
        """

    @abc.abstractmethod
    def finalize(self) -> bytes:
        """The 16-byte tag; the encryption's state is wiped.

        Raises:
            AlreadyFinalizedError: called twice, or after a failure.
        """

    def __reduce__(self) -> Any:
        raise TypeError("GCM encryptions cannot be pickled")


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

    def encryptor(self, nonce: BytesLike, associated_data: BytesLike | None) -> GcmEncryptor | None:
        """Start one encryption under ``nonce`` fed in pieces (:class:`GcmEncryptor`), or ``None`` when this
        key's backend encrypts whole messages only (the default): the caller then gathers the message and
        calls :meth:`encrypt`. A declared capability: callers ask it, never a backend's name.

        Never reuse a nonce with the same key (an encryption started and abandoned has used its nonce).

        Raises:
            TypeError: an argument is not bytes-like (``associated_data`` may be ``None``).
            ValueError: the nonce is not 12 bytes long.
        """
        return None

    def __repr__(self) -> str:
        return f"<{type(self).__name__} backend={self.backend_name!r} key_size={self.key_size * 8} bits>"

    def __reduce__(self) -> Any:
        raise TypeError("GCM keys cannot be pickled")

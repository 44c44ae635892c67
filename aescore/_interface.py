"""The interface every AES-CTR backend implements.

Keystream block ``i`` is ``AES_K(C0 + i)`` where ``C0`` is the 16-byte ``initial_counter`` read as a
big-endian integer and the addition wraps modulo 2**128 (the construction of pyaes's ``Counter``).
``offset`` is the byte position of ``data[0]`` in that keystream, so any slice of a stream can be processed
without the bytes before it.

Fixed-width counters (NIST nonce || counter) are the job of :class:`aescore.CtrStream`, which checks the range
before calling a backend.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

from ._validate import BLOCK_SIZE, KEY_SIZES, BytesLike

__all__ = ["Backend", "BytesLike", "ExpandedKey", "GcmKey"]


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


class Backend(abc.ABC):
    """An AES-CTR implementation. Obtain instances with :func:`aescore.get_backend`.

    Implementations must be safe to call from several threads at once.
    """

    name: ClassVar[str]
    block_size: ClassVar[int] = BLOCK_SIZE
    key_sizes: ClassVar[tuple[int, ...]] = KEY_SIZES
    #: True only where the implementation's timing does not depend on key or data.
    constant_time: ClassVar[bool] = True
    #: True when a call is cheap enough to make on an asyncio event loop (a short ``ctr_xor`` returns in
    #: microseconds and holds no lock a loop could wait on); False when callers should move work to a
    #: thread (slow, GIL-bound or device-bound implementations). Services decide where crypto runs from
    #: this, never from the backend's name.
    runs_inline: ClassVar[bool] = False

    @abc.abstractmethod
    def expand_key(self, key: BytesLike) -> ExpandedKey:
        """Expand an AES key.

        Args:
            key: 16, 24 or 32 bytes.

        Raises:
            TypeError: ``key`` is not bytes-like (:class:`aescore.AesCoreTypeError`).
            ValueError: ``key`` has another length (:class:`aescore.AesCoreValueError`).
        """

    @abc.abstractmethod
    def ctr_xor(
        self,
        expanded_key: ExpandedKey,
        initial_counter: BytesLike,
        data: BytesLike,
        offset: int = 0,
        out: bytearray | memoryview | None = None,
    ) -> bytes | None:
        """XOR ``data`` with the AES-CTR keystream starting at byte ``offset``.

        Encryption and decryption are the same operation. Never reuse a key with an overlapping
        (initial_counter, offset) range for different data.

        Args:
            expanded_key: from this backend's :meth:`expand_key`.
            initial_counter: 16 bytes, the counter block of keystream block 0 (big-endian, wraps mod 2**128).
            data: the bytes to transform; ``data[0]`` sits at keystream byte ``offset``.
            offset: non-negative byte position in the keystream, ``offset + len(data) <= 2**64``.
            out: optional writable buffer of at least ``len(data)`` bytes; the result is written to its
                first ``len(data)`` bytes and ``None`` is returned. ``out`` may be ``data`` itself.

        Returns:
            The transformed bytes, or ``None`` when ``out`` is given.

        Raises:
            TypeError: wrong argument types, a read-only ``out``, or a key from another backend.
            ValueError: a counter that is not 16 bytes, a negative or too large offset, or a too-small
                ``out``.
        """

    def gcm_key(self, key: BytesLike) -> GcmKey:
        """Prepare ``key`` for AES-GCM on this backend (used by :class:`aescore.AesGcm`).

        The default composes this backend's :meth:`ctr_xor` (one call per message, for ``AES_K(J0)`` and the
        data together) with the pure-Python GHASH, which is **not constant-time**; backends with a faster or
        constant-time GHASH override it.

        Raises:
            TypeError: ``key`` is not bytes-like (:class:`aescore.AesCoreTypeError`).
            ValueError: ``key`` has another length (:class:`aescore.AesCoreValueError`).
        """
        from ._gcm import ComposedGcmKey
        from ._ghash import PythonGhash

        return ComposedGcmKey(self, key, PythonGhash)

    def info(self) -> dict[str, str | int | bool | None]:
        """Describe this backend (ISA path, threads, preset...) for ``/v1/backends`` and benchmarks."""
        return {"name": self.name, "constant_time": self.constant_time}

    def __repr__(self) -> str:
        return f"<aescore backend {self.name!r}>"

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
import enum
from collections.abc import Sequence
from typing import ClassVar

from ._keys import ExpandedKey, GcmEncryptor, GcmKey
from ._validate import BLOCK_SIZE, KEY_SIZES, BytesLike
from .gcm._composed import ComposedGcmKey, Ghash
from .gcm._ghash import PythonGhash

__all__ = ["Backend", "BytesLike", "ExpandedKey", "GcmEncryptor", "GcmKey", "SealedBatch", "SealedItemStatus"]


class SealedItemStatus(enum.IntEnum):
    """The outcome of one message in a :class:`SealedBatch` call (the native core's per-item codes)."""

    #: Sealed, or opened and verified.
    OK = 0
    #: Open: fewer bytes than the header.
    SHORT_HEADER = 1
    #: Open: the header's length byte does not match the key type.
    BAD_HEADER = 2
    #: Open: a header with no segment after it.
    MISSING_SEGMENT = 3
    #: Open: the last segment is shorter than its tag.
    SHORT_SEGMENT = 4
    #: Open: the first segment verifies under none of the candidate keys.
    NO_KEY = 5
    #: Open: a later segment fails authentication.
    BAD_TAG = 6
    #: The message would need segment number 2**32.
    TOO_MANY_SEGMENTS = 7


#: Per message opened by :meth:`SealedBatch.open_ctr_hmac` or :meth:`SealedBatch.open_gcm`: ``(plaintext or
#: None, status, segment index, candidate index)``; the plaintext is present only when every segment of that
#: message verified.
OpenedItem = tuple[bytes | None, int, int, int]


class SealedBatch(abc.ABC):
    """Seals or opens many whole messages of the sealed format (docs/formats.md) in one native call each.

    Obtained from :meth:`Backend.sealed_batch`; callers keep a per-message path for backends that return
    ``None``. Outputs are byte-identical to the per-message path. The implementation takes no entropy of
    its own: callers pass the salts and nonce prefixes, drawn from the OS CSPRNG, so a sealer can never
    reuse one it made up.
    """

    __slots__ = ()

    @property
    @abc.abstractmethod
    def isa(self) -> str:
        """The AES path the batches run on (``aesni``, ``vaes256``, ``vaes512``)."""

    @abc.abstractmethod
    def seal_ctr_hmac(
        self,
        ikm: BytesLike,
        derived_size: int,
        segment_size: int,
        plaintexts: Sequence[bytes],
        associated_data: Sequence[bytes],
        randomness: bytes,
    ) -> list[bytes | None]:
        """Seal each plaintext as its own ``ctr-hmac`` message (HKDF-SHA256, AES-CTR, HMAC-SHA256).

        Args:
            ikm: the key version's material, read in place.
            derived_size: AES key bytes per message: 16, 24 or 32.
            segment_size: the key's ciphertext segment size.
            plaintexts: bytes per message.
            associated_data: bytes per message (the HKDF info).
            randomness: ``len(plaintexts) * (derived_size + 7)`` fresh bytes from the OS CSPRNG: message
                i's salt then nonce prefix. Never reuse them.

        Returns:
            Per message its ciphertext, or ``None`` for one that would need segment number 2**32.

        Raises:
            TypeError: wrong argument types (:class:`aescore.AesCoreTypeError`).
            ValueError: bad sizes, too short key material, randomness of the wrong length.
        """

    @abc.abstractmethod
    def open_ctr_hmac(
        self,
        candidates: Sequence[BytesLike],
        derived_size: int,
        segment_size: int,
        ciphertexts: Sequence[bytes],
        associated_data: Sequence[bytes],
    ) -> list[OpenedItem]:
        """Open each ``ctr-hmac`` message, trying the ``candidates`` (key materials) in order on segment 0.

        Every tag of a message is verified before any of its plaintext is returned.

        Returns:
            Per message an :data:`OpenedItem` whose status is a :class:`SealedItemStatus`.

        Raises:
            TypeError: wrong argument types (:class:`aescore.AesCoreTypeError`).
            ValueError: bad sizes or too short key material.
        """

    @abc.abstractmethod
    def seal_gcm(
        self,
        ikm: BytesLike,
        derived_size: int,
        segment_size: int,
        plaintexts: Sequence[bytes],
        associated_data: Sequence[bytes],
        randomness: bytes,
    ) -> list[bytes | None]:
        """Seal each plaintext as its own ``gcm`` message (HKDF-SHA256, one AES-GCM call per segment).

        Arguments, result and errors as :meth:`seal_ctr_hmac`; segments carry 16-byte tags.
        """

    @abc.abstractmethod
    def open_gcm(
        self,
        candidates: Sequence[BytesLike],
        derived_size: int,
        segment_size: int,
        ciphertexts: Sequence[bytes],
        associated_data: Sequence[bytes],
    ) -> list[OpenedItem]:
        """Open each ``gcm`` message; as :meth:`open_ctr_hmac` (each segment's tag checked before any of the
        message's plaintext is returned)."""


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
    #: True when :meth:`ctr_xor_async` overlaps work with the event loop (a device queue whose jobs from one
    #: loop turn share a doorbell); False when it only runs :meth:`ctr_xor`. Services pick the asynchronous
    #: path from this, never from the backend's name.
    supports_async: ClassVar[bool] = False

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

    async def ctr_xor_async(
        self, expanded_key: ExpandedKey, initial_counter: BytesLike, data: BytesLike, offset: int = 0
    ) -> bytes:
        """:meth:`ctr_xor` for an event loop; the default runs :meth:`ctr_xor` in the calling coroutine.

        Backends whose :attr:`supports_async` is true override it to await their device instead.

        Raises:
            The same errors as :meth:`ctr_xor`.
        """
        result = self.ctr_xor(expanded_key, initial_counter, data, offset)
        assert result is not None  # no ``out``: the result is returned
        return result

    def sealed_batch(self) -> SealedBatch | None:
        """The native sealer of whole sealed-format messages for this backend, or ``None`` (the default).

        ``None`` means callers seal message by message through this backend's own ``ctr_xor``/``gcm_key``,
        so a backend's work (a device, a simulator) is never bypassed by a native path it did not offer.
        """
        return None

    def gcm_key(self, key: BytesLike) -> GcmKey:
        """Prepare ``key`` for AES-GCM on this backend (used by :class:`aescore.AesGcm`).

        The default composes this backend's :meth:`ctr_xor` (one call per message, for ``AES_K(J0)`` and the
        data together) with the pure-Python GHASH, which is **not constant-time**; backends with a faster or
        constant-time GHASH override it (or :meth:`ghash`).

        Raises:
            TypeError: ``key`` is not bytes-like (:class:`aescore.AesCoreTypeError`).
            ValueError: ``key`` has another length (:class:`aescore.AesCoreValueError`).
        """
        return ComposedGcmKey(self, key, self.ghash)

    def ghash(self, hash_key: bytes) -> Ghash:
        """GHASH under the 16-byte ``hash_key`` (``H = AES_K(0^128)``) on this backend's CPU path.

        The default is the pure-Python table GHASH, which is **not constant-time**; ``aesni`` returns its
        carry-less-multiply GHASH. A backend that composes AES-GCM from another core's CTR (``hwsim``: the
        keystream on a device, GHASH on the host) asks that core for its GHASH here rather than by name.
        """
        return PythonGhash(hash_key)

    def info(self) -> dict[str, str | int | bool | None]:
        """Describe this backend (ISA path, threads, preset...) for ``/v1/backends`` and benchmarks."""
        return {"name": self.name, "constant_time": self.constant_time}

    def __repr__(self) -> str:
        return f"<aescore backend {self.name!r}>"

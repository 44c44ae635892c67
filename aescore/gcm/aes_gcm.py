"""AES-GCM authenticated encryption over any aescore backend, shaped like ``cryptography``'s ``AESGCM``.

>>> import aescore
>>> gcm = aescore.AesGcm("python", bytes(16))
>>> gcm.encrypt(bytes(12), b"", None).hex()  # McGrew-Viega test case 1: the tag alone
'58e2fccefa7e3061367f1d57a4e7455a'

Security rules: never encrypt two messages with the same (key, nonce); take nonces from ``os.urandom`` or a
counter that cannot repeat, and rotate the key long before 2**32 random nonces (SP 800-38D 8.3).
"""

from __future__ import annotations

from .._interface import Backend, BytesLike, GcmKey
from .._registry import get_backend
from .._validate import not_a_backend
from ..errors import AesCoreTypeError
from ._composed import MAX_DATA_BYTES, NONCE_SIZE, TAG_SIZE

__all__ = ["MAX_DATA_BYTES", "NONCE_SIZE", "TAG_SIZE", "AesGcm"]


class AesGcm:
    """AES-128/192/256-GCM with 12-byte nonces and 16-byte tags (NIST SP 800-38D); thread-safe.

    The key schedule and the GHASH key material (powers of ``H`` on ``aesni``) are computed once here, so
    each call only pays for its message. Timing properties are the backend's: ``aesni`` is constant-time,
    ``python`` (table-driven AES and GHASH) is not.

    Args:
        backend: an :class:`aescore.Backend` or a backend name (``aesni``, ``python``, ``hwsim``...).
        key: 16, 24 or 32 bytes.

    Raises:
        TypeError: ``backend`` is neither a Backend nor a str, or ``key`` is not bytes-like
            (:class:`aescore.AesCoreTypeError`).
        ValueError: ``key`` is not 16, 24 or 32 bytes long, or no backend has that name
            (:class:`aescore.AesCoreValueError`).
        BackendUnavailableError: the named backend cannot run here.
    """

    __slots__ = ("_key",)

    nonce_size = NONCE_SIZE
    tag_size = TAG_SIZE
    key_sizes = (16, 24, 32)
    #: Longest plaintext per message, ``2**36 - 32`` bytes (GCM's 32-bit block counter).
    max_data_bytes = MAX_DATA_BYTES

    def __init__(self, backend: Backend | str, key: BytesLike) -> None:
        if isinstance(backend, str):
            backend = get_backend(backend)
        if not isinstance(backend, Backend):
            raise AesCoreTypeError(not_a_backend(backend))
        self._key: GcmKey = backend.gcm_key(key)

    @property
    def backend_name(self) -> str:
        """Name of the backend doing the work."""
        return self._key.backend_name

    @property
    def key_size(self) -> int:
        """Key size in bytes: 16, 24 or 32."""
        return self._key.key_size

    def encrypt(self, nonce: BytesLike, data: BytesLike, associated_data: BytesLike | None) -> bytes:
        """Encrypt and authenticate ``data``, and authenticate ``associated_data``.

        Never reuse a nonce with the same key.

        Args:
            nonce: 12 bytes, unique per message under this key.
            data: the plaintext, at most ``2**36 - 32`` bytes.
            associated_data: authenticated but not encrypted; ``None`` means empty.

        Returns:
            ``ciphertext || tag``: ``len(data) + 16`` bytes.

        Raises:
            TypeError: an argument is not bytes-like (``associated_data`` may be ``None``).
            ValueError: the nonce is not 12 bytes long.
            CounterOverflowError: ``data`` is longer than ``2**36 - 32`` bytes (an ``OverflowError``;
                raised before any output).
        """
        return self._key.encrypt(nonce, data, associated_data)

    def encrypt_into(
        self,
        nonce: BytesLike,
        data: BytesLike,
        associated_data: BytesLike | None,
        out: bytearray | memoryview,
    ) -> int:
        """:meth:`encrypt` into the first ``len(data) + 16`` bytes of ``out``; returns that count.

        ``out`` may be the buffer holding ``data`` (in place, with 16 bytes of room after it).

        Raises:
            TypeError: as :meth:`encrypt`, or ``out`` is not a writable buffer.
            ValueError: as :meth:`encrypt`, or ``out`` holds fewer than ``len(data) + 16`` bytes.
            CounterOverflowError: as :meth:`encrypt`.
        """
        return self._key.encrypt_into(nonce, data, associated_data, out)

    def decrypt(
        self, nonce: BytesLike, ciphertext_and_tag: BytesLike, associated_data: BytesLike | None
    ) -> bytes:
        """Verify and decrypt ``ciphertext_and_tag`` (as returned by :meth:`encrypt`).

        No plaintext is returned unless the tag verifies (compared in constant time).

        Raises:
            InvalidTag: the tag does not match (wrong key, nonce, associated data, or tampered data), or
                the input is shorter than a tag.
            TypeError: an argument is not bytes-like (``associated_data`` may be ``None``).
            ValueError: the nonce is not 12 bytes long.
            CounterOverflowError: the ciphertext is longer than GCM allows.
        """
        return self._key.decrypt(nonce, ciphertext_and_tag, associated_data)

    def decrypt_into(
        self,
        nonce: BytesLike,
        ciphertext_and_tag: BytesLike,
        associated_data: BytesLike | None,
        out: bytearray | memoryview,
    ) -> int:
        """:meth:`decrypt` into the first ``len(ciphertext_and_tag) - 16`` bytes of ``out``; returns it.

        When the tag does not verify, those bytes of ``out`` are zeroed before :class:`InvalidTag` is raised:
        no plaintext is left behind. ``out`` may be the buffer holding the ciphertext (in place).

        Raises:
            InvalidTag: as :meth:`decrypt`.
            TypeError: as :meth:`decrypt`, or ``out`` is not a writable buffer.
            ValueError: as :meth:`decrypt`, or ``out`` is too small.
            CounterOverflowError: as :meth:`decrypt`.
        """
        return self._key.decrypt_into(nonce, ciphertext_and_tag, associated_data, out)

    def __repr__(self) -> str:
        return f"<AesGcm backend={self.backend_name!r} key_size={self.key_size * 8} bits>"

    def __reduce__(self) -> str | tuple[object, ...]:
        raise TypeError("AesGcm objects cannot be pickled")

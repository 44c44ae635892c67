"""Encrypt a stream into the sealed format (see :mod:`app.formats.sealed` for the wire format)."""

from __future__ import annotations

import aescore
from app.core.secret_memory import KeyMaterial
from app.errors import PayloadTooLargeError

from . import randomness
from .format import (
    MAX_SEGMENTS,
    NONCE_PREFIX_SIZE,
    PIECE_SIZE,
    AlreadyFinalizedError,
    as_bytes,
    as_key_material,
    as_view,
    check_ikm,
    too_many_segments_message,
)
from .parameters import KeyParameters, checked_parameters
from .segments import SegmentBuffer, segment_keys

__all__ = ["SealedEncryptor"]


class SealedEncryptor:
    """Encrypt a stream into the sealed format, holding at most one segment of plaintext.

    A full segment is sealed (as not-last) only once a byte beyond it has arrived, so ``finalize`` can mark
    the true last segment; the output is the same for any split of the input into ``update`` calls.

    Args:
        ikm: the key version's material (HKDF input key material).
        parameters: the key's type, segment size and scheme (checked when they were built).
        associated_data: authenticated but not encrypted; the decryptor needs the same bytes.
        backend: the aescore backend doing the AES work; the derived key is expanded once per message.

    Raises:
        TypeError: wrong argument types.
        ValueError: too short ``ikm``.
    """

    __slots__ = (
        "_done",
        "_first_size",
        "_header",
        "_header_sent",
        "_index",
        "_keys",
        "_later_size",
        "_parameters",
        "_pending",
    )

    def __init__(
        self,
        ikm: KeyMaterial,
        parameters: KeyParameters,
        associated_data: bytes,
        backend: aescore.Backend,
    ) -> None:
        parameters = checked_parameters(parameters)
        derived_size = parameters.derived_key_size
        segment_size = parameters.segment_size
        material = as_key_material("ikm", ikm)
        check_ikm(material, derived_size)
        info = as_bytes("associated_data", associated_data)
        salt = randomness.random_bytes(derived_size)
        nonce_prefix = randomness.random_bytes(NONCE_PREFIX_SIZE)
        self._keys = segment_keys(
            parameters.scheme, material, salt, info, derived_size, nonce_prefix, backend
        )
        header_size = parameters.header_length
        self._header = bytes([header_size]) + salt + nonce_prefix
        self._header_sent = False
        self._parameters = parameters
        tag_size = self._keys.tag_size
        self._first_size = segment_size - header_size - tag_size
        self._later_size = segment_size - tag_size
        self._pending = SegmentBuffer(self._later_size)
        self._index = 0
        self._done = False

    @property
    def header(self) -> bytes:
        """The message header (length byte, salt, nonce prefix); public, not secret."""
        return self._header

    @property
    def segments_sealed(self) -> int:
        """Segments written so far."""
        return self._index

    @property
    def buffered(self) -> int:
        """Plaintext bytes held for the next segment (at most one segment's worth)."""
        return self._pending.fill

    def _seal(self, plaintext: memoryview, last: bool, parts: list[bytes]) -> None:
        if self._index >= MAX_SEGMENTS:
            raise PayloadTooLargeError(too_many_segments_message(self._parameters.segment_size))
        nonce = self._keys.nonce(self._index, last)
        parts += self._keys.seal(nonce, plaintext, PIECE_SIZE)
        self._index += 1

    def _start(self) -> list[bytes]:
        if self._done:
            raise AlreadyFinalizedError("this SealedEncryptor is finalized (or failed); start a new one")
        if self._header_sent:
            return []
        self._header_sent = True
        return [self._header]

    def update(self, data: bytes | bytearray | memoryview) -> bytes:
        """Encrypt ``data``; returns the header (first call) and every segment completed so far.

        Raises:
            TypeError: ``data`` is not bytes-like.
            AlreadyFinalizedError: called after :meth:`finalize` or after a failure.
            PayloadTooLargeError: the message would need more than 2**32 segments (raised before the segment
                counter could wrap; the encryptor is then unusable).
        """
        return b"".join(self.update_pieces(data))

    def update_pieces(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """:meth:`update`, the output as pieces of at most :data:`PIECE_SIZE` bytes (their concatenation).

        For a caller that sends the output on: it saves joining a segment and cutting it up again.

        Raises:
            TypeError, AlreadyFinalizedError, PayloadTooLargeError: as :meth:`update`.
        """
        view = as_view(data)
        parts = self._start()
        try:
            self._consume(view, parts)
        except BaseException:
            self._done = True
            raise
        return parts

    def _consume(self, view: memoryview, parts: list[bytes]) -> None:
        position, end = 0, len(view)
        pending = self._pending
        while True:
            size = self._first_size if self._index == 0 else self._later_size
            if pending.fill:
                take = min(size - pending.fill, end - position)
                pending.append(view[position : position + take])
                position += take
                if pending.fill < size or position == end:
                    return  # a full segment waits until a byte beyond it shows it is not the last
                self._seal(pending.contents(), False, parts)
                pending.fill = 0
            elif end - position > size:
                self._seal(view[position : position + size], False, parts)
                position += size
            else:
                pending.append(view[position:])
                return

    def finalize(self) -> bytes:
        """Seal the last segment (possibly with empty plaintext); returns it (after the header if unsent).

        Raises:
            AlreadyFinalizedError: called twice, or after a failure.
            PayloadTooLargeError: the last segment would be number 2**32.
        """
        return b"".join(self.finalize_pieces())

    def finalize_pieces(self) -> list[bytes]:
        """:meth:`finalize`, the output as pieces of at most :data:`PIECE_SIZE` bytes.

        Raises:
            AlreadyFinalizedError, PayloadTooLargeError: as :meth:`finalize`.
        """
        parts = self._start()
        self._done = True
        try:
            self._seal(self._pending.contents(), True, parts)
        finally:
            self._keys.forget()  # zeroed now, not when this object goes
        self._pending.fill = 0
        return parts

    def __repr__(self) -> str:
        return (
            f"<SealedEncryptor key_type={self._parameters.key_type} scheme={self._parameters.scheme} "
            f"segment_size={self._parameters.segment_size} "
            f"segments_sealed={self._index} finalized={self._done}>"
        )

"""Encrypt a stream into the sealed format (see :mod:`app.formats.sealed` for the wire format).

By default a segment is gathered whole and sealed in one call. When the plaintext's length is declared up
front and the key is ``gcm`` on a backend whose GCM key encrypts in pieces (:meth:`aescore.GcmKey.encryptor`),
every segment's size and last flag, hence its nonce, are known before its first byte: each piece is then
encrypted as it arrives (no copy into a segment buffer), the tag written when the segment's last byte is in.
Both give the same bytes.
"""

from __future__ import annotations

import aescore
from app.core.secret_memory import KeyMaterial
from app.errors import BadRequestError, PayloadTooLargeError

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
from .segments import GcmSegmentKeys, SegmentBuffer, segment_keys

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
        expected_length: the plaintext's length when it is known up front (a request's Content-Length): a
            ``gcm`` key on a backend that encrypts in pieces then seals each piece as it comes (see the
            module); the plaintext must then be exactly that long, or :meth:`update` (too long, before any
            output of that call) or :meth:`finalize` (too short) raises ``BadRequestError``.

    Raises:
        TypeError: wrong argument types.
        ValueError: too short ``ikm``, or a negative ``expected_length``.
        PayloadTooLargeError: ``expected_length`` needs more than 2**32 segments.
    """

    __slots__ = (
        "_declared",
        "_done",
        "_first_size",
        "_header",
        "_header_sent",
        "_index",
        "_keys",
        "_later_size",
        "_left",
        "_parameters",
        "_pending",
        "_received",
        "_segment",
        "_segments",
    )

    def __init__(
        self,
        ikm: KeyMaterial,
        parameters: KeyParameters,
        associated_data: bytes,
        backend: aescore.Backend,
        *,
        expected_length: int | None = None,
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
        self._declared = expected_length
        self._received = 0
        self._segment: aescore.GcmEncryptor | None = None
        self._segments = 0
        self._left = 0
        if expected_length is not None:
            self._plan(expected_length)

    def _plan(self, expected_length: int) -> None:
        """Seal in pieces when the key can (``gcm`` on a backend that encrypts in pieces): the number of
        segments follows from the length, so the first segment's encryption starts now, with its last flag."""
        parameters = self._parameters
        parameters.sealed_length(expected_length)  # refuses a length of more than 2**32 segments
        keys = self._keys
        if not isinstance(keys, GcmSegmentKeys):
            return
        # As ciphertext_length: the header fills the front of segment 0; a full last segment stays full.
        full, rest = divmod(expected_length + parameters.header_length, self._later_size)
        segments = full + (1 if rest else 0)
        first = keys.encryptor(keys.nonce(0, segments == 1))
        if first is None:
            return  # the backend encrypts whole segments only: gather them
        self._segments = segments
        self._segment = first
        self._left = self._segment_size(0)

    def _segment_size(self, index: int) -> int:
        """Plaintext bytes of segment ``index`` of a message of the declared length (sealing in pieces)."""
        declared = self._declared
        assert declared is not None
        if index < self._segments - 1:
            return self._first_size if index == 0 else self._later_size
        if index == 0:
            return declared
        return declared - self._first_size - (index - 1) * self._later_size

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
        """Plaintext bytes held for the next segment (at most one segment's worth; none when sealing in
        pieces)."""
        return self._pending.fill

    @property
    def seals_in_pieces(self) -> bool:
        """True when each piece is encrypted as it arrives (every :meth:`update` does crypto) rather than
        gathered into whole segments (see the module)."""
        return self._segments > 0

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
            if self._declared is not None:
                self._count(len(view))
            if self._segments:
                self._consume_in_pieces(view, parts)
            else:
                self._consume(view, parts)
        except BaseException:
            self._fail()
            raise
        return parts

    def _fail(self) -> None:
        """Unusable from now on; a segment's encryption in progress (keystream) is dropped."""
        self._done = True
        self._segment = None

    def _count(self, size: int) -> None:
        """Refuse, before any output of this call, plaintext past the declared length."""
        declared = self._declared
        assert declared is not None
        if self._received + size > declared:
            raise BadRequestError(
                f"the plaintext runs past the {declared} bytes declared for it "
                f"({self._received + size} bytes so far)"
            )
        self._received += size

    def _consume_in_pieces(self, view: memoryview, parts: list[bytes]) -> None:
        """Encrypt ``view`` as it is, segment by segment, each segment's tag once its last byte is in."""
        keys = self._keys
        assert isinstance(keys, GcmSegmentKeys)
        position, end = 0, len(view)
        while position < end:
            segment = self._segment
            if segment is None:  # the previous segment is sealed: the length says another one follows
                index = self._index
                size = self._segment_size(index)
                nonce = keys.nonce(index, index == self._segments - 1)
                if size <= end - position:  # wholly in this piece: sealed from it in one call
                    parts += keys.seal(nonce, view[position : position + size], PIECE_SIZE)
                    position += size
                    self._index += 1
                    continue
                segment = keys.encryptor(nonce)
                assert segment is not None  # the key offered one for segment 0
                self._segment = segment
                self._left = size
            take = min(self._left, end - position, PIECE_SIZE)
            parts.append(segment.update(view[position : position + take]))
            position += take
            self._left -= take
            if not self._left:
                parts.append(segment.finalize())
                self._segment = None
                self._index += 1

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
            if self._declared is not None and self._received != self._declared:
                raise BadRequestError(
                    f"the plaintext ended after {self._received} of the "
                    f"{self._declared} bytes declared for it"
                )
            if not self._segments:
                self._seal(self._pending.contents(), True, parts)
            elif self._index < self._segments:  # only an empty message's one (empty) segment is left
                segment = self._segment
                assert segment is not None and self._left == 0
                parts.append(segment.finalize())
                self._index += 1
        finally:
            self._segment = None
            self._keys.forget()  # zeroed now, not when this object goes
        self._pending.fill = 0
        return parts

    def __repr__(self) -> str:
        return (
            f"<SealedEncryptor key_type={self._parameters.key_type} scheme={self._parameters.scheme} "
            f"segment_size={self._parameters.segment_size} "
            f"segments_sealed={self._index} in_pieces={self.seals_in_pieces} finalized={self._done}>"
        )

"""Decrypt and verify a sealed stream (see :mod:`app.formats.sealed` for the wire format)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import aescore
from app.core.secret_memory import KeyMaterial

from . import messages
from .format import (
    MAX_SEGMENTS,
    PIECE_SIZE,
    AlreadyFinalizedError,
    SealedDecryptionError,
    as_bytes,
    as_key_material,
    as_view,
    check_ikm,
    segment_nonce,
    tag_size_of,
)
from .parameters import KeyParameters, checked_parameters
from .segments import GcmSegmentKeys, SegmentBuffer, SegmentKeys, segment_keys

__all__ = ["SealedDecryptor"]


class SealedDecryptor:
    """Decrypt and verify a sealed stream; plaintext leaves only after its segment's tag verifies.

    A full-length segment is opened only once a byte beyond it has arrived (then it is not the last) or at
    :meth:`finalize` (then it is the last), so the last-segment flag is checked exactly as written. The first
    segment's tag is tried against each candidate key version, newest first; the version that verifies is
    kept for the rest of the message.

    Args:
        candidates: ``(version, ikm)`` pairs, newest first; at least one.
        parameters: the key's type, segment size and scheme (all versions of a key share them).
        associated_data: must equal the encryptor's.
        backend: the aescore backend doing the AES work.
        more_candidates: called at most once, when the first segment verifies under none of ``candidates``
            (so before any plaintext was released); returns ``(version, ikm)`` pairs to try as well, e.g. the
            versions of a fresh read of the key's metadata when the caller's copy may be stale (another
            worker process rotated the key). Pairs already tried are skipped. Its exceptions propagate.

    Raises:
        TypeError: wrong argument types.
        ValueError: no candidates, or too short key material.
    """

    __slots__ = (
        "_associated_data",
        "_backend",
        "_candidates",
        "_derived_size",
        "_done",
        "_first_size",
        "_header_size",
        "_index",
        "_key_type",
        "_keys",
        "_more_candidates",
        "_nonce_prefix",
        "_pending",
        "_salt",
        "_scheme",
        "_segment_size",
        "_tag_size",
        "_version",
    )

    def __init__(
        self,
        candidates: Sequence[tuple[int, KeyMaterial]],
        parameters: KeyParameters,
        associated_data: bytes,
        backend: aescore.Backend,
        *,
        more_candidates: Callable[[], Iterable[tuple[int, KeyMaterial]]] | None = None,
    ) -> None:
        parameters = checked_parameters(parameters)
        segment_size = parameters.segment_size
        self._derived_size = parameters.derived_key_size
        self._scheme = parameters.scheme
        self._tag_size = tag_size_of(parameters.scheme)
        if not candidates:
            raise ValueError("candidates must hold at least one (version, key material) pair")
        self._candidates = self._checked(candidates)
        self._more_candidates = more_candidates
        self._associated_data = as_bytes("associated_data", associated_data)
        self._backend = backend
        self._key_type = parameters.key_type
        self._segment_size = segment_size
        self._header_size = parameters.header_length
        self._first_size = segment_size - self._header_size
        self._pending = SegmentBuffer(segment_size)
        self._salt: bytes | None = None
        self._nonce_prefix = b""
        self._keys: SegmentKeys | GcmSegmentKeys | None = None
        self._version: int | None = None
        self._index = 0
        self._done = False

    def _checked(self, candidates: Iterable[tuple[int, KeyMaterial]]) -> tuple[tuple[int, KeyMaterial], ...]:
        checked: list[tuple[int, KeyMaterial]] = []
        for version, ikm in candidates:
            if isinstance(version, bool) or not isinstance(version, int):
                raise TypeError(f"key version must be an int, got {type(version).__name__}")
            material = as_key_material("ikm", ikm)
            check_ikm(material, self._derived_size)
            checked.append((version, material))
        return tuple(checked)

    @property
    def version(self) -> int | None:
        """The key version whose key verified the first segment (``None`` until then)."""
        return self._version

    @property
    def may_call_more_candidates(self) -> bool:
        """True while a call that completes the first segment may call ``more_candidates`` (not called yet,
        no version verified): a caller whose ``more_candidates`` does I/O runs such calls where it may
        wait."""
        return self._version is None and self._more_candidates is not None

    @property
    def segments_verified(self) -> int:
        """Segments verified (and released) so far."""
        return self._index

    @property
    def buffered(self) -> int:
        """Ciphertext bytes held until their segment is complete (at most one segment)."""
        return self._pending.fill

    def _fail(self, message: str, segment_index: int | None) -> SealedDecryptionError:
        self._done = True
        return SealedDecryptionError(message, segment_index=segment_index, plaintext_released=self._index > 0)

    def update(self, data: bytes | bytearray | memoryview) -> bytes:
        """Feed ciphertext; returns the plaintext of every segment verified by this call (maybe empty).

        Raises:
            TypeError: ``data`` is not bytes-like.
            AlreadyFinalizedError: called after :meth:`finalize` or after a failure.
            SealedDecryptionError: (a :class:`DecryptionFailedError`) bad header, a segment that does not
                verify (wrong key or associated data, tampering, reordering) or too many segments; the message
                names the segment, ``plaintext_released`` says whether earlier plaintext was returned.
        """
        return b"".join(self.update_pieces(data))

    def update_pieces(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """:meth:`update`, the plaintext as pieces of at most :data:`PIECE_SIZE` bytes (their concatenation).

        Raises:
            TypeError, AlreadyFinalizedError, SealedDecryptionError: as :meth:`update`.
        """
        view = as_view(data)
        if self._done:
            raise AlreadyFinalizedError("this SealedDecryptor is finalized (or failed); start a new one")
        parts: list[bytes] = []
        try:
            self._consume(view, parts)
        except BaseException:
            self._done = True
            raise
        return parts

    def _consume(self, view: memoryview, parts: list[bytes]) -> None:
        position, end = 0, len(view)
        pending = self._pending
        if self._salt is None:
            position = min(self._header_size - pending.fill, end)
            pending.append(view[:position])
            if pending.fill < self._header_size:
                return
            self._parse_header(bytes(pending.contents()))
            pending.fill = 0
        while True:
            size = self._first_size if self._index == 0 else self._segment_size
            if pending.fill:
                take = min(size - pending.fill, end - position)
                pending.append(view[position : position + take])
                position += take
                if pending.fill < size or position == end:
                    return  # wait for a byte beyond this segment, or for finalize()
                parts += self._open(pending.contents(), False)
                pending.fill = 0
            elif end - position > size:
                parts += self._open(view[position : position + size], False)
                position += size
            else:
                pending.append(view[position:])
                return

    def _parse_header(self, header: bytes) -> None:
        if header[0] != self._header_size:
            raise self._fail(messages.bad_header(header[0], self._key_type, self._header_size), None)
        self._salt = header[1 : 1 + self._derived_size]
        self._nonce_prefix = header[1 + self._derived_size :]

    def _select_keys(self, index: int, nonce: bytes, segment: memoryview) -> list[bytes]:
        """Open the first segment under the first candidate that verifies it (kept for the message)."""
        plaintext = self._try_candidates(self._candidates, nonce, segment)
        if plaintext is None and self._more_candidates is not None:
            more, self._more_candidates = self._more_candidates, None
            fresh = tuple(pair for pair in self._checked(more()) if pair not in self._candidates)
            self._candidates += fresh
            plaintext = self._try_candidates(fresh, nonce, segment)
        if plaintext is not None:
            return plaintext
        raise self._fail(messages.no_key(index, (version for version, _ in self._candidates)), index)

    def _try_candidates(
        self, candidates: Sequence[tuple[int, KeyMaterial]], nonce: bytes, segment: memoryview
    ) -> list[bytes] | None:
        """The plaintext of ``segment`` under the first candidate whose keys verify it, or None."""
        assert self._salt is not None
        for version, ikm in candidates:
            keys = segment_keys(
                self._scheme,
                ikm,
                self._salt,
                self._associated_data,
                self._derived_size,
                self._nonce_prefix,
                self._backend,
            )
            plaintext = keys.open(nonce, segment, PIECE_SIZE)
            if plaintext is not None:
                self._keys = keys
                self._version = version
                return plaintext
        return None

    def _open(self, segment: memoryview, last: bool) -> list[bytes]:
        index = self._index
        if index >= MAX_SEGMENTS:
            raise self._fail(messages.too_many_segments(index), index)
        if len(segment) < self._tag_size:
            raise self._fail(messages.short_segment(index, len(segment), self._tag_size), index)
        nonce = segment_nonce(self._nonce_prefix, index, last, self._scheme)
        keys = self._keys
        if keys is None:
            plaintext = self._select_keys(index, nonce, segment)
        else:
            opened = keys.open(nonce, segment, PIECE_SIZE)
            if opened is None:
                raise self._fail(messages.bad_tag(index), index)
            plaintext = opened
        self._index = index + 1
        return plaintext

    def finalize(self) -> bytes:
        """Verify the last segment and return its plaintext; the ciphertext must end here.

        Raises:
            AlreadyFinalizedError: called twice, or after a failure.
            SealedDecryptionError: the ciphertext is truncated (short header, header only, a last segment
                missing or shorter than its tag) or its last segment does not verify.
        """
        return b"".join(self.finalize_pieces())

    def finalize_pieces(self) -> list[bytes]:
        """:meth:`finalize`, the plaintext as pieces of at most :data:`PIECE_SIZE` bytes.

        Raises:
            AlreadyFinalizedError, SealedDecryptionError: as :meth:`finalize`.
        """
        if self._done:
            raise AlreadyFinalizedError("this SealedDecryptor is finalized (or failed); start a new one")
        self._done = True
        try:
            if self._salt is None:
                raise self._fail(messages.short_header(self._pending.fill, self._header_size), None)
            if not self._pending.fill:
                raise self._fail(messages.missing_segment(self._index), self._index)
            plaintext = self._open(self._pending.contents(), True)
        finally:
            if self._keys is not None:
                self._keys.forget()  # zeroed now, not when this object goes
        self._pending.fill = 0
        return plaintext

    def __repr__(self) -> str:
        return (
            f"<SealedDecryptor key_type={self._key_type} scheme={self._scheme} "
            f"segment_size={self._segment_size} "
            f"version={self._version} segments_verified={self._index} finalized={self._done}>"
        )

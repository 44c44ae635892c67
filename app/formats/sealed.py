"""The sealed format: Google Tink's ``AesCtrHmacStreaming`` streaming AEAD, byte for byte.

Wire format (all integers big-endian)::

    ciphertext = header | segment_0 | segment_1 | ... | segment_n
    header     = header_length (1 byte, = 1 + D + 7) | salt (D bytes, random) | nonce_prefix (7 bytes, random)
    segment_i  = AES-CTR(aes_key, nonce_i, plaintext_i) | HMAC-SHA256(mac_key, nonce_i | ciphertext_i)
    nonce_i    = nonce_prefix (7) | i (u32) | last (1 byte: 1 for segment_n, else 0) | 0x00000000 (4)

``D`` is the derived key size: 16 for aes128 keys, 32 for aes256 keys (Tink's ``AES128_CTR_HMAC_SHA256_*`` and
``AES256_CTR_HMAC_SHA256_*`` templates) and 24 for aes192 keys (the same construction, but Tink has no such
template, so aes192 ciphertexts do not decrypt with Tink). Per message, ``HKDF-SHA256(ikm = key material,
salt, info = associated data)`` yields ``D + 32`` bytes: the AES key, then the HMAC key. ``nonce_i`` is the
initial counter block of segment ``i``; the counter counts AES blocks in its low 32 bits, which a segment of
at most 2**31 bytes never carries out of.

Every ciphertext segment is ``segment_size`` bytes (a property of the key, tag included) except the first,
which is ``header_length`` bytes shorter so that header and first segment together fill one segment, and
the last, which may be shorter (at least the 32-byte tag: an empty plaintext is one empty last segment).
Since the last-segment flag is authenticated, truncation at a segment boundary, appended data and reordered
segments all fail the tag check.
"""

from __future__ import annotations

import hmac
import os
from collections.abc import Callable, Iterable, Sequence

import aescore
from app.core.errors import DecryptionFailedError, PayloadTooLargeError

from ._sealed_parts import (
    DERIVED_KEY_SIZE,
    HMAC_KEY_SIZE,
    MAX_SEGMENT_SIZE,
    MAX_SEGMENTS,
    NONCE_PREFIX_SIZE,
    SHA256,
    TAG_SIZE,
    SegmentBuffer,
    SegmentKeys,
    as_bytes,
    as_view,
    check_ikm,
    ciphertext_length,
    derive_keys,
    derived_key_size_of,
    header_length,
    min_segment_size,
    segment_nonce,
    too_many_segments_message,
    validate_segment_size,
)

__all__ = [
    "DERIVED_KEY_SIZE",
    "HMAC_KEY_SIZE",
    "MAX_SEGMENTS",
    "MAX_SEGMENT_SIZE",
    "NONCE_PREFIX_SIZE",
    "PIECE_SIZE",
    "TAG_SIZE",
    "AlreadyFinalizedError",
    "SealedDecryptionError",
    "SealedDecryptor",
    "SealedEncryptor",
    "ciphertext_length",
    "derive_keys",
    "header_length",
    "min_segment_size",
    "segment_nonce",
    "validate_segment_size",
]

#: Source of salts and nonce prefixes; tests replace it to get reproducible ciphertexts.
_random_bytes: Callable[[int], bytes] = os.urandom

#: ``update_pieces``/``finalize_pieces`` return output in pieces of at most this many bytes (tags and the
#: header are pieces of their own).
PIECE_SIZE = 256 * 1024


class AlreadyFinalizedError(RuntimeError):
    """``update`` or ``finalize`` was called after ``finalize`` (or after a failure)."""


class SealedDecryptionError(DecryptionFailedError):
    """A sealed ciphertext failed to decrypt.

    Attributes:
        segment_index: the segment that failed (``None`` when the header itself is bad or missing).
        plaintext_released: ``True`` when earlier segments were verified and their plaintext returned, i.e.
            the caller may already have sent output: an HTTP response must then be aborted, not completed
            (before any output a clean 400 is possible).
    """

    def __init__(self, message: str, *, segment_index: int | None, plaintext_released: bool) -> None:
        super().__init__(message)
        self.segment_index = segment_index
        self.plaintext_released = plaintext_released


class SealedEncryptor:
    """Encrypt a stream into the sealed format, holding at most one segment of plaintext.

    A full segment is sealed (as not-last) only once a byte beyond it has arrived, so ``finalize`` can mark
    the true last segment; the output is the same for any split of the input into ``update`` calls.

    Args:
        ikm: the key version's material (HKDF input key material).
        key_type: ``aes128``, ``aes192`` or ``aes256`` (derived AES key of 16, 24 or 32 bytes).
        segment_size: the key's ciphertext segment size, tag included.
        associated_data: authenticated but not encrypted; the decryptor needs the same bytes.
        backend: the aescore backend doing the CTR work; the derived key is expanded once per message.

    Raises:
        TypeError: wrong argument types.
        ValueError: unknown ``key_type``, too short ``ikm`` or unusable ``segment_size``.
    """

    __slots__ = (
        "_done",
        "_first_size",
        "_header",
        "_header_sent",
        "_index",
        "_key_type",
        "_keys",
        "_later_size",
        "_pending",
        "_segment_size",
    )

    def __init__(
        self,
        ikm: bytes,
        key_type: str,
        segment_size: int,
        associated_data: bytes,
        backend: aescore.Backend,
    ) -> None:
        derived_size = derived_key_size_of(key_type)
        validate_segment_size(key_type, segment_size)
        material = as_bytes("ikm", ikm)
        check_ikm(material, derived_size)
        info = as_bytes("associated_data", associated_data)
        salt = _random_bytes(derived_size)
        nonce_prefix = _random_bytes(NONCE_PREFIX_SIZE)
        aes_key, mac_key = derive_keys(material, salt, info, derived_size)
        self._keys = SegmentKeys(aes_key, mac_key, nonce_prefix, backend)
        header_size = header_length(key_type)
        self._header = bytes([header_size]) + salt + nonce_prefix
        self._header_sent = False
        self._key_type = key_type
        self._segment_size = segment_size
        self._first_size = segment_size - header_size - TAG_SIZE
        self._later_size = segment_size - TAG_SIZE
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
            raise PayloadTooLargeError(too_many_segments_message(self._segment_size))
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
        self._seal(self._pending.contents(), True, parts)
        self._pending.fill = 0
        return parts

    def __repr__(self) -> str:
        return (
            f"<SealedEncryptor key_type={self._key_type} segment_size={self._segment_size} "
            f"segments_sealed={self._index} finalized={self._done}>"
        )


class SealedDecryptor:
    """Decrypt and verify a sealed stream; plaintext leaves only after its segment's tag verifies.

    A full-length segment is opened only once a byte beyond it has arrived (then it is not the last) or at
    :meth:`finalize` (then it is the last), so the last-segment flag is checked exactly as written. The first
    segment's tag is tried against each candidate key version, newest first; the version that verifies is
    kept for the rest of the message.

    Args:
        candidates: ``(version, ikm)`` pairs, newest first; at least one.
        key_type: ``aes128``, ``aes192`` or ``aes256``.
        segment_size: the key's ciphertext segment size (all versions of a key share it).
        associated_data: must equal the encryptor's.
        backend: the aescore backend doing the CTR work.
        more_candidates: called at most once, when the first segment verifies under none of ``candidates``
            (so before any plaintext was released); returns ``(version, ikm)`` pairs to try as well, e.g. the
            versions of a fresh read of the key's metadata when the caller's copy may be stale (another
            worker process rotated the key). Pairs already tried are skipped. Its exceptions propagate.

    Raises:
        TypeError: wrong argument types.
        ValueError: no candidates, unknown ``key_type``, too short key material or unusable ``segment_size``.
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
        "_segment_size",
        "_version",
    )

    def __init__(
        self,
        candidates: Sequence[tuple[int, bytes]],
        key_type: str,
        segment_size: int,
        associated_data: bytes,
        backend: aescore.Backend,
        *,
        more_candidates: Callable[[], Iterable[tuple[int, bytes]]] | None = None,
    ) -> None:
        self._derived_size = derived_key_size_of(key_type)
        validate_segment_size(key_type, segment_size)
        if not candidates:
            raise ValueError("candidates must hold at least one (version, key material) pair")
        self._candidates = self._checked(candidates)
        self._more_candidates = more_candidates
        self._associated_data = as_bytes("associated_data", associated_data)
        self._backend = backend
        self._key_type = key_type
        self._segment_size = segment_size
        self._header_size = header_length(key_type)
        self._first_size = segment_size - self._header_size
        self._pending = SegmentBuffer(segment_size)
        self._salt: bytes | None = None
        self._nonce_prefix = b""
        self._keys: SegmentKeys | None = None
        self._version: int | None = None
        self._index = 0
        self._done = False

    def _checked(self, candidates: Iterable[tuple[int, bytes]]) -> tuple[tuple[int, bytes], ...]:
        checked: list[tuple[int, bytes]] = []
        for version, ikm in candidates:
            if isinstance(version, bool) or not isinstance(version, int):
                raise TypeError(f"key version must be an int, got {type(version).__name__}")
            material = as_bytes("ikm", ikm)
            check_ikm(material, self._derived_size)
            checked.append((version, material))
        return tuple(checked)

    @property
    def version(self) -> int | None:
        """The key version whose key verified the first segment (``None`` until then)."""
        return self._version

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
            raise self._fail(
                f"sealed ciphertext header is invalid: its length byte says {header[0]}, a {self._key_type} "
                f"key needs {self._header_size} (wrong key type, or not a sealed ciphertext)",
                None,
            )
        self._salt = header[1 : 1 + self._derived_size]
        self._nonce_prefix = header[1 + self._derived_size :]

    def _select_keys(self, index: int, nonce: bytes, body: memoryview, tag: memoryview) -> SegmentKeys:
        keys = self._try_candidates(self._candidates, nonce, body, tag)
        if keys is None and self._more_candidates is not None:
            more, self._more_candidates = self._more_candidates, None
            fresh = tuple(pair for pair in self._checked(more()) if pair not in self._candidates)
            self._candidates += fresh
            keys = self._try_candidates(fresh, nonce, body, tag)
        if keys is not None:
            return keys
        versions = ", ".join(
            str(version) for version in sorted({v for v, _ in self._candidates}, reverse=True)
        )
        raise self._fail(
            f"segment {index} does not authenticate under any allowed key version (tried {versions}): wrong "
            "key, wrong associated data, or a tampered or truncated ciphertext",
            index,
        )

    def _try_candidates(
        self, candidates: Sequence[tuple[int, bytes]], nonce: bytes, body: memoryview, tag: memoryview
    ) -> SegmentKeys | None:
        """The keys of the first candidate whose HMAC key verifies ``tag`` (kept for the message), or None."""
        assert self._salt is not None
        for version, ikm in candidates:
            aes_key, mac_key = derive_keys(ikm, self._salt, self._associated_data, self._derived_size)
            expected = hmac.new(mac_key, nonce, SHA256)
            expected.update(body)
            if hmac.compare_digest(expected.digest(), tag):
                self._keys = SegmentKeys(aes_key, mac_key, self._nonce_prefix, self._backend)
                self._version = version
                return self._keys
        return None

    def _open(self, segment: memoryview, last: bool) -> list[bytes]:
        index = self._index
        if index >= MAX_SEGMENTS:
            raise self._fail(f"segment {index} is past the 2**32-segment limit of the sealed format", index)
        if len(segment) < TAG_SIZE:
            raise self._fail(
                f"segment {index} is truncated: {len(segment)} bytes, shorter than its {TAG_SIZE}-byte tag",
                index,
            )
        nonce = segment_nonce(self._nonce_prefix, index, last)
        body, tag = segment[:-TAG_SIZE], segment[-TAG_SIZE:]
        keys = self._keys
        if keys is None:
            keys = self._select_keys(index, nonce, body, tag)
        elif not hmac.compare_digest(keys.tag(nonce, body), tag):
            raise self._fail(
                f"segment {index} failed authentication: the ciphertext was tampered with, reordered or "
                "truncated",
                index,
            )
        plaintext = keys.transform_pieces(nonce, body, PIECE_SIZE)
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
        if self._salt is None:
            raise self._fail(
                f"sealed ciphertext is truncated: {self._pending.fill} bytes, shorter than the "
                f"{self._header_size}-byte header",
                None,
            )
        if not self._pending.fill:
            raise self._fail(f"sealed ciphertext is truncated: segment {self._index} is missing", self._index)
        plaintext = self._open(self._pending.contents(), True)
        self._pending.fill = 0
        return plaintext

    def __repr__(self) -> str:
        return (
            f"<SealedDecryptor key_type={self._key_type} segment_size={self._segment_size} "
            f"version={self._version} segments_verified={self._index} finalized={self._done}>"
        )

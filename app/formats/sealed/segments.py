"""Per-message segment keys of each scheme (seal and open one segment) and the reusable segment buffer.

:class:`SegmentKeys` (``ctr-hmac``: AES-CTR, then HMAC-SHA256 over nonce and ciphertext) and
:class:`GcmSegmentKeys` (``gcm``: AES-GCM with the segment nonce, no associated data) share the methods the
encryptor and decryptor use: ``nonce``, ``seal`` and ``open``; :func:`segment_keys` makes the right one.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, cast

import aescore
from app.core.schemes import GCM
from app.core.secret_memory import KeyMaterial

if TYPE_CHECKING:
    from _hashlib import HASH

from .format import (
    GCM_TAG_SIZE,
    TAG_SIZE,
    AlreadyFinalizedError,
    derive_gcm_key,
    derive_keys,
    hmac_sha256_states,
    segment_nonce,
    tag_size_of,
)

_FORGOTTEN = "these segment keys were dropped when their message was finalized"


class SegmentBuffer:
    """A reusable byte buffer for at most one segment, grown on demand up to ``limit`` and never shrunk.

    Unlike a ``bytearray`` that is appended to and cleared per segment, refilling it costs one copy and no
    reallocation; small messages only allocate what they use.
    """

    __slots__ = ("_data", "_view", "fill", "limit")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.fill = 0
        self._data = bytearray()
        self._view = memoryview(self._data)

    def append(self, source: memoryview) -> None:
        """Copy ``source`` after the current contents (the caller keeps ``fill + len(source) <= limit``)."""
        end = self.fill + len(source)
        if end > len(self._data):
            grown = bytearray(min(self.limit, max(end, 2 * len(self._data))))
            grown[: self.fill] = self._view[: self.fill]
            self._data, self._view = grown, memoryview(grown)
        self._view[self.fill : end] = source
        self.fill = end

    def contents(self) -> memoryview:
        """A view of the filled part; valid until the next :meth:`append` or refill."""
        return self._view[: self.fill]


def segment_keys(
    scheme: str,
    ikm: KeyMaterial,
    salt: bytes,
    associated_data: bytes,
    derived_key_size: int,
    nonce_prefix: bytes,
    backend: aescore.Backend,
) -> SegmentKeys | GcmSegmentKeys:
    """The per-message keys of ``scheme`` (HKDF-SHA256 of ``ikm`` with ``salt`` and the associated data).

    Raises:
        ValueError: unknown ``scheme``.
    """
    tag_size_of(scheme)
    if scheme == GCM:
        return GcmSegmentKeys(
            derive_gcm_key(ikm, salt, associated_data, derived_key_size), nonce_prefix, backend
        )
    aes_key, mac_key = derive_keys(ikm, salt, associated_data, derived_key_size)
    return SegmentKeys(aes_key, mac_key, nonce_prefix, backend)


class SegmentKeys:
    """``ctr-hmac``: the per-message AES and HMAC keys; tags and transforms one segment at a time.

    The AES key is expanded at the first transform, so a candidate key whose tag fails (trial decryption of
    the first segment) costs HKDF and one HMAC only.
    """

    __slots__ = ("_aes_key", "_backend", "_expanded", "_inner", "_nonce_prefix", "_outer")

    #: Tag bytes after each segment.
    tag_size = TAG_SIZE

    def __init__(
        self, aes_key: memoryview, mac_key: memoryview, nonce_prefix: bytes, backend: aescore.Backend
    ) -> None:
        self._backend = backend
        self._aes_key: memoryview | None = aes_key
        self._expanded: aescore.ExpandedKey | None = None
        self._inner, self._outer = hmac_sha256_states(mac_key)
        self._nonce_prefix = nonce_prefix

    def _expanded_key(self) -> aescore.ExpandedKey:
        expanded = self._expanded
        if expanded is None:
            if self._aes_key is None:
                raise AlreadyFinalizedError(_FORGOTTEN)
            expanded = self._expanded = self._backend.expand_key(self._aes_key)
        return expanded

    def forget(self) -> None:
        """Drop the AES key and its schedule now that the message is done: its locked memory and aescore's
        schedule are zeroed as they are freed, even while the encryptor or decryptor lives on (a worker
        thread keeps its last job until the next one). The MAC key is only hash states."""
        self._expanded = None
        self._aes_key = None

    def open(self, nonce: bytes, segment: memoryview, piece: int) -> list[bytes] | None:
        """Verify and decrypt one segment (ciphertext then tag): its plaintext in pieces of at most ``piece``
        bytes, or ``None`` (and no plaintext computed) when the tag does not verify."""
        body, tag = segment[:-TAG_SIZE], segment[-TAG_SIZE:]
        if not hmac.compare_digest(self.tag(nonce, body), tag):
            return None
        return self.transform_pieces(nonce, body, piece)

    def nonce(self, index: int, last: bool) -> bytes:
        """Segment ``index``'s nonce (see :func:`segment_nonce`)."""
        return segment_nonce(self._nonce_prefix, index, last)

    def tag(self, nonce: bytes, ciphertext: bytes | bytearray | memoryview) -> bytes:
        """HMAC-SHA256(hmac key, nonce | ciphertext), 32 bytes."""
        inner = self._inner.copy()
        inner.update(nonce)
        inner.update(ciphertext)
        return self._finish(inner)

    def _finish(self, inner: HASH) -> bytes:
        """The tag from the inner hash of a segment's nonce and ciphertext."""
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def seal(self, nonce: bytes, plaintext: memoryview, piece: int) -> list[bytes]:
        """Encrypt one segment: its ciphertext in pieces of at most ``piece`` bytes, then its 32-byte tag.

        Pieces instead of one ``bytes`` spare the copies of joining them and of cutting them again to send.
        """
        inner = self._inner.copy()
        inner.update(nonce)
        pieces = self.transform_pieces(nonce, plaintext, piece)
        for ciphertext in pieces:
            inner.update(ciphertext)
        pieces.append(self._finish(inner))
        return pieces

    def transform_pieces(self, nonce: bytes, data: memoryview, piece: int) -> list[bytes]:
        """:meth:`transform` in pieces of at most ``piece`` bytes (CTR from each piece's offset)."""
        if len(data) <= piece:
            return [self.transform(nonce, data)] if data else []
        ctr_xor, expanded = self._backend.ctr_xor, self._expanded_key()
        pieces: list[bytes] = []
        for start in range(0, len(data), piece):
            result = ctr_xor(expanded, nonce, data[start : start + piece], start)
            assert result is not None
            pieces.append(result)
        return pieces

    def transform(self, nonce: bytes, data: bytes | bytearray | memoryview) -> bytes:
        """AES-CTR over ``data`` with ``nonce`` as the initial counter block (encrypt = decrypt)."""
        result = self._backend.ctr_xor(self._expanded_key(), nonce, data)
        assert result is not None
        return result

    def __repr__(self) -> str:
        return "<SegmentKeys scheme=ctr-hmac>"


class GcmSegmentKeys:
    """``gcm``: the per-message AES-GCM key; seals and opens one segment at a time (Tink
    ``AesGcmHkdfStreaming``: the segment nonce is the GCM nonce, there is no GCM associated data).

    GCM computes a segment in one call, so its output is one ``bytes``; longer than ``piece`` it is handed
    out as zero-copy ``memoryview`` slices of it (see :func:`_views`).
    """

    __slots__ = ("_gcm", "_nonce_prefix")

    #: Tag bytes after each segment.
    tag_size = GCM_TAG_SIZE

    def __init__(self, aes_key: memoryview, nonce_prefix: bytes, backend: aescore.Backend) -> None:
        # The backend's GCM key is what aescore.AesGcm wraps (same encrypt/decrypt); taken directly, a message
        # skips AesGcm's backend-type check, which cost more than the key setup itself (~8 of 9 us).
        self._gcm: aescore.GcmKey | None = backend.gcm_key(aes_key)
        self._nonce_prefix = nonce_prefix

    def _key(self) -> aescore.GcmKey:
        if self._gcm is None:
            raise AlreadyFinalizedError(_FORGOTTEN)
        return self._gcm

    def forget(self) -> None:
        """Drop the AES-GCM key now that the message is done (aescore zeroes it as it is freed)."""
        self._gcm = None

    def nonce(self, index: int, last: bool) -> bytes:
        """Segment ``index``'s 12-byte nonce (see :func:`segment_nonce`)."""
        return segment_nonce(self._nonce_prefix, index, last, GCM)

    def seal(self, nonce: bytes, plaintext: memoryview, piece: int) -> list[bytes]:
        """Encrypt one segment: ``ciphertext | tag`` in pieces of at most ``piece`` bytes."""
        return _views(self._key().encrypt(nonce, plaintext, None), piece)

    def encryptor(self, nonce: bytes) -> aescore.GcmEncryptor | None:
        """One segment's AES-GCM encryption fed in pieces (the same bytes as :meth:`seal` over them joined),
        or ``None`` where the backend's GCM key encrypts whole messages only
        (:meth:`aescore.GcmKey.encryptor`). Each nonce once: a segment's nonce names its index."""
        return self._key().encryptor(nonce, None)

    def open(self, nonce: bytes, segment: memoryview, piece: int) -> list[bytes] | None:
        """Verify and decrypt one segment (ciphertext then tag): its plaintext in pieces of at most ``piece``
        bytes, or ``None`` when the tag does not verify (aescore returns no plaintext then)."""
        try:
            plaintext = self._key().decrypt(nonce, segment, None)
        except aescore.InvalidTag:
            return None
        return _views(plaintext, piece)

    def __repr__(self) -> str:
        return "<SegmentKeys scheme=gcm>"


def _views(data: bytes, piece: int) -> list[bytes]:
    """``data`` as pieces of at most ``piece`` bytes: ``[data]`` when it fits (``[]`` when empty), else
    ``memoryview`` slices of it.

    Slices instead of ``bytes`` copies: the service sends each piece as it is (``len``, ``b"".join`` and
    socket writes take any bytes-like object), so a 1 MiB segment costs no extra allocation and copy; that
    copy was measured at a third of the time of sending it. They are typed ``bytes`` because every consumer
    of pieces only needs the buffer protocol; ``update``/``finalize`` join them into real ``bytes``.
    """
    if len(data) <= piece:
        return [data] if data else []
    view = memoryview(data)
    return [cast(bytes, view[start : start + piece]) for start in range(0, len(data), piece)]

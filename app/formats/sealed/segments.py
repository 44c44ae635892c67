"""Per-message segment keys (AES-CTR transform and HMAC tag of a segment) and the reusable segment buffer."""

from __future__ import annotations

import hmac

import aescore

from .format import SHA256, segment_nonce


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


class SegmentKeys:
    """The per-message AES and HMAC keys; tags and transforms one segment at a time."""

    __slots__ = ("_backend", "_expanded", "_mac", "_nonce_prefix")

    def __init__(self, aes_key: bytes, mac_key: bytes, nonce_prefix: bytes, backend: aescore.Backend) -> None:
        self._backend = backend
        self._expanded = backend.expand_key(aes_key)
        self._mac = hmac.new(mac_key, digestmod=SHA256)
        self._nonce_prefix = nonce_prefix

    def nonce(self, index: int, last: bool) -> bytes:
        """Segment ``index``'s nonce (see :func:`segment_nonce`)."""
        return segment_nonce(self._nonce_prefix, index, last)

    def tag(self, nonce: bytes, ciphertext: bytes | bytearray | memoryview) -> bytes:
        """HMAC-SHA256(hmac key, nonce | ciphertext), 32 bytes."""
        mac = self._mac.copy()
        mac.update(nonce)
        mac.update(ciphertext)
        return mac.digest()

    def seal(self, nonce: bytes, plaintext: memoryview, piece: int) -> list[bytes]:
        """Encrypt one segment: its ciphertext in pieces of at most ``piece`` bytes, then its 32-byte tag.

        Pieces instead of one ``bytes`` spare the copies of joining them and of cutting them again to send.
        """
        mac = self._mac.copy()
        mac.update(nonce)
        pieces = self.transform_pieces(nonce, plaintext, piece)
        for ciphertext in pieces:
            mac.update(ciphertext)
        pieces.append(mac.digest())
        return pieces

    def transform_pieces(self, nonce: bytes, data: memoryview, piece: int) -> list[bytes]:
        """:meth:`transform` in pieces of at most ``piece`` bytes (CTR from each piece's offset)."""
        if len(data) <= piece:
            return [self.transform(nonce, data)] if data else []
        ctr_xor, expanded = self._backend.ctr_xor, self._expanded
        pieces: list[bytes] = []
        for start in range(0, len(data), piece):
            result = ctr_xor(expanded, nonce, data[start : start + piece], start)
            assert result is not None
            pieces.append(result)
        return pieces

    def transform(self, nonce: bytes, data: bytes | bytearray | memoryview) -> bytes:
        """AES-CTR over ``data`` with ``nonce`` as the initial counter block (encrypt = decrypt)."""
        result = self._backend.ctr_xor(self._expanded, nonce, data)
        assert result is not None
        return result

    def __repr__(self) -> str:
        return "<SegmentKeys>"

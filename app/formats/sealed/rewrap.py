"""Rewrap a sealed stream: open it under one key version and seal the plaintext under another, as it flows.

A :class:`SealedRewrapper` chains a :class:`~.decryptor.SealedDecryptor` into a
:class:`~.encryptor.SealedEncryptor` (fresh salt and nonce prefix): the decryptor releases a segment's
plaintext only after its tag verified, and only released plaintext reaches the encryptor, so nothing
unverified is ever sealed and the plaintext never leaves the object. Both hold at most one segment, so a
rewrap holds about two segments whatever the stream's length.

The new header is the first output, and it comes out only once the old first segment verified: a caller
that has produced no output yet (nothing sent) can still refuse the whole request cleanly.
"""

from __future__ import annotations

from collections.abc import Iterable

from .decryptor import SealedDecryptor
from .encryptor import SealedEncryptor

__all__ = ["SealedRewrapper"]


class SealedRewrapper:
    """Decrypt a sealed stream and encrypt its plaintext again, with the ``update``/``finalize`` shape.

    Args:
        decryptor: opens the input (its candidates are the versions the input may be sealed under).
        encryptor: seals the output (a new message: its own salt and nonce prefix).

    The two may differ in key version, but a key's versions share key type, scheme and segment size, so
    the output has as many segments as the input.
    """

    __slots__ = ("_decryptor", "_encryptor")

    def __init__(self, decryptor: SealedDecryptor, encryptor: SealedEncryptor) -> None:
        self._decryptor = decryptor
        self._encryptor = encryptor

    @property
    def version(self) -> int | None:
        """The key version that verified the input's first segment (``None`` until then)."""
        return self._decryptor.version

    @property
    def may_call_more_candidates(self) -> bool:
        """As :attr:`SealedDecryptor.may_call_more_candidates`, for the input."""
        return self._decryptor.may_call_more_candidates

    @property
    def buffered(self) -> int:
        """Ciphertext bytes the decryptor holds until their segment is complete (at most one segment).

        The encryptor's held plaintext is left out: it is sealed only when the decryptor releases more.
        """
        return self._decryptor.buffered

    def _seal(self, plaintext: Iterable[bytes | memoryview], parts: list[bytes]) -> None:
        for piece in plaintext:
            parts += self._encryptor.update_pieces(piece)

    def update_pieces(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Feed input ciphertext; returns output ciphertext pieces (the new header once the first input
        segment verified, then every new segment completed).

        Raises:
            TypeError: ``data`` is not bytes-like.
            AlreadyFinalizedError: called after :meth:`finalize_pieces` or after a failure.
            SealedDecryptionError: the input does not verify, as :meth:`SealedDecryptor.update` (nothing of
                the failing segment was sealed).
            PayloadTooLargeError: as :meth:`SealedEncryptor.update` (never for an input that verified).
        """
        plaintext = self._decryptor.update_pieces(data)
        parts: list[bytes] = []
        self._seal(plaintext, parts)
        return parts

    def finalize_pieces(self) -> list[bytes]:
        """Verify the input's last segment and seal the output's; the input must end here.

        Raises:
            AlreadyFinalizedError, SealedDecryptionError: as :meth:`SealedDecryptor.finalize`.
            PayloadTooLargeError: as :meth:`SealedEncryptor.finalize`.
        """
        parts: list[bytes] = []
        self._seal(self._decryptor.finalize_pieces(), parts)
        parts += self._encryptor.finalize_pieces()
        return parts

    def __repr__(self) -> str:
        return f"<SealedRewrapper decryptor={self._decryptor!r} encryptor={self._encryptor!r}>"

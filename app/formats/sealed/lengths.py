"""A sealed message's length from its plaintext's, and back: what lets a streamed answer carry Content-Length.

:func:`~.format.ciphertext_length` gives the sealed length of a plaintext; :func:`plaintext_length` is its
inverse over every ciphertext length the decryptor accepts, and refuses the others with the decryptor's
own words, so a body of an impossible length fails before any output instead of at its end.
"""

from __future__ import annotations

from app.core.schemes import CTR_HMAC

from . import messages
from .format import (
    MAX_SEGMENTS,
    SealedDecryptionError,
    check_length,
    header_length,
    tag_size_of,
    validate_segment_size,
)

__all__ = ["plaintext_length"]


def plaintext_length(ciphertext_length: int, key_type: str, segment_size: int, scheme: str = CTR_HMAC) -> int:
    """The plaintext bytes :class:`~.decryptor.SealedDecryptor` releases for a sealed message of
    ``ciphertext_length`` bytes, if its segments verify.

    The segments follow from the length alone: the header, a first segment of ``segment_size - header``
    bytes, later ones of ``segment_size``, the last one whatever is left (at least its tag; the decryptor
    accepts a last segment holding only its tag). Each segment carries one tag.

    Raises:
        TypeError: ``ciphertext_length`` or ``segment_size`` is not an int.
        ValueError: a negative length, an unknown ``key_type`` or ``scheme`` or an unusable ``segment_size``.
        SealedDecryptionError: no sealed message has this length (shorter than a header, a header alone, a
            last segment shorter than its tag, more than 2**32 segments): the message the decryptor would
            give at the end of such a body, with ``plaintext_released`` false.
    """
    validate_segment_size(key_type, segment_size, scheme)
    check_length("ciphertext_length", ciphertext_length)
    header = header_length(key_type)
    tag_size = tag_size_of(scheme)
    if ciphertext_length < header:
        raise _impossible(messages.short_header(ciphertext_length, header), None)
    segments_bytes = ciphertext_length - header
    if not segments_bytes:
        raise _impossible(messages.missing_segment(0), 0)
    first = segment_size - header
    if segments_bytes <= first:
        segments, last = 1, segments_bytes
    else:
        later, rest = divmod(segments_bytes - first, segment_size)
        segments = 1 + later + (1 if rest else 0)
        last = rest or segment_size
    if segments > MAX_SEGMENTS:
        raise _impossible(messages.too_many_segments(MAX_SEGMENTS), MAX_SEGMENTS)
    if last < tag_size:
        raise _impossible(messages.short_segment(segments - 1, last, tag_size), segments - 1)
    return segments_bytes - segments * tag_size


def _impossible(message: str, segment_index: int | None) -> SealedDecryptionError:
    return SealedDecryptionError(message, segment_index=segment_index, plaintext_released=False)

"""What a failed sealed decryption says: one wording per failure, shared by the streaming decryptor and the
native batch path (:mod:`.batch`), so both report an item's problem in the same words."""

from __future__ import annotations

from collections.abc import Iterable

from .format import TAG_SIZE


def short_header(received: int, header_size: int) -> str:
    """Fewer bytes than the header."""
    return f"sealed ciphertext is truncated: {received} bytes, shorter than the {header_size}-byte header"


def bad_header(length_byte: int, key_type: str, header_size: int) -> str:
    """The header's length byte does not fit the key type."""
    return (
        f"sealed ciphertext header is invalid: its length byte says {length_byte}, a {key_type} "
        f"key needs {header_size} (wrong key type, or not a sealed ciphertext)"
    )


def missing_segment(index: int) -> str:
    """The ciphertext ends before segment ``index``."""
    return f"sealed ciphertext is truncated: segment {index} is missing"


def short_segment(index: int, length: int, tag_size: int = TAG_SIZE) -> str:
    """Segment ``index`` is shorter than its tag (``tag_size``: 32 bytes for ``ctr-hmac``, 16 for ``gcm``)."""
    return f"segment {index} is truncated: {length} bytes, shorter than its {tag_size}-byte tag"


def too_many_segments(index: int) -> str:
    """Segment ``index`` is past the format's 2**32 segments."""
    return f"segment {index} is past the 2**32-segment limit of the sealed format"


def newest_first(versions: Iterable[int]) -> str:
    """``versions`` newest first, runs of three or more as ``"9 to 7"``: ``"12, 9 to 7, 5, 4"``.

    A key may have hundreds of versions; the message names them all in a few words."""
    runs: list[list[int]] = []
    for version in sorted(set(versions), reverse=True):
        if runs and runs[-1][-1] == version + 1:
            runs[-1].append(version)
        else:
            runs.append([version])
    parts: list[str] = []
    for run in runs:
        if len(run) >= 3:
            parts.append(f"{run[0]} to {run[-1]}")
        else:
            parts.extend(str(version) for version in run)
    return ", ".join(parts)


def no_key(index: int, versions: Iterable[int]) -> str:
    """The first segment verifies under none of ``versions``."""
    tried = newest_first(versions)
    return (
        f"segment {index} does not authenticate under any allowed key version (tried {tried}): wrong "
        "key, wrong associated data, or a tampered or truncated ciphertext"
    )


def bad_tag(index: int) -> str:
    """A later segment does not verify under the message's key."""
    return f"segment {index} failed authentication: the ciphertext was tampered with, reordered or truncated"

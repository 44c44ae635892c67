"""The text form of a Shamir share of the master key, and the splitting and combining behind it.

The 32-byte master key is split with pycryptodome's reviewed :class:`Crypto.Protocol.SecretSharing.Shamir`
(GF(2^128), 16-byte secrets): each 16-byte half is split on its own, and share ``i`` carries the ``i``-th
share of both halves. No field arithmetic is written here.

A share is ``kss1-`` followed by lowercase base32 (no padding) of 49 bytes::

    version (1) = 1 | set id (8) | threshold (1) | shares (1) | index (1) | half 1 (16) | half 2 (16)
    | check (5) = SHA-256 of the 44 bytes before it, truncated

The **set id** is random per ``operator init`` and kept (with the threshold and share count, never a share)
in the keystore, so a share from another init is named as foreign, not combined into a wrong key. The
**check** makes a share self-checking: a typo is reported as an invalid share (a wrong share with a valid
check would need 2**40 tries). Base32 is case-insensitive and has no ``0``/``1``/``8``, so a share read
aloud or retyped is rarely ambiguous; whitespace and dashes after the prefix are ignored.

Nothing here logs or raises with share bytes: :class:`InvalidShareError` says what is wrong, never the share.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
import struct
from dataclasses import dataclass, field

from Crypto.Protocol.SecretSharing import Shamir

from app.core.secret_memory import secret_buffer

__all__ = [
    "MAX_SHARES",
    "SET_ID_SIZE",
    "SHARE_PREFIX",
    "InvalidShareError",
    "Share",
    "ShareParameters",
    "combine_shares",
    "decode_share",
    "encode_share",
    "split_master_key",
]

SHARE_PREFIX = "kss1-"
SET_ID_SIZE = 8
#: pycryptodome's Shamir takes share indexes 1..255; one byte holds them.
MAX_SHARES = 255
_HALF = 16
_VERSION = 1
_CHECK_SIZE = 5
_HEAD = struct.Struct(">B8sBBB")
_BODY_SIZE = _HEAD.size + 2 * _HALF
_SIZE = _BODY_SIZE + _CHECK_SIZE
_PARAMETERS = struct.Struct(">B8sBB")


class InvalidShareError(ValueError):
    """A share cannot be used; the message says why (malformed, mistyped, foreign...), never the share.

    Attributes:
        reason: a short machine-readable word: ``malformed``, ``checksum``, ``foreign``, ``duplicate``,
            ``mismatch`` (the shares do not reconstruct the keystore's master key), ``unsealed`` (the seal
            needs no share).
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True)
class ShareParameters:
    """A share set: its id, how many shares unseal (``threshold``), how many were made (``shares``).

    Public: stored in the keystore and shown by ``/v1/sys/seal-status``.

    Raises:
        ValueError: ``threshold`` or ``shares`` out of range (1 <= threshold <= shares <= 255), or a set id
            that is not 8 bytes.
    """

    set_id: bytes
    threshold: int
    shares: int

    def __post_init__(self) -> None:
        if len(self.set_id) != SET_ID_SIZE:
            raise ValueError(f"a share set id is {SET_ID_SIZE} bytes, got {len(self.set_id)}")
        if not 1 <= self.shares <= MAX_SHARES:
            raise ValueError(f"shares must be in 1 .. {MAX_SHARES}, got {self.shares}")
        if not 1 <= self.threshold <= self.shares:
            raise ValueError(f"threshold must be in 1 .. shares ({self.shares}), got {self.threshold}")

    def to_bytes(self) -> bytes:
        """The keystore row's layout: ``version | set id | threshold | shares``."""
        return _PARAMETERS.pack(_VERSION, self.set_id, self.threshold, self.shares)

    @classmethod
    def from_bytes(cls, data: bytes) -> ShareParameters:
        """Parse :meth:`to_bytes`.

        Raises:
            ValueError: another length or version, or values out of range.
        """
        if len(data) != _PARAMETERS.size:
            raise ValueError("the keystore's share parameters are corrupt")
        version, set_id, threshold, shares = _PARAMETERS.unpack(data)
        if version != _VERSION:
            raise ValueError(f"the keystore's share parameters have unknown version {version}")
        return cls(set_id, threshold, shares)


@dataclass(frozen=True)
class Share:
    """One decoded share: its set and index, and its two 16-byte parts (never in a ``repr``)."""

    parameters: ShareParameters
    index: int
    halves: tuple[bytes, bytes] = field(repr=False)


def split_master_key(master_key: bytes, threshold: int, shares: int) -> tuple[ShareParameters, list[str]]:
    """Split a 32-byte ``master_key`` into ``shares`` text shares, any ``threshold`` of which rebuild it.

    Raises:
        ValueError: ``master_key`` is not 32 bytes, or the counts are out of range.
    """
    if len(master_key) != 2 * _HALF:
        raise ValueError(f"the master key must be {2 * _HALF} bytes long, got {len(master_key)}")
    parameters = ShareParameters(secrets.token_bytes(SET_ID_SIZE), threshold, shares)
    first = Shamir.split(threshold, shares, master_key[:_HALF])
    second = Shamir.split(threshold, shares, master_key[_HALF:])
    texts = []
    for (index, part_one), (index_two, part_two) in zip(first, second, strict=True):
        assert index == index_two
        texts.append(encode_share(Share(parameters, index, (bytes(part_one), bytes(part_two)))))
    return parameters, texts


def encode_share(share: Share) -> str:
    """The text form of ``share`` (see the module docstring)."""
    parameters = share.parameters
    body = (
        _HEAD.pack(_VERSION, parameters.set_id, parameters.threshold, parameters.shares, share.index)
        + share.halves[0]
        + share.halves[1]
    )
    raw = body + hashlib.sha256(body).digest()[:_CHECK_SIZE]
    return SHARE_PREFIX + base64.b32encode(raw).decode("ascii").rstrip("=").lower()


def decode_share(text: str) -> Share:
    """Parse and check a share's text form.

    Raises:
        InvalidShareError: ``malformed`` (not a share: prefix, alphabet or length wrong) or ``checksum``
            (a mistyped share: its check does not match).
    """
    if not isinstance(text, str):
        raise InvalidShareError("malformed", "a share must be a string")
    cleaned = text.strip()
    if not cleaned.lower().startswith(SHARE_PREFIX):
        raise InvalidShareError("malformed", f"not a share: shares start with {SHARE_PREFIX!r}")
    encoded = "".join(cleaned[len(SHARE_PREFIX) :].split()).replace("-", "").upper()
    if not encoded.isascii() or not encoded.isalnum():
        raise InvalidShareError("malformed", "not a share: it holds characters outside base32")
    padded = encoded + "=" * (-len(encoded) % 8)
    try:
        raw = base64.b32decode(padded)
    except ValueError:
        raise InvalidShareError("malformed", "not a share: it is not base32 text") from None
    if len(raw) != _SIZE:
        raise InvalidShareError("malformed", "not a share: it has the wrong length (a character missing?)")
    if base64.b32encode(raw).decode("ascii").rstrip("=") != encoded:
        # The last character carries unused bits: a typo there may decode to the same bytes; refuse it too.
        raise InvalidShareError("checksum", "invalid share: its last character is not what it should be")
    body, check = raw[:_BODY_SIZE], raw[_BODY_SIZE:]
    if not secrets.compare_digest(hashlib.sha256(body).digest()[:_CHECK_SIZE], check):
        raise InvalidShareError("checksum", "invalid share: its check does not match (mistyped?)")
    version, set_id, threshold, shares, index = _HEAD.unpack_from(body)
    if version != _VERSION:
        raise InvalidShareError("malformed", f"invalid share: unknown share version {version}")
    try:
        parameters = ShareParameters(set_id, threshold, shares)
    except ValueError:
        raise InvalidShareError("malformed", "invalid share: its counts are out of range") from None
    if not 1 <= index <= shares:
        raise InvalidShareError("malformed", "invalid share: its index is out of range")
    halves = (body[_HEAD.size : _HEAD.size + _HALF], body[_HEAD.size + _HALF :])
    return Share(parameters, index, halves)


def combine_shares(shares: list[Share]) -> memoryview:
    """The 32-byte key that ``shares`` (distinct indexes, one set) rebuild, in locked memory.

    Each half is written straight into a :class:`~app.core.secret_memory.SecretBuffer` (a read-only view of
    it is returned, zeroed when the last view goes): no ``bytes`` object ever holds the whole key.

    Fewer shares than the threshold rebuild *some* key, not the master key: the caller checks the result
    against the keystore's check value.

    Raises:
        InvalidShareError: ``duplicate`` indexes, or ``foreign`` (shares of different sets).
    """
    if len({share.index for share in shares}) != len(shares):
        raise InvalidShareError("duplicate", "duplicate share: the same share was given twice")
    if len({share.parameters for share in shares}) > 1:
        raise InvalidShareError("foreign", "foreign share: the shares come from different inits")
    key = secret_buffer(32)
    view = key.view()
    view[:16] = Shamir.combine([(share.index, share.halves[0]) for share in shares])
    view[16:] = Shamir.combine([(share.index, share.halves[1]) for share in shares])
    return key.readonly()

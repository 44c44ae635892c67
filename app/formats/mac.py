"""HMACs under a key version: the per-version HMAC key, the tag's text form, signing and verification.

A key's versions hold AES key material (the sealed format's input key material). Rather than use that
material as an HMAC key too, each version's HMAC key is derived from it with HKDF-SHA256 (RFC 5869): no salt,
``info`` = ``b"keystream hmac key v1"``, 32 bytes, the same for every algorithm (HMAC-SHA384/512 take a
32-byte key as it is: RFC 2104 pads it to the block). The derivation runs in aescore's C core straight into
locked memory and only the two padded-key hash states are kept (:func:`hmac_states`), so no ``bytes``
object ever holds the HMAC key.

A tag's text is ``ks:v<version>:<base64 of the HMAC>``, like Vault Transit's ``vault:v<version>:...``; the
version tells :func:`verify` which key version to recompute it under. Verification compares in constant
time (:func:`hmac.compare_digest`).
"""

from __future__ import annotations

import base64
import binascii
import ctypes
import hashlib
import hmac
import re
from collections.abc import Callable
from typing import TYPE_CHECKING

import aescore
from app.core import base64_codec
from app.core.secret_memory import SLOT_SIZE, KeyMaterial, secret_buffer
from app.errors import BadRequestError

if TYPE_CHECKING:
    from _hashlib import HASH

#: ``info`` of the HKDF that derives a key version's HMAC key (a documented label: see docs/service-api.md).
HMAC_KEY_INFO = b"keystream hmac key v1"
#: Bytes of a version's HMAC key.
HMAC_KEY_SIZE = 32
#: The algorithms, by their API names (Vault's), and their hashlib constructors.
ALGORITHMS: dict[str, Callable[..., HASH]] = {
    "sha2-256": hashlib.sha256,
    "sha2-384": hashlib.sha384,
    "sha2-512": hashlib.sha512,
}
#: Text before the version number in a tag.
TAG_PREFIX = "ks:v"
_TAG_BODY = r"([1-9][0-9]{0,9}):([A-Za-z0-9+/]*={0,2})"
_INNER_PAD = 0x3636363636363636
_OUTER_PAD = 0x5C5C5C5C5C5C5C5C


def hmac_states(constructor: Callable[..., HASH], key: bytes | memoryview) -> tuple[HASH, HASH]:
    """HMAC's (RFC 2104) inner and outer hash states after the padded ``key``, for hash ``constructor``.

    A tag of ``message`` is ``outer.copy()`` updated with the digest of ``inner.copy()`` after ``message``.
    ``hmac.new`` takes ``bytes`` keys only; here the padded key (the key XOR a constant, as good as the key)
    is built in locked memory, in pieces of at most one slot (SHA-384/512 blocks are two), and zeroed at
    once; only the two hash states, from which the key cannot be read back, are kept.
    """
    inner, outer = constructor(), constructor()
    if len(key) > inner.block_size:
        key = constructor(key).digest()
    for start in range(0, inner.block_size, SLOT_SIZE):
        piece = secret_buffer(SLOT_SIZE)
        try:
            view = piece.view()
            part = key[start : start + SLOT_SIZE]
            view[: len(part)] = part
            # XORed 8 bytes at a time in place (a message's set-up on the sealed format's Python path).
            words = (ctypes.c_uint64 * (SLOT_SIZE // 8)).from_buffer(view)
            for index in range(len(words)):
                words[index] ^= _INNER_PAD
            inner.update(view)
            for index in range(len(words)):
                words[index] ^= _INNER_PAD ^ _OUTER_PAD
            outer.update(view)
            del words
            view.release()
        finally:
            piece.wipe()
    return inner, outer


def _signer(material: KeyMaterial, algorithm: str) -> tuple[HASH, HASH]:
    """The HMAC states of one version's HMAC key for ``algorithm``; the derived key is zeroed on return."""
    constructor = ALGORITHMS[algorithm]
    buffer = secret_buffer(HMAC_KEY_SIZE)
    try:
        view = buffer.view()
        aescore.hkdf_sha256_into(material, b"", HMAC_KEY_INFO, view)
        states = hmac_states(constructor, view)
        view.release()
    finally:
        buffer.wipe()
    return states


def check_algorithm(algorithm: str) -> str:
    """``algorithm`` when it is one of :data:`ALGORITHMS`.

    Raises:
        BadRequestError: any other name.
    """
    if algorithm not in ALGORITHMS:
        raise BadRequestError(f"algorithm must be one of {', '.join(ALGORITHMS)}; got {algorithm[:40]!r}")
    return algorithm


class Signer:
    """Computes HMACs of many inputs under one key version and algorithm (the key derived once)."""

    __slots__ = ("_inner", "_outer", "version")

    def __init__(self, material: KeyMaterial, version: int, algorithm: str) -> None:
        self._inner, self._outer = _signer(material, check_algorithm(algorithm))
        self.version = version

    def __repr__(self) -> str:
        return f"Signer(version={self.version})"

    def digest(self, data: bytes) -> bytes:
        """The raw HMAC of ``data``."""
        inner = self._inner.copy()
        inner.update(data)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.digest()

    def tag(self, data: bytes, prefix: str = TAG_PREFIX) -> str:
        """The tag text of ``data``: ``ks:v<version>:<base64>`` (the Transit API passes ``vault:v``)."""
        return f"{prefix}{self.version}:{base64_codec.encode(self.digest(data))}"

    def verify(self, data: bytes, digest: bytes) -> bool:
        """Whether ``digest`` is the HMAC of ``data`` (constant-time comparison)."""
        return hmac.compare_digest(self.digest(data), digest)


def parse_tag(text: str, prefix: str = TAG_PREFIX) -> tuple[int, bytes]:
    """The version and raw HMAC of a tag's text, ``<prefix><version>:<base64>`` (``ks:v`` natively).

    Raises:
        BadRequestError: another shape, or a digest of no algorithm's length.
    """
    shape = f"hmac must look like {prefix}<version>:<base64>"
    match = re.fullmatch(re.escape(prefix) + _TAG_BODY, text)
    if match is None:
        raise BadRequestError(shape)
    try:
        digest = base64.b64decode(match.group(2), validate=True)
    except binascii.Error:
        raise BadRequestError(shape) from None
    if len(digest) not in (32, 48, 64):
        raise BadRequestError("hmac's digest has the length of no supported algorithm")
    return int(match.group(1)), digest

"""Vault Transit's ciphertext layout for ``aes256-gcm96`` / ``aes128-gcm96`` keys, and its ``vault:`` texts.

A Transit ciphertext is ``vault:v<version>:`` followed by the standard base64 of
``nonce (12 bytes) || AES-GCM ciphertext || tag (16 bytes)``, made with the key version's material used
directly as the AES key and the request's ``associated_data`` (if any) as GCM's additional data. That is
what Vault and OpenBao do for keys that are not derived, so a ciphertext they made decrypts here once the
version's material has been imported, and the other way round.

It is not Keystream's native sealed format (Tink's streaming AEAD, with a per-message key derived by HKDF
and a header naming the key): this layout exists only for compatibility. Using the material as the key
itself means each random 96-bit nonce is drawn under the same AES key, so one version should seal fewer
than 2**32 messages (NIST SP 800-38D's bound for random nonces) — rotate long before that, as with Vault.

AES-GCM is pyca/cryptography's :class:`~cryptography.hazmat.primitives.ciphers.aead.AESGCM` (OpenSSL);
nonces come from :func:`os.urandom`. The material is read from the key cache's locked memory, but
``AESGCM`` keeps its own copy of the key (and OpenSSL its schedule) in ordinary memory for the life of a
:class:`TransitCipher`, one request: unlike the native formats' schedules, that copy is not locked or left
out of core dumps by Keystream, and is freed, not zeroed, by the library.

A ``derived`` key's AES key is the per-context key :func:`~app.formats.derivation.derive_transit` makes as
Vault does; with ``convergent_encryption`` (Vault's convergent version 3) the derivation is 32 bytes longer
and those 32 bytes are an HMAC-SHA256 key whose HMAC of the plaintext, cut to 12 bytes, is the nonce: the
same plaintext under the same context and version gives the same ciphertext, as in Vault.

HMACs made through the Transit API use :mod:`app.formats.mac`'s derived HMAC key with the text
``vault:v<version>:<base64>`` (:data:`HMAC_PREFIX`); Vault's HMAC keys are separate random keys, so the
values differ from Vault's for the same material.
"""

from __future__ import annotations

import binascii
import hashlib
import os
import re

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from app.core import base64_codec
from app.core.secret_memory import KeyMaterial
from app.errors import BadRequestError, DecryptionFailedError
from app.formats.mac import hmac_states

#: Bytes of the random nonce at the start of a ciphertext (GCM's 96-bit IV: the ``96`` in ``gcm96``).
NONCE_SIZE = 12
#: Bytes of the GCM tag at the end.
TAG_SIZE = 16
#: Text before the version number of a Transit ciphertext or HMAC.
PREFIX = "vault:v"
#: Text before the version number of an HMAC made through the Transit API (the same as a ciphertext's).
HMAC_PREFIX = PREFIX

_TEXT = re.compile(r"vault:v([1-9][0-9]{0,9}):([A-Za-z0-9+/]*={0,2})")
#: The start of :data:`_TEXT`, up to its base64.
_HEAD = re.compile(r"vault:v([1-9][0-9]{0,9}):")
#: The base64 part of :data:`_TEXT`.
_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def parse_text(text: str, what: str = "ciphertext") -> tuple[int, bytes]:
    """The version and decoded bytes of a ``vault:v<version>:<base64>`` text.

    Raises:
        BadRequestError: ``text`` has another shape or its base64 is malformed (the message names ``what``,
            never quotes the text).
    """
    version, encoded = split_text(text, what)
    return version, decode_text(encoded, what)


def split_text(text: str, what: str = "ciphertext") -> tuple[int, str]:
    """The version and the rest of a ``vault:v<version>:<base64>`` text, not decoded or checked yet: the
    first half of :func:`parse_text`, for a caller that needs the version before the bytes. The rest is
    checked by :func:`decode_text`, so a text is read once, not once by a pattern and once by the decoder.

    Raises:
        BadRequestError: ``text`` does not start as such a text does (the message names ``what``).
    """
    match = _HEAD.match(text)
    if match is None:
        raise BadRequestError(f"invalid {what}: expected vault:v<version>:<base64>")
    return int(match.group(1)), text[match.end() :]


def decode_text(encoded: str, what: str = "ciphertext") -> bytes:
    """The bytes of the base64 :func:`split_text` returned: the second half of :func:`parse_text`.

    What strict base64 decoding accepts the text's pattern (:data:`_TEXT`) allows too, once padding longer
    than two characters is refused, so the pattern runs only when decoding fails, to tell a text of another
    shape from malformed base64 as ``_TEXT.fullmatch`` then ``b64decode(validate=True)`` did.

    Raises:
        BadRequestError: ``encoded`` is not of the pattern's shape, or its base64 is malformed (the message
            names ``what``).
    """
    try:
        raw = base64_codec.decode(encoded)  # binascii's strict reading, faster
    except (binascii.Error, ValueError):
        raw = None
    # Strict decoding also takes padding past a whole group ("QUJD==="), which the pattern refuses.
    if raw is None or encoded.endswith("==="):
        if _BASE64.fullmatch(encoded) is None:
            raise BadRequestError(f"invalid {what}: expected vault:v<version>:<base64>")
        raise BadRequestError(f"invalid {what}: malformed base64")
    return raw


def format_text(version: int, raw: bytes) -> str:
    """``vault:v<version>:<base64 of raw>``."""
    return f"{PREFIX}{version}:{base64_codec.encode(raw)}"


class TransitCipher:
    """AES-GCM in Transit's layout under one key version's material (used directly as the AES key), or a
    derived key's per-context key.

    ``nonce_key`` (a convergent key's, 32 bytes) makes each nonce the first 12 bytes of HMAC-SHA256 of the
    plaintext under it instead of random bytes; only its HMAC states are kept.

    Raises (construction):
        ValueError: the material is not 16, 24 or 32 bytes.
    """

    __slots__ = ("_aead", "_nonce_states", "version")

    def __init__(self, material: KeyMaterial, version: int, nonce_key: KeyMaterial | None = None) -> None:
        self._aead = AESGCM(material)
        self._nonce_states = None if nonce_key is None else hmac_states(hashlib.sha256, nonce_key)
        self.version = version

    def __repr__(self) -> str:
        return f"TransitCipher(version={self.version})"

    def _nonce(self, plaintext: bytes) -> bytes:
        """A random nonce, or a convergent key's HMAC of ``plaintext`` cut to :data:`NONCE_SIZE`."""
        if self._nonce_states is None:
            return os.urandom(NONCE_SIZE)
        inner, outer = (state.copy() for state in self._nonce_states)
        inner.update(plaintext)
        outer.update(inner.digest())
        return outer.digest()[:NONCE_SIZE]

    def encrypt(self, plaintext: bytes, associated_data: bytes | None) -> str:
        """``vault:v<version>:base64(nonce || ciphertext || tag)`` of ``plaintext`` with a fresh random
        nonce (a convergent key's: derived from the plaintext)."""
        nonce = self._nonce(plaintext)
        return format_text(
            self.version, nonce + self._aead.encrypt(nonce, plaintext, associated_data or None)
        )

    def decrypt(self, raw: bytes, associated_data: bytes | None) -> bytes:
        """The plaintext of ``raw`` (a ciphertext's decoded bytes: nonce, ciphertext, tag).

        Raises:
            DecryptionFailedError: too short to hold a nonce and a tag, or the tag does not verify (wrong
                key version material, associated data, or tampering).
        """
        if len(raw) < NONCE_SIZE + TAG_SIZE:
            raise DecryptionFailedError("invalid ciphertext: too short to hold a nonce and a tag")
        try:
            return self._aead.decrypt(raw[:NONCE_SIZE], raw[NONCE_SIZE:], associated_data or None)
        except InvalidTag:
            raise DecryptionFailedError("cipher: message authentication failed") from None

"""Deterministic encryption: AES-SIV (RFC 5297) as Google Tink's ``DeterministicAead``, byte for byte.

A key of type ``aes256-siv`` holds 64 bytes per version: RFC 5297's ``K1 || K2``, the first 32 bytes the
S2V (AES-CMAC) key, the last 32 the AES-CTR key; that is also Tink's ``AesSivKey.key_value``. One message is::

    ciphertext = SIV (16 bytes) || AES-CTR(K2, SIV with bits 31 and 63 cleared, plaintext)
    SIV        = S2V(K1, associated_data, plaintext)

with exactly one associated data component, empty or not: Tink's ``encrypt_deterministically(plaintext,
associated_data)``, whose RAW output prefix adds nothing in front. The same plaintext with the same
associated data under the same version always gives the same ciphertext: that is the point (equality
look-ups on encrypted columns) and the cost (whoever sees the ciphertexts sees which plaintexts are equal).
Nothing else leaks: the SIV authenticates the message and its associated data, and without the key a
ciphertext says no more than its length.

A ciphertext names no key version: decryption tries the candidate versions newest first, as the sealed
format's does (:func:`open_all`), and says which version opened it. So the bytes Keystream returns are the
bytes Tink returns for a RAW key with that version's material, and the other way round.

AES-SIV is pyca/cryptography's :class:`~cryptography.hazmat.primitives.ciphers.aead.AESSIV` (OpenSSL); it
is not written here. The material is read from the key cache's locked memory, but ``AESSIV`` keeps its own
copy of the key (and OpenSSL its schedules) in ordinary memory for the life of a :class:`SivCipher`, one
request: that copy is not locked or left out of core dumps by Keystream, and is freed, not zeroed, by the
library (as with :mod:`app.formats.transit`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESSIV

from app.core.secret_memory import KeyMaterial
from app.errors import DecryptionFailedError

from .sealed.messages import newest_first

__all__ = [
    "KEY_SIZE",
    "KEY_SIZES",
    "KEY_TYPE",
    "SIV_SIZE",
    "Opened",
    "SivCipher",
    "open_all",
    "seal_all",
]

#: The key type whose versions are AES-SIV keys.
KEY_TYPE = "aes256-siv"
#: Bytes of an ``aes256-siv`` version: two AES-256 keys (Tink's only AES-SIV key size).
KEY_SIZE = 64
#: Key sizes AES-SIV is defined for (two AES-128, AES-192 or AES-256 keys); the key type uses
#: :data:`KEY_SIZE`, RFC 5297's test vectors the 32-byte one.
KEY_SIZES = (32, 48, 64)
#: Bytes of the synthetic IV in front of every ciphertext (also its authentication tag).
SIV_SIZE = 16

#: ``(plaintext, key version)`` of a ciphertext that opened, else why it did not.
Opened = tuple[bytes, int] | DecryptionFailedError


class SivCipher:
    """AES-SIV under one key version's material, in Tink's ``DeterministicAead`` layout.

    Raises (construction):
        TypeError: ``material`` is not bytes-like.
        ValueError: ``material`` is not 32, 48 or 64 bytes long (the message gives the length).
    """

    __slots__ = ("_aead",)

    key_sizes = KEY_SIZES

    def __init__(self, material: KeyMaterial | bytes) -> None:
        if not isinstance(material, bytes | bytearray | memoryview):
            raise TypeError(f"key material must be bytes-like, got {type(material).__name__}")
        size = memoryview(material).nbytes
        if size not in KEY_SIZES:
            raise ValueError(f"AES-SIV key material must be 32, 48 or 64 bytes long, got {size} bytes")
        self._aead = AESSIV(material)

    def __repr__(self) -> str:
        return "SivCipher()"

    def encrypt(self, plaintext: bytes, associated_data: bytes) -> bytes:
        """``SIV || ciphertext`` of ``plaintext`` bound to ``associated_data`` (one component, even when
        empty, as Tink's ``encrypt_deterministically``)."""
        return self._aead.encrypt(plaintext, [associated_data])

    def decrypt(self, ciphertext: bytes, associated_data: bytes) -> bytes | None:
        """The plaintext of ``ciphertext``, or ``None`` when it does not authenticate under this key with
        ``associated_data`` (or is shorter than the SIV)."""
        if len(ciphertext) < SIV_SIZE:
            return None
        try:
            return self._aead.decrypt(ciphertext, [associated_data])
        except InvalidTag:
            return None


def seal_all(material: KeyMaterial, data: Sequence[bytes], associated_data: Sequence[bytes]) -> list[bytes]:
    """Encrypt each of ``data`` with the associated data at the same index under one version's ``material``.

    Raises:
        TypeError, ValueError: as :class:`SivCipher`; ``data`` and ``associated_data`` differ in length.
    """
    cipher = SivCipher(material)
    return [cipher.encrypt(item, ad) for item, ad in zip(data, associated_data, strict=True)]


def _short(length: int) -> str:
    return (
        f"deterministic ciphertext is truncated: {length} bytes, shorter than the {SIV_SIZE}-byte "
        "synthetic IV"
    )


def _no_key(versions: Iterable[int]) -> str:
    return (
        f"deterministic ciphertext does not authenticate under any allowed key version (tried "
        f"{newest_first(versions)}): wrong key, wrong associated data, or a tampered ciphertext"
    )


def open_all(
    candidates: Sequence[tuple[int, KeyMaterial]],
    ciphertexts: Sequence[bytes],
    associated_data: Sequence[bytes],
    *,
    more_candidates: Callable[[], Iterable[tuple[int, KeyMaterial]]] | None = None,
) -> list[Opened]:
    """Open each ciphertext (with the associated data at the same index) under the first of ``candidates``
    (``(version, material)``, newest first) it authenticates under.

    ``more_candidates`` is called at most once per call, when some ciphertext authenticates under none of
    ``candidates``; only those are tried again, under the versions it adds.

    Returns:
        Per ciphertext ``(plaintext, version)``, or a :class:`~app.errors.DecryptionFailedError` saying why
        it did not open (its length, or the versions tried; never any of its bytes).

    Raises:
        TypeError, ValueError: as :class:`SivCipher`; no candidates; ``ciphertexts`` and
            ``associated_data`` differ in length.
        Exception: whatever ``more_candidates`` raises.
    """
    if not candidates:
        raise ValueError("candidates must hold at least one (version, key material) pair")
    ciphers = [(version, SivCipher(material)) for version, material in candidates]
    tried = [version for version, _ in candidates]
    results: list[Opened | None] = []
    for ciphertext, ad in zip(ciphertexts, associated_data, strict=True):
        results.append(
            DecryptionFailedError(_short(len(ciphertext)))
            if len(ciphertext) < SIV_SIZE
            else _first_opening(ciphers, ciphertext, ad)
        )
    missing = [index for index, result in enumerate(results) if result is None]
    if missing and more_candidates is not None:
        known = list(candidates)
        fresh = [(version, SivCipher(m)) for version, m in more_candidates() if (version, m) not in known]
        tried += [version for version, _ in fresh]
        for index in missing:
            results[index] = _first_opening(fresh, ciphertexts[index], associated_data[index])
    return [DecryptionFailedError(_no_key(tried)) if result is None else result for result in results]


def _first_opening(
    ciphers: Sequence[tuple[int, SivCipher]], ciphertext: bytes, associated_data: bytes
) -> tuple[bytes, int] | None:
    """``(plaintext, version)`` under the first of ``ciphers`` that opens ``ciphertext``, else ``None``."""
    for version, cipher in ciphers:
        plaintext = cipher.decrypt(ciphertext, associated_data)
        if plaintext is not None:
            return plaintext, version
    return None

"""The keystore interface: metadata records and the abstract :class:`KeyStore`.

A keystore keeps named AES keys with numbered versions (rotation adds a version; old versions keep decrypting
down to ``min_decryption_version``) and the service's API tokens. Material is stored only wrapped under the
master key (see :mod:`app.keystore.master`) and leaves the store unwrapped only through
:meth:`KeyStore.key_material`. Token secrets are stored only as hashes.

The interface is deliberately small so that a second implementation (PostgreSQL, for several replicas) needs
nothing but these methods; validation lives here, in plain functions, so every implementation applies the same
rules and raises the same errors.
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from app.errors import BadRequestError

__all__ = [
    "ALLOWED_SEGMENT_SIZES",
    "DEFAULT_SEGMENT_SIZE",
    "KEY_NAME_PATTERN",
    "KEY_TYPES",
    "MAX_SEGMENT_SIZE",
    "MIN_SEGMENT_SIZE",
    "TOKEN_ID_PATTERN",
    "KeyInfo",
    "KeyStore",
    "KeyVersionInfo",
    "TokenRecord",
    "check_key_name",
    "check_key_type",
    "check_segment_size",
    "check_token_id",
    "key_type_for_material",
    "utc_now",
]

#: Key type -> key size in bytes.
KEY_TYPES: dict[str, int] = {"aes128": 16, "aes192": 24, "aes256": 32}

#: Smallest ciphertext segment size a key may have (Tink accepts this for every derived key size).
MIN_SEGMENT_SIZE = 4096
#: Largest ciphertext segment size: a decrypting server buffers one segment, so this bounds its memory.
MAX_SEGMENT_SIZE = 1 << 24
#: Default ciphertext segment size, as Tink's ``AES256_CTR_HMAC_SHA256_1MB``.
DEFAULT_SEGMENT_SIZE = 1 << 20
#: Every allowed segment size (``size in ALLOWED_SEGMENT_SIZES``).
ALLOWED_SEGMENT_SIZES = range(MIN_SEGMENT_SIZE, MAX_SEGMENT_SIZE + 1)

#: Key names: safe in URLs, file names and logs.
KEY_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
#: Token ids (the public half of a token): URL-safe base64 alphabet plus ``.``, at most 128 characters.
TOKEN_ID_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,128}")


def utc_now() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def check_key_name(name: object) -> str:
    """Return ``name`` if it is a valid key name.

    Raises:
        BadRequestError: ``name`` is not a str matching ``^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$``.
    """
    if not isinstance(name, str) or KEY_NAME_PATTERN.fullmatch(name) is None:
        shown = repr(name)[:140] if isinstance(name, str) else f"a {type(name).__name__}"
        raise BadRequestError(
            f"invalid key name {shown}: use 1 to 128 characters from A-Z a-z 0-9 _ . -, "
            "starting with a letter or digit"
        )
    return name


def check_token_id(token_id: object) -> str:
    """Return ``token_id`` if it is a valid token id.

    Raises:
        BadRequestError: ``token_id`` is not a str of 1 to 128 characters from ``A-Z a-z 0-9 _ . -``.
    """
    if not isinstance(token_id, str) or TOKEN_ID_PATTERN.fullmatch(token_id) is None:
        raise BadRequestError("invalid token id: use 1 to 128 characters from A-Z a-z 0-9 _ . -")
    return token_id


def check_key_type(key_type: object) -> str:
    """Return ``key_type`` if it is one of :data:`KEY_TYPES`.

    Raises:
        BadRequestError: any other value; the message lists the allowed types.
    """
    if not isinstance(key_type, str) or key_type not in KEY_TYPES:
        allowed = ", ".join(KEY_TYPES)
        raise BadRequestError(f"invalid key type {key_type!r}: allowed types are {allowed}")
    return key_type


def check_segment_size(segment_size: object) -> int:
    """Return ``segment_size`` if it is an int in :data:`ALLOWED_SEGMENT_SIZES`.

    Raises:
        BadRequestError: not an int, or outside 4096..16777216 (16 MiB).
    """
    if isinstance(segment_size, bool) or not isinstance(segment_size, int):
        raise BadRequestError(f"segment_size must be an integer, got {type(segment_size).__name__}")
    if segment_size not in ALLOWED_SEGMENT_SIZES:
        raise BadRequestError(
            f"segment_size must be between {MIN_SEGMENT_SIZE} and {MAX_SEGMENT_SIZE} bytes "
            f"(16 MiB), got {segment_size}"
        )
    return segment_size


def key_type_for_material(material: object) -> tuple[str, bytes]:
    """Return the key type that fits imported ``material`` and the material as ``bytes``.

    Raises:
        BadRequestError: ``material`` is not bytes-like, or not 16, 24 or 32 bytes long. The message gives the
            length, never the bytes.
    """
    if not isinstance(material, bytes | bytearray | memoryview):
        raise BadRequestError(f"key material must be bytes, got {type(material).__name__}")
    data = bytes(material)
    for key_type, size in KEY_TYPES.items():
        if len(data) == size:
            return key_type, data
    allowed = ", ".join(f"{size} ({key_type})" for key_type, size in KEY_TYPES.items())
    raise BadRequestError(f"imported key must be {allowed} bytes long, got {len(data)} bytes")


def check_bool(field_name: str, value: object) -> bool:
    """Return ``value`` if it is a bool.

    Raises:
        BadRequestError: any other type (``1`` and ``"true"`` included).
    """
    if not isinstance(value, bool):
        raise BadRequestError(f"{field_name} must be a boolean, got {type(value).__name__}")
    return value


@dataclass(frozen=True)
class KeyVersionInfo:
    """One version of a key: its number (1, 2, ...) and when it was created."""

    version: int
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The API shape ``{"version": 1, "created_at": "...Z"}``."""
        return {"version": self.version, "created_at": _iso(self.created_at)}


@dataclass(frozen=True)
class KeyInfo:
    """Metadata of a key. Never carries material.

    ``latest_version`` is used to encrypt; decryption accepts versions ``min_decryption_version`` ..
    ``latest_version``. ``segment_size`` is the ciphertext segment size of the sealed format, fixed at
    creation so that a change of settings never strands old ciphertexts.
    """

    name: str
    key_type: str
    segment_size: int
    deletion_allowed: bool
    min_decryption_version: int
    latest_version: int
    imported: bool
    created_at: datetime
    updated_at: datetime
    versions: tuple[KeyVersionInfo, ...]

    def to_json(self) -> dict[str, Any]:
        """The API's key metadata shape (times as ISO-8601 UTC with a ``Z``)."""
        return {
            "name": self.name,
            "type": self.key_type,
            "segment_size": self.segment_size,
            "deletion_allowed": self.deletion_allowed,
            "min_decryption_version": self.min_decryption_version,
            "latest_version": self.latest_version,
            "imported": self.imported,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
            "versions": [version.to_json() for version in self.versions],
        }


@dataclass(frozen=True)
class TokenRecord:
    """A stored API token: the public id, the hash of its secret (never the secret), scopes and key patterns.

    The keystore stores and returns these fields as given; what they mean (hash function, scope names,
    pattern syntax) is decided by ``app.services.security``.
    """

    token_id: str
    secret_hash: bytes = field(repr=False)
    scopes: tuple[str, ...]
    key_patterns: tuple[str, ...]
    description: str
    created_at: datetime


class KeyStore(abc.ABC):
    """Named AES keys with versions, and API tokens. Thread-safe; every change is one transaction.

    Implementations validate with the ``check_*`` functions of this module and raise the errors of
    :mod:`app.errors` named below. No error message, log line or ``repr`` contains key material.
    """

    @abc.abstractmethod
    def create_key(
        self,
        name: str,
        key_type: str = "aes256",
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        deletion_allowed: bool = False,
    ) -> KeyInfo:
        """Create key ``name`` with a random version 1 (``secrets.token_bytes``).

        Raises:
            BadRequestError: invalid name, key type or segment size.
            KeyExistsError: a key with that name exists.
        """

    @abc.abstractmethod
    def import_key(
        self,
        name: str,
        material: bytes,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        deletion_allowed: bool = False,
    ) -> KeyInfo:
        """Create key ``name`` whose version 1 is ``material``; the type follows from its length.

        Raises:
            BadRequestError: invalid name or segment size, or material not 16, 24 or 32 bytes long.
            KeyExistsError: a key with that name exists.
        """

    @abc.abstractmethod
    def get_key(self, name: str) -> KeyInfo:
        """Return the metadata of key ``name``.

        Raises:
            BadRequestError: invalid name.
            KeyNotFoundError: no such key.
        """

    @abc.abstractmethod
    def list_keys(self) -> list[KeyInfo]:
        """Return the metadata of every key, ordered by name."""

    @abc.abstractmethod
    def rotate_key(self, name: str) -> KeyInfo:
        """Add a new random version to key ``name``; it becomes ``latest_version``.

        Raises:
            KeyNotFoundError: no such key.
        """

    @abc.abstractmethod
    def update_key(
        self,
        name: str,
        *,
        min_decryption_version: int | None = None,
        deletion_allowed: bool | None = None,
    ) -> KeyInfo:
        """Change the policy of key ``name``; ``None`` leaves a field as it is.

        Raises:
            KeyNotFoundError: no such key.
            BadRequestError: ``min_decryption_version`` outside 1..``latest_version``, or wrong types.
        """

    @abc.abstractmethod
    def delete_key(self, name: str) -> None:
        """Delete key ``name`` and every version of it.

        Raises:
            KeyNotFoundError: no such key.
            DeletionNotAllowedError: the key's ``deletion_allowed`` is false.
        """

    @abc.abstractmethod
    def key_material(self, name: str, version: int) -> bytes:
        """Return the unwrapped material of one version of a key.

        The only way material leaves the store. Callers keep it out of logs and errors.

        Raises:
            KeyNotFoundError: no such key.
            KeyVersionNotFoundError: the key has no such version.
            KeyUnwrapError: the stored material does not authenticate under the master key.
        """

    @abc.abstractmethod
    def create_token(self, record: TokenRecord) -> None:
        """Store a token.

        Raises:
            BadRequestError: invalid token id or field types.
            ConflictError: a token with that id exists.
        """

    @abc.abstractmethod
    def get_token(self, token_id: str) -> TokenRecord:
        """Return the token ``token_id``.

        Raises:
            TokenNotFoundError: no such token.
        """

    @abc.abstractmethod
    def list_tokens(self) -> list[TokenRecord]:
        """Return every token, oldest first."""

    @abc.abstractmethod
    def delete_token(self, token_id: str) -> None:
        """Delete the token ``token_id``.

        Raises:
            TokenNotFoundError: no such token.
        """

    @abc.abstractmethod
    def count_tokens(self) -> int:
        """Return the number of stored tokens (0 on first start: the service then creates the root token)."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections. Idempotent; other methods raise ``ServiceUnavailableError`` afterwards."""

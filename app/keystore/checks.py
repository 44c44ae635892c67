"""The keystore's rules for names, key types, schemes, segment sizes and flags: one set for all keystores.

Each ``check_*`` returns the value when it is valid and raises :class:`~app.errors.BadRequestError` naming the
field and what is allowed (never echoing key material) when it is not.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from datetime import UTC, datetime

from app.core.schemes import SCHEMES
from app.core.token_format import MAX_TOKEN_TTL_SECONDS, MIN_TOKEN_TTL_SECONDS
from app.errors import BadRequestError

from .records import KeyInfo, KeyOptions, KeyPolicy, TokenRecord

__all__ = [
    "ALLOWED_SEGMENT_SIZES",
    "DEFAULT_SEGMENT_SIZE",
    "IMPORTED_KEY_TYPES",
    "KEY_NAME_PATTERN",
    "KEY_TYPES",
    "MAX_METADATA_ENTRIES",
    "MAX_METADATA_VALUE_LENGTH",
    "MAX_SEGMENT_SIZE",
    "MIN_SEGMENT_SIZE",
    "TOKEN_ID_PATTERN",
    "check_bool",
    "check_integer",
    "check_key_name",
    "check_key_options",
    "check_key_type",
    "check_metadata",
    "check_min_decryption_version",
    "check_one_way_flags",
    "check_scheme",
    "check_segment_size",
    "check_token_expiry",
    "check_token_id",
    "check_token_record",
    "check_trim_version",
    "check_version_material",
    "key_type_for_material",
]

#: Key type -> key size in bytes. ``aes256-siv`` is AES-SIV (RFC 5297) with two 32-byte AES keys, for
#: deterministic encryption.
KEY_TYPES: dict[str, int] = {"aes128": 16, "aes192": 24, "aes256": 32, "aes256-siv": 64}
#: The key types an imported key's type is told from by its length alone: AES keys; an ``aes256-siv`` key
#: is never guessed from 64 bytes.
IMPORTED_KEY_TYPES: dict[str, int] = {"aes128": 16, "aes192": 24, "aes256": 32}

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
#: Most entries a token's ``metadata`` holds, and the longest key and value (characters).
MAX_METADATA_ENTRIES = 32
MAX_METADATA_KEY_LENGTH = 64
MAX_METADATA_VALUE_LENGTH = 512
#: Token ids (the public half of a token): URL-safe base64 alphabet plus ``.``, at most 128 characters.
TOKEN_ID_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,128}")


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


def check_scheme(scheme: object) -> str:
    """Return ``scheme`` if it is one of :data:`app.core.schemes.SCHEMES`.

    Raises:
        BadRequestError: any other value; the message lists the allowed schemes.
    """
    if not isinstance(scheme, str) or scheme not in SCHEMES:
        shown = repr(scheme)[:40] if isinstance(scheme, str) else f"a {type(scheme).__name__}"
        raise BadRequestError(f"invalid scheme {shown}: allowed schemes are {', '.join(SCHEMES)}")
    return scheme


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


def _material_view(material: object) -> memoryview:
    """``material`` as a flat read-only view, read in place: no ``bytes`` copy of key material is made (an
    imported version arrives in locked memory, :func:`~app.core.master_key_format.decode_secret_base64`).

    Raises:
        BadRequestError: ``material`` is not bytes-like.
    """
    if not isinstance(material, bytes | bytearray | memoryview):
        raise BadRequestError(f"key material must be bytes, got {type(material).__name__}")
    return memoryview(material).cast("B").toreadonly()


def key_type_for_material(material: object, key_type: str | None = None) -> tuple[str, memoryview]:
    """Return the key type that fits imported ``material`` and the material as a read-only view of it.

    ``key_type`` given: it must be one of :data:`KEY_TYPES` and ``material`` as long as it says (the only way
    to import an ``aes256-siv`` key, whose 64 bytes are never guessed); else the AES type of that length.

    Raises:
        BadRequestError: ``material`` is not bytes-like, ``key_type`` is unknown, or the length fits no AES
            type (16, 24 or 32 bytes) or not ``key_type``. The message gives the length, never the bytes.
    """
    data = _material_view(material)
    if key_type is not None:
        size = KEY_TYPES[check_key_type(key_type)]
        if len(data) != size:
            raise BadRequestError(
                f"an imported {key_type} key must be {size} bytes long, got {len(data)} bytes"
            )
        return key_type, data
    for key_type, size in IMPORTED_KEY_TYPES.items():
        if len(data) == size:
            return key_type, data
    allowed = ", ".join(f"{size} ({key_type})" for key_type, size in IMPORTED_KEY_TYPES.items())
    raise BadRequestError(f"imported key must be {allowed} bytes long, got {len(data)} bytes")


def check_version_material(name: str, key_type: str, material: object) -> memoryview:
    """Return ``material`` as a read-only view of it if it fits a new version of key ``name``, whose type is
    ``key_type``.

    Raises:
        BadRequestError: ``material`` is not bytes-like, or its length is not the size of ``key_type``
            (aes128: 16, aes192: 24, aes256: 32, aes256-siv: 64). The message gives the lengths, never the
            bytes.
    """
    data = _material_view(material)
    size = KEY_TYPES[key_type]
    if len(data) != size:
        raise BadRequestError(
            f"key {name!r} is {key_type}: a new version must be {size} bytes long, got {len(data)} bytes"
        )
    return data


def check_trim_version(name: str, value: object, min_decryption_version: int) -> int:
    """Return ``value`` if versions below it of key ``name`` may be deleted (1 .. ``min_decryption_version``).

    Raises:
        BadRequestError: not an int, or outside that range; the message gives the range.
    """
    check_integer("min_available_version", value)
    assert isinstance(value, int)
    if not 1 <= value <= min_decryption_version:
        raise BadRequestError(
            f"min_available_version must be between 1 and the min_decryption_version "
            f"({min_decryption_version}) of key {name!r}, got {value}"
        )
    return value


def check_bool(field_name: str, value: object) -> bool:
    """Return ``value`` if it is a bool.

    Raises:
        BadRequestError: any other type (``1`` and ``"true"`` included).
    """
    if not isinstance(value, bool):
        raise BadRequestError(f"{field_name} must be a boolean, got {type(value).__name__}")
    return value


def check_key_options(options: object) -> KeyOptions:
    """Return ``options`` if it is a :class:`~app.keystore.records.KeyOptions` of bools that fit together.

    Raises:
        BadRequestError: not a ``KeyOptions``, a flag that is not a bool, or ``convergent_encryption`` without
            ``derived`` (equal ciphertexts are only ever made under one context, as in Vault).
    """
    if not isinstance(options, KeyOptions):
        raise BadRequestError(f"key options must be KeyOptions, got {type(options).__name__}")
    for field_name, value in options.to_json().items():
        check_bool(field_name, value)
    if options.convergent_encryption and not options.derived:
        raise BadRequestError("convergent_encryption requires derived: create the key with derived true")
    return options


def check_one_way_flags(info: KeyInfo, policy: KeyPolicy) -> KeyPolicy:
    """Return ``policy`` if it turns neither ``exportable`` nor ``allow_plaintext_backup`` of key ``info``
    off: once material may have left, saying it cannot would be a false promise (Vault's rule too).

    Raises:
        BadRequestError: ``policy`` turns one of them from true to false.
    """
    for field_name, now, wanted in (
        ("exportable", info.options.exportable, policy.exportable),
        ("allow_plaintext_backup", info.options.allow_plaintext_backup, policy.allow_plaintext_backup),
    ):
        if now and not wanted:
            raise BadRequestError(f"{field_name} cannot be turned off once it is on (key {info.name!r})")
    return policy


def check_integer(field_name: str, value: object) -> int:
    """Return ``value`` if it is an int (``bool`` excluded).

    Raises:
        BadRequestError: any other type.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequestError(f"{field_name} must be an integer, got {type(value).__name__}")
    return value


def check_min_decryption_version(name: str, value: int, latest_version: int, oldest_version: int = 1) -> int:
    """Return ``value`` if it is a version key ``name`` has (``oldest_version`` .. ``latest_version``).

    ``oldest_version`` is above 1 once older versions were trimmed (deleted for good): they cannot decrypt.

    Raises:
        BadRequestError: outside that range; the message gives the range.
    """
    if not oldest_version <= value <= latest_version:
        if oldest_version > 1:
            raise BadRequestError(
                f"min_decryption_version must be between the oldest remaining version ({oldest_version}; "
                f"older ones were trimmed) and the latest version ({latest_version}) of key {name!r}, "
                f"got {value}"
            )
        raise BadRequestError(
            f"min_decryption_version must be between 1 and the latest version ({latest_version}) of key "
            f"{name!r}, got {value}"
        )
    return value


def _string_tuple(field_name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, tuple | list):
        raise BadRequestError(f"{field_name} must be a tuple of strings, got {type(value).__name__}")
    if not all(isinstance(item, str) for item in value):
        raise BadRequestError(f"{field_name} must contain only strings")
    return tuple(value)


def _utc(moment: datetime) -> datetime:
    return (moment if moment.tzinfo else moment.replace(tzinfo=UTC)).astimezone(UTC)


def _optional_time(field_name: str, value: object) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime):
        raise BadRequestError(f"{field_name} must be a datetime or None, got {type(value).__name__}")
    return _utc(value)


def check_metadata(metadata: object) -> dict[str, str]:
    """Return ``metadata`` as a dict if it maps at most :data:`MAX_METADATA_ENTRIES` short str keys to str
    values (a token's ``metadata``: its login role, subject and mapped claims).

    Raises:
        BadRequestError: not a mapping, too many entries, or a key or value that is not a short string.
    """
    if not isinstance(metadata, Mapping):
        raise BadRequestError(f"metadata must be a mapping of strings, got {type(metadata).__name__}")
    if len(metadata) > MAX_METADATA_ENTRIES:
        raise BadRequestError(
            f"metadata may hold at most {MAX_METADATA_ENTRIES} entries, got {len(metadata)}"
        )
    checked: dict[str, str] = {}
    for name, value in metadata.items():
        if not isinstance(name, str) or not 1 <= len(name) <= MAX_METADATA_KEY_LENGTH:
            raise BadRequestError(f"metadata keys must be strings of 1..{MAX_METADATA_KEY_LENGTH} characters")
        if not isinstance(value, str) or len(value) > MAX_METADATA_VALUE_LENGTH:
            raise BadRequestError(
                f"metadata {name!r} must be a string of at most {MAX_METADATA_VALUE_LENGTH} characters"
            )
        checked[name] = value
    return checked


def check_token_expiry(record: TokenRecord, expires_at: object) -> datetime:
    """Return ``expires_at`` in UTC if ``record`` may be renewed to it.

    Raises:
        BadRequestError: ``expires_at`` is not a datetime, ``record`` has no lifetime, or ``expires_at`` is
            after the record's ``max_expires_at``.
    """
    if not isinstance(expires_at, datetime):
        raise BadRequestError(f"expires_at must be a datetime, got {type(expires_at).__name__}")
    if record.max_expires_at is None:
        raise BadRequestError("this token has no ttl: there is nothing to renew")
    moment = _utc(expires_at)
    if moment > record.max_expires_at:
        raise BadRequestError("expires_at may not be after the token's max_expires_at")
    return moment


def check_token_record(record: TokenRecord) -> TokenRecord:
    """Return ``record`` with checked fields: a bytes hash, tuples of str, times in UTC.

    Naive times are taken as UTC. A lifetime is all of ``ttl_seconds`` (an int in
    ``MIN_TOKEN_TTL_SECONDS``..``MAX_TOKEN_TTL_SECONDS``), ``expires_at`` and ``max_expires_at`` (with
    ``expires_at <= max_expires_at``), or none of them.

    Raises:
        BadRequestError: invalid token id, an empty or non-bytes ``secret_hash``, scopes or key patterns that
            are not sequences of str, a non-str description, a non-datetime ``created_at``, or a partial or
            inconsistent lifetime, or bad ``metadata`` (:func:`check_metadata`). The message names the field,
            never the hash.
    """
    check_token_id(record.token_id)
    if not isinstance(record.secret_hash, bytes | bytearray) or not record.secret_hash:
        raise BadRequestError("secret_hash must be non-empty bytes")
    scopes = _string_tuple("scopes", record.scopes)
    patterns = _string_tuple("key_patterns", record.key_patterns)
    if not isinstance(record.description, str):
        raise BadRequestError(f"description must be a string, got {type(record.description).__name__}")
    if not isinstance(record.created_at, datetime):
        raise BadRequestError(f"created_at must be a datetime, got {type(record.created_at).__name__}")
    expires_at = _optional_time("expires_at", record.expires_at)
    max_expires_at = _optional_time("max_expires_at", record.max_expires_at)
    lifetime = (record.ttl_seconds, expires_at, max_expires_at)
    if any(part is not None for part in lifetime):
        if any(part is None for part in lifetime):
            raise BadRequestError(
                "ttl_seconds, expires_at and max_expires_at must be given together or not at all"
            )
        check_integer("ttl_seconds", record.ttl_seconds)
        assert record.ttl_seconds is not None and expires_at is not None and max_expires_at is not None
        if not MIN_TOKEN_TTL_SECONDS <= record.ttl_seconds <= MAX_TOKEN_TTL_SECONDS:
            raise BadRequestError(
                f"ttl_seconds must be {MIN_TOKEN_TTL_SECONDS}..{MAX_TOKEN_TTL_SECONDS}, "
                f"got {record.ttl_seconds}"
            )
        if expires_at > max_expires_at:
            raise BadRequestError("expires_at may not be after max_expires_at")
    return dataclasses.replace(
        record,
        secret_hash=bytes(record.secret_hash),
        scopes=scopes,
        key_patterns=patterns,
        created_at=_utc(record.created_at),
        expires_at=expires_at,
        max_expires_at=max_expires_at,
        metadata=check_metadata(record.metadata),
    )

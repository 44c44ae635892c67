"""Typed results of the Keystream client (keys, tokens, crypto and batch results) and their JSON mapping."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from keystream_client._errors import KeystreamAPIError


def _time(value: Any) -> datetime:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def time_text(moment: datetime) -> str:
    """``moment`` as the service writes times: ISO 8601 in UTC ending in ``Z``
    (``2026-11-26T08:33:00.851998Z``), so the CLI, JSON output and the HTTP API show one form.

    A naive datetime is taken as UTC (the service never sends one).
    """
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _optional_text(moment: datetime | None) -> str | None:
    return None if moment is None else time_text(moment)


@dataclass(frozen=True)
class KeyVersion:
    """One version of a key."""

    version: int
    created_at: datetime


@dataclass(frozen=True)
class Key:
    """A key's metadata as the service shows it (never material)."""

    name: str
    type: str
    segment_size: int
    deletion_allowed: bool
    min_decryption_version: int
    latest_version: int
    imported: bool
    created_at: datetime
    updated_at: datetime
    versions: tuple[KeyVersion, ...]
    #: The sealed format's scheme: ``ctr-hmac`` (Tink AesCtrHmacStreaming) or ``gcm`` (AesGcmHkdfStreaming).
    scheme: str = "ctr-hmac"
    #: Seconds after which the service rotates the key by itself (0: never).
    auto_rotate_period: int = 0
    #: Vault Transit's key options (false from servers before them).
    derived: bool = False
    convergent_encryption: bool = False
    exportable: bool = False
    allow_plaintext_backup: bool = False

    def to_json(self) -> dict[str, Any]:
        """The metadata as JSON-ready data (timestamps as :func:`time_text` writes them)."""
        return {
            "name": self.name,
            "type": self.type,
            "scheme": self.scheme,
            "segment_size": self.segment_size,
            "deletion_allowed": self.deletion_allowed,
            "min_decryption_version": self.min_decryption_version,
            "latest_version": self.latest_version,
            "imported": self.imported,
            "auto_rotate_period": self.auto_rotate_period,
            "derived": self.derived,
            "convergent_encryption": self.convergent_encryption,
            "exportable": self.exportable,
            "allow_plaintext_backup": self.allow_plaintext_backup,
            "created_at": time_text(self.created_at),
            "updated_at": time_text(self.updated_at),
            "versions": [
                {"version": v.version, "created_at": time_text(v.created_at)} for v in self.versions
            ],
        }


@dataclass(frozen=True)
class Token:
    """A token's metadata (never its secret).

    A token with a lifetime has :attr:`ttl` (seconds, what a renewal grants by default), :attr:`expires_at`
    and :attr:`max_expires_at` (no renewal goes beyond it); a token without one has ``None`` in all three.
    """

    token_id: str
    scopes: tuple[str, ...]
    key_patterns: tuple[str, ...]
    description: str
    created_at: datetime
    ttl: int | None = None
    expires_at: datetime | None = None
    max_expires_at: datetime | None = None
    #: Where a login's token came from (``role``, ``subject``, mapped claims); empty for an admin's token.
    metadata: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The metadata as JSON-ready data."""
        return {
            "id": self.token_id,
            "scopes": list(self.scopes),
            "key_patterns": list(self.key_patterns),
            "description": self.description,
            "created_at": time_text(self.created_at),
            "ttl": self.ttl,
            "expires_at": _optional_text(self.expires_at),
            "max_expires_at": _optional_text(self.max_expires_at),
            "metadata": dict(self.metadata),
        }


@dataclass(frozen=True)
class NewToken(Token):
    """A freshly created token; :attr:`token` is the bearer secret, returned only this once."""

    token: str = field(default="", repr=False)


@dataclass(frozen=True)
class RenewedToken(Token):
    """The calling token after ``POST /v1/tokens/self/renew``; :attr:`capped` is true when the new expiry was
    cut at :attr:`max_expires_at` (the token can be renewed no further: replace it before then)."""

    capped: bool = False

    def to_json(self) -> dict[str, Any]:
        """The metadata plus ``capped``."""
        return {**super().to_json(), "capped": self.capped}


@dataclass(frozen=True)
class Role:
    """A login role (``/v1/auth/roles``): what a token issued through it may do (:attr:`scopes`,
    :attr:`key_patterns`, :attr:`ttl` and :attr:`max_ttl` in seconds) and how a caller proves who it is:
    :attr:`method` (``jwt`` or ``cert``) and that method's :attr:`bindings` as the service states them (for
    ``jwt``: ``bound_audiences``, ``bound_subject``, ``bound_claims``, ``user_claim``, ``claim_mappings``;
    for ``cert``: the ``allowed_*`` name lists)."""

    name: str
    method: str
    scopes: tuple[str, ...]
    key_patterns: tuple[str, ...]
    ttl: int
    max_ttl: int
    bindings: Mapping[str, Any]
    created_at: datetime
    updated_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The role as the service answers it (bindings at the top level)."""
        return {
            "name": self.name,
            "method": self.method,
            "scopes": list(self.scopes),
            "key_patterns": list(self.key_patterns),
            "ttl": self.ttl,
            "max_ttl": self.max_ttl,
            **self.bindings,
            "created_at": time_text(self.created_at),
            "updated_at": time_text(self.updated_at),
        }


#: A role's fields other than its method's bindings.
_ROLE_FIELDS = ("name", "method", "scopes", "key_patterns", "ttl", "max_ttl", "created_at", "updated_at")


@dataclass(frozen=True)
class CipherResult:
    """Output of an in-memory encrypt/decrypt."""

    data: bytes = field(repr=False)
    key_version: int | None
    iv: bytes | None
    format: str


@dataclass(frozen=True)
class TransferResult:
    """Summary of a streamed encrypt/decrypt."""

    format: str
    key_version: int | None
    iv: bytes | None
    bytes_sent: int
    bytes_received: int


@dataclass(frozen=True)
class DataKey:
    """A data key from ``POST /v1/keys/{name}/datakey`` (envelope encryption).

    ``ciphertext`` is an ordinary sealed message of the data key under the named key (``decrypt`` opens it,
    with the same associated data); ``plaintext`` is the data key itself, or ``None`` when it was not asked
    for. The repr never shows ``plaintext``: it is a secret.
    """

    ciphertext: bytes = field(repr=False)
    key_version: int
    plaintext: bytes | None = field(default=None, repr=False)

    def __repr__(self) -> str:
        shown = "<hidden>" if self.plaintext is not None else "None"
        return (
            f"DataKey(key_version={self.key_version}, ciphertext=<{len(self.ciphertext)} bytes>, "
            f"plaintext={shown})"
        )


@dataclass(frozen=True)
class BatchItem:
    """One input of a batch call; ``data`` is plaintext (encrypt) or sealed ciphertext (decrypt)."""

    data: bytes = field(repr=False)
    associated_data: bytes | None = field(default=None, repr=False)
    reference: str | None = None


@dataclass(frozen=True)
class BatchError:
    """A per-item error of a batch call."""

    code: str
    message: str


@dataclass(frozen=True)
class BatchResult:
    """One output of a batch call, in input order: ``data`` on success, else ``error``."""

    data: bytes | None = field(repr=False)
    key_version: int | None
    reference: str | None
    error: BatchError | None

    @property
    def ok(self) -> bool:
        """True when the item succeeded."""
        return self.error is None


def parse_key(data: Any) -> Key:
    """A :class:`Key` from the service's key JSON."""
    return Key(
        name=str(data["name"]),
        type=str(data["type"]),
        segment_size=int(data["segment_size"]),
        deletion_allowed=bool(data["deletion_allowed"]),
        min_decryption_version=int(data["min_decryption_version"]),
        latest_version=int(data["latest_version"]),
        imported=bool(data.get("imported", False)),
        created_at=_time(data["created_at"]),
        updated_at=_time(data["updated_at"]),
        versions=tuple(
            KeyVersion(int(v["version"]), _time(v["created_at"])) for v in data.get("versions", ())
        ),
        scheme=str(data.get("scheme", "ctr-hmac")),  # servers before schemes only had ctr-hmac
        auto_rotate_period=int(
            data.get("auto_rotate_period", 0)
        ),  # servers before it never rotated by itself
        derived=bool(data.get("derived", False)),
        convergent_encryption=bool(data.get("convergent_encryption", False)),
        exportable=bool(data.get("exportable", False)),
        allow_plaintext_backup=bool(data.get("allow_plaintext_backup", False)),
    )


def parse_keys(data: Any) -> list[Key]:
    """Keys from ``GET /v1/keys`` (``{"keys": [...]}``)."""
    return [parse_key(item) for item in data["keys"]]


def _token_fields(data: Any) -> dict[str, Any]:
    return {
        "token_id": str(data["id"]),
        "scopes": tuple(data["scopes"]),
        "key_patterns": tuple(data["key_patterns"]),
        "description": str(data.get("description", "")),
        "created_at": _time(data["created_at"]),
        "ttl": data.get("ttl"),
        "expires_at": _optional_time(data.get("expires_at")),
        "max_expires_at": _optional_time(data.get("max_expires_at")),
        "metadata": {str(name): str(value) for name, value in (data.get("metadata") or {}).items()},
    }


def _optional_time(value: Any) -> datetime | None:
    return None if value is None else _time(value)


def parse_token(data: Any) -> Token:
    """One token's metadata (``GET /v1/tokens/self``)."""
    return Token(**_token_fields(data))


def parse_role(data: Any) -> Role:
    """One role (``GET``/``POST /v1/auth/roles/{name}``)."""
    return Role(
        name=str(data["name"]),
        method=str(data["method"]),
        scopes=tuple(data["scopes"]),
        key_patterns=tuple(data["key_patterns"]),
        ttl=int(data["ttl"]),
        max_ttl=int(data["max_ttl"]),
        bindings={name: value for name, value in data.items() if name not in _ROLE_FIELDS},
        created_at=_time(data["created_at"]),
        updated_at=_time(data["updated_at"]),
    )


def parse_roles(data: Any) -> list[Role]:
    """``GET /v1/auth/roles``: ``{"roles": [...]}``."""
    return [parse_role(item) for item in data["roles"]]


def parse_renewed_token(data: Any) -> RenewedToken:
    """The answer of ``POST /v1/tokens/self/renew`` (metadata plus ``capped``)."""
    return RenewedToken(**_token_fields(data), capped=bool(data.get("capped", False)))


@dataclass(frozen=True)
class SealStatus:
    """``GET /v1/sys/seal-status``: whether the server (this replica) is sealed, how many shares unseal it
    (``threshold``), how many exist (``shares``) and how many it has been given (``progress``). A server
    whose seal takes no shares reports ``sealed`` false and zeros."""

    sealed: bool
    threshold: int
    shares: int
    progress: int
    type: str = ""


def parse_seal_status(data: Any) -> SealStatus:
    """The seal status of ``/v1/sys/seal-status``, ``/unseal`` and ``/seal``."""
    return SealStatus(
        sealed=bool(data["sealed"]),
        threshold=int(data["threshold"]),
        shares=int(data["shares"]),
        progress=int(data["progress"]),
        type=str(data.get("type", "")),
    )


@dataclass(frozen=True)
class MasterRotation:
    """``/v1/sys/rotate-master``: the master key's newest ``generation`` (new key versions are wrapped under
    it), whether blobs of older generations remain (``rotating``), how many the rotation ``rewrapped``, when
    it started and finished (ISO 8601 text or ``None``), and whether a call ``resumed`` an unfinished one."""

    generation: int
    rotating: bool
    rewrapped: int
    started_at: str | None = None
    finished_at: str | None = None
    resumed: bool = False


def parse_master_rotation(data: Any) -> MasterRotation:
    """The answer of ``POST`` and ``GET /v1/sys/rotate-master``."""
    return MasterRotation(
        generation=int(data["generation"]),
        rotating=bool(data["rotating"]),
        rewrapped=int(data["rewrapped"]),
        started_at=data.get("started_at"),
        finished_at=data.get("finished_at"),
        resumed=bool(data.get("resumed", False)),
    )


def parse_tokens(data: Any) -> list[Token]:
    """Tokens from ``GET /v1/tokens`` (``{"tokens": [...]}``)."""
    return [Token(**_token_fields(item)) for item in data["tokens"]]


def parse_new_token(data: Any) -> NewToken:
    """The answer of ``POST /v1/tokens`` (metadata plus ``token``)."""
    return NewToken(**_token_fields(data), token=str(data["token"]))


def b64(data: bytes) -> str:
    """``data`` as standard base64 text (the service's JSON and header encoding)."""
    return base64.b64encode(data).decode("ascii")


def parse_datakey(data: Any) -> DataKey:
    """The answer of ``POST /v1/keys/{name}/datakey``.

    Raises:
        KeystreamAPIError: the answer lacks a base64 ``ciphertext`` or ``key_version`` (``invalid_response``).
    """
    try:
        ciphertext = base64.b64decode(data["ciphertext"], validate=True)
        key_version = int(data["key_version"])
        text = data.get("plaintext")
        plaintext = base64.b64decode(text, validate=True) if text is not None else None
    except (binascii.Error, KeyError, TypeError, ValueError) as exc:
        raise KeystreamAPIError(200, "invalid_response", "data key answer is malformed") from exc
    return DataKey(ciphertext, key_version, plaintext)


def parse_batch(data: Any, field_name: str) -> list[BatchResult]:
    """Results of a batch call, in input order."""
    results: list[BatchResult] = []
    for item in data["results"]:
        reference = item.get("reference")
        if item.get("error"):
            error = BatchError(str(item["error"]["code"]), str(item["error"]["message"]))
            results.append(BatchResult(None, None, reference, error))
            continue
        try:
            payload = base64.b64decode(item[field_name], validate=True)
        except (binascii.Error, KeyError) as exc:
            raise KeystreamAPIError(
                200, "invalid_response", f"batch result lacks valid {field_name}"
            ) from exc
        version = item.get("key_version")
        results.append(BatchResult(payload, int(version) if version is not None else None, reference, None))
    return results


def parse_hmac(data: Any) -> str:
    """The tag text of a ``POST /v1/keys/{name}/hmac`` answer (``ks:v<version>:<base64>``).

    Raises:
        KeystreamAPIError: the answer has no such ``hmac`` (``invalid_response``).
    """
    tag = data.get("hmac") if isinstance(data, dict) else None
    if not isinstance(tag, str) or not tag.startswith("ks:v"):
        raise KeystreamAPIError(200, "invalid_response", "hmac answer is malformed")
    return tag


def parse_verify(data: Any) -> bool:
    """Whether a ``POST /v1/keys/{name}/verify`` answer says valid.

    Raises:
        KeystreamAPIError: the answer has no boolean ``valid`` (``invalid_response``).
    """
    valid = data.get("valid") if isinstance(data, dict) else None
    if not isinstance(valid, bool):
        raise KeystreamAPIError(200, "invalid_response", "verify answer is malformed")
    return valid


def parse_base64_field(data: Any, field_name: str) -> bytes:
    """The bytes of a base64 field of an answer (``random`` of ``/v1/random``, ``sum`` of ``/v1/hash``).

    Raises:
        KeystreamAPIError: the field is missing or not base64 (``invalid_response``).
    """
    try:
        return base64.b64decode(data[field_name], validate=True)
    except (binascii.Error, KeyError, TypeError, ValueError) as exc:
        raise KeystreamAPIError(200, "invalid_response", f"{field_name} answer is malformed") from exc

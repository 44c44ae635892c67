"""Typed results, errors and request options of the Keystream client (see :mod:`app.client`)."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote as _url_quote

FORMATS: tuple[str, ...] = ("sealed", "raw")
IV_SIZE = 16
#: Bytes of an error response body kept for the error message.
MAX_ERROR_BODY = 64 * 1024


class KeystreamClientError(Exception):
    """Base of every error the client raises."""


class KeystreamAPIError(KeystreamClientError):
    """The service answered with an error: ``{"error": {"code", "message"}}``.

    Attributes:
        status: HTTP status code.
        code: the service's machine-readable code, e.g. ``key_not_found``, ``decryption_failed``.
        message: the service's human-readable message.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class KeystreamConnectionError(KeystreamClientError):
    """The service could not be reached (connect failure, timeout, TLS error)."""


class KeystreamStreamError(KeystreamClientError):
    """A streaming response ended without its terminator, or the connection dropped mid-transfer.

    The service aborts the connection when a sealed segment fails to verify after output has started, so this
    means: the output is incomplete and must be discarded.
    """


def api_error(status: int, body: bytes) -> KeystreamAPIError:
    """The :class:`KeystreamAPIError` for an error response ``body`` (JSON shape or anything else)."""
    try:
        detail = json.loads(body)["error"]
        return KeystreamAPIError(status, str(detail["code"]), str(detail["message"]))
    except (ValueError, KeyError, TypeError):
        text = body[:200].decode("utf-8", "replace").strip() or "no error body"
        return KeystreamAPIError(status, f"http_{status}", text)


def quote(segment: str) -> str:
    """``segment`` percent-encoded for one URL path segment."""
    return _url_quote(segment, safe="")


def _time(value: Any) -> datetime:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


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

    def to_json(self) -> dict[str, Any]:
        """The metadata as JSON-ready data (timestamps ISO-8601)."""
        return {
            "name": self.name,
            "type": self.type,
            "segment_size": self.segment_size,
            "deletion_allowed": self.deletion_allowed,
            "min_decryption_version": self.min_decryption_version,
            "latest_version": self.latest_version,
            "imported": self.imported,
            "created_at": self.created_at.isoformat(),
            "updated_at": self.updated_at.isoformat(),
            "versions": [
                {"version": v.version, "created_at": v.created_at.isoformat()} for v in self.versions
            ],
        }


@dataclass(frozen=True)
class Token:
    """A token's metadata (never its secret)."""

    token_id: str
    scopes: tuple[str, ...]
    key_patterns: tuple[str, ...]
    description: str
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The metadata as JSON-ready data."""
        return {
            "id": self.token_id,
            "scopes": list(self.scopes),
            "key_patterns": list(self.key_patterns),
            "description": self.description,
            "created_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True)
class NewToken(Token):
    """A freshly created token; :attr:`token` is the bearer secret, returned only this once."""

    token: str = field(default="", repr=False)


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
    }


def parse_tokens(data: Any) -> list[Token]:
    """Tokens from ``GET /v1/tokens`` (``{"tokens": [...]}``)."""
    return [Token(**_token_fields(item)) for item in data["tokens"]]


def parse_new_token(data: Any) -> NewToken:
    """The answer of ``POST /v1/tokens`` (metadata plus ``token``)."""
    return NewToken(**_token_fields(data), token=str(data["token"]))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def batch_body(operation: str, items: Sequence[BatchItem | bytes]) -> dict[str, Any]:
    """Batch JSON body: ``{"items": [{plaintext|ciphertext, associated_data?, reference?}]}``."""
    field_name = "plaintext" if operation == "encrypt" else "ciphertext"
    body: list[dict[str, Any]] = []
    for item in items:
        entry = item if isinstance(item, BatchItem) else BatchItem(bytes(item))
        out: dict[str, Any] = {field_name: _b64(entry.data)}
        if entry.associated_data is not None:
            out["associated_data"] = _b64(entry.associated_data)
        if entry.reference is not None:
            out["reference"] = entry.reference
        body.append(out)
    return {"items": body}


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


_OPTION_NAMES = ("format", "associated_data", "iv", "offset", "key_version", "backend")


@dataclass(frozen=True)
class CryptoOptions:
    """Query parameters and headers of one encrypt/decrypt request, validated.

    Raises (from :meth:`build`):
        TypeError: an option has the wrong type.
        ValueError: an option is out of range or does not fit the format.
    """

    format: str = "sealed"
    associated_data: bytes | None = field(default=None, repr=False)
    iv: bytes | None = None
    offset: int = 0
    key_version: int | None = None
    backend: str | None = None

    @classmethod
    def build(
        cls,
        format: str = "sealed",
        associated_data: bytes | None = None,
        iv: bytes | str | None = None,
        offset: int = 0,
        key_version: int | None = None,
        backend: str | None = None,
    ) -> CryptoOptions:
        """Validated options (see class docstring for what it raises)."""
        if format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
        if associated_data is not None and not isinstance(associated_data, bytes | bytearray | memoryview):
            raise TypeError("associated_data must be bytes-like")
        iv_bytes: bytes | None = None
        if isinstance(iv, str):
            try:
                iv_bytes = bytes.fromhex(iv)
            except ValueError:
                raise ValueError("iv must be 32 hex digits") from None
        elif iv is not None:
            iv_bytes = bytes(iv)
        if iv_bytes is not None and len(iv_bytes) != IV_SIZE:
            raise ValueError(f"iv must be {IV_SIZE} bytes (32 hex digits), got {len(iv_bytes)} bytes")
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
        if format == "sealed" and (iv_bytes is not None or offset):
            raise ValueError("iv and offset apply to the raw format only")
        if key_version is not None and (not isinstance(key_version, int) or key_version < 1):
            raise ValueError(f"key_version must be an integer >= 1, got {key_version!r}")
        ad = bytes(associated_data) if associated_data is not None else None
        return cls(format, ad, iv_bytes, offset, key_version, backend)

    @classmethod
    def from_kwargs(cls, options: dict[str, Any]) -> CryptoOptions:
        """:meth:`build` from keyword arguments; unknown names raise :class:`TypeError`."""
        unknown = sorted(set(options) - set(_OPTION_NAMES))
        if unknown:
            raise TypeError(f"unknown options {unknown}; allowed: {', '.join(_OPTION_NAMES)}, on_progress")
        return cls.build(**options)

    def check(self, operation: str) -> None:
        """Check what depends on the operation.

        Raises:
            ValueError: raw decrypt without ``iv`` or ``key_version``.
        """
        if operation == "decrypt" and self.format == "raw" and (self.iv is None or self.key_version is None):
            raise ValueError("decrypting the raw format needs the iv and key_version that encrypt returned")

    def params(self) -> dict[str, str]:
        """Query parameters."""
        params = {"format": self.format}
        if self.iv is not None:
            params["iv"] = self.iv.hex()
        if self.offset:
            params["offset"] = str(self.offset)
        if self.key_version is not None:
            params["key_version"] = str(self.key_version)
        if self.backend is not None:
            params["backend"] = self.backend
        return params

    def headers(self) -> dict[str, str]:
        """Request headers (associated data, base64)."""
        if self.associated_data is None:
            return {}
        return {"Keystream-Associated-Data": _b64(self.associated_data)}

"""The keystore's records: key and version metadata, token and login role records, exported keys, the clock.

Plain frozen dataclasses with no behaviour beyond their API shapes, so that the interface
(:mod:`app.keystore.base`), the validation rules (:mod:`app.keystore.checks`) and both stores import them
without importing one another.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, NamedTuple

__all__ = [
    "KEY_COLUMNS",
    "KeyExport",
    "KeyInfo",
    "KeyOptions",
    "KeyPolicy",
    "KeyVersionInfo",
    "RoleRecord",
    "TokenRecord",
    "key_info_from_row",
    "key_row",
    "new_key_info",
    "utc_now",
]


#: The ``keys`` table's columns in the order both stores select and insert them (:func:`key_info_from_row`,
#: :func:`key_row`).
KEY_COLUMNS = (
    "name, key_type, scheme, segment_size, deletion_allowed, min_decryption_version, latest_version, "
    "imported, created_at, updated_at, auto_rotate_period, derived, convergent_encryption, exportable, "
    "allow_plaintext_backup"
)


def utc_now() -> datetime:
    """The current time as an aware UTC datetime."""
    return datetime.now(UTC)


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass(frozen=True)
class KeyVersionInfo:
    """One version of a key: its number (1, 2, ...) and when it was created."""

    version: int
    created_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The API shape ``{"version": 1, "created_at": "...Z"}``."""
        return {"version": self.version, "created_at": _iso(self.created_at)}


@dataclass(frozen=True)
class KeyOptions:
    """A key's options, as Vault's Transit names them; all false unless asked for.

    ``derived`` and ``convergent_encryption`` are fixed at creation: a derived key derives a key per
    ``context`` from a version's material, and convergent encryption (only on a derived key) makes equal
    plaintexts under one context give equal ciphertexts, so turning either on or off later would strand the
    ciphertexts already made. ``exportable`` (a version's material may be exported) and
    ``allow_plaintext_backup`` (the key may be backed up) can be turned on later but never off again, as in
    Vault: once material may have left, saying it cannot would be a false promise.
    """

    derived: bool = False
    convergent_encryption: bool = False
    exportable: bool = False
    allow_plaintext_backup: bool = False

    def to_json(self) -> dict[str, bool]:
        """The four flags by name."""
        return {
            "derived": self.derived,
            "convergent_encryption": self.convergent_encryption,
            "exportable": self.exportable,
            "allow_plaintext_backup": self.allow_plaintext_backup,
        }


class KeyPolicy(NamedTuple):
    """What a policy update may change on a key, as the stores write it in one statement."""

    min_decryption_version: int
    deletion_allowed: bool
    auto_rotate_period: int
    exportable: bool
    allow_plaintext_backup: bool


@dataclass(frozen=True)
class KeyInfo:
    """Metadata of a key. Never carries material.

    ``latest_version`` is used to encrypt; decryption accepts versions ``min_decryption_version`` ..
    ``latest_version``. ``segment_size`` is the ciphertext segment size of the sealed format and ``scheme``
    its per-segment primitive (:mod:`app.core.schemes`), both fixed at creation so that a change of settings
    never strands old ciphertexts and no key material ever keys two primitives. ``auto_rotate_period`` is the
    automatic rotation period in seconds (0: off; see :mod:`app.keystore.rotation`). ``options`` are the
    Transit options (:class:`KeyOptions`).
    """

    name: str
    key_type: str
    scheme: str
    segment_size: int
    deletion_allowed: bool
    min_decryption_version: int
    latest_version: int
    imported: bool
    created_at: datetime
    updated_at: datetime
    versions: tuple[KeyVersionInfo, ...]
    auto_rotate_period: int = 0
    options: KeyOptions = KeyOptions()

    @property
    def policy(self) -> KeyPolicy:
        """The fields a policy update may change, as they are now."""
        return KeyPolicy(
            self.min_decryption_version,
            self.deletion_allowed,
            self.auto_rotate_period,
            self.options.exportable,
            self.options.allow_plaintext_backup,
        )

    @property
    def last_rotated(self) -> datetime:
        """When the latest version was made (the key's last rotation, or its creation)."""
        return self.versions[-1].created_at if self.versions else self.created_at

    def to_json(self) -> dict[str, Any]:
        """The API's key metadata shape (times as ISO-8601 UTC with a ``Z``)."""
        return {
            "name": self.name,
            "type": self.key_type,
            "scheme": self.scheme,
            "segment_size": self.segment_size,
            "deletion_allowed": self.deletion_allowed,
            "min_decryption_version": self.min_decryption_version,
            "latest_version": self.latest_version,
            "imported": self.imported,
            "auto_rotate_period": self.auto_rotate_period,
            **self.options.to_json(),
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
            "versions": [version.to_json() for version in self.versions],
        }


def key_info_from_row(
    row: Sequence[Any], versions: Iterable[KeyVersionInfo], to_time: Callable[[Any], datetime]
) -> KeyInfo:
    """The :class:`KeyInfo` of a ``keys`` row as both stores select it (:data:`KEY_COLUMNS`), with its
    ``versions``; ``to_time`` reads a stored time as an aware UTC datetime."""
    name, key_type, scheme, segment_size, deletion_allowed, min_dv, latest, imported = row[:8]
    return KeyInfo(
        name=name,
        key_type=key_type,
        scheme=scheme,
        segment_size=int(segment_size),
        deletion_allowed=bool(deletion_allowed),
        min_decryption_version=int(min_dv),
        latest_version=int(latest),
        imported=bool(imported),
        created_at=to_time(row[8]),
        updated_at=to_time(row[9]),
        versions=tuple(versions),
        auto_rotate_period=int(row[10]),
        options=KeyOptions(*(bool(flag) for flag in row[11:15])),
    )


def key_row(info: KeyInfo) -> tuple[Any, ...]:
    """The values of :data:`KEY_COLUMNS` for ``info``, times and flags as given (each store converts them)."""
    options = info.options
    return (
        info.name,
        info.key_type,
        info.scheme,
        info.segment_size,
        info.deletion_allowed,
        info.min_decryption_version,
        info.latest_version,
        info.imported,
        info.created_at,
        info.updated_at,
        info.auto_rotate_period,
        options.derived,
        options.convergent_encryption,
        options.exportable,
        options.allow_plaintext_backup,
    )


def new_key_info(
    name: str,
    key_type: str,
    scheme: str,
    segment_size: int,
    deletion_allowed: bool,
    imported: bool,
    auto_rotate_period: int,
    options: KeyOptions = KeyOptions(),
) -> KeyInfo:
    """The metadata of a key about to be created: version 1, created now (what a store inserts)."""
    now = utc_now()
    return KeyInfo(
        name=name,
        key_type=key_type,
        scheme=scheme,
        segment_size=segment_size,
        deletion_allowed=deletion_allowed,
        min_decryption_version=1,
        latest_version=1,
        imported=imported,
        created_at=now,
        updated_at=now,
        versions=(KeyVersionInfo(1, now),),
        auto_rotate_period=auto_rotate_period,
        options=options,
    )


@dataclass(frozen=True)
class TokenRecord:
    """A stored API token: the public id, the hash of its secret (never the secret), scopes and key patterns.

    The keystore stores and returns these fields as given; what they mean (hash function, scope names,
    pattern syntax) is decided by ``app.services.security``. A token with a lifetime has all three of
    ``ttl_seconds`` (the lifetime given at creation, what a renewal grants by default), ``expires_at`` and
    ``max_expires_at`` (no renewal goes beyond it); a token without one has none of them. ``metadata`` says
    where a token came from when a login issued it (its ``role`` and ``subject``, and the role's claim
    mappings): short strings, never a credential.
    """

    token_id: str
    secret_hash: bytes = field(repr=False)
    scopes: tuple[str, ...]
    key_patterns: tuple[str, ...]
    description: str
    created_at: datetime
    ttl_seconds: int | None = None
    expires_at: datetime | None = None
    max_expires_at: datetime | None = None
    metadata: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class RoleRecord:
    """A login role: what a token issued through it may do, and how a caller must prove who it is.

    ``method`` names the auth method (``jwt`` or ``cert``) whose login uses the role, and ``bindings`` holds
    that method's rules as a JSON object (for ``jwt``: audiences, subject, claims, the claim naming the user,
    claim mappings; for ``cert``: the allowed names of the client certificate); the keystore stores them as
    given, :mod:`app.services.identity` decides what they mean. A token issued through the role gets its
    ``scopes`` and ``key_patterns``, expires ``ttl_seconds`` after the login and is renewable until
    ``max_ttl_seconds`` after it.
    """

    name: str
    method: str
    scopes: tuple[str, ...]
    key_patterns: tuple[str, ...]
    ttl_seconds: int
    max_ttl_seconds: int
    bindings: Mapping[str, Any]
    created_at: datetime
    updated_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The API shape of the role (times as ISO-8601 UTC with a ``Z``; the bindings at the top level)."""
        return {
            "name": self.name,
            "method": self.method,
            "scopes": list(self.scopes),
            "key_patterns": list(self.key_patterns),
            "ttl": self.ttl_seconds,
            "max_ttl": self.max_ttl_seconds,
            **self.bindings,
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
        }


@dataclass(frozen=True)
class KeyExport:
    """A key as stored, for copying it to another keystore: its metadata and every version still wrapped.

    ``wrapped`` holds one blob per entry of ``info.versions``, in the same order, each wrapped under the
    master key and bound to the key's name and version (:mod:`app.keystore.master`); it is never unwrapped
    here and never appears in a ``repr``.
    """

    info: KeyInfo
    wrapped: tuple[bytes, ...] = field(repr=False)

"""Login roles and auth method configurations: their checks, and the SQL both stores share.

A role (:class:`~app.keystore.records.RoleRecord`) is stored in ``auth_roles`` with its policy (scopes, key
patterns, ttl, max_ttl and the method's bindings: a ``jwt`` role's claims, a ``cert`` role's allowed names)
as one JSON text, and an auth method's configuration (for ``jwt``: where its keys come from, the issuer, the
leeway) in ``auth_methods`` as JSON text too: both stores run the same statements, in their
:class:`~app.keystore.generations.Dialect`, as the master key rotation's SQL does. What the bindings and the
configuration mean is :mod:`app.services.identity`'s and :mod:`app.services.cert_login`'s; here they are JSON
objects of bounded size. Every write appends a change (``role_written``, ``role_deleted``,
``auth_config_written``) in its own transaction, like a token's.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from app.core.token_format import MAX_TOKEN_TTL_SECONDS, MIN_TOKEN_TTL_SECONDS
from app.errors import BadRequestError

from .checks import check_integer
from .generations import Connection, Dialect
from .records import RoleRecord

__all__ = [
    "AUTH_METHODS",
    "MAX_JSON_BYTES",
    "ROLE_NAME_PATTERN",
    "check_auth_config",
    "check_auth_method",
    "check_role_name",
    "check_role_record",
    "delete_role",
    "list_roles",
    "read_auth_config",
    "read_login",
    "read_role",
    "write_auth_config",
    "write_role",
]

#: The auth methods a role may name.
AUTH_METHODS: tuple[str, ...] = ("jwt", "cert")
#: Role names: as key names, safe in URLs and logs.
ROLE_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
#: The largest JSON text a role's bindings or a method's configuration may take (a few PEM keys fit).
MAX_JSON_BYTES = 64 * 1024

_SELECT = "SELECT name, method, policy, created_at, updated_at FROM auth_roles"


def check_role_name(name: object) -> str:
    """Return ``name`` if it is a valid role name (1-128 of ``A-Z a-z 0-9 _ . -``, starting alphanumeric).

    Raises:
        BadRequestError: anything else (the message shows at most the first 64 characters).
    """
    if not isinstance(name, str) or not ROLE_NAME_PATTERN.fullmatch(name):
        shown = repr(name[:64]) if isinstance(name, str) else type(name).__name__
        raise BadRequestError(
            f"invalid role name {shown}: use 1-128 of A-Z a-z 0-9 _ . - starting with a letter or digit"
        )
    return name


def check_auth_method(method: object) -> str:
    """Return ``method`` if it is one of :data:`AUTH_METHODS`.

    Raises:
        BadRequestError: any other value.
    """
    if method not in AUTH_METHODS:
        raise BadRequestError(f"unknown auth method {method!r}; allowed: {', '.join(AUTH_METHODS)}")
    return str(method)


def _json_object(field_name: str, value: object) -> str:
    """``value`` as JSON text, if it is a mapping that JSON can hold within :data:`MAX_JSON_BYTES`."""
    if not isinstance(value, Mapping):
        raise BadRequestError(f"{field_name} must be a JSON object, got {type(value).__name__}")
    try:
        text = json.dumps(dict(value), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise BadRequestError(f"{field_name} must hold only JSON values") from exc
    if len(text.encode()) > MAX_JSON_BYTES:
        raise BadRequestError(f"{field_name} may take at most {MAX_JSON_BYTES} bytes as JSON")
    return text


def _strings(field_name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, tuple | list):
        raise BadRequestError(f"{field_name} must be a sequence of strings, got {type(value).__name__}")
    if not all(isinstance(item, str) for item in value):
        raise BadRequestError(f"{field_name} must contain only strings")
    return tuple(value)


def check_role_record(record: RoleRecord) -> RoleRecord:
    """Return ``record`` if every field has its type and the lifetimes fit.

    Raises:
        BadRequestError: a bad name or method, scopes or key patterns that are not strings, ``ttl_seconds``
            or ``max_ttl_seconds`` outside ``MIN_TOKEN_TTL_SECONDS``..``MAX_TOKEN_TTL_SECONDS`` or
            ``max_ttl_seconds`` below ``ttl_seconds``, bindings that are not a bounded JSON object, or times
            that are not aware datetimes.
    """
    check_role_name(record.name)
    check_auth_method(record.method)
    scopes = _strings("scopes", record.scopes)
    patterns = _strings("key_patterns", record.key_patterns)
    for field_name, seconds in (("ttl", record.ttl_seconds), ("max_ttl", record.max_ttl_seconds)):
        check_integer(field_name, seconds)
        if not MIN_TOKEN_TTL_SECONDS <= seconds <= MAX_TOKEN_TTL_SECONDS:
            raise BadRequestError(
                f"{field_name} must be {MIN_TOKEN_TTL_SECONDS}..{MAX_TOKEN_TTL_SECONDS} seconds, "
                f"got {seconds}"
            )
    if record.max_ttl_seconds < record.ttl_seconds:
        raise BadRequestError(
            f"max_ttl ({record.max_ttl_seconds}) may not be below ttl ({record.ttl_seconds})"
        )
    bindings = json.loads(_json_object("bindings", record.bindings))
    for moment in (record.created_at, record.updated_at):
        if not isinstance(moment, datetime) or moment.tzinfo is None:
            raise BadRequestError("a role's times must be aware datetimes")
    return RoleRecord(
        record.name,
        record.method,
        scopes,
        patterns,
        record.ttl_seconds,
        record.max_ttl_seconds,
        bindings,
        record.created_at,
        record.updated_at,
    )


def check_auth_config(config: object) -> dict[str, Any]:
    """Return ``config`` as a plain dict if it is a JSON object within :data:`MAX_JSON_BYTES`.

    Raises:
        BadRequestError: anything else.
    """
    loaded: dict[str, Any] = json.loads(_json_object("config", config))
    return loaded


def _policy_text(record: RoleRecord) -> str:
    return json.dumps(
        {
            "scopes": list(record.scopes),
            "key_patterns": list(record.key_patterns),
            "ttl": record.ttl_seconds,
            "max_ttl": record.max_ttl_seconds,
            "bindings": dict(record.bindings),
        },
        sort_keys=True,
    )


def _role(dialect: Dialect, row: Any) -> RoleRecord:
    name, method, policy_text, created_at, updated_at = row
    policy = json.loads(policy_text)
    return RoleRecord(
        name=name,
        method=method,
        scopes=tuple(policy["scopes"]),
        key_patterns=tuple(policy["key_patterns"]),
        ttl_seconds=int(policy["ttl"]),
        max_ttl_seconds=int(policy["max_ttl"]),
        bindings=policy["bindings"],
        created_at=dialect.from_db(created_at),
        updated_at=dialect.from_db(updated_at),
    )


def write_role(conn: Connection, dialect: Dialect, record: RoleRecord) -> RoleRecord:
    """Insert the checked ``record``, or replace the role of that name keeping its ``created_at``; return the
    role as stored."""
    row = conn.execute(
        dialect.sql(
            "INSERT INTO auth_roles (name, method, policy, created_at, updated_at) VALUES (?, ?, ?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET method = excluded.method, policy = excluded.policy, "
            "updated_at = excluded.updated_at RETURNING name, method, policy, created_at, updated_at"
        ),
        (
            record.name,
            record.method,
            _policy_text(record),
            dialect.to_db(record.created_at),
            dialect.to_db(record.updated_at),
        ),
    ).fetchone()
    return _role(dialect, row)


def read_role(conn: Connection, dialect: Dialect, name: str) -> RoleRecord | None:
    """The role ``name``, or ``None``."""
    row = conn.execute(dialect.sql(_SELECT + " WHERE name = ?"), (name,)).fetchone()
    return None if row is None else _role(dialect, row)


def list_roles(conn: Connection, dialect: Dialect) -> list[RoleRecord]:
    """Every role, by name (byte order in both stores)."""
    rows = conn.execute(_SELECT).fetchall()
    return sorted((_role(dialect, row) for row in rows), key=lambda role: role.name.encode())


def delete_role(conn: Connection, dialect: Dialect, name: str) -> bool:
    """Delete the role ``name``; False when there was none."""
    cursor = conn.execute(dialect.sql("DELETE FROM auth_roles WHERE name = ?"), (name,))
    return int(cursor.rowcount) == 1


def write_auth_config(
    conn: Connection, dialect: Dialect, method: str, config: Mapping[str, Any], now: datetime
) -> None:
    """Store (or replace) the checked configuration of auth ``method``."""
    conn.execute(
        dialect.sql(
            "INSERT INTO auth_methods (method, config, updated_at) VALUES (?, ?, ?) "
            "ON CONFLICT (method) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at"
        ),
        (method, json.dumps(dict(config), sort_keys=True), dialect.to_db(now)),
    )


def read_login(
    conn: Connection, dialect: Dialect, name: str | None, method: str
) -> tuple[RoleRecord | None, dict[str, Any] | None]:
    """The role ``name`` (``None``: not looked up) and the configuration of auth ``method``, each ``None``
    when absent, in one statement: one snapshot on either store, and on PostgreSQL one round trip."""
    row = conn.execute(
        dialect.sql(
            "SELECT r.name, r.method, r.policy, r.created_at, r.updated_at, m.config "
            "FROM (SELECT 1 AS one) AS o LEFT JOIN auth_roles AS r ON r.name = ? "
            "LEFT JOIN auth_methods AS m ON m.method = ?"
        ),
        (name, method),
    ).fetchall()[0]  # always one row; read to the end, so the statement (and its snapshot) is done
    role = None if row[0] is None else _role(dialect, row[:5])
    config: dict[str, Any] | None = None if row[5] is None else json.loads(row[5])
    return role, config


def read_auth_config(conn: Connection, dialect: Dialect, method: str) -> dict[str, Any] | None:
    """The configuration of auth ``method``, or ``None`` when none was written."""
    row = conn.execute(dialect.sql("SELECT config FROM auth_methods WHERE method = ?"), (method,)).fetchone()
    if row is None:
        return None
    config: dict[str, Any] = json.loads(row[0])
    return config

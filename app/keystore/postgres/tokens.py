"""SQL for API tokens. Only the hash of a token's secret is stored (the caller hashes it)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..records import TokenRecord

if TYPE_CHECKING:
    from .connections import Connection

__all__ = [
    "count_tokens",
    "delete_token",
    "insert_token",
    "read_token",
    "read_token_for_update",
    "read_tokens",
    "set_expiry",
]

_SELECT = (
    "SELECT token_id, secret_hash, scopes, key_patterns, description, created_at, ttl_seconds, expires_at, "
    "max_expires_at, metadata FROM tokens"
)


def _record(row: Sequence[Any]) -> TokenRecord:
    token_id, secret_hash, scopes, patterns, description, created, ttl, expires, max_expires, metadata = row
    return TokenRecord(
        token_id=token_id,
        secret_hash=bytes(secret_hash),
        scopes=tuple(scopes),
        key_patterns=tuple(patterns),
        description=description,
        created_at=created.astimezone(UTC),
        ttl_seconds=ttl,
        expires_at=None if expires is None else expires.astimezone(UTC),
        max_expires_at=None if max_expires is None else max_expires.astimezone(UTC),
        metadata=json.loads(metadata),
    )


def insert_token(conn: Connection, record: TokenRecord) -> bool:
    """Insert a checked ``record``; False when its id is taken."""
    row = conn.execute(
        "INSERT INTO tokens (token_id, secret_hash, scopes, key_patterns, description, created_at, "
        "ttl_seconds, expires_at, max_expires_at, metadata) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) "
        "ON CONFLICT (token_id) DO NOTHING RETURNING token_id",
        (
            record.token_id,
            record.secret_hash,
            list(record.scopes),
            list(record.key_patterns),
            record.description,
            record.created_at,
            record.ttl_seconds,
            record.expires_at,
            record.max_expires_at,
            json.dumps(dict(record.metadata), sort_keys=True),
        ),
    ).fetchone()
    return row is not None


def read_token(conn: Connection, token_id: str) -> TokenRecord | None:
    """The token ``token_id``, or None."""
    row = conn.execute(_SELECT + " WHERE token_id = %s", (token_id,)).fetchone()
    return _record(row) if row is not None else None


def read_token_for_update(conn: Connection, token_id: str) -> TokenRecord | None:
    """The token ``token_id``, or None, locked until the transaction ends."""
    row = conn.execute(_SELECT + " WHERE token_id = %s FOR UPDATE", (token_id,)).fetchone()
    return _record(row) if row is not None else None


def set_expiry(conn: Connection, token_id: str, expires_at: datetime) -> None:
    """Set the (checked) ``expires_at`` of ``token_id``."""
    conn.execute("UPDATE tokens SET expires_at = %s WHERE token_id = %s", (expires_at, token_id))


def read_tokens(conn: Connection) -> list[TokenRecord]:
    """Every token, oldest first (ties by id, in byte order)."""
    return [_record(row) for row in conn.execute(_SELECT + ' ORDER BY created_at, token_id COLLATE "C"')]


def delete_token(conn: Connection, token_id: str) -> bool:
    """Delete the token; False when there was none."""
    return conn.execute("DELETE FROM tokens WHERE token_id = %s", (token_id,)).rowcount == 1


def count_tokens(conn: Connection) -> int:
    """How many tokens are stored."""
    row = conn.execute("SELECT count(*) FROM tokens").fetchone()
    return int(row[0]) if row else 0

"""The SQL of the ``tokens`` table: token records by id, with only the secret's hash stored.

Each function runs on a connection inside the caller's transaction.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.errors import ConflictError

from ..records import TokenRecord
from .schema import from_text, to_text

_SELECT = (
    "SELECT token_id, secret_hash, scopes, key_patterns, description, created_at, ttl_seconds, expires_at, "
    "max_expires_at, metadata FROM tokens"
)


def insert_token(conn: sqlite3.Connection, record: TokenRecord) -> None:
    """Store the checked ``record`` (:func:`~app.keystore.checks.check_token_record`: the template checks
    every record before it reaches a store).

    Raises:
        ConflictError: a token with the same id exists (nothing is written).
    """
    inserted = conn.execute(
        "INSERT INTO tokens (token_id, secret_hash, scopes, key_patterns, description, created_at, "
        "ttl_seconds, expires_at, max_expires_at, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (token_id) DO NOTHING",
        token_values(record),
    )
    if inserted.rowcount != 1:
        raise ConflictError(f"token {record.token_id!r} already exists")


def read_token(conn: sqlite3.Connection, token_id: str) -> TokenRecord | None:
    """The record of ``token_id``, or ``None``."""
    row = conn.execute(_SELECT + " WHERE token_id = ?", (token_id,)).fetchone()
    return None if row is None else _token_from_row(row)


def list_tokens(conn: sqlite3.Connection) -> list[TokenRecord]:
    """Every token record, oldest first."""
    rows = conn.execute(_SELECT + " ORDER BY created_at, token_id").fetchall()
    return [_token_from_row(row) for row in rows]


def set_expiry(conn: sqlite3.Connection, record: TokenRecord, expires_at: datetime) -> TokenRecord:
    """Move the expiry of ``record`` to ``expires_at`` (checked by the caller); return the updated record."""
    conn.execute(
        "UPDATE tokens SET expires_at = ? WHERE token_id = ?", (to_text(expires_at), record.token_id)
    )
    return dataclasses.replace(record, expires_at=expires_at)


def delete_token(conn: sqlite3.Connection, token_id: str) -> bool:
    """Delete ``token_id``; False when there was none."""
    return conn.execute("DELETE FROM tokens WHERE token_id = ?", (token_id,)).rowcount == 1


def count_tokens(conn: sqlite3.Connection) -> int:
    """How many tokens are stored."""
    return int(conn.execute("SELECT COUNT(*) FROM tokens").fetchone()[0])


def token_values(checked: TokenRecord) -> tuple[object, ...]:
    """The row of a checked record (:func:`~app.keystore.checks.check_token_record`)."""
    return (
        checked.token_id,
        checked.secret_hash,
        json.dumps(checked.scopes),
        json.dumps(checked.key_patterns),
        checked.description,
        to_text(checked.created_at),
        checked.ttl_seconds,
        _optional_text(checked.expires_at),
        _optional_text(checked.max_expires_at),
        json.dumps(dict(checked.metadata), sort_keys=True),
    )


def _optional_text(moment: datetime | None) -> str | None:
    return None if moment is None else to_text(moment)


def _token_from_row(row: Sequence[Any]) -> TokenRecord:
    token_id, secret_hash, scopes, patterns, description, created, ttl, expires, max_expires, metadata = row
    return TokenRecord(
        token_id=token_id,
        secret_hash=bytes(secret_hash),
        scopes=tuple(json.loads(scopes)),
        key_patterns=tuple(json.loads(patterns)),
        description=description,
        created_at=from_text(created),
        ttl_seconds=ttl,
        expires_at=None if expires is None else from_text(expires),
        max_expires_at=None if max_expires is None else from_text(max_expires),
        metadata=json.loads(metadata),
    )

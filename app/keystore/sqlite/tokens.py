"""The SQL of the ``tokens`` table: token records by id, with only the secret's hash stored.

Each function runs on a connection inside the caller's transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from app.errors import ConflictError, TokenNotFoundError

from ..base import TokenRecord
from ..checks import check_token_record
from .schema import from_text, to_text


def insert_token(conn: sqlite3.Connection, record: TokenRecord) -> None:
    """Store ``record``.

    Raises:
        BadRequestError: a field of ``record`` has the wrong type or shape.
        ConflictError: a token with the same id exists.
    """
    values = token_values(record)
    if conn.execute("SELECT 1 FROM tokens WHERE token_id = ?", (record.token_id,)).fetchone():
        raise ConflictError(f"token {record.token_id!r} already exists")
    conn.execute(
        "INSERT INTO tokens (token_id, secret_hash, scopes, key_patterns, description, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        values,
    )


def get_token(conn: sqlite3.Connection, token_id: str) -> TokenRecord:
    """The record of ``token_id``.

    Raises:
        TokenNotFoundError: no such token.
    """
    row = conn.execute(
        "SELECT token_id, secret_hash, scopes, key_patterns, description, created_at FROM tokens "
        "WHERE token_id = ?",
        (token_id,),
    ).fetchone()
    if row is None:
        raise TokenNotFoundError(f"token {token_id!r} not found")
    return _token_from_row(row)


def list_tokens(conn: sqlite3.Connection) -> list[TokenRecord]:
    """Every token record, oldest first."""
    rows = conn.execute(
        "SELECT token_id, secret_hash, scopes, key_patterns, description, created_at FROM tokens "
        "ORDER BY created_at, token_id"
    ).fetchall()
    return [_token_from_row(row) for row in rows]


def delete_token(conn: sqlite3.Connection, token_id: str) -> None:
    """Delete ``token_id``.

    Raises:
        TokenNotFoundError: no such token.
    """
    if conn.execute("DELETE FROM tokens WHERE token_id = ?", (token_id,)).rowcount == 0:
        raise TokenNotFoundError(f"token {token_id!r} not found")


def count_tokens(conn: sqlite3.Connection) -> int:
    """How many tokens are stored."""
    return int(conn.execute("SELECT COUNT(*) FROM tokens").fetchone()[0])


def token_values(record: TokenRecord) -> tuple[object, ...]:
    """The row of ``record``, after checking every field (:func:`~app.keystore.checks.check_token_record`).

    Raises:
        BadRequestError: a field has the wrong type or shape (the message names it, never the hash).
    """
    checked = check_token_record(record)
    return (
        checked.token_id,
        checked.secret_hash,
        json.dumps(checked.scopes),
        json.dumps(checked.key_patterns),
        checked.description,
        to_text(checked.created_at),
    )


def _token_from_row(row: Sequence[Any]) -> TokenRecord:
    token_id, secret_hash, scopes, patterns, description, created = row
    return TokenRecord(
        token_id=token_id,
        secret_hash=bytes(secret_hash),
        scopes=tuple(json.loads(scopes)),
        key_patterns=tuple(json.loads(patterns)),
        description=description,
        created_at=from_text(created),
    )

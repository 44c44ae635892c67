"""The SQL of the change log and of the tombstones; every function runs inside the caller's transaction.

Every write transaction is ``BEGIN IMMEDIATE`` (one writer at a time, across processes), so numbers are taken
and committed in order: a reader that has seen number *n* has seen every change below it. ``AUTOINCREMENT``
never hands out a number twice, even after trimming. See :mod:`app.keystore.changes` for the records and
:mod:`app.keystore.tombstones` for why deleted names are held.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta

from ..changes import CHANGE_KINDS, Change, ChangeBatch, check_since_arguments
from ..records import utc_now
from ..tombstones import recently_deleted
from .schema import from_text, to_text

__all__ = ["add_tombstone", "append_change", "changes_since", "check_tombstone", "trim_changes"]


def append_change(
    conn: sqlite3.Connection,
    kind: str,
    *,
    key_name: str | None = None,
    token_id: str | None = None,
    role_name: str | None = None,
) -> int:
    """Append one change row in the caller's write transaction and return its sequence number."""
    if kind not in CHANGE_KINDS:
        raise ValueError(f"unknown change kind {kind!r}; allowed: {', '.join(CHANGE_KINDS)}")
    cursor = conn.execute(
        "INSERT INTO key_changes (kind, key_name, token_id, at, role_name) VALUES (?, ?, ?, ?, ?)",
        (kind, key_name, token_id, to_text(utc_now()), role_name),
    )
    assert cursor.lastrowid is not None  # an INSERT into a rowid table always sets it
    return int(cursor.lastrowid)


def changes_since(conn: sqlite3.Connection, seq: int, limit: int) -> ChangeBatch:
    """The changes after ``seq`` in order (at most ``limit``); call inside one read transaction.

    Raises:
        BadRequestError: ``seq`` is not an int >= 0, or ``limit`` not an int >= 1.
    """
    check_since_arguments(seq, limit)
    trimmed_through = int(conn.execute("SELECT through FROM key_changes_trimmed").fetchone()[0])
    newest = int(conn.execute("SELECT coalesce(max(seq), 0) FROM key_changes").fetchone()[0])
    head = max(trimmed_through, newest)
    if seq < trimmed_through or seq > head:
        return ChangeBatch([], head, True)
    rows = conn.execute(
        "SELECT seq, kind, key_name, token_id, at, role_name FROM key_changes WHERE seq > ? "
        "ORDER BY seq LIMIT ?",
        (seq, limit),
    ).fetchall()
    changes = [Change(int(row[0]), row[1], row[2], row[3], from_text(row[4]), row[5]) for row in rows]
    return ChangeBatch(changes, changes[-1].seq if changes else seq, False)


def trim_changes(conn: sqlite3.Connection, keep: int) -> int:
    """Delete all but the newest ``keep`` changes (in the caller's write transaction); return how many went.

    ``keep`` is an int >= 0 (:meth:`~app.keystore.base.KeyStore.trim_changes` checked it).
    """
    row = conn.execute(
        "SELECT count(*), coalesce(max(seq), 0) FROM key_changes "
        "WHERE seq NOT IN (SELECT seq FROM key_changes ORDER BY seq DESC LIMIT ?)",
        (keep,),
    ).fetchone()
    count, highest = int(row[0]), int(row[1])
    if count:
        conn.execute("DELETE FROM key_changes WHERE seq <= ?", (highest,))
        conn.execute("UPDATE key_changes_trimmed SET through = max(through, ?)", (highest,))
    return count


def add_tombstone(conn: sqlite3.Connection, name: str, seconds: float) -> None:
    """Hold the name of the just deleted key ``name`` for ``seconds``."""
    now = utc_now()
    conn.execute(
        "INSERT INTO key_tombstones (name, deleted_at, reusable_at) VALUES (?, ?, ?) "
        "ON CONFLICT (name) DO UPDATE SET deleted_at = excluded.deleted_at, "
        "reusable_at = excluded.reusable_at",
        (name, to_text(now), to_text(now + timedelta(seconds=seconds))),
    )


def check_tombstone(conn: sqlite3.Connection, name: str) -> None:
    """Drop an expired tombstone of ``name``.

    Raises:
        KeyRecentlyDeletedError: ``name`` was deleted and its tombstone has not expired.
    """
    row = conn.execute("SELECT reusable_at FROM key_tombstones WHERE name = ?", (name,)).fetchone()
    if row is None:
        return
    now, reusable_at = utc_now(), from_text(row[0])
    if reusable_at > now:
        raise recently_deleted(name, reusable_at, now)
    conn.execute("DELETE FROM key_tombstones WHERE name = ?", (name,))

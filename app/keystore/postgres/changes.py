"""The change log: an ordered record of every change to a key or token, for keeping caches coherent.

The records (:class:`~app.keystore.changes.Change`, :class:`~app.keystore.changes.ChangeBatch`) are shared
with the SQLite keystore. Every mutating keystore method calls :func:`append_change` as the last statement of
its own transaction, so a change and its log row commit together or not at all. A replica remembers the last
sequence number it has applied and asks :func:`changes_since` for what came after.


Sequence numbers come from a ``bigserial``, and a plain sequence can commit out of order: a transaction that
took number 11 may commit after one that took 12, and a reader that saw 12 would skip 11 for ever. So
:func:`append_change` first takes a transaction-level advisory lock (:data:`CHANGE_LOCK`, released at commit
or rollback): appends are serialized, each number is taken only after every smaller one has committed (or
rolled back), and a reader that has seen number *n* has seen everything below it. Writes to the keystore
(key management, not encryption) are rare, and the lock is held only from the append to the commit.

:func:`trim_changes` drops old rows and remembers the highest number it removed, so a replica that fell
behind the trimmed part is told (``trimmed=True``) to drop its caches instead of missing changes silently.

Each append also sends ``NOTIFY`` on :data:`CHANGE_CHANNEL` in the same transaction (PostgreSQL delivers it
only if the transaction commits), carrying the change (:func:`encode_change`): a listener whose last applied
number is just below it applies it at once; any other case (a gap, a lost notification) is a hint to read
the log now, which stays the truth.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from ..changes import (
    CHANGE_KINDS,
    MASTER_KEY_ROTATED,
    MAX_CHANGES_PER_CALL,
    Change,
    ChangeBatch,
    check_since_arguments,
)
from ..records import utc_now

if TYPE_CHECKING:
    from .connections import Connection

__all__ = [
    "CHANGE_CHANNEL",
    "CHANGE_KINDS",
    "CHANGE_LOCK",
    "MASTER_KEY_ROTATED",
    "MAX_CHANGES_PER_CALL",
    "Change",
    "ChangeBatch",
    "append_change",
    "changes_since",
    "decode_change",
    "encode_change",
    "trim_changes",
]

#: ``pg_advisory_xact_lock`` key that serializes appends ("kschange" as a big-endian 64-bit number).
CHANGE_LOCK = int.from_bytes(b"kschange", "big") >> 1
#: The ``NOTIFY`` channel: a hint, sent in the change's transaction (so only on commit), to read the log now.
CHANGE_CHANNEL = "keystream_changes"


def append_change(
    conn: Connection,
    kind: str,
    *,
    key_name: str | None = None,
    token_id: str | None = None,
    role_name: str | None = None,
) -> int:
    """Append one change row in the caller's transaction and return its sequence number.

    Call it last, just before the transaction commits: it holds :data:`CHANGE_LOCK` until then.
    """
    if kind not in CHANGE_KINDS:
        raise ValueError(f"unknown change kind {kind!r}; allowed: {', '.join(CHANGE_KINDS)}")
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (CHANGE_LOCK,))
    at = utc_now()
    row = conn.execute(
        "INSERT INTO key_changes (kind, key_name, token_id, at, role_name) VALUES (%s, %s, %s, %s, %s) "
        "RETURNING seq",
        (kind, key_name, token_id, at, role_name),
    ).fetchone()
    assert row is not None  # INSERT ... RETURNING always returns the row
    seq = int(row[0])
    payload = encode_change(Change(seq, kind, key_name, token_id, at, role_name))
    conn.execute("SELECT pg_notify(%s, %s)", (CHANGE_CHANNEL, payload))
    return seq


def encode_change(change: Change) -> str:
    """The ``NOTIFY`` payload of ``change``: JSON, far below PostgreSQL's 8000-byte payload limit."""
    return json.dumps(
        [change.seq, change.kind, change.key_name, change.token_id, change.at.isoformat(), change.role_name]
    )


def decode_change(payload: str) -> Change | None:
    """The change a ``NOTIFY`` payload describes, or ``None`` if it is not one (then it is a bare hint)."""
    try:
        seq, kind, key_name, token_id, at, role_name = json.loads(payload)
        at_time = datetime.fromisoformat(at).astimezone(UTC)
        change = Change(int(seq), str(kind), key_name, token_id, at_time, role_name)
    except (ValueError, TypeError):
        return None
    if kind not in CHANGE_KINDS or not change.names_what_its_kind_needs():
        return None
    return change


def changes_since(conn: Connection, seq: int, limit: int = MAX_CHANGES_PER_CALL) -> ChangeBatch:
    """The changes after ``seq`` in order (at most ``limit``), read in one snapshot.

    Raises:
        BadRequestError: ``seq`` is not an int >= 0, or ``limit`` not an int >= 1.
    """
    check_since_arguments(seq, limit)
    rows = conn.execute(
        """WITH state AS (
               SELECT (SELECT through FROM key_changes_trimmed) AS trimmed_through,
                      (SELECT coalesce(max(seq), 0) FROM key_changes) AS newest
           ), wanted AS (
               SELECT seq, kind, key_name, token_id, at, role_name FROM key_changes
               WHERE seq > %s ORDER BY seq LIMIT %s
           )
           SELECT state.trimmed_through, state.newest, wanted.seq, wanted.kind, wanted.key_name,
                  wanted.token_id, wanted.at, wanted.role_name
           FROM state LEFT JOIN wanted ON true ORDER BY wanted.seq""",
        (seq, limit),
    ).fetchall()
    trimmed_through, newest = int(rows[0][0]), int(rows[0][1])
    head = max(trimmed_through, newest)
    if seq < trimmed_through or seq > head:
        return ChangeBatch([], head, True)
    changes = [
        Change(int(row[2]), row[3], row[4], row[5], row[6].astimezone(UTC), row[7])
        for row in rows
        if row[2] is not None
    ]
    return ChangeBatch(changes, changes[-1].seq if changes else seq, False)


def trim_changes(conn: Connection, keep: int) -> int:
    """Delete all but the newest ``keep`` changes (in the caller's transaction); return how many went.

    ``keep`` is an int >= 0 (:meth:`~app.keystore.base.KeyStore.trim_changes` checked it).
    """
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (CHANGE_LOCK,))
    row = conn.execute(
        """WITH cut AS (
               SELECT seq FROM key_changes ORDER BY seq DESC OFFSET %s
           ), removed AS (
               DELETE FROM key_changes WHERE seq IN (SELECT seq FROM cut) RETURNING seq
           )
           SELECT count(*), coalesce(max(seq), 0) FROM removed""",
        (keep,),
    ).fetchone()
    assert row is not None  # an aggregate always returns one row
    count, highest = int(row[0]), int(row[1])
    if count:
        conn.execute("UPDATE key_changes_trimmed SET through = greatest(through, %s)", (highest,))
    return count

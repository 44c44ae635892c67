"""SQL for keys and their versions. Each function runs on a connection the caller has put in a transaction.

Concurrency is left to PostgreSQL:

* creation is ``INSERT ... ON CONFLICT DO NOTHING``: of two transactions inserting one name, the second waits
  for the first and then inserts nothing (the caller's ``KeyExistsError``), or proceeds if the first rolled
  back;
* every read-modify-write (rotate, update, delete) starts with ``SELECT ... FOR UPDATE`` on the key's row, so
  two replicas rotating one key queue on the row lock and get two distinct versions, and a policy update
  never overwrites a change it did not see;
* a deleted name keeps a tombstone (:mod:`app.keystore.tombstones`), checked *after* the insert: an insert
  that waited for a concurrent delete of the same name then sees that delete's tombstone and rolls back;
* a key with its versions is read by one statement, so it is one snapshot even outside a transaction.

Material is wrapped and unwrapped by the caller (:mod:`app.keystore.master`); only wrapped blobs pass here.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from app.errors import KeyNotFoundError

from ..records import KEY_COLUMNS, KeyExport, KeyInfo, KeyPolicy, KeyVersionInfo, key_info_from_row, key_row
from ..tombstones import recently_deleted

if TYPE_CHECKING:
    from .connections import Connection

__all__ = [
    "check_tombstone",
    "delete_key",
    "delete_rows",
    "delete_versions_below",
    "export_keys",
    "insert_exported",
    "insert_version",
    "lock_key",
    "read_key",
    "read_keys",
    "read_wrapped",
    "rotation_schedule",
    "update_policy",
]

_INFO_SELECT = """
    SELECT k.name, k.key_type, k.scheme, k.segment_size, k.deletion_allowed, k.min_decryption_version,
           k.latest_version, k.imported, k.created_at, k.updated_at, k.auto_rotate_period, k.derived,
           k.convergent_encryption, k.exportable, k.allow_plaintext_backup,
           array_agg(v.version ORDER BY v.version), array_agg(v.created_at ORDER BY v.version)
    FROM keys k JOIN key_versions v ON v.key_name = k.name
"""

#: :data:`_INFO_SELECT` plus every version's wrapped blob (column 17), in version order.
_EXPORT_SELECT = _INFO_SELECT.replace(
    "FROM keys k", ", array_agg(v.wrapped ORDER BY v.version)\n    FROM keys k"
)


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


def _info(row: Sequence[Any]) -> KeyInfo:
    versions = (KeyVersionInfo(int(n), _utc(t)) for n, t in zip(row[15], row[16], strict=True))
    return key_info_from_row(row, versions, _utc)


def read_key(conn: Connection, name: str) -> KeyInfo:
    """Key ``name`` with its versions.

    Raises:
        KeyNotFoundError: no such key.
    """
    row = conn.execute(_INFO_SELECT + " WHERE k.name = %s GROUP BY k.name", (name,)).fetchone()
    if row is None:
        raise KeyNotFoundError(f"key {name!r} not found")
    return _info(row)


def read_keys(conn: Connection) -> list[KeyInfo]:
    """Every key, ordered by name (``COLLATE "C"``: byte order, as SQLite sorts)."""
    rows = conn.execute(_INFO_SELECT + ' GROUP BY k.name ORDER BY k.name COLLATE "C"').fetchall()
    return [_info(row) for row in rows]


def _insert_row(conn: Connection, info: KeyInfo) -> bool:
    """Insert the ``keys`` row of ``info`` as it is; False when the name is taken."""
    values = key_row(info)
    row = conn.execute(
        f"INSERT INTO keys ({KEY_COLUMNS}) VALUES ({', '.join(['%s'] * len(values))}) "  # noqa: S608 - constants
        "ON CONFLICT (name) DO NOTHING RETURNING name",
        values,
    ).fetchone()
    return row is not None


def export_keys(conn: Connection) -> list[KeyExport]:
    """Every key with its versions' wrapped blobs, by name, in one statement (one snapshot)."""
    rows = conn.execute(_EXPORT_SELECT + ' GROUP BY k.name ORDER BY k.name COLLATE "C"').fetchall()
    return [KeyExport(_info(row), tuple(bytes(blob) for blob in row[17])) for row in rows]


def insert_exported(conn: Connection, key: KeyExport) -> bool:
    """Insert a copied key as is (metadata, times, every wrapped version); False when the name is taken."""
    info = key.info
    if not _insert_row(conn, info):
        return False
    with conn.cursor() as cursor:
        cursor.executemany(
            "INSERT INTO key_versions (key_name, version, wrapped, created_at) VALUES (%s, %s, %s, %s)",
            [
                (info.name, version.version, blob, version.created_at)
                for version, blob in zip(info.versions, key.wrapped, strict=True)
            ],
        )
    return True


def lock_key(conn: Connection, name: str) -> KeyInfo:
    """Lock key ``name``'s row for the rest of the transaction and return the key with its versions.

    Raises:
        KeyNotFoundError: no such key.
    """
    if conn.execute("SELECT 1 FROM keys WHERE name = %s FOR UPDATE", (name,)).fetchone() is None:
        raise KeyNotFoundError(f"key {name!r} not found")
    return read_key(conn, name)


def insert_version(
    conn: Connection, name: str, version: int, wrapped: bytes, now: datetime, *, imported: bool = False
) -> None:
    """Add version ``version`` and make it the key's latest (the caller holds the row lock).

    ``imported=True`` (caller-supplied material) also sets the key's ``imported`` flag.
    """
    conn.execute(
        "INSERT INTO key_versions (key_name, version, wrapped, created_at) VALUES (%s, %s, %s, %s)",
        (name, version, wrapped, now),
    )
    conn.execute(
        "UPDATE keys SET latest_version = %s, updated_at = %s, imported = imported OR %s "
        "WHERE name = %s AND latest_version < %s",
        (version, now, imported, name, version),
    )


def delete_versions_below(conn: Connection, name: str, min_available_version: int, now: datetime) -> int:
    """Delete the key's versions below ``min_available_version`` (the caller holds the row lock and has
    checked the value); return how many were deleted."""
    deleted = conn.execute(
        "DELETE FROM key_versions WHERE key_name = %s AND version < %s", (name, min_available_version)
    ).rowcount
    if deleted:
        conn.execute("UPDATE keys SET updated_at = %s WHERE name = %s", (now, name))
    return int(deleted)


def update_policy(conn: Connection, name: str, policy: KeyPolicy, now: datetime) -> None:
    """Set the key's policy fields to ``policy`` (the caller holds the row lock and checked the values)."""
    conn.execute(
        "UPDATE keys SET min_decryption_version = %s, deletion_allowed = %s, auto_rotate_period = %s, "
        "exportable = %s, allow_plaintext_backup = %s, updated_at = %s WHERE name = %s",
        (*policy, now, name),
    )


def rotation_schedule(conn: Connection) -> list[tuple[str, int, datetime]]:
    """``(name, auto_rotate_period, latest version's created_at)`` of every key with a period, by name."""
    rows = conn.execute(
        "SELECT k.name, k.auto_rotate_period, v.created_at FROM keys k "
        "JOIN key_versions v ON v.key_name = k.name AND v.version = k.latest_version "
        'WHERE k.auto_rotate_period > 0 ORDER BY k.name COLLATE "C"'
    ).fetchall()
    return [(str(name), int(period), _utc(created)) for name, period, created in rows]


def delete_key(conn: Connection, name: str, tombstone_seconds: float) -> None:
    """Delete the key and (by cascade) its versions; hold its name for ``tombstone_seconds``.

    The tombstone's times come from the database's clock, shared by every replica.
    """
    conn.execute("DELETE FROM keys WHERE name = %s", (name,))
    conn.execute(
        "INSERT INTO key_tombstones (name, deleted_at, reusable_at) "
        "VALUES (%s, now(), now() + make_interval(secs => %s)) "
        "ON CONFLICT (name) DO UPDATE SET deleted_at = excluded.deleted_at, "
        "reusable_at = excluded.reusable_at",
        (name, tombstone_seconds),
    )


def delete_rows(conn: Connection, name: str) -> None:
    """Delete the key and (by cascade) its versions, leaving no tombstone: the caller stores the name again
    in the same transaction (a forced restore)."""
    conn.execute("DELETE FROM keys WHERE name = %s", (name,))


def check_tombstone(conn: Connection, name: str) -> None:
    """Drop an expired tombstone of ``name``.

    Raises:
        KeyRecentlyDeletedError: ``name`` was deleted and its tombstone has not expired (database clock).
    """
    row = conn.execute(
        "DELETE FROM key_tombstones WHERE name = %s AND reusable_at <= now() RETURNING name", (name,)
    ).fetchone()
    if row is not None:
        return
    held = conn.execute("SELECT reusable_at, now() FROM key_tombstones WHERE name = %s", (name,)).fetchone()
    if held is not None:
        raise recently_deleted(name, held[0].astimezone(UTC), held[1].astimezone(UTC))


def read_wrapped(conn: Connection, name: str, version: int) -> tuple[bytes | None, int, int] | None:
    """``(wrapped or None, oldest remaining version, latest_version)`` of a key version in one statement; None
    if no such key."""
    row = conn.execute(
        "SELECT v.wrapped, (SELECT min(o.version) FROM key_versions o WHERE o.key_name = k.name), "
        "k.latest_version FROM keys k "
        "LEFT JOIN key_versions v ON v.key_name = k.name AND v.version = %s WHERE k.name = %s",
        (version, name),
    ).fetchone()
    if row is None:
        return None
    return (bytes(row[0]) if row[0] is not None else None), int(row[1]), int(row[2])

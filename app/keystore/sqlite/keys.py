"""The SQL of the ``keys`` and ``key_versions`` tables; every function runs on a connection inside the
caller's transaction (the template, :class:`~app.keystore.base.KeyStore`, validates arguments first).

Key material is stored wrapped under the master key (:mod:`app.keystore.master`), bound to its key name and
version; it is unwrapped only by :func:`key_material`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.errors import KeyExistsError, KeyNotFoundError, KeyVersionNotFoundError
from app.seal.keyring import Keyring

from ..master import unwrap_key_material, wrap_key_material
from ..records import (
    KEY_COLUMNS,
    KeyExport,
    KeyInfo,
    KeyPolicy,
    KeyVersionInfo,
    key_info_from_row,
    key_row,
    utc_now,
)
from .schema import from_text, to_text


def key_info(conn: sqlite3.Connection, name: str) -> KeyInfo | None:
    """Key ``name`` with its versions, or ``None``."""
    row = conn.execute(
        f"SELECT {KEY_COLUMNS} FROM keys WHERE name = ?",  # noqa: S608 - constant column names
        (name,),
    ).fetchone()
    if row is None:
        return None
    versions = conn.execute(
        "SELECT version, created_at FROM key_versions WHERE key_name = ? ORDER BY version", (name,)
    ).fetchall()
    return _info_from_row(row, [KeyVersionInfo(v, from_text(created)) for v, created in versions])


def require_key(conn: sqlite3.Connection, name: str) -> KeyInfo:
    """Key ``name`` with its versions.

    Raises:
        KeyNotFoundError: no such key.
    """
    info = key_info(conn, name)
    if info is None:
        raise KeyNotFoundError(f"key {name!r} not found")
    return info


def export_keys(conn: sqlite3.Connection) -> list[KeyExport]:
    """Every key with its versions' wrapped blobs, by name (call inside one read transaction)."""
    wrapped: dict[str, list[bytes]] = {}
    for key_name, blob in conn.execute(
        "SELECT key_name, wrapped FROM key_versions ORDER BY key_name, version"
    ):
        wrapped.setdefault(key_name, []).append(bytes(blob))
    return [KeyExport(info, tuple(wrapped.get(info.name, []))) for info in list_keys(conn)]


def insert_exported(conn: sqlite3.Connection, key: KeyExport) -> None:
    """Store a copied key as is: metadata, times and every wrapped version.

    Raises:
        KeyExistsError: a key called ``key.info.name`` exists.
    """
    info = key.info
    if conn.execute("SELECT 1 FROM keys WHERE name = ?", (info.name,)).fetchone() is not None:
        raise KeyExistsError(f"key {info.name!r} already exists")
    row = key_row(info)
    conn.execute(
        f"INSERT INTO keys ({KEY_COLUMNS}) VALUES ({', '.join('?' * len(row))})",  # noqa: S608 - constants
        tuple(to_text(value) if isinstance(value, datetime) else value for value in row),
    )
    conn.executemany(
        "INSERT INTO key_versions (key_name, version, wrapped, created_at) VALUES (?, ?, ?, ?)",
        [
            (info.name, version.version, blob, to_text(version.created_at))
            for version, blob in zip(info.versions, key.wrapped, strict=True)
        ],
    )


def list_keys(conn: sqlite3.Connection) -> list[KeyInfo]:
    """Every key with its versions, by name."""
    rows = conn.execute(f"SELECT {KEY_COLUMNS} FROM keys ORDER BY name").fetchall()  # noqa: S608 - constants
    versions: dict[str, list[KeyVersionInfo]] = {}
    for key_name, version, created in conn.execute(
        "SELECT key_name, version, created_at FROM key_versions ORDER BY key_name, version"
    ):
        versions.setdefault(key_name, []).append(KeyVersionInfo(version, from_text(created)))
    return [_info_from_row(row, versions.get(row[0], [])) for row in rows]


def add_version(
    conn: sqlite3.Connection,
    seal: Keyring,
    info: KeyInfo,
    material: bytes | memoryview,
    *,
    imported: bool = False,
) -> KeyInfo:
    """Store ``material`` as the next version of key ``info`` and make it the latest.

    ``imported=True`` (caller-supplied material) also sets the key's ``imported`` flag.
    """
    name = info.name
    version = info.latest_version + 1
    now = to_text(utc_now())
    conn.execute(
        "INSERT INTO key_versions (key_name, version, wrapped, created_at) VALUES (?, ?, ?, ?)",
        (name, version, wrap_key_material(seal, name, version, material), now),
    )
    conn.execute(
        "UPDATE keys SET latest_version = ?, updated_at = ?, imported = MAX(imported, ?) WHERE name = ?",
        (version, now, int(imported), name),
    )
    return require_key(conn, name)


def rotation_schedule(conn: sqlite3.Connection) -> list[tuple[str, int, datetime]]:
    """``(name, auto_rotate_period, latest version's created_at)`` of every key with a period, by name."""
    rows = conn.execute(
        "SELECT k.name, k.auto_rotate_period, v.created_at FROM keys k "
        "JOIN key_versions v ON v.key_name = k.name AND v.version = k.latest_version "
        "WHERE k.auto_rotate_period > 0 ORDER BY k.name"
    ).fetchall()
    return [(name, int(period), from_text(created)) for name, period, created in rows]


def delete_versions_below(conn: sqlite3.Connection, name: str, min_available_version: int) -> int:
    """Delete key ``name``'s versions below ``min_available_version``; return how many were deleted."""
    deleted = conn.execute(
        "DELETE FROM key_versions WHERE key_name = ? AND version < ?", (name, min_available_version)
    ).rowcount
    if deleted:
        conn.execute("UPDATE keys SET updated_at = ? WHERE name = ?", (to_text(utc_now()), name))
    return deleted


def update_policy(conn: sqlite3.Connection, name: str, policy: KeyPolicy) -> KeyInfo:
    """Set key ``name``'s policy fields to ``policy`` (checked by the caller) and return the key."""
    conn.execute(
        "UPDATE keys SET min_decryption_version = ?, deletion_allowed = ?, auto_rotate_period = ?, "
        "exportable = ?, allow_plaintext_backup = ?, updated_at = ? WHERE name = ?",
        (
            policy.min_decryption_version,
            int(policy.deletion_allowed),
            policy.auto_rotate_period,
            int(policy.exportable),
            int(policy.allow_plaintext_backup),
            to_text(utc_now()),
            name,
        ),
    )
    return require_key(conn, name)


def delete_key(conn: sqlite3.Connection, name: str) -> None:
    """Delete key ``name`` and every version of it (the caller checked that it may)."""
    conn.execute("DELETE FROM key_versions WHERE key_name = ?", (name,))
    conn.execute("DELETE FROM keys WHERE name = ?", (name,))


def key_material(conn: sqlite3.Connection, seal: Keyring, name: str, version: int) -> memoryview:
    """The unwrapped material of key ``name`` at ``version``.

    Raises:
        KeyNotFoundError: no such key.
        KeyVersionNotFoundError: the key has no such version.
        KeyUnwrapError: the stored material does not unwrap under ``seal``.
    """
    row = conn.execute(
        "SELECT wrapped FROM key_versions WHERE key_name = ? AND version = ?", (name, version)
    ).fetchone()
    if row is None:
        found = conn.execute(
            "SELECT (SELECT min(version) FROM key_versions WHERE key_name = ?), latest_version FROM keys "
            "WHERE name = ?",
            (name, name),
        ).fetchone()
        if found is None:
            raise KeyNotFoundError(f"key {name!r} not found")
        oldest, latest = found
        raise KeyVersionNotFoundError(
            f"key {name!r} has no version {version} (versions {oldest} to {latest})"
        )
    wrapped: bytes = row[0]
    return unwrap_key_material(seal, name, version, wrapped)


def _info_from_row(row: Sequence[Any], versions: list[KeyVersionInfo]) -> KeyInfo:
    return key_info_from_row(row, versions, from_text)

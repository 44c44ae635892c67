"""The keystore's schema: versioned migrations applied in order at open, and the master-key check.

``PRAGMA user_version`` holds the current version and the ``schema_version`` table records when each
migration ran. A database from a newer release is refused (:class:`KeystoreSchemaError`). Version 2 adds the
change log (``key_changes``, see :mod:`.changes`) and the tombstones of deleted key names. Version 3 adds
each key's sealed ``scheme`` (:mod:`app.core.schemes`); keys stored before it keep ``ctr-hmac``, the only
format they can have. Version 4 gives tokens an optional lifetime (``ttl_seconds``, ``expires_at``,
``max_expires_at``; tokens stored before it have none) and lets the change log record ``token_renewed``:
SQLite cannot change a CHECK constraint in place, so the log is rebuilt with its numbers and its
``AUTOINCREMENT`` counter kept. Version 5 adds each key's ``auto_rotate_period`` in seconds (0: off, what keys
stored before it get; see :mod:`app.keystore.rotation`). Version 6 adds the master key's generations and
its rotation's state (:mod:`app.keystore.generations`; a keystore from before it is at generation 1, the
seal's own key) and lets the change log record ``master_key_rotated``, a row naming neither a key nor a
token (the log is rebuilt as in version 4). Version 7 adds the login roles (``auth_roles``: a role's policy
and its method's bindings as JSON) and the auth methods' configurations (``auth_methods``), each token's
``metadata`` (what a login records: its role and subject; ``{}`` for tokens stored before it), and a
``role_name`` column to the change log for the ``role_*`` kinds (the log is rebuilt as in version 4).
Version 8 adds each key's options (``derived``, ``convergent_encryption``, ``exportable``,
``allow_plaintext_backup``; false for keys stored before it, see :class:`~app.keystore.records.KeyOptions`)
and lets ``key_type`` be ``aes256-siv``: ``keys`` is rebuilt with its rows, and ``key_versions`` with it,
since dropping the old ``keys`` while a table still referred to it would delete every version by cascade.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from app.seal import Seal

from .. import migrations as shared
from ..changes import MASTER_KEY_ROTATED
from ..master import SEAL_ROWS, settle_seal
from ..migrations import KeystoreSchemaError, Migration
from ..records import utc_now

__all__ = [
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "KeystoreSchemaError",
    "Migration",
    "from_text",
    "migrate",
    "to_text",
]

logger = logging.getLogger("app.keystore.sqlite")

#: The ``keys`` table's columns at schema version 7, copied as they are by version 8.
_KEY_COLUMNS_V7 = (
    "name, key_type, segment_size, deletion_allowed, min_decryption_version, latest_version, imported, "
    "created_at, updated_at, scheme, auto_rotate_period"
)


MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "keys, wrapped key versions, token hashes, keystore metadata",
        (
            """CREATE TABLE schema_version (
                version     INTEGER PRIMARY KEY,
                description TEXT NOT NULL,
                applied_at  TEXT NOT NULL
            )""",
            """CREATE TABLE meta (
                name  TEXT PRIMARY KEY,
                value BLOB NOT NULL
            )""",
            f"""CREATE TABLE keys (
                name                   TEXT PRIMARY KEY,
                key_type               TEXT NOT NULL CHECK (key_type IN ({shared.KEY_TYPES_V1_SQL})),
                segment_size           INTEGER NOT NULL,
                deletion_allowed       INTEGER NOT NULL CHECK (deletion_allowed IN (0, 1)),
                min_decryption_version INTEGER NOT NULL CHECK (min_decryption_version >= 1),
                latest_version         INTEGER NOT NULL CHECK (latest_version >= min_decryption_version),
                imported               INTEGER NOT NULL CHECK (imported IN (0, 1)),
                created_at             TEXT NOT NULL,
                updated_at             TEXT NOT NULL
            )""",
            """CREATE TABLE key_versions (
                key_name   TEXT NOT NULL REFERENCES keys (name) ON DELETE CASCADE,
                version    INTEGER NOT NULL CHECK (version >= 1),
                wrapped    BLOB NOT NULL,
                created_at TEXT NOT NULL,
                PRIMARY KEY (key_name, version)
            )""",
            """CREATE TABLE tokens (
                token_id     TEXT PRIMARY KEY,
                secret_hash  BLOB NOT NULL,
                scopes       TEXT NOT NULL,
                key_patterns TEXT NOT NULL,
                description  TEXT NOT NULL,
                created_at   TEXT NOT NULL
            )""",
        ),
    ),
    Migration(
        2,
        "change log, tombstones of deleted key names",
        (
            # AUTOINCREMENT: a number is never reused, even after the newest rows were trimmed.
            f"""CREATE TABLE key_changes (
                seq      INTEGER PRIMARY KEY AUTOINCREMENT,
                kind     TEXT NOT NULL CHECK (kind IN ({shared.CHANGE_KINDS_V1_SQL})),
                key_name TEXT,
                token_id TEXT,
                at       TEXT NOT NULL,
                CHECK ((key_name IS NULL) <> (token_id IS NULL))
            )""",
            # Highest sequence number removed by trimming (0: nothing trimmed yet). One row.
            """CREATE TABLE key_changes_trimmed (
                one     INTEGER PRIMARY KEY CHECK (one = 1),
                through INTEGER NOT NULL
            )""",
            "INSERT INTO key_changes_trimmed (one, through) VALUES (1, 0)",
            """CREATE TABLE key_tombstones (
                name        TEXT PRIMARY KEY,
                deleted_at  TEXT NOT NULL,
                reusable_at TEXT NOT NULL
            )""",
        ),
    ),
    shared.KEY_SCHEME,
    Migration(
        4,
        "token lifetimes (ttl, expiry, renewal limit); the change log records token renewals",
        (
            "ALTER TABLE tokens ADD COLUMN ttl_seconds INTEGER CHECK (ttl_seconds >= 1)",
            "ALTER TABLE tokens ADD COLUMN expires_at TEXT",
            "ALTER TABLE tokens ADD COLUMN max_expires_at TEXT",
            f"""CREATE TABLE key_changes_v4 (
                seq      INTEGER PRIMARY KEY AUTOINCREMENT,
                kind     TEXT NOT NULL CHECK (kind IN ({shared.CHANGE_KINDS_V4_SQL})),
                key_name TEXT,
                token_id TEXT,
                at       TEXT NOT NULL,
                CHECK ((key_name IS NULL) <> (token_id IS NULL))
            )""",
            "INSERT INTO key_changes_v4 (seq, kind, key_name, token_id, at) "
            "SELECT seq, kind, key_name, token_id, at FROM key_changes",
            # Keep the counter, which may be above every remaining row (the newest were trimmed).
            "DELETE FROM sqlite_sequence WHERE name = 'key_changes_v4'",
            "INSERT INTO sqlite_sequence (name, seq) "
            "SELECT 'key_changes_v4', seq FROM sqlite_sequence WHERE name = 'key_changes'",
            "DROP TABLE key_changes",
            "ALTER TABLE key_changes_v4 RENAME TO key_changes",
        ),
    ),
    shared.KEY_AUTO_ROTATE_PERIOD,
    Migration(
        6,
        "master key generations and the rotation's state; the change log records master key rotations",
        (
            """CREATE TABLE master_key_generations (
                generation INTEGER PRIMARY KEY CHECK (generation >= 2),
                stored     BLOB NOT NULL,
                created_at TEXT NOT NULL
            )""",
            """CREATE TABLE master_key_rotation (
                one         INTEGER PRIMARY KEY CHECK (one = 1),
                generation  INTEGER NOT NULL CHECK (generation >= 1),
                finished    INTEGER NOT NULL CHECK (finished IN (0, 1)),
                rewrapped   INTEGER NOT NULL CHECK (rewrapped >= 0),
                started_at  TEXT,
                finished_at TEXT,
                lease_owner TEXT,
                lease_until TEXT
            )""",
            "INSERT INTO master_key_rotation (one, generation, finished, rewrapped) VALUES (1, 1, 1, 0)",
            f"""CREATE TABLE key_changes_v6 (
                seq      INTEGER PRIMARY KEY AUTOINCREMENT,
                kind     TEXT NOT NULL CHECK (kind IN ({shared.CHANGE_KINDS_V6_SQL})),
                key_name TEXT,
                token_id TEXT,
                at       TEXT NOT NULL,
                CHECK ((key_name IS NULL) <> (token_id IS NULL)
                       OR (kind = '{MASTER_KEY_ROTATED}' AND key_name IS NULL AND token_id IS NULL))
            )""",
            "INSERT INTO key_changes_v6 (seq, kind, key_name, token_id, at) "
            "SELECT seq, kind, key_name, token_id, at FROM key_changes",
            "DELETE FROM sqlite_sequence WHERE name = 'key_changes_v6'",
            "INSERT INTO sqlite_sequence (name, seq) "
            "SELECT 'key_changes_v6', seq FROM sqlite_sequence WHERE name = 'key_changes'",
            "DROP TABLE key_changes",
            "ALTER TABLE key_changes_v6 RENAME TO key_changes",
        ),
    ),
    Migration(
        7,
        "login roles and auth method configurations; token metadata; the change log names roles",
        (
            """CREATE TABLE auth_roles (
                name       TEXT PRIMARY KEY,
                method     TEXT NOT NULL,
                policy     TEXT NOT NULL,
                created_at TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            """CREATE TABLE auth_methods (
                method     TEXT PRIMARY KEY,
                config     TEXT NOT NULL,
                updated_at TEXT NOT NULL
            )""",
            "ALTER TABLE tokens ADD COLUMN metadata TEXT NOT NULL DEFAULT '{}'",
            f"""CREATE TABLE key_changes_v7 (
                seq       INTEGER PRIMARY KEY AUTOINCREMENT,
                kind      TEXT NOT NULL CHECK (kind IN ({shared.CHANGE_KINDS_SQL})),
                key_name  TEXT,
                token_id  TEXT,
                at        TEXT NOT NULL,
                role_name TEXT,
                CHECK ((key_name IS NOT NULL) + (token_id IS NOT NULL) + (role_name IS NOT NULL)
                       = (CASE WHEN kind IN ({shared.NAMELESS_KINDS_SQL}) THEN 0 ELSE 1 END))
            )""",
            "INSERT INTO key_changes_v7 (seq, kind, key_name, token_id, at) "
            "SELECT seq, kind, key_name, token_id, at FROM key_changes",
            "DELETE FROM sqlite_sequence WHERE name = 'key_changes_v7'",
            "INSERT INTO sqlite_sequence (name, seq) "
            "SELECT 'key_changes_v7', seq FROM sqlite_sequence WHERE name = 'key_changes'",
            "DROP TABLE key_changes",
            "ALTER TABLE key_changes_v7 RENAME TO key_changes",
        ),
    ),
    Migration(
        8,
        "key options (derived, convergent_encryption, exportable, allow_plaintext_backup); aes256-siv keys",
        (
            f"""CREATE TABLE keys_v8 (
                name                   TEXT PRIMARY KEY,
                key_type               TEXT NOT NULL CHECK (key_type IN ({shared.KEY_TYPES_SQL})),
                segment_size           INTEGER NOT NULL,
                deletion_allowed       INTEGER NOT NULL CHECK (deletion_allowed IN (0, 1)),
                min_decryption_version INTEGER NOT NULL CHECK (min_decryption_version >= 1),
                latest_version         INTEGER NOT NULL CHECK (latest_version >= min_decryption_version),
                imported               INTEGER NOT NULL CHECK (imported IN (0, 1)),
                created_at             TEXT NOT NULL,
                updated_at             TEXT NOT NULL,
                scheme                 TEXT NOT NULL CHECK (scheme IN ({shared.SCHEMES_SQL})),
                auto_rotate_period     INTEGER NOT NULL CHECK (auto_rotate_period >= 0),
                derived                INTEGER NOT NULL DEFAULT 0 CHECK (derived IN (0, 1)),
                convergent_encryption  INTEGER NOT NULL DEFAULT 0
                                       CHECK (convergent_encryption IN (0, 1)),
                exportable             INTEGER NOT NULL DEFAULT 0 CHECK (exportable IN (0, 1)),
                allow_plaintext_backup INTEGER NOT NULL DEFAULT 0 CHECK (allow_plaintext_backup IN (0, 1)),
                CHECK (derived OR NOT convergent_encryption)
            )""",
            f"INSERT INTO keys_v8 ({_KEY_COLUMNS_V7}) SELECT {_KEY_COLUMNS_V7} FROM keys",  # noqa: S608
            """CREATE TABLE key_versions_v8 (
                key_name   TEXT NOT NULL REFERENCES keys_v8 (name) ON DELETE CASCADE,
                version    INTEGER NOT NULL CHECK (version >= 1),
                wrapped    BLOB NOT NULL,
                created_at TEXT NOT NULL,
                PRIMARY KEY (key_name, version)
            )""",
            "INSERT INTO key_versions_v8 (key_name, version, wrapped, created_at) "
            "SELECT key_name, version, wrapped, created_at FROM key_versions",
            "DROP TABLE key_versions",
            "DROP TABLE keys",
            # Renaming keys_v8 rewrites key_versions_v8's reference to it: it then refers to keys.
            "ALTER TABLE keys_v8 RENAME TO keys",
            "ALTER TABLE key_versions_v8 RENAME TO key_versions",
        ),
    ),
)
#: The schema version this code writes and expects.
SCHEMA_VERSION = MIGRATIONS[-1].version


def to_text(moment: datetime) -> str:
    """A timestamp as stored: ISO 8601 in UTC with microseconds."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def from_text(text: str) -> datetime:
    """A stored timestamp back as an aware UTC ``datetime``."""
    return datetime.fromisoformat(text).astimezone(UTC)


def migrate(conn: sqlite3.Connection, path: Path, seal: Seal, migrations: Sequence[Migration]) -> None:
    """Apply the ``migrations`` newer than the database, then check (or record) the seal's check value.

    Call inside one write transaction, so several workers starting together migrate once.

    Raises:
        KeystoreSchemaError: the database is newer than the newest of ``migrations``.
        MasterKeyError: ``seal`` is not the seal (or master key) the database was created with.
    """
    latest = migrations[-1].version if migrations else 0
    current = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if current > latest:
        raise KeystoreSchemaError(
            f"keystore {path} has schema version {current}, newer than this release "
            f"supports ({latest}); upgrade Keystream"
        )
    for migration in migrations:
        if migration.version <= current:
            continue
        for statement in migration.statements:
            conn.execute(statement)
        conn.execute(
            "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
            (migration.version, migration.description, to_text(utc_now())),
        )
        conn.execute(f"PRAGMA user_version = {int(migration.version)}")
        if current:
            logger.info("keystore %s migrated to schema version %d", path, migration.version)
    meta = {
        str(name): bytes(value)
        for name, value in conn.execute("SELECT name, value FROM meta WHERE name IN (?, ?, ?)", SEAL_ROWS)
    }
    hint = "Restore the original master.key or KEYSTREAM_MASTER_KEY"
    for name, value in settle_seal(seal, meta, str(path), hint).items():
        conn.execute("INSERT INTO meta (name, value) VALUES (?, ?)", (name, value))


def read_meta(conn: sqlite3.Connection, name: str) -> bytes | None:
    """The ``meta`` row ``name`` (a blob), or ``None``."""
    row = conn.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
    return None if row is None else bytes(row[0])

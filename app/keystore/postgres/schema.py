"""The PostgreSQL keystore's schema: versioned migrations, applied once under an advisory lock.

:func:`migrate` runs in one transaction that first takes a transaction-level advisory lock
(:data:`MIGRATION_LOCK`), so N replicas starting together queue on it: the first applies the missing
migrations and commits, the others then find the schema current and change nothing. PostgreSQL's DDL is
transactional, so a failed migration leaves no trace. The ``schema_version`` table records every migration
applied; a database whose newest version is above what this release knows is refused
(:class:`~app.keystore.migrations.KeystoreSchemaError`), as the SQLite keystore does.

The same transaction checks the master key against the check value stored in ``meta`` (written by the first
replica), so a replica started with another master key refuses to start before it can write anything.

Schema version 1 includes the change log ``key_changes``: one row per change to a key or token, appended in
the change's own transaction (see :mod:`.changes`). Version 2 adds ``key_tombstones``: when a deleted name
may be re-created (see :mod:`app.keystore.tombstones`), and the index that keeps the poll one cheap query.
Version 3 adds each key's sealed ``scheme`` (:mod:`app.core.schemes`); keys stored before it keep
``ctr-hmac``, the only format they can have. Version 4 gives tokens an optional lifetime (``ttl_seconds``,
``expires_at``, ``max_expires_at``; tokens stored before it have none) and lets the change log record
``token_renewed``. Version 5 adds each key's ``auto_rotate_period`` in seconds (0: off, what keys stored
before it get; see :mod:`app.keystore.rotation`). Version 6 adds the master key's generations and its
rotation's state (:mod:`app.keystore.generations`; a keystore from before it is at generation 1, the seal's
own key) and lets the change log record ``master_key_rotated``, a row naming neither a key nor a token.
Version 7 adds the login roles (``auth_roles``: a role's policy and its method's bindings as JSON text) and
the auth methods' configurations (``auth_methods``), each token's ``metadata`` (``{}`` for tokens stored
before it), and a ``role_name`` column to the change log for the ``role_*`` kinds. Version 8 adds each key's
options (``derived``, ``convergent_encryption``, ``exportable``, ``allow_plaintext_backup``; false for keys
stored before it, see :class:`~app.keystore.records.KeyOptions`) and lets ``key_type`` be ``aes256-siv``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from app.seal import Seal

from .. import migrations as shared
from ..checks import MAX_SEGMENT_SIZE, MIN_SEGMENT_SIZE
from ..master import SEAL_ROWS, settle_seal
from ..migrations import KeystoreSchemaError, Migration
from ..records import utc_now
from .changes import MASTER_KEY_ROTATED

if TYPE_CHECKING:
    from .connections import Connection

__all__ = ["MIGRATIONS", "MIGRATION_LOCK", "SCHEMA_VERSION", "migrate", "read_meta", "schema_version"]

#: ``pg_advisory_xact_lock`` key held while migrating ("keystrea" as a big-endian 64-bit number).
MIGRATION_LOCK = int.from_bytes(b"keystrea", "big") >> 1

MIGRATIONS: tuple[Migration, ...] = (
    Migration(
        1,
        "keys, wrapped key versions, token hashes, keystore metadata, change log",
        (
            """CREATE TABLE schema_version (
                version     integer PRIMARY KEY,
                description text NOT NULL,
                applied_at  timestamptz NOT NULL
            )""",
            """CREATE TABLE meta (
                name  text PRIMARY KEY,
                value bytea NOT NULL
            )""",
            f"""CREATE TABLE keys (
                name                   text PRIMARY KEY,
                key_type               text NOT NULL CHECK (key_type IN ({shared.KEY_TYPES_V1_SQL})),
                segment_size           integer NOT NULL
                                       CHECK (segment_size BETWEEN {MIN_SEGMENT_SIZE} AND {MAX_SEGMENT_SIZE}),
                deletion_allowed       boolean NOT NULL,
                min_decryption_version integer NOT NULL CHECK (min_decryption_version >= 1),
                latest_version         integer NOT NULL CHECK (latest_version >= min_decryption_version),
                imported               boolean NOT NULL,
                created_at             timestamptz NOT NULL,
                updated_at             timestamptz NOT NULL
            )""",
            """CREATE TABLE key_versions (
                key_name   text NOT NULL REFERENCES keys (name) ON DELETE CASCADE,
                version    integer NOT NULL CHECK (version >= 1),
                wrapped    bytea NOT NULL,
                created_at timestamptz NOT NULL,
                PRIMARY KEY (key_name, version)
            )""",
            """CREATE TABLE tokens (
                token_id     text PRIMARY KEY,
                secret_hash  bytea NOT NULL,
                scopes       text[] NOT NULL,
                key_patterns text[] NOT NULL,
                description  text NOT NULL,
                created_at   timestamptz NOT NULL
            )""",
            f"""CREATE TABLE key_changes (
                seq      bigserial PRIMARY KEY,
                kind     text NOT NULL CHECK (kind IN ({shared.CHANGE_KINDS_V1_SQL})),
                key_name text,
                token_id text,
                at       timestamptz NOT NULL,
                CHECK ((key_name IS NULL) <> (token_id IS NULL))
            )""",
            # Highest sequence number removed by trimming (0: nothing trimmed yet). One row.
            """CREATE TABLE key_changes_trimmed (
                one     boolean PRIMARY KEY DEFAULT true CHECK (one),
                through bigint NOT NULL
            )""",
            "INSERT INTO key_changes_trimmed (through) VALUES (0)",
        ),
    ),
    Migration(
        2,
        "tombstones of deleted key names",
        (
            """CREATE TABLE key_tombstones (
                name        text PRIMARY KEY,
                deleted_at  timestamptz NOT NULL,
                reusable_at timestamptz NOT NULL
            )""",
        ),
    ),
    shared.KEY_SCHEME,
    Migration(
        4,
        "token lifetimes (ttl, expiry, renewal limit); the change log records token renewals",
        (
            """ALTER TABLE tokens ADD COLUMN ttl_seconds integer CHECK (ttl_seconds >= 1),
                ADD COLUMN expires_at timestamptz,
                ADD COLUMN max_expires_at timestamptz""",
            "ALTER TABLE key_changes DROP CONSTRAINT key_changes_kind_check",
            "ALTER TABLE key_changes ADD CONSTRAINT key_changes_kind_check "
            f"CHECK (kind IN ({shared.CHANGE_KINDS_V4_SQL}))",
        ),
    ),
    shared.KEY_AUTO_ROTATE_PERIOD,
    Migration(
        6,
        "master key generations and the rotation's state; the change log records master key rotations",
        (
            """CREATE TABLE master_key_generations (
                generation integer PRIMARY KEY CHECK (generation >= 2),
                stored     bytea NOT NULL,
                created_at timestamptz NOT NULL
            )""",
            """CREATE TABLE master_key_rotation (
                one         boolean PRIMARY KEY DEFAULT true CHECK (one),
                generation  integer NOT NULL CHECK (generation >= 1),
                finished    boolean NOT NULL,
                rewrapped   bigint NOT NULL CHECK (rewrapped >= 0),
                started_at  timestamptz,
                finished_at timestamptz,
                lease_owner text,
                lease_until timestamptz
            )""",
            "INSERT INTO master_key_rotation (generation, finished, rewrapped) VALUES (1, true, 0)",
            "ALTER TABLE key_changes DROP CONSTRAINT key_changes_kind_check",
            "ALTER TABLE key_changes ADD CONSTRAINT key_changes_kind_check "
            f"CHECK (kind IN ({shared.CHANGE_KINDS_V6_SQL}))",
            "ALTER TABLE key_changes DROP CONSTRAINT key_changes_check",
            f"""ALTER TABLE key_changes ADD CONSTRAINT key_changes_check CHECK (
                (key_name IS NULL) <> (token_id IS NULL)
                OR (kind = '{MASTER_KEY_ROTATED}' AND key_name IS NULL AND token_id IS NULL))""",
        ),
    ),
    Migration(
        7,
        "login roles and auth method configurations; token metadata; the change log names roles",
        (
            """CREATE TABLE auth_roles (
                name       text PRIMARY KEY,
                method     text NOT NULL,
                policy     text NOT NULL,
                created_at timestamptz NOT NULL,
                updated_at timestamptz NOT NULL
            )""",
            """CREATE TABLE auth_methods (
                method     text PRIMARY KEY,
                config     text NOT NULL,
                updated_at timestamptz NOT NULL
            )""",
            "ALTER TABLE tokens ADD COLUMN metadata text NOT NULL DEFAULT '{}'",
            "ALTER TABLE key_changes ADD COLUMN role_name text",
            "ALTER TABLE key_changes DROP CONSTRAINT key_changes_kind_check",
            "ALTER TABLE key_changes ADD CONSTRAINT key_changes_kind_check "
            f"CHECK (kind IN ({shared.CHANGE_KINDS_SQL}))",
            "ALTER TABLE key_changes DROP CONSTRAINT key_changes_check",
            f"""ALTER TABLE key_changes ADD CONSTRAINT key_changes_check CHECK (
                (key_name IS NOT NULL)::int + (token_id IS NOT NULL)::int + (role_name IS NOT NULL)::int
                = (CASE WHEN kind IN ({shared.NAMELESS_KINDS_SQL}) THEN 0 ELSE 1 END))""",
        ),
    ),
    Migration(
        8,
        "key options (derived, convergent_encryption, exportable, allow_plaintext_backup); aes256-siv keys",
        (
            """ALTER TABLE keys ADD COLUMN derived boolean NOT NULL DEFAULT false,
                ADD COLUMN convergent_encryption boolean NOT NULL DEFAULT false,
                ADD COLUMN exportable boolean NOT NULL DEFAULT false,
                ADD COLUMN allow_plaintext_backup boolean NOT NULL DEFAULT false,
                ADD CONSTRAINT keys_convergent_check CHECK (derived OR NOT convergent_encryption)""",
            "ALTER TABLE keys DROP CONSTRAINT keys_key_type_check",
            "ALTER TABLE keys ADD CONSTRAINT keys_key_type_check "
            f"CHECK (key_type IN ({shared.KEY_TYPES_SQL}))",
        ),
    ),
)
#: The schema version this code writes and expects.
SCHEMA_VERSION = MIGRATIONS[-1].version


def schema_version(conn: Connection) -> int:
    """The newest migration recorded in the database (0 for an empty database)."""
    row = conn.execute("SELECT to_regclass('schema_version') IS NOT NULL").fetchone()
    if row is None or not row[0]:
        return 0
    latest = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
    return int(latest[0]) if latest else 0


def migrate(conn: Connection, seal: Seal, description: str, migrations: Sequence[Migration]) -> int:
    """Bring the schema to the last of ``migrations`` and check (or store) the master key; return the version.

    Args:
        conn: an autocommit connection; the work runs in one transaction on it.
        seal: the keystore's seal (:mod:`app.seal`).
        description: the database, for messages (never the URL).
        migrations: the steps, in version order.

    Raises:
        KeystoreSchemaError: the database has a newer schema than ``migrations`` know.
        MasterKeyError: the database was created with another master key.
    """
    latest = migrations[-1].version if migrations else 0
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        current = schema_version(conn)
        if current > latest:
            raise KeystoreSchemaError(
                f"keystore {description} has schema version {current}, newer than this release supports "
                f"({latest}); upgrade Keystream"
            )
        for migration in migrations:
            if migration.version <= current:
                continue
            for statement in migration.statements:
                conn.execute(statement.encode())
            conn.execute(
                "INSERT INTO schema_version (version, description, applied_at) VALUES (%s, %s, %s)",
                (migration.version, migration.description, utc_now()),
            )
            current = migration.version
        _check_master_key(conn, seal, description)
    return current


def _check_master_key(conn: Connection, seal: Seal, description: str) -> None:
    rows: Any = conn.execute(
        "SELECT name, value FROM meta WHERE name = ANY(%s)", (list(SEAL_ROWS),)
    ).fetchall()
    meta = {str(name): bytes(value) for name, value in rows}
    hint = "Give every replica the same KEYSTREAM_MASTER_KEY or KEYSTREAM_MASTER_KEY_FILE"
    for name, value in settle_seal(seal, meta, description, hint).items():
        conn.execute("INSERT INTO meta (name, value) VALUES (%s, %s)", (name, value))


def read_meta(conn: Connection, name: str) -> bytes | None:
    """The ``meta`` row ``name`` (a blob), or ``None``."""
    row: Any = conn.execute("SELECT value FROM meta WHERE name = %s", (name,)).fetchone()
    return None if row is None else bytes(row[0])

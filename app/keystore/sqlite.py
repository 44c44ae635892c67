"""The SQLite keystore: one file, WAL mode, usable from threads and from several worker processes at once.

Concurrency model:

* Connections come from a small pool (one connection is never used by two threads at once), so readers in
  different threads run in parallel; WAL lets them read while a writer commits.
* Every change is one ``BEGIN IMMEDIATE`` transaction: it takes SQLite's write lock up front, so two writers
  (threads or processes) queue on ``busy_timeout`` instead of failing half-way or losing an update. A
  read-modify-write such as rotation therefore always sees the latest version number.
* Multi-statement reads run in one deferred transaction, so a key's row and its versions are one snapshot.
* A store opened before ``fork()`` stays usable in the child: the child opens its own connections and
  never touches the inherited ones (SQLite forbids carrying a connection across ``fork``).

The schema is versioned: :data:`MIGRATIONS` are applied in order at open (under the write lock, so several
workers starting together migrate once); ``PRAGMA user_version`` holds the current version and the
``schema_version`` table records when each migration ran. A database from a newer release is refused.

Deleted rows are overwritten (``secure_delete``), but copies of wrapped material may remain in the WAL file
until the next checkpoint; they are wrapped under the master key, like every stored copy.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import sqlite3
import stat
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from app.errors import (
    BadRequestError,
    ConflictError,
    DeletionNotAllowedError,
    KeyExistsError,
    KeyNotFoundError,
    KeyVersionNotFoundError,
    ServiceUnavailableError,
    TokenNotFoundError,
)

from .base import (
    DEFAULT_SEGMENT_SIZE,
    KEY_TYPES,
    KeyInfo,
    KeyStore,
    KeyVersionInfo,
    TokenRecord,
    check_bool,
    check_key_name,
    check_key_type,
    check_segment_size,
    check_token_id,
    key_type_for_material,
    utc_now,
)
from .master import (
    MasterKeyError,
    check_master_key,
    make_master_key_check,
    master_key_matches,
    unwrap_key_material,
    wrap_key_material,
)

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "KeystoreSchemaError", "Migration", "SqliteKeyStore"]

logger = logging.getLogger(__name__)

DATABASE_FILE = "keystore.db"
DATABASE_MODE = 0o600
_MASTER_CHECK = "master_key_check"
#: SQLite result codes that mean "the database cannot serve right now" (HTTP 503), not a bug.
_UNAVAILABLE_CODES = frozenset(
    {
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_PROTOCOL,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_PERM,
        sqlite3.SQLITE_NOLFS,
    }
)


@dataclass(frozen=True)
class Migration:
    """One schema step: the statements that take the database from ``version - 1`` to ``version``."""

    version: int
    description: str
    statements: tuple[str, ...]


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
            """CREATE TABLE keys (
                name                   TEXT PRIMARY KEY,
                key_type               TEXT NOT NULL CHECK (key_type IN ('aes128', 'aes192', 'aes256')),
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
)
#: The schema version this code writes and expects.
SCHEMA_VERSION = MIGRATIONS[-1].version


class KeystoreSchemaError(RuntimeError):
    """The database's schema version is newer than this release understands."""


def _to_text(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def _from_text(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


def _prepare_database_file(path: Path) -> None:
    """Create the database file 0600 before SQLite does (SQLite copies its mode to the -wal/-shm files)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, DATABASE_MODE)
    try:
        mode = stat.S_IMODE(os.fstat(fd).st_mode)
        if mode != DATABASE_MODE:
            os.fchmod(fd, DATABASE_MODE)
            if mode & 0o077:
                logger.warning("keystore %s was open to other users (mode %#o); made it 0600", path, mode)
    finally:
        os.close(fd)


class SqliteKeyStore(KeyStore):
    """A :class:`~app.keystore.base.KeyStore` in one SQLite file.

    Args:
        path: the database file (created 0600 when missing).
        master_key: 32 bytes; wraps every stored key version.
        busy_timeout: seconds a writer waits for another writer (thread or process) before giving up with
            ``ServiceUnavailableError``.
        pool_size: idle connections kept for reuse.
        migrations: the schema steps to apply (tests pass extra ones).

    Raises:
        MasterKeyError: ``master_key`` is not 32 bytes, or is not the key this database was created with.
        KeystoreSchemaError: the database comes from a newer release.
        ServiceUnavailableError: the file cannot be opened or stays locked longer than ``busy_timeout``.
    """

    def __init__(
        self,
        path: Path,
        master_key: bytes,
        *,
        busy_timeout: float = 10.0,
        pool_size: int = 8,
        migrations: Sequence[Migration] = MIGRATIONS,
    ) -> None:
        self.path = Path(path)
        self._master_key = check_master_key(master_key)
        self._busy_timeout = busy_timeout
        self._pool_size = pool_size
        self._lock = threading.Lock()
        self._idle: list[sqlite3.Connection] = []
        self._closed = False
        self._pid = os.getpid()
        # Connections inherited through fork(): never used or closed in the child (closing one could make
        # SQLite checkpoint and remove the WAL file under the parent), just kept referenced.
        self._inherited: list[sqlite3.Connection] = []
        try:
            _prepare_database_file(self.path)
        except OSError as exc:
            # The path goes to the server log only: error bodies never name files.
            logger.error("cannot open keystore %s: %s", self.path, exc.strerror)
            raise ServiceUnavailableError(f"cannot open the keystore: {exc.strerror}") from exc
        try:
            with self._connection() as conn:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    logger.warning("keystore %s: no WAL mode, journal mode is %s", self.path, mode)
            self._migrate(migrations)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"<SqliteKeyStore path={str(self.path)!r}>"

    # -- connections and transactions ---------------------------------------------------------------------

    def _new_connection(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute("PRAGMA synchronous = FULL")
        return conn

    @contextlib.contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            if self._closed:
                raise ServiceUnavailableError("the keystore is closed")
            if self._pid != os.getpid():
                self._inherited.extend(self._idle)
                self._idle = []
                self._pid = os.getpid()
            conn = self._idle.pop() if self._idle else None
        try:
            if conn is None:
                conn = self._new_connection()
        except sqlite3.Error as exc:
            logger.error("cannot open keystore %s: %s", self.path, exc)
            raise ServiceUnavailableError(f"cannot open the keystore: {exc}") from exc
        try:
            yield conn
        except sqlite3.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", 0) & 0xFF not in _UNAVAILABLE_CODES:
                raise  # a bug (bad SQL, schema mismatch): let it surface as one
            # "database is locked" after busy_timeout, disk full, read-only file...: none carry key bytes.
            # SQLite's messages for these codes are fixed texts ("database is locked"), never file names.
            logger.warning("keystore %s: %s", self.path, exc)
            raise ServiceUnavailableError(f"keystore database error: {exc}") from exc
        finally:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            with self._lock:
                forked = self._pid != os.getpid()
                keep = not forked and not self._closed and len(self._idle) < self._pool_size
                if keep:
                    self._idle.append(conn)
                elif forked:
                    self._inherited.append(conn)
            if not keep and not forked:
                conn.close()

    @contextlib.contextmanager
    def _transaction(self, begin: str) -> Iterator[sqlite3.Connection]:
        """``begin`` ... ``COMMIT`` on one pooled connection, rolled back on any exception."""
        with self._connection() as conn:
            conn.execute(begin)
            yield conn
            conn.execute("COMMIT")

    def _write(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One write transaction: ``BEGIN IMMEDIATE`` takes the write lock before the first read."""
        return self._transaction("BEGIN IMMEDIATE")

    def _read(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One read transaction: every statement inside sees the same snapshot."""
        return self._transaction("BEGIN")

    def _migrate(self, migrations: Sequence[Migration]) -> None:
        latest = migrations[-1].version if migrations else 0
        with self._write() as conn:
            current = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if current > latest:
                raise KeystoreSchemaError(
                    f"keystore {self.path} has schema version {current}, newer than this release "
                    f"supports ({latest}); upgrade Keystream"
                )
            for migration in migrations:
                if migration.version <= current:
                    continue
                for statement in migration.statements:
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)",
                    (migration.version, migration.description, _to_text(utc_now())),
                )
                conn.execute(f"PRAGMA user_version = {int(migration.version)}")
                if current:
                    logger.info("keystore %s migrated to schema version %d", self.path, migration.version)
            row = conn.execute("SELECT value FROM meta WHERE name = ?", (_MASTER_CHECK,)).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO meta (name, value) VALUES (?, ?)",
                    (_MASTER_CHECK, make_master_key_check(self._master_key)),
                )
            elif not master_key_matches(self._master_key, row[0]):
                raise MasterKeyError(
                    f"the master key does not match keystore {self.path}: it was created with another master "
                    "key. Restore the original master.key or KEYSTREAM_MASTER_KEY"
                )

    def schema_version(self) -> int:
        """The schema version of the open database (``PRAGMA user_version``)."""
        with self._connection() as conn:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        """Close every idle connection; connections in use close when their call returns. Idempotent."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
            if self._pid != os.getpid():
                self._inherited.extend(idle)
                idle = []
        for conn in idle:
            conn.close()

    # -- keys ---------------------------------------------------------------------------------------------

    @staticmethod
    def _key_info(conn: sqlite3.Connection, name: str) -> KeyInfo | None:
        row = conn.execute(
            "SELECT name, key_type, segment_size, deletion_allowed, min_decryption_version, latest_version, "
            "imported, created_at, updated_at FROM keys WHERE name = ?",
            (name,),
        ).fetchone()
        if row is None:
            return None
        versions = conn.execute(
            "SELECT version, created_at FROM key_versions WHERE key_name = ? ORDER BY version", (name,)
        ).fetchall()
        return _info_from_row(row, [KeyVersionInfo(v, _from_text(created)) for v, created in versions])

    def _require_key(self, conn: sqlite3.Connection, name: str) -> KeyInfo:
        info = self._key_info(conn, name)
        if info is None:
            raise KeyNotFoundError(f"key {name!r} not found")
        return info

    def _insert_key(
        self,
        name: str,
        key_type: str,
        material: bytes,
        segment_size: int,
        deletion_allowed: bool,
        imported: bool,
    ) -> KeyInfo:
        now = _to_text(utc_now())
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM keys WHERE name = ?", (name,)).fetchone() is not None:
                raise KeyExistsError(f"key {name!r} already exists")
            conn.execute(
                "INSERT INTO keys (name, key_type, segment_size, deletion_allowed, min_decryption_version, "
                "latest_version, imported, created_at, updated_at) VALUES (?, ?, ?, ?, 1, 1, ?, ?, ?)",
                (name, key_type, segment_size, int(deletion_allowed), int(imported), now, now),
            )
            conn.execute(
                "INSERT INTO key_versions (key_name, version, wrapped, created_at) VALUES (?, 1, ?, ?)",
                (name, wrap_key_material(self._master_key, name, 1, material), now),
            )
            return self._require_key(conn, name)

    def create_key(
        self,
        name: str,
        key_type: str = "aes256",
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        deletion_allowed: bool = False,
    ) -> KeyInfo:
        """See :meth:`KeyStore.create_key`."""
        check_key_name(name)
        check_key_type(key_type)
        check_segment_size(segment_size)
        check_bool("deletion_allowed", deletion_allowed)
        material = secrets.token_bytes(KEY_TYPES[key_type])
        return self._insert_key(name, key_type, material, segment_size, deletion_allowed, imported=False)

    def import_key(
        self,
        name: str,
        material: bytes,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        deletion_allowed: bool = False,
    ) -> KeyInfo:
        """See :meth:`KeyStore.import_key`."""
        check_key_name(name)
        key_type, data = key_type_for_material(material)
        check_segment_size(segment_size)
        check_bool("deletion_allowed", deletion_allowed)
        return self._insert_key(name, key_type, data, segment_size, deletion_allowed, imported=True)

    def get_key(self, name: str) -> KeyInfo:
        """See :meth:`KeyStore.get_key`."""
        check_key_name(name)
        with self._read() as conn:
            return self._require_key(conn, name)

    def list_keys(self) -> list[KeyInfo]:
        """See :meth:`KeyStore.list_keys`."""
        with self._read() as conn:
            rows = conn.execute(
                "SELECT name, key_type, segment_size, deletion_allowed, min_decryption_version, "
                "latest_version, imported, created_at, updated_at FROM keys ORDER BY name"
            ).fetchall()
            versions: dict[str, list[KeyVersionInfo]] = {}
            for key_name, version, created in conn.execute(
                "SELECT key_name, version, created_at FROM key_versions ORDER BY key_name, version"
            ):
                versions.setdefault(key_name, []).append(KeyVersionInfo(version, _from_text(created)))
        return [_info_from_row(row, versions.get(row[0], [])) for row in rows]

    def rotate_key(self, name: str) -> KeyInfo:
        """See :meth:`KeyStore.rotate_key`."""
        check_key_name(name)
        with self._write() as conn:
            info = self._require_key(conn, name)
            version = info.latest_version + 1
            material = secrets.token_bytes(KEY_TYPES[info.key_type])
            now = _to_text(utc_now())
            conn.execute(
                "INSERT INTO key_versions (key_name, version, wrapped, created_at) VALUES (?, ?, ?, ?)",
                (name, version, wrap_key_material(self._master_key, name, version, material), now),
            )
            conn.execute(
                "UPDATE keys SET latest_version = ?, updated_at = ? WHERE name = ?", (version, now, name)
            )
            return self._require_key(conn, name)

    def update_key(
        self,
        name: str,
        *,
        min_decryption_version: int | None = None,
        deletion_allowed: bool | None = None,
    ) -> KeyInfo:
        """See :meth:`KeyStore.update_key`."""
        check_key_name(name)
        if min_decryption_version is not None and (
            isinstance(min_decryption_version, bool) or not isinstance(min_decryption_version, int)
        ):
            raise BadRequestError(
                f"min_decryption_version must be an integer, got {type(min_decryption_version).__name__}"
            )
        if deletion_allowed is not None:
            check_bool("deletion_allowed", deletion_allowed)
        with self._write() as conn:
            info = self._require_key(conn, name)
            if min_decryption_version is None and deletion_allowed is None:
                return info
            new_min = info.min_decryption_version
            if min_decryption_version is not None:
                new_min = min_decryption_version
            if not 1 <= new_min <= info.latest_version:
                raise BadRequestError(
                    f"min_decryption_version must be between 1 and the latest version "
                    f"({info.latest_version}) of key {name!r}, got {new_min}"
                )
            new_deletion = info.deletion_allowed if deletion_allowed is None else deletion_allowed
            conn.execute(
                "UPDATE keys SET min_decryption_version = ?, deletion_allowed = ?, updated_at = ? "
                "WHERE name = ?",
                (new_min, int(new_deletion), _to_text(utc_now()), name),
            )
            return self._require_key(conn, name)

    def delete_key(self, name: str) -> None:
        """See :meth:`KeyStore.delete_key`."""
        check_key_name(name)
        with self._write() as conn:
            row = conn.execute("SELECT deletion_allowed FROM keys WHERE name = ?", (name,)).fetchone()
            if row is None:
                raise KeyNotFoundError(f"key {name!r} not found")
            if not row[0]:
                raise DeletionNotAllowedError(
                    f"key {name!r} cannot be deleted: set deletion_allowed to true first"
                )
            conn.execute("DELETE FROM key_versions WHERE key_name = ?", (name,))
            conn.execute("DELETE FROM keys WHERE name = ?", (name,))

    def key_material(self, name: str, version: int) -> bytes:
        """See :meth:`KeyStore.key_material`."""
        check_key_name(name)
        if isinstance(version, bool) or not isinstance(version, int):
            raise BadRequestError(f"key version must be an integer, got {type(version).__name__}")
        with self._read() as conn:
            row = conn.execute(
                "SELECT wrapped FROM key_versions WHERE key_name = ? AND version = ?", (name, version)
            ).fetchone()
            if row is None:
                latest = conn.execute("SELECT latest_version FROM keys WHERE name = ?", (name,)).fetchone()
                if latest is None:
                    raise KeyNotFoundError(f"key {name!r} not found")
                raise KeyVersionNotFoundError(
                    f"key {name!r} has no version {version} (versions 1 to {latest[0]})"
                )
        return unwrap_key_material(self._master_key, name, version, row[0])

    # -- tokens -------------------------------------------------------------------------------------------

    def create_token(self, record: TokenRecord) -> None:
        """See :meth:`KeyStore.create_token`."""
        values = _token_values(record)
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM tokens WHERE token_id = ?", (record.token_id,)).fetchone():
                raise ConflictError(f"token {record.token_id!r} already exists")
            conn.execute(
                "INSERT INTO tokens (token_id, secret_hash, scopes, key_patterns, description, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                values,
            )

    def get_token(self, token_id: str) -> TokenRecord:
        """See :meth:`KeyStore.get_token`."""
        check_token_id(token_id)
        with self._connection() as conn:
            row = conn.execute(
                "SELECT token_id, secret_hash, scopes, key_patterns, description, created_at FROM tokens "
                "WHERE token_id = ?",
                (token_id,),
            ).fetchone()
        if row is None:
            raise TokenNotFoundError(f"token {token_id!r} not found")
        return _token_from_row(row)

    def list_tokens(self) -> list[TokenRecord]:
        """See :meth:`KeyStore.list_tokens`."""
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT token_id, secret_hash, scopes, key_patterns, description, created_at FROM tokens "
                "ORDER BY created_at, token_id"
            ).fetchall()
        return [_token_from_row(row) for row in rows]

    def delete_token(self, token_id: str) -> None:
        """See :meth:`KeyStore.delete_token`."""
        check_token_id(token_id)
        with self._write() as conn:
            if conn.execute("DELETE FROM tokens WHERE token_id = ?", (token_id,)).rowcount == 0:
                raise TokenNotFoundError(f"token {token_id!r} not found")

    def count_tokens(self) -> int:
        """See :meth:`KeyStore.count_tokens`."""
        with self._connection() as conn:
            return int(conn.execute("SELECT COUNT(*) FROM tokens").fetchone()[0])


def _info_from_row(row: Sequence[Any], versions: list[KeyVersionInfo]) -> KeyInfo:
    name, key_type, segment_size, deletion_allowed, min_dv, latest, imported, created, updated = row
    return KeyInfo(
        name=name,
        key_type=key_type,
        segment_size=int(segment_size),
        deletion_allowed=bool(deletion_allowed),
        min_decryption_version=int(min_dv),
        latest_version=int(latest),
        imported=bool(imported),
        created_at=_from_text(created),
        updated_at=_from_text(updated),
        versions=tuple(versions),
    )


def _string_tuple(field_name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, tuple | list):
        raise BadRequestError(f"{field_name} must be a tuple of strings, got {type(value).__name__}")
    if not all(isinstance(item, str) for item in value):
        raise BadRequestError(f"{field_name} must contain only strings")
    return tuple(value)


def _token_values(record: TokenRecord) -> tuple[object, ...]:
    check_token_id(record.token_id)
    if not isinstance(record.secret_hash, bytes | bytearray) or not record.secret_hash:
        raise BadRequestError("secret_hash must be non-empty bytes")
    scopes = _string_tuple("scopes", record.scopes)
    patterns = _string_tuple("key_patterns", record.key_patterns)
    if not isinstance(record.description, str):
        raise BadRequestError(f"description must be a string, got {type(record.description).__name__}")
    if not isinstance(record.created_at, datetime):
        raise BadRequestError(f"created_at must be a datetime, got {type(record.created_at).__name__}")
    created = record.created_at if record.created_at.tzinfo else record.created_at.replace(tzinfo=UTC)
    return (
        record.token_id,
        bytes(record.secret_hash),
        json.dumps(scopes),
        json.dumps(patterns),
        record.description,
        _to_text(created),
    )


def _token_from_row(row: Sequence[Any]) -> TokenRecord:
    token_id, secret_hash, scopes, patterns, description, created = row
    return TokenRecord(
        token_id=token_id,
        secret_hash=bytes(secret_hash),
        scopes=tuple(json.loads(scopes)),
        key_patterns=tuple(json.loads(patterns)),
        description=description,
        created_at=_from_text(created),
    )

""":class:`SqliteKeyStore`: the :class:`~app.keystore.base.KeyStore` interface over one SQLite file.

It validates arguments, opens one transaction per call (:mod:`.connections`) and leaves the SQL to
:mod:`.keys` and :mod:`.tokens`. The concurrency model is described in :mod:`app.keystore.sqlite`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

from app.core.schemes import DEFAULT_SCHEME
from app.core.secret_memory import random_secret
from app.errors import BadRequestError
from app.seal import Seal
from app.seal.keyring import Keyring, KeyringState

from .. import generations
from ..base import KeyStore
from ..changes import MAX_CHANGES_PER_CALL, Change, ChangeBatch
from ..checks import (
    DEFAULT_SEGMENT_SIZE,
    KEY_TYPES,
    check_bool,
    check_integer,
    check_key_name,
    check_key_type,
    check_scheme,
    check_segment_size,
    check_token_id,
    check_trim_version,
    check_version_material,
    key_type_for_material,
)
from ..errors import KeystoreUnavailableError
from ..generations import MasterRotationStatus
from ..master import AUDIT_KEYS_ROW, as_seal, open_audit_key_material
from ..migrations import Migration
from ..records import KeyExport, KeyInfo, TokenRecord, utc_now
from ..reseal import resealed_meta, rewrap_versions
from ..rotation import (
    MIN_AUTO_ROTATE_PERIOD,
    check_auto_rotate_min_period,
    check_auto_rotate_period,
    is_due,
)
from ..tombstones import check_tombstone_seconds
from . import changes, keys, tokens
from .connections import SqliteConnections, logger, prepare_database_file
from .schema import MIGRATIONS, from_text, migrate, read_meta, to_text
from .watch import DataVersionWatcher

__all__ = ["SqliteKeyStore"]

#: The master key rotation's SQL in SQLite's words (:mod:`app.keystore.generations`): one writer at a time.
_ROTATION_SQL = generations.Dialect("?", to_text, from_text)


class SqliteKeyStore(SqliteConnections, KeyStore):
    """A :class:`~app.keystore.base.KeyStore` in one SQLite file.

    Args:
        path: the database file (created 0600 when missing).
        seal: wraps every stored key version (:mod:`app.seal`; 32 bytes stand for a file seal).
        busy_timeout: seconds a writer waits for another writer (thread or process) before giving up with
            ``ServiceUnavailableError``.
        pool_size: idle connections kept for reuse.
        migrations: the schema steps to apply (tests pass extra ones).
        tombstone_seconds: how long a deleted key's name cannot be re-created
            (:mod:`app.keystore.tombstones`).
        auto_rotate_min_period: the shortest ``auto_rotate_period`` accepted (1 hour; tests lower it).

    Raises:
        BadRequestError: ``tombstone_seconds`` is negative or ``auto_rotate_min_period`` outside 1..3600.
        MasterKeyError: ``seal`` is bytes not 32 long, or is not the seal this database was created with.
        KeystoreSchemaError: the database comes from a newer release.
        KeystoreUnavailableError: the file cannot be opened or stays locked longer than ``busy_timeout``.
    """

    def __init__(
        self,
        path: Path,
        seal: Seal | bytes,
        *,
        busy_timeout: float = 10.0,
        pool_size: int = 8,
        migrations: Sequence[Migration] = MIGRATIONS,
        tombstone_seconds: float = 0.0,
        auto_rotate_min_period: int = MIN_AUTO_ROTATE_PERIOD,
    ) -> None:
        super().__init__(path, busy_timeout, pool_size)
        self._seal = as_seal(seal)
        self._keyring = Keyring(self._seal)
        self.tombstone_seconds = check_tombstone_seconds(tombstone_seconds)
        self.auto_rotate_min_period = check_auto_rotate_min_period(auto_rotate_min_period)
        try:
            prepare_database_file(self.path)
        except OSError as exc:
            # The path goes to the server log only: error bodies never name files.
            logger.error("cannot open keystore %s: %s", self.path, exc.strerror)
            raise KeystoreUnavailableError(f"cannot open the keystore: {exc.strerror}") from exc
        try:
            with self._connection() as conn:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    logger.warning("keystore %s: no WAL mode, journal mode is %s", self.path, mode)
            self._keyring.set_loader(self._load_keyring)
            with self._write() as conn:
                migrate(conn, self.path, self._seal, migrations)
                if not self._seal.sealed and generations.has_generations(migrations):
                    self._keyring.install(generations.read_keyring(conn, _ROTATION_SQL))
        except BaseException:
            self.close()
            raise

    def _load_keyring(self) -> KeyringState:
        with self._read() as conn:
            return generations.read_keyring(conn, _ROTATION_SQL)

    def _wrapping(self, conn: sqlite3.Connection) -> Keyring:
        """The keyring at the newest generation, for a key write in ``conn``'s transaction."""
        return generations.writing_keyring(conn, _ROTATION_SQL, self._keyring)

    def __repr__(self) -> str:
        return f"<SqliteKeyStore path={str(self.path)!r}>"

    def close(self) -> None:
        """See :meth:`KeyStore.close`; also zeroes the master key generations in memory."""
        super().close()
        self._keyring.close()

    def schema_version(self) -> int:
        """The schema version of the open database (``PRAGMA user_version``)."""
        with self._connection() as conn:
            return int(conn.execute("PRAGMA user_version").fetchone()[0])

    # -- keys ---------------------------------------------------------------------------------------------

    def _insert_key(
        self,
        name: str,
        key_type: str,
        scheme: str,
        material: bytes | memoryview,
        segment_size: int,
        deletion_allowed: bool,
        imported: bool,
        auto_rotate_period: int,
    ) -> KeyInfo:
        with self._write() as conn:
            changes.check_tombstone(conn, name)
            info = keys.insert_key(
                conn,
                self._wrapping(conn),
                name,
                key_type,
                scheme,
                material,
                segment_size,
                deletion_allowed,
                imported,
                auto_rotate_period,
            )
            changes.append_change(conn, "key_imported" if imported else "key_created", key_name=name)
            return info

    def create_key(
        self,
        name: str,
        key_type: str = "aes256",
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        deletion_allowed: bool = False,
        *,
        scheme: str = DEFAULT_SCHEME,
        auto_rotate_period: int | str = 0,
    ) -> KeyInfo:
        """See :meth:`KeyStore.create_key`."""
        check_key_name(name)
        check_key_type(key_type)
        check_segment_size(segment_size)
        check_bool("deletion_allowed", deletion_allowed)
        check_scheme(scheme)
        period = check_auto_rotate_period(auto_rotate_period, self.auto_rotate_min_period)
        material = random_secret(KEY_TYPES[key_type]).readonly()
        return self._insert_key(
            name, key_type, scheme, material, segment_size, deletion_allowed, False, period
        )

    def import_key(
        self,
        name: str,
        material: bytes | memoryview,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        deletion_allowed: bool = False,
        *,
        scheme: str = DEFAULT_SCHEME,
        auto_rotate_period: int | str = 0,
    ) -> KeyInfo:
        """See :meth:`KeyStore.import_key`."""
        check_key_name(name)
        key_type, data = key_type_for_material(material)
        check_segment_size(segment_size)
        check_bool("deletion_allowed", deletion_allowed)
        check_scheme(scheme)
        period = check_auto_rotate_period(auto_rotate_period, self.auto_rotate_min_period)
        return self._insert_key(name, key_type, scheme, data, segment_size, deletion_allowed, True, period)

    def get_key(self, name: str) -> KeyInfo:
        """See :meth:`KeyStore.get_key`."""
        check_key_name(name)
        with self._read() as conn:
            return keys.require_key(conn, name)

    def list_keys(self) -> list[KeyInfo]:
        """See :meth:`KeyStore.list_keys`."""
        with self._read() as conn:
            return keys.list_keys(conn)

    def rotate_key(self, name: str) -> KeyInfo:
        """See :meth:`KeyStore.rotate_key`."""
        check_key_name(name)
        with self._write() as conn:
            return self._rotate(conn, keys.require_key(conn, name))

    def _rotate(self, conn: sqlite3.Connection, info: KeyInfo) -> KeyInfo:
        """The one rotation path, manual or automatic: a random next version and a ``key_rotated`` change."""
        material = random_secret(KEY_TYPES[info.key_type]).readonly()
        rotated = keys.add_version(conn, self._wrapping(conn), info, material)
        changes.append_change(conn, "key_rotated", key_name=info.name)
        return rotated

    def due_for_rotation(self) -> list[str]:
        """See :meth:`KeyStore.due_for_rotation`."""
        with self._read() as conn:
            schedule = keys.rotation_schedule(conn)
        now = utc_now()
        return [name for name, period, last in schedule if is_due(period, last, now)]

    def rotate_if_due(self, name: str) -> KeyInfo | None:
        """See :meth:`KeyStore.rotate_if_due`: decided under ``BEGIN IMMEDIATE`` (one writer per file)."""
        check_key_name(name)
        with self._write() as conn:
            info = keys.key_info(conn, name)
            if info is None or not is_due(info.auto_rotate_period, info.last_rotated, utc_now()):
                return None
            return self._rotate(conn, info)

    def import_key_version(self, name: str, material: bytes | memoryview) -> KeyInfo:
        """See :meth:`KeyStore.import_key_version`."""
        check_key_name(name)
        with self._write() as conn:
            info = keys.require_key(conn, name)
            data = check_version_material(name, info.key_type, material)
            imported = keys.add_version(conn, self._wrapping(conn), info, data, imported=True)
            changes.append_change(conn, "key_rotated", key_name=name)
            return imported

    def trim_key(self, name: str, min_available_version: int) -> KeyInfo:
        """See :meth:`KeyStore.trim_key`."""
        check_key_name(name)
        check_integer("min_available_version", min_available_version)
        with self._write() as conn:
            info = keys.require_key(conn, name)
            check_trim_version(name, min_available_version, info.min_decryption_version)
            if not keys.delete_versions_below(conn, name, min_available_version):
                return info
            changes.append_change(conn, "key_updated", key_name=name)
            return keys.require_key(conn, name)

    def update_key(
        self,
        name: str,
        *,
        min_decryption_version: int | None = None,
        deletion_allowed: bool | None = None,
        auto_rotate_period: int | str | None = None,
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
        period = (
            None
            if auto_rotate_period is None
            else check_auto_rotate_period(auto_rotate_period, self.auto_rotate_min_period)
        )
        with self._write() as conn:
            info = keys.require_key(conn, name)
            if min_decryption_version is None and deletion_allowed is None and period is None:
                return info
            new_min = (
                info.min_decryption_version if min_decryption_version is None else min_decryption_version
            )
            new_deletion = info.deletion_allowed if deletion_allowed is None else deletion_allowed
            new_period = info.auto_rotate_period if period is None else period
            updated = keys.update_policy(conn, info, new_min, new_deletion, new_period)
            changes.append_change(conn, "key_updated", key_name=name)
            return updated

    def delete_key(self, name: str) -> None:
        """See :meth:`KeyStore.delete_key`."""
        check_key_name(name)
        with self._write() as conn:
            keys.delete_key(conn, name)
            changes.add_tombstone(conn, name, self.tombstone_seconds)
            changes.append_change(conn, "key_deleted", key_name=name)

    def key_material(self, name: str, version: int) -> memoryview:
        """See :meth:`KeyStore.key_material`."""
        check_key_name(name)
        if isinstance(version, bool) or not isinstance(version, int):
            raise BadRequestError(f"key version must be an integer, got {type(version).__name__}")
        with self._read() as conn:
            return keys.key_material(conn, self._keyring, name, version)

    @property
    def seal(self) -> Seal:
        """See :attr:`KeyStore.seal`."""
        return self._seal

    def audit_key_material(self) -> memoryview | None:
        """See :meth:`KeyStore.audit_key_material`."""
        with self._read() as conn:
            stored = read_meta(conn, AUDIT_KEYS_ROW)
        return open_audit_key_material(self._keyring, stored)

    @property
    def keyring(self) -> Keyring:
        """See :attr:`KeyStore.keyring`."""
        return self._keyring

    def begin_master_rotation(self, owner: str, lease_seconds: float) -> MasterRotationStatus:
        """See :meth:`KeyStore.begin_master_rotation`."""
        with self._write() as conn:
            status, created = generations.begin(conn, _ROTATION_SQL, self._keyring, owner, lease_seconds)
            if created:
                changes.append_change(conn, generations.MASTER_KEY_ROTATED)
        self._keyring.invalidate()
        return status

    def rewrap_master_batch(
        self, owner: str, after: tuple[str, int] | None, limit: int, lease_seconds: float
    ) -> tuple[str, int] | None:
        """See :meth:`KeyStore.rewrap_master_batch`."""
        with self._write() as conn:
            last, _ = generations.rewrap_batch(
                conn, _ROTATION_SQL, self._keyring, owner, after, limit, lease_seconds
            )
            return last

    def finish_master_rotation(self, owner: str, lease_seconds: float) -> MasterRotationStatus:
        """See :meth:`KeyStore.finish_master_rotation`."""
        with self._write() as conn:
            status, retired = generations.finish(conn, _ROTATION_SQL, self._keyring, owner, lease_seconds)
            if not status.rotating:
                changes.append_change(conn, generations.MASTER_KEY_ROTATED)
        generations.destroy_retired(self._keyring, retired)
        return status

    def master_rotation_status(self) -> MasterRotationStatus:
        """See :meth:`KeyStore.master_rotation_status`."""
        with self._read() as conn:
            return generations.read_status(conn, _ROTATION_SQL)

    def reseal(
        self,
        target: Seal,
        audit_material: bytes | memoryview,
        before_commit: Callable[[], None] | None = None,
    ) -> int:
        """See :meth:`KeyStore.reseal`."""
        with self._write() as conn:
            stored = conn.execute(
                "SELECT key_name, version, wrapped FROM key_versions ORDER BY 1, 2"
            ).fetchall()
            rewrapped = rewrap_versions(self._keyring, target, stored)
            conn.executemany(
                "UPDATE key_versions SET wrapped = ? WHERE key_name = ? AND version = ?",
                [(blob, name, version) for name, version, blob in rewrapped],
            )
            for name, value in resealed_meta(target, audit_material).items():
                if value is None:
                    conn.execute("DELETE FROM meta WHERE name = ?", (name,))
                    continue
                conn.execute(
                    "INSERT INTO meta (name, value) VALUES (?, ?) "
                    "ON CONFLICT (name) DO UPDATE SET value = excluded.value",
                    (name, value),
                )
            generations.reset(conn, _ROTATION_SQL)
            if before_commit is not None:
                before_commit()
        self._keyring.close()
        self._seal = target
        self._keyring = Keyring(target, self._load_keyring)
        return len(rewrapped)

    # -- copying between keystores -------------------------------------------------------------------------

    def export_keys(self) -> list[KeyExport]:
        """See :meth:`KeyStore.export_keys`."""
        with self._read() as conn:
            return keys.export_keys(conn)

    def insert_copied(self, copied_keys: Sequence[KeyExport], copied_tokens: Sequence[TokenRecord]) -> None:
        """See :meth:`KeyStore.insert_copied`: one ``BEGIN IMMEDIATE`` transaction."""
        for record in copied_tokens:
            tokens.token_values(record)  # a malformed record is refused before the write lock is taken
        with self._write() as conn:
            for key in copied_keys:
                changes.check_tombstone(conn, key.info.name)
                keys.insert_exported(conn, key)
                changes.append_change(conn, "key_created", key_name=key.info.name)
            for record in copied_tokens:
                tokens.insert_token(conn, record)
                changes.append_change(conn, "token_created", token_id=record.token_id)

    # -- tokens -------------------------------------------------------------------------------------------

    def create_token(self, record: TokenRecord) -> None:
        """See :meth:`KeyStore.create_token`."""
        tokens.token_values(record)  # a malformed record is refused before the write lock is taken
        with self._write() as conn:
            tokens.insert_token(conn, record)
            changes.append_change(conn, "token_created", token_id=record.token_id)

    def get_token(self, token_id: str) -> TokenRecord:
        """See :meth:`KeyStore.get_token`."""
        check_token_id(token_id)
        with self._connection() as conn:
            return tokens.get_token(conn, token_id)

    def list_tokens(self) -> list[TokenRecord]:
        """See :meth:`KeyStore.list_tokens`."""
        with self._connection() as conn:
            return tokens.list_tokens(conn)

    def renew_token(self, token_id: str, expires_at: datetime) -> TokenRecord:
        """See :meth:`KeyStore.renew_token`."""
        check_token_id(token_id)
        with self._write() as conn:
            record = tokens.renew_token(conn, token_id, expires_at)
            changes.append_change(conn, "token_renewed", token_id=token_id)
            return record

    def delete_token(self, token_id: str) -> None:
        """See :meth:`KeyStore.delete_token`."""
        check_token_id(token_id)
        with self._write() as conn:
            tokens.delete_token(conn, token_id)
            changes.append_change(conn, "token_deleted", token_id=token_id)

    def count_tokens(self) -> int:
        """See :meth:`KeyStore.count_tokens`."""
        with self._connection() as conn:
            return tokens.count_tokens(conn)

    # -- change log ---------------------------------------------------------------------------------------

    def changes_since(self, seq: int, limit: int = MAX_CHANGES_PER_CALL) -> ChangeBatch:
        """See :meth:`KeyStore.changes_since`: one indexed read (the ``seq`` primary key)."""
        with self._read() as conn:
            return changes.changes_since(conn, seq, limit)

    def trim_changes(self, keep: int) -> int:
        """See :meth:`KeyStore.trim_changes`."""
        with self._write() as conn:
            return changes.trim_changes(conn, keep)

    def listen_for_changes(self, on_hint: Callable[[Change | None], None]) -> Callable[[], None]:
        """Call ``on_hint`` soon after any connection commits to the file (see :mod:`.watch`).

        Returns the watcher's stopper.
        """
        return DataVersionWatcher(self.path, on_hint).stop

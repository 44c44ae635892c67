""":class:`SqliteKeyStore`: the storage methods of the :class:`~app.keystore.base.KeyStore` template over one
SQLite file.

The template validates arguments; this opens one transaction per call (:mod:`.connections`) and leaves the SQL
to :mod:`.keys`, :mod:`.tokens` and :mod:`.changes`. The concurrency model is described in
:mod:`app.keystore.sqlite`.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import TypeVar, Unpack, cast

from app.errors import KeyExistsError
from app.seal import Seal

from .. import generations
from ..base import DEFAULT_POOL_SIZE, InTransaction, KeyStore, StoreOptions
from ..changes import MAX_CHANGES_PER_CALL, Change, ChangeBatch
from ..errors import KeystoreUnavailableError
from ..master import wrap_key_material
from ..records import KeyExport, KeyInfo, KeyPolicy, TokenRecord
from . import changes, keys, tokens
from .connections import SqliteConnections, logger, prepare_database_file
from .schema import MIGRATIONS, from_text, migrate, to_text
from .watch import DataVersionWatcher

T = TypeVar("T")

__all__ = ["SqliteKeyStore"]

#: The shared SQL in SQLite's words (:mod:`app.keystore.generations`): one writer at a time, so no row locks.
_SQLITE_SQL = generations.Dialect("?", to_text, from_text)


class SqliteKeyStore(SqliteConnections, KeyStore):
    """A :class:`~app.keystore.base.KeyStore` in one SQLite file.

    Args:
        path: the database file (created 0600 when missing).
        seal: wraps every stored key version (:mod:`app.seal`; 32 bytes stand for a file seal).
        busy_timeout: seconds a writer waits for another writer (thread or process) before giving up with
            ``ServiceUnavailableError``.
        options: :class:`~app.keystore.base.StoreOptions` (``pool_size``: idle connections kept for reuse;
            ``migrations``: this store's :data:`~.schema.MIGRATIONS` unless given).

    Raises:
        BadRequestError: see :meth:`~app.keystore.base.KeyStore._take_seal`.
        MasterKeyError: ``seal`` is bytes not 32 long, or is not the seal this database was created with.
        KeystoreSchemaError: the database comes from a newer release.
        KeystoreUnavailableError: the file cannot be opened or stays locked longer than ``busy_timeout``.
    """

    def __init__(
        self, path: Path, seal: Seal | bytes, *, busy_timeout: float = 10.0, **options: Unpack[StoreOptions]
    ) -> None:
        super().__init__(path, busy_timeout, options.get("pool_size", DEFAULT_POOL_SIZE))
        self._take_seal(seal, options)
        migrations = options.get("migrations", MIGRATIONS)
        try:
            prepare_database_file(self.path)
        except OSError as exc:
            # The path goes to the server log only: error bodies never name files.
            logger.error("cannot open keystore %s: %s", self.path, exc.strerror)
            raise KeystoreUnavailableError(f"cannot open the keystore: {exc.strerror}") from exc
        try:
            with self._connection() as conn:
                mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
                self.wal = str(mode).lower() == "wal"
                if not self.wal:
                    logger.warning("keystore %s: no WAL mode, journal mode is %s", self.path, mode)
            self._keyring.set_loader(self._load_keyring)
            with self._write() as conn:
                migrate(conn, self.path, self._seal, migrations)
                if not self._seal.sealed and generations.has_generations(migrations):
                    self._keyring.install(generations.read_keyring(conn, self._dialect))
        except BaseException:
            self.close()
            raise

    _dialect = _SQLITE_SQL

    def _run_write(self, work: Callable[[generations.Connection], T]) -> T:
        with self._write() as conn:
            return work(conn)

    def _run_read(self, work: Callable[[generations.Connection], T]) -> T:
        with self._read() as conn:
            return work(conn)

    def _run_read_statement(self, work: Callable[[generations.Connection], T]) -> T:
        with self._connection() as conn:  # autocommit: the one statement is its own read transaction
            return work(conn)

    def _append_change(
        self, conn: generations.Connection, kind: str, *, role_name: str | None = None
    ) -> None:
        changes.append_change(cast(sqlite3.Connection, conn), kind, role_name=role_name)

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

    # -- keys: the template's storage methods (:class:`~app.keystore.base.KeyStore`) -----------------------

    def _insert_key(self, info: KeyInfo, material: memoryview) -> KeyInfo:
        with self._write() as conn:
            changes.check_tombstone(conn, info.name)
            wrapped = wrap_key_material(self._wrapping(conn), info.name, 1, material)
            keys.insert_exported(conn, KeyExport(info, (wrapped,)))
            changes.append_change(
                conn, "key_imported" if info.imported else "key_created", key_name=info.name
            )
        return info

    def _restore_key(self, info: KeyInfo, materials: Sequence[memoryview], force: bool) -> KeyInfo:
        with self._write() as conn:
            replaced = keys.key_info(conn, info.name) is not None
            if replaced and not force:
                raise KeyExistsError(f"key {info.name!r} already exists: restore with force to replace it")
            if replaced:
                keys.delete_key(conn, info.name)
            else:
                changes.check_tombstone(conn, info.name)
            keyring = self._wrapping(conn)
            wrapped = tuple(
                wrap_key_material(keyring, info.name, entry.version, material)
                for entry, material in zip(info.versions, materials, strict=True)
            )
            keys.insert_exported(conn, KeyExport(info, wrapped))
            changes.append_change(conn, "key_updated" if replaced else "key_created", key_name=info.name)
            return keys.require_key(conn, info.name)

    def _read_key(self, name: str) -> KeyInfo:
        with self._read() as conn:
            return keys.require_key(conn, name)

    def list_keys(self) -> list[KeyInfo]:
        """See :meth:`KeyStore.list_keys`."""
        with self._read() as conn:
            return keys.list_keys(conn)

    def _add_version(
        self, name: str, choose: Callable[[KeyInfo], memoryview | None], *, imported: bool
    ) -> KeyInfo | None:
        """See :meth:`KeyStore._add_version`: decided under ``BEGIN IMMEDIATE`` (one writer per file)."""
        with self._write() as conn:
            info = keys.require_key(conn, name)
            material = choose(info)
            if material is None:
                return None
            added = keys.add_version(conn, self._wrapping(conn), info, material, imported=imported)
            changes.append_change(conn, "key_rotated", key_name=name)
            return added

    def _rotation_schedule(self) -> list[tuple[str, int, datetime]]:
        with self._read() as conn:
            return keys.rotation_schedule(conn)

    def _trim_key(self, name: str, check: Callable[[KeyInfo], int]) -> KeyInfo:
        with self._write() as conn:
            info = keys.require_key(conn, name)
            if not keys.delete_versions_below(conn, name, check(info)):
                return info
            changes.append_change(conn, "key_updated", key_name=name)
            return keys.require_key(conn, name)

    def _update_policy(self, name: str, policy: Callable[[KeyInfo], KeyPolicy]) -> KeyInfo:
        with self._write() as conn:
            info = keys.require_key(conn, name)
            updated = keys.update_policy(conn, name, policy(info))
            changes.append_change(conn, "key_updated", key_name=name)
            return updated

    def _delete_key(self, name: str, check: Callable[[KeyInfo], None]) -> None:
        with self._write() as conn:
            check(keys.require_key(conn, name))
            keys.delete_key(conn, name)
            changes.add_tombstone(conn, name, self.tombstone_seconds)
            changes.append_change(conn, "key_deleted", key_name=name)

    def _key_material(self, name: str, version: int) -> memoryview:
        with self._read() as conn:
            return keys.key_material(conn, self._keyring, name, version)

    # -- copying between keystores -------------------------------------------------------------------------

    def export_keys(self) -> list[KeyExport]:
        """See :meth:`KeyStore.export_keys`."""
        with self._read() as conn:
            return keys.export_keys(conn)

    def _insert_copied(
        self, copied_keys: Sequence[KeyExport], checked_tokens: Sequence[TokenRecord], then: InTransaction
    ) -> None:
        """See :meth:`KeyStore.insert_copied`: one ``BEGIN IMMEDIATE`` transaction."""
        with self._write() as conn:
            for key in copied_keys:
                changes.check_tombstone(conn, key.info.name)
                keys.insert_exported(conn, key)
                changes.append_change(conn, "key_created", key_name=key.info.name)
            for record in checked_tokens:
                tokens.insert_token(conn, record)
                changes.append_change(conn, "token_created", token_id=record.token_id)
            then(conn)

    # -- tokens -------------------------------------------------------------------------------------------

    def _insert_token(self, record: TokenRecord, reissuable: bool = False) -> None:
        with self._write(reissuable=reissuable) as conn:
            tokens.insert_token(conn, record)
            if not reissuable:
                changes.append_change(conn, "token_created", token_id=record.token_id)

    def _read_token(self, token_id: str) -> TokenRecord | None:
        with self._connection() as conn:
            return tokens.read_token(conn, token_id)

    def list_tokens(self) -> list[TokenRecord]:
        """See :meth:`KeyStore.list_tokens`."""
        with self._connection() as conn:
            return tokens.list_tokens(conn)

    def _renew_token(self, token_id: str, check: Callable[[TokenRecord], datetime]) -> TokenRecord | None:
        with self._write() as conn:
            record = tokens.read_token(conn, token_id)
            if record is None:
                return None
            renewed = tokens.set_expiry(conn, record, check(record))
            changes.append_change(conn, "token_renewed", token_id=token_id)
            return renewed

    def _delete_token(self, token_id: str) -> bool:
        with self._write() as conn:
            if not tokens.delete_token(conn, token_id):
                return False
            changes.append_change(conn, "token_deleted", token_id=token_id)
            return True

    def count_tokens(self) -> int:
        """See :meth:`KeyStore.count_tokens`."""
        with self._connection() as conn:
            return tokens.count_tokens(conn)

    # -- change log ---------------------------------------------------------------------------------------

    def changes_since(self, seq: int, limit: int = MAX_CHANGES_PER_CALL) -> ChangeBatch:
        """See :meth:`KeyStore.changes_since`: one indexed read (the ``seq`` primary key)."""
        with self._read() as conn:
            return changes.changes_since(conn, seq, limit)

    def _trim_changes(self, keep: int) -> int:
        """See :meth:`KeyStore._trim_changes`."""
        with self._write() as conn:
            return changes.trim_changes(conn, keep)

    def listen_for_changes(self, on_hint: Callable[[Change | None], None]) -> Callable[[], None]:
        """Call ``on_hint`` soon after any connection commits to the file (see :mod:`.watch`).

        Returns the watcher's stopper.
        """
        return DataVersionWatcher(self.path, on_hint).stop

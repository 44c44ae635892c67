"""The PostgreSQL keystore: one database shared by every replica of the service.

Validation, wrapping and errors are the template's (:class:`~app.keystore.base.KeyStore`, with
:mod:`app.keystore.checks` and :mod:`app.keystore.master`), as for SQLite; what this store adds is where the
rows live and who serializes writers: PostgreSQL's row locks (:mod:`.keys`), not a file lock. Every change is
one transaction that also appends to the change log (:mod:`.changes`). Connection loss becomes
:class:`~app.keystore.errors.KeystoreUnavailableError` and heals by itself (:mod:`.connections`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, TypeVar, Unpack, cast

from app.core.database_url import check_database_url
from app.errors import (
    ConflictError,
    KeyExistsError,
    KeyNotFoundError,
    KeyVersionNotFoundError,
)
from app.seal import Seal

from .. import generations
from ..base import DEFAULT_POOL_SIZE, InTransaction, KeyStore, StoreOptions
from ..changes import Change, ChangeBatch
from ..master import (
    unwrap_key_material,
    wrap_key_material,
)
from ..records import KeyExport, KeyInfo, KeyPolicy, TokenRecord, utc_now
from . import changes, keys, schema, tokens
from .connections import Database
from .watch import ChangeListener

if TYPE_CHECKING:
    from .connections import Connection

T = TypeVar("T")

__all__ = ["PostgresKeyStore"]

#: The shared SQL in PostgreSQL's words (:mod:`app.keystore.generations`): key writes share the rotation
#: state's row (``FOR KEY SHARE``), which a new generation locks ``FOR UPDATE``; a reseal locks the tables
#: ``EXCLUSIVE``: other replicas still read, but none adds a version under the old seal meanwhile.
_POSTGRES_SQL = generations.Dialect(
    "%s",
    lambda moment: moment,
    lambda stored: stored.astimezone(UTC),
    key_share_lock="FOR KEY SHARE",
    update_lock="FOR UPDATE",
    lease_lock="FOR NO KEY UPDATE",
    reseal_lock="LOCK TABLE keys, key_versions, meta, master_key_generations, master_key_rotation "
    "IN EXCLUSIVE MODE",
)


class PostgresKeyStore(KeyStore):
    """A :class:`~app.keystore.base.KeyStore` in a PostgreSQL database (psycopg 3, a psycopg_pool pool).

    Opening migrates the schema (once, under an advisory lock, whatever the number of replicas starting) and
    checks the master key against the database's check value.

    Args:
        url: ``postgresql://user:password@host:port/database``; it never appears in a log, error or repr.
        seal: wraps every stored key version (:mod:`app.seal`; 32 bytes stand for a file seal). Every
            replica needs the same master key.
        wait_timeout: seconds a call waits for a free connection before ``KeystoreUnavailableError``.
        connect_timeout: seconds one connection attempt may take.
        options: :class:`~app.keystore.base.StoreOptions` (``pool_size``: most connections this store opens
            at once; ``migrations``: this store's :data:`~.schema.MIGRATIONS` unless given).

    Raises:
        BadRequestError: see :meth:`~app.keystore.base.KeyStore._take_seal`.
        ValueError: ``url`` is not a PostgreSQL URL.
        MasterKeyError: ``seal`` is bytes not 32 long, or the database was created with another seal.
        KeystoreSchemaError: the database comes from a newer release.
        KeystoreUnavailableError: the database cannot be reached, or psycopg is not installed.
    """

    def __init__(
        self,
        url: str,
        seal: Seal | bytes,
        *,
        wait_timeout: float = 5.0,
        connect_timeout: float = 5.0,
        **options: Unpack[StoreOptions],
    ) -> None:
        self._take_seal(seal, options)
        migrations = options.get("migrations", schema.MIGRATIONS)
        pool_size = options.get("pool_size", DEFAULT_POOL_SIZE)
        check_database_url(url)
        # Migrations run on a connection of their own while the pool fills in the background: an unreachable
        # database fails the start at once, with the reason, instead of after the pool's retries.
        self._database = Database(
            url, pool_size=pool_size, wait_timeout=wait_timeout, connect_timeout=connect_timeout
        )
        self._keyring.set_loader(self._load_keyring)
        try:
            with self._database.connect() as conn:
                schema.migrate(conn, self._seal, self._database.description, migrations)
                if not self._seal.sealed and generations.has_generations(migrations):
                    self._keyring.install(generations.read_keyring(conn, self._dialect))
        except BaseException:
            self._database.close()
            raise

    _dialect = _POSTGRES_SQL

    def _run_write(self, work: Callable[[generations.Connection], T]) -> T:
        return self._database.write(work)

    def _run_read(self, work: Callable[[generations.Connection], T]) -> T:
        return self._database.read(work)

    def _append_change(
        self, conn: generations.Connection, kind: str, *, role_name: str | None = None
    ) -> None:
        changes.append_change(cast("Connection", conn), kind, role_name=role_name)

    def __repr__(self) -> str:
        return f"<PostgresKeyStore {self._database.description}>"

    def schema_version(self) -> int:
        """The schema version of the database."""
        return self._database.read(schema.schema_version)

    def close(self) -> None:
        """See :meth:`KeyStore.close`; also zeroes the master key generations in memory."""
        self._database.close()
        self._keyring.close()

    # -- keys: the template's storage methods (:class:`~app.keystore.base.KeyStore`) -----------------------

    def _insert_key(self, info: KeyInfo, material: memoryview) -> KeyInfo:
        """See :meth:`KeyStore._insert_key`: the tombstone is checked after the insert (see :mod:`.keys`)."""

        def work(conn: Connection) -> None:
            wrapped = wrap_key_material(self._wrapping(conn), info.name, 1, material)
            if not keys.insert_exported(conn, KeyExport(info, (wrapped,))):
                raise KeyExistsError(f"key {info.name!r} already exists")
            keys.check_tombstone(conn, info.name)
            kind = "key_imported" if info.imported else "key_created"
            changes.append_change(conn, kind, key_name=info.name)

        self._database.write(work)
        return info

    def _restore_key(self, info: KeyInfo, materials: Sequence[memoryview], force: bool) -> KeyInfo:
        """See :meth:`KeyStore._restore_key`: an existing key is locked, then deleted with its versions."""

        def work(conn: Connection) -> KeyInfo:
            try:
                keys.lock_key(conn, info.name)
                replaced = True
            except KeyNotFoundError:
                replaced = False
            if replaced and not force:
                raise KeyExistsError(f"key {info.name!r} already exists: restore with force to replace it")
            if replaced:
                keys.delete_rows(conn, info.name)
            keyring = self._wrapping(conn)
            wrapped = tuple(
                wrap_key_material(keyring, info.name, entry.version, material)
                for entry, material in zip(info.versions, materials, strict=True)
            )
            if not keys.insert_exported(conn, KeyExport(info, wrapped)):
                raise KeyExistsError(f"key {info.name!r} already exists: restore with force to replace it")
            if not replaced:
                keys.check_tombstone(conn, info.name)
            changes.append_change(conn, "key_updated" if replaced else "key_created", key_name=info.name)
            return keys.read_key(conn, info.name)

        return self._database.write(work)

    def _read_key(self, name: str) -> KeyInfo:
        return self._database.read(lambda conn: keys.read_key(conn, name))

    def list_keys(self) -> list[KeyInfo]:
        """See :meth:`KeyStore.list_keys`."""
        return self._database.read(keys.read_keys)

    def _add_version(
        self, name: str, choose: Callable[[KeyInfo], memoryview | None], *, imported: bool
    ) -> KeyInfo | None:
        """See :meth:`KeyStore._add_version`: decided under the key's row lock (``FOR UPDATE``)."""

        def work(conn: Connection) -> KeyInfo | None:
            info = keys.lock_key(conn, name)
            material = choose(info)
            if material is None:
                return None
            version = info.latest_version + 1
            wrapped = wrap_key_material(self._wrapping(conn), name, version, material)
            keys.insert_version(conn, name, version, wrapped, utc_now(), imported=imported)
            changes.append_change(conn, "key_rotated", key_name=name)
            return keys.read_key(conn, name)

        return self._database.write(work)

    def _rotation_schedule(self) -> list[tuple[str, int, datetime]]:
        return self._database.read(keys.rotation_schedule)

    def _trim_key(self, name: str, check: Callable[[KeyInfo], int]) -> KeyInfo:
        def work(conn: Connection) -> KeyInfo:
            below = check(keys.lock_key(conn, name))
            if keys.delete_versions_below(conn, name, below, utc_now()):
                changes.append_change(conn, "key_updated", key_name=name)
            return keys.read_key(conn, name)

        return self._database.write(work)

    def _update_policy(self, name: str, policy: Callable[[KeyInfo], KeyPolicy]) -> KeyInfo:
        def work(conn: Connection) -> KeyInfo:
            keys.update_policy(conn, name, policy(keys.lock_key(conn, name)), utc_now())
            changes.append_change(conn, "key_updated", key_name=name)
            return keys.read_key(conn, name)

        return self._database.write(work)

    def _delete_key(self, name: str, check: Callable[[KeyInfo], None]) -> None:
        def work(conn: Connection) -> None:
            check(keys.lock_key(conn, name))
            keys.delete_key(conn, name, self.tombstone_seconds)
            changes.append_change(conn, "key_deleted", key_name=name)

        self._database.write(work)

    def _key_material(self, name: str, version: int) -> memoryview:
        found = self._database.read(lambda conn: keys.read_wrapped(conn, name, version))
        if found is None:
            raise KeyNotFoundError(f"key {name!r} not found")
        wrapped, oldest, latest = found
        if wrapped is None:
            raise KeyVersionNotFoundError(
                f"key {name!r} has no version {version} (versions {oldest} to {latest})"
            )
        return unwrap_key_material(self._keyring, name, version, wrapped)

    # -- copying between keystores -------------------------------------------------------------------------

    def export_keys(self) -> list[KeyExport]:
        """See :meth:`KeyStore.export_keys`."""
        return self._database.read(keys.export_keys)

    def _insert_copied(
        self, copied_keys: Sequence[KeyExport], checked_tokens: Sequence[TokenRecord], then: InTransaction
    ) -> None:
        """See :meth:`KeyStore.insert_copied`: one transaction, appends serialized by the change-log lock."""

        def work(conn: Connection) -> None:
            for key in copied_keys:
                if not keys.insert_exported(conn, key):
                    raise KeyExistsError(f"key {key.info.name!r} already exists")
                keys.check_tombstone(conn, key.info.name)
                changes.append_change(conn, "key_created", key_name=key.info.name)
            for record in checked_tokens:
                self._insert_token_in(conn, record)
            then(conn)

        self._database.write(work)

    # -- tokens -------------------------------------------------------------------------------------------

    def _insert_token_in(self, conn: Connection, record: TokenRecord, change: bool = True) -> None:
        if not tokens.insert_token(conn, record):
            raise ConflictError(f"token {record.token_id!r} already exists")
        if change:
            changes.append_change(conn, "token_created", token_id=record.token_id)

    def _insert_token(self, record: TokenRecord, reissuable: bool = False) -> None:
        """As the template says. A ``reissuable`` token (a login's) commits with ``synchronous_commit = off``
        for its transaction alone (``SET LOCAL``): the answer does not wait for the WAL flush nor for
        synchronous standbys, so a crash of the database server or a failover right after may lose it (never
        corrupt anything: PostgreSQL's asynchronous commit); every other write waits as configured."""

        def work(conn: Connection) -> None:
            if reissuable:
                conn.execute("SET LOCAL synchronous_commit = off")
            self._insert_token_in(conn, record, change=not reissuable)

        self._database.write(work)

    def _read_token(self, token_id: str) -> TokenRecord | None:
        return self._database.read(lambda conn: tokens.read_token(conn, token_id))

    def list_tokens(self) -> list[TokenRecord]:
        """See :meth:`KeyStore.list_tokens`."""
        return self._database.read(tokens.read_tokens)

    def _renew_token(self, token_id: str, check: Callable[[TokenRecord], datetime]) -> TokenRecord | None:
        """The token's row is locked while the new expiry is checked and written."""

        def work(conn: Connection) -> TokenRecord | None:
            record = tokens.read_token_for_update(conn, token_id)
            if record is None:
                return None
            moment = check(record)
            tokens.set_expiry(conn, token_id, moment)
            changes.append_change(conn, "token_renewed", token_id=token_id)
            return dataclasses.replace(record, expires_at=moment)

        return self._database.write(work)

    def _delete_token(self, token_id: str) -> bool:
        def work(conn: Connection) -> bool:
            if not tokens.delete_token(conn, token_id):
                return False
            changes.append_change(conn, "token_deleted", token_id=token_id)
            return True

        return self._database.write(work)

    def count_tokens(self) -> int:
        """See :meth:`KeyStore.count_tokens`."""
        return self._database.read(tokens.count_tokens)

    # -- change log ---------------------------------------------------------------------------------------

    def changes_since(self, seq: int, limit: int = changes.MAX_CHANGES_PER_CALL) -> ChangeBatch:
        """The changes to keys and tokens after sequence number ``seq``, oldest first (at most ``limit``).

        Returns:
            ``(changes, latest, trimmed)``: see :class:`~app.keystore.changes.ChangeBatch`.

        Raises:
            BadRequestError: ``seq`` is not an int >= 0 or ``limit`` not an int >= 1.
            KeystoreUnavailableError: the database cannot serve now.
        """
        return self._database.read(lambda conn: changes.changes_since(conn, seq, limit))

    def _trim_changes(self, keep: int) -> int:
        """See :meth:`KeyStore._trim_changes`.

        Raises:
            KeystoreUnavailableError: the database cannot serve now.
        """
        return self._database.write(lambda conn: changes.trim_changes(conn, keep))

    def listen_for_changes(self, on_hint: Callable[[Change | None], None]) -> Callable[[], None]:
        """Call ``on_hint`` with every committed change (``LISTEN``/``NOTIFY``), and ``None`` after each
        (re)connection.

        See :mod:`.watch`: a dedicated connection, re-opened whenever it breaks. Returns its stopper.
        """
        return ChangeListener(self._database, on_hint).stop

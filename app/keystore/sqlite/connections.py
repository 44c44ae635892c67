"""The SQLite connection pool and transactions of the keystore (see :mod:`app.keystore.sqlite`).

Connections come from a small pool (one connection is never used by two threads at once); after ``fork()`` the
child opens its own and never touches the inherited ones. Every write commits with ``synchronous=FULL`` (the
WAL is flushed to disk before ``COMMIT`` returns), except the writes of :meth:`SqliteConnections._write`
``reissuable=True`` in WAL mode: those run on a second pool whose connections use ``synchronous=NORMAL`` (the
WAL is flushed at the next checkpoint or at the next FULL commit of any connection), durable against a crash
of the process, not against a power loss or a crash of the operating system. Only a token a login issued is
written that way (:meth:`~app.keystore.base.KeyStore.create_token`): losing it costs its holder one more
login. SQLite's documentation says WAL with NORMAL never corrupts the database; in rollback-journal mode it
might, so outside WAL every write is FULL. SQLite errors that mean "cannot serve right now"
become :class:`~app.keystore.errors.KeystoreUnavailableError` (503 with ``Retry-After``); anything else
surfaces as the bug it is.

**Without waiting** (:func:`app.core.waiting.without_waiting`, a login on the event loop): reads and
reissuable writes in WAL mode run on a third pool whose connections never wait: ``busy_timeout`` 0 (a lock
another connection holds is :class:`~app.core.waiting.WouldWait` at once, the transaction rolled back),
``synchronous=NORMAL`` (no flush at ``COMMIT``) and no automatic checkpoint (a checkpoint flushes the file);
every :data:`CHECKPOINT_EVERY` of their commits a short thread checkpoints instead, so the WAL stays about as
small as with SQLite's own automatic checkpoints. A durable write, or any write outside WAL mode,
is :class:`~app.core.waiting.WouldWait` before it starts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from app.core.waiting import WouldWait, refuse_waiting, waiting_allowed
from app.errors import ServiceUnavailableError

from ..errors import KeystoreUnavailableError

logger = logging.getLogger("app.keystore.sqlite")

DATABASE_FILE = "keystore.db"
DATABASE_MODE = 0o600
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
#: What a connection that may not wait answers for "another connection holds the lock".
_WOULD_WAIT_CODES = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})
#: Commits without waiting between two checkpoints run off the caller's thread (each login commits about five
#: pages, so about as often as SQLite's automatic checkpoint at 1000 pages would run).
CHECKPOINT_EVERY = 200

#: The kinds of pooled connection: durable (``synchronous=FULL``), relaxed (``NORMAL``, reissuable writes),
#: and ``now`` (never waits: see the module doc).
_FULL, _RELAXED, _NOW = "full", "relaxed", "now"


def prepare_database_file(path: Path) -> None:
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


class SqliteConnections:
    """A pool of connections to one SQLite file and the transactions built on it.

    Args:
        path: the database file.
        busy_timeout: seconds a writer waits for another writer before giving up.
        pool_size: idle connections kept for reuse.
    """

    def __init__(self, path: Path, busy_timeout: float, pool_size: int) -> None:
        self.path = Path(path)
        self._busy_timeout = busy_timeout
        self._pool_size = pool_size
        self._lock = threading.Lock()
        #: Idle connections by kind (:data:`_FULL`, :data:`_RELAXED` for reissuable writes, :data:`_NOW`).
        self._idle: dict[str, list[sqlite3.Connection]] = {_FULL: [], _RELAXED: [], _NOW: []}
        #: Whether the journal is in WAL mode (the store sets it once it has asked): relaxed commits need it.
        self.wal = False
        self._closed = False
        self._pid = os.getpid()
        # Connections inherited through fork(): never used or closed in the child (closing one could make
        # SQLite checkpoint and remove the WAL file under the parent), just kept referenced.
        self._inherited: list[sqlite3.Connection] = []
        #: Commits without waiting since the last checkpoint was started, and whether one is running.
        self._uncheckpointed = 0
        self._checkpointing = False

    def _new_connection(self, kind: str = _FULL) -> sqlite3.Connection:
        busy_timeout = 0.0 if kind == _NOW else self._busy_timeout
        conn = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA secure_delete = ON")
        conn.execute(f"PRAGMA synchronous = {'FULL' if kind == _FULL else 'NORMAL'}")
        if kind == _NOW:
            conn.execute("PRAGMA wal_autocheckpoint = 0")
        return conn

    @contextlib.contextmanager
    def _connection(self, relaxed: bool = False) -> Iterator[sqlite3.Connection]:
        """A pooled connection: ``relaxed`` ones commit with ``synchronous=NORMAL``; on a thread that may
        not wait, one that never waits (see the module doc)."""
        kind = _NOW if not waiting_allowed() else _RELAXED if relaxed else _FULL
        with self._lock:
            if self._closed:
                raise ServiceUnavailableError("the keystore is closed")
            if self._pid != os.getpid():
                for idle in self._idle.values():
                    self._inherited.extend(idle)
                    idle.clear()
                self._pid = os.getpid()
            pool = self._idle[kind]
            conn = pool.pop() if pool else None
        try:
            if conn is None:
                conn = self._new_connection(kind)
        except sqlite3.Error as exc:
            logger.error("cannot open keystore %s: %s", self.path, exc)
            raise KeystoreUnavailableError(f"cannot open the keystore: {exc}") from exc
        try:
            yield conn
        except sqlite3.OperationalError as exc:
            code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
            if kind == _NOW and code in _WOULD_WAIT_CODES:
                raise WouldWait("the SQLite keystore is locked by another connection") from None
            if code not in _UNAVAILABLE_CODES:
                raise  # a bug (bad SQL, schema mismatch): let it surface as one
            # "database is locked" after busy_timeout, disk full, read-only file...: none carry key bytes.
            # SQLite's messages for these codes are fixed texts ("database is locked"), never file names.
            logger.warning("keystore %s: %s", self.path, exc)
            raise KeystoreUnavailableError(f"keystore database error: {exc}") from exc
        finally:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            with self._lock:
                forked = self._pid != os.getpid()
                pool = self._idle[kind]
                keep = not forked and not self._closed and len(pool) < self._pool_size
                if keep:
                    pool.append(conn)
                elif forked:
                    self._inherited.append(conn)
            if not keep and not forked:
                conn.close()

    @contextlib.contextmanager
    def _transaction(self, begin: str, relaxed: bool = False) -> Iterator[sqlite3.Connection]:
        """``begin`` ... ``COMMIT`` on one pooled connection, rolled back on any exception."""
        with self._connection(relaxed) as conn:
            conn.execute(begin)
            yield conn
            conn.execute("COMMIT")
        if begin != "BEGIN" and not waiting_allowed():
            self._committed_without_checkpoint()

    def _write(self, *, reissuable: bool = False) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One write transaction: ``BEGIN IMMEDIATE`` takes the write lock before the first read.

        ``reissuable``: what it writes can be had again by asking again (a login's token), so in WAL mode it
        commits with ``synchronous=NORMAL`` (see the module doc); never for keys, key versions, revocations or
        anything else whose loss would matter. Only such a write may run where waiting is refused.

        Raises:
            WouldWait: waiting is refused on this thread and the write is durable, or not in WAL mode.
        """
        if not (reissuable and self.wal):
            refuse_waiting("a durable SQLite commit")
        return self._transaction("BEGIN IMMEDIATE", relaxed=reissuable and self.wal)

    def _committed_without_checkpoint(self) -> None:
        """Count a commit of a connection that never checkpoints; every :data:`CHECKPOINT_EVERY` of them,
        start a thread that runs a ``RESTART`` checkpoint: it waits for the write lock and holds it while it
        copies the WAL into the file and flushes it, so the next write starts the WAL over (a ``PASSIVE``
        one racing steady writes may never catch up). Writes that may not wait meanwhile get
        :class:`~app.core.waiting.WouldWait` and run in a worker thread."""
        with self._lock:
            self._uncheckpointed += 1
            if self._uncheckpointed < CHECKPOINT_EVERY or self._checkpointing or self._closed:
                return
            self._uncheckpointed, self._checkpointing = 0, True
        threading.Thread(target=self._checkpoint, name="keystore-checkpoint", daemon=True).start()

    def _checkpoint(self) -> None:
        try:
            with self._connection() as conn:
                conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
        except (sqlite3.Error, ServiceUnavailableError) as exc:  # the next automatic checkpoint catches up
            logger.warning("keystore %s: checkpoint failed: %s", self.path, exc)
        finally:
            with self._lock:
                self._checkpointing = False

    def _read(self) -> contextlib.AbstractContextManager[sqlite3.Connection]:
        """One read transaction: every statement inside sees the same snapshot."""
        return self._transaction("BEGIN")

    def close(self) -> None:
        """Close every idle connection; connections in use close when their call returns. Idempotent."""
        with self._lock:
            self._closed = True
            idle = [conn for pool in self._idle.values() for conn in pool]
            for pool in self._idle.values():
                pool.clear()
            if self._pid != os.getpid():
                self._inherited.extend(idle)
                idle = []
        for conn in idle:
            conn.close()

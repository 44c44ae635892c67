"""Connections to the keystore database: a psycopg_pool pool, retried units of work, domain errors.

* :meth:`Database.read` runs a function on a pooled autocommit connection (one statement is one snapshot);
  :meth:`Database.write` runs it inside ``BEGIN`` ... ``COMMIT``. Both return the function's result.
* A connection the server dropped (a restart, a failover, an idle timeout) is noticed on use. The pool is then
  checked (broken idle connections are replaced in the background) and the unit of work is retried once on a
  fresh connection when that is safe: a read always, a write only when ``BEGIN`` itself failed, so a write is
  never applied twice. After an outage the pool reconnects by itself; no restart is needed.
* Everything that means "the database cannot serve now" (refused or lost connections, no free connection
  within ``wait_timeout``, shutdown, disk full, a read-only standby) becomes
  :class:`~app.keystore.errors.KeystoreUnavailableError`; other database errors are bugs and surface as such.
* During an outage calls fail fast: after a lost connection or a wait that timed out, calls wait at most
  :data:`OUTAGE_WAIT_SECONDS` for a connection (not ``wait_timeout``) until one succeeds again, so requests
  get their 503 within a second instead of piling up in threads for the full wait.
* A ``Database`` opened before ``fork()`` stays usable in the child: the child opens its own pool and never
  touches the inherited connections (closing them would end the parent's sessions).

psycopg is imported here only, when a PostgreSQL keystore is opened: the SQLite default never needs it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from app.core.database_url import describe_database_url, redact
from app.errors import ServiceUnavailableError

from ..errors import KeystoreUnavailableError

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

    Connection = psycopg.Connection[tuple[Any, ...]]

__all__ = ["Database"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: libpq's smallest useful connect timeout (it rounds lower values up to 2 s).
_MIN_CONNECT_TIMEOUT = 2
#: Longest wait for a connection while the database is known to be unreachable (see the module docstring).
OUTAGE_WAIT_SECONDS = 1.0


def _driver() -> tuple[Any, Any]:
    """``(psycopg, psycopg_pool)``, imported now.

    Raises:
        KeystoreUnavailableError: they are not installed; the message says which extra to install.
    """
    try:
        import psycopg
        import psycopg_pool
    except ImportError as exc:
        raise KeystoreUnavailableError(
            "the PostgreSQL keystore needs psycopg and psycopg-pool: pip install 'keystream[postgres]'"
        ) from exc
    return psycopg, psycopg_pool


class Database:
    """A pool of connections to one PostgreSQL database.

    Args:
        url: a ``postgresql://`` URL; kept private (see :mod:`app.core.database_url`).
        pool_size: most connections open at once.
        wait_timeout: seconds a unit of work waits for a free connection before giving up.
        connect_timeout: seconds one connection attempt may take.

    Raises:
        KeystoreUnavailableError: psycopg is not installed.
    """

    def __init__(self, url: str, *, pool_size: int, wait_timeout: float, connect_timeout: float) -> None:
        self._psycopg, self._pool_module = _driver()
        self._url = url
        self.description = describe_database_url(url)
        self._pool_size = pool_size
        self._wait_timeout = wait_timeout
        self._outage_wait = min(wait_timeout, OUTAGE_WAIT_SECONDS)
        # Set by a connection-level failure, cleared by the next success (a plain flag: a stale read only
        # changes how long one call waits).
        self._unreachable = False
        self._connect_timeout = max(_MIN_CONNECT_TIMEOUT, round(connect_timeout))
        self._lock = threading.Lock()
        self._closed = False
        self._pid = os.getpid()
        self._inherited: list[psycopg_pool.ConnectionPool[Connection]] = []
        self._pool = self._new_pool()

    def __repr__(self) -> str:
        return f"<Database {self.description}>"

    def _new_pool(self) -> psycopg_pool.ConnectionPool[Connection]:
        pool: psycopg_pool.ConnectionPool[Connection] = self._pool_module.ConnectionPool(
            self._url,
            min_size=1,
            max_size=self._pool_size,
            kwargs={"autocommit": True, "connect_timeout": self._connect_timeout},
            timeout=self._wait_timeout,
            # Short: a failed background reconnection gives up soon and the next request that needs a
            # connection starts a new attempt at once, instead of waiting out a long exponential backoff.
            reconnect_timeout=max(self._wait_timeout, float(self._connect_timeout)),
            reconnect_failed=self._reconnect_failed,
            name="keystore",
            open=True,
        )
        return pool

    def _reconnect_failed(self, pool: object) -> None:
        logger.warning("keystore %s: cannot reconnect; retrying when a request needs it", self.description)

    def connect(self) -> Connection:
        """One connection outside the pool (autocommit), for work that holds a session, such as migrations.

        Raises:
            KeystoreUnavailableError: the database cannot be reached.
        """
        try:
            conn: Connection = self._psycopg.connect(
                self._url, autocommit=True, connect_timeout=self._connect_timeout
            )
        except self._psycopg.OperationalError as exc:
            raise self._unavailable(exc) from None
        return conn

    def _current_pool(self) -> psycopg_pool.ConnectionPool[Connection]:
        with self._lock:
            if self._closed:
                raise ServiceUnavailableError("the keystore is closed")
            if self._pid != os.getpid():
                self._inherited.append(self._pool)
                self._pid = os.getpid()
                self._pool = self._new_pool()
            return self._pool

    def read(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` on an autocommit connection (retried once on a fresh one if the connection was lost).

        Raises:
            KeystoreUnavailableError: the database cannot serve now.
            ServiceUnavailableError: the keystore is closed.
        """
        return self._run(work, write=False)

    def write(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one transaction, committed when it returns and rolled back when it raises.

        Raises:
            KeystoreUnavailableError: the database cannot serve now; the change may or may not have been
                committed if the connection broke during ``COMMIT``.
            ServiceUnavailableError: the keystore is closed.
        """
        return self._run(work, write=True)

    def _run(self, work: Callable[[Connection], T], *, write: bool) -> T:
        psycopg = self._psycopg
        pool_closed = self._pool_module.PoolClosed
        for attempt in (1, 2):
            pool = self._current_pool()
            began = False
            conn: Connection | None = None
            wait = self._outage_wait if self._unreachable else self._wait_timeout
            try:
                with pool.connection(timeout=wait) as conn:
                    if write:
                        with conn.transaction():
                            began = True
                            result = work(conn)
                    else:
                        result = work(conn)
                self._unreachable = False
                return result
            except pool_closed as exc:
                raise ServiceUnavailableError("the keystore is closed") from exc
            except (psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction) as exc:
                broken = conn is not None and conn.broken
                if broken or isinstance(exc, self._pool_module.PoolTimeout):
                    self._unreachable = True
                if broken:
                    # The server dropped this connection: the idle ones are likely dead too. Replace them.
                    with contextlib.suppress(psycopg.Error):
                        pool.check()
                if attempt == 1 and broken and not began:
                    logger.info("keystore %s: connection lost, retrying on a new one", self.description)
                    continue
                raise self._unavailable(exc) from None
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _unavailable(self, exc: BaseException) -> KeystoreUnavailableError:
        """The domain error for ``exc``; the details (URL and passwords removed) go to the server log only."""
        logger.warning(
            "keystore %s unavailable: %s: %s",
            self.description,
            type(exc).__name__,
            redact(str(exc), self._url),
        )
        if isinstance(exc, self._pool_module.PoolTimeout):
            reason = "no database connection available"
        elif getattr(exc, "sqlstate", None):
            reason = type(exc).__name__
        else:
            reason = "cannot reach the database server"
        return KeystoreUnavailableError(f"the keystore database is unavailable ({reason}); retry later")

    def close(self) -> None:
        """Close the pool (in the process that opened it). Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            pool, forked = self._pool, self._pid != os.getpid()
        if forked:
            self._inherited.append(pool)
        else:
            pool.close(timeout=self._wait_timeout)

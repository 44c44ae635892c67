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
* During an outage calls fail at once: a circuit breaker (:mod:`.breaker`) opens when the database is known
  to be unreachable (a connection refused, a dropped connection whose retry finds none within
  :data:`RETRY_WAIT_SECONDS`, a wait for a connection that ran out while the pool could not connect, not
  one that ran out because every connection was busy), and every call then raises at once, also a call
  already waiting for a connection (waits are taken in slices of :data:`WAIT_SLICE_SECONDS`). A probe thread
  closes it when the database answers again, replacing the pool if it has no connection yet (the pool's own
  reconnection backs off for seconds).
* A ``Database`` opened before ``fork()`` stays usable in the child: the child opens its own pool and never
  touches the inherited connections (closing them would end the parent's sessions).

psycopg is imported here only, when a PostgreSQL keystore is opened: the SQLite default never needs it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar

from app.core.database_url import describe_database_url, redact
from app.core.waiting import refuse_waiting
from app.errors import ServiceUnavailableError

from ..errors import KeystoreUnavailableError
from .breaker import CircuitBreaker

if TYPE_CHECKING:
    import psycopg
    import psycopg_pool

    Connection = psycopg.Connection[tuple[Any, ...]]

__all__ = ["Database"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

#: libpq's smallest useful connect timeout (it rounds lower values up to 2 s).
_MIN_CONNECT_TIMEOUT = 2
#: Longest wait for a fresh connection after the server dropped the one in use: a database that is up gives
#: one in milliseconds; longer means it is down (the breaker opens).
RETRY_WAIT_SECONDS = 0.25
#: A wait for a free connection is taken in slices this long, so a waiting call sees the breaker open.
WAIT_SLICE_SECONDS = 0.05


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
        self.breaker = CircuitBreaker(self._probe, self.description)
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
            if getattr(exc, "sqlstate", None) is None:  # refused or unreachable, not "too many clients"
                self.breaker.open("cannot connect")
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
            WouldWait: on a thread that may not wait (:mod:`app.core.waiting`): every statement is a round
                trip.
        """
        return self._run(work, write=False)

    def write(self, work: Callable[[Connection], T]) -> T:
        """Run ``work`` in one transaction, committed when it returns and rolled back when it raises.

        Raises:
            KeystoreUnavailableError: the database cannot serve now; the change may or may not have been
                committed if the connection broke during ``COMMIT``.
            ServiceUnavailableError: the keystore is closed.
            WouldWait: on a thread that may not wait (:mod:`app.core.waiting`).
        """
        return self._run(work, write=True)

    def _run(self, work: Callable[[Connection], T], *, write: bool) -> T:
        refuse_waiting("a PostgreSQL round trip")  # every statement is one
        psycopg = self._psycopg
        pool_closed = self._pool_module.PoolClosed
        for attempt in (1, 2):
            self.breaker.check()
            pool = self._current_pool()
            began = False
            conn: Connection | None = None
            wait = self._wait_timeout if attempt == 1 else min(self._wait_timeout, RETRY_WAIT_SECONDS)
            try:
                with self._connection(pool, wait) as conn:
                    if write:
                        with conn.transaction():
                            began = True
                            result = work(conn)
                    else:
                        result = work(conn)
                return result
            except pool_closed as exc:
                raise ServiceUnavailableError("the keystore is closed") from exc
            except (psycopg.OperationalError, psycopg.errors.ReadOnlySqlTransaction) as exc:
                broken = conn is not None and conn.broken
                if broken:
                    # The server dropped this connection: the idle ones are likely dead too. Replace them.
                    with contextlib.suppress(psycopg.Error):
                        pool.check()
                if attempt == 1 and broken and not began:
                    logger.info("keystore %s: connection lost, retrying on a new one", self.description)
                    continue
                if isinstance(exc, self._pool_module.PoolTimeout):
                    if not self._saturated(pool):
                        self.breaker.open("no connection could be made")
                elif broken or conn is None:
                    self.breaker.open("connection lost" if broken else "cannot connect")
                raise self._unavailable(exc) from None
        raise AssertionError("unreachable: the second attempt returns or raises")

    @contextlib.contextmanager
    def _connection(self, pool: psycopg_pool.ConnectionPool[Connection], wait: float) -> Iterator[Connection]:
        """``pool.connection()``, waiting up to ``wait`` seconds in slices of :data:`WAIT_SLICE_SECONDS`.

        Raises:
            PoolTimeout: no connection within ``wait``.
            KeystoreUnavailableError: the breaker opened while this call waited.
        """
        deadline = time.monotonic() + wait
        while True:
            remaining = deadline - time.monotonic()
            try:
                conn = pool.getconn(timeout=max(min(remaining, WAIT_SLICE_SECONDS), 0.001))
                break
            except self._pool_module.PoolTimeout:
                if remaining <= WAIT_SLICE_SECONDS:
                    raise
                self.breaker.check()
        try:
            with conn:  # as pool.connection(): commit or roll back, never close a pooled connection
                yield conn
        finally:
            pool.putconn(conn)

    def _saturated(self, pool: psycopg_pool.ConnectionPool[Connection]) -> bool:
        """True when every connection the pool may open exists and is busy: a timed-out wait then means
        load, not an unreachable database."""
        stats = pool.get_stats()
        return stats.get("pool_size", 0) >= self._pool_size and stats.get("pool_available", 0) == 0

    def _probe(self) -> None:
        """One check that the database serves (the breaker's probe thread): a pooled connection if one is
        free at once, else a connection of its own. When only the latter works, the pool is replaced: the
        old one may sit in a reconnection backoff of several seconds although the database is back.

        Raises:
            Exception: the database does not serve (refused, unreachable within ``connect_timeout``...).
        """
        pool = self._current_pool()
        with contextlib.suppress(self._psycopg.OperationalError):
            with pool.connection(timeout=WAIT_SLICE_SECONDS) as conn:
                conn.execute("SELECT 1")
            return
        with self._psycopg.connect(self._url, autocommit=True, connect_timeout=self._connect_timeout) as conn:
            conn.execute("SELECT 1")
        self._replace_pool(pool)

    def _replace_pool(self, old: psycopg_pool.ConnectionPool[Connection]) -> None:
        """Use a new pool instead of ``old`` (closed in the background, its connections dead anyway)."""
        with self._lock:
            if self._closed or self._pool is not old or self._pid != os.getpid():
                return
            self._pool = self._new_pool()
        threading.Thread(
            target=old.close, kwargs={"timeout": self._wait_timeout}, name="keystore-old-pool", daemon=True
        ).start()

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
        self.breaker.stop()
        if forked:
            self._inherited.append(pool)
        else:
            pool.close(timeout=self._wait_timeout)

"""Change hints for the SQLite keystore: a thread that notices commits of other connections and processes.

SQLite has no ``NOTIFY``; its analogue is ``PRAGMA data_version``, which changes on a connection whenever
another connection (in any process) has committed to the file since the last call. It reads the WAL index in
shared memory, so checking it every :data:`HINT_INTERVAL` seconds costs microseconds. A change is only a hint
to read the change log now (:meth:`~app.keystore.base.KeyStore.changes_since` stays the truth).
"""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

__all__ = ["HINT_INTERVAL", "DataVersionWatcher"]

logger = logging.getLogger("app.keystore.sqlite")

#: Seconds between two ``PRAGMA data_version`` checks.
HINT_INTERVAL = 0.01


class DataVersionWatcher:
    """A daemon thread calling ``on_hint(None)`` (read the log) when another connection committed to the file.

    Args:
        path: the database file.
        on_hint: called from the watcher thread; must be quick and thread-safe.
    """

    def __init__(self, path: Path, on_hint: Callable[[None], None]) -> None:
        self._path = path
        self._on_hint = on_hint
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="keystore-watch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        last: int | None = None
        while not self._stop.wait(HINT_INTERVAL):
            try:
                if conn is None:
                    conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
                    last = None
                version = int(conn.execute("PRAGMA data_version").fetchone()[0])
            except sqlite3.Error as exc:
                logger.debug("keystore watcher: %s", exc)
                if conn is not None:
                    with contextlib.suppress(sqlite3.Error):
                        conn.close()
                conn = None
                continue
            if last is not None and version != last:
                self._on_hint(None)
            last = version
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        """Stop the thread and wait for it. Idempotent."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

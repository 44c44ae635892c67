"""Change hints for the SQLite keystore: a thread that notices when the change log moved.

SQLite has no ``NOTIFY``; its analogue is ``PRAGMA data_version``, which changes on a connection whenever
another connection (in any process) has committed to the file since the last call. It reads the WAL index in
shared memory, so checking it every :data:`HINT_INTERVAL` seconds costs microseconds. When it changed, the
thread reads the change log's head (its newest number and how far it was trimmed, one indexed statement) and
hints only when that moved: a commit that appends no change (a login's token: see
:meth:`~app.keystore.base.KeyStore.create_token`) wakes no follower. A hint only says to read the log now
(:meth:`~app.keystore.base.KeyStore.changes_since` stays the truth).
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
#: The change log's head: its newest number and the number it was trimmed through.
_HEAD = "SELECT (SELECT coalesce(max(seq), 0) FROM key_changes), (SELECT through FROM key_changes_trimmed)"


class DataVersionWatcher:
    """A daemon thread calling ``on_hint(None)`` (read the log) when another connection moved the change log
    (appended a number, or trimmed it).

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
        version: int | None = None
        head: tuple[int, int] | None = None
        while not self._stop.wait(HINT_INTERVAL):
            try:
                if conn is None:
                    conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
                    version = head = None
                now = int(conn.execute("PRAGMA data_version").fetchone()[0])
                if now == version:
                    continue
                version = now
                row = conn.execute(_HEAD).fetchall()[0]
                moved, head = head is not None and (row[0], row[1]) != head, (int(row[0]), int(row[1]))
            except sqlite3.Error as exc:
                logger.debug("keystore watcher: %s", exc)
                if conn is not None:
                    with contextlib.suppress(sqlite3.Error):
                        conn.close()
                conn = None
                continue
            if moved:
                self._on_hint(None)
        if conn is not None:
            conn.close()

    def stop(self) -> None:
        """Stop the thread and wait for it. Idempotent."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=1.0)

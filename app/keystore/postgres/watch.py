"""A dedicated ``LISTEN`` connection that turns change notifications into hints for the change-log reader.

``NOTIFY`` is sent in each change's own transaction (:mod:`.changes`), so PostgreSQL delivers it only if the
change committed. Notifications are lost while the listener is disconnected, so they are hints only: after
every (re)connection the listener sends one hint at once, and the reader then reads everything after its last
applied number from the log (:meth:`~app.keystore.base.KeyStore.changes_since`), which is the truth. The
connection is re-opened with a capped backoff whenever it breaks (a restart, a failover, an idle timeout).
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..changes import Change
from .changes import CHANGE_CHANNEL, decode_change

if TYPE_CHECKING:
    from .connections import Database

__all__ = ["ChangeListener"]

logger = logging.getLogger(__name__)

#: Seconds between checks of the stop flag while no notification arrives.
_WAKE_SECONDS = 0.5
#: Reconnection backoff: first and longest wait, in seconds.
_BACKOFF_FIRST, _BACKOFF_MAX = 0.1, 2.0


class ChangeListener:
    """A daemon thread holding ``LISTEN`` on :data:`CHANGE_CHANNEL`; calls ``on_hint`` per notification with
    the change it carries (``None`` after a (re)connection: read the log).

    Args:
        database: where to connect (a connection outside the pool, kept for the listener's life).
        on_hint: called from the listener thread; must be quick and thread-safe.
    """

    def __init__(self, database: Database, on_hint: Callable[[Change | None], None]) -> None:
        self._database = database
        self._on_hint = on_hint
        self._stop = threading.Event()
        self.reconnects = 0
        self._thread = threading.Thread(target=self._run, name="keystore-listener", daemon=True)
        self._thread.start()

    def __repr__(self) -> str:
        return f"<ChangeListener {self._database.description} reconnects={self.reconnects}>"

    def _run(self) -> None:
        backoff = _BACKOFF_FIRST
        connected_once = False
        while not self._stop.is_set():
            try:
                conn = self._database.connect()
            except Exception as exc:
                logger.debug("change listener cannot connect: %s", type(exc).__name__)
            else:
                try:
                    conn.execute(f"LISTEN {CHANGE_CHANNEL}")
                    if connected_once:
                        self.reconnects += 1
                        logger.info("change listener reconnected to %s", self._database.description)
                    connected_once = True
                    backoff = _BACKOFF_FIRST
                    self._on_hint(None)  # anything committed while we were not listening: read the log
                    while not self._stop.is_set():
                        for notify in conn.notifies(timeout=_WAKE_SECONDS, stop_after=1):
                            self._on_hint(decode_change(notify.payload))
                except Exception as exc:
                    logger.warning(
                        "change listener lost its connection (%s); reconnecting", type(exc).__name__
                    )
                finally:
                    with contextlib.suppress(Exception):
                        conn.close()
            self._stop.wait(backoff)
            backoff = min(backoff * 2, _BACKOFF_MAX)

    def stop(self) -> None:
        """Stop listening and wait for the thread (at most about :data:`_WAKE_SECONDS`). Idempotent."""
        self._stop.set()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=_WAKE_SECONDS * 4)

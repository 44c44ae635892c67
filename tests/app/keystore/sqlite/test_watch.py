"""SQLite's change hints (:mod:`app.keystore.sqlite.watch`): a commit that moves the change log (a new number,
a trim) is hinted within a few checks; a commit that appends no change (a login's token) is not, so it
wakes no follower."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from app.keystore import SqliteKeyStore
from app.keystore.sqlite.watch import HINT_INTERVAL, DataVersionWatcher
from app.services.security import new_token

#: Long enough for dozens of checks: a hint due is given well within it.
WAIT = 100 * HINT_INTERVAL


def hints(store: SqliteKeyStore, path: Path) -> tuple[list[float], DataVersionWatcher]:
    got: list[float] = []
    watcher = DataVersionWatcher(path, lambda _: got.append(time.monotonic()))
    time.sleep(10 * HINT_INTERVAL)  # its first data_version and head are read
    return got, watcher


def wait_for(got: list[float], count: int) -> bool:
    deadline = time.monotonic() + WAIT
    while len(got) < count and time.monotonic() < deadline:
        time.sleep(HINT_INTERVAL)
    return len(got) >= count


def test_only_commits_that_move_the_change_log_are_hinted(store: SqliteKeyStore) -> None:
    got, watcher = hints(store, store.path)
    try:
        for _ in range(3):  # logins' tokens: committed, no change appended
            store.create_token(
                new_token(("encrypt",), ("*",), "jwt login", ttl_seconds=60)[1], reissuable=True
            )
        time.sleep(WAIT)
        assert got == []
        store.create_key("orders")
        assert wait_for(got, 1), "no hint after a change was appended"
        store.rotate_key("orders")
        assert wait_for(got, 2), "no hint after a second change"
        time.sleep(10 * HINT_INTERVAL)
        hinted = len(got)
        assert store.trim_changes(1) >= 1  # the newest number stays: only the trimmed-through one moves
        assert wait_for(got, hinted + 1), "no hint after the log was trimmed"
    finally:
        watcher.stop()


def test_a_hint_comes_from_another_connection_in_another_thread(store: SqliteKeyStore) -> None:
    got, watcher = hints(store, store.path)
    writer = threading.Thread(target=store.create_key, args=("billing",))
    try:
        writer.start()
        writer.join()
        assert wait_for(got, 1)
    finally:
        watcher.stop()

"""SQLite's change hints (:mod:`app.keystore.sqlite.watch`): a commit that moves the change log (a new number,
a trim) is hinted at once; a commit that appends no change (a login's token) is not, so it wakes no follower.
On Linux the thread sleeps on inotify and never wakes while nothing is written; without inotify it polls."""

from __future__ import annotations

import base64
import errno
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from app.keystore import SqliteKeyStore, open_keystore
from app.keystore.sqlite import watch
from app.keystore.sqlite.watch import HINT_INTERVAL, DataVersionWatcher
from app.services.security import new_token

#: Long enough for dozens of checks: a hint due is given well within it.
WAIT = 100 * HINT_INTERVAL

needs_inotify = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


def hints(store: SqliteKeyStore, path: Path) -> tuple[list[float], DataVersionWatcher]:
    got: list[float] = []
    watcher = DataVersionWatcher(path, lambda _: got.append(time.monotonic()))
    time.sleep(10 * HINT_INTERVAL)  # its first data_version and head are read
    return got, watcher


def wait_for(got: list[float], count: int, wait: float = WAIT) -> bool:
    deadline = time.monotonic() + wait
    while len(got) < count and time.monotonic() < deadline:
        time.sleep(HINT_INTERVAL / 10)
    return len(got) >= count


def wait_until(condition: Callable[[], bool], wait: float = WAIT) -> bool:
    deadline = time.monotonic() + wait
    while not condition() and time.monotonic() < deadline:
        time.sleep(HINT_INTERVAL / 10)
    return condition()


def assert_asleep(watcher: DataVersionWatcher) -> None:
    """Wait until the watcher sleeps (no wake for 0.2 s; checks after a write go on for up to a second)."""
    deadline = time.monotonic() + 3.0
    wakes = -1
    while watcher.wakes != wakes and time.monotonic() < deadline:
        wakes = watcher.wakes
        time.sleep(0.2)
    assert watcher.wakes == wakes, "the watcher keeps waking up"


@pytest.fixture
def without_inotify(monkeypatch: pytest.MonkeyPatch) -> None:
    """inotify_init1 fails as on a system without it (and the process has not logged that yet)."""

    def unavailable() -> watch._Inotify:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(watch, "_Inotify", unavailable)
    monkeypatch.setattr(watch, "_fallback_logged", False)


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


@needs_inotify
def test_a_commit_is_hinted_at_once_through_inotify(store: SqliteKeyStore) -> None:
    """A key's change is two commits a moment apart: the first wakes the watcher, the second is checked
    a millisecond or two later."""
    got, watcher = hints(store, store.path)
    try:
        assert watcher.event_driven
        latencies = []
        for number in range(5):
            start = time.monotonic()
            store.create_key(f"orders-{number}")
            assert wait_for(got, number + 1)
            latencies.append(got[-1] - start)
            time.sleep(0.05)  # quiet again: the next change is the first write after a quiet spell
        assert sorted(latencies)[2] < 5 * HINT_INTERVAL, latencies
    finally:
        watcher.stop()


CHILD = """
import base64, sys
from pathlib import Path
from app.keystore import open_keystore
store = open_keystore(Path(sys.argv[1]), base64.b64decode(sys.argv[2]))
sys.stdout.write("open\\n"); sys.stdout.flush()
sys.stdin.readline()
store.create_key("from-another-process")
store.close()
"""


@needs_inotify
def test_a_commit_in_another_process_is_hinted_through_inotify(
    store: SqliteKeyStore, data_dir: Path, master_key: bytes
) -> None:
    repo = Path(__file__).resolve().parents[4]
    got, watcher = hints(store, store.path)
    with subprocess.Popen(
        [sys.executable, "-c", CHILD, str(data_dir), base64.b64encode(master_key).decode()],
        cwd=repo,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline() == "open\n"
            time.sleep(0.1)  # its opening's commits are settled
            checks = watcher.checks
            child.stdin.write("go\n")
            child.stdin.flush()
            assert wait_for(got, 1), "no hint after another process appended a change"
            assert watcher.event_driven
            assert child.wait(timeout=30) == 0
            time.sleep(0.2)
            # A handful of checks for the commit (at once, then while its writes settle), not a poll's 100/s.
            assert watcher.checks - checks < 40
        finally:
            watcher.stop()
            if child.poll() is None:
                child.kill()


@needs_inotify
def test_no_wake_and_no_check_while_nothing_is_written(store: SqliteKeyStore) -> None:
    """Also not for another file of the directory written all the time, such as the audit log."""
    audit_log = store.path.parent / "audit.log"
    audit_log.write_bytes(b"")
    got, watcher = hints(store, store.path)
    try:
        assert watcher.event_driven
        wakes, checks = watcher.wakes, watcher.checks
        with audit_log.open("ab", buffering=0) as log:
            for _ in range(50):
                log.write(b"a record\n")
                time.sleep(0.01)
        assert (watcher.wakes, watcher.checks) == (wakes, checks)
        store.create_key("orders")  # the counters do count
        assert wait_for(got, 1)
        assert watcher.checks > checks and watcher.wakes > wakes
        assert wait_until(lambda: time.monotonic() - got[-1] > 0.1)  # its writes have settled
        wakes, checks = watcher.wakes, watcher.checks
        time.sleep(0.5)
        assert (watcher.wakes, watcher.checks) == (wakes, checks)
    finally:
        watcher.stop()


@needs_inotify
def test_a_wal_file_that_appears_later_is_watched(data_dir: Path, master_key: bytes) -> None:
    """SQLite removes the -wal file at the last connection's close and creates it at the next open."""
    store = open_keystore(data_dir, master_key)
    assert isinstance(store, SqliteKeyStore)
    path = store.path
    store.close()
    wal = Path(f"{path}-wal")
    assert not wal.exists()
    got, watcher = hints(store, path)  # its own connection creates the -wal file after it is watched
    try:
        assert watcher.event_driven and wal.exists()
        store = open_keystore(data_dir, master_key)
        assert_asleep(watcher)  # nothing left to check: only a write to the -wal file can wake it
        store.create_key("orders")
        assert wait_for(got, 1)
        store.close()
    finally:
        watcher.stop()


class ScriptedReader:
    """Stands for the watcher's connection: says "committed, the head moved" once :attr:`due` is past."""

    def __init__(self, path: Path) -> None:
        self.due: float | None = None

    def read(self) -> tuple[bool, bool]:
        if self.due is None or time.monotonic() < self.due:
            return False, False
        self.due = None
        return True, True

    def close(self) -> None:
        pass


@pytest.fixture
def scripted(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ScriptedReader]]:
    """A watcher's reader the test scripts, on a database path that is a plain file (no SQLite)."""
    readers: list[ScriptedReader] = []

    def reader(path: Path) -> ScriptedReader:
        readers.append(ScriptedReader(path))
        return readers[-1]

    monkeypatch.setattr(watch, "_HeadReader", reader)
    yield readers


def plain_database(tmp_path: Path) -> Path:
    path = tmp_path / "keystore.db"
    path.write_bytes(b"")
    return path


def append(path: Path, data: bytes = b"frame") -> None:
    with path.open("ab") as file:
        file.write(data)


@needs_inotify
def test_a_removed_and_recreated_wal_file_is_watched_again(
    tmp_path: Path, scripted: list[ScriptedReader]
) -> None:
    path = plain_database(tmp_path)
    wal = Path(f"{path}-wal")
    got: list[float] = []
    watcher = DataVersionWatcher(path, lambda _: got.append(time.monotonic()))
    try:
        assert wait_until(lambda: watcher.checks == 1)
        reader = scripted[0]
        for round_ in range(3):
            if round_ == 2:  # renamed into place instead of created
                temporary = tmp_path / "wal.tmp"
                temporary.write_bytes(b"header")
                os.replace(temporary, wal)
            reader.due = time.monotonic()
            append(wal)
            assert wait_for(got, 2 * round_ + 1), f"round {round_}: no hint"
            assert wait_until(lambda: time.monotonic() - got[-1] > 0.1)  # settled
            reader.due = time.monotonic()
            append(wal)  # the watch on the file itself
            assert wait_for(got, 2 * round_ + 2), f"round {round_}: no hint for a write to the file"
            assert wait_until(lambda: time.monotonic() - got[-1] > 0.1)
            if round_ < 2:
                wal.unlink()
        assert watcher.event_driven
    finally:
        watcher.stop()


@needs_inotify
def test_a_commit_visible_after_its_last_write_is_still_hinted(
    tmp_path: Path, scripted: list[ScriptedReader]
) -> None:
    """A commit in WAL mode shows a moment after its frames are written (after the fsync): the watcher checks
    until it shows, then sleeps."""
    path = plain_database(tmp_path)
    got: list[float] = []
    watcher = DataVersionWatcher(path, lambda _: got.append(time.monotonic()))
    try:
        assert wait_until(lambda: watcher.checks == 1)
        start = time.monotonic()
        scripted[0].due = start + 0.2  # longer than the checks after a write go on for a database write
        append(Path(f"{path}-wal"))
        assert wait_for(got, 1)
        assert 0.2 <= got[0] - start < 0.2 + 3 * HINT_INTERVAL
        assert wait_until(lambda: time.monotonic() - got[-1] > 0.1)
        wakes = watcher.wakes
        time.sleep(0.3)
        assert watcher.wakes == wakes
    finally:
        watcher.stop()


@needs_inotify
def test_steady_writes_are_checked_at_most_once_an_interval(
    tmp_path: Path, scripted: list[ScriptedReader]
) -> None:
    path = plain_database(tmp_path)
    wal = Path(f"{path}-wal")
    wal.write_bytes(b"")
    watcher = DataVersionWatcher(path, lambda _: None)
    try:
        assert wait_until(lambda: watcher.checks == 1)
        start = time.monotonic()
        with wal.open("ab", buffering=0) as file:
            while time.monotonic() - start < 0.5:
                file.write(b"frame")
                time.sleep(0.0005)
        time.sleep(0.1)
        # 0.5 s of writes every half millisecond, plus the checks while they settle: about 55 checks, each
        # one wake (the writes meanwhile wake nothing).
        assert 20 < watcher.checks < 0.6 / HINT_INTERVAL + 15, watcher.checks
        assert watcher.wakes <= watcher.checks + 2, (watcher.wakes, watcher.checks)
    finally:
        watcher.stop()


@pytest.mark.usefixtures("without_inotify")
def test_without_inotify_it_polls_and_says_so_once(
    store: SqliteKeyStore, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="app.keystore.sqlite")
    got, watcher = hints(store, store.path)
    other: DataVersionWatcher | None = None
    try:
        assert not watcher.event_driven
        checks = watcher.checks
        time.sleep(0.2)
        assert watcher.checks - checks >= 5  # every HINT_INTERVAL
        store.create_key("orders")
        assert wait_for(got, 1)
        other = DataVersionWatcher(store.path, lambda _: None)
        time.sleep(0.05)
    finally:
        watcher.stop()
        if other is not None:
            other.stop()
    said = [record for record in caplog.records if "no inotify" in record.getMessage()]
    assert len(said) == 1 and "ENOSYS" in said[0].getMessage()
    assert str(store.path.parent) not in caplog.text


@needs_inotify
def test_when_a_watch_cannot_be_added_it_polls(
    store: SqliteKeyStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """inotify's per-user limit of watches reached (ENOSPC)."""
    caplog.set_level(logging.DEBUG, logger="app.keystore.sqlite")
    monkeypatch.setattr(watch, "_fallback_logged", False)

    def add(self: watch._Inotify, path: Path, mask: int) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(watch._Inotify, "add", add)
    got, watcher = hints(store, store.path)
    try:
        assert not watcher.event_driven
        store.create_key("orders")
        assert wait_for(got, 1)
    finally:
        watcher.stop()
    assert "no inotify (ENOSPC)" in caplog.text and str(store.path.parent) not in caplog.text


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "polling"])
def test_stop_returns_at_once(store: SqliteKeyStore, inotify: bool, request: pytest.FixtureRequest) -> None:
    if not inotify:
        request.getfixturevalue("without_inotify")
    elif not sys.platform.startswith("linux"):
        pytest.skip("inotify is Linux's")
    _, watcher = hints(store, store.path)
    assert watcher.event_driven is inotify
    start = time.monotonic()
    watcher.stop()
    assert time.monotonic() - start < 0.2
    assert not watcher._thread.is_alive()
    watcher.stop()  # idempotent

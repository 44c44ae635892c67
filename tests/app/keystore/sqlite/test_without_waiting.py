"""SQLite without waiting (:mod:`app.core.waiting`, the connections' module doc): a write lock another
connection holds is :class:`WouldWait` at once (not after ``busy_timeout``) with nothing written, the
connections that never wait never checkpoint, and every :data:`CHECKPOINT_EVERY` of their commits a thread
checkpoints instead (writes meanwhile are refused, then run where they may wait), which keeps the WAL from
growing without end."""

from __future__ import annotations

import contextlib
import sqlite3
import time
from pathlib import Path

import pytest

from app.core.waiting import WouldWait, without_waiting
from app.keystore import SqliteKeyStore
from app.keystore.sqlite import connections
from app.services.security import new_token


def test_a_held_write_lock_refuses_at_once_and_writes_nothing(store: SqliteKeyStore) -> None:
    assert store.wal
    other = sqlite3.connect(store.path, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        record = new_token(("encrypt",), ("*",), "jwt login", ttl_seconds=60)[1]
        started = time.monotonic()
        with without_waiting(), pytest.raises(WouldWait):
            store.create_token(record, reissuable=True)
        assert time.monotonic() - started < 1.0  # the store's busy_timeout is 10 s
        with without_waiting():  # reads do not need the write lock in WAL mode
            assert store.read_login("missing", "jwt") == (None, None)
        other.execute("ROLLBACK")
        assert record.token_id not in {token.token_id for token in store.list_tokens()}
        with without_waiting():  # lock released: the same write goes through
            store.create_token(record, reissuable=True)
        assert store.get_token(record.token_id).token_id == record.token_id
    finally:
        other.close()


def test_connections_that_never_wait_have_no_busy_timeout_and_no_automatic_checkpoint(
    store: SqliteKeyStore,
) -> None:
    with without_waiting(), store._connection() as conn:
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 0
        assert conn.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == 0
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 1  # NORMAL
    with store._connection() as conn:
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 10_000
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL


def _wal_bytes_after_logins(path: Path, count: int) -> int:
    opened = SqliteKeyStore(path, bytes(32))
    try:
        for _ in range(count):
            record = new_token(("encrypt",), ("*",), "l", ttl_seconds=60)[1]
            try:  # as a login does: without waiting, else again where waiting is allowed
                with without_waiting():
                    opened.create_token(record, reissuable=True)
            except WouldWait:  # a checkpoint holds the write lock
                opened.create_token(record, reissuable=True)
            time.sleep(0.001)  # logins come a millisecond apart at best: the checkpoint thread gets its turn
        deadline = time.monotonic() + 10
        while opened._checkpointing and time.monotonic() < deadline:
            time.sleep(0.01)
        return (path.parent / (path.name + "-wal")).stat().st_size
    finally:
        opened._idle["now"].clear()  # keep the WAL file as it is: closing a connection may checkpoint
        opened.close()


def test_checkpoints_run_off_the_callers_thread_and_bound_the_wal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(connections, "CHECKPOINT_EVERY", 10**9)
    (tmp_path / "never").mkdir()
    unbounded = _wal_bytes_after_logins(tmp_path / "never" / "keystore.db", 300)
    monkeypatch.setattr(connections, "CHECKPOINT_EVERY", 20)
    (tmp_path / "every").mkdir()
    bounded = _wal_bytes_after_logins(tmp_path / "every" / "keystore.db", 300)
    assert unbounded > 1_000_000  # ~5 pages per login, never checkpointed
    assert bounded < unbounded / 2, (bounded, unbounded)  # every 20 logins, a thread that may start late


def test_a_login_read_is_one_statement_and_leaves_no_transaction_open(store: SqliteKeyStore) -> None:
    """``read_login`` runs its one SELECT in autocommit: no ``BEGIN``/``COMMIT`` around it, and the statement
    is read to its end, so no read snapshot stays open on the pooled connection (it would hold back a
    ``RESTART`` checkpoint)."""
    for waiting in (True, False):
        statements: list[str] = []
        with contextlib.ExitStack() as stack:
            if not waiting:
                stack.enter_context(without_waiting())
            with store._connection() as conn:  # the pooled connection the read will get next
                conn.set_trace_callback(statements.append)
            try:
                assert store.read_login("missing", "jwt") == (None, None)
                assert not conn.in_transaction
            finally:
                conn.set_trace_callback(None)
        assert len(statements) == 1 and statements[0].lstrip().upper().startswith("SELECT"), statements

"""The change log: one row per change to a key or token, in the change's own transaction, read in order."""

from __future__ import annotations

import secrets
import threading
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from app.errors import BadRequestError, DeletionNotAllowedError, KeyExistsError, KeyNotFoundError
from app.keystore import TokenRecord
from app.keystore.postgres import Change, PostgresKeyStore

Raw = psycopg.Connection[tuple[object, ...]]


def token(token_id: str) -> TokenRecord:
    return TokenRecord(token_id, secrets.token_bytes(32), ("admin",), ("*",), "", datetime.now(UTC))


def kinds(changes: list[Change]) -> list[tuple[str, str | None, str | None]]:
    return [(change.kind, change.key_name, change.token_id) for change in changes]


def test_every_change_appends_one_row_and_reads_append_none(pg_store: PostgresKeyStore) -> None:
    before = datetime.now(UTC)
    pg_store.create_key("orders")
    pg_store.import_key("imp", bytes(16), deletion_allowed=True)
    pg_store.rotate_key("orders")
    pg_store.update_key("orders", min_decryption_version=2)
    pg_store.delete_key("imp")
    pg_store.create_token(token("tok1"))
    pg_store.delete_token("tok1")
    # reads, a no-op update and failed changes leave no trace
    pg_store.get_key("orders")
    pg_store.list_keys()
    pg_store.key_material("orders", 1)
    pg_store.update_key("orders")
    for failing in (
        lambda: pg_store.create_key("orders"),
        lambda: pg_store.rotate_key("nothing"),
        lambda: pg_store.delete_key("orders"),
        lambda: pg_store.update_key("orders", min_decryption_version=9),
        lambda: pg_store.create_token(token("bad id")),
    ):
        with pytest.raises((KeyExistsError, KeyNotFoundError, DeletionNotAllowedError, BadRequestError)):
            failing()
    changes, latest, trimmed = pg_store.changes_since(0)
    assert kinds(changes) == [
        ("key_created", "orders", None),
        ("key_imported", "imp", None),
        ("key_rotated", "orders", None),
        ("key_updated", "orders", None),
        ("key_deleted", "imp", None),
        ("token_created", None, "tok1"),
        ("token_deleted", None, "tok1"),
    ]
    assert [change.seq for change in changes] == list(range(1, 8)) and latest == 7 and trimmed is False
    assert all(before - timedelta(seconds=1) <= change.at <= datetime.now(UTC) for change in changes)
    assert all(change.at.utcoffset() == timedelta(0) for change in changes)
    assert pg_store.changes_since(7) == ([], 7, False)


def test_changes_since_pages_in_order(pg_store: PostgresKeyStore) -> None:
    pg_store.create_key("orders")
    for _ in range(5):
        pg_store.rotate_key("orders")
    changes, latest, trimmed = pg_store.changes_since(2, limit=2)
    assert [change.seq for change in changes] == [3, 4] and latest == 4 and not trimmed
    changes, latest, trimmed = pg_store.changes_since(latest, limit=10)
    assert [change.seq for change in changes] == [5, 6] and latest == 6 and not trimmed


def test_trimming_tells_a_replica_that_fell_behind(pg_store: PostgresKeyStore) -> None:
    pg_store.create_key("orders")
    for _ in range(5):
        pg_store.rotate_key("orders")
    assert pg_store.trim_changes(keep=2) == 4  # rows 1-4 go, 5 and 6 stay
    assert pg_store.trim_changes(keep=2) == 0
    assert pg_store.changes_since(3) == ([], 6, True)  # 4 is gone: drop every cache, go on from 6
    changes, latest, trimmed = pg_store.changes_since(4)  # nothing missing after 4
    assert [change.seq for change in changes] == [5, 6] and latest == 6 and not trimmed
    assert pg_store.trim_changes(keep=0) == 2
    assert pg_store.changes_since(6) == ([], 6, False)  # up to date, though the log is empty
    assert pg_store.changes_since(5) == ([], 6, True)
    pg_store.rotate_key("orders")
    assert [change.seq for change in pg_store.changes_since(6).changes] == [7]


def test_a_position_beyond_the_log_counts_as_trimmed(pg_store: PostgresKeyStore) -> None:
    """A replica ahead of the database (restored from a backup, or another database) must drop its caches."""
    pg_store.create_key("orders")
    assert pg_store.changes_since(50) == ([], 1, True)


@pytest.mark.parametrize(("seq", "limit"), [(-1, 10), (0, 0), (True, 10), ("1", 10), (0, 1.5)])
def test_changes_since_validation(pg_store: PostgresKeyStore, seq: object, limit: object) -> None:
    with pytest.raises(BadRequestError):
        pg_store.changes_since(seq, limit)  # type: ignore[arg-type]


def test_trim_validation(pg_store: PostgresKeyStore) -> None:
    for keep in (-1, "1", None):
        with pytest.raises(BadRequestError):
            pg_store.trim_changes(keep)  # type: ignore[arg-type]


def test_a_poller_never_misses_a_change_made_by_concurrent_writers(pg_url: str, master_key: bytes) -> None:
    """Numbers are taken in commit order, so a reader that has seen n has seen everything below n."""
    writers = [PostgresKeyStore(pg_url, master_key, pool_size=4) for _ in range(2)]
    reader = PostgresKeyStore(pg_url, master_key, pool_size=1)
    stop = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []

    def write(index: int) -> None:
        try:
            store = writers[index % 2]
            name = f"key{index}"
            store.create_key(name, deletion_allowed=True)
            for _ in range(12):
                store.rotate_key(name)
            store.update_key(name, min_decryption_version=2)
        except BaseException as exc:
            errors.append(exc)

    def poll() -> None:
        position = 0
        try:
            while not stop.is_set():
                changes, position, trimmed = reader.changes_since(position)
                assert not trimmed
                seen.extend(change.seq for change in changes)
        except BaseException as exc:
            errors.append(exc)

    poller = threading.Thread(target=poll)
    poller.start()
    threads = [threading.Thread(target=write, args=(i,)) for i in range(6)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
    finally:
        stop.set()
        poller.join(timeout=30)
    try:
        assert errors == []
        everything, latest, _ = reader.changes_since(0)
        total = 6 * (1 + 12 + 1)
        assert [change.seq for change in everything] == list(range(1, total + 1)) and latest == total
        tail = reader.changes_since(seen[-1] if seen else 0).changes
        assert seen + [change.seq for change in tail] == list(range(1, total + 1))  # no gap, no repeat
    finally:
        for store in (*writers, reader):
            store.close()

"""Writers queue on PostgreSQL's row locks: shown step by step with a transaction of the test's own that holds
the lock, so the outcome does not depend on thread timing."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import psycopg
import pytest

from app.errors import KeyExistsError
from app.keystore.postgres import PostgresKeyStore

Raw = psycopg.Connection[tuple[object, ...]]


class Background:
    """Run a call in a thread; remember its result or exception."""

    def __init__(self, call: Callable[[], object]) -> None:
        self.result: object = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(call,))
        self._thread.start()

    def _run(self, call: Callable[[], object]) -> None:
        try:
            self.result = call()
        except BaseException as exc:
            self.error = exc

    def is_waiting(self, seconds: float = 0.4) -> bool:
        self._thread.join(timeout=seconds)
        return self._thread.is_alive()

    def finish(self) -> object:
        self._thread.join(timeout=30)
        assert not self._thread.is_alive()
        if self.error is not None:
            raise self.error
        return self.result


def test_a_policy_update_waits_for_the_row_lock_and_keeps_the_other_change(
    pg_store: PostgresKeyStore, raw: Raw
) -> None:
    pg_store.create_key("orders")
    pg_store.rotate_key("orders")
    with raw.transaction():
        raw.execute("SELECT 1 FROM keys WHERE name = 'orders' FOR UPDATE")
        update = Background(lambda: pg_store.update_key("orders", deletion_allowed=True))
        assert update.is_waiting()  # blocked on the row lock, not reading a stale row
        raw.execute("UPDATE keys SET min_decryption_version = 2 WHERE name = 'orders'")
    info = update.finish()
    final = pg_store.get_key("orders")
    assert info == final
    assert (final.min_decryption_version, final.deletion_allowed) == (2, True)  # neither change lost


def test_a_rotation_waits_for_the_row_lock_and_numbers_after_the_other(
    pg_url: str, master_key: bytes, raw: Raw
) -> None:
    first = PostgresKeyStore(pg_url, master_key)
    second = PostgresKeyStore(pg_url, master_key)
    try:
        first.create_key("orders")
        with raw.transaction():
            raw.execute("SELECT 1 FROM keys WHERE name = 'orders' FOR UPDATE")
            rotations = [
                Background(lambda store=store: store.rotate_key("orders")) for store in (first, second)
            ]
            assert all(rotation.is_waiting() for rotation in rotations)
        versions = sorted(rotation.finish().latest_version for rotation in rotations)  # type: ignore[attr-defined]
        assert versions == [2, 3]
    finally:
        first.close()
        second.close()


def test_a_create_waits_for_an_uncommitted_create_of_the_same_name(
    pg_store: PostgresKeyStore, raw: Raw
) -> None:
    now = time.strftime("%Y-%m-%d %H:%M:%S+00", time.gmtime())
    with raw.transaction():
        raw.execute(
            "INSERT INTO keys VALUES ('orders', 'aes128', 4096, false, 1, 1, false, %s, %s)", (now, now)
        )
        create = Background(lambda: pg_store.create_key("orders"))
        assert create.is_waiting()
        raw.execute("INSERT INTO key_versions VALUES ('orders', 1, '\\x00', %s)", (now,))
    with pytest.raises(KeyExistsError, match="'orders' already exists"):
        create.finish()
    # ...and when the other transaction rolls back, the waiting create goes ahead
    with raw.transaction():
        raw.execute(
            "INSERT INTO keys VALUES ('billing', 'aes128', 4096, false, 1, 1, false, %s, %s)", (now, now)
        )
        create = Background(lambda: pg_store.create_key("billing"))
        assert create.is_waiting()
        raise psycopg.Rollback()
    assert create.finish() == pg_store.get_key("billing")
    assert pg_store.get_key("billing").key_type == "aes256"

"""Database outages: calls fail with 503 keystore_unavailable (never a psycopg exception), and the store
recovers by itself when the database returns. The session's cluster is stopped and started again."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from app.errors import ServiceUnavailableError
from app.keystore import KeystoreUnavailableError
from app.keystore.postgres import PostgresKeyStore
from app.keystore.postgres.breaker import PROBE_INTERVAL_SECONDS
from app.keystore.postgres.connections import RETRY_WAIT_SECONDS
from tests.pg_cluster import PgCluster

RECOVERY_SECONDS = 15


@pytest.fixture
def restarts(pg_cluster: PgCluster) -> Iterator[PgCluster]:
    """The cluster, started again after the test whatever happened."""
    try:
        yield pg_cluster
    finally:
        if not pg_cluster.is_running():
            pg_cluster.start()


def eventually(call: Callable[[], object]) -> float:
    """Retry ``call`` while the keystore is unavailable (up to RECOVERY_SECONDS); return the seconds taken."""
    started = time.monotonic()
    while True:
        try:
            call()
            return time.monotonic() - started
        except KeystoreUnavailableError:
            if time.monotonic() - started > RECOVERY_SECONDS:
                raise
            time.sleep(0.1)


@pytest.mark.serial  # a 0.1 s limit per call: alone
def test_calls_during_an_outage_get_keystore_unavailable_and_the_store_recovers(
    restarts: PgCluster, pg_url: str, master_key: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    store = PostgresKeyStore(pg_url, master_key, wait_timeout=3.0, connect_timeout=2)
    try:
        store.create_key("orders")
        store.key_material("orders", 1)
        restarts.stop()
        caplog.set_level(logging.WARNING)
        calls: list[Callable[[], object]] = [
            lambda: store.get_key("orders"),
            lambda: store.rotate_key("orders"),
            lambda: store.create_key("billing"),
            store.list_tokens,
            lambda: store.changes_since(0),
        ]
        for index, call in enumerate(calls):
            started = time.monotonic()
            with pytest.raises(KeystoreUnavailableError) as caught:
                call()
            # fails fast: the first call waits RETRY_WAIT_SECONDS for a new connection (not the 3 s
            # wait_timeout) and opens the breaker; the next ones fail at once (slack: a loaded machine)
            took = time.monotonic() - started
            assert took < (RETRY_WAIT_SECONDS + 1.0 if index == 0 else 0.1), (index, took)
            assert store._database.breaker.is_open
            error = caught.value
            assert isinstance(error, ServiceUnavailableError)  # 503 (app.api.errors), with Retry-After
            assert (error.code, error.retry_after_seconds) == ("keystore_unavailable", 1)
            assert "retry later" in error.message and pg_url not in error.message
            assert error.__cause__ is None and error.__suppress_context__
        with pytest.raises(KeystoreUnavailableError):  # a replica starting now fails at once, with the reason
            PostgresKeyStore(pg_url, master_key, connect_timeout=2)
        assert pg_url not in caplog.text and "keystore database 'postgres' on 127.0.0.1:" in caplog.text
        restarts.start()
        # the breaker's probe closes it without any call (at most a probe interval plus a connection)
        restarted = time.monotonic()
        while store._database.breaker.is_open:
            assert time.monotonic() - restarted < PROBE_INTERVAL_SECONDS + 5.0, "the breaker stayed open"
            time.sleep(0.02)
        print(f"breaker closed {time.monotonic() - restarted:.2f} s after the restart")
        eventually(lambda: store.get_key("orders"))
        assert store.rotate_key("orders").latest_version == 2  # nothing was written during the outage
        assert [key.name for key in store.list_keys()] == ["orders"]
        assert len(store.key_material("orders", 2)) == 32
    finally:
        store.close()


def test_a_restart_between_calls_costs_no_failed_call(
    restarts: PgCluster, pg_url: str, master_key: bytes
) -> None:
    """Idle connections die with the server; the next call notices and retries once on a new connection."""
    store = PostgresKeyStore(pg_url, master_key, pool_size=4)
    try:
        store.create_key("orders")
        assert store.get_key("orders").latest_version == 1
        restarts.stop()
        restarts.start()
        assert store.get_key("orders").latest_version == 1  # a read: retried
        restarts.stop()
        restarts.start()
        assert store.rotate_key("orders").latest_version == 2  # a write whose BEGIN failed: retried
        assert store.rotate_key("orders").latest_version == 3
    finally:
        store.close()


def test_a_pool_busy_with_slow_work_does_not_open_the_breaker(pg_url: str, master_key: bytes) -> None:
    """A wait for a connection that runs out because every connection is busy is load, not an outage: that
    call gets its 503, and the next calls still go to the database once a connection is free."""
    store = PostgresKeyStore(pg_url, master_key, pool_size=1, wait_timeout=0.3)
    try:
        store.create_key("orders")
        holding = threading.Thread(
            target=lambda: store._database.read(lambda c: c.execute("SELECT pg_sleep(1.5)"))
        )
        holding.start()
        time.sleep(0.3)  # the one connection is taken
        with pytest.raises(KeystoreUnavailableError, match="no database connection available"):
            store.get_key("orders")
        assert not store._database.breaker.is_open
        holding.join()
        assert store.get_key("orders").latest_version == 1
    finally:
        store.close()

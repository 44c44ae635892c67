"""The keystore contract suite runs every test once per implementation: ``store`` is a SQLite keystore in a
fresh data directory, then a PostgreSQL keystore in a fresh schema of the session's throwaway cluster.

``backing`` opens more stores on the same data (a reopen, a second replica, another master key); every store
it opened is closed after the test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from app.keystore import KeyStore, open_keystore
from app.keystore.postgres import PostgresKeyStore

#: The implementations the contract runs against.
STORES = ("sqlite", "postgres")


@dataclass
class Backing:
    """Where one test's keystore lives, and a way to open more stores on it."""

    kind: str
    opener: Callable[[bytes, float, int], KeyStore]
    opened: list[KeyStore] = field(default_factory=list)

    def open(
        self, master_key: bytes, tombstone_seconds: float = 0.0, auto_rotate_min_period: int = 3600
    ) -> KeyStore:
        """Another store on the same data (another worker or replica); closed after the test."""
        store = self.opener(master_key, tombstone_seconds, auto_rotate_min_period)
        self.opened.append(store)
        return store

    def close_all(self) -> None:
        for store in self.opened:
            store.close()


@pytest.fixture(params=STORES)
def backing(request: pytest.FixtureRequest, data_dir: Path) -> Iterator[Backing]:
    if request.param == "sqlite":
        backing = Backing(
            "sqlite",
            lambda key, held, least: open_keystore(
                data_dir, key, tombstone_seconds=held, auto_rotate_min_period=least
            ),
        )
    else:
        url: str = request.getfixturevalue("pg_url")  # the cluster starts only if a postgres test runs
        backing = Backing(
            "postgres",
            lambda key, held, least: PostgresKeyStore(
                url, key, tombstone_seconds=held, auto_rotate_min_period=least
            ),
        )
    try:
        yield backing
    finally:
        backing.close_all()


@pytest.fixture
def store(backing: Backing, master_key: bytes) -> KeyStore:
    return backing.open(master_key)

"""Fixtures for the PostgreSQL-only keystore tests: a store in a fresh schema and a raw connection to it."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from app.keystore.postgres import PostgresKeyStore


@pytest.fixture
def pg_store(pg_url: str, master_key: bytes) -> Iterator[PostgresKeyStore]:
    store = PostgresKeyStore(pg_url, master_key)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def raw(pg_url: str) -> Iterator[psycopg.Connection[tuple[object, ...]]]:
    """A connection of the test's own (autocommit) in the store's schema, to look at the rows themselves."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        yield conn

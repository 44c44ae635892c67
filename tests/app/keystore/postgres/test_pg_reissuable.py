"""Reissuable writes on PostgreSQL: a token a login issued commits with ``synchronous_commit = off`` for its
own transaction; an admin's token, and the next transaction on the same connection, keep the server's
setting. Checked inside each insert's transaction, as the server reports it. The test cluster runs with
``synchronous_commit=off`` (its data is throwaway), so the test's store connects as a role set back to
``on``, as a production server is."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from app.keystore.postgres import PostgresKeyStore, tokens
from app.services.security import new_token


@pytest.fixture
def synchronous_role(raw: psycopg.Connection[tuple[object, ...]]) -> Iterator[None]:
    """The cluster's role commits synchronously for connections made while the test runs."""
    raw.execute("ALTER ROLE CURRENT_USER SET synchronous_commit = on")
    try:
        yield
    finally:
        raw.execute("ALTER ROLE CURRENT_USER RESET synchronous_commit")


def test_only_reissuable_tokens_commit_asynchronously(
    synchronous_role: None, pg_url: str, master_key: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    original: Callable[..., Any] = tokens.insert_token

    def recording(conn: Any, record: Any) -> Any:
        seen.append(str(conn.execute("SHOW synchronous_commit").fetchone()[0]))
        return original(conn, record)

    monkeypatch.setattr(tokens, "insert_token", recording)
    store = PostgresKeyStore(pg_url, master_key)
    try:
        for _ in range(3):  # pooled connections: SET LOCAL must not outlive its transaction
            store.create_token(
                new_token(("encrypt",), ("*",), "jwt login", ttl_seconds=60)[1], reissuable=True
            )
            store.create_token(new_token(("encrypt",), ("*",), "admin")[1])
        assert len(store.list_tokens()) == 6
    finally:
        store.close()
    assert seen == ["off", "on"] * 3

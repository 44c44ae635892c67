"""Reissuable writes on SQLite: a token a login issued commits with ``synchronous=NORMAL`` in WAL mode, on
connections of their own; every other write (keys, versions, admin tokens, revocations) keeps
``synchronous=FULL``, and outside WAL mode the login's token does too. Checked on the connection that runs
each insert, as SQLite reports it (``PRAGMA synchronous``: 1 NORMAL, 2 FULL)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from app.keystore import SqliteKeyStore
from app.keystore.sqlite import keys, tokens
from app.services.security import new_token

NORMAL, FULL = 1, 2


def recording(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    """Replace ``module.name`` (called inside a write transaction with its connection first) by a wrapper
    that notes the connection's ``synchronous`` level; return the notes."""
    seen: list[int] = []
    original: Callable[..., Any] = getattr(module, name)

    def wrapper(conn: sqlite3.Connection, *args: Any, **kwargs: Any) -> Any:
        seen.append(conn.execute("PRAGMA synchronous").fetchone()[0])
        return original(conn, *args, **kwargs)

    monkeypatch.setattr(module, name, wrapper)
    return seen


def test_only_reissuable_tokens_commit_with_normal(
    store: SqliteKeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert store.wal
    token_levels = recording(monkeypatch, tokens, "insert_token")
    key_levels = recording(monkeypatch, keys, "insert_exported")
    login_token = new_token(("encrypt",), ("*",), "jwt login", ttl_seconds=60)[1]
    admin_token = new_token(("encrypt",), ("*",), "admin")[1]
    for _ in range(3):  # the pools hand back the same connections: they must keep their level
        store.create_token(new_token(("encrypt",), ("*",), "jwt login", ttl_seconds=60)[1], reissuable=True)
        store.create_token(new_token(("encrypt",), ("*",), "admin")[1])
    store.create_token(login_token, reissuable=True)
    store.create_token(admin_token)
    store.create_key("orders")
    assert token_levels == [NORMAL, FULL] * 4 and key_levels == [FULL]
    # A reissuable token is an ordinary one once stored: read back, revoked (FULL) like any other.
    assert store.get_token(login_token.token_id).description == "jwt login"
    store.delete_token(login_token.token_id)
    with sqlite3.connect(store.path) as conn:
        remaining = {row[0] for row in conn.execute("SELECT token_id FROM tokens")}
    assert login_token.token_id not in remaining and admin_token.token_id in remaining


def test_without_wal_every_write_is_full(store: SqliteKeyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "wal", False)
    token_levels = recording(monkeypatch, tokens, "insert_token")
    store.create_token(new_token(("encrypt",), ("*",), "jwt login", ttl_seconds=60)[1], reissuable=True)
    assert token_levels == [FULL]

"""What each store does on a thread that may not wait (:mod:`app.core.waiting`): SQLite in WAL mode reads and
stores a reissuable (login) token at once; a durable write is refused before it starts; PostgreSQL refuses
everything, every statement being a round trip. A refusal changes nothing, so the caller can run the same work
again where it may wait."""

from __future__ import annotations

import pytest

from app.core.waiting import WouldWait, without_waiting
from app.errors import KeyNotFoundError
from app.keystore import KeyStore
from app.services.security import new_token
from tests.app.keystore.contract.conftest import Backing


def test_reads_and_login_tokens_run_without_waiting_on_sqlite_only(store: KeyStore, backing: Backing) -> None:
    store.create_key("orders")
    login_token = new_token(("encrypt",), ("*",), "jwt login", ttl_seconds=60)[1]
    with without_waiting():
        if backing.kind == "sqlite":
            assert store.get_key("orders").name == "orders"
            assert store.read_login("missing", "jwt") == (None, None)
            store.create_token(login_token, reissuable=True)
        else:
            with pytest.raises(WouldWait):
                store.get_key("orders")
            with pytest.raises(WouldWait):
                store.read_login("missing", "jwt")
            with pytest.raises(WouldWait):
                store.create_token(login_token, reissuable=True)
    if backing.kind == "postgres":
        store.create_token(login_token, reissuable=True)  # the same work, where waiting is allowed
    assert store.get_token(login_token.token_id).token_id == login_token.token_id


def test_durable_writes_are_refused_before_they_start(store: KeyStore) -> None:
    admin_token = new_token(("encrypt",), ("*",), "admin")[1]
    with without_waiting():
        with pytest.raises(WouldWait):
            store.create_key("orders")
        with pytest.raises(WouldWait):
            store.create_token(admin_token)
    with pytest.raises(KeyNotFoundError):
        store.get_key("orders")
    assert admin_token.token_id not in {token.token_id for token in store.list_tokens()}

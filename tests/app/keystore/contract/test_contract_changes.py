"""Change log, hints and tombstones: the same contract for the SQLite and the PostgreSQL keystore."""

from __future__ import annotations

import secrets
import threading
import time
from datetime import UTC, datetime, timedelta

import pytest

from app.errors import BadRequestError, KeyExistsError, KeyRecentlyDeletedError
from app.keystore import KeyStore, TokenRecord
from app.services.security import new_token
from tests.app.keystore.contract.conftest import Backing


def token(token_id: str) -> TokenRecord:
    return TokenRecord(token_id, secrets.token_bytes(32), ("admin",), ("*",), "", datetime.now(UTC))


def test_every_change_appends_one_row_in_order(store: KeyStore) -> None:
    start = store.changes_since(1 << 62).latest
    store.create_key("orders", deletion_allowed=True)
    store.import_key("imp", bytes(16))
    store.rotate_key("orders")
    store.update_key("orders", min_decryption_version=2)
    store.get_key("orders")  # reads append nothing
    store.delete_key("orders")
    store.create_token(token("abcd1234"))
    store.delete_token("abcd1234")
    changes, latest, trimmed = store.changes_since(start)
    assert not trimmed and latest == changes[-1].seq
    assert [(c.kind, c.key_name, c.token_id) for c in changes] == [
        ("key_created", "orders", None),
        ("key_imported", "imp", None),
        ("key_rotated", "orders", None),
        ("key_updated", "orders", None),
        ("key_deleted", "orders", None),
        ("token_created", None, "abcd1234"),
        ("token_deleted", None, "abcd1234"),
    ]
    assert [c.seq for c in changes] == sorted(c.seq for c in changes)
    assert store.changes_since(latest) == ([], latest, False)
    page = store.changes_since(start, limit=2)
    assert len(page.changes) == 2 and page.latest == changes[1].seq


def test_a_failed_change_appends_nothing(store: KeyStore) -> None:
    store.create_key("orders")
    latest = store.changes_since(1 << 62).latest
    with pytest.raises(KeyExistsError):
        store.create_key("orders")
    assert store.changes_since(latest) == ([], latest, False)


def test_trimming_and_positions_beyond_the_log_say_trimmed(store: KeyStore) -> None:
    for index in range(5):
        store.create_key(f"k{index}")
    head = store.changes_since(1 << 62)
    assert head.trimmed and head.changes == []
    assert store.trim_changes(2) >= 3
    behind = store.changes_since(0)
    assert behind.trimmed and behind.latest == head.latest
    recent = store.changes_since(head.latest - 2)
    assert not recent.trimmed and len(recent.changes) == 2
    with pytest.raises(BadRequestError):
        store.changes_since(-1)
    with pytest.raises(BadRequestError):
        store.trim_changes(-1)


def test_another_store_on_the_same_data_sees_the_change_and_gets_a_hint(
    backing: Backing, master_key: bytes
) -> None:
    writer, reader = backing.open(master_key), backing.open(master_key)
    start = reader.changes_since(1 << 62).latest
    hinted = threading.Event()
    stop = reader.listen_for_changes(lambda change: hinted.set())
    try:
        time.sleep(0.3)  # the listener is connected (PostgreSQL) or has its first data_version (SQLite)
        hinted.clear()
        writer.create_key("orders")
        assert hinted.wait(5), "no hint after a change committed by another store"
    finally:
        stop()
    changes, _, _ = reader.changes_since(start)
    assert [(c.kind, c.key_name) for c in changes] == [("key_created", "orders")]


def test_a_deleted_name_is_held_by_a_tombstone_for_every_store(backing: Backing, master_key: bytes) -> None:
    first, other = backing.open(master_key, 0.6), backing.open(master_key, 0.6)
    first.create_key("orders", deletion_allowed=True)
    first.delete_key("orders")
    for attempt in (lambda: other.create_key("orders"), lambda: other.import_key("orders", bytes(32))):
        with pytest.raises(
            KeyRecentlyDeletedError, match=r"can be re-created from .*Z \(in 0\.[0-9]+ s\)"
        ) as err:
            attempt()
        assert err.value.retry_after_seconds == 1
    other.create_key("unrelated")  # other names are free
    time.sleep(0.7)
    assert other.create_key("orders").latest_version == 1
    assert other.changes_since(0).changes[-1].kind == "key_created"


def test_a_reissuable_token_appends_no_change_but_its_renewal_and_deletion_do(store: KeyStore) -> None:
    """A login's token (reissuable, its id drawn a moment ago) wakes no follower; an admin's still does."""
    start = store.changes_since(1 << 62).latest
    login = new_token(("encrypt",), ("*",), "jwt login", ttl_seconds=60, max_ttl_seconds=600)[1]
    store.create_token(login, reissuable=True)
    assert store.changes_since(start).changes == []
    assert store.get_token(login.token_id).token_id == login.token_id
    store.renew_token(login.token_id, login.created_at + timedelta(seconds=120))
    store.delete_token(login.token_id)
    store.create_token(token("admin123"))
    changes = store.changes_since(start).changes
    assert [(c.kind, c.token_id) for c in changes] == [
        ("token_renewed", login.token_id),
        ("token_deleted", login.token_id),
        ("token_created", "admin123"),
    ]

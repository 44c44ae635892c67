"""The keystore contract for API tokens: stored as given (a hash, never a secret), listed oldest first.

Runs against each implementation (see ``conftest.py``). Built from the implementation-neutral tests of
``tests/app/keystore/sqlite/test_store.py``.
"""

from __future__ import annotations

import secrets
from datetime import UTC, datetime, timedelta, timezone

import pytest

from app.errors import BadRequestError, ConflictError, TokenNotFoundError
from app.keystore import KeyStore, TokenRecord
from tests.app.keystore.contract.conftest import Backing


def token(token_id: str = "tok1", **changes: object) -> TokenRecord:  # noqa: S107 - an id, not a secret
    fields: dict[str, object] = {
        "token_id": token_id,
        "secret_hash": secrets.token_bytes(32),
        "scopes": ("encrypt", "decrypt"),
        "key_patterns": ("orders*", "billing"),
        "description": "ci pipeline",
        "created_at": datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC),
    }
    fields.update(changes)
    return TokenRecord(**fields)  # type: ignore[arg-type]


def test_token_round_trip(store: KeyStore) -> None:
    assert store.count_tokens() == 0
    record = token()
    store.create_token(record)
    assert store.get_token("tok1") == record
    assert store.count_tokens() == 1
    assert "secret_hash" not in repr(record) and record.secret_hash.hex() not in repr(record)


def test_empty_scopes_and_patterns_round_trip(store: KeyStore) -> None:
    record = token(scopes=(), key_patterns=[], description="")
    store.create_token(record)
    stored = store.get_token("tok1")
    assert (stored.scopes, stored.key_patterns, stored.description) == ((), (), "")


def test_token_conflict_and_not_found(store: KeyStore) -> None:
    first = token()
    store.create_token(first)
    with pytest.raises(ConflictError, match="'tok1' already exists") as conflict:
        store.create_token(token())
    assert conflict.value.code == "conflict"
    assert store.get_token("tok1") == first  # the second hash did not overwrite the first
    with pytest.raises(TokenNotFoundError) as caught:
        store.get_token("other")
    assert caught.value.code == "token_not_found"
    with pytest.raises(TokenNotFoundError):
        store.delete_token("other")
    with pytest.raises(BadRequestError, match="invalid token id"):
        store.get_token("bad id")


def test_list_and_delete_tokens(store: KeyStore) -> None:
    base = datetime(2026, 1, 1, tzinfo=UTC)
    records = [token(f"t{i}", created_at=base + timedelta(minutes=m)) for i, m in enumerate((5, 1, 3))]
    for record in records:
        store.create_token(record)
    assert [r.token_id for r in store.list_tokens()] == ["t1", "t2", "t0"]
    store.delete_token("t2")
    assert [r.token_id for r in store.list_tokens()] == ["t1", "t0"]
    assert store.count_tokens() == 2
    with pytest.raises(TokenNotFoundError):
        store.get_token("t2")


def test_token_times_are_utc(store: KeyStore) -> None:
    store.create_token(token("naive", created_at=datetime(2026, 5, 6, 7, 8, 9)))
    assert store.get_token("naive").created_at == datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC)
    plus_two = timezone(timedelta(hours=2))
    store.create_token(token("offset", created_at=datetime(2026, 5, 6, 9, 8, 9, tzinfo=plus_two)))
    stored = store.get_token("offset").created_at
    assert stored == datetime(2026, 5, 6, 7, 8, 9, tzinfo=UTC) and stored.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"token_id": "bad id"}, "invalid token id"),
        ({"secret_hash": b""}, "secret_hash"),
        ({"secret_hash": "abc"}, "secret_hash"),
        ({"scopes": "admin"}, "scopes must be a tuple"),
        ({"scopes": ("admin", 1)}, "scopes must contain only strings"),
        ({"key_patterns": None}, "key_patterns must be a tuple"),
        ({"description": 5}, "description must be a string"),
        ({"created_at": "2026-01-01"}, "created_at must be a datetime"),
    ],
)
def test_token_validation(store: KeyStore, changes: dict[str, object], match: str) -> None:
    with pytest.raises(BadRequestError, match=match):
        store.create_token(token(**changes))
    assert store.count_tokens() == 0


def test_tokens_persist_and_are_shared(backing: Backing, master_key: bytes) -> None:
    first, second = backing.open(master_key), backing.open(master_key)
    record = token()
    first.create_token(record)
    assert second.get_token("tok1") == record
    second.delete_token("tok1")
    assert first.list_tokens() == [] and first.count_tokens() == 0


CREATED = datetime(2026, 3, 4, 5, 6, 7, 123456, tzinfo=UTC)


def lifetime(ttl: int = 60, max_ttl: int = 300) -> dict[str, object]:
    return {
        "ttl_seconds": ttl,
        "expires_at": CREATED + timedelta(seconds=ttl),
        "max_expires_at": CREATED + timedelta(seconds=max_ttl),
    }


def test_token_lifetime_round_trips(store: KeyStore) -> None:
    record = token("ttl1", **lifetime())
    store.create_token(record)
    assert store.get_token("ttl1") == record
    assert store.list_tokens() == [record]
    assert store.get_token("ttl1").expires_at == CREATED + timedelta(seconds=60)
    store.create_token(token("forever"))
    forever = store.get_token("forever")
    assert (forever.ttl_seconds, forever.expires_at, forever.max_expires_at) == (None, None, None)


def test_renew_token_moves_expiry_and_logs_a_change(store: KeyStore) -> None:
    store.create_token(token("ttl1", **lifetime()))
    before = store.changes_since(0).latest
    later = CREATED + timedelta(seconds=200)
    renewed = store.renew_token("ttl1", later)
    assert renewed.expires_at == later and store.get_token("ttl1") == renewed
    assert renewed.max_expires_at == CREATED + timedelta(seconds=300) and renewed.ttl_seconds == 60
    changes = store.changes_since(before).changes
    assert [(c.kind, c.token_id) for c in changes] == [("token_renewed", "ttl1")]
    # Up to max_expires_at exactly, not beyond it.
    assert store.renew_token("ttl1", CREATED + timedelta(seconds=300)).expires_at == CREATED + timedelta(
        seconds=300
    )
    with pytest.raises(BadRequestError, match="max_expires_at"):
        store.renew_token("ttl1", CREATED + timedelta(seconds=301))
    assert store.get_token("ttl1").expires_at == CREATED + timedelta(seconds=300)


def test_renew_token_refusals(store: KeyStore) -> None:
    store.create_token(token("forever"))
    with pytest.raises(BadRequestError, match="no ttl"):
        store.renew_token("forever", CREATED)
    with pytest.raises(TokenNotFoundError):
        store.renew_token("missing", CREATED)
    store.create_token(token("ttl1", **lifetime()))
    with pytest.raises(BadRequestError, match="expires_at must be a datetime"):
        store.renew_token("ttl1", "tomorrow")  # type: ignore[arg-type]
    assert [c.kind for c in store.changes_since(0).changes] == ["token_created", "token_created"]


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"ttl_seconds": 60}, "together"),
        ({"ttl_seconds": 60, "expires_at": CREATED}, "together"),
        ({**lifetime(), "ttl_seconds": 0}, "ttl_seconds must be 1"),
        ({**lifetime(), "ttl_seconds": True}, "ttl_seconds must be an integer"),
        ({**lifetime(), "expires_at": "soon"}, "expires_at must be a datetime"),
        ({**lifetime(ttl=60, max_ttl=30)}, "expires_at may not be after max_expires_at"),
    ],
)
def test_token_lifetime_validation(store: KeyStore, changes: dict[str, object], match: str) -> None:
    with pytest.raises(BadRequestError, match=match):
        store.create_token(token(**changes))
    assert store.count_tokens() == 0


def test_renewal_is_seen_by_another_replica(backing: Backing, master_key: bytes) -> None:
    first, second = backing.open(master_key), backing.open(master_key)
    first.create_token(token("ttl1", **lifetime()))
    seen = second.changes_since(0).latest
    first.renew_token("ttl1", CREATED + timedelta(seconds=120))
    assert second.get_token("ttl1").expires_at == CREATED + timedelta(seconds=120)
    assert [(c.kind, c.token_id) for c in second.changes_since(seen).changes] == [("token_renewed", "ttl1")]

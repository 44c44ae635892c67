"""Tokens: format, hashing, constant-time verification, scopes, patterns, root token installation."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from app.core.token_format import parse_token
from app.errors import (
    BadRequestError,
    ConflictError,
    ForbiddenError,
    TokenExpiredError,
    TokenNotFoundError,
    UnauthorizedError,
)
from app.keystore import KeyStore, TokenRecord, open_keystore
from app.services import security
from app.services.security import (
    SCOPES,
    Principal,
    TokenVerifier,
    hash_secret,
    install_root_token,
    new_token,
    renew_token,
)


@pytest.fixture
def keystore(tmp_path: Path) -> KeyStore:
    store = open_keystore(tmp_path, bytes(32))
    yield store  # type: ignore[misc]
    store.close()


def test_new_token_round_trips_through_parse() -> None:
    token, record = new_token(("encrypt",), ("a*",), "d")
    parsed = parse_token(token)
    assert parsed is not None
    token_id, secret = parsed
    assert token_id == record.token_id
    assert record.secret_hash == hash_secret(secret)
    assert secret not in repr(record)


@pytest.mark.parametrize(
    "bad", ["", "ks_", "ks_abc_short", "xx_abcd_0123456789abcdefgh", "ks_ABCD_0123456789abcdefgh"]
)
def test_parse_rejects_malformed(bad: str) -> None:
    assert parse_token(bad) is None


def test_verifier(keystore: KeyStore) -> None:
    token, record = new_token(("decrypt",), ("x-*",))
    keystore.create_token(record)
    verifier = TokenVerifier(keystore, ttl=60)
    principal = verifier.verify(f"Bearer {token}")
    assert (
        principal.scopes == ("decrypt",) and principal.matches_key("x-1") and not principal.matches_key("y")
    )
    with pytest.raises(UnauthorizedError):
        verifier.verify(f"Bearer {token[:-1]}A" if not token.endswith("A") else f"Bearer {token[:-1]}B")
    with pytest.raises(UnauthorizedError):
        verifier.verify(None)
    with pytest.raises(UnauthorizedError):
        verifier.verify(f"Token {token}")
    keystore.delete_token(record.token_id)
    assert verifier.verify(f"Bearer {token}")  # still cached within the TTL in this process...
    verifier.forget(record.token_id)
    with pytest.raises(UnauthorizedError):  # ...until forgotten (what DELETE /v1/tokens does)
        verifier.verify(f"Bearer {token}")


def test_principal_require() -> None:
    principal = Principal("id", ("encrypt",), ("app-*",))
    principal.require("encrypt", "app-1")
    with pytest.raises(ForbiddenError):
        principal.require("decrypt", "app-1")
    with pytest.raises(ForbiddenError):
        principal.require("encrypt", "other")


@pytest.mark.parametrize(
    ("scopes", "patterns", "scope", "key", "allowed"),
    [
        (("encrypt",), ("*",), "encrypt", "any", True),
        (("encrypt",), ("*",), "decrypt", "any", False),
        (("encrypt", "decrypt"), ("*",), "rewrap", "k", True),  # implied by both
        (("encrypt",), ("*",), "rewrap", "k", False),  # half of what implies it
        (("encrypt",), ("app-*", "x"), "encrypt", "app-1", True),
        (("encrypt",), ("app-*", "x"), "encrypt", "x", True),
        (("encrypt",), ("app-*", "x"), "encrypt", "other", False),
        (("encrypt",), ("app-*",), "encrypt", None, True),  # no key: the scope alone
        (("admin",), (), "admin", None, True),
        (("admin",), (), "admin", "k", False),  # no pattern at all
    ],
)
def test_require_answers_as_has_scope_and_matches_key(
    scopes: tuple[str, ...], patterns: tuple[str, ...], scope: str, key: str | None, allowed: bool
) -> None:
    """require() answers the usual cases itself: its answer must stay has_scope's and matches_key's."""
    principal = Principal("id", scopes, patterns)
    assert allowed is (principal.has_scope(scope) and (key is None or principal.matches_key(key)))
    if allowed:
        principal.require(scope, key)
    else:
        with pytest.raises(ForbiddenError):
            principal.require(scope, key)


@pytest.mark.parametrize("name", ["k", "app-1", "a.b_c", "x" * 128, "with\nnewline", "*", "[x]"])
def test_the_star_pattern_matches_as_fnmatch_does(name: str) -> None:
    """``*`` is answered without fnmatch: the answer must stay fnmatch's (every name)."""
    import fnmatch

    assert Principal("id", ("encrypt",), ("*",)).matches_key(name) is fnmatch.fnmatchcase(name, "*") is True
    assert Principal("id", ("encrypt",), ("app-*", "*")).matches_key(name)


def test_root_token_generated_once(keystore: KeyStore) -> None:
    generated = install_root_token(keystore, None)
    assert generated is not None and parse_token(generated) is not None
    assert install_root_token(keystore, None) is None
    assert keystore.count_tokens() == 1
    record = keystore.list_tokens()[0]
    assert set(record.scopes) == set(SCOPES) and record.key_patterns == ("*",)


def test_explicit_root_token_is_installed_and_replaced(keystore: KeyStore) -> None:
    first = "ks_abcd1234_first-secret-0123456789"
    assert install_root_token(keystore, first) is None
    verifier = TokenVerifier(keystore, ttl=0)
    assert verifier.verify(f"Bearer {first}").has_scope("admin")
    second = "ks_abcd1234_second-secret-0123456789"
    install_root_token(keystore, second)
    with pytest.raises(UnauthorizedError):
        verifier.verify(f"Bearer {first}")
    assert verifier.verify(f"Bearer {second}").has_scope("admin")
    assert keystore.count_tokens() == 1
    with pytest.raises(ValueError, match="ks_"):
        install_root_token(keystore, "nope")


def test_a_replica_starting_at_the_same_time_installs_the_same_root_token(
    keystore: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two replicas on one database both read "no such token", then both insert it: the second finds the
    first's (identical) record and starts; another secret under that id is still refused."""
    token = "ks_abcd1234_same-secret-0123456789"
    real_get = keystore.get_token
    calls = {"n": 0}

    def first_read_misses(token_id: str) -> TokenRecord:
        calls["n"] += 1
        if calls["n"] == 1:
            install_root_token(keystore, token)  # the other replica wins the race here
            raise TokenNotFoundError(token_id)
        return real_get(token_id)

    monkeypatch.setattr(keystore, "get_token", first_read_misses)
    assert install_root_token(keystore, token) is None
    assert keystore.count_tokens() == 1
    calls["n"] = 0

    def other_secret_raced(token_id: str) -> TokenRecord:
        calls["n"] += 1
        if calls["n"] == 1:
            raise TokenNotFoundError(token_id)
        return real_get(token_id)

    monkeypatch.setattr(keystore, "get_token", other_secret_raced)
    with pytest.raises(ConflictError):
        install_root_token(keystore, "ks_abcd1234_another-secret-0123456789")


def test_root_token_never_expires(keystore: KeyStore) -> None:
    root = "ks_abcd1234_first-secret-0123456789"
    install_root_token(keystore, root)
    stored = keystore.get_token("abcd1234")
    assert (stored.ttl_seconds, stored.expires_at, stored.max_expires_at) == (None, None, None)
    # A stored token of the root's id that has a lifetime is replaced by one without.
    keystore.delete_token("abcd1234")
    now = datetime.now(UTC)
    keystore.create_token(dataclasses.replace(stored, ttl_seconds=1, expires_at=now, max_expires_at=now))
    install_root_token(keystore, root)
    assert keystore.get_token("abcd1234").expires_at is None


def test_new_token_lifetime(monkeypatch: pytest.MonkeyPatch) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    monkeypatch.setattr(security, "token_clock", lambda: now)
    _, record = new_token(("encrypt",), ("*",), ttl_seconds=60, max_ttl_seconds=90)
    assert record.created_at == now and record.ttl_seconds == 60
    assert record.expires_at == now + timedelta(seconds=60) and record.max_expires_at == now + timedelta(
        seconds=90
    )
    _, default = new_token(("encrypt",), ("*",), ttl_seconds=60)
    assert default.max_expires_at == default.expires_at
    _, forever = new_token(("encrypt",), ("*",))
    assert (forever.ttl_seconds, forever.expires_at, forever.max_expires_at) == (None, None, None)
    with pytest.raises(BadRequestError, match="needs a ttl"):
        new_token(("encrypt",), ("*",), max_ttl_seconds=60)
    with pytest.raises(BadRequestError, match="below ttl"):
        new_token(("encrypt",), ("*",), ttl_seconds=60, max_ttl_seconds=59)


def test_verifier_refuses_an_expired_cached_token(
    keystore: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    monkeypatch.setattr(security, "token_clock", lambda: now[0])
    token, record = new_token(("encrypt",), ("*",), ttl_seconds=10, max_ttl_seconds=30)
    keystore.create_token(record)
    verifier = TokenVerifier(keystore, ttl=3600)
    verifier.verify(f"Bearer {token}")  # cached from here on
    now[0] += timedelta(seconds=10)
    with pytest.raises(TokenExpiredError, match="token expired") as caught:
        verifier.verify(f"Bearer {token}")
    assert caught.value.code == "token_expired" and isinstance(caught.value, UnauthorizedError)


def test_renew_token_caps_at_max(keystore: KeyStore, monkeypatch: pytest.MonkeyPatch) -> None:
    now = [datetime(2026, 1, 1, tzinfo=UTC)]
    monkeypatch.setattr(security, "token_clock", lambda: now[0])
    start = now[0]
    _, record = new_token(("encrypt",), ("*",), ttl_seconds=10, max_ttl_seconds=30)
    keystore.create_token(record)
    now[0] += timedelta(seconds=5)
    renewed, capped = renew_token(keystore, record.token_id)
    assert renewed.expires_at == start + timedelta(seconds=15) and not capped
    renewed, capped = renew_token(keystore, record.token_id, 100)
    assert renewed.expires_at == start + timedelta(seconds=30) and capped
    _, forever = new_token(("encrypt",), ("*",))
    keystore.create_token(forever)
    with pytest.raises(BadRequestError, match="nothing to renew"):
        renew_token(keystore, forever.token_id)

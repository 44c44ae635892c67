"""Tokens: format, hashing, constant-time verification, scopes, patterns, root token installation."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.core.token_format import parse_token
from app.errors import ForbiddenError, UnauthorizedError
from app.keystore import KeyStore, open_keystore
from app.services.security import (
    SCOPES,
    Principal,
    TokenVerifier,
    hash_secret,
    install_root_token,
    new_token,
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

"""Database URLs: checked without echo, described without secrets, passwords redacted from libpq's text."""

from __future__ import annotations

import sys

import pytest

from app.keystore import KeystoreUnavailableError
from app.keystore.postgres import PostgresKeyStore, check_database_url, describe_database_url
from app.keystore.postgres._url import redact


@pytest.mark.parametrize(
    ("url", "described"),
    [
        ("postgresql://ks:pw@db.internal:5432/keystream", "database 'keystream' on db.internal:5432"),
        ("postgres://ks@db/keys?sslmode=require", "database 'keys' on db"),
        ("postgresql://ks:p%40ss@h1:5432,h2:5433/k", "database 'k' on h1:5432,h2:5433"),
        ("postgresql:///keys?host=/run/postgresql", "database 'keys' on /run/postgresql"),
        ("postgresql://", "database '(default)' on the default host"),
    ],
)
def test_describe_names_database_and_hosts_only(url: str, described: str) -> None:
    assert check_database_url(url) == url
    assert describe_database_url(url) == described


@pytest.mark.parametrize("url", ["mysql://u:pw@h/db", "db.internal:5432", "", "postgresql:/x"])
def test_other_urls_are_refused_without_echo(url: str) -> None:
    with pytest.raises(ValueError, match="must start with postgresql://") as caught:
        check_database_url(url)
    assert url not in str(caught.value) or not url
    with pytest.raises(ValueError, match="must be a string"):
        check_database_url(b"postgresql://")


def test_redact_removes_url_and_passwords() -> None:
    url = "postgresql://ks:p%40ss-word@db/k?password=other-secret&sslmode=require"
    text = f"failed for {url}: user ks password p@ss-word p%40ss-word other-secret"
    cleaned = redact(text, url)
    for secret in (url, "p@ss-word", "p%40ss-word", "other-secret"):
        assert secret not in cleaned
    assert "user ks" in cleaned


def test_a_missing_driver_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, master_key: bytes) -> None:
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)  # as if the postgres extra were not installed
    with pytest.raises(KeystoreUnavailableError, match=r"pip install 'keystream\[postgres\]'"):
        PostgresKeyStore("postgresql://ks:pw@127.0.0.1:1/keys", master_key)

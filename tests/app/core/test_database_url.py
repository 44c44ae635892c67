"""Database URLs: checked without echo, described without secrets, passwords redacted from libpq's text."""

from __future__ import annotations

import pytest

from app.core.database_url import redact
from app.keystore.postgres import check_database_url, describe_database_url


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

"""Database URLs (``KEYSTREAM_DATABASE_URL``): checked without echoing them, described without their secrets.

A URL may carry a password (``postgresql://user:secret@host/db`` or ``?password=secret``), so it never goes
into an error, a log line or a ``repr``: those use :func:`describe_database_url` (database, host and port),
and text from libpq passes through :func:`redact` first. Nothing here imports psycopg.
"""

from __future__ import annotations

from urllib.parse import parse_qs, unquote

__all__ = ["DATABASE_URL_SCHEMES", "check_database_url", "describe_database_url", "redact"]

#: The URL schemes libpq accepts.
DATABASE_URL_SCHEMES = ("postgresql", "postgres")


def check_database_url(url: object) -> str:
    """Return ``url`` if it looks like a PostgreSQL URL (``postgresql://...`` or ``postgres://...``).

    Raises:
        ValueError: not a str, or another scheme. The message never quotes the URL.
    """
    if not isinstance(url, str):
        raise ValueError(f"the database URL must be a string, got {type(url).__name__}")
    scheme, separator, _ = url.strip().partition("://")
    if not separator or scheme.lower() not in DATABASE_URL_SCHEMES:
        raise ValueError(
            "the database URL must start with postgresql:// (e.g. postgresql://user:password@host:5432/db)"
        )
    return url.strip()


def _parts(url: str) -> tuple[str, str, str]:
    """``(hosts, database, query)`` of ``url``, read by hand: urlsplit refuses multi-host netlocs."""
    rest = url.partition("://")[2]
    location, _, query = rest.partition("?")
    netloc, _, path = location.partition("/")
    hosts = netloc.rpartition("@")[2]  # whatever precedes the last '@' is user[:password]
    return hosts, unquote(path), query


def describe_database_url(url: str) -> str:
    """``"database 'db' on host:5432"``: enough to find the database, never the user's password."""
    hosts, database, query = _parts(url)
    options = parse_qs(query)
    hosts = hosts or ",".join(options.get("host", [])) or "the default host"
    database = database or ",".join(options.get("dbname", [])) or "(default)"
    return f"database {database!r} on {hosts}"


def _secrets(url: str) -> list[str]:
    """Every password in ``url``: in the user-info part and in ``password=`` parameters."""
    found: list[str] = []
    userinfo = url.partition("://")[2].partition("?")[0].partition("/")[0].rpartition("@")[0]
    if ":" in userinfo:
        password = userinfo.partition(":")[2]
        found += [password, unquote(password)]
    query = url.partition("?")[2]
    for value in parse_qs(query).get("password", []):
        found.append(value)
    for raw in query.split("&"):
        if raw.startswith("password="):
            found.append(raw.partition("=")[2])
    return [secret for secret in found if secret]


def redact(text: str, url: str) -> str:
    """``text`` with the URL and every password in it replaced by ``***`` (for libpq's messages)."""
    for secret in sorted({url, *_secrets(url)}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return text

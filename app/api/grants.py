"""What the token and login-role routes share: the fields of a grant in a request body (scopes, key
patterns, lifetimes) and a token's public JSON.

A token an admin creates and a token a login issues through a role are the same kind of token, so both
routes take the same field shapes and answer the same token shape.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import Field, StringConstraints

from app.core.token_format import MAX_TOKEN_TTL_SECONDS, MIN_TOKEN_TTL_SECONDS
from app.keystore import TokenRecord

__all__ = ["KeyPattern", "Scope", "TtlSeconds", "token_json"]

Scope = Literal["admin", "encrypt", "decrypt", "rewrap", "hmac", "verify"]
#: A key pattern: a glob over key-name characters (``* ? [ ] !`` and ``A-Z a-z 0-9 _ . -``), 1-128 of them.
KeyPattern = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.*?!\[\]-]{1,128}$")]
#: A token lifetime in seconds.
TtlSeconds = Annotated[int, Field(ge=MIN_TOKEN_TTL_SECONDS, le=MAX_TOKEN_TTL_SECONDS)]


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat().replace("+00:00", "Z")


def token_json(record: TokenRecord) -> dict[str, Any]:
    """A token's public fields (never the secret or its hash); the lifetime fields are null without a ttl;
    ``metadata`` says which role and subject a login issued it to (``{}`` for a token an admin created)."""
    return {
        "id": record.token_id,
        "scopes": list(record.scopes),
        "key_patterns": list(record.key_patterns),
        "description": record.description,
        "created_at": _iso(record.created_at),
        "ttl": record.ttl_seconds,
        "expires_at": _iso(record.expires_at),
        "max_expires_at": _iso(record.max_expires_at),
        "metadata": dict(record.metadata),
    }

"""Bearer tokens: ``ks_<id>_<secret>`` with scopes and key-name glob patterns.

Only ``SHA-256(secret)`` is stored (in the keystore's token table); verification hashes the presented secret
and compares with :func:`hmac.compare_digest`. Scopes: ``admin`` (key management, tokens), ``encrypt``,
``decrypt`` and ``rewrap`` (seal a ciphertext again under the latest version without seeing its plaintext; a
token with both ``encrypt`` and ``decrypt`` has it too, :data:`IMPLIED_SCOPES`). Key patterns are
:func:`fnmatch.fnmatchcase` globs (``*`` = every key). Token records are cached so the hot path of an encrypt
does not touch the keystore; a token revoked through this process is forgotten at once, one revoked through
another worker or replica when the change log says so (:mod:`app.services.coherence`). ``token_cache_ttl`` is
only a last-resort bound, and the cache is not used once the change log has not been read for the trust bound
(:meth:`TokenVerifier.trust_until`).

A token may have a lifetime (``ttl``, at creation): past its ``expires_at`` it is refused with
:class:`~app.errors.TokenExpiredError` on every request, cached record or not, and it may be renewed while
still valid (:func:`renew_token`) up to the ``max_expires_at`` fixed at creation (``max_ttl``). Every
lifetime decision reads the time from :func:`token_clock`. The root token never expires.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import math
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from app.core.token_format import TOKEN_PREFIX, parse_token
from app.errors import (
    BadRequestError,
    ForbiddenError,
    TokenExpiredError,
    TokenNotFoundError,
    UnauthorizedError,
)
from app.keystore import KeyStore, TokenRecord

SCOPES: tuple[str, ...] = ("admin", "encrypt", "decrypt", "rewrap")
#: Scopes a token holds without listing them, and the scopes that together grant them: a token that may
#: decrypt and encrypt can already rewrap in two calls (the plaintext passing through its holder), so
#: ``rewrap`` adds nothing to it. Tokens created before ``rewrap`` existed (the root token among them) keep
#: working for it.
IMPLIED_SCOPES: dict[str, tuple[str, ...]] = {"rewrap": ("encrypt", "decrypt")}
ROOT_TOKEN_DESCRIPTION = "root"  # noqa: S105 (a label, not a secret)
_DUMMY_HASH = hashlib.sha256(b"keystream-no-such-token").digest()


@dataclass(frozen=True)
class Principal:
    """The verified caller: which token, what it may do, on which keys."""

    token_id: str
    scopes: tuple[str, ...]
    key_patterns: tuple[str, ...]

    def has_scope(self, scope: str) -> bool:
        """True when the token carries ``scope``, or every scope that implies it (:data:`IMPLIED_SCOPES`)."""
        if scope in self.scopes:
            return True
        implied_by = IMPLIED_SCOPES.get(scope)
        return implied_by is not None and all(granting in self.scopes for granting in implied_by)

    def matches_key(self, name: str) -> bool:
        """True when ``name`` matches one of the token's key patterns."""
        # "*" (the root token's, and the default) matches every name: fnmatch would translate and look it up.
        return any(pattern == "*" or fnmatch.fnmatchcase(name, pattern) for pattern in self.key_patterns)

    def require(self, scope: str, key_name: str | None = None) -> None:
        """Check the scope and, when given, the key name.

        Raises:
            ForbiddenError: the token lacks ``scope`` or no pattern matches ``key_name`` (the message names
                the scope, never the token).
        """
        if not self.has_scope(scope):
            raise ForbiddenError(f"this token lacks the {scope!r} scope")
        if key_name is not None and not self.matches_key(key_name):
            raise ForbiddenError("this token may not use that key (no key pattern matches)")


def token_clock() -> datetime:
    """The current UTC time: the one clock for creating, renewing and checking token lifetimes."""
    return datetime.now(UTC)


def hash_secret(secret: str) -> bytes:
    """SHA-256 of a token secret (what the keystore stores)."""
    return hashlib.sha256(secret.encode("utf-8")).digest()


def new_token(
    scopes: tuple[str, ...],
    key_patterns: tuple[str, ...],
    description: str = "",
    *,
    ttl_seconds: int | None = None,
    max_ttl_seconds: int | None = None,
) -> tuple[str, TokenRecord]:
    """Generate a token; returns the full token string (show it once) and the record to store.

    With ``ttl_seconds`` the token expires that long after creation and may be renewed until
    ``max_ttl_seconds`` after creation (default: ``ttl_seconds``, i.e. not beyond its first expiry).

    Raises:
        BadRequestError: ``max_ttl_seconds`` without ``ttl_seconds``, or below it.
    """
    created_at = token_clock()
    expires_at = max_expires_at = None
    if ttl_seconds is not None:
        max_ttl = ttl_seconds if max_ttl_seconds is None else max_ttl_seconds
        if max_ttl < ttl_seconds:
            raise BadRequestError(f"max_ttl ({max_ttl}) may not be below ttl ({ttl_seconds})")
        expires_at = created_at + timedelta(seconds=ttl_seconds)
        max_expires_at = created_at + timedelta(seconds=max_ttl)
    elif max_ttl_seconds is not None:
        raise BadRequestError("max_ttl needs a ttl")
    token_id = secrets.token_hex(8)
    secret = secrets.token_urlsafe(32)
    record = TokenRecord(
        token_id=token_id,
        secret_hash=hash_secret(secret),
        scopes=scopes,
        key_patterns=key_patterns,
        description=description,
        created_at=created_at,
        ttl_seconds=ttl_seconds,
        expires_at=expires_at,
        max_expires_at=max_expires_at,
    )
    return f"{TOKEN_PREFIX}{token_id}_{secret}", record


def renew_token(
    keystore: KeyStore, token_id: str, ttl_seconds: int | None = None
) -> tuple[TokenRecord, bool]:
    """Extend the token's expiry to now + ``ttl_seconds`` (default: its ttl at creation), capped at its
    ``max_expires_at``. Call only for a caller that has just verified with this token (so it has not expired).

    Returns:
        The updated record, and whether the expiry was capped by ``max_expires_at``.

    Raises:
        BadRequestError: the token has no ttl (nothing to renew).
        TokenNotFoundError: the token was deleted meanwhile.
    """
    record = keystore.get_token(token_id)
    if record.ttl_seconds is None or record.max_expires_at is None:
        raise BadRequestError("this token has no ttl: there is nothing to renew")
    wanted = token_clock() + timedelta(seconds=record.ttl_seconds if ttl_seconds is None else ttl_seconds)
    capped = wanted > record.max_expires_at
    renewed = keystore.renew_token(token_id, min(wanted, record.max_expires_at))
    return renewed, capped


def install_root_token(keystore: KeyStore, token: str | None) -> str | None:
    """Make sure a root token exists.

    With ``token`` (``KEYSTREAM_ROOT_TOKEN``), installs exactly that token with every scope on every key
    (replacing a stored token of the same id whose secret differs). Without it, generates a root token only
    when the keystore holds no token at all (first start).

    Returns:
        The newly generated token string (print it once), or ``None`` when nothing was generated.

    Raises:
        ValueError: ``token`` is not of the form ``ks_<id>_<secret>``.
    """
    if token is not None:
        parsed = parse_token(token)
        if parsed is None:
            raise ValueError("root token must look like ks_<id>_<secret>")
        token_id, secret = parsed
        wanted = hash_secret(secret)
        try:
            existing = keystore.get_token(token_id)
        except TokenNotFoundError:
            existing = None
        if existing is not None:
            if (
                hmac.compare_digest(existing.secret_hash, wanted)
                and set(existing.scopes) == set(SCOPES)
                and existing.expires_at is None
            ):
                return None
            keystore.delete_token(token_id)
        keystore.create_token(
            TokenRecord(
                token_id=token_id,
                secret_hash=wanted,
                scopes=SCOPES,
                key_patterns=("*",),
                description=ROOT_TOKEN_DESCRIPTION,
                created_at=token_clock(),
            )
        )
        return None
    if keystore.count_tokens() > 0:
        return None
    generated, record = new_token(SCOPES, ("*",), ROOT_TOKEN_DESCRIPTION)
    keystore.create_token(record)
    return generated


class TokenVerifier:
    """Verifies bearer tokens against the keystore with a cache of records kept coherent by the change log."""

    def __init__(self, keystore: KeyStore, ttl: float = 1.0) -> None:
        self._keystore = keystore
        self._ttl = ttl
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, TokenRecord]] = {}
        self._generation = 0  # bumped by forget()/clear(): a read that raced with them caches nothing
        self._trusted_until = math.inf

    def _record(self, token_id: str) -> TokenRecord | None:
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(token_id)
            generation = self._generation
            trusted = now < self._trusted_until
        if cached is not None and trusted and now - cached[0] < self._ttl:
            return cached[1]
        try:
            record = self._keystore.get_token(token_id)
        except TokenNotFoundError:
            with self._lock:
                self._cache.pop(token_id, None)
            return None
        with self._lock:
            if self._generation != generation:
                return record  # revoked or cleared while we read: use it once, cache nothing older
            if len(self._cache) > 4096:
                self._cache.clear()
            self._cache[token_id] = (now, record)
        return record

    def forget(self, token_id: str) -> None:
        """Drop a cached record (call after deleting the token, or when the change log reports it)."""
        with self._lock:
            self._generation += 1
            self._cache.pop(token_id, None)

    def clear(self) -> None:
        """Drop every cached record (the change log was trimmed past what this process applied)."""
        with self._lock:
            self._generation += 1
            self._cache.clear()

    def trust_until(self, deadline: float) -> None:
        """Use cached records until ``deadline`` (``time.monotonic``); later checks read the keystore."""
        with self._lock:
            self._trusted_until = deadline

    def verify(self, authorization: str | None) -> Principal:
        """Check an ``Authorization`` header value.

        Raises:
            UnauthorizedError: no bearer token, a malformed one, an unknown id or a wrong secret (one message
                for all, so the response does not tell which part was wrong).
            TokenExpiredError: the token verified but its ``expires_at`` has passed (checked on every call,
                also when the record comes from the cache; told only to a caller who holds the secret).
        """
        if not authorization:
            raise UnauthorizedError("missing bearer token (Authorization: Bearer ks_...)")
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise UnauthorizedError("missing bearer token (Authorization: Bearer ks_...)")
        parsed = parse_token(value.strip())
        if parsed is None:
            raise UnauthorizedError("invalid token")
        token_id, secret = parsed
        record = self._record(token_id)
        presented = hash_secret(secret)
        stored = record.secret_hash if record is not None else _DUMMY_HASH
        if not hmac.compare_digest(presented, stored) or record is None:
            raise UnauthorizedError("invalid token")
        if record.expires_at is not None and record.expires_at <= token_clock():
            raise TokenExpiredError("token expired")
        return Principal(token_id=record.token_id, scopes=record.scopes, key_patterns=record.key_patterns)

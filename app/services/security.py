"""Bearer tokens: ``ks_<id>_<secret>`` with scopes and key-name glob patterns.

Only ``SHA-256(secret)`` is stored (in the keystore's token table); verification hashes the presented secret
and compares with :func:`hmac.compare_digest`. Scopes: ``admin`` (key management, tokens), ``encrypt``,
``decrypt`` and ``rewrap`` (seal a ciphertext again under the latest version without seeing its plaintext; a
token with both ``encrypt`` and ``decrypt`` has it too, :data:`IMPLIED_SCOPES`). Key patterns are
:func:`fnmatch.fnmatchcase` globs (``*`` = every key). Token records are cached so the hot path of an encrypt
does not touch the keystore; a token revoked through this process is forgotten at once, one revoked through
another worker or replica when the change log says so (:mod:`app.services.coherence`). ``token_cache_ttl`` is
only a last-resort bound, and the cache is not used once the change log has not been read for the trust bound
(:meth:`TokenVerifier.trust_until`). Ids the keystore does not know are cached as unknown for
:data:`UNKNOWN_TOKEN_SECONDS`. On the event loop, :meth:`TokenVerifier.authenticate` reads the keystore only
in a worker thread: a database that is slow or down never stalls the other requests of the worker.

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
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from anyio import CapacityLimiter, to_thread
from anyio.lowlevel import RunVar

from app.core.token_format import BEARER_TOKEN_RE, MIN_TOKEN_TTL_SECONDS, TOKEN_PREFIX, parse_token
from app.errors import (
    BadRequestError,
    ConflictError,
    ForbiddenError,
    TokenExpiredError,
    TokenNotFoundError,
    UnauthorizedError,
)
from app.keystore import KeyStore, TokenRecord

SCOPES: tuple[str, ...] = ("admin", "encrypt", "decrypt", "rewrap", "hmac", "verify")
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
    #: The token's expiry and the latest moment any renewal can reach (``None``: it never expires); the
    #: tokens it creates are capped at them (:func:`new_token`'s ``not_after``).
    expires_at: datetime | None = None
    max_expires_at: datetime | None = None

    def has_scope(self, scope: str) -> bool:
        """True when the token carries ``scope``, or every scope that implies it (:data:`IMPLIED_SCOPES`)."""
        if scope in self.scopes:
            return True
        implied_by = IMPLIED_SCOPES.get(scope)
        return implied_by is not None and all(granting in self.scopes for granting in implied_by)

    def matches_key(self, name: str) -> bool:
        """True when ``name`` matches one of the token's key patterns."""
        # "*" (the root token's, and the default) matches every name: fnmatch would translate and look it up,
        # and asked first it spares the generator (4.7k -> 0.7k instructions).
        patterns = self.key_patterns
        return "*" in patterns or any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)

    def require(self, scope: str, key_name: str | None = None) -> None:
        """Check the scope and, when given, the key name.

        Raises:
            ForbiddenError: the token lacks ``scope`` or no pattern matches ``key_name`` (the message names
                the scope, never the token).
        """
        # The usual cases (the scope listed, the pattern "*") are answered here, without a call each.
        if scope not in self.scopes and not self.has_scope(scope):
            raise ForbiddenError(f"this token lacks the {scope!r} scope")
        if key_name is not None and "*" not in self.key_patterns and not self.matches_key(key_name):
            raise ForbiddenError("this token may not use that key (no key pattern matches)")


def require_grantable(principal: Principal, scopes: tuple[str, ...], key_patterns: tuple[str, ...]) -> None:
    """Check that ``principal`` could hand out ``scopes`` on ``key_patterns``: what it creates (a token, or a
    login role that issues tokens) never holds more than it has.

    Raises:
        ForbiddenError: a scope the caller lacks, or (for a caller limited to some key patterns) a pattern
            that is not one of its own.
    """
    missing = [scope for scope in scopes if not principal.has_scope(scope)]
    if missing:
        raise ForbiddenError(f"cannot grant scopes this token does not have: {', '.join(missing)}")
    if "*" not in principal.key_patterns and any(p not in principal.key_patterns for p in key_patterns):
        raise ForbiddenError("cannot grant key patterns beyond this token's own patterns")


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
    not_after: tuple[datetime, datetime] | None = None,
) -> tuple[str, TokenRecord]:
    """Generate a token; returns the full token string (show it once) and the record to store.

    With ``ttl_seconds`` the token expires that long after creation and may be renewed until
    ``max_ttl_seconds`` after creation (default: ``ttl_seconds``, i.e. not beyond its first expiry).

    ``not_after`` is the creator's ``(expires_at, max_expires_at)`` when the creator has a lifetime: a token
    never outlives the token that created it (as in Vault), so the new token's ``expires_at`` is capped at
    the first and its ``max_expires_at`` at the second. A token asked for without a ttl then gets one: the
    whole seconds left until the capped expiry (at least one), which is also what a renewal grants.
    :func:`lifetime_capped` tells whether the cap cut what was asked for.

    Raises:
        BadRequestError: ``max_ttl_seconds`` without ``ttl_seconds``, or below it; or ``not_after`` has
            passed (the creator has expired).
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
    if not_after is not None:
        limit, max_limit = not_after
        if limit <= created_at:
            raise BadRequestError("the creating token has expired")
        expires_at = limit if expires_at is None else min(expires_at, limit)
        max_expires_at = max_limit if max_expires_at is None else min(max_expires_at, max_limit)
        if ttl_seconds is None:
            ttl_seconds = max(math.ceil((expires_at - created_at).total_seconds()), MIN_TOKEN_TTL_SECONDS)
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


def lifetime_capped(record: TokenRecord, ttl_seconds: int | None, max_ttl_seconds: int | None) -> bool:
    """True when ``record`` (from :func:`new_token`) lives shorter than ``ttl_seconds``/``max_ttl_seconds``
    asked for: its creator's lifetime capped it."""
    if record.expires_at is None or record.max_expires_at is None:
        return False
    if ttl_seconds is None:
        return True
    asked_max = ttl_seconds if max_ttl_seconds is None else max_ttl_seconds
    return record.expires_at < record.created_at + timedelta(seconds=ttl_seconds) or (
        record.max_expires_at < record.created_at + timedelta(seconds=asked_max)
    )


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
        try:
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
        except ConflictError:
            # Replicas starting together on one database: another one installed the same token between
            # the read above and this write. Its record is this one, or the start is refused as before.
            installed = keystore.get_token(token_id)
            if not hmac.compare_digest(installed.secret_hash, wanted) or set(installed.scopes) != set(SCOPES):
                raise
        return None
    if keystore.count_tokens() > 0:
        return None
    generated, record = new_token(SCOPES, ("*",), ROOT_TOKEN_DESCRIPTION)
    keystore.create_token(record)
    return generated


#: Seconds a token id the keystore does not know is remembered as unknown (401 without a keystore read):
#: anonymous clients sending random or revoked ids would otherwise cost a database read each. A token
#: created meanwhile is announced by the change log, which forgets the id at once; this is the bound when
#: that notice is late. Never longer than ``token_cache_ttl``.
UNKNOWN_TOKEN_SECONDS = 5.0
#: Most records (and, apart, most unknown ids) a verifier keeps; past it that cache is emptied, so random
#: ids cannot grow memory and cannot push out the records of real tokens.
MAX_CACHED_TOKENS = 4096
#: Keystore reads of token records that run at once per event loop (each in a worker thread): a flood of
#: unknown ids queues here instead of taking every thread the key lookups need.
TOKEN_READ_THREADS = 4
_token_read_limiter: RunVar[CapacityLimiter] = RunVar("keystream_token_read_limiter")


def _read_limiter() -> CapacityLimiter:
    """This event loop's limiter for token reads (:data:`TOKEN_READ_THREADS`)."""
    try:
        return _token_read_limiter.get()
    except LookupError:
        limiter = CapacityLimiter(TOKEN_READ_THREADS)
        _token_read_limiter.set(limiter)
        return limiter


class _Miss:
    """The cache cannot answer: the keystore must be read."""


_MISS = _Miss()


@dataclass(frozen=True, slots=True)
class _Known:
    """A token's record and the principal it verifies as, built once when the record is read: a cache hit
    then hands out the same (immutable) principal instead of building one per request."""

    record: TokenRecord
    principal: Principal


def _known(record: TokenRecord) -> _Known:
    return _Known(
        record,
        Principal(
            token_id=record.token_id,
            scopes=record.scopes,
            key_patterns=record.key_patterns,
            expires_at=record.expires_at,
            max_expires_at=record.max_expires_at,
        ),
    )


class TokenVerifier:
    """Verifies bearer tokens against the keystore with a cache of records kept coherent by the change log.

    Known tokens are cached for ``ttl`` seconds, unknown ids for ``min(ttl, unknown_ttl)``; neither is used
    once the change log has not been read for the trust bound (:meth:`trust_until`). :meth:`authenticate`
    is the event loop's entry: a cache hit is answered there, a miss reads the keystore in a worker thread.
    ``clock`` is monotonic seconds (tests inject a fake one).
    """

    def __init__(
        self,
        keystore: KeyStore,
        ttl: float = 1.0,
        *,
        unknown_ttl: float = UNKNOWN_TOKEN_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._keystore = keystore
        self._ttl = ttl
        self._unknown_ttl = min(ttl, unknown_ttl)
        self._clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, _Known]] = {}
        self._unknown: dict[str, float] = {}  # token id -> when the keystore said it has no such token
        self._generation = 0  # bumped by forget()/clear(): a read that raced with them caches nothing
        self._trusted_until = math.inf

    def _cached(self, token_id: str) -> _Known | _Miss | None:
        """The cached record, ``None`` for an id cached as unknown, or :data:`_MISS` (read the keystore)."""
        # Without the lock: each read below is one atomic step under the GIL, and the lock would not make
        # the answer fresher (a forget() right after it returns is missed either way); it guards the writers'
        # read-modify-write steps (the generation, the size bounds), which this does not do.
        now = self._clock()
        if now >= self._trusted_until:
            return _MISS
        cached = self._cache.get(token_id)
        if cached is not None and now - cached[0] < self._ttl:
            return cached[1]
        unknown_since = self._unknown.get(token_id)
        if unknown_since is not None and now - unknown_since < self._unknown_ttl:
            return None
        return _MISS

    def _load(self, token_id: str) -> _Known | None:
        """Read the record from the keystore (blocking) and cache what it says, ``None`` included.

        Raises:
            ServiceUnavailableError: the keystore cannot be read (nothing is cached).
        """
        now = self._clock()
        with self._lock:
            generation = self._generation
        try:
            record = self._keystore.get_token(token_id)
        except TokenNotFoundError:
            with self._lock:
                self._cache.pop(token_id, None)
                if self._generation == generation and self._unknown_ttl > 0:
                    if len(self._unknown) >= MAX_CACHED_TOKENS:
                        self._unknown.clear()
                    self._unknown[token_id] = now
            return None
        known = _known(record)
        with self._lock:
            if self._generation != generation:
                return known  # revoked or cleared while we read: use it once, cache nothing older
            self._unknown.pop(token_id, None)
            if len(self._cache) >= MAX_CACHED_TOKENS:
                self._cache.clear()
            self._cache[token_id] = (now, known)
        return known

    def forget(self, token_id: str) -> None:
        """Drop a cached record or unknown id (call after creating or deleting the token, or when the change
        log reports it)."""
        with self._lock:
            self._generation += 1
            self._cache.pop(token_id, None)
            self._unknown.pop(token_id, None)

    def clear(self) -> None:
        """Drop every cached record and unknown id (the change log was trimmed past what this process
        applied)."""
        with self._lock:
            self._generation += 1
            self._cache.clear()
            self._unknown.clear()

    def trust_until(self, deadline: float) -> None:
        """Use cached records until ``deadline`` (``time.monotonic``); later checks read the keystore."""
        with self._lock:
            self._trusted_until = deadline

    def verify(self, authorization: str | None) -> Principal:
        """Check an ``Authorization`` header value, reading the keystore on a cache miss (blocking: from the
        event loop, use :meth:`authenticate`).

        Raises:
            UnauthorizedError: no bearer token, a malformed one, an unknown id or a wrong secret (one message
                for all, so the response does not tell which part was wrong).
            TokenExpiredError: the token verified but its ``expires_at`` has passed (checked on every call,
                also when the record comes from the cache; told only to a caller who holds the secret).
            ServiceUnavailableError: the record had to be read and the keystore cannot serve.
        """
        token_id, secret = _parse_authorization(authorization)
        record = self._cached(token_id)
        if isinstance(record, _Miss):
            record = self._load(token_id)
        return _principal(record, secret)

    def authenticate_cached(self, authorization: str | None) -> Principal | None:
        """:meth:`authenticate` when the cache can answer, without a coroutine: the principal, or ``None``
        when the token's record must be read (then ``await`` :meth:`authenticate`, which reads it in a
        worker thread).

        Every request with a cached token is answered here, and checked as on a miss (:func:`_principal`:
        the constant-time comparison of the secret's hash, the expiry); an id cached as unknown is refused
        here too.

        Raises:
            UnauthorizedError, TokenExpiredError: as :meth:`verify`.
        """
        # The usual value read here by one match, as _parse_authorization reads it: one call less a request.
        usual = BEARER_TOKEN_RE.fullmatch(authorization) if authorization else None
        if usual is not None:
            token_id, secret = usual.group(1, 2)
        else:
            token_id, secret = _parse_authorization(authorization)
        record = self._cached(token_id)
        if isinstance(record, _Miss):
            return None
        return _principal(record, secret)

    async def authenticate(self, authorization: str | None) -> Principal:
        """:meth:`verify` for the event loop: a cached answer at once (:meth:`authenticate_cached`), a
        keystore read in a worker thread (at most :data:`TOKEN_READ_THREADS` at a time), so a slow or
        unreachable database never stalls the loop.

        Raises:
            UnauthorizedError, TokenExpiredError, ServiceUnavailableError: as :meth:`verify`.
        """
        principal = self.authenticate_cached(authorization)
        if principal is not None:
            return principal
        token_id, secret = _parse_authorization(authorization)  # well-formed: authenticate_cached parsed it
        record = await to_thread.run_sync(self._load, token_id, limiter=_read_limiter())
        return _principal(record, secret)


def _parse_authorization(authorization: str | None) -> tuple[str, str]:
    """``(token id, secret)`` of a bearer ``Authorization`` value.

    A well-formed value is read by one match of :data:`~app.core.token_format.BEARER_TOKEN_RE` (about 40%
    cheaper than the steps, on every request); any other by the steps, which name what is wrong.

    Raises:
        UnauthorizedError: no bearer token or a malformed one.
    """
    if not authorization:
        raise UnauthorizedError("missing bearer token (Authorization: Bearer ks_...)")
    usual = BEARER_TOKEN_RE.fullmatch(authorization)
    if usual is not None:
        token_id, secret = usual.group(1, 2)
        return token_id, secret
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise UnauthorizedError("missing bearer token (Authorization: Bearer ks_...)")
    parsed = parse_token(value.strip())
    if parsed is None:
        raise UnauthorizedError("invalid token")
    return parsed


def _principal(known: _Known | None, secret: str) -> Principal:
    """The principal of ``known`` when ``secret`` is its record's secret and it has not expired.

    Raises:
        UnauthorizedError: no record or a wrong secret (the secret is hashed either way: same timing).
        TokenExpiredError: its ``expires_at`` has passed.
    """
    presented = hash_secret(secret)
    stored = known.record.secret_hash if known is not None else _DUMMY_HASH
    if not hmac.compare_digest(presented, stored) or known is None:
        raise UnauthorizedError("invalid token")
    expires_at = known.record.expires_at
    if expires_at is not None and expires_at <= token_clock():
        raise TokenExpiredError("token expired")
    return known.principal

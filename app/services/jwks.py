"""The JWT issuer's public keys: a JWKS fetched over HTTPS (directly or through OIDC discovery), cached.

:class:`JwksCache` holds, per key source (a ``jwks_url`` with its optional CA, or an ``oidc_discovery_url``),
the last key set fetched and when it goes stale: the ``max-age`` of the answer's ``Cache-Control`` (bounded
to 1 s .. 1 day), else :data:`DEFAULT_MAX_AGE_SECONDS`. A ``kid`` the set does not hold refetches it at once,
but at most once per :data:`UNKNOWN_KID_REFETCH_SECONDS` per source, so tokens naming made-up ``kid`` values
cannot make the service hammer the issuer. When a fetch fails, the keys already held keep serving (stale or
not); only a source never fetched raises :class:`~app.errors.IdentityProviderUnavailableError` (503 with
``Retry-After``). Fetches are blocking httpx calls, never made on a thread that may not wait
(:mod:`app.core.waiting`: a login first tries on the event loop with the keys held, then in a worker thread).
Keys are parsed by PyJWT (:class:`jwt.PyJWK`); a key of a type PyJWT cannot use is skipped, as a JWKS may
list encryption keys too. Each key keeps the algorithm its JWK declares (``alg``, when
it has one: :class:`IssuerKey`), so a login can refuse a JWT whose header names another (RFC 8725 3.1).
"""

from __future__ import annotations

import logging
import re
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import jwt

from app.core.waiting import WouldWait, refuse_waiting, waiting_allowed
from app.errors import IdentityProviderUnavailableError

__all__ = [
    "DEFAULT_MAX_AGE_SECONDS",
    "FETCH_TIMEOUT_SECONDS",
    "UNKNOWN_KID_REFETCH_SECONDS",
    "IssuerKey",
    "JwksCache",
    "KeySource",
]

logger = logging.getLogger(__name__)

#: How long a key set stays fresh when its answer has no ``Cache-Control: max-age``.
DEFAULT_MAX_AGE_SECONDS = 300.0
#: The bounds put on an issuer's ``max-age``.
MIN_MAX_AGE_SECONDS, MAX_MAX_AGE_SECONDS = 1.0, 86_400.0
#: Least seconds between two fetches caused by an unknown ``kid`` (per source).
UNKNOWN_KID_REFETCH_SECONDS = 10.0
#: Seconds one HTTP request to the issuer may take.
FETCH_TIMEOUT_SECONDS = 5.0
#: The largest JWKS or discovery document read.
MAX_DOCUMENT_BYTES = 1 << 20
#: Seconds a client is told to wait when no keys can be had.
RETRY_AFTER_SECONDS = 10

_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*(\d+)", re.IGNORECASE)


@dataclass(frozen=True)
class IssuerKey:
    """A public key of the issuer's set, and the algorithm its JWK declares (``None`` without ``alg``: any
    algorithm of the key's type may use it). PyJWT fills a missing ``alg`` with a guess from the key type,
    so the declared one is kept here, as the JWK said it."""

    jwk: jwt.PyJWK
    algorithm: str | None


@dataclass(frozen=True)
class KeySource:
    """Where keys come from: a JWKS URL (and the PEM CA that signs its server, if not the system's), or an
    OIDC discovery URL whose document names the JWKS (``jwks_uri``)."""

    jwks_url: str | None = None
    ca_pem: str | None = None
    discovery_url: str | None = None


@dataclass
class _Held:
    """One source's keys by ``kid`` (keys without one under ``""``), when they go stale, and the fetches."""

    keys: dict[str, IssuerKey] = field(default_factory=dict)
    stale_at: float = 0.0
    last_fetch: float = float("-inf")
    fetched: bool = False


class JwksCache:
    """Key sets by source, fetched when stale or when a ``kid`` is unknown (see the module doc). Thread-safe.

    Args:
        clock: monotonic seconds.
        transport: an httpx transport (tests use one that counts or fails requests); none: the network.
    """

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, transport: httpx.BaseTransport | None = None
    ) -> None:
        self._clock = clock
        self._transport = transport
        self._held: dict[KeySource, _Held] = {}
        self._locks: dict[KeySource, threading.Lock] = {}
        self._guard = threading.Lock()
        self.fetches = 0

    def key_for(self, source: KeySource, kid: str | None) -> IssuerKey | None:
        """The key ``kid`` names (``None``: the set's only key without a ``kid``), fetching when the set is
        stale or does not hold it (at most once per :data:`UNKNOWN_KID_REFETCH_SECONDS`); ``None`` if no
        key fits.

        On a thread that may not wait (:mod:`app.core.waiting`) only what is held answers: a fetch, or
        another thread's fetch in progress, is :class:`~app.core.waiting.WouldWait` (nothing changed: the
        refetch allowance is not spent).

        Raises:
            IdentityProviderUnavailableError: the set cannot be fetched and was never fetched.
            WouldWait: the answer needs a fetch and this thread may not wait.
        """
        lock = self._lock(source)
        if not lock.acquire(blocking=waiting_allowed()):
            raise WouldWait("another thread is fetching the JWT issuer's keys")
        try:
            held = self._held.setdefault(source, _Held())
            now = self._clock()
            wanted = kid or ""
            if (
                not held.fetched
                or now >= held.stale_at
                or (wanted not in held.keys and now - held.last_fetch >= UNKNOWN_KID_REFETCH_SECONDS)
            ):
                refuse_waiting("a fetch of the JWT issuer's keys")
                self._refresh(source, held, now)
            if wanted in held.keys:
                return held.keys[wanted]
            if kid is None and len(held.keys) == 1:
                return next(iter(held.keys.values()))
            return None
        finally:
            lock.release()

    def _lock(self, source: KeySource) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(source, threading.Lock())

    def _refresh(self, source: KeySource, held: _Held, now: float) -> None:
        """Fetch the set into ``held``; on failure keep what is held, or raise when nothing ever was."""
        held.last_fetch = now
        self.fetches += 1
        try:
            document, max_age = self._fetch(source)
            keys = _parse_keys(document)
        except (httpx.HTTPError, ValueError, ssl.SSLError) as exc:
            # The URL is the operator's configuration, not a secret; the message names no token.
            logger.warning("cannot fetch the JWT issuer's keys: %s: %s", type(exc).__name__, exc)
            if held.fetched:
                held.stale_at = now + min(DEFAULT_MAX_AGE_SECONDS, UNKNOWN_KID_REFETCH_SECONDS)
                return
            raise IdentityProviderUnavailableError(
                "the JWT issuer's keys cannot be fetched now; retry later",
                retry_after_seconds=RETRY_AFTER_SECONDS,
            ) from exc
        held.keys, held.fetched = keys, True
        held.stale_at = now + max_age

    def _fetch(self, source: KeySource) -> tuple[dict[str, Any], float]:
        verify: ssl.SSLContext | bool = True
        if source.ca_pem:
            verify = ssl.create_default_context(cadata=source.ca_pem)
        with httpx.Client(
            verify=verify, timeout=FETCH_TIMEOUT_SECONDS, transport=self._transport, follow_redirects=False
        ) as client:
            url = source.jwks_url
            if source.discovery_url is not None:
                discovery, _ = _get_json(client, source.discovery_url)
                url = discovery.get("jwks_uri")
                if not isinstance(url, str) or not url.startswith("https://"):
                    raise ValueError("the OIDC discovery document has no https jwks_uri")
            if url is None:
                raise ValueError("no JWKS URL configured")
            return _get_json(client, url)


def _get_json(client: httpx.Client, url: str) -> tuple[dict[str, Any], float]:
    """GET ``url`` as a JSON object, with its freshness in seconds.

    Raises:
        httpx.HTTPError: the request failed or the status is not 2xx.
        ValueError: the body is not a JSON object or is too large.
    """
    response = client.get(url, headers={"Accept": "application/json"})
    response.raise_for_status()
    if len(response.content) > MAX_DOCUMENT_BYTES:
        raise ValueError(f"the document at {url} is larger than {MAX_DOCUMENT_BYTES} bytes")
    document = response.json()
    if not isinstance(document, dict):
        raise ValueError(f"the document at {url} is not a JSON object")
    return document, _max_age(response.headers.get("cache-control", ""))


def _max_age(cache_control: str) -> float:
    """The ``max-age`` of a ``Cache-Control`` value within the bounds, else the default; ``no-store`` and
    ``no-cache`` keep the keys for the shortest time."""
    lowered = cache_control.lower()
    if "no-store" in lowered or "no-cache" in lowered:
        return MIN_MAX_AGE_SECONDS
    match = _MAX_AGE.search(cache_control)
    if match is None:
        return DEFAULT_MAX_AGE_SECONDS
    return min(max(float(match.group(1)), MIN_MAX_AGE_SECONDS), MAX_MAX_AGE_SECONDS)


def _parse_keys(document: dict[str, Any]) -> dict[str, IssuerKey]:
    """The signing keys of a JWKS by ``kid`` (``""`` for one without); keys PyJWT cannot use are skipped.

    Raises:
        ValueError: the document has no ``keys`` list.
    """
    entries = document.get("keys")
    if not isinstance(entries, list):
        raise ValueError("the JWKS has no keys list")
    keys: dict[str, IssuerKey] = {}
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("use", "sig") != "sig":
            continue
        try:
            key = jwt.PyJWK(entry)
        except (jwt.PyJWKError, jwt.InvalidKeyError, ValueError, TypeError):
            continue
        kid, declared = entry.get("kid"), entry.get("alg")
        keys[kid if isinstance(kid, str) else ""] = IssuerKey(
            key, declared if isinstance(declared, str) else None
        )
    return keys

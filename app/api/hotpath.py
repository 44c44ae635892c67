"""The fast dispatcher: a small router in front of the one middleware stack, ahead of FastAPI's.

For a 1 KiB message, FastAPI's way to a route (its telemetry check, its outer error layer, the exception
handlers, the router, dependency solving) cost more server time than the route itself. :class:`KeystreamApp`
is the FastAPI app with one shortcut: ``POST`` on the streaming ``/v1/keys/{name}/encrypt`` and ``/decrypt``,
on ``/v1/keys/{name}/hmac``, ``/verify`` and ``/datakey``, on ``/v1/random`` and ``/v1/hash``, on the Transit
API's ``encrypt``, ``decrypt``, ``rewrap``, ``hmac`` and ``verify``, on the JWT and the certificate logins
and, without a query string, on the three batch routes goes to the route through the service's middleware
stack (:func:`app.api.middleware.wrap`: the same layers, in the same order, as FastAPI runs) and then
:func:`_route`, which does what FastAPI's router and exception handlers would: the route and its path
parameter in the scope, the handler, and the JSON answer of a domain error (or of a body that does not fit its
schema) raised before the handler answered (:mod:`app.api.errors`). An exception raised after the response
started propagates, so the server aborts the connection (the sealed-decrypt rule), as through FastAPI.

The streaming handlers take the request alone (:mod:`app.api.routes.crypto`); the batch endpoints are called
through :func:`app.api.routes.batch.request_handler`, with what FastAPI's dependencies would give them, and
the JSON routes (the logins, the HMAC, data key, random and hash routes, the Transit API's data operations)
through the ``REQUEST_HANDLERS`` of their route modules, built by
:func:`app.api.request_handler.request_handler`, which reads, checks and validates the body as FastAPI does
(:mod:`app.api.json_body`; the Transit API's bodies are JSON whatever their ``Content-Type``). A 1 KiB Transit
encrypt took ~0.9 ms of server CPU through FastAPI and ~0.23 ms this way, in process under load; for a login,
FastAPI's way to the route (route matching among every route of the service, dependency solving, its answer's
serialization) cost about as much server time as the login's own work. A batch request with a query string
(``backend``, ``key_version``) goes through FastAPI, whose parameter validation then answers.

While the server is **sealed** (a shamir seal awaiting its shares), :class:`KeystreamApp` answers every
request but those of :data:`~app.api.paths.OPEN_WHILE_SEALED` with 503 ``sealed`` and ``Retry-After``
before the shortcut or FastAPI's stack sees it, so no route that needs the master key runs. That answer goes
through no middleware (no metrics, no audit record).

Everything else goes through FastAPI: other paths, other methods on these paths (405 with ``Allow``: the
routes stay in FastAPI's router), rewrap, an app with a ``root_path``, and every request while an
OpenTelemetry provider is configured (FastAPI's telemetry then wraps each request). The OpenAPI entries of
the streaming routes come from :func:`app.api.openapi.openapi_paths`, those of the batch routes from their
FastAPI declarations.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from typing import Any

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, APIRouter
from starlette.datastructures import State
from starlette.requests import Request, empty_send
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from app.api.errors import keystream_error_response, validation_error_response, vault_error_response
from app.api.middleware import middleware, wrap
from app.api.paths import (
    BATCH_PATHS,
    BATCH_ROUTE,
    DATAKEY,
    HMAC,
    KEY_JSON_ROUTE,
    OPEN_WHILE_SEALED,
    SEALED_MESSAGE,
    STREAMING_ROUTE,
    TRANSIT,
    TRANSIT_CRYPTO_ROUTE,
    TRANSIT_DECRYPT,
    TRANSIT_ENCRYPT,
    TRANSIT_HMAC,
    TRANSIT_REWRAP,
    TRANSIT_VERIFY,
    VERIFY,
    remember,
    transit_alias,
)
from app.api.request_handler import Handler
from app.api.routes import auth, batch, crypto, datakey, mac, tools, transit
from app.core.config import Settings
from app.errors import KeystreamError, SealedError
from app.seal import Seal

#: Routes the shortcut serves, each with its handler, by what the dispatcher finds in the path.
_Table = dict[str, tuple[BaseRoute, Handler]]
#: The streaming routes the shortcut serves (rewrap goes through FastAPI), by operation.
_STREAMING: _Table = {
    route.name: (route, route.endpoint) for route in crypto.routes if route.name in ("encrypt", "decrypt")
}
#: The batch routes, by operation (their ``path`` labels the metrics and the audit records).
_BATCH: _Table = {
    operation: (route, batch.request_handler(route.endpoint))
    for operation, path in BATCH_PATHS.items()
    for route in batch.router.routes
    if isinstance(route, APIRoute) and route.path == path
}


def _served(router: APIRouter, handlers: Mapping[str, Handler], paths: Mapping[str, str]) -> _Table:
    """By key of ``paths``: the ``POST`` route of ``router`` at that path, and the key's handler.

    Raises:
        KeyError: a path the router has no ``POST`` route for (at import: never a route silently left out).
    """
    routes = {
        route.path: route
        for route in router.routes
        if isinstance(route, APIRoute) and "POST" in (route.methods or ())
    }
    return {key: (routes[path], handlers[key]) for key, path in paths.items()}


#: The routes served at one fixed path, by path: the JWT and the certificate logins, random bytes and hashes.
_FIXED: _Table = {
    **_served(auth.router, auth.REQUEST_HANDLERS, {path: path for path in auth.REQUEST_HANDLERS}),
    **_served(tools.router, tools.REQUEST_HANDLERS, {path: path for path in tools.REQUEST_HANDLERS}),
}
#: The key routes with a JSON body: the HMAC and its check of one message, and data keys, by operation.
_KEY_JSON: _Table = {
    **_served(mac.router, mac.REQUEST_HANDLERS, {"hmac": HMAC, "verify": VERIFY}),
    **_served(datakey.router, datakey.REQUEST_HANDLERS, {"datakey": DATAKEY}),
}
#: The Transit API's data operations, by operation (``path`` labels the metrics).
_TRANSIT: _Table = _served(
    transit.router,
    transit.REQUEST_HANDLERS,
    {
        "encrypt": TRANSIT_ENCRYPT,
        "decrypt": TRANSIT_DECRYPT,
        "rewrap": TRANSIT_REWRAP,
        "hmac": TRANSIT_HMAC,
        "verify": TRANSIT_VERIFY,
    },
)
#: Key in the scope under which the dispatcher hands :func:`_route` what it found (route, handler, key name).
FOUND = "keystream.found"
#: What every route but :data:`~app.api.paths.OPEN_WHILE_SEALED` answers while the server is sealed.
SEALED = SealedError(SEALED_MESSAGE)
#: Seconds between two checks whether an OpenTelemetry provider is configured.
TELEMETRY_RECHECK_SECONDS = 1.0


class AttributeState(State):
    """Starlette's ``app.state`` whose entries are also plain instance attributes, so reading one is a
    dictionary hit.

    Starlette's :class:`~starlette.datastructures.State` keeps its entries in a dict that only its
    ``__getattr__`` reads, and Python calls ``__getattr__`` after the normal lookup failed and raised
    ``AttributeError``: about a microsecond per read, and every request reads ``app.state.keystream``.
    Entries are still set, read and deleted through State's API (attributes or items), which keeps the two
    in step.
    """

    def __setattr__(self, key: Any, value: Any) -> None:
        super().__setattr__(key, value)
        object.__setattr__(self, key, value)

    def __delattr__(self, key: Any) -> None:
        super().__delattr__(key)
        object.__delattr__(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        self.__setattr__(key, value)

    def __delitem__(self, key: str) -> None:
        self.__delattr__(key)


class KeystreamApp(FastAPI):
    """FastAPI, with the streaming encrypt/decrypt and the batch routes served by a shortcut (see the module
    doc) through the same middleware stack."""

    def __init__(self, **settings: Any) -> None:
        """FastAPI's constructor (``settings`` are its keyword arguments), with :class:`AttributeState` as
        ``app.state``."""
        super().__init__(**settings)
        self.state = AttributeState()

    #: The seal when it can be sealed while serving (shamir), set by the lifespan; ``None`` otherwise, so the
    #: sealed gate costs one attribute test per request.
    sealable: Seal | None = None
    #: The middleware stack around :func:`_route` (:meth:`install_middleware`).
    _fast: ASGIApp | None = None
    #: ``/v1/<mount>/`` when the Transit API is mounted elsewhere than ``transit`` (:func:`_mount_transit`).
    _transit_alias: str | None = None

    def install_middleware(self, settings: Settings) -> None:
        """Give FastAPI the service's middleware (:func:`app.api.middleware.middleware`) and build the same
        stack around the shortcut's routes, so both ways to a route pass one list of layers."""
        self.user_middleware = middleware(settings)
        self._fast = wrap(_route, settings)
        self._transit_alias = transit_alias(settings.transit_mount)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        alias = self._transit_alias
        if alias is not None and scope["type"] == "http":
            mounted = _mount_transit(scope, alias)
            if mounted is None:
                await vault_error_response(404, [])(scope, receive, send)  # Vault's: nothing mounted there
                return
            scope = mounted
        sealable = self.sealable
        if (
            sealable is not None
            and sealable.sealed
            and scope["type"] == "http"
            and scope["path"] not in OPEN_WHILE_SEALED
        ):
            # Ahead of the shortcut and of FastAPI's stack: nothing that needs the key runs.
            await keystream_error_response(SEALED, scope)(scope, receive, send)
            return
        fast = self._fast
        if (
            fast is not None
            and scope["type"] == "http"
            and scope["method"] == "POST"
            and not self.root_path
            and not scope.get("root_path")
        ):
            found = _find(scope)
            # = not self._telemetry_on(), with its usual answer (checked within the recheck interval) read
            # here: one call less per request.
            if found is not None and not (
                self._telemetry_enabled
                if time.monotonic() - self._telemetry_checked_at < TELEMETRY_RECHECK_SECONDS
                else self._telemetry_on()
            ):
                scope["app"] = self
                scope[FOUND] = found
                await fast(scope, receive, send)
                return
        await super().__call__(scope, receive, send)

    _telemetry_enabled = False
    _telemetry_checked_at = -math.inf

    def _telemetry_on(self) -> bool:
        """True while FastAPI's OpenTelemetry instrumentation would wrap requests (a provider is set).

        Asked at most once per :data:`TELEMETRY_RECHECK_SECONDS`: the check reads three global providers and
        the environment, a few percent of a 1 KiB request. A provider configured while the server runs is
        noticed within that time.
        """
        now = time.monotonic()
        if now - self._telemetry_checked_at >= TELEMETRY_RECHECK_SECONDS:
            telemetry = getattr(self, "_native_telemetry", None)
            self._telemetry_enabled = telemetry is not None and bool(telemetry.enabled())
            self._telemetry_checked_at = now
        return self._telemetry_enabled


def _mount_transit(scope: Scope, alias: str) -> Scope | None:
    """``scope`` with a path under ``alias`` (the configured Transit mount) moved to ``/v1/transit/``, where
    the routes are; ``None`` for a path under ``/v1/transit/`` itself, which is not mounted then; any other
    ``scope`` unchanged. Everything after the rewrite (routes, Vault's error shape, the audit log and the
    metrics, which record the route template) sees the Transit path."""
    path: str = scope["path"]
    if path.startswith(alias) or path == alias[:-1]:
        moved = TRANSIT + path[len(alias) :]
        raw = scope.get("raw_path")
        prefix = alias.encode()
        raw_moved = moved.encode()
        if raw and raw.startswith(prefix):
            raw_moved = TRANSIT.encode() + raw[len(prefix) :]
        return {**scope, "path": moved, "raw_path": raw_moved}
    if path.startswith(TRANSIT) or path == TRANSIT[:-1]:
        return None
    return scope


#: Where :func:`_find` looks up a path's route: by path, the table, the key in it, the key name and whether it
#: is a batch route (which a query string sends to FastAPI). It spares each request the regular expressions;
#: the route itself is still read from its table at each request. Only paths the patterns match, within
#: :func:`~app.api.paths.remember`'s bounds.
_found_by_path: dict[str, tuple[Mapping[str, tuple[BaseRoute, Handler]], str, str | None, bool]] = {}


def _find(scope: Scope) -> tuple[BaseRoute, Handler, str | None] | None:
    """The route, handler and key name (``None`` for a route without one) of a request the shortcut serves,
    else ``None``."""
    path = scope["path"]
    known = _found_by_path.get(path)
    if known is None:
        known = _match(path)
        if known is None:
            return None
        remember(_found_by_path, path, known)
    table, key, name, batch = known
    if batch and scope.get("query_string"):
        return None
    entry = table.get(key)
    return None if entry is None else (*entry, name)


def _match(path: str) -> tuple[_Table, str, str | None, bool] | None:
    """The table, key, key name and batch flag of :func:`_find` for ``path``, else ``None``."""
    if path in _FIXED:
        return _FIXED, path, None, False
    found = STREAMING_ROUTE.fullmatch(path)
    if found is not None:
        return _STREAMING, found["operation"], found["name"], False
    if (found := TRANSIT_CRYPTO_ROUTE.fullmatch(path)) is not None:
        return _TRANSIT, found["operation"], found["name"], False
    if (found := KEY_JSON_ROUTE.fullmatch(path)) is not None:
        return _KEY_JSON, found["operation"], found["name"], False
    if (found := BATCH_ROUTE.fullmatch(path)) is not None:
        return _BATCH, found["operation"], found["name"], True
    return None


class _Request(Request):
    """Starlette's :class:`~starlette.requests.Request` of a request the shortcut serves, made in one call.

    Request's constructor calls HTTPConnection's and checks the scope's type twice: two Python calls per
    request where one does. This one sets the same attributes (tests/app/api/test_hotpath.py compares them
    with Request's own); :class:`KeystreamApp` only sends it ``http`` scopes.
    """

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.scope = scope
        self._receive = receive
        self._send = empty_send
        self._stream_consumed = False
        self._is_disconnected = False
        self._form = None


async def _route(scope: Scope, receive: Receive, send: Send) -> None:
    """Where FastAPI's exception handlers and router are, inside the middleware stack: the route and its path
    parameter in the scope (only now, so a request the middleware refused is ``unmatched``, as through
    FastAPI), its handler, and the JSON error of what the handler raised before it answered.

    Raises:
        Exception: whatever failed after the response started (the server then aborts the connection).
    """
    route, handler, name = scope.pop(FOUND)
    scope["route"] = route
    scope["endpoint"] = getattr(route, "endpoint", handler)
    scope["path_params"] = {} if name is None else {"name": name}
    try:
        response = await handler(_Request(scope, receive))
    except KeystreamError as exc:
        response = keystream_error_response(exc, scope)  # Vault's shape on the Transit paths
    except RequestValidationError as exc:
        response = validation_error_response(exc, scope)
    await response(scope, receive, send)

"""The streaming encrypt/decrypt routes, served ahead of FastAPI's middleware stack and router.

For a 1 KiB message, FastAPI's way to a route (its telemetry check, six middlewares, the exception handlers,
the router) cost more server time than the route itself. :class:`KeystreamApp` is the FastAPI app with one
shortcut: ``POST /v1/keys/{name}/encrypt`` and ``/decrypt`` go straight to their handlers
(:mod:`app.api.routes.crypto`), and :func:`serve_crypto` does for them what the stack does for every request:

* more than one ``Authorization`` header is a 400 (:class:`~app.api.limits.BodyLimitMiddleware`'s rule);
* the audit log's records and ``Keystream-Request-Id`` (:class:`~app.api.audit.AuditMiddleware` itself, in
  the same place: inside the metrics and the 500, outside the header rule and the error handlers);
* the request metrics, labelled with the route template (:mod:`app.api.http_metrics`);
* a :class:`~app.errors.KeystreamError` becomes its JSON error, anything else a 500 ``internal_error``
  (:mod:`app.api.errors`); once the response has started the exception propagates, so the server aborts
  the connection (the sealed-decrypt rule), as before.

``POST /v1/keys/{name}/encrypt/batch``, ``/decrypt/batch`` and ``/rewrap/batch`` without a query string
take the same shortcut (:func:`serve_batch`; for a batch of one 1 KiB item FastAPI's way cost more than the
route too): around their endpoints (:mod:`app.api.routes.batch`) it runs the same metrics, 500, audit
middleware and :class:`~app.api.limits.BodyLimitMiddleware` itself (header rule, token, ``batch_max_bytes``
413s, the batch budget's 503, the one buffered body), then does what the router and FastAPI's dependencies
did: the route in the scope (after the body-limit middleware, as the router sets it), the ``application/json``
check (415), the verified principal, and the JSON errors of the exception handlers (domain errors, 422).
A batch request with a query string (``backend``, ``key_version``) goes through FastAPI, whose parameter
validation then answers as before.

While the server is **sealed** (a shamir seal awaiting its shares), :class:`KeystreamApp` answers every
request but those of :data:`~app.api.paths.OPEN_WHILE_SEALED` with 503 ``sealed`` and ``Retry-After``
before either shortcut or FastAPI's stack sees it, so no route that needs the master key runs.

Everything else goes through FastAPI unchanged: other paths, other methods on these paths (405 with
``Allow``: the routes stay in FastAPI's router), an app with a ``root_path``, and every request while an
OpenTelemetry provider is configured (FastAPI's telemetry then wraps each request). The OpenAPI entries of
the streaming routes come from :func:`app.api.params.openapi_paths` as before, those of the batch routes
from their FastAPI declarations.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.audit import AuditMiddleware
from app.api.deps import require_json
from app.api.errors import keystream_error_response, unexpected_error_response, validation_error_response
from app.api.http_metrics import observe_request
from app.api.limits import REPEATED_AUTHORIZATION, VERIFIED_PRINCIPAL, BodyLimitMiddleware
from app.api.paths import BATCH_ROUTE, OPEN_WHILE_SEALED, SEALED_MESSAGE, STREAMING_ROUTE
from app.api.routes import batch, crypto
from app.api.state import ServiceState
from app.core.metrics import INFLIGHT_REQUESTS
from app.errors import KeystreamError, SealedError
from app.seal import Seal
from app.services.security import Principal

#: The two streaming routes the shortcut serves (rewrap goes through FastAPI), by operation.
_ROUTES = {route.name: route for route in crypto.routes if route.name in ("encrypt", "decrypt")}
_BATCH_ENDPOINTS: dict[str, Callable[..., Awaitable[Response]]] = {
    "encrypt": batch.encrypt_batch,
    "decrypt": batch.decrypt_batch,
    "rewrap": batch.rewrap_batch,
}
#: The batch routes of the router, by operation (their ``path`` labels the metrics and the audit records).
_BATCH_ROUTES: dict[str, APIRoute] = {
    operation: next(
        route for route in batch.router.routes if isinstance(route, APIRoute) and route.endpoint is endpoint
    )
    for operation, endpoint in _BATCH_ENDPOINTS.items()
}
#: What every route but :data:`~app.api.paths.OPEN_WHILE_SEALED` answers while the server is sealed.
SEALED = SealedError(SEALED_MESSAGE)
#: Seconds between two checks whether an OpenTelemetry provider is configured.
TELEMETRY_RECHECK_SECONDS = 1.0


class KeystreamApp(FastAPI):
    """FastAPI, with ``POST`` on the streaming encrypt/decrypt paths served by :func:`serve_crypto`."""

    #: The seal when it can be sealed while serving (shamir), set by the lifespan; ``None`` otherwise, so the
    #: sealed gate costs one attribute test per request.
    sealable: Seal | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sealable = self.sealable
        if (
            sealable is not None
            and sealable.sealed
            and scope["type"] == "http"
            and scope["path"] not in OPEN_WHILE_SEALED
        ):
            # Ahead of the shortcuts below and of FastAPI's stack: nothing that needs the key runs.
            await keystream_error_response(SEALED)(scope, receive, send)
            return
        if (
            scope["type"] == "http"
            and scope["method"] == "POST"
            and not self.root_path
            and not scope.get("root_path")
        ):
            path = scope["path"]
            found = STREAMING_ROUTE.fullmatch(path)
            if found is not None:
                if found["operation"] in _ROUTES and not self._telemetry_on():
                    await serve_crypto(self, scope, receive, send, found["name"], found["operation"])
                    return
            elif not scope.get("query_string"):
                found = BATCH_ROUTE.fullmatch(path)
                if found is not None and not self._telemetry_on():
                    await serve_batch(self, scope, receive, send, found["name"], found["operation"])
                    return
        await super().__call__(scope, receive, send)

    _telemetry_enabled = False
    _telemetry_checked_at = -math.inf
    _batch_stack: tuple[object, ASGIApp] | None = None

    def batch_stack(self) -> ASGIApp:
        """:func:`batch_stack` of the running service, built once per service (its limits are fixed)."""
        state = self.state.keystream
        if self._batch_stack is None or self._batch_stack[0] is not state:
            self._batch_stack = (state, batch_stack(state))
        return self._batch_stack[1]

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


async def serve_crypto(
    app: FastAPI, scope: Scope, receive: Receive, send: Send, name: str, operation: str
) -> None:
    """Serve one encrypt or decrypt request as the middleware stack and router would (see the module doc).

    Raises:
        Exception: whatever failed after the response started (the server then aborts the connection).
    """
    route = _ROUTES[operation]
    scope["app"] = app
    scope["route"] = route
    scope["endpoint"] = route.endpoint
    scope["path_params"] = {"name": name}
    await _observed(_AUDITED, scope, receive, send)


async def _observed(handler: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
    """Run ``handler`` as the stack's outer layers would: the in-flight gauge, the request metrics labelled
    with the route template (``unmatched`` for a request refused before routing: 401, 413, 503), and the
    500 ``internal_error`` answer for an exception raised before the response started.

    Raises:
        Exception: whatever failed after the response started (the server then aborts the connection).
    """
    status = 500
    started = False

    async def tracking_send(message: Message) -> None:
        nonlocal status, started
        if message["type"] == "http.response.start":
            status = message["status"]
            started = True
        await send(message)

    start = time.perf_counter()
    INFLIGHT_REQUESTS.inc()
    try:
        try:
            await handler(scope, receive, tracking_send)
        except Exception as exc:
            if started:
                raise
            await unexpected_error_response(exc, scope)(scope, receive, tracking_send)
    finally:
        INFLIGHT_REQUESTS.dec()
        route = getattr(scope.get("route"), "path", None) or "unmatched"
        observe_request(route, "POST", status, time.perf_counter() - start)


async def _route(scope: Scope, receive: Receive, send: Send) -> None:
    """What the stack runs inside the audit middleware: the header rule, the route, its JSON errors."""
    response = await _handle(scope, receive, scope["route"].name)
    await response(scope, receive, send)


#: The audit log around the route, where the stack has it (inside the metrics and the 500, outside the
#: ``Authorization`` rule and the error handlers): each request gets its records and Keystream-Request-Id.
_AUDITED = AuditMiddleware(_route)


async def _handle(scope: Scope, receive: Receive, operation: str) -> Response:
    """The route's response, or the JSON error of a domain error raised before it."""
    seen = False
    for header, _ in scope["headers"]:
        if header == b"authorization":
            if seen:
                return keystream_error_response(REPEATED_AUTHORIZATION)
            seen = True
    request = Request(scope, receive)
    try:
        if operation == "encrypt":
            return await crypto.encrypt(request)
        return await crypto.decrypt(request)
    except KeystreamError as exc:
        return keystream_error_response(exc)


async def serve_batch(
    app: KeystreamApp, scope: Scope, receive: Receive, send: Send, name: str, operation: str
) -> None:
    """Serve one batch request as the middleware stack, router and FastAPI would (see the module doc).

    Raises:
        Exception: whatever failed after the response started (the server then aborts the connection).
    """
    scope["app"] = app
    await _observed(app.batch_stack(), scope, receive, send)


def batch_stack(state: ServiceState) -> ASGIApp:
    """What the stack runs around a batch route, in its order: the audit log, then the body-limit middleware
    (header rule, token, ``batch_max_bytes``, the batch budget, the buffered body), the service's limits."""
    settings = state.settings
    return AuditMiddleware(
        BodyLimitMiddleware(_batch_route, settings.max_json_body, settings.batch_max_bytes)
    )


async def _batch_route(scope: Scope, receive: Receive, send: Send) -> None:
    """Where the router would be: the route and its path parameter in the scope, then the endpoint."""
    found = BATCH_ROUTE.fullmatch(scope["path"])
    assert found is not None  # serve_batch serves only these paths
    name, operation = found["name"], found["operation"]
    route = _BATCH_ROUTES[operation]
    scope["route"] = route
    scope["endpoint"] = route.endpoint
    scope["path_params"] = {"name": name}
    response = await _batch_response(scope, receive, name, operation)
    await response(scope, receive, send)


async def _batch_response(scope: Scope, receive: Receive, name: str, operation: str) -> Response:
    """The endpoint's response as FastAPI calls it (``application/json`` checked first, the principal the
    body-limit middleware verified), or the JSON error the exception handlers give what it raised."""
    request = Request(scope, receive)
    state: ServiceState = scope["app"].state.keystream
    principal: Principal = scope["state"][VERIFIED_PRINCIPAL]
    try:
        await require_json(request)
        return await _BATCH_ENDPOINTS[operation](name, request, principal, state, None, None)
    except KeystreamError as exc:
        return keystream_error_response(exc)
    except RequestValidationError as exc:
        return validation_error_response(exc)

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

Everything else goes through FastAPI unchanged: other paths, other methods on these paths (405 with
``Allow``: the routes stay in FastAPI's router), an app with a ``root_path``, and every request while an
OpenTelemetry provider is configured (FastAPI's telemetry then wraps each request). The OpenAPI entries of
the two routes come from :func:`app.api.params.openapi_paths` as before.
"""

from __future__ import annotations

import math
import re
import time

from fastapi import FastAPI
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from app.api.audit import AuditMiddleware
from app.api.errors import keystream_error_response, unexpected_error_response
from app.api.http_metrics import observe_request
from app.api.limits import REPEATED_AUTHORIZATION
from app.api.routes import crypto
from app.core.metrics import INFLIGHT_REQUESTS
from app.errors import KeystreamError

#: The two paths the shortcut serves (Starlette's ``{name}``: one path segment, at least one character).
CRYPTO_PATH = re.compile(r"/v1/keys/(?P<name>[^/]+)/(?P<operation>encrypt|decrypt)")
_ROUTES = {route.name: route for route in crypto.routes}
#: Seconds between two checks whether an OpenTelemetry provider is configured.
TELEMETRY_RECHECK_SECONDS = 1.0


class KeystreamApp(FastAPI):
    """FastAPI, with ``POST`` on the streaming encrypt/decrypt paths served by :func:`serve_crypto`."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and not self.root_path:
            found = CRYPTO_PATH.fullmatch(scope["path"])
            if found is not None and not scope.get("root_path") and not self._telemetry_on():
                await serve_crypto(self, scope, receive, send, found["name"], found["operation"])
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
            await _AUDITED(scope, receive, tracking_send)
        except Exception as exc:
            if started:
                raise
            await unexpected_error_response(exc, scope)(scope, receive, tracking_send)
    finally:
        INFLIGHT_REQUESTS.dec()
        observe_request(route.path, "POST", status, time.perf_counter() - start)


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

"""Auth first, then a bounded body, for every non-streaming ``/v1`` route (a pure ASGI middleware).

Before anything else, for every HTTP request: more than one ``Authorization`` header is a 400 (one place for
the rule, so no route can read the first while another reads the last).

FastAPI reads and parses a route's whole JSON body before it resolves any dependency, auth included, so
without this an anonymous client could make the server buffer any amount (and get 415/422 schema feedback
instead of 401). :class:`BodyLimitMiddleware` runs before routing and, for ``/v1`` paths other than the
streaming ``/v1/keys/{name}/encrypt`` and ``/decrypt`` (which authenticate first themselves and never buffer):

1. verifies the bearer token (401 in the service's JSON error shape, body unread, when it is missing or
   invalid); the route still checks scopes and key patterns;
2. answers 413 when ``Content-Length`` exceeds the route's limit, before reading anything;
3. reads the body (Content-Length or chunked) counting bytes, 413 as soon as the limit is passed, and hands
   the complete body to the route.

Limits: the batch routes take ``batch_max_bytes``, every other ``/v1`` route ``max_json_body``.
"""

from __future__ import annotations

import re

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_response, keystream_error_response
from app.api.params import is_ascii_integer
from app.api.state import ServiceState
from app.errors import BadRequestError, KeystreamError

#: Key in the ASGI ``scope["state"]`` under which this middleware leaves the verified
#: :class:`~app.services.security.Principal`, so the route's dependency does not verify it a second time.
#: Only server code writes the scope; a client cannot set it.
VERIFIED_PRINCIPAL = "keystream.principal"
#: The streaming routes: they authenticate before reading and stream bodies of any size.
STREAMING_ROUTE = re.compile(r"/v1/keys/[^/]+/(?:encrypt|decrypt)")
#: The batch routes: bounded by ``batch_max_bytes``.
BATCH_ROUTE = re.compile(r"/v1/keys/[^/]+/(?:encrypt|decrypt)/batch")


def body_limit(path: str, json_limit: int, batch_limit: int) -> int | None:
    """The body limit of ``path``: ``None`` for paths the middleware leaves alone (not ``/v1``, streaming)."""
    if not path.startswith("/v1/") or STREAMING_ROUTE.fullmatch(path):
        return None
    return batch_limit if BATCH_ROUTE.fullmatch(path) else json_limit


def _repeated(scope: Scope, wanted: bytes) -> bool:
    """True when the header ``wanted`` (lower case, as servers hand names to ASGI) occurs more than once."""
    seen = False
    for name, _ in scope["headers"]:
        if name == wanted:
            if seen:
                return True
            seen = True
    return False


def _header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return bytes(value).decode("latin-1")
    return None


class BodyLimitMiddleware:
    """Authenticate, then read a bounded body, before the JSON ``/v1`` routes run (see the module doc)."""

    def __init__(self, app: ASGIApp, json_limit: int, batch_limit: int) -> None:
        self.app = app
        self.json_limit = json_limit
        self.batch_limit = batch_limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _repeated(scope, b"authorization"):
            error = BadRequestError("more than one Authorization header: send exactly one bearer token")
            await keystream_error_response(error)(scope, receive, send)
            return
        limit = body_limit(scope["path"], self.json_limit, self.batch_limit)
        if limit is None:
            await self.app(scope, receive, send)
            return
        state: ServiceState = scope["app"].state.keystream
        try:
            principal = state.tokens.verify(_header(scope, b"authorization"))
            scope.setdefault("state", {})[VERIFIED_PRINCIPAL] = principal
            declared = _header(scope, b"content-length")
            if declared is not None and not is_ascii_integer(declared):
                await error_response(400, "bad_request", "Content-Length must be a number")(
                    scope, receive, send
                )
                return
        except KeystreamError as exc:
            await keystream_error_response(exc)(scope, receive, send)
            return
        if declared is not None and int(declared) > limit:
            await _too_large(scope, receive, send, f"request body is {declared} bytes; the limit is {limit}")
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return  # nobody to answer; the route never runs
            body += message.get("body", b"")
            if len(body) > limit:
                await _too_large(scope, receive, send, f"request body exceeds the limit of {limit} bytes")
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, _replay(bytes(body), receive), send)


async def _too_large(scope: Scope, receive: Receive, send: Send, message: str) -> None:
    response = error_response(413, "payload_too_large", message, {"Connection": "close"})
    await response(scope, receive, send)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that returns the already-read body once, then defers to the server (disconnects)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay

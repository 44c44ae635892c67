"""Auth first, then a bounded body, for every non-streaming ``/v1`` route (a pure ASGI middleware).

Before anything else, for every HTTP request: more than one ``Authorization`` header is a 400 (one place for
the rule, so no route can read the first while another reads the last).

FastAPI reads and parses a route's whole JSON body before it resolves any dependency, auth included, so
without this an anonymous client could make the server buffer any amount (and get 415/422 schema feedback
instead of 401). :class:`BodyLimitMiddleware` runs before routing and, for ``/v1`` paths other than the
streaming ``/v1/keys/{name}/encrypt``, ``/decrypt`` and ``/rewrap`` (which authenticate first themselves, then
read a body of up to ``small_body_max_bytes`` whole and stream any other):

1. verifies the bearer token (on the Transit API's paths, ``X-Vault-Token`` when no ``Authorization`` is
   sent: :func:`credential`) (401 in the service's JSON error shape, body unread, when it is missing or
   invalid); the route still checks scopes and key patterns. ``/v1/sys/seal-status`` and ``/unseal`` take
   no token (:data:`NO_TOKEN_PATHS`: a sealed server can verify tokens, but an operator holding a share
   needs none, as with Vault); their bodies are bounded all the same;
2. answers 413 when ``Content-Length`` exceeds the route's limit, before reading anything;
3. reads the body (Content-Length or chunked) into one buffer counting bytes, 413 as soon as the limit is
   passed, and hands the complete body to the route.

A batch body first reserves its size in the service's batch budget (:class:`~app.services.budget.ByteBudget`,
``batch_buffer_budget_bytes``; 503 + ``Retry-After`` when it does not fit in ``batch_buffer_wait_seconds``,
the body unread) and returns it once the route has answered; the buffer is handed on without a copy.

Limits: the batch routes and the Transit routes that take ``batch_input`` (encrypt, decrypt, rewrap, hmac,
verify) take ``batch_max_bytes``, every other ``/v1`` route ``max_json_body``.
"""

from __future__ import annotations

from collections.abc import Awaitable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_response, keystream_error_response
from app.api.params import is_ascii_integer
from app.api.paths import (
    BATCH_ROUTE,
    NO_TOKEN_PATHS,
    STREAMING_ROUTE,
    TRANSIT,
    TRANSIT_BATCH_ROUTE,
    V1,
    remember,
)
from app.errors import BadRequestError, KeystreamError
from app.services.budget import ByteBudget, OverloadedError
from app.state import ServiceState

#: Key in the ASGI ``scope["state"]`` under which this middleware leaves the verified
#: :class:`~app.services.security.Principal`, so the route's dependency does not verify it a second time.
#: Only server code writes the scope; a client cannot set it.
VERIFIED_PRINCIPAL = "keystream.principal"
#: The answer to a request with more than one ``Authorization`` header (any route).
REPEATED_AUTHORIZATION = BadRequestError("more than one Authorization header: send exactly one bearer token")
#: The answer to a Transit API request with more than one ``X-Vault-Token`` header.
REPEATED_VAULT_TOKEN = BadRequestError("more than one X-Vault-Token header: send exactly one token")
#: A batch body without Content-Length first reserves this much of the batch budget, then doubles it.
CHUNKED_RESERVE = 1 << 20


def is_batch(path: str) -> bool:
    """Whether ``path`` takes a batch body: the batch routes and the Transit routes with ``batch_input``."""
    return bool(BATCH_ROUTE.fullmatch(path) or TRANSIT_BATCH_ROUTE.fullmatch(path))


def body_limit(path: str, json_limit: int, batch_limit: int) -> int | None:
    """The body limit of ``path``: ``None`` for paths the middleware leaves alone (not ``/v1``, streaming)."""
    if not path.startswith(V1) or STREAMING_ROUTE.fullmatch(path):
        return None
    return batch_limit if is_batch(path) else json_limit


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


def credential(scope: Scope) -> str | None:
    """The request's ``Authorization`` value; on a Transit API path without one, its ``X-Vault-Token``
    header as a bearer token (what Vault's clients, hvac included, send). The token is the same Keystream
    token either way."""
    authorization = _header(scope, b"authorization")
    if authorization is None and scope["path"].startswith(TRANSIT):
        token = _header(scope, b"x-vault-token")
        if token is not None:
            return f"Bearer {token}"
    return authorization


class BodyLimitMiddleware:
    """Authenticate, then read a bounded body, before the JSON ``/v1`` routes run (see the module doc)."""

    def __init__(self, app: ASGIApp, json_limit: int, batch_limit: int) -> None:
        self.app = app
        self.json_limit = json_limit
        self.batch_limit = batch_limit
        #: :func:`body_limit` by path (it depends on the path alone, with this instance's limits, so it is
        #: never stale): a dictionary lookup instead of a prefix test and regular expressions on every
        #: request, within :func:`~app.api.paths.remember`'s bounds.
        self._limits: dict[str, int | None] = {}

    def _limit(self, path: str) -> int | None:
        """:func:`body_limit` of ``path``, remembered (see :attr:`_limits`)."""
        try:
            return self._limits[path]
        except KeyError:
            return remember(self._limits, path, body_limit(path, self.json_limit, self.batch_limit))

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # Not a coroutine itself: it returns the awaitable that does the work (the next layer's for a path
        # it leaves alone, such as the streaming routes), so no coroutine of this layer's runs in between.
        if scope["type"] != "http":
            return self.app(scope, receive, send)
        if _repeated(scope, b"authorization"):
            return keystream_error_response(REPEATED_AUTHORIZATION, scope)(scope, receive, send)
        # The path first: a prefix test costs a tenth of a pass over the headers.
        if scope["path"].startswith(TRANSIT) and _repeated(scope, b"x-vault-token"):
            return keystream_error_response(REPEATED_VAULT_TOKEN, scope)(scope, receive, send)
        limit = self._limit(scope["path"])
        if limit is None:
            return self.app(scope, receive, send)
        return self._bounded(scope, receive, send, limit)

    async def _bounded(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        """The token, then the body of at most ``limit`` bytes, then the route (see the module doc)."""
        state: ServiceState = scope["app"].state.keystream
        try:
            if scope["path"] not in NO_TOKEN_PATHS:
                # A cached token is answered without a coroutine; a miss awaits the keystore's read.
                authorization = credential(scope)
                principal = state.tokens.authenticate_cached(authorization)
                if principal is None:
                    principal = await state.tokens.authenticate(authorization)
                scope.setdefault("state", {})[VERIFIED_PRINCIPAL] = principal
            declared = _header(scope, b"content-length")
            if declared is not None and not is_ascii_integer(declared):
                await error_response(400, "bad_request", "Content-Length must be a number", scope=scope)(
                    scope, receive, send
                )
                return
        except KeystreamError as exc:
            await keystream_error_response(exc, scope)(scope, receive, send)
            return
        if declared is not None and int(declared) > limit:
            await _too_large(scope, receive, send, f"request body is {declared} bytes; the limit is {limit}")
            return
        if is_batch(scope["path"]):
            await _batch(self.app, scope, receive, send, state.batch_budget, limit, declared)
            return
        body = await _read_body(scope, receive, send, limit, None)
        if body is not None:
            await self.app(scope, _replay(bytes(body), receive), send)


async def _batch(
    app: ASGIApp,
    scope: Scope,
    receive: Receive,
    send: Send,
    budget: ByteBudget,
    limit: int,
    declared: str | None,
) -> None:
    """A batch body: reserve its bytes in the budget (503 when they do not fit in time), read it into one
    buffer, hand that buffer on (no copy) and return the bytes when the route has answered."""
    held = _Held(budget, scope, receive, send)
    if not await held.cover(int(declared) if declared else CHUNKED_RESERVE):
        return
    try:
        body = await _read_body(scope, receive, send, limit, held)
        if body is not None:
            replay = _replay(body, receive)
            del body  # the replayed message holds the only reference; the route lets it go after decoding
            await app(scope, replay, send)
    finally:
        await budget.release(held.amount)


class _Held:
    """The budget bytes one batch request holds; a chunked body's reservation doubles as the body grows."""

    def __init__(self, budget: ByteBudget, scope: Scope, receive: Receive, send: Send) -> None:
        self.budget = budget
        self.amount = 0
        self._reply = (scope, receive, send)

    async def cover(self, nbytes: int) -> bool:
        """Hold at least ``nbytes`` (or the whole budget); ``False`` once the 503 has been sent."""
        if nbytes <= self.amount or self.amount >= self.budget.limit:
            return True
        wanted = min(max(2 * self.amount, nbytes), self.budget.limit) - self.amount
        try:
            self.amount += await self.budget.reserve(wanted)
        except OverloadedError as exc:
            response = keystream_error_response(exc)
            response.headers["Connection"] = "close"  # the body stays unread
            await response(*self._reply)
            return False
        return True


async def _read_body(
    scope: Scope, receive: Receive, send: Send, limit: int, held: _Held | None
) -> bytearray | None:
    """Read the body into one buffer (preallocated from Content-Length), 413 beyond ``limit``.

    With ``held``, a body longer than its reservation (chunked) grows the reservation first.
    Returns ``None`` when a response was sent or the client left.
    """
    declared = _header(scope, b"content-length")
    expected = int(declared) if declared is not None else 0
    body = bytearray(expected)
    filled = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None  # nobody to answer; the route never runs
        chunk = message.get("body", b"")
        end = filled + len(chunk)
        if end > limit:
            await _too_large(scope, receive, send, f"request body exceeds the limit of {limit} bytes")
            return None
        if held is not None and not await held.cover(end):
            return None
        if end <= expected:
            with memoryview(body) as view:
                view[filled:end] = chunk  # into the preallocated buffer: no reallocation, no copy
        else:
            body[filled:] = chunk
        filled = end
        if not message.get("more_body", False):
            break
    if filled < expected:
        del body[filled:]
    return body


async def _too_large(scope: Scope, receive: Receive, send: Send, message: str) -> None:
    response = error_response(413, "payload_too_large", message, {"Connection": "close"}, scope)
    await response(scope, receive, send)


def _replay(body: bytes | bytearray, receive: Receive) -> Receive:
    """A ``receive`` that returns the already-read body once, then defers to the server (disconnects)."""
    pending: list[Message] = [{"type": "http.request", "body": body, "more_body": False}]

    async def replay() -> Message:
        if pending:
            return pending.pop()
        return await receive()

    return replay

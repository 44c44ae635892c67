"""The 500 for an unexpected exception: a layer of the one middleware stack (:mod:`app.api.middleware`).

Domain errors never reach it: the routes' exception handlers (FastAPI's) and the fast dispatcher
(:mod:`app.api.hotpath`) turn them into their JSON answers with :mod:`app.api.errors`, the one module that
maps errors to HTTP. What reaches this layer is a bug.
"""

from __future__ import annotations

from starlette.types import Message, Receive, Scope, Send

from app.api.errors import unexpected_error_response
from app.api.middleware.layer import Layer


class UnexpectedErrorMiddleware(Layer):
    """An unexpected exception becomes a 500 JSON error without traceback.

    The log line names the exception type and the route and carries the traceback's frames, never the
    exception's message (which could quote request data). When the response has already started the
    exception is re-raised so the server aborts the connection: a client must never see a cleanly ended body
    after a failure (the sealed-decrypt rule).
    """

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if started:
                raise
            await unexpected_error_response(exc, scope)(scope, receive, send)

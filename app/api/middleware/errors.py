"""The 500 for an unexpected exception, answered by the outermost layer of the one middleware stack
(:class:`~app.api.middleware.metrics.ObservedMiddleware`, :mod:`app.api.middleware`).

Domain errors never reach it: the routes' exception handlers (FastAPI's) and the fast dispatcher
(:mod:`app.api.hotpath`) turn them into their JSON answers with :mod:`app.api.errors`, the one module that
maps errors to HTTP. What reaches it is a bug.
"""

from __future__ import annotations

from starlette.types import Receive, Scope, Send

from app.api.errors import unexpected_error_response


async def answer_unexpected(exc: Exception, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer an unexpected exception raised before the response started with a 500 JSON error without
    traceback.

    The log line names the exception type and the route and carries the traceback's frames, never the
    exception's message (which could quote request data). One raised after the response started is not
    answered but re-raised by the layer, so the server aborts the connection: a client must never see a
    cleanly ended body after a failure (the sealed-decrypt rule).
    """
    await unexpected_error_response(exc, scope)(scope, receive, send)

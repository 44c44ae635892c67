"""The outermost layer: HTTP request metrics (in-flight requests and durations, labelled by route template),
and inside them the 500 of anything unexpected (:mod:`app.api.middleware.errors`).

The request histogram is labelled by route *template* (``/v1/keys/{name}/encrypt``), never by the raw path,
so key names never reach a label. Unmatched paths share the label ``unmatched``. Both are recorded through
:mod:`app.core.metric_buffer` (applied in batches; the lag is documented there).

The two jobs share one layer because both watch the same thing, whether and with which status the response
started: as two layers they cost two coroutines and two wrappers around every message sent, about 2% of a
1 KiB encrypt's work in process.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable

from starlette.types import Message, Receive, Scope, Send

from app.api.middleware.errors import answer_unexpected
from app.api.middleware.layer import Layer
from app.core.metric_buffer import BufferedHistogram, InFlight
from app.core.metrics import HTTP_REQUEST_SECONDS, INFLIGHT_REQUESTS

_INFLIGHT = InFlight(INFLIGHT_REQUESTS)


class ObservedMiddleware(Layer):
    """Counts in-flight requests and times each one, from first byte received to last byte sent; an
    unexpected exception inside becomes the 500 (:func:`~app.api.middleware.errors.answer_unexpected`),
    which is what the metrics record then."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status: int | None = None  # until the response starts

        def observed_send(message: Message) -> Awaitable[None]:
            # Not a coroutine itself: it notes the status and returns the server's send, which the sender's
            # await drives (no coroutine of this layer's per message).
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            return send(message)

        _INFLIGHT.enter()
        try:
            try:
                await self.app(scope, receive, observed_send)
            except Exception as exc:
                if status is not None:
                    raise  # the response started: the server aborts the connection
                await answer_unexpected(exc, scope, receive, observed_send)
        finally:
            _INFLIGHT.leave()
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            seconds = time.perf_counter() - start
            answered = 500 if status is None else status
            _request_seconds(route, scope.get("method", ""), answered).observe(seconds)


@functools.lru_cache(maxsize=1024)  # bounded like the label set: route templates x methods x statuses
def _request_seconds(route: str, method: str, status: int) -> BufferedHistogram:
    """The buffered request histogram child of an answered request: ``route`` is its path template (or
    ``unmatched``), never the raw path."""
    return BufferedHistogram(HTTP_REQUEST_SECONDS.labels(route=route, method=method, status=str(status)))

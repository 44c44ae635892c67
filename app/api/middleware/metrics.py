"""HTTP request metrics: in-flight requests and durations, labelled by route template.

The request histogram is labelled by route *template* (``/v1/keys/{name}/encrypt``), never by the raw path,
so key names never reach a label. Unmatched paths share the label ``unmatched``. Both are recorded through
:mod:`app.core.metric_buffer` (applied in batches; the lag is documented there).
"""

from __future__ import annotations

import functools
import time

from starlette.types import Message, Receive, Scope, Send

from app.api.middleware.layer import Layer
from app.core.metric_buffer import BufferedGauge, BufferedHistogram
from app.core.metrics import HTTP_REQUEST_SECONDS, INFLIGHT_REQUESTS

_INFLIGHT = BufferedGauge(INFLIGHT_REQUESTS)


class HttpMetricsMiddleware(Layer):
    """Counts in-flight requests and times each one, from first byte received to last byte sent."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def timed_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        _INFLIGHT.inc()
        try:
            await self.app(scope, receive, timed_send)
        finally:
            _INFLIGHT.dec()
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            observe_request(route, scope.get("method", ""), status, time.perf_counter() - start)


def observe_request(route: str, method: str, status: int, seconds: float) -> None:
    """Record one answered request: ``route`` is its path template (or ``unmatched``), never the raw path."""
    _request_seconds(route, method, status).observe(seconds)


@functools.lru_cache(maxsize=1024)  # bounded like the label set: route templates x methods x statuses
def _request_seconds(route: str, method: str, status: int) -> BufferedHistogram:
    return BufferedHistogram(HTTP_REQUEST_SECONDS.labels(route=route, method=method, status=str(status)))

"""What every layer of the middleware stack (:mod:`app.api.middleware`) is: an ASGI app over the next one.

The layers that take nothing but the app they wrap share this constructor, so the stack's plumbing is
written once; each layer's ``__call__`` is its own job. It adds nothing per request (no call, no
allocation): only the construction, once per composed stack, goes through it.
"""

from __future__ import annotations

from starlette.types import ASGIApp


class Layer:
    """An ASGI middleware holding ``app``, the next layer inward (or the route)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

"""The middleware stack every HTTP request goes through, listed once and composed by one function.

Outermost first:

1. :class:`~app.api.middleware.metrics.ObservedMiddleware`: the in-flight gauge and the request duration,
   labelled with the route template (``unmatched`` for a request refused before routing), and inside them
   anything unexpected becomes the 500 ``internal_error`` (:mod:`app.api.middleware.errors`; or aborts the
   connection once the response started);
2. :class:`~app.api.middleware.audit.AuditMiddleware`: the audit records of every ``/v1`` request and its
   ``Keystream-Request-Id``;
3. :class:`~app.api.middleware.body_limit.BodyLimitMiddleware`: one ``Authorization`` header, then, for the
   JSON ``/v1`` routes, the token and a bounded body.

:func:`middleware` is the list: :func:`app.main.create_app` hands it to FastAPI, which puts it between its
own outer error layer and its exception handlers. :func:`wrap` composes the same list around another ASGI
app: the fast dispatcher (:mod:`app.api.hotpath`) runs its routes inside it, so both ways to a route pass
the same layers in the same order. The layers that wrap nothing but the next app share their constructor
(:class:`~app.api.middleware.layer.Layer`).
"""

from __future__ import annotations

from starlette.middleware import Middleware
from starlette.types import ASGIApp

from app.api.middleware.audit import AuditMiddleware
from app.api.middleware.body_limit import BodyLimitMiddleware
from app.api.middleware.metrics import ObservedMiddleware
from app.core.config import Settings


def middleware(settings: Settings) -> list[Middleware]:
    """The service's middleware, outermost first, with the limits of ``settings``."""
    return [
        Middleware(ObservedMiddleware),
        Middleware(AuditMiddleware),
        Middleware(
            BodyLimitMiddleware, json_limit=settings.max_json_body, batch_limit=settings.batch_max_bytes
        ),
    ]


def wrap(app: ASGIApp, settings: Settings) -> ASGIApp:
    """``app`` inside :func:`middleware`'s layers, as Starlette composes them (the first is the outermost).

    Each layer is handed the next one's bound ``__call__``, and the stack is its outermost layer's: calling
    a bound method is a direct call, where calling a layer instance first looks ``__call__`` up on its
    class and packs the arguments in a tuple, once per layer on every request.
    """
    for cls, args, kwargs in reversed(middleware(settings)):
        app = cls(app, *args, **kwargs).__call__
    return app

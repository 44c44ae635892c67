"""JSON request bodies as RFC 8259 defines them, on every FastAPI route: UTF-8 text, numbers that are numbers.

Starlette's ``Request.json()`` hands the raw bytes to :func:`json.loads`, which guesses UTF-16 and UTF-32 from
the zero bytes of the first characters and accepts ``NaN``, ``Infinity`` and ``-Infinity``. Neither is JSON
(RFC 8259: text exchanged between systems MUST be UTF-8; section 6 has no such numbers), and the batch routes'
decoder (msgspec) refuses both, so the same body was a 201 on one route and a 422 on another. Every FastAPI
route of the service is a :class:`StrictJsonRoute`, whose requests parse their body with :func:`loads`: a
UTF-16 or UTF-32 body and ``NaN`` become the same 422 ``validation_error`` as any other malformed JSON
(:func:`app.api.errors.malformed_json_error`).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

__all__ = ["NonJsonNumberError", "StrictJsonRequest", "StrictJsonRoute", "loads"]


class NonJsonNumberError(ValueError):
    """``NaN``, ``Infinity`` or ``-Infinity`` in a body: Python's JSON reader takes them, JSON has no such
    numbers."""


def _refuse_constant(name: str) -> Any:
    raise NonJsonNumberError(f"{name} is not a JSON number")


#: The one decoder :func:`loads` uses: ``json.loads`` with ``parse_constant`` builds a new one per call.
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def loads(body: bytes) -> Any:
    """Parse ``body`` as a JSON text: UTF-8 only, no ``NaN``/``Infinity``.

    Raises:
        UnicodeDecodeError: the bytes are not UTF-8.
        json.JSONDecodeError: the text is not JSON (a UTF-16 or UTF-32 body ends here: its zero bytes are
            control characters outside strings).
        NonJsonNumberError: ``NaN``, ``Infinity`` or ``-Infinity``.
        RecursionError: nesting deeper than the parser's recursion limit.
    """
    return _DECODER.decode(body.decode("utf-8"))


class StrictJsonRequest(Request):
    """A request whose :meth:`json` is :func:`loads` (FastAPI reads a JSON body through it)."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = loads(await self.body())
        return self._json


class StrictJsonRoute(APIRoute):
    """A FastAPI route whose handler sees a :class:`StrictJsonRequest` (FastAPI's documented way to change
    the request class of a route)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJsonRequest(request.scope, request.receive, request._send))

        return strict_handler

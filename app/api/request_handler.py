"""A JSON route's endpoint as a handler of the request alone, for the fast dispatcher (app.api.hotpath).

FastAPI's way to a small JSON route (route matching over every route of the service, dependency solving, the
response model) cost about three times the route's own work for a 1 KiB HMAC or a Transit encrypt.
:func:`request_handler` gives an endpoint what FastAPI would, in FastAPI's order: the body parsed
(:func:`~app.api.json_body.parse_body`), the ``application/json`` check (unless the route reads JSON whatever
its ``Content-Type``, as the Transit API's do), the body validated as the endpoint's model, then its other
parameters by name: path parameters, ``state``, ``principal`` (the one the body-limit middleware verified),
``request`` and ``response`` (a response whose headers, such as ``Cache-Control``, are added to the answer, as
FastAPI adds a ``Response`` parameter's). A JSON answer is sent as FastAPI sends a response model's when
nothing in it is ``None`` (the endpoints served this way never answer one). The tests of the fast dispatcher
send each route's requests, good and bad, both ways and compare answers, audit records and metrics.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api.deps import get_principal, get_state, require_json
from app.api.json_body import parse_body, validate_body

__all__ = ["Handler", "request_handler"]

#: A route's handler as the fast dispatcher calls it: the request alone.
Handler = Callable[[Request], Awaitable[Response]]
#: The parameters :func:`request_handler` knows besides the path's.
_KNOWN = frozenset({"body", "state", "principal", "request", "response"})


def request_handler(
    endpoint: Callable[..., Awaitable[Any]],
    model: type[BaseModel],
    *,
    any_content_type: bool = False,
    status_code: int = 200,
) -> Handler:
    """``endpoint`` (whose parameters are named as :data:`_KNOWN` says, the others path parameters) as a
    handler of the request alone; see the module doc.

    ``any_content_type``: the body is JSON whatever its ``Content-Type`` (no 415).
    """
    names = tuple(inspect.signature(endpoint).parameters)
    wants_state, wants_principal = "state" in names, "principal" in names
    wants_request, wants_response = "request" in names, "response" in names
    path_names = tuple(name for name in names if name not in _KNOWN)

    async def handle(request: Request) -> Response:
        data = await parse_body(request, any_type=any_content_type)
        if not any_content_type:
            await require_json(request)
        body = validate_body(model, data)
        state = await get_state(request)
        given: dict[str, Any] = {name: request.path_params[name] for name in path_names}
        given["body"] = body
        if wants_state:
            given["state"] = state
        if wants_principal:
            given["principal"] = await get_principal(request, state)
        if wants_request:
            given["request"] = request
        extra = Response() if wants_response else None
        if extra is not None:
            del extra.headers["content-length"]
            given["response"] = extra
        answer = await endpoint(**given)
        if isinstance(answer, Response):
            return answer
        sent = JSONResponse(answer, status_code)
        if extra is not None:
            sent.headers.raw.extend(extra.headers.raw)
        return sent

    return handle

"""What the Transit-compatible API's routes share: Vault's answer envelope, its request-body rules (the
route class that reads every body as JSON, the model base) and the OpenAPI entries of its errors (whose
shape :mod:`app.api.errors` writes).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app.api.strict_json import StrictJsonRoute

_JSON = (b"content-type", b"application/json")
_ENCODER = msgspec.json.Encoder()

Handler = Callable[..., Coroutine[Any, Any, Any]]


def vault_write(router: APIRouter, path: str, **options: Any) -> Callable[[Handler], Handler]:
    """Register a handler for ``POST`` and ``PUT`` on ``path``, as Vault serves its writes: the ``vault``
    and ``bao`` commands write with ``PUT``, hvac with ``POST``. Both are in the OpenAPI document (one route
    per method, so their operation ids differ)."""

    def decorate(handler: Handler) -> Handler:
        router.put(path, **options)(handler)
        return router.post(path, **options)(handler)

    return decorate


class VaultJsonRoute(StrictJsonRoute):
    """A route that reads its body as JSON whatever its ``Content-Type``, as Vault does: ``curl -d`` (form
    encoded, by its default) and clients that send none work against Vault, so they must here. The body is
    still parsed as strict JSON (:mod:`app.api.strict_json`)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def vault_handler(request: Request) -> Response:
            scope = request.scope
            scope["headers"] = [(name, value) for name, value in scope["headers"] if name != _JSON[0]]
            scope["headers"].append(_JSON)
            return await handler(request)  # builds its request from the scope, so it sees the new type

        return vault_handler


def transit_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for a Transit route's own error statuses (Vault's ``{"errors": [...]}``)."""
    return {code: {"description": "an error in Vault's shape"} for code in statuses}


def vault_answer(data: dict[str, Any] | None) -> dict[str, Any]:
    """Vault's response envelope around ``data``."""
    return {
        "request_id": str(uuid.uuid4()),
        "lease_id": "",
        "renewable": False,
        "lease_duration": 0,
        "data": data,
        "wrap_info": None,
        "warnings": None,
        "auth": None,
        "mount_type": "transit",
    }


def vault_response(data: dict[str, Any], status_code: int = 200) -> Response:
    """:func:`vault_answer` of ``data`` as the response FastAPI (or a :class:`JSONResponse`) would send,
    byte for byte, written by msgspec: for a batch of 100 base64 texts of 1 KiB, the standard library's
    encoder spent about a third of the request escaping them.

    msgspec writes compact JSON with non-ASCII text as UTF-8 and escapes what ``json.dumps(...,
    ensure_ascii=False)`` escapes (checked over every code point in the tests); for what it refuses (a lone
    surrogate in a ``reference``) the answer is the :class:`JSONResponse`, which fails as it did before.
    """
    answer = vault_answer(data)
    try:
        content = _ENCODER.encode(answer)
    except (TypeError, ValueError, OverflowError):
        return JSONResponse(answer, status_code=status_code)
    return Response(content, status_code=status_code, media_type="application/json")


class TransitModel(BaseModel):
    """A Transit request body: fields Keystream does not know are ignored, as Vault ignores them (hvac
    sends some as ``null``); the known ones must have their JSON type (Vault would also read ``"1"`` as 1:
    its clients send numbers)."""

    model_config = ConfigDict(extra="ignore", strict=True)

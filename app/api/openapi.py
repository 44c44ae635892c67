"""The OpenAPI document, made to match what the service does (a schemathesis run checks it in the tests).

FastAPI's generated document knows neither the service's error shape nor the answers that come from outside
a route, so :func:`build_openapi` completes it in one place:

* every ``/v1`` operation may answer 400 (more than one ``Authorization`` header, a malformed body or
  ``Content-Length``), 401 (with the ``bearer`` security requirement), 413 (body limits, associated data)
  and 503 (keystore or backend unavailable); the others (``/healthz``, ``/readyz``, ``/metrics``) take no
  input, so their only 400 is the one every route gives to more than one ``Authorization`` header, and it
  says so; routes declare the rest with :func:`errors`;
* every 4xx/5xx answer has the :data:`ERROR_SCHEMA` body (FastAPI's 422 schema is not what we send);
* the ``name`` path parameter carries the key-name pattern, ``token_id`` the token-id pattern (but not
  ``self``), ``backend``
  the backends this service accepts;
* the streaming routes (plain Starlette routes) come from :func:`app.api.params.openapi_paths`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.params import openapi_paths
from app.api.paths import NO_TOKEN_PATHS, V1
from app.keystore import KEY_NAME_PATTERN
from app.keystore.checks import TOKEN_ID_PATTERN

#: The one error body of the service (see :mod:`app.api.errors`).
ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}

_DESCRIPTIONS = {
    400: "bad request: malformed input, more than one Authorization header, or (decrypt) a ciphertext that "
    "does not verify",
    401: "missing or invalid bearer token",
    403: "the token lacks the scope or no key pattern matches",
    404: "no such key, key version or token",
    409: "the key exists already, or deletion is not allowed",
    413: "body or associated data over the limit",
    415: "wrong Content-Type",
    422: "a field or parameter is invalid (the message names it)",
    429: "too many attempts from this address: retry after Retry-After seconds",
    503: "keystore or backend unavailable",
}
#: What a 400 means outside ``/v1``: those routes read no body, parameter or token.
_NOT_V1_400 = "more than one Authorization header (refused on every route)"
#: Answers every operation can give, and every ``/v1`` operation.
_EVERY_OPERATION = (400,)
_EVERY_V1_OPERATION = (400, 401, 413, 503)

_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
_BEARER = {"type": "http", "scheme": "bearer", "bearerFormat": "ks_<id>_<secret>"}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for a route's own error statuses (the body schema is added by the builder)."""
    return {status: {"description": _DESCRIPTIONS[status]} for status in statuses}


def _anchored(pattern: str) -> str:
    return f"^{pattern}$"


def _complete_parameters(operation: dict[str, Any], backends: Sequence[str]) -> None:
    for parameter in operation.get("parameters", []):
        schema = parameter.setdefault("schema", {})
        if parameter["in"] == "path" and parameter["name"] == "name":
            schema.update({"type": "string", "pattern": _anchored(KEY_NAME_PATTERN.pattern)})
        elif parameter["in"] == "path" and parameter["name"] == "token_id":
            # "self" is GET /v1/tokens/self, never a token id (app.api.routes.tokens).
            schema.update({"type": "string", "pattern": _anchored("(?!self$)" + TOKEN_ID_PATTERN.pattern)})
        elif parameter["name"] == "backend":
            parameter["schema"] = {"enum": list(backends)}


def _description(path: str, status: int) -> str | None:
    """The description of ``status`` on ``path``, or None to keep the route's own."""
    if status == 400 and not path.startswith(V1):
        return _NOT_V1_400
    return _DESCRIPTIONS.get(status)


def _complete_responses(path: str, operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    common = _EVERY_V1_OPERATION if path.startswith(V1) else _EVERY_OPERATION
    for status in common:
        responses.setdefault(str(status), {"description": _DESCRIPTIONS[status]})
    for status, response in responses.items():
        if int(status) >= 400:
            response["content"] = _ERROR_CONTENT
            description = _description(path, int(status))
            if description is not None:
                response["description"] = description


def _batch_errors(paths: dict[str, Any], batch_paths: Sequence[str]) -> None:
    """The batch routes read their JSON body themselves (bounded, :mod:`app.api.batch_json` documents it):
    add the errors that reading it can give."""
    for path in batch_paths:
        operation = paths.get(path, {}).get("post")
        if operation is not None:
            responses = operation.setdefault("responses", {})
            for status, entry in errors(403, 404, 415, 422).items():
                responses.setdefault(str(status), entry)


def build_openapi(app: FastAPI, backends: Sequence[str], batch_paths: Sequence[str]) -> dict[str, Any]:
    """The OpenAPI document of ``app`` (see the module docstring for what is added to FastAPI's).

    Args:
        app: the application.
        backends: the backend names a request may choose (the ``backend`` parameter's enum).
        batch_paths: the paths of routes that read their JSON body by hand.
    """
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    paths: dict[str, Any] = schema["paths"]
    paths.update(openapi_paths())
    _batch_errors(paths, batch_paths)
    for path, item in paths.items():
        for operation in item.values():
            if path.startswith(V1) and path not in NO_TOKEN_PATHS:
                operation["security"] = [{"bearer": []}]
            _complete_parameters(operation, backends)
            _complete_responses(path, operation)
    components = schema.setdefault("components", {})
    components["securitySchemes"] = {"bearer": _BEARER}
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):  # FastAPI's 422 body, replaced by Error
        schemas.pop(unused, None)
    schemas["Error"] = ERROR_SCHEMA
    return schema

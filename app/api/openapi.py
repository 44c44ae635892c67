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
* the Transit-compatible API's operations (``/v1/transit/``) answer errors in Vault's shape
  (:data:`VAULT_ERROR_SCHEMA`), with 403 where the native API says 401, and take the token as
  ``X-Vault-Token`` too;
* the streaming routes (plain Starlette routes, which FastAPI does not list) come from :func:`openapi_paths`,
  which documents the parameters :class:`app.api.params.CryptoParams` parses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from app.api.params import BASE64_PATTERN, MAX_INTEGER_PARAMETER
from app.api.paths import NO_TOKEN_PATHS, STREAMING_PATHS, TRANSIT, V1
from app.keystore import KEY_NAME_PATTERN
from app.keystore.checks import TOKEN_ID_PATTERN
from app.services.raw import MAX_OFFSET

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

#: The Transit-compatible API's error body (Vault's; see :mod:`app.api.errors`), or, for an encrypt, decrypt
#: or rewrap batch with a failed item, the ordinary answer whose ``data.batch_results`` hold every result.
VAULT_ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "anyOf": [{"required": ["errors"]}, {"required": ["data"]}],
    "properties": {"errors": {"type": "array", "items": {"type": "string"}}, "data": {"type": "object"}},
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
#: Answers every Transit operation can give (a missing or refused token is 403 there, as in Vault).
_EVERY_TRANSIT_OPERATION = (400, 403, 413, 503)
_TRANSIT_DESCRIPTIONS = {
    400: "bad request: a malformed or invalid field, an unknown key or version, a ciphertext that does not "
    "verify, deletion not allowed, or an encrypt, decrypt or rewrap batch with a failed item",
    403: "missing or invalid token, or the token lacks the scope or no key pattern matches",
    404: "no such key (read), no key to list, or an unknown path",
    405: "GET without ?list=true on the key list",
}

_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
_BEARER = {"type": "http", "scheme": "bearer", "bearerFormat": "ks_<id>_<secret>"}
_VAULT_ERROR_CONTENT = {"application/json": {"schema": {"$ref": "#/components/schemas/VaultError"}}}
_VAULT_TOKEN = {"type": "apiKey", "in": "header", "name": "X-Vault-Token"}


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


def _complete_transit_responses(operation: dict[str, Any]) -> None:
    responses = operation.setdefault("responses", {})
    for status in _EVERY_TRANSIT_OPERATION:
        responses.setdefault(str(status), {"description": ""})
    for status, response in responses.items():
        if int(status) >= 400:
            response["content"] = _VAULT_ERROR_CONTENT
            response["description"] = _TRANSIT_DESCRIPTIONS.get(int(status)) or _DESCRIPTIONS[int(status)]


def _complete_responses(path: str, operation: dict[str, Any]) -> None:
    if path.startswith(TRANSIT):
        _complete_transit_responses(operation)
        return
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
            if path.startswith(TRANSIT):
                operation["security"] = [{"bearer": []}, {"vault_token": []}]
            elif path.startswith(V1) and path not in NO_TOKEN_PATHS:
                operation["security"] = [{"bearer": []}]
            _complete_parameters(operation, backends)
            _complete_responses(path, operation)
    components = schema.setdefault("components", {})
    components["securitySchemes"] = {"bearer": _BEARER, "vault_token": _VAULT_TOKEN}
    schemas = components.setdefault("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):  # FastAPI's 422 body, replaced by Error
        schemas.pop(unused, None)
    schemas["Error"] = ERROR_SCHEMA
    schemas["VaultError"] = VAULT_ERROR_SCHEMA
    return schema


def _parameter(name: str, where: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": where, "required": False, "description": description, "schema": schema}


#: Description of the ``backend`` parameter, shared with the batch routes.
BACKEND_DESCRIPTION = (
    "backend to use; default from settings. `python` is NOT constant-time (table-based AES, "
    "cache-timing exposure on shared hosts): disable it with KEYSTREAM_ENABLED_BACKENDS"
)

_KEY_VERSION_SCHEMA = {"type": "integer", "minimum": 1, "maximum": MAX_INTEGER_PARAMETER}
_IV_SCHEMA = {"type": "string", "pattern": "^[0-9A-Fa-f]{32}$"}
#: The error statuses of encrypt/decrypt besides those every ``/v1`` route has (see :func:`build_openapi`).
_ERROR_STATUSES = ("403", "404", "415", "422")

#: The parameters of encrypt/decrypt for the OpenAPI schema (parsed by :class:`CryptoParams`).
OPENAPI_PARAMETERS = [
    _parameter(
        "format", "query", "sealed (Tink streaming AEAD, default) or raw CTR", {"enum": ["sealed", "raw"]}
    ),
    _parameter("backend", "query", BACKEND_DESCRIPTION, {"type": "string"}),
    _parameter("key_version", "query", "key version (default: latest / try all)", _KEY_VERSION_SCHEMA),
    _parameter(
        "iv",
        "query",
        "raw format: 32 hex digits. On encrypt it needs the decrypt scope too (CTR encrypt with a "
        "chosen IV is decrypt); omit it to get a fresh random IV",
        _IV_SCHEMA,
    ),
    _parameter(
        "offset",
        "query",
        "raw format: stream position of the body",
        {"type": "integer", "minimum": 0, "maximum": MAX_OFFSET},
    ),
    _parameter(
        "Keystream-Associated-Data",
        "header",
        "sealed: associated data, base64",
        {"type": "string", "pattern": BASE64_PATTERN},
    ),
    _parameter(
        "Keystream-IV", "header", "raw: same as iv= (if both are given they must be equal)", _IV_SCHEMA
    ),
    _parameter(
        "Keystream-Key-Version",
        "header",
        "same as key_version= (if both are given they must be equal)",
        _KEY_VERSION_SCHEMA,
    ),
    _parameter(
        "Keystream-Context",
        "header",
        "a derived key's context, base64: required for a derived key, refused for any other",
        {"type": "string", "pattern": BASE64_PATTERN},
    ),
]


#: The parameters of rewrap: decrypt's for sealed messages (``key_version``: the version the body was sealed
#: under; the output is always sealed under the latest version).
_REWRAP_PARAMETERS = [
    parameter
    for parameter in OPENAPI_PARAMETERS
    if parameter["name"] not in ("format", "iv", "offset", "Keystream-IV")
]
_SUMMARIES = {
    "encrypt": ("Encrypt a stream", OPENAPI_PARAMETERS),
    "decrypt": ("Decrypt a stream", OPENAPI_PARAMETERS),
    "rewrap": (
        "Rewrap a sealed stream under the key's latest version (scope rewrap; the plaintext never leaves the "
        "server). key_version and Keystream-Key-Version name the version the body was sealed under",
        _REWRAP_PARAMETERS,
    ),
}


def openapi_paths() -> dict[str, Any]:
    """OpenAPI entries for the streaming routes (plain Starlette routes, which FastAPI does not list)."""
    name = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    octets = {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}
    paths: dict[str, Any] = {}
    for operation, (summary, parameters) in _SUMMARIES.items():
        paths[STREAMING_PATHS[operation]] = {
            "post": {
                "tags": ["crypto"],
                "summary": summary,
                "operationId": f"{operation}_stream",
                "parameters": [name, *parameters],
                "requestBody": octets,
                "responses": {
                    "200": {"description": "the transformed stream", **octets},
                    **{status: {"description": status} for status in _ERROR_STATUSES},
                },
                "security": [{"bearer": []}],
            }
        }
    return paths

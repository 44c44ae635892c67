"""The one place where errors become HTTP: status codes, the JSON error shape, headers, handlers.

Every error the service returns has the shape ``{"error": {"code": "...", "message": "..."}}``. Domain code
raises :mod:`app.errors` (and the few subclasses defined next to the code that raises them); this module
gives each class its status::

    KeystreamError                          400 (base; never raised itself)
    ├── BadRequestError                     400 bad_request
    │   └── InvalidShareError               400 invalid_share        (an unseal share refused)
    ├── DecryptionFailedError               400 decryption_failed
    │   └── SealedDecryptionError           400   (app.formats.sealed: names the failed segment)
    ├── UnauthorizedError                   401 unauthorized         + WWW-Authenticate: Bearer
    │   └── TokenExpiredError               401 token_expired        + WWW-Authenticate: Bearer
    ├── ForbiddenError                      403 forbidden
    ├── NotFoundError                       404 not_found
    │   ├── KeyNotFoundError                404 key_not_found
    │   ├── KeyVersionNotFoundError         404 key_version_not_found
    │   ├── TokenNotFoundError              404 token_not_found
    │   └── RoleNotFoundError               404 role_not_found
    ├── ConflictError                       409 conflict
    │   ├── KeyExistsError                  409 key_exists
    │   ├── KeyRecentlyDeletedError         409 key_recently_deleted + Retry-After (the tombstone's rest)
    │   ├── DeletionNotAllowedError         409 deletion_not_allowed
    │   └── MasterRotationRunningError      409 master_rotation_running (app.keystore.generations)
    ├── PayloadTooLargeError                413 payload_too_large
    ├── UnsupportedMediaTypeError           415 unsupported_media_type
    ├── ValidationError                     422 validation_error
    ├── TooManyRequestsError                429 too_many_requests + Retry-After (unseal attempts)
    └── ServiceUnavailableError             503 unavailable
        ├── BackendUnavailableError         503 backend_unavailable
        │   └── BackendRestartingError      503 backend_restarting + Retry-After (pool being rebuilt)
        ├── OverloadedError                 503 overloaded + Retry-After (app.services.budget)
        ├── KeyUnwrapError                  503 key_unwrap_failed (app.keystore.master)
        ├── AuditUnavailableError           503 audit_unavailable + Retry-After (app.audit.log)
        ├── SealedError                     503 sealed + Retry-After (the server awaits its unseal shares)
        ├── IdentityProviderUnavailableError 503 identity_provider_unavailable + Retry-After (no JWKS)
        └── KeystoreUnavailableError        503 keystore_unavailable + Retry-After (app.keystore.errors)

The Transit-compatible API (paths under ``/v1/transit/``, :mod:`app.api.routes.transit`) answers in Vault's
shape instead, ``{"errors": ["message"]}``, with Vault's statuses for the same mistakes
(:data:`TRANSIT_STATUS_BY_ERROR`): a missing or refused token is 403 (Vault's "permission denied"), an
unknown key or version, a conflict and an invalid field are 400, a path no route serves 404 with
``{"errors": []}``. The native API keeps its own shape.

A subclass without an entry of its own takes its nearest ancestor's status. Besides the hierarchy, FastAPI's
request validation and any malformed JSON body (including bytes that are not UTF-8, a UTF-16 body and
``NaN``/``Infinity``: :mod:`app.api.strict_json`) become 422
``validation_error``, Starlette's ``HTTPException`` (404 for unknown paths,
405...) keeps its status, and any other exception becomes 500 ``internal_error`` without a traceback
(:class:`~app.api.middleware.metrics.ObservedMiddleware`). Messages never contain key material, tokens
or tracebacks.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Match
from starlette.types import Scope

from app.api.paths import TRANSIT
from app.api.strict_json import NonJsonNumberError
from app.audit import AuditUnavailableError
from app.errors import (
    BackendRestartingError,
    BadRequestError,
    ConflictError,
    DecryptionFailedError,
    ForbiddenError,
    IdentityProviderUnavailableError,
    KeyRecentlyDeletedError,
    KeystreamError,
    NotFoundError,
    PayloadTooLargeError,
    SealedError,
    ServiceUnavailableError,
    TooManyRequestsError,
    UnauthorizedError,
    UnsupportedMediaTypeError,
    ValidationError,
)
from app.keystore.errors import KeystoreUnavailableError
from app.services.budget import OverloadedError

#: HTTP status per error class; subclasses inherit their ancestor's (see :func:`http_status`).
STATUS_BY_ERROR: dict[type[KeystreamError], int] = {
    KeystreamError: 400,
    BadRequestError: 400,
    DecryptionFailedError: 400,
    UnauthorizedError: 401,
    ForbiddenError: 403,
    NotFoundError: 404,
    ConflictError: 409,
    PayloadTooLargeError: 413,
    UnsupportedMediaTypeError: 415,
    ValidationError: 422,
    TooManyRequestsError: 429,
    ServiceUnavailableError: 503,
}

#: The Transit-compatible API's status per error class (Vault's for the same mistakes; see the module doc).
TRANSIT_STATUS_BY_ERROR: dict[type[KeystreamError], int] = {
    KeystreamError: 400,
    UnauthorizedError: 403,
    ForbiddenError: 403,
    NotFoundError: 400,
    ConflictError: 400,
    PayloadTooLargeError: 413,
    UnsupportedMediaTypeError: 400,
    ValidationError: 400,
    TooManyRequestsError: 429,
    ServiceUnavailableError: 503,
}

_HTTP_CODES: dict[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
    500: "internal_error",
    503: "unavailable",
}

_logger = logging.getLogger("keystream.errors")


def http_status(exc: KeystreamError, table: dict[type[KeystreamError], int] = STATUS_BY_ERROR) -> int:
    """The HTTP status of ``exc``: its class's entry in ``table`` (:data:`STATUS_BY_ERROR`, or
    :data:`TRANSIT_STATUS_BY_ERROR`), else its nearest ancestor's (400 for a class outside the table)."""
    for klass in type(exc).__mro__:
        status = table.get(klass)
        if status is not None:
            return status
    return 400


def is_transit(scope: Scope | None) -> bool:
    """Whether the request is one of the Transit-compatible API's, which answers errors in Vault's shape."""
    return scope is not None and str(scope.get("path", "")).startswith(TRANSIT)


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    """The one error shape of the service."""
    return {"error": {"code": code, "message": message}}


def vault_error_response(
    status_code: int, messages: list[str], headers: dict[str, str] | None = None
) -> Response:
    """A JSON error response in Vault's shape, ``{"errors": [...]}`` (the Transit-compatible API's)."""
    return JSONResponse({"errors": messages}, status_code=status_code, headers=headers)


def item_error(exc: KeystreamError, reference: str | None) -> dict[str, Any]:
    """One failed item of a batch: the error shape plus the item's ``reference``, in its result slot."""
    result: dict[str, Any] = error_body(exc.code, exc.message)
    result["reference"] = reference
    return result


def error_response(
    status_code: int,
    code: str,
    message: str,
    headers: dict[str, str] | None = None,
    scope: Scope | None = None,
) -> Response:
    """A JSON error response in the service's shape (Vault's when ``scope`` is a Transit API request)."""
    if is_transit(scope):
        return vault_error_response(status_code, [message], headers)
    return JSONResponse(error_body(code, message), status_code=status_code, headers=headers)


def keystream_error_response(exc: KeystreamError, scope: Scope | None = None) -> Response:
    """The response for a domain error: its status, code and message (401 adds ``WWW-Authenticate``; an
    unavailable keystore or audit log, a full batch budget, a backend pool being rebuilt or a recently
    deleted key name, a sealed server add ``Retry-After``). Given a Transit API request's ``scope``: Vault's
    status and shape."""
    transit = is_transit(scope)
    status = http_status(exc, TRANSIT_STATUS_BY_ERROR if transit else STATUS_BY_ERROR)
    headers: dict[str, str] = {}
    if status == 401:
        headers["WWW-Authenticate"] = "Bearer"
    if isinstance(
        exc,
        KeystoreUnavailableError
        | OverloadedError
        | KeyRecentlyDeletedError
        | BackendRestartingError
        | AuditUnavailableError
        | SealedError
        | IdentityProviderUnavailableError
        | TooManyRequestsError,
    ):
        headers["Retry-After"] = str(exc.retry_after_seconds)
    if transit:
        headers.pop("WWW-Authenticate", None)
        return vault_error_response(status, [exc.message], headers or None)
    return error_response(status, exc.code, exc.message, headers or None)


def _keystream_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, KeystreamError)
    return keystream_error_response(exc, request.scope)


def _validation_message(errors: Sequence[Any]) -> str:
    """Summarise pydantic errors by location and message only: inputs are never echoed (they may be keys)."""
    parts = []
    for error in list(errors)[:5]:
        location = ".".join(str(part) for part in error.get("loc", ()) if part != "body") or "request"
        parts.append(f"{location}: {error.get('msg', 'invalid')}")
    more = len(errors) - 5
    return "; ".join(parts) + (f" (and {more} more)" if more > 0 else "")


def _request_validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    return validation_error_response(exc, request.scope)


def validation_error_response(exc: RequestValidationError, scope: Scope | None = None) -> Response:
    """The 422 ``validation_error`` answer to a request that does not fit its route's schema (400 in
    Vault's shape for a Transit API request, as Vault answers a field it cannot parse)."""
    if is_transit(scope):
        return vault_error_response(400, [_validation_message(exc.errors())])
    return error_response(422, "validation_error", _validation_message(exc.errors()))


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def allowed_methods(routes: Sequence[BaseRoute], scope: Scope) -> list[str]:
    """Every method some route serves at the request's path (Starlette's 405 names only the methods of the
    first route whose path matches, e.g. ``GET`` for ``/v1/keys/{name}``, which also takes PATCH and DELETE).
    """
    return [
        method
        for method in _METHODS
        if any(route.matches({**scope, "method": method})[0] == Match.FULL for route in routes)
    ]


def malformed_json_error(
    exc: UnicodeDecodeError | RecursionError | NonJsonNumberError,
) -> RequestValidationError:
    """The validation error for a JSON body that a parser refused outside its grammar checks: bytes that are
    not UTF-8 (RFC 8259 requires it), nesting deeper than the parser's recursion limit, or ``NaN`` and
    ``Infinity``, which Python's reader takes and JSON does not have (:mod:`app.api.strict_json`).

    FastAPI's routes and the batch routes' decoder raise these rather than a JSON decode error; both
    become the same 422 as any other malformed JSON. The message never quotes the offending bytes.
    """
    if isinstance(exc, UnicodeDecodeError):
        message = "JSON decode error: the body is not valid UTF-8"
    elif isinstance(exc, NonJsonNumberError):
        message = f"JSON decode error: {exc}"
    else:
        message = "JSON decode error: nested too deeply"
    return RequestValidationError([{"loc": ("body",), "msg": message, "type": "json_invalid"}])


def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    cause = exc.__cause__
    if exc.status_code == 400 and isinstance(cause, UnicodeDecodeError | RecursionError | NonJsonNumberError):
        # FastAPI's body parsing turns every error but json.JSONDecodeError into a generic 400
        return validation_error_response(malformed_json_error(cause), request.scope)
    code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    headers = dict(exc.headers) if exc.headers else {}
    if exc.status_code == 405:
        headers["Allow"] = ", ".join(allowed_methods(request.app.router.routes, request.scope))
    if is_transit(request.scope) and exc.status_code == 404:
        return vault_error_response(404, [], headers or None)  # Vault's answer to a path or key it lacks
    return error_response(exc.status_code, code, message, headers or None, request.scope)


def unexpected_error_response(exc: Exception, scope: Scope) -> Response:
    """Log ``exc`` (its type, the route and the traceback's frames, never its message, which could quote
    request data) and return the 500 ``internal_error`` answer."""
    route = getattr(scope.get("route"), "path", "unmatched")
    frames = "".join(traceback.format_tb(exc.__traceback__))
    _logger.error("unhandled %s on %s %s\n%s", type(exc).__name__, scope.get("method"), route, frames)
    return error_response(500, "internal_error", "internal server error", scope=scope)


def install_error_handlers(app: FastAPI) -> None:
    """Map every error to ``{"error": {"code", "message"}}`` (see the module docstring for the statuses).

    :class:`~app.errors.KeystreamError` gets :func:`http_status` and its code; FastAPI's request validation
    becomes 422 ``validation_error``; Starlette's ``HTTPException`` keeps its status; any other exception
    becomes 500 ``internal_error`` through :class:`~app.api.middleware.metrics.ObservedMiddleware` (a
    layer of the one middleware stack, :mod:`app.api.middleware`).
    """
    app.add_exception_handler(KeystreamError, _keystream_error)
    app.add_exception_handler(RequestValidationError, _request_validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_exception)

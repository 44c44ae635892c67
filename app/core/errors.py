"""The service's error hierarchy, mapped to HTTP in one place (:func:`install_error_handlers`).

Every error the service returns has the shape ``{"error": {"code": "...", "message": "..."}}``. Messages name
what was wrong and what is allowed; they never contain key material, tokens or tracebacks.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Sequence
from typing import Any, ClassVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class KeystreamError(Exception):
    """Base of every error the service turns into an HTTP response."""

    status_code: ClassVar[int] = 400
    code: ClassVar[str] = "bad_request"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequestError(KeystreamError):
    status_code = 400
    code = "bad_request"


class DecryptionFailedError(KeystreamError):
    """Ciphertext does not authenticate under any allowed key version, or is malformed/truncated."""

    status_code = 400
    code = "decryption_failed"


class UnauthorizedError(KeystreamError):
    status_code = 401
    code = "unauthorized"


class ForbiddenError(KeystreamError):
    status_code = 403
    code = "forbidden"


class NotFoundError(KeystreamError):
    status_code = 404
    code = "not_found"


class KeyNotFoundError(NotFoundError):
    code = "key_not_found"


class KeyVersionNotFoundError(NotFoundError):
    code = "key_version_not_found"


class TokenNotFoundError(NotFoundError):
    code = "token_not_found"


class ConflictError(KeystreamError):
    status_code = 409
    code = "conflict"


class KeyExistsError(ConflictError):
    code = "key_exists"


class DeletionNotAllowedError(ConflictError):
    code = "deletion_not_allowed"


class PayloadTooLargeError(KeystreamError):
    status_code = 413
    code = "payload_too_large"


class UnsupportedMediaTypeError(KeystreamError):
    status_code = 415
    code = "unsupported_media_type"


class ValidationError(KeystreamError):
    status_code = 422
    code = "validation_error"


class ServiceUnavailableError(KeystreamError):
    status_code = 503
    code = "unavailable"


class BackendUnavailableError(ServiceUnavailableError):
    code = "backend_unavailable"


# HTTP mapping ---------------------------------------------------------------------------------------------

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
    500: "internal_error",
    503: "unavailable",
}

_logger = logging.getLogger("keystream.errors")


def error_body(code: str, message: str) -> dict[str, dict[str, str]]:
    """The one error shape of the service."""
    return {"error": {"code": code, "message": message}}


def error_response(
    status_code: int, code: str, message: str, headers: dict[str, str] | None = None
) -> Response:
    """A JSON error response in the service's shape."""
    return JSONResponse(error_body(code, message), status_code=status_code, headers=headers)


def _keystream_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, KeystreamError)
    headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
    return error_response(exc.status_code, exc.code, exc.message, headers)


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
    return error_response(422, "validation_error", _validation_message(exc.errors()))


def _http_exception(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
    message = exc.detail if isinstance(exc.detail, str) else code.replace("_", " ")
    return error_response(exc.status_code, code, message, dict(exc.headers) if exc.headers else None)


class UnexpectedErrorMiddleware:
    """Outermost user middleware: an unexpected exception becomes a 500 JSON error without traceback.

    The log line names the exception type and the route and carries the traceback's frames, never the
    exception's message (which could quote request data). When the response has already started the
    exception is re-raised so the server aborts the connection: a client must never see a cleanly ended body
    after a failure (the sealed-decrypt rule).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            if started:
                raise
            route = getattr(scope.get("route"), "path", "unmatched")
            frames = "".join(traceback.format_tb(exc.__traceback__))
            _logger.error("unhandled %s on %s %s\n%s", type(exc).__name__, scope.get("method"), route, frames)
            response = error_response(500, "internal_error", "internal server error")
            await response(scope, receive, send)


def install_error_handlers(app: FastAPI) -> None:
    """Map every error to ``{"error": {"code", "message"}}``.

    :class:`KeystreamError` keeps its status and code; FastAPI's request validation becomes 422
    ``validation_error``; Starlette's ``HTTPException`` (404 for unknown paths, 405...) keeps its status; any
    other exception becomes 500 ``internal_error`` through :class:`UnexpectedErrorMiddleware`.
    """
    app.add_exception_handler(KeystreamError, _keystream_error)
    app.add_exception_handler(RequestValidationError, _request_validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_exception)
    app.add_middleware(UnexpectedErrorMiddleware)

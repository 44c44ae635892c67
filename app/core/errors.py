"""The service's error hierarchy, mapped to HTTP in one place (:func:`install_error_handlers`).

Every error the service returns has the shape ``{"error": {"code": "...", "message": "..."}}``. Messages name
what was wrong and what is allowed; they never contain key material, tokens or tracebacks.
"""

from __future__ import annotations

from typing import ClassVar


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

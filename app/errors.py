"""The service's domain errors: what went wrong, in words a caller can act on, with no notion of HTTP.

Formats, the keystore, the key cache and the services raise these; only :mod:`app.api.errors` turns them into
HTTP responses (status, the ``{"error": {"code", "message"}}`` shape, headers), as Tink raises ``TinkError``
and lets its caller decide. The tree and each class's HTTP status are drawn in that module's docstring.

Every error carries a stable machine-readable :attr:`KeystreamError.code` and a :attr:`KeystreamError.message`
that names what was wrong and what is allowed; a message never contains key material, tokens or tracebacks.
"""

from __future__ import annotations

from typing import ClassVar


class KeystreamError(Exception):
    """Base of every error the service reports to its caller."""

    code: ClassVar[str] = "bad_request"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class BadRequestError(KeystreamError):
    """The request is malformed or asks for something the key or format does not allow."""

    code = "bad_request"


class DecryptionFailedError(KeystreamError):
    """Ciphertext does not authenticate under any allowed key version, or is malformed/truncated."""

    code = "decryption_failed"


class UnauthorizedError(KeystreamError):
    """No bearer token, or one that does not verify."""

    code = "unauthorized"


class TokenExpiredError(UnauthorizedError):
    """The token verified but its ``expires_at`` has passed: replace it (only a live token can renew)."""

    code = "token_expired"


class ForbiddenError(KeystreamError):
    """The token verified but lacks the scope or key pattern the operation needs."""

    code = "forbidden"


class NotFoundError(KeystreamError):
    """Something named in the request does not exist."""

    code = "not_found"


class KeyNotFoundError(NotFoundError):
    code = "key_not_found"


class KeyVersionNotFoundError(NotFoundError):
    code = "key_version_not_found"


class TokenNotFoundError(NotFoundError):
    code = "token_not_found"


class RoleNotFoundError(NotFoundError):
    code = "role_not_found"


class ConflictError(KeystreamError):
    """The request conflicts with the stored state."""

    code = "conflict"


class KeyExistsError(ConflictError):
    code = "key_exists"


class KeyRecentlyDeletedError(ConflictError):
    """A key of that name was deleted too recently to re-create the name (its tombstone has not expired).

    Until then a replica whose cache is not yet coherent could still encrypt under the deleted key's material
    while the name points to a new key. :attr:`retry_after_seconds` says when the name is free again.
    """

    code = "key_recently_deleted"

    def __init__(self, message: str, retry_after_seconds: int = 1) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class DeletionNotAllowedError(ConflictError):
    code = "deletion_not_allowed"


class PayloadTooLargeError(KeystreamError):
    """A body, an item or a message exceeds a configured or format limit."""

    code = "payload_too_large"


class UnsupportedMediaTypeError(KeystreamError):
    """The body's content type is not the one the operation reads."""

    code = "unsupported_media_type"


class ValidationError(KeystreamError):
    """A parameter has the wrong type or is out of range (the message names it and the allowed values)."""

    code = "validation_error"


class ServiceUnavailableError(KeystreamError):
    """The service cannot do this right now (storage unavailable, key material unusable...)."""

    code = "unavailable"


class BackendUnavailableError(ServiceUnavailableError):
    """The chosen crypto backend is enabled but cannot run on this machine."""

    code = "backend_unavailable"


class BackendRestartingError(BackendUnavailableError):
    """The backend's worker processes died during the call and are being replaced: retry shortly.

    :attr:`retry_after_seconds` says when a retry should find the rebuilt pool.
    """

    code = "backend_restarting"

    def __init__(self, message: str, retry_after_seconds: int = 1) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class SealedError(ServiceUnavailableError):
    """The server is sealed: its master key is not in memory until operators give it enough shares
    (``POST /v1/sys/unseal``). :attr:`retry_after_seconds` is a polite pause, not a promise."""

    code = "sealed"

    def __init__(self, message: str, retry_after_seconds: int = 5) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class IdentityProviderUnavailableError(ServiceUnavailableError):
    """An identity provider's keys (a JWKS or an OIDC discovery document) cannot be fetched and none are
    cached: a login cannot be verified now. :attr:`retry_after_seconds` says when to try again."""

    code = "identity_provider_unavailable"

    def __init__(self, message: str, retry_after_seconds: int = 10) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class InvalidShareError(BadRequestError):
    """An unseal share is refused (malformed, mistyped, foreign, duplicate, wrong): progress is unchanged."""

    code = "invalid_share"


class TooManyRequestsError(KeystreamError):
    """A client sent more attempts than its rate allows (unseal attempts per address); retry after
    :attr:`retry_after_seconds`."""

    code = "too_many_requests"

    def __init__(self, message: str, retry_after_seconds: int = 1) -> None:
        super().__init__(message)
        self.retry_after_seconds = retry_after_seconds


class StartupRefusedError(Exception):
    """The settings or the machine make serving unsafe or impossible; the start stops before serving.

    Not a :class:`KeystreamError`: no request ever sees it. Any layer may raise it while the service starts
    (a TLS file, plain HTTP beyond loopback, the listening address in use, an audit log that cannot be
    written); ``keystream-server serve`` prints its message as one line and exits with status 2. The message
    names the setting (``KEYSTREAM_PORT``...) and what to fix, never a secret.
    """

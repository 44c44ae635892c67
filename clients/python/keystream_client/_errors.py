"""Exceptions of the Keystream client; every one derives from :class:`KeystreamClientError`.

::

    Exception
     └── KeystreamClientError            base of everything the client raises on purpose
          ├── KeystreamAPIError          the service answered with an error (status, code, message)
          ├── KeystreamConnectionError   the service could not be reached (connect, timeout, TLS)
          ├── KeystreamLoginError        the automatic login's JWT file cannot be used
          └── KeystreamStreamError       a streamed response ended early: its output is incomplete

Argument checks raise the built-in :class:`TypeError` / :class:`ValueError` before any request is made; a
local file that cannot be read or written raises :class:`OSError`. Messages never contain the token, key
material or payload bytes.
"""

from __future__ import annotations

import json

#: Bytes of an error response body kept for the error message; the rest is discarded.
MAX_ERROR_BODY = 64 * 1024


class KeystreamClientError(Exception):
    """Base of every error the client raises."""


class KeystreamAPIError(KeystreamClientError):
    """The service answered with an error: ``{"error": {"code", "message"}}``.

    Attributes:
        status: HTTP status code.
        code: the service's machine-readable code, e.g. ``key_not_found``, ``decryption_failed``.
        message: the service's human-readable message.
    """

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message


class KeystreamConnectionError(KeystreamClientError):
    """The service could not be reached (connect failure, timeout, TLS error)."""


class KeystreamLoginError(KeystreamClientError):
    """A client logging in by itself (``KEYSTREAM_ROLE`` and ``KEYSTREAM_JWT_FILE``) cannot use its JWT file:
    missing, unreadable, empty, too long, or not a JWT. The message names the role and the file, never what
    the file holds. A login the service refuses raises :class:`KeystreamAPIError` instead."""


class KeystreamStreamError(KeystreamClientError):
    """A streaming response ended without its terminator, or the connection dropped mid-transfer.

    The service aborts the connection when a sealed segment fails to verify after output has started, so this
    means: the output is incomplete and must be discarded.
    """


def api_error(status: int, body: bytes) -> KeystreamAPIError:
    """The :class:`KeystreamAPIError` for an error response ``body`` (JSON shape or anything else)."""
    try:
        detail = json.loads(body)["error"]
        return KeystreamAPIError(status, str(detail["code"]), str(detail["message"]))
    except (ValueError, KeyError, TypeError):
        text = body[:200].decode("utf-8", "replace").strip() or "no error body"
        return KeystreamAPIError(status, f"http_{status}", text)

"""Errors of the keystore package that more than one implementation raises.

:class:`KeystoreUnavailableError` is how a keystore says "the database cannot serve right now" (down,
unreachable, out of connections, read-only, full). The service answers it with 503 ``keystore_unavailable``
and a ``Retry-After`` of :attr:`KeystoreUnavailableError.retry_after_seconds`; the message says what failed
in general terms and never carries a database URL, a password or key material.
"""

from __future__ import annotations

from typing import ClassVar

from app.errors import ServiceUnavailableError

__all__ = ["KeystoreUnavailableError"]


class KeystoreUnavailableError(ServiceUnavailableError):
    """The keystore's database is unreachable or refuses work for now; retrying later may succeed."""

    code = "keystore_unavailable"
    #: Seconds a client should wait before retrying (the HTTP layer's ``Retry-After``).
    retry_after_seconds: ClassVar[int] = 1

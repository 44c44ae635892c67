"""Logging in by itself with a JWT file: a client given a role and the path of a JWT (``KEYSTREAM_ROLE`` and
``KEYSTREAM_JWT_FILE``, or ``role=`` and ``jwt_file=``) and no token trades the file's JWT for a token
through ``POST /v1/auth/jwt/login`` before its first call, and again before that token expires.

Why the file is read again at every login: in Kubernetes the kubelet rewrites a projected service-account
token's file before the JWT in it expires, so the JWT read at start-up may be stale an hour later. A login
happens when no token is held yet, once :data:`REFRESH_FRACTION` of the held token's lifetime has passed
(the lifetime is the service's ``expires_at - created_at``, so the two clocks need not agree), and once
after the service answered 401 to the held token (revoked, or expired while the process was suspended).

One login runs at a time: :class:`SyncJwtLogin` holds a :class:`threading.Lock` and
:class:`AsyncJwtLogin` an :class:`asyncio.Lock`; calls waiting for it take the token the login got. Errors
name the role and the file, never the JWT or the token.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from keystream_client._errors import KeystreamAPIError, KeystreamLoginError
from keystream_client._models import NewToken

#: Environment variables naming the role and the JWT file of the automatic login.
ROLE_ENV = "KEYSTREAM_ROLE"
JWT_FILE_ENV = "KEYSTREAM_JWT_FILE"
#: The share of a token's lifetime after which the client logs in again (a third of it remains).
REFRESH_FRACTION = 2 / 3
#: The longest JWT the service takes (it answers 413 beyond); a longer file is refused before sending.
MAX_JWT_BYTES = 16 * 1024

#: A login: (role, jwt) -> the issued token.
SyncLoginCall = Callable[[str, str], NewToken]
AsyncLoginCall = Callable[[str, str], Awaitable[NewToken]]


@dataclass(frozen=True)
class JwtFileLogin:
    """Where the automatic login's credential comes from: the role and the JWT file."""

    role: str
    jwt_file: Path

    @classmethod
    def configured(
        cls,
        role: str | None,
        jwt_file: str | os.PathLike[str] | None,
        token: str | None,
        environment_token: bool,
    ) -> JwtFileLogin | None:
        """The automatic login the client's arguments or the environment ask for, or None.

        A ``token`` argument (even empty: no token at all) turns the automatic login off, so it may not come
        with ``role``/``jwt_file``. Otherwise ``role``/``jwt_file`` None read ``KEYSTREAM_ROLE``/
        ``KEYSTREAM_JWT_FILE`` (an empty variable counts as unset); ``environment_token`` says whether
        ``KEYSTREAM_TOKEN`` is set, which may not be with them.

        Raises:
            ValueError: only one of the role and the file is given, or a token is given as well.
        """
        if token is not None:
            if role is not None or jwt_file is not None:
                raise ValueError("token= and role=/jwt_file= exclude each other: give one credential")
            return None
        role = role if role is not None else (os.environ.get(ROLE_ENV) or None)
        path = jwt_file if jwt_file is not None else (os.environ.get(JWT_FILE_ENV) or None)
        if role is None and path is None:
            return None
        if not role:
            raise ValueError(f"a JWT file is given without a role: set {ROLE_ENV} (or role=)")
        if path is None or not os.fspath(path):
            raise ValueError(f"a role is given without a JWT file: set {JWT_FILE_ENV} (or jwt_file=)")
        if environment_token:
            raise ValueError(
                f"both KEYSTREAM_TOKEN and a role with a JWT file are set: use the token or {ROLE_ENV} and "
                f"{JWT_FILE_ENV}, not both"
            )
        return cls(role, Path(path))

    def read_jwt(self) -> str:
        """The JWT in the file now, without surrounding whitespace (the kubelet's file may end in a newline).

        Raises:
            KeystreamLoginError: the file cannot be read, is empty, is over :data:`MAX_JWT_BYTES`, or does
                not hold a compact JWS (three base64url parts separated by dots). The message names the file,
                never its contents.
        """
        where = f"automatic login through role {self.role!r}: the JWT file {self.jwt_file}"
        try:
            with self.jwt_file.open("rb") as handle:
                raw = handle.read(MAX_JWT_BYTES + 2)  # a JWT of exactly the limit plus a newline still fits
        except OSError as exc:
            raise KeystreamLoginError(f"{where} cannot be read: {exc.strerror or exc}") from None
        text = raw.strip()
        if not text:
            raise KeystreamLoginError(f"{where} is empty")
        if len(text) > MAX_JWT_BYTES:
            raise KeystreamLoginError(f"{where} is over {MAX_JWT_BYTES} bytes: not a JWT the service takes")
        if not _is_compact_jws(text):
            raise KeystreamLoginError(
                f"{where} does not hold a JWT (three base64url parts separated by dots)"
            )
        return text.decode("ascii")


_BASE64URL = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")


def _is_compact_jws(text: bytes) -> bool:
    parts = text.split(b".")
    return len(parts) == 3 and all(part and _BASE64URL.issuperset(part) for part in parts)


@dataclass
class _Lease:
    """The token held, and the monotonic time at which to log in again."""

    token: str = field(repr=False)
    refresh_at: float

    @classmethod
    def from_login(cls, issued: NewToken, started: float) -> _Lease:
        """The lease of a token issued by a login that started at ``started`` (monotonic): its refresh
        counts from the start, so a slow answer only makes it earlier."""
        if issued.expires_at is None:
            return cls(issued.token, float("inf"))
        lifetime = (issued.expires_at - issued.created_at).total_seconds()
        return cls(issued.token, started + max(0.0, lifetime) * REFRESH_FRACTION)

    def fresh(self) -> bool:
        return time.monotonic() < self.refresh_at


def _note_login(exc: KeystreamAPIError, source: JwtFileLogin) -> None:
    """Say on a refused login's error which role and file the client logged in with."""
    exc.add_note(f"automatic login through role {source.role!r} with the JWT file {source.jwt_file}")


class _JwtLoginState:
    """What both clients' automatic logins hold: the source, the lease, and the rules on them; the sync and
    async classes add the lock and the call."""

    def __init__(self, source: JwtFileLogin) -> None:
        self.source = source
        self._lease: _Lease | None = None

    def __repr__(self) -> str:  # never the token
        return f"{type(self).__name__}(role={self.source.role!r}, jwt_file={str(self.source.jwt_file)!r})"

    def _fresh(self) -> str | None:
        """The token held while it is fresh, else None."""
        lease = self._lease
        return lease.token if lease is not None and lease.fresh() else None

    def _hold(self, issued: NewToken, started: float) -> str:
        """Keep the token a login that started at ``started`` got, and return it."""
        self._lease = _Lease.from_login(issued, started)
        return self._lease.token

    def _forget(self, token: str) -> None:
        if self._lease is not None and self._lease.token == token:
            self._lease = None


class SyncJwtLogin(_JwtLoginState):
    """The token of a sync client that logs in by itself; safe to use from many threads."""

    def __init__(self, source: JwtFileLogin, login: SyncLoginCall) -> None:
        super().__init__(source)
        self._login = login
        self._lock = threading.Lock()

    def token(self) -> str:
        """The token to send: the one held while it is fresh, else a new login's.

        Raises:
            KeystreamLoginError: the JWT file cannot be used.
            KeystreamAPIError: the service refused the login (with a note naming the role and the file).
            KeystreamConnectionError: the service is unreachable.
        """
        if (held := self._fresh()) is not None:
            return held
        with self._lock:
            if (held := self._fresh()) is not None:  # another thread logged in meanwhile
                return held
            started = time.monotonic()
            jwt = self.source.read_jwt()
            try:
                return self._hold(self._login(self.source.role, jwt), started)
            except KeystreamAPIError as exc:
                _note_login(exc, self.source)
                raise

    def refused(self, token: str) -> None:
        """The service answered 401 to ``token``: the next :meth:`token` logs in again (unless another
        thread already replaced it)."""
        with self._lock:
            self._forget(token)


class AsyncJwtLogin(_JwtLoginState):
    """The token of an async client that logs in by itself; one login at a time across tasks."""

    def __init__(self, source: JwtFileLogin, login: AsyncLoginCall) -> None:
        super().__init__(source)
        self._login = login
        self._lock = asyncio.Lock()

    async def token(self) -> str:
        """As :meth:`SyncJwtLogin.token`; the file is read in a worker thread."""
        if (held := self._fresh()) is not None:
            return held
        async with self._lock:
            if (held := self._fresh()) is not None:
                return held
            started = time.monotonic()
            jwt = await asyncio.to_thread(self.source.read_jwt)
            try:
                return self._hold(await self._login(self.source.role, jwt), started)
            except KeystreamAPIError as exc:
                _note_login(exc, self.source)
                raise

    def refused(self, token: str) -> None:
        """As :meth:`SyncJwtLogin.refused` (no await: nothing else runs between the check and the reset)."""
        self._forget(token)

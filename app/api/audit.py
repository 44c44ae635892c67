"""The audit log's HTTP side: what a record holds and when it is written, for every ``/v1`` request.

:class:`AuditMiddleware` writes two sealed lines per ``/v1`` request (the chain itself is :mod:`app.audit`):

1. a ``request`` line *before the request reaches a route*: time, request id, token id, method, path,
   remote address. If it cannot be written the request gets 503 ``audit_unavailable`` with ``Retry-After``
   and no route runs, so nothing is encrypted or decrypted without a record (Vault's rule: log before
   serving).
2. a ``response`` line when the request finishes: route template, key name, key version, format, scheme,
   backend, associated data as ``"hmac-sha256:<hex>"``, bytes in and out, status, error code, outcome.

   * A response sent in one piece (JSON, small bodies) is held until its line is written: if that write
     fails the client gets the 503 instead, so no crypto output is ever released without its full record.
   * A stream (chunked body) starts once the ``request`` line exists; its ``response`` line is written when
     it ends, with the outcome ``completed`` (written before the final chunk: if it cannot be, the stream
     is aborted, so the client never sees a clean end without the record), ``failed`` (a segment did not
     verify, an error after the start) or ``aborted`` (the client went away).

Records never hold plaintext, ciphertext, key material, the token or its secret: only the token's id. Every
response of a ``/v1`` request carries ``Keystream-Request-Id``, the id both lines hold.

Routes add what only they know through :func:`note` (format, scheme, associated data).
"""

from __future__ import annotations

import json
import secrets
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import keystream_error_response
from app.api.streaming import StreamAbortedError
from app.audit import AuditKeys, AuditLog, AuditUnavailableError
from app.core.token_format import parse_token

#: Key in the ASGI ``scope["state"]`` under which the request's :class:`Exchange` lives.
EXCHANGE = "keystream.audit"
REQUEST_ID_HEADER = b"keystream-request-id"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _header(scope: Scope, wanted: bytes) -> str | None:
    for name, value in scope["headers"]:
        if name == wanted:
            return bytes(value).decode("latin-1")
    return None


def token_id(authorization: str | None) -> str | None:
    """The id part of a ``Bearer ks_<id>_<secret>`` header (``None`` when there is none); never the secret.

    The id is the one the caller *claims*; a 401 in the same record says it did not verify.
    """
    if not authorization:
        return None
    scheme, _, value = authorization.partition(" ")
    parsed = parse_token(value.strip()) if scheme.lower() == "bearer" else None
    return parsed[0] if parsed is not None else None


class Exchange:
    """What the audit log learns about one request while it runs."""

    __slots__ = ("facts", "keys", "request_id")

    def __init__(self, keys: AuditKeys) -> None:
        self.keys = keys
        self.request_id = secrets.token_hex(8)
        self.facts: dict[str, Any] = {}


def note(scope: Scope, **facts: Any) -> None:
    """Add route facts to the request's ``response`` record (no-op without an audit log).

    ``associated_data`` (bytes) is recorded only as its ``"hmac-sha256:<hex>"`` (nothing when empty).
    """
    exchange = scope.get("state", {}).get(EXCHANGE)
    if exchange is None:
        return
    associated_data = facts.pop("associated_data", None)
    if associated_data:
        facts["associated_data"] = exchange.keys.hash(bytes(associated_data))
    exchange.facts.update(facts)


def _error_code(body: bytes) -> str | None:
    try:
        code = json.loads(body)["error"]["code"]
    except (ValueError, KeyError, TypeError):
        return None
    return code if isinstance(code, str) else None


class AuditMiddleware:
    """Writes the ``request`` and ``response`` lines of every ``/v1`` request (see the module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith("/v1/"):
            await self.app(scope, receive, send)
            return
        state = scope["app"].state.keystream
        log: AuditLog | None = state.audit
        if log is None:
            await self.app(scope, receive, send)
            return
        await _Audited(log, state.audit_keys, scope).run(self.app, receive, send)


class _Audited:
    """One audited request: counts bytes, holds a one-piece response until its record is written."""

    def __init__(self, log: AuditLog, keys: AuditKeys, scope: Scope) -> None:
        self.log = log
        self.scope = scope
        self.exchange = Exchange(keys)
        self.bytes_in = 0
        self.bytes_out = 0
        self.status: int | None = None
        self.headers: dict[bytes, bytes] = {}
        self.held: Message | None = None  # the response start, until the record is written or it streams
        self.streaming = False
        self.disconnected = False
        self.recorded = False
        client = scope.get("client")
        self.remote = client[0] if client else None
        self.token_id = token_id(_header(scope, b"authorization"))

    async def run(self, app: ASGIApp, receive: Receive, send: Send) -> None:
        scope = self.scope
        try:
            self.log.write(
                {
                    "time": _now(),
                    "type": "request",
                    "request_id": self.exchange.request_id,
                    "token_id": self.token_id,
                    "method": scope.get("method"),
                    "path": scope["path"],
                    "remote_address": self.remote,
                }
            )
        except AuditUnavailableError as exc:
            await self._refuse(exc, send)
            return
        scope.setdefault("state", {})[EXCHANGE] = self.exchange

        async def counting_receive() -> Message:
            message = await receive()
            if message["type"] == "http.request":
                self.bytes_in += len(message.get("body", b""))
            elif message["type"] == "http.disconnect":
                self.disconnected = True
            return message

        async def audited_send(message: Message) -> None:
            await self._send(message, send)

        try:
            await app(scope, counting_receive, audited_send)
        except BaseException as exc:
            if not self.recorded:
                if not self.streaming:
                    self.status = 500  # UnexpectedErrorMiddleware answers it
                self._write_quietly(*_failure(exc))
            raise
        if not self.recorded:  # the route returned without finishing a response (client gone)
            self._write_quietly("aborted", None)

    async def _send(self, message: Message, send: Send) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            headers = list(message.get("headers", []))
            self.headers = {bytes(name).lower(): bytes(value) for name, value in headers}
            headers.append((REQUEST_ID_HEADER, self.exchange.request_id.encode()))
            self.held = {**message, "headers": headers}
            return
        if message["type"] != "http.response.body":
            await send(message)
            return
        body = message.get("body", b"")
        more = message.get("more_body", False)
        if self.held is not None and more:  # a stream: its request line covers it until it ends
            self.streaming = True
            start, self.held = self.held, None
            await send(start)
        if more:
            self.bytes_out += len(body)
            await send(message)
            return
        # The last piece: the record first, then the bytes.
        self.bytes_out += len(body)
        failed = self.status is not None and self.status >= 400
        error = _error_code(body) if failed and not self.streaming else None
        outcome = "aborted" if self.disconnected else ("failed" if failed else "completed")
        try:
            self._write(outcome, error)
        except AuditUnavailableError as exc:
            if self.streaming:
                raise StreamAbortedError(f"{exc.code}: {exc.message}") from None
            self.held = None
            await self._refuse(exc, send)
            return
        if self.held is not None:
            start, self.held = self.held, None
            await send(start)
        await send(message)

    async def _refuse(self, exc: AuditUnavailableError, send: Send) -> None:
        response = keystream_error_response(exc)
        response.headers["Keystream-Request-Id"] = self.exchange.request_id
        await response(self.scope, _no_receive, send)

    def _write(self, outcome: str, error: str | None) -> None:
        scope = self.scope
        facts = self.exchange.facts
        version = self.headers.get(b"keystream-key-version")
        backend = self.headers.get(b"keystream-backend")
        record = {
            "time": _now(),
            "type": "response",
            "request_id": self.exchange.request_id,
            "token_id": self.token_id,
            "method": scope.get("method"),
            "route": getattr(scope.get("route"), "path", None),
            "key_name": scope.get("path_params", {}).get("name"),
            "key_version": int(version) if version and version.isdigit() else facts.get("key_version"),
            "format": facts.get("format"),
            "scheme": facts.get("scheme"),
            "backend": backend.decode("latin-1") if backend else facts.get("backend"),
            "associated_data": facts.get("associated_data"),
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "status": self.status,
            "error_code": error,
            "outcome": outcome,
            "remote_address": self.remote,
        }
        self.log.write(record)
        self.recorded = True

    def _write_quietly(self, outcome: str, error: str | None) -> None:
        """Record a request that ended without a last piece; the client got nothing complete, so a failure
        to write only loses this line (the ``request`` line stands)."""
        try:
            self._write(outcome, error)
        except AuditUnavailableError:
            pass


def _failure(exc: BaseException) -> tuple[str, str | None]:
    """``(outcome, error code)`` of a request whose route raised ``exc``: a stream aborted after it started
    (its code: what failed), a cancelled task (the connection or the server went away), or a bug."""
    if isinstance(exc, StreamAbortedError):
        code, _, _ = str(exc).partition(":")
        return "failed", code.strip() or "stream_aborted"
    if not isinstance(exc, Exception):  # CancelledError and the like
        return "aborted", None
    return "failed", "internal_error"


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}

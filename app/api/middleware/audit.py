"""The audit log's HTTP side: what a record holds and when it is written, for every ``/v1`` request.

The rule (Vault's "log before serving", applied to what leaves the server): **no response byte of a ``/v1``
request is released, and no change is made, before a record of it is in the log** (written to the kernel by
:class:`app.audit.AuditLog`). :class:`AuditMiddleware` keeps it with up to three kinds of sealed lines:

* ``request``: written *before the route runs*, for routes that change state (creating, rotating, deleting
  keys and tokens...: every ``/v1`` request except ``GET``/``HEAD`` and the side-effect-free crypto routes
  listed in :data:`PURE_ROUTE`). If it cannot be written the request gets 503 ``audit_unavailable`` with
  ``Retry-After`` and the route never runs, so nothing changes without a record.
* ``response``: the full record (route template, key name, key version, format, scheme, backend, associated
  data as ``"hmac-sha256:<hex>"``, bytes in and out, status, error code, outcome). A response sent in one
  piece (JSON, small bodies: the 1 KiB hot path) is *held* until this line is written; if it cannot be, the
  client gets the 503 instead and the ciphertext or plaintext computed is dropped. So a crypto route needs
  one line, not two, and still releases nothing unrecorded.
* ``stream``: a chunked response (a stream) is held until this line, the same record with outcome
  ``started``, is written (else the 503, nothing sent). Its ``response`` line follows when the stream ends,
  written before the final chunk, with outcome ``completed`` (if that write fails the stream is aborted, so
  the client never sees a clean end without the record), ``failed`` (a segment did not verify, an error
  after the start) or ``aborted`` (the client went away).

Records never hold plaintext, ciphertext, key material, the token or its secret: only the token's id. Every
response of an audited request carries ``Keystream-Request-Id``, the id its lines hold.

Routes add what only they know through :func:`note` (format, scheme, backend, associated data).
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Awaitable
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import keystream_error_response
from app.api.middleware.body_limit import credential
from app.api.middleware.layer import Layer
from app.api.paths import PURE_ROUTE, V1
from app.api.streaming import StreamAbortedError
from app.audit import AuditKeys, AuditLog, AuditUnavailableError
from app.core.token_format import BEARER_TOKEN_RE, parse_token

#: Key in the ASGI ``scope["state"]`` under which the request's :class:`Exchange` lives.
EXCHANGE = "keystream.audit"
REQUEST_ID_HEADER = b"keystream-request-id"


_second: list[Any] = [-1, ""]  # the last whole second formatted, and its text


#: What a login route notes (:func:`note`) for its ``response`` line; never the JWT or the certificate.
LOGIN_FACTS = ("role", "subject", "issued_token_id")


def _now() -> str:
    """UTC now as ``2026-11-26T08:43:19.221506Z`` (the date part is formatted once per second)."""
    now = time.time()
    second = int(now)
    if second != _second[0]:
        _second[0], _second[1] = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_second[1]}.{int((now - second) * 1_000_000):06d}Z"


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
    usual = BEARER_TOKEN_RE.fullmatch(authorization)  # the usual shape, in one match
    if usual is not None:
        claimed: str = usual[1]
        return claimed
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


def write_operator_record(log: AuditLog | None, record: dict[str, Any]) -> None:
    """Write an ``operator`` line (unseal, seal: what no ``/v1`` request record describes) to ``log``.

    Raises:
        AuditUnavailableError: the line cannot be written.
    """
    if log is not None:
        log.write({"time": _now(), "type": "operator", **record})


class AuditMiddleware(Layer):
    """Writes the ``request`` and ``response`` lines of every ``/v1`` request (see the module docstring)."""

    def __call__(self, scope: Scope, receive: Receive, send: Send) -> Awaitable[None]:
        # Not a coroutine itself: it returns the awaitable that does the work (the next layer's, or the
        # audited run), so the caller's await drives it and no coroutine of this layer's runs in between.
        if scope["type"] != "http" or not scope["path"].startswith(V1):
            return self.app(scope, receive, send)
        state = scope["app"].state.keystream
        log: AuditLog | None = state.audit
        if log is None:
            return self.app(scope, receive, send)
        return _Audited(log, state.audit_keys, scope).run(self.app, receive, send)


class _Refused(Exception):
    """Raised through the route when its stream could not be recorded: the 503 has been sent."""


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
        self.token_id = token_id(credential(scope))  # X-Vault-Token too, on the Transit paths

    async def run(self, app: ASGIApp, receive: Receive, send: Send) -> None:
        scope = self.scope
        if scope.get("method") not in ("GET", "HEAD") and not PURE_ROUTE.fullmatch(scope["path"]):
            try:  # a route that may change state: its record comes before it runs
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
        except _Refused:
            return  # the 503 was sent in full
        except BaseException as exc:
            if not self.recorded:
                if not self.streaming:
                    self.status = 500  # ObservedMiddleware answers it
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
        if self.held is not None and more:  # a stream: recorded as started before its head leaves
            try:
                self._write("started", None, kind="stream")
            except AuditUnavailableError as exc:
                self.held = None
                await self._refuse(exc, send)
                self.recorded = True
                raise _Refused from None  # stops the route; run() ends the request quietly
            self.recorded = False  # the stream's end still needs its line
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
        response = keystream_error_response(exc, self.scope)
        response.headers["Keystream-Request-Id"] = self.exchange.request_id
        await response(self.scope, _no_receive, send)

    def _write(self, outcome: str, error: str | None, kind: str = "response") -> None:
        scope = self.scope
        facts = self.exchange.facts
        version = self.headers.get(b"keystream-key-version")
        backend = self.headers.get(b"keystream-backend")
        record = {
            "time": _now(),
            "type": kind,
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
        # A login's facts (its role, the subject its credential named, the token issued), only on its lines.
        record.update({name: facts[name] for name in LOGIN_FACTS if name in facts})
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

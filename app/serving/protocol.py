"""uvicorn's httptools protocol with the limits and error handling the service needs.

uvicorn's httptools protocol has no limit on the request head (h11 has 16 KiB), and httptools joins a long
header value piece by piece, so one anonymous connection sending a huge header used to keep the event loop
busy for seconds. It also answers malformed HTTP with a plain-text 400, even in the middle of a streamed
response. :class:`BoundedHttpToolsProtocol`:

* caps the request line plus headers at ``max_header_bytes`` (431 and close beyond);
* answers malformed HTTP (bad chunk size, Content-Length with Transfer-Encoding, a negative or duplicate
  Content-Length, a NUL in a header, raw 8-bit bytes in the path) with the service's JSON 400 and closes;
* aborts the connection, writing nothing, when the upload turns malformed after the response has started (a
  second response would land inside the first one's body);
* keeps its phase (handshake, idle, head, body, busy) and when it began for :mod:`app.serving.limits`, which
  caps open connections and closes slow-handshake, idle, slow-head and stalled-body ones;
* sends a response's head and the start of its body in one write at the end of the event-loop iteration
  (:class:`_HeadWithBody`): uvicorn writes them separately and at once, two system calls where one does (on
  loopback a send costs several microseconds), and sending each answer as soon as it is made alternates the
  kernel's send path with the app's code, each evicting the other from the caches: held to the end of the
  iteration, the answers of all the requests an iteration handled leave back to back after their work. On
  one worker that cut a 1 KiB sealed encrypt's server CPU by ~15% (``bench/server_insitu.py``);
* does the TLS handshake itself (``loop.start_tls``) when the service serves HTTPS, so that a connection
  counts against the cap, can be evicted and has a deadline from its TCP accept. Under uvicorn's own TLS the
  protocol saw a connection only after its handshake: 3,000 silent TCP connections took a 2-worker HTTPS
  server with 1,024 fds per worker down for uvloop's 60 s handshake timeout;
* takes Vault's ``LIST`` method (what hvac and the ``vault`` CLI send to list keys), which llhttp refuses:
  a request line beginning ``LIST `` at the start of a received chunk (where a client's request begins)
  is parsed as ``GET`` and handed to the app with ``scope["method"] == "LIST"``
  (:data:`LIST_METHOD`); a ``LIST`` that arrives split across chunks or behind another pipelined request
  stays malformed HTTP (400);
* puts the client certificate the handshake verified (mTLS) into every request's scope as the ASGI TLS
  extension, ``scope["extensions"]["tls"]`` (:func:`app.serving.tls.client_tls_extension`, built once per
  connection); a connection without one, or plain HTTP, gets no ``tls`` extension.

Running uvicorn directly (Dockerfile, k8s) needs ``--http app.server:BoundedHttpToolsProtocol`` for the same
protection.
"""

from __future__ import annotations

import asyncio
import asyncio.sslproto
import collections
import logging
import ssl
from collections.abc import Iterable
from typing import Any, ClassVar, cast

import httptools
import uvloop
import uvloop.loop
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import is_ssl

from app.core.config import get_settings
from app.serving.access_log import RouteAccessLog
from app.serving.errors import raw_error_response
from app.serving.limits import ConnectionLimits, ConnectionWatch, Phase
from app.serving.tls import ServerTls, client_tls_extension

#: How Vault's ``LIST`` method begins a request line, and what the parser is given in its place.
LIST_METHOD = b"LIST "
_LIST_AS = b"GET "


def _ssl_protocol_class(loop: asyncio.AbstractEventLoop) -> Any:
    """The loop's own SSL protocol: uvloop's (Cython, what uvloop's ``create_server(ssl=...)`` uses) or
    asyncio's; both take ``(loop, app_protocol, sslcontext, waiter, server_side, ...)``."""
    if isinstance(loop, uvloop.Loop):
        return uvloop.loop.SSLProtocol  # type: ignore[attr-defined]
    return asyncio.sslproto.SSLProtocol


#: The largest first body piece held with its head to the end of the loop iteration. Holding lets the
#: requests one iteration read run their app code back to back and their answers leave back to back (a 1 KiB
#: answer's server CPU: 78 -> 63 us); a large piece gains nothing from it and its answer waits: a 100 x 1 KiB
#: batch (~140 KB) on one connection answered 11% fewer requests/s held than sent at once.
HELD_BODY_MAX_BYTES = 16 * 1024


class _HeadWithBody:
    """The transport a request's cycle writes through: holds the response head and the body's first write
    (when it is ``bytes``, which cannot change while held, of at most :data:`HELD_BODY_MAX_BYTES`) until the
    end of the event-loop iteration, then sends both with one ``writelines`` (one system call).

    A head with no body write in that iteration (a streamed response whose body comes later, a 100 Continue)
    goes out at the end of the iteration on its own, so nothing waits longer than one iteration and the order
    of writes is kept. A second body write, a body write of a mutable buffer (``bytearray``, ``memoryview``)
    or of a larger one, and every other call send what is held first, then go to the transport, so at most
    one small body piece is held and a buffer its writer reuses is never read late. The protocol sends what
    is held before it closes the connection itself (:meth:`BoundedHttpToolsProtocol.send_held`).

    The transport methods a cycle may call are written out rather than forwarded by ``__getattr__``: a class
    with ``__getattr__`` pays for it on every attribute read, its own slots included (about 60 ns each, ~16
    reads a response). The loop is given, not looked up: on Python 3.11 ``asyncio.get_running_loop()`` makes
    a ``getpid`` system call each time (the only one a 1 KiB request made besides its read, write and
    ``getrandom``).
    """

    __slots__ = ("_held", "_loop", "_started", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._held: list[bytes | bytearray | memoryview] | None = None
        self._started = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._started:
            held = self._held
            if held is None:
                self._transport.write(data)
            elif len(held) == 1 and type(data) is bytes and len(data) <= HELD_BODY_MAX_BYTES:
                held.append(data)  # sent with the head at the end of the iteration
            else:
                self._held = None
                held.append(data)
                self._transport.writelines(held)
        elif self._transport.is_closing():
            self._transport.write(data)  # the transport's own handling (nothing is sent)
        else:
            self._started = True
            self._held = [bytes(data)]
            self._loop.call_soon(self.flush)

    @property
    def settled(self) -> bool:
        """It wrote and holds nothing: from now on every write goes straight to the transport."""
        return self._started and self._held is None

    def flush(self) -> None:
        """Send what is held now (at the end of the iteration, or before any other use of the transport)."""
        held = self._held
        if held is not None:
            self._held = None
            if not self._transport.is_closing():
                if len(held) == 1:
                    self._transport.write(held[0])
                else:
                    self._transport.writelines(held)

    def writelines(self, pieces: Iterable[bytes | bytearray | memoryview]) -> None:
        self.flush()
        self._transport.writelines(pieces)

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self.flush()
        self._transport.abort()

    def is_closing(self) -> bool:
        self.flush()
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        self.flush()
        return self._transport.get_extra_info(name, default)

    def get_write_buffer_size(self) -> int:
        self.flush()
        return self._transport.get_write_buffer_size()


class HeadersTooLargeError(Exception):
    """Raised inside the parser callbacks to stop parsing a request whose head is over the limit."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a limit on the request head and JSON answers to malformed HTTP.

    Two counts, both against ``max_header_bytes``: the bytes received while the current request's head is
    incomplete (checked after every ``feed_data``, so httptools never accumulates much more than the limit
    plus one read), and the parsed URL and header bytes (a head that arrived whole in one read). Beyond the
    limit the client gets ``431 Request Header Fields Too Large`` in the service's JSON error shape and the
    connection is closed.
    """

    #: The limit; ``None`` reads ``max_header_bytes`` from :func:`get_settings` (worker processes).
    max_header_bytes: ClassVar[int | None] = None
    #: Connection limits (:mod:`app.serving.limits`); ``None`` reads them from :func:`get_settings`.
    connection_limits: ClassVar[ConnectionLimits | None] = None
    #: The TLS context of every handshake (``None``: plain HTTP), set by :meth:`use_tls` (else on first use).
    _tls_context: ClassVar[ssl.SSLContext | None] = None
    _tls_ready: ClassVar[bool] = False
    _logger = logging.getLogger("keystream.http")

    @classmethod
    def use_tls(cls, tls: ServerTls | None) -> None:
        """Serve HTTPS with ``tls`` (``None``: plain HTTP) on the connections made from now on.

        Raises:
            StartupRefusedError: a TLS file is unusable (:meth:`ServerTls.context`).
        """
        cls._tls_context = tls.context() if tls is not None else None
        cls._tls_ready = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        cls = type(self)
        configured = cls.max_header_bytes
        self._head_limit = configured if configured is not None else get_settings().max_header_bytes
        if cls.connection_limits is None:
            cls.connection_limits = ConnectionLimits.from_settings(get_settings())
        self._watch = ConnectionWatch.for_server(self.server_state, self.loop, cls.connection_limits)
        if not cls._tls_ready:
            cls.use_tls(ServerTls.from_settings(get_settings()))
        self._raw_transport: asyncio.Transport | None = None  # TLS: the TCP transport under the handshake
        self._http_started = False  # uvicorn's connection_made ran (after the handshake, under TLS)
        # The answer writers of this connection's requests that may still hold an answer, oldest first (a
        # pipelined request's writer is made while an earlier one's answer may still be held).
        self._answer_writers: collections.deque[_HeadWithBody] = collections.deque()
        # The verified client certificate as the ASGI TLS extension (typed as uvicorn types scope extensions).
        self._tls_extension: dict[object, object] | None = None
        self.phase = Phase.IDLE
        self.since = self.loop.time()
        self.requests_begun = 0
        self._in_head = True  # the current request's head is still incomplete
        self._head_received = 0  # bytes received while the head was incomplete
        self._head_parsed = 0  # URL and header bytes the parser delivered for the current request
        self._head_too_large = False
        self._list_request = False  # the current request came as LIST (parsed as GET)

    # Connection limits: the phase and its clock, read by the ConnectionWatch.
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        """A TCP connection (under TLS: the handshake starts), or the end of this protocol's TLS handshake."""
        context = self._tls_context
        if context is not None and not is_ssl(transport):  # (is_ssl: uvicorn run with its own --ssl-*)
            self._start_handshake(transport, context)
            return
        super().connection_made(transport)
        self._http_started = True
        extension = client_tls_extension(transport.get_extra_info("ssl_object"))
        self._tls_extension = cast("dict[object, object] | None", extension)
        self.since = self.loop.time()
        if self._raw_transport is not None:  # after the handshake: admitted at the TCP accept
            self.phase = Phase.IDLE
        elif not self._watch.admit(self):
            transport.abort()

    def _start_handshake(self, raw: asyncio.Transport, context: ssl.SSLContext) -> None:
        """Admit the TCP connection, then put the loop's SSL protocol between it and this protocol.

        This runs inside ``connection_made``, before the loop starts reading the socket, so no byte of the
        ClientHello can arrive ahead of the SSL protocol (``loop.start_tls`` from a task came too late for a
        client that sends at once). The SSL protocol calls ``connection_made`` again with its transport once
        the handshake is done.
        """
        self._raw_transport = raw
        self.phase, self.since = Phase.HANDSHAKE, self.loop.time()
        if not self._watch.admit(self):
            raw.abort()
            return
        waiter = self.loop.create_future()
        waiter.add_done_callback(self._handshake_over)
        tls = _ssl_protocol_class(self.loop)(
            self.loop,
            self,
            context,
            waiter,
            server_side=True,
            # A backstop: the ConnectionWatch closes the connection at handshake_timeout and counts it.
            ssl_handshake_timeout=self._watch.limits.handshake_timeout + 1,
        )
        raw.set_protocol(tls)
        tls.connection_made(raw)

    def _handshake_over(self, waiter: asyncio.Future[None]) -> None:
        """After the handshake (success: HTTP already started) or its failure: free the watch's slot."""
        if not waiter.cancelled():
            waiter.exception()  # a failed handshake is the client's business: retrieved, not logged
        if not self._http_started:
            self._watch.forget(self)
            if self._raw_transport is not None:
                self._raw_transport.abort()

    def send_held(self) -> None:
        """Send every held answer now, oldest first (before the connection is closed or aborted)."""
        for writer in self._answer_writers:
            writer.flush()

    def shutdown(self) -> None:
        """uvicorn's graceful shutdown closes a connection whose answer is complete: send it first."""
        self.send_held()
        super().shutdown()

    def connection_lost(self, exc: Exception | None) -> None:
        self._watch.forget(self)
        if self._http_started:
            super().connection_lost(exc)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.phase in (Phase.BODY, Phase.BUSY) and self.cycle.response_complete and not self.pipeline:
            self.phase, self.since = Phase.IDLE, self.loop.time()

    def body_wait_excused(self) -> bool:
        """The server paused reading, or has not yet asked for the body (``100 Continue`` not sent)."""
        return self.flow.read_paused or (self.cycle is not None and self.cycle.waiting_for_100_continue)

    def drop(self, reason: str) -> None:
        """Close for a connection limit: 408 when a request is unanswered, else a plain close or abort."""
        self.send_held()  # an idle connection's last answer may still wait for the end of the iteration
        if not self._http_started:  # in its TLS handshake: nothing to answer
            if self._raw_transport is not None:
                self._raw_transport.abort()
            return
        if self.transport.is_closing():
            return
        cycle = self.cycle
        unanswered = cycle is not None and not cycle.response_complete and self.phase is not Phase.IDLE
        if cycle is not None and unanswered:
            cycle.disconnected = True  # the app sees a disconnect and writes nothing more
            cycle.message_event.set()
        if reason == "evicted":
            self.transport.abort()  # frees the file descriptor at once
        elif reason == "idle":
            self.transport.close()
        elif self.phase is Phase.HEAD or (cycle is not None and not cycle.response_started):
            message = "the request head" if self.phase is Phase.HEAD else "the request body stalled: it"
            self._write_error_and_close(408, "request_timeout", f"{message} did not arrive in time")
        else:
            self.transport.abort()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        if self._tls_extension is not None:
            self.scope["extensions"] = {"tls": self._tls_extension}
        self._in_head = True
        self._head_received = 0
        self._head_parsed = 0
        self.phase, self.since = Phase.HEAD, self.loop.time()
        self.requests_begun += 1

    def _count_parsed(self, size: int) -> None:
        self._head_parsed += size
        if self._head_parsed > self._head_limit:
            self._head_too_large = True
            raise HeadersTooLargeError

    def on_url(self, url: bytes) -> None:
        """Count the URL against the head limit, then join it as uvicorn's ``on_url`` does (written out, as in
        :meth:`on_header`)."""
        self._count_parsed(len(url))
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        """Count the header against the head limit, then do what uvicorn's ``on_header`` does (lower-case
        name, ``Expect: 100-continue`` noted, appended to the scope's headers), written out here.

        The parser calls this once per header of every request: as two more calls (the count, then
        uvicorn's method through ``super()``) it cost about 1.5k instructions per header. The test of the
        protocol compares the scope's headers with uvicorn's own protocol's.
        """
        self._head_parsed += len(name) + len(value) + 4  # ": " and CRLF
        if self._head_parsed > self._head_limit:
            self._head_too_large = True
            raise HeadersTooLargeError
        name = name.lower()
        if name == b"expect" and value.lower() == b"100-continue":
            self.expect_100_continue = True
        self.headers.append((name, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self.phase, self.since = Phase.BODY, self.loop.time()
        super().on_headers_complete()
        if self._list_request:
            self._list_request = False
            self.scope["method"] = "LIST"  # the app task starts later: it sees LIST
        cycle = self.cycle
        if cycle is not None and cycle.scope is self.scope:
            writers = self._answer_writers
            while writers and writers[0].settled:
                writers.popleft()  # sent what it held: it never holds again
            writer = _HeadWithBody(self.transport, self.loop)
            writers.append(writer)
            cycle.transport = cast(asyncio.Transport, writer)
        if cycle is not None and cycle.scope is self.scope and cycle.access_log:
            # A logger-like object that logs the route template instead of the path and query string.
            cycle.access_logger = cast(logging.Logger, RouteAccessLog(cycle.access_logger, cycle.scope))

    def on_body(self, body: bytes) -> None:
        # Body bytes of a request already answered (a 401 or 413 before the body was read) are discarded and
        # no longer count as activity: the connection is idle from the answer on, and closed at idle_timeout
        # unless the body ends and another request begins (each trickled byte used to restart the clock).
        if self.cycle is None or not self.cycle.response_complete:
            self.since = self.loop.time()
        super().on_body(body)

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._head_received = 0
        if self.phase is Phase.BODY:
            self.phase = Phase.BUSY

    def data_received(self, data: bytes) -> None:
        if self._head_too_large:
            return  # answered 431; the transport is closing
        if self._in_head and self._head_received == 0 and data.startswith(LIST_METHOD):
            data = _LIST_AS + data[len(LIST_METHOD) :]
            self._list_request = True
        if self._in_head:
            self._head_received += len(data)
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as exc:
            if self._head_too_large:
                self._send_431()
            else:
                self._malformed(exc)
            return
        if self._in_head and self._head_received > self._head_limit:
            self._head_too_large = True
            self._send_431()

    def _peer(self) -> str:
        return f"{self.client[0]}:{self.client[1]}" if self.client else "unknown client"

    def _malformed(self, exc: httptools.HttpParserError) -> None:
        """Answer a request the parser refused: JSON 400 and close, or abort once a response started."""
        # llhttp's reasons are fixed texts ("Invalid character in chunk size"); a callback error may carry
        # request bytes, so it gets a fixed text instead.
        reason = (
            "undecodable request line or header"
            if isinstance(exc, httptools.HttpParserCallbackError)
            else str(exc)
        )
        cycle = self.cycle
        in_progress = cycle is not None and not cycle.response_complete
        if in_progress:
            # The app must not answer too (or keep streaming): from now on it sees a disconnect.
            cycle.disconnected = True
            cycle.message_event.set()
        if in_progress and cycle.response_started:
            self._logger.warning(
                "malformed HTTP from %s after the response started (%s): connection aborted",
                self._peer(),
                reason,
            )
            self.transport.abort()
            return
        self._logger.warning("malformed HTTP from %s (%s): answered 400", self._peer(), reason)
        self._write_error_and_close(400, "bad_request", f"malformed HTTP request: {reason}")

    def send_400_response(self, msg: str) -> None:
        """uvicorn's own 400 (e.g. an unsupported upgrade), in the service's JSON shape."""
        self._write_error_and_close(400, "bad_request", msg)

    def _write_error_and_close(self, status: int, code: str, message: str) -> None:
        self.send_held()  # an answer that waits for the end of the iteration goes before the error
        if self.transport.is_closing():
            return
        self.transport.write(raw_error_response(status, code, message, self.server_state.default_headers))
        self.transport.close()

    def _send_431(self) -> None:
        self._logger.warning(
            "request head over %d bytes from %s: answered 431 and closed the connection",
            self._head_limit,
            self._peer(),
        )
        self._write_error_and_close(
            431,
            "request_header_fields_too_large",
            f"the request line and headers exceed {self._head_limit} bytes",
        )

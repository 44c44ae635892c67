"""Full-duplex HTTP/1.1 streaming for the Keystream client (asyncio + h11).

The service streams an encrypt/decrypt response *while* the request body is still arriving and, to keep its
memory flat, stops reading the request when the client stops reading the response. httpx (like most HTTP
clients, encode/httpx#877) sends the whole request before it reads any of the response, so a large transfer
through httpx stalls as soon as the socket buffers on both sides are full. This module sends the request body
from one task and reads the response from another over a single connection, with h11 (httpx's own HTTP/1.1
engine) doing the framing.

The sync client drives the same code on a private event loop (:class:`keystream_client._loop.LoopRunner`),
so plain TCP and TLS behave the same in both clients.

A response body counts as complete only when h11 sees its terminator (the last chunk, or Content-Length
bytes); an EOF or reset before that raises :class:`StreamBrokenError`. The service relies on this: it aborts
the connection instead of ending the body when a sealed segment fails to verify after output has started.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import h11

#: Reads the next chunk of the request body; ``b""`` means the body is complete.
ChunkReader = Callable[[], Awaitable[bytes]]

READ_SIZE = 256 * 1024
#: Why a TLS connection may close before any answer: under TLS 1.3 the server checks the client certificate
#: after the client's side of the handshake is done, and a server requiring one (mTLS) just closes.
TLS_CLOSED_HINT = (
    "the server closed the TLS connection without answering: if it requires a client certificate (mTLS), "
    "give one (cert=, KEYSTREAM_CLIENT_CERT/KEYSTREAM_CLIENT_KEY, or the CLI's --client-cert/--client-key)"
)


class ConnectFailedError(Exception):
    """The connection could not be opened, or the response head did not arrive in time."""


class StreamBrokenError(Exception):
    """The response body ended without its terminator, or the connection failed mid-transfer.

    Attributes:
        how: :data:`CLOSED` (the peer closed or reset the connection: how the service stops a stream),
            :data:`TIMED_OUT`, or :data:`MALFORMED` (bytes that are not HTTP/1.1).
    """

    def __init__(self, message: str, how: str) -> None:
        super().__init__(message)
        self.how = how


#: :attr:`StreamBrokenError.how`: the connection was closed (EOF) or reset by the peer.
CLOSED = "closed"
#: :attr:`StreamBrokenError.how`: no byte arrived within the read timeout.
TIMED_OUT = "timed_out"
#: :attr:`StreamBrokenError.how`: the bytes received are not a valid HTTP/1.1 response.
MALFORMED = "malformed"
#: Seconds at most that :func:`speaks_tls` waits for a TLS handshake.
TLS_PROBE_SECONDS = 5.0


def url_authority(host: str, port: int) -> str:
    """``host:port`` as a URL writes it (an IPv6 address in brackets)."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def plain_http_to_tls_message(host: str, port: int) -> str:
    """What to say when an ``http://`` URL reaches a server that speaks TLS (it closes without answering)."""
    authority = url_authority(host, port)
    return (
        f"the server at {authority} speaks TLS (HTTPS) but the URL says http://: use https://{authority} "
        "(base_url=, KEYSTREAM_URL, or the CLI's --url)"
    )


def _probe_context() -> ssl.SSLContext:
    # Verification off on purpose: the probe only asks whether the port speaks TLS; no request is sent.
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def speaks_tls(host: str, port: int, timeout: float) -> bool:
    """Whether ``host:port`` completes a TLS handshake (no request is sent on it).

    Asked only after a plain-HTTP request was closed without any answer, which is what a TLS server does
    with one. A plain HTTP server answers the ClientHello with a 400 (not TLS): False.
    """
    try:
        with (
            socket.create_connection((host, port), timeout=min(timeout, TLS_PROBE_SECONDS)) as raw,
            _probe_context().wrap_socket(raw, server_hostname=host),
        ):
            return True
    except (OSError, ValueError):  # ssl.SSLError is an OSError
        return False


async def speaks_tls_async(host: str, port: int, timeout: float) -> bool:
    """:func:`speaks_tls` without blocking the event loop."""
    try:
        async with asyncio.timeout(min(timeout, TLS_PROBE_SECONDS)):
            _, writer = await asyncio.open_connection(host, port, ssl=_probe_context(), server_hostname=host)
    except (OSError, TimeoutError, ValueError):
        return False
    writer.close()
    with contextlib.suppress(Exception):
        await writer.wait_closed()
    return True


class RequestBodyError(Exception):
    """Reading the caller's request body failed; the request was aborted."""


@dataclass(frozen=True)
class Endpoint:
    """Where to connect: host, port and, for https, the TLS context."""

    host: str
    port: int
    ssl_context: ssl.SSLContext | None = None


@dataclass(frozen=True)
class ResponseHead:
    """Status line and headers of a response (header names lower-case)."""

    status: int
    headers: dict[str, str]


class DuplexCall:
    """One HTTP/1.1 request whose body is sent while its response is read; one use only.

    Args:
        endpoint: where to connect.
        method: HTTP method.
        target: request target (path and query string).
        headers: request headers (without Host, Content-Length or Transfer-Encoding).
        body: coroutine function returning the next request chunk, ``b""`` at the end.
        content_length: body length when known (else the body is sent chunked).
        connect_timeout: seconds to connect and to receive the response head.
        read_timeout: seconds without any received byte before the call fails.
    """

    def __init__(
        self,
        endpoint: Endpoint,
        method: str,
        target: str,
        headers: list[tuple[str, str]],
        body: ChunkReader,
        content_length: int | None,
        connect_timeout: float,
        read_timeout: float,
    ) -> None:
        self._endpoint = endpoint
        self._method = method
        self._target = target
        self._headers = headers
        self._body = body
        self._content_length = content_length
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._conn = h11.Connection(our_role=h11.CLIENT)
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._sender: asyncio.Task[None] | None = None
        self._body_error: RequestBodyError | None = None
        self._status = 0
        self._done = False
        self._received = 0  # bytes received from the server
        self._eof = False  # the server closed its side of the connection

    async def start(self) -> ResponseHead:
        """Connect, start sending the body and wait for the response head.

        Raises:
            ConnectFailedError: connecting failed or timed out, or (https) the server closed the connection
                before sending any byte (a server requiring a client certificate does so under TLS 1.3).
            StreamBrokenError: the connection failed before the response head arrived.
            RequestBodyError: reading the request body failed before the response head arrived.
        """
        host = self._endpoint.host
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(
                    host,
                    self._endpoint.port,
                    ssl=self._endpoint.ssl_context,
                    server_hostname=host if self._endpoint.ssl_context else None,
                    limit=READ_SIZE,
                ),
                self._connect_timeout,
            )
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            raise ConnectFailedError(f"cannot connect to {host}:{self._endpoint.port}: {exc}") from exc
        headers = [("Host", f"{host}:{self._endpoint.port}"), *self._headers]
        if self._content_length is None:
            headers.append(("Transfer-Encoding", "chunked"))
        else:
            headers.append(("Content-Length", str(self._content_length)))
        self._write(h11.Request(method=self._method, target=self._target, headers=headers))
        self._sender = asyncio.create_task(self._send_body())
        while True:
            try:
                event = await self._next_event(self._connect_timeout + self._read_timeout)
            except StreamBrokenError as exc:
                if self._received == 0 and exc.how == CLOSED:
                    await self._closed_unanswered(exc)
                raise
            if isinstance(event, h11.InformationalResponse):
                continue
            if isinstance(event, h11.Response):
                self._status = event.status_code
                return ResponseHead(
                    status=event.status_code,
                    headers={
                        name.decode("latin-1").lower(): value.decode("latin-1")
                        for name, value in event.headers
                    },
                )
            self._check_sender()
            raise StreamBrokenError(
                f"unexpected HTTP event before the response: {type(event).__name__}", MALFORMED
            )

    async def _closed_unanswered(self, exc: StreamBrokenError) -> None:
        """Explain a connection closed before any byte of an answer, when the reason can be known.

        Raises:
            ConnectFailedError: https: a server requiring a client certificate (TLS 1.3) closes like this;
                http: the port speaks TLS (a TLS server closes on a plain HTTP request without answering).
        """
        host, port = self._endpoint.host, self._endpoint.port
        if self._endpoint.ssl_context is not None:
            raise ConnectFailedError(f"{TLS_CLOSED_HINT} ({exc})") from exc
        if await speaks_tls_async(host, port, self._connect_timeout):
            raise ConnectFailedError(plain_http_to_tls_message(host, port)) from exc

    async def read_chunk(self) -> bytes:
        """The next piece of the response body; ``b""`` once the body ended with its terminator.

        Raises:
            StreamBrokenError: the body was cut short (EOF/reset before its terminator) or timed out.
            RequestBodyError: reading the request body failed.
        """
        if self._done:
            return b""
        while True:
            event = await self._next_event(self._read_timeout)
            if isinstance(event, h11.Data):
                if event.data:
                    return bytes(event.data)
                continue
            if isinstance(event, h11.EndOfMessage):
                self._done = True
                if self._status < 400:  # an error answer may come before the body was read: do not wait
                    await self._finish_sender()
                return b""
            self._check_sender()
            raise StreamBrokenError(
                f"unexpected HTTP event in the response body: {type(event).__name__}", MALFORMED
            )

    async def read_all(self, limit: int) -> bytes:
        """The rest of the body, keeping at most ``limit`` bytes (the rest is read and dropped).

        Raises:
            StreamBrokenError: as :meth:`read_chunk`.
            RequestBodyError: as :meth:`read_chunk`.
        """
        parts: list[bytes] = []
        kept = 0
        while chunk := await self.read_chunk():
            if kept < limit:
                parts.append(chunk[: limit - kept])
                kept += len(parts[-1])
        return b"".join(parts)

    async def aclose(self) -> None:
        """Stop sending and close the connection (idempotent).

        A call left before its exchange finished (the caller stopped reading, an interrupt) aborts the
        connection: a graceful close would first wait for queued request bytes to reach a server that may no
        longer read them, which can take forever.
        """
        sender = self._sender
        unfinished = sender is not None and not sender.done()
        if sender is not None and not sender.done():
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
        elif sender is not None and not sender.cancelled():
            sender.exception()  # retrieved: its failure was reported (or superseded) by the reader
        if self._writer is not None:
            transport = self._writer.transport
            if unfinished or transport.get_write_buffer_size():
                transport.abort()
            else:
                self._writer.close()
            with contextlib.suppress(Exception):
                await self._writer.wait_closed()
            self._writer = None

    def _write(self, event: h11.Event) -> None:
        assert self._writer is not None
        pieces = self._conn.send_with_data_passthrough(event)
        if pieces:
            self._writer.writelines(pieces)

    async def _send_body(self) -> None:
        writer = self._writer
        assert writer is not None
        try:
            while True:
                chunk = await self._body()
                if not chunk:
                    break
                self._write(h11.Data(data=chunk))
                await writer.drain()
            self._write(h11.EndOfMessage())
            await writer.drain()
        except OSError as exc:
            if writer.transport.is_closing() or isinstance(exc, ConnectionError):
                raise  # the connection failed: the reader sees that too (and may still read an error answer)
            self._fail_body(writer, exc)
            raise
        except h11.LocalProtocolError as exc:
            self._fail_body(writer, exc, "the request body did not match its declared length")
            raise
        except Exception as exc:
            self._fail_body(writer, exc)
            raise

    def _fail_body(self, writer: asyncio.StreamWriter, exc: BaseException, what: str = "") -> None:
        # The body cannot be completed: drop the connection so the server sees an incomplete request and the
        # reader wakes up to report why.
        self._body_error = RequestBodyError(f"{what or 'reading the request body failed'}: {exc}")
        self._body_error.__cause__ = exc
        writer.transport.abort()

    async def _finish_sender(self) -> None:
        sender = self._sender
        if sender is None:
            return
        if not sender.done():
            # The response is complete, so the server has read the whole body; give the task a moment.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(sender), 5.0)
        if not sender.done():
            sender.cancel()
            return
        if not sender.cancelled():
            sender.exception()  # retrieved; a body failure is reported below
        self._check_sender()

    def _check_sender(self) -> None:
        if self._body_error is not None:
            raise self._body_error

    async def _next_event(self, timeout: float) -> Any:
        assert self._reader is not None
        while True:
            try:
                event = self._conn.next_event()
            except h11.RemoteProtocolError as exc:
                self._check_sender()
                if self._eof:
                    # h11's words ("can't handle event type ConnectionClosed when role=SERVER...") say
                    # nothing to a user: the server closed the connection, before or inside the answer.
                    where = "inside the response body" if self._status else "before answering"
                    raise StreamBrokenError(f"the server closed the connection {where}", CLOSED) from exc
                raise StreamBrokenError(f"the response is not valid HTTP/1.1: {exc}", MALFORMED) from exc
            if event is not h11.NEED_DATA:
                return event
            self._check_sender()
            data = await self._recv(timeout)
            self._conn.receive_data(data)

    async def _recv(self, timeout: float) -> bytes:
        assert self._reader is not None
        try:
            async with asyncio.timeout(timeout):
                data = await self._reader.read(READ_SIZE)
        except TimeoutError:
            raise StreamBrokenError(f"no data from the server for {timeout:g} s", TIMED_OUT) from None
        except ConnectionResetError as exc:
            self._check_sender()
            where = "inside the response body" if self._status else "before answering"
            raise StreamBrokenError(f"the server reset the connection {where}", CLOSED) from exc
        except (ConnectionError, OSError, ssl.SSLError) as exc:
            self._check_sender()
            raise StreamBrokenError(f"the connection failed mid-transfer: {exc}", CLOSED) from exc
        self._received += len(data)
        if not data:
            self._eof = True
        return data

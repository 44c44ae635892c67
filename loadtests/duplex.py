"""A full-duplex HTTP/1.1 POST for gevent (Locust), framed by h11.

Keystream streams an encrypt/decrypt answer while the request body is still arriving and stops reading the
request when the client stops reading the answer. Half-duplex clients -- geventhttpclient (Locust's
``FastHttpUser``), requests, httpx -- send the whole body before reading anything, so once the socket buffers
on both sides are full (about 12-16 MiB on loopback here) both ends wait for each other until a timeout. This
module sends the body from one greenlet and reads the answer in another, as a streaming client must.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import gevent
import gevent.socket
import h11

CHUNK = 256 * 1024


class DuplexError(Exception):
    """The exchange failed: connection refused or reset, a timeout, or a response cut short."""


@dataclass
class DuplexResponse:
    """Status, headers (lower-case names) and the whole body of a response."""

    status: int
    headers: dict[str, str] = field(default_factory=dict)
    content: bytes = b""


def duplex_post(
    host: str,
    port: int,
    target: str,
    body: bytes,
    headers: dict[str, str],
    timeout: float = 60.0,
) -> DuplexResponse:
    """POST ``body`` to ``target`` while reading the response at the same time.

    Args:
        host, port: the server.
        target: path and query string.
        body: the request body (sent with Content-Length, in 256 KiB pieces).
        headers: extra request headers.
        timeout: seconds for the whole exchange.

    Raises:
        DuplexError: the exchange failed or did not finish within ``timeout`` seconds.
    """
    connection = h11.Connection(our_role=h11.CLIENT)
    try:
        sock = gevent.socket.create_connection((host, port), timeout=min(timeout, 10.0))
    except OSError as exc:
        raise DuplexError(f"connect to {host}:{port}: {exc}") from exc
    sender: gevent.Greenlet[Exception | None] | None = None
    try:
        sock.settimeout(timeout)
        request_headers = [("Host", f"{host}:{port}"), ("Content-Length", str(len(body)))]
        request_headers += list(headers.items())
        sock.sendall(connection.send(h11.Request(method="POST", target=target, headers=request_headers)))

        def send_body() -> Exception | None:
            """Send the body; returns the error instead of raising (the server may answer early and close)."""
            try:
                for start in range(0, len(body), CHUNK):
                    data = connection.send(h11.Data(data=body[start : start + CHUNK]))
                    if data:
                        sock.sendall(data)
                end = connection.send(h11.EndOfMessage())
                if end:
                    sock.sendall(end)
            except (OSError, h11.ProtocolError) as exc:
                return exc
            return None

        sender = gevent.spawn(send_body)
        with gevent.Timeout(timeout, DuplexError(f"no complete response within {timeout:.0f} s")):
            response = _read_response(connection, sock)
            if response.status < 300:
                # A success means the server read the whole body; the sender must have finished cleanly.
                sender.join()
                if sender.value is not None:
                    raise DuplexError(f"sending the body failed: {sender.value}")
        return response
    except (OSError, h11.ProtocolError) as exc:
        raise DuplexError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        if sender is not None:
            sender.kill(block=True, timeout=1.0)
        sock.close()


def _read_response(connection: h11.Connection, sock: gevent.socket.socket) -> DuplexResponse:
    response: DuplexResponse | None = None
    parts: list[bytes] = []
    while True:
        event = connection.next_event()
        if event is h11.NEED_DATA:
            data = sock.recv(CHUNK)
            if not data and response is not None:
                raise DuplexError(
                    f"connection closed after {sum(map(len, parts))} body bytes (no terminator)"
                )
            connection.receive_data(data)
        elif isinstance(event, h11.Response):
            headers = {name.decode().lower(): value.decode() for name, value in event.headers}
            response = DuplexResponse(status=event.status_code, headers=headers)
        elif isinstance(event, h11.Data):
            parts.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            assert response is not None
            response.content = b"".join(parts)
            return response
        elif isinstance(event, h11.ConnectionClosed):
            raise DuplexError("connection closed before a complete response")

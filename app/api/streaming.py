"""The crypto routes' responses: a streaming one that only streams, for bodies produced while the request body
is still being read, and :class:`OctetsResponse` for a small body transformed whole.

Starlette's ``StreamingResponse`` under ASGI spec < 2.4 (uvicorn advertises 2.3) runs a second task that
reads ``receive()`` to watch for a disconnect. When the response is computed *from* the request body, that
task steals ``http.request`` messages from the handler's ``request.stream()``: bytes go missing or the
request hangs. :class:`DuplexStreamingResponse` never calls ``receive()``; the body generator reads the
request itself and sees a disconnect as :class:`starlette.requests.ClientDisconnect`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import aclosing

from starlette.background import BackgroundTask
from starlette.responses import Response
from starlette.types import Receive, Scope, Send


class StreamAbortedError(Exception):
    """Raised after the response has started to make the server drop the connection without a clean end.

    The message says what failed (e.g. which segment did not verify), never key material.
    """


class DuplexStreamingResponse(Response):
    """Send ``content`` chunk by chunk; never listens on ``receive()``.

    The generator owns the request stream: it must stop (return) on ``ClientDisconnect``. An exception raised
    by the generator propagates after the headers were sent, so the server aborts the connection and the
    client sees a truncated (invalid) chunked body rather than a clean end.
    """

    media_type = "application/octet-stream"

    def __init__(
        self,
        content: AsyncIterator[bytes],
        status_code: int = 200,
        headers: Mapping[str, str] | None = None,
        media_type: str | None = None,
        background: BackgroundTask | None = None,
    ) -> None:
        self.body_iterator = content
        self.status_code = status_code
        if media_type is not None:
            self.media_type = media_type
        self.background = background
        self.init_headers(headers)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with aclosing(self.body_iterator) as chunks:  # type: ignore[type-var]
            await send(
                {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
            )
            async for chunk in chunks:
                if chunk:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        if self.background is not None:
            await self.background()


#: The raw names (lower case, latin-1, as Starlette writes them) of the headers the crypto routes set, so an
#: :class:`OctetsResponse` spends no ``lower()`` and ``encode()`` on each.
_RAW_NAMES: dict[str, bytes] = {
    name: name.lower().encode("latin-1")
    for name in ("Keystream-Key-Version", "Keystream-Backend", "Keystream-IV")
}


class OctetsResponse(Response):
    """A complete ``application/octet-stream`` answer (200), its header list built directly.

    The same headers as ``Response(body, headers=headers, media_type="application/octet-stream")`` in the
    same order (``headers``, then ``content-length`` and ``content-type``), without Starlette's general
    header handling, which cost about as much as sealing a 1 KiB body natively.
    """

    media_type = "application/octet-stream"

    def __init__(self, body: bytes, headers: Mapping[str, str]) -> None:
        self.status_code = 200
        self.background = None
        self.body = body
        # A loop, not a list comprehension (a function and a frame per response); the routes' own header
        # names are looked up already lowered and encoded, any other name converted as Starlette does.
        raw: list[tuple[bytes, bytes]] = []
        for name, value in headers.items():
            raw_name = _RAW_NAMES.get(name)
            if raw_name is None:
                raw_name = name.lower().encode("latin-1")
            raw.append((raw_name, value.encode("latin-1")))
        raw.append((b"content-length", str(len(body)).encode("latin-1")))
        raw.append((b"content-type", b"application/octet-stream"))
        self.raw_headers = raw

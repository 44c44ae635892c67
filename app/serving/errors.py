"""Error responses written by the HTTP protocol itself, before (or instead of) the app.

They keep the service's JSON error shape (:func:`app.api.errors.error_body`) and always close the connection:
after a malformed or over-limit request the parser's position in the byte stream cannot be trusted.
"""

from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import STATUS_LINE

from app.api.errors import error_body


def raw_error_response(
    status: int, code: str, message: str, default_headers: list[tuple[bytes, bytes]]
) -> bytes:
    """The bytes of a complete ``Connection: close`` JSON error response.

    Args:
        status: the HTTP status (a key of uvicorn's status-line table).
        code: the error code (``bad_request``...).
        message: what was wrong; never request bytes or secrets.
        default_headers: the server's default headers (``date``...), written first.
    """
    body = json.dumps(error_body(code, message)).encode("ascii")
    content = [STATUS_LINE[status]]
    for name, value in default_headers:
        content.extend([name, b": ", value, b"\r\n"])
    content.extend(
        [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
            b"connection: close\r\n",
            b"\r\n",
            body,
        ]
    )
    return b"".join(content)

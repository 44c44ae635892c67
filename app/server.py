"""Run the service: first-start bootstrap, then uvicorn (uvloop + httptools).

``keystream-server serve`` (:mod:`app.admin`) calls :func:`serve`; without the CLI:
``python -c 'from app.server import serve; serve()'``.

uvicorn's httptools protocol has no limit on the request head (h11 has 16 KiB), and httptools joins a long
header value piece by piece, so one anonymous connection sending a huge header used to keep the event loop
busy for seconds. :class:`BoundedHttpToolsProtocol` caps the request line plus headers at
``max_header_bytes`` (431 and close beyond). Running uvicorn directly (Dockerfile, k8s) needs
``--http app.server:BoundedHttpToolsProtocol`` for the same protection.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, ClassVar, TextIO

import httptools
import uvicorn
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from app.core.config import Settings, get_settings
from app.keystore import open_keystore_for
from app.services.security import install_root_token


class HeadersTooLargeError(Exception):
    """Raised inside the parser callbacks to stop parsing a request whose head is over the limit."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a limit on the request line plus headers of each request.

    Two counts, both against ``max_header_bytes``: the bytes received while the current request's head is
    incomplete (checked after every ``feed_data``, so httptools never accumulates much more than the limit
    plus one read), and the parsed URL and header bytes (a head that arrived whole in one read). Beyond the
    limit the client gets ``431 Request Header Fields Too Large`` in the service's JSON error shape and the
    connection is closed.
    """

    #: The limit; ``None`` reads ``max_header_bytes`` from :func:`get_settings` (worker processes).
    max_header_bytes: ClassVar[int | None] = None
    _logger = logging.getLogger("keystream.http")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        configured = type(self).max_header_bytes
        self._head_limit = configured if configured is not None else get_settings().max_header_bytes
        self._in_head = True  # the current request's head is still incomplete
        self._head_received = 0  # bytes received while the head was incomplete
        self._head_parsed = 0  # URL and header bytes the parser delivered for the current request
        self._head_too_large = False

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        self._head_received = 0
        self._head_parsed = 0

    def _count_parsed(self, size: int) -> None:
        self._head_parsed += size
        if self._head_parsed > self._head_limit:
            self._head_too_large = True
            raise HeadersTooLargeError

    def on_url(self, url: bytes) -> None:
        self._count_parsed(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_parsed(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._in_head = True
        self._head_received = 0

    def data_received(self, data: bytes) -> None:
        if self._head_too_large:
            return  # answered 431; the transport is closing
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
        except httptools.HttpParserError:
            if self._head_too_large:
                self._send_431()
                return
            message = "Invalid HTTP request received."
            self.logger.warning(message)
            self.send_400_response(message)
            return
        if self._in_head and self._head_received > self._head_limit:
            self._head_too_large = True
            self._send_431()

    def _send_431(self) -> None:
        self._logger.warning(
            "request head over %d bytes from %s: answered 431 and closed the connection",
            self._head_limit,
            f"{self.client[0]}:{self.client[1]}" if self.client else "unknown client",
        )
        body = json.dumps(
            {
                "error": {
                    "code": "request_header_fields_too_large",
                    "message": f"the request line and headers exceed {self._head_limit} bytes",
                }
            }
        ).encode("ascii")
        content = [STATUS_LINE[431]]
        for name, value in self.server_state.default_headers:
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
        self.transport.write(b"".join(content))
        self.transport.close()


def bootstrap(settings: Settings, out: TextIO | None = None) -> str | None:
    """Create the data directory (0700) and master key (0600) and install or generate the root token.

    A generated root token is printed once to ``out`` (default stdout) with a copy-paste ``curl`` example;
    it is never stored in clear or logged.

    Returns:
        The generated root token, or ``None`` when one already existed or ``KEYSTREAM_ROOT_TOKEN`` was set.

    Raises:
        app.keystore.master.MasterKeyError: the master key is malformed or does not open the keystore.
    """
    keystore = open_keystore_for(settings)
    try:
        root = settings.root_token.get_secret_value() if settings.root_token else None
        generated = install_root_token(keystore, root)
    finally:
        keystore.close()
    if generated is not None:
        stream = out if out is not None else sys.stdout
        host = "127.0.0.1" if settings.host in ("0.0.0.0", "::") else settings.host  # noqa: S104
        base = f"http://{host}:{settings.port}"
        # curl's --data-binary defaults to application/x-www-form-urlencoded, which the service refuses (415).
        octets = "-H 'Content-Type: application/octet-stream'"
        print(
            "\nKeystream root token (shown once; store it somewhere safe):\n"
            f"  {generated}\n\n"
            "Try it:\n"
            f"  export KEYSTREAM_TOKEN={generated}\n"
            f'  curl -s -H "Authorization: Bearer $KEYSTREAM_TOKEN" -H "Content-Type: application/json" '
            f'-d \'{{"name": "demo"}}\' {base}/v1/keys\n'
            f'  echo hello | curl -s -H "Authorization: Bearer $KEYSTREAM_TOKEN" {octets} '
            f"--data-binary @- {base}/v1/keys/demo/encrypt | "
            f'curl -s -H "Authorization: Bearer $KEYSTREAM_TOKEN" {octets} --data-binary @- '
            f"{base}/v1/keys/demo/decrypt\n",
            file=stream,
            flush=True,
        )
    return generated


def _export_settings(settings: Settings) -> None:
    """Put the settings into ``KEYSTREAM_*`` variables so worker processes (``create_app()``) see them."""
    for name, value in settings.model_dump().items():
        if value is None:
            continue
        if hasattr(value, "get_secret_value"):
            value = value.get_secret_value()
        if isinstance(value, list):
            value = ",".join(value)
        os.environ[f"KEYSTREAM_{name.upper()}"] = str(value)


def _prepare_multiprocess_dir(settings: Settings) -> Path:
    """A fresh ``PROMETHEUS_MULTIPROC_DIR`` (stale files from an earlier run would add up)."""
    configured = os.environ.get("PROMETHEUS_MULTIPROC_DIR")
    if configured:
        path = Path(configured)
        if path.exists():
            for child in path.glob("*.db"):
                child.unlink()
        path.mkdir(parents=True, exist_ok=True)
    else:
        path = Path(tempfile.mkdtemp(prefix="keystream-metrics-"))
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
    return path


def serve(settings: Settings | None = None) -> None:
    """Bootstrap, then serve until interrupted.

    With ``workers > 1`` the workers are separate processes that rebuild the app from the environment (the
    settings are exported as ``KEYSTREAM_*``) and metrics switch to prometheus-client's multiprocess mode.

    Raises:
        app.keystore.master.MasterKeyError: bad master key (nothing is served).
    """
    settings = settings if settings is not None else get_settings()
    bootstrap(settings)
    BoundedHttpToolsProtocol.max_header_bytes = settings.max_header_bytes
    common = {
        "host": settings.host,
        "port": settings.port,
        "loop": "uvloop",
        "http": BoundedHttpToolsProtocol,
        "timeout_graceful_shutdown": settings.timeout_graceful_shutdown,
        "log_level": settings.log_level,
        "access_log": settings.access_log,
        "server_header": False,
    }
    if settings.workers == 1:
        from app.main import create_app

        uvicorn.run(create_app(settings), **common)  # type: ignore[arg-type]
        return
    metrics_dir = _prepare_multiprocess_dir(settings)
    _export_settings(settings)
    try:
        uvicorn.run("app.main:create_app", factory=True, workers=settings.workers, **common)  # type: ignore[arg-type]
    finally:
        if metrics_dir.name.startswith("keystream-metrics-"):
            shutil.rmtree(metrics_dir, ignore_errors=True)

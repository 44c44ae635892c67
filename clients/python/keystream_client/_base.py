"""What the sync and async Keystream clients share: URL, token, TLS and timeouts, and the error mapping.

Like hvac's ``Client()``, a client built without arguments reads its URL from ``KEYSTREAM_URL`` (default
:data:`DEFAULT_URL`) and its token from ``KEYSTREAM_TOKEN``.
"""

from __future__ import annotations

import contextlib
import os
import ssl
from collections.abc import Iterator
from typing import Any

import httpx

from keystream_client import _transport as transport
from keystream_client._calls import Call, quote
from keystream_client._errors import (
    MAX_ERROR_BODY,
    KeystreamAPIError,
    KeystreamClientError,
    KeystreamConnectionError,
    KeystreamStreamError,
    api_error,
)
from keystream_client._options import CryptoOptions

#: The service URL when neither an argument nor ``KEYSTREAM_URL`` gives one.
DEFAULT_URL = "http://127.0.0.1:8000"
#: Environment variables read when the URL or the token is not given.
URL_ENV = "KEYSTREAM_URL"
TOKEN_ENV = "KEYSTREAM_TOKEN"  # noqa: S105 (the variable name, not a secret)
#: Bytes read from a source per request-body chunk.
DEFAULT_CHUNK_SIZE = 256 * 1024


class BaseClient:
    """Configuration shared by both clients: URL, token, TLS and timeouts.

    ``base_url`` None (or empty) reads ``KEYSTREAM_URL``, then falls back to :data:`DEFAULT_URL`; ``token``
    None reads ``KEYSTREAM_TOKEN`` (unset or empty: no ``Authorization`` header).

    Raises:
        ValueError: the URL is not http(s), or ``chunk_size`` < 1.
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        stream_timeout: float = 120.0,
        verify: bool | str | ssl.SSLContext = True,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
        base_url = base_url or os.environ.get(URL_ENV) or DEFAULT_URL
        if token is None:
            token = os.environ.get(TOKEN_ENV) or None
        url = httpx.URL(base_url)
        if url.scheme not in ("http", "https") or not url.host:
            raise ValueError(f"base_url must be an http:// or https:// URL, got {base_url!r}")
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self._base_url = str(url).rstrip("/")
        self._prefix = url.path.rstrip("/")
        self._timeout = timeout
        self._stream_timeout = stream_timeout
        self._chunk_size = chunk_size
        self._ssl: ssl.SSLContext | None = None
        if url.scheme == "https":
            if isinstance(verify, ssl.SSLContext):
                self._ssl = verify
            elif isinstance(verify, str):
                self._ssl = ssl.create_default_context(cafile=verify)
            else:
                self._ssl = ssl.create_default_context()
                if not verify:
                    self._ssl.check_hostname = False
                    self._ssl.verify_mode = ssl.CERT_NONE
        self._endpoint = transport.Endpoint(
            url.host, url.port or (443 if url.scheme == "https" else 80), self._ssl
        )
        self._headers = {"User-Agent": "keystream-client/0.1", "Accept": "application/json"}
        if token:
            self._headers["Authorization"] = f"Bearer {token}"

    def __repr__(self) -> str:  # never the token
        return f"{type(self).__name__}({self._base_url!r})"

    @property
    def base_url(self) -> str:
        """The service URL this client talks to."""
        return self._base_url

    def _httpx_options(self) -> dict[str, Any]:
        return {
            "base_url": self._base_url,
            "headers": self._headers,
            "timeout": httpx.Timeout(self._timeout),
            "verify": self._ssl if self._ssl is not None else True,
            # The streaming connection does not use proxies, so JSON calls do not either: one network path.
            "trust_env": False,
        }

    def _duplex(
        self,
        operation: str,
        key: str,
        options: CryptoOptions,
        body: transport.ChunkReader,
        length: int | None,
    ) -> transport.DuplexCall:
        options.check(operation)
        target = f"{self._prefix}/v1/keys/{quote(key)}/{operation}?{httpx.QueryParams(options.params())}"
        headers = [(name, value) for name, value in self._headers.items() if name != "Accept"]
        headers += [("Content-Type", "application/octet-stream"), *options.headers().items()]
        return transport.DuplexCall(
            self._endpoint, "POST", target, headers, body, length, self._timeout, self._stream_timeout
        )

    @staticmethod
    def _result(response: httpx.Response, call: Call) -> Any:
        if response.status_code >= 400:
            raise api_error(response.status_code, response.content[:MAX_ERROR_BODY])
        if not call.expect_json or response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise KeystreamAPIError(response.status_code, "invalid_response", "response is not JSON") from exc


@contextlib.contextmanager
def mapped_errors() -> Iterator[None]:
    """Transport failures as the client's exceptions: a response cut short is a stream error, a failure to
    reach the service a connection error."""
    try:
        yield
    except transport.ConnectFailedError as exc:
        raise KeystreamConnectionError(str(exc)) from exc
    except transport.StreamBrokenError as exc:
        raise KeystreamStreamError(str(exc)) from exc
    except transport.RequestBodyError as exc:
        raise KeystreamClientError(str(exc)) from exc
    except (httpx.RemoteProtocolError, httpx.ReadError) as exc:
        raise KeystreamStreamError(f"the response was cut short: {exc}") from exc
    except httpx.TransportError as exc:
        raise KeystreamConnectionError(f"{type(exc).__name__}: {exc}") from exc

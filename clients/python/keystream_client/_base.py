"""What the sync and async Keystream clients share: configuration, request builders, error mapping."""

from __future__ import annotations

import base64
import contextlib
import os
import secrets
import ssl
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx

from app import _client_transport as transport
from app._client_models import (
    MAX_ERROR_BODY,
    BatchItem,
    CryptoOptions,
    KeystreamAPIError,
    KeystreamClientError,
    KeystreamConnectionError,
    KeystreamStreamError,
    TransferResult,
    api_error,
    batch_body,
    quote,
)

DEFAULT_CHUNK_SIZE = 256 * 1024
Destination = str | os.PathLike[str] | IO[bytes]


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    json: Any = None
    expect_json: bool = True


class BaseClient:
    """Configuration shared by both clients: URL, token, TLS and timeouts."""

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        stream_timeout: float = 120.0,
        verify: bool | str | ssl.SSLContext = True,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
    ) -> None:
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


def check_lengths(options: CryptoOptions, sent: int, received: int) -> None:
    if options.format == "raw" and sent != received:
        raise KeystreamStreamError(
            f"raw response has {received} bytes for {sent} bytes sent; output is incomplete"
        )


#: ``os.open`` flags of the ``.partial`` file: a new file only (``O_EXCL`` also refuses an existing symlink).
PARTIAL_FLAGS = (
    os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
)


def open_partial(destination: Path) -> tuple[Path, IO[bytes]]:
    """Create the hidden file that output goes to before it is renamed to ``destination``.

    The name is unpredictable (``.<name>.<random>.partial`` in the destination's directory) and the file is
    created exclusively with mode 0600 from the start, so in a shared directory nobody can plant a symlink to
    redirect the plaintext or open the file before it is private.

    Returns:
        The file's path and the file opened for binary writing.

    Raises:
        OSError: the directory does not exist or is not writable.
    """
    while True:
        path = destination.with_name(f".{destination.name}.{secrets.token_hex(8)}.partial")
        try:
            descriptor = os.open(path, PARTIAL_FLAGS, 0o600)
        except FileExistsError:
            continue  # 64 random bits collided with a file already there: pick another name
        return path, os.fdopen(descriptor, "wb")


class StreamBase:
    """What a streaming response tells before and after its body: headers, key version, IV, byte counts."""

    def __init__(self, head: transport.ResponseHead, options: CryptoOptions, sent: Callable[[], int]) -> None:
        self._options = options
        self._sent = sent
        self.status = head.status
        self.headers = head.headers
        self.bytes_received = 0

    @property
    def key_version(self) -> int | None:
        """Key version that encrypted (``Keystream-Key-Version``), when the service sent it."""
        value = self.headers.get("keystream-key-version")
        return int(value) if value and value.isdigit() else None

    @property
    def iv(self) -> bytes | None:
        """The raw format's IV (``Keystream-IV``), or the one given."""
        value = self.headers.get("keystream-iv")
        return bytes.fromhex(value) if value else self._options.iv

    @property
    def bytes_sent(self) -> int:
        """Request-body bytes sent so far."""
        return self._sent()

    def result(self) -> TransferResult:
        """Summary of the finished transfer."""
        return TransferResult(
            self._options.format, self.key_version, self.iv, self.bytes_sent, self.bytes_received
        )


def create_key_call(name: str, key_type: str, segment_size: int | None, deletion_allowed: bool) -> Call:
    body: dict[str, Any] = {"name": name, "type": key_type, "deletion_allowed": deletion_allowed}
    if segment_size is not None:
        body["segment_size"] = segment_size
    return Call("POST", "/v1/keys", body)


def import_key_call(name: str, material: bytes, segment_size: int | None, deletion_allowed: bool) -> Call:
    body: dict[str, Any] = {"key": base64.b64encode(material).decode(), "deletion_allowed": deletion_allowed}
    if segment_size is not None:
        body["segment_size"] = segment_size
    return Call("POST", f"/v1/keys/{quote(name)}/import", body)


def configure_key_call(name: str, min_decryption_version: int | None, deletion_allowed: bool | None) -> Call:
    body: dict[str, Any] = {}
    if min_decryption_version is not None:
        body["min_decryption_version"] = min_decryption_version
    if deletion_allowed is not None:
        body["deletion_allowed"] = deletion_allowed
    return Call("PATCH", f"/v1/keys/{quote(name)}", body)


def create_token_call(scopes: Sequence[str], key_patterns: Sequence[str], description: str) -> Call:
    body = {"scopes": list(scopes), "key_patterns": list(key_patterns), "description": description}
    return Call("POST", "/v1/tokens", body)


def batch_call(
    key: str, operation: str, items: Sequence[BatchItem | bytes], key_version: int | None, backend: str | None
) -> Call:
    query = httpx.QueryParams(
        {k: v for k, v in (("key_version", key_version), ("backend", backend)) if v is not None}
    )
    suffix = f"?{query}" if query else ""
    return Call("POST", f"/v1/keys/{quote(key)}/{operation}/batch{suffix}", batch_body(operation, items))

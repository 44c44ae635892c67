"""Keystream service client: sync :class:`KeystreamClient` and async :class:`AsyncKeystreamClient`.

>>> with KeystreamClient("http://127.0.0.1:8000", token) as ks:            # doctest: +SKIP
...     ks.create_key("invoices")
...     sealed = ks.encrypt("invoices", b"hello", associated_data=b"invoice-42")
...     ks.decrypt("invoices", sealed.data, associated_data=b"invoice-42").data
b'hello'

JSON calls (keys, tokens, batch) go through httpx. Streaming encrypt/decrypt goes through a full-duplex
HTTP/1.1 connection (:mod:`app._client_transport`): the service streams its response while it still reads the
request, and a client that sends the whole body first stalls on large transfers. Bodies and responses are
streamed in chunks of ``chunk_size`` bytes; no call loads a whole file into memory. Connections go
straight to the service: the full-duplex connection does not speak to proxies, so ``HTTP(S)_PROXY``
variables are ignored for JSON calls too.

Errors: every JSON error of the service raises :class:`KeystreamAPIError` (``status``, ``code``, ``message``);
a connection that cannot be made raises :class:`KeystreamConnectionError`; a response stream that ends without
its terminator (the service aborts the connection when a sealed segment fails to verify after output started)
raises :class:`KeystreamStreamError`, so truncated or tampered output is never returned as a success.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import ssl
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import httpx

from app import _client_transport as transport
from app._client_models import (
    MAX_ERROR_BODY,
    BatchItem,
    BatchResult,
    CipherResult,
    CryptoOptions,
    Key,
    KeystreamAPIError,
    KeystreamClientError,
    KeystreamConnectionError,
    KeystreamStreamError,
    NewToken,
    Token,
    TransferResult,
    api_error,
    batch_body,
    parse_batch,
    parse_key,
    parse_keys,
    parse_new_token,
    parse_tokens,
    quote,
)
from app._client_sources import ProgressCallback, Source, chunk_reader

__all__ = [
    "AsyncCipherStream",
    "AsyncKeystreamClient",
    "BatchItem",
    "BatchResult",
    "CipherResult",
    "CipherStream",
    "Key",
    "KeystreamAPIError",
    "KeystreamClient",
    "KeystreamClientError",
    "KeystreamConnectionError",
    "KeystreamStreamError",
    "NewToken",
    "ProgressCallback",
    "Source",
    "Token",
    "TransferResult",
]

DEFAULT_CHUNK_SIZE = 256 * 1024
_T = TypeVar("_T")
Destination = str | os.PathLike[str] | IO[bytes]


@dataclass(frozen=True)
class _Call:
    method: str
    path: str
    json: Any = None
    expect_json: bool = True


class _BaseClient:
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
    def _result(response: httpx.Response, call: _Call) -> Any:
        if response.status_code >= 400:
            raise api_error(response.status_code, response.content[:MAX_ERROR_BODY])
        if not call.expect_json or response.status_code == 204 or not response.content:
            return None
        try:
            return response.json()
        except ValueError as exc:
            raise KeystreamAPIError(response.status_code, "invalid_response", "response is not JSON") from exc


@contextlib.contextmanager
def _mapped_errors() -> Iterator[None]:
    try:
        yield
    except transport.ConnectFailedError as exc:
        raise KeystreamConnectionError(str(exc)) from exc
    except transport.StreamBrokenError as exc:
        raise KeystreamStreamError(str(exc)) from exc
    except transport.RequestBodyError as exc:
        raise KeystreamClientError(str(exc)) from exc
    except httpx.TransportError as exc:
        raise KeystreamConnectionError(f"{type(exc).__name__}: {exc}") from exc


def _check_lengths(options: CryptoOptions, sent: int, received: int) -> None:
    if options.format == "raw" and sent != received:
        raise KeystreamStreamError(
            f"raw response has {received} bytes for {sent} bytes sent; output is incomplete"
        )


def _partial_path(destination: Path) -> Path:
    return destination.with_name(f".{destination.name}.{os.getpid()}.partial")


class _StreamBase:
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


class CipherStream(_StreamBase):
    """A streaming encrypt/decrypt response (sync). Iterate it once; check :attr:`key_version` / :attr:`iv`.

    Iteration raises :class:`KeystreamStreamError` when the body ends without its terminator.
    """

    def __init__(
        self,
        runner: transport.LoopRunner,
        call: transport.DuplexCall,
        head: transport.ResponseHead,
        options: CryptoOptions,
        sent: Callable[[], int],
    ) -> None:
        super().__init__(head, options, sent)
        self._runner = runner
        self._call = call

    def __iter__(self) -> Iterator[bytes]:
        """Response chunks as they arrive.

        Raises:
            KeystreamStreamError: the stream was cut short or, for raw, lengths differ.
        """
        with _mapped_errors():
            while chunk := self._runner.run(self._call.read_chunk()):
                self.bytes_received += len(chunk)
                yield chunk
        _check_lengths(self._options, self.bytes_sent, self.bytes_received)

    def read(self) -> bytes:
        """The whole remaining response in memory (for small payloads).

        Raises:
            KeystreamStreamError: as iteration.
        """
        return b"".join(self)


class KeystreamClient(_BaseClient):
    """Synchronous client. Use as a context manager or call :meth:`close`.

    Args:
        base_url: service URL, e.g. ``http://127.0.0.1:8000``.
        token: bearer token ``ks_<id>_<secret>``; never shown in reprs or errors.
        timeout: seconds for JSON calls and for the response head of a stream.
        stream_timeout: seconds without progress before a streaming transfer fails.
        verify: TLS verification: True, False, a CA bundle path or an :class:`ssl.SSLContext`.
        chunk_size: bytes read from a source per request chunk.
        transport: an httpx transport for JSON calls (tests), else a normal connection pool.

    Raises:
        ValueError: ``base_url`` is not http(s), or ``chunk_size`` < 1.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        stream_timeout: float = 120.0,
        verify: bool | str | ssl.SSLContext = True,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url,
            token,
            timeout=timeout,
            stream_timeout=stream_timeout,
            verify=verify,
            chunk_size=chunk_size,
        )
        self._http = httpx.Client(transport=transport, **self._httpx_options())

    def __enter__(self) -> KeystreamClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _send(self, call: _Call) -> Any:
        with _mapped_errors():
            response = self._http.request(call.method, call.path, json=call.json)
        return self._result(response, call)

    # -- keys ------------------------------------------------------------------------------------------------
    def create_key(
        self,
        name: str,
        *,
        key_type: str = "aes256",
        segment_size: int | None = None,
        deletion_allowed: bool = False,
    ) -> Key:
        """Create a key with server-generated material.

        Raises:
            KeystreamAPIError: 409 ``key_exists``, 400 for a bad name/type/segment size, 403 no admin.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(self._send(_create_key(name, key_type, segment_size, deletion_allowed)))

    def import_key(
        self, name: str, material: bytes, *, segment_size: int | None = None, deletion_allowed: bool = False
    ) -> Key:
        """Import key material (16, 24 or 32 bytes); the service must allow imports.

        Raises:
            KeystreamAPIError: e.g. 403 when imports are disabled, 400 for a bad length.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(self._send(_import_key(name, material, segment_size, deletion_allowed)))

    def list_keys(self) -> list[Key]:
        """Every key's metadata.

        Raises:
            KeystreamAPIError: e.g. 401/403.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_keys(self._send(_Call("GET", "/v1/keys")))

    def get_key(self, name: str) -> Key:
        """One key's metadata (never material).

        Raises:
            KeystreamAPIError: 404 ``key_not_found`` and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(self._send(_Call("GET", f"/v1/keys/{quote(name)}")))

    def rotate_key(self, name: str) -> Key:
        """Add a new key version; older versions keep decrypting.

        Raises:
            KeystreamAPIError: 404 and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(self._send(_Call("POST", f"/v1/keys/{quote(name)}/rotate")))

    def configure_key(
        self, name: str, *, min_decryption_version: int | None = None, deletion_allowed: bool | None = None
    ) -> Key:
        """Change a key's policy (PATCH); unset arguments stay as they are.

        Raises:
            KeystreamAPIError: 400 when ``min_decryption_version`` is outside 1..latest, 404 and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(self._send(_configure_key(name, min_decryption_version, deletion_allowed)))

    def delete_key(self, name: str) -> None:
        """Delete a key and all its versions.

        Raises:
            KeystreamAPIError: 409 ``deletion_not_allowed`` unless allowed, 404 and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        self._send(_Call("DELETE", f"/v1/keys/{quote(name)}", expect_json=False))

    # -- tokens ----------------------------------------------------------------------------------------------
    def create_token(
        self, scopes: Sequence[str], key_patterns: Sequence[str] = ("*",), description: str = ""
    ) -> NewToken:
        """Create a bearer token; its secret is in :attr:`NewToken.token` and is shown only this once.

        Raises:
            KeystreamAPIError: 400 for an unknown scope, 403 without admin.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_new_token(self._send(_create_token(scopes, key_patterns, description)))

    def list_tokens(self) -> list[Token]:
        """Every token's metadata (never secrets).

        Raises:
            KeystreamAPIError: e.g. 403 without admin.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_tokens(self._send(_Call("GET", "/v1/tokens")))

    def delete_token(self, token_id: str) -> None:
        """Revoke a token.

        Raises:
            KeystreamAPIError: 404 ``token_not_found`` and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        self._send(_Call("DELETE", f"/v1/tokens/{quote(token_id)}", expect_json=False))

    # -- service ---------------------------------------------------------------------------------------------
    def backends(self) -> Any:
        """``GET /v1/backends`` as decoded JSON.

        Raises:
            KeystreamAPIError: e.g. 401.
            KeystreamConnectionError: the service is unreachable.
        """
        return self._send(_Call("GET", "/v1/backends"))

    def health(self) -> bool:
        """True when ``/healthz`` answers 2xx.

        Raises:
            KeystreamConnectionError: the service is unreachable.
        """
        with _mapped_errors():
            return self._http.get("/healthz").is_success

    # -- batch -----------------------------------------------------------------------------------------------
    def encrypt_batch(
        self,
        key: str,
        items: Sequence[BatchItem | bytes],
        *,
        key_version: int | None = None,
        backend: str | None = None,
    ) -> list[BatchResult]:
        """Encrypt many small items (sealed format) in one request; per-item errors do not fail the batch.

        Raises:
            KeystreamAPIError: the whole batch failed (e.g. 413 beyond the service's limits, 404 key).
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_batch(self._send(_batch(key, "encrypt", items, key_version, backend)), "ciphertext")

    def decrypt_batch(
        self,
        key: str,
        items: Sequence[BatchItem | bytes],
        *,
        key_version: int | None = None,
        backend: str | None = None,
    ) -> list[BatchResult]:
        """Decrypt many sealed items in one request; a failing item carries :attr:`BatchResult.error`.

        Raises:
            KeystreamAPIError: the whole batch failed.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_batch(self._send(_batch(key, "decrypt", items, key_version, backend)), "plaintext")

    # -- streaming -------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def encrypt_stream(
        self,
        key: str,
        source: Source,
        *,
        format: str = "sealed",
        associated_data: bytes | None = None,
        iv: bytes | str | None = None,
        offset: int = 0,
        key_version: int | None = None,
        backend: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Iterator[CipherStream]:
        """Stream ``source`` (bytes, binary file, iterable of bytes, or a path) through encrypt.

        Yields a :class:`CipherStream` once the response head arrived; iterate it for the ciphertext.

        Raises:
            KeystreamAPIError: the service refused the request (bad key, params, auth).
            KeystreamConnectionError: the service is unreachable.
            KeystreamStreamError: the response was cut short (during iteration).
            ValueError: inconsistent options (e.g. ``iv`` with the sealed format).
        """
        options = CryptoOptions.build(format, associated_data, iv, offset, key_version, backend)
        with self._open("encrypt", key, source, options, on_progress) as stream:
            yield stream

    @contextlib.contextmanager
    def decrypt_stream(
        self,
        key: str,
        source: Source,
        *,
        format: str = "sealed",
        associated_data: bytes | None = None,
        iv: bytes | str | None = None,
        offset: int = 0,
        key_version: int | None = None,
        backend: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Iterator[CipherStream]:
        """Stream ``source`` through decrypt; sealed plaintext is released only for verified segments.

        Raises:
            KeystreamAPIError: e.g. 400 ``decryption_failed`` when the first segment does not verify.
            KeystreamConnectionError: the service is unreachable.
            KeystreamStreamError: a later segment failed or the connection dropped (during iteration).
            ValueError: inconsistent options (e.g. raw without ``iv``).
        """
        options = CryptoOptions.build(format, associated_data, iv, offset, key_version, backend)
        with self._open("decrypt", key, source, options, on_progress) as stream:
            yield stream

    def encrypt(self, key: str, data: bytes, **options: Any) -> CipherResult:
        """Encrypt ``data`` in memory; ``options`` as :meth:`encrypt_stream`.

        Raises:
            KeystreamAPIError, KeystreamConnectionError, KeystreamStreamError: as :meth:`encrypt_stream`.
        """
        with self.encrypt_stream(key, data, **options) as stream:
            output = stream.read()
            return CipherResult(output, stream.key_version, stream.iv, stream.result().format)

    def decrypt(self, key: str, data: bytes, **options: Any) -> CipherResult:
        """Decrypt ``data`` in memory; ``options`` as :meth:`decrypt_stream`.

        Raises:
            KeystreamAPIError, KeystreamConnectionError, KeystreamStreamError: as :meth:`decrypt_stream`.
        """
        with self.decrypt_stream(key, data, **options) as stream:
            output = stream.read()
            return CipherResult(output, stream.key_version, stream.iv, stream.result().format)

    def encrypt_file(
        self, key: str, source: Source, destination: Destination, **options: Any
    ) -> TransferResult:
        """Encrypt ``source`` into ``destination`` (a path or a binary file), streaming both ways.

        A path destination is written to a hidden ``.partial`` file renamed into place on success and removed
        on failure. A file-object destination may hold partial output when this raises: discard it.

        Raises:
            KeystreamAPIError, KeystreamConnectionError, KeystreamStreamError: as :meth:`encrypt_stream`.
            OSError: writing ``destination`` failed.
        """
        return self._transfer(self.encrypt_stream, key, source, destination, options)

    def decrypt_file(
        self, key: str, source: Source, destination: Destination, **options: Any
    ) -> TransferResult:
        """Decrypt ``source`` into ``destination``; partial output is removed as in :meth:`encrypt_file`.

        Raises:
            KeystreamAPIError, KeystreamConnectionError, KeystreamStreamError: as :meth:`decrypt_stream`.
            OSError: writing ``destination`` failed.
        """
        return self._transfer(self.decrypt_stream, key, source, destination, options)

    def _transfer(
        self,
        opener: Callable[..., contextlib.AbstractContextManager[CipherStream]],
        key: str,
        source: Source,
        destination: Destination,
        options: dict[str, Any],
    ) -> TransferResult:
        if isinstance(destination, str | os.PathLike):
            final = Path(destination)
            partial = _partial_path(final)
            try:
                with open(partial, "wb") as out:
                    os.chmod(partial, 0o600)
                    result = self._transfer(opener, key, source, out, options)
                os.replace(partial, final)
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
            return result
        with opener(key, source, **options) as stream:
            for chunk in stream:
                destination.write(chunk)
            return stream.result()

    @contextlib.contextmanager
    def _open(
        self,
        operation: str,
        key: str,
        source: Source,
        options: CryptoOptions,
        on_progress: ProgressCallback | None,
    ) -> Iterator[CipherStream]:
        with chunk_reader(source, self._chunk_size, on_progress, async_client=False) as (
            reader,
            length,
            sent,
        ):
            call = self._duplex(operation, key, options, reader, length)
            runner = transport.LoopRunner()
            try:
                with _mapped_errors():
                    head = runner.run(call.start())
                    if head.status >= 400:
                        raise api_error(head.status, runner.run(call.read_all(MAX_ERROR_BODY)))
                yield CipherStream(runner, call, head, options, sent)
            finally:
                runner.run(call.aclose())
                runner.close()


# -- request builders shared by both clients ------------------------------------------------------------
def _create_key(name: str, key_type: str, segment_size: int | None, deletion_allowed: bool) -> _Call:
    body: dict[str, Any] = {"name": name, "type": key_type, "deletion_allowed": deletion_allowed}
    if segment_size is not None:
        body["segment_size"] = segment_size
    return _Call("POST", "/v1/keys", body)


def _import_key(name: str, material: bytes, segment_size: int | None, deletion_allowed: bool) -> _Call:
    body: dict[str, Any] = {"key": base64.b64encode(material).decode(), "deletion_allowed": deletion_allowed}
    if segment_size is not None:
        body["segment_size"] = segment_size
    return _Call("POST", f"/v1/keys/{quote(name)}/import", body)


def _configure_key(name: str, min_decryption_version: int | None, deletion_allowed: bool | None) -> _Call:
    body: dict[str, Any] = {}
    if min_decryption_version is not None:
        body["min_decryption_version"] = min_decryption_version
    if deletion_allowed is not None:
        body["deletion_allowed"] = deletion_allowed
    return _Call("PATCH", f"/v1/keys/{quote(name)}", body)


def _create_token(scopes: Sequence[str], key_patterns: Sequence[str], description: str) -> _Call:
    body = {"scopes": list(scopes), "key_patterns": list(key_patterns), "description": description}
    return _Call("POST", "/v1/tokens", body)


def _batch(
    key: str, operation: str, items: Sequence[BatchItem | bytes], key_version: int | None, backend: str | None
) -> _Call:
    query = httpx.QueryParams(
        {k: v for k, v in (("key_version", key_version), ("backend", backend)) if v is not None}
    )
    suffix = f"?{query}" if query else ""
    return _Call("POST", f"/v1/keys/{quote(key)}/{operation}/batch{suffix}", batch_body(operation, items))


# -- async ------------------------------------------------------------------------------------------------
class AsyncCipherStream(_StreamBase):
    """A streaming encrypt/decrypt response (async); ``async for chunk in stream``."""

    def __init__(
        self,
        call: transport.DuplexCall,
        head: transport.ResponseHead,
        options: CryptoOptions,
        sent: Callable[[], int],
    ) -> None:
        super().__init__(head, options, sent)
        self._call = call

    async def __aiter__(self) -> AsyncIterator[bytes]:
        """Response chunks as they arrive.

        Raises:
            KeystreamStreamError: the stream was cut short or, for raw, lengths differ.
        """
        with _mapped_errors():
            while chunk := await self._call.read_chunk():
                self.bytes_received += len(chunk)
                yield chunk
        _check_lengths(self._options, self.bytes_sent, self.bytes_received)

    async def read(self) -> bytes:
        """The whole remaining response in memory.

        Raises:
            KeystreamStreamError: as iteration.
        """
        return b"".join([chunk async for chunk in self])


class AsyncKeystreamClient(_BaseClient):
    """Asyncio client with the same methods as :class:`KeystreamClient`, awaitable.

    Arguments and errors as :class:`KeystreamClient`; ``transport`` is an ``httpx.AsyncBaseTransport``.
    Sources may also be async iterables of bytes; sync files are read in a worker thread.
    """

    def __init__(
        self,
        base_url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        stream_timeout: float = 120.0,
        verify: bool | str | ssl.SSLContext = True,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        super().__init__(
            base_url,
            token,
            timeout=timeout,
            stream_timeout=stream_timeout,
            verify=verify,
            chunk_size=chunk_size,
        )
        self._http = httpx.AsyncClient(transport=transport, **self._httpx_options())

    async def __aenter__(self) -> AsyncKeystreamClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _send(self, call: _Call) -> Any:
        with _mapped_errors():
            response = await self._http.request(call.method, call.path, json=call.json)
        return self._result(response, call)

    async def create_key(
        self,
        name: str,
        *,
        key_type: str = "aes256",
        segment_size: int | None = None,
        deletion_allowed: bool = False,
    ) -> Key:
        """As :meth:`KeystreamClient.create_key`."""
        return parse_key(await self._send(_create_key(name, key_type, segment_size, deletion_allowed)))

    async def import_key(
        self, name: str, material: bytes, *, segment_size: int | None = None, deletion_allowed: bool = False
    ) -> Key:
        """As :meth:`KeystreamClient.import_key`."""
        return parse_key(await self._send(_import_key(name, material, segment_size, deletion_allowed)))

    async def list_keys(self) -> list[Key]:
        """As :meth:`KeystreamClient.list_keys`."""
        return parse_keys(await self._send(_Call("GET", "/v1/keys")))

    async def get_key(self, name: str) -> Key:
        """As :meth:`KeystreamClient.get_key`."""
        return parse_key(await self._send(_Call("GET", f"/v1/keys/{quote(name)}")))

    async def rotate_key(self, name: str) -> Key:
        """As :meth:`KeystreamClient.rotate_key`."""
        return parse_key(await self._send(_Call("POST", f"/v1/keys/{quote(name)}/rotate")))

    async def configure_key(
        self, name: str, *, min_decryption_version: int | None = None, deletion_allowed: bool | None = None
    ) -> Key:
        """As :meth:`KeystreamClient.configure_key`."""
        return parse_key(await self._send(_configure_key(name, min_decryption_version, deletion_allowed)))

    async def delete_key(self, name: str) -> None:
        """As :meth:`KeystreamClient.delete_key`."""
        await self._send(_Call("DELETE", f"/v1/keys/{quote(name)}", expect_json=False))

    async def create_token(
        self, scopes: Sequence[str], key_patterns: Sequence[str] = ("*",), description: str = ""
    ) -> NewToken:
        """As :meth:`KeystreamClient.create_token`."""
        return parse_new_token(await self._send(_create_token(scopes, key_patterns, description)))

    async def list_tokens(self) -> list[Token]:
        """As :meth:`KeystreamClient.list_tokens`."""
        return parse_tokens(await self._send(_Call("GET", "/v1/tokens")))

    async def delete_token(self, token_id: str) -> None:
        """As :meth:`KeystreamClient.delete_token`."""
        await self._send(_Call("DELETE", f"/v1/tokens/{quote(token_id)}", expect_json=False))

    async def backends(self) -> Any:
        """As :meth:`KeystreamClient.backends`."""
        return await self._send(_Call("GET", "/v1/backends"))

    async def health(self) -> bool:
        """As :meth:`KeystreamClient.health`."""
        with _mapped_errors():
            return (await self._http.get("/healthz")).is_success

    async def encrypt_batch(
        self,
        key: str,
        items: Sequence[BatchItem | bytes],
        *,
        key_version: int | None = None,
        backend: str | None = None,
    ) -> list[BatchResult]:
        """As :meth:`KeystreamClient.encrypt_batch`."""
        return parse_batch(
            await self._send(_batch(key, "encrypt", items, key_version, backend)), "ciphertext"
        )

    async def decrypt_batch(
        self,
        key: str,
        items: Sequence[BatchItem | bytes],
        *,
        key_version: int | None = None,
        backend: str | None = None,
    ) -> list[BatchResult]:
        """As :meth:`KeystreamClient.decrypt_batch`."""
        return parse_batch(await self._send(_batch(key, "decrypt", items, key_version, backend)), "plaintext")

    def encrypt_stream(
        self, key: str, source: Source, **options: Any
    ) -> contextlib.AbstractAsyncContextManager[AsyncCipherStream]:
        """As :meth:`KeystreamClient.encrypt_stream`, as an async context manager."""
        return self._open("encrypt", key, source, options)

    def decrypt_stream(
        self, key: str, source: Source, **options: Any
    ) -> contextlib.AbstractAsyncContextManager[AsyncCipherStream]:
        """As :meth:`KeystreamClient.decrypt_stream`, as an async context manager."""
        return self._open("decrypt", key, source, options)

    async def encrypt(self, key: str, data: bytes, **options: Any) -> CipherResult:
        """As :meth:`KeystreamClient.encrypt`."""
        async with self.encrypt_stream(key, data, **options) as stream:
            output = await stream.read()
            return CipherResult(output, stream.key_version, stream.iv, stream.result().format)

    async def decrypt(self, key: str, data: bytes, **options: Any) -> CipherResult:
        """As :meth:`KeystreamClient.decrypt`."""
        async with self.decrypt_stream(key, data, **options) as stream:
            output = await stream.read()
            return CipherResult(output, stream.key_version, stream.iv, stream.result().format)

    async def encrypt_file(
        self, key: str, source: Source, destination: Destination, **options: Any
    ) -> TransferResult:
        """As :meth:`KeystreamClient.encrypt_file` (file writes run in a worker thread)."""
        return await self._transfer("encrypt", key, source, destination, options)

    async def decrypt_file(
        self, key: str, source: Source, destination: Destination, **options: Any
    ) -> TransferResult:
        """As :meth:`KeystreamClient.decrypt_file` (file writes run in a worker thread)."""
        return await self._transfer("decrypt", key, source, destination, options)

    async def _transfer(
        self, operation: str, key: str, source: Source, destination: Destination, options: dict[str, Any]
    ) -> TransferResult:
        if isinstance(destination, str | os.PathLike):
            final = Path(destination)
            partial = _partial_path(final)
            try:
                out = await asyncio.to_thread(open, partial, "wb")
                try:
                    os.chmod(partial, 0o600)
                    result = await self._transfer(operation, key, source, out, options)
                finally:
                    await asyncio.to_thread(out.close)
                os.replace(partial, final)
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
            return result
        async with self._open(operation, key, source, options) as stream:
            async for chunk in stream:
                await asyncio.to_thread(destination.write, chunk)
            return stream.result()

    @contextlib.asynccontextmanager
    async def _open(
        self, operation: str, key: str, source: Source, options: dict[str, Any]
    ) -> AsyncIterator[AsyncCipherStream]:
        on_progress = options.pop("on_progress", None)
        crypto = CryptoOptions.from_kwargs(options)
        with chunk_reader(source, self._chunk_size, on_progress, async_client=True) as (reader, length, sent):
            call = self._duplex(operation, key, crypto, reader, length)
            try:
                with _mapped_errors():
                    head = await call.start()
                    if head.status >= 400:
                        raise api_error(head.status, await call.read_all(MAX_ERROR_BODY))
                yield AsyncCipherStream(call, head, crypto, sent)
            finally:
                await call.aclose()

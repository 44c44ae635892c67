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

import contextlib
import os
import ssl
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx

from app import _client_transport as transport
from app._client_async import AsyncCipherStream, AsyncKeystreamClient
from app._client_base import (
    DEFAULT_CHUNK_SIZE,
    BaseClient,
    Call,
    Destination,
    StreamBase,
    batch_call,
    check_lengths,
    configure_key_call,
    create_key_call,
    create_token_call,
    import_key_call,
    mapped_errors,
    open_partial,
)
from app._client_models import (
    MAX_ERROR_BODY,
    BatchError,
    BatchItem,
    BatchResult,
    CipherResult,
    CryptoOptions,
    Key,
    KeystreamAPIError,
    KeystreamClientError,
    KeystreamConnectionError,
    KeystreamStreamError,
    KeyVersion,
    NewToken,
    Token,
    TransferResult,
    api_error,
    parse_batch,
    parse_key,
    parse_keys,
    parse_new_token,
    parse_tokens,
    quote,
)
from app._client_sources import ProgressCallback, Source, chunk_reader

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "AsyncCipherStream",
    "AsyncKeystreamClient",
    "BatchError",
    "BatchItem",
    "BatchResult",
    "CipherResult",
    "CipherStream",
    "Destination",
    "Key",
    "KeyVersion",
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


class CipherStream(StreamBase):
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
        with mapped_errors():
            while chunk := self._runner.run(self._call.read_chunk):
                self.bytes_received += len(chunk)
                yield chunk
        check_lengths(self._options, self.bytes_sent, self.bytes_received)

    def read(self) -> bytes:
        """The whole remaining response in memory (for small payloads).

        Raises:
            KeystreamStreamError: as iteration.
        """
        return b"".join(self)


class KeystreamClient(BaseClient):
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

    def _send(self, call: Call) -> Any:
        with mapped_errors():
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
        return parse_key(self._send(create_key_call(name, key_type, segment_size, deletion_allowed)))

    def import_key(
        self, name: str, material: bytes, *, segment_size: int | None = None, deletion_allowed: bool = False
    ) -> Key:
        """Import key material (16, 24 or 32 bytes); the service must allow imports.

        Raises:
            KeystreamAPIError: e.g. 403 when imports are disabled, 400 for a bad length.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(self._send(import_key_call(name, material, segment_size, deletion_allowed)))

    def list_keys(self) -> list[Key]:
        """Every key's metadata.

        Raises:
            KeystreamAPIError: e.g. 401/403.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_keys(self._send(Call("GET", "/v1/keys")))

    def get_key(self, name: str) -> Key:
        """One key's metadata (never material).

        Raises:
            KeystreamAPIError: 404 ``key_not_found`` and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(self._send(Call("GET", f"/v1/keys/{quote(name)}")))

    def rotate_key(self, name: str) -> Key:
        """Add a new key version; older versions keep decrypting.

        Raises:
            KeystreamAPIError: 404 and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(self._send(Call("POST", f"/v1/keys/{quote(name)}/rotate")))

    def configure_key(
        self, name: str, *, min_decryption_version: int | None = None, deletion_allowed: bool | None = None
    ) -> Key:
        """Change a key's policy (PATCH); unset arguments stay as they are.

        Raises:
            KeystreamAPIError: 400 when ``min_decryption_version`` is outside 1..latest, 404 and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(self._send(configure_key_call(name, min_decryption_version, deletion_allowed)))

    def delete_key(self, name: str) -> None:
        """Delete a key and all its versions.

        Raises:
            KeystreamAPIError: 409 ``deletion_not_allowed`` unless allowed, 404 and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        self._send(Call("DELETE", f"/v1/keys/{quote(name)}", expect_json=False))

    # -- tokens ----------------------------------------------------------------------------------------------
    def create_token(
        self, scopes: Sequence[str], key_patterns: Sequence[str] = ("*",), description: str = ""
    ) -> NewToken:
        """Create a bearer token; its secret is in :attr:`NewToken.token` and is shown only this once.

        Raises:
            KeystreamAPIError: 400 for an unknown scope, 403 without admin.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_new_token(self._send(create_token_call(scopes, key_patterns, description)))

    def list_tokens(self) -> list[Token]:
        """Every token's metadata (never secrets).

        Raises:
            KeystreamAPIError: e.g. 403 without admin.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_tokens(self._send(Call("GET", "/v1/tokens")))

    def delete_token(self, token_id: str) -> None:
        """Revoke a token.

        Raises:
            KeystreamAPIError: 404 ``token_not_found`` and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        self._send(Call("DELETE", f"/v1/tokens/{quote(token_id)}", expect_json=False))

    # -- service ---------------------------------------------------------------------------------------------
    def backends(self) -> Any:
        """``GET /v1/backends`` as decoded JSON.

        Raises:
            KeystreamAPIError: e.g. 401.
            KeystreamConnectionError: the service is unreachable.
        """
        return self._send(Call("GET", "/v1/backends"))

    def health(self) -> bool:
        """True when ``/healthz`` answers 2xx.

        Raises:
            KeystreamConnectionError: the service is unreachable.
        """
        with mapped_errors():
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
        return parse_batch(self._send(batch_call(key, "encrypt", items, key_version, backend)), "ciphertext")

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
        return parse_batch(self._send(batch_call(key, "decrypt", items, key_version, backend)), "plaintext")

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
            partial, out = open_partial(final)
            try:
                with out:
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
                with mapped_errors():
                    head = runner.run(call.start)
                    if head.status >= 400:
                        raise api_error(head.status, runner.run(lambda: call.read_all(MAX_ERROR_BODY)))
                yield CipherStream(runner, call, head, options, sent)
            finally:
                runner.run(call.aclose)
                runner.close()

"""Streaming encrypt/decrypt/rewrap of the sync client: :class:`CipherStream` and the methods that open one.

Bodies go through the full-duplex transport (:mod:`keystream_client._transport`) on a private event loop
(:class:`keystream_client._loop.LoopRunner`), in chunks of ``chunk_size`` bytes; no call loads a whole file
into memory.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from keystream_client import _transport as transport
from keystream_client._autologin import SyncJwtLogin
from keystream_client._base import BaseClient, mapped_errors
from keystream_client._errors import MAX_ERROR_BODY, api_error
from keystream_client._loop import LoopRunner
from keystream_client._models import CipherResult, TransferResult
from keystream_client._options import CryptoOptions
from keystream_client._sources import ProgressCallback, Source, chunk_reader
from keystream_client._streams import (
    Destination,
    StreamBase,
    broken_stream_error,
    check_lengths,
    open_partial,
)


class CipherStream(StreamBase):
    """A streaming encrypt/decrypt response (sync). Iterate it once; check :attr:`key_version` / :attr:`iv`.

    Iteration raises :class:`KeystreamStreamError` when the body ends without its terminator.
    """

    def __init__(
        self,
        runner: LoopRunner,
        call: transport.DuplexCall,
        head: transport.ResponseHead,
        options: CryptoOptions,
        sent: Callable[[], int],
        operation: str = "",
    ) -> None:
        super().__init__(head, options, sent, operation)
        self._runner = runner
        self._call = call

    def __iter__(self) -> Iterator[bytes]:
        """Response chunks as they arrive.

        Raises:
            KeystreamStreamError: the stream was cut short or, for raw, lengths differ.
        """
        with mapped_errors():
            try:
                while chunk := self._runner.run(self._call.read_chunk):
                    self.bytes_received += len(chunk)
                    yield chunk
            except transport.StreamBrokenError as exc:
                raise broken_stream_error(exc, self._operation, self._options, self.bytes_received) from exc
        check_lengths(self._options, self.bytes_sent, self.bytes_received)

    def read(self) -> bytes:
        """The whole remaining response in memory (for small payloads).

        Raises:
            KeystreamStreamError: as iteration.
        """
        return b"".join(self)


class SyncStreamingClient(BaseClient):
    """The streaming half of :class:`keystream_client.KeystreamClient` (see there for the arguments)."""

    #: The automatic login, when the client logs in by itself (set by :class:`KeystreamClient`).
    _jwt_login: SyncJwtLogin | None = None

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

    @contextlib.contextmanager
    def rewrap_stream(
        self,
        key: str,
        source: Source,
        *,
        associated_data: bytes | None = None,
        key_version: int | None = None,
        backend: str | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> Iterator[CipherStream]:
        """Stream a sealed ciphertext through rewrap: the service opens it (under ``key_version``, or the
        versions decrypt would try) and seals the plaintext under the key's latest version, with the same
        ``associated_data``; the plaintext never leaves the service. The token needs the ``rewrap`` scope (or
        both ``encrypt`` and ``decrypt``). :attr:`CipherStream.key_version` is the new version.

        Raises:
            KeystreamAPIError: e.g. 400 ``decryption_failed`` when the first segment does not verify.
            KeystreamConnectionError: the service is unreachable.
            KeystreamStreamError: a later segment failed or the connection dropped (during iteration).
        """
        options = CryptoOptions.build("sealed", associated_data, None, 0, key_version, backend)
        with self._open("rewrap", key, source, options, on_progress) as stream:
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

    def rewrap(self, key: str, data: bytes, **options: Any) -> CipherResult:
        """Rewrap the sealed ciphertext ``data`` in memory; ``options`` as :meth:`rewrap_stream`.

        Raises:
            KeystreamAPIError, KeystreamConnectionError, KeystreamStreamError: as :meth:`rewrap_stream`.
        """
        with self.rewrap_stream(key, data, **options) as stream:
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

    def rewrap_file(
        self, key: str, source: Source, destination: Destination, **options: Any
    ) -> TransferResult:
        """Rewrap ``source`` into ``destination``; partial output is removed as in :meth:`encrypt_file`.

        Raises:
            KeystreamAPIError, KeystreamConnectionError, KeystreamStreamError: as :meth:`rewrap_stream`.
            OSError: writing ``destination`` failed.
        """
        return self._transfer(self.rewrap_stream, key, source, destination, options)

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
            # A stream is not repeated after a 401 (its source may not be readable twice): the refusal only
            # makes the next call log in again. The login at two thirds of the lifetime makes one rare.
            token = self._jwt_login.token() if self._jwt_login is not None else None
            call = self._duplex(operation, key, options, reader, length, token)
            runner = LoopRunner()
            try:
                with mapped_errors():
                    head = runner.run(call.start)
                    if head.status == 401 and token is not None and self._jwt_login is not None:
                        self._jwt_login.refused(token)
                    if head.status >= 400:
                        raise api_error(head.status, runner.run(lambda: call.read_all(MAX_ERROR_BODY)))
                yield CipherStream(runner, call, head, options, sent, operation)
            finally:
                runner.run(call.aclose)
                runner.close()

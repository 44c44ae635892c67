"""``POST /v1/keys/{name}/encrypt`` and ``/decrypt``: streaming AES-CTR over request bodies of any size.

Bodies are ``application/octet-stream`` (Content-Length or chunked) and are never buffered whole: each chunk
of ``request.stream()`` is transformed and sent before the next one is read, so memory stays flat and
backpressure reaches the client through TCP. The response streams through
:class:`~app.core.streaming.DuplexStreamingResponse` (see there why Starlette's ``StreamingResponse`` loses
request bytes here).

* ``format=sealed`` (default): Tink ``AesCtrHmacStreaming``; decrypt releases a segment only after its tag
  verified. A bad first segment is a 400 JSON error before any output; a failure later aborts the connection.
* ``format=raw``: plain AES-CTR; ``iv`` (32 hex digits, query or ``Keystream-IV`` header) is generated on
  encrypt when absent and returned in ``Keystream-IV``; ``offset`` gives random access.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Request
from starlette.requests import ClientDisconnect
from starlette.responses import Response

import aescore
from app.api.deps import OctetStreamBody, PrincipalDep, StateDep
from app.core.errors import BadRequestError, KeystreamError, PayloadTooLargeError, error_response
from app.core.metrics import CRYPTO_BYTES, CRYPTO_SECONDS
from app.core.offload import run_crypto
from app.core.state import ServiceState
from app.core.streaming import DuplexStreamingResponse, StreamAbortedError
from app.formats.raw import RawCipher, format_iv, new_iv, parse_iv
from app.formats.sealed import SealedDecryptor, SealedEncryptor

router = APIRouter(prefix="/v1/keys", tags=["crypto"])

FormatQuery = Annotated[
    Literal["sealed", "raw"], Query(description="sealed (Tink streaming AEAD) or raw CTR")
]
BackendQuery = Annotated[str | None, Query(description="backend to use; default from settings")]
VersionQuery = Annotated[int | None, Query(ge=1, description="key version (default: latest / try all)")]
IvQuery = Annotated[str | None, Query(description="raw format: 32 hex digits")]
OffsetQuery = Annotated[int, Query(ge=0, lt=2**64, description="raw format: stream position of the body")]
AssociatedDataHeader = Annotated[str | None, Header(alias="Keystream-Associated-Data")]
IvHeader = Annotated[str | None, Header(alias="Keystream-IV")]
VersionHeader = Annotated[int | None, Header(alias="Keystream-Key-Version", ge=1)]


class CryptoStep:
    """One streaming transform: runs each call off the event loop when needed and times the work alone."""

    def __init__(
        self,
        state: ServiceState,
        backend: aescore.Backend,
        operation: str,
        fmt: str,
        update: Callable[[bytes], bytes],
        finalize: Callable[[], bytes] | None = None,
    ) -> None:
        self._backend = backend
        self._inline_max = state.settings.inline_crypto_max_bytes
        self._update = update
        self._finalize = finalize
        self._seconds = CRYPTO_SECONDS.labels(backend=backend.name, operation=operation, format=fmt)
        self._bytes = CRYPTO_BYTES.labels(backend=backend.name, operation=operation)

    def _timed(self, work: Callable[[], bytes]) -> bytes:
        start = time.perf_counter()
        try:
            return work()
        finally:
            self._seconds.observe(time.perf_counter() - start)

    async def update(self, data: bytes) -> bytes:
        """Transform one chunk."""
        self._bytes.inc(len(data))
        return await run_crypto(
            self._backend, len(data), self._inline_max, lambda: self._timed(lambda: self._update(data))
        )

    async def finalize(self) -> bytes:
        """Flush the last segment (sealed) or nothing (raw)."""
        finalize = self._finalize
        if finalize is None:
            return b""
        return await run_crypto(self._backend, 1 << 20, self._inline_max, lambda: self._timed(finalize))


def associated_data(state: ServiceState, value: str | None) -> bytes:
    """Decode the ``Keystream-Associated-Data`` header.

    Raises:
        BadRequestError: not base64.
        PayloadTooLargeError: longer than ``max_associated_data``.
    """
    if not value:
        return b""
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequestError("Keystream-Associated-Data must be base64") from None
    if len(decoded) > state.settings.max_associated_data:
        raise PayloadTooLargeError(
            f"associated data is {len(decoded)} bytes; the limit is {state.settings.max_associated_data}"
        )
    return decoded


async def _read_ahead(chunks: AsyncGenerator[bytes, None]) -> AsyncGenerator[bytes, None]:
    """Iterate ``chunks`` one chunk ahead: the next receive runs while the caller transforms the current.

    Only one chunk is ever pending, so memory stays bounded while network reads overlap the crypto (which
    runs in a worker thread for big chunks).
    """
    pending: asyncio.Task[bytes] = asyncio.ensure_future(anext(chunks))
    try:
        while True:
            try:
                chunk = await pending
            except StopAsyncIteration:
                return
            pending = asyncio.ensure_future(anext(chunks))
            yield chunk
    finally:
        if not pending.done():
            pending.cancel()
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, ClientDisconnect):
                await pending
        elif not pending.cancelled():
            pending.exception()  # retrieved, so asyncio does not warn about it


async def _pump(
    step: CryptoStep, chunks: AsyncGenerator[bytes, None], ready: list[bytes], finished: bool
) -> AsyncIterator[bytes]:
    """Yield ``ready`` output, then transform the rest of the request body chunk by chunk.

    A client disconnect ends the generator quietly (no state survives it); a crypto or format error after the
    response started becomes :class:`StreamAbortedError` so the server drops the connection.
    """
    try:
        for chunk in ready:
            yield chunk
        ready.clear()
        if finished:
            return
        async with contextlib.aclosing(_read_ahead(chunks)) as body:
            async for chunk in body:
                out = await step.update(chunk)
                if out:
                    yield out
        out = await step.finalize()
        if out:
            yield out
    except ClientDisconnect:
        return
    except KeystreamError as exc:
        raise StreamAbortedError(f"{exc.code}: {exc.message}") from exc
    finally:
        await chunks.aclose()


def _disconnected() -> Response:
    return error_response(400, "client_disconnected", "the client closed the connection")


def _check_key_access(principal: PrincipalDep, scope: str, name: str) -> None:
    principal.require(scope, name)


@router.post("/{name}/encrypt", dependencies=[OctetStreamBody])
async def encrypt(
    name: str,
    request: Request,
    principal: PrincipalDep,
    state: StateDep,
    format: FormatQuery = "sealed",
    backend: BackendQuery = None,
    key_version: VersionQuery = None,
    iv: IvQuery = None,
    offset: OffsetQuery = 0,
    associated_data_header: AssociatedDataHeader = None,
    iv_header: IvHeader = None,
) -> Response:
    """Encrypt the request body; the response carries ``Keystream-Key-Version`` (raw: ``Keystream-IV``)."""
    _check_key_access(principal, "encrypt", name)
    chosen = state.backends.get(backend)
    headers: dict[str, str] = {}
    if format == "sealed":
        if iv is not None or iv_header is not None or offset:
            raise BadRequestError("iv and offset apply to format=raw only")
        ad = associated_data(state, associated_data_header)
        info = state.keycache.key_info(name)
        if key_version is not None and key_version < info.min_decryption_version:
            raise BadRequestError(
                f"key_version {key_version} is below min_decryption_version {info.min_decryption_version}"
            )
        resolved = state.keycache.resolve(name, key_version, chosen)
        encryptor = SealedEncryptor(resolved.material, resolved.key_type, resolved.segment_size, ad, chosen)
        step = CryptoStep(state, chosen, "encrypt", "sealed", encryptor.update, encryptor.finalize)
    else:
        if associated_data_header:
            raise BadRequestError("associated data applies to format=sealed only")
        if key_version is not None:  # validates the version against min_decryption_version
            resolved = state.keycache.decryption_candidates(name, chosen, key_version)[0]
        else:
            resolved = state.keycache.resolve(name, None, chosen)
        iv_text = iv or iv_header
        iv_bytes = parse_iv(iv_text) if iv_text else new_iv()
        cipher = RawCipher(resolved.expanded, chosen, iv_bytes, offset)
        step = CryptoStep(state, chosen, "encrypt", "raw", cipher.update)
        headers["Keystream-IV"] = format_iv(iv_bytes)
    headers["Keystream-Key-Version"] = str(resolved.version)
    headers["Keystream-Backend"] = chosen.name
    return DuplexStreamingResponse(_pump(step, request.stream(), [], False), headers=headers)


@router.post("/{name}/decrypt", dependencies=[OctetStreamBody])
async def decrypt(
    name: str,
    request: Request,
    principal: PrincipalDep,
    state: StateDep,
    format: FormatQuery = "sealed",
    backend: BackendQuery = None,
    key_version: VersionQuery = None,
    iv: IvQuery = None,
    offset: OffsetQuery = 0,
    associated_data_header: AssociatedDataHeader = None,
    iv_header: IvHeader = None,
    key_version_header: VersionHeader = None,
) -> Response:
    """Decrypt the request body (sealed: verified segment by segment; raw: needs ``iv`` and a version)."""
    _check_key_access(principal, "decrypt", name)
    chosen = state.backends.get(backend)
    version = key_version if key_version is not None else key_version_header
    headers = {"Keystream-Backend": chosen.name}
    chunks = request.stream()
    if format == "raw":
        if associated_data_header:
            raise BadRequestError("associated data applies to format=sealed only")
        if not (iv or iv_header):
            raise BadRequestError("format=raw decrypt needs iv (32 hex digits, query or Keystream-IV header)")
        if version is None:
            raise BadRequestError(
                "format=raw decrypt needs key_version (the encrypt response's Keystream-Key-Version header)"
            )
        resolved = state.keycache.decryption_candidates(name, chosen, version)[0]
        cipher = RawCipher(resolved.expanded, chosen, parse_iv(iv or iv_header or ""), offset)
        step = CryptoStep(state, chosen, "decrypt", "raw", cipher.update)
        headers["Keystream-Key-Version"] = str(resolved.version)
        return DuplexStreamingResponse(_pump(step, chunks, [], False), headers=headers)

    if iv is not None or iv_header is not None or offset:
        raise BadRequestError("iv and offset apply to format=raw only")
    ad = associated_data(state, associated_data_header)
    candidates = state.keycache.decryption_candidates(name, chosen, version)
    first = candidates[0]
    decryptor = SealedDecryptor(
        [(candidate.version, candidate.material) for candidate in candidates],
        first.key_type,
        first.segment_size,
        ad,
        chosen,
    )
    step = CryptoStep(state, chosen, "decrypt", "sealed", decryptor.update, decryptor.finalize)
    # Read until the first segment verified (or the body ended) so a bad first segment is a clean 400.
    ready: list[bytes] = []
    finished = False
    try:
        async for chunk in chunks:
            out = await step.update(chunk)
            if out:
                ready.append(out)
                break
        else:
            ready.append(await step.finalize())
            finished = True
    except ClientDisconnect:
        await chunks.aclose()
        return _disconnected()
    except BaseException:
        await chunks.aclose()
        raise
    headers["Keystream-Key-Version"] = str(decryptor.version)
    return DuplexStreamingResponse(_pump(step, chunks, ready, finished), headers=headers)

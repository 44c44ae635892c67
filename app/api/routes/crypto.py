"""``POST /v1/keys/{name}/encrypt`` and ``/decrypt``: streaming AES-CTR over request bodies of any size.

Bodies are ``application/octet-stream`` (Content-Length or chunked) and are never buffered whole. Work that
leaves the event loop (sealed segments, slow backends) runs in a three-stage
:func:`~app.core.streaming.pipeline` (receive, transform in a worker thread, send), each stage holding about
one segment; inline work (raw AES-NI) transforms each chunk before the next is read. Either way memory stays
flat and backpressure reaches the client through TCP. The response streams through
:class:`~app.core.streaming.DuplexStreamingResponse` (see there why Starlette's ``StreamingResponse`` loses
request bytes here).

* ``format=sealed`` (default): Tink ``AesCtrHmacStreaming``; decrypt releases a segment only after its tag
  verified. A bad first segment is a 400 JSON error before any output; a failure later aborts the connection.
* ``format=raw``: plain AES-CTR; ``iv`` (32 hex digits, query or ``Keystream-IV`` header) is generated on
  encrypt when absent and returned in ``Keystream-IV``; ``offset`` gives random access.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import functools
import time
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from prometheus_client import Counter, Histogram
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Scope

import aescore
from app.api.deps import from_cache
from app.core.errors import (
    BadRequestError,
    ForbiddenError,
    KeystreamError,
    PayloadTooLargeError,
    UnsupportedMediaTypeError,
    ValidationError,
    error_response,
)
from app.core.metrics import CRYPTO_BYTES, CRYPTO_SECONDS
from app.core.offload import run_crypto
from app.core.state import ServiceState
from app.core.streaming import DuplexStreamingResponse, Pieces, StreamAbortedError, pipeline, send_pieces
from app.formats.raw import RawCipher, format_iv, new_iv, parse_iv
from app.formats.sealed import SealedDecryptor, SealedEncryptor
from app.keycache import ResolvedKey

MAX_OFFSET = 2**64

T = TypeVar("T")


@dataclass(frozen=True)
class CryptoParams:
    """Query parameters and headers of encrypt/decrypt, parsed by hand.

    FastAPI's per-parameter dependency machinery cost more than the AES work of a 1 KiB message (over half of
    the request's server time in a profile), so the hot path reads ``request`` directly; the OpenAPI schema
    still documents every parameter (:data:`OPENAPI_PARAMETERS`).
    """

    format: str = "sealed"
    backend: str | None = None
    key_version: int | None = None
    iv: str | None = None
    offset: int = 0
    associated_data: str | None = None
    content_length: int | None = None

    @classmethod
    def from_request(cls, request: Request, headers: dict[bytes, str]) -> CryptoParams:
        """Parse and validate; ``headers`` come from :func:`wanted_headers`.

        Raises:
            ValidationError: a malformed value (422, the message names the parameter and what is allowed).
            UnsupportedMediaTypeError: a body type other than ``application/octet-stream`` (415).
        """
        media_type = headers.get(b"content-type", "").split(";", 1)[0].strip().lower()
        if media_type and media_type != "application/octet-stream":
            raise UnsupportedMediaTypeError(f"expected application/octet-stream, got {media_type}")
        query: Mapping[str, str] = request.query_params if request.scope.get("query_string") else _NO_QUERY
        fmt = query.get("format", "sealed")
        if fmt not in ("sealed", "raw"):
            raise ValidationError("format: must be sealed or raw")
        version_text = query.get("key_version") or headers.get(b"keystream-key-version")
        declared = headers.get(b"content-length")
        return cls(
            format=fmt,
            backend=query.get("backend") or None,
            key_version=_integer("key_version", version_text, 1, None) if version_text else None,
            iv=query.get("iv") or headers.get(b"keystream-iv") or None,
            offset=_integer("offset", query.get("offset"), 0, MAX_OFFSET - 1) if "offset" in query else 0,
            associated_data=headers.get(b"keystream-associated-data") or None,
            content_length=int(declared)
            if declared is not None and declared.isascii() and declared.isdigit()
            else None,
        )


_NO_QUERY: dict[str, str] = {}
_WANTED_HEADERS = frozenset(
    {
        b"authorization",
        b"content-type",
        b"content-length",
        b"keystream-key-version",
        b"keystream-iv",
        b"keystream-associated-data",
    }
)


def wanted_headers(request: Request) -> dict[bytes, str]:
    """The request headers encrypt/decrypt read, in one pass over the raw list (names are lower case)."""
    return {
        name: value.decode("latin-1") for name, value in request.scope["headers"] if name in _WANTED_HEADERS
    }


def _integer(field: str, text: str | None, minimum: int, maximum: int | None) -> int:
    try:
        value = int(text or "")
    except ValueError:
        raise ValidationError(f"{field}: must be an integer") from None
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and at most {maximum}" if maximum is not None else ""
        raise ValidationError(f"{field}: must be at least {minimum}{upper}")
    return value


def _parameter(name: str, where: str, description: str, schema: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "in": where, "required": False, "description": description, "schema": schema}


#: The parameters of encrypt/decrypt for the OpenAPI schema (parsed by :class:`CryptoParams`).
OPENAPI_PARAMETERS = [
    _parameter(
        "format", "query", "sealed (Tink streaming AEAD, default) or raw CTR", {"enum": ["sealed", "raw"]}
    ),
    _parameter(
        "backend",
        "query",
        "backend to use; default from settings. `python` is NOT constant-time (table-based AES, "
        "cache-timing exposure on shared hosts): disable it with KEYSTREAM_ENABLED_BACKENDS",
        {"type": "string"},
    ),
    _parameter("key_version", "query", "key version (default: latest / try all)", {"type": "integer"}),
    _parameter(
        "iv",
        "query",
        "raw format: 32 hex digits. On encrypt it needs the decrypt scope too (CTR encrypt with a "
        "chosen IV is decrypt); omit it to get a fresh random IV",
        {"type": "string"},
    ),
    _parameter("offset", "query", "raw format: stream position of the body", {"type": "integer"}),
    _parameter("Keystream-Associated-Data", "header", "sealed: associated data, base64", {"type": "string"}),
    _parameter("Keystream-IV", "header", "raw: same as iv=", {"type": "string"}),
    _parameter("Keystream-Key-Version", "header", "same as key_version=", {"type": "integer"}),
]


def openapi_paths() -> dict[str, Any]:
    """OpenAPI entries for the two routes (they are plain Starlette routes, which FastAPI does not list)."""
    name = {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
    octets = {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}
    paths: dict[str, Any] = {}
    for operation, summary in (("encrypt", "Encrypt a stream"), ("decrypt", "Decrypt a stream")):
        paths[f"/v1/keys/{{name}}/{operation}"] = {
            "post": {
                "tags": ["crypto"],
                "summary": summary,
                "operationId": f"{operation}_stream",
                "parameters": [name, *OPENAPI_PARAMETERS],
                "requestBody": octets,
                "responses": {"200": {"description": "the transformed stream", **octets}},
                "security": [{"bearer": []}],
            }
        }
    return paths


@functools.lru_cache(maxsize=64)
def crypto_metrics(backend: str, operation: str, fmt: str) -> tuple[Histogram, Counter]:
    """The labelled ``keystream_crypto_seconds`` / ``_bytes_total`` children (``labels()`` is not free)."""
    return (
        CRYPTO_SECONDS.labels(backend=backend, operation=operation, format=fmt),
        CRYPTO_BYTES.labels(backend=backend, operation=operation),
    )


#: Least bytes a stage of the streaming pipeline holds before the stage upstream waits.
PIPELINE_MIN_BYTES = 1 << 20
#: Safety margin for estimating buffered bytes: more than a header (40 bytes) plus a few tags.
HEADER_MAX_BYTES = 256


class CryptoStep:
    """One streaming transform: runs each call off the event loop when needed and times the work alone."""

    def __init__(
        self,
        state: ServiceState,
        backend: aescore.Backend,
        operation: str,
        fmt: str,
        update: Callable[[bytes], Pieces],
        finalize: Callable[[], Pieces] | None = None,
        async_update: Callable[[bytes], Awaitable[bytes]] | None = None,
        segment_size: int | None = None,
        buffered: Callable[[], int] | None = None,
    ) -> None:
        self._backend = backend
        # Sealed formats only buffer until a segment is complete: below this many held bytes an update is a
        # copy, never crypto, and runs inline whatever the backend (the header is at most 40 bytes).
        self._buffer_only_below = segment_size - HEADER_MAX_BYTES if segment_size is not None else 0
        self._segment_size = segment_size or 0
        self._async_update = async_update
        # AES-NI work up to inline_crypto_max_bytes (1 MiB) runs on the event loop: raw CTR is tens of
        # microseconds per MiB, a sealed segment ~0.7 ms (HMAC-SHA256). In a worker thread the sealed HMAC
        # would overlap the loop's I/O in principle, but the worker must win the GIL back after every
        # GIL-free HMAC call while the loop is busy in Python, and measured end to end that hand-off cost more
        # than the overlap gained: 0.49 GB/s in a thread vs 0.59 GB/s inline, echo 0.95 GB/s (see the
        # service README). Bigger work (segments over the limit, big chunks) still goes to the thread pool.
        self._inline_max = state.settings.inline_crypto_max_bytes
        self._update = update
        self._finalize = finalize
        self._seconds, self._bytes = crypto_metrics(backend.name, operation, fmt)
        self._buffered = buffered  # sealed: bytes the format holds for its next segment
        #: Bytes each stage of a :func:`~app.core.streaming.pipeline` may hold: one segment (sealed) or 1 MiB.
        self.pipeline_bytes = max(segment_size or 0, PIPELINE_MIN_BYTES)

    @property
    def offloads(self) -> bool:
        """True when big calls leave the event loop (then reading ahead overlaps network and crypto)."""
        return (
            self._async_update is not None
            or self._backend.name != "aesni"
            or max(self._segment_size, 1 << 20) > self._inline_max
        )

    def _timed(self, work: Callable[[], T]) -> T:
        start = time.perf_counter()
        try:
            return work()
        finally:
            self._seconds.observe(time.perf_counter() - start)

    async def update(self, data: bytes) -> Pieces:
        """Transform one chunk."""
        self._bytes.inc(len(data))
        if self._async_update is not None:
            start = time.perf_counter()
            try:
                return await self._async_update(data)
            finally:
                self._seconds.observe(time.perf_counter() - start)
        held = len(data) + (self._buffered() if self._buffered is not None else 0)
        if held < self._buffer_only_below:
            return self._update(data)  # at most the 40-byte header comes out: no segment is complete yet
        # Sealed: the crypto is the segments this call completes; the rest of the held bytes is only copied.
        work = held - held % self._segment_size if self._segment_size else held
        return await run_crypto(
            self._backend, work, self._inline_max, lambda: self._timed(lambda: self._update(data))
        )

    async def finalize(self) -> Pieces:
        """Flush the last segment (sealed) or nothing (raw)."""
        finalize = self._finalize
        if finalize is None:
            return b""
        held = self._buffered() if self._buffered is not None else 0
        return await run_crypto(self._backend, held, self._inline_max, lambda: self._timed(finalize))

    async def run_whole(self, data: bytes) -> bytes:
        """Transform a complete (small) body in one call: ``update`` then ``finalize``."""
        finalize = self._finalize
        if self._async_update is not None:
            return b"".join(send_pieces(await self.update(data)))
        self._bytes.inc(len(data))

        def work() -> bytes:
            out = send_pieces(self._update(data))
            if finalize is not None:
                out += send_pieces(finalize())
            return out[0] if len(out) == 1 else b"".join(out)

        return await run_crypto(self._backend, len(data), self._inline_max, lambda: self._timed(work))


class AsyncRawCipher:
    """Raw CTR through a backend's ``ctr_xor_async`` (hwsim: jobs of one loop turn share a doorbell)."""

    def __init__(
        self, backend: aescore.Backend, expanded: aescore.ExpandedKey, iv: bytes, offset: int
    ) -> None:
        self._ctr_xor_async: Callable[..., Awaitable[bytes]] = backend.ctr_xor_async  # type: ignore[attr-defined]
        self._expanded = expanded
        self._iv = iv
        self._offset = offset

    async def update(self, data: bytes) -> bytes:
        """Transform ``data`` at the current position and advance.

        Raises:
            BadRequestError: the data would run past byte 2**64 of the keystream.
        """
        if self._offset + len(data) > MAX_OFFSET:
            raise BadRequestError("offset + length must not exceed 2**64 bytes")
        out = await self._ctr_xor_async(self._expanded, self._iv, data, self._offset)
        self._offset += len(data)
        return out


def raw_step(
    state: ServiceState,
    backend: aescore.Backend,
    operation: str,
    expanded: aescore.ExpandedKey,
    iv: bytes,
    offset: int,
) -> CryptoStep:
    """A raw CTR step: through ``ctr_xor_async`` when the backend has it, else :class:`RawCipher`."""
    if hasattr(backend, "ctr_xor_async"):
        cipher = AsyncRawCipher(backend, expanded, iv, offset)
        return CryptoStep(state, backend, operation, "raw", bytes, async_update=cipher.update)
    raw = RawCipher(expanded, backend, iv, offset)
    return CryptoStep(state, backend, operation, "raw", raw.update)


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
        if step.offloads:
            # Receive, transform (in a worker thread) and send overlap: see pipeline().
            staged = pipeline(chunks, step.update, step.finalize, step.pipeline_bytes)
            async with contextlib.aclosing(staged) as outputs:
                async for out in outputs:
                    yield out
            return
        async for chunk in chunks:
            for piece in send_pieces(await step.update(chunk)):
                yield piece
        for piece in send_pieces(await step.finalize()):
            yield piece
    except ClientDisconnect:
        return
    except KeystreamError as exc:
        raise StreamAbortedError(f"{exc.code}: {exc.message}") from exc
    finally:
        await chunks.aclose()


async def small_body(request: Request, params: CryptoParams, limit: int) -> bytes | None:
    """The whole body when its Content-Length is at most ``limit`` (a bounded read), else ``None``.

    Small requests skip the streaming machinery (read-ahead task, chunked response): for 1 KiB messages
    that machinery costs more than the crypto.
    """
    if params.content_length is None or params.content_length > limit:
        return None
    return await request.body()


async def respond(
    request: Request, params: CryptoParams, step: CryptoStep, headers: dict[str, str], limit: int
) -> Response:
    """Transform the body: in one call when small, else as a stream."""
    try:
        body = await small_body(request, params, limit)
    except ClientDisconnect:
        return _disconnected()
    if body is not None:
        return Response(await step.run_whole(body), headers=headers, media_type="application/octet-stream")
    return DuplexStreamingResponse(_pump(step, request.stream(), [], False), headers=headers)


def _disconnected() -> Response:
    return error_response(400, "client_disconnected", "the client closed the connection")


def _authorize(request: Request, scope: str) -> tuple[ServiceState, str, CryptoParams]:
    """Check the token for ``scope`` on the path's key, then parse the parameters (401/403 before 4xx)."""
    state: ServiceState = request.app.state.keystream
    name: str = request.path_params["name"]
    headers = wanted_headers(request)
    principal = state.tokens.verify(headers.get(b"authorization"))
    principal.require(scope, name)
    params = CryptoParams.from_request(request, headers)
    if scope == "encrypt" and params.iv and not principal.has_scope("decrypt"):
        # CTR encryption is its own inverse: encrypting a ciphertext under its IV (and offset) returns the
        # plaintext, so a caller-chosen IV turns encrypt into decrypt.
        raise ForbiddenError(
            "supplying iv on raw encrypt needs the decrypt scope too: with a chosen IV, CTR encrypt is "
            "decrypt; omit iv to get a fresh random one"
        )
    return state, name, params


async def _candidates(
    state: ServiceState, name: str, backend: aescore.Backend, version: int | None
) -> list[ResolvedKey]:
    """:meth:`~app.keycache.KeyCache.decryption_candidates`, loading misses off the event loop.

    An explicit ``version`` newer than the cached metadata re-reads the metadata first (another worker may
    have rotated the key), so it is found at once rather than after ``key_metadata_ttl``.
    """
    return await from_cache(
        lambda cached: state.keycache.decryption_candidates(name, backend, version, cached_only=cached)
    )


async def encrypt(request: Request) -> Response:
    """Encrypt the request body; the response carries ``Keystream-Key-Version`` (raw: ``Keystream-IV``)."""
    state, name, params = _authorize(request, "encrypt")
    chosen = state.backends.get(params.backend)
    key_version = params.key_version
    headers: dict[str, str] = {}
    if params.format == "sealed":
        if params.iv is not None or params.offset:
            raise BadRequestError("iv and offset apply to format=raw only")
        ad = associated_data(state, params.associated_data)
        if key_version is not None:
            info = await from_cache(lambda cached: state.keycache.key_info(name, cached_only=cached))
            if key_version < info.min_decryption_version:
                raise BadRequestError(
                    f"key_version {key_version} is below min_decryption_version {info.min_decryption_version}"
                )
        resolved = await from_cache(
            lambda cached: state.keycache.resolve(name, key_version, chosen, cached_only=cached)
        )
        encryptor = SealedEncryptor(resolved.material, resolved.key_type, resolved.segment_size, ad, chosen)
        step = CryptoStep(
            state,
            chosen,
            "encrypt",
            "sealed",
            encryptor.update_pieces,
            encryptor.finalize_pieces,
            segment_size=resolved.segment_size,
            buffered=lambda: encryptor.buffered,
        )
    else:
        if params.associated_data:
            raise BadRequestError("associated data applies to format=sealed only")
        if key_version is not None:  # validates the version against min_decryption_version
            resolved = (await _candidates(state, name, chosen, key_version))[0]
        else:
            resolved = await from_cache(
                lambda cached: state.keycache.resolve(name, None, chosen, cached_only=cached)
            )
        _check_raw_range(params)
        iv_bytes = parse_iv(params.iv) if params.iv else new_iv()
        step = raw_step(state, chosen, "encrypt", resolved.expanded, iv_bytes, params.offset)
        headers["Keystream-IV"] = format_iv(iv_bytes)
    headers["Keystream-Key-Version"] = str(resolved.version)
    headers["Keystream-Backend"] = chosen.name
    return await respond(request, params, step, headers, state.settings.small_body_max_bytes)


def _check_raw_range(params: CryptoParams) -> None:
    """Refuse up front (400, before any response) a body whose declared length runs past keystream byte 2**64;
    a chunked body can only be stopped when it gets there (the stream is then aborted)."""
    if params.content_length is not None and params.offset + params.content_length > MAX_OFFSET:
        raise BadRequestError(
            f"offset + body length must not exceed 2**64 bytes of keystream "
            f"(offset={params.offset}, Content-Length={params.content_length})"
        )


async def decrypt(request: Request) -> Response:
    """Decrypt the request body (sealed: verified segment by segment; raw: needs ``iv`` and a version)."""
    state, name, params = _authorize(request, "decrypt")
    chosen = state.backends.get(params.backend)
    version = params.key_version
    headers = {"Keystream-Backend": chosen.name}
    if params.format == "raw":
        if params.associated_data:
            raise BadRequestError("associated data applies to format=sealed only")
        if not params.iv:
            raise BadRequestError("format=raw decrypt needs iv (32 hex digits, query or Keystream-IV header)")
        if version is None:
            raise BadRequestError(
                "format=raw decrypt needs key_version (the encrypt response's Keystream-Key-Version header)"
            )
        _check_raw_range(params)
        resolved = (await _candidates(state, name, chosen, version))[0]
        step = raw_step(state, chosen, "decrypt", resolved.expanded, parse_iv(params.iv), params.offset)
        headers["Keystream-Key-Version"] = str(resolved.version)
        return await respond(request, params, step, headers, state.settings.small_body_max_bytes)

    if params.iv is not None or params.offset:
        raise BadRequestError("iv and offset apply to format=raw only")
    ad = associated_data(state, params.associated_data)
    candidates = await _candidates(state, name, chosen, version)
    first = candidates[0]
    decryptor = SealedDecryptor(
        [(candidate.version, candidate.material) for candidate in candidates],
        first.key_type,
        first.segment_size,
        ad,
        chosen,
        # Without key_version the cached metadata may predate a rotation by another worker (up to
        # key_metadata_ttl): a first segment that verifies under no cached version gets one fresh look.
        more_candidates=functools.partial(state.keycache.refreshed_candidates, name, chosen)
        if version is None
        else None,
    )
    step = CryptoStep(
        state,
        chosen,
        "decrypt",
        "sealed",
        decryptor.update_pieces,
        decryptor.finalize_pieces,
        segment_size=first.segment_size,
        buffered=lambda: decryptor.buffered,
    )
    try:
        body = await small_body(request, params, state.settings.small_body_max_bytes)
    except ClientDisconnect:
        return _disconnected()
    if body is not None:
        plaintext = await step.run_whole(body)
        headers["Keystream-Key-Version"] = str(decryptor.version)
        return Response(plaintext, headers=headers, media_type="application/octet-stream")
    chunks = request.stream()
    # Read until the first segment verified (or the body ended) so a bad first segment is a clean 400.
    ready: list[bytes] = []
    finished = False
    try:
        async for chunk in chunks:
            ready += send_pieces(await step.update(chunk))
            if ready:
                break
        else:
            ready += send_pieces(await step.finalize())
            finished = True
    except ClientDisconnect:
        await chunks.aclose()
        return _disconnected()
    except BaseException:
        await chunks.aclose()
        raise
    headers["Keystream-Key-Version"] = str(decryptor.version)
    return DuplexStreamingResponse(_pump(step, chunks, ready, finished), headers=headers)


#: Plain Starlette routes: FastAPI's routing and dependency solving cost more than the AES work of a 1 KiB
#: message (the 1 KiB encrypt went from ~4x to ~2x the server time of ``/healthz``). Auth and parameters
#: are handled above by hand; errors still go through the app's exception handlers.
class TemplateRoute(Route):
    """A Starlette route that records itself as ``scope["route"]``, as FastAPI's routes do, so the request
    metrics are labelled with its path template."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match != Match.NONE:
            child_scope["route"] = self
        return match, child_scope


routes = [
    TemplateRoute("/v1/keys/{name}/encrypt", encrypt, methods=["POST"], name="encrypt"),
    TemplateRoute("/v1/keys/{name}/decrypt", decrypt, methods=["POST"], name="decrypt"),
]

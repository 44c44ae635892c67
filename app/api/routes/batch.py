"""``POST /v1/keys/{name}/encrypt/batch`` and ``/decrypt/batch``: many small sealed messages in one JSON call.

Like Vault's ``batch_input``: each item succeeds or fails on its own (``{"error": {...}}`` in its result
slot); only request-level problems (auth, unknown key, limits, malformed JSON) fail the whole call. The body
is read up to ``batch_max_bytes`` (413 beyond, checked on Content-Length first) and may hold at most
``batch_max_items`` items (413 beyond).
"""

from __future__ import annotations

import base64
import binascii
import functools
import time
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError
from starlette.requests import ClientDisconnect

import aescore
from app.api.deps import JsonBody, PrincipalDep, StateDep, from_cache
from app.core.errors import BadRequestError, KeystreamError, PayloadTooLargeError, error_body
from app.core.metrics import CRYPTO_BYTES, CRYPTO_SECONDS
from app.core.offload import run_crypto
from app.core.state import ServiceState
from app.formats.sealed import SealedDecryptor, SealedEncryptor
from app.keycache import ResolvedKey

router = APIRouter(prefix="/v1/keys", tags=["batch"])

#: Batches up to this many items and bytes run on the event loop (aesni); bigger ones in a thread.
BATCH_INLINE_MAX_ITEMS = 4
BATCH_INLINE_MAX_BYTES = 16 * 1024

BackendQuery = Annotated[
    str | None,
    Query(
        description=(
            "backend to use; default from settings. `python` is NOT constant-time (table-based AES, "
            "cache-timing exposure on shared hosts): disable it with KEYSTREAM_ENABLED_BACKENDS"
        )
    ),
]
VersionQuery = Annotated[int | None, Query(ge=1, description="key version (default: latest / try all)")]


class EncryptItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    plaintext: str
    associated_data: str | None = None
    reference: str | None = Field(default=None, max_length=256)


class DecryptItem(BaseModel):
    model_config = ConfigDict(extra="forbid")
    ciphertext: str
    associated_data: str | None = None
    reference: str | None = Field(default=None, max_length=256)


class EncryptBatch(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    items: list[EncryptItem]


class DecryptBatch(BaseModel):
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)
    items: list[DecryptItem]


async def read_limited(request: Request, limit: int) -> bytes:
    """Read the whole body, refusing more than ``limit`` bytes.

    Raises:
        PayloadTooLargeError: Content-Length or the bytes received exceed ``limit`` (413).
        BadRequestError: the Content-Length header is not a number.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        if not (declared.isascii() and declared.isdigit()):
            raise BadRequestError("Content-Length must be a number")
        if int(declared) > limit:
            raise PayloadTooLargeError(f"batch body is {declared} bytes; the limit is {limit}")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLargeError(f"batch body exceeds the limit of {limit} bytes")
    return bytes(body)


def _b64(field: str, value: str | None) -> bytes:
    if value is None:
        return b""
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequestError(f"{field} must be base64") from None


def _item_error(exc: KeystreamError, reference: str | None) -> dict[str, Any]:
    result: dict[str, Any] = error_body(exc.code, exc.message)
    result["reference"] = reference
    return result


async def _parse(request: Request, state: ServiceState, model: type[BaseModel]) -> Any:
    try:
        raw = await read_limited(request, state.settings.batch_max_bytes)
    except ClientDisconnect:
        raise BadRequestError("the client closed the connection") from None
    try:
        parsed = model.model_validate_json(raw)
    except PydanticValidationError as exc:
        raise RequestValidationError(exc.errors(include_input=False)) from None
    items = parsed.items  # type: ignore[attr-defined]
    if len(items) > state.settings.batch_max_items:
        raise PayloadTooLargeError(
            f"batch has {len(items)} items; the limit is {state.settings.batch_max_items}"
        )
    return parsed


async def _run_timed(
    backend: aescore.Backend, operation: str, items: int, nbytes: int, work: Callable[[], list[Any]]
) -> list[Any]:
    seconds = CRYPTO_SECONDS.labels(backend=backend.name, operation=operation, format="sealed")
    CRYPTO_BYTES.labels(backend=backend.name, operation=operation).inc(nbytes)

    def timed() -> list[Any]:
        start = time.perf_counter()
        try:
            return work()
        finally:
            seconds.observe(time.perf_counter() - start)

    # Each item costs tens of microseconds of Python (HKDF, HMAC setup): only a handful run inline.
    return await run_crypto(
        backend, nbytes, BATCH_INLINE_MAX_BYTES if items <= BATCH_INLINE_MAX_ITEMS else -1, timed
    )


def _check_ad(state: ServiceState, ad: bytes) -> None:
    if len(ad) > state.settings.max_associated_data:
        raise PayloadTooLargeError(
            f"associated data is {len(ad)} bytes; the limit is {state.settings.max_associated_data}"
        )


def _each_item(
    state: ServiceState,
    items: Sequence[EncryptItem | DecryptItem],
    input_field: str,
    output_field: str,
    transform: Callable[[bytes, bytes], tuple[bytes, int | None]],
) -> list[dict[str, Any]]:
    """Run ``transform(data, associated_data)`` on every item; an item's error becomes its result."""
    results: list[dict[str, Any]] = []
    for item in items:
        try:
            data = _b64(input_field, getattr(item, input_field))
            ad = _b64("associated_data", item.associated_data)
            _check_ad(state, ad)
            output, version = transform(data, ad)
        except KeystreamError as exc:
            results.append(_item_error(exc, item.reference))
            continue
        results.append(
            {
                output_field: base64.b64encode(output).decode(),
                "key_version": version,
                "reference": item.reference,
            }
        )
    return results


@router.post("/{name}/encrypt/batch", dependencies=[JsonBody])
async def encrypt_batch(
    name: str,
    request: Request,
    principal: PrincipalDep,
    state: StateDep,
    backend: BackendQuery = None,
    key_version: VersionQuery = None,
) -> dict[str, Any]:
    """Seal every item's ``plaintext``.

    Returns ``{"results": [...]}``, one ``{ciphertext, key_version, reference}`` or
    ``{error, reference}`` per item.
    """
    principal.require("encrypt", name)
    chosen = state.backends.get(backend)
    batch: EncryptBatch = await _parse(request, state, EncryptBatch)
    if key_version is not None:
        candidates = await from_cache(
            lambda cached: state.keycache.decryption_candidates(name, chosen, key_version, cached_only=cached)
        )
        resolved = candidates[0]
    else:
        resolved = await from_cache(
            lambda cached: state.keycache.resolve(name, None, chosen, cached_only=cached)
        )

    def seal(plaintext: bytes, ad: bytes) -> tuple[bytes, int | None]:
        encryptor = SealedEncryptor(resolved.material, resolved.key_type, resolved.segment_size, ad, chosen)
        return encryptor.update(plaintext) + encryptor.finalize(), resolved.version

    def work() -> list[dict[str, Any]]:
        return _each_item(state, batch.items, "plaintext", "ciphertext", seal)

    nbytes = sum(len(item.plaintext) * 3 // 4 for item in batch.items)
    return {"results": await _run_timed(chosen, "encrypt", len(batch.items), nbytes, work)}


@router.post("/{name}/decrypt/batch", dependencies=[JsonBody])
async def decrypt_batch(
    name: str,
    request: Request,
    principal: PrincipalDep,
    state: StateDep,
    backend: BackendQuery = None,
    key_version: VersionQuery = None,
) -> dict[str, Any]:
    """Open every item's ``ciphertext``.

    Returns ``{"results": [...]}``, one ``{plaintext, key_version, reference}`` or
    ``{error, reference}`` per item.
    """
    principal.require("decrypt", name)
    chosen = state.backends.get(backend)
    batch: DecryptBatch = await _parse(request, state, DecryptBatch)
    candidates: list[ResolvedKey] = await from_cache(
        lambda cached: state.keycache.decryption_candidates(name, chosen, key_version, cached_only=cached)
    )
    pairs = [(candidate.version, candidate.material) for candidate in candidates]
    first = candidates[0]
    # Cached metadata may predate a rotation by another worker: an item that verifies under no cached version
    # triggers one fresh read of the key's versions for the whole batch (functools.cache), not one per item.
    refreshed = functools.cache(functools.partial(state.keycache.refreshed_candidates, name, chosen))
    more = refreshed if key_version is None else None

    def open_(ciphertext: bytes, ad: bytes) -> tuple[bytes, int | None]:
        decryptor = SealedDecryptor(
            pairs, first.key_type, first.segment_size, ad, chosen, more_candidates=more
        )
        return decryptor.update(ciphertext) + decryptor.finalize(), decryptor.version

    def work() -> list[dict[str, Any]]:
        return _each_item(state, batch.items, "ciphertext", "plaintext", open_)

    nbytes = sum(len(item.ciphertext) * 3 // 4 for item in batch.items)
    return {"results": await _run_timed(chosen, "decrypt", len(batch.items), nbytes, work)}

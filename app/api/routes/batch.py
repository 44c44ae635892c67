"""``POST /v1/keys/{name}/encrypt/batch`` and ``/decrypt/batch``: many small sealed messages in one JSON call.

Like Vault's ``batch_input``: each item succeeds or fails on its own (``{"error": {...}}`` in its result
slot); only request-level problems (auth, unknown key, limits, malformed JSON) fail the whole call. The body
is read up to ``batch_max_bytes`` (413 beyond, checked on Content-Length first) and may hold at most
``batch_max_items`` items (413 beyond).
"""

from __future__ import annotations

import base64
from collections.abc import Callable, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticValidationError
from starlette.requests import ClientDisconnect

from app.api.deps import JsonBody, PrincipalDep, StateDep
from app.api.errors import error_body
from app.api.params import BACKEND_DESCRIPTION, KeyVersion, check_associated_data, decode_base64
from app.api.state import ServiceState
from app.errors import BadRequestError, KeystreamError, PayloadTooLargeError
from app.services.crypto_step import run_timed
from app.services.keys import decryption_keys, encryption_key, sealed_encryptor

router = APIRouter(prefix="/v1/keys", tags=["batch"])

#: Batches up to this many items and bytes run on the event loop (aesni); bigger ones in a thread.
BATCH_INLINE_MAX_ITEMS = 4
BATCH_INLINE_MAX_BYTES = 16 * 1024

BackendQuery = Annotated[str | None, Query(description=BACKEND_DESCRIPTION)]
VersionQuery = Annotated[KeyVersion | None, Query(description="key version (default: latest / try all)")]


class EncryptItem(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    plaintext: str
    associated_data: str | None = None
    reference: str | None = Field(default=None, max_length=256)


class DecryptItem(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    ciphertext: str
    associated_data: str | None = None
    reference: str | None = Field(default=None, max_length=256)


class EncryptBatch(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, hide_input_in_errors=True)
    items: list[EncryptItem]


class DecryptBatch(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, hide_input_in_errors=True)
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


def _inline_max(items: int) -> int:
    """Each item costs tens of microseconds of Python (HKDF, HMAC setup): only a handful run inline."""
    return BATCH_INLINE_MAX_BYTES if items <= BATCH_INLINE_MAX_ITEMS else -1


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
            data = decode_base64(input_field, getattr(item, input_field))
            ad = decode_base64("associated_data", item.associated_data)
            check_associated_data(ad, state.settings.max_associated_data)
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
    resolved = await encryption_key(state.keycache, name, chosen, key_version)

    def seal(plaintext: bytes, ad: bytes) -> tuple[bytes, int | None]:
        encryptor = sealed_encryptor(resolved, ad, chosen)
        return encryptor.update(plaintext) + encryptor.finalize(), resolved.version

    def work() -> list[dict[str, Any]]:
        return _each_item(state, batch.items, "plaintext", "ciphertext", seal)

    nbytes = sum(len(item.plaintext) * 3 // 4 for item in batch.items)
    inline_max = _inline_max(len(batch.items))
    return {"results": await run_timed(chosen, "encrypt", "sealed", nbytes, inline_max, work)}


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
    # Cached metadata may predate a rotation by another worker: an item that verifies under no cached version
    # triggers one fresh read of the key's versions for the whole batch, not one per item.
    keys = await decryption_keys(state.keycache, name, chosen, key_version)

    def open_(ciphertext: bytes, ad: bytes) -> tuple[bytes, int | None]:
        decryptor = keys.sealed_decryptor(ad, chosen)
        return decryptor.update(ciphertext) + decryptor.finalize(), decryptor.version

    def work() -> list[dict[str, Any]]:
        return _each_item(state, batch.items, "ciphertext", "plaintext", open_)

    nbytes = sum(len(item.ciphertext) * 3 // 4 for item in batch.items)
    inline_max = _inline_max(len(batch.items))
    return {"results": await run_timed(chosen, "decrypt", "sealed", nbytes, inline_max, work)}

"""``POST /v1/keys/{name}/encrypt/batch`` and ``/decrypt/batch``: many small sealed messages in one call.

Like Vault's ``batch_input``: each item succeeds or fails on its own (``{"error": {...}}`` in its result
slot); only request-level problems (auth, unknown key, limits, malformed JSON) fail the whole call. The body
is bounded by ``batch_max_bytes`` (413, checked on Content-Length first) and buffered within the batch
budget (503 + ``Retry-After`` when ``batch_buffer_budget_bytes`` stays full), both in the body-limit
middleware; it may hold at most ``batch_max_items`` items (413 beyond).

Per batch: the body is decoded once (:mod:`app.api.batch_json`), each item's base64 decoded and checked
here, and all items sealed or opened by one call (:mod:`app.formats.sealed.batch`: native C for ``aesni``).
That call runs on the event loop up to ``inline_crypto_max_bytes`` (a 100 x 1 KiB batch is ~0.2 ms of C,
cheaper than a thread hand-off) and in a worker thread beyond, where the C code releases the GIL so the
loop keeps serving.
"""

from __future__ import annotations

import binascii
from collections.abc import Callable, Sequence
from typing import Annotated, Any, TypeVar

from fastapi import APIRouter, Query, Request
from starlette.responses import Response

from app.api.batch_json import DecryptBatch, EncryptBatch, json_response, openapi_extra, read_batch
from app.api.deps import JsonBody, PrincipalDep, StateDep
from app.api.errors import error_body
from app.api.params import BACKEND_DESCRIPTION, check_associated_data, decode_base64
from app.api.state import ServiceState
from app.errors import KeystreamError
from app.formats.sealed import native_isa, open_many, seal_many
from app.services.crypto_step import run_timed
from app.services.keys import decryption_keys, encryption_key

router = APIRouter(prefix="/v1/keys", tags=["batch"])

BackendQuery = Annotated[str | None, Query(description=BACKEND_DESCRIPTION)]
VersionQuery = Annotated[int | None, Query(ge=1, description="key version (default: latest / try all)")]
_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    413: {"description": "body over batch_max_bytes, or more than batch_max_items items"},
    503: {"description": "the batch buffer budget stayed full (Retry-After says when to retry)"},
}

T = TypeVar("T")


def _item_error(exc: KeystreamError, reference: str | None) -> dict[str, Any]:
    result: dict[str, Any] = error_body(exc.code, exc.message)
    result["reference"] = reference
    return result


def _inputs(
    state: ServiceState, encoded: Sequence[str], associated: Sequence[str | None], field: str
) -> tuple[list[int], list[bytes], list[bytes], dict[int, KeystreamError]]:
    """Decode each item's base64 input and associated data; an item's problem becomes its error."""
    limit = state.settings.max_associated_data
    slots: list[int] = []
    data: list[bytes] = []
    ads: list[bytes] = []
    errors: dict[int, KeystreamError] = {}
    for index, (text, ad_text) in enumerate(zip(encoded, associated, strict=True)):
        try:
            value = decode_base64(field, text)
            ad = decode_base64("associated_data", ad_text) if ad_text is not None else b""
            check_associated_data(ad, limit)
        except KeystreamError as exc:
            errors[index] = exc
            continue
        slots.append(index)
        data.append(value)
        ads.append(ad)
    return slots, data, ads, errors


async def _run(
    state: ServiceState, backend: Any, operation: str, data: list[bytes], work: Callable[[], T]
) -> T:
    nbytes = sum(map(len, data))
    # Native batches run inline up to inline_crypto_max_bytes; the Python path (per-item objects, tens of
    # microseconds each) only for a handful of bytes; run_timed sends other backends off the loop anyway.
    inline_max = state.settings.inline_crypto_max_bytes if native_isa(backend) else 16 * 1024
    return await run_timed(backend, operation, "sealed", nbytes, inline_max, work)


def _b64(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode("ascii")


@router.post(
    "/{name}/encrypt/batch",
    dependencies=[JsonBody],
    response_class=Response,
    responses=_ERROR_RESPONSES,
    openapi_extra=openapi_extra(EncryptBatch, "ciphertext"),
)
async def encrypt_batch(
    name: str,
    request: Request,
    principal: PrincipalDep,
    state: StateDep,
    backend: BackendQuery = None,
    key_version: VersionQuery = None,
) -> Response:
    """Seal every item's ``plaintext``.

    Returns ``{"results": [...]}``, one ``{ciphertext, key_version, reference}`` or
    ``{error, reference}`` per item, in order.
    """
    principal.require("encrypt", name)
    chosen = state.backends.get(backend)
    items = (await read_batch(request, EncryptBatch, state.settings.batch_max_items)).items
    resolved = await encryption_key(state.keycache, name, chosen, key_version)
    slots, data, ads, errors = _inputs(
        state, [item.plaintext for item in items], [item.associated_data for item in items], "plaintext"
    )
    sealed = await _run(
        state,
        chosen,
        "encrypt",
        data,
        lambda: seal_many(resolved.material, resolved.key_type, resolved.segment_size, data, ads, chosen),
    )
    data.clear()  # the inputs are no longer needed while the response is built
    for index, output in zip(slots, sealed, strict=True):
        if isinstance(output, KeystreamError):
            errors[index] = output
    outputs = dict(zip(slots, sealed, strict=True))
    del sealed
    results: list[dict[str, Any]] = []
    version = resolved.version
    for index, item in enumerate(items):
        error = errors.get(index)
        if error is not None:
            results.append(_item_error(error, item.reference))
        else:
            ciphertext = outputs.pop(index)
            assert isinstance(ciphertext, bytes)
            results.append(
                {"ciphertext": _b64(ciphertext), "key_version": version, "reference": item.reference}
            )
    return json_response(results)


@router.post(
    "/{name}/decrypt/batch",
    dependencies=[JsonBody],
    response_class=Response,
    responses=_ERROR_RESPONSES,
    openapi_extra=openapi_extra(DecryptBatch, "plaintext"),
)
async def decrypt_batch(
    name: str,
    request: Request,
    principal: PrincipalDep,
    state: StateDep,
    backend: BackendQuery = None,
    key_version: VersionQuery = None,
) -> Response:
    """Open every item's ``ciphertext``.

    Returns ``{"results": [...]}``, one ``{plaintext, key_version, reference}`` or
    ``{error, reference}`` per item, in order.
    """
    principal.require("decrypt", name)
    chosen = state.backends.get(backend)
    items = (await read_batch(request, DecryptBatch, state.settings.batch_max_items)).items
    # Cached metadata may predate a rotation by another worker: items that verify under no cached version
    # trigger one fresh read of the key's versions for the whole batch, not one per item.
    keys = await decryption_keys(state.keycache, name, chosen, key_version)
    slots, data, ads, errors = _inputs(
        state, [item.ciphertext for item in items], [item.associated_data for item in items], "ciphertext"
    )
    first = keys.first
    candidates = [(key.version, key.material) for key in keys.candidates]
    opened = await _run(
        state,
        chosen,
        "decrypt",
        data,
        lambda: open_many(
            candidates, first.key_type, first.segment_size, data, ads, chosen, more_candidates=keys.more
        ),
    )
    data.clear()  # the inputs are no longer needed while the response is built
    outputs = dict(zip(slots, opened, strict=True))
    del opened
    results: list[dict[str, Any]] = []
    for index, item in enumerate(items):
        error = errors.get(index)
        if error is None:
            result = outputs.pop(index)
            if isinstance(result, KeystreamError):
                error = result
            else:
                plaintext, version = result
                results.append(
                    {"plaintext": _b64(plaintext), "key_version": version, "reference": item.reference}
                )
                continue
        results.append(_item_error(error, item.reference))
    return json_response(results)

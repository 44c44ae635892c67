"""``POST /v1/keys/{name}/encrypt/batch``, ``/decrypt/batch`` and ``/rewrap/batch``: many small sealed
messages in one call.

Like Vault's ``batch_input``: each item succeeds or fails on its own (``{"error": {...}}`` in its result
slot); only request-level problems (auth, unknown key, limits, malformed JSON) fail the whole call. The body
is bounded by ``batch_max_bytes`` (413, checked on Content-Length first) and buffered within the batch
budget (503 + ``Retry-After`` when ``batch_buffer_budget_bytes`` stays full), both in the body-limit
middleware; it may hold at most ``batch_max_items`` items (413 beyond).

A rewrap batch opens its items as a decrypt batch does (same candidates, same per-item errors) and seals those
that opened under the key's latest version with their own associated data, as an encrypt batch does; the
plaintext stays in the server.

Per batch: the body is decoded once (:mod:`app.api.batch_json`), each item's base64 decoded and checked
here, and all items sealed or opened by one call of :mod:`app.services.sealing` (native C where the backend
has a native sealer), which also decides whether that call runs on the event loop or in a worker thread.

An ``aes256-siv`` key takes the same items and answers the same results, made by deterministic AES-SIV
(:mod:`app.services.deterministic`: Tink's ``DeterministicAead``, the same ciphertext for the same plaintext
and associated data under one version) instead of the sealed format; its decrypt, like the sealed one, tries
the key's versions newest first and says which one opened each item.

Without a query string a batch request skips FastAPI's router and dependency solving: the fast dispatcher
(:mod:`app.api.hotpath`) calls the endpoint through :func:`request_handler`; with one (``backend``,
``key_version``) it goes through FastAPI, whose parameter validation answers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from starlette.responses import Response

from app.api import paths
from app.api.batch_json import (
    DecryptBatch,
    DecryptItems,
    EncryptBatch,
    EncryptItems,
    RewrapBatch,
    json_response,
    openapi_extra,
    read_decrypt_batch,
    read_encrypt_batch,
)
from app.api.deps import JsonBody, PrincipalDep, StateDep, get_principal, get_state, require_json
from app.api.errors import item_error
from app.api.middleware.audit import note
from app.api.openapi import BACKEND_DESCRIPTION
from app.api.params import (
    KeyVersion,
    check_associated_data,
    decode_base64,
    header_context,
    refuse_repeated_query,
)
from app.api.strict_json import StrictJsonRoute
from app.errors import BadRequestError, KeystreamError
from app.services.deterministic import (
    deterministic_decryption_keys,
    deterministic_encryption_key,
    deterministic_rewrap_target,
    is_deterministic,
    open_deterministic,
    seal_deterministic,
)
from app.services.keys import decryption_keys, encryption_key, rewrap_target
from app.services.sealing import open_messages, seal_messages
from app.state import ServiceState

#: Every batch route refuses a repeated query parameter (FastAPI would take the last ``backend``).
router = APIRouter(route_class=StrictJsonRoute, tags=["batch"], dependencies=[Depends(refuse_repeated_query)])

BackendQuery = Annotated[str | None, Query(description=BACKEND_DESCRIPTION)]
VersionQuery = Annotated[KeyVersion | None, Query(description="key version (default: latest / try all)")]
_ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    413: {"description": "body over batch_max_bytes, or more than batch_max_items items"},
    503: {"description": "the batch buffer budget stayed full (Retry-After says when to retry)"},
}

#: A batch route's endpoint, as FastAPI calls it (by keyword).
Endpoint = Callable[..., Awaitable[Response]]


def _inputs(
    state: ServiceState, values: list[Any], associated: list[Any], field: str
) -> tuple[list[bytes], list[bytes], dict[int, KeystreamError]]:
    """The items' inputs and associated data as bytes, and the errors of items that cannot run (bad base64,
    associated data over ``max_associated_data``), by index; inputs and associated data skip those items.

    ``values``/``associated`` hold bytes when the whole body's base64 decoded while parsing (the common case:
    no per-item work here), else text to decode item by item.
    """
    limit = state.settings.max_associated_data
    ads = [ad or b"" for ad in associated]
    if (not values or isinstance(values[0], bytes)) and max(map(len, ads), default=0) <= limit:
        return values, ads, {}
    data: list[bytes] = []
    kept: list[bytes] = []
    errors: dict[int, KeystreamError] = {}
    for index, (text, ad_text) in enumerate(zip(values, associated, strict=True)):
        try:
            value = text if isinstance(text, bytes) else decode_base64(field, text)
            ad = ad_text if isinstance(ad_text, bytes) else decode_base64("associated_data", ad_text)
            check_associated_data(ad, limit)
        except KeystreamError as exc:
            errors[index] = exc
            continue
        data.append(value)
        kept.append(ad)
    return data, kept, errors


def _results(
    references: list[str | None],
    errors: dict[int, KeystreamError],
    outputs: Iterable[tuple[bytes, int] | KeystreamError],
    field: str,
) -> list[dict[str, Any]]:
    """One result per item, in order: ``outputs`` holds those of the items without an entry in ``errors``.

    Outputs stay ``bytes``: the JSON encoder writes them as base64.
    """
    results: list[dict[str, Any]] = []
    remaining = iter(outputs)
    for index, reference in enumerate(references):
        error = errors.get(index) if errors else None
        if error is None:
            output = next(remaining)
            if not isinstance(output, KeystreamError):
                results.append({field: output[0], "key_version": output[1], "reference": reference})
                continue
            error = output
        results.append(item_error(error, reference))
    return results


@router.post(
    paths.BATCH_PATHS["encrypt"],
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
    """Seal every item's ``plaintext`` (deterministic AES-SIV under an ``aes256-siv`` key: equal plaintexts
    with equal associated data give equal ciphertexts).

    Returns ``{"results": [...]}``, one ``{ciphertext, key_version, reference}`` or
    ``{error, reference}`` per item, in order.
    """
    principal.require("encrypt", name)
    chosen = state.backends.get(backend)
    items = await read_encrypt_batch(request, state.settings.batch_max_items)
    context = header_context(request)
    if await is_deterministic(state.keycache, name):
        _refuse_context(name, context)
        return await _encrypt_deterministic(name, request, state, items, key_version)
    resolved = await encryption_key(state.keycache, name, chosen, key_version, context)
    note(
        request.scope,
        format="sealed",
        scheme=resolved.parameters.scheme,
        backend=chosen.name,
        key_version=resolved.version,
    )
    data, ads, errors = _inputs(
        state, [item.plaintext for item in items], [item.associated_data for item in items], "plaintext"
    )
    sealed = await seal_messages(state.settings, chosen, resolved, data, ads)
    data.clear()  # the inputs are no longer needed while the response is built
    version = resolved.version
    outputs = ((output, version) if isinstance(output, bytes) else output for output in sealed)
    references = [item.reference for item in items]
    del items
    return json_response(_results(references, errors, outputs, "ciphertext"))


@router.post(
    paths.BATCH_PATHS["decrypt"],
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
    """Open every item's ``ciphertext`` (an ``aes256-siv`` key's versions tried newest first, as the sealed
    format's).

    Returns ``{"results": [...]}``, one ``{plaintext, key_version, reference}`` or
    ``{error, reference}`` per item, in order.
    """
    principal.require("decrypt", name)
    chosen = state.backends.get(backend)
    items = await read_decrypt_batch(request, state.settings.batch_max_items)
    context = header_context(request)
    if await is_deterministic(state.keycache, name):
        _refuse_context(name, context)
        return await _decrypt_deterministic(name, request, state, items, key_version)
    # Cached metadata may predate a rotation by another worker: items that verify under no cached version
    # trigger one fresh read of the key's versions for the whole batch, not one per item.
    keys = await decryption_keys(state.keycache, name, chosen, key_version, context)
    note(
        request.scope,
        format="sealed",
        scheme=keys.first.parameters.scheme,
        backend=chosen.name,
        key_version=key_version,
    )
    data, ads, errors = _inputs(
        state, [item.ciphertext for item in items], [item.associated_data for item in items], "ciphertext"
    )
    opened = await open_messages(state.settings, chosen, keys, data, ads)
    data.clear()
    references = [item.reference for item in items]
    del items
    return json_response(_results(references, errors, opened, "plaintext"))


@router.post(
    paths.BATCH_PATHS["rewrap"],
    dependencies=[JsonBody],
    response_class=Response,
    responses=_ERROR_RESPONSES,
    openapi_extra=openapi_extra(RewrapBatch, "ciphertext"),
)
async def rewrap_batch(
    name: str,
    request: Request,
    principal: PrincipalDep,
    state: StateDep,
    backend: BackendQuery = None,
    key_version: VersionQuery = None,
) -> Response:
    """Open every item's ``ciphertext`` (under ``key_version``, or the versions decrypt would try) and seal
    its plaintext under the key's latest version with the item's ``associated_data``; needs the ``rewrap``
    scope.

    Returns ``{"results": [...]}``, one ``{ciphertext, key_version, reference}`` (the new version) or
    ``{error, reference}`` (as batch decrypt's) per item, in order.
    """
    principal.require("rewrap", name)
    chosen = state.backends.get(backend)
    items = await read_decrypt_batch(request, state.settings.batch_max_items)
    context = header_context(request)
    if await is_deterministic(state.keycache, name):
        _refuse_context(name, context)
        return await _rewrap_deterministic(name, request, state, items, key_version)
    keys = await decryption_keys(state.keycache, name, chosen, key_version, context)
    target = await rewrap_target(state.keycache, name, chosen, context)
    note(
        request.scope,
        format="sealed",
        scheme=target.parameters.scheme,
        backend=chosen.name,
        key_version=target.version,
    )
    data, ads, errors = _inputs(
        state, [item.ciphertext for item in items], [item.associated_data for item in items], "ciphertext"
    )
    opened = await open_messages(state.settings, chosen, keys, data, ads)
    data.clear()
    plaintexts = [out[0] for out in opened if not isinstance(out, KeystreamError)]
    kept_ads = [ad for out, ad in zip(opened, ads, strict=True) if not isinstance(out, KeystreamError)]
    sealed = iter(await seal_messages(state.settings, chosen, target, plaintexts, kept_ads))
    plaintexts.clear()
    version = target.version
    outputs: list[tuple[bytes, int] | KeystreamError] = []
    for out in opened:
        result = out if isinstance(out, KeystreamError) else next(sealed)
        outputs.append((result, version) if isinstance(result, bytes) else result)
    del opened
    references = [item.reference for item in items]
    del items
    return json_response(_results(references, errors, outputs, "ciphertext"))


async def _encrypt_deterministic(
    name: str, request: Request, state: ServiceState, items: EncryptItems, key_version: int | None
) -> Response:
    """:func:`encrypt_batch` for an ``aes256-siv`` key."""
    key = await deterministic_encryption_key(state.keycache, name, key_version)
    note(request.scope, format="siv", backend="openssl", key_version=key.version)
    data, ads, errors = _inputs(
        state, [item.plaintext for item in items], [item.associated_data for item in items], "plaintext"
    )
    sealed = await seal_deterministic(state.settings, key, data, ads)
    data.clear()
    references = [item.reference for item in items]
    outputs = ((output, key.version) for output in sealed)
    return json_response(_results(references, errors, outputs, "ciphertext"))


async def _decrypt_deterministic(
    name: str, request: Request, state: ServiceState, items: DecryptItems, key_version: int | None
) -> Response:
    """:func:`decrypt_batch` for an ``aes256-siv`` key."""
    keys = await deterministic_decryption_keys(state.keycache, name, key_version)
    note(request.scope, format="siv", backend="openssl", key_version=key_version)
    data, ads, errors = _inputs(
        state, [item.ciphertext for item in items], [item.associated_data for item in items], "ciphertext"
    )
    opened = await open_deterministic(state.settings, keys, data, ads)
    data.clear()
    references = [item.reference for item in items]
    return json_response(_results(references, errors, opened, "plaintext"))


async def _rewrap_deterministic(
    name: str, request: Request, state: ServiceState, items: DecryptItems, key_version: int | None
) -> Response:
    """:func:`rewrap_batch` for an ``aes256-siv`` key: opened as :func:`_decrypt_deterministic` opens, each
    plaintext encrypted again under the latest version with its own associated data."""
    keys = await deterministic_decryption_keys(state.keycache, name, key_version)
    target = await deterministic_rewrap_target(state.keycache, name)
    note(request.scope, format="siv", backend="openssl", key_version=target.version)
    data, ads, errors = _inputs(
        state, [item.ciphertext for item in items], [item.associated_data for item in items], "ciphertext"
    )
    opened = await open_deterministic(state.settings, keys, data, ads)
    data.clear()
    kept = [(out[0], ad) for out, ad in zip(opened, ads, strict=True) if not isinstance(out, KeystreamError)]
    sealed = iter(
        await seal_deterministic(
            state.settings, target, [pair[0] for pair in kept], [pair[1] for pair in kept]
        )
    )
    kept.clear()
    version = target.version
    outputs = [out if isinstance(out, KeystreamError) else (next(sealed), version) for out in opened]
    del opened
    references = [item.reference for item in items]
    return json_response(_results(references, errors, outputs, "ciphertext"))


def _refuse_context(name: str, context: bytes | None) -> None:
    """Refuse a ``Keystream-Context`` for an ``aes256-siv`` key, which is never derived.

    Raises:
        BadRequestError: ``context`` was given.
    """
    if context is not None:
        raise BadRequestError(
            f"key {name!r} is not derived: a context is only for keys created with derived true"
        )


def request_handler(endpoint: Endpoint) -> Callable[[Request], Awaitable[Response]]:
    """``endpoint`` as a handler of the request alone, for the fast dispatcher (:mod:`app.api.hotpath`), which
    serves batch requests without a query string: it gives the endpoint what FastAPI's dependencies would (the
    ``application/json`` check, the service state, the principal the body-limit middleware verified) and
    leaves ``backend`` and ``key_version`` at their defaults.

    Raises:
        UnsupportedMediaTypeError: the body is not ``application/json`` (415).
        KeystreamError, RequestValidationError: as the endpoint.
    """

    async def handle(request: Request) -> Response:
        await require_json(request)
        state = await get_state(request)
        principal = await get_principal(request, state)
        return await endpoint(
            name=request.path_params["name"], request=request, principal=principal, state=state
        )

    return handle

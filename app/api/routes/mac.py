"""``POST /v1/keys/{name}/hmac`` and ``/verify`` (and their ``/batch`` forms): HMACs under a key version.

Like Vault Transit's ``hmac`` and ``verify``: the HMAC key of a version is derived from its material
(:mod:`app.formats.mac`), never the material itself, and never leaves the server. ``hmac`` uses the key's
latest version or an explicit ``key_version``; ``verify`` reads the version from the tag
(``ks:v<version>:...``) and refuses one below the key's ``min_decryption_version``, as decrypt does.

Scopes: ``hmac`` and ``verify``, separate so that a service that only checks tags (webhooks, signed
links) cannot make them. The batch forms take up to ``KEYSTREAM_MAX_JSON_BODY`` of JSON; each item succeeds
or fails on its own, as the sealed batch routes' items do.
"""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from app.api import paths
from app.api.deps import JsonBody, PrincipalDep, StateDep
from app.api.errors import item_error
from app.api.middleware.audit import note
from app.api.openapi import errors
from app.api.params import BASE64_PATTERN, decode_base64, decode_context
from app.api.request_handler import Handler, request_handler
from app.api.strict_json import StrictJsonRoute
from app.errors import KeystreamError
from app.services import macs
from app.services.macs import Signer, parse_tag
from app.state import ServiceState

router = APIRouter(route_class=StrictJsonRoute, tags=["hmac"])

Algorithm = Literal["sha2-256", "sha2-384", "sha2-512"]
_ALGORITHM: Any = Field(default="sha2-256", description="HMAC-SHA256, HMAC-SHA384 or HMAC-SHA512")
_INPUT = Field(description="base64 of the data", json_schema_extra={"pattern": BASE64_PATTERN})
# An item's base64 is checked item by item (a bad one fails that item alone), so its schema has no pattern.
_ITEM_INPUT = Field(description="base64 of the data; an item whose input is not base64 fails alone")
_REFERENCE = Field(default=None, max_length=256, description="copied to the item's result")
_TAG = Field(max_length=200, description="a tag made by hmac: ks:v<version>:<base64>")


class HmacRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    input: str = _INPUT
    algorithm: Algorithm = _ALGORITHM
    key_version: int | None = Field(default=None, ge=1, description="the version to use (default: latest)")
    context: str | None = Field(
        default=None,
        description="a derived key's context, base64 (required for a derived key, refused for any other)",
        json_schema_extra={"pattern": BASE64_PATTERN},
    )


class HmacResponse(BaseModel):
    hmac: str = Field(description="ks:v<version>:<base64 of the HMAC>")
    key_version: int


class HmacItem(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    input: str = _ITEM_INPUT
    reference: str | None = _REFERENCE


class HmacBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    items: list[HmacItem]
    algorithm: Algorithm = _ALGORITHM
    key_version: int | None = Field(default=None, ge=1, description="the version to use (default: latest)")
    context: str | None = Field(
        default=None,
        description="a derived key's context, base64 (required for a derived key, refused for any other)",
        json_schema_extra={"pattern": BASE64_PATTERN},
    )


class VerifyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    input: str = _INPUT
    hmac: str = _TAG
    algorithm: Algorithm = _ALGORITHM
    context: str | None = Field(
        default=None,
        description="a derived key's context, base64 (required for a derived key, refused for any other)",
        json_schema_extra={"pattern": BASE64_PATTERN},
    )


class VerifyResponse(BaseModel):
    valid: bool = Field(description="whether hmac is the HMAC of input under the tag's key version")
    key_version: int


class VerifyItem(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    input: str = _ITEM_INPUT
    hmac: str = _TAG
    reference: str | None = _REFERENCE


class VerifyBatchRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    items: list[VerifyItem]
    algorithm: Algorithm = _ALGORITHM
    context: str | None = Field(
        default=None,
        description="a derived key's context, base64 (required for a derived key, refused for any other)",
        json_schema_extra={"pattern": BASE64_PATTERN},
    )


def _decode(value: str) -> bytes:
    return decode_base64("input", value)


async def _signer(
    state: ServiceState, name: str, version: int | None, algorithm: str, context: str | None
) -> Signer:
    backend = state.backends.get(None)
    return await macs.signer(
        state.keycache, backend, name, version, algorithm, decode_context(context, "context")
    )


async def _verifier(
    state: ServiceState, name: str, version: int, algorithm: str, context: str | None
) -> Signer:
    backend = state.backends.get(None)
    return await macs.verifier(
        state.keycache, backend, name, version, algorithm, decode_context(context, "context")
    )


@router.post(
    paths.HMAC, dependencies=[JsonBody], response_model=HmacResponse, responses=errors(403, 404, 422)
)
async def hmac(
    name: str, body: HmacRequest, principal: PrincipalDep, state: StateDep, request: Request
) -> Any:
    """The HMAC of ``input`` under the key's latest version (or ``key_version``)."""
    principal.require("hmac", name)
    data = _decode(body.input)
    signer = await _signer(state, name, body.key_version, body.algorithm, body.context)
    note(request.scope, key_version=signer.version, algorithm=body.algorithm)
    return {"hmac": signer.tag(data), "key_version": signer.version}


@router.post(paths.HMAC_BATCH, dependencies=[JsonBody], responses=errors(403, 404, 422))
async def hmac_batch(
    name: str, body: HmacBatchRequest, principal: PrincipalDep, state: StateDep, request: Request
) -> Any:
    """The HMAC of every item's ``input`` under one version: ``{"results": [{hmac, key_version,
    reference} or {error, reference}, ...]}``, in order."""
    principal.require("hmac", name)
    signer = await _signer(state, name, body.key_version, body.algorithm, body.context)
    note(request.scope, key_version=signer.version, algorithm=body.algorithm, items=len(body.items))
    results: list[dict[str, Any]] = []
    for item in body.items:
        try:
            data = _decode(item.input)
        except KeystreamError as exc:
            results.append(item_error(exc, item.reference))
            continue
        results.append({"hmac": signer.tag(data), "key_version": signer.version, "reference": item.reference})
    return {"results": results}


@router.post(
    paths.VERIFY, dependencies=[JsonBody], response_model=VerifyResponse, responses=errors(403, 404, 422)
)
async def verify(
    name: str, body: VerifyRequest, principal: PrincipalDep, state: StateDep, request: Request
) -> Any:
    """Whether ``hmac`` is the HMAC of ``input`` under the version its text names (400 for a malformed tag
    or a version below ``min_decryption_version``; 404 for a version that does not exist)."""
    principal.require("verify", name)
    data = _decode(body.input)
    version, digest = parse_tag(body.hmac)
    signer = await _verifier(state, name, version, body.algorithm, body.context)
    valid = signer.verify(data, digest)
    note(request.scope, key_version=version, algorithm=body.algorithm, valid=valid)
    return {"valid": valid, "key_version": version}


@router.post(paths.VERIFY_BATCH, dependencies=[JsonBody], responses=errors(403, 404, 422))
async def verify_batch(
    name: str, body: VerifyBatchRequest, principal: PrincipalDep, state: StateDep, request: Request
) -> Any:
    """Verify every item: ``{"results": [{valid, key_version, reference} or {error, reference}, ...]}``;
    a malformed tag, bad base64 or an unusable version fails its item only."""
    principal.require("verify", name)
    decode_context(body.context, "context")  # malformed base64 fails the request, whatever the items
    await macs.check_key(state.keycache, state.backends.get(None), name)  # an unknown key: 404, not per item
    signers: dict[int, Signer | KeystreamError] = {}
    results: list[dict[str, Any]] = []
    for item in body.items:
        try:
            data = _decode(item.input)
            version, digest = parse_tag(item.hmac)
            if version not in signers:
                try:
                    signers[version] = await _verifier(state, name, version, body.algorithm, body.context)
                except KeystreamError as exc:  # this version only (missing, below the minimum)
                    signers[version] = exc
            signer = signers[version]
            if isinstance(signer, KeystreamError):
                raise signer
        except KeystreamError as exc:
            results.append(item_error(exc, item.reference))
            continue
        results.append(
            {"valid": signer.verify(data, digest), "key_version": version, "reference": item.reference}
        )
    note(request.scope, algorithm=body.algorithm, items=len(body.items))
    return {"results": results}


#: ``hmac`` and ``verify`` (one message each; the batch forms go through FastAPI) as handlers of the request
#: alone, by operation, for the fast dispatcher (:mod:`app.api.request_handler`; through FastAPI's router,
#: dependency solving and response model a 1 KiB HMAC cost about three times its own work).
REQUEST_HANDLERS: dict[str, Handler] = {
    "hmac": request_handler(hmac, HmacRequest),
    "verify": request_handler(verify, VerifyRequest),
}

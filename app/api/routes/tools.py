"""``POST /v1/random`` and ``POST /v1/hash``: random bytes from the OS CSPRNG and SHA-2/SHA-3 digests.

Like Vault's ``sys/tools/random`` and ``sys/tools/hash`` (and Transit's ``random`` and ``hash``): no key is
involved, so any valid token may call them (no scope). Random bytes come from :func:`secrets.token_bytes`
(the kernel's ``getrandom``), 1 to 65,536 of them per call; the answer says ``Cache-Control: no-store``.
``hash`` takes its input in the JSON body (at most ``KEYSTREAM_MAX_JSON_BODY``, as every JSON route).
"""

from __future__ import annotations

import secrets
from typing import Any

from fastapi import APIRouter, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api import paths
from app.api.deps import JsonBody, PrincipalDep
from app.api.openapi import errors
from app.api.params import BASE64_PATTERN, HASHES, MAX_RANDOM_BYTES, Encoding, HashAlgorithm, decode_base64
from app.api.request_handler import Handler, request_handler
from app.api.strict_json import StrictJsonRoute
from app.core import base64_codec

router = APIRouter(route_class=StrictJsonRoute, tags=["tools"])

_FORMAT: Any = Field(default="base64", description="base64 or hex")


def _encode(data: bytes, encoding: str) -> str:
    return data.hex() if encoding == "hex" else base64_codec.encode(data)


class RandomRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    bytes: int = Field(default=32, ge=1, le=MAX_RANDOM_BYTES, description="how many random bytes")
    format: Encoding = _FORMAT


class RandomResponse(BaseModel):
    random: str = Field(description="the random bytes, in the requested format")


class HashRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    input: str = Field(description="base64 of the data", json_schema_extra={"pattern": BASE64_PATTERN})
    algorithm: HashAlgorithm = Field(default="sha2-256", description="a SHA-2 or SHA-3 digest")
    format: Encoding = _FORMAT


class HashResponse(BaseModel):
    sum: str = Field(description="the digest, in the requested format")


@router.post(paths.RANDOM, dependencies=[JsonBody], response_model=RandomResponse, responses=errors(422))
async def random(body: RandomRequest, principal: PrincipalDep, response: Response) -> Any:
    """``bytes`` random bytes from the OS CSPRNG."""
    del principal  # any valid token
    response.headers["Cache-Control"] = "no-store"
    return {"random": _encode(secrets.token_bytes(body.bytes), body.format)}


@router.post(paths.HASH, dependencies=[JsonBody], response_model=HashResponse, responses=errors(422))
async def hash_(body: HashRequest, principal: PrincipalDep) -> Any:
    """The ``algorithm`` digest of ``input``."""
    del principal  # any valid token
    data = decode_base64("input", body.input)
    return {"sum": _encode(HASHES[body.algorithm](data).digest(), body.format)}


#: Random bytes and hashes as handlers of the request alone, by path, for the fast dispatcher
#: (:mod:`app.api.request_handler`).
REQUEST_HANDLERS: dict[str, Handler] = {
    paths.RANDOM: request_handler(random, RandomRequest),
    paths.HASH: request_handler(hash_, HashRequest),
}

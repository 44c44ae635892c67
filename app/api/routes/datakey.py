"""``POST /v1/keys/{name}/datakey``: a fresh data key for envelope encryption, sealed under the named key.

Like AWS KMS ``GenerateDataKey`` / ``GenerateDataKeyWithoutPlaintext`` and Vault Transit's
``datakey/plaintext`` / ``datakey/wrapped``: the service draws ``type``'s size of random bytes (16 for
``aes128``, 32 for ``aes256``, from :func:`secrets.token_bytes`) and seals them under the key's latest
version, in the key's scheme, through the sealing service batch encrypt uses
(:func:`app.services.sealing.seal_messages`). The
``ciphertext`` is therefore an ordinary sealed message: ``POST /v1/keys/{name}/decrypt`` and
``/decrypt/batch`` open it (with the same ``associated_data``).

Scopes: ``plaintext: false`` needs ``encrypt`` (the caller only ever holds the wrapped key, and needs
``decrypt`` later to unwrap it); ``plaintext: true`` hands out the key itself, which is what a decrypt of the
ciphertext would return, so it needs ``encrypt`` and ``decrypt``. The data key is in the response body only:
never in logs, metrics or error bodies; the response says ``Cache-Control: no-store``.
"""

from __future__ import annotations

import secrets
from typing import Any, Literal

from fastapi import APIRouter, Request, Response
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import SkipJsonSchema

from app.api import paths
from app.api.deps import JsonBody, PrincipalDep, StateDep
from app.api.middleware.audit import note
from app.api.openapi import errors
from app.api.params import BASE64_PATTERN, check_associated_data, decode_base64, decode_context
from app.api.request_handler import Handler, request_handler
from app.api.strict_json import StrictJsonRoute
from app.core import base64_codec
from app.errors import KeystreamError
from app.services.keys import encryption_key
from app.services.sealing import seal_messages

router = APIRouter(route_class=StrictJsonRoute, tags=["datakey"])

#: The data key types and their sizes in bytes.
DATA_KEY_SIZES: dict[str, int] = {"aes128": 16, "aes256": 32}
DataKeyType = Literal["aes128", "aes256"]


class DataKeyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    type: DataKeyType = Field(description="aes128 (16 random bytes) or aes256 (32 random bytes)")
    plaintext: bool = Field(
        description="true: the answer carries the data key too (needs the encrypt and decrypt scopes); "
        "false: only its ciphertext (needs encrypt)"
    )
    associated_data: str | None = Field(
        default=None,
        description="base64; bound to the ciphertext (decrypt needs the same), at most max_associated_data "
        "bytes (413 beyond)",
        json_schema_extra={"pattern": BASE64_PATTERN},
    )
    context: str | None = Field(
        default=None,
        description="a derived key's context, base64 (required for a derived key, refused for any other)",
        json_schema_extra={"pattern": BASE64_PATTERN},
    )


class DataKeyResponse(BaseModel):
    ciphertext: str = Field(description="base64 of the data key sealed under the key's latest version")
    key_version: int = Field(description="the key version that sealed it")
    # Never sent as null (the field is left out instead), so the schema does not allow null.
    plaintext: str | SkipJsonSchema[None] = Field(
        default=None,
        repr=False,
        description="base64 of the data key; present only when the request asked for it",
    )


@router.post(
    paths.DATAKEY,
    dependencies=[JsonBody],
    response_model=DataKeyResponse,
    response_model_exclude_none=True,
    responses=errors(403, 404, 415, 422),
)
async def datakey(
    name: str,
    body: DataKeyRequest,
    principal: PrincipalDep,
    state: StateDep,
    request: Request,
    response: Response,
) -> dict[str, Any]:
    """Generate a random data key and return it sealed under the key's latest version (and, with
    ``plaintext: true``, in the clear as well)."""
    principal.require("encrypt", name)
    if body.plaintext:
        principal.require("decrypt", name)
    associated = check_associated_data(
        decode_base64("associated_data", body.associated_data), state.settings.max_associated_data
    )
    backend = state.backends.get(None)
    context = decode_context(body.context, "context")
    resolved = await encryption_key(state.keycache, name, backend, None, context)
    note(
        request.scope,
        format="sealed",
        scheme=resolved.parameters.scheme,
        backend=backend.name,
        key_version=resolved.version,
        associated_data=associated,
    )
    data_key = secrets.token_bytes(DATA_KEY_SIZES[body.type])
    (sealed,) = await seal_messages(state.settings, backend, resolved, [data_key], [associated])
    if isinstance(sealed, KeystreamError):  # cannot happen for 32 bytes; never a 500 if it did
        raise sealed
    response.headers["Cache-Control"] = "no-store"
    result: dict[str, Any] = {
        "ciphertext": base64_codec.encode(sealed),
        "key_version": resolved.version,
    }
    if body.plaintext:
        result["plaintext"] = base64_codec.encode(data_key)
    return result


#: The data key route as a handler of the request alone, for the fast dispatcher
#: (:mod:`app.api.request_handler`; its ``Cache-Control: no-store`` joins the answer as through FastAPI).
REQUEST_HANDLERS: dict[str, Handler] = {"datakey": request_handler(datakey, DataKeyRequest)}

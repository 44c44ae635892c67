"""``/v1/tokens``: admins create, list and delete API tokens.

A token is shown once, at creation. Token management needs an ``admin`` token whose key patterns include
``*`` (unrestricted): an admin limited to some keys could otherwise list every token and revoke any, root
included. A token never hands out more than it has: the new token's scopes must be a subset of the caller's
(and its key patterns are within ``*``).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from anyio import to_thread
from fastapi import APIRouter, Depends, Response, status
from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from app.api.deps import AdminDep, JsonBody, StateDep
from app.api.openapi import errors
from app.errors import ForbiddenError
from app.keystore import TokenRecord
from app.services.security import Principal, new_token

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])

Scope = Literal["admin", "encrypt", "decrypt"]
#: A key pattern: a glob over key-name characters (``* ? [ ] !`` and ``A-Z a-z 0-9 _ . -``), 1-128 of them.
KeyPattern = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.*?!\[\]-]{1,128}$")]


class CreateTokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    scopes: list[Scope] = Field(min_length=1)
    key_patterns: list[KeyPattern] = Field(default_factory=lambda: ["*"], min_length=1, max_length=64)
    description: str = Field(default="", max_length=256)


async def get_token_admin(principal: AdminDep) -> Principal:
    """An ``admin`` caller whose key patterns include ``*``: the only kind that may manage tokens.

    Raises:
        ForbiddenError: the token lacks ``admin`` or is limited to some key patterns (403).
    """
    if "*" not in principal.key_patterns:
        raise ForbiddenError(
            "token management needs an admin token with the key pattern '*' "
            "(this one is limited to some keys)"
        )
    return principal


TokenAdminDep = Annotated[Principal, Depends(get_token_admin)]


def token_json(record: TokenRecord) -> dict[str, Any]:
    """A token's public fields (never the secret or its hash)."""
    return {
        "id": record.token_id,
        "scopes": list(record.scopes),
        "key_patterns": list(record.key_patterns),
        "description": record.description,
        "created_at": record.created_at.isoformat().replace("+00:00", "Z"),
    }


@router.post(
    "", status_code=status.HTTP_201_CREATED, dependencies=[JsonBody], responses=errors(403, 415, 422)
)
async def create_token(body: CreateTokenRequest, principal: TokenAdminDep, state: StateDep) -> dict[str, Any]:
    """Create a token; the response's ``token`` is the only time the secret is shown."""
    scopes = tuple(dict.fromkeys(body.scopes))
    patterns = tuple(dict.fromkeys(body.key_patterns))
    missing = [scope for scope in scopes if not principal.has_scope(scope)]
    if missing:
        raise ForbiddenError(f"cannot grant scopes this token does not have: {', '.join(missing)}")
    if "*" not in principal.key_patterns:
        wider = [pattern for pattern in patterns if pattern not in principal.key_patterns]
        if wider:
            raise ForbiddenError("cannot grant key patterns beyond this token's own patterns")
    token, record = new_token(scopes, patterns, body.description)
    await to_thread.run_sync(state.keystore.create_token, record)
    return {"token": token, **token_json(record)}


@router.get("", responses=errors(403))
async def list_tokens(principal: TokenAdminDep, state: StateDep) -> dict[str, Any]:
    """Every token's public fields."""
    records = await to_thread.run_sync(state.keystore.list_tokens)
    return {"tokens": [token_json(record) for record in records]}


@router.delete("/{token_id}", status_code=status.HTTP_204_NO_CONTENT, responses=errors(403, 404))
async def delete_token(token_id: str, principal: TokenAdminDep, state: StateDep) -> Response:
    """Revoke a token: at once in this worker, in the others when they read the change log (milliseconds)."""
    await to_thread.run_sync(state.keystore.delete_token, token_id)
    state.tokens.forget(token_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

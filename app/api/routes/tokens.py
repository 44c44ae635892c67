"""``/v1/tokens``: admins create, list and delete API tokens; any token looks itself up and renews itself.

A token is shown once, at creation. It may have a lifetime: ``ttl`` seconds from creation, renewable through
``POST /v1/tokens/self/renew`` until ``max_ttl`` seconds after creation (both within
``MIN_TOKEN_TTL_SECONDS``..``MAX_TOKEN_TTL_SECONDS`` of :mod:`app.core.token_format`); an expired token gets
401 ``token_expired``. Token management needs an ``admin`` token whose key patterns include
``*`` (unrestricted): an admin limited to some keys could otherwise list every token and revoke any, root
included. A token never hands out more than it has: the new token's scopes must be a subset of the caller's
(and its key patterns are within ``*``), and it never outlives the caller (its ``expires_at`` and
``max_expires_at`` are capped at the caller's).
"""

from __future__ import annotations

from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Response, status
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.convertors import Convertor, register_url_convertor

from app.api import paths
from app.api.deps import JsonBody, PrincipalDep, StateDep, TokenAdminDep
from app.api.grants import KeyPattern, Scope, TtlSeconds, token_json
from app.api.openapi import errors
from app.api.strict_json import StrictJsonRoute
from app.services.security import lifetime_capped, new_token, renew_token, require_grantable

#: The path segment ``self`` names the caller's own token, so no token id is read from it: ``DELETE`` on
#: :data:`~app.api.paths.TOKEN_SELF` is not the admin's revoke route (405, ``Allow: GET``). No token can be
#: called ``self`` anyway: the service makes hex ids, and a root token's id is hex.
SELF = paths.SELF


class TokenIdConvertor(Convertor[str]):
    """A ``{token_id}`` path segment: any segment but ``self`` (the keystore checks the id's shape)."""

    regex = rf"(?!{SELF}(?:/|$))[^/]+"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


register_url_convertor("token_id", TokenIdConvertor())

router = APIRouter(route_class=StrictJsonRoute, tags=["tokens"])


class CreateTokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    scopes: list[Scope] = Field(min_length=1)
    key_patterns: list[KeyPattern] = Field(default_factory=lambda: ["*"], min_length=1, max_length=64)
    description: str = Field(default="", max_length=256)
    ttl: TtlSeconds | None = Field(
        default=None, description="Seconds until the token expires (none: it never expires)."
    )
    max_ttl: TtlSeconds | None = Field(
        default=None,
        description="Seconds after creation beyond which no renewal extends the token (needs ttl; at least "
        "ttl; default: ttl).",
    )

    @model_validator(mode="after")
    def _max_ttl_needs_ttl(self) -> CreateTokenRequest:
        if self.max_ttl is not None:
            if self.ttl is None:
                raise ValueError("max_ttl needs a ttl")
            if self.max_ttl < self.ttl:
                raise ValueError("max_ttl may not be below ttl")
        return self


class RenewTokenRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    ttl: TtlSeconds | None = Field(
        default=None, description="Seconds from now (default: the token's ttl), capped at max_expires_at."
    )


@router.post(
    paths.TOKENS,
    status_code=status.HTTP_201_CREATED,
    dependencies=[JsonBody],
    responses=errors(403, 415, 422),
)
async def create_token(body: CreateTokenRequest, principal: TokenAdminDep, state: StateDep) -> dict[str, Any]:
    """Create a token; the response's ``token`` is the only time the secret is shown.

    A token never outlives its creator: when the caller has a lifetime, the new token's ``expires_at`` and
    ``max_expires_at`` are capped at the caller's (a token asked for without ``ttl`` gets the caller's
    remaining lifetime), and ``capped`` is true when that cut what was asked for.
    """
    scopes = tuple(dict.fromkeys(body.scopes))
    patterns = tuple(dict.fromkeys(body.key_patterns))
    require_grantable(principal, scopes, patterns)
    not_after = None
    if principal.expires_at is not None and principal.max_expires_at is not None:
        not_after = (principal.expires_at, principal.max_expires_at)
    token, record = new_token(
        scopes,
        patterns,
        body.description,
        ttl_seconds=body.ttl,
        max_ttl_seconds=body.max_ttl,
        not_after=not_after,
    )
    await to_thread.run_sync(state.keystore.create_token, record)
    state.tokens.forget(record.token_id)  # in case its id was tried (and cached as unknown) just before
    capped = lifetime_capped(record, body.ttl, body.max_ttl)
    return {"token": token, **token_json(record), "capped": capped}


@router.get(paths.TOKENS, responses=errors(403))
async def list_tokens(principal: TokenAdminDep, state: StateDep) -> dict[str, Any]:
    """Every token's public fields."""
    records = await to_thread.run_sync(state.keystore.list_tokens)
    return {"tokens": [token_json(record) for record in records]}


@router.get(paths.TOKEN_SELF, responses=errors(404))
async def token_self(principal: PrincipalDep, state: StateDep) -> dict[str, Any]:
    """The calling token's own public fields; any valid token may ask, no ``admin`` scope needed (404 only if
    the token was revoked while the request ran)."""
    record = await to_thread.run_sync(state.keystore.get_token, principal.token_id)
    return token_json(record)


@router.post(paths.TOKEN_SELF_RENEW, dependencies=[JsonBody], responses=errors(400, 404, 415, 422))
async def renew_token_self(
    principal: PrincipalDep, state: StateDep, body: RenewTokenRequest | None = None
) -> dict[str, Any]:
    """Extend the calling token's expiry to now + ``ttl`` (default: its ttl at creation).

    The new expiry never passes the token's ``max_expires_at``: ``capped`` is true when it was cut there (a
    token at its limit must be replaced). A token without a ttl gets 400. Every worker and replica sees the
    new expiry through the change log.
    """
    ttl = body.ttl if body is not None else None
    record, capped = await to_thread.run_sync(renew_token, state.keystore, principal.token_id, ttl)
    state.tokens.forget(principal.token_id)
    return {**token_json(record), "capped": capped}


@router.delete(paths.TOKEN_BY_ID, status_code=status.HTTP_204_NO_CONTENT, responses=errors(403, 404))
async def delete_token(token_id: str, principal: TokenAdminDep, state: StateDep) -> Response:
    """Revoke a token: at once in this worker, in the others when they read the change log (milliseconds)."""
    await to_thread.run_sync(state.keystore.delete_token, token_id)
    state.tokens.forget(token_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

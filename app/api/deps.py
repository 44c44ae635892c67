"""FastAPI dependencies as ``Annotated`` aliases so handlers stay short.

Every dependency is ``async def`` on purpose: FastAPI runs plain ``def`` dependencies in the thread pool,
which would cost a thread hop on every request of the hot path.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from app.api.middleware.body_limit import VERIFIED_PRINCIPAL, credential
from app.errors import ForbiddenError, UnsupportedMediaTypeError
from app.services.security import Principal
from app.state import ServiceState


async def get_state(request: Request) -> ServiceState:
    """The running app's :class:`ServiceState` (set by the lifespan)."""
    state: ServiceState = request.app.state.keystream
    return state


StateDep = Annotated[ServiceState, Depends(get_state)]


async def get_principal(request: Request, state: StateDep) -> Principal:
    """The caller behind the ``Authorization: Bearer ks_...`` header.

    Raises:
        UnauthorizedError: no token, a malformed or unknown one, or a wrong secret (401).
        ServiceUnavailableError: the token had to be read and the keystore cannot serve (503).
    """
    verified = request.scope.get("state", {}).get(VERIFIED_PRINCIPAL)
    if isinstance(verified, Principal):  # the body-limit middleware checked this request's token already
        return verified
    return await state.tokens.authenticate(credential(request.scope))


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def get_admin(principal: PrincipalDep) -> Principal:
    """A caller with the ``admin`` scope.

    Raises:
        ForbiddenError: the token lacks ``admin`` (403).
    """
    principal.require("admin")
    return principal


AdminDep = Annotated[Principal, Depends(get_admin)]


async def get_token_admin(principal: AdminDep) -> Principal:
    """An ``admin`` caller whose key patterns include ``*``: the only kind that may manage tokens and the
    login roles that issue them (an admin limited to some keys could otherwise list every token and revoke
    any, root included).

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


def _media_type(request: Request) -> str:
    return request.headers.get("content-type", "").split(";", 1)[0].strip().lower()


async def require_json(request: Request) -> None:
    """Reject bodies that are not ``application/json`` (a missing type is accepted).

    Raises:
        UnsupportedMediaTypeError: any other content type (415).
    """
    media_type = _media_type(request)
    if media_type and media_type != "application/json":
        raise UnsupportedMediaTypeError(f"expected application/json, got {media_type}")


JsonBody = Depends(require_json)

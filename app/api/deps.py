"""FastAPI dependencies as ``Annotated`` aliases so handlers stay short.

Every dependency is ``async def`` on purpose: FastAPI runs plain ``def`` dependencies in the thread pool,
which would cost a thread hop on every request of the hot path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

from anyio import to_thread
from fastapi import Depends, Request

from app.core.errors import UnsupportedMediaTypeError
from app.core.security import VERIFIED_PRINCIPAL, Principal
from app.core.state import ServiceState
from app.keycache import CacheMissError

T = TypeVar("T")


async def get_state(request: Request) -> ServiceState:
    """The running app's :class:`ServiceState` (set by the lifespan)."""
    state: ServiceState = request.app.state.keystream
    return state


StateDep = Annotated[ServiceState, Depends(get_state)]


async def get_principal(request: Request, state: StateDep) -> Principal:
    """The caller behind the ``Authorization: Bearer ks_...`` header.

    Raises:
        UnauthorizedError: no token, a malformed or unknown one, or a wrong secret (401).
    """
    verified = request.scope.get("state", {}).get(VERIFIED_PRINCIPAL)
    if isinstance(verified, Principal):  # the body-limit middleware checked this request's token already
        return verified
    return state.tokens.verify(request.headers.get("authorization"))


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def get_admin(principal: PrincipalDep) -> Principal:
    """A caller with the ``admin`` scope.

    Raises:
        ForbiddenError: the token lacks ``admin`` (403).
    """
    principal.require("admin")
    return principal


AdminDep = Annotated[Principal, Depends(get_admin)]


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


async def from_cache(lookup: Callable[[bool], T]) -> T:
    """Run a key cache ``lookup(cached_only)``: on the event loop when it hits, else in a worker thread.

    A hit is a dict lookup; a miss reads SQLite and unwraps key material (about half a millisecond), which
    would stall every other request on the loop.
    """
    try:
        return lookup(True)
    except CacheMissError:
        return await to_thread.run_sync(lookup, False)

"""``/v1/keys/{name}/export``: the material of an ``exportable`` key's versions, base64 (admin).

Export is how a key leaves Keystream for another system (Vault, Tink, an HSM): only for a key created or
configured ``exportable``, which can never be turned off again once on, and only with the ``admin`` scope and
a key pattern matching the name. The answer is marked ``Cache-Control: no-store``; the audit record names the
key (and the version, when one is asked for), never the material.
"""

from __future__ import annotations

from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Query, Request, Response

from app.api import paths
from app.api.deps import AdminDep, StateDep
from app.api.middleware.audit import note
from app.api.openapi import errors
from app.api.strict_json import StrictJsonRoute
from app.services.key_export import exported

router = APIRouter(route_class=StrictJsonRoute, tags=["keys"])

#: ``version``: a number, ``latest``, or absent for every remaining version.
VersionText = Annotated[
    str | None,
    Query(
        pattern=r"^(latest|[1-9][0-9]{0,9})$",
        description="a version number or latest; every remaining version when absent",
    ),
]


@router.get(paths.KEY_EXPORT, responses=errors(400, 403, 404))
async def export_key(
    name: str,
    principal: AdminDep,
    state: StateDep,
    request: Request,
    response: Response,
    version: VersionText = None,
) -> dict[str, Any]:
    """The material of the key's versions (or of ``version``), base64: ``{"name", "type", "keys": {"1":
    ...}}``. Only for an ``exportable`` key (400 otherwise)."""
    principal.require("admin", name)
    info, keys = await to_thread.run_sync(exported, state.keystore, name, version)
    if len(keys) == 1:
        note(request.scope, key_version=int(next(iter(keys))))
    response.headers["Cache-Control"] = "no-store"
    return {"name": info.name, "type": info.key_type, "keys": keys}

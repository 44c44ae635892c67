"""``/v1/keys/{name}/export``: the material of an ``exportable`` key's versions, base64; ``/backup`` and
``/v1/keys/restore``: a key's backup blob and its restore (admin).

Export is how a key leaves Keystream for another system (Vault, Tink, an HSM): only for a key created or
configured ``exportable``, which can never be turned off again once on, and only with the ``admin`` scope and
a key pattern matching the name. The answer is marked ``Cache-Control: no-store``; the audit record names the
key (and the version, when one is asked for), never the material.

A backup (:mod:`app.keystore.backup`) is the key's record and versions wrapped under the seal and bound to
its name: only for a key whose ``allow_plaintext_backup`` or ``exportable`` option is on, restored only
under that name (``force`` replaces an existing key), only where the seal holds its master key generation.
"""

from __future__ import annotations

from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from app.api import paths
from app.api.deps import AdminDep, JsonBody, StateDep
from app.api.middleware.audit import note
from app.api.openapi import errors
from app.api.strict_json import StrictJsonRoute
from app.keystore.backup import backup_name
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


class RestoreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    backup: str = Field(min_length=1, description="a blob the backup route answered")
    name: str | None = Field(
        default=None, description="the key's name; a backup is bound to it, so only that name is accepted"
    )
    force: bool = Field(default=False, description="replace a key of that name")


@router.get(paths.KEY_BACKUP, responses=errors(400, 403, 404))
async def backup_key(name: str, principal: AdminDep, state: StateDep, response: Response) -> dict[str, Any]:
    """The key's backup blob, ``{"name", "backup"}``: its record and every version wrapped under the seal,
    bound to the name. Only for a key whose ``allow_plaintext_backup`` or ``exportable`` option is on."""
    principal.require("admin", name)
    blob = await to_thread.run_sync(state.keystore.backup_key, name)
    response.headers["Cache-Control"] = "no-store"
    return {"name": name, "backup": blob}


@router.post(paths.KEYS_RESTORE, dependencies=[JsonBody], responses=errors(400, 403, 409, 422))
async def restore_key(body: RestoreRequest, principal: AdminDep, state: StateDep) -> dict[str, Any]:
    """Store the key a backup holds, as it was; an existing key of its name only with ``force`` (409
    otherwise). Answers the key's metadata."""
    name = body.name or backup_name(body.backup)
    principal.require("admin", name)
    info = await to_thread.run_sync(
        lambda: state.keystore.restore_key(body.backup, body.name, force=body.force)
    )
    state.keycache.invalidate(info.name)
    return info.to_json()

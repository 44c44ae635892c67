"""The Transit-compatible API's export, backup and restore, Vault's paths and answers:
``GET /v1/transit/export/{type}/{name}(/{version})``, ``GET /v1/transit/backup/{name}``,
``POST /v1/transit/restore(/{name})``.

As in Vault, only an ``exportable`` key's material leaves, and only as ``encryption-key`` here (an AES key's
only kind: Keystream's HMAC keys are derived from the material, :mod:`app.formats.mac`, so ``hmac-key`` is
refused rather than answered with something Vault would not give). The ``admin`` scope is needed, as on the
native ``/v1/keys/{name}/export``; the answer is ``Cache-Control: no-store`` and the audit record names the
key and a single version asked for, never the material.

A backup needs ``exportable`` and ``allow_plaintext_backup`` both, as Vault requires, and is Keystream's
wrapped blob (:mod:`app.keystore.backup`), not Vault's plaintext JSON: it restores only into a Keystream
keystore holding its master key generation, and only under the key's own name (a ``name`` in the path must be
that one). Restore answers 204, as Vault; ``force`` replaces an existing key.
"""

from __future__ import annotations

from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Request, Response, status
from pydantic import Field

from app.api import paths
from app.api.deps import AdminDep, StateDep
from app.api.middleware.audit import note
from app.api.vault import TransitModel, VaultJsonRoute, transit_errors, vault_answer, vault_write
from app.errors import BadRequestError
from app.keystore.backup import backup_name
from app.services.key_export import exported
from app.services.transit import transit_type

router = APIRouter(route_class=VaultJsonRoute, tags=["transit"])

#: The export types Vault names, and which of them an AES key has here.
EXPORT_TYPES = ("encryption-key", "signing-key", "hmac-key", "public-key", "certificate-chain")
SERVED_EXPORT_TYPE = "encryption-key"


async def _export(
    export_type: str, name: str, version: str | None, principal: AdminDep, state: StateDep, request: Request
) -> dict[str, Any]:
    if export_type not in EXPORT_TYPES:
        raise BadRequestError(f"invalid export type: {export_type[:40]}")
    if export_type != SERVED_EXPORT_TYPE:
        raise BadRequestError(f"{export_type} is not exported by Keystream: only {SERVED_EXPORT_TYPE}")
    principal.require("admin", name)
    info, keys = await to_thread.run_sync(exported, state.keystore, name, version)
    if len(keys) == 1:
        note(request.scope, key_version=int(next(iter(keys))))
    return vault_answer({"name": info.name, "type": transit_type(info), "keys": keys})


@router.get(paths.TRANSIT_EXPORT, responses=transit_errors(400, 403))
async def export_key(
    export_type: str, name: str, principal: AdminDep, state: StateDep, request: Request, response: Response
) -> Any:
    """Every remaining version's material of an ``exportable`` key, base64."""
    response.headers["Cache-Control"] = "no-store"
    return await _export(export_type, name, None, principal, state, request)


@router.get(paths.TRANSIT_EXPORT_VERSION, responses=transit_errors(400, 403))
async def export_key_version(
    export_type: str,
    name: str,
    version: str,
    principal: AdminDep,
    state: StateDep,
    request: Request,
    response: Response,
) -> Any:
    """One version's material (a number or ``latest``) of an ``exportable`` key, base64."""
    response.headers["Cache-Control"] = "no-store"
    return await _export(export_type, name, version, principal, state, request)


class TransitRestoreRequest(TransitModel):
    backup: str = Field(min_length=1)
    name: str | None = None
    force: bool = False


@router.get(paths.TRANSIT_BACKUP, responses=transit_errors(400, 403))
async def backup_key(name: str, principal: AdminDep, state: StateDep, response: Response) -> Any:
    """The key's backup blob as ``data.backup`` (``exportable`` and ``allow_plaintext_backup`` needed)."""
    principal.require("admin", name)
    blob = await to_thread.run_sync(lambda: state.keystore.backup_key(name, vault_rule=True))
    response.headers["Cache-Control"] = "no-store"
    return vault_answer({"backup": blob})


async def _restore(
    name: str | None, body: TransitRestoreRequest, principal: AdminDep, state: StateDep
) -> Response:
    wanted = name or body.name
    principal.require("admin", wanted or backup_name(body.backup))
    info = await to_thread.run_sync(lambda: state.keystore.restore_key(body.backup, wanted, force=body.force))
    state.keycache.invalidate(info.name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@vault_write(
    router, paths.TRANSIT_RESTORE, status_code=status.HTTP_204_NO_CONTENT, responses=transit_errors(400, 403)
)
async def restore_key(body: TransitRestoreRequest, principal: AdminDep, state: StateDep) -> Response:
    """Restore the key a backup holds under its own name (204)."""
    return await _restore(None, body, principal, state)


@vault_write(
    router,
    paths.TRANSIT_RESTORE_NAME,
    status_code=status.HTTP_204_NO_CONTENT,
    responses=transit_errors(400, 403),
)
async def restore_key_named(
    name: str, body: TransitRestoreRequest, principal: AdminDep, state: StateDep
) -> Response:
    """As ``restore``; ``name`` must be the key's own (a backup is bound to it)."""
    return await _restore(name, body, principal, state)

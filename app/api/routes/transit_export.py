"""The Transit-compatible API's export: ``GET /v1/transit/export/{type}/{name}(/{version})``, Vault's paths
and answer (``data``: ``name``, ``type``, ``keys`` as ``{"1": base64}``).

As in Vault, only an ``exportable`` key's material leaves, and only as ``encryption-key`` here (an AES key's
only kind: Keystream's HMAC keys are derived from the material, :mod:`app.formats.mac`, so ``hmac-key`` is
refused rather than answered with something Vault would not give). The ``admin`` scope is needed, as on the
native ``/v1/keys/{name}/export``; the answer is ``Cache-Control: no-store`` and the audit record names the
key and a single version asked for, never the material.
"""

from __future__ import annotations

from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Request, Response

from app.api import paths
from app.api.deps import AdminDep, StateDep
from app.api.middleware.audit import note
from app.api.vault import VaultJsonRoute, transit_errors, vault_answer
from app.errors import BadRequestError
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

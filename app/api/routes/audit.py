"""The audit routes, admin only.

* ``POST /v1/audit/hash``: the audit log's ``"hmac-sha256:<hex>"`` of a value, so an operator can search the
  log for a known input (associated data) without the log ever holding it (as Vault's ``sys/audit-hash``).
  Admin only: with the hash of any input, a caller could test guesses against the log's values.
* ``GET /v1/audit/status``: whether this server writes an audit log, and the head of each worker's chain as
  ``audit verify`` prints it, read from the end of each worker's file (not verified). An operator keeps the
  heads to pass to ``audit verify --expect-head`` later, which shows whether lines were cut from the end.
  Admin only: the heads tell how many requests each worker has recorded.
"""

from __future__ import annotations

import os
from typing import Literal

from anyio import to_thread
from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from app.api import paths
from app.api.deps import AdminDep, JsonBody, StateDep
from app.api.openapi import errors
from app.api.params import BASE64_PATTERN, decode_base64
from app.api.strict_json import StrictJsonRoute
from app.audit import STDOUT, chain_head, worker_path, worker_paths
from app.core.config import Settings
from app.errors import SealedError

router = APIRouter(route_class=StrictJsonRoute, tags=["audit"])


class AuditHashRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    input: str = Field(
        description="base64 of the value to hash (e.g. associated data sent as Keystream-Associated-Data)",
        json_schema_extra={"pattern": BASE64_PATTERN},
    )


class AuditHashResponse(BaseModel):
    hash: str = Field(description='"hmac-sha256:<64 hex digits>", as the audit log records the value')


@router.post(
    paths.AUDIT_HASH,
    dependencies=[JsonBody],
    response_model=AuditHashResponse,
    responses=errors(403, 415, 422),
)
async def audit_hash(body: AuditHashRequest, admin: AdminDep, state: StateDep) -> dict[str, str]:
    """The audit log's HMAC of ``input`` under this service's audit hash key (derived from the master key)."""
    value = decode_base64("input", body.input)
    keys = state.audit_keys
    if keys is None:  # sealed a moment ago (the sealed gate answers before this route otherwise)
        raise SealedError("sealed: the audit keys are under the master key")
    return {"hash": keys.hash(value)}


class AuditChainHead(BaseModel):
    file: str | None = Field(
        description="the worker's file name, without its directory (null: standard output, this worker)"
    )
    head: str | None = Field(
        description='"<chain>:<records>:<hmac>" as `audit verify` prints it (null: no record yet)'
    )


class AuditStatusResponse(BaseModel):
    enabled: bool = Field(description="whether this server writes an audit log (KEYSTREAM_AUDIT_LOG)")
    destination: Literal["file", "stdout"] | None = Field(description="where it writes (null: off)")
    heads: list[AuditChainHead] = Field(
        description="each worker's chain head on a file log; on stdout this worker's alone (the others' "
        "lines are in the same stream)"
    )


def _file_heads(settings: Settings) -> list[AuditChainHead]:
    """Each worker file's chain head, read from the files (blocking: run in a thread)."""
    assert settings.audit_log is not None
    # A supervised worker writes PATH.w<index> (each of the supervisor's workers one); a lone process PATH.
    if settings.worker_index is None:
        files = [worker_path(settings.audit_log, None)]
    else:
        files = worker_paths(settings.audit_log, settings.workers)
    heads = []
    for path in files:
        try:
            link = chain_head(path)
        except FileNotFoundError:
            continue  # a worker that has not opened its file yet
        heads.append(AuditChainHead(file=os.path.basename(path), head=None if link is None else link.head))
    return heads


@router.get(paths.AUDIT_STATUS, response_model=AuditStatusResponse, responses=errors(403))
async def audit_status(admin: AdminDep, state: StateDep) -> AuditStatusResponse:
    """Whether the audit log is on, and each worker's chain head (the answer comes before this request's own
    record is written, so the heads are those before it)."""
    settings = state.settings
    if settings.audit_log is None:
        return AuditStatusResponse(enabled=False, destination=None, heads=[])
    if settings.audit_log == STDOUT:
        link = None if state.audit is None else state.audit.link
        head = None if link is None or link.seq == 0 else link.head
        return AuditStatusResponse(
            enabled=True, destination="stdout", heads=[AuditChainHead(file=None, head=head)]
        )
    heads = await to_thread.run_sync(_file_heads, settings)
    return AuditStatusResponse(enabled=True, destination="file", heads=heads)

"""``POST /v1/audit/hash``: the audit log's ``"hmac-sha256:<hex>"`` of a value, so an operator can search the
log for a known input (associated data) without the log ever holding it (as Vault's ``sys/audit-hash``).

Admin only: with the hash of any input, a caller could test guesses against the log's values.
"""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field

from app.api import paths
from app.api.deps import AdminDep, JsonBody, StateDep
from app.api.openapi import errors
from app.api.params import BASE64_PATTERN, decode_base64
from app.api.strict_json import StrictJsonRoute
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

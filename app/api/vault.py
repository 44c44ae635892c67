"""What the Transit-compatible API's routes share: Vault's answer envelope, its request-body rules and the
OpenAPI entries of its errors (whose shape :mod:`app.api.errors` writes).
"""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict


def transit_errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """``responses=`` entries for a Transit route's own error statuses (Vault's ``{"errors": [...]}``)."""
    return {code: {"description": "an error in Vault's shape"} for code in statuses}


def vault_answer(data: dict[str, Any] | None) -> dict[str, Any]:
    """Vault's response envelope around ``data``."""
    return {
        "request_id": str(uuid.uuid4()),
        "lease_id": "",
        "renewable": False,
        "lease_duration": 0,
        "data": data,
        "wrap_info": None,
        "warnings": None,
        "auth": None,
        "mount_type": "transit",
    }


class TransitModel(BaseModel):
    """A Transit request body: fields Keystream does not know are ignored, as Vault ignores them (hvac
    sends some as ``null``); the known ones must have their JSON type (Vault would also read ``"1"`` as 1:
    its clients send numbers)."""

    model_config = ConfigDict(extra="ignore", strict=True)

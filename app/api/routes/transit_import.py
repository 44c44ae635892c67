"""The Transit-compatible API's wrapped import (Vault's "bring your own key"): ``GET
/v1/transit/wrapping_key`` and ``POST``/``PUT /v1/transit/keys/{name}/import`` and ``/import_version``.

Vault's shapes: the wrapping key answers ``{"data": {"public_key": "<PEM>"}}`` (RSA-4096, the native
API's key); an import takes ``ciphertext`` (Vault's layout, :mod:`app.formats.wrapped_import`) and
``hash_function`` (``SHA1`` ... ``SHA512``, any case; default ``SHA256``), ``import`` also ``type`` and the
options Transit's key create takes, and both answer 204. As Vault: ``import`` refuses an existing key and any
``convergent_encryption`` field, ``import_version`` only adds to a key that was imported, and
``auto_rotate_period`` needs ``allow_rotation``. Unlike Vault, every such refusal is a 400, never a 500.

Gated as the native import: ``KEYSTREAM_ALLOW_KEY_IMPORT=true`` (403 otherwise) and the ``admin`` scope with
a key pattern matching the name. A key imported here is an ordinary key of scheme ``gcm``, as one created
here.
"""

from __future__ import annotations

from typing import Any, Literal

from anyio import to_thread
from fastapi import APIRouter, Response, status
from pydantic import Field

from app.api import paths
from app.api.deps import AdminDep, StateDep
from app.api.params import AutoRotatePeriod
from app.api.vault import TransitModel, VaultJsonRoute, transit_errors, vault_answer, vault_write
from app.errors import BadRequestError, KeyExistsError
from app.keystore import DEFAULT_SEGMENT_SIZE, KeyOptions
from app.keystore.rotation import check_auto_rotate_period
from app.services.transit import KEY_TYPES, TRANSIT_SCHEME, transit_type
from app.services.wrapped_import import (
    DEFAULT_HASH_FUNCTION,
    MAX_CIPHERTEXT_BASE64,
    require_import_enabled,
    unwrap_imported_material,
    wrapping_public_key,
)
from app.state import ServiceState

router = APIRouter(route_class=VaultJsonRoute, tags=["transit"])


class TransitImportVersionRequest(TransitModel):
    ciphertext: str = Field(
        min_length=1,
        max_length=MAX_CIPHERTEXT_BASE64,
        repr=False,
        description="base64: RSA-OAEP of a random 32-byte AES key under the wrapping key, then the AES key "
        "wrap with padding of the material under that AES key",
    )
    hash_function: str = Field(
        default=DEFAULT_HASH_FUNCTION,
        max_length=16,
        description="OAEP's hash: SHA1, SHA224, SHA256, SHA384, SHA512",
    )


class TransitImportRequest(TransitImportVersionRequest):
    type: Literal["aes256-gcm96", "aes128-gcm96"] = "aes256-gcm96"
    derived: bool = False
    exportable: bool = False
    allow_plaintext_backup: bool = False
    allow_rotation: bool = False
    auto_rotate_period: AutoRotatePeriod = 0
    convergent_encryption: Any = Field(default=None, description="Refused on import, as by Vault.")


async def _material(body: TransitImportVersionRequest, state: ServiceState) -> memoryview:
    return await to_thread.run_sync(
        unwrap_imported_material, state.keystore, body.ciphertext, body.hash_function.upper()
    )


@router.get(paths.TRANSIT_WRAPPING_KEY, responses=transit_errors(403))
async def read_wrapping_key(principal: AdminDep, state: StateDep) -> dict[str, Any]:
    """The wrapping key's public half (PEM), as Vault's ``transit/wrapping_key``."""
    principal.require("admin")
    require_import_enabled(state.settings.allow_key_import)
    return vault_answer({"public_key": await to_thread.run_sync(wrapping_public_key, state.keystore)})


@vault_write(
    router,
    paths.TRANSIT_KEY_IMPORT,
    status_code=status.HTTP_204_NO_CONTENT,
    responses=transit_errors(400, 403),
)
async def import_key(name: str, body: TransitImportRequest, principal: AdminDep, state: StateDep) -> Response:
    """Import wrapped material as the new key ``name`` (204)."""
    principal.require("admin", name)
    require_import_enabled(state.settings.allow_key_import)
    if "convergent_encryption" in body.model_fields_set:
        raise BadRequestError("import cannot be used on keys with convergent encryption enabled")
    rotates = check_auto_rotate_period(body.auto_rotate_period, state.keystore.auto_rotate_min_period) > 0
    if rotates and not body.allow_rotation:
        raise BadRequestError("allow_rotation must be set to true if auto-rotation is enabled")
    material = await _material(body, state)
    options = KeyOptions(
        derived=body.derived, exportable=body.exportable, allow_plaintext_backup=body.allow_plaintext_backup
    )
    try:
        await to_thread.run_sync(
            lambda: state.keystore.import_key(
                name,
                material,
                DEFAULT_SEGMENT_SIZE,
                False,
                scheme=TRANSIT_SCHEME,
                auto_rotate_period=body.auto_rotate_period,
                key_type=KEY_TYPES[body.type],
                options=options,
            )
        )
    except KeyExistsError:
        raise BadRequestError(
            "the import path cannot be used with an existing key; use import-version to rotate an existing "
            "imported key"
        ) from None
    state.keycache.invalidate(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@vault_write(
    router,
    paths.TRANSIT_KEY_IMPORT_VERSION,
    status_code=status.HTTP_204_NO_CONTENT,
    responses=transit_errors(400, 403, 404),
)
async def import_key_version(
    name: str, body: TransitImportVersionRequest, principal: AdminDep, state: StateDep
) -> Response:
    """Add wrapped material as the latest version of the imported key ``name`` (204)."""
    principal.require("admin", name)
    require_import_enabled(state.settings.allow_key_import)
    info = await to_thread.run_sync(state.keystore.get_key, name)
    transit_type(info)  # a key this API cannot serve (aes256-siv) is refused before any change
    if not info.imported:
        raise BadRequestError("the import_version endpoint can only be used with an imported key")
    if info.options.convergent_encryption:
        raise BadRequestError("import_version cannot be used on keys with convergent encryption enabled")
    material = await _material(body, state)
    await to_thread.run_sync(state.keystore.import_key_version, name, material)
    state.keycache.invalidate(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

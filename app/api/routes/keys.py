"""``/v1/keys``: create, import, list, read, rotate, import a version, trim, update and delete keys (metadata
only, never material).

Keys may rotate automatically (``auto_rotate_period``, see :mod:`app.services.auto_rotate`) and carry Vault
Transit's options (``derived``, ``convergent_encryption``: set at creation; ``exportable``,
``allow_plaintext_backup``: at creation or later, never turned off). Key management
needs the ``admin`` scope and a key pattern matching the name; reading metadata needs any
scope and a matching pattern. Every change invalidates the key cache entry of that key.
"""

from __future__ import annotations

from typing import Any, Literal

from anyio import to_thread
from fastapi import APIRouter, Response, status
from pydantic import BaseModel, ConfigDict, Field

from app.api import paths
from app.api.deps import AdminDep, JsonBody, PrincipalDep, StateDep
from app.api.openapi import errors
from app.api.params import AutoRotatePeriod
from app.api.strict_json import StrictJsonRoute
from app.core.master_key_format import decode_secret_base64
from app.core.schemes import DEFAULT_SCHEME, Scheme
from app.errors import BadRequestError, ForbiddenError
from app.keystore import (
    DEFAULT_SEGMENT_SIZE,
    KEY_NAME_PATTERN,
    MAX_SEGMENT_SIZE,
    MIN_SEGMENT_SIZE,
    KeyOptions,
)
from app.services.deterministic import DETERMINISTIC_KEY_TYPE
from app.services.wrapped_import import (
    DEFAULT_HASH_FUNCTION,
    MAX_CIPHERTEXT_BASE64,
    HashFunction,
    require_import_enabled,
    unwrap_imported_material,
    wrapping_public_key,
)
from app.state import ServiceState

router = APIRouter(route_class=StrictJsonRoute, tags=["keys"])

#: Base64 of 16, 24, 32 or 64 bytes (what import accepts; documented in the schema, checked by decoding).
KEY_MATERIAL_BASE64 = r"^(?:[A-Za-z0-9+/]{22}==|[A-Za-z0-9+/]{32}|[A-Za-z0-9+/]{43}=|[A-Za-z0-9+/]{86}==)$"


_SCHEME_DESCRIPTION = (
    "The sealed format's per-segment primitive, fixed for the key's life: ctr-hmac (Tink "
    "AesCtrHmacStreaming) or gcm (Tink AesGcmHkdfStreaming)."
)


class KeyOptionsFields(BaseModel):
    """The options a key is created with (Vault Transit's names)."""

    derived: bool = Field(
        default=False,
        description="Every operation then needs a context and works under a per-context key derived from "
        "the version (HKDF-SHA256); fixed for the key's life.",
    )
    convergent_encryption: bool = Field(
        default=False,
        description="Only with derived: Transit encryptions of one plaintext under one context are equal "
        "(Vault's convergent encryption); fixed for the key's life.",
    )
    exportable: bool = Field(
        default=False, description="Versions' material may be exported; cannot be turned off once on."
    )
    allow_plaintext_backup: bool = Field(
        default=False, description="The key may be backed up; cannot be turned off once on."
    )

    def options(self) -> KeyOptions:
        """The fields as the keystore takes them."""
        return KeyOptions(
            derived=self.derived,
            convergent_encryption=self.convergent_encryption,
            exportable=self.exportable,
            allow_plaintext_backup=self.allow_plaintext_backup,
        )


class CreateKeyRequest(KeyOptionsFields):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(
        min_length=1, max_length=128, json_schema_extra={"pattern": f"^{KEY_NAME_PATTERN.pattern}$"}
    )
    type: Literal["aes128", "aes192", "aes256", "aes256-siv"] = Field(
        default="aes256",
        description="aes128, aes192, aes256: the sealed format (streaming and batch routes); aes256-siv: "
        "deterministic AES-SIV (Tink's DeterministicAead) through the batch routes only, where equal "
        "plaintexts with equal associated data give equal ciphertexts under one version.",
    )
    scheme: Scheme = Field(default=DEFAULT_SCHEME, description=_SCHEME_DESCRIPTION)
    segment_size: int = Field(default=DEFAULT_SEGMENT_SIZE, ge=MIN_SEGMENT_SIZE, le=MAX_SEGMENT_SIZE)
    deletion_allowed: bool = False
    auto_rotate_period: AutoRotatePeriod = 0


class ImportMaterialFields(BaseModel):
    """The material an import carries: in clear (``key``) or wrapped under the service's wrapping key
    (``ciphertext``, with the ``hash_function`` its RSA-OAEP used); exactly one of the two."""

    key: str | None = Field(
        default=None,
        min_length=1,
        max_length=88,
        repr=False,
        description="Base64 of the material: as long as the key's type (aes128: 16 bytes, aes192: 24, "
        "aes256: 32, aes256-siv: 64). Give this or ciphertext.",
        json_schema_extra={"pattern": KEY_MATERIAL_BASE64},
    )
    ciphertext: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_CIPHERTEXT_BASE64,
        repr=False,
        description=f"The material wrapped under GET {paths.WRAPPING_KEY}'s public key, base64: the RSA-OAEP "
        "block (512 bytes) of a random 32-byte AES key, then the AES key wrap with padding (RFC 5649) of "
        "the material under that AES key (Vault's BYOK layout). Give this or key.",
    )
    hash_function: HashFunction = Field(
        default=DEFAULT_HASH_FUNCTION,
        description="The hash RSA-OAEP (and its MGF1) used to wrap the AES key; only with ciphertext.",
    )


class ImportKeyRequest(KeyOptionsFields, ImportMaterialFields):
    model_config = ConfigDict(extra="forbid", strict=True, hide_input_in_errors=True)

    type: Literal["aes128", "aes192", "aes256", "aes256-siv"] | None = Field(
        default=None,
        description="The key's type; the material must be as long as it says. Default: the AES type of the "
        "material's length (16, 24 or 32 bytes); 64 bytes are imported as aes256-siv only when asked.",
    )
    scheme: Scheme = Field(default=DEFAULT_SCHEME, description=_SCHEME_DESCRIPTION)
    segment_size: int = Field(default=DEFAULT_SEGMENT_SIZE, ge=MIN_SEGMENT_SIZE, le=MAX_SEGMENT_SIZE)
    deletion_allowed: bool = False
    auto_rotate_period: AutoRotatePeriod = 0


class ImportVersionRequest(ImportMaterialFields):
    model_config = ConfigDict(extra="forbid", strict=True, hide_input_in_errors=True)


class TrimRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    min_available_version: int = Field(
        ge=1,
        description="Versions below this are deleted for good; at most the key's min_decryption_version.",
    )


class UpdateKeyRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    min_decryption_version: int | None = Field(default=None, ge=1)
    deletion_allowed: bool | None = None
    auto_rotate_period: AutoRotatePeriod | None = None
    exportable: bool | None = Field(default=None, description="May be turned on, never off.")
    allow_plaintext_backup: bool | None = Field(default=None, description="May be turned on, never off.")
    scheme: Scheme | None = Field(
        default=None,
        description="Cannot change: a value other than the key's scheme is refused with 400 "
        "(create a new key instead).",
    )


@router.post(
    paths.KEYS,
    status_code=status.HTTP_201_CREATED,
    dependencies=[JsonBody],
    responses=errors(403, 409, 415, 422),
)
async def create_key(body: CreateKeyRequest, principal: AdminDep, state: StateDep) -> dict[str, Any]:
    """Create a key with a random version 1."""
    principal.require("admin", body.name)
    _refuse_sealed_fields(body, body.type)
    info = await to_thread.run_sync(
        lambda: state.keystore.create_key(
            body.name,
            body.type,
            body.segment_size,
            body.deletion_allowed,
            scheme=body.scheme,
            auto_rotate_period=body.auto_rotate_period,
            options=body.options(),
        )
    )
    state.keycache.invalidate(body.name)
    return info.to_json()


@router.post(
    paths.KEY_IMPORT,
    status_code=status.HTTP_201_CREATED,
    dependencies=[JsonBody],
    responses=errors(403, 409, 415, 422),
)
async def import_key(
    name: str, body: ImportKeyRequest, principal: AdminDep, state: StateDep
) -> dict[str, Any]:
    """Import existing key material (base64 of 16, 24 or 32 bytes, or 64 with ``type`` aes256-siv) as a new
    key."""
    principal.require("admin", name)
    require_import_enabled(state.settings.allow_key_import)
    _refuse_sealed_fields(body, body.type)
    material = await _import_material(body, state)
    info = await to_thread.run_sync(
        lambda: state.keystore.import_key(
            name,
            material,
            body.segment_size,
            body.deletion_allowed,
            scheme=body.scheme,
            auto_rotate_period=body.auto_rotate_period,
            key_type=body.type,
            options=body.options(),
        )
    )
    state.keycache.invalidate(name)
    return info.to_json()


def _refuse_sealed_fields(body: BaseModel, key_type: str | None) -> None:
    """Raise when a request for an ``aes256-siv`` key sets the sealed format's ``scheme`` or
    ``segment_size``: they would be stored and shown, and mean nothing for it.

    Raises:
        BadRequestError: it does (the message names the fields).
    """
    sealed_only = body.model_fields_set & {"scheme", "segment_size"}
    if key_type == DETERMINISTIC_KEY_TYPE and sealed_only:
        raise BadRequestError(
            f"an {DETERMINISTIC_KEY_TYPE} key (deterministic AES-SIV) takes no scheme or segment_size, the "
            f"sealed format's settings; got {' and '.join(sorted(sealed_only))}"
        )


async def _import_material(body: ImportMaterialFields, state: ServiceState) -> memoryview:
    """The material ``body`` carries, in locked memory: ``key`` decoded, or ``ciphertext`` unwrapped.

    Raises:
        BadRequestError: neither or both given; ``hash_function`` without ``ciphertext``; bad base64; a
            ciphertext that does not open (:class:`~app.formats.wrapped_import.WrappedImportError`).
    """
    if (body.key is None) == (body.ciphertext is None):
        raise BadRequestError(
            "give the material as exactly one of key (base64) or ciphertext (wrapped under the public key "
            f"from GET {paths.WRAPPING_KEY})"
        )
    if body.ciphertext is None:
        if "hash_function" in body.model_fields_set:
            raise BadRequestError("hash_function applies only to a wrapped ciphertext, not to key")
        assert body.key is not None
        return _decode_material(body.key)
    return await to_thread.run_sync(
        unwrap_imported_material, state.keystore, body.ciphertext, body.hash_function
    )


@router.get(paths.WRAPPING_KEY, responses=errors(403))
async def wrapping_key(principal: AdminDep, state: StateDep) -> dict[str, str]:
    """The public half of the service's RSA-4096 wrapping key (PEM), for wrapped import's ``ciphertext``.

    Made on the first call (a second or so) and the same for every worker and replica; its private half is
    kept under the seal. Gated as import is: ``KEYSTREAM_ALLOW_KEY_IMPORT=true`` and the ``admin`` scope.
    """
    principal.require("admin")
    require_import_enabled(state.settings.allow_key_import)
    return {"public_key": await to_thread.run_sync(wrapping_public_key, state.keystore)}


def _decode_material(text: str) -> memoryview:
    """Imported key material decoded straight into locked memory (no ``bytes`` copy of it is made here or
    in the keystore, which wraps it in place); zeroed once the request drops it."""
    try:
        return decode_secret_base64(text)
    except ValueError:
        raise BadRequestError("key must be base64 of 16, 24, 32 or 64 bytes") from None


@router.get(paths.KEYS)
async def list_keys(principal: PrincipalDep, state: StateDep) -> dict[str, Any]:
    """Metadata of every key the token's patterns match."""
    keys = await to_thread.run_sync(state.keystore.list_keys)
    return {"keys": [info.to_json() for info in keys if principal.matches_key(info.name)]}


@router.get(paths.KEY, responses=errors(403, 404))
async def get_key(name: str, principal: PrincipalDep, state: StateDep) -> dict[str, Any]:
    """Metadata of one key (any scope, matching key pattern)."""
    if not principal.matches_key(name):
        raise ForbiddenError("this token may not use that key (no key pattern matches)")
    info = await to_thread.run_sync(state.keystore.get_key, name)
    return info.to_json()


@router.post(paths.KEY_ROTATE, responses=errors(403, 404))
async def rotate_key(name: str, principal: AdminDep, state: StateDep) -> dict[str, Any]:
    """Add a new version; it encrypts from now on, older versions keep decrypting."""
    principal.require("admin", name)
    info = await to_thread.run_sync(state.keystore.rotate_key, name)
    state.keycache.invalidate(name)
    return info.to_json()


@router.post(paths.KEY_IMPORT_VERSION, dependencies=[JsonBody], responses=errors(403, 404, 415, 422))
async def import_key_version(
    name: str, body: ImportVersionRequest, principal: AdminDep, state: StateDep
) -> dict[str, Any]:
    """Add a version with caller-supplied material (Vault's ``import_version``); it becomes the latest.

    Needs key import enabled, as ``/import``; the material's length must match the key's type. The key's
    ``imported`` flag becomes true.
    """
    principal.require("admin", name)
    require_import_enabled(state.settings.allow_key_import)
    material = await _import_material(body, state)
    info = await to_thread.run_sync(state.keystore.import_key_version, name, material)
    state.keycache.invalidate(name)
    return info.to_json()


@router.post(paths.KEY_TRIM, dependencies=[JsonBody], responses=errors(403, 404, 415, 422))
async def trim_key(name: str, body: TrimRequest, principal: AdminDep, state: StateDep) -> dict[str, Any]:
    """Delete every version below ``min_available_version`` for good (Vault's ``trim``); idempotent.

    ``min_available_version`` may not exceed the key's ``min_decryption_version`` (400), so only versions
    that no longer decrypt are deleted.
    """
    principal.require("admin", name)
    info = await to_thread.run_sync(state.keystore.trim_key, name, body.min_available_version)
    state.keycache.invalidate(name)
    return info.to_json()


@router.patch(paths.KEY, dependencies=[JsonBody], responses=errors(403, 404, 415, 422))
async def update_key(
    name: str, body: UpdateKeyRequest, principal: AdminDep, state: StateDep
) -> dict[str, Any]:
    """Change ``min_decryption_version``, ``deletion_allowed`` and/or ``auto_rotate_period``; turn
    ``exportable`` or ``allow_plaintext_backup`` on (400 to turn either off once on).

    ``scheme`` cannot change. A new ``auto_rotate_period`` counts from the latest version's creation: a key
    whose latest version is already older than the period rotates at the next check.
    """
    principal.require("admin", name)
    if body.scheme is not None:
        current = (await to_thread.run_sync(state.keystore.get_key, name)).scheme
        if body.scheme != current:
            raise BadRequestError(
                f"the scheme of key {name!r} is {current} and cannot change (its material would key two "
                f"primitives): create a new key with scheme {body.scheme}"
            )
    info = await to_thread.run_sync(
        lambda: state.keystore.update_key(
            name,
            min_decryption_version=body.min_decryption_version,
            deletion_allowed=body.deletion_allowed,
            auto_rotate_period=body.auto_rotate_period,
            exportable=body.exportable,
            allow_plaintext_backup=body.allow_plaintext_backup,
        )
    )
    state.keycache.invalidate(name)
    return info.to_json()


@router.delete(paths.KEY, status_code=status.HTTP_204_NO_CONTENT, responses=errors(403, 404, 409))
async def delete_key(name: str, principal: AdminDep, state: StateDep) -> Response:
    """Delete a key and every version (409 unless ``deletion_allowed``)."""
    principal.require("admin", name)
    await to_thread.run_sync(state.keystore.delete_key, name)
    state.keycache.invalidate(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)

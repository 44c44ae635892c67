"""The Transit-compatible API's key management, random bytes and hashes (Vault's paths and shapes).

``POST/GET/DELETE /v1/transit/keys/{name}``, ``GET /v1/transit/keys?list=true`` (or the ``LIST`` method),
``POST /v1/transit/keys/{name}/config``, ``/rotate`` and ``/trim``, ``POST /v1/transit/random(/{bytes})`` and
``/hash(/{algorithm})``. Answers are Vault's envelope with the result under ``data``
(:func:`vault_answer`); errors are ``{"errors": [...]}`` (:mod:`app.api.errors`). The keys are Keystream's
own: a key made here is an ordinary key of type ``aes256`` or ``aes128`` (scheme ``gcm``), usable through
the native API too, and every native AES key reads here as ``<type>-gcm96``. An ``aes256-siv`` key
(deterministic AES-SIV) has no Transit type: reading, configuring or rotating one here answers 400 saying so
(before any change), and none can be created here.

Key management needs the ``admin`` scope, reading a key any scope (as ``GET /v1/keys/{name}``), random and
hash any valid token; every key operation needs a key pattern matching the name. ``derived`` and
``convergent_encryption`` are set at creation, ``exportable`` and ``allow_plaintext_backup`` at creation or
later by ``config`` (never turned off again), as in Vault; a non-zero ``min_encryption_version`` is refused
with 400 rather than ignored.
"""

from __future__ import annotations

import secrets
from typing import Annotated, Any, Literal

from anyio import to_thread
from fastapi import APIRouter, Path, Request, Response, status
from pydantic import Field
from starlette.exceptions import HTTPException

from app.api import paths
from app.api.deps import AdminDep, PrincipalDep, StateDep
from app.api.params import HASHES, MAX_RANDOM_BYTES, AutoRotatePeriod, Encoding, HashAlgorithm, decode_base64
from app.api.vault import TransitModel, VaultJsonRoute, transit_errors, vault_answer, vault_write
from app.core import base64_codec
from app.errors import BadRequestError, ForbiddenError, KeyExistsError, KeyNotFoundError
from app.keystore import DEFAULT_SEGMENT_SIZE, KeyInfo, KeyOptions
from app.services.transit import KEY_TYPES, TRANSIT_SCHEME, transit_type
from app.state import ServiceState

router = APIRouter(route_class=VaultJsonRoute, tags=["transit"])


class TransitCreateKeyRequest(TransitModel):
    type: Literal["aes256-gcm96", "aes128-gcm96"] = "aes256-gcm96"
    derived: bool = False
    convergent_encryption: bool = False
    exportable: bool = False
    allow_plaintext_backup: bool = False
    auto_rotate_period: AutoRotatePeriod = 0


class TransitConfigRequest(TransitModel):
    min_decryption_version: int | None = Field(default=None, ge=0)
    min_encryption_version: int | None = Field(default=None, ge=0)
    deletion_allowed: bool | None = None
    exportable: bool | None = None
    allow_plaintext_backup: bool | None = None
    auto_rotate_period: AutoRotatePeriod | None = None


class TransitTrimRequest(TransitModel):
    min_available_version: int = Field(
        ge=1, description="Versions below this are deleted for good; at most min_decryption_version."
    )


class TransitRandomRequest(TransitModel):
    bytes: int = Field(default=32, ge=1, le=MAX_RANDOM_BYTES)
    format: Encoding = "base64"


class TransitHashRequest(TransitModel):
    input: str = Field(max_length=1 << 24, description="base64 of the data")
    algorithm: HashAlgorithm = "sha2-256"
    format: Encoding = "hex"


#: The byte count in ``/random/{bytes}``.
UrlBytes = Annotated[int, Path(ge=1, le=MAX_RANDOM_BYTES)]


def _refuse_unsupported(**options: bool) -> None:
    for option, value in options.items():
        if value:
            raise BadRequestError(f"{option} is not supported by Keystream's Transit API")


#: Vault's name of the derivation a derived key uses (:mod:`app.formats.derivation`).
KDF = "hkdf_sha256"
#: Vault's convergent encryption version this API implements (the nonce an HMAC of the plaintext).
CONVERGENT_VERSION = 3


def key_data(info: KeyInfo) -> dict[str, Any]:
    """Vault's key information for ``info`` (``keys``: each version's creation time in Unix seconds)."""
    versions = [version.version for version in info.versions]
    options = info.options
    derivation: dict[str, Any] = {}
    if options.derived:
        derivation = {"kdf": KDF, "convergent_encryption": options.convergent_encryption}
        if options.convergent_encryption:
            derivation["convergent_encryption_version"] = CONVERGENT_VERSION
    return {
        "name": info.name,
        "type": transit_type(info),
        "keys": {str(v.version): int(v.created_at.timestamp()) for v in info.versions},
        "latest_version": info.latest_version,
        "min_decryption_version": info.min_decryption_version,
        "min_encryption_version": 0,
        "min_available_version": min(versions) if versions and min(versions) > 1 else 0,
        "deletion_allowed": info.deletion_allowed,
        "derived": options.derived,
        **derivation,
        "exportable": options.exportable,
        "allow_plaintext_backup": options.allow_plaintext_backup,
        "imported_key": info.imported,
        "auto_rotate_period": info.auto_rotate_period,
        "supports_encryption": True,
        "supports_decryption": True,
        "supports_derivation": True,
        "supports_signing": False,
        "soft_deleted": False,
    }


@vault_write(router, paths.TRANSIT_KEY, responses=transit_errors(403))
async def create_key(
    name: str, principal: AdminDep, state: StateDep, body: TransitCreateKeyRequest | None = None
) -> Any:
    """Create key ``name`` (an existing key is left as it is and read back, as Vault does); the body is
    optional, as in Vault."""
    principal.require("admin", name)
    body = body or TransitCreateKeyRequest()
    options = KeyOptions(
        derived=body.derived,
        convergent_encryption=body.convergent_encryption,
        exportable=body.exportable,
        allow_plaintext_backup=body.allow_plaintext_backup,
    )
    try:
        info = await to_thread.run_sync(
            lambda: state.keystore.create_key(
                name,
                KEY_TYPES[body.type],
                DEFAULT_SEGMENT_SIZE,
                False,
                scheme=TRANSIT_SCHEME,
                auto_rotate_period=body.auto_rotate_period,
                options=options,
            )
        )
    except KeyExistsError:
        info = await to_thread.run_sync(state.keystore.get_key, name)
    state.keycache.invalidate(name)
    return vault_answer(key_data(info))


@router.get(paths.TRANSIT_KEY, responses=transit_errors(403, 404))
async def read_key(name: str, principal: PrincipalDep, state: StateDep) -> Any:
    """Key information (any scope, matching key pattern); 404 with no message for an unknown key."""
    if not principal.matches_key(name):
        raise ForbiddenError("this token may not use that key (no key pattern matches)")
    try:
        info = await to_thread.run_sync(state.keystore.get_key, name)
    except KeyNotFoundError:
        raise HTTPException(status.HTTP_404_NOT_FOUND) from None
    return vault_answer(key_data(info))


async def _list(principal: PrincipalDep, state: StateDep) -> Any:
    keys = await to_thread.run_sync(state.keystore.list_keys)
    names = [info.name for info in keys if principal.matches_key(info.name)]
    if not names:
        raise HTTPException(status.HTTP_404_NOT_FOUND)  # Vault answers an empty list with 404
    return vault_answer({"keys": names})


@router.get(paths.TRANSIT_KEYS, responses=transit_errors(404, 405))
async def list_keys(principal: PrincipalDep, state: StateDep, request: Request) -> Any:
    """The names of the keys the token's patterns match (``?list=true``, as Vault's clients send a list);
    404 when there are none, as Vault answers."""
    if request.query_params.get("list", "").lower() not in ("true", "1"):
        raise HTTPException(status.HTTP_405_METHOD_NOT_ALLOWED, "unsupported operation (add ?list=true)")
    return await _list(principal, state)


@router.api_route(paths.TRANSIT_KEYS, methods=["LIST"], include_in_schema=False)
async def list_keys_method(principal: PrincipalDep, state: StateDep) -> Any:
    """``LIST /v1/transit/keys``: the same answer as ``GET ?list=true``."""
    return await _list(principal, state)


@router.delete(paths.TRANSIT_KEY, status_code=status.HTTP_204_NO_CONTENT, responses=transit_errors(403))
async def delete_key(name: str, principal: AdminDep, state: StateDep) -> Response:
    """Delete a key and every version (400 unless ``deletion_allowed``, as Vault answers)."""
    principal.require("admin", name)
    await to_thread.run_sync(state.keystore.delete_key, name)
    state.keycache.invalidate(name)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@vault_write(router, paths.TRANSIT_KEY_CONFIG, responses=transit_errors(403))
async def configure_key(name: str, body: TransitConfigRequest, principal: AdminDep, state: StateDep) -> Any:
    """Change ``min_decryption_version`` (0 reads as 1), ``deletion_allowed``, ``auto_rotate_period``, and
    turn ``exportable`` or ``allow_plaintext_backup`` on (400 to turn either off once on, as Vault)."""
    principal.require("admin", name)
    await _require_transit_key(state, name)
    _refuse_unsupported(min_encryption_version=bool(body.min_encryption_version))
    minimum = body.min_decryption_version
    info = await to_thread.run_sync(
        lambda: state.keystore.update_key(
            name,
            min_decryption_version=None if minimum is None else max(minimum, 1),
            deletion_allowed=body.deletion_allowed,
            auto_rotate_period=body.auto_rotate_period,
            exportable=body.exportable,
            allow_plaintext_backup=body.allow_plaintext_backup,
        )
    )
    state.keycache.invalidate(name)
    return vault_answer(key_data(info))


@vault_write(router, paths.TRANSIT_KEY_ROTATE, responses=transit_errors(403))
async def rotate_key(name: str, principal: AdminDep, state: StateDep) -> Any:
    """Add a new version: it encrypts from now on, older versions keep decrypting."""
    principal.require("admin", name)
    await _require_transit_key(state, name)
    info = await to_thread.run_sync(state.keystore.rotate_key, name)
    state.keycache.invalidate(name)
    return vault_answer(key_data(info))


@vault_write(router, paths.TRANSIT_KEY_TRIM, responses=transit_errors(403))
async def trim_key(name: str, body: TransitTrimRequest, principal: AdminDep, state: StateDep) -> Any:
    """Delete every version below ``min_available_version`` for good, as the native trim does: it may not
    exceed ``min_decryption_version`` (400), so only versions that no longer decrypt go. Answers the key's
    information, as ``config`` and ``rotate`` do."""
    principal.require("admin", name)
    await _require_transit_key(state, name)
    info = await to_thread.run_sync(state.keystore.trim_key, name, body.min_available_version)
    state.keycache.invalidate(name)
    return vault_answer(key_data(info))


async def _require_transit_key(state: ServiceState, name: str) -> None:
    """Nothing when key ``name`` has a Transit type, checked before a change so that a key the Transit API
    cannot show is not changed through it.

    Raises:
        KeyNotFoundError: no such key.
        BadRequestError: an ``aes256-siv`` key (:func:`~app.services.transit.transit_type`).
    """
    transit_type(await to_thread.run_sync(state.keystore.get_key, name))


def _encode(data: bytes, encoding: str) -> str:
    return data.hex() if encoding == "hex" else base64_codec.encode(data)


async def _random(count: int, encoding: str, response: Response) -> Any:
    response.headers["Cache-Control"] = "no-store"
    return vault_answer({"random_bytes": _encode(secrets.token_bytes(count), encoding)})


@vault_write(router, paths.TRANSIT_RANDOM, responses=transit_errors())
async def random(
    principal: PrincipalDep, response: Response, body: TransitRandomRequest | None = None
) -> Any:
    """``bytes`` random bytes from the OS CSPRNG (any valid token; the body is optional)."""
    del principal
    body = body or TransitRandomRequest()
    return await _random(body.bytes, body.format, response)


@vault_write(router, paths.TRANSIT_RANDOM_BYTES, responses=transit_errors())
async def random_count(
    url_bytes: str, body: TransitRandomRequest, principal: PrincipalDep, response: Response
) -> Any:
    """As ``random``, the count from the path (which wins over the body's, as in Vault)."""
    del principal
    if not url_bytes.isdigit() or not 1 <= int(url_bytes) <= MAX_RANDOM_BYTES:
        raise BadRequestError(f"bytes must be a number from 1 to {MAX_RANDOM_BYTES}")
    return await _random(int(url_bytes), body.format, response)


def _hash(body: TransitHashRequest, algorithm: str) -> Any:
    digest = HASHES.get(algorithm)
    if digest is None:
        raise BadRequestError(f"unsupported hash algorithm; one of {', '.join(HASHES)}")
    return vault_answer({"sum": _encode(digest(decode_base64("input", body.input)).digest(), body.format)})


@vault_write(router, paths.TRANSIT_HASH, responses=transit_errors())
async def hash_(body: TransitHashRequest, principal: PrincipalDep) -> Any:
    """The ``algorithm`` digest of ``input`` (hex by default, as Vault's)."""
    del principal
    return _hash(body, body.algorithm)


@vault_write(router, paths.TRANSIT_HASH_ALGORITHM, responses=transit_errors())
async def hash_algorithm(url_algorithm: str, body: TransitHashRequest, principal: PrincipalDep) -> Any:
    """As ``hash``, the algorithm from the path (which wins over the body's)."""
    del principal
    return _hash(body, url_algorithm)

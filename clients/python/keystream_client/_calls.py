"""The JSON requests of the Keystream API as data: method, path and body of each call, built once for the
sync and the async client."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote as _url_quote

import httpx

from keystream_client._models import BatchItem, b64
from keystream_client._wrapping import wrap_for_import


def quote(segment: str) -> str:
    """``segment`` percent-encoded for one URL path segment."""
    return _url_quote(segment, safe="")


@dataclass(frozen=True)
class Call:
    """One JSON request; ``expect_json`` is false for calls answered with an empty body, ``authenticated``
    false for calls that present another credential (a login), which a client logging in by itself sends
    without logging in first."""

    method: str
    path: str
    json: Any = None
    expect_json: bool = True
    authenticated: bool = True


def create_key_call(
    name: str,
    key_type: str,
    segment_size: int | None,
    deletion_allowed: bool,
    scheme: str | None = None,
    auto_rotate_period: int | str | None = None,
    options: Mapping[str, bool] | None = None,
) -> Call:
    """``POST /v1/keys``; ``options`` are the key options set to true (``derived``, ``exportable``, ...)."""
    body: dict[str, Any] = {"name": name, "type": key_type, "deletion_allowed": deletion_allowed}
    if segment_size is not None:
        body["segment_size"] = segment_size
    if scheme is not None:
        body["scheme"] = scheme
    if auto_rotate_period is not None:
        body["auto_rotate_period"] = auto_rotate_period
    body.update({option: True for option, value in (options or {}).items() if value})
    return Call("POST", "/v1/keys", body)


def import_key_call(
    name: str,
    material: bytes,
    segment_size: int | None,
    deletion_allowed: bool,
    scheme: str | None = None,
    auto_rotate_period: int | str | None = None,
    key_type: str | None = None,
    options: Mapping[str, bool] | None = None,
    wrapping_key: str | None = None,
) -> Call:
    """``POST /v1/keys/{name}/import``; ``options`` as :func:`create_key_call`'s. With ``wrapping_key`` (the
    service's public key, PEM) the material is sent wrapped under it (:mod:`keystream_client._wrapping`)."""
    body: dict[str, Any] = {**_material_field(material, wrapping_key), "deletion_allowed": deletion_allowed}
    if key_type is not None:
        body["type"] = key_type
    if segment_size is not None:
        body["segment_size"] = segment_size
    if scheme is not None:
        body["scheme"] = scheme
    if auto_rotate_period is not None:
        body["auto_rotate_period"] = auto_rotate_period
    body.update({option: True for option, value in (options or {}).items() if value})
    return Call("POST", f"/v1/keys/{quote(name)}/import", body)


def import_version_call(name: str, material: bytes, wrapping_key: str | None = None) -> Call:
    """``POST /v1/keys/{name}/import_version``; ``wrapping_key`` as :func:`import_key_call`'s."""
    return Call("POST", f"/v1/keys/{quote(name)}/import_version", _material_field(material, wrapping_key))


#: ``GET /v1/wrapping_key``: the service's public key for wrapped import (its answer's ``public_key``).
WRAPPING_KEY_CALL = Call("GET", "/v1/wrapping_key")


def _material_field(material: bytes, wrapping_key: str | None) -> dict[str, str]:
    """An import's material: ``key`` in clear, or ``ciphertext`` wrapped under ``wrapping_key``."""
    if wrapping_key is None:
        return {"key": base64.b64encode(material).decode()}
    return {"ciphertext": wrap_for_import(wrapping_key, material)}


def export_key_call(name: str, version: int | str | None = None) -> Call:
    """``GET /v1/keys/{name}/export``, every remaining version or ``version`` (a number or ``latest``)."""
    query = "" if version is None else f"?version={quote(str(version))}"
    return Call("GET", f"/v1/keys/{quote(name)}/export{query}")


def parse_exported(data: Mapping[str, Any]) -> dict[int, bytes]:
    """An export's answer as ``{version: material}``."""
    return {int(version): base64.b64decode(text) for version, text in data["keys"].items()}


def backup_key_call(name: str) -> Call:
    """``GET /v1/keys/{name}/backup``: ``{"name", "backup"}``."""
    return Call("GET", f"/v1/keys/{quote(name)}/backup")


def restore_key_call(backup: str, name: str | None = None, force: bool = False) -> Call:
    """``POST /v1/keys/restore``."""
    body: dict[str, Any] = {"backup": backup, "force": force}
    if name is not None:
        body["name"] = name
    return Call("POST", "/v1/keys/restore", body)


def trim_call(name: str, min_available_version: int) -> Call:
    return Call("POST", f"/v1/keys/{quote(name)}/trim", {"min_available_version": min_available_version})


def configure_key_call(
    name: str,
    min_decryption_version: int | None,
    deletion_allowed: bool | None,
    auto_rotate_period: int | str | None = None,
    options: Mapping[str, bool | None] | None = None,
) -> Call:
    """``PATCH /v1/keys/{name}``; ``options`` may turn ``exportable`` or ``allow_plaintext_backup`` on."""
    body: dict[str, Any] = {}
    if min_decryption_version is not None:
        body["min_decryption_version"] = min_decryption_version
    if deletion_allowed is not None:
        body["deletion_allowed"] = deletion_allowed
    if auto_rotate_period is not None:
        body["auto_rotate_period"] = auto_rotate_period
    body.update({option: value for option, value in (options or {}).items() if value is not None})
    return Call("PATCH", f"/v1/keys/{quote(name)}", body)


def create_token_call(
    scopes: Sequence[str],
    key_patterns: Sequence[str],
    description: str,
    ttl: int | None = None,
    max_ttl: int | None = None,
) -> Call:
    body: dict[str, Any] = {
        "scopes": list(scopes),
        "key_patterns": list(key_patterns),
        "description": description,
    }
    if ttl is not None:
        body["ttl"] = ttl
    if max_ttl is not None:
        body["max_ttl"] = max_ttl
    return Call("POST", "/v1/tokens", body)


def renew_token_self_call(ttl: int | None) -> Call:
    return Call("POST", "/v1/tokens/self/renew", {} if ttl is None else {"ttl": ttl})


def login_jwt_call(role: str, jwt: str) -> Call:
    """``POST /v1/auth/jwt/login``: trade a JWT for a token through ``role`` (no token needed)."""
    return Call("POST", "/v1/auth/jwt/login", {"role": role, "jwt": jwt}, authenticated=False)


def write_role_call(name: str, role: Mapping[str, Any]) -> Call:
    """``POST /v1/auth/roles/{name}``: ``role`` is the body (``method``, ``scopes``, the method's bindings).

    Raises:
        TypeError: ``role`` is not a mapping.
        ValueError: ``role`` has no ``method``.
    """
    if not isinstance(role, Mapping):
        raise TypeError("role must be a mapping: the role's JSON body")
    if "method" not in role:
        raise ValueError("role needs a 'method' (jwt or cert)")
    return Call("POST", f"/v1/auth/roles/{quote(name)}", dict(role))


def login_cert_call(role: str) -> Call:
    """``POST /v1/auth/cert/login``: trade the client certificate presented for mTLS for a token through
    ``role`` (no token needed)."""
    return Call("POST", "/v1/auth/cert/login", {"role": role}, authenticated=False)


def batch_call(
    key: str, operation: str, items: Sequence[BatchItem | bytes], key_version: int | None, backend: str | None
) -> Call:
    query = httpx.QueryParams(
        {k: v for k, v in (("key_version", key_version), ("backend", backend)) if v is not None}
    )
    suffix = f"?{query}" if query else ""
    return Call("POST", f"/v1/keys/{quote(key)}/{operation}/batch{suffix}", batch_body(operation, items))


def batch_body(operation: str, items: Sequence[BatchItem | bytes]) -> dict[str, Any]:
    """Batch JSON body: ``{"items": [{plaintext|ciphertext, associated_data?, reference?}]}``."""
    field_name = "plaintext" if operation == "encrypt" else "ciphertext"
    body: list[dict[str, Any]] = []
    for item in items:
        entry = item if isinstance(item, BatchItem) else BatchItem(bytes(item))
        out: dict[str, Any] = {field_name: b64(entry.data)}
        if entry.associated_data is not None:
            out["associated_data"] = b64(entry.associated_data)
        if entry.reference is not None:
            out["reference"] = entry.reference
        body.append(out)
    return {"items": body}


#: The data key types ``POST /v1/keys/{name}/datakey`` accepts.
DATA_KEY_TYPES = ("aes128", "aes256")


def datakey_call(name: str, key_type: str, plaintext: bool, associated_data: bytes | None) -> Call:
    """``POST /v1/keys/{name}/datakey``.

    Raises:
        ValueError: ``key_type`` is not one of :data:`DATA_KEY_TYPES`.
    """
    if key_type not in DATA_KEY_TYPES:
        raise ValueError(f"key_type must be one of {', '.join(DATA_KEY_TYPES)}, got {key_type!r}")
    body: dict[str, Any] = {"type": key_type, "plaintext": bool(plaintext)}
    if associated_data is not None:
        body["associated_data"] = b64(associated_data)
    return Call("POST", f"/v1/keys/{quote(name)}/datakey", body)


#: The HMAC algorithms of ``/hmac`` and ``/verify``, and the digests of ``POST /v1/hash``.
HMAC_ALGORITHMS = ("sha2-256", "sha2-384", "sha2-512")
HASH_ALGORITHMS = (
    "sha2-224",
    "sha2-256",
    "sha2-384",
    "sha2-512",
    "sha3-224",
    "sha3-256",
    "sha3-384",
    "sha3-512",
)


def _checked(kind: str, value: str, allowed: Sequence[str]) -> str:
    if value not in allowed:
        raise ValueError(f"{kind} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def hmac_call(name: str, data: bytes, algorithm: str, key_version: int | None) -> Call:
    """``POST /v1/keys/{name}/hmac``.

    Raises:
        ValueError: ``algorithm`` is not one of :data:`HMAC_ALGORITHMS`.
    """
    body: dict[str, Any] = {
        "input": b64(data),
        "algorithm": _checked("algorithm", algorithm, HMAC_ALGORITHMS),
    }
    if key_version is not None:
        body["key_version"] = key_version
    return Call("POST", f"/v1/keys/{quote(name)}/hmac", body)


def verify_call(name: str, data: bytes, tag: str, algorithm: str) -> Call:
    """``POST /v1/keys/{name}/verify``.

    Raises:
        ValueError: ``algorithm`` is not one of :data:`HMAC_ALGORITHMS`.
    """
    body = {"input": b64(data), "hmac": tag, "algorithm": _checked("algorithm", algorithm, HMAC_ALGORITHMS)}
    return Call("POST", f"/v1/keys/{quote(name)}/verify", body)


def random_call(size: int) -> Call:
    """``POST /v1/random`` (base64)."""
    return Call("POST", "/v1/random", {"bytes": size, "format": "base64"})


def hash_call(data: bytes, algorithm: str) -> Call:
    """``POST /v1/hash`` (base64).

    Raises:
        ValueError: ``algorithm`` is not one of :data:`HASH_ALGORITHMS`.
    """
    body = {
        "input": b64(data),
        "algorithm": _checked("algorithm", algorithm, HASH_ALGORITHMS),
        "format": "base64",
    }
    return Call("POST", "/v1/hash", body)

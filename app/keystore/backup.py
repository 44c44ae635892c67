"""A key's backup: its record and every version, wrapped under the seal and bound to the key's name.

The blob is base64 of ``b"KSBK1"``, one byte giving the name's length, the name (UTF-8, in the clear: a
restore without a name needs it) and the record wrapped by the keystore's keyring (its newest master key
generation) with the associated data ``keystream:backup:v1:<name>``: a blob restored under another name does
not unwrap. The record is JSON: the key's type, scheme, segment size, policy, options and times, and each
version's number, creation time and material, itself wrapped as stored (:func:`~app.keystore.master.
wrap_key_material`, bound to the name and version), so no plaintext material is ever in the JSON or in
ordinary memory.

A backup therefore opens only in a keystore whose seal holds the master key generation it was made under:
the same keystore or a copy of it, and not once a master key rotation has retired that generation (make a
new backup after one). It is not a plaintext backup in Vault's sense: it moves a key between stores that
share a seal, or brings back a deleted key.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.errors import BadRequestError
from app.seal import SealUnwrapError
from app.seal.keyring import Keyring

from .checks import KEY_TYPES, check_key_name
from .master import unwrap_key_material, wrap_key_material
from .records import KeyInfo, KeyOptions, KeyVersionInfo

__all__ = ["MAGIC", "Backup", "backup_name", "make_backup", "open_backup"]

#: What starts every backup blob (before base64).
MAGIC = b"KSBK1"
#: The record layout this release writes and reads.
RECORD_VERSION = 1

#: A restored key's record and its versions' material (locked memory), in version order.
Backup = tuple[KeyInfo, list[memoryview]]


def _associated_data(name: str) -> bytes:
    return f"keystream:backup:v1:{name}".encode()


def make_backup(keyring: Keyring, info: KeyInfo, materials: Sequence[bytes | memoryview]) -> str:
    """The backup blob of key ``info`` whose versions hold ``materials`` (in ``info.versions``' order)."""
    record = {
        "record": RECORD_VERSION,
        "name": info.name,
        "type": info.key_type,
        "scheme": info.scheme,
        "segment_size": info.segment_size,
        "deletion_allowed": info.deletion_allowed,
        "min_decryption_version": info.min_decryption_version,
        "latest_version": info.latest_version,
        "imported": info.imported,
        "auto_rotate_period": info.auto_rotate_period,
        "options": info.options.to_json(),
        "created_at": info.created_at.isoformat(),
        "updated_at": info.updated_at.isoformat(),
        "versions": [
            {
                "version": entry.version,
                "created_at": entry.created_at.isoformat(),
                "wrapped": base64.b64encode(
                    wrap_key_material(keyring, info.name, entry.version, material)
                ).decode(),
            }
            for entry, material in zip(info.versions, materials, strict=True)
        ],
    }
    wrapped = keyring.wrap(json.dumps(record).encode(), _associated_data(info.name))
    name = info.name.encode()
    return base64.b64encode(MAGIC + bytes([len(name)]) + name + wrapped).decode()


def _split(blob: str) -> tuple[str, bytes]:
    """The name a backup blob was made for and its wrapped record.

    Raises:
        BadRequestError: not base64, or not a backup blob.
    """
    try:
        raw = base64.b64decode(blob, validate=True)
    except (binascii.Error, ValueError):
        raise BadRequestError("backup must be base64 (as a backup answered)") from None
    if not raw.startswith(MAGIC) or len(raw) < len(MAGIC) + 2:
        raise BadRequestError("backup is not a Keystream key backup")
    length = raw[len(MAGIC)]
    start = len(MAGIC) + 1
    try:
        name = raw[start : start + length].decode()
    except UnicodeDecodeError:
        raise BadRequestError("backup is not a Keystream key backup") from None
    return name, raw[start + length :]


def backup_name(blob: str) -> str:
    """The name of the key a backup blob holds.

    Raises:
        BadRequestError: not a backup blob.
    """
    return check_key_name(_split(blob)[0])


def _field(record: dict[str, Any], name: str, kind: type) -> Any:
    value = record.get(name)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise BadRequestError(f"backup record is malformed ({name})")
    return value


def open_backup(keyring: Keyring, blob: str, name: str) -> Backup:
    """The key record and material of a backup blob, restored as key ``name``.

    Raises:
        BadRequestError: not a backup, made for another key than ``name``, made under a master key this
            keystore does not hold, or a malformed record (messages never quote the blob).
    """
    made_for, wrapped = _split(blob)
    try:
        text = keyring.unwrap(wrapped, _associated_data(name))
    except SealUnwrapError:
        raise BadRequestError(
            f"backup does not open as key {name!r}: it was made for key {made_for!r}, or under a master key "
            "this keystore does not hold"
        ) from None
    record = json.loads(text)
    if not isinstance(record, dict) or record.get("record") != RECORD_VERSION or record.get("name") != name:
        raise BadRequestError("backup record is malformed")
    key_type = _field(record, "type", str)
    if key_type not in KEY_TYPES:
        raise BadRequestError(f"backup record is malformed (type {key_type[:20]!r})")
    flags = _field(record, "options", dict)
    options = KeyOptions(**{option: bool(flags.get(option, False)) for option in KeyOptions().to_json()})
    entries = _field(record, "versions", list)
    versions = []
    materials = []
    for entry in entries:
        if not isinstance(entry, dict):
            raise BadRequestError("backup record is malformed (versions)")
        number = _field(entry, "version", int)
        versions.append(KeyVersionInfo(number, datetime.fromisoformat(_field(entry, "created_at", str))))
        sealed = base64.b64decode(_field(entry, "wrapped", str))
        materials.append(unwrap_key_material(keyring, name, number, sealed))
    info = KeyInfo(
        name=name,
        key_type=key_type,
        scheme=_field(record, "scheme", str),
        segment_size=_field(record, "segment_size", int),
        deletion_allowed=_field(record, "deletion_allowed", bool),
        min_decryption_version=_field(record, "min_decryption_version", int),
        latest_version=_field(record, "latest_version", int),
        imported=_field(record, "imported", bool),
        created_at=datetime.fromisoformat(_field(record, "created_at", str)),
        updated_at=datetime.fromisoformat(_field(record, "updated_at", str)),
        versions=tuple(versions),
        auto_rotate_period=_field(record, "auto_rotate_period", int),
        options=options,
    )
    if not versions:
        raise BadRequestError("backup record is malformed (no versions)")
    return info, materials

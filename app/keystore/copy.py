"""Copy every key, version, token, login role and auth method configuration from one keystore into another
(SQLite to PostgreSQL and back).

:func:`copy_keystore` reads the source, checks everything, then writes the destination in **one**
transaction (:meth:`~app.keystore.base.KeyStore.insert_copied`), so a copy is all or nothing:

* Material travels wrapped, as stored; each wrapped version is first unwrapped (by the source's keyring, each
  under its own master key generation) to prove it is intact and that both keystores share that seal's master
  key (each store has already checked its own check value when it was opened). The unwrapped bytes are only
  compared, never shown. A version wrapped under a generation a rotation of the source's master key made
  (:mod:`app.keystore.generations`; the destination does not hold it) is wrapped again under the destination's
  newest generation; a version under the seal's own key (generation 1) travels as stored.
* Idempotent: a key already in the destination with the same versions, the same material (compared in
  constant time, :func:`hmac.compare_digest`) and the same type, scheme, segment size and policy is skipped,
  as is a token already there with identical fields. Re-running a finished copy copies nothing and succeeds.
* A key or token that exists in the destination but differs is a conflict: :class:`CopyConflictError` names
  every such key or token (never material) and nothing at all is written. The destination is never
  overwritten.

The import wrapping key (:mod:`app.keystore.wrapping_key`) is copied too, rewrapped under the destination's
seal, when the destination has none; a different one there is a conflict.

Login roles and the auth methods' configurations follow the same rules: copied when missing, skipped when
identical (a role's times aside), a conflict when they differ. Tokens are copied as
:class:`~app.keystore.base.TokenRecord` objects, whatever fields those have, through the
destination's own token insert, so fields added to ``TokenRecord`` later are copied (and compared) too.
"""

from __future__ import annotations

import dataclasses
import hmac
from dataclasses import dataclass

from app.errors import ConflictError
from app.seal import blob_origin
from app.seal.keyring import Keyring

from .base import KeyStore
from .master import unwrap_key_material, wrap_key_material
from .records import KeyExport, RoleRecord, TokenRecord
from .roles import AUTH_METHODS

__all__ = ["CopyConflictError", "CopySummary", "copy_keystore"]

#: Key fields that must agree for a key already in the destination to count as the same key.
_SAME_KEY_FIELDS = (
    "key_type",
    "scheme",
    "segment_size",
    "min_decryption_version",
    "deletion_allowed",
    "auto_rotate_period",
)


class CopyConflictError(ConflictError):
    """Keys or tokens exist in the destination with different material or fields; nothing was written."""

    code = "keystore_copy_conflict"


@dataclass(frozen=True)
class CopySummary:
    """What a copy did: keys copied and skipped (already there, identical), versions copied, tokens."""

    keys_copied: int
    keys_skipped: int
    versions_copied: int
    tokens_copied: int
    tokens_skipped: int
    roles_copied: int = 0
    roles_skipped: int = 0

    def describe(self) -> str:
        """One line for the command line, e.g. ``copied 2 keys (5 versions), skipped 1 key; ...``."""
        return (
            f"copied {self.keys_copied} keys ({self.versions_copied} versions), skipped {self.keys_skipped} "
            f"keys already present; copied {self.tokens_copied} tokens, skipped {self.tokens_skipped} tokens "
            f"already present; copied {self.roles_copied} roles, skipped {self.roles_skipped} roles already "
            "present"
        )


def _materials(key: KeyExport, keyring: Keyring) -> list[memoryview]:
    """Every version of ``key`` unwrapped (raises ``KeyUnwrapError`` naming the key and version only)."""
    return [
        unwrap_key_material(keyring, key.info.name, version.version, blob)
        for version, blob in zip(key.info.versions, key.wrapped, strict=True)
    ]


def _for_target(key: KeyExport, source: Keyring, target: Keyring) -> KeyExport:
    """``key`` with every version the destination can unwrap: as stored under the seal's own key, else
    rewrapped from the source's generation to the destination's newest."""
    blobs = []
    for version, blob in zip(key.info.versions, key.wrapped, strict=True):
        origin = blob_origin(blob)
        if origin is not None and origin.generation != 1:
            material = unwrap_key_material(source, key.info.name, version.version, blob)
            blob = wrap_key_material(target, key.info.name, version.version, material)
        blobs.append(blob)
    return dataclasses.replace(key, wrapped=tuple(blobs))


def _key_difference(source: KeyExport, target: KeyExport, keyrings: tuple[Keyring, Keyring]) -> str | None:
    """Why ``target`` is not the same key as ``source`` (no material in the text), or None if it is."""
    for name in _SAME_KEY_FIELDS:
        if getattr(source.info, name) != getattr(target.info, name):
            return f"its {name.replace('_', ' ')} differs"
    target_options = target.info.options.to_json()
    for name, value in source.info.options.to_json().items():
        if value != target_options[name]:
            return f"its option {name} differs"
    source_versions = [version.version for version in source.info.versions]
    target_versions = [version.version for version in target.info.versions]
    if source_versions != target_versions:
        return f"it has versions {target_versions}, the source {source_versions}"
    same = True
    for left, right in zip(_materials(source, keyrings[0]), _materials(target, keyrings[1]), strict=True):
        same &= hmac.compare_digest(left, right)  # no early exit: every version is compared
    return None if same else "its material differs"


def _token_difference(source: TokenRecord, target: TokenRecord) -> str | None:
    """The first field in which two records of one token id differ (its name only), or None."""
    if not hmac.compare_digest(source.secret_hash, target.secret_hash):
        return "its secret hash differs"
    for field in dataclasses.fields(TokenRecord):
        if field.name != "secret_hash" and getattr(source, field.name) != getattr(target, field.name):
            return f"its {field.name.replace('_', ' ')} differs"
    return None


def _role_difference(source: RoleRecord, target: RoleRecord) -> str | None:
    """The first field in which two roles of one name differ (its name only; times aside), or None."""
    for field in dataclasses.fields(RoleRecord):
        if field.name not in ("created_at", "updated_at") and getattr(source, field.name) != getattr(
            target, field.name
        ):
            return f"its {field.name} field differs"
    return None


def _new_roles(
    source: KeyStore, target: KeyStore, conflicts: list[str]
) -> tuple[list[RoleRecord], dict[str, dict[str, object]], int]:
    """The roles and configurations ``target`` lacks, and how many roles it already has the same; a role or
    configuration that differs is added to ``conflicts``."""
    present = {role.name: role for role in target.list_roles()}
    source_roles = source.list_roles()
    new_roles: list[RoleRecord] = []
    for role in source_roles:
        existing = present.get(role.name)
        if existing is None:
            new_roles.append(role)
        elif (difference := _role_difference(role, existing)) is not None:
            conflicts.append(f"role {role.name!r} ({difference})")
    configs: dict[str, dict[str, object]] = {}
    for method in AUTH_METHODS:
        config = source.read_auth_config(method)
        there = target.read_auth_config(method)
        if config is not None and there is None:
            configs[method] = config
        elif config is not None and there != config:
            conflicts.append(f"the {method} auth configuration (it differs)")
    return new_roles, configs, len(source_roles) - len(new_roles)


def _new_wrapping_key(source: KeyStore, target: KeyStore, conflicts: list[str]) -> bytes | None:
    """The source's import wrapping key when ``target`` has none (so public keys handed out before the copy
    keep working after it); ``None`` when the source has none or ``target`` has the same one. A different one
    in ``target`` is added to ``conflicts``."""
    key = source.stored_import_wrapping_key()
    if key is None:
        return None
    there = target.stored_import_wrapping_key()
    if there is None:
        return key
    if not hmac.compare_digest(key, there):
        conflicts.append("the import wrapping key (it differs)")
    return None


def copy_keystore(source: KeyStore, target: KeyStore) -> CopySummary:
    """Copy the keys, versions, tokens, roles and auth configurations of ``source`` that ``target`` lacks, in
    one transaction.

    Args:
        source: the keystore to read.
        target: the keystore to write; both were opened with the same seal (master key).

    Returns:
        What was copied and skipped.

    Raises:
        KeyUnwrapError: a version in ``source`` (or the same-named key in ``target``) does not unwrap under
            its store's seal; nothing was written.
        CopyConflictError: keys, tokens, roles or configurations in ``target`` differ from ``source``'s;
            nothing was written. The
            message names them and what differs, never material or hashes.
        KeyExistsError, ConflictError, KeyRecentlyDeletedError: another writer created a key or token, or
            a copied name is held by a tombstone in ``target``; nothing was written.
        ServiceUnavailableError: a database cannot serve now.
    """
    keyrings = (source.keyring, target.keyring)
    source_keys = source.export_keys()
    for key in source_keys:
        _materials(key, keyrings[0])  # proves every wrapped version intact before anything is written
    target_keys = {key.info.name: key for key in target.export_keys()}
    target_tokens = {record.token_id: record for record in target.list_tokens()}
    conflicts: list[str] = []
    new_keys: list[KeyExport] = []
    for key in source_keys:
        existing = target_keys.get(key.info.name)
        if existing is None:
            new_keys.append(_for_target(key, *keyrings))
            continue
        difference = _key_difference(key, existing, keyrings)
        if difference is not None:
            conflicts.append(f"key {key.info.name!r} ({difference})")
    new_tokens: list[TokenRecord] = []
    source_tokens = source.list_tokens()
    for record in source_tokens:
        present = target_tokens.get(record.token_id)
        if present is None:
            new_tokens.append(record)
            continue
        difference = _token_difference(record, present)
        if difference is not None:
            conflicts.append(f"token {record.token_id!r} ({difference})")
    new_roles, configs, roles_skipped = _new_roles(source, target, conflicts)
    wrapping_key = _new_wrapping_key(source, target, conflicts)
    if conflicts:
        raise CopyConflictError(
            "the destination already has, with different contents: "
            + "; ".join(conflicts)
            + ". Nothing was copied; rename or remove these in one keystore and run the copy again"
        )
    if new_keys or new_tokens or new_roles or configs or wrapping_key is not None:
        target.insert_copied(new_keys, new_tokens, new_roles, configs, wrapping_key)
    return CopySummary(
        keys_copied=len(new_keys),
        keys_skipped=len(source_keys) - len(new_keys),
        versions_copied=sum(len(key.info.versions) for key in new_keys),
        tokens_copied=len(new_tokens),
        tokens_skipped=len(source_tokens) - len(new_tokens),
        roles_copied=len(new_roles),
        roles_skipped=roles_skipped,
    )

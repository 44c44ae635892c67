"""Wrapping key material under the keystore's seal, and the check value that detects a wrong seal.

Every stored key version is wrapped by the seal (:mod:`app.seal`: the master key's only holder); the
associated data ``keystream:key:<name>:<version>`` binds a wrapped blob to its key name and version, so a blob
copied to another row does not unwrap. The keystore also stores a check value wrapped by the seal it was
created with, so that opening it under another seal or master key is refused before anything is served.

Each function takes a seal, or 32 master key bytes standing for a file seal over them. The master key's
sources for the file seal (``KEYSTREAM_MASTER_KEY``, ``_FILE``, ``data/master.key``) live in
:mod:`app.seal.file`; their names are re-exported here for the keystore's callers. No function here puts key
bytes into an exception, a log line or a ``repr``.
"""

from __future__ import annotations

from app.core.master_key_format import (
    MASTER_KEY_SIZE,
    MasterKeyError,
    check_master_key_source,
    parse_master_key,
)
from app.core.secret_memory import random_secret
from app.errors import ServiceUnavailableError
from app.seal import FileSeal, Seal, SealUnwrapError, blob_origin
from app.seal.file import (
    MASTER_KEY_FILE,
    check_master_key,
    ensure_data_dir,
    load_or_create_master_key,
    read_master_key_file,
)
from app.seal.keyring import Keyring

__all__ = [
    "AUDIT_KEYS_ROW",
    "CHECK_ROW",
    "MASTER_KEY_FILE",
    "MASTER_KEY_SIZE",
    "SEAL_PARAMETERS_ROW",
    "SEAL_ROWS",
    "WRAPPING_KEY_ASSOCIATED_DATA",
    "WRAPPING_KEY_ROW",
    "KeyUnwrapError",
    "MasterKeyError",
    "as_seal",
    "check_master_key",
    "check_master_key_source",
    "ensure_data_dir",
    "key_associated_data",
    "load_or_create_master_key",
    "make_master_key_check",
    "master_key_matches",
    "open_audit_key_material",
    "parse_master_key",
    "read_master_key_file",
    "settle_seal",
    "unwrap_key_material",
    "wrap_key_material",
]

#: The ``meta`` rows the seal's blobs live in: the check value, and (for seals that cannot derive keys) the
#: audit keys' material, 64 random bytes (hash key, chain key) made when the keystore is first opened.
CHECK_ROW = "master_key_check"
AUDIT_KEYS_ROW = "audit_keys"
#: The seal's public parameters (the shamir seal's share set: id, threshold, count), never a secret.
SEAL_PARAMETERS_ROW = "seal_parameters"
#: Every ``meta`` row :func:`settle_seal` reads.
SEAL_ROWS = (CHECK_ROW, AUDIT_KEYS_ROW, SEAL_PARAMETERS_ROW)
AUDIT_KEYS_ASSOCIATED_DATA = b"keystream:audit-keys"
#: The import wrapping key's ``meta`` row and associated data (:mod:`app.keystore.wrapping_key`).
WRAPPING_KEY_ROW = "wrapping_key"
WRAPPING_KEY_ASSOCIATED_DATA = b"keystream:import-wrapping-key"
AUDIT_KEYS_SIZE = 64
CHECK_ASSOCIATED_DATA = b"keystream:master-key-check"
_CHECK_PLAINTEXT = b"keystream master key check v1"


class KeyUnwrapError(ServiceUnavailableError):
    """A stored key version does not unwrap under the seal (another seal or master key, or a corrupt row)."""

    code = "key_unwrap_failed"


def as_seal(seal: Seal | bytes) -> Seal:
    """``seal`` itself, or a :class:`~app.seal.FileSeal` over 32 master key bytes (tests, ``keystore copy``).

    Raises:
        MasterKeyError: bytes that are not 32 bytes long, or neither a seal nor bytes.
    """
    if isinstance(seal, Seal):
        return seal
    return FileSeal(check_master_key(seal))


def key_associated_data(name: str, version: int) -> bytes:
    """The associated data that binds a wrapped key to its name and version."""
    return f"keystream:key:{name}:{version}".encode()


def _wrapper(seal: Seal | Keyring | bytes) -> Seal | Keyring:
    return seal if isinstance(seal, Keyring) else as_seal(seal)


def wrap_key_material(
    seal: Seal | Keyring | bytes, name: str, version: int, material: bytes | memoryview
) -> bytes:
    """Wrap ``material`` (any buffer, read in place) under ``seal`` (a keystore's keyring: its newest master
    key generation), bound to ``(name, version)``."""
    return _wrapper(seal).wrap(material, key_associated_data(name, version))


def unwrap_key_material(seal: Seal | Keyring | bytes, name: str, version: int, wrapped: bytes) -> memoryview:
    """Unwrap what :func:`wrap_key_material` produced for the same ``(name, version)``.

    The material comes back as a read-only view of locked memory left out of core dumps
    (:mod:`app.core.secret_memory`), zeroed once the last view of it is dropped; it compares equal to the
    ``bytes`` it holds.

    Raises:
        KeyUnwrapError: the blob does not authenticate: another seal or master key, another name/version, or
            corruption. The message names the key and version only.
        SealError: the seal is sealed or its device fails.
    """
    try:
        return _wrapper(seal).unwrap_secret(bytes(wrapped), key_associated_data(name, version))
    except SealUnwrapError:
        pass  # raised outside the handler: no chained exception that could carry the blob
    raise KeyUnwrapError(
        f"cannot unwrap version {version} of key {name!r}: it does not authenticate under the current "
        "master key (a different master key, or a corrupt keystore record)"
    )


def make_master_key_check(seal: Seal | bytes) -> bytes:
    """A blob stored with the keystore that lets :func:`master_key_matches` detect a wrong seal or key."""
    return as_seal(seal).wrap(_CHECK_PLAINTEXT, CHECK_ASSOCIATED_DATA)


def master_key_matches(seal: Seal | bytes, check: bytes) -> bool:
    """True when ``check`` (from :func:`make_master_key_check`) was made by ``seal``'s master key."""
    try:
        return as_seal(seal).unwrap(bytes(check), CHECK_ASSOCIATED_DATA) == _CHECK_PLAINTEXT
    except SealUnwrapError:
        return False


def settle_seal(seal: Seal, meta: dict[str, bytes], description: str, hint: str) -> dict[str, bytes]:
    """Check ``seal`` against a keystore's ``meta`` rows; return the rows to add in the same transaction.

    A keystore without a check value gets one (and the seal's public parameters, if it has any); a keystore
    whose seal cannot derive the audit keys (:attr:`~app.seal.Seal.derives_keys`) gets random audit key
    material wrapped under it. A **sealed** seal (shamir, before its shares are given) cannot test the check
    value yet: the keystore must have been initialised by a seal of its kind, and the seal is told its stored
    parameters and how to test a rebuilt key (:meth:`~app.seal.Seal.await_unseal`).

    Args:
        seal: the seal the keystore is opened with.
        meta: the keystore's :data:`SEAL_ROWS` values, where present.
        description: the keystore, for messages (a path, a database name; never a URL).
        hint: what to do when the master key differs, for the message.

    Raises:
        MasterKeyError: the check value was made by another seal kind (the message names both and the
            command that moves a keystore between seals), or by another master key of the same kind; a
            sealed seal finds no check value (the keystore was never initialised for it); an initialising
            seal (``operator init``) finds one.
    """
    added: dict[str, bytes] = {}
    check = meta.get(CHECK_ROW)
    origin = None if check is None else blob_origin(bytes(check))
    if origin is not None and origin.kind != seal.kind:
        raise MasterKeyError(
            f"{seal.describe()} does not match keystore {description}: it is sealed by the {origin.kind} "
            f"seal. Set KEYSTREAM_SEAL={origin.kind}, or move it with: keystream-server operator "
            f"migrate-seal --to {seal.kind}"
        )
    if check is not None and seal.initialising:
        raise MasterKeyError(f"keystore {description} is already initialised; nothing was changed")
    if seal.sealed:
        if check is None:
            raise MasterKeyError(
                f"keystore {description} has no master key check value for {seal.describe()}: initialise it "
                "with keystream-server operator init"
            )
        stored_check = bytes(check)
        seal.await_unseal(
            meta.get(SEAL_PARAMETERS_ROW), lambda candidate: master_key_matches(candidate, stored_check)
        )
        return added
    if check is None:
        added[CHECK_ROW] = make_master_key_check(seal)
        parameters = seal.public_parameters()
        if parameters is not None:
            added[SEAL_PARAMETERS_ROW] = parameters
    elif not master_key_matches(seal, check):
        raise MasterKeyError(
            f"the master key does not match keystore {description}: it was created with another master key. "
            + hint
        )
    if meta.get(AUDIT_KEYS_ROW) is None and not seal.derives_keys:
        fresh = random_secret(AUDIT_KEYS_SIZE).readonly()  # never a ``bytes`` object
        added[AUDIT_KEYS_ROW] = seal.wrap(fresh, AUDIT_KEYS_ASSOCIATED_DATA)
    return added


def open_audit_key_material(seal: Seal | Keyring, stored: bytes | None) -> memoryview | None:
    """The audit keys' 64 bytes stored under ``seal`` (:func:`settle_seal`; a rotation rewraps them under the
    keyring's newest generation), or ``None`` when none is stored.

    They come back as a read-only view of locked memory (:mod:`app.core.secret_memory`), zeroed once the last
    view is dropped; a seal that unwraps into ``bytes`` (a token's library) makes one copy on the way.

    Raises:
        MasterKeyError: the stored material does not unwrap under ``seal``.
    """
    if stored is None:
        return None
    try:
        material: memoryview | None = seal.unwrap_secret(bytes(stored), AUDIT_KEYS_ASSOCIATED_DATA)
    except SealUnwrapError:
        material = None
    if material is None or len(material) != AUDIT_KEYS_SIZE:
        raise MasterKeyError(f"the keystore's audit key material does not unwrap under {seal.describe()}")
    return material

"""Keystream's keystore: named AES keys with versions, stored wrapped under a master key, and API tokens.

>>> from pathlib import Path
>>> master_key = load_or_create_master_key(Path("data"), None)   # doctest: +SKIP
>>> store = open_keystore(Path("data"), master_key)              # doctest: +SKIP
>>> store.create_key("orders", "aes256").latest_version           # doctest: +SKIP
1

See :mod:`app.keystore.base` for the interface, :mod:`app.keystore.checks` for the validation rules,
:mod:`app.keystore.sqlite` for the SQLite implementation (the embedded default), :mod:`app.keystore.postgres`
for the PostgreSQL one (several replicas, selected by a database URL) and :mod:`app.keystore.master` for the
master key and key wrapping.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from .base import KeyInfo, KeyStore, KeyVersionInfo, TokenRecord
from .changes import CHANGE_KINDS, Change, ChangeBatch
from .checks import (
    ALLOWED_SEGMENT_SIZES,
    DEFAULT_SEGMENT_SIZE,
    KEY_NAME_PATTERN,
    KEY_TYPES,
    MAX_SEGMENT_SIZE,
    MIN_SEGMENT_SIZE,
    check_key_name,
    check_key_type,
    check_segment_size,
)
from .errors import KeystoreUnavailableError
from .master import (
    MASTER_KEY_FILE,
    KeyUnwrapError,
    MasterKeyError,
    check_master_key_source,
    ensure_data_dir,
    load_or_create_master_key,
    parse_master_key,
    read_master_key_file,
)
from .migrations import KeystoreSchemaError, Migration
from .rotation import MAX_AUTO_ROTATE_PERIOD, MIN_AUTO_ROTATE_PERIOD, check_auto_rotate_period
from .sqlite import DATABASE_FILE, SCHEMA_VERSION, SqliteKeyStore

if TYPE_CHECKING:
    from app.core.config import Settings

__all__ = [
    "ALLOWED_SEGMENT_SIZES",
    "CHANGE_KINDS",
    "DATABASE_FILE",
    "DEFAULT_SEGMENT_SIZE",
    "KEY_NAME_PATTERN",
    "KEY_TYPES",
    "MAX_AUTO_ROTATE_PERIOD",
    "MAX_SEGMENT_SIZE",
    "MIN_AUTO_ROTATE_PERIOD",
    "MIN_SEGMENT_SIZE",
    "SCHEMA_VERSION",
    "Change",
    "ChangeBatch",
    "KeyInfo",
    "KeyStore",
    "KeyUnwrapError",
    "KeyVersionInfo",
    "KeystoreSchemaError",
    "KeystoreUnavailableError",
    "MasterKeyError",
    "Migration",
    "SqliteKeyStore",
    "TokenRecord",
    "check_auto_rotate_period",
    "check_key_name",
    "check_key_type",
    "check_segment_size",
    "load_master_key_for",
    "load_or_create_master_key",
    "open_keystore",
    "open_keystore_for",
]


def open_keystore(
    data_dir: Path,
    master_key: bytes,
    database_url: str | None = None,
    *,
    tombstone_seconds: float = 0.0,
    auto_rotate_min_period: int = MIN_AUTO_ROTATE_PERIOD,
) -> KeyStore:
    """Open the PostgreSQL keystore at ``database_url`` if given, else the SQLite one in ``data_dir``.

    SQLite: ``data_dir/keystore.db`` in WAL mode, created if needed; ``data_dir`` is created with mode 0700
    if missing and the database file 0600. PostgreSQL: the schema is migrated (once, whatever the number of
    replicas starting) and ``data_dir`` is not used. A deleted key's name cannot be re-created for
    ``tombstone_seconds`` (:mod:`app.keystore.tombstones`). ``auto_rotate_min_period`` is the shortest
    ``auto_rotate_period`` a key may get (:mod:`app.keystore.rotation`; lowered only by tests).

    Raises:
        MasterKeyError: ``master_key`` is not 32 bytes, is not the key the keystore was created with, or the
            data directory is unusable.
        KeystoreSchemaError: the database comes from a newer Keystream release.
        ServiceUnavailableError: the database cannot be opened (``KeystoreUnavailableError`` for PostgreSQL,
            also when psycopg is not installed).
        ValueError: ``database_url`` is not a ``postgresql://`` URL (the message does not quote it).
    """
    if database_url is not None:
        from .postgres import PostgresKeyStore  # psycopg is needed only here

        return PostgresKeyStore(
            database_url,
            master_key,
            tombstone_seconds=tombstone_seconds,
            auto_rotate_min_period=auto_rotate_min_period,
        )
    directory = ensure_data_dir(Path(data_dir))
    return SqliteKeyStore(
        directory / DATABASE_FILE,
        master_key,
        tombstone_seconds=tombstone_seconds,
        auto_rotate_min_period=auto_rotate_min_period,
    )


def load_master_key_for(settings: Settings, *, create: bool = True) -> bytes:
    """The master key from where ``settings`` say: ``master_key_file``, ``master_key``, or (SQLite only)
    ``data_dir/master.key``, generated on first start when ``create`` is true.

    Raises:
        MasterKeyError: see :func:`check_master_key_source`, :func:`load_or_create_master_key` and
            :func:`read_master_key_file`; or, with ``create`` false, no key exists yet.
    """
    env_value = settings.master_key.get_secret_value() if settings.master_key else None
    database_url = settings.database_url.get_secret_value() if settings.database_url else None
    check_master_key_source(env_value, settings.master_key_file, shared_database=database_url is not None)
    if settings.master_key_file is not None:
        return read_master_key_file(settings.master_key_file)
    if database_url is not None:
        assert env_value is not None  # check_master_key_source refused the other case
        return parse_master_key(env_value, "KEYSTREAM_MASTER_KEY")
    if not create and env_value is None and not (Path(settings.data_dir) / MASTER_KEY_FILE).exists():
        raise MasterKeyError(
            f"no master key: set KEYSTREAM_MASTER_KEY or KEYSTREAM_MASTER_KEY_FILE, or point "
            f"KEYSTREAM_DATA_DIR at the directory holding {MASTER_KEY_FILE}"
        )
    return load_or_create_master_key(settings.data_dir, env_value)


def open_keystore_for(settings: Settings, master_key: bytes | None = None) -> KeyStore:
    """Open the keystore ``settings`` select, with ``master_key`` (``None``: :func:`load_master_key_for`).

    ``settings.database_url`` set: the PostgreSQL keystore, with the master key from ``master_key`` or
    ``master_key_file`` (required: a generated one would differ per replica). Unset: the SQLite keystore in
    ``data_dir``, with the master key from ``master_key``, ``master_key_file`` or ``data_dir/master.key``
    (generated on first start). Deleted names are held for ``settings.effective_tombstone_seconds``; the
    shortest ``auto_rotate_period`` is ``settings.auto_rotate_min_period``.

    Raises:
        MasterKeyError: see :func:`load_master_key_for`; or the key does not open the keystore.
        KeystoreSchemaError, ServiceUnavailableError, ValueError: see :func:`open_keystore`.
    """
    key = master_key if master_key is not None else load_master_key_for(settings)
    database_url = settings.database_url.get_secret_value() if settings.database_url else None
    return open_keystore(
        settings.data_dir,
        key,
        database_url,
        tombstone_seconds=settings.effective_tombstone_seconds,
        auto_rotate_min_period=settings.auto_rotate_min_period,
    )

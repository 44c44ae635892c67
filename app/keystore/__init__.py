"""Keystream's keystore: named AES keys with versions, stored wrapped under a master key, and API tokens.

>>> from pathlib import Path
>>> seal = FileSeal(load_or_create_master_key(Path("data"), None))  # doctest: +SKIP
>>> store = open_keystore(Path("data"), seal)                      # doctest: +SKIP
>>> store.create_key("orders", "aes256").latest_version           # doctest: +SKIP
1

See :mod:`app.keystore.base` for the interface, :mod:`app.keystore.records` for its records,
:mod:`app.keystore.checks` for the validation rules, :mod:`app.keystore.sqlite` for the SQLite implementation
(the embedded default), :mod:`app.keystore.postgres` for the PostgreSQL one (several replicas, selected by a
database URL) and :mod:`app.keystore.master` for key wrapping under the seal (:mod:`app.seal`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Unpack

from app.seal import Seal, open_seal
from app.seal.file import load_master_key_for as _load_master_key_for

from .base import KeyStore, StoreOptions
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
from .records import KeyInfo, KeyOptions, KeyVersionInfo, RoleRecord, TokenRecord
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
    "MASTER_KEY_FILE",
    "MAX_AUTO_ROTATE_PERIOD",
    "MAX_SEGMENT_SIZE",
    "MIN_AUTO_ROTATE_PERIOD",
    "MIN_SEGMENT_SIZE",
    "SCHEMA_VERSION",
    "Change",
    "ChangeBatch",
    "KeyInfo",
    "KeyOptions",
    "KeyStore",
    "KeyUnwrapError",
    "KeyVersionInfo",
    "KeystoreSchemaError",
    "KeystoreUnavailableError",
    "MasterKeyError",
    "Migration",
    "RoleRecord",
    "SqliteKeyStore",
    "TokenRecord",
    "check_auto_rotate_period",
    "check_key_name",
    "check_key_type",
    "check_master_key_source",
    "check_segment_size",
    "load_master_key_for",
    "load_or_create_master_key",
    "open_keystore",
    "open_keystore_for",
    "parse_master_key",
    "read_master_key_file",
]


def open_keystore(
    data_dir: Path,
    seal: Seal | bytes,
    database_url: str | None = None,
    **options: Unpack[StoreOptions],
) -> KeyStore:
    """Open the PostgreSQL keystore at ``database_url`` if given, else the SQLite one in ``data_dir``.

    SQLite: ``data_dir/keystore.db`` in WAL mode, created if needed; ``data_dir`` is created with mode 0700
    if missing and the database file 0600. PostgreSQL: the schema is migrated (once, whatever the number of
    replicas starting) and ``data_dir`` is not used. ``options`` go to the store
    (:class:`~app.keystore.base.StoreOptions`: how long a deleted key's name is held, the shortest
    ``auto_rotate_period``, the pool size).

    Raises:
        MasterKeyError: ``seal`` is bytes not 32 long, is not the seal the keystore was created with, or the
            data directory is unusable.
        KeystoreSchemaError: the database comes from a newer Keystream release.
        ServiceUnavailableError: the database cannot be opened (``KeystoreUnavailableError`` for PostgreSQL,
            also when psycopg is not installed).
        ValueError: ``database_url`` is not a ``postgresql://`` URL (the message does not quote it).
    """
    if database_url is not None:
        from .postgres import PostgresKeyStore  # psycopg is needed only here

        return PostgresKeyStore(database_url, seal, **options)
    directory = ensure_data_dir(Path(data_dir))
    return SqliteKeyStore(directory / DATABASE_FILE, seal, **options)


def load_master_key_for(settings: Settings, *, create: bool = True) -> memoryview:
    """The file seal's master key from where ``settings`` say (:func:`app.seal.file.load_master_key_for`).

    Raises:
        MasterKeyError: see :func:`app.seal.file.load_master_key_for`.
    """
    return _load_master_key_for(settings, create=create)[0]


def open_keystore_for(settings: Settings, seal: Seal | bytes | None = None) -> KeyStore:
    """Open the keystore ``settings`` select, with ``seal`` (``None``: :func:`app.seal.open_seal`).

    ``settings.database_url`` set: the PostgreSQL keystore (a file seal's master key must then be given in
    ``master_key`` or ``master_key_file``: a generated one would differ per replica). Unset: the SQLite
    keystore in ``data_dir``. Deleted names are held for ``settings.effective_tombstone_seconds``; the
    shortest ``auto_rotate_period`` is ``settings.auto_rotate_min_period``.

    Raises:
        MasterKeyError: the seal cannot be opened, or does not open the keystore.
        KeystoreSchemaError, ServiceUnavailableError, ValueError: see :func:`open_keystore`.
    """
    chosen = seal if seal is not None else open_seal(settings)
    database_url = settings.database_url.get_secret_value() if settings.database_url else None
    return open_keystore(
        settings.data_dir,
        chosen,
        database_url,
        tombstone_seconds=settings.effective_tombstone_seconds,
        auto_rotate_min_period=settings.auto_rotate_min_period,
    )

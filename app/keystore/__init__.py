"""Keystream's keystore: named AES keys with versions, stored wrapped under a master key, and API tokens.

>>> from pathlib import Path
>>> master_key = load_or_create_master_key(Path("data"), None)   # doctest: +SKIP
>>> store = open_keystore(Path("data"), master_key)              # doctest: +SKIP
>>> store.create_key("orders", "aes256").latest_version           # doctest: +SKIP
1

See :mod:`app.keystore.base` for the interface, :mod:`app.keystore.checks` for the validation rules,
:mod:`app.keystore.sqlite` for the SQLite implementation and :mod:`app.keystore.master` for the master key
and key wrapping.
"""

from __future__ import annotations

from pathlib import Path

from .base import KeyInfo, KeyStore, KeyVersionInfo, TokenRecord
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
from .master import KeyUnwrapError, MasterKeyError, ensure_data_dir, load_or_create_master_key
from .sqlite import DATABASE_FILE, SCHEMA_VERSION, KeystoreSchemaError, SqliteKeyStore

__all__ = [
    "ALLOWED_SEGMENT_SIZES",
    "DATABASE_FILE",
    "DEFAULT_SEGMENT_SIZE",
    "KEY_NAME_PATTERN",
    "KEY_TYPES",
    "MAX_SEGMENT_SIZE",
    "MIN_SEGMENT_SIZE",
    "SCHEMA_VERSION",
    "KeyInfo",
    "KeyStore",
    "KeyUnwrapError",
    "KeyVersionInfo",
    "KeystoreSchemaError",
    "MasterKeyError",
    "SqliteKeyStore",
    "TokenRecord",
    "check_key_name",
    "check_key_type",
    "check_segment_size",
    "load_or_create_master_key",
    "open_keystore",
]


def open_keystore(data_dir: Path, master_key: bytes) -> KeyStore:
    """Open (creating if needed) the SQLite keystore ``data_dir/keystore.db`` in WAL mode.

    ``data_dir`` is created with mode 0700 if missing; the database file is created 0600.

    Raises:
        MasterKeyError: ``master_key`` is not 32 bytes, is not the key the keystore was created with, or the
            data directory is unusable.
        KeystoreSchemaError: the database comes from a newer Keystream release.
        ServiceUnavailableError: the database cannot be opened.
    """
    directory = ensure_data_dir(Path(data_dir))
    return SqliteKeyStore(directory / DATABASE_FILE, master_key)

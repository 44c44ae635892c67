"""``keystream-server keystore copy SRC DST``: copy keys, versions and tokens between keystores.

SRC and DST are each a ``postgresql://`` URL or a SQLite keystore: a data directory (the
``KEYSTREAM_DATA_DIR`` of ``serve``, holding ``keystore.db``) or the database file itself. The master key
comes from ``KEYSTREAM_MASTER_KEY`` or ``KEYSTREAM_MASTER_KEY_FILE``, as for ``serve``; when neither is set,
the ``master.key`` of a SQLite data directory among SRC and DST is used (never generated). Both keystores
must have been created with that master key. The copy itself is :func:`app.keystore.copy.copy_keystore`:
all or nothing, idempotent, never overwriting a key whose material differs.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.admin._common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, UsageError, error

if TYPE_CHECKING:
    from app.keystore import KeyStore
    from app.seal import Seal

__all__ = ["add_parser", "cmd_copy"]


def add_parser(commands: Any) -> None:
    """Register ``keystore copy`` on the ``keystream-server`` subcommands."""
    keystore = commands.add_parser(
        "keystore", help="keystore maintenance: copy between SQLite and PostgreSQL"
    )
    actions = keystore.add_subparsers(dest="keystore_command", metavar="ACTION", required=True)
    copy = actions.add_parser(
        "copy",
        help="copy every key, version and token from SRC into DST",
        description="Copy every key (wrapped material as stored, verified under the master key), version "
        "and token from SRC into DST, in one transaction. Keys and tokens already in DST and identical are "
        "skipped, so running it again is safe; if DST has one that differs, nothing is copied. SRC, DST: a "
        "postgresql:// URL, a SQLite data directory (KEYSTREAM_DATA_DIR) or a keystore.db file. The master "
        "key: KEYSTREAM_MASTER_KEY or KEYSTREAM_MASTER_KEY_FILE, else the master.key of a SQLite data "
        "directory given.",
        epilog="exit codes: 0 copied (or nothing to copy), 1 conflict or keystore failure (nothing copied), "
        "2 usage, master key missing or not matching a keystore",
    )
    copy.add_argument("source", metavar="SRC", help="keystore to read")
    copy.add_argument("target", metavar="DST", help="keystore to write")
    copy.set_defaults(handler=cmd_copy)


def _is_url(location: str) -> bool:
    from app.core.database_url import DATABASE_URL_SCHEMES

    scheme, separator, _ = location.partition("://")
    return bool(separator) and scheme.lower() in DATABASE_URL_SCHEMES


def _sqlite_file(location: str, *, must_exist: bool) -> Path:
    """The SQLite database file that ``location`` names (a data directory or the file).

    Raises:
        UsageError: ``must_exist`` and there is no keystore there.
    """
    from app.keystore import DATABASE_FILE
    from app.keystore.master import ensure_data_dir

    path = Path(location)
    if path.is_file() or (not path.is_dir() and path.suffix == ".db"):
        if not must_exist and not path.parent.is_dir():
            raise UsageError(f"cannot create {location}: its directory does not exist")
        database = path
    else:
        database = path / DATABASE_FILE
        if not must_exist:
            ensure_data_dir(path)  # a data directory as serve makes it: created 0700 if missing
    if must_exist and not database.is_file():
        raise UsageError(f"no SQLite keystore at {location} (expected a data directory or a .db file)")
    return database


def _seal(locations: tuple[str, str]) -> Seal:
    """The seal of both keystores: ``KEYSTREAM_SEAL=pkcs11`` opens the token as ``serve`` does; else the file
    seal over the master key from the environment, else from a SQLite data directory's ``master.key``.

    Raises:
        MasterKeyError: both variables set, a malformed key or an unusable file; the token refuses.
        UsageError: no master key anywhere, or bad ``KEYSTREAM_*`` settings for the pkcs11 seal.
    """
    from app.seal import FileSeal

    if os.environ.get("KEYSTREAM_SEAL", "").strip().lower() == "pkcs11":
        from pydantic import ValidationError

        from app.core.config import Settings, describe_settings_error
        from app.seal import open_seal

        try:
            settings = Settings()
        except ValidationError as exc:
            raise UsageError(f"invalid settings: {describe_settings_error(exc)}") from None
        return open_seal(settings)
    return FileSeal(*_master_key(locations))


def _master_key(locations: tuple[str, str]) -> tuple[memoryview, str]:
    """The master key from the environment, else from a SQLite data directory's ``master.key``, and where.

    Raises:
        MasterKeyError: both variables set, a malformed key or an unusable file.
        UsageError: no master key anywhere.
    """
    from app.keystore.master import (
        MASTER_KEY_FILE,
        check_master_key_source,
        parse_master_key,
        read_master_key_file,
    )

    env_value = os.environ.get("KEYSTREAM_MASTER_KEY") or None
    key_file = os.environ.get("KEYSTREAM_MASTER_KEY_FILE") or None
    check_master_key_source(env_value, Path(key_file) if key_file else None, shared_database=False)
    if env_value is not None:
        return parse_master_key(env_value, "KEYSTREAM_MASTER_KEY"), "KEYSTREAM_MASTER_KEY"
    if key_file is not None:
        return read_master_key_file(Path(key_file)), key_file
    for location in locations:
        if not _is_url(location) and (Path(location) / MASTER_KEY_FILE).is_file():
            path = Path(location) / MASTER_KEY_FILE
            return read_master_key_file(path), str(path)
    raise UsageError("no master key: set KEYSTREAM_MASTER_KEY or KEYSTREAM_MASTER_KEY_FILE (as for serve)")


@contextlib.contextmanager
def _opened(location: str, seal: Seal, *, must_exist: bool) -> Iterator[tuple[KeyStore, str]]:
    """The keystore at ``location`` (closed afterwards) and its description, which never has a password."""
    from app.core.database_url import describe_database_url
    from app.keystore import SqliteKeyStore
    from app.keystore.postgres import PostgresKeyStore

    store: KeyStore
    if _is_url(location):
        store = PostgresKeyStore(location, seal, pool_size=2)
        description = describe_database_url(location)
    else:
        path = _sqlite_file(location, must_exist=must_exist)
        store = SqliteKeyStore(path, seal)
        description = str(path)
    try:
        yield store, description
    finally:
        store.close()


def cmd_copy(args: argparse.Namespace) -> int:
    """Copy SRC into DST and print a one-line summary.

    Returns:
        ``EXIT_OK`` when DST now holds every key and token of SRC; ``EXIT_FAILED`` when DST has conflicting
        keys or tokens, a version does not unwrap, or a database cannot serve (nothing written);
        ``EXIT_USAGE`` when the master key is missing, malformed or does not open a keystore, or a keystore
        comes from a newer release. Errors are one line on stderr, without URLs' passwords or key material.

    Raises:
        UsageError: SRC is not a keystore, or no master key is given.
    """
    from app.errors import KeystreamError
    from app.keystore import KeystoreSchemaError, MasterKeyError
    from app.keystore.copy import copy_keystore

    # The error line below says it once; the pool's and the store's own connection warnings would repeat it
    # over several lines (they are for a server's log). The master-key module's warnings (a data directory
    # made 0700) stay.
    for name in ("psycopg", "app.keystore.postgres", "app.keystore.sqlite"):
        logging.getLogger(name).setLevel(logging.CRITICAL)
    try:
        seal = _seal((args.source, args.target))
        try:
            with (
                _opened(args.source, seal, must_exist=True) as (source, source_name),
                _opened(args.target, seal, must_exist=False) as (target, target_name),
            ):
                summary = copy_keystore(source, target)
                print(f"{source_name} -> {target_name}: {summary.describe()}")
        finally:
            seal.close()
    except (MasterKeyError, KeystoreSchemaError, ValueError) as exc:
        # ValueError: a malformed URL (its message never quotes the URL).
        error(f"cannot copy: {exc}")
        return EXIT_USAGE
    except KeystreamError as exc:
        error(f"cannot copy: {exc}")
        return EXIT_FAILED
    return EXIT_OK

"""The SQLite keystore: one file, WAL mode, usable from threads and from several worker processes at once.

Concurrency model:

* Connections come from a small pool (one connection is never used by two threads at once), so readers in
  different threads run in parallel; WAL lets them read while a writer commits.
* Every change is one ``BEGIN IMMEDIATE`` transaction: it takes SQLite's write lock up front, so two writers
  (threads or processes) queue on ``busy_timeout`` instead of failing half-way or losing an update. A
  read-modify-write such as rotation therefore always sees the latest version number.
* Multi-statement reads run in one deferred transaction, so a key's row and its versions are one snapshot.
* A store opened before ``fork()`` stays usable in the child: the child opens its own connections and
  never touches the inherited ones (SQLite forbids carrying a connection across ``fork``).

The schema is versioned: :data:`MIGRATIONS` are applied in order at open (under the write lock, so several
workers starting together migrate once); ``PRAGMA user_version`` holds the current version and the
``schema_version`` table records when each migration ran. A database from a newer release is refused.

Deleted rows are overwritten (``secure_delete``), but copies of wrapped material may remain in the WAL file
until the next checkpoint; they are wrapped under the master key, like every stored copy.

Every change appends to the change log in its own transaction, and a delete leaves a tombstone
(:mod:`.changes`).

The package: :mod:`.schema` (migrations), :mod:`.connections` (the pool and transactions), :mod:`.keys`,
:mod:`.tokens` and :mod:`.changes` (the SQL of each table), :mod:`.watch` (change hints) and :mod:`.store`
(:class:`SqliteKeyStore`, the storage methods of the :class:`~app.keystore.base.KeyStore` template, which
validates arguments). :mod:`app.keystore.postgres` uses the same module names for the same jobs.
"""

from __future__ import annotations

from .connections import DATABASE_FILE, DATABASE_MODE
from .schema import MIGRATIONS, SCHEMA_VERSION, KeystoreSchemaError, Migration
from .store import SqliteKeyStore

__all__ = [
    "DATABASE_FILE",
    "DATABASE_MODE",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "KeystoreSchemaError",
    "Migration",
    "SqliteKeyStore",
]

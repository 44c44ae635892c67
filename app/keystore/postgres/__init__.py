"""The PostgreSQL keystore, for several replicas sharing one database (``KEYSTREAM_DATABASE_URL``).

>>> store = PostgresKeyStore("postgresql://ks:secret@db:5432/keystream", master_key)   # doctest: +SKIP
>>> store.rotate_key("orders").latest_version                                           # doctest: +SKIP
2
>>> changes, latest, trimmed = store.changes_since(0)                                   # doctest: +SKIP

Modules, named as in :mod:`app.keystore.sqlite` for the same jobs: :mod:`.store` (the
:class:`PostgresKeyStore`), :mod:`.connections` (pool, retries, outage errors, with the circuit breaker of
:mod:`.breaker`), :mod:`.schema` (migrations under an advisory lock, master-key check), :mod:`.keys` and
:mod:`.tokens` (SQL), :mod:`.changes` (the ordered change log) and :mod:`.watch` (``LISTEN`` for change
hints); :mod:`app.core.database_url` keeps URLs out of messages.
Importing this package does not import psycopg; opening a store does.
"""

from __future__ import annotations

from app.core.database_url import check_database_url, describe_database_url

from .changes import CHANGE_KINDS, Change, ChangeBatch
from .schema import MIGRATIONS, SCHEMA_VERSION
from .store import PostgresKeyStore

__all__ = [
    "CHANGE_KINDS",
    "MIGRATIONS",
    "SCHEMA_VERSION",
    "Change",
    "ChangeBatch",
    "PostgresKeyStore",
    "check_database_url",
    "describe_database_url",
]

"""What both keystores' versioned schemas are made of: a :class:`Migration` step and the error for a database
newer than this release (:class:`KeystoreSchemaError`).

Each implementation keeps its own list of steps (:mod:`app.keystore.sqlite.schema`,
:mod:`app.keystore.postgres.schema`) in its own SQL dialect and applies the ones newer than the database at
open. What the two lists must agree on is here, once: which change kinds the change log accepted at each
schema version and the schemes, as the SQL lists their ``CHECK`` constraints hold, and the steps whose SQL
is the same in both dialects (versions 3 and 5), and the key types each version's ``CHECK`` allows (version 8
added ``aes256-siv``). The other steps differ in types (``bytea`` and
``timestamptz`` against ``BLOB`` and ``TEXT``) and in how a ``CHECK`` is changed (SQLite rebuilds the table).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from app.core.schemes import DEFAULT_SCHEME, SCHEMES

from .changes import CHANGE_KINDS, MASTER_KEY_ROTATED, NAMELESS_KINDS
from .checks import KEY_TYPES

__all__ = [
    "CHANGE_KINDS_SQL",
    "CHANGE_KINDS_V1_SQL",
    "CHANGE_KINDS_V4_SQL",
    "CHANGE_KINDS_V6_SQL",
    "KEY_AUTO_ROTATE_PERIOD",
    "KEY_SCHEME",
    "KEY_TYPES_SQL",
    "KEY_TYPES_V1_SQL",
    "NAMELESS_KINDS_SQL",
    "SCHEMES_SQL",
    "KeystoreSchemaError",
    "Migration",
    "sql_list",
]


def sql_list(values: Iterable[str]) -> str:
    """``values`` as the quoted, comma-separated list of an SQL ``IN (...)`` (constants only, never input)."""
    return ", ".join(f"'{value}'" for value in values)


#: The change kinds before schema version 7 (which added the role and auth config kinds), 6 (which added
#: ``master_key_rotated``) and 4 (``token_renewed``).
_KINDS_BEFORE_7 = CHANGE_KINDS[: CHANGE_KINDS.index(MASTER_KEY_ROTATED) + 1]
_KINDS_BEFORE_6 = tuple(kind for kind in _KINDS_BEFORE_7 if kind != MASTER_KEY_ROTATED)
_KINDS_BEFORE_4 = tuple(kind for kind in _KINDS_BEFORE_6 if kind != "token_renewed")
#: The change log's allowed kinds from its creation (schema version 1 on PostgreSQL, 2 on SQLite) to 3.
CHANGE_KINDS_V1_SQL = sql_list(_KINDS_BEFORE_4)
#: ... from schema version 4 to 5.
CHANGE_KINDS_V4_SQL = sql_list(_KINDS_BEFORE_6)
#: ... at schema version 6.
CHANGE_KINDS_V6_SQL = sql_list(_KINDS_BEFORE_7)
#: ... from schema version 7.
CHANGE_KINDS_SQL = sql_list(CHANGE_KINDS)
#: The kinds whose change-log row names neither a key nor a token (schema version 7 on).
NAMELESS_KINDS_SQL = sql_list(NAMELESS_KINDS)
#: The key types the ``keys`` table allowed from schema version 1 to 7 (written out: this list never changes).
KEY_TYPES_V1_SQL = sql_list(("aes128", "aes192", "aes256"))
#: ... from schema version 8 (which added ``aes256-siv``).
KEY_TYPES_SQL = sql_list(KEY_TYPES)
#: A key's allowed schemes (schema version 3 on).
SCHEMES_SQL = sql_list(SCHEMES)


@dataclass(frozen=True)
class Migration:
    """One schema step: the statements that take the database from ``version - 1`` to ``version``."""

    version: int
    description: str
    statements: tuple[str, ...]


class KeystoreSchemaError(RuntimeError):
    """The database's schema version is newer than this release understands."""


#: Schema version 3 of both stores: each key's sealed scheme; keys stored before it keep ``ctr-hmac``, the
#: only format they can have (the same SQL in both dialects).
KEY_SCHEME = Migration(
    3,
    "the sealed scheme of each key (existing keys: ctr-hmac)",
    (
        f"""ALTER TABLE keys ADD COLUMN scheme TEXT NOT NULL DEFAULT '{DEFAULT_SCHEME}'
            CHECK (scheme IN ({SCHEMES_SQL}))""",
    ),
)
#: Schema version 5 of both stores: each key's automatic rotation period in seconds (0: off, what keys
#: stored before it get; the same SQL in both dialects).
KEY_AUTO_ROTATE_PERIOD = Migration(
    5,
    "automatic rotation period of each key (existing keys: 0, off)",
    (
        "ALTER TABLE keys ADD COLUMN auto_rotate_period INTEGER NOT NULL DEFAULT 0 "
        "CHECK (auto_rotate_period >= 0)",
    ),
)

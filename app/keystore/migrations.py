"""What both keystores' versioned schemas are made of: a :class:`Migration` step and the error for a database
newer than this release (:class:`KeystoreSchemaError`).

Each implementation keeps its own list of steps (:mod:`app.keystore.sqlite.schema`,
:mod:`app.keystore.postgres.schema`) and applies the ones newer than the database at open.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KeystoreSchemaError", "Migration"]


@dataclass(frozen=True)
class Migration:
    """One schema step: the statements that take the database from ``version - 1`` to ``version``."""

    version: int
    description: str
    statements: tuple[str, ...]


class KeystoreSchemaError(RuntimeError):
    """The database's schema version is newer than this release understands."""

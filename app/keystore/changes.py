"""The change log's records, shared by both keystores: what :meth:`KeyStore.changes_since` returns.

Every change to a key, token or login role (create, import, rotate, PATCH, delete, token create/revoke/renew,
role write/delete), every write of an auth method's configuration (``auth_config_written``), and each
start and end of a master key rotation (``master_key_rotated``: a row naming neither a key nor a token; other
processes reload their keyring, :mod:`app.keystore.generations`), appends one row to an ordered log in the
change's own transaction, so a change and its row commit together or not at all.
Numbers grow in commit order (SQLite: one writer at a time; PostgreSQL: appends serialized by an advisory
lock), so a reader that has seen number *n* has seen every change below it. A replica remembers the last
number it applied and asks for what came after (see :mod:`app.services.coherence`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

from app.errors import BadRequestError

from .checks import check_integer

__all__ = [
    "AUTH_CONFIG_WRITTEN",
    "CHANGE_KINDS",
    "MASTER_KEY_ROTATED",
    "MAX_CHANGES_PER_CALL",
    "NAMELESS_KINDS",
    "Change",
    "ChangeBatch",
    "check_since_arguments",
]

#: What a change did; ``key_*`` rows name a key, ``token_*`` rows a token id, ``role_*`` rows a login role.
CHANGE_KINDS: tuple[str, ...] = (
    "key_created",
    "key_imported",
    "key_rotated",
    "key_updated",
    "key_deleted",
    "token_created",
    "token_deleted",
    "token_renewed",
    "master_key_rotated",
    "role_written",
    "role_deleted",
    "auth_config_written",
)
#: A change that names neither a key nor a token: a master key generation made or retired.
MASTER_KEY_ROTATED = "master_key_rotated"
#: A change that names nothing either: an auth method's configuration was written.
AUTH_CONFIG_WRITTEN = "auth_config_written"
#: The kinds whose rows name nothing; every other row names exactly one key, token or role.
NAMELESS_KINDS: tuple[str, ...] = (MASTER_KEY_ROTATED, AUTH_CONFIG_WRITTEN)
#: Most changes one ``changes_since`` call returns.
MAX_CHANGES_PER_CALL = 10_000


@dataclass(frozen=True)
class Change:
    """One change: its sequence number, what happened, to which key, token or role, and when (UTC)."""

    seq: int
    kind: str
    key_name: str | None
    token_id: str | None
    at: datetime
    role_name: str | None = None

    def names_what_its_kind_needs(self) -> bool:
        """True when the row names exactly one key, token or role, or nothing for a nameless kind."""
        named = sum(name is not None for name in (self.key_name, self.token_id, self.role_name))
        return named == (0 if self.kind in NAMELESS_KINDS else 1)


class ChangeBatch(NamedTuple):
    """What ``changes_since`` returns; unpacks as ``changes, latest, trimmed``.

    ``latest`` is the number to ask from next time. ``trimmed`` is true when changes after the number asked
    for may be missing (the log was trimmed past it, or the database is behind it, e.g. restored from a
    backup, or the number is beyond the newest change): the caller must then drop every cache and continue
    from ``latest``; ``changes`` is empty.
    """

    changes: list[Change]
    latest: int
    trimmed: bool


def check_since_arguments(seq: int, limit: int) -> None:
    """Validate the arguments of ``changes_since``.

    Raises:
        BadRequestError: ``seq`` is not an int >= 0, or ``limit`` not an int >= 1.
    """
    check_integer("seq", seq)
    check_integer("limit", limit)
    if seq < 0 or limit < 1:
        raise BadRequestError(f"seq must be >= 0 and limit >= 1, got seq={seq}, limit={limit}")

"""Online rotation of the master key: a new generation under the same seal, every stored secret rewrapped in
batches while the service keeps serving. Shared by both keystores; they differ only in SQL dialect.

The keystore holds two tables (schema version 6):

* ``master_key_generations``: each generation >= 2 and its stored form (:mod:`app.seal.keyring`: a key
  wrapped under the seal's own key, or a token key's check value). Generation 1 is the seal's own key.
* ``master_key_rotation``: one row, the rotation's state: the newest ``generation`` (new blobs are wrapped
  under it), ``finished`` (no blob of an older generation is left and the older generations are retired),
  how many blobs this rotation ``rewrapped``, and a **lease** (``lease_owner``, ``lease_until``) renewed by
  every batch, so that one rotation runs at a time across processes and replicas.

A rotation (:class:`MasterRotation`) runs in short transactions:

1. :func:`begin`: when the last rotation finished, make generation N+1 and make it the newest (new key
   versions are wrapped under it from this commit on, in every process: a key write reads the newest
   generation in its own transaction, :func:`writing_keyring`); when it did not finish (its process died),
   resume it. Either way take the lease; a lease held by a live rotation refuses
   (:class:`MasterRotationRunningError`).
2. :func:`rewrap_batch`, repeated: the next ``batch_size`` key versions in key order; each wrapped under an
   older generation is unwrapped and wrapped again under the newest. Each batch commits on its own, so a
   process killed at any point leaves every blob whole under its old or its new generation, both readable.
3. :func:`finish`: the audit keys' material rewrapped, a last check that no blob of an older generation is
   left (a process that wrapped under one just before the rotation began is caught here and the batches run
   again), then the older generations >= 2 are retired (their stored forms deleted; the pkcs11 seal destroys
   their token keys afterwards). Generation 1, the seal's own key, stays: it wraps the later generations'
   keys and the keystore's check value.

Ciphertexts are never touched: only the wrapping of key versions changes, never their material. Both
:func:`begin` and :func:`finish` append a ``master_key_rotated`` change, so other processes reload their
keyring (:meth:`~app.seal.keyring.Keyring.invalidate`); a process meeting a blob of a generation it does not
know reloads it anyway.
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from app.errors import ConflictError
from app.seal import blob_origin
from app.seal.keyring import Keyring, KeyringState

from .changes import MASTER_KEY_ROTATED
from .master import (
    AUDIT_KEYS_ASSOCIATED_DATA,
    AUDIT_KEYS_ROW,
    WRAPPING_KEY_ASSOCIATED_DATA,
    WRAPPING_KEY_ROW,
    unwrap_key_material,
    wrap_key_material,
)
from .migrations import Migration
from .records import utc_now

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "GENERATIONS_SCHEMA_VERSION",
    "LEASE_SECONDS",
    "MASTER_KEY_ROTATED",
    "Connection",
    "Dialect",
    "MasterRotation",
    "MasterRotationRunningError",
    "MasterRotationStatus",
    "begin",
    "destroy_retired",
    "finish",
    "has_generations",
    "read_keyring",
    "read_status",
    "reset",
    "rewrap_batch",
    "writing_keyring",
]

#: Key versions rewrapped per transaction unless told otherwise.
DEFAULT_BATCH_SIZE = 500
#: Seconds a rotation's lease lasts after its last batch: a rotation whose process died can be resumed after.
LEASE_SECONDS = 10.0
#: The schema version (both keystores) that adds ``master_key_generations`` and ``master_key_rotation``.
GENERATIONS_SCHEMA_VERSION = 6


class MasterRotationRunningError(ConflictError):
    """Another rotation of the master key holds the lease (it is running, or died less than a lease ago)."""

    code = "master_rotation_running"


@dataclass(frozen=True)
class MasterRotationStatus:
    """Where the master key's rotation stands.

    ``generation`` is the newest generation (new blobs are wrapped under it); ``rotating`` is true until no
    blob of an older generation is left and those generations are retired; ``rewrapped`` counts the blobs the
    rotation rewrapped so far; ``resumed`` says the call resumed a rotation that had not finished.
    """

    generation: int
    rotating: bool
    rewrapped: int
    started_at: datetime | None
    finished_at: datetime | None
    lease_until: datetime | None = None
    resumed: bool = False

    def to_json(self) -> dict[str, Any]:
        """The API shape (times ISO 8601 UTC with ``Z``, or ``null``)."""

        def iso(moment: datetime | None) -> str | None:
            return None if moment is None else moment.isoformat().replace("+00:00", "Z")

        return {
            "generation": self.generation,
            "rotating": self.rotating,
            "rewrapped": self.rewrapped,
            "started_at": iso(self.started_at),
            "finished_at": iso(self.finished_at),
            "resumed": self.resumed,
        }


class Connection(Protocol):
    """What the shared SQL needs of a store's connection (``sqlite3`` and psycopg ones both have it)."""

    def execute(self, query: Any, params: Any = ..., /) -> Any: ...

    def cursor(self) -> Any: ...


@dataclass(frozen=True)
class Dialect:
    """How one keystore's SQL differs: its placeholder, how it stores times, and its row locks.

    ``key_share_lock`` is added to the read of the state row in every key write: PostgreSQL's
    ``FOR KEY SHARE`` lets key writes run together but makes :func:`begin`'s ``FOR UPDATE`` wait for them, so
    no key write that read the old newest generation commits after a new one was made. SQLite serializes
    writers anyway (empty strings). ``reseal_lock`` is a statement run first in a reseal's transaction, so
    that no other process adds a version under the old seal meanwhile (none for SQLite: one writer already).
    """

    placeholder: str
    to_db: Callable[[datetime], Any]
    from_db: Callable[[Any], datetime]
    key_share_lock: str = ""
    update_lock: str = ""
    lease_lock: str = ""
    reseal_lock: str = ""

    def sql(self, text: str, lock: str = "") -> str:
        """``text`` with ``?`` placeholders in this dialect, followed by the row ``lock`` clause if any."""
        return " ".join((text.replace("?", self.placeholder), lock)).strip()


_READ_STATE = (
    "SELECT generation, finished, rewrapped, started_at, finished_at, lease_owner, lease_until "
    "FROM master_key_rotation"
)
_READ_GENERATION = "SELECT generation FROM master_key_rotation"


def _time(dialect: Dialect, value: Any) -> datetime | None:
    return None if value is None else dialect.from_db(value)


def has_generations(migrations: Sequence[Migration]) -> bool:
    """True when a schema built by ``migrations`` has the generation tables (tests build older schemas)."""
    return bool(migrations) and migrations[-1].version >= GENERATIONS_SCHEMA_VERSION


def read_keyring(conn: Connection, dialect: Dialect, lock: str = "") -> KeyringState:
    """The keystore's keyring: the newest generation and every generation >= 2's stored form."""
    current = int(conn.execute(dialect.sql(_READ_GENERATION, lock)).fetchone()[0])
    rows = conn.execute(
        "SELECT generation, stored FROM master_key_generations ORDER BY generation"
    ).fetchall()
    return KeyringState(current, [(int(generation), bytes(stored)) for generation, stored in rows])


def writing_keyring(conn: Connection, dialect: Dialect, keyring: Keyring) -> Keyring:
    """``keyring``, brought up to the newest generation this transaction sees, for a key write to wrap with.

    Call inside the write transaction, before wrapping: the state row's read takes
    :attr:`Dialect.key_share_lock`, so a rotation cannot begin between it and the commit.
    """
    current = int(conn.execute(dialect.sql(_READ_GENERATION, dialect.key_share_lock)).fetchone()[0])
    if keyring.needs(current):
        keyring.install(read_keyring(conn, dialect))  # on this connection: never a second one from the pool
    return keyring


def read_status(conn: Connection, dialect: Dialect, lock: str = "") -> MasterRotationStatus:
    """The rotation's state row."""
    row = conn.execute(dialect.sql(_READ_STATE, lock)).fetchone()
    return MasterRotationStatus(
        generation=int(row[0]),
        rotating=not bool(row[1]),
        rewrapped=int(row[2]),
        started_at=_time(dialect, row[3]),
        finished_at=_time(dialect, row[4]),
        lease_until=_time(dialect, row[6]),
    )


def _claim(conn: Connection, dialect: Dialect, owner: str, lock: str) -> tuple[Any, datetime]:
    """The state row, locked, after checking that no other rotation holds the lease.

    Raises:
        MasterRotationRunningError: another owner's lease has not expired.
    """
    row = conn.execute(dialect.sql(_READ_STATE, lock)).fetchone()
    now = utc_now()
    holder, until = row[5], _time(dialect, row[6])
    if holder is not None and holder != owner and until is not None and until > now:
        seconds = max(1, int((until - now).total_seconds() + 0.999))
        raise MasterRotationRunningError(
            f"a rotation of the master key to generation {int(row[0])} is running (its lease ends in "
            f"{seconds} s; if its process died, run rotate-master again after that to resume it)"
        )
    return row, now


def resume(
    conn: Connection, dialect: Dialect, owner: str, lease_seconds: float
) -> MasterRotationStatus | None:
    """Take the lease of a rotation that did not finish (``resumed`` is true); ``None`` when every rotation
    finished (nothing is changed then).

    Raises:
        MasterRotationRunningError: another rotation holds the lease.
    """
    row, now = _claim(conn, dialect, owner, dialect.update_lock)
    if bool(row[1]):
        return None
    conn.execute(
        dialect.sql("UPDATE master_key_rotation SET lease_owner = ?, lease_until = ?"),
        (owner, dialect.to_db(now + timedelta(seconds=lease_seconds))),
    )
    return dataclasses.replace(read_status(conn, dialect), resumed=True)


def begin(
    conn: Connection, dialect: Dialect, keyring: Keyring, owner: str, lease_seconds: float
) -> tuple[MasterRotationStatus, bool]:
    """Start a rotation (a new generation) or resume one that did not finish; take the lease.

    Returns:
        The status, and whether a new generation was made (the caller appends the change).

    Raises:
        MasterRotationRunningError: another rotation holds the lease.
        SealError: the seal is sealed or cannot make a key.
    """
    resumed = resume(conn, dialect, owner, lease_seconds)
    if resumed is not None:
        return resumed, False
    row, now = _claim(conn, dialect, owner, dialect.update_lock)
    lease_until = now + timedelta(seconds=lease_seconds)
    generation = int(row[0]) + 1
    stored = keyring.create(generation)
    conn.execute(
        dialect.sql("INSERT INTO master_key_generations (generation, stored, created_at) VALUES (?, ?, ?)"),
        (generation, stored, dialect.to_db(now)),
    )
    conn.execute(
        dialect.sql(
            "UPDATE master_key_rotation SET generation = ?, finished = ?, rewrapped = 0, started_at = ?, "
            "finished_at = NULL, lease_owner = ?, lease_until = ?"
        ),
        (generation, False, dialect.to_db(now), owner, dialect.to_db(lease_until)),
    )
    return read_status(conn, dialect), True


def _needs_rewrap(blob: bytes, generation: int) -> bool:
    origin = blob_origin(blob)
    return origin is None or origin.generation != generation


def rewrap_batch(
    conn: Connection,
    dialect: Dialect,
    keyring: Keyring,
    owner: str,
    after: tuple[str, int] | None,
    limit: int,
    lease_seconds: float,
) -> tuple[tuple[str, int] | None, int]:
    """Rewrap, under the newest generation, the key versions of an older one among the ``limit`` versions
    after ``after`` in ``(key name, version)`` order; renew the lease.

    Returns:
        The last version looked at (``None`` when there were no more), and how many were rewrapped.

    Raises:
        MasterRotationRunningError: another rotation took the lease (this one's expired).
        KeyUnwrapError: a version does not unwrap (the batch writes nothing).
    """
    _claim(conn, dialect, owner, dialect.lease_lock)
    keyring = writing_keyring(conn, dialect, keyring)
    generation = keyring.generation
    select = "SELECT key_name, version, wrapped FROM key_versions"
    if after is None:
        rows = conn.execute(dialect.sql(f"{select} ORDER BY key_name, version LIMIT ?"), (limit,)).fetchall()
    else:
        rows = conn.execute(
            dialect.sql(f"{select} WHERE (key_name, version) > (?, ?) ORDER BY key_name, version LIMIT ?"),
            (after[0], after[1], limit),
        ).fetchall()
    rewrapped = 0
    for name, version, wrapped in rows:
        blob = bytes(wrapped)
        if not _needs_rewrap(blob, generation):
            continue
        material = unwrap_key_material(keyring, name, int(version), blob)
        conn.execute(
            dialect.sql("UPDATE key_versions SET wrapped = ? WHERE key_name = ? AND version = ?"),
            (wrap_key_material(keyring, name, int(version), material), name, version),
        )
        rewrapped += 1
    conn.execute(
        dialect.sql("UPDATE master_key_rotation SET rewrapped = rewrapped + ?, lease_until = ?"),
        (rewrapped, dialect.to_db(utc_now() + timedelta(seconds=lease_seconds))),
    )
    last = (str(rows[-1][0]), int(rows[-1][1])) if rows else None
    return last, rewrapped


def finish(
    conn: Connection, dialect: Dialect, keyring: Keyring, owner: str, lease_seconds: float
) -> tuple[MasterRotationStatus, list[int]]:
    """Rewrap the audit keys' material and the import wrapping key, then retire the older generations if no
    blob uses them any more.

    Returns:
        The status (still ``rotating`` when a blob of an older generation was found: run the batches
        again), and the generations retired (for the seal to destroy what they left outside the keystore).

    Raises:
        MasterRotationRunningError: another rotation took the lease.
    """
    _claim(conn, dialect, owner, dialect.lease_lock)
    keyring = writing_keyring(conn, dialect, keyring)
    generation = keyring.generation
    audit = conn.execute(dialect.sql("SELECT value FROM meta WHERE name = ?"), (AUDIT_KEYS_ROW,)).fetchone()
    if audit is not None and _needs_rewrap(bytes(audit[0]), generation):
        material = keyring.unwrap_secret(bytes(audit[0]), AUDIT_KEYS_ASSOCIATED_DATA)  # locked memory
        conn.execute(
            dialect.sql("UPDATE meta SET value = ? WHERE name = ?"),
            (keyring.wrap(material, AUDIT_KEYS_ASSOCIATED_DATA), AUDIT_KEYS_ROW),
        )
    wrapping = conn.execute(
        dialect.sql("SELECT value FROM meta WHERE name = ?"), (WRAPPING_KEY_ROW,)
    ).fetchone()
    if wrapping is not None and _needs_rewrap(bytes(wrapping[0]), generation):
        private_der = keyring.unwrap(bytes(wrapping[0]), WRAPPING_KEY_ASSOCIATED_DATA)
        conn.execute(
            dialect.sql("UPDATE meta SET value = ? WHERE name = ?"),
            (keyring.wrap(private_der, WRAPPING_KEY_ASSOCIATED_DATA), WRAPPING_KEY_ROW),
        )
    left = sum(
        1
        for (wrapped,) in conn.execute("SELECT wrapped FROM key_versions")
        if _needs_rewrap(bytes(wrapped), generation)
    )
    if left:
        return read_status(conn, dialect), []
    retired = [
        int(row[0])
        for row in conn.execute(
            dialect.sql("SELECT generation FROM master_key_generations WHERE generation < ?"), (generation,)
        ).fetchall()
    ]
    conn.execute(dialect.sql("DELETE FROM master_key_generations WHERE generation < ?"), (generation,))
    conn.execute(
        dialect.sql(
            "UPDATE master_key_rotation SET finished = ?, finished_at = ?, lease_owner = NULL, "
            "lease_until = NULL"
        ),
        (True, dialect.to_db(utc_now())),
    )
    return read_status(conn, dialect), retired


def destroy_retired(keyring: Keyring, retired: list[int]) -> None:
    """After :func:`finish` committed: have the seal destroy what the ``retired`` generations left outside
    the keystore (the pkcs11 seal's token keys), and reload the keyring (which forgets them)."""
    keyring.invalidate()
    for generation in retired:
        keyring.root.destroy_generation(generation)


def reset(conn: Connection, dialect: Dialect) -> None:
    """Forget every generation >= 2 (``migrate-seal`` rewrapped all under the new seal's generation 1)."""
    conn.execute("DELETE FROM master_key_generations")
    conn.execute(
        dialect.sql(
            "UPDATE master_key_rotation SET generation = 1, finished = ?, rewrapped = 0, started_at = NULL, "
            "finished_at = NULL, lease_owner = NULL, lease_until = NULL"
        ),
        (True,),
    )


class _RotatingStore(Protocol):
    def begin_master_rotation(self, owner: str, lease_seconds: float) -> MasterRotationStatus: ...

    def resume_master_rotation(self, owner: str, lease_seconds: float) -> MasterRotationStatus | None: ...

    def rewrap_master_batch(
        self, owner: str, after: tuple[str, int] | None, limit: int, lease_seconds: float
    ) -> tuple[str, int] | None: ...

    def finish_master_rotation(self, owner: str, lease_seconds: float) -> MasterRotationStatus: ...


class MasterRotation:
    """One run of ``rotate-master`` against a keystore: :meth:`begin`, then :meth:`run` to the end.

    Args:
        store: the keystore.
        batch_size: key versions per transaction (>= 1).
        lease_seconds: how long the lease lasts after each batch.

    Raises:
        ValueError: ``batch_size`` < 1.
    """

    def __init__(
        self,
        store: _RotatingStore,
        batch_size: int = DEFAULT_BATCH_SIZE,
        lease_seconds: float = LEASE_SECONDS,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self._store = store
        self.batch_size = batch_size
        self.lease_seconds = lease_seconds
        self.owner = secrets.token_hex(8)

    def begin(self) -> MasterRotationStatus:
        """Make the new generation (or resume an unfinished rotation) and take the lease.

        Raises:
            MasterRotationRunningError: another rotation holds the lease.
            SealError: the seal is sealed or cannot make a key.
            ServiceUnavailableError: the keystore cannot serve now.
        """
        return self._store.begin_master_rotation(self.owner, self.lease_seconds)

    def resume(self) -> MasterRotationStatus | None:
        """Take over a rotation whose process died (its lease ran out); ``None`` when none is unfinished.

        Raises:
            MasterRotationRunningError: another rotation holds the lease.
            ServiceUnavailableError: the keystore cannot serve now.
        """
        return self._store.resume_master_rotation(self.owner, self.lease_seconds)

    def run(self, stop: Callable[[], bool] = lambda: False) -> MasterRotationStatus | None:
        """Rewrap every batch, then retire the older generations; ``None`` when ``stop()`` became true
        (the rotation resumes at the next ``rotate-master`` once its lease ran out).

        Raises:
            MasterRotationRunningError: the lease was lost (this run stalled longer than a lease).
            KeyUnwrapError: a stored version does not unwrap: the rotation stops unfinished; every blob stays
                readable under its own generation.
            SealError, ServiceUnavailableError: the seal or the keystore fails.
        """
        while True:
            after: tuple[str, int] | None = None
            while True:
                if stop():
                    return None
                after = self._store.rewrap_master_batch(
                    self.owner, after, self.batch_size, self.lease_seconds
                )
                if after is None:
                    break
            status = self._store.finish_master_rotation(self.owner, self.lease_seconds)
            if not status.rotating:
                return status

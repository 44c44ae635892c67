"""Moving a keystore from one seal to another: every stored secret rewrapped, all or nothing.

:meth:`~app.keystore.base.KeyStore.reseal` runs these inside **one** write transaction of the store:

* :func:`rewrap_versions` unwraps every stored key version under the current seal and wraps it under the
  target. Every version is unwrapped before anything is written, so one version that does not unwrap refuses
  the whole move (``KeyUnwrapError`` naming it) and the transaction writes nothing.
* :func:`resealed_meta` makes the target's check value and the audit keys' material wrapped under the target.
  The material is what the current seal gave (stored, or derived by a file seal), so audit logs written before
  the move keep verifying after it. A target with public parameters (the shamir seal's share set) stores them
  in the same transaction; moving to a seal without any deletes the old seal's, so no row describes shares
  that open nothing.
* The import wrapping key, when one was made, is rewrapped under the target
  (:func:`app.keystore.wrapping_key.rewrap_wrapping_key`).

A process killed in the middle leaves the transaction uncommitted: the keystore stays wholly under the old
seal, and running the move again finishes it.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.seal import Seal
from app.seal.keyring import Keyring

from . import generations
from .master import (
    AUDIT_KEYS_ASSOCIATED_DATA,
    AUDIT_KEYS_ROW,
    AUDIT_KEYS_SIZE,
    CHECK_ROW,
    SEAL_PARAMETERS_ROW,
    make_master_key_check,
    unwrap_key_material,
    wrap_key_material,
)
from .wrapping_key import rewrap_wrapping_key

__all__ = ["reseal_rows", "resealed_meta", "rewrap_versions"]


def rewrap_versions(
    source: Seal | Keyring, target: Seal, rows: Iterable[tuple[str, int, bytes]]
) -> list[tuple[str, int, bytes]]:
    """``(name, version, wrapped)`` rows rewrapped from ``source`` (a keyring: each row under its own
    generation) to ``target``, in the same order.

    Raises:
        KeyUnwrapError: a version does not unwrap under ``source`` (the message names the key and version).
        SealError: a seal's device fails.
    """
    materials = [
        (name, version, unwrap_key_material(source, name, version, blob)) for name, version, blob in rows
    ]
    return [
        (name, version, wrap_key_material(target, name, version, material))
        for name, version, material in materials
    ]


def resealed_meta(target: Seal, audit_material: bytes | memoryview) -> dict[str, bytes | None]:
    """The ``meta`` rows a keystore holds under ``target``: its check value, the audit keys' material and the
    seal's public parameters; ``None`` for a row to delete (the parameters, when ``target`` has none).

    Raises:
        ValueError: ``audit_material`` is not 64 bytes.
        SealError: the seal's device fails.
    """
    if len(audit_material) != AUDIT_KEYS_SIZE:
        raise ValueError(f"audit key material must be {AUDIT_KEYS_SIZE} bytes, got {len(audit_material)}")
    return {
        CHECK_ROW: make_master_key_check(target),
        AUDIT_KEYS_ROW: target.wrap(audit_material, AUDIT_KEYS_ASSOCIATED_DATA),
        SEAL_PARAMETERS_ROW: target.public_parameters(),
    }


def reseal_rows(
    conn: generations.Connection,
    dialect: generations.Dialect,
    source: Keyring,
    target: Seal,
    audit_material: bytes | memoryview,
) -> int:
    """Rewrite, in the caller's write transaction, every key version and ``meta`` row from ``source`` to
    ``target`` (:func:`rewrap_versions`, :func:`resealed_meta`, the import wrapping key) and forget the
    generations of earlier rotations; return how many key versions were rewrapped.

    Raises:
        KeyUnwrapError: a version does not unwrap under ``source``; nothing was written.
        SealError: a seal's device fails.
    """
    if dialect.reseal_lock:
        conn.execute(dialect.reseal_lock)
    stored = conn.execute("SELECT key_name, version, wrapped FROM key_versions ORDER BY 1, 2").fetchall()
    rewrapped = rewrap_versions(
        source, target, [(name, version, bytes(blob)) for name, version, blob in stored]
    )
    conn.cursor().executemany(
        dialect.sql("UPDATE key_versions SET wrapped = ? WHERE key_name = ? AND version = ?"),
        [(blob, name, version) for name, version, blob in rewrapped],
    )
    for name, value in resealed_meta(target, audit_material).items():
        if value is None:
            conn.execute(dialect.sql("DELETE FROM meta WHERE name = ?"), (name,))
            continue
        conn.execute(
            dialect.sql(
                "INSERT INTO meta (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value"
            ),
            (name, value),
        )
    rewrap_wrapping_key(conn, dialect, source, target)
    generations.reset(conn, dialect)
    return len(rewrapped)

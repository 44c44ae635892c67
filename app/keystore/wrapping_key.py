"""The service's import wrapping key (wrapped key import, "bring your own key"), stored under the seal.

One private key per keystore, so every worker and replica hands out the same public key: it lives in the
``meta`` row :data:`WRAPPING_KEY_ROW`, wrapped under the master key (the keyring's newest generation when
written) and bound to its role by :data:`WRAPPING_KEY_ASSOCIATED_DATA`. The keystore treats it as opaque
bytes (PKCS#8 DER: :mod:`app.formats.wrapped_import` makes and reads it). It is written once, by whoever
asks first (``INSERT ... ON CONFLICT DO NOTHING``: one writer wins, the others read the winner's), never
replaced; a master key rotation (:func:`app.keystore.generations.finish`), a reseal
(:func:`app.keystore.reseal.reseal_rows`) and a keystore copy (:mod:`app.keystore.copy`) rewrap it like key
material. It never appears in an error, a log line or a ``repr``.
"""

from __future__ import annotations

from app.seal import Seal, SealUnwrapError
from app.seal.keyring import Keyring

from .generations import Connection, Dialect
from .master import WRAPPING_KEY_ASSOCIATED_DATA, WRAPPING_KEY_ROW, KeyUnwrapError

__all__ = [
    "WRAPPING_KEY_ASSOCIATED_DATA",
    "WRAPPING_KEY_ROW",
    "insert_wrapping_key",
    "open_wrapping_key",
    "read_wrapping_key",
    "rewrap_wrapping_key",
]


def read_wrapping_key(conn: Connection, dialect: Dialect) -> bytes | None:
    """The stored (wrapped) wrapping key, or ``None`` when none was made yet."""
    row = conn.execute(dialect.sql("SELECT value FROM meta WHERE name = ?"), (WRAPPING_KEY_ROW,)).fetchone()
    return None if row is None else bytes(row[0])


def insert_wrapping_key(
    conn: Connection, dialect: Dialect, keyring: Keyring, private_der: bytes | memoryview
) -> None:
    """Store ``private_der`` wrapped under ``keyring`` (the store's writing keyring, at the newest generation
    this transaction sees), unless a wrapping key is stored already (then nothing changes: the first one
    stays). Call inside a write transaction."""
    conn.execute(
        dialect.sql("INSERT INTO meta (name, value) VALUES (?, ?) ON CONFLICT (name) DO NOTHING"),
        (WRAPPING_KEY_ROW, keyring.wrap(private_der, WRAPPING_KEY_ASSOCIATED_DATA)),
    )


def open_wrapping_key(seal: Seal | Keyring, stored: bytes) -> bytes:
    """The wrapping key's PKCS#8 DER from its stored blob.

    It comes back as ``bytes`` (about 2.4 KB, more than a locked secret buffer holds): the caller loads it
    into pyca/cryptography and drops it.

    Raises:
        KeyUnwrapError: the blob does not unwrap under ``seal`` (another master key, or a corrupt row): a 503
            ``key_unwrap_failed``, as a key version that does not unwrap; the message holds no byte of it.
    """
    try:
        return seal.unwrap(bytes(stored), WRAPPING_KEY_ASSOCIATED_DATA)
    except SealUnwrapError:
        pass  # raised outside the handler: no chained exception that could carry the blob
    raise KeyUnwrapError(
        f"the keystore's import wrapping key does not unwrap under {seal.describe()} (a different master "
        "key, or a corrupt keystore record)"
    )


def rewrap_wrapping_key(
    conn: Connection,
    dialect: Dialect,
    source: Seal | Keyring,
    target: Seal | Keyring,
) -> None:
    """Rewrap the stored wrapping key (if any) from ``source`` to ``target`` inside the caller's write
    transaction (a reseal; a master key rotation rewraps it in :func:`app.keystore.generations.finish`).

    Raises:
        KeyUnwrapError: the stored blob does not unwrap under ``source``.
    """
    stored = read_wrapping_key(conn, dialect)
    if stored is None:
        return
    private_der = open_wrapping_key(source, stored)
    conn.execute(
        dialect.sql("UPDATE meta SET value = ? WHERE name = ?"),
        (target.wrap(private_der, WRAPPING_KEY_ASSOCIATED_DATA), WRAPPING_KEY_ROW),
    )

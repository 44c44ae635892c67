"""The audit keys: two HMAC-SHA256 keys derived from the master key through the seal, one per job.

``hash_key`` turns request values that must not be logged in the clear (associated data) into
``"hmac-sha256:<hex>"``, as Vault's audit devices do; ``POST /v1/audit/hash`` computes the same value so an
operator can search the log for a known input. ``chain_key`` signs each log line together with the previous
line's HMAC (:mod:`app.audit.chain`).

Both come from the master key through HKDF-SHA256 with labels of their own, so neither reveals the master key
or the other, and whoever can verify the log (``keystream-server audit verify``) is whoever holds the master
key: no new secret to store, back up or rotate. A separate chain key would let a log auditor verify without
the master key, at the price of one more secret per deployment; we chose the master key's owner. The seal
(:mod:`app.seal`) derives them (:func:`audit_keys_for`), so the master key's bytes never reach this module.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field

from app.core.secret_memory import secret_buffer
from app.formats.sealed.format import derive_secret
from app.seal import Seal

#: HKDF ``info`` labels: a derived key is used for one purpose only.
HASH_KEY_INFO = b"keystream audit hash key v1"
CHAIN_KEY_INFO = b"keystream audit chain key v1"
#: The prefix of every hashed value in the log and in ``/v1/audit/hash`` answers.
HASH_PREFIX = "hmac-sha256:"
_SALT = b"keystream-audit"
_KEY_SIZE = 32


@dataclass(frozen=True)
class AuditKeys:
    """The two audit keys, side by side in 64 bytes of locked memory (:mod:`app.core.secret_memory`),
    zeroed once the last view of them is dropped (a server's on seal); their ``repr`` never shows the bytes.
    """

    material: memoryview = field(repr=False)

    @property
    def hash_key(self) -> memoryview:
        """The first 32 bytes: the key of the hashed values."""
        return self.material[:_KEY_SIZE]

    @property
    def chain_key(self) -> memoryview:
        """The last 32 bytes: the key of the line HMACs."""
        return self.material[_KEY_SIZE:]

    def hash(self, value: bytes) -> str:
        """``"hmac-sha256:<hex>"`` of ``value`` under the hash key: what the log records instead of it."""
        return HASH_PREFIX + hmac.digest(self.hash_key, value, "sha256").hex()


def _keys_of(hash_key: bytes | memoryview, chain_key: bytes | memoryview) -> AuditKeys:
    """:class:`AuditKeys` over a copy of the two 32-byte keys in locked memory."""
    material = secret_buffer(2 * _KEY_SIZE)
    view = material.view()
    view[:_KEY_SIZE] = hash_key
    view[_KEY_SIZE:] = chain_key
    return AuditKeys(material.readonly())


def derive_audit_keys(master_key: bytes | memoryview) -> AuditKeys:
    """Derive the audit keys from the 32-byte master key (HKDF-SHA256, one ``info`` label per key).

    Raises:
        ValueError: ``master_key`` is not 32 bytes (the message never shows it).
    """
    if len(master_key) != _KEY_SIZE:
        raise ValueError(f"the master key must be {_KEY_SIZE} bytes, got {len(master_key)}")
    return _keys_of(
        derive_secret(master_key, _SALT, HASH_KEY_INFO, _KEY_SIZE),
        derive_secret(master_key, _SALT, CHAIN_KEY_INFO, _KEY_SIZE),
    )


def audit_keys_for(seal: Seal, stored: bytes | memoryview | None = None) -> AuditKeys:
    """The audit keys: ``stored`` when the keystore holds them, else derived from ``seal``'s master key.

    A keystore holds them (64 bytes: hash key, chain key, wrapped under its seal) when its seal cannot derive
    keys (the pkcs11 seal), and keeps them when it moves to another seal, so every log keeps verifying. A
    file-seal keystore that never moved derives them as before seals existed (:func:`derive_audit_keys`,
    computed inside the seal). Either way they are kept in locked memory, with no ``bytes`` on the way:
    stored ones are copied there from the keystore's locked view; derived ones are written there by the seal
    (aescore's C HKDF).

    Raises:
        SealError: nothing is stored and the seal cannot derive keys from its master key.
        ValueError: ``stored`` is not 64 bytes.
    """
    if stored is not None:
        if len(stored) != 2 * _KEY_SIZE:
            raise ValueError(f"stored audit key material must be {2 * _KEY_SIZE} bytes, got {len(stored)}")
        view = memoryview(stored).cast("B")
        return _keys_of(view[:_KEY_SIZE], view[_KEY_SIZE:])
    material = secret_buffer(2 * _KEY_SIZE)
    view = material.view()
    seal.derive_key_into(_SALT, HASH_KEY_INFO, view[:_KEY_SIZE])
    seal.derive_key_into(_SALT, CHAIN_KEY_INFO, view[_KEY_SIZE:])
    view.release()
    return AuditKeys(material.readonly())

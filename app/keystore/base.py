"""The keystore template: :class:`KeyStore`, its public methods over a few storage methods per store.

A keystore keeps named AES keys with numbered versions (rotation adds a version; old versions keep decrypting
down to ``min_decryption_version``), the service's API tokens and the login roles that issue tokens
(:mod:`app.keystore.roles`). Material is stored only wrapped under the master key (see
:mod:`app.keystore.master`) and leaves the store unwrapped only through :meth:`KeyStore.key_material`. Token
secrets are stored only as hashes.

A template method, as Django's database backends: the public methods are written here once (validation with
:mod:`app.keystore.checks`, fresh material, a new key's :class:`~app.keystore.records.KeyInfo`, when a key is
due or may be deleted, the master key's rotation and the reseal through the SQL both stores share,
:mod:`app.keystore.generations` and :mod:`app.keystore.reseal`), so every store applies the same rules and
raises the same errors; a store (:mod:`app.keystore.sqlite`, :mod:`app.keystore.postgres`) implements only
the storage methods below the public ones: one transaction each, with its own SQL and locking, and a
:class:`~app.keystore.generations.Dialect` for the shared SQL. Every change also appends to an ordered change
log (:mod:`app.keystore.changes`) read with :meth:`KeyStore.changes_since`, which keeps the caches of several
workers or replicas coherent, and a deleted key's name is held by a tombstone
(:mod:`app.keystore.tombstones`). The records live in :mod:`app.keystore.records`.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TypedDict, TypeVar

from app.core.schemes import DEFAULT_SCHEME
from app.core.secret_memory import random_secret
from app.errors import (
    BadRequestError,
    DeletionNotAllowedError,
    KeyNotFoundError,
    RoleNotFoundError,
    ServiceUnavailableError,
    TokenNotFoundError,
)
from app.seal import Seal
from app.seal.keyring import Keyring, KeyringState

from . import backup, generations, roles
from .changes import AUTH_CONFIG_WRITTEN, MASTER_KEY_ROTATED, MAX_CHANGES_PER_CALL, Change, ChangeBatch
from .checks import (
    DEFAULT_SEGMENT_SIZE,
    KEY_TYPES,
    check_bool,
    check_integer,
    check_key_name,
    check_key_options,
    check_key_type,
    check_min_decryption_version,
    check_one_way_flags,
    check_scheme,
    check_segment_size,
    check_token_expiry,
    check_token_id,
    check_token_record,
    check_trim_version,
    check_version_material,
    key_type_for_material,
)
from .generations import MasterRotationStatus
from .master import AUDIT_KEYS_ROW, as_seal, open_audit_key_material
from .migrations import Migration
from .records import (
    KeyExport,
    KeyInfo,
    KeyOptions,
    KeyPolicy,
    RoleRecord,
    TokenRecord,
    new_key_info,
    utc_now,
)
from .reseal import reseal_rows
from .rotation import (
    MIN_AUTO_ROTATE_PERIOD,
    check_auto_rotate_min_period,
    check_auto_rotate_period,
    is_due,
)
from .tombstones import check_tombstone_seconds
from .wrapping_key import insert_wrapping_key, open_wrapping_key, read_wrapping_key

__all__ = ["KeyStore"]

T = TypeVar("T")

#: Work a template method hands a store to run last inside the store's own transaction.
InTransaction = Callable[[generations.Connection], None]

#: Connections a store keeps when :class:`StoreOptions` do not say (SQLite: idle ones kept for reuse;
#: PostgreSQL: the most it opens at once).
DEFAULT_POOL_SIZE = 8


class StoreOptions(TypedDict, total=False):
    """What both stores take beyond their location and seal, each optional with one default, here.

    Attributes:
        pool_size: connections the store keeps (default :data:`DEFAULT_POOL_SIZE`).
        migrations: the schema steps to apply (default: the store's own; tests pass extra ones).
        tombstone_seconds: how long a deleted key's name cannot be re-created (default 0: not held;
            :mod:`app.keystore.tombstones`).
        auto_rotate_min_period: the shortest ``auto_rotate_period`` accepted (default
            :data:`~app.keystore.rotation.MIN_AUTO_ROTATE_PERIOD`, an hour; tests lower it).
    """

    pool_size: int
    migrations: Sequence[Migration]
    tombstone_seconds: float
    auto_rotate_min_period: int


class KeyStore(abc.ABC):
    """Named AES keys with versions, and API tokens. Thread-safe; every change is one transaction.

    The public methods validate with the ``check_*`` functions of :mod:`app.keystore.checks` and raise the
    errors of :mod:`app.errors` named below; a store implements the abstract methods (the storage ones start
    with ``_``). No error message, log line or ``repr`` contains key material.
    """

    #: How this store's SQL differs for the SQL the stores share (:mod:`app.keystore.generations`,
    #: :mod:`app.keystore.reseal`).
    _dialect: generations.Dialect
    #: The seal and the master key generations the store wraps with (set by the store when it opens).
    _seal: Seal
    _keyring: Keyring

    #: Seconds a deleted key's name cannot be re-created (set at open; 0 = no tombstone).
    tombstone_seconds: float = 0.0
    #: Shortest ``auto_rotate_period`` accepted (set at open; lowered only by tests).
    auto_rotate_min_period: int = MIN_AUTO_ROTATE_PERIOD

    def create_key(
        self,
        name: str,
        key_type: str = "aes256",
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        deletion_allowed: bool = False,
        *,
        scheme: str = DEFAULT_SCHEME,
        auto_rotate_period: int | str = 0,
        options: KeyOptions | None = None,
    ) -> KeyInfo:
        """Create key ``name`` with a random version 1 (``getrandom``, into locked memory) and the sealed
        ``scheme``.

        ``auto_rotate_period`` (seconds or a duration string, 0: off) is checked by
        :func:`~app.keystore.rotation.check_auto_rotate_period` against :attr:`auto_rotate_min_period`;
        ``options`` (none set when ``None``) by :func:`~app.keystore.checks.check_key_options`.

        Raises:
            BadRequestError: invalid name, key type, segment size, scheme, auto_rotate_period or options.
            KeyExistsError: a key with that name exists.
            KeyRecentlyDeletedError: a key with that name was deleted and its tombstone has not expired.
        """
        check_key_name(name)
        check_key_type(key_type)
        info = self._new_info(
            name, key_type, segment_size, deletion_allowed, scheme, auto_rotate_period, False, options
        )
        return self._insert_key(info, random_secret(KEY_TYPES[key_type]).readonly())

    def import_key(
        self,
        name: str,
        material: bytes | memoryview,
        segment_size: int = DEFAULT_SEGMENT_SIZE,
        deletion_allowed: bool = False,
        *,
        scheme: str = DEFAULT_SCHEME,
        auto_rotate_period: int | str = 0,
        options: KeyOptions | None = None,
        key_type: str | None = None,
    ) -> KeyInfo:
        """Create key ``name`` whose version 1 is ``material``; the type is ``key_type``, or follows from the
        length (an AES type: 64 bytes are never taken for ``aes256-siv`` unless ``key_type`` says so).

        Raises:
            BadRequestError: invalid name, segment size, scheme, auto_rotate_period or options, or material
                not 16, 24 or 32 bytes long, or not as long as ``key_type`` says.
            KeyExistsError: a key with that name exists.
            KeyRecentlyDeletedError: a key with that name was deleted and its tombstone has not expired.
        """
        check_key_name(name)
        key_type, data = key_type_for_material(material, key_type)
        info = self._new_info(
            name, key_type, segment_size, deletion_allowed, scheme, auto_rotate_period, True, options
        )
        return self._insert_key(info, data)

    def get_key(self, name: str) -> KeyInfo:
        """Return the metadata of key ``name``.

        Raises:
            BadRequestError: invalid name.
            KeyNotFoundError: no such key.
        """
        check_key_name(name)
        return self._read_key(name)

    @abc.abstractmethod
    def list_keys(self) -> list[KeyInfo]:
        """Return the metadata of every key, ordered by name."""

    def rotate_key(self, name: str) -> KeyInfo:
        """Add a new random version to key ``name``; it becomes ``latest_version``.

        Raises:
            KeyNotFoundError: no such key.
        """
        check_key_name(name)
        rotated = self._add_version(name, _random_version, imported=False)
        assert rotated is not None  # _random_version always gives material
        return rotated

    def due_for_rotation(self) -> list[str]:
        """Names of the keys whose automatic rotation is due now (:func:`~app.keystore.rotation.is_due`).

        A hint only: :meth:`rotate_if_due` decides. Ordered by name.

        Raises:
            ServiceUnavailableError: the database cannot serve now.
        """
        now = utc_now()
        return [name for name, period, last in self._rotation_schedule() if is_due(period, last, now)]

    def rotate_if_due(self, name: str) -> KeyInfo | None:
        """Rotate key ``name`` as :meth:`rotate_key` does if its automatic rotation is due; else return None.

        Due-ness is decided inside the write transaction that holds the key, with the time read there, so of
        several callers (threads, workers, replicas) that find a key due together exactly one rotates it. The
        rotation appends a ``key_rotated`` change like a manual one.

        Raises:
            BadRequestError: invalid name.
            ServiceUnavailableError: the database cannot serve now.
        """
        check_key_name(name)

        def if_due(info: KeyInfo) -> memoryview | None:
            return (
                _random_version(info)
                if is_due(info.auto_rotate_period, info.last_rotated, utc_now())
                else None
            )

        try:
            return self._add_version(name, if_due, imported=False)
        except KeyNotFoundError:
            return None

    def import_key_version(self, name: str, material: bytes | memoryview) -> KeyInfo:
        """Add ``material`` as a new version of key ``name``; it becomes ``latest_version``, as a rotation.

        The key's ``imported`` flag becomes true: some version's material came from outside the service.
        Appends a ``key_rotated`` change (for caches it is a rotation).

        Raises:
            BadRequestError: invalid name, or ``material`` not bytes of the key type's size
                (:func:`~app.keystore.checks.check_version_material`).
            KeyNotFoundError: no such key.
        """
        check_key_name(name)
        imported = self._add_version(
            name, lambda info: check_version_material(name, info.key_type, material), imported=True
        )
        assert imported is not None  # check_version_material gives material or raises
        return imported

    def trim_key(self, name: str, min_available_version: int) -> KeyInfo:
        """Delete, for good, every version of key ``name`` below ``min_available_version``.

        Idempotent: versions already gone stay gone and nothing else changes. When versions were deleted it
        appends a ``key_updated`` change, so every worker and replica drops its cached versions of the key.

        Raises:
            BadRequestError: ``min_available_version`` not an int in 1 .. the key's ``min_decryption_version``
                (:func:`~app.keystore.checks.check_trim_version`).
            KeyNotFoundError: no such key.
        """
        check_key_name(name)
        check_integer("min_available_version", min_available_version)
        return self._trim_key(
            name, lambda info: check_trim_version(name, min_available_version, info.min_decryption_version)
        )

    def update_key(
        self,
        name: str,
        *,
        min_decryption_version: int | None = None,
        deletion_allowed: bool | None = None,
        auto_rotate_period: int | str | None = None,
        exportable: bool | None = None,
        allow_plaintext_backup: bool | None = None,
    ) -> KeyInfo:
        """Change the policy of key ``name``; ``None`` leaves a field as it is.

        A new ``auto_rotate_period`` counts from the latest version's creation: a key whose latest version is
        already older than the period is due at once. ``exportable`` and ``allow_plaintext_backup`` may be
        turned on, never off (:func:`~app.keystore.checks.check_one_way_flags`); ``derived`` and
        ``convergent_encryption`` are fixed at creation.

        Raises:
            KeyNotFoundError: no such key.
            BadRequestError: ``min_decryption_version`` outside 1..``latest_version``, an invalid
                ``auto_rotate_period``, ``exportable`` or ``allow_plaintext_backup`` turned off, or wrong
                types.
        """
        check_key_name(name)
        if min_decryption_version is not None:
            check_integer("min_decryption_version", min_decryption_version)
        for field_name, flag in (
            ("deletion_allowed", deletion_allowed),
            ("exportable", exportable),
            ("allow_plaintext_backup", allow_plaintext_backup),
        ):
            if flag is not None:
                check_bool(field_name, flag)
        period = (
            None
            if auto_rotate_period is None
            else check_auto_rotate_period(auto_rotate_period, self.auto_rotate_min_period)
        )
        changes = (min_decryption_version, deletion_allowed, period, exportable, allow_plaintext_backup)
        if all(change is None for change in changes):
            return self.get_key(name)

        def policy(info: KeyInfo) -> KeyPolicy:
            new_min = (
                info.min_decryption_version if min_decryption_version is None else min_decryption_version
            )
            if new_min != info.min_decryption_version:
                check_min_decryption_version(name, new_min, info.latest_version, info.versions[0].version)
            now = info.policy
            return check_one_way_flags(
                info,
                KeyPolicy(
                    new_min,
                    now.deletion_allowed if deletion_allowed is None else deletion_allowed,
                    now.auto_rotate_period if period is None else period,
                    now.exportable if exportable is None else exportable,
                    now.allow_plaintext_backup if allow_plaintext_backup is None else allow_plaintext_backup,
                ),
            )

        return self._update_policy(name, policy)

    def delete_key(self, name: str) -> None:
        """Delete key ``name`` and every version of it; its name keeps a tombstone for ``tombstone_seconds``.

        Raises:
            KeyNotFoundError: no such key.
            DeletionNotAllowedError: the key's ``deletion_allowed`` is false.
        """
        check_key_name(name)
        self._delete_key(name, _check_deletion_allowed)

    def key_material(self, name: str, version: int) -> memoryview:
        """Return the unwrapped material of one version of a key.

        The only way material leaves the store. Callers keep it out of logs and errors. It is a read-only
        view of locked memory left out of core dumps, zeroed when the last view of it is dropped
        (:mod:`app.core.secret_memory`); it compares equal to the ``bytes`` it holds.

        Raises:
            KeyNotFoundError: no such key.
            KeyVersionNotFoundError: the key has no such version.
            KeyUnwrapError: the stored material does not authenticate under the master key.
        """
        check_key_name(name)
        check_integer("key version", version)
        return self._key_material(name, version)

    def export_material(
        self, name: str, version: int | None = None
    ) -> tuple[KeyInfo, list[tuple[int, memoryview]]]:
        """The metadata of key ``name`` and the material of ``version`` (every remaining version when
        ``None``), oldest first, for an export; only for a key whose ``exportable`` option is on.

        The material is as :meth:`key_material` gives it (locked memory); callers keep it out of logs.

        Raises:
            BadRequestError: invalid name or version, or the key is not exportable.
            KeyNotFoundError: no such key.
            KeyVersionNotFoundError: the key has no such version.
        """
        info = self.get_key(name)
        if not info.options.exportable:
            raise BadRequestError(
                f"key {name!r} is not exportable: set exportable to true first (it cannot be turned off "
                "again)"
            )
        if version is None:
            versions = [entry.version for entry in info.versions]
        else:
            check_integer("version", version)
            versions = [version]
        return info, [(number, self.key_material(name, number)) for number in versions]

    def backup_key(self, name: str, *, vault_rule: bool = False) -> str:
        """A backup blob of key ``name`` (:mod:`app.keystore.backup`): its record and every version, wrapped
        under the seal and bound to the name. Only for a key whose ``allow_plaintext_backup`` or
        ``exportable`` option is on; with ``vault_rule`` (the Transit API), as Vault requires, both.

        Raises:
            BadRequestError: invalid name, or the key's options do not allow a backup.
            KeyNotFoundError: no such key.
        """
        info = self.get_key(name)
        options = info.options
        if vault_rule and not (options.exportable and options.allow_plaintext_backup):
            missing = "exportable" if not options.exportable else "allow_plaintext_backup"
            raise BadRequestError(f"key {name!r} cannot be backed up: {missing} is false (Vault needs both)")
        if not (options.exportable or options.allow_plaintext_backup):
            raise BadRequestError(
                f"key {name!r} cannot be backed up: set allow_plaintext_backup (or exportable) to true first"
            )
        materials = [self.key_material(name, entry.version) for entry in info.versions]
        return backup.make_backup(self._keyring, info, materials)

    def restore_key(self, blob: str, name: str | None = None, *, force: bool = False) -> KeyInfo:
        """Store the key a backup blob holds, as it was (versions, policy, options, times), under its own name
        (``name``, when given, must be that name: a backup is bound to it). An existing key of that name is
        replaced only with ``force``; one transaction, which appends a ``key_created`` change (``key_updated``
        when a key was replaced, so every cache drops its versions).

        Raises:
            BadRequestError: not a backup of this keystore's, made for another name, or malformed.
            KeyExistsError: a key of that name exists and ``force`` is false.
            KeyRecentlyDeletedError: the name's tombstone has not expired.
        """
        check_bool("force", force)
        target = backup.backup_name(blob) if name is None else check_key_name(name)
        info, materials = backup.open_backup(self._keyring, blob, target)
        return self._restore_key(info, materials, force)

    @property
    def seal(self) -> Seal:
        """The seal this keystore wraps and unwraps with (the one it was opened with)."""
        return self._seal

    @property
    def keyring(self) -> Keyring:
        """The master key generations this keystore wraps with (:mod:`app.seal.keyring`): the newest for new
        blobs, each blob's own for unwrapping."""
        return self._keyring

    def begin_master_rotation(self, owner: str, lease_seconds: float) -> MasterRotationStatus:
        """Make a new master key generation and wrap new blobs under it, or resume a rotation that did not
        finish; take the rotation's lease for ``owner`` (:func:`app.keystore.generations.begin`). A new
        generation appends a ``master_key_rotated`` change.

        Raises:
            MasterRotationRunningError: another owner's lease has not expired.
            SealError: the seal is sealed or cannot make a key.
            ServiceUnavailableError: the database cannot serve now.
        """

        def work(conn: generations.Connection) -> MasterRotationStatus:
            status, created = generations.begin(conn, self._dialect, self._keyring, owner, lease_seconds)
            if created:
                self._append_change(conn, MASTER_KEY_ROTATED)
            return status

        status = self._run_write(work)
        self._keyring.invalidate()
        return status

    def resume_master_rotation(self, owner: str, lease_seconds: float) -> MasterRotationStatus | None:
        """Take the lease of a rotation that did not finish for ``owner``
        (:func:`app.keystore.generations.resume`); ``None``, and nothing written, when every rotation
        finished, so a caller that only means to resume never starts a new one.

        Raises:
            MasterRotationRunningError: another owner's lease has not expired.
            ServiceUnavailableError: the database cannot serve now.
        """
        return self._run_write(lambda conn: generations.resume(conn, self._dialect, owner, lease_seconds))

    def rewrap_master_batch(
        self, owner: str, after: tuple[str, int] | None, limit: int, lease_seconds: float
    ) -> tuple[str, int] | None:
        """Rewrap under the newest generation the versions of older ones among the ``limit`` versions after
        ``after`` (one transaction, :func:`app.keystore.generations.rewrap_batch`); return the last version
        looked at, ``None`` past the end.

        Raises:
            MasterRotationRunningError: ``owner`` lost the lease.
            KeyUnwrapError: a version does not unwrap; the batch wrote nothing.
            ServiceUnavailableError: the database cannot serve now.
        """
        return self._run_write(
            lambda conn: generations.rewrap_batch(
                conn, self._dialect, self._keyring, owner, after, limit, lease_seconds
            )[0]
        )

    def finish_master_rotation(self, owner: str, lease_seconds: float) -> MasterRotationStatus:
        """Rewrap the audit keys' material and retire the older generations once no blob uses them
        (:func:`app.keystore.generations.finish`); still ``rotating`` when one was found. Retiring appends a
        ``master_key_rotated`` change and has the seal destroy what those generations left (token keys).

        Raises:
            MasterRotationRunningError: ``owner`` lost the lease.
            ServiceUnavailableError: the database cannot serve now.
        """

        def work(conn: generations.Connection) -> tuple[MasterRotationStatus, list[int]]:
            status, retired = generations.finish(conn, self._dialect, self._keyring, owner, lease_seconds)
            if not status.rotating:
                self._append_change(conn, MASTER_KEY_ROTATED)
            return status, retired

        status, retired = self._run_write(work)
        generations.destroy_retired(self._keyring, retired)
        return status

    def master_rotation_status(self) -> MasterRotationStatus:
        """Where the master key's rotation stands.

        Raises:
            ServiceUnavailableError: the database cannot serve now.
        """
        return self._run_read(lambda conn: generations.read_status(conn, self._dialect))

    def audit_key_material(self) -> memoryview | None:
        """The audit keys' 64 bytes stored wrapped under the seal, in locked memory (a read-only view, zeroed
        once dropped), or ``None`` when the seal derives them.

        Raises:
            MasterKeyError: the stored material does not unwrap under the seal.
            ServiceUnavailableError: the database cannot serve now.
        """

        def read(conn: generations.Connection) -> bytes | None:
            row = conn.execute(self._dialect.sql("SELECT value FROM meta WHERE name = ?"), (AUDIT_KEYS_ROW,))
            found = row.fetchone()
            return None if found is None else bytes(found[0])

        return open_audit_key_material(self._keyring, self._run_read(read))

    def import_wrapping_key(self, create: Callable[[], bytes]) -> bytes:
        """The import wrapping key's PKCS#8 DER (:mod:`app.keystore.wrapping_key`): the stored one, or, when
        none is stored yet, the one ``create`` makes, stored first.

        Race-safe across workers and replicas: ``create`` runs outside any transaction (an RSA-4096 key
        takes a second), the insert keeps a key another process stored meanwhile, and every caller returns
        what is stored, so all of them hand out the same key.

        Raises:
            KeyUnwrapError: the stored key does not unwrap under the seal (503 ``key_unwrap_failed``).
            ServiceUnavailableError: the database cannot serve now.
        """
        stored = self.stored_import_wrapping_key()
        if stored is not None:
            return stored
        fresh = create()
        self._run_write(lambda conn: insert_wrapping_key(conn, self._dialect, self._wrapping(conn), fresh))
        stored = self.stored_import_wrapping_key()
        if stored is None:  # the insert committed: only a concurrent reseal could hide it
            raise ServiceUnavailableError("the import wrapping key was stored but cannot be read back; retry")
        return stored

    def stored_import_wrapping_key(self) -> bytes | None:
        """The stored import wrapping key's PKCS#8 DER, or ``None`` when none was made yet (no key is made).

        Raises:
            KeyUnwrapError: the stored key does not unwrap under the seal (503 ``key_unwrap_failed``).
            ServiceUnavailableError: the database cannot serve now.
        """
        stored = self._run_read(lambda conn: read_wrapping_key(conn, self._dialect))
        return None if stored is None else open_wrapping_key(self._keyring, stored)

    def reseal(
        self,
        target: Seal,
        audit_material: bytes | memoryview,
        before_commit: Callable[[], None] | None = None,
    ) -> int:
        """Move every stored secret from :attr:`seal` to ``target`` in one write transaction; return how many
        key versions were rewrapped. This store uses ``target`` afterwards.

        Every key version is unwrapped (under its master key generation) and rewrapped under ``target``'s
        own key (:func:`app.keystore.reseal.rewrap_versions`); the generations of earlier rotations are
        forgotten; the check value is replaced by ``target``'s, ``audit_material`` (the 64 bytes of the audit
        keys in use) is stored wrapped under ``target`` and so are ``target``'s public parameters
        (:func:`app.keystore.reseal.resealed_meta`). Other processes that still use the old seal cannot unwrap
        what they have not cached: stop them first.

        ``before_commit`` runs once everything is rewritten, inside the transaction, just before it commits:
        what must happen before the move may count (a shamir target's shares shown to the operator, so that no
        committed move leaves a keystore whose shares nobody saw). If it raises, nothing is written.

        Raises:
            KeyUnwrapError: a version does not unwrap under the current seal; nothing was written.
            SealError: a seal's device fails; nothing was written.
            ServiceUnavailableError: the database cannot serve now; nothing was written, unless the
                connection broke while committing (PostgreSQL cannot tell then).
            Exception: whatever ``before_commit`` raised; nothing was written.
        """

        def work(conn: generations.Connection) -> int:
            count = reseal_rows(conn, self._dialect, self._keyring, target, audit_material)
            if before_commit is not None:
                before_commit()
            return count

        count = self._run_write(work)
        self._keyring.close()
        self._seal = target
        self._keyring = Keyring(target, self._load_keyring)
        return count

    @abc.abstractmethod
    def export_keys(self) -> list[KeyExport]:
        """Every key with its versions' wrapped material, as stored, ordered by name (one snapshot).

        For :mod:`app.keystore.copy`; the material stays wrapped. Callers keep it out of logs and errors.
        """

    def insert_copied(
        self,
        copied_keys: Sequence[KeyExport],
        copied_tokens: Sequence[TokenRecord],
        copied_roles: Sequence[RoleRecord] = (),
        copied_configs: Mapping[str, dict[str, object]] | None = None,
        wrapping_key: bytes | None = None,
    ) -> None:
        """Store ``copied_keys`` (wrapped material, versions, policies, times), ``copied_tokens``, the login
        roles ``copied_roles`` and the auth method configurations ``copied_configs`` as given, and
        ``wrapping_key`` (the import wrapping key's PKCS#8 DER, wrapped here under this store's seal) unless
        this store has one already.

        All or nothing: one transaction, which also appends a ``key_created`` change per key, a
        ``token_created`` change per token, a ``role_written`` change per role and an ``auth_config_written``
        change per configuration, so running replicas see the copies. The caller has checked that each
        wrapped version unwraps under this store's master key (:func:`app.keystore.copy.copy_keystore`).

        Raises:
            KeyExistsError: a key of that name exists (nothing is written).
            KeyRecentlyDeletedError: a key of that name was deleted and its tombstone has not expired.
            ConflictError: a token with that id exists (nothing is written).
            BadRequestError: a token record, a role or a configuration is malformed.
        """
        checked_roles = [roles.check_role_record(record) for record in copied_roles]
        configs = {
            roles.check_auth_method(method): roles.check_auth_config(config)
            for method, config in (copied_configs or {}).items()
        }

        def write_roles(conn: generations.Connection) -> None:
            for role in checked_roles:
                roles.write_role(conn, self._dialect, role)
                self._append_change(conn, "role_written", role_name=role.name)
            for method, config in configs.items():
                roles.write_auth_config(conn, self._dialect, method, config, utc_now())
                self._append_change(conn, AUTH_CONFIG_WRITTEN)
            if wrapping_key is not None:
                insert_wrapping_key(conn, self._dialect, self._wrapping(conn), wrapping_key)

        self._insert_copied(
            copied_keys, [check_token_record(record) for record in copied_tokens], write_roles
        )

    def create_token(self, record: TokenRecord, *, reissuable: bool = False) -> None:
        """Store a token.

        ``reissuable`` says its holder can get another one just by asking again (a token a login issued:
        the workload logs in again): a store may then commit it with less durability, never losing it to a
        crash of the process but possibly to a power loss (SQLite in WAL mode commits it with
        ``synchronous=NORMAL``, PostgreSQL with ``synchronous_commit = off``; docs/operations.md). A token an
        admin creates is never reissuable.

        A reissuable token appends no ``token_created`` change, so a login wakes no other process's change
        follower: its id was drawn at random a moment ago (:func:`~app.services.security.new_token`), so no
        process can hold it as an unknown id (a token verifier remembers only ids it was shown, for a few
        seconds), and a new token makes nothing else stale. Its renewal and deletion append changes as every
        token's do. Any other token appends one (an admin's record may carry an id that was tried before).

        Raises:
            BadRequestError: invalid token id or field types.
            ConflictError: a token with that id exists.
        """
        self._insert_token(check_token_record(record), reissuable)

    def get_token(self, token_id: str) -> TokenRecord:
        """Return the token ``token_id``.

        Raises:
            TokenNotFoundError: no such token.
        """
        check_token_id(token_id)
        record = self._read_token(token_id)
        if record is None:
            raise TokenNotFoundError(f"token {token_id!r} not found")
        return record

    @abc.abstractmethod
    def list_tokens(self) -> list[TokenRecord]:
        """Return every token, oldest first."""

    def renew_token(self, token_id: str, expires_at: datetime) -> TokenRecord:
        """Move the token's ``expires_at`` to ``expires_at`` and return the updated record.

        Appends a ``token_renewed`` change, so every worker and replica forgets its cached record.

        Raises:
            BadRequestError: ``expires_at`` is not an aware datetime, the token has no lifetime, or
                ``expires_at`` is after its ``max_expires_at``.
            TokenNotFoundError: no such token.
        """
        check_token_id(token_id)
        record = self._renew_token(token_id, lambda stored: check_token_expiry(stored, expires_at))
        if record is None:
            raise TokenNotFoundError(f"token {token_id!r} not found")
        return record

    def delete_token(self, token_id: str) -> None:
        """Delete the token ``token_id``.

        Raises:
            TokenNotFoundError: no such token.
        """
        check_token_id(token_id)
        if not self._delete_token(token_id):
            raise TokenNotFoundError(f"token {token_id!r} not found")

    def write_role(self, record: RoleRecord) -> RoleRecord:
        """Create the login role ``record.name``, or replace it (its ``created_at`` stays); return the role.

        Appends a ``role_written`` change naming the role (:mod:`app.keystore.roles`).

        Raises:
            BadRequestError: a malformed record (:func:`~app.keystore.roles.check_role_record`).
        """
        checked = roles.check_role_record(record)

        def work(conn: generations.Connection) -> RoleRecord:
            stored = roles.write_role(conn, self._dialect, checked)
            self._append_change(conn, "role_written", role_name=checked.name)
            return stored

        return self._run_write(work)

    def get_role(self, name: str) -> RoleRecord:
        """The login role ``name``.

        Raises:
            BadRequestError: invalid name.
            RoleNotFoundError: no such role.
        """
        roles.check_role_name(name)
        record = self._run_read(lambda conn: roles.read_role(conn, self._dialect, name))
        if record is None:
            raise RoleNotFoundError(f"role {name!r} not found")
        return record

    def list_roles(self) -> list[RoleRecord]:
        """Every login role, ordered by name."""
        return self._run_read(lambda conn: roles.list_roles(conn, self._dialect))

    def delete_role(self, name: str) -> None:
        """Delete the login role ``name`` (tokens it issued stay valid until they expire or are revoked).

        Raises:
            BadRequestError: invalid name.
            RoleNotFoundError: no such role.
        """
        roles.check_role_name(name)

        def work(conn: generations.Connection) -> bool:
            if not roles.delete_role(conn, self._dialect, name):
                return False
            self._append_change(conn, "role_deleted", role_name=name)
            return True

        if not self._run_write(work):
            raise RoleNotFoundError(f"role {name!r} not found")

    def write_auth_config(self, method: str, config: dict[str, object]) -> None:
        """Store (or replace) the configuration of auth ``method``; appends an ``auth_config_written`` change.

        Raises:
            BadRequestError: an unknown method, or ``config`` not a bounded JSON object.
        """
        roles.check_auth_method(method)
        checked = roles.check_auth_config(config)

        def work(conn: generations.Connection) -> None:
            roles.write_auth_config(conn, self._dialect, method, checked, utc_now())
            self._append_change(conn, AUTH_CONFIG_WRITTEN)

        self._run_write(work)

    def read_auth_config(self, method: str) -> dict[str, object] | None:
        """The configuration of auth ``method``, or ``None`` when none was written.

        Raises:
            BadRequestError: an unknown method.
        """
        roles.check_auth_method(method)
        return self._run_read(lambda conn: roles.read_auth_config(conn, self._dialect, method))

    def read_login(self, role_name: str, method: str) -> tuple[RoleRecord | None, dict[str, object] | None]:
        """What a login through ``role_name`` checks a credential against, read in one statement: the role
        (``None``: no such role, or a name no role can have, which is not looked up) and the configuration of
        auth ``method`` (``None`` when none was written). One statement instead of two: on PostgreSQL one
        round trip per login.

        Raises:
            BadRequestError: an unknown method.
        """
        roles.check_auth_method(method)
        try:
            roles.check_role_name(role_name)
        except BadRequestError:
            named = False
        else:
            named = True

        return self._run_read_statement(
            lambda conn: roles.read_login(conn, self._dialect, role_name if named else None, method)
        )

    @abc.abstractmethod
    def count_tokens(self) -> int:
        """Return the number of stored tokens (0 on first start: the service then creates the root token)."""

    @abc.abstractmethod
    def changes_since(self, seq: int, limit: int = MAX_CHANGES_PER_CALL) -> ChangeBatch:
        """The changes to keys and tokens after sequence number ``seq``, oldest first (at most ``limit``).

        Returns:
            ``(changes, latest, trimmed)``: see :class:`~app.keystore.changes.ChangeBatch`. A ``seq`` beyond
            the newest change answers ``trimmed`` with the newest number: a fresh replica starts there.

        Raises:
            BadRequestError: ``seq`` is not an int >= 0 or ``limit`` not an int >= 1.
            ServiceUnavailableError: the database cannot serve now.
        """

    def trim_changes(self, keep: int) -> int:
        """Delete all but the newest ``keep`` change-log rows; return how many were deleted.

        A replica whose last applied number is below the trimmed part then gets ``trimmed=True``.

        Raises:
            BadRequestError: ``keep`` is not an int >= 0.
            ServiceUnavailableError: the database cannot serve now.
        """
        check_integer("keep", keep)
        if keep < 0:
            raise BadRequestError(f"keep must be >= 0, got {keep}")
        return self._trim_changes(keep)

    @abc.abstractmethod
    def _trim_changes(self, keep: int) -> int:
        """Storage: delete all but the newest ``keep`` (an int >= 0) change-log rows in one transaction and
        return how many went."""

    def listen_for_changes(self, on_hint: Callable[[Change | None], None]) -> Callable[[], None]:
        """Call ``on_hint`` (from another thread) whenever the change log may have grown; return a stopper.

        A hint may carry the committed change itself, else ``None``; either way it may be late, lost or
        repeated, so :meth:`changes_since` stays the truth (a change is applied from a hint only when it is
        the very next number). This default sends none: readers poll. PostgreSQL sends one per committed
        change (``NOTIFY``), SQLite one per commit that moved the log (``data_version``, checked when the
        file is written).
        """
        return _no_listener

    @abc.abstractmethod
    def close(self) -> None:
        """Release connections. Idempotent; other methods raise ``ServiceUnavailableError`` afterwards."""

    # -- storage: what each store implements, one transaction per call ------------------------------------

    def _take_seal(self, seal: Seal | bytes, options: StoreOptions) -> None:
        """Take the seal and the two policies of ``options`` every store is opened with; a store's
        ``__init__`` calls this before it touches its database.

        Args:
            seal: wraps every stored key version (:mod:`app.seal`; 32 bytes stand for a file seal).
            options: the store's :class:`StoreOptions`; ``tombstone_seconds`` and ``auto_rotate_min_period``
                are checked and kept here.

        Raises:
            BadRequestError: ``tombstone_seconds`` is negative or ``auto_rotate_min_period`` outside 1..3600.
            MasterKeyError: ``seal`` is bytes not 32 long.
        """
        self._seal = as_seal(seal)
        self._keyring = Keyring(self._seal)
        self.tombstone_seconds = check_tombstone_seconds(options.get("tombstone_seconds", 0.0))
        self.auto_rotate_min_period = check_auto_rotate_min_period(
            options.get("auto_rotate_min_period", MIN_AUTO_ROTATE_PERIOD)
        )

    @abc.abstractmethod
    def _run_write(self, work: Callable[[generations.Connection], T]) -> T:
        """Run ``work`` in one write transaction on one of the store's connections and return its result;
        committed when it returns, rolled back when it raises.

        Raises:
            ServiceUnavailableError: the database cannot serve now.
        """

    @abc.abstractmethod
    def _run_read(self, work: Callable[[generations.Connection], T]) -> T:
        """Run ``work`` on one of the store's connections in one snapshot and return its result.

        Raises:
            ServiceUnavailableError: the database cannot serve now.
        """

    def _run_read_statement(self, work: Callable[[generations.Connection], T]) -> T:
        """Run ``work``, which reads with exactly one statement, and return its result: a statement is its own
        snapshot, so a store may run it outside an explicit transaction (SQLite: no ``BEGIN``/``COMMIT``
        around it, two statements fewer). By default :meth:`_run_read`.

        Raises:
            ServiceUnavailableError: the database cannot serve now.
        """
        return self._run_read(work)

    @abc.abstractmethod
    def _append_change(
        self, conn: generations.Connection, kind: str, *, role_name: str | None = None
    ) -> None:
        """Append a change of ``kind`` that names no key or token (but ``role_name`` when given), inside
        ``conn``'s write transaction."""

    def _load_keyring(self) -> KeyringState:
        """The stored master key generations (the keyring calls this when it meets a newer one)."""
        return self._run_read(lambda conn: generations.read_keyring(conn, self._dialect))

    def _wrapping(self, conn: generations.Connection) -> Keyring:
        """The keyring at the newest generation, for a key write in ``conn``'s transaction."""
        return generations.writing_keyring(conn, self._dialect, self._keyring)

    def _new_info(
        self,
        name: str,
        key_type: str,
        segment_size: int,
        deletion_allowed: bool,
        scheme: str,
        auto_rotate_period: int | str,
        imported: bool,
        options: KeyOptions | None,
    ) -> KeyInfo:
        """The checked metadata of a key to create (version 1, now).

        Raises:
            BadRequestError: invalid segment size, deletion_allowed, scheme, auto_rotate_period or options,
                or ``derived``/``convergent_encryption`` on an ``aes256-siv`` key (nothing derives per-context
                AES-SIV keys: the option would be a promise the key does not keep).
        """
        check_segment_size(segment_size)
        check_bool("deletion_allowed", deletion_allowed)
        check_scheme(scheme)
        period = check_auto_rotate_period(auto_rotate_period, self.auto_rotate_min_period)
        checked = KeyOptions() if options is None else check_key_options(options)
        if key_type == "aes256-siv" and (checked.derived or checked.convergent_encryption):
            raise BadRequestError(
                "an aes256-siv key is deterministic by itself and derives no per-context keys: derived and "
                "convergent_encryption apply to AES keys"
            )
        return new_key_info(name, key_type, scheme, segment_size, deletion_allowed, imported, period, checked)

    @abc.abstractmethod
    def _insert_key(self, info: KeyInfo, material: memoryview) -> KeyInfo:
        """Store the new key ``info`` with ``material`` as version 1, wrapped under the newest master key
        generation, and append a ``key_created`` (or, when ``info.imported``, ``key_imported``) change.

        Raises:
            KeyExistsError: a key of that name exists.
            KeyRecentlyDeletedError: the name's tombstone has not expired.
        """

    @abc.abstractmethod
    def _restore_key(self, info: KeyInfo, materials: Sequence[memoryview], force: bool) -> KeyInfo:
        """In one write transaction: replace key ``info.name`` (only with ``force``) or check its tombstone,
        store ``info`` with ``materials`` (one per version, wrapped under the newest generation), append a
        ``key_updated`` (replaced) or ``key_created`` change, and return the key as stored.

        Raises:
            KeyExistsError: the key exists and ``force`` is false.
            KeyRecentlyDeletedError: the name's tombstone has not expired.
        """

    @abc.abstractmethod
    def _read_key(self, name: str) -> KeyInfo:
        """Key ``name`` with its versions, in one snapshot.

        Raises:
            KeyNotFoundError: no such key.
        """

    @abc.abstractmethod
    def _add_version(
        self, name: str, choose: Callable[[KeyInfo], memoryview | None], *, imported: bool
    ) -> KeyInfo | None:
        """In one write transaction that holds key ``name``: store ``choose(info)`` as its next version
        (wrapped under the newest generation; ``imported`` also sets the key's flag), append a ``key_rotated``
        change and return the key as it is then; when ``choose`` gives ``None``, write nothing and return
        ``None``. ``choose`` runs inside the transaction, so what it decides on cannot change under it.

        Raises:
            KeyNotFoundError: no such key.
            Exception: whatever ``choose`` raised; nothing was written.
        """

    @abc.abstractmethod
    def _trim_key(self, name: str, check: Callable[[KeyInfo], int]) -> KeyInfo:
        """In one write transaction that holds key ``name``: delete its versions below ``check(info)``,
        append a ``key_updated`` change when any went, and return the key as it is then.

        Raises:
            KeyNotFoundError: no such key.
            Exception: whatever ``check`` raised; nothing was written.
        """

    @abc.abstractmethod
    def _update_policy(self, name: str, policy: Callable[[KeyInfo], KeyPolicy]) -> KeyInfo:
        """In one write transaction that holds key ``name``: set its policy fields to ``policy(info)``, append
        a ``key_updated`` change and return the key as it is then.

        Raises:
            KeyNotFoundError: no such key.
            Exception: whatever ``policy`` raised; nothing was written.
        """

    @abc.abstractmethod
    def _delete_key(self, name: str, check: Callable[[KeyInfo], None]) -> None:
        """In one write transaction that holds key ``name``: after ``check(info)``, delete it and its
        versions, keep its name's tombstone for :attr:`tombstone_seconds` and append a ``key_deleted`` change.

        Raises:
            KeyNotFoundError: no such key.
            Exception: whatever ``check`` raised; nothing was written.
        """

    @abc.abstractmethod
    def _key_material(self, name: str, version: int) -> memoryview:
        """The unwrapped material of one version (see :meth:`key_material`).

        Raises:
            KeyNotFoundError, KeyVersionNotFoundError, KeyUnwrapError: as :meth:`key_material`.
        """

    @abc.abstractmethod
    def _rotation_schedule(self) -> list[tuple[str, int, datetime]]:
        """``(name, auto_rotate_period, latest version's created_at)`` of every key with a period, by name."""

    @abc.abstractmethod
    def _insert_copied(
        self, copied_keys: Sequence[KeyExport], checked_tokens: Sequence[TokenRecord], then: InTransaction
    ) -> None:
        """:meth:`insert_copied` once the records are checked; ``then`` runs last in the same transaction (it
        writes the roles and configurations).

        Raises:
            KeyExistsError, KeyRecentlyDeletedError, ConflictError: as :meth:`insert_copied`.
        """

    @abc.abstractmethod
    def _insert_token(self, record: TokenRecord, reissuable: bool = False) -> None:
        """Store the checked ``record`` and, unless it is ``reissuable``, append a ``token_created`` change
        (see :meth:`create_token`).

        Raises:
            ConflictError: a token with that id exists.
        """

    @abc.abstractmethod
    def _read_token(self, token_id: str) -> TokenRecord | None:
        """The token ``token_id``, or ``None``."""

    @abc.abstractmethod
    def _renew_token(self, token_id: str, check: Callable[[TokenRecord], datetime]) -> TokenRecord | None:
        """In one write transaction that holds the token: move its ``expires_at`` to ``check(record)``,
        append a ``token_renewed`` change and return the updated record; ``None`` when there is no such token.

        Raises:
            Exception: whatever ``check`` raised; nothing was written.
        """

    @abc.abstractmethod
    def _delete_token(self, token_id: str) -> bool:
        """Delete the token and append a ``token_deleted`` change; False (nothing written) if none."""


def _random_version(info: KeyInfo) -> memoryview:
    """Fresh random material for a new version of ``info`` (``getrandom``, into locked memory)."""
    return random_secret(KEY_TYPES[info.key_type]).readonly()


def _check_deletion_allowed(info: KeyInfo) -> None:
    """Refuse to delete a key whose policy keeps it.

    Raises:
        DeletionNotAllowedError: ``info.deletion_allowed`` is false.
    """
    if not info.deletion_allowed:
        raise DeletionNotAllowedError(
            f"key {info.name!r} cannot be deleted: set deletion_allowed to true first"
        )


def _no_listener() -> None:
    """Stop a listener that never started."""

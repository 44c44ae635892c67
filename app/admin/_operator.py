"""``keystream-server operator init`` and ``operator migrate-seal --to SEAL``: the keystore's seal.

``init`` opens the seal ``KEYSTREAM_SEAL`` selects, creating what it needs: for ``pkcs11`` the master key in
the token (AES-256, generated inside it, non-extractable and sensitive) when no key has
``KEYSTREAM_PKCS11_KEY_LABEL``; for ``file`` ``data/master.key`` when no key is given. It then opens the
keystore with that seal, which records the seal's check value (and, for a seal that cannot derive keys, the
audit keys' material wrapped under it) on first use. A keystore already sealed by another seal or master key
is refused and nothing is written. Running it again is harmless.

``migrate-seal --to SEAL`` moves the keystore from the seal ``KEYSTREAM_SEAL`` names (the one in use) to
``SEAL``, configured by the same settings (``pkcs11``: the ``KEYSTREAM_PKCS11_*`` ones, its key created in the
token when absent; ``file``: ``KEYSTREAM_MASTER_KEY``, ``_FILE`` or ``data/master.key``, created when none is
given for SQLite). Every key version, the check value and the audit keys are rewrapped in **one** keystore
transaction (:meth:`~app.keystore.base.KeyStore.reseal`): if any version does not unwrap, nothing is written
(exit 1), and a process killed in the middle leaves the keystore under the old seal. Stop the servers first;
start them again with ``KEYSTREAM_SEAL=SEAL``. The audit keys move unchanged, so the log keeps verifying.

With ``KEYSTREAM_AUDIT_LOG`` set, each operation is recorded in the log's own file (the setting's path, beside
the workers' ``.w<i>`` files), chained and verified like every other line.

Exit codes: 0 done; 1 a secret does not unwrap (nothing written) or the keystore cannot serve (database
down); 2 bad settings, or a seal or keystore that refuses (one line naming the setting, never a PIN or key
bytes).
"""

from __future__ import annotations

import argparse
import datetime
import logging
from typing import TYPE_CHECKING, Any

from app.admin._common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, error
from app.seal.base import SEAL_KINDS

if TYPE_CHECKING:
    from app.core.config import Settings
    from app.keystore import KeyStore
    from app.seal import Seal

__all__ = ["add_parser", "cmd_init", "cmd_migrate_seal", "write_operator_record"]


def add_parser(commands: Any) -> None:
    """Register ``operator init`` on the ``keystream-server`` subcommands."""
    operator = commands.add_parser(
        "operator", help="the root of trust: initialise or change the keystore's seal"
    )
    actions = operator.add_subparsers(dest="operator_command", metavar="ACTION", required=True)
    init = actions.add_parser(
        "init",
        help="create the seal's master key if absent and seal the keystore with it",
        description="Open the seal KEYSTREAM_SEAL selects (pkcs11: create the AES-256 master key inside the "
        "token when no key has KEYSTREAM_PKCS11_KEY_LABEL; file: data/master.key when no key is given), then "
        "open the keystore with it, recording its check value. Refuses a keystore sealed by another seal.",
        epilog="exit codes: 0 done, 1 keystore unavailable, 2 bad settings or a refused seal or keystore",
    )
    init.set_defaults(handler=cmd_init)
    migrate = actions.add_parser(
        "migrate-seal",
        help="rewrap every stored secret from the seal in use (KEYSTREAM_SEAL) to another",
        description="Rewrap every key version, the check value and the audit keys from the seal "
        "KEYSTREAM_SEAL names to SEAL, in one keystore transaction (SQLite or PostgreSQL). Nothing is "
        "written if any secret does not unwrap. Stop the servers first; restart them with "
        "KEYSTREAM_SEAL=SEAL.",
        epilog="exit codes: 0 done, 1 a secret does not unwrap or the keystore is unavailable (nothing "
        "written), 2 bad settings or a refused seal or keystore",
    )
    migrate.add_argument("--to", required=True, choices=SEAL_KINDS, help="the seal to move to")
    migrate.set_defaults(handler=cmd_migrate_seal)


def _quiet_store_logs() -> None:
    """The error line says it once; the stores' connection warnings would repeat it over several lines."""
    for name in ("psycopg", "app.keystore.postgres", "app.keystore.sqlite"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def write_operator_record(settings: Settings, keystore: KeyStore, seal: Seal, record: dict[str, Any]) -> None:
    """Append an operator ``record`` to the audit log's own file, when ``audit_log`` is set.

    The chain key is the keystore's audit key (:func:`app.audit.audit_keys_for`), so ``audit verify`` checks
    these lines with the workers'.

    Raises:
        AuditUnavailableError: the line cannot be written.
    """
    from app.audit import AuditLog, audit_keys_for, worker_path

    if settings.audit_log is None:
        return
    keys = audit_keys_for(seal, keystore.audit_key_material())
    log = AuditLog(worker_path(settings.audit_log, None), keys.chain_key)
    try:
        now = datetime.datetime.now(datetime.UTC).isoformat().replace("+00:00", "Z")
        log.write({"time": now, "type": "operator", **record})
    finally:
        log.close()


def cmd_init(args: argparse.Namespace) -> int:
    """Run ``operator init`` (see the module docstring for what it does and its exit codes)."""
    from pydantic import ValidationError

    from app.core.config import describe_settings_error, get_settings
    from app.errors import KeystreamError
    from app.keystore import KeystoreSchemaError, MasterKeyError, open_keystore_for
    from app.seal.file import open_file_seal

    _quiet_store_logs()
    try:
        get_settings.cache_clear()
        settings = get_settings()
    except ValidationError as exc:
        error(f"cannot init: invalid settings: {describe_settings_error(exc)}")
        return EXIT_USAGE
    created = False
    try:
        seal: Seal
        if settings.seal == "pkcs11":
            from app.seal.pkcs11 import open_pkcs11_seal

            pkcs11_seal = open_pkcs11_seal(settings, create_key=True)
            created, seal = pkcs11_seal.created_key, pkcs11_seal
        else:
            seal = open_file_seal(settings, create=True)
        try:
            keystore = open_keystore_for(settings, seal)
            try:
                write_operator_record(
                    settings,
                    keystore,
                    seal,
                    {
                        "operation": "init",
                        "seal": seal.kind,
                        "generation": seal.generation,
                        "key_created": created,
                    },
                )
            finally:
                keystore.close()
        finally:
            seal.close()
    except (MasterKeyError, KeystoreSchemaError, ValueError) as exc:
        error(f"cannot init: {exc}")
        return EXIT_USAGE
    except KeystreamError as exc:
        error(f"cannot init: {exc}")
        return EXIT_FAILED
    made = "created the master key in it" if created else "its master key was already there"
    print(f"initialised: the keystore is sealed by {seal.describe()}; {made}")
    return EXIT_OK


def cmd_migrate_seal(args: argparse.Namespace) -> int:
    """Run ``operator migrate-seal --to SEAL`` (the module docstring says what it does and its exit codes)."""
    from pydantic import ValidationError

    from app.audit import audit_keys_for
    from app.core.config import describe_settings_error, get_settings
    from app.errors import KeystreamError
    from app.keystore import KeystoreSchemaError, KeyUnwrapError, MasterKeyError, open_keystore_for
    from app.seal import open_seal

    _quiet_store_logs()
    try:
        get_settings.cache_clear()
        settings = get_settings()
    except ValidationError as exc:
        error(f"cannot migrate the seal: invalid settings: {describe_settings_error(exc)}")
        return EXIT_USAGE
    if args.to == settings.seal:
        error(f"cannot migrate the seal: KEYSTREAM_SEAL is already {args.to}; set it to the seal in use now")
        return EXIT_USAGE
    try:
        current = open_seal(settings, create=False)
        try:
            target: Seal
            if args.to == "pkcs11":
                from app.seal.pkcs11 import open_pkcs11_seal

                target = open_pkcs11_seal(settings, create_key=True)
            else:
                target = open_seal(settings, kind=args.to)
            try:
                keystore = open_keystore_for(settings, current)
                try:
                    keys = audit_keys_for(current, keystore.audit_key_material())
                    versions = sum(len(key.versions) for key in keystore.list_keys())
                    moving = f"from {current.describe()} to {target.describe()}"
                    print(f"rewrapping {versions} key versions {moving}", flush=True)
                    count = keystore.reseal(target, keys.hash_key + keys.chain_key)
                    write_operator_record(
                        settings,
                        keystore,
                        target,
                        {
                            "operation": "migrate_seal",
                            "from_seal": current.kind,
                            "to_seal": target.kind,
                            "generation": target.generation,
                            "key_versions": count,
                        },
                    )
                finally:
                    keystore.close()
            finally:
                target.close()
        finally:
            current.close()
    except KeyUnwrapError as exc:
        error(f"cannot migrate the seal: {exc}; nothing was written")
        return EXIT_FAILED
    except (MasterKeyError, KeystoreSchemaError, ValueError) as exc:
        error(f"cannot migrate the seal: {exc}")
        return EXIT_USAGE
    except KeystreamError as exc:
        error(f"cannot migrate the seal: {exc}")
        return EXIT_FAILED
    print(
        f"rewrapped {count} key versions, the check value and the audit keys under {target.describe()}; "
        f"start the servers with KEYSTREAM_SEAL={target.kind}"
    )
    return EXIT_OK

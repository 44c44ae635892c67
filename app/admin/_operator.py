"""``keystream-server operator init``, ``operator migrate-seal --to SEAL`` and ``operator rotate-master``:
the keystore's seal and its master key.

``init`` opens the seal ``KEYSTREAM_SEAL`` selects, creating what it needs: for ``pkcs11`` the master key in
the token (AES-256, generated inside it, non-extractable and sensitive) when no key has
``KEYSTREAM_PKCS11_KEY_LABEL``; for ``file`` ``data/master.key`` when no key is given. It then opens the
keystore with that seal, which records the seal's check value (and, for a seal that cannot derive keys, the
audit keys' material wrapped under it) on first use. A keystore already sealed by another seal or master key
is refused and nothing is written. Running it again is harmless.

For ``shamir``, ``init --shares N --threshold K [--json]`` generates the master key, splits it into N
shares of which any K unseal (:mod:`app.seal.shares`), stores only the check value and the share set's
public parameters in the keystore, installs the root token (``KEYSTREAM_ROOT_TOKEN``, or a generated one)
and prints the shares and the root token once. A keystore that has a check value already is refused: a
second init would make shares that open nothing.

``migrate-seal --to SEAL`` moves the keystore from the seal ``KEYSTREAM_SEAL`` names (the one in use) to
``SEAL``, configured by the same settings (``pkcs11``: the ``KEYSTREAM_PKCS11_*`` ones, its key created in the
token when absent; ``file``: ``KEYSTREAM_MASTER_KEY``, ``_FILE`` or ``data/master.key``, created when none is
given for SQLite; ``shamir``: a new master key split into ``--shares N`` of which ``--threshold K`` unseal).
Every key version, the check value and the audit keys are rewrapped in **one** keystore transaction
(:meth:`~app.keystore.base.KeyStore.reseal`): if any version does not unwrap, nothing is written (exit 1), and
a process killed in the middle leaves the keystore under the old seal. Stop the servers first; start them
again with ``KEYSTREAM_SEAL=SEAL``. The audit keys move unchanged, so the log keeps verifying.

Moving *to* shamir prints the new shares (``--json``: ``{"shares": [...], "threshold": K}``, as ``init``
without the root token: the tokens stay) inside the transaction, after every secret is rewrapped and before
it commits: a move that committed was shown, and a move killed before committing leaves the keystore under
the old seal with shares that open nothing. Moving *from* shamir needs the current master key: K shares,
typed at a prompt without echo on a terminal, else one a line on stdin (:mod:`app.admin._shares`); a
refused share or too few of them exit 1 with nothing written.

``rotate-master [--batch-size N]`` rotates the master key online, under the same seal
(:mod:`app.keystore.generations`): it makes a new master key generation, under which every server wraps new
key versions at once, then rewraps every stored secret in batches of N versions (each batch its own short
transaction) while the servers keep serving, and retires the older generations once no blob uses them.
Ciphertexts are not touched. A rotation killed in the middle loses nothing (every blob stays readable under
its own generation) and is resumed by the next ``rotate-master`` (once its lease, 10 s, ran out). With the
shamir seal it first reads K shares, as ``migrate-seal`` does (or rotate in an unsealed server:
``POST /v1/sys/rotate-master``).

With ``KEYSTREAM_AUDIT_LOG`` set, each operation is recorded in the log's own file (the setting's path, beside
the workers' ``.w<i>`` files), chained and verified like every other line.

Exit codes: 0 done; 1 a secret does not unwrap, a share is refused or missing (nothing written), another
rotation is running, or the keystore cannot serve (database down), or a move that was committed could not
write its audit line (the message says the keystore moved); 2 bad flags or settings, or a seal or keystore
that refuses (one line naming the setting, never a PIN or key bytes).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import logging
import sys
from typing import TYPE_CHECKING, Any

from app.admin._common import EXIT_FAILED, EXIT_OK, EXIT_USAGE, error, positive
from app.admin._shares import SharesRefusedError, unseal_from_input
from app.seal.base import SEAL_KINDS

if TYPE_CHECKING:
    from app.core.config import Settings
    from app.keystore import KeyStore
    from app.seal import Seal
    from app.seal.shares import ShareParameters

__all__ = ["add_parser", "cmd_init", "cmd_migrate_seal", "cmd_rotate_master", "write_operator_record"]


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
    _add_share_options(init, "seal=shamir", '{"shares": [...], "threshold": K, "root_token": "ks_..."} only')
    init.set_defaults(handler=cmd_init)
    migrate = actions.add_parser(
        "migrate-seal",
        help="rewrap every stored secret from the seal in use (KEYSTREAM_SEAL) to another",
        description="Rewrap every key version, the check value and the audit keys from the seal "
        "KEYSTREAM_SEAL names to SEAL, in one keystore transaction (SQLite or PostgreSQL). Nothing is "
        "written if any secret does not unwrap. Stop the servers first; restart them with "
        "KEYSTREAM_SEAL=SEAL. --to shamir makes a new master key and prints its shares once, just before "
        "the move commits. From KEYSTREAM_SEAL=shamir, give K shares: prompted without echo on a terminal, "
        "else one a line on stdin.",
        epilog="exit codes: 0 done, 1 a secret does not unwrap, a share is refused or missing, or the "
        "keystore is unavailable (nothing written), 2 bad flags or settings, or a refused seal or keystore",
    )
    migrate.add_argument("--to", required=True, choices=SEAL_KINDS, help="the seal to move to")
    _add_share_options(migrate, "--to shamir", '{"shares": [...], "threshold": K} only (progress on stderr)')
    migrate.set_defaults(handler=cmd_migrate_seal)
    rotate = actions.add_parser(
        "rotate-master",
        help="rotate the master key online: a new generation under the same seal, every secret rewrapped",
        description="Make a new master key generation under the seal KEYSTREAM_SEAL names (new key versions "
        "are wrapped under it at once, by every server), then rewrap every stored secret in batches while "
        "the servers keep serving, and retire the older generations. Ciphertexts are not touched. A rotation "
        "that did not finish is resumed. From KEYSTREAM_SEAL=shamir, give K shares: prompted without echo "
        "on a terminal, else one a line on stdin (or rotate in an unsealed server: POST "
        "/v1/sys/rotate-master).",
        epilog="exit codes: 0 done, 1 another rotation is running, a share is refused, a secret does not "
        "unwrap or the keystore "
        "is unavailable (every secret stays readable; run again to resume), 2 bad settings or a refused seal",
    )
    rotate.add_argument(
        "--batch-size",
        type=positive,
        default=None,
        metavar="N",
        help="key versions rewrapped per transaction (default 500)",
    )
    rotate.set_defaults(handler=cmd_rotate_master)


def _add_share_options(parser: argparse.ArgumentParser, when: str, printed: str) -> None:
    """``--shares N``, ``--threshold K`` and ``--json`` of a command that makes shamir shares (``when``: the
    case they apply to, for the help; ``printed``: what ``--json`` prints)."""
    parser.add_argument(
        "--shares", type=positive, metavar="N", help=f"{when}: how many shares to make (at most 255)"
    )
    parser.add_argument(
        "--threshold", type=positive, metavar="K", help=f"{when}: how many shares unseal (K <= N)"
    )
    parser.add_argument("--json", action="store_true", help=f"{when}: print {printed}")


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


def _settings(doing: str) -> Settings | None:
    """The ``KEYSTREAM_*`` settings, or ``None`` after one error line saying what is invalid."""
    from pydantic import ValidationError

    from app.core.config import describe_settings_error, get_settings

    _quiet_store_logs()
    try:
        get_settings.cache_clear()
        return get_settings()
    except ValidationError as exc:
        error(f"cannot {doing}: invalid settings: {describe_settings_error(exc)}")
        return None


def _open_creating(settings: Settings, kind: str) -> tuple[Seal, bool]:
    """The seal of ``kind``, creating its master key when absent; and whether it was created in a token.

    Raises:
        MasterKeyError: the seal cannot be opened (see :func:`app.seal.open_seal`).
    """
    from app.seal import open_seal

    if kind == "pkcs11":
        from app.seal.pkcs11 import open_pkcs11_seal

        seal = open_pkcs11_seal(settings, create_key=True)
        return seal, seal.created_key
    return open_seal(settings, create=True, kind=kind), False


def cmd_init(args: argparse.Namespace) -> int:
    """Run ``operator init`` (see the module docstring for what it does and its exit codes)."""
    from app.errors import KeystreamError
    from app.keystore import KeystoreSchemaError, MasterKeyError, open_keystore_for

    settings = _settings("init")
    if settings is None:
        return EXIT_USAGE
    if settings.seal == "shamir":
        return _init_shamir(args, settings)
    if args.shares is not None or args.threshold is not None or args.json:
        error("cannot init: --shares, --threshold and --json are for KEYSTREAM_SEAL=shamir")
        return EXIT_USAGE
    try:
        seal, created = _open_creating(settings, settings.seal)
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


def _init_shamir(args: argparse.Namespace, settings: Settings) -> int:
    """``operator init`` for the shamir seal: a new master key, its shares and the root token, shown once."""
    from app.errors import KeystreamError
    from app.keystore import KeystoreSchemaError, MasterKeyError, open_keystore_for
    from app.seal.shamir import ShamirSeal, new_master_key
    from app.seal.shares import split_master_key
    from app.services.security import install_root_token

    if args.shares is None or args.threshold is None:
        error("cannot init: KEYSTREAM_SEAL=shamir needs --shares N and --threshold K")
        return EXIT_USAGE
    master_key = new_master_key()
    try:
        parameters, shares = split_master_key(master_key, args.threshold, args.shares)
    except ValueError as exc:
        error(f"cannot init: {exc}")
        return EXIT_USAGE
    seal = ShamirSeal(master_key, parameters, initialising=True)
    del master_key
    try:
        keystore = open_keystore_for(settings, seal)
        try:
            root = settings.root_token.get_secret_value() if settings.root_token else None
            generated = install_root_token(keystore, root)
            root_token = generated if generated is not None else root
            write_operator_record(
                settings,
                keystore,
                seal,
                {
                    "operation": "init",
                    "seal": seal.kind,
                    "generation": seal.generation,
                    "threshold": parameters.threshold,
                    "shares": parameters.shares,
                },
            )
        finally:
            keystore.close()
    except (MasterKeyError, KeystoreSchemaError, ValueError) as exc:
        error(f"cannot init: {exc}")
        return EXIT_USAGE
    except KeystreamError as exc:
        error(f"cannot init: {exc}")
        return EXIT_FAILED
    finally:
        seal.close()
    if args.json:
        print(json.dumps({"shares": shares, "threshold": parameters.threshold, "root_token": root_token}))
        return EXIT_OK
    print(f"initialised: the keystore is sealed by {seal.describe()}; shown once, store each share apart:")
    for number, share in enumerate(shares, start=1):
        print(f"  share {number}: {share}")
    if root_token is not None:
        print(f"  root token: {root_token}")
    print(f"a server with KEYSTREAM_SEAL=shamir starts sealed: give it {parameters.threshold} shares")
    return EXIT_OK


class _SharesNotShownError(Exception):
    """The new shares could not be written to stdout, so the move must not commit."""


def _check_migrate_args(args: argparse.Namespace, settings: Settings) -> str | None:
    """What is wrong with ``migrate-seal``'s flags for the seals involved, or ``None``."""
    if args.to == settings.seal:
        return f"KEYSTREAM_SEAL is already {args.to}; set it to the seal in use now"
    if args.to == "shamir" and (args.shares is None or args.threshold is None):
        return "--to shamir needs --shares N and --threshold K"
    if args.to != "shamir" and (args.shares is not None or args.threshold is not None or args.json):
        return "--shares, --threshold and --json are for --to shamir"
    return None


def _show_new_shares(shares: list[str], parameters: ShareParameters, as_json: bool) -> None:
    """Print the shares of a move to the shamir seal, before it commits (see :func:`cmd_migrate_seal`).

    Raises:
        _SharesNotShownError: stdout cannot be written (a closed pipe, a full disk): the move must not count.
    """
    try:
        if as_json:
            print(json.dumps({"shares": shares, "threshold": parameters.threshold}), flush=True)
            return
        print(
            f"the new shares of the shamir seal ({parameters.threshold} of {parameters.shares}), shown once; "
            "store each apart. They open the keystore only if this command ends with 'rewrapped':"
        )
        for number, share in enumerate(shares, start=1):
            print(f"  share {number}: {share}")
        sys.stdout.flush()
    except OSError as exc:
        raise _SharesNotShownError(f"cannot print the new shares: {exc.strerror or exc}") from None


def cmd_migrate_seal(args: argparse.Namespace) -> int:
    """Run ``operator migrate-seal --to SEAL`` (the module docstring says what it does and its exit codes)."""
    from app.audit import audit_keys_for
    from app.errors import KeystreamError
    from app.keystore import KeystoreSchemaError, KeyUnwrapError, MasterKeyError, open_keystore_for
    from app.seal import open_seal
    from app.seal.shamir import ShamirSeal, new_master_key
    from app.seal.shares import split_master_key

    settings = _settings("migrate the seal")
    if settings is None:
        return EXIT_USAGE
    problem = _check_migrate_args(args, settings)
    if problem is not None:
        error(f"cannot migrate the seal: {problem}")
        return EXIT_USAGE
    new_shares: tuple[ShareParameters, list[str]] | None = None
    shamir_target: ShamirSeal | None = None
    if args.to == "shamir":
        master_key = new_master_key()
        try:
            new_shares = split_master_key(master_key, args.threshold, args.shares)
        except ValueError as exc:
            error(f"cannot migrate the seal: {exc}")
            return EXIT_USAGE
        shamir_target = ShamirSeal(master_key, new_shares[0])
        del master_key
    # Progress lines go to stderr with --json, so that stdout holds the JSON alone.
    progress = sys.stderr if args.json else sys.stdout
    shown = committed = False

    def show_shares() -> None:
        nonlocal shown
        if new_shares is not None:
            _show_new_shares(new_shares[1], new_shares[0], args.json)
            shown = True

    try:
        with contextlib.ExitStack() as stack:
            if shamir_target is not None:
                stack.callback(shamir_target.close)
            current = open_seal(settings, create=False)
            stack.callback(current.close)
            keystore = open_keystore_for(settings, current)
            stack.callback(keystore.close)
            unseal_from_input(current)  # a shamir keystore: K shares, read before anything is created
            if shamir_target is not None:
                target: Seal = shamir_target
            else:
                target, _ = _open_creating(settings, args.to)
                stack.callback(target.close)
            keys = audit_keys_for(current, keystore.audit_key_material())
            versions = sum(len(key.versions) for key in keystore.list_keys())
            moving = f"from {current.describe()} to {target.describe()}"
            print(f"rewrapping {versions} key versions {moving}", file=progress, flush=True)
            count = keystore.reseal(target, keys.material, show_shares)
            committed = True
            record: dict[str, Any] = {
                "operation": "migrate_seal",
                "from_seal": current.kind,
                "to_seal": target.kind,
                "generation": target.generation,
                "key_versions": count,
            }
            if new_shares is not None:
                record.update(threshold=new_shares[0].threshold, shares=new_shares[0].shares)
            write_operator_record(settings, keystore, target, record)
            described = target.describe()
    except (KeyUnwrapError, SharesRefusedError, _SharesNotShownError) as exc:
        error(f"cannot migrate the seal: {exc}; nothing was written")
        return EXIT_FAILED
    except (MasterKeyError, KeystoreSchemaError, ValueError) as exc:
        error(f"cannot migrate the seal: {exc}")
        return EXIT_USAGE
    except KeystreamError as exc:
        if committed:  # only the audit line is missing: the move itself is done
            keep = "; keep the shares printed above" if shown else ""
            error(
                f"the keystore moved to the {args.to} seal (start the servers with KEYSTREAM_SEAL={args.to}"
                f"{keep}), but its audit line was not written: {exc}"
            )
        elif shown:  # the database failed while committing: PostgreSQL cannot tell whether it did
            error(
                f"cannot migrate the seal: {exc}; the move may have been committed: keep the shares printed "
                "above until a server with one seal or the other opens the keystore"
            )
        else:
            error(f"cannot migrate the seal: {exc}")
        return EXIT_FAILED
    if args.json:
        return EXIT_OK
    print(
        f"rewrapped {count} key versions, the check value and the audit keys under {described}; "
        f"start the servers with KEYSTREAM_SEAL={args.to}"
        + (f" and unseal each with {new_shares[0].threshold} shares" if new_shares is not None else "")
    )
    return EXIT_OK


def cmd_rotate_master(args: argparse.Namespace) -> int:
    """Run ``operator rotate-master`` (the module docstring says what it does and its exit codes)."""
    from app.errors import KeystreamError
    from app.keystore import KeystoreSchemaError, KeyUnwrapError, MasterKeyError, open_keystore_for
    from app.keystore.generations import DEFAULT_BATCH_SIZE, MasterRotation
    from app.seal import open_seal

    settings = _settings("rotate the master key")
    if settings is None:
        return EXIT_USAGE
    batch_size = DEFAULT_BATCH_SIZE if args.batch_size is None else args.batch_size
    try:
        seal = open_seal(settings, create=False)
        try:
            keystore = open_keystore_for(settings, seal)
            try:
                unseal_from_input(seal)  # the shamir seal: K shares; the others are unsealed already
                rotation = MasterRotation(keystore, batch_size=batch_size)
                started = rotation.begin()
                doing = "resuming the rotation" if started.resumed else "rotating"
                print(
                    f"{doing} to master key generation {started.generation} under {seal.describe()}",
                    flush=True,
                )
                record = {"operation": "rotate_master", "seal": seal.kind, "generation": started.generation}
                write_operator_record(
                    settings, keystore, seal, {**record, "phase": "start", "resumed": started.resumed}
                )
                finished = rotation.run()
                assert finished is not None  # run() returns None only when asked to stop
                write_operator_record(
                    settings, keystore, seal, {**record, "phase": "finish", "rewrapped": finished.rewrapped}
                )
            finally:
                keystore.close()
        finally:
            seal.close()
    except (MasterKeyError, KeystoreSchemaError, ValueError) as exc:
        error(f"cannot rotate the master key: {exc}")
        return EXIT_USAGE
    except SharesRefusedError as exc:
        error(f"cannot rotate the master key: {exc}; nothing was written")
        return EXIT_FAILED
    except KeyUnwrapError as exc:
        error(f"cannot rotate the master key: {exc}; every secret stays readable, run again to resume")
        return EXIT_FAILED
    except KeystreamError as exc:
        error(f"cannot rotate the master key: {exc}")
        return EXIT_FAILED
    print(
        f"master key generation {finished.generation}: {finished.rewrapped} key versions rewrapped, the "
        "older generations retired"
    )
    return EXIT_OK

"""``keystream-server audit verify PATH [PATH...]``: check the audit log's HMAC chain.

One PATH is the log as configured (``KEYSTREAM_AUDIT_LOG``): the files are found beside it, ``PATH`` and
every worker's ``PATH.w<i>``, each after its rotations (:func:`app.audit.log_files`). Several PATHs are
files given in log order, oldest first (``audit.log.2 audit.log.1 audit.log``). The chain key comes from
the seal ``serve`` uses (``KEYSTREAM_SEAL``; for the file seal ``KEYSTREAM_MASTER_KEY``, ``_FILE`` or
``master.key`` in ``KEYSTREAM_DATA_DIR``, never generated here): stored wrapped in the keystore when the
keystore holds it (a pkcs11 seal, or a keystore that moved between seals), else derived from the master key.
With ``KEYSTREAM_SEAL=shamir`` the stored key is under the shares' master key: give K shares, typed at a
prompt without echo on a terminal, else one a line on stdin (:mod:`app.admin._shares`).

It prints the first line that was changed, removed or reordered, or each chain's *head*
(``<chain>:<records>:<hmac>``). A file that no rotated file precedes must begin its chains at their first
record (or right after a remembered head): lines removed from its start are reported. Lines cut from the
end of a log leave a valid shorter chain: only a head remembered from an earlier run shows that, so keep
the printed head and pass it back with ``--expect-head``.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Any

from app.admin._common import EXIT_FAILED, EXIT_OK, UsageError, error
from app.admin._shares import SharesRefusedError, unseal_from_input

__all__ = ["add_parser", "cmd_verify"]


def add_parser(commands: Any) -> None:
    """Register ``audit verify`` on the ``keystream-server`` subcommands."""
    audit = commands.add_parser("audit", help="audit log tools: verify its HMAC chain")
    actions = audit.add_subparsers(dest="audit_command", metavar="ACTION", required=True)
    verify = actions.add_parser(
        "verify",
        help="check that no line of the audit log was changed, removed or reordered",
        description="Verify the HMAC chain of the audit log. One PATH is the log as configured "
        "(KEYSTREAM_AUDIT_LOG): PATH and each worker's PATH.w<i> are found with their rotations. Several "
        "PATHs are files given oldest first (PATH.2 PATH.1 PATH). Prints the first bad line, or each "
        "chain's head <chain>:<records>:<hmac>. Lines removed from the END of a log cannot be detected "
        "from the log alone: remember the head and pass it to --expect-head next time. The master key "
        "comes from the same settings as serve's; with KEYSTREAM_SEAL=shamir, give K shares on stdin, one a "
        "line.",
        epilog="exit codes: 0 intact, 1 a line changed, removed or reordered, or a remembered head "
        "missing (truncation), 2 usage: a file unreadable, no master key",
    )
    verify.add_argument(
        "paths",
        metavar="PATH",
        nargs="+",
        help="the configured log path (its worker and rotated files are found), or files oldest first",
    )
    verify.add_argument(
        "--expect-head",
        action="append",
        default=[],
        metavar="HEAD",
        help="a head printed by an earlier run (<chain>:<records>:<hmac>); it must still be in the log",
    )
    verify.set_defaults(handler=cmd_verify)


def _lines(paths: list[str]) -> Iterator[tuple[str, int, str]]:
    for path in paths:
        with open(path, encoding="utf-8", errors="surrogateescape", newline="\n") as handle:
            for number, line in enumerate(handle, start=1):
                yield path, number, line


def cmd_verify(args: argparse.Namespace) -> int:
    """Run ``audit verify`` (see the module docstring for what it prints and its exit codes)."""
    from pydantic import ValidationError

    from app.audit import audit_keys_for, is_first_file, parse_head, verify_lines
    from app.core.config import Settings
    from app.keystore import DATABASE_FILE, MasterKeyError, open_keystore_for
    from app.seal import open_seal

    for head in args.expect_head:
        try:
            parse_head(head)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    try:
        settings = Settings()
        seal = open_seal(settings, create=False)
    except ValidationError as exc:
        raise UsageError(f"bad KEYSTREAM_* settings: {exc.error_count()} error(s)") from None
    except MasterKeyError as exc:
        raise UsageError(str(exc)) from None
    try:
        stored = None
        if settings.database_url is not None or (settings.data_dir / DATABASE_FILE).exists():
            keystore = open_keystore_for(settings, seal)
            try:
                unseal_from_input(seal)
                stored = keystore.audit_key_material()
            finally:
                keystore.close()
        keys = audit_keys_for(seal, stored)
    except (MasterKeyError, SharesRefusedError) as exc:
        raise UsageError(str(exc)) from None
    finally:
        seal.close()
    files = _files(args.paths)
    starts = {path for path in files if is_first_file(path)}
    try:
        report = verify_lines(keys.chain_key, _lines(files), args.expect_head, starts)
    except OSError as exc:
        raise UsageError(f"cannot read {exc.filename}: {exc.strerror}") from None
    if report.problem is not None:
        error(f"audit log broken: {report.problem}")
        return EXIT_FAILED
    for chain, state in report.chains.items():
        start = (
            ""
            if state.first_seq == 0
            else f" (starts at record {state.first_seq + 1}: older files not given)"
        )
        print(f"chain {chain}: {state.lines} lines intact{start}")
        print(f"head {chain}:{state.head}")
    print(
        f"ok: {report.lines} lines in {len(files)} file(s) ({' '.join(files)}). Lines removed from the end "
        "cannot be seen without a remembered head: keep the head line(s) above and pass them to "
        "--expect-head next time."
    )
    return EXIT_OK


def _files(paths: list[str]) -> list[str]:
    """The files to verify: those of the configured log for one PATH (see the module docstring), else the
    PATHs as given.

    Raises:
        UsageError: one PATH, and neither it nor a worker file beside it exists.
    """
    if len(paths) != 1:
        return paths
    from app.audit import log_files

    try:
        files = log_files(paths[0])
    except OSError as exc:
        raise UsageError(f"cannot read {paths[0]}: {exc.strerror}") from None
    if not files:
        raise UsageError(f"cannot read {paths[0]}: no such file, nor worker files {paths[0]}.w<i>")
    return files

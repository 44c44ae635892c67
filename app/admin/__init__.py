"""``keystream-server``: run the Keystream service and, later, its server-side admin commands.

Exit codes (stable; scripts may rely on them):

====  ===========================================================================================
 0    success (``serve``: a normal shutdown; ``keystore copy``: DST holds every key and token of SRC)
 1    ``keystore copy``: DST has keys or tokens that differ from SRC's, a version does not unwrap, or a
      database cannot serve (nothing was copied); ``audit verify``: a line was changed, removed or
      reordered, or a remembered head is missing; ``operator migrate-seal``: a secret does not unwrap or a
      share is refused (nothing written); ``operator rotate-master``: another rotation holds the lease, a
      share is refused or a version does not unwrap (every secret stays readable; run it again to resume)
 2    usage error: bad flags or arguments, bad ``KEYSTREAM_*`` settings, or a start ``serve`` refuses
      (master key open to other users or not matching the keystore, a seal that cannot be opened: library,
      token, PIN or key missing or wrong, a keystore from a newer release, an unusable TLS file, the
      listening address in use: one line naming the setting); ``operator init``: the same refusals;
      ``keystore copy``: no master key, or one that does not open SRC or DST; ``audit verify``: a file
      cannot be read, or no master key
====  ===========================================================================================

Each command lives in a module of its own that exposes ``add_parser(commands)``; the parser registers the
modules listed in :data:`COMMANDS`, so a new command (``keystore copy``, ``audit verify``) is one module plus
one line here. The client commands (keys, tokens, encrypt, decrypt) are the ``keystream`` command of the
separate ``keystream-client`` distribution.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import sys
from collections.abc import Callable, Sequence

from app.admin import _audit, _keystore, _operator, _serve
from app.admin._common import EXIT_OK, EXIT_USAGE, PROG, UsageError, error

#: The command modules, in ``--help`` order; each has ``add_parser(commands)``.
COMMANDS = (_serve, _keystore, _audit, _operator)

__all__ = ["COMMANDS", "EXIT_OK", "EXIT_USAGE", "build_parser", "main"]


def _version() -> str:
    try:
        return importlib.metadata.version("keystream")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The ``keystream-server`` argument parser (every command has ``--help``)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Keystream server: run the AES-CTR encryption service. Clients use the `keystream` "
        "command of the keystream-client distribution.",
        epilog="exit codes: 0 ok, 1 keystore copy failed (nothing copied) or audit log broken, 2 usage, "
        "bad settings or a refused start",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        module.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``keystream-server`` command line; returns the exit code (see the module docstring)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        error(str(exc))
        return EXIT_USAGE

"""Exit codes of ``keystream`` (table in :mod:`keystream_client.cli`) and the errors that choose them."""

from __future__ import annotations

EXIT_OK = 0
EXIT_API_ERROR = 1
EXIT_USAGE = 2
EXIT_CONNECTION = 3
EXIT_INTEGRITY = 4
EXIT_AUTH = 5
EXIT_NOT_FOUND = 6
EXIT_CONFLICT = 7
EXIT_IO = 8
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class UsageError(Exception):
    """The command line is wrong in a way argparse cannot see (exit code 2)."""


class TerminatedError(KeyboardInterrupt):
    """SIGTERM arrived: unwind like Ctrl-C so a partial output file is removed (exit code 143)."""


def raise_terminated(signum: int, frame: object) -> None:
    """SIGTERM handler of ``encrypt``/``decrypt``.

    Raises:
        TerminatedError: always.
    """
    raise TerminatedError

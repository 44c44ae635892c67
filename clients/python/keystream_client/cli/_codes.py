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
EXIT_ITEMS_FAILED = 9
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


class UsageError(Exception):
    """The command line is wrong in a way argparse cannot see: reported like argparse's own errors, the
    command's usage line then one error line (exit code 2)."""


class CommandError(Exception):
    """A runtime failure of a well-formed command (input missing, output exists, no token, ...): reported
    as one ``keystream: error: ...`` line, no usage banner, with :attr:`exit_code`."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class TerminatedError(KeyboardInterrupt):
    """SIGTERM arrived: unwind like Ctrl-C so a partial output file is removed (exit code 143)."""


def raise_terminated(signum: int, frame: object) -> None:
    """SIGTERM handler of ``encrypt``/``decrypt`` and ``batch``.

    Raises:
        TerminatedError: always.
    """
    raise TerminatedError

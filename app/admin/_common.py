"""What every ``keystream-server`` command shares: the program name, exit codes and error output."""

from __future__ import annotations

import argparse
import sys

PROG = "keystream-server"
EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


class UsageError(Exception):
    """The command line or the settings are wrong in a way argparse cannot see (exit code 2)."""


def error(message: str) -> None:
    """Print ``keystream-server: error: message`` on stderr (one line; never secrets)."""
    print(f"{PROG}: error: {message}", file=sys.stderr)


def non_negative(text: str) -> int:
    """An integer >= 0 (base prefixes allowed).

    Raises:
        argparse.ArgumentTypeError: not such an integer.
    """
    try:
        value = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def positive(text: str) -> int:
    """An integer >= 1.

    Raises:
        argparse.ArgumentTypeError: not such an integer.
    """
    value = non_negative(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be >= 1")
    return value

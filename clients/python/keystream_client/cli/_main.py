"""``keystream``'s entry point: parse, run the command, and turn every error into its exit code."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence

from keystream_client import (
    KeystreamAPIError,
    KeystreamClientError,
    KeystreamConnectionError,
    KeystreamLoginError,
    KeystreamStreamError,
)
from keystream_client.cli._batch import cmd_batch
from keystream_client.cli._codes import (
    EXIT_API_ERROR,
    EXIT_AUTH,
    EXIT_CONFLICT,
    EXIT_CONNECTION,
    EXIT_INTEGRITY,
    EXIT_INTERRUPTED,
    EXIT_IO,
    EXIT_NOT_FOUND,
    EXIT_TERMINATED,
    EXIT_USAGE,
    CommandError,
    TerminatedError,
    UsageError,
    raise_terminated,
)
from keystream_client.cli._output import error
from keystream_client.cli._parser import build_parser
from keystream_client.cli._transfer import cmd_crypto


def _exit_code(exc: KeystreamAPIError) -> int:
    """The exit code for an error answer of the service."""
    if exc.code == "decryption_failed":
        return EXIT_INTEGRITY
    return {401: EXIT_AUTH, 403: EXIT_AUTH, 404: EXIT_NOT_FOUND, 409: EXIT_CONFLICT}.get(
        exc.status, EXIT_API_ERROR
    )


def _command_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> argparse.ArgumentParser:
    """The (sub)parser of the command that ran, e.g. ``keys config``'s: its usage line is the one to show."""
    current = parser
    while True:
        actions = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        chosen = getattr(args, actions[0].dest, None) if actions else None
        if not actions or chosen not in actions[0].choices:
            return current
        current = actions[0].choices[chosen]


def _report(exc: BaseException, message: str | None = None) -> None:
    """One ``keystream: error:`` line: ``message`` (default ``str(exc)``) and the exception's notes."""
    error("; ".join([message or str(exc), *getattr(exc, "__notes__", ())]))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``keystream`` command line; returns the exit code (see :mod:`keystream_client.cli`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    if handler in (cmd_crypto, cmd_batch) and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, raise_terminated)
    try:
        return handler(args)
    except UsageError as exc:
        # A usage error alone gets a usage line, the argparse way (exit code 2); runtime errors get one line.
        _command_parser(parser, args).error(str(exc))
    except CommandError as exc:
        _report(exc)
        return exc.exit_code
    except KeystreamAPIError as exc:
        _report(exc)
        return _exit_code(exc)
    except KeystreamStreamError as exc:
        _report(exc, f"{exc}; output is incomplete and was discarded (stdout: discard what was written)")
        return EXIT_INTEGRITY
    except KeystreamConnectionError as exc:
        _report(exc, f"cannot reach the service: {exc}")
        return EXIT_CONNECTION
    except KeystreamLoginError as exc:  # the automatic login's JWT file: no credential to present
        _report(exc)
        return EXIT_AUTH
    except (ValueError, TypeError) as exc:
        _report(exc)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): stop quietly, as other Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_IO
    except (OSError, KeystreamClientError) as exc:
        _report(exc)
        return EXIT_IO
    except TerminatedError as exc:
        _report(exc, "terminated")
        return EXIT_TERMINATED
    except KeyboardInterrupt as exc:
        _report(exc, "interrupted")
        return EXIT_INTERRUPTED

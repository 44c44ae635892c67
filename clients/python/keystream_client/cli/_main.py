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
    KeystreamStreamError,
)
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


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``keystream`` command line; returns the exit code (see :mod:`keystream_client.cli`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    if handler is cmd_crypto and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, raise_terminated)
    try:
        return handler(args)
    except UsageError as exc:
        parser.print_usage(sys.stderr)
        error(str(exc))
        return EXIT_USAGE
    except KeystreamAPIError as exc:
        error(str(exc))
        return _exit_code(exc)
    except KeystreamStreamError as exc:
        error(f"{exc}; output is incomplete and was discarded (stdout: discard what was written)")
        return EXIT_INTEGRITY
    except KeystreamConnectionError as exc:
        error(f"cannot reach the service: {exc}")
        return EXIT_CONNECTION
    except (ValueError, TypeError) as exc:
        error(str(exc))
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader of stdout went away (e.g. `| head`): stop quietly, as other Unix tools do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_IO
    except (OSError, KeystreamClientError) as exc:
        error(str(exc))
        return EXIT_IO
    except TerminatedError:
        error("terminated")
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        error("interrupted")
        return EXIT_INTERRUPTED

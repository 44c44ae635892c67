"""How the CLI tests run ``keystream``: the command line, its timeout and the fixture's type."""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable

#: ``keystream`` as a subprocess of this interpreter (the console script's module).
KEYSTREAM = [sys.executable, "-m", "keystream_client.cli"]
CLI_TIMEOUT = 120

RunCli = Callable[..., subprocess.CompletedProcess[bytes]]


def interruptible_by_sigint() -> None:
    """``preexec_fn`` for a CLI that a test interrupts with SIGINT: SIGINT at its default in the child, as a
    shell gives a foreground command. A child inherits an ignored SIGINT (Python then never raises
    KeyboardInterrupt), and the test runner's process may have come to ignore it through code run in process
    earlier in the suite, which made such a test wait out its timeout instead of testing the CLI."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)

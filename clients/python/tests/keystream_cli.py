"""How the CLI tests run ``keystream``: the command line, its timeout and the fixture's type."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable

#: ``keystream`` as a subprocess of this interpreter (the console script's module).
KEYSTREAM = [sys.executable, "-m", "keystream_client.cli"]
CLI_TIMEOUT = 120

RunCli = Callable[..., subprocess.CompletedProcess[bytes]]

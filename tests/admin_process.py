"""``keystream-server`` admin commands as subprocesses (``python -m app.admin``), for the tests.

The child gets this environment without any ``KEYSTREAM_*`` variable, plus ``env``: a test states every
setting it relies on.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TIMEOUT = 300


def start_admin(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    """Start ``python -m app.admin ARGS`` with text pipes for stdin, stdout and stderr."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    environment.update(env)
    return subprocess.Popen(
        [sys.executable, "-m", "app.admin", *args],
        cwd=REPO,
        env=environment,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_admin(*args: str, env: dict[str, str], stdin: str = "") -> subprocess.CompletedProcess[str]:
    """Run ``python -m app.admin ARGS`` to its end (at most TIMEOUT seconds), ``stdin`` on its input."""
    process = start_admin(*args, env=env)
    try:
        stdout, stderr = process.communicate(stdin, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)

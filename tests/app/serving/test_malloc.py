"""The served processes' malloc thresholds: buffers of a few hundred KiB that come and go (a stream's body
chunks) are reused, not faulted in afresh each time; an operator's own glibc settings are left alone.

Each case runs in a fresh interpreter (glibc's thresholds are per process and move as it allocates) and
counts the minor page faults of 200 rounds of ~256 KiB buffers made and freed, as a stream's chunk and its
output are: with glibc's dynamic defaults tens to over a hundred faults a round, fixed none.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

_ROUNDS = """
import resource, sys
from app.serving.malloc import fix_malloc_thresholds
fixed = fix_malloc_thresholds() if sys.argv[1] == "fix" else None
data = bytes(range(256)) * 4096
def rounds(count):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for index in range(count):
        chunk = data[: 250_000 + (index * 7919) % 40_000] + b"x"
        output = chunk + b"y"
        del chunk, output
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
rounds(20)
print(fixed, rounds(200) / 200)
"""


def _faults_per_round(mode: str, **environment: str) -> tuple[str, float]:
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")
    }
    done = subprocess.run(
        [sys.executable, "-c", _ROUNDS, mode],
        cwd=ROOT,
        env={**env, **environment},
        capture_output=True,
        text=True,
        check=True,
    )
    fixed, faults = done.stdout.split()
    return fixed, float(faults)


def test_fixed_thresholds_reuse_the_chunks_memory() -> None:
    # glibc's dynamic rule: the heap's top trimmed and faulted in again (20 a round here once the imports
    # had moved the thresholds up a little; over 100 in a bare interpreter).
    assert _faults_per_round("leave")[1] > 5
    fixed, faults = _faults_per_round("fix")
    assert fixed == "True" and faults < 1


def test_an_operators_glibc_settings_stand() -> None:
    fixed, _ = _faults_per_round("fix", MALLOC_TRIM_THRESHOLD_="131072")
    assert fixed == "False"

"""The committed console (``app/ui/static``) is what ``make ui`` builds from ``ui/`` and its lockfile.

The build runs in a copy of ``ui/`` (``npm ci`` from ``package-lock.json``, the strict type check, then
``build.mjs`` into a fresh directory), so the checkout's files are never touched. Node and npm come from
``make tools``; without them this test fails rather than passing unchecked.
"""

from __future__ import annotations

import filecmp
import shutil
import subprocess
from pathlib import Path

import pytest

from app.ui import STATIC_DIR

pytestmark = pytest.mark.slow

UI = Path(__file__).resolve().parents[3] / "ui"
SOURCES = ("package.json", "package-lock.json", "tsconfig.json", "build.mjs", "src")


def run(command: list[str], cwd: Path) -> None:
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"


def test_the_committed_console_is_a_fresh_build(tmp_path: Path) -> None:
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node is not None and npm is not None, "node and npm are missing: run make tools"
    work = tmp_path / "ui"
    work.mkdir()
    for name in SOURCES:
        source = UI / name
        if source.is_dir():
            shutil.copytree(source, work / name)
        else:
            shutil.copy2(source, work / name)
    run([npm, "ci", "--no-audit", "--no-fund"], work)
    run([str(work / "node_modules" / ".bin" / "tsc"), "--noEmit"], work)
    built = tmp_path / "static"
    run([node, "build.mjs", str(built)], work)
    comparison = filecmp.dircmp(built, STATIC_DIR)
    assert sorted(comparison.left_list) == sorted(comparison.right_list)
    different = [
        name
        for name in comparison.common_files
        if (built / name).read_bytes() != (STATIC_DIR / name).read_bytes()
    ]
    assert different == [], f"the committed build differs from a fresh one in {different}: run make ui"

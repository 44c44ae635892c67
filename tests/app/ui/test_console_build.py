"""The committed console (``app/ui/static``) is what ``make ui`` builds from ``ui/`` and its lockfile.

The build runs in a copy of ``ui/`` (``npm ci`` from ``package-lock.json``, the strict type check, then
``build.mjs`` into a fresh directory), so the checkout's files are never touched. Node and npm come from
``make tools``; without them this test fails rather than passing unchecked.
"""

from __future__ import annotations

import filecmp
import shutil
from pathlib import Path

import pytest

from app.ui import STATIC_DIR
from tests.app.ui.packages import installed_copy, run

pytestmark = pytest.mark.slow


def test_the_committed_console_is_a_fresh_build(tmp_path: Path) -> None:
    work = installed_copy(tmp_path)
    run([str(work / "node_modules" / ".bin" / "tsc"), "--noEmit"], work)
    built = tmp_path / "static"
    node = shutil.which("node")
    assert node is not None
    run([node, "build.mjs", str(built)], work)
    comparison = filecmp.dircmp(built, STATIC_DIR)
    assert sorted(comparison.left_list) == sorted(comparison.right_list)
    different = [
        name
        for name in comparison.common_files
        if (built / name).read_bytes() != (STATIC_DIR / name).read_bytes()
    ]
    assert different == [], f"the committed build differs from a fresh one in {different}: run make ui"

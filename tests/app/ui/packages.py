"""The console's npm packages installed from its lockfile into a scratch copy of ``ui/``, never into the
checkout: the build check rebuilds from them and the browser tests take axe-core from them.

Node and npm come from ``make tools``; without them the callers fail rather than pass unchecked.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

#: The console's sources (``make ui`` builds ``app/ui/static`` from them).
UI = Path(__file__).resolve().parents[3] / "ui"
#: What a build needs of ``ui/``: the manifest, the lockfile, the compiler settings, the build script and
#: the sources.
SOURCES = ("package.json", "package-lock.json", "tsconfig.json", "build.mjs", "src")


def run(command: list[str], cwd: Path) -> None:
    """Run ``command`` in ``cwd``; fail the test with its output when it exits non-zero."""
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"{' '.join(command)} failed:\n{result.stdout}\n{result.stderr}"


def installed_copy(work: Path) -> Path:
    """Copy ``ui/``'s sources into ``work/ui`` and run ``npm ci`` there (exactly the locked packages, dev
    dependencies included); the copy's directory."""
    npm = shutil.which("npm")
    assert shutil.which("node") is not None and npm is not None, "node and npm are missing: run make tools"
    copy = work / "ui"
    copy.mkdir(parents=True)
    for name in SOURCES:
        source = UI / name
        if source.is_dir():
            shutil.copytree(source, copy / name)
        else:
            shutil.copy2(source, copy / name)
    run([npm, "ci", "--no-audit", "--no-fund"], copy)
    return copy

"""No run of six or more identical code lines is written twice where one piece of code should serve both:
between the fast dispatcher and the middleware stack it runs through, and between the two keystores.

Lines are compared with surrounding white space removed; blank lines, comments, imports, lines of lone
punctuation and the parameter lines of a ``def`` are passed over (each store implements the same storage
methods of the keystore template, so their signatures are alike by design), so a run is real code (or its
docstring) written again. The two stores' SQL
differs by dialect and is not a copy; what they share lives in ``app/keystore/`` once.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
API = ROOT / "app" / "api"
KEYSTORE = ROOT / "app" / "keystore"
#: The shortest run that counts as written twice.
RUN = 6
_PUNCTUATION = re.compile(r"[\s()\[\]{},:;*]*")


def code_lines(text: str) -> list[tuple[int, str]]:
    """``(line number, stripped line)`` of the lines that count (see the module doc)."""
    lines: list[tuple[int, str]] = []
    in_signature = False
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if in_signature:  # a parameter line of a multi-line def, up to its closing ") -> ...:"
            in_signature = not (line.startswith(")") and line.endswith(":"))
            continue
        if line.startswith(("#", "import ", "from ")) or _PUNCTUATION.fullmatch(line):
            continue
        if line.startswith(("def ", "async def ")) and line.endswith("("):
            in_signature = True
        lines.append((number, line))
    return lines


def shared_runs(first: str, second: str, length: int = RUN) -> list[tuple[int, int]]:
    """Where ``length`` consecutive counted lines of ``first`` stand again in ``second``: pairs of starting
    line numbers."""
    ours, theirs = code_lines(first), code_lines(second)
    starts: dict[tuple[str, ...], int] = {}
    for i in range(len(theirs) - length + 1):
        starts.setdefault(tuple(line for _, line in theirs[i : i + length]), theirs[i][0])
    runs = []
    for i in range(len(ours) - length + 1):
        window = tuple(line for _, line in ours[i : i + length])
        if window in starts:
            runs.append((ours[i][0], starts[window]))
    return runs


def _dispatch_pairs() -> list[tuple[Path, Path]]:
    files = [API / "hotpath.py", *sorted((API / "middleware").glob("*.py"))]
    return list(itertools.combinations(files, 2))


def _store_pairs() -> list[tuple[Path, Path]]:
    return [
        (ours, theirs)
        for ours in sorted((KEYSTORE / "sqlite").glob("*.py"))
        for theirs in sorted((KEYSTORE / "postgres").glob("*.py"))
    ]


def _label(pair: tuple[Path, Path]) -> str:
    return " ~ ".join(str(path.relative_to(ROOT / "app")) for path in pair)


@pytest.mark.parametrize("pair", _dispatch_pairs() + _store_pairs(), ids=_label)
def test_no_run_is_written_twice(pair: tuple[Path, Path]) -> None:
    ours, theirs = pair
    runs = shared_runs(ours.read_text(), theirs.read_text())
    assert not runs, f"{_label(pair)} share {RUN}-line runs starting at lines {runs[:3]}: write them once"


def test_the_check_sees_a_copied_run() -> None:
    """A run copied with other indentation, comments and blank lines in between is found; five lines are not
    a run, and imports and punctuation do not make one."""
    body = "\n".join(f"value_{i} = compute({i})" for i in range(6))
    copied = "import os\n\nclass Copy:\n    def f(self):\n" + "\n".join(
        f"        {line}\n        # note\n" for line in body.splitlines()
    )
    assert shared_runs(body, copied) == [(1, 5)]
    assert shared_runs("\n".join(body.splitlines()[:5]), copied) == []
    boilerplate = "from a import (\n    b,\n    c,\n)\n" + ")\n],\n*,\n" * 3
    assert shared_runs(boilerplate, boilerplate) == []


def test_a_shared_signature_is_not_a_run_but_a_shared_body_is() -> None:
    """Two stores implementing one storage method of the template write the same multi-line signature; that
    alone is not a copy, the same body after it is."""
    signature = "def _insert(\n    self,\n    first: int,\n    second: str,\n    third: bytes,\n) -> None:\n"
    assert shared_runs(signature + "    pass\n", signature + "    return None\n") == []
    body = "".join(f"    step_{i}(first)\n" for i in range(6))
    assert (7, 7) in shared_runs(signature + body, signature + body)

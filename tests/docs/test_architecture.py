"""docs/architecture.md's import table is the code's: every edge it lists exists, and no other does."""

from __future__ import annotations

import re
from pathlib import Path

from tests.app.test_layers import app_modules, imports_of, internal_imports

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
OUTSIDE_APP = ("aescore", "hwsim")


def documented_edges() -> dict[str, set[str]]:
    text = PAGE.read_text(encoding="utf-8")
    block = re.search(r"<!-- imports: begin -->\n```\n(.*?)```\n<!-- imports: end -->", text, re.S)
    assert block is not None, "the import table's markers are missing from docs/architecture.md"
    edges: dict[str, set[str]] = {}
    for line in block.group(1).splitlines():
        source, _, targets = line.partition("->")
        edges[source.strip()] = {target.strip() for target in targets.split(",") if target.strip()}
    return edges


def package_of(module: str) -> str:
    """``app.api.routes.crypto`` -> ``api``; ``app.main`` -> ``main``."""
    return module.split(".")[1]


def actual_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module in app_modules():
        if module == "app":
            continue
        source = package_of(module)
        targets = edges.setdefault(source, set())
        targets.update(package_of(imported) for imported in internal_imports(module) if imported != "app")
        targets.update(
            imported.split(".")[0] for imported in imports_of(module) if imported.split(".")[0] in OUTSIDE_APP
        )
        targets.discard(source)
    return edges


def test_the_import_table_matches_the_code() -> None:
    assert documented_edges() == actual_edges()


def test_every_documented_path_exists() -> None:
    text = PAGE.read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:app|aescore|hwsim|clients|tests)/[\w/.]*)`", text))
    assert paths, "no paths found: the pattern no longer matches the page"
    missing = sorted(path for path in paths if not (ROOT / path).exists())
    assert missing == []

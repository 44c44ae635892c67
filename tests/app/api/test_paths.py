"""Route paths are written once, in :mod:`app.api.paths`: no other module under ``app/api`` spells one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from app.api import paths
from app.main import create_app

CONVERTOR = re.compile(r":[^}]+}")
API = Path(__file__).resolve().parents[3] / "app" / "api"


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring nodes in ``tree`` (prose may name a path; code may not)."""
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def v1_literals(source: str) -> list[tuple[int, str]]:
    """``(line, text)`` of every string literal in ``source``, docstrings aside, that holds ``/v1/``."""
    tree = ast.parse(source)
    docstrings = _docstrings(tree)
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and paths.V1 in node.value
        and id(node) not in docstrings
    ]


@pytest.mark.parametrize(
    "path", sorted(p for p in API.rglob("*.py") if p.name != "paths.py"), ids=lambda p: p.name
)
def test_no_module_but_paths_spells_a_v1_path(path: Path) -> None:
    assert v1_literals(path.read_text()) == []


def test_the_checker_sees_literals_in_code_and_f_strings_but_not_in_docstrings() -> None:
    source = '"""See /v1/keys."""\nA = "/v1/keys"\nB = f"/v1/keys/{name}/encrypt"\n'
    assert [line for line, _ in v1_literals(source)] == [2, 3]


def test_every_route_of_the_app_is_a_path_of_the_module() -> None:
    """Every documented path of the app is one the module names (none declared under another spelling)."""
    declared = {
        value
        for name, value in vars(paths).items()
        if name.isupper() and isinstance(value, str) and value.startswith("/")
    }
    declared |= set(paths.BATCH_PATHS.values())
    declared = {CONVERTOR.sub("}", path) for path in declared}  # OpenAPI leaves out {token_id:token_id}'s
    served = set(create_app().openapi()["paths"])
    assert paths.ENCRYPT in served and paths.UNSEAL in served
    assert served <= declared, sorted(served - declared)

"""aescore's modules import one another without a cycle, the Cython modules included.

Imports are read from the source (``ast`` for ``.py``, the ``import``/``cimport`` lines of ``.pyx``/``.pxi``),
including imports inside functions: a lazy import that closes a circle is still a circle, it only moves the
failure from import time to the first call.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "aescore"
_CYTHON_IMPORT = re.compile(r"^\s*from\s+(\.+[\w.]*)\s+c?import\s+([\w, ()]+)", re.MULTILINE)
_CYTHON_INCLUDE = re.compile(r'^\s*include\s+"([\w./]+)"', re.MULTILINE)


def module_of(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {module_of(path): path for path in PACKAGE.rglob("*.py")}
    found.update({module_of(path): path for path in PACKAGE.rglob("*.pyx")})
    return found


def resolve(package: str, dots: int, base: str) -> str:
    anchor = package.split(".")[: len(package.split(".")) - dots + 1]
    return ".".join([*anchor, base] if base else anchor)


def imports_of(name: str, path: Path) -> set[str]:
    """Absolute names of the aescore modules ``name`` imports (``from . import x`` gives ``pkg.x``)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    known = modules()
    found: set[str] = set()

    def add(base: str, names: list[str]) -> None:
        for alias in names:
            candidate = f"{base}.{alias}" if base else alias
            found.add(candidate if candidate in known else base)

    if path.suffix == ".py":
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                base = resolve(package, node.level, node.module or "") if node.level else node.module or ""
                add(base, [alias.name for alias in node.names])
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
    else:
        texts = [path.read_text()]
        texts += [(path.parent / include).read_text() for include in _CYTHON_INCLUDE.findall(texts[0])]
        for text in texts:
            for dots, names in _CYTHON_IMPORT.findall(text):
                base = resolve(package, len(dots) - len(dots.lstrip(".")), dots.lstrip("."))
                listed = names.replace("(", "").replace(")", "").split(",")
                add(base, [alias.split()[0] for alias in listed if alias.strip()])
    return {imported for imported in found if imported in known and imported != name}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path that ends where it starts, or ``None``."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_aescore_has_no_import_cycle() -> None:
    graph = {name: imports_of(name, path) for name, path in modules().items()}
    cycle = find_cycle(graph)
    assert cycle is None, " -> ".join(cycle or [])


def test_the_cycle_finder_sees_a_circle() -> None:
    """The check above finds the circle it forbids, lazy or not (so its passing means something)."""
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_reader_sees_lazy_and_cython_imports() -> None:
    """Function-level imports and the ``.pyx``/``.pxi`` imports count (where a circle would hide)."""
    known = modules()
    assert "aescore.sealing._native" in imports_of("aescore.ctr._aesni", known["aescore.ctr._aesni"])
    assert "aescore._validate" in imports_of("aescore.ctr._aesni", known["aescore.ctr._aesni"])
    assert "aescore.ctr._aesni" in imports_of("aescore._registry", known["aescore._registry"])


def test_every_aescore_folder_is_a_regular_package() -> None:
    """A folder without ``__init__.py`` still imports (as a namespace package) from a checkout, but
    ``packages.find`` leaves it out of the wheel and the image: every folder holding Python or Cython code
    needs one."""
    folders = {path.parent for pattern in ("*.py", "*.pyx") for path in PACKAGE.rglob(pattern)}
    missing = sorted(
        str(folder.relative_to(ROOT)) for folder in folders if not (folder / "__init__.py").exists()
    )
    assert not missing, f"no __init__.py in {missing}"

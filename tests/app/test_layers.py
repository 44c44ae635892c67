"""The service's layers point one way, and nothing below ``app/api`` imports the web framework.

Imports are read from the source with :mod:`ast` (every ``import``, including ones inside functions and
under ``TYPE_CHECKING``), so a module that is never imported by the tests is checked too.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "app"
WEB = ("fastapi", "starlette")

#: Which of app's layered packages each may import (besides itself). Arrows point down only:
#: api -> state (the composition root) -> services -> keycache -> formats / keystore -> seal -> core; errors
#: and core are the bottom. The API reaches formats, the key cache and aescore through services only.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "core": set(),
    "seal": {"errors", "core"},
    "keystore": {"errors", "core", "seal"},
    "formats": {"errors", "core"},
    "audit": {"errors", "core", "formats", "seal"},
    "keycache": {"errors", "core", "keystore", "formats"},
    "services": {"errors", "core", "keystore", "keycache", "formats"},
    "state": {"errors", "core", "keystore", "keycache", "services", "audit", "seal"},
    "api": {"errors", "core", "keystore", "services", "audit", "seal", "state", "ui"},
    "ui": set(),
}
#: Layers that must not reach fastapi/starlette, even through another app module.
NO_WEB = ("errors", "core", "seal", "keystore", "formats", "keycache", "services", "audit", "state", "ui")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def app_modules() -> dict[str, Path]:
    """Every module of ``app`` by name, listed once per run: the checks below ask for it at every step of
    their walks, and walking the tree each time was most of this file's time. Read it, never change it."""
    return {module_name(path): path for path in sorted(APP.rglob("*.py"))}


@cache
def imports_of(name: str) -> frozenset[str]:
    """Absolute names of every module ``name`` imports (relative imports resolved)."""
    path = app_modules()[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)  # `from app.x import module`
    return frozenset(found)


def layer_of(name: str) -> str | None:
    """The layered package of an ``app`` module (``None`` for entry points such as ``app.main``)."""
    parts = name.split(".")
    if parts[0] != "app" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in ALLOWED else None


def internal_imports(name: str) -> set[str]:
    modules = app_modules()
    return {imported for imported in imports_of(name) if imported in modules}


def reaches_web(name: str) -> list[str] | None:
    """An import chain from ``name`` to fastapi/starlette through app's modules, or ``None``."""
    seen: set[str] = set()
    stack: list[list[str]] = [[name]]
    while stack:
        chain = stack.pop()
        current = chain[-1]
        if current in seen:
            continue
        seen.add(current)
        web = [imported for imported in imports_of(current) if imported.split(".")[0] in WEB]
        if web:
            return [*chain, web[0]]
        stack.extend([*chain, imported] for imported in sorted(internal_imports(current)))
    return None


@pytest.mark.parametrize("name", [name for name in app_modules() if layer_of(name) in NO_WEB])
def test_nothing_below_the_api_imports_the_web_framework(name: str) -> None:
    chain = reaches_web(name)
    assert chain is None, " -> ".join(chain or [])


@pytest.mark.parametrize("name", [name for name in app_modules() if layer_of(name) is not None])
def test_layers_import_only_the_layers_below(name: str) -> None:
    layer = layer_of(name)
    assert layer is not None
    wrong = sorted(
        imported
        for imported in internal_imports(name)
        if layer_of(imported) != layer and layer_of(imported) not in ALLOWED[layer]
    )
    assert not wrong, f"{name} ({layer}) imports {wrong}; {layer} may import {sorted(ALLOWED[layer])}"


@pytest.mark.parametrize("package", ["aescore", "hwsim"])
def test_the_crypto_packages_never_import_the_service(package: str) -> None:
    for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            assert not [n for n in names if n.split(".")[0] == "app"], f"{path} imports app"


ROUTES = "app.api.routes"


@pytest.mark.parametrize("name", [name for name in app_modules() if layer_of(name) == "api"])
def test_the_api_reaches_aescore_through_services_only(name: str) -> None:
    wrong = sorted(imported for imported in imports_of(name) if imported.split(".")[0] == "aescore")
    assert not wrong, f"{name} imports {wrong}"


@pytest.mark.parametrize("name", [name for name in app_modules() if name.startswith(ROUTES + ".")])
def test_route_modules_do_not_import_each_other(name: str) -> None:
    """What two routes share lives below them (a service, params, deps), never in one of the routes."""
    others = sorted(imported for imported in internal_imports(name) if imported.startswith(ROUTES + "."))
    assert not others, f"{name} imports the route modules {others}"


#: What a process pool is made of: only :mod:`app.services.offload` (and its worker module) may import it.
POOL = ("multiprocessing", "concurrent", "app.services._offload_worker")
POOL_HOME = ("app.services.offload", "app.services._offload_worker")


@pytest.mark.parametrize("name", [name for name in app_modules() if layer_of(name) == "services"])
def test_the_python_backends_process_pool_lives_in_offload_only(name: str) -> None:
    """The crypto step, whole-message sealing and the rest of the services reach the pool through
    ``offload.run_crypto`` alone, so the step keeps one job."""
    if name in POOL_HOME:
        return
    wrong = sorted(
        imported
        for imported in imports_of(name)
        if imported.split(".")[0] in POOL[:2] or imported.startswith(POOL[2])
    )
    assert not wrong, f"{name} imports pool code {wrong}"


@pytest.mark.parametrize("name", list(app_modules()))
def test_the_crypto_metrics_are_labelled_in_crypto_work_only(name: str) -> None:
    """``keystream_crypto_seconds`` and ``_bytes_total`` get their labels in one place
    (``services/crypto_work.py``), for the streaming step and whole messages alike."""
    if name == "app.services.crypto_work":
        return
    metrics = {"app.core.metrics.CRYPTO_SECONDS", "app.core.metrics.CRYPTO_BYTES"}
    assert not imports_of(name) & metrics, f"{name} imports {sorted(imports_of(name) & metrics)}"


def test_the_checker_sees_a_web_import_through_another_module() -> None:
    """The transitive check follows app's own imports: the API layer reaches starlette through a route."""
    chain = reaches_web("app.main")
    assert chain is not None and chain[-1].split(".")[0] in WEB and len(chain) >= 2
    assert "app.api.errors" in internal_imports("app.main")


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles of ``graph`` (module -> modules it imports): each strongly connected group of two or
    more modules, sorted."""
    order: dict[str, int] = {}
    lowest: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = lowest[module] = len(order)
        stack.append(module)
        for imported in sorted(graph.get(module, set())):
            if imported not in order:
                visit(imported)
                lowest[module] = min(lowest[module], lowest[imported])
            elif imported in stack:
                lowest[module] = min(lowest[module], order[imported])
        if lowest[module] == order[module]:
            group = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return cycles


def test_the_keystores_modules_import_one_another_without_cycles() -> None:
    """No module of ``app/keystore`` imports, even under ``TYPE_CHECKING``, one that imports it back: the
    records every layer of the keystore shares (``records.py``) sit below the interface (``base.py``), the
    rules (``checks.py``) and the stores, so the template imports the rules and never the other way round.
    Packages' ``__init__`` modules only gather names and are left out."""
    modules = app_modules()
    leaves = {
        name
        for name, path in modules.items()
        if name.startswith("app.keystore.") and path.name != "__init__.py"
    }
    graph = {name: internal_imports(name) & leaves for name in leaves}
    assert import_cycles(graph) == []


def test_the_cycle_check_sees_a_cycle() -> None:
    """The check above finds the circle it forbids (so its passing means something)."""
    graph = {"base": {"checks", "records"}, "checks": {"base"}, "records": set(), "store": {"base"}}
    assert import_cycles(graph) == [["base", "checks"]]
    assert import_cycles({**graph, "checks": {"records"}}) == []


def aescore_imports(name: str) -> list[str]:
    """The ``aescore`` modules an app module imports, however spelled (``from aescore import _x`` too)."""
    return sorted(imported for imported in imports_of(name) if imported.split(".")[0] == "aescore")


@pytest.mark.parametrize("name", list(app_modules()))
def test_app_uses_only_aescores_public_names(name: str) -> None:
    """aescore's private modules (``aescore.sealing._sealed``, ``aescore.ctr._aesni``...) are its own
    business: the service asks a backend through its declared capabilities (``sealed_batch()``,
    ``supports_async``)."""
    private = [
        imported
        for imported in aescore_imports(name)
        if any(part.startswith("_") for part in imported.split(".")[1:])
    ]
    assert not private, f"{name} imports aescore's private {private}"


def backend_name_checks(path: Path) -> list[int]:
    """Lines of ``path`` comparing something's ``backend.name`` (or a backend's ``name``) with a string."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Compare):
            continue
        sides = [node.left, *node.comparators]
        named = any(
            isinstance(side, ast.Attribute)
            and side.attr == "name"
            and "backend" in ast.unparse(side.value).lower()
            for side in sides
        )
        literal = any(isinstance(side, ast.Constant) and isinstance(side.value, str) for side in sides)
        if named and literal:
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("name", list(app_modules()))
def test_app_never_picks_a_code_path_by_backend_name(name: str) -> None:
    path = app_modules()[name]
    assert not backend_name_checks(path), f"{path}:{backend_name_checks(path)} compares a backend's name"


def test_the_backend_name_check_sees_the_pattern(tmp_path: Path) -> None:
    """The check above finds the comparison it forbids (so its passing means something)."""
    sample = tmp_path / "sample.py"
    sample.write_text('if backend.name != "aesni":\n    pass\nif self._backend.name == "hwsim":\n    pass\n')
    assert backend_name_checks(sample) == [1, 3]

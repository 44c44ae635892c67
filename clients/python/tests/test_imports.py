"""The client distribution never imports the server: no module under clients/python imports ``app``,
``aescore`` or ``hwsim`` (the package, its CLI and these tests; a server runs only as a subprocess)."""

from __future__ import annotations

import ast
from pathlib import Path

CLIENT = Path(__file__).resolve().parents[1]
SERVER_PACKAGES = {"app", "aescore", "hwsim"}


def imported_packages(source: str) -> set[str]:
    """Top-level package names that ``source`` imports (absolute imports only; relative ones stay inside)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name.partition(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.partition(".")[0])
    return names


def test_the_check_sees_every_import_form() -> None:
    source = "import app.main\nfrom aescore import x\ndef f():\n    import hwsim as h\nfrom . import y\n"
    assert imported_packages(source) == {"app", "aescore", "hwsim"}


def test_no_client_module_imports_the_server() -> None:
    modules = sorted(CLIENT.rglob("*.py"))
    assert len(modules) > 30 and CLIENT / "keystream_client" / "__init__.py" in modules
    offenders = {
        str(path.relative_to(CLIENT)): sorted(imported_packages(path.read_text()) & SERVER_PACKAGES)
        for path in modules
    }
    assert {path: names for path, names in offenders.items() if names} == {}

"""Wheels of installed pure-Python distributions, so a test can fill a fresh venv without an index.

``pip install --no-index --find-links DIR`` then resolves from what this environment already runs. Each
wheel holds the distribution's installed files (no ``__pycache__``, no console scripts: pip regenerates
those from ``entry_points.txt``) and a RECORD with fresh hashes.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import re
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

#: dist-info files that describe an installation, not the distribution.
_INSTALL_ONLY = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}


class WheelhouseError(Exception):
    """A requirement is not installed here, or its installed files cannot become a pure-Python wheel."""


def closure(requirements: Iterable[str]) -> list[importlib.metadata.Distribution]:
    """The installed distributions that ``requirements`` need, transitively (markers for this Python).

    Raises:
        WheelhouseError: a needed distribution is not installed in this environment.
    """
    found: dict[str, importlib.metadata.Distribution] = {}
    pending = list(requirements)
    while pending:
        requirement = Requirement(pending.pop())
        if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(requirement.name)
        if name in found:
            continue
        try:
            distribution = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError as exc:
            raise WheelhouseError(f"{requirement.name} is needed but not installed here") from exc
        found[name] = distribution
        pending.extend(distribution.requires or [])
    return list(found.values())


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def build_wheel(distribution: importlib.metadata.Distribution, directory: Path) -> Path:
    """Write ``distribution``'s installed files as a ``py3-none-any`` wheel into ``directory``.

    Raises:
        WheelhouseError: the distribution has no file list or is not pure Python.
    """
    name = distribution.metadata["Name"]
    files = distribution.files
    wheel_info = distribution.read_text("WHEEL") or ""
    if files is None or "Root-Is-Purelib: true" not in wheel_info:
        raise WheelhouseError(f"{name} has no RECORD or is not a pure-Python distribution")
    dist_info = next(f.parts[0] for f in files if f.parts[0].endswith(".dist-info"))
    stem = f"{re.sub(r'[-_.]+', '_', name)}-{distribution.version}"
    path = directory / f"{stem}-py3-none-any.whl"
    records: list[str] = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for file in files:
            if file.parts[0] == ".." or "__pycache__" in file.parts or file.suffix == ".pyc":
                continue
            if file.parts[0] == dist_info and file.name in _INSTALL_ONLY:
                continue
            data = Path(str(distribution.locate_file(file))).read_bytes()
            wheel.writestr(file.as_posix(), data)
            records.append(f"{file.as_posix()},sha256={_digest(data)},{len(data)}")
        records.append(f"{dist_info}/RECORD,,")
        wheel.writestr(f"{dist_info}/RECORD", "\n".join(records) + "\n")
    return path


def fill(requirements: Iterable[str], directory: Path) -> list[Path]:
    """Wheels for ``requirements`` and everything they need, built from this environment.

    Raises:
        WheelhouseError: as :func:`closure` and :func:`build_wheel`.
    """
    directory.mkdir(parents=True, exist_ok=True)
    return [build_wheel(distribution, directory) for distribution in closure(requirements)]

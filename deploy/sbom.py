"""Write a CycloneDX 1.6 SBOM (JSON) of the Python environment this interpreter runs and of the Debian
packages installed next to it (dpkg's status file).

``make docker-test`` runs it INSIDE the image (``docker run -i --entrypoint python IMAGE -
< deploy/sbom.py``), so the SBOM lists exactly what the image holds: every distribution in
/opt/keystream/venv (name, version, licence, its package URL ``pkg:pypi/...``) and every Debian package of
the base (``pkg:deb/debian/...``).
Standard library only: the image has nothing else to run it with.

    python deploy/sbom.py [--name NAME] [--version VERSION] [--dpkg-status PATH] > sbom.cdx.json
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import platform
import re
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

SPEC_VERSION = "1.6"
DPKG_STATUS = Path("/var/lib/dpkg/status")


def _normalized(name: str) -> str:
    """The PEP 503 name, as purls of type pypi spell it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def python_components() -> list[dict[str, Any]]:
    """One component per distribution on this interpreter's path (the first one found for each name)."""
    components: dict[str, dict[str, Any]] = {}
    for distribution in importlib.metadata.distributions():
        name = distribution.metadata["Name"]
        if not name:
            continue
        key = _normalized(name)
        if key in components:
            continue
        version = distribution.version
        component: dict[str, Any] = {
            "type": "library",
            "bom-ref": f"pkg:pypi/{key}@{version}",
            "name": name,
            "version": version,
            "purl": f"pkg:pypi/{key}@{quote(version)}",
        }
        licence = distribution.metadata.get("License-Expression") or ""
        if licence:
            component["licenses"] = [{"expression": licence}]
        elif (text := (distribution.metadata.get("License") or "").strip()) and len(text) < 100:
            component["licenses"] = [{"license": {"name": text}}]
        components[key] = component
    return sorted(components.values(), key=lambda item: item["name"].lower())


def debian_components(status: Path) -> list[dict[str, Any]]:
    """One component per package dpkg lists as installed in STATUS (none when the file is missing)."""
    if not status.exists():
        return []
    components: list[dict[str, Any]] = []
    for paragraph in status.read_text(errors="replace").split("\n\n"):
        fields: dict[str, str] = {}
        for line in paragraph.splitlines():
            if line and not line[0].isspace() and ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if not fields.get("Package") or "installed" not in fields.get("Status", "").split():
            continue
        name, version, arch = fields["Package"], fields.get("Version", ""), fields.get("Architecture", "")
        purl = f"pkg:deb/debian/{name}@{quote(version)}?arch={arch}"
        components.append(
            {"type": "library", "bom-ref": purl, "name": name, "version": version, "purl": purl}
        )
    return sorted(components, key=lambda item: item["name"])


def sbom(name: str, version: str, status: Path) -> dict[str, Any]:
    """The whole document: metadata (the image as the subject) and the components."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
    return {
        "bomFormat": "CycloneDX",
        "specVersion": SPEC_VERSION,
        "serialNumber": f"urn:uuid:{uuid.uuid4()}",
        "version": 1,
        "metadata": {
            "timestamp": now,
            "tools": {"components": [{"type": "application", "name": "keystream deploy/sbom.py"}]},
            "component": {
                "type": "container",
                "bom-ref": f"{name}@{version}",
                "name": name,
                "version": version,
            },
            "properties": [
                {"name": "python:version", "value": platform.python_version()},
                {"name": "python:prefix", "value": sys.prefix},
            ],
        },
        "components": [*python_components(), *debian_components(status)],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="keystream", help="the subject's name (the image)")
    parser.add_argument("--version", default="unknown", help="the subject's version (the image id or tag)")
    parser.add_argument("--dpkg-status", type=Path, default=DPKG_STATUS, help="dpkg's status file")
    args = parser.parse_args(argv)
    json.dump(sbom(args.name, args.version, args.dpkg_status), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The supply chain: hash-pinned locks that match pyproject.toml and that every install uses, the
vulnerability check of the locked set against PyPI's advisory data (run for real, over the network), and the
image's CycloneDX SBOM (deploy/sbom.py, checked against the CycloneDX 1.6 schema)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator
from deploy_paths import REPO, make_plan
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REQUIREMENTS = REPO / "requirements"
CLIENT_LOCK = REPO / "clients" / "python" / "requirements.txt"
AUDIT = REPO / "scripts" / "audit_locks.py"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+) \\$")

SERVER = tomllib.loads((REPO / "pyproject.toml").read_text())
CLIENT = tomllib.loads((REPO / "clients" / "python" / "pyproject.toml").read_text())
RUNTIME = SERVER["project"]["dependencies"]
EXTRAS = SERVER["project"]["optional-dependencies"]
# Each lock and the declared requirements it must satisfy (scripts/lock.sh writes them from the same lists).
DECLARED: dict[Path, list[str]] = {
    REQUIREMENTS / "build.txt": [*SERVER["build-system"]["requires"], *CLIENT["build-system"]["requires"]],
    REQUIREMENTS / "server.txt": RUNTIME,
    REQUIREMENTS / "image.txt": [*RUNTIME, *EXTRAS["postgres"], *EXTRAS["pkcs11"]],
    REQUIREMENTS / "image-load.txt": [*RUNTIME, *EXTRAS["postgres"], *EXTRAS["pkcs11"], *EXTRAS["load"]],
    REQUIREMENTS / "test.txt": [
        *RUNTIME,
        *EXTRAS["postgres"],
        *EXTRAS["test"],
        *CLIENT["project"]["dependencies"],
    ],
    CLIENT_LOCK: CLIENT["project"]["dependencies"],
    REQUIREMENTS / "lock-tools.txt": ["uv"],
}


def pins(path: Path) -> dict[str, tuple[str, list[str]]]:
    """``{canonical name: (version, [sha256 hashes])}`` of a pip-compile --generate-hashes file."""
    result: dict[str, tuple[str, list[str]]] = {}
    current: list[str] | None = None
    for line in path.read_text().splitlines():
        match = PIN.match(line)
        if match:
            current = []
            result[canonicalize_name(match.group(1))] = (match.group(2), current)
        elif line.strip().startswith("--hash=sha256:") and current is not None:
            current.append(line.strip().removeprefix("--hash=sha256:").rstrip(" \\"))
        elif line and not line.startswith((" ", "#")):
            pytest.fail(f"{path.name}: a requirement without hashes or not pinned with ==: {line!r}")
    return result


@pytest.mark.parametrize("lock", list(DECLARED), ids=lambda p: str(p.relative_to(REPO)))
def test_lock_pins_every_declared_dependency_with_hashes(lock: Path) -> None:
    locked = pins(lock)
    assert locked, f"{lock} pins nothing"
    for text in DECLARED[lock]:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{lock.name} lacks {text}: run make lock"
        version, _ = locked[name]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"{lock.name} pins {name}=={version}, outside {text}: run make lock"
        )
    for name, (version, hashes) in locked.items():
        assert hashes and all(re.fullmatch(r"[0-9a-f]{64}", item) for item in hashes), (name, version)
    assert "make lock" in lock.read_text(), "the header names the command that refreshes it"


def test_locks_agree_on_every_shared_package() -> None:
    """One resolution: a package in two locks has the same version and the same hashes in both."""
    seen: dict[str, tuple[str, tuple[str, ...], str]] = {}
    for lock in DECLARED:
        for name, (version, hashes) in pins(lock).items():
            entry = (version, tuple(sorted(hashes)), lock.name)
            first = seen.setdefault(name, entry)
            assert first[:2] == entry[:2], f"{name}: {first[2]} and {lock.name} differ"


def test_run_is_lean_and_test_is_a_superset() -> None:
    server, test = pins(REQUIREMENTS / "server.txt"), pins(REQUIREMENTS / "test.txt")
    assert set(server) <= set(test)
    assert set(pins(CLIENT_LOCK)) <= set(test)
    for tool in ("pytest", "mypy", "ruff", "locust", "pip-audit", "psycopg"):
        assert tool in test and tool not in server, tool


@pytest.mark.parametrize(
    ("target", "locks"),
    [
        ("run", ["requirements/server.txt", "clients/python/requirements.txt"]),
        ("build", ["requirements/test.txt"]),
    ],
)
def test_make_installs_only_from_the_locks(tmp_path: Path, target: str, locks: list[str]) -> None:
    """Every pip install that `make run` / `make test` plans is hash-checked, or installs the two local
    distributions without their dependencies; local wheels (PIP_FIND_LINKS) are switched off for both."""
    plan = make_plan(tmp_path / "venv", target)
    installs = [line for line in plan.splitlines() if "pip install" in line]
    assert installs
    for line in installs:
        assert line.startswith("PIP_FIND_LINKS= "), line
        assert "--require-hashes" in line or ("--no-deps" in line and "-e ." in line), line
    for lock in locks:
        assert f"-r {lock}" in plan
    assert "scripts/bootstrap-venv.sh" in plan and "requirements/build.txt" in plan
    assert "pip check" in plan


def test_make_test_runs_the_audit_and_make_lock_refreshes(tmp_path: Path) -> None:
    makefile = (REPO / "Makefile").read_text()
    assert re.search(r"^test: .*\baudit\b", makefile, re.MULTILINE)
    assert "scripts/audit_locks.py" in make_plan(tmp_path / "venv", "audit")
    assert "scripts/lock.sh" in make_plan(tmp_path / "venv", "lock")


def test_image_installs_from_the_locks() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert "--require-hashes -r requirements/build.txt" in dockerfile
    assert '--require-hashes -r "requirements/image${EXTRAS:+-$EXTRAS}.txt"' in dockerfile
    assert 'pip install --no-deps "$wheel"' in dockerfile
    assert "!requirements/" in (REPO / ".dockerignore").read_text()
    library = (REPO / "deploy" / "docker-lib.sh").read_text()
    assert "pip download -q --require-hashes" in library


def _fake_wheel(directory: Path, name: str, version: str) -> Path:
    """A wheel of NAME==VERSION whose hash PyPI does not know (as a local wheelhouse may hold)."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            f"{name}-{version}.dist-info/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        )
        archive.writestr(
            f"{name}-{version}.dist-info/WHEEL",
            "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        archive.writestr(f"{name}-{version}.dist-info/RECORD", "")
    return path


@pytest.mark.slow
def test_bootstrap_installs_the_build_lock_from_pypi_despite_local_wheels(tmp_path: Path) -> None:
    """A fresh venv gets pip, setuptools, wheel and Cython hash-checked from PyPI even when PIP_FIND_LINKS
    holds a wheel of the pinned version with another hash (as /opt/wheels may here)."""
    version, _ = pins(REQUIREMENTS / "build.txt")["wheel"]
    local = tmp_path / "wheels"
    _fake_wheel(local, "wheel", version)
    env = {**os.environ, "PIP_FIND_LINKS": str(local), "PYTHON": sys.executable}
    result = subprocess.run(
        [
            str(REPO / "scripts" / "bootstrap-venv.sh"),
            str(tmp_path / "venv"),
            str(REQUIREMENTS / "build.txt"),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    listed = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    installed = {canonicalize_name(item["name"]): item["version"] for item in json.loads(listed.stdout)}
    for name, (pinned, _) in pins(REQUIREMENTS / "build.txt").items():
        assert installed.get(name) == pinned, (name, installed.get(name), pinned)


# --- the vulnerability check, for real against PyPI ------------------------------------------------------


def _audit(tmp_path: Path, lines: list[str], *args: str, allow: str = "") -> subprocess.CompletedProcess[str]:
    lock = tmp_path / "lock.txt"
    lock.write_text("".join(f"{line}\n" for line in lines))
    allow_file = tmp_path / "allow.toml"
    allow_file.write_text(allow)
    return subprocess.run(
        [sys.executable, str(AUDIT), "--allow", str(allow_file), *args, str(lock)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


# ecdsa's latest release is affected by CVE-2024-23342 (Minerva timing attack; the project will not fix it),
# so PyPI's advisory data reports it for the pinned version whatever the network lets pip-audit see.
VULNERABLE = "ecdsa==0.19.2"
ADVISORY = "GHSA-wj6h-64fc-37mp"


@pytest.mark.slow
def test_audit_fails_on_a_known_vulnerability(tmp_path: Path) -> None:
    result = _audit(tmp_path, [VULNERABLE])
    assert result.returncode == 1, result.stdout + result.stderr
    assert "VULNERABLE ecdsa==0.19.2" in result.stdout and "CVE-2024-23342" in result.stdout
    assert "FAIL" in result.stderr


@pytest.mark.slow
def test_audit_passes_an_advisory_listed_with_its_reason(tmp_path: Path) -> None:
    allow = f'[[allow]]\nid = "{ADVISORY}"\nreason = "side channel needs local timing; test pin only"\n'
    result = _audit(tmp_path, [VULNERABLE], allow=allow)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "allowed" in result.stdout and "side channel needs local timing" in result.stdout


def test_audit_refuses_an_allow_entry_without_a_reason(tmp_path: Path) -> None:
    result = _audit(tmp_path, [VULNERABLE], allow=f'[[allow]]\nid = "{ADVISORY}"\nreason = ""\n')
    assert result.returncode == 2
    assert "needs both an id and a reason" in result.stderr


@pytest.mark.slow
def test_audit_names_what_it_could_not_fully_check(tmp_path: Path) -> None:
    """requests 2.25.0 has known advisories (fixed in 2.31.0 and later). Where PyPI's per-version data is out
    of reach, the check must not call it clean: it lists the pin as unverified, and --strict fails on it."""
    result = _audit(tmp_path, ["requests==2.25.0"])
    assert "requests==2.25.0" in result.stdout, result.stdout + result.stderr
    if "unverified" in result.stdout:
        strict = _audit(tmp_path, ["requests==2.25.0"], "--strict")
        assert strict.returncode == 1, strict.stdout + strict.stderr
    else:  # pip-audit reached the per-version data: the advisories themselves fail the run
        assert result.returncode == 1 and "VULNERABLE requests==2.25.0" in result.stdout


def test_audit_fails_when_a_package_cannot_be_checked(tmp_path: Path) -> None:
    result = _audit(tmp_path, ["keystream-no-such-package-4f1c2a==1.0"])
    assert result.returncode == 2, result.stdout + result.stderr
    assert "cannot check" in result.stderr


# --- the SBOM -------------------------------------------------------------------------------------------


def test_sbom_lists_the_environment_and_the_debian_packages(tmp_path: Path) -> None:
    status = tmp_path / "status"
    status.write_text(
        "Package: libgomp1\nStatus: install ok installed\nArchitecture: amd64\nVersion: 12.2.0-14\n\n"
        "Package: removed\nStatus: deinstall ok config-files\nArchitecture: amd64\nVersion: 1\n"
    )
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "deploy" / "sbom.py"),
            "--version",
            "sha256:abc",
            "--dpkg-status",
            str(status),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    errors = JsonStrictValidator(SchemaVersion.V1_6).validate_str(result.stdout)
    assert errors is None, errors
    document = json.loads(result.stdout)
    purls = {component["purl"] for component in document["components"]}
    fastapi = pins(REQUIREMENTS / "test.txt")["fastapi"][0]
    assert f"pkg:pypi/fastapi@{fastapi}" in purls
    assert "pkg:deb/debian/libgomp1@12.2.0-14?arch=amd64" in purls
    assert not any("removed" in purl for purl in purls)
    assert document["metadata"]["component"] == {
        "type": "container",
        "bom-ref": "keystream@sha256:abc",
        "name": "keystream",
        "version": "sha256:abc",
    }


def test_docker_test_writes_the_sbom_and_holds_the_image_to_the_lock() -> None:
    script = (REPO / "deploy" / "docker-test.sh").read_text()
    assert "deploy/sbom.py" in script and "build/sbom/" in script
    assert "differ from requirements/image.txt" in script
    # ensurepip's setuptools (Debian's 66.1.1, not in any lock) must not stay in the image.
    assert "pip uninstall -y setuptools pip" in (REPO / "Dockerfile").read_text()

"""make audit: check every locked dependency against PyPI's advisory data; fail on a known vulnerability
unless requirements/audit-allow.toml lists it with a reason.

Two sources, both PyPI's (which publishes the OSV advisories of the Python Packaging Advisory Database):

1. pip-audit's PyPI service, over every lock file as pinned (``--disable-pip``): it asks
   ``https://pypi.org/pypi/NAME/VERSION/json``, the advisories of exactly the pinned version.
2. For each package pip-audit could not audit (that per-version address answers 404 on some networks, where
   pip-audit then reports "No known vulnerabilities found" and exits 0), the project's own JSON,
   ``https://pypi.org/pypi/NAME/json``, whose ``vulnerabilities`` are those of the LATEST release:

   * pinned version == latest release: exactly the pinned version's advisories;
   * pinned version older: an advisory of the latest release counts against the pinned version too, unless
     it lists a fix at or below the pinned version in the same release series; an advisory already fixed
     between the pinned version and the latest cannot be seen from there. Those packages are reported as
     *unverified* by name; ``--strict`` fails on them (``make lock`` pins the latest releases, so a fresh
     lock is fully verified).

Anything that stops a package from being checked at all (PyPI unreachable, an unknown package) fails the
run: the check never passes because it saw nothing.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import tomllib
import urllib.error
import urllib.request
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

REPO = Path(__file__).resolve().parents[1]
LOCKS = (
    REPO / "requirements" / "build.txt",
    REPO / "requirements" / "server.txt",
    REPO / "requirements" / "image.txt",
    REPO / "requirements" / "image-load.txt",
    REPO / "requirements" / "test.txt",
    REPO / "clients" / "python" / "requirements.txt",
    REPO / "requirements" / "lock-tools.txt",
)
ALLOW_FILE = REPO / "requirements" / "audit-allow.toml"
PROJECT_URL = "https://pypi.org/pypi/{name}/json"
TIMEOUT_SECONDS = 30
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")


class AuditError(Exception):
    """The check could not be carried out (a bad allow-list, PyPI unreachable, pip-audit failing)."""


@dataclass(frozen=True)
class Advisory:
    """One advisory against one pinned package."""

    package: str
    version: str
    id: str
    aliases: tuple[str, ...]
    fixed_in: tuple[str, ...]
    source: str
    note: str = ""

    def names(self) -> set[str]:
        return {self.id, *self.aliases}


@dataclass
class Result:
    """What the audit found: advisories (allowed or not) and the packages it could only partly check."""

    packages: int = 0
    advisories: list[Advisory] = field(default_factory=list)
    unverified: list[tuple[str, str, str]] = field(default_factory=list)  # (package, pinned, latest)
    exact_by_pip_audit: int = 0
    exact_by_project_json: int = 0


def read_pins(paths: Iterable[Path]) -> dict[str, str]:
    """``{canonical name: version}`` of every ``name==version`` line; a name pinned twice must agree."""
    pins: dict[str, str] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            match = PIN.match(line.strip())
            if match is None:
                continue
            name, version = canonicalize_name(match.group(1)), match.group(2)
            if pins.setdefault(name, version) != version:
                raise AuditError(f"{name} is pinned to {pins[name]} and {version} in different lock files")
    return pins


def read_allow_list(path: Path) -> dict[str, str]:
    """``{advisory id or alias: reason}`` from the allow-list; every entry needs an id and a reason."""
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise AuditError(f"{path}: {exc}") from exc
    allowed: dict[str, str] = {}
    for number, entry in enumerate(data.get("allow", []), start=1):
        advisory = str(entry.get("id", "")).strip()
        reason = str(entry.get("reason", "")).strip()
        if not advisory or not reason:
            raise AuditError(f"{path}: entry {number} needs both an id and a reason (got {entry!r})")
        allowed[advisory] = reason
    return allowed


def run_pip_audit(pins: dict[str, str], work: Path) -> dict[str, object]:
    """pip-audit's JSON report over PINS (one line per package, as the lock files pin them)."""
    requirements = work / "pins.txt"
    requirements.write_text("".join(f"{name}=={version}\n" for name, version in sorted(pins.items())))
    command = [
        sys.executable, "-m", "pip_audit", "--disable-pip", "--no-deps", "--format", "json",
        "--progress-spinner", "off", "--vulnerability-service", "pypi", "--timeout", str(TIMEOUT_SECONDS),
        "--cache-dir", str(work / "cache"), "--requirement", str(requirements),
    ]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    # 0: nothing found, 1: vulnerabilities found; anything else is pip-audit failing.
    if result.returncode not in (0, 1) or not result.stdout.strip():
        raise AuditError(f"pip-audit failed (exit {result.returncode}): {result.stderr.strip()[-2000:]}")
    report: dict[str, object] = json.loads(result.stdout)
    return report


def project_json(name: str) -> dict[str, object]:
    """PyPI's JSON for project NAME (the latest release and its advisories)."""
    url = PROJECT_URL.format(name=name)
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310 (fixed https URL)
            data: dict[str, object] = json.load(response)
    except (urllib.error.URLError, TimeoutError, json.JSONDecodeError) as exc:
        raise AuditError(f"cannot read PyPI's advisories for {name} ({url}): {exc}") from exc
    return data


def _same_series_fix(pinned: Version, fixed_in: Sequence[str]) -> bool:
    """Whether a fix at or below PINNED exists in PINNED's release series (same major.minor)."""
    for text in fixed_in:
        try:
            fixed = Version(text)
        except InvalidVersion:
            continue
        if fixed <= pinned and fixed.release[:2] == pinned.release[:2]:
            return True
    return False


def check_with_project_json(name: str, pinned: str) -> Result:
    """Judge one package from its project JSON (see the module docstring for what this can see); the
    answer is a Result of its own, merged by the caller (this runs in a thread pool)."""
    result = Result(packages=1)
    data = project_json(name)
    info = data.get("info")
    latest = str(info.get("version", "")) if isinstance(info, dict) else ""
    vulnerabilities = data.get("vulnerabilities")
    if not latest or not isinstance(vulnerabilities, list):
        raise AuditError(f"PyPI's JSON for {name} has no latest version or no vulnerabilities field")
    try:
        exact = Version(latest) == Version(pinned)
    except InvalidVersion as exc:
        raise AuditError(f"{name}: cannot compare the versions {pinned!r} and {latest!r}: {exc}") from exc
    if exact:
        result.exact_by_project_json += 1
    else:
        result.unverified.append((name, pinned, latest))
    for entry in vulnerabilities:
        if not isinstance(entry, dict) or entry.get("withdrawn"):
            continue
        fixed_in = tuple(str(item) for item in entry.get("fixed_in") or ())
        if not exact and _same_series_fix(Version(pinned), fixed_in):
            continue
        result.advisories.append(
            Advisory(
                package=name,
                version=pinned,
                id=str(entry.get("id")),
                aliases=tuple(str(item) for item in entry.get("aliases") or ()),
                fixed_in=fixed_in,
                source="PyPI project JSON",
                note="" if exact else f"reported for the latest release {latest}",
            )
        )
    return result


def audit(locks: Sequence[Path]) -> Result:
    """Run both sources over LOCKS; every pinned package ends up exactly checked, or listed as unverified."""
    pins = read_pins(locks)
    result = Result(packages=len(pins))
    with tempfile.TemporaryDirectory(prefix="keystream-audit-") as work:
        report = run_pip_audit(pins, Path(work))
    skipped: list[str] = []
    dependencies = report.get("dependencies")
    if not isinstance(dependencies, list):
        raise AuditError("pip-audit's report has no dependencies list")
    for dependency in dependencies:
        name = canonicalize_name(str(dependency.get("name")))
        if dependency.get("skip_reason"):
            skipped.append(name)
            continue
        result.exact_by_pip_audit += 1
        for vuln in dependency.get("vulns", []):
            result.advisories.append(
                Advisory(
                    package=name,
                    version=str(dependency.get("version")),
                    id=str(vuln.get("id")),
                    aliases=tuple(vuln.get("aliases") or ()),
                    fixed_in=tuple(vuln.get("fix_versions") or ()),
                    source="pip-audit (PyPI, per version)",
                )
            )
    unknown = [name for name in skipped if name not in pins]
    if unknown:
        raise AuditError(f"pip-audit skipped packages that no lock pins: {', '.join(unknown)}")
    with ThreadPoolExecutor(max_workers=8) as pool:
        # Iterating re-raises the first AuditError of any package.
        for partial in pool.map(lambda name: check_with_project_json(name, pins[name]), sorted(skipped)):
            result.advisories += partial.advisories
            result.unverified += partial.unverified
            result.exact_by_project_json += partial.exact_by_project_json
    return result


def distinct(advisories: Iterable[Advisory]) -> list[Advisory]:
    """One entry per advisory and package: PyPI lists an advisory under each of its ids (GHSA, PYSEC)."""
    kept: list[Advisory] = []
    for advisory in sorted(advisories, key=lambda item: (item.package, item.id)):
        if not any(item.package == advisory.package and item.names() & advisory.names() for item in kept):
            kept.append(advisory)
    return kept


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "locks", nargs="*", type=Path, help="lock files (default: every lock of the repository)"
    )
    parser.add_argument(
        "--allow", type=Path, default=ALLOW_FILE, help="the allow-list (TOML, [[allow]] id/reason)"
    )
    parser.add_argument(
        "--strict", action="store_true", help="also fail on packages that could not be fully checked"
    )
    args = parser.parse_args(argv)
    locks = args.locks or list(LOCKS)
    try:
        allowed = read_allow_list(args.allow)
        result = audit(locks)
    except AuditError as exc:
        print(f"audit: cannot check the locked set: {exc}", file=sys.stderr)
        return 2
    failing = []
    for advisory in distinct(result.advisories):
        reasons = [allowed[name] for name in sorted(advisory.names()) if name in allowed]
        aliases = f" ({', '.join(advisory.aliases)})" if advisory.aliases else ""
        fixed = f"; fixed in {', '.join(advisory.fixed_in)}" if advisory.fixed_in else "; no fixed release"
        note = f"; {advisory.note}" if advisory.note else ""
        line = (
            f"{advisory.package}=={advisory.version}: {advisory.id}{aliases}{fixed}{note} [{advisory.source}]"
        )
        if reasons:
            print(f"audit: allowed   {line}: {reasons[0]}")
        else:
            print(f"audit: VULNERABLE {line}")
            failing.append(advisory)
    print(
        f"audit: {result.packages} locked packages; exact per-version check: {result.exact_by_pip_audit} by "
        f"pip-audit, {result.exact_by_project_json} from PyPI's project JSON (pinned = latest release)"
    )
    if result.unverified:
        listed = ", ".join(
            f"{name}=={pinned} (latest {latest})" for name, pinned, latest in result.unverified
        )
        label = "UNVERIFIED" if args.strict else "unverified"
        print(
            f"audit: {label} {len(result.unverified)}: older than the latest release, and PyPI's "
            f"per-version advisories were not reachable, so an advisory fixed since could not be seen "
            f"(make lock pins the latest): {listed}"
        )
    if failing:
        print(
            f"audit: FAIL: {len(failing)} known vulnerabilities; upgrade (make lock) or list each in "
            f"{ALLOW_FILE.relative_to(REPO)} with its reason",
            file=sys.stderr,
        )
        return 1
    if args.strict and result.unverified:
        print(f"audit: FAIL (--strict): {len(result.unverified)} packages not fully checked", file=sys.stderr)
        return 1
    print("audit: PASS: no known vulnerability outside the allow-list")
    return 0


if __name__ == "__main__":
    sys.exit(main())

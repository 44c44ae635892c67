"""Issue 9's "done when" for the client: ``pip install ./clients/python`` in a fresh venv brings none of the
server's dependencies, ``keystream --help`` works, and a 5 MB file survives ``keystream encrypt``/``decrypt``
through a server started with ``keystream-server serve``.

The venv is filled offline (``--no-index``) from wheels of what this environment already runs (see
:mod:`wheelhouse`), so the test is deterministic and needs no network. Anything that cannot be set up fails
the test; nothing here skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

import keystream_server
import wheelhouse
from keystream_server import REPO, RunningServer

CLIENT = REPO / "clients" / "python"
#: Distributions (canonical names) that belong to the server and must not come with the client.
SERVER_DISTRIBUTIONS = {
    "fastapi",
    "starlette",
    "uvicorn",
    "pydantic",
    "pydantic-core",
    "cython",
    "pycryptodome",
}
#: Modules that must not be importable in the client's venv (Crypto is pycryptodome's).
SERVER_MODULES = (
    "app",
    "aescore",
    "hwsim",
    "fastapi",
    "starlette",
    "uvicorn",
    "pydantic",
    "Cython",
    "Crypto",
)
TIMEOUT = 120
SIZE = 5 * 1024 * 1024


def _environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment without anything that would let the venv see the repository or an index."""
    drop = ("KEYSTREAM_", "PIP_", "PYTHON")
    environment = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    environment.update({"PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    environment.update(extra or {})
    return environment


def _run(command: list[str], cwd: Path, **kwargs: object) -> subprocess.CompletedProcess[bytes]:
    env = kwargs.pop("env", None) or _environment()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, timeout=TIMEOUT, check=False)
    assert result.returncode == 0, (
        f"{command[:4]} failed:\n{result.stdout.decode()}\n{result.stderr.decode()}"
    )
    return result


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory outside the repository (so neither ``app`` nor the client's source is on a path)."""
    return tmp_path_factory.mktemp("client-distribution")


@pytest.fixture(scope="module")
def venv(work: Path) -> Path:
    """A fresh venv with ``pip install --no-index --find-links WHEELS <copy of clients/python>``."""
    project = tomllib.loads((CLIENT / "pyproject.toml").read_text())
    requirements = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    wheelhouse.fill(requirements, work / "wheels")
    # A copy, so the build's egg-info and build/ never land in the checkout (and parallel runs do not race).
    source = work / "keystream-client"
    skip = shutil.ignore_patterns("tests", "build", "*.egg-info", "__pycache__")
    shutil.copytree(CLIENT, source, ignore=skip)
    path = work / "venv"
    _run([sys.executable, "-m", "venv", str(path)], cwd=work)
    pip = [str(path / "bin" / "python"), "-m", "pip", "install", "-q", "--no-index"]
    _run([*pip, "--find-links", str(work / "wheels"), str(source)], cwd=work)
    return path


@pytest.fixture(scope="module")
def server(work: Path) -> Iterator[RunningServer]:
    """``keystream-server serve`` from the server distribution (this environment)."""
    (work / "server").mkdir()
    yield from keystream_server.running(work / "server")


@pytest.mark.slow  # its fixtures build and install the wheels
def test_installs_without_the_server_or_its_dependencies(venv: Path, work: Path) -> None:
    listing = _run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format=json"], cwd=work)
    installed = {entry["name"].lower().replace("_", "-") for entry in json.loads(listing.stdout)}
    assert {"keystream-client", "httpx", "h11"} <= installed
    assert not installed & SERVER_DISTRIBUTIONS
    probe = (
        "import importlib.util, json, sys; "
        f"print(json.dumps([m for m in {list(SERVER_MODULES)!r} if importlib.util.find_spec(m)]))"
    )
    found = _run([str(venv / "bin" / "python"), "-c", probe], cwd=work)
    assert json.loads(found.stdout) == []
    typed = _run(
        [str(venv / "bin" / "python"), "-c", "import keystream_client; print(keystream_client.__file__)"],
        cwd=work,
    )
    assert (Path(typed.stdout.decode().strip()).parent / "py.typed").is_file()


def test_keystream_help_works(venv: Path, work: Path) -> None:
    result = _run([str(venv / "bin" / "keystream"), "--help"], cwd=work)
    assert result.stdout.startswith(b"usage: keystream") and b"exit codes" in result.stdout


def test_five_megabyte_round_trip_through_keystream_server(
    venv: Path, work: Path, server: RunningServer
) -> None:
    keystream = str(venv / "bin" / "keystream")
    env = _environment({"KEYSTREAM_URL": server.url, "KEYSTREAM_TOKEN": server.token})
    _run([keystream, "keys", "create", "distribution"], cwd=work, env=env)
    plain, sealed, back = work / "plain.bin", work / "plain.sealed", work / "plain.out"
    plain.write_bytes(os.urandom(SIZE))
    _run(
        [keystream, "encrypt", "--key", "distribution", "--quiet", str(plain), str(sealed)], cwd=work, env=env
    )
    _run(
        [keystream, "decrypt", "--key", "distribution", "--quiet", str(sealed), str(back)], cwd=work, env=env
    )
    assert sealed.stat().st_size > SIZE
    assert back.read_bytes() == plain.read_bytes()

"""The README's five-minute tour, read from the README itself and run as written against a real server.

The fenced blocks under ``## Five-minute tour`` are the test: the ``sh`` blocks run in order as one bash
script (``set -euo pipefail``) in a fresh directory, then the ``python`` block runs in that directory. Two
things are the test's job instead of the reader's: the block that starts the service (``make run``) is
replaced by a server this test starts on a free port, and the ``export KEYSTREAM_URL=...`` and
``export KEYSTREAM_TOKEN=...`` lines by the real URL and token in the environment. Everything else runs
verbatim.

The tour reaches ``keystream`` and ``keystream_client`` the way a reader does: by activating ``.venv`` (the
environment ``make run`` and ``make test`` install both distributions into). The fresh directory gets a
``.venv`` that is this interpreter's environment, and ``PATH`` holds no directory with a ``keystream``
command, so a tour that forgot to say how to reach the tools fails here as it did for readers. The server is
started with the server distribution's ``keystream-server serve``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from keystream_docs import section_blocks
from keystream_server import MASTER_KEY, ROOT_TOKEN, free_port, stop

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
TOUR_HEADING = "## Five-minute tour"
STARTUP_SECONDS = 30
RUN_TIMEOUT = 120

# -- how the tour's commands run: the console scripts of the two distributions in this environment ----------
BIN = Path(sys.executable).parent
SERVER_COMMAND = [str(BIN / "keystream-server"), "serve"]

EXPORT = re.compile(r"^export (KEYSTREAM_URL|KEYSTREAM_TOKEN)=")


@dataclass
class Tour:
    """The tour's code blocks, as the test will run them."""

    shell: list[str]
    python: list[str]
    start_block: str
    exported: set[str]


def parse_tour(page: Path) -> Tour:
    """Split the tour of ``page`` into the start block, the shell blocks (exports removed) and the Python
    blocks (read with the docs tests' one parser, :mod:`keystream_docs`)."""
    shell, python, starts, exported = [], [], [], set()
    for language, code in section_blocks(TOUR_HEADING, page):
        if language == "python":
            python.append(code)
        elif language == "sh" and re.search(r"^make run\b", code, re.MULTILINE):
            starts.append(code)
        elif language == "sh":
            kept = []
            for line in code.splitlines():
                match = EXPORT.match(line)
                if match:
                    exported.add(match.group(1))
                else:
                    kept.append(line)
            shell.append("\n".join(kept) + "\n")
        else:
            raise AssertionError(f"tour block in an unexpected language {language!r}: {code[:80]!r}")
    assert len(starts) == 1, f"the tour must start the service with one `make run` block, found {starts}"
    return Tour(shell, python, starts[0], exported)


@dataclass
class Served:
    """A running server for the tour."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    """Start ``SERVER_COMMAND`` on a free port; fail (never skip) when it does not answer /healthz."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(
        {
            "KEYSTREAM_ROOT_TOKEN": ROOT_TOKEN,
            "KEYSTREAM_MASTER_KEY": MASTER_KEY,
            "KEYSTREAM_LOG_LEVEL": "warning",
            "KEYSTREAM_TIMEOUT_GRACEFUL_SHUTDOWN": "3",
            "PYTHONPATH": str(REPO),
        }
    )
    data_dir = tmp_path / "data"
    command = [*SERVER_COMMAND, "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data_dir)]
    log = tmp_path / "server.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=handle, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + STARTUP_SECONDS
        while True:
            if process.poll() is not None:
                pytest.fail(f"server exited with {process.returncode}: {log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server did not answer in {STARTUP_SECONDS} s: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield Served(process, url, log)
    finally:
        stop(process)


def path_without_keystream(path: str) -> str:
    """``path`` without the directories that hold a ``keystream`` command: a second terminal's ``PATH``."""
    kept = [part for part in path.split(os.pathsep) if part and not (Path(part) / "keystream").exists()]
    return os.pathsep.join(kept)


def tour_environment(served: Served) -> dict[str, str]:
    """The environment of a reader's second terminal after the tour's exports: no venv active, so the
    tools are reachable only the way the tour says."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    env.pop("VIRTUAL_ENV", None)
    env.update(
        {
            "KEYSTREAM_URL": served.url,
            "KEYSTREAM_TOKEN": ROOT_TOKEN,
            "PATH": path_without_keystream(env.get("PATH", "")),
        }
    )
    return env


def reader_checkout(work: Path) -> None:
    """Give ``work`` the ``.venv`` a reader's checkout has after ``make run``: this interpreter's venv."""
    venv = Path(sys.prefix)
    assert (venv / "bin" / "activate").is_file(), f"the tests must run in a venv (make test): {venv}"
    (work / ".venv").symlink_to(venv, target_is_directory=True)


def test_tour_is_parsed_from_the_readme() -> None:
    tour = parse_tour(README)
    assert tour.start_block.strip() == "make run"
    assert tour.exported == {"KEYSTREAM_URL", "KEYSTREAM_TOKEN"}
    shell = "".join(tour.shell)
    assert re.search(r"^curl .*/encrypt", shell, re.MULTILINE), "the tour encrypts with curl"
    assert re.search(r"^curl .*/decrypt", shell, re.MULTILINE), "the tour decrypts with curl"
    assert re.search(r"^keystream encrypt ", shell, re.MULTILINE), "the tour encrypts with keystream"
    assert re.search(r"^keystream decrypt ", shell, re.MULTILINE), "the tour decrypts with keystream"
    assert len(tour.python) == 1 and "from keystream_client import" in tour.python[0]
    for line in shell.splitlines():
        if line.startswith("curl ") and " -o " in line:
            assert "--fail" in line, f"a curl example that writes a file must use --fail: {line}"


def test_parser_separates_the_blocks(tmp_path: Path) -> None:
    text = (
        "# X\n\n## Five-minute tour\n\n```sh\nmake run\n```\n\n```sh\nexport KEYSTREAM_URL=u\necho a\n```\n"
        "\n```python\nprint(1)\n```\n\n## Next\n\n```sh\necho never\n```\n"
    )
    page = tmp_path / "README.md"
    page.write_text(text)
    tour = parse_tour(page)
    assert tour.shell == ["echo a\n"] and tour.python == ["print(1)\n"]
    assert tour.exported == {"KEYSTREAM_URL"}


def test_readme_tour_runs_against_a_real_server(served: Served, tmp_path: Path) -> None:
    assert shutil.which("curl") is not None, "curl is missing (scripts/install-tools.sh installs it)"
    tour = parse_tour(README)
    work = tmp_path / "work"
    work.mkdir()
    reader_checkout(work)
    env = tour_environment(served)
    assert shutil.which("keystream", path=env["PATH"]) is None

    shell = subprocess.run(
        ["bash", "-c", "set -euo pipefail\n" + "\n".join(tour.shell)],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert shell.returncode == 0, f"stdout:\n{shell.stdout}\nstderr:\n{shell.stderr}"
    for said in ("curl round trip ok", "keystream round trip ok", "curl ciphertext decrypted by keystream"):
        assert said in shell.stdout, shell.stdout

    (work / "tour.py").write_text("\n".join(tour.python))
    python = subprocess.run(
        ["bash", "-c", "source .venv/bin/activate && python tour.py"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert python.returncode == 0, f"stdout:\n{python.stdout}\nstderr:\n{python.stderr}"
    assert "python round trip ok" in python.stdout

    plaintext = (work / "numbers.txt").read_bytes()
    assert len(plaintext) > 1_000_000
    for name in ("numbers.curl.ks", "numbers.cli.ks", "numbers.py.ks"):
        ciphertext = (work / name).read_bytes()
        assert ciphertext[0] == 40, f"{name} does not start with an aes256 sealed header (L = 40)"
        assert len(ciphertext) > len(plaintext), f"{name} is shorter than its plaintext"
        assert plaintext[:4096] not in ciphertext
    for name in ("numbers.curl.out", "numbers.cli.out", "numbers.cross.out", "numbers.py.out"):
        assert (work / name).read_bytes() == plaintext, name
    listing = httpx.get(
        f"{served.url}/v1/keys", headers={"Authorization": f"Bearer {ROOT_TOKEN}"}, timeout=10
    ).json()
    assert {"tour", "tour-cli", "tour-py"} <= {key["name"] for key in listing["keys"]}


def test_make_run_installs_the_client_and_says_how_to_reach_it() -> None:
    """The tour's second terminal needs ``keystream`` from ``make run`` alone, and the way to reach it."""
    planned = subprocess.run(
        ["make", "--no-print-directory", "-n", "-B", "run"],
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if not k.startswith(("MAKE", "MFLAGS"))},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert planned.returncode == 0, planned.stderr
    installs = [line for line in planned.stdout.splitlines() if " -m pip install " in line]
    assert installs and "./clients/python" in installs[-1], planned.stdout
    assert "source .venv/bin/activate" in planned.stdout, planned.stdout

"""Every shell block of docs/ (``sh``, ``bash``, ``console``) runs as printed, so the examples cannot drift
from what the service and the tools do.

One test per page: its blocks run in order, each as a bash script (``tests/docs/docs_shell.py`` says how a
block becomes one and when a failing command is allowed), with the shell state of one terminal carried from
block to block (variables, exports, the directory), in a fresh directory that looks like a checkout (the
repository's top-level entries linked in, ``.venv`` this interpreter's venv, on ``PATH`` as after
``source .venv/bin/activate``). The page's service is a ``keystream-server serve`` this test starts first
(the reader's ``make run``), with the root token in ``KEYSTREAM_TOKEN``. What the test does for the reader,
and nothing more:

* ``127.0.0.1:8000`` (the service's documented address) and every port a documented ``serve --port N``
  uses become free ports of this machine, in every block of the page (``127.0.0.1:N``, ``localhost:N`` and
  the start command's ``--port N``);
* ``/tmp/...``, ``/var/log/keystream`` and ``/var/lib/keystream`` become directories of the page's own (the
  machine is shared);
* ``export KEYSTREAM_TOKEN=ks_...`` sets the token the reader would paste;
* a command that starts the service runs in the background until it listens (a second terminal), with the
  settings the pages assume of the reader's service unless the command sets them: the root token the shell
  has in ``KEYSTREAM_TOKEN``, key import allowed, one worker (``docs_prologue.sh``, ``ks_serve``);
* a page whose blocks use ``postgresql://ROLE:PASSWORD@127.0.0.1:PORT/DATABASE`` gets the session's throwaway
  PostgreSQL cluster (``tests/pg_cluster.py``) on that PORT, with ROLE and DATABASE created as the page's
  "create a role and a database" step does as the database host's superuser (``sudo -u postgres``, which the
  test does not have).

Blocks the test cannot run say so in the page, with what runs them instead (``keystream_docs.NOT_RUN``);
their number is pinned below so that the list stays short.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keystream_docs import Block, page_blocks
from keystream_server import ROOT_TOKEN, free_port
from tests.docs.docs_shell import DEFAULT_PORT, Statement, script_lines, serve_port, statements
from tests.pg_cluster import PgCluster

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
PROLOGUE = Path(__file__).with_name("docs_prologue.sh")
SHELL_LANGUAGES = ("sh", "bash", "console")
#: Blocks marked as not run here (Docker, Kubernetes, long benchmarks, ...): keep this list short.
NOT_RUN_BLOCKS = 16
BLOCK_TIMEOUT = 240
#: Programs the runnable blocks use besides the project's commands and coreutils.
PAGE_TOOLS = ("bash", "curl", "jq", "openssl", "haproxy", "softhsm2-util", "tar", "awk", "sed")
VENV = Path(sys.prefix)
#: Top-level entries of the repository a reader's checkout has and the page's directory links to.
#: A PostgreSQL URL of a page, with the role, password, port and database it needs.
POSTGRES_URL = re.compile(r"postgresql://(\w+):([\w-]+)@127\.0\.0\.1:(\d+)/(\w+)")
#: Directories a block writes into (the scale-out stack's generated haproxy.cfg): copied, not linked.
CHECKOUT_COPY = {"deploy"}
CHECKOUT_SKIP = {".git", ".venv", "data", "build", ".pytest_cache", ".mypy_cache", ".ruff_cache"}


def shell_blocks(page: Path) -> list[Block]:
    return [block for block in page_blocks(page) if block.language in SHELL_LANGUAGES]


PAGES = [page for page in sorted(DOCS.glob("*.md")) if shell_blocks(page)]


def page_ports(blocks: list[Block]) -> dict[int, int]:
    """A free port of this machine for the documented service port and every port a block serves on."""
    documented = {DEFAULT_PORT}
    for block in blocks:
        for statement in statements(block.language, block.text):
            port = serve_port(statement)
            if port is not None:
                documented.add(port)
    return {port: free_port() for port in sorted(documented)}


def localize(line: str, ports: dict[int, int], root: Path) -> str:
    """The substitutions of the module docstring, on one script line."""
    for documented, real in ports.items():
        line = re.sub(rf"\b(127\.0\.0\.1|localhost):{documented}\b", rf"\g<1>:{real}", line)
        if "ks_serve " in line:  # a service's own port; other --port flags (HAProxy's bind) stay as printed
            line = re.sub(rf"--port([ =]){documented}\b", rf"--port\g<1>{real}", line)
    line = re.sub(r"(?<![\w./])/tmp/", f"{root}/tmp/", line)
    line = re.sub(r"(?<![\w./])/var/(log|lib)/keystream\b", rf"{root}/var/\g<1>/keystream", line)
    return re.sub(r"^export KEYSTREAM_TOKEN=ks_\.\.\.", f"export KEYSTREAM_TOKEN={ROOT_TOKEN}", line)


def postgres_urls(blocks: list[Block]) -> set[tuple[str, str, int, str]]:
    """``(role, password, port, database)`` of every PostgreSQL URL of the blocks the test runs."""
    return {
        (role, password, int(port), database)
        for block in blocks
        if block.not_run is None
        for role, password, port, database in POSTGRES_URL.findall(block.text)
    }


def provide_postgres(request: pytest.FixtureRequest, urls: set[tuple[str, str, int, str]]) -> dict[int, int]:
    """Create each URL's role and database on the session's cluster; the documented port -> the cluster's."""
    cluster: PgCluster = request.getfixturevalue("pg_cluster")
    for role, password, _, database in sorted(urls):
        cluster.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
        cluster.execute(f'DROP ROLE IF EXISTS "{role}"')
        cluster.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD '{password}'")
        cluster.execute(f'CREATE DATABASE "{database}" OWNER "{role}"')
    return {port: cluster.port for _, _, port, _ in urls}


def checkout(work: Path) -> None:
    """Make ``work`` look like the repository's root (links; copies of the directories blocks write into),
    with ``.venv`` this interpreter's venv."""
    work.mkdir(parents=True)
    for entry in REPO.iterdir():
        if entry.name in CHECKOUT_COPY:
            shutil.copytree(entry, work / entry.name, symlinks=True)
        elif entry.name not in CHECKOUT_SKIP:
            (work / entry.name).symlink_to(entry)
    (work / ".venv").symlink_to(VENV, target_is_directory=True)


def shell_environment(run: Path, ports: dict[int, int]) -> dict[str, str]:
    """The reader's terminal: venv active, no ``KEYSTREAM_*`` but the URL and token of the page's service."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("KEYSTREAM_", "PYTEST_"))}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env.update(
        {
            "PATH": f"{VENV / 'bin'}{os.pathsep}{env.get('PATH', '')}",
            "VIRTUAL_ENV": str(VENV),
            "KEYSTREAM_URL": f"http://127.0.0.1:{ports[DEFAULT_PORT]}",
            "KEYSTREAM_TOKEN": ROOT_TOKEN,
            "KS_DOCS_TOKEN": ROOT_TOKEN,
            "KS_DOCS_RUN": str(run),
        }
    )
    return env


def statement_at(found: list[Statement], line: int) -> Statement | None:
    """The statement a failure's line number (as bash reports it) belongs to."""
    inside = [s for s in found if s.first <= line <= s.last]
    if inside:
        return inside[0]
    before = [s for s in found if s.first <= line]
    return before[-1] if before else None


def run_block(block: Block, ports: dict[int, int], root: Path, env: dict[str, str]) -> list[str]:
    """Run one block; the problems found (empty when it ran as printed)."""
    run = Path(env["KS_DOCS_RUN"])
    (run / "failures").unlink(missing_ok=True)
    (run / "end").unlink(missing_ok=True)
    lines = [localize(line, ports, root) for line in script_lines(block.language, block.text, ports)]
    script = run / f"block-{block.line}.sh"
    script.write_text(f'source "{PROLOGUE}"\n' + "\n".join(lines) + "\nks_reached_end=1\n")
    try:
        result = subprocess.run(
            ["bash", str(script)],
            cwd=root / "work",
            env=env,
            capture_output=True,
            text=True,
            timeout=BLOCK_TIMEOUT,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        return [f"{block.where}: did not finish in {BLOCK_TIMEOUT} s: {exc.stdout!r} {exc.stderr!r}"]
    found = statements(block.language, block.text)
    problems = []
    failures = (run / "failures").read_text().splitlines() if (run / "failures").exists() else []
    for failure in failures:
        number, status = (int(part) for part in failure.split())
        statement = statement_at(found, number - 1)
        allowed = statement.allowed() if statement else {0}
        if status not in allowed:
            text = statement.text if statement else f"script line {number}"
            problems.append(
                f"{block.where} (block line {number - 1}): exit {status}, the page allows {allowed}: {text}"
            )
    for statement in found:
        for text in statement.promised():
            if text not in result.stdout:
                problems.append(
                    f"{block.where} (block line {statement.first}): did not print {text!r}: {statement.text}"
                )
    end = (run / "end").read_text().split() if (run / "end").exists() else ["?", "0"]
    if end[1] != "1":
        problems.append(f"{block.where}: the block stopped early (exit {end[0]})")
    if problems:
        problems.append(f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-3000:]}")
    return problems


def stop_servers(run: Path) -> None:
    """Stop every server the page's blocks started (each in its own session)."""
    for pidfile in run.glob("serve-*.pid"):
        pid = int(pidfile.read_text())
        try:
            os.killpg(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + 15
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                break
            time.sleep(0.1)
        else:
            if Path(f"/proc/{pid}").exists():
                os.killpg(pid, signal.SIGKILL)


def test_the_tools_the_pages_use_are_installed() -> None:
    """The pages' commands beyond the project's own (``make tools`` installs them); fail, never skip."""
    missing = [tool for tool in PAGE_TOOLS if shutil.which(tool) is None]
    assert not missing, f"missing {missing}: run scripts/install-tools.sh (make tools) as root"


def test_every_not_run_block_says_why_and_what_runs_it() -> None:
    marked = [block for page in PAGES for block in shell_blocks(page) if block.not_run]
    listing = "\n".join(f"{b.where}: {b.not_run}" for b in marked)
    assert len(marked) == NOT_RUN_BLOCKS, f"not-run blocks changed; keep the list short:\n{listing}"
    for block in marked:
        assert block.not_run is not None
        why, where = block.not_run
        assert len(why) > 10 and len(where) > 5, block.where


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_page_blocks_run_as_printed(page: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    test_the_tools_the_pages_use_are_installed()
    blocks = shell_blocks(page)
    ports = page_ports(blocks)
    urls = postgres_urls(blocks)
    if urls:
        ports.update(provide_postgres(request, urls))
    root = tmp_path
    checkout(root / "work")
    for directory in ("tmp", "var/log", "var/lib", "run"):
        (root / directory).mkdir(parents=True, exist_ok=True)
    env = shell_environment(root / "run", ports)
    start = Block(page, 0, "sh", "keystream-server serve\n", "", None)
    try:
        problems = run_block(start, ports, root, env)
        assert not problems, "the page's service did not start:\n" + "\n".join(problems)
        problems = []
        for block in blocks:
            if block.not_run is None:
                problems += run_block(block, ports, root, env)
    finally:
        stop_servers(root / "run")
    assert not problems, "\n".join(problems)


def _page(tmp_path: Path, text: str) -> Block:
    page = tmp_path / "page.md"
    page.write_text(text)
    (block,) = shell_blocks(page)
    return block


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("```sh\nfalse\necho after\n```\n", "exit 1, the page allows {0}: false"),
        ("```sh\nfalse   # exit 1: the page says so\n```\n", None),
        ("```sh\nls /nowhere\n# ls: cannot access '/nowhere' (exit 2)\n```\n", None),
        ("```console\n$ false\n$ echo $?\n1\n```\n", None),
        ("```console\n$ false\n$ echo $?\n2\n```\n", "exit 1, the page allows {0, 2}: false"),
        ("```console\n$ true\n$ echo $?\n1\n```\n", "exit 99, the page allows {0}: echo $?"),
        ("```sh\necho $UNSET_BY_ANYONE\n```\n", "the block stopped early"),
        ('```sh\ntest 1 = 2 && echo "equal"\n```\n', "did not print 'equal'"),
        ("```sh\nKEYSTREAM_HOST=0.0.0.0 keystream-server serve\n```\n", "exit 2, the page allows {0}"),
    ],
    ids=[
        "unstated failure",
        "stated",
        "stated in its output",
        "echo $?",
        "wrong echo $?",
        "echo $? shows a failure that did not happen",
        "unbound",
        "&& echo",
        "serve",
    ],
)
def test_a_failing_command_is_reported_unless_the_page_states_it(
    tmp_path: Path, text: str, problem: str | None
) -> None:
    """The harness itself: a command that fails without the page saying so fails the page's test."""
    block = _page(tmp_path, text)
    (tmp_path / "work").mkdir()
    (tmp_path / "run").mkdir()
    ports = page_ports([block])
    problems = run_block(block, ports, tmp_path, shell_environment(tmp_path / "run", ports))
    if problem is None:
        assert problems == []
    else:
        assert problems and problem in problems[0], problems


def test_blocks_share_one_terminal(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        '```sh\nA=1; export B=2; mkdir d; cd d\n```\n\n```sh\ntest "$A$B$(basename $PWD)" = 12d\n```\n'
    )
    (tmp_path / "work").mkdir()
    (tmp_path / "run").mkdir()
    env = shell_environment(tmp_path / "run", {DEFAULT_PORT: free_port()})
    for block in shell_blocks(page):
        assert run_block(block, {DEFAULT_PORT: 1}, tmp_path, env) == []


def test_localize_maps_documented_ports_and_scratch_paths(tmp_path: Path) -> None:
    ports = {8000: 41000, 8443: 42000}
    line = "curl https://localhost:8443/x http://127.0.0.1:8000/y /tmp/k/ca --port 8443 :80001"
    assert localize(line, ports, tmp_path) == (
        f"curl https://localhost:42000/x http://127.0.0.1:41000/y {tmp_path}/tmp/k/ca --port 8443 :80001"
    )
    assert localize("ks_serve 8443 42000 'keystream-server serve --port 8443'", ports, tmp_path).endswith(
        "--port 42000'"
    )
    assert localize("export KEYSTREAM_TOKEN=ks_...   # printed", ports, tmp_path).startswith(
        f"export KEYSTREAM_TOKEN={ROOT_TOKEN} "
    )

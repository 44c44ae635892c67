"""A throwaway PostgreSQL cluster for the tests: initdb in a temp dir, one server on a free 127.0.0.1 port.

PostgreSQL refuses to run as root, so when the tests run as root the cluster's directory is given to the
``postgres`` user (created by Debian's ``postgresql`` package, which ``scripts/install-tools.sh`` installs)
and every PostgreSQL program runs through ``runuser -u postgres``; as any other user they run directly.
The cluster trusts local connections for the superuser ``ks``, keeps its socket in its own directory and
runs without fsync (it holds test data only). Each test gets a fresh schema (:meth:`PgCluster.new_schema`: a
URL whose ``options`` put a new, empty schema first on the ``search_path``), which isolates a keystore as well
as a fresh database does at a hundredth of the cost: ``CREATE SCHEMA`` takes ~4 ms, ``CREATE DATABASE`` 0.3 to
0.7 s on a busy 2-core machine (it copies and WAL-logs the template). :meth:`PgCluster.new_database` is there
for the tests that need a whole database.

When PostgreSQL cannot be found or started, :func:`start_cluster` raises :class:`PgClusterError` with the
reason and the server log: the tests that need it fail, never skip.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from bench.service_process import free_port

SUPERUSER = "ks"
POSTGRES_LIB = Path("/usr/lib/postgresql")
START_SECONDS = 30
#: Settings for a cluster that holds nothing worth keeping: faster, never durable.
SERVER_OPTIONS = (
    "-c fsync=off",
    "-c full_page_writes=off",
    "-c synchronous_commit=off",
    "-c max_connections=300",
)


class PgClusterError(RuntimeError):
    """PostgreSQL is not installed, or the cluster could not be created or started."""


def find_bin_dir() -> Path:
    """The newest ``/usr/lib/postgresql/<version>/bin`` that has ``initdb``, else the one on ``PATH``.

    Raises:
        PgClusterError: no ``initdb`` anywhere (install Debian's ``postgresql``: ``make tools``).
    """
    candidates = sorted(
        (path for path in POSTGRES_LIB.glob("*/bin") if (path / "initdb").is_file()),
        key=lambda path: int(path.parent.name) if path.parent.name.isdigit() else 0,
    )
    if candidates:
        return candidates[-1]
    on_path = shutil.which("initdb")
    if on_path:
        return Path(on_path).parent
    raise PgClusterError(
        f"PostgreSQL is not installed: no initdb in {POSTGRES_LIB}/*/bin or on PATH. "
        "Run `make tools` as root (Debian's postgresql package)"
    )


def _runner() -> list[str]:
    """The command prefix that runs a PostgreSQL program as a user it accepts."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError as exc:
        raise PgClusterError(
            "running as root and there is no 'postgres' user to run PostgreSQL as (PostgreSQL refuses root); "
            "install Debian's postgresql package (`make tools`)"
        ) from exc
    return ["runuser", "-u", "postgres", "--"]


@dataclass
class PgCluster:
    """A running throwaway cluster; :meth:`stop` and :meth:`start` let a test simulate an outage."""

    bin_dir: Path
    directory: Path
    port: int
    #: Further ``-c name=value`` server settings (the scale-out benchmark preloads pg_stat_statements).
    extra_options: tuple[str, ...] = ()
    _names: Iterator[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    @property
    def data_dir(self) -> Path:
        return self.directory / "pg"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    def url(self, database: str = "postgres") -> str:
        """A ``postgresql://`` URL for ``database`` as the superuser."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = START_SECONDS) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*_runner(), *args], capture_output=True, text=True, timeout=timeout, check=False, cwd="/"
        )

    def _pg_ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return self._run(str(self.bin_dir / "pg_ctl"), "-D", str(self.data_dir), *args)

    def start(self) -> None:
        """Start the server and wait until it accepts connections.

        Raises:
            PgClusterError: ``pg_ctl start`` failed; the message carries its output and the server log.
        """
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 " + " ".join(
            (*SERVER_OPTIONS, *self.extra_options)
        )
        result = self._pg_ctl("-o", options, "-l", str(self.log), "-w", "-t", str(START_SECONDS), "start")
        if result.returncode != 0:
            raise PgClusterError(
                f"pg_ctl start failed ({result.returncode}): {result.stdout}{result.stderr}\n"
                f"server log:\n{self.server_log()}"
            )

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate`` simulates a crash). Raises PgClusterError when pg_ctl fails."""
        result = self._pg_ctl("-m", mode, "-w", "stop")
        if result.returncode != 0:
            raise PgClusterError(f"pg_ctl stop failed ({result.returncode}): {result.stdout}{result.stderr}")

    def is_running(self) -> bool:
        return self._pg_ctl("status").returncode == 0

    def server_log(self) -> str:
        with contextlib.suppress(OSError):
            return self.log.read_text(errors="replace")[-4000:]
        return "(no server log)"

    def execute(self, sql: str, database: str = "postgres") -> None:
        """Run one statement in autocommit mode (``CREATE DATABASE`` cannot run in a transaction)."""
        import psycopg

        with psycopg.connect(self.url(database), autocommit=True, connect_timeout=10) as conn:
            conn.execute(sql.encode())

    def new_database(self) -> str:
        """Create an empty database and return its URL."""
        name = f"db_{next(self._names)}"
        self.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
        return self.url(name)

    def new_schema(self) -> str:
        """Create an empty schema in the ``postgres`` database; return a URL whose sessions work in it."""
        name = f"test_{next(self._names)}"
        self.execute(f'CREATE SCHEMA "{name}"')
        return f"{self.url()}?options=-csearch_path%3D{name}"


def start_cluster(extra_options: tuple[str, ...] = ()) -> PgCluster:
    """initdb a cluster in a new temp dir and start it on a free port (with ``extra_options`` as well as
    :data:`SERVER_OPTIONS`).

    Raises:
        PgClusterError: PostgreSQL is missing, initdb failed or the server did not start (with the reason).
    """
    bin_dir = find_bin_dir()
    runner = _runner()
    directory = Path(tempfile.mkdtemp(prefix="keystream-pg-"))
    if runner:
        owner = pwd.getpwnam("postgres")
        os.chown(directory, owner.pw_uid, owner.pw_gid)
    cluster = PgCluster(bin_dir=bin_dir, directory=directory, port=free_port(), extra_options=extra_options)
    result = cluster._run(
        str(bin_dir / "initdb"), "-D", str(cluster.data_dir), "-A", "trust", "-U", SUPERUSER,
        "--no-sync", "-E", "UTF8", "--locale=C.UTF-8",
    )  # fmt: skip
    if result.returncode != 0:
        shutil.rmtree(directory, ignore_errors=True)
        raise PgClusterError(f"initdb failed ({result.returncode}): {result.stdout}{result.stderr}")
    try:
        cluster.start()
    except PgClusterError:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return cluster


def remove_cluster(cluster: PgCluster) -> None:
    """Stop the server (if running) and delete its directory."""
    try:
        if cluster.is_running():
            cluster.stop("immediate")
    finally:
        shutil.rmtree(cluster.directory, ignore_errors=True)

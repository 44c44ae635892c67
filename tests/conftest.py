"""Fixtures shared by every test package (the throwaway PostgreSQL cluster, :mod:`tests.pg_cluster`) and the
order in which pytest-xdist hands test files to its workers."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.pg_cluster import PgCluster, remove_cluster, start_cluster


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    """One PostgreSQL cluster for the session, started on first use and removed at the end.

    Raises PgClusterError (so the test fails, never skips) when PostgreSQL is missing or does not start.
    """
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        remove_cluster(cluster)


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> str:
    """A URL whose sessions work in a fresh, empty schema of the session's cluster."""
    return pg_cluster.new_schema()


def _file_rank(items: list[pytest.Item]) -> int:
    """0 for a file with a test marked ``slow``, 1 for one that starts real servers (marked ``e2e`` or under
    an ``e2e`` directory), 2 for the rest."""
    if any(item.get_closest_marker("slow") for item in items):
        return 0
    if any(item.get_closest_marker("e2e") or "e2e" in item.path.parts for item in items):
        return 1
    return 2


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under pytest-xdist, put the files of slow and end-to-end tests first, each file whole and in its own
    order, the rest after them in collection order.

    ``make unit`` gives each worker whole files (``--dist loadfile``) in this order
    (``--no-loadscope-reorder``), the next one whenever a worker is done. By default xdist orders files by
    their number of tests, which left the few-test, minutes-long end-to-end files for last: one worker ran
    the last of them while the other had nothing left. Long files first and the many short ones after them
    keep both workers busy to the end (the longest-first rule of list scheduling).
    """
    if not hasattr(config, "workerinput"):  # not an xdist worker (xdist sets its workers' --dist to "no")
        return
    by_file: dict[str, list[pytest.Item]] = {}
    for item in items:
        by_file.setdefault(str(item.path), []).append(item)
    ranked = sorted(by_file.values(), key=_file_rank)  # stable: collection order within a rank
    items[:] = [item for file_items in ranked for item in file_items]

"""Fixtures shared by every test package: the throwaway PostgreSQL cluster (:mod:`tests.pg_cluster`)."""

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

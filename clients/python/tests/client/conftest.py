"""Fixtures for the client tests: one real server per session, a sync client, fresh key names."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator

import pytest

import keystream_server
from keystream_client import KeystreamClient
from keystream_server import RunningServer

_names = itertools.count()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A real ``keystream-server serve`` process on 127.0.0.1 for the whole session."""
    yield from keystream_server.running(tmp_path_factory.mktemp("client-server"))


@pytest.fixture
def client(server: RunningServer) -> Iterator[KeystreamClient]:
    """A sync client with the root token."""
    with KeystreamClient(server.url, server.token, stream_timeout=60) as ks:
        yield ks


@pytest.fixture
def key_name(request: pytest.FixtureRequest) -> str:
    """A key name no other test uses."""
    return re.sub(r"[^A-Za-z0-9_.-]", "-", f"t{next(_names)}-{request.node.name[:40]}")

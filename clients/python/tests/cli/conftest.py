"""CLI test fixtures: one real server per session and a helper running ``keystream`` as a subprocess."""

from __future__ import annotations

import itertools
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

import keystream_server
from keystream_cli import CLI_TIMEOUT, KEYSTREAM, RunCli
from keystream_server import REPO, RunningServer

_names = itertools.count()


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A real ``keystream-server serve`` process on 127.0.0.1 for the whole session."""
    yield from keystream_server.running(tmp_path_factory.mktemp("cli-server"))


@pytest.fixture
def cli(server: RunningServer) -> RunCli:
    """Run ``keystream ARGS`` against the server (URL and token from the environment)."""

    def run(
        *args: str, env: dict[str, str] | None = None, **kwargs: Any
    ) -> subprocess.CompletedProcess[bytes]:
        environment = server.env()
        environment.update(env or {})
        kwargs.setdefault("capture_output", "stdout" not in kwargs and "stderr" not in kwargs)
        return subprocess.run(
            [*KEYSTREAM, *args],
            cwd=REPO,
            env=environment,
            timeout=CLI_TIMEOUT,
            check=False,
            **kwargs,
        )

    return run


@pytest.fixture
def key(cli: RunCli) -> str:
    """A fresh key with 4 KiB segments (many segments even for small files)."""
    name = f"cli-{next(_names)}"
    result = cli("keys", "create", name, "--segment-size", "4KiB")
    assert result.returncode == 0, result.stderr
    return name

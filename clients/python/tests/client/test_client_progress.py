"""The ``on_progress`` callback as docs/client-and-cli.md describes it: the documented example run as written,
the thread it runs on, and an exception in it cancelling the transfer."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from keystream_client import AsyncKeystreamClient, KeystreamClient, KeystreamClientError
from keystream_docs import section_blocks
from keystream_server import RunningServer

SECTION = "### Progress (`on_progress`)"


def test_documented_example_runs_as_written(server: RunningServer, tmp_path: Path) -> None:
    (language, example), (_, printed) = section_blocks(SECTION)[:2]
    assert language == "python"
    result = subprocess.run(
        [sys.executable, "-c", example], cwd=tmp_path, env=server.env(), capture_output=True, timeout=120,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode() == printed


def test_called_per_chunk_on_the_callers_thread(client: KeystreamClient, key_name: str) -> None:
    client.create_key(key_name)
    calls: list[tuple[int, str]] = []
    data = os.urandom(600_000)
    client.encrypt(key_name, data, on_progress=lambda n: calls.append((n, threading.current_thread().name)))
    assert [n for n, _ in calls] == [262144, 262144, 75712]
    assert {name for _, name in calls} == {threading.current_thread().name}

    chunks = [b"a" * 1000, b"", b"b" * 10]
    sizes: list[int] = []
    client.encrypt(key_name, b"".join(chunks), on_progress=sizes.append)
    iterated: list[int] = []
    with client.encrypt_stream(key_name, iter(chunks), on_progress=iterated.append) as stream:
        stream.read()
    assert sizes == [1010] and iterated == [1000, 10]


def test_async_client_calls_it_on_the_event_loop(server: RunningServer, key_name: str) -> None:
    async def run() -> list[bool]:
        loop = asyncio.get_running_loop()
        on_loop: list[bool] = []

        def on_progress(nbytes: int) -> None:
            on_loop.append(asyncio.get_running_loop() is loop)

        async with AsyncKeystreamClient(server.url, server.token) as ks:
            await ks.create_key(key_name)
            await ks.encrypt(key_name, os.urandom(300_000), on_progress=on_progress)
        return on_loop

    assert asyncio.run(run()) == [True, True]


def test_an_exception_in_it_cancels_the_transfer(
    client: KeystreamClient, key_name: str, tmp_path: Path
) -> None:
    client.create_key(key_name)
    source = tmp_path / "plain.bin"
    source.write_bytes(os.urandom(600_000))

    def stop(nbytes: int) -> None:
        raise RuntimeError("cancelled by the user")

    with pytest.raises(KeystreamClientError, match="reading the request body failed: cancelled by the user"):
        client.encrypt_file(key_name, source, tmp_path / "out.ks", on_progress=stop)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.bin"]

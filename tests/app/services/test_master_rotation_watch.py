"""The master key rotation watch: two workers (two runners on one keystore) take over a rotation whose
process died, exactly once, never while sealed, and never start one of their own."""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.keystore import KeyStore, open_keystore
from app.keystore.generations import MasterRotation, MasterRotationStatus
from app.services.master_rotation import MasterRotationRunner


@pytest.fixture
def stores(tmp_path: Path) -> Iterator[tuple[KeyStore, KeyStore]]:
    """Two handles on one SQLite keystore, as two workers have."""
    master_key = secrets.token_bytes(32)
    first = open_keystore(tmp_path, master_key)
    second = open_keystore(tmp_path, master_key)
    yield first, second
    first.close()
    second.close()


def wait_for(condition: threading.Event, seconds: float = 20.0) -> None:
    assert condition.wait(seconds), "timed out"


def test_two_watches_resume_an_abandoned_rotation_once(stores: tuple[KeyStore, KeyStore]) -> None:
    first, second = stores
    for index in range(3):
        first.create_key(f"k{index}")
        first.rotate_key(f"k{index}")
    dead = MasterRotation(first, batch_size=1, lease_seconds=0.2)
    dead.begin()
    assert dead.run(stop=lambda: True) is None  # its process "dies" half-way
    resumed: list[MasterRotationStatus] = []
    finished: list[MasterRotationStatus] = []
    done = threading.Event()
    runners = [MasterRotationRunner(), MasterRotationRunner()]

    def on_finish(status: MasterRotationStatus) -> None:
        finished.append(status)
        done.set()

    try:
        for runner, store in zip(runners, stores, strict=True):
            runner.watch(
                store,
                batch_size=2,
                sealed=lambda: False,
                on_resume=resumed.append,
                on_finish=on_finish,
                interval=0.1,
            )
        wait_for(done)
        time.sleep(0.5)  # a few more checks: nobody starts anything else
    finally:
        for runner in runners:
            runner.close()
    assert [(status.generation, status.resumed) for status in resumed] == [(2, True)]
    assert [(status.generation, status.rotating) for status in finished] == [(2, False)]
    assert second.master_rotation_status().generation == 2


def test_a_watch_starts_nothing_and_waits_while_sealed(stores: tuple[KeyStore, KeyStore]) -> None:
    store, _ = stores
    store.create_key("k")
    runner = MasterRotationRunner()
    sealed = threading.Event()
    sealed.set()
    resumed: list[MasterRotationStatus] = []
    try:
        runner.watch(
            store,
            batch_size=1,
            sealed=sealed.is_set,
            on_resume=resumed.append,
            on_finish=lambda _: None,
            interval=0.05,
        )
        time.sleep(0.3)
        assert store.master_rotation_status().generation == 1  # nothing unfinished: nothing started
        dead = MasterRotation(store, batch_size=1, lease_seconds=0.0)
        dead.begin()
        assert dead.run(stop=lambda: True) is None
        time.sleep(0.3)
        assert resumed == []  # sealed: the watch leaves it
        sealed.clear()
        deadline = time.monotonic() + 10
        while not resumed:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        runner.close()
    assert resumed[0].resumed and resumed[0].generation == 2

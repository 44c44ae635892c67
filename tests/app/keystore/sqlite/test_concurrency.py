"""Concurrent writers on one keystore: threads sharing a store, and worker processes sharing the file."""

from __future__ import annotations

import base64
import contextlib
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from app.errors import KeyExistsError
from app.keystore import SqliteKeyStore, open_keystore

THREADS = 8


def run_threads(count: int, work: Callable[[int], None]) -> list[BaseException]:
    """Run ``work(i)`` in ``count`` threads released together; return what they raised."""
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def body(index: int) -> None:
        try:
            barrier.wait(timeout=10)
            work(index)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)
    return errors


def test_concurrent_rotations_lose_no_update(store: SqliteKeyStore) -> None:
    store.create_key("orders", "aes128")
    per_thread = 15
    seen: list[int] = []

    def rotate(_: int) -> None:
        for _ in range(per_thread):
            seen.append(store.rotate_key("orders").latest_version)

    assert run_threads(THREADS, rotate) == []
    total = 1 + THREADS * per_thread
    assert sorted(seen) == list(range(2, total + 1))  # each rotation got its own version number
    info = store.get_key("orders")
    assert info.latest_version == total
    assert [v.version for v in info.versions] == list(range(1, total + 1))
    materials = {store.key_material("orders", version) for version in range(1, total + 1)}
    assert len(materials) == total


def test_concurrent_creates_of_one_name_let_exactly_one_win(store: SqliteKeyStore) -> None:
    winners: list[int] = []

    def create(index: int) -> None:
        try:
            store.create_key("shared", "aes256")
            winners.append(index)
        except KeyExistsError:
            pass

    assert run_threads(THREADS, create) == []
    assert len(winners) == 1
    assert store.get_key("shared").latest_version == 1


def test_concurrent_mixed_work_on_many_keys(store: SqliteKeyStore) -> None:
    def work(index: int) -> None:
        name = f"key{index}"
        store.create_key(name, deletion_allowed=True)
        for round_number in range(5):
            store.rotate_key(name)
            assert store.get_key(name).latest_version == round_number + 2
            assert name in {info.name for info in store.list_keys()}
        store.update_key(name, min_decryption_version=3)
        assert len(store.key_material(name, 6)) == 32

    assert run_threads(THREADS, work) == []
    keys = store.list_keys()
    assert [info.name for info in keys] == sorted(f"key{index}" for index in range(THREADS))
    assert {(info.latest_version, info.min_decryption_version) for info in keys} == {(6, 3)}


WORKER = """
import base64, sys
from pathlib import Path
from app.errors import KeyExistsError
from app.keystore import open_keystore
store = open_keystore(Path(sys.argv[1]), base64.b64decode(sys.argv[2]))
try:
    store.create_key("orders")
except KeyExistsError:
    pass
versions = [store.rotate_key("orders").latest_version for _ in range(int(sys.argv[3]))]
store.close()
print(" ".join(map(str, versions)))
"""


def test_worker_processes_share_the_file(data_dir: Path, master_key: bytes) -> None:
    """Workers start together on a fresh data dir: one migration, one key, no lost rotation."""
    processes, rotations = 3, 10
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                str(data_dir),
                base64.b64encode(master_key).decode(),
                str(rotations),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    seen: list[int] = []
    for worker in workers:
        out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        seen += [int(word) for word in out.split()]
    total = 1 + processes * rotations
    assert sorted(seen) == list(range(2, total + 1))
    store = open_keystore(data_dir, master_key)
    assert store.schema_version() == 8
    with contextlib.closing(sqlite3.connect(data_dir / "keystore.db")) as conn:
        assert conn.execute("SELECT COUNT(*) FROM schema_version").fetchone()[0] == 8
    assert store.get_key("orders").latest_version == total
    assert len({store.key_material("orders", v) for v in range(1, total + 1)}) == total
    store.close()


def test_a_store_opened_before_fork_works_in_parent_and_child(data_dir: Path, master_key: bytes) -> None:
    store = open_keystore(data_dir, master_key)
    store.create_key("orders")
    store.get_key("orders")  # leaves an idle pooled connection to be inherited
    pid = os.fork()
    if pid == 0:  # child: must open its own connections; exit without running pytest's teardown
        code = 1
        try:
            code = 0 if store.rotate_key("orders").latest_version == 2 else 2
            store.close()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    info = store.get_key("orders")
    assert info.latest_version == 2
    assert len(store.key_material("orders", 2)) == 32
    assert store.rotate_key("orders").latest_version == 3
    store.close()

"""The keystore contract under concurrency: the store (SQLite's write lock, PostgreSQL's row locks) serializes
writers, whether they are threads sharing one store or two stores (two workers, two replicas).

Runs against each implementation (see ``conftest.py``). The one-store tests repeat the ones of
``tests/app/keystore/sqlite/test_concurrency.py``; the two-store ones are new.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from app.errors import KeyExistsError
from app.keystore import KeyStore
from tests.app.keystore.contract.conftest import Backing

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


def two_stores(backing: Backing, master_key: bytes) -> tuple[KeyStore, KeyStore]:
    return backing.open(master_key), backing.open(master_key)


def test_concurrent_rotations_through_two_stores_get_distinct_versions(
    backing: Backing, master_key: bytes
) -> None:
    stores = two_stores(backing, master_key)
    stores[0].create_key("orders", "aes128")
    per_thread = 10
    seen: list[int] = []

    def rotate(index: int) -> None:
        for _ in range(per_thread):
            seen.append(stores[index % 2].rotate_key("orders").latest_version)

    assert run_threads(THREADS, rotate) == []
    total = 1 + THREADS * per_thread
    assert sorted(seen) == list(range(2, total + 1))  # each rotation got its own version number
    info = stores[1].get_key("orders")
    assert info.latest_version == total
    assert [v.version for v in info.versions] == list(range(1, total + 1))
    assert len({stores[0].key_material("orders", version) for version in range(1, total + 1)}) == total


def test_concurrent_creates_of_one_name_let_exactly_one_win(backing: Backing, master_key: bytes) -> None:
    stores = two_stores(backing, master_key)
    for round_number in range(3):
        name = f"shared{round_number}"
        winners: list[int] = []
        losers: list[int] = []

        def create(
            index: int, name: str = name, winners: list[int] = winners, losers: list[int] = losers
        ) -> None:
            try:
                if index % 2:
                    stores[index % 2].create_key(name, "aes256")
                else:
                    stores[index % 2].import_key(name, bytes([index]) * 32)
                winners.append(index)
            except KeyExistsError as exc:
                assert exc.code == "key_exists"
                losers.append(index)

        assert run_threads(THREADS, create) == []
        assert len(winners) == 1 and len(losers) == THREADS - 1
        info = stores[0].get_key(name)
        assert info.latest_version == 1 and info.imported == (winners[0] % 2 == 0)
        if info.imported:
            assert stores[1].key_material(name, 1) == bytes([winners[0]]) * 32


def test_concurrent_policy_updates_lose_no_update(backing: Backing, master_key: bytes) -> None:
    """Each update reads the row and writes both policy fields: without a lock one would undo another."""
    stores = two_stores(backing, master_key)
    keys = [f"key{i}" for i in range(4)]
    for name in keys:
        stores[0].create_key(name)
        for _ in range(4):
            stores[0].rotate_key(name)

    def work(index: int) -> None:
        store, name = stores[index % 2], keys[index // 2]
        if index % 2:
            for version in (2, 3, 4, 5, 3):
                store.update_key(name, min_decryption_version=version)
        else:
            store.update_key(name, deletion_allowed=True)
            store.rotate_key(name)

    assert run_threads(THREADS, work) == []
    for name in keys:
        info = stores[1].get_key(name)
        assert info.deletion_allowed is True, name  # never overwritten by a stale False
        assert info.min_decryption_version == 3, name
        assert info.latest_version == 6, name


def test_concurrent_mixed_work_on_many_keys(store: KeyStore) -> None:
    def work(index: int) -> None:
        name = f"key{index}"
        store.create_key(name, deletion_allowed=True)
        for round_number in range(4):
            store.rotate_key(name)
            assert store.get_key(name).latest_version == round_number + 2
            assert name in {info.name for info in store.list_keys()}
        store.update_key(name, min_decryption_version=3)
        assert len(store.key_material(name, 5)) == 32

    assert run_threads(THREADS, work) == []
    keys = store.list_keys()
    assert [info.name for info in keys] == sorted(f"key{index}" for index in range(THREADS))
    assert {(info.latest_version, info.min_decryption_version) for info in keys} == {(5, 3)}

"""The keystore contract for automatic rotation: ``auto_rotate_period`` on create, import and update, which
keys are due, and ``rotate_if_due`` deciding under the store's lock so that of several rotators (threads,
workers, replicas: here two stores on one database) exactly one rotates a due key.

Runs against each implementation (see ``conftest.py``).
"""

from __future__ import annotations

import secrets
import time

import pytest

from app.errors import BadRequestError
from app.keystore import KeyInfo, KeyStore
from tests.app.keystore.contract.conftest import Backing
from tests.app.keystore.contract.test_contract_concurrency import run_threads


def wait_until_due(store: KeyStore, name: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while name not in store.due_for_rotation():
        assert time.monotonic() < deadline, f"{name} never became due"
        time.sleep(0.05)


def test_period_is_stored_shown_and_listed(store: KeyStore) -> None:
    assert store.create_key("plain").auto_rotate_period == 0
    assert store.create_key("daily", auto_rotate_period="24h").auto_rotate_period == 86_400
    imported = store.import_key("imp", secrets.token_bytes(16), auto_rotate_period=7200)
    assert imported.auto_rotate_period == 7200
    assert store.get_key("daily").auto_rotate_period == 86_400
    assert store.get_key("daily").to_json()["auto_rotate_period"] == 86_400
    assert {info.name: info.auto_rotate_period for info in store.list_keys()} == {
        "daily": 86_400,
        "imp": 7200,
        "plain": 0,
    }
    updated = store.update_key("plain", auto_rotate_period="1h30m")
    assert (updated.auto_rotate_period, updated.latest_version) == (5400, 1)
    assert store.update_key("plain", deletion_allowed=True).auto_rotate_period == 5400  # None keeps it
    assert store.update_key("plain", auto_rotate_period=0).auto_rotate_period == 0
    assert [c.kind for c in store.changes_since(0).changes][-3:] == ["key_updated"] * 3


@pytest.mark.parametrize("period", [60, 3599, "30m", -1, "soon", True, 3600.0])
def test_invalid_periods_are_refused_and_change_nothing(store: KeyStore, period: object) -> None:
    with pytest.raises(BadRequestError, match="auto_rotate_period must"):
        store.create_key("k", auto_rotate_period=period)  # type: ignore[arg-type]
    assert store.list_keys() == []
    store.create_key("k", auto_rotate_period=7200)
    seq = store.changes_since(0).latest
    with pytest.raises(BadRequestError, match="auto_rotate_period must"):
        store.update_key("k", auto_rotate_period=period, deletion_allowed=True)  # type: ignore[arg-type]
    info = store.get_key("k")
    assert (info.auto_rotate_period, info.deletion_allowed) == (7200, False)
    assert store.changes_since(0).latest == seq


def test_a_key_is_due_once_its_latest_version_is_a_period_old(backing: Backing, master_key: bytes) -> None:
    store = backing.open(master_key, auto_rotate_min_period=1)
    store.create_key("off")
    store.create_key("hourly", auto_rotate_period=3600)
    created = store.create_key("fast", auto_rotate_period=1)
    assert store.due_for_rotation() == []  # nothing is a second old yet...
    assert store.rotate_if_due("fast") is None  # ...and the store re-checks, whatever the caller thinks
    assert store.rotate_if_due("off") is None and store.rotate_if_due("missing") is None
    wait_until_due(store, "fast")
    assert store.due_for_rotation() == ["fast"]
    rotated = store.rotate_if_due("fast")
    assert rotated is not None and rotated.latest_version == 2
    assert rotated.last_rotated > created.last_rotated
    assert store.rotate_if_due("fast") is None  # the new version is not a period old
    change = store.changes_since(0).changes[-1]
    assert (change.kind, change.key_name) == ("key_rotated", "fast")  # as a manual rotation
    assert store.key_material("fast", 1) != store.key_material("fast", 2)
    # the period counts from the latest version, whoever made it: a manual rotation resets the clock
    wait_until_due(store, "fast")
    store.rotate_key("fast")
    assert store.rotate_if_due("fast") is None


def test_a_store_with_the_default_floor_refuses_short_periods(backing: Backing, master_key: bytes) -> None:
    short = backing.open(master_key, auto_rotate_min_period=1)
    short.create_key("fast", auto_rotate_period=2)
    default = backing.open(master_key)
    assert default.get_key("fast").auto_rotate_period == 2  # stored values are read as they are
    with pytest.raises(BadRequestError, match=r"at least 3600 seconds \(1h\), got 2"):
        default.create_key("other", auto_rotate_period=2)


def test_two_stores_rotating_a_due_key_at_once_rotate_it_exactly_once(
    backing: Backing, master_key: bytes
) -> None:
    stores = [backing.open(master_key, auto_rotate_min_period=1) for _ in range(2)]
    stores[0].create_key("fast", auto_rotate_period=1)
    rotators = 6  # three threads per store: two workers of two replicas, and then some
    results: list[KeyInfo | None] = []

    def rotate(index: int) -> None:
        results.append(stores[index % 2].rotate_if_due("fast"))  # list.append is atomic

    for round_number in range(1, 4):
        wait_until_due(stores[1], "fast")
        results.clear()
        assert run_threads(rotators, rotate) == []
        winners = [info for info in results if info is not None]
        assert len(winners) == 1, f"round {round_number}: {len(winners)} rotations"
        assert winners[0].latest_version == round_number + 1
    info = stores[1].get_key("fast")
    assert info.latest_version == 4 and [v.version for v in info.versions] == [1, 2, 3, 4]
    kinds = [c.kind for c in stores[0].changes_since(0).changes if c.key_name == "fast"]
    assert kinds == ["key_created", "key_rotated", "key_rotated", "key_rotated"]

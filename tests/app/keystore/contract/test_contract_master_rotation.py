"""Online rotation of the master key (:mod:`app.keystore.generations`): the same contract for SQLite and
PostgreSQL. Every version made before a rotation keeps its material, every blob ends under the new generation,
another process on the same data wraps under it from the moment it exists, one rotation runs at a time, and a
rotation abandoned half-way loses nothing and resumes.
"""

from __future__ import annotations

import time

import pytest

from app.keystore import KeyStore
from app.keystore.generations import MasterRotation, MasterRotationRunningError
from app.seal import FileSeal, blob_origin
from tests.app.keystore.contract.conftest import Backing


def fill(store: KeyStore, keys: int = 4, versions: int = 3) -> dict[tuple[str, int], bytes]:
    """``keys`` keys of ``versions`` versions each; their material by (name, version)."""
    for index in range(keys):
        name = f"key-{index}"
        store.create_key(name)
        for _ in range(versions - 1):
            store.rotate_key(name)
    return materials(store)


def materials(store: KeyStore) -> dict[tuple[str, int], bytes]:
    return {
        (key.name, version.version): bytes(store.key_material(key.name, version.version))
        for key in store.list_keys()
        for version in key.versions
    }


def generations(store: KeyStore) -> dict[tuple[str, int], int]:
    """The generation each stored blob's header names."""
    found = {}
    for export in store.export_keys():
        for version, blob in zip(export.info.versions, export.wrapped, strict=True):
            origin = blob_origin(blob)
            assert origin is not None
            found[(export.info.name, version.version)] = origin.generation
    return found


def test_a_rotation_rewraps_every_version_and_keeps_its_material(store: KeyStore) -> None:
    before = fill(store)
    assert set(generations(store).values()) == {1}
    rotation = MasterRotation(store, batch_size=2)
    started = rotation.begin()
    assert (started.generation, started.rotating, started.resumed) == (2, True, False)
    store.rotate_key("key-0")  # during the rotation: wrapped under the new generation at once
    finished = rotation.run()
    assert finished is not None and not finished.rotating and finished.finished_at is not None
    assert finished.rewrapped == len(before)
    assert set(generations(store).values()) == {2}
    after = materials(store)
    assert {place: after[place] for place in before} == before  # ciphertexts made before still decrypt
    assert store.keyring.generation == 2
    assert store.master_rotation_status() == finished

    store.create_key("later")
    second = MasterRotation(store, batch_size=1000)
    assert second.begin().generation == 3
    assert second.run() is not None
    assert set(generations(store).values()) == {3}
    assert materials(store) == after | {("later", 1): materials(store)[("later", 1)]}


def test_every_rotation_is_in_the_change_log(store: KeyStore) -> None:
    start = store.changes_since(1 << 62).latest
    rotation = MasterRotation(store)
    rotation.begin()
    rotation.run()
    changes, _, _ = store.changes_since(start)
    assert [(c.kind, c.key_name, c.token_id) for c in changes] == [("master_key_rotated", None, None)] * 2


def test_another_process_wraps_under_the_new_generation_and_opens_its_blobs(
    backing: Backing, master_key: bytes
) -> None:
    first = backing.open(master_key)
    second = backing.open(master_key)
    before = fill(first, keys=2, versions=2)
    assert materials(second) == before
    rotation = MasterRotation(first, batch_size=1)
    rotation.begin()
    second.rotate_key("key-1")  # the second store has not reloaded its keyring: its key write does
    assert generations(first)[("key-1", 3)] == 2
    rotation.run()
    fresh = backing.open(master_key)
    assert materials(fresh) == materials(first)
    assert {place: materials(second)[place] for place in before} == before


def test_one_rotation_at_a_time_and_an_abandoned_one_resumes_losing_nothing(
    backing: Backing, master_key: bytes
) -> None:
    first = backing.open(master_key)
    before = fill(first, keys=3, versions=2)
    abandoned = MasterRotation(first, batch_size=2, lease_seconds=1.0)
    abandoned.begin()
    after = first.rewrap_master_batch(abandoned.owner, None, 2, 1.0)  # one batch, then the process "dies"
    assert after is not None
    assert sorted(set(generations(first).values())) == [1, 2]  # half-way: both generations in use

    other = backing.open(master_key)
    assert materials(other) == before  # every blob readable under its own generation meanwhile
    with pytest.raises(MasterRotationRunningError, match="generation 2 is running") as refused:
        MasterRotation(other).begin()
    assert refused.value.code == "master_rotation_running"
    time.sleep(1.2)  # the dead rotation's lease runs out
    resumed = MasterRotation(other, batch_size=2)
    status = resumed.begin()
    assert (status.generation, status.resumed) == (2, True)
    with pytest.raises(MasterRotationRunningError):
        first.rewrap_master_batch(abandoned.owner, None, 2, 1.0)  # the lease is the resumer's now
    finished = resumed.run()
    assert finished is not None and not finished.rotating
    assert set(generations(other).values()) == {2}
    assert materials(other) == before


def test_a_stopped_run_leaves_the_rotation_to_resume(store: KeyStore) -> None:
    before = fill(store, keys=2, versions=2)
    rotation = MasterRotation(store, batch_size=1, lease_seconds=0.0)
    rotation.begin()
    assert rotation.run(stop=lambda: True) is None
    assert store.master_rotation_status().rotating
    again = MasterRotation(store)
    assert again.begin().resumed
    assert again.run() is not None
    assert materials(store) == before


def test_moving_to_another_seal_after_rotations_forgets_the_generations(store: KeyStore) -> None:
    before = fill(store, keys=2, versions=2)
    for _ in range(2):
        rotation = MasterRotation(store)
        rotation.begin()
        rotation.run()
    target = FileSeal(bytes(range(32)))
    audit = store.audit_key_material()
    store.reseal(target, audit if audit is not None else bytes(64))
    assert set(generations(store).values()) == {1}
    assert materials(store) == before
    assert store.master_rotation_status().generation == 1
    rotation = MasterRotation(store)
    assert rotation.begin().generation == 2


def test_resume_takes_over_only_an_unfinished_rotation_and_never_starts_one(store: KeyStore) -> None:
    before = fill(store, keys=2, versions=2)
    assert MasterRotation(store).resume() is None  # nothing to resume: nothing is written
    status = store.master_rotation_status()
    assert (status.generation, status.rotating) == (1, False)
    abandoned = MasterRotation(store, batch_size=1, lease_seconds=0.0)
    abandoned.begin()
    assert abandoned.run(stop=lambda: True) is None  # stopped half-way, its lease already over
    taker = MasterRotation(store, batch_size=10)
    resumed = taker.resume()
    assert resumed is not None and (resumed.generation, resumed.resumed) == (2, True)
    finished = taker.run()
    assert finished is not None and not finished.rotating
    assert MasterRotation(store).resume() is None  # finished: still no new generation
    assert store.master_rotation_status().generation == 2
    assert materials(store) == before


def test_resume_refuses_while_a_live_rotation_holds_the_lease(store: KeyStore) -> None:
    fill(store, keys=1, versions=2)
    MasterRotation(store, batch_size=1, lease_seconds=30.0).begin()
    with pytest.raises(MasterRotationRunningError):
        MasterRotation(store).resume()

"""The audit keys live in locked memory, zeroed once dropped: derived from a file seal's master key, or
opened from a keystore that stores them (here under a shamir seal); the chain's HMAC reads them in place."""

from __future__ import annotations

import gc
import hashlib
import hmac
import os
from pathlib import Path

from app.audit import audit_keys_for, derive_audit_keys
from app.audit.chain import LineMac
from app.core.secret_memory import SLOT_SIZE, SecretBuffer
from app.keystore import open_keystore
from app.seal import FileSeal
from app.seal.shamir import ShamirSeal, new_master_key
from app.seal.shares import split_master_key


def slot_of(view: memoryview) -> memoryview:
    """The chunk memory under a secret's view, which does not keep the secret alive."""
    owner = view.obj
    assert isinstance(owner, SecretBuffer)
    start = owner._slot * SLOT_SIZE
    return memoryview(owner._chunk.memory)[start : start + len(view)]


def test_derived_audit_keys_are_zeroed_when_dropped() -> None:
    keys = audit_keys_for(FileSeal(os.urandom(32)))
    assert len(keys.material) == 64 and keys.material.readonly
    expected = bytes(keys.material)
    slot = slot_of(keys.material)
    assert bytes(slot) == expected
    assert keys.hash_key == expected[:32] and keys.chain_key == expected[32:]
    del keys
    gc.collect()
    assert bytes(slot) == bytes(64)
    assert isinstance(derive_audit_keys(bytes(range(32))).material.obj, SecretBuffer)


def test_stored_audit_keys_are_unwrapped_into_locked_memory(tmp_path: Path) -> None:
    master_key = new_master_key()
    parameters, _ = split_master_key(master_key, 1, 1)
    seal = ShamirSeal(master_key, parameters, initialising=True)
    store = open_keystore(tmp_path, seal)
    try:
        stored = store.audit_key_material()
        assert stored is not None and isinstance(stored.obj, SecretBuffer)
        keys = audit_keys_for(seal, stored)
        assert keys.material == stored and isinstance(keys.material.obj, SecretBuffer)
        assert keys.hash(b"x") == "hmac-sha256:" + hmac.new(bytes(stored[:32]), b"x", "sha256").hexdigest()
    finally:
        store.close()
        seal.close()


def test_the_chain_mac_takes_its_key_from_locked_memory() -> None:
    """A writer's HMAC set-up reads the chain key in place (a view of locked memory): HMAC-SHA256."""
    keys = derive_audit_keys(os.urandom(32))
    mac = LineMac(keys.chain_key)
    expected = hmac.new(bytes(keys.chain_key), b"line", hashlib.sha256).hexdigest()
    assert mac.hexdigest(b"line") == expected

"""Secret buffers: locked, out of core dumps, zeroed when dropped or wiped; a refused mlock falls back."""

from __future__ import annotations

import gc
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from app.core import secret_memory
from app.core.secret_memory import SLOT_SIZE, secret_buffer, secret_copy

REPO = Path(__file__).resolve().parents[3]


def _slot_bytes(buffer: secret_memory.SecretBuffer) -> memoryview:
    """A view of the buffer's slot that does not keep the buffer alive (it is the chunk's own memory)."""
    start = buffer._slot * SLOT_SIZE
    return memoryview(buffer._chunk.memory)[start : start + len(buffer.view())]


def _vm_flags(address: int) -> set[str]:
    """The ``VmFlags`` of the mapping of this process that holds ``address`` (``/proc/self/smaps``)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and all(c in "0123456789abcdef-" for c in head):
            low, high = (int(part, 16) for part in head.split("-"))
            inside = low <= address < high
        elif inside and line.startswith("VmFlags:"):
            return set(line.split()[1:])
    raise AssertionError(f"no mapping holds {address:#x}")


def _address(buffer: secret_memory.SecretBuffer) -> int:
    import ctypes

    return ctypes.addressof(buffer)  # type: ignore[arg-type]


def test_a_secret_lives_in_locked_memory_left_out_of_core_dumps() -> None:
    buffer = secret_copy(os.urandom(32))
    flags = _vm_flags(_address(buffer))
    assert "dd" in flags  # MADV_DONTDUMP: gcore and kernel core dumps skip it
    assert "lo" in flags  # mlock: never swapped out
    assert secret_memory.memory_locked()


def test_dropping_the_last_reference_zeroes_the_secret() -> None:
    secret = os.urandom(32)
    buffer = secret_copy(secret)
    raw = _slot_bytes(buffer)
    assert bytes(raw) == secret
    view = buffer.readonly()
    del buffer
    gc.collect()
    assert bytes(raw) == secret  # a view keeps the secret (and its slot) alive
    del view
    assert bytes(raw) == bytes(32)


def test_wipe_zeroes_at_once_and_the_slot_is_not_reused_while_a_view_remains() -> None:
    buffer = secret_copy(os.urandom(32))
    view = buffer.readonly()
    slot = (buffer._chunk, buffer._slot)
    buffer.wipe()
    assert bytes(view) == bytes(32)
    del buffer
    others = [secret_buffer(32) for _ in range(300)]  # more than a chunk's slots
    assert slot not in {(other._chunk, other._slot) for other in others}
    del view, others


def test_a_secret_shows_no_bytes_and_cannot_be_pickled() -> None:
    buffer = secret_copy(b"\x01" * 16)
    assert repr(buffer) == "<SecretBuffer 16 bytes>"
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(buffer)
    view = buffer.readonly()
    assert view.readonly and len(view) == 16
    with pytest.raises(TypeError):
        view[0] = 0


@pytest.mark.parametrize("length", [0, SLOT_SIZE + 1])
def test_lengths_outside_a_slot_are_refused(length: int) -> None:
    with pytest.raises(ValueError, match=f"1 to {SLOT_SIZE} bytes, got {length}"):
        secret_buffer(length)


_UNLOCKED_CHILD = """
import json, logging, os, resource
resource.setrlimit(resource.RLIMIT_MEMLOCK, (0, 0))
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
from app.core import metrics, secret_memory
buffers = [secret_memory.secret_copy(os.urandom(32)) for _ in range(2000)]  # several chunks
import ctypes
address = ctypes.addressof(buffers[0])
flags = set()
inside = False
for line in open("/proc/self/smaps"):
    head = line.split()[0]
    if "-" in head and all(c in "0123456789abcdef-" for c in head):
        low, high = (int(part, 16) for part in head.split("-"))
        inside = low <= address < high
    elif inside and line.startswith("VmFlags:"):
        flags = set(line.split()[1:])
print(json.dumps({
    "locked": secret_memory.memory_locked(),
    "unlocked_bytes": metrics.SECRET_MEMORY_UNLOCKED._value.get(),
    "flags": sorted(flags),
    "roundtrip": all(len(bytes(b.view())) == 32 for b in buffers),
}))
"""


def test_a_refused_mlock_falls_back_with_one_warning_and_a_metric() -> None:
    # As root, CAP_IPC_LOCK ignores RLIMIT_MEMLOCK: the child runs without it (setpriv), with a zero limit.
    command = [sys.executable, "-c", _UNLOCKED_CHILD]
    if os.geteuid() == 0:
        command = ["setpriv", "--bounding-set", "-ipc_lock", *command]
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=True)
    facts = json.loads(done.stdout)
    assert facts["locked"] is False
    assert facts["unlocked_bytes"] >= 2000 * SLOT_SIZE
    assert "dd" in facts["flags"] and "lo" not in facts["flags"]
    assert facts["roundtrip"]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, done.stderr
    assert "cannot lock memory for key material" in warnings[0]

"""Fixtures shared by the aescore suite: every backend runs the same tests.

``backend`` is parametrised over every backend aescore knows (``aesni``, ``python``, ``hwsim``...), with the
backend's name as the test id. A backend that cannot run here is skipped with the reason aescore gives.
``gcm_backend`` is the same list with ``aesni`` split into one forced-path instance per ISA path
(``aesni-vaes512``, ``aesni-vaes256``, ``aesni-aesni``), so the AES-GCM suite runs every path.

Property tests take their hypothesis budget from ``property_settings``: the pure-Python and simulated
backends are much slower than AES-NI, so they run fewer examples (the same strategies, though).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

import pytest
from Crypto.Cipher import AES
from hypothesis import HealthCheck, settings

import aescore

#: Backends always listed, so a missing one shows up as skipped (with its reason), not silently absent.
EXPECTED_BACKENDS = ("aesni", "hwsim", "python")
#: Fraction of the hypothesis budget each backend gets (others: SLOW_BACKEND_SCALE).
BUDGET_SCALE = {"aesni": 1.0, "python": 0.5}
SLOW_BACKEND_SCALE = 0.1

PropertySettings = Callable[[int], settings]


def _backend_names() -> list[str]:
    return sorted(set(EXPECTED_BACKENDS) | set(aescore.available_backends()))


@pytest.fixture(scope="session", params=_backend_names())
def backend(request: pytest.FixtureRequest) -> aescore.Backend:
    """Each aescore backend in turn; skipped (with aescore's reason) where it cannot run."""
    name: str = request.param
    reason = aescore.available_backends().get(name, "not registered (its package is not installed)")
    if reason is not None:
        pytest.skip(f"backend {name!r} unavailable: {reason}")
    return aescore.get_backend(name)


def _settings_maker(backend_name: str) -> PropertySettings:
    scale = BUDGET_SCALE.get(backend_name, SLOW_BACKEND_SCALE)

    def make(examples: int) -> settings:
        return settings(
            max_examples=max(5, int(examples * scale)),
            deadline=None,  # a 2-core machine shared with other jobs: timings are not stable enough
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )

    return make


@pytest.fixture(scope="session")
def property_settings(backend: aescore.Backend) -> PropertySettings:
    """``property_settings(n)``: hypothesis settings running about ``n`` examples, scaled for the backend."""
    return _settings_maker(backend.name)


def _gcm_variants() -> list[str]:
    names: list[str] = []
    for name in _backend_names():
        names.extend([f"aesni-{isa}" for isa in AESNI_PATHS] if name == "aesni" else [name])
    return names


#: The aesni backend's ISA paths, fastest first (aescore.ctr._aesni.ISA_NAMES; listed here so a missing
#: extension still shows each path as skipped).
AESNI_PATHS = ("vaes512", "vaes256", "aesni")


@pytest.fixture(scope="session", params=_gcm_variants())
def gcm_backend(request: pytest.FixtureRequest) -> aescore.Backend:
    """Each backend in turn, ``aesni`` once per ISA path (forced, one thread); skipped where it cannot run."""
    name: str = request.param
    base = name.split("-", 1)[0]
    reason = aescore.available_backends().get(base, "not registered (its package is not installed)")
    if reason is not None:
        pytest.skip(f"backend {base!r} unavailable: {reason}")
    if base != "aesni":
        return aescore.get_backend(name)
    from aescore.ctr import _aesni

    isa = name.split("-", 1)[1]
    if isa not in _aesni.supported_isas():
        pytest.skip(f"CPU lacks {isa} (supported here: {', '.join(_aesni.supported_isas())})")
    if _aesni.gcm_isa(isa) != isa:
        pytest.skip(f"CPU lacks the carry-less multiply for GCM on {isa}")
    return _aesni.AesniBackend(isa=isa, threads=1)


@pytest.fixture(scope="session")
def gcm_property_settings(gcm_backend: aescore.Backend) -> PropertySettings:
    """``property_settings`` for ``gcm_backend``."""
    return _settings_maker(gcm_backend.name)


ReferenceCtr = Callable[[bytes, int, bytes, int], bytes]


def _reference_ctr(key: bytes, initial_counter: int, data: bytes, offset: int = 0) -> bytes:
    block, skip = divmod(offset, 16)
    cipher = AES.new(key, AES.MODE_CTR, nonce=b"", initial_value=(initial_counter + block) % (1 << 128))
    return cipher.encrypt(bytes(skip) + data)[skip:]


@pytest.fixture(scope="session")
def reference_ctr() -> ReferenceCtr:
    """``reference_ctr(key, initial_counter_int, data, offset)``: pycryptodome's AES-CTR with a full 128-bit
    counter (wrapping mod 2**128), from keystream byte ``offset``."""
    return _reference_ctr


def _tick_until(stop: threading.Event, ticks: list[float]) -> None:
    while not stop.is_set():
        ticks.append(time.perf_counter())
        time.sleep(0)  # hand the GIL back at once whenever the main thread wants it


def ticks_during(call: Callable[[], object]) -> int:
    """How often a helper thread ran Python code while ``call()`` executed.

    The switch interval is set far beyond the test's length, so the main thread never gives the GIL up at a
    bytecode boundary: the helper can only run while ``call`` itself has released the GIL.
    """
    stop = threading.Event()
    ticks: list[float] = []
    helper = threading.Thread(target=_tick_until, args=(stop, ticks))
    previous_interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    try:
        helper.start()
        time.sleep(0.005)  # let the helper start spinning
        before = len(ticks)
        call()
        return len(ticks) - before
    finally:
        stop.set()
        helper.join()
        sys.setswitchinterval(previous_interval)

"""Fixtures shared by the aescore suite: every backend runs the same tests.

``backend`` is parametrised over every backend aescore knows (``aesni``, ``python``, ``hwsim``...), with the
backend's name as the test id. A backend that cannot run here is skipped with the reason aescore gives.

Property tests take their hypothesis budget from ``property_settings``: the pure-Python and simulated
backends are much slower than AES-NI, so they run fewer examples (the same strategies, though).
"""

from __future__ import annotations

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


@pytest.fixture(scope="session")
def property_settings(backend: aescore.Backend) -> PropertySettings:
    """``property_settings(n)``: hypothesis settings running about ``n`` examples, scaled for the backend."""
    scale = BUDGET_SCALE.get(backend.name, SLOW_BACKEND_SCALE)

    def make(examples: int) -> settings:
        return settings(
            max_examples=max(5, int(examples * scale)),
            deadline=None,  # a 2-core machine shared with other jobs: timings are not stable enough
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        )

    return make


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

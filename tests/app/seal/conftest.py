"""A fresh SoftHSM2 token per test (:mod:`tests.softhsm`), with ``SOFTHSM2_CONF`` set for this process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.softhsm import SoftHsmToken, make_token, reload_module


@pytest.fixture
def token(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> SoftHsmToken:
    """An initialised, empty token; fails (never skips) when SoftHSM2 is missing."""
    made = make_token(tmp_path / "hsm")
    monkeypatch.setenv("SOFTHSM2_CONF", str(made.conf))
    reload_module()
    return made

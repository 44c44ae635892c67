"""Where whole sealed messages are sealed and opened (:mod:`app.services.sealing`): the one policy for the
streaming routes' small bodies, the batch routes and data keys."""

from __future__ import annotations

import pytest

import aescore
from app.core.config import Settings
from app.formats.sealed import native_isa
from app.services.sealing import PYTHON_INLINE_MAX_BYTES, PYTHON_INLINE_MAX_ITEMS, _inline_max

PYTHON = aescore.get_backend("python")


class InlinePython(type(PYTHON)):  # type: ignore[misc]
    """The python backend claiming to be cheap enough for the event loop, without a native sealer."""

    name = "inline-python"
    runs_inline = True


SETTINGS = Settings(_env_file=None, inline_crypto_max_bytes=1000)  # type: ignore[call-arg]


def test_one_small_body_runs_inline_up_to_the_settings_limit() -> None:
    assert _inline_max(SETTINGS, InlinePython(), "ctr-hmac", 1, whole=True) == 1000
    assert _inline_max(SETTINGS, InlinePython(), "gcm", 1, whole=True) == 1000


def test_without_a_native_sealer_only_a_handful_of_small_messages_stay_on_the_loop() -> None:
    few, many = PYTHON_INLINE_MAX_ITEMS, PYTHON_INLINE_MAX_ITEMS + 1
    assert _inline_max(SETTINGS, InlinePython(), "ctr-hmac", few, whole=False) == PYTHON_INLINE_MAX_BYTES
    assert _inline_max(SETTINGS, InlinePython(), "ctr-hmac", many, whole=False) == -1
    assert _inline_max(SETTINGS, InlinePython(), "ctr-hmac", 1, whole=False) == PYTHON_INLINE_MAX_BYTES


def test_a_native_sealer_runs_batches_inline_up_to_the_settings_limit() -> None:
    if aescore.available_backends().get("aesni") is not None:
        pytest.skip("no AES-NI on this CPU: no native sealer to ask about")
    aesni = aescore.get_backend("aesni")
    if native_isa(aesni, "ctr-hmac") is None:
        pytest.skip("the aesni backend offers no native sealer here")
    assert _inline_max(SETTINGS, aesni, "ctr-hmac", 100, whole=False) == 1000

"""GET /v1/backends and the per-backend paths (python via process pool, hwsim via ctr_xor_async)."""

from __future__ import annotations

import asyncio
import os

import pytest

import aescore
from tests.app.api.conftest import Api

HWSIM_REASON = aescore.available_backends().get("hwsim", "not registered")


async def test_backends_listing(api: Api) -> None:
    response = await api.client.get("/v1/backends", headers=api.auth())
    assert response.status_code == 200
    body = response.json()
    names = [entry["name"] for entry in body["backends"]]
    assert names == ["aesni", "python", "hwsim"]
    for entry in body["backends"]:
        assert set(entry) >= {"name", "enabled", "available", "default", "reason", "isa", "preset"}
        assert entry["available"] == (entry["reason"] is None)
    python = next(e for e in body["backends"] if e["name"] == "python")
    assert python["available"] and python["constant_time"] is False
    assert python["info"]["execution"] == "process_pool"
    aesni = next(e for e in body["backends"] if e["name"] == "aesni")
    if aesni["available"]:
        assert aesni["isa"] in ("vaes512", "vaes256", "aesni")
        assert body["default"] == "aesni"


@pytest.mark.skipif(HWSIM_REASON is not None, reason=f"hwsim unavailable: {HWSIM_REASON}")
async def test_hwsim_round_trips_and_exports_device_metrics(api: Api) -> None:
    await api.create_key("h", segment_size=4096)
    plaintext = os.urandom(20_000)
    raw = await api.encrypt("h", plaintext, format="raw", backend="hwsim", iv="22" * 16)
    assert raw.status_code == 200, raw.text
    reference = await api.encrypt("h", plaintext, format="raw", backend="python", iv="22" * 16)
    assert raw.content == reference.content
    sealed = await api.encrypt("h", plaintext, backend="hwsim")
    assert (await api.decrypt("h", sealed.content, backend="hwsim")).content == plaintext
    listing = (await api.client.get("/v1/backends", headers=api.auth())).json()
    hwsim = next(e for e in listing["backends"] if e["name"] == "hwsim")
    assert hwsim["available"] and hwsim["preset"]
    metrics = (await api.client.get("/metrics")).text
    assert "keystream_hwsim_jobs_submitted_total" in metrics
    assert 'keystream_crypto_bytes_total{backend="hwsim",operation="encrypt"}' in metrics


async def test_readyz_reports_the_keystore_and_the_change_log_lag(api: Api) -> None:
    await api.create_key("k")
    for _ in range(200):  # the change is applied within a poll interval (at once on the data_version hint)
        body = (await api.client.get("/readyz")).json()
        if body["change_log"]["behind"] == 0:
            break
        await asyncio.sleep(0.01)
    assert body["keystore"] == "up" and body["status"] == "ready"
    log = body["change_log"]
    assert log["behind"] == 0 and log["applied"] >= 1 and log["last_read_ms"] >= 0
    assert "data" not in str(body) and "ks_" not in str(body)  # no path, no token

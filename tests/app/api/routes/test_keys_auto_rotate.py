"""``auto_rotate_period`` through the API: set on create, import and PATCH, shown by GET and list, refused
with 400 naming what is allowed; a due key rotates by itself, counted by
``keystream_key_auto_rotations_total``.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections.abc import Callable

import pytest

from app.core.config import Settings
from tests.app.api.conftest import Api, running_api


def auto_rotations(metrics_text: str) -> float:
    found = re.search(r"^keystream_key_auto_rotations_total ([0-9.e+]+)$", metrics_text, re.M)
    assert found is not None, "the counter is not exported"
    return float(found.group(1))


async def test_period_on_create_get_list_and_patch(api: Api) -> None:
    created = await api.create_key("daily", auto_rotate_period="24h")
    assert created["auto_rotate_period"] == 86_400
    assert (await api.create_key("plain"))["auto_rotate_period"] == 0
    assert (await api.create_key("secs", auto_rotate_period=7200))["auto_rotate_period"] == 7200
    shown = await api.client.get("/v1/keys/daily", headers=api.auth())
    assert shown.json()["auto_rotate_period"] == 86_400
    listed = (await api.client.get("/v1/keys", headers=api.auth())).json()["keys"]
    assert {key["name"]: key["auto_rotate_period"] for key in listed} == {
        "daily": 86_400,
        "plain": 0,
        "secs": 7200,
    }
    patched = await api.client.patch(
        "/v1/keys/plain", json={"auto_rotate_period": "1h30m"}, headers=api.auth()
    )
    assert patched.status_code == 200, patched.text
    assert (patched.json()["auto_rotate_period"], patched.json()["latest_version"]) == (5400, 1)
    off = await api.client.patch("/v1/keys/daily", json={"auto_rotate_period": 0}, headers=api.auth())
    assert off.json()["auto_rotate_period"] == 0


@pytest.mark.parametrize(
    ("period", "message"),
    [
        (60, "auto_rotate_period must be 0 (off) or at least 3600 seconds (1h), got 60"),
        ("30m", "auto_rotate_period must be 0 (off) or at least 3600 seconds (1h), got 1800"),
        (-3600, "auto_rotate_period must be 0 (off) or positive, got -3600"),
        ("weekly", "auto_rotate_period must be seconds (an integer) or a duration such as 24h"),
        (10**12, "auto_rotate_period must be at most 315360000 seconds (10 years)"),
        ("1d1d", "each unit at most once and in that order, no spaces), got '1d1d'"),
        ("1h1h1h", "each unit at most once and in that order, no spaces), got '1h1h1h'"),
        (" 1h", "each unit at most once and in that order, no spaces), got ' 1h'"),
        ("1h ", "each unit at most once and in that order, no spaces), got '1h '"),
    ],
)
async def test_invalid_periods_get_400_with_a_clear_message(api: Api, period: object, message: str) -> None:
    refused = await api.client.post(
        "/v1/keys", json={"name": "k", "auto_rotate_period": period}, headers=api.auth()
    )
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "bad_request"
    assert message in refused.json()["error"]["message"]
    assert (await api.client.get("/v1/keys/k", headers=api.auth())).status_code == 404
    await api.create_key("k", auto_rotate_period=7200)
    patched = await api.client.patch(
        "/v1/keys/k", json={"auto_rotate_period": period, "deletion_allowed": True}, headers=api.auth()
    )
    assert patched.status_code == 400 and message in patched.json()["error"]["message"]
    after = (await api.client.get("/v1/keys/k", headers=api.auth())).json()
    assert (after["auto_rotate_period"], after["deletion_allowed"]) == (7200, False)


async def test_a_period_of_another_json_type_is_a_validation_error(api: Api) -> None:
    for wrong in (True, 3600.5, [3600], None):
        response = await api.client.post(
            "/v1/keys", json={"name": "k", "auto_rotate_period": wrong}, headers=api.auth()
        )
        assert response.status_code in (400, 422), (wrong, response.text)
    # null on PATCH means "leave it as it is", like the other fields
    await api.create_key("k", auto_rotate_period=7200)
    same = await api.client.patch("/v1/keys/k", json={"auto_rotate_period": None}, headers=api.auth())
    assert same.status_code == 200 and same.json()["auto_rotate_period"] == 7200


async def test_import_takes_a_period(settings_factory: Callable[..., Settings]) -> None:
    async with running_api(settings_factory(allow_key_import=True)) as api:
        body = {"key": base64.b64encode(bytes(16)).decode(), "auto_rotate_period": "7d"}
        imported = await api.client.post("/v1/keys/imp/import", json=body, headers=api.auth())
        assert imported.status_code == 201, imported.text
        assert imported.json()["auto_rotate_period"] == 604_800


async def test_a_due_key_rotates_by_itself_and_is_counted(settings_factory: Callable[..., Settings]) -> None:
    settings = settings_factory(auto_rotate_min_period=1, auto_rotate_check_interval=0.1)
    async with running_api(settings) as api:
        before = auto_rotations((await api.client.get("/metrics")).text)
        await api.create_key("fast", auto_rotate_period=1, segment_size=4096)
        await api.create_key("still", auto_rotate_period=3600)
        first = await api.encrypt("fast", b"before the rotation")
        assert first.headers["keystream-key-version"] == "1"
        deadline = time.monotonic() + 10
        while (await api.client.get("/v1/keys/fast", headers=api.auth())).json()["latest_version"] < 2:
            assert time.monotonic() < deadline, "the key did not rotate"
            await asyncio.sleep(0.05)
        assert auto_rotations((await api.client.get("/metrics")).text) >= before + 1
        second = await api.encrypt("fast", b"after the rotation")
        assert int(second.headers["keystream-key-version"]) >= 2  # the new version encrypts at once
        opened = await api.decrypt("fast", first.content)
        assert opened.status_code == 200 and opened.content == b"before the rotation"
        assert (await api.client.get("/v1/keys/still", headers=api.auth())).json()["latest_version"] == 1

"""``GET /v1/audit/status``: whether the audit log is on and each worker's chain head, for admins only."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from app.core.config import Settings
from tests.app.api.conftest import running_api


async def test_off_says_so(settings_factory: Callable[..., Settings]) -> None:
    async with running_api(settings_factory()) as api:
        response = await api.client.get("/v1/audit/status", headers=api.auth())
    assert response.status_code == 200, response.text
    assert response.json() == {"enabled": False, "destination": None, "heads": []}


async def test_a_file_log_gives_the_head_of_its_last_line(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    """The head is the last recorded line's (``<chain>:<seq + 1>:<hmac>``, as ``audit verify`` prints it),
    read before this request's own record is written."""
    path = tmp_path / "audit.log"
    async with running_api(settings_factory(audit_log=str(path))) as api:
        await api.create_key("k")
        response = await api.client.get("/v1/audit/status", headers=api.auth())
        last = json.loads(path.read_text().splitlines()[-2])  # the line before this request's
    assert response.status_code == 200, response.text
    assert response.json() == {
        "enabled": True,
        "destination": "file",
        "heads": [{"file": "audit.log", "head": f"{last['chain']}:{last['seq'] + 1}:{last['hmac']}"}],
    }


async def test_each_worker_file_that_exists_has_its_head(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    """With two workers, worker 0 (this app) has written; worker 1's file does not exist yet and is left out;
    an empty file has no head yet."""
    path = tmp_path / "audit.log"
    async with running_api(settings_factory(audit_log=str(path), workers=2, worker_index=0)) as api:
        await api.create_key("k")
        body = (await api.client.get("/v1/audit/status", headers=api.auth())).json()
        assert [head["file"] for head in body["heads"]] == ["audit.log.w0"]
        assert body["heads"][0]["head"] is not None
        (tmp_path / "audit.log.w1").write_text("")
        body = (await api.client.get("/v1/audit/status", headers=api.auth())).json()
    assert body["heads"][1] == {"file": "audit.log.w1", "head": None}


async def test_stdout_gives_this_workers_head(settings_factory: Callable[..., Settings]) -> None:
    async with running_api(settings_factory(audit_log="-")) as api:
        first = (await api.client.get("/v1/audit/status", headers=api.auth())).json()
        second = (await api.client.get("/v1/audit/status", headers=api.auth())).json()
    assert first["destination"] == "stdout"
    chain, records, _ = second["heads"][0]["head"].split(":")
    assert second["heads"][0]["file"] is None and int(records) >= 1
    assert first["heads"][0]["head"] is None or first["heads"][0]["head"].split(":")[0] == chain


async def test_only_an_admin_may_see_it(settings_factory: Callable[..., Settings], tmp_path: Path) -> None:
    async with running_api(settings_factory(audit_log=str(tmp_path / "audit.log"))) as api:
        token = await api.create_token(["encrypt", "decrypt", "rewrap"])
        refused = await api.client.get("/v1/audit/status", headers=api.auth(token))
        anonymous = await api.client.get("/v1/audit/status")
    assert refused.status_code == 403 and refused.json()["error"]["code"] == "forbidden"
    assert anonymous.status_code == 401

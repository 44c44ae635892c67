"""The audit hook in process: a response whose record cannot be written is never released, a stream whose
last record cannot be written is aborted, and no audit log means no records and no request-id header."""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from app.api.streaming import StreamAbortedError
from app.audit import AuditUnavailableError
from app.core.config import Settings
from app.core.token_format import parse_token
from tests.app.api.conftest import ROOT_TOKEN, running_api


def _fail(log: Any, kind: str) -> Callable[[Mapping[str, Any]], None]:
    """Make the log refuse lines of type ``kind`` (``request``, ``stream`` or ``response``); returns the
    original ``write``."""
    write = log.write

    def refusing(record: Mapping[str, Any]) -> None:
        if record["type"] == kind:
            raise AuditUnavailableError("the audit log cannot be written (test)")
        write(record)

    log.write = refusing
    return write


async def test_a_response_is_not_released_without_its_record(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    path = tmp_path / "audit.log"
    async with running_api(settings_factory(audit_log=str(path))) as api:
        await api.create_key("k")
        _fail(api.app.state.keystream.audit, "response")
        plaintext = b"secret plaintext" * 8
        response = await api.encrypt("k", plaintext)
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "audit_unavailable"
        assert response.headers["Retry-After"] == "5"
        assert "keystream-key-version" not in response.headers  # the held success head was dropped
        assert len(response.content) < 200
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert all("encrypt" not in str(line.get("path")) + str(line.get("route")) for line in lines)


async def test_transit_computations_get_one_held_line_and_key_changes_two(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    """As the native routes: a Transit encrypt's answer is held for its one response line (refused in
    Vault's shape when it cannot be written); creating a key writes its request line first."""
    path = tmp_path / "audit.log"
    vault = {"X-Vault-Token": ROOT_TOKEN}
    async with running_api(settings_factory(audit_log=str(path))) as api:
        created = await api.client.post("/v1/transit/keys/t", json={}, headers=vault)
        assert created.status_code == 200
        plaintext = base64.b64encode(b"x").decode()
        made = await api.client.post("/v1/transit/encrypt/t", json={"plaintext": plaintext}, headers=vault)
        assert made.status_code == 200
        _fail(api.app.state.keystream.audit, "response")
        refused = await api.client.post("/v1/transit/encrypt/t", json={"plaintext": plaintext}, headers=vault)
        assert refused.status_code == 503 and list(refused.json()) == ["errors"]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    kinds = [(line["type"], line.get("route") or line.get("path")) for line in lines]  # a request line: path
    assert kinds == [
        ("request", "/v1/transit/keys/t"),
        ("response", "/v1/transit/keys/{name}"),
        ("response", "/v1/transit/encrypt/{name}"),
    ]
    # The token came as X-Vault-Token: every line names its id (never the secret), as for a bearer token.
    token_id = parse_token(ROOT_TOKEN)
    assert token_id is not None
    assert {line["token_id"] for line in lines} == {token_id[0]}
    assert ROOT_TOKEN not in path.read_text()


async def test_a_state_change_does_not_run_without_its_request_line(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    async with running_api(settings_factory(audit_log=str(tmp_path / "audit.log"))) as api:
        log = api.app.state.keystream.audit
        write = _fail(log, "request")
        refused = await api.client.post("/v1/keys", json={"name": "never"}, headers=api.auth())
        assert refused.status_code == 503
        log.write = write
        missing = await api.client.get("/v1/keys/never", headers=api.auth())
        assert missing.status_code == 404  # the route never ran


async def test_a_stream_is_not_started_without_its_stream_line(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    async with running_api(settings_factory(audit_log=str(tmp_path / "audit.log"))) as api:
        await api.create_key("k", segment_size=4096)
        _fail(api.app.state.keystream.audit, "stream")
        refused = await api.encrypt("k", os.urandom(200 * 1024))
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "audit_unavailable"


async def test_a_stream_whose_last_record_fails_is_aborted(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    async with running_api(settings_factory(audit_log=str(tmp_path / "audit.log"))) as api:
        await api.create_key("k", segment_size=4096)
        _fail(api.app.state.keystream.audit, "response")
        # The app fails after the start (the server then drops the connection: no clean end).
        with pytest.raises(StreamAbortedError, match="audit_unavailable"):
            await api.encrypt("k", os.urandom(200 * 1024))


async def test_without_an_audit_log_nothing_is_recorded(settings_factory: Callable[..., Settings]) -> None:
    async with running_api(settings_factory()) as api:
        await api.create_key("k")
        response = await api.encrypt("k", b"x")
        assert response.status_code == 200
        assert "keystream-request-id" not in response.headers
        assert api.app.state.keystream.audit is None


def test_record_times_are_utc_with_microseconds() -> None:
    from datetime import UTC, datetime

    from app.api.middleware.audit import _now

    before = datetime.now(UTC)
    stamp = _now()
    parsed = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    assert abs((parsed - before).total_seconds()) < 1
    assert len(stamp) == len("2026-11-26T08:43:19.221506Z")


async def test_rewrap_records_say_what_was_sealed_and_under_which_version(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    path = tmp_path / "audit.log"
    async with running_api(settings_factory(audit_log=str(path))) as api:
        await api.create_key("k", scheme="gcm")
        ad_header = {"Keystream-Associated-Data": "dG9rZW4="}
        sealed = (await api.encrypt("k", b"payload", headers=ad_header)).content
        await api.client.post("/v1/keys/k/rotate", headers=api.auth())
        stream = await api.client.post(
            "/v1/keys/k/rewrap", content=sealed, headers={**api.auth(), **ad_header}
        )
        assert stream.status_code == 200
        item = {"ciphertext": base64.b64encode(sealed).decode(), "associated_data": "dG9rZW4="}
        batch = await api.client.post("/v1/keys/k/rewrap/batch", json={"items": [item]}, headers=api.auth())
        assert batch.status_code == 200, batch.text
        assert batch.json()["results"][0].get("key_version") == 2, batch.text
        expected_ad = api.app.state.keystream.audit_keys.hash(b"token")
    records = {
        line["route"]: line
        for line in map(json.loads, path.read_text().splitlines())
        if line["type"] == "response" and "rewrap" in str(line["route"])
    }
    streamed = records["/v1/keys/{name}/rewrap"]
    assert (streamed["key_name"], streamed["key_version"], streamed["format"]) == ("k", 2, "sealed")
    assert (streamed["scheme"], streamed["associated_data"]) == ("gcm", expected_ad)
    assert streamed["backend"] and streamed["outcome"] == "completed"
    batched = records["/v1/keys/{name}/rewrap/batch"]
    assert (batched["key_version"], batched["scheme"], batched["format"]) == (2, "gcm", "sealed")
    assert b"payload" not in path.read_bytes()


async def test_readyz_is_503_while_the_log_cannot_be_written(
    settings_factory: Callable[..., Settings], tmp_path: Path
) -> None:
    """A load balancer must stop sending requests that would all get 503 ``audit_unavailable``."""
    directory = tmp_path / "logs"
    directory.mkdir()
    async with running_api(settings_factory(audit_log=str(directory / "audit.log"))) as api:
        assert (await api.client.get("/readyz")).status_code == 200
        (directory / "audit.log").unlink()
        directory.rmdir()
        not_ready = await api.client.get("/readyz")
        assert not_ready.status_code == 503
        assert not_ready.json()["error"]["code"] == "audit_unavailable"
        assert str(directory) not in not_ready.text  # no path in an unauthenticated answer
        directory.mkdir()
        assert (await api.client.get("/readyz")).status_code == 200
        assert (await api.client.get("/v1/keys", headers=api.auth())).status_code == 200


async def test_readyz_is_503_after_a_write_to_a_device_failed(
    settings_factory: Callable[..., Settings],
) -> None:
    """A device or pipe cannot be probed without writing: its last write decides."""
    async with running_api(settings_factory(audit_log="/dev/full")) as api:
        assert (await api.client.get("/readyz")).status_code == 200  # nothing written yet
        assert (await api.client.get("/v1/keys", headers=api.auth())).status_code == 503
        not_ready = await api.client.get("/readyz")
        assert not_ready.status_code == 503
        assert not_ready.json()["error"]["code"] == "audit_unavailable"
        assert "cannot be written (No space left on device)" in not_ready.json()["error"]["message"]

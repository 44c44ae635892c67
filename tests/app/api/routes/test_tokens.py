"""Token lifetimes: ``ttl`` and ``max_ttl`` at creation, 401 ``token_expired``, ``GET /v1/tokens/self`` and
``POST /v1/tokens/self/renew``. Time is moved by replacing the one clock, ``security.token_clock``."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from app.core.config import Settings
from app.core.token_format import MAX_TOKEN_TTL_SECONDS
from app.services import security
from tests.app.api.conftest import ROOT_TOKEN, Api, running_api


class Clock:
    """A settable stand-in for ``security.token_clock``."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    fake = Clock()
    monkeypatch.setattr(security, "token_clock", fake)
    yield fake


async def create(api: Api, **fields: Any) -> dict[str, Any]:
    body = {"scopes": ["encrypt"], **fields}
    response = await api.client.post("/v1/tokens", json=body, headers=api.auth())
    assert response.status_code == 201, response.text
    return dict(response.json())


def iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


async def test_ttl_and_max_ttl_are_stored_and_listed(api: Api, clock: Clock) -> None:
    created = await create(api, ttl=60, max_ttl=600)
    start = clock.now
    assert created["ttl"] == 60 and created["capped"] is False
    assert created["expires_at"] == iso(start + timedelta(seconds=60))
    assert created["max_expires_at"] == iso(start + timedelta(seconds=600))
    listed = (await api.client.get("/v1/tokens", headers=api.auth())).json()["tokens"]
    mine = next(t for t in listed if t["id"] == created["id"])
    assert mine == {key: value for key, value in created.items() if key not in ("token", "capped")}
    root = next(t for t in listed if t["id"] == "0123456789abcdef")
    assert (root["ttl"], root["expires_at"], root["max_expires_at"]) == (None, None, None)
    secret = created["token"].split("_", 2)[2]
    assert secret not in str(listed)


async def test_ttl_without_max_ttl_cannot_be_renewed_beyond_it(api: Api, clock: Clock) -> None:
    created = await create(api, ttl=60)
    assert created["max_expires_at"] == created["expires_at"]


@pytest.mark.parametrize(
    "fields",
    [
        {"max_ttl": 60},
        {"ttl": 60, "max_ttl": 59},
        {"ttl": 0},
        {"ttl": -1},
        {"ttl": "60"},
        {"ttl": 1.5},
        {"ttl": True},
        {"ttl": MAX_TOKEN_TTL_SECONDS + 1},
        {"ttl": 60, "max_ttl": MAX_TOKEN_TTL_SECONDS + 1},
    ],
)
async def test_bad_lifetimes_are_422(api: Api, fields: dict[str, Any]) -> None:
    response = await api.client.post("/v1/tokens", json={"scopes": ["encrypt"], **fields}, headers=api.auth())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["code"] == "validation_error"


async def test_an_expired_token_gets_401_token_expired(api: Api, clock: Clock) -> None:
    token = (await create(api, ttl=60))["token"]
    assert (await api.client.get("/v1/backends", headers=api.auth(token))).status_code == 200
    clock.advance(59.9)
    assert (await api.client.get("/v1/backends", headers=api.auth(token))).status_code == 200
    clock.advance(0.1)
    for method, path in (
        ("GET", "/v1/backends"),
        ("GET", "/v1/tokens/self"),
        ("POST", "/v1/tokens/self/renew"),
    ):
        response = await api.client.request(method, path, headers=api.auth(token))
        assert response.status_code == 401, (path, response.text)
        assert response.json()["error"] == {"code": "token_expired", "message": "token expired"}
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert token not in response.text
    # A wrong secret for the same id is still just "invalid token": expiry is told only to the holder.
    token_id = token.split("_")[1]
    wrong = await api.client.get("/v1/backends", headers=api.auth(f"ks_{token_id}_{'x' * 43}"))
    assert wrong.json()["error"]["code"] == "unauthorized"


async def test_an_expired_token_is_refused_even_from_the_cache(
    settings_factory: Callable[..., Settings], clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_api(settings_factory(token_cache_ttl=3600.0)) as api:
        token = (await create(api, ttl=60))["token"]
        state = api.app.state.keystream
        reads: list[str] = []
        original = state.keystore.get_token

        def counting_get_token(token_id: str) -> Any:
            reads.append(token_id)
            return original(token_id)

        state.follower.poll()  # the token_created change is applied now, not between the two calls below
        monkeypatch.setattr(state.keystore, "get_token", counting_get_token)
        assert (await api.client.get("/v1/backends", headers=api.auth(token))).status_code == 200
        assert (await api.client.get("/v1/backends", headers=api.auth(token))).status_code == 200
        assert len(reads) <= 1  # the record is served from the cache
        clock.advance(61)
        response = await api.client.get("/v1/backends", headers=api.auth(token))
        assert response.status_code == 401 and response.json()["error"]["code"] == "token_expired"
        assert len(reads) <= 1  # refused on the cached record: the cache does not outlive the expiry


async def test_self_needs_no_admin_and_shows_only_the_caller(api: Api, clock: Clock) -> None:
    created = await create(api, ttl=60, max_ttl=120, description="ci", key_patterns=["app-*"])
    response = await api.client.get("/v1/tokens/self", headers=api.auth(created["token"]))
    assert response.status_code == 200, response.text
    assert response.json() == {key: value for key, value in created.items() if key not in ("token", "capped")}
    root = (await api.client.get("/v1/tokens/self", headers=api.auth(ROOT_TOKEN))).json()
    assert root["id"] == "0123456789abcdef" and root["expires_at"] is None and root["ttl"] is None
    assert "hash" not in response.text and created["token"].split("_", 2)[2] not in response.text


async def test_renew_extends_by_the_original_ttl_then_caps_at_max(api: Api, clock: Clock) -> None:
    created = await create(api, ttl=60, max_ttl=150)
    start, token = clock.now, created["token"]
    clock.advance(50)
    renewed = await api.client.post("/v1/tokens/self/renew", headers=api.auth(token))
    assert renewed.status_code == 200, renewed.text
    assert renewed.json()["expires_at"] == iso(start + timedelta(seconds=110))
    assert renewed.json()["capped"] is False
    clock.advance(55)  # 105 s after creation: past the first expiry, alive thanks to the renewal
    assert (await api.client.get("/v1/backends", headers=api.auth(token))).status_code == 200
    capped = await api.client.post("/v1/tokens/self/renew", json={"ttl": 3600}, headers=api.auth(token))
    assert capped.status_code == 200, capped.text
    assert (
        capped.json()["expires_at"] == iso(start + timedelta(seconds=150)) == capped.json()["max_expires_at"]
    )
    assert capped.json()["capped"] is True
    self_view = (await api.client.get("/v1/tokens/self", headers=api.auth(token))).json()
    assert self_view["expires_at"] == iso(start + timedelta(seconds=150))
    clock.advance(45)
    response = await api.client.get("/v1/backends", headers=api.auth(token))
    assert response.json()["error"]["code"] == "token_expired"


async def test_renew_with_a_shorter_ttl_can_shorten(api: Api, clock: Clock) -> None:
    created = await create(api, ttl=600, max_ttl=900)
    renewed = await api.client.post(
        "/v1/tokens/self/renew", json={"ttl": 10}, headers=api.auth(created["token"])
    )
    assert renewed.json()["expires_at"] == iso(clock.now + timedelta(seconds=10))


async def test_renewing_a_token_without_ttl_is_400(api: Api) -> None:
    token = (await create(api))["token"]
    for who in (token, ROOT_TOKEN):
        response = await api.client.post("/v1/tokens/self/renew", headers=api.auth(who))
        assert response.status_code == 400, response.text
        assert response.json()["error"]["code"] == "bad_request"
        assert "nothing to renew" in response.json()["error"]["message"]


@pytest.mark.parametrize("body", [{"ttl": 0}, {"ttl": "60"}, {"ttl": 60, "max_ttl": 90}, [60]])
async def test_renew_body_is_validated(api: Api, body: Any) -> None:
    token = (await create(api, ttl=60, max_ttl=90))["token"]
    response = await api.client.post("/v1/tokens/self/renew", json=body, headers=api.auth(token))
    assert response.status_code == 422, response.text


async def test_a_renewal_reaches_the_change_log(api: Api, clock: Clock) -> None:
    created = await create(api, ttl=60, max_ttl=120)
    keystore = api.app.state.keystream.keystore
    before = keystore.changes_since(0).latest
    await api.client.post("/v1/tokens/self/renew", headers=api.auth(created["token"]))
    changes = keystore.changes_since(before).changes
    assert [(c.kind, c.token_id) for c in changes] == [("token_renewed", created["id"])]


async def test_self_is_never_a_token_id(api: Api) -> None:
    for method in ("DELETE", "OPTIONS", "PUT"):
        response = await api.client.request(method, "/v1/tokens/self", headers=api.auth())
        assert response.status_code == 405, (method, response.text)
        assert response.headers["Allow"] == "GET"
    schema = (await api.client.get("/openapi.json")).json()
    assert set(schema["paths"]["/v1/tokens/self"]) == {"get"}
    assert set(schema["paths"]["/v1/tokens/self/renew"]) == {"post"}
    parameter = schema["paths"]["/v1/tokens/{token_id}"]["delete"]["parameters"][0]
    assert parameter["schema"]["pattern"].startswith("^(?!self$)")
    # Other ids still reach the admin's revoke route.
    assert (await api.client.delete("/v1/tokens/selfish", headers=api.auth())).status_code == 404
    assert (await api.client.delete("/v1/tokens/0123456789abcdef", headers=api.auth())).status_code == 204


async def short_lived_admin(api: Api, ttl: int = 30, max_ttl: int | None = None) -> str:
    """An admin token on every key that lives ``ttl`` seconds (renewable to ``max_ttl``)."""
    lifetime = {"ttl": ttl} if max_ttl is None else {"ttl": ttl, "max_ttl": max_ttl}
    return str((await create(api, scopes=["admin", "encrypt"], **lifetime))["token"])


@pytest.mark.parametrize(
    "asked",
    [{}, {"ttl": MAX_TOKEN_TTL_SECONDS}, {"ttl": 10, "max_ttl": MAX_TOKEN_TTL_SECONDS}],
    ids=["no-ttl", "long-ttl", "long-max-ttl"],
)
async def test_a_child_never_outlives_a_short_lived_creator(
    api: Api, clock: Clock, asked: dict[str, int]
) -> None:
    start = clock.now
    admin = await short_lived_admin(api, ttl=30)
    response = await api.client.post(
        "/v1/tokens", json={"scopes": ["encrypt"], **asked}, headers=api.auth(admin)
    )
    assert response.status_code == 201, response.text
    child = response.json()
    assert child["capped"] is True
    end = iso(start + timedelta(seconds=30))
    assert child["max_expires_at"] == end
    assert child["expires_at"] == (iso(start + timedelta(seconds=10)) if asked.get("ttl") == 10 else end)
    assert child["ttl"] == asked.get("ttl", 30)
    clock.advance(31)  # the creator and its child are both over
    for token in (admin, child["token"]):
        expired = await api.client.get("/v1/backends", headers=api.auth(token))
        assert expired.json()["error"]["code"] == "token_expired", expired.text


async def test_a_child_within_its_creator_is_not_capped(api: Api, clock: Clock) -> None:
    admin = await short_lived_admin(api, ttl=60, max_ttl=600)
    response = await api.client.post(
        "/v1/tokens", json={"scopes": ["encrypt"], "ttl": 20, "max_ttl": 500}, headers=api.auth(admin)
    )
    assert response.status_code == 201, response.text
    child = response.json()
    assert child["capped"] is False
    assert (child["expires_at"], child["max_expires_at"]) == (
        iso(clock.now + timedelta(seconds=20)),
        iso(clock.now + timedelta(seconds=500)),
    )
    root_child = await create(api, ttl=MAX_TOKEN_TTL_SECONDS)  # root never expires: nothing to cap
    assert root_child["capped"] is False and root_child["ttl"] == MAX_TOKEN_TTL_SECONDS


async def test_a_child_renews_only_up_to_its_creator_max(api: Api, clock: Clock) -> None:
    start = clock.now
    admin = await short_lived_admin(api, ttl=30, max_ttl=90)
    child = (
        await api.client.post(
            "/v1/tokens",
            json={"scopes": ["encrypt"], "ttl": 60, "max_ttl": MAX_TOKEN_TTL_SECONDS},
            headers=api.auth(admin),
        )
    ).json()
    assert (child["expires_at"], child["max_expires_at"]) == (
        iso(start + timedelta(seconds=30)),
        iso(start + timedelta(seconds=90)),
    )
    clock.advance(20)
    renewed = await api.client.post("/v1/tokens/self/renew", headers=api.auth(child["token"]))
    assert renewed.status_code == 200, renewed.text
    assert (renewed.json()["expires_at"], renewed.json()["capped"]) == (
        iso(start + timedelta(seconds=80)),
        False,
    )
    clock.advance(50)
    capped = await api.client.post(
        "/v1/tokens/self/renew", json={"ttl": MAX_TOKEN_TTL_SECONDS}, headers=api.auth(child["token"])
    )
    assert (capped.json()["expires_at"], capped.json()["capped"]) == (
        iso(start + timedelta(seconds=90)),
        True,
    )
    clock.advance(21)
    expired = await api.client.get("/v1/backends", headers=api.auth(child["token"]))
    assert expired.json()["error"]["code"] == "token_expired"

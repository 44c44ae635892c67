"""The streaming encrypt/decrypt routes served ahead of FastAPI's stack (app/api/hotpath.py), and their small
bodies sealed and opened in one call: same answers, errors, metrics and bytes as through the stack."""

from __future__ import annotations

import logging
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from starlette.requests import Request
from starlette.responses import Response

from app.api import hotpath, paths
from app.api.middleware import middleware, wrap
from app.api.streaming import OctetsResponse
from app.core.config import Settings
from app.formats.sealed import KeyParameters, SealedDecryptor, SealedEncryptor
from app.formats.sealed import randomness as sealed_randomness
from tests.app.api.conftest import Api, running_api


async def test_encrypt_and_decrypt_skip_the_stack_and_round_trip(api: Api, stack_calls: list[str]) -> None:
    await api.create_key("k")
    stack_calls.clear()
    sealed = await api.encrypt("k", b"hello")
    assert sealed.status_code == 200, sealed.text
    opened = await api.decrypt("k", sealed.content)
    assert opened.status_code == 200 and opened.content == b"hello"
    assert opened.headers["keystream-key-version"] == "1"
    assert sealed.headers["content-type"] == "application/octet-stream"
    assert stack_calls == []
    assert (await api.client.get("/healthz")).status_code == 200
    assert stack_calls == ["/healthz"]


async def test_other_methods_and_paths_still_go_through_fastapi(api: Api, stack_calls: list[str]) -> None:
    await api.create_key("k")
    stack_calls.clear()
    response = await api.client.get("/v1/keys/k/encrypt", headers=api.auth())
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    trailing = await api.client.post("/v1/keys/k/encrypt/", content=b"x", headers=api.auth())
    assert trailing.status_code in (307, 404)  # the router's answer, as before the shortcut
    assert stack_calls == ["/v1/keys/k/encrypt", "/v1/keys/k/encrypt/"]


async def test_with_opentelemetry_on_requests_take_fastapis_path(
    api: Api, stack_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await api.create_key("k")
    monkeypatch.setattr(hotpath.KeystreamApp, "_telemetry_on", lambda self: True)
    monkeypatch.setattr(hotpath, "TELEMETRY_RECHECK_SECONDS", 0.0)  # asked on every request
    stack_calls.clear()
    sealed = await api.encrypt("k", b"traced")
    assert sealed.status_code == 200
    assert stack_calls == ["/v1/keys/k/encrypt"]
    assert (await api.decrypt("k", sealed.content)).content == b"traced"


async def test_a_configured_opentelemetry_provider_is_noticed_within_the_recheck_time(
    api: Api, stack_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    await api.create_key("k")
    telemetry = api.app._native_telemetry  # type: ignore[attr-defined]
    monkeypatch.setattr(hotpath, "TELEMETRY_RECHECK_SECONDS", 0.0)
    monkeypatch.setattr(type(telemetry), "enabled", lambda self: True)
    stack_calls.clear()
    assert (await api.encrypt("k", b"x")).status_code == 200
    assert stack_calls == ["/v1/keys/k/encrypt"]
    monkeypatch.setattr(type(telemetry), "enabled", lambda self: False)
    assert (await api.encrypt("k", b"x")).status_code == 200
    assert stack_calls == ["/v1/keys/k/encrypt"]


async def test_the_shortcuts_request_is_starlettes_request() -> None:
    """The shortcut builds its Request in one call: the same attributes, with the same values, as Request's
    own constructor sets (a Starlette upgrade that adds one fails here)."""

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"x", "more_body": False}

    scope: dict[str, Any] = {"type": "http", "method": "POST", "headers": [], "query_string": b""}
    ours, theirs = hotpath._Request(scope, receive), Request(scope, receive)
    assert isinstance(ours, Request)
    assert vars(ours) == vars(theirs)
    assert ours.receive is receive and ours.scope is scope
    assert await ours.body() == b"x"


async def test_a_root_path_takes_fastapis_path(
    settings_factory: Callable[..., Settings], stack_calls: list[str]
) -> None:
    async with running_api(settings_factory()) as api:
        api.app.root_path = "/prefix"
        await api.create_key("k")
        stack_calls.clear()
        sealed = await api.encrypt("k", b"x")
        assert sealed.status_code == 200
        assert stack_calls == ["/v1/keys/k/encrypt"]


async def test_errors_are_the_stacks_json_errors(api: Api) -> None:
    await api.create_key("k")
    missing = await api.client.post("/v1/keys/k/encrypt", content=b"x")
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == "Bearer"
    assert missing.json()["error"]["code"] == "unauthorized"
    unknown = await api.encrypt("nope", b"x")
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "key_not_found"
    garbage = await api.decrypt("k", b"\x00" * 100)
    assert garbage.status_code == 400 and garbage.json()["error"]["code"] == "decryption_failed"


async def test_an_unexpected_error_is_a_500_json_without_its_message(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    await api.create_key("k")

    async def broken(request: object) -> None:
        raise RuntimeError("-".join(["secret", "detail"]))  # the log's frames quote source lines, not this

    route, _ = hotpath._STREAMING["encrypt"]
    monkeypatch.setitem(hotpath._STREAMING, "encrypt", (route, broken))
    with caplog.at_level(logging.ERROR, logger="keystream.errors"):
        response = await api.encrypt("k", b"x")
    assert response.status_code == 500
    assert response.json() == {"error": {"code": "internal_error", "message": "internal server error"}}
    assert "RuntimeError" in caplog.text and "/v1/keys/{name}/encrypt" in caplog.text
    assert "secret-detail" not in caplog.text


async def test_metrics_are_labelled_with_the_template_and_the_status(api: Api) -> None:
    await api.create_key("k")
    await api.decrypt("k", b"not a sealed message at all, long enough for a header")
    await api.encrypt("k", b"x")
    text = (await api.client.get("/metrics")).text
    for status, operation in (("400", "decrypt"), ("200", "encrypt")):
        needle = (
            "keystream_http_request_duration_seconds_count"
            f'{{method="POST",route="/v1/keys/{{name}}/{operation}",status="{status}"}}'
        )
        assert needle in text
    assert "keystream_inflight_requests 1.0" in text  # the /metrics request itself, none left over


class Randomness:
    """A replayable stand-in for os.urandom."""

    def __init__(self, seed: int) -> None:
        self._random = random.Random(seed)

    def __call__(self, size: int) -> bytes:
        return self._random.randbytes(size)


@pytest.fixture
def fixed_randomness(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[], None]]:
    def reset() -> None:
        monkeypatch.setattr(sealed_randomness, "random_bytes", Randomness(11))

    reset()
    yield reset


@pytest.mark.parametrize("size", [0, 1, 1024, 4096 - 73, 4096 - 72, 10_000])
@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
async def test_small_bodies_are_the_encryptors_bytes(
    api: Api, fixed_randomness: Callable[[], None], size: int, scheme: str
) -> None:
    """A small body sealed in one call (natively on aesni) is byte for byte what a SealedEncryptor writes,
    across segment boundaries, and the streaming decryptor opens it."""
    await api.create_key("k", segment_size=4096, scheme=scheme)
    state = api.app.state.keystream
    backend = state.backends.get(None)
    key = state.keycache.resolve("k", None, backend)
    plaintext = random.Random(size).randbytes(size)
    ad = b"context"
    headers = {"Keystream-Associated-Data": "Y29udGV4dA=="}
    fixed_randomness()
    sealed = await api.encrypt("k", plaintext, headers=headers)
    assert sealed.status_code == 200, sealed.text
    fixed_randomness()
    assert key.parameters == KeyParameters("aes256", 4096, scheme)
    encryptor = SealedEncryptor(key.material, key.parameters, ad, backend)
    assert sealed.content == encryptor.update(plaintext) + encryptor.finalize()
    decryptor = SealedDecryptor([(1, key.material)], key.parameters, ad, backend)
    assert decryptor.update(sealed.content) + decryptor.finalize() == plaintext
    opened = await api.decrypt("k", sealed.content, headers=headers)
    assert opened.status_code == 200 and opened.content == plaintext


async def test_small_and_streamed_bodies_fail_alike(
    api: Api, settings_factory: Callable[..., Settings]
) -> None:
    """The one-call path and the streaming path give the same error for the same bad ciphertext."""
    await api.create_key("k", segment_size=4096)
    sealed = (await api.encrypt("k", b"z" * 5000)).content  # two segments
    tampered = bytearray(sealed)
    tampered[50] ^= 1  # in segment 0: a clean 400 when streamed too
    short = (await api.encrypt("k", b"z" * 100)).content
    bad_header = b"\x07" + short[1:]
    bodies = [bytes(tampered), short[:-1], short[:10], short[:40], bad_header]
    small = [await api.decrypt("k", body) for body in bodies]
    async with running_api(settings_factory(small_body_max_bytes=0)) as streaming:
        streamed = [await streaming.decrypt("k", body) for body in bodies]
    for one, other in zip(small, streamed, strict=True):
        assert one.status_code == other.status_code == 400
        assert one.json() == other.json()


async def test_a_small_decrypt_after_rotation_names_the_version_that_verified(api: Api) -> None:
    await api.create_key("k")
    old = (await api.encrypt("k", b"old")).content
    rotated = await api.client.post("/v1/keys/k/rotate", headers=api.auth())
    assert rotated.status_code in (200, 201), rotated.text
    new = (await api.encrypt("k", b"new")).content
    for body, version, plaintext in ((old, "1", b"old"), (new, "2", b"new")):
        opened = await api.decrypt("k", body)
        assert opened.status_code == 200 and opened.content == plaintext
        assert opened.headers["keystream-key-version"] == version


@pytest.mark.parametrize("body", [b"", b"x" * 1096])
def test_octets_response_sends_what_starlettes_response_sends(body: bytes) -> None:
    # The routes' own names (looked up ready-made) and another one (converted as Starlette does).
    headers = {
        "Keystream-IV": "00" * 16,
        "Keystream-Key-Version": "3",
        "Keystream-Backend": "aesni",
        "X-Other-Header": "Mixed Case",
    }
    ours = OctetsResponse(body, headers)
    theirs = Response(body, headers=headers, media_type="application/octet-stream")
    assert (ours.status_code, ours.raw_headers, ours.body) == (
        theirs.status_code,
        theirs.raw_headers,
        theirs.body,
    )


async def _call(
    api: Api, operation: str, messages: list[dict[str, Any]], length: int
) -> list[dict[str, Any]]:
    """Drive the app with the given request messages (then a disconnect); returns what it sent."""
    headers = [
        (b"authorization", api.auth()["Authorization"].encode()),
        (b"content-type", b"application/octet-stream"),
        (b"content-length", str(length).encode()),
    ]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": f"/v1/keys/k/{operation}",
        "raw_path": f"/v1/keys/k/{operation}".encode(),
        "query_string": b"",
        "root_path": "",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    pending = list(messages)
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await api.app(scope, receive, send)
    return sent


async def test_a_small_body_in_several_messages_is_read_whole(api: Api) -> None:
    await api.create_key("k")
    parts = [b"a" * 100, b"", b"b" * 200, b"c"]
    messages = [{"type": "http.request", "body": part, "more_body": True} for part in parts[:-1]]
    messages.append({"type": "http.request", "body": parts[-1], "more_body": False})
    sent = await _call(api, "encrypt", messages, sum(map(len, parts)))
    assert sent[0]["status"] == 200
    opened = await api.decrypt("k", sent[1]["body"])
    assert opened.content == b"".join(parts)


@pytest.mark.parametrize("operation", ["encrypt", "decrypt"])
async def test_a_client_gone_during_a_small_body_gets_no_crypto(api: Api, operation: str) -> None:
    await api.create_key("k")
    messages = [{"type": "http.request", "body": b"x" * 10, "more_body": True}]
    sent = await _call(api, operation, messages, 1000)  # then the client disconnects
    assert sent[0]["status"] == 400
    assert b"client_disconnected" in sent[1]["body"]


async def test_the_shortcut_keeps_the_audit_records(
    settings_factory: Callable[..., Settings], stack_calls: list[str], tmp_path: Any
) -> None:
    """Encrypt and decrypt skip FastAPI's stack but not the audit log: each answer carries its request id and
    has its response line (route template, key version, outcome), as through the stack."""
    import json

    path = tmp_path / "audit.log"
    async with running_api(settings_factory(audit_log=str(path))) as api:
        await api.create_key("k")
        stack_calls.clear()
        sealed = await api.encrypt("k", b"audited")
        opened = await api.decrypt("k", sealed.content)
        refused = await api.decrypt("k", b"\x00" * 80)
        assert stack_calls == []
        ids = [response.headers["keystream-request-id"] for response in (sealed, opened, refused)]
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    responses = {line["request_id"]: line for line in lines if line.get("type") == "response"}
    assert set(ids) <= set(responses)
    routes = [responses[i]["route"] for i in ids]
    assert routes == ["/v1/keys/{name}/encrypt", "/v1/keys/{name}/decrypt", "/v1/keys/{name}/decrypt"]
    assert [responses[i]["status"] for i in ids] == [200, 200, 400]
    assert b"audited" not in path.read_bytes()


def test_the_app_state_reads_like_starlettes_state() -> None:
    state = hotpath.AttributeState()
    state.keystream = 1
    state["other"] = 2
    assert (state.keystream, state["keystream"], state.other, getattr(state, "missing", None)) == (
        1,
        1,
        2,
        None,
    )
    assert sorted(state) == ["keystream", "other"] and len(state) == 2
    del state.keystream
    del state["other"]
    assert getattr(state, "keystream", None) is None and getattr(state, "other", None) is None
    assert len(state) == 0
    with pytest.raises(AttributeError):
        _ = state.keystream


def test_the_path_memo_answers_as_the_patterns_and_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """_find remembers which table a path names (not the route: a replaced handler is used at once), never a
    path the shortcut does not serve or an overlong one, and empties itself when full."""
    monkeypatch.setattr(hotpath, "_found_by_path", {})
    monkeypatch.setattr(paths, "MEMO_PATHS_MAX", 3)

    def find(path: str, query: bytes = b"") -> object:
        return hotpath._find({"path": path, "query_string": query})

    encrypt = hotpath._STREAMING["encrypt"]
    for _ in range(2):  # the second time from the memo
        assert find("/v1/keys/k/encrypt") == (*encrypt, "k")
        assert find("/v1/keys/k/encrypt/batch") == (*hotpath._BATCH["encrypt"], "k")
        assert find("/v1/keys/k/encrypt/batch", b"key_version=1") is None  # a query: FastAPI's
        assert find("/v1/keys/k/rewrap") is None  # matched, but not served by the shortcut
        assert find("/v1/keys/k/nothing") is None
    remembered = {"/v1/keys/k/encrypt", "/v1/keys/k/encrypt/batch", "/v1/keys/k/rewrap"}
    assert set(hotpath._found_by_path) <= remembered
    assert "/v1/keys/k/nothing" not in hotpath._found_by_path
    long_name = "n" * paths.MEMO_PATH_MAX
    assert find(f"/v1/keys/{long_name}/encrypt") == (*encrypt, long_name)
    assert f"/v1/keys/{long_name}/encrypt" not in hotpath._found_by_path
    for name in ("a", "b", "c", "d"):
        find(f"/v1/keys/{name}/decrypt")
    assert len(hotpath._found_by_path) <= paths.MEMO_PATHS_MAX
    monkeypatch.setitem(hotpath._STREAMING, "decrypt", (encrypt[0], encrypt[1]))
    assert find("/v1/keys/d/decrypt") == (*encrypt, "d")  # the table is read at each request


def test_the_shortcuts_stack_is_the_middleware_list_in_order_around_the_route() -> None:
    """wrap() links the layers through their bound ``__call__``: the same layers, in middleware()'s order,
    each over the next, the route innermost."""

    async def route(scope: Any, receive: Any, send: Any) -> None:
        """The innermost app."""

    settings = Settings()
    app: Any = wrap(route, settings)
    for entry in middleware(settings):
        layer = app.__self__
        assert type(layer) is entry.cls
        assert app == layer.__call__
        app = layer.app
    assert app is route


@pytest.mark.parametrize("scheme", ["ctr-hmac", "gcm"])
async def test_a_streamed_sealed_encrypt_round_trips_with_the_small_paths_headers(
    settings_factory: Callable[..., Settings], scheme: str
) -> None:
    """A body over ``small_body_max_bytes`` is sealed by the route's streaming step, a small one whole: both
    open, under the same version and headers."""
    plaintext = bytes(range(256)) * 40
    async with running_api(settings_factory(small_body_max_bytes=0)) as streaming:
        made = await streaming.client.post(
            "/v1/keys", json={"name": "k", "type": "aes256", "scheme": scheme}, headers=streaming.auth()
        )
        assert made.status_code == 201, made.text
        streamed = await streaming.encrypt("k", plaintext)
        small = await streaming.client.post("/v1/keys/k/encrypt", content=b"", headers=streaming.auth())
        opened = await streaming.decrypt("k", streamed.content)
    assert streamed.status_code == small.status_code == opened.status_code == 200
    assert opened.content == plaintext
    assert streamed.headers["keystream-key-version"] == opened.headers["keystream-key-version"] == "1"
    assert streamed.headers["keystream-backend"] == small.headers["keystream-backend"]


async def test_with_caches_on_the_routes_answer_from_them_and_take_the_slow_path_on_a_miss(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The streaming routes check a cached token and find a cached key without awaiting (the coroutines
    authenticate, encryption_key and decryption_keys run only on a miss); a revoked token, a rotated key
    and a token or key not yet read take the awaited path and get its answers."""
    from app.api.routes import crypto as crypto_routes
    from app.services.security import TokenVerifier

    awaited: list[str] = []

    def spy(owner: Any, name: str) -> None:
        original = getattr(owner, name)

        async def counted(*args: Any, **kwargs: Any) -> Any:
            awaited.append(name)
            return await original(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    spy(TokenVerifier, "authenticate")
    spy(crypto_routes, "encryption_key")
    spy(crypto_routes, "decryption_keys")
    async with running_api(settings_factory(token_cache_ttl=60.0, key_metadata_ttl=60.0)) as api:
        await api.create_key("k")
        token = await api.create_token(["encrypt", "decrypt"])
        awaited.clear()
        first = await api.encrypt("k", b"one", token=token)
        assert first.status_code == 200, first.text
        assert awaited == ["authenticate", "encryption_key"]  # neither was cached yet
        # Every change so far applied now, so the change-log follower forgets nothing behind the checks below
        # however late its thread runs; it may have forgotten the new token once more (reading its creation).
        api.app.state.keystream.follower.poll()
        for _ in range(2):
            awaited.clear()
            sealed = await api.encrypt("k", b"two", token=token)
            assert sealed.status_code == 200, sealed.text
            if not awaited:
                break
        assert awaited == []  # both from the caches
        assert (await api.decrypt("k", sealed.content, token=token)).content == b"two"
        assert awaited == []  # the one version that may decrypt is the cached latest
        rotated = await api.client.post("/v1/keys/k/rotate", headers=api.auth())
        assert rotated.status_code == 200, rotated.text
        awaited.clear()
        after = await api.encrypt("k", b"three", token=token)
        assert after.headers["keystream-key-version"] == "2"
        assert "encryption_key" in awaited  # the rotation invalidated the cached key
        assert (await api.decrypt("k", first.content, token=token)).content == b"one"
        assert "decryption_keys" in awaited  # version 1 not read since the rotation
        token_id = token.split("_")[1]
        revoked = await api.client.delete(f"/v1/tokens/{token_id}", headers=api.auth())
        assert revoked.status_code == 204, revoked.text
        awaited.clear()
        assert (await api.encrypt("k", b"x", token=token)).status_code == 401
        assert awaited == ["authenticate"]  # forgotten when deleted: read, and found gone
        assert (await api.decrypt("k", sealed.content, token=token)).status_code == 401

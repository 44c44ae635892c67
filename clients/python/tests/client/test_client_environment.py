"""``KeystreamClient()`` like hvac's ``Client()``: URL and token from KEYSTREAM_URL / KEYSTREAM_TOKEN when not
given, explicit arguments first, and the token never in a repr. Requests go to an httpx MockTransport."""

from __future__ import annotations

import httpx
import pytest

from keystream_client import DEFAULT_URL, AsyncKeystreamClient, KeystreamClient

Seen = list[httpx.Request]


def _transport(seen: Seen) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"keys": []})

    return httpx.MockTransport(answer)


def test_no_arguments_read_url_and_token_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSTREAM_URL", "http://keystream.example:9000/base")
    monkeypatch.setenv("KEYSTREAM_TOKEN", "ks_env_from-the-environment")
    seen: Seen = []
    with KeystreamClient(transport=_transport(seen)) as ks:
        assert ks.base_url == "http://keystream.example:9000/base"
        assert ks.list_keys() == []
        assert "from-the-environment" not in repr(ks)
    assert str(seen[0].url) == "http://keystream.example:9000/base/v1/keys"
    assert seen[0].headers["Authorization"] == "Bearer ks_env_from-the-environment"


def test_without_environment_the_default_url_and_no_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KEYSTREAM_URL", raising=False)
    monkeypatch.delenv("KEYSTREAM_TOKEN", raising=False)
    seen: Seen = []
    with KeystreamClient(transport=_transport(seen)) as ks:
        assert ks.base_url == DEFAULT_URL == "http://127.0.0.1:8000"
        ks.list_keys()
    assert "Authorization" not in seen[0].headers


def test_empty_variables_count_as_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSTREAM_URL", "")
    monkeypatch.setenv("KEYSTREAM_TOKEN", "")
    seen: Seen = []
    with KeystreamClient(transport=_transport(seen)) as ks:
        assert ks.base_url == DEFAULT_URL
        ks.list_keys()
    assert "Authorization" not in seen[0].headers


def test_arguments_win_over_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSTREAM_URL", "http://from-env.example")
    monkeypatch.setenv("KEYSTREAM_TOKEN", "ks_env_secret")
    seen: Seen = []
    with KeystreamClient("http://given.example:1234", "ks_arg_secret", transport=_transport(seen)) as ks:
        ks.list_keys()
    assert str(seen[0].url) == "http://given.example:1234/v1/keys"
    assert seen[0].headers["Authorization"] == "Bearer ks_arg_secret"


def test_a_bad_url_from_the_environment_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSTREAM_URL", "ftp://keystream.example")
    with pytest.raises(ValueError, match="http:// or https://"):
        KeystreamClient()


async def test_the_async_client_reads_the_same_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSTREAM_URL", "http://async.example:8001")
    monkeypatch.setenv("KEYSTREAM_TOKEN", "ks_async_token")
    seen: list[httpx.Request] = []

    async def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"keys": []})

    async with AsyncKeystreamClient(transport=httpx.MockTransport(answer)) as ks:
        assert await ks.list_keys() == []
    assert str(seen[0].url) == "http://async.example:8001/v1/keys"
    assert seen[0].headers["Authorization"] == "Bearer ks_async_token"

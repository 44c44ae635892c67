"""A ``Keystream-*`` header or a query parameter given twice is refused (400), as ``Authorization`` is.

Last-wins let a request mean one thing to a proxy, an auditor or a WAF that reads the first value and another
to the service: two ``Keystream-Associated-Data`` headers bound the second, and
``?backend=aesni&backend=python`` ran the backend that is not constant-time.
"""

from __future__ import annotations

import base64

import httpx
import pytest

from tests.app.api.conftest import Api

_IV = "00" * 16


def _assert_refused(response: httpx.Response, named: str) -> None:
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "bad_request"
    assert named in error["message"] and "more than once" in error["message"], error


@pytest.mark.parametrize("operation", ["encrypt", "decrypt", "rewrap"])
@pytest.mark.parametrize(
    ("header", "values", "query"),
    [
        ("Keystream-Associated-Data", ("YQ==", "Yg=="), ""),
        ("Keystream-Associated-Data", ("YQ==", "YQ=="), ""),
        ("Keystream-Key-Version", ("1", "1"), ""),
        ("Keystream-IV", (_IV, _IV), "?format=raw"),
    ],
)
async def test_streaming_route_refuses_a_repeated_keystream_header(
    api: Api, operation: str, header: str, values: tuple[str, str], query: str
) -> None:
    await api.create_key("dup")
    headers = [("Authorization", api.auth()["Authorization"]), *((header, value) for value in values)]
    response = await api.client.post(f"/v1/keys/dup/{operation}{query}", content=b"x" * 100, headers=headers)
    _assert_refused(response, header)


@pytest.mark.parametrize("operation", ["encrypt", "decrypt", "rewrap"])
@pytest.mark.parametrize(
    "query",
    [
        "backend=aesni&backend=python",
        "backend=aesni&backend=aesni",
        "key_version=1&key_version=1",
        "format=sealed&format=raw",
        "format=raw&iv=" + _IV + "&iv=" + _IV,
        "format=raw&offset=0&offset=16",
    ],
)
async def test_streaming_route_refuses_a_repeated_query_parameter(
    api: Api, operation: str, query: str
) -> None:
    await api.create_key("dup")
    url = f"/v1/keys/dup/{operation}?{query}"
    response = await api.client.post(url, content=b"x" * 100, headers=api.auth())
    repeated = query.rsplit("&", 1)[1].split("=", 1)[0]
    _assert_refused(response, repr(repeated))


async def test_repeated_backend_never_runs_the_last_one(api: Api) -> None:
    """The case that mattered: before, the python backend ran and said so in ``Keystream-Backend``."""
    await api.create_key("dup")
    response = await api.encrypt("dup", b"secret", backend="aesni")
    assert response.status_code == 200 and response.headers["Keystream-Backend"] == "aesni"
    response = await api.client.post(
        "/v1/keys/dup/encrypt?backend=aesni&backend=python", content=b"secret", headers=api.auth()
    )
    _assert_refused(response, "'backend'")
    assert "Keystream-Backend" not in response.headers


async def test_repeated_header_without_a_token_is_still_401(api: Api) -> None:
    await api.create_key("dup")
    headers = [("Keystream-Associated-Data", "YQ=="), ("Keystream-Associated-Data", "Yg==")]
    response = await api.client.post("/v1/keys/dup/encrypt", content=b"x", headers=headers)
    assert response.status_code == 401, response.text


@pytest.mark.parametrize("operation", ["encrypt", "decrypt", "rewrap"])
@pytest.mark.parametrize("query", ["backend=aesni&backend=python", "key_version=1&key_version=1"])
async def test_batch_route_refuses_a_repeated_query_parameter(api: Api, operation: str, query: str) -> None:
    await api.create_key("dup")
    sealed = await api.encrypt("dup", b"hello")
    field = "plaintext" if operation == "encrypt" else "ciphertext"
    value = base64.b64encode(b"hello" if operation == "encrypt" else sealed.content).decode()
    body = {"items": [{field: value}]}
    url = f"/v1/keys/dup/{operation}/batch?{query}"
    response = await api.client.post(url, json=body, headers=api.auth())
    _assert_refused(response, repr(query.split("=", 1)[0]))
    single = await api.client.post(url.split("&", 1)[0], json=body, headers=api.auth())
    assert single.status_code == 200, single.text
    assert "error" not in single.json()["results"][0], single.text

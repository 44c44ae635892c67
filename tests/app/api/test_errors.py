"""One JSON error shape for every status; never a traceback, token or key bytes."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable

import pytest

from app import errors
from app.api import errors as api_errors
from app.core.config import Settings
from app.formats.sealed import SealedDecryptionError
from app.keystore import KeystoreUnavailableError, KeyUnwrapError
from tests.app.api.conftest import Api, running_api


def assert_error_shape(body: object, code: str) -> None:
    assert isinstance(body, dict) and set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    assert "Traceback" not in body["error"]["message"]


async def test_unknown_path_is_404_json(api: Api) -> None:
    response = await api.client.get("/nope")
    assert response.status_code == 404
    assert_error_shape(response.json(), "not_found")


async def test_wrong_method_is_405_json(api: Api) -> None:
    response = await api.client.put("/healthz")
    assert response.status_code == 405
    assert_error_shape(response.json(), "method_not_allowed")


async def test_validation_is_422_json(api: Api) -> None:
    response = await api.client.post("/v1/keys", json={"name": 5}, headers=api.auth())
    assert response.status_code == 422
    assert_error_shape(response.json(), "validation_error")
    assert "name" in response.json()["error"]["message"]


async def test_unexpected_exception_is_500_json_without_details(
    api: Api, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    detail = "secret-" + "detail-9f8e7d"  # built at run time: the log must not carry the message

    def explode() -> list[object]:
        raise RuntimeError(detail)

    monkeypatch.setattr(api.app.state.keystream.keystore, "list_keys", explode)
    with caplog.at_level(logging.ERROR, logger="keystream.errors"):
        response = await api.client.get("/v1/keys", headers=api.auth())
    assert response.status_code == 500
    assert_error_shape(response.json(), "internal_error")
    assert "secret-detail" not in response.text
    assert "RuntimeError" in caplog.text
    assert "secret-detail" not in caplog.text


async def test_readyz_503_when_no_backend_can_run(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    import aescore

    real = aescore.available_backends
    monkeypatch.setattr(
        aescore, "available_backends", lambda: {**real(), "python": "switched off by the test"}
    )
    async with running_api(settings_factory(enabled_backends=["python"])) as api:
        response = await api.client.get("/readyz")
        assert response.status_code == 503
        assert_error_shape(response.json(), "backend_unavailable")


async def test_disabled_backend_is_400(settings_factory: Callable[..., Settings]) -> None:
    async with running_api(settings_factory(enabled_backends=["python"])) as api:
        await api.create_key("k")
        response = await api.encrypt("k", b"x", backend="aesni")
        assert response.status_code == 400
        assert_error_shape(response.json(), "bad_request")
        described = (await api.client.get("/v1/backends", headers=api.auth())).json()
        assert described["default"] == "python"
        aesni = next(b for b in described["backends"] if b["name"] == "aesni")
        assert aesni["enabled"] is False and aesni["available"] is False


async def test_no_key_material_in_any_key_response(api: Api) -> None:
    created = await api.create_key("m")
    keystore = api.app.state.keystream.keystore
    material = keystore.key_material("m", 1)
    texts = [
        str(created),
        (await api.client.get("/v1/keys/m", headers=api.auth())).text,
        (await api.client.get("/v1/keys", headers=api.auth())).text,
        (await api.client.post("/v1/keys/m/rotate", headers=api.auth())).text,
        (await api.client.get("/metrics")).text,
    ]
    for text in texts:
        assert material.hex() not in text
        assert "material" not in text


def test_every_domain_error_has_a_status_and_the_docstring_tree_names_it() -> None:
    """The mapping lives in app.api.errors alone: each class of app.errors (and the two defined next to
    the code that raises them) gets the status its docstring tree shows."""
    expected = {
        errors.KeystreamError: 400,
        errors.BadRequestError: 400,
        errors.InvalidShareError: 400,
        errors.DecryptionFailedError: 400,
        SealedDecryptionError: 400,
        errors.UnauthorizedError: 401,
        errors.TokenExpiredError: 401,
        errors.ForbiddenError: 403,
        errors.NotFoundError: 404,
        errors.KeyNotFoundError: 404,
        errors.KeyVersionNotFoundError: 404,
        errors.TokenNotFoundError: 404,
        errors.ConflictError: 409,
        errors.KeyExistsError: 409,
        errors.KeyRecentlyDeletedError: 409,
        errors.DeletionNotAllowedError: 409,
        errors.PayloadTooLargeError: 413,
        errors.UnsupportedMediaTypeError: 415,
        errors.ValidationError: 422,
        errors.TooManyRequestsError: 429,
        errors.ServiceUnavailableError: 503,
        errors.BackendUnavailableError: 503,
        errors.BackendRestartingError: 503,
        errors.SealedError: 503,
        errors.IdentityProviderUnavailableError: 503,
        errors.RoleNotFoundError: 404,
        KeyUnwrapError: 503,
        KeystoreUnavailableError: 503,
    }
    domain = {
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, errors.KeystreamError)
    }
    assert domain <= set(expected)
    tree = api_errors.__doc__ or ""
    for klass, status in expected.items():
        error = (
            klass("x", segment_index=None, plaintext_released=False)
            if klass is SealedDecryptionError
            else klass("x")
        )
        assert api_errors.http_status(error) == status, klass
        assert re.search(rf"\b{klass.__name__}\s+{status}\b", tree), f"{klass.__name__} missing from the tree"
    unauthorized = api_errors.keystream_error_response(errors.UnauthorizedError("missing bearer token"))
    assert unauthorized.status_code == 401 and unauthorized.headers["www-authenticate"] == "Bearer"
    unavailable = api_errors.keystream_error_response(KeystoreUnavailableError("database down; retry later"))
    assert unavailable.status_code == 503 and unavailable.headers["retry-after"] == "1"
    assert json.loads(bytes(unavailable.body))["error"]["code"] == "keystore_unavailable"
    assert (
        "retry-after" not in api_errors.keystream_error_response(errors.ServiceUnavailableError("x")).headers
    )

"""The body-limit middleware's limit of a path, remembered by path, is body_limit's, and the memo stays
bounded."""

from __future__ import annotations

import pytest
from starlette.types import Receive, Scope, Send

from app.api import paths
from app.api.middleware.body_limit import BodyLimitMiddleware, body_limit

PATHS = [
    "/v1/keys/k/encrypt",
    "/v1/keys/k/decrypt",
    "/v1/keys/k/rewrap",
    "/v1/keys/k/encrypt/batch",
    "/v1/keys/k/hmac",
    "/v1/keys",
    "/v1/transit/encrypt/k",
    "/v1/transit/keys/k",
    "/v1/sys/unseal",
    "/healthz",
    "/metrics",
    "/v1/keys/" + "n" * 300 + "/hmac",
]


async def _app(scope: Scope, receive: Receive, send: Send) -> None:
    pass


@pytest.mark.parametrize("path", PATHS)
def test_a_remembered_limit_is_body_limits(path: str) -> None:
    middleware = BodyLimitMiddleware(_app, json_limit=100, batch_limit=1000)
    for _ in range(2):  # the second time from the memo (when the path is short enough to be kept)
        assert middleware._limit(path) == body_limit(path, 100, 1000)


def test_the_memo_keeps_short_paths_only_and_empties_when_full(monkeypatch: pytest.MonkeyPatch) -> None:
    middleware = BodyLimitMiddleware(_app, json_limit=100, batch_limit=1000)
    monkeypatch.setattr(paths, "MEMO_PATHS_MAX", 3)
    for path in PATHS:
        middleware._limit(path)
        assert len(middleware._limits) <= 3
    assert all(len(path) <= paths.MEMO_PATH_MAX for path in middleware._limits)

"""``batch`` retries a request the service refused as overloaded (503 ``overloaded``: its batch buffer stayed
full), and nothing else. A stand-in client: a real server's budget cannot be filled on cue."""

from __future__ import annotations

import argparse
from typing import Any, cast

import pytest

from keystream_client import BatchItem, BatchResult, KeystreamAPIError
from keystream_client.cli import _batch


class _Service:
    """Answers with the queued errors first, then one ciphertext per item."""

    def __init__(self, *errors: KeystreamAPIError) -> None:
        self.errors = list(errors)
        self.calls = 0

    def encrypt_batch(self, key: str, items: list[BatchItem], **options: Any) -> list[BatchResult]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return [BatchResult(b"sealed", 1, None, None) for _ in items]


def _send(service: _Service) -> _batch._Line:
    args = argparse.Namespace(operation="encrypt", key="k", key_version=None, backend=None)
    line = _batch.parse_line(1, b'{"plaintext": "aGk="}', "plaintext")
    _batch._Sender(cast(Any, service), args).send([line])
    return line


def test_overloaded_is_retried_then_succeeds(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(_batch.time, "sleep", pauses.append)
    overloaded = KeystreamAPIError(503, "overloaded", "batch buffer full")
    service = _Service(overloaded, overloaded)
    line = _send(service)
    assert service.calls == 3 and pauses == [1.0, 2.0]
    assert line.error is None and line.copied == {"ciphertext": "c2VhbGVk", "key_version": 1}


def test_overloaded_gives_up_and_other_errors_are_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    pauses: list[float] = []
    monkeypatch.setattr(_batch.time, "sleep", pauses.append)
    overloaded = KeystreamAPIError(503, "overloaded", "batch buffer full")
    with pytest.raises(KeystreamAPIError, match="overloaded"):
        _send(_Service(*[overloaded] * 4))
    assert pauses == list(_batch.OVERLOADED_RETRY_SECONDS)

    pauses.clear()
    for error in (
        KeystreamAPIError(503, "unavailable", "keystore down"),
        KeystreamAPIError(401, "unauthorized", ""),
    ):
        service = _Service(error)
        with pytest.raises(KeystreamAPIError):
            _send(service)
        assert service.calls == 1 and pauses == []

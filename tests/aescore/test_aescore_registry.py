"""The backend registry: listing, lookup errors, registration and the KEYSTREAM_BACKEND default."""

from __future__ import annotations

import pytest

import aescore
from aescore import BytesLike, ExpandedKey, _registry


@pytest.fixture
def isolated_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let a test register backends without leaking them into the rest of the session."""
    monkeypatch.setattr(_registry, "_factories", dict(_registry._factories))
    monkeypatch.setattr(_registry, "_unavailable", dict(_registry._unavailable))
    monkeypatch.setattr(_registry, "_instances", dict(_registry._instances))


def test_available_backends_lists_builtins_with_reasons() -> None:
    backends = aescore.available_backends()
    assert backends["python"] is None  # pure Python runs everywhere
    assert "aesni" in backends
    assert backends["aesni"] is None or (isinstance(backends["aesni"], str) and backends["aesni"])
    assert list(backends) == sorted(backends)
    for name, reason in backends.items():
        if reason is None:
            assert aescore.get_backend(name).name == name


def test_get_backend_returns_one_shared_instance() -> None:
    assert aescore.get_backend("python") is aescore.get_backend("python")
    assert not aescore.get_backend("python").constant_time


def test_unknown_backend_names_the_known_ones() -> None:
    with pytest.raises(aescore.UnknownBackendError, match="python") as caught:
        aescore.get_backend("no-such-backend")
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, aescore.AesCoreError)
    assert "no-such-backend" in str(caught.value)


def test_backend_name_must_be_a_string() -> None:
    with pytest.raises(TypeError, match="backend name"):
        aescore.get_backend(42)  # type: ignore[arg-type]


@pytest.mark.usefixtures("isolated_registry")
def test_unavailable_backend_raises_with_its_reason() -> None:
    aescore.register_backend("test-unavailable", None, "needs a quantum coprocessor")
    assert aescore.available_backends()["test-unavailable"] == "needs a quantum coprocessor"
    with pytest.raises(aescore.BackendUnavailableError, match="needs a quantum coprocessor") as caught:
        aescore.get_backend("test-unavailable")
    assert isinstance(caught.value, aescore.AesCoreError)


@pytest.mark.usefixtures("isolated_registry")
def test_registered_factory_is_called_once_and_lazily() -> None:
    calls: list[int] = []
    python = aescore.get_backend("python")

    class Renamed(aescore.Backend):
        name = "test-renamed"

        def expand_key(self, key: BytesLike) -> ExpandedKey:
            return python.expand_key(key)

        def ctr_xor(
            self,
            expanded_key: ExpandedKey,
            initial_counter: BytesLike,
            data: BytesLike,
            offset: int = 0,
            out: bytearray | memoryview | None = None,
        ) -> bytes | None:
            return python.ctr_xor(expanded_key, initial_counter, data, offset, out)

    def factory() -> aescore.Backend:
        calls.append(1)
        return Renamed()

    aescore.register_backend("test-renamed", factory)
    assert calls == []
    assert aescore.available_backends()["test-renamed"] is None
    first = aescore.get_backend("test-renamed")
    assert aescore.get_backend("test-renamed") is first
    assert calls == [1]


def test_default_backend_follows_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSTREAM_BACKEND", "python")
    assert aescore.default_backend_name() == "python"
    assert aescore.get_backend() is aescore.get_backend("python")
    monkeypatch.setenv("KEYSTREAM_BACKEND", "no-such-backend")
    with pytest.raises(aescore.UnknownBackendError):
        aescore.get_backend()
    monkeypatch.delenv("KEYSTREAM_BACKEND")
    expected = "aesni" if aescore.available_backends()["aesni"] is None else "python"
    assert aescore.default_backend_name() == expected
    assert aescore.get_backend().name == expected
    monkeypatch.setenv("KEYSTREAM_BACKEND", "  ")  # blank means unset
    assert aescore.default_backend_name() == expected


def test_constant_time_flags() -> None:
    assert aescore.get_backend("python").constant_time is False
    assert "not constant-time" in (aescore.get_backend("python").__doc__ or "")
    if aescore.available_backends()["aesni"] is None:
        assert aescore.get_backend("aesni").constant_time is True


def test_info_names_the_backend(backend: aescore.Backend) -> None:
    info = backend.info()
    assert info["name"] == backend.name
    assert info["constant_time"] is backend.constant_time

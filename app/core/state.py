"""What a running app holds: settings, keystore, key cache, token verifier and the enabled backends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

import aescore
from app.core.config import KNOWN_BACKENDS, Settings
from app.core.errors import BackendUnavailableError, BadRequestError
from app.core.offload import ProcessOffloadBackend
from app.core.security import TokenVerifier
from app.keycache import KeyCache
from app.keystore import KeyStore


@dataclass
class Backends:
    """The enabled backends that can run here, why the others cannot, and the default."""

    usable: dict[str, aescore.Backend]
    reasons: dict[str, str]
    enabled: tuple[str, ...]
    default: str | None
    offload: ProcessOffloadBackend | None = None
    hwsim_preset: str | None = None
    hwsim_registry: CollectorRegistry | None = field(default=None, repr=False)

    def get(self, name: str | None) -> aescore.Backend:
        """The backend a request asked for (``None`` = the default).

        Raises:
            BadRequestError: the name is unknown or the backend is not enabled (lists the enabled ones).
            BackendUnavailableError: the backend is enabled but cannot run here (503, says why).
        """
        chosen = name or self.default
        if chosen is None:
            raise BackendUnavailableError("no enabled backend is available")
        if chosen not in KNOWN_BACKENDS or chosen not in self.enabled:
            raise BadRequestError(f"backend {chosen!r} is not enabled; enabled: {', '.join(self.enabled)}")
        backend = self.usable.get(chosen)
        if backend is None:
            raise BackendUnavailableError(
                f"backend {chosen!r} is unavailable: {self.reasons.get(chosen, '?')}"
            )
        return backend

    def describe(self) -> list[dict[str, Any]]:
        """One entry per known backend for ``GET /v1/backends``."""
        entries: list[dict[str, Any]] = []
        for name in KNOWN_BACKENDS:
            backend = self.usable.get(name)
            entry: dict[str, Any] = {
                "name": name,
                "enabled": name in self.enabled,
                "available": backend is not None,
                "default": name == self.default,
                "reason": None if backend is not None else self.reasons.get(name, "not enabled"),
                "isa": None,
                "preset": None,
                "constant_time": None,
                "info": {},
            }
            if backend is not None:
                info = dict(backend.info())
                entry["info"] = info
                entry["constant_time"] = bool(info.get("constant_time", backend.constant_time))
                entry["isa"] = info.get("isa")
                if name == "hwsim":
                    entry["preset"] = info.get("preset", self.hwsim_preset)
            entries.append(entry)
        return entries


@dataclass
class ServiceState:
    """Everything a request handler needs; stored on ``app.state.keystream`` by the lifespan."""

    settings: Settings
    keystore: KeyStore
    keycache: KeyCache
    tokens: TokenVerifier
    backends: Backends

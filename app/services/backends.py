"""The enabled crypto backends of a running service: which can run here, why the others cannot, the default.

The python backend runs in a process pool (:class:`~app.services.offload.ProcessOffloadBackend`); hwsim
exports its device metrics through a registry of its own.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

import aescore
from app.core.config import KNOWN_BACKENDS, Settings
from app.core.telemetry import HwsimCollector
from app.errors import BackendUnavailableError, BadRequestError
from app.services.offload import ProcessOffloadBackend

logger = logging.getLogger("keystream")


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
                # Worker-process pools rebuilt after a worker died (python); None where there is no pool.
                "restarts": None,
                "info": {},
            }
            if backend is not None:
                info = dict(backend.info())
                entry["info"] = info
                entry["constant_time"] = bool(info.get("constant_time", backend.constant_time))
                entry["isa"] = info.get("isa")
                if name == "hwsim":
                    entry["preset"] = info.get("preset", self.hwsim_preset)
                if isinstance(backend, ProcessOffloadBackend):
                    entry["restarts"] = backend.restarts
            entries.append(entry)
        return entries


def open_backends(settings: Settings) -> Backends:
    """Instantiate the enabled backends; the python backend runs in a process pool.

    A backend that cannot run here is listed with its reason (``/v1/backends``) instead of failing start-up.
    """
    wanted = tuple(settings.enabled_backends or KNOWN_BACKENDS)
    usable: dict[str, aescore.Backend] = {}
    reasons: dict[str, str] = {}
    offload: ProcessOffloadBackend | None = None
    hwsim_registry: CollectorRegistry | None = None
    available = aescore.available_backends()
    for name in KNOWN_BACKENDS:
        if name not in wanted:
            reasons[name] = "not enabled (KEYSTREAM_ENABLED_BACKENDS)"
            continue
        if available.get(name, "not registered") is not None:
            reasons[name] = available.get(name) or "not registered"
            if settings.enabled_backends is not None:  # asked for explicitly, so say why it is missing
                logger.warning("backend %s is enabled but unavailable: %s", name, reasons[name])
            continue
        try:
            if name == "python":
                offload = ProcessOffloadBackend(settings.python_backend_processes)
                usable[name] = offload
            else:
                if name == "hwsim":  # hwsim configures itself from KEYSTREAM_HWSIM_* variables
                    os.environ["KEYSTREAM_HWSIM_PRESET"] = settings.hwsim_preset
                usable[name] = aescore.get_backend(name)
        except (aescore.AesCoreError, ValueError) as exc:  # ValueError: a bad KEYSTREAM_HWSIM_* value
            reasons[name] = str(exc)
            logger.warning("backend %s is enabled but unavailable: %s", name, exc)
            continue
        if name == "hwsim":
            hwsim_registry = _hwsim_registry(usable[name])
    if settings.default_backend is not None:
        default: str | None = settings.default_backend
    else:
        default = next((name for name in KNOWN_BACKENDS if name in usable), None)
    if "python" in usable:
        logger.warning(
            "the python backend is enabled%s: it is NOT constant-time (table-based AES, exposed to "
            "cache-timing attacks on shared hosts) and any encrypt/decrypt token can select it with "
            "?backend=python; "
            "disable it with KEYSTREAM_ENABLED_BACKENDS (e.g. KEYSTREAM_ENABLED_BACKENDS=aesni)",
            " and is the default backend" if default == "python" else "",
        )
    return Backends(
        usable=usable,
        reasons=reasons,
        enabled=wanted,
        default=default,
        offload=offload,
        hwsim_preset=settings.hwsim_preset if "hwsim" in usable else None,
        hwsim_registry=hwsim_registry,
    )


def _hwsim_registry(backend: aescore.Backend) -> CollectorRegistry | None:
    """A registry exporting the simulated device's metrics, when hwsim offers them."""
    try:
        import hwsim
    except ImportError:
        return None
    snapshot = getattr(backend, "snapshot", None)
    to_samples = getattr(hwsim, "prometheus_samples", None)
    if snapshot is None or to_samples is None:
        return None
    registry = CollectorRegistry(auto_describe=False)
    registry.register(HwsimCollector(snapshot, to_samples))
    return registry

"""The registry of backends: names to factories, plugins from the ``aescore.backends`` entry point.

Its own module (re-exported by :mod:`aescore`) so that the modules which accept a backend name
(:class:`aescore.AesGcm`, :class:`aescore.CtrStream`, the pyaes shim) import it without importing the
package that imports them.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from importlib import metadata

from ._interface import Backend
from .errors import AesCoreTypeError, BackendUnavailableError, UnknownBackendError

__all__ = [
    "ENTRY_POINT_GROUP",
    "BackendFactory",
    "available_backends",
    "default_backend_name",
    "get_backend",
    "register_backend",
]

BackendFactory = Callable[[], Backend]

_lock = threading.RLock()
_factories: dict[str, BackendFactory] = {}
_unavailable: dict[str, str] = {}
_instances: dict[str, Backend] = {}
_plugins_loaded = False
ENTRY_POINT_GROUP = "aescore.backends"


def register_backend(
    name: str, factory: BackendFactory | None, unavailable_reason: str | None = None
) -> None:
    """Register a backend under ``name``.

    Args:
        name: the backend's name (``aesni``, ``python``, ``hwsim``...).
        factory: builds the backend (called once, lazily); ``None`` with ``unavailable_reason``.
        unavailable_reason: why the backend cannot run here, or ``None`` when it can.
    """
    with _lock:
        _instances.pop(name, None)
        if unavailable_reason is not None or factory is None:
            _factories.pop(name, None)
            _unavailable[name] = unavailable_reason or "no implementation registered"
        else:
            _unavailable.pop(name, None)
            _factories[name] = factory


def _load_plugins() -> None:
    global _plugins_loaded
    with _lock:
        if _plugins_loaded:
            return
        _plugins_loaded = True
        for entry in metadata.entry_points(group=ENTRY_POINT_GROUP):
            if entry.name in _factories or entry.name in _unavailable:
                continue
            try:
                register = entry.load()
                register()
            except Exception as exc:  # a broken plugin must not break the other backends
                _unavailable[entry.name] = f"plugin failed to load: {type(exc).__name__}: {exc}"


def available_backends() -> dict[str, str | None]:
    """Map every known backend name to ``None`` (usable) or the reason it is unavailable."""
    _load_plugins()
    with _lock:
        result: dict[str, str | None] = {name: None for name in _factories}
        result.update(_unavailable)
        return dict(sorted(result.items()))


def default_backend_name() -> str:
    """``$KEYSTREAM_BACKEND`` if set, else ``aesni`` when available, else ``python``.

    The ``python`` fallback is NOT constant-time (table lookups leak cache timing): name ``aesni`` explicitly
    where real keys are used, so a missing extension fails instead of silently falling back.
    """
    chosen = os.environ.get("KEYSTREAM_BACKEND", "").strip()
    if chosen:
        return chosen
    return "aesni" if available_backends().get("aesni", "missing") is None else "python"


def get_backend(name: str | None = None) -> Backend:
    """Return the (shared, thread-safe) backend called ``name``, or the default backend.

    Raises:
        UnknownBackendError: no backend has that name (a ``ValueError``).
        BackendUnavailableError: the backend cannot run here; the message says why.
    """
    if name is None:
        name = default_backend_name()
    if not isinstance(name, str):
        raise AesCoreTypeError(f"backend name must be a str, got {type(name).__name__}")
    with _lock:
        instance = _instances.get(name)
        if instance is not None:
            return instance
        if name not in _factories and name not in _unavailable:
            _load_plugins()
        if name in _unavailable:
            raise BackendUnavailableError(f"backend {name!r} is unavailable: {_unavailable[name]}")
        factory = _factories.get(name)
        if factory is None:
            known = ", ".join(sorted(set(_factories) | set(_unavailable)))
            raise UnknownBackendError(f"unknown backend {name!r}; known backends: {known}")
        instance = factory()
        _instances[name] = instance
        return instance


def _register_builtin() -> None:
    from .ctr._python import PythonBackend

    register_backend("python", PythonBackend)
    try:
        from .ctr import _aesni
    except ImportError as exc:
        register_backend("aesni", None, f"extension not built ({exc})")
        return
    reason = _aesni.unavailable_reason()
    if reason is not None:
        register_backend("aesni", None, reason)
    else:
        register_backend("aesni", _aesni.AesniBackend)


_register_builtin()

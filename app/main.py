"""The FastAPI application factory.

``create_app(settings)`` builds the app; its lifespan opens the keystore (master key from settings or
``data_dir/master.key``), the key cache, the token verifier and the enabled backends, and closes them again.
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from anyio import to_thread
from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi
from prometheus_client import CollectorRegistry

import aescore
from app.api.routes import batch, crypto, keys, ops, tokens
from app.core.config import KNOWN_BACKENDS, Settings, get_settings
from app.core.errors import install_error_handlers
from app.core.limits import BodyLimitMiddleware
from app.core.logfilter import install_stream_abort_filter
from app.core.offload import ProcessOffloadBackend
from app.core.security import TokenVerifier, install_root_token
from app.core.state import Backends, ServiceState
from app.core.telemetry import HttpMetricsMiddleware, HwsimCollector, release_process_metrics
from app.keycache import KeyCache
from app.keystore import open_keystore_for

logger = logging.getLogger("keystream")


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


def open_state(settings: Settings) -> ServiceState:
    """Open everything a request needs (blocking: call from a thread or at start-up)."""
    keystore = open_keystore_for(settings)
    try:
        root = settings.root_token.get_secret_value() if settings.root_token else None
        if root is not None:
            install_root_token(keystore, root)
        keycache = KeyCache(keystore, settings.key_cache_size, settings.key_metadata_ttl)
        backends = open_backends(settings)
    except BaseException:
        keystore.close()
        raise
    return ServiceState(
        settings=settings,
        keystore=keystore,
        keycache=keycache,
        tokens=TokenVerifier(keystore, settings.token_cache_ttl),
        backends=backends,
    )


def close_state(state: ServiceState) -> None:
    """Stop the python-backend processes and close the keystore."""
    if state.backends.offload is not None:
        state.backends.offload.shutdown()
    state.keycache.clear()
    state.keystore.close()


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the Keystream app.

    Args:
        settings: the settings to use; ``None`` reads them with :func:`get_settings` (environment, ``.env``).

    Raises:
        pydantic.ValidationError: the environment holds an invalid ``KEYSTREAM_*`` value.
    """
    settings = settings if settings is not None else get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state = await to_thread.run_sync(open_state, settings)
        app.state.keystream = state
        logger.info(
            "keystream ready: data_dir=%s default_backend=%s usable=%s",
            settings.data_dir,
            state.backends.default,
            ",".join(state.backends.usable),
        )
        try:
            yield
        finally:
            await to_thread.run_sync(close_state, state)
            release_process_metrics()

    app = FastAPI(
        title="Keystream",
        version="0.1.0",
        description="AES-CTR encryption as a service: streaming sealed (Tink-compatible) and raw CTR.",
        lifespan=lifespan,
    )
    # Routes are matched in order: the hot encrypt/decrypt paths come right after the cheap probes.
    app.include_router(ops.router)
    app.router.routes.extend(crypto.routes)
    app.include_router(batch.router)
    app.include_router(keys.router)
    app.include_router(tokens.router)
    if settings.bench_echo:
        app.include_router(ops.echo_router)
    # Innermost user middleware: auth and a bounded body before FastAPI parses any JSON /v1 body.
    app.add_middleware(
        BodyLimitMiddleware, json_limit=settings.max_json_body, batch_limit=settings.batch_max_bytes
    )
    install_error_handlers(app)
    app.add_middleware(HttpMetricsMiddleware)
    install_stream_abort_filter()

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = get_openapi(
                title=app.title, version=app.version, description=app.description, routes=app.routes
            )
            schema["paths"].update(crypto.openapi_paths())
            schema.setdefault("components", {})["securitySchemes"] = {
                "bearer": {"type": "http", "scheme": "bearer", "bearerFormat": "ks_<id>_<secret>"}
            }
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app

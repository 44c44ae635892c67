"""The FastAPI application factory.

``create_app(settings)`` builds the app; its lifespan opens the keystore (master key from settings or
``data_dir/master.key``), the key cache, the token verifier and the enabled backends
(:func:`app.state.open_state`), and closes them again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from anyio import to_thread
from fastapi import FastAPI

from app.api.console import install_console
from app.api.docs import install_docs
from app.api.errors import install_error_handlers
from app.api.hotpath import KeystreamApp
from app.api.logfilter import install_stream_abort_filter
from app.api.openapi import build_openapi
from app.api.paths import BATCH_PATHS
from app.api.routes import (
    audit,
    auth,
    batch,
    crypto,
    datakey,
    key_export,
    keys,
    mac,
    ops,
    sys,
    tokens,
    tools,
    transit,
    transit_export,
    transit_import,
    transit_keys,
)
from app.core import metric_buffer
from app.core.config import KNOWN_BACKENDS, Settings, get_settings
from app.core.telemetry import release_process_metrics
from app.state import close_state, open_state, wipe_secrets

logger = logging.getLogger("keystream")


def _start_metric_flush(interval: float) -> asyncio.Task[None] | None:
    """Buffer per-request metric updates and apply them every ``interval`` s (0: apply each at once)."""
    metric_buffer.set_buffering(interval > 0)
    if interval <= 0:
        return None
    return asyncio.create_task(metric_buffer.run_periodic_flush(interval), name="keystream-metric-flush")


async def _stop_metric_flush(flusher: asyncio.Task[None] | None) -> None:
    """Stop the periodic flush; its last flush writes this worker's pending updates before it exits."""
    if flusher is None:
        metric_buffer.flush()
        return
    flusher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await flusher


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
        if state.seal.seals_online and isinstance(app, KeystreamApp):
            app.sealable = state.seal  # the sealed gate (app/api/hotpath.py)
        # A multi-worker server's workers unseal and seal together; a key already handed over is applied
        # before this worker serves (off the loop: unsealing reads the keystore and opens the audit log).
        await to_thread.run_sync(sys.start_handover_listener, state)
        # A rotation of the master key that a dead process left unfinished is taken over (after its lease).
        sys.start_rotation_watch(state)
        flusher = _start_metric_flush(settings.metrics_flush_seconds)
        if settings.testing_wipe_on_sigusr2:
            asyncio.get_running_loop().add_signal_handler(signal.SIGUSR2, wipe_secrets, state)
        logger.info(
            "keystream ready: data_dir=%s default_backend=%s usable=%s",
            settings.data_dir,
            state.backends.default,
            ",".join(state.backends.usable),
        )
        try:
            yield
        finally:
            try:
                await to_thread.run_sync(close_state, state)
            finally:
                await _stop_metric_flush(flusher)
                release_process_metrics()

    # KeystreamApp: FastAPI, with POST on the streaming encrypt/decrypt and the batch paths served ahead of
    # FastAPI's router, through the same middleware (app/api/hotpath.py).
    app = KeystreamApp(
        title="Keystream",
        version="0.1.0",
        description="AES-CTR encryption as a service: streaming sealed (Tink-compatible) and raw CTR.",
        lifespan=lifespan,
        docs_url=None,  # served from local assets by install_docs (FastAPI's pages load from a CDN)
        redoc_url=None,
    )
    # Routes are matched in order: the hot encrypt/decrypt paths come first. Matching an included router
    # (FastAPI checks each of its routes) cost ~3% of a 1 KiB encrypt's server time when ``ops`` came
    # first; no ops path has the shape ``/v1/keys/{name}/encrypt`` or ``/decrypt``, so nothing else changes.
    app.router.routes.extend(crypto.routes)
    app.include_router(ops.router)
    app.include_router(batch.router)
    app.include_router(datakey.router)
    app.include_router(mac.router)
    app.include_router(tools.router)
    app.include_router(keys.router)
    app.include_router(key_export.router)
    app.include_router(transit_keys.router)
    app.include_router(transit.router)
    app.include_router(transit_export.router)
    app.include_router(transit_import.router)
    app.include_router(tokens.router)
    app.include_router(auth.router)
    app.include_router(audit.router)
    app.include_router(sys.router)
    install_docs(app)
    if settings.ui:
        install_console(app, settings)
    if settings.bench_echo:
        app.include_router(ops.echo_router)
    install_error_handlers(app)
    # One list of middleware (app/api/middleware): FastAPI's stack and the shortcut's are built from it.
    app.install_middleware(settings)
    install_stream_abort_filter()

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            state = getattr(app.state, "keystream", None)
            backends = list(state.backends.usable) if state is not None else list(KNOWN_BACKENDS)
            app.openapi_schema = build_openapi(app, backends, tuple(BATCH_PATHS.values()))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app

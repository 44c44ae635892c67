"""Operational endpoints: ``/healthz``, ``/readyz``, ``/metrics`` (no token), ``/v1/backends`` (any token),
and ``/bench/echo`` (only when ``KEYSTREAM_BENCH_ECHO=1``; the benchmark's baseline)."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Request
from starlette.requests import ClientDisconnect
from starlette.responses import PlainTextResponse, Response

from app.api import paths
from app.api.deps import PrincipalDep, StateDep
from app.api.openapi import errors
from app.api.streaming import DuplexStreamingResponse
from app.api.strict_json import StrictJsonRoute
from app.audit import AuditUnavailableError
from app.core.secret_memory import core_dumps_disabled, memory_locked
from app.core.telemetry import render_metrics
from app.errors import SealedError, ServiceUnavailableError

router = APIRouter(route_class=StrictJsonRoute, tags=["ops"])
echo_router = APIRouter(route_class=StrictJsonRoute, tags=["bench"])


@router.get(paths.HEALTHZ)
async def healthz() -> dict[str, str]:
    """Liveness: the event loop answers."""
    return {"status": "ok"}


#: What the OpenAPI page says about /readyz (the docstring below is for readers of the code).
READYZ_DESCRIPTION = (
    "Readiness: 503 `sealed` while the server awaits its unseal shares; 200 when the keystore answers "
    "(`keystore: up`), the default backend can run and the audit "
    "log (when set) can be written, else 503 (`audit_unavailable` for the audit log). "
    "`change_log.behind` is how many keystore changes this process has not applied yet, `last_read_ms` the "
    "age of its last successful read of the change log. `memory.core_dumps` is `off` when the process "
    "cannot be dumped (the default), `memory.key_material` `unlocked` when memory for key material could not "
    "be locked (RLIMIT_MEMLOCK too small) and may be swapped out. No URL, path or secret is reported."
)


@router.get(paths.READYZ, responses=errors(503), description=READYZ_DESCRIPTION)
async def readyz(state: StateDep) -> dict[str, Any]:
    """Readiness: the keystore answers (``keystore: up``), how far this process's caches are behind the change
    log (``change_log.behind``, in changes; ``last_read_ms``, since the last successful read), the default
    backend can run, and the audit log (when set) can be written: while it cannot, every ``/v1`` request
    gets 503, so a load balancer should send them elsewhere. ``memory`` says whether this process can be
    dumped and whether its key material is locked in RAM (neither affects readiness). No URL, path or
    secret is reported.

    Raises:
        SealedError: the server is sealed (503 ``sealed``).
        ServiceUnavailableError: the keystore is down or no backend can run (503).
        AuditUnavailableError: the audit log cannot be written (503 ``audit_unavailable``).
    """
    if state.seal.sealed:
        raise SealedError(paths.SEALED_MESSAGE)
    try:
        behind, age = await to_thread.run_sync(state.follower.lag)
    except Exception as exc:
        raise ServiceUnavailableError(f"keystore down ({type(exc).__name__})") from None
    state.backends.get(None)
    if state.audit is not None:
        reason = state.audit.unwritable_reason()
        if reason is not None:
            raise AuditUnavailableError(f"{reason}: /v1 requests are refused until it can be written")
    return {
        "status": "ready",
        "default_backend": state.backends.default,
        "keystore": "up",
        "change_log": {
            "applied": state.follower.applied,
            "behind": behind,
            "last_read_ms": None if age is None else round(age * 1000, 1),
        },
        "memory": {
            "core_dumps": "off" if core_dumps_disabled() else "on",
            "key_material": "locked" if memory_locked() else "unlocked",
        },
    }


@router.get(paths.METRICS, response_class=PlainTextResponse)
async def metrics(state: StateDep) -> Response:
    """Prometheus text exposition (every worker's values in multiprocess mode)."""
    body, content_type = render_metrics(state.backends.hwsim_registry)
    return Response(body, media_type=content_type)


@router.get(paths.BACKENDS)
async def backends(principal: PrincipalDep, state: StateDep) -> dict[str, Any]:
    """Each known backend: enabled, available (or why not), ISA path, hwsim preset, default."""
    return {"default": state.backends.default, "backends": state.backends.describe()}


async def _echo(chunks: AsyncGenerator[bytes, None]) -> AsyncIterator[bytes]:
    try:
        async for chunk in chunks:
            yield chunk
    except ClientDisconnect:
        return
    finally:
        await chunks.aclose()


@echo_router.post(paths.BENCH_ECHO)
async def echo(request: Request) -> Response:
    """Stream the body back unchanged through the same response class as encrypt (benchmark baseline)."""
    return DuplexStreamingResponse(_echo(request.stream()))

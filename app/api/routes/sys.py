"""``/v1/sys``: the seal's state, unsealing with operator shares, and sealing again.

* ``GET /v1/sys/seal-status`` (no token): ``{"sealed", "threshold", "shares", "progress"}`` (and the seal's
  ``type``); a seal that is not unsealed with shares (``file``, ``pkcs11``) reports ``sealed: false`` and
  zeros.
* ``POST /v1/sys/unseal`` (no token, as Vault's: whoever holds a share is an operator) with
  ``{"key": "<share>"}`` adds one share, or with ``{"reset": true}`` forgets those given. At the threshold
  the rebuilt key is checked against the keystore's check value and the server unseals. A refused share is a
  400 ``invalid_share`` naming the problem (malformed, mistyped, foreign, duplicate, wrong), with the
  progress unchanged; the share itself is never echoed, logged or audited. Attempts are rate-limited per
  client address and worker (:class:`~app.services.attempts.AttemptLimiter`: 429 ``too_many_requests``
  with ``Retry-After``).
* ``POST /v1/sys/seal`` (admin token) wipes the master key: the server answers 503 ``sealed`` again.
* ``POST /v1/sys/rotate-master`` (admin token; optional ``{"batch_size": N}``) begins a rotation of the
  master key (a new generation under the same seal) or resumes one that did not finish, and answers 202 with
  the generation at once; the worker rewraps every stored secret in batches in the background
  (:mod:`app.services.master_rotation`). While a rotation holds its lease, another call answers 409
  ``master_rotation_running``. ``GET /v1/sys/rotate-master`` (admin token) says where it stands.

The unseal, the seal and the rotation (its start and its end) each write an ``operator`` line to the audit
log (the unseal's once the log can be opened: its keys are under the master key).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.background import BackgroundTask
from starlette.responses import JSONResponse

from app.api import paths
from app.api.deps import AdminDep, StateDep
from app.api.middleware.audit import write_operator_record
from app.api.openapi import errors
from app.api.strict_json import StrictJsonRoute
from app.audit import AuditUnavailableError
from app.core.master_key_format import MasterKeyError
from app.errors import BadRequestError, InvalidShareError, ValidationError
from app.keystore.generations import DEFAULT_BATCH_SIZE, MasterRotationStatus
from app.seal import SealError
from app.seal.handover import RESET, SEALED, SHARE, UNSEALED
from app.seal.shamir import ShamirSeal
from app.seal.shares import InvalidShareError as ShareRefused
from app.services.attempts import AttemptLimiter
from app.state import ServiceState, start_unsealed, stop_sealed

logger = logging.getLogger("keystream")
router = APIRouter(route_class=StrictJsonRoute, tags=["sys"])

#: A share is 83 characters; room for spaces and line breaks, never a megabyte.
MAX_SHARE_LENGTH = 512
#: Unseal attempts per client address and worker: a burst of this many, then one per refill interval.
UNSEAL_BURST = 20
UNSEAL_REFILL_SECONDS = 3.0
#: Addresses remembered at most (the oldest is forgotten first), so the limiter's memory stays bounded.
UNSEAL_TRACKED_ADDRESSES = 4096
#: The most key versions one batch of a rotation of the master key may rewrap (one short transaction each).
MAX_ROTATION_BATCH_SIZE = 10_000


_LIMITER = AttemptLimiter(
    UNSEAL_BURST, UNSEAL_REFILL_SECONDS, UNSEAL_TRACKED_ADDRESSES, "unseal attempts from this address"
)


class UnsealBody(BaseModel):
    """One share (``key``), or ``reset: true`` to forget the shares given so far."""

    model_config = ConfigDict(extra="forbid", strict=True)

    key: str | None = Field(default=None, max_length=MAX_SHARE_LENGTH, description="One unseal share.")
    reset: bool = Field(default=False, description="Forget the shares given so far.")


class RotateMasterBody(BaseModel):
    """Optional: how many key versions each transaction of the rotation rewraps."""

    model_config = ConfigDict(extra="forbid", strict=True)

    batch_size: int = Field(
        default=DEFAULT_BATCH_SIZE,
        ge=1,
        le=MAX_ROTATION_BATCH_SIZE,
        description="Key versions rewrapped per transaction.",
    )


def seal_status(state: ServiceState) -> dict[str, Any]:
    """The seal-status body of this worker."""
    seal = state.seal
    if not isinstance(seal, ShamirSeal):
        return {"sealed": seal.sealed, "type": seal.kind, "threshold": 0, "shares": 0, "progress": 0}
    status = seal.status()
    return {
        "sealed": status.sealed,
        "type": seal.kind,
        "threshold": status.threshold,
        "shares": status.shares,
        "progress": status.progress,
    }


def _remote(request: Request) -> str | None:
    return request.client.host if request.client else None


def _shamir(state: ServiceState) -> ShamirSeal:
    if not isinstance(state.seal, ShamirSeal):
        raise BadRequestError(
            f"this server's {state.seal.kind} seal is not unsealed or sealed with shares (KEYSTREAM_SEAL)"
        )
    return state.seal


@router.get(paths.SEAL_STATUS)
async def get_seal_status(state: StateDep) -> dict[str, Any]:
    """Whether this server is sealed, how many shares unseal it, how many exist and how many were given."""
    return seal_status(state)


UNSEAL_DESCRIPTION = (
    "No token. Give one unseal share as `key` (or `reset: true` to forget those given). At the threshold the "
    "server unseals. A refused share (malformed, mistyped, from another init, already given, or one that "
    "with the others does not rebuild the master key) is a 400 `invalid_share` and leaves the progress "
    "as it was. Attempts are rate-limited per client address (429 with `Retry-After`)."
)
SEAL_DESCRIPTION = (
    "Admin token. Seal this server again: its master key is wiped and every route but the seal routes, "
    "/healthz, /readyz and /metrics answers 503 `sealed` until the threshold of shares is given again."
)


@router.post(paths.UNSEAL, responses=errors(400, 422, 429), description=UNSEAL_DESCRIPTION)
async def unseal(body: UnsealBody, request: Request, state: StateDep) -> dict[str, Any]:
    """Give one unseal share (or reset); at the threshold the server unseals.

    Raises:
        InvalidShareError: the share is refused (400 ``invalid_share``), progress unchanged.
        BadRequestError: this server's seal takes no shares.
        ValidationError: neither ``key`` nor ``reset`` (422).
        TooManyRequestsError: this address made too many attempts (429).
    """
    seal = _shamir(state)
    _LIMITER.attempt(_remote(request) or "unknown")
    if body.reset:
        seal.reset()
        if state.handover is not None:
            state.handover.announce_reset()
        return seal_status(state)
    if body.key is None:
        raise ValidationError('give one share as "key", or "reset": true')
    if not seal.sealed:
        return seal_status(state)
    try:
        rebuilt = await to_thread.run_sync(seal.submit_share, body.key)
    except ShareRefused as exc:
        if exc.reason == "unsealed":  # another request completed the threshold meanwhile
            return seal_status(state)
        raise InvalidShareError(str(exc)) from None
    if rebuilt is None:
        if state.handover is not None:
            state.handover.announce_share(body.key)  # the other workers count it too
        return seal_status(state)
    if state.handover is not None:
        state.handover.announce_unsealed(rebuilt)  # the supervisor hands it to the other workers
    del rebuilt
    await to_thread.run_sync(start_unsealed, state)
    write_operator_record(state.audit, {"operation": "unseal", "remote_address": _remote(request)})
    return seal_status(state)


@router.post(paths.SEAL, responses=errors(400, 401, 403), description=SEAL_DESCRIPTION)
async def seal(request: Request, principal: AdminDep, state: StateDep) -> JSONResponse:
    """Seal this server again: the master key is wiped; unsealing needs the threshold of shares again.

    Raises:
        BadRequestError: this server's seal takes no shares (it could not be unsealed again).
    """
    _shamir(state)
    record = {"operation": "seal", "remote_address": _remote(request), "token_id": principal.token_id}
    write_operator_record(state.audit, record)
    log = await to_thread.run_sync(stop_sealed, state)
    if state.handover is not None:
        state.handover.announce_sealed()  # the supervisor seals the other workers and forgets the key
    closing = BackgroundTask(log.close) if log is not None else None
    return JSONResponse(seal_status(state), background=closing)


ROTATE_MASTER_DESCRIPTION = (
    "Admin token. Begin a rotation of the master key: a new generation under the same seal, under which new "
    "key versions are wrapped at once; every stored secret is then rewrapped in batches in the background "
    "while the service keeps serving (ciphertexts are untouched). A rotation that did not finish (its "
    "process died) is resumed instead (`resumed: true`). 202 with the generation; 409 "
    "`master_rotation_running` while a rotation holds its lease."
)


@router.post(
    paths.ROTATE_MASTER,
    status_code=202,
    responses=errors(401, 403, 409, 422),
    description=ROTATE_MASTER_DESCRIPTION,
)
async def rotate_master(
    request: Request, principal: AdminDep, state: StateDep, body: RotateMasterBody | None = None
) -> JSONResponse:
    """Begin (or resume) a rotation of the master key; it runs on in the background.

    Raises:
        MasterRotationRunningError: a rotation runs already (409).
    """
    batch_size = DEFAULT_BATCH_SIZE if body is None else body.batch_size
    audit = state.audit
    finished = _rotation_finished(state)
    status = await to_thread.run_sync(state.rotation.start, state.keystore, batch_size, finished)
    record = {
        "operation": "rotate_master",
        "phase": "start",
        "generation": status.generation,
        "resumed": status.resumed,
        "remote_address": _remote(request),
        "token_id": principal.token_id,
    }
    write_operator_record(audit, record)
    return JSONResponse(status.to_json(), status_code=202)


def _rotation_finished(state: ServiceState) -> Callable[[MasterRotationStatus], None]:
    """What a rotation's thread calls at its end: the ``finish`` line in this worker's audit log as it is
    then (the server may have been sealed and unsealed meanwhile)."""

    def finished(status: MasterRotationStatus) -> None:
        record = {"operation": "rotate_master", "phase": "finish", "generation": status.generation}
        try:
            write_operator_record(state.audit, {**record, "rewrapped": status.rewrapped})
        except AuditUnavailableError as exc:
            logger.error("cannot audit the end of the master key rotation: %s", exc)

    return finished


def start_rotation_watch(state: ServiceState) -> None:
    """Resume, in the background, a rotation of the master key that a process which died left unfinished
    (:meth:`~app.services.master_rotation.MasterRotationRunner.watch`), with its audit lines: a ``start``
    line with ``resumed`` and ``automatic`` true, then the usual ``finish`` line."""

    def resumed(status: MasterRotationStatus) -> None:
        record = {
            "operation": "rotate_master",
            "phase": "start",
            "generation": status.generation,
            "resumed": True,
            "automatic": True,
        }
        try:
            write_operator_record(state.audit, record)
        except AuditUnavailableError as exc:
            logger.error("cannot audit the resumed master key rotation: %s", exc)

    state.rotation.watch(
        state.keystore,
        batch_size=DEFAULT_BATCH_SIZE,
        sealed=lambda: state.seal.sealed,
        on_resume=resumed,
        on_finish=_rotation_finished(state),
    )


@router.get(paths.ROTATE_MASTER, responses=errors(401, 403))
async def get_master_rotation(principal: AdminDep, state: StateDep) -> dict[str, Any]:
    """Admin token. Where the master key's rotation stands: the newest generation, whether blobs of older
    ones remain (`rotating`), how many were rewrapped, when it started and finished."""
    del principal
    status = await to_thread.run_sync(state.keystore.master_rotation_status)
    return status.to_json()


def start_handover_listener(state: ServiceState) -> None:
    """Follow this worker's channel to its supervisor: unseal with the key another worker rebuilt (checked
    against the keystore first), or seal when another worker sealed. Each writes an ``operator`` line to this
    worker's audit file. Nothing when the worker has no channel.

    Messages already waiting are applied here, before the worker serves its first request: a worker the
    supervisor starts while the server is unsealed finds the key in its channel and so never answers
    ``sealed`` (a replacement after a crash comes back unsealed, not sealed for a moment). Later messages are
    followed in a daemon thread.
    """
    handover = state.handover
    seal = state.seal
    if handover is None or not isinstance(seal, ShamirSeal):
        return

    def apply(kind: bytes, key: bytes | memoryview | None) -> None:
        try:
            if kind == SHARE and key is not None:
                rebuilt = _count_share(seal, bytes(key).decode("ascii"))
                if rebuilt is not None:  # shares reached two workers at once: this one completed
                    handover.announce_unsealed(rebuilt)
                    del rebuilt
                    if start_unsealed(state):
                        write_operator_record(state.audit, {"operation": "unseal", "handed_over": True})
            elif kind == RESET:
                seal.reset()
            elif kind == UNSEALED and key is not None:
                if seal.sealed:
                    seal.unseal_with_key(key)
                del key
                if start_unsealed(state):
                    write_operator_record(state.audit, {"operation": "unseal", "handed_over": True})
            elif kind == SEALED and not seal.sealed:
                write_operator_record(state.audit, {"operation": "seal", "handed_over": True})
                log = stop_sealed(state)
                if log is not None:
                    log.close()
        except (SealError, MasterKeyError, AuditUnavailableError) as exc:
            logger.error("cannot follow the other workers' seal state: %s", exc)

    def receive() -> tuple[bytes, bytes | memoryview | None] | None:
        """The next message; ``None`` once the channel closed (one not of this channel is skipped)."""
        while True:
            try:
                return handover.receive()
            except EOFError:
                return None
            except ValueError as exc:
                logger.warning("handover channel: %s", exc)

    while handover.waiting():
        message = receive()
        if message is None:
            return
        apply(*message)

    def follow() -> None:
        while (message := receive()) is not None:
            apply(*message)

    threading.Thread(target=follow, name="seal-handover", daemon=True).start()


def _count_share(seal: ShamirSeal, share: str) -> memoryview | None:
    """Count a share another worker accepted; one this worker has already (or refuses) changes nothing."""
    if not seal.sealed:
        return None
    try:
        return seal.submit_share(share)
    except ShareRefused:
        return None

"""What a running app holds (:class:`ServiceState`), how the lifespan opens and closes it, and what changes
when a sealed server is unsealed (:func:`start_unsealed`) or sealed again (:func:`stop_sealed`).

A server whose seal starts sealed (``shamir``) opens the keystore, the caches and the token verifier, but
not what needs the master key: the audit keys and the audit log (whose keys are wrapped under it) and the
automatic rotations. Every route but the few :data:`app.api.paths.OPEN_WHILE_SEALED` answers 503
``sealed`` meanwhile (:class:`app.api.hotpath.KeystreamApp`).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from app.audit import AuditKeys, AuditLog, audit_keys_for, worker_path
from app.core.config import Settings
from app.core.metrics import (
    BATCH_BUFFER_BYTES,
    BATCH_BUFFER_LIMIT_BYTES,
    CHANGE_LOG_READ_TIMESTAMP,
    SEALED,
)
from app.core.secret_memory import disable_core_dumps
from app.keycache import KeyCache
from app.keystore import KeyStore, open_keystore_for
from app.seal import Seal, open_seal
from app.seal.handover import Handover, installed
from app.services.auto_rotate import AutoRotator
from app.services.backends import Backends, open_backends
from app.services.budget import ByteBudget
from app.services.coherence import ChangeFollower
from app.services.identity import LoginLimits, login_limiter
from app.services.jwks import JwksCache
from app.services.master_rotation import MasterRotationRunner
from app.services.security import TokenVerifier, install_root_token


@dataclass
class ServiceState:
    """Everything a request handler needs; stored on ``app.state.keystream`` by the lifespan."""

    settings: Settings
    #: The one holder of the master key: the keystore wraps and unwraps through it.
    seal: Seal
    keystore: KeyStore
    keycache: KeyCache
    tokens: TokenVerifier
    backends: Backends
    #: Batch body bytes buffered at once across requests (``batch_buffer_budget_bytes``).
    batch_budget: ByteBudget
    follower: ChangeFollower
    auto_rotator: AutoRotator
    #: The audit hash and chain keys (from the seal; ``/v1/audit/hash`` works without a log); ``None`` while
    #: the seal is sealed.
    audit_keys: AuditKeys | None
    #: The audit log writer; ``None`` when ``audit_log`` is unset, or while the seal is sealed.
    audit: AuditLog | None = None
    #: This worker's channel to its supervisor, for a seal that seals online in a multi-worker server: the
    #: other workers unseal and seal with this one (:mod:`app.seal.handover`).
    handover: Handover | None = None
    #: Serialises unsealing and sealing (a request and the handover listener may race).
    transitions: threading.Lock = field(default_factory=threading.Lock)
    #: The rotation of the master key this worker runs, if any (``POST /v1/sys/rotate-master``).
    rotation: MasterRotationRunner = field(default_factory=MasterRotationRunner)
    #: The JWT issuers' key sets this worker fetched (JWT login, :mod:`app.services.identity`).
    jwks: JwksCache = field(default_factory=JwksCache)
    #: Login attempts per client address, and per address and role (429 beyond them).
    login_attempts: LoginLimits = field(default_factory=login_limiter)


def open_state(settings: Settings) -> ServiceState:
    """Open everything a request needs, start following the change log and checking for keys due for
    automatic rotation (blocking: call from a thread).

    Raises:
        MasterKeyError: the seal cannot be opened or does not open the keystore.
        KeystoreSchemaError: the database comes from a newer release.
        ServiceUnavailableError: the keystore cannot be opened.
        ValueError: ``root_token`` is not of the form ``ks_<id>_<secret>``.
    """
    if not settings.allow_core_dumps:  # before the master key is read: no image of this process holds it
        disable_core_dumps()
    seal = open_seal(settings)
    try:
        keystore = open_keystore_for(settings, seal)
    except BaseException:
        seal.close()
        raise
    try:
        audit_keys = None if seal.sealed else audit_keys_for(seal, keystore.audit_key_material())
        audit = None if audit_keys is None else open_audit_log(settings, audit_keys)
    except BaseException:
        keystore.close()
        seal.close()
        raise
    try:
        root = settings.root_token.get_secret_value() if settings.root_token else None
        if root is not None:
            install_root_token(keystore, root)
        keycache = KeyCache(
            keystore,
            settings.key_cache_size,
            settings.key_metadata_ttl,
            max_decrypt_versions=settings.max_decrypt_versions,
        )
        tokens = TokenVerifier(keystore, settings.token_cache_ttl)
        follower = ChangeFollower(
            keystore,
            keycache,
            tokens,
            interval=settings.change_poll_interval,
            trust_seconds=settings.cache_trust_seconds,
            on_read=CHANGE_LOG_READ_TIMESTAMP.labels(worker=str(settings.worker_index or 0)).set,
        )
        auto_rotator = AutoRotator(keystore, keycache, interval=settings.auto_rotate_check_interval)
        backends = open_backends(settings)
        follower.start()
        if not seal.sealed:
            auto_rotator.start()
        SEALED.set(1 if seal.sealed else 0)
        BATCH_BUFFER_LIMIT_BYTES.set(settings.batch_buffer_budget_bytes)
    except BaseException:
        keystore.close()
        seal.close()
        if audit is not None:
            audit.close()
        raise
    return ServiceState(
        settings=settings,
        seal=seal,
        keystore=keystore,
        keycache=keycache,
        tokens=tokens,
        backends=backends,
        batch_budget=ByteBudget(
            settings.batch_buffer_budget_bytes, settings.batch_buffer_wait_seconds, BATCH_BUFFER_BYTES.set
        ),
        follower=follower,
        auto_rotator=auto_rotator,
        audit_keys=audit_keys,
        audit=audit,
        handover=installed() if seal.seals_online else None,
    )


def open_audit_log(settings: Settings, keys: AuditKeys) -> AuditLog | None:
    """The audit log writer ``settings.audit_log`` asks for (this worker's own file), or ``None``."""
    if settings.audit_log is None:
        return None
    return AuditLog(
        worker_path(settings.audit_log, settings.worker_index),
        keys.chain_key,
        max_bytes=settings.audit_log_max_bytes,
        keep=settings.audit_log_keep,
    )


def wipe_secrets(state: ServiceState) -> None:
    """Zero every unwrapped key version this process caches and close the seal (zeroing the file seal's
    master key): what sealing does to memory. The process cannot serve keys afterwards.

    Expanded key schedules go with the cache entries (aescore zeroes them when freed); requests still in
    flight may keep a few alive until they finish. The python backend's shared key slots are zeroed and its
    worker processes stopped (their schedules are Python ints, which only their exit removes).
    """
    state.keycache.wipe()
    if state.backends.offload is not None:
        state.backends.offload.wipe()
    state.keystore.keyring.close()
    state.seal.close()


def start_unsealed(state: ServiceState) -> bool:
    """What a server unsealed a moment ago starts: the audit keys and log, the automatic rotations (blocking:
    call from a thread). Idempotent: a second call (the handover racing a request) does nothing.

    Returns:
        True when this call started them.

    Raises:
        MasterKeyError: the keystore's audit key material does not unwrap under the seal.
        AuditUnavailableError: the audit log cannot be opened.
    """
    with state.transitions:
        if state.audit_keys is not None or state.seal.sealed:
            return False
        keys = audit_keys_for(state.seal, state.keystore.audit_key_material())
        state.audit = open_audit_log(state.settings, keys)
        state.audit_keys = keys
        state.auto_rotator.start()
        SEALED.set(0)
        return True


def stop_sealed(state: ServiceState) -> AuditLog | None:
    """Seal the server: wipe the master key, drop the expanded keys and the audit keys, stop the automatic
    rotations (blocking: call from a thread).

    Returns:
        The audit log writer this worker used, for the caller to close once the request that sealed has its
        record (requests already past the gate may still write to it).
    """
    state.rotation.stop()
    with state.transitions:
        state.seal.close()
        state.keystore.keyring.close()
        SEALED.set(1)
        state.auto_rotator.stop()
        state.keycache.wipe()
        if state.backends.offload is not None:
            state.backends.offload.wipe()
        log, state.audit, state.audit_keys = state.audit, None, None
        return log


def close_state(state: ServiceState) -> None:
    """Stop the automatic rotations, the change-log follower and the python-backend processes; close the
    keystore; zero the cached key versions and the master key (:func:`wipe_secrets`)."""
    state.rotation.close()
    state.auto_rotator.stop()
    state.follower.stop()
    if state.backends.offload is not None:
        state.backends.offload.shutdown()
    state.keystore.close()
    wipe_secrets(state)
    if state.audit is not None:
        state.audit.close()

"""What a running app holds (:class:`ServiceState`), and how the lifespan opens and closes it."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.config import Settings
from app.keycache import KeyCache
from app.keystore import KeyStore, open_keystore_for
from app.services.auto_rotate import AutoRotator
from app.services.backends import Backends, open_backends
from app.services.budget import ByteBudget
from app.services.coherence import ChangeFollower
from app.services.security import TokenVerifier, install_root_token


@dataclass
class ServiceState:
    """Everything a request handler needs; stored on ``app.state.keystream`` by the lifespan."""

    settings: Settings
    keystore: KeyStore
    keycache: KeyCache
    tokens: TokenVerifier
    backends: Backends
    #: Batch body bytes buffered at once across requests (``batch_buffer_budget_bytes``).
    batch_budget: ByteBudget
    follower: ChangeFollower
    auto_rotator: AutoRotator


def open_state(settings: Settings) -> ServiceState:
    """Open everything a request needs, start following the change log and checking for keys due for
    automatic rotation (blocking: call from a thread).

    Raises:
        MasterKeyError: the master key is malformed or does not open the keystore.
        KeystoreSchemaError: the database comes from a newer release.
        ServiceUnavailableError: the keystore cannot be opened.
        ValueError: ``root_token`` is not of the form ``ks_<id>_<secret>``.
    """
    keystore = open_keystore_for(settings)
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
        )
        auto_rotator = AutoRotator(keystore, keycache, interval=settings.auto_rotate_check_interval)
        backends = open_backends(settings)
        follower.start()
        auto_rotator.start()
    except BaseException:
        keystore.close()
        raise
    return ServiceState(
        settings=settings,
        keystore=keystore,
        keycache=keycache,
        tokens=tokens,
        backends=backends,
        batch_budget=ByteBudget(settings.batch_buffer_budget_bytes, settings.batch_buffer_wait_seconds),
        follower=follower,
        auto_rotator=auto_rotator,
    )


def close_state(state: ServiceState) -> None:
    """Stop the automatic rotations, the change-log follower and the python-backend processes; close the
    keystore."""
    state.auto_rotator.stop()
    state.follower.stop()
    if state.backends.offload is not None:
        state.backends.offload.shutdown()
    state.keycache.clear()
    state.keystore.close()

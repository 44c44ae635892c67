"""The token verifier's caches and its event-loop entry: unknown ids are remembered for a short bound, and a
keystore read never runs on the event loop (:meth:`TokenVerifier.authenticate`)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from app.errors import TokenExpiredError, UnauthorizedError
from app.keystore import KeyStore, TokenRecord, open_keystore
from app.services import security
from app.services.security import TokenVerifier, new_token

UNKNOWN = "Bearer ks_00000000deadbeef_not-a-real-secret-at-all-0123456789"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class CountingStore:
    """A keystore whose token reads are counted and may be held up (``gate``): a slow database."""

    def __init__(self, store: KeyStore) -> None:
        self.store = store
        self.reads = 0
        self.threads: list[str] = []
        self.gate: threading.Event | None = None

    def get_token(self, token_id: str) -> TokenRecord:
        self.reads += 1
        self.threads.append(threading.current_thread().name)
        if self.gate is not None:
            assert self.gate.wait(5.0)
        return self.store.get_token(token_id)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CountingStore]:
    keystore = open_keystore(tmp_path, bytes(32))
    try:
        yield CountingStore(keystore)
    finally:
        keystore.close()


def verifier(store: CountingStore, clock: Clock, ttl: float = 60.0) -> TokenVerifier:
    return TokenVerifier(store, ttl, clock=clock)  # type: ignore[arg-type]


def test_an_unknown_id_is_read_once_per_bound(store: CountingStore) -> None:
    clock = Clock()
    tokens = verifier(store, clock)
    for _ in range(3):
        with pytest.raises(UnauthorizedError, match="invalid token"):
            tokens.verify(UNKNOWN)
    assert store.reads == 1
    clock.now += security.UNKNOWN_TOKEN_SECONDS
    with pytest.raises(UnauthorizedError):
        tokens.verify(UNKNOWN)
    assert store.reads == 2


def test_an_unknown_id_is_never_remembered_longer_than_the_token_ttl(store: CountingStore) -> None:
    clock = Clock()
    tokens = verifier(store, clock, ttl=0.0)  # the tests' setting: every check reads the keystore
    for _ in range(2):
        with pytest.raises(UnauthorizedError):
            tokens.verify(UNKNOWN)
    assert store.reads == 2


def test_a_token_created_after_its_id_was_tried_works_once_forgotten(store: CountingStore) -> None:
    clock = Clock()
    tokens = verifier(store, clock)
    token, record = new_token(("encrypt",), ("*",))
    token_id = record.token_id
    with pytest.raises(UnauthorizedError):
        tokens.verify(f"Bearer ks_{token_id}_{'w' * 43}")
    assert store.reads == 1
    store.store.create_token(record)
    with pytest.raises(UnauthorizedError):
        tokens.verify(f"Bearer {token}")  # still remembered as unknown
    tokens.forget(token_id)  # what the change log's token_created (or the creating route) does
    assert tokens.verify(f"Bearer {token}").token_id == token_id


def test_unknown_ids_are_not_trusted_past_the_trust_bound(store: CountingStore) -> None:
    clock = Clock()
    tokens = verifier(store, clock)
    with pytest.raises(UnauthorizedError):
        tokens.verify(UNKNOWN)
    tokens.trust_until(clock.now)  # the change log could not be read: caches are no longer vouched for
    with pytest.raises(UnauthorizedError):
        tokens.verify(UNKNOWN)
    assert store.reads == 2


def test_random_ids_cannot_push_out_real_tokens(store: CountingStore) -> None:
    clock = Clock()
    tokens = verifier(store, clock)
    token, record = new_token(("encrypt",), ("*",))
    store.store.create_token(record)
    tokens.verify(f"Bearer {token}")
    for number in range(security.MAX_CACHED_TOKENS + 10):
        with pytest.raises(UnauthorizedError):
            tokens.verify(f"Bearer ks_{number:016x}_secret")
    reads = store.reads
    tokens.verify(f"Bearer {token}")
    assert store.reads == reads  # the real token's record is still cached
    assert len(tokens._unknown) <= security.MAX_CACHED_TOKENS


@pytest.mark.serial  # event-loop lag under 0.25 s: alone
async def test_authenticate_reads_the_keystore_off_the_event_loop(store: CountingStore) -> None:
    """A slow keystore read (here: held for 0.5 s) must not stall the loop: a ticker keeps running."""
    tokens = verifier(store, Clock())
    token, record = new_token(("encrypt",), ("*",))
    store.store.create_token(record)
    store.gate = threading.Event()
    lags: list[float] = []

    async def ticker() -> None:
        for _ in range(25):
            before = time.monotonic()
            await anyio.sleep(0.02)
            lags.append(time.monotonic() - before - 0.02)

    async with anyio.create_task_group() as group:
        group.start_soon(ticker)
        threading.Timer(0.5, store.gate.set).start()
        principal = await tokens.authenticate(f"Bearer {token}")
    assert principal.token_id == record.token_id
    assert store.threads and threading.main_thread().name not in store.threads
    assert max(lags) < 0.25, lags  # the read held 0.5 s; the loop went on (slack for a loaded machine)
    store.gate = None
    reads = store.reads
    assert (await tokens.authenticate(f"Bearer {token}")).token_id == record.token_id
    assert store.reads == reads  # a hit is answered on the loop, no read


def _outcome(call: object) -> object:
    try:
        return call()  # type: ignore[operator]
    except Exception as exc:
        return (type(exc), str(exc))


@pytest.mark.parametrize(
    "shape",
    [
        "Bearer {token}",
        "bearer {token}",
        "BEARER   {token}  ",
        "Bearer\t{token}",
        " Bearer {token}",
        "Token {token}",
        "Bearer",
        "Bearer ",
        "",
        "{token}",
        "Bearer {token}x!",
        "Bearer ks_0123_short",
        "Bearer {wrong}",
        "Bearer {unknown}",
    ],
)
async def test_authenticate_answers_as_verify(store: CountingStore, shape: str) -> None:
    """authenticate() reads the usual header itself: every answer (principal or error and message) must
    stay verify()'s."""
    tokens = verifier(store, Clock())
    token, record = new_token(("encrypt",), ("*",))
    store.store.create_token(record)
    wrong = token[:-1] + ("A" if not token.endswith("A") else "B")
    authorization = shape.format(token=token, wrong=wrong, unknown=UNKNOWN.removeprefix("Bearer "))
    expected = _outcome(lambda: tokens.verify(authorization))
    got: object
    try:
        got = await tokens.authenticate(authorization)
    except Exception as exc:
        got = (type(exc), str(exc))
    assert got == expected


async def test_authenticate_without_a_header_is_refused_as_by_verify(store: CountingStore) -> None:
    tokens = verifier(store, Clock())
    with pytest.raises(UnauthorizedError, match="missing bearer token"):
        await tokens.authenticate(None)


async def test_the_cached_check_answers_only_from_the_cache_and_checks_as_the_read(
    store: CountingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """authenticate_cached (the streaming routes' check without a coroutine) answers only what the cache
    holds: a token never read, revoked (forgotten) or past the trust bound is ``None`` (the caller awaits
    authenticate, which reads the keystore); a cached record is checked as a read one (secret, expiry)."""
    clock = Clock()
    tokens = verifier(store, clock)
    token, record = new_token(("encrypt",), ("*",), ttl_seconds=3600)
    store.store.create_token(record)
    header = f"Bearer {token}"
    assert tokens.authenticate_cached(header) is None  # never read
    assert store.reads == 0
    principal = await tokens.authenticate(header)
    assert store.reads == 1
    assert tokens.authenticate_cached(header) is principal  # cached: no read
    assert store.reads == 1
    wrong = token[:-1] + ("A" if not token.endswith("A") else "B")
    with pytest.raises(UnauthorizedError, match="invalid token"):
        tokens.authenticate_cached(f"Bearer {wrong}")  # a cached record, a wrong secret
    later = security.token_clock() + timedelta(hours=2)
    monkeypatch.setattr(security, "token_clock", lambda: later)
    with pytest.raises(TokenExpiredError):
        tokens.authenticate_cached(header)  # expired while its record is cached
    monkeypatch.undo()
    tokens.trust_until(clock.now)  # the change log could not be read: the cache no longer answers
    assert tokens.authenticate_cached(header) is None
    tokens.trust_until(math.inf)
    assert tokens.authenticate_cached(header) is principal
    store.store.delete_token(record.token_id)
    tokens.forget(record.token_id)  # revoked: what the change log (or the deleting route) does
    assert tokens.authenticate_cached(header) is None
    with pytest.raises(UnauthorizedError, match="invalid token"):
        await tokens.authenticate(header)  # the read says it is gone
    with pytest.raises(UnauthorizedError, match="invalid token"):
        tokens.authenticate_cached(header)  # now cached as unknown: refused without a read
    assert store.reads == 2


def test_the_cached_check_refuses_a_malformed_header_as_verify(store: CountingStore) -> None:
    tokens = verifier(store, Clock())
    for header in (None, "", "Token x", "Bearer ks_0123_short"):
        with pytest.raises(UnauthorizedError) as caught:
            tokens.authenticate_cached(header)
        assert _outcome(lambda header=header: tokens.verify(header)) == (UnauthorizedError, str(caught.value))
    assert store.reads == 0

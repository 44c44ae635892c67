"""A client that logs in by itself (``KEYSTREAM_ROLE`` and ``KEYSTREAM_JWT_FILE``), sync and async, against a
real server: the first call logs in, the file is read again at the next login (the kubelet rotates it), the
next login comes before the token expires, a 401 logs in again, threads and tasks share one login, and a bad
file is a clear error that holds no JWT."""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from jwt_login import ROLE, configure, k8s_jwt, write_role
from keystream_client import (
    AsyncKeystreamClient,
    KeystreamAPIError,
    KeystreamClient,
    KeystreamLoginError,
    Token,
)
from keystream_client._autologin import REFRESH_FRACTION
from keystream_server import RunningServer

#: A role whose tokens live a few seconds, so a test sees the login that comes before the expiry.
SHORT_ROLE = "client-tests-short"
SHORT_TTL = 6


@pytest.fixture(scope="module", autouse=True)
def configured(server: RunningServer) -> None:
    configure(server.url, server.token)
    write_role(server.url, server.token, SHORT_ROLE, ttl=SHORT_TTL)


@pytest.fixture
def environment(server: RunningServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The environment of a pod: the URL, no token, and a JWT file (returned; the test fills it)."""
    for name in [name for name in os.environ if name.startswith("KEYSTREAM_")]:
        monkeypatch.delenv(name)
    jwt_file = tmp_path / "keystream"
    monkeypatch.setenv("KEYSTREAM_URL", server.url)
    monkeypatch.setenv("KEYSTREAM_JWT_FILE", str(jwt_file))
    return jwt_file


def subject() -> str:
    """A service-account subject no other test logs in as."""
    return f"system:serviceaccount:apps:{uuid.uuid4().hex[:12]}"


def rotate(jwt_file: Path, sub: str) -> str:
    """Replace the file's JWT at once, as the kubelet does (a rename, never a half-written file)."""
    jwt = k8s_jwt(sub=sub)
    partial = jwt_file.with_suffix(".new")
    partial.write_text(jwt + "\n")
    partial.replace(jwt_file)
    return jwt


def issued_to(admin: KeystreamClient, sub: str) -> list[Token]:
    """The tokens logins issued to ``sub``."""
    return [token for token in admin.list_tokens() if token.metadata.get("subject") == sub]


def test_the_file_is_read_again_and_the_login_comes_before_the_expiry(
    environment: Path, monkeypatch: pytest.MonkeyPatch, client: KeystreamClient
) -> None:
    monkeypatch.setenv("KEYSTREAM_ROLE", SHORT_ROLE)
    first_subject, second_subject = subject(), subject()
    rotate(environment, first_subject)
    with KeystreamClient() as ks:
        started = time.monotonic()
        first = ks.token_self()
        assert first.metadata == {"role": SHORT_ROLE, "subject": first_subject}
        rotate(environment, second_subject)
        assert ks.token_self().token_id == first.token_id  # no login while the token is fresh
        time.sleep(max(0.0, started + SHORT_TTL * REFRESH_FRACTION + 0.5 - time.monotonic()))
        second = ks.token_self()
    assert second.metadata["subject"] == second_subject and second.token_id != first.token_id
    # The service's own clock: the second token was issued while the first still had time to live.
    assert first.expires_at is not None and second.created_at < first.expires_at
    assert len(issued_to(client, first_subject)) == len(issued_to(client, second_subject)) == 1


def test_a_401_logs_in_again_and_repeats_the_call(
    environment: Path, monkeypatch: pytest.MonkeyPatch, client: KeystreamClient
) -> None:
    monkeypatch.setenv("KEYSTREAM_ROLE", ROLE)
    sub = subject()
    rotate(environment, sub)
    client.create_key(key := f"login-auto-{uuid.uuid4().hex[:8]}")
    with KeystreamClient() as ks:
        first = ks.token_self()
        client.delete_token(first.token_id)  # revoked: the next call is answered 401 once
        second = ks.token_self()
        assert second.token_id != first.token_id and second.metadata["subject"] == sub
        assert ks.encrypt(key, b"through the logged-in token").key_version == 1
        # A stream is not repeated after a 401: it raises, and the next call logs in again.
        client.delete_token(second.token_id)
        with pytest.raises(KeystreamAPIError) as refused:
            ks.encrypt(key, b"refused once")
        assert refused.value.status == 401
        assert ks.encrypt(key, b"after the next login").key_version == 1
    # The two revoked tokens are gone; the third login's is the one left.
    left = issued_to(client, sub)
    assert len(left) == 1 and left[0].token_id not in (first.token_id, second.token_id)


def test_threads_share_one_login(
    environment: Path, monkeypatch: pytest.MonkeyPatch, client: KeystreamClient
) -> None:
    monkeypatch.setenv("KEYSTREAM_ROLE", ROLE)
    sub = subject()
    rotate(environment, sub)
    with KeystreamClient() as ks, ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(lambda _: ks.token_self().token_id, range(32)))
    assert len(ids) == 1 and [token.token_id for token in issued_to(client, sub)] == list(ids)


async def test_async_tasks_share_one_login_and_log_in_again_before_the_expiry(
    environment: Path, monkeypatch: pytest.MonkeyPatch, client: KeystreamClient
) -> None:
    monkeypatch.setenv("KEYSTREAM_ROLE", SHORT_ROLE)
    first_subject, second_subject = subject(), subject()
    rotate(environment, first_subject)
    async with AsyncKeystreamClient() as ks:
        started = time.monotonic()
        first = await asyncio.gather(*(ks.token_self() for _ in range(16)))
        rotate(environment, second_subject)
        await asyncio.sleep(max(0.0, started + SHORT_TTL * REFRESH_FRACTION + 0.5 - time.monotonic()))
        second = await asyncio.gather(*(ks.token_self() for _ in range(16)))
    assert len({token.token_id for token in first}) == len({token.token_id for token in second}) == 1
    assert first[0].metadata["subject"] == first_subject and second[0].metadata["subject"] == second_subject
    assert first[0].expires_at is not None and second[0].created_at < first[0].expires_at
    assert len(issued_to(client, first_subject)) == len(issued_to(client, second_subject)) == 1


@pytest.mark.parametrize(
    ("content", "wording"),
    [
        (None, "cannot be read: No such file or directory"),
        (b"", "is empty"),
        (b"\n  \n", "is empty"),
        (b"ks_secret-looking-garbage", "does not hold a JWT"),
        (b"a.b.c$", "does not hold a JWT"),
        (b"x" * (17 * 1024), "is over 16384 bytes"),
    ],
    ids=["missing", "empty", "blank", "not-a-jwt", "bad-character", "too-long"],
)
def test_a_bad_file_is_a_clear_error(
    environment: Path, monkeypatch: pytest.MonkeyPatch, content: bytes | None, wording: str
) -> None:
    monkeypatch.setenv("KEYSTREAM_ROLE", ROLE)
    if content is not None:
        environment.write_bytes(content)
    with KeystreamClient() as ks, pytest.raises(KeystreamLoginError) as refused:
        ks.list_keys()
    message = str(refused.value)
    assert wording in message and str(environment) in message and repr(ROLE) in message
    assert content is None or len(content.strip()) < 8 or content.strip().decode() not in message


def test_a_refused_login_names_the_role_and_file_not_the_jwt(
    environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEYSTREAM_ROLE", ROLE)
    jwt = k8s_jwt(namespace="other")
    environment.write_text(jwt)
    with KeystreamClient() as ks, pytest.raises(KeystreamAPIError) as refused:
        ks.token_self()
    assert refused.value.status == 400 and "matches none" in refused.value.message
    notes = " ".join(refused.value.__notes__)
    assert f"role {ROLE!r}" in notes and str(environment) in notes
    for part in jwt.split("."):
        assert part not in str(refused.value) + notes + repr(ks)


async def test_async_bad_file(environment: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KEYSTREAM_ROLE", ROLE)
    async with AsyncKeystreamClient() as ks:
        with pytest.raises(KeystreamLoginError, match="cannot be read"):
            await ks.list_keys()


def test_the_credentials_must_come_whole(
    environment: Path, monkeypatch: pytest.MonkeyPatch, server: RunningServer
) -> None:
    with pytest.raises(ValueError, match="without a role"):
        KeystreamClient()
    monkeypatch.setenv("KEYSTREAM_ROLE", ROLE)
    monkeypatch.delenv("KEYSTREAM_JWT_FILE")
    with pytest.raises(ValueError, match="without a JWT file"):
        KeystreamClient()
    monkeypatch.setenv("KEYSTREAM_JWT_FILE", str(environment))
    monkeypatch.setenv("KEYSTREAM_TOKEN", server.token)
    with pytest.raises(ValueError, match="not both"):
        KeystreamClient()
    with pytest.raises(ValueError, match="exclude each other"):
        KeystreamClient(token=server.token, role=ROLE, jwt_file=environment)
    # An explicit token (even none at all) is used as it is, whatever the environment says.
    with KeystreamClient(token=server.token) as ks:
        assert ks.jwt_file_login is None and ks.token_self().metadata == {}


def test_role_and_file_as_arguments(
    environment: Path, server: RunningServer, client: KeystreamClient
) -> None:
    sub = subject()
    rotate(environment, sub)
    with KeystreamClient(server.url, role=ROLE, jwt_file=environment) as ks:
        assert ks.token_self().metadata == {"role": ROLE, "subject": sub}
        assert "ks_" not in repr(ks) and "ks_" not in repr(ks._jwt_login)


async def test_calls_that_need_no_token_do_not_log_in(
    environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The JWT file is missing: a call that logged in would raise KeystreamLoginError. The seal's status is
    # what an operator asks a sealed server, which could not answer a login.
    monkeypatch.setenv("KEYSTREAM_ROLE", ROLE)
    with KeystreamClient() as ks:
        assert ks.seal_status().sealed is False and ks.health()
        with pytest.raises(KeystreamAPIError):
            ks.login_jwt(ROLE, k8s_jwt(namespace="other"))  # answered by the service, not by the file
    async with AsyncKeystreamClient() as async_ks:
        assert (await async_ks.seal_status()).sealed is False

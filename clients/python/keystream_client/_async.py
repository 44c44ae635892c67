"""The asyncio Keystream client, :class:`AsyncKeystreamClient`: the sync client's methods, awaitable."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from keystream_client import _transport as transport
from keystream_client._autologin import AsyncJwtLogin
from keystream_client._base import (
    DEFAULT_CHUNK_SIZE,
    BaseClient,
    ClientCert,
    Verify,
    async_mapped_errors,
    mapped_errors,
)
from keystream_client._calls import (
    WRAPPING_KEY_CALL,
    Call,
    backup_key_call,
    batch_call,
    configure_key_call,
    create_key_call,
    create_token_call,
    datakey_call,
    export_key_call,
    hash_call,
    hmac_call,
    import_key_call,
    import_version_call,
    login_cert_call,
    login_jwt_call,
    parse_exported,
    quote,
    random_call,
    renew_token_self_call,
    restore_key_call,
    trim_call,
    verify_call,
    write_role_call,
)
from keystream_client._errors import MAX_ERROR_BODY, KeystreamAPIError, api_error
from keystream_client._models import (
    BatchItem,
    BatchResult,
    CipherResult,
    DataKey,
    Key,
    MasterRotation,
    NewToken,
    RenewedToken,
    Role,
    SealStatus,
    Token,
    TransferResult,
    parse_base64_field,
    parse_batch,
    parse_datakey,
    parse_hmac,
    parse_key,
    parse_keys,
    parse_master_rotation,
    parse_new_token,
    parse_renewed_token,
    parse_role,
    parse_roles,
    parse_seal_status,
    parse_token,
    parse_tokens,
    parse_verify,
)
from keystream_client._options import CryptoOptions
from keystream_client._sources import Source, chunk_reader
from keystream_client._streams import (
    Destination,
    StreamBase,
    broken_stream_error,
    check_lengths,
    open_partial,
)


class AsyncCipherStream(StreamBase):
    """A streaming encrypt/decrypt response (async); ``async for chunk in stream``."""

    def __init__(
        self,
        call: transport.DuplexCall,
        head: transport.ResponseHead,
        options: CryptoOptions,
        sent: Callable[[], int],
        operation: str = "",
    ) -> None:
        super().__init__(head, options, sent, operation)
        self._call = call

    async def __aiter__(self) -> AsyncIterator[bytes]:
        """Response chunks as they arrive.

        Raises:
            KeystreamStreamError: the stream was cut short or, for raw, lengths differ.
        """
        with mapped_errors():
            try:
                while chunk := await self._call.read_chunk():
                    self.bytes_received += len(chunk)
                    yield chunk
            except transport.StreamBrokenError as exc:
                raise broken_stream_error(exc, self._operation, self._options, self.bytes_received) from exc
        check_lengths(self._options, self.bytes_sent, self.bytes_received)

    async def read(self) -> bytes:
        """The whole remaining response in memory.

        Raises:
            KeystreamStreamError: as iteration.
        """
        return b"".join([chunk async for chunk in self])


class AsyncKeystreamClient(BaseClient):
    """Asyncio client with the same methods as :class:`KeystreamClient`, awaitable.

    Arguments and errors as :class:`KeystreamClient`; ``transport`` is an ``httpx.AsyncBaseTransport``.
    Sources may also be async iterables of bytes; sync files are read in a worker thread. A client logging
    in by itself (``role`` and ``jwt_file``) runs one login at a time across its tasks.
    """

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        stream_timeout: float = 120.0,
        verify: Verify = None,
        cert: ClientCert = None,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        transport: httpx.AsyncBaseTransport | None = None,
        role: str | None = None,
        jwt_file: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(
            base_url,
            token,
            timeout=timeout,
            stream_timeout=stream_timeout,
            verify=verify,
            cert=cert,
            chunk_size=chunk_size,
            role=role,
            jwt_file=jwt_file,
        )
        self._http = httpx.AsyncClient(transport=transport, **self._httpx_options())
        self._jwt_login = (
            AsyncJwtLogin(self.jwt_file_login, self._login_for_token) if self.jwt_file_login else None
        )

    async def __aenter__(self) -> AsyncKeystreamClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _request(self, call: Call, token: str | None = None) -> Any:
        async with async_mapped_errors(self._endpoint, self._timeout):
            response = await self._http.request(
                call.method, call.path, json=call.json, headers=self._bearer(token)
            )
        return self._result(response, call)

    async def _send(self, call: Call) -> Any:
        """As :meth:`KeystreamClient._send`."""
        if self._jwt_login is None or not call.authenticated:
            return await self._request(call)
        token = await self._jwt_login.token()
        try:
            return await self._request(call, token)
        except KeystreamAPIError as exc:
            if exc.status != 401:
                raise
            self._jwt_login.refused(token)
        return await self._request(call, await self._jwt_login.token())

    async def _login_for_token(self, role: str, jwt: str) -> NewToken:
        """The automatic login's call: :meth:`login_jwt` without the client's token."""
        return parse_new_token(await self._request(login_jwt_call(role, jwt)))

    async def create_key(
        self,
        name: str,
        *,
        key_type: str = "aes256",
        segment_size: int | None = None,
        deletion_allowed: bool = False,
        scheme: str | None = None,
        auto_rotate_period: int | str | None = None,
        derived: bool = False,
        convergent_encryption: bool = False,
        exportable: bool = False,
        allow_plaintext_backup: bool = False,
    ) -> Key:
        """As :meth:`KeystreamClient.create_key`."""
        options = {
            "derived": derived,
            "convergent_encryption": convergent_encryption,
            "exportable": exportable,
            "allow_plaintext_backup": allow_plaintext_backup,
        }
        call = create_key_call(
            name, key_type, segment_size, deletion_allowed, scheme, auto_rotate_period, options
        )
        return parse_key(await self._send(call))

    async def import_key(
        self,
        name: str,
        material: bytes,
        *,
        segment_size: int | None = None,
        deletion_allowed: bool = False,
        scheme: str | None = None,
        auto_rotate_period: int | str | None = None,
        key_type: str | None = None,
        derived: bool = False,
        convergent_encryption: bool = False,
        exportable: bool = False,
        allow_plaintext_backup: bool = False,
        wrapped: bool = False,
    ) -> Key:
        """As :meth:`KeystreamClient.import_key`."""
        options = {
            "derived": derived,
            "convergent_encryption": convergent_encryption,
            "exportable": exportable,
            "allow_plaintext_backup": allow_plaintext_backup,
        }
        wrapping_key = await self.wrapping_key() if wrapped else None
        call = import_key_call(
            name,
            material,
            segment_size,
            deletion_allowed,
            scheme,
            auto_rotate_period,
            key_type,
            options,
            wrapping_key,
        )
        return parse_key(await self._send(call))

    async def list_keys(self) -> list[Key]:
        """As :meth:`KeystreamClient.list_keys`."""
        return parse_keys(await self._send(Call("GET", "/v1/keys")))

    async def get_key(self, name: str) -> Key:
        """As :meth:`KeystreamClient.get_key`."""
        return parse_key(await self._send(Call("GET", f"/v1/keys/{quote(name)}")))

    async def rotate_key(self, name: str) -> Key:
        """As :meth:`KeystreamClient.rotate_key`."""
        return parse_key(await self._send(Call("POST", f"/v1/keys/{quote(name)}/rotate")))

    async def import_version(self, name: str, material: bytes, *, wrapped: bool = False) -> Key:
        """As :meth:`KeystreamClient.import_version`."""
        wrapping_key = await self.wrapping_key() if wrapped else None
        return parse_key(await self._send(import_version_call(name, material, wrapping_key)))

    async def wrapping_key(self) -> str:
        """As :meth:`KeystreamClient.wrapping_key`."""
        return str((await self._send(WRAPPING_KEY_CALL))["public_key"])

    async def trim(self, name: str, min_available_version: int) -> Key:
        """As :meth:`KeystreamClient.trim`."""
        return parse_key(await self._send(trim_call(name, min_available_version)))

    async def export_key(self, name: str, version: int | str | None = None) -> dict[int, bytes]:
        """As :meth:`KeystreamClient.export_key`."""
        return parse_exported(await self._send(export_key_call(name, version)))

    async def backup_key(self, name: str) -> str:
        """As :meth:`KeystreamClient.backup_key`."""
        return str((await self._send(backup_key_call(name)))["backup"])

    async def restore_key(self, backup: str, name: str | None = None, *, force: bool = False) -> Key:
        """As :meth:`KeystreamClient.restore_key`."""
        return parse_key(await self._send(restore_key_call(backup, name, force)))

    async def configure_key(
        self,
        name: str,
        *,
        min_decryption_version: int | None = None,
        deletion_allowed: bool | None = None,
        auto_rotate_period: int | str | None = None,
        exportable: bool | None = None,
        allow_plaintext_backup: bool | None = None,
    ) -> Key:
        """As :meth:`KeystreamClient.configure_key`."""
        options = {"exportable": exportable, "allow_plaintext_backup": allow_plaintext_backup}
        call = configure_key_call(name, min_decryption_version, deletion_allowed, auto_rotate_period, options)
        return parse_key(await self._send(call))

    async def delete_key(self, name: str) -> None:
        """As :meth:`KeystreamClient.delete_key`."""
        await self._send(Call("DELETE", f"/v1/keys/{quote(name)}", expect_json=False))

    async def create_token(
        self,
        scopes: Sequence[str],
        key_patterns: Sequence[str] = ("*",),
        description: str = "",
        *,
        ttl: int | None = None,
        max_ttl: int | None = None,
    ) -> NewToken:
        """As :meth:`KeystreamClient.create_token`."""
        call = create_token_call(scopes, key_patterns, description, ttl, max_ttl)
        return parse_new_token(await self._send(call))

    async def login_jwt(self, role: str, jwt: str) -> NewToken:
        """As :meth:`KeystreamClient.login_jwt`."""
        return parse_new_token(await self._send(login_jwt_call(role, jwt)))

    async def login_cert(self, role: str) -> NewToken:
        """As :meth:`KeystreamClient.login_cert`."""
        return parse_new_token(await self._send(login_cert_call(role)))

    async def token_self(self) -> Token:
        """As :meth:`KeystreamClient.token_self`."""
        return parse_token(await self._send(Call("GET", "/v1/tokens/self")))

    async def renew_token_self(self, ttl: int | None = None) -> RenewedToken:
        """As :meth:`KeystreamClient.renew_token_self`."""
        return parse_renewed_token(await self._send(renew_token_self_call(ttl)))

    async def list_tokens(self) -> list[Token]:
        """As :meth:`KeystreamClient.list_tokens`."""
        return parse_tokens(await self._send(Call("GET", "/v1/tokens")))

    async def delete_token(self, token_id: str) -> None:
        """As :meth:`KeystreamClient.delete_token`."""
        await self._send(Call("DELETE", f"/v1/tokens/{quote(token_id)}", expect_json=False))

    async def write_role(self, name: str, role: Mapping[str, Any]) -> Role:
        """As :meth:`KeystreamClient.write_role`."""
        return parse_role(await self._send(write_role_call(name, role)))

    async def list_roles(self) -> list[Role]:
        """As :meth:`KeystreamClient.list_roles`."""
        return parse_roles(await self._send(Call("GET", "/v1/auth/roles")))

    async def get_role(self, name: str) -> Role:
        """As :meth:`KeystreamClient.get_role`."""
        return parse_role(await self._send(Call("GET", f"/v1/auth/roles/{quote(name)}")))

    async def delete_role(self, name: str) -> None:
        """As :meth:`KeystreamClient.delete_role`."""
        await self._send(Call("DELETE", f"/v1/auth/roles/{quote(name)}", expect_json=False))

    async def datakey(
        self,
        name: str,
        key_type: str = "aes256",
        plaintext: bool = True,
        associated_data: bytes | None = None,
    ) -> DataKey:
        """As :meth:`KeystreamClient.datakey`."""
        return parse_datakey(await self._send(datakey_call(name, key_type, plaintext, associated_data)))

    async def hmac(
        self, name: str, data: bytes, algorithm: str = "sha2-256", key_version: int | None = None
    ) -> str:
        """As :meth:`KeystreamClient.hmac`."""
        return parse_hmac(await self._send(hmac_call(name, data, algorithm, key_version)))

    async def verify_hmac(self, name: str, data: bytes, tag: str, algorithm: str = "sha2-256") -> bool:
        """As :meth:`KeystreamClient.verify_hmac`."""
        return parse_verify(await self._send(verify_call(name, data, tag, algorithm)))

    async def random_bytes(self, size: int = 32) -> bytes:
        """As :meth:`KeystreamClient.random_bytes`."""
        return parse_base64_field(await self._send(random_call(size)), "random")

    async def hash(self, data: bytes, algorithm: str = "sha2-256") -> bytes:
        """As :meth:`KeystreamClient.hash`."""
        return parse_base64_field(await self._send(hash_call(data, algorithm)), "sum")

    # -- seal ------------------------------------------------------------------------------------------------
    async def seal_status(self) -> SealStatus:
        """As :meth:`KeystreamClient.seal_status`."""
        return parse_seal_status(await self._send(Call("GET", "/v1/sys/seal-status", authenticated=False)))

    async def unseal(self, share: str) -> SealStatus:
        """As :meth:`KeystreamClient.unseal`."""
        return parse_seal_status(
            await self._send(Call("POST", "/v1/sys/unseal", {"key": share}, authenticated=False))
        )

    async def unseal_reset(self) -> SealStatus:
        """As :meth:`KeystreamClient.unseal_reset`."""
        return parse_seal_status(
            await self._send(Call("POST", "/v1/sys/unseal", {"reset": True}, authenticated=False))
        )

    async def seal(self) -> SealStatus:
        """As :meth:`KeystreamClient.seal`."""
        return parse_seal_status(await self._send(Call("POST", "/v1/sys/seal")))

    async def rotate_master(self, batch_size: int | None = None) -> MasterRotation:
        """As :meth:`KeystreamClient.rotate_master`."""
        body = None if batch_size is None else {"batch_size": batch_size}
        return parse_master_rotation(await self._send(Call("POST", "/v1/sys/rotate-master", body)))

    async def master_rotation(self) -> MasterRotation:
        """As :meth:`KeystreamClient.master_rotation`."""
        return parse_master_rotation(await self._send(Call("GET", "/v1/sys/rotate-master")))

    async def backends(self) -> Any:
        """As :meth:`KeystreamClient.backends`."""
        return await self._send(Call("GET", "/v1/backends"))

    async def health(self) -> bool:
        """As :meth:`KeystreamClient.health`."""
        async with async_mapped_errors(self._endpoint, self._timeout):
            return (await self._http.get("/healthz")).is_success

    async def encrypt_batch(
        self,
        key: str,
        items: Sequence[BatchItem | bytes],
        *,
        key_version: int | None = None,
        backend: str | None = None,
    ) -> list[BatchResult]:
        """As :meth:`KeystreamClient.encrypt_batch`."""
        return parse_batch(
            await self._send(batch_call(key, "encrypt", items, key_version, backend)), "ciphertext"
        )

    async def decrypt_batch(
        self,
        key: str,
        items: Sequence[BatchItem | bytes],
        *,
        key_version: int | None = None,
        backend: str | None = None,
    ) -> list[BatchResult]:
        """As :meth:`KeystreamClient.decrypt_batch`."""
        return parse_batch(
            await self._send(batch_call(key, "decrypt", items, key_version, backend)), "plaintext"
        )

    async def rewrap_batch(
        self,
        key: str,
        items: Sequence[BatchItem | bytes],
        *,
        key_version: int | None = None,
        backend: str | None = None,
    ) -> list[BatchResult]:
        """As :meth:`KeystreamClient.rewrap_batch`."""
        return parse_batch(
            await self._send(batch_call(key, "rewrap", items, key_version, backend)), "ciphertext"
        )

    def encrypt_stream(
        self, key: str, source: Source, **options: Any
    ) -> contextlib.AbstractAsyncContextManager[AsyncCipherStream]:
        """As :meth:`KeystreamClient.encrypt_stream`, as an async context manager."""
        return self._open("encrypt", key, source, options)

    def decrypt_stream(
        self, key: str, source: Source, **options: Any
    ) -> contextlib.AbstractAsyncContextManager[AsyncCipherStream]:
        """As :meth:`KeystreamClient.decrypt_stream`, as an async context manager."""
        return self._open("decrypt", key, source, options)

    def rewrap_stream(
        self, key: str, source: Source, **options: Any
    ) -> contextlib.AbstractAsyncContextManager[AsyncCipherStream]:
        """As :meth:`KeystreamClient.rewrap_stream`, as an async context manager."""
        return self._open("rewrap", key, source, options)

    async def encrypt(self, key: str, data: bytes, **options: Any) -> CipherResult:
        """As :meth:`KeystreamClient.encrypt`."""
        async with self.encrypt_stream(key, data, **options) as stream:
            output = await stream.read()
            return CipherResult(output, stream.key_version, stream.iv, stream.result().format)

    async def decrypt(self, key: str, data: bytes, **options: Any) -> CipherResult:
        """As :meth:`KeystreamClient.decrypt`."""
        async with self.decrypt_stream(key, data, **options) as stream:
            output = await stream.read()
            return CipherResult(output, stream.key_version, stream.iv, stream.result().format)

    async def rewrap(self, key: str, data: bytes, **options: Any) -> CipherResult:
        """As :meth:`KeystreamClient.rewrap`."""
        async with self.rewrap_stream(key, data, **options) as stream:
            output = await stream.read()
            return CipherResult(output, stream.key_version, stream.iv, stream.result().format)

    async def encrypt_file(
        self, key: str, source: Source, destination: Destination, **options: Any
    ) -> TransferResult:
        """As :meth:`KeystreamClient.encrypt_file` (file writes run in a worker thread)."""
        return await self._transfer("encrypt", key, source, destination, options)

    async def decrypt_file(
        self, key: str, source: Source, destination: Destination, **options: Any
    ) -> TransferResult:
        """As :meth:`KeystreamClient.decrypt_file` (file writes run in a worker thread)."""
        return await self._transfer("decrypt", key, source, destination, options)

    async def rewrap_file(
        self, key: str, source: Source, destination: Destination, **options: Any
    ) -> TransferResult:
        """As :meth:`KeystreamClient.rewrap_file` (file writes run in a worker thread)."""
        return await self._transfer("rewrap", key, source, destination, options)

    async def _transfer(
        self, operation: str, key: str, source: Source, destination: Destination, options: dict[str, Any]
    ) -> TransferResult:
        if isinstance(destination, str | os.PathLike):
            final = Path(destination)
            partial, out = await asyncio.to_thread(open_partial, final)
            try:
                try:
                    result = await self._transfer(operation, key, source, out, options)
                finally:
                    await asyncio.to_thread(out.close)
                os.replace(partial, final)
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
            return result
        async with self._open(operation, key, source, options) as stream:
            async for chunk in stream:
                await asyncio.to_thread(destination.write, chunk)
            return stream.result()

    @contextlib.asynccontextmanager
    async def _open(
        self, operation: str, key: str, source: Source, options: dict[str, Any]
    ) -> AsyncIterator[AsyncCipherStream]:
        on_progress = options.pop("on_progress", None)
        crypto = CryptoOptions.from_kwargs(options)
        with chunk_reader(source, self._chunk_size, on_progress, async_client=True) as (reader, length, sent):
            # As in the sync client: a 401 makes the next call log in again; the stream is not repeated.
            token = await self._jwt_login.token() if self._jwt_login is not None else None
            call = self._duplex(operation, key, crypto, reader, length, token)
            try:
                with mapped_errors():
                    head = await call.start()
                    if head.status == 401 and token is not None and self._jwt_login is not None:
                        self._jwt_login.refused(token)
                    if head.status >= 400:
                        raise api_error(head.status, await call.read_all(MAX_ERROR_BODY))
                yield AsyncCipherStream(call, head, crypto, sent, operation)
            finally:
                await call.aclose()

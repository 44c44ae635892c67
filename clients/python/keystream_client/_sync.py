"""The synchronous Keystream client, :class:`KeystreamClient`: keys, tokens, service and batch calls over
httpx, plus the streaming methods of :class:`keystream_client._sync_stream.SyncStreamingClient`."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from keystream_client._autologin import SyncJwtLogin
from keystream_client._base import DEFAULT_CHUNK_SIZE, ClientCert, Verify, mapped_errors
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
from keystream_client._errors import KeystreamAPIError
from keystream_client._models import (
    BatchItem,
    BatchResult,
    DataKey,
    Key,
    MasterRotation,
    NewToken,
    RenewedToken,
    Role,
    SealStatus,
    Token,
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
from keystream_client._sync_stream import SyncStreamingClient


class KeystreamClient(SyncStreamingClient):
    """Synchronous client. Use as a context manager or call :meth:`close`.

    Args:
        base_url: service URL, e.g. ``http://127.0.0.1:8000``; None reads ``KEYSTREAM_URL``, else
            ``http://127.0.0.1:8000``.
        token: bearer token ``ks_<id>_<secret>``; None reads ``KEYSTREAM_TOKEN``, or logs in by itself when
            a role and a JWT file are given (below). Never shown in reprs or errors.
        timeout: seconds for JSON calls and for the response head of a stream.
        stream_timeout: seconds without progress before a streaming transfer fails.
        verify: TLS verification: True (the system's CA store), a CA bundle path, an :class:`ssl.SSLContext`,
            False (no verification; testing only), or None: ``KEYSTREAM_CACERT`` if set, else True.
        cert: client certificate for mTLS: a PEM file with certificate and key, or a (certificate, key) pair
            of paths; None reads ``KEYSTREAM_CLIENT_CERT`` and ``KEYSTREAM_CLIENT_KEY``.
        chunk_size: bytes read from a source per request chunk.
        transport: an httpx transport for JSON calls (tests), else a normal connection pool.
        role: with ``jwt_file``, and no token: the role to log in through; None reads ``KEYSTREAM_ROLE``.
        jwt_file: the file holding the workload's JWT (e.g. a Kubernetes projected service-account token);
            None reads ``KEYSTREAM_JWT_FILE``. The client logs in before its first call that needs a token,
            and again, re-reading the file, once two thirds of the token's lifetime have passed or after a
            401; one login at a time, whatever the number of threads.

    Raises:
        ValueError: the URL is not http(s), ``chunk_size`` < 1, a CA bundle or client certificate cannot
            be loaded (the message names the file), or a role comes without a JWT file (or the other way
            round, or with a token).

    With a role and a JWT file, every call may also raise :class:`~keystream_client.KeystreamLoginError`
    (the file cannot be used) or :class:`KeystreamAPIError` for a refused login.
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
        transport: httpx.BaseTransport | None = None,
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
        self._http = httpx.Client(transport=transport, **self._httpx_options())
        if self.jwt_file_login is not None:
            self._jwt_login = SyncJwtLogin(self.jwt_file_login, self._login_for_token)

    def __enter__(self) -> KeystreamClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _request(self, call: Call, token: str | None = None) -> Any:
        with mapped_errors(self._endpoint, probe_timeout=self._timeout):
            response = self._http.request(call.method, call.path, json=call.json, headers=self._bearer(token))
        return self._result(response, call)

    def _send(self, call: Call) -> Any:
        """``call`` with the client's token; a client logging in by itself logs in again after a 401 and
        repeats the call once (the service refused it before doing anything)."""
        if self._jwt_login is None or not call.authenticated:
            return self._request(call)
        token = self._jwt_login.token()
        try:
            return self._request(call, token)
        except KeystreamAPIError as exc:
            if exc.status != 401:
                raise
            self._jwt_login.refused(token)
        return self._request(call, self._jwt_login.token())

    def _login_for_token(self, role: str, jwt: str) -> NewToken:
        """The automatic login's call: :meth:`login_jwt` without the client's token."""
        return parse_new_token(self._request(login_jwt_call(role, jwt)))

    # -- keys ------------------------------------------------------------------------------------------------
    def create_key(
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
        """Create a key with server-generated material.

        ``derived`` (every operation then needs a ``context``), ``convergent_encryption`` (only with
        ``derived``; Transit's deterministic encryption), ``exportable`` and ``allow_plaintext_backup`` are
        Vault Transit's key options; the last two can be turned on later, never off.

        ``key_type``: ``aes128``, ``aes192`` or ``aes256`` for the sealed format, or ``aes256-siv`` for
        deterministic encryption (AES-SIV, as Tink's DeterministicAead) through the batch methods only: equal
        plaintexts with equal associated data give equal ciphertexts under one version. ``scheme`` picks the
        sealed format's primitive for the key's whole life: ``ctr-hmac`` (the service's default when
        ``None``) or ``gcm`` (Tink AesGcmHkdfStreaming). ``auto_rotate_period``
        (seconds, or a duration such as ``"24h"``, ``"1h30m"`` or ``"7d"``; at least one hour, 0 for never)
        makes the service rotate the key by itself whenever its latest version is that old.

        Raises:
            KeystreamAPIError: 409 ``key_exists``, 400/422 for a bad name/type/segment size/scheme/period, 403
                no admin.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(
            self._send(
                create_key_call(
                    name,
                    key_type,
                    segment_size,
                    deletion_allowed,
                    scheme,
                    auto_rotate_period,
                    {
                        "derived": derived,
                        "convergent_encryption": convergent_encryption,
                        "exportable": exportable,
                        "allow_plaintext_backup": allow_plaintext_backup,
                    },
                )
            )
        )

    def import_key(
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
        """Import key material (16, 24 or 32 bytes, the type following from the length; or 64 bytes with
        ``key_type="aes256-siv"``); the service must allow imports. ``scheme``, ``auto_rotate_period`` and
        the options (``derived``: a key moved from Vault's derived key, ...) as :meth:`create_key`.
        ``wrapped``: fetch :meth:`wrapping_key` and send the material wrapped under it, never in clear
        (needs the ``wrapped`` extra, pyca/cryptography); as much for :meth:`import_version`.

        Raises:
            KeystreamAPIError: e.g. 403 when imports are disabled, 400 for a bad length.
            KeystreamConnectionError: the service is unreachable.
        """
        options = {
            "derived": derived,
            "convergent_encryption": convergent_encryption,
            "exportable": exportable,
            "allow_plaintext_backup": allow_plaintext_backup,
        }
        wrapping_key = self.wrapping_key() if wrapped else None
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
        return parse_key(self._send(call))

    def list_keys(self) -> list[Key]:
        """Every key's metadata.

        Raises:
            KeystreamAPIError: e.g. 401/403.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_keys(self._send(Call("GET", "/v1/keys")))

    def get_key(self, name: str) -> Key:
        """One key's metadata (never material).

        Raises:
            KeystreamAPIError: 404 ``key_not_found`` and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(self._send(Call("GET", f"/v1/keys/{quote(name)}")))

    def rotate_key(self, name: str) -> Key:
        """Add a new key version; older versions keep decrypting.

        Raises:
            KeystreamAPIError: 404 and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(self._send(Call("POST", f"/v1/keys/{quote(name)}/rotate")))

    def import_version(self, name: str, material: bytes, *, wrapped: bool = False) -> Key:
        """Add a key version with the given material (as long as the key's type: 16, 24 or 32 bytes); it
        becomes the latest. The service must allow imports.

        Raises:
            KeystreamAPIError: e.g. 403 when imports are disabled, 400 for a length that does not fit the key.
            KeystreamConnectionError: the service is unreachable.
        """
        wrapping_key = self.wrapping_key() if wrapped else None
        return parse_key(self._send(import_version_call(name, material, wrapping_key)))

    def wrapping_key(self) -> str:
        """The service's RSA-4096 public key (PEM) that wrapped import wraps material under; needs the admin
        scope and imports enabled.

        Raises:
            KeystreamAPIError: 403 when imports are disabled or without admin.
            KeystreamConnectionError: the service is unreachable.
        """
        return str(self._send(WRAPPING_KEY_CALL)["public_key"])

    def trim(self, name: str, min_available_version: int) -> Key:
        """Delete, for good, the key's versions below ``min_available_version``; idempotent.

        Raises:
            KeystreamAPIError: 400 when ``min_available_version`` is above the ``min_decryption_version``,
                404 and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(self._send(trim_call(name, min_available_version)))

    def export_key(self, name: str, version: int | str | None = None) -> dict[int, bytes]:
        """The material of an ``exportable`` key: every remaining version, or ``version`` (a number or
        ``"latest"``), as ``{version: bytes}``. Needs the admin scope. Keep what it returns as secret as
        the key itself.

        Raises:
            KeystreamAPIError: 400 for a key that is not exportable, 403 without admin, 404 and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_exported(self._send(export_key_call(name, version)))

    def backup_key(self, name: str) -> str:
        """The key's backup blob: its record and every version wrapped under the service's seal, bound to
        the key's name. Only for a key whose ``allow_plaintext_backup`` or ``exportable`` option is on; it
        restores only into a keystore holding the same master key generation (a master key rotation that
        retires it makes older backups useless: back up again after one).

        Raises:
            KeystreamAPIError: 400 when the key's options do not allow it, 403 without admin, 404.
            KeystreamConnectionError: the service is unreachable.
        """
        return str(self._send(backup_key_call(name))["backup"])

    def restore_key(self, backup: str, name: str | None = None, *, force: bool = False) -> Key:
        """Store the key ``backup`` holds, as it was, under its own name (``name``, when given, must be
        that name); an existing key of that name is replaced only with ``force``.

        Raises:
            KeystreamAPIError: 409 ``key_exists`` (without ``force``) or ``key_recently_deleted``, 400 for a
                blob that is not a backup of this keystore's or was made for another name.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(self._send(restore_key_call(backup, name, force)))

    def configure_key(
        self,
        name: str,
        *,
        min_decryption_version: int | None = None,
        deletion_allowed: bool | None = None,
        auto_rotate_period: int | str | None = None,
        exportable: bool | None = None,
        allow_plaintext_backup: bool | None = None,
    ) -> Key:
        """Change a key's policy (PATCH); unset arguments stay as they are. ``exportable`` and
        ``allow_plaintext_backup`` may be turned on, never off again (400).

        ``auto_rotate_period`` as :meth:`create_key` (0 turns automatic rotation off); it counts from the
        latest version's creation, so a key whose latest version is older rotates at the service's next check.

        Raises:
            KeystreamAPIError: 400 when ``min_decryption_version`` is outside 1..latest or
                ``auto_rotate_period`` is invalid, 404 and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_key(
            self._send(
                configure_key_call(
                    name,
                    min_decryption_version,
                    deletion_allowed,
                    auto_rotate_period,
                    {"exportable": exportable, "allow_plaintext_backup": allow_plaintext_backup},
                )
            )
        )

    def delete_key(self, name: str) -> None:
        """Delete a key and all its versions.

        Raises:
            KeystreamAPIError: 409 ``deletion_not_allowed`` unless allowed, 404 and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        self._send(Call("DELETE", f"/v1/keys/{quote(name)}", expect_json=False))

    # -- tokens ----------------------------------------------------------------------------------------------
    def create_token(
        self,
        scopes: Sequence[str],
        key_patterns: Sequence[str] = ("*",),
        description: str = "",
        *,
        ttl: int | None = None,
        max_ttl: int | None = None,
    ) -> NewToken:
        """Create a bearer token; its secret is in :attr:`NewToken.token` and is shown only this once.

        With ``ttl`` (seconds) the token expires that long after creation; it can be renewed
        (:meth:`renew_token_self`) until ``max_ttl`` seconds after creation (default: ``ttl``).

        Raises:
            KeystreamAPIError: 422 for an unknown scope or a bad ``ttl``/``max_ttl``, 403 without admin.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_new_token(self._send(create_token_call(scopes, key_patterns, description, ttl, max_ttl)))

    def login_jwt(self, role: str, jwt: str) -> NewToken:
        """Log in with a JWT (a Kubernetes projected service-account token, an OIDC issuer's token) through
        ``role``; no token is needed. The answer is an ordinary token whose secret is in
        :attr:`NewToken.token` and whose :attr:`~Token.metadata` names the role and subject: use it with
        ``KeystreamClient(token=...)``. The JWT is sent once and kept nowhere.

        Raises:
            KeystreamAPIError: 400 naming what the JWT got wrong (a role that does not exist answers as a bad
                signature), 413 for a JWT over 16 KiB, 429 for too many attempts, 503 while the issuer's keys
                cannot be fetched.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_new_token(self._send(login_jwt_call(role, jwt)))

    def login_cert(self, role: str) -> NewToken:
        """Log in with the client certificate this client presents for mTLS (``cert=``) through ``role``, a
        ``cert`` role; no token is needed. The service must itself verify the certificate in the TLS
        handshake (it serves HTTPS with a client CA); the answer is a token as :meth:`login_jwt`'s, whose
        :attr:`~Token.metadata` subject is the certificate's name the role matched.

        Raises:
            KeystreamAPIError: 400 ``no client certificate`` when the service verified none (no ``cert=``, or
                a proxy ends TLS in front of it), 400 when the role does not exist, is not a ``cert`` role or
                the certificate meets none of its allowed names, 429 for too many attempts.
            KeystreamConnectionError: the service is unreachable, or refused the handshake (a service that
                requires a client certificate closes a connection without one).
        """
        return parse_new_token(self._send(login_cert_call(role)))

    def token_self(self) -> Token:
        """The metadata of the token this client uses (any valid token; no admin needed).

        Raises:
            KeystreamAPIError: 401 ``token_expired`` once the token has expired, and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_token(self._send(Call("GET", "/v1/tokens/self")))

    def renew_token_self(self, ttl: int | None = None) -> RenewedToken:
        """Extend this client's token to now + ``ttl`` seconds (default: its ttl at creation), never past its
        ``max_expires_at`` (:attr:`RenewedToken.capped` says when it was cut there).

        Raises:
            KeystreamAPIError: 400 for a token without ttl, 401 ``token_expired`` when it is too late.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_renewed_token(self._send(renew_token_self_call(ttl)))

    def list_tokens(self) -> list[Token]:
        """Every token's metadata (never secrets).

        Raises:
            KeystreamAPIError: e.g. 403 without admin.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_tokens(self._send(Call("GET", "/v1/tokens")))

    def delete_token(self, token_id: str) -> None:
        """Revoke a token.

        Raises:
            KeystreamAPIError: 404 ``token_not_found`` and the like.
            KeystreamConnectionError: the service is unreachable.
        """
        self._send(Call("DELETE", f"/v1/tokens/{quote(token_id)}", expect_json=False))

    # -- login roles ---------------------------------------------------------------------------------------
    def write_role(self, name: str, role: Mapping[str, Any]) -> Role:
        """Create or replace the login role ``name`` (admin token with the key pattern ``*``). ``role`` is the
        JSON body docs/identity.md describes: ``method`` (``jwt`` or ``cert``), ``scopes``, ``key_patterns``,
        ``ttl``, ``max_ttl`` and the method's bindings, e.g. ``{"method": "jwt", "scopes": ["encrypt"],
        "bound_audiences": ["keystream"], "bound_claims": {"/kubernetes.io/namespace": "billing"}}``.

        Raises:
            TypeError, ValueError: ``role`` is not a mapping or names no method.
            KeystreamAPIError: 400/422 for a field the service refuses, 403 without admin or for a scope the
                caller lacks.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_role(self._send(write_role_call(name, role)))

    def list_roles(self) -> list[Role]:
        """Every login role, by name (admin).

        Raises:
            KeystreamAPIError: 403 without admin.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_roles(self._send(Call("GET", "/v1/auth/roles")))

    def get_role(self, name: str) -> Role:
        """One login role (admin).

        Raises:
            KeystreamAPIError: 404 ``role_not_found``, 403 without admin.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_role(self._send(Call("GET", f"/v1/auth/roles/{quote(name)}")))

    def delete_role(self, name: str) -> None:
        """Delete a login role (admin); the tokens it issued live until they expire or are revoked.

        Raises:
            KeystreamAPIError: 404 ``role_not_found``, 403 without admin.
            KeystreamConnectionError: the service is unreachable.
        """
        self._send(Call("DELETE", f"/v1/auth/roles/{quote(name)}", expect_json=False))

    # -- data keys -------------------------------------------------------------------------------------------
    def datakey(
        self,
        name: str,
        key_type: str = "aes256",
        plaintext: bool = True,
        associated_data: bytes | None = None,
    ) -> DataKey:
        """Generate a data key for envelope encryption: fresh random bytes (16 for ``aes128``, 32 for
        ``aes256``) sealed under ``name``'s latest version.

        ``plaintext=True`` also returns the key itself (the token needs the ``encrypt`` and ``decrypt``
        scopes); ``False`` returns only its ciphertext (``encrypt`` is enough): open it later with
        ``decrypt(name, result.ciphertext, associated_data=...)``. The result's repr never shows the key.

        Raises:
            ValueError: ``key_type`` is not ``aes128`` or ``aes256``.
            KeystreamAPIError: 403 without the scopes, 404 for an unknown key, 413 for associated data over
                the service's limit.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_datakey(self._send(datakey_call(name, key_type, plaintext, associated_data)))

    # -- hmac, random, hash ----------------------------------------------------------------------------------
    def hmac(
        self, name: str, data: bytes, algorithm: str = "sha2-256", key_version: int | None = None
    ) -> str:
        """The HMAC of ``data`` under ``name``'s latest version (or ``key_version``), as the service's tag
        text ``ks:v<version>:<base64>``; the HMAC key is derived from the version's material and never leaves
        the service. The token needs the ``hmac`` scope.

        Raises:
            ValueError: ``algorithm`` is not sha2-256, sha2-384 or sha2-512.
            KeystreamAPIError: 403 without the scope, 404 for an unknown key or version.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_hmac(self._send(hmac_call(name, data, algorithm, key_version)))

    def verify_hmac(self, name: str, data: bytes, tag: str, algorithm: str = "sha2-256") -> bool:
        """Whether ``tag`` (from :meth:`hmac`) is the HMAC of ``data``, under the version the tag names. The
        token needs the ``verify`` scope.

        Raises:
            ValueError: ``algorithm`` is not sha2-256, sha2-384 or sha2-512.
            KeystreamAPIError: 400 for a malformed tag or a version below the key's
                ``min_decryption_version``, 403 without the scope, 404 for an unknown key or version.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_verify(self._send(verify_call(name, data, tag, algorithm)))

    def random_bytes(self, size: int = 32) -> bytes:
        """``size`` (1 to 65,536) random bytes from the service's OS CSPRNG.

        Raises:
            KeystreamAPIError: 422 for a size out of range.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_base64_field(self._send(random_call(size)), "random")

    def hash(self, data: bytes, algorithm: str = "sha2-256") -> bytes:
        """The ``algorithm`` digest of ``data`` (SHA-2 or SHA-3), computed by the service.

        Raises:
            ValueError: ``algorithm`` is not one the service offers.
            KeystreamAPIError: 413 for data over the service's JSON body limit.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_base64_field(self._send(hash_call(data, algorithm)), "sum")

    # -- service ---------------------------------------------------------------------------------------------
    # -- seal ------------------------------------------------------------------------------------------------
    def seal_status(self) -> SealStatus:
        """Whether this server is sealed and how far unsealing has come (no token needed).

        Raises:
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_seal_status(self._send(Call("GET", "/v1/sys/seal-status", authenticated=False)))

    def unseal(self, share: str) -> SealStatus:
        """Give this server one unseal share (no token needed); at the threshold it unseals.

        Raises:
            KeystreamAPIError: 400 ``invalid_share`` (malformed, mistyped, foreign, duplicate or wrong: the
                progress is unchanged), 429 ``too_many_requests``.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_seal_status(
            self._send(Call("POST", "/v1/sys/unseal", {"key": share}, authenticated=False))
        )

    def unseal_reset(self) -> SealStatus:
        """Forget the shares given to this server so far.

        Raises:
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_seal_status(
            self._send(Call("POST", "/v1/sys/unseal", {"reset": True}, authenticated=False))
        )

    def seal(self) -> SealStatus:
        """Seal this server (admin token): its master key is wiped until the threshold of shares is given.

        Raises:
            KeystreamAPIError: 401/403 without an admin token.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_seal_status(self._send(Call("POST", "/v1/sys/seal")))

    def rotate_master(self, batch_size: int | None = None) -> MasterRotation:
        """Rotate the master key (admin token): the server makes a new generation under its seal, wraps new
        key versions under it at once and rewraps every stored secret in the background, ``batch_size``
        versions per transaction; ciphertexts are untouched. An unfinished rotation is resumed instead.
        Follow it with :meth:`master_rotation`.

        Raises:
            KeystreamAPIError: 409 ``master_rotation_running`` while a rotation holds its lease; 401/403
                without an admin token; 503 ``sealed``.
            KeystreamConnectionError: the service is unreachable.
        """
        body = None if batch_size is None else {"batch_size": batch_size}
        return parse_master_rotation(self._send(Call("POST", "/v1/sys/rotate-master", body)))

    def master_rotation(self) -> MasterRotation:
        """Where the master key's rotation stands (admin token).

        Raises:
            KeystreamAPIError: 401/403 without an admin token.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_master_rotation(self._send(Call("GET", "/v1/sys/rotate-master")))

    def backends(self) -> Any:
        """``GET /v1/backends`` as decoded JSON.

        Raises:
            KeystreamAPIError: e.g. 401.
            KeystreamConnectionError: the service is unreachable.
        """
        return self._send(Call("GET", "/v1/backends"))

    def health(self) -> bool:
        """True when ``/healthz`` answers 2xx.

        Raises:
            KeystreamConnectionError: the service is unreachable.
        """
        with mapped_errors(self._endpoint, probe_timeout=self._timeout):
            return self._http.get("/healthz").is_success

    # -- batch -----------------------------------------------------------------------------------------------
    def encrypt_batch(
        self,
        key: str,
        items: Sequence[BatchItem | bytes],
        *,
        key_version: int | None = None,
        backend: str | None = None,
    ) -> list[BatchResult]:
        """Encrypt many small items in one request (sealed format, or deterministic AES-SIV under an
        ``aes256-siv`` key); per-item errors do not fail the batch.

        Raises:
            KeystreamAPIError: the whole batch failed (e.g. 413 beyond the service's limits, 404 key).
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_batch(self._send(batch_call(key, "encrypt", items, key_version, backend)), "ciphertext")

    def decrypt_batch(
        self,
        key: str,
        items: Sequence[BatchItem | bytes],
        *,
        key_version: int | None = None,
        backend: str | None = None,
    ) -> list[BatchResult]:
        """Decrypt many sealed items in one request; a failing item carries :attr:`BatchResult.error`.

        Raises:
            KeystreamAPIError: the whole batch failed.
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_batch(self._send(batch_call(key, "decrypt", items, key_version, backend)), "plaintext")

    def rewrap_batch(
        self,
        key: str,
        items: Sequence[BatchItem | bytes],
        *,
        key_version: int | None = None,
        backend: str | None = None,
    ) -> list[BatchResult]:
        """Rewrap many sealed items under the key's latest version in one request (each with its own
        associated data, used to open and to seal); a failing item carries :attr:`BatchResult.error`, as in
        :meth:`decrypt_batch`. ``key_version``: the version the items were sealed under (default: try all).

        Raises:
            KeystreamAPIError: the whole batch failed (e.g. 403 without the ``rewrap`` scope).
            KeystreamConnectionError: the service is unreachable.
        """
        return parse_batch(self._send(batch_call(key, "rewrap", items, key_version, backend)), "ciphertext")

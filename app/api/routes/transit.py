"""The Transit-compatible API's data operations: encrypt, decrypt, rewrap, datakey, hmac and verify.

Vault's paths under ``/v1/transit/``, its bodies (base64 ``plaintext``, ``vault:v<N>:`` ciphertexts,
``key_version``, ``associated_data``, ``batch_input`` / ``batch_results`` with ``reference``) and its
answers (:func:`~app.api.vault.vault_answer`). Ciphertexts are Transit's layout, not the
native sealed format (:mod:`app.services.transit`), so Vault's clients and ciphertexts work unchanged.

Scopes are the native ones: encrypt, decrypt, rewrap, hmac, verify; ``datakey/wrapped`` needs encrypt and
``datakey/plaintext`` encrypt and decrypt (it hands out what a decrypt would). Every batch item carries its
``reference`` ("" when none) and a failed one its ``error``; an encrypt, decrypt or rewrap batch with a
failed item answers 400 with all the results, an hmac or verify batch 200, as OpenBao answers.

A ``derived`` key takes each item's ``context`` (base64; the request's for a single operation or a data key)
and works under the per-context key Vault derives (:mod:`app.services.transit`); other keys ignore a
context, as Vault does. HMACs are made as for any key: Vault does not derive them either.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request, Response
from pydantic import Field

from app.api import paths
from app.api.deps import PrincipalDep, StateDep
from app.api.middleware.audit import note
from app.api.params import check_associated_data, decode_base64, decode_context
from app.api.request_handler import Handler, request_handler
from app.api.vault import (
    TransitModel,
    VaultJsonRoute,
    transit_errors,
    vault_answer,
    vault_response,
    vault_write,
)
from app.core import base64_codec
from app.errors import BadRequestError, KeystreamError, PayloadTooLargeError
from app.services import macs, transit
from app.services.transit import Signer, TransitCipher
from app.state import ServiceState

router = APIRouter(route_class=VaultJsonRoute, tags=["transit"])

#: ``bits`` a data key may have, as Vault allows.
DATA_KEY_BITS = (128, 256, 512)
_TEXT = Field(default=None, max_length=1 << 24)


class TransitItem(TransitModel):
    plaintext: str | None = _TEXT
    ciphertext: str | None = _TEXT
    input: str | None = _TEXT
    hmac: str | None = Field(default=None, max_length=200)
    associated_data: str | None = _TEXT
    key_version: int | None = Field(default=None, ge=1)
    context: str | None = None
    nonce: str | None = None
    reference: str | None = Field(default=None, max_length=256)
    signature: str | None = None


class TransitCryptoRequest(TransitItem):
    batch_input: list[TransitItem] | None = None
    algorithm: str | None = None
    hash_algorithm: str | None = None


class TransitDataKeyRequest(TransitModel):
    bits: int = 256
    context: str | None = None
    nonce: str | None = None


def _nonce(item: TransitItem | TransitDataKeyRequest) -> None:
    if item.nonce:
        raise BadRequestError("nonce provided when not allowed")  # Vault's answer since convergent version 3


def _context(value: str | None) -> bytes | None:
    """A request's or item's ``context``, decoded (``None`` when absent or empty, as Vault reads it)."""
    return decode_context(value, "context")


def _required(value: str | None, field: str) -> str:
    if value is None:
        raise BadRequestError(f"missing {field}")
    return value


class _NotMade(Exception):
    """Raised by :meth:`_Versions.made` for a version and context not made yet: :func:`_answer` makes it and
    runs the item again. Not a :class:`KeystreamError`, so no item's error handling catches it."""

    def __init__(self, versions: _Versions, wanted: tuple[int | None, bytes | None]) -> None:
        super().__init__(wanted)
        self.versions = versions
        self.wanted = wanted


class _Versions:
    """Builds one object per key version and context asked for in a request (a batch names a few), keeping
    failures.

    An item's work is synchronous: it asks :meth:`made`, which answers at once when the object (or its
    failure) is at hand and raises :class:`_NotMade` otherwise; :func:`_answer` then awaits :meth:`make`
    and runs the item again. So a batch's items after the first of each version cost no coroutine, and the
    item's logic is written once.
    """

    def __init__(self, make: Callable[[int | None, bytes | None], Awaitable[Any]]) -> None:
        self._make = make
        self._made: dict[tuple[int | None, bytes | None], Any] = {}

    def made(self, version: int | None, context: bytes | None = None) -> Any:
        """The object for ``version`` and ``context``.

        Raises:
            KeystreamError: the failure making it met.
            _NotMade: not made yet (await :meth:`make`, then ask again).
        """
        wanted = (version, context)
        try:
            made = self._made[wanted]
        except KeyError:
            raise _NotMade(self, wanted) from None
        if isinstance(made, KeystreamError):
            raise made
        return made

    async def make(self, wanted: tuple[int | None, bytes | None]) -> None:
        """Make the object for ``wanted`` (version, context), or keep the failure met."""
        try:
            self._made[wanted] = await self._make(*wanted)
        except KeystreamError as exc:
            self._made[wanted] = exc


def _associated(state: ServiceState, item: TransitItem) -> bytes | None:
    """An item's ``associated_data``, decoded (``None`` when absent or empty: GCM reads both as none)."""
    if not item.associated_data:
        return None
    data = decode_base64("associated_data", item.associated_data)
    return check_associated_data(data, state.settings.max_associated_data)


async def _answer(one: Callable[[TransitItem], dict[str, Any]], item: TransitItem) -> dict[str, Any]:
    """``one(item)``, making each version and context it asks for that is not made yet."""
    while True:
        try:
            return one(item)
        except _NotMade as missing:
            await missing.versions.make(missing.wanted)


async def _run(
    state: ServiceState,
    name: str,
    body: TransitCryptoRequest,
    one: Callable[[TransitItem], dict[str, Any]],
    failed_item_status: int = 400,
) -> Response:
    """``one`` on the body itself, or on every batch item: ``batch_results`` in order, answered with
    ``failed_item_status`` when an item failed (an unknown key fails the request, not each item)."""
    await transit.check_key(state.keycache, _backend(state), name)
    batch = body.batch_input
    if batch is None:
        return vault_response(await _answer(one, body))
    limit = state.settings.batch_max_items
    if len(batch) > limit:
        raise PayloadTooLargeError(f"batch_input has {len(batch)} items; the limit is {limit}")
    results: list[dict[str, Any]] = []
    failed = False
    for item in batch:
        try:
            try:
                result = one(item)
            except _NotMade:
                result = await _answer(one, item)
        except KeystreamError as exc:
            result = {"error": exc.message}
            failed = True
        result["reference"] = item.reference or ""
        results.append(result)
    return vault_response({"batch_results": results}, failed_item_status if failed else 200)


def _backend(state: ServiceState) -> Any:
    return state.backends.get(None)


@vault_write(router, paths.TRANSIT_ENCRYPT, responses=transit_errors(403))
async def encrypt(
    name: str, body: TransitCryptoRequest, principal: PrincipalDep, state: StateDep, request: Request
) -> Any:
    """Encrypt ``plaintext`` (base64) under the key's latest version or ``key_version``."""
    principal.require("encrypt", name)
    backend = _backend(state)
    ciphers = _Versions(
        lambda version, context: transit.encryption_cipher(state.keycache, backend, name, version, context)
    )

    def one(item: TransitItem) -> dict[str, Any]:
        _nonce(item)
        text = _required(item.plaintext, "plaintext")
        try:  # the cipher before the plaintext's decoding, which _answer would repeat after making it
            cipher: TransitCipher = ciphers.made(item.key_version or body.key_version, _context(item.context))
        except KeystreamError:
            decode_base64("plaintext", text)  # a malformed plaintext's error comes first
            raise
        plaintext = decode_base64("plaintext", text)
        return {
            "ciphertext": cipher.encrypt(plaintext, _associated(state, item)),
            "key_version": cipher.version,
        }

    note(request.scope, format="transit", items=len(body.batch_input or [body]))
    return await _run(state, name, body, one)


@vault_write(router, paths.TRANSIT_DECRYPT, responses=transit_errors(403))
async def decrypt(
    name: str, body: TransitCryptoRequest, principal: PrincipalDep, state: StateDep, request: Request
) -> Any:
    """Decrypt a ``vault:v<N>:`` ``ciphertext`` under the version it names; ``plaintext`` is base64."""
    principal.require("decrypt", name)
    backend = _backend(state)
    ciphers = _Versions(
        lambda version, context: transit.decryption_cipher(
            state.keycache, backend, name, version or 1, context
        )
    )

    def one(item: TransitItem) -> dict[str, Any]:
        version, encoded = transit.split_text(_required(item.ciphertext, "ciphertext"))
        try:  # the cipher before the base64's decoding, which _answer would repeat after making it
            cipher: TransitCipher = ciphers.made(version, _context(item.context))
        except KeystreamError:
            transit.decode_text(encoded)  # a malformed base64's error comes first
            raise
        raw = transit.decode_text(encoded)
        plaintext = cipher.decrypt(raw, _associated(state, item))
        return {"plaintext": base64_codec.encode(plaintext)}

    note(request.scope, format="transit", items=len(body.batch_input or [body]))
    return await _run(state, name, body, one)


@vault_write(router, paths.TRANSIT_REWRAP, responses=transit_errors(403))
async def rewrap(
    name: str, body: TransitCryptoRequest, principal: PrincipalDep, state: StateDep, request: Request
) -> Any:
    """Decrypt ``ciphertext`` and encrypt it again under the latest version (or ``key_version``), inside
    the server."""
    principal.require("rewrap", name)
    backend = _backend(state)
    openers = _Versions(
        lambda version, context: transit.decryption_cipher(
            state.keycache, backend, name, version or 1, context
        )
    )
    sealers = _Versions(
        lambda version, context: transit.encryption_cipher(state.keycache, backend, name, version, context)
    )

    def one(item: TransitItem) -> dict[str, Any]:
        version, raw = transit.parse_text(_required(item.ciphertext, "ciphertext"))
        context = _context(item.context)
        opener: TransitCipher = openers.made(version, context)
        associated = _associated(state, item)
        plaintext = opener.decrypt(raw, associated)
        sealer: TransitCipher = sealers.made(item.key_version or body.key_version, context)
        return {"ciphertext": sealer.encrypt(plaintext, associated), "key_version": sealer.version}

    note(request.scope, format="transit", items=len(body.batch_input or [body]))
    return await _run(state, name, body, one)


@vault_write(router, paths.TRANSIT_DATAKEY, responses=transit_errors(403, 404))
async def datakey(
    kind: str,
    name: str,
    body: TransitDataKeyRequest,
    principal: PrincipalDep,
    state: StateDep,
    response: Response,
) -> Any:
    """A random data key of ``bits`` bits encrypted under the key's latest version; ``kind`` ``plaintext``
    returns the key too, ``wrapped`` only its ciphertext."""
    if kind not in ("plaintext", "wrapped"):
        raise BadRequestError("Invalid path, must be 'plaintext' or 'wrapped'")
    principal.require("encrypt", name)
    if kind == "plaintext":
        principal.require("decrypt", name)
    if body.bits not in DATA_KEY_BITS:
        raise BadRequestError(f"invalid bits: one of {', '.join(map(str, DATA_KEY_BITS))}")
    _nonce(body)
    cipher = await transit.encryption_cipher(
        state.keycache, _backend(state), name, None, _context(body.context)
    )
    data_key = secrets.token_bytes(body.bits // 8)
    result: dict[str, Any] = {"ciphertext": cipher.encrypt(data_key, None), "key_version": cipher.version}
    if kind == "plaintext":
        result["plaintext"] = base64_codec.encode(data_key)
    response.headers["Cache-Control"] = "no-store"
    return vault_answer(result)


def _algorithm(body: TransitCryptoRequest, url_algorithm: str | None) -> str:
    return url_algorithm or body.hash_algorithm or body.algorithm or "sha2-256"


async def _hmac(
    name: str, body: TransitCryptoRequest, principal: PrincipalDep, state: ServiceState, algorithm: str
) -> Any:
    principal.require("hmac", name)
    backend = _backend(state)
    signers = _Versions(
        lambda version, _context: macs.signer(state.keycache, backend, name, version, algorithm, raw=True)
    )

    def one(item: TransitItem) -> dict[str, Any]:
        data = decode_base64("input", _required(item.input, "input"))
        signer: Signer = signers.made(item.key_version or body.key_version)
        return {"hmac": signer.tag(data, prefix=transit.HMAC_PREFIX)}

    return await _run(state, name, body, one, failed_item_status=200)


@vault_write(router, paths.TRANSIT_HMAC, responses=transit_errors(403))
async def hmac(name: str, body: TransitCryptoRequest, principal: PrincipalDep, state: StateDep) -> Any:
    """The HMAC of ``input`` (base64) as ``vault:v<N>:<base64>``, under the version's derived HMAC key."""
    return await _hmac(name, body, principal, state, _algorithm(body, None))


@vault_write(router, paths.TRANSIT_HMAC_ALGORITHM, responses=transit_errors(403))
async def hmac_algorithm(
    name: str, url_algorithm: str, body: TransitCryptoRequest, principal: PrincipalDep, state: StateDep
) -> Any:
    """As ``hmac``, the algorithm from the path."""
    return await _hmac(name, body, principal, state, _algorithm(body, url_algorithm))


async def _verify(
    name: str, body: TransitCryptoRequest, principal: PrincipalDep, state: ServiceState, algorithm: str
) -> Any:
    principal.require("verify", name)
    backend = _backend(state)
    verifiers = _Versions(
        lambda version, _context: macs.verifier(
            state.keycache, backend, name, version or 1, algorithm, raw=True
        )
    )

    def one(item: TransitItem) -> dict[str, Any]:
        if item.hmac is None and (item.signature or body.signature):
            raise BadRequestError("signatures are not supported: this key type verifies HMACs only")
        data = decode_base64("input", _required(item.input, "input"))
        version, digest = transit.parse_hmac(_required(item.hmac, "hmac"))
        verifier: Signer = verifiers.made(version)
        return {"valid": verifier.verify(data, digest)}

    return await _run(state, name, body, one, failed_item_status=200)


@vault_write(router, paths.TRANSIT_VERIFY, responses=transit_errors(403))
async def verify(name: str, body: TransitCryptoRequest, principal: PrincipalDep, state: StateDep) -> Any:
    """Whether ``hmac`` is the HMAC of ``input`` under the version it names."""
    return await _verify(name, body, principal, state, _algorithm(body, None))


@vault_write(router, paths.TRANSIT_VERIFY_ALGORITHM, responses=transit_errors(403))
async def verify_algorithm(
    name: str, url_algorithm: str, body: TransitCryptoRequest, principal: PrincipalDep, state: StateDep
) -> Any:
    """As ``verify``, the algorithm from the path."""
    return await _verify(name, body, principal, state, _algorithm(body, url_algorithm))


#: The data operations as handlers of the request alone, by operation, for the fast dispatcher
#: (:mod:`app.api.request_handler`: the body read as JSON whatever its ``Content-Type``, as
#: :class:`~app.api.vault.VaultJsonRoute` reads it; ``hmac`` and ``verify`` without an algorithm in the path,
#: with one they go through FastAPI). Through FastAPI's router and dependency solving a 1 KiB Transit encrypt
#: cost ~0.9 ms of server CPU, this way ~0.23 ms.
REQUEST_HANDLERS: dict[str, Handler] = {
    operation: request_handler(endpoint, TransitCryptoRequest, any_content_type=True)
    for operation, endpoint in (
        ("encrypt", encrypt),
        ("decrypt", decrypt),
        ("rewrap", rewrap),
        ("hmac", hmac),
        ("verify", verify),
    )
}

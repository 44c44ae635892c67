"""``POST /v1/keys/{name}/encrypt``, ``/decrypt`` and ``/rewrap``: streaming AES-CTR over bodies of any size.

Bodies are ``application/octet-stream`` (Content-Length or chunked). One whose Content-Length is at most
``small_body_max_bytes`` (64 KiB by default) is read whole and transformed in one call (sealed: by
:mod:`app.services.sealing`); any other is never buffered whole: parameters are parsed by
:mod:`app.api.params`, keys resolved by :mod:`app.services.keys`, the crypto runs in a
:class:`~app.services.crypto_step.CryptoStep` and :mod:`app.api.pump` streams it (see there for memory and
backpressure). ``POST`` on encrypt and decrypt is served by the fast dispatcher (:mod:`app.api.hotpath`),
rewrap and other methods by FastAPI's router.

* ``format=sealed`` (default): Tink ``AesCtrHmacStreaming``; decrypt releases a segment only after its tag
  verified. A bad first segment is a 400 JSON error before any output; a failure later aborts the connection.
  A streamed answer declares its length when the request declared its own (a sealed message's length is a
  function of its plaintext's; :func:`~app.api.pump.respond`'s ``length``), so the server need not frame it
  in chunks; a decrypt body of an impossible length is a 400 before it is read.
* ``format=raw``: plain AES-CTR; ``iv`` (32 hex digits, query or ``Keystream-IV`` header) is generated on
  encrypt when absent and returned in ``Keystream-IV``; ``offset`` gives random access.
* ``rewrap`` (sealed only; scope ``rewrap``): decrypt's opening chained into encrypt's sealing under the
  latest version (:class:`~app.formats.sealed.SealedRewrapper`), so the plaintext never leaves the server and
  failures are decrypt's (400 before output, abort after).
"""

from __future__ import annotations

from functools import partial

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Match, Route
from starlette.types import Scope

from app.api import paths
from app.api.middleware.audit import note
from app.api.params import (
    CryptoParams,
    check_associated_data,
    decode_base64,
    decode_context,
    wanted_headers,
)
from app.api.pump import respond
from app.errors import BadRequestError, ForbiddenError
from app.services.crypto_step import raw_step, sealed_step
from app.services.keys import (
    cached_decryption_keys,
    cached_encryption_key,
    decryption_keys,
    encryption_key,
    rewrap_target,
    sealed_rewrapper,
)
from app.services.raw import check_range, format_iv, new_iv, parse_iv
from app.services.sealing import Opening, seal_message, sealing_step
from app.services.security import Principal
from app.state import ServiceState

#: What a crypto route has once the token is checked: the service state, the key name and the parameters.
Authorized = tuple[ServiceState, str, CryptoParams]


def _authorized(request: Request, scope: str, principal: Principal | None = None) -> Authorized | None:
    """:func:`_authorize` when the token's record is cached (every request but a token's first in a
    while), without a coroutine; ``None`` when it must be read: then ``await _authorize``, which hands the
    verified ``principal`` back here, so what is checked once the token verified (``scope`` on the path's
    key, then the parameters) is written once.

    Raises:
        As :func:`_authorize`, ServiceUnavailableError aside.
    """
    asgi_scope = request.scope  # read directly: Request's app and path_params properties are a call each
    state: ServiceState = asgi_scope["app"].state.keystream
    headers = wanted_headers(request)
    if principal is None:
        principal = state.tokens.authenticate_cached(headers.get(b"authorization"))
        if principal is None:
            return None
    name: str = asgi_scope["path_params"]["name"]
    principal.require(scope, name)
    params = CryptoParams.from_request(request, headers)
    if scope == "encrypt" and params.iv and not principal.has_scope("decrypt"):
        # CTR encryption is its own inverse: encrypting a ciphertext under its IV (and offset) returns the
        # plaintext, so a caller-chosen IV turns encrypt into decrypt.
        raise ForbiddenError(
            "supplying iv on raw encrypt needs the decrypt scope too: with a chosen IV, CTR encrypt is "
            "decrypt; omit iv to get a fresh random one"
        )
    return state, name, params


async def _authorize(request: Request, scope: str) -> Authorized:
    """Check the token for ``scope`` on the path's key, then parse the parameters (401/403 before 4xx).

    Raises:
        UnauthorizedError, ForbiddenError: the token is missing, invalid or not allowed here.
        ServiceUnavailableError: the token had to be read and the keystore cannot serve.
        ValidationError, UnsupportedMediaTypeError: as :meth:`CryptoParams.from_request`.
    """
    state: ServiceState = request.scope["app"].state.keystream
    principal = await state.tokens.authenticate(wanted_headers(request).get(b"authorization"))
    authorized = _authorized(request, scope, principal)
    assert authorized is not None  # (given the principal, it has its answer)
    return authorized


def _sealed_only(params: CryptoParams) -> None:
    if params.iv is not None or params.offset:
        raise BadRequestError("iv and offset apply to format=raw only")


def _raw_only(params: CryptoParams) -> None:
    if params.associated_data:
        raise BadRequestError("associated data applies to format=sealed only")


def _check_declared_range(params: CryptoParams) -> None:
    """Refuse up front (400, before any response) a body whose declared length runs past keystream byte 2**64;
    a chunked body can only be stopped when it gets there (the stream is then aborted)."""
    if params.content_length is not None:
        check_range(params.offset, params.content_length)


def _context(params: CryptoParams) -> bytes | None:
    """A derived key's context from the ``Keystream-Context`` header (``None`` without one)."""
    text = params.context
    return decode_context(text) if text else None  # (no call without the header, the usual case)


def _associated_data(state: ServiceState, params: CryptoParams) -> bytes:
    if not params.associated_data:
        return b""  # none given (the usual case): nothing to decode or check
    value = decode_base64("Keystream-Associated-Data", params.associated_data)
    return check_associated_data(value, state.settings.max_associated_data)


async def encrypt(request: Request) -> Response:
    """Encrypt the request body; the response carries ``Keystream-Key-Version`` (raw: ``Keystream-IV``)."""
    state, name, params = _authorized(request, "encrypt") or await _authorize(request, "encrypt")
    chosen = state.backends.get(params.backend)
    inline_max = state.settings.inline_crypto_max_bytes
    headers: dict[str, str] = {}
    if params.format == "sealed":
        _sealed_only(params)
        ad = _associated_data(state, params)
        context = _context(params)
        key = cached_encryption_key(state.keycache, name, chosen, params.key_version, context)
        if key is None:  # not in the key cache: read in a worker thread
            key = await encryption_key(state.keycache, name, chosen, params.key_version, context)
        scheme = key.parameters.scheme
        note(request.scope, format="sealed", scheme=scheme, backend=chosen.name, associated_data=ad)
        headers["Keystream-Key-Version"] = str(key.version)
        headers["Keystream-Backend"] = chosen.name
        # Partials, not nested functions: those made a function and cells of what they use on every
        # request, and seal_whole a coroutine of its own around seal_message's.
        return await respond(
            request,
            params,
            headers,
            state.settings.small_body_max_bytes,
            partial(sealing_step, chosen, key, ad, inline_max, params.content_length),
            # One call seals a small body (natively on aesni): no encryptor, no stream.
            whole=partial(seal_message, state.settings, chosen, key, ad),
            length=key.parameters.sealed_length,
        )
    else:
        _raw_only(params)
        key = await encryption_key(state.keycache, name, chosen, params.key_version, _context(params))
        note(request.scope, format="raw", scheme=key.parameters.scheme, backend=chosen.name)
        _check_declared_range(params)
        iv = parse_iv(params.iv) if params.iv else new_iv()
        step = raw_step(chosen, "encrypt", key.expanded, iv, params.offset, inline_max=inline_max)
        headers["Keystream-IV"] = format_iv(iv)
        headers["Keystream-Key-Version"] = str(key.version)
        headers["Keystream-Backend"] = chosen.name
    return await respond(request, params, headers, state.settings.small_body_max_bytes, lambda: step)


async def decrypt(request: Request) -> Response:
    """Decrypt the request body (sealed: verified segment by segment; raw: needs ``iv`` and a version)."""
    state, name, params = _authorized(request, "decrypt") or await _authorize(request, "decrypt")
    chosen = state.backends.get(params.backend)
    inline_max = state.settings.inline_crypto_max_bytes
    headers = {"Keystream-Backend": chosen.name}
    if params.format == "raw":
        _raw_only(params)
        if not params.iv:
            raise BadRequestError("format=raw decrypt needs iv (32 hex digits, query or Keystream-IV header)")
        if params.key_version is None:
            raise BadRequestError(
                "format=raw decrypt needs key_version (the encrypt response's Keystream-Key-Version header)"
            )
        _check_declared_range(params)
        key = (
            await decryption_keys(state.keycache, name, chosen, params.key_version, _context(params))
        ).first
        note(request.scope, format="raw", scheme=key.parameters.scheme, backend=chosen.name)
        iv = parse_iv(params.iv)
        step = raw_step(chosen, "decrypt", key.expanded, iv, params.offset, inline_max=inline_max)
        headers["Keystream-Key-Version"] = str(key.version)
        return await respond(request, params, headers, state.settings.small_body_max_bytes, lambda: step)

    _sealed_only(params)
    ad = _associated_data(state, params)
    context = _context(params)
    keys = cached_decryption_keys(state.keycache, name, chosen, params.key_version, context)
    if keys is None:  # not in the key cache: read in a worker thread
        keys = await decryption_keys(state.keycache, name, chosen, params.key_version, context)
    parameters = keys.candidates[0].parameters  # (keys.first, without its property call)
    note(request.scope, format="sealed", scheme=parameters.scheme, backend=chosen.name, associated_data=ad)
    opening = Opening(state.settings, chosen, keys, ad)
    return await respond(
        request,
        params,
        headers,
        state.settings.small_body_max_bytes,
        opening.stream,
        whole=opening.whole,
        key_version=opening.key_version,
        length=parameters.opened_length,  # every version of a key shares its parameters
    )


async def rewrap(request: Request) -> Response:
    """Open a sealed body (under ``key_version``, or the versions decrypt would try) and seal its plaintext
    under the latest version, with the same associated data; ``Keystream-Key-Version`` is the new version.

    Raises:
        BadRequestError: ``format=raw``, ``iv`` or ``offset`` (a rewrap takes and gives sealed messages),
            or the body's first segment does not verify (``decryption_failed``, before any output).
    """
    state, name, params = await _authorize(request, "rewrap")
    if params.format != "sealed":
        raise BadRequestError("rewrap takes format=sealed ciphertexts only")
    _sealed_only(params)
    chosen = state.backends.get(params.backend)
    ad = _associated_data(state, params)
    context = _context(params)
    keys = await decryption_keys(state.keycache, name, chosen, params.key_version, context)
    target = await rewrap_target(state.keycache, name, chosen, context)
    scheme = target.parameters.scheme
    note(request.scope, format="sealed", scheme=scheme, backend=chosen.name, associated_data=ad)
    rewrapper = sealed_rewrapper(keys, target, ad, chosen)
    step = sealed_step(
        chosen,
        "rewrap",
        rewrapper,
        target.parameters.segment_size,
        inline_max=state.settings.inline_crypto_max_bytes,
        candidates=len(keys.candidates),
    )
    headers = {"Keystream-Backend": chosen.name, "Keystream-Key-Version": str(target.version)}
    return await respond(request, params, headers, state.settings.small_body_max_bytes, lambda: step)


#: Plain Starlette routes: FastAPI's routing and dependency solving cost more than the AES work of a 1 KiB
#: message (the 1 KiB encrypt went from ~4x to ~2x the server time of ``/healthz``). Auth and parameters
#: are handled above by hand. Through FastAPI (rewrap, or a request the dispatcher leaves to it) errors go
#: through the app's exception handlers; on the fast dispatcher (:mod:`app.api.hotpath`) they do not: its own
#: last step answers them with the same :mod:`app.api.errors` responses.
class TemplateRoute(Route):
    """A Starlette route that records itself as ``scope["route"]``, as FastAPI's routes do, so the request
    metrics are labelled with its path template."""

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        match, child_scope = super().matches(scope)
        if match != Match.NONE:
            child_scope["route"] = self
        return match, child_scope


routes = [
    TemplateRoute(paths.ENCRYPT, encrypt, methods=["POST"], name="encrypt"),
    TemplateRoute(paths.DECRYPT, decrypt, methods=["POST"], name="decrypt"),
    TemplateRoute(paths.REWRAP, rewrap, methods=["POST"], name="rewrap"),
]

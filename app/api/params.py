"""Query parameters and headers of the streaming routes (encrypt, decrypt, rewrap), parsed by hand.

FastAPI's per-parameter dependency machinery cost more than the AES work of a 1 KiB message (over half of the
request's server time in a profile), so the hot path reads the ASGI scope directly; the OpenAPI document still
documents every parameter (:data:`app.api.openapi.OPENAPI_PARAMETERS`). The batch routes share the base64 and
associated-data checks.
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BeforeValidator, Field
from starlette.requests import Request

from app.core import base64_codec
from app.errors import BadRequestError, PayloadTooLargeError, UnsupportedMediaTypeError, ValidationError
from app.keystore import MAX_AUTO_ROTATE_PERIOD, MIN_AUTO_ROTATE_PERIOD
from app.services.raw import MAX_OFFSET


class CryptoParams(NamedTuple):
    """Query parameters and headers of encrypt/decrypt (see the module docstring for why by hand).

    A named tuple: immutable like a frozen dataclass, and built in a fraction of its time (a frozen
    dataclass sets each of its seven fields through ``object.__setattr__``, on every request).
    """

    format: str = "sealed"
    backend: str | None = None
    key_version: int | None = None
    iv: str | None = None
    offset: int = 0
    associated_data: str | None = None
    content_length: int | None = None
    context: str | None = None

    @classmethod
    def from_request(cls, request: Request, headers: dict[bytes, str]) -> CryptoParams:
        """Parse and validate; ``headers`` come from :func:`wanted_headers`.

        Raises:
            BadRequestError: a ``Keystream-*`` header or a query parameter given twice (400), an unknown
                query parameter, or a query parameter and its header that differ.
            ValidationError: a malformed value (422, the message names the parameter and what is allowed).
            UnsupportedMediaTypeError: a body type other than ``application/octet-stream`` (415).
        """
        content_type = headers.get(b"content-type")
        if content_type is not None and content_type != OCTET_STREAM:  # the usual value needs no parsing
            media_type = content_type.split(";", 1)[0].strip().lower()
            if media_type and media_type != OCTET_STREAM:
                raise UnsupportedMediaTypeError(f"expected application/octet-stream, got {media_type}")
        if headers.keys() <= _PLAIN_HEADERS and not request.scope.get("query_string"):
            # No query and no Keystream-* header (most requests): every parameter has its default. Built by
            # tuple.__new__ from the defaults around content_length: the named tuple's generated __new__ is
            # a Python call on every request.
            return tuple.__new__(cls, (*_BEFORE_LENGTH, _content_length(headers), *_AFTER_LENGTH))
        repeated = headers.get(REPEATED_HEADERS)
        if repeated is not None:
            raise BadRequestError(f"header {repeated} given more than once; give it once")
        query: Mapping[str, str] = request.query_params if request.scope.get("query_string") else _NO_QUERY
        if query is not _NO_QUERY:
            _refuse_unknown(query)
            refuse_repeated_query(request)
        fmt = query.get("format", "sealed")
        if fmt not in ("sealed", "raw"):
            raise ValidationError("format: must be sealed or raw")
        version_text = _one_value(
            "key_version", query.get("key_version"), headers.get(b"keystream-key-version")
        )
        offset = query.get("offset")
        return cls(
            format=fmt,
            backend=query.get("backend") or None,
            key_version=_integer("key_version", version_text, 1, None) if version_text else None,
            iv=_one_value("iv", query.get("iv"), headers.get(b"keystream-iv")),
            offset=_integer("offset", offset, 0, MAX_OFFSET) if "offset" in query else 0,
            associated_data=headers.get(b"keystream-associated-data") or None,
            content_length=_content_length(headers),
            context=headers.get(b"keystream-context") or None,
        )


_NO_QUERY: dict[str, str] = {}
OCTET_STREAM = "application/octet-stream"


#: The field defaults of :class:`CryptoParams` before and after ``content_length`` (the plain request's).
_BEFORE_LENGTH = tuple(CryptoParams())[: CryptoParams._fields.index("content_length")]
_AFTER_LENGTH = tuple(CryptoParams())[CryptoParams._fields.index("content_length") + 1 :]


def _content_length(headers: dict[bytes, str]) -> int | None:
    """The declared body length (``None`` without a valid ``Content-Length``: the body is then streamed)."""
    declared = headers.get(b"content-length")
    return int(declared) if declared is not None and is_ascii_integer(declared) else None


#: The query parameters of the streaming routes (everything else is a header: associated data, the IV...).
QUERY_PARAMETERS = ("format", "backend", "key_version", "iv", "offset")


def _refuse_unknown(query: Mapping[str, str]) -> None:
    """Refuse a query parameter these routes do not read, rather than ignore it: ``?associated_data=...``
    ignored would seal without the associated data its sender meant to bind.

    Raises:
        BadRequestError: the parameters not in :data:`QUERY_PARAMETERS` (names only, never values).
    """
    unknown = sorted(name for name in query if name not in QUERY_PARAMETERS)
    if unknown:
        names = ", ".join(repr(name[:64]) for name in unknown[:5])
        raise BadRequestError(
            f"unknown query parameter {names}: these routes take {', '.join(QUERY_PARAMETERS)}; associated "
            "data goes in the Keystream-Associated-Data header"
        )


def refuse_repeated_query(request: Request) -> None:
    """Refuse a query parameter given more than once, rather than let the last one win:
    ``?backend=aesni&backend=python`` would run the backend a proxy or an auditor reading the first value
    did not see.

    Raises:
        BadRequestError: the repeated names (never their values).
    """
    query = request.query_params
    if len(query) == len(query.multi_items()):
        return
    names = sorted({name for name in query if len(query.getlist(name)) > 1})
    shown = ", ".join(repr(name[:64]) for name in names[:5])
    raise BadRequestError(f"query parameter {shown} given more than once; give each once")


def _one_value(field: str, query: str | None, header: str | None) -> str | None:
    """The value given as query parameter or header (empty = absent); both must agree when both are given.

    Raises:
        BadRequestError: the two differ (two readers of the request could otherwise disagree).
    """
    if query and header and query != header:
        raise BadRequestError(f"{field}: the query parameter and the header differ; give one")
    return query or header or None


_WANTED_HEADERS = frozenset(
    {
        b"authorization",
        b"content-type",
        b"content-length",
        b"keystream-key-version",
        b"keystream-iv",
        b"keystream-associated-data",
        b"keystream-context",
    }
)


#: The headers of :data:`_WANTED_HEADERS` that set no parameter but the length: a request that sends no other
#: (and no query string) takes every default.
_PLAIN_HEADERS = frozenset({b"authorization", b"content-type", b"content-length"})
#: The headers of :data:`_WANTED_HEADERS` that must come at most once (``Authorization`` has its own rule;
#: a repeated ``Content-Length`` is the HTTP server's to refuse).
#: By wire name, the spelling an error message uses.
_SINGLE_HEADERS = {
    b"keystream-key-version": "Keystream-Key-Version",
    b"keystream-iv": "Keystream-IV",
    b"keystream-associated-data": "Keystream-Associated-Data",
    b"keystream-context": "Keystream-Context",
}
#: Key of :func:`wanted_headers`' result naming the ``Keystream-*`` headers that came more than once (not a
#: valid header name, so no request can set it).
REPEATED_HEADERS = b":repeated"


def wanted_headers(request: Request) -> dict[bytes, str]:
    """The request headers encrypt/decrypt read, in one pass over the raw list (names are lower case).

    A ``Keystream-*`` header that comes twice is not resolved here (last wins would bind, say, the second
    associated data a proxy never looked at): its name goes under :data:`REPEATED_HEADERS`, for
    :meth:`CryptoParams.from_request` to refuse once the token has been checked (401/403 first).
    """
    found: dict[bytes, str] = {}
    for name, value in request.scope["headers"]:
        if name in _WANTED_HEADERS:
            if name in found and name in _SINGLE_HEADERS:
                found[REPEATED_HEADERS] = _SINGLE_HEADERS[name]
            found[name] = value.decode("latin-1")
    return found


#: The longest integer text a parameter may hold: 20 digits cover every u64 (offsets, versions).
MAX_INTEGER_DIGITS = 20
#: The largest integer parameter, so the schema's ``maximum`` says what the parser takes.
MAX_INTEGER_PARAMETER = 10**MAX_INTEGER_DIGITS - 1


def is_ascii_integer(text: str) -> bool:
    """True when ``text`` is 1 to :data:`MAX_INTEGER_DIGITS` ASCII digits and nothing else.

    ``int()`` alone is too lax for wire input: it also takes ``"٣"`` (any Unicode decimal digit), ``"+3"``,
    ``" 3 "`` and ``"3_0"``, so two parsers of the same request could read different numbers.
    """
    return 0 < len(text) <= MAX_INTEGER_DIGITS and text.isascii() and text.isdigit()


def ascii_integer(value: object) -> object:
    """A pydantic ``BeforeValidator`` for integer query parameters: a string must be ASCII digits.

    Raises:
        ValueError: a string that :func:`is_ascii_integer` refuses (pydantic turns it into a 422).
    """
    if isinstance(value, str) and not is_ascii_integer(value):
        raise ValueError(f"must be an integer of at most {MAX_INTEGER_DIGITS} ASCII digits")
    return value


#: A ``key_version`` parameter of the FastAPI routes: ASCII digits only (see :func:`is_ascii_integer`), >= 1.
#: ``Field`` before the validator, or pydantic writes ``"ge"`` instead of ``"minimum"`` into the schema.
KeyVersion = Annotated[int, Field(ge=1, le=MAX_INTEGER_PARAMETER), BeforeValidator(ascii_integer)]


def _integer(field: str, text: str | None, minimum: int, maximum: int | None) -> int:
    if text is None or not is_ascii_integer(text):
        raise ValidationError(f"{field}: must be an integer of at most {MAX_INTEGER_DIGITS} ASCII digits")
    value = int(text)
    if value < minimum or (maximum is not None and value > maximum):
        upper = f" and at most {maximum}" if maximum is not None else ""
        raise ValidationError(f"{field}: must be at least {minimum}{upper}")
    return value


def decode_base64(field: str, value: str | None) -> bytes:
    """Decode a base64 field (``None`` is empty).

    Raises:
        BadRequestError: not base64 (the message names ``field``).
    """
    if not value:
        return b""
    try:
        # strict: what binascii.a2b_base64(value, strict_mode=True) accepts, through pybase64's SIMD reader
        return base64_codec.decode(value)
    except (binascii.Error, ValueError):
        raise BadRequestError(f"{field} must be base64") from None


def check_associated_data(data: bytes, limit: int) -> bytes:
    """Return ``data`` when it is at most ``limit`` bytes.

    Raises:
        PayloadTooLargeError: longer than ``limit`` (``max_associated_data``).
    """
    if len(data) > limit:
        raise PayloadTooLargeError(f"associated data is {len(data)} bytes; the limit is {limit}")
    return data


#: Standard base64 with padding (documented in schemas; checked by decoding, 400 when it fails).
BASE64_PATTERN = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"


_PERIOD_DESCRIPTION = (
    "Automatic rotation period: seconds, or a duration such as 24h, 90m, 1h30m or 7d (units d, h, m, s). 0 "
    "turns automatic rotation off; otherwise at least 1 hour (3600 s) and at most 10 years: a duration "
    "string outside that range gets 400. The key rotates once its latest version is this old, exactly once "
    "across all workers and replicas. Read back in seconds."
)
#: The schema of a period: 0, or an integer in range, or a string of seconds or of a duration.
_PERIOD_SCHEMA = {
    "anyOf": [
        {"type": "integer", "enum": [0]},
        {"type": "integer", "minimum": MIN_AUTO_ROTATE_PERIOD, "maximum": MAX_AUTO_ROTATE_PERIOD},
        {"type": "string", "pattern": r"^(?:[0-9]{1,10}|(?:[0-9]{1,10}[dhms]){1,4})$"},
    ]
}
AutoRotatePeriod = Annotated[
    int | str,
    Field(description=_PERIOD_DESCRIPTION, examples=[86400, "24h"], json_schema_extra=_PERIOD_SCHEMA),
]

#: Most random bytes one call returns.
MAX_RANDOM_BYTES = 65536
#: The digests of ``/v1/hash``, by their API names (Vault's).
HASHES: dict[str, Callable[[bytes], Any]] = {
    "sha2-224": hashlib.sha224,
    "sha2-256": hashlib.sha256,
    "sha2-384": hashlib.sha384,
    "sha2-512": hashlib.sha512,
    "sha3-224": hashlib.sha3_224,
    "sha3-256": hashlib.sha3_256,
    "sha3-384": hashlib.sha3_384,
    "sha3-512": hashlib.sha3_512,
}
#: The output encodings of random bytes and digests.
Encoding = Literal["base64", "hex"]
HashAlgorithm = Literal[
    "sha2-224", "sha2-256", "sha2-384", "sha2-512", "sha3-224", "sha3-256", "sha3-384", "sha3-512"
]


#: The header that carries a derived key's context on the streaming and the batch routes (base64).
CONTEXT_HEADER = "Keystream-Context"


def decode_context(text: str | None, field: str = CONTEXT_HEADER) -> bytes | None:
    """A derived key's ``context`` from its base64 ``text`` (``None`` when absent or empty).

    Raises:
        BadRequestError: malformed base64 (the message names ``field``).
    """
    return decode_base64(field, text) or None if text else None


def header_context(request: Request) -> bytes | None:
    """The ``Keystream-Context`` header of a batch request, decoded (``None`` without one).

    Raises:
        BadRequestError: the header is given more than once, or is not base64.
    """
    values = request.headers.getlist(CONTEXT_HEADER)
    if len(values) > 1:
        raise BadRequestError(f"header {CONTEXT_HEADER} given more than once; give it once")
    return decode_context(values[0] if values else None)

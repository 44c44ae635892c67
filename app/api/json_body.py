"""A route's pydantic body, read as FastAPI reads it, for handlers the fast dispatcher calls.

The fast dispatcher (:mod:`app.api.hotpath`) serves a few JSON routes without FastAPI's router and dependency
solving; their handlers must still answer every body exactly as FastAPI would, so a client cannot tell which
way a request went. FastAPI, for a route with one body parameter, first parses the body
(:func:`parse_body`), then solves the dependencies (the ``application/json`` check,
:func:`app.api.deps.require_json`, answers 415 here), then validates (:func:`validate_body`):

* a body whose ``Content-Type`` is ``application/json`` or ``application/*+json`` is parsed by
  :func:`app.api.strict_json.loads`; a syntax error is ``json_invalid`` at ``body`` and its position; bytes
  that are not UTF-8, ``NaN`` and too deep a nesting are :func:`app.api.errors.malformed_json_error`;
* any other body is left as bytes (FastAPI's strict content type: without a ``Content-Type`` too), which
  the model refuses as it refuses any non-object;
* an empty body is the field's ``missing`` error at ``body``;
* the model's own errors carry ``body`` before their location.

``tests/app/api/test_hotpath_login.py`` sends the same requests both ways and compares the answers.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar

import msgspec
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from starlette.requests import Request

from app.api.errors import malformed_json_error
from app.api.strict_json import NonJsonNumberError, loads

__all__ = ["FAST_NESTING", "NO_BODY", "parse_body", "read_json", "validate_body"]

Model = TypeVar("Model", bound=BaseModel)


class _NoBody:
    """What :func:`parse_body` returns for an empty body (JSON ``null`` is ``None``, validated as a value)."""


#: The one :class:`_NoBody`.
NO_BODY = _NoBody()

#: Values msgspec read that nest less deeply than this are kept; deeper ones are read by ``loads`` again.
FAST_NESTING = 400
_FAST = msgspec.json.Decoder()


def _shallow(value: Any) -> bool:
    """Whether ``value`` nests less than :data:`FAST_NESTING` deep (a walk over its containers only: a
    Transit batch of 100 items is about a hundred steps, where counting brackets read every byte)."""
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        children = item.values() if type(item) is dict else item
        for child in children:
            if type(child) is dict or type(child) is list:
                if depth + 1 >= FAST_NESTING:
                    return False
                pending.append((child, depth + 1))
    return True


def read_json(raw: bytes) -> Any:
    """``raw`` as :func:`~app.api.strict_json.loads` reads it, read by msgspec when it can: for a Transit
    batch of 100 base64 texts of 1 KiB the standard library's reader cost about twice msgspec's.

    msgspec takes only UTF-8 and refuses ``NaN`` as ``loads`` does, and builds the same values (the last of
    a repeated key wins in both); where it refuses a body, ``loads`` reads it again, so every error is
    ``loads``'s own. Only its nesting limit is a few levels deeper than ``loads``'s (both count the
    interpreter's stack), so a value nested :data:`FAST_NESTING` deep is read by ``loads`` again.

    Raises:
        as :func:`~app.api.strict_json.loads`.
    """
    try:
        value = _FAST.decode(raw)
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        return loads(raw)
    if (type(value) is dict or type(value) is list) and not _shallow(value):
        return loads(raw)
    return value


async def parse_body(request: Request, *, any_type: bool = False) -> Any:
    """The request's body as FastAPI hands it to validation: parsed JSON for a JSON content type, else the
    bytes; :data:`NO_BODY` for an empty body. ``any_type``: parsed as JSON whatever its ``Content-Type``, as
    the Transit API's routes read bodies (:class:`app.api.vault.VaultJsonRoute`).

    Raises:
        RequestValidationError: malformed JSON (422; never echoed).
    """
    raw = await request.body()
    if not raw:
        return NO_BODY
    media_type = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    main, _, sub = media_type.partition("/")
    if not any_type and (main != "application" or not (sub == "json" or sub.endswith("+json"))):
        return raw
    try:
        return read_json(raw)
    except json.JSONDecodeError as exc:
        raise RequestValidationError(
            [{"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error"}]
        ) from None
    except (UnicodeDecodeError, RecursionError, NonJsonNumberError) as exc:
        raise malformed_json_error(exc) from None


def validate_body(model: type[Model], data: Any) -> Model:
    """``data`` (from :func:`parse_body`) as ``model``.

    Raises:
        RequestValidationError: no body, or one ``model`` refuses (422; inputs never echoed).
    """
    if data is NO_BODY:
        raise RequestValidationError([{"type": "missing", "loc": ("body",), "msg": "Field required"}])
    try:
        return model.model_validate(data, from_attributes=True)  # as FastAPI validates a body field
    except ValidationError as exc:
        errors = [
            {"type": error["type"], "loc": ("body", *error["loc"]), "msg": error["msg"]}
            for error in exc.errors(include_url=False, include_input=False)
        ]
        raise RequestValidationError(errors) from None

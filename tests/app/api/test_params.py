"""The streaming routes' parameters: the usual request (no query, no ``Keystream-*`` header) takes every
default and its declared length, answered by a shortcut that must agree with the general parse."""

from __future__ import annotations

import pytest
from starlette.requests import Request

from app.api.params import CryptoParams, is_ascii_integer, wanted_headers

LENGTHS = ["0", "1024", "9" * 20, "9" * 21, "", "+3", " 3", "3 ", "3_0", "٣", "1e3", "-1", "0x10"]


def _request(query: bytes = b"") -> Request:
    return Request({"type": "http", "method": "POST", "headers": [], "query_string": query})


@pytest.mark.parametrize("declared", [None, *LENGTHS])
def test_the_usual_request_takes_every_default_and_its_declared_length(declared: str | None) -> None:
    headers = {b"authorization": "Bearer x", b"content-type": "application/octet-stream"}
    if declared is not None:
        headers[b"content-length"] = declared
    params = CryptoParams.from_request(_request(), headers)
    length = int(declared) if declared is not None and is_ascii_integer(declared) else None
    assert type(params) is CryptoParams
    assert params == CryptoParams(content_length=length)
    assert params._asdict() == {**CryptoParams()._asdict(), "content_length": length}
    # The general parse (a Keystream-* header present) reads the same length.
    general = CryptoParams.from_request(_request(), {**headers, b"keystream-context": ""})
    assert general.content_length == params.content_length


def test_a_query_string_is_never_taken_for_the_usual_request() -> None:
    with pytest.raises(Exception, match="unknown query parameter"):
        CryptoParams.from_request(_request(b"associated_data=x"), {b"content-length": "3"})


def test_wanted_headers_feed_the_usual_request() -> None:
    request = Request(
        {
            "type": "http",
            "method": "POST",
            "query_string": b"",
            "headers": [(b"host", b"h"), (b"content-length", b"1024"), (b"authorization", b"Bearer x")],
        }
    )
    assert CryptoParams.from_request(request, wanted_headers(request)) == CryptoParams(content_length=1024)

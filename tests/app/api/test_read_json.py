"""The fast dispatcher's JSON reader (msgspec first) reads every body as strict_json.loads does: the same
value, or the same error."""

from __future__ import annotations

import math
from typing import Any

import pytest

from app.api.json_body import FAST_NESTING, read_json
from app.api.strict_json import loads

BODIES = [
    b'{"a":1,"a":2}',
    b'{"plaintext":"QUJD","key_version":2,"batch_input":[{"context":null,"x":[true,false]}]}',
    b"1e400",
    b"-1e400",
    b"1.5e-400",
    b"-0",
    b"-0.0",
    b"0.1",
    b"1.1000000000000001",
    b"2.2250738585072014e-308",
    b"123456789012345678901234567890",
    b"-123456789012345678901234567890",
    b'"\\ud800"',
    b'"\\ud83d\\ude00"',
    b'"\\u00e9\\n\\t\\/\\\\"',
    '"é€😀"'.encode(),
    b"\xef\xbb\xbf{}",
    b'"a\x01"',
    b'"\x7f"',
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b'{"a":NaN}',
    b"[1,]",
    b"{}\x00",
    b"\x0c{}",
    b" \t\r\n{} \n",
    b'"\xff"',
    b'"\xed\xa0\x80"',
    b'"\xc0\x80"',
    b"\xf4\x90\x80\x80",
    b"",
    b"nul",
    b"null",
    b"[" * (FAST_NESTING - 1) + b"]" * (FAST_NESTING - 1),
    b"[" * (FAST_NESTING + 1) + b"]" * (FAST_NESTING + 1),
    b'[{"a":' * FAST_NESTING + b"1" + b"}]" * FAST_NESTING,
    b"[" * 994 + b"]" * 994,
    b"[" * 996 + b"]" * 996,
    b"[" * 5000 + b"]" * 5000,
    b'{"a":' * 995 + b"1" + b"}" * 995,
    "\u0000".encode("utf-16"),
]


def _outcome(read: Any, raw: bytes) -> tuple[str, Any]:
    try:
        value = read(raw)
    except BaseException as exc:  # the error itself is compared
        return "error", (type(exc), str(exc))
    return "value", value


def _same(left: Any, right: Any) -> bool:
    """Equal values of equal types (floats with their sign, NaN equal to NaN), without recursion: the
    bodies nest deeper than the interpreter's stack allows."""
    pending = [(left, right)]
    while pending:
        a, b = pending.pop()
        if type(a) is not type(b):
            return False
        if isinstance(a, float):
            if not (
                (math.isnan(a) and math.isnan(b)) or (a == b and math.copysign(1, a) == math.copysign(1, b))
            ):
                return False
        elif isinstance(a, list):
            if len(a) != len(b):
                return False
            pending.extend(zip(a, b, strict=True))
        elif isinstance(a, dict):
            if list(a) != list(b):
                return False
            pending.extend((a[key], b[key]) for key in a)
        elif a != b:
            return False
    return True


@pytest.mark.parametrize("raw", BODIES, ids=range(len(BODIES)))
def test_read_json_reads_as_loads(raw: bytes) -> None:
    ours, theirs = _outcome(read_json, raw), _outcome(loads, raw)
    assert ours[0] == theirs[0]
    if ours[0] == "error":
        assert ours[1] == theirs[1]
    else:
        assert _same(ours[1], theirs[1])

"""Transit's ``vault:v<version>:<base64>`` texts read as the pattern-then-decode reading did: the same
version and bytes, and for each malformed text the same message (another shape, or malformed base64)."""

from __future__ import annotations

import base64
import binascii
import random

from app.errors import BadRequestError
from app.formats.transit import _TEXT, parse_text

_PIECES = [
    "A",
    "Q",
    "z",
    "0",
    "+",
    "/",
    "=",
    "==",
    "===",
    "QQ",
    "QUI",
    "QUJD",
    "\n",
    " ",
    "-",
    "_",
    ":",
    "é",
    "v",
    "\r",
    "\t",
    "\x00",
    "\udcff",
]


def _reference(text: str) -> tuple[int, bytes] | str:
    """What ``parse_text`` answered when it matched :data:`_TEXT` whole, then decoded with
    ``b64decode(validate=True)``: the version and bytes, or the error's message."""
    match = _TEXT.fullmatch(text)
    if match is None:
        return "invalid ciphertext: expected vault:v<version>:<base64>"
    try:
        raw = base64.b64decode(match.group(2), validate=True)
    except binascii.Error:
        return "invalid ciphertext: malformed base64"
    return int(match.group(1)), raw


def _ours(text: str) -> tuple[int, bytes] | str:
    try:
        return parse_text(text)
    except BadRequestError as exc:
        return exc.message


def _texts() -> list[str]:
    chosen = random.Random(7)
    heads = [
        "vault:v1:",
        "vault:v12:",
        "vault:v0:",
        "vault:v1",
        "vault:v01:",
        "vault:v12345678901:",
        "vault:v9:",
        "",
    ]
    texts = [
        head + "".join(chosen.choices(_PIECES, k=chosen.randrange(0, 9)))
        for head in heads
        for _ in range(400)
    ]
    texts += ["vault:v1:" + base64.b64encode(bytes(range(n))).decode() for n in range(40)]
    # Around 1 KiB (pybase64's SIMD loops, then its tail), whole and with a piece put anywhere.
    for n in range(1020, 1030):
        encoded = base64.b64encode(chosen.randbytes(n)).decode()
        texts.append("vault:v1:" + encoded)
        for _ in range(12):
            at = chosen.randrange(len(encoded) + 1)
            texts.append("vault:v1:" + encoded[:at] + chosen.choice(_PIECES) + encoded[at:])
    texts += [
        "vault:v1:",
        "vault:v1:=",
        "vault:v1:==",
        "vault:v1:QQ=",
        "vault:v1:QQ==",
        "vault:v1:QQ==QQ==",
        "x",
    ]
    return texts


def test_every_text_reads_as_the_pattern_then_the_decoder_read_it() -> None:
    texts = _texts()
    assert len(texts) > 3000
    differ = [(text, _ours(text), _reference(text)) for text in texts if _ours(text) != _reference(text)]
    assert differ == []  # (text, now, before) for each text read differently

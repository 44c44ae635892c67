"""The payload codec reads every text as the strict standard-library reader does, and writes what
``base64.b64encode`` writes: through each of pybase64's SIMD paths this CPU has, its plain C path, and its
pure-Python fallback (what runs where the C extension is missing)."""

from __future__ import annotations

import base64
import binascii
import itertools
import random
from collections.abc import Callable, Iterator

import pybase64
import pybase64._fallback
import pytest

from app.core import base64_codec

Outcome = bytes | tuple[str, str]


def _strict(text: str) -> Outcome:
    """What the judge answers: the bytes, or the exception's type and message."""
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        return type(exc).__name__, str(exc)


def _ours(text: str) -> Outcome:
    try:
        return base64_codec.decode(text)
    except (binascii.Error, ValueError) as exc:
        return type(exc).__name__, str(exc)


def _edge_cases() -> list[str]:
    """The cases named in the issue, and their neighbours."""
    r = random.Random(3)
    kib = base64.b64encode(r.randbytes(1024)).decode()
    texts = [
        "",
        "=",
        "==",
        "===",
        "====",
        "QQ",
        "QQ=",
        "QQ==",
        "QQ===",
        "QQ====",
        "QUI",
        "QUI=",
        "QUI==",
        "QUJD",
        "QUJD=",
        "QUJD==",
        "QUJD===",
        "QUJD====",
        "QR==",  # non-canonical: unused bits set (both readers ignore them)
        "QUL=",
        "QQ==QQ==",  # padding in the middle
        "QQ=A",
        "Q=QQ",
        "=QQQ",
        "QUJD=QUJD",
        "QUJDQQ==QUJD",
        "QQ==\n",
        "\nQQ==",
        " QQ==",
        "QQ== ",
        "QU JD",
        "QUJD\r\n",
        "QUJD\t",
        "-_-_",  # URL-safe alphabet
        "QUJ-",
        "QUJ_",
        "é",
        "QUJDé",
        "QUJD\u00ff",
        "QUJD\u0100",
        "QUJD\U0001f600",
        "ＱＵＪＤ",  # full-width letters (Unicode digits and letters are not base64)
        "QUJD\x00",
        "\x00\x00\x00\x00",
        "QUJD\x7f",
        "QUJD\udcff",  # a lone surrogate (JSON can carry one)
        kib,
        kib + "=",
        kib + "==",
        kib[:-4] + "=" + kib[-3:],
        kib[:512] + "\n" + kib[512:],
        kib[:512] + "-" + kib[513:],
        kib[:512] + "é" + kib[513:],
        kib[:-1],
        kib[:-2],
        kib + kib,
    ]
    # Every length 0..8 of encoded bytes, and around 1 KiB, with and without their padding.
    for n in [*range(9), *range(1020, 1030)]:
        good = base64.b64encode(r.randbytes(n)).decode()
        texts += [good, good.rstrip("="), good + "=", good + "==", good.replace("+", "-").replace("/", "_")]
    return texts


def _small_alphabets() -> Iterator[str]:
    """Every string up to a few characters over alphabets that mix the letters with padding, whitespace,
    URL-safe and non-ASCII characters: where readers differ, it is in the padding and at the end."""
    for alphabet, longest in [("AQ=", 8), ("Aw/=\n", 6), ("A+=_ é", 5), ("Q=-\x00\udcff", 5)]:
        for length in range(longest + 1):
            for chars in itertools.product(alphabet, repeat=length):
                yield "".join(chars)


def _mutated() -> Iterator[str]:
    """Encodings of random bytes (short, and around 1 KiB: the SIMD loops and the tail both) with a few
    characters replaced, inserted or deleted anywhere."""
    r = random.Random(11)
    pieces = ["=", "==", "===", "\n", "\r\n", " ", "-", "_", "é", "\x00", "*", "A", "+", "/", "\u2028"]
    for n in [*range(0, 48), *range(1000, 1040), 3000, 4096]:
        good = base64.b64encode(r.randbytes(n)).decode()
        for _ in range(40):
            chars = list(good)
            for _change in range(r.choice([1, 1, 2, 3])):
                at = r.randrange(len(chars) + 1)
                roll = r.random()
                if roll < 0.4 and at < len(chars):
                    chars[at] = r.choice(pieces)
                elif roll < 0.8:
                    chars.insert(at, r.choice(pieces))
                elif at < len(chars):
                    del chars[at]
            yield "".join(chars)


_TEXTS = [*_edge_cases(), *_small_alphabets(), *_mutated()]


def _simd_paths() -> list[int]:
    """pybase64's code paths on this CPU, by flag: 0 (plain C) and each SIMD level the CPU has."""
    native = pybase64._pybase64
    runtime = native._get_simd_flags_runtime() & native._get_simd_flags_compile()
    return [0, *(1 << bit for bit in range(runtime.bit_length()) if runtime >> bit & 1)]


@pytest.fixture(params=["fallback", *(f"c-{flag}" for flag in _simd_paths())])
def fast_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """The codec with one of pybase64's paths: the pure-Python fallback, or the C extension forced onto one
    SIMD level (restored after the test)."""
    if request.param == "fallback":
        monkeypatch.setattr(base64_codec, "_fast_decode", pybase64._fallback.b64decode)
        monkeypatch.setattr(base64_codec, "_fast_encode", pybase64._fallback.b64encode_as_string)
        yield request.param
        return
    native = pybase64._pybase64
    before = native._get_simd_path()
    native._set_simd_path(int(request.param.removeprefix("c-")))
    try:
        yield native._get_simd_name(native._get_simd_path())
    finally:
        native._set_simd_path(before)


def test_corpus_has_what_the_comparison_needs() -> None:
    outcomes = [_strict(text) for text in _TEXTS]
    assert len(_TEXTS) > 20_000
    accepted = sum(isinstance(outcome, bytes) for outcome in outcomes)
    assert 1_000 < accepted < len(_TEXTS) - 10_000  # plenty of both
    # The texts only the strict reader accepts (padding past a whole group) are in it.
    assert _strict("QUJD===") == b"ABC"
    with pytest.raises(binascii.Error):
        pybase64.b64decode("QUJD===", validate=True)


def test_every_text_decodes_as_the_strict_reader_decodes_it(fast_path: str) -> None:
    differ = [(text, _ours(text), _strict(text)) for text in _TEXTS if _ours(text) != _strict(text)]
    assert differ == [], fast_path  # (text, ours, the strict reader's) for each text read differently


def test_the_fast_reader_answers_well_formed_text_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Well-formed base64 never reaches the strict reader (else the speed is lost, not the answers)."""

    def refuse(text: str, strict_mode: bool) -> bytes:
        raise AssertionError(f"strict reader asked for {text[:20]!r}")

    monkeypatch.setattr(binascii, "a2b_base64", refuse)
    for n in [0, 1, 2, 3, 100, 1024, 65536]:
        data = random.Random(n).randbytes(n)
        assert base64_codec.decode(base64.b64encode(data).decode()) == data


@pytest.mark.parametrize("encode", [base64_codec.encode, lambda data: base64_codec.encode(memoryview(data))])
def test_encoding_is_the_standard_librarys(fast_path: str, encode: Callable[[bytes], str]) -> None:
    r = random.Random(5)
    for n in [*range(300), *range(1000, 1050), 65536 + 7]:
        data = r.randbytes(n)
        assert encode(data) == base64.b64encode(data).decode(), (fast_path, n)

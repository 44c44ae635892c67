"""The HMAC chain: sealing, and naming the first line changed, removed or reordered; remembered heads."""

from __future__ import annotations

import json

import pytest

from app.audit import GENESIS, Link, derive_audit_keys, seal, verify_lines
from app.audit.chain import link_after, parse_head

KEYS = derive_audit_keys(bytes(range(32)))
KEY = KEYS.chain_key


def make_lines(count: int, chain: str = "c0", start: Link | None = None) -> list[str]:
    link = start or Link(chain)
    lines = []
    for index in range(count):
        line, link = seal(KEY, link, {"type": "response", "n": index})
        lines.append(line.decode())
    return lines


def numbered(lines: list[str], source: str = "log") -> list[tuple[str, int, str]]:
    return [(source, number, line) for number, line in enumerate(lines, start=1)]


def test_an_intact_chain_verifies_and_reports_its_head() -> None:
    lines = make_lines(5)
    report = verify_lines(KEY, numbered(lines))
    assert report.problem is None
    assert report.lines == 5
    last = json.loads(lines[-1])
    assert report.heads() == {"c0": f"5:{last['hmac']}"}


def test_the_first_line_starts_at_genesis_and_lines_link() -> None:
    first, second = (json.loads(line) for line in make_lines(2))
    assert (first["seq"], first["prev"]) == (0, GENESIS)
    assert (second["seq"], second["prev"]) == (1, first["hmac"])
    assert list(first)[-4:] == ["chain", "seq", "prev", "hmac"]


def test_a_changed_line_is_named() -> None:
    lines = make_lines(5)
    lines[2] = lines[2].replace('"n":2', '"n":7')
    report = verify_lines(KEY, numbered(lines))
    assert report.problem is not None
    assert (report.problem.line_number, report.problem.reason.split(":")[0]) == (3, "changed")


def test_a_removed_line_is_named() -> None:
    lines = make_lines(5)
    del lines[1]
    report = verify_lines(KEY, numbered(lines))
    assert report.problem is not None
    assert report.problem.line_number == 2
    assert "removed" in report.problem.reason


def test_two_swapped_lines_are_named() -> None:
    lines = make_lines(5)
    lines[1], lines[2] = lines[2], lines[1]
    report = verify_lines(KEY, numbered(lines))
    assert report.problem is not None
    assert report.problem.line_number == 2
    assert "reordered" in report.problem.reason


def test_a_duplicated_line_is_named() -> None:
    lines = make_lines(3)
    lines.append(lines[1])
    report = verify_lines(KEY, numbered(lines))
    assert report.problem is not None
    assert (report.problem.line_number, "reordered or duplicated" in report.problem.reason) == (4, True)


def test_a_line_sealed_under_another_key_is_changed() -> None:
    other = derive_audit_keys(bytes(32)).chain_key
    lines = make_lines(2)
    forged, _ = seal(other, link_after(lines[1]) or Link("c0"), {"type": "response", "n": 2})
    report = verify_lines(KEY, numbered([*lines, forged.decode()]))
    assert report.problem is not None
    assert report.problem.line_number == 3
    assert "hmac does not match" in report.problem.reason


def test_a_chain_continues_across_files_and_may_start_in_a_rotated_one() -> None:
    lines = make_lines(6)
    files = [("log.2", lines[:2]), ("log.1", lines[2:4]), ("log", lines[4:])]
    given = [(name, number, line) for name, part in files for number, line in enumerate(part, start=1)]
    assert verify_lines(KEY, given).problem is None
    later = verify_lines(KEY, given[2:])  # log.2 rotated away: the chain starts at record 3
    assert later.problem is None
    assert later.chains["c0"].first_seq == 2
    swapped = given[2:4] + given[:2] + given[4:]  # files given in the wrong order
    assert verify_lines(KEY, swapped).problem is not None


def test_a_first_line_pretending_to_start_a_chain_is_refused() -> None:
    lines = make_lines(1, start=Link("c0", 0, "ab" * 32))
    report = verify_lines(KEY, numbered(lines))
    assert report.problem is not None


def test_chains_of_several_writers_are_verified_apart() -> None:
    a, b = make_lines(3, "a"), make_lines(3, "b")
    mixed = [a[0], b[0], b[1], a[1], a[2], b[2]]
    report = verify_lines(KEY, numbered(mixed))
    assert report.problem is None
    assert set(report.heads()) == {"a", "b"}


def test_truncation_is_seen_only_against_a_remembered_head() -> None:
    lines = make_lines(6)
    head = "c0:" + verify_lines(KEY, numbered(lines)).heads()["c0"]
    truncated = numbered(lines[:4])
    assert verify_lines(KEY, truncated).problem is None  # the log alone cannot tell
    report = verify_lines(KEY, truncated, [head])
    assert report.problem is not None
    assert "truncated" in report.problem.reason
    grown = numbered(make_lines(8))
    assert verify_lines(KEY, grown, [head]).problem is None  # a log that grew since still holds the head


def test_a_head_that_is_not_the_remembered_line_is_reported() -> None:
    lines = make_lines(3)
    head = f"c0:3:{'0' * 64}"
    report = verify_lines(KEY, numbered(lines), [head])
    assert report.problem is not None
    assert "not the remembered one" in report.problem.reason


@pytest.mark.parametrize("head", ["c0:0:" + "a" * 64, "c0:3:xyz", "3:" + "a" * 64, ""])
def test_malformed_heads_are_refused(head: str) -> None:
    with pytest.raises(ValueError, match="malformed head"):
        parse_head(head)


def test_a_torn_line_is_reported() -> None:
    lines = make_lines(3)
    lines[1] = lines[1][:40]
    report = verify_lines(KEY, numbered(lines))
    assert report.problem is not None
    assert report.problem.line_number == 2


def test_hash_values_and_keys() -> None:
    value = KEYS.hash(b"associated")
    assert value.startswith("hmac-sha256:") and len(value) == len("hmac-sha256:") + 64
    assert KEYS.hash_key != KEYS.chain_key
    for secret in (KEYS.hash_key, KEYS.chain_key):
        assert secret.hex() not in repr(KEYS) and repr(secret) not in repr(KEYS)
    assert derive_audit_keys(bytes(32)).hash(b"associated") != value
    with pytest.raises(ValueError):
        derive_audit_keys(b"short")


@pytest.mark.parametrize("value", ['é \u2028 \x00 "quoted"', "lone \udcff surrogate"])
def test_any_string_a_client_sends_seals_and_verifies(value: str) -> None:
    line, _ = seal(KEY, Link("c0"), {"path": value})
    text = line.decode("utf-8")
    assert json.loads(text)["path"] == value
    assert verify_lines(KEY, [("log", 1, text)]).problem is None


@pytest.mark.parametrize("key", [b"", b"k" * 32, b"x" * 64, b"long" * 40])
def test_the_line_mac_is_hmac_sha256(key: bytes) -> None:
    import hashlib
    import hmac

    from app.audit.chain import LineMac

    for message in (b"", b"a line", b"z" * 1000):
        assert LineMac(key).hexdigest(message) == hmac.new(key, message, hashlib.sha256).hexdigest()

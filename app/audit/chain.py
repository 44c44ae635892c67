"""The HMAC chain that makes the audit log tamper-evident: sealing a line and verifying a sequence of lines.

Every line is one JSON object whose last three members are ``seq`` (0, 1, 2... within its chain), ``prev``
(the previous line's ``hmac``; :data:`GENESIS` for line 0) and ``hmac``::

    hmac = HMAC-SHA256(chain_key, the line without ``,"hmac":"..."``, i.e. ending ``"prev":"..."}``)

so a line's HMAC covers its content *and* its predecessor's HMAC. Changing a line breaks its own HMAC;
removing one leaves a gap in ``seq`` and a ``prev`` that does not match; swapping two breaks ``prev`` too.
:func:`verify_lines` names the first line where any of this happens.

Removing lines at the *end* leaves a valid, shorter chain: only a head remembered from earlier (the last
line's ``seq + 1`` and ``hmac``, printed by :func:`Report.heads`) shows such truncation, which is why
``audit verify`` prints the head and accepts ``--expect-head``. Files dropped at the *start* (rotated away)
leave a chain that begins at a ``seq`` above 0: reported, not an error. Lines removed at the start of a file
that no older file precedes (``starts`` of :func:`verify_lines`) are an error, unless a remembered head is
exactly where the file begins (``seq`` and ``prev`` of its first line: the start the operator kept).

Each writer (a worker process) has its own chain, named by its ``chain`` member; a log that holds several
(stdout with several workers, or a process restarted on stdout) is verified chain by chain.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from app.formats.sealed import hmac_sha256_states

#: ``prev`` of a chain's first line.
GENESIS = "0" * 64
_ENCODER = msgspec.json.Encoder()


class LineMac:
    """HMAC-SHA256 (RFC 2104) under one key, with the padded key's two SHA-256 states computed once.

    Per line this is two ``copy()`` and ``update()`` calls, ~2.5x faster than :func:`hmac.digest`, which
    pads and hashes the key again for every message. :func:`hmac.compare_digest` still compares results.
    The padded key (the key XOR a constant, as good as the key) is built in locked memory and zeroed at
    once: only the two hash states, from which the key cannot be read back, are kept.
    """

    __slots__ = ("_inner", "_outer")

    def __init__(self, key: bytes | memoryview) -> None:
        self._inner, self._outer = hmac_sha256_states(key)

    def hexdigest(self, message: bytes) -> str:
        """HMAC-SHA256 of ``message``, in hex."""
        inner = self._inner.copy()
        inner.update(message)
        outer = self._outer.copy()
        outer.update(inner.digest())
        return outer.hexdigest()


def line_mac(chain_key: bytes | memoryview | LineMac) -> LineMac:
    """``chain_key`` itself if it is a :class:`LineMac` (a writer keeps its own), else one made for it."""
    return chain_key if isinstance(chain_key, LineMac) else LineMac(chain_key)


_HMAC_SUFFIX = re.compile(r',"hmac":"([0-9a-f]{64})"\}$')


@dataclass(frozen=True)
class Link:
    """Where a chain stands: its id, the next line's ``seq`` and the last line's HMAC."""

    chain: str
    seq: int = 0
    prev: str = GENESIS

    @property
    def head(self) -> str:
        """``<chain>:<records>:<hmac>``, the head ``audit verify`` prints and ``--expect-head`` takes: how
        many records the chain holds and the last one's HMAC (only meaningful once it holds a record)."""
        return f"{self.chain}:{self.seq}:{self.prev}"


def seal(
    chain_key: bytes | memoryview | LineMac, link: Link, record: Mapping[str, Any]
) -> tuple[bytes, Link]:
    """One log line (JSON, ``\\n``-terminated) of ``record`` chained after ``link``, and the link after it.

    ``chain_key`` may be the :class:`LineMac` of the key, which a writer keeps to save its set-up per line.

    ``record`` must not hold the members ``chain``, ``seq``, ``prev`` or ``hmac`` (they are added here).
    """
    body = dict(record)
    body["chain"] = link.chain
    body["seq"] = link.seq
    body["prev"] = link.prev
    try:
        signed = _ENCODER.encode(body)  # UTF-8, compact, insertion order: ~7x faster than json.dumps
    except UnicodeEncodeError:  # a lone surrogate (say, from a crafted path): escape it as ASCII JSON
        signed = json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    tag = line_mac(chain_key).hexdigest(signed)
    line = b"".join((signed[:-1], b',"hmac":"', tag.encode("ascii"), b'"}\n'))
    return line, Link(link.chain, link.seq + 1, tag)


def link_after(line: str) -> Link | None:
    """The link that continues the chain after ``line`` (not verified), or ``None`` for a line that is not a
    sealed record (a torn last line after a crash, say)."""
    try:
        record = json.loads(line)
        return Link(str(record["chain"]), int(record["seq"]) + 1, str(record["hmac"]))
    except (ValueError, KeyError, TypeError):
        return None


@dataclass
class Problem:
    """The first bad line: where it is and what is wrong with it."""

    source: str
    line_number: int
    reason: str

    def __str__(self) -> str:
        if self.line_number == 0:  # not a line: a remembered head
            return f"{self.source}: {self.reason}"
        return f"{self.source}:{self.line_number}: {self.reason}"


@dataclass
class ChainState:
    """A chain as seen so far: the first ``seq`` seen, and the last line's ``seq`` and HMAC."""

    first_seq: int
    last_seq: int
    last_hmac: str
    lines: int = 1
    #: ``prev`` of the first line seen (the HMAC of the record before it, in an older file or removed).
    first_prev: str = GENESIS

    @property
    def head(self) -> str:
        """``<records>:<hmac>``: how many records the chain holds (``seq + 1`` of its last line) and the last
        line's HMAC. Remember it; a later ``--expect-head`` shows whether the log was cut back below it."""
        return f"{self.last_seq + 1}:{self.last_hmac}"


@dataclass
class Report:
    """The result of :func:`verify_lines`: every chain seen, and the first problem (``None``: intact)."""

    chains: dict[str, ChainState] = field(default_factory=dict)
    problem: Problem | None = None
    lines: int = 0

    def heads(self) -> dict[str, str]:
        """``{chain: head}`` (see :attr:`ChainState.head`)."""
        return {chain: state.head for chain, state in self.chains.items()}


def _check(mac: LineMac, text: str) -> tuple[dict[str, Any], str] | str:
    """The parsed record and its HMAC, or why the line is not an intact sealed record."""
    match = _HMAC_SUFFIX.search(text)
    if match is None:
        return "changed: not a sealed audit record (no trailing hmac)"
    signed = text[: match.start()] + "}"
    expected = mac.hexdigest(signed.encode("utf-8", "surrogateescape"))
    if not hmac.compare_digest(expected, match.group(1)):
        return "changed: its hmac does not match its content"
    try:
        record = json.loads(text)
        int(record["seq"]), str(record["chain"]), str(record["prev"])
    except (ValueError, KeyError, TypeError):
        return "changed: not a sealed audit record (bad JSON or members)"
    return record, match.group(1)


def verify_lines(
    chain_key: bytes | memoryview,
    lines: Iterable[tuple[str, int, str]],
    heads: Iterable[str] = (),
    starts: Collection[str] = frozenset(),
) -> Report:
    """Verify ``(source, line number, text)`` lines in log order; stop at the first bad one.

    Files of one chain must be given oldest first (``audit.log.2 audit.log.1 audit.log``). ``heads`` are
    remembered heads (``<chain>:<records>:<hmac>``) that must still be in the log: a head beyond its chain's
    end means the log was truncated. A problem with a head is reported with line number 0.

    ``starts`` are the sources no older file precedes (an unrotated log): a chain that begins in one of them
    must begin at its first record, or exactly after a remembered head (the start the operator kept when
    older lines were archived); otherwise its first lines were removed.

    Raises:
        ValueError: a head is malformed.
    """
    wanted = [parse_head(head) for head in heads]
    watched = {(chain, records - 1) for chain, records, _ in wanted}
    seen: dict[tuple[str, int], str] = {}
    report = Report()
    mac = LineMac(chain_key)
    for source, number, raw in lines:
        text = raw.rstrip("\n")
        if not text:
            continue
        report.lines += 1
        checked = _check(mac, text)
        if isinstance(checked, str):
            report.problem = Problem(source, number, checked)
            return report
        record, tag = checked
        chain, seq, prev = str(record["chain"]), int(record["seq"]), str(record["prev"])
        if (chain, seq) in watched:
            seen[(chain, seq)] = tag
        state = report.chains.get(chain)
        if state is None:
            if seq == 0 and prev != GENESIS:
                report.problem = Problem(source, number, "changed: the first line of a chain must start it")
                return report
            if seq > 0 and source in starts and (chain, seq, prev) not in wanted:
                report.problem = Problem(
                    source,
                    number,
                    f"removed: chain {chain} starts here at record {seq + 1}, and no older file holds "
                    f"the {seq} before it (give the older files first, or the head remembered where they "
                    "end with --expect-head)",
                )
                return report
            report.chains[chain] = ChainState(first_seq=seq, last_seq=seq, last_hmac=tag, first_prev=prev)
            continue
        if prev != state.last_hmac or seq != state.last_seq + 1:
            report.problem = Problem(source, number, _link_reason(state, seq))
            return report
        state.last_seq, state.last_hmac = seq, tag
        state.lines += 1
    reason = check_heads(report, wanted, seen)
    if reason is not None:
        report.problem = Problem("--expect-head", 0, reason)
    return report


def _link_reason(state: ChainState, seq: int) -> str:
    expected = state.last_seq + 1
    if seq > expected:
        return (
            f"removed or reordered: expected seq {expected} here, found seq {seq} "
            f"({seq - expected} line(s) missing before this one)"
        )
    if seq <= state.last_seq:
        return f"reordered or duplicated: seq {seq} comes after seq {state.last_seq} (expected {expected})"
    return f"changed: does not follow the previous line (seq {seq})"


def parse_head(text: str) -> tuple[str, int, str]:
    """Split a remembered head ``<chain>:<records>:<hmac>`` (as ``audit verify`` prints it).

    Raises:
        ValueError: not of that shape.
    """
    match = re.fullmatch(r"([^:\s]+):(\d+):([0-9a-f]{64})", text.strip())
    if match is None or int(match.group(2)) < 1:
        raise ValueError(f"malformed head {text!r}: expected <chain>:<records>:<64 hex digits>")
    return match.group(1), int(match.group(2)), match.group(3)


def check_heads(
    report: Report, heads: Iterable[tuple[str, int, str]], seen: Mapping[tuple[str, int], str]
) -> str | None:
    """Why a remembered head is not in the verified log, or ``None`` when every one is.

    ``seen`` maps ``(chain, seq)`` of the lines verified to their HMACs (at least those the heads name).
    """
    for chain, records, wanted in heads:
        state = report.chains.get(chain)
        if state is None:
            return f"chain {chain} is not in the files given"
        if records - 1 > state.last_seq:
            return (
                f"truncated: chain {chain} ends at {state.last_seq + 1} records, the remembered head "
                f"is at {records}"
            )
        if records == state.first_seq and wanted == state.first_prev:
            continue  # the remembered start: the files given begin right after it
        if records - 1 < state.first_seq:
            return (
                f"the remembered head of chain {chain} (record {records}) is in an older file than "
                "those given"
            )
        if seen.get((chain, records - 1)) != wanted:
            return f"changed: record {records} of chain {chain} is not the remembered one"
    return None

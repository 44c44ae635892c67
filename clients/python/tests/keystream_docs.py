"""The fenced code blocks of the documentation (README.md, docs/*.md), for the tests that run the documented
examples as printed: ``tests/docs/test_docs_blocks.py`` (every shell block of docs/),
``tests/docs/test_docs_tour.py`` (the README's tour) and ``cli/test_cli_docs.py`` (output of some
docs/client-and-cli.md examples compared with what the page shows).

A block the docs test cannot run says so in the page, in an HTML comment on the line before its fence::

    <!-- not run by tests/docs: docker-compose needs a Docker daemon; run by: make docker-test -->

Both parts are required: why it is not run there, and what runs it instead (:data:`NOT_RUN`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from keystream_server import REPO

CLIENT_DOC = REPO / "docs" / "client-and-cli.md"
#: A fence line, possibly indented (a block inside a list item): its indent and language.
_FENCE = re.compile(r"^(\s*)```(\w*)\s*$")
#: The marker of a block the docs test does not run: why, and what runs it instead.
NOT_RUN = re.compile(r"^\s*<!-- not run by tests/docs: (?P<why>.+?); run by: (?P<where>.+?) -->\s*$")
_HEADING = re.compile(r"^(#{1,6}) ")


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    #: 1-based line number of the opening fence.
    line: int
    language: str
    #: The block's text, its indent removed, ending in a newline.
    text: str
    #: The nearest heading above the block (``## Small values``), or ``""``.
    heading: str
    #: ``(why, where)`` of the ``not run`` marker before the block, or None.
    not_run: tuple[str, str] | None

    @property
    def where(self) -> str:
        """``docs/page.md:LINE``, for messages."""
        page = self.page.relative_to(REPO) if self.page.is_relative_to(REPO) else self.page
        return f"{page}:{self.line}"


def page_blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order.

    Raises:
        ValueError: a block is not closed, or a ``not run`` marker does not precede a block.
    """
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    heading = ""
    index = 0
    while index < len(lines):
        line = lines[index]
        if _HEADING.match(line):
            heading = line
        fence = _FENCE.match(line)
        marker = NOT_RUN.match(line)
        if marker and not (index + 1 < len(lines) and _FENCE.match(lines[index + 1])):
            raise ValueError(f"{page.name}:{index + 1}: a not-run marker must be the line before a fence")
        if fence is None:
            index += 1
            continue
        indent, language = fence.group(1), fence.group(2)
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise ValueError(f"{page.name}:{index + 1}: unclosed code block")
        body = [
            text[len(indent) :] if text.startswith(indent) else text.lstrip()
            for text in lines[index + 1 : end]
        ]
        previous = NOT_RUN.match(lines[index - 1]) if index > 0 else None
        blocks.append(
            Block(
                page=page,
                line=index + 1,
                language=language,
                text="\n".join(body) + "\n",
                heading=heading,
                not_run=(previous.group("why"), previous.group("where")) if previous else None,
            )
        )
        index = end + 1
    return blocks


def section_blocks(heading: str, page: Path = CLIENT_DOC) -> list[tuple[str, str]]:
    """``(language, text)`` of every fenced block between ``heading`` (a whole line, e.g. ``## Small
    values``) and the next heading of the same or a higher level.

    Raises:
        ValueError: the heading is not in the page.
    """
    lines = page.read_text(encoding="utf-8").splitlines()
    start = lines.index(heading) + 1
    level = len(heading.split(" ", 1)[0])
    end = next(
        (
            number
            for number in range(start, len(lines))
            if (match := _HEADING.match(lines[number]))
            and len(match.group(1)) <= level
            and not _inside_fence(lines, number)
        ),
        len(lines),
    )
    return [(b.language, b.text) for b in page_blocks(page) if start < b.line <= end]


def _inside_fence(lines: list[str], number: int) -> bool:
    """True when line ``number`` (0-based) is inside a fenced block."""
    return sum(1 for line in lines[:number] if _FENCE.match(line) or line.strip() == "```") % 2 == 1

"""The fenced code blocks of a section of ``docs/client-and-cli.md``, for tests that run the documented
examples as written."""

from __future__ import annotations

import re

from keystream_server import REPO

CLIENT_DOC = REPO / "docs" / "client-and-cli.md"
_FENCE = re.compile(r"^```(\w*)\s*$")


def section_blocks(heading: str) -> list[tuple[str, str]]:
    """``(language, text)`` of every fenced block between ``heading`` (a whole line, e.g. ``## Small
    values``) and the next heading of the same or a higher level.

    Raises:
        ValueError: the heading is not in the page.
    """
    lines = CLIENT_DOC.read_text().splitlines()
    start = lines.index(heading)
    level = heading.split(" ", 1)[0]
    blocks: list[tuple[str, str]] = []
    language: str | None = None
    body: list[str] = []
    for line in lines[start + 1 :]:
        fence = _FENCE.match(line)
        if language is None and fence:
            language, body = fence.group(1), []
        elif language is not None and line == "```":
            blocks.append((language, "\n".join(body) + "\n"))
            language = None
        elif language is None and line.startswith("#") and line.split(" ", 1)[0] <= level:
            break
        elif language is not None:
            body.append(line)
    return blocks

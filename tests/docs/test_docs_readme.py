"""The README stays a short front page, and no link in README.md or docs/*.md points at nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
README_MAX_BYTES = 20 * 1024
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]

# [text](target) and ![alt](target); the target ends at the first space or ')'.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^(```|~~~)")


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (a link inside a code sample is not a link)."""
    kept, in_fence = [], False
    for line in text.splitlines():
        if FENCE.match(line.lstrip()):
            in_fence = not in_fence
            continue
        if not in_fence:
            kept.append(line)
    return "\n".join(kept)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of ``page`` (a repeated heading gets -1, -2, ... as on GitHub)."""
    seen: dict[str, int] = {}
    found = set()
    for line in prose(page.read_text(encoding="utf-8")).splitlines():
        match = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not match:
            continue
        anchor = github_anchor(match.group(1))
        count = seen.get(anchor, 0)
        seen[anchor] = count + 1
        found.add(anchor if count == 0 else f"{anchor}-{count}")
    return found


def relative_links(page: Path) -> list[str]:
    """Targets of the links in ``page`` that point into the repository (no scheme, no mailto)."""
    targets = LINK.findall(prose(page.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.IGNORECASE)]


def test_readme_is_a_short_front_page() -> None:
    size = len(README.read_bytes())
    assert size < README_MAX_BYTES, f"README.md is {size} bytes; the user guide belongs in docs/"


def test_docs_pages_exist() -> None:
    names = {page.name for page in PAGES[1:]}
    expected = {
        "service-api.md",
        "keys.md",
        "formats.md",
        "client-and-cli.md",
        "aescore.md",
        "hwsim.md",
        "operations.md",
        "benchmarks.md",
    }
    assert expected <= names, f"missing: {sorted(expected - names)}"
    readme_links = {Path(t.split("#", 1)[0]).name for t in relative_links(README)}
    assert expected <= readme_links, f"README.md does not link: {sorted(expected - readme_links)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    links = relative_links(page)
    broken = []
    for target in links:
        path_part, _, fragment = target.partition("#")
        destination = (page.parent / path_part).resolve() if path_part else page
        if not destination.exists():
            broken.append(f"{target}: no such file {destination}")
        elif fragment and destination.suffix == ".md" and fragment not in anchors(destination):
            broken.append(f"{target}: no heading #{fragment} in {destination.relative_to(REPO)}")
    assert not broken, "\n".join(broken)


def test_link_checker_sees_a_broken_link(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "there.md").write_text("# A `code` heading — with a dash\n")
    page.write_text(
        "[ok](there.md#a-code-heading--with-a-dash) [gone](missing.md) [web](https://example.com)\n"
        "```sh\n[in code](nowhere.md)\n```\n"
    )
    assert relative_links(page) == ["there.md#a-code-heading--with-a-dash", "missing.md"]
    assert "a-code-heading--with-a-dash" in anchors(tmp_path / "there.md")

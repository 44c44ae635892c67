"""Turn a documented shell block into the bash script ``test_docs_blocks.py`` runs, and judge its failures.

A block is cut into *statements* (a command with its ``\\``, ``|``, ``&&`` and quote continuations); what
follows a statement up to the next one (comment lines in an ``sh`` block, output lines in a ``console``
block) is its *shown output*. A statement may end non-zero only with a status the page states for it:
``exit N`` (or ``exit code N``) in its own comment or its shown output, or, in a ``console`` block, the
output of the ``$ echo $?`` that follows it (and then it must end with exactly that one). Blocks run with
``pipefail``, stricter than a reader's shell, so a pipeline may also end with 141: ``tail ... | head -c N``
stops ``tail`` with SIGPIPE when ``head`` has read enough, which a reader's shell does not report. A
statement ending in ``&& echo "TEXT"`` must print TEXT (bash reports no failure inside an ``&&`` list).

A statement that starts the service (``keystream-server serve``, ``make run``, or ``python -c ...
serve()``) runs in the foreground for a reader, in a terminal of its own. The script hands it to
``ks_serve`` (``docs_prologue.sh``), which starts it in the background and waits until its port accepts
connections, then goes on, as the reader does in a second terminal.
"""

from __future__ import annotations

import itertools
import re
import shlex
from dataclasses import dataclass, field

#: ``exit 9``, ``exit code 4``, ``curl exit 22``: a status a statement may end with.
_STATED_EXIT = re.compile(r"\bexit (?:code |status )?(\d+)\b")
#: A statement that starts the service, after optional ``NAME=value`` assignments.
_SERVE = re.compile(
    r"^(?P<before>.*?;\s*)?(?P<assign>(?:[A-Z_][A-Z0-9_]*=\S+\s+)*)"
    r"(?P<command>keystream-server serve\b.*|make run|python -c 'from app\.server import serve; serve\(\)')$"
)
_PORT_FLAG = re.compile(r"--port[ =](\d+)")
_PORT_SETTING = re.compile(r"\bKEYSTREAM_PORT=(\d+)")
#: ``... && echo "TEXT"`` at the end of a statement.
_PROMISE = re.compile(r"&&\s*echo\s+([\"'])([^\"'$]+)\1$")
#: The status of a pipeline whose first command was stopped by SIGPIPE (128 + 13).
SIGPIPE_STATUS = 141
#: The port of ``make run`` and of ``serve`` without ``--port``.
DEFAULT_PORT = 8000


@dataclass
class Statement:
    """One command of a block, with where it is and what the page says about it."""

    first: int  # 1-based line in the block
    last: int
    lines: list[str]
    shown: list[str] = field(default_factory=list)
    stated_exits: set[int] = field(default_factory=set)

    @property
    def text(self) -> str:
        return "\n".join(self.lines)

    def promised(self) -> list[str]:
        """What a statement ending in ``&& echo "TEXT"`` promises to print: bash reports no failure inside an
        ``&&`` list (``cmp a b && echo same`` fails silently), so the text itself is the check."""
        _, start = _scan(self.lines[-1], None)
        code = (self.lines[-1] if start is None else self.lines[-1][:start]).rstrip()
        match = _PROMISE.search(code)
        return [match.group(2)] if match else []

    def allowed(self) -> set[int]:
        """The exit statuses the page allows this statement."""
        stated = {int(n) for n in _STATED_EXIT.findall(comments(self.lines) + "\n" + "\n".join(self.shown))}
        piped = {SIGPIPE_STATUS} if "|" in self.text else set()
        return {0} | stated | self.stated_exits | piped


def _scan(line: str, quote: str | None) -> tuple[str | None, int | None]:
    """The quote still open after ``line`` (starting inside ``quote``), and where a comment starts."""
    index = 0
    while index < len(line):
        char = line[index]
        if quote == "'":
            if char == "'":
                quote = None
        elif quote == '"':
            if char == "\\":
                index += 1
            elif char == '"':
                quote = None
        elif char == "\\":
            index += 1
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or line[index - 1].isspace()):
            return quote, index
        index += 1
    return quote, None


def comments(lines: list[str]) -> str:
    """The comment parts of ``lines`` (shell syntax), joined."""
    found, quote = [], None
    for line in lines:
        quote, start = _scan(line, quote)
        if start is not None and quote is None:
            found.append(line[start:])
    return "\n".join(found)


def _continues(line: str, quote: str | None) -> bool:
    """True when the statement goes on after ``line``."""
    if quote is not None:
        return True
    _, start = _scan(line, None)
    code = (line if start is None else line[:start]).rstrip()
    return code.endswith(("\\", "|", "&&", "||"))


def statements(language: str, text: str) -> list[Statement]:
    """The statements of a block (``console`` lines without their ``$ ``; its output lines as ``shown``)."""
    found: list[Statement] = []
    current: Statement | None = None
    quote: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        if current is not None and current.last == number - 1 and _continues(current.lines[-1], quote):
            current.lines.append(line[2:] if language == "console" and line.startswith("$ ") else line)
            current.last = number
            quote, _ = _scan(line, quote)
            continue
        is_command = (
            line.startswith("$ ")
            if language == "console"
            else bool(line.strip()) and not (line.lstrip().startswith("#"))
        )
        if is_command:
            command = line[2:] if language == "console" else line
            current = Statement(number, number, [command])
            found.append(current)
            quote, _ = _scan(command, None)
        elif current is not None and line.strip():
            current.shown.append(line)
    if language == "console":
        for previous, echo in itertools.pairwise(found):
            if echo.text.strip() == "echo $?" and echo.shown and echo.shown[0].strip().isdigit():
                previous.stated_exits.add(int(echo.shown[0].strip()))
    return found


def _serve_match(statement: Statement) -> re.Match[str] | None:
    """The statement (continuations joined, comment removed) as a service start, or None."""
    joined = " ".join(line.rstrip("\\").strip() for line in statement.lines)
    _, start = _scan(joined, None)
    return _SERVE.match((joined if start is None else joined[:start]).strip())


def serve_port(statement: Statement) -> int | None:
    """The documented port of a statement that starts the service, or None for any other statement."""
    match = _serve_match(statement)
    if match is None:
        return None
    flag = _PORT_FLAG.search(match.group("command")) or _PORT_SETTING.search(match.group("assign"))
    return int(flag.group(1)) if flag else DEFAULT_PORT


def script_lines(language: str, text: str, ports: dict[int, int]) -> list[str]:
    """The block as bash lines, one per block line (so a failing line maps back to the page).

    ``console`` output lines become blank lines; ``$ echo $?`` with its shown status becomes
    ``ks_status_was $? STATUS`` (which fails unless the status was that one); a statement that starts the
    service becomes one ``ks_serve DOCUMENTED_PORT REAL_PORT COMMAND`` line (``make run`` as the
    ``keystream-server serve`` it runs, the real port as ``KEYSTREAM_PORT`` when it names none), then blank
    lines.
    """
    lines = [""] * len(text.splitlines())
    for statement in statements(language, text):
        port = serve_port(statement)
        if language == "console" and statement.text.strip() == "echo $?" and statement.shown:
            shown = statement.shown[0].strip()
            lines[statement.first - 1] = f"ks_status_was $? {shown}" if shown.isdigit() else "echo $?"
            continue
        if port is None:
            lines[statement.first - 1 : statement.last] = statement.lines
            continue
        match = _serve_match(statement)
        assert match is not None
        command = match.group("command").replace("make run", "keystream-server serve")
        assign = match.group("assign")
        if _PORT_FLAG.search(command) is None and _PORT_SETTING.search(assign) is None:
            assign = f"KEYSTREAM_PORT={ports[port]} {assign}"
        serve = f"ks_serve {port} {ports[port]} {shlex.quote(assign + command)}"
        lines[statement.first - 1] = (match.group("before") or "") + serve
    return lines

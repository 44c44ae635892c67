"""The transfer progress bar: drawn on a pseudo-terminal, absent on a pipe or with --quiet, and its text."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from keystream_cli import CLI_TIMEOUT, KEYSTREAM, RunCli
from keystream_client.cli import EXIT_OK
from keystream_client.cli._progress import ProgressBar, format_bytes, format_duration
from keystream_server import REPO, RunningServer


def _run_with_pty_stderr(server: RunningServer, args: list[str]) -> tuple[int, str]:
    """Run the CLI with stderr on a pseudo-terminal; return the exit code and everything drawn there."""
    master, slave = os.openpty()
    captured = bytearray()

    def drain() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO once the child closed the last slave descriptor
                return
            if not data:
                return
            captured.extend(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        process = subprocess.Popen(
            [*KEYSTREAM, *args],
            cwd=REPO,
            env={**server.env(), "PYTHONFAULTHANDLER": "1"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=slave,
        )
        os.close(slave)
        try:
            code = process.wait(timeout=CLI_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)  # faulthandler prints every thread's stack to the pty
            process.wait(timeout=10)
            reader.join(timeout=5)
            server_log = server.log.read_text(errors="replace")[-3000:]
            pytest.fail(
                f"CLI hung; its stderr:\n{captured.decode(errors='replace')}\nserver log:\n{server_log}"
            )
        reader.join(timeout=10)
    finally:
        os.close(master)
    return code, captured.decode("utf-8", "replace")


@pytest.fixture
def big_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain.bin"
    path.write_bytes(os.urandom(24 << 20))
    return path


def test_progress_bar_is_drawn_on_a_terminal(server: RunningServer, key: str, big_file: Path) -> None:
    code, drawn = _run_with_pty_stderr(
        server, ["encrypt", "--key", key, str(big_file), str(big_file) + ".enc"]
    )
    assert code == EXIT_OK, drawn
    assert drawn.count("\r") >= 2  # the first draw and the final one at least
    first = drawn.split("\r")[1]
    assert first.startswith("encrypt") and "/s  ETA " in first  # a fresh pty reports 0 columns: full width
    assert "ETA" in drawn
    final = drawn.rstrip().split("\r")[-1]
    assert "100% [########################]" in final
    assert "24.0 MiB / 24.0 MiB" in final and " in 0:" in final
    assert drawn.endswith("\n") or drawn.endswith("\r\n")


def test_quiet_suppresses_the_bar_on_a_terminal(server: RunningServer, key: str, big_file: Path) -> None:
    code, drawn = _run_with_pty_stderr(
        server, ["encrypt", "-q", "--key", key, str(big_file), str(big_file) + ".e"]
    )
    assert code == EXIT_OK
    assert drawn == ""


def test_no_bar_when_stderr_is_not_a_terminal(cli: RunCli, key: str, big_file: Path) -> None:
    result = cli("encrypt", "--key", key, str(big_file), str(big_file) + ".enc")
    assert result.returncode == EXIT_OK
    assert result.stderr == b""


class _FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_render_with_known_total() -> None:
    clock = _FakeClock()
    bar = ProgressBar("decrypt", 100 << 20, io.StringIO(), clock=clock)
    clock.now += 2.0
    bar.update(25 << 20)
    text = bar.render()
    assert text.startswith("decrypt   25% [######------------------]")
    assert "25.0 MiB / 100.0 MiB" in text and "12.5 MiB/s" in text and "ETA 0:06" in text
    assert bar.render(final=True).endswith("in 0:02")
    assert bar.render(final=True, success=False).endswith("FAILED")


def test_render_with_unknown_total() -> None:
    clock = _FakeClock()
    bar = ProgressBar("encrypt", None, io.StringIO(), clock=clock)
    clock.now += 4.0
    bar.update(3 << 30)
    assert bar.render() == "encrypt  3.0 GiB  768.0 MiB/s  ETA --:--"


def test_redraws_are_throttled_and_close_ends_the_line() -> None:
    clock = _FakeClock()
    stream = io.StringIO()
    bar = ProgressBar("encrypt", 1000, stream, clock=clock)
    for _ in range(50):
        bar.update(10)  # all at the same instant: one draw
    clock.now += 0.5
    bar.update(10)
    bar.close()
    bar.close()
    assert stream.getvalue().count("\r") == 3
    assert stream.getvalue().endswith("\n")


def test_disabled_bar_writes_nothing() -> None:
    stream = io.StringIO()
    bar = ProgressBar.for_stream("encrypt", 10, stream, quiet=False)  # StringIO is not a terminal
    bar.update(10)
    bar.close()
    assert not bar.enabled and stream.getvalue() == ""


@pytest.mark.parametrize(
    ("count", "text"),
    [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KiB"), (5 << 20, "5.0 MiB"), (3 << 40, "3.0 TiB")],
)
def test_format_bytes(count: int, text: str) -> None:
    assert format_bytes(count) == text


def test_format_duration() -> None:
    assert [format_duration(s) for s in (0, 59.4, 61, 3600 + 62)] == ["0:00", "0:59", "1:01", "1:01:02"]

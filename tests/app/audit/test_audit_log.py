"""The audit log writer: appends sealed lines, resumes its chain, rotates by size, fails closed."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from app.audit import (
    AuditLog,
    AuditUnavailableError,
    chain_head,
    derive_audit_keys,
    is_first_file,
    log_files,
    rotated_paths,
    verify_lines,
    worker_path,
)
from tests.tmpfs import PAGE, fill, small_tmpfs

KEY = derive_audit_keys(bytes(range(32))).chain_key


def read_lines(paths: list[str]) -> list[tuple[str, int, str]]:
    lines = []
    for path in paths:
        if os.path.exists(path):
            with open(path) as handle:
                lines += [(path, number, line) for number, line in enumerate(handle, start=1)]
    return lines


def test_lines_are_written_at_once_and_verify(tmp_path: Path) -> None:
    path = str(tmp_path / "audit.log")
    log = AuditLog(path, KEY)
    log.write({"type": "request", "n": 0})
    assert Path(path).read_text().count("\n") == 1  # in the file before write() returned: no buffer
    log.write({"type": "response", "n": 1})
    log.close()
    assert oct(os.stat(path).st_mode & 0o777) == "0o600"
    report = verify_lines(KEY, read_lines([path]))
    assert report.problem is None and report.lines == 2


def test_a_restart_continues_the_chain(tmp_path: Path) -> None:
    path = str(tmp_path / "audit.log")
    first = AuditLog(path, KEY)
    first.write({"n": 0})
    first.close()
    second = AuditLog(path, KEY)
    second.write({"n": 1})
    second.close()
    report = verify_lines(KEY, read_lines([path]))
    assert report.problem is None
    assert len(report.chains) == 1 and report.lines == 2


def test_rotation_keeps_the_chain_across_files_and_drops_the_oldest(tmp_path: Path) -> None:
    path = str(tmp_path / "audit.log")
    log = AuditLog(path, KEY, max_bytes=600, keep=3)
    for index in range(40):
        log.write({"type": "response", "n": index, "pad": "x" * 100})
    log.close()
    files = [name for name in rotated_paths(path, 3) if os.path.exists(name)]
    assert files == [f"{path}.3", f"{path}.2", f"{path}.1", path]
    assert all(os.path.getsize(name) <= 600 for name in files)
    report = verify_lines(KEY, read_lines(files))
    assert report.problem is None
    state = next(iter(report.chains.values()))
    assert state.last_seq == 39 and state.first_seq > 0  # older files were deleted: starts mid-chain
    assert verify_lines(KEY, read_lines(files[1:])).problem is None
    assert verify_lines(KEY, read_lines([files[0], files[2], files[1], files[3]])).problem is not None


def test_a_restart_after_rotation_continues_from_the_rotated_file(tmp_path: Path) -> None:
    path = str(tmp_path / "audit.log")
    log = AuditLog(path, KEY, max_bytes=400, keep=5)
    for index in range(4):
        log.write({"n": index, "pad": "x" * 100})
    log.close()
    for index in (3, 2, 1):  # rotated just before the stop: the current file is empty
        if os.path.exists(f"{path}.{index}"):
            os.replace(f"{path}.{index}", f"{path}.{index + 1}")
    os.replace(path, f"{path}.1")
    Path(path).write_text("")
    again = AuditLog(path, KEY, max_bytes=400, keep=5)
    again.write({"n": 4})
    again.close()
    link = again.link
    assert link is not None and link.seq == 5
    files = [name for name in rotated_paths(path, 5) if os.path.exists(name)]
    assert verify_lines(KEY, read_lines(files)).problem is None


def test_chain_head_is_the_head_audit_verify_prints_and_accepts(tmp_path: Path) -> None:
    """Read from the file's end (or the rotated file's, when the current one is empty): the head that
    ``--expect-head`` checks, which a log cut back below it fails."""
    path = str(tmp_path / "audit.log")
    Path(path).write_text("")
    assert chain_head(path) is None
    log = AuditLog(path, KEY)
    for index in range(3):
        log.write({"n": index})
    log.close()
    head = chain_head(path)
    assert head == log.link and head is not None and head.seq == 3
    lines = read_lines([path])
    assert verify_lines(KEY, lines, [head.head]).problem is None
    problem = verify_lines(KEY, lines[:-1], [head.head]).problem
    assert problem is not None and problem.reason.startswith("truncated"), problem
    os.replace(path, f"{path}.1")  # as a rotation leaves it, before the next line
    Path(path).write_text("")
    assert chain_head(path) == head
    with pytest.raises(FileNotFoundError):
        chain_head(str(tmp_path / "missing.log"))


def test_a_removed_file_is_recreated_and_a_removed_directory_fails_closed(tmp_path: Path) -> None:
    directory = tmp_path / "logs"
    directory.mkdir()
    path = str(directory / "audit.log")
    log = AuditLog(path, KEY)
    log.write({"n": 0})
    os.unlink(path)
    log.write({"n": 1})  # reopened at its path: the line is not lost in an unlinked inode
    assert Path(path).read_text().count("\n") == 1
    shutil.rmtree(directory)
    link = log.link
    with pytest.raises(AuditUnavailableError) as caught:
        log.write({"n": 2})
    assert caught.value.code == "audit_unavailable"
    assert log.link == link  # the chain did not advance
    directory.mkdir()
    log.write({"n": 2})  # heals once the path works again
    log.close()
    lines = read_lines([path])
    report = verify_lines(KEY, lines)
    assert report.problem is None
    assert len(lines) == 1 and next(iter(report.chains.values())).first_seq == 2  # the chain went on


def test_a_full_disk_fails_closed(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.fail("/dev/full is missing")
    log = AuditLog("/dev/full", KEY)
    with pytest.raises(AuditUnavailableError, match="cannot be written"):
        log.write({"n": 0})
    log.close()


def test_an_unopenable_path_fails_on_write_not_at_start(tmp_path: Path) -> None:
    log = AuditLog(str(tmp_path / "missing" / "audit.log"), KEY)
    with pytest.raises(AuditUnavailableError):
        log.write({"n": 0})


def test_worker_paths() -> None:
    assert worker_path("/var/log/ks/audit.log", None) == "/var/log/ks/audit.log"
    assert worker_path("/var/log/ks/audit.log", 1) == "/var/log/ks/audit.log.w1"
    assert worker_path("-", 3) == "-"


def test_stdout_gets_sealed_lines_of_a_chain_of_its_own(capfd: pytest.CaptureFixture[str]) -> None:
    log = AuditLog("-", KEY)
    log.write({"n": 0})
    log.write({"n": 1})
    log.close()  # stdout stays open
    out = capfd.readouterr().out
    report = verify_lines(KEY, [("stdout", number, line) for number, line in enumerate(out.splitlines(), 1)])
    assert report.problem is None and report.lines == 2
    other = AuditLog("-", KEY)  # a restart on stdout: a new chain, verified apart
    link = other.link
    assert link is not None and link.chain != next(iter(report.chains))


def test_a_write_cut_short_by_a_full_disk_leaves_the_file_as_it_was(tmp_path: Path) -> None:
    with small_tmpfs(tmp_path / "mnt") as mount:
        path = str(mount / "audit.log")
        log = AuditLog(path, KEY)
        for index in range(3):
            log.write({"n": index})
        before = Path(path).read_bytes()
        assert len(before) % PAGE != 0  # the file's last page has room: the next long line is torn there
        filler = fill(mount)
        link = log.link
        with pytest.raises(AuditUnavailableError, match="cannot be written"):
            log.write({"n": 3, "pad": "x" * 5000})  # longer than a page: part of it fits, the rest cannot
        assert Path(path).read_bytes() == before  # no torn line left behind
        assert log.link == link
        filler.unlink()
        log.write({"n": 3, "pad": "x" * 5000})
        log.write({"n": 4})
        log.close()
        report = verify_lines(KEY, read_lines([path]))
        assert report.problem is None, report.problem
        assert report.lines == 5


def test_log_files_lists_each_writer_after_its_rotations(tmp_path: Path) -> None:
    names = ["a.log", "a.log.1", "a.log.2", "a.log.w0", "a.log.w0.1", "a.log.w10", "a.log.w2", "a.log.w2.10"]
    names += ["a.log.w2.9", "a.log.old", "b.log", "a.log.wx"]
    for name in names:
        (tmp_path / name).write_text("")
    expected = ["a.log.2", "a.log.1", "a.log", "a.log.w0.1", "a.log.w0", "a.log.w2.10", "a.log.w2.9"]
    expected += ["a.log.w2", "a.log.w10"]
    assert log_files(str(tmp_path / "a.log")) == [str(tmp_path / name) for name in expected]
    (tmp_path / "a.log").unlink()  # several workers: PATH itself does not exist
    without = log_files(str(tmp_path / "a.log"))
    assert without[2:4] == [str(tmp_path / "a.log.w0.1"), str(tmp_path / "a.log.w0")]
    assert log_files(str(tmp_path / "none.log")) == []
    assert is_first_file(str(tmp_path / "b.log")) and is_first_file(str(tmp_path / "a.log.w10"))
    assert not is_first_file(str(tmp_path / "a.log.w0"))  # a.log.w0.1 is older
    assert not is_first_file(str(tmp_path / "a.log.2"))  # a rotated file

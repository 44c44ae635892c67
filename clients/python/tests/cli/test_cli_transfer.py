"""``keystream encrypt/decrypt`` through subprocesses: files, stdin/stdout pipes, raw with iv and offset,
tampering, and a 256 MiB round trip."""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from keystream_cli import CLI_TIMEOUT, KEYSTREAM, RunCli, interruptible_by_sigint
from keystream_client.cli import (
    EXIT_INTEGRITY,
    EXIT_INTERRUPTED,
    EXIT_IO,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
)
from keystream_server import REPO, RunningServer


def _write_random(path: Path, size: int, block: int = 8 << 20) -> str:
    digest = hashlib.sha256()
    with path.open("wb") as out:
        remaining = size
        while remaining:
            chunk = os.urandom(min(block, remaining))
            digest.update(chunk)
            out.write(chunk)
            remaining -= len(chunk)
    return digest.hexdigest()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as src:
        while chunk := src.read(8 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def test_file_round_trip_with_associated_data(cli: RunCli, key: str, tmp_path: Path) -> None:
    plain = tmp_path / "plain.bin"
    plain.write_bytes(os.urandom(500_000))
    ad_file = tmp_path / "ad.txt"
    ad_file.write_bytes(b"order-17")
    sealed, opened = tmp_path / "sealed.bin", tmp_path / "opened.bin"

    assert (
        cli("encrypt", "--key", key, "--associated-data", "order-17", str(plain), str(sealed)).returncode == 0
    )
    assert sealed.stat().st_size > plain.stat().st_size
    result = cli("decrypt", "--key", key, "--associated-data-file", str(ad_file), str(sealed), str(opened))
    assert result.returncode == EXIT_OK, result.stderr
    assert opened.read_bytes() == plain.read_bytes()

    exists = cli("decrypt", "--key", key, "--associated-data", "order-17", str(sealed), str(opened))
    assert exists.returncode == EXIT_IO and b"--force" in exists.stderr
    forced = cli(
        "decrypt", "--key", key, "--associated-data", "order-17", "--force", str(sealed), str(opened)
    )
    assert forced.returncode == EXIT_OK

    wrong = cli(
        "decrypt", "--key", key, "--associated-data", "order-18", str(sealed), str(tmp_path / "no.bin")
    )
    assert wrong.returncode == EXIT_INTEGRITY and b"decryption_failed" in wrong.stderr
    assert not (tmp_path / "no.bin").exists()


def test_stdin_stdout_pipeline(server: RunningServer, key: str, tmp_path: Path) -> None:
    """``keystream encrypt - - < plain | keystream decrypt - - > out``, both processes streaming."""
    plain = tmp_path / "plain.bin"
    expected = _write_random(plain, 3 << 20)
    out = tmp_path / "out.bin"
    command = [*KEYSTREAM]
    with plain.open("rb") as src, out.open("wb") as dst:
        encrypt = subprocess.Popen(
            [*command, "encrypt", "--key", key, "-", "-"],
            stdin=src,
            stdout=subprocess.PIPE,
            env=server.env(),
            cwd=REPO,
        )
        decrypt = subprocess.Popen(
            [*command, "decrypt", "--key", key, "-", "-"],
            stdin=encrypt.stdout,
            stdout=dst,
            env=server.env(),
            cwd=REPO,
        )
        assert encrypt.stdout is not None
        encrypt.stdout.close()
        assert decrypt.wait(timeout=CLI_TIMEOUT) == EXIT_OK
        assert encrypt.wait(timeout=CLI_TIMEOUT) == EXIT_OK
    assert _sha256(out) == expected


def test_raw_with_iv_offset_and_pipes(cli: RunCli, key: str, tmp_path: Path) -> None:
    plaintext = os.urandom(200_000)
    encrypted = cli("encrypt", "--key", key, "--format", "raw", "-", "-", input=plaintext)
    assert encrypted.returncode == EXIT_OK
    ciphertext = encrypted.stdout
    assert len(ciphertext) == len(plaintext) and ciphertext != plaintext
    found = re.search(rb"iv=([0-9a-f]{32}) key_version=(\d+)", encrypted.stderr)
    assert found, encrypted.stderr
    iv, version = found.group(1).decode(), found.group(2).decode()

    raw_args = ["--format", "raw", "--iv", iv, "--key-version", version]
    whole = cli("decrypt", "--key", key, *raw_args, "-", "-", input=ciphertext)
    assert whole.stdout == plaintext
    part = cli("decrypt", "--key", key, *raw_args, "--offset", "1234", "-", "-", input=ciphertext[1234:5000])
    assert part.returncode == EXIT_OK and part.stdout == plaintext[1234:5000]

    no_iv = cli("decrypt", "--key", key, "--format", "raw", "-", "-", input=ciphertext)
    assert no_iv.returncode == EXIT_USAGE and b"iv" in no_iv.stderr


def test_tampered_ciphertext_exits_4_and_leaves_no_file(cli: RunCli, key: str, tmp_path: Path) -> None:
    plain, sealed = tmp_path / "plain.bin", tmp_path / "sealed.bin"
    _write_random(plain, 6 << 20)
    assert cli("encrypt", "--key", key, "-q", str(plain), str(sealed)).returncode == EXIT_OK
    data = bytearray(sealed.read_bytes())
    data[-3000] ^= 0x04  # late segment: the service has already streamed most of the plaintext
    sealed.write_bytes(bytes(data))

    to_file = cli("decrypt", "--key", key, str(sealed), str(tmp_path / "out.bin"))
    assert to_file.returncode == EXIT_INTEGRITY and b"incomplete" in to_file.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plain.bin", "sealed.bin"]

    to_stdout = cli("decrypt", "--key", key, str(sealed), "-")
    assert to_stdout.returncode == EXIT_INTEGRITY
    assert b"discard" in to_stdout.stderr
    assert len(to_stdout.stdout) < plain.stat().st_size
    # The words say what happened (not "Connection reset by peer", which reads like a network fault), and N
    # is what reached stdout.
    for result in (to_file, to_stdout):
        line = result.stderr.decode().strip()
        assert "the service stopped the stream after " in line, line
        assert "a later segment of the ciphertext that failed authentication" in line, line
        assert "the service log names the segment" in line and "reset" not in line.lower(), line
    assert f"after {len(to_stdout.stdout)} bytes of verified plaintext" in to_stdout.stderr.decode()


@pytest.mark.slow
def test_256_mib_file_round_trip(cli: RunCli, server: RunningServer, key: str, tmp_path: Path) -> None:
    if server.fast_backend is None:
        pytest.skip(
            "the aesni backend is not available: 256 MiB through the pure-Python backend takes minutes"
        )
    plain, sealed, opened = tmp_path / "plain.bin", tmp_path / "sealed.bin", tmp_path / "opened.bin"
    expected = _write_random(plain, 256 << 20)
    encrypted = cli("encrypt", "--key", key, "--backend", "aesni", str(plain), str(sealed))
    assert encrypted.returncode == EXIT_OK, encrypted.stderr
    plain.unlink()  # keep at most two 256 MiB files in tmp
    decrypted = cli("decrypt", "--key", key, "--backend", "aesni", str(sealed), str(opened))
    assert decrypted.returncode == EXIT_OK, decrypted.stderr
    assert _sha256(opened) == expected
    # stderr is a pipe here, so no progress bar was drawn.
    assert b"\r" not in encrypted.stderr + decrypted.stderr


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, EXIT_INTERRUPTED), (signal.SIGTERM, EXIT_TERMINATED)]
)
def test_interrupt_removes_the_partial_output(
    server: RunningServer, key: str, tmp_path: Path, signum: int, code: int
) -> None:
    """Stop a transfer mid-way (stdin still open): the hidden .partial file goes away, OUT never appears."""
    out = tmp_path / "out.bin"
    process = subprocess.Popen(
        [*KEYSTREAM, "encrypt", "--key", key, "-", str(out)],
        stdin=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=server.env(),
        cwd=REPO,
        preexec_fn=interruptible_by_sigint,
    )
    assert process.stdin is not None and process.stderr is not None
    process.stdin.write(os.urandom(1 << 20))
    process.stdin.flush()
    deadline = time.monotonic() + 30
    while not any(p.stat().st_size for p in tmp_path.glob(".out.bin.*.partial")):
        assert time.monotonic() < deadline and process.poll() is None, "no partial output appeared"
        time.sleep(0.05)
    process.send_signal(signum)
    assert process.wait(timeout=30) == code
    stderr = process.stderr.read()
    assert b"keystream: error: " in stderr
    assert b"Traceback" not in stderr and b"Task" not in stderr  # no asyncio leftovers on the way out
    process.stdin.close()
    process.stderr.close()
    assert list(tmp_path.iterdir()) == []

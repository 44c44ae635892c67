"""``keystream batch encrypt|decrypt`` over JSON-lines files, against real servers."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import keystream_server
from keystream_cli import CLI_TIMEOUT, KEYSTREAM, RunCli, interruptible_by_sigint
from keystream_client.cli import (
    EXIT_AUTH,
    EXIT_INTERRUPTED,
    EXIT_IO,
    EXIT_ITEMS_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
)
from keystream_server import REPO, RunningServer


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def write_lines(path: Path, records: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def read_lines(path_or_bytes: Path | bytes) -> list[dict[str, Any]]:
    text = path_or_bytes.read_bytes() if isinstance(path_or_bytes, Path) else path_or_bytes
    return [json.loads(line) for line in text.splitlines()]


def one_line(stderr: bytes) -> str:
    lines = stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("keystream: error: "), lines
    return lines[0]


def test_batch_round_trip_with_a_bad_line(cli: RunCli, key: str, tmp_path: Path) -> None:
    values = [os.urandom(n) for n in (0, 1, 100, 5000)]
    records: list[Any] = [{"plaintext": b64(v), "reference": f"r{i}"} for i, v in enumerate(values)]
    records.insert(2, {"plaintext": "not base64!"})
    records.insert(3, "")  # blank lines are skipped
    records.append({"plaintext": b64(b"with ad"), "associated_data": b64(b"order-7")})
    source = write_lines(tmp_path / "items.jsonl", records)
    sealed = tmp_path / "sealed.jsonl"

    encrypted = cli("batch", "encrypt", "--key", key, "--input", str(source), "--output", str(sealed))
    assert encrypted.returncode == EXIT_ITEMS_FAILED, encrypted.stderr
    assert "1 of 6 items failed (lines 3)" in one_line(encrypted.stderr)
    out = read_lines(sealed)
    assert [r["line"] for r in out] == [1, 2, 3, 5, 6, 7]
    assert out[2] == {"line": 3, "error": {"code": "invalid_line", "message": "plaintext must be base64"}}
    assert all(r["key_version"] == 1 for i, r in enumerate(out) if i != 2)
    assert [r.get("reference") for r in out] == ["r0", "r1", None, "r2", "r3", None]
    assert out[-1]["associated_data"] == b64(b"order-7")

    # encrypt's output feeds decrypt; a tampered line fails alone.
    good = [r for r in out if "ciphertext" in r]
    tampered = bytearray(base64.b64decode(good[3]["ciphertext"]))
    tampered[-1] ^= 1
    good[3] = {**good[3], "ciphertext": b64(bytes(tampered))}
    decrypted = cli("batch", "decrypt", "--key", key, "--input", "-", input=b"".join(
        json.dumps(r).encode() + b"\n" for r in good
    ))  # fmt: skip
    assert decrypted.returncode == EXIT_ITEMS_FAILED
    assert "1 of 5 items failed (lines 4)" in one_line(decrypted.stderr)
    opened = read_lines(decrypted.stdout)
    assert opened[3]["error"]["code"] == "decryption_failed"
    plain = [base64.b64decode(r["plaintext"]) for r in opened if "plaintext" in r]
    assert plain == [*values[:3], b"with ad"]
    assert [r.get("reference") for r in opened] == ["r0", "r1", "r2", "r3", None]

    # Without failures: exit 0 and nothing on stderr.
    clean = write_lines(tmp_path / "clean.jsonl", [{"plaintext": b64(b"x")}] * 3)
    ok = cli("batch", "encrypt", "--key", key, "--input", str(clean))
    assert ok.returncode == EXIT_OK and ok.stderr == b"" and len(read_lines(ok.stdout)) == 3


def test_batch_whole_request_errors(cli: RunCli, key: str, tmp_path: Path) -> None:
    source = write_lines(tmp_path / "items.jsonl", [{"plaintext": b64(b"x")}])
    out = tmp_path / "out.jsonl"
    unknown = cli("batch", "encrypt", "--key", "no-such-key", "--input", str(source), "--output", str(out))
    assert unknown.returncode == EXIT_NOT_FOUND and "key_not_found" in one_line(unknown.stderr)
    assert not out.exists() and not list(tmp_path.glob(".out.jsonl.*"))

    to_stdout = cli("batch", "encrypt", "--key", "no-such-key", "--input", str(source))
    assert to_stdout.returncode == EXIT_NOT_FOUND and "stdout is incomplete" in one_line(to_stdout.stderr)

    missing = cli("batch", "encrypt", "--key", key, "--input", str(tmp_path / "nope.jsonl"))
    assert missing.returncode == EXIT_IO and "input not found" in one_line(missing.stderr)
    out.write_text("keep\n")
    exists = cli("batch", "encrypt", "--key", key, "--input", str(source), "--output", str(out))
    assert exists.returncode == EXIT_IO and "--force" in one_line(exists.stderr)
    assert out.read_text() == "keep\n"
    forced = cli("batch", "encrypt", "--key", key, "--input", str(source), "--output", str(out), "--force")
    assert forced.returncode == EXIT_OK and "ciphertext" in read_lines(out)[0]

    no_token = cli("batch", "decrypt", "--key", key, "--input", str(source), env={"KEYSTREAM_TOKEN": ""})
    assert no_token.returncode == EXIT_AUTH and "no token" in one_line(no_token.stderr)
    usage = cli("batch", "encrypt", "--input", str(source))
    assert usage.returncode == EXIT_USAGE and usage.stderr.startswith(b"usage: keystream batch encrypt ")


@pytest.fixture(scope="module")
def small_limits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """A server whose batch limits are far below the CLI's request size: 3 items, 2 KiB bodies."""
    settings = {"KEYSTREAM_BATCH_MAX_ITEMS": "3", "KEYSTREAM_BATCH_MAX_BYTES": "2048"}
    yield from keystream_server.running(tmp_path_factory.mktemp("small-limits"), settings)


def test_batch_splits_requests_to_the_service_limits(small_limits: RunningServer, tmp_path: Path) -> None:
    def run(*args: str, data: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [*KEYSTREAM, *args], input=data, capture_output=True, cwd=REPO, env=small_limits.env(),
            timeout=CLI_TIMEOUT, check=False,
        )  # fmt: skip

    assert run("keys", "create", "small").returncode == EXIT_OK
    values = [os.urandom(100) for _ in range(40)]
    records: list[Any] = [{"plaintext": b64(v)} for v in values]
    records.insert(10, {"plaintext": b64(bytes(3000))})  # over 2 KiB of JSON on its own
    source = write_lines(tmp_path / "items.jsonl", records)

    encrypted = run("batch", "encrypt", "--key", "small", "--input", str(source))
    assert encrypted.returncode == EXIT_ITEMS_FAILED, encrypted.stderr
    assert "1 of 41 items failed (lines 11)" in one_line(encrypted.stderr)
    out = read_lines(encrypted.stdout)
    assert len(out) == 41 and out[10]["error"]["code"] == "payload_too_large"
    sealed = b"".join(json.dumps(r).encode() + b"\n" for r in out if "ciphertext" in r)
    decrypted = run("batch", "decrypt", "--key", "small", "--input", "-", data=sealed)
    assert decrypted.returncode == EXIT_OK, decrypted.stderr
    assert [base64.b64decode(r["plaintext"]) for r in read_lines(decrypted.stdout)] == values


@pytest.mark.parametrize(
    ("signum", "code"), [(signal.SIGINT, EXIT_INTERRUPTED), (signal.SIGTERM, EXIT_TERMINATED)]
)
def test_batch_stopped_midway_removes_the_partial_output(
    server: RunningServer, key: str, tmp_path: Path, signum: int, code: int
) -> None:
    """Stop a batch while it waits for more input lines: one error line, and no output file left behind."""
    out = tmp_path / "out.jsonl"
    process = subprocess.Popen(
        [*KEYSTREAM, "batch", "encrypt", "--key", key, "--input", "-", "--output", str(out)],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, env=server.env(), cwd=REPO,
        preexec_fn=interruptible_by_sigint,
    )  # fmt: skip
    assert process.stdin is not None and process.stderr is not None
    process.stdin.write(json.dumps({"plaintext": b64(b"x")}).encode() + b"\n")
    process.stdin.flush()
    deadline = time.monotonic() + 30
    while not list(tmp_path.glob(".out.jsonl.*.partial")):
        assert time.monotonic() < deadline and process.poll() is None, "no partial output appeared"
        time.sleep(0.05)
    time.sleep(0.2)
    process.send_signal(signum)
    assert process.wait(timeout=30) == code
    assert len(process.stderr.read().splitlines()) == 1
    process.stdin.close()
    process.stderr.close()
    assert list(tmp_path.iterdir()) == []


def test_an_aes256_siv_key_from_the_cli_encrypts_equal_values_equally(cli: RunCli, tmp_path: Path) -> None:
    created = cli("keys", "create", "cli-siv", "--type", "aes256-siv", "--json")
    assert created.returncode == EXIT_OK, created.stderr
    assert json.loads(created.stdout)["type"] == "aes256-siv"
    records = [{"plaintext": b64(b"alice@example.com"), "associated_data": b64(b"users.email")}] * 2
    records.append({"plaintext": b64(b"bob@example.com"), "associated_data": b64(b"users.email")})
    sealed = tmp_path / "sealed.jsonl"
    encrypted = cli(
        "batch", "encrypt", "--key", "cli-siv", "--input", str(write_lines(tmp_path / "in.jsonl", records)),
        "--output", str(sealed),
    )  # fmt: skip
    assert encrypted.returncode == EXIT_OK, encrypted.stderr
    texts = [r["ciphertext"] for r in read_lines(sealed)]
    assert texts[0] == texts[1] != texts[2]
    decrypted = cli("batch", "decrypt", "--key", "cli-siv", "--input", str(sealed))
    assert decrypted.returncode == EXIT_OK, decrypted.stderr
    assert [r["plaintext"] for r in read_lines(decrypted.stdout)] == [r["plaintext"] for r in records]


def test_64_bytes_import_as_an_aes256_siv_key_only_when_asked(cli: RunCli, tmp_path: Path) -> None:
    material = tmp_path / "siv.key"
    material.write_bytes(os.urandom(64))
    guessed = cli("keys", "import", "cli-siv-guessed", str(material))
    assert guessed.returncode != EXIT_OK
    assert "16 (aes128), 24 (aes192), 32 (aes256) bytes long, got 64 bytes" in guessed.stderr.decode()
    imported = cli("keys", "import", "cli-siv-imported", str(material), "--type", "aes256-siv", "--json")
    assert imported.returncode == EXIT_OK, imported.stderr
    assert json.loads(imported.stdout)["type"] == "aes256-siv"
    again = cli("keys", "import-version", "cli-siv-imported", "--file", str(material), "--json")
    assert again.returncode == EXIT_OK and json.loads(again.stdout)["latest_version"] == 2

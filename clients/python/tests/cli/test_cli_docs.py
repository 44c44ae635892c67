"""The ``keystream`` examples of docs/client-and-cli.md's "Small values" and "Batches" sections, run as
written (bash, in a fresh directory) against a real server, their output compared with what the page shows."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from keystream_cli import CLI_TIMEOUT, RunCli
from keystream_docs import section_blocks
from keystream_server import RunningServer


def _run_sh(script: str, server: RunningServer, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = server.env()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        ["bash", "-uo", "pipefail", "-c", script], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=CLI_TIMEOUT, check=False,
    )  # fmt: skip


def _json_objects(text: str) -> list[Any]:
    decoder, objects, position = json.JSONDecoder(), [], 0
    while position < len(text):
        if text[position].isspace():
            position += 1
            continue
        value, position = decoder.raw_decode(text, position)
        objects.append(value)
    return objects


def _ensure_key(cli: RunCli, name: str) -> None:
    if cli("keys", "show", name).returncode != 0:
        assert cli("keys", "create", name).returncode == 0


def test_small_values_example(cli: RunCli, server: RunningServer, tmp_path: Path) -> None:
    (shell_language, script), (_, shown) = section_blocks("## Small values")[:2]
    assert shell_language == "sh"
    _ensure_key(cli, "invoices")
    result = _run_sh(script, server, tmp_path)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    first, hello, rest = result.stdout.split("\n", 2)
    assert first.isascii() and len(first) > 40 and hello == "hello"
    printed, documented = _json_objects(rest), _json_objects(shown)
    assert [sorted(obj) for obj in printed] == [sorted(obj) for obj in documented]
    assert printed[0]["key"] == "invoices" and printed[1] == documented[1]


def test_batch_example(cli: RunCli, server: RunningServer, tmp_path: Path) -> None:
    (_, script), (_, sealed_shown), (_, decrypted_shown) = section_blocks(
        "## Batches of small items (JSON lines)"
    )
    _ensure_key(cli, "invoices")
    result = _run_sh(script, server, tmp_path)
    assert result.returncode == 9
    summary = "keystream: error: 1 of 3 items failed (lines 2): each has an error object in the output"
    assert result.stderr.splitlines() == [summary, summary]
    assert result.stdout == decrypted_shown
    sealed = [json.loads(line) for line in (tmp_path / "sealed.jsonl").read_text().splitlines()]
    documented = [json.loads(line) for line in sealed_shown.splitlines()]
    assert [sorted(r) for r in sealed] == [sorted(r) for r in documented]
    for real, shown in zip(sealed, documented, strict=True):
        assert {k: v for k, v in real.items() if k != "ciphertext"} == {
            k: v for k, v in shown.items() if k != "ciphertext"
        }
        assert real.get("ciphertext", "")[:1] == shown.get("ciphertext", "")[:1]  # the sealed header byte


def test_datakey_example(cli: RunCli, server: RunningServer, tmp_path: Path) -> None:
    (shell_language, script), (_, shown) = section_blocks("## Data keys (envelope encryption)")
    assert shell_language == "sh"
    _ensure_key(cli, "invoices")
    result = _run_sh(script, server, tmp_path)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    decrypted, printed, rest = result.stdout.split("\n", 2)
    assert decrypted == printed and len(base64.b64decode(printed, validate=True)) == 32
    (wrapped,), (documented,) = _json_objects(rest), _json_objects(shown)
    assert sorted(wrapped) == sorted(documented) == ["ciphertext", "key_version"]

"""``operator init --shares N --threshold K`` (the shamir seal) and the starts it refuses, as subprocesses.

``init`` prints the shares and the root token once (``--json`` as the issue gives it), writes an audit line
``audit verify`` accepts, and refuses a keystore already initialised; a server whose seal does not match the
keystore refuses to start with one line, exit code 2.
"""

from __future__ import annotations

import base64
import json
import os
from pathlib import Path

from app.admin import EXIT_OK, EXIT_USAGE
from app.keystore import open_keystore
from app.seal.shamir import ShamirSeal
from tests.admin_process import run_admin as run
from tests.app.seal.test_seal_cli import one_line_error, serve_refusal

ROOT = "ks_0badcafe_" + "s" * 43


def shamir_env(data_dir: Path, **overrides: str) -> dict[str, str]:
    return {"KEYSTREAM_SEAL": "shamir", "KEYSTREAM_DATA_DIR": str(data_dir), **overrides}


def test_init_prints_shares_that_unseal_and_refuses_a_second_init(tmp_path: Path) -> None:
    data, log = tmp_path / "data", tmp_path / "audit.log"
    env = shamir_env(data, KEYSTREAM_AUDIT_LOG=str(log))
    first = run("operator", "init", "--shares", "5", "--threshold", "3", "--json", env=env)
    assert first.returncode == EXIT_OK, first.stderr
    printed = json.loads(first.stdout)
    assert set(printed) == {"shares", "threshold", "root_token"}
    assert printed["threshold"] == 3 and len(set(printed["shares"])) == 5
    assert printed["root_token"].startswith("ks_")
    assert not (data / "master.key").exists()
    seal = ShamirSeal()
    store = open_keystore(data, seal)
    try:
        assert store.count_tokens() == 1
        for share in printed["shares"][2:]:
            seal.submit_share(share)
        assert not seal.sealed
    finally:
        store.close()
        seal.close()
    again = run("operator", "init", "--shares", "5", "--threshold", "3", env=env)
    assert again.returncode == EXIT_USAGE
    assert "already initialised" in one_line_error(again, "-")
    lines = log.read_text().splitlines()
    assert len(lines) == 1 and json.loads(lines[0])["operation"] == "init"
    assert printed["shares"][0][6:] not in log.read_text()
    verified = run("audit", "verify", str(log), env=env, stdin="\n".join(printed["shares"][:3]))
    assert verified.returncode == EXIT_OK, verified.stderr
    short = run("audit", "verify", str(log), env=env, stdin=printed["shares"][0])
    assert short.returncode == EXIT_USAGE and "give 3 shares on stdin" in short.stderr


def test_init_takes_the_root_token_from_the_environment_and_prints_shares(tmp_path: Path) -> None:
    result = run(
        "operator",
        "init",
        "--shares",
        "2",
        "--threshold",
        "2",
        env=shamir_env(tmp_path, KEYSTREAM_ROOT_TOKEN=ROOT),
    )
    assert result.returncode == EXIT_OK, result.stderr
    assert result.stdout.count("kss1-") == 2 and ROOT in result.stdout


def test_init_refuses_bad_counts_with_one_line(tmp_path: Path) -> None:
    for args, wanted in (
        ((), "needs --shares N and --threshold K"),
        (("--shares", "2", "--threshold", "3"), "threshold must be in 1 .. shares"),
        (("--shares", "256", "--threshold", "2"), "shares must be in 1 .. 255"),
    ):
        result = run("operator", "init", *args, env=shamir_env(tmp_path / "data"))
        assert result.returncode == EXIT_USAGE
        assert wanted in one_line_error(result, "-")
    file_init = run("operator", "init", "--shares", "2", env={"KEYSTREAM_DATA_DIR": str(tmp_path / "file")})
    assert file_init.returncode == EXIT_USAGE
    assert "for KEYSTREAM_SEAL=shamir" in one_line_error(file_init, "-")
    assert not (tmp_path / "data" / "keystore.db").exists()


def test_a_server_whose_seal_does_not_match_the_keystore_refuses_to_start(tmp_path: Path) -> None:
    line = serve_refusal(shamir_env(tmp_path / "empty"), "-")
    assert "operator init" in line
    master = base64.b64encode(os.urandom(32)).decode()
    file_env = {"KEYSTREAM_DATA_DIR": str(tmp_path / "file"), "KEYSTREAM_MASTER_KEY": master}
    assert run("operator", "init", env=file_env).returncode == EXIT_OK
    line = serve_refusal(shamir_env(tmp_path / "file"), "-")
    assert "is sealed by the file seal" in line
    shamir = shamir_env(tmp_path / "shamir")
    assert run("operator", "init", "--shares", "1", "--threshold", "1", env=shamir).returncode == EXIT_OK
    line = serve_refusal({**file_env, "KEYSTREAM_DATA_DIR": str(tmp_path / "shamir")}, "-")
    assert "is sealed by the shamir seal" in line and master not in line

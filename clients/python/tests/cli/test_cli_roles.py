"""``keystream roles list|show|write|delete`` against a real server: roles written from flags or from a JSON
file (what ``roles show --json`` printed), text and ``--json`` output, a role written by the CLI that a
workload logs in through, and the usage errors and refusals with the CLI's exit codes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from jwt_login import AUDIENCE, configure, k8s_jwt
from keystream_cli import RunCli
from keystream_client import KeystreamClient
from keystream_client.cli import EXIT_API_ERROR, EXIT_AUTH, EXIT_NOT_FOUND, EXIT_OK, EXIT_USAGE
from keystream_server import RunningServer


@pytest.fixture(scope="module", autouse=True)
def configured(server: RunningServer) -> None:
    configure(server.url, server.token)


def ok(result: subprocess.CompletedProcess[bytes]) -> str:
    """A command's stdout, once it is known to have succeeded."""
    assert result.returncode == EXIT_OK, result.stderr
    return result.stdout.decode()


def test_write_show_list_delete_a_jwt_role(cli: RunCli, server: RunningServer, tmp_path: Path) -> None:
    written = json.loads(
        ok(
            cli(
                "roles", "write", "cli-billing", "--method", "jwt",
                "--scope", "encrypt", "--scope", "decrypt",
                "--key-pattern", "login-billing-*", "--ttl", "600", "--max-ttl", "7200",
                "--bound-audience", AUDIENCE, "--bound-claim", "/kubernetes.io/namespace=apps",
                "--bound-claim", "/kubernetes.io/serviceaccount/name=worker",
                "--bound-claim", "/kubernetes.io/serviceaccount/name=batch-*",
                "--claim-mapping", "/kubernetes.io/serviceaccount/uid=sa_uid", "--json",
            )
        )
    )  # fmt: skip
    assert written["name"] == "cli-billing" and written["method"] == "jwt"
    assert (
        written["scopes"] == ["encrypt", "decrypt"] and written["ttl"] == 600 and written["max_ttl"] == 7200
    )
    assert written["bound_claims"] == {
        "/kubernetes.io/namespace": ["apps"],
        "/kubernetes.io/serviceaccount/name": ["worker", "batch-*"],
    }
    assert written["claim_mappings"] == {"/kubernetes.io/serviceaccount/uid": "sa_uid"}

    # A workload logs in through the role the CLI wrote.
    with KeystreamClient(server.url, token="") as anonymous:
        issued = anonymous.login_jwt("cli-billing", k8s_jwt())
    assert issued.metadata["sa_uid"] == "1" and issued.key_patterns == ("login-billing-*",)

    shown = ok(cli("roles", "show", "cli-billing"))
    assert "method:" in shown and "bound_audiences:" in shown and f'["{AUDIENCE}"]' in shown
    listed = ok(cli("roles", "list"))
    assert listed.splitlines()[0].split()[:2] == ["NAME", "METHOD"]
    assert any(line.split()[:2] == ["cli-billing", "jwt"] for line in listed.splitlines())
    assert "cli-billing" in [role["name"] for role in json.loads(ok(cli("roles", "list", "--json")))]

    # What `show --json` printed goes back through --json-file, changed.
    saved = json.loads(ok(cli("roles", "show", "cli-billing", "--json")))
    saved["ttl"] = 900
    role_file = tmp_path / "role.json"
    role_file.write_text(json.dumps(saved))
    rewritten = json.loads(ok(cli("roles", "write", "cli-billing", "--json-file", str(role_file), "--json")))
    assert rewritten["ttl"] == 900 and rewritten["created_at"] == written["created_at"]
    assert rewritten["bound_claims"] == written["bound_claims"]

    assert json.loads(ok(cli("roles", "delete", "cli-billing", "--json"))) == {"deleted": "cli-billing"}
    assert cli("roles", "show", "cli-billing").returncode == EXIT_NOT_FOUND
    assert cli("roles", "delete", "cli-billing").returncode == EXIT_NOT_FOUND


def test_write_a_cert_role_from_flags_and_from_stdin(cli: RunCli) -> None:
    cert = json.loads(
        ok(
            cli(
                "roles", "write", "cli-spiffe", "--method", "cert", "--scope", "encrypt",
                "--allowed-uri-san", "spiffe://example.org/ns/*/sa/billing", "--json",
            )
        )
    )  # fmt: skip
    assert cert["method"] == "cert" and cert["allowed_uri_sans"] == ["spiffe://example.org/ns/*/sa/billing"]
    body = {"method": "cert", "scopes": ["decrypt"], "allowed_dns_sans": ["*.billing.svc"]}
    from_stdin = cli(
        "roles", "write", "cli-dns", "--json-file", "-", "--json", input=json.dumps(body).encode()
    )
    assert json.loads(ok(from_stdin))["allowed_dns_sans"] == ["*.billing.svc"]


@pytest.mark.parametrize(
    ("args", "wording"),
    [
        (["--scope", "encrypt"], "give --method"),
        (["--method", "jwt", "--scope", "encrypt", "--allowed-dns-san", "a"], "do not apply to --method jwt"),
        (["--method", "cert", "--scope", "encrypt", "--bound-claim", "a=b"], "do not apply to --method cert"),
        (["--method", "jwt", "--bound-claim", "namespace"], "takes CLAIM=VALUE"),
        (["--method", "jwt", "--claim-mapping", "a=x", "--claim-mapping", "a=y"], "a is given twice"),
        (["--json-file", "-", "--scope", "encrypt"], "drop --scope"),
        (["--method", "jwt", "--ttl", "0"], "must be >= 1"),
    ],
    ids=[
        "no-method",
        "cert-flag-on-jwt",
        "jwt-flag-on-cert",
        "no-equals",
        "mapping-twice",
        "file-and-flags",
        "ttl",
    ],
)
def test_usage_errors(cli: RunCli, args: list[str], wording: str) -> None:
    result = cli("roles", "write", "cli-usage", *args)
    assert result.returncode == EXIT_USAGE and wording in result.stderr.decode()


def test_bad_files_and_refusals(cli: RunCli, server: RunningServer, tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"name": "someone-else", "method": "jwt"}))
    named = cli("roles", "write", "cli-bad", "--json-file", str(other))
    assert named.returncode == EXIT_USAGE and b"is role 'someone-else'" in named.stderr
    not_json = tmp_path / "broken.json"
    not_json.write_text("{")
    broken = cli("roles", "write", "cli-bad", "--json-file", str(not_json))
    assert broken.returncode == EXIT_USAGE and b"is not JSON" in broken.stderr
    missing = cli("roles", "write", "cli-bad", "--json-file", str(tmp_path / "absent.json"))
    assert missing.returncode == EXIT_USAGE and b"cannot read the role file" in missing.stderr
    # The service's refusals: no audience for a jwt role; a token without admin.
    refused = cli("roles", "write", "cli-bad", "--method", "jwt", "--scope", "encrypt")
    assert refused.returncode == EXIT_API_ERROR and b"bound_audiences" in refused.stderr
    with KeystreamClient(server.url, server.token) as admin:
        encrypt_only = admin.create_token(["encrypt"]).token
    not_admin = cli("roles", "list", env={"KEYSTREAM_TOKEN": encrypt_only})
    assert not_admin.returncode == EXIT_AUTH

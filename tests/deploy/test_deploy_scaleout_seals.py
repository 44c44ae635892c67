"""The scale-out stack's shamir and pkcs11 variants (deploy/compose/scaleout-shamir.yml, scaleout-pkcs11.yml)
without a daemon: what docker-compose resolves, the SoftHSM2 image and its one-shot token initialisation (run
here against a real SoftHSM2 token and ``keystream-server operator init``), and deploy/compose.sh's seal
choice. ``make docker-test`` runs both stacks for real (deploy/compose/scaleout/check_seal.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from deploy_paths import DEPLOY, REPO, mounts
from scaleout_compose import DATABASE_URL, REPLICAS, SCALEOUT_DIR, compose, resolved, write_secrets

SHAMIR = DEPLOY / "compose" / "scaleout-shamir.yml"
PKCS11 = DEPLOY / "compose" / "scaleout-pkcs11.yml"
COMPOSE_SH = DEPLOY / "compose.sh"
TOKEN_DIR = "/var/lib/keystream-softhsm/tokens"
NO_MASTER_KEY = SCALEOUT_DIR / "no-master-key"


@pytest.fixture
def secrets_dir(tmp_path: Path) -> Path:
    """A secrets directory of a shamir or pkcs11 stack: no master key file, a PIN file for the token."""
    write_secrets(tmp_path, master_key=False)
    (tmp_path / "pkcs11-pin").write_text("0123456789abcdef01234567")
    return tmp_path


@pytest.mark.parametrize("override", [SHAMIR, PKCS11], ids=lambda path: path.name)
def test_a_seal_variant_needs_no_master_key_file(secrets_dir: Path, override: Path) -> None:
    result = compose("config", "-q", secrets=secrets_dir, overrides=(override,))
    assert result.returncode == 0, result.stderr
    assert "undefined secret file" not in result.stderr
    config = resolved(secrets_dir, (override,))
    # Compose cannot drop scaleout.yml's secret: the variants mount a placeholder that holds no key.
    assert config["secrets"]["master-key"]["file"] == str(NO_MASTER_KEY)
    assert NO_MASTER_KEY.read_text().startswith("# Not a master key")
    for name in REPLICAS:
        replica = config["services"][name]
        environment = replica["environment"]
        assert environment["KEYSTREAM_SEAL"] == override.stem.removeprefix("scaleout-")
        assert environment["KEYSTREAM_MASTER_KEY_FILE"] == ""  # unset: the file seal's setting is not read
        assert environment["KEYSTREAM_DATABASE_URL"] == DATABASE_URL
        # Readiness stays /readyz: a sealed replica is not ready, and HAProxy sends it nothing.
        assert "/readyz" in " ".join(replica["healthcheck"]["test"])
        assert replica["read_only"] is True


def test_the_shamir_variant_changes_only_the_seal(secrets_dir: Path) -> None:
    plain = resolved(write_secrets(secrets_dir))
    shamir = resolved(secrets_dir, (SHAMIR,))
    assert set(shamir["services"]) == set(plain["services"])
    for name in REPLICAS:
        before, after = plain["services"][name], shamir["services"][name]
        changed = {
            key for key in before["environment"] if before["environment"][key] != after["environment"][key]
        }
        assert changed == {"KEYSTREAM_MASTER_KEY_FILE"}
        assert set(after["environment"]) - set(before["environment"]) == {"KEYSTREAM_SEAL"}
        assert {k: v for k, v in after.items() if k != "environment"} == {
            k: v for k, v in before.items() if k != "environment"
        }


def test_the_pkcs11_replicas_share_the_token_hsm_init_makes(secrets_dir: Path) -> None:
    services = resolved(secrets_dir, (PKCS11,))["services"]
    init = services["hsm-init"]
    assert init["command"] == ["keystream-softhsm-init"]
    assert init["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert init["restart"] == "no" and init["healthcheck"]["test"] == ["NONE"]
    assert init["environment"]["KEYSTREAM_DATABASE_URL"] == DATABASE_URL  # operator init seals the database
    for name in ("hsm-init", *REPLICAS):
        service = services[name]
        environment = service["environment"]
        assert service["image"] == "keystream-softhsm:latest"
        assert mounts(service)[TOKEN_DIR] == "softhsm-tokens"
        assert environment["KEYSTREAM_PKCS11_LIB"] == "/usr/lib/softhsm/libsofthsm2.so"
        assert environment["KEYSTREAM_PKCS11_PIN_FILE"] == "/run/secrets/pkcs11-pin"
        assert "KEYSTREAM_PKCS11_PIN" not in environment  # the PIN only in the secret file
        assert "pkcs11-pin" in [secret["source"] for secret in service["secrets"]]
    for name in REPLICAS:
        assert services[name]["depends_on"]["hsm-init"]["condition"] == "service_completed_successfully"
    config = resolved(secrets_dir, (PKCS11,))
    assert config["secrets"]["pkcs11-pin"]["file"] == str(secrets_dir / "pkcs11-pin")
    assert "softhsm-tokens" in config["volumes"]


def test_the_softhsm_image_keeps_its_token_in_the_volume() -> None:
    dockerfile = (SCALEOUT_DIR / "softhsm.Dockerfile").read_text()
    assert "FROM ${KEYSTREAM_IMAGE}" in dockerfile and "softhsm2" in dockerfile
    assert (
        f"install -d -o keystream -g keystream -m 0700 /var/lib/keystream-softhsm {TOKEN_DIR}" in dockerfile
    )
    assert "SOFTHSM2_CONF=/etc/keystream/softhsm2.conf" in dockerfile
    assert re.search(r"^USER 10001:10001$", dockerfile, re.MULTILINE)  # not root at run time
    assert "NOT AN HSM" in dockerfile and "NOT AN HSM" in PKCS11.read_text()  # said where it is used
    conf = (SCALEOUT_DIR / "softhsm2.conf").read_text()
    assert f"directories.tokendir = {TOKEN_DIR}" in conf


def _run_hsm_init(conf: Path, data: Path, pin_file: Path) -> subprocess.CompletedProcess[str]:
    """softhsm-init.sh as the hsm-init service runs it, on this machine's SoftHSM2 and keystream-server."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    environment.update(
        PATH=f"{Path(sys.executable).parent}:{environment['PATH']}",
        SOFTHSM2_CONF=str(conf),
        KEYSTREAM_DATA_DIR=str(data),
        KEYSTREAM_SEAL="pkcs11",
        KEYSTREAM_PKCS11_LIB="/usr/lib/softhsm/libsofthsm2.so",
        KEYSTREAM_PKCS11_TOKEN_LABEL="keystream",
        KEYSTREAM_PKCS11_PIN_FILE=str(pin_file),
    )
    return subprocess.run(
        [str(SCALEOUT_DIR / "softhsm-init.sh")],
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_hsm_init_makes_the_token_and_the_key_once(tmp_path: Path) -> None:
    """At the first start the script initialises the token and operator init creates the key in it; at the
    next start both are found and kept (the keystore still opens)."""
    tokens = tmp_path / "tokens"
    tokens.mkdir(mode=0o700)
    conf = tmp_path / "softhsm2.conf"
    conf.write_text(
        (SCALEOUT_DIR / "softhsm2.conf").read_text().replace(TOKEN_DIR, str(tokens)),
    )
    pin_file = tmp_path / "pin"
    pin_file.write_text("pin-5e0a41c2\n")
    pin_file.chmod(0o600)
    first = _run_hsm_init(conf, tmp_path / "data", pin_file)
    assert first.returncode == 0, first.stderr
    assert "initialised the SoftHSM2 token 'keystream'" in first.stdout
    assert "sealed by the pkcs11 seal" in first.stdout and "created the master key in it" in first.stdout
    second = _run_hsm_init(conf, tmp_path / "data", pin_file)
    assert second.returncode == 0, second.stderr
    assert "token 'keystream' is already initialised" in second.stdout
    assert "its master key was already there" in second.stdout
    assert "pin-5e0a41c2" not in first.stdout + first.stderr + second.stdout + second.stderr


def _compose_sh(*args: str, secrets: Path) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("KEYSTREAM_", "COMPOSE_"))}
    environment["KEYSTREAM_SCALEOUT_SECRETS"] = str(secrets)
    return subprocess.run(
        [str(COMPOSE_SH), *args],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_compose_sh_refuses_another_seal_for_a_stack(tmp_path: Path) -> None:
    """The stack's database is sealed by the seal it was brought up with: another one is refused before
    anything starts, and so is unsealing a stack whose seal has no shares, or whose shares are gone."""
    (tmp_path / "seal").write_text("file\n")
    other = _compose_sh("scaleout-up", "--seal", "shamir", secrets=tmp_path)
    assert other.returncode == 2
    assert "runs the file seal" in other.stderr and "--seal file" in other.stderr
    unseal = _compose_sh("unseal", secrets=tmp_path)
    assert unseal.returncode == 2 and "has no shares" in unseal.stderr
    (tmp_path / "seal").write_text("shamir\n")
    lost = _compose_sh("unseal", secrets=tmp_path)
    assert lost.returncode == 1 and f"no shares in {tmp_path / 'shamir-init.json'}" in lost.stderr
    bad = _compose_sh("scaleout-test", "--seal", "vault", secrets=tmp_path)
    assert bad.returncode == 2 and "--seal must be file, shamir or pkcs11" in bad.stderr
    missing = _compose_sh("scaleout-up", "--seal", secrets=tmp_path)
    assert missing.returncode == 2 and "usage:" in missing.stderr


def test_docker_test_runs_every_seal_variant() -> None:
    makefile = (REPO / "Makefile").read_text()
    docker_test = makefile[makefile.index("\ndocker-test:") :].split("\n\n")[0]
    for seal in ("shamir", "pkcs11"):
        assert f"deploy/compose.sh scaleout-test --seal {seal}" in docker_test
    assert "deploy/compose/scaleout/check_seal.py" in COMPOSE_SH.read_text()

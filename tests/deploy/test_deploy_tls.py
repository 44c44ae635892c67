"""Both ways to run TLS in deploy/: every manifest that binds 0.0.0.0 either serves TLS or says that TLS ends
elsewhere (KEYSTREAM_TLS_DISABLE=true), as the server's start-up check demands; the TLS variants (compose
overlay deploy/compose/tls.yml, Kubernetes overlay deploy/k8s-tls) build, validate and point at their files;
the throwaway-certificate script makes a chain that verifies for the names the overlays use."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy_paths import DEPLOY, K8S_DIR, REPO, compose_config, run_compose, tool

from app.serving.tls import ServerTls, StartupRefusedError, check_plain_http_bind

TOKEN = "ks_0123456789abcdef_" + "x" * 32
COMPOSE_TLS = DEPLOY / "compose" / "tls.yml"
K8S_TLS = DEPLOY / "k8s-tls"


def start_check(env: dict[str, str]) -> str | None:
    """The server's plain-HTTP rule applied to a manifest's KEYSTREAM_* environment (the image's defaults
    under it: KEYSTREAM_HOST=0.0.0.0)."""
    host = env.get("KEYSTREAM_HOST", "0.0.0.0")  # noqa: S104 - the Dockerfile's default
    tls = None
    if env.get("KEYSTREAM_TLS_CERT_FILE"):
        tls = ServerTls(Path(env["KEYSTREAM_TLS_CERT_FILE"]), Path(env["KEYSTREAM_TLS_KEY_FILE"]))
    return check_plain_http_bind(host, tls, env.get("KEYSTREAM_TLS_DISABLE", "").lower() == "true")


def test_the_check_refuses_the_image_defaults_alone() -> None:
    with pytest.raises(StartupRefusedError):
        start_check({})


def compose_file_config(*files: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    env["KEYSTREAM_ROOT_TOKEN"] = TOKEN
    return compose_config(run_compose(files, "config", env=env))


def test_compose_plain_http_says_tls_ends_elsewhere() -> None:
    keystream = compose_file_config(REPO / "docker-compose.yml")["services"]["keystream"]
    assert keystream["environment"]["KEYSTREAM_TLS_DISABLE"] == "true"
    assert start_check(keystream["environment"]) is not None  # allowed, with the warning


def test_compose_tls_overlay_serves_https_from_secrets() -> None:
    config = compose_file_config(REPO / "docker-compose.yml", COMPOSE_TLS)
    keystream = config["services"]["keystream"]
    env = keystream["environment"]
    assert env["KEYSTREAM_TLS_DISABLE"] == "false"
    assert env["KEYSTREAM_TLS_CERT_FILE"] == "/run/secrets/keystream-tls-cert"
    assert env["KEYSTREAM_TLS_KEY_FILE"] == "/run/secrets/keystream-tls-key"
    assert start_check(env) is None
    assert {secret if isinstance(secret, str) else secret["source"] for secret in keystream["secrets"]} == {
        "keystream-tls-cert",
        "keystream-tls-key",
    }
    assert "https://127.0.0.1:8000/healthz" in " ".join(keystream["healthcheck"]["test"])
    assert config["secrets"]["keystream-tls-cert"]["file"].endswith("deploy/compose/tls/server.pem")
    prometheus = config["services"]["prometheus"]
    assert "--config.file=/etc/prometheus-tls/prometheus.yml" in prometheus["command"]


def test_compose_tls_prometheus_config_is_valid(tmp_path: Path) -> None:
    text = (DEPLOY / "compose" / "prometheus-tls.yml").read_text()
    config = yaml.safe_load(text)
    (job,) = [job for job in config["scrape_configs"] if job["job_name"] == "keystream"]
    assert job["scheme"] == "https" and job["tls_config"]["server_name"] == "keystream"
    # promtool resolves the files: point them at the repository's rules and a CA file.
    (tmp_path / "ca.pem").write_text("")
    local = text.replace("/etc/prometheus/rules", str(DEPLOY / "prometheus" / "rules"))
    local = local.replace("/etc/prometheus-tls/ca.pem", str(tmp_path / "ca.pem"))
    (tmp_path / "prometheus.yml").write_text(local)
    result = subprocess.run(
        [tool("promtool"), "check", "config", str(tmp_path / "prometheus.yml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def container_env(deployment: dict[str, Any]) -> dict[str, str]:
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {item["name"]: item["value"] for item in container["env"] if "value" in item}


def test_k8s_base_says_tls_ends_at_the_ingress() -> None:
    deployment = yaml.safe_load((K8S_DIR / "deployment.yaml").read_text().split("\n---\n")[0])
    env = container_env(deployment)
    assert env["KEYSTREAM_HOST"] == "0.0.0.0"  # noqa: S104 - inside the pod
    assert env["KEYSTREAM_TLS_DISABLE"] == "true"
    assert start_check(env) is not None
    ingress = yaml.safe_load((K8S_DIR / "ingress.yaml").read_text())
    assert ingress["spec"]["tls"][0]["secretName"] == "keystream-ingress-tls"
    backend = ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]
    service = yaml.safe_load((K8S_DIR / "service.yaml").read_text())
    assert backend["name"] == service["metadata"]["name"]
    assert backend["port"]["name"] == service["spec"]["ports"][0]["name"]


def test_k8s_tls_overlay_builds_and_validates() -> None:
    result = subprocess.run(
        [tool("kubectl"), "kustomize", str(K8S_TLS)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(result.stdout) if doc}
    for doc in docs.values():
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    deployment = docs["Deployment"]
    env = container_env(deployment)
    assert env["KEYSTREAM_TLS_DISABLE"] == "false"
    assert start_check(env) is None
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert env["KEYSTREAM_TLS_CERT_FILE"] == f"{mounts['tls']}/tls.crt"
    assert env["KEYSTREAM_TLS_KEY_FILE"] == f"{mounts['tls']}/tls.key"
    volumes = {volume["name"]: volume for volume in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "keystream-tls"
    assert {"data", "tmp"} <= set(volumes)  # the base's volumes are still there
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["scheme"] == "HTTPS", probe
        assert container[probe]["httpGet"]["path"] in ("/healthz", "/readyz")
    assert docs["Service"]["metadata"]["annotations"]["prometheus.io/scheme"] == "https"


def test_make_test_certs_makes_a_chain_for_the_overlays(tmp_path: Path) -> None:
    script = DEPLOY / "compose" / "make-test-certs.sh"
    subprocess.run([str(script), str(tmp_path)], check=True, capture_output=True, timeout=60)
    verified = subprocess.run(
        ["openssl", "verify", "-CAfile", str(tmp_path / "ca.pem"), str(tmp_path / "server.pem")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert verified.returncode == 0, verified.stderr
    names = subprocess.run(
        ["openssl", "x509", "-in", str(tmp_path / "server.pem"), "-noout", "-ext", "subjectAltName"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    for name in ("DNS:keystream", "DNS:localhost", "IP Address:127.0.0.1"):
        assert name in names
    ServerTls(tmp_path / "server.pem", tmp_path / "server.key").context()  # the server accepts the pair

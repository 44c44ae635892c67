"""deploy/k8s and its seal overlays deploy/k8s-shamir and deploy/k8s-pkcs11: schema validation
(kubernetes-validate ships the Kubernetes JSON schemas, so it runs offline) and the fields docs/operations.md
(Kubernetes) relies on."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy_paths import DEPLOY, K8S_DIR, tool

from app.core.config import Settings

MANIFESTS = sorted(path for path in K8S_DIR.glob("*.yaml") if path.name != "kustomization.yaml")


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def resources() -> dict[str, dict[str, Any]]:
    """kind -> resource, over every manifest (each kind appears once)."""
    found: dict[str, dict[str, Any]] = {}
    for path in MANIFESTS:
        for doc in documents(path):
            assert doc["kind"] not in found, f"two {doc['kind']} resources"
            found[doc["kind"]] = doc
    return found


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifest_matches_the_kubernetes_schema(path: Path) -> None:
    for doc in documents(path):
        # strict: unknown fields (typos) are errors too. Raises ValidationError with the field path.
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)


def test_schema_validation_catches_a_bad_field() -> None:
    deployment = resources()["Deployment"]
    deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "eight thousand"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, kubernetes_validate.latest_version(), strict=True)


def test_kustomization_lists_existing_manifests() -> None:
    kustomization = yaml.safe_load((K8S_DIR / "kustomization.yaml").read_text())
    for name in kustomization["resources"]:
        assert (K8S_DIR / name).is_file(), name
    # The scale-out set is applied: the HPA and the PodDisruptionBudget with the Deployment (issue 10).
    assert {"deployment.yaml", "hpa.yaml", "pdb.yaml"} <= set(kustomization["resources"])
    assert "ingress.yaml" not in kustomization["resources"]  # needs an ingress controller: applied by hand


def test_deployment_probes_security_resources_and_secret() -> None:
    found = resources()
    deployment = found["Deployment"]
    pod = deployment["spec"]["template"]
    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] == 10001  # the image's USER
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert {"cpu", "memory"} <= set(container["resources"]["limits"])
    env = {item["name"]: item for item in container["env"]}
    assert env["KEYSTREAM_MASTER_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "keystream-secrets",
        "key": "master-key",
    }
    assert env["KEYSTREAM_ROOT_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "keystream-secrets"
    assert env["KEYSTREAM_HOST"]["value"] == "0.0.0.0"  # noqa: S104 - inside the pod, behind the Service
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["data"] == env["KEYSTREAM_DATA_DIR"]["value"]
    annotations = pod["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/path"] == "/metrics"
    assert annotations["prometheus.io/port"] == str(container["ports"][0]["containerPort"])
    # Three replicas on the shared PostgreSQL keystore, its URL and the master key from the Secret.
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["type"] == "RollingUpdate"
    assert deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert env["KEYSTREAM_DATABASE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "keystream-secrets",
        "key": "database-url",
    }
    # Nothing on disk to share: no PersistentVolumeClaim, the data directory is an emptyDir.
    assert "PersistentVolumeClaim" not in found
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    assert "emptyDir" in volumes["data"]


def test_service_and_hpa_target_the_deployment() -> None:
    found = resources()
    deployment = found["Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = found["Service"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    assert (
        service["spec"]["ports"][0]["targetPort"]
        == deployment["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"]
    )
    hpa = found["HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": deployment["metadata"]["name"],
    }
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"
    assert hpa["spec"]["minReplicas"] == deployment["spec"]["replicas"] == 3


def test_pod_disruption_budget_keeps_two_of_three_replicas() -> None:
    found = resources()
    deployment, budget = found["Deployment"], found["PodDisruptionBudget"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    # A drain may take one replica, never so many that fewer than 2 serve; and it can always take one.
    assert budget["spec"]["minAvailable"] == 2 < deployment["spec"]["replicas"]
    assert found["HorizontalPodAutoscaler"]["spec"]["minReplicas"] > budget["spec"]["minAvailable"]


def overlay(name: str) -> dict[str, dict[str, Any]]:
    """kind -> resource of ``kubectl kustomize deploy/NAME``, each checked against the schema (strict)."""
    result = subprocess.run(
        [tool("kubectl"), "kustomize", str(DEPLOY / name)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    found = {doc["kind"]: doc for doc in yaml.safe_load_all(result.stdout) if doc}
    for doc in found.values():
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    return found


@pytest.mark.parametrize(("name", "seal"), [("k8s-shamir", "shamir"), ("k8s-pkcs11", "pkcs11")])
def test_seal_overlays_drop_the_master_key_and_keep_sealed_pods_alive(name: str, seal: str) -> None:
    """Under the shamir and pkcs11 seals no Secret holds a master key, and a sealed pod is not ready (the
    Service sends it nothing) but alive (/healthz answers 200 while sealed: the kubelet leaves it to be
    unsealed). The settings are ones the server accepts."""
    deployment = overlay(name)["Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {item["name"]: item for item in container["env"]}
    assert "KEYSTREAM_MASTER_KEY" not in env and "KEYSTREAM_MASTER_KEY_FILE" not in env
    assert env["KEYSTREAM_SEAL"]["value"] == seal
    assert env["KEYSTREAM_DATABASE_URL"]["valueFrom"]["secretKeyRef"]["name"] == "keystream-secrets"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    for probe in ("livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["path"] == "/healthz", probe
    values = {item["name"]: item["value"] for item in env.values() if "value" in item}
    settings = {key.removeprefix("KEYSTREAM_").lower(): value for key, value in values.items()}
    Settings.model_validate({**settings, "database_url": "postgresql://keystream:pw@db:5432/keystream"})


def test_pkcs11_overlay_copies_the_pin_to_a_private_file() -> None:
    """A Secret volume's files are 0440 under the pod's fsGroup, which the PIN file check refuses: the init
    container copies the PIN, as the keystream user, to a 0600 file in memory that the server reads."""
    deployment = overlay("k8s-pkcs11")["Deployment"]
    spec = deployment["spec"]["template"]["spec"]
    (init,) = spec["initContainers"]
    (container,) = spec["containers"]
    assert init["image"] == container["image"] == "keystream-hsm:0.1.0"  # the image with the vendor's module
    volumes = {volume["name"]: volume for volume in spec["volumes"]}
    init_mounts = {mount["name"]: mount["mountPath"] for mount in init["volumeMounts"]}
    mounts = {mount["name"]: mount["mountPath"] for mount in container["volumeMounts"]}
    assert volumes["hsm-pin-secret"]["secret"]["secretName"] == "keystream-hsm-pin"
    assert volumes["hsm-pin"]["emptyDir"]["medium"] == "Memory"
    assert "hsm-pin-secret" not in mounts  # the server sees only the private copy
    command = init["command"]
    assert command[:3] == ["install", "-m", "0600"]
    assert command[3] == f"{init_mounts['hsm-pin-secret']}/pin"
    env = {item["name"]: item.get("value") for item in container["env"]}
    assert command[4] == env["KEYSTREAM_PKCS11_PIN_FILE"] == f"{mounts['hsm-pin']}/pin"
    assert init_mounts["hsm-pin"] == mounts["hsm-pin"]
    assert spec["securityContext"]["runAsUser"] == 10001  # the copy belongs to the server's user
    assert init["securityContext"]["readOnlyRootFilesystem"] is True


def test_the_jwt_client_example_matches_the_schema_and_the_identity_page() -> None:
    """deploy/k8s-examples/jwt-client.yaml: valid manifests whose projected token has the audience and path
    docs/identity.md's role and login use."""
    path = DEPLOY / "k8s-examples" / "jwt-client.yaml"
    docs = {doc["kind"]: doc for doc in documents(path)}
    for doc in docs.values():
        kubernetes_validate.validate(doc, kubernetes_validate.latest_version(), strict=True)
    pod = docs["Deployment"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == docs["ServiceAccount"]["metadata"]["name"] == "api"
    (source,) = pod["volumes"][0]["projected"]["sources"]
    assert source["serviceAccountToken"]["audience"] == "keystream"
    container = pod["containers"][0]
    mount = container["volumeMounts"][0]["mountPath"]
    env = {entry["name"]: entry["value"] for entry in container["env"]}
    assert env["KEYSTREAM_JWT_FILE"] == f"{mount}/{source['serviceAccountToken']['path']}"
    assert env["KEYSTREAM_ROLE"] == "billing-api" and "KEYSTREAM_TOKEN" not in env
    assert container["command"][0] == "keystream"
    identity = (DEPLOY.parent / "docs" / "identity.md").read_text()
    assert '"bound_audiences": ["keystream"]' in identity and "billing-api" in identity

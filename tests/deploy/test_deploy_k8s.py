"""deploy/k8s: schema validation (kubernetes-validate ships the Kubernetes JSON schemas, so it runs offline)
and the fields docs/operations.md (Kubernetes) relies on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy_paths import K8S_DIR

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

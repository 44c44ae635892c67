"""The Grafana dashboard's structure: unique ids, datasource references, the templated backend variable, no
overlapping panels, and provisioning that points at it. (Its PromQL is checked against a live Prometheus in
test_deploy_prometheus_live.py.)"""

from __future__ import annotations

import json
from typing import Any

import yaml
from deploy_paths import DASHBOARD, GRAFANA_DIR

DATASOURCE_REF = {"type": "prometheus", "uid": "${datasource}"}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def variables() -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard()["templating"]["list"]}


def test_panel_ids_are_unique() -> None:
    ids = [p["id"] for p in dashboard()["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard()["uid"] == "keystream-overview"


def test_every_panel_uses_the_datasource_variable() -> None:
    for panel in panels():
        assert panel["datasource"] == DATASOURCE_REF, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE_REF, panel["title"]
            assert target["expr"].strip(), panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]


def test_datasource_variable_defaults_to_the_provisioned_prometheus() -> None:
    provisioned = yaml.safe_load((GRAFANA_DIR / "provisioning/datasources/prometheus.yml").read_text())
    (source,) = provisioned["datasources"]
    assert source["type"] == "prometheus"
    variable = variables()["datasource"]
    assert variable["type"] == "datasource" and variable["query"] == "prometheus"
    assert variable["current"]["value"] == source["uid"]


def test_backend_variable_is_templated_from_the_crypto_metric() -> None:
    variable = variables()["backend"]
    assert variable["type"] == "query"
    assert variable["datasource"] == DATASOURCE_REF
    assert variable["query"]["query"] == "label_values(keystream_crypto_seconds_count, backend)"
    assert variable["multi"] is True and variable["includeAll"] is True
    crypto = [p for p in panels() if any("keystream_crypto" in t["expr"] for t in p["targets"])]
    assert len(crypto) >= 4
    for panel in crypto:
        for target in panel["targets"]:
            assert 'backend=~"$backend"' in target["expr"], panel["title"]


def test_required_views_are_present() -> None:
    exprs = " ".join(t["expr"] for p in panels() for t in p["targets"])
    for needed in (
        "p50",
        "p95",
        "p99",
        "keystream_crypto_bytes",
        "route_method_status:keystream_http_requests",
        "keystream_inflight_requests",
        "keystream:key_cache_hit:ratio_rate5m",
        "keystream_hwsim_ring_occupancy",
        "keystream_hwsim_core_utilisation_ratio",
        "keystream_hwsim_stage_mean_seconds",
        "locust_users",
    ):
        assert needed in exprs, needed


def test_panels_do_not_overlap() -> None:
    taken: set[tuple[int, int]] = set()
    for panel in dashboard()["panels"]:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        cells = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not cells & taken, panel["title"]
        taken |= cells

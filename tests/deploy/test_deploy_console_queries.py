"""The web console's dashboard and the Grafana dashboard show the same series: each console chart
(ui/src/charts.json) names a Grafana panel, and its queries are that panel's targets, expression (modulo
whitespace) and legend, in the same order. The console reads ``$backend`` as every backend and
``$__rate_interval`` as 1m; nothing else differs. A change on one side alone fails here."""

from __future__ import annotations

import copy
import json
import re
from typing import Any

from deploy_paths import DASHBOARD, REPO

CHARTS = REPO / "ui" / "src" / "charts.json"


def console() -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(CHARTS.read_text())
    return spec


def grafana() -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return dashboard


def without_whitespace(expr: str) -> str:
    return re.sub(r"\s+", "", expr)


def mismatches(spec: dict[str, Any], dashboard: dict[str, Any]) -> list[str]:
    """Every console chart (and the replica count) whose queries differ from its Grafana panel's targets."""
    panels: dict[str, list[dict[str, Any]]] = {}
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["title"] not in panels, f"two Grafana panels are titled {panel['title']!r}"
            panels[panel["title"]] = panel["targets"]
    found = []
    for chart in [spec["replicas"], *spec["charts"]]:
        targets = panels.get(chart["grafana"])
        if targets is None:
            found.append(f"{chart['grafana']!r}: no such Grafana panel")
            continue
        ours = [(without_whitespace(q["expr"]), q["legend"]) for q in chart["queries"]]
        theirs = [(without_whitespace(t["expr"]), t.get("legendFormat", "")) for t in targets]
        if ours != theirs:
            found.append(f"{chart['grafana']!r}: console {ours} != Grafana {theirs}")
    return found


def test_every_console_chart_draws_its_grafana_panels_queries() -> None:
    assert mismatches(console(), grafana()) == []
    assert len(console()["charts"]) >= 10


def test_the_comparison_fails_when_either_side_changes() -> None:
    spec, dashboard = console(), grafana()
    changed_console = copy.deepcopy(spec)
    changed_console["charts"][0]["queries"][0]["expr"] += " * 2"
    assert len(mismatches(changed_console, dashboard)) == 1
    changed_grafana = copy.deepcopy(dashboard)
    panel = next(p for p in changed_grafana["panels"] if p["title"] == spec["charts"][1]["grafana"])
    panel["targets"][0]["legendFormat"] = "renamed"
    assert len(mismatches(spec, changed_grafana)) == 1
    panel["targets"].pop()
    assert len(mismatches(spec, changed_grafana)) == 1
    # Whitespace alone is no change.
    spaced = copy.deepcopy(spec)
    spaced["charts"][2]["queries"][0]["expr"] = spaced["charts"][2]["queries"][0]["expr"].replace(" ", "\n  ")
    assert mismatches(spaced, dashboard) == []


def test_every_query_says_how_it_is_read_from_metrics() -> None:
    """Without Prometheus the console computes each series from /metrics: every query says how."""
    kinds = {"rate", "quantile", "value", "rate_share", "age", "total_share"}
    for chart in console()["charts"]:
        assert chart["across"] in ("sum", "instance"), chart["id"]
        for query in chart["queries"]:
            assert query["local"]["kind"] in kinds, chart["id"]
            # A per-replica chart names its replica in every legend, so its series stay apart.
            if chart["across"] == "instance":
                assert "{{instance}}" in query["legend"], chart["id"]

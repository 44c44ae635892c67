"""bench/bench_scaleout.py: its CPU arithmetic and its table (the benchmark itself is a script)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.bench_scaleout import cpu_percent, markdown

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "scaleout.json"


def test_other_is_the_machine_minus_every_component() -> None:
    before = {"replicas": 0.0, "haproxy": 0.0, "postgres": 0.0, "wrk": 0.0, "bench": 0.0, "machine": 0.0}
    after = {"replicas": 1.0, "haproxy": 0.2, "postgres": 0.0, "wrk": 0.1, "bench": 0.1, "machine": 2.0}
    used = cpu_percent(before, after, wall=1.0)
    assert used["replicas"] == 100.0 and used["haproxy"] == 20.0
    assert used["other"] == pytest.approx(60.0)
    # Sampling skew can make ours exceed the machine's: never a negative share.
    assert cpu_percent(before, {**after, "machine": 1.0}, wall=1.0)["other"] == 0.0


def test_the_committed_results_render_as_documented() -> None:
    result = json.loads(RESULTS.read_text())
    table = markdown(result)
    assert table == RESULTS.with_suffix(".md").read_text().strip()
    setups = [row["setup"] for row in result["rows"]]
    assert setups == [
        "1 replica, direct",
        "1 replica + HAProxy",
        "2 replicas + HAProxy",
        "3 replicas + HAProxy",
    ]
    assert result["rows"][0]["ratio_to_direct"] == 1.0
    # The figures the docs quote come from this file.
    docs = (RESULTS.parents[2] / "docs" / "benchmarks.md").read_text()
    assert table in docs

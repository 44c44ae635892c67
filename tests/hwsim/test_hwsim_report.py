"""The report runs end to end on a few sizes and its numbers follow from their definitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hwsim import report
from hwsim.analysis import amdahl


def test_report_writes_json_plot_and_table(tmp_path: Path) -> None:
    out_json, out_png = tmp_path / "hwsim.json", tmp_path / "hwsim.png"
    result = report.run(quick=True, out_json=out_json, out_png=out_png, sizes=[16, 256, 65536, 131072])
    assert json.loads(out_json.read_text())["sizes"] == [16, 256, 65536, 131072]
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(result["presets"]) == {"proposal", "pcie-offload", "opentitan", "opentitan-masked"}
    assert "python" in result["software"]
    for data in result["software"].values():
        assert all(row["latency_ns"] > 0 for row in data["rows"])
    for comparison in result["comparisons"]:
        for row in comparison["amdahl"]:
            assert row["speedup_as_written"] == pytest.approx(amdahl(row["p"], row["s"]))
            assert row["speedup_with_overhead"] < row["speedup_as_written"]
    by_pair = {(c["preset"], c["backend"]): c for c in result["comparisons"]}
    # a 133 MB/s iterative core never beats this machine's software AES-NI
    if "aesni" in result["software"]:
        assert by_pair[("opentitan", "aesni")]["crossover_simulated_bytes"] is None
    table = report.format_table(result)
    assert "| proposal @ 4 KiB | python |" in table
    assert "S = 1.92x" in table

"""The report runs end to end on a few sizes and its numbers follow from their definitions."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hwsim import report
from hwsim.analysis import amdahl


@pytest.mark.serial  # fits time against size: another process's load made 128 KiB faster than 64 KiB
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


def _synthetic_result() -> dict[str, object]:
    sizes = [16, 256, 4096, 65536, 1 << 20]

    def preset(overhead_ns: float, bandwidth: float) -> dict[str, object]:
        rows = [
            {
                "size": size,
                "latency_ns": overhead_ns + size / bandwidth,
                "throughput_bytes_per_s": size / (overhead_ns + size / bandwidth) * 1e9,
                "batch_throughput_bytes_per_s": size / (overhead_ns / 8 + size / bandwidth) * 1e9,
            }
            for size in sizes
        ]
        return {"rows": rows}

    presets = {
        "proposal": preset(3000, 5.0),
        "pcie-offload": preset(15000, 4.0),
        "opentitan": preset(300, 0.13),
    }
    software = {"aesni": preset(150, 20.0), "python": preset(10000, 0.013)}
    return {"sizes": sizes, "presets": presets, "software": software}


def test_plot_has_a_legend_per_panel_that_lists_every_line_and_covers_none() -> None:
    import matplotlib.pyplot as plt

    figure = report.plot_figure(_synthetic_result())
    try:
        figure.canvas.draw()
        renderer = figure.canvas.get_renderer()
        assert len(figure.axes) == 2
        for axis in figure.axes:
            legend = axis.get_legend()
            assert legend is not None, f"panel {axis.get_title()!r} has no legend"
            labels = [line.get_label() for line in axis.get_lines()]
            assert [text.get_text() for text in legend.get_texts()] == labels
            # Outside the plotting area, so no line can be hidden behind it.
            legend_box = legend.get_window_extent(renderer)
            axes_box = axis.get_window_extent(renderer)
            assert legend_box.y1 <= axes_box.y0, (axis.get_title(), legend_box, axes_box)
            ticks = [t.get_text() for t in (*axis.get_xticklabels(), *axis.get_yticklabels()) if t.get_text()]
            assert ticks and not any("^" in t or "$" in t for t in ticks), ticks
        left, right = figure.axes
        assert {"16 B", "4 KiB", "1 MiB"} <= {t.get_text() for t in left.get_xticklabels()}
        assert any(t.get_text().endswith(("µs", "ms")) for t in left.get_yticklabels())
        assert any(t.get_text().endswith("GB/s") for t in right.get_yticklabels())
    finally:
        plt.close(figure)

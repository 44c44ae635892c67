"""scripts/load_figures.py (the docs' Prometheus and Locust figures): load steps found from the user count,
a p99 plot in milliseconds with every step marked, and the Locust report reduced to its charts."""

from __future__ import annotations

import re
from types import ModuleType

import matplotlib.pyplot as plt
import pytest


@pytest.fixture(scope="module")
def figures() -> ModuleType:
    from scripts import load_figures

    return load_figures


def test_load_steps_follow_the_user_count(figures: ModuleType) -> None:
    users = [
        (0.0, 0.0),
        (1.0, 6.0),
        (2.0, 6.0),
        (3.0, 9.0),
        (4.0, 12.0),
        (5.0, 12.0),
        (6.0, 12.0),
        (7.0, 0.0),
    ]
    # A ramp value (9) is a step of its own only for the second it lasts; zero users is no step.
    assert figures.load_steps(users) == [(1.0, 2.0, 6), (3.0, 3.0, 9), (4.0, 6.0, 12)]
    assert figures.load_steps([]) == []


def test_p99_plot_reads_in_milliseconds_and_marks_every_step(figures: ModuleType) -> None:
    start = 1000.0
    steps = [(1000.0, 1060.0, 6), (1061.0, 1120.0, 12), (1121.0, 1180.0, 18)]
    series = {
        "aesni": [(1000.0 + t, 0.002 + t * 1e-5) for t in range(180)],
        "python": [(1000.0 + t, 0.3 + t * 1e-3) for t in range(180)],
        "hwsim": [(1000.0, float("nan"))] + [(1000.0 + t, 0.1) for t in range(1, 180)],
    }
    figure = figures.p99_figure(series, steps, start)
    try:
        figure.canvas.draw()
        (axis,) = figure.axes
        texts = [text.get_text() for text in axis.texts]
        assert texts == ["6 users", "12 users", "18 users"]
        assert len(axis.patches) == 3  # one shaded band per step
        assert "ms" in axis.get_ylabel()
        low, high = axis.get_ylim()
        labels = [
            tick.get_text()
            for tick, value in zip(axis.get_yticklabels(), axis.get_yticks(), strict=True)
            if low <= value <= high
        ]
        assert labels and all(re.fullmatch(r"\d+(\.\d+)?", label) for label in labels), labels
        legend = axis.get_legend()
        assert legend is not None
        assert [text.get_text() for text in legend.get_texts()] == ["aesni", "hwsim", "python"]
    finally:
        plt.close(figure)


def test_report_page_keeps_only_the_charts(figures: ModuleType) -> None:
    """The script goes before the report's last </body>, not into its JavaScript (which contains one)."""
    report = '<html><body><script>var s = "</body>";</script><div id="root"></div></body></html>'
    page = figures.charts_page(report)
    assert page.startswith('<html><body><script>var s = "</body>";</script><div id="root"></div>')
    assert page.endswith(figures.REPORT_ONLY_CHARTS_SCRIPT + "</body></html>")
    assert '!== "Charts"' in figures.REPORT_ONLY_CHARTS_SCRIPT
    with pytest.raises(RuntimeError, match="no </body>"):
        figures.charts_page("<html></html>")

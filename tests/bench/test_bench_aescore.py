"""Smoke test of the aescore benchmark script: its report has the documented schema and sane ratios."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import bench_aescore


def test_quick_run_on_small_sizes_has_the_documented_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    timer_init = bench_aescore.Timer.__init__

    def tiny_timer(self: bench_aescore.Timer, quick: bool) -> None:
        timer_init(self, quick)
        self.target_s, self.repeat, self.slow_repeat = 0.0005, 3, 2

    monkeypatch.setattr(bench_aescore.Timer, "__init__", tiny_timer)
    report = bench_aescore.run(quick=True, progress=lambda _: None, sizes=(64, 1024))
    assert set(report) >= {"cpu", "date", "python", "quick", "aesni", "notes", "results"}
    assert report["quick"] is True
    rows = report["results"]
    libraries = {row["library"] for row in rows}
    assert {"python", "pycryptodome", "cryptography", "pyaes"} <= libraries
    for row in rows:
        assert set(row) >= {
            "case",
            "library",
            "size",
            "mode",
            "median_s",
            "bytes_per_s",
            "ratio_to_cryptography",
        }
        assert row["median_s"] > 0
        assert row["bytes_per_s"] == pytest.approx(
            row["size"] * (2 if row["case"] == "crypto_pyaes" else 1) / row["median_s"]
        )
        if row["library"] == "cryptography":
            assert row["ratio_to_cryptography"] == pytest.approx(1.0)
    assert {row["case"] for row in rows} >= {"crypto_pyaes", "throughput", "gcm"}
    assert len(report["gcm_targets"]) == 9 and "AES-GCM targets" in bench_aescore.markdown(report)
    assert not any(row["library"] == "pyaes" and row["mode"] == "into" for row in rows)  # pyaes has no into
    table = bench_aescore.markdown(report)
    assert "| crypto_pyaes | 23000 B | pyaes | native |" in table
    path = tmp_path / "out.json"
    monkeypatch.setattr(bench_aescore, "run", lambda quick, progress: report)
    assert bench_aescore.main(["--quick", "--json", str(path)]) == 0
    assert json.loads(path.read_text())["results"] == rows


def test_human_units() -> None:
    assert bench_aescore._human_size(64) == "64 B"
    assert bench_aescore._human_size(16 * 1024) == "16 KiB"
    assert bench_aescore._human_size(64 << 20) == "64 MiB"
    assert bench_aescore._human_time(2.5e-6) == "2.5 µs"
    assert bench_aescore._human_time(0.0123) == "12.3 ms"

"""bench/report.py on small synthetic JSON: PNG plots and Markdown, and clear notes for what is missing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench import report as bench_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
SIZES = [64, 1024, 1 << 20]


def _aescore() -> dict[str, object]:
    rows = []
    for library, speed in (("aesni", 8e9), ("python", 1e7), ("cryptography", 4e9)):
        for mode in ("into", "bytes"):
            for size in SIZES:
                rows.append(
                    {
                        "case": "throughput",
                        "library": library,
                        "size": size,
                        "mode": mode,
                        "median_s": size / speed,
                        "bytes_per_s": speed * (0.5 if size == 64 else 1.0),
                        "ratio_to_cryptography": speed / 4e9,
                        "repeat": 3,
                        "number": 10,
                    }
                )
    rows.append({"case": "crypto_pyaes", "library": "aesni", "size": 23000, "mode": "x", "bytes_per_s": 1.0})
    return {
        "cpu": "Test CPU 9000",
        "date": "2026-01-01T00:00:00+00:00",
        "quick": True,
        "aesni": {"isa": "vaes512"},
        "results": rows,
    }


def _service() -> dict[str, object]:
    return {
        "cpu": "Test CPU 9000",
        "date": "2026-01-01T00:00:00+00:00",
        "results": [
            {"case": "stream raw encrypt", "value": 1.25, "unit": "GB/s", "ratio": 0.91},
            {"case": "GET /healthz", "value": 9000.0, "unit": "req/s", "ratio": None},
        ],
        "latency_samples": {
            "aesni": [0.0005 + i * 1e-5 for i in range(100)],
            "python": [0.004 + i * 1e-4 for i in range(20)],
        },
    }


def _hwsim() -> dict[str, object]:
    """The shape ``python -m hwsim.report`` writes (see hwsim/report.py ``run``)."""

    def rows(rate: float, overhead_ns: float) -> list[dict[str, float]]:
        return [
            {
                "size": size,
                "latency_ns": overhead_ns + size / rate * 1e9,
                "throughput_bytes_per_s": size / (overhead_ns + size / rate * 1e9) * 1e9,
                "batch_throughput_bytes_per_s": rate,
            }
            for size in SIZES
        ]

    return {
        "generated_at": "2026-01-01T00:00:00Z",
        "machine": {"cpu": "Test CPU 9000"},
        "quick": False,
        "presets": {"opentitan": {"preset": "opentitan", "rows": rows(1e8, 2000)}},
        "software": {"aesni": {"backend": "aesni", "rows": [{k: v for k, v in r.items() if "batch" not in k}
                                                             for r in rows(5e9, 100)]}},
        "comparisons": [
            {
                "preset": "opentitan",
                "backend": "aesni",
                "crossover_simulated_bytes": None,
                "offload_faster": "never",
                "amdahl": [{"size": 1 << 20, "speedup_as_written": 0.5, "speedup_with_overhead": 0.25,
                            "speedup_simulated": 0.2}],
            }
        ],
        "design_documents_example": {"p": 0.6, "s": 5.0, "speedup": 1.923},
    }  # fmt: skip


def _write(directory: Path, name: str, data: object) -> None:
    (directory / name).write_text(json.dumps(data))


def _assert_png(path: Path) -> None:
    assert path.is_file(), path
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000


def test_full_report_from_synthetic_json(tmp_path: Path) -> None:
    _write(tmp_path, "aescore.json", _aescore())
    _write(tmp_path, "service.json", _service())
    _write(tmp_path, "hwsim.json", _hwsim())

    path = bench_report.build_report(bench_report.Report(tmp_path))

    for name in ("aescore_throughput.png", "service_latency_cdf.png", "hwsim_model_vs_measured.png"):
        _assert_png(tmp_path / name)
    text = path.read_text()
    assert path == tmp_path / "report.md"
    assert "Missing or failed" not in text
    for image in ("aescore_throughput.png", "service_latency_cdf.png", "hwsim_model_vs_measured.png"):
        assert f"]({image})" in text
    assert "Test CPU 9000" in text and "vaes512" in text and "smoke run" in text
    assert "| aesni | into | 1 MiB | 8.000 | 2.00x |" in text
    # Latency table: nearest-rank percentiles of the samples, in ms.
    assert "| aesni | 100 | 0.990 | 1.390 | 1.480 |" in text
    assert "| stream raw encrypt | 1.25 | GB/s | 0.91 |" in text
    assert "| opentitan | aesni | never | none | 1 MiB | 0.50x | 0.25x | 0.20x |" in text
    assert "gives 1.92x as written" in text


def test_hwsim_series_from_a_real_hwsim_report_run(tmp_path: Path) -> None:
    """Guards the schema: a small real ``hwsim.report`` run feeds the plot (modeled, batched and measured)."""
    hwsim_report = pytest.importorskip("hwsim.report")
    # The two large sizes are 4x apart: the bandwidth fit needs time to grow with size, and with only 2x
    # (64 KiB, 128 KiB) a loaded machine once timed the smaller one slower (the python backend, 3 samples).
    data = hwsim_report.run(quick=True, sizes=[16, 256, 65536, 262144])
    series = bench_report.hwsim_series(data)
    kinds = {(entry["name"], entry["kind"]) for entry in series}
    assert ("proposal", "modeled") in kinds and ("proposal batched", "batched") in kinds
    assert ("python", "measured") in kinds
    _write(tmp_path, "hwsim.json", data)
    text = bench_report.build_report(bench_report.Report(tmp_path)).read_text()
    _assert_png(tmp_path / "hwsim_model_vs_measured.png")
    assert "| proposal | python |" in text


def test_missing_and_broken_files_become_notes(tmp_path: Path) -> None:
    (tmp_path / "service.json").write_text("{not json")
    _write(tmp_path, "hwsim.json", {"presets": {}})

    text = bench_report.build_report(bench_report.Report(tmp_path)).read_text()

    assert "`aescore.json` not found" in text and "python -m bench.bench_aescore" in text
    assert "`service.json` could not be read" in text
    assert "`hwsim.json` has no `presets` or `software` rows" in text
    assert not list(tmp_path.glob("*.png"))


def test_unexpected_shape_is_a_note_not_a_crash(tmp_path: Path) -> None:
    _write(tmp_path, "aescore.json", {"results": [{"case": "throughput", "library": "x"}]})
    text = bench_report.build_report(bench_report.Report(tmp_path)).read_text()
    assert "`aescore.json` has an unexpected shape" in text


def test_missing_benchmark_script_is_skipped_with_a_note(tmp_path: Path) -> None:
    report = bench_report.Report(tmp_path)
    steps = (bench_report.Step("Nothing here", "bench.no_such_benchmark", "none.json", "--json"),)
    assert bench_report.run_steps(steps, tmp_path, quick=True, report=report)
    assert report.notes == ["Nothing here: `bench.no_such_benchmark` is not in this checkout; skipped."]


def test_failing_benchmark_is_reported(tmp_path: Path) -> None:
    report = bench_report.Report(tmp_path)
    # bench.report itself exists and rejects the unknown flag: a real failing subprocess.
    steps = (bench_report.Step("Broken", "bench.report", "x.json", "--no-such-flag"),)
    assert not bench_report.run_steps(steps, tmp_path, quick=False, report=report)
    assert "exited with 2" in report.notes[0]


def test_main_report_only(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, "service.json", _service())
    assert bench_report.main(["--report-only", "--results", str(tmp_path)]) == 0
    assert (tmp_path / "report.md").is_file()
    _assert_png(tmp_path / "service_latency_cdf.png")
    assert "report:" in capsys.readouterr().out


def test_latency_cdf_axis_reads_in_plain_milliseconds() -> None:
    """Tick labels like 0.5, 1, 2 (ms), not 10^0 notation, across the range the samples span."""
    samples = {
        "aesni": sorted(0.0004 + i * 1e-5 for i in range(200)),
        "python": sorted(0.002 + i * 1e-4 for i in range(200)),
    }
    figure = bench_report.latency_cdf_figure(samples)
    try:
        figure.canvas.draw()
        (axis,) = figure.axes
        low, high = axis.get_xlim()
        labels = [
            tick.get_text()
            for tick, value in zip(axis.get_xticklabels(), axis.get_xticks(), strict=True)
            if low <= value <= high
        ]
    finally:
        bench_report.plt.close(figure)
    assert labels, "no labelled x ticks"
    assert all(re.fullmatch(r"\d+(\.\d+)?", label) for label in labels), labels
    assert {"0.5", "1", "2", "5", "10"} <= set(labels), labels
    assert "ms" in axis.get_xlabel()

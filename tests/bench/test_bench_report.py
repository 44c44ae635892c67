"""bench/report.py on small synthetic JSON: PNG plots and Markdown, and clear notes for what is missing."""

from __future__ import annotations

import json
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


def _hwsim_series() -> dict[str, object]:
    modeled = [{"size": s, "latency_s": 1e-6 + s / 2e8} for s in SIZES]
    measured = [{"size": s, "bytes_per_s": 5e9} for s in SIZES]
    return {
        "series": [
            {"name": "opentitan", "kind": "modeled", "points": modeled},
            {"name": "aesni", "kind": "measured", "points": measured},
        ],
        "notes": ["Amdahl as written: 1.92x"],
    }


def _write(directory: Path, name: str, data: object) -> None:
    (directory / name).write_text(json.dumps(data))


def _assert_png(path: Path) -> None:
    assert path.is_file(), path
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000


def test_full_report_from_synthetic_json(tmp_path: Path) -> None:
    _write(tmp_path, "aescore.json", _aescore())
    _write(tmp_path, "service.json", _service())
    _write(tmp_path, "hwsim.json", _hwsim_series())

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
    assert "- Amdahl as written: 1.92x" in text


def test_hwsim_flat_rows_are_accepted(tmp_path: Path) -> None:
    rows = [{"preset": "proposal", "size": s, "latency_ns": 500 + s} for s in SIZES]
    rows += [{"backend": "python", "size": s, "latency_s": s / 1e7} for s in SIZES]
    series = bench_report.hwsim_series({"results": rows})
    assert {(s["name"], s["kind"]) for s in series} == {("proposal", "modeled"), ("python", "measured")}
    _write(tmp_path, "hwsim.json", {"results": rows})
    text = bench_report.build_report(bench_report.Report(tmp_path)).read_text()
    _assert_png(tmp_path / "hwsim_model_vs_measured.png")
    assert "hwsim_model_vs_measured.png" in text


def test_missing_and_broken_files_become_notes(tmp_path: Path) -> None:
    (tmp_path / "service.json").write_text("{not json")
    _write(tmp_path, "hwsim.json", {"series": []})

    text = bench_report.build_report(bench_report.Report(tmp_path)).read_text()

    assert "`aescore.json` not found" in text and "python -m bench.bench_aescore" in text
    assert "`service.json` could not be read" in text
    assert "`hwsim.json` has no series" in text
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

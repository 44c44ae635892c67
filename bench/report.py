"""Run every benchmark in ``bench/`` and write one Markdown report with PNG plots (``make bench``).

    python -m bench.report [--quick] [--report-only] [--results DIR]
    make bench [BENCH_ARGS="--quick --results DIR"]    make report  (= --report-only)

Steps (each a subprocess, so one failing benchmark does not stop the others):

1. ``python -m bench.bench_aescore --json DIR/aescore.json``: AES-CTR throughput per size for aescore's
   backends and for pycryptodome, cryptography and pyaes.
2. ``python -m bench.bench_service --output DIR/service.json``: the HTTP service against its baselines, with
   1 KiB sealed-encrypt latency samples per backend.
3. ``python -m hwsim.report --json DIR/hwsim.json --png DIR/hwsim.png``: the simulated accelerator's
   modeled latency and throughput per preset beside the measured software backends (its own plot stays in
   DIR so a quick run never replaces the README's image).

Then it reads the JSON files (schemas are documented in those scripts), draws

* ``aescore_throughput.png``: throughput vs message size, one line per backend and library;
* ``aescore_gcm.png``: AES-GCM (aescore, cryptography) vs AES-CTR with and without HMAC, with this core's
  AES-128 cap (``bench/report_gcm.py``);
* ``service_latency_cdf.png``: the latency CDF of each backend;
* ``hwsim_model_vs_measured.png``: modeled (presets) vs measured (backends) latency and throughput vs size;

and writes ``DIR/report.md`` linking them. A missing or unreadable JSON file becomes a clear note in the
report (which command produces it) instead of an error; the exit code is 1 when a benchmark run failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use("Agg"): the backend must be chosen first
import matplotlib.ticker
from matplotlib.figure import Figure

from .report_gcm import gcm_section

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS = ROOT / "bench" / "results"
LIBRARY_ORDER = ("aesni", "hwsim", "python", "cryptography", "pycryptodome", "pyaes")


@dataclass(frozen=True)
class Step:
    """One benchmark: the module to run, its JSON file and how to pass that path."""

    title: str
    module: str
    json_name: str
    json_flag: str
    #: (flag, file name) of another output the script writes, kept inside the results directory.
    extra_output: tuple[str, str] | None = None

    def command(self, results: Path, quick: bool) -> list[str]:
        """The command line that runs this benchmark and writes its JSON into ``results``."""
        command = [sys.executable, "-m", self.module, self.json_flag, str(results / self.json_name)]
        if self.extra_output is not None:
            command += [self.extra_output[0], str(results / self.extra_output[1])]
        return [*command, "--quick"] if quick else command


STEPS = (
    Step("AES-CTR libraries and backends", "bench.bench_aescore", "aescore.json", "--json"),
    Step("HTTP service", "bench.bench_service", "service.json", "--output"),
    Step("Simulated accelerator (hwsim)", "hwsim.report", "hwsim.json", "--json", ("--png", "hwsim.png")),
)


@dataclass
class Report:
    """What goes into report.md: sections of Markdown lines, plus notes on what was missing or failed."""

    results: Path
    notes: list[str] = field(default_factory=list)
    sections: list[list[str]] = field(default_factory=list)


def module_exists(module: str) -> bool:
    """True when ``module`` is a file under the source tree (``bench.x`` -> ``bench/x.py``)."""
    path = ROOT.joinpath(*module.split("."))
    return path.with_suffix(".py").is_file() or (path / "__main__.py").is_file()


def run_steps(steps: tuple[Step, ...], results: Path, quick: bool, report: Report) -> bool:
    """Run each benchmark; record missing scripts and failures in ``report.notes``. True when all ran."""
    ok = True
    for step in steps:
        if not module_exists(step.module):
            report.notes.append(f"{step.title}: `{step.module}` is not in this checkout; skipped.")
            continue
        command = step.command(results, quick)
        print(f"\n== {step.title}: {' '.join(command[1:])}", flush=True)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        }
        code = subprocess.call(command, cwd=ROOT, env=env)
        if code != 0:
            ok = False
            report.notes.append(
                f"{step.title}: `python -m {step.module}` exited with {code}; older results shown if present."
            )
    return ok


def load_json(path: Path, producer: str, report: Report) -> dict[str, Any] | None:
    """The decoded file, or None with a note saying which command produces it."""
    if not path.is_file():
        report.notes.append(
            f"`{path.name}` not found in {path.parent}: run `python -m {producer}` to create it."
        )
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        report.notes.append(f"`{path.name}` could not be read ({exc}); run `python -m {producer}` again.")
        return None
    if not isinstance(data, dict):
        report.notes.append(f"`{path.name}` is not a JSON object; run `python -m {producer}` again.")
        return None
    return data


def human_size(size: float) -> str:
    """``1048576`` -> ``1 MiB``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:g} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def _size_axis(axis: Any) -> None:
    axis.set_xscale("log", base=2)
    axis.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _pos: human_size(value)))
    axis.grid(True, which="major", alpha=0.3)


def _run_summary(data: dict[str, Any]) -> str:
    quick = " with --quick (a smoke run, not for numbers)" if data.get("quick") else ""
    return f"CPU {data.get('cpu', '?')}, run {data.get('date', '?')}{quick}"


def _positive(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return sorted((x, y) for x, y in points if x > 0 and y > 0 and math.isfinite(y))


# -- aescore -------------------------------------------------------------------------------------------------
def aescore_section(data: dict[str, Any], report: Report) -> None:
    """Throughput-vs-size plot (one panel per mode) and the 1 MiB table from ``aescore.json``."""
    rows = [r for r in data.get("results", []) if r.get("case") == "throughput"]
    if not rows:
        report.notes.append("`aescore.json` has no `throughput` results.")
        return
    modes = sorted({str(r["mode"]) for r in rows})
    figure, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.8), squeeze=False)
    for axis, mode in zip(axes[0], modes, strict=True):
        series: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for row in rows:
            if row["mode"] == mode:
                series[str(row["library"])].append((float(row["size"]), float(row["bytes_per_s"]) / 1e9))
        for library in sorted(series, key=lambda name: (*LIBRARY_ORDER, name).index(name)):
            points = _positive(series[library])
            axis.plot(*zip(*points, strict=True), marker="o", label=library)
        _size_axis(axis)
        axis.set_yscale("log")
        axis.set_xlabel("message size")
        axis.set_ylabel("throughput (GB/s)")
        axis.set_title(f"AES-CTR throughput, mode `{mode}`")
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(report.results / "aescore_throughput.png", dpi=110)
    plt.close(figure)

    info = data.get("aesni")
    summary = _run_summary(data)
    if isinstance(info, dict):
        summary += f"; aesni ISA path `{info.get('isa', '?')}`, {info.get('threads', '?')} threads"
    lines = ["## AES-CTR: backends and libraries", "", summary + ".", ""]
    lines += ["![AES-CTR throughput vs message size](aescore_throughput.png)", ""]
    largest = max(int(r["size"]) for r in rows)
    lines += [
        f"Throughput at {human_size(largest)} (and 1 MiB), median of repetitions:",
        "",
        "| library | mode | size | GB/s | vs cryptography |",
        "|---|---|---:|---:|---:|",
    ]
    for row in sorted(rows, key=lambda r: (str(r["mode"]), int(r["size"]), -float(r["bytes_per_s"]))):
        if int(row["size"]) in (largest, 1 << 20):
            ratio = row.get("ratio_to_cryptography")
            shown = f"{ratio:.2f}x" if isinstance(ratio, int | float) else ""
            lines.append(
                f"| {row['library']} | {row['mode']} | {human_size(int(row['size']))} | "
                f"{float(row['bytes_per_s']) / 1e9:.3f} | {shown} |"
            )
    report.sections.append(lines)
    gcm_lines = gcm_section(data, report.results)
    if gcm_lines:
        report.sections.append(gcm_lines)


# -- service -------------------------------------------------------------------------------------------------
def latency_cdf_figure(samples: dict[str, list[float]]) -> Figure:
    """The latency CDF of each backend (samples in seconds, sorted) on a log axis labelled in plain
    milliseconds (0.5, 1, 2, 5 -- not 10^0), with minor ticks between the labelled ones."""
    figure, axis = plt.subplots(figsize=(7, 4.5))
    for name in sorted(samples, key=lambda n: (*LIBRARY_ORDER, n).index(n)):
        values = [v * 1e3 for v in samples[name]]
        fractions = [(i + 1) / len(values) for i in range(len(values))]
        axis.step(values, fractions, where="post", label=f"{name} (n={len(values)})")
    axis.set_xscale("log")
    axis.xaxis.set_major_locator(matplotlib.ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axis.set_xlabel("latency of a 1 KiB sealed encrypt (ms, log scale)")
    axis.set_ylabel("fraction of requests")
    axis.set_ylim(0, 1.01)
    axis.grid(True, which="major", alpha=0.3)
    axis.grid(True, which="minor", alpha=0.1)
    axis.set_title("Service latency CDF per backend")
    axis.legend(loc="lower right")
    figure.tight_layout()
    return figure


def service_section(data: dict[str, Any], report: Report) -> None:
    """Latency CDF per backend and the results table from ``service.json``."""
    lines = ["## HTTP service", "", _run_summary(data) + "."]
    samples = {
        name: sorted(float(s) for s in values) for name, values in data.get("latency_samples", {}).items()
    }
    samples = {name: values for name, values in samples.items() if values}
    if samples:
        figure = latency_cdf_figure(samples)
        figure.savefig(report.results / "service_latency_cdf.png", dpi=110)
        plt.close(figure)
        lines += ["", "![Service latency CDF per backend](service_latency_cdf.png)", ""]
        lines += ["| backend | requests | p50 ms | p90 ms | p99 ms |", "|---|---:|---:|---:|---:|"]
        for name, values in samples.items():
            p50, p90, p99 = (percentile(values, q) * 1e3 for q in (0.5, 0.9, 0.99))
            lines.append(f"| {name} | {len(values)} | {p50:.3f} | {p90:.3f} | {p99:.3f} |")
    else:
        report.notes.append("`service.json` has no latency samples; the CDF plot is missing.")
    results = data.get("results", [])
    if results:
        lines += ["", "| case | value | unit | ratio |", "|---|---:|---|---:|"]
        for row in results:
            ratio = row.get("ratio")
            lines.append(
                f"| {row['case']} | {row['value']} | {row['unit']} | {'' if ratio is None else ratio} |"
            )
    report.sections.append(lines)


def percentile(sorted_values: list[float], fraction: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    index = max(0, math.ceil(fraction * len(sorted_values)) - 1)
    return sorted_values[index]


# -- hwsim ---------------------------------------------------------------------------------------------------
def hwsim_series(data: dict[str, Any]) -> list[dict[str, Any]]:
    """``[{name, kind: modeled|measured, points: [{size, latency_s, bytes_per_s}]}]`` from hwsim.json.

    Reads ``hwsim.report``'s ``presets`` (modeled, zero-load; plus ``<preset> batched`` throughput) and
    ``software`` (measured) objects, each with ``rows`` of ``size``, ``latency_ns`` and
    ``throughput_bytes_per_s``.
    """
    series: list[dict[str, Any]] = []
    for kind, group in (("modeled", data.get("presets", {})), ("measured", data.get("software", {}))):
        for name, entry in group.items():
            rows = entry.get("rows", [])
            points = [
                {
                    "size": row["size"],
                    "latency_s": float(row["latency_ns"]) / 1e9,
                    "bytes_per_s": float(row["throughput_bytes_per_s"]),
                }
                for row in rows
            ]
            if points:
                series.append({"name": name, "kind": kind, "points": points})
            batched = [
                {"size": row["size"], "bytes_per_s": float(row["batch_throughput_bytes_per_s"])}
                for row in rows
                if "batch_throughput_bytes_per_s" in row
            ]
            if batched:
                series.append({"name": f"{name} batched", "kind": "batched", "points": batched})
    return series


_STYLES = {"modeled": "-", "measured": "--", "batched": ":"}


def hwsim_section(data: dict[str, Any], report: Report) -> None:
    """Modeled-vs-measured latency and throughput plot, crossover and Amdahl table from ``hwsim.json``."""
    series = hwsim_series(data)
    if not series:
        report.notes.append("`hwsim.json` has no `presets` or `software` rows.")
        return
    figure, (latency_axis, rate_axis) = plt.subplots(1, 2, figsize=(13, 5))
    colors: dict[str, Any] = {}
    for entry in series:
        base = entry["name"].removesuffix(" batched")
        color = colors.setdefault(base, f"C{len(colors) % 10}")
        label = entry["name"] if entry["kind"] == "batched" else f"{entry['name']} ({entry['kind']})"
        panels = [(rate_axis, "bytes_per_s", 1e-9)]
        if entry["kind"] != "batched":
            panels.append((latency_axis, "latency_s", 1e6))
        for axis, metric, scale in panels:
            points = _positive([(float(p["size"]), float(p[metric]) * scale) for p in entry["points"]])
            if points:
                axis.plot(
                    *zip(*points, strict=True), _STYLES[entry["kind"]], color=color, marker=".", label=label
                )
    for axis, ylabel in ((latency_axis, "latency per message (µs)"), (rate_axis, "throughput (GB/s)")):
        _size_axis(axis)
        axis.set_yscale("log")
        axis.set_xlabel("message size")
        axis.set_ylabel(ylabel)
        axis.legend(fontsize=7)
    latency_axis.set_title("hwsim: modeled (solid) vs measured (dashed) latency")
    rate_axis.set_title("throughput; dotted: a batch under one doorbell")
    figure.tight_layout()
    figure.savefig(report.results / "hwsim_model_vs_measured.png", dpi=110)
    plt.close(figure)
    machine = data.get("machine", {})
    quick = " with --quick" if data.get("quick") else ""
    lines = ["## Simulated accelerator: modeled vs measured", ""]
    lines += [f"CPU {machine.get('cpu', '?')}, run {data.get('generated_at', '?')}{quick}.", ""]
    lines += [
        "Solid lines: the device model per preset at zero load; dashed: backends measured on this machine.",
        "",
    ]
    lines += ["![hwsim modeled vs measured](hwsim_model_vs_measured.png)", ""]
    lines += hwsim_comparison_table(data.get("comparisons", []))
    example = data.get("design_documents_example")
    if isinstance(example, dict) and "speedup" in example:
        lines += [
            "",
            f"The design documents' estimate: p = {example.get('p')}, s = {example.get('s')} gives "
            f"{float(example['speedup']):.2f}x as written (Amdahl without the offload overhead).",
        ]
    report.sections.append(lines)


def hwsim_comparison_table(comparisons: list[dict[str, Any]]) -> list[str]:
    """Crossover sizes and Amdahl speedups (as written / with overhead / simulated) at the largest size."""
    if not comparisons:
        return []
    lines = [
        "| preset | backend | offload faster | crossover | size | Amdahl as written | with overhead "
        "| simulated |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for entry in comparisons:
        crossover = entry.get("crossover_simulated_bytes")
        shown = human_size(float(crossover)) if isinstance(crossover, int | float) else "none"
        amdahl_rows = entry.get("amdahl") or [{}]
        last = amdahl_rows[-1]
        size = human_size(float(last["size"])) if "size" in last else ""
        speedups = [
            last.get(key) for key in ("speedup_as_written", "speedup_with_overhead", "speedup_simulated")
        ]
        cells = " | ".join(f"{value:.2f}x" if isinstance(value, int | float) else "" for value in speedups)
        names = (
            f"{entry.get('preset', '?')} | {entry.get('backend', '?')} | {entry.get('offload_faster', '')}"
        )
        lines.append(f"| {names} | {shown} | {size} | {cells} |")
    return lines


# -- assembly ------------------------------------------------------------------------------------------------
def build_report(report: Report) -> Path:
    """Read the JSON files in ``report.results``, write the plots and ``report.md`` there; return its path."""
    report.results.mkdir(parents=True, exist_ok=True)
    for step, section in zip(STEPS, (aescore_section, service_section, hwsim_section), strict=True):
        data = load_json(report.results / step.json_name, step.module, report)
        if data is not None:
            try:
                section(data, report)
            except (KeyError, TypeError, ValueError) as exc:
                report.notes.append(
                    f"`{step.json_name}` has an unexpected shape ({exc!r}); its section is missing."
                )
    return write_markdown(report)


def write_markdown(report: Report) -> Path:
    """Write ``report.md`` from the sections and notes."""
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    lines = [
        "# Keystream benchmark report",
        "",
        f"Generated {now} by `python -m bench.report` (make bench, make report).",
        "",
    ]
    if report.notes:
        lines += ["**Missing or failed:**", ""] + [f"- {note}" for note in report.notes] + [""]
    for section in report.sections:
        lines += [*section, ""]
    path = report.results / "report.md"
    path.write_text("\n".join(lines).rstrip() + "\n")
    return path


def main(argv: list[str] | None = None) -> int:
    """Run the benchmarks (unless ``--report-only``) and write the report; 1 when a benchmark failed."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="pass --quick to every benchmark")
    parser.add_argument("--report-only", action="store_true", help="only plot the existing JSON files")
    parser.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help=f"default {DEFAULT_RESULTS}")
    args = parser.parse_args(argv)
    report = Report(args.results.resolve())
    report.results.mkdir(parents=True, exist_ok=True)
    ran_ok = args.report_only or run_steps(STEPS, report.results, args.quick, report)
    path = build_report(report)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"\nreport: {path}")
    return 0 if ran_ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

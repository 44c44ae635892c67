"""``python -m hwsim.report``: every preset against the software backends measured on this machine.

For message sizes 16 B .. 16 MiB it gives, per preset, the modeled zero-load latency and throughput of one
job and the throughput of a batch of jobs submitted under one doorbell; per software backend (``aesni``,
``python``), the measured wall time of one ``ctr_xor`` call. It then states the design documents' Amdahl
estimate as written, ``S = 1/((1-p) + p/s)``, and with the offload overhead ``o``,
``S = 1/((1-p) + p/s + o)``, with ``p`` from a measured profile of each software backend: each call's time is
fitted as ``O_sw + n/B_sw`` and ``p(n) = (n/B_sw) / (O_sw + n/B_sw)`` is the share of the call that is block
math. ``s = B_off / B_sw`` compares streaming rates and ``o = O_off / T_sw(n)`` is the device's fixed cost
relative to the software call.

Writes ``bench/results/hwsim.json`` and ``docs/img/hwsim.png`` (log-log latency and throughput vs size) and
prints a table. ``--quick`` stops at 1 MiB and measures fewer repetitions.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import aescore

from .analysis import (
    amdahl,
    crossover_formula,
    crossover_size,
    fit_linear,
    offload_region,
    throughput_bound,
    zero_load_job,
)
from .device import Device, JobSpec
from .params import PRESETS, DeviceParams
from .resources import KeyRef

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["main", "measure_backend", "model_preset", "run"]

SIZES = [16 << (2 * k) for k in range(11)]  # 16 B, 64 B, ... 16 MiB
QUICK_LIMIT = 1 << 20
BATCH_BYTES = 4 << 20
AMDAHL_SIZES = (1024, 4096, 65536, 1 << 20)


def model_preset(params: DeviceParams, sizes: list[int]) -> dict[str, Any]:
    """Zero-load latency/throughput per size and batched throughput (up to 64 jobs, at most 4 MiB)."""
    rows = []
    for size in sizes:
        job = zero_load_job(params, size)
        batch = max(1, min(64, params.ring_depth, BATCH_BYTES // size))
        device = Device(params)
        device.submit([JobSpec(0, KeyRef(1))])
        device.sim.run()
        start = device.sim.now
        device.submit([JobSpec(size, KeyRef(1))] * batch)
        device.sim.run()
        makespan = device.sim.now - start
        rows.append(
            {
                "size": size,
                "latency_ns": job.latency_ns,
                "throughput_bytes_per_s": size / job.latency_ns * 1e9,
                "stages_ns": job.stages(),
                "batch_jobs": batch,
                "batch_throughput_bytes_per_s": size * batch / makespan * 1e9,
            }
        )
    _, bandwidth = profile(rows)
    overhead = float(zero_load_job(params, 0).latency_ns)
    return {
        "preset": params.name,
        "description": params.description,
        "throughput_bound_bytes_per_s": throughput_bound(params),
        "fit_overhead_ns": overhead,
        "fit_bandwidth_bytes_per_s": bandwidth * 1e9,
        "rows": rows,
    }


def measure_backend(name: str, sizes: list[int], quick: bool) -> dict[str, Any]:
    """Median wall time of one ``ctr_xor`` call per size on this machine (fewer repetitions when slow), and
    the fastest call (``best_ns``), which the fit uses: on a shared machine a few samples' median can be taken
    by another process's burst (a 128 KiB call once measured faster than a 64 KiB one at load 6), while the
    fastest call is the least disturbed."""
    backend = aescore.get_backend(name)
    key = backend.expand_key(bytes(range(16)))
    counter = bytes(16)
    rows = []
    for size in sizes:
        data = os.urandom(size)
        out = bytearray(size)
        budget_ns = (0.05 if quick else 0.3) * 1e9
        samples: list[int] = []
        spent = 0
        while len(samples) < 3 or (spent < budget_ns and len(samples) < 2000):
            start = time.perf_counter_ns()
            backend.ctr_xor(key, counter, data, 0, out)
            elapsed = time.perf_counter_ns() - start
            samples.append(elapsed)
            spent += elapsed
            if elapsed > 2e8 and len(samples) >= 1:
                break
        median = statistics.median(samples)
        rows.append(
            {
                "size": size,
                "latency_ns": median,
                "best_ns": min(samples),
                "throughput_bytes_per_s": size / median * 1e9,
            }
        )
    overhead, bandwidth = profile(rows)
    return {
        "backend": name,
        "fit_overhead_ns": overhead,
        "fit_bandwidth_bytes_per_s": bandwidth * 1e9,
        "rows": rows,
    }


def profile(rows: list[dict[str, Any]]) -> tuple[float, float]:
    """Fit ``T(n) = O + n/B`` to measured rows (their fastest call, ``best_ns``, where present): ``B`` from
    the sizes 64 KiB .. 1 MiB (the streaming rate with the data in cache, as for the service's segments),
    ``O`` the median of ``T(n) - n/B`` over sizes <= 256 B (the fixed cost per call); ns and bytes/ns.

    Raises:
        ValueError: fewer than two sizes within 64 KiB .. 1 MiB, or none of at most 256 B.
    """
    large = [
        (r["size"], float(r.get("best_ns", r["latency_ns"]))) for r in rows if 65536 <= r["size"] <= 1 << 20
    ]
    _, bandwidth = fit_linear(large)
    small = [
        float(r.get("best_ns", r["latency_ns"])) - r["size"] / bandwidth for r in rows if r["size"] <= 256
    ]
    if not small:
        raise ValueError("need sizes of at most 256 B to measure the fixed cost")
    return max(statistics.median(small), 0.0), bandwidth


def measure_driver(preset: str, size: int = 4096, calls: int = 300) -> dict[str, Any]:
    """Host CPU per job of this (Python) driver, measured through the hwsim backend."""
    from .driver import HwsimBackend

    backend = HwsimBackend(preset)
    key = backend.expand_key(bytes(range(16)))
    data = bytes(size)
    for _ in range(calls):
        backend.ctr_xor(key, bytes(16), data)
    snap = backend.snapshot()
    return {
        "preset": preset,
        "size": size,
        "driver_host_cpu_ns_per_job": snap.host_cpu_ns_per_job,
        "modeled_latency_ns": snap.latency_p50_ns,
        "software_core": backend.info()["software_core"],
    }


def grid_crossover(preset: dict[str, Any], measured: dict[str, Any]) -> int | None:
    """The smallest report size from which the modeled latency beats the measured one at every larger size."""
    answer: int | None = None
    for model_row, measured_row in zip(reversed(preset["rows"]), reversed(measured["rows"]), strict=True):
        if model_row["latency_ns"] >= measured_row["latency_ns"]:
            break
        answer = model_row["size"]
    return answer


def _amdahl_rows(
    software: dict[str, Any], preset: dict[str, Any], params: DeviceParams
) -> list[dict[str, Any]]:
    overhead_sw = software["fit_overhead_ns"]
    bandwidth_sw = software["fit_bandwidth_bytes_per_s"] / 1e9
    bandwidth_off = preset["fit_bandwidth_bytes_per_s"] / 1e9
    overhead_off = float(zero_load_job(params, 0).latency_ns)
    rows = []
    for size in AMDAHL_SIZES:
        t_sw = overhead_sw + size / bandwidth_sw
        p = (size / bandwidth_sw) / t_sw
        s = bandwidth_off / bandwidth_sw
        o = overhead_off / t_sw
        t_off = zero_load_job(params, size).latency_ns
        rows.append(
            {
                "size": size,
                "p": p,
                "s": s,
                "o": o,
                "speedup_as_written": amdahl(p, s),
                "speedup_with_overhead": amdahl(p, s, o),
                "speedup_simulated": t_sw / ((1 - p) * t_sw + t_off),
            }
        )
    return rows


def run(
    quick: bool = False,
    out_json: Path | None = None,
    out_png: Path | None = None,
    sizes: list[int] | None = None,
) -> dict[str, Any]:
    """Run the whole report and return its data (also written to ``out_json``/``out_png`` when given).

    Args:
        quick: sizes up to 1 MiB and short measurements.
        out_json: where to write the results.
        out_png: where to write the plot.
        sizes: override the sizes (they need two of at least 64 KiB and one of at most 256 B).

    Raises:
        ValueError: ``sizes`` too few to fit the profiles.
    """
    if sizes is None:
        sizes = [s for s in SIZES if not quick or s <= QUICK_LIMIT]
    backends = [name for name in ("aesni", "python") if aescore.available_backends().get(name) is None]
    software = {name: measure_backend(name, sizes, quick) for name in backends}
    presets = {name: model_preset(params, sizes) for name, params in PRESETS.items()}
    comparisons = []
    for preset_name, params in PRESETS.items():
        for name, measured in software.items():
            overhead_sw = measured["fit_overhead_ns"]
            bandwidth_sw = measured["fit_bandwidth_bytes_per_s"] / 1e9
            simulated = crossover_size(params, overhead_sw, bandwidth_sw)
            bandwidth_off = presets[preset_name]["fit_bandwidth_bytes_per_s"] / 1e9
            formula = crossover_formula(
                presets[preset_name]["fit_overhead_ns"], bandwidth_off, overhead_sw, bandwidth_sw
            )
            comparisons.append(
                {
                    "preset": preset_name,
                    "backend": name,
                    "crossover_simulated_bytes": simulated,
                    "crossover_formula_bytes": None if math.isinf(formula) else formula,
                    "offload_faster": offload_region(bandwidth_off, bandwidth_sw),
                    "offload_faster_from_measured_size": grid_crossover(presets[preset_name], measured),
                    "amdahl": _amdahl_rows(measured, presets[preset_name], params),
                }
            )
    result = {
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpu": _cpu_model(), "cores": os.cpu_count(), "python": platform.python_version()},
        "quick": quick,
        "sizes": sizes,
        "software": software,
        "presets": presets,
        "comparisons": comparisons,
        "design_documents_example": {"p": 0.6, "s": 5.0, "speedup": amdahl(0.6, 5.0)},
        "driver": [measure_driver(name) for name in ("proposal", "pcie-offload")],
    }
    if out_json is not None:
        out_json.parent.mkdir(parents=True, exist_ok=True)
        out_json.write_text(json.dumps(result, indent=1) + "\n")
    if out_png is not None:
        plot(result, out_png)
    return result


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def plot(result: dict[str, Any], path: Path) -> None:
    """Write :func:`plot_figure` of ``result`` to ``path`` (PNG)."""
    import matplotlib.pyplot as plt

    figure = plot_figure(result)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)


def plot_figure(result: dict[str, Any]) -> Figure:
    """Log-log latency and throughput vs size: one line per preset (modeled) and backend (measured).

    Each panel has its own legend, below the panel so it covers no line; the axes read in plain units
    (16 B ... 16 MiB, 100 ns ... 1 s, 1 MB/s ... 10 GB/s) rather than powers of two and ten.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    figure, (left, right) = plt.subplots(1, 2, figsize=(13, 6.4), layout="constrained")
    for name, data in result["presets"].items():
        sizes = [r["size"] for r in data["rows"]]
        (line,) = left.plot(
            sizes, [r["latency_ns"] / 1e3 for r in data["rows"]], marker="o", ms=3, label=f"{name} (model)"
        )
        color = line.get_color()
        right.plot(
            sizes,
            [r["throughput_bytes_per_s"] / 1e9 for r in data["rows"]],
            marker="o",
            ms=3,
            color=color,
            label=f"{name} (model)",
        )
        right.plot(
            sizes,
            [r["batch_throughput_bytes_per_s"] / 1e9 for r in data["rows"]],
            linestyle=":",
            color=color,
            label=f"{name} batched (model)",
        )
    for name, data in result["software"].items():
        sizes = [r["size"] for r in data["rows"]]
        style = {"linestyle": "--", "linewidth": 2.2, "color": "black" if name == "aesni" else "grey"}
        left.plot(sizes, [r["latency_ns"] / 1e3 for r in data["rows"]], label=f"{name} (measured)", **style)
        right.plot(
            sizes,
            [r["throughput_bytes_per_s"] / 1e9 for r in data["rows"]],
            label=f"{name} (measured)",
            **style,
        )
    sizes = [int(size) for size in result["sizes"]]
    size_ticks = [16**k for k in range(1, 8) if min(sizes) / 2 <= 16**k <= max(sizes) * 2]
    panels = (
        (left, "latency of one job (zero load)", "latency (log scale)", _time_label, 2),
        (right, "throughput (dotted: batches of up to 64 jobs)", "throughput (log scale)", _rate_label, 3),
    )
    for axis, title, ylabel, formatter, columns in panels:
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.xaxis.set_major_locator(FixedLocator(size_ticks))
        axis.xaxis.set_major_formatter(FuncFormatter(lambda value, _: _human(value)))
        axis.xaxis.set_minor_formatter(NullFormatter())
        axis.yaxis.set_major_formatter(FuncFormatter(lambda value, _, f=formatter: f(value)))
        axis.yaxis.set_minor_formatter(NullFormatter())
        axis.set_xlabel("message size (log scale)")
        axis.set_ylabel(ylabel)
        axis.set_title(title)
        axis.grid(True, which="major", alpha=0.3)
        axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=columns, frameon=False)
    figure.suptitle("hwsim presets (modeled) vs software AES-CTR measured on this machine")
    return figure


#: Tick units from the largest down; the last has scale 1.
_TIME_UNITS = (("s", 1e9), ("ms", 1e6), ("µs", 1e3), ("ns", 1.0))
_RATE_UNITS = (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3), ("B/s", 1.0))


def _scaled(value: float, units: tuple[tuple[str, float], ...]) -> str:
    """``value`` in the largest of ``units`` it reaches: 1500 in _TIME_UNITS (ns) is "1.5 µs"."""
    for unit, scale in units:
        if value >= scale or scale == 1.0:
            return f"{value / scale:g} {unit}"
    raise ValueError(f"the last unit of {units} must have scale 1")


def _time_label(microseconds: float) -> str:
    """A latency tick in microseconds as a plain time: 100 ns, 1 µs, 10 ms, 1 s."""
    return _scaled(microseconds * 1e3, _TIME_UNITS)


def _rate_label(gigabytes_per_second: float) -> str:
    """A throughput tick in GB/s as a plain rate: 1 MB/s, 100 MB/s, 10 GB/s."""
    return _scaled(gigabytes_per_second * 1e9, _RATE_UNITS)


def _human(size: float) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size:g} B"


def _crossing(size: float | None, region: str) -> str:
    """How a crossover reads: where offload is faster."""
    if size is None:
        return "never"
    if region == "above":
        return "all sizes" if size <= 1 else f">= {_human(round(size))}"
    return "never" if size < 1 else f"< {_human(round(size))}"


def format_table(result: dict[str, Any]) -> str:
    """The report as Markdown tables."""
    lines = []
    columns = [*result["presets"], *result["software"]]
    lines.append(
        "latency (µs) / throughput (GB/s) of one job; presets modeled at zero load, backends measured\n"
    )
    lines.append("| size | " + " | ".join(columns) + " |")
    lines.append("|---" * (len(columns) + 1) + "|")
    for index, size in enumerate(result["sizes"]):
        cells = []
        for name in columns:
            source = result["presets"].get(name) or result["software"][name]
            row = source["rows"][index]
            cells.append(f"{row['latency_ns'] / 1e3:.3g} / {row['throughput_bytes_per_s'] / 1e9:.3g}")
        lines.append(f"| {_human(size)} | " + " | ".join(cells) + " |")
    lines.append("\nbatched throughput (GB/s): up to 64 jobs under one doorbell, at most 4 MiB per batch\n")
    lines.append("| size | " + " | ".join(result["presets"]) + " |")
    lines.append("|---" * (len(result["presets"]) + 1) + "|")
    for index, size in enumerate(result["sizes"]):
        cells = [
            f"{data['rows'][index]['batch_throughput_bytes_per_s'] / 1e9:.3g}"
            for data in result["presets"].values()
        ]
        lines.append(f"| {_human(size)} | " + " | ".join(cells) + " |")
    lines.append("\nwhere offload is faster (zero load), and Amdahl at 4 KiB and 1 MiB\n")
    lines.append(
        "| preset @ size | vs | faster (measured grid) | (model) | (formula) | p, s, o | S as written "
        "| S with o | S model |"
    )
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for comparison in result["comparisons"]:
        simulated = comparison["crossover_simulated_bytes"]
        formula = comparison["crossover_formula_bytes"]
        for row in comparison["amdahl"]:
            if row["size"] not in (4096, 1 << 20):
                continue
            lines.append(
                f"| {comparison['preset']} @ {_human(row['size'])} | {comparison['backend']} | "
                f"{_crossing(comparison['offload_faster_from_measured_size'], 'above')} | "
                f"{_crossing(simulated, 'above')} | {_crossing(formula, comparison['offload_faster'])} | "
                f"{row['p']:.2f}, {row['s']:.3g}, {row['o']:.3g} | {row['speedup_as_written']:.2f}x | "
                f"{row['speedup_with_overhead']:.3g}x | {row['speedup_simulated']:.3g}x |"
            )
    for row in result["driver"]:
        lines.append(
            f"\nhost CPU per {_human(row['size'])} job spent by this Python driver ({row['preset']}): "
            f"{row['driver_host_cpu_ns_per_job'] / 1e3:.2f} µs (software core {row['software_core']})"
        )
    example = result["design_documents_example"]
    lines.append(
        f"\ndesign documents: p = {example['p']}, s = {example['s']} -> "
        f"S = {example['speedup']:.2f}x (no overhead)"
    )
    lines.append(
        "\nAES-GCM (aescore.AesGcm on hwsim): the device makes the CTR keystream, one job per message "
        "(AES_K(J0) and the data's blocks); GHASH runs on the host CPU and is counted apart, measured "
        "(host_ghash_* in the snapshot). The figures above model the CTR part only."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m hwsim.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="sizes up to 1 MiB, fewer repetitions")
    parser.add_argument("--json", type=Path, default=Path("bench/results/hwsim.json"), help="results file")
    parser.add_argument("--png", type=Path, default=Path("docs/img/hwsim.png"), help="plot file")
    parser.add_argument(
        "--plot-only",
        action="store_true",
        help="redraw the plot from an existing --json file, measure nothing",
    )
    args = parser.parse_args(argv)
    if args.plot_only:
        plot(json.loads(args.json.read_text()), args.png)
        print(f"wrote {args.png} from {args.json}", file=sys.stderr)
        return 0
    started = time.perf_counter()
    result = run(args.quick, args.json, args.png)
    print(format_table(result))
    print(f"\nwrote {args.json} and {args.png} in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

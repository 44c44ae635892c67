"""The AES-GCM part of ``bench/report.py``: a throughput-vs-size plot, the per-size table and the targets.

Reads the ``cap`` and ``gcm`` rows and ``gcm_targets`` of ``aescore.json`` (``bench/aescore_gcm.py``) and
draws ``aescore_gcm.png``: aescore's AES-GCM on aesni, cryptography's AESGCM, aescore's AES-CTR and AES-CTR
+ HMAC-SHA256, one panel per key size, with the AES-128 cap of this core as a horizontal line.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # after use("Agg")
import matplotlib.ticker

from .aescore_gcm import targets_markdown

SERIES = ("aesni-gcm", "cryptography", "aesni-ctr", "aesni-ctr+hmac")
LABELS = {
    "aesni-gcm": "aescore AesGcm (aesni)",
    "cryptography": "cryptography AESGCM",
    "aesni-ctr": "aescore AES-CTR (aesni)",
    "aesni-ctr+hmac": "aescore AES-CTR + HMAC-SHA256",
}
TABLE_SIZES = (64, 1024, 1 << 20)


def _size(size: float) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size:g} B"


def gcm_section(data: dict[str, Any], results: Path) -> list[str]:
    """Markdown lines for the GCM rows of ``data``, writing ``results/aescore_gcm.png``; [] without them."""
    rows = [r for r in data.get("results", []) if r.get("case") == "gcm"]
    if not rows:
        return []
    caps = {(r["library"], r["mode"]): float(r["bytes_per_s"]) for r in data["results"] if r["case"] == "cap"}
    modes = sorted({str(r["mode"]) for r in rows})
    figure, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 4.8), squeeze=False)
    for axis, mode in zip(axes[0], modes, strict=True):
        series: dict[str, list[tuple[float, float]]] = defaultdict(list)
        for row in rows:
            if row["mode"] == mode:
                series[str(row["library"])].append((float(row["size"]), float(row["bytes_per_s"]) / 1e9))
        for library in [name for name in SERIES if name in series]:
            axis.plot(*zip(*sorted(series[library]), strict=True), marker="o", label=LABELS[library])
        for (library, kind), rate in caps.items():
            if kind == "aes128" and mode == "AES-128":
                axis.axhline(rate / 1e9, linestyle="--", linewidth=1, color="grey")
                axis.annotate(f"AES-128 cap, {library}", (64, rate / 1e9), fontsize=7, va="bottom")
        axis.set_xscale("log", base=2)
        axis.xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda value, _pos: _size(value)))
        axis.set_yscale("log")
        axis.grid(True, which="major", alpha=0.3)
        axis.set_xlabel("message size (one call)")
        axis.set_ylabel("throughput (GB/s)")
        axis.set_title(f"{mode}: authenticated encryption vs CTR")
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(results / "aescore_gcm.png", dpi=110)
    plt.close(figure)

    lines = ["## AES-GCM", "", "![AES-GCM throughput vs message size](aescore_gcm.png)", ""]
    lines += ["| key | size | library | GB/s | vs cryptography AESGCM |", "|---|---:|---|---:|---:|"]
    for row in sorted(rows, key=lambda r: (str(r["mode"]), int(r["size"]), SERIES.index(str(r["library"])))):
        if int(row["size"]) in TABLE_SIZES:
            ratio = row.get("ratio_to_cryptography")
            shown = f"{ratio:.2f}x" if isinstance(ratio, int | float) else ""
            label = LABELS.get(row["library"], row["library"])
            lines.append(
                f"| {row['mode']} | {_size(int(row['size']))} | {label} | "
                f"{float(row['bytes_per_s']) / 1e9:.3f} | {shown} |"
            )
    if caps:
        lines += ["", "Caps of this core (loops of independent instructions, same run):", ""]
        lines += [
            f"- {kind} on {library}: {rate / 1e9:.2f} GB/s" for (library, kind), rate in sorted(caps.items())
        ]
    if data.get("gcm_targets"):
        lines += ["", "Targets:", "", *targets_markdown(data["gcm_targets"])]
    return lines

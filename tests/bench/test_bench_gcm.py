"""The AES-GCM benchmark pieces: targets computed from rows, and the report's GCM section and plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench import aescore_gcm, report_gcm

MIB = 1 << 20


def _row(case: str, library: str, mode: str, size: int, rate: float) -> dict[str, Any]:
    return {"case": case, "library": library, "mode": mode, "size": size, "median_s": size / rate,
            "bytes_per_s": rate, "ratio_to_cryptography": None}  # fmt: skip


def _rows(ours_256: float) -> list[dict[str, Any]]:
    rows = [
        _row("cap", "aesni/vaes256", "aes128", 4096, 20e9),
        _row("cap", "aesni/vaes512", "aes128", 4096, 40e9),
        _row("cap", "aesni/vaes256", "clmul", 4096, 20e9),
    ]
    rows.append(_row("throughput", "aesni", "into", MIB, 18e9))
    for mode in aescore_gcm.KEYS:
        for size in (64, 1024, MIB):
            rows.append(_row("gcm", "cryptography", mode, size, 1e9 if size < MIB else 8e9))
            rows.append(_row("gcm", "aesni-gcm", mode, size, 2e9 if size < MIB else ours_256))
            rows.append(_row("gcm", "aesni-ctr", mode, size, 18e9))
            rows.append(_row("gcm", "aesni-ctr+hmac", mode, size, 1.5e9))
    return rows


def test_targets_use_the_running_path_cap_and_report_misses() -> None:
    checks = {c["target"]: c for c in aescore_gcm.targets(_rows(ours_256=10e9), "vaes256")}
    assert checks["AES-256-GCM 1 MiB, aesni vs cryptography AESGCM"]["value"] == 1.25
    assert checks["AES-256-GCM 1 MiB, aesni vs cryptography AESGCM"]["met"] is False
    assert checks["AES-128-GCM 1 MiB vs AES-128 cap"]["value"] == 0.5  # 10 / 20: the vaes256 cap, not vaes512
    aes256_cap = checks["AES-256-GCM 1 MiB vs AES-256 cap (AES-128 cap x 10/14)"]
    assert aes256_cap["value"] == 10e9 / (20e9 * 10 / 14) and aes256_cap["met"] is False  # 0.70 < 0.85
    assert aescore_gcm.targets(_rows(ours_256=12.5e9), "vaes256")[1]["met"] is True  # 0.875
    assert checks["AES-128-CTR 1 MiB (into) vs AES-128 cap"]["value"] == 0.9
    assert checks["AES-128-GCM 1 MiB vs 1/(1/AES cap + 1/GHASH multiply cap)"]["value"] == 1.0
    assert checks["AES-128-GCM 64 B per call, aesni vs cryptography AESGCM"] == {
        "target": "AES-128-GCM 64 B per call, aesni vs cryptography AESGCM", "value": 2.0, "goal": 1.0,
        "unit": "x", "met": True,
    }  # fmt: skip
    met = aescore_gcm.targets(_rows(ours_256=15e9), "vaes256")[0]
    assert met["met"] is True
    table = "\n".join(aescore_gcm.targets_markdown(aescore_gcm.targets(_rows(10e9), "vaes256")))
    assert "| AES-128-GCM 1 MiB vs AES-128 cap | 0.50 of cap | >= 0.75 of cap | **no** |" in table
    missing = aescore_gcm.targets([], None)
    assert all(check["value"] is None and not check["met"] for check in missing)


def test_report_section_draws_the_plot(tmp_path: Path) -> None:
    rows = _rows(ours_256=10e9)
    data = {"results": rows, "gcm_targets": aescore_gcm.targets(rows, "vaes256")}
    lines = report_gcm.gcm_section(data, tmp_path)
    assert (tmp_path / "aescore_gcm.png").read_bytes().startswith(b"\x89PNG")
    text = "\n".join(lines)
    assert "| AES-256 | 1 MiB | aescore AesGcm (aesni) | 10.000 |" in text
    assert "aes128 on aesni/vaes256: 20.00 GB/s" in text and "Targets:" in text
    assert report_gcm.gcm_section({"results": []}, tmp_path) == []

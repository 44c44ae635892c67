"""AES-GCM cases of ``bench/bench_aescore.py`` and the targets of the GCM issue, computed from one run.

* ``cap``: what this core's AES and carry-less-multiply units allow, from loops of independent
  VAESENC/AESENC (``aes128``: 10 round instructions per 16-byte block) and VPCLMULQDQ (``clmul``: the 3
  multiplies a Karatsuba GHASH needs per block) on each aesni path; ``size`` is the bytes one call stands for.
* ``gcm``: one call on ``size`` bytes, mode ``AES-128`` / ``AES-256``, key set up beforehand, result returned
  as new bytes: aescore's ``AesGcm`` on aesni (``aesni-gcm``), cryptography's ``AESGCM`` (``cryptography``),
  aescore's AES-CTR alone (``aesni-ctr``) and AES-CTR then HMAC-SHA256 over the ciphertext, which is what the
  sealed ``ctr-hmac`` format does per segment (``aesni-ctr+hmac``).

:func:`targets` turns the rows into the issue's checks (``met`` true/false), every figure reported either way,
plus two figures without a goal: CTR against the AES cap, and GCM against the ceiling a core has when its AES
and carry-less-multiply instructions compete for the same units (as on the EPYC VM this was written on).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
from collections.abc import Callable
from typing import Any

import aescore

Call = Callable[[], object]

GCM_SIZES = (64, 256, 1024, 4096, 16384, 65536, 262144, 1 << 20)
KEYS = {"AES-128": bytes(range(16)), "AES-256": bytes(range(32))}
NONCE = bytes(range(12))
COUNTER = NONCE + b"\x00\x00\x00\x02"
MAC_KEY = bytes(range(32, 64))
#: Probe iterations per call: about a millisecond of work on a current core.
PROBE_ITERATIONS = 20_000


def _aesni() -> Any | None:
    if aescore.available_backends().get("aesni") is not None:
        return None
    from aescore.ctr import _aesni

    return _aesni


def cap_calls(quick: bool) -> dict[tuple[str, str], tuple[Call, int]]:
    """(aesni path, probe kind) -> (one probe call, bytes it stands for)."""
    module = _aesni()
    if module is None:
        return {}
    iterations = PROBE_ITERATIONS // (4 if quick else 1)
    calls: dict[tuple[str, str], tuple[Call, int]] = {}
    for isa in module.supported_isas():
        if module.gcm_isa(isa) != isa:
            continue
        for kind in ("aes128", "clmul"):
            blocks = module.probe(kind, isa, iterations)
            calls[(isa, kind)] = (functools.partial(module.probe, kind, isa, iterations), 16 * blocks)
    return calls


def gcm_calls(size: int, mode: str) -> dict[str, Call]:
    """library -> one call on ``size`` bytes for key size ``mode`` (``AES-128`` or ``AES-256``)."""
    key, data = KEYS[mode], bytes(size)
    calls: dict[str, Call] = {}
    if _aesni() is not None:
        gcm = aescore.AesGcm("aesni", key)
        calls["aesni-gcm"] = functools.partial(gcm.encrypt, NONCE, data, None)
        backend = aescore.get_backend("aesni")
        expanded = backend.expand_key(key)
        calls["aesni-ctr"] = functools.partial(backend.ctr_xor, expanded, COUNTER, data)

        def ctr_hmac() -> bytes:
            ciphertext = backend.ctr_xor(expanded, COUNTER, data)
            assert ciphertext is not None
            return ciphertext + hmac.digest(MAC_KEY, ciphertext, hashlib.sha256)

        calls["aesni-ctr+hmac"] = ctr_hmac
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        calls["cryptography"] = functools.partial(AESGCM(key).encrypt, NONCE, data, None)
    except ImportError:
        pass
    return calls


def _rate(rows: list[dict[str, Any]], case: str, library: str, mode: str, size: int) -> float | None:
    for row in rows:
        if (row["case"], row["library"], row["mode"], row["size"]) == (case, library, mode, size):
            return float(row["bytes_per_s"])
    return None


def _check(name: str, value: float | None, goal: float, unit: str) -> dict[str, Any]:
    return {
        "target": name,
        "value": value,
        "goal": goal,
        "unit": unit,
        "met": value is not None and value >= goal,
    }


def targets(rows: list[dict[str, Any]], aesni_isa: str | None) -> list[dict[str, Any]]:
    """The GCM issue's benchmark targets from one run's rows (``value`` None when a row is missing)."""
    mib = 1 << 20
    caps = [r for r in rows if r["case"] == "cap" and r["mode"] == "aes128"]
    cap_row = next((r for r in caps if r["library"] == f"aesni/{aesni_isa}"), caps[0] if caps else None)
    cap = float(cap_row["bytes_per_s"]) if cap_row else None
    checks = []
    gcm256, crypto256 = (_rate(rows, "gcm", lib, "AES-256", mib) for lib in ("aesni-gcm", "cryptography"))
    checks.append(
        _check(
            "AES-256-GCM 1 MiB, aesni vs cryptography AESGCM",
            gcm256 / crypto256 if gcm256 and crypto256 else None,
            1.5,
            "x",
        )
    )
    # AES-256 runs 14 rounds where AES-128 runs 10: its cap is the AES-128 cap scaled by 10/14.
    checks.append(
        _check(
            "AES-256-GCM 1 MiB vs AES-256 cap (AES-128 cap x 10/14)",
            gcm256 / (cap * 10 / 14) if gcm256 and cap else None,
            0.85,
            "of cap",
        )
    )
    gcm128 = _rate(rows, "gcm", "aesni-gcm", "AES-128", mib)
    checks.append(
        _check("AES-128-GCM 1 MiB vs AES-128 cap", gcm128 / cap if gcm128 and cap else None, 0.75, "of cap")
    )
    clmul_row = next(
        (
            r
            for r in rows
            if r["case"] == "cap" and r["mode"] == "clmul" and cap_row and r["library"] == cap_row["library"]
        ),
        None,
    )
    # Where AES and carry-less multiplies share execution units, GCM costs their sum: this is its ceiling.
    bound = 1 / (1 / cap + 1 / float(clmul_row["bytes_per_s"])) if cap and clmul_row else None
    checks.append(
        _check(
            "AES-128-GCM 1 MiB vs 1/(1/AES cap + 1/GHASH multiply cap)",
            gcm128 / bound if gcm128 and bound else None,
            0.0,
            "of bound",
        )
    )
    ctr = _rate(rows, "throughput", "aesni", "into", mib)
    checks.append(
        _check("AES-128-CTR 1 MiB (into) vs AES-128 cap", ctr / cap if ctr and cap else None, 0.0, "of cap")
    )
    for mode in KEYS:
        for size in (64, 1024):
            ours, theirs = (_rate(rows, "gcm", lib, mode, size) for lib in ("aesni-gcm", "cryptography"))
            checks.append(
                _check(
                    f"{mode}-GCM {size} B per call, aesni vs cryptography AESGCM",
                    ours / theirs if ours and theirs else None,
                    1.0,
                    "x",
                )
            )
    return checks


def targets_markdown(checks: list[dict[str, Any]]) -> list[str]:
    """Markdown table of :func:`targets`."""
    lines = ["| target | value | goal | met |", "|---|---:|---:|---|"]
    for check in checks:
        value = "n/a" if check["value"] is None else f"{check['value']:.2f} {check['unit']}"
        goal = "(reported)" if check["goal"] == 0 else f">= {check['goal']:g} {check['unit']}"
        met = "" if check["goal"] == 0 else ("yes" if check["met"] else "**no**")
        lines.append(f"| {check['target']} | {value} | {goal} | {met} |")
    return lines

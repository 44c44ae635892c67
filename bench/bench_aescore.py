"""AES-CTR benchmark: aescore's backends against pycryptodome, cryptography and pyaes, in one process.

    python -m bench.bench_aescore [--quick] [--json PATH]

Cases (every figure is the median over many repetitions, each timing an auto-ranged number of calls, as
``timeit`` does, all taken in the same run so the ratios compare like with like on a shared machine):

* ``crypto_pyaes``: one iteration of pyperformance's crypto_pyaes benchmark: a new cipher (key expansion)
  to encrypt the 23,000-byte text and another to decrypt it. aescore runs it through ``aescore.compat.pyaes``
  (mode ``pyaes_compat``, the benchmark unchanged) and through the backend API (mode ``backend_api``).
* ``throughput``: one call on ``size`` bytes with a key expanded (cipher created) beforehand, writing into a
  preallocated buffer (mode ``into``) or returning new bytes (mode ``bytes``). pyaes has no ``into``.
* ``threads``: 64 MiB into a buffer with the aesni backend limited to 1 and to 2 threads.
* ``cap`` and ``gcm`` (``bench/aescore_gcm.py``): the AES-128 and carry-less-multiply caps of this core from
  loops of independent instructions, and AES-GCM (aescore on aesni, cryptography's AESGCM) beside aescore's
  AES-CTR with and without HMAC-SHA256, AES-128 and AES-256, 64 B to 1 MiB.

The pure-Python libraries run only up to ``SLOW_MAX_SIZE`` bytes (pyaes) / 1 MiB (python backend) and with
fewer repetitions; the table says so.

JSON written (default ``bench/results/aescore.json``; ``bench/results/aescore-quick.json`` with ``--quick``)::

    {"cpu": str, "date": ISO-8601 UTC, "python": str, "quick": bool, "aesni": {backend info} | null,
     "gcm_targets": [{"target": str, "value": float | null, "goal": float, "unit": str, "met": bool}],
     "notes": [str], "results": [{"case": str, "library": str, "size": int (bytes per call),
       "mode": str, "median_s": float (seconds per call / per iteration), "bytes_per_s": float
       (size / median_s; crypto_pyaes counts the 46,000 bytes processed), "ratio_to_cryptography": float |
       null (cryptography's median_s / this median_s for the same case, size and mode: > 1 is faster),
       "repeat": int, "number": int}]}
"""

from __future__ import annotations

import argparse
import datetime
import functools
import gc
import json
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aescore
from aescore.compat import pyaes as pyaes_compat

from . import aescore_gcm

KEY = b"\xa1\xf6%\x8c\x87}_\xcd\x89dHE8\xbf\xc9,"
CLEARTEXT = b"This is a test. What could possibly go wrong? " * 500
COUNTER_ONE = (1).to_bytes(16, "big")
SIZES = (64, 1024, 16 * 1024, 1024 * 1024, 64 * 1024 * 1024)
SLOW_MAX_SIZE = 16 * 1024
PYTHON_MAX_SIZE = 1024 * 1024
DEFAULT_JSON = Path(__file__).parent / "results" / "aescore.json"
#: --quick results go elsewhere by default so ``make run`` does not overwrite the committed full results.
QUICK_JSON = Path(__file__).parent / "results" / "aescore-quick.json"

Call = Callable[[], object]


class Timer:
    """Median seconds per call over ``repeat`` repetitions of ``number`` calls (``number`` auto-ranged)."""

    def __init__(self, quick: bool) -> None:
        self.target_s = 0.005 if quick else 0.04  # minimum duration of one repetition
        self.repeat = 5 if quick else 15
        self.slow_repeat = 3 if quick else 5

    def measure(self, call: Call, slow: bool = False) -> tuple[float, int, int]:
        call()  # warm up (caches, lazily built tables)
        number = 1
        while True:
            elapsed = self._run(call, number)
            if elapsed >= self.target_s or number >= 1 << 20:
                break
            number *= 2 if elapsed > self.target_s / 10 else 10
        repeat = self.slow_repeat if slow or elapsed > 1.0 else self.repeat
        samples = [elapsed / number] + [self._run(call, number) / number for _ in range(repeat - 1)]
        return statistics.median(samples), repeat, number

    @staticmethod
    def _run(call: Call, number: int) -> float:
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            start = time.perf_counter()
            for _ in range(number):
                call()
            return time.perf_counter() - start
        finally:
            if gc_was_enabled:
                gc.enable()


def _aescore_backends() -> dict[str, aescore.Backend]:
    return {
        name: aescore.get_backend(name)
        for name in ("aesni", "python")
        if aescore.available_backends().get(name, "") is None
    }


def crypto_pyaes_calls() -> dict[tuple[str, str], tuple[Call, bool]]:
    """(library, mode) -> (one crypto_pyaes iteration, is it a slow pure-Python library)."""
    calls: dict[tuple[str, str], tuple[Call, bool]] = {}
    for name, backend in _aescore_backends().items():

        def compat(backend: aescore.Backend = backend) -> None:
            ciphertext = pyaes_compat.AESModeOfOperationCTR(KEY, backend=backend).encrypt(CLEARTEXT)
            pyaes_compat.AESModeOfOperationCTR(KEY, backend=backend).decrypt(ciphertext)

        def compat_default() -> None:  # exactly the benchmark's code: no backend argument
            ciphertext = pyaes_compat.AESModeOfOperationCTR(KEY).encrypt(CLEARTEXT)
            pyaes_compat.AESModeOfOperationCTR(KEY).decrypt(ciphertext)

        def api(backend: aescore.Backend = backend) -> None:
            ciphertext = backend.ctr_xor(backend.expand_key(KEY), COUNTER_ONE, CLEARTEXT)
            assert ciphertext is not None
            backend.ctr_xor(backend.expand_key(KEY), COUNTER_ONE, ciphertext)

        default = backend is aescore.get_backend()
        calls[(name, "pyaes_compat")] = (compat_default if default else compat, name == "python")
        calls[(name, "backend_api")] = (api, name == "python")
    try:
        from Crypto.Cipher import AES

        def pycryptodome() -> None:
            ciphertext = AES.new(KEY, AES.MODE_CTR, nonce=b"", initial_value=1).encrypt(CLEARTEXT)
            AES.new(KEY, AES.MODE_CTR, nonce=b"", initial_value=1).decrypt(ciphertext)

        calls[("pycryptodome", "native")] = (pycryptodome, False)
    except ImportError:
        pass
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        def cryptography() -> None:
            encryptor = Cipher(algorithms.AES(KEY), modes.CTR(COUNTER_ONE)).encryptor()
            ciphertext = encryptor.update(CLEARTEXT) + encryptor.finalize()
            decryptor = Cipher(algorithms.AES(KEY), modes.CTR(COUNTER_ONE)).decryptor()
            decryptor.update(ciphertext) + decryptor.finalize()

        calls[("cryptography", "native")] = (cryptography, False)
    except ImportError:
        pass
    try:
        import pyaes

        def pyaes_iteration() -> None:
            ciphertext = pyaes.AESModeOfOperationCTR(KEY).encrypt(CLEARTEXT)
            pyaes.AESModeOfOperationCTR(KEY).decrypt(ciphertext)

        calls[("pyaes", "native")] = (pyaes_iteration, True)
    except ImportError:
        pass
    return calls


def throughput_calls(size: int, mode: str) -> dict[str, tuple[Call, bool]]:
    """library -> (one call on ``size`` bytes, slow) with the key expanded / cipher created beforehand."""
    data = bytes(size)
    out = bytearray(size + 15)  # cryptography's update_into wants room for a block more
    calls: dict[str, tuple[Call, bool]] = {}
    for name, backend in _aescore_backends().items():
        if name == "python" and size > PYTHON_MAX_SIZE:
            continue
        expanded = backend.expand_key(KEY)
        view = memoryview(out)[:size]
        arguments = (
            (expanded, COUNTER_ONE, data, 0, view) if mode == "into" else (expanded, COUNTER_ONE, data)
        )
        calls[name] = (functools.partial(backend.ctr_xor, *arguments), name == "python")
    try:
        from Crypto.Cipher import AES

        cipher = AES.new(KEY, AES.MODE_CTR, nonce=b"", initial_value=0)
        view = memoryview(out)[:size]
        calls["pycryptodome"] = (
            (lambda: cipher.encrypt(data, output=view)) if mode == "into" else (lambda: cipher.encrypt(data)),
            False,
        )
    except ImportError:
        pass
    try:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

        encryptor = Cipher(algorithms.AES(KEY), modes.CTR(bytes(16))).encryptor()
        calls["cryptography"] = (
            (lambda: encryptor.update_into(data, out))
            if mode == "into"
            else (lambda: encryptor.update(data)),
            False,
        )
    except ImportError:
        pass
    if mode == "bytes" and size <= SLOW_MAX_SIZE:
        try:
            import pyaes

            stream = pyaes.AESModeOfOperationCTR(KEY)
            calls["pyaes"] = (lambda: stream.encrypt(data), True)
        except ImportError:
            pass
    return calls


def cpu_model() -> str:
    """The first CPU's model name from /proc/cpuinfo, with its family/model numbers (virtual machines often
    report only a vendor name such as "AMD EPYC"; family 25 model 17 then still tells a Zen 4)."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if not line.strip():
                break  # end of the first processor's block
            name, _, value = line.partition(":")
            fields.setdefault(name.strip(), value.strip())
    except OSError:
        pass
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    numbers = ", ".join(
        f"{key} {fields[key]}" for key in ("cpu family", "model", "stepping") if key in fields
    )
    return f"{fields['model name']} ({numbers})" if numbers else fields["model name"]


def run(quick: bool, progress: Callable[[str], None], sizes: tuple[int, ...] = SIZES) -> dict[str, Any]:
    """Measure every case and return the report (the JSON document described in the module docstring)."""
    timer = Timer(quick)
    results: list[dict[str, Any]] = []
    notes = [
        f"pyaes runs only up to {_human_size(SLOW_MAX_SIZE)} and the python backend up to "
        f"{_human_size(PYTHON_MAX_SIZE)}, both with {timer.slow_repeat} repetitions; "
        "pyaes has no write-into-buffer API.",
        "ratio_to_cryptography = cryptography's time / this time, same case, size and mode (> 1: faster).",
    ]

    def record(case: str, library: str, size: int, mode: str, call: Call, slow: bool, processed: int) -> None:
        progress(f"{case} {library} {mode} {size}")
        median, repeat, number = timer.measure(call, slow)
        row = {"case": case, "library": library, "size": size, "mode": mode, "median_s": median}
        row.update(bytes_per_s=processed / median, ratio_to_cryptography=None, repeat=repeat, number=number)
        results.append(row)

    for (library, mode), (call, slow) in crypto_pyaes_calls().items():
        record("crypto_pyaes", library, len(CLEARTEXT), mode, call, slow, 2 * len(CLEARTEXT))
    for size in sizes:
        for mode in ("into", "bytes"):
            for library, (call, slow) in throughput_calls(size, mode).items():
                record("throughput", library, size, mode, call, slow, size)
    if aescore.available_backends().get("aesni") is None:
        from aescore.ctr._aesni import AesniBackend

        size = sizes[-1]
        data, out = bytes(size), bytearray(size)
        for threads in (1, 2):
            backend = AesniBackend(threads=threads)
            expanded = backend.expand_key(KEY)
            call = functools.partial(backend.ctr_xor, expanded, COUNTER_ONE, data, 0, out)
            record(
                "threads", "aesni", size, f"into, {threads} thread{'s' * (threads > 1)}", call, False, size
            )

    for (isa, kind), (call, nbytes) in aescore_gcm.cap_calls(quick).items():
        record("cap", f"aesni/{isa}", nbytes, kind, call, False, nbytes)
    for key_mode in aescore_gcm.KEYS:
        for size in aescore_gcm.GCM_SIZES:
            for library, call in aescore_gcm.gcm_calls(size, key_mode).items():
                record("gcm", library, size, key_mode, call, False, size)

    baseline = {
        (r["case"], r["size"], r["mode"]): r["median_s"] for r in results if r["library"] == "cryptography"
    }
    native = baseline.get(("crypto_pyaes", len(CLEARTEXT), "native"))
    if native:  # aescore's two ways through the crypto_pyaes iteration compare with cryptography's one
        baseline.update(
            {("crypto_pyaes", len(CLEARTEXT), mode): native for mode in ("pyaes_compat", "backend_api")}
        )
    for r in results:
        key = (
            (r["case"], r["size"], r["mode"]) if r["case"] != "threads" else ("throughput", r["size"], "into")
        )
        if baseline.get(key):
            r["ratio_to_cryptography"] = baseline[key] / r["median_s"]
    aesni_info = (
        aescore.get_backend("aesni").info() if aescore.available_backends().get("aesni") is None else None
    )
    return {
        "cpu": cpu_model(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "quick": quick,
        "aesni": aesni_info,
        "gcm_targets": aescore_gcm.targets(results, None if aesni_info is None else str(aesni_info["isa"])),
        "notes": notes,
        "results": results,
    }


def _human_size(size: int) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}"
    return f"{size} B"


def _human_time(seconds: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def markdown(report: dict[str, Any]) -> str:
    lines = [
        f"AES-CTR, {report['cpu']}, Python {report['python']}, {report['date']}"
        + (" (--quick: fewer repetitions)" if report["quick"] else ""),
        "",
        "| case | size | library | mode | median | throughput | vs cryptography |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in report["results"]:
        ratio = r["ratio_to_cryptography"]
        cells = [r["case"], _human_size(r["size"]), r["library"], r["mode"], _human_time(r["median_s"])]
        cells += [f"{r['bytes_per_s'] / 1e9:.3g} GB/s", "" if ratio is None else f"{ratio:.3g}x"]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", *(f"- {note}" for note in report["notes"])]
    if report["aesni"]:
        lines.append(f"- aesni backend: {report['aesni']}")
    lines += ["", "AES-GCM targets (one run):", "", *aescore_gcm.targets_markdown(report["gcm_targets"])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer and shorter repetitions (under a minute)")
    parser.add_argument(
        "--json", type=Path, help=f"JSON path (default {DEFAULT_JSON}; --quick: {QUICK_JSON})"
    )
    args = parser.parse_args(argv)
    if args.json is None:
        args.json = QUICK_JSON if args.quick else DEFAULT_JSON
    report = run(args.quick, progress=lambda text: print(f"  measuring {text}", file=sys.stderr, flush=True))
    print(markdown(report))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    temporary = args.json.with_suffix(".tmp")
    temporary.write_text(json.dumps(report, indent=1) + "\n")
    temporary.replace(args.json)
    print(f"\nwrote {args.json}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Micro-benchmark of the aesni backend against cryptography and pycryptodome, in one process.

Not the project benchmark (that is ``bench/bench_aescore.py``): this one exists to tune the aesni backend's
paths. Every figure is a median over repetitions taken in the same run, so ratios are comparable even on a
noisy shared machine.

    .venv/bin/python -m bench.aesni_micro [--quick]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time
from collections.abc import Callable

from Crypto.Cipher import AES
from Crypto.Util import Counter
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

import aescore.ctr._aesni as aesni

KEY = b"\xa1\xf6%\x8c\x87}_\xcd\x89dHE8\xbf\xc9,"
PLAINTEXT = b"This is a test. What could possibly go wrong? " * 500
COUNTER_ONE = (1).to_bytes(16, "big")


def medians(functions: dict[str, Callable[[], object]], repeat: int, number: int) -> dict[str, float]:
    """Median over ``repeat`` rounds of the mean time of ``number`` calls, per function.

    The functions take turns inside every round, so a burst of load from other jobs hits all of them alike
    and the ratios stay fair even when the absolute figures do not.
    """
    samples: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(repeat):
        for name, function in functions.items():
            start = time.perf_counter()
            for _ in range(number):
                function()
            samples[name].append((time.perf_counter() - start) / number)
    return {name: statistics.median(values) for name, values in samples.items()}


def crypto_pyaes_aesni(backend: aesni.AesniBackend) -> Callable[[], object]:
    def run() -> object:
        encrypted = backend.ctr_xor(backend.expand_key(KEY), COUNTER_ONE, PLAINTEXT)
        assert encrypted is not None
        return backend.ctr_xor(backend.expand_key(KEY), COUNTER_ONE, encrypted)

    return run


def crypto_pyaes_cryptography() -> object:
    encryptor = Cipher(algorithms.AES(KEY), modes.CTR(COUNTER_ONE)).encryptor()
    encrypted = encryptor.update(PLAINTEXT) + encryptor.finalize()
    decryptor = Cipher(algorithms.AES(KEY), modes.CTR(COUNTER_ONE)).decryptor()
    return decryptor.update(encrypted) + decryptor.finalize()


def crypto_pyaes_pycryptodome() -> object:
    encrypted = AES.new(KEY, AES.MODE_CTR, counter=Counter.new(128, initial_value=1)).encrypt(PLAINTEXT)
    return AES.new(KEY, AES.MODE_CTR, counter=Counter.new(128, initial_value=1)).decrypt(encrypted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions")
    args = parser.parse_args()
    scale = 0.2 if args.quick else 1.0

    def reps(count: int) -> int:
        return max(3, int(count * scale))

    print(f"aesni paths: {aesni.supported_isas()}, default {aesni.get_isa()}, threads {aesni.get_threads()}")

    isas = aesni.supported_isas()
    single = {isa: aesni.AesniBackend(isa=isa, threads=1) for isa in isas}

    # (a) crypto_pyaes iteration
    timings = medians(
        {"cryptography": crypto_pyaes_cryptography, "pycryptodome": crypto_pyaes_pycryptodome}
        | {isa: crypto_pyaes_aesni(single[isa]) for isa in isas},
        reps(101),
        50,
    )
    crypto, dome = timings["cryptography"], timings["pycryptodome"]
    print(f"\ncrypto_pyaes iteration: cryptography {crypto * 1e6:.2f} us, pycryptodome {dome * 1e6:.2f} us")
    for isa in isas:
        ours = timings[isa]
        print(
            f"  aesni/{isa:8s} {ours * 1e6:6.2f} us   x{crypto / ours:5.2f} vs cryptography"
            f"   x{dome / ours:5.2f} vs pycryptodome"
        )

    # (b) 64 B per call, reused objects
    small, buffer = bytes(64), bytearray(64)
    encryptor = Cipher(algorithms.AES(KEY), modes.CTR(COUNTER_ONE)).encryptor()
    calls: dict[str, Callable[[], object]] = {"cryptography": functools.partial(encryptor.update, small)}
    for isa in isas:
        expanded = single[isa].expand_key(KEY)
        calls[f"{isa} bytes"] = functools.partial(single[isa].ctr_xor, expanded, COUNTER_ONE, small)
        calls[f"{isa} into"] = functools.partial(single[isa].ctr_xor, expanded, COUNTER_ONE, small, 0, buffer)
    timings = medians(calls, reps(101), 2000)
    crypto_small = timings["cryptography"]
    print(f"\n64 B per call: cryptography update() {crypto_small * 1e9:.0f} ns")
    for isa in isas:
        ours, into = timings[f"{isa} bytes"], timings[f"{isa} into"]
        print(
            f"  aesni/{isa:8s} {ours * 1e9:4.0f} ns (bytes)  {into * 1e9:4.0f} ns (into buffer)"
            f"   x{crypto_small / ours:4.2f} vs cryptography"
        )

    # (c) 1 MiB into a preallocated buffer, one thread
    mebi = bytes(1 << 20)
    out = bytearray(len(mebi))
    for key_bytes in (16, 32):
        key = bytes(range(key_bytes))
        encryptor = Cipher(algorithms.AES(key), modes.CTR(COUNTER_ONE)).encryptor()
        calls = {"cryptography": functools.partial(encryptor.update_into, mebi, out)}
        for isa in isas:
            calls[isa] = functools.partial(
                single[isa].ctr_xor, single[isa].expand_key(key), COUNTER_ONE, mebi, 0, out
            )
        timings = medians(calls, reps(41), 10)
        crypto_rate = len(mebi) / timings["cryptography"] / 1e9
        print(f"\n1 MiB into buffer, AES-{key_bytes * 8}: cryptography {crypto_rate:.2f} GB/s")
        for isa in isas:
            print(
                f"  aesni/{isa:8s} {len(mebi) / timings[isa] / 1e9:6.2f} GB/s"
                f"   x{timings['cryptography'] / timings[isa]:4.2f} vs cryptography"
            )

    # (d) 1 vs 2 threads on the default path, around and far above the split threshold
    print("\nthreads (default path):")
    for size in (8 << 20, 64 << 20):
        data, target = bytes(size), bytearray(size)
        calls = {}
        for threads in (1, 2):
            backend = aesni.AesniBackend(threads=threads)
            calls[str(threads)] = functools.partial(
                backend.ctr_xor, backend.expand_key(KEY), COUNTER_ONE, data, 0, target
            )
        timings = medians(calls, reps(31), 1 if size > 8 << 20 else 4)
        print(
            f"  {size >> 20:3d} MiB: 1 thread {size / timings['1'] / 1e9:6.2f} GB/s, "
            f"2 threads {size / timings['2'] / 1e9:6.2f} GB/s, x{timings['1'] / timings['2']:4.2f}"
        )


if __name__ == "__main__":
    main()

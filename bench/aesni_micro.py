"""Micro-benchmark of the aesni backend against cryptography and pycryptodome, in one process.

Not the project benchmark (that is ``bench/bench_aescore.py``): this one exists to tune the aesni backend's
paths. Every figure is a median over repetitions taken in the same run, so ratios are comparable even on a
noisy shared machine.

    .venv/bin/python -m bench.aesni_micro [--quick]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from Crypto.Cipher import AES
from Crypto.Util import Counter
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

import aescore._aesni as aesni

KEY = b"\xa1\xf6%\x8c\x87}_\xcd\x89dHE8\xbf\xc9,"
PLAINTEXT = b"This is a test. What could possibly go wrong? " * 500
COUNTER_ONE = (1).to_bytes(16, "big")


def median_seconds(function: Callable[[], object], repeat: int, number: int) -> float:
    """Median over ``repeat`` samples of the mean time of ``number`` calls."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            function()
        samples.append((time.perf_counter() - start) / number)
    return statistics.median(samples)


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

    # (a) crypto_pyaes iteration
    crypto = median_seconds(crypto_pyaes_cryptography, reps(201), 200)
    dome = median_seconds(crypto_pyaes_pycryptodome, reps(51), 50)
    print(f"\ncrypto_pyaes iteration: cryptography {crypto * 1e6:.2f} us, pycryptodome {dome * 1e6:.2f} us")
    for isa in aesni.supported_isas():
        backend = aesni.AesniBackend(isa=isa, threads=1)
        ours = median_seconds(crypto_pyaes_aesni(backend), reps(201), 200)
        print(
            f"  aesni/{isa:8s} {ours * 1e6:6.2f} us   x{crypto / ours:5.2f} vs cryptography"
            f"   x{dome / ours:5.2f} vs pycryptodome"
        )

    # (b) 64 B per call, reused objects
    small = bytes(64)
    encryptor = Cipher(algorithms.AES(KEY), modes.CTR(COUNTER_ONE)).encryptor()
    crypto_small = median_seconds(lambda: encryptor.update(small), reps(101), 2000)
    print(f"\n64 B per call: cryptography update() {crypto_small * 1e9:.0f} ns")
    for isa in aesni.supported_isas():
        backend = aesni.AesniBackend(isa=isa, threads=1)
        expanded = backend.expand_key(KEY)
        ctr_xor = backend.ctr_xor
        ours = median_seconds(lambda: ctr_xor(expanded, COUNTER_ONE, small), reps(101), 2000)  # noqa: B023
        buffer = bytearray(64)
        into = median_seconds(lambda: ctr_xor(expanded, COUNTER_ONE, small, 0, buffer), reps(101), 2000)  # noqa: B023
        print(
            f"  aesni/{isa:8s} {ours * 1e9:4.0f} ns (bytes)  {into * 1e9:4.0f} ns (into buffer)"
            f"   x{crypto_small / ours:4.2f} vs cryptography"
        )

    # (c) 1 MiB into a preallocated buffer, one thread
    mebi = bytes(1 << 20)
    out = bytearray(len(mebi))
    encryptor = Cipher(algorithms.AES(KEY), modes.CTR(COUNTER_ONE)).encryptor()
    crypto_mib = median_seconds(lambda: encryptor.update_into(mebi, out), reps(41), 20)
    print(f"\n1 MiB into buffer: cryptography {len(mebi) / crypto_mib / 1e9:.2f} GB/s")
    for isa in aesni.supported_isas():
        backend = aesni.AesniBackend(isa=isa, threads=1)
        expanded = backend.expand_key(KEY)
        for key_bytes in (16, 32):
            expanded = backend.expand_key(bytes(range(key_bytes)))
            ours = median_seconds(
                lambda: backend.ctr_xor(expanded, COUNTER_ONE, mebi, 0, out),  # noqa: B023
                reps(41),
                20,
            )
            print(
                f"  aesni/{isa:8s} AES-{key_bytes * 8} {len(mebi) / ours / 1e9:6.2f} GB/s"
                f"   x{crypto_mib / ours:4.2f} vs cryptography"
            )

    # (d) 64 MiB, 1 vs 2 threads (and the mid sizes where the thread split starts)
    print("\nthreads (default path):")
    for size in (2 << 20, 4 << 20, 64 << 20):
        data = bytes(size)
        target = bytearray(size)
        timings = {}
        for threads in (1, 2):
            backend = aesni.AesniBackend(threads=threads)
            expanded = backend.expand_key(KEY)
            timings[threads] = median_seconds(
                lambda: backend.ctr_xor(expanded, COUNTER_ONE, data, 0, target),  # noqa: B023
                reps(15 if size > 8 << 20 else 41),
                1 if size > 8 << 20 else 10,
            )
        print(
            f"  {size >> 20:3d} MiB: 1 thread {size / timings[1] / 1e9:6.2f} GB/s, "
            f"2 threads {size / timings[2] / 1e9:6.2f} GB/s, x{timings[1] / timings[2]:4.2f}"
        )


if __name__ == "__main__":
    main()

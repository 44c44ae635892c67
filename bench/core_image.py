"""Which key material a core image of a running server holds, byte for byte: before and after a wipe.

Starts a server (``KEYSTREAM_WORKERS`` workers, a random master key), creates ``keys`` keys through the API,
encrypts and decrypts 1 KiB and 200 KiB (streamed) with each, then takes a core image of every process of the
server with gdb's ``gcore`` (as root: root's ptrace works on the non-dumpable workers, so core dumps stay
off, as in production) and counts how many of the keys' materials, and whether the master key, appear in
the images, and how many of the messages' derived keys (each message's AES and HMAC keys, computed here from
its salt) do. With ``wipe``, it then sends ``SIGUSR2`` to every worker (``KEYSTREAM_TESTING_WIPE_ON_SIGUSR2``:
the worker zeroes its cached key versions and closes its seal, which is what sealing does to memory) and
counts again. The materials are read from the keystore by this process, which opens it with the master key.

With ``backend="python"`` every encrypt and decrypt asks for ``?backend=python``: the pure-Python core runs
in each worker's process pool (``KEYSTREAM_PYTHON_BACKEND_PROCESSES``, default 1), whose processes are imaged
too (``pool_workers`` counts them); the wipe stops them.

With ``seal="shamir"`` the server (one worker: a shamir server unseals one process) starts sealed from
an ``operator init --shares 3 --threshold 2``, is unsealed with two shares through ``POST /v1/sys/unseal``,
and "after" is the real ``POST /v1/sys/seal``; the master key searched for is rebuilt from the shares here.

``python -m bench.core_image [--keys N] [--workers N] [--seal file|shamir] [--backend aesni|python]
[--no-wipe]`` prints the counts
as JSON; run from another checkout (``PYTHONPATH=<checkout>``) it measures that code (without ``--no-wipe``
only where the testing trigger exists). Needs root and ``gcore`` (Debian's ``gdb``).
"""

from __future__ import annotations

import argparse
import base64
import json
import mmap
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import psutil

from bench.service_process import REPO, ROOT_TOKEN, Server, start_server, stop_server

PLAINTEXT_SMALL = 1024
PLAINTEXT_STREAMED = 200 * 1024


@dataclass(frozen=True)
class Counts:
    """What the core images of one moment hold: of ``versions`` known materials, how many appear."""

    versions_found: int
    versions: int
    master_key_found: bool
    processes: int
    image_bytes: int
    #: Of ``processes``, the python backend's pool workers (``multiprocessing`` spawn children).
    pool_workers: int = 0
    #: Of ``derived`` messages' per-message keys (AES and HMAC, derived from each ciphertext's salt), how
    #: many messages have either found.
    derived_found: int = 0
    derived: int = 0


def _server_processes(server: Server) -> list[int]:
    """The server's process and every process under it (the supervisor and its workers)."""
    root = psutil.Process(server.process.pid)
    processes = [root, *root.children(recursive=True)]
    return [process.pid for process in processes if process.status() != psutil.STATUS_ZOMBIE]


def _pool_workers(server: Server, workers: int) -> list[int]:
    """The python backend's pool processes: ``multiprocessing`` spawn children of the serving workers (the
    workers themselves are spawn children of the supervisor; each pool's resource tracker is not counted)."""
    pool = []
    for worker in _workers(server, workers):
        for child in psutil.Process(worker).children():
            try:
                if child.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(child.cmdline()):
                    pool.append(child.pid)
            except psutil.NoSuchProcess:
                continue
    return pool


def _wait_for_pool_exit(server: Server, workers: int, timeout: float = 20.0) -> None:
    """Wait until the pool workers a wipe stopped have exited (it stops them without waiting).

    Raises:
        RuntimeError: some are still running after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while _pool_workers(server, workers):
        if time.monotonic() > deadline:
            raise RuntimeError("the python backend's pool workers did not exit after the wipe")
        time.sleep(0.1)


def _workers(server: Server, count: int) -> list[int]:
    """The ``count`` processes serving requests: the supervisor's children, or with one worker the server
    process itself (whose children are then its python-backend pool)."""
    if count == 1:
        return [server.process.pid]
    children = psutil.Process(server.process.pid).children()
    return [child.pid for child in children if child.status() != psutil.STATUS_ZOMBIE]


def take_images(pids: list[int], directory: Path) -> list[Path]:
    """``gcore`` every process in ``pids`` into ``directory``.

    Raises:
        RuntimeError: ``gcore`` is missing or failed (it needs root, or ptrace rights over the process).
    """
    gcore = shutil.which("gcore")
    if gcore is None:
        raise RuntimeError("gcore not found: install Debian's gdb (scripts/install-tools.sh does)")
    images = []
    for pid in pids:
        prefix = directory / "core"
        done = subprocess.run(
            [gcore, "-o", str(prefix), str(pid)], capture_output=True, text=True, timeout=300
        )
        image = Path(f"{prefix}.{pid}")
        if done.returncode != 0 or not image.exists():
            raise RuntimeError(f"gcore {pid} failed ({done.returncode}): {done.stderr[-1000:]}")
        images.append(image)
    return images


def find_needles(data: bytes | bytearray | memoryview | mmap.mmap, needles: list[bytes]) -> set[int]:
    """The indexes of ``needles`` (each at least 4 bytes) that occur byte for byte anywhere in ``data``.

    One pass for all needles instead of one ``find`` per needle (100 finds over 770 MB of images took
    141 s): each needle is looked for by one 4-byte window of its own, its anchor. A table of the anchors'
    first two bytes picks candidate offsets (even and odd offsets read as zero-copy ``uint16`` views), their
    next two bytes narrow them to the anchors, and only those needles are compared whole.

    The anchor is the window whose first two bytes are rarest in ``data`` (:func:`_anchor`): core images are
    mostly zero pages, and a random key that happened to start with ``00 00`` made every other offset a
    candidate (one core-image test took 8 minutes and 11 GB instead of 20 s).
    """
    if any(len(needle) < 4 for needle in needles):
        raise ValueError("every needle must be at least 4 bytes long")
    view = memoryview(data).cast("B")
    octets = np.frombuffer(view, dtype=np.uint8)
    # How common each 2-byte value is, from every 64th even offset (a full count copies the data as int64).
    sampled = np.frombuffer(view[: len(view) // 2 * 2], dtype="<u2")[::64]
    pair_counts = np.bincount(sampled, minlength=65536)
    by_window: dict[bytes, list[tuple[int, int]]] = {}
    for index, needle in enumerate(needles):
        at = _anchor(needle, pair_counts)
        by_window.setdefault(needle[at : at + 4], []).append((index, at))
    first = np.zeros(65536, dtype=bool)
    first[[int.from_bytes(window[:2], "little") for window in by_window]] = True
    windows = np.array(sorted(int.from_bytes(window, "little") for window in by_window), dtype=np.uint32)
    found: set[int] = set()
    for parity in (0, 1):
        pairs = np.frombuffer(view[parity : parity + (len(view) - parity) // 2 * 2], dtype="<u2")
        offsets = parity + 2 * np.flatnonzero(first[pairs])
        offsets = offsets[offsets + 4 <= len(view)]
        words = (
            octets[offsets].astype(np.uint32)
            | octets[offsets + 1].astype(np.uint32) << 8
            | octets[offsets + 2].astype(np.uint32) << 16
            | octets[offsets + 3].astype(np.uint32) << 24
        )
        for offset in offsets[np.isin(words, windows)].tolist():
            for index, at in by_window[bytes(view[offset : offset + 4])]:
                begin = offset - at
                if (
                    index not in found
                    and begin >= 0
                    and view[begin : begin + len(needles[index])] == needles[index]
                ):
                    found.add(index)
    return found


def _anchor(needle: bytes, pair_counts: npt.NDArray[np.intp]) -> int:
    """Where in ``needle`` the 4-byte window starts whose first two bytes (little-endian ``uint16``) are
    rarest by ``pair_counts`` (occurrences of each value in a sample of the data searched)."""
    return min(
        range(len(needle) - 3), key=lambda at: int(pair_counts[int.from_bytes(needle[at : at + 2], "little")])
    )


def count_in_images(
    images: list[Path],
    materials: list[bytes],
    master_key: bytes,
    pool_workers: int = 0,
    derived: list[tuple[bytes, bytes]] | None = None,
) -> Counts:
    """How many of ``materials`` (and whether ``master_key``), and of the messages' ``derived`` (AES key, HMAC
    key) pairs, appear byte for byte in any of ``images`` (``pool_workers`` of which are pool processes)."""
    derived = derived or []
    found: set[int] = set()
    total = 0
    needles = [*materials, master_key, *(key for pair in derived for key in pair)]
    for image in images:
        total += image.stat().st_size
        with image.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
            found |= find_needles(data, needles)
    master = len(materials) in found
    first = len(materials) + 1
    messages = {(index - first) // 2 for index in found if index >= first}
    versions = len({index for index in found if index < len(materials)})
    return Counts(
        versions, len(materials), master, len(images), total, pool_workers, len(messages), len(derived)
    )


def _derived_keys(material: bytes, ciphertext: bytes) -> tuple[bytes, bytes]:
    """A ``ctr-hmac`` message's AES and HMAC keys: HKDF-SHA256 of the version's material with the header's
    salt (no associated data), as the format derives them."""
    from Crypto.Hash import SHA256
    from Crypto.Protocol.KDF import HKDF

    size = ciphertext[0] - 1 - 7  # the header: its length, the salt (derived key size), the nonce prefix
    salt = ciphertext[1 : 1 + size]
    output = bytes(HKDF(material, size + 32, salt, SHA256, context=b""))
    return output[:size], output[size:]


def _use_keys(server: Server, names: list[str], backend: str) -> list[tuple[int, bytes]]:
    """Create each key, then encrypt and decrypt a small and a streamed message with it on ``backend``.

    Returns:
        (key index, ciphertext header) of every message, to derive its keys from.
    """
    params = {"backend": backend}
    headers: list[tuple[int, bytes]] = []
    with server.client() as client:
        for index, name in enumerate(names):
            key_type = ("aes256", "aes128")[index % 2]
            created = client.post("/v1/keys", json={"name": name, "type": key_type, "segment_size": 65536})
            assert created.status_code == 201, created.text
            for size in (PLAINTEXT_SMALL, PLAINTEXT_STREAMED):
                plaintext = os.urandom(size)
                sealed = client.post(f"/v1/keys/{name}/encrypt", params=params, content=plaintext)
                assert sealed.status_code == 200, sealed.text
                opened = client.post(f"/v1/keys/{name}/decrypt", params=params, content=sealed.content)
                assert opened.status_code == 200 and opened.content == plaintext, opened.text
                headers.append((index, sealed.content[:64]))
    return headers


def _known_materials(data_dir: Path, master_key: bytes, names: list[str], seal: str) -> list[bytes]:
    """Every key's version 1 material, read from the keystore with the master key (in this process)."""
    from app.core.config import Settings
    from app.keystore import open_keystore_for
    from app.seal.shamir import ShamirSeal

    settings = Settings(data_dir=data_dir, master_key=base64.b64encode(master_key).decode())
    store = open_keystore_for(settings, ShamirSeal(master_key) if seal == "shamir" else master_key)
    try:
        return [bytes(store.key_material(name, 1)) for name in names]
    finally:
        store.close()


def _shamir_init(data_dir: Path) -> tuple[list[str], bytes]:
    """``operator init --shares 3 --threshold 2``: the shares, and the master key they rebuild."""
    from app.seal.shares import combine_shares, decode_share

    environment = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    environment.update(
        {"KEYSTREAM_SEAL": "shamir", "KEYSTREAM_DATA_DIR": str(data_dir), "KEYSTREAM_ROOT_TOKEN": ROOT_TOKEN}
    )
    command = [
        sys.executable,
        "-m",
        "app.admin",
        "operator",
        "init",
        "--shares",
        "3",
        "--threshold",
        "2",
        "--json",
    ]
    done = subprocess.run(command, cwd=REPO, env=environment, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"operator init failed: {done.stderr[-1000:]}")
    shares: list[str] = json.loads(done.stdout)["shares"]
    return shares, bytes(combine_shares([decode_share(text) for text in shares[:2]]))


def measure(
    workdir: Path,
    *,
    keys: int = 100,
    workers: int = 2,
    wipe: bool = True,
    seal: str = "file",
    backend: str = "aesni",
) -> dict[str, Counts]:
    """Counts ``before`` (keys in use) and, with ``wipe``, ``after`` every worker wiped its secrets.

    Raises:
        RuntimeError: the server did not start or unseal, ``gcore`` failed, or the pool workers did not
            exit after the wipe.
    """
    env = {"KEYSTREAM_WORKERS": str(workers), "KEYSTREAM_KEY_CACHE_SIZE": str(max(1024, keys))}
    if backend != "aesni":
        env["KEYSTREAM_ENABLED_BACKENDS"] = f"aesni,{backend}"
    shares: list[str] = []
    if seal == "shamir":
        shares, master_key = _shamir_init(workdir / "data")
        env |= {"KEYSTREAM_SEAL": "shamir", "KEYSTREAM_WORKERS": "1"}
    else:
        master_key = os.urandom(32)
        env["KEYSTREAM_MASTER_KEY"] = base64.b64encode(master_key).decode()
        if wipe:
            env["KEYSTREAM_TESTING_WIPE_ON_SIGUSR2"] = "true"
    server = start_server(workdir / "data", workdir / "server.log", settings=env)
    results: dict[str, Counts] = {}
    try:
        with server.client() as client:
            for share in shares[:2]:
                unsealed = client.post("/v1/sys/unseal", json={"key": share})
                if unsealed.status_code != 200:
                    raise RuntimeError(f"unseal failed: {unsealed.text}")
        names = [f"core-image-{index:03d}" for index in range(keys)]
        headers = _use_keys(server, names, backend)
        materials = _known_materials(workdir / "data", master_key, names, seal)
        derived = [_derived_keys(materials[index], header) for index, header in headers]
        for moment in ("before", "after") if wipe else ("before",):
            if moment == "after" and seal == "shamir":
                with server.client() as client:
                    sealed = client.post("/v1/sys/seal")
                    if sealed.status_code != 200:
                        raise RuntimeError(f"seal failed: {sealed.text}")
            elif moment == "after":
                for pid in _workers(server, int(env["KEYSTREAM_WORKERS"])):
                    os.kill(pid, signal.SIGUSR2)
                time.sleep(1.0)  # the handler runs on each worker's event loop at once
            if moment == "after":
                _wait_for_pool_exit(server, int(env["KEYSTREAM_WORKERS"]))
            images_dir = Path(tempfile.mkdtemp(prefix=f"images-{moment}-", dir=workdir))
            try:
                pids = _server_processes(server)
                pool_workers = len(set(_pool_workers(server, int(env["KEYSTREAM_WORKERS"]))) & set(pids))
                images = take_images(pids, images_dir)
                results[moment] = count_in_images(images, materials, master_key, pool_workers, derived)
            finally:
                shutil.rmtree(images_dir, ignore_errors=True)
    finally:
        stop_server(server)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--seal", choices=("file", "shamir"), default="file")
    parser.add_argument("--backend", choices=("aesni", "python"), default="aesni")
    parser.add_argument("--no-wipe", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="core-image-") as workdir:
        results = measure(
            Path(workdir),
            keys=args.keys,
            workers=args.workers,
            wipe=not args.no_wipe,
            seal=args.seal,
            backend=args.backend,
        )
    print(json.dumps({moment: counts.__dict__ for moment, counts in results.items()}, indent=2))


if __name__ == "__main__":
    main()

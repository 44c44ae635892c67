"""Remake the web console's screenshots in the docs (``make ui-screenshots``).

    python -m scripts.console_screenshots [--load-seconds 90] [--out docs/img]

1. starts a real Keystream server (two workers, every usable backend) on a free 127.0.0.1 port
   (``bench.service_process``), with a few keys of different types and schemes, one rotated twice;
2. opens the console in Debian's headless Chromium (Playwright, 1280x800), signs in with the root token and
   opens the dashboard, while a short load encrypts and decrypts on ``aesni`` and ``python`` (16 KiB to
   256 KiB bodies, four times as many on aesni, and a few requests the service refuses, so the requests
   chart has a 4xx series);
3. once the dashboard has drawn non-zero throughput for both backends and the load has run its time, writes
   ``console-dashboard.png``; then ``console-keys.png``, the keys page.

The dashboard keeps 15 minutes: after a 90 s load its lines fill the right tenth of each chart. The
screenshots are not byte-reproducible (times, rates); look at them before committing them.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from playwright.sync_api import Page, ViewportSize, sync_playwright

from bench.service_process import ROOT_TOKEN, Server, start_server, stop_server
from keystream_client import KeystreamAPIError, KeystreamClient

REPO = Path(__file__).resolve().parents[1]
#: Debian's Chromium (``make tools``); Playwright's own browser download is not used.
CHROMIUM = "/usr/bin/chromium"
VIEWPORT = ViewportSize(width=1280, height=800)
#: The keys the keys page shows: (name, type, scheme, segment size, rotations).
KEYS = (
    ("invoices", "aes256", "ctr-hmac", 1 << 20, 2),
    ("backups", "aes256", "gcm", 4 << 20, 0),
    ("videos", "aes256", "gcm", 1 << 20, 1),
    ("webhooks", "aes128", "ctr-hmac", 4096, 0),
    ("tenant-42", "aes192", "ctr-hmac", 65536, 0),
)
#: Body sizes of the load, cycled.
SIZES = (16 << 10, 64 << 10, 256 << 10)


def create_keys(server: Server) -> None:
    """The keys of :data:`KEYS`, rotated as listed."""
    with KeystreamClient(server.url, ROOT_TOKEN) as client:
        for name, key_type, scheme, segment_size, rotations in KEYS:
            client.create_key(name, key_type=key_type, scheme=scheme, segment_size=segment_size)
            for _ in range(rotations):
                client.rotate_key(name)


def run_load(server: Server, stop: threading.Event) -> None:
    """Encrypt and decrypt on aesni and python until ``stop``, with one refused decrypt in every round."""
    data = os.urandom(max(SIZES))
    with KeystreamClient(server.url, ROOT_TOKEN) as client:
        round_number = 0
        while not stop.is_set():
            size = SIZES[round_number % len(SIZES)]
            # aesni does four times python's work: the two throughput lines part.
            for backend in ("aesni", "aesni", "aesni", "aesni", "python"):
                sealed = client.encrypt("invoices", data[:size], backend=backend).data
                client.decrypt("invoices", sealed, backend=backend)
            try:
                client.decrypt("videos", b"not a sealed message")
            except KeystreamAPIError:
                pass  # the 4xx series of the requests chart
            round_number += 1


def wait_for_series(page: Page, timeout_seconds: float) -> None:
    """Wait until the throughput chart shows a non-zero latest encrypt value for aesni and python.

    Raises:
        TimeoutError: the dashboard drew no such value in time (the load or the page is broken).
    """
    check = """() => ['aesni encrypt', 'python encrypt'].every((series) => {
      const cell = document.querySelector(`#chart-throughput tr[data-series='${series}'] .value`);
      return cell !== null && Number(cell.textContent) > 0;
    })"""
    deadline = time.monotonic() + timeout_seconds
    while not page.evaluate(check):
        if time.monotonic() > deadline:
            raise TimeoutError("the dashboard showed no throughput for aesni and python")
        page.wait_for_timeout(500)


def take_screenshots(out: Path, load_seconds: float) -> list[Path]:
    """Start a server, load it, and write the two screenshots into ``out``; their paths."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="keystream-screenshots-") as scratch:
        base = Path(scratch)
        server = start_server(base / "data", base / "server.log", KEYSTREAM_WORKERS="2")
        stop = threading.Event()
        loader = threading.Thread(target=run_load, args=(server, stop))
        try:
            create_keys(server)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                try:
                    page = browser.new_page(viewport=VIEWPORT)
                    page.goto(f"{server.url}/ui/")
                    page.fill("#token", ROOT_TOKEN)
                    page.get_by_role("button", name="Sign in", exact=True).click()
                    page.wait_for_selector("#sign-out")
                    page.goto(f"{server.url}/ui/#/dashboard")
                    started = time.monotonic()
                    loader.start()
                    wait_for_series(page, timeout_seconds=max(30.0, load_seconds))
                    page.wait_for_timeout(max(0.0, load_seconds - (time.monotonic() - started)) * 1000)
                    dashboard = out / "console-dashboard.png"
                    page.screenshot(path=dashboard)
                    page.goto(f"{server.url}/ui/#/keys")
                    page.wait_for_selector("#keys tbody tr >> nth=4")
                    keys = out / "console-keys.png"
                    page.screenshot(path=keys)
                finally:
                    browser.close()
        finally:
            stop.set()
            if loader.is_alive():
                loader.join()
            stop_server(server)
    return [dashboard, keys]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--load-seconds", type=float, default=90.0, help="how long the load runs (s)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "img", help="where the PNGs go")
    args = parser.parse_args(argv)
    for path in take_screenshots(args.out, args.load_seconds):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The floors bench/bench_peer.py measures Keystream against: the raw ASGI app runs under Keystream's own
supervisor with the workers asked for and answers a 1 KiB POST with 1 KiB; nginx (installed by make tools)
answers the same; and the peer report puts Keystream as a fraction of the raw-ASGI floor, with each server's
CPU per request."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import httpx
import psutil
import pytest

from bench import bench_peer, floor_app
from bench.service_process import REPO, free_port


def test_the_raw_asgi_floor_serves_under_the_supervisor_with_its_workers(tmp_path: Path) -> None:
    port = free_port()
    log = tmp_path / "floor.log"
    with log.open("wb") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", "bench.floor_app", "--port", str(port), "--workers", "2"],
            cwd=REPO,
            stdout=handle,
            stderr=subprocess.STDOUT,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        floor_app.wait_until_answering(url + "/", process, log)
        with httpx.Client(base_url=url) as client:
            for path in ("/v1/keys/bench/encrypt", "/anything"):
                answer = client.post(path, content=b"x" * 1024)
                assert answer.status_code == 200 and answer.content == floor_app.RESPONSE
            streamed = client.post("/", content=iter([b"a" * 70000, b"b" * 70000]))  # a body in pieces
            assert streamed.status_code == 200
        children = psutil.Process(process.pid).children()
        workers = [child for child in children if "spawn_main" in " ".join(child.cmdline())]
        assert len(workers) == 2, [child.cmdline() for child in children]
        assert "started 2 workers" in log.read_text()
    finally:
        process.terminate()
        assert process.wait(timeout=30) == 0, log.read_text()[-2000:]


def test_nginx_answers_like_the_raw_asgi_floor(tmp_path: Path) -> None:
    port = free_port()
    process = floor_app.start_nginx(tmp_path, port, 2)
    assert process is not None, "nginx missing: scripts/install-tools.sh (make tools) installs nginx-light"
    try:
        answer = httpx.post(f"http://127.0.0.1:{port}/v1/keys/bench/decrypt", content=b"y" * 1024)
        assert answer.status_code == 200 and answer.content == floor_app.RESPONSE
    finally:
        process.terminate()
        process.wait(timeout=30)


def _run(value: float, cpu: float) -> dict[str, float]:
    return {
        "value": value,
        "p99_ms": 1.0,
        "cpu_percent": cpu,
        "cpu_us_per_request": cpu / value * 1e4,
        "rss_mib": 50.0,
    }


def test_the_report_gives_keystream_as_a_fraction_of_the_raw_asgi_floor() -> None:
    workloads = [bench_peer.Workload(name, "req/s", 1, 16) for name in bench_peer.FLOOR_WORKLOADS]
    samples = {
        "1 KiB encrypt": {
            "keystream": [_run(5000, 190), _run(6000, 190), _run(7000, 190)],
            "openbao": [_run(3000, 195)] * 3,
            "raw-asgi": [_run(20000, 180)] * 3,
            "nginx": [_run(100000, 150)] * 3,
        },
        "1 KiB decrypt": {"keystream": [_run(4000, 190)] * 3, "raw-asgi": [_run(16000, 180)] * 3},
    }
    arguments = argparse.Namespace(rounds=3, seconds=1, uploads=1, baseline=None)
    result = bench_peer.summarise(workloads, samples, arguments)
    encrypt, decrypt = result["rows"]
    assert encrypt["of_raw_asgi"] == pytest.approx(0.30) and decrypt["of_raw_asgi"] == pytest.approx(0.25)
    assert encrypt["keystream"]["cpu_us_per_request"] == pytest.approx(190 / 6000 * 1e4)
    table = bench_peer.markdown(result)
    floors = table[table.index("Floors:") :]
    assert "| 1 KiB encrypt | 100,000.0 (100,000.0-100,000.0) req/s | 20,000.0" in floors
    assert "| 30% | 15 / 90 / 317 / 650 |" in floors
    assert "| 1 KiB decrypt | - | 16,000.0" in floors and "| 25% | - / 112 / 475 / - |" in floors
    assert "Before and after" not in table


def test_the_report_puts_a_baseline_beside_keystream_in_the_same_run() -> None:
    workloads = [bench_peer.Workload(name, "req/s", 1, 16) for name in bench_peer.FLOOR_WORKLOADS]
    samples = {
        "1 KiB encrypt": {
            "keystream": [_run(6000, 190)] * 3,
            "keystream-before": [_run(4000, 190), _run(4500, 190), _run(5000, 190)],
            "openbao": [_run(3000, 195)] * 3,
            "raw-asgi": [_run(20000, 180)] * 3,
        },
        "1 KiB decrypt": {"keystream": [_run(5000, 190)] * 3, "keystream-before": [_run(2500, 190)] * 3},
    }
    arguments = argparse.Namespace(rounds=3, seconds=1, uploads=1, baseline=REPO)
    result = bench_peer.summarise(workloads, samples, arguments)
    encrypt, decrypt = result["rows"]
    assert encrypt["after_over_before"] == pytest.approx(6000 / 4500)
    assert encrypt["ratio_before"] == pytest.approx(1.5) and encrypt["of_raw_asgi_before"] == pytest.approx(
        0.225
    )
    assert decrypt["after_over_before"] == pytest.approx(2.0) and "ratio_before" not in decrypt
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    assert result["baseline"] == {"path": str(REPO), "commit": commit.stdout.strip()}
    table = bench_peer.markdown(result)
    section = table[table.index("Before and after") :]
    assert f"before = {commit.stdout.strip()}" in section
    assert "| 1 KiB encrypt | 4,500.0 (4,000.0-5,000.0) req/s | 6,000.0" in section
    assert "| 1.33x | 1.50x -> 2.00x | 22% -> 30% | 422 -> 317 | 1.00 -> 1.00 |" in section
    assert "| 1 KiB decrypt |" in section and "| 2.00x | - | - | 760 -> 380 |" in section

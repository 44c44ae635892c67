"""With several workers, a worker whose lifespan ended must stop adding its live gauges to the aggregate."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import asyncio, os, sys
from app.core.metrics import INFLIGHT_REQUESTS
from app.core.telemetry import render_metrics, release_process_metrics
from app.main import create_app
from app.core.config import Settings

token = "ks_00112233aabbccdd_multiprocess-test-secret-0123"
app = create_app(Settings(data_dir=sys.argv[1], root_token=token))

async def main() -> None:
    async with app.router.lifespan_context(app):
        INFLIGHT_REQUESTS.inc(3)
        before = render_metrics()[0].decode()
    after = render_metrics()[0].decode()
    print("BEFORE", [l for l in before.splitlines() if l.startswith("keystream_inflight_requests ")])
    print("AFTER", [l for l in after.splitlines() if l.startswith("keystream_inflight_requests ")])

asyncio.run(main())
"""


def test_lifespan_end_drops_the_workers_live_gauges(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "prom"
    metrics_dir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEYSTREAM_")}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path / "data")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=Path(__file__).resolve().parents[3],
        check=False,
    )
    assert result.returncode == 0, result.stderr
    marked = [line for line in result.stdout.splitlines() if line.startswith(("BEFORE", "AFTER"))]
    lines = dict(line.split(" ", 1) for line in marked)
    assert "3.0" in lines["BEFORE"], result.stdout
    assert "3.0" not in lines["AFTER"], result.stdout
    assert not list(metrics_dir.glob("gauge_livesum_*.db"))

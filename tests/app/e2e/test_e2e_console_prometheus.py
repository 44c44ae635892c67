"""The console behind HAProxy, its dashboard reading a real Prometheus that scrapes two real replicas: the
scale-out stack (deploy/compose/scaleout.yml) without Docker.

Two replicas (two workers each, one shared keystore, ``KEYSTREAM_UI_PROMETHEUS_URL`` set) sit behind Debian's
HAProxy with the configuration of :mod:`bench.haproxy_process` (the stack's), and Debian's Prometheus
scrapes each replica every second on the shipped configuration and recording rules. Under load on aesni and
python, the console opened through HAProxy in headless Chromium shows the summed throughput and, per
replica, requests in flight, the batch budget and each worker's change-log lag, for both replicas; it asked
HAProxy and the configured Prometheus and nothing else, with no console error or CSP violation.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, expect

from bench.haproxy_process import start_haproxy, stop_haproxy
from bench.service_process import ROOT_TOKEN, Server, start_server, started_servers, stop_server
from keystream_client import KeystreamClient
from loadtests.service import free_port
from tests.app.e2e.console_browser import Watch, launched_chromium, sign_in
from tests.prometheus_server import local_config, running_prometheus

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: How long the page may take to show a series: scrapes, rule evaluation and a 2 s read.
SERIES_TIMEOUT_MS = 40_000


@dataclass
class Stack:
    replicas: list[Server]
    #: HAProxy's URL: where a person opens the console.
    console_url: str
    prometheus_url: str
    work: Path


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("console-prometheus")
    prometheus_port = free_port()  # the replicas must know the URL before Prometheus knows their ports
    prometheus_url = f"http://127.0.0.1:{prometheus_port}"
    with started_servers(
        2, work / "data", work, KEYSTREAM_WORKERS="2", KEYSTREAM_UI_PROMETHEUS_URL=prometheus_url
    ) as replicas:
        config = local_config({"keystream": [urlsplit(replica.url).netloc for replica in replicas]})
        with running_prometheus(config, work, prometheus_port) as url:
            assert url == prometheus_url
            haproxy = start_haproxy(work, [(replica.host, replica.port) for replica in replicas])
            try:
                yield Stack(replicas, haproxy.url, prometheus_url, work)
            finally:
                stop_haproxy(haproxy)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launched_chromium() as launched:
        yield launched


def test_the_page_is_told_of_prometheus_and_may_connect_to_it_alone(stack: Stack) -> None:
    response = httpx.get(f"{stack.console_url}/ui/config.json")
    assert response.json() == {"prometheus_url": stack.prometheus_url}
    policy = dict(
        part.strip().split(" ", 1) for part in response.headers["Content-Security-Policy"].split(";")
    )
    assert policy["connect-src"] == f"'self' {stack.prometheus_url}"


def test_the_dashboard_shows_every_replica_from_prometheus(browser: Browser, stack: Stack) -> None:
    with KeystreamClient(stack.console_url, ROOT_TOKEN) as client:
        client.create_key("dashboard-key")
    stop = threading.Event()

    def load(replica: Server) -> None:
        with KeystreamClient(replica.url, ROOT_TOKEN) as client:
            while not stop.is_set():
                for backend in ("aesni", "python"):
                    client.encrypt("dashboard-key", bytes(64 * 1024), backend=backend)

    loaders = [threading.Thread(target=load, args=(replica,)) for replica in stack.replicas]
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    watch = Watch(stack.console_url, allowed=(stack.prometheus_url,))
    page = context.new_page()
    watch.attach(page)
    for loader in loaders:
        loader.start()
    try:
        sign_in(page, stack.console_url)
        page.goto(f"{stack.console_url}/ui/#/dashboard")
        expect(page.locator("#dashboard-source")).to_contain_text(f"Prometheus at {stack.prometheus_url}")
        expect(page.locator("#replicas")).to_have_text("2 replicas", timeout=SERIES_TIMEOUT_MS)
        idle = re.compile(r"^(–|0\.00)$")
        for series in ("aesni encrypt", "python encrypt"):
            value = page.locator(f"#chart-throughput tr[data-series='{series}'] .value")
            expect(value).not_to_have_text(idle, timeout=SERIES_TIMEOUT_MS)
        expect(page.locator("#chart-throughput figcaption")).to_contain_text("sum of 2 replicas")
        for chart, series in (
            ("requests", "/v1/keys/{name}/encrypt 200"),
            ("cache", "hit ratio"),
            ("latency", "python p99"),
        ):
            value = page.locator(f"#chart-{chart} tr[data-series='{series}'] .value")
            expect(value).not_to_have_text(idle, timeout=SERIES_TIMEOUT_MS)
        for replica in stack.replicas:
            instance = urlsplit(replica.url).netloc
            for chart, series in (
                ("inflight", instance),
                ("batch", f"budget {instance}"),
                ("changelog", f"{instance} worker 0"),
                ("changelog", f"{instance} worker 1"),
            ):
                value = page.locator(f"#chart-{chart} tr[data-series='{series}'] .value")
                expect(value).to_have_text(re.compile(r"^[0-9.e+-]+$"), timeout=SERIES_TIMEOUT_MS)
            budget = page.locator(f"#chart-batch tr[data-series='budget {instance}'] .value")
            assert float(budget.inner_text()) == 128.0  # 64 MiB per worker, two workers
            lag = page.locator(f"#chart-changelog tr[data-series='{instance} worker 0'] .value")
            assert float(lag.inner_text()) < 10
        # One line per replica in each per-replica chart: neither replica's series is empty.
        expect(page.locator("#chart-inflight polyline")).to_have_count(2)
        expect(page.locator("#chart-changelog polyline")).to_have_count(4)
        page.screenshot(path=str(stack.work / "dashboard.png"), full_page=True)
    finally:
        stop.set()
        for loader in loaders:
            loader.join()
        context.close()
    asked = {urlsplit(url).netloc for url in watch.urls}
    assert asked == {urlsplit(stack.console_url).netloc, urlsplit(stack.prometheus_url).netloc}, asked
    assert any("/api/v1/query_range" in url for url in watch.urls)
    assert watch.foreign == []
    assert watch.errors == []


def test_an_unreachable_prometheus_is_said_in_words(browser: Browser, tmp_path: Path) -> None:
    """A configured Prometheus that does not answer: the dashboard says which one it cannot reach, in words,
    and keeps to its two origins."""
    unreachable = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    server = start_server(tmp_path / "data", tmp_path / "server.log", KEYSTREAM_UI_PROMETHEUS_URL=unreachable)
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    watch = Watch(server.url, allowed=(unreachable,))
    page = context.new_page()
    watch.attach(page)
    try:
        sign_in(page, server.url)
        page.goto(f"{server.url}/ui/#/dashboard")
        expect(page.get_by_role("alert")).to_have_text(f"cannot reach Prometheus at {unreachable}")
    finally:
        context.close()
        stop_server(server)
    assert watch.foreign == []
    # The refused connections are Chromium's own console lines; nothing else went wrong, no CSP violation.
    assert watch.errors and all("ERR_CONNECTION_REFUSED" in error for error in watch.errors), watch.errors

"""The web console under ``/ui/``: its built files, the security headers on every ``/ui`` answer, and
``KEYSTREAM_UI=false``."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from app.api.console import CONTENT_SECURITY_POLICY, SECURITY_HEADERS, security_headers
from app.core.config import Settings
from app.ui import STATIC_DIR
from tests.app.api.conftest import Api, running_api

#: Every ``/ui`` answer the tests ask for: the page, its files, the bare prefix's redirect and a 404.
UI_ANSWERS = [
    ("/ui/", 200),
    ("/ui/index.html", 200),
    ("/ui/console.js", 200),
    ("/ui/console.css", 200),
    ("/ui/LICENSES.txt", 200),
    ("/ui", 307),
    ("/ui/no-such-file.js", 404),
    ("/ui/config.json", 200),
]


def test_the_policy_allows_only_this_origin_and_no_inline_script() -> None:
    directives = dict(part.strip().split(" ", 1) for part in CONTENT_SECURITY_POLICY.split(";"))
    assert directives["default-src"] == "'self'"
    assert directives["script-src"] == "'self'" and "unsafe" not in CONTENT_SECURITY_POLICY
    assert directives["connect-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"


@pytest.mark.parametrize(("path", "status"), UI_ANSWERS)
async def test_every_ui_answer_carries_the_security_headers(api: Api, path: str, status: int) -> None:
    response = await api.client.get(path, follow_redirects=False)
    assert response.status_code == status
    for name, value in SECURITY_HEADERS.items():
        assert response.headers.get(name) == value, name
    if status == 307:
        assert response.headers["location"] == "/ui/"


async def test_the_page_loads_only_local_files_and_has_no_inline_script(api: Api) -> None:
    response = await api.client.get("/ui/")
    assert response.headers["content-type"].startswith("text/html")
    page = response.text
    assert page == (STATIC_DIR / "index.html").read_text()
    # Every <script> names a file of this origin (a relative path) and has no body.
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, re.S)
    assert scripts and all(body.strip() == "" for _, body in scripts)
    for reference in re.findall(r'(?:src|href)="([^"]+)"', page):
        assert "//" not in reference and not reference.startswith("/"), reference
        served = await api.client.get(f"/ui/{reference}")
        assert served.status_code == 200, reference


async def test_the_api_is_unchanged_by_the_console(api: Api) -> None:
    """The console adds files, not routes: the OpenAPI document names no /ui path."""
    document = (await api.client.get("/openapi.json")).json()
    assert not [path for path in document["paths"] if path.startswith("/ui")]


@pytest.mark.parametrize("path", ["/ui", "/ui/", "/ui/console.js", "/ui/index.html"])
async def test_ui_false_serves_no_console(settings_factory: Callable[..., Settings], path: str) -> None:
    async with running_api(settings_factory(ui=False)) as api:
        response = await api.client.get(path, follow_redirects=False)
        assert response.status_code == 404
        assert "Content-Security-Policy" not in response.headers


async def test_the_page_learns_that_no_prometheus_is_configured(api: Api) -> None:
    response = await api.client.get("/ui/config.json")
    assert response.json() == {"prometheus_url": None}


@pytest.mark.parametrize("path", [path for path, _ in UI_ANSWERS])
async def test_a_configured_prometheus_is_the_one_other_origin_the_page_may_connect_to(
    settings_factory: Callable[..., Settings], path: str
) -> None:
    settings = settings_factory(ui_prometheus_url="HTTP://Prometheus.example:9090/prom/")
    async with running_api(settings) as api:
        response = await api.client.get(path, follow_redirects=False)
        assert (
            response.headers["Content-Security-Policy"]
            == security_headers("http://prometheus.example:9090")["Content-Security-Policy"]
        )
        directives = dict(
            part.strip().split(" ", 1) for part in response.headers["Content-Security-Policy"].split(";")
        )
        assert directives["connect-src"] == "'self' http://prometheus.example:9090"
        assert directives["default-src"] == directives["img-src"] == directives["script-src"] == "'self'"
        if path == "/ui/config.json":
            assert response.json() == {"prometheus_url": "http://prometheus.example:9090/prom"}

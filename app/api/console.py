"""The web console under ``/ui/``: the built files of :mod:`app.ui`, each answer with the console's headers.

The console is a single page whose script talks to the public API of the same origin with the token a person
signs in with; it holds no secret of its own. What makes serving it safe is the set of headers on every
``/ui`` answer (the page, its files, the redirect and a 404 alike): a Content-Security-Policy that allows
scripts, styles, images, fonts and requests from this origin only and no inline script (text a person types
can never become code), ``frame-ancestors 'none'`` and ``X-Frame-Options: DENY`` (no clickjacking frame),
``Referrer-Policy: no-referrer``, ``X-Content-Type-Options: nosniff``, and ``Cache-Control: no-store`` so an
upgraded service never pairs a cached page with a newer script.

With ``KEYSTREAM_UI_PROMETHEUS_URL`` set, the dashboard reads that Prometheus' HTTP API from the browser: the
page learns the URL from ``/ui/config.json`` (so it is never built into the script), and ``connect-src``
allows exactly that one origin besides this one.

``KEYSTREAM_UI=false`` leaves the console out of the app: ``/ui`` is then an unknown path (404).
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_body
from app.api.paths import UI, UI_CONFIG, UI_ROOT
from app.core.config import Settings
from app.ui import STATIC_DIR


def content_security_policy(prometheus_origin: str | None = None) -> str:
    """Only this origin, for everything the page loads or connects to, plus ``prometheus_origin`` (if given)
    for the dashboard's requests alone; no inline script or style, no plugin, no ``<base>``, no form posted
    elsewhere, never inside a frame."""
    connect = "'self'" if prometheus_origin is None else f"'self' {prometheus_origin}"
    return (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; font-src 'self'; "
        f"connect-src {connect}; object-src 'none'; base-uri 'none'; form-action 'self'; "
        "frame-ancestors 'none'"
    )


def security_headers(prometheus_origin: str | None = None) -> dict[str, str]:
    """The headers every ``/ui`` answer carries, with :func:`content_security_policy` for that origin."""
    return {
        "Content-Security-Policy": content_security_policy(prometheus_origin),
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
        "Cross-Origin-Opener-Policy": "same-origin",
        "Cache-Control": "no-store",
    }


#: The policy and headers of a console that reads this server's ``/metrics`` (no Prometheus configured).
CONTENT_SECURITY_POLICY = content_security_policy()
SECURITY_HEADERS: dict[str, str] = security_headers()


class SecurityHeaders:
    """ASGI wrapper that sets ``headers`` (:func:`security_headers`) on every response of the app it wraps."""

    def __init__(self, app: ASGIApp, headers: dict[str, str]) -> None:
        self.app = app
        self.headers = headers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in self.headers.items():
                    headers[name] = value
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except HTTPException as exc:
            # StaticFiles raises its 404 (and 405) before answering: answered here, the headers go with it.
            code = "not_found" if exc.status_code == 404 else "http_error"
            answer = JSONResponse(error_body(code, str(exc.detail)), exc.status_code, dict(exc.headers or {}))
            await answer(scope, receive, send_with_headers)


def install_console(app: FastAPI, settings: Settings) -> None:
    """Serve the built console under ``/ui/`` (``index.html`` for the root), its settings at
    ``/ui/config.json``, and redirect ``/ui`` there.

    Raises:
        RuntimeError: the built files are missing (a broken install; StaticFiles checks at start).
    """
    headers = security_headers(settings.ui_prometheus_origin)
    # The page's only settings: where the dashboard reads metrics (null: this server's /metrics).
    page_config = {"prometheus_url": settings.ui_prometheus_url}

    async def config(request: Request) -> Response:
        return JSONResponse(page_config, headers=headers)

    # Before the mount, which would otherwise take ``/ui/config.json`` for a file.
    app.router.add_route(UI_CONFIG, config, include_in_schema=False)
    files = StaticFiles(directory=STATIC_DIR, html=True, check_dir=True)
    app.mount(UI, SecurityHeaders(files, headers), name="console")

    # The mount matches ``/ui/...`` only: ``/ui`` itself gets this redirect, with the same headers.
    async def to_root(request: Request) -> Response:
        root_path = str(request.scope.get("root_path", ""))
        return RedirectResponse(f"{root_path}{UI_ROOT}", headers=headers)

    app.router.add_route(UI, to_root, include_in_schema=False)

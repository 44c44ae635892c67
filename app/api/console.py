"""The web console under ``/ui/``: the built files of :mod:`app.ui`, each answer with the console's headers.

The console is a single page whose script talks to the public API of the same origin with the token a person
signs in with; it holds no secret of its own. What makes serving it safe is the set of headers on every
``/ui`` answer (the page, its files, the redirect and a 404 alike): a Content-Security-Policy that allows
scripts, styles, images, fonts and requests from this origin only and no inline script (text a person types
can never become code), ``frame-ancestors 'none'`` and ``X-Frame-Options: DENY`` (no clickjacking frame),
``Referrer-Policy: no-referrer``, ``X-Content-Type-Options: nosniff``, and ``Cache-Control: no-store`` so an
upgraded service never pairs a cached page with a newer script.

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
from app.api.paths import UI, UI_ROOT
from app.ui import STATIC_DIR

#: Only this origin, for everything the page loads or connects to; no inline script or style, no plugin,
#: no ``<base>``, no form posted elsewhere, never inside a frame.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; font-src 'self'; "
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
#: The headers every ``/ui`` answer carries.
SECURITY_HEADERS: dict[str, str] = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cache-Control": "no-store",
}


class SecurityHeaders:
    """ASGI wrapper that sets :data:`SECURITY_HEADERS` on every response of the app it wraps."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        try:
            await self.app(scope, receive, send_with_headers)
        except HTTPException as exc:
            # StaticFiles raises its 404 (and 405) before answering: answered here, the headers go with it.
            code = "not_found" if exc.status_code == 404 else "http_error"
            answer = JSONResponse(error_body(code, str(exc.detail)), exc.status_code, dict(exc.headers or {}))
            await answer(scope, receive, send_with_headers)


def install_console(app: FastAPI) -> None:
    """Serve the built console under ``/ui/`` (``index.html`` for the root) and redirect ``/ui`` there.

    Raises:
        RuntimeError: the built files are missing (a broken install; StaticFiles checks at start).
    """
    files = StaticFiles(directory=STATIC_DIR, html=True, check_dir=True)
    app.mount(UI, SecurityHeaders(files), name="console")

    # The mount matches ``/ui/...`` only: ``/ui`` itself gets this redirect, with the same headers.
    async def to_root(request: Request) -> Response:
        root_path = str(request.scope.get("root_path", ""))
        return RedirectResponse(f"{root_path}{UI_ROOT}", headers=SECURITY_HEADERS)

    app.router.add_route(UI, to_root, include_in_schema=False)

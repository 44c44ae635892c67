"""``/docs`` (Swagger UI) and ``/redoc`` served from this host, so they work without internet access.

FastAPI's default pages load their JavaScript, CSS and favicon from a CDN: offline (or behind a strict
proxy) ``/docs`` is a blank page. The same files ship in the ``fastapi-offline`` package (Swagger UI 5, which
reads OpenAPI 3.1, and ReDoc 2, no dependency beyond FastAPI); :func:`install_docs` mounts them under
:data:`STATIC_PATH` and serves both pages with only local URLs.
"""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from starlette.responses import HTMLResponse
from starlette.staticfiles import StaticFiles

#: Where the Swagger UI and ReDoc assets are served.
STATIC_PATH = "/docs/static"
DOCS_PATH = "/docs"
REDOC_PATH = "/redoc"


def _assets() -> Path:
    return Path(str(files("fastapi_offline") / "static"))


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs`` and ``/redoc`` from local assets (the app is created with ``docs_url=None``).

    Raises:
        RuntimeError: the ``fastapi-offline`` assets are missing (a broken install; StaticFiles checks).
    """
    app.mount(STATIC_PATH, StaticFiles(directory=_assets(), check_dir=True), name="docs-static")

    def root(request: Request) -> str:
        return str(request.scope.get("root_path", ""))

    @app.get(DOCS_PATH, include_in_schema=False)
    async def swagger_ui(request: Request) -> HTMLResponse:
        prefix = root(request)
        return get_swagger_ui_html(
            openapi_url=f"{prefix}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{prefix}{STATIC_PATH}/swagger-ui-bundle.js",
            swagger_css_url=f"{prefix}{STATIC_PATH}/swagger-ui.css",
            swagger_favicon_url=f"{prefix}{STATIC_PATH}/favicon.png",
        )

    @app.get(REDOC_PATH, include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        prefix = root(request)
        return get_redoc_html(
            openapi_url=f"{prefix}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{prefix}{STATIC_PATH}/redoc.standalone.js",
            redoc_favicon_url=f"{prefix}{STATIC_PATH}/favicon.png",
            with_google_fonts=False,
        )

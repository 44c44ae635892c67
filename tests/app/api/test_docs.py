"""/docs and /redoc work offline: every URL they load is served by the service itself (issue 11 item 10)."""

from __future__ import annotations

import re

import pytest

from tests.app.api.conftest import Api

EXPECTED_TYPES = {
    ".js": "text/javascript",
    ".css": "text/css",
    ".png": "image/png",
    ".json": "application/json",
}


def _loaded_urls(html: str) -> list[str]:
    """Every URL the page makes the browser fetch: src=, href=, and the quoted OpenAPI url."""
    urls = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html)
    urls += re.findall(r"""url:\s*['"]([^'"]+)['"]""", html)  # Swagger UI's spec URL
    urls += re.findall(r"""spec-url\s*=\s*["']([^"']+)["']""", html)  # ReDoc's
    return urls


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
async def test_docs_pages_load_only_local_assets(api: Api, page: str) -> None:
    response = await api.client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert "cdn" not in html.lower() and "//fonts." not in html
    urls = _loaded_urls(html)
    assert any(url.endswith(".js") for url in urls), urls
    for url in urls:
        assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url} from elsewhere"
        asset = await api.client.get(url)
        assert asset.status_code == 200, url
        suffix = next(s for s in EXPECTED_TYPES if url.endswith(s))
        assert asset.headers["content-type"].startswith(EXPECTED_TYPES[suffix]), (url, asset.headers)
        assert len(asset.content) > 100, url


async def test_docs_assets_are_swagger_ui_5(api: Api) -> None:
    """Swagger UI 4 cannot render the OpenAPI 3.1 document FastAPI writes; the bundle must be version 5."""
    bundle = (await api.client.get("/docs/static/swagger-ui-bundle.js")).text
    assert "SwaggerUIBundle" in bundle
    assert (await api.client.get("/openapi.json")).json()["openapi"].startswith("3.1")
    assert re.search(r'version:"?5\.|swagger-ui-dist@5|"5\.\d+\.\d+"', bundle) or "oas31" in bundle.lower()

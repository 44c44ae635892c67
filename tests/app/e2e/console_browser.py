"""The browser side of the console's end-to-end tests: Debian's headless Chromium driven by Playwright, a
watch that fails a test on a console error, a CSP violation or a request to a host the page may not reach,
and the sign-in a person does."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from playwright.sync_api import Browser, ConsoleMessage, Page, Route, expect, sync_playwright

from bench.service_process import ROOT_TOKEN

#: Debian's Chromium (scripts/install-tools.sh); Playwright's own browser download is not used.
CHROMIUM = "/usr/bin/chromium"
#: Reports every CSP violation of the page as a console error, which the watch below records.
CSP_REPORTER = (
    "document.addEventListener('securitypolicyviolation', (event) =>"
    " console.error(`CSP violation: ${event.violatedDirective} ${event.blockedURI}`));"
)


@dataclass
class Watch:
    """What a page did that it must not: console errors (CSP violations included), uncaught exceptions and
    requests to any origin but the server's (and the ``allowed`` ones)."""

    origin: str
    #: Origins besides ``origin`` the page may reach (a configured Prometheus).
    allowed: tuple[str, ...] = ()
    errors: list[str] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    urls: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> None:
        page.add_init_script(CSP_REPORTER)
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(f"uncaught: {error}"))
        page.route("**/*", self._route)

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(message.text)

    def _route(self, route: Route) -> None:
        url = route.request.url
        self.urls.append(url)
        parts = urlsplit(url)
        if f"{parts.scheme}://{parts.netloc}" not in (self.origin, *self.allowed):
            self.foreign.append(url)
            route.abort()
        else:
            route.continue_()


@contextlib.contextmanager
def launched_chromium() -> Iterator[Browser]:
    """Debian's Chromium, headless, through Playwright (no browser download); fails when it is missing."""
    assert Path(CHROMIUM).exists(), f"{CHROMIUM} is missing: run make tools (Debian's chromium)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()


def sign_in(page: Page, url: str, token: str = ROOT_TOKEN) -> None:
    """Open the console at ``url`` (a server's, or a load balancer's in front of several) and sign in."""
    page.goto(f"{url}/ui/")
    page.fill("#token", token)
    page.get_by_role("button", name="Sign in", exact=True).click()
    expect(page.locator("#sign-out")).to_be_visible()

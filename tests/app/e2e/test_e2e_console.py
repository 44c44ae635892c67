"""The web console in a real headless Chromium (Debian's, driven by Playwright) and a real 2-worker server.

What a person does: sign in, create a key, encrypt text in the page and open it with the Python client (the
same sealed format), see a tampered ciphertext refused in words, encrypt a 5 MB file from disk into a download
the CLI opens and the page decrypts back, rotate and see version 2, create a token (the secret shown once) and
revoke it, read the seal's status, sign out. On every view, Tab must reach each control and axe-core must find
no serious or critical violation. Throughout, the page must log no console error, break no
Content-Security-Policy rule, and request nothing from any host but the server (every request goes through a
route that records and aborts a foreign one); the token must stay out of URLs, cookies and ``localStorage``.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, get_args
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Browser, FilePayload, Page, Route, expect
from tink import streaming_aead

from bench.service_process import ROOT_TOKEN, Server, start_server, stop_server
from keystream_cli import CLI_TIMEOUT, KEYSTREAM
from keystream_client import KeystreamAPIError, KeystreamClient
from tests.app.e2e.console_browser import Watch, launched_chromium, sign_in
from tests.app.formats.conftest import tink_keyset_handle
from tests.app.ui.packages import installed_copy
from tests.jwt_issuer import AUDIENCE, ISSUER, Signer, k8s_claims, serve_issuer

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

#: The ARIA roles of the controls a person operates; each one on a view must be reachable with Tab.
InteractiveRole = Literal[
    "link",
    "button",
    "textbox",
    "searchbox",
    "combobox",
    "listbox",
    "checkbox",
    "radio",
    "spinbutton",
    "slider",
    "switch",
    "tab",
    "menuitem",
]
INTERACTIVE_ROLES: tuple[InteractiveRole, ...] = get_args(InteractiveRole)
#: Numbers each element the page is asked about (by identity, stable while it lives) and describes it.
CONTROL_HELPERS = """() => {
  const numbers = new WeakMap();
  let next = 0;
  window.controlNumber = (element) => {
    if (!numbers.has(element)) numbers.set(element, ++next);
    return numbers.get(element);
  };
  window.describeControl = (element) => {
    const name = (element.getAttribute('aria-label') || element.textContent || element.value || '').trim();
    return `${element.tagName.toLowerCase()}${element.id ? '#' + element.id : ''} "${name.slice(0, 40)}"`;
  };
  window.documentPosition = (element) =>
    Array.prototype.indexOf.call(document.getElementsByTagName('*'), element);
}"""
#: The serious and critical violations axe finds in the page, one line each.
AXE_RUN = """async () => {
  const result = await axe.run(document, { resultTypes: ['violations'] });
  return result.violations
    .filter((violation) => violation.impact === 'serious' || violation.impact === 'critical')
    .map((violation) => `${violation.id} (${violation.impact}): ${violation.help}: ` +
      violation.nodes.map((node) => node.target.join(' ')).join(', '));
}"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A 2-worker server with the audit log on (``audit.log.w0`` and ``.w1`` in its directory) and key import
    allowed."""
    base = tmp_path_factory.mktemp("console")
    running = start_server(
        base / "data",
        base / "server.log",
        KEYSTREAM_WORKERS="2",
        KEYSTREAM_AUDIT_LOG=str(base / "audit.log"),
        KEYSTREAM_ALLOW_KEY_IMPORT="true",
    )
    try:
        yield running
    finally:
        stop_server(running)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with launched_chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser, server: Server) -> Iterator[tuple[Page, Watch]]:
    context = browser.new_context(
        viewport={"width": 1280, "height": 800}, permissions=["clipboard-read", "clipboard-write"]
    )
    watch = Watch(server.url)
    page = context.new_page()
    watch.attach(page)
    try:
        yield page, watch
    finally:
        context.close()


def test_a_person_manages_keys_data_and_tokens(page: tuple[Page, Watch], server: Server) -> None:
    browser_page, watch = page
    sign_in(browser_page, server.url)
    # The token is in this tab's sessionStorage only.
    assert browser_page.evaluate("sessionStorage.getItem('keystream.token')") == ROOT_TOKEN
    assert browser_page.evaluate("localStorage.length") == 0
    assert browser_page.context.cookies() == []

    # Keys: create one; typed text is rendered as text.
    browser_page.fill("#key-name", "console-key")
    browser_page.select_option("#key-scheme", "gcm")
    browser_page.fill("#key-segment-size", "4096")
    browser_page.locator("#create-key").get_by_role("button", name="Create").click()
    expect(browser_page.locator("#keys").get_by_role("link", name="console-key")).to_be_visible()
    browser_page.fill("#key-filter", "no-such")
    expect(browser_page.locator("#keys tbody tr")).to_have_count(0)

    # Encrypt text in the page; the Python client opens it (same sealed format).
    text = "héllo <b>console</b> & friends"
    browser_page.goto(f"{server.url}/ui/#/crypto")
    browser_page.fill("#crypto-key", "console-key")
    browser_page.fill("#plaintext", text)
    browser_page.click("#encrypt")
    expect(browser_page.locator("#ciphertext")).not_to_have_value("")
    sealed = base64.b64decode(browser_page.input_value("#ciphertext"))
    browser_page.click("#copy")
    expect(browser_page.locator("#copy")).to_have_text("Copied")
    assert base64.b64decode(browser_page.evaluate("navigator.clipboard.readText()")) == sealed
    with KeystreamClient(server.url, ROOT_TOKEN) as client:
        assert client.decrypt("console-key", sealed).data == text.encode()
        from_client = client.encrypt("console-key", b"sealed by the client").data
    # The other way round, then a tampered ciphertext: the service's refusal in words.
    browser_page.fill("#ciphertext", base64.b64encode(from_client).decode())
    browser_page.click("#decrypt")
    expect(browser_page.locator("#plaintext")).to_have_value("sealed by the client")
    tampered = bytearray(sealed)
    tampered[-1] ^= 1
    browser_page.fill("#ciphertext", base64.b64encode(bytes(tampered)).decode())
    browser_page.click("#decrypt")
    expect(browser_page.locator("#crypto-error")).to_contain_text("400")
    watch.errors = [error for error in watch.errors if "400 (Bad Request)" not in error]  # the refused fetch

    # A key's page: rotate and see version 2.
    browser_page.goto(f"{server.url}/ui/#/keys/console-key")
    expect(browser_page.locator("#latest-version")).to_have_text("1")
    browser_page.click("#rotate")
    expect(browser_page.locator("#latest-version")).to_have_text("2")
    expect(browser_page.locator("#versions tbody tr")).to_have_count(2)
    browser_page.fill("#min-version-input", "2")
    browser_page.locator("#min-version").get_by_role("button", name="Set").click()
    expect(browser_page.locator("#min-decryption-version")).to_have_text("2")
    assert browser_page.locator("#delete-key").count() == 0  # deletion not allowed on this key

    # A key created with deletion allowed and an automatic rotation period; deleted after typing its name.
    browser_page.goto(f"{server.url}/ui/#/keys")
    browser_page.fill("#key-name", "doomed")
    browser_page.fill("#key-auto-rotate", "24h")
    browser_page.check("#key-deletion-allowed")
    browser_page.locator("#create-key").get_by_role("button", name="Create").click()
    browser_page.locator("#keys").get_by_role("link", name="doomed").click()
    expect(browser_page.get_by_text("every 86400 s")).to_be_visible()
    delete = browser_page.get_by_role("button", name="Delete key")
    expect(delete).to_be_disabled()
    browser_page.fill("#delete-confirm", "doomed")
    delete.click()
    expect(browser_page.locator("#keys")).to_be_visible()
    with KeystreamClient(server.url, ROOT_TOKEN) as client:
        assert "doomed" not in [key.name for key in client.list_keys()]

    # Tokens: create one (the secret shown once), see it work, revoke it.
    description = "made <i>here</i>"
    browser_page.goto(f"{server.url}/ui/#/tokens")
    browser_page.fill("#token-description", description)
    browser_page.fill("#token-ttl", "600")
    browser_page.locator("#create-token").get_by_role("button", name="Create").click()
    secret = browser_page.locator("#new-token").inner_text()
    token_id = secret.split("_")[1]
    with KeystreamClient(server.url, secret) as client:
        assert client.token_self().token_id == token_id
    row = browser_page.locator(f"tr[data-token-id='{token_id}']")
    expect(row.locator("td").nth(3)).to_have_text(description)
    row.get_by_role("button", name="Revoke").click()
    expect(row).to_have_count(0)
    revoked = httpx.get(f"{server.url}/v1/tokens/self", headers={"Authorization": f"Bearer {secret}"})
    assert revoked.status_code == 401

    # The seal's status.
    browser_page.goto(f"{server.url}/ui/#/seal")
    expect(browser_page.locator("#seal-status")).to_contain_text("unsealed")

    # Sign out forgets the token.
    browser_page.click("#sign-out")
    expect(browser_page.locator("#token")).to_be_visible()
    assert browser_page.evaluate("sessionStorage.length") == 0

    assert [url for url in watch.urls if ROOT_TOKEN in url or secret in url] == []
    assert watch.foreign == []
    assert watch.errors == []


def run_file_operation(page: Page, path: Path, operation: str, saved: Path) -> str:
    """Choose ``path`` in the page's file field, run ``operation`` ("encrypt" or "decrypt"), save the download
    to ``saved``; the download's suggested name."""
    page.set_input_files("#file-input", str(path))
    page.click(f"#{operation}-file")
    link = page.locator("#file-download")
    expect(link).to_be_visible()
    with page.expect_download() as download:
        link.click()
    download.value.save_as(saved)
    return download.value.suggested_filename


def test_a_file_is_encrypted_in_the_page_and_opened_by_the_cli(
    page: tuple[Page, Watch], server: Server, tmp_path: Path
) -> None:
    """A 5 MB file chosen from disk is streamed to the service and offered as a download in the sealed format
    the CLI opens to the same bytes; the download decrypts in the page back byte-equal; a tampered file shows
    the service's refusal in words, a file cut short after its first segment the connection cut in words."""
    browser_page, watch = page
    with KeystreamClient(server.url, ROOT_TOKEN) as client:
        client.create_key("file-key")
    plaintext = tmp_path / "report.bin"
    plaintext.write_bytes(os.urandom(5 * 1000 * 1000))
    sign_in(browser_page, server.url)
    browser_page.goto(f"{server.url}/ui/#/crypto")
    browser_page.fill("#crypto-key", "file-key")

    # The upload's progress, seen at a browser-side throttled 2.5 MB/s (about 2 s for the file).
    network = browser_page.context.new_cdp_session(browser_page)
    network.send("Network.enable")
    network.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": 2_500_000},
    )
    browser_page.set_input_files("#file-input", str(plaintext))
    browser_page.click("#encrypt-file")
    expect(browser_page.locator("label:has(#file-progress)")).to_contain_text("Sending:")
    expect(browser_page.locator("#file-download")).to_be_visible(timeout=20_000)
    network.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
    )
    expect(browser_page.locator("#file-progress")).to_have_count(0)

    sealed = tmp_path / "saved" / "report.bin.ks"
    sealed.parent.mkdir()
    assert run_file_operation(browser_page, plaintext, "encrypt", sealed) == "report.bin.ks"
    opened = tmp_path / "opened-by-cli"
    environment = {name: value for name, value in os.environ.items() if not name.startswith("KEYSTREAM_")}
    cli = subprocess.run(
        [*KEYSTREAM, "decrypt", "--url", server.url, "--key", "file-key", str(sealed), str(opened)],
        env={**environment, "KEYSTREAM_TOKEN": ROOT_TOKEN},
        capture_output=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr
    assert opened.read_bytes() == plaintext.read_bytes()

    # The download back through the page: named without .ks, byte-equal.
    roundtrip = tmp_path / "roundtrip"
    assert run_file_operation(browser_page, sealed, "decrypt", roundtrip) == "report.bin"
    assert roundtrip.read_bytes() == plaintext.read_bytes()

    # A byte changed in the first segment: the service refuses before any output, in its own words.
    tampered = bytearray(sealed.read_bytes())
    tampered[100] ^= 1
    (tmp_path / "tampered.ks").write_bytes(tampered)
    browser_page.set_input_files("#file-input", str(tmp_path / "tampered.ks"))
    browser_page.click("#decrypt-file")
    expect(browser_page.locator("#file-error")).to_contain_text("(400 decryption_failed)")
    expect(browser_page.locator("#file-download")).to_have_count(0)
    # Cut short after the first segments: the service aborts the answer it started; the page says so.
    (tmp_path / "truncated.ks").write_bytes(sealed.read_bytes()[: 3 * 1024 * 1024])
    browser_page.set_input_files("#file-input", str(tmp_path / "truncated.ks"))
    browser_page.click("#decrypt-file")
    expect(browser_page.locator("#file-error")).to_contain_text("the connection was cut")
    expect(browser_page.locator("#file-download")).to_have_count(0)

    # Over the console's limit: refused in the page, nothing sent.
    big = FilePayload(name="big.bin", mimeType="application/octet-stream", buffer=bytes(8 * 1024 * 1024 + 1))
    browser_page.set_input_files("#file-input", files=[big])
    expect(browser_page.locator("#file-too-large")).to_contain_text("big.bin is 8.00 MiB")
    expect(browser_page.locator("#encrypt-file")).to_be_disabled()

    # Chromium logs the refused decrypt and the cut answer; nothing else.
    expected = ("400 (Bad Request)", "net::ERR_CONTENT_LENGTH_MISMATCH")  # the answer had a Content-Length
    assert [any(line in error for error in watch.errors) for line in expected] == [True, True]
    watch.errors = [error for error in watch.errors if not any(line in error for line in expected)]
    assert watch.foreign == []
    assert watch.errors == []


def test_a_deterministic_key_is_made_without_the_sealed_formats_settings(
    page: tuple[Page, Watch], server: Server
) -> None:
    """aes256-siv has no scheme or segment size: the form disables both and sends neither (the service
    refuses them for that type), and the key's import form asks for its 64 bytes."""
    browser_page, _ = page
    sign_in(browser_page, server.url)
    browser_page.fill("#key-name", "lookup-column")
    browser_page.select_option("#key-type", "aes256-siv")
    expect(browser_page.locator("#key-scheme")).to_be_disabled()
    expect(browser_page.locator("#key-segment-size")).to_be_disabled()
    browser_page.locator("#create-key").get_by_role("button", name="Create").click()
    browser_page.locator("#keys").get_by_role("link", name="lookup-column").click()
    expect(browser_page.locator("#import-version")).to_contain_text("64 random bytes")
    with KeystreamClient(server.url, ROOT_TOKEN) as client:
        assert client.get_key("lookup-column").type == "aes256-siv"
        first, second = client.encrypt_batch("lookup-column", [b"4242", b"4242"])
        assert first.data is not None and first.data == second.data  # deterministic
    browser_page.goto(f"{server.url}/ui/#/keys")
    browser_page.select_option("#key-type", "aes256")  # the sealed types get their settings back
    expect(browser_page.locator("#key-scheme")).to_be_enabled()


@pytest.fixture(scope="module")
def axe_source(tmp_path_factory: pytest.TempPathFactory) -> str:
    """axe-core's ``axe.min.js`` at the version ``ui/package-lock.json`` pins, installed with npm."""
    installed = installed_copy(tmp_path_factory.mktemp("axe"))
    return (installed / "node_modules" / "axe-core" / "axe.min.js").read_text()


def controls_by_role(page: Page) -> list[tuple[int, str]]:
    """Every visible, enabled control of the page found by its ARIA role, in document order: (number,
    description)."""
    found: dict[int, tuple[int, str]] = {}
    for role in INTERACTIVE_ROLES:
        for control in page.get_by_role(role).all():
            if control.is_enabled():
                number, description, position = control.evaluate(
                    "(element) => [controlNumber(element), describeControl(element),"
                    " documentPosition(element)]"
                )
                found[number] = (position, description)
    return [
        (number, description) for number, (_, description) in sorted(found.items(), key=lambda item: item[1])
    ]


def focus_order(page: Page, limit: int) -> list[tuple[int, str]]:
    """The elements Tab focuses from the start of the page (just loaded), until focus leaves the page or
    comes back to the first: (number, description)."""
    order: list[tuple[int, str]] = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        current = page.evaluate(
            "() => { const element = document.activeElement;"
            " return element === null || element === document.body ? null"
            " : [controlNumber(element), describeControl(element)]; }"
        )
        if current is None or (order and current[0] == order[0][0]):
            break
        order.append((current[0], current[1]))
    return order


def check_view(page: Page, axe: str) -> list[str]:
    """What is wrong with the view on show (loaded afresh, so focus starts at the top): controls Tab does not
    reach or reaches out of document order, and axe's serious or critical violations in light and dark."""
    page.evaluate(CONTROL_HELPERS)
    expected = controls_by_role(page)
    reached = focus_order(page, len(expected) + 5)
    problems = []
    if reached != expected:
        problems.append(f"Tab order {[d for _, d in reached]} != controls by role {[d for _, d in expected]}")
    page.evaluate(axe)
    for scheme in ("light", "dark"):
        page.emulate_media(color_scheme=scheme)
        problems += [f"{scheme}: {violation}" for violation in page.evaluate(AXE_RUN)]
    page.emulate_media(color_scheme="light")
    return problems


def test_keyboard_reaches_every_control_and_axe_finds_nothing_serious(
    page: tuple[Page, Watch], server: Server, axe_source: str
) -> None:
    """On each view, Tab from the top of the page reaches every control (links, buttons, fields) in
    document order, and axe-core, injected from outside the page's CSP, reports no serious or critical
    violation in either colour scheme."""
    browser_page, watch = page
    with KeystreamClient(server.url, ROOT_TOKEN) as client:
        client.create_key("a11y-key", deletion_allowed=True)
        client.rotate_key("a11y-key")
        client.configure_key("a11y-key", min_decryption_version=2)  # the trim form shows
        client.create_token(scopes=["encrypt"], description="a11y")
    problems: dict[str, list[str]] = {}
    browser_page.goto(f"{server.url}/ui/")
    expect(browser_page.locator("#token")).to_be_visible()
    problems["sign-in"] = check_view(browser_page, axe_source)
    sign_in(browser_page, server.url)
    views = (
        ("keys", "#keys tbody tr"),
        ("keys/a11y-key", "#trim-input"),
        ("crypto", "#file-input"),
        ("tokens", "#tokens tbody tr"),
        ("audit", "#audit-heads"),
        ("seal", "#seal-status"),
        ("dashboard", "#chart-throughput"),
    )
    for route, ready in views:
        browser_page.goto(f"{server.url}/ui/#/{route}")
        browser_page.reload()
        expect(browser_page.locator(ready).first).to_be_visible()
        problems[route] = check_view(browser_page, axe_source)
    failing = {view: found for view, found in problems.items() if found}
    assert failing == {}, "\n".join(f"{view}: {line}" for view, found in failing.items() for line in found)
    assert watch.foreign == []
    assert watch.errors == []


def test_the_keyboard_and_axe_checks_can_fail(
    page: tuple[Page, Watch], server: Server, axe_source: str
) -> None:
    """A button taken out of the Tab order and a button without a name are both reported."""
    browser_page, _ = page
    browser_page.goto(f"{server.url}/ui/")
    expect(browser_page.locator("#token")).to_be_visible()
    browser_page.evaluate(
        "() => { document.querySelector('button[type=submit]').tabIndex = -1;"
        " document.querySelector('main').append(document.createElement('button')); }"
    )
    problems = check_view(browser_page, axe_source)
    assert any(problem.startswith("Tab order") and 'button "Sign in"' in problem for problem in problems), (
        problems
    )
    assert any(problem.startswith("light: button-name (critical)") for problem in problems), problems


def test_the_audit_view_shows_each_workers_chain_head_to_an_admin_only(
    page: tuple[Page, Watch], server: Server
) -> None:
    """An admin token sees the audit log on and one head per worker file, each the head of a line in that
    file; a token without the admin scope sees that it is not allowed, in words."""
    browser_page, watch = page
    sign_in(browser_page, server.url)
    browser_page.goto(f"{server.url}/ui/#/audit")
    expect(browser_page.locator("#audit-state")).to_have_text("The audit log is on, one file per worker.")
    rows = browser_page.locator("#audit-heads tbody tr")
    expect(rows).to_have_count(2)
    directory = server.log.parent
    shown = 0
    for index in range(2):
        cells = rows.nth(index).locator("td")
        expect(cells.nth(0)).to_have_text(f"audit.log.w{index}")
        lines = [json.loads(line) for line in (directory / f"audit.log.w{index}").read_text().splitlines()]
        head = cells.nth(1).inner_text()
        # A worker that had served no /v1 request yet (the kernel spreads connections) may since have recorded
        # the status request it answered (its lines are written after the answer), and nothing else.
        if head == "no record yet":
            assert {line.get("route", "/v1/audit/status") for line in lines} <= {"/v1/audit/status"}, lines
            assert len({line["request_id"] for line in lines}) <= 1, lines
            continue
        chain, records, mac = head.split(":")
        assert {"chain": chain, "seq": int(records) - 1, "hmac": mac} in [
            {name: line[name] for name in ("chain", "seq", "hmac")} for line in lines
        ]
        shown += 1
    assert shown >= 1  # the sign-in's request at least was recorded before the page asked
    browser_page.click("#sign-out")

    with KeystreamClient(server.url, ROOT_TOKEN) as client:
        limited = client.create_token(scopes=["encrypt", "decrypt"], description="not an admin").token
    sign_in(browser_page, server.url, limited)
    browser_page.goto(f"{server.url}/ui/#/audit")
    expect(browser_page.locator("#audit-not-allowed")).to_have_text(
        "This token is not allowed to see the audit log's status: that takes a token with the admin scope."
    )
    expect(browser_page.locator("#audit-heads")).to_have_count(0)
    assert [error for error in watch.errors if "403 (Forbidden)" not in error] == []
    assert watch.foreign == []


def test_a_key_page_imports_a_version_and_trims_old_ones(page: tuple[Page, Watch], server: Server) -> None:
    """Import: the material typed into the page becomes version 2, the one Tink given only that material
    opens, and leaves the page. Trim: offered only once versions no longer decrypt, confirmed, and then
    version 1 is gone for good (its ciphertext refused)."""
    streaming_aead.register()
    browser_page, watch = page
    material = os.urandom(32)
    with KeystreamClient(server.url, ROOT_TOKEN) as client:
        client.create_key("life", segment_size=4096)
        old = client.encrypt("life", b"sealed under version 1").data
    sign_in(browser_page, server.url)
    browser_page.goto(f"{server.url}/ui/#/keys/life")
    expect(browser_page.locator("#key-imported")).to_have_text("no")
    expect(browser_page.locator("#trim-nothing")).to_be_visible()

    browser_page.fill("#import-material", base64.b64encode(material).decode())
    browser_page.get_by_role("button", name="Import version").click()
    expect(browser_page.locator("#latest-version")).to_have_text("2")
    expect(browser_page.locator("#key-imported")).to_contain_text("yes")
    expect(browser_page.locator("#import-material")).to_have_value("")
    with KeystreamClient(server.url, ROOT_TOKEN) as client:
        sealed = client.encrypt("life", b"sealed under the imported version")
    assert sealed.key_version == 2
    tink_aead = tink_keyset_handle([(9, material)], 32, 4096).primitive(streaming_aead.StreamingAead)
    with tink_aead.new_decrypting_stream(io.BytesIO(sealed.data), b"") as stream:
        assert stream.read() == b"sealed under the imported version"
    # Material of the wrong length: the service's words.
    browser_page.fill("#import-material", base64.b64encode(bytes(16)).decode())
    browser_page.get_by_role("button", name="Import version").click()
    expect(browser_page.locator("#import-error")).to_contain_text("(400 ")

    browser_page.fill("#min-version-input", "2")
    browser_page.locator("#min-version").get_by_role("button", name="Set").click()
    expect(browser_page.locator("#min-decryption-version")).to_have_text("2")
    trim = browser_page.locator("#trim").get_by_role("button", name="Trim")
    browser_page.fill("#trim-input", "2")
    expect(trim).to_be_disabled()
    browser_page.check("#trim-confirm")
    trim.click()
    expect(browser_page.locator("#versions tbody tr")).to_have_count(1)
    expect(browser_page.locator("#trim-nothing")).to_be_visible()
    with KeystreamClient(server.url, ROOT_TOKEN) as client:
        assert [version.version for version in client.get_key("life").versions] == [2]
        with pytest.raises(KeystreamAPIError) as refused:
            client.decrypt("life", old)
    assert refused.value.status == 400

    secret = base64.b64encode(material).decode()
    assert [url for url in watch.urls if secret in url] == []
    assert secret not in browser_page.evaluate(
        "JSON.stringify(sessionStorage) + JSON.stringify(localStorage)"
    )
    assert [error for error in watch.errors if "400 (Bad Request)" not in error] == []
    assert watch.foreign == []


def test_import_refused_by_the_service_is_said_in_its_words(browser: Browser, tmp_path: Path) -> None:
    """On a server with key import off, the page's import form shows the service's refusal."""
    running = start_server(tmp_path / "data", tmp_path / "server.log", KEYSTREAM_WORKERS="1")
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    try:
        with KeystreamClient(running.url, ROOT_TOKEN) as client:
            client.create_key("fixed")
        page = context.new_page()
        sign_in(page, running.url)
        page.goto(f"{running.url}/ui/#/keys/fixed")
        page.fill("#import-material", base64.b64encode(bytes(32)).decode())
        page.get_by_role("button", name="Import version").click()
        expect(page.locator("#import-error")).to_have_text(
            "key import is disabled (set KEYSTREAM_ALLOW_KEY_IMPORT=true) (403 forbidden)"
        )
        expect(page.locator("#latest-version")).to_have_text("1")
    finally:
        context.close()
        stop_server(running)


def test_a_person_signs_in_with_a_jwt_role(page: tuple[Page, Watch], server: Server, tmp_path: Path) -> None:
    """A Kubernetes-shaped JWT from a test issuer (its JWKS on a real HTTPS server the service fetches) signs
    in through a role: the issued token is kept like a pasted one and works; the JWT is kept nowhere; a JWT
    the role's bindings refuse shows the service's refusal in words."""
    browser_page, watch = page
    signer = Signer.rsa("console-key")
    role = {
        "method": "jwt",
        "scopes": ["encrypt", "decrypt"],
        "key_patterns": ["billing-*"],
        "ttl": 600,
        "bound_audiences": [AUDIENCE],
        "bound_claims": {"/kubernetes.io/namespace": "billing"},
    }
    with serve_issuer(tmp_path, [signer]) as issuer, httpx.Client(base_url=server.url) as admin:
        config = {"jwks_url": issuer.jwks_url, "jwks_ca_pem": issuer.ca_pem, "bound_issuer": ISSUER}
        assert admin.post("/v1/auth/jwt/config", json=config, headers=server.auth).status_code == 200
        assert admin.post("/v1/auth/roles/billing", json=role, headers=server.auth).status_code == 200
        browser_page.goto(f"{server.url}/ui/")
        refused = signer.sign(k8s_claims(namespace="payroll"))
        browser_page.fill("#jwt-role", "billing")
        browser_page.fill("#jwt", refused)
        browser_page.get_by_role("button", name="Sign in with the JWT").click()
        expect(browser_page.locator("#jwt-error")).to_contain_text("(400 ")
        expect(browser_page.locator("#jwt")).to_have_value("")
        accepted = signer.sign(k8s_claims())
        browser_page.fill("#jwt", accepted)
        browser_page.get_by_role("button", name="Sign in with the JWT").click()
        expect(browser_page.locator("#sign-out")).to_be_visible()

    issued = browser_page.evaluate("sessionStorage.getItem('keystream.token')")
    assert issued.startswith("ks_") and issued != ROOT_TOKEN
    with KeystreamClient(server.url, issued) as client:
        assert client.token_self().scopes == ("encrypt", "decrypt")
    stored = browser_page.evaluate("JSON.stringify(sessionStorage) + JSON.stringify(localStorage)")
    for jwt in (refused, accepted):
        signature = jwt.rsplit(".", 1)[1]
        assert signature not in stored
        assert [url for url in watch.urls if signature in url] == []
    assert browser_page.context.cookies() == []
    # The issued token is used as a pasted one is: the tokens page is refused to it in words (no admin).
    browser_page.goto(f"{server.url}/ui/#/tokens")
    expect(browser_page.get_by_role("alert")).to_contain_text("403")
    assert [
        error for error in watch.errors if not re.search(r"40[03] \((Bad Request|Forbidden)\)", error)
    ] == []
    assert watch.foreign == []


def test_a_file_transfer_that_stalls_is_given_up_in_words(
    page: tuple[Page, Watch], server: Server, tmp_path: Path
) -> None:
    """A transfer where nothing moves for 15 s (here: an encrypt the browser's route holds unanswered) is
    given up with a message, and the page can be used again.

    The page runs on Playwright's clock (installed before it loads, so the watchdog's timer is the fake one):
    once the whole body is sent, 14 s of the page's time pass without the transfer given up, and 2 s more give
    it up; the test does not wait the 15 s out.
    """
    browser_page, watch = page
    held: list[Route] = []
    browser_page.clock.install()
    sign_in(browser_page, server.url)
    browser_page.goto(f"{server.url}/ui/#/crypto")

    def hold(route: Route) -> None:
        held.append(route)  # never answered: the upload is done, no answer ever comes

    browser_page.route("**/v1/keys/held/encrypt", hold)
    small = tmp_path / "small.bin"
    small.write_bytes(os.urandom(1000))
    browser_page.fill("#crypto-key", "held")
    browser_page.set_input_files("#file-input", str(small))
    browser_page.click("#encrypt-file")
    # The route holds the request, its body handed over: nothing moves from here on.
    deadline = time.monotonic() + 30
    while not held:
        assert time.monotonic() < deadline, "the encrypt never reached the route"
        browser_page.wait_for_timeout(50)
    browser_page.clock.run_for(14_000)
    expect(browser_page.locator("#file-error")).to_have_count(0)
    expect(browser_page.locator("#encrypt-file")).to_be_disabled()  # still transferring
    browser_page.clock.run_for(2_000)
    expect(browser_page.locator("#file-error")).to_have_text(
        "the transfer stalled (nothing moved for 15 s) and was given up"
    )
    assert len(held) == 1
    expect(browser_page.locator("#encrypt-file")).to_be_enabled()
    assert watch.errors == [] and watch.foreign == []


def test_the_dashboard_draws_each_backends_throughput_and_latency(
    page: tuple[Page, Watch], server: Server
) -> None:
    """Under load on aesni, python and hwsim, the dashboard (read from /metrics every 2 s) shows non-zero
    series for aesni and python in the throughput and latency charts, the python pool's restarts (none), the
    batch budget, each worker's change-log lag, and the simulated device's ring occupancy and key-slot hit
    ratio."""
    browser_page, watch = page
    host = urlsplit(server.url).netloc  # /metrics' series are labelled with the server as the page sees it
    with KeystreamClient(server.url, ROOT_TOKEN) as client:
        client.create_key("dashboard-key")
    sign_in(browser_page, server.url)
    browser_page.goto(f"{server.url}/ui/#/dashboard")
    expect(browser_page.locator("#chart-throughput")).to_be_visible()
    expect(browser_page.locator("#dashboard-source")).to_contain_text("This server's /metrics")
    stop = threading.Event()

    def load() -> None:
        with KeystreamClient(server.url, ROOT_TOKEN) as client:
            while not stop.is_set():
                for backend in ("aesni", "python", "hwsim"):
                    client.encrypt("dashboard-key", bytes(64 * 1024), backend=backend)

    loader = threading.Thread(target=load)
    loader.start()
    try:
        idle = re.compile(r"^(–|0\.00)$")
        for chart, series in (
            ("throughput", "aesni encrypt"),
            ("throughput", "python encrypt"),
            ("latency", "python p99"),
            ("batch", f"budget {host}"),
        ):
            value = browser_page.locator(f"#chart-{chart} tr[data-series='{series}'] .value")
            expect(value).not_to_have_text(idle, timeout=15_000)
        expect(browser_page.locator("#chart-requests tr[data-series]").first).to_be_visible()
        # Two workers, each reading the change log every 0.25 s: neither is more than a few seconds behind.
        for worker in ("0", "1"):
            lag = browser_page.locator(f"#chart-changelog tr[data-series='{host} worker {worker}'] .value")
            expect(lag).to_have_text(re.compile(r"^[0-9.]+$"), timeout=15_000)
            assert float(lag.inner_text()) < 5
        # The python pool's restarts (none), and the answering worker's simulated device.
        restarts = browser_page.locator(f"#chart-restarts tr[data-series='{host} python'] .value")
        expect(restarts).to_have_text("0.00")
        expect(
            browser_page.locator(f"#chart-hwsim-ring tr[data-series='time-weighted mean {host}'] .value")
        ).not_to_have_text(idle, timeout=15_000)
        expect(browser_page.locator(f"#chart-hwsim-slots tr[data-series='{host}'] .value")).to_be_visible()
        # Every series of a chart has a look of its own in the legend, past the eight colours too.
        looks = browser_page.eval_on_selector_all(
            "#chart-requests tr[data-series] line",
            "(lines) => lines.map((line) =>"
            " `${line.getAttribute('stroke')} ${line.getAttribute('stroke-dasharray')}`)",
        )
        assert len(looks) == len(set(looks)), looks
        # One line per series: aesni, python and hwsim encrypting (and what earlier tests did on this server).
        names = browser_page.eval_on_selector_all(
            "#chart-throughput tr[data-series]", "(rows) => rows.map((row) => row.dataset.series)"
        )
        assert {"aesni encrypt", "python encrypt", "hwsim encrypt"} <= set(names), names
        expect(browser_page.locator("#chart-throughput polyline")).to_have_count(len(names))
    finally:
        stop.set()
        loader.join()
    assert watch.foreign == []
    assert watch.errors == []


def test_the_watch_catches_a_csp_violation_and_a_foreign_request(
    page: tuple[Page, Watch], server: Server
) -> None:
    """The checks above can fail: an inline script and a request to another host are both caught."""
    browser_page, watch = page
    browser_page.goto(f"{server.url}/ui/")
    expect(browser_page.locator("#token")).to_be_visible()
    browser_page.evaluate(
        "() => { const s = document.createElement('script'); s.textContent = 'window.ran = 1';"
        " document.body.append(s); }"
    )
    browser_page.evaluate(
        "() => { const i = document.createElement('img'); i.src = 'http://127.0.0.2:9/x.png';"
        " document.body.append(i); }"
    )
    browser_page.wait_for_timeout(300)
    assert browser_page.evaluate("window.ran") is None
    assert any("CSP violation: script-src" in error for error in watch.errors), watch.errors
    assert any("CSP violation: img-src" in error for error in watch.errors), watch.errors
    # A navigation is outside the policy's reach: the route records (and aborts) it.
    browser_page.evaluate("() => { window.location.href = 'http://127.0.0.2:9/'; }")
    browser_page.wait_for_timeout(300)
    assert watch.foreign == ["http://127.0.0.2:9/"]


def test_ui_false_serves_no_console(tmp_path: Path) -> None:
    running = start_server(tmp_path / "data", tmp_path / "server.log", KEYSTREAM_UI="false")
    try:
        for path in ("/ui", "/ui/", "/ui/console.js"):
            assert httpx.get(f"{running.url}{path}").status_code == 404, path
    finally:
        stop_server(running)

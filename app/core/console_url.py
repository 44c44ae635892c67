"""The shape of ``KEYSTREAM_UI_PROMETHEUS_URL``: the Prometheus the web console's dashboard reads.

The browser, not the service, connects to it: the URL goes into the page (``/ui/config.json``) and its
origin into the console's Content-Security-Policy (``connect-src``). So it must be a plain ``http`` or
``https`` URL with a host, and it may carry no credentials: anything in it is shown to every visitor of the
console. A query or fragment would be dropped when the page adds ``/api/v1/...``, so neither is accepted.
A path is kept (Prometheus served under ``--web.route-prefix`` or behind a proxy). The messages never quote
the URL, which may hold a password typed by mistake.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["ALLOWED_SCHEMES", "check_prometheus_url"]

#: The schemes a browser's ``fetch`` and a CSP ``connect-src`` origin both handle.
ALLOWED_SCHEMES = ("http", "https")


def check_prometheus_url(url: str) -> str:
    """The URL normalised (scheme and host in lower case, no trailing ``/``), if the console may use it.

    Raises:
        ValueError: not ``http``/``https``, no host, a user or password in it, a query or a fragment, or a
            port out of range (the message names the rule, never the URL).
    """
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    if scheme not in ALLOWED_SCHEMES:
        raise ValueError(
            f"must be an {' or '.join(ALLOWED_SCHEMES)} URL such as http://prometheus:9090 "
            f"(got scheme {scheme or 'none'!r})"
        )
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError("must not hold a user or password: every visitor of the console would see them")
    if not parts.hostname:
        raise ValueError("must name a host, e.g. http://prometheus:9090")
    if parts.query or parts.fragment or url.strip().endswith(("?", "#")):
        raise ValueError("must have no query or fragment: the console adds /api/v1/... to it")
    try:
        port = parts.port
    except ValueError:
        raise ValueError("has a port that is not a number from 0 to 65535") from None
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    netloc = host if port is None else f"{host}:{port}"
    return urlunsplit((scheme, netloc, parts.path.rstrip("/"), "", ""))

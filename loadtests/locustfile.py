"""Locust users for Keystream: every request checks its answer, and every name carries its backend.

Run it through ``python -m loadtests.run`` (starts a service, bounds the run, checks the report), or by hand::

    KEYSTREAM_TOKEN=ks_... locust -f loadtests/locustfile.py --host http://127.0.0.1:8000 \\
        --backends aesni,hwsim --headless -u 8 -r 8 -t 60s

Users (weights in brackets):

* ``SealedRoundTripUser`` [6]: small sealed encrypt -> decrypt, optional associated data, plaintext
  compared.
* ``BatchUser`` [2]: batch JSON encrypt -> batch decrypt of 10-100 items, each plaintext compared by
  reference.
* ``RawSliceUser`` [2]: raw CTR random access: decrypts (and re-encrypts) random slices of a ciphertext made
  at start, at their ``offset``, and compares them with the known plaintext/ciphertext slices.
* ``StreamingUser`` [1]: 1-16 MiB sealed round trips (slow backends get smaller bodies,
  ``--slow-stream-max-mib``).
* ``KeyChurnUser`` [1]: rotates its own key every few seconds, keeps decrypting older versions, raises
  ``min_decryption_version`` now and then, and deletes the key when it stops.

Requests are named ``<operation> [<backend>]`` (``encrypt sealed [aesni]``) so Locust's statistics split per
backend. ``--backends`` picks the backends (default: every backend the service reports enabled and available).
The Locust master's web UI also answers ``/export/prometheus`` with users and request counts for Prometheus.
"""

from __future__ import annotations

import base64
import collections
import json
import logging
import os
import random
import secrets
import time
import urllib.parse
from collections.abc import Iterable
from typing import Any

import gevent.lock
from locust import FastHttpUser, between, events, task
from locust.argument_parser import LocustArgumentParser
from locust.env import Environment
from locust.exception import StopUser

from loadtests import final_csv
from loadtests.duplex import DuplexError, duplex_post

logger = logging.getLogger("keystream.loadtests")

# --csv files from the final statistics, counting what the HTML report and the log count (see final_csv).
final_csv.install()

MIB = 1 << 20
#: Backends much slower than AES-NI (pure Python); their streaming bodies are capped.
DEFAULT_SLOW_BACKENDS = "python"


# --- command line ---------------------------------------------------------------------------------------


@events.init_command_line_parser.add_listener
def _add_arguments(parser: LocustArgumentParser) -> None:
    parser.add_argument(
        "--backends",
        default="",
        env_var="KEYSTREAM_LOAD_BACKENDS",
        help="comma-separated backends to drive (aesni,python,hwsim); default: every enabled, available one",
    )
    parser.add_argument(
        "--keystream-token",
        default="",
        env_var="KEYSTREAM_TOKEN",
        is_secret=True,
        help="bearer token with admin, encrypt and decrypt scopes (better: the KEYSTREAM_TOKEN variable)",
    )
    parser.add_argument("--key-prefix", default="loadtest", help="prefix of the key names the test creates")
    parser.add_argument("--small-max-bytes", type=int, default=16384, help="largest small sealed message")
    parser.add_argument("--stream-min-mib", type=float, default=1.0, help="smallest streaming body (MiB)")
    parser.add_argument("--stream-max-mib", type=float, default=16.0, help="largest streaming body (MiB)")
    parser.add_argument(
        "--slow-backends", default=DEFAULT_SLOW_BACKENDS, help="backends whose streaming bodies are capped"
    )
    parser.add_argument(
        "--slow-stream-max-mib",
        type=float,
        default=1.0,
        help="largest streaming body on a slow backend (MiB)",
    )
    parser.add_argument(
        "--raw-blob-kib", type=int, default=256, help="size of each RawSliceUser's ciphertext"
    )


def _option(environment: Environment, name: str, default: Any) -> Any:
    options = environment.parsed_options
    return getattr(options, name, default) if options is not None else default


# --- shared per-process state ------------------------------------------------------------------------------


class _Pool:
    """Random bytes to slice payloads from (os.urandom once per process, not per request)."""

    def __init__(self) -> None:
        self._data: bytes | None = None
        self._lock = gevent.lock.Semaphore()

    def take(self, size: int) -> bytes:
        with self._lock:
            if self._data is None or len(self._data) < size + 4096:
                self._data = os.urandom(max(size + 4096, 17 * MIB))
        data = self._data
        start = random.randrange(0, len(data) - size + 1)
        return data[start : start + size]


POOL = _Pool()
_setup_lock = gevent.lock.Semaphore()
_setup: dict[str, Any] = {}


class KeystreamUser(FastHttpUser):
    """Base class: auth header, request helpers that validate answers, the backends to drive, shared keys."""

    abstract = True
    network_timeout = 60.0
    connection_timeout = 10.0

    def on_start(self) -> None:
        token = _option(self.environment, "keystream_token", "") or os.environ.get("KEYSTREAM_TOKEN", "")
        if not token:
            self._fail_setup("no token: set KEYSTREAM_TOKEN or --keystream-token")
        self.auth = {"Authorization": f"Bearer {token}"}
        with _setup_lock:
            if not _setup:
                self._shared_setup()
        if not _setup.get("ok"):
            raise StopUser()
        self.backends: list[str] = _setup["backends"]
        self.keys: list[str] = _setup["keys"]

    # -- helpers ---------------------------------------------------------------------------------------

    def _fail_setup(self, message: str) -> None:
        self.environment.events.request.fire(
            request_type="SETUP",
            name="keystream setup",
            response_time=0,
            response_length=0,
            exception=RuntimeError(message),
            context={},
        )
        _setup["ok"] = False
        logger.error("keystream load test setup failed: %s", message)
        raise StopUser()

    def _shared_setup(self) -> None:
        """Discover the backends and create the shared keys (once per Locust process; 409 means done)."""
        wanted = [name for name in str(_option(self.environment, "backends", "")).split(",") if name.strip()]
        with self.client.get(
            "/v1/backends", headers=self.auth, name="setup backends", catch_response=True
        ) as r:
            if r.status_code != 200:
                r.failure(f"GET /v1/backends: {r.status_code} {_short(r.content)}")
                self._fail_setup("cannot list backends")
            listing = json.loads(r.content)
        usable = [b["name"] for b in listing["backends"] if b["enabled"] and b["available"]]
        if wanted:
            missing = [name.strip() for name in wanted if name.strip() not in usable]
            if missing:
                self._fail_setup(f"backends {missing} are not enabled and available here (usable: {usable})")
            backends = [name.strip() for name in wanted]
        else:
            backends = usable
        if not backends:
            self._fail_setup("the service has no usable backend")
        prefix = _option(self.environment, "key_prefix", "loadtest")
        keys = [f"{prefix}-aes256", f"{prefix}-aes128-4k"]
        self.create_key(keys[0], "aes256", 1 * MIB)
        self.create_key(keys[1], "aes128", 4096)
        _setup.update(ok=True, backends=backends, keys=keys)
        logger.info("driving backends %s with keys %s", backends, keys)

    def create_key(self, name: str, key_type: str, segment_size: int, deletion_allowed: bool = False) -> None:
        """Create a key; an existing key (409) is fine."""
        body = {
            "name": name,
            "type": key_type,
            "segment_size": segment_size,
            "deletion_allowed": deletion_allowed,
        }
        with self.client.post(
            "/v1/keys", json=body, headers=self.auth, name="create key", catch_response=True
        ) as response:
            if response.status_code in (200, 201, 409):
                response.success()
            else:
                response.failure(f"create key: {response.status_code} {_short(response.content)}")
                self._fail_setup("cannot create keys")

    def backend(self) -> str:
        """The next backend, round robin from a random start, so even rare tasks cover every backend."""
        if not hasattr(self, "_backend_turn"):
            self._backend_turn = random.randrange(len(self.backends))
        self._backend_turn += 1
        return self.backends[self._backend_turn % len(self.backends)]

    def crypt(
        self,
        path: str,
        body: bytes,
        name: str,
        params: dict[str, Any],
        headers: dict[str, str] | None = None,
        expect: bytes | None = None,
        duplex: bool = False,
    ) -> tuple[bytes, dict[str, str]] | None:
        """POST an octet-stream body; check 200 and, when given, the exact expected answer.

        ``duplex`` sends the body while reading the answer (needed beyond ~12 MiB, see loadtests/duplex.py).

        Returns:
            The body and the response headers (lower-case names), or None when the request failed.
        """
        url = f"{path}?{urllib.parse.urlencode(params)}"
        all_headers = {**self.auth, "Content-Type": "application/octet-stream", **(headers or {})}
        if duplex:
            return self._duplex(url, body, name, all_headers, expect)
        with self.client.post(
            url,
            data=body,  # type: ignore[arg-type]  # FastHttpSession sends bytes as they are; its hint says str
            headers=all_headers,
            name=name,
            catch_response=True,
        ) as response:
            if response.status_code != 200:
                response.failure(f"status {response.status_code}: {_short(response.content)}")
                return None
            content = response.content or b""
            if expect is not None and content != expect:
                response.failure(f"answer differs from the expected {len(expect)} bytes (got {len(content)})")
                return None
            response_headers = {k.lower(): v for k, v in (response.headers or {}).items()}
            response.success()
            return content, response_headers

    def _duplex(
        self, url: str, body: bytes, name: str, headers: dict[str, str], expect: bytes | None
    ) -> tuple[bytes, dict[str, str]] | None:
        parsed = urllib.parse.urlsplit(self.host)
        start = time.perf_counter()
        error: Exception | None = None
        response = None
        try:
            response = duplex_post(
                str(parsed.hostname or "127.0.0.1"),
                parsed.port or 80,
                url,
                body,
                headers,
                self.network_timeout,
            )
            if response.status != 200:
                error = AssertionError(f"status {response.status}: {_short(response.content)}")
            elif expect is not None and response.content != expect:
                error = AssertionError(
                    f"answer differs from the expected {len(expect)} bytes (got {len(response.content)})"
                )
        except DuplexError as exc:
            error = exc
        self.environment.events.request.fire(
            request_type="POST",
            name=name,
            response_time=(time.perf_counter() - start) * 1000.0,
            response_length=len(response.content) if response is not None else 0,
            exception=error,
            context={},
            url=url,
        )
        if error is not None or response is None:
            return None
        return response.content, response.headers

    def sealed_round_trip(
        self, key: str, plaintext: bytes, label: str, backend: str, duplex: bool = False
    ) -> None:
        """Encrypt then decrypt one message; the decrypt must give back the plaintext exactly."""
        headers = {}
        if random.random() < 0.5:
            headers["Keystream-Associated-Data"] = base64.b64encode(os.urandom(16)).decode()
        params = {"backend": backend}
        encrypted = self.crypt(
            f"/v1/keys/{key}/encrypt",
            plaintext,
            f"encrypt {label} [{backend}]",
            params,
            headers,
            None,
            duplex,
        )
        if encrypted is None:
            return
        ciphertext, response_headers = encrypted
        if "keystream-key-version" not in response_headers or len(ciphertext) <= len(plaintext):
            self._report_failure(f"encrypt {label} [{backend}]", "no key version header or short ciphertext")
            return
        self.crypt(
            f"/v1/keys/{key}/decrypt",
            ciphertext,
            f"decrypt {label} [{backend}]",
            params,
            headers,
            plaintext,
            duplex,
        )

    def _report_failure(self, name: str, message: str) -> None:
        self.environment.events.request.fire(
            request_type="CHECK",
            name=name,
            response_time=0,
            response_length=0,
            exception=AssertionError(message),
            context={},
        )


# --- users --------------------------------------------------------------------------------------------------


class SealedRoundTripUser(KeystreamUser):
    """Small sealed messages (0..--small-max-bytes), half of them with associated data."""

    weight = 6
    wait_time = between(0.0, 0.02)

    @task
    def round_trip(self) -> None:
        size = min(int(random.expovariate(1 / 2048)), _option(self.environment, "small_max_bytes", 16384))
        self.sealed_round_trip(random.choice(self.keys), POOL.take(size), "sealed", self.backend())


class StreamingUser(KeystreamUser):
    """Large sealed round trips, 1-16 MiB (slow backends: up to --slow-stream-max-mib)."""

    weight = 1
    wait_time = between(0.5, 2.0)

    @task
    def stream_round_trip(self) -> None:
        backend = self.backend()
        low = float(_option(self.environment, "stream_min_mib", 1.0))
        high = float(_option(self.environment, "stream_max_mib", 16.0))
        if backend in str(_option(self.environment, "slow_backends", DEFAULT_SLOW_BACKENDS)).split(","):
            high = min(high, float(_option(self.environment, "slow_stream_max_mib", 1.0)))
            low = min(low, high / 4)
        size = int(random.uniform(low, max(low, high)) * MIB)
        self.sealed_round_trip(self.keys[0], POOL.take(size), "stream", backend, duplex=True)


class BatchUser(KeystreamUser):
    """Batch JSON: 10-100 items of 16-1024 bytes, matched by reference on the way back."""

    weight = 2
    wait_time = between(0.0, 0.05)

    @task
    def batch_round_trip(self) -> None:
        backend = self.backend()
        key = random.choice(self.keys)
        plaintexts = {str(i): POOL.take(random.randint(16, 1024)) for i in range(random.randint(10, 100))}
        items = [{"plaintext": _b64(p), "reference": ref} for ref, p in plaintexts.items()]
        name = f"encrypt batch [{backend}]"
        results = self._batch(f"/v1/keys/{key}/encrypt/batch?backend={backend}", items, name, "ciphertext")
        if results is None:
            return
        items = [{"ciphertext": r["ciphertext"], "reference": r["reference"]} for r in results]
        name = f"decrypt batch [{backend}]"
        results = self._batch(f"/v1/keys/{key}/decrypt/batch?backend={backend}", items, name, "plaintext")
        if results is None:
            return
        wrong = [
            r["reference"] for r in results if base64.b64decode(r["plaintext"]) != plaintexts[r["reference"]]
        ]
        if wrong:
            self._report_failure(name, f"items {wrong[:5]} decrypted to other plaintexts")

    def _batch(
        self, url: str, items: list[dict[str, str]], name: str, field: str
    ) -> list[dict[str, Any]] | None:
        with self.client.post(
            url, json={"items": items}, headers=self.auth, name=name, catch_response=True
        ) as r:
            if r.status_code != 200:
                r.failure(f"status {r.status_code}: {_short(r.content)}")
                return None
            results: list[dict[str, Any]] = json.loads(r.content)["results"]
            bad = [res for res in results if field not in res or "key_version" not in res]
            sent = {item["reference"] for item in items}
            if bad or len(results) != len(items) or {res.get("reference") for res in results} != sent:
                r.failure(
                    f"{len(bad)} item errors or a missing reference, e.g. {_short(json.dumps(bad[:1]))}"
                )
                return None
            r.success()
            return results


class RawSliceUser(KeystreamUser):
    """Raw CTR random access against a ciphertext made once per user with a known plaintext."""

    weight = 2
    wait_time = between(0.0, 0.05)

    def on_start(self) -> None:
        super().on_start()
        self.plaintext = POOL.take(int(_option(self.environment, "raw_blob_kib", 256)) * 1024)
        backend = self.backend()
        self.key = self.keys[0]
        encrypted = self.crypt(
            f"/v1/keys/{self.key}/encrypt",
            self.plaintext,
            f"encrypt raw [{backend}]",
            {"format": "raw", "backend": backend},
        )
        if encrypted is None:
            raise StopUser()
        self.ciphertext, headers = encrypted
        self.iv = headers.get("keystream-iv", "")
        self.version = headers.get("keystream-key-version", "")
        if len(self.ciphertext) != len(self.plaintext) or len(self.iv) != 32 or not self.version:
            self._report_failure(f"encrypt raw [{backend}]", "raw ciphertext length, IV or key version wrong")
            raise StopUser()

    def _slice(self) -> tuple[int, int]:
        offset = random.randrange(0, len(self.plaintext))
        length = random.randint(1, min(65536, len(self.plaintext) - offset))
        return offset, offset + length

    def _params(self, backend: str, offset: int) -> dict[str, Any]:
        return {
            "format": "raw",
            "backend": backend,
            "iv": self.iv,
            "offset": offset,
            "key_version": self.version,
        }

    @task(3)
    def decrypt_slice(self) -> None:
        """Decrypt bytes [start, end) of the stream alone: must equal the same slice of the plaintext."""
        backend = self.backend()
        start, end = self._slice()
        self.crypt(
            f"/v1/keys/{self.key}/decrypt",
            self.ciphertext[start:end],
            f"decrypt raw slice [{backend}]",
            self._params(backend, start),
            expect=self.plaintext[start:end],
        )

    @task(1)
    def encrypt_slice(self) -> None:
        """Encrypting a slice at its offset must reproduce that slice of the ciphertext (any backend)."""
        backend = self.backend()
        start, end = self._slice()
        self.crypt(
            f"/v1/keys/{self.key}/encrypt",
            self.plaintext[start:end],
            f"encrypt raw slice [{backend}]",
            self._params(backend, start),
            expect=self.ciphertext[start:end],
        )


class KeyChurnUser(KeystreamUser):
    """Light rotation churn on a key of its own: old versions must keep decrypting until retired.

    Each turn (every 1-3 s) encrypts with the latest version and decrypts a random earlier ciphertext, on the
    next backend; every third turn, starting with the first, rotates the key first; every tenth version
    retires all but the last ``keep_versions`` with ``min_decryption_version``.
    """

    weight = 1
    wait_time = between(1.0, 3.0)
    #: Versions kept decryptable; older ones are retired with PATCH min_decryption_version.
    keep_versions = 5
    rotate_every = 3

    def on_start(self) -> None:
        super().on_start()
        prefix = _option(self.environment, "key_prefix", "loadtest")
        self.churn_key = f"{prefix}-churn-{secrets.token_hex(4)}"
        self.create_key(self.churn_key, "aes256", 4096, deletion_allowed=True)
        self.history: collections.deque[tuple[int, bytes, bytes]] = collections.deque(maxlen=50)
        self.latest = 1
        self.turn = 0

    def on_stop(self) -> None:
        if hasattr(self, "churn_key"):
            self.client.delete(f"/v1/keys/{self.churn_key}", headers=self.auth, name="delete key")

    @task
    def churn(self) -> None:
        self.turn += 1
        if self.turn % self.rotate_every == 1 and not self.rotate():
            return
        backend = self.backend()
        self.encrypt_latest(backend)
        self.decrypt_older(backend)

    def rotate(self) -> bool:
        """Add a version; it must be exactly one more than the last one. Returns False on failure."""
        with self.client.post(
            f"/v1/keys/{self.churn_key}/rotate", headers=self.auth, name="rotate key", catch_response=True
        ) as response:
            if response.status_code != 200:
                response.failure(f"status {response.status_code}: {_short(response.content)}")
                return False
            latest = int(json.loads(response.content)["latest_version"])
            if latest != self.latest + 1:
                response.failure(f"rotate gave version {latest} after {self.latest}")
                return False
            self.latest = latest
        if latest % 10 == 0:
            self._retire(latest - self.keep_versions + 1)
        return True

    def _retire(self, min_version: int) -> None:
        body = {"min_decryption_version": min_version}
        with self.client.request(
            "PATCH",
            f"/v1/keys/{self.churn_key}",
            json=body,
            headers=self.auth,
            name="retire versions",
            catch_response=True,
        ) as response:
            if response.status_code != 200:
                response.failure(f"status {response.status_code}: {_short(response.content)}")
                return
        self.history = collections.deque((h for h in self.history if h[0] >= min_version), maxlen=50)

    def encrypt_latest(self, backend: str) -> None:
        """Encrypt with the latest version (the response must say which) and remember the ciphertext."""
        plaintext = POOL.take(random.randint(0, 10000))
        name = f"encrypt churn [{backend}]"
        encrypted = self.crypt(f"/v1/keys/{self.churn_key}/encrypt", plaintext, name, {"backend": backend})
        if encrypted is None:
            return
        ciphertext, headers = encrypted
        version = int(headers.get("keystream-key-version", "0"))
        if version != self.latest:
            self._report_failure(name, f"encrypted with version {version}, latest is {self.latest}")
            return
        self.history.append((version, plaintext, ciphertext))

    def decrypt_older(self, backend: str) -> None:
        """Decrypt a remembered ciphertext without naming its version: the service must find it.

        The request goes over a new connection, so with several workers (or replicas) it may land on a
        process other than the one that rotated the key and encrypted: every process must accept it.
        """
        if not self.history:
            return
        version, plaintext, ciphertext = random.choice(self.history)
        name = f"decrypt churn [{backend}]"
        decrypted = self.crypt(
            f"/v1/keys/{self.churn_key}/decrypt",
            ciphertext,
            name,
            {"backend": backend},
            expect=plaintext,
            duplex=True,
        )
        if decrypted is not None and decrypted[1].get("keystream-key-version") != str(version):
            self._report_failure(
                name, f"decrypted with version {decrypted[1].get('keystream-key-version')}, not {version}"
            )


# --- Prometheus export of the runner's statistics -----------------------------------------------------


@events.init.add_listener
def _export_prometheus(environment: Environment, **_kwargs: Any) -> None:
    """Serve ``/export/prometheus`` on the master's (or a local runner's) web UI."""
    web_ui = environment.web_ui
    if web_ui is None or web_ui.app is None:
        return

    @web_ui.app.route("/export/prometheus")
    def export_prometheus() -> tuple[str, int, dict[str, str]]:
        return (
            render_prometheus(environment),
            200,
            {"Content-Type": "text/plain; version=0.0.4; charset=utf-8"},
        )


def render_prometheus(environment: Environment) -> str:
    """Users, request and failure counters and response-time percentiles in Prometheus text format."""
    runner = environment.runner
    lines = [
        "# HELP locust_users Simulated users running now.",
        "# TYPE locust_users gauge",
        f"locust_users {runner.user_count if runner is not None else 0}",
        "# HELP locust_running 1 while a test runs (spawning or running), else 0.",
        "# TYPE locust_running gauge",
        f"locust_running {int(runner is not None and runner.state in ('spawning', 'running'))}",
    ]
    entries = list(runner.stats.entries.values()) if runner is not None else []
    families: Iterable[tuple[str, str, str, Any]] = (
        ("locust_requests_total", "counter", "Requests sent.", lambda e: e.num_requests),
        ("locust_failures_total", "counter", "Requests that failed their check.", lambda e: e.num_failures),
        ("locust_current_rps", "gauge", "Requests per second, recent window.", lambda e: e.current_rps),
    )
    for metric, kind, help_text, value in families:
        lines += [f"# HELP {metric} {help_text}", f"# TYPE {metric} {kind}"]
        lines += [f"{metric}{{{_labels(e)}}} {float(value(e))}" for e in entries]
    lines += [
        "# HELP locust_response_time_seconds Response time percentiles since the test started.",
        "# TYPE locust_response_time_seconds gauge",
    ]
    for entry in entries:
        for quantile in (0.5, 0.95, 0.99):
            seconds = entry.get_response_time_percentile(quantile) / 1000.0 if entry.num_requests else 0.0
            lines.append(f'locust_response_time_seconds{{{_labels(entry)},quantile="{quantile}"}} {seconds}')
    return "\n".join(lines) + "\n"


def _labels(entry: Any) -> str:
    name = str(entry.name).replace("\\", "\\\\").replace('"', '\\"')
    return f'name="{name}",method="{entry.method}"'


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _short(content: bytes | str | None, limit: int = 200) -> str:
    """The start of a response body or message, for a failure text."""
    if isinstance(content, str):
        return content[:limit]
    return (content or b"")[:limit].decode(errors="replace")

"""Service settings: pydantic-settings, environment prefix ``KEYSTREAM_``, ``.env`` supported.

Use :func:`get_settings` (cached) instead of a module-level instance so tests can build their own
:class:`Settings` and pass it to :func:`app.main.create_app`, or override the dependency.
"""

from __future__ import annotations

import ipaddress
import os
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from app.core.console_url import check_prometheus_url
from app.core.database_url import check_database_url
from app.core.master_key_format import MasterKeyError, check_master_key_source, parse_master_key
from app.core.token_format import parse_token

#: Backends the service knows how to serve, in the order of preference for the default.
KNOWN_BACKENDS: tuple[str, ...] = ("aesni", "python", "hwsim")
MIB = 1 << 20
#: A deleted name is held for this many poll intervals (unless ``key_tombstone_seconds`` is set).
TOMBSTONE_POLLS = 10
#: Caches are used for this many poll intervals after the last successful read of the change log.
TRUST_POLLS = 5


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask, not the machine's count), at most 64."""
    return max(1, min(64, len(os.sched_getaffinity(0))))


class Settings(BaseSettings):
    """Every knob of the service. Each field is read from ``KEYSTREAM_<NAME>`` (case-insensitive)."""

    model_config = SettingsConfigDict(
        env_prefix="KEYSTREAM_",
        env_file=".env",
        env_file_encoding="utf-8",
        extra="ignore",
        case_sensitive=False,
        # A malformed secret is often the real one with a typo: never echo it in start-up errors.
        hide_input_in_errors=True,
    )

    data_dir: Path = Field(default=Path("./data"), description="SQLite keystore and master key live here.")
    master_key: SecretStr | None = Field(
        default=None,
        description="Base64 of 32 bytes; when unset, data_dir/master.key is used (created once).",
    )
    master_key_file: Path | None = Field(
        default=None,
        description="A file holding the base64 master key (mode 0600, e.g. a mounted secret); "
        "instead of master_key.",
    )
    database_url: SecretStr | None = Field(
        default=None,
        description="postgresql://user:password@host:port/db: keep keys in PostgreSQL, shared by replicas "
        "(master_key or master_key_file required). Unset: the SQLite keystore in data_dir.",
    )
    seal: Literal["file", "pkcs11", "shamir"] = Field(
        default="file",
        description="What holds the master key: file (master_key, master_key_file or data_dir/master.key; "
        "development only), pkcs11 (a non-extractable key in an HSM: the pkcs11_* settings) or shamir "
        "(rebuilt from K of N operator shares: the server starts sealed).",
    )
    pkcs11_lib: Path | None = Field(default=None, description="The token's PKCS#11 module (seal=pkcs11).")
    pkcs11_token_label: str | None = Field(default=None, description="The token's label (seal=pkcs11).")
    pkcs11_pin: SecretStr | None = Field(default=None, description="The token's user PIN (seal=pkcs11).")
    pkcs11_pin_file: Path | None = Field(
        default=None, description="A file (mode 0600) holding the user PIN; instead of pkcs11_pin."
    )
    pkcs11_key_label: str = Field(
        default="keystream-master", min_length=1, description="The master key's label in the token."
    )
    root_token: SecretStr | None = Field(
        default=None,
        description="Root token `ks_<id>_<secret>` to install; when unset one is generated once.",
    )
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    workers: int = Field(
        default_factory=usable_cpus,
        ge=1,
        le=64,
        description="Worker processes; default: the CPUs this process may run on (at most 64).",
    )
    timeout_graceful_shutdown: float = Field(default=10.0, gt=0)
    log_level: Literal["critical", "error", "warning", "info", "debug"] = "info"
    access_log: bool = False
    tls_cert_file: Path | None = Field(
        default=None,
        description="PEM certificate chain (leaf first): serve HTTPS, TLS 1.2 or later only "
        "(with tls_key_file).",
    )
    tls_key_file: Path | None = Field(
        default=None, description="PEM private key of tls_cert_file (unencrypted; mode 0600)."
    )
    tls_client_ca_file: Path | None = Field(
        default=None,
        description="PEM CA bundle: require a client certificate it issued (mTLS), in addition to tokens.",
    )
    tls_disable: bool = Field(
        default=False,
        description="Allow plain HTTP on a non-loopback host (TLS terminated by a proxy); logs a WARNING.",
    )

    forwarded_allow_ips: Annotated[list[str] | None, NoDecode] = Field(
        default=None,
        description="Comma-separated addresses or networks (CIDR) of the proxies whose X-Forwarded-For and "
        "X-Forwarded-Proto are believed (the client address of logs and audit records); '*' believes any "
        "peer (only when nothing but the proxy can reach the port). Unset: none, the peer's address is used.",
    )

    default_backend: str | None = Field(
        default=None,
        description=(
            "Backend used when a request names none; default aesni if available else python. "
            "python is NOT constant-time (cache-timing exposure on shared hosts): avoid it as the default."
        ),
    )
    enabled_backends: Annotated[list[str] | None, NoDecode] = Field(
        default=None,
        description=(
            "Comma-separated subset of aesni,python,hwsim; default every available one. python is NOT "
            "constant-time (table-based AES; any encrypt/decrypt token can pick it with ?backend=python): "
            "list only aesni (and hwsim) to disable it. A WARNING is logged at start-up while it is enabled."
        ),
    )
    hwsim_preset: str = "proposal"
    python_backend_processes: int = Field(default=1, ge=1, le=32)
    #: aesni chunks (raw) and segments (sealed) up to this size run on the event loop; bigger ones in a
    #: thread. Other backends always leave the loop.
    inline_crypto_max_bytes: int = Field(default=1 << 20, ge=0)
    #: Bodies with a Content-Length up to this size are read whole and answered with a plain response.
    small_body_max_bytes: int = Field(default=64 * 1024, ge=0, le=16 * MIB)

    max_decrypt_versions: int = Field(
        default=64,
        ge=1,
        description=(
            "Most key versions a decrypt without key_version tries, the newest first (each is a trial "
            "decryption of the first segment); a ciphertext of an older version needs key_version."
        ),
    )

    allow_key_import: bool = False
    allow_core_dumps: bool = Field(
        default=False,
        description="Leave core dumps on: by default every process turns them off for itself "
        "(prctl(PR_SET_DUMPABLE, 0) and RLIMIT_CORE 0), which also refuses gcore and ptrace to non-root "
        "users.",
    )
    key_cache_size: int = Field(default=1024, ge=1)
    #: Coherence comes from the change log (see docs/operations.md); these TTLs are only a last-resort bound.
    key_metadata_ttl: float = Field(default=60.0, ge=0)
    token_cache_ttl: float = Field(default=60.0, ge=0)
    change_poll_interval: float = Field(
        default=0.25,
        gt=0,
        le=60,
        description="Seconds between two reads of the keystore's change log (a change hint reads at once).",
    )
    key_tombstone_seconds: float | None = Field(
        default=None,
        ge=0,
        description="Seconds a deleted key's name cannot be re-created; unset: 10 x change_poll_interval.",
    )

    auto_rotate_check_interval: float = Field(
        default=60.0,
        gt=0,
        le=3600,
        description="Seconds between two checks, in each worker, for keys whose auto_rotate_period has "
        "elapsed (a due key rotates at most this late; the database lets one worker or replica do it).",
    )
    auto_rotate_min_period: int = Field(
        default=3600,
        ge=1,
        le=3600,
        description="TESTING ONLY: the shortest auto_rotate_period a key may get (default 1 hour, as Vault). "
        "Tests lower it to watch a key rotate within seconds; never lower it in production.",
    )

    testing_wipe_on_sigusr2: bool = Field(
        default=False,
        description="TESTING ONLY: SIGUSR2 makes a worker zero its cached key versions and close its seal "
        "(what sealing does to memory; the worker then fails every keyed request). For the core-image test; "
        "never set it in production.",
    )

    transit_mount: str = Field(
        default="transit",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}(/[A-Za-z0-9][A-Za-z0-9_.-]{0,63}){0,3}$",
        description=(
            "Where the Transit-compatible API is mounted: /v1/<mount>/ (Vault's mount path, e.g. kms or "
            "team/transit); /v1/transit/ then answers 404. It may not start with a native /v1 path segment "
            "(keys, tokens, sys, ...)."
        ),
    )
    metrics_flush_seconds: float = Field(
        default=1.0,
        ge=0,
        le=60,
        description=(
            "How often a worker applies its buffered per-request metric updates (app/core/metric_buffer.py). "
            "A scrape answered by the worker itself is always exact; with several workers, another worker's "
            "requests show in /metrics within this interval. 0 applies every update at once (about 45k more "
            "instructions a request)."
        ),
    )
    batch_max_items: int = Field(default=1000, ge=1)
    batch_max_bytes: int = Field(default=16 * MIB, ge=1024)
    batch_buffer_budget_bytes: int = Field(
        default=64 * MIB,
        ge=1024,
        description=(
            "Most batch body bytes a worker buffers at once, over all concurrent batch requests (a request "
            "also holds its decoded items and results, about 3-4x its body, while it runs). A batch that "
            "does not fit waits up to batch_buffer_wait_seconds, then gets 503 with Retry-After."
        ),
    )
    batch_buffer_wait_seconds: float = Field(
        default=5.0, ge=0, description="How long a batch may wait for batch_buffer_budget_bytes (then 503)."
    )
    max_associated_data: int = Field(default=64 * 1024, ge=0)
    max_json_body: int = Field(
        default=64 * 1024,
        ge=1024,
        le=16 * MIB,
        description="Body limit of the non-batch JSON /v1 routes (413 beyond; checked after auth).",
    )
    max_header_bytes: int = Field(
        default=64 * 1024,
        ge=4096,
        le=16 * MIB,
        description="Request line + headers limit of the httptools server (431 and close beyond).",
    )
    max_connections: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Open connections per worker; beyond it the longest-idle connection is closed (default: the "
            "open-file limit, raised to its hard value at start, minus 64)."
        ),
    )
    handshake_timeout: float = Field(
        default=5.0,
        gt=0,
        description="Seconds a TLS handshake may take from the TCP accept (the connection is closed beyond).",
    )
    idle_timeout: float = Field(
        default=5.0,
        gt=0,
        description="Seconds a connection may wait without a request (first or keep-alive).",
    )
    header_timeout: float = Field(
        default=10.0,
        gt=0,
        description="Seconds from a request's first byte to the end of its head (408 beyond).",
    )
    body_timeout: float = Field(
        default=30.0,
        gt=0,
        description="Seconds a request body may send nothing while the server waits for it (dropped beyond).",
    )

    audit_log: str | None = Field(
        default=None,
        description="Audit log: a file PATH (with several workers each writes PATH.w<index>) or '-' for "
        "stdout; one HMAC-chained JSON line per /v1 request (see docs/operations.md). While it cannot be "
        "written, /v1 requests get 503 audit_unavailable. Unset: no audit log.",
    )
    audit_log_max_bytes: int = Field(
        default=100 * MIB,
        ge=0,
        description="Rotate the audit log file before it would grow past this size (0: never).",
    )
    audit_log_keep: int = Field(
        default=10, ge=1, le=1000, description="Rotated audit log files kept (PATH.1 ... PATH.<keep>)."
    )
    worker_index: int | None = Field(
        default=None,
        ge=0,
        description="Set by the worker supervisor for each worker process (names its audit log file); "
        "not a user setting.",
    )

    bench_echo: bool = Field(default=False, description="Expose POST /bench/echo (benchmarks only).")
    ui: bool = Field(
        default=True,
        description="Serve the web console under /ui/ (its pages use the API with the token a person signs "
        "in with); false: /ui answers 404.",
    )
    ui_prometheus_url: str | None = Field(
        default=None,
        description="The Prometheus (http or https, no credentials) whose HTTP API the console's dashboard "
        "reads for every replica, e.g. http://prometheus:9090; the page's Content-Security-Policy then "
        "allows connections to that origin. Unset: the dashboard reads this server's /metrics.",
    )

    @property
    def effective_tombstone_seconds(self) -> float:
        """``key_tombstone_seconds``, or 10 x ``change_poll_interval`` when unset."""
        if self.key_tombstone_seconds is not None:
            return self.key_tombstone_seconds
        return TOMBSTONE_POLLS * self.change_poll_interval

    @property
    def cache_trust_seconds(self) -> float:
        """How long caches are used after the last successful read of the change log: 5 poll intervals.

        Half the default tombstone, so that a replica cut off from the database stops using cached keys well
        before a deleted name can be re-created elsewhere.
        """
        return TRUST_POLLS * self.change_poll_interval

    @field_validator("forwarded_allow_ips", mode="before")
    @classmethod
    def _split_proxies(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()] or None
        return value

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _proxy_addresses(cls, value: list[str] | None) -> list[str] | None:
        if value is None or value == ["*"]:
            return value
        for entry in value:
            try:
                ipaddress.ip_network(entry, strict=False)
            except ValueError:
                raise ValueError(
                    f"{entry!r} is not an IP address or network (CIDR); give the proxies' addresses, "
                    "comma-separated, or '*' alone"
                ) from None
        return value

    @field_validator("enabled_backends", mode="before")
    @classmethod
    def _split_backends(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("enabled_backends")
    @classmethod
    def _known_backends(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        unknown = [name for name in value if name not in KNOWN_BACKENDS]
        if unknown:
            raise ValueError(f"unknown backends {unknown}; allowed: {', '.join(KNOWN_BACKENDS)}")
        if not value:
            raise ValueError("enabled_backends must name at least one backend")
        return list(dict.fromkeys(value))

    @field_validator("default_backend")
    @classmethod
    def _known_default(cls, value: str | None) -> str | None:
        if value is not None and value not in KNOWN_BACKENDS:
            raise ValueError(f"unknown backend {value!r}; allowed: {', '.join(KNOWN_BACKENDS)}")
        return value

    @field_validator("master_key")
    @classmethod
    def _master_key_shape(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        # The keystore's own decoder (app.core.master_key_format), so that every key it accepts (standard or
        # URL-safe alphabet, surrounding whitespace) passes here too; its messages never echo the value.
        try:
            parse_master_key(value.get_secret_value(), "KEYSTREAM_MASTER_KEY")
        except MasterKeyError as exc:
            raise ValueError(str(exc)) from None
        return value

    @field_validator(
        "master_key_file",
        "database_url",
        "pkcs11_lib",
        "pkcs11_token_label",
        "pkcs11_pin",
        "pkcs11_pin_file",
        "tls_cert_file",
        "tls_key_file",
        "tls_client_ca_file",
        "audit_log",
        "ui_prometheus_url",
        mode="before",
    )
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("database_url")
    @classmethod
    def _database_url_shape(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        check_database_url(value.get_secret_value())  # its ValueError never quotes the URL
        return value

    @field_validator("ui_prometheus_url")
    @classmethod
    def _prometheus_url_shape(cls, value: str | None) -> str | None:
        return None if value is None else check_prometheus_url(value)

    @property
    def ui_prometheus_origin(self) -> str | None:
        """The origin (``scheme://host[:port]``) of ``ui_prometheus_url``: the console may connect to it."""
        if self.ui_prometheus_url is None:
            return None
        parts = urlsplit(self.ui_prometheus_url)
        return f"{parts.scheme}://{parts.netloc}"

    @field_validator("root_token")
    @classmethod
    def _root_token_shape(cls, value: SecretStr | None) -> SecretStr | None:
        if value is None:
            return None
        if parse_token(value.get_secret_value()) is None:
            raise ValueError(
                "root_token must look like ks_<id>_<secret> (id: 4-32 hex digits, secret >= 16 chars)"
            )
        return value

    @model_validator(mode="after")
    def _tombstone_outlasts_trust(self) -> Settings:
        # A replica that cannot read the change log uses its caches for cache_trust_seconds; a deleted
        # name must stay held longer than that (plus one poll), or it could encrypt under the deleted key.
        least = (TRUST_POLLS + 1) * self.change_poll_interval
        if self.key_tombstone_seconds is not None and self.key_tombstone_seconds < least:
            raise ValueError(
                f"key_tombstone_seconds must be at least {TRUST_POLLS + 1} x change_poll_interval "
                f"({least:g} s), got {self.key_tombstone_seconds:g}"
            )
        return self

    @model_validator(mode="after")
    def _master_key_source(self) -> Settings:
        if self.seal == "pkcs11":
            missing = [
                f"KEYSTREAM_{name.upper()}"
                for name in ("pkcs11_lib", "pkcs11_token_label")
                if getattr(self, name) is None
            ]
            if missing:
                raise ValueError(f"seal=pkcs11 needs {' and '.join(missing)}")
            if (self.pkcs11_pin is None) == (self.pkcs11_pin_file is None):
                raise ValueError(
                    "seal=pkcs11 needs exactly one of KEYSTREAM_PKCS11_PIN and KEYSTREAM_PKCS11_PIN_FILE"
                )
            return self
        if self.seal == "shamir":  # no master key setting: the key comes from the operators' shares
            return self
        try:
            check_master_key_source(
                self.master_key.get_secret_value() if self.master_key else None,
                self.master_key_file,
                shared_database=self.database_url is not None,
            )
        except MasterKeyError as exc:
            raise ValueError(str(exc)) from None
        return self

    @model_validator(mode="after")
    def _tls_files(self) -> Settings:
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError("tls_cert_file and tls_key_file go together: set both for HTTPS, or neither")
        if self.tls_client_ca_file is not None and self.tls_cert_file is None:
            raise ValueError("tls_client_ca_file (mTLS) needs tls_cert_file and tls_key_file")
        if self.tls_disable and self.tls_cert_file is not None:
            raise ValueError("tls_disable contradicts tls_cert_file: unset one of them")
        return self

    @model_validator(mode="after")
    def _default_in_enabled(self) -> Settings:
        if (
            self.default_backend
            and self.enabled_backends
            and self.default_backend not in self.enabled_backends
        ):
            raise ValueError(f"default_backend {self.default_backend!r} is not in enabled_backends")
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment and ``.env``.

    Raises:
        pydantic.ValidationError: a ``KEYSTREAM_*`` value is invalid (the message names the field).
    """
    return Settings()


def describe_settings_error(exc: ValidationError) -> str:
    """One line naming each invalid ``KEYSTREAM_*`` variable and what is wrong with it.

    pydantic's own text takes several lines per field (a documentation link included); a start-up error is one
    line. The values are never quoted (:class:`Settings` hides them, and only pydantic's messages, which do
    not repeat the input, are used): a malformed secret is often the real one with a typo.
    """
    problems = []
    for error in exc.errors(include_url=False, include_input=False):
        message = str(error["msg"]).removeprefix("Value error, ")
        location = error["loc"]
        if location:
            problems.append(f"KEYSTREAM_{str(location[0]).upper()}: {message}")
        else:  # a rule over several fields: its message names them
            problems.append(message)
    return "; ".join(problems)

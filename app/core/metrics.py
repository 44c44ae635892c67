"""Prometheus metrics of the service, as module-level constants.

Base units are in the names; labels stay bounded (backend, operation, format, route template, method, status,
result) and never carry key names, tokens or raw paths. With several workers, set ``PROMETHEUS_MULTIPROC_DIR``
before this module is imported (``keystream serve --workers N`` does) and prometheus-client aggregates the
workers' values at scrape time.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

# Imported first: it registers the collector that flushes buffered updates before any metric is read.
from app.core import metric_buffer  # noqa: F401

#: Buckets from 10 µs to 10 s: a 64-byte AES-NI call and a 64 MiB python-backend call both land in range.
CRYPTO_BUCKETS = (
    1e-5,
    2.5e-5,
    5e-5,
    1e-4,
    2.5e-4,
    5e-4,
    1e-3,
    2.5e-3,
    5e-3,
    1e-2,
    2.5e-2,
    5e-2,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
)
HTTP_BUCKETS = (1e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)

CRYPTO_SECONDS = Histogram(
    "keystream_crypto_seconds",
    "Time spent in the AES-CTR/HMAC work alone (no network, no keystore), per call into the core.",
    ["backend", "operation", "format"],
    buckets=CRYPTO_BUCKETS,
)
CRYPTO_BYTES = Counter(
    "keystream_crypto_bytes",
    "Payload bytes processed by the crypto core.",
    ["backend", "operation"],
)
HTTP_REQUEST_SECONDS = Histogram(
    "keystream_http_request_duration_seconds",
    "HTTP request duration from first byte received to last byte sent.",
    ["route", "method", "status"],
    buckets=HTTP_BUCKETS,
)
INFLIGHT_REQUESTS = Gauge(
    "keystream_inflight_requests",
    "HTTP requests being served right now.",
    multiprocess_mode="livesum",
)
KEY_CACHE_REQUESTS = Counter(
    "keystream_key_cache_requests",
    "Lookups in the expanded-key cache.",
    ["result"],
)
SECRET_MEMORY_UNLOCKED = Gauge(
    "keystream_secret_memory_unlocked_bytes",
    "Bytes of memory for secrets (the master key, unwrapped key versions) that could not be locked (mlock "
    "refused: RLIMIT_MEMLOCK or CAP_IPC_LOCK); 0 when all of it is locked. Unlocked secrets may be swapped "
    "to disk.",
    multiprocess_mode="livesum",
)
KEY_CACHE_EVICTIONS = Counter(
    "keystream_key_cache_evictions",
    "Entries evicted from the expanded-key cache because it was full.",
)
KEY_CACHE_ENTRIES = Gauge(
    "keystream_key_cache_entries",
    "Entries in the expanded-key cache.",
    multiprocess_mode="livesum",
)
BACKEND_POOL_RESTARTS = Counter(
    "keystream_backend_pool_restarts",
    "Worker-process pools of a backend rebuilt after a worker died (python backend).",
    ["backend"],
)
KEY_AUTO_ROTATIONS = Counter(
    "keystream_key_auto_rotations",
    "Keys rotated automatically because their auto_rotate_period elapsed (counted by the worker that "
    "rotated; no key names as labels).",
)
KEYSTORE_BREAKER_OPEN = Gauge(
    "keystream_keystore_breaker_open",
    "1 while a process answers every keystore call with 503 at once (its database is known to be "
    "unreachable: the circuit breaker is open), else 0.",
    multiprocess_mode="livemax",
)
KEYSTORE_BREAKER_OPENINGS = Counter(
    "keystream_keystore_breaker_openings",
    "Times a process's keystore circuit breaker opened (the database became unreachable from it).",
)
SEALED = Gauge(
    "keystream_sealed",
    "1 while this worker is sealed (the shamir seal awaiting its unseal shares: every route but /healthz, "
    "/readyz, /metrics, /v1/sys/seal-status and /unseal answers 503 sealed), else 0. One series per worker.",
    multiprocess_mode="liveall",
)
BATCH_BUFFER_BYTES = Gauge(
    "keystream_batch_buffer_bytes",
    "Bytes of batch request bodies held in the batch budget right now (summed over workers); at "
    "keystream_batch_buffer_limit_bytes further batches wait, then get 503 overloaded.",
    multiprocess_mode="livesum",
)
BATCH_BUFFER_LIMIT_BYTES = Gauge(
    "keystream_batch_buffer_limit_bytes",
    "The batch budget: most bytes of batch bodies held at once (KEYSTREAM_BATCH_BUFFER_BUDGET_BYTES per "
    "worker, summed over workers).",
    multiprocess_mode="livesum",
)
CHANGE_LOG_READ_TIMESTAMP = Gauge(
    "keystream_change_log_read_timestamp_seconds",
    "Unix time of a worker's last successful read of the keystore's change log. time() minus this is how "
    "long that worker's caches may lag writes made elsewhere; past 5 poll intervals it stops using them. "
    "One series per worker (its index, 0 to workers-1).",
    ["worker"],
    multiprocess_mode="livemax",
)

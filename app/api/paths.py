"""Every route path of the service and every pattern that recognises one, written once.

The route decorators, the fast dispatcher (:mod:`app.api.hotpath`), the middlewares that treat some paths
differently (:mod:`app.api.middleware.body_limit`, :mod:`app.api.middleware.audit`), the OpenAPI document
and the sealed gate all import their paths from here, so a path cannot be renamed in one of them and
forgotten in another (``tests/app/api/test_paths.py`` refuses a ``/v1/`` path literal anywhere else
under ``app/api``).

Templates use Starlette's syntax: ``{name}`` is one path segment of at least one character, which is what
``[^/]+`` matches in the compiled patterns below.
"""

from __future__ import annotations

import re
from typing import TypeVar

from app.errors import StartupRefusedError

T = TypeVar("T")

#: Every path under this prefix is the versioned API: audited, and (but for :data:`NO_TOKEN_PATHS`) behind
#: a bearer token.
V1 = "/v1/"

HEALTHZ = "/healthz"
READYZ = "/readyz"
METRICS = "/metrics"
BACKENDS = "/v1/backends"
#: The web console (:mod:`app.api.console`): ``UI`` answers with a redirect to ``UI_ROOT``, under which
#: every file of the built console is served.
UI = "/ui"
UI_ROOT = f"{UI}/"
#: What the console's page asks the service at start (where its dashboard reads metrics).
UI_CONFIG = f"{UI}/config.json"
#: The benchmark's baseline route (served only with ``KEYSTREAM_BENCH_ECHO=1``).
BENCH_ECHO = "/bench/echo"

KEYS = "/v1/keys"
KEY = "/v1/keys/{name}"
KEY_IMPORT = f"{KEY}/import"
KEY_ROTATE = f"{KEY}/rotate"
KEY_IMPORT_VERSION = f"{KEY}/import_version"
KEY_TRIM = f"{KEY}/trim"
#: The public half of the wrapping key a wrapped import's ``ciphertext`` is made with.
WRAPPING_KEY = "/v1/wrapping_key"
#: A version's material, or every version's, of an ``exportable`` key (admin).
KEY_EXPORT = f"{KEY}/export"
#: A key's backup blob (admin), and the restore of one (``restore`` is not a key name here: POST only).
KEY_BACKUP = f"{KEY}/backup"
KEYS_RESTORE = f"{KEYS}/restore"
DATAKEY = f"{KEY}/datakey"

#: The streaming routes, by operation (only bodies up to ``small_body_max_bytes`` are read whole).
ENCRYPT = f"{KEY}/encrypt"
DECRYPT = f"{KEY}/decrypt"
REWRAP = f"{KEY}/rewrap"
HMAC = f"{KEY}/hmac"
HMAC_BATCH = f"{HMAC}/batch"
VERIFY = f"{KEY}/verify"
VERIFY_BATCH = f"{VERIFY}/batch"
RANDOM = "/v1/random"
HASH = "/v1/hash"
STREAMING_PATHS = {"encrypt": ENCRYPT, "decrypt": DECRYPT, "rewrap": REWRAP}
#: The batch routes, by operation (JSON bodies bounded by ``batch_max_bytes``, read by hand).
BATCH_PATHS = {operation: f"{path}/batch" for operation, path in STREAMING_PATHS.items()}

#: The Transit-compatible API (:mod:`app.api.routes.transit`): Vault's paths, request and answer shapes under
#: this mount, errors as ``{"errors": [...]}`` (:mod:`app.api.errors`). The routes live here whatever
#: ``transit_mount`` says; another mount is an alias the dispatcher rewrites to it (:func:`transit_alias`).
TRANSIT_MOUNT = "transit"
TRANSIT = f"/v1/{TRANSIT_MOUNT}/"
TRANSIT_KEYS = f"{TRANSIT}keys"
TRANSIT_KEY = f"{TRANSIT_KEYS}/{{name}}"
TRANSIT_KEY_CONFIG = f"{TRANSIT_KEY}/config"
TRANSIT_KEY_ROTATE = f"{TRANSIT_KEY}/rotate"
TRANSIT_KEY_TRIM = f"{TRANSIT_KEY}/trim"
#: Wrapped import (Vault's BYOK): the wrapping key's public half, and the two imports that take material
#: wrapped under it.
TRANSIT_WRAPPING_KEY = f"{TRANSIT}wrapping_key"
TRANSIT_KEY_IMPORT = f"{TRANSIT_KEY}/import"
TRANSIT_KEY_IMPORT_VERSION = f"{TRANSIT_KEY}/import_version"
#: ``export_type`` is Vault's ``encryption-key`` (the only one an AES key has here); ``version`` a number or
#: ``latest``.
TRANSIT_EXPORT = f"{TRANSIT}export/{{export_type}}/{{name}}"
TRANSIT_EXPORT_VERSION = f"{TRANSIT_EXPORT}/{{version}}"
TRANSIT_BACKUP = f"{TRANSIT}backup/{{name}}"
TRANSIT_RESTORE = f"{TRANSIT}restore"
TRANSIT_RESTORE_NAME = f"{TRANSIT_RESTORE}/{{name}}"
TRANSIT_ENCRYPT = f"{TRANSIT}encrypt/{{name}}"
TRANSIT_DECRYPT = f"{TRANSIT}decrypt/{{name}}"
TRANSIT_REWRAP = f"{TRANSIT}rewrap/{{name}}"
#: ``kind`` is ``plaintext`` or ``wrapped``.
TRANSIT_DATAKEY = f"{TRANSIT}datakey/{{kind}}/{{name}}"
TRANSIT_HMAC = f"{TRANSIT}hmac/{{name}}"
TRANSIT_HMAC_ALGORITHM = f"{TRANSIT_HMAC}/{{url_algorithm}}"
TRANSIT_VERIFY = f"{TRANSIT}verify/{{name}}"
TRANSIT_VERIFY_ALGORITHM = f"{TRANSIT_VERIFY}/{{url_algorithm}}"
TRANSIT_RANDOM = f"{TRANSIT}random"
TRANSIT_RANDOM_BYTES = f"{TRANSIT_RANDOM}/{{url_bytes}}"
TRANSIT_HASH = f"{TRANSIT}hash"
TRANSIT_HASH_ALGORITHM = f"{TRANSIT_HASH}/{{url_algorithm}}"

TOKENS = "/v1/tokens"
#: The path segment that names the caller's own token, never a token id (:mod:`app.api.routes.tokens`).
SELF = "self"
TOKEN_SELF = f"{TOKENS}/{SELF}"
TOKEN_SELF_RENEW = f"{TOKEN_SELF}/renew"
#: One token by id, through the ``token_id`` convertor that refuses ``self``.
TOKEN_BY_ID = f"{TOKENS}/{{token_id:token_id}}"

#: Login roles (admin) and the JWT login (no token: the JWT is the credential).
AUTH_ROLES = "/v1/auth/roles"
#: ``role_name``, not ``name``: the audit log records a ``name`` path parameter as the key's name.
AUTH_ROLE = f"{AUTH_ROLES}/{{role_name}}"
JWT_CONFIG = "/v1/auth/jwt/config"
JWT_LOGIN = "/v1/auth/jwt/login"
#: The certificate login (no token: the client certificate the TLS handshake verified is the credential).
CERT_LOGIN = "/v1/auth/cert/login"

AUDIT_HASH = "/v1/audit/hash"
AUDIT_STATUS = "/v1/audit/status"

SEAL_STATUS = "/v1/sys/seal-status"
UNSEAL = "/v1/sys/unseal"
SEAL = "/v1/sys/seal"
ROTATE_MASTER = "/v1/sys/rotate-master"

#: What a request to a sealed server is told (503 ``sealed``).
SEALED_MESSAGE = f"sealed: this server awaits its unseal shares (POST {UNSEAL})"

#: The ``/v1`` paths served without a token (an operator holding an unseal share needs none, as with Vault;
#: a login presents its own credential).
NO_TOKEN_PATHS = frozenset({SEAL_STATUS, UNSEAL, JWT_LOGIN, CERT_LOGIN})
#: The paths a sealed server still serves: liveness, readiness (503 while sealed), metrics, and unsealing.
OPEN_WHILE_SEALED = frozenset({HEALTHZ, READYZ, METRICS, SEAL_STATUS, UNSEAL})

_NAME = r"(?P<name>[^/]+)"
_OPERATION = "(?P<operation>" + "|".join(STREAMING_PATHS) + ")"
#: A streaming route's path; ``name`` and ``operation`` (encrypt, decrypt, rewrap) are its groups.
STREAMING_ROUTE = re.compile(re.escape(KEYS) + f"/{_NAME}/{_OPERATION}")
#: ``/v1/keys/{name}/hmac``, ``/verify`` (one message each) and ``/datakey``, the key routes with a JSON body
#: the fast dispatcher serves; ``name`` and ``operation`` are its groups.
KEY_JSON_ROUTE = re.compile(re.escape(KEYS) + f"/{_NAME}/(?P<operation>hmac|verify|datakey)")
#: A batch route's path, with the same groups.
BATCH_ROUTE = re.compile(re.escape(KEYS) + f"/{_NAME}/{_OPERATION}/batch")
#: The Transit API's data operations the fast dispatcher serves (hmac and verify without an algorithm in the
#: path); groups as in STREAMING_ROUTE.
TRANSIT_CRYPTO_ROUTE = re.compile(
    re.escape(TRANSIT) + f"(?P<operation>encrypt|decrypt|rewrap|hmac|verify)/{_NAME}"
)
#: The Transit routes that take ``batch_input``: their bodies are bounded as the batch routes' are.
TRANSIT_BATCH_ROUTE = re.compile(
    re.escape(TRANSIT) + "(?:encrypt|decrypt|rewrap|hmac|verify)/[^/]+(?:/[^/]+)?"
)
#: ``/v1`` POST routes without side effects besides their answer: the audit log writes no ``request`` line
#: before they run (it holds their answer until its ``response`` line is written).
PURE_ROUTE = re.compile(
    re.escape(KEYS)
    + "/[^/]+/(?:(?:"
    + "|".join(STREAMING_PATHS)
    + "|hmac|verify)(?:/batch)?|datakey)|"
    + re.escape(AUDIT_HASH)
    + "|"
    + re.escape(RANDOM)
    + "|"
    + re.escape(HASH)
    # The Transit API's routes that only compute: its data operations, data keys, random bytes and hashes.
    + "|"
    + re.escape(TRANSIT)
    + "(?:(?:encrypt|decrypt|rewrap|hmac|verify|datakey/[^/]+)/[^/]+(?:/[^/]+)?|(?:random|hash)(?:/[^/]+)?)"
)


def _reserved_v1_segments() -> frozenset[str]:
    """The first segment after ``/v1/`` of every path above (``keys``, ``sys``, ``transit``, ...)."""
    return frozenset(
        value.split("/")[2]
        for name, value in globals().items()
        if name.isupper() and isinstance(value, str) and value.startswith(V1) and value != V1
    )


#: ``/v1/<segment>`` names the service's routes use: another Transit mount may not start with one.
RESERVED_V1_SEGMENTS = _reserved_v1_segments()


#: What a path memo (:func:`remember`) keeps: paths of at most ``MEMO_PATH_MAX`` characters, at most
#: ``MEMO_PATHS_MAX`` of them (then it is emptied), so a client sending ever new paths costs a memo nothing
#: but the work it would have done anyway.
MEMO_PATHS_MAX = 4096
MEMO_PATH_MAX = 256


def remember(memo: dict[str, T], path: str, value: T) -> T:
    """Keep ``value`` as ``memo``'s answer for ``path``, within the bounds above, and return it.

    For what depends on the path alone (which route table it names, its body limit), so a memo is never
    stale; it spares the per-request prefix tests and regular expressions.
    """
    if len(path) <= MEMO_PATH_MAX:
        if len(memo) >= MEMO_PATHS_MAX:
            memo.clear()
        memo[path] = value
    return value


def transit_alias(mount: str) -> str | None:
    """The path prefix (``/v1/<mount>/``) that serves the Transit API when it is mounted elsewhere than
    ``transit`` (``None`` for the default mount).

    Raises:
        StartupRefusedError: ``mount`` starts with a segment the service's routes use (``keys``, ...).
    """
    if mount == TRANSIT_MOUNT:
        return None
    first = mount.split("/")[0]
    if first in RESERVED_V1_SEGMENTS:
        raise StartupRefusedError(
            f"KEYSTREAM_TRANSIT_MOUNT {mount!r} starts with {first!r}, a path the service's own routes use "
            f"(reserved: {', '.join(sorted(RESERVED_V1_SEGMENTS))})"
        )
    return f"{V1}{mount}/"

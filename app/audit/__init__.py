"""The tamper-evident audit log: keys derived from the master key, the HMAC chain, and the file writer.

* :mod:`app.audit.keys`: the hash key (``"hmac-sha256:<hex>"`` of values never logged in the clear) and the
  chain key, both derived from the master key with HKDF.
* :mod:`app.audit.chain`: sealing a line into its chain, verifying lines and remembered heads.
* :mod:`app.audit.log`: :class:`AuditLog`, the fail-closed writer with size rotation.

The HTTP side (what a record holds, when it is written) is :mod:`app.api.middleware.audit`; the verifier's
command line is ``keystream-server audit verify`` (:mod:`app.admin._audit`). Nothing here imports a web
framework.
"""

from __future__ import annotations

from app.audit.chain import GENESIS, Link, Problem, Report, parse_head, seal, verify_lines
from app.audit.keys import HASH_PREFIX, AuditKeys, audit_keys_for, derive_audit_keys
from app.audit.log import (
    STDOUT,
    AuditLog,
    AuditUnavailableError,
    chain_head,
    check_writable,
    is_first_file,
    log_files,
    rotated_paths,
    worker_path,
    worker_paths,
)

__all__ = [
    "GENESIS",
    "HASH_PREFIX",
    "STDOUT",
    "AuditKeys",
    "AuditLog",
    "AuditUnavailableError",
    "Link",
    "Problem",
    "Report",
    "audit_keys_for",
    "chain_head",
    "check_writable",
    "derive_audit_keys",
    "is_first_file",
    "log_files",
    "parse_head",
    "rotated_paths",
    "seal",
    "verify_lines",
    "worker_path",
    "worker_paths",
]

"""``keystream``: manage keys and tokens, and encrypt/decrypt files from the shell.

The server is not part of this command: it runs with ``keystream-server serve`` from the server distribution.

Exit codes (stable; scripts may rely on them):

====  ===========================================================================================
 0    success
 1    the service answered with an error not listed below (400 bad request, 413, 5xx, ...)
 2    usage error: bad or missing flags or arguments (after the command's usage line); key material of
      the wrong size or encoding for ``keys import``
 3    connection error: the service is unreachable, timed out, or TLS failed (also: an http:// URL
      for a server that speaks TLS; the message says to use https://)
 4    integrity error: decryption failed (wrong key/associated data, tampered or truncated
      ciphertext) or a stream was cut short (a sealed decrypt or rewrap the service stopped after
      N verified bytes: a later segment failed authentication); any partial output file has been removed
 5    authentication/authorization: no token given, 401 (bad token) or 403 (scope or key not allowed),
      or the automatic login's JWT file (``KEYSTREAM_JWT_FILE``) missing, unreadable or not a JWT
 6    not found: 404 (key, key version or token)
 7    conflict: 409 (key exists, deletion not allowed)
 8    local I/O error: input missing or unreadable, output exists without ``--force``, or writing failed
 9    ``batch``: some items failed; each has an ``error`` object on its output line, the others succeeded
130   interrupted (Ctrl-C); 143: terminated (SIGTERM). A partial output file is removed in both cases
====  ===========================================================================================

Every error except a usage error is one ``keystream: error: ...`` line on stderr.

The URL and token come from ``--url``/``--token`` or ``KEYSTREAM_URL``/``KEYSTREAM_TOKEN`` (URL default
``http://127.0.0.1:8000``); without a token, ``KEYSTREAM_ROLE`` and ``KEYSTREAM_JWT_FILE`` make every command
log in with the file's JWT first. ``-`` as IN or OUT means stdin or stdout.

Modules: ``_parser`` (flags and help), ``_commands`` (keys, tokens, backends), ``_roles`` (``roles``),
``_transfer`` (encrypt, decrypt, ``--value``), ``_batch`` (``batch encrypt|decrypt`` of JSON lines),
``_datakey`` (``datakey``), ``_operator`` (``operator unseal|seal-status|seal``), ``_output`` (tables, JSON,
errors), ``_progress`` (the progress bar), ``_codes`` (exit codes), ``_main`` (errors to exit codes).
"""

from __future__ import annotations

from keystream_client.cli._codes import (
    EXIT_API_ERROR,
    EXIT_AUTH,
    EXIT_CONFLICT,
    EXIT_CONNECTION,
    EXIT_INTEGRITY,
    EXIT_INTERRUPTED,
    EXIT_IO,
    EXIT_ITEMS_FAILED,
    EXIT_NOT_FOUND,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_USAGE,
)
from keystream_client.cli._main import main
from keystream_client.cli._parser import build_parser, parse_size

__all__ = [
    "EXIT_API_ERROR",
    "EXIT_AUTH",
    "EXIT_CONFLICT",
    "EXIT_CONNECTION",
    "EXIT_INTEGRITY",
    "EXIT_INTERRUPTED",
    "EXIT_IO",
    "EXIT_ITEMS_FAILED",
    "EXIT_NOT_FOUND",
    "EXIT_OK",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "build_parser",
    "main",
    "parse_size",
]

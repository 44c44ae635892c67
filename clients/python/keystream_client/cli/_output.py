"""What ``keystream`` prints: JSON, key details, token tables and one-line errors."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from keystream_client import Key, Token
from keystream_client._models import time_text


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, sort_keys=True))


def print_key(key: Key, as_json: bool) -> None:
    if as_json:
        print_json(key.to_json())
        return
    print(f"name:                   {key.name}")
    print(f"type:                   {key.type}")
    print(f"scheme:                 {key.scheme}")
    print(f"segment_size:           {key.segment_size}")
    print(f"latest_version:         {key.latest_version}")
    print(f"min_decryption_version: {key.min_decryption_version}")
    print(f"deletion_allowed:       {str(key.deletion_allowed).lower()}")
    print(f"imported:               {str(key.imported).lower()}")
    print(f"auto_rotate_period:     {duration_text(key.auto_rotate_period)}")
    print(f"created_at:             {time_text(key.created_at)}")
    print(f"updated_at:             {time_text(key.updated_at)}")
    for version in key.versions:
        print(f"  version {version.version}: created {time_text(version.created_at)}")


def duration_text(seconds: int) -> str:
    """A rotation period for people: ``86400`` -> ``"86400s (1d)"``, ``5400`` -> ``"5400s (1h30m)"``, ``0`` ->
    ``"off"``."""
    if seconds <= 0:
        return "off"
    parts: list[str] = []
    rest = seconds
    for unit, size in (("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return f"{seconds}s ({''.join(parts)})"


def table(rows: Sequence[Sequence[str]]) -> None:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())


def print_tokens(tokens: Sequence[Token], as_json: bool, *, one: bool = False) -> None:
    """Tokens as a table (``EXPIRES``/``MAX EXPIRES`` are ``-`` for a token without ttl) or JSON (a list, or
    one object when ``one``)."""
    if as_json:
        print_json(tokens[0].to_json() if one else [token.to_json() for token in tokens])
        return
    rows = [["ID", "SCOPES", "KEY PATTERNS", "CREATED", "EXPIRES", "MAX EXPIRES", "DESCRIPTION"]]
    rows += [
        [
            t.token_id,
            ",".join(t.scopes),
            ",".join(t.key_patterns),
            time_text(t.created_at),
            "-" if t.expires_at is None else time_text(t.expires_at),
            "-" if t.max_expires_at is None else time_text(t.max_expires_at),
            t.description,
        ]
        for t in tokens
    ]
    table(rows)


def error(message: str) -> None:
    print(f"keystream: error: {message}", file=sys.stderr)

"""What an export of an ``exportable`` key hands out: the versions asked for, their material as base64.

Shared by the native ``/v1/keys/{name}/export`` and the Transit API's ``export``; the rule that only an
``exportable`` key's material leaves is the keystore's (:meth:`app.keystore.KeyStore.export_material`).
"""

from __future__ import annotations

import base64

from app.errors import BadRequestError
from app.keystore import KeyInfo, KeyStore

__all__ = ["exported", "parse_version"]


def parse_version(text: str | None, latest: int) -> int | None:
    """A version asked for as text: ``None`` (every version), ``latest`` or a number.

    Raises:
        BadRequestError: anything else.
    """
    if text is None or text == "":
        return None
    if text == "latest":
        return latest
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        raise BadRequestError(f"version must be a number or latest, got {text[:20]!r}")
    return int(text)


def exported(keystore: KeyStore, name: str, version: str | None) -> tuple[KeyInfo, dict[str, str]]:
    """Key ``name``'s metadata and ``{"<version>": base64 of its material}`` for ``version`` (a number,
    ``latest``, or every remaining version when ``None``).

    Raises:
        BadRequestError: a malformed version, or the key is not exportable.
        KeyNotFoundError, KeyVersionNotFoundError: no such key or version.
    """
    latest = keystore.get_key(name).latest_version
    info, materials = keystore.export_material(name, parse_version(version, latest))
    return info, {str(number): base64.b64encode(material).decode() for number, material in materials}

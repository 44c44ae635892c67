"""Options of one streaming encrypt/decrypt request (format, associated data, IV, offset, key version,
backend), validated before anything is sent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from keystream_client._models import b64

#: The ciphertext formats: ``sealed`` (authenticated, segmented) and ``raw`` (plain AES-CTR).
FORMATS: tuple[str, ...] = ("sealed", "raw")
#: Bytes of a raw-format IV (one AES block).
IV_SIZE = 16

_OPTION_NAMES = ("format", "associated_data", "iv", "offset", "key_version", "backend")


@dataclass(frozen=True)
class CryptoOptions:
    """Query parameters and headers of one encrypt/decrypt request, validated.

    Raises (from :meth:`build`):
        TypeError: an option has the wrong type.
        ValueError: an option is out of range or does not fit the format.
    """

    format: str = "sealed"
    associated_data: bytes | None = field(default=None, repr=False)
    iv: bytes | None = None
    offset: int = 0
    key_version: int | None = None
    backend: str | None = None

    @classmethod
    def build(
        cls,
        format: str = "sealed",
        associated_data: bytes | None = None,
        iv: bytes | str | None = None,
        offset: int = 0,
        key_version: int | None = None,
        backend: str | None = None,
    ) -> CryptoOptions:
        """Validated options (see class docstring for what it raises)."""
        if format not in FORMATS:
            raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
        if associated_data is not None and not isinstance(associated_data, bytes | bytearray | memoryview):
            raise TypeError("associated_data must be bytes-like")
        iv_bytes: bytes | None = None
        if isinstance(iv, str):
            try:
                iv_bytes = bytes.fromhex(iv)
            except ValueError:
                raise ValueError("iv must be 32 hex digits") from None
        elif iv is not None:
            iv_bytes = bytes(iv)
        if iv_bytes is not None and len(iv_bytes) != IV_SIZE:
            raise ValueError(f"iv must be {IV_SIZE} bytes (32 hex digits), got {len(iv_bytes)} bytes")
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"offset must be an integer >= 0, got {offset!r}")
        if format == "sealed" and (iv_bytes is not None or offset):
            raise ValueError("iv and offset apply to the raw format only")
        if key_version is not None and (not isinstance(key_version, int) or key_version < 1):
            raise ValueError(f"key_version must be an integer >= 1, got {key_version!r}")
        ad = bytes(associated_data) if associated_data is not None else None
        return cls(format, ad, iv_bytes, offset, key_version, backend)

    @classmethod
    def from_kwargs(cls, options: dict[str, Any]) -> CryptoOptions:
        """:meth:`build` from keyword arguments; unknown names raise :class:`TypeError`."""
        unknown = sorted(set(options) - set(_OPTION_NAMES))
        if unknown:
            raise TypeError(f"unknown options {unknown}; allowed: {', '.join(_OPTION_NAMES)}, on_progress")
        return cls.build(**options)

    def check(self, operation: str) -> None:
        """Check what depends on the operation.

        Raises:
            ValueError: raw decrypt without ``iv`` or ``key_version``; rewrap of the raw format.
        """
        if operation == "rewrap" and self.format != "sealed":
            raise ValueError("rewrap takes sealed ciphertexts only (format='sealed')")
        if operation == "decrypt" and self.format == "raw" and (self.iv is None or self.key_version is None):
            raise ValueError("decrypting the raw format needs the iv and key_version that encrypt returned")

    def params(self) -> dict[str, str]:
        """Query parameters."""
        params = {"format": self.format}
        if self.iv is not None:
            params["iv"] = self.iv.hex()
        if self.offset:
            params["offset"] = str(self.offset)
        if self.key_version is not None:
            params["key_version"] = str(self.key_version)
        if self.backend is not None:
            params["backend"] = self.backend
        return params

    def headers(self) -> dict[str, str]:
        """Request headers (associated data, base64)."""
        if self.associated_data is None:
            return {}
        return {"Keystream-Associated-Data": b64(self.associated_data)}

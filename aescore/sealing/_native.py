"""The aesni backend's :class:`~aescore.SealedBatch`: the native sealed-format core (``_sealed``) on one ISA.

The extension is optional (a build without it, or a SHA-256 path forced to one the CPU lacks, leaves
:func:`native_sealed_batch` returning ``None``), and its per-item codes are the values of
:class:`~aescore.SealedItemStatus`.
"""

from __future__ import annotations

from collections.abc import Sequence

from .._interface import OpenedItem, SealedBatch
from .._validate import BytesLike

try:
    from . import _sealed
except ImportError:  # built without the extension: callers keep the per-message path
    _sealed = None  # type: ignore[assignment]

__all__ = ["NativeSealedBatch", "native_sealed_batch"]

#: The AES paths the native core runs (``aescore.ctr._aesni``'s names; ``none`` has no AES-NI).
_NATIVE_ISAS = frozenset({"aesni", "vaes256", "vaes512"})


class NativeSealedBatch(SealedBatch):
    """Seal or open many sealed messages with one call into ``sealed_batch.c`` on a fixed AES path."""

    __slots__ = ("_isa",)

    def __init__(self, isa: str) -> None:
        self._isa = isa

    @property
    def isa(self) -> str:
        return self._isa

    def seal_ctr_hmac(
        self,
        ikm: BytesLike,
        derived_size: int,
        segment_size: int,
        plaintexts: Sequence[bytes],
        associated_data: Sequence[bytes],
        randomness: bytes,
    ) -> list[bytes | None]:
        return _sealed.seal_many(
            ikm, derived_size, segment_size, plaintexts, associated_data, randomness, self._isa
        )

    def open_ctr_hmac(
        self,
        candidates: Sequence[BytesLike],
        derived_size: int,
        segment_size: int,
        ciphertexts: Sequence[bytes],
        associated_data: Sequence[bytes],
    ) -> list[OpenedItem]:
        return _sealed.open_many(
            candidates, derived_size, segment_size, ciphertexts, associated_data, self._isa
        )

    def seal_gcm(
        self,
        ikm: BytesLike,
        derived_size: int,
        segment_size: int,
        plaintexts: Sequence[bytes],
        associated_data: Sequence[bytes],
        randomness: bytes,
    ) -> list[bytes | None]:
        return _sealed.seal_many(
            ikm, derived_size, segment_size, plaintexts, associated_data, randomness, self._isa, "gcm"
        )

    def open_gcm(
        self,
        candidates: Sequence[BytesLike],
        derived_size: int,
        segment_size: int,
        ciphertexts: Sequence[bytes],
        associated_data: Sequence[bytes],
    ) -> list[OpenedItem]:
        return _sealed.open_many(
            candidates, derived_size, segment_size, ciphertexts, associated_data, self._isa, "gcm"
        )

    def __repr__(self) -> str:
        return f"<NativeSealedBatch isa={self._isa!r}>"


_by_isa: dict[str, NativeSealedBatch] = {}


def native_sealed_batch(isa: str) -> NativeSealedBatch | None:
    """The native sealer for AES path ``isa``, or ``None`` when the core cannot run (not built, no AES-NI,
    a forced SHA-256 path this CPU lacks)."""
    if _sealed is None or isa not in _NATIVE_ISAS or _sealed.unavailable_reason() is not None:
        return None
    sealer = _by_isa.get(isa)
    if sealer is None:
        sealer = _by_isa.setdefault(isa, NativeSealedBatch(isa))
    return sealer

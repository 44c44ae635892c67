"""Whole sealed messages, many at a time: the batch routes' crypto in one native call per batch.

:func:`seal_many` and :func:`open_many` give the same bytes and the same per-message errors as a
:class:`~.SealedEncryptor` / :class:`~.SealedDecryptor` per message. With a backend whose ``runs_inline`` is
true and whose ``sealed_batch()`` offers the native core (``aesni``), every message of the call is sealed or
opened by one C call (HKDF-SHA256, AES-CTR and HMAC-SHA256, the GIL released for calls over 16 KiB). Other
backends (``python``, ``hwsim``: ``sealed_batch()`` is ``None``) keep the per-message Python path, so their
work still goes through the backend. The native core serves both schemes (``ctr-hmac``: AES-CTR and
HMAC-SHA256; ``gcm``: one fused AES-GCM call per segment). On the per-message path a gcm message that fits in
one segment (every small item) is sealed directly: HKDF, one AES-GCM call and the header, without a
:class:`~.SealedEncryptor` (the same bytes at a seventh of the cost).

Salts and nonce prefixes come from one :func:`os.urandom` call per batch (through
:data:`.randomness.random_bytes`, which tests replace): the same CSPRNG as the streaming encryptor, one
system call instead of two per message, and the C code stays free of entropy sources.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import aescore
from app.core.schemes import CTR_HMAC, DEFAULT_SCHEME, GCM
from app.core.secret_memory import KeyMaterial
from app.errors import PayloadTooLargeError

from . import messages, randomness
from .decryptor import SealedDecryptor
from .encryptor import SealedEncryptor
from .format import (
    GCM_TAG_SIZE,
    NONCE_PREFIX_SIZE,
    SealedDecryptionError,
    as_key_material,
    check_ikm,
    derive_gcm_key,
    tag_size_of,
    too_many_segments_message,
)
from .parameters import KeyParameters, checked_parameters

__all__ = ["native_isa", "open_many", "open_one", "seal_many", "seal_one"]

Status = aescore.SealedItemStatus

#: ``(plaintext, key version)`` of a message that opened, else its error.
Opened = tuple[bytes, int] | SealedDecryptionError


def native_isa(backend: aescore.Backend, scheme: str = DEFAULT_SCHEME) -> str | None:
    """The AES path to run ``backend``'s batches of ``scheme`` natively on, or ``None`` for the per-message
    Python path."""
    sealer = _native_sealer(backend, scheme)
    return None if sealer is None else sealer.isa


#: Each backend's answer to :func:`_native_sealer`, by backend and scheme: asking the backend
#: (``sealed_batch()`` finds the native core and checks it can run) cost ~3.5k instructions per call, once
#: per message of the streaming routes. Never stale: what a backend offers (its ``runs_inline``, its native
#: core and the CPU paths that core found at import) is fixed for the backend's life. The backends are the
#: registry's, a handful per process; the table keeps each it has seen.
_SEALERS: dict[tuple[aescore.Backend, str], aescore.SealedBatch | None] = {}


def _native_sealer(backend: aescore.Backend, scheme: str) -> aescore.SealedBatch | None:
    """The backend's native batch sealer when it serves ``scheme`` and runs inline, else ``None``."""
    try:
        return _SEALERS[backend, scheme]
    except KeyError:
        pass
    sealer = backend.sealed_batch() if scheme in (CTR_HMAC, GCM) and backend.runs_inline else None
    _SEALERS[backend, scheme] = sealer
    return sealer


def seal_many(
    ikm: KeyMaterial,
    parameters: KeyParameters,
    plaintexts: Sequence[bytes],
    associated_data: Sequence[bytes],
    backend: aescore.Backend,
) -> list[bytes | PayloadTooLargeError]:
    """Seal each plaintext (with the associated data at the same index) as its own sealed message.

    Returns:
        Per message its ciphertext, or the error of a message that would need more than 2**32 segments.

    Raises:
        TypeError, ValueError: as :class:`~.SealedEncryptor` (bad parameters or material).
    """
    parameters = checked_parameters(parameters)
    derived_size, segment_size, scheme = (
        parameters.derived_key_size,
        parameters.segment_size,
        parameters.scheme,
    )
    material = as_key_material("ikm", ikm)
    check_ikm(material, derived_size)
    sealer = _native_sealer(backend, scheme)
    if sealer is None and scheme == GCM:
        return _seal_gcm_many(material, parameters, plaintexts, associated_data, backend)
    if sealer is None:
        return [
            _seal_by_encryptor(material, parameters, data, ad, backend)
            for data, ad in zip(plaintexts, associated_data, strict=True)
        ]
    salts_and_prefixes = randomness.random_bytes((derived_size + NONCE_PREFIX_SIZE) * len(plaintexts))
    seal = sealer.seal_gcm if scheme == GCM else sealer.seal_ctr_hmac
    sealed = seal(material, derived_size, segment_size, plaintexts, associated_data, salts_and_prefixes)
    if None not in sealed:  # every message sealed (the usual case): the native list as it is
        # (not typing.cast: a Python call on every message, for what only the type checker reads)
        return sealed  # type: ignore[return-value]
    return _too_large_as_errors(sealed, segment_size)


def seal_one(
    ikm: KeyMaterial,
    parameters: KeyParameters,
    plaintext: bytes,
    associated_data: bytes,
    backend: aescore.Backend,
) -> bytes:
    """:func:`seal_many` of one message (a streaming route's small body): its sealed message, or the error of
    one too long to seal raised.

    Raises:
        PayloadTooLargeError: the message would need more than 2**32 segments.
        TypeError, ValueError: as :func:`seal_many`.
    """
    (sealed,) = seal_many(ikm, parameters, (plaintext,), (associated_data,), backend)
    if isinstance(sealed, PayloadTooLargeError):
        raise sealed
    return sealed


def open_one(
    candidates: Sequence[tuple[int, KeyMaterial]],
    parameters: KeyParameters,
    ciphertext: bytes,
    associated_data: bytes,
    backend: aescore.Backend,
    more_candidates: Callable[[], Iterable[tuple[int, KeyMaterial]]] | None = None,
) -> Opened:
    """:func:`open_many` of one message (a streaming route's small body): the same answer, and with one
    candidate on a native sealer (every decrypt of a key whose only usable version is cached) one native
    call without the lists a batch needs around it.

    Raises:
        As :func:`open_many`.
    """
    parameters = checked_parameters(parameters)
    sealer = _native_sealer(backend, parameters.scheme) if len(candidates) == 1 else None
    if sealer is None:
        (opened_alone,) = open_many(
            candidates, parameters, (ciphertext,), (associated_data,), backend, more_candidates
        )
        return opened_alone
    derived_size = parameters.derived_key_size
    version, ikm = candidates[0]
    material = as_key_material("ikm", ikm)
    check_ikm(material, derived_size)
    open_native = sealer.open_gcm if parameters.scheme == GCM else sealer.open_ctr_hmac
    ((plaintext, status, segment, _),) = open_native(
        [material], derived_size, parameters.segment_size, (ciphertext,), (associated_data,)
    )
    if plaintext is not None:
        return plaintext, version
    if status != Status.NO_KEY:
        return _failure(status, segment, ciphertext, parameters)
    opened: list[Opened] = [_no_key([version])]
    if more_candidates is not None:
        _open_missing(
            sealer,
            parameters,
            [version],
            [material],
            (ciphertext,),
            (associated_data,),
            more_candidates,
            opened,
            [0],
        )
    return opened[0]


def _too_large_as_errors(
    sealed: Sequence[bytes | None], segment_size: int
) -> list[bytes | PayloadTooLargeError]:
    """``sealed`` with the error of a message too long to seal where the native core gave ``None`` (a
    function of its own: in :func:`seal_many` the comprehension would make a cell of ``segment_size`` and a
    function on every call)."""
    return [
        ciphertext
        if ciphertext is not None
        else PayloadTooLargeError(too_many_segments_message(segment_size))
        for ciphertext in sealed
    ]


#: The last-segment nonce suffix of segment 0: u32 0, then the last-segment flag.
_ONLY_SEGMENT = b"\x00\x00\x00\x00\x01"


def _seal_gcm_many(
    ikm: KeyMaterial,
    parameters: KeyParameters,
    plaintexts: Sequence[bytes],
    associated_data: Sequence[bytes],
    backend: aescore.Backend,
) -> list[bytes | PayloadTooLargeError]:
    """``gcm`` messages: those that fit in segment 0 sealed directly, the others by a SealedEncryptor.

    A one-segment message is ``header | AES-GCM(key, nonce_prefix | 0 (u32) | 1, plaintext)`` with
    ``key = HKDF-SHA256(ikm, salt, associated data)``: what the encryptor writes, without its buffering.
    Salts and nonce prefixes of those messages come from one ``randomness.random_bytes`` call, in item
    order.
    """
    derived_size = parameters.derived_key_size
    header_size = parameters.header_length
    capacity = parameters.segment_size - header_size - GCM_TAG_SIZE
    random_size = derived_size + NONCE_PREFIX_SIZE
    short = sum(1 for data in plaintexts if len(data) <= capacity)
    drawn = randomness.random_bytes(random_size * short) if short else b""
    length_byte = bytes([header_size])
    sealed: list[bytes | PayloadTooLargeError] = []
    position = 0
    for data, ad in zip(plaintexts, associated_data, strict=True):
        if len(data) > capacity:
            sealed.append(_seal_by_encryptor(ikm, parameters, data, ad, backend))
            continue
        salt_and_prefix = drawn[position : position + random_size]
        position += random_size
        key = backend.gcm_key(derive_gcm_key(ikm, salt_and_prefix[:derived_size], ad, derived_size))
        nonce = salt_and_prefix[derived_size:] + _ONLY_SEGMENT
        sealed.append(length_byte + salt_and_prefix + key.encrypt(nonce, data, None))
    return sealed


def _seal_by_encryptor(
    ikm: KeyMaterial, parameters: KeyParameters, data: bytes, ad: bytes, backend: aescore.Backend
) -> bytes | PayloadTooLargeError:
    try:
        sealer = SealedEncryptor(ikm, parameters, ad, backend)
        return sealer.update(data) + sealer.finalize()
    except PayloadTooLargeError as exc:
        return exc


def open_many(
    candidates: Sequence[tuple[int, KeyMaterial]],
    parameters: KeyParameters,
    ciphertexts: Sequence[bytes],
    associated_data: Sequence[bytes],
    backend: aescore.Backend,
    more_candidates: Callable[[], Iterable[tuple[int, KeyMaterial]]] | None = None,
) -> list[Opened]:
    """Open each ciphertext; ``candidates`` and ``more_candidates`` as :class:`~.SealedDecryptor`.

    ``more_candidates`` is called at most once per call, when some message verifies under none of
    ``candidates``; only those messages are tried again, under the new pairs.

    Returns:
        Per message ``(plaintext, version)`` or its :class:`~.SealedDecryptionError` (no plaintext of a
        message that fails anywhere is returned).

    Raises:
        TypeError, ValueError: as :class:`~.SealedDecryptor`.
        Exception: whatever ``more_candidates`` raises.
    """
    parameters = checked_parameters(parameters)
    derived_size = parameters.derived_key_size
    if not candidates:
        raise ValueError("candidates must hold at least one (version, key material) pair")
    sealer = _native_sealer(backend, parameters.scheme)
    if sealer is None:
        return _open_each(candidates, parameters, ciphertexts, associated_data, backend, more_candidates)
    versions: list[int] = []
    materials: list[KeyMaterial] = []
    for version, ikm in candidates:
        material = as_key_material("ikm", ikm)
        check_ikm(material, derived_size)
        versions.append(version)
        materials.append(material)
    opened, missing = _native_open(sealer, parameters, versions, materials, ciphertexts, associated_data)
    if missing and more_candidates is not None:
        _open_missing(
            sealer,
            parameters,
            versions,
            materials,
            ciphertexts,
            associated_data,
            more_candidates,
            opened,
            missing,
        )
    return opened


# The comprehensions of open_many's rare paths live in functions of their own: in open_many they would make
# cells of its locals on every call.


def _open_each(
    candidates: Sequence[tuple[int, KeyMaterial]],
    parameters: KeyParameters,
    ciphertexts: Sequence[bytes],
    associated_data: Sequence[bytes],
    backend: aescore.Backend,
    more_candidates: Callable[[], Iterable[tuple[int, KeyMaterial]]] | None,
) -> list[Opened]:
    """:func:`open_many` on the per-message Python path: a :class:`~.SealedDecryptor` per message."""
    return [
        _open_by_decryptor(candidates, parameters, data, ad, backend, more_candidates)
        for data, ad in zip(ciphertexts, associated_data, strict=True)
    ]


def _open_missing(
    sealer: aescore.SealedBatch,
    parameters: KeyParameters,
    versions: list[int],
    materials: list[KeyMaterial],
    ciphertexts: Sequence[bytes],
    associated_data: Sequence[bytes],
    more_candidates: Callable[[], Iterable[tuple[int, KeyMaterial]]],
    opened: list[Opened],
    missing: list[int],
) -> None:
    """Try the messages at ``missing`` (none of ``versions`` opened them) under the versions
    ``more_candidates`` adds, in place in ``opened``; those still unopened get the error naming every version
    tried."""
    known = list(zip(versions, materials, strict=True))
    fresh = [
        (version, as_key_material("ikm", ikm))
        for version, ikm in more_candidates()
        if (version, ikm) not in known
    ]
    for _, material in fresh:
        check_ikm(material, parameters.derived_key_size)
    if not fresh:
        return  # their errors already name every version tried
    fresh_versions = [version for version, _ in fresh]
    retried, still_missing = _native_open(
        sealer,
        parameters,
        fresh_versions,
        [material for _, material in fresh],
        [ciphertexts[i] for i in missing],
        [associated_data[i] for i in missing],
    )
    for i, result in zip(missing, retried, strict=True):
        opened[i] = result
    tried = versions + fresh_versions
    for j in still_missing:  # their error names every version tried, the fresh ones too
        opened[missing[j]] = _no_key(tried)


def _open_by_decryptor(
    candidates: Sequence[tuple[int, KeyMaterial]],
    parameters: KeyParameters,
    data: bytes,
    ad: bytes,
    backend: aescore.Backend,
    more_candidates: Callable[[], Iterable[tuple[int, KeyMaterial]]] | None,
) -> Opened:
    opener = SealedDecryptor(candidates, parameters, ad, backend, more_candidates=more_candidates)
    try:
        plaintext = opener.update(data) + opener.finalize()
    except SealedDecryptionError as exc:
        return exc
    assert opener.version is not None
    return plaintext, opener.version


def _no_key(versions: list[int]) -> SealedDecryptionError:
    """The error of a message whose first segment verified under none of ``versions``."""
    return SealedDecryptionError(messages.no_key(0, versions), segment_index=0, plaintext_released=False)


def _native_open(
    sealer: aescore.SealedBatch,
    parameters: KeyParameters,
    versions: list[int],
    materials: list[KeyMaterial],
    ciphertexts: Sequence[bytes],
    associated_data: Sequence[bytes],
) -> tuple[list[Opened], list[int]]:
    """Open ``ciphertexts`` natively under ``materials`` (of ``versions``, index for index): per message
    ``(plaintext, version)`` or its error; and the indexes of those whose first segment verified under none
    of them (their error names ``versions``, for a caller with no more to try)."""
    open_native = sealer.open_gcm if parameters.scheme == GCM else sealer.open_ctr_hmac
    results = open_native(
        materials, parameters.derived_key_size, parameters.segment_size, ciphertexts, associated_data
    )
    if len(results) != len(ciphertexts):
        raise ValueError(f"the native core gave {len(results)} results for {len(ciphertexts)} ciphertexts")
    opened: list[Opened] = []
    missing: list[int] = []
    index = 0  # (a counter, not zip(strict=True): zip's keyword parsing cost as much as this loop)
    for plaintext, status, segment, candidate in results:
        if plaintext is not None:
            opened.append((plaintext, versions[candidate]))
        elif status == Status.NO_KEY:
            opened.append(_no_key(versions))
            missing.append(index)
        else:
            opened.append(_failure(status, segment, ciphertexts[index], parameters))
        index += 1
    return opened, missing


def _failure(status: int, segment: int, data: bytes, parameters: KeyParameters) -> SealedDecryptionError:
    """The error a :class:`~.SealedDecryptor` raises for the native ``status`` of one message."""
    header_size = parameters.header_length
    if status == Status.SHORT_HEADER:
        return SealedDecryptionError(
            messages.short_header(len(data), header_size), segment_index=None, plaintext_released=False
        )
    if status == Status.BAD_HEADER:
        return SealedDecryptionError(
            messages.bad_header(data[0], parameters.key_type, header_size),
            segment_index=None,
            plaintext_released=False,
        )
    if status == Status.MISSING_SEGMENT:
        message = messages.missing_segment(segment)
    elif status == Status.SHORT_SEGMENT:
        # Segment 0 starts after the header; segment n > 0 at n * segment_size.
        start = segment * parameters.segment_size if segment else header_size
        message = messages.short_segment(segment, len(data) - start, tag_size_of(parameters.scheme))
    elif status == Status.BAD_TAG:
        message = messages.bad_tag(segment)
    else:
        message = messages.too_many_segments(segment)
    return SealedDecryptionError(message, segment_index=segment, plaintext_released=segment > 0)

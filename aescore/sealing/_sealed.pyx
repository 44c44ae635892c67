# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, auto_pickle=False
"""Native sealed-format batches: seal or open many whole messages in one call (see ``sealed_batch.c``).

The C files do the work (HKDF-SHA256, then AES-CTR and HMAC-SHA256 for the ``ctr-hmac`` scheme or AES-GCM for
``gcm``) and return status codes; this module checks
arguments, allocates the outputs, releases the GIL around calls of ``GIL_RELEASE_BYTES`` or more and turns
call-level codes into exceptions. Per-item outcomes come back as codes (``ITEM_*``) for the caller, which
owns the error messages (``app.formats.sealed``).

Configuration, read at import:

* ``KEYSTREAM_SHA256_IMPL``: ``auto`` (default: ``shani`` when the CPU has SHA-NI, else ``avx2`` when it has
  AVX2 and BMI2, else ``bmi2`` when it has BMI2, else ``scalar``), ``shani``, ``avx2``, ``bmi2`` or ``scalar``. Forcing a path the CPU lacks makes :func:`unavailable_reason` say so (the callers
  then keep the Python path) rather than silently running another. :func:`set_sha256_impl` switches
  in-process (tests).
"""

import os

from cpython.buffer cimport PyBUF_SIMPLE, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdlib cimport free, malloc
from libc.stdint cimport uint8_t, uint32_t
from libc.string cimport memset

from ..errors import AesCoreError, AesCoreTypeError, AesCoreValueError, BackendUnavailableError

cdef enum:
    _GIL_RELEASE_BYTES = 16384

#: SHA-256 path names, fastest first.
SHA256_IMPL_NAMES = ("shani", "avx2", "bmi2", "scalar")
#: Calls over at least this many input bytes run with the GIL released.
GIL_RELEASE_BYTES = _GIL_RELEASE_BYTES
#: Bytes of randomness per sealed item: the salt (derived key size) then the 7-byte nonce prefix.
NONCE_PREFIX_SIZE = 7

ITEM_OK = KS_ITEM_OK
ITEM_SHORT_HEADER = KS_ITEM_SHORT_HEADER
ITEM_BAD_HEADER = KS_ITEM_BAD_HEADER
ITEM_MISSING_SEGMENT = KS_ITEM_MISSING_SEGMENT
ITEM_SHORT_SEGMENT = KS_ITEM_SHORT_SEGMENT
ITEM_NO_KEY = KS_ITEM_NO_KEY
ITEM_BAD_TAG = KS_ITEM_BAD_TAG
ITEM_TOO_MANY_SEGMENTS = KS_ITEM_TOO_MANY_SEGMENTS

cdef dict _SHA_BY_NAME = {
    "shani": KS_SHA256_SHANI, "avx2": KS_SHA256_AVX2, "bmi2": KS_SHA256_BMI2, "scalar": KS_SHA256_SCALAR
}
#: The segment constructions, by the scheme names of the sealed format (docs/formats.md).
SCHEMES = ("ctr-hmac", "gcm")
cdef dict _SCHEME_BY_NAME = {"ctr-hmac": KS_SCHEME_CTR_HMAC, "gcm": KS_SCHEME_GCM}
cdef dict _ISA_BY_NAME = {"vaes512": KS_ISA_VAES512, "vaes256": KS_ISA_VAES256, "aesni": KS_ISA_AESNI}
cdef ks_sha256_impl _sha = KS_SHA256_NONE
cdef object _unavailable = None


def sha256_impls():
    """Return the SHA-256 paths this CPU can run, fastest first (``scalar`` always)."""
    cdef unsigned mask = ks_sha256_impls()
    return tuple(name for name in SHA256_IMPL_NAMES if mask & <unsigned>_SHA_BY_NAME[name])


cdef ks_sha256_impl _pick_sha(object name) except? KS_SHA256_NONE:
    if not isinstance(name, str):
        raise AesCoreTypeError(f"impl must be a str, got {type(name).__name__}")
    if name == "auto":
        return _SHA_BY_NAME[sha256_impls()[0]]
    if name not in _SHA_BY_NAME:
        raise AesCoreValueError(f"impl must be one of auto, {', '.join(SHA256_IMPL_NAMES)}; got {name!r}")
    if name not in sha256_impls():
        raise AesCoreValueError(f"SHA-256 path {name!r} is not supported by this CPU")
    return _SHA_BY_NAME[name]


def get_sha256_impl():
    """Return the SHA-256 path in use (``none`` when unavailable)."""
    for name, value in _SHA_BY_NAME.items():
        if value == _sha:
            return name
    return "none"


def set_sha256_impl(name):
    """Select the SHA-256 path: ``auto``, ``shani``, ``avx2``, ``bmi2`` or ``scalar``.

    Raises:
        TypeError: ``name`` is not a str (:class:`aescore.AesCoreTypeError`).
        ValueError: unknown name or a path this CPU cannot run (:class:`aescore.AesCoreValueError`).
    """
    global _sha, _unavailable
    _sha = _pick_sha(name)
    _unavailable = None


def unavailable_reason():
    """Return why the native batch path cannot run here (no AES-NI, bad ``KEYSTREAM_SHA256_IMPL``), or None."""
    return _unavailable


def _init():
    global _sha, _unavailable
    if not ks_cpu_isas() & KS_ISA_AESNI:
        _unavailable = "CPU lacks AES-NI"
        return
    setting = os.environ.get("KEYSTREAM_SHA256_IMPL", "").strip() or "auto"
    try:
        _sha = _pick_sha(setting)
    except AesCoreError as exc:
        _unavailable = f"KEYSTREAM_SHA256_IMPL: {exc}"


_init()


cdef int _raise_status(ks_sealed_status status) except -1:
    if status == KS_SEALED_ERR_PARAMS:
        raise AesCoreValueError("derived_size must be 16, 24 or 32 and segment_size within the sealed format's range")
    if status == KS_SEALED_ERR_IKM:
        raise AesCoreValueError("key material must be at least 16 bytes and at least derived_size bytes")
    if status == KS_SEALED_ERR_ISA:
        raise BackendUnavailableError("the selected AES or SHA-256 path is not supported by this CPU")
    raise AesCoreError(f"sealed batch core failed with status {<int>status}")


cdef int _params(ks_sealed_params *params, object derived_size, object segment_size, object isa,
                 object scheme) except -1:
    if unavailable_reason() is not None:
        raise BackendUnavailableError(f"native sealed batches are unavailable: {_unavailable}")
    for name, value in (("derived_size", derived_size), ("segment_size", segment_size)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise AesCoreTypeError(f"{name} must be an int, got {type(value).__name__}")
    if isa not in _ISA_BY_NAME:
        raise AesCoreValueError(f"isa must be one of {', '.join(_ISA_BY_NAME)}; got {isa!r}")
    if scheme not in _SCHEME_BY_NAME:
        raise AesCoreValueError(f"scheme must be one of {', '.join(SCHEMES)}; got {scheme!r}")
    params.scheme = <ks_sealed_scheme>_SCHEME_BY_NAME[scheme]
    if not 0 < segment_size < 2**31 or derived_size not in (16, 24, 32):
        _raise_status(KS_SEALED_ERR_PARAMS)
    params.derived_size = derived_size
    params.segment_size = segment_size
    params.isa = <ks_isa>_ISA_BY_NAME[isa]
    params.sha = _sha
    cdef ks_sealed_status status = ks_sealed_check(params)
    if status != KS_SEALED_OK:
        _raise_status(status)
    return 0


cdef tuple _bytes_tuple(str name, object values, Py_ssize_t count):
    result = tuple(values)
    if len(result) != count:
        raise AesCoreValueError(f"{name} must have one entry per item ({count}), got {len(result)}")
    for value in result:
        if type(value) is not bytes:
            raise AesCoreTypeError(f"{name} must hold bytes, got {type(value).__name__}")
    return result


cdef int _key_view(object value, Py_buffer *view) except -1:
    """Borrow key material's bytes in place (``bytes`` or any contiguous buffer, e.g. locked memory)."""
    if isinstance(value, str):
        raise AesCoreTypeError("key material must be bytes-like, got str")
    try:
        PyObject_GetBuffer(value, view, PyBUF_SIMPLE)
    except TypeError:
        raise AesCoreTypeError(f"key material must be bytes-like, got {type(value).__name__}") from None
    return 0


def seal_many(ikm, derived_size, segment_size, plaintexts, associated_data, randomness, isa, scheme="ctr-hmac"):
    """Seal every plaintext as one sealed message under ``ikm``.

    Args:
        ikm: the key version's material (bytes-like, read in place: never copied into a ``bytes``).
        derived_size: AES key bytes per message: 16, 24 or 32.
        segment_size: the key's ciphertext segment size.
        plaintexts: bytes per item.
        associated_data: bytes per item (the HKDF info; ``b""`` for none).
        randomness: ``len(plaintexts) * (derived_size + 7)`` bytes from the OS's CSPRNG: item i's salt and
            nonce prefix are its slice. Never reuse them.
        isa: the AES path name (``aescore.ctr._aesni.get_isa()``); ``gcm`` runs on it where the CPU has its
            carry-less multiply, else on ``aesni``.
        scheme: ``ctr-hmac`` (AES-CTR + HMAC-SHA256, 32-byte tags) or ``gcm`` (AES-GCM, 16-byte tags).

    Returns:
        One ciphertext per item, or ``None`` for an item that would need segment number 2**32.

    Raises:
        TypeError: wrong argument types (:class:`aescore.AesCoreTypeError`).
        ValueError: bad sizes, too short key material, randomness of the wrong length.
        BackendUnavailableError: no AES-NI, or a forced SHA-256 path this CPU lacks.
    """
    cdef ks_sealed_params params
    cdef Py_buffer ikm_view
    _params(&params, derived_size, segment_size, isa, scheme)
    if type(randomness) is not bytes:
        raise AesCoreTypeError("randomness must be bytes")
    _key_view(ikm, &ikm_view)
    try:
        return _seal_many(&params, &ikm_view, derived_size, plaintexts, associated_data, randomness)
    finally:
        PyBuffer_Release(&ikm_view)


cdef list _seal_many(ks_sealed_params *params_pointer, Py_buffer *ikm_view, object derived_size,
                     object plaintexts, object associated_data, object randomness):
    cdef ks_sealed_params params = params_pointer[0]
    cdef ks_sealed_ikm key
    cdef ks_sealed_item *items = NULL
    cdef Py_ssize_t count, i, per_item
    cdef size_t total = 0, length
    cdef ks_sealed_status status
    cdef const uint8_t *random_pointer
    inputs = tuple(plaintexts)
    count = len(inputs)
    inputs = _bytes_tuple("plaintexts", inputs, count)
    infos = _bytes_tuple("associated_data", associated_data, count)
    per_item = derived_size + NONCE_PREFIX_SIZE
    if PyBytes_GET_SIZE(randomness) != count * per_item:
        raise AesCoreValueError(f"randomness must be {count * per_item} bytes ({per_item} per item)")
    key.material = <const uint8_t *>ikm_view.buf
    key.length = <size_t>ikm_view.len
    random_pointer = <const uint8_t *>PyBytes_AS_STRING(randomness)
    outputs = [None] * count
    items = <ks_sealed_item *>malloc(max(count, 1) * sizeof(ks_sealed_item))
    if items == NULL:
        raise MemoryError()
    try:
        memset(items, 0, max(count, 1) * sizeof(ks_sealed_item))
        for i in range(count):
            plaintext = inputs[i]
            info = infos[i]
            items[i].input = <const uint8_t *>PyBytes_AS_STRING(plaintext)
            items[i].input_len = <size_t>PyBytes_GET_SIZE(plaintext)
            items[i].associated_data = <const uint8_t *>PyBytes_AS_STRING(info)
            items[i].associated_data_len = <size_t>PyBytes_GET_SIZE(info)
            items[i].random = random_pointer + i * per_item
            total += items[i].input_len + items[i].associated_data_len
            if ks_sealed_ciphertext_length(&params, items[i].input_len, &length) != KS_ITEM_OK:
                continue  # the C side marks the item too large and skips it
            output = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>length)
            outputs[i] = output
            items[i].output = <uint8_t *>PyBytes_AS_STRING(output)
            items[i].output_len = length
        if key.length < 16 or key.length < <size_t>derived_size:
            _raise_status(KS_SEALED_ERR_IKM)
        if total >= _GIL_RELEASE_BYTES:
            with nogil:
                status = ks_sealed_seal(&params, &key, items, <size_t>count)
        else:
            status = ks_sealed_seal(&params, &key, items, <size_t>count)
        if status != KS_SEALED_OK:
            _raise_status(status)
        return outputs
    finally:
        free(items)


def open_many(candidates, derived_size, segment_size, ciphertexts, associated_data, isa, scheme="ctr-hmac"):
    """Open every ciphertext, trying each candidate key material on an item's first segment.

    Args:
        candidates: key materials (bytes-like, read in place), in the order to try (newest version first).
        derived_size, segment_size, isa, scheme: as :func:`seal_many`.
        ciphertexts: bytes per item.
        associated_data: bytes per item.

    Returns:
        Per item ``(plaintext, status, segment, candidate)``: ``plaintext`` is bytes when ``status`` is
        ``ITEM_OK`` (then ``candidate`` is the index of the material that verified), else ``None`` and
        ``segment`` names the failing segment where the status has one.

    Raises:
        TypeError, ValueError, BackendUnavailableError: as :func:`seal_many`.
    """
    cdef ks_sealed_params params
    cdef ks_sealed_ikm *keys = NULL
    cdef ks_sealed_item *items = NULL
    cdef Py_ssize_t count, key_count, i
    cdef size_t total = 0, length
    cdef uint32_t segment
    cdef ks_sealed_status status
    cdef Py_buffer *views = NULL
    cdef Py_ssize_t acquired = 0
    _params(&params, derived_size, segment_size, isa, scheme)
    materials = tuple(candidates)
    key_count = len(materials)
    inputs = tuple(ciphertexts)
    count = len(inputs)
    inputs = _bytes_tuple("ciphertexts", inputs, count)
    infos = _bytes_tuple("associated_data", associated_data, count)
    outputs = [None] * count
    keys = <ks_sealed_ikm *>malloc(max(key_count, 1) * sizeof(ks_sealed_ikm))
    items = <ks_sealed_item *>malloc(max(count, 1) * sizeof(ks_sealed_item))
    views = <Py_buffer *>malloc(max(key_count, 1) * sizeof(Py_buffer))
    try:
        if keys == NULL or items == NULL or views == NULL:
            raise MemoryError()
        for i in range(key_count):
            _key_view(materials[i], &views[i])
            acquired += 1
            keys[i].material = <const uint8_t *>views[i].buf
            keys[i].length = <size_t>views[i].len
        memset(items, 0, max(count, 1) * sizeof(ks_sealed_item))
        for i in range(count):
            ciphertext = inputs[i]
            info = infos[i]
            items[i].input = <const uint8_t *>PyBytes_AS_STRING(ciphertext)
            items[i].input_len = <size_t>PyBytes_GET_SIZE(ciphertext)
            items[i].associated_data = <const uint8_t *>PyBytes_AS_STRING(info)
            items[i].associated_data_len = <size_t>PyBytes_GET_SIZE(info)
            total += items[i].input_len + (items[i].associated_data_len + 64) * <size_t>key_count
            if ks_sealed_plaintext_length(&params, items[i].input_len, &length, &segment) != KS_ITEM_OK:
                continue  # malformed: verified only, so the first problem in segment order is reported
            output = PyBytes_FromStringAndSize(NULL, <Py_ssize_t>length)
            outputs[i] = output
            items[i].output = <uint8_t *>PyBytes_AS_STRING(output)
            items[i].output_len = length
        if total >= _GIL_RELEASE_BYTES:
            with nogil:
                status = ks_sealed_open(&params, keys, <size_t>key_count, items, <size_t>count)
        else:
            status = ks_sealed_open(&params, keys, <size_t>key_count, items, <size_t>count)
        if status != KS_SEALED_OK:
            _raise_status(status)
        return [
            (outputs[i] if items[i].status == KS_ITEM_OK else None, items[i].status, items[i].segment,
             items[i].candidate)
            for i in range(count)
        ]
    finally:
        for i in range(acquired):
            PyBuffer_Release(&views[i])
        free(views)
        free(keys)
        free(items)


def sha256(data, impl="auto"):
    """SHA-256 of ``data`` (bytes) through path ``impl``: for testing the native paths against hashlib.

    Raises:
        TypeError, ValueError: as :func:`set_sha256_impl`, or ``data`` that is not bytes.
    """
    cdef ks_sha256_ctx ctx
    cdef uint8_t digest[32]
    if type(data) is not bytes:
        raise AesCoreTypeError(f"data must be bytes, got {type(data).__name__}")
    ks_sha256_init(&ctx, ks_sha256_compress_of(_pick_sha(impl)))
    ks_sha256_update(&ctx, <const uint8_t *>PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data))
    ks_sha256_final(&ctx, digest)
    return PyBytes_FromStringAndSize(<char *>digest, 32)


def hmac_sha256(key, data, impl="auto"):
    """HMAC-SHA256 of ``data`` under ``key`` (both bytes) through path ``impl``: for tests.

    Raises:
        TypeError, ValueError: as :func:`sha256`.
    """
    cdef ks_hmac_key hmac
    cdef ks_sha256_ctx ctx
    cdef uint8_t tag[32]
    if type(data) is not bytes or type(key) is not bytes:
        raise AesCoreTypeError("key and data must be bytes")
    ks_hmac_init(&hmac, ks_sha256_compress_of(_pick_sha(impl)), <const uint8_t *>PyBytes_AS_STRING(key),
                 <size_t>PyBytes_GET_SIZE(key))
    ks_hmac_begin(&hmac, &ctx)
    ks_sha256_update(&ctx, <const uint8_t *>PyBytes_AS_STRING(data), <size_t>PyBytes_GET_SIZE(data))
    ks_hmac_end(&hmac, &ctx, tag)
    ks_sha256_wipe(&hmac, sizeof(hmac))
    return PyBytes_FromStringAndSize(<char *>tag, 32)


#: The longest HKDF-SHA256 output (RFC 5869: 255 blocks of 32 bytes).
HKDF_SHA256_MAX_LENGTH = KS_HKDF_SHA256_MAX_LENGTH


cdef int _borrow(str name, object value, Py_buffer *view, int flags) except -1:
    """Borrow ``value``'s bytes in place, or raise naming ``name``."""
    if isinstance(value, str):
        raise AesCoreTypeError(f"{name} must be bytes-like, got str")
    try:
        PyObject_GetBuffer(value, view, flags)
    except TypeError:
        raise AesCoreTypeError(f"{name} must be bytes-like, got {type(value).__name__}") from None
    except BufferError:
        wanted = "a writable, contiguous buffer" if flags & PyBUF_WRITABLE else "a contiguous buffer"
        raise AesCoreTypeError(f"{name} must be {wanted}") from None
    return 0


def hkdf_sha256_into(ikm, salt, info, out):
    """HKDF-SHA256 (RFC 5869) of ``len(out)`` bytes from ``ikm``, ``salt`` and ``info``, written into ``out``.

    Each argument is read or written in place (any contiguous buffer; ``out`` writable, e.g. locked memory):
    the output exists only in ``out``, and ``hkdf.c`` zeroes its intermediate values (the pseudorandom key,
    the HMAC states, the last block) before returning. Runs on the selected SHA-256 path, or the scalar one
    where that is unavailable.

    Raises:
        TypeError: an argument is not bytes-like, or ``out`` is not writable (:class:`aescore.AesCoreTypeError`).
        ValueError: ``out`` is empty or longer than :data:`HKDF_SHA256_MAX_LENGTH` (:class:`aescore.AesCoreValueError`).
    """
    cdef Py_buffer views[4]
    cdef int taken = 0
    cdef ks_hkdf_status status
    cdef ks_sha256_impl sha = _sha if _sha != KS_SHA256_NONE else KS_SHA256_SCALAR
    try:
        for name, value in (("ikm", ikm), ("salt", salt), ("info", info)):
            _borrow(name, value, &views[taken], PyBUF_SIMPLE)
            taken += 1
        _borrow("out", out, &views[3], PyBUF_SIMPLE | PyBUF_WRITABLE)
        taken += 1
        status = ks_hkdf_sha256(ks_sha256_compress_of(sha),
                                <const uint8_t *>views[0].buf, <size_t>views[0].len,
                                <const uint8_t *>views[1].buf, <size_t>views[1].len,
                                <const uint8_t *>views[2].buf, <size_t>views[2].len,
                                <uint8_t *>views[3].buf, <size_t>views[3].len)
        if status == KS_HKDF_ERR_LENGTH:
            raise AesCoreValueError(
                f"out must hold 1 to {HKDF_SHA256_MAX_LENGTH} bytes (HKDF-SHA256's output), got {views[3].len}"
            )
        if status != KS_HKDF_OK:
            raise AesCoreError(f"HKDF-SHA256 failed with status {<int>status}")
    finally:
        for index in range(taken):
            PyBuffer_Release(&views[index])

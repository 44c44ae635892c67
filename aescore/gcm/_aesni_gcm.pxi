# AES-GCM for the aesni backend (included by _aesni.pyx): argument checks, GIL release and exceptions over
# aesni_gcm.c. The checks and messages are those of aescore.gcm._composed (the pure-Python composition), so the shared
# tests hold both to one contract.
#
# Path: the instance's or module's ISA setting (set_isa, KEYSTREAM_AESNI_ISA), lowered to the fastest path
# not above it that also has the carry-less multiply GCM needs (PCLMULQDQ; VPCLMULQDQ for the VAES paths).

from ..errors import AlreadyFinalizedError, CounterOverflowError, InvalidTag

cdef unsigned _gcm_isas = ks_gcm_cpu_isas()
cdef uint64_t _GCM_MAX_DATA = (<uint64_t>1 << 36) - 32


cdef ks_isa _gcm_path(ks_isa isa) noexcept:
    if isa == KS_ISA_VAES512 and _gcm_isas & KS_ISA_VAES512:
        return KS_ISA_VAES512
    if (isa == KS_ISA_VAES512 or isa == KS_ISA_VAES256) and _gcm_isas & KS_ISA_VAES256:
        return KS_ISA_VAES256
    return KS_ISA_AESNI


def gcm_isa(name=None):
    """The path AES-GCM runs on for ISA setting ``name`` (default: the module setting)."""
    isa = _isa if name is None else _pick_isa(name, _cpu_isas)
    return _NAME_BY_ISA[_gcm_path(isa)]


def gcm_xmm_encoding():
    """How the ``aesni`` GCM path is encoded here: ``"vex"`` (AVX present; three-operand forms) or ``"sse"``.

    Same instructions and results either way; ``KEYSTREAM_GCM_XMM=sse`` forces the legacy-SSE build.
    """
    return "vex" if ks_gcm_xmm_vex() else "sse"


cdef int _get_associated(object value, Py_buffer *view) except -1:
    """0: ``value`` is None (no view taken); 1: ``view`` holds its buffer."""
    if value is None:
        return 0
    if isinstance(value, str) or not isinstance(value, (bytes, bytearray, memoryview)):
        raise AesCoreTypeError(_messages.not_bytes_like_or_none("associated_data", value))
    _get_readable("associated_data", value, view)
    return 1


cdef int _copy_nonce(object nonce, uint8_t *target) except -1:
    cdef Py_buffer view
    if type(nonce) is bytes:
        if PyBytes_GET_SIZE(nonce) != KS_GCM_NONCE_SIZE:
            raise AesCoreValueError(_messages.wrong_length("nonce", KS_GCM_NONCE_SIZE, PyBytes_GET_SIZE(nonce)))
        memcpy(target, PyBytes_AS_STRING(nonce), KS_GCM_NONCE_SIZE)
        return 0
    _get_readable("nonce", nonce, &view)
    try:
        if view.len != KS_GCM_NONCE_SIZE:
            raise AesCoreValueError(_messages.wrong_length("nonce", KS_GCM_NONCE_SIZE, view.len))
        memcpy(target, view.buf, KS_GCM_NONCE_SIZE)
    finally:
        PyBuffer_Release(&view)
    return 0


@cython.final
cdef class AesniGcmKey:
    """An AES key prepared for AES-GCM on the aesni backend: round keys and H^1..H^32, computed once.

    Immutable and thread-safe; wiped from memory when freed; its ``repr`` shows the key size only. Created by
    :meth:`AesniBackend.gcm_key`; :class:`aescore.AesGcm` documents the methods.
    """

    cdef ks_gcm_key _key
    cdef ks_isa _isa  # KS_ISA_NONE: follow the module setting at each call
    cdef int _key_size

    def __init__(self, *args, **kwargs):
        raise AesCoreTypeError("GCM keys are created by AesniBackend.gcm_key")

    def __dealloc__(self):
        ks_gcm_wipe(&self._key)

    @property
    def backend_name(self):
        """Always ``"aesni"``."""
        return "aesni"

    @property
    def key_size(self):
        """Key size in bytes: 16, 24 or 32."""
        return self._key_size

    def __repr__(self):
        return f"<AesniGcmKey backend='aesni' key_size={self._key_size * 8} bits>"

    def __reduce__(self):
        raise TypeError("GCM keys cannot be pickled")

    def encrypt(self, nonce, data, associated_data):
        """``ciphertext || tag``; see :meth:`aescore.AesGcm.encrypt`."""
        return self._seal(nonce, data, associated_data, None)

    def encrypt_into(self, nonce, data, associated_data, out):
        """Write ``ciphertext || tag`` to ``out``; see :meth:`aescore.AesGcm.encrypt_into`."""
        return self._seal(nonce, data, associated_data, out)

    def encryptor(self, nonce, associated_data):
        """An :class:`AesniGcmEncryptor`: one encryption under ``nonce`` fed in pieces; see
        :meth:`aescore.GcmKey.encryptor`. Never reuse a nonce with the same key."""
        return _start_encryptor(self, nonce, associated_data)

    def decrypt(self, nonce, ciphertext_and_tag, associated_data):
        """The verified plaintext; see :meth:`aescore.AesGcm.decrypt`."""
        return self._open(nonce, ciphertext_and_tag, associated_data, None)

    def decrypt_into(self, nonce, ciphertext_and_tag, associated_data, out):
        """Write the verified plaintext to ``out``; see :meth:`aescore.AesGcm.decrypt_into`."""
        return self._open(nonce, ciphertext_and_tag, associated_data, out)

    cdef object _seal(self, object nonce, object data, object associated_data, object out):
        cdef Py_buffer data_view, aad_view, out_view
        cdef bint have_data = False, have_aad = False, have_out = False
        cdef uint8_t nonce_bytes[16]
        cdef const uint8_t *src
        cdef const uint8_t *aad = NULL
        cdef uint8_t *dst
        cdef Py_ssize_t length, aad_len = 0
        cdef ks_status status
        cdef ks_isa isa = _gcm_path(self._isa if self._isa != KS_ISA_NONE else _isa)
        cdef object result = None
        cdef object scratch = None
        try:
            _copy_nonce(nonce, nonce_bytes)
            if type(data) is bytes:
                src = <const uint8_t *>PyBytes_AS_STRING(data)
                length = PyBytes_GET_SIZE(data)
            else:
                _get_readable("data", data, &data_view)
                have_data = True
                src = <const uint8_t *>data_view.buf
                length = data_view.len
            if type(associated_data) is bytes:
                aad = <const uint8_t *>PyBytes_AS_STRING(associated_data)
                aad_len = PyBytes_GET_SIZE(associated_data)
            elif _get_associated(associated_data, &aad_view):
                have_aad = True
                aad = <const uint8_t *>aad_view.buf
                aad_len = aad_view.len
            if out is not None:
                _get_writable(out, &out_view)
                have_out = True
            if <uint64_t>length > _GCM_MAX_DATA:
                raise CounterOverflowError(_messages.too_long_for_gcm("data", "2**36 - 32", length))
            if out is None:
                result = PyBytes_FromStringAndSize(NULL, length + KS_GCM_TAG_SIZE)
                dst = <uint8_t *>PyBytes_AS_STRING(result)
            else:
                if out_view.len < length + KS_GCM_TAG_SIZE:
                    raise AesCoreValueError(
                        _messages.out_too_small("out", length + KS_GCM_TAG_SIZE, "len(data) + 16", out_view.len)
                    )
                dst = <uint8_t *>out_view.buf
                if dst != src and dst < src + length and src < dst + length + KS_GCM_TAG_SIZE:
                    scratch = PyBytes_FromStringAndSize(NULL, length + KS_GCM_TAG_SIZE)
                    dst = <uint8_t *>PyBytes_AS_STRING(scratch)
            if length >= _GIL_RELEASE_BYTES:
                with nogil:
                    status = ks_gcm_seal(&self._key, isa, nonce_bytes, aad, <size_t>aad_len, src, dst,
                                         <size_t>length, dst + length)
            else:
                status = ks_gcm_seal(&self._key, isa, nonce_bytes, aad, <size_t>aad_len, src, dst, <size_t>length,
                                     dst + length)
            if status != KS_OK:
                _raise_status(status)
            if out is None:
                return result
            if scratch is not None:
                memcpy(out_view.buf, PyBytes_AS_STRING(scratch), length + KS_GCM_TAG_SIZE)
            return length + KS_GCM_TAG_SIZE
        finally:
            if have_data:
                PyBuffer_Release(&data_view)
            if have_aad:
                PyBuffer_Release(&aad_view)
            if have_out:
                PyBuffer_Release(&out_view)

    cdef object _open(self, object nonce, object ciphertext_and_tag, object associated_data, object out):
        cdef Py_buffer data_view, aad_view, out_view
        cdef bint have_data = False, have_aad = False, have_out = False
        cdef uint8_t nonce_bytes[16]
        cdef uint8_t tag[16]
        cdef const uint8_t *src
        cdef const uint8_t *aad = NULL
        cdef uint8_t *dst
        cdef Py_ssize_t total, length, aad_len = 0
        cdef ks_status status
        cdef ks_isa isa = _gcm_path(self._isa if self._isa != KS_ISA_NONE else _isa)
        cdef object result = None
        cdef object scratch = None
        try:
            _copy_nonce(nonce, nonce_bytes)
            if type(ciphertext_and_tag) is bytes:
                src = <const uint8_t *>PyBytes_AS_STRING(ciphertext_and_tag)
                total = PyBytes_GET_SIZE(ciphertext_and_tag)
            else:
                _get_readable("ciphertext_and_tag", ciphertext_and_tag, &data_view)
                have_data = True
                src = <const uint8_t *>data_view.buf
                total = data_view.len
            if type(associated_data) is bytes:
                aad = <const uint8_t *>PyBytes_AS_STRING(associated_data)
                aad_len = PyBytes_GET_SIZE(associated_data)
            elif _get_associated(associated_data, &aad_view):
                have_aad = True
                aad = <const uint8_t *>aad_view.buf
                aad_len = aad_view.len
            if out is not None:
                _get_writable(out, &out_view)
                have_out = True
            if total > KS_GCM_TAG_SIZE and <uint64_t>(total - KS_GCM_TAG_SIZE) > _GCM_MAX_DATA:
                raise CounterOverflowError(_messages.too_long_for_gcm("ciphertext_and_tag", "2**36 - 16", total))
            length = total - KS_GCM_TAG_SIZE if total >= KS_GCM_TAG_SIZE else 0
            if out is not None and out_view.len < length:
                raise AesCoreValueError(
                    _messages.out_too_small("out", length, "len(ciphertext_and_tag) - 16", out_view.len)
                )
            if total < KS_GCM_TAG_SIZE:
                raise InvalidTag("authentication failed: the tag does not match")
            memcpy(tag, src + length, KS_GCM_TAG_SIZE)
            if out is None:
                result = PyBytes_FromStringAndSize(NULL, length)
                dst = <uint8_t *>PyBytes_AS_STRING(result)
            else:
                dst = <uint8_t *>out_view.buf
                if dst != src and dst < src + length and src < dst + length:
                    scratch = PyBytes_FromStringAndSize(NULL, length)
                    dst = <uint8_t *>PyBytes_AS_STRING(scratch)
            if length >= _GIL_RELEASE_BYTES:
                with nogil:
                    status = ks_gcm_open(&self._key, isa, nonce_bytes, aad, <size_t>aad_len, src, dst,
                                         <size_t>length, tag)
            else:
                status = ks_gcm_open(&self._key, isa, nonce_bytes, aad, <size_t>aad_len, src, dst, <size_t>length,
                                     tag)
            if status == KS_ERR_TAG:
                # The C layer zeroed what it wrote; a scratch detour means out was never written, but the
                # contract is that out holds no plaintext afterwards, whatever it held before.
                if scratch is not None:
                    memset(out_view.buf, 0, length)
                raise InvalidTag("authentication failed: the tag does not match")
            if status != KS_OK:
                _raise_status(status)
            if out is None:
                return result
            if scratch is not None:
                memcpy(out_view.buf, PyBytes_AS_STRING(scratch), length)
            return length
        finally:
            if have_data:
                PyBuffer_Release(&data_view)
            if have_aad:
                PyBuffer_Release(&aad_view)
            if have_out:
                PyBuffer_Release(&out_view)


cdef AesniGcmKey _make_gcm_key(object key, ks_isa isa):
    cdef Py_buffer view
    cdef AesniGcmKey prepared = AesniGcmKey.__new__(AesniGcmKey)
    cdef ks_status status
    _get_readable("key", key, &view)
    try:
        if view.len != 16 and view.len != 24 and view.len != 32:
            raise AesCoreValueError(_messages.wrong_key_length(view.len))
        status = ks_gcm_init(<const uint8_t *>view.buf, <size_t>view.len, &prepared._key)
    finally:
        PyBuffer_Release(&view)
    if status != KS_OK:
        _raise_status(status)
    prepared._isa = isa
    prepared._key_size = <int>view.len
    return prepared


_FINALIZED = "this GCM encryption is finalized (or failed); start a new one, with a new nonce"


@cython.final
cdef class AesniGcmEncryptor:
    """One AES-GCM encryption fed in pieces (ks_gcm_seal_start/_update/_finish); see
    :class:`aescore.GcmEncryptor`. Created by :meth:`AesniGcmKey.encryptor`.

    The path is fixed when it starts (the key's or module's ISA setting, as :meth:`AesniGcmKey.encrypt`).
    Holds keystream and the tag mask: wiped by :meth:`finalize`, a failure or when freed. Calls from two
    threads at once are refused (an update runs without the GIL), not interleaved.
    """

    cdef ks_gcm_seal_state _state
    cdef AesniGcmKey _key  # read by every update; kept alive here
    cdef ks_isa _path
    cdef uint64_t _length
    cdef bint _open
    cdef bint _busy

    def __init__(self, *args, **kwargs):
        raise AesCoreTypeError("GCM encryptions are created by AesniGcmKey.encryptor")

    def __dealloc__(self):
        ks_gcm_seal_wipe(&self._state)

    def __reduce__(self):
        raise TypeError("GCM encryptions cannot be pickled")

    def __repr__(self):
        return f"<AesniGcmEncryptor backend='aesni' bytes={self._length} finalized={not self._open}>"

    def update(self, data):
        """The ciphertext of the next piece; see :meth:`aescore.GcmEncryptor.update`."""
        return self._update(data, None)

    def update_into(self, data, out):
        """Write the next piece's ciphertext to ``out``; see :meth:`aescore.GcmEncryptor.update_into`."""
        return self._update(data, out)

    def finalize(self):
        """The 16-byte tag; see :meth:`aescore.GcmEncryptor.finalize`."""
        cdef uint8_t tag[16]
        cdef ks_status status
        self._enter()
        try:
            status = ks_gcm_seal_finish(&self._state, &self._key._key, tag)
            self._open = False
            if status != KS_OK:
                _raise_status(status)
            return PyBytes_FromStringAndSize(<char *>tag, KS_GCM_TAG_SIZE)
        finally:
            self._busy = False

    cdef int _enter(self) except -1:
        if self._busy:
            raise RuntimeError("a GCM encryption cannot be used from two threads at once")
        if not self._open:
            raise AlreadyFinalizedError(_FINALIZED)
        self._busy = True
        return 0

    cdef int _fail(self) except -1:
        ks_gcm_seal_wipe(&self._state)
        self._open = False
        return 0

    cdef object _update(self, object data, object out):
        cdef Py_buffer data_view, out_view
        cdef bint have_data = False, have_out = False
        cdef const uint8_t *src
        cdef uint8_t *dst
        cdef Py_ssize_t length
        cdef ks_status status
        cdef object result = None
        cdef object scratch = None
        self._enter()
        try:
            if type(data) is bytes:
                src = <const uint8_t *>PyBytes_AS_STRING(data)
                length = PyBytes_GET_SIZE(data)
            else:
                _get_readable("data", data, &data_view)
                have_data = True
                src = <const uint8_t *>data_view.buf
                length = data_view.len
            if out is not None:
                _get_writable(out, &out_view)
                have_out = True
            if <uint64_t>length > _GCM_MAX_DATA - self._length:
                self._fail()
                raise CounterOverflowError(
                    _messages.too_long_for_gcm("the message", "2**36 - 32", self._length + <uint64_t>length)
                )
            if out is None:
                result = PyBytes_FromStringAndSize(NULL, length)
                dst = <uint8_t *>PyBytes_AS_STRING(result)
            else:
                if out_view.len < length:
                    raise AesCoreValueError(_messages.out_too_small("out", length, "len(data)", out_view.len))
                dst = <uint8_t *>out_view.buf
                if dst != src and dst < src + length and src < dst + length:
                    scratch = PyBytes_FromStringAndSize(NULL, length)
                    dst = <uint8_t *>PyBytes_AS_STRING(scratch)
            if length >= _GIL_RELEASE_BYTES:
                with nogil:
                    status = ks_gcm_seal_update(&self._state, &self._key._key, self._path, src, dst, <size_t>length)
            else:
                status = ks_gcm_seal_update(&self._state, &self._key._key, self._path, src, dst, <size_t>length)
            if status != KS_OK:
                self._fail()
                _raise_status(status)
            self._length += <uint64_t>length
            if out is None:
                return result
            if scratch is not None:
                memcpy(out_view.buf, PyBytes_AS_STRING(scratch), length)
            return length
        finally:
            self._busy = False
            if have_data:
                PyBuffer_Release(&data_view)
            if have_out:
                PyBuffer_Release(&out_view)


cdef AesniGcmEncryptor _start_encryptor(AesniGcmKey key, object nonce, object associated_data):
    cdef Py_buffer aad_view
    cdef bint have_aad = False
    cdef uint8_t nonce_bytes[16]
    cdef const uint8_t *aad = NULL
    cdef Py_ssize_t aad_len = 0
    cdef ks_status status
    cdef AesniGcmEncryptor started = AesniGcmEncryptor.__new__(AesniGcmEncryptor)
    _copy_nonce(nonce, nonce_bytes)
    started._key = key
    started._path = _gcm_path(key._isa if key._isa != KS_ISA_NONE else _isa)
    try:
        if type(associated_data) is bytes:
            aad = <const uint8_t *>PyBytes_AS_STRING(associated_data)
            aad_len = PyBytes_GET_SIZE(associated_data)
        elif _get_associated(associated_data, &aad_view):
            have_aad = True
            aad = <const uint8_t *>aad_view.buf
            aad_len = aad_view.len
        status = ks_gcm_seal_start(&started._state, &key._key, started._path, nonce_bytes, aad, <size_t>aad_len)
    finally:
        if have_aad:
            PyBuffer_Release(&aad_view)
    if status != KS_OK:
        _raise_status(status)
    started._open = True
    return started


@cython.final
cdef class AesniGhash:
    """GHASH under one hash key on the carry-less multiply paths (the hwsim backend's host-side GHASH).

    Args:
        hash_key: the 16-byte ``H``.

    Raises:
        TypeError: ``hash_key`` is not bytes-like.
        ValueError: ``hash_key`` is not 16 bytes long.
    """

    cdef ks_ghash_key _key

    def __init__(self, hash_key):
        cdef Py_buffer view
        cdef ks_status status
        _get_readable("hash_key", hash_key, &view)
        try:
            if view.len != 16:
                raise AesCoreValueError(_messages.wrong_length("hash_key", 16, view.len))
            status = ks_ghash_init(<const uint8_t *>view.buf, &self._key)
        finally:
            PyBuffer_Release(&view)
        if status != KS_OK:
            _raise_status(status)

    def __dealloc__(self):
        ks_ghash_wipe(&self._key)

    def __reduce__(self):
        raise TypeError("GHASH keys cannot be pickled")

    def digest(self, associated_data, ciphertext):
        """GHASH of the padded associated data, ciphertext and lengths block (16 bytes).

        Raises:
            TypeError: an argument is not bytes-like.
        """
        cdef Py_buffer aad_view, data_view
        cdef uint8_t result[16]
        cdef ks_status status
        cdef ks_isa isa = _gcm_path(_isa)
        _get_readable("associated_data", associated_data, &aad_view)
        try:
            _get_readable("ciphertext", ciphertext, &data_view)
            try:
                with nogil:
                    status = ks_ghash(&self._key, isa, <const uint8_t *>aad_view.buf, <size_t>aad_view.len,
                                      <const uint8_t *>data_view.buf, <size_t>data_view.len, result)
            finally:
                PyBuffer_Release(&data_view)
        finally:
            PyBuffer_Release(&aad_view)
        if status != KS_OK:
            _raise_status(status)
        return PyBytes_FromStringAndSize(<char *>result, 16)


def probe(str kind, str isa, uint64_t iterations):
    """Benchmark support: run the instruction-throughput probe ``kind`` on path ``isa``; the caller times it.

    ``aes128``: independent AESENC/AESENCLAST chains; ``clmul``: independent carry-less multiplies (see
    ``aesni_probe.h``). Runs without the GIL.

    Returns:
        The number of 16-byte blocks the work stands for (AES-128 encryptions, or Karatsuba GHASH blocks).

    Raises:
        ValueError: an unknown ``kind``, or a path this CPU cannot run.
    """
    cdef uint64_t blocks = 0
    cdef uint8_t sink[16]
    cdef ks_status status
    cdef ks_isa path = _pick_isa(isa, _cpu_isas)
    if kind not in ("aes128", "clmul"):
        raise AesCoreValueError(f"kind must be 'aes128' or 'clmul', got {kind!r}")
    cdef bint aes = kind == "aes128"
    with nogil:
        if aes:
            status = ks_probe_aes128(path, iterations, &blocks, sink)
        else:
            status = ks_probe_clmul(path, iterations, &blocks, sink)
    if status != KS_OK:
        _raise_status(status)
    return blocks

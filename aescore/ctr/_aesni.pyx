# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, auto_pickle=False
"""The ``aesni`` backend: AES-CTR on AES-NI / VAES-256 / VAES-512 (see ``aesni_ctr.c``), and AES-GCM with
CTR and GHASH fused in one pass (``aesni_gcm.c``, Python side in ``_aesni_gcm.pxi``).

The C file does the arithmetic and returns ``ks_status`` codes; this module validates arguments (same rules
and messages as :mod:`aescore._validate`), turns codes into exceptions, releases the GIL for inputs of
``GIL_RELEASE_BYTES`` or more and splits inputs of ``2 * MIN_BYTES_PER_THREAD`` or more across threads.

Configuration, read at import:

* ``KEYSTREAM_AESNI_ISA``: ``auto`` (default: the fastest path the CPU supports), ``vaes512``, ``vaes256`` or
  ``aesni``. Forcing a path the CPU lacks makes the backend unavailable (with that reason) rather than
  silently running another one. :func:`set_isa` switches in-process (tests, benchmarks).
* ``KEYSTREAM_AESNI_THREADS``: most threads per call (default: CPUs this process may run on, at most
  ``MAX_THREADS``). :func:`set_threads` changes it in-process; ``AesniBackend(threads=1)`` per instance.

Threads are plain pthreads started per call (no pool that would not survive a ``fork``); the call returns
once every item of its input is done. They are used only where each gets at least ``MIN_BYTES_PER_THREAD``
bytes.
"""

import os

cimport cython
from cpython.buffer cimport PyBUF_C_CONTIGUOUS, PyBUF_WRITABLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_AsUnsignedLongLong
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy, memset

from .._interface import Backend, ExpandedKey, GcmEncryptor, GcmKey
from .. import _validate as _messages
from ..errors import AesCoreError, AesCoreTypeError, AesCoreValueError, BackendUnavailableError

cdef enum:
    _GIL_RELEASE_BYTES = 8192
    _MIN_BYTES_PER_THREAD = 4 << 20
    _MAX_THREADS = 64
    _THREAD_STACK_BYTES = 256 * 1024
    _WORK_ITEM_BYTES = 512 * 1024
    _STREAM_MIN_BYTES = 4 << 20

#: Path names, fastest first.
ISA_NAMES = ("vaes512", "vaes256", "aesni")
#: Inputs of at least this many bytes run with the GIL released (about 0.3 µs of work on VAES).
GIL_RELEASE_BYTES = _GIL_RELEASE_BYTES
#: A call uses another thread only if every thread gets at least this many bytes: starting and joining a
#: thread costs ~20 µs on an idle VM and ~100 µs on a busy one, ~1 MiB of VAES-512 work.
MIN_BYTES_PER_THREAD = _MIN_BYTES_PER_THREAD
#: Upper bound for the thread count.
MAX_THREADS = _MAX_THREADS
#: Outputs of at least this many bytes are written with non-temporal stores on the vaes512 path: they do not
#: fit the caches anyway, and skipping the read-for-ownership of ``out`` saves a third of the memory traffic.
STREAM_MIN_BYTES = _STREAM_MIN_BYTES

cdef dict _ISA_BY_NAME = {"vaes512": KS_ISA_VAES512, "vaes256": KS_ISA_VAES256, "aesni": KS_ISA_AESNI}
cdef dict _NAME_BY_ISA = {value: name for name, value in _ISA_BY_NAME.items()}
cdef unsigned _cpu_isas = ks_cpu_isas()
cdef ks_isa _isa = KS_ISA_NONE
cdef int _threads = 1
cdef object _unavailable = None


cdef tuple _isas_in(unsigned mask):
    return tuple(name for name in ISA_NAMES if mask & <unsigned>_ISA_BY_NAME[name])


def supported_isas():
    """Return the paths this CPU and OS can run, fastest first (empty without AES-NI)."""
    return _isas_in(_cpu_isas)


cdef ks_isa _pick_isa(object name, unsigned mask) except? KS_ISA_NONE:
    if not isinstance(name, str):
        raise AesCoreTypeError(f"isa must be a str, got {type(name).__name__}")
    supported = _isas_in(mask)
    if name not in _ISA_BY_NAME and name != "auto":
        raise AesCoreValueError(f"isa must be one of auto, {', '.join(ISA_NAMES)}; got {name!r}")
    if not supported:
        raise BackendUnavailableError("CPU lacks AES-NI")
    if name == "auto":
        return _ISA_BY_NAME[supported[0]]
    if name not in supported:
        raise AesCoreValueError(f"isa {name!r} is not supported by this CPU (supported: {', '.join(supported)})")
    return _ISA_BY_NAME[name]


cdef int _pick_threads(object threads) except -1:
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise AesCoreTypeError(f"threads must be an int, got {type(threads).__name__}")
    if not 1 <= threads <= _MAX_THREADS:
        raise AesCoreValueError(f"threads must be between 1 and {_MAX_THREADS}, got {threads}")
    return threads


def _availability(unsigned cpu_isas, str isa_setting, str threads_setting):
    """Decide (unavailable_reason, isa name, threads) from CPU features and the two environment settings.

    A pure function so the tests can check the reasons a CPU without AES-NI or a bad setting would give.
    """
    if not cpu_isas & KS_ISA_AESNI:
        return "CPU lacks AES-NI", None, None
    try:
        isa = _pick_isa(isa_setting.strip() or "auto", cpu_isas)
    except AesCoreError as exc:
        return f"KEYSTREAM_AESNI_ISA: {exc}", None, None
    if not threads_setting.strip():
        count = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
        return None, _NAME_BY_ISA[isa], min(max(count, 1), _MAX_THREADS)
    try:
        threads = _pick_threads(int(threads_setting))
    except (ValueError, TypeError):
        return (
            f"KEYSTREAM_AESNI_THREADS must be an integer between 1 and {_MAX_THREADS}, got {threads_setting!r}",
            None,
            None,
        )
    return None, _NAME_BY_ISA[isa], threads


def get_isa():
    """Return the module-wide path name used by backends without their own ``isa`` ("none" if unavailable)."""
    return _NAME_BY_ISA.get(_isa, "none")


def set_isa(name):
    """Select the module-wide path: ``auto``, ``vaes512``, ``vaes256`` or ``aesni``.

    Raises:
        TypeError: ``name`` is not a str (:class:`aescore.AesCoreTypeError`).
        ValueError: unknown name, or a path this CPU cannot run (:class:`aescore.AesCoreValueError`).
        BackendUnavailableError: the CPU lacks AES-NI.
    """
    global _isa
    _isa = _pick_isa(name, _cpu_isas)


def get_threads():
    """Return the module-wide upper bound on threads per call."""
    return _threads


def set_threads(threads):
    """Set the module-wide upper bound on threads per call (1 disables threading).

    Raises:
        TypeError: ``threads`` is not an int.
        ValueError: ``threads`` is outside 1..MAX_THREADS.
    """
    global _threads
    _threads = _pick_threads(threads)


def unavailable_reason():
    """Return why this backend cannot run here (no AES-NI, bad configuration), or ``None``."""
    return _unavailable


_unavailable, _isa_name, _threads_setting = _availability(
    _cpu_isas, os.environ.get("KEYSTREAM_AESNI_ISA", ""), os.environ.get("KEYSTREAM_AESNI_THREADS", "")
)
if _unavailable is None:
    _isa = _ISA_BY_NAME[_isa_name]
    _threads = _threads_setting
del _isa_name, _threads_setting


cdef int _raise_status(ks_status status) except -1:
    if status == KS_ERR_KEY_SIZE:
        raise AesCoreValueError("key must be 16, 24 or 32 bytes long")  # the C core's own check
    if status == KS_ERR_RANGE:
        raise AesCoreValueError(_messages.PAST_STREAM_END)
    if status == KS_ERR_ISA:
        raise BackendUnavailableError("the selected AES-NI/VAES path is not supported by this CPU")
    if status == KS_ERR_KEY_STATE:
        raise AesCoreTypeError("expanded_key was not produced by AesniBackend.expand_key")
    raise AesCoreError(f"aesni core failed with status {<int>status}")


cdef int _get_readable(str name, object value, Py_buffer *view) except -1:
    if not isinstance(value, (bytes, bytearray, memoryview)):
        raise AesCoreTypeError(_messages.not_bytes_like(name, value))
    try:
        PyObject_GetBuffer(value, view, PyBUF_C_CONTIGUOUS)
    except BufferError as exc:
        raise AesCoreValueError(_messages.not_contiguous(name)) from exc
    return 0


cdef int _get_writable(object value, Py_buffer *view) except -1:
    if type(value) is bytearray:
        PyObject_GetBuffer(value, view, PyBUF_WRITABLE)
        return 0
    if not isinstance(value, (bytearray, memoryview)):
        raise AesCoreTypeError(_messages.not_writable_type("out", value))
    if isinstance(value, memoryview) and value.readonly:
        raise AesCoreTypeError(_messages.read_only("out"))
    try:
        PyObject_GetBuffer(value, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS)
    except BufferError as exc:
        raise AesCoreValueError(_messages.not_contiguous("out")) from exc
    return 0


ctypedef struct _Work:
    # One call split into items claimed by whichever thread is free, the caller included. The caller waits
    # for the items to be *done*, not for the helpers to exit: a helper the OS has not scheduled yet when the
    # caller has taken every item costs nothing, and one preempted mid-item costs that item only. The helpers
    # are detached, so this struct lives on the heap and the last of the caller and helpers to leave frees it.
    const ks_aes_key *key
    ks_isa isa
    ks_store store
    uint8_t counter[16]
    uint64_t offset
    const uint8_t *src
    uint8_t *dst
    size_t length
    size_t first   # bytes in item 0: it ends on a 64-byte keystream boundary, so every later item starts on one
    size_t items
    size_t next_item
    size_t done_items
    size_t references
    int status


cdef void _claim_items(_Work *work) noexcept nogil:
    cdef size_t item, start, end
    cdef ks_status status
    while True:
        item = __atomic_fetch_add(&work.next_item, 1, __ATOMIC_RELAXED)
        if item >= work.items:
            return
        start = 0 if item == 0 else work.first + (item - 1) * _WORK_ITEM_BYTES
        end = work.first + item * _WORK_ITEM_BYTES
        if end > work.length:
            end = work.length
        status = ks_ctr_xor(work.key, work.isa, work.counter, work.offset + start, work.src + start,
                            work.dst + start, end - start, work.store)
        if status != KS_OK:
            __atomic_store_n(&work.status, <int>status, __ATOMIC_RELAXED)
        # Release: the caller's acquire load of done_items then sees this item's output.
        __atomic_fetch_add(&work.done_items, 1, __ATOMIC_RELEASE)


cdef void _leave(_Work *work) noexcept nogil:
    if __atomic_sub_fetch(&work.references, 1, __ATOMIC_ACQ_REL) == 0:
        free(work)


cdef void *_helper(void *arg) noexcept nogil:
    _claim_items(<_Work *>arg)
    _leave(<_Work *>arg)
    return NULL


cdef ks_status _ctr_xor_threads(const ks_aes_key *key, ks_isa isa, const uint8_t *counter, uint64_t offset,
                                const uint8_t *src, uint8_t *dst, size_t length, int threads) noexcept nogil:
    """Run one call on the caller's thread plus up to threads - 1 detached helpers."""
    cdef ks_store store = KS_STORE_STREAM if length >= _STREAM_MIN_BYTES else KS_STORE_CACHED
    cdef _Work *work = NULL
    cdef pthread_attr_t attr
    cdef pthread_t handle
    cdef int i
    cdef ks_status status
    if threads > 1:
        work = <_Work *>malloc(sizeof(_Work))
    if work == NULL or pthread_attr_init(&attr) != 0:
        free(work)
        return ks_ctr_xor(key, isa, counter, offset, src, dst, length, store)
    pthread_attr_setstacksize(&attr, _THREAD_STACK_BYTES)
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED)
    work.key = key
    work.isa = isa
    work.store = store
    memcpy(work.counter, counter, 16)
    work.offset = offset
    work.src = src
    work.dst = dst
    work.length = length
    work.first = min(<size_t>_WORK_ITEM_BYTES - (offset & 63), length)
    work.items = 1 + (length - work.first + _WORK_ITEM_BYTES - 1) // _WORK_ITEM_BYTES
    work.next_item = 0
    work.done_items = 0
    work.references = <size_t>threads
    work.status = KS_OK
    for i in range(1, threads):
        if pthread_create(&handle, &attr, _helper, work) != 0:
            _leave(work)  # this helper will never run: drop its reference (others may still come)
    pthread_attr_destroy(&attr)
    _claim_items(work)
    while __atomic_load_n(&work.done_items, __ATOMIC_ACQUIRE) < work.items:
        sched_yield()  # a helper is finishing its last item; let it (or anyone) have the CPU
    status = <ks_status>work.status
    _leave(work)
    return status


include "../gcm/_aesni_gcm.pxi"


@cython.final
cdef class AesniExpandedKey:
    """An AES key expanded for the aesni backend: immutable, thread-safe, wiped from memory when freed.

    Created only by :meth:`AesniBackend.expand_key`. Its ``repr`` shows the key size, never key material,
    and it refuses to be pickled or copied.
    """

    cdef ks_aes_key _key

    def __init__(self, *args, **kwargs):
        raise AesCoreTypeError("expanded keys are created by AesniBackend.expand_key")

    def __dealloc__(self):
        ks_wipe_key(&self._key)

    @property
    def backend_name(self):
        """Always ``"aesni"``."""
        return "aesni"

    @property
    def key_size(self):
        """Key size in bytes: 16, 24 or 32."""
        return (<int>self._key.rounds - 6) * 4

    def __repr__(self):
        return f"<AesniExpandedKey backend='aesni' key_size={self.key_size * 8} bits>"

    def __reduce__(self):
        raise TypeError("expanded keys cannot be pickled")


cdef class AesniBackend:
    """AES-CTR on AES-NI / VAES-256 / VAES-512, constant-time (no secret-dependent branches or tables).

    Args:
        isa: force a path for this instance (``auto``, ``vaes512``, ``vaes256``, ``aesni``); ``None`` follows
            the module setting (:func:`set_isa`, ``KEYSTREAM_AESNI_ISA``).
        threads: most threads per call for this instance; ``None`` follows :func:`set_threads`.

    Raises:
        BackendUnavailableError: the CPU lacks AES-NI or the environment configuration is invalid.
        ValueError: ``isa`` names a path this CPU cannot run, or ``threads`` is out of range.
    """

    name = "aesni"
    block_size = KS_BLOCK_SIZE
    key_sizes = (16, 24, 32)
    constant_time = True
    runs_inline = True  # tens of microseconds per MiB with the GIL released: fine on an event loop
    supports_async = False  # ctr_xor_async only runs ctr_xor: nothing to overlap with the loop

    cdef ks_isa _isa
    cdef int _threads

    def __init__(self, isa=None, threads=None):
        if _unavailable is not None:
            raise BackendUnavailableError(f"backend 'aesni' is unavailable: {_unavailable}")
        self._isa = KS_ISA_NONE if isa is None else _pick_isa(isa, _cpu_isas)
        self._threads = 0 if threads is None else _pick_threads(threads)

    def expand_key(self, key):
        """Expand a 16, 24 or 32-byte AES key (in C, with AESKEYGENASSIST).

        Raises:
            TypeError: ``key`` is not bytes-like (:class:`aescore.AesCoreTypeError`).
            ValueError: ``key`` has another length (:class:`aescore.AesCoreValueError`).
        """
        cdef Py_buffer view
        cdef const uint8_t *pointer
        cdef Py_ssize_t length
        cdef AesniExpandedKey expanded
        cdef ks_status status
        if type(key) is bytes:
            pointer = <const uint8_t *>PyBytes_AS_STRING(key)
            length = PyBytes_GET_SIZE(key)
            if length != 16 and length != 24 and length != 32:
                raise AesCoreValueError(_messages.wrong_key_length(length))
            expanded = AesniExpandedKey.__new__(AesniExpandedKey)
            status = ks_expand_key(pointer, <size_t>length, &expanded._key)
        else:
            _get_readable("key", key, &view)
            try:
                if view.len != 16 and view.len != 24 and view.len != 32:
                    raise AesCoreValueError(_messages.wrong_key_length(view.len))
                expanded = AesniExpandedKey.__new__(AesniExpandedKey)
                status = ks_expand_key(<const uint8_t *>view.buf, <size_t>view.len, &expanded._key)
            finally:
                PyBuffer_Release(&view)
        if status != KS_OK:
            _raise_status(status)
        return expanded

    def ctr_xor(self, expanded_key, initial_counter, data, offset=0, out=None):
        """XOR ``data`` with the keystream from byte ``offset``; see :meth:`aescore.Backend.ctr_xor`.

        Never reuse a key with an overlapping (initial_counter, offset) range for different data.

        Raises:
            TypeError: wrong argument types, a read-only ``out``, or a key from another backend.
            ValueError: a counter that is not 16 bytes, a negative or too large offset, or a too-small
                ``out``.
        """
        cdef Py_buffer counter_view, data_view, out_view
        cdef bint have_counter_view = False, have_data_view = False, have_out_view = False
        cdef uint8_t counter[16]
        cdef const uint8_t *src
        cdef uint8_t *dst
        cdef Py_ssize_t length
        cdef uint64_t position
        cdef ks_status status
        cdef ks_isa isa
        cdef int threads
        cdef object result = None
        cdef object scratch = None
        cdef AesniExpandedKey key
        if type(expanded_key) is not AesniExpandedKey:
            raise AesCoreTypeError(_messages.foreign_key("expanded_key", "aesni", expanded_key))
        key = <AesniExpandedKey>expanded_key
        try:
            if type(initial_counter) is bytes:
                if PyBytes_GET_SIZE(initial_counter) != 16:
                    raise AesCoreValueError(
                        _messages.wrong_length("initial_counter", 16, PyBytes_GET_SIZE(initial_counter))
                    )
                memcpy(counter, PyBytes_AS_STRING(initial_counter), 16)
            else:
                _get_readable("initial_counter", initial_counter, &counter_view)
                have_counter_view = True
                if counter_view.len != 16:
                    raise AesCoreValueError(_messages.wrong_length("initial_counter", 16, counter_view.len))
                memcpy(counter, counter_view.buf, 16)
            if type(data) is bytes:
                src = <const uint8_t *>PyBytes_AS_STRING(data)
                length = PyBytes_GET_SIZE(data)
            else:
                _get_readable("data", data, &data_view)
                have_data_view = True
                src = <const uint8_t *>data_view.buf
                length = data_view.len
            if type(offset) is int or (isinstance(offset, int) and not isinstance(offset, bool)):
                try:
                    position = PyLong_AsUnsignedLongLong(offset)
                except OverflowError:
                    raise AesCoreValueError(_messages.offset_out_of_range(offset)) from None
            else:
                raise AesCoreTypeError(_messages.offset_not_int(offset))
            if position != 0 and <uint64_t>length > <uint64_t>0 - position:
                raise AesCoreValueError(_messages.PAST_STREAM_END)
            if out is None:
                result = PyBytes_FromStringAndSize(NULL, length)
                dst = <uint8_t *>PyBytes_AS_STRING(result)
            else:
                _get_writable(out, &out_view)
                have_out_view = True
                if out_view.len < length:
                    raise AesCoreValueError(_messages.out_too_small("out", length, "len(data)", out_view.len))
                dst = <uint8_t *>out_view.buf
                if dst != src and dst < src + length and src < dst + length:
                    # Partial overlap: the vector loop would read bytes it already wrote. Rare; go through a
                    # scratch buffer so the result equals "compute, then copy" as in the python backend.
                    scratch = PyBytes_FromStringAndSize(NULL, length)
                    dst = <uint8_t *>PyBytes_AS_STRING(scratch)
            if length == 0:
                return result
            isa = self._isa if self._isa != KS_ISA_NONE else _isa
            threads = self._threads if self._threads != 0 else _threads
            if threads > 1 and <size_t>length < <size_t>threads * _MIN_BYTES_PER_THREAD:
                threads = <int>(<size_t>length // _MIN_BYTES_PER_THREAD) or 1
            if length >= _GIL_RELEASE_BYTES:
                with nogil:
                    status = _ctr_xor_threads(&key._key, isa, counter, position, src, dst, <size_t>length, threads)
            else:
                status = ks_ctr_xor(&key._key, isa, counter, position, src, dst, <size_t>length, KS_STORE_CACHED)
            if status != KS_OK:
                _raise_status(status)
            if scratch is not None:
                memcpy(out_view.buf, PyBytes_AS_STRING(scratch), length)
            return result
        finally:
            if have_counter_view:
                PyBuffer_Release(&counter_view)
            if have_data_view:
                PyBuffer_Release(&data_view)
            if have_out_view:
                PyBuffer_Release(&out_view)

    async def ctr_xor_async(self, expanded_key, initial_counter, data, offset=0):
        """:meth:`ctr_xor` in the calling coroutine (see :meth:`aescore.Backend.ctr_xor_async`)."""
        return self.ctr_xor(expanded_key, initial_counter, data, offset)

    def sealed_batch(self):
        """The native sealed-format core on this instance's AES path, or ``None`` when it cannot run here.

        See :meth:`aescore.Backend.sealed_batch`.
        """
        from ..sealing._native import native_sealed_batch

        return native_sealed_batch(_NAME_BY_ISA.get(self._isa if self._isa != KS_ISA_NONE else _isa, "none"))

    def ghash(self, hash_key):
        """GHASH with the carry-less multiply (constant-time; see :meth:`aescore.Backend.ghash`)."""
        return AesniGhash(hash_key)

    def gcm_key(self, key):
        """Prepare a 16, 24 or 32-byte key for AES-GCM: round keys and H^1..H^32, once per key.

        The GCM path follows this instance's ``isa`` (else the module setting) at each call.

        Raises:
            TypeError: ``key`` is not bytes-like (:class:`aescore.AesCoreTypeError`).
            ValueError: ``key`` has another length (:class:`aescore.AesCoreValueError`).
        """
        return _make_gcm_key(key, self._isa)

    def info(self):
        """Describe the backend: name, constant_time, isa (path in use), threads, supported_isas."""
        return {
            "name": self.name,
            "constant_time": self.constant_time,
            "isa": _NAME_BY_ISA.get(self._isa if self._isa != KS_ISA_NONE else _isa, "none"),
            "threads": self._threads if self._threads != 0 else _threads,
            "supported_isas": ",".join(supported_isas()),
        }

    def __repr__(self):
        return f"<aescore backend {self.name!r}>"


Backend.register(AesniBackend)
ExpandedKey.register(AesniExpandedKey)
GcmKey.register(AesniGcmKey)
GcmEncryptor.register(AesniGcmEncryptor)

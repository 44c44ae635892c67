# cython: language_level=3, auto_pickle=False
"""C-level ``AESModeOfOperationCTR`` for :mod:`aescore.compat.pyaes` (see there for the semantics).

Only construction and the first call of a fresh object (the whole of pyperformance's crypto_pyaes loop) run
here, so that they cost one C call each instead of a Python frame; every other case (a caller's counter, a
``str``, keystream left over from an earlier call) is handed to :mod:`aescore.compat.pyaes`'s Python code, which is
shared with the pure-Python class. That module calls :func:`configure` when it is imported.
"""

cdef bytes _COUNTER_ONE = (1).to_bytes(16, "big")
cdef object _resolve_backend = None
cdef object _encrypt_general = None
cdef object _default_backend = None


def configure(resolve_backend, encrypt_general):
    """Install the pyaes shim's backend lookup and its general (non-hot-path) ``encrypt``."""
    global _resolve_backend, _encrypt_general, _default_backend
    _resolve_backend = resolve_backend
    _encrypt_general = encrypt_general
    _default_backend = None


cdef class AESModeOfOperationCTR:
    """AES in counter mode with pyaes 1.6.1's interface (C hot path); see :mod:`aescore.compat.pyaes`.

    Args:
        key: 16, 24 or 32 bytes.
        counter: a ``Counter`` (or any object with ``value`` and ``increment()``); default ``Counter(1)``.
        backend: an aescore backend or its name; default ``aescore.get_backend()``.

    Raises:
        TypeError: ``key`` is not bytes-like.
        ValueError: ``key`` is not 16, 24 or 32 bytes long.
        aescore.BackendUnavailableError: the requested backend cannot run here.
    """

    name = "Counter (CTR)"

    cdef public object _backend
    cdef public object _expanded_key
    cdef public object _counter
    cdef public long long _consumed
    cdef public int _tail_left
    cdef public object _tail_block

    def __init__(self, key, counter=None, *, backend=None):
        global _default_backend
        if backend is None:
            if _default_backend is None:
                _default_backend = _resolve_backend(None)
            backend = _default_backend
        else:
            backend = _resolve_backend(backend)
        self._backend = backend
        self._expanded_key = backend.expand_key(key)
        self._counter = counter
        self._consumed = 0 if counter is None else -1
        self._tail_left = 0
        self._tail_block = 0

    def encrypt(self, plaintext):
        """Encrypt (or decrypt) the next ``len(plaintext)`` bytes of the stream.

        Raises:
            TypeError: ``plaintext`` is not bytes-like or str.
            ValueError: a ``str`` holds a character above U+00FF.
        """
        if self._consumed != 0 or isinstance(plaintext, str):
            return _encrypt_general(self, plaintext)
        result = self._backend.ctr_xor(self._expanded_key, _COUNTER_ONE, plaintext)
        self._consumed = len(result)
        return result

    def decrypt(self, ciphertext):
        """Decrypt (or encrypt: CTR is symmetric) the next ``len(ciphertext)`` bytes of the stream.

        Raises:
            TypeError: ``ciphertext`` is not bytes-like or str.
            ValueError: a ``str`` holds a character above U+00FF.
        """
        if self._consumed != 0 or isinstance(ciphertext, str):
            return _encrypt_general(self, ciphertext)
        result = self._backend.ctr_xor(self._expanded_key, _COUNTER_ONE, ciphertext)
        self._consumed = len(result)
        return result

    def __repr__(self):
        return f"<AESModeOfOperationCTR backend={self._backend.name!r} key_size={self._expanded_key.key_size * 8}>"

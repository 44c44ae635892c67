"""AES-GCM: the public :class:`aescore.AesGcm` (``aes_gcm.py``), the composition any backend gets by default
(``_composed.py``: its ``ctr_xor`` plus a GHASH from ``_ghash.py``, pure Python and not constant-time), and
the aesni backend's fused C path (``aesni_gcm.c``, bound into ``aescore.ctr._aesni`` by ``_aesni_gcm.pxi``;
the native sealing core links it too).

Nothing is imported here, so the backend interface can import the composition without importing the
public class that depends on that interface.
"""

"""The native sealing core: many whole sealed-format messages of either scheme per call (``_sealed.pyx`` over
``sealed_batch.c``, ``sha256.c`` and the GCM core), offered to callers as the aesni backend's
:meth:`aescore.Backend.sealed_batch` (``_native.py``).

Nothing is imported here: the extension is optional and loaded only when a backend asks for it.
"""

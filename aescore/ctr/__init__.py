"""The AES-CTR backends: ``python`` (``_python.py``, ``_python_bulk.py``: pure Python, not constant-time) and
``aesni`` (``_aesni.pyx`` over ``aesni_ctr.c`` and the CPU probe ``aesni_probe.c``; its GCM methods come from
:mod:`aescore.gcm`'s ``_aesni_gcm.pxi``).

Obtain them through :func:`aescore.get_backend`; nothing is imported here.
"""

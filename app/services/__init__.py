"""The service layer, between the routes and the domain: what the streaming and batch routes share.

- :mod:`.keys`: which key versions an encrypt or a decrypt uses (through the key cache).
- :mod:`.sealing`: sealing and opening whole messages (small bodies, batches, data keys).
- :mod:`.crypto_step`: the streaming routes' crypto step over a format's ``update``/``finalize``.
- :mod:`.crypto_work`: one piece of crypto work: what it weighs, where it runs, its metrics.
- :mod:`.pipeline`: bounded receive/transform/send stages for streams.
- :mod:`.offload`: the python backend in a process pool, and ``run_crypto`` (inline vs thread).
- :mod:`.backends`: the enabled backends of a running service.
- :mod:`.security`: bearer tokens (verification, generation, the root token).
- :mod:`.coherence`: following the keystore's change log to keep caches coherent.
- :mod:`.auto_rotate`: rotating keys whose ``auto_rotate_period`` elapsed (the keystore decides who does).

Nothing here imports fastapi or starlette; errors are :mod:`app.errors`.
"""

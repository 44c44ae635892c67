"""The service layer, between the routes and the domain: what the streaming and batch routes share.

- :mod:`.keys`: which key versions an encrypt or a decrypt uses (through the key cache).
- :mod:`.raw`: raw CTR's IV and keystream range, as the streaming routes take them.
- :mod:`.sealing`: sealing and opening whole messages (small bodies, batches, data keys).
- :mod:`.crypto_step`: the streaming routes' crypto step over a format's ``update``/``finalize``.
- :mod:`.crypto_work`: one piece of crypto work: what it weighs, where it runs, its metrics.
- :mod:`.pipeline`: bounded receive/transform/send stages for streams.
- :mod:`.offload`: where crypto runs (``run_crypto``: inline or a thread), and the python backend in a
  process pool.
- :mod:`.key_slots`: the memory shared with that pool's processes in which their keys travel (locked, left
  out of dumps, zeroed), never in a pickle.
- :mod:`.budget`: the bytes concurrent batch requests may hold in memory at once.
- :mod:`.backends`: the enabled backends of a running service.
- :mod:`.security`: bearer tokens (verification, generation, the root token).
- :mod:`.identity`: workload identity's public interface, over :mod:`.login` (roles, login attempt limits,
  the token a login issues), :mod:`.jwt_config` (the JWT method's configuration and the issuer's keys),
  :mod:`.jwt_verify` (a JWT verified by PyJWT), :mod:`.jwt_login` (JWT roles' bindings and the login) and
  :mod:`.cert_login` (the certificate login).
- :mod:`.jwks`: JWT issuers' key sets fetched over HTTPS and cached.
- :mod:`.attempts`: attempt limits for the routes called without a token (unseal, login).
- :mod:`.coherence`: following the keystore's change log to keep caches coherent.
- :mod:`.auto_rotate`: rotating keys whose ``auto_rotate_period`` elapsed (the keystore decides who does).
- :mod:`.master_rotation`: a rotation of the master key run in the background of one worker.

Nothing here imports fastapi or starlette; errors are :mod:`app.errors`.
"""

"""The JWT method's configuration: checked when an admin writes it, and the issuer's keys a login uses.

The configuration (:func:`check_jwt_config`) names exactly one key source: a ``jwks_url`` (with an optional
``jwks_ca_pem``), an ``oidc_discovery_url``, or ``jwt_validation_pubkeys`` (PEM), plus an optional
``bound_issuer`` and the ``leeway`` in seconds for ``exp``, ``nbf`` and ``iat``.

At a login, :func:`issuer_keys` gives the public keys a JWT's signature is checked against: the configured
PEM keys, parsed once per distinct PEM text (parsing an RSA key costs more than verifying a signature with
it), or the key of the JWT's ``kid`` from the issuer's key set (:class:`~app.services.jwks.JwksCache`, which
caches the parsed keys). Both hold only public keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from cryptography.hazmat.primitives.asymmetric.types import PublicKeyTypes
from cryptography.hazmat.primitives.serialization import load_pem_public_key

from app.errors import BadRequestError

from .jwks import JwksCache, KeySource

__all__ = ["DEFAULT_LEEWAY_SECONDS", "check_jwt_config", "issuer_keys", "public_key"]

#: Seconds of clock skew allowed for ``exp``, ``nbf`` and ``iat`` when the configuration names none.
DEFAULT_LEEWAY_SECONDS = 60
#: The most leeway a configuration may ask for.
MAX_LEEWAY_SECONDS = 300
#: How many distinct PEM keys stay parsed (a configuration holds at most 8; old ones fall out).
PARSED_KEYS_KEPT = 64


def check_jwt_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """Return the JWT method's configuration to store, after checking it names exactly one key source.

    Raises:
        BadRequestError: no key source or more than one, a URL that is not ``https://``, a CA or a public key
            that is not PEM, a ``jwks_ca_pem`` without a URL, or a ``leeway`` outside 0..300.
    """
    sources = [
        name for name in ("jwks_url", "oidc_discovery_url", "jwt_validation_pubkeys") if config.get(name)
    ]
    if len(sources) != 1:
        raise BadRequestError(
            "give exactly one of jwks_url, oidc_discovery_url and jwt_validation_pubkeys"
            + (f" (got {', '.join(sources)})" if sources else "")
        )
    for name in ("jwks_url", "oidc_discovery_url"):
        url = config.get(name)
        if url is not None and (not isinstance(url, str) or not url.startswith("https://")):
            raise BadRequestError(f"{name} must be an https:// URL")
    ca_pem = config.get("jwks_ca_pem")
    if ca_pem is not None:
        if sources[0] == "jwt_validation_pubkeys":
            raise BadRequestError("jwks_ca_pem goes with jwks_url or oidc_discovery_url")
        if not isinstance(ca_pem, str) or "-----BEGIN CERTIFICATE-----" not in ca_pem:
            raise BadRequestError("jwks_ca_pem must be PEM certificates")
    for pem in config.get("jwt_validation_pubkeys") or ():
        public_key(pem)
    leeway = config.get("leeway", DEFAULT_LEEWAY_SECONDS)
    if not isinstance(leeway, int) or isinstance(leeway, bool) or not 0 <= leeway <= MAX_LEEWAY_SECONDS:
        raise BadRequestError(f"leeway must be 0..{MAX_LEEWAY_SECONDS} seconds")
    issuer = config.get("bound_issuer")
    if issuer is not None and not isinstance(issuer, str):
        raise BadRequestError("bound_issuer must be a string")
    return {name: value for name, value in {**config, "leeway": leeway}.items() if value is not None}


def public_key(pem: object) -> PublicKeyTypes:
    """The public key of a ``jwt_validation_pubkeys`` entry (parsed once per distinct PEM text).

    Raises:
        BadRequestError: ``pem`` is not a PEM public key.
    """
    if not isinstance(pem, str):
        raise BadRequestError("jwt_validation_pubkeys must be PEM public keys")
    return _parsed(pem)


@lru_cache(maxsize=PARSED_KEYS_KEPT)
def _parsed(pem: str) -> PublicKeyTypes:
    # A public key object is immutable and holds nothing secret: sharing it between logins is safe.
    try:
        return load_pem_public_key(pem.encode())
    except (ValueError, TypeError) as exc:
        raise BadRequestError("a jwt_validation_pubkeys entry is not a PEM public key") from exc


def issuer_keys(config: Mapping[str, Any], jwks: JwksCache, algorithm: str, kid: str | None) -> list[Any]:
    """The public keys a JWT with header ``algorithm`` and ``kid`` may be signed with under ``config``: every
    configured PEM key, or the issuer's key for ``kid`` (none when the set has no such key).

    Raises:
        BadRequestError: the issuer published the ``kid``'s key for another algorithm than ``algorithm``
            (RFC 8725 3.1).
        IdentityProviderUnavailableError: the issuer's keys cannot be fetched and none are cached.
    """
    if "jwt_validation_pubkeys" in config:
        return [public_key(pem) for pem in config["jwt_validation_pubkeys"]]
    source = KeySource(config.get("jwks_url"), config.get("jwks_ca_pem"), config.get("oidc_discovery_url"))
    found = jwks.key_for(source, kid)
    if found is not None and found.algorithm is not None and found.algorithm != algorithm:
        # The issuer said which algorithm this key signs with: a JWT naming another is not its.
        raise BadRequestError(
            f"the JWT's alg {algorithm} is not the alg {found.algorithm} its key is published for"
        )
    return [] if found is None else [found.jwk.key]

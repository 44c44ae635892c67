# The Keystream image plus Debian's SoftHSM2, for the pkcs11 variant of the scale-out stack
# (deploy/compose/scaleout-pkcs11.yml; deploy/compose.sh builds it as keystream-softhsm:TAG on top of
# keystream:TAG, and again whenever that changes: the classic builder's layer cache makes it quick).
#
# A DEMO OF THE HSM PATH, NOT AN HSM: SoftHSM2 keeps its "token" in files (here a docker volume) and the PIN
# sits in a file next to it, so whoever can read the volume and the PIN has the master key, as with the file
# seal. It shows the real code path (python-pkcs11, which the Keystream image always has, calling a PKCS#11
# module; the key generated inside the token, non-extractable), nothing more. With a real HSM, use the
# Keystream image itself plus the vendor's PKCS#11 module (KEYSTREAM_PKCS11_LIB) and its configuration.
ARG KEYSTREAM_IMAGE=keystream:latest
FROM ${KEYSTREAM_IMAGE}
USER root
# The token directory is created owned by the image's user: a named volume mounted there starts as a copy of
# it (owner and mode included), so the replicas (uid 10001) can use the token.
RUN set -eux; \
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d; chmod 0755 /usr/sbin/policy-rc.d; \
    apt-get update; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends softhsm2; \
    rm -rf /var/lib/apt/lists/* /usr/sbin/policy-rc.d; \
    install -d -o keystream -g keystream -m 0700 /var/lib/keystream-softhsm /var/lib/keystream-softhsm/tokens
COPY softhsm2.conf /etc/keystream/softhsm2.conf
COPY softhsm-init.sh /usr/local/bin/keystream-softhsm-init
# The module is /usr/lib/softhsm/libsofthsm2.so (KEYSTREAM_PKCS11_LIB, set by scaleout-pkcs11.yml).
ENV SOFTHSM2_CONF=/etc/keystream/softhsm2.conf
USER 10001:10001

#!/bin/sh
# The one-shot service hsm-init of deploy/compose/scaleout-pkcs11.yml (installed in keystream-softhsm as
# keystream-softhsm-init). At the stack's first start it initialises the SoftHSM2 token
# KEYSTREAM_PKCS11_TOKEN_LABEL in the shared volume, with the user PIN from KEYSTREAM_PKCS11_PIN_FILE; then,
# on every start, `keystream-server operator init` creates the master key inside the token when it is absent
# (AES-256, non-extractable, sensitive) and seals the stack's database with it (harmless when done already).
# The replicas start only after it exited 0 and unseal through the token by themselves.
#
# A demo of the HSM path: the security officer PIN is random and thrown away (nobody administers this token),
# and softhsm2-util takes the user PIN on its command line, visible inside this container for a moment.
set -eu

label="${KEYSTREAM_PKCS11_TOKEN_LABEL:?KEYSTREAM_PKCS11_TOKEN_LABEL is not set}"
pin_file="${KEYSTREAM_PKCS11_PIN_FILE:?KEYSTREAM_PKCS11_PIN_FILE is not set}"
# An initialised token's slot shows its label (padded with spaces); a free slot shows an empty one.
if softhsm2-util --show-slots | awk -v label="$label" '
    { sub(/[[:space:]]+$/, "") }
    sub(/^[[:space:]]*Label:[[:space:]]*/, "") && $0 == label { found = 1 }
    END { exit !found }'; then
    echo "hsm-init: SoftHSM2 token '$label' is already initialised"
else
    pin="$(cat "$pin_file")"
    so_pin="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
    softhsm2-util --init-token --free --label "$label" --pin "$pin" --so-pin "$so_pin" >/dev/null
    echo "hsm-init: initialised the SoftHSM2 token '$label' (a demo token in a docker volume, not an HSM)"
fi
exec keystream-server operator init

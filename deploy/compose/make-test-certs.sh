#!/usr/bin/env bash
# A throwaway CA, a server certificate for "keystream", "localhost" and 127.0.0.1, and a client certificate
# for mTLS, for trying deploy/compose/tls.yml, deploy/k8s-tls or KEYSTREAM_TLS_CLIENT_CA_FILE (not for
# production: use your own CA or cert-manager there).
#   deploy/compose/make-test-certs.sh DIR   # DIR/ca.pem, ca.key, server.pem, server.key, client.pem, client.key
set -euo pipefail
dir="${1:?usage: $0 DIR}"
mkdir -p "$dir"
cd "$dir"
umask 077
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 30 \
    -subj "/CN=Keystream test CA" -keyout ca.key -out ca.pem 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=keystream" -keyout server.key -out server.csr 2>/dev/null
openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -out server.pem \
    -extfile <(printf 'subjectAltName=DNS:keystream,DNS:keystream.default.svc,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\n') \
    2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
    -subj "/CN=keystream client" -keyout client.key -out client.csr 2>/dev/null
openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 30 -out client.pem \
    -extfile <(printf 'extendedKeyUsage=clientAuth\n') 2>/dev/null
rm -f server.csr client.csr ca.srl
# Throwaway files only: the container (uid 10001) must read the key, and a compose secret keeps the file's
# owner and mode. For a real key, chown it to 10001 and keep it 0600 instead.
chmod 0644 ca.pem server.pem client.pem
chmod 0644 server.key
echo "wrote $dir: ca.pem, server.pem + server.key, client.pem + client.key (CA key: ca.key)"

#!/usr/bin/env bash
# Make a test CA and certificates for TLS between brokers and clients (openssl).
#
#   scripts/make_test_ca.sh OUT_DIR [IP_OR_DNS ...]
#
# Writes into OUT_DIR: ca.pem / ca.key (the CA), broker.pem / broker.key (a broker
# certificate, valid for serving and for connecting as a client, whose subject
# alternative names are 127.0.0.1, localhost and every extra IP or DNS name given), and
# client.pem / client.key (a client certificate, for networks with verify_clients).
# For brokers on several hosts, name every broker's address, e.g.
#   scripts/make_test_ca.sh tls 10.0.0.5 10.0.0.6 broker3.example.org
# or run it once per host with the same CA (keep ca.key off the brokers' hosts).
# Test certificates: 2048-bit RSA, valid 30 days, keys unencrypted.
set -euo pipefail

out=${1:?usage: $0 OUT_DIR [IP_OR_DNS ...]}
shift
mkdir -p "$out"
cd "$out"

san="IP:127.0.0.1,DNS:localhost"
for name in "$@"; do
    if [[ $name =~ ^[0-9.]+$ || $name == *:* ]]; then
        san+=",IP:$name"
    else
        san+=",DNS:$name"
    fi
done

openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=hop test CA" \
    -keyout ca.key -out ca.pem \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null

issue() {  # NAME CN EXTENDED_KEY_USAGE [SAN]
    local name=$1 cn=$2 usage=$3 alt=${4:-}
    openssl req -newkey rsa:2048 -nodes -subj "/CN=$cn" \
        -keyout "$name.key" -out "$name.csr" 2>/dev/null
    {
        echo "basicConstraints=CA:FALSE"
        echo "keyUsage=critical,digitalSignature,keyEncipherment"
        echo "extendedKeyUsage=$usage"
        if [[ -n $alt ]]; then echo "subjectAltName=$alt"; fi
    } > "$name.ext"
    openssl x509 -req -in "$name.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
        -days 30 -extfile "$name.ext" -out "$name.pem" 2>/dev/null
    rm -f "$name.csr" "$name.ext"
}

issue broker "hop broker" "serverAuth,clientAuth" "$san"
issue client "hop client" "clientAuth"
chmod 600 ./*.key
echo "wrote $(pwd)/{ca,broker,client}.{pem,key} (broker SAN: $san)"

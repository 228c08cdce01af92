#!/usr/bin/env bash
# deploy/cluster-certs.sh -- a cluster CA and one certificate per node for
# the node-to-node link's mutual TLS (docs/cluster.md, "Mutual TLS on the
# link"), made by `gatewayd cert` (rcgen inside: no openssl needed).
#
#   deploy/cluster-certs.sh OUT IP [IP...]
#
# OUT/ca/ca.pem and OUT/ca/ca.key: the cluster CA, made on the first run
# and reused after (keep ca.key off the nodes). OUT/IP/node.pem and
# OUT/IP/node.key for each IP: a node whose advertised link address is
# IP:port (its IP SAN; EKUs serverAuth+clientAuth). Copy ca.pem, node.pem
# and node.key (mode 0600) to that node and set cluster.tls_ca,
# cluster.tls_cert and cluster.tls_key. Run it again for new nodes or to
# rotate (then SIGHUP each node, or wait cluster.tls_reload_ms).
# GATEWAYD: the binary (default: gatewayd on PATH); DAYS: node validity (365).
set -euo pipefail

if [ "$#" -lt 2 ]; then
    echo "usage: $0 OUT IP [IP...]" >&2
    exit 2
fi
gatewayd="${GATEWAYD:-gatewayd}"
out="$1"
shift
if [ ! -f "$out/ca/ca.key" ]; then
    "$gatewayd" cert ca --out "$out/ca"
fi
for ip in "$@"; do
    "$gatewayd" cert node --ip "$ip" --ca "$out/ca" --out "$out/$ip" --days "${DAYS:-365}"
done

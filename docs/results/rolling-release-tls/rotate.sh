#!/usr/bin/env bash
# During drain B of a rolling-release run: rotate the nodes' link certificate
# (new key, same CA and IP SAN) and SIGHUP every node of the run.
set -euo pipefail
LOG=$1; CERTS=$2; BIN=$3
until grep -q "drain B: out of the balancer" "$LOG" 2>/dev/null; do sleep 0.5; done
sleep 10
rm -rf "$CERTS/node-new"
"$BIN" cert node --ip 127.0.0.1 --ca "$CERTS/ca" --out "$CERTS/node-new" >/dev/null
old=$(sha256sum "$CERTS/node/node.pem" | cut -c1-16)
cp "$CERTS/node-new/node.key" "$CERTS/node/node.key.tmp" && mv "$CERTS/node/node.key.tmp" "$CERTS/node/node.key"
cp "$CERTS/node-new/node.pem" "$CERTS/node/node.pem.tmp" && mv "$CERTS/node/node.pem.tmp" "$CERTS/node/node.pem"
new=$(sha256sum "$CERTS/node/node.pem" | cut -c1-16)
pids=$(pgrep -f "gatewayd run .*rr-tls-certs" || true)
for p in $pids; do kill -HUP "$p"; done
echo "$(date -u +%T.%N) rotated node.pem $old -> $new, SIGHUP to: $pids"

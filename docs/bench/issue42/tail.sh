#!/usr/bin/env bash
# One probe at 5,000 sessions x 16/s (80,000 deliveries/s), 100 servers, PIN=1,
# three times with loopback receive processing where the sender is (rps 0)
# and three with it steered to CPU 1 (rps_cpus=2), alternating (root: it
# writes /sys/class/net/lo/queues/rx-0/rps_cpus, and sets it back to 0).
# BIN: a release build (gatewayd, loadgen, conventional-gateway); TAIL_OUT.
cd "$(dirname "$0")/../../.."
BIN=${BIN:-target/release}
RATE=${RATE:-16}
mkdir -p "${TAIL_OUT:-/tmp/tail}"
for rep in 1 2 3; do
  for rps in 0 2; do
    echo $rps > /sys/class/net/lo/queues/rx-0/rps_cpus
    o=${TAIL_OUT:-/tmp/tail}/r$RATE-rps$rps-$rep
    OUT=$o BIN_FROM=$BIN PIN=1 SERVERS=100 CAP_SESSIONS=5000 SECS=20 CAP_NODES=gatewayd \
      CAP_START_RATE=$RATE CAP_MAX_RATE=$RATE CAP_STEP_PCT=100000 \
      bash scripts/side-by-side.sh capacity > $o.log 2>&1
    f=$(ls $o/cap-gatewayd-*.txt | head -1)
    echo "== rps=$rps rep=$rep $(grep -E '^latency_ms' $f)"
    grep -E '^node_delivery_ms|^node_stage_p99_ms|^series_p99_over|^sessions_p99|^ksoftirqd|^node_cpu_secs|^received_deliveries |^client_cpu' $f
  done
done
echo 0 > /sys/class/net/lo/queues/rx-0/rps_cpus

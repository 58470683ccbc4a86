#!/usr/bin/env bash
# Latency while the keyspace grows: redis-benchmark SETs of new random keys (-r 100000000,
# 20-byte values) in batches, into a peerless Meridian and into Debian's redis-server, alternating the order per
# round (A B B A). Each batch prints the max and p99 latency redis-benchmark saw: a table that
# grows by moving every key at once stalls every client for that long. The last batch crosses
# 917,504 keys, where a table of 2^20 buckets is full.
# The server is pinned to core 0, redis-benchmark to core 1. Loopback only.
# Usage: benches/growth.sh [rounds=4] [batches="400000 400000 200000"]
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-4}
read -r -a batches <<<"${2:-400000 400000 200000}"
server_core=${SERVER_CORE:-0}
client_core=${CLIENT_CORE:-1}
port=7431

command -v redis-benchmark >/dev/null && command -v redis-server >/dev/null || {
  echo "needs redis-benchmark and redis-server (apt-get install -y redis-server redis-tools)" >&2; exit 1; }
cargo build --release -p meridian-server --bin meridian >/dev/null 2>&1 || cargo build --release -p meridian-server --bin meridian
bin=${MERIDIAN_BIN:-target/release/meridian}
work=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

wait_port() { for _ in $(seq 1 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "port $1 not up" >&2; exit 1; }

start() { # meridian|redis
  rm -rf "$work/data"; mkdir -p "$work/data"
  case $1 in
    meridian) taskset -c "$server_core" "$bin" server --port $port --dir "$work/data" --log-level error \
                --save "" --appendonly no & pid=$! ;;
    redis) taskset -c "$server_core" redis-server --port $port --dir "$work/data" --save "" --appendonly no \
             --daemonize no --logfile "" --loglevel warning >/dev/null & pid=$! ;;
  esac
  wait_port $port
}
stop() { kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=; }

one() { # meridian|redis -> "max1/p99_1 max2/p99_2 ..." (ms)
  start "$1"
  local out=() n line b=0
  for n in "${batches[@]}"; do
    # A prefix per batch: redis-benchmark seeds its generator with the time in seconds, so two
    # batches started within one second would otherwise overwrite the same keys.
    b=$((b + 1))
    line=$(taskset -c "$client_core" redis-benchmark -p $port -P 16 -c 50 -r 100000000 -n "$n" --csv -q \
        SET "g$b:__rand_int__" 01234567890123456789 2>/dev/null \
      | awk -F'","' 'NR==2 {gsub(/"/,"",$7); gsub(/"/,"",$8); print $8 "/" $7}')
    out+=("$line")
  done
  local keys; keys=$(redis-cli -p $port dbsize)
  stop
  echo "${out[*]} keys=$keys"
}

echo "# max/p99 SET latency (ms) per batch of ${batches[*]} new keys; server on core $server_core"
for r in $(seq 1 "$rounds"); do
  if (( r % 2 )); then order=(meridian redis); else order=(redis meridian); fi
  for s in "${order[@]}"; do
    printf 'round %d %-8s %s\n' "$r" "$s" "$(one "$s")"
  done
done

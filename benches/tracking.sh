#!/usr/bin/env bash
# What CLIENT TRACKING costs: SET and GET throughput at -P 16 with and without 50 client-side
# caching clients (issue 18: at most 10% less with them), Meridian and Debian's redis-server in
# the same run.
#
# The caching clients (tools/tracking-clients.py) use RESP3 and CLIENT TRACKING ON, read 200
# random keys each of the 10,000 the load uses, and read every key again that the server
# invalidates, so that the writes keep finding tracked keys. Each server is pinned to
# SERVER_CORE; redis-benchmark runs on CLIENT_CORE and the caching clients on TRACKING_CORES
# (default: CLIENT_CORE too, as a 2-CPU machine must); both servers run without persistence. Every row runs in rounds whose order alternates (A B B A ...); the
# medians are compared.
#
# Usage: benches/tracking.sh [rounds=4] [requests=400000]   (MERIDIAN_BIN=path: no build)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-4}
requests=${2:-400000}
mport=${MERIDIAN_PORT:-7395}
rport=${REDIS_PORT:-7396}
server_core=${SERVER_CORE:-0}
client_core=${CLIENT_CORE:-1}
tracking_cores=${TRACKING_CORES:-$client_core}
keys=10000

. benches/common.sh
bench_setup
start_meridian "$mport" "$work/m"
start_redis "$rport"

bench_once() { # port test -> ops/s
  taskset -c "$client_core" redis-benchmark -p "$1" -t "$2" -P 16 -c 50 -d 100 -r "$keys" -n "$requests" --csv -q 2>/dev/null \
    | awk -F'","' 'NR==2 {gsub(/"/,"",$2); print $2}'
}

# One measurement with the caching clients connected for its whole length.
tracked_once() { # port test -> ops/s
  taskset -c "$tracking_cores" python3 tools/tracking-clients.py "$1" --clients 50 --keys "$keys" \
    --keys-per-client 200 --seconds 600 >"$work/tc.$1.log" 2>&1 &
  local tc=$!
  sleep 2
  local v
  v=$(bench_once "$1" "$2")
  kill "$tc" 2>/dev/null || true; wait "$tc" 2>/dev/null || true
  echo "$v"
}

for p in "$mport" "$rport"; do bench_once "$p" set >/dev/null; done
echo "Meridian vs $(redis-server --version | awk '{print $3}'); $rounds rounds, $requests requests, -P 16 -c 50 -d 100 -r $keys; 50 caching clients"
printf '%-8s %12s %12s %9s %12s %12s %9s %10s\n' "test" "meridian" "+tracking" "cost" "redis" "+tracking" "cost" "M/R +trk"
for test in set get; do
  m=(); mt=(); r=(); rt=()
  for i in $(seq 1 "$rounds"); do
    if (( i % 4 == 1 || i % 4 == 0 )); then
      m+=("$(bench_once "$mport" "$test")"); mt+=("$(tracked_once "$mport" "$test")")
      r+=("$(bench_once "$rport" "$test")"); rt+=("$(tracked_once "$rport" "$test")")
    else
      rt+=("$(tracked_once "$rport" "$test")"); r+=("$(bench_once "$rport" "$test")")
      mt+=("$(tracked_once "$mport" "$test")"); m+=("$(bench_once "$mport" "$test")")
    fi
  done
  a=$(printf '%s\n' "${m[@]}" | median); at=$(printf '%s\n' "${mt[@]}" | median)
  b=$(printf '%s\n' "${r[@]}" | median); bt=$(printf '%s\n' "${rt[@]}" | median)
  printf '%-8s %12s %12s %8s%% %12s %12s %8s%% %10s\n' "${test^^}" "$a" "$at" \
    "$(awk -v x="$a" -v y="$at" 'BEGIN{printf "%.1f", 100*(1-y/x)}')" "$b" "$bt" \
    "$(awk -v x="$b" -v y="$bt" 'BEGIN{printf "%.1f", 100*(1-y/x)}')" \
    "$(awk -v x="$at" -v y="$bt" 'BEGIN{printf "%.2f", x/y}')"
  echo "  rounds: meridian ${m[*]} | +tracking ${mt[*]} | redis ${r[*]} | +tracking ${rt[*]}"
done
echo "caching clients, last run: meridian $(cat "$work/tc.$mport.log" 2>/dev/null); redis $(cat "$work/tc.$rport.log" 2>/dev/null)"

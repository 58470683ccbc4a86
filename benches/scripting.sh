#!/usr/bin/env bash
# Scripting throughput: EVALSHA of a one-key GET/SET script, Meridian vs Debian's
# redis-server in the same run.
#
# Each server is pinned to core 0 and redis-benchmark to core 1. Rounds alternate the order
# (A B B A ...), and the medians are compared. The script (loaded with SCRIPT LOAD into both)
# reads a key, writes it, and returns the old value: two redis.call per EVALSHA.
# Usage: benches/scripting.sh [rounds=4] [requests=200000] [pipeline=16]  (MERIDIAN_BIN=path: no build)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-4}
requests=${2:-200000}
pipe=${3:-16}
mport=${MERIDIAN_PORT:-7389}
rport=${REDIS_PORT:-7390}
server_core=${SERVER_CORE:-0}
client_core=${CLIENT_CORE:-1}

. benches/common.sh
bench_setup
start_meridian "$mport" "$work/m"
start_redis "$rport"

script="local v = redis.call('get', KEYS[1]) redis.call('set', KEYS[1], ARGV[1]) return v"
sha_m=$(redis-cli -p "$mport" script load "$script")
sha_r=$(redis-cli -p "$rport" script load "$script")
[ "$sha_m" = "$sha_r" ] || { echo "sha differs: $sha_m vs $sha_r" >&2; exit 1; }

bench_once() { # port -> ops/s
  taskset -c "$client_core" redis-benchmark -p "$1" -P "$pipe" -c 50 -r 100000 -n "$requests" --csv -q \
    evalsha "$sha_m" 1 key:__rand_int__ value-__rand_int__ 2>/dev/null \
    | awk -F'","' 'NR==2 {gsub(/"/,"",$2); print $2}'
}

echo "Meridian vs $(redis-server --version | awk '{print $3}'); $rounds rounds, $requests requests, -P $pipe -c 50 -r 100000"
echo "EVALSHA of: $script"
m=(); r=()
for i in $(seq 1 "$rounds"); do
  if (( i % 4 == 1 || i % 4 == 0 )); then
    m+=("$(bench_once "$mport")"); r+=("$(bench_once "$rport")")
  else
    r+=("$(bench_once "$rport")"); m+=("$(bench_once "$mport")")
  fi
  echo "round $i: meridian ${m[-1]} redis ${r[-1]}"
done
mm=$(printf '%s\n' "${m[@]}" | median); rm_=$(printf '%s\n' "${r[@]}" | median)
printf '%-22s %14s %14s %8s\n' "test" "meridian ops/s" "redis ops/s" "ratio"
printf '%-22s %14s %14s %8s\n' "EVALSHA get/set -P $pipe" "$mm" "$rm_" "$(awk -v a="$mm" -v b="$rm_" 'BEGIN{printf "%.2f", a/b}')"

#!/usr/bin/env bash
# Side-by-side throughput and memory: Meridian vs Debian's redis-server, in the same run.
#
# Each server is pinned to core 0 and redis-benchmark to core 1. Every row runs in rounds whose
# order alternates (A B B A ...), and the medians are compared; a difference under 10% is noise.
# Usage: benches/vs-redis.sh [rounds=4] [requests=200000]   (SKIP_THROUGHPUT=1: memory row only;
# MERIDIAN_BIN=path: no build)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-4}
requests=${2:-200000}
mport=${MERIDIAN_PORT:-7379}
rport=${REDIS_PORT:-7380}
keys_mem=${KEYS_MEM:-1000000}
server_core=${SERVER_CORE:-0}
client_core=${CLIENT_CORE:-1}

. benches/common.sh
bench_setup

bench_once() { # port test pipeline -> ops/s
  taskset -c "$client_core" redis-benchmark -p "$1" -t "$2" -P "$3" -c 50 -d 100 -r 1000000 -n "$requests" --csv -q 2>/dev/null \
    | awk -F'","' 'NR==2 {gsub(/"/,"",$2); print $2}'
}

start_meridian "$mport" "$work/m"; start_redis "$rport"
echo "Meridian $($bin --version 2>/dev/null | awk '{print $2}') vs $(redis-server --version | awk '{print $3}'); $rounds rounds, $requests requests, -c 50 -d 100 -r 1000000"
printf '%-14s %14s %14s %8s\n' "test" "meridian ops/s" "redis ops/s" "ratio"
tests="set get"; [ "${SKIP_THROUGHPUT:-0}" = 1 ] && tests=""
for test in $tests; do
  for pipe in 1 16; do
    m=(); r=()
    for i in $(seq 1 "$rounds"); do
      if (( i % 4 == 1 || i % 4 == 0 )); then
        m+=("$(bench_once "$mport" "$test" "$pipe")"); r+=("$(bench_once "$rport" "$test" "$pipe")")
      else
        r+=("$(bench_once "$rport" "$test" "$pipe")"); m+=("$(bench_once "$mport" "$test" "$pipe")")
      fi
    done
    mm=$(printf '%s\n' "${m[@]}" | median); rm_=$(printf '%s\n' "${r[@]}" | median)
    printf '%-14s %14s %14s %8s\n' "${test^^} -P $pipe" "$mm" "$rm_" "$(awk -v a="$mm" -v b="$rm_" 'BEGIN{printf "%.2f", a/b}')"
  done
done

# Memory: RSS growth per key after loading the same keys with 100-byte values into each.
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
python3 - "$keys_mem" > "$work/load.resp" <<'PY'
import sys
n = int(sys.argv[1]); v = b"x" * 100
out = sys.stdout.buffer
for i in range(n):
    k = b"key:%010d" % i
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$100\r\n%s\r\n" % (len(k), k, v))
PY
# Fresh processes: tables and allocator caches left by the throughput rows would hide growth.
kill "$mpid" "$rpid"; wait "$mpid" "$rpid" 2>/dev/null || true
start_meridian "$mport" "$work/m"; start_redis "$rport"
m0=$(rss_kb "$mpid"); r0=$(rss_kb "$rpid")
redis-cli -p "$mport" --pipe < "$work/load.resp" >/dev/null
redis-cli -p "$rport" --pipe < "$work/load.resp" >/dev/null
sleep 1
m1=$(rss_kb "$mpid"); r1=$(rss_kb "$rpid")
mk=$(redis-cli -p "$mport" dbsize); rk=$(redis-cli -p "$rport" dbsize)
awk -v m0="$m0" -v m1="$m1" -v r0="$r0" -v r1="$r1" -v n="$keys_mem" -v mk="$mk" -v rk="$rk" 'BEGIN {
  mb = (m1 - m0) * 1024 / n; rb = (r1 - r0) * 1024 / n;
  printf "%-14s %14.1f %14.1f %8.2f   (bytes of RSS per key, %d / %d keys loaded)\n", "MEM per key", mb, rb, mb / rb, mk, rk }'

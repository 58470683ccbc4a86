#!/usr/bin/env bash
# Streams: memory per entry and XADD/XRANGE throughput, Meridian vs Debian's redis-server in
# the same run.
#
# Both servers are pinned to core SERVER_CORE, both without persistence (Meridian
# `--appendonly no --save ""`; its RSS still includes its in-memory op log, bounded by
# backlog_bytes_max, as in production); redis-cli/redis-benchmark run on
# CLIENT_CORE. Every figure is taken in ROUNDS rounds whose order alternates (A B B A ...), and
# the medians are compared (ratio Meridian / Redis).
#
# - memory: one stream of N entries of 2 small fields (`XADD s * name <i> value v-<i>`), loaded
#   with `redis-cli --pipe` into a fresh server, then MEMORY PURGE (both allocators return the
#   dirty pages the input buffers left): growth per entry of `used_memory` (jemalloc's
#   allocated bytes, in both) and of RSS.
# - XADD: redis-benchmark `XADD bench * name n value v` at -P PIPE -c 50 on a stream emptied
#   first (one stream, as a log is used).
# - XRANGE: `XRANGE r - + COUNT 100` at -P PIPE -c 50 on a stream of 1,000 such entries.
#
# Usage: benches/streams.sh [rounds=4]
# Env:   MEMORY_ONLY=1 (skip throughput) N=1000000 REQUESTS=200000 PIPE=16 SERVER_CORE=0 CLIENT_CORE=1
#        MERIDIAN_PORT=7391 REDIS_PORT=7392 MERIDIAN_BIN=path (skips the release build)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-4}
n=${N:-1000000}
requests=${REQUESTS:-200000}
pipe=${PIPE:-16}
server_core=${SERVER_CORE:-0}
client_core=${CLIENT_CORE:-1}
mport=${MERIDIAN_PORT:-7391}
rport=${REDIS_PORT:-7392}

command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || {
  echo "needs redis-server, redis-cli and redis-benchmark (apt-get install -y redis-server redis-tools)" >&2; exit 1; }
bin=${MERIDIAN_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release -p meridian-server --bin meridian >/dev/null 2>&1 || cargo build --release -p meridian-server --bin meridian
  bin=target/release/meridian
fi
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

wait_port() { for _ in $(seq 1 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "port $1 not up" >&2; exit 1; }
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.1f\n", (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }

start_meridian() {
  rm -rf "$work/m"
  taskset -c "$server_core" "$bin" server --port "$mport" --dir "$work/m" --appendonly no --save "" --log-level warn &
  mpid=$!; pids+=("$mpid"); wait_port "$mport"
}
start_redis() {
  taskset -c "$server_core" redis-server --port "$rport" --save "" --appendonly no --dir "$work" \
    --daemonize no --loglevel warning >"$work/redis.log" 2>&1 &
  rpid=$!; pids+=("$rpid"); wait_port "$rport"
}
stop_pid() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# The memory load: N XADDs with auto IDs.
python3 - "$n" > "$work/load.resp" <<'PY'
import sys
n = int(sys.argv[1])
out = sys.stdout.buffer
def bulk(b): return b"$%d\r\n%s\r\n" % (len(b), b)
for i in range(n):
    args = [b"XADD", b"s", b"*", b"name", str(i).encode(), b"value", b"v-%d" % i]
    out.write(b"*%d\r\n" % len(args) + b"".join(bulk(a) for a in args))
PY

# mem_once meridian|redis -> "used_memory RSS" bytes per entry
used_memory() { redis-cli -p "$1" INFO memory | tr -d '\r' | awk -F: '$1 == "used_memory" {print $2}'; }
mem_once() {
  local pid port
  if [ "$1" = meridian ]; then start_meridian; pid=$mpid; port=$mport; else start_redis; pid=$rpid; port=$rport; fi
  local rss0 rss1 u0 u1 len
  rss0=$(rss_kb "$pid"); u0=$(used_memory "$port")
  taskset -c "$client_core" redis-cli -p "$port" --pipe < "$work/load.resp" >/dev/null
  sleep 1
  redis-cli -p "$port" MEMORY PURGE >/dev/null
  sleep 1
  rss1=$(rss_kb "$pid"); u1=$(used_memory "$port")
  len=$(redis-cli -p "$port" XLEN s)
  stop_pid "$pid"
  [ "$len" = "$n" ] || { echo "$1 holds $len entries, not $n" >&2; exit 1; }
  awk -v u0="$u0" -v u1="$u1" -v r0="$rss0" -v r1="$rss1" -v n="$n" \
    'BEGIN{printf "%.1f %.1f\n", (u1 - u0) / n, (r1 - r0) * 1024 / n}'
}

echo "Streams: Meridian vs redis-server $(redis-server --version | awk '{print $3}' | cut -d= -f2); $rounds rounds (A B B A ...)"
echo "memory: $n entries of 2 fields (XADD s * name <i> value v-<i>), growth per entry after MEMORY PURGE"
mm=(); mr=()
for i in $(seq 1 "$rounds"); do
  if (( i % 4 == 1 || i % 4 == 0 )); then
    mm+=("$(mem_once meridian)"); mr+=("$(mem_once redis)")
  else
    mr+=("$(mem_once redis)"); mm+=("$(mem_once meridian)")
  fi
  echo "  round $i: used_memory/RSS B/entry: meridian ${mm[-1]}, redis ${mr[-1]}"
done
col() { local k=$1; shift; printf '%s\n' "$@" | awk -v k="$k" '{print $k}' | median; }
mem_m=$(col 1 "${mm[@]}"); mem_r=$(col 1 "${mr[@]}")
rss_m=$(col 2 "${mm[@]}"); rss_r=$(col 2 "${mr[@]}")
[ "${MEMORY_ONLY:-0}" = 1 ] && {
  printf '%-28s %14s %14s %8s\n' "median" "meridian" "redis" "ratio"
  printf '%-28s %14s %14s %8s\n' "used_memory B/entry" "$mem_m" "$mem_r" "$(ratio "$mem_m" "$mem_r")"
  printf '%-28s %14s %14s %8s\n' "RSS B/entry" "$rss_m" "$rss_r" "$(ratio "$rss_m" "$rss_r")"
  exit 0
}

# Throughput: both servers up side by side.
start_meridian; start_redis
for port in "$mport" "$rport"; do
  for i in $(seq 1 1000); do printf 'XADD r * name %d value v-%d\n' "$i" "$i"; done | redis-cli -p "$port" >/dev/null
  [ "$(redis-cli -p "$port" XLEN r)" = 1000 ] || { echo "preload failed on $port" >&2; exit 1; }
done

bench_once() { # port, command... -> ops/s
  local port=$1; shift
  taskset -c "$client_core" redis-benchmark -p "$port" -P "$pipe" -c 50 -n "$requests" --csv -q "$@" 2>/dev/null \
    | awk -F'","' 'NR==2 {gsub(/"/,"",$2); print $2}'
}
xadd_once() { redis-cli -p "$1" DEL bench >/dev/null; bench_once "$1" XADD bench '*' name n value v; }
xrange_once() { bench_once "$1" XRANGE r - + COUNT 100; }

echo "throughput: redis-benchmark -P $pipe -c 50 -n $requests"
xm=(); xr=(); rm_=(); rr=()
for i in $(seq 1 "$rounds"); do
  if (( i % 4 == 1 || i % 4 == 0 )); then
    xm+=("$(xadd_once "$mport")"); xr+=("$(xadd_once "$rport")")
    rm_+=("$(xrange_once "$mport")"); rr+=("$(xrange_once "$rport")")
  else
    xr+=("$(xadd_once "$rport")"); xm+=("$(xadd_once "$mport")")
    rr+=("$(xrange_once "$rport")"); rm_+=("$(xrange_once "$mport")")
  fi
  echo "  round $i: XADD meridian ${xm[-1]} redis ${xr[-1]}; XRANGE 100 meridian ${rm_[-1]} redis ${rr[-1]}"
done
x_m=$(printf '%s\n' "${xm[@]}" | median); x_r=$(printf '%s\n' "${xr[@]}" | median)
r_m=$(printf '%s\n' "${rm_[@]}" | median); r_r=$(printf '%s\n' "${rr[@]}" | median)

printf '%-28s %14s %14s %8s\n' "median" "meridian" "redis" "ratio"
printf '%-28s %14s %14s %8s\n' "used_memory B/entry" "$mem_m" "$mem_r" "$(ratio "$mem_m" "$mem_r")"
printf '%-28s %14s %14s %8s\n' "RSS B/entry" "$rss_m" "$rss_r" "$(ratio "$rss_m" "$rss_r")"
printf '%-28s %14s %14s %8s\n' "XADD -P $pipe ops/s" "$x_m" "$x_r" "$(ratio "$x_m" "$x_r")"
printf '%-28s %14s %14s %8s\n' "XRANGE 100 -P $pipe ops/s" "$r_m" "$r_r" "$(ratio "$r_m" "$r_r")"

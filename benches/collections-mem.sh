#!/usr/bin/env bash
# Memory per element of one large collection: Meridian vs Debian's redis-server.
#
# Each row generates a RESP file that builds one collection of N elements (commands of BATCH
# elements each), loads it with `redis-cli --pipe` into a fresh Meridian and a fresh
# redis-server (both pinned to core SERVER_CORE, no persistence), and prints the growth of RSS
# per element for both and the ratio Meridian / Redis. Meridian's RSS includes its op log
# (bounded by backlog_bytes_max, 16 MiB by default), as it would in production.
#
# Usage: benches/collections-mem.sh [row ...]      rows: set hashes zset list (default: all)
# Env:   N=1000000  BATCH=1000  SERVER_CORE=0  MERIDIAN_PORT=7381  REDIS_PORT=7382
#        SET_MEMBER='m:{i:08d}'   (Python format of the i-th member)
#
# Adding a row (hashes, zsets, lists...): write `row_<name>` that calls
#   measure "<label>" <COMMAND> <key> '<element args, Python format of i>' "<count command>"
# (e.g. measure "HASH (HSET)" HSET h 'f{i} v{i}' "HLEN h") and add <name> to `all_rows`.
set -euo pipefail
cd "$(dirname "$0")/.."

n=${N:-1000000}
batch=${BATCH:-1000}
server_core=${SERVER_CORE:-0}
mport=${MERIDIAN_PORT:-7381}
rport=${REDIS_PORT:-7382}
all_rows=(set hashes zset list)

command -v redis-server >/dev/null && command -v redis-cli >/dev/null || {
  echo "needs redis-server and redis-cli (apt-get install -y redis-server redis-tools)" >&2; exit 1; }
cargo build --release -p meridian-server --bin meridian >/dev/null 2>&1 || cargo build --release -p meridian-server --bin meridian
bin=target/release/meridian
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

wait_port() { for _ in $(seq 1 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "port $1 not up" >&2; exit 1; }
rss_kb() { awk '/VmRSS/ {print $2}' "/proc/$1/status"; }

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
stop_both() { kill "$mpid" "$rpid" 2>/dev/null || true; wait "$mpid" "$rpid" 2>/dev/null || true; }

# gen COMMAND KEY 'ELEMENT FORMAT' > file: N elements in commands of BATCH elements each.
# KEY may itself be a Python format of the batch number {b} (many keys of BATCH elements).
gen() {
  python3 - "$1" "$2" "$3" "$n" "$batch" <<'PY'
import sys
cmd, keyfmt, fmt, n, batch = sys.argv[1].encode(), sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
out = sys.stdout.buffer
def bulk(b): return b"$%d\r\n%s\r\n" % (len(b), b)
for start in range(0, n, batch):
    args = []
    for i in range(start, min(n, start + batch)):
        args.extend(a.encode() for a in fmt.format(i=i).split(" "))
    key = keyfmt.format(b=start // batch).encode()
    out.write(b"*%d\r\n" % (2 + len(args)) + bulk(cmd) + bulk(key) + b"".join(bulk(a) for a in args))
PY
}

# measure LABEL COMMAND KEY 'ELEMENT FORMAT' "COUNT COMMAND": one row.
measure() {
  local label=$1 cmd=$2 key=$3 fmt=$4 count_cmd=$5
  gen "$cmd" "$key" "$fmt" > "$work/load.resp"
  start_meridian; start_redis
  local m0 r0 m1 r1 mc rc
  m0=$(rss_kb "$mpid"); r0=$(rss_kb "$rpid")
  redis-cli -p "$mport" --pipe < "$work/load.resp" >/dev/null
  redis-cli -p "$rport" --pipe < "$work/load.resp" >/dev/null
  sleep 1
  m1=$(rss_kb "$mpid"); r1=$(rss_kb "$rpid")
  # shellcheck disable=SC2086
  mc=$(redis-cli -p "$mport" $count_cmd); rc=$(redis-cli -p "$rport" $count_cmd)
  stop_both
  awk -v l="$label" -v m0="$m0" -v m1="$m1" -v r0="$r0" -v r1="$r1" -v n="$n" -v mc="$mc" -v rc="$rc" 'BEGIN {
    mb = (m1 - m0) * 1024 / n; rb = (r1 - r0) * 1024 / n;
    printf "%-16s %12.1f %12.1f %8.2f   (%d / %d elements; RSS %d -> %d kB / %d -> %d kB)\n",
      l, mb, rb, mb / rb, mc, rc, m0, m1, r0, r1 }'
}

row_set() { measure "SET (SADD)" SADD s "${SET_MEMBER:-m:{i:08d\}}" "SCARD s"; }
# The issue's shape: N/100 hashes of 100 fields (Redis keeps them as listpacks).
row_hashes() { BATCH=100 measure_batched "HASH x100 (HSET)" HSET 'h:{b}' 'field:{i:03d} val-{i:06d}' "DBSIZE"; }
row_zset() { measure "ZSET (ZADD)" ZADD z '{i} m:{i:08d}' "ZCARD z"; }
row_list() { measure "LIST (RPUSH)" RPUSH l 'v{i:07d}' "LLEN l"; }

# measure with another batch size (one key per batch when KEY has {b}).
measure_batched() { local saved=$batch; batch=$BATCH; measure "$@"; batch=$saved; }

rows=("$@")
[ ${#rows[@]} -eq 0 ] && rows=("${all_rows[@]}")
printf '%-16s %12s %12s %8s\n' "B/element" "meridian" "redis" "ratio"
for r in "${rows[@]}"; do "row_$r"; done

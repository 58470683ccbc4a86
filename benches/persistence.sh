#!/usr/bin/env bash
# Durability cost and restart time: Meridian vs Debian's redis-server, in the same run.
#  1. redis-benchmark SET -P 16 with appendfsync everysec on both;
#  2. the same with appendfsync always (Meridian: group commit; Redis: one fsync per event loop);
#  3. restart time with 1,000,000 keys of 100-byte values, from process start to the first PING
#     answered PONG with DBSIZE showing every key: Meridian from its log only and from a
#     snapshot (after BGREWRITEAOF), Redis from its AOF only and after BGREWRITEAOF (RDB preamble).
# Each server is pinned to core 0; this script, redis-benchmark, the loader and the pollers run
# on core 1. Rows alternate the order of the two servers (A B B A ...) and compare medians; a
# difference under 10% is noise. Sections 1 and 2 start both servers on fresh data directories
# for every run (1,000,000 requests by default, so each run spans several everysec periods).
# Both run with `save ""` and auto rewrite off, so only the append-only log is written; data
# lives in a fresh directory under /tmp (fsyncs there must reach a real disk).
# Usage: benches/persistence.sh [rounds=4] [requests=1000000]   (KEYS_RESTART=1000000)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-4}
requests=${2:-1000000}
keys_restart=${KEYS_RESTART:-1000000}
server_core=${SERVER_CORE:-0}
client_core=${CLIENT_CORE:-1}

command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || {
  echo "needs redis-server and redis-benchmark (apt-get install -y redis-server redis-tools)" >&2; exit 1; }
cargo build --release -p meridian-server --bin meridian >/dev/null 2>&1 || cargo build --release -p meridian-server --bin meridian
bin=$PWD/target/release/meridian
# Everything this script starts runs on the client core unless pinned to the server core.
taskset -cp "$client_core" $$ >/dev/null

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
mport=${MERIDIAN_PORT:-$(free_port)}
rport=${REDIS_PORT:-$(free_port)}
[ "$mport" != "$rport" ] || rport=$(free_port)
work=$(mktemp -d /tmp/persistence-bench.XXXXXX)
mpid=""; rpid=""
cleanup() {
  for p in $mpid $rpid; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

wait_port() { for _ in $(seq 1 300); do redis-cli -p "$1" ping 2>/dev/null | grep -q PONG && return 0; sleep 0.1; done; echo "port $1 not up" >&2; exit 1; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.0f\n", (a[NR/2]+a[NR/2+1])/2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }
info_field() { redis-cli -p "$1" info persistence | tr -d '\r' | awk -F: -v k="$2" '$1==k {print $2}'; }

# start_meridian DIR FSYNC / start_redis DIR FSYNC: no wait (section 3 times the start).
start_meridian() {
  taskset -c "$server_core" "$bin" server --port "$mport" --dir "$1" --appendonly yes --appendfsync "$2" \
    --save "" --auto-aof-rewrite-percentage 0 --log-level warn >>"$work/meridian.log" 2>&1 &
  mpid=$!
}
start_redis() {
  taskset -c "$server_core" redis-server --port "$rport" --dir "$1" --appendonly yes --appendfsync "$2" \
    --save "" --auto-aof-rewrite-percentage 0 --daemonize no --loglevel warning >>"$work/redis.log" 2>&1 &
  rpid=$!
}
# SIGTERM for Meridian (it writes and fsyncs what is pending); SHUTDOWN NOSAVE for Redis, so
# that it keeps only its AOF.
stop_meridian() { kill -TERM "$mpid"; wait "$mpid" 2>/dev/null || true; mpid=""; }
stop_redis() { redis-cli -p "$rport" shutdown nosave >/dev/null 2>&1 || kill "$rpid"; wait "$rpid" 2>/dev/null || true; rpid=""; }

bench_once() { # port -> ops/s
  redis-benchmark -p "$1" -t set -P 16 -c 50 -d 100 -r 100000 -n "$requests" --csv -q 2>/dev/null \
    | awk -F'","' 'NR==2 {gsub(/"/,"",$2); print $2}'
}

# One run on fresh processes and data directories; sets `ops` (and `fsyncs` for Meridian).
run_meridian() { # fsync
  local d; d=$(mktemp -d "$work/m.XXXX")
  start_meridian "$d" "$1"; wait_port "$mport"
  ops=$(bench_once "$mport"); fsyncs=$(info_field "$mport" aof_fsyncs)
  stop_meridian; rm -rf "$d"
}
run_redis() { # fsync
  local d; d=$(mktemp -d "$work/r.XXXX")
  start_redis "$d" "$1"; wait_port "$rport"
  ops=$(bench_once "$rport")
  stop_redis; rm -rf "$d"
}

echo "Meridian $($bin --version 2>/dev/null | awk '{print $2}') ($(git rev-parse --short HEAD 2>/dev/null)) vs $(redis-server --version | awk '{print $3}'); $rounds rounds A B B A; data in $work ($(df -T "$work" | awk 'NR==2 {print $2}'))"
echo "== 1-2. SET throughput with the append-only log ($requests requests, -P 16 -c 50 -d 100 -r 100000)"
printf '%-18s %14s %14s %8s   %s\n' "appendfsync" "meridian ops/s" "redis ops/s" "ratio" "per round (meridian / redis; meridian fsyncs)"
for fsync in everysec always; do
  m=(); r=(); f=()
  for i in $(seq 1 "$rounds"); do
    if (( i % 4 == 1 || i % 4 == 0 )); then
      run_meridian "$fsync"; m+=("$ops"); f+=("$fsyncs"); run_redis "$fsync"; r+=("$ops")
    else
      run_redis "$fsync"; r+=("$ops"); run_meridian "$fsync"; m+=("$ops"); f+=("$fsyncs")
    fi
  done
  mm=$(printf '%s\n' "${m[@]}" | median); rm_=$(printf '%s\n' "${r[@]}" | median)
  printf '%-18s %14s %14s %8s   %s / %s; %s\n' "SET -P 16 $fsync" "$mm" "$rm_" "$(ratio "$mm" "$rm_")" \
    "${m[*]}" "${r[*]}" "${f[*]}"
done

echo "== 3. restart with $keys_restart keys of 100 bytes (start to PONG and full DBSIZE; appendfsync everysec)"
python3 - "$keys_restart" > "$work/load.resp" <<'PY'
import sys
n = int(sys.argv[1]); v = b"x" * 100
out = sys.stdout.buffer
for i in range(n):
    k = b"key:%010d" % i
    out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$100\r\n%s\r\n" % (len(k), k, v))
PY
mdir="$work/m-restart"; rdir="$work/r-restart"; mkdir -p "$mdir" "$rdir"
start_meridian "$mdir" everysec; start_redis "$rdir" everysec; wait_port "$mport"; wait_port "$rport"
redis-cli -p "$mport" --pipe < "$work/load.resp" >/dev/null
redis-cli -p "$rport" --pipe < "$work/load.resp" >/dev/null
mkeys=$(redis-cli -p "$mport" dbsize); rkeys=$(redis-cli -p "$rport" dbsize)
[ "$mkeys" = "$keys_restart" ] && [ "$rkeys" = "$keys_restart" ] || {
  echo "loaded $mkeys keys into Meridian and $rkeys into Redis, expected $keys_restart" >&2; exit 1; }
stop_meridian; stop_redis
rm -f "$work/load.resp"

# ms from process start until PING answers PONG and DBSIZE shows every key. Redis answers
# -LOADING while it loads; Meridian accepts connections and answers once recovered.
ready_ms() { # port t0_ns
  for _ in $(seq 1 20000); do
    if [ "$(redis-cli -p "$1" ping 2>/dev/null)" = PONG ] && [ "$(redis-cli -p "$1" dbsize 2>/dev/null)" = "$keys_restart" ]; then
      echo $(( ($(date +%s%N) - $2) / 1000000 )); return
    fi
    sleep 0.005
  done
  echo "timeout" >&2; exit 1
}
restart_meridian() { # sets ms, and load_ms, load_records, load_keys as Meridian reports them
  local t0; t0=$(date +%s%N); start_meridian "$mdir" everysec; ms=$(ready_ms "$mport" "$t0")
  load_ms=$(info_field "$mport" aof_load_time_ms); load_records=$(info_field "$mport" aof_load_records)
  load_keys=$(info_field "$mport" rdb_last_load_keys_loaded); stop_meridian
}
restart_redis() {
  local t0; t0=$(date +%s%N); start_redis "$rdir" everysec; ms=$(ready_ms "$rport" "$t0"); stop_redis
}
restart_rounds() { # label -> sets mmed, rmed; prints per-round figures
  local m=() r=() l=()
  for i in $(seq 1 "$rounds"); do
    if (( i % 4 == 1 || i % 4 == 0 )); then
      restart_meridian; m+=("$ms"); l+=("$load_ms"); restart_redis; r+=("$ms")
    else
      restart_redis; r+=("$ms"); restart_meridian; m+=("$ms"); l+=("$load_ms")
    fi
  done
  mmed=$(printf '%s\n' "${m[@]}" | median); rmed=$(printf '%s\n' "${r[@]}" | median)
  printf '  %-34s meridian %s ms (aof_load_time_ms %s; %s keys from a snapshot, %s log records) / redis %s ms\n' \
    "$1 per round:" "${m[*]}" "${l[*]}" "$load_keys" "$load_records" "${r[*]}"
}
disk_mb() { du -sb "$1" | awk '{printf "%.1f", $1 / 1e6}'; }

echo "on disk: Meridian log $(disk_mb "$mdir") MB, Redis AOF $(disk_mb "$rdir") MB"
restart_rounds "log only / AOF only"
m_log=$mmed; r_aof=$rmed

# Snapshot variant: BGREWRITEAOF on each, wait for it to finish, stop the same way.
start_meridian "$mdir" everysec; start_redis "$rdir" everysec; wait_port "$mport"; wait_port "$rport"
for port in "$mport" "$rport"; do
  redis-cli -p "$port" bgrewriteaof >/dev/null
  for _ in $(seq 1 1200); do
    [ "$(info_field "$port" aof_rewrite_in_progress)" = 0 ] && [ "$(info_field "$port" aof_rewrite_scheduled)" = 0 ] && break
    sleep 0.1
  done
  [ "$(info_field "$port" aof_last_bgrewrite_status)" = ok ] || { echo "BGREWRITEAOF failed on port $port" >&2; exit 1; }
done
stop_meridian; stop_redis
echo "on disk after BGREWRITEAOF: Meridian $(disk_mb "$mdir") MB ($(ls "$mdir/shard-0" | tr '\n' ' ')), Redis $(disk_mb "$rdir") MB"
restart_rounds "snapshot / after BGREWRITEAOF"
m_snap=$mmed; r_rw=$rmed

printf '%-40s %12s %12s %8s\n' "restart, $keys_restart keys" "meridian ms" "redis ms" "ratio"
printf '%-40s %12s %12s %8s\n' "Meridian log only vs Redis AOF only" "$m_log" "$r_aof" "$(ratio "$m_log" "$r_aof")"
printf '%-40s %12s %12s %8s\n' "Meridian snapshot vs Redis AOF only" "$m_snap" "$r_aof" "$(ratio "$m_snap" "$r_aof")"
printf '%-40s %12s %12s %8s\n' "both after BGREWRITEAOF" "$m_snap" "$r_rw" "$(ratio "$m_snap" "$r_rw")"

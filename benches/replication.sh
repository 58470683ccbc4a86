#!/usr/bin/env bash
# Replication cost and lag, in one run (issue 4's performance rows):
#  1. redis-benchmark SET and INCR at -P 16 on site A with no peer, and on site A while site B
#     replicates (alternating A-alone / A-with-B rounds, medians): the ratio, and how long after
#     the load stops B has applied everything;
#  2. replication lag p50/p99 from the syncer's own measure at about half of A's write rate;
#  3. bytes on the wire per 100-byte SET, uncompressed and with lz4.
# Site A is pinned to core 0; B and redis-benchmark to core 1. Loopback only.
# Usage: benches/replication.sh [rounds=4] [requests=200000]
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-4}
requests=${2:-200000}
a_core=${A_CORE:-0}
other_core=${OTHER_CORE:-1}
port_alone=7401; port_a=7411; port_b=7412; sync_a=7511; sync_b=7512

command -v redis-benchmark >/dev/null && command -v redis-cli >/dev/null || {
  echo "needs redis-benchmark and redis-cli (apt-get install -y redis-tools)" >&2; exit 1; }
cargo build --release -p meridian-server --bin meridian >/dev/null 2>&1 || cargo build --release -p meridian-server --bin meridian
bin=target/release/meridian
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

wait_port() { for _ in $(seq 1 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "port $1 not up" >&2; exit 1; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.0f\n", (a[NR/2]+a[NR/2+1])/2}'; }
info_field() { redis-cli -p "$1" info crdt | tr -d '\r' | awk -F: -v k="$2" '$1==k {print $2}'; }
peer_field() { redis-cli -p "$1" info crdt | tr -d '\r' | awk -v k="crdt_peer_$2:" 'index($0, k)==1 {sub(/^[^:]*:/, ""); print}' | tr ',' '\n' | awk -F= -v f="$3" '$1==f {print $2}'; }

start_pair() { # compression
  taskset -c "$a_core" "$bin" server --site a --port $port_a --sync-port $sync_a --peer b=127.0.0.1:$sync_b \
    --sync-compression "$1" --dir "$work/a" --log-level warn & pids+=("$!")
  taskset -c "$other_core" "$bin" server --site b --port $port_b --sync-port $sync_b --peer a=127.0.0.1:$sync_a \
    --sync-compression "$1" --dir "$work/b" --log-level warn & pids+=("$!")
  wait_port $port_a; wait_port $port_b
  for _ in $(seq 1 100); do [ "$(peer_field $port_a b out_link)" = up ] && [ "$(peer_field $port_b a in_link)" = up ] && return 0; sleep 0.1; done
  echo "link a->b not up" >&2; exit 1
}
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }

bench() { # port test -> ops/s
  taskset -c "$other_core" redis-benchmark -p "$1" -t "$2" -P 16 -c 50 -d 100 -r 1000000 -n "$requests" --csv -q 2>/dev/null \
    | awk -F'","' 'NR==2 {gsub(/"/,"",$2); print $2}'
}

# ms until B has applied everything A originated (polls every 10 ms, up to 30 s).
catch_up_ms() {
  local target start now
  target=$(info_field $port_a crdt_seq); start=$(date +%s%N)
  for _ in $(seq 1 3000); do
    [ "$(peer_field $port_b a in_applied_seq)" -ge "$target" ] && { now=$(date +%s%N); echo $(( (now - start) / 1000000 )); return; }
    sleep 0.01
  done
  echo "timeout"
}

echo "== 1. throughput on A with and without a replicating peer ($rounds rounds ABBA, $requests requests, -P 16 -c 50 -d 100)"
taskset -c "$a_core" "$bin" server --site solo --port $port_alone --dir "$work/solo" --log-level warn & pids+=("$!")
wait_port $port_alone
solo_pid=${pids[-1]}
start_pair "${COMPRESSION:-lz4}"
echo "compression: ${COMPRESSION:-lz4}"
printf '%-6s %16s %16s %7s %18s\n' test "A alone ops/s" "A with B ops/s" ratio "B caught up (ms)"
for test in set incr; do
  alone=(); paired=(); lags=()
  for i in $(seq 1 "$rounds"); do
    if (( i % 4 == 1 || i % 4 == 0 )); then
      alone+=("$(bench $port_alone $test)"); paired+=("$(bench $port_a $test)"); lags+=("$(catch_up_ms)")
    else
      paired+=("$(bench $port_a $test)"); lags+=("$(catch_up_ms)"); alone+=("$(bench $port_alone $test)")
    fi
  done
  ma=$(printf '%s\n' "${alone[@]}" | median); mp=$(printf '%s\n' "${paired[@]}" | median)
  printf '%-6s %16s %16s %7s %18s\n' "$test" "$ma" "$mp" "$(awk -v a="$mp" -v b="$ma" 'BEGIN{printf "%.2f", a/b}')" "$(printf '%s ' "${lags[@]}")"
done
stop_all

echo "== 2. replication lag at about half of A's write rate (syncer's own measure, from INFO crdt)"
start_pair lz4
# About half of A's maximum: fewer clients and a shorter pipeline (HALF_RATE_ARGS); the
# achieved rate is printed beside section 1's maximum so the claim can be checked.
rate=$(taskset -c "$other_core" redis-benchmark -p $port_a -t set ${HALF_RATE_ARGS:--P 8 -c 10} -d 100 -r 1000000 -n "$requests" --csv -q 2>/dev/null \
  | awk -F'","' 'NR==2 {gsub(/"/,"",$2); print $2}')
sleep 1
echo "rate ${rate} ops/s; lag p50 $(peer_field $port_a b lag_p50_ms) ms, p99 $(peer_field $port_a b lag_p99_ms) ms (last 1024 acked batches)"
stop_all

echo "== 3. bytes on the wire per 100-byte SET (N = 100000, redis-benchmark -r 1000000 -d 100)"
for comp in none lz4 zstd; do
  start_pair $comp
  before=$(peer_field $port_a b out_bytes); before_raw=$(peer_field $port_a b out_bytes_raw)
  taskset -c "$other_core" redis-benchmark -p $port_a -t set -P 16 -c 50 -d 100 -r 1000000 -n 100000 -q >/dev/null 2>&1
  catch_up_ms >/dev/null
  after=$(peer_field $port_a b out_bytes); after_raw=$(peer_field $port_a b out_bytes_raw)
  awk -v w="$((after - before))" -v r="$((after_raw - before_raw))" -v c="$comp" \
    'BEGIN {printf "%-5s %7.1f bytes/SET on the wire (%7.1f before compression)\n", c, w/100000, r/100000}'
  stop_all
done
kill "$solo_pid" 2>/dev/null || true

#!/usr/bin/env bash
# Collection commands under redis-benchmark -P 16: Meridian vs Debian's redis-server, same run.
#
# Servers pinned to core 0, redis-benchmark to core 1; rounds alternate the order (A B B A);
# medians and the ratio Meridian / Redis per test. A difference under 10% is noise.
# Usage: benches/collections-throughput.sh [rounds=4] [requests=200000]
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-4}
requests=${2:-200000}
mport=${MERIDIAN_PORT:-7383}
rport=${REDIS_PORT:-7384}
tests=${TESTS:-sadd hset zadd lpush lpop lrange_100}

command -v redis-server >/dev/null && command -v redis-benchmark >/dev/null || {
  echo "needs redis-server and redis-benchmark (apt-get install -y redis-server redis-tools)" >&2; exit 1; }
cargo build --release -p meridian-server --bin meridian >/dev/null 2>&1 || cargo build --release -p meridian-server --bin meridian
bin=target/release/meridian
work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
wait_port() { for _ in $(seq 1 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done; echo "port $1 not up" >&2; exit 1; }

taskset -c 0 "$bin" server --port "$mport" --dir "$work/m" --appendonly no --save "" --log-level warn & pids+=("$!"); wait_port "$mport"
taskset -c 0 redis-server --port "$rport" --save "" --appendonly no --dir "$work" --daemonize no --loglevel warning \
  >"$work/redis.log" 2>&1 & pids+=("$!"); wait_port "$rport"

median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.0f\n", (a[NR/2]+a[NR/2+1])/2}'; }
once() { # port test -> ops/s
  taskset -c 1 redis-benchmark -p "$1" -t "$2" -P 16 -c 50 -r 100000 -n "$requests" --csv -q 2>/dev/null \
    | awk -F'","' 'NR==2 {gsub(/"/,"",$2); print $2}'
}

echo "$rounds rounds, $requests requests, redis-benchmark -P 16 -c 50 -r 100000"
printf '%-12s %14s %14s %8s\n' "test" "meridian ops/s" "redis ops/s" "ratio"
for t in $tests; do
  m=(); r=()
  for i in $(seq 1 "$rounds"); do
    if (( i % 4 == 1 || i % 4 == 0 )); then m+=("$(once "$mport" "$t")"); r+=("$(once "$rport" "$t")")
    else r+=("$(once "$rport" "$t")"); m+=("$(once "$mport" "$t")"); fi
  done
  mm=$(printf '%s\n' "${m[@]}" | median); rr=$(printf '%s\n' "${r[@]}" | median)
  printf '%-12s %14s %14s %8s\n' "${t^^}" "$mm" "$rr" "$(awk -v a="$mm" -v b="$rr" 'BEGIN{printf "%.2f", a/b}')"
done

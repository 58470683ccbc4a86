#!/usr/bin/env bash
# maxmemory under a write load ten times the limit: Meridian and Debian's redis-server side by
# side, A B B A, each with `maxmemory 100mb` and `allkeys-lru`, loaded by redis-benchmark
# (SET of 1000-byte values, random keys, bounded by -n). Prints per run the highest RSS seen
# (sampled every 200 ms from /proc), the RSS and used_memory at the end, evicted_keys, keys
# left, and the highest RSS over the limit. Server on CPU 0, load generator on CPU 1.
#
# Both without persistence (Redis: no RDB, no AOF; Meridian: appendonly no, save ""); APPENDONLY=yes
# runs Meridian with its log and background snapshots (whose private replay is not counted as
# used memory, as Redis's fork is not). SHARDS: Meridian's shard threads (default 1).
#
# Usage: [SHARDS=n] [APPENDONLY=yes] tools/maxmemory-rss.sh [MERIDIAN_BIN] [REQUESTS]
set -euo pipefail
BIN=${1:-target/debug/meridian}
N=${2:-1100000}          # 1.1e6 x 1000 B = 1.1 GB written: 10x of 100 MiB plus 5%
LIMIT=$((100 * 1024 * 1024))
PORT=${PORT:-7460}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

# Without the log: `appendonly no` alone keeps one for the default save policy.
NOLOG=(--save "")
[ "${APPENDONLY:-no}" = yes ] && NOLOG=()

run() {  # kind
    local kind=$1 pid
    if [ "$kind" = meridian ]; then
        taskset -c 0 "$BIN" server --port $PORT --dir "$WORK/m" --shards "${SHARDS:-1}" \
            --maxmemory $LIMIT --maxmemory-policy allkeys-lru --appendonly "${APPENDONLY:-no}" \
            "${NOLOG[@]}" \
            >"$WORK/log" 2>&1 &
    else
        taskset -c 0 redis-server --port $PORT --save '' --appendonly no \
            --maxmemory $LIMIT --maxmemory-policy allkeys-lru >"$WORK/log" 2>&1 &
    fi
    pid=$!
    for _ in $(seq 100); do redis-cli -p $PORT ping >/dev/null 2>&1 && break; sleep 0.1; done
    local peak=0
    taskset -c 1 redis-benchmark -p $PORT -t set -n "$N" -r 100000000 -d 1000 -c 8 -P 16 -q \
        >"$WORK/bench" 2>&1 &
    local bench=$!
    while kill -0 $bench 2>/dev/null; do
        local rss
        rss=$(awk '/VmRSS/ {print $2 * 1024}' /proc/$pid/status)
        [ "$rss" -gt "$peak" ] && peak=$rss
        sleep 0.2
    done
    wait $bench || true
    local info rss used evicted keys
    info=$(redis-cli -p $PORT info all | tr -d '\r')
    rss=$(awk '/VmRSS/ {print $2 * 1024}' /proc/$pid/status)
    used=$(echo "$info" | awk -F: '$1=="used_memory" {print $2}')
    evicted=$(echo "$info" | awk -F: '$1=="evicted_keys" {print $2}')
    keys=$(redis-cli -p $PORT dbsize)
    printf '%-9s peak_rss=%d (%.3f x limit) end_rss=%d used_memory=%d (%.3f x limit) evicted_keys=%s keys=%s  %s\n' \
        "$kind" "$peak" "$(echo "$peak / $LIMIT" | bc -l)" "$rss" "$used" \
        "$(echo "$used / $LIMIT" | bc -l)" "$evicted" "$keys" "$(tr '\r' '\n' <"$WORK/bench" | grep -a 'SET:' | tail -1)"
    kill "$pid"; wait "$pid" 2>/dev/null || true
    rm -rf "$WORK/m"
}

echo "maxmemory=$LIMIT allkeys-lru, $N SETs of 1000 B (random keys), $(nproc) CPUs, meridian: $BIN --shards ${SHARDS:-1} --appendonly ${APPENDONLY:-no}"
for kind in meridian redis redis meridian; do run $kind; done

#!/usr/bin/env bash
# A site across two nodes (issue 17's proxy row), in one run: ops/s of SET/GET on keys of a
# shard of node n2 (a) through node n1's main port, which forwards each command over its
# pooled pipelined link to n2's shard endpoint, and (b) directly at n2's main port (the
# shard's own thread: zero hop). Same load, rounds in A B B A order, medians, the ratio
# (target >= 0.8). Each node runs one shard; n2 is pinned to core $N2_CORE, n1 and the load
# generator share the others (on a 2-core machine the forwarding node competes with the
# client for its core: the ratio is a floor). Where cores are to spare, CLIENT_CORES gives the
# load generator its own.
# Needs memtier_benchmark (MEMTIER=path) and redis-cli; MERIDIAN_BIN a Meridian binary (else
# a release build is made here).
# Usage: benches/proxy.sh [rounds=4] [seconds=8]
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-4}
secs=${2:-8}
memtier=${MEMTIER:-memtier_benchmark}
n2_core=${N2_CORE:-1}
other_cores=${OTHER_CORES:-0}
client_cores=${CLIENT_CORES:-$other_cores}
conns=${CONNS:-8}
p1=7701; e1=7711; p2=7702; e2=7721

command -v redis-cli >/dev/null || { echo "needs redis-cli (apt-get install -y redis-tools)" >&2; exit 1; }
command -v "$memtier" >/dev/null || { echo "needs memtier_benchmark (MEMTIER=path)" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

bin=${MERIDIAN_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release -q -p meridian-server --bin meridian
  bin=target/release/meridian
fi

cat > "$work/site.toml" <<EOF
epoch = 1
[[node]]
name = "n1"
ip = "127.0.0.1"
port = $p1
endpoint-port = $e1
shards = 1
[[node]]
name = "n2"
ip = "127.0.0.1"
port = $p2
endpoint-port = $e2
shards = 1
EOF

wait_port() { for _ in $(seq 1 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "port $1 not up" >&2; exit 1; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.0f\n", (a[NR/2]+a[NR/2+1])/2}'; }
quiet=(--save "" --auto-aof-rewrite-percentage 0 --log-level error)

taskset -c "$other_cores" "$bin" server --topology "$work/site.toml" --node n1 --dir "$work/n1" "${quiet[@]}" & pids+=("$!")
taskset -c "$n2_core" "$bin" server --topology "$work/site.toml" --node n2 --dir "$work/n2" "${quiet[@]}" & pids+=("$!")
wait_port $p1; wait_port $p2
# Slot of the hash tag {a} (15495) is n2's shard (slots 8192-16383).
[ "$(redis-cli -p $p1 cluster keyslot '{a}')" = 15495 ] || { echo "unexpected slot" >&2; exit 1; }

run() { # port pipeline -> ops/s
  taskset -c "$client_cores" "$memtier" -s 127.0.0.1 -p "$1" --protocol=redis -t 1 -c "$conns" \
    --ratio=1:1 -d 100 --key-prefix='{a}:' --key-pattern=R:R --key-maximum=100000 \
    --pipeline="$2" --test-time="$secs" --hide-histogram 2>/dev/null | awk '/^Totals/ {print $2}'
}

echo "== a shard of node n2: through n1's main port (proxied) vs n2's main port (direct); $rounds rounds of ${secs}s, $conns connections"
printf '%-8s %14s %14s %8s\n' pipeline proxied direct ratio
for pipe in 1 16; do
  a=(); b=()
  for i in $(seq 1 "$rounds"); do
    if (( i % 4 == 1 || i % 4 == 0 )); then
      a+=("$(run $p1 $pipe)"); b+=("$(run $p2 $pipe)")
    else
      b+=("$(run $p2 $pipe)"); a+=("$(run $p1 $pipe)")
    fi
  done
  am=$(printf '%s\n' "${a[@]}" | median); bm=$(printf '%s\n' "${b[@]}" | median)
  printf '%-8s %14s %14s %8s\n' "-P$pipe" "$am" "$bm" "$(awk -v a="$am" -v b="$bm" 'BEGIN{printf "%.3f", a/b}')"
done
echo "(n2 on core $n2_core; n1 on cores $other_cores; memtier on cores $client_cores; $(nproc) CPUs)"

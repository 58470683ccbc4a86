#!/usr/bin/env bash
# Shards in one process (issue 17's performance rows), in one run:
#  (a) --shards 1 against the build before shards existed (BASE_REV, default 0971ed8): GET and
#      SET at -P 1 and -P 16, server on core 0 and redis-benchmark on core 1, rounds in
#      A B B A order, medians, the ratio (target >= 0.97).
#  (b) CPU per million ops at one offered load (memtier, rate-limited well below saturation):
#      1 shard; 2 shards through the main port (half the keys on the other thread's shard);
#      2 shards through the cluster endpoints (every key on its own thread: zero hop). From
#      /proc/<pid>/stat (user + system, every thread). The main port's extra CPU per
#      cross-shard command is (main - endpoints) / fraction crossing (1/2 with 2 shards).
#  (c) Saturation: ops/s through the cluster endpoints with 1 shard and with N shards (N = the
#      CPUs this script may use), per shard (each shard's commandstats) and total. On a
#      machine with few cores the client competes with the shards for them: read scaling only
#      where cores are left for the load generator.
# Needs redis-benchmark, redis-cli and memtier_benchmark (MEMTIER=path; build it from
# github.com/RedisLabs/memtier_benchmark: autoreconf -ivf && ./configure && make).
# BASE_BIN=path skips building the base revision.
# Usage: benches/shards.sh [rounds=4] [requests=200000]
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-4}
requests=${2:-200000}
base_rev=${BASE_REV:-0971ed8}
server_core=${SERVER_CORE:-0}
client_core=${CLIENT_CORE:-1}
memtier=${MEMTIER:-memtier_benchmark}
rate=${RATE:-2500}          # requests/s per connection in (b)
conns=${CONNS:-8}           # connections in (b) and (c): offered load = rate * conns
secs=${SECS:-10}            # duration of each (b) run
mport=7601; bport=7602; cport=7611

command -v redis-benchmark >/dev/null && command -v redis-cli >/dev/null || {
  echo "needs redis-benchmark and redis-cli (apt-get install -y redis-tools)" >&2; exit 1; }
command -v "$memtier" >/dev/null || { echo "needs memtier_benchmark (MEMTIER=path)" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT

if [ -n "${BASE_BIN:-}" ]; then
  base_bin=$BASE_BIN
else
  git archive "$base_rev" | tar -x -C "$work" --one-top-level=base
  (cd "$work/base" && CARGO_TARGET_DIR="$work/base-target" cargo build --release -q -p meridian-server --bin meridian)
  base_bin="$work/base-target/release/meridian"
fi
cargo build --release -q -p meridian-server --bin meridian
bin=target/release/meridian

wait_port() { for _ in $(seq 1 200); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "port $1 not up" >&2; exit 1; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.2f\n", (a[NR/2]+a[NR/2+1])/2}'; }
ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)
quiet=(--save "" --auto-aof-rewrite-percentage 0 --log-level error)

echo "== (a) --shards 1 vs the build before shards ($base_rev); $rounds rounds, $requests requests, -c 50 -d 100"
rm -rf "$work/a" "$work/b"
taskset -c "$server_core" "$base_bin" server --port $bport --dir "$work/b" "${quiet[@]}" & pids+=("$!")
taskset -c "$server_core" "$bin" server --port $mport --dir "$work/a" --shards 1 "${quiet[@]}" & pids+=("$!")
wait_port $bport; wait_port $mport
bench_once() { # port test pipeline -> ops/s
  taskset -c "$client_core" redis-benchmark -p "$1" -t "$2" -P "$3" -c 50 -d 100 -r 1000000 -n "$requests" --csv -q 2>/dev/null \
    | awk -F'","' 'NR==2 {gsub(/"/,"",$2); print $2}'
}
printf '%-10s %14s %14s %8s\n' test shards-1 before ratio
for test in set get; do
  for pipe in 1 16; do
    m=(); b=()
    for i in $(seq 1 "$rounds"); do
      if (( i % 4 == 1 || i % 4 == 0 )); then
        m+=("$(bench_once $mport $test $pipe)"); b+=("$(bench_once $bport $test $pipe)")
      else
        b+=("$(bench_once $bport $test $pipe)"); m+=("$(bench_once $mport $test $pipe)")
      fi
    done
    mm=$(printf '%s\n' "${m[@]}" | median); bm=$(printf '%s\n' "${b[@]}" | median)
    printf '%-10s %14s %14s %8s\n' "${test^^} -P$pipe" "$mm" "$bm" "$(awk -v a="$mm" -v b="$bm" 'BEGIN{printf "%.3f", a/b}')"
  done
done
for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=()

# One memtier run: SET/GET 1:1 over 100k keys. Prints "ops cpu_ticks".
memtier_run() { # pid port cluster(0|1) extra...
  local pid=$1 port=$2 cluster=$3; shift 3
  local args=(-s 127.0.0.1 -p "$port" --protocol=redis -t 1 -c "$conns" --ratio=1:1 -d 100
    --key-pattern=R:R --key-maximum=100000 --hide-histogram "$@")
  [ "$cluster" = 1 ] && args+=(--cluster-mode)
  local t0 t1 out
  t0=$(ticks "$pid")
  out=$("$memtier" "${args[@]}" 2>/dev/null)
  t1=$(ticks "$pid")
  echo "$(echo "$out" | awk '/^Totals/ {print $2}') $((t1 - t0))"
}

start() { # shards -> pid, with the cluster API on (endpoints from $cport)
  rm -rf "$work/s"
  "$bin" server --port $mport --dir "$work/s" --shards "$1" --cluster-api yes --cluster-endpoint-port $cport "${quiet[@]}" &
  spid=$!; pids+=("$spid")
  wait_port $mport
  for i in $(seq 0 $(( $1 - 1 ))); do wait_port $((cport + i)); done
}

echo
echo "== (b) CPU per million ops at $((rate * conns)) requests/s offered ($conns connections x $rate/s, ${secs}s, $rounds rounds)"
printf '%-28s %12s %16s\n' setup "ops/s" "CPU s / M ops"
declare -A cpu
for setup in one main endpoints; do
  vals=()
  for r in $(seq 1 "$rounds"); do
    case $setup in
      one) start 1; read -r ops t < <(memtier_run "$spid" $mport 0 --rate-limiting="$rate" --test-time="$secs");;
      main) start 2; read -r ops t < <(memtier_run "$spid" $mport 0 --rate-limiting="$rate" --test-time="$secs");;
      endpoints) start 2; read -r ops t < <(memtier_run "$spid" $cport 1 --rate-limiting="$rate" --test-time="$secs");;
    esac
    n=$(awk -v o="$ops" -v s="$secs" 'BEGIN{printf "%.0f", o * s}')
    vals+=("$(awk -v t="$t" -v n="$n" -v hz="$hz" 'BEGIN{printf "%.3f", t / hz / n * 1e6}')")
    last_ops=$ops
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=()
  done
  cpu[$setup]=$(printf '%s\n' "${vals[@]}" | median)
  label=$([ $setup = one ] && echo "1 shard, main port" || ([ $setup = main ] && echo "2 shards, main port" || echo "2 shards, cluster endpoints"))
  printf '%-28s %12s %16s\n' "$label" "$last_ops" "${cpu[$setup]}"
done
awk -v m="${cpu[main]}" -v e="${cpu[endpoints]}" -v o="${cpu[one]}" 'BEGIN {
  printf "extra CPU per cross-shard command through the main port: %.2f us ((main - endpoints) / 0.5)\n", (m - e) / 0.5
  printf "2 shards via endpoints / 1 shard, CPU per op: %.2f\n", e / o }'

echo
echo "== (c) saturation through the cluster endpoints (memtier, $conns connections, 4 threads, -P 16)"
ncpu=$(nproc)
printf '%-8s %12s %s\n' shards "ops/s" "per shard (share of SET+GET calls)"
for n in 1 "$ncpu"; do
  start "$n"
  read -r ops _ < <(memtier_run "$spid" $cport 1 --test-time="$secs" --pipeline=16 -t 4)
  per=""
  for i in $(seq 0 $((n - 1))); do
    calls=$(redis-cli -p $((cport + i)) info commandstats | tr -d '\r' \
      | awk -F'[=,:]' '/^cmdstat_(set|get):/ {s += $3} END {print s + 0}')
    per="$per $calls"
  done
  total_calls=$(echo "$per" | awk '{for (i = 1; i <= NF; i++) s += $i} END {print s}')
  shares=$(echo "$per" | awk -v t="$total_calls" -v o="$ops" '{for (i = 1; i <= NF; i++) printf "%s%.0f", (i > 1 ? " " : ""), o * $i / t}')
  printf '%-8s %12s %s\n' "$n" "$ops" "$shares"
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=()
done
echo "(this machine: $ncpu CPUs shared by the shards and the load generator)"

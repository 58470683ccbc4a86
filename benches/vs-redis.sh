#!/usr/bin/env bash
# Side-by-side throughput, p99 latency and memory: Meridian vs Debian's redis-server (and
# Valkey when VALKEY_BIN names a valkey-server), in the same run.
#
# Each server is pinned to core 0 and the load generator to core 1. Every row runs in rounds
# whose order alternates (A B C, C B A, C B A, A B C, ...), and the medians are compared; a
# difference under 10% is noise. Rows:
#  1. redis-benchmark SET and GET, -c 50 -d 100 -r 1000000, at -P 1 and -P 16: ops/s and p99;
#  2. memtier_benchmark, the seeds' two profiles, 50 connections on keys prefilled in each
#     server (MEMTIER=path, or memtier_benchmark on PATH; skipped with a message without it):
#     seed 001 `--ratio 1:1 --pipeline 9 -d 100`, seed 000 `--ratio 3:7 --pipeline 4 -d 256`;
#  3. RSS per key after loading 1,000,000 keys with 100-byte values into fresh processes.
# Rows 1 and 2 also print each server's CPU use during its runs (its threads' CPU time over the
# run's wall time; 100% = the one core it is pinned to: below it, the load generator is what
# limits the run) and the ratio of Meridian's CPU time per request to each other server's
# (below 1: Meridian spends less per request).
# Every server runs without persistence (equal configurations).
# Usage: benches/vs-redis.sh [rounds=4] [requests=200000]
#   SKIP_THROUGHPUT=1: memory row only; MERIDIAN_BIN=path: no build; VALKEY_BIN=path: a third
#   column; MEMTIER_SECS (default 10), MEMTIER_KEYS (default 100000): each memtier run's length
#   and the keys prefilled.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-4}
requests=${2:-200000}
mport=${MERIDIAN_PORT:-7379}
rport=${REDIS_PORT:-7380}
vport=${VALKEY_PORT:-7381}
keys_mem=${KEYS_MEM:-1000000}
server_core=${SERVER_CORE:-0}
client_core=${CLIENT_CORE:-1}
memtier=${MEMTIER:-memtier_benchmark}
memtier_secs=${MEMTIER_SECS:-10}
memtier_keys=${MEMTIER_KEYS:-100000}
valkey=${VALKEY_BIN:-}

. benches/common.sh
bench_setup

# The servers of this run: names and ports, in the order of a forward round.
names=(meridian redis); ports=("$mport" "$rport")
[ -n "$valkey" ] && { names+=(valkey); ports+=("$vport"); }
n=${#names[@]}

start_all() { # meridian's data directory
  start_meridian "$mport" "$1"; start_redis "$rport"
  spids=("$mpid" "$rpid")
  if [ -n "$valkey" ]; then start_server_like_redis "$valkey" "$vport"; spids+=("$rpid"); fi
  return 0
}
stop_all() { kill "${spids[@]}" 2>/dev/null || true; wait "${spids[@]}" 2>/dev/null || true; }

# The server indices of round i: forward in rounds 1, 4, 5, 8, ..., backward otherwise.
round_order() {
  if (( $1 % 4 == 1 || $1 % 4 == 0 )); then seq 0 $((n - 1)); else seq $((n - 1)) -1 0; fi
}

# Prints, per server, the median of its rounds' ops/s, p99s, CPU use and CPU ns per request.
median_ms() { sort -g | awk '{a[NR]=$1} END {if (NR%2) printf "%.3f\n", a[(NR+1)/2]; else printf "%.3f\n", (a[NR/2]+a[NR/2+1])/2}'; }
medians() { # dir: per server, ops/s p99 cpu% ns/request
  for s in "${names[@]}"; do
    printf '%s %s %s %s ' "$(cut -d' ' -f1 "$1/$s" | median)" "$(cut -d' ' -f2 "$1/$s" | median_ms)" \
      "$(cut -d' ' -f3 "$1/$s" | median_ms | awk '{printf "%.1f", $1}')" "$(cut -d' ' -f4 "$1/$s" | median)"
  done
  echo
}

# One row: runs `$2 port` for every server in every round, then prints ops/s, p99 and CPU-use
# medians, the ratios of Meridian's ops/s to each other server's, and of its CPU time per
# request to theirs.
row() { # label command
  local label=$1 cmd=$2 d c0 c1 t0 t1 out
  d=$(mktemp -d -p "$work")
  for i in $(seq 1 "$rounds"); do
    for j in $(round_order "$i"); do
      c0=$(cpu_ns "${spids[$j]}"); t0=$(date +%s%N)
      out=$("$cmd" "${ports[$j]}")
      t1=$(date +%s%N); c1=$(cpu_ns "${spids[$j]}")
      # ops/s p99 cpu% ns/request
      echo "$out" | awk -v c=$((c1 - c0)) -v t=$((t1 - t0)) \
        '{printf "%s %s %.1f %.0f\n", $1, $2, 100 * c / t, ($1 > 0 ? c / ($1 * t / 1e9) : 0)}' \
        >> "$d/${names[$j]}"
    done
  done
  read -r -a med < <(medians "$d")
  printf '%-22s' "$label"
  for j in $(seq 0 $((n - 1))); do
    printf ' %12s %8s %7s' "${med[$((4 * j))]}" "${med[$((4 * j + 1))]}" "${med[$((4 * j + 2))]}%"
  done
  for j in $(seq 1 $((n - 1))); do
    printf ' %7s' "$(awk -v a="${med[0]}" -v b="${med[$((4 * j))]}" 'BEGIN{printf "%.2f", a/b}')"
  done
  for j in $(seq 1 $((n - 1))); do
    printf ' %9s' "$(awk -v a="${med[3]}" -v b="${med[$((4 * j + 3))]}" 'BEGIN{printf "%.2f", (b > 0 ? a/b : 0)}')"
  done
  echo
}

header() {
  printf '%-22s' "$1"
  for s in "${names[@]}"; do printf ' %12s %8s %7s' "$s ops/s" "p99 ms" "cpu"; done
  for s in "${names[@]:1}"; do printf ' %7s' "/$s"; done
  for s in "${names[@]:1}"; do printf ' %9s' "cpu/$s"; done
  echo
}

# redis-benchmark: "ops/s p99_ms" of one run.
rb_test=set; rb_pipe=1
rb_once() { # port
  taskset -c "$client_core" redis-benchmark -p "$1" -t "$rb_test" -P "$rb_pipe" -c 50 -d 100 -r 1000000 -n "$requests" --csv -q 2>/dev/null \
    | awk -F'","' 'NR==2 {gsub(/"/,"",$2); gsub(/"/,"",$7); print $2, $7}'
}

# memtier: "ops/s p99_ms" of one run of the profile in mt_args.
mt_args=()
mt_once() { # port
  taskset -c "$client_core" "$memtier" -s 127.0.0.1 -p "$1" --protocol=redis -t 1 -c 50 \
    --key-pattern=R:R --key-minimum=1 --key-maximum="$memtier_keys" --test-time="$memtier_secs" \
    --hide-histogram "${mt_args[@]}" 2>/dev/null | awk '/^Totals/ {print $2, $7}'
}
mt_fill() { # port size
  taskset -c "$client_core" "$memtier" -s 127.0.0.1 -p "$1" --protocol=redis -t 1 -c 50 \
    --ratio=1:0 --key-pattern=P:P --key-minimum=1 --key-maximum="$memtier_keys" -d "$2" \
    --requests=allkeys --hide-histogram >/dev/null 2>&1
}

start_all "$work/m"
versions="Meridian $($bin --version 2>/dev/null | awk '{print $2}') vs $(redis-server --version | awk '{print $3}')"
[ -n "$valkey" ] && versions="$versions and Valkey $("$valkey" --version | grep -o 'v=[0-9.]*' | cut -c3-)"
echo "$versions; $rounds rounds; ratios are Meridian's ops/s over each other's"
if [ "${SKIP_THROUGHPUT:-0}" != 1 ]; then
  header "redis-benchmark"
  for rb_test in set get; do
    for rb_pipe in 1 16; do row "${rb_test^^} -P $rb_pipe" rb_once; done
  done
  if command -v "$memtier" >/dev/null; then
    echo
    header "memtier ($memtier_secs s)"
    for profile in "seed-001 1:1 9 100" "seed-000 3:7 4 256"; do
      read -r label ratio pipe size <<< "$profile"
      for p in "${ports[@]}"; do mt_fill "$p" "$size"; done
      mt_args=(--ratio="$ratio" --pipeline="$pipe" -d "$size")
      row "$label $ratio P$pipe ${size}B" mt_once
    done
  else
    echo "(memtier rows skipped: no $memtier; MEMTIER=path)"
  fi
fi

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
stop_all
start_all "$work/m-mem"
echo
printf '%-22s' "RSS per key (B)"; for s in "${names[@]}"; do printf ' %12s' "$s"; done
for s in "${names[@]:1}"; do printf ' %7s' "/$s"; done; echo
before=(); for p in "${spids[@]}"; do before+=("$(rss_kb "$p")"); done
for p in "${ports[@]}"; do redis-cli -p "$p" --pipe < "$work/load.resp" >/dev/null; done
sleep 1
printf '%-22s' "$keys_mem x 100 B"
per=()
for j in $(seq 0 $((n - 1))); do
  after=$(rss_kb "${spids[$j]}")
  keys=$(redis-cli -p "${ports[$j]}" dbsize)
  [ "$keys" = "$keys_mem" ] || echo "warning: ${names[$j]} holds $keys keys, not $keys_mem" >&2
  per+=("$(awk -v a="$after" -v b="${before[$j]}" -v k="$keys_mem" 'BEGIN{printf "%.1f", (a - b) * 1024 / k}')")
  printf ' %12s' "${per[$j]}"
done
for j in $(seq 1 $((n - 1))); do printf ' %7s' "$(awk -v a="${per[0]}" -v b="${per[$j]}" 'BEGIN{printf "%.2f", a/b}')"; done
echo

#!/usr/bin/env bash
# Bitmaps: BITCOUNT and BITOP on 1 MB values and BITFIELD INCRBY, Meridian vs Debian's
# redis-server in the same run (issue 18: each at least 0.9x Redis).
#
# Each server is pinned to core SERVER_CORE and redis-benchmark to CLIENT_CORE, both servers
# without persistence. Rows run in rounds whose order alternates (A B B A ...); the medians are
# compared. The 1 MB values are written by SETRANGE (the same bytes in both servers) before the
# rounds.
#
# Usage: benches/bitmaps.sh [rounds=4] [requests=20000] [pipeline=16]
#        (MERIDIAN_BIN=path: no build; BITFIELD rows run 10x the requests)
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-4}
requests=${2:-20000}
pipe=${3:-16}
mport=${MERIDIAN_PORT:-7393}
rport=${REDIS_PORT:-7394}
server_core=${SERVER_CORE:-0}
client_core=${CLIENT_CORE:-1}

. benches/common.sh
bench_setup
start_meridian "$mport" "$work/m"
start_redis "$rport"

# Two 1 MB values of the same pseudo-random bytes in both servers, written 4 KiB at a time.
python3 - > "$work/load.resp" <<'PY'
import random, sys
out = sys.stdout.buffer
rng = random.Random(7)
for key in (b"bm1", b"bm2"):
    for off in range(0, 1 << 20, 4096):
        chunk = bytes(rng.getrandbits(8) for _ in range(4096))
        o = str(off).encode()
        out.write(b"*4\r\n$8\r\nSETRANGE\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n$4096\r\n%s\r\n"
                  % (len(key), key, len(o), o, chunk))
PY
for p in "$mport" "$rport"; do
  redis-cli -p "$p" --pipe < "$work/load.resp" >/dev/null
done
for k in bm1 bm2; do
  a=$(redis-cli -p "$mport" bitcount "$k"); b=$(redis-cli -p "$rport" bitcount "$k")
  [ "$a" = "$b" ] || { echo "BITCOUNT $k differs: meridian $a, redis $b" >&2; exit 1; }
done

bench_once() { # port requests command... -> ops/s
  local port=$1 n=$2; shift 2
  taskset -c "$client_core" redis-benchmark -p "$port" -P "$pipe" -c 50 -r 100000 -n "$n" --csv -q "$@" 2>/dev/null \
    | awk -F'","' 'NR==2 {gsub(/"/,"",$2); print $2}'
}

echo "Meridian vs $(redis-server --version | awk '{print $3}'); $rounds rounds, -P $pipe -c 50, values of 1 MB"
printf '%-34s %14s %14s %8s\n' "test" "meridian ops/s" "redis ops/s" "ratio"
row() { # name requests command...
  local name=$1 n=$2; shift 2
  local m=() r=()
  for i in $(seq 1 "$rounds"); do
    if (( i % 4 == 1 || i % 4 == 0 )); then
      m+=("$(bench_once "$mport" "$n" "$@")"); r+=("$(bench_once "$rport" "$n" "$@")")
    else
      r+=("$(bench_once "$rport" "$n" "$@")"); m+=("$(bench_once "$mport" "$n" "$@")")
    fi
  done
  local mm rm_
  mm=$(printf '%s\n' "${m[@]}" | median); rm_=$(printf '%s\n' "${r[@]}" | median)
  printf '%-34s %14s %14s %8s   (rounds: meridian %s; redis %s)\n' "$name" "$mm" "$rm_" \
    "$(awk -v a="$mm" -v b="$rm_" 'BEGIN{printf "%.2f", a/b}')" "${m[*]}" "${r[*]}"
}
row "BITCOUNT 1 MB" "$requests" bitcount bm1
row "BITCOUNT 1 MB, byte range" "$requests" bitcount bm1 1000 500000
row "BITOP AND of two 1 MB" "$((requests / 4))" bitop and bmdest bm1 bm2
row "BITFIELD INCRBY u8 (random keys)" "$((requests * 10))" bitfield bf:__rand_int__ incrby u8 100 1

#!/usr/bin/env bash
# Scaling across shards on a machine with cores to spare (issue 17's row (c)), in one run:
# Meridian with N shards in one process, through its cluster endpoints (every key on its own
# shard's thread: zero hop), against a Redis Cluster of N redis-server processes with the same
# slot split, for each N in SHARD_COUNTS. Server CPUs are SERVER_CPUS (shard i and Redis node i
# on the i-th of them), the load generator (memtier_benchmark --cluster-mode, one thread per
# client CPU) on CLIENT_CPUS; the two never share a CPU. Rounds in A B B A order, medians.
# Printed per N: total ops/s of each, ops/s per shard, the server's CPU-seconds per million ops
# (utime + stime of every thread from /proc/PID/stat; it shows whether the servers or the
# load generator were the limit: a server below N busy CPUs was waiting for load), the ratio
# Meridian / Redis Cluster, and each system's scaling: ops/s per shard at N over ops/s per shard
# of the first row (N x ops/s at 1 with the default SHARD_COUNTS).
# Then, at the largest N, Meridian's main port (a client without cluster support; (N-1)/N of
# the commands hop to another shard's thread) against its endpoints: ops/s, the server's CPU
# per op, and the extra CPU per cross-shard command at saturation.
# Needs redis-server, redis-cli, memtier_benchmark (MEMTIER=path) and taskset; MERIDIAN_BIN
# a Meridian binary (else a release build is made here).
# Usage: benches/scale.sh [rounds=4] [seconds=4]
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=${1:-4}
secs=${2:-4}
memtier=${MEMTIER:-memtier_benchmark}
ncpu=$(nproc)
half=$((ncpu / 2))
server_cpus=${SERVER_CPUS:-$(seq -s, 0 $((half - 1)))}
client_cpus=${CLIENT_CPUS:-$(seq -s, "$half" $((ncpu - 1)))}
shard_counts=${SHARD_COUNTS:-"1 2 4 $half"}
conns=${CONNS:-4}          # connections per client thread (to each node, in cluster mode)
pipeline=${PIPELINE:-16}
mport=7601; eport=7611; rport=7701

for tool in redis-server redis-cli taskset "$memtier"; do
  command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }
done
bin=${MERIDIAN_BIN:-}
if [ -z "$bin" ]; then
  cargo build --release -q -p meridian-server --bin meridian
  bin=target/release/meridian
fi

IFS=, read -r -a scpu <<<"$server_cpus"
IFS=, read -r -a ccpu_list <<<"$client_cpus"
threads=${#ccpu_list[@]}
for n in $shard_counts; do
  (( n <= ${#scpu[@]} )) || { echo "$n shards need $n server CPUs; SERVER_CPUS has ${#scpu[@]}" >&2; exit 1; }
done

work=$(mktemp -d)
pids=()
stop_all() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; pids=(); }
trap 'stop_all; rm -rf "$work"' EXIT

wait_port() { for _ in $(seq 1 400); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.05; done; echo "port $1 not up" >&2; exit 1; }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.0f\n", (a[NR/2]+a[NR/2+1])/2}'; }
ticks() { local s=0 p; for p in "$@"; do s=$((s + $(awk '{print $14 + $15}' "/proc/$p/stat"))); done; echo "$s"; }
hz=$(getconf CLK_TCK)
cpus_of() { local n=$1; (IFS=,; echo "${scpu[*]:0:n}"); }

start_meridian() { # shards
  rm -rf "$work/m"
  taskset -c "$(cpus_of "$1")" "$bin" server --port $mport --dir "$work/m" --shards "$1" \
    --cluster-api yes --cluster-endpoint-port $eport --appendonly no --save "" --log-level warn &
  mpid=$!; pids+=("$mpid")
  wait_port $mport
  for i in $(seq 0 $(($1 - 1))); do wait_port $((eport + i)); done
}

# A Redis Cluster of N masters on N CPUs, slots split evenly (as Meridian splits an empty
# keyspace), joined by CLUSTER MEET; ready when every node reports cluster_state:ok.
start_redis_cluster() { # nodes
  local n=$1 i lo hi
  rpids=()
  for i in $(seq 0 $((n - 1))); do
    rm -rf "$work/r$i"; mkdir -p "$work/r$i"
    taskset -c "${scpu[$i]}" redis-server --port $((rport + i)) --dir "$work/r$i" --save "" \
      --appendonly no --cluster-enabled yes --cluster-announce-ip 127.0.0.1 --cluster-config-file nodes.conf --daemonize no \
      --loglevel warning >"$work/r$i/log" 2>&1 &
    rpids+=("$!"); pids+=("$!")
  done
  for i in $(seq 0 $((n - 1))); do wait_port $((rport + i)); done
  for i in $(seq 0 $((n - 1))); do
    lo=$((16384 * i / n)); hi=$((16384 * (i + 1) / n - 1))
    redis-cli -p $((rport + i)) cluster addslotsrange "$lo" "$hi" >/dev/null
    (( i == 0 )) || redis-cli -p $rport cluster meet 127.0.0.1 $((rport + i)) >/dev/null
  done
  for _ in $(seq 1 400); do
    local ok=0
    for i in $(seq 0 $((n - 1))); do
      redis-cli -p $((rport + i)) cluster info | tr -d '\r' | grep -q '^cluster_state:ok' && ok=$((ok + 1))
    done
    (( ok == n )) && return 0
    sleep 0.05
  done
  echo "redis cluster of $n did not form" >&2; exit 1
}

# One memtier run: SET:GET 1:1, 100-byte values, 1M keys. Prints "ops/s cpu_ticks p99_ms".
load() { # port cluster(0|1) server-pids...
  local port=$1 cluster=$2; shift 2
  local args=(-s 127.0.0.1 -p "$port" --protocol=redis -t "$threads" -c "$conns" --ratio=1:1 -d 100
    --key-pattern=R:R --key-maximum=1000000 --pipeline="$pipeline" --test-time="$secs"
    --distinct-client-seed --hide-histogram)
  [ "$cluster" = 1 ] && args+=(--cluster-mode)
  local t0 t1 out
  t0=$(ticks "$@")
  out=$(taskset -c "$client_cpus" "$memtier" "${args[@]}" 2>/dev/null)
  t1=$(ticks "$@")
  # p99's column moves (cluster mode adds MOVED/sec and ASK/sec): find it in the header.
  echo "$out" | awk -v t=$((t1 - t0)) '/^Type/ {gsub(/ Latency/, ""); for (i = 1; i <= NF; i++) if ($i == "p99") c = i}
    /^Totals/ {print $2, t, $c}'
}

echo "== scaling: SET:GET 1:1, -d 100, 1M keys, pipeline $pipeline, $threads client threads x $conns connections per node, ${secs}s, $rounds rounds (A B B A)"
echo "   server CPUs $server_cpus, client CPUs $client_cpus; $(nproc) CPUs; $("$bin" --version) vs $(redis-server --version | awk '{print $1, $3}')"
printf '%-6s %12s %12s %12s %12s %8s %10s %10s %10s %10s\n' shards "M ops/s" "R ops/s" "M /shard" "R /shard" "M/R" "M CPUs" "R CPUs" "M p99 ms" "R p99 ms"
declare -A one
for n in $shard_counts; do
  start_meridian "$n"
  start_redis_cluster "$n"
  m=(); r=(); mc=(); rc=(); mp=(); rp=()
  for i in $(seq 1 "$rounds"); do
    order=(m r); (( i % 4 == 2 || i % 4 == 3 )) && order=(r m)
    for s in "${order[@]}"; do
      if [ "$s" = m ]; then
        read -r o t p < <(load $eport 1 "$mpid"); m+=("$o"); mc+=("$t"); mp+=("$p")
      else
        read -r o t p < <(load $rport 1 "${rpids[@]}"); r+=("$o"); rc+=("$t"); rp+=("$p")
      fi
    done
  done
  mm=$(printf '%s\n' "${m[@]}" | median); rm_=$(printf '%s\n' "${r[@]}" | median)
  mcm=$(printf '%s\n' "${mc[@]}" | median); rcm=$(printf '%s\n' "${rc[@]}" | median)
  mpm=$(printf '%s\n' "${mp[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  rpm=$(printf '%s\n' "${rp[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
  [ -z "${one[m]:-}" ] && one[m]=$mm && one[r]=$rm_ && one[n]=$n
  printf '%-6s %12s %12s %12.0f %12.0f %8.3f %10.2f %10.2f %10s %10s\n' "$n" "$mm" "$rm_" \
    "$(awk -v a="$mm" -v n="$n" 'BEGIN{print a / n}')" "$(awk -v a="$rm_" -v n="$n" 'BEGIN{print a / n}')" \
    "$(awk -v a="$mm" -v b="$rm_" 'BEGIN{print a / b}')" \
    "$(awk -v t="$mcm" -v hz="$hz" -v s="$secs" 'BEGIN{print t / hz / s}')" \
    "$(awk -v t="$rcm" -v hz="$hz" -v s="$secs" 'BEGIN{print t / hz / s}')" "$mpm" "$rpm"
  # Per shard against per shard of the first row (1 shard, by default).
  echo "       scaling vs ${one[n]} shard(s): Meridian $(awk -v a="$mm" -v b="${one[m]}" -v n="$n" -v f="${one[n]}" 'BEGIN{printf "%.3f", (a / n) / (b / f)}'), Redis Cluster $(awk -v a="$rm_" -v b="${one[r]}" -v n="$n" -v f="${one[n]}" 'BEGIN{printf "%.3f", (a / n) / (b / f)}')"
  last=$n
  if [ "$n" = "$(echo "$shard_counts" | awk '{print $NF}')" ] && (( n > 1 )); then
    # CPU per op (us) of each run: the server's CPU ticks over the ops the run did.
    e=(); p=(); ec=(); pc=()
    per_op() { awk -v t="$2" -v hz="$hz" -v o="$1" -v s="$secs" 'BEGIN{printf "%.3f", t / hz / (o * s) * 1e6}'; }
    for i in $(seq 1 "$rounds"); do
      order=(p e); (( i % 4 == 2 || i % 4 == 3 )) && order=(e p)
      for s in "${order[@]}"; do
        if [ "$s" = p ]; then
          read -r o t _ < <(load $mport 0 "$mpid"); p+=("$o"); pc+=("$(per_op "$o" "$t")")
        else
          read -r o t _ < <(load $eport 1 "$mpid"); e+=("$o"); ec+=("$(per_op "$o" "$t")")
        fi
      done
    done
    em=$(printf '%s\n' "${e[@]}" | median); pm=$(printf '%s\n' "${p[@]}" | median)
    ecm=$(printf '%s\n' "${ec[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    pcm=$(printf '%s\n' "${pc[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
    echo "       $n shards, main port (hops) $pm ops/s vs cluster endpoints $em ops/s: $(awk -v a="$pm" -v b="$em" 'BEGIN{printf "%.3f", a / b}')"
    echo "       CPU per op: main port $pcm us, endpoints $ecm us; extra per cross-shard command (($n-1)/$n of them): $(awk -v a="$pcm" -v b="$ecm" -v n="$n" 'BEGIN{printf "%.2f", (a - b) / ((n - 1) / n)}') us"
  fi
  stop_all
done
echo "(M CPUs, R CPUs: CPU-seconds each server used per second of load; $last shards can use at most $last)"

# Shared by the side-by-side benches (sourced, not run): the tools check, the Meridian binary,
# a scratch directory whose servers are stopped on exit, port waits, medians, and the two
# servers started pinned, both without persistence (equal configurations).
#
# The sourcing script sets `server_core` (and its ports) first; after `bench_setup`, `$bin`
# is the Meridian binary (MERIDIAN_BIN, or a release build made here) and `$work` a scratch
# directory removed on exit, with every server started by `start_meridian`/`start_redis`.

bench_setup() {
  command -v redis-server >/dev/null && command -v redis-cli >/dev/null \
    && command -v redis-benchmark >/dev/null || {
    echo "needs redis-server, redis-cli and redis-benchmark (apt-get install -y redis-server redis-tools)" >&2
    exit 1
  }
  # MERIDIAN_BIN: a binary built already (skips the release build).
  bin=${MERIDIAN_BIN:-}
  if [ -z "$bin" ]; then
    cargo build --release -p meridian-server --bin meridian >/dev/null 2>&1 \
      || cargo build --release -p meridian-server --bin meridian
    bin=target/release/meridian
  fi
  work=$(mktemp -d)
  pids=()
  trap bench_cleanup EXIT
}

bench_cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}

# Refuses a port something already answers on: the rows would measure that server instead.
port_free() {
  if redis-cli -p "$1" ping >/dev/null 2>&1; then
    echo "port $1 is in use by another server: choose other ports (MERIDIAN_PORT, REDIS_PORT...)" >&2
    exit 1
  fi
}

wait_port() {
  for _ in $(seq 1 100); do redis-cli -p "$1" ping >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "port $1 not up" >&2
  exit 1
}

# CPU time a process has used so far, in ns: the sum over its threads of the first field of
# /proc/PID/task/TID/schedstat (time on a CPU; nanosecond resolution, where /proc/PID/stat's
# clock ticks are 10 ms). A thread that ended in between is not counted.
cpu_ns() {
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {printf "%.0f\n", s}'
}

# Median of the numbers on stdin, one per line.
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else printf "%.0f\n", (a[NR/2]+a[NR/2+1])/2}'; }

# start_meridian PORT DIR [flags...]: sets mpid.
start_meridian() {
  local port=$1 dir=$2
  shift 2
  port_free "$port"
  taskset -c "$server_core" "$bin" server --port "$port" --dir "$dir" --appendonly no --save "" --log-level warn "$@" &
  mpid=$!
  pids+=("$mpid")
  wait_port "$port"
}

# start_redis PORT [flags...]: sets rpid.
start_redis() { start_server_like_redis redis-server "$@"; }

# start_server_like_redis BIN PORT [flags...]: a server taking redis-server's flags (Valkey's
# valkey-server does) started as start_redis starts Redis; sets rpid.
start_server_like_redis() {
  local server=$1 port=$2
  shift 2
  port_free "$port"
  taskset -c "$server_core" "$server" --port "$port" --save "" --appendonly no --dir "$work" \
    --daemonize no --loglevel warning "$@" &
  rpid=$!
  pids+=("$rpid")
  wait_port "$port"
}

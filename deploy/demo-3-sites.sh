#!/usr/bin/env bash
# A local three-site active-active deployment on loopback (plain-text syncer, which Meridian
# allows only on loopback). Sites a, b, c listen for clients on 7001-7003 and for each other on
# 7101-7103. Write at one site, read at another:
#   redis-cli -p 7001 set greeting hello; redis-cli -p 7003 get greeting
#   redis-cli -p 7002 info crdt; redis-cli -p 7001 crdt.digest; redis-cli -p 7002 crdt.digest
# Ctrl-C stops all three.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p meridian-server --bin meridian
bin=target/release/meridian
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait; rm -rf "$work"' EXIT INT TERM
declare -A sync=([a]=7101 [b]=7102 [c]=7103) client=([a]=7001 [b]=7002 [c]=7003)
for s in a b c; do
  peers=()
  for p in a b c; do [ "$p" = "$s" ] || peers+=(--peer "$p=127.0.0.1:${sync[$p]}"); done
  "$bin" server --site "$s" --port "${client[$s]}" --sync-port "${sync[$s]}" "${peers[@]}" \
    --dir "$work/$s" --deployment-id demo &
  pids+=("$!")
done
echo "sites a b c on ports 7001 7002 7003 (data in $work); Ctrl-C to stop"
wait

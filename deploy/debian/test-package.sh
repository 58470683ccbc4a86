#!/usr/bin/env bash
# Builds the Debian package, installs it, runs the installed binary under the service user
# with the packaged configuration (systemd is not PID 1 in CI: the binary is started as the
# unit would start it), checks /health and a write, reinstalls it as an upgrade would, removes
# and purges it, and checks that the data directory outlives all of it. Needs root and dpkg;
# says "skipped" and exits 0 without them, or when a meridian package is installed already.
#
# Usage: deploy/debian/test-package.sh [BINARY]   (default: target/release/meridian)
set -euo pipefail
cd "$(dirname "$0")/../.."
binary=${1:-target/release/meridian}

if [ "$(id -u)" != 0 ] || ! command -v dpkg-deb >/dev/null || ! command -v apt-get >/dev/null; then
  echo "test-package: skipped (needs root, dpkg and apt)"; exit 0
fi
if dpkg-query -W -f='${Status}' meridian 2>/dev/null | grep -q "install ok"; then
  echo "test-package: skipped (a meridian package is installed on this machine already)"; exit 0
fi
user_existed=0; getent passwd meridian >/dev/null && user_existed=1
data_existed=0; [ -e /var/lib/meridian ] && data_existed=1

pid=""
cleanup() {
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  dpkg --purge meridian >/dev/null 2>&1 || true
  if [ "$data_existed" = 0 ]; then rm -rf /var/lib/meridian /var/log/meridian; fi
  if [ "$user_existed" = 0 ] && getent passwd meridian >/dev/null; then deluser --system --quiet meridian >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT
fail() { echo "test-package: FAILED: $*" >&2; exit 1; }

if command -v cargo-deb >/dev/null && [ "$binary" = target/release/meridian ]; then
  deb=$(cargo deb -p meridian-server --no-build --no-strip -q | tail -1)
  echo "test-package: built $deb with cargo-deb"
else
  deb=$(python3 deploy/debian/build-deb.py --binary "$binary")
  echo "test-package: built $deb with deploy/debian/build-deb.py"
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq "$(realpath "$deb")" >/dev/null

getent passwd meridian >/dev/null || fail "no meridian user"
[ "$(stat -c %U /var/lib/meridian)" = meridian ] || fail "/var/lib/meridian is not owned by meridian"
[ -f /lib/systemd/system/meridian.service ] || fail "no unit"
dpkg-query -W -f='${Conffiles}\n' meridian | grep -q "/etc/meridian/meridian.toml" || fail "meridian.toml is not a conffile"
/usr/bin/meridian config check /etc/meridian/meridian.toml >/dev/null || fail "the packaged configuration does not check"

# A free port below the ephemeral range, followed by $1 more free ones: with several shards the
# server's cluster endpoints take the ports after its client port.
free_port() {
  python3 - "${1:-0}" <<'PY'
import random, socket, sys
extra = int(sys.argv[1])
for _ in range(1000):
    base = random.randrange(20000, 32000 - extra)
    try:
        socks = []
        for p in range(base, base + extra + 1):
            s = socket.socket(); s.bind(("127.0.0.1", p)); socks.append(s)
    except OSError:
        continue
    print(base); break
PY
}
http_status() {
  python3 - "$1" <<'PY'
import sys, urllib.request, urllib.error
try:
    print(urllib.request.urlopen(sys.argv[1], timeout=2).status)
except urllib.error.HTTPError as e:
    print(e.code)
except Exception:
    print(0)
PY
}
start() {
  port=$(free_port "$(nproc)"); mport=$(free_port)
  # As the unit runs it: the service user, the packaged configuration (ports moved aside).
  runuser -u meridian -- /usr/bin/meridian server --config /etc/meridian/meridian.toml \
    --port "$port" --metrics-port "$mport" >/tmp/meridian-package-test.log 2>&1 &
  pid=$!
  for _ in $(seq 1 200); do
    [ "$(http_status "http://127.0.0.1:$mport/health")" = 200 ] && return 0
    kill -0 "$pid" 2>/dev/null || { cat /tmp/meridian-package-test.log; fail "the service exited"; }
    sleep 0.1
  done
  cat /tmp/meridian-package-test.log; fail "/health never answered 200"
}
stop() { kill "$pid"; wait "$pid" || true; pid=""; }

start
[ "$(redis-cli -p "$port" SET package-test kept)" = OK ] || fail "SET"
[ "$(stat -c %U /var/lib/meridian/shard-0)" = meridian ] || fail "shard-0 is not owned by meridian"
stop

# An upgrade (the same package again) keeps the data.
apt-get install -y -qq --reinstall "$(realpath "$deb")" >/dev/null
start
[ "$(redis-cli -p "$port" GET package-test)" = kept ] || fail "the data did not survive the upgrade"
stop

apt-get remove -y -qq meridian >/dev/null
[ -d /var/lib/meridian/shard-0 ] || fail "removal deleted the data"
apt-get purge -y -qq meridian >/dev/null 2>&1
[ -d /var/lib/meridian/shard-0 ] || fail "purge deleted the data"
echo "test-package: passed (install, /health, upgrade, remove and purge keep /var/lib/meridian)"

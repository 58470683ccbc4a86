#!/usr/bin/env python3
"""Runs units of Redis's own Tcl test suite against Meridian and against Redis beside it.

Redis 7.0.15's suite (tests/ of the redis/redis repository at tag 7.0.15) runs in external
mode against any host:port. This script runs each chosen unit once against Meridian and once
against Debian's redis-server (the reference), each unit in its own `runtest` process bounded in
time, and prints per unit the tests each server passed and failed:

    unit                 meridian  passed failed   redis  passed failed
    ...
    N passed, M failed            (Meridian; Redis's totals beside)

A unit that hangs past --unit-timeout is killed and counts as failed. Every test Redis ran in a
unit that Meridian never reached (an error outside a test ends the rest of its block, an
exception or a timeout the unit) counts as failed too. Tests that need Redis-only internals are
skipped on both servers (SKIPPED below, one line of reason each) so the columns compare the same
tests.

The suite is never copied into the repository: --suite names an exported tree (default
/work/scratch/redis-7.0.15) or a git directory (a mirror of redis/redis), from which the tag is
exported into --export-to. src/redis-server, src/redis-cli and src/redis-benchmark in the tree
are linked to the Debian binaries, which some units run even in external mode.

Servers: with --meridian BIN (default target/debug/meridian when present) the script starts a
fresh Meridian per unit on loopback (own data directory, stopped by PID); with --port it uses a
server already running there instead. Redis is started per unit on loopback with
`--enable-debug-command yes`, a pidfile, no persistence, and stopped by its PID.

Logs and per-test results go to --out (default /tmp/redis-suite); --diff prints, per unit, the
tests Redis passes that Meridian does not.

Examples:
    tools/redis-suite.py type/incr type/string
    tools/redis-suite.py --all --diff
    tools/redis-suite.py --all --extra          # and every other unit that runs externally
    tools/redis-suite.py --no-redis --port 6379 unit/keyspace
"""

import argparse
import collections
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

# The units issue 18 measures, minus those other issues own (bitops, bitfield, dump, tracking).
DEFAULT_UNITS = [
    "unit/type/string",
    "unit/type/incr",
    "unit/type/list",
    "unit/type/list-2",
    "unit/type/list-3",
    "unit/type/hash",
    "unit/type/set",
    "unit/type/zset",
    "unit/expire",
    "unit/keyspace",
    "unit/protocol",
    "unit/info-command",
    "unit/scan",
    "unit/sort",
    "unit/other",
    "unit/multi",
    "unit/quit",
    "unit/latency-monitor",
    "unit/pubsub",
    "unit/slowlog",
    "unit/introspection",
    "unit/introspection-2",
    "unit/geo",
    "unit/hyperloglog",
    "unit/pause",
    "unit/violations",
    "integration/redis-cli",
]

# The suite's other units that run any test in external mode: other issues' (bitops, bitfield,
# dump, tracking, streams, scripting) and limits' (querybuf, lazyfree). The rest of Redis's
# list runs none there (`external:skip` or `needs:` tags on every block).
EXTRA_UNITS = [
    "unit/bitops",
    "unit/bitfield",
    "unit/dump",
    "unit/tracking",
    "unit/type/stream",
    "unit/type/stream-cgroups",
    "unit/scripting",
    "unit/functions",
    "unit/querybuf",
    "unit/lazyfree",
]

# Tests skipped on both servers: (unit, exact test name or /regexp, reason). Only tests that
# depend on Redis's own internals belong here; everything else is measured.
SYNC = ("reads the replication stream a Redis replica gets by SYNC; Meridian sites replicate "
        "by their own protocol (docs/replication.md)")
REPLICA = ("needs Redis primary/replica replication (REPLICAOF, min-replicas-to-write): Meridian sites "
           "are peers, not Redis replicas (docs/replication.md)")
SKIPPED = [
    ("unit/multi", "exec with write commands and state change", REPLICA),
    ("unit/multi", "exec with read commands and stale replica state change", REPLICA),
    ("unit/type/string", "GETDEL propagate as DEL command to replica", SYNC),
    ("unit/type/string", "GETEX without argument does not propagate to replica", SYNC),
    ("unit/type/list", "SWAPDB wants to wake blocked client, but the key already expired", SYNC),
    ("unit/type/list", "MULTI + LPUSH + EXPIRE + DEBUG SLEEP on blocked client, key already expired",
     SYNC),
    ("unit/type/list", "BLMPOP propagate as pop with count command to replica", SYNC),
    ("unit/type/list", "LMPOP propagate as pop with count command to replica", SYNC),
    ("unit/type/zset", "ZMPOP propagate as pop with count command to replica", SYNC),
    ("unit/type/zset", "BZMPOP propagate as pop with count command to replica", SYNC),
    ("unit/expire", "All TTL in commands are propagated as absolute timestamp in replication stream",
     SYNC),
    ("unit/expire", "GETEX propagate as to replica as PERSIST, DEL, or nothing", SYNC),
    ("unit/expire", "SCAN: Lazy-expire should not be wrapped in MULTI/EXEC", SYNC),
    ("unit/expire", "RANDOMKEY: Lazy-expire should not be wrapped in MULTI/EXEC", SYNC),
    ("unit/multi", "MULTI / EXEC is not propagated (single write command)", SYNC),
    ("unit/multi", "/^MULTI . EXEC is propagated correctly", SYNC),
    ("unit/multi", "MULTI / EXEC with REPLICAOF", SYNC),
    ("unit/multi", "/^MULTI propagation of ", SYNC),
    ("unit/scripting", "SPOP: We can call scripts rewriting client->argv from Lua", SYNC),
    ("unit/scripting", "MGET: mget shouldn't be propagated in Lua", SYNC),
    ("unit/scripting", "EXPIRE: We can call scripts rewriting client->argv from Lua", SYNC),
    ("unit/scripting", "INCRBYFLOAT: We can call scripts expanding client->argv from Lua", SYNC),
    ("unit/scripting", "not enough good replicas", REPLICA),
    ("integration/redis-cli", "Connecting as a replica",
     "redis-cli --replica reads the replication stream by SYNC; Meridian sites replicate by their "
     "own protocol (docs/replication.md)"),
]

# runtest's defaults for this script (see print_help_screen in tests/test_helper.tcl).
RUNTEST_FLAGS = ["--durable", "--ignore-encoding"]
DEFAULT_TAGS = "-needs:debug"

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LINE = re.compile(r"^\[(ok|err|exception|skip|ignore)\]: (.*)$")
OK_NAME = re.compile(r"^(.*) \(\d+ ms\)$")
ERR_NAME = re.compile(r"^(.*) in tests/[^ ]+\.tcl$")

DEBIAN = {"redis-server": "/usr/bin/redis-server", "redis-cli": "/usr/bin/redis-cli",
          "redis-benchmark": "/usr/bin/redis-benchmark"}


def unit_name(u):
    return u if u.startswith(("unit/", "integration/")) else "unit/" + u


def prepare_suite(suite, export_to):
    """Returns an exported suite tree, exporting tag 7.0.15 from a git directory if needed."""
    suite = os.path.abspath(suite)
    if os.path.exists(os.path.join(suite, "tests", "test_helper.tcl")):
        tree = suite
    else:
        git_dir = suite if os.path.exists(os.path.join(suite, "objects")) else os.path.join(suite, ".git")
        if not os.path.isdir(git_dir):
            sys.exit(f"{suite}: neither a suite tree (tests/test_helper.tcl) nor a git directory")
        tree = os.path.abspath(export_to)
        if not os.path.exists(os.path.join(tree, "tests", "test_helper.tcl")):
            os.makedirs(tree, exist_ok=True)
            archive = subprocess.Popen(["git", "--git-dir", git_dir, "archive", "7.0.15"],
                                       stdout=subprocess.PIPE)
            subprocess.run(["tar", "-x", "-C", tree], stdin=archive.stdout, check=True)
            if archive.wait() != 0:
                sys.exit(f"git archive 7.0.15 failed in {git_dir}")
    os.makedirs(os.path.join(tree, "src"), exist_ok=True)
    os.makedirs(os.path.join(tree, "tests", "tmp"), exist_ok=True)
    for name, target in DEBIAN.items():
        link = os.path.join(tree, "src", name)
        if os.path.islink(link) and os.readlink(link) == target:
            continue
        if os.path.lexists(link):
            if not os.path.islink(link):
                sys.exit(f"{link} exists and is not a link: refusing to replace a built binary")
            os.unlink(link)
        os.symlink(target, link)
    return tree


def shim_tree(tree):
    """A copy of the suite's harness whose external-mode setup tolerates a server without
    FUNCTION (every external unit starts with `r function flush`; scripting is issue 19's).
    Only that one line of the harness differs; the tests are Redis's own. Rows run on the shim
    are marked so in the table."""
    shim = tree.rstrip("/") + "-shim"
    helper = os.path.join(shim, "tests", "support", "server.tcl")
    if not os.path.exists(helper):
        os.makedirs(shim, exist_ok=True)
        shutil.copytree(os.path.join(tree, "tests"), os.path.join(shim, "tests"),
                        ignore=shutil.ignore_patterns("tmp"), dirs_exist_ok=True)
        os.makedirs(os.path.join(shim, "tests", "tmp"), exist_ok=True)
        shutil.copy2(os.path.join(tree, "runtest"), os.path.join(shim, "runtest"))
        os.makedirs(os.path.join(shim, "src"), exist_ok=True)
        for name, target in DEBIAN.items():
            link = os.path.join(shim, "src", name)
            if not os.path.lexists(link):
                os.symlink(target, link)
        with open(helper) as f:
            text = f.read()
        if "    r function flush\n" not in text:
            sys.exit(f"{helper}: the line to shim is not there")
        with open(helper, "w") as f:
            f.write(text.replace("    r function flush\n", "    catch {r function flush}\n", 1))
    return shim


def lacks_function(host, port):
    """True when the server answers FUNCTION FLUSH with an unknown-command error."""
    try:
        with socket.create_connection((host, port), timeout=5) as s:
            s.sendall(b"*2\r\n$8\r\nFUNCTION\r\n$5\r\nFLUSH\r\n")
            return s.recv(256).startswith(b"-ERR unknown command")
    except OSError:
        return False


# A server with several shards listens on its port and the next ones (its cluster
# endpoints, port+1...port+shards): a block this wide is checked free. Ports come from
# below the kernel's ephemeral range (32768-60999 by default), where an outgoing
# connection of another process can take a port between the check and the bind.
PORT_BLOCK = 8
PORT_FIRST, PORT_SPAN = 12000, 18000


def free_port():
    for _ in range(1000):
        base = PORT_FIRST + random.randrange(PORT_SPAN // PORT_BLOCK) * PORT_BLOCK
        socks = []
        try:
            for p in range(base, base + PORT_BLOCK):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    sys.exit("no free block of ports")


def wait_port(port, proc, seconds=30):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return True
                time.sleep(0.05)
        except OSError:
            time.sleep(0.05)
    return False


class Server:
    """A server started for one unit on loopback, stopped by its PID."""

    def __init__(self, kind, binary, workdir, extra=()):
        """`extra`: flags appended to the server's command line (tools/redis-py-suite.py's
        `--shards 1`, say)."""
        self.kind, self.dir = kind, tempfile.mkdtemp(dir=workdir, prefix=kind + "-")
        self.extra = list(extra)
        # A port taken between the check and the bind makes the server exit at once: try
        # another block.
        for attempt in range(3):
            self.port = free_port()
            if self.start(kind, binary):
                return
            self.stop()
        sys.exit(f"{kind} did not start; see {self.dir}/server.log")

    def start(self, kind, binary):
        log = open(os.path.join(self.dir, "server.log"), "wb")
        if kind == "redis":
            pidfile = os.path.join(self.dir, "redis.pid")
            args = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", self.dir,
                    "--pidfile", pidfile, "--enable-debug-command", "yes", "--save", "",
                    "--appendonly", "no", "--daemonize", "no"]
        else:
            args = [binary, "server", "--port", str(self.port), "--bind", "127.0.0.1",
                    "--dir", os.path.join(self.dir, "data"), "--enable-debug-command", "yes"]
        args += self.extra
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        return wait_port(self.port, self.proc)

    def alive(self):
        return self.proc.poll() is None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(os.path.join(self.dir, "data"), ignore_errors=True)


def server_for(kind, args, meridian, extra=()):
    """A fresh server of `kind` ("meridian" with `extra` flags, or "redis") for one run, unless
    --port (Meridian) or --redis-port (Redis) names one already running. Returns (the Server,
    or None for one already running, its port). For the client-suite tools, whose `args` have
    port, redis_port, redis_server and out."""
    if kind == "meridian" and args.port is None:
        server = Server("meridian", meridian, args.out, list(extra))
        return server, server.port
    if kind == "redis" and args.redis_port is None:
        server = Server("redis", args.redis_server, args.out)
        return server, server.port
    return None, (args.port if kind == "meridian" else args.redis_port)


class CountTable:
    """What the client-suite tools print: a header, then per row (a test file or binary) the
    tests each server passed, failed and left out (skipped, ignored or pending: `other`), the
    tests Redis passed and Meridian did not (`missed`), and each server's totals."""

    def __init__(self, first, other, labels, kinds):
        self.other, self.kinds = other, list(kinds)
        self.w = max([len(first)] + [len(x) for x in labels]) + 1
        self.totals = {k: [0, 0, 0] for k in self.kinds}
        print(f"{first:{self.w}} {'meridian':>8} {'failed':>6} {other:>7}   "
              f"{'redis':>5} {'failed':>6} {other:>7}", flush=True)

    def row(self, label, counts, notes=""):
        """`counts`: {kind: (passed, failed, other)} for the servers that ran."""
        for kind, c in counts.items():
            for i, n in enumerate(c):
                self.totals[kind][i] += n
        m = [str(n) for n in counts.get("meridian", ("-",) * 3)]
        r = [str(n) for n in counts.get("redis", ("-",) * 3)]
        print(f"{label:{self.w}} {m[0]:>8} {m[1]:>6} {m[2]:>7}   {r[0]:>5} {r[1]:>6} {r[2]:>7}"
              + (f"  {notes}" if notes else ""), flush=True)

    @staticmethod
    def missed(ref, got, passed, detail=None):
        """Prints the tests `ref` (Redis's {name: state}) ran with state `passed` that `got`
        (Meridian's) did not, each followed by `detail(name)` when that gives a line."""
        for n in sorted(ref):
            if ref[n] == passed and got.get(n) != passed:
                print(f"    not passed by meridian ({got.get(n, 'not run')}): {n}")
                line = detail(n) if detail else None
                if line:
                    print(f"        {line}")

    def print_totals(self, notes=None):
        for kind in self.kinds:
            extra = (notes or {}).get(kind, "")
            print("{}: {} passed, {} failed, {} {}".format(kind, *self.totals[kind], self.other)
                  + (f"  ({extra})" if extra else ""))


def run_checked(server, run):
    """Returns `run()`'s (results, note), the note saying so when `server` (one this script
    started; None for a server already running) died under it; stops that server after."""
    try:
        res, note = run()
        if server is not None and not server.alive():
            note = (note + " server-died").strip()
    finally:
        if server is not None:
            server.stop()
    return res, note


def parse_output(text):
    """Counts the runtest output: passed and failed test names, exceptions, skips."""
    res = {"ok": [], "err": [], "exception": [], "skip": [], "ignore": [], "why": {}}
    lines = text.splitlines()
    for i, raw in enumerate(lines):
        m = LINE.match(ANSI.sub("", raw))
        if not m:
            continue
        status, data = m.groups()
        if status == "ok":
            n = OK_NAME.match(data)
            data = n.group(1) if n else data
        elif status == "err":
            n = ERR_NAME.match(data)
            data = n.group(1) if n else data
            # The error's text: the longest of the next two lines (Redis prints the error
            # message, sometimes cut, then the assertion or the full message).
            nxt = [ANSI.sub("", x).strip() for x in lines[i + 1:i + 3]]
            res["why"].setdefault(data, max(nxt, key=len) if nxt else "")
        res[status].append(data)
    return res


def run_unit(tree, unit, host, port, args, log_path):
    """Runs one unit; returns (parsed results, 'timeout'|'exception'|'crash'|'')."""
    cmd = ["./runtest", "--host", host, "--port", str(port), "--single", unit,
           "--baseport", str(args.baseport), "--timeout", str(args.unit_timeout)]
    cmd += RUNTEST_FLAGS
    if args.tags:
        cmd += ["--tags", args.tags]
    for u, test, _ in SKIPPED:
        if u == unit:
            cmd += ["--skiptest", test]
    for extra in args.runtest_arg:
        cmd += extra.split()
    note = ""
    with open(log_path, "wb") as log:
        log.write((" ".join(cmd) + "\n").encode())
        log.flush()
        proc = subprocess.Popen(cmd, cwd=tree, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)
        try:
            proc.wait(args.unit_timeout)
        except subprocess.TimeoutExpired:
            note = "timeout"
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    with open(log_path, "rb") as log:
        text = log.read().decode("utf-8", "replace")
    res = parse_output(text)
    if not note and res["exception"]:
        note = "exception"
    elif not note and "All tests passed" not in text and "tests failed" not in text:
        note = "stopped"
    return res, note


def counts(res):
    return len(res["ok"]), len(res["err"]) + len(res["exception"])


def write_report(path, rows, tot):
    """The per-unit table (Redis's passes, Meridian's, their ratio) and, per unit, each test
    Redis passes that Meridian does not, with the first line of its error."""
    out = ["| Unit | Redis passed | Meridian passed | Meridian failed | Meridian / Redis |",
           "|---|---:|---:|---:|---:|"]
    for unit, m, r, _ in rows:
        if m[0] is None or r[0] is None:
            continue
        ratio = f"{100.0 * m[0] / r[0]:.1f}%" if r[0] else "-"
        note = f" ({m[2]})" if m[2] else ""
        out.append(f"| {unit}{note} | {r[0]} | {m[0]} | {m[1]} | {ratio} |")
    if tot["redis_p"]:
        out.append(f"| **total** | **{tot['redis_p']}** | **{tot['meridian_p']}** | "
                   f"**{tot['meridian_f']}** | **{100.0 * tot['meridian_p'] / tot['redis_p']:.1f}%** |")
    out.append("")
    for unit, _, _, row in rows:
        if "redis" not in row or "meridian" not in row:
            continue
        mres = row["meridian"][0]
        missing = collections.Counter(row["redis"][0]["ok"]) - collections.Counter(mres["ok"])
        if not missing:
            continue
        out.append(f"### {unit}")
        out.append("")
        for name in sorted(missing):
            why = mres["why"].get(name, "not reached")
            out.append(f"- {name}: `{why[:160]}`")
        out.append("")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.split("\n")[1:]))
    p.add_argument("units", nargs="*", help="units, e.g. type/incr or integration/redis-cli")
    p.add_argument("--all", action="store_true", help="every unit issue 18 measures")
    p.add_argument("--extra", action="store_true",
                   help="also (or, with no unit named, only) the other units that run externally")
    p.add_argument("--suite", default="/work/scratch/redis-7.0.15")
    p.add_argument("--export-to", default="/work/scratch/redis-7.0.15-export")
    p.add_argument("--host", default="127.0.0.1", help="Meridian's host with --port")
    p.add_argument("--port", type=int, help="a Meridian already running (else --meridian starts one)")
    p.add_argument("--meridian", default=None, help="meridian binary to start per unit")
    p.add_argument("--redis-server", default=DEBIAN["redis-server"])
    p.add_argument("--no-redis", action="store_true", help="skip Redis's column")
    p.add_argument("--no-meridian", action="store_true", help="only Redis's column")
    p.add_argument("--unit-timeout", type=int, default=600, help="seconds per unit run")
    p.add_argument("--tags", default=DEFAULT_TAGS, help="runtest --tags (default %(default)s)")
    p.add_argument("--runtest-arg", action="append", default=[], help="extra runtest flags")
    # runtest's own test server listens just below --baseport: runs side by side (other
    # helpers, other worktrees) need different ones.
    p.add_argument("--baseport", type=int, default=21000 + 40 * (os.getpid() % 250),
                   help="runtest --baseport (default: from this process's id)")
    p.add_argument("--out", default="/tmp/redis-suite")
    p.add_argument("--diff", action="store_true", help="list tests Redis passes and Meridian not")
    p.add_argument("--report", help="write a Markdown table and the failing tests to this file")
    p.add_argument("--from-logs", action="store_true",
                   help="run nothing: count the logs a previous run left in --out")
    args = p.parse_args()

    named = [unit_name(u) for u in args.units]
    if args.all:
        units = DEFAULT_UNITS + named
    elif named:
        units = named
    else:
        units = [] if args.extra else DEFAULT_UNITS
    if args.extra:
        units += [u for u in EXTRA_UNITS if u not in units]
    tree = None if args.from_logs else prepare_suite(args.suite, args.export_to)
    os.makedirs(args.out, exist_ok=True)
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    meridian = args.meridian or os.path.join(repo, "target", "debug", "meridian")
    if not args.from_logs and not args.no_meridian and args.port is None and not os.path.exists(meridian):
        sys.exit(f"{meridian}: no such binary (build it, or give --meridian or --port)")

    reasons = {}
    for u, test, why in SKIPPED:
        if u in units:
            reasons.setdefault(why, []).append(f"{u}: {test}")
    for why, tests in reasons.items():
        print(f"skipped ({why}):")
        for t in tests:
            print(f"    {t}")
    print(f"{'unit':26} {'meridian':>8} {'failed':>7}   {'redis':>6} {'failed':>7}", flush=True)
    tot = collections.Counter()
    report_rows = []
    shimmed = False
    for unit in units:
        row = {}
        for kind in ("redis", "meridian"):
            if (kind == "redis" and args.no_redis) or (kind == "meridian" and args.no_meridian):
                continue
            log = os.path.join(args.out, f"{unit.replace('/', '_')}.{kind}.log")
            if args.from_logs:
                if not os.path.exists(log):
                    continue
                with open(log, "rb") as f:
                    text = f.read().decode("utf-8", "replace")
                res = parse_output(text)
                note = "" if ("All tests passed" in text or "tests failed" in text) else "stopped"
                row[kind] = (res, note)
                continue
            server = None
            if kind == "redis":
                server = Server("redis", args.redis_server, args.out)
                host, port = "127.0.0.1", server.port
            elif args.port is None:
                server = Server("meridian", meridian, args.out)
                host, port = "127.0.0.1", server.port
            else:
                host, port = args.host, args.port
            log = os.path.join(args.out, f"{unit.replace('/', '_')}.{kind}.log")
            def run():
                nonlocal shimmed
                suite = tree
                if kind == "meridian" and lacks_function(host, port):
                    suite = shim_tree(tree)
                    shimmed = True
                return run_unit(suite, unit, host, port, args, log)

            res, note = run_checked(server, run)
            row[kind] = (res, note)
            with open(os.path.join(args.out, f"{unit.replace('/', '_')}.{kind}.results"), "w") as f:
                for status in ("ok", "err", "exception", "skip", "ignore"):
                    for name in res[status]:
                        f.write(f"{status}\t{name}\n")
        cells = []
        for kind in ("meridian", "redis"):
            if kind not in row:
                cells.append((None, None, ""))
                continue
            res, note = row[kind]
            passed, failed = counts(res)
            if kind == "meridian" and "redis" in row:
                # Tests Redis ran in this unit that Meridian never reached (an error outside a
                # test ends its block; a timeout ends the unit) count as failed.
                r_res = row["redis"][0]
                ran = sum(counts(r_res))
                failed += max(0, ran - passed - failed)
            cells.append((passed, failed, note))
            tot[kind + "_p"] += passed
            tot[kind + "_f"] += failed

        def fmt(c):
            return ("-", "-") if c[0] is None else (str(c[0]), str(c[1]))
        m, r = cells
        notes = "  ".join(f"{k}:{c[2]}" for k, c in (("meridian", m), ("redis", r)) if c[2])
        print(f"{unit:26} {fmt(m)[0]:>8} {fmt(m)[1]:>7}   {fmt(r)[0]:>6} {fmt(r)[1]:>7}  {notes}",
              flush=True)
        report_rows.append((unit, m, r, row))
        if args.diff and "redis" in row and "meridian" in row:
            missing = collections.Counter(row["redis"][0]["ok"]) - collections.Counter(row["meridian"][0]["ok"])
            for name in sorted(missing.elements()):
                print(f"    not passed by meridian: {name}")
    if args.report:
        write_report(args.report, report_rows, tot)
    if not args.no_redis:
        print(f"redis: {tot['redis_p']} passed, {tot['redis_f']} failed")
    if not args.no_meridian:
        if shimmed:
            print("meridian ran on the shim harness: `r function flush` at the start of each "
                  "external unit tolerated (Meridian has no FUNCTION yet)")
        print(f"{tot['meridian_p']} passed, {tot['meridian_f']} failed")


if __name__ == "__main__":
    main()

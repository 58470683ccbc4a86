#!/usr/bin/env python3
"""Runs test binaries of redis-rs's own test suite against Meridian and against Redis beside it.

redis-rs's integration tests (redis/tests/ of the redis-rs/redis-rs repository, release 1.6.0
here) start a server of their own for every test: the `redis-test` crate's `RedisServer` runs
`redis-server` from PATH (or $REDISRS_SERVER_BIN) with `--save '' --logfile F
--enable-debug-command yes --port P --bind 127.0.0.1` (TLS and Unix-socket variants add their
flags), P a free port the kernel picked. This script runs each chosen test binary twice: once
with the Debian redis-server first in PATH (the reference), once with a `redis-server` of its
own first in PATH, written to a temporary directory at run time, that translates those
arguments into Meridian's and execs Meridian (`--shards 1` unless --shards says otherwise,
`--appendonly no`). It prints per binary what each server passed, failed and ignored:

    binary            meridian  failed ignored   redis  failed ignored
    ...

then the totals. --diff lists, per binary, the tests Redis passes and Meridian does not
(docs/compatibility.md keeps the table and explains each one left). Each test runs in a
process of its own, as cargo-nextest (redis-rs's runner) runs them: the tests set
process-wide state (the async runtime preference). --test-threads of them run at once; one
that runs past --test-timeout is killed with the servers it started and counts as failed
("timeout"), as do the tests of a binary not started within --timeout.

redis-rs is never copied into the repository: --redis-rs names an exported tree (default
/work/scratch/redis-rs-1.6.0) and --target-dir its own cargo target directory. The test
binaries are built there with --features (`cargo test --no-run`) unless --no-build.

Examples:
    tools/redis-rs-suite.py --diff
    tools/redis-rs-suite.py --protocol RESP3 test_basic test_async
    tools/redis-rs-suite.py --shards 3 --no-redis test_basic
    tools/redis-rs-suite.py --server-type tcp+tls test_basic
    tools/redis-rs-suite.py test_async --filter pubsub
"""

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time

import redis_suite  # tools/redis-suite.py (tools/redis_suite.py loads it)

HERE = os.path.dirname(os.path.abspath(__file__))

# The test binaries docs/compatibility.md measures. Not run (they need what Meridian is not,
# or what neither server has here): test_cluster and test_cluster_async spawn Redis Cluster nodes with
# `--cluster-enabled yes` and join them by `redis-cli --cluster create`; test_sentinel spawns
# Sentinels and replicas; test_module_json and test_module_bloom load RedisJSON/RedisBloom;
# test_tls_cert_auth needs Redis 8.6's certificate-based user mapping over TLS;
# test_credentials_provider_failures and test_auth test token-based and Entra ID credential
# providers (cloud identity services); test_hotkeys is Redis 8.6's HOTKEYS.
DEFAULT_TARGETS = [
    "test_basic",
    "test_async",
    "test_acl",
    "test_bignum",
    "test_cache",
    "test_geospatial",
    "test_script",
    "test_streams",
    "test_types",
    "test_support",
    "parser",
]

# Tests skipped on both servers (libtest --skip patterns: a test whose name contains one).
CLUSTER = ("starts a Redis Cluster (redis-server --cluster-enabled yes, joined by redis-cli "
           "--cluster create): Meridian's shards are not Redis Cluster nodes")
SKIPPED = [
    ("module_json", "needs the RedisJSON module (JSON.*): Meridian loads no Redis modules, and "
     "Debian's redis-server has none here"),
    ("token_based_authentication_acl_tests::cluster::", CLUSTER),
    ("test_cache_async_cluster_", CLUSTER),
]

# The features the binaries are built with: the async runtimes, connection manager, client
# cache, pools, number types, JSON value conversions and rustls (for --server-type tcp+tls;
# its test support code needs the cluster client too); no Sentinel.
DEFAULT_FEATURES = ("tokio-comp,smol-comp,connection-manager,cache-aio,r2d2,bb8,rust_decimal,"
                    "bigdecimal,num-bigint,uuid,token-based-authentication,json,tls-rustls,"
                    "tls-rustls-insecure,tokio-rustls-comp,smol-rustls-comp,cluster,"
                    "cluster-async")

# The `redis-server` the Meridian run finds first in PATH. It answers `-v` as redis-test's
# get_major_version reads it (Meridian's INFO says redis_version 7.0.15), translates the
# arguments RedisServer passes, refuses the ones Meridian has no counterpart for, and execs
# Meridian (the harness stops the server by killing that PID).
WRAPPER = r'''#!{python}
import os, sys
MERIDIAN = {meridian!r}
EXTRA = {extra!r}
RENAMED = {{"--logfile": "--log-file"}}
DROPPED = set()
REFUSED = {{"--unixsocket": "Meridian has no Unix-socket listener",
           "--loadmodule": "Meridian loads no Redis modules",
           "--cluster-enabled": "Meridian's shards are not Redis Cluster nodes",
           "--sentinel": "Meridian is no Sentinel"}}
argv = sys.argv[1:]
if argv in (["-v"], ["--version"]):
    print("Redis server v=7.0.15 (Meridian through the redis-rs suite's wrapper)")
    sys.exit(0)
out, data = [], None
i = 0
while i < len(argv):
    a = argv[i]
    if not a.startswith("--"):
        sys.exit("redis-server wrapper: a configuration file (%s) is Redis's format, not Meridian's" % a)
    v = argv[i + 1] if i + 1 < len(argv) else ""
    i += 2
    if a in REFUSED:
        sys.exit("redis-server wrapper: %s: %s" % (a, REFUSED[a]))
    if a in DROPPED:
        continue
    if a == "--logfile":
        data = os.path.join(os.path.dirname(v), "meridian-data")
    out += [RENAMED.get(a, a), v]
if data is None:
    data = os.path.join(os.getcwd(), "meridian-data-%d" % os.getpid())
os.execv(MERIDIAN, [MERIDIAN, "server", "--dir", data] + out + EXTRA)
'''

# libtest's last line, for a process that ran one test.
SUMMARY = re.compile(r"^test result: \w+\. (\d+) passed; (\d+) failed; (\d+) ignored", re.M)
LISTED = re.compile(r"^(\S+): test$", re.M)


def build(args):
    """{target name: test executable} from `cargo test --no-run --message-format=json`."""
    cmd = ["nice", "-n", "5", "cargo", "test", "--locked", "-p", "redis", "--no-run",
           "--message-format=json", "--features", args.features]
    for t in args.targets:
        cmd += ["--test", t]
    env = dict(os.environ, CARGO_TARGET_DIR=args.target_dir)
    proc = subprocess.run(cmd, cwd=args.redis_rs, env=env, stdout=subprocess.PIPE)
    exes = {}
    for line in proc.stdout.decode(errors="replace").splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if proc.returncode != 0 and msg.get("reason") == "compiler-message" \
                and (msg.get("message") or {}).get("level") == "error":
            print(msg["message"].get("rendered", ""), file=sys.stderr)
        target = msg.get("target") or {}
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") \
                and "test" in target.get("kind", []):
            exes[target["name"]] = msg["executable"]
    if proc.returncode != 0:
        sys.exit("cargo test --no-run failed (its errors are above)")
    missing = [t for t in args.targets if t not in exes]
    if missing:
        sys.exit(f"no test executable for {', '.join(missing)} (check --features)")
    return exes


def write_wrapper(bindir, args):
    """A `redis-server` for the Meridian run, in `bindir`."""
    extra = ["--shards", args.shards, "--appendonly", "no"]
    if args.cluster_api:
        extra += ["--cluster-api", args.cluster_api]
    extra += args.meridian_arg
    path = os.path.join(bindir, "redis-server")
    with open(path, "w") as f:
        f.write(WRAPPER.format(python=sys.executable, meridian=os.path.abspath(args.meridian),
                               extra=extra))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def run_one(args, exe, name, env, log):
    """One test in a process of its own, as cargo-nextest runs redis-rs's suite (its tests
    set process-wide state: the async runtime preference)."""
    cmd = [exe, "--exact", name, "--test-threads=1"]
    # Its own session, so that a timeout kills the servers the test started too.
    proc = subprocess.Popen(cmd, cwd=os.path.join(args.redis_rs, "redis"), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=args.test_timeout)
        status = None
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        status = "timeout"
    text = out.decode(errors="replace")
    if status is None:
        found = SUMMARY.findall(text)
        if not found:
            status = "FAILED"  # died before its summary: a crash or an abort
        else:
            passed, failed, ignored = (int(n) for n in found[-1])
            status = {(1, 0, 0): "ok", (0, 1, 0): "FAILED", (0, 0, 1): "ignored"}.get(
                (passed, failed, ignored), "not run")
    log.write(f"==== {name}: {status}\n{text}\n".encode())
    return status


def run_binary(args, exe, bindir, tmpdir, log_path):
    """{test name: "ok" | "FAILED" | "ignored" | "timeout"} for one binary against one server."""
    filt = [args.filter] if args.filter else []
    cwd = os.path.join(args.redis_rs, "redis")

    def listed(extra):
        out = subprocess.run([exe, "--list"] + extra + filt, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, cwd=cwd).stdout
        return LISTED.findall(out.decode(errors="replace"))
    ignored = set(listed(["--ignored"]))
    skip = args.skip + [pattern for pattern, _ in SKIPPED]
    names = [n for n in listed([]) if not any(s in n for s in skip)]
    env = dict(os.environ)
    env.pop("REDISRS_SERVER_BIN", None)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")
    env["REDISRS_SERVER_TYPE"] = args.server_type
    # The harness's temporary directories (server logs, Meridian's data) go here, removed at
    # the end even when a test was killed before its own clean-up.
    env["TMPDIR"] = tmpdir
    env["PROTOCOL"] = args.protocol
    env.setdefault("RUST_BACKTRACE", "1")
    res = {n: "ignored" for n in names if n in ignored}
    todo = [n for n in names if n not in ignored]
    deadline = time.time() + args.timeout
    note = ""
    with open(log_path, "wb") as log, \
            concurrent.futures.ThreadPoolExecutor(args.test_threads) as pool:
        futures = {}
        for name in todo:
            futures[name] = pool.submit(
                lambda n: "timeout" if time.time() > deadline else run_one(args, exe, n, env, log),
                name)
        for name in todo:
            res[name] = futures[name].result()
    if time.time() > deadline:
        note = "timeout"
    return res, note


def tally(res):
    passed = sum(1 for s in res.values() if s == "ok")
    failed = sum(1 for s in res.values() if s in ("FAILED", "timeout", "not run"))
    ignored = sum(1 for s in res.values() if s == "ignored")
    return passed, failed, ignored


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.split("\n")[1:]))
    p.add_argument("targets", nargs="*", help="redis-rs test binaries (default: the table's)")
    p.add_argument("--redis-rs", default="/work/scratch/redis-rs-1.6.0")
    p.add_argument("--target-dir", default="/work/scratch/redis-rs-target")
    p.add_argument("--features", default=DEFAULT_FEATURES, help="redis crate features")
    p.add_argument("--no-build", action="store_true",
                   help="use the binaries already built (cargo still names them)")
    p.add_argument("--meridian", default=None, help="meridian binary (default target/debug/meridian)")
    p.add_argument("--shards", default="1", help="Meridian's --shards (default 1)")
    p.add_argument("--cluster-api", choices=("yes", "no"),
                   help="Meridian's --cluster-api (default: no with several shards; the "
                        "endpoints' ports, port+1..., may be another test server's)")
    p.add_argument("--meridian-arg", action="append", default=[], help="extra Meridian flags")
    p.add_argument("--redis-server", default=redis_suite.DEBIAN["redis-server"])
    p.add_argument("--no-redis", action="store_true", help="skip Redis's column")
    p.add_argument("--protocol", choices=("RESP2", "RESP3"), default="RESP2",
                   help="redis-rs's PROTOCOL (default RESP2)")
    p.add_argument("--server-type", choices=("tcp", "tcp+tls"), default="tcp",
                   help="redis-rs's REDISRS_SERVER_TYPE: tcp+tls has each server listen on a "
                        "TLS port only, with certificates the harness makes by openssl")
    p.add_argument("--filter", help="only tests whose name contains this")
    p.add_argument("--skip", action="append", default=[], help="libtest --skip (repeatable)")
    p.add_argument("--test-threads", type=int, default=2, help="tests run at once")
    p.add_argument("--test-timeout", type=int, default=120, help="seconds per test")
    p.add_argument("--timeout", type=int, default=1800,
                   help="seconds per binary and server; tests not started by then: timeout")
    p.add_argument("--out", default="/tmp/redis-rs-suite")
    p.add_argument("--diff", action="store_true", help="list tests Redis passes and Meridian not")
    args = p.parse_args()

    args.targets = args.targets or DEFAULT_TARGETS
    if args.cluster_api is None and args.shards != "1":
        # redis-rs asks the kernel for one free port per server; the cluster endpoints
        # would listen on the next ones, which other tests' servers may have taken.
        args.cluster_api = "no"
    args.redis_rs = os.path.abspath(args.redis_rs)
    repo = os.path.dirname(HERE)
    args.meridian = args.meridian or os.path.join(repo, "target", "debug", "meridian")
    if not os.path.exists(args.meridian):
        sys.exit(f"{args.meridian}: no such binary (build it, or give --meridian)")
    if not os.path.exists(os.path.join(args.redis_rs, "redis", "tests", "support", "mod.rs")):
        sys.exit(f"{args.redis_rs}: not a redis-rs tree (export a release tag there)")
    os.makedirs(args.out, exist_ok=True)
    exes = build(args)

    bindirs = {}
    tmp = tempfile.mkdtemp(prefix="redis-rs-suite-")
    try:
        bindirs["meridian"] = os.path.join(tmp, "meridian")
        os.makedirs(bindirs["meridian"])
        write_wrapper(bindirs["meridian"], args)
        bindirs["redis"] = os.path.join(tmp, "redis")
        os.makedirs(bindirs["redis"])
        os.symlink(os.path.abspath(args.redis_server), os.path.join(bindirs["redis"], "redis-server"))

        for pattern, reason in SKIPPED:
            print(f"skipped on both: *{pattern}*: {reason}")
        kinds = ["meridian"] + ([] if args.no_redis else ["redis"])
        table = redis_suite.CountTable("binary", "ignored", args.targets, kinds)
        for target in args.targets:
            row = {}
            for kind in kinds:
                log = os.path.join(args.out, f"{target}.{kind}.log")
                scratch = tempfile.mkdtemp(dir=tmp, prefix=f"{kind}-")
                row[kind] = run_binary(args, exes[target], bindirs[kind], scratch, log)
                shutil.rmtree(scratch, ignore_errors=True)
            notes = "  ".join(f"{k}:{v[1]}" for k, v in row.items() if v[1])
            table.row(target, {k: tally(v[0]) for k, v in row.items()}, notes)
            if args.diff and "redis" in row:
                table.missed(row["redis"][0], row["meridian"][0], "ok")
        table.print_totals()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

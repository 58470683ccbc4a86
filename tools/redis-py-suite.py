#!/usr/bin/env python3
"""Runs files of redis-py's own test suite against Meridian and against Redis beside it.

redis-py's tests (tests/ of the redis/redis-py repository, 8.1.0 here) run against any server
given by `--redis-url`. This script runs each chosen file once against Meridian and once
against Debian's redis-server (the reference), one pytest process per file and server, each
against a server of its own started for that file, and prints per file what each server
passed, failed and skipped:

    file                                  meridian  passed failed skipped   redis  passed failed skipped
    ...

then the totals. --diff lists, per file, the tests Redis passes and Meridian does not
(docs/compatibility.md keeps the table and explains each one left).

redis-py is never copied into the repository: --redis-py names an exported tree (default
/work/scratch/redis-py-8.1.0) and --python an interpreter with redis-py's test dependencies
(pytest, pytest-asyncio, pytest-timeout, ujson, numpy).

Servers are started and stopped as tools/redis-suite.py does (its `Server`): Meridian with
`--shards 1` unless --shards says otherwise. Meridian with several shards turns its cluster
API on, INFO says `cluster_enabled:1`, and redis-py's conftest then runs the cluster variant
of every test through `RedisCluster` (it waits for --cluster-nodes nodes: the shard count);
`--cluster-api no` gives the standalone suite through the main port's routing instead.
With --port (and --redis-port) the servers already running there are used.

Examples:
    tools/redis-py-suite.py tests/test_commands.py --diff
    tools/redis-py-suite.py --protocol 3 tests/test_commands.py
    tools/redis-py-suite.py --shards 2 --cluster-api no tests/test_commands.py
    tools/redis-py-suite.py --shards 2 --no-redis tests/test_cluster.py
"""

import argparse
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import redis_suite  # tools/redis-suite.py (tools/redis_suite.py loads it)

HERE = os.path.dirname(os.path.abspath(__file__))

# The files docs/compatibility.md measures. Module tests (search, json, timeseries, bloom,
# vsets), Sentinel, TLS, credential providers, Entra ID and the Redis Enterprise scenario
# tests need servers or services Meridian is not (Redis Stack modules, Sentinel, a TLS
# listener with the suite's own certificates, Redis Enterprise's REST API).
DEFAULT_FILES = [
    "tests/test_commands.py",
    "tests/test_pipeline.py",
    "tests/test_pubsub.py",
    "tests/test_scripting.py",
    "tests/test_function.py",
    "tests/test_lock.py",
    "tests/test_connection.py",
    "tests/test_connection_pool.py",
    "tests/test_encoding.py",
    "tests/test_monitor.py",
    "tests/test_multiprocessing.py",
    "tests/test_retry.py",
    "tests/test_client.py",
    "tests/test_cache.py",
    "tests/test_keyspace_notifications.py",
    "tests/test_hash.py",
    "tests/test_asyncio/test_commands.py",
    "tests/test_asyncio/test_pipeline.py",
    "tests/test_asyncio/test_pubsub.py",
    "tests/test_asyncio/test_scripting.py",
    "tests/test_asyncio/test_lock.py",
    "tests/test_asyncio/test_connection.py",
    "tests/test_asyncio/test_connection_pool.py",
    "tests/test_asyncio/test_encoding.py",
    "tests/test_asyncio/test_monitor.py",
    "tests/test_asyncio/test_retry.py",
    "tests/test_asyncio/test_client.py",
    "tests/test_asyncio/test_keyspace_notifications.py",
    "tests/test_asyncio/test_cwe_404.py",
]


def results(xml_path):
    """{test id: "passed" | "failed" | "error" | "skipped"} from pytest's JUnit XML."""
    out = {}
    try:
        root = ET.parse(xml_path).getroot()
    except (OSError, ET.ParseError):
        return out
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        status = "passed"
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                status = {"failure": "failed"}.get(child.tag, child.tag)
                break
        # A test that failed and then errored in teardown appears twice: the worse wins.
        if out.get(name) not in ("failed", "error"):
            out[name] = status
    return out


def tally(res):
    passed = sum(1 for s in res.values() if s == "passed")
    failed = sum(1 for s in res.values() if s in ("failed", "error"))
    skipped = sum(1 for s in res.values() if s == "skipped")
    return passed, failed, skipped


def run_file(args, path, port, log_base):
    xml = log_base + ".xml"
    if os.path.exists(xml):
        os.remove(xml)
    cmd = [args.python, "-m", "pytest", path, "-q", "-p", "no:cacheprovider",
           f"--redis-url=redis://127.0.0.1:{port}/0", "--timeout", str(args.test_timeout),
           f"--junitxml={xml}", "-rfE"]
    if args.protocol:
        cmd += ["--protocol", args.protocol]
    if args.cluster_nodes:
        cmd += ["--redis-cluster-nodes", str(args.cluster_nodes)]
    cmd += args.pytest_arg
    with open(log_base + ".log", "wb") as log:
        try:
            subprocess.run(cmd, cwd=args.redis_py, stdout=log, stderr=subprocess.STDOUT,
                           timeout=args.file_timeout)
            note = ""
        except subprocess.TimeoutExpired:
            note = "timeout"
    return results(xml), note


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.split("\n")[1:]))
    p.add_argument("files", nargs="*", help="test files, relative to --redis-py")
    p.add_argument("--redis-py", default="/work/scratch/redis-py-8.1.0")
    p.add_argument("--python", default="/work/scratch/venv/bin/python")
    p.add_argument("--meridian", default=None, help="meridian binary (default target/debug/meridian)")
    p.add_argument("--shards", default="1", help="Meridian's --shards (default 1)")
    p.add_argument("--cluster-api", choices=("yes", "no"), help="Meridian's --cluster-api")
    p.add_argument("--meridian-arg", action="append", default=[], help="extra Meridian flags")
    p.add_argument("--port", type=int, help="a Meridian already running there")
    p.add_argument("--redis-server", default=redis_suite.DEBIAN["redis-server"])
    p.add_argument("--redis-port", type=int, help="a Redis already running there")
    p.add_argument("--no-redis", action="store_true", help="skip Redis's column")
    p.add_argument("--protocol", choices=("2", "3"), help="redis-py's --protocol")
    p.add_argument("--cluster-nodes", type=int,
                   help="redis-py's --redis-cluster-nodes (default: --shards when above 1)")
    p.add_argument("--pytest-arg", action="append", default=[], help="extra pytest flags")
    p.add_argument("--test-timeout", type=int, default=30, help="pytest-timeout per test")
    p.add_argument("--file-timeout", type=int, default=900, help="seconds per file and server")
    p.add_argument("--out", default="/tmp/redis-py-suite")
    p.add_argument("--diff", action="store_true", help="list tests Redis passes and Meridian not")
    args = p.parse_args()

    files = args.files or DEFAULT_FILES
    if args.cluster_nodes is None and args.cluster_api != "no" and args.shards.isdigit() \
            and int(args.shards) > 1:
        args.cluster_nodes = int(args.shards)
    os.makedirs(args.out, exist_ok=True)
    repo = os.path.dirname(HERE)
    meridian = args.meridian or os.path.join(repo, "target", "debug", "meridian")
    if args.port is None and not os.path.exists(meridian):
        sys.exit(f"{meridian}: no such binary (build it, or give --meridian or --port)")
    extra = ["--shards", args.shards, "--appendonly", "no"]
    if args.cluster_api:
        extra += ["--cluster-api", args.cluster_api]
    extra += args.meridian_arg

    kinds = ["meridian"] + ([] if args.no_redis else ["redis"])
    table = redis_suite.CountTable("file", "skipped", files, kinds)
    for path in files:
        row = {}
        for kind in kinds:
            server, port = redis_suite.server_for(kind, args, meridian, extra)
            base = os.path.join(args.out, f"{path.replace('/', '_')}.{kind}")
            res, note = redis_suite.run_checked(server, lambda: run_file(args, path, port, base))
            row[kind] = (res, note)
        notes = "  ".join(f"{k}:{v[1]}" for k, v in row.items() if v[1])
        table.row(path, {k: tally(v[0]) for k, v in row.items()}, notes)
        if args.diff and "redis" in row:
            table.missed(row["redis"][0], row["meridian"][0], "passed")
    table.print_totals()


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Runs ioredis's own functional test suite against Meridian and against Redis beside it.

ioredis's tests (test/functional/ of the redis/ioredis repository, 6.0.0 here) are mocha
files that talk to a server on 127.0.0.1:6379 (the client's default port; several tests also
name 6379 themselves). This script starts a fresh Meridian and a fresh Debian redis-server
(the reference) on loopback ports of 7400-7447, runs the chosen test files with mocha once
against each, and prints per file what each server passed, failed and left pending:

    file                                  meridian failed pending   redis failed pending
    ...

then the totals. --diff lists, per file, the tests Redis passes and Meridian does not
(docs/compatibility.md keeps the table and explains each one left).

ioredis is never copied into the repository: --ioredis names an exported tree (default
/work/scratch/ioredis-6.0.0) with its node_modules installed (`npm ci` there). The tests have
no setting for the server's port, so this script rewrites the literal port 6379 in that tree's
lib/ and test/functional/ and test/helpers/ into `process.env.IOREDIS_TEST_PORT || 6379` (once;
a tree it has rewritten is left as it is) and sets IOREDIS_TEST_PORT for each run. The cluster
tests under test/functional/cluster/ talk to in-process mock servers on their own ports
(17379-30006) and run as they are; so do the sentinel tests.

By default one mocha process per server runs every chosen file against one server started
for it (mocha's own per-test timeout, 8 s, bounds each test; --run-timeout bounds the run);
--per-file starts a fresh server and mocha for each file instead (slower, isolated). A small
mocha reporter written to --out records each test's result as it ends, so a run cut short
still counts what finished.

Meridian runs with `--shards 1` unless --shards says otherwise; with several shards its
cluster API is on and INFO says `cluster_enabled:1` (ioredis's standalone client does not
look). With --port (and --redis-port) the servers already running there are used.

Examples:
    tools/ioredis-suite.py --diff
    tools/ioredis-suite.py --shards 2 --diff
    tools/ioredis-suite.py --per-file test/functional/commands/xread.ts test/functional/pub_sub.ts
"""

import argparse
import glob
import json
import os
import re
import subprocess
import sys

import redis_suite  # tools/redis-suite.py (tools/redis_suite.py loads it)

HERE = os.path.dirname(os.path.abspath(__file__))

# This task's ports: blocks of redis_suite.PORT_BLOCK (a server with several shards also
# listens on the next ports) inside 7400-7447.
redis_suite.PORT_FIRST, redis_suite.PORT_SPAN = 7400, 48

PORT_ENV = "IOREDIS_TEST_PORT"
# The literal default port as a number or a string of its own, not 26379/16379 (mock
# sentinels and cluster buses) nor inside a longer string ("127.0.0.1:6379": there the
# rewrite would have to split the string, and ioredis 6.0.0 has none).
PORT_LITERAL = re.compile(r'(?<![\w.:/])("?)6379\1(?![\w.])')
PATCHED_DIRS = ("lib", "test/functional", "test/helpers")

# Records each test's end as one JSON line, synchronously, so a killed run keeps what ended.
# A failed hook counts as a failed test named after the hook (mocha then skips the rest of
# its suite).
REPORTER = r"""
'use strict';
const fs = require('fs');
const Mocha = require('mocha');
const { EVENT_TEST_PASS, EVENT_TEST_FAIL, EVENT_TEST_PENDING } = Mocha.Runner.constants;
module.exports = function LineReporter(runner, options) {
  Mocha.reporters.Base.call(this, runner, options);
  const out = process.env.IOREDIS_SUITE_RESULTS;
  const write = (state, test, err) => {
    let file = test.file;
    for (let p = test.parent; !file && p; p = p.parent) file = p.file;
    fs.appendFileSync(out, JSON.stringify({
      state, file: file || '', title: test.fullTitle(),
      err: err ? String(err.message || err).slice(0, 300) : undefined,
    }) + '\n');
  };
  runner.on(EVENT_TEST_PASS, (t) => write('passed', t));
  runner.on(EVENT_TEST_FAIL, (t, err) => write('failed', t, err));
  runner.on(EVENT_TEST_PENDING, (t) => write('pending', t));
};
"""


def patch_tree(tree):
    """Rewrites the literal port 6379 in the tree's library and tests into the environment's
    port (the default where unset). Comment lines are left alone. Returns the files changed."""
    changed = []
    for d in PATCHED_DIRS:
        for path in glob.glob(os.path.join(tree, d, "**", "*.ts"), recursive=True):
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
            out = []
            for line in lines:
                code = line.lstrip()
                if PORT_ENV in line or code.startswith(("//", "*", "/*")):
                    out.append(line)
                    continue

                def repl(m):
                    if m.group(1):
                        return f'(process.env.{PORT_ENV} || "6379")'
                    return f"Number(process.env.{PORT_ENV} || 6379)"
                out.append(PORT_LITERAL.sub(repl, line))
            if out != lines:
                with open(path, "w", encoding="utf-8") as f:
                    f.write("\n".join(out))
                changed.append(os.path.relpath(path, tree))
    return changed


def default_files(tree):
    return sorted(os.path.relpath(p, tree) for p in
                  glob.glob(os.path.join(tree, "test", "functional", "**", "*.ts"),
                            recursive=True))


def read_results(path, tree):
    """{file: {test title: "passed" | "failed" | "pending"}}; a test reported twice (a test
    that passed and then failed in its afterEach) keeps the worse."""
    out = {}
    try:
        with open(path, encoding="utf-8") as f:
            for line in f:
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                file = os.path.relpath(r["file"], tree) if r["file"] else "?"
                tests = out.setdefault(file, {})
                if tests.get(r["title"]) != "failed":
                    tests[r["title"]] = r["state"]
                if r["state"] == "failed" and r.get("err"):
                    out.setdefault("\0why", {})[(file, r["title"])] = r["err"]
    except OSError:
        pass
    return out


def tally(res):
    states = list(res.values())
    return states.count("passed"), states.count("failed"), states.count("pending")


def run_mocha(args, files, port, log_base):
    results = log_base + ".jsonl"
    if os.path.exists(results):
        os.remove(results)
    reporter = os.path.join(os.path.abspath(args.out), "line-reporter.js")
    env = dict(os.environ, TS_NODE_TRANSPILE_ONLY="true", NODE_ENV="test",
               IOREDIS_SUITE_RESULTS=results, NODE_PATH=os.path.join(args.ioredis, "node_modules"))
    env[PORT_ENV] = str(port)
    cmd = [os.path.join(args.ioredis, "node_modules", ".bin", "mocha"),
           "--no-experimental-strip-types", "--reporter", reporter, "test/helpers/*.ts"]
    cmd += files + args.mocha_arg
    with open(log_base + ".log", "wb") as log:
        try:
            subprocess.run(cmd, cwd=args.ioredis, stdout=log, stderr=subprocess.STDOUT, env=env,
                           timeout=args.run_timeout)
            note = ""
        except subprocess.TimeoutExpired:
            note = "timeout"
    return read_results(results, args.ioredis), note


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog="\n".join(__doc__.split("\n")[1:]))
    p.add_argument("files", nargs="*", help="test files, relative to --ioredis "
                   "(default: every file under test/functional)")
    p.add_argument("--ioredis", default="/work/scratch/ioredis-6.0.0")
    p.add_argument("--meridian", default=None, help="meridian binary (default target/debug/meridian)")
    p.add_argument("--shards", default="1", help="Meridian's --shards (default 1)")
    p.add_argument("--meridian-arg", action="append", default=[], help="extra Meridian flags")
    p.add_argument("--port", type=int, help="a Meridian already running there")
    p.add_argument("--redis-server", default=redis_suite.DEBIAN["redis-server"])
    p.add_argument("--redis-port", type=int, help="a Redis already running there")
    p.add_argument("--no-redis", action="store_true", help="skip Redis's column")
    p.add_argument("--per-file", action="store_true", help="a fresh server and mocha per file")
    p.add_argument("--mocha-arg", action="append", default=[], help="extra mocha flags")
    p.add_argument("--run-timeout", type=int, default=1800, help="seconds per mocha run")
    p.add_argument("--out", default="/tmp/ioredis-suite")
    p.add_argument("--diff", action="store_true", help="list tests Redis passes and Meridian not")
    p.add_argument("--why", action="store_true", help="with --diff, Meridian's error for each")
    args = p.parse_args()

    args.ioredis = os.path.abspath(args.ioredis)
    if not os.path.isdir(os.path.join(args.ioredis, "node_modules", "mocha")):
        sys.exit(f"{args.ioredis}: no ioredis tree with node_modules (export it, run npm ci)")
    patched = patch_tree(args.ioredis)
    if patched:
        print(f"rewrote port 6379 to ${PORT_ENV} in {len(patched)} files of {args.ioredis}",
              file=sys.stderr)
    files = args.files or default_files(args.ioredis)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "line-reporter.js"), "w", encoding="utf-8") as f:
        f.write(REPORTER)
    repo = os.path.dirname(HERE)
    meridian = args.meridian or os.path.join(repo, "target", "debug", "meridian")
    if args.port is None and not os.path.exists(meridian):
        sys.exit(f"{meridian}: no such binary (build it, or give --meridian or --port)")
    extra = ["--shards", args.shards, "--appendonly", "no"] + args.meridian_arg

    kinds = ["meridian"] + ([] if args.no_redis else ["redis"])
    batches = [[f] for f in files] if args.per_file else [files]
    res = {k: {} for k in kinds}
    notes = {k: [] for k in kinds}
    for batch in batches:
        for kind in kinds:
            server, port = redis_suite.server_for(kind, args, meridian, extra)
            name = batch[0].replace("/", "_") if args.per_file else "all"
            base = os.path.join(args.out, f"{name}.{kind}")
            got, note = redis_suite.run_checked(
                server, lambda: run_mocha(args, batch, port, base))
            for f, tests in got.items():
                res[kind].setdefault(f, {}).update(tests)
            if note:
                notes[kind].append(f"{name}: {note}")

    table = redis_suite.CountTable("file", "pending", files, kinds)
    for path in files:
        table.row(path, {kind: tally(res[kind].get(path, {})) for kind in kinds})
        if args.diff and "redis" in res:
            why = res["meridian"].get("\0why", {}) if args.why else {}
            table.missed(res["redis"].get(path, {}), res["meridian"].get(path, {}), "passed",
                         lambda title: why.get((path, title)))
    table.print_totals({kind: "; ".join(notes[kind]) for kind in kinds})


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Issue 20's figure: "10,000 failed AUTH attempts per second cost no memory growth and other
clients' p99 stays within 2x its idle value", Meridian beside Debian's redis-server.

For each server configuration (Meridian with each --shards value given, and redis-server), in
the order A B C C B A per pair of rounds, the script:
  1. starts the server with `requirepass` on a free loopback port in a temporary directory,
     pinned to CPU 0 (`taskset -c 0`); this script and its flood processes run on CPU 1;
  2. phase A (idle): an authenticated probe client sends PING and GET (alternately) at a fixed
     rate (--probe-rate per second, one at a time) for --idle-seconds and records each round
     trip -> p50, p99, max;
  3. phase B (flood): the same probe for --flood-seconds while --procs processes with --conns
     connections in all send `AUTH <wrong password>` pipelined in batches of --batch, paced to
     --rate failed AUTHs per second in total (catching up when behind), reconnecting if the
     server closes a connection; the flood processes run at nice --flood-nice so that the
     probe, which sleeps between requests, is not delayed by them on the shared CPU; with
     --distinct-users every AUTH names a new user, so each failure is a new ACL LOG entry
     (otherwise Redis and Meridian fold them into one entry with a count) and the log's
     bound, acllog-max-len (128), is what must keep memory flat;
  4. records the server's RSS (/proc/PID/status VmRSS) and INFO memory used_memory before
     phase A, at the start and the end of phase B, and the RSS peak during phase B (sampled
     every 0.25 s); after phase B, INFO stats (total_error_replies, and Redis's
     acl_access_denied_auth) and the ACL LOG: its entries and the sum of their counts.

It prints a line per run, then a table of medians per configuration with the ratios asked:
flood p99 / idle p99 and the RSS growth over the flood. The failed AUTHs achieved per second are
printed for each run (from the WRONGPASS replies counted by the flood processes).

Usage (from the repository root):
  python3 tools/auth-flood.py --meridian target/release/meridian --redis-server redis-server \
      [--shards 1,2] [--rounds 2] [--idle-seconds 10] [--flood-seconds 30] [--rate 10000] \
      [--distinct-users]

Every loop is bounded in time and count; only 127.0.0.1 is connected to."""

import argparse
import multiprocessing as mp
import os
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loopback_server import (  # noqa: E402
    LOAD_CPU, Conn, Server, add_server_args, alternating_runs, enc, paced_round_trips,
    percentile, rss_kb, server_configs)

PASSWORD = "flood-test-password"
WRONG = "not-the-password"


def flood_worker(port, conns, rate, seconds, batch, nice, distinct, ready, go, results):
    """Sends wrong-password AUTHs on `conns` connections at `rate`/s for `seconds`; puts
    (wrongpass_replies, other_replies, reconnects, elapsed_s, reconnect_reasons) on `results`.
    With `distinct`, each AUTH names another user (`AUTH flood-<pid>-<n> <wrong>`), so that
    every failure is a new ACL LOG entry rather than a count on one: the log's bound is what
    keeps memory flat."""
    try:
        os.nice(nice)
    except OSError:
        pass
    payload = enc("AUTH", WRONG) * batch
    tag = "flood-%d-" % os.getpid()
    n_user = 0
    socks = [None] * conns

    def connect():
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s

    for i in range(conns):
        socks[i] = connect()
    ready.release()
    go.wait(60)
    failed = other = reconnects = 0
    why = {}  # reconnect reasons
    sent_batches = 0
    start = time.monotonic()
    end = start + seconds
    while True:
        now = time.monotonic()
        if now >= end:
            break
        # Pacing: batches due by now at `rate` AUTHs per second.
        due = int((now - start) * rate / batch) + 1
        if sent_batches >= due:
            time.sleep(max(0.0, min(end - now, (sent_batches * batch) / rate - (now - start))))
            continue
        n = min(conns, due - sent_batches)
        for i in range(n):
            if distinct:
                payload = b"".join(enc("AUTH", tag + str(n_user + k), WRONG)
                                   for k in range(batch))
                n_user += batch
            try:
                socks[i].sendall(payload)
            except OSError as e:
                key = "send: %s" % type(e).__name__
                why[key] = why.get(key, 0) + 1
                socks[i].close()
                socks[i] = connect()
                reconnects += 1
                socks[i].sendall(payload)
        for i in range(n):
            lines = 0
            buf = b""
            while lines < batch:
                try:
                    chunk = socks[i].recv(65536)
                except OSError as e:
                    key = "recv: %s" % type(e).__name__
                    why[key] = why.get(key, 0) + 1
                    chunk = None
                if not chunk:
                    if chunk is not None:
                        why["closed by the server"] = why.get("closed by the server", 0) + 1
                    socks[i].close()
                    socks[i] = connect()
                    reconnects += 1
                    break
                buf += chunk
                lines = buf.count(b"\r\n")
            w = buf.count(b"-WRONGPASS")
            failed += w
            other += lines - w
        sent_batches += n
    elapsed = time.monotonic() - start
    for s in socks:
        s.close()
    results.put((failed, other, reconnects, elapsed, why))


def probe(port, rate, seconds, out):
    """Round trips (ms) of PING/GET sent one at a time at `rate` per second for `seconds`."""
    c = Conn(port)
    c.call("AUTH", PASSWORD)
    paced_round_trips(c, [enc("PING"), enc("GET", "probe-key")], rate, seconds, out)
    c.close()


def summarize(lat):
    s = sorted(lat)
    return percentile(s, 50), percentile(s, 99), s[-1] if s else float("nan")


def acl_log(c):
    """(entries, sum of their counts) of ACL LOG (all of it)."""
    entries = c.call("ACL", "LOG", "1000000")
    total = 0
    for e in entries:
        fields = dict(zip(e[0::2], e[1::2]))
        total += int(fields.get(b"count", 0))
    return len(entries), total


def run_one(label, kind, path, shards, args):
    srv = Server(kind, path, password=PASSWORD, shards=shards)
    try:
        admin = Conn(srv.port)
        admin.call("AUTH", PASSWORD)
        admin.call("SET", "probe-key", "x" * 100)
        warm = []
        probe(srv.port, args.probe_rate, 1.0, warm)
        rss0, used0 = rss_kb(srv.pid), int(admin.info("memory")["used_memory"])

        idle = []
        probe(srv.port, args.probe_rate, args.idle_seconds, idle)

        ready, go, results = mp.Semaphore(0), mp.Event(), mp.Queue()
        per_proc_conns = max(1, args.conns // args.procs)
        procs = [mp.Process(target=flood_worker,
                            args=(srv.port, per_proc_conns, args.rate / args.procs,
                                  args.flood_seconds, args.batch, args.flood_nice,
                                  args.distinct_users, ready, go, results))
                 for _ in range(args.procs)]
        for p in procs:
            p.start()
        for _ in procs:
            if not ready.acquire(timeout=30):
                raise RuntimeError("flood processes did not connect")
        rss1, used1 = rss_kb(srv.pid), int(admin.info("memory")["used_memory"])
        peak = [rss1]
        stop = threading.Event()

        def sample():
            while not stop.wait(0.25):
                peak[0] = max(peak[0], rss_kb(srv.pid))

        sampler = threading.Thread(target=sample)
        sampler.start()
        go.set()
        flood = []
        probe(srv.port, args.probe_rate, args.flood_seconds, flood)
        counts = [results.get(timeout=args.flood_seconds + 60) for _ in procs]
        for p in procs:
            p.join(timeout=30)
        stop.set()
        sampler.join()
        rss2, used2 = rss_kb(srv.pid), int(admin.info("memory")["used_memory"])
        stats = admin.info("stats")
        log_entries, log_count = acl_log(admin)
        admin.close()
    finally:
        killed = srv.stop()
    failed = sum(c[0] for c in counts)
    elapsed = max(c[3] for c in counts)
    i50, i99, imax = summarize(idle)
    f50, f99, fmax = summarize(flood)
    r = {
        "label": label, "idle_p50": i50, "idle_p99": i99, "idle_max": imax,
        "flood_p50": f50, "flood_p99": f99, "flood_max": fmax, "p99_ratio": f99 / i99,
        "rate": failed / elapsed, "failed": failed, "other": sum(c[1] for c in counts),
        "reconnects": sum(c[2] for c in counts),
        "why": {k: sum(c[4].get(k, 0) for c in counts) for c in counts for k in c[4]},
        "rss0": rss0, "rss1": rss1, "rss2": rss2, "rss_peak": peak[0],
        "rss_growth": rss2 - rss1, "used0": used0, "used1": used1, "used2": used2,
        "used_growth": used2 - used1, "log_entries": log_entries, "log_count": log_count,
        "errors": int(stats.get("total_error_replies", -1)),
        "denied_auth": stats.get("acl_access_denied_auth", "-"), "sigkill": killed,
    }
    print("%-12s idle p50/p99/max %.3f/%.3f/%.2f ms  flood p50/p99/max %.3f/%.3f/%.2f ms  "
          "p99 x%.2f | %d failed AUTH (%.0f/s, %d other replies, %d reconnects%s) | RSS kB "
          "%d -> %d -> %d (peak %d, flood %+d) | used_memory %d -> %d -> %d (flood %+d) | "
          "ACL LOG %d entries, count %d | total_error_replies %d, acl_access_denied_auth %s%s"
          % (label, i50, i99, imax, f50, f99, fmax, r["p99_ratio"], failed, r["rate"],
             r["other"], r["reconnects"],
             ": %s" % r["why"] if r["why"] else "", rss0, rss1, rss2, peak[0], r["rss_growth"],
             used0, used1, used2, r["used_growth"], log_entries, log_count, r["errors"],
             r["denied_auth"], " | NEEDED SIGKILL" if killed else ""), flush=True)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_server_args(ap)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--flood-seconds", type=float, default=30.0)
    ap.add_argument("--probe-rate", type=float, default=1000.0)
    ap.add_argument("--rate", type=float, default=10000.0, help="failed AUTH/s in all")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--conns", type=int, default=10, help="flood connections in all")
    ap.add_argument("--batch", type=int, default=50, help="AUTHs pipelined per send")
    ap.add_argument("--flood-nice", type=int, default=5)
    ap.add_argument("--distinct-users", action="store_true",
                    help="each AUTH names a new user: one ACL LOG entry per failure")
    args = ap.parse_args()
    os.sched_setaffinity(0, {LOAD_CPU})
    configs = server_configs(ap, args)
    print("auth-flood: %s, %s idle + %s s flood at %s failed AUTH/s%s, probe %s/s, load avg %s"
          % (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), args.idle_seconds,
             args.flood_seconds, args.rate,
             " (a new user name each)" if args.distinct_users else "", args.probe_rate,
             open("/proc/loadavg").read().split()[:3]), flush=True)
    runs = alternating_runs(configs, args.rounds, lambda *cfg: run_one(*cfg, args))
    print()
    print("| Server | runs | idle p99 (ms) | flood p99 (ms) | p99 flood/idle | failed AUTH/s "
          "| RSS growth over the flood (kB) | used_memory growth (B) | ACL LOG entries |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, *_ in configs:
        rs = [r for r in runs if r["label"] == label]
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        print("| %s | %d | %.3f | %.3f | %.2f (%s) | %.0f | %+d (%s) | %+d | %s |"
              % (label, len(rs), med("idle_p99"), med("flood_p99"), med("p99_ratio"),
                 ", ".join("%.2f" % r["p99_ratio"] for r in rs), med("rate"),
                 med("rss_growth"), ", ".join("%+d" % r["rss_growth"] for r in rs),
                 med("used_growth"), ", ".join(str(r["log_entries"]) for r in rs)))


if __name__ == "__main__":
    main()

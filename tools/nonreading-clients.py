#!/usr/bin/env python3
"""Issue 20's figure: "1,000 clients that never read replies are cut off with server memory
bounded", Meridian beside Debian's redis-server.

Both servers' default for normal clients is `client-output-buffer-limit normal 0 0 0`: no limit,
a client that never reads is never cut (Redis's default, and Meridian's, docs/limits.md). The
figure is therefore taken with a limit set on both (--limit, default "normal 2097152 524288 10":
2 MiB hard, 512 KiB soft for 10 s, in bytes as both servers take them).

For each configuration (Meridian with each --shards value, then redis-server; A B C C B A per
pair of rounds), the script:
  1. starts the server on a free loopback port in a temporary directory, pinned to CPU 0
     (`taskset -c 0`), with the limit; this script runs on CPU 1 and raises its own open-file
     limit for the clients;
  2. SETs `bigkey` to a --value-bytes value, and measures a probe client's PING round trips at
     --probe-rate per second for --idle-seconds (idle p99);
  3. opens --clients connections, each with a small receive buffer (SO_RCVBUF --rcvbuf, set
     before connect) and each pipelining --gets `GET bigkey` (asking gets x value bytes of
     replies, over the hard limit) and never reading;
  4. for --seconds: samples the server's RSS every 0.25 s, INFO clients connected_clients and
     INFO memory used_memory every second (from an admin connection), the machine's TCP
     memory (/proc/net/sockstat `TCP ... mem`, pages: what the kernel holds in socket buffers,
     every socket on the machine), and the probe's PING round trips;
  5. counts, from the client side, the connections the server closed (TCP state no longer
     ESTABLISHED, from TCP_INFO; neither Redis 7.0 nor Meridian has an INFO counter of
     output-buffer disconnections), closes them all, waits 2 s, and reads RSS and used_memory
     after.

It aborts a run (SIGKILL to the server, and says so) if the server's RSS passes --rss-abort-mb:
the machine is shared. It prints a line per run and a table of medians per configuration.

Usage (from the repository root):
  python3 tools/nonreading-clients.py --meridian target/release/meridian \
      --redis-server redis-server [--shards 1,2] [--rounds 2] [--clients 1000] \
      [--value-bytes 262144] [--gets 32] [--seconds 20] [--limit "normal 2097152 524288 10"]

Every loop is bounded in time and count; only 127.0.0.1 is connected to."""

import argparse
import os
import resource
import socket
import statistics
import struct
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from loopback_server import (  # noqa: E402
    LOAD_CPU, Conn, Server, add_server_args, alternating_runs, enc, paced_round_trips,
    percentile, rss_kb, server_configs)

TCP_ESTABLISHED = 1


def tcp_mem_kb():
    """Kernel memory in TCP socket buffers, machine-wide, kB (/proc/net/sockstat, pages)."""
    with open("/proc/net/sockstat") as f:
        for line in f:
            if line.startswith("TCP:"):
                parts = line.split()
                return int(parts[parts.index("mem") + 1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    return 0


def tcp_state(sock):
    return struct.unpack("B", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1))[0]


def probe(port, rate, seconds, out, stop=None, ports=None):
    """PING round trips (ms), one at a time at `rate` per second, for `seconds` (or until
    `stop` is set). Its local port is appended to `ports` (to find it in the server log)."""
    c = Conn(port, timeout=30)
    if ports is not None:
        ports.append(c.sock.getsockname()[1])
    paced_round_trips(c, [enc("PING")], rate, seconds, out, stop)
    c.close()


def fresh_ping(port):
    t0 = time.perf_counter()
    try:
        c = Conn(port, timeout=10)
        c.sock.sendall(enc("PING"))
        r = c.reply()
        c.close()
        return "%r after %.1f ms" % (r, (time.perf_counter() - t0) * 1000)
    except (OSError, EOFError) as e:
        return "%r after %.1f ms" % (e, (time.perf_counter() - t0) * 1000)


def run_one(label, kind, path, shards, args):
    extra = ["--client-output-buffer-limit", args.limit]
    srv = Server(kind, path, shards=shards, extra=extra)
    aborted = False
    ports = []  # the admin's and the probe's local ports
    try:
        admin = Conn(srv.port, timeout=30)
        ports.append(admin.sock.getsockname()[1])
        limit_seen = admin.call("CONFIG", "GET", "client-output-buffer-limit")[1].decode()
        admin.call("SET", "bigkey", b"v" * args.value_bytes)
        idle = []
        probe(srv.port, args.probe_rate, args.idle_seconds, idle)
        rss0, used0 = rss_kb(srv.pid), int(admin.info("memory")["used_memory"])
        tcp0 = tcp_mem_kb()

        clients = []
        for _ in range(args.clients):
            c = Conn(srv.port, rcvbuf=args.rcvbuf)
            c.sock.setblocking(False)
            clients.append(c)
        rss_conn = rss_kb(srv.pid)
        pipeline = enc("GET", "bigkey") * args.gets
        unsent = 0
        for c in clients:
            try:
                n = c.sock.send(pipeline)
                unsent += len(pipeline) - n
            except OSError:
                unsent += len(pipeline)

        flood, stop = [], threading.Event()
        prober = threading.Thread(target=probe, args=(srv.port, args.probe_rate, args.seconds,
                                                      flood, stop, ports))
        prober.start()
        start = time.monotonic()
        # RSS and kernel memory are sampled on their own thread: an INFO that the server is
        # slow to answer must not hide the peak.
        peak = {"rss": rss_conn, "tcp": tcp0, "aborted": False}

        def sample():
            while not stop.is_set() and time.monotonic() - start < args.seconds:
                rss = rss_kb(srv.pid)
                peak["rss"] = max(peak["rss"], rss)
                peak["tcp"] = max(peak["tcp"], tcp_mem_kb())
                if rss > args.rss_abort_mb * 1024:
                    peak["aborted"] = True
                    srv.proc.kill()
                    return
                time.sleep(0.25)

        sampler = threading.Thread(target=sample)
        sampler.start()
        peak_used = used0
        connected = []  # (seconds, connected_clients)
        next_info = start
        while time.monotonic() - start < args.seconds and not peak["aborted"]:
            if time.monotonic() >= next_info:
                next_info += 1.0
                connected.append((time.monotonic() - start,
                                  int(admin.info("clients")["connected_clients"])))
                peak_used = max(peak_used, int(admin.info("memory")["used_memory"]))
            time.sleep(0.25)
        sampler.join()
        peak_rss, peak_tcp, aborted = peak["rss"], peak["tcp"], peak["aborted"]
        stop.set()
        prober.join(timeout=60)
        closed = sum(1 for c in clients if tcp_state(c.sock) != TCP_ESTABLISHED)
        rss_end = rss_kb(srv.pid) if not aborted else 0
        for c in clients:
            c.close()
        time.sleep(2.0)
        if not aborted:
            rss_after = rss_kb(srv.pid)
            used_after = int(admin.info("memory")["used_memory"])
            connected_after = int(admin.info("clients")["connected_clients"])
        else:
            rss_after = used_after = connected_after = 0
        admin.close()
    except (OSError, EOFError) as e:
        # The server stopped answering: say how, with its log (the lines naming the admin's
        # and the probe's ports first), and go on with the others.
        log = srv.log_tail(1 << 24)
        mine = [ln for ln in log.splitlines()
                if any(":%d" % p in ln for p in ports)]
        print("%-12s FAILED: %r; server %s; a new connection's PING: %s\n"
              "--- server log lines naming the admin's and probe's ports %s:\n%s\n"
              "--- server log tail:\n%s"
              % (label, e, "alive" if srv.proc.poll() is None else
                 "exited with %s" % srv.proc.returncode, fresh_ping(srv.port), ports,
                 "\n".join(mine[-20:]), log[-1500:]), flush=True)
        print("%-12s stopping it %s" % (label, "needed SIGKILL" if srv.stop() else
                                          "took SIGTERM"), flush=True)
        return None
    finally:
        killed = srv.stop()
    # The admin and probe connections are the only ones left once every flood one is cut.
    all_cut_at = next((t for t, n in connected if n <= 2), None)
    i99 = percentile(sorted(idle), 99)
    f = sorted(flood)
    r = {
        "label": label, "limit": limit_seen, "closed": closed, "rss0": rss0,
        "rss_conn": rss_conn, "peak_rss": peak_rss, "rss_end": rss_end, "rss_after": rss_after,
        "used0": used0, "peak_used": peak_used, "used_after": used_after,
        "tcp_peak": peak_tcp - tcp0, "idle_p99": i99, "flood_p50": percentile(f, 50),
        "flood_p99": percentile(f, 99), "flood_max": f[-1] if f else float("nan"),
        "all_cut_at": all_cut_at, "aborted": aborted, "unsent": unsent,
        "connected": connected, "connected_after": connected_after,
    }
    print("%-12s limit '%s' | %d/%d closed by the server (all gone by %s) | RSS kB %d idle, %d "
          "connected, peak %d, %d at the end, %d after closing | used_memory peak %d, after %d "
          "| kernel TCP mem peak %+d kB | probe PING p99 idle %.3f ms, during p50/p99/max "
          "%.3f/%.3f/%.1f ms | connected_clients %s%s%s"
          % (label, limit_seen, closed, args.clients,
             "%.1f s" % all_cut_at if all_cut_at is not None else "never", rss0, rss_conn,
             peak_rss, rss_end, rss_after, peak_used, used_after, peak_tcp - tcp0, i99,
             r["flood_p50"], r["flood_p99"], r["flood_max"],
             " ".join("%d" % n for _, n in connected[:8]),
             " | ABORTED past --rss-abort-mb" if aborted else "",
             " | NEEDED SIGKILL" if killed and not aborted else ""), flush=True)
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_server_args(ap)
    ap.add_argument("--clients", type=int, default=1000)
    ap.add_argument("--value-bytes", type=int, default=256 * 1024)
    ap.add_argument("--gets", type=int, default=32, help="GETs each client pipelines")
    ap.add_argument("--rcvbuf", type=int, default=4096)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--idle-seconds", type=float, default=5.0)
    ap.add_argument("--probe-rate", type=float, default=200.0)
    ap.add_argument("--limit", default="normal 2097152 524288 10",
                    help="client-output-buffer-limit given to both servers")
    ap.add_argument("--rss-abort-mb", type=int, default=6000)
    args = ap.parse_args()
    os.sched_setaffinity(0, {LOAD_CPU})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.clients + 64
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    configs = server_configs(ap, args)
    print("nonreading-clients: %s, %d clients x %d GETs of %d bytes (%.1f MB asked each), "
          "SO_RCVBUF %d, %s s, limit '%s', load avg %s"
          % (time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), args.clients, args.gets,
             args.value_bytes, args.gets * args.value_bytes / 1e6, args.rcvbuf, args.seconds,
             args.limit, open("/proc/loadavg").read().split()[:3]), flush=True)
    runs = alternating_runs(configs, args.rounds, lambda *cfg: run_one(*cfg, args))
    print()
    print("| Server | runs | clients closed | all closed by (s) | RSS idle (MB) | RSS peak (MB) "
          "| RSS after (MB) | used_memory peak (MB) | kernel TCP mem peak (MB) "
          "| PING p99 idle → during (ms) | PING max during (ms) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for label, *_ in configs:
        rs = [r for r in runs if r["label"] == label]
        if not rs:
            print("| %s | 0 (every run failed) |" % label)
            continue
        med = lambda k: statistics.median(r[k] for r in rs)  # noqa: E731
        each = lambda k, fmt: ", ".join(fmt % r[k] for r in rs)  # noqa: E731
        cut = ", ".join("%.0f" % r["all_cut_at"] if r["all_cut_at"] is not None else "never"
                        for r in rs)
        print("| %s | %d | %s | %s | %.1f | %.1f (%s) | %.1f | %.1f | %.0f | %.2f → %.2f | %s |"
              % (label, len(rs), each("closed", "%d"), cut, med("rss0") / 1024,
                 med("peak_rss") / 1024,
                 ", ".join("%.0f" % (r["peak_rss"] / 1024) for r in rs), med("rss_after") / 1024,
                 med("peak_used") / 1e6, med("tcp_peak") / 1024, med("idle_p99"),
                 med("flood_p99"), each("flood_max", "%.0f")))


if __name__ == "__main__":
    main()

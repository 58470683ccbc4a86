#!/usr/bin/env python3
"""Issue 20's figures, against a running server on loopback (run it pinned to another core
than this script: `taskset -c 1 python3 benches/limits.py ...`).

  limits.py auth-flood PORT PID PASSWORD SECONDS
      Idle, then SECONDS of 10,000 failed AUTH per second (10 connections, 1,000/s each,
      pipelined in batches of 50): another client's PING round trips (p50, p99, max) in
      both phases, and the server's RSS (from /proc/PID/status) before, at the end, and
      its peak.

  limits.py slow-readers PORT PID CLIENTS GETS VALUE_BYTES SECONDS
      CLIENTS connections each pipeline GETS GETs of a VALUE_BYTES value and never read;
      prints the server's connected clients and RSS every second for SECONDS, and a PING
      client's round trips meanwhile.

Every loop is bounded in count and time. Loopback only."""

import socket
import sys
import time


def enc(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def connect(port):
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def read_replies(s, n, buf=b""):
    """Reads n simple replies (status, error, integer, or a bulk) and returns the rest."""
    got = 0
    while got < n:
        while b"\r\n" not in buf:
            chunk = s.recv(65536)
            if not chunk:
                raise EOFError("server closed the connection")
            buf += chunk
        line, rest = buf.split(b"\r\n", 1)
        if line[:1] == b"$" and int(line[1:]) >= 0:
            need = int(line[1:]) + 2
            while len(rest) < need:
                chunk = s.recv(65536)
                if not chunk:
                    raise EOFError("server closed the connection")
                rest += chunk
            rest = rest[need:]
        buf = rest
        got += 1
    return buf


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def ping_rtts(port, seconds, period=0.002):
    """PING round trips (ms) for `seconds`, one every `period`."""
    s = connect(port)
    s.sendall(enc("AUTH", sys.argv[4]) if sys.argv[1] == "auth-flood" else b"")
    if sys.argv[1] == "auth-flood":
        read_replies(s, 1)
    rtts = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        s.sendall(b"*1\r\n$4\r\nPING\r\n")
        read_replies(s, 1)
        rtts.append((time.perf_counter() - t0) * 1000)
        time.sleep(period)
    s.close()
    return rtts


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))]


def summary(name, rtts):
    return "%s: %d PINGs, p50 %.3f ms, p99 %.3f ms, max %.3f ms" % (
        name, len(rtts), pct(rtts, 0.5), pct(rtts, 0.99), max(rtts))


def flood_worker(port, seconds):
    """10 connections, each 1,000 failed AUTH/s in batches of 50, for `seconds`."""
    import threading
    stop = time.monotonic() + seconds
    sent = [0] * 10

    def flood(i):
        s = connect(port)
        batch = enc("AUTH", "wrong-password") * 50
        buf = b""
        next_t = time.monotonic()
        while time.monotonic() < stop:
            s.sendall(batch)
            try:
                buf = read_replies(s, 50, buf)
            except (EOFError, OSError):
                return
            sent[i] += 50
            next_t += 0.05
            time.sleep(max(0.0, next_t - time.monotonic()))

    threads = [threading.Thread(target=flood, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print(sum(sent))


def auth_flood(port, pid, password, seconds):
    import subprocess
    rss0 = rss_kb(pid)
    idle = ping_rtts(port, seconds)
    rss_idle = rss_kb(pid)
    worker = subprocess.Popen([sys.executable, __file__, "flood-worker", str(port), str(seconds)],
                              stdout=subprocess.PIPE)
    peak = rss_idle
    loaded = []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        loaded += ping_rtts(port, 0.5)
        peak = max(peak, rss_kb(pid))
    sent = int(worker.communicate(timeout=seconds + 30)[0].strip() or 0)
    rss1 = rss_kb(pid)
    print(summary("idle", idle))
    print(summary("10k failed AUTH/s", loaded))
    print("failed AUTHs sent: %d in %.0f s (%.0f/s)" % (sent, seconds, sent / seconds))
    print("p99 ratio loaded/idle: %.2f" % (pct(loaded, 0.99) / pct(idle, 0.99)))
    print("RSS at start %d kB, after idle phase %d kB, after flood %d kB (%+d kB), peak %d kB" % (
        rss0, rss_idle, rss1, rss1 - rss_idle, peak))


def info_field(port, field):
    s = connect(port)
    s.sendall(enc("INFO", "clients"))
    buf = b""
    while b"\r\n" not in buf:
        buf += s.recv(65536)
    line, rest = buf.split(b"\r\n", 1)
    need = int(line[1:]) + 2
    while len(rest) < need:
        rest += s.recv(65536)
    s.close()
    for l in rest.decode().split("\r\n"):
        if l.startswith(field + ":"):
            return int(l.split(":")[1])
    return -1


def slow_readers(port, pid, clients, gets, value_bytes, seconds):
    admin = connect(port)
    admin.sendall(enc("SET", "big", "v" * value_bytes))
    read_replies(admin, 1)
    rss0 = rss_kb(pid)
    socks = []
    request = enc("GET", "big") * gets
    for _ in range(clients):
        s = connect(port)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.sendall(request)
        socks.append(s)
    peak = rss0
    t0 = time.monotonic()
    rtts = []
    while time.monotonic() - t0 < seconds:
        peak = max(peak, rss_kb(pid))
        rtts += ping_rtts(port, 1.0, 0.01)
        print("t=%2.0fs connected_clients=%d rss=%d kB" % (
            time.monotonic() - t0, info_field(port, "connected_clients"), rss_kb(pid)))
    print("replies asked per client: %d x %d B = %.1f MB; clients %d" % (
        gets, value_bytes, gets * value_bytes / 1e6, clients))
    print("RSS before %d kB, peak %d kB (%+d kB), end %d kB" % (rss0, peak, peak - rss0, rss_kb(pid)))
    print(summary("PING meanwhile", rtts))
    for s in socks:
        s.close()


def main():
    mode = sys.argv[1]
    if mode == "flood-worker":
        flood_worker(int(sys.argv[2]), float(sys.argv[3]))
    elif mode == "auth-flood":
        auth_flood(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5]))
    elif mode == "slow-readers":
        slow_readers(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]),
                     int(sys.argv[6]), float(sys.argv[7]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()

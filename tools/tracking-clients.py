#!/usr/bin/env python3
"""Client-side caching clients for a tracking benchmark (benches/tracking.sh).

Opens CLIENTS connections to 127.0.0.1:PORT, each in RESP3 with CLIENT TRACKING ON, and has
each read KEYS_PER_CLIENT random keys of key:000000000000 .. key:<KEYS-1> (the names
redis-benchmark's -r gives) so that the server tracks them. Then, for SECONDS, each client
reads the invalidation pushes the server sends and reads every invalidated key again (a cache
refilling after a miss), so that writes keep finding tracked keys. Prints the invalidations
received and the keys read again. Bounded by SECONDS (or SIGTERM); exits by itself.

Usage: tools/tracking-clients.py PORT [--clients 50] [--keys 10000] [--keys-per-client 200]
       [--seconds 30]
"""

import argparse
import random
import selectors
import signal
import socket
import sys
import time


def cmd(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def parse(buf, pos):
    """One RESP3 value at buf[pos:]: (value, next pos), or None when incomplete."""
    if pos >= len(buf):
        return None
    end = buf.find(b"\r\n", pos)
    if end < 0:
        return None
    kind, line = buf[pos:pos + 1], buf[pos + 1:end]
    nxt = end + 2
    if kind in (b"+", b"-", b":", b",", b"#", b"(", b"_"):
        return (kind, line), nxt
    if kind in (b"$", b"=", b"!"):
        n = int(line)
        if n < 0:
            return (kind, None), nxt
        if len(buf) < nxt + n + 2:
            return None
        return (kind, buf[nxt:nxt + n]), nxt + n + 2
    if kind in (b"*", b">", b"~", b"%", b"|"):
        n = int(line)
        if kind in (b"%", b"|"):
            n *= 2
        items = []
        for _ in range(max(n, 0)):
            r = parse(buf, nxt)
            if r is None:
                return None
            v, nxt = r
            items.append(v)
        return (kind, items), nxt
    raise ValueError("unexpected RESP type %r" % kind)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("port", type=int)
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--keys", type=int, default=10000)
    ap.add_argument("--keys-per-client", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=30)
    a = ap.parse_args()
    rng = random.Random(1)
    sel = selectors.DefaultSelector()
    conns = []
    for _ in range(a.clients):
        # Blocking sockets: reads only after the selector says one is ready; writes block
        # until the server takes them (a reply never lost to a partial send).
        s = socket.create_connection(("127.0.0.1", a.port))
        state = {"sock": s, "buf": b"", "pos": 0}
        conns.append(state)
        sel.register(s, selectors.EVENT_READ, state)
        keys = [b"key:%012d" % rng.randrange(a.keys) for _ in range(a.keys_per_client)]
        s.sendall(cmd("HELLO", "3") + cmd("CLIENT", "TRACKING", "ON")
                  + b"".join(cmd("GET", k) for k in keys))
    invalidations = 0
    reread = 0
    stop = []
    # SIGTERM ends the run as the deadline does (the bench stops it when its load ends).
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    deadline = time.monotonic() + a.seconds
    while time.monotonic() < deadline and not stop:
        for key, _ in sel.select(timeout=0.2):
            st = key.data
            data = st["sock"].recv(1 << 16)
            if not data:
                print("a connection closed", file=sys.stderr)
                return 1
            st["buf"] += data
            again = []
            while True:
                r = parse(st["buf"], st["pos"])
                if r is None:
                    break
                (kind, val), st["pos"] = r
                if kind == b">" and len(val) == 2 and val[0][1] == b"invalidate":
                    names = val[1][1] or []
                    invalidations += len(names)
                    again.extend(n[1] for n in names)
            st["buf"] = st["buf"][st["pos"]:]
            st["pos"] = 0
            if again:
                reread += len(again)
                st["sock"].sendall(b"".join(cmd("GET", k) for k in again))
    for st in conns:
        st["sock"].close()
    print("invalidations %d reread %d" % (invalidations, reread))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Times commands whose cost an input controls at sizes N, 2N and 4N against a running server,
and prints each time and the ratio to the previous size (about 2 for linear work, about 4 for
quadratic). Used for docs/limits.md. Usage: scaling-probe.py PORT [N]. Loopback only."""

import socket
import sys
import time


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.buf = bytearray()
        self.pos = 0

    def _fill(self):
        if self.pos > (1 << 20):
            del self.buf[:self.pos]
            self.pos = 0
        chunk = self.s.recv(1 << 20)
        if not chunk:
            raise EOFError
        self.buf += chunk

    def _line(self):
        while True:
            end = self.buf.find(b"\r\n", self.pos)
            if end >= 0:
                line = bytes(self.buf[self.pos:end])
                self.pos = end + 2
                return line
            self._fill()

    def reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t in (b"+", b"-", b":"):
            return line
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < self.pos + n + 2:
                self._fill()
            v = bytes(self.buf[self.pos:self.pos + n])
            self.pos += n + 2
            return v
        if t == b"*":
            n = int(rest)
            return [self.reply() for _ in range(max(n, 0))]
        raise ValueError(line)

    @staticmethod
    def enc(args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        return b"".join(out)

    def pipeline(self, cmds, batch=1000):
        for i in range(0, len(cmds), batch):
            part = cmds[i:i + batch]
            self.s.sendall(b"".join(self.enc(c) for c in part))
            for _ in part:
                self.reply()

    def call(self, *args):
        self.s.sendall(self.enc(args))
        return self.reply()

    def timed(self, *args):
        t0 = time.perf_counter()
        r = self.call(*args)
        return time.perf_counter() - t0, r


def scenarios(n):
    """(name, setup commands, timed command or list of commands) for a size n."""
    chunk = 500
    rng = range(n)
    lst = [["RPUSH", "l"] + [("a" if i % 2 else "b") for i in range(j, min(j + chunk, n))]
           for j in range(0, n, chunk)]
    nums = [["RPUSH", "nl"] + [str((i * 7919) % n) for i in range(j, min(j + chunk, n))]
            for j in range(0, n, chunk)]
    zs = [["ZADD", "z"] + sum(([str(i), "m%d" % i] for i in range(j, min(j + chunk, n))), [])
          for j in range(0, n, chunk)]
    geo = [["GEOADD", "g"] + sum(([str(-179 + (i % 358)), str(-80 + (i % 160)), "p%d" % i]
                                  for i in range(j, min(j + chunk, n))), [])
           for j in range(0, n, chunk)]
    yield "LREM l 0 a (half of n)", lst, ["LREM", "l", "0", "a"]
    yield "LPOS l x MAXLEN 0 (absent)", lst, ["LPOS", "l", "x", "MAXLEN", "0"]
    yield "SORT nl (n numbers)", nums, ["SORT", "nl", "LIMIT", "0", "1"]
    yield "ZUNIONSTORE d 8 z*8 WEIGHTS", zs, ["ZUNIONSTORE", "d", "8"] + ["z"] * 8 + ["WEIGHTS"] + ["2"] * 8
    yield "GEOSEARCH g 20000 km (everything)", geo, ["GEOSEARCH", "g", "FROMLONLAT", "0", "0", "BYRADIUS", "20000", "km", "COUNT", "1"]
    if n <= 20000: yield "LINSERT x n before one pivot (all)", [["RPUSH", "li", "first", "pivot"]], \
        [["LINSERT", "li", "BEFORE", "pivot", "v%d" % i] for i in rng]
    yield "APPEND 100 B x n (all)", [], [["APPEND", "str", "x" * 100] for _ in rng]
    yield "LSET middle x n (all)", [["RPUSH", "ls"] + ["v"] * 1000], \
        [["LSET", "ls", "500", "w%d" % i] for i in rng]
    yield "SRANDMEMBER s -n", [["SADD", "s", "a", "b", "c"]], ["SRANDMEMBER", "s", str(-n)]
    yield "ZRANDMEMBER z -n", [["ZADD", "zr", "1", "a"]], ["ZRANDMEMBER", "zr", str(-n)]
    yield "HRANDFIELD h -n", [["HSET", "h", "a", "1"]], ["HRANDFIELD", "h", str(-n)]
    yield "KEYS with 20 stars over n keys", [["SET", "k%d" % i, "v"] for i in rng], \
        ["KEYS", "*k" * 20 + "x"]


def main():
    port = int(sys.argv[1])
    base = int(sys.argv[2]) if len(sys.argv) > 2 else 25_000
    c = Conn(port)
    results = {}
    for mult in (1, 2, 4):
        n = base * mult
        for name, setup, cmd in scenarios(n):
            c.call("FLUSHALL")
            c.pipeline(setup)
            if isinstance(cmd[0], list):  # a sequence of n commands, timed as a pipeline
                t0 = time.perf_counter()
                c.pipeline(cmd)
                dt = time.perf_counter() - t0
            else:
                dt, _ = c.timed(*cmd)
            results.setdefault(name, []).append((n, dt))
    for name, rows in results.items():
        cells = []
        prev = None
        for n, dt in rows:
            ratio = "" if prev is None or prev == 0 else " x%.1f" % (dt / prev)
            cells.append("n=%d %.1f ms%s" % (n, dt * 1000, ratio))
            prev = dt
        print("%-40s %s" % (name, " | ".join(cells)))


if __name__ == "__main__":
    main()

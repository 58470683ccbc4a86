"""What tools/auth-flood.py and tools/nonreading-clients.py share: starting a server (Meridian
or redis-server) on a free loopback port in a temporary directory pinned to one CPU, a minimal
RESP client over a raw socket, paced probes, the server's RSS from /proc, the servers to
compare and their alternating order. Standard library only.

Only 127.0.0.1 is ever connected to; every wait is bounded in time."""

import os
import shutil
import socket
import subprocess
import tempfile
import time

SERVER_CPU = 0
LOAD_CPU = 1
START_SECONDS_MAX = 30.0


def enc(*args):
    """One command as a RESP multibulk."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    """A blocking RESP2 connection: send commands, read whole replies (nested arrays too)."""

    def __init__(self, port, timeout=10.0, rcvbuf=None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf is not None:
            # Before connect, so that the window the server sees is the small one.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def close(self):
        self.sock.close()

    def _fill(self):
        chunk = self.sock.recv(1 << 16)
        if not chunk:
            raise EOFError("server closed the connection")
        self.buf += chunk

    def _line(self):
        while True:
            i = self.buf.find(b"\r\n")
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2 :]
                return line
            self._fill()

    def reply(self):
        """One reply: bytes, int, None, list, or an Exception instance for an error."""
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest
        if kind == b"-":
            return Exception(rest.decode(errors="replace"))
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._fill()
            data, self.buf = self.buf[:n], self.buf[n + 2 :]
            return data
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ValueError("unexpected reply line %r" % line[:40])

    def call(self, *args):
        self.sock.sendall(enc(*args))
        r = self.reply()
        if isinstance(r, Exception):
            raise r
        return r

    def info(self, section):
        text = self.call("INFO", section).decode()
        out = {}
        for line in text.split("\r\n"):
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = v
        return out


def free_port(block=8):
    """A loopback port P with P..P+block-1 free (Meridian's shards listen on P+1…P+N)."""
    for _ in range(200):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if p + block >= 65536:
            continue
        ok = True
        for q in range(p, p + block):
            t = socket.socket()
            try:
                t.bind(("127.0.0.1", q))
            except OSError:
                ok = False
            finally:
                t.close()
            if not ok:
                break
        if ok:
            return p
    raise RuntimeError("no free block of loopback ports")


def rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


class Server:
    """A server process pinned to SERVER_CPU, in a temporary directory removed on stop()."""

    def __init__(self, kind, path, password=None, shards=None, extra=()):
        self.kind = kind
        self.dir = tempfile.mkdtemp(prefix="meridian-fig-")
        self.port = free_port()
        if kind == "meridian":
            argv = [path, "server", "--port", str(self.port), "--dir", self.dir]
            if shards is not None:
                argv += ["--shards", str(shards)]
            if password:
                argv += ["--requirepass", password]
        else:
            argv = [path, "--port", str(self.port), "--dir", self.dir, "--save", "",
                    "--appendonly", "no"]
            if password:
                argv += ["--requirepass", password]
        argv += list(extra)
        self.argv = ["taskset", "-c", str(SERVER_CPU)] + argv
        self.log = open(os.path.join(self.dir, "server.log"), "wb")
        self.proc = subprocess.Popen(self.argv, stdout=self.log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        self.pid = self.proc.pid
        deadline = time.monotonic() + START_SECONDS_MAX
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError("server exited at start: %s" % self.log_tail())
            try:
                c = Conn(self.port, timeout=2.0)
                c.sock.sendall(enc("PING"))
                r = c.reply()
                c.close()
                if r == b"PONG" or (isinstance(r, Exception) and "NOAUTH" in str(r)):
                    break
            except (OSError, EOFError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("server did not answer within %.0f s" % START_SECONDS_MAX)
            time.sleep(0.1)

    def log_tail(self, size=2000):
        self.log.flush()
        with open(os.path.join(self.dir, "server.log"), "rb") as f:
            return f.read()[-size:].decode(errors="replace")

    def stop(self):
        """SIGTERM, then SIGKILL after 20 s (and says so: a server that needs it is a defect)."""
        killed = False
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
                killed = True
        self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        return killed


def percentile(sorted_values, p):
    if not sorted_values:
        return float("nan")
    i = min(len(sorted_values) - 1, max(0, int(round(p / 100.0 * len(sorted_values))) - 1))
    return sorted_values[i]


def paced_round_trips(c, commands, rate, seconds, out, stop=None):
    """Sends `commands` on `c` in turn, one at a time, `rate` per second for `seconds` (or
    until `stop` is set), appending each round trip (ms) to `out`. An error reply raises."""
    start = time.monotonic()
    for i in range(int(rate * seconds)):
        if stop is not None and stop.is_set():
            break
        d = start + i / rate - time.monotonic()
        if d > 0:
            time.sleep(d)
        t0 = time.perf_counter()
        c.sock.sendall(commands[i % len(commands)])
        r = c.reply()
        out.append((time.perf_counter() - t0) * 1000.0)
        if isinstance(r, Exception):
            raise r


def add_server_args(ap):
    """The options every tool here takes: the servers to run and how many rounds."""
    ap.add_argument("--meridian", help="path of the meridian binary")
    ap.add_argument("--redis-server", help="path of redis-server")
    ap.add_argument("--shards", default="1", help="Meridian --shards values, comma-separated")
    ap.add_argument("--rounds", type=int, default=2)


def server_configs(ap, args):
    """(label, kind, binary, shards) of each server `add_server_args`'s options name."""
    configs = []
    if args.meridian:
        for s in args.shards.split(","):
            configs.append(("meridian-%ss" % s, "meridian", args.meridian, int(s)))
    if args.redis_server:
        configs.append(("redis", "redis", args.redis_server, None))
    if not configs:
        ap.error("give --meridian and/or --redis-server")
    return configs


def alternating_runs(configs, rounds, run):
    """`run(*config)` for every config, round after round, the order reversed every other
    round (A B, B A, ...); the results that are not None."""
    runs = []
    for rnd in range(rounds):
        for cfg in configs if rnd % 2 == 0 else list(reversed(configs)):
            r = run(*cfg)
            if r is not None:
                runs.append(r)
    return runs

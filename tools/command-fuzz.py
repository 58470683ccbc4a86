#!/usr/bin/env python3
"""Random command fuzzing of Meridian, two ways.

  diff      The same random command stream (every data type, wrong types, bad arguments,
            MULTI blocks, scripts) to a Meridian and a redis-server: the first reply that
            differs is printed with the seed and command, and that seed stops there.
            Replies that differ by design are normalized first: member order of sets and
            hashes, random picks (only the count is compared), relative TTLs, DUMP payloads.
  converge  Random writes to two sites or more of one deployment at once, optionally cutting
            their links now and then (through `proxy`); once quiet, every key of databases 0
            and 1 must be the same at every site.
  proxy     A TCP proxy for a sync link that cuts every connection and refuses new ones
            while a flag file exists (the partitions of `converge`).

Every run is bounded: `--seeds FIRST:COUNT` and `--commands N` per seed.

  meridian server --port 7471 --shards 2 --appendonly no &
  redis-server --port 7800 --save '' --appendonly no &
  tools/command-fuzz.py diff --meridian-port 7471 --redis-port 7800 --seeds 1:200

  tools/command-fuzz.py proxy 7702 7602 /tmp/cut &    # a's link to b
  tools/command-fuzz.py proxy 7701 7601 /tmp/cut &    # b's link to a
  meridian server --site a --port 7501 --sync-port 7601 --peer b=127.0.0.1:7702 \
      --cluster-api no --appendonly no &
  meridian server --site b --port 7511 --sync-port 7602 --peer a=127.0.0.1:7701 \
      --cluster-api no --appendonly no &
  tools/command-fuzz.py converge --site-ports 7501,7511 --partition-flag /tmp/cut --seeds 1:100

Found with it (2026-11-27): EXEC over several shards answering CROSSSLOT for a keyless
script or a bad numkeys, INCRBYFLOAT's long double replies, and two sites diverging after a
MOVE or SWAPDB of a HyperLogLog into a key holding a removal (docs/compatibility.md).
"""
import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loopback_server  # noqa: E402  (the tools' shared RESP client)

# A reply that does not come within this long fails the run (a hung server is a finding).
REPLY_TIMEOUT_S = 10
# How long `converge` waits for two sites to agree once the load stops.
CONVERGE_WAIT_S = 20
# Chance per command that `converge` toggles the partition (with --partition-flag).
PARTITION_TOGGLE_P = 0.02
# Chance per command that `converge` kills and restarts a site (with --restart-cmd).
RESTART_P = 0.004
# Chance per command that `diff` opens a MULTI block of 1 to 4 commands.
MULTI_P = 0.04


class Conn(loopback_server.Conn):
    """loopback_server's connection, its replies read typed so that two servers' can be
    compared exactly: a simple string is not a bulk one, an error is a value, and RESP3's
    types are kept apart."""

    def __init__(self, port):
        super().__init__(port, timeout=REPLY_TIMEOUT_S)

    def _bulk(self, n):
        while len(self.buf) < n + 2:
            self._fill()
        v, self.buf = self.buf[:n], self.buf[n + 2:]
        return v

    def read(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t == b"+":
            return ("s", rest)
        if t == b"-":
            return ("e", rest)
        if t == b":":
            return ("i", int(rest))
        if t in (b"$", b"*") and int(rest) < 0:
            return None
        if t == b"$":
            return self._bulk(int(rest))
        if t == b"*":
            return [self.read() for _ in range(int(rest))]
        if t == b"%":
            return ("map", [(self.read(), self.read()) for _ in range(int(rest))])
        if t == b"~":
            return ("set", sorted([self.read() for _ in range(int(rest))], key=repr))
        if t == b"_":
            return ("null",)
        if t == b",":
            return ("double", rest)
        if t == b"#":
            return ("bool", rest)
        if t == b"(":
            return ("big", rest)
        if t == b"=":
            return ("verbatim", self._bulk(int(rest)))
        raise ValueError(line)

    def call(self, args):
        """Sends one command (text arguments as Latin-1, so any byte can be one) and reads
        its reply."""
        self.sock.sendall(loopback_server.enc(*(a.encode("latin-1") if isinstance(a, str) else a
                                                for a in args)))
        return self.read()


KEYS = ["a", "b", "c", "{t}x", "{t}y", "n", "l", "h"]
VALS = ["", "0", "1", "-1", "10", "3.5", "-2.5e3", "abc", "xyzzy", "9223372036854775807",
        "-9223372036854775808", "inf", "-inf", "nan", "1e400", " 1", "\x00\xff", "a*b", "17",
        "0x10", "1.0", "00", "+1", "-0", "5e-1"]
INTS = ["-3", "-1", "0", "1", "2", "3", "5", "100", "-100", "9223372036854775807",
        "-9223372036854775808", "abc", "1.5", "4294967296"]
SCORES = ["0", "1", "-1", "2.5", "inf", "-inf", "+inf", "(1", "(2.5", "nan", "abc", "1e3", "-0"]
LEX = ["-", "+", "[a", "(a", "[b", "(c", "a", "[", "("]


def r(lst):
    return random.choice(lst)


def key():
    return r(KEYS)


def val():
    return r(VALS)


def ival():
    return r(INTS)


def small():
    return str(random.randint(-4, 6))


def keys(lo=1, hi=3):
    return [key() for _ in range(random.randint(lo, hi))]


def fields(lo=1, hi=3):
    return [r(["f1", "f2", "f3", "a", "b"]) for _ in range(random.randint(lo, hi))]


def members(lo=1, hi=3):
    return [r(["m1", "m2", "m3", "a", "b", "c", "10", "-1"]) for _ in range(random.randint(lo, hi))]


def opt(p, *a):
    return list(a) if random.random() < p else []


def zrange_args():
    k = key()
    kind = random.randint(0, 2)
    if kind == 0:
        a = [k, small(), small()]
    elif kind == 1:
        a = [k, r(SCORES), r(SCORES), "BYSCORE"]
    else:
        a = [k, r(LEX), r(LEX), "BYLEX"]
    a += opt(0.3, "REV") + opt(0.3, "LIMIT", small(), small()) + opt(0.3, "WITHSCORES")
    return a


def bitfield_args():
    a = [key()]
    for _ in range(random.randint(1, 3)):
        c = random.randint(0, 3)
        t = r(["u8", "i8", "u4", "i16", "u1", "i64", "u63", "u64", "x8"])
        off = r(["0", "3", "#1", "100", "-1"])
        if c == 0:
            a += ["GET", t, off]
        elif c == 1:
            a += ["SET", t, off, ival()]
        elif c == 2:
            a += ["INCRBY", t, off, ival()]
        else:
            a += ["OVERFLOW", r(["WRAP", "SAT", "FAIL", "BAD"])]
    return a


GEN = [
    # strings
    lambda: ["SET", key(), val()] + opt(0.2, r(["NX", "XX"])) + opt(0.1, "GET") + opt(0.1, "KEEPTTL"),
    lambda: ["SET", key(), val(), "EX", r(["1000", "0", "-1", "abc"])],
    lambda: ["GET", key()],
    lambda: ["GETSET", key(), val()],
    lambda: ["SETNX", key(), val()],
    lambda: ["MSET"] + sum([[key(), val()] for _ in range(random.randint(1, 3))], []),
    lambda: ["MSETNX"] + sum([[key(), val()] for _ in range(random.randint(1, 3))], []),
    lambda: ["MGET"] + keys(),
    lambda: ["APPEND", key(), val()],
    lambda: ["STRLEN", key()],
    lambda: ["SETRANGE", key(), r(["0", "1", "5", "-1", "536870912"]), val()],
    lambda: ["GETRANGE", key(), small(), small()],
    lambda: ["INCR", key()],
    lambda: ["DECR", key()],
    lambda: ["INCRBY", key(), ival()],
    lambda: ["DECRBY", key(), ival()],
    lambda: ["INCRBYFLOAT", key(), r(VALS)],
    lambda: ["GETDEL", key()],
    lambda: ["GETEX", key()] + opt(0.3, "PERSIST"),
    lambda: ["SETBIT", key(), r(["0", "7", "8", "100", "-1", "4294967296"]), r(["0", "1", "2"])],
    lambda: ["GETBIT", key(), r(["0", "7", "100", "-1"])],
    lambda: ["BITCOUNT", key()] + opt(0.5, small(), small()) + opt(0.3, r(["BIT", "BYTE", "X"])),
    lambda: ["BITPOS", key(), r(["0", "1", "2"])] + opt(0.5, small()) + opt(0.3, small()),
    lambda: ["BITOP", r(["AND", "OR", "XOR", "NOT", "FOO"]), key()] + keys(1, 2),
    lambda: ["BITFIELD"] + bitfield_args(),
    lambda: ["LCS", key(), key()] + opt(0.3, r(["LEN", "IDX"])),
    # lists
    lambda: [r(["LPUSH", "RPUSH", "LPUSHX", "RPUSHX"]), key()] + [val() for _ in range(random.randint(1, 3))],
    lambda: [r(["LPOP", "RPOP"]), key()] + opt(0.4, small()),
    lambda: ["LLEN", key()],
    lambda: ["LRANGE", key(), small(), small()],
    lambda: ["LINDEX", key(), small()],
    lambda: ["LSET", key(), small(), val()],
    lambda: ["LINSERT", key(), r(["BEFORE", "AFTER", "X"]), val(), val()],
    lambda: ["LREM", key(), small(), val()],
    lambda: ["LTRIM", key(), small(), small()],
    lambda: ["LPOS", key(), val()] + opt(0.4, "RANK", small()) + opt(0.4, "COUNT", small()) + opt(0.3, "MAXLEN", small()),
    lambda: ["LMOVE", key(), key(), r(["LEFT", "RIGHT"]), r(["LEFT", "RIGHT", "UP"])],
    lambda: ["RPOPLPUSH", key(), key()],
    lambda: ["LMPOP", r(["1", "2", "0", "-1", ival()])] + keys(1, 2) + [r(["LEFT", "RIGHT"])] + opt(0.4, "COUNT", small()),
    # hashes
    lambda: ["HSET", key()] + sum([[r(["f1", "f2", "f3"]), val()] for _ in range(random.randint(1, 3))], []),
    lambda: ["HSETNX", key(), r(["f1", "f2"]), val()],
    lambda: ["HGET", key(), r(["f1", "f2", "f3"])],
    lambda: ["HMGET", key()] + fields(),
    lambda: ["HDEL", key()] + fields(),
    lambda: ["HLEN", key()],
    lambda: ["HSTRLEN", key(), r(["f1", "f2"])],
    lambda: ["HINCRBY", key(), r(["f1", "f2"]), ival()],
    lambda: ["HINCRBYFLOAT", key(), r(["f1", "f2"]), val()],
    lambda: ["HKEYS", key()],
    lambda: ["HVALS", key()],
    lambda: ["HGETALL", key()],
    lambda: ["HEXISTS", key(), r(["f1", "f2"])],
    # sets
    lambda: ["SADD", key()] + members(),
    lambda: ["SREM", key()] + members(),
    lambda: ["SCARD", key()],
    lambda: ["SISMEMBER", key(), r(["m1", "a", "10"])],
    lambda: ["SMISMEMBER", key()] + members(),
    lambda: ["SMEMBERS", key()],
    lambda: [r(["SINTER", "SUNION", "SDIFF"])] + keys(),
    lambda: [r(["SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE"]), key()] + keys(),
    lambda: ["SINTERCARD", r(["1", "2", "0", "3"])] + keys(1, 2) + opt(0.3, "LIMIT", small()),
    lambda: ["SMOVE", key(), key(), r(["m1", "a", "10"])],
    # sorted sets
    lambda: ["ZADD", key()] + opt(0.2, r(["NX", "XX"])) + opt(0.2, r(["GT", "LT"])) + opt(0.2, "CH") + opt(0.1, "INCR")
    + sum([[r(SCORES), r(["m1", "m2", "a", "b"])] for _ in range(random.randint(1, 3))], []),
    lambda: ["ZINCRBY", key(), r(SCORES), r(["m1", "a"])],
    lambda: ["ZREM", key()] + members(),
    lambda: ["ZCARD", key()],
    lambda: ["ZSCORE", key(), r(["m1", "a", "m2"])],
    lambda: ["ZMSCORE", key()] + members(),
    lambda: [r(["ZRANK", "ZREVRANK"]), key(), r(["m1", "a", "m2"])],
    lambda: ["ZRANGE"] + zrange_args(),
    lambda: ["ZRANGESTORE", key()] + [a for a in zrange_args() if a != "WITHSCORES"],
    lambda: [r(["ZRANGEBYSCORE", "ZREVRANGEBYSCORE"]), key(), r(SCORES), r(SCORES)] + opt(0.3, "WITHSCORES") + opt(0.3, "LIMIT", small(), small()),
    lambda: [r(["ZRANGEBYLEX", "ZREVRANGEBYLEX"]), key(), r(LEX), r(LEX)] + opt(0.3, "LIMIT", small(), small()),
    lambda: ["ZCOUNT", key(), r(SCORES), r(SCORES)],
    lambda: ["ZLEXCOUNT", key(), r(LEX), r(LEX)],
    lambda: ["ZREMRANGEBYRANK", key(), small(), small()],
    lambda: ["ZREMRANGEBYSCORE", key(), r(SCORES), r(SCORES)],
    lambda: ["ZREMRANGEBYLEX", key(), r(LEX), r(LEX)],
    lambda: [r(["ZPOPMIN", "ZPOPMAX"]), key()] + opt(0.4, small()),
    lambda: [r(["ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE"]), key(), r(["1", "2", "0", ival()])] + keys(1, 2)
    + opt(0.3, "WEIGHTS", r(SCORES), r(SCORES)) + opt(0.3, "AGGREGATE", r(["SUM", "MIN", "MAX", "X"])),
    lambda: [r(["ZUNION", "ZINTER", "ZDIFF"]), r(["1", "2"])] + keys(1, 2) + opt(0.4, "WITHSCORES"),
    lambda: ["ZMPOP", r(["1", "2"])] + keys(1, 2) + [r(["MIN", "MAX"])] + opt(0.4, "COUNT", small()),
    lambda: ["ZINTERCARD", r(["1", "2"])] + keys(1, 2) + opt(0.3, "LIMIT", small()),
    # keys
    lambda: ["DEL"] + keys(),
    lambda: ["EXISTS"] + keys(),
    lambda: ["TYPE", key()],
    lambda: [r(["RENAME", "RENAMENX"]), key(), key()],
    lambda: ["COPY", key(), key()] + opt(0.3, "REPLACE"),
    lambda: ["EXPIRE", key(), r(["1000", "2000", "-1", "abc"])] + opt(0.3, r(["NX", "XX", "GT", "LT"])),
    lambda: ["PERSIST", key()],
    lambda: ["TTL", key()],
    lambda: ["SORT", key()] + opt(0.4, "ALPHA") + opt(0.3, "DESC") + opt(0.3, "LIMIT", small(), small()) + opt(0.2, "STORE", key()),
    lambda: ["SORT_RO", key()] + opt(0.5, "ALPHA"),
    # hll
    lambda: ["PFADD", key()] + members(0, 3),
    lambda: ["PFCOUNT"] + keys(1, 2),
    lambda: ["PFMERGE", key()] + keys(1, 2),
    # geo
    lambda: ["GEOADD", key()] + opt(0.2, r(["NX", "XX"])) + [r(["13.36", "15.08", "200", "abc"]), r(["38.11", "37.50", "86"]), r(["m1", "a"])],
    lambda: ["GEODIST", key(), r(["m1", "a"]), r(["m1", "a"])] + opt(0.5, r(["km", "mi", "ft", "x"])),
    lambda: ["GEOPOS", key()] + members(),
    lambda: ["GEOHASH", key()] + members(),
    lambda: ["GEOSEARCH", key(), "FROMLONLAT", "15", "37", "BYRADIUS", r(["200", "0", "-1"]), "km"] + opt(0.5, r(["ASC", "DESC"])) + opt(0.3, "WITHDIST"),
    # streams
    lambda: ["XADD", key()] + opt(0.2, "MAXLEN", r(["2", "0"])) + [r(["*", "1-1", "2-0", "0-1", "5", "3-*"]), "f", val()],
    lambda: ["XLEN", key()],
    lambda: [r(["XRANGE", "XREVRANGE"]), key(), r(["-", "+", "1", "2-0", "(1-1"]), r(["-", "+", "3", "(5"])] + opt(0.3, "COUNT", small()),
    lambda: ["XDEL", key(), r(["1-1", "2-0", "5-0"])],
    lambda: ["XTRIM", key(), r(["MAXLEN", "MINID"]), r(["1", "0", "2-0"])],
]

# Absolute deadlines: 2100-01-01, and instants in the past (the key goes at once).
FAR = ["4102444800", "4102444801", "1", "0", "-5"]


def scan_args(cmd):
    a = [cmd, key(), "0"] if cmd != "SCAN" else [cmd, "0"]
    return a + opt(0.3, "MATCH", r(["*", "m*", "f?", "[ab]*", "*1"])) + ["COUNT", "1000"]


GEN0 = list(GEN)
GEN += [
    lambda: [r(["EXPIREAT", "PEXPIREAT"]), key(), r(FAR)] + opt(0.3, r(["NX", "XX", "GT", "LT"])),
    lambda: [r(["EXPIRETIME", "PEXPIRETIME"]), key()],
    lambda: ["PTTL", key()],
    lambda: ["SET", key(), val()] + r([["EXAT", "4102444800"], ["PXAT", "4102444800000"]]),
    lambda: ["GETEX", key(), r(["EXAT", "PXAT", "EX", "PERSIST"]), r(FAR)],
    lambda: [r(["SRANDMEMBER", "HRANDFIELD", "ZRANDMEMBER"]), key()] + opt(0.7, r(["0", "1", "-1", "5", "-5", "abc"])),
    lambda: ["HRANDFIELD", key(), r(["2", "-2"]), "WITHVALUES"],
    lambda: ["ZRANDMEMBER", key(), r(["2", "-2"]), "WITHSCORES"],
    lambda: scan_args(r(["SSCAN", "HSCAN", "ZSCAN"])),
    lambda: ["SCAN", "0", "COUNT", "1000"] + opt(0.4, "TYPE", r(["string", "list", "zset", "hash", "set", "stream", "foo"])),
    lambda: ["OBJECT", "ENCODING", key()],
    lambda: ["KEYS", r(["*", "{t}*", "?", "[a-c]", "*x"])],
    lambda: ["DBSIZE"],
    lambda: ["SUBSTR", key(), small(), small()],
    lambda: ["SORT", key(), "BY", r(["nosort", "*", "*->f1", "h->f1", "n"])] + opt(0.5, "GET", r(["#", "*", "*->f1"])) + opt(0.3, "ALPHA"),
    lambda: ["DUMP", key()],
    lambda: ["XGROUP", "CREATE", key(), r(["g1", "g2"]), r(["$", "0", "1-1"])] + opt(0.3, "MKSTREAM"),
    lambda: ["XGROUP", r(["DESTROY", "CREATECONSUMER", "DELCONSUMER", "SETID"]), key(), r(["g1", "g2"]), r(["c1", "0"])],
    lambda: ["XREADGROUP", "GROUP", r(["g1", "g2"]), r(["c1", "c2"]), "COUNT", r(["1", "2"]), "STREAMS", key(), r([">", "0"])],
    lambda: ["XACK", key(), r(["g1", "g2"]), r(["1-1", "2-0", "3-1"])],
    lambda: ["XPENDING", key(), r(["g1", "g2"])],
    lambda: ["XREAD", "COUNT", r(["1", "5"]), "STREAMS", key(), r(["0", "1-1", "$"])],
    lambda: ["GEOSEARCHSTORE", key(), key(), "FROMLONLAT", "15", "37", "BYBOX", "400", "400", "km"] + opt(0.3, "STOREDIST"),
    lambda: ["GEORADIUS", key(), "15", "37", "200", "km"] + opt(0.4, "WITHCOORD") + opt(0.4, "ASC"),
    lambda: ["EVAL", "return redis.call(unpack(ARGV))", "0"] + r(GEN0)(),
    # numkeys from the integer corpus: i64::MAX overflowed the key range (a debug panic).
    lambda: [r(["EVAL", "EVAL_RO", "FCALL"]), "return #KEYS", ival()] + keys(0, 2),
    lambda: ["EVAL", "return redis.pcall(unpack(ARGV))", "0"] + r(GEN0)(),
    lambda: ["EVAL", "return {redis.call(ARGV[1], KEYS[1]), redis.call('TYPE', KEYS[1])}", "1", key(), r(["GET", "LLEN", "ZCARD", "HLEN", "SCARD", "TTL", "INCR"])],
]

GEN += [
    lambda: ["ZADD", key()] + sum([[str(random.randint(-50, 50)), "z%d" % i] for i in range(random.choice([5, 130, 200]))], []),
    lambda: ["SADD", key()] + [str(random.randint(0, 2000)) for _ in range(random.choice([5, 520, 600]))],
    lambda: ["HSET", key()] + sum([["f%d" % i, "v" * random.randint(1, 70)] for i in range(random.choice([5, 130]))], []),
    lambda: ["RPUSH", key()] + [str(i) for i in range(random.choice([5, 200]))],
    lambda: ["SELECT", r(["0", "0", "0", "1", "16", "x"])],
    lambda: ["MOVE", key(), r(["0", "1"])],
    lambda: ["COPY", key(), key(), "DB", r(["0", "1"])],
    lambda: ["SWAPDB", r(["0", "1"]), r(["0", "1"])],
    lambda: ["SMOVE", key(), key(), r(["1", "10", "m1"])],
    lambda: ["LPOS", key(), r(["1", "5", "100"])] + opt(0.5, "RANK", r(["1", "-1", "2", "0"])) + opt(0.5, "COUNT", r(["0", "2"])),
    lambda: ["ZRANGEBYSCORE", key(), r(["-inf", "(0", "-10"]), r(["+inf", "10", "(20"]), "LIMIT", r(["0", "5"]), r(["3", "-1"])],
    lambda: ["ZREVRANK", key(), "z%d" % random.randint(0, 200)],
    lambda: ["ZSCORE", key(), "z%d" % random.randint(0, 200)],
    lambda: ["SISMEMBER", key(), str(random.randint(0, 2000))],
    lambda: ["HGET", key(), "f%d" % random.randint(0, 130)],
    lambda: ["LINDEX", key(), str(random.randint(-210, 210))],
    lambda: ["LRANGE", key(), str(random.randint(-210, 210)), str(random.randint(-210, 210))],
    lambda: ["OBJECT", "ENCODING", key()],
]

UNORDERED = {"SMEMBERS", "SINTER", "SUNION", "SDIFF", "HKEYS", "HVALS", "KEYS"}
PAIRS = {"HGETALL"}


RANDOM = {"SRANDMEMBER", "HRANDFIELD", "ZRANDMEMBER"}
SCANS = {"SSCAN", "HSCAN", "ZSCAN", "SCAN"}


def norm(cmd, rep):
    name = cmd[0].upper()
    if name in RANDOM and isinstance(rep, list):
        return ("len", len(rep))
    if name in RANDOM and isinstance(rep, bytes):
        return ("one",)
    if name in SCANS and isinstance(rep, list) and len(rep) == 2 and isinstance(rep[1], list):
        items = rep[1]
        if name in ("HSCAN", "ZSCAN"):
            items = sorted(zip(items[0::2], items[1::2]), key=repr)
        else:
            items = sorted(items, key=repr)
        return (rep[0], items)
    if name == "DUMP" and isinstance(rep, bytes):
        return ("dump",)
    if name == "SORT" and len(cmd) > 3 and cmd[2] == "BY" and isinstance(rep, list):
        return sorted(rep, key=repr)
    if name in ("EXPIRETIME", "PEXPIRETIME") and isinstance(rep, tuple) and rep[0] == "i" and rep[1] > 0 \
            and rep[1] not in (4102444800, 4102444801, 4102444800000, 4102444801000, 4102444800000 // 1000):
        return ("i", "relative")
    if name in ("PTTL",) and isinstance(rep, tuple) and rep[0] == "i" and rep[1] > 0:
        return ("i", "positive")
    if name == "EVAL" and len(cmd) > 3 and cmd[3].upper() in UNORDERED | PAIRS | RANDOM | SCANS:
        return ("eval", "unordered")
    if name in UNORDERED and isinstance(rep, list):
        return sorted(rep, key=repr)
    if isinstance(rep, tuple) and rep[0] == "map" and name in PAIRS | {"EVAL"}:
        return ("map", sorted(rep[1], key=repr))
    if name in PAIRS and isinstance(rep, list):
        return sorted(zip(rep[0::2], rep[1::2]), key=repr)
    if name == "TTL" and isinstance(rep, tuple) and rep[0] == "i" and rep[1] > 0:
        return ("i", "positive")
    if name == "XADD" and "*" in cmd and isinstance(rep, bytes):
        return b"<auto id>"
    return rep


def gen():
    c = r(GEN)()
    # auto stream ids depend on the clock: keep explicit ids only
    if c[0] == "EVAL" and len(c) > 3 and c[3] == "XADD" and "*" in c:
        c[c.index("*")] = "9-1"
    if c[0] == "XADD" and "*" in c:
        c[c.index("*")] = "9-1"
    if c[0] == "XADD" and "3-*" in c:
        c[c.index("3-*")] = "3-1"
    return c


def snapshot(conn, dbs=("0",)):
    """Every key of the pool (`diff`) or every key (`converge`) with its type and contents."""
    out = {}
    for db in dbs:
        conn.call(["SELECT", db])
        names = KEYS if len(dbs) == 1 else sorted(k.decode("latin-1") for k in conn.call(["KEYS", "*"]))
        for k in names:
            t = conn.call(["TYPE", k])[1]
            if t == b"string":
                v = conn.call(["GET", k])
            elif t == b"list":
                v = conn.call(["LRANGE", k, "0", "-1"])
            elif t == b"hash":
                v = norm(["HGETALL", k], conn.call(["HGETALL", k]))
            elif t == b"set":
                v = norm(["SMEMBERS", k], conn.call(["SMEMBERS", k]))
            elif t == b"zset":
                v = conn.call(["ZRANGE", k, "0", "-1", "WITHSCORES"])
            elif t == b"stream":
                v = (conn.call(["XRANGE", k, "-", "+"]), conn.call(["XINFO", "GROUPS", k]))
            else:
                v = None
            ttl = conn.call(["PTTL", k])
            has_ttl = isinstance(ttl, tuple) and isinstance(ttl[1], int) and ttl[1] > 0
            out[(db, k)] = (t, v, has_ttl)
    conn.call(["SELECT", "0"])
    return out


def seeds(text):
    first, count = text.split(":")
    return range(int(first), int(first) + int(count))


def run_diff(args):
    m, rd = Conn(args.meridian_port), Conn(args.redis_port)
    if args.resp3:
        m.call(["HELLO", "3"])
        rd.call(["HELLO", "3"])
    seen = set()
    for seed in seeds(args.seeds):
        random.seed(seed)
        for c in (m, rd):
            c.call(["SELECT", "0"])
            c.call(["FLUSHALL"])
        queued, block = None, []
        for i in range(args.commands):
            if block:
                cmd = block.pop(0)
            elif random.random() < MULTI_P:
                block = [gen() for _ in range(random.randint(1, 4))] + [[r(["EXEC", "EXEC", "DISCARD"])]]
                cmd = ["MULTI"]
            else:
                cmd = gen()
            if cmd[0] == "MULTI":
                queued = []
            elif cmd[0] not in ("EXEC", "DISCARD") and queued is not None:
                queued.append(cmd)
            try:
                a = norm(cmd, m.call(cmd))
            except (EOFError, OSError) as e:
                print(f"seed {seed} #{i}: Meridian closed the connection or hung ({e}): {cmd!r}")
                return 1
            b = norm(cmd, rd.call(cmd))
            last_queued = queued
            if cmd[0] == "EXEC" and queued is not None and isinstance(a, list) and isinstance(b, list) \
                    and len(a) == len(b) == len(queued):
                a = [norm(q, x) for q, x in zip(queued, a)]
                b = [norm(q, x) for q, x in zip(queued, b)]
            if cmd[0] in ("EXEC", "DISCARD"):
                queued = None
            if a != b:
                sig = (cmd[0].upper(), str(b)[:40], str(a)[:40])
                if sig not in seen:
                    seen.add(sig)
                    print(f"seed {seed} #{i}: {cmd!r}\n   meridian: {a!r}\n   redis:    {b!r}")
                    for q in (last_queued or []) if cmd[0] == "EXEC" else []:
                        print("     queued", q)
                if queued is not None and cmd[0] != "MULTI":
                    m.call(["DISCARD"])
                    rd.call(["DISCARD"])
                break
        else:
            sa, sb = snapshot(m), snapshot(rd)
            if sa != sb:
                print(f"seed {seed}: final state differs")
                for k in KEYS:
                    if sa[("0", k)] != sb[("0", k)]:
                        print("  ", k, sa[("0", k)], sb[("0", k)])
    print("distinct differences:", len(seen))
    return 0


def run_converge(args):
    ports = [int(p) for p in args.site_ports.split(",")]
    if len(ports) < 2:
        print("converge needs two sites or more")
        return 2
    sites = [Conn(p) for p in ports]
    names = [chr(ord("a") + i) for i in range(len(sites))]
    flag = args.partition_flag
    diverged = 0

    def heal():
        if flag and os.path.exists(flag):
            os.remove(flag)

    for seed in seeds(args.seeds):
        random.seed(seed)
        heal()
        sites[0].call(["SELECT", "0"])
        sites[0].call(["FLUSHALL"])
        time.sleep(0.3)
        hist = []
        for i in range(args.commands):
            at = random.randrange(len(sites))
            cmd = gen()
            if cmd[0] == "SELECT":
                continue
            hist.append((names[at], cmd))
            sites[at].call(cmd)
            if args.restart_cmd and random.random() < RESTART_P:
                # Every write acknowledged before the kill must be kept (by the log, or by
                # the peers that hold it) and the sites must still converge.
                victim = random.randrange(len(sites))
                hist.append(("restart", [names[victim]]))
                sites[victim].close()
                subprocess.run(args.restart_cmd.replace("{site}", names[victim]), shell=True,
                               check=True, timeout=60)
                sites[victim] = Conn(ports[victim])
            if flag and random.random() < PARTITION_TOGGLE_P:
                hist.append(("partition", ["toggle"]))
                if os.path.exists(flag):
                    os.remove(flag)
                else:
                    open(flag, "w").close()
        heal()
        deadline = time.time() + CONVERGE_WAIT_S
        while True:
            time.sleep(0.2)
            snaps = [snapshot(c, ("0", "1")) for c in sites]
            if all(x == snaps[0] for x in snaps) or time.time() > deadline:
                break
        if any(x != snaps[0] for x in snaps):
            diverged += 1
            print(f"seed {seed}: the sites differ")
            for k in sorted(set().union(*snaps)):
                if any(x.get(k) != snaps[0].get(k) for x in snaps):
                    print("   ", k, " ".join(f"{n}: {str(x.get(k))[:300]}" for n, x in zip(names, snaps)))
            if args.history:
                path = os.path.join(args.history, f"converge-{seed}.json")
                with open(path, "w") as f:
                    json.dump(hist, f)
                print("    history:", path)
    print("seeds that diverged:", diverged)
    return 1 if diverged else 0


def run_proxy(args):
    conns = set()

    async def pump(reader, writer):
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def handle(cr, cw):
        if os.path.exists(args.flag):
            cw.close()
            return
        try:
            tr, tw = await asyncio.open_connection("127.0.0.1", args.target)
        except OSError:
            cw.close()
            return
        pair = (cw, tw)
        conns.add(pair)
        await asyncio.gather(pump(cr, tw), pump(tr, cw))
        conns.discard(pair)

    async def cut_while_flagged():
        while True:
            await asyncio.sleep(0.05)
            if os.path.exists(args.flag):
                for pair in list(conns):
                    for w in pair:
                        w.transport.abort()
                conns.clear()

    async def main():
        srv = await asyncio.start_server(handle, "127.0.0.1", args.listen)
        asyncio.get_running_loop().create_task(cut_while_flagged())
        async with srv:
            await srv.serve_forever()

    asyncio.run(main())
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="mode", required=True)
    d = sub.add_parser("diff")
    d.add_argument("--meridian-port", type=int, required=True)
    d.add_argument("--redis-port", type=int, required=True)
    d.add_argument("--seeds", default="1:100", help="FIRST:COUNT")
    d.add_argument("--commands", type=int, default=300, help="commands per seed")
    d.add_argument("--resp3", action="store_true", help="HELLO 3 on both first")
    c = sub.add_parser("converge")
    c.add_argument("--site-ports", required=True, help="PORT_A,PORT_B[,...]: one per site")
    c.add_argument("--seeds", default="1:50", help="FIRST:COUNT")
    c.add_argument("--commands", type=int, default=300, help="commands per seed")
    c.add_argument("--partition-flag", help="the flag file the `proxy` processes watch")
    c.add_argument("--history", help="a directory for the commands of each seed that diverged")
    c.add_argument("--restart-cmd", help="a shell command that kills (SIGKILL) and restarts site "
                   "{site} (a, b, ...) and returns once it answers PING; run now and then")
    x = sub.add_parser("proxy")
    x.add_argument("listen", type=int)
    x.add_argument("target", type=int)
    x.add_argument("flag")
    args = p.parse_args()
    return {"diff": run_diff, "converge": run_converge, "proxy": run_proxy}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())

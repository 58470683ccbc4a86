#!/usr/bin/env python3
"""Generates crates/server/src/cmd/meta.rs from a running Redis 7.0 server.

The command table's data (arity, flags, key positions, ACL categories) and the exact reply
bytes of COMMAND INFO and COMMAND DOCS come from Redis's own answers, in RESP2 and RESP3, so
that Meridian's COMMAND replies are byte-identical to Redis's for the commands it implements.

Usage: tools/gen-commands.py [--port 6379] > crates/server/src/cmd/meta.rs
"""
import argparse
import socket


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(("127.0.0.1", port))
        self.buf = b""

    def send(self, *args):
        out = b"*%d\r\n" % len(args)
        for a in args:
            a = a.encode() if isinstance(a, str) else a
            out += b"$%d\r\n%s\r\n" % (len(a), a)
        self.s.sendall(out)

    def fill(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise EOFError
            self.buf += chunk

    def read_all_reply(self):
        # Read until one full reply parses.
        while True:
            try:
                node, end = parse(self.buf, 0)
                raw = self.buf[:end]
                self.buf = self.buf[end:]
                return node, raw
            except IndexError:
                self.fill(len(self.buf) + 1)


def parse(b, i):
    """Returns (node, end). node = (kind, value, start, end); aggregates hold children."""
    start = i
    t = b[i:i + 1]
    if not t:
        raise IndexError
    nl = b.find(b"\r\n", i)
    if nl < 0:
        raise IndexError
    line = b[i + 1:nl]
    i = nl + 2
    if t in (b"+", b"-", b":", b",", b"#", b"_"):
        return (t, line, start, i), i
    if t in (b"$", b"="):
        n = int(line)
        if n < 0:
            return (t, None, start, i), i
        if len(b) < i + n + 2:
            raise IndexError
        return (t, b[i:i + n], start, i + n + 2), i + n + 2
    if t in (b"*", b"~", b">", b"%"):
        n = int(line)
        if n < 0:
            return (t, None, start, i), i
        count = n * 2 if t == b"%" else n
        kids = []
        for _ in range(count):
            k, i = parse(b, i)
            kids.append(k)
        return (t, kids, start, i), i
    raise ValueError("unknown type %r" % t)


def raw(b, node):
    return b[node[2]:node[3]]


FLAG_NAMES = ["write", "readonly", "denyoom", "admin", "pubsub", "noscript", "blocking", "loading", "stale",
              "skip_monitor", "skip_slowlog", "fast", "no_auth", "may_replicate", "no_mandatory_keys", "no_multi",
              "movablekeys", "allow_busy", "protected", "no_async_loading", "sentinel", "only_sentinel"]


def rust_bytes(b):
    out = []
    for c in b:
        if c == 0x22:
            out.append('\\"')
        elif c == 0x5c:
            out.append('\\\\')
        elif 0x20 <= c < 0x7f:
            out.append(chr(c))
        elif c == 0x0d:
            out.append('\\r')
        elif c == 0x0a:
            out.append('\\n')
        else:
            out.append('\\x%02x' % c)
    return 'b"' + "".join(out) + '"'


def collect(port, proto):
    c = Conn(port)
    c.send("HELLO", str(proto))
    c.read_all_reply()
    c.send("COMMAND", "INFO")
    info, info_raw = c.read_all_reply()
    c.send("COMMAND", "DOCS")
    docs, docs_raw = c.read_all_reply()
    return info, info_raw, docs, docs_raw


def info_entries(info, buf, parent=None):
    """Yields (name, fields) for each command and subcommand in a COMMAND INFO reply."""
    for el in info[1]:
        if el[1] is None:
            continue
        kids = el[1]
        name = kids[0][1].decode()
        yield name, kids, buf
        subs = kids[9]
        if subs[1]:
            yield from info_entries(subs, buf, name)


def docs_entries(docs, buf):
    """Yields (name, field pairs) for each command and subcommand in a COMMAND DOCS reply."""
    kids = docs[1]
    # RESP3: map; RESP2: flat array of name, docs-array pairs.
    for j in range(0, len(kids), 2):
        name = kids[j][1].decode()
        body = kids[j + 1][1]
        pairs = [(body[k], body[k + 1]) for k in range(0, len(body), 2)]
        yield name, pairs
        for key, val in pairs:
            if key[1] == b"subcommands":
                yield from docs_entries(val, buf)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=6379)
    args = ap.parse_args()
    data = {}
    for proto in (2, 3):
        info, info_raw, docs, docs_raw = collect(args.port, proto)
        for name, kids, buf in info_entries(info, info_raw):
            d = data.setdefault(name, {})
            d["arity"] = int(kids[1][1])
            d["flags"] = [f[1].decode() for f in kids[2][1]]
            d["first"] = int(kids[3][1])
            d["last"] = int(kids[4][1])
            d["step"] = int(kids[5][1])
            d["acl"] = [a[1].decode().lstrip("@") for a in kids[6][1]]
            d["info_head%d" % proto] = b"".join(raw(buf, k) for k in kids[1:9])
        for name, pairs in docs_entries(docs, docs_raw):
            d = data.setdefault(name, {})
            fields = [(k, v) for k, v in pairs if k[1] != b"subcommands"]
            d["docs%d" % proto] = b"".join(raw(docs_raw, k) + raw(docs_raw, v) for k, v in fields)
            d["docs_fields"] = len(fields)
    print("//! Generated by tools/gen-commands.py from Redis 7.0's COMMAND INFO and COMMAND DOCS.")
    print("//! Do not edit by hand: regenerate against the reference `redis-server`.")
    print("#![allow(clippy::all)]")
    print("// @generated")
    print()
    print("use super::table::{CommandMeta, Flags};")
    print()
    print("pub static META: &[CommandMeta] = &[")
    for name in sorted(data):
        d = data[name]
        if "info_head2" not in d:
            continue
        bits = 0
        for f in d["flags"]:
            if f in FLAG_NAMES:
                bits |= 1 << FLAG_NAMES.index(f)
        acl = ", ".join('"%s"' % a for a in d["acl"])
        print("    CommandMeta {")
        print('        name: "%s",' % name)
        print("        arity: %d," % d["arity"])
        print("        flags: Flags(%d)," % bits)
        print("        first_key: %d, last_key: %d, key_step: %d," % (d["first"], d["last"], d["step"]))
        print("        acl_categories: &[%s]," % acl)
        print("        info_head_resp2: %s," % rust_bytes(d["info_head2"]))
        print("        info_head_resp3: %s," % rust_bytes(d["info_head3"]))
        print("        docs_fields: %d," % d.get("docs_fields", 0))
        print("        docs_resp2: %s," % rust_bytes(d.get("docs2", b"")))
        print("        docs_resp3: %s," % rust_bytes(d.get("docs3", b"")))
        print("    },")
    print("];")


if __name__ == "__main__":
    main()

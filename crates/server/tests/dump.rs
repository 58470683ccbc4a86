//! DUMP, RESTORE and MIGRATE against the reference Redis 7.0.15.
//!
//! The round-trip table builds a value of every type and encoding in `redis-server`, DUMPs it
//! there, RESTOREs the payload into Meridian, compares what both servers show, DUMPs it from
//! Meridian, RESTOREs that payload into Redis and compares again; where Redis's encoding
//! depends only on the contents, Meridian's payload must equal Redis's byte for byte. Then
//! RESTORE's options and errors, damaged payloads, MIGRATE between the two servers, and the
//! RDB file SYNC sends an rdb-only client (`redis-cli --rdb`), loaded by `redis-server`.

mod common;

use std::time::Duration;

use common::sites::{CONVERGE_TIMEOUT, Cluster, Opts};
use common::{Raw, RedisRef, Reply, Server, escape, parse_reply};

const LINKS_UP: Duration = Duration::from_secs(15);

fn redis() -> RedisRef {
    assert!(
        RedisRef::available(),
        "redis-server (Redis 7.0.15, the reference) is not on PATH"
    );
    RedisRef::start()
}

/// What a server shows of `key`, in a form equal on both servers for equal contents.
fn contents(c: &mut Raw, key: &[u8]) -> String {
    let ty = c.reply_b(&[b"TYPE", key]);
    let ty = match ty {
        Reply::Simple(t) => t,
        other => panic!("TYPE: {other:?}"),
    };
    let show = |r: Reply| -> Vec<String> {
        match r {
            Reply::Array(items) => items
                .into_iter()
                .map(|i| match i {
                    Reply::Bulk(b) => escape(&b),
                    other => format!("{other:?}"),
                })
                .collect(),
            Reply::Bulk(b) => vec![escape(&b)],
            other => vec![format!("{other:?}")],
        }
    };
    let body = match ty.as_str() {
        "string" => show(c.reply_b(&[b"GET", key])),
        "list" => show(c.reply_b(&[b"LRANGE", key, b"0", b"-1"])),
        "set" => {
            let mut v = show(c.reply_b(&[b"SMEMBERS", key]));
            v.sort();
            v
        }
        "hash" => {
            let flat = show(c.reply_b(&[b"HGETALL", key]));
            let mut pairs: Vec<String> = flat.chunks(2).map(|p| p.join("=")).collect();
            pairs.sort();
            pairs
        }
        "zset" => show(c.reply_b(&[b"ZRANGE", key, b"0", b"-1", b"WITHSCORES"])),
        "stream" => stream_contents(c, key),
        "none" => Vec::new(),
        other => panic!("unexpected type {other}"),
    };
    format!("{ty}: {}", body.join(" "))
}

/// A stream's entries, counters, groups, consumers and pending entries (idle times, which
/// run on, left out).
fn stream_contents(c: &mut Raw, key: &[u8]) -> Vec<String> {
    let flat = |r: Reply| -> String {
        fn walk(r: &Reply, out: &mut Vec<String>) {
            match r {
                Reply::Array(items) => {
                    out.push("[".into());
                    for i in items {
                        walk(i, out);
                    }
                    out.push("]".into());
                }
                Reply::Bulk(b) => out.push(escape(b)),
                other => out.push(format!("{other:?}")),
            }
        }
        let mut out = Vec::new();
        walk(&r, &mut out);
        out.join(" ")
    };
    let mut v = vec![flat(c.reply_b(&[b"XRANGE", key, b"-", b"+"]))];
    let info = c.reply_b(&[b"XINFO", b"STREAM", key]);
    let Reply::Array(items) = info else {
        panic!("XINFO STREAM: {info:?}");
    };
    for kv in items.chunks(2) {
        if let [Reply::Bulk(k), val] = kv {
            if k.as_slice() != b"radix-tree-keys" && k.as_slice() != b"radix-tree-nodes" {
                v.push(format!("{}={}", escape(k), flat(val.clone())));
            }
        }
    }
    let groups = c.reply_b(&[b"XINFO", b"GROUPS", key]);
    v.push(flat(groups.clone()));
    let Reply::Array(gs) = groups else {
        panic!("XINFO GROUPS: {groups:?}");
    };
    for g in gs {
        let Reply::Array(fields) = g else { continue };
        let name = fields
            .chunks(2)
            .find_map(|kv| match kv {
                [Reply::Bulk(k), Reply::Bulk(n)] if k.as_slice() == b"name" => Some(n.clone()),
                _ => None,
            })
            .expect("group name");
        let consumers = c.reply_b(&[b"XINFO", b"CONSUMERS", key, &name]);
        if let Reply::Array(cs) = consumers {
            for cons in cs {
                if let Reply::Array(f) = cons {
                    v.push(flat(Reply::Array(f.into_iter().take(4).collect())));
                }
            }
        }
        let pending = c.reply_b(&[b"XPENDING", key, &name, b"-", b"+", b"100"]);
        if let Reply::Array(ps) = pending {
            for p in ps {
                if let Reply::Array(f) = p {
                    let keep: Vec<Reply> = f
                        .into_iter()
                        .enumerate()
                        .filter(|(i, _)| *i != 2)
                        .map(|(_, x)| x)
                        .collect();
                    v.push(flat(Reply::Array(keep)));
                }
            }
        }
    }
    v
}

fn bulk(r: Vec<u8>) -> Vec<u8> {
    match parse_reply(&r) {
        Reply::Bulk(b) => b,
        other => panic!("expected a bulk string, got {other:?}"),
    }
}

fn ok(c: &mut Raw, args: &[&[u8]]) {
    let r = c.reply_b(args);
    assert_eq!(r, Reply::Simple("OK".into()), "{}", escape(&args.concat()));
}

/// Runs `line` (split on spaces) on `c`; `{N}` repeats the previous word N times as
/// separate arguments numbered from 0 (`item{300}` → item0 … item299).
fn run(c: &mut Raw, line: &str) {
    let mut args: Vec<Vec<u8>> = Vec::new();
    for w in line.split(' ') {
        if let Some((stem, n)) = w.strip_suffix('}').and_then(|w| w.split_once('{')) {
            let n: usize = n.parse().expect("count");
            for i in 0..n {
                if stem == "%score" {
                    args.push(format!("{}", i % 7).into_bytes());
                    args.push(format!("m{i}").into_bytes());
                } else {
                    args.push(format!("{stem}{i}").into_bytes());
                }
            }
        } else if let Some(n) = w.strip_prefix("x*") {
            args.push(vec![b'x'; n.parse().expect("size")]);
        } else {
            args.push(w.as_bytes().to_vec());
        }
    }
    let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
    let r = c.reply_b(&refs);
    assert!(!matches!(r, Reply::Err(_)), "{line}: {r:?}");
}

/// One value of the table: setup lines, and whether Meridian's DUMP must equal Redis's.
struct Case {
    name: &'static str,
    setup: &'static [&'static str],
    same_bytes: bool,
}

const CASES: &[Case] = &[
    Case {
        name: "string short",
        setup: &["SET k hello"],
        same_bytes: true,
    },
    Case {
        name: "string int8",
        setup: &["SET k -100"],
        same_bytes: true,
    },
    Case {
        name: "string int16",
        setup: &["SET k 30000"],
        same_bytes: true,
    },
    Case {
        name: "string int32",
        setup: &["SET k -2000000000"],
        same_bytes: true,
    },
    Case {
        name: "string int64",
        setup: &["SET k 9000000000000000000"],
        same_bytes: true,
    },
    Case {
        name: "string counter",
        setup: &["INCRBY k 77777"],
        same_bytes: true,
    },
    Case {
        name: "string float",
        setup: &["INCRBYFLOAT k 1.5"],
        same_bytes: true,
    },
    Case {
        name: "string empty",
        setup: &["SET k "],
        same_bytes: true,
    },
    Case {
        name: "string 21 bytes",
        setup: &["SET k abcdefghijklmnopqrstu"],
        same_bytes: true,
    },
    Case {
        name: "string lzf",
        setup: &["SET k x*1000"],
        same_bytes: true,
    },
    Case {
        name: "string incompressible",
        setup: &["SET k 0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"],
        same_bytes: true,
    },
    Case {
        name: "string appended",
        setup: &["SET k 12", "APPEND k 34"],
        same_bytes: true,
    },
    Case {
        name: "hyperloglog sparse",
        setup: &["PFADD k a b c"],
        same_bytes: true,
    },
    Case {
        name: "hyperloglog dense",
        setup: &["PFADD k e{3000}"],
        same_bytes: true,
    },
    Case {
        name: "list one node",
        setup: &["RPUSH k a 1 b hello -7 300000"],
        same_bytes: true,
    },
    Case {
        name: "list lpush one node",
        setup: &["LPUSH k a b c"],
        same_bytes: true,
    },
    Case {
        name: "list nodes",
        setup: &["RPUSH k item-{3000}"],
        same_bytes: true,
    },
    Case {
        name: "list integers",
        setup: &["RPUSH k {2000}"],
        same_bytes: true,
    },
    Case {
        name: "list big elements",
        setup: &["RPUSH k x*10000 a x*5000 b"],
        same_bytes: true,
    },
    Case {
        name: "list count fill",
        setup: &["CONFIG SET list-max-listpack-size 5", "RPUSH k v{23}"],
        same_bytes: true,
    },
    Case {
        name: "list compressed",
        setup: &["CONFIG SET list-compress-depth 1", "RPUSH k item-{3000}"],
        same_bytes: true,
    },
    Case {
        name: "set intset16",
        setup: &["SADD k 3 1 2 -5"],
        same_bytes: true,
    },
    Case {
        name: "set intset32",
        setup: &["SADD k 1 70000"],
        same_bytes: true,
    },
    Case {
        name: "set intset64",
        setup: &["SADD k 1 10000000000"],
        same_bytes: true,
    },
    Case {
        name: "set hashtable",
        setup: &["SADD k a b c 1"],
        same_bytes: false,
    },
    Case {
        name: "set many integers",
        setup: &["SADD k {600}"],
        same_bytes: false,
    },
    Case {
        name: "hash listpack",
        setup: &["HSET k a 1 b hello c -3"],
        same_bytes: true,
    },
    Case {
        name: "hash counter",
        setup: &["HINCRBY k n 5", "HSET k s v"],
        same_bytes: true,
    },
    Case {
        name: "hash many fields",
        setup: &["HSET k f{600}"],
        same_bytes: false,
    },
    Case {
        name: "hash big value",
        setup: &["HSET k a x*100 b c"],
        same_bytes: false,
    },
    Case {
        name: "zset listpack",
        setup: &["ZADD k 1 a 2.5 b -inf c 1e300 d 0.1 e -0 f 4611686018427387904 g"],
        same_bytes: true,
    },
    Case {
        name: "zset ties",
        setup: &["ZADD k 1 b 1 a 1 c"],
        same_bytes: true,
    },
    Case {
        name: "zset skiplist by count",
        setup: &["ZADD k %score{200}"],
        same_bytes: true,
    },
    Case {
        name: "zset skiplist by size",
        setup: &["ZADD k 1 x*100 2 b"],
        same_bytes: true,
    },
    Case {
        name: "stream",
        setup: &[
            "XADD k 1-1 a 1 b 2",
            "XADD k 1-2 a 3 b 4",
            "XADD k 2-0 c five",
            "XADD k 3-0 a 100 b x*40",
        ],
        same_bytes: true,
    },
    Case {
        name: "stream groups",
        setup: &[
            "XADD k 1-1 a 1 b 2",
            "XADD k 1-2 a 3 b 4",
            "XADD k 2-0 c five",
            "XGROUP CREATE k g1 0",
            "XGROUP CREATE k g0 $",
            "XREADGROUP GROUP g1 alice COUNT 2 STREAMS k >",
            "XREADGROUP GROUP g1 carol COUNT 1 STREAMS k >",
            "XGROUP CREATECONSUMER k g1 bob",
            "XACK k g1 1-2",
        ],
        same_bytes: true,
    },
    Case {
        name: "stream empty with a group",
        setup: &["XGROUP CREATE k g $ MKSTREAM"],
        same_bytes: true,
    },
    // Redis keeps deleted entries in their node, flagged: Meridian writes the live ones.
    Case {
        name: "stream deleted",
        setup: &[
            "XADD k 1-0 f 1",
            "XADD k 2-0 f 2",
            "XADD k 3-0 f 3",
            "XDEL k 2-0",
            "XSETID k 9-0 ENTRIESADDED 7 MAXDELETEDID 2-0",
        ],
        same_bytes: false,
    },
    Case {
        name: "geo",
        setup: &["GEOADD k 13.361389 38.115556 Palermo 15.087269 37.502669 Catania"],
        same_bytes: true,
    },
];

#[test]
fn round_trip_table_against_redis() {
    let r = redis();
    let m = Server::start();
    let mut rc = r.connect();
    let mut mc = m.connect();
    let mut failures = Vec::new();
    for case in CASES {
        for c in [&mut rc, &mut mc] {
            ok(c, &[b"FLUSHALL"]);
            ok(c, &[b"CONFIG", b"SET", b"list-max-listpack-size", b"-2"]);
            ok(c, &[b"CONFIG", b"SET", b"list-compress-depth", b"0"]);
        }
        for line in case.setup {
            if line.starts_with("CONFIG") {
                run(&mut mc, line);
            }
            run(&mut rc, line);
        }
        let from_redis = bulk(rc.call(&[b"DUMP", b"k"]));
        let reply = mc.call(&[b"RESTORE", b"k", b"0", &from_redis]);
        assert_eq!(reply, b"+OK\r\n", "{}: RESTORE into Meridian", case.name);
        let want = contents(&mut rc, b"k");
        let got = contents(&mut mc, b"k");
        if want != got {
            failures.push(format!(
                "{}: Meridian shows\n  {got}\nRedis\n  {want}",
                case.name
            ));
            continue;
        }
        let from_meridian = bulk(mc.call(&[b"DUMP", b"k"]));
        if case.same_bytes && from_meridian != from_redis {
            failures.push(format!(
                "{}: DUMP differs\n  redis:    {}\n  meridian: {}",
                case.name,
                escape(&from_redis),
                escape(&from_meridian)
            ));
        }
        let reply = rc.call(&[b"RESTORE", b"back", b"0", &from_meridian]);
        assert_eq!(reply, b"+OK\r\n", "{}: RESTORE into Redis", case.name);
        let back = contents(&mut rc, b"back");
        if back != want {
            failures.push(format!(
                "{}: Redis restored\n  {back}\nfrom\n  {want}",
                case.name
            ));
        }
        // The value restored into Meridian is a value like any other: its encoding too.
        let enc_r = rc.call(&[b"OBJECT", b"ENCODING", b"back"]);
        let enc_m = mc.call(&[b"OBJECT", b"ENCODING", b"k"]);
        if case.same_bytes && enc_r != enc_m && !case.name.starts_with("hyperloglog") {
            failures.push(format!(
                "{}: OBJECT ENCODING redis {} meridian {}",
                case.name,
                escape(&enc_r),
                escape(&enc_m)
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn restore_options_and_ttl() {
    let m = Server::start();
    let mut c = m.connect();
    c.ok(&["SET", "foo", "bar"]);
    let p = bulk(c.call(&[b"DUMP", b"foo"]));
    // BUSYKEY, then REPLACE.
    assert_eq!(
        c.call(&[b"RESTORE", b"foo", b"0", &p]),
        b"-BUSYKEY Target key name already exists.\r\n"
    );
    c.ok(&["SET", "foo", "other"]);
    assert_eq!(
        c.call(&[b"RESTORE", b"foo", b"0", &p, b"REPLACE"]),
        b"+OK\r\n"
    );
    assert_eq!(c.call_text(&["GET", "foo"]), "$3\r\nbar\r\n");
    assert_eq!(c.int(&["TTL", "foo"]), -1);
    // A relative TTL, an absolute one, one in the past (the key is not created, REPLACE
    // removes the old one).
    assert_eq!(c.call(&[b"RESTORE", b"t1", b"5000", &p]), b"+OK\r\n");
    let pttl = c.int(&["PTTL", "t1"]);
    assert!((3000..=5000).contains(&pttl), "{pttl}");
    assert_eq!(c.call(&[b"RESTORE", b"t2", b"2569591501", &p]), b"+OK\r\n");
    assert!(c.int(&["PTTL", "t2"]) > 2_569_591_501 - 3000);
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let at = (now_ms + 3000).to_string();
    assert_eq!(
        c.call(&[b"RESTORE", b"t3", at.as_bytes(), &p, b"ABSTTL"]),
        b"+OK\r\n"
    );
    let pttl = c.int(&["PTTL", "t3"]);
    assert!((1000..=3100).contains(&pttl), "{pttl}");
    let past = (now_ms - 3000).to_string();
    assert_eq!(
        c.call(&[
            b"RESTORE",
            b"foo",
            past.as_bytes(),
            &p,
            b"ABSTTL",
            b"REPLACE"
        ]),
        b"+OK\r\n"
    );
    assert_eq!(c.int(&["EXISTS", "foo"]), 0);
    // IDLETIME sets what OBJECT IDLETIME reports.
    assert_eq!(
        c.call(&[b"RESTORE", b"idle", b"0", &p, b"IDLETIME", b"1000"]),
        b"+OK\r\n"
    );
    let idle = c.int(&["OBJECT", "IDLETIME", "idle"]);
    assert!((1000..=1010).contains(&idle), "{idle}");
    assert_eq!(
        c.call(&[b"RESTORE", b"f", b"0", &p, b"FREQ", b"100"]),
        b"+OK\r\n"
    );
}

#[test]
fn damaged_payloads_answer_redis_errors_and_the_server_lives() {
    let m = Server::start();
    let mut c = m.connect();
    c.int(&["RPUSH", "l", "a", "b", "c"]);
    c.int(&["HSET", "h", "a", "1", "b", "2"]);
    let list = bulk(c.call(&[b"DUMP", b"l"]));
    let hash = bulk(c.call(&[b"DUMP", b"h"]));
    let footer_err = b"-ERR DUMP payload version or checksum are wrong\r\n".to_vec();
    // Every single-byte change of the body is caught by the checksum.
    for i in 0..list.len() {
        let mut p = list.clone();
        p[i] ^= 0x40;
        assert_eq!(
            c.call(&[b"RESTORE", b"x", b"0", &p]),
            footer_err,
            "byte {i}"
        );
    }
    // Bodies that pass the checksum but lie: re-sealed with a correct footer.
    let seal = |body: &[u8]| {
        let mut p = body.to_vec();
        p.extend_from_slice(&10u16.to_le_bytes());
        let crc = meridian_rdb::CRC64.checksum(&p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    };
    let body = &list[..list.len() - 10];
    let bad: Vec<Vec<u8>> = vec![
        // Truncated anywhere.
        body[..body.len() / 2].to_vec(),
        // A listpack whose header claims more bytes.
        {
            let mut b = body.to_vec();
            b[3] += 1;
            b
        },
        // A hash listpack with a duplicate field.
        seal_body_dup_field(&hash),
        // Huge lengths with nothing behind them.
        b"\x00\x81\xff\xff\xff\xff\xff\xff\xff\xff".to_vec(),
        b"\x12\x81\x00\x00\x00\x01\x00\x00\x00\x00".to_vec(),
        // Empty collections, a NaN score, an unknown type, a module value.
        b"\x02\x00".to_vec(),
        [&b"\x05\x01\x01a"[..], &f64::NAN.to_le_bytes()].concat(),
        b"\x08".to_vec(),
        b"\x07\x00".to_vec(),
    ];
    for body in &bad {
        let r = c.call(&[b"RESTORE", b"x", b"0", &seal(body)]);
        assert_eq!(r, b"-ERR Bad data format\r\n", "{}", escape(body));
    }
    assert_eq!(c.int(&["EXISTS", "x"]), 0);
    // The lengths of the footer itself.
    assert_eq!(c.call(&[b"RESTORE", b"x", b"0", b"short"]), footer_err);
    assert_eq!(c.call(&[b"RESTORE", b"x", b"0", b""]), footer_err);
    // DEBUG SET-SKIP-CHECKSUM-VALIDATION 1 (on every shard): a wrong CRC-64 is let through,
    // the value is still checked; a good payload with a wrong CRC restores.
    assert_eq!(
        c.call_text(&["DEBUG", "SET-SKIP-CHECKSUM-VALIDATION", "1"]),
        "+OK\r\n"
    );
    let mut wrong_crc = list.clone();
    if let Some(last) = wrong_crc.last_mut() {
        *last ^= 0xff;
    }
    let mut lying = seal(&body[..body.len() / 2]);
    if let Some(last) = lying.last_mut() {
        *last ^= 0xff;
    }
    for key in ["x", "y", "z", "w"] {
        let key = key.as_bytes();
        assert_eq!(
            c.call(&[b"RESTORE", key, b"0", &lying]),
            b"-ERR Bad data format\r\n"
        );
        assert_eq!(c.call(&[b"RESTORE", key, b"0", &wrong_crc]), b"+OK\r\n");
        assert_eq!(c.int(&["LLEN", std::str::from_utf8(key).unwrap()]), 3);
    }
    assert_eq!(c.call(&[b"RESTORE", b"s", b"0", b"short"]), footer_err);
    assert_eq!(
        c.call_text(&["DEBUG", "SET-SKIP-CHECKSUM-VALIDATION", "0"]),
        "+OK\r\n"
    );
    assert_eq!(c.call(&[b"RESTORE", b"v", b"0", &wrong_crc]), footer_err);
    assert_eq!(c.call_text(&["PING"]), "+PONG\r\n");
}

/// The body of `payload` (a hash listpack of fields a, b) with field b renamed to a.
fn seal_body_dup_field(payload: &[u8]) -> Vec<u8> {
    let mut body = payload[..payload.len() - 10].to_vec();
    let at = body
        .windows(2)
        .position(|w| w == b"\x81b")
        .expect("field b");
    body[at + 1] = b'a';
    body
}

#[test]
fn migrate_between_meridian_and_redis() {
    let r = redis();
    let m = Server::start();
    let mut rc = r.connect();
    let mut mc = m.connect();
    let rport = r.port.to_string();
    let mport = m.port.to_string();
    // Meridian → Redis: the key moves, with its TTL.
    mc.ok(&["SET", "key", "Some Value"]);
    mc.int(&["EXPIRE", "key", "10"]);
    mc.ok(&["MIGRATE", "127.0.0.1", &rport, "key", "9", "5000"]);
    assert_eq!(mc.int(&["EXISTS", "key"]), 0);
    rc.ok(&["SELECT", "9"]);
    assert_eq!(rc.call_text(&["GET", "key"]), "$10\r\nSome Value\r\n");
    let ttl = rc.int(&["TTL", "key"]);
    assert!((7..=10).contains(&ttl), "{ttl}");
    // COPY keeps the source; an existing key needs REPLACE.
    mc.int(&["RPUSH", "list", "a", "b", "c", "d"]);
    rc.ok(&["SET", "list", "somevalue"]);
    let e = mc.err(&["MIGRATE", "127.0.0.1", &rport, "list", "9", "5000", "COPY"]);
    assert_eq!(
        e,
        "ERR Target instance replied with error: BUSYKEY Target key name already exists."
    );
    mc.ok(&[
        "MIGRATE",
        "127.0.0.1",
        &rport,
        "list",
        "9",
        "5000",
        "COPY",
        "REPLACE",
    ]);
    assert_eq!(mc.int(&["EXISTS", "list"]), 1);
    assert_eq!(
        rc.reply(&["LRANGE", "list", "0", "-1"]).strings(),
        vec!["a", "b", "c", "d"]
    );
    // One key refused (BUSYKEY), the other moves: the acknowledged key is deleted, the
    // refused one stays, and the error is the target's. (A hash tag keeps both keys on one
    // shard: MIGRATE ... KEYS is a multi-key command, CROSSSLOT across shards.)
    mc.ok(&["SET", "{m}ok1", "v"]);
    mc.ok(&["SET", "{m}list2", "w"]);
    rc.ok(&["SET", "{m}list2", "taken"]);
    let e = mc.err(&[
        "MIGRATE",
        "127.0.0.1",
        &rport,
        "",
        "9",
        "5000",
        "KEYS",
        "{m}list2",
        "{m}ok1",
    ]);
    assert_eq!(
        e,
        "ERR Target instance replied with error: BUSYKEY Target key name already exists."
    );
    assert_eq!(mc.int(&["EXISTS", "{m}ok1"]), 0);
    assert_eq!(mc.int(&["EXISTS", "{m}list2"]), 1);
    assert_eq!(rc.call_text(&["GET", "{m}ok1"]), "$1\r\nv\r\n");
    assert_eq!(rc.call_text(&["GET", "{m}list2"]), "$5\r\ntaken\r\n");
    // Redis → Meridian, several keys, missing ones skipped.
    rc.ok(&["SELECT", "0"]);
    rc.ok(&["MSET", "k1", "v1", "k2", "v2"]);
    rc.int(&["HSET", "h", "f", "v"]);
    rc.ok(&[
        "MIGRATE",
        "127.0.0.1",
        &mport,
        "",
        "3",
        "5000",
        "KEYS",
        "nokey",
        "k1",
        "k2",
        "h",
    ]);
    assert_eq!(rc.int(&["EXISTS", "k1", "k2", "h"]), 0);
    mc.ok(&["SELECT", "3"]);
    assert_eq!(mc.call_text(&["GET", "k2"]), "$2\r\nv2\r\n");
    assert_eq!(mc.call_text(&["HGET", "h", "f"]), "$1\r\nv\r\n");
    // Meridian → Meridian.
    let m2 = Server::start();
    let mut m2c = m2.connect();
    mc.int(&["SADD", "s", "x", "y"]);
    mc.ok(&[
        "MIGRATE",
        "127.0.0.1",
        &m2.port.to_string(),
        "s",
        "0",
        "5000",
    ]);
    assert_eq!(m2c.int(&["SCARD", "s"]), 2);
    // A value of several 64 KiB write chunks (Redis's "can correctly transfer large values").
    let items: Vec<String> = (0..20_000u64)
        .map(|i| format!("{:016x}", i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
        .collect();
    let mut rpush: Vec<&str> = vec!["RPUSH", "big"];
    rpush.extend(items.iter().map(String::as_str));
    assert_eq!(mc.int(&rpush), 20_000);
    let before = mc.call(&[b"DUMP", b"big"]);
    assert!(before.len() > 3 * 64 * 1024, "{}", before.len());
    mc.ok(&[
        "MIGRATE",
        "127.0.0.1",
        &m2.port.to_string(),
        "big",
        "0",
        "5000",
    ]);
    assert_eq!(mc.int(&["EXISTS", "big"]), 0);
    assert_eq!(m2c.call(&[b"DUMP", b"big"]), before);
    // Nothing to move, a key argument with KEYS, a refused connection, a timeout.
    assert_eq!(
        mc.call_text(&["MIGRATE", "127.0.0.1", &rport, "nokey", "0", "5000"]),
        "+NOKEY\r\n"
    );
    let e = mc.err(&[
        "MIGRATE",
        "127.0.0.1",
        &rport,
        "k",
        "0",
        "5000",
        "KEYS",
        "a",
    ]);
    assert!(e.contains("empty string"), "{e}");
    mc.ok(&["SET", "kk", "v"]);
    // A refused connection fails at its first write in Redis 7.0.15 (its connect does not
    // block); only a name that does not resolve fails at the connect.
    let closed = common::free_port().to_string();
    assert_eq!(
        mc.err(&["MIGRATE", "127.0.0.1", &closed, "kk", "0", "500"]),
        "IOERR error or timeout writing to target instance"
    );
    let mut sleeper = r.connect();
    sleeper.send_cmd(&[b"DEBUG", b"SLEEP", b"1.5"]);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let e = mc.err(&["MIGRATE", "127.0.0.1", &rport, "kk", "0", "300"]);
    assert!(e.starts_with("IOERR error or timeout"), "{e}");
    let _ = sleeper.read_reply();
    assert_eq!(mc.int(&["EXISTS", "kk"]), 1);
    // AUTH to a target with a password (the timed-out RESTORE still ran there: REPLACE).
    rc.ok(&["CONFIG", "SET", "requirepass", "foobar"]);
    mc.ok(&[
        "MIGRATE",
        "127.0.0.1",
        &rport,
        "kk",
        "0",
        "5000",
        "REPLACE",
        "AUTH",
        "foobar",
    ]);
    mc.ok(&["SET", "kk", "v"]);
    let e = mc.err(&[
        "MIGRATE",
        "127.0.0.1",
        &rport,
        "kk",
        "0",
        "5000",
        "AUTH",
        "wrong",
    ]);
    assert!(e.contains("WRONGPASS"), "{e}");
    assert_eq!(mc.int(&["EXISTS", "kk"]), 1);
}

/// A RESTOREd key is a local write like any other: it reaches the other site, where it shows
/// the same contents, TTL and DUMP bytes; RESTORE ... REPLACE removes what the site saw of
/// the old value at every site; the deletion MIGRATE makes reaches the other site too.
#[test]
fn restore_and_migrate_replicate_to_other_sites() {
    let r = redis();
    let mut rc = r.connect();
    rc.ok(&["SET", "s", "hello"]);
    rc.int(&["RPUSH", "l", "a", "b", "1", "c"]);
    rc.int(&["HSET", "h", "f1", "v1", "f2", "22"]);
    rc.int(&["SADD", "st", "1", "2", "-300"]);
    rc.int(&["ZADD", "z", "1", "a", "2.5", "b"]);
    rc.int(&["PFADD", "hll", "x", "y", "z"]);
    let keys: [&[u8]; 6] = [b"s", b"l", b"h", b"st", b"z", b"hll"];
    let payloads: Vec<Vec<u8>> = keys.iter().map(|k| bulk(rc.call(&[b"DUMP", k]))).collect();

    let cluster = Cluster::start(&["a", "b"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(0).connect();
    let mut b = cluster.site(1).connect();
    // B wrote h first; A saw it, then replaced it.
    b.int(&["HSET", "h", "old", "1"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    for (key, p) in keys.iter().zip(&payloads) {
        let ttl: &[u8] = if *key == b"s" { b"100000" } else { b"0" };
        assert_eq!(
            a.call(&[b"RESTORE", key, ttl, p, b"REPLACE"]),
            b"+OK\r\n",
            "{}",
            escape(key)
        );
    }
    cluster.wait_converged(CONVERGE_TIMEOUT);
    for (key, p) in keys.iter().zip(&payloads) {
        let want = contents(&mut rc, key);
        assert_eq!(contents(&mut a, key), want);
        assert_eq!(contents(&mut b, key), want, "site b");
        let from_a = bulk(a.call(&[b"DUMP", key]));
        let from_b = bulk(b.call(&[b"DUMP", key]));
        assert_eq!(escape(&from_a), escape(&from_b), "{}", escape(key));
        assert_eq!(escape(&from_a), escape(p), "{}", escape(key));
    }
    let pttl = b.int(&["PTTL", "s"]);
    assert!((90_000..=100_000).contains(&pttl), "{pttl}");
    assert_eq!(b.int(&["HEXISTS", "h", "old"]), 0);
    // MIGRATE away from A: the key leaves both sites.
    a.ok(&[
        "MIGRATE",
        "127.0.0.1",
        &r.port.to_string(),
        "l",
        "5",
        "5000",
    ]);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    assert_eq!(a.int(&["EXISTS", "l"]), 0);
    assert_eq!(b.int(&["EXISTS", "l"]), 0);
    rc.ok(&["SELECT", "5"]);
    assert_eq!(
        rc.reply(&["LRANGE", "l", "0", "-1"]).strings(),
        vec!["a", "b", "1", "c"]
    );

    // docs/conflicts.md §16's table: REPLACE removes what A saw; B's concurrent field stays.
    rc.ok(&["SELECT", "0"]);
    rc.int(&["HSET", "g", "g", "2"]);
    let g = bulk(rc.call(&[b"DUMP", b"g"]));
    a.int(&["HSET", "hh", "f", "1"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    cluster.partition(0, 1);
    assert_eq!(
        a.call(&[b"RESTORE", b"hh", b"0", &g, b"REPLACE"]),
        b"+OK\r\n"
    );
    b.int(&["HSET", "hh", "x", "3"]);
    cluster.heal(0, 1);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    for c in [&mut a, &mut b] {
        assert_eq!(contents(c, b"hh"), "hash: g=2 x=3");
    }
}

/// MIGRATE's passwords never reach the slow log (nor MONITOR, which shows the same
/// redacted arguments); neither do CONFIG SET masterauth's.
#[test]
fn migrate_secrets_are_redacted() {
    let m = Server::start();
    let mut c = m.connect();
    let port = m.port.to_string();
    c.ok(&["CONFIG", "SET", "slowlog-log-slower-than", "0"]);
    c.ok(&["SLOWLOG", "RESET"]);
    for tail in [
        &[][..],
        &["AUTH", "pw"][..],
        &["COPY", "AUTH2", "user", "pw"][..],
    ] {
        let mut args = vec!["MIGRATE", "127.0.0.1", port.as_str(), "key", "9", "5000"];
        args.extend_from_slice(tail);
        assert_eq!(c.call_text(&args), "+NOKEY\r\n");
    }
    // Refused (Meridian has no Redis replication to authenticate), logged all the same.
    c.call_text(&["CONFIG", "SET", "masterauth", "secret"]);
    c.ok(&["CONFIG", "SET", "slowlog-log-slower-than", "-1"]);
    let entries = match c.reply(&["SLOWLOG", "GET"]) {
        Reply::Array(e) => e,
        other => panic!("SLOWLOG GET: {other:?}"),
    };
    let args: Vec<String> = entries
        .iter()
        .map(|e| match e {
            Reply::Array(fields) => match fields.get(3) {
                Some(a) => a.strings().join(" "),
                None => panic!("entry {e:?}"),
            },
            other => panic!("entry {other:?}"),
        })
        .collect();
    let port = &port;
    assert_eq!(
        args[..4],
        [
            "CONFIG SET masterauth (redacted)".to_string(),
            format!("MIGRATE 127.0.0.1 {port} key 9 5000 COPY AUTH2 (redacted) (redacted)"),
            format!("MIGRATE 127.0.0.1 {port} key 9 5000 AUTH (redacted)"),
            format!("MIGRATE 127.0.0.1 {port} key 9 5000"),
        ]
    );
}

/// What one payload may decode to: `proto-max-bulk-len` per string and
/// `RESTORE_VALUE_BULKS` (4) times that for the whole value (its strings plus 32 bytes per
/// element), each admitted at the limit and refused one byte past it.
#[test]
fn restore_limits_hold_at_the_limit_and_one_past() {
    const BULK: usize = 1 << 20;
    let m = Server::start();
    let mut c = m.connect();
    c.ok(&["CONFIG", "SET", "proto-max-bulk-len", &BULK.to_string()]);
    let enc = meridian_rdb::Encoder::default();
    let bad = b"-ERR Bad data format\r\n".to_vec();
    assert_eq!(
        c.call(&[b"RESTORE", b"s", b"0", &enc.string(&vec![b'x'; BULK])]),
        b"+OK\r\n"
    );
    assert_eq!(c.int(&["STRLEN", "s"]), BULK as i64);
    assert_eq!(
        c.call(&[b"RESTORE", b"s2", b"0", &enc.string(&vec![b'x'; BULK + 1])]),
        bad
    );
    // 4096 members of 992 bytes: 4096 × (992 + 32) = 4 × BULK exactly; then one byte more.
    let members: Vec<Vec<u8>> = (0..4096)
        .map(|i| format!("{i:0992}").into_bytes())
        .collect();
    let refs: Vec<&[u8]> = members.iter().map(Vec::as_slice).collect();
    assert_eq!(
        c.call(&[b"RESTORE", b"set", b"0", &enc.set(&refs, 512)]),
        b"+OK\r\n"
    );
    assert_eq!(c.int(&["SCARD", "set"]), 4096);
    let longer = format!("{:0993}", 0).into_bytes();
    let mut refs = refs;
    refs[0] = &longer;
    assert_eq!(
        c.call(&[b"RESTORE", b"set2", b"0", &enc.set(&refs, 512)]),
        bad
    );
    assert_eq!(c.int(&["EXISTS", "s2", "set2"]), 0);
}

/// Reads the RDB file SYNC sends after `REPLCONF rdb-only 1`, as `redis-cli --rdb` does:
/// `$<length>`, the file, then the server closes the connection.
fn sync_rdb(port: u16) -> Vec<u8> {
    use std::io::{BufRead as _, Read as _, Write as _};
    let s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut r = std::io::BufReader::new(s.try_clone().unwrap());
    let mut w = s;
    let mut line = String::new();
    w.write_all(&common::cmd(&[b"REPLCONF", b"rdb-only", b"1"]))
        .unwrap();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "+OK\r\n");
    w.write_all(b"SYNC\r\n").unwrap();
    line.clear();
    r.read_line(&mut line).unwrap();
    let len: usize = line
        .strip_prefix('$')
        .and_then(|l| l.trim_end().parse().ok())
        .unwrap_or_else(|| panic!("SYNC: {line:?}"));
    let mut file = vec![0u8; len];
    r.read_exact(&mut file).unwrap();
    let mut rest = Vec::new();
    r.read_to_end(&mut rest).unwrap();
    assert!(rest.is_empty(), "after the file: {rest:?}");
    file
}

/// `redis-cli --rdb`'s exchange against Meridian: the file holds every shard's keys of every
/// database, their expire times and the function libraries, and `redis-server` loads it to
/// the same contents. SYNC without `REPLCONF rdb-only 1` is refused (a Redis replica would
/// wait for a stream that never comes).
#[test]
fn sync_sends_an_rdb_file_redis_loads() {
    let m = Server::start_with(&["--shards", "2", "--cluster-api", "yes"]);
    let mut c = m.connect();
    let lines = [
        "SET s hello",
        "SET n 12345",
        "SET long aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "RPUSH l a b c 1 2",
        "RPUSH biglist item{300}",
        "SADD si 1 2 3",
        "SADD ss x y z",
        "HSET h f1 v1 f2 v2",
        "HSET bighash field{200}",
        "ZADD z 1 a 2.5 b",
        "XADD x 1-1 f v",
        "XGROUP CREATE x g 0",
        "PFADD hll a b c",
        "SET ttl v PX 600000",
    ];
    for l in lines {
        run(&mut c, l);
    }
    let keys: Vec<String> = (0..40).map(|i| format!("k{i}")).collect();
    for k in &keys {
        ok(&mut c, &[b"SET", k.as_bytes(), b"v"]);
    }
    ok(&mut c, &[b"SELECT", b"3"]);
    ok(&mut c, &[b"SET", b"in3", b"x"]);
    ok(&mut c, &[b"SELECT", b"0"]);
    let lib = b"#!lua name=mylib\nredis.register_function('f1', function() return 1 end)";
    assert_eq!(
        c.reply_b(&[b"FUNCTION", b"LOAD", lib]),
        Reply::bulk("mylib")
    );
    assert!(
        c.err(&["SYNC"]).contains("REPLCONF rdb-only 1"),
        "a plain SYNC is refused"
    );
    let file = sync_rdb(m.port);
    assert!(file.starts_with(b"REDIS0010"));
    let r = RedisRef::load(&file);
    let mut rc = r.connect();
    let mut names: Vec<&str> = lines
        .iter()
        .map(|l| l.split(' ').nth(1).unwrap_or_default())
        .collect();
    names.extend(keys.iter().map(String::as_str));
    names.dedup();
    for k in &names {
        assert_eq!(
            contents(&mut c, k.as_bytes()),
            contents(&mut rc, k.as_bytes()),
            "{k}; redis log:\n{}",
            r.log()
        );
    }
    assert_eq!(c.int(&["DBSIZE"]), rc.int(&["DBSIZE"]));
    let ttl = rc.int(&["PTTL", "ttl"]);
    assert!(ttl > 500_000 && ttl <= 600_000, "{ttl}");
    ok(&mut rc, &[b"SELECT", b"3"]);
    assert_eq!(rc.reply(&["GET", "in3"]), Reply::bulk("x"));
    assert_eq!(rc.reply(&["FCALL", "f1", "0"]), Reply::Int(1));
    // A shard's cluster endpoint sends that shard's keys, as a Redis Cluster node its own.
    let ports: Vec<u16> = match c.reply(&["CLUSTER", "SLOTS"]) {
        Reply::Array(ranges) => ranges
            .into_iter()
            .filter_map(|r| match r {
                Reply::Array(f) => match f.get(2) {
                    Some(Reply::Array(node)) => match node.get(1) {
                        Some(Reply::Int(p)) => u16::try_from(*p).ok(),
                        _ => None,
                    },
                    _ => None,
                },
                _ => None,
            })
            .collect(),
        other => panic!("CLUSTER SLOTS: {other:?}"),
    };
    assert_eq!(ports.len(), 2, "{ports:?}");
    let mut total = 0;
    for p in ports {
        let r = RedisRef::load(&sync_rdb(p));
        let n = r.connect().int(&["DBSIZE"]);
        assert!(n > 0 && n < c.int(&["DBSIZE"]), "{n}");
        total += n;
    }
    assert_eq!(total, c.int(&["DBSIZE"]));
}

/// Redis's DEBUG DIGEST of the data set `c` serves.
fn digest(c: &mut Raw) -> Reply {
    c.reply(&["DEBUG", "DIGEST"])
}

/// A Redis holding every type in each of its encodings, TTLs, three databases and a
/// function library, with the dump.rdb it saved and its DEBUG DIGEST.
fn redis_with_every_type() -> (RedisRef, Vec<u8>, Reply) {
    let r = redis();
    let mut rc = r.connect();
    let lines = [
        "DEBUG POPULATE 3000 key 20",
        "SET s hello",
        "SET n 12345",
        "SET long x*300",
        "RPUSH l a b c 1 2",
        "RPUSH biglist item{300}",
        "SADD si 1 2 3",
        "SADD bigsi n{600}",
        "SADD ss x y z",
        "HSET h f1 v1 f2 v2",
        "HSET bighash field{200}",
        "ZADD z 1 a 2.5 b",
        "ZADD bigz %score{200}",
        "XADD x 1-1 f v",
        "XGROUP CREATE x g 0",
        "XREADGROUP GROUP g c1 COUNT 1 STREAMS x >",
        "PFADD hll a b c",
        "SET ttl v PX 600000",
        "SELECT 3",
        "SET in3 x",
        "EXPIRE in3 1000",
        "SELECT 15",
        "RPUSH in15 a",
        "SELECT 0",
    ];
    for l in lines {
        run(&mut rc, l);
    }
    let lib = b"#!lua name=lib1\nredis.register_function('f1', function() return 1 end)";
    assert_eq!(
        rc.reply_b(&[b"FUNCTION", b"LOAD", lib]),
        Reply::bulk("lib1")
    );
    ok(&mut rc, &[b"SAVE"]);
    let file = std::fs::read(r.dir.path().join("dump.rdb")).expect("Redis saved dump.rdb");
    let want = digest(&mut rc);
    (r, file, want)
}

#[test]
fn debug_reload_nosave_loads_the_rdb_file_redis_saved() {
    let (r, file, want) = redis_with_every_type();
    let mut rc = r.connect();

    let m = Server::start();
    let mut c = m.connect();
    ok(&mut c, &[b"SET", b"should-not-exist", b"1"]);
    let other = b"#!lua name=other\nredis.register_function('g', function() return 2 end)";
    assert_eq!(
        c.reply_b(&[b"FUNCTION", b"LOAD", other]),
        Reply::bulk("other")
    );
    let rdb = m.dir.path().join("dump.rdb");
    // No file: an error, and the data stays.
    assert!(
        c.err(&["DEBUG", "RELOAD", "NOSAVE"])
            .contains("Error trying to load")
    );
    assert_eq!(c.reply(&["GET", "should-not-exist"]), Reply::bulk("1"));
    // A damaged file (its last byte, the checksum's): the same, where Redis would have
    // emptied its data first.
    let mut bad = file.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    std::fs::write(&rdb, &bad).unwrap();
    assert!(
        c.err(&["DEBUG", "RELOAD", "NOSAVE"])
            .contains("Error trying to load")
    );
    assert_eq!(c.reply(&["GET", "should-not-exist"]), Reply::bulk("1"));
    // Unless checksums are skipped, as Redis's DEBUG SET-SKIP-CHECKSUM-VALIDATION 1 does (the
    // values are still checked): the damaged checksum alone then loads.
    ok(&mut c, &[b"DEBUG", b"SET-SKIP-CHECKSUM-VALIDATION", b"1"]);
    ok(&mut c, &[b"DEBUG", b"RELOAD", b"NOSAVE"]);
    assert_eq!(digest(&mut c), want);
    ok(&mut c, &[b"DEBUG", b"SET-SKIP-CHECKSUM-VALIDATION", b"0"]);
    ok(&mut c, &[b"SET", b"should-not-exist", b"1"]);
    assert_eq!(
        c.reply_b(&[b"FUNCTION", b"LOAD", b"REPLACE", other]),
        Reply::bulk("other")
    );

    // The file Redis saved: the same data as Redis's, by Redis's own digest, the library in
    // place of the one here, TTLs kept, and the key that was here gone.
    std::fs::write(&rdb, &file).unwrap();
    ok(&mut c, &[b"DEBUG", b"RELOAD", b"NOSAVE"]);
    assert_eq!(digest(&mut c), want);
    assert_eq!(c.reply(&["GET", "should-not-exist"]), Reply::Nil);
    assert_eq!(c.int(&["DBSIZE"]), rc.int(&["DBSIZE"]));
    assert_eq!(c.reply(&["FCALL", "f1", "0"]), Reply::Int(1));
    assert!(c.err(&["FCALL", "g", "0"]).contains("Function not found"));
    let ttl = c.int(&["PTTL", "ttl"]);
    assert!(ttl > 500_000 && ttl <= 600_000, "{ttl}");
    for k in [
        "s", "n", "long", "l", "bigsi", "bighash", "bigz", "x", "hll",
    ] {
        assert_eq!(
            contents(&mut c, k.as_bytes()),
            contents(&mut rc, k.as_bytes()),
            "{k}"
        );
    }
    assert_eq!(
        c.reply(&["XPENDING", "x", "g"]),
        rc.reply(&["XPENDING", "x", "g"])
    );

    // NOFLUSH without MERGE: every key of the file is already here, Redis's load error;
    // nothing changes.
    ok(&mut c, &[b"SET", b"extra", b"1"]);
    let before = digest(&mut c);
    assert!(
        c.err(&["DEBUG", "RELOAD", "NOSAVE", "NOFLUSH"])
            .contains("Error trying to load")
    );
    assert_eq!(digest(&mut c), before);
    // NOFLUSH MERGE: the file's keys replace those of the same name; the others stay.
    ok(&mut c, &[b"SET", b"s", b"changed"]);
    ok(
        &mut c,
        &[b"DEBUG", b"RELOAD", b"NOSAVE", b"NOFLUSH", b"MERGE"],
    );
    assert_eq!(c.reply(&["GET", "s"]), Reply::bulk("hello"));
    assert_eq!(c.reply(&["GET", "extra"]), Reply::bulk("1"));
    assert_eq!(c.int(&["DBSIZE"]), rc.int(&["DBSIZE"]) + 1);
    // DEBUG RELOAD saves the data in dump.rdb too, as Redis's does: NOSAVE then loads it back,
    // the same data, and a library loaded in between goes (the file's replace them).
    let merged = digest(&mut c);
    ok(&mut c, &[b"DEBUG", b"RELOAD"]);
    assert_ne!(std::fs::read(&rdb).unwrap(), file);
    assert_eq!(digest(&mut c), merged);
    assert_eq!(
        c.reply_b(&[b"FUNCTION", b"LOAD", other]),
        Reply::bulk("other")
    );
    ok(&mut c, &[b"DEBUG", b"RELOAD", b"NOSAVE"]);
    assert_eq!(digest(&mut c), merged);
    assert_eq!(c.reply(&["GET", "extra"]), Reply::bulk("1"));
    assert!(c.err(&["FCALL", "g", "0"]).contains("Function not found"));
    // Redis loads what Meridian wrote, to the same data.
    let back = RedisRef::load(&std::fs::read(&rdb).unwrap());
    assert_eq!(digest(&mut back.connect()), merged);
}

#[test]
fn an_rdb_file_meridian_sends_loads_back_into_meridian() {
    // What `redis-cli --rdb` saves from a site (SYNC), loaded by DEBUG RELOAD NOSAVE into a
    // site of another shard count, is the same data.
    let a = Server::start_with(&["--shards", "2"]);
    let mut ca = a.connect();
    for l in [
        "DEBUG POPULATE 500 k 10",
        "RPUSH l a b c",
        "HSET h f v",
        "ZADD z 1 a",
        "SADD s a b",
        "SET t v EX 1000",
    ] {
        run(&mut ca, l);
    }
    let file = sync_rdb(a.port);
    let b = Server::start_with(&["--shards", "3"]);
    std::fs::write(b.dir.path().join("dump.rdb"), &file).unwrap();
    let mut cb = b.connect();
    ok(&mut cb, &[b"DEBUG", b"RELOAD", b"NOSAVE"]);
    assert_eq!(digest(&mut cb), digest(&mut ca));
    assert!(cb.int(&["TTL", "t"]) > 990);
}

/// Runs `meridian import-rdb` with `args`: whether it succeeded, and what it printed.
fn import_rdb(args: &[&str]) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_meridian"))
        .arg("import-rdb")
        .args(args)
        .output()
        .expect("run meridian import-rdb");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn import_rdb_moves_a_redis_file_into_a_site_and_into_redis() {
    let (r, file, want) = redis_with_every_type();
    let path = r.dir.path().join("dump.rdb");
    let path = path.to_str().unwrap();
    let m = Server::start_with(&["--requirepass", "pw"]);
    let to = format!("127.0.0.1:{}", m.port);
    // Without the password: the server refuses the first command (NOAUTH).
    let (done, text) = import_rdb(&[path, "--to", &to]);
    assert!(!done && text.contains("NOAUTH"), "{text}");
    let (done, text) = import_rdb(&[path, "--to", &to, "--password", "pw"]);
    assert!(done, "{text}");
    assert!(text.contains("3017 keys restored, 0 refused"), "{text}");
    let mut c = m.connect();
    c.ok(&["AUTH", "pw"]);
    assert_eq!(digest(&mut c), want);
    assert_eq!(c.reply(&["FCALL", "f1", "0"]), Reply::Int(1));
    let ttl = c.int(&["PTTL", "ttl"]);
    assert!(ttl > 500_000 && ttl <= 600_000, "{ttl}");
    // Again: the library is there already, which stops the import before any key...
    let (done, text) = import_rdb(&[path, "--to", &to, "--password", "pw"]);
    assert!(
        !done && text.contains("Library lib1 already exists"),
        "{text}"
    );
    // ...and with REPLACE every key and the library are replaced: the same data.
    ok(&mut c, &[b"SET", b"s", b"changed"]);
    let (done, text) = import_rdb(&[path, "--to", &to, "--password", "pw", "--replace"]);
    assert!(done, "{text}");
    assert_eq!(digest(&mut c), want);

    // The same file into Redis gives Redis's data: the tool is a plain client.
    let other = redis();
    let (done, text) = import_rdb(&[path, "--to", &format!("127.0.0.1:{}", other.port)]);
    assert!(done, "{text}");
    assert_eq!(digest(&mut other.connect()), want);

    // A damaged file sends nothing.
    let fresh = Server::start();
    let mut bad = file.clone();
    let i = bad.len() / 2;
    bad[i] ^= 0x55;
    let bad_path = m.dir.path().join("bad.rdb");
    std::fs::write(&bad_path, &bad).unwrap();
    let (done, text) = import_rdb(&[
        bad_path.to_str().unwrap(),
        "--to",
        &format!("127.0.0.1:{}", fresh.port),
    ]);
    assert!(!done && text.contains("not a loadable RDB file"), "{text}");
    assert_eq!(fresh.connect().int(&["DBSIZE"]), 0);
}

#[test]
fn an_rdb_file_with_a_key_twice_changes_no_shard() {
    // Keys of every shard, and one of them twice: Redis's duplicated-key error on every
    // shard, not only on the owner's, so no shard loads its part while another refuses.
    use meridian_rdb::Encoder;
    use meridian_rdb::file::FileBuilder;
    let enc = Encoder::default();
    let mut f = FileBuilder::new(enc, &[]);
    f.database(0, 41, 0);
    for i in 0..40 {
        let k = format!("k{i}");
        f.key(k.as_bytes(), None, &enc.string(b"file")).unwrap();
    }
    f.key(b"k7", None, &enc.string(b"again")).unwrap();
    let file = f.finish();
    let m = Server::start();
    let mut c = m.connect();
    for i in 0..40 {
        ok(&mut c, &[b"SET", format!("k{i}").as_bytes(), b"mine"]);
    }
    ok(&mut c, &[b"SET", b"other", b"x"]);
    std::fs::write(m.dir.path().join("dump.rdb"), &file).unwrap();
    assert!(
        c.err(&["DEBUG", "RELOAD", "NOSAVE"])
            .contains("Error trying to load")
    );
    assert_eq!(c.int(&["DBSIZE"]), 41);
    for i in 0..40 {
        assert_eq!(
            c.reply(&["GET", &format!("k{i}")]),
            Reply::bulk("mine"),
            "k{i}"
        );
    }
    // MERGE takes the later copy.
    ok(
        &mut c,
        &[b"DEBUG", b"RELOAD", b"NOSAVE", b"NOFLUSH", b"MERGE"],
    );
    assert_eq!(c.reply(&["GET", "k7"]), Reply::bulk("again"));
    assert_eq!(c.reply(&["GET", "k8"]), Reply::bulk("file"));
    assert_eq!(c.int(&["DBSIZE"]), 41);
}

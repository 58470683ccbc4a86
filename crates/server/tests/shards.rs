//! Several shards in one process (`--shards 4`): every command family routed to the shard
//! that owns its keys and compared with `redis-server`, pipelines of mixed slots in order,
//! scatter-gather (MGET MSET DEL UNLINK EXISTS TOUCH), CROSSSLOT texts, commands over every
//! shard (KEYS SCAN DBSIZE FLUSHALL RANDOMKEY INFO CLIENT LIST CONFIG SET), transactions on one
//! shard, WATCH on another thread's shard, Pub/Sub and blocking pops across threads, and a
//! 3-shard site converging with a 2-shard site under concurrent writes.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::sites::{CONVERGE_TIMEOUT, Cluster, Opts};
use common::text::{call, s};
use common::{Raw, RedisRef, Reply, Server, key_slot};

const SHARDS: &str = "4";

/// The shard of four contiguous ranges a key is on.
fn shard_of(key: &str) -> u16 {
    key_slot(key) / 4096
}

/// One key per shard of four: `prefix` followed by a number.
fn key_per_shard(prefix: &str) -> Vec<String> {
    let mut out: Vec<Option<String>> = vec![None; 4];
    for i in 0..10_000 {
        let k = format!("{prefix}{i}");
        let sh = usize::from(shard_of(&k));
        if out[sh].is_none() {
            out[sh] = Some(k);
        }
        if out.iter().all(Option::is_some) {
            break;
        }
    }
    out.into_iter()
        .map(|k| k.expect("a key per shard"))
        .collect()
}

/// Commands of every family on keys of every shard: each reply must be Redis's.
fn family_script() -> Vec<Vec<String>> {
    let mut script: Vec<Vec<String>> = Vec::new();
    let mut add = |v: &[&str]| script.push(v.iter().map(|x| x.to_string()).collect());
    for (i, k) in key_per_shard("str").iter().enumerate() {
        let n = i.to_string();
        add(&["SET", k, &n]);
        add(&["APPEND", k, "x"]);
        add(&["GET", k]);
        add(&["STRLEN", k]);
        add(&["SETRANGE", k, "1", "yy"]);
        add(&["GETRANGE", k, "0", "-1"]);
        add(&["GETEX", k, "PX", "100000"]);
        add(&["TYPE", k]);
        add(&["EXISTS", k]);
        add(&["GETDEL", k]);
        add(&["INCRBY", k, "7"]);
        add(&["INCRBYFLOAT", k, "1.5"]);
        add(&["OBJECT", "ENCODING", k]);
    }
    for k in key_per_shard("hash") {
        add(&["HSET", &k, "a", "1", "b", "2"]);
        add(&["HINCRBY", &k, "a", "5"]);
        add(&["HGETALL", &k]);
        add(&["HDEL", &k, "b"]);
        add(&["HLEN", &k]);
        add(&["HMGET", &k, "a", "b"]);
    }
    for k in key_per_shard("list") {
        add(&["RPUSH", &k, "a", "b", "c"]);
        add(&["LPUSH", &k, "z"]);
        add(&["LRANGE", &k, "0", "-1"]);
        add(&["LPOP", &k]);
        add(&["LINDEX", &k, "1"]);
        add(&["LLEN", &k]);
        add(&["LPOS", &k, "c"]);
    }
    for k in key_per_shard("set") {
        add(&["SADD", &k, "x", "y", "z"]);
        add(&["SREM", &k, "y"]);
        add(&["SCARD", &k]);
        add(&["SISMEMBER", &k, "x"]);
        add(&["SMISMEMBER", &k, "x", "y"]);
    }
    for k in key_per_shard("zset") {
        add(&["ZADD", &k, "1", "a", "2", "b", "3", "c"]);
        add(&["ZINCRBY", &k, "5", "a"]);
        add(&["ZRANGE", &k, "0", "-1", "WITHSCORES"]);
        add(&["ZRANK", &k, "b"]);
        add(&["ZPOPMIN", &k]);
        add(&["ZCARD", &k]);
        add(&["ZSCORE", &k, "a"]);
    }
    for k in key_per_shard("hll") {
        add(&["PFADD", &k, "a", "b", "c"]);
        add(&["PFCOUNT", &k]);
    }
    for k in key_per_shard("geo") {
        add(&["GEOADD", &k, "13.361389", "38.115556", "Palermo"]);
        add(&["GEOADD", &k, "15.087269", "37.502669", "Catania"]);
        add(&["GEODIST", &k, "Palermo", "Catania", "km"]);
    }
    for k in key_per_shard("ttl") {
        add(&["SET", &k, "v"]);
        add(&["EXPIRE", &k, "1000"]);
        add(&["TTL", &k]);
        add(&["PERSIST", &k]);
        add(&["TTL", &k]);
        add(&["DEL", &k]);
        add(&["EXISTS", &k]);
    }
    // Keys sharing a hash tag share a shard: multi-key commands run there.
    add(&["SADD", "{t}a", "1", "2"]);
    add(&["SADD", "{t}b", "2", "3"]);
    add(&["SUNION", "{t}a", "{t}b"]);
    add(&["SINTERSTORE", "{t}c", "{t}a", "{t}b"]);
    add(&["SMEMBERS", "{t}c"]);
    add(&["RENAME", "{t}c", "{t}d"]);
    add(&["LMOVE", "{t}nolist", "{t}x", "LEFT", "RIGHT"]);
    script
}

/// Runs `script` `rounds` times on a fresh connection to `srv` and to a `redis-server` after
/// FLUSHALL each time: every reply must be Redis's.
fn assert_like_redis(srv: &Server, script: &[Vec<String>], rounds: usize) {
    let reference = RedisRef::start();
    for _ in 0..rounds {
        let mut m = srv.connect();
        let mut r = reference.connect();
        call(&mut m, &["FLUSHALL"]);
        call(&mut r, &["FLUSHALL"]);
        let got = run_script(&mut m, script);
        let want = run_script(&mut r, script);
        for ((cmd, g), w) in script.iter().zip(&got).zip(&want) {
            assert_eq!(g, w, "{cmd:?}");
        }
    }
}

/// INFO crdt, and the keys each shard holds by it.
fn keys_per_shard(srv: &Server) -> (String, Vec<u64>) {
    let info = call(&mut srv.connect(), &["INFO", "crdt"]);
    let per_shard = info
        .lines()
        .filter(|l| l.starts_with("crdt_shard_"))
        .filter_map(|l| {
            l.split(',')
                .find_map(|f| f.strip_prefix("keys="))
                .and_then(|v| v.parse().ok())
        })
        .collect();
    (info, per_shard)
}

fn run_script(c: &mut Raw, script: &[Vec<String>]) -> Vec<String> {
    script
        .iter()
        .map(|cmd| {
            let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            let mut r = call(c, &args);
            // Sets answer in table order: compare them sorted.
            if matches!(args[0], "SUNION" | "SINTER" | "SDIFF" | "SMEMBERS") {
                if let Reply::Array(mut items) = common::parse_reply(r.as_bytes()) {
                    items.sort_by_key(|i| format!("{i:?}"));
                    r = format!("{items:?}");
                }
            }
            r
        })
        .collect()
}

#[test]
fn every_family_routes_to_its_shard_like_redis() {
    if !RedisRef::available() {
        eprintln!("redis-server not installed: skipped");
        return;
    }
    let srv = Server::start_with(&["--shards", SHARDS]);
    // Several connections: they live on different threads, so every key is local to some
    // and remote to others.
    assert_like_redis(&srv, &family_script(), 3);
    // The keys really are on several shards.
    let (info, per_shard) = keys_per_shard(&srv);
    assert_eq!(per_shard.len(), 4, "{info}");
    assert!(per_shard.iter().all(|&n| n > 0), "{info}");
}

/// DEBUG DIGEST, DIGEST-VALUE, POPULATE and RELOAD on the main port answer for every
/// shard: the digest of data spread over four shards is Redis's for the same data (it was
/// this thread's shard's alone), POPULATE creates every key, each on its shard, with Redis's
/// values and argument errors, and RELOAD leaves the data as Redis's leaves its own.
#[test]
fn debug_digest_and_populate_cover_every_shard_like_redis() {
    if !RedisRef::available() {
        eprintln!("redis-server not installed: skipped");
        return;
    }
    let srv = Server::start_with(&["--shards", SHARDS]);
    let mut script: Vec<Vec<String>> = Vec::new();
    let mut add = |c: &[&str]| script.push(c.iter().map(|a| a.to_string()).collect());
    add(&["DEBUG", "DIGEST"]);
    add(&["DEBUG", "POPULATE", "1000"]);
    add(&["DEBUG", "DIGEST"]);
    add(&["DEBUG", "POPULATE", "50", "foo", "3"]);
    add(&["DEBUG", "POPULATE", "20", "bar", "12"]);
    add(&["DEBUG", "POPULATE", "2000", "key", "5"]);
    add(&["GET", "foo:7"]);
    add(&["GET", "bar:3"]);
    add(&["GET", "key:999"]);
    add(&["GET", "key:1500"]);
    add(&["DBSIZE"]);
    for (i, k) in key_per_shard("d").iter().enumerate() {
        let n = i.to_string();
        add(&["SADD", &format!("{k}s"), "a", "b", &n]);
        add(&["HSET", &format!("{k}h"), "f", &n, "g", "2.5"]);
        add(&["ZADD", &format!("{k}z"), "1", "m", "2.5", &n]);
        add(&["RPUSH", &format!("{k}l"), "x", &n]);
        add(&["PEXPIRE", &format!("{k}l"), "100000"]);
    }
    add(&["DEBUG", "DIGEST"]);
    let spread = key_per_shard("d");
    let sets: Vec<String> = spread.iter().map(|k| format!("{k}s")).collect();
    let mut digest_value = vec!["DEBUG", "DIGEST-VALUE", "nosuchkey"];
    digest_value.extend(sets.iter().map(String::as_str));
    add(&digest_value);
    for k in &sets {
        add(&["DEBUG", "DIGEST-VALUE", k]);
    }
    add(&["DEBUG", "RELOAD"]);
    add(&["DEBUG", "DIGEST"]);
    add(&["DEBUG", "RELOAD", "MERGE", "NOFLUSH"]);
    add(&["DEBUG", "DIGEST"]);
    add(&["DEBUG", "RELOAD", "FOO"]);
    add(&["SMEMBERS", &sets[0]]);
    add(&["PTTL", "nosuchkey"]);
    for size in ["1b", "5b", "0", "4gb", "4095mb", "abc", "-1"] {
        add(&["DEBUG", "QUICKLIST-PACKED-THRESHOLD", size]);
    }
    add(&["SELECT", "3"]);
    add(&["DEBUG", "POPULATE", "30", "three"]);
    add(&["DEBUG", "DIGEST"]);
    add(&["SELECT", "0"]);
    add(&["DEL", "key:5"]);
    add(&["DEBUG", "DIGEST"]);
    add(&["DEBUG", "POPULATE", "-1"]);
    add(&["DEBUG", "POPULATE", "abc"]);
    add(&["DEBUG", "POPULATE", "10", "p", "-5"]);
    add(&["DEBUG", "POPULATE", "1", "a", "2", "3"]);
    add(&["DEBUG", "POPULATE"]);
    add(&["DBSIZE"]);
    assert_like_redis(&srv, &script, 2);
    let (info, per_shard) = keys_per_shard(&srv);
    assert_eq!(per_shard.len(), 4, "{info}");
    assert!(per_shard.iter().all(|&n| n > 400), "{info}");
    // DEBUG OBJECT finds a key of any shard (its address is Meridian's own).
    for _ in 0..4 {
        let mut c = srv.connect();
        for k in &sets {
            let line = call(&mut c, &["DEBUG", "OBJECT", k]);
            assert!(line.contains("encoding:hashtable"), "{k}: {line}");
        }
    }
    // NOFLUSH without MERGE loads the snapshot over the data it holds: Redis's load error
    // (Redis itself aborts on a duplicate key). NOSAVE loads the RDB file the DEBUG RELOADs
    // above wrote from every shard, as Redis's: `key:5`, deleted since, is back.
    let mut c = srv.connect();
    assert_eq!(
        call(&mut c, &["DEBUG", "RELOAD", "NOFLUSH"]).trim_end(),
        "-ERR Error trying to load the RDB dump"
    );
    assert_eq!(call(&mut c, &["EXISTS", "key:5"]).trim_end(), ":0");
    assert_eq!(
        call(&mut c, &["DEBUG", "RELOAD", "NOSAVE"]).trim_end(),
        "+OK"
    );
    assert_eq!(call(&mut c, &["EXISTS", "key:5"]).trim_end(), ":1");
    call(&mut c, &["FLUSHALL"]);
    assert_eq!(
        call(&mut c, &["DEBUG", "RELOAD", "NOFLUSH"]).trim_end(),
        "+OK"
    );
}

/// Commands that read keys of several shards and write one (the set and sorted-set algebra,
/// ZRANGESTORE, BITOP, PFCOUNT, PFMERGE, COPY, LCS, GEOSEARCHSTORE, GEORADIUS STORE) on keys
/// of four shards: each reply must be Redis's, from connections on every thread.
fn reads_across_script() -> Vec<Vec<String>> {
    let mut script: Vec<Vec<String>> = Vec::new();
    let mut add = |v: &[&str]| script.push(v.iter().map(|x| x.to_string()).collect());
    let s = key_per_shard("xs");
    let (s0, s1, s2, s3) = (&s[0], &s[1], &s[2], &s[3]);
    add(&["SADD", s0, "a", "b", "c", "d"]);
    add(&["SADD", s1, "b", "c", "e"]);
    add(&["SADD", s2, "c", "f"]);
    for cmd in ["SUNION", "SINTER", "SDIFF"] {
        add(&[cmd, s0, s1, s2]);
        add(&[cmd, s1, s0, "xs-missing"]);
    }
    add(&["SINTERCARD", "2", s0, s1]);
    add(&["SINTERCARD", "3", s0, s1, s2, "LIMIT", "1"]);
    add(&["SUNIONSTORE", s3, s0, s1, s2]);
    add(&["SMEMBERS", s3]);
    add(&["SINTERSTORE", s3, s0, s1]);
    add(&["SMEMBERS", s3]);
    add(&["SDIFFSTORE", s3, s0, s1, s2]);
    add(&["SMEMBERS", s3]);
    // The destination is also a source, on another shard than the others.
    add(&["SUNIONSTORE", s1, s1, s0]);
    add(&["SMEMBERS", s1]);
    add(&["SINTERSTORE", s3, s0, "xs-missing"]);
    add(&["EXISTS", s3]);
    let z = key_per_shard("xz");
    let (z0, z1, z2, z3) = (&z[0], &z[1], &z[2], &z[3]);
    add(&["ZADD", z0, "1", "a", "2", "b", "3", "c"]);
    add(&["ZADD", z1, "10", "b", "20", "c", "30", "d"]);
    add(&["ZADD", z2, "5", "c"]);
    add(&["ZUNION", "3", z0, z1, z2, "WITHSCORES"]);
    add(&["ZINTER", "2", z0, z1, "WEIGHTS", "2", "3", "WITHSCORES"]);
    add(&["ZDIFF", "2", z0, z2, "WITHSCORES"]);
    add(&["ZINTERCARD", "3", z0, z1, z2]);
    add(&["ZUNIONSTORE", z3, "2", z0, z1, "AGGREGATE", "MAX"]);
    add(&["ZRANGE", z3, "0", "-1", "WITHSCORES"]);
    add(&["ZINTERSTORE", z3, "3", z0, z1, z2, "AGGREGATE", "MIN"]);
    add(&["ZRANGE", z3, "0", "-1", "WITHSCORES"]);
    add(&["ZDIFFSTORE", z3, "2", z1, z0]);
    add(&["ZRANGE", z3, "0", "-1", "WITHSCORES"]);
    add(&["ZRANGESTORE", z3, z0, "1", "-1"]);
    add(&["ZRANGE", z3, "0", "-1", "WITHSCORES"]);
    add(&[
        "ZRANGESTORE",
        z3,
        z1,
        "(10",
        "+inf",
        "BYSCORE",
        "LIMIT",
        "0",
        "1",
    ]);
    add(&["ZRANGE", z3, "0", "-1", "WITHSCORES"]);
    let b = key_per_shard("xb");
    let (b0, b1, b2, b3) = (&b[0], &b[1], &b[2], &b[3]);
    add(&["SET", b0, "foobar"]);
    add(&["SET", b1, "abcdefgh"]);
    add(&["SETBIT", b2, "3", "1"]);
    for op in ["AND", "OR", "XOR"] {
        add(&["BITOP", op, b3, b0, b1, b2]);
        add(&["GET", b3]);
    }
    add(&["BITOP", "NOT", b3, b1]);
    add(&["GET", b3]);
    add(&["BITOP", "AND", b3, "xb-missing", b0]);
    add(&["GET", b3]);
    add(&["LCS", b0, b1]);
    add(&["LCS", b0, b1, "LEN"]);
    add(&["LCS", b0, b1, "IDX", "MINMATCHLEN", "1", "WITHMATCHLEN"]);
    let h = key_per_shard("xh");
    let (h0, h1, h2, h3) = (&h[0], &h[1], &h[2], &h[3]);
    add(&["PFADD", h0, "a", "b", "c"]);
    add(&["PFADD", h1, "c", "d"]);
    add(&["PFADD", h2, "e"]);
    add(&["PFCOUNT", h0, h1, h2, "xh-missing"]);
    add(&["PFMERGE", h3, h0, h1]);
    add(&["PFCOUNT", h3]);
    add(&["PFMERGE", h0, h2]);
    add(&["PFCOUNT", h0]);
    let c = key_per_shard("xc");
    let (c0, c1, c2) = (&c[0], &c[1], &c[2]);
    add(&["SET", c0, "v", "EX", "1000"]);
    add(&["COPY", c0, c1]);
    add(&["GET", c1]);
    add(&["TTL", c1]);
    add(&["COPY", c0, c1]);
    add(&["SET", c0, "w"]);
    add(&["COPY", c0, c1, "REPLACE"]);
    add(&["GET", c1]);
    add(&["TTL", c1]);
    add(&["COPY", s0, c2, "DB", "1"]);
    add(&["SELECT", "1"]);
    add(&["SMEMBERS", c2]);
    add(&["SELECT", "0"]);
    add(&["COPY", "xc-missing", c2]);
    add(&["APPEND", c1, "+"]);
    add(&["COPY", c1, c0, "REPLACE"]);
    add(&["OBJECT", "ENCODING", c0]);
    let g = key_per_shard("xg");
    let (g0, g1) = (&g[0], &g[1]);
    add(&[
        "GEOADD",
        g0,
        "13.361389",
        "38.115556",
        "Palermo",
        "15.087269",
        "37.502669",
        "Catania",
    ]);
    add(&[
        "GEOSEARCHSTORE",
        g1,
        g0,
        "FROMLONLAT",
        "15",
        "37",
        "BYRADIUS",
        "200",
        "km",
        "ASC",
    ]);
    add(&["ZRANGE", g1, "0", "-1"]);
    add(&[
        "GEOSEARCHSTORE",
        g1,
        g0,
        "FROMMEMBER",
        "Palermo",
        "BYBOX",
        "400",
        "400",
        "km",
        "STOREDIST",
    ]);
    add(&["ZCARD", g1]);
    add(&["GEORADIUS", g0, "15", "37", "200", "km", "STORE", g1]);
    add(&["ZRANGE", g1, "0", "-1"]);
    add(&[
        "GEORADIUSBYMEMBER",
        g0,
        "Palermo",
        "100",
        "km",
        "STOREDIST",
        g1,
    ]);
    add(&["ZRANGE", g1, "0", "-1"]);
    // LMPOP and ZMPOP pop from the first non-empty key, whatever its shard.
    let l = key_per_shard("xl");
    add(&["RPUSH", &l[1], "a", "b", "c"]);
    add(&["RPUSH", &l[3], "d"]);
    add(&[
        "LMPOP", "4", &l[0], &l[1], &l[2], &l[3], "LEFT", "COUNT", "2",
    ]);
    add(&[
        "LMPOP", "4", &l[0], &l[1], &l[2], &l[3], "RIGHT", "COUNT", "5",
    ]);
    add(&["LMPOP", "3", &l[0], &l[2], &l[3], "LEFT"]);
    add(&["LMPOP", "3", &l[0], &l[2], &l[3], "LEFT"]);
    add(&["LMPOP", "2", &l[0], &l[2], "LEFT", "COUNT", "0"]);
    add(&["LMPOP", "2", &l[0], &l[2], "MIDDLE"]);
    add(&["LMPOP", "2", &l[0], b0, "LEFT"]);
    add(&["ZMPOP", "3", &l[0], z2, z1, "MIN", "COUNT", "2"]);
    add(&["ZMPOP", "3", &l[0], z2, z1, "MAX"]);
    add(&["ZMPOP", "2", &l[0], b1, "MAX"]);
    // RENAME and RENAMENX between two shards.
    let r = key_per_shard("xr");
    add(&["RPUSH", &r[0], "a", "b"]);
    add(&["EXPIRE", &r[0], "1000"]);
    add(&["RENAME", &r[0], &r[1]]);
    add(&["EXISTS", &r[0]]);
    add(&["LRANGE", &r[1], "0", "-1"]);
    add(&["TTL", &r[1]]);
    add(&["RENAME", &r[0], &r[2]]);
    add(&["SET", &r[2], "x"]);
    add(&["RENAMENX", &r[1], &r[2]]);
    add(&["LRANGE", &r[1], "0", "-1"]);
    add(&["RENAMENX", &r[1], &r[3]]);
    add(&["EXISTS", &r[1]]);
    add(&["LRANGE", &r[3], "0", "-1"]);
    add(&["RENAME", &r[3], &r[2]]);
    add(&["TYPE", &r[2]]);
    add(&["APPEND", &r[0], "raw"]);
    add(&["RENAME", &r[0], &r[1]]);
    add(&["OBJECT", "ENCODING", &r[1]]);
    // MSETNX over keys of several shards: all or none.
    let n = key_per_shard("xn");
    add(&["MSETNX", &n[0], "1", &n[1], "2", &n[2], "3"]);
    add(&["MGET", &n[0], &n[1], &n[2], &n[3]]);
    add(&["MSETNX", &n[3], "4", &n[2], "x"]);
    add(&["EXISTS", &n[3]]);
    add(&["MSETNX", &n[3], "4", &n[0]]);
    add(&["MSETNX", &n[3], "4", &n[3], "5"]);
    add(&["GET", &n[3]]);
    // SMOVE between two shards.
    let m = key_per_shard("xm");
    add(&["SADD", &m[0], "a", "b"]);
    add(&["SADD", &m[1], "b"]);
    add(&["SMOVE", &m[0], &m[1], "a"]);
    add(&["SMOVE", &m[0], &m[1], "b"]);
    add(&["EXISTS", &m[0]]);
    add(&["SMEMBERS", &m[1]]);
    add(&["SMOVE", &m[0], &m[1], "a"]);
    add(&["SMOVE", &m[1], &m[2], "zz"]);
    add(&["SET", &m[3], "s"]);
    add(&["SMOVE", &m[1], &m[3], "a"]);
    add(&["SMOVE", &m[1], &m[3], "zz"]);
    add(&["SMOVE", &m[3], &m[1], "a"]);
    add(&["SMEMBERS", &m[1]]);
    add(&["SMOVE", &m[1], &m[2], "a"]);
    add(&["SMEMBERS", &m[2]]);
    // Blocking pops over keys of several shards that find something at once (or time out
    // soon): the first non-empty key in the order given, as Redis takes it.
    let q = key_per_shard("xq");
    add(&["RPUSH", &q[2], "a", "b", "c"]);
    add(&["ZADD", &q[3], "1", "m", "2", "n", "3", "o"]);
    add(&["BLPOP", &q[0], &q[1], &q[2], "1"]);
    add(&["BRPOP", &q[1], &q[0], &q[2], "1"]);
    add(&[
        "BLMPOP", "1", "3", &q[0], &q[1], &q[2], "RIGHT", "COUNT", "5",
    ]);
    add(&["BZPOPMIN", &q[0], &q[1], &q[3], "1"]);
    add(&["BZPOPMAX", &q[1], &q[3], "1"]);
    add(&["BZMPOP", "1", "2", &q[0], &q[3], "MIN", "COUNT", "3"]);
    add(&["BLPOP", &q[0], &q[1], "0.05"]);
    add(&["BZMPOP", "0.05", "2", &q[0], &q[3], "MAX"]);
    add(&["BLPOP", &q[0], b0, "1"]);
    add(&["BZPOPMIN", &q[0], &q[1], "-1"]);
    add(&["BLMPOP", "1", "2", &q[0], &q[1], "UP"]);
    // A transaction over keys of several shards: its commands' replies in order, a SELECT in
    // it holding for the commands after it, an error inside it not stopping the others.
    let t = key_per_shard("xt");
    add(&["MULTI"]);
    add(&["SET", &t[0], "1"]);
    add(&["INCR", &t[1]]);
    add(&["PING"]);
    add(&["LPUSH", &t[2], "a", "b"]);
    add(&["INCR", &t[0]]);
    add(&["HSET", &t[0], "f", "v"]);
    add(&["SELECT", "1"]);
    add(&["SET", &t[3], "in-db-1"]);
    add(&["GET", &t[0]]);
    add(&["SELECT", "0"]);
    add(&["GET", &t[1]]);
    add(&["EXEC"]);
    add(&["SELECT", "1"]);
    add(&["GET", &t[3]]);
    add(&["SELECT", "0"]);
    add(&["EXISTS", &t[3]]);
    add(&["MULTI"]);
    add(&["SET", &t[1], "2"]);
    add(&["DISCARD"]);
    add(&["GET", &t[1]]);
    // A source of the wrong type, on another shard than the destination.
    add(&["SUNIONSTORE", s3, s0, b0]);
    add(&["ZUNIONSTORE", z3, "2", z0, b1]);
    add(&["BITOP", "OR", b3, b0, s1]);
    add(&["PFCOUNT", h0, b1]);
    add(&["LCS", b0, s1]);
    script
}

#[test]
fn multi_key_reads_across_shards_like_redis() {
    if !RedisRef::available() {
        eprintln!("redis-server not installed: skipped");
        return;
    }
    let srv = Server::start_with(&["--shards", SHARDS]);
    // Connections on every thread: the target shard is this one for some, another for the
    // others.
    assert_like_redis(&srv, &reads_across_script(), 4);
    // No copy stayed behind on the shard it was lent to: KEYS lists each key once, and as
    // many as DBSIZE counts.
    let mut m = srv.connect();
    let dbsize: usize = call(&mut m, &["DBSIZE"])
        .trim_start_matches(':')
        .trim()
        .parse()
        .expect("DBSIZE");
    let listed: Vec<String> = call(&mut m, &["KEYS", "*"])
        .lines()
        .filter(|l| !l.starts_with('*') && !l.starts_with('$'))
        .map(str::to_string)
        .collect();
    let distinct: BTreeSet<&String> = listed.iter().collect();
    assert_eq!(distinct.len(), listed.len(), "{listed:?}");
    assert_eq!(listed.len(), dbsize, "{listed:?}");
    let info = call(&mut m, &["INFO", "commandstats"]);
    assert!(info.contains("cmdstat_sunionstore:calls=12,"), "{info}");
}

/// A client tracking its reads is told of a change to a key SUNION read on another shard,
/// and a key changed between two reads across shards is read anew.
#[test]
fn reads_across_shards_are_tracked_where_the_keys_are() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let keys = key_per_shard("tr");
    let mut c = srv.connect();
    assert!(call(&mut c, &["HELLO", "3"]).starts_with('%'));
    assert_eq!(call(&mut c, &["CLIENT", "TRACKING", "on"]), "+OK\r\n");
    let mut w = srv.connect();
    for k in &keys {
        call(&mut w, &["SADD", k, k]);
    }
    let mut args = vec!["SUNION"];
    args.extend(keys.iter().map(String::as_str));
    let all = call(&mut c, &args);
    assert!(all.starts_with("~4\r\n"), "{all}");
    // Every key read, whichever shard it is on, is invalidated by its change.
    for k in &keys {
        call(&mut w, &["SADD", k, "new"]);
        let push = String::from_utf8_lossy(&c.read_reply()).into_owned();
        assert!(
            push.contains("invalidate") && push.contains(k.as_str()),
            "{push}"
        );
    }
    let all = call(&mut c, &args);
    assert!(all.starts_with("~5\r\n"), "{all}");
    // The same read inside a transaction over several shards (`held_across`), then in a
    // script that declares the four keys (each remembered on its own shard).
    let mut read_twice = vec![common::cmd(&[b"MULTI"])];
    let refs: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    read_twice.push(common::cmd(&refs));
    read_twice.push(common::cmd(&[b"EXEC"]));
    c.send(&read_twice.concat());
    for _ in 0..2 {
        c.read_reply();
    }
    let exec = String::from_utf8_lossy(&c.read_reply()).into_owned();
    assert!(exec.starts_with("*1\r\n~5\r\n"), "{exec}");
    let script = "return redis.call('sunion', KEYS[1], KEYS[2], KEYS[3], KEYS[4])";
    let mut eval = vec!["EVAL", script, "4"];
    eval.extend(keys.iter().map(String::as_str));
    for round in ["newer", "newest"] {
        for k in &keys {
            call(&mut w, &["SADD", k, round]);
            let push = String::from_utf8_lossy(&c.read_reply()).into_owned();
            assert!(
                push.contains("invalidate") && push.contains(k.as_str()),
                "{round} {push}"
            );
        }
        if round == "newer" {
            assert!(call(&mut c, &eval).starts_with("*6\r\n"));
        }
    }
}

/// A blocking pop over keys of several shards waits for a push to any of them, counts once in
/// `blocked_clients`, ends at its deadline, at CLIENT UNBLOCK (TIMEOUT or ERROR), and leaves
/// nothing behind when its client goes.
#[test]
fn blocking_pops_wait_on_keys_of_several_shards() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let keys = key_per_shard("bx");
    let mut admin = srv.connect();
    // Woken by a push to each key in turn, from connections on every thread.
    for (i, k) in keys.iter().enumerate() {
        let mut w = srv.connect();
        let mut args: Vec<&[u8]> = vec![b"BRPOP"];
        args.extend(keys.iter().map(|k| k.as_bytes()));
        args.push(b"5");
        w.send(&common::cmd(&args));
        blocked(&mut admin, 1);
        let id_line = call(&mut admin, &["CLIENT", "LIST"]);
        assert!(id_line.contains("flags=b"), "{id_line}");
        let v = format!("v{i}");
        assert_eq!(call(&mut admin, &["LPUSH", k, &v]), ":1\r\n");
        assert_eq!(
            s(&w.read_reply()),
            format!("*2\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n", k.len(), v.len())
        );
        assert_eq!(call(&mut w, &["PING"]), "+PONG\r\n");
        blocked(&mut admin, 0);
    }
    // A sorted-set pop, woken by ZADD on the last key's shard.
    let mut w = srv.connect();
    w.send(&common::cmd(&[
        b"BZMPOP",
        b"5",
        b"3",
        keys[0].as_bytes(),
        keys[1].as_bytes(),
        keys[3].as_bytes(),
        b"MAX",
        b"COUNT",
        b"2",
    ]));
    blocked(&mut admin, 1);
    call(
        &mut admin,
        &["ZADD", &keys[3], "1", "a", "2", "b", "3", "c"],
    );
    assert_eq!(
        s(&w.read_reply()),
        format!(
            "*2\r\n${}\r\n{}\r\n*2\r\n*2\r\n$1\r\nc\r\n$1\r\n3\r\n*2\r\n$1\r\nb\r\n$1\r\n2\r\n",
            keys[3].len(),
            keys[3]
        )
    );
    assert_eq!(call(&mut admin, &["ZCARD", &keys[3]]), ":1\r\n");
    // The deadline: the null array.
    let started = Instant::now();
    assert_eq!(
        call(&mut w, &["BLPOP", &keys[0], &keys[1], "0.2"]),
        "*-1\r\n"
    );
    assert!(started.elapsed() >= Duration::from_millis(190));
    blocked(&mut admin, 0);
    // CLIENT UNBLOCK finds it, both ways.
    let id = call(&mut w, &["CLIENT", "ID"]);
    let id = id.trim_start_matches(':').trim().to_string();
    for (how, reply) in [
        ("TIMEOUT", "*-1\r\n".to_string()),
        (
            "ERROR",
            "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n".to_string(),
        ),
    ] {
        w.send(&common::cmd(&[
            b"BLPOP",
            keys[1].as_bytes(),
            keys[2].as_bytes(),
            b"0",
        ]));
        blocked(&mut admin, 1);
        assert_eq!(call(&mut admin, &["CLIENT", "UNBLOCK", &id, how]), ":1\r\n");
        assert_eq!(s(&w.read_reply()), reply);
        blocked(&mut admin, 0);
        assert_eq!(call(&mut admin, &["CLIENT", "UNBLOCK", &id, how]), ":0\r\n");
    }
    // A client that goes while it waits takes nothing, and its registrations go with it.
    let mut gone = srv.connect();
    gone.send(&common::cmd(&[
        b"BLPOP",
        keys[0].as_bytes(),
        keys[2].as_bytes(),
        b"0",
    ]));
    blocked(&mut admin, 1);
    drop(gone);
    blocked(&mut admin, 0);
    assert_eq!(call(&mut admin, &["RPUSH", &keys[2], "kept"]), ":1\r\n");
    assert_eq!(call(&mut admin, &["LLEN", &keys[2]]), ":1\r\n");
}

/// MSETNX over two shards while another client sets one of its keys: all or none, every time
/// (a key set between its check and its write takes back the other shard's part).
#[test]
fn msetnx_across_shards_sets_all_or_none_under_a_racing_writer() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    const ROUNDS: usize = 1000;
    let pairs: Vec<(String, String)> = (0..ROUNDS)
        .map(|i| {
            let k = key_per_shard(&format!("race{i}-"));
            (k[0].clone(), k[1].clone())
        })
        .collect();
    let port = srv.port;
    let racer_keys: Vec<String> = pairs.iter().map(|(_, b)| b.clone()).collect();
    let racer = std::thread::spawn(move || {
        let mut r = common::Raw::connect(port);
        for k in &racer_keys {
            call(&mut r, &["SET", k, "racer"]);
        }
    });
    let mut c = srv.connect();
    let (mut ones, mut zeros) = (0, 0);
    for (a, b) in &pairs {
        match call(&mut c, &["MSETNX", a, "mine", b, "mine"]).as_str() {
            ":1\r\n" => {
                ones += 1;
                assert_eq!(call(&mut c, &["GET", a]), "$4\r\nmine\r\n");
            }
            ":0\r\n" => {
                zeros += 1;
                assert_eq!(
                    call(&mut c, &["EXISTS", a]),
                    ":0\r\n",
                    "{a} set by a failed MSETNX"
                );
            }
            other => panic!("{other}"),
        }
    }
    racer.join().expect("racer");
    assert_eq!(ones + zeros, ROUNDS);
}

/// Transactions over keys of two shards are atomic: while two clients run MULTI INCR a INCR b
/// EXEC, a third one's MULTI GET a GET b EXEC never sees a and b differ. WATCH of keys of
/// both shards fails EXEC when either changes, and only then.
#[test]
fn transactions_across_shards_are_atomic() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let keys = key_per_shard("atomic");
    let (a, b) = (keys[0].clone(), keys[2].clone());
    assert_never_half_seen(
        &srv,
        &a,
        &b,
        "transaction",
        incr_both_in_a_transaction,
        |c, a, b| transaction(c, &[&[b"GET", a.as_bytes()], &[b"GET", b.as_bytes()]]),
    );
    let mut r = srv.connect();
    // WATCH on both shards (two WATCHes, or one over both keys): a write to either fails
    // EXEC; none lets it run.
    let mut other = srv.connect();
    for (i, (changed, expect_nil)) in [(Some(&a), true), (Some(&b), true), (None, false)]
        .into_iter()
        .cycle()
        .take(6)
        .enumerate()
    {
        if i < 3 {
            assert_eq!(call(&mut r, &["WATCH", &a]), "+OK\r\n");
            assert_eq!(call(&mut r, &["WATCH", &b]), "+OK\r\n");
        } else {
            assert_eq!(call(&mut r, &["WATCH", &a, &b]), "+OK\r\n");
        }
        if let Some(k) = changed {
            assert_eq!(call(&mut other, &["SET", k, "changed"]), "+OK\r\n");
        }
        assert_eq!(call(&mut r, &["MULTI"]), "+OK\r\n");
        assert_eq!(call(&mut r, &["SET", &a, "w"]), "+QUEUED\r\n");
        assert_eq!(call(&mut r, &["SET", &b, "w"]), "+QUEUED\r\n");
        let exec = call(&mut r, &["EXEC"]);
        if expect_nil {
            assert_eq!(exec, "*-1\r\n");
        } else {
            assert_eq!(exec, "*2\r\n+OK\r\n+OK\r\n");
        }
    }
    // An empty transaction over WATCHed keys of two shards: nil when one changed, else an
    // empty array.
    for changed in [true, false] {
        assert_eq!(call(&mut r, &["WATCH", &a, &b]), "+OK\r\n");
        if changed {
            call(&mut other, &["SET", &b, "w"]);
        }
        assert_eq!(call(&mut r, &["MULTI"]), "+OK\r\n");
        let want = if changed { "*-1\r\n" } else { "*0\r\n" };
        assert_eq!(call(&mut r, &["EXEC"]), want);
    }
    // A command that failed to queue: EXECABORT, and nothing runs.
    assert_eq!(call(&mut r, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut r, &["SET", &a, "n"]), "+QUEUED\r\n");
    assert!(call(&mut r, &["ZREM", &b]).starts_with("-ERR wrong number"));
    assert_eq!(call(&mut r, &["SET", &b, "n"]), "+QUEUED\r\n");
    assert_eq!(
        call(&mut r, &["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    assert_eq!(call(&mut r, &["GET", &a]), "$1\r\nw\r\n");
    // The watches ended with EXEC: a later write does not fail the next transaction.
    call(&mut other, &["INCR", &keys[1]]);
    call(&mut other, &["SET", &a, "x"]);
    assert_eq!(call(&mut r, &["MULTI"]), "+OK\r\n");
    call(&mut r, &["GET", &a]);
    call(&mut r, &["GET", &b]);
    assert_eq!(call(&mut r, &["EXEC"]), "*2\r\n$1\r\nx\r\n$1\r\nw\r\n");
    // So from a connection on every thread (one of them owns a watched key itself).
    for _ in 0..4 {
        let mut c = srv.connect();
        assert_eq!(call(&mut c, &["WATCH", &a, &b]), "+OK\r\n");
        assert_eq!(call(&mut c, &["MULTI"]), "+OK\r\n");
        call(&mut c, &["SET", &a, "1"]);
        call(&mut c, &["SET", &b, "1"]);
        assert_eq!(call(&mut c, &["EXEC"]), "*2\r\n+OK\r\n+OK\r\n");
        call(&mut other, &["SET", &a, "2"]);
        call(&mut other, &["SET", &b, "2"]);
        assert_eq!(call(&mut c, &["MULTI"]), "+OK\r\n");
        call(&mut c, &["SET", &a, "3"]);
        call(&mut c, &["SET", &b, "3"]);
        assert_eq!(call(&mut c, &["EXEC"]), "*2\r\n+OK\r\n+OK\r\n");
    }
}

/// Inside a transaction, MGET, MSET, DEL, UNLINK, EXISTS and TOUCH over keys of several
/// shards split by shard as outside one, and DBSIZE, KEYS, FLUSHDB... answer for every
/// shard, with every shard they reach held: the replies are one server's, and a reader's
/// MULTI MGET a b EXEC never sees half of a writer's transaction.
#[test]
fn transactions_split_commands_over_several_shards() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let keys = key_per_shard("split");
    let (a, b) = (keys[0].clone(), keys[2].clone());
    assert_never_half_seen(
        &srv,
        &a,
        &b,
        "transaction",
        incr_both_in_a_transaction,
        |c, a, b| {
            let exec = transaction(c, &[&[b"MGET", a.as_bytes(), b.as_bytes()]]);
            exec.strip_prefix("*1\r\n")
                .unwrap_or_else(|| panic!("{exec}"))
                .to_string()
        },
    );
    let mut c = srv.connect();
    assert_eq!(call(&mut c, &["FLUSHALL"]), "+OK\r\n");
    let k: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let exec = transaction(
        &mut c,
        &[
            &[b"MSET", k[0], b"0", k[1], b"1", k[2], b"2", k[3], b"3"],
            &[b"MGET", k[3], b"nope", k[0], k[2]],
            &[b"EXISTS", k[0], k[1], b"nope", k[0]],
            &[b"DBSIZE"],
            &[b"KEYS", b"*"],
            &[b"DEL", k[0], k[1], k[2]],
            &[b"TOUCH", k[3], k[0]],
            &[b"UNLINK", k[3], k[1]],
            &[b"MSET", k[1], b"x"],
            &[b"FLUSHDB"],
            &[b"DBSIZE"],
        ],
    );
    let Reply::Array(v) = common::parse_reply(exec.as_bytes()) else {
        panic!("{exec}")
    };
    let Reply::Array(mut listed) = v[4].clone() else {
        panic!("{exec}")
    };
    listed.sort_by_key(|r| format!("{r:?}"));
    let mut all: Vec<Reply> = keys.iter().map(|k| Reply::bulk(k)).collect();
    all.sort_by_key(|r| format!("{r:?}"));
    assert_eq!(listed, all, "{exec}");
    let mut v = v;
    v.remove(4);
    assert_eq!(
        v,
        vec![
            Reply::Simple("OK".into()),
            Reply::Array(vec![
                Reply::bulk("3"),
                Reply::Nil,
                Reply::bulk("0"),
                Reply::bulk("2")
            ]),
            Reply::Int(3),
            Reply::Int(4),
            Reply::Int(3),
            Reply::Int(1),
            Reply::Int(1),
            Reply::Simple("OK".into()),
            Reply::Simple("OK".into()),
            Reply::Int(0),
        ],
        "{exec}"
    );
    assert_eq!(call(&mut c, &["DBSIZE"]), ":0\r\n");
    // A queued command that fails on one shard's part fails as a whole, and the rest of the
    // transaction still runs (as Redis runs every command of EXEC).
    assert_eq!(call(&mut c, &["SET", &keys[1], "v"]), "+OK\r\n");
    assert_eq!(call(&mut c, &["LPUSH", &keys[2], "l"]), ":1\r\n");
    let exec = transaction(
        &mut c,
        &[
            &[b"MGET", k[1], k[2]],
            &[b"SET", k[3], b"after"],
            &[b"CONFIG", b"SET", b"maxmemory-samples", b"nine"],
        ],
    );
    assert!(
        exec.starts_with("*3\r\n*2\r\n$1\r\nv\r\n$-1\r\n+OK\r\n-ERR CONFIG SET failed"),
        "{exec}"
    );
    assert_eq!(call(&mut c, &["GET", &keys[3]]), "$5\r\nafter\r\n");
    // XREAD and XREADGROUP over streams of several shards: a part per shard, merged in
    // request order; BLOCK does not block inside MULTI (`$` then has nothing after it).
    assert_eq!(call(&mut c, &["FLUSHALL"]), "+OK\r\n");
    let exec = transaction(
        &mut c,
        &[
            &[b"XADD", k[0], b"1-1", b"f", b"a"],
            &[b"XADD", k[1], b"1-1", b"f", b"b"],
            &[b"XREAD", b"STREAMS", k[1], k[2], k[0], b"0", b"0", b"0"],
            &[b"XREAD", b"BLOCK", b"0", b"STREAMS", k[0], k[1], b"$", b"$"],
            &[
                b"XREADGROUP",
                b"GROUP",
                b"g",
                b"c",
                b"STREAMS",
                k[0],
                k[1],
                b">",
                b">",
            ],
            &[b"XREAD", b"STREAMS", k[0], k[1], b"0"],
        ],
    );
    let Reply::Array(v) = common::parse_reply(exec.as_bytes()) else {
        panic!("{exec}")
    };
    assert_eq!(v.len(), 6, "{exec}");
    let Reply::Array(read) = &v[2] else {
        panic!("{exec}")
    };
    let streams: Vec<Reply> = read
        .iter()
        .map(|pair| match pair {
            Reply::Array(p) => p[0].clone(),
            other => panic!("{other:?} in {exec}"),
        })
        .collect();
    assert_eq!(
        streams,
        vec![Reply::bulk(&keys[1]), Reply::bulk(&keys[0])],
        "{exec}"
    );
    assert_eq!(v[3], Reply::Nil, "{exec}");
    assert!(
        matches!(&v[4], Reply::Err(e) if e.starts_with("NOGROUP No such key")),
        "{exec}"
    );
    assert!(
        matches!(&v[5], Reply::Err(e) if e.starts_with("ERR Unbalanced XREAD")),
        "{exec}"
    );
    // SCAN and RANDOMKEY inside a transaction: a SCAN step walks the shard its cursor names
    // and gives the cursor of the next; RANDOMKEY gives a key of any shard.
    assert_eq!(call(&mut c, &["FLUSHALL"]), "+OK\r\n");
    for key in &keys {
        assert_eq!(call(&mut c, &["SET", key, "v"]), "+OK\r\n");
    }
    let all: Vec<Reply> = keys.iter().map(|k| Reply::bulk(k)).collect();
    let mut cursor = "0".to_string();
    let mut seen: Vec<Reply> = Vec::new();
    for _ in 0..10 {
        let exec = transaction(
            &mut c,
            &[
                &[b"SCAN", cursor.as_bytes(), b"COUNT", b"100"],
                &[b"RANDOMKEY"],
            ],
        );
        let Reply::Array(v) = common::parse_reply(exec.as_bytes()) else {
            panic!("{exec}")
        };
        let Reply::Array(step) = &v[0] else {
            panic!("{exec}")
        };
        let (Reply::Bulk(next), Reply::Array(found)) = (&step[0], &step[1]) else {
            panic!("{exec}")
        };
        assert!(all.contains(&v[1]), "{exec}");
        seen.extend(found.iter().cloned());
        cursor = String::from_utf8_lossy(next).into_owned();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(cursor, "0");
    seen.sort_by_key(|r| format!("{r:?}"));
    let mut want = all.clone();
    want.sort_by_key(|r| format!("{r:?}"));
    assert_eq!(seen, want);
    // On an empty keyspace, and with a cursor that is not one.
    assert_eq!(call(&mut c, &["FLUSHALL"]), "+OK\r\n");
    assert_eq!(transaction(&mut c, &[&[b"RANDOMKEY"]]), "*1\r\n$-1\r\n");
    assert_eq!(
        transaction(&mut c, &[&[b"SCAN", b"0"]]),
        "*1\r\n*2\r\n$1\r\n0\r\n*0\r\n"
    );
    assert_eq!(
        transaction(&mut c, &[&[b"SCAN", b"x"]]),
        "*1\r\n-ERR invalid cursor\r\n"
    );
}

/// XREAD and XREADGROUP over streams of several shards answer as one server: the streams
/// with entries in request order, the null when none has any; BLOCK waits on all of them (a
/// write to any wakes it, `$` is each stream's last ID when the command arrived), ends at
/// its timeout or by CLIENT UNBLOCK; XREADGROUP's `>` delivers each entry once.
#[test]
fn stream_reads_across_shards() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let keys = key_per_shard("xs");
    let mut c = srv.connect();
    for (i, k) in keys.iter().enumerate() {
        let id = format!("{}-1", i + 1);
        assert_eq!(call(&mut c, &["XADD", k, &id, "f", "v"]), common::bulk(&id));
    }
    let stream_keys = |reply: &str| -> Vec<Reply> {
        let Reply::Array(v) = common::parse_reply(reply.as_bytes()) else {
            panic!("{reply}")
        };
        v.into_iter()
            .map(|pair| match pair {
                Reply::Array(p) => p[0].clone(),
                other => panic!("{other:?} in {reply}"),
            })
            .collect()
    };
    let got = call(
        &mut c,
        &[
            "XREAD", "COUNT", "1", "STREAMS", &keys[3], &keys[0], &keys[2], "nope", &keys[1], "0",
            "0", "0", "0", "0",
        ],
    );
    assert_eq!(
        stream_keys(&got),
        [3, 0, 2, 1].map(|i| Reply::bulk(&keys[i])).to_vec(),
        "{got}"
    );
    assert_eq!(
        call(
            &mut c,
            &["XREAD", "STREAMS", &keys[0], &keys[1], "9-9", "9-9"]
        ),
        "*-1\r\n"
    );
    assert!(
        call(&mut c, &["XREAD", "STREAMS", &keys[0], &keys[1], "0"]).starts_with("-ERR Unbalanced")
    );
    // BLOCK with `$`: an entry added to any of its streams ends the wait with that stream.
    let mut r = srv.connect();
    r.send_cmd(&[
        b"XREAD",
        b"BLOCK",
        b"0",
        b"STREAMS",
        keys[0].as_bytes(),
        keys[2].as_bytes(),
        b"$",
        b"$",
    ]);
    blocked(&mut c, 1);
    call(&mut c, &["XADD", &keys[2], "100-1", "f", "w"]);
    let got = s(&r.read_reply());
    assert_eq!(stream_keys(&got), vec![Reply::bulk(&keys[2])], "{got}");
    assert!(got.contains("100-1") && !got.contains("3-1"), "{got}");
    // CLIENT UNBLOCK ends it with Redis's error; a timeout with the null.
    let id = r.int(&["CLIENT", "ID"]).to_string();
    r.send_cmd(&[
        b"XREAD",
        b"BLOCK",
        b"0",
        b"STREAMS",
        keys[0].as_bytes(),
        keys[1].as_bytes(),
        b"$",
        b"$",
    ]);
    blocked(&mut c, 1);
    assert_eq!(call(&mut c, &["CLIENT", "UNBLOCK", &id, "ERROR"]), ":1\r\n");
    assert_eq!(
        s(&r.read_reply()),
        "-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n"
    );
    assert_eq!(
        call(
            &mut r,
            &[
                "XREAD", "BLOCK", "50", "STREAMS", &keys[0], &keys[1], "$", "$"
            ]
        ),
        "*-1\r\n"
    );
    // XREADGROUP: `>` delivers each stream's entries once, across every shard.
    for k in &keys {
        assert_eq!(call(&mut c, &["XGROUP", "CREATE", k, "g", "0"]), "+OK\r\n");
    }
    let mut group = vec!["XREADGROUP", "GROUP", "g", "c1", "STREAMS"];
    group.extend(keys.iter().map(String::as_str));
    group.extend([">"; 4]);
    let got = call(&mut c, &group);
    assert_eq!(
        stream_keys(&got),
        keys.iter().map(|k| Reply::bulk(k)).collect::<Vec<_>>(),
        "{got}"
    );
    assert_eq!(call(&mut c, &group), "*-1\r\n");
    // A group missing on one stream: Redis's NOGROUP for that stream.
    assert!(
        call(
            &mut c,
            &[
                "XREADGROUP",
                "GROUP",
                "g",
                "c1",
                "STREAMS",
                &keys[0],
                "nope",
                ">",
                ">"
            ]
        )
        .starts_with("-NOGROUP No such key 'nope'")
    );
    // Blocked on new entries of every stream: woken by one on the last shard.
    let mut blocking: Vec<&[u8]> = vec![
        b"XREADGROUP",
        b"GROUP",
        b"g",
        b"c2",
        b"BLOCK",
        b"0",
        b"STREAMS",
    ];
    blocking.extend(keys.iter().map(|k| k.as_bytes()));
    blocking.extend([&b">"[..]; 4]);
    r.send_cmd(&blocking);
    blocked(&mut c, 1);
    call(&mut c, &["XADD", &keys[3], "200-1", "f", "z"]);
    let got = s(&r.read_reply());
    assert_eq!(stream_keys(&got), vec![Reply::bulk(&keys[3])], "{got}");
    assert!(got.contains("200-1"), "{got}");
    let pending = call(&mut c, &["XPENDING", &keys[3], "g"]);
    assert!(pending.starts_with("*4\r\n:2\r\n"), "{pending}");
}

/// Waits (at most 5 s) until INFO counts `n` blocked clients.
fn blocked(c: &mut Raw, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info = call(c, &["INFO", "clients"]);
        if info.contains(&format!("blocked_clients:{n}\r\n")) {
            return;
        }
        assert!(Instant::now() < deadline, "{info}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Rounds of two clients blocking on one key from different threads, in
/// `pubsub_and_blocking_pops_across_threads`.
const BLOCKED_ORDER_ROUNDS: usize = 50;

/// Rounds of each client in `assert_never_half_seen`.
const HALF_SEEN_ROUNDS: usize = 300;

/// Two clients each run `write` (which increments `a` and `b` together) `HALF_SEEN_ROUNDS`
/// times while a third runs `read` (which reads both together, answering an array of the
/// two) as often: no read sees `a` and `b` differ (a `what` seen half done), and both end at
/// twice the rounds.
fn assert_never_half_seen(
    srv: &Server,
    a: &str,
    b: &str,
    what: &str,
    write: fn(&mut Raw, &str, &str),
    read: fn(&mut Raw, &str, &str) -> String,
) {
    let port = srv.port;
    let writers: Vec<_> = (0..2)
        .map(|_| {
            let (a, b) = (a.to_string(), b.to_string());
            std::thread::spawn(move || {
                let mut w = Raw::connect(port);
                for _ in 0..HALF_SEEN_ROUNDS {
                    write(&mut w, &a, &b);
                }
            })
        })
        .collect();
    let mut r = srv.connect();
    let mut seen = 0;
    for _ in 0..HALF_SEEN_ROUNDS {
        let got = read(&mut r, a, b);
        let Reply::Array(v) = common::parse_reply(got.as_bytes()) else {
            panic!("{got}")
        };
        assert_eq!(v.len(), 2, "{got}");
        assert_eq!(v[0], v[1], "a {what} saw half of another: {got}");
        if v[0] != Reply::Nil {
            seen += 1;
        }
    }
    for w in writers {
        w.join().expect("writer");
    }
    assert!(seen > 0);
    let total = common::bulk(&(2 * HALF_SEEN_ROUNDS).to_string());
    assert_eq!(s(&call_raw(&mut r, &["GET", a])), total);
    assert_eq!(s(&call_raw(&mut r, &["GET", b])), total);
}

/// A writer for `assert_never_half_seen`: MULTI INCR a INCR b EXEC.
fn incr_both_in_a_transaction(c: &mut Raw, a: &str, b: &str) {
    let exec = transaction(c, &[&[b"INCR", a.as_bytes()], &[b"INCR", b.as_bytes()]]);
    assert!(exec.starts_with("*2\r\n:"), "{exec}");
}

/// MULTI, `cmds` and EXEC in one write; EXEC's reply.
fn transaction(c: &mut Raw, cmds: &[&[&[u8]]]) -> String {
    let mut pipe = common::cmd(&[b"MULTI"]);
    for args in cmds {
        pipe.extend(common::cmd(args));
    }
    pipe.extend(common::cmd(&[b"EXEC"]));
    c.send(&pipe);
    for _ in 0..=cmds.len() {
        c.read_reply();
    }
    s(&c.read_reply())
}

/// One MSET setting each of `keys` to its own name.
fn set_to_their_names(c: &mut Raw, keys: &[String]) {
    let mut mset = vec!["MSET"];
    for k in keys {
        mset.push(k);
        mset.push(k);
    }
    assert_eq!(call(c, &mset), "+OK\r\n");
}

fn call_raw(c: &mut Raw, args: &[&str]) -> Vec<u8> {
    let v: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.call(&v)
}

#[test]
fn mixed_slot_pipelines_keep_their_order() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let mut c = srv.connect();
    // 2000 commands in one write: writes and reads of 50 keys over every shard, SELECT and
    // HELLO in the middle (they apply to the commands after them).
    let mut pipe = Vec::new();
    let mut expected = Vec::new();
    let mut model = std::collections::HashMap::<String, i64>::new();
    for i in 0..2000u32 {
        let k = format!("p{}", i % 50);
        if i == 1000 {
            pipe.extend(common::cmd(&[b"SELECT", b"2"]));
            expected.push("+OK\r\n".to_string());
            model.clear();
        }
        if i % 3 == 0 {
            pipe.extend(common::cmd(&[b"GET", k.as_bytes()]));
            expected.push(match model.get(&k) {
                Some(v) => format!("${}\r\n{v}\r\n", v.to_string().len()),
                None => "$-1\r\n".to_string(),
            });
        } else {
            pipe.extend(common::cmd(&[b"INCR", k.as_bytes()]));
            let v = model.entry(k).or_insert(0);
            *v += 1;
            expected.push(format!(":{v}\r\n"));
        }
    }
    c.send(&pipe);
    for (i, want) in expected.iter().enumerate() {
        let got = s(&c.read_reply());
        assert_eq!(&got, want, "reply {i}");
    }
    // Database 0 kept its values, database 2 has its own.
    assert_eq!(call(&mut c, &["DBSIZE"]), ":50\r\n");
    assert_eq!(call(&mut c, &["SELECT", "0"]), "+OK\r\n");
    assert_eq!(call(&mut c, &["DBSIZE"]), ":50\r\n");
}

#[test]
fn scatter_gather_and_crossslot() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let mut c = srv.connect();
    let keys = key_per_shard("sg");
    set_to_their_names(&mut c, &keys);
    let mut mget = vec!["MGET"];
    mget.extend(keys.iter().map(String::as_str));
    mget.insert(2, "missing");
    let want: Vec<Reply> = std::iter::once(Reply::bulk(&keys[0]))
        .chain(std::iter::once(Reply::Nil))
        .chain(keys[1..].iter().map(|k| Reply::bulk(k)))
        .collect();
    assert_eq!(c.reply(&mget), Reply::Array(want));
    let mut exists = vec!["EXISTS"];
    exists.extend(keys.iter().map(String::as_str));
    exists.push(&keys[0]);
    assert_eq!(call(&mut c, &exists), ":5\r\n");
    let mut touch = vec!["TOUCH", "nope"];
    touch.extend(keys.iter().map(String::as_str));
    assert_eq!(call(&mut c, &touch), ":4\r\n");
    assert_eq!(
        call(&mut c, &["UNLINK", &keys[0], &keys[1], "nope"]),
        ":2\r\n"
    );
    assert_eq!(
        call(&mut c, &["DEL", &keys[2], &keys[3], &keys[0]]),
        ":2\r\n"
    );
    assert_eq!(call(&mut c, &["DBSIZE"]), ":0\r\n");
    // Commands whose keys must share a slot: Redis Cluster's exact text.
    let cross = "-CROSSSLOT Keys in request don't hash to the same slot\r\n";
    // (LMOVE, RPOPLPUSH and their blocking forms between two shards run:
    // `list_moves_across_shards_like_redis`.)
    // SORT with patterns is coordinated across shards (tests/sort_shards.rs); its STORE
    // destination may be on another shard.
    assert_eq!(call(&mut c, &["SORT", &keys[0], "BY", "w_*"]), "*0\r\n");
    assert_eq!(
        call(&mut c, &["SORT", &keys[0], "STORE", &keys[1]]),
        ":0\r\n"
    );
    // The same commands on keys of one shard run.
    assert_eq!(
        call(&mut c, &["MSETNX", "{z}a", "1", "{z}b", "2"]),
        ":1\r\n"
    );
    assert_eq!(call(&mut c, &["RENAME", "{z}a", "{z}c"]), "+OK\r\n");
    // A queued command over two shards that no shard can run with the others held flags
    // the transaction; EXEC then aborts it (MIGRATE of keys of two shards, to loopback).
    assert_eq!(call(&mut c, &["MULTI"]), "+OK\r\n");
    let migrate = [
        "MIGRATE",
        "127.0.0.1",
        "1",
        "",
        "0",
        "100",
        "KEYS",
        &keys[0],
        &keys[1],
    ];
    assert_eq!(call(&mut c, &migrate), cross);
    assert_eq!(
        call(&mut c, &["EXEC"]),
        "-EXECABORT Transaction discarded because of previous errors.\r\n"
    );
    // Commands that each name one shard, but different ones, with one that acts on the
    // connection and changes how the commands after it run: EXEC refuses the transaction
    // with CROSSSLOT and runs none of it (without it, the transaction runs across the
    // shards: `transactions_across_shards_are_atomic`).
    assert_eq!(call(&mut c, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut c, &["SET", &keys[0], "1"]), "+QUEUED\r\n");
    assert_eq!(call(&mut c, &["SET", &keys[1], "1"]), "+QUEUED\r\n");
    assert_eq!(call(&mut c, &["CLIENT", "TRACKING", "ON"]), "+QUEUED\r\n");
    assert_eq!(call(&mut c, &["EXEC"]), cross);
    assert_eq!(call(&mut c, &["EXISTS", &keys[0]]), ":0\r\n");
    assert_eq!(call(&mut c, &["EXEC"]), "-ERR EXEC without MULTI\r\n");
    let info = call(&mut c, &["INFO", "errorstats"]);
    assert!(info.contains("errorstat_CROSSSLOT:count="), "{info}");
    // One that reads or sets only the connection's own state (CLIENT SETNAME, GETNAME,
    // ID...) runs on the connection after the others, its reply in its place.
    assert_eq!(call(&mut c, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut c, &["SET", &keys[0], "1"]), "+QUEUED\r\n");
    assert_eq!(call(&mut c, &["CLIENT", "SETNAME", "x"]), "+QUEUED\r\n");
    assert_eq!(call(&mut c, &["SET", &keys[1], "2"]), "+QUEUED\r\n");
    assert_eq!(call(&mut c, &["CLIENT", "GETNAME"]), "+QUEUED\r\n");
    assert_eq!(
        call(&mut c, &["CLIENT", "SETNAME", "bad name"]),
        "+QUEUED\r\n"
    );
    assert_eq!(
        call(&mut c, &["EXEC"]),
        "*5\r\n+OK\r\n+OK\r\n+OK\r\n$1\r\nx\r\n-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
    );
    assert_eq!(call(&mut c, &["CLIENT", "GETNAME"]), "$1\r\nx\r\n");
    assert_eq!(call(&mut c, &["GET", &keys[1]]), "$1\r\n2\r\n");
}

#[test]
fn transactions_and_watch_on_another_shard() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let mut a = srv.connect();
    let mut b = srv.connect();
    for k in key_per_shard("tx") {
        // One shard per transaction, whichever thread the connection is on.
        assert_eq!(call(&mut a, &["WATCH", &k]), "+OK\r\n");
        assert_eq!(call(&mut a, &["MULTI"]), "+OK\r\n");
        assert_eq!(call(&mut a, &["INCR", &k]), "+QUEUED\r\n");
        assert_eq!(call(&mut a, &["PING"]), "+QUEUED\r\n");
        assert_eq!(call(&mut a, &["SELECT", "1"]), "+QUEUED\r\n");
        assert_eq!(call(&mut a, &["EXEC"]), "*3\r\n:1\r\n+PONG\r\n+OK\r\n");
        // SELECT inside the transaction applies to the connection.
        assert_eq!(call(&mut a, &["EXISTS", &k]), ":0\r\n");
        assert_eq!(call(&mut a, &["SELECT", "0"]), "+OK\r\n");
        // A write by another connection to a watched key fails the transaction.
        assert_eq!(call(&mut a, &["WATCH", &k]), "+OK\r\n");
        assert_eq!(call(&mut b, &["INCR", &k]), ":2\r\n");
        assert_eq!(call(&mut a, &["MULTI"]), "+OK\r\n");
        assert_eq!(call(&mut a, &["INCR", &k]), "+QUEUED\r\n");
        assert_eq!(call(&mut a, &["EXEC"]), "*-1\r\n");
        assert_eq!(call(&mut a, &["GET", &k]), "$1\r\n2\r\n");
        // UNWATCH drops the watch on that shard: a later write does not fail EXEC.
        assert_eq!(call(&mut a, &["WATCH", &k]), "+OK\r\n");
        assert_eq!(call(&mut a, &["UNWATCH"]), "+OK\r\n");
        assert_eq!(call(&mut b, &["INCR", &k]), ":3\r\n");
        assert_eq!(call(&mut a, &["MULTI"]), "+OK\r\n");
        assert_eq!(call(&mut a, &["INCR", &k]), "+QUEUED\r\n");
        assert_eq!(call(&mut a, &["EXEC"]), "*1\r\n:4\r\n");
    }
    // One WATCH over keys of two shards: each watches its own (`transactions_across_shards_
    // are_atomic` runs the transaction).
    let keys = key_per_shard("w");
    assert_eq!(call(&mut a, &["WATCH", &keys[0], &keys[1]]), "+OK\r\n");
    assert_eq!(call(&mut a, &["UNWATCH"]), "+OK\r\n");
}

/// A script that declares no key runs where the keys it reaches are, as on one Redis: on the
/// connection's shard first, then on the shard of the first key it reached there when it did
/// nothing else, and when it reaches keys of several shards before it does anything, once
/// more with every shard held. One that wrote or published before it reached another
/// shard's key gets Redis Cluster's error.
#[test]
fn scripts_without_declared_keys_run_on_their_keys_shard() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let mut a = srv.connect();
    let keys = key_per_shard("sk");
    for k in &keys {
        let script = format!("redis.call('set','{k}','v') return redis.call('get','{k}')");
        assert_eq!(call(&mut a, &["EVAL", &script, "0"]), "$1\r\nv\r\n", "{k}");
        let script = format!("redis.pcall('randomkey') return redis.pcall('incr','{k}:n')");
        assert_eq!(call(&mut a, &["EVAL", &script, "0"]), ":1\r\n", "{k}");
        assert_eq!(call(&mut a, &["GET", &format!("{k}:n")]), "$1\r\n1\r\n");
    }
    let non_local = "Script attempted to access a non local key in a cluster node";
    // Keys of several shards in one script that reads them before it writes: it runs again
    // with every shard held, as on one server, whichever shard it began on.
    for _ in 0..4 {
        let mut c = srv.connect();
        let script = format!(
            "redis.call('get','{}') return redis.call('get','{}')",
            keys[0], keys[1]
        );
        assert_eq!(call(&mut c, &["EVAL", &script, "0"]), "$1\r\nv\r\n");
        let script = format!(
            "local v = redis.call('get','{}') .. redis.call('get','{}') \
             redis.call('set','{}', v) return redis.call('get','{}')",
            keys[0], keys[1], keys[3], keys[2]
        );
        assert_eq!(call(&mut c, &["EVAL", &script, "0"]), "$1\r\nv\r\n");
        assert_eq!(call(&mut c, &["GET", &keys[3]]), "$2\r\nvv\r\n");
        call(&mut c, &["SET", &keys[3], "v"]);
    }
    // A script that wrote before it reached another shard's key is not run twice.
    for k in &keys {
        let script = format!(
            "redis.call('incr','{k}:w') for _, o in ipairs(ARGV) do redis.call('get', o) end return 1"
        );
        let mut argv = vec!["EVAL", script.as_str(), "0"];
        argv.extend(keys.iter().map(String::as_str));
        let r = call(&mut a, &argv);
        assert!(r.contains(non_local), "{r}");
        assert_eq!(call(&mut a, &["GET", &format!("{k}:w")]), "$1\r\n1\r\n");
    }
    // Functions alike.
    let lib = "#!lua name=lib\nredis.register_function('touch', function(keys, args) return redis.call('set', args[1], 'f') end)";
    assert_eq!(call(&mut a, &["FUNCTION", "LOAD", lib]), "$3\r\nlib\r\n");
    for k in &keys {
        assert_eq!(call(&mut a, &["FCALL", "touch", "0", k]), "+OK\r\n", "{k}");
        assert_eq!(call(&mut a, &["GET", k]), "$1\r\nf\r\n");
    }
}

/// LMOVE and RPOPLPUSH between two shards answer as Redis (nil for a missing source whatever
/// the destination, WRONGTYPE for either side, the element moved, the source deleted when
/// emptied), serve a client blocked on the destination, and move every element exactly once
/// while other clients move them back.
#[test]
fn list_moves_across_shards_like_redis() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let keys = key_per_shard("lm");
    let mut script: Vec<Vec<String>> = Vec::new();
    let mut add = |v: &[&str]| script.push(v.iter().map(|x| x.to_string()).collect());
    let (a, b, str_key) = (keys[0].as_str(), keys[1].as_str(), keys[2].as_str());
    add(&["SET", str_key, "s"]);
    add(&["LMOVE", a, b, "LEFT", "RIGHT"]);
    add(&["LMOVE", a, str_key, "LEFT", "RIGHT"]);
    add(&["RPUSH", a, "1", "2", "3", "4"]);
    add(&["LMOVE", a, str_key, "LEFT", "RIGHT"]);
    add(&["LMOVE", str_key, b, "LEFT", "RIGHT"]);
    add(&["LMOVE", a, b, "UP", "RIGHT"]);
    add(&["LMOVE", a, b, "LEFT", "RIGHT"]);
    add(&["LMOVE", a, b, "RIGHT", "LEFT"]);
    add(&["RPOPLPUSH", a, b]);
    add(&["LRANGE", b, "0", "-1"]);
    add(&["LMOVE", a, b, "LEFT", "LEFT"]);
    add(&["EXISTS", a]);
    add(&["LRANGE", b, "0", "-1"]);
    add(&["RPOPLPUSH", b, a]);
    add(&["LRANGE", a, "0", "-1"]);
    // The blocking forms: at once when the source has an element, nil at their timeout,
    // their argument errors first.
    add(&["BLMOVE", b, a, "RIGHT", "LEFT", "0"]);
    add(&["BRPOPLPUSH", b, a, "0"]);
    add(&["LRANGE", a, "0", "-1"]);
    add(&["BLMOVE", b, a, "RIGHT", "LEFT", "0.05"]);
    add(&["BRPOPLPUSH", b, a, "0.05"]);
    add(&["BLMOVE", b, a, "RIGHT", "UP", "0"]);
    add(&["BLMOVE", b, a, "RIGHT", "LEFT", "-1"]);
    add(&["BRPOPLPUSH", b, a, "x"]);
    add(&["BRPOPLPUSH", a, str_key, "0"]);
    assert_like_redis(&srv, &script, 1);
    // A client blocked on the destination is served by the move.
    let mut c = srv.connect();
    call(&mut c, &["DEL", a, b]);
    let mut waiter = srv.connect();
    waiter.send(&common::cmd(&[b"BLPOP", b.as_bytes(), b"5"]));
    blocked(&mut c, 1);
    call(&mut c, &["RPUSH", a, "x"]);
    assert_eq!(call(&mut c, &["RPOPLPUSH", a, b]), "$1\r\nx\r\n");
    let got = s(&waiter.read_reply());
    assert_eq!(got, format!("*2\r\n${}\r\n{b}\r\n$1\r\nx\r\n", b.len()));
    // BLMOVE waits on its empty source until another client pushes there; CLIENT UNBLOCK
    // ends the wait with nil; a client that goes leaves nothing behind.
    call(&mut c, &["DEL", a, b]);
    let mut mover = srv.connect();
    let id = call(&mut mover, &["CLIENT", "ID"]);
    let id = id.trim_start_matches(':').trim_end().to_string();
    mover.send(&common::cmd(&[
        b"BLMOVE",
        a.as_bytes(),
        b.as_bytes(),
        b"LEFT",
        b"RIGHT",
        b"0",
    ]));
    blocked(&mut c, 1);
    assert_eq!(call(&mut c, &["RPUSH", a, "y"]), ":1\r\n");
    assert_eq!(s(&mover.read_reply()), "$1\r\ny\r\n");
    assert_eq!(call(&mut c, &["LRANGE", b, "0", "-1"]), "*1\r\n$1\r\ny\r\n");
    assert_eq!(call(&mut c, &["EXISTS", a]), ":0\r\n");
    mover.send(&common::cmd(&[
        b"BRPOPLPUSH",
        a.as_bytes(),
        b.as_bytes(),
        b"0",
    ]));
    blocked(&mut c, 1);
    assert_eq!(call(&mut c, &["CLIENT", "UNBLOCK", &id]), ":1\r\n");
    assert_eq!(s(&mover.read_reply()), "*-1\r\n");
    assert!(call(&mut c, &["INFO", "clients"]).contains("blocked_clients:0\r\n"));
    // Elements moved back and forth by three clients: each is in exactly one list after.
    const N: usize = 200;
    call(&mut c, &["DEL", a, b]);
    let items: Vec<String> = (0..N).map(|i| i.to_string()).collect();
    let mut push = vec!["RPUSH", a];
    push.extend(items.iter().map(String::as_str));
    call(&mut c, &push);
    let port = srv.port;
    let movers: Vec<_> = (0..3)
        .map(|i| {
            let (from, to) = if i % 2 == 0 { (a, b) } else { (b, a) };
            let (from, to) = (from.to_string(), to.to_string());
            std::thread::spawn(move || {
                let mut m = Raw::connect(port);
                for _ in 0..N {
                    call(&mut m, &["LMOVE", &from, &to, "LEFT", "RIGHT"]);
                }
            })
        })
        .collect();
    for m in movers {
        m.join().expect("mover");
    }
    let mut seen: Vec<String> = Vec::new();
    for k in [a, b] {
        if let Reply::Array(v) =
            common::parse_reply(call(&mut c, &["LRANGE", k, "0", "-1"]).as_bytes())
        {
            for r in v {
                if let Reply::Bulk(x) = r {
                    seen.push(String::from_utf8_lossy(&x).to_string());
                }
            }
        }
    }
    seen.sort_by_key(|x| x.parse::<usize>().unwrap_or(usize::MAX));
    assert_eq!(seen, items, "an element was lost or doubled");
}

/// A script whose declared keys are on several shards runs on the main port, atomically: its
/// calls reach each key's shard (MGET, MSET, DEL... over several of them included), another
/// client's script never sees half of one, a call that reaches an undeclared shard is
/// refused inside the script, and a
/// script that loops is answered BUSY on every thread and killed from any of them.
/// Inside a script whose keys are on several shards (all held for it), and queued in a
/// transaction over several shards, the list moves, RENAME, RENAMENX, SMOVE, MSETNX, the pops
/// over several keys and the commands that read keys of several shards and write one answer
/// as on one Redis:
/// source here or on a held shard, destination here, there or on a third one, WRONGTYPE
/// destinations popping nothing, ZUNIONSTORE's `numkeys` keys (once read as if missing on the
/// script's shard), SORT ... STORE, and a script without declared keys.
#[test]
fn script_calls_over_keys_of_several_shards_like_redis() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let k = key_per_shard("sk");
    let l = key_per_shard("sl");
    let h = key_per_shard("sh");
    let mut script: Vec<Vec<String>> = Vec::new();
    let mut add = |v: &[&str]| script.push(v.iter().map(|x| x.to_string()).collect());
    let mv = "return redis.call('rpoplpush', KEYS[1], KEYS[2])";
    let lmove = "return redis.call('lmove', KEYS[2], KEYS[3], ARGV[1], ARGV[2])";
    add(&["RPUSH", &k[0], "1", "2", "3", "4", "5"]);
    add(&["SADD", &k[1], "x", "y"]);
    add(&["SADD", &k[2], "y", "z"]);
    add(&["SET", &k[3], "str"]);
    // The source on the script's shard, then on a held one with the destination here.
    add(&["EVAL", mv, "2", &k[0], &l[1]]);
    add(&["EVAL", mv, "2", &l[1], &k[0]]);
    add(&["EVAL", lmove, "3", &k[3], &k[0], &l[2], "LEFT", "RIGHT"]);
    add(&["EVAL", lmove, "3", &l[2], &k[0], &l[2], "RIGHT", "LEFT"]);
    add(&["EVAL", lmove, "3", &l[3], &k[0], &l[2], "UP", "LEFT"]);
    // Destinations of another type: nothing popped.
    add(&["EVAL", mv, "2", &k[0], &k[1]]);
    add(&["EVAL", lmove, "3", &k[2], &k[0], &k[3], "LEFT", "LEFT"]);
    // Sources missing or of another type.
    add(&["EVAL", mv, "2", &h[1], &k[0]]);
    add(&["EVAL", mv, "2", &l[0], &k[3]]);
    add(&["EVAL", mv, "2", &k[0], &k[3]]);
    add(&["LRANGE", &k[0], "0", "-1"]);
    add(&["LRANGE", &l[1], "0", "-1"]);
    add(&["LRANGE", &l[2], "0", "-1"]);
    // Sets and sorted sets of several shards combined into a key of another.
    let store = "return redis.call('sunionstore', KEYS[1], KEYS[2], KEYS[3])";
    add(&["EVAL", store, "3", &h[3], &k[1], &k[2]]);
    add(&["SMEMBERS", &h[3]]);
    let zstore = "return redis.call('zunionstore', KEYS[1], 2, KEYS[2], KEYS[3], 'WEIGHTS', 2, 3)";
    add(&["EVAL", zstore, "3", &h[0], &k[1], &k[2]]);
    add(&["ZRANGE", &h[0], "0", "-1", "WITHSCORES"]);
    let zunion = "return redis.call('zunion', 2, KEYS[1], KEYS[2], 'WITHSCORES')";
    add(&["EVAL", zunion, "2", &k[1], &k[2]]);
    add(&["EVAL", zunion, "2", &k[2], &k[1]]);
    let copy = "return redis.call('copy', KEYS[2], KEYS[1])";
    add(&["EVAL", copy, "2", &l[3], &k[2]]);
    add(&["SMEMBERS", &l[3]]);
    let sort = "return redis.call('sort', KEYS[1], 'ALPHA', 'STORE', KEYS[2])";
    add(&["EVAL", sort, "2", &k[1], &h[2]]);
    add(&["LRANGE", &h[2], "0", "-1"]);
    // No declared keys: rerun with every shard held.
    let keyless = "return redis.call('rpoplpush', ARGV[1], ARGV[2])";
    add(&["EVAL", keyless, "0", &k[0], &h[1]]);
    add(&["LRANGE", &h[1], "0", "-1"]);
    // A job queue's step: move a job, mark it in a hash of a third shard.
    let take = "local j = redis.call('rpoplpush', KEYS[1], KEYS[2]) \
                if j then redis.call('hset', KEYS[3], 'state', 'active') end return j";
    add(&["EVAL", take, "3", &k[0], &l[1], &l[0]]);
    add(&["EVAL", take, "3", &l[2], &l[1], &l[0]]);
    add(&["HGETALL", &l[0]]);
    add(&["LRANGE", &l[1], "0", "-1"]);
    // The same commands queued in a transaction over several shards.
    let m = key_per_shard("sm");
    let n = key_per_shard("sn");
    add(&["SET", &m[3], "str"]);
    add(&["SADD", &n[0], "x", "y"]);
    add(&["SADD", &n[1], "y", "z"]);
    add(&["MULTI"]);
    add(&["RPUSH", &m[0], "a", "b", "c"]);
    add(&["RPOPLPUSH", &m[0], &m[1]]);
    add(&["LMOVE", &m[1], &m[2], "LEFT", "RIGHT"]);
    add(&["LMOVE", &m[0], &m[3], "LEFT", "RIGHT"]);
    add(&["RPOPLPUSH", &m[3], &m[0]]);
    add(&["SUNIONSTORE", &n[2], &n[0], &n[1]]);
    add(&["SCARD", &n[2]]);
    add(&["ZUNIONSTORE", &n[3], "2", &n[0], &n[1], "WEIGHTS", "2", "3"]);
    add(&["ZRANGE", &n[3], "0", "-1", "WITHSCORES"]);
    add(&["SORT", &n[1], "ALPHA", "STORE", &m[1]]);
    add(&["COPY", &n[0], &m[2]]);
    add(&["EXEC"]);
    for k in &m[..3] {
        add(&["LRANGE", k, "0", "-1"]);
    }
    // RENAME, RENAMENX, SMOVE and MSETNX between shards, in a script and in a transaction.
    let r = key_per_shard("sr");
    let two = "return redis.call(ARGV[1], KEYS[1], KEYS[2])";
    let smove = "return redis.call('smove', KEYS[1], KEYS[2], ARGV[1])";
    let msetnx =
        "return redis.call('msetnx', KEYS[1], ARGV[1], KEYS[2], ARGV[1], KEYS[3], ARGV[1])";
    add(&["SET", &r[0], "v"]);
    add(&["PEXPIRE", &r[0], "100000"]);
    add(&["SADD", &r[2], "x", "y"]);
    add(&["EVAL", two, "2", &r[0], &r[1], "rename"]);
    add(&["EVAL", two, "2", &r[0], &r[1], "rename"]);
    add(&["EVAL", two, "2", &r[1], &r[2], "renamenx"]);
    add(&["EVAL", two, "2", &r[1], &r[3], "renamenx"]);
    add(&["GET", &r[3]]);
    add(&["EXISTS", &r[1]]);
    add(&["EVAL", smove, "2", &r[2], &r[0], "x"]);
    add(&["EVAL", smove, "2", &r[2], &r[0], "nope"]);
    add(&["EVAL", smove, "2", &r[2], &r[3], "y"]);
    add(&["EVAL", smove, "2", &h[2], &r[0], "y"]);
    add(&["SMEMBERS", &r[0]]);
    add(&["EVAL", msetnx, "3", &h[0], &h[1], &h[2], "1"]);
    add(&["EVAL", msetnx, "3", &k[1], &k[2], &r[1], "1"]);
    add(&["EXISTS", &r[1]]);
    add(&["MULTI"]);
    add(&["RENAME", &r[3], &r[1]]);
    add(&["SMOVE", &r[0], &r[2], "x"]);
    add(&["MSETNX", &r[3], "a", &m[0], "b"]);
    add(&["RENAMENX", &r[1], &r[0]]);
    add(&["RENAME", &r[3], &r[0]]);
    add(&["EXEC"]);
    add(&["MGET", &r[1], &r[3], &m[0]]);
    add(&["SMEMBERS", &r[2]]);
    // Pops over keys of several shards, and the blocking ones, which do not block here.
    let p = key_per_shard("sp");
    add(&["RPUSH", &p[1], "1", "2"]);
    add(&["ZADD", &p[2], "1", "x", "2", "y"]);
    add(&["SET", &p[3], "str"]);
    add(&["MULTI"]);
    add(&["BLPOP", &p[0], &p[1], "0"]);
    add(&["LMPOP", "2", &p[0], &p[1], "RIGHT", "COUNT", "5"]);
    add(&["BLPOP", &p[0], &p[1], "0"]);
    add(&["BZPOPMIN", &p[0], &p[2], "1"]);
    add(&["ZMPOP", "2", &p[0], &p[2], "MAX"]);
    add(&["RPUSH", &p[1], "3"]);
    add(&["BLMOVE", &p[1], &p[0], "LEFT", "LEFT", "0"]);
    add(&["BRPOPLPUSH", &p[0], &p[1], "0"]);
    add(&["BRPOPLPUSH", &p[0], &p[1], "-1"]);
    add(&["BLPOP", &p[0], &p[3], "0"]);
    add(&["LMPOP", "2", &p[0], &p[1], "UP"]);
    add(&["EXEC"]);
    add(&[
        "EVAL",
        "return redis.call('lmpop', 2, KEYS[1], KEYS[2], 'LEFT')",
        "2",
        &p[0],
        &p[1],
    ]);
    add(&[
        "EVAL",
        "return redis.call('lmpop', 2, KEYS[1], KEYS[2], 'LEFT')",
        "2",
        &p[0],
        &p[3],
    ]);
    assert_like_redis(&srv, &script, 2);
}

/// A script that declares keys of some shards and reaches a key of another one it did not
/// declare (a plain Redis allows it; Redis Cluster refuses it), or a SORT whose GET or BY
/// patterns form other shards' keys, runs as on one server: it stops before any effect and
/// runs again with every shard held. Compared with redis-server one command at a time from
/// connections on different threads, then as one pipeline (the commands after such a
/// script run after it), and the stopped run leaves no trace in INFO (Redis's suite checks
/// the counts of "Consistent eval error reporting").
#[test]
fn scripts_reach_undeclared_keys_of_other_shards_like_redis() {
    if !RedisRef::available() {
        eprintln!("redis-server not installed: skipped");
        return;
    }
    let srv = Server::start_with(&["--shards", SHARDS]);
    let k = key_per_shard("uk");
    let mut script: Vec<Vec<String>> = Vec::new();
    let mut add = |v: &[&str]| script.push(v.iter().map(|x| x.to_string()).collect());
    let get = "return redis.call('get', ARGV[1])";
    let copy =
        "redis.call('set', KEYS[1], redis.call('get', ARGV[1])) return redis.call('get', KEYS[1])";
    let incr = "return redis.call('incr', ARGV[1])";
    add(&["SET", &k[1], "one"]);
    add(&["SET", &k[2], "two"]);
    for (decl, undecl) in [(0, 1), (1, 2), (3, 2)] {
        add(&["EVAL", get, "1", &k[decl], &k[undecl]]);
        add(&["EVAL", copy, "1", &k[decl], &k[undecl]]);
        add(&["GET", &k[decl]]);
        add(&["SET", &k[undecl], &format!("v{decl}")]);
    }
    // A write to the undeclared key, and one after a caught error of another type.
    add(&["EVAL", incr, "1", &k[0], "counter"]);
    add(&["EVAL", incr, "1", &k[3], "counter"]);
    add(&["EVAL", incr, "1", &k[0], &k[1]]);
    add(&["GET", "counter"]);
    // Across shards already: a third shard's key.
    add(&[
        "EVAL",
        "return {redis.call('get', KEYS[1]), redis.call('get', KEYS[2]), redis.call('get', ARGV[1])}",
        "2",
        &k[0],
        &k[1],
        &k[2],
    ]);
    // Whole-keyspace commands from a script with declared keys.
    add(&["EVAL", "return redis.call('dbsize')", "1", &k[2]]);
    add(&["EVAL", "return #redis.call('keys', '*')", "1", &k[3]]);
    // SORT with GET and BY patterns forming keys of every shard.
    add(&["SADD", "myset", "a", "b", "c", "d"]);
    for (m, w) in [("a", "3"), ("b", "1"), ("c", "4"), ("d", "2")] {
        add(&["SET", &format!("w_{m}"), w]);
        add(&["HSET", &format!("h_{m}"), "f", &format!("hf{m}")]);
    }
    add(&["SET", "_:b", "got"]);
    let sort_get = "return redis.call('sort', KEYS[1], 'by', '_', 'get', '#', 'get', '_:*')";
    add(&["EVAL", sort_get, "1", "myset"]);
    let sort_by = "return redis.call('sort', KEYS[1], 'by', 'w_*', 'get', '#', 'get', 'h_*->f', 'get', 'w_*')";
    add(&["EVAL", sort_by, "1", "myset"]);
    let sort_store = "return redis.call('sort', KEYS[1], 'by', 'w_*', 'desc', 'store', KEYS[2])";
    add(&["EVAL", sort_store, "2", "myset", &k[1]]);
    add(&["LRANGE", &k[1], "0", "-1"]);
    add(&["MULTI"]);
    add(&["SORT", "myset", "BY", "w_*", "GET", "h_*->f"]);
    add(&[
        "SORT", "myset", "BY", "w_*", "GET", "w_*", "LIMIT", "1", "2", "DESC",
    ]);
    add(&["EXEC"]);
    assert_like_redis(&srv, &script, 2);

    // The same as one pipeline, from a connection on each thread, once its thread has seen
    // these scripts stop (below: their first stop in a pipeline).
    let reference = RedisRef::start();
    let mut pipeline = Vec::new();
    for cmd in &script {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        pipeline.extend_from_slice(&common::cmd(&args));
    }
    for _ in 0..4 {
        let mut replies = Vec::new();
        let mut m = srv.connect();
        run_script(&mut m, &script);
        for c in [&mut m, &mut reference.connect()] {
            call(c, &["FLUSHALL"]);
            c.send(&pipeline);
            let got: Vec<Vec<u8>> = script.iter().map(|_| c.read_reply()).collect();
            replies.push(got);
        }
        for ((cmd, m), r) in script.iter().zip(&replies[0]).zip(&replies[1]) {
            assert_eq!(
                String::from_utf8_lossy(m),
                String::from_utf8_lossy(r),
                "pipelined {cmd:?}"
            );
        }
    }

    // First calls of scripts no thread has seen stop: in a pipeline, one followed only by
    // commands of its own batch runs again there, on every thread; one followed by a
    // command that ran on another shard meanwhile answers Redis Cluster's error the first
    // time on its thread (nothing may run before it), then runs with every shard held.
    let mut stopped_first = 0;
    for (i, c) in (0..4)
        .map(|_| srv.connect())
        .enumerate()
        .collect::<Vec<_>>()
        .iter_mut()
    {
        let mut r = reference.connect();
        let body = format!("-- {i}\nreturn redis.call('get', ARGV[1])");
        let other = format!("-- another {i}\nreturn redis.call('get', ARGV[1])");
        for x in [&mut *c, &mut r] {
            call(x, &["SET", &k[1], "one"]);
        }
        let safe = [
            vec!["EVAL", body.as_str(), "1", &k[0], &k[1]],
            vec!["GET", &k[0]],
        ];
        let unsafe_first = [
            vec!["EVAL", other.as_str(), "1", &k[2], &k[1]],
            vec!["SET", &k[1], "changed"],
            vec!["GET", &k[3]],
        ];
        for (n, pipeline) in [&safe[..], &unsafe_first[..], &unsafe_first[..]]
            .iter()
            .enumerate()
        {
            let bytes: Vec<u8> = pipeline
                .iter()
                .flat_map(|cmd| {
                    let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
                    common::cmd(&args)
                })
                .collect();
            let mut got = Vec::new();
            for x in [&mut *c, &mut r] {
                call(x, &["SET", &k[1], "one"]);
                x.send(&bytes);
                got.push(
                    pipeline
                        .iter()
                        .map(|_| s(&x.read_reply()))
                        .collect::<Vec<_>>(),
                );
            }
            if n == 1 && got[0][0].contains("non local key") {
                // Its thread saw it stop first here: the rest ran as sent.
                assert_eq!(&got[0][1..], &got[1][1..]);
                stopped_first += 1;
            } else {
                assert_eq!(got[0], got[1], "connection {i}, pipeline {n}");
            }
        }
    }

    // Three of the four threads send the script to another shard's thread.
    assert!(stopped_first >= 3, "{stopped_first}");
    // Once one thread saw a script stop, every thread runs it with every shard held at once:
    // its first call in a mixed pipeline on a thread that never sent it runs as Redis's.
    let other = "-- another 0\nreturn redis.call('get', ARGV[1])";
    let mixed = [
        vec!["EVAL", other, "1", &k[2], &k[1]],
        vec!["SET", &k[1], "changed"],
        vec!["GET", &k[3]],
    ];
    let bytes: Vec<u8> = mixed
        .iter()
        .flat_map(|cmd| {
            let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
            common::cmd(&args)
        })
        .collect();
    for _ in 0..4 {
        let mut got = Vec::new();
        for x in [&mut srv.connect(), &mut reference.connect()] {
            call(x, &["SET", &k[1], "one"]);
            x.send(&bytes);
            got.push(mixed.iter().map(|_| s(&x.read_reply())).collect::<Vec<_>>());
        }
        assert_eq!(got[0], got[1]);
    }

    // Counted once, as on one server.
    let mut c = srv.connect();
    call(&mut c, &["SET", &k[1], "str"]);
    call(&mut c, &["CONFIG", "RESETSTAT"]);
    let geoadd = format!(
        "return redis.call('geoadd', '{}', 13.36, 38.11, 'Palermo')",
        k[1]
    );
    let e = call(&mut c, &["EVAL", &geoadd, "1", &k[0]]);
    assert!(e.starts_with("-WRONGTYPE"), "{e}");
    let info = call(&mut c, &["INFO", "ALL"]);
    for line in [
        "errorstat_WRONGTYPE:count=1",
        "total_error_replies:1",
        "cmdstat_geoadd:calls=1,",
        "cmdstat_eval:calls=1,",
    ] {
        assert!(info.contains(line), "{line} in {info}");
    }
    assert!(!info.contains("errorstat_ERR"), "{info}");
}

/// A list move queued in a transaction across shards is atomic with the transaction: a
/// reader's `MULTI LLEN a LLEN b GET n EXEC` (three shards) never sees an element in both
/// lists or in neither, nor the move without the counter the same transaction increments.
/// Scripts queued in a transaction reach keys they did not declare, of any shard, and the
/// whole keyspace, as in one Redis; so do they in a transaction of one shard. A command whose
/// `numkeys` is wrong answers its own error inside a transaction over several shards (it was
/// CROSSSLOT for the whole EXEC).
#[test]
fn scripts_and_bad_numkeys_in_transactions_like_redis() {
    if !RedisRef::available() {
        eprintln!("redis-server not installed: skipped");
        return;
    }
    let srv = Server::start_with(&["--shards", SHARDS]);
    let k = key_per_shard("tx");
    let mut script: Vec<Vec<String>> = Vec::new();
    let mut add = |v: &[&str]| script.push(v.iter().map(|x| x.to_string()).collect());
    let get = "return redis.call('get', ARGV[1])";
    let set_get = "redis.call('set', ARGV[1], 'w') return redis.call('get', ARGV[1])";
    add(&["SET", &k[0], "zero"]);
    add(&["SET", &k[1], "one"]);
    add(&["SET", &k[2], "two"]);
    // Several shards: keyless scripts, undeclared keys, the whole keyspace, bad numkeys.
    for cmd in [
        vec!["MULTI"],
        vec!["GET", &k[0]],
        vec!["GET", &k[1]],
        vec!["EVAL", "return 1", "0"],
        vec!["EVAL", get, "0", &k[2]],
        vec!["EVAL", get, "1", &k[0], &k[3]],
        vec!["EVAL", set_get, "1", &k[1], &k[3]],
        vec!["EVAL", "return redis.call('dbsize')", "0"],
        vec!["EVAL", "return #redis.call('keys', '*')", "1", &k[2]],
        vec!["LMPOP", "-1", &k[0], "LEFT"],
        vec!["SINTERCARD", "0", &k[0]],
        vec!["ZINTERCARD", "2", &k[0]],
        vec!["EXEC"],
        // One shard's keys, a script reaching another shard's.
        vec!["MULTI"],
        vec!["GET", &k[0]],
        vec!["EVAL", get, "1", &k[0], &k[2]],
        vec![
            "EVAL",
            "return redis.call('incr', ARGV[1])",
            "1",
            &k[0],
            "counter",
        ],
        vec!["EXEC"],
        // A keyless script alone.
        vec!["MULTI"],
        vec!["EVAL", get, "0", &k[1]],
        vec!["EXEC"],
        vec!["GET", &k[3]],
        vec!["GET", "counter"],
    ] {
        add(&cmd);
    }
    assert_like_redis(&srv, &script, 2);
}

#[test]
fn list_moves_in_transactions_across_shards_are_atomic() {
    const ELEMENTS: usize = 100;
    const READS_MAX: usize = 20_000;
    let srv = Server::start_with(&["--shards", SHARDS]);
    let keys = key_per_shard("tm");
    let (a, b, n) = (keys[0].clone(), keys[1].clone(), keys[2].clone());
    let mut c = srv.connect();
    let mut push = vec!["RPUSH", a.as_str()];
    let elements: Vec<String> = (0..ELEMENTS).map(|i| i.to_string()).collect();
    push.extend(elements.iter().map(String::as_str));
    assert_eq!(call(&mut c, &push), format!(":{ELEMENTS}\r\n"));
    let port = srv.port;
    let (wa, wb, wn) = (a.clone(), b.clone(), n.clone());
    let writer = std::thread::spawn(move || {
        let mut w = Raw::connect(port);
        for _ in 0..ELEMENTS {
            let exec = transaction(
                &mut w,
                &[
                    &[b"RPOPLPUSH", wa.as_bytes(), wb.as_bytes()],
                    &[b"INCR", wn.as_bytes()],
                ],
            );
            assert!(exec.starts_with("*2\r\n$"), "{exec}");
        }
    });
    let count = |r: &Reply| match r {
        Reply::Int(i) => *i,
        Reply::Nil => 0,
        Reply::Bulk(b) => String::from_utf8_lossy(b).parse().unwrap_or(-1),
        other => panic!("{other:?}"),
    };
    // Reads until the writer is done (bounded in rounds).
    for _ in 0..READS_MAX {
        if writer.is_finished() {
            break;
        }
        let got = transaction(
            &mut c,
            &[
                &[b"LLEN", a.as_bytes()],
                &[b"LLEN", b.as_bytes()],
                &[b"GET", n.as_bytes()],
            ],
        );
        let Reply::Array(v) = common::parse_reply(got.as_bytes()) else {
            panic!("{got}")
        };
        let (la, lb, k) = (count(&v[0]), count(&v[1]), count(&v[2]));
        assert_eq!(
            la + lb,
            ELEMENTS as i64,
            "an element in both lists or neither: {got}"
        );
        assert_eq!(lb, k, "the move seen without its counter: {got}");
    }
    writer.join().expect("writer");
    assert_eq!(call(&mut c, &["LLEN", &b]), format!(":{ELEMENTS}\r\n"));
    assert_eq!(call(&mut c, &["LRANGE", &b, "0", "0"]), "*1\r\n$1\r\n0\r\n");
}

/// DBSIZE, KEYS, RANDOMKEY, SCAN and FLUSHDB called by a script see every shard, as on one
/// server: a script that declares keys of every shard holds them all; one that declares no
/// key, or keys of some shards only, runs again with every shard held.
#[test]
fn scripts_see_the_whole_keyspace() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let mut c = srv.connect();
    let k = key_per_shard("wk");
    set_to_their_names(&mut c, &k);
    let dbsize = "return redis.call('dbsize')";
    assert_eq!(call(&mut c, &["EVAL", dbsize, "0"]), ":4\r\n");
    assert_eq!(
        call(&mut c, &["EVAL", dbsize, "4", &k[0], &k[1], &k[2], &k[3]]),
        ":4\r\n"
    );
    assert_eq!(call(&mut c, &["EVAL", dbsize, "1", &k[2]]), ":4\r\n");
    assert_eq!(call(&mut c, &["EVAL", dbsize, "2", &k[2], &k[1]]), ":4\r\n");
    let keys = "local t = redis.call('keys', '*') table.sort(t) return t";
    let mut sorted = k.clone();
    sorted.sort();
    let want: Vec<Reply> = sorted.iter().map(|x| Reply::bulk(x)).collect();
    assert_eq!(c.reply(&["EVAL", keys, "0"]), Reply::Array(want));
    let random = "return redis.call('exists', redis.call('randomkey'))";
    for _ in 0..8 {
        assert_eq!(call(&mut c, &["EVAL", random, "0"]), ":1\r\n");
    }
    let scan = "local cur, n = '0', 0 repeat local r = redis.call('scan', cur, 'count', 1) \
                cur = r[1] n = n + #r[2] until cur == '0' return n";
    assert_eq!(call(&mut c, &["EVAL", scan, "0"]), ":4\r\n");
    assert_eq!(
        call(&mut c, &["EVAL", "return redis.call('flushdb')", "0"]),
        "+OK\r\n"
    );
    assert_eq!(call(&mut c, &["DBSIZE"]), ":0\r\n");
}

#[test]
fn scripts_across_shards_are_atomic() {
    let srv = Server::start_with(&["--shards", SHARDS, "--busy-reply-threshold", "50"]);
    let keys = key_per_shard("sx");
    let (a, b) = (keys[0].clone(), keys[2].clone());
    let mut c = srv.connect();
    let both = "redis.call('set', KEYS[1], ARGV[1]) redis.call('set', KEYS[2], ARGV[1]) \
                return {redis.call('get', KEYS[1]), redis.call('get', KEYS[2])}";
    assert_eq!(
        call(&mut c, &["EVAL", both, "2", &a, &b, "v"]),
        "*2\r\n$1\r\nv\r\n$1\r\nv\r\n"
    );
    assert_eq!(
        call(&mut c, &["MGET", &a, &b]),
        "*2\r\n$1\r\nv\r\n$1\r\nv\r\n"
    );
    // With a shebang (declared keys checked), by EVALSHA, read-only, and as a function.
    let flagged = format!("#!lua\n{both}");
    assert!(call(&mut c, &["EVAL", &flagged, "2", &b, &a, "w"]).starts_with("*2\r\n$1\r\nw"));
    let sha = call(&mut c, &["SCRIPT", "LOAD", both]);
    let sha = sha
        .trim_end()
        .rsplit('\n')
        .next()
        .unwrap_or_default()
        .to_string();
    assert_eq!(
        call(&mut c, &["EVALSHA", &sha, "2", &a, &b, "x"]),
        "*2\r\n$1\r\nx\r\n$1\r\nx\r\n"
    );
    let read = "return {redis.call('get', KEYS[1]), redis.call('get', KEYS[2])}";
    assert_eq!(
        call(&mut c, &["EVAL_RO", read, "2", &a, &b]),
        "*2\r\n$1\r\nx\r\n$1\r\nx\r\n"
    );
    let lib = "#!lua name=across\nredis.register_function('swap', function(keys) \
               local x = redis.call('get', keys[1]) redis.call('set', keys[1], redis.call('get', keys[2])) \
               return redis.call('set', keys[2], x) end)";
    assert_eq!(call(&mut c, &["FUNCTION", "LOAD", lib]), "$6\r\nacross\r\n");
    assert_eq!(call(&mut c, &["SET", &a, "1"]), "+OK\r\n");
    assert_eq!(call(&mut c, &["FCALL", "swap", "2", &a, &b]), "+OK\r\n");
    assert_eq!(call(&mut c, &["GET", &a]), "$1\r\nx\r\n");
    assert_eq!(call(&mut c, &["GET", &b]), "$1\r\n1\r\n");
    // MGET, MSET, DEL, UNLINK, EXISTS, TOUCH over the declared keys of several shards run
    // as on one server: a part on each held shard, the replies merged.
    assert_eq!(
        call(
            &mut c,
            &[
                "EVAL",
                "return redis.call('mget', KEYS[2], ARGV[1], KEYS[1])",
                "2",
                &a,
                &b,
                &b,
            ],
        ),
        "*3\r\n$1\r\n1\r\n$1\r\n1\r\n$1\r\nx\r\n"
    );
    let multi_key = "redis.call('mset', KEYS[1], 'p', KEYS[2], 'q') \
                     local n = redis.call('exists', KEYS[1], KEYS[2], KEYS[1]) \
                     local t = redis.call('touch', KEYS[2], KEYS[1]) \
                     local d = redis.call('del', KEYS[1], KEYS[2]) \
                     return {n, t, d, redis.call('unlink', KEYS[1], KEYS[2])}";
    assert_eq!(
        call(&mut c, &["EVAL", multi_key, "2", &a, &b]),
        "*4\r\n:3\r\n:2\r\n:2\r\n:0\r\n"
    );
    assert_eq!(call(&mut c, &["SET", &a, "x"]), "+OK\r\n");
    // A call reaching a shard the script did not declare, before any effect: the script runs
    // again with every shard held. After a write it cannot: Redis Cluster's error, the calls
    // before it staying done, as in Redis. A wrong type as on one server.
    let non_local = "Script attempted to access a non local key in a cluster node";
    let r = call(
        &mut c,
        &[
            "EVAL",
            "return redis.call('mget', KEYS[1], KEYS[2], ARGV[1])",
            "2",
            &a,
            &b,
            &keys[1],
        ],
    );
    assert_eq!(r, "*3\r\n$1\r\nx\r\n$-1\r\n$-1\r\n");
    let r = call(
        &mut c,
        &[
            "EVAL",
            "redis.call('set', KEYS[1], 'y') return redis.call('get', ARGV[1])",
            "2",
            &a,
            &b,
            &keys[1],
        ],
    );
    assert!(r.contains(non_local), "{r}");
    assert_eq!(call(&mut c, &["GET", &a]), "$1\r\ny\r\n");
    assert_eq!(call(&mut c, &["LPUSH", &keys[3], "l"]), ":1\r\n");
    let r = call(
        &mut c,
        &[
            "EVAL",
            "return redis.call('get', KEYS[2])",
            "2",
            &a,
            &keys[3],
        ],
    );
    assert!(r.starts_with("-WRONGTYPE"), "{r}");
    let r = call(
        &mut c,
        &[
            "EVAL",
            "return redis.pcall('get', KEYS[2])",
            "2",
            &a,
            &keys[3],
        ],
    );
    assert!(r.starts_with("-WRONGTYPE"), "{r}");
    // Atomic: two clients' scripts INCR a and b, a third one's reads them together; it never
    // sees them differ.
    call(&mut c, &["DEL", &a, &b]);
    let incr = "redis.call('incr', KEYS[1]) return redis.call('incr', KEYS[2])";
    assert_never_half_seen(
        &srv,
        &a,
        &b,
        "script",
        |w, a, b| {
            let r = call(
                w,
                &[
                    "EVAL",
                    "redis.call('incr', KEYS[1]) return redis.call('incr', KEYS[2])",
                    "2",
                    a,
                    b,
                ],
            );
            assert!(r.starts_with(':'), "{r}");
        },
        |r, a, b| {
            call(
                r,
                &[
                    "EVAL",
                    "return {redis.call('get', KEYS[1]), redis.call('get', KEYS[2])}",
                    "2",
                    b,
                    a,
                ],
            )
        },
    );
    // Inside MULTI too: queued, then run with the transaction's other commands, its shards
    // held with theirs.
    assert_eq!(call(&mut c, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut c, &["EVAL", incr, "2", &a, &b]), "+QUEUED\r\n");
    assert_eq!(call(&mut c, &["GET", &keys[1]]), "+QUEUED\r\n");
    assert_eq!(call(&mut c, &["GET", &a]), "+QUEUED\r\n");
    let next = 2 * HALF_SEEN_ROUNDS + 1;
    assert_eq!(
        call(&mut c, &["EXEC"]),
        format!("*3\r\n:{next}\r\n$-1\r\n$3\r\n{next}\r\n")
    );
    // A script across shards that loops: every thread's clients get BUSY (their threads are
    // held), and SCRIPT KILL from any of them stops it.
    // (Connected first: a connection accepted during the script is served by its thread.)
    let mut others: Vec<Raw> = (0..4).map(|_| srv.connect()).collect();
    let mut runner = srv.connect();
    runner.send(&common::cmd(&[
        b"EVAL",
        b"while true do end",
        b"4",
        keys[0].as_bytes(),
        keys[1].as_bytes(),
        keys[2].as_bytes(),
        keys[3].as_bytes(),
    ]));
    let deadline = Instant::now() + Duration::from_secs(10);
    while !others[0].call_text(&["PING"]).starts_with("-BUSY") {
        assert!(Instant::now() < deadline, "never busy");
        std::thread::sleep(Duration::from_millis(20));
    }
    for o in &mut others {
        let r = o.call_text(&["GET", &keys[1]]);
        assert!(r.starts_with("-BUSY"), "{r}");
    }
    assert_eq!(others[3].call_text(&["SCRIPT", "KILL"]), "+OK\r\n");
    let r = String::from_utf8_lossy(&runner.read_reply()).to_string();
    assert!(r.starts_with("-ERR Script killed by user"), "{r}");
    for o in &mut others {
        assert_eq!(o.call_text(&["PING"]), "+PONG\r\n");
    }
}

/// CONFIG SET, CLIENT PAUSE and the other settings every shard holds run inside a
/// transaction on its shard, then reach every other shard; one that fails in the
/// transaction reaches none.
#[test]
fn settings_inside_a_transaction_reach_every_shard() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let mut a = srv.connect();
    let keys = key_per_shard("cfg");
    let oom = "-OOM command not allowed when used memory > 'maxmemory'.\r\n";
    // A failing CONFIG SET is an error in the transaction's reply, and changes nothing.
    assert_eq!(call(&mut a, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut a, &["SET", &keys[0], "v"]), "+QUEUED\r\n");
    assert_eq!(
        call(&mut a, &["CONFIG", "SET", "maxmemory", "bla"]),
        "+QUEUED\r\n"
    );
    let r = call(&mut a, &["EXEC"]);
    assert!(r.starts_with("*2\r\n+OK\r\n-ERR CONFIG SET failed"), "{r}");
    for k in &keys {
        assert_eq!(call(&mut a, &["SET", k, "v"]), "+OK\r\n", "{k}");
    }
    // A transaction on the last key's shard sets a one-byte limit: writes on every shard
    // are refused after it.
    assert_eq!(call(&mut a, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut a, &["SET", &keys[3], "w"]), "+QUEUED\r\n");
    assert_eq!(
        call(&mut a, &["CONFIG", "SET", "maxmemory", "1"]),
        "+QUEUED\r\n"
    );
    assert_eq!(call(&mut a, &["EXEC"]), "*2\r\n+OK\r\n+OK\r\n");
    for k in &keys {
        assert_eq!(call(&mut a, &["SET", k, "x"]), oom, "{k}");
    }
    // A FUNCTION LOAD refused under the limit is refused on every shard: none holds the
    // library after it.
    let lib = "#!lua name=cfglib\nredis.register_function('cfgf', function(keys) return redis.call('get', keys[1]) end)";
    assert!(call(&mut a, &["FUNCTION", "LOAD", lib]).starts_with("-OOM"));
    for k in &keys {
        assert_eq!(
            call(&mut a, &["FCALL", "cfgf", "1", k]),
            "-ERR Function not found\r\n",
            "{k}"
        );
    }
    assert_eq!(
        call(&mut a, &["CONFIG", "SET", "maxmemory", "0"]),
        "+OK\r\n"
    );
    for k in &keys {
        assert_eq!(call(&mut a, &["SET", k, "y"]), "+OK\r\n", "{k}");
    }
    assert_eq!(call(&mut a, &["FUNCTION", "LOAD", lib]), "$6\r\ncfglib\r\n");
    for k in &keys {
        assert_eq!(
            call(&mut a, &["FCALL", "cfgf", "1", k]),
            "$1\r\ny\r\n",
            "{k}"
        );
    }
    // Counts every shard answers for itself are the site's inside a transaction too, as in
    // Redis (Redis Cluster takes keyless commands in MULTI): DBSIZE counts every shard's
    // keys, CLIENT UNBLOCK finds a client blocked on any shard.
    let mut blocked = srv.connect();
    let id = blocked.int(&["CLIENT", "ID"]).to_string();
    let list = format!("{{{}}}:list", keys[2]);
    blocked.send_cmd(&[b"BLPOP", list.as_bytes(), b"0"]);
    assert!(
        common::sites::eventually(Duration::from_secs(5), || call(
            &mut a,
            &["INFO", "clients"]
        )
        .contains("blocked_clients:1\r\n")),
        "BLPOP did not block"
    );
    assert_eq!(call(&mut a, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut a, &["SET", &keys[1], "z"]), "+QUEUED\r\n");
    assert_eq!(call(&mut a, &["DBSIZE"]), "+QUEUED\r\n");
    assert_eq!(call(&mut a, &["CLIENT", "UNBLOCK", &id]), "+QUEUED\r\n");
    assert_eq!(call(&mut a, &["CLIENT", "UNBLOCK", &id]), "+QUEUED\r\n");
    assert_eq!(call(&mut a, &["EXEC"]), "*4\r\n+OK\r\n:4\r\n:1\r\n:0\r\n");
    assert_eq!(String::from_utf8_lossy(&blocked.read_reply()), "*-1\r\n");
    // So are the keyspace's and the server's views (KEYS, INFO, CONFIG GET): KEYS lists every
    // shard's keys, INFO keyspace counts them all, as MULTI INFO CONFIG GET EXEC does in
    // ioredis's own tests.
    assert_eq!(call(&mut a, &["MULTI"]), "+OK\r\n");
    assert_eq!(call(&mut a, &["KEYS", "*"]), "+QUEUED\r\n");
    assert_eq!(call(&mut a, &["INFO", "keyspace"]), "+QUEUED\r\n");
    assert_eq!(call(&mut a, &["CONFIG", "GET", "maxmemory"]), "+QUEUED\r\n");
    let exec = call(&mut a, &["EXEC"]);
    let Reply::Array(v) = common::parse_reply(exec.as_bytes()) else {
        panic!("{exec}")
    };
    assert_eq!(v.len(), 3, "{exec}");
    let Reply::Array(found) = &v[0] else {
        panic!("{exec}")
    };
    assert_eq!(found.len(), 4, "{exec}");
    let Reply::Bulk(info) = &v[1] else {
        panic!("{exec}")
    };
    assert!(
        String::from_utf8_lossy(info).contains("db0:keys=4,"),
        "INFO keyspace inside MULTI counts one shard: {exec}"
    );
    assert_eq!(
        v[2],
        Reply::Array(vec![Reply::bulk("maxmemory"), Reply::bulk("0")])
    );
}

#[test]
fn keyspace_wide_commands_behave_as_one_server() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let mut c = srv.connect();
    let mut pipe = Vec::new();
    for i in 0..500 {
        pipe.extend(common::cmd(&[b"SET", format!("k{i}").as_bytes(), b"v"]));
    }
    c.send(&pipe);
    for _ in 0..500 {
        c.read_reply();
    }
    assert_eq!(call(&mut c, &["DBSIZE"]), ":500\r\n");
    let Reply::Array(keys) = c.reply(&["KEYS", "k1*"]) else {
        panic!("keys")
    };
    assert_eq!(keys.len(), 111);
    // SCAN walks every shard: every key once or more, cursor 0 at the end.
    let mut seen = BTreeSet::new();
    let mut cursor = "0".to_string();
    let mut calls = 0;
    loop {
        let Reply::Array(parts) = c.reply(&["SCAN", &cursor, "COUNT", "50"]) else {
            panic!("scan")
        };
        let Reply::Bulk(next) = &parts[0] else {
            panic!("cursor")
        };
        cursor = s(next);
        for k in parts[1].strings() {
            seen.insert(k);
        }
        calls += 1;
        assert!(calls < 1000, "scan ends");
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), 500);
    assert!(call(&mut c, &["RANDOMKEY"]).starts_with("$"));
    let keyspace = call(&mut c, &["INFO", "keyspace"]);
    assert!(
        keyspace.contains("db0:keys=500,expires=0,avg_ttl=0"),
        "{keyspace}"
    );
    // Command statistics count each command once, whatever shards it ran on.
    let stats = call(&mut c, &["INFO", "commandstats"]);
    assert!(stats.contains("cmdstat_set:calls=500,"), "{stats}");
    assert!(stats.contains("cmdstat_dbsize:calls=1,"), "{stats}");
    // CLIENT LIST shows the clients of every thread; CLIENT KILL finds them anywhere.
    let others: Vec<Raw> = (0..5).map(|_| srv.connect()).collect();
    let mut ids = Vec::new();
    for mut o in others {
        ids.push(
            call(&mut o, &["CLIENT", "ID"])
                .trim_start_matches(':')
                .trim()
                .to_string(),
        );
        std::mem::forget(o);
    }
    let list = call(&mut c, &["CLIENT", "LIST"]);
    let listed: Vec<&str> = list
        .lines()
        .filter_map(|l| l.split(' ').find_map(|f| f.strip_prefix("id=")))
        .collect();
    for id in &ids {
        assert!(listed.contains(&id.as_str()), "{id} in {list}");
    }
    let sorted: Vec<u64> = listed.iter().filter_map(|i| i.parse().ok()).collect();
    assert!(sorted.windows(2).all(|w| w[0] < w[1]), "id order: {list}");
    assert_eq!(call(&mut c, &["CLIENT", "KILL", "ID", &ids[3]]), ":1\r\n");
    // CONFIG SET reaches every thread: a slow log threshold of 0 logs commands of every
    // shard.
    assert_eq!(
        call(&mut c, &["CONFIG", "SET", "slowlog-log-slower-than", "0"]),
        "+OK\r\n"
    );
    assert_eq!(call(&mut c, &["SLOWLOG", "RESET"]), "+OK\r\n");
    for k in key_per_shard("slow") {
        call(&mut c, &["GET", &k]);
    }
    let n: i64 = call(&mut c, &["SLOWLOG", "LEN"])
        .trim_start_matches(':')
        .trim()
        .parse()
        .unwrap();
    assert!(n >= 4, "one entry per shard's GET at least: {n}");
    assert_eq!(call(&mut c, &["FLUSHALL"]), "+OK\r\n");
    assert_eq!(call(&mut c, &["DBSIZE"]), ":0\r\n");
    assert_eq!(
        call(&mut c, &["SCAN", "0"]),
        "*2\r\n$1\r\n0\r\n*0\r\n",
        "an empty keyspace is one SCAN call"
    );
    let server = call(&mut c, &["INFO", "server"]);
    assert!(server.contains("shards:4"), "{server}");
    assert!(server.contains("shard_placement:"), "{server}");
}

#[test]
fn pubsub_and_blocking_pops_across_threads() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    // Four subscribers: connections go to the threads in turn, so they are on different
    // ones.
    let mut subs: Vec<Raw> = (0..4).map(|_| srv.connect()).collect();
    for sub in subs.iter_mut() {
        assert_eq!(
            call(sub, &["SUBSCRIBE", "news"]),
            "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
        );
    }
    let mut psub = srv.connect();
    call(&mut psub, &["PSUBSCRIBE", "n*"]);
    let mut publ = srv.connect();
    assert_eq!(
        call(&mut publ, &["PUBSUB", "NUMSUB", "news"]),
        "*2\r\n$4\r\nnews\r\n:4\r\n"
    );
    assert_eq!(call(&mut publ, &["PUBSUB", "NUMPAT"]), ":1\r\n");
    assert_eq!(call(&mut publ, &["PUBLISH", "news", "hi"]), ":5\r\n");
    for sub in subs.iter_mut() {
        assert_eq!(
            s(&sub.read_reply()),
            "*3\r\n$7\r\nmessage\r\n$4\r\nnews\r\n$2\r\nhi\r\n"
        );
        let (rest, _) = sub.read_until_quiet(Duration::from_millis(50));
        assert!(rest.is_empty(), "once only: {}", s(&rest));
    }
    assert!(s(&psub.read_reply()).contains("pmessage"));

    // A blocking pop on each shard, from connections on other threads, woken by a push from
    // yet another.
    let keys = key_per_shard("bq");
    let mut waiters: Vec<Raw> = Vec::new();
    for k in &keys {
        let mut w = srv.connect();
        w.send(&common::cmd(&[b"BLPOP", k.as_bytes(), b"5"]));
        waiters.push(w);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let info = call(&mut publ, &["INFO", "clients"]);
        if info.contains("blocked_clients:4") {
            break;
        }
        assert!(Instant::now() < deadline, "{info}");
        std::thread::sleep(Duration::from_millis(10));
    }
    for (k, w) in keys.iter().zip(waiters.iter_mut()) {
        assert_eq!(call(&mut publ, &["RPUSH", k, "v"]), ":1\r\n");
        assert_eq!(
            s(&w.read_reply()),
            format!("*2\r\n${}\r\n{k}\r\n$1\r\nv\r\n", k.len())
        );
        // Pipelined after the pop, served once it is answered.
        assert_eq!(call(w, &["PING"]), "+PONG\r\n");
    }
    // Clients blocked on one key from connections on different threads are served in the
    // order they sent their commands, as Redis's one thread reads them (Redis's suite,
    // "BRPOPLPUSH with multiple blocked clients"): the first one's destination holds a
    // string, so it gets WRONGTYPE and the element goes to the second. The push follows at
    // once, as there; the order of the two registrations must not follow which thread's
    // hop arrived first.
    for round in 0..BLOCKED_ORDER_ROUNDS {
        let mut rd1 = srv.connect();
        let mut rd2 = srv.connect();
        call(&mut publ, &["DEL", "bl{t}", "t1{t}", "t2{t}"]);
        call(&mut publ, &["SET", "t1{t}", "nolist"]);
        rd1.send(&common::cmd(&[b"BRPOPLPUSH", b"bl{t}", b"t1{t}", b"0"]));
        rd2.send(&common::cmd(&[b"BRPOPLPUSH", b"bl{t}", b"t2{t}", b"0"]));
        blocked(&mut publ, 2);
        assert_eq!(call(&mut publ, &["LPUSH", "bl{t}", "foo"]), ":1\r\n");
        assert!(
            s(&rd1.read_reply()).starts_with("-WRONGTYPE"),
            "round {round}"
        );
        assert_eq!(s(&rd2.read_reply()), "$3\r\nfoo\r\n", "round {round}");
    }
    // A timeout on another thread's shard: the null array.
    let mut t = srv.connect();
    let started = Instant::now();
    assert_eq!(call(&mut t, &["BLPOP", &keys[3], "0.2"]), "*-1\r\n");
    assert!(started.elapsed() >= Duration::from_millis(190));
    // A blocked client that disconnects consumes nothing.
    let mut gone = srv.connect();
    gone.send(&common::cmd(&[b"BLPOP", keys[2].as_bytes(), b"0"]));
    std::thread::sleep(Duration::from_millis(100));
    drop(gone);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(call(&mut publ, &["RPUSH", &keys[2], "x"]), ":1\r\n");
    assert_eq!(call(&mut publ, &["LLEN", &keys[2]]), ":1\r\n");
}

#[test]
fn a_three_shard_site_and_a_two_shard_site_converge() {
    let cluster = Cluster::start(
        &["a", "b"],
        Opts::default()
            .site_flags(0, &["--shards", "3"])
            .site_flags(1, &["--shards", "2"]),
    );
    cluster.wait_links_up(Duration::from_secs(15));
    // Concurrent writers at both sites over the same keys: strings, counters, sets, hashes,
    // deletions.
    let writers: Vec<std::thread::JoinHandle<()>> = [0usize, 1]
        .into_iter()
        .flat_map(|site| (0..2).map(move |w| (site, w)))
        .map(|(site, w)| {
            let port = cluster.site(site).port;
            std::thread::spawn(move || {
                let mut c = Raw::connect(port);
                for i in 0..300u32 {
                    let k = (i * 7 + w as u32) % 97;
                    let tag = format!("{site}.{w}.{i}");
                    let (sk, ck, setk, hk, dk) = (
                        format!("s{k}"),
                        format!("c{}", k % 13),
                        format!("set{}", k % 11),
                        format!("h{}", k % 5),
                        format!("s{}", (k + 3) % 97),
                    );
                    let cmds: [Vec<&str>; 5] = [
                        vec!["SET", &sk, &tag],
                        vec!["INCRBY", &ck, "3"],
                        vec!["SADD", &setk, &tag],
                        vec!["HSET", &hk, &tag, "1"],
                        vec!["DEL", &dk],
                    ];
                    let mut pipe = Vec::new();
                    for cmd in &cmds {
                        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
                        pipe.extend(common::cmd(&args));
                    }
                    c.send(&pipe);
                    for _ in 0..cmds.len() {
                        let r = c.read_reply();
                        assert_ne!(r.first(), Some(&b'-'), "{}", s(&r));
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().expect("writer");
    }
    let took = cluster.wait_converged(CONVERGE_TIMEOUT);
    eprintln!("converged {took:?} after the writes");
    let a = cluster.site(0);
    let b = cluster.site(1);
    assert_eq!(a.digest(), b.digest());
    assert_eq!(a.keys(), b.keys());
    assert_eq!(a.slot_digests(), b.slot_digests());
    // Each shard links to every shard of the other site.
    assert_eq!(a.peer_u64("b", "shards"), 2);
    assert_eq!(b.peer_u64("a", "shards"), 3);
    // Removal metadata is collected once every shard of both sites acked.
    let deadline = Instant::now() + Duration::from_secs(20);
    while a.info_u64("crdt_gc_pending_keys") + b.info_u64("crdt_gc_pending_keys") > 0 {
        assert!(
            Instant::now() < deadline,
            "GC never completed:\n{}",
            common::sites::report(&[a, b])
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(a.digest(), b.digest());
}

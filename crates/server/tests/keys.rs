//! Integration tests of the generic key commands (cmd/keys.rs) against the real binary:
//! DEL UNLINK EXISTS TYPE TOUCH KEYS SCAN RANDOMKEY RENAME RENAMENX COPY, the expiry commands
//! and OBJECT, with Redis 7.0's replies and error texts (checked against redis-server 7.0.15).
//!
//! The raw RESP client of `common` shows error texts and RESP3 reply types exactly.

mod common;

use std::collections::HashSet;
use std::time::Duration;

use common::{Raw, Reply, Server};

/// Every key of the db, through a full SCAN iteration with the given extra options.
fn scan_all(c: &mut Raw, extra: &[&str]) -> (Vec<String>, usize) {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    let mut calls = 0;
    loop {
        let mut args = vec!["SCAN", cursor.as_str()];
        args.extend_from_slice(extra);
        let reply = c.reply(&args);
        calls += 1;
        let Reply::Array(parts) = reply else {
            panic!("scan reply {reply:?}")
        };
        assert_eq!(parts.len(), 2);
        let Reply::Bulk(next) = &parts[0] else {
            panic!("cursor {parts:?}")
        };
        keys.extend(parts[1].strings());
        cursor = String::from_utf8(next.clone()).expect("cursor");
        if cursor == "0" {
            break;
        }
        assert!(calls < 100_000, "scan does not end");
    }
    (keys, calls)
}

#[test]
fn del_unlink_exists_type_touch() {
    let s = Server::start();
    let mut c = s.connect();
    c.ok(&["SET", "a", "1"]);
    c.ok(&["SET", "b", "2"]);
    assert_eq!(c.int(&["EXISTS", "a", "b", "a", "nokey"]), 3);
    assert_eq!(c.reply(&["TYPE", "a"]), Reply::Simple("string".into()));
    assert_eq!(c.reply(&["TYPE", "nokey"]), Reply::Simple("none".into()));
    assert_eq!(c.int(&["TOUCH", "a", "b", "nokey"]), 2);
    assert_eq!(c.int(&["DEL", "a", "a", "nokey"]), 1);
    assert_eq!(c.int(&["EXISTS", "a"]), 0);
    assert_eq!(c.int(&["UNLINK", "b", "nokey"]), 1);
    assert_eq!(c.int(&["EXISTS", "b"]), 0);
    assert_eq!(c.int(&["DEL", "nokey"]), 0);
    assert_eq!(
        c.err(&["DEL"]),
        "ERR wrong number of arguments for 'del' command"
    );
}

#[test]
fn keys_patterns() {
    let s = Server::start();
    let mut c = s.connect();
    for k in ["foo_a", "foo_b", "foo_c", "key_x", "key_y", "key_z"] {
        c.ok(&["SET", k, "hello"]);
    }
    let mut foo = c.reply(&["KEYS", "foo*"]).strings();
    foo.sort();
    assert_eq!(foo, ["foo_a", "foo_b", "foo_c"]);
    let mut all = c.reply(&["KEYS", "*"]).strings();
    all.sort();
    assert_eq!(all.len(), 6);
    assert_eq!(c.reply(&["KEYS", "key_[xy]"]).strings().len(), 2);
    assert_eq!(c.reply(&["KEYS", "nomatch*"]), Reply::Array(vec![]));
    // Expired keys are not listed.
    assert_eq!(c.int(&["PEXPIRE", "foo_a", "1"]), 1);
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(c.reply(&["KEYS", "foo*"]).strings().len(), 2);
}

/// The pattern that wedged the shard (issue 20): a dozen stars against a 40-byte key that
/// cannot match. KEYS, SCAN MATCH and PUBSUB CHANNELS answer, and the server still serves
/// PING after them (the read timeout of `Raw` bounds each reply).
#[test]
fn many_star_patterns_do_not_wedge() {
    let s = Server::start();
    let mut c = s.connect();
    let key = "a".repeat(40);
    c.ok(&["SET", &key, "v"]);
    let twenty = format!("{}b", "a*".repeat(20));
    for pattern in ["a*a*a*a*a*a*a*a*a*a*a*a*b", twenty.as_str()] {
        assert_eq!(c.reply(&["KEYS", pattern]), Reply::Array(vec![]));
        let r = c.reply(&["SCAN", "0", "MATCH", pattern, "COUNT", "100"]);
        assert_eq!(
            r,
            Reply::Array(vec![Reply::bulk("0"), Reply::Array(vec![])])
        );
        assert_eq!(
            c.reply(&["PUBSUB", "CHANNELS", pattern]),
            Reply::Array(vec![])
        );
        assert_eq!(c.call_text(&["PING"]), "+PONG\r\n");
    }
    assert_eq!(
        c.reply(&["KEYS", "a*a*a*a*a*a*a*a*a*a*a*a*"]).strings(),
        [key]
    );
}

/// Redis's `stringmatchlen` edges that differ from shell globbing.
#[test]
fn glob_edges_follow_redis() {
    let s = Server::start();
    let mut c = s.connect();
    for k in ["]", "^", "b", "-"] {
        c.ok(&["SET", k, "v"]);
    }
    let mut keys = |p: &str| {
        let mut v = c.reply(&["KEYS", p]).strings();
        v.sort();
        v
    };
    // A range may end at ']' and the class goes on: [a-]b] is ']'..'a' or 'b'.
    assert_eq!(keys("[a-]b]"), ["]", "^", "b"]);
    // An unterminated class takes the rest of the pattern.
    assert_eq!(keys("[-"), ["-"]);
    // `[]` matches nothing, `[^]` anything.
    assert_eq!(keys("[]"), Vec::<String>::new());
    assert_eq!(keys("[^]").len(), 4);
}

#[test]
fn scan_covers_a_thousand_keys() {
    let s = Server::start();
    let mut c = s.connect();
    for i in 0..1000 {
        c.ok(&["SET", &format!("key:{i}"), "v"]);
    }
    let (keys, calls) = scan_all(&mut c, &[]);
    let set: HashSet<&String> = keys.iter().collect();
    assert_eq!(set.len(), 1000, "every key at least once");
    assert!(keys.len() >= 1000);
    assert!(
        calls > 10,
        "default COUNT 10 pages the scan ({calls} calls)"
    );
    let (keys, _) = scan_all(&mut c, &["COUNT", "100"]);
    assert_eq!(keys.iter().collect::<HashSet<_>>().len(), 1000);
    // MATCH filters.
    let (keys, _) = scan_all(&mut c, &["MATCH", "key:1??", "COUNT", "50"]);
    let set: HashSet<String> = keys.into_iter().collect();
    assert_eq!(set.len(), 100);
    assert!(set.iter().all(|k| k.len() == 7 && k.starts_with("key:1")));
    // TYPE filters, case-insensitively; an unknown type matches nothing.
    let (keys, _) = scan_all(&mut c, &["TYPE", "STRING", "COUNT", "1000"]);
    assert_eq!(keys.iter().collect::<HashSet<_>>().len(), 1000);
    let (keys, _) = scan_all(&mut c, &["TYPE", "set"]);
    assert!(keys.is_empty());
    let (keys, _) = scan_all(&mut c, &["TYPE", "whatever"]);
    assert!(keys.is_empty());
}

/// Right after a burst of inserts the table is still rehashing: a full SCAN returns every key
/// once (redis-cli --scan counts them), as Redis does for a table of this size.
#[test]
fn scan_right_after_growth_returns_each_key_once() {
    let s = Server::start();
    let mut c = s.connect();
    let mut pipe = Vec::new();
    for i in 0..20_000 {
        let k = format!("key:{i}");
        pipe.extend_from_slice(&common::cmd(&[b"SET", k.as_bytes(), b"v"]));
    }
    c.send(&pipe);
    for _ in 0..20_000 {
        assert_eq!(c.read_reply(), b"+OK\r\n");
    }
    let (keys, _) = scan_all(&mut c, &[]);
    let set: HashSet<&String> = keys.iter().collect();
    assert_eq!(set.len(), 20_000);
    assert_eq!(keys.len(), 20_000, "no key twice");
}

/// Redis's "SCAN guarantees check under write load": keys present throughout are returned.
#[test]
fn scan_guarantees_under_write_load() {
    let s = Server::start();
    let mut c = s.connect();
    for i in 0..100 {
        c.ok(&["SET", &format!("k{i}"), "v"]);
    }
    let mut cursor = "0".to_string();
    let mut seen = HashSet::new();
    let mut round: u64 = 0;
    loop {
        let Reply::Array(parts) = c.reply(&["SCAN", &cursor]) else {
            panic!("scan")
        };
        seen.extend(parts[1].strings());
        let Reply::Bulk(next) = &parts[0] else {
            panic!("cursor")
        };
        cursor = String::from_utf8(next.clone()).expect("cursor");
        if cursor == "0" {
            break;
        }
        for j in 0..10u64 {
            let n = (round * 7919 + j * 104_729) % 1000;
            c.ok(&["SET", &format!("addedkey:{n}"), "foo"]);
        }
        round += 1;
        assert!(round < 10_000, "scan does not end");
    }
    for i in 0..100 {
        assert!(seen.contains(&format!("k{i}")), "k{i} missed");
    }
}

/// A table growing faster than the client scans: the iteration still ends.
#[test]
fn scan_ends_under_unbounded_growth() {
    let s = Server::start();
    let mut c = s.connect();
    for i in 0..200 {
        c.ok(&["SET", &format!("old:{i}"), "v"]);
    }
    let mut cursor = "0".to_string();
    let mut round = 0;
    loop {
        let Reply::Array(parts) = c.reply(&["SCAN", &cursor, "COUNT", "10"]) else {
            panic!("scan")
        };
        let Reply::Bulk(next) = &parts[0] else {
            panic!("cursor")
        };
        cursor = String::from_utf8(next.clone()).expect("cursor");
        if cursor == "0" {
            break;
        }
        for j in 0..30 {
            c.ok(&["SET", &format!("new:{round}:{j}"), "v"]);
        }
        round += 1;
        assert!(round < 20_000, "scan does not end");
    }
}

#[test]
fn scan_errors_and_shapes() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.err(&["SCAN", "abc"]), "ERR invalid cursor");
    assert_eq!(c.err(&["SCAN", " 0"]), "ERR invalid cursor");
    assert_eq!(c.err(&["SCAN", "0x"]), "ERR invalid cursor");
    assert_eq!(
        c.err(&["SCAN", "18446744073709551616"]),
        "ERR invalid cursor"
    );
    assert_eq!(c.err(&["SCAN", "0", "COUNT", "0"]), "ERR syntax error");
    assert_eq!(c.err(&["SCAN", "0", "COUNT", "-1"]), "ERR syntax error");
    assert_eq!(
        c.err(&["SCAN", "0", "COUNT", "abc"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(c.err(&["SCAN", "0", "COUNT"]), "ERR syntax error");
    assert_eq!(c.err(&["SCAN", "0", "FOO", "bar"]), "ERR syntax error");
    assert_eq!(
        c.reply(&["SCAN", "0"]),
        Reply::Array(vec![Reply::bulk("0"), Reply::Array(vec![])])
    );
    assert_eq!(
        c.reply(&["SCAN", ""]),
        Reply::Array(vec![Reply::bulk("0"), Reply::Array(vec![])])
    );
    c.ok(&["SET", "k", "v"]);
    assert_eq!(
        c.reply(&["SCAN", "+0", "COUNT", "1000"]),
        Reply::Array(vec![Reply::bulk("0"), Reply::Array(vec![Reply::bulk("k")])])
    );
    // RESP3: same shape.
    assert!(matches!(c.reply(&["HELLO", "3"]), Reply::Other(_)));
    assert_eq!(
        c.reply(&["SCAN", "0", "COUNT", "1000"]),
        Reply::Array(vec![Reply::bulk("0"), Reply::Array(vec![Reply::bulk("k")])])
    );
    // Expired keys are dropped from SCAN results.
    assert_eq!(c.int(&["PEXPIRE", "k", "1"]), 1);
    std::thread::sleep(Duration::from_millis(10));
    assert_eq!(
        c.reply(&["SCAN", "0", "COUNT", "1000"]),
        Reply::Array(vec![Reply::bulk("0"), Reply::Array(vec![])])
    );
}

#[test]
fn randomkey() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.reply(&["RANDOMKEY"]), Reply::Nil);
    let mut want = HashSet::new();
    for i in 0..20 {
        c.ok(&["SET", &format!("r{i}"), "v"]);
        want.insert(format!("r{i}"));
    }
    let mut got = HashSet::new();
    for _ in 0..400 {
        let Reply::Bulk(k) = c.reply(&["RANDOMKEY"]) else {
            panic!("randomkey")
        };
        let k = String::from_utf8(k).expect("utf8");
        assert!(want.contains(&k));
        got.insert(k);
    }
    assert!(got.len() > 10, "random keys spread: {got:?}");
    // One live key among expired ones.
    for i in 0..20 {
        assert_eq!(c.int(&["PEXPIRE", &format!("r{i}"), "1"]), 1);
    }
    c.ok(&["SET", "live", "v"]);
    std::thread::sleep(Duration::from_millis(10));
    for _ in 0..5 {
        assert_eq!(c.reply(&["RANDOMKEY"]), Reply::bulk("live"));
    }
    assert_eq!(c.int(&["DEL", "live"]), 1);
    assert_eq!(c.reply(&["RANDOMKEY"]), Reply::Nil);
    assert!(matches!(c.reply(&["HELLO", "3"]), Reply::Other(_)));
    assert_eq!(c.reply(&["RANDOMKEY"]), Reply::Null);
}

#[test]
fn rename_and_renamenx() {
    let s = Server::start_single();
    let mut c = s.connect();
    assert_eq!(c.err(&["RENAME", "nokey", "x"]), "ERR no such key");
    assert_eq!(c.err(&["RENAME", "nokey", "nokey"]), "ERR no such key");
    assert_eq!(c.err(&["RENAMENX", "nokey", "x"]), "ERR no such key");
    c.ok(&["SET", "src", "hello"]);
    c.ok(&["RENAME", "src", "src"]);
    assert_eq!(c.int(&["RENAMENX", "src", "src"]), 0);
    assert_eq!(c.reply(&["GET", "src"]), Reply::bulk("hello"));
    c.ok(&["RENAME", "src", "dst"]);
    assert_eq!(c.int(&["EXISTS", "src"]), 0);
    assert_eq!(c.reply(&["GET", "dst"]), Reply::bulk("hello"));
    // The TTL moves with the key.
    assert_eq!(c.int(&["EXPIRE", "dst", "100"]), 1);
    c.ok(&["RENAME", "dst", "moved"]);
    let ttl = c.int(&["PTTL", "moved"]);
    assert!(ttl > 99_000 && ttl <= 100_000, "{ttl}");
    // Overwriting a destination drops its TTL.
    c.ok(&["SET", "plain", "p"]);
    c.ok(&["SET", "volatile", "v"]);
    assert_eq!(c.int(&["EXPIRE", "volatile", "100"]), 1);
    c.ok(&["RENAME", "plain", "volatile"]);
    assert_eq!(c.reply(&["GET", "volatile"]), Reply::bulk("p"));
    assert_eq!(c.int(&["TTL", "volatile"]), -1);
    // RENAMENX refuses an existing destination.
    c.ok(&["SET", "a", "1"]);
    assert_eq!(c.int(&["RENAMENX", "a", "volatile"]), 0);
    assert_eq!(c.reply(&["GET", "a"]), Reply::bulk("1"));
    assert_eq!(c.int(&["RENAMENX", "a", "b"]), 1);
    assert_eq!(c.reply(&["GET", "b"]), Reply::bulk("1"));
    assert_eq!(c.int(&["EXISTS", "a"]), 0);
    // Counters keep their value.
    assert_eq!(c.int(&["INCRBY", "n", "41"]), 41);
    c.ok(&["RENAME", "n", "m"]);
    assert_eq!(c.int(&["INCR", "m"]), 42);
}

#[test]
fn copy() {
    let s = Server::start_single();
    let mut c = s.connect();
    assert_eq!(c.int(&["COPY", "nokey", "x"]), 0);
    c.ok(&["SET", "k", "v"]);
    assert_eq!(
        c.err(&["COPY", "k", "k"]),
        "ERR source and destination objects are the same"
    );
    assert_eq!(
        c.err(&["COPY", "k", "k", "DB", "0"]),
        "ERR source and destination objects are the same"
    );
    assert_eq!(
        c.err(&["COPY", "k", "z", "DB", "99"]),
        "ERR DB index is out of range"
    );
    assert_eq!(
        c.err(&["COPY", "k", "z", "DB", "-1"]),
        "ERR DB index is out of range"
    );
    assert_eq!(
        c.err(&["COPY", "k", "z", "DB", "abc"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        c.err(&["COPY", "k", "z", "DB", "4294967296"]),
        "ERR value is out of range, value must between -2147483648 and 2147483647"
    );
    assert_eq!(c.err(&["COPY", "k", "z", "FOO"]), "ERR syntax error");
    assert_eq!(c.err(&["COPY", "k", "z", "DB"]), "ERR syntax error");
    assert_eq!(c.int(&["COPY", "k", "k2"]), 1);
    assert_eq!(c.reply(&["GET", "k2"]), Reply::bulk("v"));
    assert_eq!(c.reply(&["GET", "k"]), Reply::bulk("v"));
    c.ok(&["SET", "k", "v2"]);
    assert_eq!(c.int(&["COPY", "k", "k2"]), 0);
    assert_eq!(c.reply(&["GET", "k2"]), Reply::bulk("v"));
    assert_eq!(c.int(&["COPY", "k", "k2", "replace"]), 1);
    assert_eq!(c.reply(&["GET", "k2"]), Reply::bulk("v2"));
    // To another db, with the TTL.
    assert_eq!(c.int(&["EXPIRE", "k", "100"]), 1);
    assert_eq!(c.int(&["COPY", "k", "k", "DB", "1"]), 1);
    c.ok(&["SELECT", "1"]);
    assert_eq!(c.reply(&["GET", "k"]), Reply::bulk("v2"));
    let ttl = c.int(&["TTL", "k"]);
    assert!((99..=100).contains(&ttl), "{ttl}");
    c.ok(&["SELECT", "0"]);
    assert_eq!(c.int(&["TTL", "k2"]), -1);
}

#[test]
fn expire_family() {
    let s = Server::start();
    let mut c = s.connect();
    assert_eq!(c.int(&["EXPIRE", "nokey", "100"]), 0);
    c.ok(&["SET", "k", "v"]);
    assert_eq!(c.int(&["TTL", "k"]), -1);
    assert_eq!(c.int(&["PTTL", "k"]), -1);
    assert_eq!(c.int(&["TTL", "nokey"]), -2);
    assert_eq!(c.int(&["PTTL", "nokey"]), -2);
    assert_eq!(c.int(&["EXPIRETIME", "k"]), -1);
    assert_eq!(c.int(&["PEXPIRETIME", "nokey"]), -2);
    // Option combinations.
    let nx = "ERR NX and XX, GT or LT options at the same time are not compatible";
    assert_eq!(c.err(&["EXPIRE", "k", "10", "NX", "XX"]), nx);
    assert_eq!(c.err(&["EXPIRE", "k", "10", "nx", "gt"]), nx);
    assert_eq!(c.err(&["EXPIRE", "k", "10", "NX", "LT"]), nx);
    assert_eq!(
        c.err(&["EXPIRE", "k", "10", "GT", "LT"]),
        "ERR GT and LT options at the same time are not compatible"
    );
    assert_eq!(
        c.err(&["EXPIRE", "k", "10", "FOO"]),
        "ERR Unsupported option FOO"
    );
    assert_eq!(
        c.err(&["EXPIRE", "k", "abc"]),
        "ERR value is not an integer or out of range"
    );
    assert_eq!(
        c.err(&["EXPIRE", "k", "9223372036854775"]),
        "ERR invalid expire time in 'expire' command"
    );
    assert_eq!(
        c.err(&["PEXPIRE", "k", "9223372036854775807"]),
        "ERR invalid expire time in 'pexpire' command"
    );
    assert_eq!(
        c.err(&["EXPIREAT", "k", "9223372036854776"]),
        "ERR invalid expire time in 'expireat' command"
    );
    assert_eq!(c.int(&["TTL", "k"]), -1);
    // XX/GT on a key without TTL: refused. LT sets (no TTL counts as infinite).
    assert_eq!(c.int(&["EXPIRE", "k", "100", "XX"]), 0);
    assert_eq!(c.int(&["EXPIRE", "k", "100", "GT"]), 0);
    assert_eq!(c.int(&["EXPIRE", "k", "100", "LT"]), 1);
    assert_eq!(c.int(&["TTL", "k"]), 100);
    assert_eq!(c.int(&["EXPIRE", "k", "200", "NX"]), 0);
    assert_eq!(c.int(&["EXPIRE", "k", "200", "XX"]), 1);
    assert_eq!(c.int(&["EXPIRE", "k", "100", "GT"]), 0);
    assert_eq!(c.int(&["EXPIRE", "k", "300", "GT"]), 1);
    assert_eq!(c.int(&["EXPIRE", "k", "400", "LT"]), 0);
    assert_eq!(c.int(&["EXPIRE", "k", "50", "LT"]), 1);
    assert_eq!(c.int(&["TTL", "k"]), 50);
    // A later EXPIRE replaces the TTL (even a longer one locally).
    assert_eq!(c.int(&["EXPIRE", "k", "1000"]), 1);
    assert_eq!(c.int(&["TTL", "k"]), 1000);
    assert_eq!(c.int(&["PEXPIRE", "k", "5000"]), 1);
    let pttl = c.int(&["PTTL", "k"]);
    assert!(pttl > 4900 && pttl <= 5000, "{pttl}");
    // Absolute deadlines.
    let at = 4_000_000_000i64;
    assert_eq!(c.int(&["EXPIREAT", "k", &at.to_string()]), 1);
    assert_eq!(c.int(&["EXPIRETIME", "k"]), at);
    assert_eq!(c.int(&["PEXPIRETIME", "k"]), at * 1000);
    assert_eq!(c.int(&["PEXPIREAT", "k", &(at * 1000 + 1).to_string()]), 1);
    assert_eq!(c.int(&["PEXPIRETIME", "k"]), at * 1000 + 1);
    // PERSIST.
    assert_eq!(c.int(&["PERSIST", "k"]), 1);
    assert_eq!(c.int(&["PERSIST", "k"]), 0);
    assert_eq!(c.int(&["PERSIST", "nokey"]), 0);
    assert_eq!(c.int(&["TTL", "k"]), -1);
    // A deadline in the past deletes the key and answers 1.
    assert_eq!(c.int(&["EXPIRE", "k", "-1"]), 1);
    assert_eq!(c.int(&["EXISTS", "k"]), 0);
    c.ok(&["SET", "k", "v"]);
    assert_eq!(c.int(&["EXPIREAT", "k", "100"]), 1);
    assert_eq!(c.int(&["EXISTS", "k"]), 0);
    c.ok(&["SET", "k", "v"]);
    assert_eq!(c.int(&["PEXPIRE", "k", "0"]), 1);
    assert_eq!(c.int(&["EXISTS", "k"]), 0);
    // Lazy expiry on access.
    c.ok(&["SET", "k", "v"]);
    assert_eq!(c.int(&["PEXPIRE", "k", "30"]), 1);
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(c.reply(&["GET", "k"]), Reply::Nil);
    assert_eq!(c.int(&["TTL", "k"]), -2);
    // SET clears a TTL.
    assert_eq!(c.int(&["EXPIRE", "nokey", "10"]), 0);
    c.ok(&["SET", "t", "v"]);
    assert_eq!(c.int(&["EXPIRE", "t", "10"]), 1);
    c.ok(&["SET", "t", "w"]);
    assert_eq!(c.int(&["TTL", "t"]), -1);
}

#[test]
fn ttl_rounds_to_nearest_second() {
    let s = Server::start();
    let mut c = s.connect();
    c.ok(&["SET", "k", "v"]);
    assert_eq!(c.int(&["PEXPIRE", "k", "1600"]), 1);
    assert_eq!(c.int(&["TTL", "k"]), 2);
    assert_eq!(c.int(&["PEXPIRE", "k", "1400"]), 1);
    assert_eq!(c.int(&["TTL", "k"]), 1);
}

#[test]
fn active_expiry_removes_untouched_keys() {
    let s = Server::start();
    let mut c = s.connect();
    for i in 0..50 {
        let k = format!("vol:{i}");
        c.ok(&["SET", &k, "v"]);
        assert_eq!(c.int(&["PEXPIRE", &k, "50"]), 1);
    }
    c.ok(&["SET", "stay", "v"]);
    std::thread::sleep(Duration::from_millis(300));
    // KEYS neither touches nor deletes; the active cycle must have run: the expired count in
    // INFO (when implemented) shows it before any lazy access.
    if let Reply::Bulk(info) = c.reply(&["INFO", "stats"]) {
        let info = String::from_utf8_lossy(&info).into_owned();
        if let Some(line) = info.lines().find(|l| l.starts_with("expired_keys:")) {
            let n: u64 = line
                .trim_start_matches("expired_keys:")
                .trim()
                .parse()
                .expect("expired_keys");
            assert_eq!(n, 50, "active expiry cycle");
        }
    }
    assert_eq!(c.reply(&["KEYS", "*"]).strings(), ["stay"]);
    let (keys, _) = scan_all(&mut c, &[]);
    assert_eq!(keys, ["stay"]);
    assert_eq!(c.int(&["EXISTS", "vol:0", "vol:49"]), 0);
}

#[test]
fn object_subcommands() {
    let s = Server::start();
    let mut c = s.connect();
    c.ok(&["SET", "i", "123"]);
    c.ok(&["SET", "neg", "-5"]);
    c.ok(&["SET", "big", "12345678901234567890"]);
    c.ok(&["SET", "lead", "01"]);
    c.ok(&["SET", "e44", &"a".repeat(44)]);
    c.ok(&["SET", "r45", &"a".repeat(45)]);
    assert_eq!(c.int(&["INCR", "cnt"]), 1);
    assert_eq!(c.int(&["INCRBY", "cntbig", "100000"]), 100000);
    for (k, enc) in [
        ("i", "int"),
        ("neg", "int"),
        ("big", "embstr"),
        ("lead", "embstr"),
        ("e44", "embstr"),
        ("r45", "raw"),
        ("cnt", "int"),
        ("cntbig", "int"),
    ] {
        assert_eq!(c.reply(&["OBJECT", "ENCODING", k]), Reply::bulk(enc), "{k}");
    }
    assert_eq!(c.reply(&["OBJECT", "ENCODING", "nokey"]), Reply::Nil);
    assert_eq!(c.int(&["OBJECT", "REFCOUNT", "i"]), 2147483647);
    assert_eq!(c.int(&["OBJECT", "REFCOUNT", "cnt"]), 2147483647);
    assert_eq!(c.int(&["OBJECT", "REFCOUNT", "neg"]), 1);
    assert_eq!(c.int(&["OBJECT", "REFCOUNT", "cntbig"]), 1);
    assert_eq!(c.int(&["OBJECT", "REFCOUNT", "e44"]), 1);
    assert_eq!(c.reply(&["OBJECT", "REFCOUNT", "nokey"]), Reply::Nil);
    let idle = c.int(&["OBJECT", "IDLETIME", "i"]);
    assert!((0..=2).contains(&idle), "{idle}");
    assert_eq!(c.reply(&["OBJECT", "IDLETIME", "nokey"]), Reply::Nil);
    assert_eq!(
        c.err(&["OBJECT", "FREQ", "i"]),
        "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."
    );
    let help = c.reply(&["OBJECT", "HELP"]).strings();
    assert_eq!(help.len(), 15);
    assert_eq!(
        help[0],
        "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    );
    assert_eq!(help[14], "    Prints this help.");
    assert_eq!(
        c.err(&["OBJECT", "ENCODING"]),
        "ERR wrong number of arguments for 'object|encoding' command"
    );
    assert!(matches!(c.reply(&["HELLO", "3"]), Reply::Other(_)));
    assert_eq!(c.reply(&["OBJECT", "ENCODING", "nokey"]), Reply::Null);
    assert_eq!(c.reply(&["OBJECT", "ENCODING", "i"]), Reply::bulk("int"));
}

#[test]
fn idletime_advances() {
    let s = Server::start();
    let mut c = s.connect();
    c.ok(&["SET", "k", "v"]);
    std::thread::sleep(Duration::from_millis(2100));
    let idle = c.int(&["OBJECT", "IDLETIME", "k"]);
    assert!((1..=3).contains(&idle), "{idle}");
    // OBJECT, EXISTS, TTL and TYPE do not touch the key; TOUCH does.
    assert_eq!(c.int(&["EXISTS", "k"]), 1);
    assert_eq!(c.reply(&["TYPE", "k"]), Reply::Simple("string".into()));
    assert!(c.int(&["OBJECT", "IDLETIME", "k"]) >= 1);
    assert_eq!(c.int(&["TOUCH", "k"]), 1);
    assert_eq!(c.int(&["OBJECT", "IDLETIME", "k"]), 0);
}

#[test]
fn commands_inside_multi() {
    let s = Server::start_single();
    let mut c = s.connect();
    c.ok(&["SET", "a", "1"]);
    c.ok(&["MULTI"]);
    assert_eq!(
        c.reply(&["RENAME", "a", "b"]),
        Reply::Simple("QUEUED".into())
    );
    assert_eq!(
        c.reply(&["EXPIRE", "b", "100"]),
        Reply::Simple("QUEUED".into())
    );
    assert_eq!(c.reply(&["TTL", "b"]), Reply::Simple("QUEUED".into()));
    assert_eq!(
        c.reply(&["EXEC"]),
        Reply::Array(vec![
            Reply::Simple("OK".into()),
            Reply::Int(1),
            Reply::Int(100)
        ])
    );
}

#[test]
fn binary_keys() {
    let s = Server::start();
    let mut c = s.connect();
    let k: &[u8] = b"bin\x00key\xff";
    assert_eq!(c.reply_b(&[b"SET", k, b"v"]), Reply::Simple("OK".into()));
    assert_eq!(c.reply_b(&[b"EXISTS", k]), Reply::Int(1));
    assert_eq!(
        c.reply_b(&[b"KEYS", b"bin*"]),
        Reply::Array(vec![Reply::Bulk(k.to_vec())])
    );
    assert_eq!(
        c.reply_b(&[b"RENAME", k, b"plain"]),
        Reply::Simple("OK".into())
    );
    assert_eq!(c.reply_b(&[b"GET", b"plain"]), Reply::bulk("v"));
}

fn info_field(c: &mut Raw, name: &str) -> Option<i64> {
    let Reply::Bulk(info) = c.reply(&["INFO", "stats"]) else {
        return None;
    };
    let info = String::from_utf8_lossy(&info).into_owned();
    let prefix = format!("{name}:");
    info.lines().find_map(|l| {
        l.strip_prefix(prefix.as_str())
            .and_then(|v| v.trim().parse().ok())
    })
}

/// Reads count keyspace hits and misses as Redis's lookup flags do; writes count nothing.
#[test]
fn keyspace_hits_and_misses() {
    let s = Server::start_single();
    let mut c = s.connect();
    c.ok(&["SET", "a", "1"]);
    let (Some(h0), Some(m0)) = (
        info_field(&mut c, "keyspace_hits"),
        info_field(&mut c, "keyspace_misses"),
    ) else {
        return;
    };
    assert_eq!(c.int(&["EXISTS", "a", "nokey"]), 1);
    assert_eq!(c.reply(&["TYPE", "a"]), Reply::Simple("string".into()));
    assert_eq!(c.int(&["TTL", "nokey"]), -2);
    assert_eq!(c.int(&["TOUCH", "a"]), 1);
    assert_eq!(c.int(&["EXPIRE", "a", "100"]), 1);
    assert_eq!(c.int(&["DEL", "nokey"]), 0);
    c.ok(&["RENAME", "a", "b"]);
    assert_eq!(info_field(&mut c, "keyspace_hits"), Some(h0 + 3));
    assert_eq!(info_field(&mut c, "keyspace_misses"), Some(m0 + 2));
}

/// `overhead.hashtable.main` of database 0 in MEMORY STATS (the table's buckets).
fn table_bytes(c: &mut Raw) -> i64 {
    let stats = c.call_text(&["MEMORY", "STATS"]);
    let after = stats
        .split("overhead.hashtable.main\r\n:")
        .nth(1)
        .unwrap_or_else(|| panic!("no table in {stats}"));
    after
        .split("\r\n")
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{stats}"))
}

/// A database that held many more keys than it does now gets a smaller table from the
/// periodic cycle (Redis's tryResizeHashTables, under 10% full), and SCAN still finds every
/// key left while and after it shrinks.
#[test]
fn a_table_left_sparse_by_deletes_shrinks() {
    let s = Server::start_single();
    let mut c = s.connect();
    let n = 20_000;
    let kept = 100;
    let mut sets = Vec::new();
    for i in 0..n {
        sets.extend(common::cmd(&[b"SET", format!("k:{i}").as_bytes(), b"v"]));
    }
    c.send(&sets);
    for _ in 0..n {
        assert_eq!(c.read_reply(), b"+OK\r\n");
    }
    let full = table_bytes(&mut c);
    let mut dels = Vec::new();
    for i in kept..n {
        dels.extend(common::cmd(&[b"DEL", format!("k:{i}").as_bytes()]));
    }
    c.send(&dels);
    for _ in kept..n {
        assert_eq!(c.read_reply(), b":1\r\n");
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while table_bytes(&mut c) * 16 > full {
        assert!(
            std::time::Instant::now() < deadline,
            "{} of {full}",
            table_bytes(&mut c)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut seen = HashSet::new();
    let mut cursor = "0".to_string();
    loop {
        let Reply::Array(parts) = c.reply(&["SCAN", &cursor, "COUNT", "10"]) else {
            panic!("SCAN reply");
        };
        let [Reply::Bulk(next), Reply::Array(keys)] = &parts[..] else {
            panic!("SCAN reply {parts:?}");
        };
        for k in keys {
            if let Reply::Bulk(k) = k {
                seen.insert(k.clone());
            }
        }
        cursor = String::from_utf8_lossy(next).into_owned();
        if cursor == "0" {
            break;
        }
    }
    assert_eq!(seen.len(), kept);
}

/// A string's encoding follows the command that wrote it where Redis's does: INCRBYFLOAT
/// stores text ("embstr" even for "0" or "7"), INCR an integer object ("int", shared below
/// 10,000) whatever wrote the value before, and RENAME, COPY and MOVE keep the encoding
/// (checked against redis-server 7.0.15).
#[test]
fn string_encodings_follow_the_writing_command() {
    let s = Server::start();
    let mut c = s.connect();
    c.ok(&["SET", "f", "5"]);
    c.call_strs(&["INCRBYFLOAT", "f", "1.5"]);
    c.call_strs(&["INCRBYFLOAT", "f", "0.5"]);
    assert_eq!(c.reply(&["GET", "f"]), Reply::bulk("7"));
    assert_eq!(c.reply(&["OBJECT", "ENCODING", "f"]), Reply::bulk("embstr"));
    assert_eq!(c.int(&["OBJECT", "REFCOUNT", "f"]), 1);
    assert_eq!(c.int(&["INCR", "f"]), 8);
    assert_eq!(c.reply(&["OBJECT", "ENCODING", "f"]), Reply::bulk("int"));
    assert_eq!(c.int(&["OBJECT", "REFCOUNT", "f"]), 2147483647);
    assert_eq!(c.reply(&["INCRBYFLOAT", "z", "00"]), Reply::bulk("0"));
    assert_eq!(c.reply(&["OBJECT", "ENCODING", "z"]), Reply::bulk("embstr"));
    c.ok(&["SET", "n", "5"]);
    assert_eq!(c.reply(&["INCRBYFLOAT", "n", "1"]), Reply::bulk("6"));
    c.ok(&["RENAME", "z", "z2"]);
    assert_eq!(c.int(&["COPY", "z2", "z3"]), 1);
    assert_eq!(c.int(&["COPY", "n", "n2"]), 1);
    assert_eq!(c.int(&["MOVE", "n", "1"]), 1);
    for k in ["z2", "z3", "n2"] {
        assert_eq!(
            c.reply(&["OBJECT", "ENCODING", k]),
            Reply::bulk("embstr"),
            "{k}"
        );
    }
    c.ok(&["SELECT", "1"]);
    assert_eq!(c.reply(&["OBJECT", "ENCODING", "n"]), Reply::bulk("embstr"));
    c.ok(&["SELECT", "0"]);
    // An assignment goes by contents again.
    c.ok(&["SET", "z3", "7"]);
    assert_eq!(c.reply(&["OBJECT", "ENCODING", "z3"]), Reply::bulk("int"));
    assert_eq!(c.int(&["COPY", "f", "f2"]), 1);
    assert_eq!(c.reply(&["OBJECT", "ENCODING", "f2"]), Reply::bulk("int"));
}

/// WATCH of a key already expired and not yet deleted (active expiry off), as Redis 7.0
/// keeps `watchedKey.expired`: that key's expiry is no change, nor is its deletion (lazily,
/// by DEL, FLUSHDB or SWAPDB), while a write to it, an expiry after WATCH or a key that
/// appears still fail EXEC. Each case runs on a watching connection (`w`) and another (`o`),
/// on Meridian and on `redis-server`, and every reply must be Redis's. Before, Meridian failed
/// EXEC for every key expired at EXEC time, watched stale or not.
#[test]
fn watch_of_stale_keys_like_redis() {
    if !common::RedisRef::available() {
        eprintln!("redis-server not installed: skipped");
        return;
    }
    // (connection, command); `sleep N` waits N ms.
    let stale = |c: char| vec![(c, "set x foo px 1"), (c, "sleep 10")];
    let tx = vec![('w', "multi"), ('w', "ping"), ('w', "exec")];
    let case = |before: Vec<(char, &'static str)>, between: Vec<(char, &'static str)>| {
        let mut v = vec![('o', "flushall"), ('o', "debug set-active-expire 0")];
        v.extend(before);
        v.push(('w', "watch x"));
        v.extend(between);
        v.extend(tx.clone());
        v.push(('o', "debug set-active-expire 1"));
        v
    };
    let cases: Vec<Vec<(char, &str)>> = vec![
        case(stale('o'), vec![]),
        case(stale('o'), vec![('w', "exists x")]),
        case(stale('o'), vec![('w', "flushdb")]),
        case(stale('o'), vec![('o', "set x new")]),
        case(vec![('o', "set x v px 50")], vec![('o', "sleep 100")]),
        case(
            stale('o'),
            vec![('o', "set x again px 1"), ('o', "sleep 10")],
        ),
        case(stale('o'), vec![('o', "del x")]),
        case(stale('o'), vec![('o', "expire x 100")]),
        case(vec![], stale('o')),
        // SWAPDB: the watcher in db 1.
        case(
            vec![('w', "select 1"), ('o', "select 1")]
                .into_iter()
                .chain(stale('o'))
                .collect(),
            vec![('o', "swapdb 0 1")],
        ),
        case(
            vec![('w', "select 1"), ('o', "select 0")]
                .into_iter()
                .chain(stale('o'))
                .collect(),
            vec![('o', "swapdb 0 1")],
        ),
        case(
            vec![
                ('w', "select 1"),
                ('o', "select 1"),
                ('o', "set x foo px 1"),
                ('o', "select 0"),
                ('o', "set x bar px 1"),
                ('o', "sleep 10"),
            ],
            vec![('o', "swapdb 0 1")],
        ),
        case(
            vec![('w', "select 1"), ('o', "select 1")]
                .into_iter()
                .chain(stale('o'))
                .collect(),
            vec![('o', "select 0"), ('o', "set x live"), ('o', "swapdb 0 1")],
        ),
    ];
    let run = |w: &mut Raw, o: &mut Raw, steps: &[(char, &str)]| -> Vec<String> {
        let mut out = Vec::new();
        for &(c, line) in steps {
            if let Some(ms) = line.strip_prefix("sleep ") {
                std::thread::sleep(Duration::from_millis(ms.parse().unwrap()));
                continue;
            }
            let conn = if c == 'w' { &mut *w } else { &mut *o };
            out.push(format!("{c}: {line} -> {}", conn.call_line(line)));
        }
        out
    };
    let redis = common::RedisRef::start();
    let ours = Server::start();
    for steps in &cases {
        let (mut rw, mut ro) = (redis.connect(), redis.connect());
        let (mut mw, mut mo) = (ours.connect(), ours.connect());
        let want = run(&mut rw, &mut ro, steps);
        let got = run(&mut mw, &mut mo, steps);
        assert_eq!(got, want);
    }
    // DEBUG OBJECT finds a stale key (Redis's `dictFind`), without expiring it.
    let mut c = ours.connect();
    for line in ["flushall", "debug set-active-expire 0", "set x foo px 1"] {
        c.call_line(line);
    }
    std::thread::sleep(Duration::from_millis(10));
    assert!(c.call_line("debug object x").starts_with("+Value at:"));
    assert!(c.call_line("debug object x").starts_with("+Value at:"));
    assert_eq!(c.call_line("exists x"), ":0\r\n");
    assert_eq!(c.call_line("debug object x"), "-ERR no such key\r\n");
    c.call_line("debug set-active-expire 1");
}

/// DEBUG PAUSE-CRON 1 stops every shard's periodic cycle (active expiry among it): a key
/// whose TTL passed stays until the cycle runs again or a command reaches it.
#[test]
fn debug_pause_cron_stops_the_periodic_cycle() {
    let srv = Server::start();
    let mut c = srv.connect();
    assert_eq!(c.call_line("debug pause-cron 1"), "+OK\r\n");
    for i in 0..20 {
        c.call_line(&format!("set k{i} v px 20"));
    }
    std::thread::sleep(Duration::from_millis(400));
    assert_eq!(c.call_line("dbsize"), ":20\r\n");
    assert_eq!(c.call_line("debug pause-cron 0"), "+OK\r\n");
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while c.call_line("dbsize") != ":0\r\n" {
        assert!(
            std::time::Instant::now() < deadline,
            "the cycle never ran again"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

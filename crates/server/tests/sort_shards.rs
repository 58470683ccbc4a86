//! SORT and SORT_RO on a server with several shards (3, whatever `MERIDIAN_TEST_SHARDS` says), whose
//! sorted key, BY and GET pattern keys and STORE destination are on different shards: the
//! main port coordinates them (`sort_across`) and must answer byte for byte as one
//! `redis-server` 7.0.15 does with the same data. Also: an empty result deleting the
//! destination and waking its WATCH, RESP3, keyspace events, the ACL rule, the per-job lookup limit at and one past
//! it, counting, and the refusal inside MULTI/EXEC, scripts and on the cluster endpoints.

mod common;

use common::text::s;
use common::{Raw, RedisRef, Server};

/// Shard threads of every server here: several whatever `MERIDIAN_TEST_SHARDS` says, since
/// these tests are about keys on different shards.
const SHARDS: &str = "3";

/// Sends `args` to both servers and asserts equal replies; returns Meridian's.
fn both(m: &mut Raw, r: &mut Raw, args: &[&str]) -> String {
    let got = s(&m.call_strs(args));
    let want = s(&r.call_strs(args));
    assert_eq!(got, want, "reply to {args:?}");
    got
}

/// The same data on both servers: a list, a set and a sorted set of 1..=20, weights as
/// strings (`w_`), names (`o_`), hashes (`h_` with fields `f` and `name`), a few keys of
/// other types or missing where a pattern points.
fn load(c: &mut Raw) {
    let order = [
        7, 3, 19, 1, 12, 20, 5, 16, 9, 2, 14, 11, 18, 4, 8, 15, 6, 17, 10, 13,
    ];
    let mut rpush = vec!["RPUSH".to_string(), "l".to_string()];
    rpush.extend(order.iter().map(|i| i.to_string()));
    let args: Vec<&str> = rpush.iter().map(String::as_str).collect();
    assert_eq!(s(&c.call_strs(&args)), ":20\r\n");
    let mut sadd = vec!["SADD".to_string(), "s".to_string()];
    sadd.extend(order.iter().map(|i| i.to_string()));
    let args: Vec<&str> = sadd.iter().map(String::as_str).collect();
    assert_eq!(s(&c.call_strs(&args)), ":20\r\n");
    for i in 1..=20u32 {
        let n = i.to_string();
        // Weights in an order of their own, two equal, one missing (7).
        let w = ((i * 37) % 23).to_string();
        if i != 7 {
            c.call_strs(&["SET", &format!("w_{i}"), if i == 4 { "10" } else { &w }]);
        }
        c.call_strs(&["SET", &format!("o_{i}"), &format!("name-{}", (i * 7) % 20)]);
        c.call_strs(&[
            "HSET",
            &format!("h_{i}"),
            "f",
            &((i * 11) % 17).to_string(),
            "name",
            &format!("h{n}"),
        ]);
        c.call_strs(&["ZADD", "z", &((i * 5) % 21).to_string(), &n]);
    }
    // A pattern key of another type reads as missing.
    c.call_strs(&["DEL", "o_3"]);
    c.call_strs(&["RPUSH", "o_3", "x"]);
    c.call_strs(&["SET", "str", "v"]);
}

#[test]
fn sort_across_shards_answers_as_redis() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let redis = RedisRef::start();
    let mut m = srv.connect();
    let mut r = redis.connect();
    load(&mut m);
    load(&mut r);
    // BY a key: the old routing refused it ("BY option of SORT denied in Cluster mode").
    let by = both(&mut m, &mut r, &["SORT", "l", "BY", "w_*"]);
    assert!(by.starts_with("*20\r\n"), "{by}");
    for args in [
        &[
            "SORT",
            "l",
            "BY",
            "w_*",
            "GET",
            "o_*",
            "GET",
            "#",
            "GET",
            "h_*->name",
        ][..],
        &["SORT", "l", "BY", "h_*->f"],
        &[
            "SORT", "l", "BY", "h_*->f", "DESC", "LIMIT", "2", "5", "GET", "h_*->f",
        ],
        &["SORT", "l", "BY", "o_*", "ALPHA"],
        &["SORT", "l", "BY", "o_*", "ALPHA", "DESC", "GET", "o_*"],
        &["SORT", "l", "BY", "w_*", "LIMIT", "0", "3", "GET", "o_*"],
        &["SORT", "l", "BY", "w_*", "LIMIT", "-5", "4"],
        &["SORT", "l", "BY", "w_*", "LIMIT", "30", "4"],
        &["SORT", "l", "BY", "w_*", "GET", "nostar", "GET", "h_*->"],
        &["SORT", "l", "GET", "o_*"],
        &["SORT", "l", "DESC", "GET", "h_*->f"],
        &["SORT", "s", "BY", "w_*", "GET", "#"],
        &["SORT", "z", "BY", "nosort", "GET", "o_*"],
        &[
            "SORT", "z", "BY", "nosort", "DESC", "LIMIT", "1", "3", "GET", "o_*",
        ],
        &["SORT", "z", "BY", "w_*", "GET", "h_*->name"],
        &["SORT_RO", "l", "BY", "w_*", "GET", "o_*"],
        &["SORT_RO", "l", "BY", "h_*->f", "ALPHA", "LIMIT", "0", "5"],
        // Errors, in Redis's order.
        &["SORT", "l", "BY", "o_*"],
        &["SORT", "str", "BY", "w_*"],
        &["SORT", "l", "BY", "w_*", "LIMIT", "x", "1"],
        &["SORT", "l", "BY", "w_*", "BOGUS"],
        &["SORT_RO", "l", "BY", "w_*", "STORE", "dst"],
        &["SORT", "missing", "BY", "w_*", "GET", "o_*"],
    ] {
        both(&mut m, &mut r, args);
    }
    // STORE across shards: one whole list, missing GET values stored as "".
    for args in [
        &["SORT", "l", "BY", "w_*", "STORE", "dst"][..],
        &["LRANGE", "dst", "0", "-1"],
        &[
            "SORT", "l", "BY", "w_*", "GET", "o_*", "GET", "#", "STORE", "dst2",
        ],
        &["LRANGE", "dst2", "0", "-1"],
        &["TYPE", "dst2"],
        // A set BY nosort with STORE is sorted (ALPHA), whatever the set's order.
        &["SORT", "s", "BY", "nosort", "STORE", "dst"],
        &["LRANGE", "dst", "0", "-1"],
        &["SORT", "l", "BY", "w_*", "LIMIT", "0", "2", "STORE", "str"],
        &["LRANGE", "str", "0", "-1"],
        // An empty result deletes the destination.
        &["SORT", "missing", "BY", "w_*", "STORE", "dst2"],
        &["EXISTS", "dst2"],
        &["SORT", "l", "BY", "w_*", "LIMIT", "50", "1", "STORE", "dst"],
        &["EXISTS", "dst"],
        &["SORT", "str", "STORE", "dst"],
    ] {
        both(&mut m, &mut r, args);
    }
    // RESP3: missing GET values are RESP3 nulls.
    for c in [&mut m, &mut r] {
        let hello = s(&c.call_strs(&["HELLO", "3"]));
        assert!(hello.starts_with('%'), "{hello}");
    }
    both(
        &mut m,
        &mut r,
        &[
            "SORT", "l", "BY", "w_*", "LIMIT", "0", "4", "GET", "o_*", "GET", "#",
        ],
    );
    both(
        &mut m,
        &mut r,
        &["SORT_RO", "z", "BY", "h_*->f", "GET", "nope_*"],
    );
}

#[test]
fn store_across_shards_notifies_sortstore() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let mut c = srv.connect();
    let mut sub = srv.connect();
    assert_eq!(
        s(&c.call_strs(&["CONFIG", "SET", "notify-keyspace-events", "KEA"])),
        "+OK\r\n"
    );
    let subscribed = s(&sub.call_strs(&["SUBSCRIBE", "__keyspace@0__:dst"]));
    assert!(subscribed.contains("subscribe"), "{subscribed}");
    assert_eq!(s(&c.call_strs(&["RPUSH", "src", "b", "a"])), ":2\r\n");
    assert_eq!(
        s(&c.call_strs(&["SORT", "src", "BY", "w_*", "ALPHA", "STORE", "dst"])),
        ":2\r\n"
    );
    assert_eq!(
        s(&sub.read_reply()),
        "*3\r\n$7\r\nmessage\r\n$18\r\n__keyspace@0__:dst\r\n$9\r\nsortstore\r\n"
    );
    // An empty result deletes it: "del".
    assert_eq!(
        s(&c.call_strs(&["SORT", "nothing", "BY", "w_*", "STORE", "dst"])),
        ":0\r\n"
    );
    assert_eq!(
        s(&sub.read_reply()),
        "*3\r\n$7\r\nmessage\r\n$18\r\n__keyspace@0__:dst\r\n$3\r\ndel\r\n"
    );
}

#[test]
fn empty_store_touches_a_watched_destination() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let redis = RedisRef::start();
    for port in [srv.port, redis.port] {
        let mut c = Raw::connect(port);
        let mut other = Raw::connect(port);
        // unit/multi's test: the same client's SORT ... STORE of an empty result.
        assert_eq!(s(&c.call_strs(&["LPUSH", "foo", "bar"])), ":1\r\n");
        assert_eq!(s(&c.call_strs(&["WATCH", "foo"])), "+OK\r\n");
        assert_eq!(
            s(&c.call_strs(&["SORT", "emptylist", "STORE", "foo"])),
            ":0\r\n"
        );
        assert_eq!(s(&c.call_strs(&["MULTI"])), "+OK\r\n");
        assert_eq!(s(&c.call_strs(&["PING"])), "+QUEUED\r\n");
        assert_eq!(s(&c.call_strs(&["EXEC"])), "*-1\r\n", "port {port}");
        assert_eq!(s(&c.call_strs(&["EXISTS", "foo"])), ":0\r\n");
        // Another client's SORT BY ... STORE over a watched key.
        assert_eq!(s(&c.call_strs(&["RPUSH", "src", "2", "1"])), ":2\r\n");
        assert_eq!(s(&c.call_strs(&["WATCH", "out"])), "+OK\r\n");
        assert_eq!(
            s(&other.call_strs(&["SORT", "src", "BY", "k_*", "STORE", "out"])),
            ":2\r\n"
        );
        assert_eq!(s(&c.call_strs(&["MULTI"])), "+OK\r\n");
        assert_eq!(s(&c.call_strs(&["PING"])), "+QUEUED\r\n");
        assert_eq!(s(&c.call_strs(&["EXEC"])), "*-1\r\n", "port {port}");
        assert_eq!(
            s(&c.call_strs(&["LRANGE", "out", "0", "-1"])),
            "*2\r\n$1\r\n1\r\n$1\r\n2\r\n"
        );
    }
}

#[test]
fn by_and_get_need_full_key_access() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let redis = RedisRef::start();
    let mut m = srv.connect();
    let mut r = redis.connect();
    for args in [
        &["RPUSH", "l", "2", "1"][..],
        &["ACL", "SETUSER", "u", "on", ">p", "+@all", "~l", "~dst"],
        &["AUTH", "u", "p"],
        &["SORT", "l"],
        &["SORT", "l", "BY", "w_*"],
        &["SORT", "l", "GET", "o_*"],
        &["SORT", "l", "BY", "nosort", "STORE", "dst"],
        &["SORT", "l", "BY", "w_*", "STORE", "dst"],
    ] {
        both(&mut m, &mut r, args);
    }
}

/// A pattern whose keys all hash to one shard (`{t}`) puts every lookup on that shard:
/// `SORT_LOOKUPS_PER_JOB_MAX` (4096) of them make one job, one more makes two. The
/// replies are Redis's either way.
#[test]
fn lookups_per_job_at_the_limit_and_one_past() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let redis = RedisRef::start();
    let mut m = srv.connect();
    let mut r = redis.connect();
    for n in [4096u32, 4097] {
        let key = format!("l{n}");
        let mut rpush = vec!["RPUSH".to_string(), key.clone()];
        let mut mset = vec!["MSET".to_string()];
        for i in 0..n {
            rpush.push(i.to_string());
            mset.push(format!("{{t}}w_{i}"));
            mset.push(((i * 7919) % n).to_string());
            mset.push(format!("{{t}}o_{i}"));
            mset.push(format!("o{i}"));
        }
        for c in [&mut m, &mut r] {
            let a: Vec<&str> = rpush.iter().map(String::as_str).collect();
            assert_eq!(s(&c.call_strs(&a)), format!(":{n}\r\n"));
            let a: Vec<&str> = mset.iter().map(String::as_str).collect();
            assert_eq!(s(&c.call_strs(&a)), "+OK\r\n");
        }
        let got = both(
            &mut m,
            &mut r,
            &["SORT", &key, "BY", "{t}w_*", "GET", "{t}o_*"],
        );
        assert!(got.starts_with(&format!("*{n}\r\n")), "{}", &got[..20]);
        both(
            &mut m,
            &mut r,
            &[
                "SORT", &key, "BY", "{t}w_*", "DESC", "GET", "#", "STORE", "out",
            ],
        );
        both(&mut m, &mut r, &["LRANGE", "out", "0", "-1"]);
    }
}

#[test]
fn counted_once_and_refused_where_one_shard_runs_it() {
    let srv = Server::start_with(&["--shards", SHARDS]);
    let mut c = srv.connect();
    assert_eq!(s(&c.call_strs(&["RPUSH", "l", "2", "1"])), ":2\r\n");
    assert_eq!(s(&c.call_strs(&["CONFIG", "RESETSTAT"])), "+OK\r\n");
    assert_eq!(
        s(&c.call_strs(&["SORT", "l", "BY", "w_*", "STORE", "dst"])),
        ":2\r\n"
    );
    assert_eq!(
        s(&c.call_strs(&["SORT", "l", "BY", "o_*", "ALPHA"])),
        "*2\r\n$1\r\n2\r\n$1\r\n1\r\n",
        "missing values compare equal: the list's order stays"
    );
    assert_eq!(
        s(&c.call_strs(&["SORT", "l", "BY", "w_*", "junk"])),
        "-ERR syntax error\r\n"
    );
    let stats = s(&c.call_strs(&["INFO", "commandstats"]));
    assert!(
        stats.contains("cmdstat_sort:calls=3,") && stats.contains("failed_calls=1"),
        "{stats}"
    );
    // Inside a transaction its patterns' keys are read with every shard held.
    let by = "-ERR BY option of SORT denied in Cluster mode.\r\n";
    assert_eq!(s(&c.call_strs(&["SET", "w_1", "9"])), "+OK\r\n");
    assert_eq!(s(&c.call_strs(&["MULTI"])), "+OK\r\n");
    assert_eq!(s(&c.call_strs(&["SORT", "l", "BY", "w_*"])), "+QUEUED\r\n");
    assert_eq!(s(&c.call_strs(&["SORT", "l", "GET", "#"])), "+QUEUED\r\n");
    assert_eq!(
        s(&c.call_strs(&["EXEC"])),
        "*2\r\n*2\r\n$1\r\n2\r\n$1\r\n1\r\n*2\r\n$1\r\n1\r\n$1\r\n2\r\n"
    );
    assert_eq!(s(&c.call_strs(&["DEL", "w_1"])), ":1\r\n");
    // A pattern pinned to the sorted key's slot by a hash tag runs there.
    assert_eq!(s(&c.call_strs(&["MULTI"])), "+OK\r\n");
    assert_eq!(
        s(&c.call_strs(&["SORT", "l", "BY", "{l}w_*", "GET", "{l}o_*"])),
        "+QUEUED\r\n"
    );
    assert_eq!(s(&c.call_strs(&["EXEC"])), "*1\r\n*2\r\n$-1\r\n$-1\r\n");
    // So in a script, which runs again with every shard held; one that wrote before gets
    // Redis Cluster's refusal.
    assert_eq!(s(&c.call_strs(&["SET", "o_2", "two"])), "+OK\r\n");
    let script = s(&c.call_strs(&[
        "EVAL",
        "return redis.call('sort', KEYS[1], 'get', 'o_*')",
        "1",
        "l",
    ]));
    assert_eq!(script, "*2\r\n$-1\r\n$3\r\ntwo\r\n");
    let script = s(&c.call_strs(&[
        "EVAL",
        "redis.call('rpush', KEYS[1], 3) return redis.call('sort', KEYS[1], 'get', 'o_*')",
        "1",
        "l",
    ]));
    assert!(
        script.starts_with("-ERR GET option of SORT denied in Cluster mode"),
        "{script}"
    );
    // On the cluster endpoint of the key's shard (ports P+1..P+shards).
    let mut found = false;
    for p in 1..=3u16 {
        let mut e = Raw::connect(srv.port + p);
        let reply = s(&e.call_strs(&["SORT", "l", "BY", "w_*"]));
        if reply.starts_with("-MOVED") {
            continue;
        }
        assert_eq!(reply, by);
        assert_eq!(
            s(&e.call_strs(&["SORT", "l"])),
            "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n"
        );
        found = true;
    }
    assert!(found, "no endpoint owns l");
}

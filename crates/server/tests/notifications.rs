//! Keyspace notifications over real sockets (Redis 7.0's `notify-keyspace-events`): the flag
//! text CONFIG GET shows, each class's events with Redis's names and order as a subscriber
//! connection receives them (keys spread over the server's shards), `new`, `keymiss`,
//! `expired` from lazy and active expiry, events of writes applied from another site, and a
//! script of write commands whose every event is compared with Debian's `redis-server`.

mod common;

use std::time::{Duration, Instant};

use common::sites::{CONVERGE_TIMEOUT, Cluster, Opts};
use common::{Raw, RedisRef, Server};

const LINKS_UP: Duration = Duration::from_secs(15);
/// How long a subscriber waits for each expected event.
const EVENT_WAIT: Duration = Duration::from_secs(5);
/// Silence that shows no further event was sent.
const QUIET: Duration = Duration::from_millis(300);

/// A connection subscribed to every keyspace and keyevent channel (`__key*`).
fn subscriber(c: Raw) -> Raw {
    let mut c = c;
    assert_eq!(
        c.call_text(&["PSUBSCRIBE", "__key*"]),
        "*3\r\n$10\r\npsubscribe\r\n$6\r\n__key*\r\n:1\r\n"
    );
    c
}

/// Reads the next `expected` messages (as "channel message") and checks that nothing else
/// follows.
fn expect(sub: &mut Raw, expected: &[&str]) {
    let mut got = Vec::new();
    for _ in expected {
        let r = sub
            .try_read_reply(EVENT_WAIT)
            .unwrap_or_else(|e| panic!("no event after {got:?} (wanted {expected:?}): {e}"));
        let parts = common::parse_reply(&r).strings();
        assert_eq!(
            parts.first().map(String::as_str),
            Some("pmessage"),
            "{parts:?}"
        );
        got.push(format!("{} {}", parts[2], parts[3]));
    }
    assert_eq!(got, expected);
    let (rest, _) = sub.read_until_quiet(QUIET);
    assert!(
        rest.is_empty(),
        "unexpected events after {expected:?}: {}",
        common::escape(&rest)
    );
}

fn config_set(c: &mut Raw, flags: &str) {
    c.ok(&["CONFIG", "SET", "notify-keyspace-events", flags]);
}

#[test]
fn flags_text_and_errors_as_redis() {
    let srv = Server::start();
    let mut c = srv.connect();
    let get = |c: &mut Raw| {
        common::parse_reply(&c.call_strs(&["CONFIG", "GET", "notify-keyspace-events"])).strings()[1]
            .clone()
    };
    assert_eq!(get(&mut c), "");
    for (set, shown) in [
        ("gKE", "gKE"),
        ("$lshzxeKE", "$lshzxeKE"),
        ("KA", "AK"),
        ("EA", "AE"),
        ("KEA", "AKE"),
        ("Em", "Em"),
        ("AKn", "AK"),
        ("Kn", "nK"),
        ("", ""),
    ] {
        config_set(&mut c, set);
        assert_eq!(get(&mut c), shown, "{set}");
    }
    assert_eq!(
        c.err(&["CONFIG", "SET", "notify-keyspace-events", "KQ"]),
        "ERR CONFIG SET failed (possibly related to argument 'notify-keyspace-events') - \
         Invalid event class character. Use 'Ag$lshzxeKEtmdn'."
    );
    // `n` survives beside `A` although CONFIG GET shows `A` alone, as in Redis.
    config_set(&mut c, "AEn");
    let mut sub = subscriber(srv.connect());
    c.ok(&["SET", "fresh", "1"]);
    expect(
        &mut sub,
        &["__keyevent@0__:new fresh", "__keyevent@0__:set fresh"],
    );
}

#[test]
fn off_by_default_and_masked_by_class() {
    let srv = Server::start();
    let mut c = srv.connect();
    let mut sub = subscriber(srv.connect());
    c.ok(&["SET", "a", "1"]);
    c.int(&["LPUSH", "l", "x"]);
    expect(&mut sub, &[]);
    // Without K or E nothing is published, whatever the classes.
    config_set(&mut c, "A");
    c.ok(&["SET", "a", "2"]);
    expect(&mut sub, &[]);
    // Only lists.
    config_set(&mut c, "Kl");
    c.ok(&["SET", "a", "3"]);
    c.int(&["LPUSH", "l", "y"]);
    expect(&mut sub, &["__keyspace@0__:l lpush"]);
}

#[test]
fn generic_events() {
    let srv = Server::start();
    let mut c = srv.connect();
    config_set(&mut c, "KEg");
    let mut sub = subscriber(srv.connect());
    c.ok(&["SET", "foo", "bar"]);
    c.int(&["EXPIRE", "foo", "100"]);
    c.int(&["PERSIST", "foo"]);
    c.int(&["PERSIST", "foo"]);
    c.int(&["DEL", "foo", "nokey"]);
    expect(
        &mut sub,
        &[
            "__keyspace@0__:foo expire",
            "__keyevent@0__:expire foo",
            "__keyspace@0__:foo persist",
            "__keyevent@0__:persist foo",
            "__keyspace@0__:foo del",
            "__keyevent@0__:del foo",
        ],
    );
    config_set(&mut c, "Kg");
    c.ok(&["SET", "{k}1", "v"]);
    c.ok(&["RENAME", "{k}1", "{k}2"]);
    c.int(&["COPY", "{k}2", "{k}3"]);
    c.int(&["MOVE", "{k}3", "1"]);
    c.int(&["EXPIRE", "{k}2", "-1"]);
    expect(
        &mut sub,
        &[
            "__keyspace@0__:{k}1 rename_from",
            "__keyspace@0__:{k}2 rename_to",
            "__keyspace@0__:{k}3 copy_to",
            "__keyspace@0__:{k}3 move_from",
            "__keyspace@1__:{k}3 move_to",
            "__keyspace@0__:{k}2 del",
        ],
    );
    // RESTORE and the GETEX variants.
    c.ok(&["SET", "d", "v"]);
    let dump = c.call_strs(&["DUMP", "d"]);
    let common::Reply::Bulk(payload) = common::parse_reply(&dump) else {
        panic!("DUMP: {}", common::escape(&dump));
    };
    c.reply_b(&[b"RESTORE", b"r", b"0", &payload]);
    c.call_strs(&["GETEX", "d", "EX", "100"]);
    c.call_strs(&["GETEX", "d", "PERSIST"]);
    c.call_strs(&["GETDEL", "d"]);
    expect(
        &mut sub,
        &[
            "__keyspace@0__:r restore",
            "__keyspace@0__:d expire",
            "__keyspace@0__:d persist",
            "__keyspace@0__:d del",
        ],
    );
}

#[test]
fn string_events() {
    let srv = Server::start();
    let mut c = srv.connect();
    config_set(&mut c, "E$");
    let mut sub = subscriber(srv.connect());
    c.ok(&["SET", "s", "1", "EX", "100"]);
    c.int(&["INCR", "s"]);
    c.int(&["DECRBY", "s", "5"]);
    c.call_strs(&["INCRBYFLOAT", "s", "1.5"]);
    c.int(&["APPEND", "s", "x"]);
    c.int(&["SETRANGE", "s", "0", "y"]);
    // One shard's keys: the events in the command's order. (An MSET over several shards
    // runs on each at once: each shard's events in order, the shards' interleaved.)
    c.ok(&["MSET", "{m}1", "a", "{m}2", "b"]);
    c.call_strs(&["GETSET", "{m}1", "c"]);
    c.int(&["PFADD", "h", "a"]);
    c.int(&["PFADD", "h", "a"]);
    expect(
        &mut sub,
        &[
            "__keyevent@0__:set s",
            "__keyevent@0__:incrby s",
            "__keyevent@0__:incrby s",
            "__keyevent@0__:incrbyfloat s",
            "__keyevent@0__:append s",
            "__keyevent@0__:setrange s",
            "__keyevent@0__:set {m}1",
            "__keyevent@0__:set {m}2",
            "__keyevent@0__:set {m}1",
            "__keyevent@0__:pfadd h",
        ],
    );
    // SET's expire is a generic event, after `set`.
    config_set(&mut c, "E$g");
    c.ok(&["SET", "s", "1", "PX", "100000"]);
    expect(
        &mut sub,
        &["__keyevent@0__:set s", "__keyevent@0__:expire s"],
    );
}

#[test]
fn list_events() {
    let srv = Server::start();
    let mut c = srv.connect();
    config_set(&mut c, "KEl");
    let mut sub = subscriber(srv.connect());
    c.int(&["LPUSH", "mylist", "a"]);
    c.int(&["RPUSH", "mylist", "b", "c"]);
    c.call_strs(&["RPOP", "mylist"]);
    expect(
        &mut sub,
        &[
            "__keyspace@0__:mylist lpush",
            "__keyevent@0__:lpush mylist",
            "__keyspace@0__:mylist rpush",
            "__keyevent@0__:rpush mylist",
            "__keyspace@0__:mylist rpop",
            "__keyevent@0__:rpop mylist",
        ],
    );
    config_set(&mut c, "Klg");
    c.int(&["LINSERT", "mylist", "BEFORE", "a", "z"]);
    c.ok(&["LSET", "mylist", "0", "y"]);
    c.int(&["LREM", "mylist", "0", "nothing"]);
    c.int(&["LREM", "mylist", "0", "y"]);
    c.ok(&["LTRIM", "mylist", "0", "0"]);
    c.call_strs(&["LMOVE", "{l}src", "{l}dst", "LEFT", "RIGHT"]);
    c.int(&["RPUSH", "{l}src", "v"]);
    c.call_strs(&["LMOVE", "{l}src", "{l}dst", "LEFT", "RIGHT"]);
    c.call_strs(&["LPOP", "mylist"]);
    expect(
        &mut sub,
        &[
            "__keyspace@0__:mylist linsert",
            "__keyspace@0__:mylist lset",
            "__keyspace@0__:mylist lrem",
            "__keyspace@0__:mylist ltrim",
            "__keyspace@0__:{l}src rpush",
            "__keyspace@0__:{l}dst rpush",
            "__keyspace@0__:{l}src lpop",
            "__keyspace@0__:{l}src del",
            "__keyspace@0__:mylist lpop",
            "__keyspace@0__:mylist del",
        ],
    );
    // A blocked pop served by a later push.
    let mut blocked = srv.connect();
    blocked.send_cmd(&[b"BLPOP", b"q", b"5"]);
    std::thread::sleep(Duration::from_millis(100));
    c.int(&["RPUSH", "q", "job"]);
    assert_eq!(
        common::parse_reply(&blocked.read_reply()).strings(),
        ["q", "job"]
    );
    expect(
        &mut sub,
        &[
            "__keyspace@0__:q rpush",
            "__keyspace@0__:q lpop",
            "__keyspace@0__:q del",
        ],
    );
}

#[test]
fn set_events() {
    let srv = Server::start();
    let mut c = srv.connect();
    config_set(&mut c, "Ksg");
    let mut sub = subscriber(srv.connect());
    c.int(&["SADD", "myset", "foo"]);
    c.int(&["SADD", "myset", "foo"]);
    c.int(&["SADD", "myset", "bar"]);
    c.int(&["SREM", "myset", "x"]);
    c.int(&["SREM", "myset", "foo"]);
    c.int(&["SADD", "{s}a", "m"]);
    c.int(&["SMOVE", "{s}a", "{s}b", "m"]);
    c.int(&["SINTERSTORE", "{s}c", "{s}b", "{s}b"]);
    c.int(&["SINTERSTORE", "{s}c", "{s}b", "{s}none"]);
    c.call_strs(&["SPOP", "myset"]);
    expect(
        &mut sub,
        &[
            "__keyspace@0__:myset sadd",
            "__keyspace@0__:myset sadd",
            "__keyspace@0__:myset srem",
            "__keyspace@0__:{s}a sadd",
            "__keyspace@0__:{s}a srem",
            "__keyspace@0__:{s}a del",
            "__keyspace@0__:{s}b sadd",
            "__keyspace@0__:{s}c sinterstore",
            "__keyspace@0__:{s}c del",
            "__keyspace@0__:myset spop",
            "__keyspace@0__:myset del",
        ],
    );
}

#[test]
fn zset_and_geo_events() {
    let srv = Server::start();
    let mut c = srv.connect();
    config_set(&mut c, "Kzg");
    let mut sub = subscriber(srv.connect());
    c.int(&["ZADD", "myzset", "1", "a"]);
    c.int(&["ZADD", "myzset", "1", "a"]);
    c.int(&["ZADD", "myzset", "2", "b"]);
    c.call_strs(&["ZINCRBY", "myzset", "1", "a"]);
    c.int(&["ZREM", "myzset", "x"]);
    c.int(&["ZREM", "myzset", "a"]);
    c.int(&["ZREMRANGEBYSCORE", "myzset", "0", "10"]);
    c.int(&["ZADD", "{z}1", "1", "a", "2", "b"]);
    c.int(&["ZUNIONSTORE", "{z}2", "1", "{z}1"]);
    c.int(&["ZRANGESTORE", "{z}3", "{z}1", "0", "0"]);
    c.call_strs(&["ZPOPMAX", "{z}3"]);
    c.int(&["GEOADD", "geo", "13.361389", "38.115556", "Palermo"]);
    c.int(&[
        "GEOSEARCHSTORE",
        "{z}4",
        "{z}1",
        "FROMLONLAT",
        "0",
        "0",
        "BYRADIUS",
        "1",
        "m",
    ]);
    expect(
        &mut sub,
        &[
            "__keyspace@0__:myzset zadd",
            "__keyspace@0__:myzset zadd",
            "__keyspace@0__:myzset zincr",
            "__keyspace@0__:myzset zrem",
            "__keyspace@0__:myzset zremrangebyscore",
            "__keyspace@0__:myzset del",
            "__keyspace@0__:{z}1 zadd",
            "__keyspace@0__:{z}2 zunionstore",
            "__keyspace@0__:{z}3 zrangestore",
            "__keyspace@0__:{z}3 zpopmax",
            "__keyspace@0__:{z}3 del",
            "__keyspace@0__:geo zadd",
        ],
    );
}

#[test]
fn hash_events() {
    let srv = Server::start();
    let mut c = srv.connect();
    config_set(&mut c, "Khg");
    let mut sub = subscriber(srv.connect());
    c.int(&["HSET", "myhash", "yes", "1"]);
    c.int(&["HINCRBY", "myhash", "yes", "10"]);
    c.call_strs(&["HINCRBYFLOAT", "myhash", "yes", "0.5"]);
    c.int(&["HSETNX", "myhash", "yes", "2"]);
    c.int(&["HDEL", "myhash", "no"]);
    c.int(&["HDEL", "myhash", "yes"]);
    expect(
        &mut sub,
        &[
            "__keyspace@0__:myhash hset",
            "__keyspace@0__:myhash hincrby",
            "__keyspace@0__:myhash hincrbyfloat",
            "__keyspace@0__:myhash hdel",
            "__keyspace@0__:myhash del",
        ],
    );
}

#[test]
fn stream_events() {
    let srv = Server::start();
    let mut c = srv.connect();
    config_set(&mut c, "Kt");
    let mut sub = subscriber(srv.connect());
    c.ok(&["XGROUP", "CREATE", "mystream", "mygroup", "$", "MKSTREAM"]);
    c.int(&["XGROUP", "CREATECONSUMER", "mystream", "mygroup", "Bob"]);
    let id = String::from_utf8(c.call_strs(&["XADD", "mystream", "1", "field1", "A"])).unwrap();
    let id = id.trim_end().rsplit('\n').next().unwrap().to_string();
    c.call_strs(&[
        "XREADGROUP",
        "GROUP",
        "mygroup",
        "Alice",
        "STREAMS",
        "mystream",
        ">",
    ]);
    c.call_strs(&["XCLAIM", "mystream", "mygroup", "Mike", "0", &id, "FORCE"]);
    c.int(&["XGROUP", "DELCONSUMER", "mystream", "mygroup", "Lee"]);
    c.call_strs(&["XAUTOCLAIM", "mystream", "mygroup", "Bob", "0", &id]);
    c.int(&["XGROUP", "DELCONSUMER", "mystream", "mygroup", "Bob"]);
    c.call_strs(&["XADD", "mystream", "MAXLEN", "1", "2", "f", "v"]);
    c.int(&["XDEL", "mystream", "2-0"]);
    c.ok(&["XGROUP", "SETID", "mystream", "mygroup", "0"]);
    c.ok(&["XSETID", "mystream", "5-0"]);
    c.int(&["XGROUP", "DESTROY", "mystream", "mygroup"]);
    expect(
        &mut sub,
        &[
            "__keyspace@0__:mystream xgroup-create",
            "__keyspace@0__:mystream xgroup-createconsumer",
            "__keyspace@0__:mystream xadd",
            "__keyspace@0__:mystream xgroup-createconsumer",
            "__keyspace@0__:mystream xgroup-createconsumer",
            "__keyspace@0__:mystream xgroup-delconsumer",
            "__keyspace@0__:mystream xadd",
            "__keyspace@0__:mystream xtrim",
            "__keyspace@0__:mystream xdel",
            "__keyspace@0__:mystream xgroup-setid",
            "__keyspace@0__:mystream xsetid",
            "__keyspace@0__:mystream xgroup-destroy",
        ],
    );
}

#[test]
fn sort_store_events() {
    let srv = Server::start();
    let mut c = srv.connect();
    config_set(&mut c, "Klg");
    let mut sub = subscriber(srv.connect());
    c.int(&["RPUSH", "{o}src", "3", "1"]);
    c.int(&["SORT", "{o}src", "STORE", "{o}dst"]);
    c.int(&["SORT", "{o}none", "STORE", "{o}dst"]);
    expect(
        &mut sub,
        &[
            "__keyspace@0__:{o}src rpush",
            "__keyspace@0__:{o}dst sortstore",
            "__keyspace@0__:{o}dst del",
        ],
    );
}

#[test]
fn new_and_keymiss_events() {
    let srv = Server::start();
    let mut c = srv.connect();
    config_set(&mut c, "En");
    let mut sub = subscriber(srv.connect());
    c.ok(&["SET", "foo", "bar"]);
    // A second SET of foo is no `new`.
    c.ok(&["SET", "foo", "baz"]);
    c.ok(&["SET", "bar", "bar"]);
    c.int(&["SADD", "set", "m"]);
    expect(
        &mut sub,
        &[
            "__keyevent@0__:new foo",
            "__keyevent@0__:new bar",
            "__keyevent@0__:new set",
        ],
    );
    config_set(&mut c, "Km");
    c.call_strs(&["GET", "nokey"]);
    c.call_strs(&["GET", "foo"]);
    c.call_strs(&["HGET", "nohash", "f"]);
    c.int(&["EXISTS", "foo", "nokey"]);
    c.int(&["TTL", "nokey"]);
    c.call_strs(&["TYPE", "nokey"]);
    // A write's lookup is no read: no `keymiss`.
    c.int(&["SETNX", "other", "1"]);
    expect(
        &mut sub,
        &[
            "__keyspace@0__:nokey keymiss",
            "__keyspace@0__:nohash keymiss",
            "__keyspace@0__:nokey keymiss",
            "__keyspace@0__:nokey keymiss",
            "__keyspace@0__:nokey keymiss",
        ],
    );
}

#[test]
fn expired_events_lazy_and_active() {
    let srv = Server::start();
    let mut c = srv.connect();
    config_set(&mut c, "Ex");
    let mut sub = subscriber(srv.connect());
    // Active expiry: nobody touches the key.
    c.ok(&["PSETEX", "foo", "100", "1"]);
    expect(&mut sub, &["__keyevent@0__:expired foo"]);
    // Lazy expiry: a read past the deadline, well before the next active cycle (`hz` 1).
    c.ok(&["CONFIG", "SET", "hz", "1"]);
    std::thread::sleep(Duration::from_millis(1100));
    c.ok(&["PSETEX", "bar", "20", "1"]);
    std::thread::sleep(Duration::from_millis(40));
    assert_eq!(c.int(&["EXISTS", "bar"]), 0);
    expect(&mut sub, &["__keyevent@0__:expired bar"]);
    c.ok(&["CONFIG", "SET", "hz", "10"]);
}

#[test]
fn resp3_subscriber_gets_push_frames() {
    let srv = Server::start();
    let mut c = srv.connect();
    config_set(&mut c, "KA");
    let mut sub = srv.connect();
    sub.call_strs(&["HELLO", "3"]);
    assert_eq!(
        sub.call_text(&["SUBSCRIBE", "__keyspace@0__:k"]),
        ">3\r\n$9\r\nsubscribe\r\n$16\r\n__keyspace@0__:k\r\n:1\r\n"
    );
    c.ok(&["SET", "k", "v"]);
    let r = sub.try_read_reply(EVENT_WAIT).expect("event");
    assert_eq!(
        String::from_utf8_lossy(&r),
        ">3\r\n$7\r\nmessage\r\n$16\r\n__keyspace@0__:k\r\n$3\r\nset\r\n"
    );
}

/// Writes applied from another site notify at the receiving site with the events of the
/// writing command (docs/replication.md, keyspace notifications); the writing site notifies
/// its own subscribers as usual.
#[test]
fn remote_writes_notify_at_the_receiving_site() {
    let cluster = Cluster::start(&["a", "b"], Opts::default());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(0).connect();
    let mut b = cluster.site(1).connect();
    config_set(&mut a, "KA");
    config_set(&mut b, "KEAn");
    let mut sub_b = subscriber(cluster.site(1).connect());
    let mut sub_a = subscriber(cluster.site(0).connect());
    a.ok(&["SET", "k", "v"]);
    a.int(&["EXPIRE", "k", "100"]);
    a.int(&["RPUSH", "l", "x", "y"]);
    a.int(&["LPUSH", "l", "w"]);
    a.int(&["SADD", "s", "m"]);
    a.int(&["HSET", "h", "f", "1"]);
    a.int(&["ZADD", "z", "1", "m"]);
    a.int(&["INCRBY", "n", "2"]);
    a.int(&["DEL", "k"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    expect(
        &mut sub_a,
        &[
            "__keyspace@0__:k set",
            "__keyspace@0__:k expire",
            "__keyspace@0__:l rpush",
            "__keyspace@0__:l lpush",
            "__keyspace@0__:s sadd",
            "__keyspace@0__:h hset",
            "__keyspace@0__:z zadd",
            "__keyspace@0__:n incrby",
            "__keyspace@0__:k del",
        ],
    );
    // At b, per key in the order written (ops of different keys may reach b's shards in
    // any relative order): new, the event, del.
    let mut got: Vec<String> = Vec::new();
    let deadline = Instant::now() + EVENT_WAIT;
    while got.len() < 2 * 15 && Instant::now() < deadline {
        if let Ok(r) = sub_b.try_read_reply(Duration::from_millis(200)) {
            let p = common::parse_reply(&r).strings();
            got.push(format!("{} {}", p[2], p[3]));
        }
    }
    let on = |key: &str| -> Vec<String> {
        let space = format!("__keyspace@0__:{key} ");
        got.iter()
            .filter_map(|m| m.strip_prefix(&space).map(str::to_string))
            .collect()
    };
    assert_eq!(on("k"), ["new", "set", "expire", "del"], "{got:?}");
    assert_eq!(on("l"), ["new", "rpush", "lpush"], "{got:?}");
    assert_eq!(on("s"), ["new", "sadd"], "{got:?}");
    assert_eq!(on("h"), ["new", "hset"], "{got:?}");
    assert_eq!(on("z"), ["new", "zadd"], "{got:?}");
    assert_eq!(on("n"), ["new", "incrby"], "{got:?}");
    assert!(
        got.contains(&"__keyevent@0__:rpush l".to_string()),
        "{got:?}"
    );
    assert_eq!(got.len(), 2 * 15, "{got:?}");

    // An expiry at a, replicated as a removal stamped past the deadline: `expired` at b,
    // whichever site removes the key first.
    config_set(&mut b, "Ex");
    sub_b.read_until_quiet(QUIET);
    a.ok(&["PSETEX", "gone", "200", "v"]);
    let r = sub_b
        .try_read_reply(EVENT_WAIT)
        .expect("expired event at b");
    assert_eq!(
        common::parse_reply(&r).strings()[2..],
        ["__keyevent@0__:expired", "gone"]
    );
    expect(&mut sub_b, &[]);
}

/// Write commands (one key slot, `{t}`, so that every one runs with several shards too)
/// whose events are compared with Redis's.
const EVENT_SCRIPT: &str = r#"
SET {t}a 1
SET {t}a 2 XX GET
SET {t}b 1 NX EX 100
SETNX {t}b 2
SETEX {t}c 100 v
GETEX {t}c PERSIST
GETEX {t}c PXAT 1
INCRBY {t}n 5
DECR {t}n
INCRBYFLOAT {t}n 1.5
APPEND {t}s abc
SETRANGE {t}s 1 Z
SETRANGE {t}z 0 ""
MSET {t}m1 a {t}m2 b
MSETNX {t}m1 a {t}m3 c
GETDEL {t}m2
PFADD {t}h a b
PFADD {t}h a
PFMERGE {t}h2 {t}h
RPUSH {t}l a b c d e
LPUSHX {t}l z
RPUSHX {t}nol z
LINSERT {t}l AFTER a q
LINSERT {t}l AFTER nothere q
LSET {t}l 0 y
LREM {t}l 1 q
LTRIM {t}l 0 3
LPOP {t}l 2
RPOPLPUSH {t}l {t}l2
LMOVE {t}l {t}l2 LEFT LEFT
LMPOP 1 {t}l2 RIGHT COUNT 5
SADD {t}s1 a b c
SREM {t}s1 a z
SMOVE {t}s1 {t}s2 b
SMOVE {t}s1 {t}s2 nope
SPOP {t}s1
SADD {t}s3 x y
SUNIONSTORE {t}s4 {t}s3 {t}s2
SDIFFSTORE {t}s4 {t}s3 {t}s3
SPOP {t}s3 5
ZADD {t}z1 1 a 2 b 3 c
ZADD {t}z1 XX CH 5 a
ZADD {t}z1 NX 1 a
ZINCRBY {t}z1 1 b
ZREM {t}z1 zz
ZREMRANGEBYRANK {t}z1 0 0
ZPOPMIN {t}z1
ZADD {t}z2 1 a 2 b
ZINTERSTORE {t}z3 2 {t}z2 {t}z2
ZDIFFSTORE {t}z3 2 {t}z2 {t}z2
ZRANGESTORE {t}z4 {t}z2 0 0
ZMPOP 1 {t}z2 MAX COUNT 9
HSET {t}hh f 1 g 2
HSETNX {t}hh f 3
HSETNX {t}hh k 3
HINCRBY {t}hh f 2
HINCRBYFLOAT {t}hh g 1.5
HDEL {t}hh f g k
EXPIRE {t}a 100
EXPIRE {t}a 100 NX
PEXPIREAT {t}a 99999999999999
PERSIST {t}a
EXPIRE {t}a 0
SET {t}r v
RENAME {t}r {t}r2
RENAMENX {t}r2 {t}b
COPY {t}r2 {t}r3
COPY {t}r2 {t}r3 REPLACE
MOVE {t}r3 3
DEL {t}r2 {t}none
UNLINK {t}b
XADD {t}x 1-1 f v
XADD {t}x MAXLEN 1 2-1 f v
XTRIM {t}x MAXLEN 0
XADD {t}x 3-1 f v
XDEL {t}x 3-1
XSETID {t}x 9-9
XGROUP CREATE {t}x g $
XGROUP SETID {t}x g 0
XGROUP CREATECONSUMER {t}x g c
XGROUP DELCONSUMER {t}x g c
XGROUP DESTROY {t}x g
RPUSH {t}sort 3 1 2
SORT {t}sort STORE {t}sorted
SORT {t}none STORE {t}sorted
GEOADD {t}geo 13.361389 38.115556 Palermo
GEORADIUS {t}geo 15 37 200 km STORE {t}geo2
GEOSEARCHSTORE {t}geo3 {t}geo FROMLONLAT 15 37 BYRADIUS 1 m
SETBIT {t}bits 9 1
SETBIT {t}bits 9 1
SETBIT {t}bits 100 0
BITFIELD {t}bits SET u8 0 255 INCRBY u8 0 1 GET u8 0
BITFIELD {t}bits OVERFLOW FAIL INCRBY u8 0 255
BITFIELD {t}bf2 OVERFLOW FAIL INCRBY u2 0 9
BITOP OR {t}bits2 {t}bits {t}none
BITOP AND {t}bits2 {t}none {t}none2
APPEND {t}bits 1
SETRANGE {t}bits 2 xy
SET {t}k v
GET {t}nokey
COPY {t}nosrc {t}x
EXISTS {t}nokey {t}k
TYPE {t}nokey
TTL {t}nokey
OBJECT ENCODING {t}nokey
HGET {t}nokey f
SWAPDB 0 1
SWAPDB 0 1
FLUSHDB
"#;

/// Runs `EVENT_SCRIPT` with every class on (`KEAnm`) and returns, per command, its reply and
/// the keyspace events a subscriber received for it. After each command the driver
/// publishes a marker the subscriber also receives: every event the command caused is
/// queued before it, so no timing is involved.
fn event_trace(mut c: Raw, sub: Raw) -> Vec<(String, Vec<String>)> {
    let mut sub = sub;
    c.call_strs(&["FLUSHALL"]);
    config_set(&mut c, "KEAnm");
    sub.call_strs(&["PSUBSCRIBE", "__keyspace*"]);
    sub.call_strs(&["SUBSCRIBE", "marker"]);
    let mut trace = Vec::new();
    for (i, line) in EVENT_SCRIPT.lines().filter(|l| !l.is_empty()).enumerate() {
        let args = common::split_args(line.as_bytes()).expect("script line");
        let a: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
        let reply = common::escape(&c.call(&a));
        let mark = i.to_string();
        c.call_strs(&["PUBLISH", "marker", &mark]);
        let mut events = Vec::new();
        loop {
            let r = sub
                .try_read_reply(EVENT_WAIT)
                .unwrap_or_else(|e| panic!("{line}: no marker: {e}"));
            let p = common::parse_reply(&r).strings();
            if p.first().map(String::as_str) == Some("message") {
                assert_eq!(p[2], mark, "{line}");
                break;
            }
            events.push(format!("{} {}", p[2], p[3]));
        }
        trace.push((format!("{line} -> {reply}"), events));
    }
    trace
}

#[test]
fn events_match_redis() {
    assert!(
        RedisRef::available(),
        "redis-server (Redis 7.0.15, the reference) is not on PATH"
    );
    let redis = RedisRef::start();
    let srv = Server::start();
    let want = event_trace(redis.connect(), redis.connect());
    let got = event_trace(srv.connect(), srv.connect());
    let events: usize = want.iter().map(|(_, e)| e.len()).sum();
    assert!(events > 100, "{want:?}");
    assert_eq!(got.len(), want.len());
    // Replies are shown, not compared (SPOP's order is random).
    for ((wl, w), (gl, g)) in want.iter().zip(&got) {
        assert_eq!(g, w, "events differ from Redis's: {gl} (Redis: {wl})");
    }
}

/// Redis's "Keyspace notifications: evicted events": a key evicted for maxmemory notifies
/// `evicted` (class e), once, after it is gone.
#[test]
fn eviction_notifies_evicted() {
    let srv = Server::start();
    let mut c = srv.connect();
    config_set(&mut c, "Ee");
    c.ok(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let mut sub = subscriber(srv.connect());
    c.ok(&["SET", "foo", "bar"]);
    c.ok(&["CONFIG", "SET", "maxmemory", "1"]);
    expect(&mut sub, &["__keyevent@0__:evicted foo"]);
    c.ok(&["CONFIG", "SET", "maxmemory", "0"]);
    assert_eq!(c.call_text(&["EXISTS", "foo"]), ":0\r\n");
}

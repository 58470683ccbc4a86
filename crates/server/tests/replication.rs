//! Replication between real `meridian` processes on loopback (docs/replication.md): data of
//! every type crossing both ways, the seed paper's conflict tables under a partition, a
//! seeded three-site workload with partitions, link resets, a SIGKILLed site, a backlog
//! overflow and a full sync that merges concurrent writes, refusals (deployment id, unlisted
//! peer, TLS chain and name), duplicated and reordered frames, cross-site BLPOP and Pub/Sub,
//! `CRDT.WAIT`, removal metadata kept while a peer is cut off, and rejoining after a
//! quarantine.
//!
//! The three-site workload takes its seed from `MERIDIAN_TEST_SEED` (else the clock) and
//! prints it. `MERIDIAN_TEST_KEEP_LOGS=<dir>` keeps every site's log as
//! `<dir>/<test>.<site>.log`.
//!
//! Every site listens on 127.0.0.1 only; faults come from the loopback proxy in
//! `common/proxy.rs`. Every loop is bounded in count and time, and every process is killed
//! when its `Cluster` drops.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::Raw;
use common::Reply;
use common::sites::{CONVERGE_TIMEOUT, Cluster, MEMORY_BACKLOG_ONLY, Opts, eventually, report};

const A: usize = 0;
const B: usize = 1;
const C: usize = 2;

const LINKS_UP: Duration = Duration::from_secs(15);

/// SplitMix64: a small seeded generator, so a run replays from its printed seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + (self.next() % ((hi - lo + 1) as u64)) as i64
    }
}

/// The test's seed: `MERIDIAN_TEST_SEED` or the clock, printed so that a run can be replayed.
fn seed() -> u64 {
    let s = std::env::var("MERIDIAN_TEST_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("seed: MERIDIAN_TEST_SEED={s}");
    s
}

fn bulk(s: &str) -> Reply {
    Reply::bulk(s)
}

fn members(c: &mut Raw, key: &str) -> BTreeSet<String> {
    match c.reply(&["SMEMBERS", key]) {
        r @ Reply::Array(_) => r.strings().into_iter().collect(),
        other => panic!("SMEMBERS {key}: {other:?}"),
    }
}

fn hgetall(c: &mut Raw, key: &str) -> BTreeMap<String, String> {
    let items = c.reply(&["HGETALL", key]).strings();
    items
        .chunks(2)
        .map(|p| (p[0].clone(), p[1].clone()))
        .collect()
}

fn set_of(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Asserts that `f` holds on every site of `cluster` (given a connection to it).
fn on_all(cluster: &Cluster, sites: &[usize], mut f: impl FnMut(&str, &mut Raw)) {
    for &i in sites {
        let s = cluster.site(i);
        let mut c = s.connect();
        f(&s.id, &mut c);
    }
}

fn assert_no_full_syncs(cluster: &Cluster, sites: &[usize]) {
    for &i in sites {
        for &j in sites {
            if i == j {
                continue;
            }
            let s = cluster.site(i);
            let peer = &cluster.site(j).id;
            let p = s.peer_info(peer);
            assert_eq!(
                (p["full_syncs_in"].as_str(), p["full_syncs_out"].as_str()),
                ("0", "0"),
                "site {} peer {peer}: {p:?}\n{}",
                s.id,
                report(&cluster.all())
            );
        }
    }
}

/// Sends `cmds` pipelined and returns their replies in order.
fn pipeline(c: &mut Raw, cmds: &[Vec<String>]) -> Vec<Reply> {
    let mut bytes = Vec::new();
    for cmd in cmds {
        let args: Vec<&[u8]> = cmd.iter().map(|a| a.as_bytes()).collect();
        bytes.extend_from_slice(&common::cmd(&args));
    }
    c.send(&bytes);
    cmds.iter()
        .map(|_| common::parse_reply(&c.read_reply()))
        .collect()
}

/// SETs `key:0` … `key:4999` to 100-byte values (5,000 ops, about 600 KB of op log: well past
/// a 64 KiB backlog), pipelined 100 at a time; returns the value.
fn write_5000_keys(c: &mut Raw) -> String {
    let value = "x".repeat(100);
    write_keys(c, "key", 5000, &value);
    value
}

/// SETs `<prefix>:0` … `<prefix>:<n - 1>` to `value`, pipelined 100 at a time, asserting
/// every OK.
fn write_keys(c: &mut Raw, prefix: &str, n: usize, value: &str) {
    for start in (0..n).step_by(100) {
        let cmds: Vec<Vec<String>> = (start..n.min(start + 100))
            .map(|i| vec!["SET".into(), format!("{prefix}:{i}"), value.to_string()])
            .collect();
        for r in pipeline(c, &cmds) {
            assert_eq!(r, Reply::Simple("OK".into()));
        }
    }
}

// ---------------------------------------------------------------------------------------
// 1. Every type crosses both ways.
// ---------------------------------------------------------------------------------------

#[test]
fn two_sites_replicate_every_type_both_ways() {
    let cluster = Cluster::start(
        &["a", "b"],
        Opts::default()
            .site_flags(A, &["--sync-compression", "none"])
            .site_flags(B, &["--sync-compression", "zstd"]),
    );
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();

    // Writes at A.
    a.ok(&["SET", "str", "hello"]);
    assert_eq!(a.int(&["INCRBY", "ctr", "5"]), 5);
    assert_eq!(a.int(&["SADD", "set", "x", "y", "z"]), 3);
    assert_eq!(a.int(&["HSET", "h", "f1", "v1", "f2", "v2"]), 2);
    assert_eq!(a.int(&["ZADD", "z", "1", "one", "2", "two"]), 2);
    assert_eq!(a.int(&["RPUSH", "l", "x", "y", "z"]), 3);
    a.ok(&["SET", "ttl", "v"]);
    assert_eq!(a.int(&["EXPIRE", "ttl", "1000"]), 1);
    a.ok(&["SET", "gone", "soon"]);
    a.ok(&["SET", "gone2", "soon"]);
    assert_eq!(a.int(&["DEL", "gone2"]), 1);
    cluster.wait_converged(CONVERGE_TIMEOUT);

    assert_eq!(b.reply(&["GET", "str"]), bulk("hello"));
    assert_eq!(b.reply(&["GET", "ctr"]), bulk("5"));
    assert_eq!(members(&mut b, "set"), set_of(&["x", "y", "z"]));
    assert_eq!(
        hgetall(&mut b, "h"),
        BTreeMap::from([
            ("f1".to_string(), "v1".to_string()),
            ("f2".to_string(), "v2".to_string())
        ])
    );
    assert_eq!(
        b.reply(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]).strings(),
        ["one", "1", "two", "2"]
    );
    assert_eq!(
        b.reply(&["LRANGE", "l", "0", "-1"]).strings(),
        ["x", "y", "z"]
    );
    let ttl = b.int(&["TTL", "ttl"]);
    assert!((990..=1000).contains(&ttl), "TTL at b: {ttl}");
    assert_eq!(b.reply(&["GET", "gone"]), bulk("soon"));
    assert_eq!(b.int(&["EXISTS", "gone2"]), 0);

    // Writes at B, read at A.
    assert_eq!(b.int(&["INCRBY", "ctr", "7"]), 12);
    assert_eq!(b.int(&["SADD", "set", "w"]), 1);
    assert_eq!(b.int(&["SREM", "set", "x"]), 1);
    assert_eq!(b.int(&["HSET", "h", "f3", "v3"]), 1);
    assert_eq!(b.int(&["HDEL", "h", "f1"]), 1);
    assert_eq!(b.reply(&["ZINCRBY", "z", "5", "one"]), bulk("6"));
    assert_eq!(b.int(&["LPUSH", "l", "w"]), 4);
    assert_eq!(b.reply(&["RPOP", "l"]), bulk("z"));
    assert_eq!(b.int(&["EXPIRE", "str", "500"]), 1);
    assert_eq!(b.int(&["DEL", "gone"]), 1);
    b.ok(&["SET", "fromb", "1"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);

    assert_eq!(a.reply(&["GET", "ctr"]), bulk("12"));
    assert_eq!(members(&mut a, "set"), set_of(&["w", "y", "z"]));
    assert_eq!(
        hgetall(&mut a, "h"),
        BTreeMap::from([
            ("f2".to_string(), "v2".to_string()),
            ("f3".to_string(), "v3".to_string())
        ])
    );
    assert_eq!(
        a.reply(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]).strings(),
        ["two", "2", "one", "6"]
    );
    assert_eq!(
        a.reply(&["LRANGE", "l", "0", "-1"]).strings(),
        ["w", "x", "y"]
    );
    let ttl = a.int(&["TTL", "str"]);
    assert!((490..=500).contains(&ttl), "TTL of str at a: {ttl}");
    assert_eq!(a.reply(&["GET", "str"]), bulk("hello"));
    assert_eq!(a.int(&["EXISTS", "gone"]), 0);
    assert_eq!(a.reply(&["GET", "fromb"]), bulk("1"));

    assert_eq!(cluster.site(A).digest(), cluster.site(B).digest());
    for (s, peer) in [(A, "b"), (B, "a")] {
        let p = cluster.site(s).peer_info(peer);
        assert_eq!(p["in_link"], "up", "{p:?}");
        assert_eq!(p["out_link"], "up", "{p:?}");
        assert_eq!(p["full_syncs_in"], "0", "{p:?}");
        assert_eq!(p["full_syncs_out"], "0", "{p:?}");
    }
    // A sends uncompressed: its bytes out are at least the raw bytes; B compresses with zstd.
    let pa = cluster.site(A).peer_info("b");
    assert!(
        pa["out_bytes"].parse::<u64>().unwrap() > 0 && pa["in_bytes"].parse::<u64>().unwrap() > 0,
        "{pa:?}"
    );
}

/// MOVE and SWAPDB are per-key writes (docs/conflicts.md): they reach the other site, and a
/// write there that they did not observe stays in the database it was written to.
#[test]
fn move_and_swapdb_replicate_and_merge_with_concurrent_writes() {
    let cluster = Cluster::start(&["a", "b"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    a.ok(&["SET", "k", "v"]);
    assert_eq!(a.int(&["RPUSH", "l", "x", "y"]), 2);
    a.ok(&["SELECT", "1"]);
    a.ok(&["SET", "one", "1"]);
    a.ok(&["SELECT", "0"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    assert_eq!(a.int(&["MOVE", "l", "2"]), 1);
    a.ok(&["SWAPDB", "0", "1"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    on_all(&cluster, &[A, B], |site, c| {
        c.ok(&["SELECT", "0"]);
        assert_eq!(c.reply(&["GET", "one"]), bulk("1"), "at {site}");
        assert_eq!(c.int(&["EXISTS", "k"]), 0, "at {site}");
        c.ok(&["SELECT", "1"]);
        assert_eq!(c.reply(&["GET", "k"]), bulk("v"), "at {site}");
        c.ok(&["SELECT", "2"]);
        assert_eq!(
            c.reply(&["LRANGE", "l", "0", "-1"]).strings(),
            ["x", "y"],
            "at {site}"
        );
        c.ok(&["SELECT", "0"]);
    });

    // Concurrent: A moves m from db 0 to db 1 while B writes m in db 0.
    a.ok(&["SET", "m", "old"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    cluster.partition(A, B);
    assert_eq!(a.int(&["MOVE", "m", "1"]), 1);
    b.ok(&["SET", "m", "new"]);
    cluster.heal(A, B);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    on_all(&cluster, &[A, B], |site, c| {
        assert_eq!(c.reply(&["GET", "m"]), bulk("new"), "db 0 at {site}");
        c.ok(&["SELECT", "1"]);
        assert_eq!(c.reply(&["GET", "m"]), bulk("old"), "db 1 at {site}");
        c.ok(&["SELECT", "0"]);
    });
    assert_eq!(cluster.site(A).digest(), cluster.site(B).digest());
}

/// A HyperLogLog that MOVE or SWAPDB writes into a key whose removal this site applied
/// (another site's FLUSHALL) carries what this site had seen there. It carried nothing: the
/// moving site dropped its own raise, concurrent with the removal as it looked, while the
/// other site, which had collected that removal, kept it, and the sites differed for good.
#[test]
fn moved_hyperloglog_survives_a_removal_the_destination_held() {
    let cluster = Cluster::start(&["a", "b"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    for (key, moving) in [("c", ["MOVE", "c", "1"]), ("e", ["SWAPDB", "0", "1"])] {
        // The destination's key has a history: written, then removed by A's FLUSHALL.
        assert_eq!(a.int(&["PFADD", key, "x"]), 1);
        cluster.wait_converged(CONVERGE_TIMEOUT);
        a.ok(&["SWAPDB", "0", "1"]);
        cluster.wait_converged(CONVERGE_TIMEOUT);
        a.ok(&["FLUSHALL"]);
        cluster.wait_converged(CONVERGE_TIMEOUT);
        assert_eq!(a.int(&["PFADD", key, "y"]), 1);
        cluster.wait_converged(CONVERGE_TIMEOUT);
        if moving[0] == "MOVE" {
            assert_eq!(b.int(&moving), 1);
        } else {
            b.ok(&moving);
        }
        cluster.wait_converged(CONVERGE_TIMEOUT);
        on_all(&cluster, &[A, B], |site, c| {
            c.ok(&["SELECT", "1"]);
            assert_eq!(c.int(&["PFCOUNT", key]), 1, "{key} in db 1 at {site}");
            c.ok(&["SELECT", "0"]);
            assert_eq!(c.int(&["EXISTS", key]), 0, "{key} in db 0 at {site}");
        });
        a.ok(&["FLUSHALL"]);
        cluster.wait_converged(CONVERGE_TIMEOUT);
    }
    assert_eq!(cluster.site(A).digest(), cluster.site(B).digest());
}

/// Concurrent PFADDs and PFCOUNTs at two sites end with the same bytes at both, sparse layout
/// and cache flag included (docs/conflicts.md §12). The cache flag differed: a site that
/// validated its cache then applied the other site's raise ended invalid, the other valid.
#[test]
fn concurrent_hyperloglog_writes_show_the_same_bytes() {
    let cluster = Cluster::start(&["a", "b"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    let elems = |site: &str, round: usize| -> Vec<String> {
        (0..40).map(|i| format!("{site}{round}-{i}")).collect()
    };
    // Round 0: B's raise is the last write; round 1: A's validation is; round 2: both
    // validate, B last.
    for round in 0..3 {
        let key = format!("h{round}");
        cluster.isolate(B);
        let pfadd = |c: &mut Raw, site: &str| {
            let mut cmd = vec!["PFADD".to_string(), key.clone()];
            cmd.extend(elems(site, round));
            let args: Vec<&str> = cmd.iter().map(String::as_str).collect();
            assert_eq!(c.int(&args), 1, "{key} at {site}");
        };
        // The sites' clocks are one wall clock: a pause between them orders their stamps.
        let pause = || std::thread::sleep(Duration::from_millis(5));
        if round == 1 {
            pfadd(&mut b, "b");
            pause();
            pfadd(&mut a, "a");
            assert!(a.int(&["PFCOUNT", &key]) > 0);
        } else {
            pfadd(&mut a, "a");
            assert!(a.int(&["PFCOUNT", &key]) > 0);
            pause();
            pfadd(&mut b, "b");
            if round == 2 {
                assert!(b.int(&["PFCOUNT", &key]) > 0);
            }
        }
        cluster.heal_all();
        cluster.wait_converged(CONVERGE_TIMEOUT);
        let at_a = a.reply(&["GET", &key]);
        assert_eq!(b.reply(&["GET", &key]), at_a, "{key}: GET differs");
        // The validation with the highest stamp decides the flag (bit 7 of byte 15).
        let Reply::Bulk(bytes) = at_a else {
            panic!("{key}: GET gave no bytes");
        };
        let valid = bytes.get(15).is_some_and(|b| b & 0x80 == 0);
        assert_eq!(valid, round > 0, "{key}: cache flag");
    }
    assert_eq!(cluster.site(A).digest(), cluster.site(B).digest());
}

// ---------------------------------------------------------------------------------------
// 2. The seed paper's Tables 5–7 (and the counter table of docs/conflicts.md §2), end to end.
// ---------------------------------------------------------------------------------------

#[test]
fn seed_tables_under_partition() {
    let cluster = Cluster::start(&["a", "b"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();

    // Table 5: concurrent SADDs to a set union.
    cluster.partition(A, B);
    assert_eq!(a.int(&["SADD", "key1", "A"]), 1); // t1
    assert_eq!(b.int(&["SADD", "key1", "B"]), 1); // t1
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(members(&mut b, "key1"), set_of(&["B"]), "partitioned");
    cluster.heal(A, B); // t2
    cluster.wait_converged(CONVERGE_TIMEOUT);
    on_all(&cluster, &[A, B], |site, c| {
        assert_eq!(members(c, "key1"), set_of(&["A", "B"]), "table 5 at {site}"); // t3
    });

    // Table 6: last write wins for strings.
    cluster.partition(A, B);
    a.ok(&["SET", "key2", "value1"]); // t1
    std::thread::sleep(Duration::from_millis(20));
    b.ok(&["SET", "key2", "value2"]); // t2
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(a.reply(&["GET", "key2"]), bulk("value1"), "partitioned");
    cluster.heal(A, B); // t3
    cluster.wait_converged(CONVERGE_TIMEOUT);
    on_all(&cluster, &[A, B], |site, c| {
        assert_eq!(
            c.reply(&["GET", "key2"]),
            bulk("value2"),
            "table 6 at {site}"
        ); // t4
    });

    // Table 7: an update (APPEND) wins over a concurrent DEL.
    a.ok(&["SET", "key3", "value1"]); // t1
    cluster.wait_converged(CONVERGE_TIMEOUT); // t2
    cluster.partition(A, B);
    assert_eq!(a.int(&["APPEND", "key3", "hello"]), 11); // t3
    assert_eq!(b.int(&["DEL", "key3"]), 1); // t4
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(b.int(&["EXISTS", "key3"]), 0, "partitioned");
    cluster.heal(A, B); // t5
    cluster.wait_converged(CONVERGE_TIMEOUT);
    on_all(&cluster, &[A, B], |site, c| {
        // The seed prints "value1 hello"; APPEND adds no space (docs/conflicts.md §4).
        assert_eq!(
            c.reply(&["GET", "key3"]),
            bulk("value1hello"),
            "table 7 at {site}"
        ); // t6
    });

    // docs/conflicts.md §2: counters add up.
    cluster.partition(A, B);
    assert_eq!(a.int(&["INCRBY", "c", "7"]), 7);
    assert_eq!(b.int(&["INCRBY", "c", "3"]), 3);
    cluster.heal(A, B);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    on_all(&cluster, &[A, B], |site, c| {
        assert_eq!(c.reply(&["GET", "c"]), bulk("10"), "counter at {site}");
    });
    cluster.partition(A, B);
    assert_eq!(a.int(&["DECRBY", "c", "3"]), 7);
    assert_eq!(b.int(&["INCRBY", "c", "6"]), 16);
    cluster.heal(A, B);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    on_all(&cluster, &[A, B], |site, c| {
        assert_eq!(c.reply(&["GET", "c"]), bulk("13"), "counter at {site}");
    });
    assert_no_full_syncs(&cluster, &[A, B]);
}

// ---------------------------------------------------------------------------------------
// 3. Three sites, seeded concurrent workload, partitions during the run.
// ---------------------------------------------------------------------------------------

/// What one client had acknowledged.
#[derive(Default)]
struct Ledger {
    /// Counter key → sum of acknowledged INCRBY deltas (and how many).
    incr: BTreeMap<String, (i64, u64)>,
    /// Add-only set key → acknowledged SADD elements.
    added: BTreeMap<String, BTreeSet<String>>,
    ops: u64,
}

const WORKLOAD_OPS: usize = 2000;

fn workload_client(port: u16, site: &str, seed: u64, done: &AtomicUsize) -> Ledger {
    let mut rng = Rng(seed);
    let mut c = Raw::connect(port);
    let mut ledger = Ledger::default();
    for i in 0..WORKLOAD_OPS {
        let roll = rng.below(100);
        let args: Vec<String> = match roll {
            // Counters: INCRBY only.
            0..=19 => {
                let key = format!("c{}", rng.below(6));
                let delta = rng.range(-20, 20);
                let r = c.reply(&["INCRBY", &key, &delta.to_string()]);
                assert!(matches!(r, Reply::Int(_)), "INCRBY {key}: {r:?}");
                let e = ledger.incr.entry(key).or_default();
                e.0 += delta;
                e.1 += 1;
                done.fetch_add(1, Ordering::SeqCst);
                ledger.ops += 1;
                continue;
            }
            // Add-only sets: unique elements.
            20..=37 => {
                let key = format!("s{}", rng.below(6));
                let elem = format!("{site}:{i}");
                let r = c.reply(&["SADD", &key, &elem]);
                assert_eq!(r, Reply::Int(1), "SADD {key} {elem}");
                ledger.added.entry(key).or_default().insert(elem);
                done.fetch_add(1, Ordering::SeqCst);
                ledger.ops += 1;
                continue;
            }
            38..=45 => vec![
                "SADD".into(),
                format!("r{}", rng.below(3)),
                format!("m{}", rng.below(10)),
            ],
            46..=51 => vec![
                "SREM".into(),
                format!("r{}", rng.below(3)),
                format!("m{}", rng.below(10)),
            ],
            52..=61 => vec![
                "SET".into(),
                format!("k{}", rng.below(5)),
                format!("{site}-{i}"),
            ],
            62..=64 => vec![
                "EXPIRE".into(),
                format!("k{}", rng.below(5)),
                (100_000 + rng.below(1000)).to_string(),
            ],
            65..=71 => vec![
                "HSET".into(),
                format!("h{}", rng.below(3)),
                format!("f{}", rng.below(5)),
                rng.range(0, 1000).to_string(),
            ],
            72..=76 => vec![
                "HINCRBY".into(),
                format!("h{}", rng.below(3)),
                format!("f{}", rng.below(5)),
                rng.range(-10, 10).to_string(),
            ],
            77..=82 => vec![
                "ZADD".into(),
                format!("z{}", rng.below(3)),
                rng.range(0, 100).to_string(),
                format!("m{}", rng.below(5)),
            ],
            83..=86 => vec![
                "ZINCRBY".into(),
                format!("z{}", rng.below(3)),
                rng.range(-5, 5).to_string(),
                format!("m{}", rng.below(5)),
            ],
            87..=92 => vec![
                "LPUSH".into(),
                format!("l{}", rng.below(3)),
                format!("{site}-{i}"),
            ],
            93..=96 => vec!["RPOP".into(), format!("l{}", rng.below(3))],
            _ => {
                let key = match rng.below(4) {
                    0 => format!("r{}", rng.below(3)),
                    1 => format!("k{}", rng.below(5)),
                    2 => format!("h{}", rng.below(3)),
                    _ => format!("l{}", rng.below(3)),
                };
                vec!["DEL".into(), key]
            }
        };
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = c.reply(&argv);
        assert!(!matches!(r, Reply::Err(_)), "{argv:?} at {site}: {r:?}");
        done.fetch_add(1, Ordering::SeqCst);
        ledger.ops += 1;
    }
    ledger
}

/// Waits (bounded) until `done` reaches `n` or every client finished.
fn wait_progress(done: &AtomicUsize, n: usize) {
    let ok = eventually(Duration::from_secs(60), || done.load(Ordering::SeqCst) >= n);
    assert!(
        ok,
        "workload stalled at {} ops",
        done.load(Ordering::SeqCst)
    );
}

#[test]
fn three_sites_random_workload_with_partitions() {
    let seed = seed();
    let cluster = Cluster::start(
        &["a", "b", "c"],
        Opts::proxied()
            .site_flags(A, &["--sync-compression", "lz4"])
            .site_flags(B, &["--sync-compression", "zstd"])
            .site_flags(C, &["--sync-compression", "none"]),
    );
    cluster.wait_links_up(LINKS_UP);
    let done = AtomicUsize::new(0);
    let total = 3 * WORKLOAD_OPS;
    let ledgers: Vec<Ledger> = std::thread::scope(|s| {
        let handles: Vec<_> = cluster
            .sites
            .iter()
            .enumerate()
            .map(|(i, site)| {
                let (port, id, done) = (site.port, site.id.clone(), &done);
                s.spawn(move || workload_client(port, &id, seed ^ (i as u64 + 1), done))
            })
            .collect();
        // The fault schedule, by progress.
        wait_progress(&done, total / 5);
        cluster.partition(A, B);
        wait_progress(&done, 2 * total / 5);
        cluster.heal(A, B);
        cluster.isolate(C);
        wait_progress(&done, 3 * total / 5);
        cluster.heal_all();
        wait_progress(&done, 4 * total / 5);
        cluster.partition(B, C);
        let ledgers = handles
            .into_iter()
            .map(|h| h.join().expect("workload client panicked"))
            .collect();
        cluster.heal_all();
        ledgers
    });
    assert_eq!(
        ledgers.iter().map(|l| l.ops).sum::<u64>(),
        total as u64,
        "every op acknowledged"
    );
    let took = cluster.wait_converged(Duration::from_secs(30));
    eprintln!("converged {took:?} after heal");
    // The partitions cut live links, which came back by resuming.
    for (d, a) in [(A, B), (B, A), (C, A), (A, C), (C, B), (B, C)] {
        let closed = cluster
            .proxy(d, a)
            .stats()
            .closed_by_control
            .load(Ordering::SeqCst);
        assert!(closed > 0, "the partitions never cut link {d}→{a}");
        let resumed = cluster
            .site(d)
            .peer_u64(&cluster.site(a).id, "partial_syncs_in");
        assert!(resumed >= 2, "link {d}→{a} resumed {resumed} times");
    }

    let mut incr: BTreeMap<String, (i64, u64)> = BTreeMap::new();
    let mut added: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for l in &ledgers {
        for (k, (sum, n)) in &l.incr {
            let e = incr.entry(k.clone()).or_default();
            e.0 += sum;
            e.1 += n;
        }
        for (k, els) in &l.added {
            added
                .entry(k.clone())
                .or_default()
                .extend(els.iter().cloned());
        }
    }
    on_all(&cluster, &[A, B, C], |site, c| {
        for (k, (sum, n)) in &incr {
            assert!(*n > 0);
            assert_eq!(
                c.reply(&["GET", k]),
                bulk(&sum.to_string()),
                "counter {k} at {site} (seed {seed})"
            );
        }
        for (k, els) in &added {
            let got = members(c, k);
            let lost: Vec<&String> = els.difference(&got).take(10).collect();
            let unexpected: Vec<&String> = got.difference(els).take(10).collect();
            assert!(
                lost.is_empty() && unexpected.is_empty(),
                "set {k} at {site} (seed {seed}): lost {lost:?}, unexpected {unexpected:?}"
            );
        }
    });
    // The partitions were short: every rejoin resumed from the backlog.
    assert_no_full_syncs(&cluster, &[A, B, C]);
}

// ---------------------------------------------------------------------------------------
// 4. Link resets mid-stream resume by partial sync.
// ---------------------------------------------------------------------------------------

#[test]
fn link_resets_resume_by_partial_sync() {
    let cluster = Cluster::start(
        &["a", "b"],
        Opts::proxied()
            .site_flags(A, &["--sync-compression", "zstd"])
            .site_flags(B, &["--sync-compression", "lz4"]),
    );
    cluster.wait_links_up(LINKS_UP);
    let partial_in0 = cluster.site(B).peer_u64("a", "partial_syncs_in");
    let partial_out0 = cluster.site(A).peer_u64("b", "partial_syncs_out");
    let writing = std::sync::atomic::AtomicBool::new(true);
    let port = cluster.site(A).port;
    let (incrs, resets) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut c = Raw::connect(port);
            let mut incrs = 0i64;
            // 150 pipelined batches of 20: large frames, so resets cut some mid-frame.
            for batch in 0..150 {
                let cmds: Vec<Vec<String>> = (0..20)
                    .map(|j| {
                        let n = batch * 20 + j;
                        if j % 2 == 0 {
                            vec!["INCRBY".into(), "ctr".into(), "1".into()]
                        } else {
                            vec![
                                "SET".into(),
                                format!("key{}", (n / 2) % 500),
                                format!("v{n}"),
                            ]
                        }
                    })
                    .collect();
                for r in pipeline(&mut c, &cmds) {
                    match r {
                        Reply::Int(_) => incrs += 1,
                        Reply::Simple(ok) if ok == "OK" => {}
                        other => panic!("unexpected reply {other:?}"),
                    }
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            writing.store(false, Ordering::SeqCst);
            incrs
        });
        let mut resets = 0u64;
        for i in 0..6 {
            if !writing.load(Ordering::SeqCst) {
                break;
            }
            let proxy = cluster.proxy(B, A);
            // Reset only an established link: a connection is open through the proxy (so the
            // dialer is past `connecting`) and B has its Welcome (`in_link=up`).
            let established = eventually(Duration::from_secs(10), || {
                proxy.live_connections() > 0 && cluster.site(B).peer_info("a")["in_link"] == "up"
            });
            if !established {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
            resets += proxy.reset() as u64;
            if i % 2 == 1 {
                cluster.proxy(A, B).reset();
            }
        }
        (writer.join().expect("writer panicked"), resets)
    });
    assert!(resets >= 2, "only {resets} resets landed while writing");
    cluster.wait_converged(CONVERGE_TIMEOUT);
    on_all(&cluster, &[A, B], |site, c| {
        assert_eq!(
            c.reply(&["GET", "ctr"]),
            bulk(&incrs.to_string()),
            "ctr at {site}"
        );
        assert_eq!(c.int(&["DBSIZE"]), 501, "keys at {site}");
    });
    let partial_in = cluster.site(B).peer_u64("a", "partial_syncs_in");
    let partial_out = cluster.site(A).peer_u64("b", "partial_syncs_out");
    assert!(
        partial_in >= partial_in0 + resets && partial_out >= partial_out0 + resets,
        "partial syncs in {partial_in0}→{partial_in}, out {partial_out0}→{partial_out}, {resets} resets"
    );
    assert_no_full_syncs(&cluster, &[A, B]);
    // Every op A originated was applied at B exactly once.
    assert_eq!(
        cluster.site(B).peer_u64("a", "ops_in"),
        cluster.site(A).info_u64("crdt_seq")
    );
}

// ---------------------------------------------------------------------------------------
// 5. A SIGKILLed site restarts: without its log it catches up by a full sync; with it, by
//    resuming both streams where they stopped.
// ---------------------------------------------------------------------------------------

#[test]
fn killed_site_rejoins_by_full_sync() {
    killed_site_rejoins(false);
}

#[test]
fn killed_site_with_log_resumes_incrementally() {
    killed_site_rejoins(true);
}

fn killed_site_rejoins(log: bool) {
    let appendonly = if log { "yes" } else { "no" };
    let mut cluster = Cluster::start(
        &["a", "b"],
        Opts::default().flags(&[
            "--sync-compression",
            "none",
            "--appendonly",
            appendonly,
            // Without the log: a save policy would keep one for its snapshots.
            "--save",
            if log { "3600 1" } else { "" },
        ]),
    );
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    let set_batch = |c: &mut Raw, prefix: &str, range: std::ops::Range<usize>| {
        let cmds: Vec<Vec<String>> = range
            .map(|i| vec!["SET".into(), format!("{prefix}:{i}"), format!("v{i}")])
            .collect();
        for r in pipeline(c, &cmds) {
            assert_eq!(r, Reply::Simple("OK".into()));
        }
    };
    set_batch(&mut b, "b", 0..100);
    set_batch(&mut a, "a", 0..500);
    cluster.wait_converged(CONVERGE_TIMEOUT);

    // A keeps writing while B is killed and restarted.
    let done = AtomicUsize::new(500);
    let port = cluster.site(A).port;
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut c = Raw::connect(port);
            for chunk in 0..40 {
                let from = 500 + chunk * 50;
                set_batch(&mut c, "a", from..from + 50);
                done.store(from + 50, Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(20));
            }
        });
        wait_progress(&done, 800);
        cluster.site_mut(B).kill();
        wait_progress(&done, 1500);
        cluster.site_mut(B).start();
        writer.join().expect("writer panicked");
    });
    let took = cluster.wait_converged(CONVERGE_TIMEOUT);
    eprintln!("restarted site converged in {took:?}");
    let mut b = cluster.site(B).connect();
    assert_eq!(b.int(&["DBSIZE"]), 2500 + 100);
    let keys = cluster.site(B).keys();
    for i in 0..2500 {
        assert!(keys.contains(&format!("a:{i}")), "a:{i} missing at b");
    }
    // B's own writes before the kill came back from A.
    for i in 0..100 {
        assert!(keys.contains(&format!("b:{i}")), "b:{i} missing at b");
    }
    assert_eq!(b.reply(&["GET", "a:2499"]), bulk("v2499"));
    let p = cluster.site(B).peer_info("a");
    if log {
        // B recovered its keys, A's position and its own sequence numbers: both streams
        // resumed, nothing went as a full sync either way.
        assert_eq!(p["full_syncs_in"], "0", "B after restart: {p:?}");
        assert_eq!(p["partial_syncs_in"], "1", "B after restart: {p:?}");
        assert_eq!(cluster.site(A).peer_u64("b", "full_syncs_out"), 0);
        assert_eq!(cluster.site(A).peer_u64("b", "full_syncs_in"), 0);
        assert!(!cluster.site(B).log().contains("full sync received"));
        // B's writes after the restart still reach A.
        b.ok(&["SET", "b:after", "1"]);
        cluster.wait_converged(CONVERGE_TIMEOUT);
        assert_eq!(
            cluster.site(A).connect().reply(&["GET", "b:after"]),
            bulk("1")
        );
        assert_eq!(cluster.site(A).peer_u64("b", "full_syncs_in"), 0);
    } else {
        assert_eq!(p["full_syncs_in"], "1", "B after restart: {p:?}");
        assert!(cluster.site(B).log().contains("full sync received"));
    }
}

// ---------------------------------------------------------------------------------------
// 6. A peer behind the backlog gets exactly one full sync.
// ---------------------------------------------------------------------------------------

#[test]
fn backlog_overflow_forces_one_full_sync() {
    let cluster = Cluster::start(
        &["a", "b"],
        Opts::proxied()
            .flags(&["--sync-compression", "lz4"])
            // Memory backlog only: the on-disk log would extend it.
            .site_flags(A, MEMORY_BACKLOG_ONLY),
    );
    cluster.wait_links_up(LINKS_UP);
    // The link that carries A's ops to B is the one B dials.
    cluster.proxy(B, A).partition();
    let mut a = cluster.site(A).connect();
    let value = write_5000_keys(&mut a);
    let first = cluster.site(A).info_u64("crdt_oplog_first_seq");
    assert!(first > 1, "the backlog kept everything (first seq {first})");
    assert_eq!(cluster.site(B).connect().int(&["DBSIZE"]), 0, "partitioned");
    cluster.proxy(B, A).heal();
    cluster.wait_converged(CONVERGE_TIMEOUT);
    let mut b = cluster.site(B).connect();
    assert_eq!(b.int(&["DBSIZE"]), 5000);
    assert_eq!(b.reply(&["GET", "key:4999"]), bulk(&value));
    assert_eq!(cluster.site(A).peer_u64("b", "full_syncs_out"), 1);
    assert_eq!(cluster.site(B).peer_u64("a", "full_syncs_in"), 1);
    // A new write after the full sync streams as an op.
    a.ok(&["SET", "after", "1"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    assert_eq!(b.reply(&["GET", "after"]), bulk("1"));
    assert_eq!(cluster.site(B).peer_u64("a", "full_syncs_in"), 1);
}

/// A delta full sync carries removals as well as writes (docs/replication.md §5, §6): B holds
/// a set member, a hash field, a string and a list element; it is killed; A removes them
/// (SREM, HDEL, SET over B's value, RPOP) while its garbage collection runs with B's last ack
/// (which covers the removed writes, not the removals), then overflows its backlog. B comes
/// back with its log (so it holds what it held, and has collected nothing in this process):
/// the one full sync must remove all four there.
#[test]
fn backlog_overflow_full_sync_carries_removals() {
    let mut cluster = Cluster::start(
        &["a", "b"],
        Opts::default()
            .flags(&["--sync-compression", "lz4"])
            .site_flags(A, MEMORY_BACKLOG_ONLY)
            .site_flags(B, &["--appendonly", "yes"]),
    );
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    assert_eq!(b.int(&["SADD", "s", "m1", "m2"]), 2);
    assert_eq!(b.int(&["HSET", "h", "f1", "1", "f2", "2"]), 2);
    b.ok(&["SET", "k", "from-b"]);
    assert_eq!(b.int(&["RPUSH", "l", "x", "y"]), 2);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    let acked = cluster.site(A).peer_info("b")["acked_vv"].clone();

    cluster.site_mut(B).kill();
    assert_eq!(a.int(&["SREM", "s", "m1"]), 1);
    assert_eq!(a.int(&["HDEL", "h", "f1"]), 1);
    a.ok(&["SET", "k", "from-a"]);
    assert_eq!(a.reply(&["RPOP", "l"]), bulk("y"));
    // Several GC passes (ten a second) with B's last ack.
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(cluster.site(A).peer_info("b")["acked_vv"], acked);
    write_5000_keys(&mut a);
    let first = cluster.site(A).info_u64("crdt_oplog_first_seq");
    assert!(first > 1, "the backlog kept everything (first seq {first})");

    cluster.site_mut(B).start();
    cluster.wait_converged(CONVERGE_TIMEOUT);
    assert_eq!(cluster.site(B).peer_u64("a", "full_syncs_in"), 1);
    on_all(&cluster, &[A, B], |site, c| {
        assert_eq!(members(c, "s"), set_of(&["m2"]), "s at {site}");
        assert_eq!(
            hgetall(c, "h"),
            BTreeMap::from([("f2".to_string(), "2".to_string())]),
            "h at {site}"
        );
        assert_eq!(c.reply(&["GET", "k"]), bulk("from-a"), "k at {site}");
        assert_eq!(
            c.reply(&["LRANGE", "l", "0", "-1"]).strings(),
            ["x"],
            "l at {site}"
        );
    });
    // A DEL at A that observed only its own SET leaves nothing of B's value at B.
    assert_eq!(a.int(&["DEL", "k"]), 1);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    assert_eq!(cluster.site(B).connect().int(&["EXISTS", "k"]), 0);
}

/// A full sync merges into what the receiver wrote meanwhile, never overwrites it
/// (docs/replication.md §5): B writes while cut off from A, A overflows its backlog, and B
/// gets A's full sync before A has seen any of B's writes.
#[test]
fn full_sync_merges_concurrent_writes() {
    let cluster = Cluster::start(
        &["a", "b"],
        Opts::proxied()
            .flags(&["--sync-compression", "zstd"])
            .site_flags(A, MEMORY_BACKLOG_ONLY),
    );
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    a.ok(&["SET", "s0", "base"]);
    assert_eq!(a.int(&["SADD", "shared", "x0"]), 1);
    assert_eq!(a.int(&["INCRBY", "cnt", "1"]), 1);
    cluster.wait_converged(CONVERGE_TIMEOUT);

    cluster.partition(A, B);
    write_keys(&mut a, "fill", 2000, &"y".repeat(100));
    assert!(cluster.site(A).info_u64("crdt_oplog_first_seq") > 1);
    assert_eq!(a.int(&["SADD", "shared", "a1"]), 1);
    assert_eq!(a.int(&["INCRBY", "cnt", "7"]), 8);
    assert_eq!(a.int(&["HSET", "h", "fa", "1"]), 1);
    a.ok(&["SET", "lww", "a-val"]);
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(b.int(&["SADD", "shared", "b1"]), 1);
    assert_eq!(b.int(&["INCRBY", "cnt", "5"]), 6);
    assert_eq!(b.int(&["HSET", "h", "fb", "2"]), 1);
    assert_eq!(b.int(&["DEL", "s0"]), 1);
    b.ok(&["SET", "onlyb", "1"]);
    b.ok(&["SET", "lww", "b-val"]);

    // A's ops reach B first, by a full sync; B's ops are still held back.
    cluster.proxy(B, A).heal();
    let synced = eventually(CONVERGE_TIMEOUT, || {
        let p = cluster.site(B).peer_info("a");
        p["in_link"] == "up"
            && p["full_syncs_in"] == "1"
            && cluster.site(A).peer_u64("b", "lag_ops") == 0
    });
    assert!(synced, "no full sync to b\n{}", report(&cluster.all()));
    assert_eq!(members(&mut b, "shared"), set_of(&["x0", "a1", "b1"]));
    assert_eq!(b.reply(&["GET", "cnt"]), bulk("13"));
    assert_eq!(b.reply(&["GET", "onlyb"]), bulk("1"));
    assert_eq!(b.int(&["EXISTS", "s0"]), 0);
    assert_eq!(b.reply(&["GET", "lww"]), bulk("b-val"));
    assert_eq!(b.int(&["HLEN", "h"]), 2);
    assert_eq!(b.int(&["DBSIZE"]), 2000 + 5);
    assert_eq!(
        a.int(&["EXISTS", "onlyb"]),
        0,
        "A's link from B is still cut"
    );

    cluster.proxy(A, B).heal();
    cluster.wait_converged(CONVERGE_TIMEOUT);
    on_all(&cluster, &[A, B], |site, c| {
        assert_eq!(
            members(c, "shared"),
            set_of(&["x0", "a1", "b1"]),
            "at {site}"
        );
        assert_eq!(c.reply(&["GET", "cnt"]), bulk("13"), "at {site}");
        assert_eq!(c.int(&["EXISTS", "s0"]), 0, "at {site}");
        assert_eq!(c.reply(&["GET", "lww"]), bulk("b-val"), "at {site}");
        assert_eq!(
            hgetall(c, "h"),
            BTreeMap::from([
                ("fa".to_string(), "1".to_string()),
                ("fb".to_string(), "2".to_string())
            ]),
            "at {site}"
        );
    });
    // B's backlog kept its ops: A resumed without a full sync.
    assert_eq!(cluster.site(A).peer_u64("b", "full_syncs_in"), 0);
    assert_eq!(cluster.site(B).peer_u64("a", "full_syncs_in"), 1);
}

// ---------------------------------------------------------------------------------------
// 7. Refusals.
// ---------------------------------------------------------------------------------------

/// Asserts for `window` that site `s`'s links with `peer` never come up.
fn assert_never_up(cluster: &Cluster, s: usize, peer: &str, window: Duration) {
    let deadline = Instant::now() + window;
    while Instant::now() < deadline {
        let p = cluster.site(s).peer_info(peer);
        assert!(
            p["in_link"] != "up" && p["out_link"] != "up",
            "site {} link with {peer} came up: {p:?}\n{}",
            cluster.site(s).id,
            report(&cluster.all())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn wrong_deployment_id_is_refused() {
    let cluster = Cluster::start(
        &["a", "b"],
        Opts::default()
            .site_flags(A, &["--deployment-id", "dep-x"])
            .site_flags(B, &["--deployment-id", "dep-y"]),
    );
    cluster.site(A).connect().ok(&["SET", "k", "from-a"]);
    cluster.site(B).connect().ok(&["SET", "j", "from-b"]);
    assert_never_up(&cluster, A, "b", Duration::from_secs(2));
    assert_never_up(&cluster, B, "a", Duration::from_millis(200));
    assert_eq!(cluster.site(B).cmd(&["EXISTS", "k"]), Reply::Int(0));
    assert_eq!(cluster.site(A).cmd(&["EXISTS", "j"]), Reply::Int(0));
    // The accepter logs the refusal with both ids; the dialer records it.
    let log_b = cluster.site(B).log();
    assert!(
        log_b.contains("deployment id") && log_b.contains("dep-x") && log_b.contains("dep-y"),
        "b's log:\n{log_b}"
    );
    let log_a = cluster.site(A).log();
    assert!(
        log_a.contains("deployment id") && log_a.contains("dep-y"),
        "a's log:\n{log_a}"
    );
    let err = &cluster.site(A).peer_info("b")["last_error"];
    assert!(err.contains("deployment id"), "a's last_error for b: {err}");
}

#[test]
fn unlisted_peer_is_refused() {
    // a and b list each other; c lists b, which does not list c.
    let cluster = Cluster::start(
        &["a", "b", "c"],
        Opts::default()
            .peers_of(A, &[B])
            .peers_of(B, &[A])
            .peers_of(C, &[B]),
    );
    wait_links_up_pair(&cluster, A, B);
    cluster.site(B).connect().ok(&["SET", "from-b", "1"]);
    cluster.site(C).connect().ok(&["SET", "from-c", "1"]);
    assert_never_up(&cluster, C, "b", Duration::from_secs(2));
    common::sites::wait_converged(&[cluster.site(A), cluster.site(B)], CONVERGE_TIMEOUT);
    assert_eq!(cluster.site(A).cmd(&["GET", "from-b"]), bulk("1"));
    assert_eq!(cluster.site(C).cmd(&["EXISTS", "from-b"]), Reply::Int(0));
    assert_eq!(cluster.site(B).cmd(&["EXISTS", "from-c"]), Reply::Int(0));
    let log_b = cluster.site(B).log();
    assert!(
        log_b.contains("not a configured peer") && log_b.contains("\"c\""),
        "b's log:\n{log_b}"
    );
    let err = &cluster.site(C).peer_info("b")["last_error"];
    assert!(
        err.contains("not a configured peer"),
        "c's last_error for b: {err}"
    );
}

fn wait_links_up_pair(cluster: &Cluster, x: usize, y: usize) {
    common::sites::wait_links_up(&[cluster.site(x), cluster.site(y)], LINKS_UP);
}

/// A test CA.
struct TestCa {
    cert: rcgen::Certificate,
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

fn new_ca(name: &str) -> TestCa {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let mut p = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    p.distinguished_name.push(DnType::CommonName, name);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let key = KeyPair::generate().expect("ca key");
    let cert = p.self_signed(&key).expect("self-signed ca");
    TestCa {
        cert,
        issuer: rcgen::Issuer::new(p, key),
    }
}

/// Writes a certificate for DNS name `name`, signed by `signer`, its key, and the CA file of
/// `trust` into `dir`, and returns the `--sync-tls-*` flags.
fn tls_flags(
    dir: &std::path::Path,
    file: &str,
    name: &str,
    signer: &TestCa,
    trust: &TestCa,
) -> Vec<String> {
    use rcgen::{CertificateParams, KeyPair};
    let key = KeyPair::generate().expect("site key");
    let cert = CertificateParams::new(vec![name.to_string()])
        .expect("site params")
        .signed_by(&key, &signer.issuer)
        .expect("sign site cert");
    let cert_path = dir.join(format!("{file}.crt"));
    let key_path = dir.join(format!("{file}.key"));
    let ca_path = dir.join(format!("{file}-ca.crt"));
    std::fs::write(&cert_path, cert.pem()).expect("write cert");
    std::fs::write(&key_path, key.serialize_pem()).expect("write key");
    std::fs::write(&ca_path, trust.cert.pem()).expect("write ca");
    vec![
        "--sync-tls-cert".into(),
        cert_path.display().to_string(),
        "--sync-tls-key".into(),
        key_path.display().to_string(),
        "--sync-tls-ca".into(),
        ca_path.display().to_string(),
    ]
}

fn with_site_flags(mut opts: Opts, site: usize, flags: Vec<String>) -> Opts {
    opts.site_flags.entry(site).or_default().extend(flags);
    opts
}

#[test]
fn tls_both_ways_carries_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = new_ca("meridian test ca");
    let mut opts = Opts::default().flags(&["--sync-compression", "zstd"]);
    opts = with_site_flags(opts, A, tls_flags(dir.path(), "a", "a", &ca, &ca));
    opts = with_site_flags(opts, B, tls_flags(dir.path(), "b", "b", &ca, &ca));
    let cluster = Cluster::start(&["a", "b"], opts);
    cluster.wait_links_up(LINKS_UP);
    cluster.site(A).connect().ok(&["SET", "from-a", "1"]);
    assert_eq!(cluster.site(B).connect().int(&["SADD", "from-b", "x"]), 1);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    assert_eq!(cluster.site(B).cmd(&["GET", "from-a"]), bulk("1"));
    assert_eq!(
        members(&mut cluster.site(A).connect(), "from-b"),
        set_of(&["x"])
    );
    for s in [A, B] {
        assert_eq!(cluster.site(s).info_crdt()["crdt_sync_tls"], "1");
    }
}

/// a and b are good sites of CA 1; `c` has the flags given. a lists b and c, b lists a, c
/// lists a. Checks that a–b works, that no link between a and c comes up and that no data
/// crosses it; returns the cluster for the log checks.
fn tls_refusal_cluster(dir: &std::path::Path, ca: &TestCa, c_flags: Vec<String>) -> Cluster {
    let mut opts = Opts::default()
        .peers_of(A, &[B, C])
        .peers_of(B, &[A])
        .peers_of(C, &[A]);
    opts = with_site_flags(opts, A, tls_flags(dir, "a", "a", ca, ca));
    opts = with_site_flags(opts, B, tls_flags(dir, "b", "b", ca, ca));
    opts = with_site_flags(opts, C, c_flags);
    let cluster = Cluster::start(&["a", "b", "c"], opts);
    wait_links_up_pair(&cluster, A, B);
    cluster.site(A).connect().ok(&["SET", "from-a", "1"]);
    cluster.site(C).connect().ok(&["SET", "from-c", "1"]);
    assert_never_up(&cluster, A, "c", Duration::from_secs(2));
    assert_never_up(&cluster, C, "a", Duration::from_millis(200));
    common::sites::wait_converged(&[cluster.site(A), cluster.site(B)], CONVERGE_TIMEOUT);
    assert_eq!(cluster.site(B).cmd(&["GET", "from-a"]), bulk("1"));
    assert_eq!(cluster.site(C).cmd(&["EXISTS", "from-a"]), Reply::Int(0));
    assert_eq!(cluster.site(A).cmd(&["EXISTS", "from-c"]), Reply::Int(0));
    cluster
}

#[test]
fn tls_certificate_from_another_ca_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = new_ca("meridian test ca");
    let other = new_ca("another ca");
    // c's certificate names c but is signed by another CA; c itself trusts CA 1.
    let c_flags = tls_flags(dir.path(), "c", "c", &other, &ca);
    let cluster = tls_refusal_cluster(dir.path(), &ca, c_flags);
    // Both directions fail in the TLS handshake: a refuses c's client certificate, and a
    // refuses c's server certificate when it dials c.
    let log_a = cluster.site(A).log();
    assert!(
        log_a.contains("sync link from peer closed")
            && log_a.contains("invalid peer certificate: UnknownIssuer"),
        "a's log does not show the chain refusal:\n{log_a}"
    );
    let err = &cluster.site(A).peer_info("c")["last_error"];
    assert!(
        err.contains("invalid peer certificate"),
        "a's last_error for c: {err}"
    );
}

#[test]
fn tls_certificate_for_another_name_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = new_ca("meridian test ca");
    // c's certificate chains to CA 1 but is valid for b, not c.
    let c_flags = tls_flags(dir.path(), "c", "b", &ca, &ca);
    let cluster = tls_refusal_cluster(dir.path(), &ca, c_flags);
    let log_a = cluster.site(A).log();
    assert!(
        log_a.contains("not valid for site \"c\""),
        "a's log does not show the name refusal (accepter side):\n{log_a}"
    );
    // And a, dialing c, refuses c's server certificate in the handshake.
    assert!(
        log_a.contains("certificate not valid for name \"c\""),
        "a's log does not show the name refusal (dialer side):\n{log_a}"
    );
}

// ---------------------------------------------------------------------------------------
// 8. Duplicated and reordered frames apply once.
// ---------------------------------------------------------------------------------------

/// Both sites write concurrently, one op per round trip (so one `Ops` frame per op);
/// returns the acknowledged INCRBY sums per counter key.
fn concurrent_writes(cluster: &Cluster, round: usize, ops: usize) -> BTreeMap<String, i64> {
    let results: Vec<BTreeMap<String, i64>> = std::thread::scope(|s| {
        let hs: Vec<_> = [A, B]
            .into_iter()
            .map(|i| {
                let port = cluster.site(i).port;
                let id = cluster.site(i).id.clone();
                s.spawn(move || {
                    let mut rng = Rng(0x5eed ^ ((round as u64) << 8) ^ i as u64);
                    let mut c = Raw::connect(port);
                    let mut sums = BTreeMap::new();
                    for n in 0..ops {
                        let key = format!("ctr{}", rng.below(4));
                        let delta = rng.range(1, 9);
                        let r = c.reply(&["INCRBY", &key, &delta.to_string()]);
                        assert!(matches!(r, Reply::Int(_)), "{r:?}");
                        *sums.entry(key).or_insert(0) += delta;
                        if n % 4 == 0 {
                            let elem = format!("{id}:{round}:{n}");
                            assert_eq!(c.int(&["SADD", "seen", &elem]), 1);
                        }
                    }
                    sums
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("writer panicked"))
            .collect()
    });
    let mut total = BTreeMap::new();
    for r in results {
        for (k, v) in r {
            *total.entry(k).or_insert(0) += v;
        }
    }
    total
}

#[test]
fn duplicated_and_reordered_frames_apply_once() {
    let cluster = Cluster::start(
        &["a", "b"],
        Opts::proxied()
            .site_flags(A, &["--sync-compression", "lz4"])
            .site_flags(B, &["--sync-compression", "none"]),
    );
    cluster.wait_links_up(LINKS_UP);
    let partial_in0 = [
        cluster.site(A).peer_u64("b", "partial_syncs_in"),
        cluster.site(B).peer_u64("a", "partial_syncs_in"),
    ];
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut add = |m: BTreeMap<String, i64>| {
        for (k, v) in m {
            *expected.entry(k).or_insert(0) += v;
        }
    };
    // Round 1: B's ops to A duplicated, A's ops to B reordered.
    cluster.proxy(A, B).duplicate_frames(true);
    cluster.proxy(B, A).reorder_frames(true);
    add(concurrent_writes(&cluster, 1, 300));
    // Round 2: the other way round, and both faults on one link.
    cluster.proxy(A, B).duplicate_frames(false);
    cluster.proxy(B, A).reorder_frames(false);
    cluster.proxy(B, A).duplicate_frames(true);
    cluster.proxy(A, B).reorder_frames(true);
    cluster.proxy(A, B).duplicate_frames(true);
    add(concurrent_writes(&cluster, 2, 300));
    let took = cluster.wait_converged(CONVERGE_TIMEOUT);
    eprintln!("converged in {took:?} with faults on");
    for (d, a) in [(A, B), (B, A)] {
        let st = cluster.proxy(d, a).stats();
        assert!(
            st.duplicated.load(Ordering::SeqCst) > 0 && st.reordered.load(Ordering::SeqCst) > 0,
            "proxy {d}→{a} did not inject faults: {st:?}"
        );
    }
    for (d, a) in [(A, B), (B, A)] {
        cluster.proxy(d, a).duplicate_frames(false);
        cluster.proxy(d, a).reorder_frames(false);
    }
    on_all(&cluster, &[A, B], |site, c| {
        for (k, v) in &expected {
            assert_eq!(c.reply(&["GET", k]), bulk(&v.to_string()), "{k} at {site}");
        }
        assert_eq!(c.int(&["SCARD", "seen"]), 2 * 2 * 75, "seen at {site}");
    });
    // Each op applied exactly once, and no link was dropped over the faults.
    assert_eq!(
        cluster.site(A).peer_u64("b", "ops_in"),
        cluster.site(B).info_u64("crdt_seq")
    );
    assert_eq!(
        cluster.site(B).peer_u64("a", "ops_in"),
        cluster.site(A).info_u64("crdt_seq")
    );
    assert_eq!(
        [
            cluster.site(A).peer_u64("b", "partial_syncs_in"),
            cluster.site(B).peer_u64("a", "partial_syncs_in"),
        ],
        partial_in0,
        "a link was re-established during the faults\n{}",
        report(&cluster.all())
    );
    assert_no_full_syncs(&cluster, &[A, B]);
}

// ---------------------------------------------------------------------------------------
// 9. Remote writes wake blocked clients; PUBLISH crosses sites.
// ---------------------------------------------------------------------------------------

#[test]
fn remote_push_wakes_blpop_and_publish_reaches_subscribers() {
    let cluster = Cluster::start(
        &["a", "b"],
        Opts::default().flags(&["--sync-compression", "zstd"]),
    );
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut blocked = cluster.site(B).connect();
    blocked.send_cmd(&[b"BLPOP", b"q", b"10"]);
    // BLPOP is blocked: nothing arrives for a while.
    assert!(
        blocked.try_read_reply(Duration::from_millis(300)).is_err(),
        "BLPOP answered without a push"
    );
    assert_eq!(a.int(&["LPUSH", "q", "job1"]), 1);
    let r = blocked
        .try_read_reply(Duration::from_secs(5))
        .expect("BLPOP at b woken by LPUSH at a");
    assert_eq!(common::parse_reply(&r).strings(), ["q", "job1"]);
    // The pop at B removes the element at A too.
    cluster.wait_converged(CONVERGE_TIMEOUT);
    assert_eq!(a.int(&["EXISTS", "q"]), 0);

    // Pub/Sub both ways.
    for (pubr, subr) in [(A, B), (B, A)] {
        let mut sub = cluster.site(subr).connect();
        assert_eq!(
            sub.call_text(&["SUBSCRIBE", "news"]),
            "*3\r\n$9\r\nsubscribe\r\n$4\r\nnews\r\n:1\r\n"
        );
        let msg = format!("hello from {}", cluster.site(pubr).id);
        // PUBLISH counts local receivers only.
        assert_eq!(
            cluster.site(pubr).connect().int(&["PUBLISH", "news", &msg]),
            0
        );
        let got = sub
            .try_read_reply(Duration::from_secs(5))
            .expect("message published at the other site");
        assert_eq!(
            common::parse_reply(&got).strings(),
            ["message", "news", msg.as_str()]
        );
    }
}

// ---------------------------------------------------------------------------------------
// 10. CRDT.WAIT.
// ---------------------------------------------------------------------------------------

#[test]
fn crdt_wait_counts_acks_and_times_out_under_partition() {
    let cluster = Cluster::start(&["a", "b"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    a.ok(&["SET", "w1", "v"]);
    let t = Instant::now();
    assert_eq!(a.int(&["CRDT.WAIT", "1", "1000"]), 1);
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "took {:?}",
        t.elapsed()
    );

    cluster.partition(A, B);
    a.ok(&["SET", "w2", "v"]);
    let t = Instant::now();
    assert_eq!(a.int(&["CRDT.WAIT", "1", "1000"]), 0);
    let took = t.elapsed();
    assert!(
        took >= Duration::from_millis(950) && took < Duration::from_secs(3),
        "CRDT.WAIT under partition took {took:?}"
    );
    cluster.heal(A, B);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    let t = Instant::now();
    assert_eq!(a.int(&["CRDT.WAIT", "1", "1000"]), 1);
    assert!(
        t.elapsed() < Duration::from_millis(900),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(cluster.site(B).cmd(&["GET", "w2"]), bulk("v"));
}

// ---------------------------------------------------------------------------------------
// 11. Removal metadata is kept while a peer is cut off (docs/replication.md §6).
// ---------------------------------------------------------------------------------------

#[test]
fn removals_are_not_collected_while_a_peer_is_cut_off() {
    let cluster = Cluster::start(&["a", "b", "c"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut c = cluster.site(C).connect();
    for i in 0..20 {
        a.ok(&["SET", &format!("k{i}"), "v"]);
    }
    assert_eq!(a.int(&["SADD", "s", "x", "y"]), 2);
    assert_eq!(a.int(&["SADD", "t", "x", "y"]), 2);
    cluster.wait_converged(CONVERGE_TIMEOUT);

    cluster.isolate(C);
    for i in 0..20 {
        assert_eq!(a.int(&["DEL", &format!("k{i}")]), 1);
    }
    assert_eq!(a.int(&["DEL", "s"]), 1);
    assert_eq!(a.int(&["SREM", "t", "x"]), 1);
    // A and B agree and keep garbage-collecting; C's silence must hold their removal
    // contexts back.
    common::sites::wait_converged(&[cluster.site(A), cluster.site(B)], CONVERGE_TIMEOUT);
    std::thread::sleep(Duration::from_millis(1500));
    // C, concurrently: updates one deleted key and the deleted set (update wins), and
    // re-adds nothing else.
    c.ok(&["SET", "k0", "from-c"]);
    assert_eq!(c.int(&["SADD", "s", "z"]), 1);
    cluster.heal_all();
    cluster.wait_converged(CONVERGE_TIMEOUT);
    on_all(&cluster, &[A, B, C], |site, conn| {
        assert_eq!(conn.reply(&["GET", "k0"]), bulk("from-c"), "at {site}");
        for i in 1..20 {
            assert_eq!(conn.int(&["EXISTS", &format!("k{i}")]), 0, "k{i} at {site}");
        }
        assert_eq!(members(conn, "s"), set_of(&["z"]), "s at {site}");
        assert_eq!(members(conn, "t"), set_of(&["y"]), "t at {site}");
        assert_eq!(conn.int(&["DBSIZE"]), 3, "at {site}");
    });
    // Once every peer acked, the metadata goes.
    let collected = eventually(Duration::from_secs(15), || {
        cluster
            .sites
            .iter()
            .all(|s| s.info_u64("crdt_gc_pending_keys") == 0)
    });
    assert!(
        collected,
        "removal metadata left\n{}",
        report(&cluster.all())
    );
}

/// A peer silent for longer than `sync-quarantine-ms` stops holding back garbage collection and
/// rejoins by a full sync both ways (docs/replication.md §6). A removal made and collected
/// meanwhile wins: its site had seen the value, and its causal context says so.
#[test]
fn quarantined_peer_rejoins_by_full_sync_and_converges() {
    let cluster = Cluster::start(
        &["a", "b"],
        Opts::proxied().flags(&["--sync-quarantine-ms", "4000", "--sync-compression", "none"]),
    );
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    a.ok(&["SET", "k", "v"]);
    assert_eq!(a.int(&["SADD", "s", "x", "y"]), 2);
    cluster.wait_converged(CONVERGE_TIMEOUT);

    cluster.partition(A, B);
    a.ok(&["SET", "froma", "1"]);
    b.ok(&["SET", "fromb", "1"]);
    assert_eq!(b.int(&["SREM", "s", "x"]), 1);
    // Both sites quarantine each other, and B collects its SREM's context.
    let quarantined = eventually(Duration::from_secs(15), || {
        cluster.site(A).peer_info("b")["quarantined"] == "1"
            && cluster.site(B).peer_info("a")["quarantined"] == "1"
            && cluster.site(B).info_u64("crdt_gc_collected_keys") >= 1
    });
    assert!(quarantined, "no quarantine\n{}", report(&cluster.all()));
    cluster.heal(A, B);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    let sa = members(&mut a, "s");
    assert_eq!(sa, members(&mut b, "s"));
    assert_eq!(sa, set_of(&["y"]));
    on_all(&cluster, &[A, B], |site, c| {
        for k in ["k", "froma", "fromb"] {
            assert_eq!(c.int(&["EXISTS", k]), 1, "{k} at {site}");
        }
    });
    for (s, peer) in [(A, "b"), (B, "a")] {
        let p = cluster.site(s).peer_info(peer);
        assert_eq!(p["full_syncs_in"], "1", "{p:?}");
        assert_eq!(p["quarantined"], "0", "{p:?}");
    }
}

#[test]
fn sighup_reloads_tls_files_without_dropping_links() {
    let dir = tempfile::tempdir().expect("tempdir");
    let ca = new_ca("meridian test ca");
    let mut opts = Opts::default();
    opts = with_site_flags(opts, A, tls_flags(dir.path(), "a", "a", &ca, &ca));
    opts = with_site_flags(opts, B, tls_flags(dir.path(), "b", "b", &ca, &ca));
    let cluster = Cluster::start(&["a", "b"], opts);
    cluster.wait_links_up(LINKS_UP);
    let resumes = |s: usize, peer: &str| {
        let p = cluster.site(s).peer_info(peer);
        (
            p["partial_syncs_in"].clone(),
            p["partial_syncs_out"].clone(),
        )
    };
    let before = (resumes(A, "b"), resumes(B, "a"));
    let hup = |what: &str| {
        let pid = cluster.site(A).pid().expect("a runs");
        let ok = std::process::Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .expect("kill -HUP");
        assert!(ok.success(), "{what}");
    };
    // A new certificate for a, from the same CA: reloaded, links untouched.
    tls_flags(dir.path(), "a", "a", &ca, &ca);
    hup("rotate");
    assert!(
        eventually(Duration::from_secs(5), || cluster
            .site(A)
            .log()
            .contains("sync TLS files reloaded")),
        "{}",
        cluster.site(A).log_tail(20)
    );
    // A broken key: refused, the previous files stay in force, links untouched.
    std::fs::write(dir.path().join("a.key"), "not a key").expect("write");
    hup("break");
    assert!(
        eventually(Duration::from_secs(5), || cluster
            .site(A)
            .log()
            .contains("reload failed")),
        "{}",
        cluster.site(A).log_tail(20)
    );
    cluster.site(A).connect().ok(&["SET", "after-hup", "1"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    assert_eq!(cluster.site(B).cmd(&["GET", "after-hup"]), bulk("1"));
    assert_eq!(
        (resumes(A, "b"), resumes(B, "a")),
        before,
        "no link was re-established"
    );
}

// ---------------------------------------------------------------------------------------
// 14. The on-disk log extends the backlog; a power loss that lost ops a peer holds.
// ---------------------------------------------------------------------------------------

/// A peer behind the in-memory backlog resumes from the log segments on disk: no full sync.
#[test]
fn log_on_disk_extends_the_backlog() {
    let cluster = Cluster::start(
        &["a", "b"],
        Opts::proxied().site_flags(A, &["--backlog-bytes-max", "65536"]),
    );
    cluster.wait_links_up(LINKS_UP);
    cluster.proxy(B, A).partition();
    let mut a = cluster.site(A).connect();
    write_5000_keys(&mut a);
    let first = cluster.site(A).info_u64("crdt_oplog_first_seq");
    assert!(
        first > 1,
        "the memory backlog kept everything (first seq {first})"
    );
    cluster.proxy(B, A).heal();
    cluster.wait_converged(CONVERGE_TIMEOUT);
    assert_eq!(cluster.site(B).connect().int(&["DBSIZE"]), 5000);
    assert_eq!(cluster.site(A).peer_u64("b", "full_syncs_out"), 0);
    assert_eq!(cluster.site(B).peer_u64("a", "full_syncs_in"), 0);
    assert!(cluster.site(B).peer_u64("a", "partial_syncs_in") >= 2);
}

/// Cuts A's newest log segment: to the fsync watermark (a power loss), or `extra_bytes`
/// further back (a disk that lost data it had acknowledged).
fn cut_log(dir: &std::path::Path, extra_bytes: u64) {
    let mark = std::fs::read_to_string(dir.join("fsynced")).expect("watermark");
    let mut parts = mark.split_whitespace();
    let (name, len) = (parts.next().unwrap(), parts.next().unwrap());
    let len: u64 = len.parse().unwrap();
    let seg = dir.join(name);
    std::fs::OpenOptions::new()
        .write(true)
        .open(&seg)
        .unwrap()
        .set_len(len.saturating_sub(extra_bytes).max(24))
        .unwrap();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let n = p.file_name().unwrap().to_string_lossy().into_owned();
        if n.starts_with("log-") && n.as_str() > name {
            std::fs::remove_file(p).unwrap();
        }
    }
}

/// Own ops stream once written, before any fsync. A power loss under `appendfsync no` loses
/// A's unsynced tail, which B holds and C (cut off from A meanwhile) does not. A restarts on
/// another boot id: a new life, whose ops never extend the old life's counter totals,
/// sequence or vector entry; the lost tail comes back to A and to C from B, by full syncs of
/// a retired life, and every acknowledged write is everywhere (docs/replication.md §9).
#[test]
fn power_loss_tail_comes_back_from_a_peer_in_a_new_life() {
    let mut cluster = Cluster::start(
        &["a", "b", "c"],
        Opts::proxied().site_flags(
            A,
            &[
                "--appendfsync",
                "no",
                "--debug-fsync-watermark",
                "yes",
                "--debug-boot-id",
                "boot-1",
            ],
        ),
    );
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    for i in 0..300 {
        a.ok(&["SET", &format!("k:{i}"), "1"]);
    }
    assert_eq!(a.int(&["INCRBY", "cnt", "5"]), 5);
    assert_eq!(a.int(&["SADD", "s", "x"]), 1);
    assert_eq!(a.int(&["CRDT.WAIT", "2", "5000"]), 2, "B and C acked");
    // The tail: B gets it, C does not.
    cluster.partition(A, C);
    for i in 0..200 {
        a.ok(&["SET", &format!("t:{i}"), "2"]);
    }
    assert_eq!(a.int(&["INCRBY", "cnt", "7"]), 12);
    assert_eq!(a.int(&["SADD", "s", "y"]), 1);
    assert_eq!(a.int(&["CRDT.WAIT", "1", "5000"]), 1, "B acked the tail");
    assert_eq!(cluster.site(A).info_u64("crdt_life"), 0);
    let dir = cluster.site(A).dir.path().join("shard-0");
    cluster.site_mut(A).kill();
    // Nothing was fsynced: the power loss takes the whole log.
    cut_log(&dir, 0);
    let site = cluster.site_mut(A);
    let at = site
        .args
        .iter()
        .position(|f| f == "boot-1")
        .expect("boot id flag");
    site.args[at] = "boot-2".into();
    site.start();
    assert_eq!(cluster.site(A).info_u64("crdt_life"), 1);
    let mut a = cluster.site(A).connect();
    a.int(&["INCRBY", "cnt", "1"]);
    a.int(&["SADD", "s", "z"]);
    cluster.heal(A, C);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    for site in [A, B, C] {
        let mut x = cluster.site(site).connect();
        assert_eq!(x.int(&["DBSIZE"]), 502, "site {site}");
        assert_eq!(x.reply(&["GET", "cnt"]), bulk("13"), "site {site}");
        assert_eq!(x.reply(&["GET", "t:199"]), bulk("2"), "site {site}");
        assert_eq!(
            members(&mut x, "s"),
            set_of(&["x", "y", "z"]),
            "site {site}"
        );
    }
    // A and C got the retired life's tail by a full sync (from B, or C from A once A had it).
    assert!(cluster.site(A).peer_u64("b", "full_syncs_in") >= 1);
    let c_full = cluster.site(C).peer_u64("a", "full_syncs_in")
        + cluster.site(C).peer_u64("b", "full_syncs_in");
    assert!(c_full >= 1, "C never took a full sync");
    // A killed again on the same boot loses nothing written: same life, no full sync.
    let full_before = cluster.site(B).peer_u64("a", "full_syncs_out");
    cluster.site_mut(A).kill();
    cluster.site_mut(A).start();
    assert_eq!(cluster.site(A).info_u64("crdt_life"), 1);
    cluster.site(A).connect().ok(&["SET", "after", "1"]);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    assert_eq!(
        cluster.site(B).peer_u64("a", "full_syncs_out"),
        full_before,
        "{}",
        cluster.site(B).log_tail(30)
    );
}

/// A full sync from a peer shard owning fewer slots than the receiver leaves its retired-life
/// entries with that link (`Peer::retired_in`), which the receiver's Hello and acks state
/// (docs/replication.md §5, §9). They are kept on disk (a `RetiredIn` log record, and the
/// snapshot header): a restart of the receiver costs no full sync from that peer again.
///
/// R (one shard, every slot) misses X's writes (its link from X is cut); S (two shards, half
/// the slots each) has them. X is lost and removed at R and S, so its life is retired and
/// each of S's shards full-syncs R for its slots. R is then killed and restarted twice (from
/// its log, then from a snapshot): S's shards choose no full sync again.
#[test]
fn a_restarted_receiver_keeps_the_retired_entries_of_links_from_fewer_slots() {
    const R: usize = 0;
    const S: usize = 1;
    const X: usize = 2;
    let mut cluster = Cluster::start(
        &["r", "s", "x"],
        Opts::proxied().site_flags(S, &["--shards", "2"]),
    );
    cluster.wait_links_up(LINKS_UP);
    // R's link from X carries X's ops to R: cut it; S still receives them.
    cluster.proxy(R, X).partition();
    let mut x = cluster.site(X).connect();
    let keys: Vec<String> = (0..60).map(|i| format!("from-x:{i}")).collect();
    for k in &keys {
        x.ok(&["SET", k, "v"]);
    }
    let has_all = |cluster: &Cluster, site: usize| {
        let at = cluster.site(site).keys();
        keys.iter().all(|k| at.contains(k))
    };
    assert!(
        eventually(Duration::from_secs(30), || has_all(&cluster, S)),
        "S never received X's writes"
    );
    assert!(cluster.site(R).keys().is_empty(), "R got X's writes");
    cluster.site_mut(X).kill();
    for site in [R, S] {
        cluster.site(site).connect().ok(&["CRDT.REMOVEPEER", "x"]);
    }
    fn rs(cluster: &Cluster) -> Vec<&common::sites::Site> {
        vec![cluster.site(R), cluster.site(S)]
    }
    // Each of S's shards is ahead of R on X's retired life: full syncs bring its slots' keys.
    assert!(
        eventually(Duration::from_secs(30), || has_all(&cluster, R)),
        "R never received X's writes\n{}",
        report(&rs(&cluster))
    );
    common::sites::wait_converged(&rs(&cluster), CONVERGE_TIMEOUT);
    let full_out = |cluster: &Cluster| cluster.site(S).peer_u64("r", "full_syncs_out");
    let before = full_out(&cluster);
    assert!(before >= 2, "S's two shards full-synced R {before} times");
    // In memory the entries hold already: the links stay up with no full sync past
    // `RETIRED_RESYNC_AFTER_MS` (3 s).
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(full_out(&cluster), before, "{}", report(&rs(&cluster)));
    let restart_costs_no_full_sync = |cluster: &mut Cluster, how: &str| {
        cluster.site_mut(R).restart();
        common::sites::wait_links_up(&rs(cluster), LINKS_UP);
        // A handshake chooses at once; a link whose acks stay behind is reset after 3 s.
        std::thread::sleep(Duration::from_secs(5));
        common::sites::wait_converged(&rs(cluster), CONVERGE_TIMEOUT);
        let r = cluster.site(R).peer_info("s");
        assert_eq!(
            (full_out(cluster), r["full_syncs_in"].as_str()),
            (before, "0"),
            "restart {how}: S full-synced R again: {r:?}\n{}",
            report(&rs(cluster))
        );
        assert!(has_all(cluster, R), "restart {how}: R lost X's writes");
    };
    restart_costs_no_full_sync(&mut cluster, "from the log");
    // From a snapshot taken after the records: its header carries the entries.
    cluster.site(R).connect().ok(&["SAVE"]);
    restart_costs_no_full_sync(&mut cluster, "from a snapshot");
}

/// Should a disk lose data it had acknowledged, A restarts without ops B holds: B sees A's
/// new incarnation resume below what it applied, and A's next dial gets a full sync that
/// returns them; A's new ops reuse the lost sequence numbers under a new incarnation and are
/// never confused with them.
#[test]
fn own_ops_a_site_lost_come_back_from_a_peer() {
    let mut cluster = Cluster::start(
        &["a", "b"],
        Opts::default().site_flags(A, &["--debug-fsync-watermark", "yes"]),
    );
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    for i in 0..300 {
        a.ok(&["SET", &format!("k:{i}"), "1"]);
    }
    assert_eq!(a.int(&["CRDT.WAIT", "1", "5000"]), 1, "B acked everything");
    let dir = cluster.site(A).dir.path().join("shard-0");
    cluster.site_mut(A).kill();
    // About 40 records of ~60 bytes go missing.
    cut_log(&dir, 2500);
    cluster.site_mut(A).start();
    let mut a = cluster.site(A).connect();
    for i in 0..50 {
        a.ok(&["SET", &format!("after:{i}"), "3"]);
    }
    cluster.wait_converged(CONVERGE_TIMEOUT);
    for site in [A, B] {
        let mut c = cluster.site(site).connect();
        assert_eq!(c.int(&["DBSIZE"]), 350, "site {site}");
        assert_eq!(c.reply(&["GET", "k:299"]), bulk("1"), "site {site}");
        assert_eq!(c.reply(&["GET", "after:49"]), bulk("3"), "site {site}");
    }
    // Only lost ops make a restart with its log take a full sync (see
    // `killed_site_with_log_resumes_incrementally`).
    assert!(cluster.site(A).peer_u64("b", "full_syncs_in") >= 1);
}

// ---------------------------------------------------------------------------------------
// 15. A removal context that reached a site through a third one never removes a write that
//     site has not seen (found by meridian-drill's `conflicts` drill).
// ---------------------------------------------------------------------------------------

#[test]
fn removal_through_a_third_site_keeps_an_unseen_add() {
    let cluster = Cluster::start(&["a", "b", "c"], Opts::proxied());
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut b = cluster.site(B).connect();
    let mut c = cluster.site(C).connect();
    assert_eq!(a.int(&["SADD", "s", "s1", "s2"]), 2);
    assert_eq!(a.int(&["RPUSH", "l", "l1", "l2"]), 2);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    cluster.partition(A, B);
    // b adds y; c sees it, a does not.
    assert_eq!(b.int(&["SADD", "s", "y"]), 1);
    assert_eq!(b.int(&["RPUSH", "l", "y"]), 3);
    let at_c = eventually(CONVERGE_TIMEOUT, || {
        members(&mut c, "s").contains("y") && c.int(&["LLEN", "l"]) == 3
    });
    assert!(at_c, "y never reached c");
    // c, having seen y, removes s1 / the head; a gets that removal but not y.
    assert_eq!(c.int(&["SREM", "s", "s1"]), 1);
    assert_eq!(c.reply(&["LPOP", "l"]), Reply::Bulk(b"l1".to_vec()));
    let at_a = eventually(CONVERGE_TIMEOUT, || {
        members(&mut a, "s") == set_of(&["s2"]) && a.int(&["LLEN", "l"]) == 1
    });
    assert!(
        at_a,
        "c's removals never reached a\n{}",
        report(&cluster.all())
    );
    // a removes its last element: the key goes, but only with what a has seen.
    assert_eq!(a.int(&["SREM", "s", "s2"]), 1);
    assert_eq!(a.reply(&["LPOP", "l"]), Reply::Bulk(b"l2".to_vec()));
    assert_eq!(a.int(&["EXISTS", "s", "l"]), 0);
    cluster.heal(A, B);
    cluster.wait_converged(CONVERGE_TIMEOUT);
    for site in [A, B, C] {
        let mut x = cluster.site(site).connect();
        assert_eq!(members(&mut x, "s"), set_of(&["y"]), "site {site}");
        assert_eq!(
            x.reply(&["LRANGE", "l", "0", "-1"]),
            Reply::Array(vec![Reply::Bulk(b"y".to_vec())]),
            "site {site}"
        );
    }
}

/// Keys of the quarantine-rejoin schedules (issue 16): `s0..s5` hold `keep` and get `m<i>`
/// added then removed; `t0..t2` hold only `m<i>`, so the removal empties them.
const REJOIN_S: usize = 6;
const REJOIN_T: usize = 3;

fn rejoin_keys() -> Vec<(String, String)> {
    (0..REJOIN_S)
        .map(|i| (format!("s{i}"), format!("m{i}")))
        .chain((0..REJOIN_T).map(|i| (format!("t{i}"), format!("m{i}"))))
        .collect()
}

fn quarantined(cluster: &Cluster, site: usize, peer: usize) -> bool {
    cluster.site(site).peer_info(&cluster.site(peer).id)["quarantined"] == "1"
}

fn wait_for(cluster: &Cluster, what: &str, cond: impl FnMut() -> bool) {
    assert!(
        eventually(Duration::from_secs(15), cond),
        "{what}\n{}",
        report(&cluster.all())
    );
}

/// After the rejoin: equal digests, and on every site the removals won (each site that
/// removed had seen the add): `s<i>` is `{keep}` and `t<i>` is gone.
fn assert_rejoined_with_removals(cluster: &Cluster) {
    let took = cluster.wait_converged(CONVERGE_TIMEOUT);
    eprintln!("converged {took:?} after the heal");
    let sites: Vec<usize> = (0..cluster.sites.len()).collect();
    let mut dumps = Vec::new();
    on_all(cluster, &sites, |site, c| {
        let mut dump = Vec::new();
        for (key, _) in rejoin_keys() {
            dump.push((key.clone(), members(c, &key)));
        }
        eprintln!("{site}: {dump:?}");
        dumps.push(dump);
    });
    for (i, dump) in dumps.iter().enumerate() {
        for (key, m) in dump {
            let want = if key.starts_with('s') {
                set_of(&["keep"])
            } else {
                BTreeSet::new()
            };
            assert_eq!(*m, want, "{key} at {}", cluster.site(i).id);
        }
    }
}

/// A few GC steps at the default `hz` (10): `crdt_gc_pending_keys` is as of the last step.
const GC_STEPS: Duration = Duration::from_millis(400);

/// Whether `site` has collected the SREMs' member contexts of `s0..s5` since its
/// `crdt_gc_collected_keys` was `before`. The SREMs that emptied `t0..t2` are key removals,
/// whose contexts wait for the quarantined peer (docs/replication.md §6), so at most those
/// may be left.
fn collects_removals(cluster: &Cluster, site: usize, before: u64) -> bool {
    let s = cluster.site(site);
    s.info_u64("crdt_gc_collected_keys") >= before + REJOIN_S as u64
        && s.info_u64("crdt_gc_pending_keys") <= REJOIN_T as u64
}

fn reset_all_links(cluster: &Cluster) {
    let n = cluster.sites.len();
    for x in 0..n {
        for y in 0..n {
            if x != y {
                cluster.proxy(x, y).reset();
            }
        }
    }
}

/// Issue 16, two sites: A removes members C holds while C is quarantined, and collects the
/// removals; the sets that the removals emptied are gone from A's keyspace. At the rejoin
/// both sites end with the removals applied (they had seen the adds), not with C's copies.
#[test]
fn quarantine_rejoin_keeps_removals_two_sites() {
    let cluster = Cluster::start(
        &["a", "c"],
        Opts::proxied().flags(&["--sync-quarantine-ms", "1000", "--sync-compression", "none"]),
    );
    const C2: usize = 1;
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    for (key, m) in rejoin_keys() {
        if key.starts_with('s') {
            assert_eq!(a.int(&["SADD", &key, "keep"]), 1);
        }
        assert_eq!(a.int(&["SADD", &key, &m]), 1);
    }
    cluster.wait_converged(CONVERGE_TIMEOUT);
    // C←A: A's ops no longer reach C, nor C's acks A. C still hears A's acks of its own
    // (idle) link, so only A quarantines.
    cluster.proxy(C2, A).partition();
    wait_for(&cluster, "A quarantines C", || quarantined(&cluster, A, C2));
    let collected = cluster.site(A).info_u64("crdt_gc_collected_keys");
    for (key, m) in rejoin_keys() {
        assert_eq!(a.int(&["SREM", &key, &m]), 1);
    }
    wait_for(&cluster, "A collects the removals", || {
        collects_removals(&cluster, A, collected)
    });
    assert!(!quarantined(&cluster, C2, A));
    reset_all_links(&cluster);
    cluster.heal_all();
    assert_rejoined_with_removals(&cluster);
}

/// Issue 16, three sites, ordered by what each site has seen rather than by the clock: C
/// has A's adds, B gets the adds and A's removals only after it has quarantined C and
/// collects the removals while C is away; B and C are cut both ways, so C never learns
/// that B saw the adds. At the rejoin, C's copies of the members must not come back on B
/// (B had seen and applied the removals), nor survive on C.
#[test]
fn quarantine_rejoin_keeps_removals_three_sites() {
    let cluster = Cluster::start(
        &["a", "b", "c"],
        Opts::proxied().flags(&["--sync-quarantine-ms", "1000", "--sync-compression", "none"]),
    );
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    let mut c = cluster.site(C).connect();
    for i in 0..REJOIN_S {
        assert_eq!(a.int(&["SADD", &format!("s{i}"), "keep"]), 1);
    }
    cluster.wait_converged(CONVERGE_TIMEOUT);
    cluster.proxy(B, A).partition();
    cluster.partition(B, C);
    for (key, m) in rejoin_keys() {
        assert_eq!(a.int(&["SADD", &key, &m]), 1);
    }
    wait_for(&cluster, "C has the adds", || {
        rejoin_keys()
            .iter()
            .all(|(key, m)| members(&mut c, key).contains(m))
    });
    wait_for(&cluster, "B and C quarantine each other", || {
        quarantined(&cluster, B, C) && quarantined(&cluster, C, B)
    });
    cluster.proxy(C, A).partition();
    cluster.proxy(B, A).heal();
    wait_for(&cluster, "A quarantines C", || quarantined(&cluster, A, C));
    let collected = cluster.site(A).info_u64("crdt_gc_collected_keys");
    for (key, m) in rejoin_keys() {
        assert_eq!(a.int(&["SREM", &key, &m]), 1);
    }
    let mut b = cluster.site(B).connect();
    wait_for(
        &cluster,
        "B applies the removals and A collects them",
        || {
            rejoin_keys()
                .iter()
                .all(|(key, m)| !members(&mut b, key).contains(m))
                && collects_removals(&cluster, A, collected)
        },
    );
    // B applied the removals by ops or by a full sync from A (if A quarantined B too while
    // B←A was cut); either way it holds no member contexts once GC has run on it.
    std::thread::sleep(GC_STEPS);
    wait_for(&cluster, "B holds no member contexts", || {
        cluster.site(B).info_u64("crdt_gc_pending_keys") <= REJOIN_T as u64
    });
    reset_all_links(&cluster);
    cluster.heal_all();
    assert_rejoined_with_removals(&cluster);
}

/// Issue 16's schedule with the reported timings (relative to t0): cut B←A and C←B at 1.0
/// s; adds at 1.05–1.35 s; heal B←A and cut C←A at 1.7 s; removals at 1.8–2.1 s; reset every
/// link at 2.5 s, heal at 3.5 s. Which full syncs run, and in what order, depends on the
/// timing of acks and redials; whatever it is, the sites must converge with the removals.
#[test]
fn quarantine_rejoin_keeps_removals_issue_timings() {
    let cluster = Cluster::start(
        &["a", "b", "c"],
        Opts::proxied().flags(&["--sync-quarantine-ms", "1000", "--sync-compression", "none"]),
    );
    cluster.wait_links_up(LINKS_UP);
    let mut a = cluster.site(A).connect();
    for i in 0..REJOIN_S {
        assert_eq!(a.int(&["SADD", &format!("s{i}"), "keep"]), 1);
    }
    cluster.wait_converged(CONVERGE_TIMEOUT);
    let t0 = Instant::now();
    let at = |ms: u64| {
        let due = t0 + Duration::from_millis(ms);
        if let Some(d) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    };
    let keys = rejoin_keys();
    at(1000);
    cluster.proxy(B, A).partition();
    cluster.proxy(C, B).partition();
    for (i, (key, m)) in keys.iter().enumerate() {
        at(1050 + 300 * i as u64 / keys.len() as u64);
        assert_eq!(a.int(&["SADD", key, m]), 1);
    }
    at(1700);
    cluster.proxy(B, A).heal();
    cluster.proxy(C, A).partition();
    for (i, (key, m)) in keys.iter().enumerate() {
        at(1800 + 300 * i as u64 / keys.len() as u64);
        assert_eq!(a.int(&["SREM", key, m]), 1);
    }
    at(2500);
    reset_all_links(&cluster);
    at(3500);
    cluster.heal_all();
    assert_rejoined_with_removals(&cluster);
}

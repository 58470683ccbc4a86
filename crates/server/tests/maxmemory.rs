//! `maxmemory` over real sockets: the -OOM reply under noeviction (plain writes, MULTI,
//! EXEC, scripts), allkeys-lru keeping the keys just read, volatile-* taking only keys with a
//! TTL, `evicted_keys`, and two sites where the one over its limit evicts locally while the
//! other keeps every key and both go on applying each other's ops (docs/conflicts.md,
//! "Eviction").
//!
//! Limits are set from the server's own `used_memory` (less `mem_not_counted_for_evict`)
//! once the data is loaded, so the tests do not depend on the allocator's baseline. Every
//! loop is bounded in count and time.

mod common;

use std::time::Duration;

use common::disk::{info, info_u64};
use common::sites::{Cluster, Opts, eventually};
use common::{Raw, Reply, Server};

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
/// Value size of the keys these tests write: large against a key's overhead, so that a key
/// written takes about as much memory as a key evicted frees.
const VALUE_BYTES: usize = 1024;

/// Used memory as eviction counts it.
fn used_counted(c: &mut Raw) -> u64 {
    let m = info(c, "memory");
    let field = |k: &str| -> u64 { m.get(k).and_then(|v| v.parse().ok()).unwrap_or(0) };
    field("used_memory").saturating_sub(field("mem_not_counted_for_evict"))
}

/// Keys written per pipeline: the server's input and output buffers stay small, so that
/// what they free later does not move used memory much.
const PIPELINE_KEYS: usize = 50;

/// Writes `keys` (pipelined), each with a value of VALUE_BYTES, optionally with a TTL.
fn write(c: &mut Raw, keys: &[String], ttl_s: Option<u64>) -> Vec<Reply> {
    let value = "v".repeat(VALUE_BYTES);
    let ttl = ttl_s.map(|s| s.to_string());
    let mut replies = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(PIPELINE_KEYS) {
        for k in chunk {
            let mut args: Vec<&[u8]> = vec![b"SET", k.as_bytes(), value.as_bytes()];
            if let Some(t) = &ttl {
                args.push(b"EX");
                args.push(t.as_bytes());
            }
            c.send_cmd(&args);
        }
        for _ in chunk {
            replies.push(common::parse_reply(&c.read_reply()));
        }
    }
    replies
}

/// Writes keys `prefix:N` by pipelines of PIPELINE_KEYS until `evicted_keys` reaches
/// `evicted_min` or `keys_max` keys were written; returns the keys written. Every write
/// must succeed.
fn write_until_evicted(
    c: &mut Raw,
    prefix: &str,
    evicted_min: u64,
    keys_max: usize,
) -> Vec<String> {
    let all = names(prefix, keys_max);
    let mut written = 0;
    for chunk in all.chunks(PIPELINE_KEYS) {
        let refused: Vec<Reply> = write(c, chunk, None)
            .into_iter()
            .filter(|r| *r != Reply::Simple("OK".into()))
            .collect();
        assert!(refused.is_empty(), "{refused:?}");
        written += chunk.len();
        if info_u64(c, "stats", "evicted_keys") >= evicted_min {
            break;
        }
    }
    all[..written].to_vec()
}

/// Waits until site `at` holds an ack from site `peer` (named `peer_name` there) that
/// covers every write `peer` has delivered: a site evicts only keys every peer has said it
/// holds (docs/conflicts.md §18). Acks come about every second on an idle link; a site of
/// several shards gets one per pair of shards, so one more second lets the others come.
fn wait_acked(cluster: &Cluster, at: usize, peer: usize, peer_name: &str) {
    let parse = |text: &str| -> Vec<(String, u64)> {
        text.split(';')
            .filter_map(|p| p.split_once('='))
            .map(|(r, h)| (r.to_string(), h.parse().unwrap_or(0)))
            .collect()
    };
    let want = parse(&cluster.site(peer).info_crdt()["crdt_version_vector"]);
    let acked = eventually(Duration::from_secs(15), || {
        let got = parse(&cluster.site(at).peer_info(peer_name)["acked_vv"]);
        want.iter()
            .all(|(r, h)| got.iter().any(|(r2, h2)| r2 == r && h2 >= h))
    });
    assert!(acked, "no ack from {peer_name} covers its writes");
    std::thread::sleep(Duration::from_millis(1100));
}

fn names(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}:{i}")).collect()
}

fn count_existing(c: &mut Raw, keys: &[String]) -> usize {
    for k in keys {
        c.send_cmd(&[b"EXISTS", k.as_bytes()]);
    }
    let mut n = 0;
    for i in 0..keys.len() {
        match c.try_read_reply(Duration::from_secs(5)) {
            Ok(r) => n += usize::from(r == b":1\r\n"),
            Err(e) => panic!(
                "reply {i} of {}: {e}; pending {:?}",
                keys.len(),
                String::from_utf8_lossy(c.pending())
            ),
        }
    }
    n
}

#[test]
fn noeviction_refuses_writes_with_redis_text() {
    let server = Server::start();
    let mut c = server.connect();
    c.ok(&["SET", "before", "1"]);
    c.ok(&["CONFIG", "SET", "maxmemory", "1"]);
    assert_eq!(c.err(&["SET", "x", "1"]), OOM);
    assert_eq!(c.err(&["LPUSH", "l", "1"]), OOM);
    // Reads and commands that free memory go on.
    assert_eq!(c.reply(&["GET", "before"]), Reply::Bulk(b"1".to_vec()));
    assert_eq!(c.int(&["DEL", "before"]), 1);
    // A command queued in MULTI is refused; EXEC then aborts; DISCARD works.
    c.ok(&["MULTI"]);
    assert_eq!(c.err(&["GET", "x"]), OOM);
    assert!(c.err(&["EXEC"]).starts_with("EXECABORT"));
    c.ok(&["MULTI"]);
    assert_eq!(c.err(&["SET", "x", "1"]), OOM);
    c.ok(&["DISCARD"]);
    // A script declaring no flags refuses its first write; one with allow-oom may write.
    // (Redis adds the script's name to an error raised inside it.)
    assert!(
        c.err(&["EVAL", "return redis.call('set','x','1')", "0"])
            .starts_with(&format!("{OOM} script: "))
    );
    assert_eq!(
        c.err(&["EVAL", "#!lua\nreturn redis.call('set','x','1')", "0"]),
        OOM
    );

    assert_eq!(
        c.reply(&[
            "EVAL",
            "#!lua flags=allow-oom\nreturn redis.call('set',KEYS[1],'1')",
            "1",
            "x"
        ]),
        Reply::Simple("OK".into())
    );
    let m = info(&mut c, "memory");
    assert_eq!(m.get("maxmemory").map(String::as_str), Some("1"));
    assert_eq!(m.get("maxmemory_human").map(String::as_str), Some("1B"));
    assert_eq!(
        m.get("maxmemory_policy").map(String::as_str),
        Some("noeviction")
    );
    assert_eq!(info_u64(&mut c, "stats", "evicted_keys"), 0);
    c.ok(&["CONFIG", "SET", "maxmemory", "0"]);
    c.ok(&["SET", "x", "2"]);
}

#[test]
fn exec_with_only_reads_runs_over_the_limit() {
    let server = Server::start();
    let mut c = server.connect();
    let mut admin = server.connect();
    c.ok(&["SET", "k", "v"]);
    c.ok(&["MULTI"]);
    assert_eq!(c.reply(&["GET", "k"]), Reply::Simple("QUEUED".into()));
    admin.ok(&["CONFIG", "SET", "maxmemory", "1"]);
    assert_eq!(
        c.reply(&["EXEC"]),
        Reply::Array(vec![Reply::Bulk(b"v".to_vec())])
    );
    c.ok(&["MULTI"]);
    assert_eq!(c.reply(&["GET", "k"]), Reply::Err(OOM.into()));
    c.ok(&["DISCARD"]);
    admin.ok(&["CONFIG", "SET", "maxmemory", "0"]);
}

#[test]
fn object_freq_needs_an_lfu_policy() {
    let server = Server::start();
    let mut c = server.connect();
    c.ok(&["SET", "k", "v"]);
    assert!(
        c.err(&["OBJECT", "FREQ", "k"]).starts_with(
            "ERR An LFU maxmemory policy is not selected, access frequency not tracked."
        )
    );
    c.ok(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lfu"]);
    assert!(c.int(&["OBJECT", "FREQ", "k"]) >= 0);
}

#[test]
fn allkeys_lru_keeps_the_keys_just_read() {
    let server = Server::start();
    let mut c = server.connect();
    let old = names("old", 2000);
    write(&mut c, &old, None);
    // The LRU clock counts seconds: the keys read next are younger by at least one.
    std::thread::sleep(Duration::from_millis(2100));
    let hot: Vec<String> = old.iter().step_by(10).cloned().collect();
    for k in &hot {
        c.send_cmd(&[b"GET", k.as_bytes()]);
    }
    for _ in &hot {
        c.read_reply();
    }
    c.ok(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    c.ok(&["CONFIG", "SET", "maxmemory-samples", "10"]);
    let limit = used_counted(&mut c);
    c.ok(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    // New keys until half the old ones' worth went.
    let fresh = write_until_evicted(&mut c, "new", 1000, 3000);
    // No limit while counting: nothing more goes meanwhile.
    c.ok(&["CONFIG", "SET", "maxmemory", "0"]);
    let evicted = info_u64(&mut c, "stats", "evicted_keys");
    assert!(evicted >= 1000, "evicted {evicted}");
    let hot_left = count_existing(&mut c, &hot);
    let old_left = count_existing(&mut c, &old);
    let cold_left = old_left - hot_left;
    let cold = old.len() - hot.len();
    // The keys read stay (sampling is approximate: late in the run a sample of windows of
    // adjacent buckets may find no cold key, then ties go at random; allow 10% of them:
    // random eviction would leave about two thirds), while the cold ones went.
    assert!(
        hot_left * 100 >= hot.len() * 90,
        "hot keys left {hot_left} of {}, cold {cold_left} of {cold}",
        hot.len()
    );
    assert!(cold_left < cold, "cold keys left {cold_left} of {cold}");
    let fresh_left = count_existing(&mut c, &fresh);
    assert!(
        fresh_left * 100 >= fresh.len() * 95,
        "new keys left {fresh_left}"
    );
    c.ok(&["CONFIG", "SET", "maxmemory", "0"]);
}

#[test]
fn volatile_policies_evict_only_keys_with_a_ttl() {
    for policy in ["volatile-lru", "volatile-random", "volatile-ttl"] {
        let server = Server::start();
        let mut c = server.connect();
        let kept = names("kept", 600);
        let ttl = names("ttl", 1200);
        write(&mut c, &kept, None);
        write(&mut c, &ttl, Some(1000));
        c.ok(&["CONFIG", "SET", "maxmemory-policy", policy]);
        let limit = used_counted(&mut c);
        c.ok(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
        // New keys until about a sixth of the keys with a TTL went, so that no shard runs
        // out of them (each evicts its own, and the periodic cycle of a shard that does not
        // write may evict some too: with a third, a loaded machine saw one shard run out and
        // answer -OOM while the others still held keys with a TTL).
        let fresh = write_until_evicted(&mut c, "new", 200, 1000);
        // No limit while counting: nothing more goes meanwhile.
        c.ok(&["CONFIG", "SET", "maxmemory", "0"]);
        assert_eq!(count_existing(&mut c, &kept), kept.len(), "{policy}");
        assert_eq!(count_existing(&mut c, &fresh), fresh.len(), "{policy}");
        let ttl_left = count_existing(&mut c, &ttl);
        let evicted = info_u64(&mut c, "stats", "evicted_keys");
        assert!(evicted > 0, "{policy}");
        assert_eq!(evicted as usize, ttl.len() - ttl_left, "{policy}");
        // With no key with a TTL left, writes get -OOM.
        c.ok(&["CONFIG", "SET", "maxmemory", "1"]);
        // (A command that ran out of eviction time runs: Redis's EVICT_RUNNING.)
        assert!(
            eventually(Duration::from_secs(10), || c.reply(&["SET", "more", "1"])
                == Reply::Err(OOM.into())),
            "{policy}"
        );
        // Each shard evicts its own keys, within the tenacity's time per command, and in
        // its periodic cycle.
        assert!(
            eventually(Duration::from_secs(10), || count_existing(&mut c, &ttl)
                == 0),
            "{policy}"
        );
        assert_eq!(count_existing(&mut c, &kept), kept.len(), "{policy}");
        c.ok(&["CONFIG", "SET", "maxmemory", "0"]);
    }
}

#[test]
fn config_and_flags_set_the_limit() {
    let server = Server::start_with(&[
        "--maxmemory",
        "104857600",
        "--maxmemory-policy",
        "allkeys-lfu",
    ]);
    let mut c = server.connect();
    let m = info(&mut c, "memory");
    assert_eq!(m.get("maxmemory").map(String::as_str), Some("104857600"));
    assert_eq!(
        m.get("maxmemory_human").map(String::as_str),
        Some("100.00M")
    );
    assert_eq!(
        m.get("maxmemory_policy").map(String::as_str),
        Some("allkeys-lfu")
    );
    c.ok(&["CONFIG", "SET", "maxmemory", "2gb"]);
    assert_eq!(
        c.reply(&["CONFIG", "GET", "maxmemory"]).strings(),
        ["maxmemory", "2147483648"]
    );
    c.ok(&["CONFIG", "SET", "maxmemory-eviction-tenacity", "100"]);
    assert!(
        c.err(&["CONFIG", "SET", "maxmemory-eviction-tenacity", "101"])
            .contains("argument must be between 0 and 100")
    );
    assert!(
        c.err(&["CONFIG", "SET", "maxmemory-policy", "lru"])
            .contains("argument(s) must be one of the following")
    );
}

#[test]
fn site_over_its_limit_evicts_locally_and_keeps_applying_its_peers_ops() {
    let cluster = Cluster::start(&["a", "b"], Opts::default());
    cluster.wait_links_up(Duration::from_secs(15));
    let mut a = cluster.site(0).connect();
    let mut b = cluster.site(1).connect();
    let first = names("first", 1500);
    write(&mut b, &first, None);
    assert!(eventually(Duration::from_secs(20), || {
        count_existing(&mut a, &first[first.len() - 1..]) == 1
    }));
    std::thread::sleep(Duration::from_millis(1100));
    a.ok(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let limit = used_counted(&mut a);
    a.ok(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    // B writes as much again: A applies every op, over its limit, and evicts to make room.
    let second = names("second", 1500);
    write(&mut b, &second, None);
    // Until B's last key has reached A (it is the newest there: LRU keeps it).
    let last = vec![second[second.len() - 1].clone()];
    assert!(eventually(Duration::from_secs(20), || count_existing(
        &mut a, &last
    ) == 1));
    let evicted = info_u64(&mut a, "stats", "evicted_keys");
    assert!(evicted > 0, "a evicted nothing");
    assert!(info_u64(&mut a, "crdt", "crdt_ops_applied_over_maxmemory") > 0);
    // B keeps every key: the eviction removed nothing there.
    assert_eq!(count_existing(&mut b, &first), first.len());
    assert_eq!(count_existing(&mut b, &second), second.len());
    let a_has = count_existing(&mut a, &first) + count_existing(&mut a, &second);
    assert!(a_has < first.len() + second.len(), "a holds every key");
    // Both still apply each other's ops: a write at A reaches B, one at B reaches A.
    a.ok(&["CONFIG", "SET", "maxmemory", "0"]);
    a.ok(&["SET", "from-a", "1"]);
    b.ok(&["SET", "from-b", "1"]);
    assert!(eventually(Duration::from_secs(20), || {
        b.reply(&["GET", "from-a"]) == Reply::Bulk(b"1".to_vec())
            && a.reply(&["GET", "from-b"]) == Reply::Bulk(b"1".to_vec())
    }));
    // A key A evicted comes back whole there when B writes it again.
    let gone = first
        .iter()
        .find(|k| count_existing(&mut a, std::slice::from_ref(*k)) == 0)
        .cloned();
    if let Some(k) = gone {
        b.ok(&["SET", &k, "again"]);
        assert!(eventually(Duration::from_secs(20), || {
            a.reply(&["GET", &k]) == Reply::Bulk(b"again".to_vec())
        }));
    }
    assert!(
        cluster
            .site(0)
            .log()
            .contains("over maxmemory: still applying the peers' ops"),
        "a's log does not say it applies ops over its limit"
    );
}

/// Issue 20: a complete full sync (a rejoin after a quarantine) from a site that evicted
/// keys must not remove those keys at the receiver. A evicts while it has quarantined B;
/// at the rejoin A sends B a complete full sync, which names the keys A evicted: B keeps
/// its copies (it holds every key), and A's own writes made meanwhile reach B.
#[test]
fn complete_full_sync_from_an_evicting_site_keeps_the_evicted_keys_at_the_peer() {
    complete_full_sync_keeps_evicted_keys("1");
}

/// The same with sites of three shards: each shard names the keys of its slots it evicted.
#[test]
fn complete_full_sync_keeps_evicted_keys_with_three_shards() {
    complete_full_sync_keeps_evicted_keys("3");
}

fn complete_full_sync_keeps_evicted_keys(shards: &str) {
    let cluster = Cluster::start(
        &["a", "b"],
        Opts::proxied().flags(&[
            "--sync-quarantine-ms",
            "1000",
            "--sync-compression",
            "none",
            "--shards",
            shards,
        ]),
    );
    cluster.wait_links_up(Duration::from_secs(15));
    let mut a = cluster.site(0).connect();
    let mut b = cluster.site(1).connect();
    let first = names("first", 1500);
    write(&mut b, &first, None);
    cluster.wait_converged(Duration::from_secs(30));
    // A may evict B's keys once B has said it holds them.
    wait_acked(&cluster, 0, 1, "b");
    cluster.partition(0, 1);
    assert!(
        eventually(Duration::from_secs(15), || {
            cluster.site(0).peer_info("b")["quarantined"] == "1"
                && cluster.site(1).peer_info("a")["quarantined"] == "1"
        }),
        "no quarantine"
    );
    // A, over its limit, evicts some of B's keys while it writes its own.
    std::thread::sleep(Duration::from_millis(1100));
    a.ok(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let limit = used_counted(&mut a);
    a.ok(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    let second = write_until_evicted(&mut a, "second", 300, 3000);
    let evicted = info_u64(&mut a, "stats", "evicted_keys");
    assert!(evicted >= 300, "a evicted {evicted}");
    let a_first = count_existing(&mut a, &first);
    assert!(a_first < first.len(), "a evicted none of B's keys");
    a.ok(&["CONFIG", "SET", "maxmemory", "0"]);
    // A evicted none of its own keys: B, quarantined, had none of them.
    assert_eq!(count_existing(&mut a, &second), second.len());
    cluster.heal(0, 1);
    // Generous: with three shards a rejoin is three pairs of full syncs, which a loaded
    // machine may have to retry.
    let synced = eventually(Duration::from_secs(60), || {
        cluster.site(1).peer_u64("a", "full_syncs_in") >= 1
            && cluster.site(1).peer_info("a")["quarantined"] == "0"
            && count_existing(&mut b, &second) == second.len()
    });
    assert!(
        synced,
        "no rejoin\n{}",
        common::sites::report(&cluster.all())
    );
    // B holds every key of its own, none removed by A's evictions, and every key A wrote.
    assert_eq!(count_existing(&mut b, &first), first.len());
    // A still misses what it evicted (the full sync from B does not bring it back: A's
    // causal context says it had those writes).
    assert!(count_existing(&mut a, &first) <= a_first);
}

/// Issue 20: a site never evicts a write some peer lacks. A, cut off from B, holds only
/// keys of its own, which B has not received: over its limit it evicts none of them and
/// refuses writes with -OOM instead; every write it acknowledged reaches B at the rejoin.
#[test]
fn a_site_never_evicts_writes_a_peer_lacks() {
    let cluster = Cluster::start(
        &["a", "b"],
        Opts::proxied().flags(&["--sync-quarantine-ms", "1000"]),
    );
    cluster.wait_links_up(Duration::from_secs(15));
    let mut a = cluster.site(0).connect();
    let mut b = cluster.site(1).connect();
    cluster.partition(0, 1);
    assert!(
        eventually(Duration::from_secs(15), || {
            cluster.site(0).peer_info("b")["quarantined"] == "1"
        }),
        "no quarantine"
    );
    a.ok(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let own = names("own", 200);
    write(&mut a, &own[..100], None);
    let limit = used_counted(&mut a);
    a.ok(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    let replies = write(&mut a, &own[100..], None);
    let refused = replies
        .iter()
        .filter(|r| matches!(r, Reply::Err(e) if e == OOM))
        .count();
    assert!(refused > 0, "a accepted every write over its limit");
    assert_eq!(info_u64(&mut a, "stats", "evicted_keys"), 0);
    assert!(info_u64(&mut a, "crdt", "crdt_evictions_held_back") > 0);
    let acked: Vec<String> = own[..100]
        .iter()
        .chain(
            own[100..]
                .iter()
                .zip(&replies)
                .filter(|(_, r)| **r == Reply::Simple("OK".into()))
                .map(|(k, _)| k),
        )
        .cloned()
        .collect();
    assert_eq!(count_existing(&mut a, &acked), acked.len());
    a.ok(&["CONFIG", "SET", "maxmemory", "0"]);
    cluster.heal(0, 1);
    assert!(
        eventually(Duration::from_secs(60), || count_existing(&mut b, &acked)
            == acked.len()),
        "a's acknowledged writes at b: {} of {}\n{}",
        count_existing(&mut b, &acked),
        acked.len(),
        common::sites::report(&cluster.all())
    );
}

/// What `key` holds, as one comparable text (any type).
fn value_of(c: &mut Raw, key: &str) -> String {
    let t = match c.reply(&["TYPE", key]) {
        Reply::Simple(t) => t,
        other => panic!("TYPE {key}: {other:?}"),
    };
    let v = match t.as_str() {
        "none" => return "none".into(),
        "string" => c.reply(&["GET", key]),
        "hash" => c.reply(&["HGETALL", key]),
        "list" => c.reply(&["LRANGE", key, "0", "-1"]),
        "set" => c.reply(&["SMEMBERS", key]),
        other => panic!("{key} is a {other}"),
    };
    format!("{t} {v:?}")
}

/// Keys of the divergence tests (issue 20): written at B, each with a TTL so that
/// `volatile-ttl` at A evicts only these; the `local:` ones are then written at A, the
/// others at B.
const DIVERGE_KEYS: [&str; 6] = ["cnt", "h", "l", "local:cnt", "local:h", "local:l"];

/// Makes A evict every key of DIVERGE_KEYS (and only those: the others have no TTL), then
/// lifts A's limit.
fn evict_the_ttl_keys(a: &mut Raw) {
    std::thread::sleep(Duration::from_millis(1100));
    a.ok(&["CONFIG", "SET", "maxmemory-policy", "volatile-ttl"]);
    let limit = used_counted(a);
    a.ok(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    let value = "v".repeat(VALUE_BYTES);
    let before = info_u64(a, "stats", "evicted_keys");
    for i in 0..2000 {
        // Past the last volatile key writes get -OOM: any reply will do.
        let _ = a.reply(&["SET", &format!("filler:{i}"), &value]);
        if info_u64(a, "stats", "evicted_keys") >= before + DIVERGE_KEYS.len() as u64 {
            break;
        }
    }
    a.ok(&["CONFIG", "SET", "maxmemory", "0"]);
    for k in DIVERGE_KEYS {
        assert_eq!(a.int(&["EXISTS", k]), 0, "{k} not evicted at a");
    }
}

/// Issue 20: a change (INCRBY, HSET of a field, RPUSH) to a key a site evicted must not
/// leave that site holding only the change. Written at the other site, the change is not
/// materialised at the evicting site (it misses the key, as a cache would); written at the
/// evicting site, it writes the key whole everywhere. A later whole write (SET) brings the
/// key back. Once every op is delivered no site holds a value that differs from the other's.
#[test]
fn changes_to_an_evicted_key_never_leave_a_partial_value() {
    changes_to_evicted_keys("1");
}

/// The same with sites of three shards (the keys spread over them).
#[test]
fn changes_to_an_evicted_key_with_three_shards() {
    changes_to_evicted_keys("3");
}

fn changes_to_evicted_keys(shards: &str) {
    let cluster = Cluster::start(&["a", "b"], Opts::default().flags(&["--shards", shards]));
    cluster.wait_links_up(Duration::from_secs(15));
    let mut a = cluster.site(0).connect();
    let mut b = cluster.site(1).connect();
    for p in ["", "local:"] {
        assert_eq!(b.int(&["INCRBY", &format!("{p}cnt"), "10"]), 10);
        assert_eq!(b.int(&["HSET", &format!("{p}h"), "f1", "1", "f2", "2"]), 2);
        assert_eq!(b.int(&["RPUSH", &format!("{p}l"), "a", "b"]), 2);
    }
    for k in DIVERGE_KEYS {
        assert_eq!(b.int(&["EXPIRE", k, "100000"]), 1);
    }
    cluster.wait_converged(Duration::from_secs(20));
    evict_the_ttl_keys(&mut a);
    // Changes at B to keys A evicted; at A, changes to the local: keys it evicted.
    assert_eq!(b.int(&["INCR", "cnt"]), 11);
    assert_eq!(b.int(&["HSET", "h", "f3", "3"]), 1);
    assert_eq!(b.int(&["RPUSH", "l", "c"]), 3);
    assert_eq!(a.int(&["INCR", "local:cnt"]), 1);
    assert_eq!(a.int(&["HSET", "local:h", "f9", "9"]), 1);
    assert_eq!(a.int(&["RPUSH", "local:l", "z"]), 1);
    a.ok(&["SET", "fence:a", "1"]);
    b.ok(&["SET", "fence:b", "1"]);
    assert!(eventually(Duration::from_secs(20), || {
        a.int(&["EXISTS", "fence:b"]) == 1 && b.int(&["EXISTS", "fence:a"]) == 1
    }));
    for k in DIVERGE_KEYS {
        let (va, vb) = (value_of(&mut a, k), value_of(&mut b, k));
        eprintln!("{k}: a {va} | b {vb}");
        assert!(va == "none" || va == vb, "{k}: a holds {va}, b {vb}");
    }
    // B's changes are not materialised at A; A's local writes made the key whole.
    for k in ["cnt", "h", "l"] {
        assert_eq!(value_of(&mut a, k), "none", "{k}");
    }
    assert_eq!(b.reply(&["GET", "cnt"]), Reply::bulk("11"));
    assert_eq!(b.reply(&["GET", "local:cnt"]), Reply::bulk("1"));
    assert_eq!(value_of(&mut b, "local:h"), value_of(&mut a, "local:h"));
    assert_eq!(b.int(&["HLEN", "local:h"]), 1);
    assert_eq!(b.int(&["LLEN", "local:l"]), 1);
    let crdt = cluster.site(0).info_crdt();
    assert_eq!(crdt["crdt_evicted_keys_marked"], "3", "{crdt:?}");
    assert!(cluster.site(0).info_u64("crdt_evicted_writes_not_applied") >= 3);
    // The counter A wrote whole continues alike at both sites, whoever increments it.
    assert_eq!(a.int(&["INCR", "local:cnt"]), 2);
    // 6 or 7, whether A's increment has reached B yet or not.
    assert!([6, 7].contains(&b.int(&["INCRBY", "local:cnt", "5"])));
    assert!(eventually(Duration::from_secs(20), || {
        a.reply(&["GET", "local:cnt"]) == Reply::bulk("7")
            && b.reply(&["GET", "local:cnt"]) == Reply::bulk("7")
    }));
    // A restart keeps the marks (a snapshot, then the log's records after it): B's next
    // change is still not materialised at A.
    a.ok(&["SAVE"]);
    let mut cluster = cluster;
    cluster.site_mut(0).restart();
    cluster.wait_links_up(Duration::from_secs(15));
    let mut a = cluster.site(0).connect();
    assert_eq!(b.int(&["INCR", "cnt"]), 12);
    b.ok(&["SET", "fence:b", "2"]);
    assert!(eventually(Duration::from_secs(20), || {
        a.reply(&["GET", "fence:b"]) == Reply::bulk("2")
    }));
    assert_eq!(value_of(&mut a, "cnt"), "none");
    // A SET at B (which had seen every increment) brings the key back whole at A.
    b.ok(&["SET", "cnt", "5"]);
    assert!(eventually(Duration::from_secs(20), || {
        a.reply(&["GET", "cnt"]) == Reply::bulk("5")
    }));
    assert_eq!(cluster.site(0).info_crdt()["crdt_evicted_keys_marked"], "2");
    // Back whole at A, the counter continues alike at both sites.
    assert_eq!(a.int(&["INCR", "cnt"]), 6);
    assert!([7, 8].contains(&b.int(&["INCRBY", "cnt", "2"])));
    assert!(eventually(Duration::from_secs(20), || {
        a.reply(&["GET", "cnt"]) == Reply::bulk("8") && b.reply(&["GET", "cnt"]) == Reply::bulk("8")
    }));
    // Both sites agree on every key once A holds them all again: writes of the whole value.
    b.ok(&["SET", "h", "x"]);
    b.ok(&["SET", "l", "y"]);
    let cleared = eventually(Duration::from_secs(20), || {
        cluster.site(0).info_crdt()["crdt_evicted_keys_marked"] == "0"
    });
    assert!(cleared, "{}", cluster.site(0).log_tail(40));
    cluster.wait_converged(Duration::from_secs(20));
}

/// Tags of keys at both ends of the slot space: on the first shard and on the last, whatever
/// the number of shards (one shard: both on it, and the test holds as for Redis).
const LOW_SHARD_TAG: &str = "{t29}";
const HIGH_SHARD_TAG: &str = "{t79}";

/// Redis evicts before every command from its one keyspace. With several shards the shard
/// that runs a command may hold nothing the policy evicts (`volatile-*`, no TTL there) while
/// another does: the command first makes room on every shard. So a tracking client sees the
/// invalidation of a key evicted on another shard before the reply of the command that needed
/// the room (Redis's unit/tracking "Tracking invalidation message of eviction keys should be
/// before response"), and a write is not refused -OOM while another shard still holds keys
/// the policy evicts.
#[test]
fn a_command_makes_room_on_every_shard_first() {
    let server = Server::start();
    // `c` tracks in RESP3; `a` reads INFO and sets the limit.
    let mut a = server.connect();
    let mut c = server.connect();
    let r = c.call_text(&["HELLO", "3"]);
    assert!(r.starts_with('%'), "{r}");
    c.ok(&["CLIENT", "TRACKING", "on"]);
    a.ok(&["CONFIG", "SET", "maxmemory-policy", "volatile-random"]);
    let volatile = format!("volatile-key{LOW_SHARD_TAG}");
    let big = format!("big-key{HIGH_SHARD_TAG}");
    c.ok(&["SETEX", &volatile, "10000", "x"]);
    assert_eq!(c.call_text(&["GET", &volatile]), "$1\r\nx\r\n");
    let limit = used_counted(&mut a) + 100 * 1024;
    a.ok(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    // 200 KB over a limit 100 KB away: the next command must evict.
    assert_eq!(c.call_text(&["SETBIT", &big, "1600000", "0"]), ":0\r\n");
    let push = c.call_text(&["GETBIT", &big, "0"]);
    assert_eq!(
        push,
        format!(
            ">2\r\n$10\r\ninvalidate\r\n*1\r\n${}\r\n{volatile}\r\n",
            volatile.len()
        )
    );
    assert_eq!(String::from_utf8_lossy(&c.read_reply()), ":0\r\n");
    assert_eq!(info_u64(&mut a, "stats", "evicted_keys"), 1);

    // Keys with a TTL only on the low shard; the high shard's writes need their room.
    a.ok(&["CONFIG", "SET", "maxmemory", "0"]);
    c.ok(&["CLIENT", "TRACKING", "off"]);
    a.ok(&["FLUSHALL"]);
    let ttl: Vec<String> = (0..300)
        .map(|i| format!("ttl:{i}{LOW_SHARD_TAG}"))
        .collect();
    write(&mut a, &ttl, Some(10_000));
    let limit = used_counted(&mut a) + 100 * 1024;
    a.ok(&["CONFIG", "SET", "maxmemory", &limit.to_string()]);
    assert_eq!(c.call_text(&["SETBIT", &big, "1600000", "0"]), ":0\r\n");
    let more: Vec<String> = (0..20)
        .map(|i| format!("more:{i}{HIGH_SHARD_TAG}"))
        .collect();
    for reply in write(&mut a, &more, None) {
        assert_eq!(reply, Reply::Simple("OK".into()));
    }
    a.ok(&["CONFIG", "SET", "maxmemory", "0"]);
    let evicted = info_u64(&mut a, "stats", "evicted_keys") - 1;
    assert!(evicted > 0);
    assert_eq!(count_existing(&mut a, &more), more.len());
    assert_eq!(
        count_existing(&mut a, &ttl),
        ttl.len() - usize::try_from(evicted).unwrap()
    );
}

/// Redis's `startEvictionTimeProc` on CONFIG SET maxmemory: the keys go without another
/// command (Redis's unit/pubsub "Keyspace notifications: evicted events" waits for the
/// event with no command after the CONFIG SET). The periodic cycle evicts otherwise only
/// after a pass that ran out of time.
#[test]
fn config_set_maxmemory_evicts_without_another_command() {
    let server = Server::start();
    let mut c = server.connect();
    c.ok(&["CONFIG", "SET", "notify-keyspace-events", "Ee"]);
    c.ok(&["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let mut sub = server.connect();
    assert_eq!(
        String::from_utf8_lossy(&sub.call(&[b"PSUBSCRIBE", b"*"])),
        "*3\r\n$10\r\npsubscribe\r\n$1\r\n*\r\n:1\r\n"
    );
    c.ok(&["SET", "foo", "bar"]);
    c.ok(&["CONFIG", "SET", "maxmemory", "1"]);
    let event = sub
        .try_read_reply(Duration::from_secs(5))
        .expect("an evicted event");
    assert_eq!(
        String::from_utf8_lossy(&event),
        "*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$22\r\n__keyevent@0__:evicted\r\n$3\r\nfoo\r\n"
    );
    c.ok(&["CONFIG", "SET", "maxmemory", "0"]);
}

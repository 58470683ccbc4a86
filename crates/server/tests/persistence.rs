//! Durability (issue 5, docs/persistence.md) against real `meridian` processes over real
//! sockets:
//!
//! - acknowledged writes survive a SIGKILL under load, and a simulated power loss
//!   (testing.md §5.5: cut the log back to the `fsynced` watermark) under `always`; under
//!   `everysec` a power loss loses only writes acknowledged in the last second (R6, R7);
//! - seeded random damage to segments and snapshots is cut (torn tail), refused (with the
//!   file and offset) or passed over (a damaged snapshot), never loaded, never a panic; and
//!   `meridian check-log [--fix]` agrees (R13);
//! - bad data directories: a full disk (MISCONF, then recovery), a read-only one, a foreign
//!   segment, an unknown file, a second server on the same directory;
//! - SAVE, BGSAVE, BGREWRITEAOF, LASTSAVE, the `save` policy, CONFIG SET appendfsync and
//!   `appendonly no`.
//!
//! Resuming replication after a restart is `replication.rs`'s
//! `killed_site_with_log_resumes_incrementally`. Every loop is bounded in count and time,
//! every process is killed when its `Node` drops, and every mount is undone when its guard
//! drops.

mod common;

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{Hash as _, Hasher as _};
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::disk::{self, Node, Rng, Start, Tmpfs};
use common::{Raw, Reply, Server};

/// Bound of the waits for a background job or a file to appear.
const JOB_TIMEOUT: Duration = Duration::from_secs(30);

fn ok(c: &mut Raw, args: &[&str]) {
    assert_eq!(c.reply(args), Reply::Simple("OK".into()), "{args:?}");
}

/// Sends `cmds` pipelined in batches of 100 and asserts that no reply is an error.
fn pipeline(c: &mut Raw, cmds: &[Vec<String>]) {
    for batch in cmds.chunks(100) {
        let mut bytes = Vec::new();
        for argv in batch {
            let args: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
            bytes.extend_from_slice(&common::cmd(&args));
        }
        c.send(&bytes);
        for argv in batch {
            let r = common::parse_reply(&c.read_reply());
            assert!(!matches!(r, Reply::Err(_)), "{argv:?}: {r:?}");
        }
    }
}

/// Asserts that no start of `node` panicked.
fn assert_no_panic(node: &Node) {
    let log = node.log();
    assert!(
        !log.contains("panicked"),
        "the server panicked; log:\n{log}"
    );
}

// ---------------------------------------------------------------------------------------
// Write load with a ledger of acknowledged writes

/// Client threads of the write load.
const LOAD_CLIENTS: usize = 4;
/// How long the load runs before the SIGKILL.
const LOAD_FOR: Duration = Duration::from_secs(2);
/// A reply slower than this ends a client (generous: under `always` a reply waits for an
/// fsync on a shared disk).
const REPLY_TIMEOUT: Duration = Duration::from_secs(20);
/// Most commands one client sends in one run (the time bound comes first).
const LOAD_OPS_MAX: usize = 1_000_000;
/// Under `everysec` a power loss may lose the writes of the last second (Redis's promise,
/// R7)...
const EVERYSEC_WINDOW: Duration = Duration::from_secs(1);
/// ...plus this slack for the kill itself: the test reads the clock before sending SIGKILL,
/// and an fsync in progress when it lands has not written its watermark yet, so the writes
/// it covered count as lost.
const KILL_SLACK: Duration = Duration::from_millis(250);

const MEMBERS_KEY: &str = "members";

fn counter_key(client: usize) -> String {
    format!("ctr:{client}")
}

/// What one load client had acknowledged.
#[derive(Debug, Default)]
struct Ledger {
    /// Each acknowledged `INCR ctr:<client>`: the value it returned, and when it was read.
    incrs: Vec<(i64, Instant)>,
    /// Each acknowledged `SADD members <member>`, and when.
    members: Vec<(String, Instant)>,
    /// The member of an SADD sent without a reply when the connection broke.
    unacked_member: Option<String>,
}

/// One load client: alternates `INCR ctr:<client>` and `SADD members <new member>` until
/// `stop` or its connection breaks (the kill).
fn load_client(port: u16, client: usize, round: usize, stop: &AtomicBool) -> Ledger {
    let mut l = Ledger::default();
    let mut c = Raw::connect(port);
    let counter = counter_key(client);
    for i in 0..LOAD_OPS_MAX {
        if stop.load(Ordering::Acquire) {
            break;
        }
        let member = (i % 2 == 1).then(|| format!("m:{round}:{client}:{i}"));
        let argv: Vec<&[u8]> = match &member {
            None => vec![b"INCR", counter.as_bytes()],
            Some(m) => vec![b"SADD", MEMBERS_KEY.as_bytes(), m.as_bytes()],
        };
        if c.try_send(&common::cmd(&argv)).is_err() {
            l.unacked_member = member;
            break;
        }
        let Ok(reply) = c.try_read_reply(REPLY_TIMEOUT) else {
            l.unacked_member = member;
            break;
        };
        let at = Instant::now();
        match (common::parse_reply(&reply), member) {
            (Reply::Int(n), None) => l.incrs.push((n, at)),
            (Reply::Int(1), Some(m)) => l.members.push((m, at)),
            (other, m) => panic!("client {client}: reply {other:?} to the write of {m:?}"),
        }
    }
    l
}

/// Runs the load on `node` for `LOAD_FOR`, then SIGKILLs it. Returns one ledger per client
/// and the time read just before the kill.
fn load_then_kill(node: &mut Node, round: usize) -> (Vec<Ledger>, Instant) {
    let port = node.port;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let stop = &stop;
        let clients: Vec<_> = (0..LOAD_CLIENTS)
            .map(|c| s.spawn(move || load_client(port, c, round, stop)))
            .collect();
        std::thread::sleep(LOAD_FOR);
        let killed_at = Instant::now();
        node.kill();
        stop.store(true, Ordering::Release);
        let ledgers = clients
            .into_iter()
            .map(|h| h.join().expect("load client panicked"))
            .collect();
        (ledgers, killed_at)
    })
}

/// The load's keys as a restarted server holds them.
struct Held {
    counters: Vec<i64>,
    members: BTreeSet<String>,
}

fn read_held(c: &mut Raw) -> Held {
    let counters = (0..LOAD_CLIENTS)
        .map(|i| match c.reply(&["GET", &counter_key(i)]) {
            Reply::Nil => 0,
            Reply::Bulk(b) => String::from_utf8_lossy(&b).parse().expect("counter value"),
            other => panic!("GET {}: {other:?}", counter_key(i)),
        })
        .collect();
    let members = c
        .reply(&["SMEMBERS", MEMBERS_KEY])
        .strings()
        .into_iter()
        .collect();
    Held { counters, members }
}

/// An acknowledged write the restarted server does not hold, and how long before the kill
/// it was acknowledged (negative: its reply was read after the kill).
struct Lost {
    write: String,
    acked_before_kill_ms: i128,
}

/// Checks what `held` holds against the ledgers of every load round so far and returns the
/// acknowledged writes it lacks. Asserts that it holds nothing never sent: a member nobody
/// sent, or a counter above the last acknowledged value plus the one INCR in flight at the
/// kill.
fn check_held(rounds: &[Vec<Ledger>], held: &Held, killed_at: Instant) -> Vec<Lost> {
    let age = |at: Instant| -> i128 {
        if at <= killed_at {
            (killed_at - at).as_millis() as i128
        } else {
            -((at - killed_at).as_millis() as i128)
        }
    };
    let mut lost = Vec::new();
    for client in 0..LOAD_CLIENTS {
        let acked: Vec<(i64, Instant)> = rounds
            .iter()
            .flat_map(|r| r[client].incrs.iter().copied())
            .collect();
        for r in rounds {
            let replies: Vec<i64> = r[client].incrs.iter().map(|(n, _)| *n).collect();
            assert!(
                replies.windows(2).all(|w| w[1] == w[0] + 1),
                "{}: the INCR replies of one connection skip or repeat: {replies:?}",
                counter_key(client)
            );
        }
        let last = acked.iter().map(|(n, _)| *n).max().unwrap_or(0);
        let v = held.counters[client];
        assert!(
            v <= last + 1,
            "{} = {v}, but the last acknowledged INCR returned {last} (only one was in flight)",
            counter_key(client)
        );
        for (n, at) in acked.iter().filter(|(n, _)| *n > v) {
            lost.push(Lost {
                write: format!(
                    "INCR {} acknowledged with {n} (held: {v})",
                    counter_key(client)
                ),
                acked_before_kill_ms: age(*at),
            });
        }
    }
    let mut sent: BTreeSet<&str> = BTreeSet::new();
    for l in rounds.iter().flatten() {
        for (m, at) in &l.members {
            sent.insert(m);
            if !held.members.contains(m) {
                lost.push(Lost {
                    write: format!("SADD {MEMBERS_KEY} {m}"),
                    acked_before_kill_ms: age(*at),
                });
            }
        }
        if let Some(m) = &l.unacked_member {
            sent.insert(m);
        }
    }
    for m in &held.members {
        assert!(sent.contains(m.as_str()), "member {m} was never sent");
    }
    lost
}

/// The first few lost writes, one a line.
fn describe<'a>(lost: impl IntoIterator<Item = &'a Lost>) -> String {
    lost.into_iter()
        .take(5)
        .map(|l| {
            format!(
                "  {} ({} ms before the kill)",
                l.write, l.acked_before_kill_ms
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Asserts that nothing is lost, listing (a few of) what is.
fn assert_none_lost(lost: &[Lost], what: &str) {
    assert!(
        lost.is_empty(),
        "{what}: {} acknowledged writes lost, acknowledged between {:?} and {:?} ms before the kill; first ones:\n{}",
        lost.len(),
        lost.iter().map(|l| l.acked_before_kill_ms).min(),
        lost.iter().map(|l| l.acked_before_kill_ms).max(),
        describe(lost)
    );
}

fn acked_counts(ledgers: &[Ledger]) -> (usize, usize) {
    (
        ledgers.iter().map(|l| l.incrs.len()).sum(),
        ledgers.iter().map(|l| l.members.len()).sum(),
    )
}

/// Load, SIGKILL, restart: nothing acknowledged is missing.
/// `rounds` times: load, SIGKILL, restart on the same directory; nothing acknowledged is
/// missing after any of them.
fn sigkill_loses_nothing(fsync: &str, rounds: usize) {
    let mut node = Node::start_new(&["--appendfsync", fsync]);
    let mut ledgers = Vec::new();
    for round in 0..rounds {
        let (ledger, killed_at) = load_then_kill(&mut node, round);
        let (incrs, members) = acked_counts(&ledger);
        assert!(incrs > 0 && members > 0, "round {round}: no progress");
        ledgers.push(ledger);
        node.start();
        let held = read_held(&mut node.connect());
        let lost = check_held(&ledgers, &held, killed_at);
        assert_none_lost(
            &lost,
            &format!("appendfsync {fsync}, SIGKILL round {round}"),
        );
        eprintln!(
            "appendfsync {fsync}, round {round}: {incrs} INCR and {members} SADD acknowledged, all held after SIGKILL"
        );
    }
    assert_no_panic(&node);
}

#[test]
fn always_sigkill_under_load_loses_no_acknowledged_write() {
    sigkill_loses_nothing("always", 1);
}

#[test]
fn everysec_sigkill_under_load_loses_no_acknowledged_write() {
    // The kernel keeps what was written: only a server that acknowledges before write(2)
    // loses anything here (testing.md §5.5; R14: `everysec` replies after write(2)). Such a
    // loss needs the kill to land in the few milliseconds between a reply and its write:
    // three rounds make that likely.
    sigkill_loses_nothing("everysec", 3);
}

/// Under `appendfsync always`, a script over keys of two shards and an LMOVE between them
/// (`tx_across`) answer only once both shards' logs hold their writes: after a power loss
/// that cuts each shard's log at its fsync watermark, every acknowledged INCR and move is
/// there, on both shards.
#[test]
fn always_keeps_acknowledged_writes_across_shards_through_power_loss() {
    let mut node = Node::start_new(&[
        "--shards",
        "2",
        "--appendfsync",
        "always",
        "--debug-fsync-watermark",
        "yes",
    ]);
    // Two shards own slots 0-8191 and 8192-16383.
    let on = |shard: u16, prefix: &str| {
        (0..10_000)
            .map(|i| format!("{prefix}{i}"))
            .find(|k| common::key_slot(k) / 8192 == shard)
            .expect("a key of the shard")
    };
    let (a, b) = (on(0, "a"), on(1, "b"));
    let (src, dst) = (on(0, "src"), on(1, "dst"));
    let mut c = node.connect();
    // Once a reply is read, each shard's log is on disk up to its end (this client is the
    // only writer): the fsync watermark names the last segment at its full length, but for
    // the clock lease each shard renews on its own every second, which may be written and
    // not yet synced when the test looks (seen once: 17 bytes past the watermark).
    let synced = |node: &Node, what: &str| {
        for shard in 0..2 {
            let dir = node.shard_dir_of(shard);
            let (segment, len) = disk::fsynced(&dir).expect("a watermark");
            let last = disk::segments(&dir).pop().expect("a segment");
            let bytes = std::fs::read(&last).unwrap_or_default();
            let unsynced_leases_only = disk::record_extents(&bytes)
                .iter()
                .filter(|(_, end)| *end as u64 > len)
                .all(|&(start, _)| {
                    bytes.get(start + disk::RECORD_HEADER_BYTES) == Some(&disk::CLOCK_LEASE_KIND)
                });
            assert!(
                disk::file_name(&last) == segment && unsynced_leases_only,
                "{what}: shard {shard} answered before its log was on disk \
                 ({segment} synced to {len}, {} written to {})",
                disk::file_name(&last),
                bytes.len()
            );
        }
    };
    const ROUNDS: i64 = 200;
    let incr = "redis.call('incr', KEYS[1]) return redis.call('incr', KEYS[2])";
    for i in 1..=ROUNDS {
        let r = c.call_strs(&["EVAL", incr, "2", &a, &b]);
        assert_eq!(String::from_utf8_lossy(&r), format!(":{i}\r\n"));
        synced(&node, "EVAL");
    }
    let items: Vec<String> = (0..ROUNDS).map(|i| i.to_string()).collect();
    let mut push = vec!["RPUSH", src.as_str()];
    push.extend(items.iter().map(String::as_str));
    assert_eq!(c.int(&push), ROUNDS);
    const MOVES: i64 = 120;
    for i in 0..MOVES {
        let r = c.call_strs(&["LMOVE", &src, &dst, "LEFT", "RIGHT"]);
        assert_eq!(String::from_utf8_lossy(&r), common::bulk(&i.to_string()));
        synced(&node, "LMOVE");
    }
    node.kill();
    for shard in 0..2 {
        disk::power_loss(&node.shard_dir_of(shard), |synced, _| synced);
    }
    node.start();
    let mut c = node.connect();
    let n = ROUNDS.to_string();
    assert_eq!(c.call_text(&["GET", &a]), common::bulk(&n));
    assert_eq!(c.call_text(&["GET", &b]), common::bulk(&n));
    assert_eq!(c.int(&["LLEN", &dst]), MOVES);
    assert_eq!(c.int(&["LLEN", &src]), ROUNDS - MOVES);
}

#[test]
fn always_power_loss_loses_no_acknowledged_write() {
    let mut node = Node::start_new(&["--appendfsync", "always", "--debug-fsync-watermark", "yes"]);
    let mut rng = Rng(0x5eed_0002);
    let mut rounds = Vec::new();
    for round in 0..2 {
        let (ledgers, killed_at) = load_then_kill(&mut node, round);
        let (incrs, members) = acked_counts(&ledgers);
        assert!(incrs > 0 && members > 0, "round {round}: no progress");
        rounds.push(ledgers);
        // Round 0 cuts at the watermark; round 1 at a random length between it and the
        // written length: a torn tail when that falls inside a record (§5.5).
        let loss = disk::power_loss(&node.shard_dir(), |synced, written| {
            if round == 0 {
                synced
            } else {
                synced + rng.below(written - synced + 1)
            }
        });
        node.start();
        let held = read_held(&mut node.connect());
        let lost = check_held(&rounds, &held, killed_at);
        assert_none_lost(
            &lost,
            &format!("appendfsync always, power loss round {round}"),
        );
        eprintln!(
            "round {round}: {incrs} INCR and {members} SADD acknowledged, all held after {loss:?}"
        );
    }
    assert_no_panic(&node);
}

#[test]
fn everysec_power_loss_loses_only_the_last_second() {
    let mut node = Node::start_new(&[
        "--appendfsync",
        "everysec",
        "--debug-fsync-watermark",
        "yes",
    ]);
    let (ledgers, killed_at) = load_then_kill(&mut node, 0);
    let (incrs, members) = acked_counts(&ledgers);
    assert!(incrs > 0 && members > 0, "the load made no progress");
    let loss = disk::power_loss(&node.shard_dir(), |synced, _| synced);
    node.start();
    let held = read_held(&mut node.connect());
    let lost = check_held(&[ledgers], &held, killed_at);
    let window_ms = (EVERYSEC_WINDOW + KILL_SLACK).as_millis() as i128;
    let early: Vec<&Lost> = lost
        .iter()
        .filter(|l| l.acked_before_kill_ms > window_ms)
        .collect();
    assert!(
        early.is_empty(),
        "{} of {} lost writes were acknowledged more than {window_ms} ms before the kill:\n{}",
        early.len(),
        lost.len(),
        describe(early)
    );
    eprintln!(
        "everysec power loss: {incrs} INCR and {members} SADD acknowledged, {} lost (acknowledged at most {:?} ms before the kill); {loss:?}",
        lost.len(),
        lost.iter().map(|l| l.acked_before_kill_ms).max()
    );
    assert_no_panic(&node);
}

// ---------------------------------------------------------------------------------------
// Random damage to segments and snapshots (R13)

/// Seed of the dataset's writes and of the damage (fixed: every run makes the same choices;
/// the bytes differ only where timestamps do).
const DAMAGE_SEED: u64 = 0x00da_3a9e_0005;
const DAMAGE_CASES: usize = 200;
/// Cases run in parallel (each on its own copy of the data, with its own process).
const DAMAGE_WORKERS: usize = 4;
/// The run stops after this many violations, and reports them all.
const DAMAGE_FAILURES_MAX: usize = 5;
/// Writes before SAVE, between SAVE and BGSAVE, and after BGSAVE.
const DATASET_PHASES: [usize; 3] = [800, 700, 500];

/// A key's value. Each key has one type, named by its prefix.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Value {
    Str(String),
    Set(BTreeSet<String>),
    Hash(BTreeMap<String, String>),
    List(Vec<String>),
    Zset(BTreeMap<String, i64>),
}

type State = BTreeMap<String, Value>;

/// One write of the dataset: one command, which changes the state (values and members are
/// unique), and one log record.
#[derive(Clone, Debug)]
enum Write {
    Set(String, String),
    Incr(String),
    Sadd(String, String),
    Hset(String, String, String),
    Rpush(String, String),
    Zadd(String, i64, String),
}

impl Write {
    fn key(&self) -> &str {
        match self {
            Write::Set(k, _)
            | Write::Incr(k)
            | Write::Sadd(k, _)
            | Write::Hset(k, _, _)
            | Write::Rpush(k, _)
            | Write::Zadd(k, _, _) => k,
        }
    }

    fn argv(&self) -> Vec<String> {
        let v = |a: &[&str]| a.iter().map(|s| s.to_string()).collect();
        match self {
            Write::Set(k, x) => v(&["SET", k, x]),
            Write::Incr(k) => v(&["INCR", k]),
            Write::Sadd(k, m) => v(&["SADD", k, m]),
            Write::Hset(k, f, x) => v(&["HSET", k, f, x]),
            Write::Rpush(k, x) => v(&["RPUSH", k, x]),
            Write::Zadd(k, s, m) => v(&["ZADD", k, &s.to_string(), m]),
        }
    }

    fn apply(&self, state: &mut State) {
        let key = self.key().to_string();
        let value = state.remove(&key);
        let new = match (self, value) {
            (Write::Set(_, x), _) => Value::Str(x.clone()),
            (Write::Incr(_), v) => {
                let n = match v {
                    Some(Value::Str(s)) => s.parse::<i64>().expect("counter"),
                    _ => 0,
                };
                Value::Str((n + 1).to_string())
            }
            (Write::Sadd(_, m), v) => {
                let mut s = match v {
                    Some(Value::Set(s)) => s,
                    _ => BTreeSet::new(),
                };
                s.insert(m.clone());
                Value::Set(s)
            }
            (Write::Hset(_, f, x), v) => {
                let mut h = match v {
                    Some(Value::Hash(h)) => h,
                    _ => BTreeMap::new(),
                };
                h.insert(f.clone(), x.clone());
                Value::Hash(h)
            }
            (Write::Rpush(_, x), v) => {
                let mut l = match v {
                    Some(Value::List(l)) => l,
                    _ => Vec::new(),
                };
                l.push(x.clone());
                Value::List(l)
            }
            (Write::Zadd(_, sc, m), v) => {
                let mut z = match v {
                    Some(Value::Zset(z)) => z,
                    _ => BTreeMap::new(),
                };
                z.insert(m.clone(), *sc);
                Value::Zset(z)
            }
        };
        state.insert(key, new);
    }
}

/// `n` seeded writes over about 280 keys of six types, numbered from `seq0`; values are
/// 60 to 240 bytes so that the log spans several 64 KiB segments.
fn dataset_writes(rng: &mut Rng, n: usize, seq0: usize) -> Vec<Write> {
    (seq0..seq0 + n)
        .map(|seq| {
            let pad = "x".repeat(rng.range(60, 240));
            match rng.below(6) {
                0 => Write::Set(format!("s:{}", rng.below(60)), format!("v{seq}-{pad}")),
                1 => Write::Incr(format!("c:{}", rng.below(40))),
                2 => Write::Sadd(format!("set:{}", rng.below(50)), format!("m{seq}-{pad}")),
                3 => Write::Hset(
                    format!("h:{}", rng.below(50)),
                    format!("f{}", rng.below(8)),
                    format!("v{seq}-{pad}"),
                ),
                4 => Write::Rpush(format!("l:{}", rng.below(40)), format!("e{seq}-{pad}")),
                _ => Write::Zadd(
                    format!("z:{}", rng.below(40)),
                    rng.below(1000) as i64,
                    format!("m{seq}-{pad}"),
                ),
            }
        })
        .collect()
}

/// Every key and its value, read with one pipeline.
fn dump(c: &mut Raw) -> State {
    let keys = c.reply(&["KEYS", "*"]).strings();
    let cmds: Vec<Vec<String>> = keys
        .iter()
        .map(|k| {
            let (cmd, extra): (&str, &[&str]) = match k.split(':').next().unwrap_or("") {
                "s" | "c" => ("GET", &[]),
                "set" => ("SMEMBERS", &[]),
                "h" => ("HGETALL", &[]),
                "l" => ("LRANGE", &["0", "-1"]),
                "z" => ("ZRANGE", &["0", "-1", "WITHSCORES"]),
                other => panic!("unexpected key {k} ({other})"),
            };
            let mut argv = vec![cmd.to_string(), k.clone()];
            argv.extend(extra.iter().map(|s| s.to_string()));
            argv
        })
        .collect();
    let mut bytes = Vec::new();
    for argv in &cmds {
        let args: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        bytes.extend_from_slice(&common::cmd(&args));
    }
    c.send(&bytes);
    let mut state = State::new();
    for (k, argv) in keys.iter().zip(&cmds) {
        let r = common::parse_reply(&c.read_reply());
        let value = match argv[0].as_str() {
            "GET" => match r {
                Reply::Bulk(b) => Value::Str(String::from_utf8_lossy(&b).into_owned()),
                other => panic!("GET {k}: {other:?}"),
            },
            "SMEMBERS" => Value::Set(r.strings().into_iter().collect()),
            "LRANGE" => Value::List(r.strings()),
            _ => {
                let items = r.strings();
                let pairs = items.chunks(2).map(|p| (p[0].clone(), p[1].clone()));
                if argv[0] == "HGETALL" {
                    Value::Hash(pairs.collect())
                } else {
                    Value::Zset(
                        pairs
                            .map(|(m, s)| (m, s.parse().expect("integer score")))
                            .collect(),
                    )
                }
            }
        };
        state.insert(k.clone(), value);
    }
    state
}

fn entry_hash(key: &str, value: &Value) -> u64 {
    let mut h = DefaultHasher::new();
    key.hash(&mut h);
    value.hash(&mut h);
    h.finish()
}

/// An order-independent hash of a whole state (a sum of entry hashes).
fn state_hash(state: &State) -> u64 {
    state
        .iter()
        .fold(0u64, |acc, (k, v)| acc.wrapping_add(entry_hash(k, v)))
}

/// The dataset a real server wrote, and what its writes explain.
struct Dataset {
    /// A copy of the server's `shard-0` after a clean stop.
    dir: tempfile::TempDir,
    writes: Vec<Write>,
    /// `prefix_hashes[k]`: the state hash after the first `k` writes.
    prefix_hashes: Vec<u64>,
    /// Writes the newest snapshot holds.
    at_newest_snapshot: usize,
}

impl Dataset {
    /// The `k` with `state == apply(writes[..k])`, if any.
    fn explain(&self, state: &State) -> Option<usize> {
        let h = state_hash(state);
        for k in (0..self.prefix_hashes.len()).filter(|&k| self.prefix_hashes[k] == h) {
            let mut model = State::new();
            for w in &self.writes[..k] {
                w.apply(&mut model);
            }
            if &model == state {
                return Some(k);
            }
        }
        None
    }
}

/// Writes the dataset with a real server: phase 1, SAVE, phase 2, BGSAVE (waited for),
/// phase 3, SIGTERM. 64 KiB segments, no automatic snapshots.
fn build_dataset(rng: &mut Rng) -> Dataset {
    let mut node = Node::start_new(&[
        "--log-segment-bytes-max",
        "65536",
        "--save",
        "",
        "--auto-aof-rewrite-percentage",
        "0",
    ]);
    let mut c = node.connect();
    let mut writes = Vec::new();
    let mut at_newest_snapshot = 0;
    for (phase, n) in DATASET_PHASES.iter().enumerate() {
        let w = dataset_writes(rng, *n, writes.len());
        pipeline(
            &mut c,
            &w.iter().map(Write::argv).collect::<Vec<Vec<String>>>(),
        );
        writes.extend(w);
        match phase {
            0 => ok(&mut c, &["SAVE"]),
            1 => {
                assert_eq!(
                    c.reply(&["BGSAVE"]),
                    Reply::Simple("Background saving started".into())
                );
                at_newest_snapshot = writes.len();
                let shard = node.shard_dir();
                assert!(
                    disk::eventually(JOB_TIMEOUT, || {
                        disk::info_u64(&mut c, "persistence", "rdb_bgsave_in_progress") == 0
                            && disk::snapshots(&shard).len() == 2
                    }),
                    "BGSAVE did not finish; log:\n{}",
                    node.log()
                );
            }
            _ => {}
        }
    }
    let status = node.terminate().expect("the server ran");
    assert!(status.success(), "SIGTERM: {status}; log:\n{}", node.log());
    let dir = tempfile::tempdir().expect("tempdir");
    disk::copy_dir(&node.shard_dir(), dir.path());
    let mut model = State::new();
    let mut h = 0u64;
    let mut prefix_hashes = vec![h];
    for w in &writes {
        if let Some(old) = model.get(w.key()) {
            h = h.wrapping_sub(entry_hash(w.key(), old));
        }
        w.apply(&mut model);
        h = h.wrapping_add(entry_hash(w.key(), &model[w.key()]));
        prefix_hashes.push(h);
    }
    Dataset {
        dir,
        writes,
        prefix_hashes,
        at_newest_snapshot,
    }
}

/// A data file of the dataset and what recovery does with it.
struct DataFile {
    name: String,
    bytes: Vec<u8>,
    kind: FileKind,
}

enum FileKind {
    Segment {
        /// Record extents (file offsets).
        records: Vec<(usize, usize)>,
        /// The newest segment (a torn tail there is cut).
        last: bool,
        /// Recovery from the newest snapshot reads its records (it is not wholly before it).
        replayed: bool,
    },
    Snapshot {
        newest: bool,
    },
}

fn data_files(dir: &Path) -> Vec<DataFile> {
    let segs = disk::segments(dir);
    let snaps = disk::snapshots(dir);
    assert_eq!(snaps.len(), 2, "the dataset has two snapshots");
    assert!(
        segs.len() >= 3,
        "the dataset spans several segments: {segs:?}"
    );
    let newest_snap = disk::position_of(&snaps[1]);
    let mut files = Vec::new();
    for (i, p) in segs.iter().enumerate() {
        let bytes = std::fs::read(p).expect("read segment");
        let next_first = segs.get(i + 1).map(|n| disk::position_of(n));
        files.push(DataFile {
            name: disk::file_name(p),
            kind: FileKind::Segment {
                records: disk::record_extents(&bytes),
                last: i + 1 == segs.len(),
                replayed: next_first.is_none_or(|n| n > newest_snap),
            },
            bytes,
        });
    }
    for (i, p) in snaps.iter().enumerate() {
        files.push(DataFile {
            name: disk::file_name(p),
            bytes: std::fs::read(p).expect("read snapshot"),
            kind: FileKind::Snapshot { newest: i == 1 },
        });
    }
    files
}

#[derive(Clone, Copy, Debug)]
enum Damage {
    /// Cut the file to this length.
    Truncate(usize),
    /// Flip one bit: offset, bit.
    Flip(usize, u8),
    /// Zero every byte from this offset on.
    ZeroFrom(usize),
}

#[derive(Debug)]
struct Case {
    id: usize,
    file: usize,
    what: &'static str,
    damage: Damage,
}

impl Damage {
    fn apply(self, bytes: &[u8]) -> Vec<u8> {
        let mut b = bytes.to_vec();
        match self {
            Damage::Truncate(n) => b.truncate(n),
            Damage::Flip(at, bit) => b[at] ^= 1 << bit,
            Damage::ZeroFrom(at) => b[at..].iter_mut().for_each(|x| *x = 0),
        }
        b
    }

    /// The first byte that differs from the undamaged file.
    fn first_changed(self, bytes: &[u8]) -> usize {
        match self {
            Damage::Truncate(n) => n,
            Damage::Flip(at, _) => at,
            Damage::ZeroFrom(at) => at + bytes[at..].iter().position(|&x| x != 0).unwrap_or(0),
        }
    }
}

/// Seeded cases, a fifth of each kind; a third of them hit the newest segment, the rest
/// any file.
fn damage_cases(files: &[DataFile], rng: &mut Rng) -> Vec<Case> {
    let last_seg = files
        .iter()
        .position(|f| matches!(f.kind, FileKind::Segment { last: true, .. }))
        .expect("a newest segment");
    (0..DAMAGE_CASES)
        .map(|id| {
            let file = if rng.below(3) == 0 {
                last_seg
            } else {
                rng.range(0, files.len())
            };
            let f = &files[file];
            let len = f.bytes.len();
            let (what, damage) = match id % 5 {
                0 => ("truncation", Damage::Truncate(rng.range(0, len))),
                1 => match &f.kind {
                    // Whole records only: a clean file that ends early.
                    FileKind::Segment { records, .. } => {
                        let (s, _) = records[rng.range(0, records.len())];
                        ("truncation between records", Damage::Truncate(s))
                    }
                    FileKind::Snapshot { .. } => {
                        ("truncation", Damage::Truncate(rng.range(0, len)))
                    }
                },
                2 => (
                    "bit flip",
                    Damage::Flip(rng.range(0, len), rng.below(8) as u8),
                ),
                3 => {
                    // Cut inside the last record (or, in a snapshot, its end block).
                    let (s, e) = match &f.kind {
                        FileKind::Segment { records, .. } => *records.last().expect("records"),
                        FileKind::Snapshot { .. } => (len - 16, len),
                    };
                    ("torn last record", Damage::Truncate(rng.range(s + 1, e)))
                }
                _ => {
                    let mut at = rng.range(len.saturating_sub(512), len);
                    // Zero at least one non-zero byte.
                    if f.bytes[at..].iter().all(|&x| x == 0) {
                        at = f
                            .bytes
                            .iter()
                            .rposition(|&x| x != 0)
                            .expect("non-zero byte");
                    }
                    ("zeroed tail", Damage::ZeroFrom(at))
                }
            };
            Case {
                id,
                file,
                what,
                damage,
            }
        })
        .collect()
}

/// What a server must do with a damaged directory.
#[derive(Debug, PartialEq)]
enum Expect {
    /// Start holding every write.
    Full,
    /// Start holding the writes up to some point at or after the newest snapshot; with
    /// `torn: Some(offset)`, log that it cut the damaged file there.
    Prefix { torn: Option<usize> },
    /// Refuse to start naming the damaged file and the offset of the damage.
    Refuse { offset: usize },
    /// A segment cut between records, so the next one no longer follows it: refuse to start
    /// naming the damaged file or the next one (`segment_cut_between_records_refuses_naming_it`
    /// asks for the damaged one).
    RefuseGap { next: String },
}

/// The expected outcome of damage to `files[i]` (from the format, docs/persistence.md §5)
/// and whether `check-log` must call the damaged file clean.
fn expect(files: &[DataFile], i: usize, damage: Damage) -> (Expect, bool) {
    let f = &files[i];
    let FileKind::Segment {
        records,
        last,
        replayed,
    } = &f.kind
    else {
        // Any damage to a snapshot is found; the older snapshot and the log hold it all.
        return (Expect::Full, false);
    };
    let at = damage.first_changed(&f.bytes);
    let boundary = matches!(damage, Damage::Truncate(n)
        if n == disk::SEGMENT_HEADER_BYTES || records.iter().any(|(_, e)| *e == n));
    if at < disk::SEGMENT_HEADER_BYTES {
        // A header cut short is a segment created just before a crash when it is the
        // newest; any other header damage stops the start.
        return match damage {
            Damage::Truncate(_) if *last => (Expect::Prefix { torn: None }, false),
            _ => (Expect::Refuse { offset: 0 }, false),
        };
    }
    if !replayed {
        // Wholly before the newest snapshot: recovery does not read its records.
        return (Expect::Full, boundary);
    }
    if boundary {
        // Whole records only: the file is clean, but the next segment no longer follows.
        let e = if *last {
            Expect::Prefix { torn: None }
        } else {
            Expect::RefuseGap {
                next: files[i + 1].name.clone(),
            }
        };
        return (e, true);
    }
    let &(start, _) = records
        .iter()
        .find(|(s, e)| *s <= at && at < *e)
        .expect("damage inside a record");
    let last_record = records.last().is_some_and(|(s, _)| *s == start);
    let valid_after = matches!(damage, Damage::Flip(..)) && !last_record;
    if *last && !valid_after {
        (Expect::Prefix { torn: Some(start) }, false)
    } else {
        (Expect::Refuse { offset: start }, false)
    }
}

/// A copy of the dataset with one file replaced by `bytes`; returns the temporary root
/// (holding `data/shard-0`) and the damaged file's path.
fn damaged_copy(ds: &Dataset, name: &str, bytes: &[u8]) -> (tempfile::TempDir, std::path::PathBuf) {
    let root = tempfile::tempdir().expect("tempdir");
    let shard = root.path().join("data").join("shard-0");
    disk::copy_dir(ds.dir.path(), &shard);
    let path = shard.join(name);
    std::fs::write(&path, bytes).expect("write damaged file");
    (root, path)
}

/// Case outcomes, counted for the summary.
#[derive(Default, Debug)]
struct Tally {
    full: usize,
    prefix: usize,
    refused: usize,
    fixed_then_served: usize,
    fixed_then_refused: usize,
}

/// Starts a server on the directory under `root` and checks the outcome against `want`;
/// with `logged`, a server that starts must also have logged the name of the damaged file
/// (a snapshot it passed over). Returns how it ended, or what was wrong.
fn start_and_check(
    ds: &Dataset,
    root: &Path,
    name: &str,
    want: &Expect,
    logged: bool,
) -> Result<Start, String> {
    let mut node = Node::on_dir(&root.join("data"), &["--save", ""]);
    let started = node.try_start(disk::REFUSE_TIMEOUT);
    let log = node.last_log();
    if log.contains("panicked") {
        return Err(format!("panic; log:\n{log}"));
    }
    match (&started, want) {
        (Start::Serving, Expect::Full | Expect::Prefix { .. }) => {
            let state = dump(&mut node.connect());
            let Some(k) = ds.explain(&state) else {
                return Err(format!(
                    "started with a state no prefix of the writes explains ({} keys); log:\n{log}",
                    state.len()
                ));
            };
            if *want == Expect::Full && k != ds.writes.len() {
                return Err(format!(
                    "started with {k} of {} writes, expected all; log:\n{log}",
                    ds.writes.len()
                ));
            }
            if k < ds.at_newest_snapshot {
                return Err(format!(
                    "started with {k} writes, fewer than the newest snapshot's {}; log:\n{log}",
                    ds.at_newest_snapshot
                ));
            }
            if logged && !log.contains(name) {
                return Err(format!(
                    "started without a log line naming {name}; log:\n{log}"
                ));
            }
            if let Expect::Prefix { torn: Some(offset) } = want {
                let named = log.lines().any(|l| {
                    l.contains("torn")
                        && l.contains(name)
                        && l.split_whitespace()
                            .any(|w| w == format!("offset={offset}"))
                });
                if !named {
                    return Err(format!(
                        "no log line about the torn tail naming {name} and offset={offset}; log:\n{log}"
                    ));
                }
            }
            Ok(Start::Serving)
        }
        (Start::Exited(status), Expect::Refuse { .. } | Expect::RefuseGap { .. }) => {
            if status.success() {
                return Err(format!(
                    "exited with success instead of refusing; log:\n{log}"
                ));
            }
            let named = match want {
                Expect::Refuse { offset } => {
                    log.contains(name) && log.contains(&format!("offset {offset}:"))
                }
                Expect::RefuseGap { next } => log.contains(name) || log.contains(next.as_str()),
                _ => false,
            };
            if !named {
                return Err(format!(
                    "the refusal does not name {name} and the offset of the damage; log:\n{log}"
                ));
            }
            Ok(Start::Exited(*status))
        }
        (Start::Hung, _) => Err(format!(
            "expected {want:?}, but it neither answered PING nor exited within {:?}; log (after SIGTERM):\n{log}",
            disk::REFUSE_TIMEOUT
        )),
        (other, _) => Err(format!("expected {want:?}, got {other:?}; log:\n{log}")),
    }
}

/// One case: check-log on the damaged file, a server on a damaged copy, and for damage in
/// the middle of a segment, `check-log --fix` then a server on the fixed copy.
fn run_case(
    ds: &Dataset,
    files: &[DataFile],
    case: &Case,
    tally: &Mutex<Tally>,
) -> Result<(), String> {
    let f = &files[case.file];
    let bytes = case.damage.apply(&f.bytes);
    if bytes == f.bytes {
        return Err("the damage changed nothing (test bug)".to_string());
    }
    let (want, clean) = expect(files, case.file, case.damage);
    let (root, path) = damaged_copy(ds, &f.name, &bytes);
    let (code, text) = disk::check_log(&path, false);
    if code != if clean { 0 } else { 1 } {
        return Err(format!(
            "check-log exited {code}, expected {} (file {}); output:\n{text}",
            if clean { 0 } else { 1 },
            if clean { "clean" } else { "damaged" }
        ));
    }
    // check-log names the first bad record.
    let bad_record = match want {
        Expect::Prefix { torn: Some(o) } | Expect::Refuse { offset: o } if o > 0 => Some(o),
        _ => None,
    };
    if let Some(o) = bad_record {
        if !text.contains(&format!("bad record at offset {o}:")) {
            return Err(format!(
                "check-log does not name the bad record at offset {o}:\n{text}"
            ));
        }
    }
    let newest_snapshot = matches!(f.kind, FileKind::Snapshot { newest: true });
    let started = start_and_check(ds, root.path(), &f.name, &want, newest_snapshot)?;
    {
        let mut t = tally.lock().unwrap_or_else(|e| e.into_inner());
        match (&started, &want) {
            (Start::Serving, Expect::Full) => t.full += 1,
            (Start::Serving, _) => t.prefix += 1,
            _ => t.refused += 1,
        }
    }
    // Damage in the middle of a segment (valid records after it, or in an older segment):
    // --fix cuts the file at the bad record.
    let Expect::Refuse { offset } = want else {
        return Ok(());
    };
    if offset == 0 {
        return Ok(());
    }
    let (root, path) = damaged_copy(ds, &f.name, &bytes);
    let (code, text) = disk::check_log(&path, true);
    if code != 0 {
        return Err(format!("check-log --fix exited {code}; output:\n{text}"));
    }
    let (code, text) = disk::check_log(&path, false);
    if code != 0 {
        return Err(format!(
            "check-log after --fix exited {code}; output:\n{text}"
        ));
    }
    let last = matches!(f.kind, FileKind::Segment { last: true, .. });
    if last {
        // The newest segment cut at the bad record: the writes before it are all there.
        start_and_check(
            ds,
            root.path(),
            &f.name,
            &Expect::Prefix { torn: None },
            false,
        )?;
        tally
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .fixed_then_served += 1;
    } else {
        // An older segment cut short no longer reaches the next one: the server may refuse
        // (naming a segment) but must not panic, nor load anything but a prefix.
        let mut node = Node::on_dir(&root.path().join("data"), &["--save", ""]);
        let started = node.try_start(disk::REFUSE_TIMEOUT);
        let log = node.last_log();
        if log.contains("panicked") {
            return Err(format!("after --fix: panic; log:\n{log}"));
        }
        match started {
            Start::Serving => {
                let state = dump(&mut node.connect());
                if ds.explain(&state).is_none() {
                    return Err(format!(
                        "after --fix: started with a state no prefix explains; log:\n{log}"
                    ));
                }
                tally
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .fixed_then_served += 1;
            }
            Start::Exited(status) if !status.success() && log.contains("log-") => {
                tally
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .fixed_then_refused += 1;
            }
            other => return Err(format!("after --fix: {other:?}; log:\n{log}")),
        }
    }
    Ok(())
}

#[test]
fn random_damage_is_cut_refused_or_passed_over_never_loaded() {
    let started = Instant::now();
    let mut rng = Rng(DAMAGE_SEED);
    let ds = build_dataset(&mut rng);
    let files = data_files(ds.dir.path());
    for f in &files {
        let kind = match &f.kind {
            FileKind::Segment {
                records,
                last,
                replayed,
            } => format!(
                "{} records, last {last}, replayed {replayed}",
                records.len()
            ),
            FileKind::Snapshot { newest } => format!("snapshot, newest {newest}"),
        };
        eprintln!("{}: {} bytes, {kind}", f.name, f.bytes.len());
    }
    // The undamaged copy loads every write.
    let (root, _) = damaged_copy(&ds, &files[0].name, &files[0].bytes);
    start_and_check(&ds, root.path(), &files[0].name, &Expect::Full, false)
        .unwrap_or_else(|e| panic!("undamaged data: {e}"));
    for f in &files {
        let (code, text) = disk::check_log(&ds.dir.path().join(&f.name), false);
        assert_eq!(code, 0, "check-log on the undamaged {}: {text}", f.name);
    }
    let cases = damage_cases(&files, &mut rng);
    let next = AtomicUsize::new(0);
    let failures: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let tally = Mutex::new(Tally::default());
    std::thread::scope(|s| {
        for _ in 0..DAMAGE_WORKERS {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(case) = cases.get(i) else { break };
                    if failures.lock().unwrap_or_else(|e| e.into_inner()).len()
                        >= DAMAGE_FAILURES_MAX
                    {
                        break;
                    }
                    if let Err(e) = run_case(&ds, &files, case, &tally) {
                        let f = &files[case.file];
                        failures
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(format!(
                                "case {} ({}, {:?} of {}, {} bytes; expected {:?}): {e}",
                                case.id,
                                case.what,
                                case.damage,
                                f.name,
                                f.bytes.len(),
                                expect(&files, case.file, case.damage).0
                            ));
                    }
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap_or_else(|e| e.into_inner());
    let tally = tally.into_inner().unwrap_or_else(|e| e.into_inner());
    eprintln!(
        "{} damage cases over {} files in {:?}: {tally:?}",
        next.load(Ordering::Relaxed).min(DAMAGE_CASES),
        files.len(),
        started.elapsed()
    );
    assert!(
        failures.is_empty(),
        "{} damage cases failed (seed {DAMAGE_SEED:#x}):\n\n{}",
        failures.len(),
        failures.join("\n\n")
    );
}

#[test]
fn segment_cut_between_records_refuses_naming_it() {
    // A segment that lost whole records at its end is clean by itself (check-log passes it):
    // only the gap before the next segment shows the damage, so the refusal must name the
    // segment that lost its end.
    let mut node = Node::start_new(&["--log-segment-bytes-max", "65536", "--save", ""]);
    let mut c = node.connect();
    let cmds: Vec<Vec<String>> = (0..300)
        .map(|i| vec!["SET".into(), format!("k:{i}"), "v".repeat(1024)])
        .collect();
    pipeline(&mut c, &cmds);
    assert!(node.terminate().is_some_and(|s| s.success()));
    let segs = disk::segments(&node.shard_dir());
    assert!(segs.len() >= 3, "300 KiB in 64 KiB segments: {segs:?}");
    let victim = &segs[1];
    let bytes = std::fs::read(victim).expect("read segment");
    let records = disk::record_extents(&bytes);
    let cut = records[records.len() / 2].0;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(victim)
        .expect("open segment");
    f.set_len(cut as u64).expect("truncate");
    let (code, text) = disk::check_log(victim, false);
    assert_eq!(code, 0, "whole records only: {text}");
    let (status, log) = node.start_refused();
    assert!(!status.success());
    assert!(
        log.contains(&disk::file_name(victim)),
        "the refusal must name {}, which lost its records from offset {cut} on; log:\n{log}",
        disk::file_name(victim)
    );
}

// ---------------------------------------------------------------------------------------
// Bad data directories

/// A tmpfs of `size`, or None (with the reason printed) when this process cannot mount one.
fn tmpfs_or_skip(size: &str, test: &str) -> Option<Tmpfs> {
    if !disk::is_root() {
        eprintln!("{test}: SKIPPED: not root (mounting a tmpfs needs it)");
        return None;
    }
    match Tmpfs::mount(size) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("{test}: SKIPPED: {e}");
            None
        }
    }
}

/// One write on a connection that may be closed under it: its reply, or None when the
/// connection broke (under `always` a write whose fsync failed gets no reply).
fn try_write(c: &mut Raw, args: &[&str]) -> Option<Reply> {
    let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    c.try_send(&common::cmd(&argv)).ok()?;
    c.try_read_reply(REPLY_TIMEOUT)
        .ok()
        .map(|r| common::parse_reply(&r))
}

/// Waits until everything logged so far is fsynced (`aof_durable_position` reaches
/// `aof_position`), so that a SIGKILL after it tests recovery, not the last instants.
fn wait_all_durable(c: &mut Raw) {
    let durable = disk::eventually(JOB_TIMEOUT, || {
        let m = disk::info(c, "persistence");
        m["aof_durable_position"].parse::<u64>().ok() >= m["aof_position"].parse::<u64>().ok()
    });
    assert!(
        durable,
        "the log never became durable: {:?}",
        disk::info(c, "persistence")
    );
}

/// Fills a small tmpfs under load until writes are refused, checks the refusal, frees space
/// and checks that writes resume and that every acknowledged write survives a restart.
fn full_disk(fsync: &str, test: &str) {
    const MISCONF: &str = "MISCONF Errors writing to the AOF file: No space left on device";
    let Some(fs) = tmpfs_or_skip("2m", test) else {
        return;
    };
    // Half of the space goes to a file that is deleted later to free it (a busy tmpfs cannot
    // be unmounted or grown from here).
    let filler = fs.path.join("filler");
    std::fs::write(&filler, vec![0xa5u8; 1024 * 1024]).expect("write the filler file");
    let mut node = Node::on_dir(&fs.path, &["--appendfsync", fsync, "--save", ""]);
    node.start();
    let mut c = node.connect();
    let value = "v".repeat(4096);
    let mut acked: BTreeMap<String, String> = BTreeMap::new();
    let mut refused: Option<(String, String)> = None;
    let mut unanswered = 0;
    // 2000 × 4 KiB is eight times the space left: the disk fills long before.
    for i in 0..2000 {
        let key = format!("k:{i}");
        match try_write(&mut c, &["SET", &key, &value]) {
            Some(Reply::Simple(s)) if s == "OK" => {
                acked.insert(key, value.clone());
            }
            Some(Reply::Err(e)) => {
                refused = Some((key, e));
                break;
            }
            Some(other) => panic!("SET {key}: {other:?}"),
            // Not acknowledged: the connection closed unanswered (`always`), or no reply
            // came in time.
            None => {
                unanswered += 1;
                c = node.connect();
            }
        }
    }
    let (refused_key, err) = refused.unwrap_or_else(|| {
        panic!(
            "2000 writes of 4 KiB on a 2 MiB disk were never refused with MISCONF: {} acknowledged, {unanswered} got no reply (connection closed, or nothing within {REPLY_TIMEOUT:?}); log:\n{}",
            acked.len(),
            node.log()
        )
    });
    assert_eq!(err, MISCONF);
    assert!(
        !acked.is_empty(),
        "no write was accepted before the disk filled"
    );
    // Reads go on; writes and PING are refused; INFO says why.
    let (some_key, some_value) = acked.iter().next().expect("an acknowledged key");
    assert_eq!(
        c.reply(&["GET", some_key]),
        Reply::Bulk(some_value.clone().into_bytes())
    );
    assert_eq!(c.reply(&["PING"]), Reply::Err(MISCONF.into()));
    assert_eq!(c.reply(&["SET", "x", "1"]), Reply::Err(MISCONF.into()));
    assert_eq!(
        disk::info(&mut c, "persistence")["aof_last_write_status"],
        "err"
    );
    // Free the space: the writer's retry succeeds and writes are accepted again.
    std::fs::remove_file(&filler).expect("delete the filler file");
    let resumed = disk::eventually(JOB_TIMEOUT, || {
        match try_write(&mut c, &["SET", "after:0", "x"]) {
            Some(Reply::Simple(s)) if s == "OK" => true,
            Some(Reply::Err(e)) if e == MISCONF => false,
            Some(other) => panic!("SET after:0: {other:?}"),
            None => {
                c = node.connect();
                false
            }
        }
    });
    assert!(
        resumed,
        "writes still refused after space was freed; log:\n{}",
        node.log()
    );
    acked.insert("after:0".into(), "x".into());
    for i in 1..20 {
        ok(&mut c, &["SET", &format!("after:{i}"), &i.to_string()]);
        acked.insert(format!("after:{i}"), i.to_string());
    }
    assert_eq!(c.reply(&["PING"]), Reply::Simple("PONG".into()));
    assert_eq!(
        disk::info(&mut c, "persistence")["aof_last_write_status"],
        "ok"
    );
    wait_all_durable(&mut c);
    node.restart();
    let mut c = node.connect();
    for (k, v) in &acked {
        assert_eq!(
            c.reply(&["GET", k]),
            Reply::Bulk(v.clone().into_bytes()),
            "acknowledged {k} after the restart"
        );
    }
    // Refused writes were not applied.
    assert_eq!(c.reply(&["GET", &refused_key]), Reply::Nil);
    assert_eq!(c.reply(&["GET", "x"]), Reply::Nil);
    eprintln!(
        "{test}: {} writes acknowledged around a full disk, all held after a restart",
        acked.len()
    );
    assert_no_panic(&node);
}

#[test]
fn full_disk_under_everysec_refuses_writes_with_misconf_then_resumes_without_loss() {
    full_disk(
        "everysec",
        "full_disk_under_everysec_refuses_writes_with_misconf_then_resumes_without_loss",
    );
}

#[test]
fn full_disk_under_always_refuses_writes_with_misconf_then_resumes_without_loss() {
    full_disk(
        "always",
        "full_disk_under_always_refuses_writes_with_misconf_then_resumes_without_loss",
    );
}

#[test]
fn read_only_directory_refuses_to_start() {
    let Some(fs) = tmpfs_or_skip("4m", "read_only_directory_refuses_to_start") else {
        return;
    };
    let mut node = Node::on_dir(&fs.path, &[]);
    node.start();
    ok(&mut node.connect(), &["SET", "k", "v"]);
    assert!(node.terminate().is_some_and(|s| s.success()));
    // Root ignores file modes: only a read-only mount makes the directory unwritable.
    fs.remount(true);
    let (status, log) = node.start_refused();
    assert!(!status.success());
    assert!(
        log.contains("Read-only file system")
            && log.contains(&node.shard_dir().display().to_string()),
        "the refusal must say the directory is read-only; log:\n{log}"
    );
    fs.remount(false);
    node.start();
    assert_eq!(node.connect().reply(&["GET", "k"]), Reply::bulk("v"));
    assert_no_panic(&node);
}

#[test]
fn foreign_segment_refuses_to_start_naming_it() {
    let mut a = Node::start_new(&["--site", "a"]);
    ok(&mut a.connect(), &["SET", "from-a", "1"]);
    assert!(a.terminate().is_some_and(|s| s.success()));
    let mut b = Node::start_new(&["--site", "b"]);
    ok(&mut b.connect(), &["SET", "from-b", "1"]);
    assert!(b.terminate().is_some_and(|s| s.success()));
    let a_segment = disk::segments(&a.shard_dir())[0].clone();
    // A's segment copied in after B's own, then over B's segment of the same name.
    let later = b.shard_dir().join(format!("log-{:020}.log", 1_000_000u64));
    let same = b.shard_dir().join(disk::file_name(&a_segment));
    assert!(same.exists(), "B has a segment named as A's first one");
    for target in [&later, &same] {
        if target == &same {
            std::fs::remove_file(&later).expect("remove the first copy");
        }
        std::fs::copy(&a_segment, target).expect("copy A's segment");
        let (status, log) = b.start_refused();
        assert!(!status.success());
        assert!(
            log.contains(&target.display().to_string()) && log.contains("another site"),
            "the refusal must name the foreign file {}; log:\n{log}",
            target.display()
        );
    }
    std::fs::remove_file(&same).expect("remove A's segment");
    assert_no_panic(&b);
}

#[test]
fn unknown_file_is_ignored_and_logged() {
    let mut node = Node::start_new(&[]);
    ok(&mut node.connect(), &["SET", "k", "v"]);
    assert!(node.terminate().is_some_and(|s| s.success()));
    let unknown = node.shard_dir().join("notes.txt");
    std::fs::write(&unknown, "an operator's notes").expect("write the unknown file");
    node.start();
    assert_eq!(node.connect().reply(&["GET", "k"]), Reply::bulk("v"));
    let log = node.last_log();
    assert!(
        log.lines()
            .any(|l| l.contains("ignoring") && l.contains(&unknown.display().to_string())),
        "no log line says the unknown file is ignored; log:\n{log}"
    );
    assert!(unknown.exists(), "the unknown file must be left alone");
}

#[test]
fn second_server_on_the_same_dir_refuses_to_start() {
    let first = Node::start_new(&[]);
    let mut c = first.connect();
    ok(&mut c, &["SET", "k", "v"]);
    let mut second = Node::on_dir(&first.data, &[]);
    let (status, log) = second.start_refused();
    assert!(!status.success());
    assert!(
        log.contains("lock held") && log.contains(&first.shard_dir().display().to_string()),
        "the refusal must say the directory is in use; log:\n{log}"
    );
    // The first server still serves and still writes its log.
    assert_eq!(c.reply(&["GET", "k"]), Reply::bulk("v"));
    ok(&mut c, &["SET", "k2", "v2"]);
    assert_eq!(c.reply(&["PING"]), Reply::Simple("PONG".into()));
}

// ---------------------------------------------------------------------------------------
// SAVE BGSAVE BGREWRITEAOF LASTSAVE, the save policy, CONFIG SET appendfsync, appendonly no

/// Starts BGREWRITEAOF, the node's first, and waits (up to `within`) until it has finished
/// and succeeded.
fn first_rewrite(c: &mut Raw, node: &Node, within: Duration) {
    assert_eq!(
        c.reply(&["BGREWRITEAOF"]),
        Reply::Simple("Background append only file rewriting started".into())
    );
    assert!(
        disk::eventually(within, || {
            persistence_u64(c, "aof_rewrite_in_progress") == 0
                && persistence_u64(c, "aof_rewrites") == 1
        }),
        "BGREWRITEAOF did not finish; log:\n{}",
        node.log()
    );
    assert_eq!(
        disk::info(c, "persistence")["aof_last_bgrewrite_status"],
        "ok"
    );
}

fn persistence_u64(c: &mut Raw, field: &str) -> u64 {
    disk::info_u64(c, "persistence", field)
}

#[test]
fn save_writes_a_snapshot_and_lastsave_advances() {
    let node = Node::start_new(&["--save", ""]);
    let mut c = node.connect();
    ok(&mut c, &["SET", "k", "v"]);
    let before = c.int(&["LASTSAVE"]);
    assert!(disk::snapshots(&node.shard_dir()).is_empty());
    // LASTSAVE counts seconds.
    std::thread::sleep(Duration::from_millis(1100));
    ok(&mut c, &["SAVE"]);
    let snaps = disk::snapshots(&node.shard_dir());
    assert_eq!(snaps.len(), 1, "{snaps:?}");
    let after = c.int(&["LASTSAVE"]);
    assert!(after > before, "LASTSAVE {before} then {after}");
    assert_eq!(persistence_u64(&mut c, "rdb_saves"), 1);
    assert_eq!(persistence_u64(&mut c, "rdb_changes_since_last_save"), 0);
    let (code, text) = disk::check_log(&snaps[0], false);
    assert_eq!(code, 0, "{text}");
}

#[test]
fn bgsave_runs_in_the_background_one_at_a_time() {
    let mut node = Node::start_new(&["--save", ""]);
    let mut c = node.connect();
    let keys = 20_000;
    let cmds: Vec<Vec<String>> = (0..keys)
        .map(|i| vec!["SET".into(), format!("key:{i}"), format!("value:{i}")])
        .collect();
    pipeline(&mut c, &cmds);
    // Both in one pipeline: the second finds the first running (unless it already ended).
    c.send(&[common::cmd(&[b"BGSAVE"]), common::cmd(&[b"BGSAVE"])].concat());
    let first = common::parse_reply(&c.read_reply());
    let second = common::parse_reply(&c.read_reply());
    assert_eq!(first, Reply::Simple("Background saving started".into()));
    let saves = match second {
        Reply::Err(e) if e == "ERR Background save already in progress" => 1,
        Reply::Simple(s) if s == "Background saving started" => 2,
        other => panic!("second BGSAVE: {other:?}"),
    };
    assert!(
        disk::eventually(JOB_TIMEOUT, || {
            persistence_u64(&mut c, "rdb_bgsave_in_progress") == 0
                && persistence_u64(&mut c, "rdb_saves") >= saves
        }),
        "BGSAVE did not finish; log:\n{}",
        node.log()
    );
    assert_eq!(
        disk::info(&mut c, "persistence")["rdb_last_bgsave_status"],
        "ok"
    );
    let snaps = disk::snapshots(&node.shard_dir());
    let (code, text) = disk::check_log(snaps.last().expect("a snapshot"), false);
    assert_eq!(code, 0, "{text}");
    node.restart();
    let mut c = node.connect();
    assert_eq!(c.int(&["DBSIZE"]), keys);
    assert_eq!(
        persistence_u64(&mut c, "rdb_last_load_keys_loaded"),
        keys as u64
    );
    assert_eq!(c.reply(&["GET", "key:12345"]), Reply::bulk("value:12345"));
}

#[test]
fn bgrewriteaof_drops_old_segments_and_a_restart_loads_snapshot_and_tail() {
    let mut node = Node::start_new(&[
        "--save",
        "",
        "--log-segment-bytes-max",
        "65536",
        "--auto-aof-rewrite-percentage",
        "0",
    ]);
    let mut c = node.connect();
    let mut want: BTreeMap<String, String> = BTreeMap::new();
    let mut cmds = Vec::new();
    for i in 0..300 {
        let v = format!("{i}-{}", "v".repeat(1024));
        cmds.push(vec!["SET".into(), format!("k:{i}"), v.clone()]);
        want.insert(format!("k:{i}"), v);
    }
    pipeline(&mut c, &cmds);
    wait_all_durable(&mut c);
    let shard = node.shard_dir();
    let before = disk::segments(&shard);
    assert!(before.len() >= 4, "300 KiB in 64 KiB segments: {before:?}");
    assert_eq!(persistence_u64(&mut c, "aof_rewrites"), 0);
    first_rewrite(&mut c, &node, JOB_TIMEOUT);
    let snaps = disk::snapshots(&shard);
    assert_eq!(snaps.len(), 1, "{snaps:?}");
    let snap_pos = disk::position_of(&snaps[0]);
    let after = disk::segments(&shard);
    assert!(
        after.len() < before.len() && after.iter().all(|s| disk::position_of(s) >= snap_pos),
        "segments before the snapshot at {snap_pos} are kept: {before:?} -> {after:?}"
    );
    // The tail: overwrites and new keys after the snapshot.
    for i in (0..300).step_by(7).chain(300..340) {
        let v = format!("tail-{i}");
        ok(&mut c, &["SET", &format!("k:{i}"), &v]);
        want.insert(format!("k:{i}"), v);
    }
    assert!(node.terminate().is_some_and(|s| s.success()));
    node.start();
    let mut c = node.connect();
    assert_eq!(persistence_u64(&mut c, "aof_snapshot_position"), snap_pos);
    assert_eq!(persistence_u64(&mut c, "rdb_last_load_keys_loaded"), 300);
    assert!(persistence_u64(&mut c, "aof_load_records") >= 40);
    assert_eq!(c.int(&["DBSIZE"]), want.len() as i64);
    for (k, v) in &want {
        assert_eq!(
            c.reply(&["GET", k]),
            Reply::Bulk(v.clone().into_bytes()),
            "{k}"
        );
    }
}

#[test]
fn save_policy_takes_a_snapshot_by_itself() {
    let node = Node::start_new(&["--save", "1 1"]);
    let mut c = node.connect();
    ok(&mut c, &["SET", "k", "v"]);
    let shard = node.shard_dir();
    assert!(
        disk::eventually(JOB_TIMEOUT, || {
            !disk::snapshots(&shard).is_empty()
                && persistence_u64(&mut c, "rdb_saves") >= 1
                && persistence_u64(&mut c, "rdb_bgsave_in_progress") == 0
        }),
        "no snapshot after one change and {JOB_TIMEOUT:?}; log:\n{}",
        node.log()
    );
    assert_eq!(persistence_u64(&mut c, "rdb_changes_since_last_save"), 0);
}

#[test]
fn config_set_appendfsync_takes_effect() {
    let node = Node::start_new(&[]);
    let mut c = node.connect();
    let get = |c: &mut Raw| c.reply(&["CONFIG", "GET", "appendfsync"]).strings();
    assert_eq!(get(&mut c), ["appendfsync", "everysec"]);
    ok(&mut c, &["CONFIG", "SET", "appendfsync", "always"]);
    assert_eq!(get(&mut c), ["appendfsync", "always"]);
    assert_eq!(disk::info(&mut c, "persistence")["aof_fsync"], "always");
    // Under `always` each acknowledged write of a lone client waited for its own fsync.
    let before = persistence_u64(&mut c, "aof_fsyncs");
    for i in 0..10 {
        ok(&mut c, &["SET", &format!("k:{i}"), "v"]);
    }
    assert!(
        disk::eventually(Duration::from_secs(5), || {
            persistence_u64(&mut c, "aof_fsyncs") >= before + 10
        }),
        "10 writes under always, fsyncs {before} -> {}",
        persistence_u64(&mut c, "aof_fsyncs")
    );
    // Each of them was timed: the quantiles are ordered and within the maximum (no bound
    // from below: on tmpfs an fsync takes under a microsecond).
    let p50 = persistence_u64(&mut c, "aof_fsync_p50_us");
    let p99 = persistence_u64(&mut c, "aof_fsync_p99_us");
    let max = persistence_u64(&mut c, "aof_fsync_max_us");
    assert!(p50 <= p99 && p99 <= max, "{p50} {p99} {max}");
    assert!(
        c.err(&["CONFIG", "SET", "appendfsync", "sometimes"])
            .starts_with("ERR")
    );
    assert_eq!(get(&mut c), ["appendfsync", "always"]);
}

#[test]
fn appendonly_no_writes_no_log_and_save_still_works() {
    let mut node = Node::start_new(&["--appendonly", "no", "--save", ""]);
    let mut c = node.connect();
    ok(&mut c, &["SET", "a", "1"]);
    assert_eq!(c.int(&["SADD", "s", "x", "y"]), 2);
    assert_eq!(disk::info(&mut c, "persistence")["aof_enabled"], "0");
    let shard = node.shard_dir();
    assert!(disk::segments(&shard).is_empty());
    assert!(c.err(&["BGSAVE"]).starts_with("ERR"));
    assert!(c.err(&["BGREWRITEAOF"]).starts_with("ERR"));
    ok(&mut c, &["SAVE"]);
    assert_eq!(disk::snapshots(&shard).len(), 1);
    // After the snapshot, with no log, this write lives in memory only.
    ok(&mut c, &["SET", "later", "1"]);
    node.restart();
    let mut c = node.connect();
    assert_eq!(c.reply(&["GET", "a"]), Reply::bulk("1"));
    assert_eq!(
        c.reply(&["SMEMBERS", "s"])
            .strings()
            .into_iter()
            .collect::<BTreeSet<_>>(),
        BTreeSet::from(["x".to_string(), "y".to_string()])
    );
    assert_eq!(c.reply(&["GET", "later"]), Reply::Nil);
    assert_eq!(persistence_u64(&mut c, "rdb_last_load_keys_loaded"), 2);
    assert!(disk::segments(&shard).is_empty());
}

/// Waits up to 10 s for the first snapshot of a `save 1 1` policy (INFO's `rdb_saves`).
fn wait_for_policy_snapshot(node: &Node, c: &mut Raw) {
    assert!(
        common::eventually(Duration::from_secs(10), || persistence_u64(c, "rdb_saves")
            >= 1),
        "no snapshot by the policy; log:\n{}",
        node.log()
    );
}

/// `appendonly no` with a `save` policy (Redis's default configuration): the policy's
/// snapshots are taken in the background while the server runs, BGSAVE works, and a SIGKILL
/// loses nothing written before the last `FLUSH_PERIOD_MS`: the log they are built from (never
/// fsynced, whatever `appendfsync` says, as it is not an AOF; written every 2 ms, not before
/// each reply) is replayed at start. INFO still says
/// `aof_enabled:0`, and the restart keeps the shard's life (a killed process loses no write).
#[test]
fn appendonly_no_with_a_save_policy_snapshots_in_the_background() {
    let mut node = Node::start_new(&["--appendonly", "no", "--save", "1 1"]);
    let mut c = node.connect();
    let cmds: Vec<Vec<String>> = (0..500)
        .map(|i| vec!["SET".into(), format!("k{i}"), format!("v{i}")])
        .collect();
    pipeline(&mut c, &cmds);
    assert_eq!(c.int(&["SADD", "s", "x", "y"]), 2);
    let info = disk::info(&mut c, "persistence");
    assert_eq!(info["aof_enabled"], "0");
    assert_eq!(info["aof_fsync"], "no");
    ok(&mut c, &["CONFIG", "SET", "appendfsync", "always"]);
    assert_eq!(disk::info(&mut c, "persistence")["aof_fsync"], "no");
    // The policy's snapshot (a change, a second), in the background.
    wait_for_policy_snapshot(&node, &mut c);
    assert_eq!(persistence_u64(&mut c, "rdb_changes_since_last_save"), 0);
    let shard = node.shard_dir();
    assert!(!disk::snapshots(&shard).is_empty());
    assert!(!node.log().contains("in the foreground"), "{}", node.log());
    ok(&mut c, &["CONFIG", "SET", "save", ""]);
    assert_eq!(
        c.reply(&["BGSAVE"]),
        Reply::Simple("Background saving started".into())
    );
    assert!(common::eventually(Duration::from_secs(10), || {
        persistence_u64(&mut c, "rdb_bgsave_in_progress") == 0
            && persistence_u64(&mut c, "rdb_saves") >= 2
    }));
    // Written after the last snapshot: the log keeps it across a SIGKILL once the flush loop
    // wrote it (within 2 ms).
    ok(&mut c, &["SET", "later", "1"]);
    let life = disk::info(&mut c, "crdt")["crdt_life"].clone();
    std::thread::sleep(Duration::from_millis(100));
    node.restart();
    let mut c = node.connect();
    assert_eq!(c.reply(&["GET", "later"]), Reply::bulk("1"));
    assert_eq!(c.reply(&["GET", "k499"]), Reply::bulk("v499"));
    assert_eq!(c.int(&["SCARD", "s"]), 2);
    assert_eq!(c.int(&["DBSIZE"]), 502);
    assert_eq!(disk::info(&mut c, "crdt")["crdt_life"], life);
}

/// A `save` policy set by CONFIG SET on a server started without the log (`appendonly no`,
/// `save ""`) still writes snapshots, in the foreground (as SAVE), and says so in the log;
/// the restart after a SIGKILL has what the snapshot held. The next start keeps no log either,
/// so it begins a new life (the run before it may have lost writes).
#[test]
fn a_save_policy_set_without_the_log_snapshots_in_the_foreground() {
    let mut node = Node::start_new(&["--appendonly", "no", "--save", ""]);
    let mut c = node.connect();
    ok(&mut c, &["SET", "a", "1"]);
    ok(&mut c, &["CONFIG", "SET", "save", "1 1"]);
    wait_for_policy_snapshot(&node, &mut c);
    assert!(node.log().contains("in the foreground"), "{}", node.log());
    assert!(disk::segments(&node.shard_dir()).is_empty());
    let life = disk::info(&mut c, "crdt")["crdt_life"].clone();
    node.restart();
    let mut c = node.connect();
    assert_eq!(c.reply(&["GET", "a"]), Reply::bulk("1"));
    assert_ne!(disk::info(&mut c, "crdt")["crdt_life"], life);
}

/// CONFIG SET appendonly at run time, as Redis's: `yes` on a node started without any log
/// starts one, from a snapshot of the live state, so a SIGKILL after it loses nothing; `no`
/// without a save policy stops it (the life file says so first, and the next start begins a
/// new life), and what is written after it is lost at a SIGKILL, as in Redis; `no` with a
/// policy keeps the log for the policy's snapshots.
#[test]
fn config_set_appendonly_starts_and_stops_the_log() {
    let mut node = Node::start_new(&["--appendonly", "no", "--save", ""]);
    let mut c = node.connect();
    ok(&mut c, &["SET", "before", "1"]);
    let shard = node.shard_dir();
    assert!(disk::segments(&shard).is_empty());
    ok(&mut c, &["CONFIG", "SET", "appendonly", "yes"]);
    let info = disk::info(&mut c, "persistence");
    assert_eq!(info["aof_enabled"], "1");
    assert_eq!(info["aof_fsync"], "everysec");
    assert!(!disk::segments(&shard).is_empty());
    assert_eq!(disk::snapshots(&shard).len(), 1);
    assert!(
        std::fs::read_to_string(shard.join("life"))
            .unwrap()
            .contains("log yes")
    );
    ok(&mut c, &["SET", "after", "2"]);
    let life = disk::info(&mut c, "crdt")["crdt_life"].clone();
    node.restart();
    let mut c = node.connect();
    assert_eq!(c.reply(&["GET", "before"]), Reply::bulk("1"));
    assert_eq!(c.reply(&["GET", "after"]), Reply::bulk("2"));
    // This start (flags `appendonly no`, `save ""`) keeps no log: a new life, as any such.
    assert_ne!(disk::info(&mut c, "crdt")["crdt_life"], life);
    // `appendfsync` in the same command applies to the AOF it starts, in either order.
    ok(
        &mut c,
        &[
            "CONFIG",
            "SET",
            "appendfsync",
            "always",
            "appendonly",
            "yes",
        ],
    );
    assert_eq!(disk::info(&mut c, "persistence")["aof_fsync"], "always");
    // `no` with a policy in the same command: the log stays, unfsynced, whatever
    // `appendfsync` the command sets before it.
    ok(
        &mut c,
        &[
            "CONFIG",
            "SET",
            "appendfsync",
            "everysec",
            "appendonly",
            "no",
            "save",
            "3600 1",
        ],
    );
    let info = disk::info(&mut c, "persistence");
    assert_eq!(
        (info["aof_enabled"].as_str(), info["aof_fsync"].as_str()),
        ("0", "no")
    );
    ok(&mut c, &["SET", "kept", "3"]);
    // `no` without one: the log stops.
    ok(&mut c, &["CONFIG", "SET", "save", ""]);
    ok(&mut c, &["CONFIG", "SET", "appendonly", "yes"]);
    ok(&mut c, &["CONFIG", "SET", "appendonly", "no"]);
    assert!(!disk::info(&mut c, "persistence").contains_key("aof_fsync"));
    assert!(
        std::fs::read_to_string(shard.join("life"))
            .unwrap()
            .contains("log no")
    );
    ok(&mut c, &["SET", "lost", "4"]);
    std::thread::sleep(Duration::from_millis(100));
    node.restart();
    let mut c = node.connect();
    assert_eq!(c.reply(&["GET", "kept"]), Reply::bulk("3"));
    assert_eq!(c.reply(&["GET", "lost"]), Reply::Nil);
    assert_eq!(c.reply(&["GET", "after"]), Reply::bulk("2"));
}

/// FLUSHALL with a `save` policy saves the emptied data set at once, as Redis's
/// `flushAllDataAndResetRDB`: no older snapshot brings the keys back at a restart (here a node
/// without the log, whose policy was set at run time), and the changes since the last save
/// are 0; without a policy they count.
#[test]
fn flushall_with_a_save_policy_saves_the_empty_data_set() {
    let mut node = Node::start_new(&["--appendonly", "no", "--save", ""]);
    let mut c = node.connect();
    ok(&mut c, &["SET", "k", "v"]);
    ok(&mut c, &["FLUSHALL"]);
    assert!(persistence_u64(&mut c, "rdb_changes_since_last_save") > 0);
    ok(&mut c, &["SET", "k", "v"]);
    ok(&mut c, &["CONFIG", "SET", "save", "3600 1"]);
    ok(&mut c, &["SAVE"]);
    ok(&mut c, &["FLUSHALL", "ASYNC"]);
    assert_eq!(persistence_u64(&mut c, "rdb_changes_since_last_save"), 0);
    node.restart();
    let mut c = node.connect();
    assert_eq!(c.reply(&["GET", "k"]), Reply::Nil);
    assert_eq!(c.int(&["DBSIZE"]), 0);
}

/// A node holding 300 keys, restarted with `key-load-delay` (5 ms a record: its replay takes
/// about 1.5 s), and a connection made while it loads. The directory lives as long as the
/// first value.
fn restarted_slow_to_load() -> (tempfile::TempDir, Node, Raw) {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("slow.toml");
    std::fs::write(&conf, "key-load-delay = 5000\nsave = \"\"\n").unwrap();
    let conf_flag = conf.display().to_string();
    let mut node = Node::new(&["--config", &conf_flag]);
    node.start();
    let mut c = node.connect();
    let cmds: Vec<Vec<String>> = (0..300)
        .map(|i| vec!["SET".to_string(), format!("k{i}"), "v".to_string()])
        .collect();
    pipeline(&mut c, &cmds);
    drop(c);
    node.kill();
    node.spawn();
    let deadline = Instant::now() + Duration::from_secs(10);
    let c = loop {
        if let Ok(c) = std::panic::catch_unwind(|| Raw::connect(node.port)) {
            break c;
        }
        assert!(Instant::now() < deadline, "never listened");
        std::thread::sleep(Duration::from_millis(20));
    };
    (dir, node, c)
}

/// Waits (30 s at most) until a new connection gets +PONG: the node has loaded.
fn wait_loaded(node: &Node) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut probe = node.connect();
        if probe.call(&[b"PING"]) == b"+PONG\r\n" {
            break;
        }
        assert!(Instant::now() < deadline, "never loaded");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// While a restarted server replays its log, clients that connect are answered -LOADING,
/// and once it has loaded the same connections are served (`key-load-delay` slows loading
/// down, as in Redis's own tests). HELLO, which Redis answers while loading, is answered
/// once loaded, not -LOADING (redis-rs's RESP3 connections start with it and treat
/// -LOADING as a failed connect), with what was pipelined after it.
#[test]
fn clients_are_answered_loading_while_the_log_replays() {
    let (_dir, mut node, mut c) = restarted_slow_to_load();
    assert_eq!(
        c.call(&[b"GET", b"k1"]),
        b"-LOADING Redis is loading the dataset in memory\r\n"
    );
    let mut h = Raw::connect(node.port);
    h.send(b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*2\r\n$3\r\nGET\r\n$2\r\nk7\r\n");
    // A command sent in pieces across the end of loading is served whole.
    c.send(b"*2\r\n$3\r\nGET\r\n$4\r\nk");
    wait_loaded(&node);
    c.send(b"299\r\n");
    assert_eq!(c.read_reply(), b"$1\r\nv\r\n");
    let hello = String::from_utf8_lossy(&h.read_reply()).into_owned();
    assert!(
        hello.starts_with("%7\r\n") && hello.contains("$5\r\nproto\r\n:3\r\n"),
        "{hello}"
    );
    assert_eq!(h.read_reply(), b"$1\r\nv\r\n");
    assert_eq!(c.call(&[b"DBSIZE"]), b":300\r\n");
    node.kill();
}

/// A connection whose replies were still being written when loading ended is served once
/// its client reads them. Handovers used to be taken only as far as they had been sent when
/// the loading responder returned; such a connection's task sent its own later, into a
/// channel no one read, and the client waited forever (seen as a hung reconnect in
/// redis-rs's suite).
#[test]
fn a_connection_still_writing_when_loading_ends_is_served() {
    use std::io::{Read as _, Write as _};
    let (_dir, mut node, mut c) = restarted_slow_to_load();
    assert_eq!(
        c.call(&[b"PING"]),
        b"-LOADING Redis is loading the dataset in memory\r\n"
    );
    // PINGs sent without reading the replies: -LOADING lines fill the socket's buffers
    // until the server's write waits for this client to read.
    const PINGS: usize = 200_000;
    let mut writer = c.stream.try_clone().unwrap();
    let sending = std::thread::spawn(move || {
        let batch = b"*1\r\n$4\r\nPING\r\n".repeat(1000);
        for _ in 0..PINGS / 1000 {
            writer.write_all(&batch).unwrap();
        }
    });
    wait_loaded(&node);
    // Loaded: every PING is answered, -LOADING by the loading port up to the handover and
    // +PONG by the shard after it.
    let mut lines = 0usize;
    let mut pongs = 0usize;
    let mut buf = vec![0u8; 64 * 1024];
    let mut tail: Vec<u8> = Vec::new();
    c.stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    while lines < PINGS {
        let n = match c.stream.read(&mut buf) {
            Ok(n) if n > 0 => n,
            r => panic!("after {lines} of {PINGS} replies ({pongs} +PONG): {r:?}"),
        };
        tail.extend_from_slice(&buf[..n]);
        let whole = tail.iter().rposition(|&b| b == b'\n').map_or(0, |p| p + 1);
        for line in tail[..whole].split_inclusive(|&b| b == b'\n') {
            lines += 1;
            if line == b"+PONG\r\n" {
                pongs += 1;
            } else {
                assert_eq!(line, b"-LOADING Redis is loading the dataset in memory\r\n");
            }
        }
        tail.drain(..whole);
    }
    sending.join().unwrap();
    assert!(pongs > 0, "the shard answered none of them");
    assert_eq!(c.call(&[b"GET", b"k299"]), b"$1\r\nv\r\n");
    node.kill();
}

/// Issue 20: a background snapshot replays the log into a private copy of the data; past
/// `snapshot-memory-bytes-max` it starts again with the keys in more parts, so that copy
/// stays within the budget. The snapshot written in parts holds every key: after a restart
/// (which loads it, the log before it gone) the server holds them all.
#[test]
fn background_snapshot_replays_in_parts_within_its_memory_budget() {
    let mut node = Node::start_new(&["--save", "", "--auto-aof-rewrite-percentage", "0"]);
    let mut c = node.connect();
    ok(
        &mut c,
        &["CONFIG", "SET", "snapshot-memory-bytes-max", "8mb"],
    );
    let value = "v".repeat(1000);
    let n = 12_000;
    let cmds: Vec<Vec<String>> = (0..n)
        .map(|i| vec!["SET".to_string(), format!("k:{i}"), format!("{value}{i}")])
        .collect();
    pipeline(&mut c, &cmds);
    first_rewrite(&mut c, &node, JOB_TIMEOUT * 2);
    assert!(
        node.log().contains("starting again in more parts"),
        "12 MB of values replayed in one part under an 8 MiB budget; log:\n{}",
        node.log()
    );
    drop(c);
    node.restart();
    let mut c = node.connect();
    assert_eq!(c.reply(&["DBSIZE"]), Reply::Int(n));
    for i in [0, 1, n / 2, n - 1] {
        assert_eq!(
            c.reply(&["GET", &format!("k:{i}")]),
            Reply::Bulk(format!("{value}{i}").into_bytes())
        );
    }
}

/// APPEND and SETRANGE on a single site are logged as edits, and a long string holds them
/// unfolded for a while (docs/limits.md): a restart from the log, then one from a snapshot
/// taken while edits were held, show the same bytes.
#[test]
fn appended_strings_come_back_from_the_log_and_the_snapshot() {
    let mut node = Node::start_new(&["--save", ""]);
    let mut c = node.connect();
    ok(&mut c, &["SET", "s", &"x".repeat(1000)]);
    let cmds: Vec<Vec<String>> = (0..500)
        .map(|i| vec!["APPEND".into(), "s".into(), format!("piece{i:04}")])
        .collect();
    pipeline(&mut c, &cmds);
    assert_eq!(c.reply(&["SETRANGE", "s", "3", "abc"]), Reply::Int(5500));
    let want = c.reply(&["GET", "s"]);
    let Reply::Bulk(bytes) = &want else {
        panic!("{want:?}");
    };
    assert!(bytes.starts_with(b"xxxabcxxx") && bytes.ends_with(b"piece0498piece0499"));
    assert!(node.terminate().is_some_and(|s| s.success()));
    node.start();
    let mut c = node.connect();
    assert_eq!(c.reply(&["GET", "s"]), want, "from the log");
    assert_eq!(c.reply(&["APPEND", "s", "!"]), Reply::Int(5501));
    ok(&mut c, &["SAVE"]);
    assert!(node.terminate().is_some_and(|s| s.success()));
    node.start();
    let mut c = node.connect();
    let Reply::Bulk(after) = c.reply(&["GET", "s"]) else {
        panic!("no string after the snapshot");
    };
    assert_eq!(after.len(), 5501);
    assert!(after.starts_with(b"xxxabcxxx") && after.ends_with(b"piece0499!"));
    assert_no_panic(&node);
}

/// DEBUG LOADAOF replays every shard's snapshot and log as a start does and checks it gives
/// the data in memory: OK for data of every type, after a SAVE and after writes since; an
/// error naming why without the log; and an error, with the data untouched and still
/// served, when the log on disk no longer holds what was written (a damaged segment).
#[test]
fn debug_loadaof_checks_the_log_against_the_data() {
    let srv = Server::start_with(&["--appendonly", "yes"]);
    let mut c = srv.connect();
    for line in [
        "debug populate 3000",
        "rpush l a b c",
        "xadd s 1-1 a b",
        "xgroup create s g $",
        "setex t 1000 v",
        "zadd z 1 a 2.5 b",
        "incrbyfloat f 1.5",
        "sadd set 1 2 x",
        "hset h f v",
        "pfadd hll a b c",
        "del key:7",
    ] {
        c.call_line(line);
    }
    assert_eq!(c.call_line("debug loadaof"), "+OK\r\n");
    assert_eq!(c.call_line("save"), "+OK\r\n");
    c.call_line("set after-save x");
    c.call_line("expire key:8 1000");
    let digest = c.call_line("debug digest");
    assert_eq!(c.call_line("debug loadaof"), "+OK\r\n");
    assert_eq!(c.call_line("debug digest"), digest);

    // Every log segment of every shard rewritten with zeros past its header: the replay no
    // longer gives the data.
    let shard_dirs = std::fs::read_dir(srv.dir.path()).expect("data directory");
    for shard in shard_dirs
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_dir())
    {
        for segment in disk::segments(&shard) {
            let mut bytes = std::fs::read(&segment).expect("read segment");
            for b in bytes.iter_mut().skip(64) {
                *b = 0;
            }
            std::fs::write(&segment, bytes).expect("write segment");
        }
    }
    c.call_line("set more y");
    let refused = c.call_line("debug loadaof");
    assert!(refused.starts_with("-ERR DEBUG LOADAOF"), "{refused}");
    assert_eq!(c.call_line("get after-save"), "$1\r\nx\r\n");
    assert_eq!(c.call_line("dbsize"), ":3009\r\n");

    let bare = Server::start_with(&["--appendonly", "no", "--save", ""]);
    let refused = bare.connect().call_line("debug loadaof");
    assert!(
        refused.starts_with("-ERR DEBUG LOADAOF: no op log"),
        "{refused}"
    );
}

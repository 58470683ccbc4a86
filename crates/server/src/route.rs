//! Routing: which shard runs a command, and how replies of several shards merge.
//!
//! The command table says where a command's keys are (`cmd::command::key_positions`); the
//! slot map says which shard owns each key's slot. A command whose keys all hash to one
//! shard runs there (inline when it is the connection's own thread: zero hop). What happens
//! otherwise is the command's `Class`, decided here once per command name:
//!
//! - `Local`: no keys; runs on the connection's thread (connection state, process-wide
//!   registries such as Pub/Sub, the slow log, MONITOR).
//! - `Keyed`: its keys must share a shard, else `-CROSSSLOT`, as Redis Cluster answers; a
//!   command of `crate::read_across::COMMANDS` (it reads the keys of other shards and writes
//!   one shard's) runs there with copies of the others; LMPOP, ZMPOP, the blocking pops
//!   (`conn`), RENAME, RENAMENX, SMOVE and MSETNX (`crate::move_across`) run in steps, each
//!   on one shard.
//! - `Scatter`: MGET, MSET, DEL, UNLINK, EXISTS, TOUCH split their keys by shard and merge the
//!   replies; MSET is atomic per shard (each shard's part is one command there), and
//!   atomic across them inside MULTI (`crate::tx_across` holds every shard of its parts).
//! - `All`: covers the whole keyspace or every thread (DBSIZE, KEYS, FLUSHALL, INFO, CONFIG
//!   SET, CLIENT LIST...): runs on every shard, replies merged by a `Merge` rule.
//! - `Special`: the dispatcher runs it itself (EXEC, WATCH, SCAN, RANDOMKEY, CRDT.WAIT...).
//!
//! A keyless command not named here is `Local`; the unit test below lists every keyless
//! command of the table, so a new one must be classified on purpose.

use smallvec::SmallVec;

use crate::cmd::table::{CommandSpec, Table};
use crate::resp::read;
use crate::resp::reply::Reply;
use crate::slot::{SlotMap, slot};

/// How a command is routed. See the module doc.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    Local,
    Keyed,
    Scatter(Scatter),
    All(Merge),
    Special(Special),
}

/// Commands whose keys may span shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scatter {
    /// MGET: values in key order.
    Mget,
    /// MSET: key-value pairs; +OK when every shard said so.
    Mset,
    /// DEL UNLINK EXISTS TOUCH: the sum of the counts.
    Count,
}

/// How the replies of every shard merge into one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// Integers added (DBSIZE).
    Sum,
    /// The smallest integer (LASTSAVE: the oldest shard's snapshot).
    Min,
    /// Array elements concatenated in shard order (KEYS).
    Concat,
    /// The first error, else the first reply (FLUSHALL, CONFIG SET, SAVE, BGSAVE).
    Same,
    /// INFO texts, field by field (`crate::info_merge`).
    Info,
    /// CLIENT LIST lines in client id order.
    ClientList,
    /// CLIENT KILL: counts added; the old form's +OK when any thread killed one.
    ClientKill,
    /// CRDT.DIGEST: 128-bit digests added.
    Digest,
    /// CRDT.DIGEST SLOTS: per-slot entries, in slot order.
    DigestSlots,
    /// LATENCY HISTOGRAM: each thread's per-command histograms (commands are counted where
    /// they run), calls added and cumulative distributions merged bucket by bucket.
    Histogram,
}

/// Commands the dispatcher runs itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// EXEC: the transaction's keys (queued commands and WATCHed keys) must share a shard.
    Exec,
    /// WATCH: registered on the keys' shard.
    Watch,
    /// DISCARD UNWATCH RESET: drop watches on every shard holding some.
    Unwatch,
    /// SCAN: the cursor says which shard it walks.
    Scan,
    /// RANDOMKEY: a shard chosen in proportion to its keys.
    RandomKey,
    /// CRDT.WAIT: acks of every shard this connection wrote to.
    CrdtWait,
    /// DEBUG: by subcommand.
    Debug,
    /// SYNC and PSYNC for a `REPLCONF rdb-only 1` client: an RDB file of every shard.
    Sync,
    /// CRDT.DIGEST: by argument (all, SLOTS, SLOT n).
    Digest,
    /// SHUTDOWN: every shard closes its log before the process exits.
    Shutdown,
    /// SORT/SORT_RO: coordinated by the connection's thread when its keys (sorted key,
    /// pattern keys, STORE destination) may be on several shards (`crate::sort_across`).
    Sort,
    /// CLUSTER: COUNTKEYSINSLOT and GETKEYSINSLOT run on the slot's shard.
    Cluster,
    /// EVAL, EVALSHA, FCALL and their read-only forms: on their keys' shard; one that declares
    /// no key runs where the keys it reaches are (`conn`'s `BarrierKind::Script`).
    Script,
}

/// The class of a command by its full name.
pub fn class_of(name: &str) -> Class {
    use Class::*;
    match name {
        "mget" => Scatter(self::Scatter::Mget),
        "mset" => Scatter(self::Scatter::Mset),
        "del" | "unlink" | "exists" | "touch" => Scatter(self::Scatter::Count),
        "dbsize" => All(Merge::Sum),
        "lastsave" => All(Merge::Min),
        "keys" => All(Merge::Concat),
        "flushdb" | "flushall" | "config|set" | "config|resetstat" | "save" | "bgsave"
        | "bgrewriteaof" => All(Merge::Same),
        // Every shard has its own Lua states: scripts and libraries are loaded into each.
        "script|load" | "script|flush" | "function|load" | "function|delete" | "function|flush"
        | "function|restore" => All(Merge::Same),
        // Peers are every shard's (each links to every peer).
        "crdt.addpeer" | "crdt.removepeer" => All(Merge::Same),
        // Every shard holds the same scripts and libraries; a busy script is the connection
        // thread's (`script::busy`).
        "script|exists" | "script|kill" | "script|help" | "function|list" | "function|dump"
        | "function|stats" | "function|kill" | "function|help" | "crdt.peers" => Local,
        // Users are each shard's (the connection's thread checks against its own): changes
        // reach every shard. CLIENT PAUSE holds every shard; CLIENT UNBLOCK finds the client
        // on its thread.
        "acl|setuser" | "acl|deluser" | "acl|load" | "client|pause" | "client|unpause"
        | "swapdb" => All(Merge::Same),
        "client|unblock" => All(Merge::Sum),
        "auth"
        | "acl|cat"
        | "acl|dryrun"
        | "acl|genpass"
        | "acl|getuser"
        | "acl|help"
        | "acl|list"
        | "acl|log"
        | "acl|save"
        | "acl|users"
        | "acl|whoami"
        | "client|reply"
        | "client|no-evict"
        | "client|getredir"
        | "client|tracking"
        | "client|caching"
        | "client|trackinginfo"
        | "wait"
        | "role"
        | "replicaof"
        | "slaveof"
        | "module|help"
        | "module|list"
        | "module|load"
        | "module|loadex"
        | "module|unload"
        | "lolwut"
        | "memory|stats"
        | "memory|doctor"
        | "memory|malloc-stats"
        | "memory|purge"
        | "memory|help"
        | "latency|doctor"
        | "latency|graph"
        | "xinfo|help"
        | "xgroup|help"
        | "pfselftest" => Local,
        "info" => All(Merge::Info),
        "latency|histogram" => All(Merge::Histogram),
        "client|list" => All(Merge::ClientList),
        "client|kill" => All(Merge::ClientKill),
        "exec" => Special(self::Special::Exec),
        "watch" => Special(self::Special::Watch),
        "unwatch" | "discard" | "reset" => Special(self::Special::Unwatch),
        "scan" => Special(self::Special::Scan),
        "randomkey" => Special(self::Special::RandomKey),
        "crdt.wait" => Special(self::Special::CrdtWait),
        "crdt.digest" => Special(self::Special::Digest),
        "debug" => Special(self::Special::Debug),
        "shutdown" => Special(self::Special::Shutdown),
        "sync" | "psync" => Special(self::Special::Sync),
        "sort" | "sort_ro" => Special(self::Special::Sort),
        "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro" => {
            Special(self::Special::Script)
        }
        "cluster|countkeysinslot" | "cluster|getkeysinslot" => Special(self::Special::Cluster),
        // Shard channels are not keys here: subscriptions are process-wide.
        "spublish" | "ssubscribe" | "sunsubscribe" => Local,
        // The connection's own settings for SYNC (`cmd::replicas`).
        "replconf" => Local,
        _ => Keyed,
    }
}

/// Every command's class, indexed like `Table::specs`.
pub fn classes(table: &'static Table) -> &'static [Class] {
    static CLASSES: std::sync::OnceLock<Vec<Class>> = std::sync::OnceLock::new();
    CLASSES.get_or_init(|| {
        let mut v = vec![Class::Local; table.specs.len()];
        for spec in &table.specs {
            if let Some(c) = v.get_mut(spec.idx) {
                *c = class_of(spec.meta.name);
            }
        }
        v
    })
}

/// Where a command's keys are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeysAt {
    /// It names no key.
    None,
    /// Every key is on this shard.
    Shard(u16),
    /// Its keys span shards.
    Many,
}

/// Where the keys at `positions` of `argv` are.
pub fn keys_at(slots: &SlotMap, argv: &[&[u8]], positions: &[usize]) -> KeysAt {
    let mut at = KeysAt::None;
    for &p in positions {
        let Some(key) = argv.get(p) else { continue };
        let s = slots.shard_of_key(key);
        match at {
            KeysAt::None => at = KeysAt::Shard(s),
            KeysAt::Shard(t) if t != s => return KeysAt::Many,
            _ => {}
        }
    }
    at
}

/// The key positions of `spec` in `argv`, or None when the arguments name no valid keys.
pub fn positions(
    table: &'static Table,
    spec: &CommandSpec,
    argv: &[&[u8]],
) -> Option<SmallVec<[usize; 8]>> {
    let mut out = SmallVec::new();
    crate::cmd::command::key_positions(table, spec, argv, &mut out).then_some(out)
}

/// A pop over keys of several shards as one command per key, in the order given: each key's
/// shard and the command over that key alone (`positions`: the keys' places in `argv`).
/// LMPOP, ZMPOP: `name 1 key rest`; BLMPOP, BZMPOP: `name timeout 1 key rest`; BLPOP, BRPOP,
/// BZPOPMIN, BZPOPMAX: `name key timeout`.
pub fn pop_tries<A: AsRef<[u8]>>(
    slots: &SlotMap,
    argv: &[A],
    positions: &[usize],
) -> Vec<(u16, Vec<Vec<u8>>)> {
    let (Some(&first), Some(&last)) = (positions.first(), positions.last()) else {
        return Vec::new();
    };
    let owned = |range: &[A]| {
        range
            .iter()
            .map(|a| a.as_ref().to_vec())
            .collect::<Vec<_>>()
    };
    // With a `numkeys` argument, the arguments before it; else those before the first key.
    let numkeys = first >= 2;
    let head = owned(
        argv.get(..if numkeys { first - 1 } else { first })
            .unwrap_or_default(),
    );
    let tail = owned(argv.get(last + 1..).unwrap_or_default());
    positions
        .iter()
        .filter_map(|&p| argv.get(p))
        .map(|key| {
            let key = key.as_ref();
            let mut one = head.clone();
            if numkeys {
                one.push(b"1".to_vec());
            }
            one.push(key.to_vec());
            one.extend(tail.iter().cloned());
            (slots.shard_of_key(key), one)
        })
        .collect()
}

/// Redis's `patternHashSlot`: the slot every key a SORT pattern forms hashes to, when its
/// hash tag fixes it (a `{...}` holding no `*`); None when the keys may be anywhere.
pub fn pattern_slot(pattern: &[u8]) -> Option<u16> {
    let open = pattern.iter().position(|&b| b == b'{')?;
    let rest = pattern.get(open + 1..)?;
    let close = rest.iter().position(|&b| b == b'}')?;
    let tag = rest.get(..close)?;
    if tag.is_empty() || tag.contains(&b'*') {
        return None;
    }
    Some(slot(tag))
}

/// The arguments of a `Scatter` command split by shard: parts in the order their shards
/// first appear (shard, the command's name and that shard's keys, with their values for
/// MSET), and for each key in request order (its part, its place among that part's keys),
/// which `gather` reads.
#[allow(clippy::type_complexity)]
pub fn split_scatter<'a>(
    slots: &SlotMap,
    kind: Scatter,
    argv: &[&'a [u8]],
) -> (Vec<(u16, Vec<&'a [u8]>)>, Vec<(usize, usize)>) {
    let step = if kind == Scatter::Mset { 2 } else { 1 };
    let name = argv.first().copied().unwrap_or_default();
    let mut parts: Vec<(u16, Vec<&[u8]>)> = Vec::new();
    let mut order = Vec::new();
    let mut i = 1;
    while let Some(key) = argv.get(i) {
        let shard = slots.shard_of_key(key);
        let p = match parts.iter().position(|(t, _)| *t == shard) {
            Some(p) => p,
            None => {
                parts.push((shard, vec![name]));
                parts.len() - 1
            }
        };
        if let Some((_, sub)) = parts.get_mut(p) {
            order.push((p, (sub.len() - 1) / step));
            for j in 0..step {
                if let Some(a) = argv.get(i + j) {
                    sub.push(a);
                }
            }
        }
        i += step;
    }
    (parts, order)
}

/// The streams of an XREAD or XREADGROUP split by shard: parts in the order of their shard's
/// first stream (shard, the command over that shard's streams: its `name`, `options`,
/// STREAMS, the keys, their IDs), and for each stream requested, its part and its key, which
/// `merge_streams` reads.
#[allow(clippy::type_complexity)]
pub fn split_streams(
    slots: &SlotMap,
    name: &[u8],
    options: &[&[u8]],
    keys: &[&[u8]],
    ids: &[&[u8]],
) -> (Vec<(u16, Vec<Vec<u8>>)>, Vec<(usize, Vec<u8>)>) {
    let mut groups: Vec<(u16, Vec<usize>)> = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        let t = slots.shard_of_key(k);
        match groups.iter_mut().find(|(s, _)| *s == t) {
            Some((_, v)) => v.push(i),
            None => groups.push((t, vec![i])),
        }
    }
    let mut order = vec![(0usize, Vec::new()); keys.len()];
    let parts = groups
        .iter()
        .enumerate()
        .map(|(p, (t, idx))| {
            let mut a: Vec<Vec<u8>> = Vec::with_capacity(2 + options.len() + 2 * idx.len());
            a.push(name.to_vec());
            a.extend(options.iter().map(|o| o.to_vec()));
            a.push(b"STREAMS".to_vec());
            for &i in idx {
                if let (Some(o), Some(k)) = (order.get_mut(i), keys.get(i)) {
                    *o = (p, k.to_vec());
                    a.push(k.to_vec());
                }
            }
            a.extend(idx.iter().filter_map(|&i| ids.get(i)).map(|x| x.to_vec()));
            (*t, a)
        })
        .collect();
    (parts, order)
}

// ---------------------------------------------------------------------------------------
// Merging replies

/// Merges the replies of a scattered command's parts (`split_scatter`'s, in its part order)
/// into `out`: the first error, else the counts added (DEL, UNLINK, EXISTS, TOUCH), +OK
/// (MSET), or the values in request order (MGET, by `order`).
pub fn gather(kind: Scatter, order: &[(usize, usize)], parts: &[&[u8]], out: &mut Reply) {
    if let Some(e) = parts.iter().find(|p| p.first() == Some(&b'-')) {
        out.raw(e);
        return;
    }
    match kind {
        Scatter::Count => {
            let n: i64 = parts.iter().filter_map(|p| read::int(p, 0)).sum();
            out.int(n);
        }
        Scatter::Mset => out.ok(),
        Scatter::Mget => {
            let els: Vec<Vec<(usize, usize)>> = parts
                .iter()
                .map(|p| read::elements(p, 0).map(|e| e.0).unwrap_or_default())
                .collect();
            out.array(order.len());
            for &(p, j) in order {
                let value = parts.get(p).and_then(|bytes| {
                    let (a, b) = *els.get(p)?.get(j)?;
                    bytes.get(a..b)
                });
                match value {
                    Some(v) => out.raw(v),
                    None => out.null(),
                }
            }
        }
    }
}

/// Merges the parts of an XREAD or XREADGROUP over streams of several shards (one reply per
/// part, each over its shard's streams) into `out`: the streams that gave entries, in request
/// order (`keys`: for each stream requested, its part and its key), as a map in RESP3 and an
/// array of `[key, entries]` pairs in RESP2, or a null when none did; the first error of a
/// part when one failed. Returns how many streams it gave (0 for an error too).
pub fn merge_streams(parts: &[&[u8]], keys: &[(usize, &[u8])], out: &mut Reply) -> usize {
    if let Some(e) = first_error(parts) {
        out.raw(e);
        return 0;
    }
    // Per part, its streams in its own order: (key, the bytes of the stream's element: the
    // pair in RESP2, the key and its value in RESP3).
    let given: Vec<Vec<(&[u8], &[u8])>> = parts
        .iter()
        .map(|p| {
            let mut v = Vec::new();
            match p.first() {
                Some(b'%') => {
                    if let Some((items, _)) = read::flat_items(p, 0) {
                        for pair in items.chunks_exact(2) {
                            let &[(ka, _), (_, ve)] = pair else { continue };
                            if let (Some(k), Some(bytes)) = (read::bulk(p, ka), p.get(ka..ve)) {
                                v.push((k, bytes));
                            }
                        }
                    }
                }
                Some(b'*') => {
                    if let Some((els, _)) = read::elements(p, 0) {
                        for (a, b) in els {
                            let key = read::elements(p, a).and_then(|(f, _)| {
                                f.first().and_then(|&(ka, _)| read::bulk(p, ka))
                            });
                            if let (Some(k), Some(bytes)) = (key, p.get(a..b)) {
                                v.push((k, bytes));
                            }
                        }
                    }
                }
                _ => {}
            }
            v
        })
        .collect();
    let mut next = vec![0usize; given.len()];
    let mut items: Vec<&[u8]> = Vec::new();
    for &(part, key) in keys {
        let (Some(streams), Some(at)) = (given.get(part), next.get_mut(part)) else {
            continue;
        };
        if let Some(&(k, bytes)) = streams.get(*at) {
            if k == key {
                items.push(bytes);
                *at += 1;
            }
        }
    }
    if items.is_empty() {
        out.null_array();
        return 0;
    }
    if out.is_resp3() {
        out.map(items.len());
    } else {
        out.array(items.len());
    }
    for i in &items {
        out.raw(i);
    }
    items.len()
}

/// The first error among `parts`, if any.
fn first_error<'a>(parts: &[&'a [u8]]) -> Option<&'a [u8]> {
    parts
        .iter()
        .copied()
        .find(|p| p.first() == Some(&b'-') || p.first() == Some(&b'!'))
}

/// Merges one reply per shard (in shard order) into `out` by `merge`.
pub fn merge(merge: Merge, parts: &[&[u8]], out: &mut Reply) {
    if let Some(e) = first_error(parts) {
        // CLIENT KILL's old form fails on a thread that had no such client: another may have.
        let any_ok = merge == Merge::ClientKill && parts.iter().any(|p| p.first() == Some(&b'+'));
        if !any_ok {
            out.raw(e);
            return;
        }
    }
    match merge {
        Merge::Sum => {
            let n: i64 = parts
                .iter()
                .filter_map(|p| read::int(p, 0))
                .fold(0i64, i64::saturating_add);
            out.int(n);
        }
        Merge::Min => match parts.iter().filter_map(|p| read::int(p, 0)).min() {
            Some(n) => out.int(n),
            None => out.raw(parts.first().copied().unwrap_or_default()),
        },
        Merge::Concat => {
            let mut items: Vec<&[u8]> = Vec::new();
            for p in parts {
                if let Some((els, _)) = read::elements(p, 0) {
                    items.extend(els.iter().filter_map(|&(a, b)| p.get(a..b)));
                }
            }
            out.array(items.len());
            for i in items {
                out.raw(i);
            }
        }
        Merge::Same => out.raw(parts.first().copied().unwrap_or_default()),
        Merge::Info => {
            let texts: Vec<&[u8]> = parts.iter().filter_map(|p| read::bulk(p, 0)).collect();
            let merged = crate::info_merge::merge(&texts);
            out.verbatim(b"txt", merged.as_bytes());
        }
        Merge::ClientList => {
            let mut lines: Vec<(u64, &[u8])> = Vec::new();
            for p in parts {
                let Some(text) = read::bulk(p, 0) else {
                    continue;
                };
                for line in text.split_inclusive(|&b| b == b'\n') {
                    let id = line
                        .strip_prefix(b"id=")
                        .and_then(|r| r.split(|&b| b == b' ' || b == b'\n').next())
                        .and_then(|n| std::str::from_utf8(n).ok())
                        .and_then(|n| n.parse().ok())
                        .unwrap_or(u64::MAX);
                    lines.push((id, line));
                }
            }
            lines.sort_by_key(|(id, _)| *id);
            let text: Vec<u8> = lines.iter().flat_map(|(_, l)| l.iter().copied()).collect();
            out.verbatim(b"txt", &text);
        }
        Merge::ClientKill => {
            if parts.iter().any(|p| p.first() == Some(&b'+')) {
                out.ok();
            } else {
                let n: i64 = parts.iter().filter_map(|p| read::int(p, 0)).sum();
                out.int(n);
            }
        }
        Merge::Digest => {
            let mut sum: u128 = 0;
            for p in parts {
                if let Some(h) = read::bulk(p, 0) {
                    let v = std::str::from_utf8(h)
                        .ok()
                        .and_then(|h| u128::from_str_radix(h, 16).ok())
                        .unwrap_or(0);
                    sum = sum.wrapping_add(v);
                }
            }
            out.bulk(format!("{sum:032x}").as_bytes());
        }
        Merge::DigestSlots => {
            let mut by_slot: std::collections::BTreeMap<i64, (i64, u128)> = Default::default();
            for p in parts {
                let Some((els, _)) = read::elements(p, 0) else {
                    continue;
                };
                for (a, _) in els {
                    let Some((f, _)) = read::elements(p, a) else {
                        continue;
                    };
                    let (Some(s), Some(k), Some(h)) = (
                        f.first().and_then(|x| read::int(p, x.0)),
                        f.get(1).and_then(|x| read::int(p, x.0)),
                        f.get(2).and_then(|x| read::bulk(p, x.0)),
                    ) else {
                        continue;
                    };
                    let d = std::str::from_utf8(h)
                        .ok()
                        .and_then(|h| u128::from_str_radix(h, 16).ok())
                        .unwrap_or(0);
                    let e = by_slot.entry(s).or_default();
                    e.0 += k;
                    e.1 = e.1.wrapping_add(d);
                }
            }
            out.array(by_slot.len());
            for (s, (k, d)) in by_slot {
                out.array(3);
                out.int(s);
                out.int(k);
                out.bulk(format!("{d:032x}").as_bytes());
            }
        }
        Merge::Histogram => merge_histograms(parts, out),
    }
}

/// One command's histogram while merging: calls, and samples per bucket (keyed by the
/// bucket's upper bound in microseconds).
#[derive(Default)]
struct MergedHistogram {
    calls: i64,
    per_bucket: std::collections::BTreeMap<i64, i64>,
}

/// Merges LATENCY HISTOGRAM replies (`{name: {calls, histogram_usec: {us: cumulative}}}`,
/// RESP2 or RESP3). Every thread's histograms share Redis's logarithmic bucket bounds, so
/// turning each cumulative distribution into per-bucket counts, adding them and summing
/// again is exact. Commands keep the order in which a thread first lists them.
fn merge_histograms(parts: &[&[u8]], out: &mut Reply) {
    let mut order: Vec<&[u8]> = Vec::new();
    let mut by_name: std::collections::HashMap<&[u8], MergedHistogram> = Default::default();
    for p in parts {
        let Some((items, _)) = read::flat_items(p, 0) else {
            continue;
        };
        for pair in items.chunks_exact(2) {
            let &[(name_at, _), (value_at, _)] = pair else {
                continue;
            };
            let Some(name) = read::bulk(p, name_at) else {
                continue;
            };
            let Some((fields, _)) = read::flat_items(p, value_at) else {
                continue;
            };
            let merged = by_name.entry(name).or_insert_with(|| {
                order.push(name);
                MergedHistogram::default()
            });
            for field in fields.chunks_exact(2) {
                let &[(key_at, _), (val_at, _)] = field else {
                    continue;
                };
                match read::bulk(p, key_at) {
                    Some(b"calls") => {
                        merged.calls = merged
                            .calls
                            .saturating_add(read::int(p, val_at).unwrap_or(0));
                    }
                    Some(b"histogram_usec") => {
                        let Some((cdf, _)) = read::flat_items(p, val_at) else {
                            continue;
                        };
                        let mut below = 0i64;
                        for point in cdf.chunks_exact(2) {
                            let &[(us_at, _), (n_at, _)] = point else {
                                continue;
                            };
                            let (Some(us), Some(n)) = (read::int(p, us_at), read::int(p, n_at))
                            else {
                                continue;
                            };
                            let e = merged.per_bucket.entry(us).or_default();
                            *e = e.saturating_add(n.saturating_sub(below));
                            below = n;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    out.map(order.len());
    for name in order {
        let Some(h) = by_name.get(name) else {
            continue;
        };
        out.bulk(name);
        out.map(2);
        out.bulk(b"calls");
        out.int(h.calls);
        out.bulk(b"histogram_usec");
        out.map(h.per_bucket.len());
        let mut cumulative = 0i64;
        for (&us, &n) in &h.per_bucket {
            cumulative = cumulative.saturating_add(n);
            out.int(us);
            out.int(cumulative);
        }
    }
}

// ---------------------------------------------------------------------------------------
// SCAN cursors

/// Bits of a SCAN cursor that name the shard it walks (the top byte; a shard's own cursor
/// leaves them zero: `cmd::keys` keeps its layout generation below them).
pub const SCAN_SHARD_SHIFT: u32 = 56;
pub const SCAN_INNER_MASK: u64 = (1 << SCAN_SHARD_SHIFT) - 1;

/// A client's SCAN cursor: (shard, that shard's own cursor).
pub fn scan_split(cursor: u64) -> (u16, u64) {
    (
        (cursor >> SCAN_SHARD_SHIFT) as u16,
        cursor & SCAN_INNER_MASK,
    )
}

/// The cursor a client gets back after shard `shard` answered `inner` (0: that shard is
/// done): the next shard's start, or 0 after the last shard.
pub fn scan_join(shard: u16, inner: u64, shards: u16) -> u64 {
    if inner != 0 {
        return (u64::from(shard) << SCAN_SHARD_SHIFT) | (inner & SCAN_INNER_MASK);
    }
    let next = shard + 1;
    if next >= shards {
        0
    } else {
        u64::from(next) << SCAN_SHARD_SHIFT
    }
}

/// A shard's SCAN reply (`[cursor, [key...]]`): its next cursor and the spans of its keys'
/// elements; None when it is not one (an error).
pub fn scan_reply(reply: &[u8]) -> Option<(u64, Vec<(usize, usize)>)> {
    let (els, _) = read::elements(reply, 0)?;
    let (c0, _) = *els.first()?;
    let (k0, _) = *els.get(1)?;
    let next: u64 = std::str::from_utf8(read::bulk(reply, c0)?)
        .ok()?
        .parse()
        .ok()?;
    let (found, _) = read::elements(reply, k0)?;
    Some((next, found))
}

/// The cursor a client gets back after shard `shard`, walked from its cursor `inner`,
/// answered `next` (`scan_join`): a shard started afresh inherits the restarts the walk used
/// so far, so that the whole iteration has `SCAN_RESTARTS_MAX` of them, however many shards.
pub fn scan_next(shard: u16, inner: u64, next: u64, shards: u16) -> u64 {
    let restarts = crate::cmd::keys::cursor_restarts(inner);
    match scan_join(shard, next, shards) {
        0 => 0,
        j if next == 0 => j | crate::cmd::keys::start_with_restarts(restarts),
        j => j,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// XREAD's parts merge in request order, only the streams that gave entries, a stream
    /// named twice given twice, RESP2 pairs or a RESP3 map; null when none gave any; the first
    /// error otherwise.
    #[test]
    fn stream_reads_merge_in_request_order() {
        let e = |k: &str, id: &str| {
            format!(
                "*2\r\n${}\r\n{k}\r\n*1\r\n*2\r\n${}\r\n{id}\r\n*0\r\n",
                k.len(),
                id.len()
            )
        };
        // Shard 0 holds a and c (only c gave entries), shard 1 holds b (twice).
        let p0 = format!("*1\r\n{}", e("c", "1-1"));
        let p1 = format!("*2\r\n{}{}", e("b", "2-1"), e("b", "2-1"));
        let keys: [(usize, &[u8]); 5] = [(0, b"a"), (1, b"b"), (0, b"c"), (1, b"b"), (0, b"z")];
        let mut out = Reply::new();
        assert_eq!(
            merge_streams(&[p0.as_bytes(), p1.as_bytes()], &keys, &mut out),
            3
        );
        let want = format!("*3\r\n{}{}{}", e("b", "2-1"), e("c", "1-1"), e("b", "2-1"));
        assert_eq!(String::from_utf8_lossy(&out.buf), want);
        // RESP3: a map, each stream's key then its entries.
        let m0: &[u8] = b"%1\r\n$1\r\nc\r\n*0\r\n";
        let m1: &[u8] = b"%1\r\n$1\r\nb\r\n*0\r\n";
        let mut out = Reply::new();
        out.proto = crate::resp::reply::Proto::Resp3;
        assert_eq!(merge_streams(&[m0, m1], &keys[..3], &mut out), 2);
        assert_eq!(out.buf, b"%2\r\n$1\r\nb\r\n*0\r\n$1\r\nc\r\n*0\r\n");
        // Nothing anywhere: the null of the protocol.
        let mut out = Reply::new();
        assert_eq!(merge_streams(&[b"*-1\r\n", b"*-1\r\n"], &keys, &mut out), 0);
        assert_eq!(out.buf, b"*-1\r\n");
        // An error wins.
        let mut out = Reply::new();
        merge_streams(&[p0.as_bytes(), b"-WRONGTYPE x\r\n"], &keys, &mut out);
        assert_eq!(out.buf, b"-WRONGTYPE x\r\n");
    }
    use crate::cmd::table::Flags;

    #[test]
    fn every_keyless_command_is_classified_on_purpose() {
        let table = crate::cmd::table();
        // Keyless commands that run on the connection's thread.
        let local = [
            "client|getname",
            "client|help",
            "client|id",
            "client|info",
            "client|setname",
            "command",
            "command|count",
            "command|docs",
            "command|getkeys",
            "command|getkeysandflags",
            "command|help",
            "command|info",
            "command|list",
            "ping",
            "echo",
            "hello",
            "quit",
            "select",
            "subscribe",
            "unsubscribe",
            "psubscribe",
            "punsubscribe",
            "publish",
            "ssubscribe",
            "sunsubscribe",
            "spublish",
            "pubsub|channels",
            "pubsub|numsub",
            "pubsub|numpat",
            "pubsub|shardchannels",
            "pubsub|shardnumsub",
            "pubsub|help",
            "config|get",
            "config|rewrite",
            "config|help",
            "time",
            "slowlog|get",
            "slowlog|len",
            "slowlog|reset",
            "slowlog|help",
            "latency|latest",
            "latency|history",
            "latency|reset",
            "latency|help",
            "monitor",
            "multi",
            "object|help",
            "cluster|help",
            "cluster|info",
            "cluster|addslots",
            "cluster|addslotsrange",
            "cluster|bumpepoch",
            "cluster|count-failure-reports",
            "cluster|delslots",
            "cluster|delslotsrange",
            "cluster|failover",
            "cluster|flushslots",
            "cluster|forget",
            "cluster|links",
            "cluster|meet",
            "cluster|replicas",
            "cluster|replicate",
            "cluster|reset",
            "cluster|saveconfig",
            "cluster|set-config-epoch",
            "cluster|setslot",
            "cluster|slaves",
            "cluster|keyslot",
            "cluster|myid",
            "cluster|nodes",
            "cluster|shards",
            "cluster|slots",
            "readonly",
            "readwrite",
            "asking",
        ];
        let mut unclassified = Vec::new();
        for spec in &table.specs {
            if spec.handler.is_none() {
                continue;
            }
            let m = spec.meta;
            let keyless = m.first_key <= 0 && !m.flags.contains(Flags::MOVABLE_KEYS);
            let name = m.name;
            let class = class_of(name);
            if keyless && class == Class::Keyed && !local.contains(&name) {
                unclassified.push(name);
            }
        }
        assert!(
            unclassified.is_empty(),
            "keyless commands to classify in route::class_of (Local, All or Special): {unclassified:?}"
        );
    }

    #[test]
    fn keys_at_and_positions() {
        let table = crate::cmd::table();
        let slots = SlotMap::contiguous(4);
        let spec = crate::cmd::resolve(table, &[b"mset", b"a", b"1", b"b", b"2"]).unwrap();
        let argv: [&[u8]; 5] = [b"mset", b"{x}a", b"1", b"{x}b", b"2"];
        let p = positions(table, spec, &argv).unwrap();
        assert_eq!(&p[..], &[1, 3]);
        assert_eq!(
            keys_at(&slots, &argv, &p),
            KeysAt::Shard(slots.shard_of_key(b"x"))
        );
        // "a" (slot 15495) and "b" (slot 3300) are on different shards of four.
        let argv: [&[u8]; 3] = [b"del", b"a", b"b"];
        let spec = crate::cmd::resolve(table, &argv).unwrap();
        let p = positions(table, spec, &argv).unwrap();
        assert_eq!(keys_at(&slots, &argv, &p), KeysAt::Many);
        let argv: [&[u8]; 1] = [b"ping"];
        let spec = crate::cmd::resolve(table, &argv).unwrap();
        assert_eq!(
            keys_at(&slots, &argv, &positions(table, spec, &argv).unwrap()),
            KeysAt::None
        );
        // Movable keys: ZUNIONSTORE dest numkeys k1 k2.
        let argv: [&[u8]; 5] = [b"zunionstore", b"d", b"2", b"k1", b"k2"];
        let spec = crate::cmd::resolve(table, &argv).unwrap();
        assert_eq!(&positions(table, spec, &argv).unwrap()[..], &[1, 3, 4]);
    }

    #[test]
    fn sort_patterns_and_scan_cursors() {
        assert_eq!(pattern_slot(b"w_{tag}_*"), Some(slot(b"tag")));
        assert_eq!(pattern_slot(b"w_*"), None);
        assert_eq!(pattern_slot(b"{*}"), None);
        assert_eq!(scan_split(scan_join(2, 77, 4)), (2, 77));
        assert_eq!(scan_join(2, 0, 4), 3 << SCAN_SHARD_SHIFT);
        assert_eq!(scan_join(3, 0, 4), 0);
    }

    #[test]
    fn merges() {
        let run = |m: Merge, parts: &[&[u8]]| {
            let mut out = Reply::new();
            merge(m, parts, &mut out);
            String::from_utf8(out.buf).unwrap()
        };
        assert_eq!(run(Merge::Sum, &[b":2\r\n", b":3\r\n"]), ":5\r\n");
        assert_eq!(run(Merge::Sum, &[b":2\r\n", b"-ERR x\r\n"]), "-ERR x\r\n");
        assert_eq!(run(Merge::Min, &[b":9\r\n", b":3\r\n"]), ":3\r\n");
        assert_eq!(
            run(
                Merge::Concat,
                &[b"*1\r\n$1\r\na\r\n", b"*0\r\n", b"*1\r\n$1\r\nb\r\n"]
            ),
            "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
        assert_eq!(run(Merge::Same, &[b"+OK\r\n", b"+OK\r\n"]), "+OK\r\n");
        assert_eq!(
            run(Merge::ClientKill, &[b"-ERR No such client\r\n", b"+OK\r\n"]),
            "+OK\r\n"
        );
        assert_eq!(run(Merge::ClientKill, &[b":1\r\n", b":2\r\n"]), ":3\r\n");
        // LATENCY HISTOGRAM: thread 1 ran SET twice (1 µs and 4 µs buckets) and GET once,
        // thread 2 ran SET once (4 µs): calls add up, distributions merge bucket by bucket.
        let t1: &[u8] = b"%2\r\n$3\r\nset\r\n%2\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n%2\r\n:1\r\n:1\r\n:4\r\n:2\r\n$3\r\nget\r\n%2\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n%1\r\n:2\r\n:1\r\n";
        let t2: &[u8] = b"%1\r\n$3\r\nset\r\n%2\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n%1\r\n:4\r\n:1\r\n";
        assert_eq!(
            run(Merge::Histogram, &[t1, t2]),
            "*4\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:3\r\n$14\r\nhistogram_usec\r\n*4\r\n:1\r\n:1\r\n:4\r\n:3\r\n\
             $3\r\nget\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n*2\r\n:2\r\n:1\r\n"
        );
        // The same replies in RESP2 (maps as flat arrays) merge alike.
        let t2_resp2: &[u8] = b"*2\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:1\r\n$14\r\nhistogram_usec\r\n*2\r\n:4\r\n:1\r\n";
        assert_eq!(
            run(Merge::Histogram, &[t2_resp2, t2_resp2]),
            "*2\r\n$3\r\nset\r\n*4\r\n$5\r\ncalls\r\n:2\r\n$14\r\nhistogram_usec\r\n*2\r\n:4\r\n:2\r\n"
        );
        assert_eq!(
            run(
                Merge::ClientList,
                &[b"$14\r\nid=5 a=1\nid=9\n\r\n", b"$5\r\nid=7\n\r\n"]
            ),
            "$19\r\nid=5 a=1\nid=7\nid=9\n\r\n"
        );
        let d1 = format!("{:032x}", 5u128);
        let d2 = format!("{:032x}", u128::MAX);
        let p1 = format!("$32\r\n{d1}\r\n");
        let p2 = format!("$32\r\n{d2}\r\n");
        assert_eq!(
            run(Merge::Digest, &[p1.as_bytes(), p2.as_bytes()]),
            format!("$32\r\n{:032x}\r\n", 4u128)
        );
    }
}

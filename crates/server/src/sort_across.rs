//! SORT and SORT_RO whose keys are on several shards, coordinated by the connection's thread
//! on the main port (issue 17: the port behaves as one server).
//!
//! When the sorted key, the keys its BY and GET patterns may form and its STORE destination
//! are not all one shard's (`spans_shards`), the command runs in steps, each on the shard
//! that owns what it reads, all through `cmd::sort`'s own code:
//!
//! 1. the sorted key's elements and type, read on its shard (`sort::load_from`: WRONGTYPE,
//!    a missing key is empty);
//! 2. the BY values of every element's (distinct) formed key, in jobs on the shards holding
//!    them (at most `SORT_LOOKUPS_PER_JOB_MAX` lookups per job; the shards' jobs at the same
//!    time), then the sort and LIMIT (`sort::select`), here;
//! 3. the GET values of the selected elements, the same way;
//! 4. the reply, or the STORE (one whole-list assignment, or the destination's deletion when
//!    the result is empty), as the command's last step (`hop::Op::SortFinish`, run by
//!    `cmd::call_with` on the destination's shard, else this thread's): that step counts as
//!    the command (command statistics, slow log, MONITOR).
//!
//! Each step reads one shard at one moment; the whole is not atomic: a write to the sorted
//! key or to a pattern key between the steps may show partly (docs/compatibility.md). Inside
//! MULTI/EXEC and scripts the same steps run with every shard held (`held_across`'s
//! `Across::Sort`), so there they are atomic; where that cannot be (a cluster endpoint, a
//! script that wrote already) the shard refuses the patterns it cannot resolve
//! (`sort::pattern_denial`), as Redis Cluster does. Keys on another node of the site are
//! refused.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;

use crate::client::Client;
use crate::cmd::sort::{self, Formed, Gathered};
use crate::cmd::table::{CommandSpec, Table};
use crate::error::CmdError;
use crate::hop::{self, Op, Thread};
use crate::persist::AfterBatch;
use crate::resp::reply::Reply;
use crate::route::{self, KeysAt};
use crate::slot::SlotMap;

/// Most pattern lookups one job runs on a shard: a sort of many elements reads each shard in
/// several jobs, so that other clients' commands run between them.
pub const SORT_LOOKUPS_PER_JOB_MAX: usize = 4096;

/// Whether the main port coordinates this SORT: its STORE destination is not the sorted
/// key's shard's, or a pattern may form keys of another shard. Arguments SORT refuses are
/// left to the handler (on the key's shard), unless the keys span shards.
pub fn spans_shards(
    slots: &SlotMap,
    table: &'static Table,
    spec: &CommandSpec,
    argv: &[&[u8]],
) -> bool {
    let readonly = spec.meta.name == "sort_ro";
    let patterns = match (sort::parse_args(argv, readonly, true), argv.get(1)) {
        (Ok(a), Some(key)) => sort::pattern_denial(slots, key, &a).is_some(),
        _ => false,
    };
    patterns
        || route::positions(table, spec, argv)
            .is_some_and(|p| route::keys_at(slots, argv, &p) == KeysAt::Many)
}

/// Runs a SORT that `spans_shards`: gathers, then finishes where it writes (or here), and
/// puts the reply in `out`. Writes of another shard are noted in the client (CRDT.WAIT) and
/// their persistence conditions pushed to `afters`.
pub async fn run(
    th: &Rc<Thread>,
    client: &mut Client,
    out: &mut Reply,
    afters: &mut Vec<AfterBatch>,
    spec: &'static CommandSpec,
    argv: Vec<Vec<u8>>,
) {
    let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    let (gathered, target) = gather(th, client, spec, &refs).await;
    client.shared.last_cmd.set(spec.meta.name);
    out.proto = client.shared.proto.get();
    // A destination on another node was refused by `gather`: that error is answered here.
    let target = if th.node.remote_endpoint(target).is_some() {
        th.index
    } else {
        target
    };
    let op = Op::SortFinish(spec, Box::new(gathered));
    match hop::run_one(th, client, afters, target, op, &refs).await {
        Ok(reply) => out.raw(&reply),
        Err(e) => hop::reply_error(th, out, &e),
    }
}

/// Steps 1 to 3 of the module doc: what `sort::finish` needs, and the shard it runs on (the
/// STORE destination's, else this thread's). A failure is carried as the error SORT
/// answers.
async fn gather(
    th: &Rc<Thread>,
    client: &Client,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
) -> (Gathered, u16) {
    let own = th.index;
    let slots = th.node.slots.clone();
    let failed = |e: CmdError, target: u16| {
        (
            Gathered {
                selected: Err(e),
                values: HashMap::new(),
            },
            target,
        )
    };
    let access = {
        let s = th.shard.borrow();
        sort::full_key_access(&s, client, spec, argv)
    };
    let readonly = spec.meta.name == "sort_ro";
    let mut a = match sort::parse_args(argv, readonly, access) {
        Ok(a) => a,
        Err(e) => return failed(e, own),
    };
    let target = a.store.map_or(own, |d| slots.shard_of_key(d));
    let key = argv.get(1).copied().unwrap_or_default();
    let src = slots.shard_of_key(key);
    if let Some(e) = other_node(th, [src, target]) {
        return failed(e, own);
    }
    let db = client.db;
    let owned_key = key.to_vec();
    let loaded = hop::run_on(th, src, move |t| {
        let mut s = t.shard.borrow_mut();
        let now = s.now_ms();
        sort::load_from(&mut s, db, &owned_key, now)
    })
    .await;
    let (kind, elems) = match loaded {
        Ok(Ok(l)) => l,
        Ok(Err(e)) => return failed(e, target),
        Err(e) => return failed(hop::unavailable_error(e), target),
    };
    a.settle(kind, false);
    let write = a.store.is_some();
    let by = a.by_lookup();
    let by_values = match by {
        Some(p) => {
            let wanted: HashSet<Formed> = elems.iter().filter_map(|e| formed(p, e)).collect();
            match fetch(th, db, write, wanted).await {
                Ok(v) => v,
                Err(e) => return failed(e, target),
            }
        }
        None => HashMap::new(),
    };
    let selected = sort::select(&a, kind, elems, |e| {
        by.and_then(|p| formed(p, e))
            .and_then(|f| by_values.get(&f).cloned())
    });
    let selected = match selected {
        Ok(s) => s,
        Err(e) => return failed(e, target),
    };
    let wanted: HashSet<Formed> = selected
        .iter()
        .flat_map(|e| a.gets.iter().filter_map(move |p| formed(p, e)))
        .collect();
    match fetch(th, db, write, wanted).await {
        Ok(values) => (
            Gathered {
                selected: Ok(selected),
                values,
            },
            target,
        ),
        Err(e) => failed(e, target),
    }
}

/// The key and field `pattern` forms for `elem`, owned; None for `#` and a pattern without
/// `*` (no key).
pub(crate) fn formed(pattern: &[u8], elem: &[u8]) -> Option<Formed> {
    if pattern == b"#" {
        return None;
    }
    sort::pattern_key(pattern, elem).map(|(k, f)| (k, f.map(<[u8]>::to_vec)))
}

/// The values of `wanted` keys (fields) of database `db`, read on their shards in jobs of at
/// most `SORT_LOOKUPS_PER_JOB_MAX` lookups, one job per shard at a time, the shards' jobs
/// at the same time (this thread's last); missing ones are absent.
async fn fetch(
    th: &Rc<Thread>,
    db: usize,
    write: bool,
    wanted: HashSet<Formed>,
) -> Result<HashMap<Formed, Vec<u8>>, CmdError> {
    let slots = th.node.slots.clone();
    let mut by_shard: BTreeMap<u16, Vec<Formed>> = BTreeMap::new();
    for f in wanted {
        by_shard
            .entry(slots.shard_of_key(&f.0))
            .or_default()
            .push(f);
    }
    if let Some(e) = other_node(th, by_shard.keys().copied()) {
        return Err(e);
    }
    // This thread's shard last: its job runs inline while the others run.
    let mut lists: Vec<(u16, Vec<Formed>)> = by_shard.into_iter().collect();
    lists.sort_by_key(|(t, _)| *t == th.index);
    let mut values = HashMap::new();
    while lists.iter().any(|(_, l)| !l.is_empty()) {
        if crate::stop::requested() {
            return Err(CmdError::ShuttingDown);
        }
        let mut waits = Vec::with_capacity(lists.len());
        for (shard, list) in &mut lists {
            if list.is_empty() {
                continue;
            }
            let chunk: Vec<Formed> = list
                .drain(..list.len().min(SORT_LOOKUPS_PER_JOB_MAX))
                .collect();
            let rx = hop::send_job(th, *shard, move |t| {
                let mut s = t.shard.borrow_mut();
                let now = s.now_ms();
                chunk
                    .into_iter()
                    .filter_map(|(k, f)| {
                        let v = sort::read_formed(&mut s, db, &k, f.as_deref(), now, write)?;
                        Some(((k, f), v))
                    })
                    .collect::<Vec<_>>()
            })
            .await
            .map_err(hop::unavailable_error)?;
            waits.push((*shard, rx));
        }
        for (shard, rx) in waits {
            let found = rx
                .await
                .map_err(|_| hop::unavailable_error(hop::Unavailable { shard }))?;
            values.extend(found);
        }
    }
    Ok(values)
}

/// The refusal of a SORT that would read or write a shard of another node of the site.
fn other_node(th: &Thread, shards: impl IntoIterator<Item = u16>) -> Option<CmdError> {
    let t = shards
        .into_iter()
        .find(|&t| th.node.remote_endpoint(t).is_some())?;
    Some(CmdError::Err(format!(
        "SORT of keys on another node of the site (shard {t}) is not supported: keep its keys on one node (hash tags)"
    )))
}

//! Commands that read keys of several shards and write keys of one shard at most, on the main
//! port (issue 17: the port behaves as one server): the set and sorted-set algebra and their
//! STORE forms, ZRANGESTORE, BITOP, PFCOUNT and PFMERGE, COPY, LCS, GEOSEARCHSTORE and
//! GEORADIUS(BYMEMBER) STORE (`COMMANDS`).
//!
//! A command of `COMMANDS` whose keys span shards (and would otherwise get CROSSSLOT) runs in
//! two steps, through the command's own code:
//!
//! 1. the keys it only reads (key-spec flag `RO`) that are not on the target shard are read
//!    on their shards, the shards at the same time (`hop::send_job`; `lookup_quiet`: a key
//!    whose TTL has passed is expired there first), each as a copy of its whole state. For a
//!    client whose reads are tracked (CLIENT TRACKING), each read is remembered on its own
//!    shard, whose writes invalidate it;
//! 2. on the target shard, which owns every key the command writes (for a command that
//!    writes nothing: this thread's shard when it owns one of the keys, else the first
//!    key's), the copies are lent to its table for the time of the command
//!    (`Shard::lend`), the command runs (`cmd::call_with`: statistics, slow log, MONITOR,
//!    keyspace events as any command), and the copies are taken back (`Shard::take_back`)
//!    before anything else runs there (`hop::Op::CallLent`).
//!
//! Not atomic, as MGET across shards is not: a write to a source key on its shard between
//! the steps is not seen (the command reads each key as it was at step 1). A written key is
//! never a copy: a key the command may write decides the target, so copies are read and
//! dropped, never changed, logged or replicated. Keys on another node of the site keep Redis
//! Cluster's CROSSSLOT. Inside MULTI/EXEC and scripts the same steps run with every shard
//! held (`held_across`), so there they are atomic.

use std::rc::Rc;

use meridian_crdt::KeyState;

use crate::client::Client;
use crate::cmd;
use crate::cmd::table::{CommandSpec, Table};
use crate::error::CmdError;
use crate::hop::{self, Op, Thread};
use crate::persist::AfterBatch;
use crate::resp::reply::Reply;
use crate::slot::SlotMap;

/// The commands that run across shards this way: they read their sources through the
/// keyspace's lookups and write only keys whose key spec is not `RO`.
pub const COMMANDS: &[&str] = &[
    "sunion",
    "sinter",
    "sdiff",
    "sintercard",
    "sunionstore",
    "sinterstore",
    "sdiffstore",
    "zunion",
    "zinter",
    "zdiff",
    "zintercard",
    "zunionstore",
    "zinterstore",
    "zdiffstore",
    "zrangestore",
    "bitop",
    "pfcount",
    "pfmerge",
    "copy",
    "lcs",
    "geosearchstore",
    "georadius",
    "georadiusbymember",
];

/// The copies lent to the target shard: of database `db`, each key with its state and
/// how its string is encoded (`Entry::str_enc`).
#[derive(Debug)]
pub struct Lent {
    pub db: usize,
    pub copies: Vec<(Vec<u8>, KeyState, crate::keyspace::StrEnc)>,
}

/// Where a command of `COMMANDS` whose keys span shards runs, and what it reads elsewhere.
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    /// The shard that runs it.
    pub target: u16,
    /// The keys to copy, by shard (none of them `target`), in the order of their shards'
    /// first keys.
    pub reads: Vec<(u16, Vec<Vec<u8>>)>,
}

/// The plan for `argv` (a command of `spec`) on this process's shards, `own` being the
/// connection's: None when the command is not one of `COMMANDS` nor of `also`, its keys
/// cannot be found, the keys it may write are on several shards, or a key is on another node
/// (`local` says which shards are this process's): the caller answers CROSSSLOT then. `also`
/// names commands whose key specs say as well which keys they only read (SORT with STORE in
/// a script or a transaction, `held_across`).
pub fn plan(
    slots: &SlotMap,
    table: &'static Table,
    spec: &CommandSpec,
    argv: &[&[u8]],
    (own, also): (u16, &[&str]),
    local: impl Fn(u16) -> bool,
) -> Option<Plan> {
    if !COMMANDS.contains(&spec.meta.name) && !also.contains(&spec.meta.name) {
        return None;
    }
    let keys = cmd::command::key_refs(table, spec, argv)?;
    // PFCOUNT's key spec says RW (one key's count is cached in its bytes); over several
    // keys it only reads.
    let all_read = spec.meta.name == "pfcount";
    let mut target: Option<u16> = None;
    let mut first: Option<u16> = None;
    let mut owns_one = false;
    for (pos, flags) in &keys {
        let key = argv.get(*pos)?;
        let shard = slots.shard_of_key(key);
        if !local(shard) {
            return None;
        }
        first.get_or_insert(shard);
        owns_one |= shard == own;
        let read_only = all_read || flags.contains(&"RO");
        if !read_only {
            match target {
                Some(t) if t != shard => return None,
                _ => target = Some(shard),
            }
        }
    }
    let target = match (target, first) {
        (Some(t), _) => t,
        (None, _) if owns_one => own,
        (None, Some(f)) => f,
        (None, None) => return None,
    };
    let mut reads: Vec<(u16, Vec<Vec<u8>>)> = Vec::new();
    for (pos, _) in &keys {
        let key = argv.get(*pos)?;
        let shard = slots.shard_of_key(key);
        if shard == target {
            continue;
        }
        let at = match reads.iter().position(|(s, _)| *s == shard) {
            Some(i) => i,
            None => {
                reads.push((shard, Vec::new()));
                reads.len() - 1
            }
        };
        if let Some((_, list)) = reads.get_mut(at) {
            if !list.iter().any(|k| k.as_slice() == *key) {
                list.push(key.to_vec());
            }
        }
    }
    Some(Plan { target, reads })
}

/// Runs a command `plan` was made for: copies, then the command on the target shard, whose
/// reply goes to `out`. A write there is noted in the client (CRDT.WAIT) and its persistence
/// condition pushed to `afters`.
pub async fn run(
    th: &Rc<Thread>,
    client: &mut Client,
    out: &mut Reply,
    afters: &mut Vec<AfterBatch>,
    spec: &'static CommandSpec,
    argv: Vec<Vec<u8>>,
    plan: Plan,
) {
    let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    client.shared.last_cmd.set(spec.meta.name);
    let db = client.db;
    // A read the client tracks is remembered on the shard that writes the key.
    let tracked = client
        .shared
        .tracking
        .borrow()
        .as_ref()
        .filter(|t| cmd::tracking::tracks_read(t, client.caching, spec))
        .map(|t| t.id);
    let copies = match copy_keys(th, db, tracked, plan.reads).await {
        Ok(c) => c,
        Err(e) => return hop::reply_error(th, out, &e),
    };
    let lent = Lent { db, copies };
    out.proto = client.shared.proto.get();
    let op = Op::CallLent(spec, Box::new(lent));
    match hop::run_one(th, client, afters, plan.target, op, &refs).await {
        Ok(reply) => out.raw(&reply),
        Err(e) => hop::reply_error(th, out, &e),
    }
}

/// Step 1: a copy of each key of `reads` that exists, read on its shard (all shards' jobs
/// at the same time), and remembered there for tracking client `tracked`.
async fn copy_keys(
    th: &Rc<Thread>,
    db: usize,
    tracked: Option<u64>,
    reads: Vec<(u16, Vec<Vec<u8>>)>,
) -> Result<Vec<(Vec<u8>, KeyState, crate::keyspace::StrEnc)>, CmdError> {
    let mut waits = Vec::with_capacity(reads.len());
    for (shard, keys) in reads {
        let rx = hop::send_job(th, shard, move |t| {
            let mut s = t.shard.borrow_mut();
            let now = s.now_ms();
            let mut found = Vec::with_capacity(keys.len());
            for key in keys {
                if let Some(id) = tracked {
                    s.tracking.remember(id, &key);
                }
                let copy = s
                    .lookup_quiet(db, &key, now)
                    .map(|e| (e.state.clone(), e.str_enc));
                if let Some((state, str_enc)) = copy {
                    found.push((key, state, str_enc));
                }
            }
            found
        })
        .await
        .map_err(hop::unavailable_error)?;
        waits.push((shard, rx));
    }
    let mut copies = Vec::new();
    for (shard, rx) in waits {
        let found = rx
            .await
            .map_err(|_| hop::unavailable_error(hop::Unavailable { shard }))?;
        copies.extend(found);
    }
    Ok(copies)
}

/// Step 2, on the target shard: the command through `cmd::call_with` with `lent`'s copies
/// in the table while its handler runs.
#[allow(clippy::too_many_arguments)]
pub fn call_lent(
    s: &mut crate::shard::Shard,
    f: &mut crate::front::Front,
    client: &mut Client,
    out: &mut Reply,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    now: u64,
    lent: Lent,
) {
    let Some(handler) = spec.handler else {
        cmd::reply_error(f, out, &CmdError::WrongArity(spec.meta.name.to_string()));
        return;
    };
    let Lent { db, copies } = lent;
    cmd::call_with(s, f, client, out, spec, argv, now, |ctx| {
        let Some(keys) = ctx.shard.lend(db, copies, ctx.now_ms) else {
            return Err(CmdError::CrossSlot);
        };
        let result = handler(ctx, argv);
        ctx.shard.take_back(db, &keys);
        result
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_of(shards: u16, own: u16, argv: &[&[u8]]) -> Option<Plan> {
        let table = crate::cmd::table();
        let spec = crate::cmd::resolve(table, argv).ok()?;
        let slots = SlotMap::contiguous(shards);
        plan(&slots, table, spec, argv, (own, &[]), |_| true)
    }

    /// Keys of four shards: `key(i)` is on shard i of `SlotMap::contiguous(4)`.
    fn key(shard: u16) -> &'static [u8] {
        let slots = SlotMap::contiguous(4);
        for k in [
            &b"a"[..],
            b"b",
            b"c",
            b"d",
            b"e",
            b"f",
            b"g",
            b"h",
            b"i",
            b"j",
            b"k",
            b"l",
        ] {
            if slots.shard_of_key(k) == shard {
                return k;
            }
        }
        b"none"
    }

    #[test]
    fn a_store_runs_on_its_destination_and_copies_the_other_sources() {
        let (d, a, b) = (key(0), key(1), key(2));
        let p = plan_of(4, 3, &[b"SUNIONSTORE", d, a, b, d]).expect("plan");
        assert_eq!(p.target, 0);
        assert_eq!(p.reads, vec![(1, vec![a.to_vec()]), (2, vec![b.to_vec()])]);
    }

    #[test]
    fn a_read_runs_here_when_this_shard_holds_a_key_else_on_the_first_keys() {
        let (a, b, c) = (key(1), key(2), key(3));
        let p = plan_of(4, 2, &[b"SINTER", a, b, c]).expect("plan");
        assert_eq!(p.target, 2);
        assert_eq!(p.reads, vec![(1, vec![a.to_vec()]), (3, vec![c.to_vec()])]);
        let p = plan_of(4, 0, &[b"SINTER", a, b, a]).expect("plan");
        assert_eq!(p.target, 1);
        assert_eq!(p.reads, vec![(2, vec![b.to_vec()])]);
        // PFCOUNT's spec says RW, but over several keys it only reads.
        let p = plan_of(4, 3, &[b"PFCOUNT", a, b]).expect("plan");
        assert_eq!(p.target, 1);
    }

    #[test]
    fn writes_on_two_shards_or_other_commands_are_not_planned() {
        let (a, b) = (key(1), key(2));
        assert_eq!(plan_of(4, 0, &[b"SMOVE", a, b, b"m"]), None);
        assert_eq!(plan_of(4, 0, &[b"RENAME", a, b]), None);
        assert_eq!(plan_of(4, 0, &[b"MSETNX", a, b"1", b, b"2"]), None);
        let slots = SlotMap::contiguous(4);
        let table = crate::cmd::table();
        let argv: &[&[u8]] = &[b"SUNION", a, b];
        let spec = crate::cmd::resolve(table, argv).expect("spec");
        // A key on another node.
        assert_eq!(plan(&slots, table, spec, argv, (1, &[]), |s| s != 2), None);
    }
}

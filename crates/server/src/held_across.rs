//! A command over keys of several shards of this process, all held by `tx_across` for the
//! script or transaction it is part of (a script whose declared keys span shards, one without
//! declared keys rerun with every shard held, or a MULTI/EXEC over several shards), when it is
//! one of the commands that read keys of several shards and write one
//! (`read_across::COMMANDS`: SUNIONSTORE, ZUNIONSTORE, COPY, PFMERGE, BITOP..., and SORT with
//! STORE) or a list move (LMOVE, RPOPLPUSH). On one Redis these run whole; here they run in
//! steps through the same code as on the main port, and since every shard they reach is
//! held, nothing else runs between the steps: the command is as atomic as the script or the
//! transaction.
//!
//! - `read_across::COMMANDS`: a copy of each key the command only reads is taken on its
//!   shard (this one's directly, a held one's by a quiet step there), then the command runs
//!   on the shard that owns what it writes with the copies lent to its table
//!   (`read_across::call_lent`, here or as `hop::Op::CallLent` on the held shard).
//! - LMOVE and RPOPLPUSH: with the source here, `cmd::list::move_to_held_shard` (the push on
//!   the destination's held shard, then the pop here). With the source on a held shard, which
//!   cannot reach back into this one while this one runs, this thread runs the same three
//!   steps itself: the source's end element read there (`peek_end`), pushed on the
//!   destination (here or there: WRONGTYPE there stops the move before anything is popped),
//!   then popped there (`pop_end`), that step counted as the command.
//!
//! `Conn::exec_across_plan` puts such a queued command in the segment of its `home` shard
//! and holds the others; `cmd::tx`'s EXEC runs it here when its keys are not all local. In a
//! script, a key of the call on a shard not held keeps Redis Cluster's "non local key" error
//! (and a script without declared keys is rerun with every shard held). Reads through copies
//! are not remembered for the caller's CLIENT TRACKING on the copy's shard.

use std::sync::mpsc;

use crate::client::{Client, ClientShared};
use crate::cmd;
use crate::cmd::table::CommandSpec;
use crate::front::Front;
use crate::hop::{self, Op};
use crate::read_across::{self, Lent};
use crate::resp::reply::{Proto, Reply};
use crate::shard::Shard;
use crate::slot::SlotMap;

/// How a call over keys of several held shards runs.
#[derive(Debug, PartialEq, Eq)]
pub enum Across {
    /// A command of `read_across::COMMANDS`: copies, then the command on the plan's target.
    Lent(read_across::Plan),
    /// LMOVE or RPOPLPUSH from shard `from` to shard `to` (two different shards).
    ListMove { from: u16, to: u16 },
}

/// Whether `name` is a command this module runs over keys of several shards.
pub fn runs_across(name: &str) -> bool {
    read_across::COMMANDS.contains(&name)
        || matches!(name, "lmove" | "rpoplpush" | "sort" | "sort_ro")
}

/// How the call `argv` (a command of `spec`) runs on shard `own` when its keys are on several
/// shards, every one of them `own` or one `reachable` says may be reached: None when the
/// command is not one of these, or a key is on a shard that may not be.
pub fn plan_on(
    map: &SlotMap,
    table: &'static crate::cmd::table::Table,
    spec: &CommandSpec,
    argv: &[&[u8]],
    own: u16,
    reachable: impl Fn(u16) -> bool,
) -> Option<Across> {
    if !runs_across(spec.meta.name) {
        return None;
    }
    if matches!(spec.meta.name, "lmove" | "rpoplpush") {
        let from = map.shard_of_key(argv.get(1)?);
        let to = map.shard_of_key(argv.get(2)?);
        return (from != to && reachable(from) && reachable(to))
            .then_some(Across::ListMove { from, to });
    }
    // SORT and SORT_RO read their sorted key and write a STORE: their BY and GET patterns
    // are checked on the shard that runs them, as for any SORT in a script or transaction.
    read_across::plan_any(map, table, spec, argv, own, reachable).map(Across::Lent)
}

/// Where a queued command of a transaction over several shards runs (`Conn::exec_across_plan`):
/// its home shard (the list move's source, else the shard that runs the command) and every
/// shard it reaches, `local` saying which are this process's. None as for `plan_on`.
pub fn home(
    map: &SlotMap,
    table: &'static crate::cmd::table::Table,
    spec: &CommandSpec,
    argv: &[&[u8]],
    own: u16,
    local: impl Fn(u16) -> bool,
) -> Option<(u16, Vec<u16>)> {
    match plan_on(map, table, spec, argv, own, local)? {
        Across::ListMove { from, to } => Some((from, vec![from, to])),
        Across::Lent(p) => {
            let mut shards: Vec<u16> = p.reads.iter().map(|(t, _)| *t).collect();
            shards.push(p.target);
            Some((p.target, shards))
        }
    }
}

/// How a call of a script or a queued command of a transaction running on `shard` runs when
/// one of its keys is on another shard: `plan_on` with the shards held for it as reachable.
pub fn plan(shard: &Shard, front: &Front, spec: &CommandSpec, argv: &[&[u8]]) -> Option<Across> {
    let map = shard.scripting.slots.as_ref()?;
    crate::script::busy::non_local_key(shard, spec, argv)?;
    let own = shard.index;
    plan_on(map, front.table, spec, argv, own, |t| {
        t == own || crate::tx_across::reaches(t)
    })
}

/// Runs `across` for `client` (a script's client, `caller` being the script's caller; or the
/// transaction's client, `caller` its own shared part); the reply goes into `reply` as a
/// local call's would.
#[allow(clippy::too_many_arguments)]
pub fn run(
    shard: &mut Shard,
    front: &mut Front,
    client: &mut Client,
    caller: &ClientShared,
    reply: &mut Reply,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    now: u64,
    across: Across,
) {
    let step = Step {
        caller,
        db: client.db,
        proto: reply.proto,
    };
    let result = match across {
        Across::Lent(plan) => run_lent(shard, front, client, reply, &step, spec, argv, now, plan),
        Across::ListMove { from, to } => list_move(
            shard,
            front,
            client,
            reply,
            &step,
            spec,
            argv,
            now,
            (from, to),
        ),
    };
    if let Err(text) = result {
        reply.buf.extend_from_slice(&text);
    }
}

/// Where a step on a held shard runs from: the script's caller, its database and protocol.
struct Step<'a> {
    caller: &'a ClientShared,
    db: usize,
    proto: Proto,
}

impl Step<'_> {
    /// Runs `op` over `argv` on held shard `t` and returns its reply; `Err` with the reply when
    /// it is an error (or the shard is gone).
    fn on(&self, t: u16, op: Op, argv: &[&[u8]]) -> Result<Vec<u8>, Vec<u8>> {
        let mut batch = hop::Batch::new(hop::ClientView::of_shared(self.caller));
        batch.push(op, self.db, self.proto, argv);
        match crate::tx_across::call_held(t, batch) {
            Some(done) => {
                let r = done.reply(0).to_vec();
                if r.starts_with(b"-") { Err(r) } else { Ok(r) }
            }
            None => Err(self.gone(t)),
        }
    }

    /// The error of a held shard whose thread is gone (the process is stopping).
    fn gone(&self, t: u16) -> Vec<u8> {
        let mut r = Reply::new();
        r.proto = self.proto;
        r.error(&hop::unavailable_error(hop::Unavailable { shard: t }));
        r.buf
    }
}

#[allow(clippy::too_many_arguments)]
fn run_lent(
    shard: &mut Shard,
    front: &mut Front,
    client: &mut Client,
    reply: &mut Reply,
    step: &Step<'_>,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    now: u64,
    plan: read_across::Plan,
) -> Result<(), Vec<u8>> {
    let db = step.db;
    let mut copies = Vec::new();
    for (t, keys) in plan.reads {
        if t == shard.index {
            for key in keys {
                let copy = shard
                    .lookup_quiet(db, &key, now)
                    .map(|e| (e.state.clone(), e.raw));
                if let Some((state, raw)) = copy {
                    copies.push((key, state, raw));
                }
            }
            continue;
        }
        let (tx, rx) = mpsc::channel();
        let read = hop::Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
            let (db, now) = (ctx.db(), ctx.now_ms);
            let mut found = Vec::with_capacity(keys.len());
            for key in keys {
                let copy = ctx
                    .shard
                    .lookup_quiet(db, &key, now)
                    .map(|e| (e.state.clone(), e.raw));
                if let Some((state, raw)) = copy {
                    found.push((key, state, raw));
                }
            }
            let _ = tx.send(found);
            Ok(())
        }));
        let op = Op::Finish {
            spec,
            counted: false,
            run: read,
        };
        step.on(t, op, argv)?;
        copies.extend(rx.try_recv().map_err(|_| step.gone(t))?);
    }
    let lent = Lent { db, copies };
    if plan.target == shard.index {
        read_across::call_lent(shard, front, client, reply, spec, argv, now, lent);
    } else {
        let r = step.on(plan.target, Op::CallLent(spec, Box::new(lent)), argv)?;
        reply.buf.extend_from_slice(&r);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn list_move(
    shard: &mut Shard,
    front: &mut Front,
    client: &mut Client,
    reply: &mut Reply,
    step: &Step<'_>,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    now: u64,
    (from, to): (u16, u16),
) -> Result<(), Vec<u8>> {
    let sides = match cmd::list::move_sides(argv) {
        Ok(s) => s,
        Err(e) => {
            cmd::reply_error(front, reply, &e);
            return Ok(());
        }
    };
    let (Some(src), Some(dst)) = (argv.get(1).copied(), argv.get(2).copied()) else {
        return Ok(());
    };
    if from == shard.index {
        cmd::call_with(shard, front, client, reply, spec, argv, now, |ctx| {
            cmd::list::move_to_held_shard(ctx, src, dst, sides, to)
        });
        return Ok(());
    }
    // The source's end element, read on its shard.
    let (tx, rx) = mpsc::channel();
    let source = src.to_vec();
    let peek = hop::Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
        let end = cmd::list::peek_end(ctx, &source, sides.0)?;
        let _ = tx.send(end);
        Ok(())
    }));
    let op = Op::Finish {
        spec,
        counted: false,
        run: peek,
    };
    step.on(from, op, argv)?;
    let Some(v) = rx.try_recv().map_err(|_| step.gone(from))? else {
        reply.null();
        return Ok(());
    };
    // Pushed on the destination first: its WRONGTYPE leaves the source as it was.
    let (push, name) = match cmd::list::push_for(sides.1) {
        Ok(p) => p,
        Err(e) => {
            cmd::reply_error(front, reply, &e);
            return Ok(());
        }
    };
    let push_argv: [&[u8]; 3] = [name, dst, &v];
    if to == shard.index {
        let mut r = Reply::new();
        r.proto = step.proto;
        cmd::call_quiet(shard, front, client, &mut r, push, &push_argv, now);
        if r.buf.starts_with(b"-") {
            return Err(r.buf);
        }
    } else {
        step.on(to, Op::Quiet(push), &push_argv)?;
    }
    // Then popped on the source's shard, the step counted as the command.
    let source = src.to_vec();
    let pop = hop::Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
        cmd::list::pop_end(ctx, &source, sides.0, &v)
    }));
    let op = Op::Finish {
        spec,
        counted: true,
        run: pop,
    };
    let r = step.on(from, op, argv)?;
    reply.buf.extend_from_slice(&r);
    Ok(())
}

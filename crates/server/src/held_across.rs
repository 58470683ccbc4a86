//! A command over keys of several shards of this process, all held by `tx_across` for the
//! script or transaction it is part of (a script whose declared keys span shards, one without
//! declared keys rerun with every shard held, or a MULTI/EXEC over several shards), when it is
//! one of the commands that read keys of several shards and write one
//! (`read_across::COMMANDS`: SUNIONSTORE, ZUNIONSTORE, COPY, PFMERGE, BITOP..., and SORT with
//! STORE), a list move (LMOVE, RPOPLPUSH, BLMOVE, BRPOPLPUSH), RENAME, RENAMENX, SMOVE,
//! MSETNX or a pop over several keys (LMPOP, ZMPOP, BLPOP, BRPOP, BZPOPMIN, BZPOPMAX, BLMPOP,
//! BZMPOP). On one Redis these run whole; here they run in
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
//! - RENAME, RENAMENX, SMOVE: `move_across`'s steps (the source read, the destination
//!   written, counted as the command, then the source removed as far as the read observed);
//!   MSETNX: every shard's keys checked, then each shard's part (the first counted). Held
//!   throughout, so unlike `move_across`'s they need no undo and are atomic.
//! - LMPOP, ZMPOP and the blocking pops (BLPOP... BZMPOP, which do not block in a script or a
//!   transaction): each key's pop on its shard in the order given, until one pops or fails.
//!   BLMOVE and BRPOPLPUSH run as LMOVE and RPOPLPUSH, their timeout checked.
//! - SORT and SORT_RO whose BY or GET patterns may form keys of other shards, when every
//!   shard of the process is held (`sort_plan`): `sort_across`'s steps (the sorted key read,
//!   the BY values read on their shards, the GET values of the selected elements, then the
//!   reply or STORE on the destination's shard, counted as the command).
//!
//! `Conn::exec_across_plan` puts such a queued command in the segment of its `home` shard
//! and holds the others (every shard for a SORT with such patterns); `cmd::tx`'s EXEC runs it
//! here when its keys are not all local. In a script, a call that reaches a shard not held
//! (or a SORT whose patterns may) stops the script, when it has had no effect, to run again
//! with every shard held (`script::engine`'s `may_rerun`); otherwise it keeps Redis
//! Cluster's error. A tracked client's reads inside a transaction are remembered as its
//! other reads are (`reads_across_shards_are_tracked_where_the_keys_are`).

use std::sync::mpsc;

use crate::client::{Client, ClientShared};
use crate::cmd;
use crate::cmd::table::CommandSpec;
use crate::error::CmdError;
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
    /// RENAME, RENAMENX or SMOVE from shard `from` to shard `to`: the source read, the
    /// destination written, the source removed (`move_across`'s steps).
    Move { from: u16, to: u16 },
    /// MSETNX: each shard's part (`move_across::msetnx_parts`).
    Msetnx(crate::tx_across::Parts),
    /// LMPOP, ZMPOP and the blocking pops (which do not block in a script or a transaction):
    /// the command over each key alone on its shard, in order (`route::pop_tries`).
    Pops(crate::tx_across::Parts),
    /// SORT or SORT_RO whose BY or GET patterns may form keys of other shards, every shard
    /// of the process held: `sort_across`'s steps, each on the shard it reads.
    Sort,
}

/// Where a SORT or SORT_RO called by a script (or queued in a transaction) finds the keys its
/// BY and GET patterns form (`sort_plan`).
#[derive(Debug, PartialEq, Eq)]
pub enum SortPlan {
    /// On the shard that runs it (no pattern forms another shard's key, or it is not a
    /// SORT): it runs as it is.
    Here,
    /// On any shard of the process, all held: it runs in steps (`Across::Sort`).
    Held(Across),
    /// On shards not held for it: SORT refuses the pattern with Redis Cluster's text, unless
    /// the script runs again with every shard held.
    Elsewhere,
}

/// Whether SORT or SORT_RO `argv` has a BY or GET pattern that may form keys of another shard
/// than its sorted key's (arguments SORT refuses: no).
pub fn sort_patterns_span(map: &SlotMap, spec: &CommandSpec, argv: &[&[u8]]) -> bool {
    let name = spec.meta.name;
    if !matches!(name, "sort" | "sort_ro") {
        return false;
    }
    let Some(key) = argv.get(1) else {
        return false;
    };
    cmd::sort::parse_args(argv, name == "sort_ro", true)
        .is_ok_and(|a| cmd::sort::pattern_denial(map, key, &a).is_some())
}

/// `SortPlan` of the call `argv` on `shard`. A site across nodes keeps Redis Cluster's
/// refusal (the other nodes' shards are never held), as do arguments SORT refuses itself.
pub fn sort_plan(shard: &Shard, front: &Front, spec: &CommandSpec, argv: &[&[u8]]) -> SortPlan {
    let name = spec.meta.name;
    if !matches!(name, "sort" | "sort_ro") {
        return SortPlan::Here;
    }
    let Some(map) = shard.scripting.slots.as_ref() else {
        return SortPlan::Here;
    };
    let node = &front.node;
    if !sort_patterns_span(map, spec, argv) || !(0..map.shards()).all(|t| node.is_local(t)) {
        return SortPlan::Here;
    }
    let own = shard.index;
    if node
        .local_shards()
        .all(|t| t == own || crate::tx_across::reaches(t))
    {
        SortPlan::Held(Across::Sort)
    } else {
        SortPlan::Elsewhere
    }
}

/// The pops that run as one try per key.
const POPS: &[&str] = &[
    "lmpop", "zmpop", "blpop", "brpop", "bzpopmin", "bzpopmax", "blmpop", "bzmpop",
];

/// The list moves (BLMOVE and BRPOPLPUSH do not block in a script or a transaction).
const LIST_MOVES: &[&str] = &["lmove", "rpoplpush", "blmove", "brpoplpush"];

/// Whether `name` is a command this module runs over keys of several shards.
pub fn runs_across(name: &str) -> bool {
    read_across::COMMANDS.contains(&name)
        || POPS.contains(&name)
        || LIST_MOVES.contains(&name)
        || matches!(
            name,
            "sort" | "sort_ro" | "rename" | "renamenx" | "smove" | "msetnx"
        )
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
    let name = spec.meta.name;
    if !runs_across(name) {
        return None;
    }
    if POPS.contains(&name) {
        let positions = crate::route::positions(table, spec, argv)?;
        let tries = crate::route::pop_tries(map, argv, &positions);
        let first = tries.first().map(|(t, _)| *t)?;
        let spans = tries.iter().any(|(t, _)| *t != first);
        let ok = spans && tries.iter().all(|(t, _)| reachable(*t));
        return ok.then_some(Across::Pops(tries));
    }
    if LIST_MOVES.contains(&name) || matches!(name, "rename" | "renamenx" | "smove") {
        let from = map.shard_of_key(argv.get(1)?);
        let to = map.shard_of_key(argv.get(2)?);
        if from == to || !reachable(from) || !reachable(to) {
            return None;
        }
        return Some(if LIST_MOVES.contains(&name) {
            Across::ListMove { from, to }
        } else {
            Across::Move { from, to }
        });
    }
    if name == "msetnx" {
        let parts = crate::move_across::msetnx_parts(map, argv);
        let ok = parts.len() > 1 && parts.iter().all(|(t, _)| reachable(*t));
        return ok.then_some(Across::Msetnx(parts));
    }
    // SORT and SORT_RO read their sorted key and write a STORE: their BY and GET patterns
    // are checked on the shard that runs them, as for any SORT in a script or transaction.
    let also: &[&str] = &["sort", "sort_ro"];
    read_across::plan(map, table, spec, argv, (own, also), reachable).map(Across::Lent)
}

/// Where a queued command of a transaction over several shards runs (`Conn::exec_across_plan`,
/// from `plan_on`'s answer): its home shard (a move's source, MSETNX's first key's shard,
/// else the shard that runs the command) and every shard it reaches.
pub fn home(across: &Across) -> Option<(u16, Vec<u16>)> {
    match across {
        Across::ListMove { from, to } | Across::Move { from, to } => {
            Some((*from, vec![*from, *to]))
        }
        Across::Msetnx(parts) | Across::Pops(parts) => {
            let shards: Vec<u16> = parts.iter().map(|(t, _)| *t).collect();
            Some((*shards.first()?, shards))
        }
        Across::Lent(p) => {
            let mut shards: Vec<u16> = p.reads.iter().map(|(t, _)| *t).collect();
            shards.push(p.target);
            Some((p.target, shards))
        }
        // `plan_on` never plans it: only `sort_plan` does, where every shard is held.
        Across::Sort => None,
    }
}

/// How a call of a script or a queued command of a transaction running on `shard` runs when
/// one of its keys is on another shard: `plan_on` with the shards held for it as reachable.
pub fn plan(shard: &Shard, front: &Front, spec: &CommandSpec, argv: &[&[u8]]) -> Option<Across> {
    if let SortPlan::Held(across) = sort_plan(shard, front, spec, argv) {
        return Some(across);
    }
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
    let mut here = Here {
        db: client.db,
        proto: reply.proto,
        shard,
        front,
        client,
        caller,
        spec,
        argv,
        now,
    };
    let result = match across {
        Across::Lent(plan) => here.lent(plan),
        Across::ListMove { from, to } => here.list_move(from, to),
        Across::Move { from, to } if spec.meta.name == "smove" => here.smove(from, to),
        Across::Move { from, to } => here.rename(from, to),
        Across::Msetnx(parts) => here.msetnx(parts),
        Across::Pops(tries) => here.pops(tries),
        Across::Sort => here.sort(),
    };
    match result {
        Ok(r) | Err(r) => reply.buf.extend_from_slice(&r),
    }
}

/// The command being run and where: this shard (the script's or the transaction segment's),
/// its client, and the caller for whom steps run on the held shards.
struct Here<'a> {
    shard: &'a mut Shard,
    front: &'a mut Front,
    client: &'a mut Client,
    caller: &'a ClientShared,
    spec: &'static CommandSpec,
    argv: &'a [&'a [u8]],
    now: u64,
    db: usize,
    proto: Proto,
}

/// A step's reply; `Err` when it is an error (the command's reply then).
type StepReply = Result<Vec<u8>, Vec<u8>>;

impl Here<'_> {
    /// Runs `run` as a step of the command on shard `t`, here or on the held shard, counted as
    /// the command when `counted`; its reply.
    fn finish_at(&mut self, t: u16, counted: bool, run: hop::Finish) -> StepReply {
        self.op_at(
            t,
            Op::Finish {
                spec: self.spec,
                counted,
                run,
            },
            None,
        )
    }

    /// Runs `op` over `argv` (the command's own when None) on shard `t`: here through the
    /// command layer, or on the held shard (`tx_across::call_held`).
    fn op_at(&mut self, t: u16, op: Op, argv: Option<&[&[u8]]>) -> StepReply {
        let argv = argv.unwrap_or(self.argv);
        let r = if t == self.shard.index {
            let mut r = Reply::new();
            r.proto = self.proto;
            let (s, f, c, now) = (
                &mut *self.shard,
                &mut *self.front,
                &mut *self.client,
                self.now,
            );
            match op {
                Op::Finish {
                    spec,
                    counted: true,
                    run,
                } => cmd::call_with(s, f, c, &mut r, spec, argv, now, run.0),
                Op::Finish {
                    spec,
                    counted: false,
                    run,
                } => cmd::call_quiet_with(s, f, c, &mut r, spec, argv, now, run.0),
                Op::Quiet(spec) => cmd::call_quiet(s, f, c, &mut r, spec, argv, now),
                Op::CallLent(spec, lent) => {
                    read_across::call_lent(s, f, c, &mut r, spec, argv, now, *lent)
                }
                Op::Call(spec) => cmd::call(s, f, c, &mut r, spec, argv, now),
                // The steps above are the only ones this module makes.
                _ => r.error(&CmdError::Err("not a step across shards".to_string())),
            }
            r.buf
        } else {
            let mut batch = hop::Batch::new(hop::ClientView::of_shared(self.caller));
            batch.push(op, self.db, self.proto, argv);
            match crate::tx_across::call_held(t, batch) {
                Some(done) => done.reply(0).to_vec(),
                None => return Err(self.gone(t)),
            }
        };
        if r.starts_with(b"-") { Err(r) } else { Ok(r) }
    }

    /// What `read` finds on shard `t` (a quiet step there: not counted); `Err` with the error
    /// it answered.
    fn read_at<T: Send + 'static>(
        &mut self,
        t: u16,
        read: impl FnOnce(&mut cmd::Ctx<'_>) -> Result<T, CmdError> + Send + 'static,
    ) -> Result<T, Vec<u8>> {
        let (tx, rx) = mpsc::channel();
        let run = hop::Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
            let found = read(ctx)?;
            let _ = tx.send(found);
            Ok(())
        }));
        self.finish_at(t, false, run)?;
        rx.try_recv().map_err(|_| self.gone(t))
    }

    /// The error of a held shard whose thread is gone (the process is stopping).
    fn gone(&self, t: u16) -> Vec<u8> {
        self.error(&hop::unavailable_error(hop::Unavailable { shard: t }))
    }

    /// `e` as the command's reply.
    fn error(&self, e: &CmdError) -> Vec<u8> {
        let mut r = Reply::new();
        r.proto = self.proto;
        r.error(e);
        r.buf
    }

    fn lent(&mut self, plan: read_across::Plan) -> StepReply {
        let db = self.db;
        let mut copies = Vec::new();
        for (t, keys) in plan.reads {
            copies.extend(self.read_at(t, move |ctx| {
                let now = ctx.now_ms;
                let mut found = Vec::with_capacity(keys.len());
                for key in keys {
                    let copy = ctx
                        .shard
                        .lookup_quiet(db, &key, now)
                        .map(|e| (e.state.clone(), e.str_enc));
                    if let Some((state, str_enc)) = copy {
                        found.push((key, state, str_enc));
                    }
                }
                Ok(found)
            })?);
        }
        let lent = Lent { db, copies };
        self.op_at(plan.target, Op::CallLent(self.spec, Box::new(lent)), None)
    }

    fn list_move(&mut self, from: u16, to: u16) -> StepReply {
        let sides = cmd::list::move_sides(self.argv).map_err(|e| self.error(&e))?;
        if matches!(self.spec.meta.name, "blmove" | "brpoplpush") {
            // Checked as the command checks it, though it does not wait here.
            let timeout = self.argv.last().copied().unwrap_or_default();
            crate::blocking::parse_timeout(timeout, self.now).map_err(|e| self.error(&e))?;
        }
        let (Some(src), Some(dst)) = (self.argv.get(1).copied(), self.argv.get(2).copied()) else {
            return Err(self.error(&CmdError::CrossSlot));
        };
        if from == self.shard.index {
            let (s, d) = (src.to_vec(), dst.to_vec());
            let run = hop::Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
                cmd::list::move_to_held_shard(ctx, &s, &d, sides, to)
            }));
            return self.finish_at(from, true, run);
        }
        // The source on a held shard, which cannot reach back here: its end element read
        // there, pushed on the destination (its WRONGTYPE leaves the source as it was), then
        // popped there, that step counted as the command.
        let source = src.to_vec();
        let end = self.read_at(from, move |ctx| cmd::list::peek_end(ctx, &source, sides.0))?;
        let Some(v) = end else {
            let mut r = Reply::new();
            r.proto = self.proto;
            r.null();
            return Ok(r.buf);
        };
        let (push, name) = cmd::list::push_for(sides.1).map_err(|e| self.error(&e))?;
        self.op_at(to, Op::Quiet(push), Some(&[name, dst, &v]))?;
        let source = src.to_vec();
        let pop = hop::Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
            cmd::list::pop_end(ctx, &source, sides.0, &v)
        }));
        self.finish_at(from, true, pop)
    }

    /// RENAME, RENAMENX: `move_across`'s three steps, every shard held between them.
    fn rename(&mut self, from: u16, to: u16) -> StepReply {
        let db = self.db;
        let (Some(src), Some(dst)) = (self.argv.get(1).copied(), self.argv.get(2).copied()) else {
            return Err(self.error(&CmdError::CrossSlot));
        };
        let key = src.to_vec();
        let source = self.read_at(from, move |ctx| {
            Ok(crate::move_across::read_source(ctx.shard, db, &key))
        })?;
        let Some(source) = source else {
            return Err(self.error(&CmdError::NoSuchKey));
        };
        let nx = self.spec.meta.name == "renamenx";
        let write = crate::move_across::write_destination(
            db,
            dst.to_vec(),
            (source.value, source.at_ms, source.str_enc),
            nx,
        );
        let written = self.finish_at(to, true, write)?;
        if !crate::move_across::wrote_destination(&written) {
            return Ok(written);
        }
        self.finish_at(
            from,
            false,
            crate::move_across::remove_source(db, src.to_vec(), source.observed),
        )?;
        Ok(written)
    }

    /// SMOVE: the member read on the source's shard, added on the destination's, then
    /// removed from the source as far as the read observed it.
    fn smove(&mut self, from: u16, to: u16) -> StepReply {
        let db = self.db;
        let (Some(src), Some(dst), Some(member)) = (
            self.argv.get(1).copied(),
            self.argv.get(2).copied(),
            self.argv.get(3).copied(),
        ) else {
            return Err(self.error(&CmdError::WrongArity("smove".to_string())));
        };
        let (key, m) = (src.to_vec(), member.to_vec());
        let found = self.read_at(from, move |ctx| {
            let now = ctx.now_ms;
            cmd::set::smove_source(ctx.shard, db, &key, &m, now)
        })?;
        let observed = match found {
            cmd::set::SmoveSource::Missing => {
                let mut r = Reply::new();
                r.int(0);
                return Ok(r.buf);
            }
            cmd::set::SmoveSource::Without => None,
            cmd::set::SmoveSource::With(o) => Some(o),
        };
        let (d, m) = (dst.to_vec(), member.to_vec());
        let present = observed.is_some();
        let add = hop::Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
            cmd::set::smove_into(ctx, &d, &m, present)
        }));
        let added = self.finish_at(to, true, add)?;
        let Some(observed) = observed.filter(|_| added.as_slice() == b":1\r\n") else {
            return Ok(added);
        };
        let (s, m) = (src.to_vec(), member.to_vec());
        let remove = hop::Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
            cmd::set::smove_out(ctx, &s, &m, observed);
            Ok(())
        }));
        self.finish_at(from, false, remove)?;
        Ok(added)
    }

    /// LMPOP, ZMPOP, BLPOP...: each key's pop on its shard in the order given, as that
    /// command over that key alone that may not block, until one pops or fails (Redis takes
    /// the first non-empty key); the last try's null reply when none popped. The first try
    /// counts as the command.
    fn pops(&mut self, tries: crate::tx_across::Parts) -> StepReply {
        let Some(handler) = self.spec.handler else {
            return Err(self.error(&CmdError::WrongArity(self.spec.meta.name.to_string())));
        };
        let mut last = Vec::new();
        for (i, (t, one)) in tries.into_iter().enumerate() {
            let argv: Vec<Vec<u8>> = one.clone();
            let run = hop::Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
                // Two levels deep: the command may not block (`Ctx::can_block`) and answers
                // the null array when it finds nothing.
                ctx.client.call_depth += 1;
                let refs: Vec<&[u8]> = one.iter().map(Vec::as_slice).collect();
                let r = handler(ctx, &refs);
                ctx.client.call_depth -= 1;
                r
            }));
            let op = Op::Finish {
                spec: self.spec,
                counted: i == 0,
                run,
            };
            let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            last = self.op_at(t, op, Some(&refs))?;
            if !matches!(last.as_slice(), b"*-1\r\n" | b"_\r\n") {
                break;
            }
        }
        Ok(last)
    }

    /// MSETNX: every shard's keys checked (nothing runs between the check and the sets: all
    /// are held), then each shard's part, the first counted as the command.
    /// SORT with patterns over every shard, all held: `sort_across`'s steps (the sorted
    /// key's elements read on its shard, the BY values and then the GET values of the
    /// selected elements read on the shards of their keys), then the reply or the STORE on
    /// the destination's shard, that step counted as the command (`sort::finish`).
    fn sort(&mut self) -> StepReply {
        use cmd::sort::{self, Formed, Gathered};
        use std::collections::{HashMap, HashSet};
        let argv = self.argv;
        let readonly = self.spec.meta.name == "sort_ro";
        let access = sort::full_key_access(self.shard, self.client, self.spec, argv);
        let mut a = sort::parse_args(argv, readonly, access).map_err(|e| self.error(&e))?;
        let key = argv.get(1).copied().unwrap_or_default().to_vec();
        let Some((src, target)) = self.shard.scripting.slots.as_ref().map(|map| {
            let target = a.store.map_or(self.shard.index, |d| map.shard_of_key(d));
            (map.shard_of_key(&key), target)
        }) else {
            return Err(self.error(&CmdError::CrossSlot));
        };
        let db = self.db;
        let (kind, elems) = self.read_at(src, move |ctx| {
            sort::load_from(ctx.shard, db, &key, ctx.now_ms)
        })?;
        a.settle(kind, self.client.is_script());
        let write = a.store.is_some();
        let by = a.by_lookup();
        let by_values = match by {
            Some(p) => {
                let wanted: HashSet<Formed> = elems
                    .iter()
                    .filter_map(|e| crate::sort_across::formed(p, e))
                    .collect();
                self.formed_values(wanted, write)?
            }
            None => HashMap::new(),
        };
        let selected = sort::select(&a, kind, elems, |e| {
            by.and_then(|p| crate::sort_across::formed(p, e))
                .and_then(|f| by_values.get(&f).cloned())
        });
        let gathered = match selected {
            Ok(selected) => {
                let wanted: HashSet<Formed> = selected
                    .iter()
                    .flat_map(|e| {
                        a.gets
                            .iter()
                            .filter_map(move |p| crate::sort_across::formed(p, e))
                    })
                    .collect();
                let values = self.formed_values(wanted, write)?;
                Gathered {
                    selected: Ok(selected),
                    values,
                }
            }
            Err(e) => Gathered {
                selected: Err(e),
                values: HashMap::new(),
            },
        };
        let owned: Vec<Vec<u8>> = argv.iter().map(|x| x.to_vec()).collect();
        let run = hop::Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
            let refs: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
            sort::finish(ctx, &refs, gathered)
        }));
        self.finish_at(target, true, run)
    }

    /// The values of the `wanted` keys (hash fields) formed by SORT's patterns, each read on
    /// its shard (one quiet step per shard); missing ones are absent.
    fn formed_values(
        &mut self,
        wanted: std::collections::HashSet<cmd::sort::Formed>,
        write: bool,
    ) -> Result<std::collections::HashMap<cmd::sort::Formed, Vec<u8>>, Vec<u8>> {
        let mut by_shard: std::collections::BTreeMap<u16, Vec<cmd::sort::Formed>> =
            std::collections::BTreeMap::new();
        let own = self.shard.index;
        for f in wanted {
            let t = self
                .shard
                .scripting
                .slots
                .as_ref()
                .map_or(own, |map| map.shard_of_key(&f.0));
            by_shard.entry(t).or_default().push(f);
        }
        let db = self.db;
        let mut values = std::collections::HashMap::new();
        for (t, list) in by_shard {
            let found = self.read_at(t, move |ctx| {
                let mut found = Vec::with_capacity(list.len());
                for (k, f) in list {
                    if crate::stop::requested() {
                        return Err(CmdError::ShuttingDown);
                    }
                    if let Some(v) =
                        cmd::sort::read_formed(ctx.shard, db, &k, f.as_deref(), ctx.now_ms, write)
                    {
                        found.push(((k, f), v));
                    }
                }
                Ok(found)
            })?;
            values.extend(found);
        }
        Ok(values)
    }

    fn msetnx(&mut self, parts: crate::tx_across::Parts) -> StepReply {
        if self.argv.len() < 3 || self.argv.len() % 2 == 0 {
            return Err(self.error(&CmdError::WrongArity("msetnx".to_string())));
        }
        let db = self.db;
        for (t, part) in &parts {
            let keys: Vec<Vec<u8>> = part.iter().skip(1).step_by(2).cloned().collect();
            let any = self.read_at(*t, move |ctx| {
                let now = ctx.now_ms;
                Ok(keys
                    .iter()
                    .any(|k| ctx.shard.lookup_quiet(db, k, now).is_some()))
            })?;
            if any {
                let mut r = Reply::new();
                r.int(0);
                return Ok(r.buf);
            }
        }
        let mut answer = Vec::new();
        for (i, (t, part)) in parts.into_iter().enumerate() {
            let argv: Vec<&[u8]> = part.iter().map(Vec::as_slice).collect();
            let op = if i == 0 {
                Op::Call(self.spec)
            } else {
                Op::Quiet(self.spec)
            };
            let r = self.op_at(t, op, Some(&argv))?;
            if i == 0 {
                answer = r;
            }
        }
        Ok(answer)
    }
}

//! RENAME, RENAMENX and SMOVE whose two keys are on two shards of this process, and MSETNX
//! over keys of several (`msetnx`), on the main port (issue 17: the port behaves as one
//! server). For the first three, the connection's thread runs three steps, each on one shard
//! (SMOVE's alike, with its member: `smove`):
//!
//! 1. the source is read on its shard (`lookup_quiet`: expired there first): its value as the
//!    effects that rebuild it (`cmd::keys::snapshot`), its TTL, whether its string was
//!    modified in place, and what its state has observed. A missing source answers
//!    "ERR no such key", as on one shard;
//! 2. the destination's shard writes the value there as RENAME on one shard does
//!    (`cmd::keys::write_snapshot`), RENAMENX first checking that the destination is absent
//!    (else 0, and nothing more); this step is the one counted as the command;
//! 3. the source's shard removes the source: an observed-remove of what step 1 read, not of
//!    what is there by then, so a write to the source between the steps (a client's, or
//!    another site's) stays as the source: no acknowledged write is lost.
//!
//! The destination is written before the source is removed: a crash between the two leaves
//! both keys, never neither. The reply goes when both writes may be acknowledged (the two
//! logs' persistence conditions). Not atomic: a client may see both keys between steps 2 and
//! 3, and the keyspace events come as `rename_to` then `rename_from`. The steps are built by
//! `read_source`, `write_destination`, `remove_source` and `msetnx_parts`, which
//! `held_across` runs too, inside scripts and transactions, with every shard held.

use std::rc::Rc;

use meridian_crdt::{Effect, Observed};

use crate::client::Client;
use crate::cmd;
use crate::cmd::keys::Snapshot;
use crate::cmd::table::CommandSpec;
use crate::error::CmdError;
use crate::hop::{self, Finish, Thread};
use crate::persist::AfterBatch;
use crate::resp::reply::Reply;

/// The commands this module runs (MSETNX: `msetnx`).
pub const COMMANDS: &[&str] = &["rename", "renamenx", "smove", "msetnx"];

/// What step 1 read of the source.
pub(crate) struct Source {
    pub value: Snapshot,
    pub at_ms: Option<u64>,
    pub str_enc: crate::keyspace::StrEnc,
    pub observed: Observed,
}

/// Step 1 of RENAME and RENAMENX, on the source's shard: the source as it is (expired there
/// first). None when it is missing ("ERR no such key").
pub(crate) fn read_source(s: &mut crate::shard::Shard, db: usize, key: &[u8]) -> Option<Source> {
    let now = s.now_ms();
    s.lookup_quiet(db, key, now).and_then(|e| {
        Some(Source {
            value: cmd::keys::snapshot(&e.state)?,
            at_ms: e.state.expire_at_ms(),
            str_enc: e.str_enc,
            observed: e.state.observed(),
        })
    })
}

/// Step 2 of RENAME (`nx`: RENAMENX), on the destination's shard: the source's value written
/// there (RENAMENX: only when the destination is absent, else 0), answered as the command.
pub(crate) fn write_destination(
    db: usize,
    to_key: Vec<u8>,
    (value, at_ms, str_enc): (Snapshot, Option<u64>, crate::keyspace::StrEnc),
    nx: bool,
) -> Finish {
    Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
        let now = ctx.now_ms;
        if nx && ctx.shard.lookup_quiet(db, &to_key, now).is_some() {
            ctx.out.int(0);
            return Ok(());
        }
        cmd::keys::write_snapshot(ctx, db, &to_key, &value, at_ms);
        ctx.shard.set_str_encoding(db, &to_key, str_enc);
        ctx.shard
            .notify(crate::notify::GENERIC, "rename_to", db, &to_key);
        if nx {
            ctx.out.int(1);
        } else {
            ctx.out.ok();
        }
        Ok(())
    }))
}

/// Whether step 2 wrote (RENAMENX onto an existing key, or an error such as MISCONF: no).
pub fn wrote_destination(reply: &[u8]) -> bool {
    reply == b":1\r\n" || reply == b"+OK\r\n"
}

/// Step 3 of RENAME, on the source's shard: an observed-remove of what step 1 read.
pub fn remove_source(db: usize, src: Vec<u8>, observed: Observed) -> Finish {
    Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
        let now = ctx.now_ms;
        let exists = ctx.shard.lookup_quiet(db, &src, now).is_some();
        if exists {
            ctx.shard
                .write_key(db, &src, now, |_| Effect::<&[u8]>::Remove { observed });
            ctx.shard
                .notify(crate::notify::GENERIC, "rename_from", db, &src);
        }
        Ok(())
    }))
}

/// The two shards of `argv` (a RENAME or RENAMENX): `(source's, destination's)` when they
/// differ and both are this process's.
pub fn shards(th: &Thread, spec: &CommandSpec, argv: &[&[u8]]) -> Option<(u16, u16)> {
    if !COMMANDS.contains(&spec.meta.name) {
        return None;
    }
    let slots = &th.node.slots;
    if spec.meta.name == "msetnx" {
        // Every key of this process; the first two shards stand for them all.
        let mut shards = argv
            .iter()
            .skip(1)
            .step_by(2)
            .map(|k| slots.shard_of_key(k));
        let first = shards.next()?;
        let mut other = None;
        for t in shards {
            if !th.node.is_local(t) {
                return None;
            }
            if t != first {
                other.get_or_insert(t);
            }
        }
        return other
            .filter(|_| th.node.is_local(first))
            .map(|o| (first, o));
    }
    let from = slots.shard_of_key(argv.get(1)?);
    let to = slots.shard_of_key(argv.get(2)?);
    (from != to && th.node.is_local(from) && th.node.is_local(to)).then_some((from, to))
}

/// Runs the three steps of the module doc and puts the reply in `out`.
pub async fn run(
    th: &Rc<Thread>,
    client: &mut Client,
    out: &mut Reply,
    afters: &mut Vec<AfterBatch>,
    spec: &'static CommandSpec,
    argv: Vec<Vec<u8>>,
) {
    client.shared.last_cmd.set(spec.meta.name);
    out.proto = client.shared.proto.get();
    let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    let Some((from, to)) = shards(th, spec, &refs) else {
        return hop::reply_error(th, out, &CmdError::CrossSlot);
    };
    if spec.meta.name == "smove" {
        smove(th, client, out, afters, spec, &refs, (from, to)).await;
        return;
    }
    if spec.meta.name == "msetnx" {
        msetnx(th, client, out, afters, spec, &refs).await;
        return;
    }
    let nx = spec.meta.name == "renamenx";
    let db = client.db;
    let src = argv.get(1).cloned().unwrap_or_default();
    let dst = argv.get(2).cloned().unwrap_or_default();
    // Step 1.
    let key = src.clone();
    let read = hop::run_on(th, from, move |t| {
        read_source(&mut t.shard.borrow_mut(), db, &key)
    })
    .await;
    let source = match read {
        Ok(Some(s)) => s,
        Ok(None) => return hop::reply_error(th, out, &CmdError::NoSuchKey),
        Err(e) => return hop::reply_error(th, out, &hop::unavailable_error(e)),
    };
    let Source {
        value,
        at_ms,
        str_enc,
        observed,
    } = source;
    // Step 2.
    let write = write_destination(db, dst, (value, at_ms, str_enc), nx);
    let written = match hop::finish_step(th, client, afters, to, spec, &refs, true, write).await {
        Ok(r) => r,
        Err(e) => return hop::reply_error(th, out, &e),
    };
    if !wrote_destination(&written) {
        // RENAMENX onto an existing key (0), or an error (MISCONF...): the source stays.
        out.raw(&written);
        return;
    }
    // Step 3.
    let remove = remove_source(db, src, observed);
    match hop::finish_step(th, client, afters, from, spec, &refs, false, remove).await {
        Ok(_) => out.raw(&written),
        Err(e) => hop::reply_error(th, out, &e),
    }
}

/// SMOVE between two shards: the same three steps (`cmd::set::smove_source`, `smove_into`,
/// `smove_out`): the member is added to the destination before it leaves the source, and
/// leaves it only as far as step 1 had observed it (an SADD of it since then stays).
async fn smove(
    th: &Rc<Thread>,
    client: &mut Client,
    out: &mut Reply,
    afters: &mut Vec<AfterBatch>,
    spec: &'static CommandSpec,
    refs: &[&[u8]],
    (from, to): (u16, u16),
) {
    let db = client.db;
    let src = refs.get(1).map(|a| a.to_vec()).unwrap_or_default();
    let dst = refs.get(2).map(|a| a.to_vec()).unwrap_or_default();
    let member = refs.get(3).map(|a| a.to_vec()).unwrap_or_default();
    let (key, m) = (src.clone(), member.clone());
    let read = hop::run_on(th, from, move |t| {
        let mut s = t.shard.borrow_mut();
        let now = s.now_ms();
        cmd::set::smove_source(&mut s, db, &key, &m, now)
    })
    .await;
    let observed = match read {
        Ok(Ok(cmd::set::SmoveSource::Missing)) => {
            out.int(0);
            return;
        }
        Ok(Ok(cmd::set::SmoveSource::Without)) => None,
        Ok(Ok(cmd::set::SmoveSource::With(o))) => Some(o),
        Ok(Err(e)) => return hop::reply_error(th, out, &e),
        Err(e) => return hop::reply_error(th, out, &hop::unavailable_error(e)),
    };
    let present = observed.is_some();
    let m = member.clone();
    let add = Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
        cmd::set::smove_into(ctx, &dst, &m, present)
    }));
    let added = match hop::finish_step(th, client, afters, to, spec, refs, true, add).await {
        Ok(r) => r,
        Err(e) => return hop::reply_error(th, out, &e),
    };
    let Some(observed) = observed.filter(|_| added.as_slice() == b":1\r\n") else {
        out.raw(&added);
        return;
    };
    let remove = Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
        cmd::set::smove_out(ctx, &src, &member, observed);
        Ok(())
    }));
    match hop::finish_step(th, client, afters, from, spec, refs, false, remove).await {
        Ok(_) => out.raw(&added),
        Err(e) => hop::reply_error(th, out, &e),
    }
}

/// MSETNX's arguments by shard: each shard's command (MSETNX and its pairs), the shards in
/// the order of their first key.
pub fn msetnx_parts(slots: &crate::slot::SlotMap, refs: &[&[u8]]) -> Vec<(u16, Vec<Vec<u8>>)> {
    let mut parts: Vec<(u16, Vec<Vec<u8>>)> = Vec::new();
    for kv in refs.get(1..).unwrap_or_default().chunks_exact(2) {
        let [k, v] = kv else { continue };
        let t = slots.shard_of_key(k);
        let at = match parts.iter().position(|(s, _)| *s == t) {
            Some(i) => i,
            None => {
                parts.push((
                    t,
                    vec![refs.first().map(|n| n.to_vec()).unwrap_or_default()],
                ));
                parts.len() - 1
            }
        };
        if let Some((_, p)) = parts.get_mut(at) {
            p.push(k.to_vec());
            p.push(v.to_vec());
        }
    }
    parts
}

/// The keys one shard's part of MSETNX set, each with what its state then observed (its very
/// write).
type Written = Vec<(Vec<u8>, Observed)>;

/// MSETNX over keys of several shards: 1 and every key set when none exists, else 0 and none
/// set. Each shard's keys are checked first (jobs, read only): one that exists answers 0.
/// Then each shard in turn runs MSETNX of its keys (one command there, counted once); if one
/// finds a key that appeared since the check, the shards already done take back what they
/// set (an observed-remove of those very writes, so a write made meanwhile by another client
/// stays) and the answer is 0. At most one of two such commands over a common key sets it:
/// that key's shard runs their parts one after the other. Not atomic: between the parts, a
/// client may see some of the keys set.
async fn msetnx(
    th: &Rc<Thread>,
    client: &mut Client,
    out: &mut Reply,
    afters: &mut Vec<AfterBatch>,
    spec: &'static CommandSpec,
    refs: &[&[u8]],
) {
    if refs.len() < 3 || refs.len() % 2 == 0 {
        return hop::reply_error(th, out, &CmdError::WrongArity("msetnx".to_string()));
    }
    let db = client.db;
    let parts = msetnx_parts(&th.node.slots, refs);
    // The check.
    let mut waits = Vec::with_capacity(parts.len());
    for (shard, part) in &parts {
        let keys: Vec<Vec<u8>> = part.iter().skip(1).step_by(2).cloned().collect();
        let rx = hop::send_job(th, *shard, move |t| {
            let mut s = t.shard.borrow_mut();
            let now = s.now_ms();
            keys.iter().any(|k| s.lookup_quiet(db, k, now).is_some())
        })
        .await;
        match rx {
            Ok(rx) => waits.push((*shard, rx)),
            Err(e) => return hop::reply_error(th, out, &hop::unavailable_error(e)),
        }
    }
    let mut any = false;
    for (shard, rx) in waits {
        match rx.await {
            Ok(found) => any |= found,
            Err(_) => {
                let mut fg = th.front.borrow_mut();
                cmd::reply_error(
                    &mut fg,
                    out,
                    &hop::unavailable_error(hop::Unavailable { shard }),
                );
                return;
            }
        }
    }
    if any {
        out.int(0);
        return;
    }
    let Some(handler) = spec.handler else {
        return;
    };
    // The parts, each taking note of what it set.
    let mut done: Vec<(u16, Written)> = Vec::new();
    let mut answer: Vec<u8> = b":1\r\n".to_vec();
    for (i, (shard, part)) in parts.into_iter().enumerate() {
        let set: std::sync::Arc<std::sync::Mutex<Written>> = std::sync::Arc::default();
        let noted = set.clone();
        let run = Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
            let argv: Vec<&[u8]> = part.iter().map(Vec::as_slice).collect();
            let mark = ctx.out.buf.len();
            handler(ctx, &argv)?;
            if ctx.out.buf.get(mark..) == Some(b":1\r\n".as_slice()) {
                let now = ctx.now_ms;
                let mut written = Vec::with_capacity(part.len() / 2);
                for k in part.iter().skip(1).step_by(2) {
                    if let Some(e) = ctx.shard.lookup_quiet(db, k, now) {
                        written.push((k.clone(), e.state.observed()));
                    }
                }
                if let Ok(mut n) = noted.lock() {
                    *n = written;
                }
            }
            Ok(())
        }));
        match hop::finish_step(th, client, afters, shard, spec, refs, i == 0, run).await {
            Ok(r) if r.as_slice() == b":1\r\n" => {
                let written = set
                    .lock()
                    .map(|mut v| std::mem::take(&mut *v))
                    .unwrap_or_default();
                done.push((shard, written));
            }
            Ok(r) => {
                answer = r;
                break;
            }
            Err(e) => {
                let mut r = Reply::new();
                r.proto = out.proto;
                r.error(&e);
                answer = r.buf;
                break;
            }
        }
    }
    if answer.as_slice() != b":1\r\n" {
        for (shard, written) in done {
            let undo = Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
                let now = ctx.now_ms;
                for (k, observed) in written {
                    if ctx.shard.lookup_quiet(db, &k, now).is_none() {
                        continue;
                    }
                    ctx.shard
                        .write_key(db, &k, now, |_| Effect::<&[u8]>::Remove { observed });
                    if ctx.shard.lookup_quiet(db, &k, now).is_none() {
                        ctx.shard.notify(crate::notify::GENERIC, "del", db, &k);
                    }
                }
                Ok(())
            }));
            let _ = hop::finish_step(th, client, afters, shard, spec, refs, false, undo).await;
        }
    }
    out.raw(&answer);
}

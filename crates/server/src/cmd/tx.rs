//! Transactions: MULTI EXEC DISCARD WATCH UNWATCH.
//!
//! Queued commands run back to back on the shard thread, so a transaction is atomic: no other
//! command interleaves. WATCH marks the client dirty when a watched key is written (or
//! expires) before EXEC, which then answers a null array.

use super::{Ctx, Handler};
use crate::client::{Client, MultiState};
use crate::error::CmdError;
use crate::shard::Shard;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("multi", multi),
    ("exec", exec),
    ("discard", discard),
    ("watch", watch),
    ("unwatch", unwatch),
];

fn multi(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    if ctx.client.multi.is_some() {
        return Err(CmdError::Err("MULTI calls can not be nested".to_string()));
    }
    ctx.client.multi = Some(MultiState::default());
    ctx.client.shared.in_multi.set(true);
    ctx.out.ok();
    Ok(())
}

fn discard(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    if ctx.client.multi.is_none() {
        return Err(CmdError::Err("DISCARD without MULTI".to_string()));
    }
    end_transaction(ctx.shard, ctx.client);
    ctx.out.ok();
    Ok(())
}

/// Leaves MULTI and drops every WATCH of `client` (DISCARD, RESET, an EXEC refused before
/// it runs).
pub fn end_transaction(shard: &mut Shard, client: &mut Client) {
    client.multi = None;
    client.shared.in_multi.set(false);
    clear_watches(shard, client);
}

/// Drops every WATCH of `client`, its keys' registrations at `shard` with them.
pub fn clear_watches(shard: &mut Shard, client: &mut Client) {
    shard.unwatch_all(&client.dirty);
    client.watched.clear();
    client.shared.watched.set(0);
    client.dirty.set(false);
}

fn exec(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let Some(state) = ctx.client.multi.take() else {
        return Err(CmdError::Err("EXEC without MULTI".to_string()));
    };
    ctx.client.shared.in_multi.set(false);
    if state.aborted {
        clear_watches(ctx.shard, ctx.client);
        return Err(CmdError::Raw(
            "EXECABORT Transaction discarded because of previous errors.".to_string(),
        ));
    }
    // A watched key that expired since WATCH counts as modified, as in Redis 7.0.
    let expired = ctx.client.watched.iter().any(|(db, key)| {
        ctx.shard
            .watched_key_expired(*db, key, &ctx.client.dirty, ctx.now_ms)
    });
    if ctx.client.dirty.get() || expired {
        clear_watches(ctx.shard, ctx.client);
        ctx.out.null_array();
        return Ok(());
    }
    clear_watches(ctx.shard, ctx.client);
    ctx.out.array(state.queued.len());
    ctx.client.exec_running = Some((state.queued.len(), state.args_bytes()));
    let table = ctx.front.table;
    for q in &state.queued {
        let argv: Vec<&[u8]> = q.args.iter().map(Vec::as_slice).collect();
        match super::resolve(table, &argv) {
            Ok(spec) => {
                // The rules may have changed since the command was queued.
                match super::acl::exec_gate(ctx.shard, ctx.client, spec, &argv, ctx.now_ms) {
                    None => {
                        // A list move or a command reading keys of several shards, its
                        // other shards held with the transaction's (`held_across`).
                        match crate::held_across::plan(ctx.shard, ctx.front, spec, &argv) {
                            Some(across) => {
                                let caller = ctx.client.shared.clone();
                                crate::held_across::run(
                                    ctx.shard, ctx.front, ctx.client, &caller, ctx.out, spec,
                                    &argv, ctx.now_ms, across,
                                );
                            }
                            None => super::call(
                                ctx.shard, ctx.front, ctx.client, ctx.out, spec, &argv, ctx.now_ms,
                            ),
                        }
                    }
                    Some(e) => super::reply_error(ctx.front, ctx.out, &e),
                }
            }
            Err(e) => super::reply_error(ctx.front, ctx.out, &e),
        }
    }
    ctx.client.exec_running = None;
    Ok(())
}

fn watch(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if ctx.client.multi.is_some() {
        return Err(CmdError::Err(
            "WATCH inside MULTI is not allowed".to_string(),
        ));
    }
    let db = ctx.client.db;
    for key in argv.get(1..).unwrap_or_default() {
        if ctx
            .client
            .watched
            .iter()
            .any(|(d, k)| *d == db && k.as_slice() == *key)
        {
            continue;
        }
        ctx.client.watched.push((db, key.to_vec()));
        let expired = ctx.shard.key_stale(db, key, ctx.now_ms);
        ctx.shard
            .watched
            .entry((db, key.to_vec()))
            .or_default()
            .push(crate::keyspace::Watcher {
                flag: ctx.client.dirty.clone(),
                expired,
            });
    }
    ctx.client.shared.watched.set(ctx.client.watched.len());
    ctx.out.ok();
    Ok(())
}

fn unwatch(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    clear_watches(ctx.shard, ctx.client);
    ctx.out.ok();
    Ok(())
}

//! Commands across logical databases: MOVE SWAPDB.
//!
//! Both are made of per-key writes through `Shard::write_key`/`delete_key`, so they replicate
//! and merge as any write does (docs/conflicts.md §"MOVE and SWAPDB"): MOVE is an
//! observed-remove of the key in the source database and a write of its value (and TTL) in
//! the destination; SWAPDB moves every key of each database into the other the same way. A
//! write on another site that MOVE or SWAPDB did not observe stays where it was written.
//! SWAPDB therefore costs O(keys in both databases), where Redis swaps two pointers.

use super::keys::{Snapshot, snapshot, write_snapshot};
use super::{Ctx, Handler};
use crate::error::CmdError;
use crate::notify;
use meridian_crdt::SmallBytes;

pub const HANDLERS: &[(&str, Handler)] = &[("move", move_cmd), ("swapdb", swapdb)];

/// Redis's `getIntFromObjectOrReply`: an integer in C `int` range. Errors: `msg` when given,
/// else Redis's texts for what is not an integer and for what is out of range.
pub(crate) fn db_index(arg: &[u8], msg: Option<&str>) -> Result<i64, CmdError> {
    let custom = || msg.map(|m| CmdError::Err(m.to_string()));
    let n = super::args::parse_i64(arg).ok_or_else(|| custom().unwrap_or(CmdError::NotInteger))?;
    if i32::try_from(n).is_err() {
        return Err(custom().unwrap_or_else(|| {
            CmdError::Err(format!(
                "value is out of range, value must between {} and {}",
                i32::MIN,
                i32::MAX
            ))
        }));
    }
    Ok(n)
}

/// MOVE key db: 1 when moved; 0 when the key is missing or already in the destination.
fn move_cmd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = argv.get(1).copied().unwrap_or_default();
    let dst = db_index(argv.get(2).copied().unwrap_or_default(), None)?;
    let dst = usize::try_from(dst)
        .ok()
        .filter(|d| ctx.shard.db_ok(*d))
        .ok_or(CmdError::DbIndexOutOfRange)?;
    let src = ctx.db();
    if src == dst {
        return Err(CmdError::Err(
            "source and destination objects are the same".to_string(),
        ));
    }
    let now = ctx.now_ms;
    let Some((value, at_ms, str_enc)) = ctx
        .shard
        .lookup_quiet(src, key, now)
        .and_then(|e| Some((snapshot(&e.state)?, e.state.expire_at_ms(), e.str_enc)))
    else {
        ctx.out.int(0);
        return Ok(());
    };
    if ctx.shard.lookup_quiet(dst, key, now).is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    ctx.shard.delete_key(src, key, now);
    write_snapshot(ctx, dst, key, &value, at_ms);
    ctx.shard.set_str_encoding(dst, key, str_enc);
    ctx.shard.notify(notify::GENERIC, "move_from", src, key);
    ctx.shard.notify(notify::GENERIC, "move_to", dst, key);
    ctx.out.int(1);
    Ok(())
}

/// SWAPDB index1 index2: every key of each database moves to the other (see the module doc).
fn swapdb(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let a = db_index(
        argv.get(1).copied().unwrap_or_default(),
        Some("invalid first DB index"),
    )?;
    let b = db_index(
        argv.get(2).copied().unwrap_or_default(),
        Some("invalid second DB index"),
    )?;
    let (Some(a), Some(b)) = (
        usize::try_from(a).ok().filter(|d| ctx.shard.db_ok(*d)),
        usize::try_from(b).ok().filter(|d| ctx.shard.db_ok(*d)),
    ) else {
        return Err(CmdError::DbIndexOutOfRange);
    };
    if a != b {
        // Redis swaps two pointers: no key is created, so no `new` event.
        let flags = ctx.shard.notify_flags;
        ctx.shard.notify_flags &= !notify::NEW;
        swap_databases(ctx, a, b);
        ctx.shard.notify_flags = flags;
    }
    ctx.shard.stats.dirty += 1;
    ctx.out.ok();
    Ok(())
}

/// The value of `key` in `db` (with its deadline and in-place flag), expiring it first.
fn take(
    ctx: &mut Ctx<'_>,
    db: usize,
    key: &[u8],
) -> Option<(Snapshot, Option<u64>, crate::keyspace::StrEnc)> {
    let now = ctx.now_ms;
    ctx.shard
        .lookup_quiet(db, key, now)
        .and_then(|e| Some((snapshot(&e.state)?, e.state.expire_at_ms(), e.str_enc)))
}

/// Moves every key of `a` to `b` and of `b` to `a`, one key name at a time (only the names
/// are copied up front; each value is copied while its key is moved).
fn swap_databases(ctx: &mut Ctx<'_>, a: usize, b: usize) {
    let now = ctx.now_ms;
    let mut names: Vec<SmallBytes> = Vec::new();
    for db in [a, b] {
        if let Some(d) = ctx.shard.dbs.get(db) {
            names.extend(
                d.table
                    .iter()
                    .filter(|e| !e.state.is_empty())
                    .map(|e| e.key.clone()),
            );
        }
    }
    names.sort_unstable();
    names.dedup();
    for key in &names {
        let in_a = take(ctx, a, key);
        let in_b = take(ctx, b, key);
        for (value, dst) in [(in_a, b), (in_b, a)] {
            match value {
                Some((v, at_ms, str_enc)) => {
                    write_snapshot(ctx, dst, key, &v, at_ms);
                    ctx.shard.set_str_encoding(dst, key, str_enc);
                }
                None => {
                    ctx.shard.delete_key(dst, key, now);
                }
            }
        }
    }
}

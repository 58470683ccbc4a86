//! Generic key commands: DEL UNLINK EXISTS TYPE KEYS SCAN RANDOMKEY RENAME RENAMENX COPY TOUCH,
//! the expiry commands (EXPIRE PEXPIRE EXPIREAT PEXPIREAT TTL PTTL EXPIRETIME PEXPIRETIME
//! PERSIST) and OBJECT.
//!
//! Semantics follow Redis 7.0 (`db.c`, `expire.c`, `object.c`). Every write goes through
//! `Shard::write_key` / `Shard::delete_key`, so it is stamped, logged and replicated as a CRDT
//! effect: RENAME is "read the source, delete it, assign the destination (+ expire)"; EXPIRE is
//! an `Expire` write that removes the expire writes it observed.
//!
//! Key statistics follow Redis's lookup flags: EXISTS, TYPE, TTL..., OBJECT count a keyspace
//! hit or miss without refreshing the LRU clock (`LOOKUP_NOTOUCH`); TOUCH and COPY's source
//! refresh it; write paths (DEL, RENAME, EXPIRE, PERSIST) count nothing.

use meridian_crdt::{Effect, Expire, HllOp, KeyState, SmallBytes, StrView, TypeTag};

use super::args::{ScanOptions, eq_ic, int_arg, parse_cursor, parse_i64, scan_options};
use super::{Ctx, Handler};
use crate::error::CmdError;
#[cfg(test)]
use crate::keyspace::Mark;
use crate::keyspace::{Entry, KeyTable, StrEnc, lru_clock};
use crate::notify;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("del", del),
    ("unlink", unlink),
    ("exists", exists),
    ("type", type_cmd),
    ("keys", keys),
    ("scan", scan),
    ("randomkey", randomkey),
    ("rename", rename),
    ("renamenx", renamenx),
    ("copy", copy),
    ("touch", touch),
    ("expire", expire),
    ("pexpire", pexpire),
    ("expireat", expireat),
    ("pexpireat", pexpireat),
    ("ttl", ttl),
    ("pttl", pttl),
    ("expiretime", expiretime),
    ("pexpiretime", pexpiretime),
    ("persist", persist),
    ("object|encoding", object_encoding),
    ("object|refcount", object_refcount),
    ("object|idletime", object_idletime),
    ("object|freq", object_freq),
    ("object|help", object_help),
];

// ---------------------------------------------------------------------------------------------
// Lookup helpers

/// `lookupKeyReadWithFlags(LOOKUP_NOTOUCH)`: expires the key if due, counts a keyspace hit or
/// miss (and notifies `keymiss`), leaves the LRU clock alone. `f` sees the live entry.
fn peek<R>(ctx: &mut Ctx<'_>, db: usize, key: &[u8], f: impl FnOnce(&Entry) -> R) -> Option<R> {
    let r = peek_unnotified(ctx, db, key, f);
    if r.is_none() {
        ctx.shard.notify(notify::KEY_MISS, "keymiss", db, key);
    }
    r
}

/// `peek` without the `keymiss` event (OBJECT's `LOOKUP_NOTOUCH|LOOKUP_NONOTIFY`).
fn peek_unnotified<R>(
    ctx: &mut Ctx<'_>,
    db: usize,
    key: &[u8],
    f: impl FnOnce(&Entry) -> R,
) -> Option<R> {
    let now = ctx.now_ms;
    let r = ctx.shard.lookup_quiet(db, key, now).map(f);
    if r.is_some() {
        ctx.shard.stats.keyspace_hits += 1;
    } else {
        ctx.shard.stats.keyspace_misses += 1;
    }
    r
}

/// A key's value copied out of the keyspace (RENAME, COPY, MOVE): the effects that rebuild it.
pub(crate) struct Snapshot(Vec<Effect<Vec<u8>>>);

pub(crate) fn snapshot(state: &KeyState) -> Option<Snapshot> {
    let effects = state.recreate_effects();
    if effects.is_empty() {
        None
    } else {
        Some(Snapshot(effects))
    }
}

/// Writes `value` (and the deadline `at_ms`) to `key` in `db`, replacing whatever is there:
/// an observed-remove of the destination, then the effects that rebuild the value.
pub(crate) fn write_snapshot(
    ctx: &mut Ctx<'_>,
    db: usize,
    key: &[u8],
    value: &Snapshot,
    at_ms: Option<u64>,
) {
    let now = ctx.now_ms;
    ctx.shard.delete_key(db, key, now);
    let delivered = super::hll::delivered_context(ctx);
    for effect in &value.0 {
        ctx.shard.write_key(db, key, now, |state| match effect {
            // A raise carries what this site had seen at the destination (its removal just
            // above included), as PFADD's do: without it, a site holding a removal of the
            // destination drops the raise and one that collected it keeps it.
            Effect::Hll(HllOp::Load { hyll, .. }) => Effect::Hll(HllOp::Load {
                hyll: hyll.clone(),
                seen: super::hll::raise_context(state, &delivered),
            }),
            other => other.clone(),
        });
    }
    if let Some(at) = at_ms {
        ctx.shard.write_key(db, key, now, |st| {
            st.expire_effect::<&[u8]>(Expire::AtMs(at))
        });
    }
}

fn type_name(tag: Option<TypeTag>) -> &'static str {
    match tag {
        None => "none",
        Some(TypeTag::String) => "string",
        Some(TypeTag::Set) => "set",
        Some(TypeTag::Hash) => "hash",
        Some(TypeTag::ZSet) => "zset",
        Some(TypeTag::List) => "list",
        // Redis stores a HyperLogLog as a string.
        Some(TypeTag::Hll) => "string",
        Some(TypeTag::Stream) => "stream",
    }
}

/// Whether an entry is visible and not past its deadline (KEYS/SCAN/RANDOMKEY filtering).
fn is_live(e: &Entry, now_ms: u64) -> bool {
    !e.state.is_empty() && e.state.expire_at_ms().is_none_or(|at| at > now_ms)
}

// ---------------------------------------------------------------------------------------------
// DEL UNLINK EXISTS TYPE TOUCH

fn del(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let lazy = ctx.shard.config.lazyfree_lazy_user_del;
    delete_keys(ctx, argv, lazy)
}

/// UNLINK: DEL, with large values freed on the shard's lazyfree thread
/// (`Keyspace::unlink_key`).
fn unlink(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    delete_keys(ctx, argv, true)
}

fn delete_keys(ctx: &mut Ctx<'_>, argv: &[&[u8]], lazy: bool) -> Result<(), CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let mut n = 0;
    let mut freed = Vec::new();
    for key in argv.iter().skip(1) {
        let deleted = if lazy {
            ctx.shard.unlink_key(db, key, now, &mut freed)
        } else {
            ctx.shard.delete_key(db, key, now)
        };
        if deleted {
            ctx.shard.notify(notify::GENERIC, "del", db, key);
            n += 1;
        }
    }
    ctx.shard.lazyfree.free(freed);
    ctx.out.int(n);
    Ok(())
}

fn exists(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let mut n = 0;
    for key in argv.iter().skip(1) {
        if peek(ctx, db, key, |_| ()).is_some() {
            n += 1;
        }
    }
    ctx.out.int(n);
    Ok(())
}

fn type_cmd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let tag = peek(ctx, db, argv.get(1).copied().unwrap_or_default(), |e| {
        e.state.type_tag()
    })
    .flatten();
    ctx.out.simple(type_name(tag));
    Ok(())
}

fn touch(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let mut n = 0;
    for key in argv.iter().skip(1) {
        if ctx.shard.lookup_read(db, key, now).is_some() {
            n += 1;
        }
    }
    ctx.out.int(n);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// KEYS SCAN RANDOMKEY

fn keys(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let pattern = argv.get(1).copied().unwrap_or_default();
    let all = pattern == b"*";
    let now = ctx.now_ms;
    let db = ctx.db();
    let mut poll = crate::stop::Poll::new();
    let mut found: Vec<&[u8]> = Vec::new();
    if let Some(d) = ctx.shard.dbs.get(db) {
        for e in d.table.iter() {
            if poll.stop() {
                return Err(CmdError::ShuttingDown);
            }
            if is_live(e, now) && (all || crate::glob::matches(pattern, &e.key, false)) {
                found.push(&e.key);
            }
        }
    }
    ctx.out.array(found.len());
    for k in found {
        ctx.out.bulk(k);
    }
    Ok(())
}

/// SCAN cursor layout: bits 0..44 the bucket index in the table's combined space (see
/// `KeyTable`); bits 44..47 how many times the iteration restarted; bits 47..56 the low bits
/// of the table's layout generation when the cursor was issued. Bits 56..64 are left zero:
/// with several shards they name the shard the cursor walks (`route::SCAN_SHARD_SHIFT`).
const CURSOR_INDEX_BITS: u32 = 44;
const CURSOR_INDEX_MASK: u64 = (1 << CURSOR_INDEX_BITS) - 1;
const CURSOR_RESTART_SHIFT: u32 = 44;
const CURSOR_RESTART_MASK: u64 = 0x7;
const CURSOR_GENERATION_SHIFT: u32 = 47;
const CURSOR_GENERATION_MASK: u64 =
    (1 << (crate::route::SCAN_SHARD_SHIFT - CURSOR_GENERATION_SHIFT)) - 1;
/// Restarts allowed in one iteration; past it, the scan goes on about as far through the
/// table instead, so the iteration still ends under unbounded growth.
const SCAN_RESTARTS_MAX: u64 = 4;

/// The restarts a SCAN cursor has used (with several shards, an iteration moving to the next
/// shard keeps them: `start_with_restarts`).
pub fn cursor_restarts(cursor: u64) -> u64 {
    (cursor >> CURSOR_RESTART_SHIFT) & CURSOR_RESTART_MASK
}

/// A cursor at the start of a table that has already used `restarts` restarts.
pub fn start_with_restarts(restarts: u64) -> u64 {
    (restarts.min(CURSOR_RESTART_MASK)) << CURSOR_RESTART_SHIFT
}

/// Where a SCAN resumes in `table`: (bucket index, restarts so far).
fn cursor_resume(cursor: u64, table: &KeyTable) -> (usize, u64) {
    if cursor == 0 {
        return (0, 0);
    }
    let generation = (cursor >> CURSOR_GENERATION_SHIFT) & CURSOR_GENERATION_MASK;
    let restarts = (cursor >> CURSOR_RESTART_SHIFT) & CURSOR_RESTART_MASK;
    let idx = usize::try_from(cursor & CURSOR_INDEX_MASK).unwrap_or(usize::MAX);
    match table.scan_resume(generation, idx, CURSOR_GENERATION_MASK) {
        Ok(i) => (i, restarts),
        Err(_) if restarts < SCAN_RESTARTS_MAX => (0, restarts + 1),
        // Too many layout changes: go on about as far through the table (keys may be
        // missed), so that the iteration ends however fast the table grows.
        Err(about) => (about, restarts),
    }
}

fn cursor_make(idx: usize, restarts: u64, table: &KeyTable) -> u64 {
    ((table.generation() & CURSOR_GENERATION_MASK) << CURSOR_GENERATION_SHIFT)
        | (restarts << CURSOR_RESTART_SHIFT)
        | (idx as u64 & CURSOR_INDEX_MASK)
}

/// Entries of a rehash in progress each SCAN call moves first (bounded work per call).
const SCAN_REHASH_ENTRIES_MAX: usize = 4096;

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type].
///
/// The cursor is a bucket index into the database's `KeyTable` (low bits), tagged with the
/// table's layout generation and a restart counter (see `CURSOR_*`). One call visits buckets
/// from the index until it has `count` keys or has looked at `count * 10` buckets, then
/// returns the next cursor ("0" at the end of the table). Filters (MATCH, expired keys,
/// TYPE) apply after collection, as in Redis, so a call may return fewer than `count` keys,
/// even none, with a non-zero cursor.
///
/// Guarantees and their limits:
/// - A key present from start to end is returned at least once. Within one layout
///   generation each bucket is visited once and entries never move. Across the start of an
///   incremental rehash the cursor keeps its place (the old table comes first in the
///   combined space and entries only move to the main table, after it); across its end the
///   cursor keeps its place when it was in the main table, and restarts at bucket 0
///   otherwise (keys already returned come again).
/// - After `SCAN_RESTARTS_MAX` restarts (a table whose layout changes faster than the
///   client scans), the scan goes on about as far through the new layout instead, which
///   guarantees the iteration ends but may miss keys.
/// - A key added or removed during the iteration may or may not be returned; a key may be
///   returned several times (clients must deduplicate, as with Redis).
/// - An arbitrary cursor not issued by this table restarts or resumes somewhere valid.
fn scan(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let cursor = parse_cursor(argv.get(1).copied().unwrap_or_default())
        .ok_or_else(|| CmdError::Err("invalid cursor".to_string()))?;
    let ScanOptions {
        count,
        pattern,
        type_filter,
    } = scan_options(argv, 2, true)?;
    let db = ctx.db();
    let now = ctx.now_ms;
    // A rehash in progress makes SCAN see entries twice (in the old table, then in the new
    // one): each call first moves a bounded batch, as Redis's dict does on its operations, so
    // a small database has finished its rehash by the first call.
    ctx.shard.rehash_db(db, SCAN_REHASH_ENTRIES_MAX);
    let Some(d) = ctx.shard.dbs.get(db) else {
        return Err(CmdError::DbIndexOutOfRange);
    };
    let n_buckets = d.table.num_buckets();
    let (mut idx, restarts) = cursor_resume(cursor, &d.table);
    let mut collected: Vec<(SmallBytes, bool, Option<TypeTag>)> = Vec::new();
    let mut visits_left = count.saturating_mul(10);
    if !d.is_empty() {
        while idx < n_buckets && visits_left > 0 && (collected.len() as u64) < count {
            if let Some(e) = d.table.get_bucket(idx) {
                if !e.state.is_empty() {
                    let expired = e.state.expire_at_ms().is_some_and(|at| at <= now);
                    collected.push((e.key.clone(), expired, e.state.type_tag()));
                }
            }
            idx += 1;
            visits_left -= 1;
        }
    } else {
        idx = n_buckets;
    }
    let next = if idx >= n_buckets {
        0
    } else {
        cursor_make(idx, restarts, &d.table)
    };
    let mut keys: Vec<SmallBytes> = Vec::with_capacity(collected.len());
    for (key, expired, tag) in collected {
        if let Some(p) = pattern {
            if !crate::glob::matches(p, &key, false) {
                continue;
            }
        }
        if expired {
            let hash = ctx.shard.hash_key(&key);
            ctx.shard.expire_if_needed(db, hash, &key, now);
            continue;
        }
        if let Some(t) = type_filter {
            // Redis looks the key up (LOOKUP_NOTOUCH) to learn its type: a keyspace hit.
            ctx.shard.stats.keyspace_hits += 1;
            if !t.eq_ignore_ascii_case(type_name(tag).as_bytes()) {
                continue;
            }
        }
        keys.push(key);
    }
    ctx.out.array(2);
    ctx.out.bulk(next.to_string().as_bytes());
    ctx.out.array(keys.len());
    for k in &keys {
        ctx.out.bulk(k);
    }
    Ok(())
}

/// Random buckets probed before RANDOMKEY falls back to a walk of the table.
const RANDOMKEY_PROBES: usize = 64;

/// A RANDOMKEY candidate: true (and `found` set) when live; expired keys are noted.
fn random_candidate(
    e: &Entry,
    now_ms: u64,
    expired: &mut Vec<SmallBytes>,
    found: &mut Option<SmallBytes>,
) -> bool {
    if e.state.is_empty() {
        return false;
    }
    if e.state.expire_at_ms().is_some_and(|at| at <= now_ms) {
        expired.push(e.key.clone());
        return false;
    }
    *found = Some(e.key.clone());
    true
}

/// RANDOMKEY: probes random buckets (a hashbrown table is at least ~44% full after growth, so
/// a few probes usually hit); after `RANDOMKEY_PROBES` misses (a sparse table after many
/// deletions, or mostly expired keys) walks the table from a random bucket and returns the
/// first live key, which is not uniform. Expired keys met on the way are deleted, as Redis's
/// `dbRandomKey` does.
fn randomkey(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    use rand::RngExt as _;
    let db = ctx.db();
    let now = ctx.now_ms;
    let mut expired: Vec<SmallBytes> = Vec::new();
    let mut found: Option<SmallBytes> = None;
    if let Some(d) = ctx.shard.dbs.get(db) {
        let n = d.table.num_buckets();
        if !d.is_empty() && n > 0 {
            let mut rng = rand::rng();
            for _ in 0..RANDOMKEY_PROBES {
                if let Some(e) = d.table.get_bucket(rng.random_range(0..n)) {
                    if random_candidate(e, now, &mut expired, &mut found) {
                        break;
                    }
                }
            }
            if found.is_none() {
                let start = rng.random_range(0..n);
                for k in 0..n {
                    if let Some(e) = d.table.get_bucket((start + k) % n) {
                        if random_candidate(e, now, &mut expired, &mut found) {
                            break;
                        }
                    }
                }
            }
        }
    }
    expired.sort();
    expired.dedup();
    for k in &expired {
        let hash = ctx.shard.hash_key(k);
        ctx.shard.expire_if_needed(db, hash, k, now);
    }
    match found {
        Some(k) => ctx.out.bulk(&k),
        None => ctx.out.null(),
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// RENAME RENAMENX COPY

fn rename(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    rename_generic(ctx, argv, false)
}

fn renamenx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    rename_generic(ctx, argv, true)
}

fn rename_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], nx: bool) -> Result<(), CmdError> {
    let src = argv.get(1).copied().unwrap_or_default();
    let dst = argv.get(2).copied().unwrap_or_default();
    let db = ctx.db();
    let now = ctx.now_ms;
    let Some((value, at_ms, str_enc)) = ctx
        .shard
        .lookup_quiet(db, src, now)
        .and_then(|e| Some((snapshot(&e.state)?, e.state.expire_at_ms(), e.str_enc)))
    else {
        return Err(CmdError::NoSuchKey);
    };
    if src == dst {
        if nx {
            ctx.out.int(0);
        } else {
            ctx.out.ok();
        }
        return Ok(());
    }
    if nx && ctx.shard.lookup_quiet(db, dst, now).is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    ctx.shard.delete_key(db, src, now);
    write_snapshot(ctx, db, dst, &value, at_ms);
    // Redis moves the object itself, encoding and all.
    ctx.shard.set_str_encoding(db, dst, str_enc);
    ctx.shard.notify(notify::GENERIC, "rename_from", db, src);
    ctx.shard.notify(notify::GENERIC, "rename_to", db, dst);
    if nx {
        ctx.out.int(1);
    } else {
        ctx.out.ok();
    }
    Ok(())
}

/// COPY source destination [DB destination-db] [REPLACE].
fn copy(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let src = argv.get(1).copied().unwrap_or_default();
    let dst = argv.get(2).copied().unwrap_or_default();
    let src_db = ctx.db();
    let mut dst_db = src_db;
    let mut replace = false;
    let mut j = 3;
    while let Some(opt) = argv.get(j) {
        if eq_ic(opt, "replace") {
            replace = true;
        } else if eq_ic(opt, "db") && j + 1 < argv.len() {
            let v = argv.get(j + 1).copied().unwrap_or_default();
            let id = super::db::db_index(v, None)?;
            match usize::try_from(id) {
                Ok(id) if ctx.shard.db_ok(id) => dst_db = id,
                _ => return Err(CmdError::DbIndexOutOfRange),
            }
            j += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    if src_db == dst_db && src == dst {
        return Err(CmdError::Err(
            "source and destination objects are the same".to_string(),
        ));
    }
    let now = ctx.now_ms;
    let Some((value, at_ms)) = ctx
        .shard
        .lookup_read(src_db, src, now)
        .and_then(|st| Some((snapshot(st)?, st.expire_at_ms())))
    else {
        ctx.out.int(0);
        return Ok(());
    };
    let str_enc = ctx
        .shard
        .lookup_quiet(src_db, src, now)
        .map_or(StrEnc::Contents, |e| e.str_enc);
    if !replace && ctx.shard.lookup_quiet(dst_db, dst, now).is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    write_snapshot(ctx, dst_db, dst, &value, at_ms);
    // Redis's `dupStringObject` keeps the encoding (raw, embstr or int).
    ctx.shard.set_str_encoding(dst_db, dst, str_enc);
    ctx.shard.notify(notify::GENERIC, "copy_to", dst_db, dst);
    ctx.out.int(1);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// EXPIRE PEXPIRE EXPIREAT PEXPIREAT PERSIST

#[derive(Clone, Copy, Default)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

/// `parseExtendedExpireArgumentsOrReply`.
fn parse_expire_flags(argv: &[&[u8]]) -> Result<ExpireFlags, CmdError> {
    let mut f = ExpireFlags::default();
    for opt in argv.iter().skip(3) {
        if eq_ic(opt, "nx") {
            f.nx = true;
        } else if eq_ic(opt, "xx") {
            f.xx = true;
        } else if eq_ic(opt, "gt") {
            f.gt = true;
        } else if eq_ic(opt, "lt") {
            f.lt = true;
        } else {
            let shown = match opt.iter().position(|&c| c == 0) {
                Some(i) => opt.get(..i).unwrap_or_default(),
                None => opt,
            };
            return Err(CmdError::Err(format!(
                "Unsupported option {}",
                String::from_utf8_lossy(shown)
            )));
        }
    }
    if f.nx && (f.xx || f.gt || f.lt) {
        return Err(CmdError::Err(
            "NX and XX, GT or LT options at the same time are not compatible".to_string(),
        ));
    }
    if f.gt && f.lt {
        return Err(CmdError::Err(
            "GT and LT options at the same time are not compatible".to_string(),
        ));
    }
    Ok(f)
}

fn expire(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let base = ctx.now_ms as i64;
    expire_generic(ctx, argv, base, true)
}

fn pexpire(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let base = ctx.now_ms as i64;
    expire_generic(ctx, argv, base, false)
}

fn expireat(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    expire_generic(ctx, argv, 0, true)
}

fn pexpireat(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    expire_generic(ctx, argv, 0, false)
}

/// The deadline `when` (in seconds when `seconds`) plus `base_ms`, or the overflow error.
fn expire_deadline(name: &str, when: i64, base_ms: i64, seconds: bool) -> Result<i64, CmdError> {
    let err = || CmdError::InvalidExpire(name.to_string());
    let when = if seconds {
        if !(i64::MIN / 1000..=i64::MAX / 1000).contains(&when) {
            return Err(err());
        }
        when * 1000
    } else {
        when
    };
    if when > i64::MAX - base_ms {
        return Err(err());
    }
    Ok(when + base_ms)
}

/// `expireGenericCommand` of Redis 7.0.
fn expire_generic(
    ctx: &mut Ctx<'_>,
    argv: &[&[u8]],
    base_ms: i64,
    seconds: bool,
) -> Result<(), CmdError> {
    let key = argv.get(1).copied().unwrap_or_default();
    let flags = parse_expire_flags(argv)?;
    let when = int_arg(argv.get(2).copied().unwrap_or_default())?;
    let when = expire_deadline(ctx.spec.meta.name, when, base_ms, seconds)?;
    let db = ctx.db();
    let now = ctx.now_ms;
    let Some(current) = ctx
        .shard
        .lookup_quiet(db, key, now)
        .map(|e| e.state.expire_at_ms())
    else {
        ctx.out.int(0);
        return Ok(());
    };
    // -1 stands for "no TTL", as in Redis (an infinite TTL for GT and LT).
    let current = current.map_or(-1, |at| i64::try_from(at).unwrap_or(i64::MAX));
    let refused = (flags.nx && current != -1)
        || (flags.xx && current == -1)
        || (flags.gt && (when <= current || current == -1))
        || (flags.lt && current != -1 && when >= current);
    if refused {
        ctx.out.int(0);
        return Ok(());
    }
    if when <= now as i64 {
        // Already expired: deleted at once, as an explicit DEL.
        ctx.shard.delete_key(db, key, now);
        ctx.shard.notify(notify::GENERIC, "del", db, key);
    } else {
        let at = when as u64;
        ctx.shard.write_key(db, key, now, |st| {
            st.expire_effect::<&[u8]>(Expire::AtMs(at))
        });
        ctx.shard.notify(notify::GENERIC, "expire", db, key);
    }
    ctx.out.int(1);
    Ok(())
}

fn persist(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = argv.get(1).copied().unwrap_or_default();
    let db = ctx.db();
    let now = ctx.now_ms;
    let has_ttl = ctx
        .shard
        .lookup_quiet(db, key, now)
        .is_some_and(|e| e.state.expire_at_ms().is_some());
    if has_ttl {
        ctx.shard.write_key(db, key, now, |st| {
            st.expire_effect::<&[u8]>(Expire::Persist)
        });
        ctx.shard.notify(notify::GENERIC, "persist", db, key);
    }
    ctx.out.int(i64::from(has_ttl));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// TTL PTTL EXPIRETIME PEXPIRETIME

fn ttl(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    ttl_generic(ctx, argv, false, false)
}

fn pttl(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    ttl_generic(ctx, argv, true, false)
}

fn expiretime(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    ttl_generic(ctx, argv, false, true)
}

fn pexpiretime(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    ttl_generic(ctx, argv, true, true)
}

/// `ttlGenericCommand`: -2 when the key does not exist, -1 when it has no TTL; seconds are
/// rounded to the nearest ((ms + 500) / 1000).
fn ttl_generic(
    ctx: &mut Ctx<'_>,
    argv: &[&[u8]],
    ms: bool,
    absolute: bool,
) -> Result<(), CmdError> {
    let key = argv.get(1).copied().unwrap_or_default();
    let db = ctx.db();
    let now = ctx.now_ms as i64;
    let Some(at) = peek(ctx, db, key, |e| e.state.expire_at_ms()) else {
        ctx.out.int(-2);
        return Ok(());
    };
    let Some(at) = at else {
        ctx.out.int(-1);
        return Ok(());
    };
    let at = i64::try_from(at).unwrap_or(i64::MAX);
    let t = if absolute { at } else { at.saturating_sub(now) }.max(0);
    ctx.out
        .int(if ms { t } else { t.saturating_add(500) / 1000 });
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// OBJECT

/// Redis's `OBJ_SHARED_INTEGERS`: integers 0..10000 are shared objects.
const SHARED_INTEGERS: i64 = 10_000;
/// `OBJ_ENCODING_EMBSTR_SIZE_LIMIT`.
const EMBSTR_SIZE_LIMIT: usize = 44;
/// `LRU_CLOCK_MAX`: the LRU clock is 24 bits.
const LRU_CLOCK_MAX: u32 = 0x00ff_ffff;

/// The encoding Redis 7.0 gives the same string after `tryObjectEncoding` (SET): "int" for a
/// string that `string2l` parses (at most 20 bytes), "embstr" up to 44 bytes, else "raw".
/// Counter results (INCR...) are "int"; INCRBYFLOAT results are "embstr".
fn str_encoding(v: &StrView<'_>) -> (&'static str, Option<i64>) {
    match v {
        StrView::Int(n) => ("int", Some(*n)),
        StrView::Float(d) => (
            if d.format_redis().len() <= EMBSTR_SIZE_LIMIT {
                "embstr"
            } else {
                "raw"
            },
            None,
        ),
        StrView::Bytes(b) => match parse_i64(b) {
            Some(n) => ("int", Some(n)),
            None if b.len() <= EMBSTR_SIZE_LIMIT => ("embstr", None),
            None => ("raw", None),
        },
    }
}

/// Redis 7.0's set encodings: "intset" while every member the set held was an integer and it
/// held at most `set-max-intset-entries`, else "hashtable" (7.0 has no listpack sets; Redis
/// converts one way only: `OrSet::fits_intset`).
fn set_encoding(state: &KeyState, intset_max: u64) -> &'static str {
    match state.set() {
        Some(s) if s.fits_intset(intset_max) => "intset",
        _ => "hashtable",
    }
}

fn object_key<'a>(argv: &[&'a [u8]]) -> &'a [u8] {
    argv.get(2).copied().unwrap_or_default()
}

/// The thresholds OBJECT ENCODING reads (copied out of the configuration before the lookup).
#[derive(Debug, Clone, Copy)]
pub(crate) struct EncodingLimits {
    hash: crate::config::ListpackLimits,
    zset: crate::config::ListpackLimits,
    intset_max: u64,
}

impl EncodingLimits {
    pub(crate) fn of(c: &crate::config::Config) -> EncodingLimits {
        EncodingLimits {
            hash: c.hash_listpack(),
            zset: c.zset_listpack(),
            intset_max: c.set_max_intset_entries,
        }
    }
}

/// The encoding Redis 7.0 would give a value of the same contents under the current
/// thresholds (`hash-max-listpack-*`, `zset-max-listpack-*`, `set-max-intset-entries`).
/// Redis converts a value only one way: a hash, a set or a sorted set keeps the larger
/// encoding once it held more fields or members or longer ones, or (a set) a member that is
/// not an integer (`HashCrdt::fits_listpack`, `OrSet::fits_intset`,
/// `ZSetCrdt::fits_listpack`; docs/compatibility.md).
pub(crate) fn encoding_name(e: &Entry, limits: EncodingLimits) -> &'static str {
    match e.state.type_tag() {
        Some(TypeTag::Set) => set_encoding(&e.state, limits.intset_max),
        // Redis 7.0 lists are always a quicklist (of listpacks).
        Some(TypeTag::List) => "quicklist",
        Some(TypeTag::Stream) => "stream",
        Some(TypeTag::ZSet) => e
            .state
            .zset()
            .map_or("listpack", |z| super::zset::encoding(z, limits.zset)),
        Some(TypeTag::Hash) => match e.state.hash() {
            Some(h) if h.fits_listpack(limits.hash.entries_max, limits.hash.value_max) => {
                "listpack"
            }
            _ => "hashtable",
        },
        _ if e.str_enc == StrEnc::Raw => "raw",
        // HyperLogLog: "raw" once PFADD/PFMERGE/PFCOUNT unshared it (cmd/hll.rs marks it);
        // a value stored by SET keeps SET's encoding (embstr up to 44 bytes).
        Some(TypeTag::Hll) => e
            .state
            .hll()
            .map_or("raw", |h| str_encoding(&StrView::Bytes(h.bytes())).0),
        _ => entry_str_encoding(e).map_or("raw", |(enc, _)| enc),
    }
}

/// A string entry's encoding and, for "int", its value: by the command that wrote it where
/// that decides (`StrEnc`: APPEND's "raw", INCR's "int", INCRBYFLOAT's text), else by its
/// contents. None: not a string.
fn entry_str_encoding(e: &Entry) -> Option<(&'static str, Option<i64>)> {
    let view = e.state.view_str()?;
    Some(match e.str_enc {
        StrEnc::Raw => ("raw", None),
        StrEnc::Contents => str_encoding(&view),
        // A remote write may have left something else since: then by contents.
        StrEnc::Int => match super::string::view_i64(view) {
            Some(n) => ("int", Some(n)),
            None => str_encoding(&view),
        },
        StrEnc::Text if super::string::view_len(view) <= EMBSTR_SIZE_LIMIT => ("embstr", None),
        StrEnc::Text => ("raw", None),
    })
}

/// OBJECT ENCODING key (`encoding_name`).
fn object_encoding(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let limits = EncodingLimits::of(&ctx.shard.config);
    let enc = peek_unnotified(ctx, db, object_key(argv), |e| encoding_name(e, limits));
    match enc {
        Some(enc) => ctx.out.bulk(enc.as_bytes()),
        None => ctx.out.null(),
    }
    Ok(())
}

fn object_refcount(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let rc = peek_unnotified(ctx, db, object_key(argv), |e| match entry_str_encoding(e) {
        Some(("int", Some(n))) if (0..SHARED_INTEGERS).contains(&n) => i64::from(i32::MAX),
        _ => 1,
    });
    match rc {
        Some(rc) => ctx.out.int(rc),
        None => ctx.out.null(),
    }
    Ok(())
}

/// Seconds since the key's last access on the 24-bit LRU clock (`estimateObjectIdleTime`).
pub(crate) fn idle_seconds(lru_s: u32, now_ms: u64) -> i64 {
    let now = lru_clock(now_ms);
    let idle = if now >= lru_s {
        now - lru_s
    } else {
        now + (LRU_CLOCK_MAX - lru_s)
    };
    i64::from(idle)
}

fn object_idletime(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let Some(lru) = peek_unnotified(ctx, db, object_key(argv), |e| e.lru_s) else {
        ctx.out.null();
        return Ok(());
    };
    if ctx.shard.lfu {
        return Err(CmdError::Err(
            "An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."
                .to_string(),
        ));
    }
    ctx.out.int(idle_seconds(lru, now));
    Ok(())
}

/// OBJECT FREQ: the key's LFU counter, decayed to now (`LFUDecrAndReturn`), under an LFU
/// `maxmemory-policy`; Redis's error otherwise (after the key lookup, as Redis does).
fn object_freq(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let Some(field) = peek_unnotified(ctx, db, object_key(argv), |e| e.lru_s) else {
        ctx.out.null();
        return Ok(());
    };
    if !ctx.shard.lfu {
        return Err(CmdError::Err(
            "An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust."
                .to_string(),
        ));
    }
    let minutes = crate::keyspace::lfu_minutes(ctx.now_ms);
    let freq = crate::keyspace::lfu_decayed(field, minutes, ctx.shard.config.lfu_decay_time);
    ctx.out.int(i64::from(freq));
    Ok(())
}

const OBJECT_HELP: &[&str] = &[
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
];

fn object_help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    ctx.out.array(OBJECT_HELP.len());
    for line in OBJECT_HELP {
        ctx.out.simple(line);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{Client, ClientShared};
    use crate::config::Config;
    use crate::resp::reply::Reply;
    use crate::shard::Shard;
    use std::rc::Rc;

    const NOW: u64 = 1_700_000_000_000;

    fn setup() -> (Shard, Client) {
        let shard = Shard::new(0, Config::default(), NOW);
        let addr: std::net::SocketAddr = "127.0.0.1:1".parse().unwrap();
        let client = Client::new(Rc::new(ClientShared::new(1, addr, addr, NOW)));
        (shard, client)
    }

    fn run(shard: &mut Shard, client: &mut Client, argv: &[&str]) -> String {
        let mut out = Reply::new();
        let argv: Vec<&[u8]> = argv.iter().map(|a| a.as_bytes()).collect();
        crate::cmd::testing::execute(shard, client, &mut out, &argv, NOW);
        String::from_utf8_lossy(&out.buf).into_owned()
    }

    fn add_set(shard: &mut Shard, key: &str, members: &[&str]) {
        for m in members {
            shard.write_key(0, key.as_bytes(), NOW, |_| Effect::SetAdd {
                member: m.as_bytes(),
            });
        }
    }

    fn members(shard: &mut Shard, db: usize, key: &str) -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = shard
            .lookup_quiet(db, key.as_bytes(), NOW)
            .and_then(|e| {
                e.state
                    .set()
                    .map(|s| s.members().map(<[u8]>::to_vec).collect())
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    #[test]
    fn set_values_rename_copy_type_encoding() {
        let (mut shard, mut client) = setup();
        add_set(&mut shard, "s", &["1", "2", "3"]);
        add_set(&mut shard, "t", &["a", "b"]);
        assert_eq!(run(&mut shard, &mut client, &["TYPE", "s"]), "+set\r\n");
        assert_eq!(
            run(&mut shard, &mut client, &["OBJECT", "ENCODING", "s"]),
            "$6\r\nintset\r\n"
        );
        assert_eq!(
            run(&mut shard, &mut client, &["OBJECT", "ENCODING", "t"]),
            "$9\r\nhashtable\r\n"
        );
        assert_eq!(
            run(&mut shard, &mut client, &["PEXPIRE", "s", "100000"]),
            ":1\r\n"
        );
        // RENAME onto another set replaces it, TTL included.
        assert_eq!(
            run(&mut shard, &mut client, &["RENAME", "s", "t"]),
            "+OK\r\n"
        );
        assert_eq!(
            members(&mut shard, 0, "t"),
            [b"1".to_vec(), b"2".to_vec(), b"3".to_vec()]
        );
        assert_eq!(run(&mut shard, &mut client, &["EXISTS", "s"]), ":0\r\n");
        assert_eq!(run(&mut shard, &mut client, &["PTTL", "t"]), ":100000\r\n");
        // COPY to another db; a string destination is replaced by the set.
        assert_eq!(
            run(&mut shard, &mut client, &["COPY", "t", "u", "DB", "2"]),
            ":1\r\n"
        );
        assert_eq!(members(&mut shard, 2, "u").len(), 3);
        assert_eq!(
            run(&mut shard, &mut client, &["SET", "str", "x"]),
            "+OK\r\n"
        );
        assert_eq!(
            run(&mut shard, &mut client, &["COPY", "t", "str", "REPLACE"]),
            ":1\r\n"
        );
        assert_eq!(members(&mut shard, 0, "str").len(), 3);
        assert_eq!(run(&mut shard, &mut client, &["TYPE", "str"]), "+set\r\n");
        // A string renamed onto a set replaces it.
        assert_eq!(
            run(&mut shard, &mut client, &["SET", "plain", "v"]),
            "+OK\r\n"
        );
        assert_eq!(
            run(&mut shard, &mut client, &["RENAME", "plain", "str"]),
            "+OK\r\n"
        );
        assert_eq!(
            run(&mut shard, &mut client, &["TYPE", "str"]),
            "+string\r\n"
        );
        assert_eq!(run(&mut shard, &mut client, &["GET", "str"]), "$1\r\nv\r\n");
        assert_eq!(run(&mut shard, &mut client, &["TTL", "str"]), ":-1\r\n");
        // SCAN TYPE set.
        let r = run(
            &mut shard,
            &mut client,
            &["SCAN", "0", "TYPE", "set", "COUNT", "100"],
        );
        assert_eq!(r, "*2\r\n$1\r\n0\r\n*1\r\n$1\r\nt\r\n");
    }

    #[test]
    fn cursor_like_strtoul() {
        assert_eq!(parse_cursor(b"0"), Some(0));
        assert_eq!(parse_cursor(b""), Some(0));
        assert_eq!(parse_cursor(b"+5"), Some(5));
        assert_eq!(parse_cursor(b"-0"), Some(0));
        assert_eq!(parse_cursor(b"-1"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"007"), Some(7));
        assert_eq!(parse_cursor(b"18446744073709551615"), Some(u64::MAX));
        for bad in [
            &b"18446744073709551616"[..],
            b" 0",
            b"0x",
            b"abc",
            b"+",
            b"-",
            b"1 ",
        ] {
            assert_eq!(
                parse_cursor(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    /// Active expiry reads only buckets marked as holding a TTL, and finds every key given a
    /// TTL while the table grew (rehashes moved the marks with the entries).
    #[test]
    fn active_expiry_finds_every_ttl_through_growth() {
        let (mut shard, mut client) = setup();
        for i in 0..4_000 {
            let k = format!("k{i}");
            run(&mut shard, &mut client, &["SET", &k, "v"]);
            if i % 3 == 0 {
                assert_eq!(
                    run(&mut shard, &mut client, &["PEXPIRE", &k, "50"]),
                    ":1\r\n"
                );
            }
        }
        assert_eq!(shard.dbs[0].table.unmarked_entry(), None);
        assert_eq!(shard.dbs[0].expires, 1_334);
        // Nothing due yet: no key expires, every mark stays.
        let n = shard.dbs[0].table.num_buckets();
        assert_eq!(shard.active_expire_db(0, NOW, n), 0);
        let marked = |shard: &Shard| {
            let t = &shard.dbs[0].table;
            (0..t.num_buckets())
                .filter(|&b| t.is_marked(b, Mark::Ttl))
                .count()
        };
        assert!(marked(&shard) >= 1_334);
        let mut expired = 0;
        for _ in 0..8 {
            let n = shard.dbs[0].table.num_buckets();
            expired += shard.active_expire_db(0, NOW + 100, n / 4 + 1);
        }
        assert_eq!(expired, 1_334);
        assert_eq!(shard.dbs[0].expires, 0);
        assert_eq!(shard.dbs[0].len(), 2_666);
        assert_eq!(marked(&shard), 0, "a full pass clears every stale mark");
    }

    /// `avg_ttl` follows Redis's estimate: the first cycle's mean whole, then each cycle's
    /// mean weighted 2%; 0 again once no key has a TTL, and after FLUSHDB.
    #[test]
    fn avg_ttl_is_a_running_estimate_of_the_ttls_expiry_reads() {
        let (mut shard, mut client) = setup();
        assert_eq!(shard.dbs[0].avg_ttl_ms, 0);
        for (k, ttl) in [("a", "10000"), ("b", "30000"), ("c", "50000")] {
            run(&mut shard, &mut client, &["SET", k, "v", "PX", ttl]);
        }
        run(&mut shard, &mut client, &["SET", "plain", "v"]);
        let n = shard.dbs[0].table.num_buckets();
        shard.active_expire_db(0, NOW, n);
        // Mean 30000: (30000 / 50) * 49 + 30000 / 50.
        assert_eq!(shard.dbs[0].avg_ttl_ms, 30_000);
        // 5 s later the mean is 25000: the estimate moves 2% of the way.
        shard.active_expire_db(0, NOW + 5_000, n);
        assert_eq!(shard.dbs[0].avg_ttl_ms, 30_000 / 50 * 49 + 25_000 / 50);
        let info = run(&mut shard, &mut client, &["INFO", "keyspace"]);
        assert!(
            info.contains("db0:keys=4,expires=3,avg_ttl=29900\r\n"),
            "{info}"
        );
        // Once the TTL keys are gone, the estimate is 0 again.
        run(&mut shard, &mut client, &["PERSIST", "a"]);
        run(&mut shard, &mut client, &["DEL", "b", "c"]);
        shard.active_expire_db(0, NOW + 10_000, n);
        assert_eq!(shard.dbs[0].avg_ttl_ms, 0);
        run(&mut shard, &mut client, &["PEXPIRE", "a", "1000"]);
        shard.active_expire_db(0, NOW, n);
        assert_eq!(shard.dbs[0].avg_ttl_ms, 1_000);
        run(&mut shard, &mut client, &["FLUSHDB"]);
        assert_eq!(shard.dbs[0].avg_ttl_ms, 0);
    }

    #[test]
    fn cursor_keeps_its_place_then_restarts_then_goes_on() {
        let (mut shard, mut client) = setup();
        let mut i = 0;
        let mut set = |shard: &mut Shard, i: &mut u64| {
            let k = format!("k{i}");
            *i += 1;
            assert_eq!(run(shard, &mut client, &["SET", &k, "v"]), "+OK\r\n");
        };
        for _ in 0..100 {
            set(&mut shard, &mut i);
        }
        let c = cursor_make(5, 0, &shard.dbs[0].table);
        assert_eq!(cursor_resume(c, &shard.dbs[0].table), (5, 0));
        assert_eq!(cursor_resume(0, &shard.dbs[0].table), (0, 0));
        // A rehash starts: the cursor keeps its place (its table comes first).
        while !shard.dbs[0].table.is_rehashing() {
            set(&mut shard, &mut i);
        }
        assert_eq!(cursor_resume(c, &shard.dbs[0].table), (5, 0));
        // ... and ends: a cursor in the old table restarts, counting the restart.
        let c_old = cursor_make(5, 0, &shard.dbs[0].table);
        let old_buckets = shard.dbs[0].table.num_buckets() / 3;
        let c_main = cursor_make(old_buckets + 7, 0, &shard.dbs[0].table);
        shard.rehash_cycle(std::time::Duration::from_secs(5));
        assert!(!shard.dbs[0].table.is_rehashing());
        assert_eq!(cursor_resume(c_old, &shard.dbs[0].table), (0, 1));
        assert_eq!(cursor_resume(c_main, &shard.dbs[0].table), (7, 0));
        // Past the restarts allowed, it goes on about as far through the new table.
        let c = cursor_make(5, SCAN_RESTARTS_MAX, &shard.dbs[0].table);
        while !shard.dbs[0].table.is_rehashing() {
            set(&mut shard, &mut i);
        }
        shard.rehash_cycle(std::time::Duration::from_secs(5));
        while !shard.dbs[0].table.is_rehashing() {
            set(&mut shard, &mut i);
        }
        let (idx, restarts) = cursor_resume(c, &shard.dbs[0].table);
        assert_eq!(restarts, SCAN_RESTARTS_MAX);
        assert!(idx <= shard.dbs[0].table.num_buckets());
        // A foreign cursor resumes somewhere valid.
        let n = shard.dbs[0].table.num_buckets();
        assert!(cursor_resume(u64::MAX, &shard.dbs[0].table).0 <= n);
        assert!(cursor_resume(12345, &shard.dbs[0].table).0 <= n);
    }

    #[test]
    fn expire_overflow() {
        assert!(expire_deadline("expire", i64::MAX / 1000 + 1, 0, true).is_err());
        assert!(expire_deadline("expire", i64::MIN / 1000 - 1, 0, true).is_err());
        assert!(expire_deadline("pexpire", i64::MAX, 1, false).is_err());
        assert_eq!(expire_deadline("expire", 10, 5, true), Ok(10_005));
        assert_eq!(expire_deadline("pexpireat", -5, 0, false), Ok(-5));
        let e = expire_deadline("pexpire", i64::MAX, 1, false)
            .err()
            .map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("ERR invalid expire time in 'pexpire' command")
        );
    }

    #[test]
    fn encodings_like_redis() {
        assert_eq!(str_encoding(&StrView::Bytes(b"123")).0, "int");
        assert_eq!(str_encoding(&StrView::Bytes(b"-5")).0, "int");
        assert_eq!(str_encoding(&StrView::Bytes(b"01")).0, "embstr");
        assert_eq!(
            str_encoding(&StrView::Bytes(b"12345678901234567890")).0,
            "embstr"
        );
        assert_eq!(str_encoding(&StrView::Bytes(&[b'a'; 44])).0, "embstr");
        assert_eq!(str_encoding(&StrView::Bytes(&[b'a'; 45])).0, "raw");
        assert_eq!(str_encoding(&StrView::Int(7)).0, "int");
    }

    #[test]
    fn idle_wraps_like_redis() {
        assert_eq!(idle_seconds(lru_clock(10_000), 15_000), 5);
        assert_eq!(idle_seconds(LRU_CLOCK_MAX - 1, 1000), 2);
    }
}

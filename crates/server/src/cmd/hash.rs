//! Hash commands: HSET HSETNX HMSET HGET HMGET HGETALL HDEL HEXISTS HLEN HKEYS HVALS HSTRLEN
//! HINCRBY HINCRBYFLOAT HRANDFIELD HSCAN.
//!
//! Semantics, reply shapes and error texts follow Redis 7.0 (`t_hash.c`). Every write is one
//! CRDT op per field (`HashOp`), built from the field's observed stamps:
//! - HSET/HMSET/HSETNX: `Set` (removes the field's observed writes and increments);
//! - HINCRBY/HINCRBYFLOAT: `Incr`, so concurrent increments add up (a value the CRDT cannot
//!   read as the same number, such as a hex float, is assigned with `Set` instead);
//! - HDEL: `Del` of what was observed of the field, or `Remove` of the key for its last field
//!   (the key disappears with its TTL, as in Redis).

use meridian_crdt::{Dec, Delta, Effect, HashCrdt, HashOp, KeyState, StrView, TypeTag};

use super::args::{
    LongDouble, ScanOptions, eq_ic, int_arg, parse_cursor, parse_i64, parse_long_double,
    scan_options,
};
use super::{Ctx, Handler};
use crate::error::CmdError;
use crate::notify;
use crate::resp::reply::Reply;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("hset", hset),
    ("hsetnx", hsetnx),
    ("hmset", hmset),
    ("hget", hget),
    ("hmget", hmget),
    ("hgetall", hgetall),
    ("hdel", hdel),
    ("hexists", hexists),
    ("hlen", hlen),
    ("hkeys", hkeys),
    ("hvals", hvals),
    ("hstrlen", hstrlen),
    ("hincrby", hincrby),
    ("hincrbyfloat", hincrbyfloat),
    ("hrandfield", hrandfield),
    ("hscan", hscan),
];

fn arg<'a>(argv: &[&'a [u8]], i: usize) -> &'a [u8] {
    argv.get(i).copied().unwrap_or_default()
}

/// The hash a key holds: `None` when the key does not exist, WRONGTYPE for another type.
fn as_hash(state: Option<&KeyState>) -> Result<Option<&HashCrdt>, CmdError> {
    match state {
        None => Ok(None),
        Some(s) if s.type_tag() == Some(TypeTag::Hash) => Ok(s.hash()),
        Some(s) if s.is_empty() => Ok(None),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Looks the key up for writing (no statistics): its hash, or WRONGTYPE.
fn write_lookup<'a>(ctx: &'a mut Ctx<'_>, key: &[u8]) -> Result<Option<&'a HashCrdt>, CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    as_hash(ctx.shard.lookup_quiet(db, key, now).map(|e| &e.state))
}

/// Looks the key up for reading (keyspace hits/misses, LRU).
fn read_lookup<'a>(ctx: &'a mut Ctx<'_>, key: &[u8]) -> Result<Option<&'a HashCrdt>, CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    as_hash(ctx.shard.lookup_read(db, key, now))
}

fn reply_view(out: &mut Reply, v: StrView<'_>) {
    match v {
        StrView::Bytes(b) => out.bulk(b),
        StrView::Int(n) => out.bulk_int(n),
        StrView::Float(d) => out.bulk(d.format_redis().as_bytes()),
    }
}

/// Whether `v` shows exactly the bytes `text`.
fn view_is(v: StrView<'_>, text: &[u8]) -> bool {
    match v {
        StrView::Bytes(b) => b == text,
        StrView::Int(n) => itoa::Buffer::new().format(n).as_bytes() == text,
        StrView::Float(d) => d.format_redis().as_bytes() == text,
    }
}

fn view_len(v: StrView<'_>) -> usize {
    match v {
        StrView::Bytes(b) => b.len(),
        StrView::Int(n) => itoa::Buffer::new().format(n).len(),
        StrView::Float(d) => d.format_redis().len(),
    }
}

/// Writes `value` to `field` of `key`.
fn set_field(ctx: &mut Ctx<'_>, key: &[u8], field: &[u8], value: &[u8]) {
    let db = ctx.db();
    ctx.shard.write_key(db, key, ctx.now_ms, |state| {
        let observed = state
            .hash()
            .map(|h| h.field_observed(field))
            .unwrap_or_default();
        Effect::Hash(HashOp::Set {
            field,
            value,
            observed,
        })
    });
}

fn incr_field(ctx: &mut Ctx<'_>, key: &[u8], field: &[u8], delta: Delta) {
    let db = ctx.db();
    ctx.shard.write_key(db, key, ctx.now_ms, |_| {
        Effect::Hash(HashOp::Incr { field, delta })
    });
}

// ---------------------------------------------------------------------------------------------
// Writes
// ---------------------------------------------------------------------------------------------

/// HSET and HMSET: returns the number of fields created.
fn hset_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], name: &str) -> Result<i64, CmdError> {
    if argv.len() % 2 == 1 {
        return Err(CmdError::WrongArity(name.to_string()));
    }
    let key = arg(argv, 1);
    let h = write_lookup(ctx, key)?;
    let mut created = 0;
    let pairs = argv.get(2..).unwrap_or_default();
    // Fields repeated in one command count once, as in Redis.
    let mut seen: Vec<&[u8]> = Vec::new();
    for p in pairs.chunks_exact(2) {
        let f = arg(p, 0);
        if !h.is_some_and(|h| h.contains(f)) && !seen.contains(&f) {
            created += 1;
            seen.push(f);
        }
    }
    for p in pairs.chunks_exact(2) {
        set_field(ctx, key, arg(p, 0), arg(p, 1));
    }
    ctx.notify(notify::HASH, "hset", key);
    Ok(created)
}

fn hset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let n = hset_generic(ctx, argv, "hset")?;
    ctx.out.int(n);
    Ok(())
}

fn hmset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    hset_generic(ctx, argv, "hmset")?;
    ctx.out.ok();
    Ok(())
}

fn hsetnx(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let (key, field) = (arg(argv, 1), arg(argv, 2));
    if write_lookup(ctx, key)?.is_some_and(|h| h.contains(field)) {
        ctx.out.int(0);
        return Ok(());
    }
    set_field(ctx, key, field, arg(argv, 3));
    ctx.notify(notify::HASH, "hset", key);
    ctx.out.int(1);
    Ok(())
}

fn hdel(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let db = ctx.db();
    let now = ctx.now_ms;
    if write_lookup(ctx, key)?.is_none() {
        ctx.out.int(0);
        return Ok(());
    }
    let mut deleted = 0;
    for &field in argv.get(2..).unwrap_or_default() {
        let (present, last) = match write_lookup(ctx, key)? {
            Some(h) => (h.contains(field), h.len() == 1),
            None => break,
        };
        if !present {
            continue;
        }
        deleted += 1;
        ctx.shard.write_key(db, key, now, |state| {
            if last {
                state.remove_effect()
            } else {
                let observed = state
                    .hash()
                    .map(|h| h.field_observed(field))
                    .unwrap_or_default();
                Effect::Hash(HashOp::Del { field, observed })
            }
        });
    }
    if deleted > 0 {
        ctx.notify_then_del(notify::HASH, "hdel", key);
    }
    ctx.out.int(deleted);
    Ok(())
}

fn hincrby(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let (key, field) = (arg(argv, 1), arg(argv, 2));
    let by = int_arg(arg(argv, 3))?;
    let current = match write_lookup(ctx, key)?.and_then(|h| h.get(field)) {
        None => 0,
        Some(v) => {
            view_i64(v).ok_or_else(|| CmdError::Err("hash value is not an integer".into()))?
        }
    };
    let new = current.checked_add(by).ok_or(CmdError::Overflow)?;
    incr_field(ctx, key, field, Delta::Int(by));
    ctx.notify(notify::HASH, "hincrby", key);
    ctx.out.int(new);
    Ok(())
}

fn view_i64(v: StrView<'_>) -> Option<i64> {
    match v {
        StrView::Bytes(b) => parse_i64(b),
        StrView::Int(n) => Some(n),
        StrView::Float(d) => parse_i64(d.format_redis().as_bytes()),
    }
}

fn hincrbyfloat(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let (key, field) = (arg(argv, 1), arg(argv, 2));
    let by = match parse_long_double(arg(argv, 3)).ok_or(CmdError::NotFloat)? {
        LongDouble::Finite(d) => d,
        LongDouble::Infinite => return Err(CmdError::Err("value is NaN or Infinity".into())),
    };
    let not_float = || CmdError::Err("hash value is not a float".into());
    // `exact`: the CRDT reads the stored value as the same number, so an increment shows
    // the same result; otherwise the result is assigned.
    let (current, exact) = match write_lookup(ctx, key)?.and_then(|h| h.get(field)) {
        None => (LongDouble::Finite(Dec::ZERO), true),
        Some(StrView::Int(n)) => (LongDouble::Finite(Dec::from_i64(n)), true),
        Some(StrView::Float(d)) => (LongDouble::Finite(d), true),
        Some(StrView::Bytes(b)) => {
            let v = parse_long_double(b).ok_or_else(not_float)?;
            (v, Dec::parse(b).is_some())
        }
    };
    let LongDouble::Finite(cur) = current else {
        return Err(CmdError::NanOrInfinity);
    };
    let sum = cur.add(by).ok_or(CmdError::NanOrInfinity)?;
    let text = sum.format_redis();
    if exact {
        incr_field(ctx, key, field, Delta::Float(by));
        // Past the CRDT's 34 digits (`10.6 + 1e308 - 1e308`) the field's running totals may
        // round differently from this reply's sum: assign the reply then, so that HGET
        // shows what HINCRBYFLOAT answered.
        let shown = write_lookup(ctx, key)
            .ok()
            .flatten()
            .and_then(|h| h.get(field))
            .is_some_and(|v| view_is(v, text.as_bytes()));
        if !shown {
            set_field(ctx, key, field, text.as_bytes());
        }
    } else {
        set_field(ctx, key, field, text.as_bytes());
    }
    ctx.notify(notify::HASH, "hincrbyfloat", key);
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------------------------

fn hget(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let (key, field) = (arg(argv, 1), arg(argv, 2));
    let db = ctx.db();
    let now = ctx.now_ms;
    let h = as_hash(ctx.shard.lookup_read(db, key, now))?;
    match h.and_then(|h| h.get(field)) {
        Some(v) => reply_view(ctx.out, v),
        None => ctx.out.null(),
    }
    Ok(())
}

fn hmget(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let db = ctx.db();
    let now = ctx.now_ms;
    let h = as_hash(ctx.shard.lookup_read(db, key, now))?;
    let fields = argv.get(2..).unwrap_or_default();
    ctx.out.array(fields.len());
    for f in fields {
        match h.and_then(|h| h.get(f)) {
            Some(v) => reply_view(ctx.out, v),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

#[derive(Clone, Copy)]
enum Parts {
    Keys,
    Vals,
    Both,
}

fn getall_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], parts: Parts) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let db = ctx.db();
    let now = ctx.now_ms;
    let h = as_hash(ctx.shard.lookup_read(db, key, now))?;
    let n = h.map_or(0, HashCrdt::len);
    match parts {
        Parts::Both => ctx.out.map(n),
        _ => ctx.out.array(n),
    }
    if let Some(h) = h {
        for (f, v) in h.iter() {
            match parts {
                Parts::Keys => ctx.out.bulk(f),
                Parts::Vals => reply_view(ctx.out, v),
                Parts::Both => {
                    ctx.out.bulk(f);
                    reply_view(ctx.out, v);
                }
            }
        }
    }
    Ok(())
}

fn hgetall(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    getall_generic(ctx, argv, Parts::Both)
}

fn hkeys(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    getall_generic(ctx, argv, Parts::Keys)
}

fn hvals(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    getall_generic(ctx, argv, Parts::Vals)
}

fn hexists(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let h = read_lookup(ctx, arg(argv, 1))?;
    let v = h.is_some_and(|h| h.contains(arg(argv, 2)));
    ctx.out.int(i64::from(v));
    Ok(())
}

fn hlen(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let n = read_lookup(ctx, arg(argv, 1))?.map_or(0, HashCrdt::len);
    ctx.out.int(n as i64);
    Ok(())
}

fn hstrlen(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let h = read_lookup(ctx, arg(argv, 1))?;
    let n = h.and_then(|h| h.get(arg(argv, 2))).map_or(0, view_len);
    ctx.out.int(n as i64);
    Ok(())
}

fn hrandfield(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    use rand::RngExt as _;
    let key = arg(argv, 1);
    if argv.len() < 3 {
        let db = ctx.db();
        let now = ctx.now_ms;
        let h = as_hash(ctx.shard.lookup_read(db, key, now))?;
        match h {
            Some(h) if !h.is_empty() => {
                let i = rand::rng().random_range(0..h.len());
                match h.iter().nth(i) {
                    Some((f, _)) => ctx.out.bulk(f),
                    None => ctx.out.null(),
                }
            }
            _ => ctx.out.null(),
        }
        return Ok(());
    }
    let count = match parse_i64(arg(argv, 2)) {
        None => return Err(CmdError::NotInteger),
        Some(i64::MIN) => {
            return Err(CmdError::Err(
                "value is out of range, value must between -9223372036854775807 and 9223372036854775807"
                    .into(),
            ));
        }
        Some(c) => c,
    };
    if argv.len() > 4 || (argv.len() == 4 && !eq_ic(arg(argv, 3), "withvalues")) {
        return Err(CmdError::Syntax);
    }
    let withvalues = argv.len() == 4;
    if withvalues && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
        return Err(CmdError::Err("value is out of range".into()));
    }
    let resp3 = ctx.out.is_resp3();
    let db = ctx.db();
    let now = ctx.now_ms;
    let h = as_hash(ctx.shard.lookup_read(db, key, now))?;
    let Some(h) = h.filter(|h| !h.is_empty()) else {
        ctx.out.array(0);
        return Ok(());
    };
    let all: Vec<(&[u8], StrView<'_>)> = h.iter().collect();
    let size = all.len();
    let mut rng = rand::rng();
    let emit = |out: &mut Reply, i: usize| {
        let Some((f, v)) = all.get(i) else { return };
        if withvalues && resp3 {
            out.array(2);
        }
        out.bulk(f);
        if withvalues {
            reply_view(out, *v);
        }
    };
    let header = |out: &mut Reply, n: u64| {
        let n = usize::try_from(n).unwrap_or(usize::MAX / 2);
        if withvalues && resp3 {
            out.array(n);
        } else {
            out.array(n * if withvalues { 2 } else { 1 });
        }
    };
    if count < 0 {
        super::set::random_repeats(count)?;
        // Repeats allowed: streamed without building a list (the count may be huge).
        let n = count.unsigned_abs();
        header(ctx.out, n);
        for _ in 0..n {
            emit(ctx.out, rng.random_range(0..size));
        }
    } else if count as u64 >= size as u64 {
        header(ctx.out, size as u64);
        for i in 0..size {
            emit(ctx.out, i);
        }
    } else {
        // Distinct fields, kept in the hash's order (as Redis's listpack sampling).
        let mut chosen = vec![false; size];
        let mut left = count as usize;
        while left > 0 {
            let i = rng.random_range(0..size);
            if let Some(c) = chosen.get_mut(i) {
                if !*c {
                    *c = true;
                    left -= 1;
                }
            }
        }
        header(ctx.out, count as u64);
        for (i, _) in chosen.iter().enumerate().filter(|(_, c)| **c) {
            emit(ctx.out, i);
        }
    }
    Ok(())
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]. A small hash (Redis's listpack) is
/// returned whole with cursor 0. A large one is walked in the order of the fields' keyed
/// hash: the cursor is the hash where the next call resumes, so every field present for the
/// whole scan is returned at least once whatever is written in between.
fn hscan(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let cursor =
        parse_cursor(arg(argv, 2)).ok_or_else(|| CmdError::Err("invalid cursor".to_string()))?;
    let db = ctx.db();
    let now = ctx.now_ms;
    let limits = ctx.shard.config.hash_listpack();
    let h = as_hash(ctx.shard.lookup_read(db, key, now))?;
    let Some(h) = h else {
        ctx.out.array(2);
        ctx.out.bulk(b"0");
        ctx.out.array(0);
        return Ok(());
    };
    let ScanOptions { count, pattern, .. } = scan_options(argv, 3, false)?;
    let matches = |f: &[u8]| pattern.is_none_or(|p| crate::glob::matches(p, f, false));
    let mut out: Vec<(&[u8], StrView<'_>)> = Vec::new();
    let next: u64;
    if h.fits_listpack(limits.entries_max, limits.value_max) {
        out.extend(h.iter().filter(|(f, _)| matches(f)));
        next = 0;
    } else {
        let mut all: Vec<(u64, &[u8], StrView<'_>)> = h
            .iter()
            .map(|(f, v)| (HashCrdt::field_hash(f), f, v))
            .filter(|x| x.0 >= cursor)
            .collect();
        all.sort_unstable_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(b.1)));
        let mut resume = 0u64;
        let mut last: Option<u64> = None;
        for (taken, (hv, f, v)) in all.into_iter().enumerate() {
            if taken as u64 >= count && last != Some(hv) {
                resume = hv;
                break;
            }
            last = Some(hv);
            if matches(f) {
                out.push((f, v));
            }
        }
        next = resume;
    }
    ctx.out.array(2);
    ctx.out.bulk(next.to_string().as_bytes());
    ctx.out.array(out.len() * 2);
    for (f, v) in out {
        ctx.out.bulk(f);
        reply_view(ctx.out, v);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Long doubles (as `string.rs`; Redis's `string2ld`)
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_doubles_and_cursors() {
        assert_eq!(
            parse_long_double(b"0x10"),
            Some(LongDouble::Finite(Dec::from_i64(16)))
        );
        assert_eq!(parse_long_double(b"-inf"), Some(LongDouble::Infinite));
        assert_eq!(parse_long_double(b" 1"), None);
        assert_eq!(parse_cursor(b"12"), Some(12));
        assert_eq!(parse_cursor(b"x"), None);
    }
}

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
use super::set::{BucketSampler, Buckets, scan_buckets};
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
    // Redis's sum, in `long double`: the field moves by what brings it there.
    let super::ext80::FloatIncrement { text, delta } = super::ext80::float_increment(cur, by)?;
    if let (true, Some(delta)) = (exact, delta) {
        incr_field(ctx, key, field, Delta::Float(delta));
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
        match h.and_then(|h| BucketSampler::new(h).pick(&mut rand::rng())) {
            Some((f, _)) => ctx.out.bulk(f),
            None => ctx.out.null(),
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
    let size = h.len();
    let mut rng = rand::rng();
    let emit = |out: &mut Reply, (f, v): (&[u8], StrView<'_>)| {
        if withvalues && resp3 {
            out.array(2);
        }
        out.bulk(f);
        if withvalues {
            reply_view(out, v);
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
        // Repeats allowed: streamed without building a list (the count may be huge), each
        // pick O(1) on a large hash's index.
        let n = count.unsigned_abs();
        header(ctx.out, n);
        let mut sampler = BucketSampler::new(h);
        for _ in 0..n {
            if let Some(x) = sampler.pick(&mut rng) {
                emit(ctx.out, x);
            }
        }
    } else if count as u64 >= size as u64 {
        header(ctx.out, size as u64);
        for x in h.iter() {
            emit(ctx.out, x);
        }
    } else if h.bucket_count() > 0 && (count as usize).saturating_mul(3) <= size {
        // Distinct fields of a large hash, picked from its index (Redis's case 4): O(count).
        let mut sampler = BucketSampler::new(h);
        let mut picked: std::collections::HashSet<&[u8]> =
            std::collections::HashSet::with_capacity(count as usize);
        header(ctx.out, count as u64);
        while picked.len() < count as usize {
            let Some(x) = sampler.pick(&mut rng) else {
                break;
            };
            if picked.insert(x.0) {
                emit(ctx.out, x);
            }
        }
    } else {
        // Distinct fields, kept in the hash's order (as Redis's listpack sampling; a large
        // hash asked for over a third of its fields is O(fields), as Redis's case 3).
        let all: Vec<(&[u8], StrView<'_>)> = h.iter().collect();
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
            if let Some(x) = all.get(i) {
                emit(ctx.out, *x);
            }
        }
    }
    Ok(())
}

type Field<'a> = (&'a [u8], StrView<'a>);

/// Random picks of a hash's fields (`BucketSampler`): by bucket of a large hash's index, from
/// the listed fields of a small one (no index).
impl<'a> Buckets for &'a HashCrdt {
    type Item = Field<'a>;
    fn bucket_count(&self) -> usize {
        HashCrdt::bucket_count(self)
    }
    fn bucket(&self, index: usize) -> Option<Field<'a>> {
        HashCrdt::bucket(self, index)
    }
    fn list(&self) -> Vec<Field<'a>> {
        self.iter().collect()
    }
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]. A small hash (Redis's listpack, or one
/// with no index: at most `INDEX_MIN` fields ever) is returned whole with cursor 0. A large
/// one is walked by bucket of its index, as SSCAN walks a set (`set::scan_buckets`): O(COUNT)
/// per call, and every field present for the whole scan is returned at least once whatever
/// is written in between (a grown index restarts the walk).
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
    let (next, fields): (u64, Vec<Field<'_>>) =
        if h.fits_listpack(limits.entries_max, limits.value_max) || h.bucket_count() == 0 {
            (0, h.iter().collect())
        } else {
            scan_buckets(cursor, count, h.bucket_count(), h.scan_space(), |i| {
                h.bucket(i)
            })
        };
    let out: Vec<Field<'_>> = fields.into_iter().filter(|(f, _)| matches(f)).collect();
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
    use meridian_crdt::{Hlc, ReplicaId, Stamp, VersionVector};
    use std::cell::Cell;

    fn big_hash(fields: u64) -> HashCrdt {
        let mut h = HashCrdt::new();
        for i in 0..fields {
            let op = HashOp::Set {
                field: format!("field:{i}").into_bytes(),
                value: b"v".to_vec(),
                observed: VersionVector::new(),
            };
            h.apply(
                Stamp {
                    hlc: Hlc(i + 1),
                    replica: ReplicaId(1),
                },
                &op,
            );
        }
        h
    }

    /// HSCAN's work, counted in buckets visited: O(COUNT) per call and O(buckets) for a whole
    /// iteration (it hashed and sorted every field past the cursor on each call: O(N log N)).
    #[test]
    fn hscan_visits_count_buckets_per_call() {
        let n = 100_000;
        let h = big_hash(n);
        let visits = Cell::new(0u64);
        let bucket = |i: usize| {
            visits.set(visits.get() + 1);
            h.bucket(i)
        };
        let (mut cursor, mut calls, mut seen) = (0u64, 0u64, std::collections::HashSet::new());
        loop {
            let before = visits.get();
            let (next, fields) =
                scan_buckets(cursor, 10, h.bucket_count(), Default::default(), bucket);
            assert!(
                visits.get() - before <= 100,
                "one call visits at most COUNT × 10"
            );
            assert!(fields.len() <= 10);
            seen.extend(fields.into_iter().map(|(f, _)| f));
            calls += 1;
            cursor = next;
            if cursor == 0 {
                break;
            }
        }
        assert_eq!(seen.len() as u64, n);
        assert_eq!(
            visits.get(),
            h.bucket_count() as u64,
            "each bucket visited once"
        );
        assert!(calls >= n / 10);
    }

    /// A hash's buckets, counting the probes and listings a sampler makes.
    struct Counting<'a> {
        h: &'a HashCrdt,
        probes: &'a Cell<u64>,
        listings: &'a Cell<u64>,
    }

    impl<'a> Buckets for Counting<'a> {
        type Item = Field<'a>;
        fn bucket_count(&self) -> usize {
            self.h.bucket_count()
        }
        fn bucket(&self, index: usize) -> Option<Field<'a>> {
            self.probes.set(self.probes.get() + 1);
            self.h.bucket(index)
        }
        fn list(&self) -> Vec<Field<'a>> {
            self.listings.set(self.listings.get() + 1);
            self.h.iter().collect()
        }
    }

    /// HRANDFIELD's work, counted in probes and listings: picks from a large hash probe its
    /// index (O(1) each, no listing); a hash left sparse by removals is listed once, not per
    /// pick (it copied the whole field list on every call).
    #[test]
    fn hrandfield_picks_cost_probes_not_fields() {
        let mut h = big_hash(20_000);
        let (probes, listings) = (Cell::new(0u64), Cell::new(0u64));
        let mut rng = rand::rng();
        {
            let mut s = BucketSampler::new(Counting {
                h: &h,
                probes: &probes,
                listings: &listings,
            });
            for _ in 0..1000 {
                assert!(s.pick(&mut rng).is_some());
            }
        }
        assert_eq!(listings.get(), 0);
        // At least half the buckets are full: about 2 probes a pick, 64 at most.
        assert!(probes.get() < 10 * 1000, "{} probes", probes.get());
        for i in 10..20_000 {
            let f = format!("field:{i}");
            let del = HashOp::Del {
                field: f.as_bytes().to_vec(),
                observed: h.field_observed(f.as_bytes()),
            };
            h.apply(
                Stamp {
                    hlc: Hlc(100_000 + i),
                    replica: ReplicaId(1),
                },
                &del,
            );
        }
        let mut s = BucketSampler::new(Counting {
            h: &h,
            probes: &probes,
            listings: &listings,
        });
        for _ in 0..100_000 {
            let (f, _) = s.pick(&mut rng).unwrap();
            assert!(f.starts_with(b"field:"));
        }
        // 10 fields in 32 Ki buckets: the probes miss, the fields are listed once, and the
        // 100,000 picks take them by position (O(picks + fields), not O(picks × fields)).
        assert_eq!(listings.get(), 1);
    }

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

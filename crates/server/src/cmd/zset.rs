//! Sorted-set commands: ZADD ZINCRBY ZREM ZSCORE ZMSCORE ZCARD ZCOUNT ZLEXCOUNT ZRANGE
//! ZRANGESTORE ZRANGEBYSCORE ZREVRANGEBYSCORE ZRANGEBYLEX ZREVRANGEBYLEX ZREVRANGE ZRANK
//! ZREVRANK ZPOPMIN ZPOPMAX ZRANDMEMBER ZREMRANGEBYRANK ZREMRANGEBYSCORE ZREMRANGEBYLEX ZUNION
//! ZINTER ZDIFF ZUNIONSTORE ZINTERSTORE ZDIFFSTORE ZINTERCARD ZSCAN ZMPOP, and the blocking
//! BZPOPMIN BZPOPMAX BZMPOP (on `crate::blocking`).
//!
//! Semantics, option parsing, reply shapes (RESP2 and RESP3) and error texts follow Redis 7.0
//! (`t_zset.c`). Every write is one CRDT op per member (`ZSetOp::Add`, `Incr`, `Rem`, see
//! `meridian_crdt::zset`); removing the last member is a key `Remove`, so the key goes away as
//! in Redis. The *STORE commands delete the destination, then add each member.

use std::ops::Bound;

use meridian_crdt::zset::{F64, LexBound};
use meridian_crdt::{Effect, KeyState, TypeTag, ZSetCrdt, ZSetOp};
use rand::RngExt as _;

use super::args::{
    HexFloat, ScanOptions, eq_ic, int_arg, is_c_space, parse_f64, parse_i64, scan_options,
    strtod_decimal,
};
use super::{Ctx, Handler};
use crate::blocking::parse_timeout;
use crate::config::ListpackLimits;
use crate::error::CmdError;
use crate::notify;
use crate::resp::reply::Reply;
use crate::shard::Shard;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("zadd", zadd),
    ("zincrby", zincrby),
    ("zrem", zrem),
    ("zscore", zscore),
    ("zmscore", zmscore),
    ("zcard", zcard),
    ("zcount", zcount),
    ("zlexcount", zlexcount),
    ("zrange", zrange),
    ("zrangestore", zrangestore),
    ("zrangebyscore", zrangebyscore),
    ("zrevrangebyscore", zrevrangebyscore),
    ("zrangebylex", zrangebylex),
    ("zrevrangebylex", zrevrangebylex),
    ("zrevrange", zrevrange),
    ("zrank", zrank),
    ("zrevrank", zrevrank),
    ("zpopmin", zpopmin),
    ("zpopmax", zpopmax),
    ("zrandmember", zrandmember),
    ("zremrangebyrank", zremrangebyrank),
    ("zremrangebyscore", zremrangebyscore),
    ("zremrangebylex", zremrangebylex),
    ("zunion", zunion),
    ("zinter", zinter),
    ("zdiff", zdiff),
    ("zunionstore", zunionstore),
    ("zinterstore", zinterstore),
    ("zdiffstore", zdiffstore),
    ("zintercard", zintercard),
    ("zscan", zscan),
    ("zmpop", zmpop),
    ("bzpopmin", bzpopmin),
    ("bzpopmax", bzpopmax),
    ("bzmpop", bzmpop),
];

/// The encoding Redis 7.0 gives a sorted set of these contents (OBJECT ENCODING, and ZSCAN
/// replies a listpack whole): "listpack" with at most `zset-max-listpack-entries` members of
/// at most `zset-max-listpack-value` bytes each, else "skiplist".
pub fn encoding(z: &ZSetCrdt, limits: ListpackLimits) -> &'static str {
    if z.fits_listpack(limits.entries_max, limits.value_max) {
        "listpack"
    } else {
        "skiplist"
    }
}

pub(crate) fn nan_error() -> CmdError {
    CmdError::Err("resulting score is not a number (NaN)".to_string())
}

fn arg<'a>(argv: &[&'a [u8]], i: usize) -> &'a [u8] {
    argv.get(i).copied().unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Shared helpers: lookups, writes, replies (also used by GEO)
// ---------------------------------------------------------------------------------------------

/// The sorted set a key shows: `Ok(None)` when missing, WRONGTYPE for another type.
pub(crate) fn as_zset(state: &KeyState) -> Result<Option<&ZSetCrdt>, CmdError> {
    match state.type_tag() {
        None => Ok(None),
        Some(TypeTag::ZSet) => Ok(state.zset()),
        Some(_) => Err(CmdError::WrongType),
    }
}

/// Read lookup (keyspace hits/misses).
pub(crate) fn read<'a>(
    shard: &'a mut Shard,
    db: usize,
    now_ms: u64,
    key: &[u8],
) -> Result<Option<&'a ZSetCrdt>, CmdError> {
    match shard.lookup_read(db, key, now_ms) {
        None => Ok(None),
        Some(state) => as_zset(state),
    }
}

/// Write lookup (no statistics), as Redis's `lookupKeyWrite`.
pub(crate) fn read_quiet<'a>(
    shard: &'a mut Shard,
    db: usize,
    now_ms: u64,
    key: &[u8],
) -> Result<Option<&'a ZSetCrdt>, CmdError> {
    match shard.lookup_quiet(db, key, now_ms) {
        None => Ok(None),
        Some(e) => as_zset(&e.state),
    }
}

/// ZADD of one member (one op).
pub(crate) fn add_member(ctx: &mut Ctx<'_>, key: &[u8], member: &[u8], score: f64) {
    let db = ctx.db();
    ctx.shard.write_key(db, key, ctx.now_ms, |state| {
        Effect::ZSet(ZSetOp::Add {
            member,
            score: F64(score),
            observed: state
                .zset()
                .map(|z| z.member_observed(member))
                .unwrap_or_default(),
        })
    });
}

fn incr_member(ctx: &mut Ctx<'_>, key: &[u8], member: &[u8], delta: f64) {
    let db = ctx.db();
    ctx.shard.write_key(db, key, ctx.now_ms, |_| {
        Effect::ZSet(ZSetOp::Incr {
            member,
            delta: F64(delta),
        })
    });
}

/// Removes `member`; the last member removes the key.
pub(crate) fn rem_member(ctx: &mut Ctx<'_>, key: &[u8], member: &[u8]) {
    let db = ctx.db();
    ctx.shard
        .write_key(db, key, ctx.now_ms, |state| match state.zset() {
            Some(z) if z.len() == 1 && z.score(member).is_some() => state.remove_effect(),
            Some(z) => Effect::ZSet(ZSetOp::Rem {
                member,
                observed: z.member_observed(member),
            }),
            None => state.remove_effect(),
        });
}

pub(crate) fn score_of(ctx: &mut Ctx<'_>, key: &[u8], member: &[u8]) -> Option<f64> {
    read_quiet(ctx.shard, ctx.client.db, ctx.now_ms, key)
        .ok()
        .flatten()
        .and_then(|z| z.score(member))
}

/// Replies members, with scores when asked: RESP2 a flat array, RESP3 `[member, score]` pairs.
pub(crate) fn reply_items<M: AsRef<[u8]>>(out: &mut Reply, items: &[(M, f64)], withscores: bool) {
    if withscores && out.is_resp3() {
        out.array(items.len());
        for (m, s) in items {
            out.array(2);
            out.bulk(m.as_ref());
            out.double(*s);
        }
    } else if withscores {
        out.array(items.len() * 2);
        for (m, s) in items {
            out.bulk(m.as_ref());
            out.double(*s);
        }
    } else {
        out.array(items.len());
        for (m, _) in items {
            out.bulk(m.as_ref());
        }
    }
}

/// Deletes `dst` and stores `items` there; returns the number stored. Notifies `event`
/// (class `z`), or `del` when nothing was stored over an existing key, as Redis's STORE
/// variants do.
pub(crate) fn store(ctx: &mut Ctx<'_>, dst: &[u8], items: &[(Vec<u8>, f64)], event: &str) -> usize {
    let db = ctx.db();
    let existed = ctx.shard.delete_key(db, dst, ctx.now_ms);
    let flags = ctx.shard.hold_new(existed);
    for (m, s) in items {
        add_member(ctx, dst, m, *s);
    }
    ctx.shard.notify_flags = flags;
    if !items.is_empty() {
        ctx.notify(notify::ZSET, event, dst);
    } else if existed {
        ctx.notify(notify::GENERIC, "del", dst);
    }
    items.len()
}

// ---------------------------------------------------------------------------------------------
// Range arguments
// ---------------------------------------------------------------------------------------------

/// A score as Redis's `getDoubleFromObject` (`string2d`) reads it: decimal and `inf` forms as
/// `parse_f64`, plus hexadecimal (`0x10`, `-0x1.8p1`); out of range (±HUGE_VAL or an
/// underflow to 0) is refused.
pub(crate) fn parse_score(b: &[u8]) -> Option<f64> {
    parse_f64(b).or_else(|| match parse_hex_float(b)? {
        v if v.is_infinite() => None,
        v if v == 0.0 && hex_mantissa_nonzero(b) => None,
        v => Some(v),
    })
}

/// Whether the digits of a hex float before its `p` exponent are not all zero.
fn hex_mantissa_nonzero(b: &[u8]) -> bool {
    let digits = b
        .iter()
        .position(|&c| c == b'x' || c == b'X')
        .map_or(b, |i| b.get(i + 1..).unwrap_or_default());
    digits
        .iter()
        .take_while(|&&c| c != b'p' && c != b'P')
        .any(|&c| c.is_ascii_hexdigit() && c != b'0')
}

/// A bound as `zslParseRange` reads it with `strtod`: the C string ends at the first NUL,
/// leading white space is skipped, an empty text is 0 (so `(` alone is "above 0"), an out of
/// range value is ±inf or 0 (no `ERANGE` check), trailing characters and NaN are refused.
fn parse_range_score(b: &[u8]) -> Option<f64> {
    let b = b.split(|&c| c == 0).next().unwrap_or_default();
    if b.is_empty() {
        return Some(0.0);
    }
    let start = b.iter().position(|&c| !is_c_space(c))?;
    let t = b.get(start..)?;
    strtod_decimal(t)
        .map(|(v, _)| v)
        .or_else(|| parse_hex_float(t))
        .filter(|v| !v.is_nan())
}

/// C99 hexadecimal floating constant: `[+-]0x<hex>[.<hex>][p[+-]<dec>]`.
fn parse_hex_float(b: &[u8]) -> Option<f64> {
    let HexFloat {
        negative: neg,
        int_part,
        frac_part,
        exp,
    } = HexFloat::split(b)?;
    let mut v = 0.0f64;
    for &c in int_part {
        v = v * 16.0 + f64::from((c as char).to_digit(16)?);
    }
    let mut scale = 1.0 / 16.0;
    for &c in frac_part {
        v += f64::from((c as char).to_digit(16)?) * scale;
        scale /= 16.0;
    }
    if let Some(e) = exp {
        let e: i32 = std::str::from_utf8(e).ok()?.parse().ok()?;
        // 0 * 2^e stays 0 (0 * inf would be NaN).
        if v != 0.0 {
            v *= 2f64.powi(e);
        }
    }
    Some(if neg { -v } else { v })
}

/// Redis's `zslParseRange` item: `(` for exclusive, then a float (not NaN).
fn parse_score_bound(b: &[u8]) -> Option<Bound<f64>> {
    match b.split_first() {
        Some((b'(', rest)) => parse_range_score(rest).map(Bound::Excluded),
        _ => parse_range_score(b).map(Bound::Included),
    }
}

fn score_range(min: &[u8], max: &[u8]) -> Result<(Bound<f64>, Bound<f64>), CmdError> {
    match (parse_score_bound(min), parse_score_bound(max)) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(CmdError::Err("min or max is not a float".to_string())),
    }
}

fn lex_range(min: &[u8], max: &[u8]) -> Result<(LexBound, LexBound), CmdError> {
    match (LexBound::parse(min), LexBound::parse(max)) {
        (Some(a), Some(b)) => Ok((a, b)),
        _ => Err(CmdError::Err(
            "min or max not valid string range item".to_string(),
        )),
    }
}

#[derive(Clone, Debug)]
enum Range {
    Rank(i64, i64),
    Score(Bound<f64>, Bound<f64>),
    Lex(LexBound, LexBound),
}

impl Range {
    /// The range from `min` to `max` read as `kind` says (ranks unless scores or lex).
    fn parse(kind: RangeType, min: &[u8], max: &[u8]) -> Result<Range, CmdError> {
        Ok(match kind {
            RangeType::Score => {
                let (lo, hi) = score_range(min, max)?;
                Range::Score(lo, hi)
            }
            RangeType::Lex => {
                let (lo, hi) = lex_range(min, max)?;
                Range::Lex(lo, hi)
            }
            RangeType::Auto | RangeType::Rank => Range::Rank(int_arg(min)?, int_arg(max)?),
        })
    }
}

/// The members a range selects, in reply order; `offset`/`limit` as Redis applies them to
/// score and lex ranges (a negative offset selects nothing, a negative limit everything).
fn select<'a>(
    z: &'a ZSetCrdt,
    range: &'a Range,
    rev: bool,
    offset: i64,
    limit: i64,
) -> Vec<(&'a [u8], f64)> {
    match range {
        Range::Rank(start, end) => {
            let llen = z.len() as i64;
            let mut start = *start;
            let mut end = *end;
            if start < 0 {
                start += llen;
            }
            if end < 0 {
                end += llen;
            }
            if start < 0 {
                start = 0;
            }
            if start > end || start >= llen {
                return Vec::new();
            }
            if end >= llen {
                end = llen - 1;
            }
            let (s, e) = (start as usize, end as usize);
            let llen = llen as usize;
            if rev {
                z.range_by_rank(llen - 1 - e, llen - s).rev().collect()
            } else {
                z.range_by_rank(s, e + 1).collect()
            }
        }
        Range::Score(lo, hi) => {
            if offset < 0 {
                return Vec::new();
            }
            let it = z.range_by_score(*lo, *hi);
            let take = if limit < 0 {
                usize::MAX
            } else {
                limit as usize
            };
            if rev {
                it.rev().skip(offset as usize).take(take).collect()
            } else {
                it.skip(offset as usize).take(take).collect()
            }
        }
        Range::Lex(lo, hi) => {
            if offset < 0 {
                return Vec::new();
            }
            let it = z.range_by_lex(lo, hi);
            let take = if limit < 0 {
                usize::MAX
            } else {
                limit as usize
            };
            if rev {
                it.rev().skip(offset as usize).take(take).collect()
            } else {
                it.skip(offset as usize).take(take).collect()
            }
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum RangeType {
    Auto,
    Rank,
    Score,
    Lex,
}

/// Redis's `zrangeGenericCommand`: `argv[argc_start]` is the source key, then min and max,
/// then options. `fixed_*`: the type and direction the command implies (ZRANGEBYSCORE...).
fn zrange_generic(
    ctx: &mut Ctx<'_>,
    argv: &[&[u8]],
    argc_start: usize,
    dst: Option<&[u8]>,
    fixed_type: RangeType,
    fixed_rev: Option<bool>,
) -> Result<(), CmdError> {
    let key = arg(argv, argc_start);
    let mut minidx = argc_start + 1;
    let mut maxidx = argc_start + 2;
    let mut withscores = false;
    let mut offset: i64 = 0;
    let mut limit: i64 = -1;
    let mut rev = fixed_rev;
    let mut rtype = fixed_type;
    let mut j = argc_start + 3;
    while j < argv.len() {
        let a = arg(argv, j);
        let left = argv.len() - j - 1;
        if dst.is_none() && eq_ic(a, "withscores") {
            withscores = true;
        } else if eq_ic(a, "limit") && left >= 2 {
            offset = int_arg(arg(argv, j + 1))?;
            limit = int_arg(arg(argv, j + 2))?;
            j += 2;
        } else if rev.is_none() && eq_ic(a, "rev") {
            rev = Some(true);
        } else if rtype == RangeType::Auto && eq_ic(a, "bylex") {
            rtype = RangeType::Lex;
        } else if rtype == RangeType::Auto && eq_ic(a, "byscore") {
            rtype = RangeType::Score;
        } else {
            return Err(CmdError::Syntax);
        }
        j += 1;
    }
    let rev = rev.unwrap_or(false);
    if rtype == RangeType::Auto {
        rtype = RangeType::Rank;
    }
    if limit != -1 && rtype == RangeType::Rank {
        return Err(CmdError::Err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX"
                .to_string(),
        ));
    }
    if withscores && rtype == RangeType::Lex {
        return Err(CmdError::Err(
            "syntax error, WITHSCORES not supported in combination with BYLEX".to_string(),
        ));
    }
    if rev && rtype != RangeType::Rank {
        std::mem::swap(&mut minidx, &mut maxidx);
    }
    let (min, max) = (arg(argv, minidx), arg(argv, maxidx));
    let range = Range::parse(rtype, min, max)?;
    match dst {
        None => {
            let Some(z) = read(ctx.shard, ctx.client.db, ctx.now_ms, key)? else {
                ctx.out.array(0);
                return Ok(());
            };
            let items = select(z, &range, rev, offset, limit);
            reply_items(ctx.out, &items, withscores);
        }
        Some(dst) => {
            let items: Vec<(Vec<u8>, f64)> = match read(ctx.shard, ctx.client.db, ctx.now_ms, key)?
            {
                Some(z) => select(z, &range, rev, offset, limit)
                    .into_iter()
                    .map(|(m, s)| (m.to_vec(), s))
                    .collect(),
                None => Vec::new(),
            };
            let n = store(ctx, dst, &items, "zrangestore");
            ctx.out.int(n as i64);
        }
    }
    Ok(())
}

fn zrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zrange_generic(ctx, argv, 1, None, RangeType::Auto, None)
}

fn zrangestore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let dst = arg(argv, 1);
    zrange_generic(ctx, argv, 2, Some(dst), RangeType::Auto, None)
}

fn zrevrange(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zrange_generic(ctx, argv, 1, None, RangeType::Rank, Some(true))
}

fn zrangebyscore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zrange_generic(ctx, argv, 1, None, RangeType::Score, Some(false))
}

fn zrevrangebyscore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zrange_generic(ctx, argv, 1, None, RangeType::Score, Some(true))
}

fn zrangebylex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zrange_generic(ctx, argv, 1, None, RangeType::Lex, Some(false))
}

fn zrevrangebylex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zrange_generic(ctx, argv, 1, None, RangeType::Lex, Some(true))
}

// ---------------------------------------------------------------------------------------------
// ZADD ZINCRBY ZREM
// ---------------------------------------------------------------------------------------------

const ZADD_NX: u8 = 1;
const ZADD_XX: u8 = 2;
const ZADD_GT: u8 = 4;
const ZADD_LT: u8 = 8;
const ZADD_CH: u8 = 16;
const ZADD_INCR: u8 = 32;

/// Redis's `zaddGenericCommand`.
fn zadd_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], mut flags: u8) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let mut idx = 2;
    if flags & ZADD_INCR == 0 {
        while let Some(a) = argv.get(idx) {
            let f = if eq_ic(a, "nx") {
                ZADD_NX
            } else if eq_ic(a, "xx") {
                ZADD_XX
            } else if eq_ic(a, "ch") {
                ZADD_CH
            } else if eq_ic(a, "incr") {
                ZADD_INCR
            } else if eq_ic(a, "gt") {
                ZADD_GT
            } else if eq_ic(a, "lt") {
                ZADD_LT
            } else {
                break;
            };
            flags |= f;
            idx += 1;
        }
    }
    let has = |f: u8| flags & f != 0;
    let elements = argv.len() - idx;
    if elements % 2 != 0 || elements == 0 {
        return Err(CmdError::Syntax);
    }
    let elements = elements / 2;
    // Redis's order of checks: the option conflicts, then INCR's single pair.
    if has(ZADD_NX) && has(ZADD_XX) {
        return Err(CmdError::Err(
            "XX and NX options at the same time are not compatible".to_string(),
        ));
    }
    if (has(ZADD_GT) && has(ZADD_NX))
        || (has(ZADD_LT) && has(ZADD_NX))
        || (has(ZADD_GT) && has(ZADD_LT))
    {
        return Err(CmdError::Err(
            "GT, LT, and/or NX options at the same time are not compatible".to_string(),
        ));
    }
    if has(ZADD_INCR) && elements > 1 {
        return Err(CmdError::Err(
            "INCR option supports a single increment-element pair".to_string(),
        ));
    }
    let mut pairs: Vec<(f64, &[u8])> = Vec::with_capacity(elements);
    // The increment as given: the reply of INCR on a new member (Redis replies `-0` there).
    let mut given = 0.0;
    for i in 0..elements {
        let parsed = parse_score(arg(argv, idx + 2 * i)).ok_or(CmdError::NotFloat)?;
        given = parsed;
        // -0 is stored as 0, as Redis's listpack stores it.
        pairs.push((parsed + 0.0, arg(argv, idx + 2 * i + 1)));
    }
    let exists = read_quiet(ctx.shard, ctx.client.db, ctx.now_ms, key)?.is_some();
    let incr = has(ZADD_INCR);
    let mut added = 0i64;
    let mut updated = 0i64;
    let mut processed = 0;
    let mut last_score = 0.0;
    if exists || !has(ZADD_XX) {
        for (score, member) in pairs {
            match score_of(ctx, key, member) {
                Some(cur) => {
                    if has(ZADD_NX) {
                        continue;
                    }
                    let new = if incr { score + cur } else { score };
                    if new.is_nan() {
                        return Err(nan_error());
                    }
                    if (has(ZADD_LT) && new >= cur) || (has(ZADD_GT) && new <= cur) {
                        continue;
                    }
                    processed += 1;
                    last_score = new;
                    if new != cur {
                        if incr && ctx.shard.peers > 0 {
                            // A counter's increment (docs/conflicts.md §10): concurrent ones
                            // at other sites add up, summed the same way everywhere.
                            incr_member(ctx, key, member, score);
                            last_score = score_of(ctx, key, member).unwrap_or(new);
                        } else {
                            // With no peers nothing is concurrent: the sum Redis computes,
                            // rounded as its double is (1 + 1e17 is 1e17), as an add.
                            add_member(ctx, key, member, new);
                        }
                        updated += 1;
                    }
                }
                None => {
                    if has(ZADD_XX) {
                        continue;
                    }
                    if incr {
                        incr_member(ctx, key, member, score);
                    } else {
                        add_member(ctx, key, member, score);
                    }
                    added += 1;
                    processed += 1;
                    // INCR takes a single pair: `given` is its increment.
                    last_score = if incr { given } else { score };
                }
            }
        }
    }
    if added + updated > 0 {
        ctx.notify(notify::ZSET, if incr { "zincr" } else { "zadd" }, key);
    }
    if incr {
        if processed > 0 {
            ctx.out.double(last_score);
        } else {
            ctx.out.null();
        }
    } else {
        ctx.out
            .int(if has(ZADD_CH) { added + updated } else { added });
    }
    Ok(())
}

fn zadd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zadd_generic(ctx, argv, 0)
}

fn zincrby(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zadd_generic(ctx, argv, ZADD_INCR)
}

fn zrem(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    if read_quiet(ctx.shard, ctx.client.db, ctx.now_ms, key)?.is_none() {
        ctx.out.int(0);
        return Ok(());
    }
    let mut n = 0;
    for m in argv.iter().skip(2) {
        if score_of(ctx, key, m).is_some() {
            rem_member(ctx, key, m);
            n += 1;
        }
    }
    if n > 0 {
        ctx.notify_then_del(notify::ZSET, "zrem", key);
    }
    ctx.out.int(n);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Reads
// ---------------------------------------------------------------------------------------------

fn zscore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let member = arg(argv, 2);
    match read(ctx.shard, ctx.client.db, ctx.now_ms, arg(argv, 1))?.and_then(|z| z.score(member)) {
        Some(s) => ctx.out.double(s),
        None => ctx.out.null(),
    }
    Ok(())
}

fn zmscore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let z = read(ctx.shard, ctx.client.db, ctx.now_ms, arg(argv, 1))?;
    let scores: Vec<Option<f64>> = argv
        .iter()
        .skip(2)
        .map(|m| z.and_then(|z| z.score(m)))
        .collect();
    ctx.out.array(scores.len());
    for s in scores {
        match s {
            Some(s) => ctx.out.double(s),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

fn zcard(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let n = read(ctx.shard, ctx.client.db, ctx.now_ms, arg(argv, 1))?.map_or(0, |z| z.len());
    ctx.out.int(n as i64);
    Ok(())
}

fn zcount(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let (lo, hi) = score_range(arg(argv, 2), arg(argv, 3))?;
    let n = read(ctx.shard, ctx.client.db, ctx.now_ms, arg(argv, 1))?
        .map_or(0, |z| z.range_by_score(lo, hi).count());
    ctx.out.int(n as i64);
    Ok(())
}

fn zlexcount(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let (lo, hi) = lex_range(arg(argv, 2), arg(argv, 3))?;
    let n = read(ctx.shard, ctx.client.db, ctx.now_ms, arg(argv, 1))?
        .map_or(0, |z| z.range_by_lex(&lo, &hi).count());
    ctx.out.int(n as i64);
    Ok(())
}

fn zrank_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], rev: bool) -> Result<(), CmdError> {
    let member = arg(argv, 2);
    let r = read(ctx.shard, ctx.client.db, ctx.now_ms, arg(argv, 1))?
        .and_then(|z| z.rank(member).map(|r| (r, z.len())));
    match r {
        Some((r, n)) => ctx.out.int(if rev { n - 1 - r } else { r } as i64),
        None => ctx.out.null(),
    }
    Ok(())
}

fn zrank(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zrank_generic(ctx, argv, false)
}

fn zrevrank(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zrank_generic(ctx, argv, true)
}

// ---------------------------------------------------------------------------------------------
// Pops and removals by range
// ---------------------------------------------------------------------------------------------

/// Pops up to `count` members of `key` from the low (or high, `max`) end.
fn pop(ctx: &mut Ctx<'_>, key: &[u8], count: usize, max: bool) -> Vec<(Vec<u8>, f64)> {
    let items: Vec<(Vec<u8>, f64)> = match read_quiet(ctx.shard, ctx.client.db, ctx.now_ms, key) {
        Ok(Some(z)) => {
            if max {
                z.iter()
                    .rev()
                    .take(count)
                    .map(|(m, s)| (m.to_vec(), s))
                    .collect()
            } else {
                z.iter().take(count).map(|(m, s)| (m.to_vec(), s)).collect()
            }
        }
        _ => Vec::new(),
    };
    for (m, _) in &items {
        rem_member(ctx, key, m);
    }
    if !items.is_empty() {
        ctx.notify_then_del(notify::ZSET, if max { "zpopmax" } else { "zpopmin" }, key);
    }
    items
}

fn zpop_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], max: bool) -> Result<(), CmdError> {
    if argv.len() > 3 {
        return Err(CmdError::Syntax);
    }
    let key = arg(argv, 1);
    let count = match argv.get(2) {
        // Redis's `getPositiveLongFromObjectOrReply`: a non-integer says "must be positive".
        Some(c) => match parse_i64(c) {
            Some(c) if c >= 0 => Some(usize::try_from(c).unwrap_or(usize::MAX)),
            _ => return Err(CmdError::MustBePositive),
        },
        None => None,
    };
    if read_quiet(ctx.shard, ctx.client.db, ctx.now_ms, key)?.is_none() {
        ctx.out.array(0);
        return Ok(());
    }
    let items = pop(ctx, key, count.unwrap_or(1), max);
    match count {
        None => {
            ctx.out.array(items.len() * 2);
            for (m, s) in &items {
                ctx.out.bulk(m);
                ctx.out.double(*s);
            }
        }
        Some(_) => reply_items(ctx.out, &items, true),
    }
    Ok(())
}

fn zpopmin(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zpop_generic(ctx, argv, false)
}

fn zpopmax(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zpop_generic(ctx, argv, true)
}

/// Redis's `getRangeLongFromObjectOrReply` with a custom message.
/// Redis's `getRangeLongFromObjectOrReply` with a message: a non-integer says `msg` too.
fn parse_range_long(b: &[u8], min: i64, max: i64, msg: &str) -> Result<i64, CmdError> {
    match parse_i64(b) {
        Some(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(CmdError::Err(msg.to_string())),
    }
}

/// Parsed `numkeys key [key ...] MIN|MAX [COUNT count]` of ZMPOP/BZMPOP.
struct MpopArgs<'a> {
    keys: Vec<&'a [u8]>,
    max: bool,
    count: usize,
}

fn parse_mpop<'a>(argv: &[&'a [u8]], numkeys_idx: usize) -> Result<MpopArgs<'a>, CmdError> {
    let numkeys = parse_range_long(
        arg(argv, numkeys_idx),
        1,
        i64::MAX,
        "numkeys should be greater than 0",
    )?;
    let first = numkeys_idx + 1;
    if numkeys > (argv.len() as i64 - first as i64 - 1) {
        return Err(CmdError::Syntax);
    }
    let numkeys = numkeys as usize;
    let mut j = first + numkeys;
    let where_ = arg(argv, j);
    let max = if eq_ic(where_, "min") {
        false
    } else if eq_ic(where_, "max") {
        true
    } else {
        return Err(CmdError::Syntax);
    };
    j += 1;
    let mut count: i64 = -1;
    while j < argv.len() {
        let a = arg(argv, j);
        if count == -1 && eq_ic(a, "count") && j + 1 < argv.len() {
            count = parse_range_long(
                arg(argv, j + 1),
                1,
                i64::MAX,
                "count should be greater than 0",
            )?;
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    Ok(MpopArgs {
        keys: argv.iter().skip(first).take(numkeys).copied().collect(),
        max,
        count: if count == -1 { 1 } else { count as usize },
    })
}

/// Whether `key` holds a sorted set to pop from. On a blocked client's re-run a key of
/// another type counts as empty (Redis 7.0 serves it only from a sorted set).
fn poppable(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<bool, CmdError> {
    let rerun = ctx.is_rerun();
    match read_quiet(ctx.shard, ctx.client.db, ctx.now_ms, key).map(|z| z.is_some()) {
        Ok(found) => Ok(found),
        Err(_) if rerun => Ok(false),
        Err(e) => Err(e),
    }
}

/// Pops from the first non-empty key and replies `[key, [[member, score], ...]]`; false
/// (nothing replied) when every key is empty.
fn mpop_first(ctx: &mut Ctx<'_>, a: &MpopArgs<'_>) -> Result<bool, CmdError> {
    for k in &a.keys {
        if !poppable(ctx, k)? {
            continue;
        }
        let items = pop(ctx, k, a.count, a.max);
        ctx.out.array(2);
        ctx.out.bulk(k);
        ctx.out.array(items.len());
        for (m, s) in &items {
            ctx.out.array(2);
            ctx.out.bulk(m);
            ctx.out.double(*s);
        }
        return Ok(true);
    }
    Ok(false)
}

/// ZMPOP numkeys key [key ...] MIN|MAX [COUNT count].
fn zmpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let a = parse_mpop(argv, 1)?;
    if !mpop_first(ctx, &a)? {
        ctx.out.null_array();
    }
    Ok(())
}

/// BZMPOP timeout numkeys key [key ...] MIN|MAX [COUNT count].
fn bzmpop(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let deadline = parse_timeout(arg(argv, 1), ctx.now_ms)?;
    let a = parse_mpop(argv, 2)?;
    if !mpop_first(ctx, &a)? {
        ctx.block(&a.keys, deadline);
    }
    Ok(())
}

/// BZPOPMIN / BZPOPMAX key [key ...] timeout: `[key, member, score]`.
fn bzpop_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], max: bool) -> Result<(), CmdError> {
    let deadline = parse_timeout(argv.last().copied().unwrap_or_default(), ctx.now_ms)?;
    let keys = argv.get(1..argv.len() - 1).unwrap_or_default();
    for key in keys {
        if !poppable(ctx, key)? {
            continue;
        }
        let items = pop(ctx, key, 1, max);
        if let Some((m, s)) = items.first() {
            ctx.out.array(3);
            ctx.out.bulk(key);
            ctx.out.bulk(m);
            ctx.out.double(*s);
            return Ok(());
        }
    }
    ctx.block(keys, deadline);
    Ok(())
}

fn bzpopmin(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    bzpop_generic(ctx, argv, false)
}

fn bzpopmax(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    bzpop_generic(ctx, argv, true)
}

fn zremrange_generic(ctx: &mut Ctx<'_>, argv: &[&[u8]], kind: RangeType) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let (a, b) = (arg(argv, 2), arg(argv, 3));
    let range = Range::parse(kind, a, b)?;
    let members: Vec<Vec<u8>> = match read_quiet(ctx.shard, ctx.client.db, ctx.now_ms, key)? {
        Some(z) => select(z, &range, false, 0, -1)
            .into_iter()
            .map(|(m, _)| m.to_vec())
            .collect(),
        None => {
            ctx.out.int(0);
            return Ok(());
        }
    };
    for m in &members {
        rem_member(ctx, key, m);
    }
    if !members.is_empty() {
        let event = match kind {
            RangeType::Score => "zremrangebyscore",
            RangeType::Lex => "zremrangebylex",
            _ => "zremrangebyrank",
        };
        ctx.notify_then_del(notify::ZSET, event, key);
    }
    ctx.out.int(members.len() as i64);
    Ok(())
}

fn zremrangebyrank(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zremrange_generic(ctx, argv, RangeType::Rank)
}

fn zremrangebyscore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zremrange_generic(ctx, argv, RangeType::Score)
}

fn zremrangebylex(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zremrange_generic(ctx, argv, RangeType::Lex)
}

// ---------------------------------------------------------------------------------------------
// ZRANDMEMBER ZSCAN
// ---------------------------------------------------------------------------------------------

/// Probes before a sparse table falls back to picking by position.
const RANDOM_PROBES_MAX: usize = 64;

fn random_item<'a>(z: &'a ZSetCrdt, rng: &mut impl rand::Rng) -> Option<(&'a [u8], f64)> {
    let n = z.bucket_count();
    if n == 0 || z.is_empty() {
        return None;
    }
    for _ in 0..RANDOM_PROBES_MAX {
        if let Some(x) = z.bucket(rng.random_range(0..n)) {
            return Some(x);
        }
    }
    z.iter_unordered().nth(rng.random_range(0..z.len()))
}

impl<'a> super::set::Buckets for &'a ZSetCrdt {
    type Item = (&'a [u8], f64);
    fn bucket_count(&self) -> usize {
        ZSetCrdt::bucket_count(self)
    }
    fn bucket(&self, index: usize) -> Option<(&'a [u8], f64)> {
        ZSetCrdt::bucket(self, index)
    }
    fn list(&self) -> Vec<(&'a [u8], f64)> {
        self.iter_unordered().collect()
    }
}

fn zrandmember(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let mut rng = rand::rng();
    if argv.len() < 3 {
        match read(ctx.shard, ctx.client.db, ctx.now_ms, key)? {
            Some(z) => match random_item(z, &mut rng) {
                Some((m, _)) => ctx.out.bulk(m),
                None => ctx.out.null(),
            },
            None => ctx.out.null(),
        }
        return Ok(());
    }
    let l = int_arg(arg(argv, 2))?;
    if l == i64::MIN {
        return Err(CmdError::Err(
            "value is out of range, value must between -9223372036854775807 and 9223372036854775807"
                .to_string(),
        ));
    }
    if argv.len() > 4 || (argv.len() == 4 && !eq_ic(arg(argv, 3), "withscores")) {
        return Err(CmdError::Syntax);
    }
    let withscores = argv.len() == 4;
    if withscores && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&l) {
        return Err(CmdError::Err("value is out of range".to_string()));
    }
    let z = match read(ctx.shard, ctx.client.db, ctx.now_ms, key)? {
        Some(z) if l != 0 => z,
        _ => {
            ctx.out.array(0);
            return Ok(());
        }
    };
    if l < 0 {
        super::set::random_repeats(l)?;
    }
    let items: Vec<(&[u8], f64)> = if l < 0 {
        let n = l.unsigned_abs() as usize;
        let mut sampler = super::set::BucketSampler::new(z);
        (0..n).filter_map(|_| sampler.pick(&mut rng)).collect()
    } else {
        let count = l as usize;
        if count >= z.len() {
            // Redis replies the whole set, walking its listpack from the tail.
            z.iter().rev().collect()
        } else {
            let mut all: Vec<(&[u8], f64)> = z.iter_unordered().collect();
            for i in 0..count {
                let j = rng.random_range(i..all.len());
                all.swap(i, j);
            }
            all.truncate(count);
            all
        }
    };
    reply_items(ctx.out, &items, withscores);
    Ok(())
}

fn zscan(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let cursor = super::args::parse_cursor(arg(argv, 2))
        .ok_or_else(|| CmdError::Err("invalid cursor".to_string()))?;
    let ScanOptions { count, pattern, .. } = scan_options(argv, 3, false)?;
    let limits = ctx.shard.config.zset_listpack();
    let Some(z) = read(ctx.shard, ctx.client.db, ctx.now_ms, key)? else {
        ctx.out.array(2);
        ctx.out.bulk(b"0");
        ctx.out.array(0);
        return Ok(());
    };
    let (next, items): (u64, Vec<(&[u8], f64)>) = if encoding(z, limits) == "listpack" {
        (0, z.iter().collect())
    } else {
        super::set::scan_buckets(cursor, count, z.bucket_count(), z.scan_space(), |i| {
            z.bucket(i)
        })
    };
    let items: Vec<(&[u8], f64)> = items
        .into_iter()
        .filter(|(m, _)| pattern.is_none_or(|p| crate::glob::matches(p, m, false)))
        .collect();
    ctx.out.array(2);
    let mut b = itoa::Buffer::new();
    ctx.out.bulk(b.format(next).as_bytes());
    ctx.out.array(items.len() * 2);
    for (m, s) in items {
        ctx.out.bulk(m);
        ctx.out
            .bulk(crate::resp::reply::format_double(s).as_bytes());
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// ZUNION ZINTER ZDIFF and their STORE forms, ZINTERCARD
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum SetOp {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

/// Redis's `zunionInterAggregate` (a NaN sum of `inf` and `-inf` is 0).
fn aggregate(target: &mut f64, val: f64, aggr: Aggregate) {
    match aggr {
        Aggregate::Sum => {
            *target += val;
            if target.is_nan() {
                *target = 0.0;
            }
        }
        Aggregate::Min => {
            if val < *target {
                *target = val;
            }
        }
        Aggregate::Max => {
            if val > *target {
                *target = val;
            }
        }
    }
}

/// One distinct input key: its members with scores (a set's members score 1), and an index
/// by member once some input after the first names it.
struct Input {
    items: Vec<(Vec<u8>, f64)>,
    map: hashbrown::HashMap<Vec<u8>, f64>,
}

/// One input as named: which `Input` (a key named many times is copied once, so memory stays
/// within the data's size whatever numkeys is) and its weight.
struct Src {
    input: usize,
    weight: f64,
}

const NO_ITEMS: &[(Vec<u8>, f64)] = &[];

/// Redis's `zunionInterDiffGenericCommand`; `numkeys_idx` is the index of numkeys.
fn zsetop_generic(
    ctx: &mut Ctx<'_>,
    argv: &[&[u8]],
    numkeys_idx: usize,
    dst: Option<&[u8]>,
    op: SetOp,
    card_only: bool,
) -> Result<(), CmdError> {
    let setnum = int_arg(arg(argv, numkeys_idx))?;
    if setnum < 1 {
        return Err(CmdError::Err(format!(
            "at least 1 input key is needed for '{}' command",
            ctx.spec.meta.name
        )));
    }
    if setnum > (argv.len() - (numkeys_idx + 1)) as i64 {
        return Err(CmdError::Syntax);
    }
    let setnum = setnum as usize;
    let mut srcs: Vec<Src> = Vec::with_capacity(setnum);
    let mut inputs: Vec<Input> = Vec::new();
    let mut by_key: hashbrown::HashMap<&[u8], usize> = hashbrown::HashMap::new();
    for &k in argv.iter().skip(numkeys_idx + 1).take(setnum) {
        let db = ctx.db();
        let state = if dst.is_some() {
            ctx.shard.lookup_quiet(db, k, ctx.now_ms).map(|e| &e.state)
        } else {
            ctx.shard.lookup_read(db, k, ctx.now_ms)
        };
        if let Some(&input) = by_key.get(k) {
            srcs.push(Src { input, weight: 1.0 });
            continue;
        }
        let items: Vec<(Vec<u8>, f64)> = match state {
            None => Vec::new(),
            Some(s) => match s.type_tag() {
                Some(TypeTag::ZSet) => s
                    .zset()
                    .map(|z| z.iter().map(|(m, sc)| (m.to_vec(), sc)).collect())
                    .unwrap_or_default(),
                Some(TypeTag::Set) => s
                    .set()
                    .map(|st| st.members().map(|m| (m.to_vec(), 1.0)).collect())
                    .unwrap_or_default(),
                Some(_) => return Err(CmdError::WrongType),
                None => Vec::new(),
            },
        };
        by_key.insert(k, inputs.len());
        srcs.push(Src {
            input: inputs.len(),
            weight: 1.0,
        });
        inputs.push(Input {
            items,
            map: hashbrown::HashMap::new(),
        });
    }
    let mut aggr = Aggregate::Sum;
    let mut withscores = false;
    let mut limit: i64 = 0;
    let mut j = numkeys_idx + 1 + setnum;
    while j < argv.len() {
        let remaining = argv.len() - j;
        let a = arg(argv, j);
        if op != SetOp::Diff && !card_only && remaining > setnum && eq_ic(a, "weights") {
            j += 1;
            for s in srcs.iter_mut() {
                s.weight = parse_score(arg(argv, j))
                    .ok_or_else(|| CmdError::Err("weight value is not a float".to_string()))?;
                j += 1;
            }
        } else if op != SetOp::Diff && !card_only && remaining >= 2 && eq_ic(a, "aggregate") {
            let v = arg(argv, j + 1);
            aggr = if eq_ic(v, "sum") {
                Aggregate::Sum
            } else if eq_ic(v, "min") {
                Aggregate::Min
            } else if eq_ic(v, "max") {
                Aggregate::Max
            } else {
                return Err(CmdError::Syntax);
            };
            j += 2;
        } else if dst.is_none() && !card_only && eq_ic(a, "withscores") {
            withscores = true;
            j += 1;
        } else if card_only && remaining >= 2 && eq_ic(a, "limit") {
            // `getPositiveLongFromObjectOrReply` with a message: a non-integer says it too.
            limit = match parse_i64(arg(argv, j + 1)) {
                Some(v) if v >= 0 => v,
                _ => return Err(CmdError::Err("LIMIT can't be negative".to_string())),
            };
            j += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let len_of = |i: usize| inputs.get(i).map_or(0, |x| x.items.len());
    if op != SetOp::Diff {
        // Smallest inputs first (stable, as glibc's qsort is a merge sort here).
        srcs.sort_by_key(|s| len_of(s.input));
    }
    for s in srcs.iter().skip(1) {
        if let Some(x) = inputs.get_mut(s.input) {
            if x.map.is_empty() {
                x.map = x.items.iter().cloned().collect();
            }
        }
    }
    let items_of = |i: usize| inputs.get(i).map_or(NO_ITEMS, |x| x.items.as_slice());
    let map_get = |i: usize, m: &[u8]| inputs.get(i).and_then(|x| x.map.get(m)).copied();
    let mut poll = crate::stop::Poll::new();
    let mut result: Vec<(Vec<u8>, f64)> = Vec::new();
    match op {
        SetOp::Inter => {
            if let Some((first, rest)) = srcs.split_first() {
                for (m, sc) in items_of(first.input) {
                    if poll.stop() {
                        return Err(CmdError::ShuttingDown);
                    }
                    let mut score = first.weight * sc;
                    if score.is_nan() {
                        score = 0.0;
                    }
                    let mut all = true;
                    for s in rest {
                        match map_get(s.input, m) {
                            Some(v) => aggregate(&mut score, v * s.weight, aggr),
                            None => {
                                all = false;
                                break;
                            }
                        }
                    }
                    if all {
                        result.push((m.clone(), score));
                        if card_only && limit > 0 && result.len() as i64 >= limit {
                            break;
                        }
                    }
                }
            }
        }
        SetOp::Union => {
            let mut acc: hashbrown::HashMap<Vec<u8>, f64> = hashbrown::HashMap::new();
            for s in &srcs {
                for (m, sc) in items_of(s.input) {
                    if poll.stop() {
                        return Err(CmdError::ShuttingDown);
                    }
                    let mut score = s.weight * sc;
                    if score.is_nan() {
                        score = 0.0;
                    }
                    match acc.get_mut(m) {
                        Some(t) => aggregate(t, score, aggr),
                        None => {
                            acc.insert(m.clone(), score);
                        }
                    }
                }
            }
            result = acc.into_iter().collect();
        }
        SetOp::Diff => {
            if let Some((first, rest)) = srcs.split_first() {
                for (m, sc) in items_of(first.input) {
                    if poll.stop() {
                        return Err(CmdError::ShuttingDown);
                    }
                    if rest.iter().all(|s| map_get(s.input, m).is_none()) {
                        result.push((m.clone(), *sc));
                    }
                }
            }
        }
    }
    if card_only {
        ctx.out.int(result.len() as i64);
        return Ok(());
    }
    result.sort_by(|a, b| {
        a.1.partial_cmp(&b.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.0.cmp(&b.0))
    });
    match dst {
        Some(dst) => {
            let event = match op {
                SetOp::Union => "zunionstore",
                SetOp::Inter => "zinterstore",
                SetOp::Diff => "zdiffstore",
            };
            let n = store(ctx, dst, &result, event);
            ctx.out.int(n as i64);
        }
        None => reply_items(ctx.out, &result, withscores),
    }
    Ok(())
}

fn zunion(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zsetop_generic(ctx, argv, 1, None, SetOp::Union, false)
}

fn zinter(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zsetop_generic(ctx, argv, 1, None, SetOp::Inter, false)
}

fn zdiff(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zsetop_generic(ctx, argv, 1, None, SetOp::Diff, false)
}

fn zunionstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let dst = arg(argv, 1);
    zsetop_generic(ctx, argv, 2, Some(dst), SetOp::Union, false)
}

fn zinterstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let dst = arg(argv, 1);
    zsetop_generic(ctx, argv, 2, Some(dst), SetOp::Inter, false)
}

fn zdiffstore(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let dst = arg(argv, 1);
    zsetop_generic(ctx, argv, 2, Some(dst), SetOp::Diff, false)
}

fn zintercard(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    zsetop_generic(ctx, argv, 1, None, SetOp::Inter, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SORT and SORT_RO leave the sorted set they read a skiplist, as Redis 7.0's convert it;
    /// a set emptied and written again starts as a listpack.
    #[test]
    fn sort_converts_a_sorted_set_to_a_skiplist() {
        let mut t = crate::cmd::testing::Harness::new();
        t.run(&["ZADD", "z", "1", "a", "2", "b"]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "z"]), "$8\r\nlistpack\r\n");
        assert_eq!(
            t.run(&["SORT_RO", "z", "ALPHA"]),
            "*2\r\n$1\r\na\r\n$1\r\nb\r\n"
        );
        assert_eq!(t.run(&["OBJECT", "ENCODING", "z"]), "$8\r\nskiplist\r\n");
        t.run(&["ZADD", "y", "1", "a"]);
        t.run(&["SORT", "y", "BY", "nosort"]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "y"]), "$8\r\nskiplist\r\n");
        t.run(&["ZREM", "y", "a"]);
        t.run(&["ZADD", "y", "1", "a"]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "y"]), "$8\r\nlistpack\r\n");
    }

    /// Redis's replies to `-0`: the increment of a new member as given, a stored score
    /// without its sign (a listpack keeps -0 as 0), and 0 + -0 = 0 for an existing one.
    #[test]
    fn negative_zero_scores_reply_as_redis_does() {
        let mut t = crate::cmd::testing::Harness::new();
        assert_eq!(t.run(&["ZINCRBY", "z", "-0", "b"]), "$2\r\n-0\r\n");
        assert_eq!(t.run(&["ZSCORE", "z", "b"]), "$1\r\n0\r\n");
        assert_eq!(t.run(&["ZADD", "z", "INCR", "-0", "c"]), "$2\r\n-0\r\n");
        assert_eq!(t.run(&["ZADD", "z", "-0", "a"]), ":1\r\n");
        assert_eq!(t.run(&["ZSCORE", "z", "a"]), "$1\r\n0\r\n");
        assert_eq!(t.run(&["ZINCRBY", "z", "-0", "a"]), "$1\r\n0\r\n");
    }

    #[test]
    fn score_bounds_parse_like_zslparserange() {
        assert_eq!(parse_score_bound(b"(1.5"), Some(Bound::Excluded(1.5)));
        assert_eq!(
            parse_score_bound(b"-inf"),
            Some(Bound::Included(f64::NEG_INFINITY))
        );
        assert_eq!(
            parse_score_bound(b"(+inf"),
            Some(Bound::Excluded(f64::INFINITY))
        );
        assert_eq!(parse_score_bound(b"x"), None);
        assert_eq!(parse_score_bound(b"nan"), None);
    }
}

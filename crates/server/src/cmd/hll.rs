//! HyperLogLog commands: PFADD PFCOUNT PFMERGE, and PFDEBUG PFSELFTEST.
//!
//! Semantics, replies and error texts follow Redis 7.0 (`hyperloglog.c`); the encoding and the
//! algorithms are `meridian_crdt::hll`, so GET of a HyperLogLog shows Redis's bytes. A key is a
//! HyperLogLog when it holds a `Value::Hll` (TYPE says "string", as Redis stores it as a
//! string) or a string whose bytes pass Redis's header checks (`isHLLObjectOrReply`); strings
//! with such a header that are corrupted reply INVALIDOBJ where Redis does.
//!
//! Writes (see `docs/conflicts.md`, "HyperLogLog"):
//! - PFADD: an `HllOp::Add` of every element's `(register, count)`, sent only when a register
//!   changed or the key was created (Redis neither modifies nor propagates otherwise);
//! - PFMERGE: an `HllOp::Merge` of the sources' registers (the destination's own are already
//!   there), dense when an input was dense, as Redis converts the destination then;
//! - PFCOUNT of one key with an invalid cache: an `HllOp::Cache` (Redis writes the cache
//!   into the string and marks the key modified);
//! - a string write (SET, MSET, GETSET...) of a valid HyperLogLog value: a removal of the key,
//!   then `HllOp::Load` of the bytes (`store_string`), so the key is a HyperLogLog again.
//!
//! The corrupted-string paths compute the new bytes here and store them as a string write.

use meridian_crdt::hll::{self, HllOp, REGISTERS};
use meridian_crdt::{Effect, Expire, KeyState, StrView, TypeTag};

use super::{Ctx, Handler};
use crate::error::CmdError;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("pfadd", pfadd),
    ("pfcount", pfcount),
    ("pfmerge", pfmerge),
    ("pfdebug", pfdebug),
    ("pfselftest", pfselftest),
];

/// PFADD/PFCOUNT/PFMERGE on a string that is not a HyperLogLog.
const NOT_HLL: &str = "WRONGTYPE Key is not a valid HyperLogLog string value.";
/// A HyperLogLog string whose registers do not decode.
const CORRUPT: &str = "INVALIDOBJ Corrupted HLL object detected";

fn not_hll() -> CmdError {
    CmdError::Raw(NOT_HLL.to_string())
}

fn corrupt() -> CmdError {
    CmdError::Raw(CORRUPT.to_string())
}

fn arg<'a>(argv: &[&'a [u8]], i: usize) -> &'a [u8] {
    argv.get(i).copied().unwrap_or_default()
}

/// What a key holds, as the HyperLogLog commands see it.
enum Held {
    Missing,
    /// A HyperLogLog value (its bytes are read again where needed).
    Hll,
    /// A string with a HyperLogLog header (a copy of its bytes).
    Str(Vec<u8>),
}

/// Redis's `isHLLObjectOrReply`.
fn classify(state: Option<&KeyState>) -> Result<Held, CmdError> {
    let Some(state) = state else {
        return Ok(Held::Missing);
    };
    match state.type_tag() {
        Some(TypeTag::Hll) => Ok(Held::Hll),
        Some(TypeTag::String) => match state.view_str() {
            Some(StrView::Bytes(b)) if hll::has_hll_header(b) => Ok(Held::Str(b.to_vec())),
            _ => Err(not_hll()),
        },
        None => Ok(Held::Missing),
        Some(_) => Err(CmdError::WrongType),
    }
}

fn hll_bytes(state: Option<&KeyState>) -> &[u8] {
    state.and_then(|s| s.hll()).map_or(&[][..], |h| h.bytes())
}

/// Stores `value` at `key` as a string write would, keeping the TTL when `keep_ttl`: a valid
/// HyperLogLog becomes a HyperLogLog value (removal of the key, then `HllOp::Load`), anything
/// else the string register. SET, MSET, GETSET... come here for valid HyperLogLog values.
pub fn store_string(ctx: &mut Ctx<'_>, key: &[u8], value: &[u8], keep_ttl: bool) {
    let db = ctx.db();
    store_string_on(ctx.shard, db, key, value, keep_ttl, ctx.now_ms);
}

/// `store_string` on `shard`'s database `db`, for writes that run outside a command's context
/// (DEBUG RELOAD NOSAVE's keys).
pub fn store_string_on(
    shard: &mut crate::shard::Shard,
    db: usize,
    key: &[u8],
    value: &[u8],
    keep_ttl: bool,
    now: u64,
) {
    if !hll::is_valid(value) {
        shard.write_key(db, key, now, |state| state.assign_effect(value, keep_ttl));
        return;
    }
    let (exists, ttl) = match shard.lookup_quiet(db, key, now) {
        Some(e) => (true, e.state.expire_at_ms()),
        None => (false, None),
    };
    if exists {
        shard.write_key(db, key, now, |state| state.remove_effect::<&[u8]>());
    }
    let delivered = delivered_context_of(shard);
    shard.write_key(db, key, now, |state| {
        Effect::Hll(HllOp::Load {
            hyll: value,
            seen: raise_context(state, &delivered),
        })
    });
    if let (true, Some(at)) = (keep_ttl, ttl) {
        shard.write_key(db, key, now, |state| {
            state.expire_effect::<&[u8]>(Expire::AtMs(at))
        });
    }
}

/// With peers, what this site has delivered from every origin: a raise carries it besides the
/// key's own stamps, so that a DEL this site had delivered, whose context another site may
/// already have collected, still counts as seen (per-origin FIFO makes it true).
pub(crate) fn delivered_context(ctx: &Ctx<'_>) -> meridian_crdt::VersionVector {
    delivered_context_of(ctx.shard)
}

/// `delivered_context` of `shard`.
fn delivered_context_of(shard: &crate::shard::Shard) -> meridian_crdt::VersionVector {
    if shard.peers > 0 {
        shard.delivered_vv()
    } else {
        meridian_crdt::VersionVector::new()
    }
}

/// What a raise written here at `state` carries as seen: the key's stamps and what this site
/// delivered. A raise concurrent with a removal is dropped (`HllOp::saw`); one written after
/// this site applied the removal must say so, or a site that still holds the removal drops
/// it and one that collected it does not.
pub(crate) fn raise_context(
    state: &KeyState,
    delivered: &meridian_crdt::VersionVector,
) -> meridian_crdt::VersionVector {
    let mut seen = state.observed().stamps;
    seen.merge(delivered);
    seen
}

/// Writes a raise to the HyperLogLog at `key`, carrying what this site had seen there.
fn write_raise(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    make: impl FnOnce(meridian_crdt::VersionVector) -> HllOp<Vec<u8>>,
) {
    let db = ctx.db();
    let delivered = delivered_context(ctx);
    ctx.shard.write_key(db, key, ctx.now_ms, |state| {
        Effect::Hll(make(raise_context(state, &delivered)))
    });
    // Redis unshares the string it modifies: OBJECT ENCODING says "raw".
    ctx.shard.mark_raw_encoding(db, key);
}

/// Whether raising `pairs` would change a register of `b`.
fn raises_any(b: &[u8], pairs: &[(u16, u8)]) -> bool {
    if pairs.len() > 8 {
        return match hll::registers(b) {
            Ok(r) => pairs
                .iter()
                .any(|(i, c)| r.get(usize::from(*i)).is_some_and(|v| c > v)),
            Err(_) => true,
        };
    }
    pairs
        .iter()
        .any(|(i, c)| hll::get_register(b, usize::from(*i)).is_none_or(|v| *c > v))
}

/// PFADD key [element ...]
fn pfadd(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let key = arg(argv, 1);
    let db = ctx.db();
    let now = ctx.now_ms;
    let pairs: Vec<(u16, u8)> = argv
        .get(2..)
        .unwrap_or_default()
        .iter()
        .map(|e| hll::pat_len(e))
        .collect();
    let packed = hll::pack_pairs(pairs.iter().copied());
    let (held, updated) = {
        let state = ctx.shard.lookup_quiet(db, key, now).map(|e| &e.state);
        let held = classify(state)?;
        let updated = match held {
            Held::Missing => true,
            Held::Hll => raises_any(hll_bytes(state), &pairs),
            Held::Str(_) => false,
        };
        (held, updated)
    };
    let updated = match held {
        Held::Str(mut b) => {
            let op = HllOp::Add {
                pairs: &packed[..],
                seen: Default::default(),
            };
            let changed = hll::apply_raise(&mut b, &op).map_err(|_| corrupt())?;
            if changed {
                store_string(ctx, key, &b, true);
                ctx.shard.mark_raw_encoding(db, key);
            }
            changed
        }
        _ => {
            if updated {
                write_raise(ctx, key, |seen| HllOp::Add {
                    pairs: packed,
                    seen,
                });
            }
            updated
        }
    };
    if updated {
        ctx.notify(crate::notify::STRING, "pfadd", key);
    }
    ctx.out.int(i64::from(updated));
    Ok(())
}

/// PFCOUNT key [key ...]
fn pfcount(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let keys = argv.get(1..).unwrap_or_default();
    if keys.len() > 1 {
        let mut max = Box::new([0u8; REGISTERS]);
        for key in keys {
            let state = ctx.shard.lookup_read(db, key, now);
            let merged = match classify(state)? {
                Held::Missing => Ok(()),
                Held::Hll => hll::merge_max(&mut max, hll_bytes(state)),
                Held::Str(b) => hll::merge_max(&mut max, &b),
            };
            merged.map_err(|_| corrupt())?;
        }
        ctx.out.int(hll::count_registers(&max) as i64);
        return Ok(());
    }
    let key = arg(argv, 1);
    let (held, card) = {
        let state = ctx.shard.lookup_read(db, key, now);
        let held = classify(state)?;
        let card = match held {
            Held::Hll => {
                let b = hll_bytes(state);
                if hll::cache_valid(b) {
                    Some((hll::cached(b), false))
                } else {
                    Some((hll::count(b).map_err(|_| corrupt())?, true))
                }
            }
            _ => None,
        };
        (held, card)
    };
    let card = match (held, card) {
        (Held::Missing, _) => {
            ctx.out.int(0);
            return Ok(());
        }
        (Held::Str(mut b), _) => {
            let (c, changed) = hll::count_and_cache(&mut b).map_err(|_| corrupt())?;
            if changed {
                store_string(ctx, key, &b, true);
            }
            ctx.shard.mark_raw_encoding(db, key);
            c
        }
        (Held::Hll, Some((c, stale))) => {
            if stale {
                write_raise(ctx, key, |_| HllOp::Cache);
            } else {
                ctx.shard.mark_raw_encoding(db, key);
            }
            c
        }
        (Held::Hll, None) => 0,
    };
    // Redis replies the cardinality as a signed 64-bit integer.
    ctx.out.int(card as i64);
    Ok(())
}

/// PFMERGE destkey [sourcekey ...]
fn pfmerge(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    let dest = arg(argv, 1);
    // Redis's `max` covers every key, the destination included; the op carries the sources'.
    let mut all = Box::new([0u8; REGISTERS]);
    let mut sources = Box::new([0u8; REGISTERS]);
    let mut use_dense = false;
    let mut dest_held = Held::Missing;
    for (j, key) in argv.get(1..).unwrap_or_default().iter().enumerate() {
        let state = ctx.shard.lookup_read(db, key, now);
        let held = classify(state)?;
        let bytes: &[u8] = match &held {
            Held::Missing => continue,
            Held::Hll => hll_bytes(state),
            Held::Str(b) => b,
        };
        use_dense |= hll::is_dense(bytes);
        hll::merge_max(&mut all, bytes).map_err(|_| corrupt())?;
        if j > 0 {
            hll::merge_max(&mut sources, bytes).map_err(|_| corrupt())?;
        } else {
            dest_held = held;
        }
    }
    match dest_held {
        Held::Str(mut b) => {
            let op = HllOp::Merge {
                pairs: hll::nonzero_pairs(&all),
                dense: use_dense,
                seen: Default::default(),
            };
            hll::apply_raise(&mut b, &op).map_err(|_| corrupt())?;
            store_string(ctx, dest, &b, true);
            ctx.shard.mark_raw_encoding(db, dest);
        }
        _ => {
            let pairs = hll::nonzero_pairs(&sources);
            write_raise(ctx, dest, |seen| HllOp::Merge {
                pairs,
                dense: use_dense,
                seen,
            });
        }
    }
    // Redis notifies PFMERGE as `pfadd`.
    ctx.notify(crate::notify::STRING, "pfadd", dest);
    ctx.out.ok();
    Ok(())
}

/// Converts the HyperLogLog at `key` to the dense encoding (PFDEBUG GETREG and TODENSE):
/// an `HllOp::Merge` of no registers with `dense`, so every site converts it too; a string
/// with a HyperLogLog header is rewritten as a string. Returns whether it was sparse.
fn to_dense(ctx: &mut Ctx<'_>, key: &[u8], held: Held) -> Result<bool, CmdError> {
    let db = ctx.db();
    let now = ctx.now_ms;
    match held {
        Held::Missing => Ok(false),
        Held::Str(mut b) => {
            if hll::is_dense(&b) {
                return Ok(false);
            }
            hll::sparse_to_dense(&mut b).map_err(|_| corrupt())?;
            store_string(ctx, key, &b, true);
            ctx.shard.mark_raw_encoding(db, key);
            Ok(true)
        }
        Held::Hll => {
            let sparse = !hll::is_dense(hll_bytes(
                ctx.shard.lookup_quiet(db, key, now).map(|e| &e.state),
            ));
            if sparse {
                write_raise(ctx, key, |seen| HllOp::Merge {
                    pairs: Vec::new(),
                    dense: true,
                    seen,
                });
            }
            Ok(sparse)
        }
    }
}

/// The bytes of the HyperLogLog at `key` (after `classify`).
fn current_bytes(ctx: &mut Ctx<'_>, key: &[u8]) -> Vec<u8> {
    let db = ctx.db();
    let now = ctx.now_ms;
    match ctx.shard.lookup_quiet(db, key, now) {
        Some(e) => match e.state.hll() {
            Some(h) => h.bytes().to_vec(),
            None => match e.state.view_str() {
                Some(StrView::Bytes(b)) => b.to_vec(),
                _ => Vec::new(),
            },
        },
        None => Vec::new(),
    }
}

/// PFDEBUG GETREG|DECODE|ENCODING|TODENSE key (Redis's `pfdebugCommand`).
fn pfdebug(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let sub = arg(argv, 1);
    let key = arg(argv, 2);
    let db = ctx.db();
    let now = ctx.now_ms;
    let held = classify(ctx.shard.lookup_quiet(db, key, now).map(|e| &e.state))?;
    if matches!(held, Held::Missing) {
        return Err(CmdError::Err(
            "The specified key does not exist".to_string(),
        ));
    }
    let name = String::from_utf8_lossy(sub).into_owned();
    let known = ["getreg", "decode", "encoding", "todense"];
    if !known.iter().any(|k| sub.eq_ignore_ascii_case(k.as_bytes())) {
        return Err(CmdError::Err(format!(
            "Unknown PFDEBUG subcommand '{name}'"
        )));
    }
    if argv.len() != 3 {
        return Err(CmdError::Err(format!(
            "Wrong number of arguments for the '{name}' subcommand"
        )));
    }
    if sub.eq_ignore_ascii_case(b"getreg") {
        to_dense(ctx, key, held)?;
        let bytes = current_bytes(ctx, key);
        let regs = hll::registers(&bytes).map_err(|_| corrupt())?;
        ctx.out.array(REGISTERS);
        for r in regs.iter() {
            ctx.out.int(i64::from(*r));
        }
    } else if sub.eq_ignore_ascii_case(b"decode") {
        let bytes = current_bytes(ctx, key);
        if hll::is_dense(&bytes) {
            return Err(CmdError::Err("HLL encoding is not sparse".to_string()));
        }
        ctx.out.bulk(decode_sparse(&bytes).as_bytes());
    } else if sub.eq_ignore_ascii_case(b"encoding") {
        let bytes = current_bytes(ctx, key);
        ctx.out.simple(if hll::is_dense(&bytes) {
            "dense"
        } else {
            "sparse"
        });
    } else {
        let converted = to_dense(ctx, key, held)?;
        ctx.out.int(i64::from(converted));
    }
    Ok(())
}

/// PFDEBUG DECODE: the sparse opcodes as Redis prints them (`z:len`, `Z:len`, `v:value,len`).
fn decode_sparse(b: &[u8]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut p = hll::HDR_SIZE;
    while let Some(&op) = b.get(p) {
        if op & 0xc0 == 0 {
            // ZERO: 00xxxxxx, run of xxxxxx + 1 zero registers.
            out.push(format!("z:{}", (op & 0x3f) + 1));
            p += 1;
        } else if op & 0xc0 == 0x40 {
            // XZERO: 01xxxxxx yyyyyyyy, run of (xxxxxx << 8 | yyyyyyyy) + 1.
            let low = b.get(p + 1).copied().unwrap_or(0);
            out.push(format!(
                "Z:{}",
                ((usize::from(op & 0x3f) << 8) | usize::from(low)) + 1
            ));
            p += 2;
        } else {
            // VAL: 1vvvvvxx, run of xx + 1 registers of value vvvvv + 1.
            out.push(format!("v:{},{}", ((op >> 2) & 0x1f) + 1, (op & 0x3) + 1));
            p += 1;
        }
    }
    out.join(" ")
}

/// Cycles of PFSELFTEST's register test (`HLL_TEST_CYCLES`).
const SELFTEST_CYCLES: usize = 1000;
/// Elements PFSELFTEST adds to check the estimate (Redis's 10 million).
const SELFTEST_ELEMENTS: u64 = 10_000_000;

/// PFSELFTEST: Redis's self test of the HyperLogLog implementation: register packing of the
/// dense encoding, then the estimate's error at each power of ten up to 10 million elements,
/// with a sparse and a dense copy that must agree. Runs on the shard thread, as in Redis.
fn pfselftest(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let failed = |m: String| Err(CmdError::Raw(format!("TESTFAILED {m}")));
    let mut seed = ctx.now_ms | 1;
    let mut rand = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    // Test 1: every register keeps its value and leaves its neighbours alone.
    for _ in 0..SELFTEST_CYCLES {
        let mut dense = hll::create();
        hll::sparse_to_dense(&mut dense).map_err(|_| corrupt())?;
        let values: Vec<u8> = (0..REGISTERS)
            .map(|_| (rand() as u8) & hll::REGISTER_MAX)
            .collect();
        for (i, v) in values.iter().enumerate() {
            hll::set_register(&mut dense, i, *v).map_err(|_| corrupt())?;
        }
        for (i, v) in values.iter().enumerate() {
            let got = hll::get_register(&dense, i).unwrap_or(u8::MAX);
            if got != *v {
                return failed(format!("Register {i} should be {v} but is {got}"));
            }
        }
    }
    // Test 2: the estimate's error, sparse and dense side by side.
    let mut dense = hll::create();
    hll::sparse_to_dense(&mut dense).map_err(|_| corrupt())?;
    let mut sparse = hll::create();
    let relerr = 1.04 / (REGISTERS as f64).sqrt();
    let base = rand();
    let mut checkpoint: u64 = 1;
    for j in 1..=SELFTEST_ELEMENTS {
        let ele = (j ^ base).to_ne_bytes();
        let (index, count) = hll::pat_len(&ele);
        hll::set_register(&mut dense, usize::from(index), count).map_err(|_| corrupt())?;
        hll::set_register(&mut sparse, usize::from(index), count).map_err(|_| corrupt())?;
        if j != checkpoint {
            continue;
        }
        if (j as usize) < hll::SPARSE_MAX_BYTES / 2 && hll::is_dense(&sparse) {
            return failed("sparse encoding not used".to_string());
        }
        let card = hll::count(&dense).map_err(|_| corrupt())?;
        if card != hll::count(&sparse).map_err(|_| corrupt())? {
            return failed("dense/sparse disagree".to_string());
        }
        let maxerr = if j == 10 {
            1
        } else {
            (relerr * 6.0 * checkpoint as f64).ceil() as u64
        };
        let abserr = checkpoint.abs_diff(card);
        if abserr > maxerr {
            return failed(format!("Too big error. card:{checkpoint} abserr:{abserr}"));
        }
        checkpoint *= 10;
    }
    ctx.out.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raises_any_sees_new_registers() {
        let mut b = hll::create();
        let p = hll::pat_len(b"a");
        assert!(raises_any(&b, &[p]));
        hll::set_register(&mut b, usize::from(p.0), p.1).unwrap();
        assert!(!raises_any(&b, &[p]));
        let many: Vec<(u16, u8)> = (0..20).map(|_| p).collect();
        assert!(!raises_any(&b, &many));
    }
}

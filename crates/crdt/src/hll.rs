//! HyperLogLog (PFADD, PFCOUNT, PFMERGE): Redis 7.0's encoding and algorithms, replicated as
//! register raises merged by maximum, where a DEL wins over concurrent raises.
//!
//! # Redis's representation, byte for byte
//! The value is Redis's own string: a 16-byte header (`"HYLL"`, the encoding byte, 3 unused
//! bytes, the cached cardinality as 8 little-endian bytes whose top bit marks it invalid), then
//! either the sparse opcodes (ZERO, XZERO, VAL) or the 12288 bytes of 16384 dense 6-bit
//! registers. Every update runs Redis's own algorithm on these bytes (`hllSparseSet` with its
//! run splitting, the 5-opcode VAL merge and the promotion to dense past
//! `SPARSE_MAX_BYTES`, `hllDenseSet`, `hllSparseToDense`), so a single site shows exactly the
//! bytes Redis shows for the same commands. Counting is Redis 7.0's `hllCount` (the register
//! histogram and Ertl's estimator, `hllSigma`/`hllTau`).
//!
//! # Replication
//! A write is a *raise*: PFADD sends the `(register, count)` pair of every element, PFMERGE
//! the non-zero registers of its sources, a SET of a HyperLogLog value its bytes (`Load`).
//! Applying a raise sets each register to the maximum, so raises commute and are idempotent
//! as far as the registers go. The sparse layout and the cache bytes depend on the order of
//! the writes (as in Redis, where the same registers can have several sparse layouts), so
//! every site applies a key's writes in stamp order: a write after every pending one applies
//! in place; an earlier one (concurrent, from another site) rebuilds the bytes from those
//! before the pending writes (`base`). PFCOUNT's cache update is a `Cache` op, applied
//! everywhere as "validate the cache from your registers" at its place in that order, so
//! the bytes GET shows, cache flag included, are the same at every site once the same writes
//! arrived. Equality of two values (`PartialEq`) is equality of registers, liveness and
//! metadata: a site that decoded an older state layout may still differ in the layout.
//!
//! # DEL wins (docs/conflicts.md, "HyperLogLog")
//! Every raise carries `seen`: everything its site had observed at the key (stamps and removal
//! contexts). A raise is live exactly when, for every removal `d` delivered (DEL, SET...,
//! each with its observed context `O_d`), it is not covered by `O_d` and `seen ⊇ O_d`: a raise
//! that had not seen everything the removal had seen was concurrent with it and loses. The
//! live set is a function of the set of delivered writes, hence the same at every site:
//! - a removal arriving after raises: `remove_observed` drops the pending raises that fail the
//!   test and rebuilds the bytes from the survivors, in their application order;
//! - a raise arriving after removals: `KeyState::apply` drops it when `seen` does not
//!   dominate the key's removal contexts (`HllOp::saw`), before it reaches this type.
//!
//! Writes are held individually (`pending`, in stamp order) until `collect` finds them
//! stable, then folded: only their stamps and contexts are kept (`seen`), and `base`
//! advances past them. A removal arriving after a fold removes
//! the folded raises as a whole: with causal stability (every write concurrent with or seen by
//! a stable write has been delivered everywhere) such a removal had seen them. With no peers
//! every write is stable at once, so a single site holds just the bytes.

use std::cell::OnceCell;
use std::hash::{Hash, Hasher};

use crate::codec::{self, DecodeError, Reader};
use crate::dot::{Context, Stamp, VersionVector};
use crate::op::Observed;

/// Register index bits.
pub const HLL_P: u32 = 14;
/// Hash bits left for the run of zeroes.
pub const HLL_Q: u32 = 64 - HLL_P;
/// Number of registers.
pub const REGISTERS: usize = 1 << HLL_P;
/// Header bytes: magic, encoding, 3 unused, cached cardinality.
pub const HDR_SIZE: usize = 16;
/// Bytes of a dense HyperLogLog.
pub const DENSE_SIZE: usize = HDR_SIZE + (REGISTERS * 6).div_ceil(8);
/// `hll-sparse-max-bytes` (Redis's default): a sparse value promotes to dense past this.
pub const SPARSE_MAX_BYTES: usize = 3000;
/// MurmurHash64A seed used for elements.
pub const HASH_SEED: u64 = 0xadc8_3b19;
/// Largest register value.
pub const REGISTER_MAX: u8 = 63;

const ENC_DENSE: u8 = 0;
const ENC_SPARSE: u8 = 1;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const XZERO_MAX_LEN: usize = 16384;
/// 0.5 / ln(2).
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

/// The HyperLogLog bytes are corrupted (Redis's "INVALIDOBJ Corrupted HLL object detected").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

// ---------------------------------------------------------------------------------------------
// Hashing
// ---------------------------------------------------------------------------------------------

/// MurmurHash2, 64-bit version, as Redis has it (little-endian reads on every platform).
pub fn murmur64a(key: &[u8], seed: u64) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h = seed ^ (key.len() as u64).wrapping_mul(M);
    let chunks = key.chunks_exact(8);
    let tail = chunks.remainder();
    for c in chunks {
        let mut w = [0u8; 8];
        w.copy_from_slice(c);
        let mut k = u64::from_le_bytes(w);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    if !tail.is_empty() {
        for (i, b) in tail.iter().enumerate() {
            h ^= u64::from(*b) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// Redis's `hllPatLen`: the register an element maps to and the length of its `000..1` run.
pub fn pat_len(ele: &[u8]) -> (u16, u8) {
    let hash = murmur64a(ele, HASH_SEED);
    let index = (hash & (REGISTERS as u64 - 1)) as u16;
    let rest = (hash >> HLL_P) | (1u64 << HLL_Q);
    (index, (rest.trailing_zeros() + 1) as u8)
}

// ---------------------------------------------------------------------------------------------
// Dense registers
// ---------------------------------------------------------------------------------------------

fn dense_get(regs: &[u8], i: usize) -> u8 {
    let byte = i * 6 / 8;
    let fb = (i * 6) & 7;
    let b0 = u32::from(regs.get(byte).copied().unwrap_or(0));
    let b1 = u32::from(regs.get(byte + 1).copied().unwrap_or(0));
    (((b0 >> fb) | (b1 << (8 - fb))) & 63) as u8
}

fn dense_put(regs: &mut [u8], i: usize, val: u8) {
    let byte = i * 6 / 8;
    let fb = (i * 6) & 7;
    let fb8 = 8 - fb;
    let v = u32::from(val);
    if let Some(b) = regs.get_mut(byte) {
        *b = ((u32::from(*b) & !(63u32 << fb)) | (v << fb)) as u8;
    }
    if let Some(b) = regs.get_mut(byte + 1) {
        *b = ((u32::from(*b) & !(63u32 >> fb8)) | (v >> fb8)) as u8;
    }
}

/// `hllDenseSet`: raises register `i` to `val`; whether it changed.
fn dense_set(bytes: &mut [u8], i: usize, val: u8) -> bool {
    let regs = bytes.get_mut(HDR_SIZE..).unwrap_or_default();
    if val > dense_get(regs, i) {
        dense_put(regs, i, val);
        true
    } else {
        false
    }
}

// ---------------------------------------------------------------------------------------------
// Sparse opcodes
// ---------------------------------------------------------------------------------------------

fn is_zero(op: u8) -> bool {
    op & 0xc0 == 0
}
fn is_xzero(op: u8) -> bool {
    op & 0xc0 == 0x40
}
fn is_val(op: u8) -> bool {
    op & 0x80 != 0
}
fn zero_len(op: u8) -> usize {
    usize::from(op & 0x3f) + 1
}
fn xzero_len(op: u8, next: u8) -> usize {
    ((usize::from(op & 0x3f) << 8) | usize::from(next)) + 1
}
fn val_value(op: u8) -> u8 {
    ((op >> 2) & 0x1f) + 1
}
fn val_len(op: u8) -> usize {
    usize::from(op & 0x3) + 1
}
fn val_op(val: u8, len: usize) -> u8 {
    (((val - 1) << 2) | (len as u8 - 1)) | 0x80
}
fn push_zeros(seq: &mut Vec<u8>, len: usize) {
    if len > ZERO_MAX_LEN {
        let l = len - 1;
        seq.push(((l >> 8) as u8) | 0x40);
        seq.push((l & 0xff) as u8);
    } else {
        seq.push((len - 1) as u8);
    }
}

fn at(b: &[u8], i: usize) -> u8 {
    b.get(i).copied().unwrap_or(0)
}

/// The runs of a sparse value's opcodes in order, as (first register, length, value): value
/// 0 for ZERO and XZERO runs, 1 to 32 for VAL runs. A byte past the end reads as 0, as `at`
/// reads it; the caller checks that the runs cover exactly `REGISTERS`.
fn sparse_runs(b: &[u8]) -> impl Iterator<Item = (usize, usize, u8)> + '_ {
    let mut p = HDR_SIZE;
    let mut idx = 0usize;
    std::iter::from_fn(move || {
        if p >= b.len() {
            return None;
        }
        let op = at(b, p);
        let (len, val, oplen) = if is_zero(op) {
            (zero_len(op), 0, 1)
        } else if is_xzero(op) {
            (xzero_len(op, at(b, p + 1)), 0, 2)
        } else {
            (val_len(op), val_value(op), 1)
        };
        let start = idx;
        idx += len;
        p += oplen;
        Some((start, len, val))
    })
}

// ---------------------------------------------------------------------------------------------
// Whole-value operations (Redis's hyperloglog.c on a byte vector)
// ---------------------------------------------------------------------------------------------

/// `createHLLObject`: an empty sparse HyperLogLog (one XZERO of 16384 registers).
pub fn create() -> Vec<u8> {
    let mut v = Vec::with_capacity(HDR_SIZE + 2);
    v.extend_from_slice(b"HYLL");
    v.extend_from_slice(&[ENC_SPARSE, 0, 0, 0]);
    v.extend_from_slice(&[0u8; 8]);
    push_zeros(&mut v, XZERO_MAX_LEN);
    v
}

/// `isHLLObjectOrReply`'s checks on a string's bytes: header, magic, a known encoding, and
/// the exact size when dense. The sparse opcodes are not checked (a corrupt one fails later).
pub fn has_hll_header(b: &[u8]) -> bool {
    b.len() >= HDR_SIZE
        && b.starts_with(b"HYLL")
        && match at(b, 4) {
            ENC_DENSE => b.len() == DENSE_SIZE,
            ENC_SPARSE => true,
            _ => false,
        }
}

/// Whether `b` is a complete, uncorrupted HyperLogLog: the header checks, and sparse opcodes
/// that cover exactly 16384 registers. A string write of such bytes makes the key a
/// HyperLogLog value. Both of Redis's sparse walks must accept it: `merge_max` (hllMerge)
/// stops at a run that would pass the last register and accepts what it read, `histogram`
/// (hllSparseSum) counts every run; bytes with runs past the end pass the first and fail the
/// second, and would make a HyperLogLog value PFCOUNT cannot count.
pub fn is_valid(b: &[u8]) -> bool {
    has_hll_header(b)
        && (at(b, 4) == ENC_DENSE
            || (merge_max(&mut [0u8; REGISTERS], b).is_ok() && histogram(b).is_ok()))
}

/// Whether the cached cardinality is valid.
pub fn cache_valid(b: &[u8]) -> bool {
    at(b, 15) & 0x80 == 0
}

/// The cached cardinality (meaningful when `cache_valid`).
pub fn cached(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    if let Some(c) = b.get(8..16) {
        w.copy_from_slice(c);
    }
    u64::from_le_bytes(w)
}

fn set_cache(b: &mut [u8], card: u64) {
    if let Some(c) = b.get_mut(8..16) {
        c.copy_from_slice(&card.to_le_bytes());
    }
}

fn invalidate(b: &mut [u8]) {
    if let Some(x) = b.get_mut(15) {
        *x |= 0x80;
    }
}

/// Whether the value is dense.
pub fn is_dense(b: &[u8]) -> bool {
    at(b, 4) == ENC_DENSE
}

/// `hllSparseToDense` (a no-op when already dense). The header, cache included, is kept.
pub fn sparse_to_dense(b: &mut Vec<u8>) -> Result<(), Corrupt> {
    if at(b, 4) == ENC_DENSE {
        return Ok(());
    }
    let mut dense = vec![0u8; DENSE_SIZE];
    if let (Some(d), Some(s)) = (dense.get_mut(..HDR_SIZE), b.get(..HDR_SIZE)) {
        d.copy_from_slice(s);
    }
    if let Some(e) = dense.get_mut(4) {
        *e = ENC_DENSE;
    }
    let mut idx = 0usize;
    {
        let regs = dense.get_mut(HDR_SIZE..).unwrap_or_default();
        for (start, len, val) in sparse_runs(b) {
            if val > 0 {
                if len + start > REGISTERS {
                    break;
                }
                for i in start..start + len {
                    dense_put(regs, i, val);
                }
            }
            idx = start + len;
        }
    }
    if idx != REGISTERS {
        return Err(Corrupt);
    }
    *b = dense;
    Ok(())
}

/// `hllSparseSet`: raises register `index` to `count` in a sparse value, promoting it to
/// dense when the value does not fit the sparse encoding or would exceed `max_bytes`.
/// Whether the register changed (the cache is invalidated then).
fn sparse_set(b: &mut Vec<u8>, index: usize, count: u8, max_bytes: usize) -> Result<bool, Corrupt> {
    if count > VAL_MAX_VALUE {
        return promote(b, index, count);
    }
    // Step 1: locate the opcode covering `index`.
    let mut end = b.len();
    let mut p = HDR_SIZE;
    let mut first = 0usize;
    let mut prev: Option<usize> = None;
    let mut span = 0usize;
    while p < end {
        let op = at(b, p);
        let mut oplen = 1;
        if is_zero(op) {
            span = zero_len(op);
        } else if is_val(op) {
            span = val_len(op);
        } else {
            span = xzero_len(op, at(b, p + 1));
            oplen = 2;
        }
        if index < first + span {
            break;
        }
        prev = Some(p);
        p += oplen;
        first += span;
    }
    if span == 0 || p >= end {
        return Err(Corrupt);
    }
    let op = at(b, p);
    let (zero, xzero) = (is_zero(op), is_xzero(op));
    let runlen = if zero {
        zero_len(op)
    } else if xzero {
        xzero_len(op, at(b, p + 1))
    } else {
        val_len(op)
    };
    // Step 2: cases A (VAL already >= count), B (VAL of length 1), C (ZERO of length 1).
    let mut simple = false;
    if !zero && !xzero {
        if val_value(op) >= count {
            return Ok(false);
        }
        if runlen == 1 {
            simple = true;
        }
    }
    if zero && runlen == 1 {
        simple = true;
    }
    if simple {
        if let Some(x) = b.get_mut(p) {
            *x = val_op(count, 1);
        }
    } else {
        // Case D: split the opcode into up to three.
        let last = first + span - 1;
        let mut seq: Vec<u8> = Vec::with_capacity(5);
        if zero || xzero {
            if index != first {
                push_zeros(&mut seq, index - first);
            }
            seq.push(val_op(count, 1));
            if index != last {
                push_zeros(&mut seq, last - index);
            }
        } else {
            let cur = val_value(op);
            if index != first {
                seq.push(val_op(cur, index - first));
            }
            seq.push(val_op(count, 1));
            if index != last {
                seq.push(val_op(cur, last - index));
            }
        }
        // Step 3: substitute the new sequence for the old opcode.
        let oldlen = if xzero { 2 } else { 1 };
        if seq.len() > oldlen && b.len() + (seq.len() - oldlen) > max_bytes {
            return promote(b, index, count);
        }
        b.splice(p..(p + oldlen).min(end), seq);
        end = b.len();
    }
    // Step 4: merge adjacent VAL opcodes of equal value, scanning up to 5 opcodes from `prev`.
    let mut p = prev.unwrap_or(HDR_SIZE);
    let mut scanlen = 5;
    while p < end {
        if scanlen == 0 {
            break;
        }
        scanlen -= 1;
        let op = at(b, p);
        if is_xzero(op) {
            p += 2;
            continue;
        } else if is_zero(op) {
            p += 1;
            continue;
        }
        if p + 1 < end && is_val(at(b, p + 1)) {
            let next = at(b, p + 1);
            let (v1, v2) = (val_value(op), val_value(next));
            if v1 == v2 {
                let len = val_len(op) + val_len(next);
                if len <= VAL_MAX_LEN {
                    if let Some(x) = b.get_mut(p + 1) {
                        *x = val_op(v1, len);
                    }
                    b.remove(p);
                    end -= 1;
                    continue;
                }
            }
        }
        p += 1;
    }
    invalidate(b);
    Ok(true)
}

fn promote(b: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    sparse_to_dense(b)?;
    dense_set(b, index, count);
    Ok(true)
}

/// Raises register `index` to `count` whatever the encoding (`hllAdd` after the hash, and
/// PFMERGE's write loop). Whether it changed; a sparse change invalidates the cache.
pub fn set_register(b: &mut Vec<u8>, index: usize, count: u8) -> Result<bool, Corrupt> {
    match at(b, 4) {
        ENC_DENSE => Ok(dense_set(b, index, count)),
        ENC_SPARSE => sparse_set(b, index, count, SPARSE_MAX_BYTES),
        _ => Err(Corrupt),
    }
}

/// `hllMerge`: `max[i] = max(max[i], register i)`. A sparse value whose runs go past the
/// last register is corrupt, as Redis 7.0.15 with the fix for CVE-2025-32023 (Debian's)
/// finds it: 7.0.15 as tagged stopped at such a run and merged what came before.
pub fn merge_max(max: &mut [u8; REGISTERS], b: &[u8]) -> Result<(), Corrupt> {
    if at(b, 4) == ENC_DENSE {
        let regs = b.get(HDR_SIZE..).unwrap_or_default();
        for (i, m) in max.iter_mut().enumerate() {
            let v = dense_get(regs, i);
            if v > *m {
                *m = v;
            }
        }
        return Ok(());
    }
    let mut i = 0usize;
    for (start, len, val) in sparse_runs(b) {
        if val > 0 {
            if len + start > REGISTERS {
                return Err(Corrupt);
            }
            for m in max.iter_mut().skip(start).take(len) {
                if val > *m {
                    *m = val;
                }
            }
        }
        i = start + len;
    }
    if i == REGISTERS { Ok(()) } else { Err(Corrupt) }
}

/// The registers of a value.
pub fn registers(b: &[u8]) -> Result<Box<[u8; REGISTERS]>, Corrupt> {
    let mut r = Box::new([0u8; REGISTERS]);
    merge_max(&mut r, b)?;
    Ok(r)
}

/// One register's value (`None` when corrupted).
pub fn get_register(b: &[u8], index: usize) -> Option<u8> {
    if at(b, 4) == ENC_DENSE {
        return Some(dense_get(b.get(HDR_SIZE..)?, index));
    }
    sparse_runs(b)
        .find(|&(start, len, _)| index < start + len)
        .map(|(_, _, val)| val)
}

/// The register histogram of a value (`hllDenseRegHisto`, `hllSparseRegHisto`).
fn histogram(b: &[u8]) -> Result<[u64; 64], Corrupt> {
    let mut h = [0u64; 64];
    if at(b, 4) == ENC_DENSE {
        let regs = b.get(HDR_SIZE..).unwrap_or_default();
        for i in 0..REGISTERS {
            if let Some(x) = h.get_mut(usize::from(dense_get(regs, i))) {
                *x += 1;
            }
        }
        return Ok(h);
    }
    let mut idx = 0usize;
    for (start, len, val) in sparse_runs(b) {
        idx = start + len;
        if let Some(x) = h.get_mut(usize::from(val)) {
            *x += len as u64;
        }
    }
    if idx == REGISTERS {
        Ok(h)
    } else {
        Err(Corrupt)
    }
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let mut y = 1.0;
    let mut z = x;
    loop {
        x *= x;
        let zp = z;
        z += x * y;
        y += y;
        if zp == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let mut y = 1.0;
    let mut z = 1.0 - x;
    loop {
        x = x.sqrt();
        let zp = z;
        y *= 0.5;
        let d = 1.0 - x;
        z -= d * d * y;
        if zp == z {
            return z / 3.0;
        }
    }
}

/// Redis 7.0's estimate from a register histogram ("New cardinality estimation algorithms for
/// HyperLogLog sketches", Otmar Ertl).
pub fn estimate(h: &[u64; 64]) -> u64 {
    let m = REGISTERS as f64;
    let hq = h.get(HLL_Q as usize + 1).copied().unwrap_or(0) as f64;
    let mut z = m * tau((m - hq) / m);
    for j in (1..=HLL_Q as usize).rev() {
        z += h.get(j).copied().unwrap_or(0) as f64;
        z *= 0.5;
    }
    z += m * sigma(h.first().copied().unwrap_or(0) as f64 / m);
    let e = ALPHA_INF * m * m / z;
    // llroundl: half away from zero; out of range gives x86's "integer indefinite".
    let r = e.round();
    if (-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&r) {
        r as i64 as u64
    } else {
        1u64 << 63
    }
}

/// `hllCount` of one value.
pub fn count(b: &[u8]) -> Result<u64, Corrupt> {
    Ok(estimate(&histogram(b)?))
}

/// `hllCount` of registers (PFCOUNT of several keys).
pub fn count_registers(r: &[u8; REGISTERS]) -> u64 {
    let mut h = [0u64; 64];
    for v in r.iter() {
        if let Some(x) = h.get_mut(usize::from(*v)) {
            *x += 1;
        }
    }
    estimate(&h)
}

/// PFCOUNT of one key on its bytes: the cached value, or a fresh count written to the cache.
/// Returns the count and whether the bytes changed.
pub fn count_and_cache(b: &mut [u8]) -> Result<(u64, bool), Corrupt> {
    if cache_valid(b) {
        return Ok((cached(b), false));
    }
    let c = count(b)?;
    set_cache(b, c);
    Ok((c, true))
}

/// Packs `(index, count)` pairs as `HllOp` payloads carry them (3 bytes each).
pub fn pack_pairs(pairs: impl IntoIterator<Item = (u16, u8)>) -> Vec<u8> {
    let mut v = Vec::new();
    for (i, c) in pairs {
        v.extend_from_slice(&i.to_le_bytes());
        v.push(c);
    }
    v
}

fn pairs(b: &[u8]) -> impl Iterator<Item = (usize, u8)> + '_ {
    b.chunks_exact(3).map(|c| {
        let i = u16::from_le_bytes([at(c, 0), at(c, 1)]);
        (usize::from(i), at(c, 2))
    })
}

fn pairs_ok(b: &[u8]) -> bool {
    b.len() % 3 == 0 && pairs(b).all(|(i, c)| i < REGISTERS && c <= REGISTER_MAX)
}

/// The non-zero registers of a value, packed in index order (a PFMERGE payload).
pub fn nonzero_pairs(r: &[u8; REGISTERS]) -> Vec<u8> {
    pack_pairs(
        r.iter()
            .enumerate()
            .filter(|(_, v)| **v != 0)
            .map(|(i, v)| (i as u16, *v)),
    )
}

/// Raises the registers of `bytes` to those of `src` (both valid values): converts to dense
/// first when `src` is dense, invalidates the cache when a register changed.
fn raise_to(bytes: &mut Vec<u8>, src: &[u8]) {
    let (Ok(mine), Ok(theirs)) = (registers(bytes), registers(src)) else {
        return;
    };
    if is_dense(src) {
        let _ = sparse_to_dense(bytes);
    }
    let mut changed = false;
    for (i, (m, t)) in mine.iter().zip(theirs.iter()).enumerate() {
        if t > m {
            changed |= set_register(bytes, i, *t).unwrap_or(false);
        }
    }
    if changed {
        invalidate(bytes);
    }
}

// ---------------------------------------------------------------------------------------------
// The replicated type
// ---------------------------------------------------------------------------------------------

/// What one write of a HyperLogLog replicates.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HllOp<B: AsRef<[u8]>> {
    /// PFADD: the `(register, count)` pair of every element in argument order (3 bytes each:
    /// index u16 LE, count), including elements that changed nothing locally.
    Add { pairs: B, seen: VersionVector },
    /// PFMERGE: the sources' non-zero registers in index order (same packing); `dense`: the
    /// destination is converted to dense first (some input was dense).
    Merge {
        pairs: B,
        dense: bool,
        seen: VersionVector,
    },
    /// A string write (SET...) of a valid HyperLogLog value, after a removal of the key: on an
    /// empty key these bytes become the value as they are; otherwise their registers merge in.
    Load { hyll: B, seen: VersionVector },
    /// PFCOUNT of one key found the cache invalid: every site validates its cache.
    Cache,
}

impl<B: AsRef<[u8]>> HllOp<B> {
    /// What the write's site had observed at the key (`Cache`: nothing).
    pub fn seen(&self) -> Option<&VersionVector> {
        match self {
            HllOp::Add { seen, .. } | HllOp::Merge { seen, .. } | HllOp::Load { seen, .. } => {
                Some(seen)
            }
            HllOp::Cache => None,
        }
    }

    /// Whether the write had seen every removal merged into `removed` (a removal context):
    /// a raise that had not is concurrent with a removal and loses (DEL wins).
    pub fn saw(&self, removed: &VersionVector) -> bool {
        self.seen().is_none_or(|s| s.dominates(removed))
    }

    fn to_owned_op(&self) -> HllOp<Vec<u8>> {
        match self {
            HllOp::Add { pairs, seen } => HllOp::Add {
                pairs: pairs.as_ref().to_vec(),
                seen: seen.clone(),
            },
            HllOp::Merge { pairs, dense, seen } => HllOp::Merge {
                pairs: pairs.as_ref().to_vec(),
                dense: *dense,
                seen: seen.clone(),
            },
            HllOp::Load { hyll, seen } => HllOp::Load {
                hyll: hyll.as_ref().to_vec(),
                seen: seen.clone(),
            },
            HllOp::Cache => HllOp::Cache,
        }
    }
}

/// Applies a raise to Redis bytes (`bytes` empty: no value yet). Whether the bytes changed
/// in a way PFADD reports (a register raised, or the value created).
pub fn apply_raise<B: AsRef<[u8]>>(bytes: &mut Vec<u8>, op: &HllOp<B>) -> Result<bool, Corrupt> {
    match op {
        HllOp::Add { pairs: p, .. } => {
            let mut changed = false;
            if bytes.is_empty() {
                *bytes = create();
                changed = true;
            }
            for (i, c) in pairs(p.as_ref()) {
                changed |= set_register(bytes, i, c)?;
            }
            if changed {
                invalidate(bytes);
            }
            Ok(changed)
        }
        HllOp::Merge {
            pairs: p, dense, ..
        } => {
            if bytes.is_empty() {
                *bytes = create();
            }
            if *dense {
                sparse_to_dense(bytes)?;
            }
            for (i, c) in pairs(p.as_ref()) {
                set_register(bytes, i, c)?;
            }
            invalidate(bytes);
            Ok(true)
        }
        HllOp::Load { hyll, .. } => {
            if bytes.is_empty() {
                *bytes = hyll.as_ref().to_vec();
                return Ok(true);
            }
            let r = registers(hyll.as_ref())?;
            let merge: HllOp<Vec<u8>> = HllOp::Merge {
                pairs: nonzero_pairs(&r),
                dense: is_dense(hyll.as_ref()),
                seen: VersionVector::new(),
            };
            apply_raise(bytes, &merge)
        }
        HllOp::Cache => {
            if bytes.is_empty() {
                return Ok(false);
            }
            Ok(count_and_cache(bytes)?.1)
        }
    }
}

/// Applies `ops` to `bytes` in their order, as `apply_raise` one by one does, except that a
/// validation whose count `counts` holds (taken when it applied in place, on the same
/// registers) sets that count rather than counting again. The count a validation stores
/// stays in the bytes, invalid, once a later raise changes a register, so it is stored at
/// its place, never left to the end.
fn apply_in_order(bytes: &mut Vec<u8>, ops: &[(Stamp, HllOp<Vec<u8>>)], counts: &[(Stamp, u64)]) {
    for (s, op) in ops {
        match op {
            HllOp::Cache if !bytes.is_empty() && !cache_valid(bytes) => {
                match counts.binary_search_by(|(c, _)| c.cmp(s)) {
                    Ok(i) => {
                        if let Some((_, c)) = counts.get(i) {
                            set_cache(bytes, *c);
                        }
                    }
                    Err(_) => {
                        let _ = count_and_cache(bytes);
                    }
                }
            }
            _ => {
                let _ = apply_raise(bytes, op);
            }
        }
    }
}

/// The value. 8 bytes: everything is boxed (a key holds at most one).
#[derive(Clone, Debug, Default)]
pub struct HllCrdt {
    inner: Option<Box<Inner>>,
}

#[derive(Clone, Debug, Default)]
struct Inner {
    /// Redis's bytes of the visible value; empty when there is none. Its registers are
    /// always exact; while `stale`, its sparse layout and cache flag may not be (what GET
    /// shows is then `shown`).
    bytes: Vec<u8>,
    /// The highest stamp of the live raises.
    live: Option<Stamp>,
    /// Writes not yet stable (raises and cache validations), in stamp order.
    pending: Vec<(Stamp, HllOp<Vec<u8>>)>,
    /// Redis's bytes before the pending writes, kept while there are any (`None` then only
    /// for a state decoded from the layout that did not record them): `bytes` is these
    /// bytes with the pending writes applied in stamp order, so that every site shows the
    /// same bytes, sparse layout and cache flag included, whatever order the writes came in.
    base: Option<Vec<u8>>,
    /// A write came before some pending one and was applied in place: the exact bytes are
    /// `base` with the pending writes replayed, computed when first read (`shown`). Lazy, so
    /// that a run of concurrent writes arriving after a partition costs one replay per
    /// read, not one per write.
    stale: bool,
    /// The replayed bytes while `stale`, once read; taken as `bytes` by the next write.
    shown: OnceCell<Vec<u8>>,
    /// The count each pending validation found when it applied in place as the last
    /// pending write (by stamp): replaying or folding it sets that count instead of
    /// counting again, as long as no earlier write came late (which drops the counts after
    /// it). Not kept in the encoded state.
    counts: Vec<(Stamp, u64)>,
    /// Stamps and contexts of the raises folded by `collect` (live ones only).
    folded: VersionVector,
    /// Stamps of the folded raises alone (duplicate detection).
    folded_stamps: VersionVector,
}

const _: () = assert!(std::mem::size_of::<HllCrdt>() <= 40);

/// `encode_state` layouts (the byte after the bytes): no live value and nothing pending, in
/// the older layout; a live stamp, in the older layout; the layout with the bytes before
/// the pending writes and cache validations among them (what this version writes).
const STATE_NONE: u8 = 0;
const STATE_LIVE: u8 = 1;
const STATE_ORDERED: u8 = 2;

impl Inner {
    /// The bytes before the pending writes: the bytes when nothing is pending; `None` when
    /// unknown (a state decoded from the older layout).
    fn before_pending(&self) -> Option<&[u8]> {
        if self.pending.is_empty() {
            Some(&self.bytes)
        } else {
            self.base.as_deref()
        }
    }

    /// `base` with the pending writes applied in stamp order (`bytes` when `base` is
    /// unknown).
    fn replayed(&self) -> Vec<u8> {
        let Some(base) = &self.base else {
            return self.bytes.clone();
        };
        let mut bytes = base.clone();
        apply_in_order(&mut bytes, &self.pending, &self.counts);
        bytes
    }

    /// Sets the bytes to their replay now.
    fn replay(&mut self) {
        self.bytes = self.replayed();
        self.stale = false;
        self.shown = OnceCell::new();
    }

    /// A write of `stamp` came before some pending one: the counts of the validations after
    /// it no longer hold.
    fn forget_counts_after(&mut self, stamp: Stamp) {
        self.counts.retain(|(s, _)| *s < stamp);
    }

    /// The bytes GET shows: `bytes`, or their replay while `stale`.
    fn exact(&self) -> &[u8] {
        if self.stale {
            self.shown.get_or_init(|| self.replayed())
        } else {
            &self.bytes
        }
    }

    /// Before a write: a replay already computed becomes the bytes.
    fn take_shown(&mut self) {
        if let Some(b) = self.shown.take() {
            self.bytes = b;
            self.stale = false;
        }
    }

    /// Records a write as folded: its stamp and what it had seen.
    fn fold(&mut self, stamp: Stamp, seen: Option<&VersionVector>) {
        self.folded.observe(stamp);
        self.folded_stamps.observe(stamp);
        if let Some(seen) = seen {
            self.folded.merge(seen);
        }
    }
}

impl HllCrdt {
    pub fn new() -> HllCrdt {
        HllCrdt::default()
    }

    /// Applies a local or remote write; false when it was a duplicate or already removed.
    /// (Raises concurrent with a removal already applied are
    /// dropped by `KeyState::apply`, through `HllOp::saw`, before they get here.)
    ///
    /// A write that comes after every pending one (the usual case, and every local write)
    /// applies to the bytes in place; one that comes before some (concurrent writes of
    /// another site) rebuilds them from `base` in stamp order, so the bytes are a function
    /// of the set of writes delivered, as the registers are.
    pub fn apply<B: AsRef<[u8]>>(&mut self, stamp: Stamp, op: &HllOp<B>) -> bool {
        // A validation is kept even where no value shows (removed by a concurrent DEL, or
        // not arrived yet): a raise that comes later with a lower stamp goes before it.
        let cache = matches!(op, HllOp::Cache);
        let inner = self.inner.get_or_insert_with(Box::default);
        if inner.folded_stamps.covers(stamp) {
            return false;
        }
        let Err(at) = inner.pending.binary_search_by(|(s, _)| s.cmp(&stamp)) else {
            return false;
        };
        inner.take_shown();
        if inner.pending.is_empty() {
            inner.base = Some(inner.bytes.clone());
        }
        let last = at == inner.pending.len();
        inner.pending.insert(at, (stamp, op.to_owned_op()));
        if !last {
            inner.forget_counts_after(stamp);
        }
        // Bytes that fail to decode were rejected by `decode_op`; a corrupt local value is
        // never an HllCrdt (only valid bytes become one).
        if cache && !inner.bytes.is_empty() {
            // The registers are exact even while stale: a count taken as the last pending
            // write is what replaying up to it counts.
            if let Ok((c, _)) = count_and_cache(&mut inner.bytes) {
                if last {
                    inner.counts.push((stamp, c));
                }
            }
        } else {
            let _ = apply_raise(&mut inner.bytes, op);
        }
        if !last && inner.base.is_some() {
            inner.stale = true;
        }
        if !cache && inner.live.is_none_or(|l| l < stamp) {
            inner.live = Some(stamp);
        }
        true
    }

    /// `apply` followed by `collect(None)`, for a site whose writes are stable at once (no
    /// peers): the write folds in place, without the copy of the bytes `apply` keeps while a
    /// write is pending. `None`, with nothing changed, when writes are pending here.
    pub fn apply_folded<B: AsRef<[u8]>>(&mut self, stamp: Stamp, op: &HllOp<B>) -> Option<bool> {
        if self.has_metadata() {
            return None;
        }
        let cache = matches!(op, HllOp::Cache);
        if cache && !self.is_live() {
            return Some(false);
        }
        let inner = self.inner.get_or_insert_with(Box::default);
        if inner.folded_stamps.covers(stamp) {
            return Some(false);
        }
        let _ = apply_raise(&mut inner.bytes, op);
        inner.fold(stamp, op.seen());
        if !cache && inner.live.is_none_or(|l| l < stamp) {
            inner.live = Some(stamp);
        }
        if inner.bytes.is_empty() {
            self.inner = None;
        }
        Some(true)
    }

    /// Whether it shows anything (the key exists).
    pub fn is_live(&self) -> bool {
        self.inner.as_ref().is_some_and(|i| !i.bytes.is_empty())
    }

    /// The highest stamp among its live writes (the type-conflict order).
    pub fn live_stamp(&self) -> Option<Stamp> {
        self.inner.as_ref().and_then(|i| i.live)
    }

    /// Holds neither live writes nor metadata.
    pub fn is_blank(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(|i| i.bytes.is_empty() && i.pending.is_empty())
    }

    /// Holds metadata that `collect` would drop: writes kept individually until stable.
    pub fn has_metadata(&self) -> bool {
        self.inner.as_ref().is_some_and(|i| !i.pending.is_empty())
    }

    /// Adds every stamp seen (live writes and what they had seen) to `vv`.
    pub fn observe_into(&self, vv: &mut VersionVector) {
        if let Some(i) = &self.inner {
            vv.merge(&i.folded);
            for (s, op) in &i.pending {
                vv.observe(*s);
                if let Some(seen) = op.seen() {
                    vv.merge(seen);
                }
            }
        }
    }

    /// Adds the stamps of the raises held (live and folded, not their contexts) to `vv`.
    pub fn live_into(&self, vv: &mut VersionVector) {
        if let Some(i) = &self.inner {
            vv.merge(&i.folded_stamps);
            for (s, _) in &i.pending {
                vv.observe(*s);
            }
        }
    }

    /// DEL (or a SET of the key): removes the raises `observed` covers and those concurrent
    /// with it (whose context does not dominate it); folded raises go as a whole.
    pub fn remove_observed(&mut self, observed: &Observed) {
        let o = &observed.stamps;
        if o.is_empty() {
            return;
        }
        let Some(inner) = &mut self.inner else {
            return;
        };
        let before = inner.pending.len();
        inner.pending.retain(|(s, op)| !o.covers(*s) && op.saw(o));
        if inner.pending.len() == before && inner.folded.is_empty() {
            return;
        }
        self.rebuild();
    }

    /// Drops the folded raises and rebuilds the bytes and the live stamp from the pending
    /// writes, in stamp order. Pending validations stay while anything is pending: a raise
    /// may still come that goes before them.
    fn rebuild(&mut self) {
        let Some(inner) = &mut self.inner else {
            return;
        };
        if inner.pending.is_empty() {
            self.inner = None;
            return;
        }
        inner.folded = VersionVector::new();
        inner.folded_stamps = VersionVector::new();
        inner.base = Some(Vec::new());
        inner.counts.clear();
        inner.live = inner
            .pending
            .iter()
            .filter(|(_, op)| !matches!(op, HllOp::Cache))
            .map(|(s, _)| *s)
            .max();
        inner.replay();
    }

    /// What the removals merged into `ctx` (a removal context of the other side of a state
    /// merge) drop here: the pending raises `ctx` covers or whose context does not dominate
    /// it (DEL wins), and the folded raises as a whole when `ctx` covers one of them. A
    /// removal this side had not applied arrived after any fold here and had seen the folded
    /// raises (causal stability); one it had applied covers none of the raises that survived
    /// it. So a context this side had applied already drops nothing, and `KeyState::merge`
    /// can apply each side's contexts to the other side's value. Returns whether anything
    /// was dropped.
    pub fn remove_context(&mut self, ctx: &VersionVector) -> bool {
        if ctx.is_empty() {
            return false;
        }
        let Some(inner) = &mut self.inner else {
            return false;
        };
        let folded_removed = inner
            .folded_stamps
            .iter()
            .any(|(replica, hlc)| ctx.covers(Stamp { hlc, replica }));
        let before = inner.pending.len();
        inner
            .pending
            .retain(|(s, op)| !ctx.covers(*s) && op.saw(ctx));
        if inner.pending.len() == before && !folded_removed {
            return false;
        }
        self.rebuild();
        true
    }

    /// Whether the raise `s` is held here, pending or folded.
    fn holds(&self, s: Stamp) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| i.folded_stamps.covers(s) || i.pending.iter().any(|(p, _)| *p == s))
    }

    /// Drops the raises `floor` (the other side's causal context) covers that `other` (the
    /// other side of a state merge, `None` when it holds no HyperLogLog) does not hold: the
    /// other side had seen them, so it removed them. Folded raises go as a whole when one of the latest folded per
    /// origin is such a raise; dropping a pending raise also drops the folded ones (the bytes
    /// are rebuilt from the pending raises, as `remove_observed` does).
    pub(crate) fn drop_unheld(&mut self, other: Option<&HllCrdt>, floor: &Context) {
        let Some(inner) = &mut self.inner else {
            return;
        };
        let held = |s: Stamp| other.is_some_and(|o| o.holds(s));
        let folded_gone = inner.folded_stamps.iter().any(|(replica, hlc)| {
            let s = Stamp { hlc, replica };
            floor.covers(s) && !held(s)
        });
        let before = inner.pending.len();
        inner.pending.retain(|(s, _)| !floor.covers(*s) || held(*s));
        if folded_gone || inner.pending.len() != before {
            self.rebuild();
        }
    }

    /// State join of the writes (removals are the caller's: `KeyState::merge` first applies
    /// each side's removal contexts to the other side's value with `remove_context`). The
    /// pending writes are the union (by stamp), less those folded on either side, which fold
    /// here too; the folded stamps and contexts and the live stamp take the maximum. The
    /// bytes are those before the pending writes on the side that folded more (the folds of
    /// two sites are prefixes of the same stamp order, by causal stability), with the pending
    /// writes applied in stamp order: the bytes of a site that applied both sides' writes.
    /// Where neither side's folded stamps dominate the other's, or a side's bytes before its
    /// pending writes are unknown (a state of the older layout), the registers take the
    /// maximum and the sparse layout and cache may differ from such a site's. Commutative,
    /// associative and idempotent.
    pub fn merge(&mut self, other: &HllCrdt) {
        let Some(theirs) = other.inner.as_ref() else {
            return;
        };
        let inner = self.inner.get_or_insert_with(Box::default);
        inner.take_shown();
        inner.counts.clear();
        let base = if inner.folded_stamps.dominates(&theirs.folded_stamps) {
            inner.before_pending().map(<[u8]>::to_vec)
        } else if theirs.folded_stamps.dominates(&inner.folded_stamps) {
            theirs.before_pending().map(<[u8]>::to_vec)
        } else {
            None
        };
        let mine = std::mem::take(&mut inner.pending);
        let mut pending = Vec::with_capacity(mine.len() + theirs.pending.len());
        let (mut a, mut b) = (
            mine.into_iter().peekable(),
            theirs.pending.iter().peekable(),
        );
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some((x, _)), Some((y, _))) if x < y => a.next(),
                (Some((x, _)), Some((y, _))) if x == y => {
                    b.next();
                    a.next()
                }
                (Some(_), Some(_)) | (None, Some(_)) => b.next().cloned(),
                (Some(_), None) => a.next(),
                (None, None) => break,
            };
            pending.extend(next);
        }
        inner.folded.merge(&theirs.folded);
        inner.folded_stamps.merge(&theirs.folded_stamps);
        let Inner {
            folded,
            folded_stamps,
            ..
        } = &mut **inner;
        pending.retain(|(s, op)| {
            if folded_stamps.covers(*s) {
                folded.observe(*s);
                if let Some(seen) = op.seen() {
                    folded.merge(seen);
                }
                false
            } else {
                true
            }
        });
        inner.pending = pending;
        inner.live = inner.live.max(theirs.live);
        match base {
            Some(base) => {
                inner.base = Some(base);
                inner.replay();
            }
            None => {
                if inner.bytes.is_empty() {
                    inner.bytes = theirs.exact().to_vec();
                } else if !theirs.bytes.is_empty() {
                    raise_to(&mut inner.bytes, &theirs.bytes);
                }
                inner.base = None;
                inner.stale = false;
            }
        }
        if inner.pending.is_empty() {
            inner.base = None;
            if inner.bytes.is_empty() {
                self.inner = None;
            }
        }
    }

    /// Appends the complete state: the Redis bytes, then (layout 2) the live stamp, the
    /// bytes before the pending writes, the pending writes in stamp order (stamp and
    /// `encode_op`), the folded contexts and stamps.
    pub fn encode_state(&self, out: &mut Vec<u8>) {
        let Some(i) = &self.inner else {
            codec::put_bytes(out, &[]);
            codec::put_u8(out, STATE_NONE);
            codec::put_varint(out, 0);
            codec::put_vv(out, &VersionVector::new());
            codec::put_vv(out, &VersionVector::new());
            return;
        };
        codec::put_bytes(out, i.exact());
        codec::put_u8(out, STATE_ORDERED);
        codec::put_opt_stamp(out, i.live);
        match &i.base {
            Some(b) if !i.pending.is_empty() => {
                codec::put_u8(out, 1);
                codec::put_bytes(out, b);
            }
            _ => codec::put_u8(out, 0),
        }
        codec::put_varint(out, i.pending.len() as u64);
        for (s, op) in &i.pending {
            codec::put_stamp(out, *s);
            encode_op(op, out);
        }
        codec::put_vv(out, &i.folded);
        codec::put_vv(out, &i.folded_stamps);
    }

    /// Decodes what `encode_state` wrote, and the older layout (tags `STATE_NONE` and
    /// `STATE_LIVE`: raises in application order, no cache validations, the bytes before
    /// them unknown). `Invalid`: bytes that are not a valid HyperLogLog, a repeated stamp
    /// among the pending writes (or, in layout 2, stamps out of order), a `Cache` op in the
    /// older layout, raises or a live stamp without bytes (or bytes without a live stamp), a
    /// live stamp below a pending raise, folded stamps their folded contexts miss, bytes
    /// before pending writes where none are pending.
    pub fn decode_state(r: &mut Reader<'_>) -> Result<HllCrdt, DecodeError> {
        let bytes = r.bytes()?;
        if !bytes.is_empty() && !is_valid(bytes) {
            return Err(DecodeError::Invalid("HyperLogLog bytes"));
        }
        let layout = r.u8()?;
        let (live, base) = match layout {
            STATE_NONE => (None, None),
            STATE_LIVE => (Some(r.stamp()?), None),
            STATE_ORDERED => {
                let live = r.opt_stamp()?;
                let base = if r.bool()? {
                    let b = r.bytes()?;
                    if !b.is_empty() && !is_valid(b) {
                        return Err(DecodeError::Invalid("HyperLogLog bytes before pending"));
                    }
                    Some(b.to_vec())
                } else {
                    None
                };
                (live, base)
            }
            _ => return Err(DecodeError::Invalid("HyperLogLog state layout")),
        };
        // A write takes at least its 12-byte stamp and a tag.
        let n = r.items(13)?;
        let mut pending: Vec<(Stamp, HllOp<Vec<u8>>)> = Vec::with_capacity(codec::prealloc(n));
        for _ in 0..n {
            let s = r.stamp()?;
            let op = decode_op(r)?;
            if layout != STATE_ORDERED && matches!(op, HllOp::Cache) {
                return Err(DecodeError::Invalid("HyperLogLog cache op held as a raise"));
            }
            pending.push((s, op));
        }
        let folded = r.vv_strict()?;
        let folded_stamps = r.vv_strict()?;
        if layout == STATE_ORDERED {
            if pending
                .windows(2)
                .any(|w| w.first().map(|x| x.0) >= w.get(1).map(|x| x.0))
            {
                return Err(DecodeError::Invalid(
                    "HyperLogLog pending writes out of order",
                ));
            }
            if base.is_some() && pending.is_empty() {
                return Err(DecodeError::Invalid(
                    "HyperLogLog bytes before no pending write",
                ));
            }
        } else {
            pending.sort_by_key(|(s, _)| *s);
            if pending
                .windows(2)
                .any(|w| w.first().map(|x| x.0) == w.get(1).map(|x| x.0))
            {
                return Err(DecodeError::Invalid("HyperLogLog raise repeated"));
            }
        }
        if !folded.dominates(&folded_stamps) {
            return Err(DecodeError::Invalid("HyperLogLog folded stamps"));
        }
        let top_raise = pending
            .iter()
            .filter(|(_, op)| !matches!(op, HllOp::Cache))
            .map(|(s, _)| *s)
            .max();
        if bytes.is_empty() {
            if live.is_some() || top_raise.is_some() || !folded.is_empty() {
                return Err(DecodeError::Invalid("HyperLogLog raises without bytes"));
            }
            if pending.is_empty() {
                return Ok(HllCrdt::new());
            }
        } else {
            let Some(l) = live else {
                return Err(DecodeError::Invalid("HyperLogLog bytes without live stamp"));
            };
            if top_raise.is_some_and(|s| s > l) {
                return Err(DecodeError::Invalid("HyperLogLog live stamp below a raise"));
            }
        }
        Ok(HllCrdt {
            inner: Some(Box::new(Inner {
                bytes: bytes.to_vec(),
                live,
                pending,
                base,
                stale: false,
                shown: OnceCell::new(),
                counts: Vec::new(),
                folded,
                folded_stamps,
            })),
        })
    }

    /// Folds the pending writes covered by `stable` (`None`: all of them): only their stamps
    /// and contexts are kept. Only a prefix in stamp order folds (with causal stability the
    /// covered writes are one), so the bytes before the pending writes stay known.
    pub fn collect(&mut self, stable: Option<&VersionVector>) {
        let Some(inner) = &mut self.inner else {
            return;
        };
        let n = match stable {
            None => inner.pending.len(),
            Some(st) => inner
                .pending
                .iter()
                .take_while(|(s, _)| st.covers(*s))
                .count(),
        };
        if n > 0 {
            let folding: Vec<_> = inner.pending.drain(..n).collect();
            for (s, op) in &folding {
                inner.fold(*s, op.seen());
            }
            // The bytes before the pending writes move past the folded ones; not needed when
            // nothing stays pending and the bytes are exact.
            if !inner.pending.is_empty() || inner.stale {
                if let Some(base) = &mut inner.base {
                    apply_in_order(base, &folding, &inner.counts);
                }
            }
            let first = inner.pending.first().map(|(s, _)| *s);
            inner.counts.retain(|(s, _)| first.is_some_and(|f| *s >= f));
            if inner.pending.is_empty() {
                // Everything folded: the replay is the advanced base.
                if let (true, Some(base)) = (inner.stale, inner.base.take()) {
                    inner.bytes = base;
                }
                inner.base = None;
                inner.stale = false;
                inner.shown = OnceCell::new();
            }
        }
        if inner.bytes.is_empty() && inner.pending.is_empty() {
            self.inner = None;
        }
    }

    /// Ops that rebuild an equal visible value on an empty key (RENAME, COPY).
    pub fn recreate_ops(&self) -> Vec<HllOp<Vec<u8>>> {
        match &self.inner {
            Some(i) if !i.bytes.is_empty() => vec![HllOp::Load {
                hyll: i.exact().to_vec(),
                seen: VersionVector::new(),
            }],
            _ => Vec::new(),
        }
    }

    /// Redis's bytes of the value (what GET returns); empty when there is none.
    pub fn bytes(&self) -> &[u8] {
        self.inner.as_ref().map_or(&[][..], |i| i.exact())
    }

    /// The registers shown (`None` when not live).
    pub fn registers(&self) -> Option<Box<[u8; REGISTERS]>> {
        if !self.is_live() {
            return None;
        }
        // The registers are exact even while the layout waits for a replay.
        self.inner.as_ref().and_then(|i| registers(&i.bytes).ok())
    }

    /// What sites agree on: registers, live stamp, pending raise stamps, folded stamps.
    fn logical(&self) -> LogicalHll {
        match &self.inner {
            None => LogicalHll::default(),
            Some(i) => {
                let mut pending: Vec<Stamp> = i.pending.iter().map(|(s, _)| *s).collect();
                pending.sort_unstable();
                LogicalHll {
                    regs: self.registers(),
                    live: i.live,
                    pending,
                    folded: i.folded.clone(),
                }
            }
        }
    }
}

#[derive(PartialEq, Eq, Hash, Default)]
struct LogicalHll {
    regs: Option<Box<[u8; REGISTERS]>>,
    live: Option<Stamp>,
    pending: Vec<Stamp>,
    folded: VersionVector,
}

impl PartialEq for HllCrdt {
    fn eq(&self, other: &HllCrdt) -> bool {
        self.logical() == other.logical()
    }
}

impl Eq for HllCrdt {}

impl Hash for HllCrdt {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.logical().hash(state);
    }
}

const OP_ADD: u8 = 0;
const OP_MERGE: u8 = 1;
const OP_LOAD: u8 = 2;
const OP_CACHE: u8 = 3;

/// Appends the encoding of `op` to `out`.
pub fn encode_op<B: AsRef<[u8]>>(op: &HllOp<B>, out: &mut Vec<u8>) {
    match op {
        HllOp::Add { pairs, seen } => {
            codec::put_u8(out, OP_ADD);
            codec::put_bytes(out, pairs.as_ref());
            codec::put_vv(out, seen);
        }
        HllOp::Merge { pairs, dense, seen } => {
            codec::put_u8(out, OP_MERGE);
            codec::put_u8(out, u8::from(*dense));
            codec::put_bytes(out, pairs.as_ref());
            codec::put_vv(out, seen);
        }
        HllOp::Load { hyll, seen } => {
            codec::put_u8(out, OP_LOAD);
            codec::put_bytes(out, hyll.as_ref());
            codec::put_vv(out, seen);
        }
        HllOp::Cache => codec::put_u8(out, OP_CACHE),
    }
}

/// Decodes one op written by `encode_op`. Payloads are checked (register indexes and values
/// in range, loaded bytes a valid HyperLogLog), so applying a decoded op cannot fail.
pub fn decode_op(r: &mut Reader<'_>) -> Result<HllOp<Vec<u8>>, DecodeError> {
    let tag = r.u8()?;
    match tag {
        OP_ADD => {
            let pairs = r.bytes()?;
            if !pairs_ok(pairs) {
                return Err(DecodeError::BadTag(tag));
            }
            Ok(HllOp::Add {
                pairs: pairs.to_vec(),
                seen: r.vv()?,
            })
        }
        OP_MERGE => {
            let dense = match r.u8()? {
                0 => false,
                1 => true,
                t => return Err(DecodeError::BadTag(t)),
            };
            let pairs = r.bytes()?;
            if !pairs_ok(pairs) {
                return Err(DecodeError::BadTag(tag));
            }
            Ok(HllOp::Merge {
                pairs: pairs.to_vec(),
                dense,
                seen: r.vv()?,
            })
        }
        OP_LOAD => {
            let hyll = r.bytes()?;
            if !is_valid(hyll) {
                return Err(DecodeError::BadTag(tag));
            }
            Ok(HllOp::Load {
                hyll: hyll.to_vec(),
                seen: r.vv()?,
            })
        }
        OP_CACHE => Ok(HllOp::Cache),
        t => Err(DecodeError::BadTag(t)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::st;

    /// A PFADD raise of one element that had seen nothing.
    fn add(e: &[u8]) -> HllOp<Vec<u8>> {
        HllOp::Add {
            pairs: pack_pairs([pat_len(e)]),
            seen: VersionVector::new(),
        }
    }

    fn add_elems(b: &mut Vec<u8>, elems: &[&[u8]]) -> bool {
        let op: HllOp<Vec<u8>> = HllOp::Add {
            pairs: pack_pairs(elems.iter().map(|e| pat_len(e))),
            seen: VersionVector::new(),
        };
        apply_raise(b, &op).unwrap()
    }

    #[test]
    fn murmur_vectors() {
        // Values computed with Redis's C MurmurHash64A (seed 0xadc83b19).
        assert_eq!(murmur64a(b"", HASH_SEED), MURMUR_EMPTY);
        assert_eq!(murmur64a(b"a", HASH_SEED), MURMUR_A);
        assert_eq!(murmur64a(b"hello world", HASH_SEED), MURMUR_HELLO);
        assert_eq!(murmur64a(b"0123456789abcdef", HASH_SEED), MURMUR_16);
    }

    const MURMUR_EMPTY: u64 = 0xd8df_ea65_85bc_9732;
    const MURMUR_A: u64 = 0x53d2_470a_9b43_b1a7;
    const MURMUR_HELLO: u64 = 0xa919_bc30_51f6_24b7;
    const MURMUR_16: u64 = 0x9f85_6542_8eaa_573d;

    #[test]
    fn runs_past_the_last_register_are_not_a_valid_hyperloglog() {
        // XZERO of 16382, VAL 2×2 (16384 registers), then VAL 1×1 past the end (proptest
        // found it): neither walk accepts it (hllMerge's did before the fix for
        // CVE-2025-32023, which Debian's redis-server 7.0.15 carries).
        let mut b = b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00".to_vec();
        b.extend_from_slice(&[0x7f, 0xfd, 0x85]);
        assert!(is_valid(&b));
        assert!(count(&b).is_ok());
        assert!(merge_max(&mut [0u8; REGISTERS], &b).is_ok());
        b.push(0x80);
        assert!(merge_max(&mut [0u8; REGISTERS], &b).is_err());
        assert!(count(&b).is_err());
        assert!(!is_valid(&b));
    }

    #[test]
    fn empty_value_is_redis_bytes() {
        let b = create();
        assert_eq!(
            b,
            b"HYLL\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x7f\xff".to_vec()
        );
        assert!(is_valid(&b));
        assert_eq!(count(&b), Ok(0));
    }

    #[test]
    fn counts_of_known_sequences() {
        for &(n, expect) in KNOWN_COUNTS {
            let mut b = Vec::new();
            let elems: Vec<Vec<u8>> = (0..n).map(|i| format!("e{i}").into_bytes()).collect();
            let refs: Vec<&[u8]> = elems.iter().map(|e| e.as_slice()).collect();
            add_elems(&mut b, &refs);
            assert_eq!(count(&b), Ok(expect), "n={n}");
        }
    }

    // (elements e0..e{n-1} added with one PFADD, PFCOUNT) as the real Redis 7.0.15 replies.
    const KNOWN_COUNTS: &[(usize, u64)] = &[
        (1, 1),
        (10, 10),
        (100, 100),
        (1000, 1008),
        (5000, 4968),
        (20000, 19901),
    ];

    #[test]
    fn sparse_promotes_and_dense_round_trips() {
        let mut b = Vec::new();
        for i in 0..5000 {
            add_elems(&mut b, &[format!("x{i}").as_bytes()]);
        }
        assert!(is_dense(&b));
        assert_eq!(b.len(), DENSE_SIZE);
        let c = count(&b).unwrap();
        assert!((4800..5200).contains(&c), "{c}");
        let r = registers(&b).unwrap();
        assert_eq!(count_registers(&r), c);
    }

    #[test]
    fn del_wins_over_concurrent_raise() {
        let add = |e: &[u8], seen: VersionVector| -> HllOp<Vec<u8>> {
            HllOp::Add {
                pairs: pack_pairs([pat_len(e)]),
                seen,
            }
        };
        let mut a = HllCrdt::new();
        assert!(a.apply(st(1, 1), &add(b"x", VersionVector::new())));
        let mut o = VersionVector::new();
        o.observe(st(1, 1));
        // A concurrent raise that had seen x but not the DEL's context... the same as x:
        // it dominates, so it survives (the removal observed nothing it had not).
        let mut b = a.clone();
        let mut seen_y = VersionVector::new();
        seen_y.observe(st(1, 1));
        assert!(b.apply(st(2, 2), &add(b"y", seen_y)));
        // A raise that had not seen x is concurrent with the DEL of x and loses.
        assert!(b.apply(st(3, 3), &add(b"z", VersionVector::new())));
        b.remove_observed(&Observed {
            stamps: o,
            incs: Default::default(),
        });
        assert!(b.is_live());
        assert_eq!(b.live_stamp(), Some(st(2, 2)));
        let r = b.registers().unwrap();
        let (iy, cy) = pat_len(b"y");
        assert_eq!(r[iy as usize], cy);
        assert_eq!(r.iter().filter(|v| **v != 0).count(), 1);
    }

    #[test]
    fn merge_takes_register_maxima_and_state_round_trips() {
        let mut a = HllCrdt::new();
        a.apply(st(1, 1), &add(b"x"));
        let mut b = a.clone();
        a.apply(st(2, 1), &add(b"y"));
        b.apply(st(2, 2), &add(b"z"));
        b.collect(Some(&{
            let mut v = VersionVector::new();
            v.observe(st(1, 1));
            v
        }));
        let mut ab = a.clone();
        ab.merge(&b);
        let mut ba = b.clone();
        ba.merge(&a);
        assert_eq!(ab, ba);
        let mut all = HllCrdt::new();
        for (s, e) in [(st(1, 1), b"x"), (st(2, 1), b"y"), (st(2, 2), b"z")] {
            all.apply(s, &add(e));
        }
        assert_eq!(ab.registers(), all.registers());
        assert_eq!(ab.live_stamp(), Some(st(2, 2)));
        let mut again = ab.clone();
        again.merge(&ab);
        assert_eq!(again, ab);
        // No context drops nothing; a new one covering the folded raise drops it, the raises
        // it covers and those concurrent with it (their context does not dominate it).
        let mut seen = VersionVector::new();
        seen.observe(st(2, 1));
        assert!(!ab.clone().remove_context(&VersionVector::new()));
        let mut del = ab.clone();
        assert!(del.remove_context(&seen));
        assert!(!del.is_live() && del.is_blank());
        let mut out = Vec::new();
        ab.encode_state(&mut out);
        let mut r = Reader::new(&out);
        let back = HllCrdt::decode_state(&mut r).unwrap();
        assert!(r.is_at_end());
        assert_eq!(back, ab);
        let mut out2 = Vec::new();
        back.encode_state(&mut out2);
        assert_eq!(out, out2);
        for cut in 0..out.len() {
            assert!(HllCrdt::decode_state(&mut Reader::new(&out[..cut])).is_err());
        }
    }

    /// A cache validation and a concurrent raise give the same bytes, cache flag included,
    /// in either order of arrival: the one with the higher stamp decides.
    #[test]
    fn validation_and_concurrent_raise_give_the_same_bytes_in_either_order() {
        for (cache_at, raise_at) in [(st(2, 1), st(3, 2)), (st(3, 1), st(2, 2))] {
            let mut base = HllCrdt::new();
            base.apply(st(1, 1), &add(b"x"));
            let mut a = base.clone();
            a.apply(cache_at, &HllOp::<Vec<u8>>::Cache);
            a.apply(raise_at, &add(b"y"));
            let mut b = base.clone();
            b.apply(raise_at, &add(b"y"));
            b.apply(cache_at, &HllOp::<Vec<u8>>::Cache);
            assert_eq!(a.bytes(), b.bytes());
            assert_eq!(cache_valid(a.bytes()), cache_at > raise_at);
            // Folding keeps them equal, and a state merge of either gives the same bytes.
            let mut ab = a.clone();
            ab.merge(&b);
            assert_eq!(ab.bytes(), a.bytes());
            a.collect(None);
            assert_eq!(a.bytes(), b.bytes());
            assert!(!a.has_metadata());
        }
    }

    /// A state written in the older layout (raises in application order, no bytes before
    /// them, tag 1) decodes, and the key goes on: a later raise applies in place, a fold
    /// makes it a state of the current layout.
    #[test]
    fn a_state_of_the_older_layout_decodes() {
        let mut bytes = Vec::new();
        apply_raise(&mut bytes, &add(b"y")).unwrap();
        apply_raise(&mut bytes, &add(b"x")).unwrap();
        let old = |pending: &[(Stamp, HllOp<Vec<u8>>)]| {
            let mut out = Vec::new();
            codec::put_bytes(&mut out, &bytes);
            codec::put_opt_stamp(&mut out, Some(st(3, 1)));
            codec::put_varint(&mut out, pending.len() as u64);
            for (s, op) in pending {
                codec::put_stamp(&mut out, *s);
                encode_op(op, &mut out);
            }
            codec::put_vv(&mut out, &VersionVector::new());
            codec::put_vv(&mut out, &VersionVector::new());
            out
        };
        let out = old(&[(st(3, 1), add(b"y")), (st(2, 2), add(b"x"))]);
        let mut r = Reader::new(&out);
        let mut h = HllCrdt::decode_state(&mut r).unwrap();
        assert!(r.is_at_end());
        assert_eq!(h.bytes(), bytes.as_slice());
        assert_eq!(h.live_stamp(), Some(st(3, 1)));
        assert!(h.apply(st(4, 1), &add(b"z")));
        h.collect(None);
        assert!(!h.has_metadata());
        let mut all = Vec::new();
        for e in [b"y", b"x", b"z"] {
            apply_raise(&mut all, &add(e)).unwrap();
        }
        assert_eq!(h.bytes(), all.as_slice());
        let mut again = Vec::new();
        h.encode_state(&mut again);
        assert_eq!(layout_of(&again), STATE_ORDERED);
        assert_eq!(HllCrdt::decode_state(&mut Reader::new(&again)).unwrap(), h);
        // A validation is not a raise of the older layout.
        let bad = old(&[(st(3, 1), HllOp::Cache)]);
        assert!(HllCrdt::decode_state(&mut Reader::new(&bad)).is_err());
    }

    /// The current layout refuses pending writes out of stamp order and bytes before
    /// pending writes where none are pending.
    #[test]
    fn the_current_layout_refuses_disorder() {
        let mut h = HllCrdt::new();
        h.apply(st(1, 1), &add(b"x"));
        h.apply(st(3, 2), &add(b"y"));
        h.apply(st(2, 1), &HllOp::<Vec<u8>>::Cache);
        let mut out = Vec::new();
        h.encode_state(&mut out);
        let back = HllCrdt::decode_state(&mut Reader::new(&out)).unwrap();
        assert_eq!(back.bytes(), h.bytes());
        assert_eq!(back, h);
        assert_eq!(layout_of(&out), STATE_ORDERED);
        // Swap the first two pending writes: out of order.
        let mut swapped = h.clone();
        if let Some(i) = swapped.inner.as_mut() {
            i.pending.swap(0, 1);
        }
        let mut bad = Vec::new();
        swapped.encode_state(&mut bad);
        assert!(HllCrdt::decode_state(&mut Reader::new(&bad)).is_err());
        // Nothing pending, yet bytes before pending writes.
        let mut out = Vec::new();
        codec::put_bytes(&mut out, h.bytes());
        codec::put_u8(&mut out, STATE_ORDERED);
        codec::put_opt_stamp(&mut out, Some(st(3, 2)));
        codec::put_u8(&mut out, 1);
        codec::put_bytes(&mut out, &[]);
        codec::put_varint(&mut out, 0);
        codec::put_vv(&mut out, &VersionVector::new());
        codec::put_vv(&mut out, &VersionVector::new());
        assert!(HllCrdt::decode_state(&mut Reader::new(&out)).is_err());
        // An unknown layout.
        let mut unknown = out.clone();
        let mut r = Reader::new(&out);
        r.bytes().unwrap();
        let at = r.pos();
        unknown[at] = 3;
        assert!(HllCrdt::decode_state(&mut Reader::new(&unknown)).is_err());
    }

    /// The layout byte of an encoded state (the byte after the bytes).
    fn layout_of(out: &[u8]) -> u8 {
        let mut r = Reader::new(out);
        r.bytes().unwrap();
        r.u8().unwrap()
    }

    #[test]
    fn codec_round_trip() {
        let mut seen = VersionVector::new();
        seen.observe(st(5, 2));
        let ops: Vec<HllOp<Vec<u8>>> = vec![
            HllOp::Add {
                pairs: pack_pairs([(3, 4), (16383, 51)]),
                seen: seen.clone(),
            },
            HllOp::Merge {
                pairs: pack_pairs([(1, 63)]),
                dense: true,
                seen: seen.clone(),
            },
            HllOp::Load {
                hyll: create(),
                seen,
            },
            HllOp::Cache,
        ];
        for op in ops {
            let mut out = Vec::new();
            encode_op(&op, &mut out);
            let mut r = Reader::new(&out);
            assert_eq!(decode_op(&mut r).unwrap(), op);
            assert!(r.is_at_end());
        }
    }
}

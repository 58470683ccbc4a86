//! Observed-remove map of fields (HSET, HINCRBY, HDEL...).
//!
//! Each field holds register writes (HSET/HMSET/HSETNX; concurrent ones are all kept, the
//! highest stamp is shown) and increment dots (HINCRBY/HINCRBYFLOAT). The value shown is
//! the shown write's bytes (or 0 when none) plus the increments, by `StrCrdt`'s rules: an
//! integer base plus integer increments shows an integer, any float increment a decimal,
//! and a non-numeric base ignores the increments.
//! - HSET of a field removes the writes and increments of that field it observed (its op
//!   carries the field's observed stamps), then adds its write: concurrent increments are
//!   added on top of the new value.
//! - HDEL of a field removes only what it observed of that field: a concurrent HSET or
//!   HINCRBY of the field survives (update wins).
//! - DEL of the key removes everything observed (`remove_observed`); the key keeps that
//!   context (`KeyState`).
//!
//! Increments are dots (not per-origin totals) so that any removal removes exactly the
//! increments it observed; `collect` folds each origin's causally stable increments into
//! one dot, so a counter field stays one dot per origin on a single site.
//!
//! Layout. A hash is one pointer. The fields live in one byte arena in insertion order,
//! like Redis's listpack: a plain field (one write, no increment: the common case) is
//! `[0][field len][field][replica index][hlc delta][value len][value]` (the stamp packed
//! against a per-hash replica table and base hlc); any other field is
//! `[1][field len][field][slot]` with its state in a slab aside. Lookups scan the arena
//! while the hash is small; above `INDEX_MIN` fields a `SteppedTable` (grown a few buckets
//! per write) of arena offsets (hashed with the process's secret key, `crate::hashing`, since
//! clients choose fields) finds them,
//! entries rewritten with another size are marked dead (`[2]...`) and appended, and the
//! arena is compacted when half of it is dead.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::LazyLock;

use smallvec::SmallVec;

use crate::bytes::SmallBytes;
use crate::codec::{self, DecodeError, Reader};
use crate::counter::Delta;
use crate::dot::{Context, ReplicaId, Stamp, VersionVector};
use crate::hlc::Hlc;
use crate::num::Dec;
use crate::op::Observed;
use crate::string::{StrView, parse_i64_redis};
use crate::table::{ScanSpace, SteppedTable};

/// Fields above which lookups use a hash index instead of a scan of the arena.
pub const INDEX_MIN: usize = 128;

const TAG_PLAIN: u8 = 0;
const TAG_RARE: u8 = 1;
const TAG_DEAD_PLAIN: u8 = 2;
const TAG_DEAD_RARE: u8 = 3;

fn hash_field(field: &[u8]) -> u64 {
    crate::hashing::hash_bytes(field)
}

/// One field's full state (the rare form, or a plain field decoded).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
struct FieldState {
    /// Register writes no write of this field observed; sorted by stamp.
    writes: SmallVec<[(Stamp, SmallBytes); 1]>,
    /// Increment dots not removed; sorted by stamp.
    incs: SmallVec<[(Stamp, Delta); 1]>,
}

/// Characters of `i` in decimal (its sign included), without formatting it.
fn decimal_len(i: i64) -> usize {
    let sign = usize::from(i < 0);
    let mut n = i.unsigned_abs();
    let mut digits = 1;
    while n >= 10 {
        n /= 10;
        digits += 1;
    }
    sign + digits
}

impl FieldState {
    fn is_empty(&self) -> bool {
        self.writes.is_empty() && self.incs.is_empty()
    }

    fn is_plain(&self) -> bool {
        self.writes.len() == 1 && self.incs.is_empty()
    }

    fn remove_covered(&mut self, vv: &VersionVector) {
        self.writes.retain(|w| !vv.covers(w.0));
        self.incs.retain(|i| !vv.covers(i.0));
    }

    fn add_write(&mut self, stamp: Stamp, value: &[u8]) -> bool {
        match self.writes.binary_search_by_key(&stamp, |w| w.0) {
            Ok(_) => false,
            Err(i) => {
                self.writes.insert(i, (stamp, SmallBytes::copy_from(value)));
                true
            }
        }
    }

    fn add_inc(&mut self, stamp: Stamp, delta: Delta) -> bool {
        // Per-origin FIFO: an increment at or below one held from its origin was applied.
        if self
            .incs
            .iter()
            .any(|(s, _)| s.replica == stamp.replica && s.hlc >= stamp.hlc)
        {
            return false;
        }
        let i = self.incs.partition_point(|x| x.0 < stamp);
        self.incs.insert(i, (stamp, delta));
        true
    }

    fn observe_into(&self, vv: &mut VersionVector) {
        for (s, _) in &self.writes {
            vv.observe(*s);
        }
        for (s, _) in &self.incs {
            vv.observe(*s);
        }
    }

    fn max_stamp(&self) -> Option<Stamp> {
        let w = self.writes.last().map(|w| w.0);
        let i = self.incs.iter().map(|x| x.0).max();
        w.max(i)
    }

    /// Whether a fold may ever merge two of its increments: two of one origin and kind. One
    /// increment per origin (a counter written at several sites, folded) is final: it
    /// waits in no fold queue, and the key holds no metadata for it, until another
    /// increment arrives.
    fn may_fold(&self) -> bool {
        self.incs.iter().enumerate().any(|(i, (s, d))| {
            self.incs.iter().skip(i + 1).any(|(t, e)| {
                t.replica == s.replica
                    && matches!(
                        (d, e),
                        (Delta::Int(_), Delta::Int(_)) | (Delta::Float(_), Delta::Float(_))
                    )
            })
        })
    }

    /// Folds, per origin and kind, the increments `stable` covers (all when `None`) into one
    /// dot with the highest stamp. Returns whether anything was folded.
    fn fold(&mut self, stable: Option<&VersionVector>) -> bool {
        if self.incs.len() < 2 {
            return false;
        }
        let mut out: SmallVec<[(Stamp, Delta); 1]> = SmallVec::new();
        let mut folded = false;
        for (s, d) in self.incs.drain(..) {
            let foldable = stable.is_none_or(|v| v.covers(s));
            if foldable {
                let prev = out.iter_mut().find(|(ps, pd)| {
                    ps.replica == s.replica
                        && stable.is_none_or(|v| v.covers(*ps))
                        && matches!(
                            (pd, &d),
                            (Delta::Int(_), Delta::Int(_)) | (Delta::Float(_), Delta::Float(_))
                        )
                });
                if let Some((ps, pd)) = prev {
                    let sum = match (*pd, d) {
                        (Delta::Int(a), Delta::Int(b)) => a.checked_add(b).map(Delta::Int),
                        (Delta::Float(a), Delta::Float(b)) => a.add(b).map(Delta::Float),
                        _ => None,
                    };
                    if let Some(sum) = sum {
                        *pd = sum;
                        if s > *ps {
                            *ps = s;
                        }
                        folded = true;
                        continue;
                    }
                }
            }
            out.push((s, d));
        }
        out.sort_by_key(|x| x.0);
        self.incs = out;
        folded
    }

    /// The value shown (`StrCrdt`'s rules).
    fn view(&self) -> StrView<'_> {
        let bytes = self.writes.last().map(|w| w.1.as_slice());
        if self.incs.is_empty() {
            return StrView::Bytes(bytes.unwrap_or_default());
        }
        let mut int: i128 = 0;
        let mut float = Dec::ZERO;
        for (_, d) in &self.incs {
            match d {
                Delta::Int(v) => int = int.saturating_add(i128::from(*v)),
                Delta::Float(f) => float = float.add(*f).unwrap_or(float),
            }
        }
        let any_float = !float.is_zero();
        let base_int = match bytes {
            None => Some(0),
            Some(b) => parse_i64_redis(b),
        };
        if let (Some(base), false) = (base_int, any_float) {
            let sum = i128::from(base).saturating_add(int);
            let clamped = sum.clamp(i128::from(i64::MIN), i128::from(i64::MAX));
            return StrView::Int(i64::try_from(clamped).unwrap_or(i64::MAX));
        }
        let base = match (base_int, bytes) {
            (Some(v), _) => Dec::from_i64(v),
            (None, Some(b)) => match Dec::parse(b) {
                Some(d) => d,
                None => return StrView::Bytes(b),
            },
            (None, None) => Dec::ZERO,
        };
        match base.add(Dec::from_i128(int)).and_then(|d| d.add(float)) {
            Some(d) => StrView::Float(d),
            None => StrView::Bytes(bytes.unwrap_or_default()),
        }
    }
}

/// Rare parts: states of non-plain fields and per-field removal contexts.
#[derive(Clone, Debug, Default)]
struct Meta {
    slab: Vec<Option<FieldState>>,
    free: Vec<u32>,
    /// Merged contexts of HSETs and HDELs of each field, kept until causally stable.
    removed: BTreeMap<SmallBytes, VersionVector>,
    /// Slots whose field holds increments that `collect` could fold.
    to_fold: Vec<u32>,
    /// Slots in use.
    used: u32,
}

#[derive(Clone, Debug, Default)]
struct Inner {
    arena: Vec<u8>,
    /// Offsets of live entries, when the hash is large.
    index: Option<SteppedTable<u32>>,
    /// Live fields.
    n: u32,
    /// Bytes of dead entries in the arena.
    dead: u32,
    /// The most fields and the longest field or value this hash held since it was created
    /// (or loaded): Redis converts a listpack hash to a hashtable when either passes its limit
    /// and never back (`fits_listpack`). A local hint, not replicated.
    most: u32,
    widest: u32,
    /// Base of the packed stamps' hlc (the first plain write's).
    base: u64,
    /// Replicas named by packed stamps (at most 256).
    reps: SmallVec<[ReplicaId; 2]>,
    meta: Option<Box<Meta>>,
    /// The join of the stable vectors given to `collect(Some(..))` (see `HashCrdt::merge`).
    floor: Option<Box<VersionVector>>,
}

/// See the module doc. One pointer; an empty hash allocates nothing.
#[derive(Clone, Default)]
pub struct HashCrdt {
    inner: Option<Box<Inner>>,
}

/// Bytes of a `HashCrdt`.
pub const HASH_CRDT_BYTES_MAX: usize = 40;
const _: () = assert!(std::mem::size_of::<HashCrdt>() <= HASH_CRDT_BYTES_MAX);

/// What one write of this type replicates.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum HashOp<B: AsRef<[u8]>> {
    /// HSET/HMSET/HSETNX of one field: removes what `observed` covers of that field (writes
    /// and increments), then writes `value`.
    Set {
        field: B,
        value: B,
        observed: VersionVector,
    },
    /// HINCRBY (`Int`) / HINCRBYFLOAT (`Float`) of one field.
    Incr { field: B, delta: Delta },
    /// HDEL of one field: removes what `observed` covers of that field.
    Del { field: B, observed: VersionVector },
}

// ------------------------------------------------------------------------------------------
// Arena entries
// ------------------------------------------------------------------------------------------

fn get_varint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos)?;
        *pos += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

fn get_slice<'a>(buf: &'a [u8], pos: &mut usize) -> Option<&'a [u8]> {
    let n = usize::try_from(get_varint(buf, pos)?).ok()?;
    let s = buf.get(*pos..pos.checked_add(n)?)?;
    *pos += n;
    Some(s)
}

/// A plain entry's stamp as stored: an index into the hash's replica table and the hlc's
/// zigzag distance from the hash's base hlc (a few bytes instead of 12).
#[derive(Clone, Copy)]
struct Packed {
    rep: u8,
    delta: i64,
}

enum Body<'a> {
    Plain(Packed, &'a [u8]),
    Rare(usize),
}

struct Ent<'a> {
    end: usize,
    dead: bool,
    field: &'a [u8],
    body: Body<'a>,
}

fn parse_at(buf: &[u8], start: usize) -> Option<Ent<'_>> {
    let mut pos = start;
    let tag = *buf.get(pos)?;
    pos += 1;
    let field = get_slice(buf, &mut pos)?;
    let body = match tag {
        TAG_PLAIN | TAG_DEAD_PLAIN => {
            let rep = *buf.get(pos)?;
            pos += 1;
            let z = get_varint(buf, &mut pos)?;
            let delta = ((z >> 1) as i64) ^ -((z & 1) as i64);
            Body::Plain(Packed { rep, delta }, get_slice(buf, &mut pos)?)
        }
        _ => Body::Rare(usize::try_from(get_varint(buf, &mut pos)?).ok()?),
    };
    Some(Ent {
        end: pos,
        dead: tag >= TAG_DEAD_PLAIN,
        field,
        body,
    })
}

fn put_plain(out: &mut Vec<u8>, field: &[u8], p: Packed, value: &[u8]) {
    out.push(TAG_PLAIN);
    codec::put_bytes(out, field);
    out.push(p.rep);
    let z = ((p.delta << 1) ^ (p.delta >> 63)) as u64;
    codec::put_varint(out, z);
    codec::put_bytes(out, value);
}

fn put_rare(out: &mut Vec<u8>, field: &[u8], slot: usize) {
    out.push(TAG_RARE);
    codec::put_bytes(out, field);
    codec::put_varint(out, slot as u64);
}

/// Live entries of an arena: (offset, entry).
fn entries(buf: &[u8]) -> impl Iterator<Item = (usize, Ent<'_>)> + '_ {
    let mut pos = 0;
    std::iter::from_fn(move || {
        loop {
            if pos >= buf.len() {
                return None;
            }
            let start = pos;
            let e = parse_at(buf, pos)?;
            pos = e.end;
            if !e.dead {
                return Some((start, e));
            }
        }
    })
}

static EMPTY_STATE: LazyLock<FieldState> = LazyLock::new(FieldState::default);

impl Inner {
    fn unpack(&self, p: Packed) -> Stamp {
        Stamp {
            hlc: Hlc(self.base.wrapping_add(p.delta as u64)),
            replica: self
                .reps
                .get(usize::from(p.rep))
                .copied()
                .unwrap_or_default(),
        }
    }

    fn pack(&mut self, s: Stamp) -> Option<Packed> {
        if self.reps.is_empty() {
            self.base = s.hlc.0;
        }
        let rep = match self.reps.iter().position(|r| *r == s.replica) {
            Some(i) => i,
            None if self.reps.len() < 256 => {
                self.reps.push(s.replica);
                self.reps.len() - 1
            }
            None => return None,
        };
        Some(Packed {
            rep: u8::try_from(rep).ok()?,
            delta: s.hlc.0.wrapping_sub(self.base) as i64,
        })
    }

    fn meta_mut(&mut self) -> &mut Meta {
        self.meta.get_or_insert_with(Box::default)
    }

    fn rare(&self, slot: usize) -> &FieldState {
        self.meta
            .as_ref()
            .and_then(|m| m.slab.get(slot))
            .and_then(Option::as_ref)
            .unwrap_or(&*EMPTY_STATE)
    }

    fn find(&self, field: &[u8]) -> Option<usize> {
        match &self.index {
            Some(t) => t
                .find(hash_field(field), |&off| {
                    parse_at(&self.arena, off as usize).is_some_and(|e| e.field == field)
                })
                .map(|&o| o as usize),
            None => entries(&self.arena)
                .find(|(_, e)| e.field == field)
                .map(|(o, _)| o),
        }
    }

    /// Decodes the entry at `off` into an owned state (the slot freed for rare fields).
    fn take_state(&mut self, off: usize) -> FieldState {
        let Some(e) = parse_at(&self.arena, off) else {
            return FieldState::default();
        };
        match e.body {
            Body::Plain(p, v) => {
                let mut st = FieldState::default();
                st.writes.push((self.unpack(p), SmallBytes::copy_from(v)));
                st
            }
            Body::Rare(slot) => {
                let m = self.meta_mut();
                let st = m.slab.get_mut(slot).and_then(Option::take);
                if st.is_some() {
                    m.used = m.used.saturating_sub(1);
                    m.free.push(slot as u32);
                }
                st.unwrap_or_default()
            }
        }
    }

    fn alloc_slot(&mut self, st: FieldState) -> usize {
        let m = self.meta_mut();
        m.used += 1;
        if let Some(slot) = m.free.pop() {
            if let Some(s) = m.slab.get_mut(slot as usize) {
                *s = Some(st);
                return slot as usize;
            }
        }
        m.slab.push(Some(st));
        m.slab.len() - 1
    }

    fn encode(&mut self, field: &[u8], st: FieldState) -> Vec<u8> {
        let mut out = Vec::with_capacity(field.len() + 24);
        let packed = match st.writes.first() {
            Some((s, _)) if st.is_plain() => self.pack(*s),
            _ => None,
        };
        if let (Some(p), Some((_, v))) = (packed, st.writes.first()) {
            put_plain(&mut out, field, p, v.as_slice());
        } else {
            let fold = st.may_fold();
            let slot = self.alloc_slot(st);
            if fold {
                self.meta_mut().to_fold.push(slot as u32);
            }
            put_rare(&mut out, field, slot);
        }
        out
    }

    fn reserve(&mut self, extra: usize) {
        let need = self.arena.len() + extra;
        if need > self.arena.capacity() {
            let grow = (self.arena.len() / 4).max(extra);
            self.arena.reserve_exact(grow);
        }
    }

    /// Writes `st` for `field` back: at `off` when it was there, else appended.
    fn put_state(&mut self, field: &[u8], off: Option<usize>, st: FieldState) {
        // An incremented field is as wide as the number it shows (Redis stores HINCRBY's and
        // HINCRBYFLOAT's result as a string).
        let shown = if st.incs.is_empty() {
            0
        } else {
            match st.view() {
                StrView::Bytes(b) => b.len(),
                StrView::Int(i) => decimal_len(i),
                v => v.to_bytes().len(),
            }
        };
        let wide = st
            .writes
            .iter()
            .map(|w| w.1.len())
            .chain([field.len(), shown])
            .max()
            .unwrap_or(0);
        self.widest = self.widest.max(u32::try_from(wide).unwrap_or(u32::MAX));
        match off {
            Some(off) => {
                let Some(end) = parse_at(&self.arena, off).map(|e| e.end) else {
                    return;
                };
                if st.is_empty() {
                    self.n = self.n.saturating_sub(1);
                    if let Some(t) = &mut self.index {
                        let h = hash_field(field);
                        t.remove(h, |&o| o as usize == off, |o| hash_of_entry(&self.arena, o));
                        self.mark_dead(off, end);
                    } else {
                        self.arena.drain(off..end);
                    }
                    return;
                }
                let bytes = self.encode(field, st);
                if bytes.len() == end - off {
                    if let Some(dst) = self.arena.get_mut(off..end) {
                        dst.copy_from_slice(&bytes);
                    }
                } else if self.index.is_some() {
                    self.mark_dead(off, end);
                    let new_off = self.arena.len();
                    self.reserve(bytes.len());
                    self.arena.extend_from_slice(&bytes);
                    if let Some(t) = &mut self.index {
                        if let Some(o) = t.find_mut(hash_field(field), |&o| o as usize == off) {
                            *o = new_off as u32;
                        }
                    }
                } else {
                    if bytes.len() > end - off {
                        self.reserve(bytes.len() - (end - off));
                    }
                    self.arena.splice(off..end, bytes);
                }
            }
            None => {
                if st.is_empty() {
                    return;
                }
                let bytes = self.encode(field, st);
                let new_off = self.arena.len();
                self.reserve(bytes.len());
                self.arena.extend_from_slice(&bytes);
                self.n += 1;
                self.most = self.most.max(self.n);
                if let Some(t) = &mut self.index {
                    t.insert_unique(hash_field(field), new_off as u32, |o| {
                        hash_of_entry(&self.arena, o)
                    });
                } else if self.n as usize > INDEX_MIN {
                    self.rebuild_index();
                }
            }
        }
        self.maybe_compact();
    }

    fn mark_dead(&mut self, off: usize, end: usize) {
        if let Some(t) = self.arena.get_mut(off) {
            *t = if *t == TAG_RARE {
                TAG_DEAD_RARE
            } else {
                TAG_DEAD_PLAIN
            };
        }
        self.dead += (end - off) as u32;
    }

    fn rebuild_index(&mut self) {
        // A rebuilt index is a new scan space: it follows the old one's generation.
        let mut t = match &self.index {
            Some(old) => old.successor(self.n as usize),
            None => SteppedTable::with_capacity(self.n as usize),
        };
        for (off, e) in entries(&self.arena) {
            t.insert_unique(hash_field(e.field), off as u32, |o| {
                hash_of_entry(&self.arena, o)
            });
        }
        self.index = Some(t);
    }

    fn maybe_compact(&mut self) {
        if self.dead == 0 || (self.dead as usize) * 2 < self.arena.len() {
            return;
        }
        let mut out = Vec::with_capacity(self.arena.len() - self.dead as usize);
        // (old offset, new offset) of each live entry, in arena order.
        let mut moved: Vec<(u32, u32)> = Vec::with_capacity(self.n as usize);
        let mut pos = 0;
        while let Some(e) = parse_at(&self.arena, pos) {
            if !e.dead {
                moved.push((pos as u32, out.len() as u32));
                out.extend_from_slice(self.arena.get(pos..e.end).unwrap_or_default());
            }
            pos = e.end;
        }
        self.arena = out;
        self.dead = 0;
        // The index keeps its buckets (only the offsets they hold change), so a scan cursor,
        // a bucket position, stays valid across compactions: only growth moves entries.
        if let Some(t) = &mut self.index {
            for off in t.iter_mut() {
                if let Some(&(_, new)) = moved
                    .binary_search_by_key(off, |m| m.0)
                    .ok()
                    .and_then(|i| moved.get(i))
                {
                    *off = new;
                }
            }
        }
    }

    /// Applies `f` to the state of `field`; returns `f`'s result.
    fn with_field<R>(&mut self, field: &[u8], f: impl FnOnce(&mut FieldState) -> R) -> R {
        let off = self.find(field);
        let mut st = match off {
            Some(o) => self.take_state(o),
            None => FieldState::default(),
        };
        let r = f(&mut st);
        self.put_state(field, off, st);
        r
    }

    fn removed_covers(&self, field: &[u8], stamp: Stamp) -> bool {
        self.meta
            .as_ref()
            .and_then(|m| m.removed.get(field))
            .is_some_and(|vv| vv.covers(stamp))
    }

    fn merge_removed(&mut self, field: &[u8], vv: &VersionVector) {
        if vv.is_empty() {
            return;
        }
        let m = self.meta_mut();
        match m.removed.get_mut(field) {
            Some(r) => r.merge(vv),
            None => {
                m.removed.insert(SmallBytes::copy_from(field), vv.clone());
            }
        }
    }

    fn tidy(&mut self) {
        if self
            .meta
            .as_ref()
            .is_some_and(|m| m.removed.is_empty() && m.used == 0 && m.to_fold.is_empty())
        {
            self.meta = None;
        }
    }

    fn is_blank(&self) -> bool {
        self.n == 0 && self.meta.as_ref().is_none_or(|m| m.removed.is_empty())
    }

    /// Holds nothing worth keeping the allocation for (no fields, no metadata, no floor).
    fn is_droppable(&self) -> bool {
        self.is_blank() && self.meta.is_none() && self.floor.is_none()
    }
}

fn hash_of_entry(arena: &[u8], off: &u32) -> u64 {
    parse_at(arena, *off as usize).map_or(0, |e| hash_field(e.field))
}

impl HashCrdt {
    pub fn new() -> HashCrdt {
        HashCrdt::default()
    }

    fn inner_mut(&mut self) -> &mut Inner {
        self.inner.get_or_insert_with(Box::default)
    }

    /// Applies a local or remote write; false when it was a duplicate or already removed.
    pub fn apply<B: AsRef<[u8]>>(&mut self, stamp: Stamp, op: &HashOp<B>) -> bool {
        let inner = self.inner_mut();
        let fresh = match op {
            HashOp::Set {
                field,
                value,
                observed,
            } => {
                let field = field.as_ref();
                inner.merge_removed(field, observed);
                let covered = inner.removed_covers(field, stamp);
                inner.with_field(field, |st| {
                    st.remove_covered(observed);
                    !covered && st.add_write(stamp, value.as_ref())
                })
            }
            HashOp::Incr { field, delta } => {
                let field = field.as_ref();
                if inner.removed_covers(field, stamp) {
                    false
                } else {
                    inner.with_field(field, |st| st.add_inc(stamp, *delta))
                }
            }
            HashOp::Del { field, observed } => {
                let field = field.as_ref();
                // The field's context also names the HDEL (harmless: every write of the
                // field from its origin that the stamp covers was seen by it), so that a
                // delta full sync finds the key until every replica has the HDEL.
                // (One entry: the vector stays inline, no allocation.)
                let mut by = VersionVector::new();
                by.observe(stamp);
                inner.merge_removed(field, observed);
                inner.merge_removed(field, &by);
                // What the context now covers goes, the HDEL's own origin's earlier writes
                // included: a dot its field's context covers is never kept (an earlier
                // increment of that origin, which the HDEL saw, would otherwise stay where
                // the write that had removed it at the HDEL's site has not arrived yet).
                if inner.find(field).is_some() {
                    inner.with_field(field, |st| {
                        st.remove_covered(observed);
                        st.remove_covered(&by);
                    });
                }
                true
            }
        };
        inner.tidy();
        if inner.is_droppable() {
            self.inner = None;
        }
        fresh
    }

    /// Whether it shows anything (the key exists).
    pub fn is_live(&self) -> bool {
        !self.is_empty()
    }

    /// Number of fields shown (HLEN).
    pub fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| i.n as usize)
    }

    pub fn is_empty(&self) -> bool {
        self.inner.as_ref().is_none_or(|i| i.n == 0)
    }

    /// The highest stamp among its live writes (the type-conflict order).
    pub fn live_stamp(&self) -> Option<Stamp> {
        let inner = self.inner.as_ref()?;
        entries(&inner.arena)
            .filter_map(|(_, e)| match e.body {
                Body::Plain(p, _) => Some(inner.unpack(p)),
                Body::Rare(slot) => inner.rare(slot).max_stamp(),
            })
            .max()
    }

    /// Holds neither live writes nor metadata.
    pub fn is_blank(&self) -> bool {
        self.inner.as_ref().is_none_or(|i| i.is_blank())
    }

    /// Holds removal metadata that `collect` would drop (or increments it would fold).
    pub fn has_metadata(&self) -> bool {
        self.inner
            .as_ref()
            .and_then(|i| i.meta.as_ref())
            .is_some_and(|m| !m.removed.is_empty() || !m.to_fold.is_empty())
    }

    /// Adds every stamp seen (live writes and removal contexts) to `vv`.
    /// Adds the stamps of the fields present (not removal contexts) to `vv`.
    pub fn live_into(&self, vv: &mut VersionVector) {
        let Some(inner) = &self.inner else { return };
        for (_, e) in entries(&inner.arena) {
            match e.body {
                Body::Plain(p, _) => vv.observe(inner.unpack(p)),
                Body::Rare(slot) => inner.rare(slot).observe_into(vv),
            }
        }
    }

    pub fn observe_into(&self, vv: &mut VersionVector) {
        let Some(inner) = &self.inner else { return };
        for (_, e) in entries(&inner.arena) {
            match e.body {
                Body::Plain(p, _) => vv.observe(inner.unpack(p)),
                Body::Rare(slot) => inner.rare(slot).observe_into(vv),
            }
        }
        if let Some(m) = &inner.meta {
            for r in m.removed.values() {
                vv.merge(r);
            }
        }
    }

    /// What a write of `field` must carry: the stamps of that field seen here.
    pub fn field_observed(&self, field: &[u8]) -> VersionVector {
        let mut vv = VersionVector::new();
        let Some(inner) = &self.inner else { return vv };
        if let Some(off) = inner.find(field) {
            if let Some(e) = parse_at(&inner.arena, off) {
                match e.body {
                    Body::Plain(p, _) => vv.observe(inner.unpack(p)),
                    Body::Rare(slot) => inner.rare(slot).observe_into(&mut vv),
                }
            }
        }
        if let Some(r) = inner.meta.as_ref().and_then(|m| m.removed.get(field)) {
            vv.merge(r);
        }
        vv
    }

    /// DEL (or a SET of the key): removes everything `observed` covers.
    pub fn remove_observed(&mut self, observed: &Observed) {
        let Some(inner) = &mut self.inner else { return };
        let fields: Vec<Vec<u8>> = entries(&inner.arena)
            .filter(|(_, e)| match e.body {
                Body::Plain(p, _) => observed.stamps.covers(inner.unpack(p)),
                Body::Rare(_) => true,
            })
            .map(|(_, e)| e.field.to_vec())
            .collect();
        for f in fields {
            inner.with_field(&f, |st| st.remove_covered(&observed.stamps));
        }
        inner.tidy();
        if inner.is_droppable() {
            self.inner = None;
        }
    }

    /// Drops removal metadata covered by `stable` (`None`: everything is stable) and folds
    /// stable increments into one dot per origin.
    ///
    /// `Some(stable)` must be causally stable (every write it covers, and every write seen by
    /// or concurrent with one, delivered at every replica). It is also joined into the hash's
    /// floor, which `merge` uses in place of the contexts dropped here; the floor is not
    /// metadata (`has_metadata` and `is_blank` ignore it).
    pub fn collect(&mut self, stable: Option<&VersionVector>) {
        self.collect_with(stable, stable);
    }

    /// `collect` with the field contexts dropped and the floor raised by `stable`, but
    /// increments folded only by `everywhere` (delivered at every replica, including peers
    /// left out of `stable`): a removal that had observed part of the increments may still
    /// come from such a peer, and must find them apart. `None`: no peers.
    pub fn collect_with(
        &mut self,
        stable: Option<&VersionVector>,
        everywhere: Option<&VersionVector>,
    ) {
        if let Some(s) = stable.filter(|s| !s.is_empty()) {
            let floor = self.inner_mut().floor.get_or_insert_with(Box::default);
            floor.merge(s);
        }
        let Some(inner) = &mut self.inner else { return };
        if let Some(m) = &mut inner.meta {
            match stable {
                None => m.removed.clear(),
                Some(s) => {
                    m.removed.retain(|_, vv| {
                        vv.forget_covered(s);
                        !vv.is_empty()
                    });
                }
            }
            let mut slots = std::mem::take(&mut m.to_fold);
            slots.sort_unstable();
            slots.dedup();
            for slot in slots {
                if let Some(Some(st)) = m.slab.get_mut(slot as usize) {
                    st.fold(everywhere);
                    if everywhere.is_some() && st.may_fold() {
                        m.to_fold.push(slot);
                    }
                }
            }
        }
        inner.tidy();
        if inner.is_droppable() {
            self.inner = None;
        }
    }

    /// Ops that rebuild an equal visible value on an empty key (RENAME, COPY).
    pub fn recreate_ops(&self) -> Vec<HashOp<Vec<u8>>> {
        self.iter()
            .map(|(f, v)| HashOp::Set {
                field: f.to_vec(),
                value: v.to_bytes(),
                observed: VersionVector::new(),
            })
            .collect()
    }

    /// The value of `field`, if shown.
    pub fn get(&self, field: &[u8]) -> Option<StrView<'_>> {
        let inner = self.inner.as_ref()?;
        let off = inner.find(field)?;
        let e = parse_at(&inner.arena, off)?;
        Some(match e.body {
            Body::Plain(_, v) => StrView::Bytes(v),
            Body::Rare(slot) => inner.rare(slot).view(),
        })
    }

    /// Buckets of a large hash's index (0 while the hash is small, at most `INDEX_MIN`
    /// fields ever, and has no index): with `bucket`, a way to pick random fields and to scan
    /// with a cursor. A field keeps its bucket until the index's growth ends (writes, removals
    /// and arena compactions never move it; `table::SteppedTable`); a state join
    /// (`merge_with_contexts`) builds a new one (`scan_space`).
    pub fn bucket_count(&self) -> usize {
        self.inner
            .as_ref()
            .and_then(|i| i.index.as_ref())
            .map_or(0, |t| t.num_buckets())
    }

    /// Where bucket `i` is in the index's scan space (`table::SteppedTable`): at position
    /// `base + i`, in a space replaced when the index is rebuilt (a new generation).
    pub fn scan_space(&self) -> ScanSpace {
        self.inner
            .as_ref()
            .and_then(|i| i.index.as_ref())
            .map_or(ScanSpace::default(), |t| t.scan_space())
    }

    /// The field in bucket `index` of the index and its value, if that bucket is occupied.
    pub fn bucket(&self, index: usize) -> Option<(&[u8], StrView<'_>)> {
        let inner = self.inner.as_deref()?;
        let off = *inner.index.as_ref()?.get_bucket(index)?;
        let e = parse_at(&inner.arena, off as usize)?;
        let v = match e.body {
            Body::Plain(_, v) => StrView::Bytes(v),
            Body::Rare(slot) => inner.rare(slot).view(),
        };
        Some((e.field, v))
    }

    pub fn contains(&self, field: &[u8]) -> bool {
        self.inner.as_ref().is_some_and(|i| i.find(field).is_some())
    }

    /// The fields shown and their values: in insertion order while small, like Redis's
    /// listpack (entries rewritten in a large hash move to the end).
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], StrView<'_>)> + '_ {
        let inner = self.inner.as_deref();
        let arena: &[u8] = inner.map_or(&[], |i| i.arena.as_slice());
        entries(arena).map(move |(_, e)| {
            let v = match e.body {
                Body::Plain(_, v) => StrView::Bytes(v),
                Body::Rare(slot) => inner.map_or(StrView::Bytes(b""), |i| i.rare(slot).view()),
            };
            (e.field, v)
        })
    }

    /// Whether Redis 7.0 would hold this hash as a listpack (OBJECT ENCODING): it never had
    /// more than `entries_max` fields nor a field or value longer than `value_max` bytes
    /// (`hash-max-listpack-entries`, `hash-max-listpack-value`; Redis converts one way only).
    /// Counter values count at the length of the number a write gave them.
    pub fn fits_listpack(&self, entries_max: u64, value_max: u64) -> bool {
        self.inner
            .as_deref()
            .is_none_or(|i| u64::from(i.most) <= entries_max && u64::from(i.widest) <= value_max)
    }

    /// Heap bytes held (for tests of compactness).
    pub fn heap_bytes(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| {
            std::mem::size_of::<Inner>()
                + i.arena.capacity()
                + i.index.as_ref().map_or(0, |t| t.capacity() * 5)
        })
    }

    /// Canonical content for equality and hashing (order-independent).
    fn canonical(&self) -> Canonical {
        let Some(inner) = &self.inner else {
            return (Vec::new(), Vec::new());
        };
        let mut fields: Vec<(Vec<u8>, FieldState)> = entries(&inner.arena)
            .map(|(_, e)| {
                let st = match e.body {
                    Body::Plain(p, v) => {
                        let mut st = FieldState::default();
                        st.writes.push((inner.unpack(p), SmallBytes::copy_from(v)));
                        st
                    }
                    Body::Rare(slot) => inner.rare(slot).clone(),
                };
                (e.field.to_vec(), st)
            })
            .collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        let removed = inner
            .meta
            .as_ref()
            .map(|m| {
                m.removed
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        (fields, removed)
    }
}

/// Fields sorted with their states, and the per-field removal contexts.
type Canonical = (Vec<(Vec<u8>, FieldState)>, Vec<(SmallBytes, VersionVector)>);

impl PartialEq for HashCrdt {
    fn eq(&self, other: &Self) -> bool {
        self.canonical() == other.canonical()
    }
}

impl Eq for HashCrdt {}

impl Hash for HashCrdt {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.canonical().hash(state);
    }
}

impl std::fmt::Debug for HashCrdt {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (fields, removed) = self.canonical();
        f.debug_struct("HashCrdt")
            .field("fields", &fields)
            .field("removed", &removed)
            .finish()
    }
}

// ------------------------------------------------------------------------------------------
// Codec
// ------------------------------------------------------------------------------------------

const OP_SET: u8 = 0;
const OP_INCR_INT: u8 = 1;
const OP_INCR_FLOAT: u8 = 2;
const OP_DEL: u8 = 3;

/// Appends the encoding of `op` to `out`.
pub fn encode_op<B: AsRef<[u8]>>(op: &HashOp<B>, out: &mut Vec<u8>) {
    match op {
        HashOp::Set {
            field,
            value,
            observed,
        } => {
            codec::put_u8(out, OP_SET);
            codec::put_bytes(out, field.as_ref());
            codec::put_bytes(out, value.as_ref());
            codec::put_vv(out, observed);
        }
        HashOp::Incr { field, delta } => match delta {
            Delta::Int(v) => {
                codec::put_u8(out, OP_INCR_INT);
                codec::put_bytes(out, field.as_ref());
                codec::put_i64(out, *v);
            }
            Delta::Float(d) => {
                codec::put_u8(out, OP_INCR_FLOAT);
                codec::put_bytes(out, field.as_ref());
                codec::put_dec(out, d);
            }
        },
        HashOp::Del { field, observed } => {
            codec::put_u8(out, OP_DEL);
            codec::put_bytes(out, field.as_ref());
            codec::put_vv(out, observed);
        }
    }
}

/// Decodes one op written by `encode_op`.
pub fn decode_op(r: &mut Reader<'_>) -> Result<HashOp<Vec<u8>>, DecodeError> {
    let tag = r.u8()?;
    let field = r.bytes()?.to_vec();
    Ok(match tag {
        OP_SET => {
            let value = r.bytes()?.to_vec();
            let observed = r.vv()?;
            HashOp::Set {
                field,
                value,
                observed,
            }
        }
        OP_INCR_INT => HashOp::Incr {
            field,
            delta: Delta::Int(r.i64()?),
        },
        OP_INCR_FLOAT => HashOp::Incr {
            field,
            delta: Delta::Float(r.dec()?),
        },
        OP_DEL => HashOp::Del {
            field,
            observed: r.vv()?,
        },
        t => return Err(DecodeError::BadTag(t)),
    })
}

// ------------------------------------------------------------------------------------------
// State (full sync): encoding and join
// ------------------------------------------------------------------------------------------

const DELTA_INT: u8 = 0;
const DELTA_FLOAT: u8 = 1;

/// Fewest bytes of one encoded item, so that a declared count must fit the input
/// (`Reader::items`): a field (name length, counts of writes and increments), a field context
/// (name length, vector length), a write (stamp, value length), an increment (stamp, tag,
/// integer).
const FIELD_BYTES_MIN: usize = 3;
const CONTEXT_BYTES_MIN: usize = 2;
const WRITE_BYTES_MIN: usize = 13;
const INC_BYTES_MIN: usize = 21;

fn put_delta(out: &mut Vec<u8>, d: &Delta) {
    match d {
        Delta::Int(v) => {
            codec::put_u8(out, DELTA_INT);
            codec::put_i64(out, *v);
        }
        Delta::Float(f) => {
            codec::put_u8(out, DELTA_FLOAT);
            codec::put_dec(out, f);
        }
    }
}

fn read_delta(r: &mut Reader<'_>) -> Result<Delta, DecodeError> {
    match r.u8()? {
        DELTA_INT => Ok(Delta::Int(r.i64()?)),
        DELTA_FLOAT => Ok(Delta::Float(r.dec()?)),
        t => Err(DecodeError::BadTag(t)),
    }
}

/// A total order on deltas, only to break ties deterministically in `merge`.
fn delta_key(d: &Delta) -> (u8, i128, i32) {
    match d {
        Delta::Int(v) => (DELTA_INT, i128::from(*v), 0),
        Delta::Float(f) => {
            let (coef, exp) = f.to_parts();
            (DELTA_FLOAT, coef, exp)
        }
    }
}

fn same_kind(a: &Delta, b: &Delta) -> bool {
    matches!(
        (a, b),
        (Delta::Int(_), Delta::Int(_)) | (Delta::Float(_), Delta::Float(_))
    )
}

/// Checks a decoded dot: a real stamp, above the previous one, not removed by its own field.
fn check_dot(
    s: Stamp,
    prev: &mut Option<Stamp>,
    removed: Option<&VersionVector>,
) -> Result<(), DecodeError> {
    if s.hlc == Hlc::ZERO {
        return Err(DecodeError::Invalid("hash dot with a zero hlc"));
    }
    if prev.is_some_and(|p| p >= s) {
        return Err(DecodeError::Invalid("hash dots not sorted"));
    }
    if removed.is_some_and(|vv| vv.covers(s)) {
        return Err(DecodeError::Invalid(
            "hash dot covered by its field's context",
        ));
    }
    *prev = Some(s);
    Ok(())
}

/// What one side of a merge knows of a field beyond its dots.
#[derive(Clone, Copy)]
struct Side<'a> {
    /// The field's removal context.
    removed: Option<&'a VersionVector>,
    /// The hash's floor: every write it covers was delivered to that side.
    floor: Option<&'a VersionVector>,
    /// The causal context of that side's replica given to the merge (see
    /// `HashCrdt::merge_with_contexts`).
    context: &'a Context,
}

impl Side<'_> {
    /// Whether this side has seen the write `s` and so, not holding it, removed it (or folded
    /// it into a later increment dot).
    fn saw(&self, s: Stamp) -> bool {
        self.removed.is_some_and(|v| v.covers(s))
            || self.floor.is_some_and(|v| v.covers(s))
            || self.context.covers(s)
    }
}

/// Joins two lists of dots sorted by stamp into `out`: a dot on both sides is kept (`both`
/// picks its entry), a dot on one side only unless the other side saw it.
fn join_dots<T: Clone, const N: usize>(
    x: &[(Stamp, T)],
    y: &[(Stamp, T)],
    sx: Side<'_>,
    sy: Side<'_>,
    both: impl Fn(&(Stamp, T), &(Stamp, T)) -> (Stamp, T),
    out: &mut SmallVec<[(Stamp, T); N]>,
) {
    let mut a = x.iter().peekable();
    let mut b = y.iter().peekable();
    loop {
        match (a.peek(), b.peek()) {
            (Some(p), Some(q)) if p.0 == q.0 => {
                out.push(both(p, q));
                a.next();
                b.next();
            }
            (Some(p), q) if q.is_none_or(|q| p.0 < q.0) => {
                if !sy.saw(p.0) {
                    out.push((*p).clone());
                }
                a.next();
            }
            (_, Some(q)) => {
                if !sx.saw(q.0) {
                    out.push((*q).clone());
                }
                b.next();
            }
            _ => break,
        }
    }
}

impl FieldState {
    fn encode_state(&self, out: &mut Vec<u8>) {
        codec::put_varint(out, self.writes.len() as u64);
        for (s, v) in &self.writes {
            codec::put_stamp(out, *s);
            codec::put_bytes(out, v.as_slice());
        }
        codec::put_varint(out, self.incs.len() as u64);
        for (s, d) in &self.incs {
            codec::put_stamp(out, *s);
            put_delta(out, d);
        }
    }

    fn decode_state(
        r: &mut Reader<'_>,
        removed: Option<&VersionVector>,
    ) -> Result<FieldState, DecodeError> {
        let mut st = FieldState::default();
        let n = r.items(WRITE_BYTES_MIN)?;
        let mut prev = None;
        for _ in 0..n {
            let s = r.stamp()?;
            let v = r.bytes()?;
            check_dot(s, &mut prev, removed)?;
            st.writes.push((s, SmallBytes::copy_from(v)));
        }
        let n = r.items(INC_BYTES_MIN)?;
        let mut prev = None;
        for _ in 0..n {
            let s = r.stamp()?;
            let d = read_delta(r)?;
            check_dot(s, &mut prev, removed)?;
            st.incs.push((s, d));
        }
        if st.is_empty() {
            return Err(DecodeError::Invalid("hash field without a dot"));
        }
        Ok(st)
    }

    /// The stamp of the increment of `s`'s origin and `d`'s kind just below `s`.
    fn inc_before(&self, s: Stamp, d: &Delta) -> Option<Stamp> {
        self.incs
            .iter()
            .filter(|(t, e)| t.replica == s.replica && *t < s && same_kind(e, d))
            .map(|(t, _)| *t)
            .max()
    }

    /// The join of one field's states (see `HashCrdt::merge`).
    fn join(x: &FieldState, y: &FieldState, sx: Side<'_>, sy: Side<'_>) -> FieldState {
        let mut out = FieldState::default();
        join_dots(
            &x.writes,
            &y.writes,
            sx,
            sy,
            |p, _| p.clone(),
            &mut out.writes,
        );
        // An increment dot held on both sides with different deltas is a fold of stable
        // increments on at least one side: the entry that starts further back (its origin's
        // previous dot of that kind is lower or absent) folds more of them in.
        let pick = |p: &(Stamp, Delta), q: &(Stamp, Delta)| {
            if p.1 == q.1 {
                return *p;
            }
            match x.inc_before(p.0, &p.1).cmp(&y.inc_before(q.0, &q.1)) {
                Ordering::Less => *p,
                Ordering::Greater => *q,
                Ordering::Equal => {
                    if delta_key(&p.1) >= delta_key(&q.1) {
                        *p
                    } else {
                        *q
                    }
                }
            }
        };
        join_dots(&x.incs, &y.incs, sx, sy, pick, &mut out.incs);
        out
    }
}

impl Inner {
    /// The state of the live entry `e` (a copy).
    fn state_of(&self, e: &Ent<'_>) -> FieldState {
        match e.body {
            Body::Plain(p, v) => {
                let mut st = FieldState::default();
                st.writes.push((self.unpack(p), SmallBytes::copy_from(v)));
                st
            }
            Body::Rare(slot) => self.rare(slot).clone(),
        }
    }

    fn field_state(&self, field: &[u8]) -> Option<FieldState> {
        let off = self.find(field)?;
        let e = parse_at(&self.arena, off)?;
        Some(self.state_of(&e))
    }

    fn side<'a>(&'a self, field: &[u8], context: &'a Context) -> Side<'a> {
        Side {
            removed: self.meta.as_ref().and_then(|m| m.removed.get(field)),
            floor: self.floor.as_deref(),
            context,
        }
    }
}

impl HashCrdt {
    /// Appends the whole replicated state: the floor, the per-field removal contexts, then
    /// every field in listing order with all its register writes and increment dots. Read
    /// back by `decode_state`; equal states in equal order encode to equal bytes.
    pub fn encode_state(&self, out: &mut Vec<u8>) {
        let empty = VersionVector::new();
        let inner = self.inner.as_deref();
        codec::put_vv(
            out,
            inner.and_then(|i| i.floor.as_deref()).unwrap_or(&empty),
        );
        let removed = inner.and_then(|i| i.meta.as_ref()).map(|m| &m.removed);
        codec::put_varint(out, removed.map_or(0, |m| m.len() as u64));
        for (field, vv) in removed.into_iter().flatten() {
            codec::put_bytes(out, field.as_slice());
            codec::put_vv(out, vv);
        }
        let arena: &[u8] = inner.map_or(&[], |i| i.arena.as_slice());
        codec::put_varint(out, entries(arena).count() as u64);
        if let Some(inner) = inner {
            for (_, e) in entries(arena) {
                codec::put_bytes(out, e.field);
                inner.state_of(&e).encode_state(out);
            }
        }
    }

    /// Reads a state written by `encode_state`. Never panics, and allocates nothing ahead of
    /// the bytes that back it (a declared count must fit the input). Refuses, as
    /// `DecodeError::Invalid`, states that break an invariant: vectors not in their sorted
    /// form, field contexts unsorted or empty, a field twice or with no dot, dots unsorted,
    /// duplicated, with a zero hlc, or covered by their field's context.
    pub fn decode_state(r: &mut Reader<'_>) -> Result<HashCrdt, DecodeError> {
        let floor = r.vv_strict()?;
        let n = r.items(CONTEXT_BYTES_MIN)?;
        let mut removed: BTreeMap<SmallBytes, VersionVector> = BTreeMap::new();
        let mut prev: Option<&[u8]> = None;
        for _ in 0..n {
            let field = r.bytes()?;
            let vv = r.vv_strict()?;
            if vv.is_empty() {
                return Err(DecodeError::Invalid("hash field context empty"));
            }
            if prev.is_some_and(|p| p >= field) {
                return Err(DecodeError::Invalid("hash field contexts not sorted"));
            }
            prev = Some(field);
            removed.insert(SmallBytes::copy_from(field), vv);
        }
        let n = r.items(FIELD_BYTES_MIN)?;
        let mut inner = Inner::default();
        for _ in 0..n {
            let field = r.bytes()?;
            let st = FieldState::decode_state(r, removed.get(field))?;
            if inner.find(field).is_some() {
                return Err(DecodeError::Invalid("hash field twice"));
            }
            inner.put_state(field, None, st);
        }
        if !removed.is_empty() {
            inner.meta_mut().removed = removed;
        }
        if !floor.is_empty() {
            inner.floor = Some(Box::new(floor));
        }
        inner.tidy();
        Ok(HashCrdt {
            inner: (!inner.is_droppable()).then(|| Box::new(inner)),
        })
    }

    /// The state join (full sync): afterwards `self` is the state of a replica that applied
    /// the writes of both sides. Commutative (up to the listing order of fields: `self`'s
    /// first, then those new from `other`), associative and idempotent.
    ///
    /// Per field: a register write or increment dot held on both sides is kept; one held on
    /// one side only is kept unless the other side saw it (its field context or its floor
    /// covers the stamp: it was removed there, or folded into a later increment dot). Of an
    /// increment dot held on both sides with different deltas (a fold of stable increments),
    /// the one that folds more is kept. Removal contexts and floors join pointwise.
    ///
    /// Exact when each side dropped metadata only through `collect(Some(stable))` with
    /// causally stable vectors (then the floor stands in for what was dropped). Removals of
    /// the whole key (`remove_observed`) leave no context here: the caller joins its key
    /// contexts and applies them to the result with `remove_observed`; for a key context it
    /// collected, it must have called `collect(Some(..))` on the hash too (so the floor covers
    /// it), or call it on a copy of `other` before merging. Cost: O(fields + dots), plus the
    /// field lookups (a scan while a hash is small).
    pub fn merge(&mut self, other: &HashCrdt) {
        let none = Context::default();
        self.merge_with_contexts(other, &none, &none);
    }

    /// `merge`, where `mine` and `theirs` are causal contexts of the replicas that hold
    /// `self` and `other`: every write a context covers was delivered there, so a dot held
    /// by one side only that the other side's context covers was removed there (or folded)
    /// and goes, as one its floor covers does. The contexts are not kept in the result (the
    /// replica keeps its own). With empty contexts it is `merge`; commutative (swapping the
    /// contexts with the sides) and, given the join of the contexts as the result's,
    /// associative and idempotent.
    pub fn merge_with_contexts(&mut self, other: &HashCrdt, mine: &Context, theirs: &Context) {
        let empty_other = Inner::default();
        let y = match other.inner.as_deref() {
            Some(y) => y,
            None if self.inner.is_some() && !theirs.is_empty() => &empty_other,
            None => return,
        };
        let own = self.inner.take();
        let empty = Inner::default();
        let x = own.as_deref().unwrap_or(&empty);
        let mut out = Inner {
            most: x.most.max(y.most),
            widest: x.widest.max(y.widest),
            ..Inner::default()
        };
        let no_state = FieldState::default();
        for (_, e) in entries(&x.arena) {
            let sx = x.state_of(&e);
            let sy = y.field_state(e.field);
            let st = FieldState::join(
                &sx,
                sy.as_ref().unwrap_or(&no_state),
                x.side(e.field, mine),
                y.side(e.field, theirs),
            );
            out.put_state(e.field, None, st);
        }
        for (_, e) in entries(&y.arena) {
            if x.find(e.field).is_some() {
                continue;
            }
            let sy = y.state_of(&e);
            let st = FieldState::join(
                &no_state,
                &sy,
                x.side(e.field, mine),
                y.side(e.field, theirs),
            );
            out.put_state(e.field, None, st);
        }
        let mut removed = x
            .meta
            .as_ref()
            .map(|m| m.removed.clone())
            .unwrap_or_default();
        for (field, vv) in y.meta.iter().flat_map(|m| m.removed.iter()) {
            match removed.get_mut(field) {
                Some(r) => r.merge(vv),
                None => {
                    removed.insert(field.clone(), vv.clone());
                }
            }
        }
        if !removed.is_empty() {
            out.meta_mut().removed = removed;
        }
        out.floor = x.floor.clone();
        if let Some(f) = y.floor.as_deref() {
            out.floor.get_or_insert_with(Box::default).merge(f);
        }
        out.tidy();
        self.inner = (!out.is_droppable()).then(|| Box::new(out));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::st;

    fn set(h: &HashCrdt, f: &str, v: &str) -> HashOp<Vec<u8>> {
        HashOp::Set {
            field: f.as_bytes().to_vec(),
            value: v.as_bytes().to_vec(),
            observed: h.field_observed(f.as_bytes()),
        }
    }

    fn show(h: &HashCrdt) -> Vec<(String, String)> {
        h.iter()
            .map(|(f, v)| {
                (
                    String::from_utf8_lossy(f).into_owned(),
                    String::from_utf8_lossy(&v.to_bytes()).into_owned(),
                )
            })
            .collect()
    }

    #[test]
    fn sizes_stay_small() {
        assert!(std::mem::size_of::<HashCrdt>() <= HASH_CRDT_BYTES_MAX);
    }

    #[test]
    fn set_keeps_insertion_order_and_updates_in_place() {
        let mut h = HashCrdt::new();
        let mut t = 0;
        for (f, v) in [("a", "1"), ("b", "2"), ("c", "3")] {
            t += 1;
            let op = set(&h, f, v);
            assert!(h.apply(st(t, 1), &op));
        }
        let op = set(&h, "a", "longer value");
        h.apply(st(10, 1), &op);
        assert_eq!(
            show(&h),
            vec![
                ("a".into(), "longer value".into()),
                ("b".into(), "2".into()),
                ("c".into(), "3".into())
            ]
        );
        assert_eq!(h.len(), 3);
        assert!(!h.has_metadata() || h.clone().has_metadata());
    }

    #[test]
    fn increments_add_and_set_resets_only_observed() {
        let mut h = HashCrdt::new();
        let op = set(&h, "c", "1");
        h.apply(st(1, 1), &op);
        let inc = |d| HashOp::<Vec<u8>>::Incr {
            field: b"c".to_vec(),
            delta: Delta::Int(d),
        };
        h.apply(st(2, 2), &inc(1));
        assert_eq!(h.get(b"c"), Some(StrView::Int(2)));
        // A: SET c 10 having seen the INCR; B: concurrent INCRBY 5.
        let s = set(&h, "c", "10");
        h.apply(st(3, 1), &s);
        h.apply(st(3, 2), &inc(5));
        assert_eq!(h.get(b"c"), Some(StrView::Int(15)));
    }

    /// A counter field incremented at two sites keeps one increment per origin once folded:
    /// nothing more can fold, so the hash holds no metadata (the GC no longer visits the key
    /// on every pass, as it did for ever) until another increment arrives.
    #[test]
    fn one_folded_increment_per_origin_is_no_metadata() {
        let inc = |d: i64| HashOp::Incr {
            field: b"c".to_vec(),
            delta: Delta::Int(d),
        };
        let mut h = HashCrdt::new();
        h.apply(st(1, 1), &inc(1));
        h.apply(st(1, 2), &inc(2));
        h.apply(st(2, 1), &inc(3));
        assert!(h.has_metadata(), "replica 1's two increments may fold");
        let mut everywhere = VersionVector::new();
        everywhere.observe(st(2, 1));
        everywhere.observe(st(1, 2));
        h.collect_with(Some(&everywhere), Some(&everywhere));
        assert_eq!(h.get(b"c"), Some(StrView::Int(6)));
        assert!(
            !h.has_metadata(),
            "one increment per origin: nothing left to fold"
        );
        h.apply(st(3, 2), &inc(4));
        assert!(h.has_metadata());
        everywhere.observe(st(3, 2));
        h.collect_with(Some(&everywhere), Some(&everywhere));
        assert_eq!(h.get(b"c"), Some(StrView::Int(10)));
        assert!(!h.has_metadata());
    }

    #[test]
    fn hdel_removes_its_origins_earlier_increments() {
        // Replica 1 incremented f (by 0), then its HSET-overwritten field was deleted there by
        // an HDEL whose context names only replica 2's write (the HSET that had removed the
        // increment at replica 1, not arrived here yet). The HDEL's own stamp covers the
        // increment: it goes here too, and the state stays one a decoder accepts (found by
        // `state_collection_laws`'s `hash_join_is_the_union_of_ops`).
        let mut h = HashCrdt::new();
        h.apply(
            st(1, 1),
            &HashOp::Incr {
                field: b"f".to_vec(),
                delta: Delta::Int(0),
            },
        );
        let mut observed = VersionVector::new();
        observed.observe(st(2, 2));
        h.apply(
            st(3, 1),
            &HashOp::Del {
                field: b"f".to_vec(),
                observed,
            },
        );
        assert!(show(&h).is_empty(), "{:?}", show(&h));
        let mut buf = Vec::new();
        h.encode_state(&mut buf);
        let back = HashCrdt::decode_state(&mut Reader::new(&buf)).expect("decodes");
        assert_eq!(back, h);
    }

    #[test]
    fn hdel_loses_to_concurrent_update_and_drops_late_writes() {
        let mut a = HashCrdt::new();
        let op = set(&a, "f", "1");
        a.apply(st(1, 1), &op);
        let del = HashOp::Del {
            field: b"f".to_vec(),
            observed: a.field_observed(b"f"),
        };
        let upd = set(&a, "f", "2");
        let mut b = a.clone();
        a.apply(st(2, 1), &del);
        a.apply(st(2, 2), &upd);
        b.apply(st(2, 2), &upd);
        b.apply(st(2, 1), &del);
        assert_eq!(a, b);
        assert_eq!(show(&a), vec![("f".into(), "2".into())]);
        // Late write covered by a removal is dropped.
        let mut c = HashCrdt::new();
        c.apply(st(2, 1), &del);
        assert!(!c.apply(st(1, 1), &op));
        assert!(!c.is_live());
        assert!(c.has_metadata());
        c.collect(None);
        assert!(c.is_blank());
    }

    #[test]
    fn large_hash_uses_index_and_survives_rewrites() {
        let mut h = HashCrdt::new();
        let mut t = 0;
        for i in 0..500 {
            t += 1;
            let op = set(&h, &format!("f{i}"), &format!("v{i}"));
            h.apply(st(t, 1), &op);
        }
        assert!(!h.fits_listpack(128, 64));
        assert!(h.fits_listpack(500, 64));
        for i in (0..500).step_by(2) {
            t += 1;
            let op = set(&h, &format!("f{i}"), &format!("value number {i}"));
            h.apply(st(t, 1), &op);
            t += 1;
            let f = format!("f{}", i + 1);
            let del = HashOp::Del {
                field: f.as_bytes().to_vec(),
                observed: h.field_observed(f.as_bytes()),
            };
            h.apply(st(t, 1), &del);
        }
        h.collect(None);
        assert_eq!(h.len(), 250);
        for i in (0..500).step_by(2) {
            let v = h.get(format!("f{i}").as_bytes()).unwrap().to_bytes();
            assert_eq!(v, format!("value number {i}").into_bytes());
            assert!(!h.contains(format!("f{}", i + 1).as_bytes()));
        }
    }

    /// HSCAN's cursor is a bucket of the index: writes, removals and the arena compactions
    /// they cause must leave every remaining field in its bucket.
    #[test]
    fn fields_keep_their_bucket_through_rewrites_and_compaction() {
        let mut h = HashCrdt::new();
        let mut t = 0;
        for i in 0..2000 {
            t += 1;
            let op = set(&h, &format!("f{i}"), "v");
            h.apply(st(t, 1), &op);
        }
        let buckets = h.bucket_count();
        assert!(buckets >= 2000);
        let place = |h: &HashCrdt| -> BTreeMap<Vec<u8>, usize> {
            (0..h.bucket_count())
                .filter_map(|b| h.bucket(b).map(|(f, _)| (f.to_vec(), b)))
                .collect()
        };
        let before = place(&h);
        assert_eq!(before.len(), 2000);
        let arena_len = |h: &HashCrdt| h.inner.as_ref().map_or(0, |i| i.arena.len());
        let mut compactions = 0;
        // Longer values move every rewritten entry to the arena's end, leaving dead bytes:
        // past the half-dead compaction threshold, several times.
        for round in 0..10 {
            for i in (0..2000).step_by(2) {
                t += 1;
                let op = set(&h, &format!("f{i}"), &"w".repeat(10 + round * 10));
                let len = arena_len(&h);
                h.apply(st(t, 1), &op);
                compactions += usize::from(arena_len(&h) < len);
            }
        }
        assert!(compactions >= 2, "{compactions} compactions");
        for i in (1..2000).step_by(4) {
            t += 1;
            let f = format!("f{i}");
            let del = HashOp::Del {
                field: f.as_bytes().to_vec(),
                observed: h.field_observed(f.as_bytes()),
            };
            h.apply(st(t, 1), &del);
        }
        assert_eq!(h.bucket_count(), buckets);
        let after = place(&h);
        assert_eq!(after.len(), 1500);
        for (f, b) in &after {
            assert_eq!(before.get(f), Some(b));
            let (bf, bv) = h.bucket(*b).unwrap();
            assert_eq!(bf, f.as_slice());
            assert_eq!(Some(bv), h.get(f));
        }
    }

    #[test]
    fn codec_round_trip() {
        let ops: Vec<HashOp<Vec<u8>>> = vec![
            HashOp::Set {
                field: b"f".to_vec(),
                value: b"v".to_vec(),
                observed: VersionVector::new(),
            },
            HashOp::Incr {
                field: b"f".to_vec(),
                delta: Delta::Float(Dec::parse(b"1.5").unwrap()),
            },
            HashOp::Incr {
                field: b"g".to_vec(),
                delta: Delta::Int(-3),
            },
            HashOp::Del {
                field: b"f".to_vec(),
                observed: {
                    let mut v = VersionVector::new();
                    v.observe(st(4, 2));
                    v
                },
            },
        ];
        for op in ops {
            let mut out = Vec::new();
            encode_op(&op, &mut out);
            let mut r = Reader::new(&out);
            assert_eq!(decode_op(&mut r).unwrap(), op);
            assert!(r.is_at_end());
            for cut in 0..out.len() {
                assert!(decode_op(&mut Reader::new(&out[..cut])).is_err());
            }
        }
    }
}

//! The list (LPUSH, LINSERT, LSET, pops...): a sequence CRDT with dense positions.
//!
//! # Identity and order
//! Every element is named by an `ElemId { pos, stamp }`: `stamp` is the write that inserted
//! it, `pos` a non-empty sequence of `i64` digits compared lexicographically (a prefix sorts
//! first). The list is the set of live elements sorted by `(pos, stamp)`. A write that inserts
//! between two elements it sees picks a position strictly between theirs (`between`); pushes
//! use the first digit minus or plus one. Concurrent inserts at the same place may pick the
//! same position: they are all kept, ordered by stamp, the same at every site. Because a
//! position is absolute, no removed element is ever needed as an anchor: removals leave no
//! tombstones in the sequence.
//!
//! # Removals
//! A removal names inclusive ranges of ids and the version vector the issuing replica had
//! observed: it removes the elements in the ranges whose stamps that vector covers, so an
//! element pushed concurrently (not covered) survives. Until collected, a removal is kept as
//! a record, so that an insert it covers that arrives later (another origin's write delivered
//! out of causal order) is dropped. `collect(None)` (no peers) drops every record;
//! `collect(Some(stable))` drops those whose vector `stable` dominates (every insert they
//! cover has been delivered everywhere). LSET (`Replace`) removes one element and inserts the
//! new value at the same position with the new stamp; concurrent LSETs of one element keep
//! both values. Pops are removals: concurrent pops at two sites may return the same element.
//!
//! # Layout
//! Elements live in blocks (like Redis's quicklist of listpacks): a byte arena of entries
//! encoded relative to the block's base (first digit, hlc) and a small table of replica ids,
//! each entry `{header, pos delta, extra digits, hlc delta, len, value, backlen}`, so that it
//! can be read forwards and backwards and moved between blocks sharing a base. A block holds
//! at most `BLOCK_BYTES` (unless it holds a single larger entry); the list keeps its blocks in
//! a `VecDeque` with per-block counts, so index access costs O(blocks + block size).

use std::collections::VecDeque;

use smallvec::SmallVec;

use crate::codec::{self, DecodeError, Reader};
use crate::dot::{Context, ReplicaId, Stamp, VersionVector};
use crate::hlc::Hlc;
use crate::op::Observed;

/// A position: digits compared lexicographically, a prefix first. Never empty.
pub type Pos = SmallVec<[i64; 2]>;

/// The identity of one element, and its place in the order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ElemId {
    pub pos: Pos,
    pub stamp: Stamp,
}

/// Values per insert of `ListCrdt::load_ops`.
pub const LOAD_CHUNK: usize = 1024;

/// Bytes of entries in one block before a new block is started.
pub const BLOCK_BYTES: usize = 4096;
/// Digit spacing left by inserts between elements (LINSERT), so that later inserts nearby
/// rarely need a longer position.
const GAP: i64 = 1 << 32;

/// What one write of this type replicates.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ListOp<B: AsRef<[u8]>> {
    /// Inserts `values` in this order, the `j`-th at `pos` with its last digit plus `j`, each
    /// named by that position and the write's stamp (LPUSH, RPUSH, LINSERT, LMOVE's push).
    Insert { pos: Pos, values: Vec<B> },
    /// Removes, in each inclusive range of ids, the elements whose stamps `observed` covers
    /// (pops, LREM, LTRIM, LMOVE's pop).
    Remove {
        ranges: Vec<(ElemId, ElemId)>,
        observed: VersionVector,
    },
    /// LSET: removes `id` and inserts `value` at `id.pos` with the write's stamp.
    Replace { id: ElemId, value: B },
}

/// A removal kept until causally stable.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Removal {
    lo: ElemId,
    hi: ElemId,
    observed: VersionVector,
}

impl Removal {
    fn covers(&self, id: &ElemId) -> bool {
        self.observed.covers(id.stamp) && self.lo <= *id && *id <= self.hi
    }

    /// A total order (by range, then vector), for canonical listings.
    fn order(&self, other: &Removal) -> std::cmp::Ordering {
        (&self.lo, &self.hi)
            .cmp(&(&other.lo, &other.hi))
            .then_with(|| self.observed.iter().cmp(other.observed.iter()))
    }
}

/// One decoded entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Elem<'a> {
    pub id: ElemId,
    pub value: &'a [u8],
}

#[derive(Clone, Debug, Default)]
struct Block {
    n: u32,
    base_pos: i64,
    base_hlc: u64,
    replicas: SmallVec<[ReplicaId; 2]>,
    data: Vec<u8>,
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

fn varint_len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

fn read_varint(data: &[u8], off: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let b = *data.get(*off)?;
        *off += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// Appends `len` so that it reads backwards from its end: groups of 7 bits, lowest last,
/// each but the leftmost flagged 0x80.
fn put_backlen(out: &mut Vec<u8>, len: usize) {
    let mut groups: SmallVec<[u8; 4]> = SmallVec::new();
    let mut v = len;
    loop {
        groups.push((v & 0x7f) as u8);
        v >>= 7;
        if v == 0 {
            break;
        }
    }
    let k = groups.len() - 1;
    for (i, g) in groups.iter().enumerate().rev() {
        out.push(if i < k { g | 0x80 } else { *g });
    }
}

/// Reads a backlen ending at `end`: (entry body length, bytes of the backlen).
fn read_backlen(data: &[u8], end: usize) -> Option<(usize, usize)> {
    let mut v: usize = 0;
    let mut i = end;
    for shift in (0..35).step_by(7) {
        i = i.checked_sub(1)?;
        let b = *data.get(i)?;
        v |= usize::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some((v, end - i));
        }
    }
    None
}

impl Block {
    fn new_for(id: &ElemId) -> Block {
        Block {
            n: 0,
            base_pos: id.pos.first().copied().unwrap_or(0),
            base_hlc: id.stamp.hlc.0,
            replicas: SmallVec::new(),
            data: Vec::new(),
        }
    }

    /// Encodes one entry relative to this block's base (may add a replica to the table).
    fn encode(&mut self, id: &ElemId, value: &[u8], out: &mut Vec<u8>) {
        let idx = match self.replicas.iter().position(|r| *r == id.stamp.replica) {
            Some(i) => i,
            None if self.replicas.len() < 31 => {
                self.replicas.push(id.stamp.replica);
                self.replicas.len() - 1
            }
            None => 31,
        };
        let extra = id.pos.len().saturating_sub(1);
        let start = out.len();
        out.push((idx as u8) | ((extra.min(7) as u8) << 5));
        if idx == 31 {
            codec::put_u32(out, id.stamp.replica.0);
        }
        if extra >= 7 {
            codec::put_varint(out, extra as u64);
        }
        let d0 = id.pos.first().copied().unwrap_or(0);
        codec::put_varint(out, zigzag(d0.wrapping_sub(self.base_pos)));
        for d in id.pos.iter().skip(1) {
            codec::put_varint(out, zigzag(*d));
        }
        codec::put_varint(
            out,
            zigzag(id.stamp.hlc.0.wrapping_sub(self.base_hlc) as i64),
        );
        codec::put_bytes(out, value);
        let body = out.len() - start;
        put_backlen(out, body);
    }

    /// Decodes the entry at `off`: the element and the offset of the next entry.
    fn decode(&self, off: usize) -> Option<(Elem<'_>, usize)> {
        let data = &self.data;
        let mut o = off;
        let h = *data.get(o)?;
        o += 1;
        let idx = usize::from(h & 31);
        let replica = if idx == 31 {
            let b = data.get(o..o + 4)?;
            o += 4;
            ReplicaId(u32::from_le_bytes([
                *b.first()?,
                *b.get(1)?,
                *b.get(2)?,
                *b.get(3)?,
            ]))
        } else {
            *self.replicas.get(idx)?
        };
        let mut extra = usize::from(h >> 5);
        if extra == 7 {
            extra = usize::try_from(read_varint(data, &mut o)?).ok()?;
        }
        let mut pos = Pos::new();
        pos.push(
            self.base_pos
                .wrapping_add(unzigzag(read_varint(data, &mut o)?)),
        );
        for _ in 0..extra {
            pos.push(unzigzag(read_varint(data, &mut o)?));
        }
        let hlc = self
            .base_hlc
            .wrapping_add(unzigzag(read_varint(data, &mut o)?) as u64);
        let len = usize::try_from(read_varint(data, &mut o)?).ok()?;
        let value = data.get(o..o.checked_add(len)?)?;
        o += len;
        let body = o - off;
        o += varint_len(body as u64);
        Some((
            Elem {
                id: ElemId {
                    pos,
                    stamp: Stamp {
                        hlc: Hlc(hlc),
                        replica,
                    },
                },
                value,
            },
            o,
        ))
    }

    /// The offset of the entry that ends at `end`.
    fn prev_start(&self, end: usize) -> Option<usize> {
        let (body, blen) = read_backlen(&self.data, end)?;
        end.checked_sub(blen + body)
    }

    fn first(&self) -> Option<Elem<'_>> {
        self.decode(0).map(|(e, _)| e)
    }

    fn last(&self) -> Option<Elem<'_>> {
        let s = self.prev_start(self.data.len())?;
        self.decode(s).map(|(e, _)| e)
    }

    /// Offsets of every entry, in order.
    fn offsets(&self) -> Vec<usize> {
        let mut v = Vec::with_capacity(self.n as usize + 1);
        let mut o = 0;
        while o < self.data.len() {
            v.push(o);
            match self.decode(o) {
                Some((_, next)) => o = next,
                None => break,
            }
        }
        v
    }

    /// Inserts encoded bytes at `off`, growing the arena in powers of two up to the block size.
    fn splice_in(&mut self, off: usize, bytes: &[u8]) {
        let need = self.data.len() + bytes.len();
        if self.data.capacity() < need {
            let cap = need.next_power_of_two().clamp(16, BLOCK_BYTES).max(need);
            self.data.reserve_exact(cap - self.data.len());
        }
        if off >= self.data.len() {
            self.data.extend_from_slice(bytes);
        } else {
            self.data.splice(off..off, bytes.iter().copied());
        }
        self.n += 1;
    }

    fn shrink(&mut self) {
        if self.data.capacity() > 2 * self.data.len().max(8) {
            self.data.shrink_to_fit();
        }
    }
}

#[derive(Clone, Debug, Default)]
struct Inner {
    blocks: VecDeque<Block>,
    len: usize,
    /// Every write applied, per origin (also the duplicate filter: delivery is per-origin FIFO).
    seen: VersionVector,
    removals: Vec<Removal>,
}

/// The value. At most 40 bytes (`Value` holds it inline); everything is boxed.
#[derive(Clone, Debug, Default)]
pub struct ListCrdt {
    inner: Option<Box<Inner>>,
}

const _: () = assert!(std::mem::size_of::<ListCrdt>() <= 40);

impl PartialEq for ListCrdt {
    /// Equal visible sequences (ids and values) and equal removal records.
    fn eq(&self, other: &ListCrdt) -> bool {
        self.len() == other.len()
            && self.iter().eq(other.iter())
            && self.sorted_removals() == other.sorted_removals()
    }
}

impl Eq for ListCrdt {}

impl std::hash::Hash for ListCrdt {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.len().hash(state);
        for e in self.iter() {
            e.id.hash(state);
            e.value.hash(state);
        }
    }
}

/// A position strictly between `a` and `b` (`None`: the list's ends); `a < b` when both given.
pub fn between(a: Option<&[i64]>, b: Option<&[i64]>) -> Pos {
    match (a, b) {
        (None, None) => Pos::from_slice(&[0]),
        (None, Some(b)) => before(b, 1),
        (Some(a), None) => after(a, 1),
        (Some(a), Some(b)) => {
            let i = a.iter().zip(b.iter()).take_while(|(x, y)| x == y).count();
            match (a.get(i), b.get(i)) {
                (None, Some(_)) => {
                    let mut p = Pos::from_slice(a);
                    p.extend(before(b.get(i..).unwrap_or_default(), GAP));
                    p
                }
                (Some(&ai), Some(&bi)) if i128::from(bi) - i128::from(ai) >= 2 => {
                    let mut p = Pos::from_slice(a.get(..i).unwrap_or_default());
                    p.push((i128::from(ai) + (i128::from(bi) - i128::from(ai)) / 2) as i64);
                    p
                }
                (Some(_), Some(_)) => {
                    let mut p = Pos::from_slice(a.get(..=i).unwrap_or_default());
                    match a.get(i + 1..) {
                        Some(t) if !t.is_empty() => p.extend(after(t, GAP)),
                        _ => p.push(0),
                    }
                    p
                }
                // a >= b: not a valid call; stay after a.
                _ => after(a, 1),
            }
        }
    }
}

/// A position below `b` (non-empty), `step` below its first digit when possible.
fn before(b: &[i64], step: i64) -> Pos {
    let b0 = b.first().copied().unwrap_or(0);
    match b0.checked_sub(step) {
        Some(x) => Pos::from_slice(&[x]),
        None if b0 > i64::MIN => Pos::from_slice(&[i64::MIN]),
        None => {
            let mut p = Pos::from_slice(&[i64::MIN]);
            match b.get(1..) {
                Some(t) if !t.is_empty() => p.extend(before(t, step)),
                _ => {}
            }
            p
        }
    }
}

/// A position above `a` (non-empty), `step` above its first digit when possible.
fn after(a: &[i64], step: i64) -> Pos {
    let a0 = a.first().copied().unwrap_or(0);
    match a0.checked_add(step) {
        Some(x) => Pos::from_slice(&[x]),
        None if a0 < i64::MAX => Pos::from_slice(&[i64::MAX]),
        None => {
            let mut p = Pos::from_slice(a);
            p.push(0);
            p
        }
    }
}

/// The position of the `j`-th value of an `Insert` at `pos`.
fn nth_pos(pos: &Pos, j: usize) -> Pos {
    let mut p = pos.clone();
    if let Some(last) = p.last_mut() {
        *last = last.wrapping_add(j as i64);
    }
    p
}

impl ListCrdt {
    pub fn new() -> ListCrdt {
        ListCrdt::default()
    }

    fn inner_mut(&mut self) -> &mut Inner {
        self.inner.get_or_insert_with(Box::default)
    }

    /// Number of visible elements.
    pub fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| i.len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Applies a local or remote write; false when it was a duplicate or already removed.
    pub fn apply<B: AsRef<[u8]>>(&mut self, stamp: Stamp, op: &ListOp<B>) -> bool {
        let inner = self.inner_mut();
        if inner.seen.covers(stamp) {
            return false;
        }
        inner.seen.observe(stamp);
        match op {
            ListOp::Insert { pos, values } => {
                // Values that all go before the head (LPUSH) are inserted last first, so that
                // each takes the head's fast path.
                let n = values.len();
                let before_head = n > 1
                    && inner
                        .blocks
                        .front()
                        .and_then(|b| b.first())
                        .is_some_and(|f| {
                            ElemId {
                                pos: nth_pos(pos, n - 1),
                                stamp,
                            } < f.id
                        });
                let mut any = false;
                let mut one = |j: usize, v: &B| {
                    let id = ElemId {
                        pos: nth_pos(pos, j),
                        stamp,
                    };
                    any |= inner.insert(id, v.as_ref());
                };
                if before_head {
                    values.iter().enumerate().rev().for_each(|(j, v)| one(j, v));
                } else {
                    values.iter().enumerate().for_each(|(j, v)| one(j, v));
                }
                any
            }
            ListOp::Remove { ranges, observed } => {
                for (lo, hi) in ranges {
                    inner.remove_range(lo, hi, observed);
                    inner.removals.push(Removal {
                        lo: lo.clone(),
                        hi: hi.clone(),
                        observed: observed.clone(),
                    });
                }
                true
            }
            ListOp::Replace { id, value } => {
                let mut vv = VersionVector::new();
                vv.observe(id.stamp);
                inner.remove_range(id, id, &vv);
                inner.removals.push(Removal {
                    lo: id.clone(),
                    hi: id.clone(),
                    observed: vv,
                });
                inner.insert(
                    ElemId {
                        pos: id.pos.clone(),
                        stamp,
                    },
                    value.as_ref(),
                )
            }
        }
    }

    /// Whether it shows anything (the key exists).
    pub fn is_live(&self) -> bool {
        !self.is_empty()
    }

    /// The highest stamp among its live writes (the type-conflict order). O(n).
    pub fn live_stamp(&self) -> Option<Stamp> {
        self.iter().map(|e| e.id.stamp).max()
    }

    /// Holds neither live writes nor metadata.
    pub fn is_blank(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(|i| i.len == 0 && i.removals.is_empty())
    }

    /// Holds removal metadata that `collect` would drop.
    pub fn has_metadata(&self) -> bool {
        self.inner.as_ref().is_some_and(|i| !i.removals.is_empty())
    }

    /// Adds every stamp seen (live writes and removal contexts) to `vv`.
    pub fn observe_into(&self, vv: &mut VersionVector) {
        if let Some(i) = &self.inner {
            vv.merge(&i.seen);
            for r in &i.removals {
                vv.merge(&r.observed);
            }
        }
    }

    /// Adds the stamps of the elements present (not removal records) to `vv`.
    pub fn live_into(&self, vv: &mut VersionVector) {
        for e in self.iter() {
            vv.observe(e.id.stamp);
        }
    }

    /// The version vector a local removal carries (covers every element held).
    pub fn observed_vv(&self) -> VersionVector {
        let mut vv = VersionVector::new();
        self.observe_into(&mut vv);
        vv
    }

    /// DEL (or a SET of the key): removes everything `observed` covers.
    pub fn remove_observed(&mut self, observed: &Observed) {
        let Some(inner) = self.inner.as_mut() else {
            return;
        };
        if observed.stamps.dominates(&inner.seen) {
            inner.blocks.clear();
            inner.len = 0;
        } else {
            inner.retain_blocks(0, |e| !observed.stamps.covers(e.id.stamp));
        }
    }

    /// Drops removal metadata covered by `stable` (`None`: everything is stable).
    ///
    /// `Some(stable)` must be causally stable (every write it covers, and every write seen by
    /// or concurrent with one, delivered at every replica); it is joined into `seen`, which
    /// `merge` uses in place of the records dropped here, so the list is kept even when blank
    /// (`is_blank` still says so: the key may drop it).
    pub fn collect(&mut self, stable: Option<&VersionVector>) {
        if let Some(s) = stable.filter(|s| !s.is_empty()) {
            self.inner_mut().seen.merge(s);
        }
        let Some(inner) = self.inner.as_mut() else {
            return;
        };
        match stable {
            None => inner.removals = Vec::new(),
            Some(s) => inner.removals.retain(|r| !s.dominates(&r.observed)),
        }
        if stable.is_none() && inner.len == 0 && inner.removals.is_empty() {
            self.inner = None;
        }
    }

    /// Ops that rebuild an equal visible value on an empty key (RENAME, COPY).
    pub fn recreate_ops(&self) -> Vec<ListOp<Vec<u8>>> {
        ListCrdt::load_ops(self.iter().map(|e| e.value.to_vec()))
    }

    /// Ops that make an empty list hold `values` in this order (RENAME, COPY, RESTORE):
    /// inserts of `LOAD_CHUNK` values each, at positions that follow one another.
    pub fn load_ops<B: AsRef<[u8]>>(values: impl IntoIterator<Item = B>) -> Vec<ListOp<B>> {
        let mut ops = Vec::new();
        let mut chunk: Vec<B> = Vec::new();
        for v in values {
            chunk.push(v);
            if chunk.len() == LOAD_CHUNK {
                let start = (ops.len() * LOAD_CHUNK) as i64;
                ops.push(ListOp::Insert {
                    pos: Pos::from_slice(&[start]),
                    values: std::mem::take(&mut chunk),
                });
            }
        }
        if !chunk.is_empty() {
            let start = (ops.len() * LOAD_CHUNK) as i64;
            ops.push(ListOp::Insert {
                pos: Pos::from_slice(&[start]),
                values: chunk,
            });
        }
        ops
    }

    fn sorted_removals(&self) -> Vec<&Removal> {
        let mut v: Vec<&Removal> = self.inner.iter().flat_map(|i| i.removals.iter()).collect();
        v.sort_by(|a, b| a.order(b));
        v.dedup();
        v
    }

    /// Elements in order.
    pub fn iter(&self) -> Iter<'_> {
        self.iter_from(0)
    }

    /// Elements in order from `index`.
    pub fn iter_from(&self, index: usize) -> Iter<'_> {
        let mut it = Iter {
            list: self,
            block: 0,
            off: 0,
        };
        if let Some(inner) = &self.inner {
            if let Some((b, k)) = inner.locate(index) {
                it.block = b;
                if let Some(blk) = inner.blocks.get(b) {
                    let mut off = 0;
                    for _ in 0..k {
                        match blk.decode(off) {
                            Some((_, next)) => off = next,
                            None => break,
                        }
                    }
                    it.off = off;
                }
            } else {
                it.block = inner.blocks.len();
            }
        }
        it
    }

    /// Elements in reverse order from `index` (towards the head).
    pub fn iter_rev_from(&self, index: usize) -> RevIter<'_> {
        let mut it = RevIter {
            list: self,
            block: 0,
            end: 0,
            done: true,
        };
        if let Some(inner) = &self.inner {
            if let Some((b, k)) = inner.locate(index) {
                if let Some(blk) = inner.blocks.get(b) {
                    let mut off = 0;
                    for _ in 0..=k {
                        match blk.decode(off) {
                            Some((_, next)) => off = next,
                            None => break,
                        }
                    }
                    it = RevIter {
                        list: self,
                        block: b,
                        end: off,
                        done: false,
                    };
                }
            }
        }
        it
    }

    /// The element at `index` (0 is the head).
    pub fn get(&self, index: usize) -> Option<Elem<'_>> {
        let inner = self.inner.as_ref()?;
        let (b, k) = inner.locate(index)?;
        let blk = inner.blocks.get(b)?;
        if k + 1 == blk.n as usize {
            return blk.last();
        }
        let mut off = 0;
        for _ in 0..k {
            off = blk.decode(off)?.1;
        }
        blk.decode(off).map(|(e, _)| e)
    }

    pub fn first(&self) -> Option<Elem<'_>> {
        self.inner.as_ref()?.blocks.front()?.first()
    }

    pub fn last(&self) -> Option<Elem<'_>> {
        self.inner.as_ref()?.blocks.back()?.last()
    }

    /// The op of LPUSH (`front`) or RPUSH of `values`, given in the order they will have in
    /// the list (LPUSH a b c gives c b a).
    pub fn push_op<B: AsRef<[u8]>>(&self, front: bool, values: Vec<B>) -> ListOp<B> {
        let n = values.len().max(1) as i64;
        let pos = if front {
            match self.first() {
                Some(f) => {
                    let f0 = f.id.pos.first().copied().unwrap_or(0);
                    match f0.checked_sub(n) {
                        Some(x) => Pos::from_slice(&[x]),
                        None => before(&f.id.pos, n),
                    }
                }
                None => Pos::from_slice(&[0]),
            }
        } else {
            match self.last() {
                Some(l) => after(&l.id.pos, 1),
                None => Pos::from_slice(&[0]),
            }
        };
        ListOp::Insert { pos, values }
    }

    /// The op of LINSERT of `value` before (or after) the element at `index`.
    pub fn insert_op<B: AsRef<[u8]>>(&self, index: usize, after_it: bool, value: B) -> ListOp<B> {
        let (a, b) = if after_it {
            (
                self.get(index),
                index.checked_add(1).and_then(|i| self.get(i)),
            )
        } else {
            (
                index.checked_sub(1).and_then(|i| self.get(i)),
                self.get(index),
            )
        };
        let pos = between(
            a.as_ref().map(|e| &e.id.pos[..]),
            b.as_ref().map(|e| &e.id.pos[..]),
        );
        ListOp::Insert {
            pos,
            values: vec![value],
        }
    }

    /// The op of LSET of the element at `index`.
    pub fn replace_op<B: AsRef<[u8]>>(&self, index: usize, value: B) -> Option<ListOp<B>> {
        let e = self.get(index)?;
        Some(ListOp::Replace { id: e.id, value })
    }

    /// The op removing the elements at indices `start..=end` (pops, LTRIM's ends).
    pub fn remove_range_op<B: AsRef<[u8]>>(&self, start: usize, end: usize) -> Option<ListOp<B>> {
        let lo = self.get(start)?.id;
        let hi = self.get(end)?.id;
        Some(ListOp::Remove {
            ranges: vec![(lo, hi)],
            observed: self.observed_vv(),
        })
    }

    /// The op removing the given ranges of ids (each first..=last of a run of neighbours).
    pub fn remove_ids_op<B: AsRef<[u8]>>(&self, ranges: Vec<(ElemId, ElemId)>) -> ListOp<B> {
        ListOp::Remove {
            ranges,
            observed: self.observed_vv(),
        }
    }

    /// Number of blocks and bytes of entries (for tests and memory reports).
    pub fn footprint(&self) -> (usize, usize) {
        self.inner.as_ref().map_or((0, 0), |i| {
            (
                i.blocks.len(),
                i.blocks.iter().map(|b| b.data.capacity()).sum(),
            )
        })
    }

    /// Removal records held (for tests).
    pub fn removal_records(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| i.removals.len())
    }
}

impl Inner {
    /// The block and the index inside it of element `index`.
    fn locate(&self, index: usize) -> Option<(usize, usize)> {
        if index >= self.len {
            return None;
        }
        if index < self.len / 2 {
            let mut i = index;
            for (b, blk) in self.blocks.iter().enumerate() {
                let n = blk.n as usize;
                if i < n {
                    return Some((b, i));
                }
                i -= n;
            }
        } else {
            let mut from_end = self.len - 1 - index;
            for (b, blk) in self.blocks.iter().enumerate().rev() {
                let n = blk.n as usize;
                if from_end < n {
                    return Some((b, n - 1 - from_end));
                }
                from_end -= n;
            }
        }
        None
    }

    fn removed_by_record(&self, id: &ElemId) -> bool {
        self.removals.iter().any(|r| r.covers(id))
    }

    /// Inserts one element in order; false when present already or removed.
    fn insert(&mut self, id: ElemId, value: &[u8]) -> bool {
        if self.removed_by_record(&id) {
            return false;
        }
        let mut buf = Vec::with_capacity(value.len() + 24);
        let nb = self.blocks.len();
        // Fast paths: before the head, after the tail.
        let at_front = self
            .blocks
            .front()
            .and_then(|b| b.first())
            .is_none_or(|f| id < f.id);
        if at_front {
            let fits = self
                .blocks
                .front()
                .is_some_and(|b| b.data.len() + value.len() + 16 <= BLOCK_BYTES);
            if !fits {
                self.blocks.push_front(Block::new_for(&id));
            }
            if let Some(b) = self.blocks.front_mut() {
                b.encode(&id, value, &mut buf);
                b.splice_in(0, &buf);
            }
            self.len += 1;
            return true;
        }
        let at_back = self
            .blocks
            .back()
            .and_then(|b| b.last())
            .is_some_and(|l| l.id < id);
        if at_back {
            let fits = self
                .blocks
                .back()
                .is_some_and(|b| b.data.len() + value.len() + 16 <= BLOCK_BYTES);
            if !fits {
                self.blocks.push_back(Block::new_for(&id));
            }
            if let Some(b) = self.blocks.back_mut() {
                b.encode(&id, value, &mut buf);
                let end = b.data.len();
                b.splice_in(end, &buf);
            }
            self.len += 1;
            return true;
        }
        // The last block whose first element is <= id.
        let (mut lo, mut hi) = (0usize, nb);
        while hi - lo > 1 {
            let mid = (lo + hi) / 2;
            let le = self
                .blocks
                .get(mid)
                .and_then(|b| b.first())
                .is_some_and(|f| f.id <= id);
            if le {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let Some(b) = self.blocks.get_mut(lo) else {
            return false;
        };
        let mut off = 0;
        while off < b.data.len() {
            let Some((e, next)) = b.decode(off) else {
                return false;
            };
            if e.id == id {
                return false;
            }
            if e.id > id {
                break;
            }
            off = next;
        }
        b.encode(&id, value, &mut buf);
        b.splice_in(off, &buf);
        self.len += 1;
        if b.data.len() > BLOCK_BYTES && b.n > 1 {
            self.split(lo);
        }
        true
    }

    /// Splits block `b` in two halves (both keep the base and the replica table).
    fn split(&mut self, b: usize) {
        let Some(blk) = self.blocks.get_mut(b) else {
            return;
        };
        let offs = blk.offsets();
        let half = offs.len() / 2;
        let Some(&at) = offs.get(half) else {
            return;
        };
        let tail = blk.data.split_off(at);
        let moved = (offs.len() - half) as u32;
        blk.n -= moved;
        blk.shrink();
        let new = Block {
            n: moved,
            base_pos: blk.base_pos,
            base_hlc: blk.base_hlc,
            replicas: blk.replicas.clone(),
            data: tail,
        };
        self.blocks.insert(b + 1, new);
    }

    /// Removes the elements in `lo..=hi` whose stamps `observed` covers.
    fn remove_range(&mut self, lo: &ElemId, hi: &ElemId, observed: &VersionVector) {
        if lo > hi || self.len == 0 {
            return;
        }
        // First block that may hold lo: the last whose first element is <= lo.
        let nb = self.blocks.len();
        // Pops: the range starts in the first or the last block.
        let in_first = self
            .blocks
            .get(1)
            .and_then(|b| b.first())
            .is_none_or(|f| f.id > *lo);
        let in_last = self
            .blocks
            .back()
            .and_then(|b| b.first())
            .is_some_and(|f| f.id <= *lo);
        let (mut a, mut z) = if in_first {
            (0, 1)
        } else if in_last {
            (nb - 1, nb)
        } else {
            (0usize, nb)
        };
        while z - a > 1 {
            let mid = (a + z) / 2;
            let le = self
                .blocks
                .get(mid)
                .and_then(|b| b.first())
                .is_some_and(|f| f.id <= *lo);
            if le {
                a = mid;
            } else {
                z = mid;
            }
        }
        let mut b = a;
        while b < self.blocks.len() {
            let past = self
                .blocks
                .get(b)
                .and_then(|blk| blk.first())
                .is_none_or(|f| f.id > *hi);
            if past {
                break;
            }
            let removed = match self.blocks.get_mut(b) {
                Some(blk) => retain_block_until(blk, Some(hi), |e| {
                    !(e.id >= *lo && observed.covers(e.id.stamp))
                }),
                None => 0,
            };
            self.len -= removed;
            if self.blocks.get(b).is_some_and(|blk| blk.n == 0) {
                self.blocks.remove(b);
            } else {
                b += 1;
            }
        }
    }

    /// Keeps the elements for which `keep` holds, in every block from `from`.
    fn retain_blocks(&mut self, from: usize, keep: impl Fn(&Elem<'_>) -> bool) {
        let mut b = from;
        while let Some(blk) = self.blocks.get_mut(b) {
            let removed = retain_block(blk, &keep);
            self.len -= removed;
            if blk.n == 0 {
                self.blocks.remove(b);
            } else {
                b += 1;
            }
        }
    }
}

/// Keeps the entries of `blk` for which `keep` holds; returns how many were removed. A
/// removed prefix or suffix is cut without copying the rest.
fn retain_block(blk: &mut Block, keep: impl Fn(&Elem<'_>) -> bool) -> usize {
    retain_block_until(blk, None, keep)
}

/// `retain_block`, looking only at entries up to `hi` (entries are sorted: those after it are
/// kept without being decoded).
fn retain_block_until(
    blk: &mut Block,
    hi: Option<&ElemId>,
    keep: impl Fn(&Elem<'_>) -> bool,
) -> usize {
    let mut spans: Vec<(usize, usize)> = Vec::new();
    let mut removed = 0;
    let mut off = 0;
    while off < blk.data.len() {
        let Some((e, next)) = blk.decode(off) else {
            break;
        };
        if hi.is_some_and(|h| e.id > *h) {
            let end = blk.data.len();
            match spans.last_mut() {
                Some(s) if s.1 == off => s.1 = end,
                _ => spans.push((off, end)),
            }
            break;
        }
        if keep(&e) {
            match spans.last_mut() {
                Some(s) if s.1 == off => s.1 = next,
                _ => spans.push((off, next)),
            }
        } else {
            removed += 1;
        }
        off = next;
    }
    if removed == 0 {
        return 0;
    }
    match spans.as_slice() {
        [] => blk.data = Vec::new(),
        [(s, e)] => {
            blk.data.truncate(*e);
            blk.data.drain(..*s);
        }
        _ => {
            let mut data = Vec::with_capacity(spans.iter().map(|(s, e)| e - s).sum());
            for (s, e) in &spans {
                data.extend_from_slice(blk.data.get(*s..*e).unwrap_or_default());
            }
            blk.data = data;
        }
    }
    blk.n -= removed as u32;
    blk.shrink();
    removed
}

/// Forward iterator over elements.
pub struct Iter<'a> {
    list: &'a ListCrdt,
    block: usize,
    off: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Elem<'a>;

    fn next(&mut self) -> Option<Elem<'a>> {
        let inner = self.list.inner.as_ref()?;
        loop {
            let blk = inner.blocks.get(self.block)?;
            if self.off < blk.data.len() {
                let (e, next) = blk.decode(self.off)?;
                self.off = next;
                return Some(e);
            }
            self.block += 1;
            self.off = 0;
        }
    }
}

/// Backward iterator over elements.
pub struct RevIter<'a> {
    list: &'a ListCrdt,
    block: usize,
    end: usize,
    done: bool,
}

impl<'a> Iterator for RevIter<'a> {
    type Item = Elem<'a>;

    fn next(&mut self) -> Option<Elem<'a>> {
        if self.done {
            return None;
        }
        let inner = self.list.inner.as_ref()?;
        loop {
            let blk = inner.blocks.get(self.block)?;
            if self.end > 0 {
                let s = blk.prev_start(self.end)?;
                self.end = s;
                return blk.decode(s).map(|(e, _)| e);
            }
            if self.block == 0 {
                self.done = true;
                return None;
            }
            self.block -= 1;
            self.end = inner.blocks.get(self.block).map_or(0, |b| b.data.len());
        }
    }
}

fn put_pos(out: &mut Vec<u8>, pos: &[i64]) {
    codec::put_varint(out, pos.len() as u64);
    for d in pos {
        codec::put_varint(out, zigzag(*d));
    }
}

fn put_id(out: &mut Vec<u8>, id: &ElemId) {
    put_pos(out, &id.pos);
    codec::put_stamp(out, id.stamp);
}

fn read_pos(r: &mut Reader<'_>) -> Result<Pos, DecodeError> {
    let n = r.count("list position")?;
    if n == 0 {
        return Err(DecodeError::TooManyEntries {
            what: "list position",
            n: 0,
        });
    }
    let mut p = Pos::new();
    for _ in 0..n {
        p.push(unzigzag(r.varint()?));
    }
    Ok(p)
}

fn read_id(r: &mut Reader<'_>) -> Result<ElemId, DecodeError> {
    let pos = read_pos(r)?;
    let stamp = r.stamp()?;
    Ok(ElemId { pos, stamp })
}

const TAG_INSERT: u8 = 0;
const TAG_REMOVE: u8 = 1;
const TAG_REPLACE: u8 = 2;

/// Appends the encoding of `op` to `out`.
pub fn encode_op<B: AsRef<[u8]>>(op: &ListOp<B>, out: &mut Vec<u8>) {
    match op {
        ListOp::Insert { pos, values } => {
            codec::put_u8(out, TAG_INSERT);
            put_pos(out, pos);
            codec::put_varint(out, values.len() as u64);
            for v in values {
                codec::put_bytes(out, v.as_ref());
            }
        }
        ListOp::Remove { ranges, observed } => {
            codec::put_u8(out, TAG_REMOVE);
            codec::put_varint(out, ranges.len() as u64);
            for (lo, hi) in ranges {
                put_id(out, lo);
                put_id(out, hi);
            }
            codec::put_vv(out, observed);
        }
        ListOp::Replace { id, value } => {
            codec::put_u8(out, TAG_REPLACE);
            put_id(out, id);
            codec::put_bytes(out, value.as_ref());
        }
    }
}

/// Decodes one op written by `encode_op`. Counts of values and ranges are not limited by
/// `ENTRIES_MAX` (a push may carry many values), but nothing is allocated ahead of the bytes
/// that back it.
pub fn decode_op(r: &mut Reader<'_>) -> Result<ListOp<Vec<u8>>, DecodeError> {
    match r.u8()? {
        TAG_INSERT => {
            let pos = read_pos(r)?;
            let n = r.varint()?;
            let mut values = Vec::new();
            for _ in 0..n {
                values.push(r.bytes()?.to_vec());
            }
            Ok(ListOp::Insert { pos, values })
        }
        TAG_REMOVE => {
            let n = r.varint()?;
            let mut ranges = Vec::new();
            for _ in 0..n {
                let lo = read_id(r)?;
                let hi = read_id(r)?;
                ranges.push((lo, hi));
            }
            let observed = r.vv()?;
            Ok(ListOp::Remove { ranges, observed })
        }
        TAG_REPLACE => {
            let id = read_id(r)?;
            let value = r.bytes()?.to_vec();
            Ok(ListOp::Replace { id, value })
        }
        t => Err(DecodeError::BadTag(t)),
    }
}

// ------------------------------------------------------------------------------------------
// State (full sync): encoding and join
// ------------------------------------------------------------------------------------------

/// Fewest bytes of one encoded item, so that a declared count must fit the input
/// (`Reader::items`): an element (one-digit position, stamp, value length), a removal record
/// (two such ids without values, vector length).
const ELEM_BYTES_MIN: usize = 15;
const REMOVAL_BYTES_MIN: usize = 29;

/// Answers "does a removal record cover this element?" for elements asked in increasing id
/// order, in one sweep over the records sorted by their low end: O(records log records) plus,
/// per element, the records whose range holds it.
struct Coverage<'a> {
    /// Records by low end.
    records: Vec<&'a Removal>,
    next: usize,
    /// Records whose low end is passed and whose high end may not be.
    open: Vec<&'a Removal>,
}

impl<'a> Coverage<'a> {
    fn new(records: &'a [Removal]) -> Coverage<'a> {
        let mut records: Vec<&Removal> = records.iter().collect();
        records.sort_by(|a, b| a.lo.cmp(&b.lo));
        Coverage {
            records,
            next: 0,
            open: Vec::new(),
        }
    }

    /// Whether a record covers `id`; `id` must not be below an id asked before.
    fn covers(&mut self, id: &ElemId) -> bool {
        while let Some(r) = self.records.get(self.next).filter(|r| r.lo <= *id) {
            self.open.push(r);
            self.next += 1;
        }
        self.open.retain(|r| r.hi >= *id);
        self.open.iter().any(|r| r.observed.covers(id.stamp))
    }
}

/// Every record once, in `Removal::order`.
fn canonical_removals<'a>(records: impl Iterator<Item = &'a Removal>) -> Vec<&'a Removal> {
    let mut v: Vec<&Removal> = records.collect();
    v.sort_by(|a, b| a.order(b));
    v.dedup();
    v
}

impl Inner {
    /// Appends an element above every element held (callers give increasing ids).
    fn push_back(&mut self, id: ElemId, value: &[u8]) {
        debug_assert!(self.removals.is_empty());
        self.insert(id, value);
    }

    fn is_droppable(&self) -> bool {
        self.len == 0 && self.removals.is_empty() && self.seen.is_empty()
    }
}

impl ListCrdt {
    /// Appends the whole replicated state: `seen`, the removal records (each once, in a fixed
    /// order), then the elements in list order with their ids. Canonical: equal states encode
    /// to equal bytes.
    pub fn encode_state(&self, out: &mut Vec<u8>) {
        let empty = VersionVector::new();
        let inner = self.inner.as_deref();
        codec::put_vv(out, inner.map_or(&empty, |i| &i.seen));
        let records = canonical_removals(inner.iter().flat_map(|i| i.removals.iter()));
        codec::put_varint(out, records.len() as u64);
        for r in records {
            put_id(out, &r.lo);
            put_id(out, &r.hi);
            codec::put_vv(out, &r.observed);
        }
        codec::put_varint(out, self.len() as u64);
        for e in self.iter() {
            put_id(out, &e.id);
            codec::put_bytes(out, e.value);
        }
    }

    /// Reads a state written by `encode_state`. Never panics, and allocates nothing ahead of
    /// the bytes that back it (a declared count must fit the input). Refuses, as
    /// `DecodeError::Invalid`, states that break an invariant: vectors not in their sorted
    /// form, elements not in increasing id order, an element `seen` does not cover (or with a
    /// zero hlc), or one a removal record covers.
    pub fn decode_state(r: &mut Reader<'_>) -> Result<ListCrdt, DecodeError> {
        let seen = r.vv_strict()?;
        let n = r.items(REMOVAL_BYTES_MIN)?;
        let mut removals = Vec::new();
        for _ in 0..n {
            let lo = read_id(r)?;
            let hi = read_id(r)?;
            let observed = r.vv_strict()?;
            removals.push(Removal { lo, hi, observed });
        }
        let n = r.items(ELEM_BYTES_MIN)?;
        let mut inner = Inner {
            seen,
            ..Inner::default()
        };
        let mut cov = Coverage::new(&removals);
        let mut last: Option<ElemId> = None;
        for _ in 0..n {
            let id = read_id(r)?;
            let value = r.bytes()?;
            if last.as_ref().is_some_and(|l| *l >= id) {
                return Err(DecodeError::Invalid("list elements not in order"));
            }
            if id.stamp.hlc == Hlc::ZERO || !inner.seen.covers(id.stamp) {
                return Err(DecodeError::Invalid("list element not seen"));
            }
            if cov.covers(&id) {
                return Err(DecodeError::Invalid("list element covered by a removal"));
            }
            last = Some(id.clone());
            inner.push_back(id, value);
        }
        inner.removals = removals;
        Ok(ListCrdt {
            inner: (!inner.is_droppable()).then(|| Box::new(inner)),
        })
    }

    /// The state join (full sync): afterwards `self` is the state of a replica that applied
    /// the writes of both sides. Commutative, associative and idempotent.
    ///
    /// An element held on both sides is kept; one held on one side only is kept unless the
    /// other side saw it (its `seen` covers the stamp: the insert was applied there and
    /// removed since; or one of its removal records covers it). Removal records union
    /// (duplicates dropped), `seen` joins pointwise.
    ///
    /// Exact when each side dropped metadata only through `collect(Some(stable))` with
    /// causally stable vectors (joined into `seen`). Removals of the whole key leave no
    /// record: the caller joins its key contexts and applies them to the result with
    /// `remove_observed`; inserts a side dropped under a key context (never applied here) are
    /// known to it only through that context, or, once collected, through
    /// `collect(Some(..))` on this value. Cost: O(n + m) elements plus a sweep over the
    /// records; the blocks are rebuilt full.
    pub fn merge(&mut self, other: &ListCrdt) {
        let none = Context::default();
        self.merge_with_contexts(other, &none, &none);
    }

    /// `merge`, where `mine` and `theirs` are causal contexts of the replicas that hold
    /// `self` and `other`: every insert a context covers was delivered there, so an element
    /// held by one side only that the other side's context covers was removed there and
    /// goes, as one its `seen` covers does. The contexts are not kept in the result. With
    /// empty contexts it is `merge`; commutative (swapping the contexts with the sides) and,
    /// given the join of the contexts as the result's, associative and idempotent.
    pub fn merge_with_contexts(&mut self, other: &ListCrdt, mine: &Context, theirs: &Context) {
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
            seen: x.seen.clone(),
            ..Inner::default()
        };
        out.seen.merge(&y.seen);
        // What each side saw: its own `seen` and its replica's context.
        let saw_x = |s: Stamp| x.seen.covers(s) || mine.covers(s);
        let saw_y = |s: Stamp| y.seen.covers(s) || theirs.covers(s);
        let mut cov_x = Coverage::new(&x.removals);
        let mut cov_y = Coverage::new(&y.removals);
        let xs = ListCrdt::iter_inner(x);
        let ys = ListCrdt::iter_inner(y);
        let (mut xs, mut ys) = (xs.peekable(), ys.peekable());
        loop {
            match (xs.peek(), ys.peek()) {
                (Some(p), Some(q)) if p.id == q.id => {
                    out.push_back(p.id.clone(), p.value);
                    xs.next();
                    ys.next();
                }
                (Some(p), q) if q.is_none_or(|q| p.id < q.id) => {
                    if !saw_y(p.id.stamp) && !cov_y.covers(&p.id) {
                        out.push_back(p.id.clone(), p.value);
                    }
                    xs.next();
                }
                (_, Some(q)) => {
                    if !saw_x(q.id.stamp) && !cov_x.covers(&q.id) {
                        out.push_back(q.id.clone(), q.value);
                    }
                    ys.next();
                }
                _ => break,
            }
        }
        out.removals = canonical_removals(x.removals.iter().chain(y.removals.iter()))
            .into_iter()
            .cloned()
            .collect();
        self.inner = (!out.is_droppable()).then(|| Box::new(out));
    }

    /// Elements of `inner` in order.
    fn iter_inner(inner: &Inner) -> impl Iterator<Item = Elem<'_>> + '_ {
        inner.blocks.iter().flat_map(|b| {
            let mut off = 0;
            std::iter::from_fn(move || {
                let (e, next) = b.decode(off)?;
                off = next;
                Some(e)
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::st;

    fn vals(l: &ListCrdt) -> Vec<Vec<u8>> {
        l.iter().map(|e| e.value.to_vec()).collect()
    }

    #[test]
    fn push_pop_index_like_a_deque() {
        let mut l = ListCrdt::new();
        let mut h = 1;
        for i in 0..3000u32 {
            let v = i.to_string().into_bytes();
            let op = l.push_op(i % 2 == 0, vec![v]);
            assert!(l.apply(st(h, 1), &op));
            h += 1;
        }
        assert_eq!(l.len(), 3000);
        assert!(l.footprint().0 > 1);
        let all = vals(&l);
        for (i, v) in all.iter().enumerate() {
            assert_eq!(l.get(i).unwrap().value, &v[..]);
            assert_eq!(l.iter_from(i).next().unwrap().value, &v[..]);
            assert_eq!(l.iter_rev_from(i).next().unwrap().value, &v[..]);
        }
        let rev: Vec<Vec<u8>> = l.iter_rev_from(2999).map(|e| e.value.to_vec()).collect();
        let mut r2 = all.clone();
        r2.reverse();
        assert_eq!(rev, r2);
        let op: ListOp<Vec<u8>> = l.remove_range_op(0, 9).unwrap();
        l.apply(st(h, 1), &op);
        h += 1;
        assert_eq!(vals(&l), all[10..].to_vec());
        let op: ListOp<Vec<u8>> = l.remove_range_op(l.len() - 5, l.len() - 1).unwrap();
        l.apply(st(h, 1), &op);
        h += 1;
        assert_eq!(vals(&l), all[10..all.len() - 5].to_vec());
        l.collect(None);
        assert!(!l.has_metadata());
        let op = l.insert_op(5, true, b"mid".to_vec());
        l.apply(st(h, 1), &op);
        h += 1;
        assert_eq!(l.get(6).unwrap().value, b"mid");
        let op = l.replace_op(6, b"set".to_vec()).unwrap();
        l.apply(st(h, 1), &op);
        assert_eq!(l.get(6).unwrap().value, b"set");
        assert_eq!(l.len(), all.len() - 15 + 1);
    }

    #[test]
    fn between_is_strictly_between() {
        let cases: Vec<(Vec<i64>, Vec<i64>)> = vec![
            (vec![0], vec![1]),
            (vec![0], vec![0, 5]),
            (vec![0, 5], vec![1]),
            (vec![0], vec![0, i64::MIN, 3]),
            (vec![i64::MAX - 1], vec![i64::MAX]),
            (vec![3], vec![9]),
            (vec![0, i64::MAX], vec![1]),
        ];
        for (a, b) in cases {
            let k = between(Some(&a), Some(&b));
            assert!(a[..] < k[..] && k[..] < b[..], "{a:?} {k:?} {b:?}");
        }
        // Repeated inserts after the same element and after the newest stay short.
        let (mut a, b) = (vec![0i64], vec![1i64]);
        for _ in 0..200 {
            let k = between(Some(&a), Some(&b));
            assert!(a[..] < k[..] && k[..] < b[..]);
            a = k.to_vec();
        }
        assert!(a.len() <= 4, "{a:?}");
    }

    #[test]
    fn concurrent_inserts_kept_and_del_spares_concurrent_push() {
        let mut a = ListCrdt::new();
        let x = a.push_op(true, vec![b"x".to_vec()]);
        a.apply(st(1, 1), &x);
        let mut b = a.clone();
        let y1 = a.insert_op(0, true, b"y1".to_vec());
        let y2 = b.insert_op(0, true, b"y2".to_vec());
        a.apply(st(2, 1), &y1);
        b.apply(st(2, 2), &y2);
        a.apply(st(2, 2), &y2);
        b.apply(st(2, 1), &y1);
        assert_eq!(vals(&a), vals(&b));
        assert_eq!(vals(&a).len(), 3);
        // DEL ∥ LPUSH.
        let del = Observed {
            stamps: b.observed_vv(),
            incs: SmallVec::new(),
        };
        let y = a.push_op(true, vec![b"y".to_vec()]);
        a.apply(st(3, 1), &y);
        a.remove_observed(&del);
        assert_eq!(vals(&a), vec![b"y".to_vec()]);
    }

    #[test]
    fn codec_round_trips() {
        let ops: Vec<ListOp<Vec<u8>>> = vec![
            ListOp::Insert {
                pos: Pos::from_slice(&[-3, 7]),
                values: vec![b"a".to_vec(), vec![]],
            },
            ListOp::Remove {
                ranges: vec![(
                    ElemId {
                        pos: Pos::from_slice(&[1]),
                        stamp: st(5, 2),
                    },
                    ElemId {
                        pos: Pos::from_slice(&[9, -1]),
                        stamp: st(1, 1),
                    },
                )],
                observed: {
                    let mut v = VersionVector::new();
                    v.observe(st(9, 2));
                    v
                },
            },
            ListOp::Replace {
                id: ElemId {
                    pos: Pos::from_slice(&[i64::MIN]),
                    stamp: st(3, 3),
                },
                value: b"zz".to_vec(),
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

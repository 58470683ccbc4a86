//! Sorted set (ZADD, ZINCRBY, ZREM...): observed-remove members, an LWW base score plus the
//! increments that base had not observed.
//!
//! Per member, the live writes are:
//! - **adds** `(stamp, score)` (ZADD). An add removes the writes of that member it had
//!   observed; of concurrent adds the highest stamp gives the base score (LWW);
//! - **increments** `(stamp, delta)` (ZINCRBY), kept per origin in issue order.
//!
//! The member is present while any write is live. Its score is the winning add's score (0
//! without one) plus, origin by origin in `ReplicaId` order, the left-to-right sum of that
//! origin's live increments: the same bits on every site whatever the delivery order. A NaN
//! sum (concurrent `+inf` and `-inf`) shows as 0, as Redis's ZUNIONSTORE does.
//! ZREM (and pops, ZREMRANGE...) removes the writes of the member it had observed; DEL removes
//! what it observed in every member (`remove_observed`). So an add or increment wins over a
//! concurrent ZREM, and `ZADD 4.1; sync; ZREM ∥ ZINCRBY 2.0` leaves 2.0.
//!
//! Removal contexts. A member's ZADD/ZREM context is kept (`Meta::removed`) until it is causally
//! stable, so that a late write it covers is dropped (and a set emptied by ZREM is not dropped
//! from the key with its duplicate filter `delivered`). `collect(stable)` drops what `stable`
//! covers and merges
//! each origin's stable increments into one running sum (a prefix: the sum's bits do not
//! change). `collect(None)` (no peers) folds every member into a single add.
//!
//! Layout. `ZSetCrdt` is one pointer. Members live in a `SteppedTable` (grown a few buckets
//! per write) of 48-byte `{member, score, stamp}` (member inline up to 22 bytes; keyed random
//! hashing, since clients choose members), and in `Ordered`, sorted blocks of `(score, member)` for ordered access
//! (rank in O(n / 1024 + log n), score and lex ranges, ranges by rank). The rare parts (concurrent adds, increments, removal contexts) are in a side
//! table that is empty for a single site after every write.

use std::cmp::Ordering;
use std::ops::Bound;

use smallvec::SmallVec;

use crate::bytes::SmallBytes;
use crate::codec::{self, DecodeError, Reader};
use crate::dot::{Context, ReplicaId, Stamp, VersionVector};
use crate::hlc::Hlc;
use crate::op::Observed;
use crate::table::{ScanSpace, SteppedTable};

/// What one write of this type replicates.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ZSetOp<B: AsRef<[u8]>> {
    /// ZADD of one member: removes the member's writes `observed` covers, then sets the base
    /// score to `score` (LWW with concurrent adds).
    Add {
        member: B,
        score: F64,
        observed: VersionVector,
    },
    /// ZINCRBY (ZADD INCR) of one member: adds `delta` to the score.
    Incr { member: B, delta: F64 },
    /// ZREM of one member (pops, ZREMRANGE...): removes the writes `observed` covers.
    Rem { member: B, observed: VersionVector },
}

/// A score in an op: compared and hashed by its bits (never NaN).
#[derive(Clone, Copy, Debug, Default)]
pub struct F64(pub f64);

impl PartialEq for F64 {
    fn eq(&self, other: &F64) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}
impl Eq for F64 {}
impl std::hash::Hash for F64 {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}

/// One member present: the shown score and the stamp of the winning add (`Stamp::default()`
/// when the member lives by increments only).
#[derive(Clone, Debug)]
struct Elem {
    member: SmallBytes,
    score: f64,
    stamp: Stamp,
}

/// Bytes of one table element (plus one control byte per bucket).
pub const ELEM_BYTES: usize = 48;
const _: () = assert!(std::mem::size_of::<Elem>() == ELEM_BYTES);

/// An ordered-index key: score (with -0 equal to 0, as Redis compares), then member bytes.
#[derive(Clone, Debug)]
struct Key {
    score: f64,
    member: SmallBytes,
}

impl PartialEq for Key {
    fn eq(&self, other: &Key) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Key) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Key {
    fn cmp(&self, other: &Key) -> Ordering {
        self.score
            .partial_cmp(&other.score)
            .unwrap_or(Ordering::Equal)
            .then_with(|| self.member.cmp(&other.member))
    }
}

/// Members in order, as sorted blocks of keys: rank queries sum the block lengths before a
/// position (n / 512 additions) instead of walking the members, inserts and removals move at
/// most one block's keys, and ranges are slices of consecutive blocks.
#[derive(Clone, Debug, Default)]
struct Ordered {
    /// Invariant: no empty block; blocks sorted, each sorted, all keys distinct.
    blocks: Vec<Vec<Key>>,
    len: usize,
}

/// Most keys in a block before it splits in two.
const BLOCK_KEYS_MAX: usize = 1024;

static EMPTY_BLOCK: Vec<Key> = Vec::new();

impl Ordered {
    fn len(&self) -> usize {
        self.len
    }

    fn block(&self, b: usize) -> &[Key] {
        self.blocks.get(b).map_or(&[], |v| v.as_slice())
    }

    /// The block that holds (or would hold) `key`: the first whose last key is not below it.
    fn block_for(&self, key: &Key) -> usize {
        let b = self
            .blocks
            .partition_point(|blk| blk.last().is_some_and(|l| l < key));
        b.min(self.blocks.len().saturating_sub(1))
    }

    fn insert(&mut self, key: Key) {
        if self.blocks.is_empty() {
            self.blocks.push(vec![key]);
            self.len = 1;
            return;
        }
        let b = self.block_for(&key);
        let Some(blk) = self.blocks.get_mut(b) else {
            return;
        };
        match blk.binary_search(&key) {
            Ok(_) => return,
            Err(i) => blk.insert(i, key),
        }
        self.len += 1;
        if blk.len() > BLOCK_KEYS_MAX {
            let tail = blk.split_off(blk.len() / 2);
            self.blocks.insert(b + 1, tail);
        }
    }

    fn remove(&mut self, key: &Key) {
        if self.blocks.is_empty() {
            return;
        }
        let b = self.block_for(key);
        let Some(blk) = self.blocks.get_mut(b) else {
            return;
        };
        if let Ok(i) = blk.binary_search(key) {
            blk.remove(i);
            self.len -= 1;
            if blk.is_empty() {
                self.blocks.remove(b);
            }
        }
    }

    /// (global rank, block, index in block) of the first key not below `key` (`strict`: above).
    fn seek(&self, key: &Key, strict: bool) -> (usize, usize, usize) {
        let b = self.blocks.partition_point(|blk| {
            blk.last()
                .is_some_and(|l| if strict { l <= key } else { l < key })
        });
        let i = self
            .block(b)
            .partition_point(|k| if strict { k <= key } else { k < key });
        let before: usize = self.blocks.iter().take(b).map(Vec::len).sum();
        (before + i, b, i)
    }

    /// (block, index) of global rank `r` (`r == len`: the end).
    fn locate(&self, mut r: usize) -> (usize, usize) {
        for (b, blk) in self.blocks.iter().enumerate() {
            if r < blk.len() {
                return (b, r);
            }
            r -= blk.len();
        }
        (self.blocks.len(), 0)
    }

    /// Keys from position `(b0, i0)` up to, not including, `(b1, i1)`.
    fn between(
        &self,
        (b0, i0): (usize, usize),
        (b1, i1): (usize, usize),
    ) -> impl DoubleEndedIterator<Item = &Key> + '_ {
        let last = b1.min(self.blocks.len());
        let empty = (b0, i0) >= (b1, i1);
        let span = if empty { 0..0 } else { b0..last + 1 };
        span.flat_map(move |b| {
            let blk = self.blocks.get(b).unwrap_or(&EMPTY_BLOCK);
            let start = if b == b0 { i0 } else { 0 };
            let end = if b == b1 {
                i1.min(blk.len())
            } else {
                blk.len()
            };
            blk.get(start..end).unwrap_or(&[])
        })
    }

    fn iter(&self) -> impl DoubleEndedIterator<Item = &Key> + '_ {
        self.blocks.iter().flatten()
    }

    fn first(&self) -> Option<&Key> {
        self.blocks.first().and_then(|b| b.first())
    }

    fn last(&self) -> Option<&Key> {
        self.blocks.last().and_then(|b| b.last())
    }

    /// Keys within the bounds.
    fn range<'a>(
        &'a self,
        start: Bound<&Key>,
        end: Bound<&Key>,
    ) -> impl DoubleEndedIterator<Item = &'a Key> + use<'a> {
        let lo = match start {
            Bound::Unbounded => (0, 0),
            Bound::Included(k) => {
                let (_, b, i) = self.seek(k, false);
                (b, i)
            }
            Bound::Excluded(k) => {
                let (_, b, i) = self.seek(k, true);
                (b, i)
            }
        };
        let hi = match end {
            Bound::Unbounded => (self.blocks.len(), 0),
            Bound::Included(k) => {
                let (_, b, i) = self.seek(k, true);
                (b, i)
            }
            Bound::Excluded(k) => {
                let (_, b, i) = self.seek(k, false);
                (b, i)
            }
        };
        self.between(lo, hi)
    }
}

/// One origin's live increments of a member, in issue order: `(hlc of the last increment
/// merged into this entry, running sum)`.
type Incs = SmallVec<[(Hlc, f64); 1]>;

impl Meta {
    /// Whether `collect` may change it: a context to drop, a losing add to drop once
    /// delivered everywhere, or an origin's increments to fold. One increment per origin is
    /// final until another arrives.
    fn collectable(&self) -> bool {
        !self.removed.is_empty()
            || !self.extra.is_empty()
            || self.incs.iter().any(|(_, l)| l.len() > 1)
    }
}

/// The rare parts of a member.
#[derive(Clone, Debug, Default)]
struct Meta {
    /// Score of the winning add (the element's `stamp`); meaningful when it is not default.
    base: f64,
    /// Concurrent adds that lost LWW.
    extra: SmallVec<[(Stamp, f64); 1]>,
    /// Live increments per origin, sorted by origin, no empty list.
    incs: SmallVec<[(ReplicaId, Incs); 1]>,
    /// Merged ZADD/ZREM contexts, until causally stable.
    removed: VersionVector,
}

/// A member's whole state while an op is applied to it.
#[derive(Clone, Debug, Default)]
struct MemberState {
    adds: SmallVec<[(Stamp, f64); 2]>,
    incs: SmallVec<[(ReplicaId, Incs); 1]>,
    removed: VersionVector,
}

impl MemberState {
    fn is_live(&self) -> bool {
        !self.adds.is_empty() || !self.incs.is_empty()
    }

    fn winner(&self) -> Option<(Stamp, f64)> {
        self.adds.iter().copied().max_by_key(|a| a.0)
    }

    fn score(&self) -> f64 {
        let mut s = self.winner().map_or(0.0, |w| w.1);
        for (_, list) in &self.incs {
            s += list.iter().fold(0.0, |a, e| a + e.1);
        }
        if s.is_nan() { 0.0 } else { s }
    }

    fn remove(&mut self, observed: &VersionVector) {
        self.adds.retain(|a| !observed.covers(a.0));
        for (r, list) in self.incs.iter_mut() {
            let h = observed.get(*r);
            list.retain(|e| e.0 > h);
        }
        self.incs.retain(|(_, l)| !l.is_empty());
    }

    fn observe_into(&self, vv: &mut VersionVector) {
        for a in &self.adds {
            vv.observe(a.0);
        }
        for (r, list) in &self.incs {
            if let Some(last) = list.last() {
                vv.observe(Stamp {
                    hlc: last.0,
                    replica: *r,
                });
            }
        }
        vv.merge(&self.removed);
    }

    fn max_stamp(&self) -> Option<Stamp> {
        let a = self.adds.iter().map(|a| a.0).max();
        let i = self
            .incs
            .iter()
            .filter_map(|(r, l)| {
                l.last().map(|e| Stamp {
                    hlc: e.0,
                    replica: *r,
                })
            })
            .max();
        a.max(i)
    }
}

#[derive(Clone, Debug, Default)]
struct Inner {
    /// Invariant: exactly the members present, each once; `index` holds `(score, member)` of
    /// each.
    elems: SteppedTable<Elem>,
    index: Ordered,
    /// Members with rare parts (also members not present that hold removal contexts).
    meta: SteppedTable<(SmallBytes, Meta)>,
    /// Per origin, the highest stamp of an op applied here (duplicate filter; with per-origin
    /// FIFO delivery, every earlier write of that origin to this key was delivered), joined
    /// with the stable vectors given to `collect` (every write they cover was delivered).
    delivered: VersionVector,
    /// Every stamp applied and every removal context merged (for `observe_into`).
    seen: VersionVector,
    /// Members whose side entry `collect` may still change (`Meta::collectable`), each at
    /// least once, in no order; duplicates are dropped once it holds more than
    /// `2 × meta + TO_COLLECT_SLACK` names. A member whose side entry is final (one increment
    /// per origin: a leaderboard incremented at several sites) is not here, so the key
    /// holds no metadata for it and `collect` does not visit it: before, every GC pass
    /// visited every such member for ever (a 200,000-member leaderboard incremented at two
    /// sites took half a core at rest; docs/replication.md §6 has the figures).
    to_collect: Vec<SmallBytes>,
    /// The most members and the longest member this sorted set held since it was created
    /// (or loaded): Redis converts a listpack to a skiplist when either passes its limit and
    /// never back (`fits_listpack`). A local hint, not replicated.
    most: u32,
    widest: u32,
}

/// Names `Inner::to_collect` holds past twice the side table before it drops duplicates.
const TO_COLLECT_SLACK: usize = 64;

/// See the module doc. At most 40 bytes: one pointer.
#[derive(Clone, Debug, Default)]
pub struct ZSetCrdt {
    inner: Option<Box<Inner>>,
}

/// Members are client-chosen: keyed hashing with the process's secret key (`crate::hashing`).
fn hash_member(member: &[u8]) -> u64 {
    crate::hashing::hash_bytes(member)
}

static EMPTY_INDEX: Ordered = Ordered {
    blocks: Vec::new(),
    len: 0,
};

impl Inner {
    fn find(&self, member: &[u8]) -> Option<&Elem> {
        self.elems
            .find(hash_member(member), |e| e.member.as_slice() == member)
    }

    fn meta_of(&self, member: &[u8]) -> Option<&Meta> {
        if self.meta.is_empty() {
            return None;
        }
        self.meta
            .find(hash_member(member), |e| e.0.as_slice() == member)
            .map(|e| &e.1)
    }

    /// Takes a member's whole state out of the table, the index and the side table.
    fn take(&mut self, member: &[u8]) -> MemberState {
        let h = hash_member(member);
        let mut ms = MemberState::default();
        let meta = if self.meta.is_empty() {
            None
        } else {
            self.meta
                .remove(
                    h,
                    |e| e.0.as_slice() == member,
                    |e| hash_member(e.0.as_slice()),
                )
                .map(|e| e.1)
        };
        if let Some(elem) = self.elems.remove(
            h,
            |e| e.member.as_slice() == member,
            |e| hash_member(e.member.as_slice()),
        ) {
            self.index.remove(&Key {
                score: elem.score,
                member: elem.member,
            });
            if elem.stamp != Stamp::default() {
                let base = meta.as_ref().map_or(elem.score, |m| m.base);
                ms.adds.push((elem.stamp, base));
            }
        }
        if let Some(m) = meta {
            ms.adds.extend(m.extra);
            ms.incs = m.incs;
            ms.removed = m.removed;
        }
        ms
    }

    /// Puts a member's state back (present when live; side entry when it has rare parts).
    fn put(&mut self, member: &[u8], ms: MemberState) {
        self.put_with(member, ms, true);
    }

    /// `put`, leaving the ordered index alone unless `index` (the caller then rebuilds it
    /// with `rebuild_index`).
    fn put_with(&mut self, member: &[u8], ms: MemberState, index: bool) {
        let h = hash_member(member);
        let live = ms.is_live();
        let score = ms.score();
        let winner = ms.winner();
        let needs_meta = ms.adds.len() > 1 || !ms.incs.is_empty() || !ms.removed.is_empty();
        if live {
            let m = SmallBytes::copy_from(member);
            if index {
                self.index.insert(Key {
                    score,
                    member: m.clone(),
                });
            }
            self.elems.insert_unique(
                h,
                Elem {
                    member: m,
                    score,
                    stamp: winner.map_or(Stamp::default(), |w| w.0),
                },
                |e| hash_member(e.member.as_slice()),
            );
            self.most = self
                .most
                .max(u32::try_from(self.elems.len()).unwrap_or(u32::MAX));
            self.widest = self
                .widest
                .max(u32::try_from(member.len()).unwrap_or(u32::MAX));
        }
        if needs_meta {
            let base = winner.map_or(0.0, |w| w.1);
            let wstamp = winner.map(|w| w.0);
            let extra = ms
                .adds
                .iter()
                .copied()
                .filter(|a| Some(a.0) != wstamp)
                .collect();
            let meta = Meta {
                base,
                extra,
                incs: ms.incs,
                removed: ms.removed,
            };
            if meta.collectable() {
                if self.to_collect.len() > 2 * self.meta.len() + TO_COLLECT_SLACK {
                    self.to_collect.sort_unstable();
                    self.to_collect.dedup();
                }
                self.to_collect.push(SmallBytes::copy_from(member));
            }
            self.meta
                .insert_unique(h, (SmallBytes::copy_from(member), meta), |e| {
                    hash_member(e.0.as_slice())
                });
        }
    }

    fn state_of(&self, e: &Elem) -> MemberState {
        let mut ms = MemberState::default();
        let meta = self.meta_of(e.member.as_slice());
        if e.stamp != Stamp::default() {
            ms.adds.push((e.stamp, meta.map_or(e.score, |m| m.base)));
        }
        if let Some(m) = meta {
            ms.adds.extend(m.extra.iter().copied());
            ms.incs = m.incs.clone();
            ms.removed = m.removed.clone();
        }
        ms
    }
}

impl ZSetCrdt {
    pub fn new() -> ZSetCrdt {
        ZSetCrdt::default()
    }

    fn inner_mut(&mut self) -> &mut Inner {
        self.inner.get_or_insert_with(Box::default)
    }

    fn index(&self) -> &Ordered {
        self.inner.as_ref().map_or(&EMPTY_INDEX, |i| &i.index)
    }

    /// Applies a local or remote write; false when it was a duplicate or already removed.
    pub fn apply<B: AsRef<[u8]>>(&mut self, stamp: Stamp, op: &ZSetOp<B>) -> bool {
        let inner = self.inner_mut();
        if inner.delivered.covers(stamp) {
            return false;
        }
        // A sorted set with no member is a new key for clients: its history starts again.
        if inner.elems.is_empty() {
            inner.most = 0;
            inner.widest = 0;
        }
        inner.delivered.observe(stamp);
        inner.seen.observe(stamp);
        let fresh = match op {
            ZSetOp::Add {
                member,
                score,
                observed,
            } => {
                let member = member.as_ref();
                let mut ms = inner.take(member);
                ms.remove(observed);
                ms.removed.merge(observed);
                inner.seen.merge(observed);
                let fresh = !ms.removed.covers(stamp);
                if fresh {
                    ms.adds.push((stamp, score.0));
                }
                inner.put(member, ms);
                fresh
            }
            ZSetOp::Incr { member, delta } => {
                let member = member.as_ref();
                let mut ms = inner.take(member);
                let fresh = !ms.removed.covers(stamp);
                if fresh {
                    match ms.incs.binary_search_by_key(&stamp.replica, |e| e.0) {
                        Ok(i) => {
                            if let Some((_, l)) = ms.incs.get_mut(i) {
                                l.push((stamp.hlc, delta.0));
                            }
                        }
                        Err(i) => {
                            let mut l = Incs::new();
                            l.push((stamp.hlc, delta.0));
                            ms.incs.insert(i, (stamp.replica, l));
                        }
                    }
                }
                inner.put(member, ms);
                fresh
            }
            ZSetOp::Rem { member, observed } => {
                let member = member.as_ref();
                let mut ms = inner.take(member);
                ms.remove(observed);
                ms.removed.merge(observed);
                inner.seen.merge(observed);
                inner.put(member, ms);
                true
            }
        };
        self.tidy();
        fresh
    }

    fn tidy(&mut self) {
        if self
            .inner
            .as_ref()
            .is_some_and(|i| i.elems.is_empty() && i.meta.is_empty() && i.delivered.is_empty())
        {
            self.inner = None;
        }
    }

    /// Whether it shows anything (the key exists).
    pub fn is_live(&self) -> bool {
        self.inner.as_ref().is_some_and(|i| !i.elems.is_empty())
    }

    /// Holds it as Redis's skiplist from now on (`fits_listpack` false) while it has members:
    /// SORT and SORT_RO convert the sorted set they read in Redis 7.0 (`zsetConvert` in
    /// `sortCommandGeneric`). A local hint, like the rest of it.
    pub fn convert_to_skiplist(&mut self) {
        if let Some(i) = self.inner.as_deref_mut() {
            i.most = u32::MAX;
        }
    }

    /// Whether Redis 7.0 would hold this sorted set as a listpack (OBJECT ENCODING): it never
    /// held more than `entries_max` members nor one longer than `value_max` bytes
    /// (`zset-max-listpack-entries`, `zset-max-listpack-value`; Redis converts one way only).
    pub fn fits_listpack(&self, entries_max: u64, value_max: u64) -> bool {
        self.inner
            .as_deref()
            .is_none_or(|i| u64::from(i.most) <= entries_max && u64::from(i.widest) <= value_max)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| i.elems.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The highest stamp among its live writes (the type-conflict order).
    pub fn live_stamp(&self) -> Option<Stamp> {
        let inner = self.inner.as_ref()?;
        inner
            .elems
            .iter()
            .filter_map(|e| {
                let m = inner.meta_of(e.member.as_slice());
                let s = (e.stamp != Stamp::default()).then_some(e.stamp);
                match m {
                    None => s,
                    Some(_) => inner.state_of(e).max_stamp(),
                }
            })
            .max()
    }

    /// Holds neither live writes nor metadata.
    pub fn is_blank(&self) -> bool {
        self.inner
            .as_ref()
            .is_none_or(|i| i.elems.is_empty() && i.meta.is_empty())
    }

    /// Holds removal metadata (or unfolded increments and concurrent adds) that `collect`
    /// would drop or fold.
    pub fn has_metadata(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|i| !i.to_collect.is_empty())
    }

    /// Adds every stamp seen (live writes and removal contexts) to `vv`.
    pub fn observe_into(&self, vv: &mut VersionVector) {
        if let Some(i) = &self.inner {
            vv.merge(&i.seen);
        }
    }

    /// Adds the stamps of the members present (not removal contexts) to `vv`.
    pub fn live_into(&self, vv: &mut VersionVector) {
        let Some(inner) = &self.inner else {
            return;
        };
        for e in inner.elems.iter() {
            let mut st = inner.state_of(e);
            st.removed = VersionVector::new();
            st.observe_into(vv);
        }
    }

    /// What a ZADD or ZREM of `member` carries: every write of it seen here.
    pub fn member_observed(&self, member: &[u8]) -> VersionVector {
        let mut vv = VersionVector::new();
        if let Some(inner) = &self.inner {
            match inner.find(member) {
                Some(e) => {
                    inner.state_of(e).observe_into(&mut vv);
                    // Every write of the key delivered here was seen, including the losing
                    // adds `collect` dropped once delivered everywhere: a replica that has
                    // not collected them yet removes them too.
                    vv.merge(&inner.delivered);
                }
                None => {
                    if let Some(m) = inner.meta_of(member) {
                        vv.merge(&m.removed);
                    }
                }
            }
        }
        vv
    }

    /// DEL (or a SET of the key): removes everything `observed` covers.
    pub fn remove_observed(&mut self, observed: &Observed) {
        let Some(inner) = self.inner.as_mut() else {
            return;
        };
        let vv = &observed.stamps;
        if vv.is_empty() {
            return;
        }
        inner.seen.merge(vv);
        let mut touched: Vec<SmallBytes> = Vec::new();
        for e in inner.elems.iter() {
            let has_meta = !inner.meta.is_empty() && inner.meta_of(e.member.as_slice()).is_some();
            if has_meta || e.stamp == Stamp::default() || vv.covers(e.stamp) {
                touched.push(e.member.clone());
            }
        }
        for (m, _) in inner.meta.iter() {
            if inner.find(m.as_slice()).is_none() {
                touched.push(m.clone());
            }
        }
        for m in touched {
            let mut ms = inner.take(m.as_slice());
            ms.remove(vv);
            // The key keeps `observed` as its own context: member contexts it dominates go.
            ms.removed.forget_covered(vv);
            inner.put(m.as_slice(), ms);
        }
        self.tidy();
    }

    /// Drops removal metadata covered by `stable` (`None`: everything is stable, no peers:
    /// every member is folded into one add of its shown score).
    ///
    /// `Some(stable)` must be causally stable (every write it covers, and every write seen by
    /// or concurrent with one, delivered at every replica); it is joined into `delivered`,
    /// which `merge` uses in place of the contexts dropped here.
    pub fn collect(&mut self, stable: Option<&VersionVector>) {
        self.collect_with(stable, stable);
    }

    /// `collect` with the member contexts dropped and `delivered` raised by `stable`, but
    /// increments folded only by `everywhere` (delivered at every replica, including peers
    /// left out of `stable`): a removal that had observed part of the increments may still
    /// come from such a peer, and must find them apart. `None`: no peers.
    pub fn collect_with(
        &mut self,
        stable: Option<&VersionVector>,
        everywhere: Option<&VersionVector>,
    ) {
        if let Some(s) = stable.filter(|s| !s.is_empty()) {
            // Every write `s` covers was delivered here: `merge` tells by `delivered` which
            // writes this replica removed, including those whose contexts are dropped now.
            self.inner_mut().delivered.merge(s);
        }
        let Some(inner) = self.inner.as_mut() else {
            return;
        };
        if inner.meta.is_empty() {
            inner.to_collect = Vec::new();
            return;
        }
        // With peers, only the members whose side entry may change; with none, all of them
        // fold into one add each.
        let members: Vec<SmallBytes> = match stable {
            Some(_) => {
                let mut v = std::mem::take(&mut inner.to_collect);
                v.sort_unstable();
                v.dedup();
                v
            }
            None => {
                inner.to_collect = Vec::new();
                inner.meta.iter().map(|e| e.0.clone()).collect()
            }
        };
        for m in members {
            let ms = inner.take(m.as_slice());
            let folded = match stable {
                None => {
                    let mut out = MemberState::default();
                    if ms.is_live() {
                        let stamp = ms.max_stamp().unwrap_or_default();
                        out.adds.push((stamp, ms.score()));
                    }
                    out
                }
                Some(stable) => {
                    let mut out = ms;
                    out.removed.forget_covered(stable);
                    // An add that lost to a later one and that every replica delivered can
                    // no longer matter: every removal still to come observed it. A join with
                    // a side that still holds it drops it there too (`delivered` covers it).
                    if let (Some(e), Some(w)) = (everywhere, out.winner()) {
                        out.adds.retain(|a| a.0 == w.0 || !e.covers(a.0));
                    }
                    for (r, list) in out.incs.iter_mut() {
                        let h = everywhere.map_or(Hlc::ZERO, |e| e.get(*r));
                        let n = list.iter().take_while(|e| e.0 <= h).count();
                        if n > 1 {
                            let mut sum = 0.0;
                            let mut last = Hlc::ZERO;
                            for e in list.iter().take(n) {
                                sum += e.1;
                                last = e.0;
                            }
                            let rest: Incs = list.iter().skip(n).copied().collect();
                            let mut merged = Incs::new();
                            merged.push((last, sum));
                            merged.extend(rest);
                            *list = merged;
                        }
                    }
                    out
                }
            };
            inner.put(m.as_slice(), folded);
        }
        self.tidy();
    }

    /// Ops that rebuild an equal visible value on an empty key (RENAME, COPY).
    pub fn recreate_ops(&self) -> Vec<ZSetOp<Vec<u8>>> {
        self.iter()
            .map(|(m, s)| ZSetOp::Add {
                member: m.to_vec(),
                score: F64(s),
                observed: VersionVector::new(),
            })
            .collect()
    }

    // ------------------------------------------------------------------ reads

    /// The score of `member`, if present.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.inner.as_ref()?.find(member).map(|e| e.score)
    }

    /// Members in order (score, then member bytes), with scores.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&[u8], f64)> + '_ {
        self.index().iter().map(|k| (k.member.as_slice(), k.score))
    }

    /// Members in hash order (ZRANDMEMBER, ZSCAN): any order.
    pub fn iter_unordered(&self) -> impl Iterator<Item = (&[u8], f64)> + '_ {
        self.inner
            .iter()
            .flat_map(|i| i.elems.iter())
            .map(|e| (e.member.as_slice(), e.score))
    }

    /// Buckets of the member table (ZRANDMEMBER probes, ZSCAN cursors: `scan_space`).
    pub fn bucket_count(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| i.elems.num_buckets())
    }

    /// Where bucket `i` is in the member table's scan space (`table::SteppedTable`): at
    /// position `base + i`.
    pub fn scan_space(&self) -> ScanSpace {
        self.inner
            .as_ref()
            .map_or(ScanSpace::default(), |i| i.elems.scan_space())
    }

    /// The member in bucket `i`, if any.
    pub fn bucket(&self, i: usize) -> Option<(&[u8], f64)> {
        self.inner
            .as_ref()?
            .elems
            .get_bucket(i)
            .map(|e| (e.member.as_slice(), e.score))
    }

    /// The 0-based rank of `member` in ascending order.
    pub fn rank(&self, member: &[u8]) -> Option<usize> {
        let inner = self.inner.as_ref()?;
        let e = inner.find(member)?;
        let key = Key {
            score: e.score,
            member: e.member.clone(),
        };
        Some(inner.index.seek(&key, false).0)
    }

    /// Members at ranks `start..end` (ascending), positioned without walking from an end.
    pub fn range_by_rank(
        &self,
        start: usize,
        end: usize,
    ) -> impl DoubleEndedIterator<Item = (&[u8], f64)> + '_ {
        let index = self.index();
        let end = end.min(index.len());
        let start = start.min(end);
        index
            .between(index.locate(start), index.locate(end))
            .map(|k| (k.member.as_slice(), k.score))
    }

    /// Members with `lo <= score <= hi` per the bounds, ascending, as a double-ended range.
    pub fn range_by_score(
        &self,
        lo: Bound<f64>,
        hi: Bound<f64>,
    ) -> impl DoubleEndedIterator<Item = (&[u8], f64)> + '_ {
        let start = match lo {
            Bound::Unbounded => Bound::Unbounded,
            Bound::Included(s) => Bound::Included(Key {
                score: s,
                member: SmallBytes::new(),
            }),
            Bound::Excluded(s) => {
                if s == f64::INFINITY {
                    Bound::Excluded(Key {
                        score: s,
                        member: SmallBytes::new(),
                    })
                } else {
                    Bound::Included(Key {
                        score: next_up(s),
                        member: SmallBytes::new(),
                    })
                }
            }
        };
        let end = match hi {
            Bound::Unbounded => Bound::Unbounded,
            Bound::Included(s) => {
                if s == f64::INFINITY {
                    Bound::Unbounded
                } else {
                    Bound::Excluded(Key {
                        score: next_up(s),
                        member: SmallBytes::new(),
                    })
                }
            }
            Bound::Excluded(s) => Bound::Excluded(Key {
                score: s,
                member: SmallBytes::new(),
            }),
        };
        let skip_top_inf = matches!(lo, Bound::Excluded(s) if s == f64::INFINITY);
        let valid = !skip_top_inf && range_ok(&start, &end);
        let range = if valid {
            Some(self.index().range(start.as_ref(), end.as_ref()))
        } else {
            None
        };
        range
            .into_iter()
            .flatten()
            .map(|k| (k.member.as_slice(), k.score))
    }

    /// Members by lex bounds, ascending (Redis's rule: meaningful when all scores are equal;
    /// otherwise the first run in order that satisfies the bounds, as its listpack walk).
    pub fn range_by_lex<'a>(
        &'a self,
        lo: &'a LexBound,
        hi: &'a LexBound,
    ) -> Box<dyn DoubleEndedIterator<Item = (&'a [u8], f64)> + 'a> {
        let index = self.index();
        let (Some(first), Some(last)) = (index.first(), index.last()) else {
            return Box::new(std::iter::empty());
        };
        if first.score == last.score && first.score.to_bits() == last.score.to_bits() {
            let s = first.score;
            // The index bound of a lex bound at the shared score; None when it selects
            // nothing (`+` as the lower end, `-` as the upper).
            let key_bound = |b: &LexBound, lower: bool| -> Option<Bound<Key>> {
                let key = |m: &[u8]| Key {
                    score: s,
                    member: SmallBytes::copy_from(m),
                };
                Some(match b {
                    LexBound::Min if lower => Bound::Unbounded,
                    LexBound::Max if !lower => Bound::Unbounded,
                    LexBound::Min | LexBound::Max => return None,
                    LexBound::Incl(m) => Bound::Included(key(m)),
                    LexBound::Excl(m) => Bound::Excluded(key(m)),
                })
            };
            let (Some(start), Some(end)) = (key_bound(lo, true), key_bound(hi, false)) else {
                return Box::new(std::iter::empty());
            };
            if !range_ok(&start, &end) {
                return Box::new(std::iter::empty());
            }
            return Box::new(
                index
                    .range(start.as_ref(), end.as_ref())
                    .map(|k| (k.member.as_slice(), k.score)),
            );
        }
        let v: Vec<(&[u8], f64)> = index
            .iter()
            .skip_while(|k| !lo.gte_min(k.member.as_slice()))
            .take_while(|k| hi.lte_max(k.member.as_slice()))
            .map(|k| (k.member.as_slice(), k.score))
            .collect();
        Box::new(v.into_iter())
    }

    /// The canonical live state (for tests and equality): per member in byte order, the adds
    /// and the increments, with score bits.
    fn canonical(&self) -> Vec<CanonicalMember> {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        let mut v: Vec<_> = inner
            .elems
            .iter()
            .map(|e| {
                let ms = inner.state_of(e);
                let mut adds: Vec<(Stamp, u64)> =
                    ms.adds.iter().map(|a| (a.0, a.1.to_bits())).collect();
                adds.sort();
                let incs = ms
                    .incs
                    .iter()
                    .map(|(r, l)| (*r, l.iter().map(|x| (x.0, x.1.to_bits())).collect()))
                    .collect();
                (e.member.to_vec(), e.score.to_bits(), adds, incs)
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }
}

/// A member's live state with score bits: member, shown score, adds, increments per origin.
type CanonicalMember = (
    Vec<u8>,
    u64,
    Vec<(Stamp, u64)>,
    Vec<(ReplicaId, Vec<(Hlc, u64)>)>,
);

fn range_ok(start: &Bound<Key>, end: &Bound<Key>) -> bool {
    match (start, end) {
        (Bound::Included(a), Bound::Included(b)) => a <= b,
        (Bound::Included(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b))
        | (Bound::Excluded(a), Bound::Excluded(b)) => a < b,
        _ => true,
    }
}

/// The next representable double above `v` (finite `v`; `f64::next_up` is newer than the MSRV).
fn next_up(v: f64) -> f64 {
    if v.is_nan() || v == f64::INFINITY {
        return v;
    }
    if v == 0.0 {
        return f64::from_bits(1);
    }
    let b = v.to_bits();
    if v > 0.0 {
        f64::from_bits(b + 1)
    } else {
        f64::from_bits(b - 1)
    }
}

/// A ZRANGEBYLEX bound: `-`, `+`, `[member`, `(member`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LexBound {
    Min,
    Max,
    Incl(Vec<u8>),
    Excl(Vec<u8>),
}

impl LexBound {
    /// Parses Redis's syntax; `None` for anything else.
    pub fn parse(b: &[u8]) -> Option<LexBound> {
        match b.split_first() {
            Some((b'-', [])) => Some(LexBound::Min),
            Some((b'+', [])) => Some(LexBound::Max),
            Some((b'[', rest)) => Some(LexBound::Incl(rest.to_vec())),
            Some((b'(', rest)) => Some(LexBound::Excl(rest.to_vec())),
            _ => None,
        }
    }

    /// `m` is at or above this bound taken as the minimum.
    pub fn gte_min(&self, m: &[u8]) -> bool {
        match self {
            LexBound::Min => true,
            LexBound::Max => false,
            LexBound::Incl(x) => m >= x.as_slice(),
            LexBound::Excl(x) => m > x.as_slice(),
        }
    }

    /// `m` is at or below this bound taken as the maximum.
    pub fn lte_max(&self, m: &[u8]) -> bool {
        match self {
            LexBound::Min => false,
            LexBound::Max => true,
            LexBound::Incl(x) => m <= x.as_slice(),
            LexBound::Excl(x) => m < x.as_slice(),
        }
    }
}

impl PartialEq for ZSetCrdt {
    /// Equal live state (members, adds, increments, bit for bit). Removal contexts are
    /// metadata trimmed at different times on different sites; they are not compared.
    fn eq(&self, other: &ZSetCrdt) -> bool {
        self.len() == other.len() && self.canonical() == other.canonical()
    }
}

impl Eq for ZSetCrdt {}

impl std::hash::Hash for ZSetCrdt {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.len().hash(state);
    }
}

const TAG_ADD: u8 = 1;
const TAG_INCR: u8 = 2;
const TAG_REM: u8 = 3;

/// Appends the encoding of `op` to `out`.
pub fn encode_op<B: AsRef<[u8]>>(op: &ZSetOp<B>, out: &mut Vec<u8>) {
    match op {
        ZSetOp::Add {
            member,
            score,
            observed,
        } => {
            codec::put_u8(out, TAG_ADD);
            codec::put_bytes(out, member.as_ref());
            codec::put_f64(out, score.0);
            codec::put_vv(out, observed);
        }
        ZSetOp::Incr { member, delta } => {
            codec::put_u8(out, TAG_INCR);
            codec::put_bytes(out, member.as_ref());
            codec::put_f64(out, delta.0);
        }
        ZSetOp::Rem { member, observed } => {
            codec::put_u8(out, TAG_REM);
            codec::put_bytes(out, member.as_ref());
            codec::put_vv(out, observed);
        }
    }
}

/// Decodes one op written by `encode_op`.
pub fn decode_op(r: &mut Reader<'_>) -> Result<ZSetOp<Vec<u8>>, DecodeError> {
    match r.u8()? {
        TAG_ADD => {
            let member = r.bytes()?.to_vec();
            let score = F64(r.f64()?);
            let observed = r.vv()?;
            Ok(ZSetOp::Add {
                member,
                score,
                observed,
            })
        }
        TAG_INCR => {
            let member = r.bytes()?.to_vec();
            let delta = F64(r.f64()?);
            Ok(ZSetOp::Incr { member, delta })
        }
        TAG_REM => {
            let member = r.bytes()?.to_vec();
            let observed = r.vv()?;
            Ok(ZSetOp::Rem { member, observed })
        }
        t => Err(DecodeError::BadTag(t)),
    }
}

// ------------------------------------------------------------------------------------------
// State (full sync): encoding and join
// ------------------------------------------------------------------------------------------

/// Fewest bytes of one encoded item, so that a declared count must fit the input
/// (`Reader::items`): a member (name length, three counts, context length), an add (stamp,
/// score), an origin's increments (replica, count), an increment (hlc, value).
const MEMBER_BYTES_MIN: usize = 4;
const ADD_BYTES_MIN: usize = 20;
const ORIGIN_BYTES_MIN: usize = 5;
const INC_BYTES_MIN: usize = 16;

/// Joins two lists of adds sorted by stamp: an add on both sides is kept, one on one side
/// only unless the other side saw it (`saw_x`, `saw_y`).
fn join_adds(
    x: &[(Stamp, f64)],
    y: &[(Stamp, f64)],
    saw_x: impl Fn(Stamp) -> bool,
    saw_y: impl Fn(Stamp) -> bool,
) -> SmallVec<[(Stamp, f64); 2]> {
    let mut out = SmallVec::new();
    let mut a = x.iter().peekable();
    let mut b = y.iter().peekable();
    loop {
        match (a.peek(), b.peek()) {
            (Some(p), Some(q)) if p.0 == q.0 => {
                out.push(**p);
                a.next();
                b.next();
            }
            (Some(p), q) if q.is_none_or(|q| p.0 < q.0) => {
                if !saw_y(p.0) {
                    out.push(**p);
                }
                a.next();
            }
            (_, Some(q)) => {
                if !saw_x(q.0) {
                    out.push(**q);
                }
                b.next();
            }
            _ => break,
        }
    }
    out
}

/// Joins one origin's increments. An entry on one side only is kept unless the other side saw
/// it. An entry on both sides with different sums is a fold of stable increments on at least
/// one side (`collect` merges a stable prefix into one running sum): the one whose previous
/// entry is lower (or absent) folds more of them in.
fn join_incs(
    x: &[(Hlc, f64)],
    y: &[(Hlc, f64)],
    saw_x: impl Fn(Hlc) -> bool,
    saw_y: impl Fn(Hlc) -> bool,
) -> Incs {
    let mut out = Incs::new();
    let (mut i, mut j) = (0, 0);
    loop {
        match (x.get(i), y.get(j)) {
            (Some(p), Some(q)) if p.0 == q.0 => {
                let prev_x = i.checked_sub(1).and_then(|k| x.get(k)).map(|e| e.0);
                let prev_y = j.checked_sub(1).and_then(|k| y.get(k)).map(|e| e.0);
                let e = match prev_x.cmp(&prev_y) {
                    Ordering::Less => *p,
                    Ordering::Greater => *q,
                    Ordering::Equal if p.1.to_bits() >= q.1.to_bits() => *p,
                    Ordering::Equal => *q,
                };
                out.push(e);
                i += 1;
                j += 1;
            }
            (Some(p), q) if q.is_none_or(|q| p.0 < q.0) => {
                if !saw_y(p.0) {
                    out.push(*p);
                }
                i += 1;
            }
            (_, Some(q)) => {
                if !saw_x(q.0) {
                    out.push(*q);
                }
                j += 1;
            }
            _ => break,
        }
    }
    out
}

impl MemberState {
    /// The join of one member's states (see `ZSetCrdt::merge_with_contexts`); `dx`, `dy`:
    /// each side's `delivered` and its replica's context.
    fn join(
        x: &MemberState,
        y: &MemberState,
        dx: (&VersionVector, &Context),
        dy: (&VersionVector, &Context),
    ) -> MemberState {
        let saw_x = |s: Stamp| x.removed.covers(s) || dx.0.covers(s) || dx.1.covers(s);
        let saw_y = |s: Stamp| y.removed.covers(s) || dy.0.covers(s) || dy.1.covers(s);
        let mut xa = x.adds.clone();
        xa.sort_by_key(|a| a.0);
        let mut ya = y.adds.clone();
        ya.sort_by_key(|a| a.0);
        let mut out = MemberState {
            adds: join_adds(&xa, &ya, saw_x, saw_y),
            incs: SmallVec::new(),
            removed: x.removed.clone(),
        };
        out.removed.merge(&y.removed);
        let empty = Incs::new();
        let mut origins: SmallVec<[ReplicaId; 4]> =
            x.incs.iter().chain(y.incs.iter()).map(|e| e.0).collect();
        origins.sort_unstable();
        origins.dedup();
        for r in origins {
            let list_of = |ms: &MemberState| {
                ms.incs
                    .iter()
                    .find(|e| e.0 == r)
                    .map_or(empty.clone(), |e| e.1.clone())
            };
            let at = |hlc: Hlc| Stamp { hlc, replica: r };
            let list = join_incs(&list_of(x), &list_of(y), |h| saw_x(at(h)), |h| saw_y(at(h)));
            if !list.is_empty() {
                out.incs.push((r, list));
            }
        }
        out
    }

    fn encode_state(&self, out: &mut Vec<u8>) {
        let mut adds = self.adds.clone();
        adds.sort_by_key(|a| a.0);
        codec::put_varint(out, adds.len() as u64);
        for (s, score) in &adds {
            codec::put_stamp(out, *s);
            codec::put_f64(out, *score);
        }
        codec::put_varint(out, self.incs.len() as u64);
        for (r, list) in &self.incs {
            codec::put_u32(out, r.0);
            codec::put_varint(out, list.len() as u64);
            for (h, v) in list {
                codec::put_u64(out, h.0);
                codec::put_f64(out, *v);
            }
        }
        codec::put_vv(out, &self.removed);
    }

    /// Reads a member's state and checks it: adds and increments sorted, real stamps that
    /// `delivered` covers and the member's context does not, something held.
    fn decode_state(
        r: &mut Reader<'_>,
        delivered: &VersionVector,
    ) -> Result<MemberState, DecodeError> {
        let mut ms = MemberState::default();
        let n = r.items(ADD_BYTES_MIN)?;
        for _ in 0..n {
            let s = r.stamp()?;
            let score = r.f64()?;
            if ms.adds.last().is_some_and(|p| p.0 >= s) {
                return Err(DecodeError::Invalid("zset adds not sorted"));
            }
            ms.adds.push((s, score));
        }
        let n = r.items(ORIGIN_BYTES_MIN)?;
        for _ in 0..n {
            let replica = ReplicaId(r.u32()?);
            if ms.incs.last().is_some_and(|p| p.0 >= replica) {
                return Err(DecodeError::Invalid("zset increment origins not sorted"));
            }
            let k = r.items(INC_BYTES_MIN)?;
            let mut list = Incs::new();
            for _ in 0..k {
                let hlc = Hlc(r.u64()?);
                // A running sum of increments of both signed infinities is NaN: kept as is.
                let v = f64::from_bits(r.u64()?);
                if list.last().is_some_and(|p: &(Hlc, f64)| p.0 >= hlc) {
                    return Err(DecodeError::Invalid("zset increments not sorted"));
                }
                list.push((hlc, v));
            }
            if list.is_empty() {
                return Err(DecodeError::Invalid("zset origin without increments"));
            }
            ms.incs.push((replica, list));
        }
        ms.removed = r.vv_strict()?;
        let stamps = ms
            .adds
            .iter()
            .map(|a| a.0)
            .chain(ms.incs.iter().flat_map(|(r, l)| {
                l.iter().map(move |e| Stamp {
                    hlc: e.0,
                    replica: *r,
                })
            }));
        for s in stamps {
            if s.hlc == Hlc::ZERO || !delivered.covers(s) {
                return Err(DecodeError::Invalid("zset write not delivered"));
            }
            if ms.removed.covers(s) {
                return Err(DecodeError::Invalid("zset write covered by its context"));
            }
        }
        if !ms.is_live() && ms.removed.is_empty() {
            return Err(DecodeError::Invalid("zset member without state"));
        }
        Ok(ms)
    }
}

impl Inner {
    /// The whole state of `member`, present or holding only a context.
    fn member_state(&self, member: &[u8]) -> Option<MemberState> {
        if let Some(e) = self.find(member) {
            return Some(self.state_of(e));
        }
        let m = self.meta_of(member)?;
        Some(MemberState {
            adds: m.extra.iter().copied().collect(),
            incs: m.incs.clone(),
            removed: m.removed.clone(),
        })
    }

    /// Every member with state (present, or holding a context), in no particular order.
    fn member_names(&self) -> impl Iterator<Item = &SmallBytes> + '_ {
        let absent = self
            .meta
            .iter()
            .map(|e| &e.0)
            .filter(|m| self.find(m.as_slice()).is_none());
        self.elems.iter().map(|e| &e.member).chain(absent)
    }

    /// Rebuilds the ordered index from the present members: one sort, then full blocks.
    fn rebuild_index(&mut self) {
        let mut keys: Vec<Key> = self
            .elems
            .iter()
            .map(|e| Key {
                score: e.score,
                member: e.member.clone(),
            })
            .collect();
        keys.sort_unstable();
        let len = keys.len();
        let mut blocks = Vec::with_capacity(len.div_ceil(BLOCK_KEYS_MAX / 2));
        let mut rest = keys.into_iter().peekable();
        while rest.peek().is_some() {
            blocks.push(rest.by_ref().take(BLOCK_KEYS_MAX / 2).collect());
        }
        self.index = Ordered { blocks, len };
    }

    fn is_droppable(&self) -> bool {
        self.elems.is_empty() && self.meta.is_empty() && self.delivered.is_empty()
    }
}

impl ZSetCrdt {
    /// Appends the whole replicated state: `delivered`, `seen`, then every member with state
    /// (present, or holding a removal context) in byte order, with its adds by stamp, its
    /// increments per origin and its context. Canonical: equal states encode to equal bytes.
    pub fn encode_state(&self, out: &mut Vec<u8>) {
        let empty = VersionVector::new();
        let inner = self.inner.as_deref();
        codec::put_vv(out, inner.map_or(&empty, |i| &i.delivered));
        codec::put_vv(out, inner.map_or(&empty, |i| &i.seen));
        let Some(inner) = inner else {
            codec::put_varint(out, 0);
            return;
        };
        let mut names: Vec<&SmallBytes> = inner.member_names().collect();
        names.sort_unstable();
        codec::put_varint(out, names.len() as u64);
        for m in names {
            codec::put_bytes(out, m.as_slice());
            let ms = inner.member_state(m.as_slice()).unwrap_or_default();
            ms.encode_state(out);
        }
    }

    /// Reads a state written by `encode_state`. Never panics, and allocates nothing ahead of
    /// the bytes that back it (a declared count must fit the input). Refuses, as
    /// `DecodeError::Invalid`, states that break an invariant: vectors not in their sorted
    /// form, members unsorted or twice or with no state, adds or increments unsorted, NaN
    /// scores, writes `delivered` does not cover or their member's context covers.
    pub fn decode_state(r: &mut Reader<'_>) -> Result<ZSetCrdt, DecodeError> {
        let delivered = r.vv_strict()?;
        let seen = r.vv_strict()?;
        let n = r.items(MEMBER_BYTES_MIN)?;
        let mut inner = Inner {
            delivered,
            seen,
            ..Inner::default()
        };
        let mut prev: Option<&[u8]> = None;
        for _ in 0..n {
            let m = r.bytes()?;
            if prev.is_some_and(|p| p >= m) {
                return Err(DecodeError::Invalid("zset members not sorted"));
            }
            prev = Some(m);
            let ms = MemberState::decode_state(r, &inner.delivered)?;
            inner.put_with(m, ms, false);
        }
        inner.rebuild_index();
        Ok(ZSetCrdt {
            inner: (!inner.is_droppable()).then(|| Box::new(inner)),
        })
    }

    /// The state join (full sync): afterwards `self` is the state of a replica that applied
    /// the writes of both sides. Commutative, associative and idempotent.
    ///
    /// Per member: an add or an increment held on both sides is kept; one held on one side
    /// only is kept unless the other side saw it (the member's context there covers it, or
    /// its `delivered` does: it was applied there and removed since, or folded into a later
    /// running sum). Of an increment entry held on both sides with different sums (a fold of
    /// stable increments), the one that folds more is kept. Contexts, `delivered` and `seen`
    /// join pointwise.
    ///
    /// Exact when each side dropped metadata only through `collect(Some(stable))` with
    /// causally stable vectors. Removals of the whole key leave no member context: the caller
    /// joins its key contexts and applies them to the result with `remove_observed`; writes a
    /// side dropped under a key context (never applied here) are known to it only through
    /// that context, or, once collected, through `collect(Some(..))` on this value. Cost:
    /// O(n log n) in the members (the ordered index is rebuilt).
    pub fn merge(&mut self, other: &ZSetCrdt) {
        let none = Context::default();
        self.merge_with_contexts(other, &none, &none);
    }

    /// `merge`, where `mine` and `theirs` are causal contexts of the replicas that hold
    /// `self` and `other`: every write a context covers was delivered there, so an add or
    /// increment held by one side only that the other side's context covers was removed
    /// there (or folded) and goes, as one its `delivered` covers does. The contexts are not
    /// kept in the result. With empty contexts it is `merge`; commutative (swapping the
    /// contexts with the sides) and, given the join of the contexts as the result's,
    /// associative and idempotent.
    pub fn merge_with_contexts(&mut self, other: &ZSetCrdt, mine: &Context, theirs: &Context) {
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
            delivered: x.delivered.clone(),
            seen: x.seen.clone(),
            most: x.most.max(y.most),
            widest: x.widest.max(y.widest),
            ..Inner::default()
        };
        out.delivered.merge(&y.delivered);
        out.seen.merge(&y.seen);
        // What each side saw: its own `delivered` and its replica's context.
        let saw_x = (&x.delivered, mine);
        let saw_y = (&y.delivered, theirs);
        let none = MemberState::default();
        for m in x.member_names() {
            let mx = x.member_state(m.as_slice()).unwrap_or_default();
            let my = y.member_state(m.as_slice());
            let ms = MemberState::join(&mx, my.as_ref().unwrap_or(&none), saw_x, saw_y);
            out.put_with(m.as_slice(), ms, false);
        }
        for m in y.member_names() {
            if x.find(m.as_slice()).is_some() || x.meta_of(m.as_slice()).is_some() {
                continue;
            }
            let my = y.member_state(m.as_slice()).unwrap_or_default();
            let ms = MemberState::join(&none, &my, saw_x, saw_y);
            out.put_with(m.as_slice(), ms, false);
        }
        out.rebuild_index();
        self.inner = (!out.is_droppable()).then(|| Box::new(out));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::st;

    fn add(z: &ZSetCrdt, m: &str, s: f64) -> ZSetOp<Vec<u8>> {
        ZSetOp::Add {
            member: m.as_bytes().to_vec(),
            score: F64(s),
            observed: z.member_observed(m.as_bytes()),
        }
    }

    fn incr(m: &str, d: f64) -> ZSetOp<Vec<u8>> {
        ZSetOp::Incr {
            member: m.as_bytes().to_vec(),
            delta: F64(d),
        }
    }

    fn rem(z: &ZSetCrdt, m: &str) -> ZSetOp<Vec<u8>> {
        ZSetOp::Rem {
            member: m.as_bytes().to_vec(),
            observed: z.member_observed(m.as_bytes()),
        }
    }

    /// A leaderboard incremented at two sites: once its increments are delivered everywhere
    /// each member keeps one per origin, which nothing can fold further, and the key holds no
    /// metadata (the GC no longer visits every member on every pass); a new increment makes
    /// it pending until folded. Two concurrent ZADDs leave the loser until it is delivered
    /// everywhere; then it goes, and a later ZREM made here still removes it at a replica
    /// that kept it (the ZREM carries what was delivered here).
    #[test]
    fn final_members_hold_no_metadata_and_delivered_losers_go() {
        let mut z = ZSetCrdt::new();
        for i in 0..100u64 {
            let m = format!("m{i}");
            z.apply(st(i + 1, 1), &incr(&m, 1.0));
            z.apply(st(i + 1, 2), &incr(&m, 2.0));
        }
        assert!(!z.has_metadata(), "one increment per origin is final");
        z.apply(st(200, 1), &incr("m7", 4.0));
        assert!(z.has_metadata(), "two of one origin may fold");
        let mut everywhere = VersionVector::new();
        everywhere.observe(st(200, 1));
        everywhere.observe(st(100, 2));
        z.collect_with(Some(&everywhere), Some(&everywhere));
        assert!(!z.has_metadata());
        assert_eq!(z.score(b"m7"), Some(7.0));
        // Concurrent adds of one member at replicas 1 and 2: 2's wins (higher stamp).
        let a1 = add(&z, "x", 1.0);
        let a2 = add(&z, "x", 2.0);
        z.apply(st(300, 1), &a1);
        z.apply(st(301, 2), &a2);
        let mut kept = z.clone();
        assert!(z.has_metadata(), "the losing add is held");
        z.collect_with(Some(&everywhere), Some(&everywhere));
        assert!(z.has_metadata(), "not delivered everywhere yet");
        everywhere.observe(st(300, 1));
        everywhere.observe(st(301, 2));
        z.collect_with(Some(&everywhere), Some(&everywhere));
        assert!(!z.has_metadata(), "the loser went");
        assert_eq!(z.score(b"x"), Some(2.0));
        let r = rem(&z, "x");
        z.apply(st(302, 1), &r);
        kept.apply(st(302, 1), &r);
        assert_eq!(z.score(b"x"), None);
        assert_eq!(kept.score(b"x"), None, "the loser goes where it was kept");
    }

    #[test]
    fn small() {
        assert!(std::mem::size_of::<ZSetCrdt>() <= 40);
        assert_eq!(std::mem::size_of::<Elem>(), ELEM_BYTES);
    }

    #[test]
    fn ordered_by_score_then_member() {
        let mut z = ZSetCrdt::new();
        for (i, (m, s)) in [("b", 1.0), ("a", 1.0), ("c", -2.0), ("d", 0.0)]
            .iter()
            .enumerate()
        {
            let op = add(&z, m, *s);
            assert!(z.apply(st(i as u64 + 1, 1), &op));
        }
        let v: Vec<_> = z.iter().map(|(m, _)| m.to_vec()).collect();
        assert_eq!(
            v,
            vec![b"c".to_vec(), b"d".to_vec(), b"a".to_vec(), b"b".to_vec()]
        );
        assert_eq!(z.rank(b"a"), Some(2));
        assert_eq!(z.rank(b"c"), Some(0));
        assert_eq!(z.rank(b"b"), Some(3));
        let r: Vec<_> = z
            .range_by_score(Bound::Excluded(0.0), Bound::Included(1.0))
            .map(|(m, _)| m.to_vec())
            .collect();
        assert_eq!(r, vec![b"a".to_vec(), b"b".to_vec()]);
    }

    #[test]
    fn ordered_blocks_keep_ranks_and_ranges_across_splits() {
        let mut z = ZSetCrdt::new();
        let n = 5000u64;
        // Insert in a scrambled order so that blocks split in the middle.
        for i in 0..n {
            let k = (i * 7919) % n;
            let m = format!("m{k:05}");
            let op = add(&z, &m, (k / 3) as f64);
            assert!(z.apply(st(i + 1, 1), &op));
        }
        assert!(z.index().blocks.len() > 4);
        let all: Vec<(Vec<u8>, f64)> = z.iter().map(|(m, s)| (m.to_vec(), s)).collect();
        assert_eq!(all.len(), n as usize);
        assert!(
            all.windows(2)
                .all(|w| (w[0].1, &w[0].0) < (w[1].1, &w[1].0))
        );
        for (r, (m, _)) in all.iter().enumerate().step_by(97) {
            assert_eq!(z.rank(m), Some(r));
        }
        let mid: Vec<_> = z
            .range_by_rank(1000, 1010)
            .map(|(m, _)| m.to_vec())
            .collect();
        let want: Vec<_> = all[1000..1010].iter().map(|x| x.0.clone()).collect();
        assert_eq!(mid, want);
        let back: Vec<_> = z
            .range_by_rank(4990, 6000)
            .rev()
            .map(|(m, _)| m.to_vec())
            .collect();
        let want: Vec<_> = all[4990..].iter().rev().map(|x| x.0.clone()).collect();
        assert_eq!(back, want);
        let by_score = z
            .range_by_score(Bound::Included(100.0), Bound::Excluded(500.0))
            .count();
        assert_eq!(
            by_score,
            all.iter().filter(|x| (100.0..500.0).contains(&x.1)).count()
        );
        let rev_first = z
            .range_by_score(Bound::Unbounded, Bound::Included(1000.0))
            .next_back()
            .map(|(m, _)| m.to_vec());
        let want = all.iter().rfind(|x| x.1 <= 1000.0).map(|x| x.0.clone());
        assert_eq!(rev_first, want);
        // Remove every other member.
        for (i, (m, _)) in all.iter().enumerate() {
            if i % 2 == 0 {
                let m = String::from_utf8(m.clone()).unwrap();
                let op = rem(&z, &m);
                z.apply(st(n + 1 + i as u64, 1), &op);
            }
        }
        assert_eq!(z.len(), (n / 2) as usize);
        assert_eq!(z.iter().count(), (n / 2) as usize);
        assert_eq!(z.rank(&all[4999].0), Some(2499));
    }

    #[test]
    fn zrem_concurrent_with_zincrby_keeps_the_increment() {
        let mut a = ZSetCrdt::new();
        let op = add(&a, "x", 4.1);
        a.apply(st(1, 1), &op);
        let mut b = a.clone();
        b.apply(st(1, 1), &op);
        let r = rem(&a, "x");
        let i = incr("x", 2.0);
        a.apply(st(2, 1), &r);
        b.apply(st(2, 2), &i);
        a.apply(st(2, 2), &i);
        b.apply(st(2, 1), &r);
        assert_eq!(a.score(b"x"), Some(2.0));
        assert_eq!(a, b);
    }

    #[test]
    fn single_site_folds_like_redis() {
        let mut z = ZSetCrdt::new();
        let op = add(&z, "x", 1.0);
        z.apply(st(1, 1), &op);
        z.apply(st(2, 1), &incr("x", 0.1));
        z.collect(None);
        z.apply(st(3, 1), &incr("x", 0.2));
        z.collect(None);
        assert_eq!(z.score(b"x"), Some((1.0 + 0.1) + 0.2));
        assert!(!z.has_metadata());
        let op = add(&z, "x", 5.0);
        z.apply(st(4, 1), &op);
        z.collect(None);
        assert_eq!(z.score(b"x"), Some(5.0));
        assert!(!z.has_metadata());
    }

    #[test]
    fn codec_round_trip() {
        let ops = vec![
            ZSetOp::Add {
                member: b"m".to_vec(),
                score: F64(1.5),
                observed: VersionVector::new(),
            },
            incr("x", -0.25),
            ZSetOp::Rem {
                member: b"q".to_vec(),
                observed: {
                    let mut v = VersionVector::new();
                    v.observe(st(9, 3));
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
        }
    }
}

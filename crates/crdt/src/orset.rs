//! Add-wins observed-remove set, laid out compactly.
//!
//! Each SADD of a member adds a dot (the write's `Stamp`); SREM removes the dots of that
//! member it had observed, so a concurrent add survives ("add wins"). Removals of the whole
//! set (DEL, SET) are the caller's: `remove_observed` drops the dots, and the caller keeps
//! that context.
//!
//! Layout. The members present live in a `SteppedTable` (grown a few buckets per write) of
//! 40-byte elements `{member, dot}` (the member inline up to 22 bytes): only members present
//! are in the table, so there is no per-member tombstone there. The rare parts are boxed in `Meta`:
//! - `extra`: dots beyond the first of members added concurrently by several replicas;
//! - `removed`: per member, the merged contexts of SREMs of it, needed only while an add they
//!   cover may still arrive (until causally stable); with no peers `collect(None)` empties it
//!   after every write, so a single site holds no per-member metadata;
//! - `seen`: the join of every dot added and every removal context applied (a cache, so that
//!   `observe_into` does not walk the members; not part of the CRDT state nor of equality).
//!
//! Iteration order is hash order (as Redis's hashtable encoding). Members are hashed with the
//! process's secret key (`crate::hashing`), since clients choose them; the order is not part
//! of the state (equality and `Hash` are order-independent).
//!
//! State join (`merge`, for a full sync): per member and origin the newer dot, unless either
//! side's member removal context covers it; member contexts and `seen` by pointwise maximum.
//! Whole-set removals (DEL, SET) are the caller's contexts: `KeyState::merge` applies each
//! side's to the other side's set.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};

use smallvec::SmallVec;

use crate::bytes::SmallBytes;
use crate::codec::{self, DecodeError, Reader};
use crate::dot::{Stamp, VersionVector};
use crate::table::{ScanSpace, SteppedTable};

/// One member present and its first dot.
#[derive(Clone, Debug)]
struct Elem {
    member: SmallBytes,
    dot: Stamp,
}

/// Bytes of one table element (plus one control byte per bucket in the table).
pub const ELEM_BYTES: usize = 40;
const _: () = assert!(std::mem::size_of::<Elem>() == ELEM_BYTES);

#[derive(Clone, Debug, Default)]
struct Meta {
    /// Invariant: keys are members present; no vector is empty; across the element's dot and
    /// these, at most one dot per origin replica (a newer add from a replica replaces its older
    /// dot, which that replica had observed).
    extra: BTreeMap<SmallBytes, SmallVec<[Stamp; 2]>>,
    /// Merged contexts of SREMs of each member. Invariant: no empty vector.
    removed: BTreeMap<SmallBytes, VersionVector>,
}

impl Meta {
    fn is_blank(&self) -> bool {
        self.extra.is_empty() && self.removed.is_empty()
    }
}

#[derive(Clone, Debug, Default)]
struct Inner {
    // Invariant: exactly the members present, each once.
    elems: SteppedTable<Elem>,
    /// Every dot added and every removal context applied (see the module doc).
    seen: VersionVector,
    meta: Option<Box<Meta>>,
    /// The most members this set held since it was created (or loaded), and whether it held
    /// one that is not an integer: Redis converts an intset to a hashtable when either
    /// passes its limit and never back (`fits_intset`). A local hint, not replicated.
    most: u32,
    non_int: bool,
}

/// See the module doc. One pointer: an empty set allocates nothing, and a key's value stays
/// small whatever its type.
#[derive(Clone, Debug, Default)]
pub struct OrSet {
    inner: Option<Box<Inner>>,
}

fn hash_member(member: &[u8]) -> u64 {
    crate::hashing::hash_bytes(member)
}

fn elem_hash(e: &Elem) -> u64 {
    hash_member(e.member.as_slice())
}

static EMPTY: std::sync::LazyLock<SteppedTable<Elem>> = std::sync::LazyLock::new(SteppedTable::new);

impl Inner {
    fn meta_mut(&mut self) -> &mut Meta {
        self.meta.get_or_insert_with(Box::default)
    }

    fn extra_of(&self, member: &[u8]) -> &[Stamp] {
        self.meta
            .as_ref()
            .and_then(|m| m.extra.get(member))
            .map_or(&[], |v| v.as_slice())
    }

    fn removed_of(&self, member: &[u8]) -> Option<&VersionVector> {
        self.meta.as_ref().and_then(|m| m.removed.get(member))
    }

    /// Drops the dots of `member` that `covered` says are removed; the member leaves the table
    /// when none is left.
    fn drop_dots(&mut self, member: &[u8], covered: impl Fn(Stamp) -> bool) {
        let h = hash_member(member);
        let eq = |e: &Elem| e.member.as_slice() == member;
        let Some(e) = self.elems.find_mut(h, eq) else {
            return;
        };
        let mut extra: SmallVec<[Stamp; 2]> = self
            .meta
            .as_mut()
            .and_then(|m| m.extra.remove(member))
            .unwrap_or_default();
        extra.retain(|d| !covered(*d));
        // A surviving extra dot takes the removed one's place in the same lookup; only a
        // member left with none is looked up again, to be removed.
        let gone = covered(e.dot)
            && match extra.pop() {
                Some(d) => {
                    e.dot = d;
                    false
                }
                None => true,
            };
        if gone {
            self.elems.remove(h, eq, elem_hash);
        }
        if !extra.is_empty() {
            self.meta_mut()
                .extra
                .insert(SmallBytes::copy_from(member), extra);
        }
    }

    fn tidy_meta(&mut self) {
        if self.meta.as_ref().is_some_and(|m| m.is_blank()) {
            self.meta = None;
        }
    }
}

impl OrSet {
    pub fn new() -> OrSet {
        OrSet::default()
    }

    fn elems(&self) -> &SteppedTable<Elem> {
        self.inner.as_ref().map_or(&EMPTY, |i| &i.elems)
    }

    fn inner_mut(&mut self) -> &mut Inner {
        self.inner.get_or_insert_with(Box::default)
    }

    /// Adds `member` with the dot `stamp`. Returns false when that dot is held already (or a
    /// newer add from the same replica is) or a removal of this member had observed it.
    pub fn add(&mut self, stamp: Stamp, member: &[u8]) -> bool {
        let inner = self.inner_mut();
        inner.seen.observe(stamp);
        if inner.removed_of(member).is_some_and(|r| r.covers(stamp)) {
            return false;
        }
        let h = hash_member(member);
        let Some(e) = inner.elems.find_mut(h, |e| e.member.as_slice() == member) else {
            // A set with no member is a new key for clients: its history starts again.
            if inner.elems.is_empty() {
                inner.most = 0;
                inner.non_int = false;
            }
            inner.elems.insert_unique(
                h,
                Elem {
                    member: SmallBytes::copy_from(member),
                    dot: stamp,
                },
                elem_hash,
            );
            inner.most = inner
                .most
                .max(u32::try_from(inner.elems.len()).unwrap_or(u32::MAX));
            if !inner.non_int && crate::string::parse_i64_redis(member).is_none() {
                inner.non_int = true;
            }
            return true;
        };
        if e.dot.replica == stamp.replica {
            if e.dot.hlc >= stamp.hlc {
                return false;
            }
            e.dot = stamp;
            return true;
        }
        let meta = inner.meta.get_or_insert_with(Box::default);
        match meta.extra.get_mut(member) {
            Some(x) => {
                if let Some(d) = x.iter_mut().find(|d| d.replica == stamp.replica) {
                    if d.hlc >= stamp.hlc {
                        return false;
                    }
                    *d = stamp;
                } else {
                    x.push(stamp);
                }
            }
            None => {
                let mut x = SmallVec::new();
                x.push(stamp);
                meta.extra.insert(SmallBytes::copy_from(member), x);
            }
        }
        true
    }

    /// SREM: removes the dots of `member` covered by `observed` and keeps the context.
    pub fn remove(&mut self, member: &[u8], observed: &VersionVector) {
        self.remove_inner(member, observed, None);
    }

    /// SREM stamped `by`: as `remove`, and the member's context also names the SREM itself
    /// (harmless: every add of the member from its origin that `by` covers was seen by it), so
    /// that the context stays until the SREM is stable and `observe_into` names it.
    pub fn remove_by(&mut self, by: Stamp, member: &[u8], observed: &VersionVector) {
        self.remove_inner(member, observed, Some(by));
    }

    fn remove_inner(&mut self, member: &[u8], observed: &VersionVector, by: Option<Stamp>) {
        if observed.is_empty() && by.is_none() {
            return;
        }
        let inner = self.inner_mut();
        inner.drop_dots(member, |d| observed.covers(d));
        inner.seen.merge(observed);
        let meta = inner.meta_mut();
        let ctx = match meta.removed.get_mut(member) {
            Some(r) => {
                r.merge(observed);
                r
            }
            None => meta
                .removed
                .entry(SmallBytes::copy_from(member))
                .or_insert_with(|| observed.clone()),
        };
        if let Some(by) = by {
            ctx.observe(by);
            inner.seen.observe(by);
        }
    }

    /// Removes every dot covered by `observed` (DEL, SET). The caller keeps `observed` as its
    /// own removal context, so member contexts it dominates are dropped. Returns whether no
    /// member is left.
    pub fn remove_observed(&mut self, observed: &VersionVector) -> bool {
        let Some(inner) = self.inner.as_mut() else {
            return true;
        };
        if observed.is_empty() {
            return inner.elems.is_empty();
        }
        let extra = inner
            .meta
            .as_mut()
            .map(|m| std::mem::take(&mut m.extra))
            .unwrap_or_default();
        let mut kept_extra = BTreeMap::new();
        // Members with several dots first: a surviving extra dot moves up.
        for (member, mut dots) in extra {
            dots.retain(|d| !observed.covers(*d));
            let h = hash_member(member.as_slice());
            if let Some(e) = inner
                .elems
                .find_mut(h, |e| e.member.as_slice() == member.as_slice())
            {
                if observed.covers(e.dot) {
                    if let Some(d) = dots.pop() {
                        e.dot = d;
                    }
                }
            }
            if !dots.is_empty() {
                kept_extra.insert(member, dots);
            }
        }
        inner.elems.retain(|e| !observed.covers(e.dot));
        if let Some(m) = inner.meta.as_mut() {
            m.extra = kept_extra;
            m.removed.retain(|_, r| !observed.dominates(r));
        }
        inner.tidy_meta();
        inner.elems.is_empty()
    }

    pub fn contains(&self, member: &[u8]) -> bool {
        self.elems()
            .find(hash_member(member), |e| e.member.as_slice() == member)
            .is_some()
    }

    /// Number of members present.
    pub fn len(&self) -> usize {
        self.elems().len()
    }

    pub fn is_empty(&self) -> bool {
        self.elems().is_empty()
    }

    /// Members present, in hash order.
    pub fn members(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.elems().iter().map(|e| e.member.as_slice())
    }

    /// Buckets of the table: with `bucket`, a way to pick random members and to scan with a
    /// cursor (`scan_space`).
    pub fn bucket_count(&self) -> usize {
        self.elems().num_buckets()
    }

    /// Where bucket `i` is in the table's scan space (`table::SteppedTable`): at position
    /// `base + i`.
    pub fn scan_space(&self) -> ScanSpace {
        self.elems().scan_space()
    }

    /// The member in bucket `index`, if that bucket is occupied.
    pub fn bucket(&self, index: usize) -> Option<&[u8]> {
        self.elems().get_bucket(index).map(|e| e.member.as_slice())
    }

    /// The highest dot present.
    pub fn max_stamp(&self) -> Option<Stamp> {
        let inner = self.inner.as_ref()?;
        let extra = inner
            .meta
            .as_ref()
            .and_then(|m| m.extra.values().flat_map(|v| v.iter().copied()).max());
        inner.elems.iter().map(|e| e.dot).max().max(extra)
    }

    /// Adds every dot present and every removal context to `vv`, in O(replicas): the set
    /// keeps their join.
    pub fn observe_into(&self, vv: &mut VersionVector) {
        if let Some(i) = &self.inner {
            vv.merge(&i.seen);
        }
    }

    /// Adds the dots of the members present (not removal contexts) to `vv`.
    pub fn live_into(&self, vv: &mut VersionVector) {
        let Some(i) = &self.inner else {
            return;
        };
        for e in i.elems.iter() {
            vv.observe(e.dot);
        }
        if let Some(m) = &i.meta {
            for dots in m.extra.values() {
                for d in dots {
                    vv.observe(*d);
                }
            }
        }
    }

    /// Whether removal contexts are held.
    pub fn has_metadata(&self) -> bool {
        self.removal_contexts() > 0
    }

    /// Number of members with a removal context held (tombstones).
    pub fn removal_contexts(&self) -> usize {
        self.inner
            .as_ref()
            .and_then(|i| i.meta.as_ref())
            .map_or(0, |m| m.removed.len())
    }

    /// Drops the member removal contexts that `stable` covers whole (every replica has
    /// delivered every dot they cover, so no late dot can arrive, and the SREM that the
    /// context names, so no replica still needs the context in a state merge); `None` drops
    /// them all. A context is kept whole until then: with its stable part forgotten it would
    /// no longer remove, in a full sync, a dot still held by a replica that lacks the SREM.
    pub fn collect(&mut self, stable: Option<&VersionVector>) {
        let Some(inner) = self.inner.as_mut() else {
            return;
        };
        if let Some(m) = inner.meta.as_mut() {
            match stable {
                None => m.removed.clear(),
                Some(s) => m.removed.retain(|_, r| !s.dominates(r)),
            }
        }
        inner.tidy_meta();
        if inner.elems.is_empty() && inner.meta.is_none() {
            // Nothing left to show or to remember.
            self.inner = None;
        }
    }

    /// State join. Every dot of `other` is added as `add` would (refused when a member
    /// removal context here covers it, or a newer dot of its origin is held), then every
    /// member removal context of `other` is applied as `remove` would (dropping the dots here
    /// it covers); `seen` takes the maximum. The result holds, per member and origin, the
    /// newer dot of the two sides unless a member context of either side covers it: what a
    /// replica that applied both sides' adds and SREMs holds. Removals of the whole set are
    /// the caller's (`KeyState::merge`). Commutative, associative, idempotent.
    pub fn merge(&mut self, other: &OrSet) {
        let Some(theirs) = other.inner.as_ref() else {
            return;
        };
        for e in theirs.elems.iter() {
            let m = e.member.as_slice();
            self.add(e.dot, m);
            for d in theirs.extra_of(m) {
                self.add(*d, m);
            }
        }
        if let Some(meta) = &theirs.meta {
            for (m, ctx) in &meta.removed {
                self.remove(m.as_slice(), ctx);
            }
        }
        self.inner_mut().seen.merge(&theirs.seen);
    }

    /// Whether Redis 7.0 would hold this set as an intset (OBJECT ENCODING): it never held a
    /// member that is not an integer (Redis's `string2ll`) nor more than `entries_max`
    /// members (`set-max-intset-entries`; Redis converts one way only).
    pub fn fits_intset(&self, entries_max: u64) -> bool {
        self.inner
            .as_deref()
            .is_none_or(|i| !i.non_int && u64::from(i.most) <= entries_max)
    }

    /// Appends the complete state: the members present in byte order, each with its dots in
    /// stamp order; the member removal contexts in byte order; `seen`. Sorted, so that equal
    /// sets encode to equal bytes whatever their hash order.
    pub fn encode_state(&self, out: &mut Vec<u8>) {
        let mut elems: Vec<&Elem> = self.elems().iter().collect();
        elems.sort_unstable_by(|a, b| a.member.as_slice().cmp(b.member.as_slice()));
        codec::put_varint(out, elems.len() as u64);
        for e in elems {
            codec::put_bytes(out, e.member.as_slice());
            let dots = self.dots_of(e);
            codec::put_varint(out, dots.len() as u64);
            for d in dots {
                codec::put_stamp(out, d);
            }
        }
        let removed = self.removed_map();
        codec::put_varint(out, removed.map_or(0, |r| r.len()) as u64);
        for (m, ctx) in removed.into_iter().flatten() {
            codec::put_bytes(out, m.as_slice());
            codec::put_vv(out, ctx);
        }
        match &self.inner {
            Some(i) => codec::put_vv(out, &i.seen),
            None => codec::put_vv(out, &VersionVector::new()),
        }
    }

    /// Decodes what `encode_state` wrote. `Invalid`: members or contexts out of order or
    /// repeated, a member without dots, dots out of order or two from one origin, a dot its
    /// member's removal context covers, an empty context, a `seen` that misses a dot or a
    /// context.
    pub fn decode_state(r: &mut Reader<'_>) -> Result<OrSet, DecodeError> {
        // A member takes at least its length byte, a dot count and one 12-byte dot.
        let n = r.items(14)?;
        let mut members: Vec<(SmallBytes, SmallVec<[Stamp; 2]>)> =
            Vec::with_capacity(codec::prealloc(n));
        for _ in 0..n {
            let m = r.bytes()?;
            if members.last().is_some_and(|p| p.0.as_slice() >= m) {
                return Err(DecodeError::Invalid("set members not sorted"));
            }
            let k = r.count("set member dots")?;
            if k == 0 {
                return Err(DecodeError::Invalid("set member without dots"));
            }
            let mut dots: SmallVec<[Stamp; 2]> = SmallVec::with_capacity(codec::prealloc(k));
            for _ in 0..k {
                let d = r.stamp()?;
                if dots.last().is_some_and(|p| *p >= d) {
                    return Err(DecodeError::Invalid("set member dots not sorted"));
                }
                dots.push(d);
            }
            let mut origins: SmallVec<[u32; 4]> = dots.iter().map(|d| d.replica.0).collect();
            origins.sort_unstable();
            if origins.windows(2).any(|w| w.first() == w.get(1)) {
                return Err(DecodeError::Invalid(
                    "set member with two dots of one origin",
                ));
            }
            members.push((SmallBytes::copy_from(m), dots));
        }
        // A context takes at least its member's length byte and a one-entry vector.
        let n = r.items(13)?;
        let mut removed: BTreeMap<SmallBytes, VersionVector> = BTreeMap::new();
        let mut last: Option<SmallBytes> = None;
        for _ in 0..n {
            let m = SmallBytes::copy_from(r.bytes()?);
            if last.as_ref().is_some_and(|p| p.as_slice() >= m.as_slice()) {
                return Err(DecodeError::Invalid("set removal contexts not sorted"));
            }
            let ctx = r.vv_strict()?;
            if ctx.is_empty() {
                return Err(DecodeError::Invalid("empty set removal context"));
            }
            last = Some(m.clone());
            removed.insert(m, ctx);
        }
        let seen = r.vv_strict()?;
        if members.is_empty() && removed.is_empty() && seen.is_empty() {
            return Ok(OrSet::new());
        }
        // A loaded set starts its encoding history from what it holds, as Redis re-encodes
        // what it loads.
        let mut inner = Inner {
            elems: SteppedTable::with_capacity(codec::prealloc(members.len())),
            seen,
            meta: None,
            most: u32::try_from(members.len()).unwrap_or(u32::MAX),
            non_int: members
                .iter()
                .any(|(m, _)| crate::string::parse_i64_redis(m.as_slice()).is_none()),
        };
        if removed.values().any(|ctx| !inner.seen.dominates(ctx)) {
            return Err(DecodeError::Invalid("set seen misses a removal context"));
        }
        for (member, mut dots) in members {
            let ctx = removed.get(&member);
            if dots
                .iter()
                .any(|d| !inner.seen.covers(*d) || ctx.is_some_and(|c| c.covers(*d)))
            {
                return Err(DecodeError::Invalid("set dot removed or unseen"));
            }
            let Some(first) = dots.pop() else {
                continue;
            };
            if !dots.is_empty() {
                inner
                    .meta_mut()
                    .extra
                    .insert(member.clone(), std::mem::take(&mut dots));
            }
            inner.elems.insert_unique(
                hash_member(member.as_slice()),
                Elem { member, dot: first },
                elem_hash,
            );
        }
        if !removed.is_empty() {
            inner.meta_mut().removed = removed;
        }
        Ok(OrSet {
            inner: Some(Box::new(inner)),
        })
    }

    /// Keeps the dots that `keep` accepts (with their member); a member whose dots all go
    /// leaves the set. Removal contexts and `seen` stay as they are.
    pub(crate) fn retain_dots(&mut self, keep: impl Fn(&[u8], Stamp) -> bool) {
        let Some(inner) = self.inner.as_mut() else {
            return;
        };
        let mut members: Vec<SmallBytes> = Vec::new();
        for e in inner.elems.iter() {
            let m = e.member.as_slice();
            if !keep(m, e.dot) || inner.extra_of(m).iter().any(|d| !keep(m, *d)) {
                members.push(e.member.clone());
            }
        }
        for m in members {
            inner.drop_dots(m.as_slice(), |d| !keep(m.as_slice(), d));
        }
        inner.tidy_meta();
    }

    /// Whether `member` is present with the dot `dot`.
    pub(crate) fn has_dot(&self, member: &[u8], dot: Stamp) -> bool {
        self.elems()
            .find(hash_member(member), |e| e.member.as_slice() == member)
            .is_some_and(|e| {
                e.dot == dot
                    || self
                        .inner
                        .as_ref()
                        .is_some_and(|i| i.extra_of(member).contains(&dot))
            })
    }

    /// Drops the entries of member removal contexts that `key_ctx` (a removal context of the
    /// whole key, which the caller keeps and applies to every late dot) makes redundant: each
    /// dot such an entry covers, `key_ctx` covers too. The state join uses it so that equal
    /// states come out equal, whichever contexts reached them first.
    pub fn trim_contexts(&mut self, key_ctx: &VersionVector) {
        if key_ctx.is_empty() {
            return;
        }
        let Some(inner) = self.inner.as_mut() else {
            return;
        };
        if let Some(m) = inner.meta.as_mut() {
            m.removed.retain(|_, r| {
                r.forget_covered(key_ctx);
                !r.is_empty()
            });
        }
        inner.tidy_meta();
    }

    /// Sorted dots of each member present, for equality and hashing.
    fn dots_of(&self, e: &Elem) -> SmallVec<[Stamp; 2]> {
        let mut d: SmallVec<[Stamp; 2]> = SmallVec::new();
        d.push(e.dot);
        if let Some(i) = &self.inner {
            d.extend_from_slice(i.extra_of(e.member.as_slice()));
        }
        d.sort_unstable();
        d
    }

    fn removed_map(&self) -> Option<&BTreeMap<SmallBytes, VersionVector>> {
        self.inner
            .as_ref()
            .and_then(|i| i.meta.as_ref())
            .map(|m| &m.removed)
            .filter(|r| !r.is_empty())
    }
}

impl PartialEq for OrSet {
    /// The same members with the same dots and the same removal contexts (order and the
    /// `seen` cache aside).
    fn eq(&self, other: &OrSet) -> bool {
        self.len() == other.len()
            && self.removed_map() == other.removed_map()
            && self.elems().iter().all(|e| {
                other
                    .elems()
                    .find(elem_hash(e), |o| o.member == e.member)
                    .is_some_and(|o| self.dots_of(e) == other.dots_of(o))
            })
    }
}

impl Eq for OrSet {}

impl Hash for OrSet {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // Order-independent: a wrapping sum of the elements' hashes.
        let mut sum = 0u64;
        for e in self.elems().iter() {
            let mut h = std::hash::DefaultHasher::new();
            e.member.hash(&mut h);
            self.dots_of(e).hash(&mut h);
            sum = sum.wrapping_add(h.finish());
        }
        self.len().hash(state);
        sum.hash(state);
        self.removed_map().hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::st;

    fn vv(stamps: &[Stamp]) -> VersionVector {
        let mut v = VersionVector::new();
        for s in stamps {
            v.observe(*s);
        }
        v
    }

    fn sorted(s: &OrSet) -> Vec<Vec<u8>> {
        let mut m: Vec<Vec<u8>> = s.members().map(<[u8]>::to_vec).collect();
        m.sort();
        m
    }

    #[test]
    fn concurrent_add_survives_remove() {
        let mut s = OrSet::new();
        s.add(st(1, 1), b"x");
        let seen = vv(&[st(1, 1)]);
        s.add(st(2, 2), b"x");
        s.remove(b"x", &seen);
        assert!(s.contains(b"x"));
        s.remove(b"x", &vv(&[st(1, 1), st(2, 2)]));
        assert!(!s.contains(b"x"));
        assert!(
            !s.add(st(2, 2), b"x"),
            "late dot covered by a removal is dropped"
        );
        assert!(s.has_metadata());
        s.collect(None);
        assert!(!s.has_metadata());
        assert_eq!(s, OrSet::new());
    }

    #[test]
    fn members_are_counted() {
        let mut s = OrSet::new();
        s.add(st(1, 1), b"b");
        s.add(st(2, 1), b"a");
        s.add(st(3, 1), b"a");
        assert_eq!(sorted(&s), vec![b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(s.len(), 2);
        assert_eq!(s.max_stamp(), Some(st(3, 1)));
        let mut all = VersionVector::new();
        s.observe_into(&mut all);
        assert!(s.remove_observed(&all));
    }

    #[test]
    fn one_dot_per_replica_and_duplicates_are_refused() {
        let mut s = OrSet::new();
        assert!(s.add(st(5, 1), b"m"));
        assert!(!s.add(st(5, 1), b"m"), "duplicate");
        assert!(!s.add(st(4, 1), b"m"), "superseded");
        assert!(s.add(st(3, 2), b"m"));
        assert!(s.add(st(4, 3), b"m"));
        assert!(!s.add(st(3, 2), b"m"));
        assert!(
            s.add(st(6, 2), b"m"),
            "newer add from replica 2 replaces its dot"
        );
        assert_eq!(s.len(), 1);
        assert_eq!(s.max_stamp(), Some(st(6, 2)));
        // A removal that saw replica 1 and 3 only leaves replica 2's dot.
        s.remove(b"m", &vv(&[st(5, 1), st(4, 3)]));
        assert!(s.contains(b"m"));
        s.remove(b"m", &vv(&[st(6, 2)]));
        assert!(!s.contains(b"m"));
        assert!(s.is_empty());
    }

    #[test]
    fn remove_observed_promotes_surviving_extra_dots() {
        let mut s = OrSet::new();
        s.add(st(1, 1), b"m");
        s.add(st(2, 2), b"m");
        s.add(st(3, 1), b"n");
        // DEL that had seen replica 1 up to 3: m keeps replica 2's dot, n goes.
        assert!(!s.remove_observed(&vv(&[st(3, 1)])));
        assert_eq!(sorted(&s), vec![b"m".to_vec()]);
        assert_eq!(s.max_stamp(), Some(st(2, 2)));
        assert!(s.remove_observed(&vv(&[st(2, 2)])));
    }

    #[test]
    fn equality_ignores_order_and_which_dot_is_first() {
        let mut a = OrSet::new();
        let mut b = OrSet::new();
        for i in 0..200u64 {
            a.add(st(i + 1, 1), format!("m{i}").as_bytes());
        }
        for i in (0..200u64).rev() {
            b.add(st(i + 1, 1), format!("m{i}").as_bytes());
        }
        a.add(st(500, 2), b"m7");
        b.add(st(500, 2), b"m7");
        assert_eq!(a, b);
        let hash = |s: &OrSet| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            s.hash(&mut h);
            h.finish()
        };
        assert_eq!(hash(&a), hash(&b));
        // Different first dot, same dots: still equal.
        let mut c = OrSet::new();
        let mut d = OrSet::new();
        c.add(st(1, 1), b"x");
        c.add(st(1, 2), b"x");
        d.add(st(1, 2), b"x");
        d.add(st(1, 1), b"x");
        assert_eq!(c, d);
        assert_eq!(hash(&c), hash(&d));
        d.add(st(2, 3), b"x");
        assert_ne!(c, d);
    }

    #[test]
    fn no_tombstones_without_peers() {
        let mut s = OrSet::new();
        for i in 0..1000u64 {
            s.add(st(i + 1, 1), format!("{i}").as_bytes());
        }
        for i in 0..500u64 {
            let mut o = VersionVector::new();
            s.observe_into(&mut o);
            s.remove(format!("{i}").as_bytes(), &o);
            s.collect(None);
        }
        assert_eq!(s.len(), 500);
        assert_eq!(s.removal_contexts(), 0);
        assert!(!s.has_metadata());
    }

    #[test]
    fn removal_context_kept_until_stable() {
        let mut s = OrSet::new();
        s.add(st(1, 1), b"a");
        s.remove(b"x", &vv(&[st(9, 2)]));
        assert_eq!(s.removal_contexts(), 1);
        s.collect(Some(&vv(&[st(8, 2)])));
        assert_eq!(s.removal_contexts(), 1);
        assert!(!s.add(st(9, 2), b"x"), "late add covered by the removal");
        assert!(s.add(st(10, 2), b"x"));
        s.collect(Some(&vv(&[st(9, 2)])));
        assert_eq!(s.removal_contexts(), 0);
        let mut o = VersionVector::new();
        s.observe_into(&mut o);
        assert!(o.covers(st(10, 2)) && o.covers(st(1, 1)));
    }

    #[test]
    fn merge_keeps_newer_dots_unless_a_context_covers_them() {
        let mut a = OrSet::new();
        a.add(st(1, 1), b"x");
        a.add(st(2, 1), b"y");
        let mut b = a.clone();
        // A removes x (having seen 1@1); B adds x again concurrently and y from another site.
        a.remove(b"x", &vv(&[st(1, 1)]));
        b.add(st(3, 2), b"x");
        b.add(st(4, 3), b"y");
        b.remove(b"y", &vv(&[st(2, 1)]));
        let mut ab = a.clone();
        ab.merge(&b);
        let mut ba = b.clone();
        ba.merge(&a);
        assert_eq!(ab, ba);
        assert_eq!(sorted(&ab), vec![b"x".to_vec(), b"y".to_vec()]);
        let dots = |m: &[u8]| {
            let e = ab
                .elems()
                .find(hash_member(m), |e| e.member.as_slice() == m)
                .unwrap()
                .clone();
            ab.dots_of(&e).to_vec()
        };
        assert_eq!(dots(b"x"), vec![st(3, 2)]);
        assert_eq!(dots(b"y"), vec![st(4, 3)]);
        let mut again = ab.clone();
        again.merge(&ab);
        assert_eq!(again, ab);
        let mut out = Vec::new();
        ab.encode_state(&mut out);
        let mut r = Reader::new(&out);
        let back = OrSet::decode_state(&mut r).unwrap();
        assert!(r.is_at_end());
        assert_eq!(back, ab);
        let mut out2 = Vec::new();
        back.encode_state(&mut out2);
        assert_eq!(out, out2);
        for cut in 0..out.len() {
            assert!(OrSet::decode_state(&mut Reader::new(&out[..cut])).is_err());
        }
    }

    #[test]
    fn buckets_hold_every_member_once() {
        let mut s = OrSet::new();
        for i in 0..100u64 {
            s.add(st(i + 1, 1), format!("k{i}").as_bytes());
        }
        let mut seen: Vec<Vec<u8>> = (0..s.bucket_count())
            .filter_map(|i| s.bucket(i).map(<[u8]>::to_vec))
            .collect();
        seen.sort();
        assert_eq!(seen, sorted(&s));
    }

    #[test]
    fn element_is_small() {
        assert_eq!(std::mem::size_of::<Elem>(), ELEM_BYTES);
        assert_eq!(std::mem::size_of::<OrSet>(), 8);
    }
}

//! Add-wins observed-remove set.
//!
//! Each SADD of a member adds a dot (the write's `Stamp`); SREM removes the dots of that
//! member it had observed, so a concurrent add survives ("add wins"). A removal context is
//! kept per removed member until it is causally stable, so that a dot arriving after a
//! removal that had observed it is dropped. Removals of the whole set (DEL, SET) are the
//! caller's: `remove_observed` drops the dots, and the caller keeps that context.

use std::collections::BTreeMap;

use smallvec::SmallVec;

use crate::bytes::SmallBytes;
use crate::dot::{Stamp, VersionVector};

#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct Elem {
    // Invariant: at most one dot per origin replica (a newer add from a replica replaces its
    // older dot, which that replica had observed).
    dots: SmallVec<[Stamp; 1]>,
    /// Merged contexts of SREMs of this member.
    removed: VersionVector,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct OrSet {
    // Invariant: no entry with neither dots nor removal context.
    elems: BTreeMap<SmallBytes, Elem>,
}

impl OrSet {
    pub fn new() -> OrSet {
        OrSet::default()
    }

    /// Adds `member` with the dot `stamp`. Returns false when that dot is held already or a
    /// removal of this member had observed it.
    pub fn add(&mut self, stamp: Stamp, member: &[u8]) -> bool {
        if let Some(e) = self.elems.get_mut(member) {
            // Covered by a removal, or held already (or superseded by a newer add from the same
            // replica, which had observed this one): a duplicate.
            if e.removed.covers(stamp)
                || e.dots
                    .iter()
                    .any(|d| d.replica == stamp.replica && d.hlc >= stamp.hlc)
            {
                return false;
            }
            e.dots.retain(|d| d.replica != stamp.replica);
            e.dots.push(stamp);
            return true;
        }
        let mut dots = SmallVec::new();
        dots.push(stamp);
        self.elems.insert(
            SmallBytes::copy_from(member),
            Elem {
                dots,
                removed: VersionVector::new(),
            },
        );
        true
    }

    /// SREM: removes the dots of `member` covered by `observed` and keeps the context.
    pub fn remove(&mut self, member: &[u8], observed: &VersionVector) {
        if observed.is_empty() {
            return;
        }
        match self.elems.get_mut(member) {
            Some(e) => {
                e.dots.retain(|d| !observed.covers(*d));
                e.removed.merge(observed);
            }
            None => {
                let e = Elem {
                    dots: SmallVec::new(),
                    removed: observed.clone(),
                };
                self.elems.insert(SmallBytes::copy_from(member), e);
            }
        }
    }

    /// Removes every dot covered by `observed` (DEL, SET). The caller keeps `observed` as its
    /// own removal context, so member contexts it dominates are dropped. Returns whether no
    /// member is left.
    pub fn remove_observed(&mut self, observed: &VersionVector) -> bool {
        self.elems.retain(|_, e| {
            e.dots.retain(|d| !observed.covers(*d));
            if observed.dominates(&e.removed) {
                e.removed = VersionVector::new();
            }
            !e.dots.is_empty() || !e.removed.is_empty()
        });
        self.is_empty()
    }

    pub fn contains(&self, member: &[u8]) -> bool {
        self.elems.get(member).is_some_and(|e| !e.dots.is_empty())
    }

    /// Number of members present.
    pub fn len(&self) -> usize {
        self.elems.values().filter(|e| !e.dots.is_empty()).count()
    }

    pub fn is_empty(&self) -> bool {
        self.elems.values().all(|e| e.dots.is_empty())
    }

    /// Members present, in byte order.
    pub fn members(&self) -> impl Iterator<Item = &[u8]> + '_ {
        self.elems
            .iter()
            .filter(|(_, e)| !e.dots.is_empty())
            .map(|(k, _)| k.as_slice())
    }

    /// The highest dot present.
    pub fn max_stamp(&self) -> Option<Stamp> {
        self.elems
            .values()
            .flat_map(|e| e.dots.iter().copied())
            .max()
    }

    /// Adds every dot present and every removal context to `vv`.
    pub fn observe_into(&self, vv: &mut VersionVector) {
        for e in self.elems.values() {
            for d in &e.dots {
                vv.observe(*d);
            }
            vv.merge(&e.removed);
        }
    }

    /// Whether removal contexts are held.
    pub fn has_metadata(&self) -> bool {
        self.elems.values().any(|e| !e.removed.is_empty())
    }

    /// Drops the parts of member removal contexts that `stable` covers (every replica has
    /// delivered every dot they cover, so no late dot can arrive); `None` drops them all.
    pub fn collect(&mut self, stable: Option<&VersionVector>) {
        self.elems.retain(|_, e| {
            match stable {
                None => e.removed = VersionVector::new(),
                Some(s) => e.removed.forget_covered(s),
            }
            !e.dots.is_empty() || !e.removed.is_empty()
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::ReplicaId;
    use crate::hlc::Hlc;

    fn st(h: u64, r: u32) -> Stamp {
        Stamp {
            hlc: Hlc(h),
            replica: ReplicaId(r),
        }
    }

    #[test]
    fn concurrent_add_survives_remove() {
        let mut s = OrSet::new();
        s.add(st(1, 1), b"x");
        let mut seen = VersionVector::new();
        seen.observe(st(1, 1));
        s.add(st(2, 2), b"x");
        s.remove(b"x", &seen);
        assert!(s.contains(b"x"));
        s.remove(b"x", &{
            let mut v = seen.clone();
            v.observe(st(2, 2));
            v
        });
        assert!(!s.contains(b"x"));
        assert!(
            !s.add(st(2, 2), b"x"),
            "late dot covered by a removal is dropped"
        );
        assert!(s.has_metadata());
        s.collect(None);
        assert!(!s.has_metadata());
    }

    #[test]
    fn members_are_sorted_and_counted() {
        let mut s = OrSet::new();
        s.add(st(1, 1), b"b");
        s.add(st(2, 1), b"a");
        s.add(st(3, 1), b"a");
        assert_eq!(s.members().collect::<Vec<_>>(), vec![&b"a"[..], &b"b"[..]]);
        assert_eq!(s.len(), 2);
        assert_eq!(s.max_stamp(), Some(st(3, 1)));
        let mut all = VersionVector::new();
        s.observe_into(&mut all);
        assert!(s.remove_observed(&all));
    }
}

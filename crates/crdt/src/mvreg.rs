//! Multi-value register: the set of writes no other write has observed, shown as LWW.
//!
//! A write removes every write it observed (by `Stamp` coverage) and adds itself. Concurrent
//! writes stay side by side until a later write observes them; readers see the one with the
//! highest `Stamp`. Usually exactly one write is held.
//!
//! The register keeps no removal context: a write that arrives after a removal that had
//! observed it must be filtered by the caller (`KeyState` keeps that context).

use smallvec::SmallVec;

use crate::dot::{Stamp, VersionVector};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MvReg<T> {
    // Invariant: no two writes share a stamp.
    writes: SmallVec<[(Stamp, T); 1]>,
}

impl<T> Default for MvReg<T> {
    fn default() -> Self {
        MvReg {
            writes: SmallVec::new(),
        }
    }
}

impl<T> MvReg<T> {
    pub fn new() -> MvReg<T> {
        MvReg::default()
    }

    /// Removes the writes covered by `observed`, then adds `(stamp, value)` unless a write
    /// with that stamp is held already. Returns false for such a duplicate.
    pub fn write(&mut self, stamp: Stamp, value: T, observed: &VersionVector) -> bool {
        self.remove(observed);
        if self.contains(stamp) {
            return false;
        }
        self.writes.push((stamp, value));
        true
    }

    /// Removes the writes covered by `observed`; returns whether the register is now empty.
    pub fn remove(&mut self, observed: &VersionVector) -> bool {
        self.writes.retain(|w| !observed.covers(w.0));
        self.writes.is_empty()
    }

    pub fn contains(&self, stamp: Stamp) -> bool {
        self.writes.iter().any(|w| w.0 == stamp)
    }

    /// The write with the highest stamp.
    pub fn visible(&self) -> Option<(&Stamp, &T)> {
        self.writes.iter().max_by_key(|w| w.0).map(|w| (&w.0, &w.1))
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Stamp, &T)> + '_ {
        self.writes.iter().map(|w| (&w.0, &w.1))
    }

    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    pub fn len(&self) -> usize {
        self.writes.len()
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
    fn concurrent_writes_show_the_highest_stamp_until_observed() {
        let mut r = MvReg::new();
        let none = VersionVector::new();
        r.write(st(2, 1), "a", &none);
        r.write(st(1, 2), "b", &none);
        assert_eq!(r.len(), 2);
        assert_eq!(r.visible().map(|v| *v.1), Some("a"));
        let mut seen = VersionVector::new();
        seen.observe(st(2, 1));
        seen.observe(st(1, 2));
        r.write(st(3, 2), "c", &seen);
        assert_eq!(r.len(), 1);
        assert_eq!(r.visible().map(|v| *v.1), Some("c"));
        assert!(!r.write(st(3, 2), "c", &none));
        assert!(r.remove(&{
            let mut v = seen.clone();
            v.observe(st(3, 2));
            v
        }));
    }
}

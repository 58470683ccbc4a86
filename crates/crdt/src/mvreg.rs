//! Multi-value register: the set of writes no other write has observed, shown as LWW.
//!
//! A write removes every write it observed (by `Stamp` coverage) and adds itself. Concurrent
//! writes stay side by side until a later write observes them; readers see the one with the
//! highest `Stamp`. Usually exactly one write is held.
//!
//! The register keeps no removal context: a write that arrives after a removal that had
//! observed it must be filtered by the caller (`KeyState` keeps that context). For the same
//! reason the state join `merge` is the union of the writes: the caller then removes what
//! either side's removal context covers.

use smallvec::SmallVec;

use crate::codec::{self, DecodeError, Reader, StateCodec};
use crate::dot::{Stamp, VersionVector};

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct MvReg<T> {
    // Invariant: sorted by stamp, no two writes share a stamp (so equal sets of writes are
    // equal registers, whatever the order they arrived in).
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
        match self.writes.binary_search_by_key(&stamp, |w| w.0) {
            Ok(_) => false,
            Err(i) => {
                self.writes.insert(i, (stamp, value));
                true
            }
        }
    }

    /// Removes the writes covered by `observed`; returns whether the register is now empty.
    pub fn remove(&mut self, observed: &VersionVector) -> bool {
        self.writes.retain(|w| !observed.covers(w.0));
        self.writes.is_empty()
    }

    /// Keeps the writes whose stamp `keep` accepts.
    pub(crate) fn retain(&mut self, keep: impl Fn(Stamp) -> bool) {
        self.writes.retain(|w| keep(w.0));
    }

    pub fn contains(&self, stamp: Stamp) -> bool {
        self.writes.binary_search_by_key(&stamp, |w| w.0).is_ok()
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

    /// State join: the union of both sides' writes (one per stamp: a stamp names one write,
    /// so both sides hold the same value for it). The register keeps no removal context, so
    /// the caller must then `remove` what each side's removal context covers: a write held on
    /// one side only may have been removed on the other. Commutative, associative, idempotent.
    pub fn merge(&mut self, other: &MvReg<T>)
    where
        T: Clone,
    {
        for (stamp, value) in &other.writes {
            if let Err(i) = self.writes.binary_search_by_key(stamp, |w| w.0) {
                self.writes.insert(i, (*stamp, value.clone()));
            }
        }
    }

    /// Appends the complete state: the number of writes, then each stamp and value in stamp
    /// order.
    pub fn encode_state(&self, out: &mut Vec<u8>)
    where
        T: StateCodec,
    {
        codec::put_varint(out, self.writes.len() as u64);
        for (stamp, value) in &self.writes {
            codec::put_stamp(out, *stamp);
            value.put_state(out);
        }
    }

    /// Decodes what `encode_state` wrote; stamps out of order or repeated are `Invalid`.
    pub fn decode_state(r: &mut Reader<'_>) -> Result<MvReg<T>, DecodeError>
    where
        T: StateCodec,
    {
        let n = r.count("register writes")?;
        let mut writes: SmallVec<[(Stamp, T); 1]> = SmallVec::with_capacity(codec::prealloc(n));
        for _ in 0..n {
            let stamp = r.stamp()?;
            if writes.last().is_some_and(|w| w.0 >= stamp) {
                return Err(DecodeError::Invalid("register writes not sorted"));
            }
            writes.push((stamp, T::read_state(r)?));
        }
        Ok(MvReg { writes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::st;

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

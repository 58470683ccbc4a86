//! Replica identities, stamps and version vectors.
//!
//! A `Stamp` is `(Hlc, ReplicaId)`: it names one write (it is the write's dot, because a
//! replica's clock never issues the same `Hlc` twice) and orders concurrent writes for
//! last-writer-wins (highest `Hlc` first, then highest `ReplicaId`).
//! A `VersionVector` maps each origin replica to the highest `Hlc` observed from it. Because
//! ops from one origin are delivered in the order that origin issued them, "stamp covered by
//! the vector" means "this replica had seen that write".

use smallvec::SmallVec;

/// One replica: a shard of one site. Stable for the life of the deployment; derived from the
/// site id and the shard index so that every site computes the same number.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ReplicaId(pub u32);

impl ReplicaId {
    /// The replica id of `shard` at the site named `site`: FNV-1a of the name in the upper 24
    /// bits, the shard index in the lower 8.
    pub fn for_site_shard(site: &str, shard: u8) -> ReplicaId {
        let mut h: u32 = 0x811c_9dc5;
        for b in site.as_bytes() {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
        ReplicaId(((h & 0x00ff_ffff) << 8) | u32::from(shard))
    }

    /// The replica id of `shard` at `site` in its life `life`: life 0 is
    /// [`ReplicaId::for_site_shard`]; a later life (a restart that may have lost ops peers
    /// hold) hashes the life number in after the name, so that its ops never extend the
    /// counters, sequence or version-vector entries of an earlier life.
    pub fn for_life(site: &str, shard: u8, life: u32) -> ReplicaId {
        if life == 0 {
            return ReplicaId::for_site_shard(site, shard);
        }
        let mut h: u32 = 0x811c_9dc5;
        for b in site
            .as_bytes()
            .iter()
            .chain(&[0xff])
            .chain(&life.to_le_bytes())
        {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
        ReplicaId(((h & 0x00ff_ffff) << 8) | u32::from(shard))
    }
}

/// The identity and the LWW order of one write. Ordered by `hlc`, then by `replica`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Stamp {
    pub hlc: crate::hlc::Hlc,
    pub replica: ReplicaId,
}

/// Per origin replica, the highest `Hlc` observed. Kept sorted by `ReplicaId`, no duplicate
/// replicas, no zero entries (an absent replica means "nothing observed").
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct VersionVector {
    // Invariant: sorted by replica, unique replicas, every hlc > Hlc::ZERO.
    entries: SmallVec<[(ReplicaId, crate::hlc::Hlc); 1]>,
}

impl VersionVector {
    pub fn new() -> VersionVector {
        VersionVector {
            entries: SmallVec::new(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The highest hlc observed from `replica` (`Hlc::ZERO` when none).
    pub fn get(&self, replica: ReplicaId) -> crate::hlc::Hlc {
        match self.entries.binary_search_by_key(&replica, |e| e.0) {
            Ok(i) => self.entries.get(i).map_or(crate::hlc::Hlc::ZERO, |e| e.1),
            Err(_) => crate::hlc::Hlc::ZERO,
        }
    }

    /// Whether the write named `stamp` had been observed.
    pub fn covers(&self, stamp: Stamp) -> bool {
        stamp.hlc <= self.get(stamp.replica)
    }

    /// Records that `stamp` was observed (raises its origin's entry if lower).
    pub fn observe(&mut self, stamp: Stamp) {
        if stamp.hlc == crate::hlc::Hlc::ZERO {
            return;
        }
        match self.entries.binary_search_by_key(&stamp.replica, |e| e.0) {
            Ok(i) => {
                if let Some(e) = self.entries.get_mut(i) {
                    if e.1 < stamp.hlc {
                        e.1 = stamp.hlc;
                    }
                }
            }
            Err(i) => self.entries.insert(i, (stamp.replica, stamp.hlc)),
        }
    }

    /// Pointwise maximum.
    pub fn merge(&mut self, other: &VersionVector) {
        for &(replica, hlc) in &other.entries {
            self.observe(Stamp { hlc, replica });
        }
    }

    /// Whether every entry of `other` is covered by `self`.
    pub fn dominates(&self, other: &VersionVector) -> bool {
        other.entries.iter().all(|&(r, h)| h <= self.get(r))
    }

    pub fn iter(&self) -> impl Iterator<Item = (ReplicaId, crate::hlc::Hlc)> + '_ {
        self.entries.iter().copied()
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Lowers every entry to at most `limit(replica)`, dropping those that reach zero.
    pub fn clamp_by(&mut self, limit: impl Fn(ReplicaId) -> crate::hlc::Hlc) {
        self.entries.retain(|e| {
            let l = limit(e.0);
            if e.1 > l {
                e.1 = l;
            }
            e.1 > crate::hlc::Hlc::ZERO
        });
    }

    /// Drops the entries `stable` covers (every stamp they name was delivered everywhere).
    pub fn forget_covered(&mut self, stable: &VersionVector) {
        self.entries.retain(|e| e.1 > stable.get(e.0));
    }
}

/// A replica's causal context: the writes it has seen, so that a write the context covers
/// and the replica does not hold was removed there (the ORSWOT rule that
/// `KeyState::merge_with_contexts` applies). A version vector (`seen`) less at most one range
/// of one origin's writes (`gap`): a replica that restarted in the same life after its log
/// lost part of its own ops' tail has not seen those ops any more, though it issued the ones
/// before and after them.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Context {
    pub seen: VersionVector,
    pub gap: Option<Gap>,
}

/// Writes of `replica` with an hlc in `(after, upto]`: not covered by a `Context` whose
/// vector covers them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Gap {
    pub replica: ReplicaId,
    pub after: crate::hlc::Hlc,
    pub upto: crate::hlc::Hlc,
}

impl Context {
    /// Whether the write named `stamp` had been seen.
    pub fn covers(&self, stamp: Stamp) -> bool {
        self.seen.covers(stamp)
            && !self.gap.is_some_and(|g| {
                g.replica == stamp.replica && stamp.hlc > g.after && stamp.hlc <= g.upto
            })
    }

    /// Covers nothing.
    pub fn is_empty(&self) -> bool {
        self.seen.is_empty()
    }
}

impl From<VersionVector> for Context {
    fn from(seen: VersionVector) -> Context {
        Context { seen, gap: None }
    }
}

/// `Stamp { hlc: Hlc(h), replica: ReplicaId(r) }`: the unit tests' stamps.
#[cfg(test)]
pub(crate) fn st(h: u64, r: u32) -> Stamp {
    Stamp {
        hlc: crate::hlc::Hlc(h),
        replica: ReplicaId(r),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hlc::Hlc;

    #[test]
    fn lives_have_distinct_ids_and_life_zero_is_the_site_id() {
        assert_eq!(
            ReplicaId::for_life("a", 3, 0),
            ReplicaId::for_site_shard("a", 3)
        );
        let ids: std::collections::BTreeSet<ReplicaId> =
            (0..64).map(|l| ReplicaId::for_life("a", 3, l)).collect();
        assert_eq!(ids.len(), 64);
        assert!(ids.iter().all(|r| r.0 & 0xff == 3));
        assert_ne!(
            ReplicaId::for_life("a", 0, 1),
            ReplicaId::for_life("b", 0, 1)
        );
    }

    #[test]
    fn stamps_order_by_hlc_then_replica() {
        assert!(st(2, 1) > st(1, 9));
        assert!(st(2, 2) > st(2, 1));
    }

    #[test]
    fn vector_observes_and_covers() {
        let mut vv = VersionVector::new();
        assert!(!vv.covers(st(1, 1)));
        vv.observe(st(5, 1));
        vv.observe(st(3, 1));
        vv.observe(st(7, 0));
        assert!(vv.covers(st(5, 1)));
        assert!(!vv.covers(st(6, 1)));
        assert_eq!(vv.len(), 2);
        let mut other = VersionVector::new();
        other.observe(st(9, 1));
        vv.merge(&other);
        assert!(vv.dominates(&other));
        assert!(!other.dominates(&vv));
    }

    #[test]
    fn a_context_leaves_its_gap_out() {
        let mut seen = VersionVector::new();
        seen.observe(st(10, 1));
        seen.observe(st(4, 2));
        let gap = Gap {
            replica: ReplicaId(1),
            after: Hlc(3),
            upto: Hlc(6),
        };
        let c = Context {
            seen,
            gap: Some(gap),
        };
        assert!(c.covers(st(3, 1)) && c.covers(st(7, 1)) && c.covers(st(10, 1)));
        assert!(!c.covers(st(4, 1)) && !c.covers(st(6, 1)) && !c.covers(st(11, 1)));
        assert!(c.covers(st(4, 2)), "another origin's writes in the range");
        assert!(Context::default().is_empty());
    }

    #[test]
    fn replica_ids_are_stable_and_carry_the_shard() {
        let a0 = ReplicaId::for_site_shard("a", 0);
        assert_eq!(a0, ReplicaId::for_site_shard("a", 0));
        assert_ne!(a0, ReplicaId::for_site_shard("b", 0));
        assert_eq!(ReplicaId::for_site_shard("a", 3).0 & 0xff, 3);
    }
}

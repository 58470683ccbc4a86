//! Counters: per-origin increment totals and the observed baseline that resets them.
//!
//! Each origin replica's increments form a sequence in the order it issued them; replicas
//! keep the running totals `IncTotals { n, int, float }` per origin, merged by taking the one
//! with the larger `n` (it extends the other). A SET or DEL that observed totals `b` records `b`
//! as the baseline; the counter's contribution is `Σ_origin (totals - baseline)`, so
//! increments the SET did not observe are added on top of its value.
//!
//! State join (`merge`, for a full sync): per origin, the totals with the larger `n` (with
//! that side's `last`) and the baseline with the larger `n`. Both are prefixes of the same
//! origin's sequence, so the larger one is exactly what a replica that received both sides'
//! increments and removals holds.

use smallvec::SmallVec;

use crate::codec::{self, DecodeError, Reader};
use crate::dot::{ReplicaId, Stamp};
use crate::hlc::Hlc;
use crate::num::Dec;

/// One increment: INCR/INCRBY/DECRBY carry `Int`, INCRBYFLOAT carries `Float`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Delta {
    Int(i64),
    Float(Dec),
}

/// Running totals of one origin's increments at one key: `n` increments so far, the sum of
/// the integer ones and the sum of the float ones. Totals with a larger `n` extend those with
/// a smaller `n` from the same origin.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct IncTotals {
    pub n: u64,
    pub int: i128,
    pub float: Dec,
}

impl IncTotals {
    /// The one of `a` and `b` that extends the other (larger `n`; `a` on a tie).
    pub fn merge(a: IncTotals, b: IncTotals) -> IncTotals {
        if b.n > a.n { b } else { a }
    }
}

/// One origin's entry: its totals, the observed baseline, and the hlc of its last increment.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Entry {
    origin: ReplicaId,
    totals: IncTotals,
    baseline: IncTotals,
    /// Hlc of the last increment applied (`Hlc::ZERO` when none): duplicate filter and the
    /// stamp the type-conflict rule uses.
    last: Hlc,
}

/// Per-origin increment totals and baselines. Sorted by origin, one entry per origin.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Counter {
    entries: SmallVec<[Entry; 1]>,
}

impl Counter {
    pub fn new() -> Counter {
        Counter {
            entries: SmallVec::new(),
        }
    }

    fn entry(&mut self, origin: ReplicaId) -> Option<&mut Entry> {
        let i = match self.entries.binary_search_by_key(&origin, |e| e.origin) {
            Ok(i) => i,
            Err(i) => {
                let e = Entry {
                    origin,
                    totals: IncTotals::default(),
                    baseline: IncTotals::default(),
                    last: Hlc::ZERO,
                };
                self.entries.insert(i, e);
                i
            }
        };
        self.entries.get_mut(i)
    }

    /// Applies the increment named `stamp`. Returns false (and changes nothing) for a
    /// duplicate: origins deliver in issue order, so an hlc at or below the last one seen
    /// from that origin was applied already.
    pub fn apply_inc(&mut self, stamp: Stamp, delta: &Delta) -> bool {
        let Some(e) = self.entry(stamp.replica) else {
            return false;
        };
        if stamp.hlc <= e.last && e.last != Hlc::ZERO {
            return false;
        }
        e.last = stamp.hlc;
        e.totals.n += 1;
        match delta {
            Delta::Int(v) => e.totals.int = e.totals.int.saturating_add(i128::from(*v)),
            Delta::Float(d) => {
                e.totals.float = e.totals.float.add(*d).unwrap_or(e.totals.float);
            }
        }
        true
    }

    /// Every origin's totals, as a SET or DEL carries them.
    pub fn observed(&self) -> SmallVec<[(ReplicaId, IncTotals); 1]> {
        self.entries
            .iter()
            .map(|e| (e.origin, IncTotals::merge(e.totals, e.baseline)))
            .collect()
    }

    pub fn totals(&self) -> impl Iterator<Item = (ReplicaId, &IncTotals)> + '_ {
        self.entries.iter().map(|e| (e.origin, &e.totals))
    }

    /// Raises each origin's totals to those in `totals` where they count more increments:
    /// a site that evicted the key and holds it again (its own totals were dropped with
    /// it) continues each origin's count where the increments it had received left it, as
    /// every other site does.
    pub fn seed_totals(&mut self, totals: &[(ReplicaId, IncTotals)]) {
        for &(origin, t) in totals {
            if t.n == 0 {
                continue;
            }
            if let Some(e) = self.entry(origin) {
                e.totals = IncTotals::merge(e.totals, t);
            }
        }
    }

    /// Records `observed` as baseline: per origin, the one with the larger `n` wins.
    pub fn reset(&mut self, observed: &[(ReplicaId, IncTotals)]) {
        for &(origin, t) in observed {
            if t.n == 0 {
                continue;
            }
            if let Some(e) = self.entry(origin) {
                e.baseline = IncTotals::merge(e.baseline, t);
            }
        }
    }

    /// `Σ (totals - baseline)` over origins whose totals extend their baseline: the integer
    /// sum, the float sum, and whether the unobserved float increments add up to non-zero.
    pub fn unobserved(&self) -> (i128, Dec, bool) {
        let mut int: i128 = 0;
        let mut float = Dec::ZERO;
        let mut any_float = false;
        for e in &self.entries {
            if e.totals.n <= e.baseline.n {
                continue;
            }
            int = int.saturating_add(e.totals.int.saturating_sub(e.baseline.int));
            if e.totals.float != e.baseline.float {
                any_float = true;
                let d = e
                    .totals
                    .float
                    .add(e.baseline.float.neg())
                    .unwrap_or(Dec::ZERO);
                float = float.add(d).unwrap_or(float);
            }
        }
        (int, float, any_float)
    }

    /// True when every origin's totals are covered by its baseline: the counter adds nothing.
    pub fn is_clear(&self) -> bool {
        self.entries.iter().all(|e| e.totals.n <= e.baseline.n)
    }

    /// The stamp of the newest increment not covered by a baseline (for the type-conflict rule).
    pub fn live_stamp(&self) -> Option<Stamp> {
        self.entries
            .iter()
            .filter(|e| e.totals.n > e.baseline.n)
            .map(|e| Stamp {
                hlc: e.last,
                replica: e.origin,
            })
            .max()
    }

    /// Stamps of the last increment per origin (what a removal observes).
    pub fn last_stamps(&self) -> impl Iterator<Item = Stamp> + '_ {
        self.entries
            .iter()
            .filter(|e| e.last != Hlc::ZERO)
            .map(|e| Stamp {
                hlc: e.last,
                replica: e.origin,
            })
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Appends the complete state: the number of origins, then per origin in ascending order
    /// its id, totals, baseline and the hlc of its last increment.
    pub fn encode_state(&self, out: &mut Vec<u8>) {
        codec::put_varint(out, self.entries.len() as u64);
        for e in &self.entries {
            codec::put_u32(out, e.origin.0);
            codec::put_totals(out, &e.totals);
            codec::put_totals(out, &e.baseline);
            codec::put_u64(out, e.last.0);
        }
    }

    /// Decodes what `encode_state` wrote. Rejects origins out of order or repeated, totals
    /// or baselines with `n == 0` that are not zero, an increment hlc without increments, and
    /// entries that hold neither increments nor a baseline (no operation leaves one).
    pub fn decode_state(r: &mut Reader<'_>) -> Result<Counter, DecodeError> {
        let n = r.count("counter origins")?;
        let mut entries: SmallVec<[Entry; 1]> = SmallVec::with_capacity(codec::prealloc(n));
        for _ in 0..n {
            let origin = ReplicaId(r.u32()?);
            let totals = r.totals()?;
            let baseline = r.totals()?;
            let last = Hlc(r.u64()?);
            if entries.last().is_some_and(|p| p.origin >= origin) {
                return Err(DecodeError::Invalid("counter origins not sorted"));
            }
            let zero = IncTotals::default();
            if totals.n == 0 && (totals != zero || last != Hlc::ZERO) {
                return Err(DecodeError::Invalid("counter totals without increments"));
            }
            if baseline.n == 0 && baseline != zero {
                return Err(DecodeError::Invalid("counter baseline without increments"));
            }
            if totals.n == 0 && baseline.n == 0 {
                return Err(DecodeError::Invalid("empty counter entry"));
            }
            entries.push(Entry {
                origin,
                totals,
                baseline,
                last,
            });
        }
        Ok(Counter { entries })
    }

    /// State join: per origin, the totals with the larger `n` and that side's `last` (equal
    /// `n`: the same prefix of the origin's increments), the baseline with the larger `n`.
    /// The result is the counter of a replica that applied both sides' increments and resets.
    /// Commutative, associative and idempotent.
    pub fn merge(&mut self, other: &Counter) {
        for o in &other.entries {
            match self.entries.binary_search_by_key(&o.origin, |e| e.origin) {
                Ok(i) => {
                    if let Some(e) = self.entries.get_mut(i) {
                        let totals = join_totals(e.totals, o.totals);
                        if totals != e.totals {
                            e.totals = totals;
                            e.last = o.last;
                        } else if totals == o.totals {
                            e.last = e.last.max(o.last);
                        }
                        e.baseline = join_totals(e.baseline, o.baseline);
                    }
                }
                Err(i) => self.entries.insert(i, o.clone()),
            }
        }
    }
}

/// The totals that extend the other (larger `n`). Equal `n` means the same prefix of one
/// origin's increments, hence equal totals; should they differ anyway (corrupt input), the
/// larger sums win, so that the join stays commutative.
fn join_totals(a: IncTotals, b: IncTotals) -> IncTotals {
    let key = |t: &IncTotals| (t.n, t.int, t.float.to_parts());
    if key(&b) > key(&a) { b } else { a }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::st;

    #[test]
    fn increments_add_up_and_duplicates_are_ignored() {
        let mut c = Counter::new();
        assert!(c.apply_inc(st(1, 1), &Delta::Int(7)));
        assert!(c.apply_inc(st(1, 2), &Delta::Int(3)));
        assert!(!c.apply_inc(st(1, 1), &Delta::Int(7)));
        assert_eq!(c.unobserved(), (10, Dec::ZERO, false));
        assert!(!c.is_clear());
    }

    #[test]
    fn reset_hides_observed_increments_only() {
        let mut c = Counter::new();
        c.apply_inc(st(1, 1), &Delta::Int(7));
        let seen = c.observed();
        c.apply_inc(st(2, 2), &Delta::Float(Dec::parse(b"0.5").unwrap()));
        c.reset(&seen);
        assert_eq!(c.unobserved(), (0, Dec::parse(b"0.5").unwrap(), true));
        c.reset(&c.observed());
        assert!(c.is_clear());
        assert_eq!(c.live_stamp(), None);
    }

    /// A replica that dropped the counter (an eviction) and seeds it back with the totals
    /// it had received shows what a replica that kept it shows, after the same reset and
    /// the same later increment; without the seed the increment hides under the baseline.
    #[test]
    fn seeded_totals_continue_like_a_counter_that_was_kept() {
        let mut kept = Counter::new();
        kept.apply_inc(st(1, 1), &Delta::Int(10));
        let received: Vec<_> = kept.totals().map(|(r, t)| (r, *t)).collect();
        let seen = kept.observed();
        let mut dropped = Counter::new();
        for c in [&mut kept, &mut dropped] {
            c.reset(&seen);
        }
        let mut unseeded = dropped.clone();
        dropped.seed_totals(&received);
        for c in [&mut kept, &mut dropped, &mut unseeded] {
            c.apply_inc(st(2, 1), &Delta::Int(1));
        }
        assert_eq!(kept.unobserved().0, 1);
        assert_eq!(dropped.unobserved().0, 1);
        assert_eq!(unseeded.unobserved().0, 0);
    }

    #[test]
    fn merge_joins_prefixes_and_state_round_trips() {
        let mut a = Counter::new();
        a.apply_inc(st(1, 1), &Delta::Int(7));
        let seen = a.observed();
        let mut b = a.clone();
        a.apply_inc(st(2, 1), &Delta::Int(1));
        b.reset(&seen);
        b.apply_inc(st(3, 2), &Delta::Float(Dec::parse(b"0.5").unwrap()));
        let mut ab = a.clone();
        ab.merge(&b);
        let mut ba = b.clone();
        ba.merge(&a);
        assert_eq!(ab, ba);
        // What a replica applying everything holds.
        let mut all = Counter::new();
        all.apply_inc(st(1, 1), &Delta::Int(7));
        all.reset(&seen);
        all.apply_inc(st(2, 1), &Delta::Int(1));
        all.apply_inc(st(3, 2), &Delta::Float(Dec::parse(b"0.5").unwrap()));
        assert_eq!(ab, all);
        let mut again = ab.clone();
        again.merge(&ab);
        assert_eq!(again, ab);
        let mut out = Vec::new();
        ab.encode_state(&mut out);
        let mut r = Reader::new(&out);
        assert_eq!(Counter::decode_state(&mut r).unwrap(), ab);
        assert!(r.is_at_end());
        for cut in 0..out.len() {
            assert!(Counter::decode_state(&mut Reader::new(&out[..cut])).is_err());
        }
    }

    #[test]
    fn baseline_before_increments_arrive() {
        let mut c = Counter::new();
        c.reset(&[(
            ReplicaId(1),
            IncTotals {
                n: 2,
                int: 5,
                float: Dec::ZERO,
            },
        )]);
        c.apply_inc(st(1, 1), &Delta::Int(2));
        c.apply_inc(st(2, 1), &Delta::Int(3));
        assert!(c.is_clear());
        c.apply_inc(st(3, 1), &Delta::Int(4));
        assert_eq!(c.unobserved().0, 4);
        assert_eq!(c.live_stamp(), Some(st(3, 1)));
    }
}

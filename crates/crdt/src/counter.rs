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
//!
//! # Runs: a cleared counter is collected
//! An origin's increments at a key form *runs*, each named by the hlc of its first increment
//! (`IncTotals::run`; `Hlc::ZERO` is the run of counters written before runs existed), and
//! totals are ordered by run, then `n`. An increment carries its origin's totals after it
//! (`IncAt::After`), or starts a run (`IncAt::Starts`, when its origin holds no totals of
//! its own at the key). So a cleared entry (totals equal to the baseline) can be dropped once
//! its increments and removals are delivered everywhere (`Counter::drop_settled`): a later
//! increment of the same run finds no totals below its own and records the totals before it
//! as the baseline (the increments before it were all removed where the entry was dropped),
//! and a later run outranks the dropped one at every site. Without runs, a dropped entry
//! would have restarted its origin's count where other sites still held the old one.

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

/// Running totals of one origin's increments at one key within one run: the run (the hlc
/// of its first increment; `Hlc::ZERO` for the run of counters written before runs
/// existed), `n` increments so far, the sum of the integer ones and the sum of the float
/// ones. Totals of a later run, or of the same run with a larger `n`, extend the others.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub struct IncTotals {
    pub run: Hlc,
    pub n: u64,
    pub int: i128,
    pub float: Dec,
}

impl IncTotals {
    /// The one of `a` and `b` that extends the other (later run, then larger `n`; `a` on a
    /// tie).
    pub fn merge(a: IncTotals, b: IncTotals) -> IncTotals {
        if b.pos() > a.pos() { b } else { a }
    }

    /// Where these totals stand in their origin's increments: run, then count.
    pub fn pos(&self) -> (Hlc, u64) {
        (self.run, self.n)
    }

    /// Whether these totals count every increment `other` counts (the same or a later
    /// position).
    pub fn covers(&self, other: &IncTotals) -> bool {
        self.pos() >= other.pos()
    }

    /// These totals with one more increment of `delta`.
    pub fn plus(self, delta: &Delta) -> IncTotals {
        let mut t = self;
        t.n += 1;
        match delta {
            Delta::Int(v) => t.int = t.int.saturating_add(i128::from(*v)),
            Delta::Float(d) => t.float = t.float.add(*d).unwrap_or(t.float),
        }
        t
    }

    /// The totals before the increment of `delta` that ended at these (`None` when the
    /// float sum cannot be taken back exactly).
    fn minus(self, delta: &Delta) -> Option<IncTotals> {
        let mut t = self;
        t.n = t.n.checked_sub(1)?;
        match delta {
            Delta::Int(v) => t.int = t.int.checked_sub(i128::from(*v))?,
            Delta::Float(d) => t.float = t.float.add(d.neg())?,
        }
        Some(t)
    }
}

/// Where an increment stands among its origin's increments at the key, as it travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IncAt {
    /// Read from an op of the format before runs: it extends whatever totals the receiver
    /// holds for its origin.
    Unknown,
    /// The first increment of a run, named by the increment's own hlc: its origin held no
    /// totals of its own at the key.
    Starts,
    /// Its origin's totals after it.
    After(IncTotals),
}

impl IncAt {
    /// The totals of its origin after the increment of `delta` named `stamp` stands here;
    /// `None` for `Unknown` (it extends whatever totals the receiver holds).
    pub fn totals(&self, stamp: Stamp, delta: &Delta) -> Option<IncTotals> {
        match self {
            IncAt::Unknown => None,
            IncAt::Starts => Some(
                IncTotals {
                    run: stamp.hlc,
                    ..IncTotals::default()
                }
                .plus(delta),
            ),
            IncAt::After(a) => Some(*a),
        }
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

impl Entry {
    /// Whether its totals count increments its baseline does not remove: a later run than
    /// the baseline's, or more of the same run.
    fn adds(&self) -> bool {
        self.totals.n > 0
            && (self.totals.run > self.baseline.run
                || (self.totals.run == self.baseline.run && self.totals.n > self.baseline.n))
    }
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

    /// Where an increment of `delta` issued here by `origin` stands: after its totals when it
    /// holds some, otherwise the start of a run.
    pub fn next_at(&self, origin: ReplicaId, delta: &Delta) -> IncAt {
        match self.entries.binary_search_by_key(&origin, |e| e.origin) {
            Ok(i) => match self.entries.get(i) {
                Some(e) if e.totals.n > 0 => IncAt::After(e.totals.plus(delta)),
                _ => IncAt::Starts,
            },
            Err(_) => IncAt::Starts,
        }
    }

    /// Applies the increment named `stamp`. Returns false (and changes nothing) for a
    /// duplicate or an increment of a run this counter holds a later position of: origins
    /// deliver in issue order, so such an increment was applied already (or was removed and
    /// dropped with a run its origin ended).
    ///
    /// An increment whose totals before it are beyond those held here (none held: the entry
    /// was dropped once cleared and settled, `drop_settled`) records those totals as the
    /// baseline: the increments before it were all removed here.
    pub fn apply_inc(&mut self, stamp: Stamp, delta: &Delta, at: &IncAt) -> bool {
        let after = at.totals(stamp, delta);
        let Some(e) = self.entry(stamp.replica) else {
            return false;
        };
        let Some(after) = after else {
            // The format before runs: the next of whatever this entry counts.
            if stamp.hlc <= e.last && e.last != Hlc::ZERO {
                return false;
            }
            e.last = stamp.hlc;
            e.totals = e.totals.plus(delta);
            return true;
        };
        if e.totals.n > 0 && e.totals.covers(&after) {
            return false;
        }
        if (after.run, after.n.saturating_sub(1)) > e.totals.pos() {
            // A gap: the totals before this increment are beyond those held.
            let before = after.minus(delta).unwrap_or(after);
            // (A float sum that cannot be taken back exactly, past `Dec`'s range: the
            // increment counts as removed here, as wherever the gap is.)
            e.baseline = IncTotals::merge(e.baseline, before);
        }
        e.last = stamp.hlc;
        e.totals = after;
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
            if !e.adds() {
                continue;
            }
            // A baseline of an earlier run removes nothing of this one.
            let base = if e.baseline.run == e.totals.run {
                e.baseline
            } else {
                IncTotals::default()
            };
            int = int.saturating_add(e.totals.int.saturating_sub(base.int));
            if e.totals.float != base.float {
                any_float = true;
                let d = e.totals.float.add(base.float.neg()).unwrap_or(Dec::ZERO);
                float = float.add(d).unwrap_or(float);
            }
        }
        (int, float, any_float)
    }

    /// True when every origin's totals are covered by its baseline: the counter adds nothing.
    pub fn is_clear(&self) -> bool {
        self.entries.iter().all(|e| !e.adds())
    }

    /// Drops the entries whose totals equal their baseline (cleared, nothing removed ahead
    /// of the increments held) and whose last increment `everywhere` covers. The caller
    /// makes sure every removal of the key is delivered everywhere too (no removal context
    /// held): then no site can bring the dropped increments back, a later increment of the
    /// run finds its totals before it beyond what is held (`apply_inc` records them as the
    /// baseline), and an increment its origin issues once it dropped its own entry starts a
    /// later run. Returns whether anything was dropped.
    pub fn drop_settled(&mut self, everywhere: &crate::dot::VersionVector) -> bool {
        let before = self.entries.len();
        self.entries.retain(|e| {
            let settled = e.totals == e.baseline
                && (e.last == Hlc::ZERO
                    || everywhere.covers(Stamp {
                        hlc: e.last,
                        replica: e.origin,
                    }));
            !settled
        });
        self.entries.len() != before
    }

    /// The stamp of the newest increment not covered by a baseline (for the type-conflict rule).
    pub fn live_stamp(&self) -> Option<Stamp> {
        self.entries
            .iter()
            .filter(|e| e.adds())
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
            // A baseline of no increment of a run: the start of a run this site holds since
            // it dropped the entry before it (`apply_inc`).
            if baseline.n == 0 && (baseline.int != 0 || baseline.float != Dec::ZERO) {
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
    let key = |t: &IncTotals| (t.run, t.n, t.int, t.float.to_parts());
    if key(&b) > key(&a) { b } else { a }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::{VersionVector, st};

    /// Totals of integer increments only.
    fn int_totals(run: u64, n: u64, int: i128) -> IncTotals {
        IncTotals {
            run: Hlc(run),
            n,
            int,
            float: Dec::ZERO,
        }
    }

    /// An increment issued by the counter's own copy of `s.replica` (where it stands
    /// computed there, as the server does) and applied there.
    fn inc(c: &mut Counter, s: Stamp, d: Delta) -> bool {
        let at = c.next_at(s.replica, &d);
        c.apply_inc(s, &d, &at)
    }

    #[test]
    fn increments_add_up_and_duplicates_are_ignored() {
        let mut c = Counter::new();
        assert!(inc(&mut c, st(1, 1), Delta::Int(7)));
        assert!(inc(&mut c, st(1, 2), Delta::Int(3)));
        let again = IncAt::After(int_totals(1, 1, 7));
        assert!(!c.apply_inc(st(1, 1), &Delta::Int(7), &again));
        assert!(!c.apply_inc(st(1, 1), &Delta::Int(7), &IncAt::Starts));
        assert_eq!(c.unobserved(), (10, Dec::ZERO, false));
        assert!(!c.is_clear());
    }

    #[test]
    fn reset_hides_observed_increments_only() {
        let mut c = Counter::new();
        inc(&mut c, st(1, 1), Delta::Int(7));
        let seen = c.observed();
        inc(&mut c, st(2, 2), Delta::Float(Dec::parse(b"0.5").unwrap()));
        c.reset(&seen);
        assert_eq!(c.unobserved(), (0, Dec::parse(b"0.5").unwrap(), true));
        c.reset(&c.observed());
        assert!(c.is_clear());
        assert_eq!(c.live_stamp(), None);
    }

    /// A replica that dropped the counter (an eviction) and seeds it back with the totals
    /// it had received shows what a replica that kept it shows, after the same reset and
    /// the same later increment; without the seed too, as the increment carries the totals
    /// before it.
    #[test]
    fn seeded_totals_continue_like_a_counter_that_was_kept() {
        let mut kept = Counter::new();
        inc(&mut kept, st(1, 1), Delta::Int(10));
        let received: Vec<_> = kept.totals().map(|(r, t)| (r, *t)).collect();
        let seen = kept.observed();
        let mut dropped = Counter::new();
        for c in [&mut kept, &mut dropped] {
            c.reset(&seen);
        }
        let mut unseeded = dropped.clone();
        dropped.seed_totals(&received);
        let at = kept.next_at(ReplicaId(1), &Delta::Int(1));
        for c in [&mut kept, &mut dropped, &mut unseeded] {
            c.apply_inc(st(2, 1), &Delta::Int(1), &at);
        }
        assert_eq!(kept.unobserved().0, 1);
        assert_eq!(dropped.unobserved().0, 1);
        assert_eq!(unseeded.unobserved().0, 1);
    }

    #[test]
    fn merge_joins_prefixes_and_state_round_trips() {
        let mut a = Counter::new();
        inc(&mut a, st(1, 1), Delta::Int(7));
        let seen = a.observed();
        let mut b = a.clone();
        inc(&mut a, st(2, 1), Delta::Int(1));
        b.reset(&seen);
        inc(&mut b, st(3, 2), Delta::Float(Dec::parse(b"0.5").unwrap()));
        let mut ab = a.clone();
        ab.merge(&b);
        let mut ba = b.clone();
        ba.merge(&a);
        assert_eq!(ab, ba);
        // What a replica applying everything holds.
        let mut all = Counter::new();
        inc(&mut all, st(1, 1), Delta::Int(7));
        all.reset(&seen);
        inc(&mut all, st(2, 1), Delta::Int(1));
        inc(
            &mut all,
            st(3, 2),
            Delta::Float(Dec::parse(b"0.5").unwrap()),
        );
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

    /// A cleared entry dropped at one site and kept at another: a later increment of the
    /// same run counts alike at both (the dropping site takes the totals before it as its
    /// baseline), and once the origin dropped its own entry, its next increment starts a
    /// run that outranks the old one everywhere. States then join alike and round-trip.
    #[test]
    fn a_settled_entry_is_dropped_and_later_increments_count_alike_everywhere() {
        let mut everywhere = VersionVector::new();
        let mut origin = Counter::new();
        assert!(inc(&mut origin, st(1, 1), Delta::Int(5)));
        let mut other = origin.clone();
        let seen = origin.observed();
        for c in [&mut origin, &mut other] {
            c.reset(&seen);
            assert!(c.is_clear());
        }
        // Not settled until its last increment is everywhere.
        assert!(!other.drop_settled(&everywhere));
        everywhere.observe(st(1, 1));
        assert!(other.drop_settled(&everywhere));
        assert!(other.is_empty());
        // The origin kept its entry: the same run goes on.
        let at = origin.next_at(ReplicaId(1), &Delta::Int(3));
        assert_eq!(at, IncAt::After(int_totals(1, 2, 8)));
        for c in [&mut origin, &mut other] {
            assert!(c.apply_inc(st(2, 1), &Delta::Int(3), &at));
            assert_eq!(c.unobserved().0, 3);
        }
        assert_eq!(origin, other);
        // Cleared again, and dropped at the origin this time.
        let seen = origin.observed();
        for c in [&mut origin, &mut other] {
            c.reset(&seen);
        }
        everywhere.observe(st(2, 1));
        assert!(origin.drop_settled(&everywhere));
        let at = origin.next_at(ReplicaId(1), &Delta::Int(4));
        assert_eq!(at, IncAt::Starts);
        for c in [&mut origin, &mut other] {
            assert!(c.apply_inc(st(3, 1), &Delta::Int(4), &at));
            assert_eq!(c.unobserved().0, 4);
            assert_eq!(c.live_stamp(), Some(st(3, 1)));
            // A late increment of the old run changes nothing.
            let old = IncAt::After(int_totals(1, 3, 9));
            assert!(!c.apply_inc(st(2, 1), &Delta::Int(1), &old));
        }
        // The kept entry's old baseline stays below the new run's start.
        let mut joined = other.clone();
        joined.merge(&origin);
        assert_eq!(joined.unobserved().0, 4);
        let mut out = Vec::new();
        joined.encode_state(&mut out);
        let back = Counter::decode_state(&mut Reader::new(&out)).unwrap();
        assert_eq!(back, joined);
        // An increment of the format before runs extends what is held.
        assert!(joined.apply_inc(st(4, 1), &Delta::Int(1), &IncAt::Unknown));
        assert_eq!(joined.unobserved().0, 5);
    }

    #[test]
    fn baseline_before_increments_arrive() {
        let mut c = Counter::new();
        c.reset(&[(ReplicaId(1), int_totals(1, 2, 5))]);
        inc(&mut c, st(1, 1), Delta::Int(2));
        inc(&mut c, st(2, 1), Delta::Int(3));
        assert!(c.is_clear());
        inc(&mut c, st(3, 1), Delta::Int(4));
        assert_eq!(c.unobserved().0, 4);
        assert_eq!(c.live_stamp(), Some(st(3, 1)));
    }
}

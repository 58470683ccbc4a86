//! The string value: a register of the assigned bytes plus a counter of increments.
//!
//! SET, APPEND, SETRANGE, GETSET... assign bytes (LWW on `Stamp` among concurrent writes) and
//! reset the increments they observed; INCR, INCRBY, DECRBY, INCRBYFLOAT add to the counter.
//! The value shown is the assigned bytes plus the increments no assignment observed:
//! - no unobserved increment: the bytes (Redis's value exactly);
//! - base (the bytes, or 0 when nothing is assigned) is a number: `base + increments`, an
//!   integer when base and every unobserved increment are integers, saturating at the `i64`
//!   bounds, else a `Dec`;
//! - base is not a number (SET "abc" ∥ INCR): the increments are ignored and the bytes shown.
//!
//! The string keeps no removal context (`KeyState` does): its state join `merge` is the union
//! of the assigned writes plus the join of the counters, and the caller removes the writes
//! either side's removal contexts cover.

use crate::bytes::SmallBytes;
use crate::codec::{self, DecodeError, Reader};
use crate::counter::{Counter, Delta, IncTotals};
use crate::dot::{ReplicaId, Stamp, VersionVector};
use crate::num::Dec;

/// A string key's value: a multi-value register of assigned bytes (the write with the highest
/// stamp inline, concurrent ones boxed) and a counter (boxed).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct StrCrdt {
    /// The assigned write with the highest stamp; `None` when nothing is assigned.
    head: Option<(Stamp, SmallBytes)>,
    rare: Option<Box<StrRare>>,
}

/// The rare parts of a string: concurrent assigned writes and the counter.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct StrRare {
    // Invariant: sorted by stamp, every stamp below head's; empty when head is None.
    others: Vec<(Stamp, SmallBytes)>,
    counter: Option<Counter>,
}

/// Size of `StrCrdt`: one inline write (16-byte stamp, 24-byte bytes) plus one pointer.
pub const STR_CRDT_BYTES_MAX: usize = 48;
const _: () = assert!(std::mem::size_of::<StrCrdt>() <= STR_CRDT_BYTES_MAX);

/// What a string key shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StrView<'a> {
    Bytes(&'a [u8]),
    Int(i64),
    Float(Dec),
}

impl StrView<'_> {
    /// The bytes a GET returns (`Float` printed the way Redis prints INCRBYFLOAT results).
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            StrView::Bytes(b) => b.to_vec(),
            StrView::Int(v) => v.to_string().into_bytes(),
            StrView::Float(d) => d.format_redis().into_bytes(),
        }
    }
}

/// Redis `string2ll`: optional `-`, no leading zeros (except "0"), no `+`, no spaces, fits i64.
pub fn parse_i64_redis(s: &[u8]) -> Option<i64> {
    if s == b"0" {
        return Some(0);
    }
    let (negative, digits) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: i128 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v * 10 + i128::from(c - b'0');
        if v > i128::from(i64::MAX) + 1 {
            return None;
        }
    }
    i64::try_from(if negative { -v } else { v }).ok()
}

impl StrCrdt {
    pub fn new() -> StrCrdt {
        StrCrdt::default()
    }

    fn counter_ref(&self) -> Option<&Counter> {
        self.rare.as_ref().and_then(|r| r.counter.as_ref())
    }

    fn counter_mut(&mut self) -> &mut Counter {
        self.rare
            .get_or_insert_with(Box::default)
            .counter
            .get_or_insert_with(Counter::new)
    }

    /// Drops the boxed part when it holds nothing.
    fn tidy(&mut self) {
        if self
            .rare
            .as_ref()
            .is_some_and(|r| r.others.is_empty() && r.counter.is_none())
        {
            self.rare = None;
        }
    }

    /// The value shown; `None` when nothing is assigned and no increment is unobserved.
    pub fn view(&self) -> Option<StrView<'_>> {
        let bytes = self.head.as_ref().map(|(_, b)| b.as_slice());
        let counter = match self.counter_ref() {
            Some(c) if !c.is_clear() => c,
            _ => return bytes.map(StrView::Bytes),
        };
        let (int, float, any_float) = counter.unobserved();
        let base_int = match bytes {
            None => Some(0),
            Some(b) => parse_i64_redis(b),
        };
        if let (Some(base), false) = (base_int, any_float) {
            let sum = i128::from(base).saturating_add(int);
            let clamped = sum.clamp(i128::from(i64::MIN), i128::from(i64::MAX));
            return Some(StrView::Int(i64::try_from(clamped).unwrap_or(i64::MAX)));
        }
        let base = match (base_int, bytes) {
            (Some(v), _) => Dec::from_i64(v),
            (None, Some(b)) => match Dec::parse(b) {
                Some(d) => d,
                None => return Some(StrView::Bytes(b)),
            },
            (None, None) => Dec::ZERO,
        };
        let total = base.add(Dec::from_i128(int)).and_then(|d| d.add(float));
        match (total, bytes) {
            (Some(d), _) => Some(StrView::Float(d)),
            (None, Some(b)) => Some(StrView::Bytes(b)),
            (None, None) => Some(StrView::Float(Dec::ZERO)),
        }
    }

    /// Removes the assigned writes covered by `stamps` and resets the increments in `incs`.
    pub fn remove(&mut self, stamps: &VersionVector, incs: &[(ReplicaId, IncTotals)]) {
        if let Some(r) = &mut self.rare {
            r.others.retain(|w| !stamps.covers(w.0));
        }
        if self.head.as_ref().is_some_and(|w| stamps.covers(w.0)) {
            self.head = self.rare.as_mut().and_then(|r| r.others.pop());
        }
        if !incs.is_empty() {
            self.counter_mut().reset(incs);
        }
        self.tidy();
    }

    /// Adds the assigned write `stamp` (the caller has applied the write's removals).
    /// Returns false when a write with that stamp is held already.
    pub fn assign(&mut self, stamp: Stamp, value: &[u8]) -> bool {
        if self.writes().any(|(s, _)| *s == stamp) {
            return false;
        }
        let new = (stamp, SmallBytes::copy_from(value));
        let below = match self.head.take() {
            None => {
                self.head = Some(new);
                return true;
            }
            Some(head) if head.0 < stamp => {
                self.head = Some(new);
                head
            }
            Some(head) => {
                self.head = Some(head);
                new
            }
        };
        let others = &mut self.rare.get_or_insert_with(Box::default).others;
        let i = others.partition_point(|w| w.0 < below.0);
        others.insert(i, below);
        true
    }

    /// Applies one increment; false for a duplicate.
    pub fn incr(&mut self, stamp: Stamp, delta: &Delta) -> bool {
        self.counter_mut().apply_inc(stamp, delta)
    }

    /// The assigned writes held: the shown one first, then concurrent ones.
    pub fn writes(&self) -> impl Iterator<Item = (&Stamp, &[u8])> + '_ {
        let others = self.rare.iter().flat_map(|r| r.others.iter().rev());
        self.head
            .iter()
            .chain(others)
            .map(|(s, b)| (s, b.as_slice()))
    }

    pub fn counter(&self) -> Option<&Counter> {
        self.counter_ref()
    }

    /// Whether the value shows anything.
    pub fn is_live(&self) -> bool {
        self.head.is_some() || self.counter_ref().is_some_and(|c| !c.is_clear())
    }

    /// The highest stamp among assigned writes and unobserved increments.
    pub fn live_stamp(&self) -> Option<Stamp> {
        let r = self.head.as_ref().map(|(s, _)| *s);
        let c = self.counter_ref().and_then(|c| c.live_stamp());
        r.max(c)
    }

    /// Adds the stamps held (writes, last increment per origin) to `vv`.
    pub fn observe_into(&self, vv: &mut VersionVector) {
        for (s, _) in self.writes() {
            vv.observe(*s);
        }
        if let Some(c) = self.counter_ref() {
            for s in c.last_stamps() {
                vv.observe(s);
            }
        }
    }

    /// Whether a cleared counter (pure metadata) is held.
    pub fn has_metadata(&self) -> bool {
        self.counter_ref().is_some_and(|c| c.is_clear())
    }

    /// State join: the union of the assigned writes (one per stamp) and the join of the
    /// counters (`Counter::merge`). A write held on one side only may have been removed on the
    /// other: the caller then applies `remove` with each side's removal contexts (as
    /// `KeyState::merge` does). Commutative, associative, idempotent.
    pub fn merge(&mut self, other: &StrCrdt) {
        let mut all: Vec<(Stamp, SmallBytes)> = Vec::new();
        let mine = self.head.take().into_iter().chain(
            self.rare
                .as_mut()
                .map(|r| std::mem::take(&mut r.others))
                .unwrap_or_default(),
        );
        all.extend(mine);
        for (s, b) in other.writes() {
            all.push((*s, SmallBytes::copy_from(b)));
        }
        // Sorted by stamp; a stamp held on both sides names the same write: keep one.
        all.sort_by_key(|w| w.0);
        all.dedup_by_key(|w| w.0);
        self.head = all.pop();
        if !all.is_empty() {
            self.rare.get_or_insert_with(Box::default).others = all;
        }
        if let Some(c) = other.counter_ref() {
            match self.rare.as_mut().and_then(|r| r.counter.as_mut()) {
                Some(mine) => mine.merge(c),
                None => self.rare.get_or_insert_with(Box::default).counter = Some(c.clone()),
            }
        }
        self.tidy();
    }

    /// Keeps the assigned writes whose stamp `keep` accepts (the state join with a floor drops
    /// those the other side had delivered and no longer holds).
    pub(crate) fn retain_writes(&mut self, keep: impl Fn(Stamp) -> bool) {
        if let Some(r) = &mut self.rare {
            r.others.retain(|w| keep(w.0));
        }
        if self.head.as_ref().is_some_and(|w| !keep(w.0)) {
            self.head = self.rare.as_mut().and_then(|r| r.others.pop());
        }
        self.tidy();
    }

    /// Appends the complete state: the shown write (flag, stamp, bytes), the concurrent
    /// writes in stamp order, and the counter (flag, `Counter::encode_state`), cleared
    /// counters included.
    pub fn encode_state(&self, out: &mut Vec<u8>) {
        match &self.head {
            None => codec::put_u8(out, 0),
            Some((s, b)) => {
                codec::put_u8(out, 1);
                codec::put_stamp(out, *s);
                codec::put_bytes(out, b.as_slice());
            }
        }
        let others = self.rare.as_ref().map_or(&[][..], |r| r.others.as_slice());
        codec::put_varint(out, others.len() as u64);
        for (s, b) in others {
            codec::put_stamp(out, *s);
            codec::put_bytes(out, b.as_slice());
        }
        match self.counter_ref() {
            None => codec::put_u8(out, 0),
            Some(c) => {
                codec::put_u8(out, 1);
                c.encode_state(out);
            }
        }
    }

    /// Decodes what `encode_state` wrote. Concurrent writes out of stamp order, repeated, at
    /// or above the shown write, or present without a shown write are `Invalid`.
    pub fn decode_state(r: &mut Reader<'_>) -> Result<StrCrdt, DecodeError> {
        let head = if r.bool()? {
            let s = r.stamp()?;
            Some((s, SmallBytes::copy_from(r.bytes()?)))
        } else {
            None
        };
        let n = r.count("string writes")?;
        let mut others: Vec<(Stamp, SmallBytes)> = Vec::with_capacity(codec::prealloc(n));
        for _ in 0..n {
            let s = r.stamp()?;
            let b = SmallBytes::copy_from(r.bytes()?);
            if others.last().is_some_and(|w| w.0 >= s) {
                return Err(DecodeError::Invalid("string writes not sorted"));
            }
            others.push((s, b));
        }
        match (&head, others.last()) {
            (None, Some(_)) => return Err(DecodeError::Invalid("string writes without head")),
            (Some(h), Some(o)) if o.0 >= h.0 => {
                return Err(DecodeError::Invalid("string write above the shown one"));
            }
            _ => {}
        }
        let counter = if r.bool()? {
            Some(Counter::decode_state(r)?)
        } else {
            None
        };
        let mut s = StrCrdt { head, rare: None };
        if !others.is_empty() || counter.is_some() {
            s.rare = Some(Box::new(StrRare { others, counter }));
        }
        Ok(s)
    }

    /// Drops a cleared counter (only safe when no replica can still send increments or
    /// removals referring to its totals: no peers).
    pub fn collect_all(&mut self) {
        if let Some(r) = &mut self.rare {
            if r.counter.as_ref().is_some_and(|c| c.is_clear()) {
                r.counter = None;
            }
        }
        self.tidy();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hlc::Hlc;

    fn st(h: u64, r: u32) -> Stamp {
        Stamp {
            hlc: Hlc(h),
            replica: ReplicaId(r),
        }
    }

    #[test]
    fn parses_integers_like_string2ll() {
        assert_eq!(parse_i64_redis(b"0"), Some(0));
        assert_eq!(parse_i64_redis(b"-12"), Some(-12));
        assert_eq!(parse_i64_redis(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64_redis(b"-9223372036854775808"), Some(i64::MIN));
        for s in [
            "",
            "-",
            "-0",
            "01",
            "+1",
            " 1",
            "1 ",
            "9223372036854775808",
            "1.0",
            "1e3",
        ] {
            assert_eq!(parse_i64_redis(s.as_bytes()), None, "{s:?}");
        }
    }

    #[test]
    fn set_then_incr_shows_an_integer() {
        let mut s = StrCrdt::new();
        s.assign(st(1, 1), b"10");
        assert_eq!(s.view(), Some(StrView::Bytes(b"10")));
        s.incr(st(2, 1), &Delta::Int(1));
        assert_eq!(s.view(), Some(StrView::Int(11)));
    }

    #[test]
    fn float_increments_and_non_numeric_base() {
        let mut s = StrCrdt::new();
        s.incr(st(1, 1), &Delta::Float(Dec::parse(b"10.5").unwrap()));
        s.incr(st(2, 1), &Delta::Float(Dec::parse(b"0.1").unwrap()));
        assert_eq!(s.view().unwrap().to_bytes(), b"10.6");
        s.assign(st(3, 2), b"abc");
        assert_eq!(s.view(), Some(StrView::Bytes(b"abc")));
        let mut t = StrCrdt::new();
        t.assign(st(1, 1), b"1.5");
        t.incr(st(2, 2), &Delta::Int(1));
        assert_eq!(t.view().unwrap().to_bytes(), b"2.5");
    }

    #[test]
    fn concurrent_writes_show_the_highest_and_removal_promotes_the_next() {
        let mut s = StrCrdt::new();
        assert!(s.assign(st(2, 1), b"b"));
        assert!(s.assign(st(3, 2), b"c"));
        assert!(s.assign(st(1, 3), b"a"));
        assert!(!s.assign(st(1, 3), b"a"));
        assert_eq!(s.view(), Some(StrView::Bytes(b"c")));
        assert_eq!(s.writes().count(), 3);
        let mut seen = VersionVector::new();
        seen.observe(st(3, 2));
        s.remove(&seen, &[]);
        assert_eq!(s.view(), Some(StrView::Bytes(b"b")));
        seen.observe(st(2, 1));
        seen.observe(st(1, 3));
        s.remove(&seen, &[]);
        assert_eq!(s.view(), None);
        assert_eq!(s, StrCrdt::new());
    }

    #[test]
    fn merge_unions_writes_and_joins_counters() {
        let mut a = StrCrdt::new();
        a.assign(st(2, 1), b"b");
        a.incr(st(3, 1), &Delta::Int(1));
        let mut b = StrCrdt::new();
        b.assign(st(1, 3), b"a");
        b.assign(st(2, 1), b"b");
        b.incr(st(4, 2), &Delta::Int(5));
        let mut ab = a.clone();
        ab.merge(&b);
        let mut ba = b.clone();
        ba.merge(&a);
        assert_eq!(ab, ba);
        assert_eq!(ab.writes().count(), 2);
        let mut again = ab.clone();
        again.merge(&b);
        assert_eq!(again, ab);
        let mut out = Vec::new();
        ab.encode_state(&mut out);
        let mut r = Reader::new(&out);
        let back = StrCrdt::decode_state(&mut r).unwrap();
        assert!(r.is_at_end());
        assert_eq!(back, ab);
        let mut out2 = Vec::new();
        back.encode_state(&mut out2);
        assert_eq!(out, out2);
    }

    #[test]
    fn integer_overflow_saturates() {
        let mut s = StrCrdt::new();
        s.assign(st(1, 1), b"9223372036854775800");
        s.incr(st(2, 2), &Delta::Int(100));
        assert_eq!(s.view(), Some(StrView::Int(i64::MAX)));
    }
}

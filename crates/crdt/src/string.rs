//! The string value: a register of the assigned bytes, edits of those bytes, and a counter of
//! increments.
//!
//! SET, GETSET... assign bytes (LWW on `Stamp` among concurrent writes) and remove the edits
//! and reset the increments they observed; APPEND, SETRANGE, SETBIT and BITFIELD SET edit the
//! bytes (`StrEdit`: only what changed); INCR, INCRBY, DECRBY, INCRBYFLOAT add to the counter.
//!
//! Edits (docs/conflicts.md §1.1): the bytes shown are the assigned write with the highest
//! stamp (the head; empty when none) with every held edit of a higher stamp applied in stamp
//! order, as if all these writes had run on one server in stamp order. Concurrent APPENDs
//! both survive (in stamp order), concurrent SETBITs of different bits both survive, and a
//! SET concurrent with an edit wins if its stamp is higher and is edited if lower. An edit
//! with a stamp below the head stays held (hidden) until a removal covers it: if the head is
//! removed by a write that had not seen the edit, the edit shows on the next head again, at
//! every replica alike. Edits live in the boxed rare part, with the bytes they produce
//! (`shown`); `collect` folds the causally stable ones into the head's bytes, keeping only
//! their stamps (`folded`), and with no peers `collect_all` keeps just the bytes (once the
//! edits held are many for the head's length: so APPENDs grow a string in amortised O(1)).
//!
//! The value shown is the bytes (head and edits) plus the increments no assignment observed:
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
use crate::counter::{Counter, Delta, IncAt, IncTotals};
use crate::dot::{ReplicaId, Stamp, VersionVector};
use crate::num::Dec;

/// An edit of a string's bytes that carries only what changed. Applied to the bytes shown at
/// its stamp's place among the key's writes (module doc).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum StrEdit<B> {
    /// APPEND: `bytes` added at the end.
    Append(B),
    /// SETRANGE: `bytes` written from byte `offset`, zero bytes padding the string first.
    SetRange { offset: u64, bytes: B },
    /// SETBIT (`width` 1), BITFIELD SET and INCRBY: the `width` low bits of `value` written
    /// from bit `offset` (bit 0 is the most significant bit of byte 0, as Redis numbers
    /// them), zero bytes padding the string first.
    SetBits { offset: u64, width: u8, value: u64 },
    /// BITFIELD INCRBY: adds `incr` to the `width`-bit field at bit `offset` (signed or
    /// unsigned), with Redis's overflow rule; under `Fail` an overflowing sum leaves the field
    /// as it is. Applied in stamp order, concurrent increments of one field both count.
    IncrBits {
        offset: u64,
        width: u8,
        signed: bool,
        incr: i64,
        overflow: BitOverflow,
    },
}

/// BITFIELD's OVERFLOW rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BitOverflow {
    Wrap,
    Sat,
    Fail,
}

/// Redis's `checkUnsignedBitfieldOverflow`: 0 when `value + incr` fits `bits` bits, else
/// ±1 (the direction) with the wrapped or saturated result (`Fail` gives the saturated one).
pub fn unsigned_overflow(value: u64, incr: i64, bits: u32, ow: BitOverflow) -> (i32, u64) {
    let max = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let maxincr = max.wrapping_sub(value) as i64;
    let minincr = value.wrapping_neg() as i64;
    let wrap = || value.wrapping_add(incr as u64) & !(u64::MAX.checked_shl(bits).unwrap_or(0));
    if value > max || (incr > 0 && incr > maxincr) {
        return (1, if ow == BitOverflow::Wrap { wrap() } else { max });
    }
    if incr < 0 && incr < minincr {
        return (-1, if ow == BitOverflow::Wrap { wrap() } else { 0 });
    }
    (0, value)
}

/// Redis's `checkSignedBitfieldOverflow` (`bits` in 1..=64).
pub fn signed_overflow(value: i64, incr: i64, bits: u32, ow: BitOverflow) -> (i32, i64) {
    let bits = bits.clamp(1, 64);
    let max: i64 = if bits == 64 {
        i64::MAX
    } else {
        (1i64 << (bits - 1)) - 1
    };
    let min = -max - 1;
    let maxincr = (max as u64).wrapping_sub(value as u64) as i64;
    let minincr = min.wrapping_sub(value);
    let wrap = || {
        let msb = 1u64 << (bits - 1);
        let mut c = (value as u64).wrapping_add(incr as u64);
        if bits < 64 {
            let mask = u64::MAX << bits;
            if c & msb != 0 {
                c |= mask;
            } else {
                c &= !mask;
            }
        }
        c as i64
    };
    if value > max || (bits != 64 && incr > maxincr) || (value >= 0 && incr > 0 && incr > maxincr) {
        return (1, if ow == BitOverflow::Wrap { wrap() } else { max });
    }
    if value < min || (bits != 64 && incr < minincr) || (value < 0 && incr < 0 && incr < minincr) {
        return (-1, if ow == BitOverflow::Wrap { wrap() } else { min });
    }
    (0, value)
}

/// BITFIELD INCRBY of a field holding `old` (its `width` bits, unsigned): the new bits, or
/// `None` when the sum overflows under `Fail`.
pub fn bitfield_incr(
    old: u64,
    width: u32,
    signed: bool,
    incr: i64,
    overflow: BitOverflow,
) -> Option<u64> {
    let mask = u64::MAX
        .checked_shr(64 - width.clamp(1, 64))
        .unwrap_or(u64::MAX);
    if signed {
        let old = sign_extend(old, width);
        let (over, wrapped) = signed_overflow(old, incr, width, overflow);
        if over != 0 && overflow == BitOverflow::Fail {
            return None;
        }
        let new = if over != 0 {
            wrapped
        } else {
            old.wrapping_add(incr)
        };
        Some(new as u64 & mask)
    } else {
        let (over, wrapped) = unsigned_overflow(old, incr, width, overflow);
        if over != 0 && overflow == BitOverflow::Fail {
            return None;
        }
        let new = if over != 0 {
            wrapped
        } else {
            old.wrapping_add(incr as u64)
        };
        Some(new & mask)
    }
}

/// The `width`-bit two's complement value `v` as an i64.
pub fn sign_extend(v: u64, width: u32) -> i64 {
    if width < 64 && width > 0 && v & (1u64 << (width - 1)) != 0 {
        (v | (u64::MAX << width)) as i64
    } else {
        v as i64
    }
}

/// The `width` bits from bit `offset` of `v` (most significant first; 0 past the end).
pub fn read_bits(v: &[u8], offset: u64, width: u32) -> u64 {
    let mut out: u64 = 0;
    for i in 0..u64::from(width) {
        let pos = offset.saturating_add(i);
        let bit = usize::try_from(pos >> 3)
            .ok()
            .and_then(|b| v.get(b))
            .is_some_and(|b| b & (0x80 >> (pos & 7)) != 0);
        out = (out << 1) | u64::from(bit);
    }
    out
}

/// Largest string length an edit may produce, in bytes: 512 MiB, Redis's default
/// proto-max-bulk-len. The decoder refuses edits past it (a few input bytes never ask for
/// more), and the server replicates a write past it (a raised limit) as an assignment.
pub const STR_EDIT_END_BYTES_MAX: u64 = 512 << 20;

/// Bytes of head a held edit must be matched by before `collect_all` folds the edits (about
/// what a held edit costs: its stamp, its `StrEdit` and its share of the list).
pub const EDIT_HELD_BYTES: usize = 64;

const EDIT_APPEND: u8 = 0;
const EDIT_SET_RANGE: u8 = 1;
const EDIT_SET_BITS: u8 = 2;
const EDIT_INCR_BITS: u8 = 3;

impl<B: AsRef<[u8]>> StrEdit<B> {
    /// The length, in bytes, that the string has at least after this edit (an append's is
    /// its own length: it grows any string by that much).
    pub fn end_bytes(&self) -> u64 {
        match self {
            StrEdit::Append(b) => b.as_ref().len() as u64,
            StrEdit::SetRange { offset, bytes } => match bytes.as_ref().len() as u64 {
                0 => 0,
                n => offset.saturating_add(n),
            },
            StrEdit::SetBits { offset, width, .. } | StrEdit::IncrBits { offset, width, .. } => {
                offset.saturating_add(u64::from(*width)).div_ceil(8)
            }
        }
    }

    /// The length of a string of `len` bytes after this edit.
    pub fn len_after(&self, len: usize) -> u64 {
        match self {
            StrEdit::Append(b) => (len as u64).saturating_add(b.as_ref().len() as u64),
            _ => (len as u64).max(self.end_bytes()),
        }
    }

    /// Applies the edit to `v`. The caller has bounded `end_bytes` (the decoder does so for
    /// remote edits); a SETRANGE of no bytes changes nothing, as Redis's.
    pub fn apply_to(&self, v: &mut Vec<u8>) {
        if let StrEdit::Append(b) = self {
            v.extend_from_slice(b.as_ref());
            return;
        }
        let Ok(end) = usize::try_from(self.end_bytes()) else {
            return;
        };
        if v.len() < end {
            v.resize(end, 0);
        }
        self.apply_within(v);
    }

    /// Applies an edit other than an append to `v`, already `end_bytes` long or longer
    /// (zero-padded as `apply_to` pads); an append changes nothing here.
    fn apply_within(&self, v: &mut [u8]) {
        match self {
            StrEdit::Append(_) => {}
            StrEdit::SetRange { offset, bytes } => {
                let b = bytes.as_ref();
                let Ok(off) = usize::try_from(*offset) else {
                    return;
                };
                if let Some(dst) = v.get_mut(off..off.saturating_add(b.len())) {
                    dst.copy_from_slice(b);
                }
            }
            StrEdit::IncrBits {
                offset,
                width,
                signed,
                incr,
                overflow,
            } => {
                let old = read_bits(v, *offset, u32::from(*width));
                if let Some(new) = bitfield_incr(old, u32::from(*width), *signed, *incr, *overflow)
                {
                    write_bits(v, *offset, *width, new);
                }
            }
            StrEdit::SetBits {
                offset,
                width,
                value,
            } => write_bits(v, *offset, *width, *value),
        }
    }

    /// The same edit holding its bytes in `SmallBytes` (the form a string keeps).
    fn to_small(&self) -> StrEdit<SmallBytes> {
        self.map_bytes(SmallBytes::copy_from)
    }

    /// The same edit with its bytes (APPEND's, SETRANGE's) converted by `f`: the one place
    /// that lists every edit's fields (the op log decodes into owned bytes with it).
    pub fn map_bytes<C>(&self, f: impl FnOnce(&[u8]) -> C) -> StrEdit<C> {
        match self {
            StrEdit::Append(b) => StrEdit::Append(f(b.as_ref())),
            StrEdit::SetRange { offset, bytes } => StrEdit::SetRange {
                offset: *offset,
                bytes: f(bytes.as_ref()),
            },
            StrEdit::SetBits {
                offset,
                width,
                value,
            } => StrEdit::SetBits {
                offset: *offset,
                width: *width,
                value: *value,
            },
            StrEdit::IncrBits {
                offset,
                width,
                signed,
                incr,
                overflow,
            } => StrEdit::IncrBits {
                offset: *offset,
                width: *width,
                signed: *signed,
                incr: *incr,
                overflow: *overflow,
            },
        }
    }
}

/// Writes the `width` low bits of `value` from bit `offset` (the caller has padded `v`).
fn write_bits(v: &mut [u8], offset: u64, width: u8, value: u64) {
    for i in 0..u64::from(width) {
        let bit = (value >> (u64::from(width) - 1 - i)) & 1;
        let pos = offset.saturating_add(i);
        let Ok(byte) = usize::try_from(pos >> 3) else {
            return;
        };
        let mask = 1u8 << (7 - (pos & 7));
        if let Some(b) = v.get_mut(byte) {
            if bit == 1 {
                *b |= mask;
            } else {
                *b &= !mask;
            }
        }
    }
}

/// Appends an edit: a kind byte, then `bytes` (append), `offset:varint bytes` (range),
/// `offset:varint width:u8 value:u64` (bits) or `offset:varint width:u8 flags:u8 incr:i64`
/// (increment; flags: 4 = signed, plus the overflow rule 0 wrap, 1 sat, 2 fail).
pub fn encode_edit<B: AsRef<[u8]>>(edit: &StrEdit<B>, out: &mut Vec<u8>) {
    match edit {
        StrEdit::Append(b) => {
            codec::put_u8(out, EDIT_APPEND);
            codec::put_bytes(out, b.as_ref());
        }
        StrEdit::SetRange { offset, bytes } => {
            codec::put_u8(out, EDIT_SET_RANGE);
            codec::put_varint(out, *offset);
            codec::put_bytes(out, bytes.as_ref());
        }
        StrEdit::SetBits {
            offset,
            width,
            value,
        } => {
            codec::put_u8(out, EDIT_SET_BITS);
            codec::put_varint(out, *offset);
            codec::put_u8(out, *width);
            codec::put_u64(out, *value);
        }
        StrEdit::IncrBits {
            offset,
            width,
            signed,
            incr,
            overflow,
        } => {
            codec::put_u8(out, EDIT_INCR_BITS);
            codec::put_varint(out, *offset);
            codec::put_u8(out, *width);
            let ow = match overflow {
                BitOverflow::Wrap => 0,
                BitOverflow::Sat => 1,
                BitOverflow::Fail => 2,
            };
            codec::put_u8(out, u8::from(*signed) << 2 | ow);
            codec::put_i64(out, *incr);
        }
    }
}

/// Decodes what `encode_edit` wrote. `BadTag`: an unknown kind; `Invalid`: a width outside
/// 1..=64 (1..=63 unsigned for an increment), a value wider than its width, an unknown
/// overflow rule, or an edit ending past `STR_EDIT_END_BYTES_MAX`.
pub fn decode_edit<'a>(r: &mut Reader<'a>) -> Result<StrEdit<&'a [u8]>, DecodeError> {
    let edit = match r.u8()? {
        EDIT_APPEND => StrEdit::Append(r.bytes()?),
        EDIT_SET_RANGE => {
            let offset = r.varint()?;
            StrEdit::SetRange {
                offset,
                bytes: r.bytes()?,
            }
        }
        EDIT_SET_BITS => {
            let offset = r.varint()?;
            let width = r.u8()?;
            let value = r.u64()?;
            if !(1..=64).contains(&width) {
                return Err(DecodeError::Invalid("edit bit width"));
            }
            if width < 64 && value >> width != 0 {
                return Err(DecodeError::Invalid("edit value wider than its width"));
            }
            StrEdit::SetBits {
                offset,
                width,
                value,
            }
        }
        EDIT_INCR_BITS => {
            let offset = r.varint()?;
            let width = r.u8()?;
            let flags = r.u8()?;
            let incr = r.i64()?;
            let signed = flags & 4 != 0;
            let overflow = match flags & !4 {
                0 => BitOverflow::Wrap,
                1 => BitOverflow::Sat,
                2 => BitOverflow::Fail,
                _ => return Err(DecodeError::Invalid("edit overflow rule")),
            };
            // Redis's field types: i1..i64, u1..u63.
            if width == 0 || width > 64 || (!signed && width > 63) {
                return Err(DecodeError::Invalid("edit bit width"));
            }
            StrEdit::IncrBits {
                offset,
                width,
                signed,
                incr,
                overflow,
            }
        }
        t => return Err(DecodeError::BadTag(t)),
    };
    if edit.end_bytes() > STR_EDIT_END_BYTES_MAX {
        return Err(DecodeError::Invalid("edit past the string length limit"));
    }
    Ok(edit)
}

/// A string key's value: a multi-value register of assigned bytes (the write with the highest
/// stamp inline, concurrent ones boxed) and a counter (boxed).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct StrCrdt {
    /// The assigned write with the highest stamp; `None` when nothing is assigned.
    head: Option<(Stamp, SmallBytes)>,
    rare: Option<Box<StrRare>>,
}

/// The rare parts of a string: concurrent assigned writes, the counter, and the edits.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct StrRare {
    // Invariant: sorted by stamp, every stamp below head's; empty when head is None.
    others: Vec<(Stamp, SmallBytes)>,
    counter: Option<Counter>,
    // Invariant: sorted by stamp, unique, no stamp `folded` covers or a write holds. Those
    // above the head's stamp (all when there is no head) are visible.
    edits: Vec<(Stamp, StrEdit<SmallBytes>)>,
    /// Stamps of the edits `collect` folded into the head's bytes (or dropped, hidden below
    /// it): observed, and what a state join uses to drop the other side's unfolded copies.
    folded: VersionVector,
    /// The head's bytes with the visible edits applied; empty when no edit is visible.
    shown: Vec<u8>,
}

impl StrRare {
    fn is_blank(&self) -> bool {
        self.others.is_empty()
            && self.counter.is_none()
            && self.edits.is_empty()
            && self.folded.is_empty()
    }
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
        if self.rare.as_ref().is_some_and(|r| r.is_blank()) {
            self.rare = None;
        }
    }

    /// Index of the first visible edit (those above the head's stamp).
    fn visible_from(&self) -> usize {
        let Some(r) = &self.rare else {
            return 0;
        };
        match &self.head {
            None => 0,
            Some((h, _)) => r.edits.partition_point(|e| e.0 <= *h),
        }
    }

    fn has_visible_edits(&self) -> bool {
        self.rare
            .as_ref()
            .is_some_and(|r| self.visible_from() < r.edits.len())
    }

    /// Recomputes `shown` from the head's bytes and the visible edits.
    fn rebuild(&mut self) {
        let from = self.visible_from();
        let head = self.head.as_ref().map_or(&[][..], |(_, b)| b.as_slice());
        let Some(r) = &mut self.rare else {
            return;
        };
        let mut shown = Vec::new();
        if let Some(visible) = r.edits.get(from..).filter(|v| !v.is_empty()) {
            shown.extend_from_slice(head);
            for (_, e) in visible {
                e.apply_to(&mut shown);
            }
        }
        r.shown = shown;
    }

    /// The bytes shown before increments: the head's with the visible edits applied; `None`
    /// when nothing is assigned and no edit is visible.
    pub fn bytes(&self) -> Option<&[u8]> {
        if self.has_visible_edits() {
            return self.rare.as_ref().map(|r| r.shown.as_slice());
        }
        self.head.as_ref().map(|(_, b)| b.as_slice())
    }

    /// Whether unobserved increments change what is shown (an edit then would apply to the
    /// bytes under them: the server replicates such a write as an assignment instead).
    pub fn has_live_increments(&self) -> bool {
        self.counter_ref().is_some_and(|c| !c.is_clear())
    }

    /// The value shown; `None` when nothing is assigned and no increment is unobserved.
    pub fn view(&self) -> Option<StrView<'_>> {
        let bytes = self.bytes();
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

    /// Removes the assigned writes and edits covered by `stamps` (the folded edits with the
    /// head they are in) and resets the increments in `incs`.
    pub fn remove(&mut self, stamps: &VersionVector, incs: &[(ReplicaId, IncTotals)]) {
        let mut changed = false;
        if let Some(r) = &mut self.rare {
            r.others.retain(|w| !stamps.covers(w.0));
            let n = r.edits.len();
            r.edits.retain(|e| !stamps.covers(e.0));
            changed = n != r.edits.len();
            if !r.folded.is_empty() && stamps.dominates(&r.folded) {
                r.folded = VersionVector::new();
            }
        }
        if self.head.as_ref().is_some_and(|w| stamps.covers(w.0)) {
            self.head = self.rare.as_mut().and_then(|r| r.others.pop());
            changed = true;
        }
        if !incs.is_empty() {
            self.counter_mut().reset(incs);
        }
        if changed {
            self.rebuild();
        }
        self.tidy();
    }

    /// Adds the assigned write `stamp` (the caller has applied the write's removals).
    /// Returns false when a write with that stamp is held already.
    pub fn assign(&mut self, stamp: Stamp, value: &[u8]) -> bool {
        if self.holds(stamp) {
            return false;
        }
        let new = (stamp, SmallBytes::copy_from(value));
        let below = match self.head.take() {
            None => {
                self.head = Some(new);
                self.rebuild();
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
        self.rebuild();
        true
    }

    /// Whether the write `stamp` (an assignment or an edit, folded or not) is held.
    pub fn holds(&self, stamp: Stamp) -> bool {
        self.writes().any(|(s, _)| *s == stamp)
            || self.rare.as_ref().is_some_and(|r| {
                r.folded.covers(stamp) || r.edits.binary_search_by_key(&stamp, |e| e.0).is_ok()
            })
    }

    /// Adds the edit `stamp` (the caller has applied the key's removals); false for a
    /// duplicate. An edit above every write held (the usual case: a local edit, or one
    /// delivered in stamp order) is applied to the bytes shown in place; another one
    /// rebuilds them from the head.
    pub fn edit<B: AsRef<[u8]>>(&mut self, stamp: Stamp, edit: &StrEdit<B>) -> bool {
        if self.holds(stamp) {
            return false;
        }
        let above_head = self.head.as_ref().is_none_or(|(h, _)| *h < stamp);
        let had_visible = self.has_visible_edits();
        let head_bytes = self.head.as_ref().map(|(_, b)| b.as_slice());
        let r = self.rare.get_or_insert_with(Box::default);
        let i = r.edits.partition_point(|e| e.0 < stamp);
        let last = i == r.edits.len();
        r.edits.insert(i, (stamp, edit.to_small()));
        if above_head && last {
            if !had_visible {
                r.shown.clear();
                r.shown.extend_from_slice(head_bytes.unwrap_or_default());
            }
            edit.apply_to(&mut r.shown);
        } else if above_head {
            self.rebuild();
        }
        true
    }

    /// `edit` followed by `collect_all`, for a replica whose writes are stable at once (no
    /// peers): the edit is folded into the head's bytes at once, without the held edit, the
    /// rare part and the copies of the bytes those cost. Only where `collect_all` would fold
    /// it: a string with no rare part (no concurrent writes, counter or edits held) whose
    /// head is below `stamp` and at most `EDIT_HELD_BYTES` long, and the result at most that
    /// long too. Otherwise false, with nothing changed (the caller takes the general path).
    pub fn edit_folded<B: AsRef<[u8]>>(&mut self, stamp: Stamp, edit: &StrEdit<B>) -> bool {
        if self.rare.is_some() {
            return false;
        }
        let Some((head, bytes)) = &mut self.head else {
            return false;
        };
        let len = bytes.len();
        let new_len = edit.len_after(len);
        if *head >= stamp || len > EDIT_HELD_BYTES || new_len > EDIT_HELD_BYTES as u64 {
            return false;
        }
        let mut buf = [0u8; EDIT_HELD_BYTES];
        let Some(v) = buf.get_mut(..new_len as usize) else {
            return false;
        };
        if let Some(dst) = v.get_mut(..len) {
            dst.copy_from_slice(bytes);
        }
        match edit {
            StrEdit::Append(b) => {
                if let Some(dst) = v.get_mut(len..) {
                    dst.copy_from_slice(b.as_ref());
                }
            }
            _ => edit.apply_within(v),
        }
        *bytes = SmallBytes::copy_from(v);
        *head = stamp;
        true
    }

    /// The edits held, not folded, in stamp order (visible ones above the head's stamp).
    pub fn edits(&self) -> impl Iterator<Item = &(Stamp, StrEdit<SmallBytes>)> + '_ {
        self.rare.iter().flat_map(|r| r.edits.iter())
    }

    /// Applies one increment; false for a duplicate.
    pub fn incr(&mut self, stamp: Stamp, delta: &Delta, at: &IncAt) -> bool {
        self.counter_mut().apply_inc(stamp, delta, at)
    }

    /// Drops the counter's settled entries (`Counter::drop_settled`); the caller checks that
    /// every removal of the key was delivered everywhere.
    pub fn drop_settled_counter(&mut self, everywhere: &VersionVector) {
        let dropped = self
            .rare
            .as_mut()
            .and_then(|r| r.counter.as_mut())
            .is_some_and(|c| c.drop_settled(everywhere));
        if dropped {
            if let Some(r) = &mut self.rare {
                if r.counter.as_ref().is_some_and(Counter::is_empty) {
                    r.counter = None;
                }
            }
            self.tidy();
        }
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

    /// `Counter::seed_totals` on this string's counter.
    pub fn seed_counter_totals(&mut self, totals: &[(ReplicaId, IncTotals)]) {
        if totals.iter().any(|(_, t)| t.n > 0) {
            self.counter_mut().seed_totals(totals);
            self.tidy();
        }
    }

    /// Whether the value shows anything.
    pub fn is_live(&self) -> bool {
        self.head.is_some()
            || self.has_visible_edits()
            || self.counter_ref().is_some_and(|c| !c.is_clear())
    }

    /// The highest stamp among assigned writes, visible and folded edits and unobserved
    /// increments.
    pub fn live_stamp(&self) -> Option<Stamp> {
        let r = self.head.as_ref().map(|(s, _)| *s);
        let e = self
            .rare
            .as_ref()
            .and_then(|x| x.edits.last())
            .map(|e| e.0)
            .filter(|_| self.has_visible_edits());
        // Edits folded into the head's bytes keep their place in the type-conflict order.
        let f = self
            .rare
            .as_ref()
            .filter(|_| self.head.is_some())
            .and_then(|x| {
                x.folded
                    .iter()
                    .map(|(replica, hlc)| Stamp { hlc, replica })
                    .max()
            });
        let c = self.counter_ref().and_then(|c| c.live_stamp());
        r.max(e).max(f).max(c)
    }

    /// Adds the stamps held (writes, edits, folded edits, last increment per origin) to `vv`.
    pub fn observe_into(&self, vv: &mut VersionVector) {
        for (s, _) in self.writes() {
            vv.observe(*s);
        }
        if let Some(r) = &self.rare {
            for (s, _) in &r.edits {
                vv.observe(*s);
            }
            vv.merge(&r.folded);
        }
        if let Some(c) = self.counter_ref() {
            for s in c.last_stamps() {
                vv.observe(s);
            }
        }
    }

    /// Whether a cleared counter (pure metadata) or unfolded edits (for `collect` to fold)
    /// are held.
    pub fn has_metadata(&self) -> bool {
        self.counter_ref().is_some_and(|c| c.is_clear())
            || self.rare.as_ref().is_some_and(|r| !r.edits.is_empty())
    }

    /// State join: the union of the assigned writes (one per stamp), of the edits and of the
    /// folded stamps (an edit one side folded goes from the other's edits), and the join of
    /// the counters (`Counter::merge`). A write held on one side only may have been removed
    /// on the other: the caller then applies `remove` with each side's removal contexts (as
    /// `KeyState::merge` does). The head's bytes differ between sides when one folded more
    /// edits into them: the side whose `folded` dominates gives them (sides of one history
    /// fold prefixes of one stamp order, so one does; otherwise the greater bytes, for a
    /// deterministic join). Commutative, associative, idempotent.
    pub fn merge(&mut self, other: &StrCrdt) {
        let my_folded = self
            .rare
            .as_ref()
            .map(|r| r.folded.clone())
            .unwrap_or_default();
        let their_folded = other
            .rare
            .as_ref()
            .map(|r| r.folded.clone())
            .unwrap_or_default();
        let theirs_first = match (&self.head, &other.head) {
            (Some((a, x)), Some((b, y))) if a == b && x != y => {
                match (
                    their_folded.dominates(&my_folded),
                    my_folded.dominates(&their_folded),
                ) {
                    (true, false) => true,
                    (false, true) => false,
                    _ => y > x,
                }
            }
            _ => false,
        };
        let mut all: Vec<(Stamp, SmallBytes)> = Vec::new();
        let theirs = other
            .writes()
            .map(|(s, b)| (*s, SmallBytes::copy_from(b)))
            .collect::<Vec<_>>();
        if theirs_first {
            all.extend(theirs.iter().cloned());
        }
        let mine = self.head.take().into_iter().chain(
            self.rare
                .as_mut()
                .map(|r| std::mem::take(&mut r.others))
                .unwrap_or_default(),
        );
        all.extend(mine);
        if !theirs_first {
            all.extend(theirs);
        }
        // Sorted by stamp (stable: the chosen side first); a stamp held on both sides names
        // the same write: keep one.
        all.sort_by_key(|w| w.0);
        all.dedup_by_key(|w| w.0);
        self.head = all.pop();
        if !all.is_empty() {
            self.rare.get_or_insert_with(Box::default).others = all;
        }
        if let Some(o) = &other.rare {
            if !o.edits.is_empty() || !o.folded.is_empty() {
                let r = self.rare.get_or_insert_with(Box::default);
                r.folded.merge(&o.folded);
                r.edits.extend(o.edits.iter().cloned());
                r.edits.sort_by_key(|e| e.0);
                r.edits.dedup_by_key(|e| e.0);
            }
        }
        if let Some(r) = &mut self.rare {
            let folded = &r.folded;
            r.edits.retain(|e| !folded.covers(e.0));
        }
        if let Some(c) = other.counter_ref() {
            match self.rare.as_mut().and_then(|r| r.counter.as_mut()) {
                Some(mine) => mine.merge(c),
                None => self.rare.get_or_insert_with(Box::default).counter = Some(c.clone()),
            }
        }
        self.rebuild();
        self.tidy();
    }

    /// Keeps the assigned writes whose stamp `keep` accepts (the state join with a floor drops
    /// those the other side had delivered and no longer holds).
    /// Edits too.
    pub(crate) fn retain_writes(&mut self, keep: impl Fn(Stamp) -> bool) {
        if let Some(r) = &mut self.rare {
            r.others.retain(|w| keep(w.0));
            r.edits.retain(|e| keep(e.0));
        }
        if self.head.as_ref().is_some_and(|w| !keep(w.0)) {
            self.head = self.rare.as_mut().and_then(|r| r.others.pop());
        }
        self.rebuild();
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

    /// Whether edits or folded stamps are held: `encode_state` leaves them out, and
    /// `encode_edits` follows it (under its own value tag, so older states still decode).
    pub fn has_edits(&self) -> bool {
        self.rare
            .as_ref()
            .is_some_and(|r| !r.edits.is_empty() || !r.folded.is_empty())
    }

    /// Appends the edits (count, then stamp and `encode_edit` each, in stamp order) and the
    /// folded stamps.
    pub fn encode_edits(&self, out: &mut Vec<u8>) {
        let edits = self.rare.as_ref().map_or(&[][..], |r| r.edits.as_slice());
        codec::put_varint(out, edits.len() as u64);
        for (s, e) in edits {
            codec::put_stamp(out, *s);
            encode_edit(e, out);
        }
        match &self.rare {
            Some(r) => codec::put_vv(out, &r.folded),
            None => codec::put_vv(out, &VersionVector::new()),
        }
    }

    /// Decodes what `encode_edits` wrote into `self` (decoded by `decode_state`). Edits out
    /// of stamp order or repeated, named by a write's stamp or covered by the folded stamps,
    /// or none at all, are `Invalid`.
    pub fn decode_edits(&mut self, r: &mut Reader<'_>) -> Result<(), DecodeError> {
        let n = r.count("string edits")?;
        let mut edits: Vec<(Stamp, StrEdit<SmallBytes>)> = Vec::with_capacity(codec::prealloc(n));
        for _ in 0..n {
            let s = r.stamp()?;
            let e = decode_edit(r)?.to_small();
            if edits.last().is_some_and(|x| x.0 >= s) {
                return Err(DecodeError::Invalid("string edits not sorted"));
            }
            if self.writes().any(|(w, _)| *w == s) {
                return Err(DecodeError::Invalid("string edit named by a write"));
            }
            edits.push((s, e));
        }
        let folded = r.vv_strict()?;
        if edits.iter().any(|e| folded.covers(e.0)) {
            return Err(DecodeError::Invalid("string edit folded"));
        }
        if edits.is_empty() && folded.is_empty() {
            return Err(DecodeError::Invalid("string edits section empty"));
        }
        let x = self.rare.get_or_insert_with(Box::default);
        x.edits = edits;
        x.folded = folded;
        self.rebuild();
        Ok(())
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
            s.rare = Some(Box::new(StrRare {
                others,
                counter,
                ..StrRare::default()
            }));
        }
        Ok(s)
    }

    /// Drops a cleared counter and folds every edit into the head's bytes, the head named by
    /// the highest stamp held (only safe when no replica can still send writes, increments or
    /// removals referring to them: no peers).
    ///
    /// Visible edits over a head of at least `EDIT_HELD_BYTES` bytes per edit are left held
    /// (they are stable: folding them later shows the same bytes). Folding copies the head
    /// once (the next edit starts the bytes shown from it), so folding after every edit made
    /// n APPENDs cost O(n × length); folding once the edits' count reaches the head's length
    /// over `EDIT_HELD_BYTES` makes the head grow geometrically between folds: O(log n)
    /// folds, O(length) bytes copied in all, and the edits held cost at most about the
    /// head's length in memory.
    pub fn collect_all(&mut self) {
        let defer = self.rare.as_ref().is_some_and(|r| {
            let head_len = self.head.as_ref().map_or(0, |h| h.1.len());
            r.folded.is_empty()
                && !r.edits.is_empty()
                && self.visible_from() == 0
                && self.head.is_some()
                && r.edits.len().saturating_mul(EDIT_HELD_BYTES) < head_len
        });
        if self.has_edits() && !defer {
            let visible = self.has_visible_edits();
            let top = self.edits().last().map(|e| e.0);
            let head = self.head.take();
            if let Some(r) = &mut self.rare {
                let stamp = head.as_ref().map(|h| h.0).max(top);
                let bytes = match head {
                    Some((_, b)) if !visible => b,
                    _ => SmallBytes::from_vec(std::mem::take(&mut r.shown)),
                };
                self.head = stamp.map(|s| (s, bytes));
                r.edits = Vec::new();
                r.folded = VersionVector::new();
                r.shown = Vec::new();
            }
        }
        if let Some(r) = &mut self.rare {
            if r.counter.as_ref().is_some_and(|c| c.is_clear()) {
                r.counter = None;
            }
        }
        self.tidy();
    }

    /// Folds the causally stable edits into the head's bytes: once `everywhere` (delivered at
    /// every replica, each having applied here everything it issued before) covers the head
    /// and a prefix of the edits in stamp order, every write concurrent with or before them
    /// is held here and every later one follows them, so their effect on the bytes is final.
    /// Their stamps stay in `folded`. A string with no head takes one named by the last
    /// folded edit.
    pub fn collect(&mut self, everywhere: &VersionVector) {
        if self.head.as_ref().is_some_and(|h| !everywhere.covers(h.0)) {
            return;
        }
        let Some(r) = &mut self.rare else {
            return;
        };
        let k = r.edits.partition_point(|e| everywhere.covers(e.0));
        if k == 0 {
            return;
        }
        let head_stamp = self.head.as_ref().map(|h| h.0);
        let mut bytes = self.head.as_ref().map(|h| h.1.to_vec()).unwrap_or_default();
        let mut last = None;
        for (s, e) in r.edits.drain(..k) {
            if head_stamp.is_none_or(|h| h < s) {
                e.apply_to(&mut bytes);
            }
            r.folded.observe(s);
            last = Some(s);
        }
        let stamp = head_stamp.or(last);
        self.head = stamp.map(|s| (s, SmallBytes::from_vec(bytes)));
        self.rebuild();
        self.tidy();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An increment issued by the string's own copy of `s.replica` and applied there.
    fn inc(v: &mut StrCrdt, s: Stamp, d: Delta) -> bool {
        let at = v
            .counter()
            .map_or(IncAt::Starts, |c| c.next_at(s.replica, &d));
        v.incr(s, &d, &at)
    }
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
        inc(&mut s, st(2, 1), Delta::Int(1));
        assert_eq!(s.view(), Some(StrView::Int(11)));
    }

    #[test]
    fn float_increments_and_non_numeric_base() {
        let mut s = StrCrdt::new();
        inc(&mut s, st(1, 1), Delta::Float(Dec::parse(b"10.5").unwrap()));
        inc(&mut s, st(2, 1), Delta::Float(Dec::parse(b"0.1").unwrap()));
        assert_eq!(s.view().unwrap().to_bytes(), b"10.6");
        s.assign(st(3, 2), b"abc");
        assert_eq!(s.view(), Some(StrView::Bytes(b"abc")));
        let mut t = StrCrdt::new();
        t.assign(st(1, 1), b"1.5");
        inc(&mut t, st(2, 2), Delta::Int(1));
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
        inc(&mut a, st(3, 1), Delta::Int(1));
        let mut b = StrCrdt::new();
        b.assign(st(1, 3), b"a");
        b.assign(st(2, 1), b"b");
        inc(&mut b, st(4, 2), Delta::Int(5));
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
        inc(&mut s, st(2, 2), Delta::Int(100));
        assert_eq!(s.view(), Some(StrView::Int(i64::MAX)));
    }

    fn app(b: &[u8]) -> StrEdit<&[u8]> {
        StrEdit::Append(b)
    }

    fn bit(offset: u64, on: bool) -> StrEdit<&'static [u8]> {
        StrEdit::SetBits {
            offset,
            width: 1,
            value: u64::from(on),
        }
    }

    fn shown(s: &StrCrdt) -> Vec<u8> {
        s.view().map(|v| v.to_bytes()).unwrap_or_default()
    }

    #[test]
    fn edits_apply_in_stamp_order_whatever_the_arrival_order() {
        let mut a = StrCrdt::new();
        a.assign(st(1, 1), b"ab");
        let mut b = a.clone();
        // Two sites append concurrently: both survive, the lower stamp first.
        assert!(a.edit(st(2, 1), &app(b"X")));
        assert!(a.edit(st(3, 2), &app(b"Y")));
        assert!(b.edit(st(3, 2), &app(b"Y")));
        assert!(b.edit(st(2, 1), &app(b"X")));
        assert!(!b.edit(st(2, 1), &app(b"X")));
        assert_eq!(shown(&a), b"abXY");
        assert_eq!(a, b);
    }

    #[test]
    fn concurrent_setbits_of_different_bits_both_survive() {
        let mut a = StrCrdt::new();
        a.assign(st(1, 1), b"\x00");
        let mut b = a.clone();
        a.edit(st(2, 1), &bit(0, true));
        b.edit(st(3, 2), &bit(15, true));
        a.edit(st(3, 2), &bit(15, true));
        b.edit(st(2, 1), &bit(0, true));
        assert_eq!(shown(&a), b"\x80\x01");
        assert_eq!(a, b);
    }

    #[test]
    fn set_concurrent_with_an_edit_is_ordered_by_stamp() {
        // The edit's stamp is above the SET's: it applies to the SET's bytes.
        let mut s = StrCrdt::new();
        s.assign(st(1, 1), b"old");
        s.edit(st(3, 2), &app(b"+"));
        s.assign(st(2, 1), b"new");
        assert_eq!(shown(&s), b"new+");
        // The SET's stamp is above: it wins, the edit stays held (hidden).
        let mut t = StrCrdt::new();
        t.assign(st(1, 1), b"old");
        t.edit(st(2, 2), &app(b"+"));
        t.assign(st(3, 1), b"new");
        assert_eq!(shown(&t), b"new");
        assert_eq!(t.edits().count(), 1);
        // Removing the SET alone shows the edit on the next write again.
        let mut seen = VersionVector::new();
        seen.observe(st(3, 1));
        t.remove(&seen, &[]);
        assert_eq!(shown(&t), b"+");
    }

    #[test]
    fn setrange_and_bits_pad_with_zeroes() {
        let mut v = b"ab".to_vec();
        StrEdit::SetRange {
            offset: 4,
            bytes: &b"cd"[..],
        }
        .apply_to(&mut v);
        assert_eq!(v, b"ab\0\0cd");
        StrEdit::<&[u8]>::SetBits {
            offset: 60,
            width: 8,
            value: 0xff,
        }
        .apply_to(&mut v);
        assert_eq!(v, b"ab\0\0cd\0\x0f\xf0");
        StrEdit::SetRange {
            offset: 100,
            bytes: &b""[..],
        }
        .apply_to(&mut v);
        assert_eq!(v.len(), 9);
    }

    #[test]
    fn collect_folds_stable_edits_and_joins_with_unfolded_copies() {
        let mut a = StrCrdt::new();
        a.assign(st(1, 1), b"a");
        a.edit(st(2, 1), &app(b"b"));
        a.edit(st(3, 2), &app(b"c"));
        let unfolded = a.clone();
        let mut stable = VersionVector::new();
        stable.observe(st(2, 1));
        a.collect(&stable);
        // The head and the first edit are stable: folded; the second stays an edit.
        assert_eq!(a.edits().count(), 1);
        assert_eq!(shown(&a), b"abc");
        assert!(a.holds(st(2, 1)));
        assert!(!a.edit(st(2, 1), &app(b"b")));
        stable.observe(st(3, 2));
        a.collect(&stable);
        assert_eq!(a.edits().count(), 0);
        assert!(!a.has_metadata());
        assert_eq!(a.live_stamp(), Some(st(3, 2)));
        let mut ab = a.clone();
        ab.merge(&unfolded);
        let mut ba = unfolded.clone();
        ba.merge(&a);
        assert_eq!(ab, ba);
        assert_eq!(ab, a);
        assert_eq!(shown(&ab), b"abc");
        let mut out = Vec::new();
        a.encode_state(&mut out);
        a.encode_edits(&mut out);
        let mut r = Reader::new(&out);
        let mut back = StrCrdt::decode_state(&mut r).unwrap();
        back.decode_edits(&mut r).unwrap();
        assert!(r.is_at_end());
        assert_eq!(back, a);
        // With no peers everything folds into one write.
        let mut solo = unfolded.clone();
        solo.collect_all();
        assert_eq!(shown(&solo), b"abc");
        assert_eq!(solo.rare, None);
    }

    /// A single site's APPENDs: an edit, then `collect_all`, each time. The work is the bytes
    /// copied: the head into the bytes shown by the first edit after each fold. Folding after
    /// every edit copied the whole string each time (n²/2 × the piece in all).
    #[test]
    fn appends_with_no_peers_copy_the_string_a_logarithmic_number_of_times() {
        let (n, piece) = (20_000u64, b"0123456789");
        let mut s = StrCrdt::new();
        s.assign(st(1, 1), b"start");
        let (mut folds, mut copied) = (0u64, 0u64);
        for i in 0..n {
            let head_len = s.head.as_ref().map_or(0, |h| h.1.len()) as u64;
            if !s.has_edits() {
                // This edit starts the bytes shown from a copy of the head.
                copied += head_len;
            }
            assert!(s.edit(st(2 + i, 1), &app(piece)));
            let had = s.has_edits();
            s.collect_all();
            if had && !s.has_edits() {
                folds += 1;
            }
            // Held edits cost at most about the head's length.
            let held = s.edits().count() * EDIT_HELD_BYTES;
            assert!(held <= head_len as usize + EDIT_HELD_BYTES);
        }
        let len = 5 + n * piece.len() as u64;
        let mut expected = b"start".to_vec();
        for _ in 0..n {
            expected.extend_from_slice(piece);
        }
        assert_eq!(shown(&s), expected);
        assert!(
            copied <= 10 * len,
            "{copied} bytes copied for a {len}-byte string"
        );
        assert!(folds < 200, "{folds} folds");
        // The held edits are stable state like any other: a copy without peers' metadata
        // encodes, decodes and shows the same bytes.
        let mut out = Vec::new();
        s.encode_state(&mut out);
        if s.has_edits() {
            s.encode_edits(&mut out);
        }
        let mut r = Reader::new(&out);
        let mut back = StrCrdt::decode_state(&mut r).unwrap();
        if s.has_edits() {
            back.decode_edits(&mut r).unwrap();
        }
        assert_eq!(shown(&back), expected);
    }

    #[test]
    fn edit_codec_round_trips_and_refuses_bad_input() {
        let edits: [StrEdit<&[u8]>; 4] = [
            StrEdit::Append(b"xyz"),
            StrEdit::SetRange {
                offset: 300,
                bytes: b"q",
            },
            StrEdit::SetBits {
                offset: 7,
                width: 64,
                value: u64::MAX,
            },
            StrEdit::IncrBits {
                offset: 3,
                width: 63,
                signed: false,
                incr: -5,
                overflow: BitOverflow::Sat,
            },
        ];
        for e in &edits {
            let mut out = Vec::new();
            encode_edit(e, &mut out);
            let mut r = Reader::new(&out);
            assert_eq!(&decode_edit(&mut r).unwrap(), e);
            assert!(r.is_at_end());
            for cut in 0..out.len() {
                assert!(decode_edit(&mut Reader::new(&out[..cut])).is_err());
            }
        }
        let mut wide = Vec::new();
        encode_edit::<&[u8]>(
            &StrEdit::SetBits {
                offset: 0,
                width: 3,
                value: 8,
            },
            &mut wide,
        );
        assert!(decode_edit(&mut Reader::new(&wide)).is_err());
        let mut far = Vec::new();
        encode_edit(
            &StrEdit::SetRange {
                offset: STR_EDIT_END_BYTES_MAX,
                bytes: &b"x"[..],
            },
            &mut far,
        );
        assert!(decode_edit(&mut Reader::new(&far)).is_err());
        assert!(decode_edit(&mut Reader::new(&[9])).is_err());
    }

    #[test]
    fn concurrent_bitfield_increments_both_count() {
        let incr = |n: i64| StrEdit::<&[u8]>::IncrBits {
            offset: 4,
            width: 8,
            signed: true,
            incr: n,
            overflow: BitOverflow::Sat,
        };
        let mut a = StrCrdt::new();
        a.assign(st(1, 1), b"\x00\x00");
        let mut b = a.clone();
        a.edit(st(2, 1), &incr(100));
        a.edit(st(3, 2), &incr(100));
        b.edit(st(3, 2), &incr(100));
        b.edit(st(2, 1), &incr(100));
        assert_eq!(a, b);
        // 100 + 100 saturates at 127: 0x7f from bit 4.
        assert_eq!(shown(&a), b"\x07\xf0");
        let mut fail = b"\x07\xf0".to_vec();
        StrEdit::<&[u8]>::IncrBits {
            offset: 4,
            width: 8,
            signed: true,
            incr: 1,
            overflow: BitOverflow::Fail,
        }
        .apply_to(&mut fail);
        assert_eq!(fail, b"\x07\xf0");
        assert_eq!(bitfield_incr(250, 8, false, 10, BitOverflow::Wrap), Some(4));
        assert_eq!(bitfield_incr(5, 8, false, -10, BitOverflow::Sat), Some(0));
        assert_eq!(
            bitfield_incr(0x78, 8, true, 10, BitOverflow::Wrap),
            Some(0x82)
        );
        assert_eq!(bitfield_incr(0x78, 8, true, 10, BitOverflow::Fail), None);
        assert_eq!(
            signed_overflow(i64::MAX, 1, 64, BitOverflow::Wrap),
            (1, i64::MIN)
        );
    }
}

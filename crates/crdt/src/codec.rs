//! Binary encoding of effects: varints, byte strings, version vectors, `Observed`.
//!
//! Pure functions over byte slices, shared by every type's op codec and by the server's op
//! log, so that one encoding of each building block exists. Decoding is bounds-checked and
//! never panics: every count is limited before anything is allocated from it.
//!
//! State snapshots (`encode_state` / `decode_state` of each type, for a full sync) use the
//! same blocks, plus the strict readers here (`vv_strict`, `totals`...) that reject values
//! breaking an invariant, and `prealloc`, which caps what a declared count may reserve.

use smallvec::SmallVec;

use crate::bytes::SmallBytes;
use crate::counter::IncTotals;
use crate::dot::{ReplicaId, Stamp, VersionVector};
use crate::hlc::Hlc;
use crate::num::Dec;
use crate::op::Observed;

/// Most version-vector entries, counter origins or list items in one encoded value.
pub const ENTRIES_MAX: usize = 4096;

/// Most elements a decoder reserves room for up front from a declared count: a short input
/// declaring a large count must not allocate much before it runs out of bytes.
pub const PREALLOC_MAX: usize = 64;

/// The capacity to reserve for `n` declared elements: at most `PREALLOC_MAX`.
pub fn prealloc(n: usize) -> usize {
    n.min(PREALLOC_MAX)
}

/// Why bytes did not decode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    Truncated,
    BadTag(u8),
    TooManyEntries {
        what: &'static str,
        n: u64,
    },
    BadDecimal,
    BadFloat,
    /// Well-formed bytes describing a state that breaks an invariant of its type (unsorted
    /// entries, duplicates, a value its own removal context covers...).
    Invalid(&'static str),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Truncated => write!(f, "truncated"),
            DecodeError::BadTag(t) => write!(f, "unknown tag {t}"),
            DecodeError::TooManyEntries { what, n } => {
                write!(f, "{what}: {n} entries exceed {ENTRIES_MAX}")
            }
            DecodeError::BadDecimal => write!(f, "decimal out of range"),
            DecodeError::BadFloat => write!(f, "NaN float"),
            DecodeError::Invalid(what) => write!(f, "invalid state: {what}"),
        }
    }
}

impl std::error::Error for DecodeError {}

pub fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}

pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn put_i64(out: &mut Vec<u8>, v: i64) {
    out.extend_from_slice(&v.to_le_bytes());
}

pub fn put_f64(out: &mut Vec<u8>, v: f64) {
    out.extend_from_slice(&v.to_bits().to_le_bytes());
}

pub fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

pub fn put_stamp(out: &mut Vec<u8>, s: Stamp) {
    put_u64(out, s.hlc.0);
    put_u32(out, s.replica.0);
}

pub fn put_dec(out: &mut Vec<u8>, d: &Dec) {
    let (coef, exp) = d.to_parts();
    out.extend_from_slice(&coef.to_le_bytes());
    out.extend_from_slice(&exp.to_le_bytes());
}

pub fn put_vv(out: &mut Vec<u8>, vv: &VersionVector) {
    put_varint(out, vv.len() as u64);
    for (r, h) in vv.iter() {
        put_u32(out, r.0);
        put_u64(out, h.0);
    }
}

/// One origin's counter totals: `n` (u64), `int` (i128), `float` (`Dec`), as `put_observed`
/// writes them.
/// `n`, with its top bit set when the run is named (not the original run `Hlc::ZERO`) and
/// the run's hlc after it, then the sums. Totals written before runs existed read as the
/// original run.
pub fn put_totals(out: &mut Vec<u8>, t: &IncTotals) {
    if t.run == Hlc::ZERO {
        put_u64(out, t.n);
    } else {
        put_u64(out, t.n | TOTALS_RUN_FLAG);
        put_u64(out, t.run.0);
    }
    out.extend_from_slice(&t.int.to_le_bytes());
    put_dec(out, &t.float);
}

/// The top bit of `n` in `put_totals`: a run's hlc follows.
const TOTALS_RUN_FLAG: u64 = 1 << 63;

/// Totals as an increment op carries them, compactly (most are a few bytes): a flags byte
/// (`NEAR_FLOAT`: a float sum follows; `NEAR_INT_WIDE`: the integer sum takes 16 bytes, not
/// a zigzag varint), the distance from `hlc` (the op's own, never below the run's) back to
/// the run as a varint, `n` as a varint, the integer sum, then the float sum if any.
/// `None` when the run is above `hlc` (no op names a run that starts after it).
pub fn put_totals_near(out: &mut Vec<u8>, t: &IncTotals, hlc: Hlc) -> Option<()> {
    let back = hlc.0.checked_sub(t.run.0)?;
    let narrow = i64::try_from(t.int).ok();
    let mut flags = 0u8;
    if t.float != Dec::ZERO {
        flags |= NEAR_FLOAT;
    }
    if narrow.is_none() {
        flags |= NEAR_INT_WIDE;
    }
    put_u8(out, flags);
    put_varint(out, back);
    put_varint(out, t.n);
    match narrow {
        Some(v) => put_varint(out, ((v << 1) ^ (v >> 63)) as u64),
        None => out.extend_from_slice(&t.int.to_le_bytes()),
    }
    if t.float != Dec::ZERO {
        put_dec(out, &t.float);
    }
    Some(())
}

const NEAR_FLOAT: u8 = 1;
const NEAR_INT_WIDE: u8 = 2;

/// `None` as 0; `Some(stamp)` as 1 and the stamp.
pub fn put_opt_stamp(out: &mut Vec<u8>, s: Option<Stamp>) {
    match s {
        None => put_u8(out, 0),
        Some(s) => {
            put_u8(out, 1);
            put_stamp(out, s);
        }
    }
}

pub fn put_bool(out: &mut Vec<u8>, v: bool) {
    put_u8(out, u8::from(v));
}

pub fn put_observed(out: &mut Vec<u8>, o: &Observed) {
    put_vv(out, &o.stamps);
    put_varint(out, o.incs.len() as u64);
    for (r, t) in &o.incs {
        put_u32(out, r.0);
        put_totals(out, t);
    }
}

/// A value held by a register (`MvReg<T>`), encodable in a state snapshot.
pub trait StateCodec: Sized {
    fn put_state(&self, out: &mut Vec<u8>);
    fn read_state(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

impl StateCodec for SmallBytes {
    fn put_state(&self, out: &mut Vec<u8>) {
        put_bytes(out, self.as_slice());
    }

    fn read_state(r: &mut Reader<'_>) -> Result<SmallBytes, DecodeError> {
        Ok(SmallBytes::copy_from(r.bytes()?))
    }
}

/// A bounds-checked reader over an encoded value.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    /// Bytes consumed so far.
    pub fn pos(&self) -> usize {
        self.pos
    }

    pub fn is_at_end(&self) -> bool {
        self.pos == self.buf.len()
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.pos.checked_add(n).ok_or(DecodeError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(DecodeError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    pub fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8, DecodeError> {
        let [b] = self.array::<1>()?;
        Ok(b)
    }

    pub fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    pub fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    pub fn i64(&mut self) -> Result<i64, DecodeError> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// A float that is not NaN (Redis never stores NaN scores or values).
    pub fn f64(&mut self) -> Result<f64, DecodeError> {
        let v = f64::from_bits(self.u64()?);
        if v.is_nan() {
            Err(DecodeError::BadFloat)
        } else {
            Ok(v)
        }
    }

    pub fn varint(&mut self) -> Result<u64, DecodeError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(DecodeError::Truncated)
    }

    /// A length-prefixed byte string, borrowed.
    pub fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let n = usize::try_from(self.varint()?).map_err(|_| DecodeError::Truncated)?;
        self.take(n)
    }

    /// Bytes left to read.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// A count of following items of at least `min_bytes` bytes each (members of a
    /// collection, which may be many more than `ENTRIES_MAX`): the count must fit in the bytes
    /// left, so a short input cannot declare a huge one. Reserve with `prealloc` all the same.
    pub fn items(&mut self, min_bytes: usize) -> Result<usize, DecodeError> {
        let n = self.varint()?;
        let fits = self.remaining() / min_bytes.max(1);
        if n > fits as u64 {
            // The input ends before the items it declares could.
            return Err(DecodeError::Truncated);
        }
        Ok(n as usize)
    }

    /// A count of following entries, at most `ENTRIES_MAX`.
    pub fn count(&mut self, what: &'static str) -> Result<usize, DecodeError> {
        let n = self.varint()?;
        if n > ENTRIES_MAX as u64 {
            return Err(DecodeError::TooManyEntries { what, n });
        }
        Ok(n as usize)
    }

    pub fn stamp(&mut self) -> Result<Stamp, DecodeError> {
        let hlc = Hlc(self.u64()?);
        let replica = ReplicaId(self.u32()?);
        Ok(Stamp { hlc, replica })
    }

    pub fn dec(&mut self) -> Result<Dec, DecodeError> {
        let coef = i128::from_le_bytes(self.array()?);
        let exp = i32::from_le_bytes(self.array()?);
        Dec::from_parts(coef, exp).ok_or(DecodeError::BadDecimal)
    }

    pub fn vv(&mut self) -> Result<VersionVector, DecodeError> {
        let n = self.count("version vector")?;
        let mut vv = VersionVector::new();
        for _ in 0..n {
            let replica = ReplicaId(self.u32()?);
            let hlc = Hlc(self.u64()?);
            vv.observe(Stamp { hlc, replica });
        }
        Ok(vv)
    }

    pub fn i128(&mut self) -> Result<i128, DecodeError> {
        Ok(i128::from_le_bytes(self.array()?))
    }

    /// A byte that must be 0 or 1.
    pub fn bool(&mut self) -> Result<bool, DecodeError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            t => Err(DecodeError::BadTag(t)),
        }
    }

    /// Counter totals as `put_totals` writes them.
    /// Totals as `put_totals` writes them. `Invalid`: a named run of hlc zero.
    pub fn totals(&mut self) -> Result<IncTotals, DecodeError> {
        let raw = self.u64()?;
        let run = if raw & TOTALS_RUN_FLAG != 0 {
            let run = Hlc(self.u64()?);
            if run == Hlc::ZERO {
                return Err(DecodeError::Invalid("counter run of hlc zero"));
            }
            run
        } else {
            Hlc::ZERO
        };
        let n = raw & !TOTALS_RUN_FLAG;
        let int = self.i128()?;
        let float = self.dec()?;
        Ok(IncTotals { run, n, int, float })
    }

    /// Totals as `put_totals_near` wrote them for an op of `hlc`. `Invalid`: unknown flags,
    /// a run above `hlc`.
    pub fn totals_near(&mut self, hlc: Hlc) -> Result<IncTotals, DecodeError> {
        let flags = self.u8()?;
        if flags & !(NEAR_FLOAT | NEAR_INT_WIDE) != 0 {
            return Err(DecodeError::Invalid("increment totals flags"));
        }
        let back = self.varint()?;
        let run = Hlc(hlc
            .0
            .checked_sub(back)
            .ok_or(DecodeError::Invalid("increment run after its op"))?);
        let n = self.varint()?;
        let int = if flags & NEAR_INT_WIDE != 0 {
            self.i128()?
        } else {
            let z = self.varint()?;
            i128::from(((z >> 1) as i64) ^ -((z & 1) as i64))
        };
        let float = if flags & NEAR_FLOAT != 0 {
            self.dec()?
        } else {
            Dec::ZERO
        };
        Ok(IncTotals { run, n, int, float })
    }

    /// An optional stamp as `put_opt_stamp` writes it.
    pub fn opt_stamp(&mut self) -> Result<Option<Stamp>, DecodeError> {
        Ok(if self.bool()? {
            Some(self.stamp()?)
        } else {
            None
        })
    }

    /// A version vector as `put_vv` writes it, exactly in its invariant form: replicas
    /// strictly increasing, every hlc above zero. Anything else is `Invalid` (a state encoder
    /// never writes it, so it is corruption), where `vv` would silently normalize it.
    pub fn vv_strict(&mut self) -> Result<VersionVector, DecodeError> {
        let n = self.count("version vector")?;
        let mut vv = VersionVector::new();
        let mut prev: Option<ReplicaId> = None;
        for _ in 0..n {
            let replica = ReplicaId(self.u32()?);
            let hlc = Hlc(self.u64()?);
            if prev.is_some_and(|p| p >= replica) {
                return Err(DecodeError::Invalid("version vector not sorted"));
            }
            if hlc == Hlc::ZERO {
                return Err(DecodeError::Invalid("version vector zero entry"));
            }
            prev = Some(replica);
            vv.observe(Stamp { hlc, replica });
        }
        Ok(vv)
    }

    pub fn observed(&mut self) -> Result<Observed, DecodeError> {
        let stamps = self.vv()?;
        let n = self.count("counter origins")?;
        let mut incs = SmallVec::new();
        for _ in 0..n {
            let r = ReplicaId(self.u32()?);
            incs.push((r, self.totals()?));
        }
        Ok(Observed { stamps, incs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Totals round-trip both ways (state and op forms), with named and original runs,
    /// narrow and wide integer sums, float sums; the op form is a few bytes for a small
    /// counter, refuses a run after its op, and every truncation is an error.
    #[test]
    fn totals_round_trip_in_both_forms() {
        let hlc = Hlc(117_689_760_389_988_352);
        let cases = [
            IncTotals {
                run: Hlc(hlc.0 - 5_000 * 65_536),
                n: 3,
                int: -7,
                float: Dec::ZERO,
            },
            IncTotals {
                run: Hlc::ZERO,
                n: 1 << 40,
                int: i128::from(i64::MAX) * 4,
                float: Dec::parse(b"-0.125").unwrap(),
            },
            IncTotals {
                run: hlc,
                n: 1,
                int: i128::from(i64::MIN),
                float: Dec::ZERO,
            },
        ];
        for t in cases {
            let mut out = Vec::new();
            put_totals(&mut out, &t);
            let mut r = Reader::new(&out);
            assert_eq!(r.totals().unwrap(), t);
            assert!(r.is_at_end());
            let mut near = Vec::new();
            put_totals_near(&mut near, &t, hlc).unwrap();
            let mut r = Reader::new(&near);
            assert_eq!(r.totals_near(hlc).unwrap(), t);
            assert!(r.is_at_end());
            for cut in 0..near.len() {
                assert!(Reader::new(&near[..cut]).totals_near(hlc).is_err());
            }
        }
        let mut small = Vec::new();
        put_totals_near(&mut small, &cases[0], hlc).unwrap();
        assert!(small.len() <= 8, "{} bytes", small.len());
        // A run after the op's hlc: refused both ways.
        assert!(put_totals_near(&mut Vec::new(), &cases[2], Hlc(hlc.0 - 1)).is_none());
        assert!(Reader::new(&small).totals_near(Hlc(1)).is_err());
        // Unknown flags.
        let mut bad = small.clone();
        bad[0] = 0x80;
        assert!(Reader::new(&bad).totals_near(hlc).is_err());
    }

    #[test]
    fn building_blocks_round_trip_and_truncation_is_an_error() {
        let mut out = Vec::new();
        put_varint(&mut out, 300);
        put_bytes(&mut out, b"ab\0");
        put_stamp(
            &mut out,
            Stamp {
                hlc: Hlc(7),
                replica: ReplicaId(9),
            },
        );
        put_f64(&mut out, -1.5);
        let mut r = Reader::new(&out);
        assert_eq!(r.varint().unwrap(), 300);
        assert_eq!(r.bytes().unwrap(), b"ab\0");
        assert_eq!(
            r.stamp().unwrap(),
            Stamp {
                hlc: Hlc(7),
                replica: ReplicaId(9)
            }
        );
        assert_eq!(r.f64().unwrap(), -1.5);
        assert!(r.is_at_end());
        for cut in 0..out.len() {
            let mut r = Reader::new(&out[..cut]);
            let ok =
                r.varint().is_ok() && r.bytes().is_ok() && r.stamp().is_ok() && r.f64().is_ok();
            assert!(!ok, "cut at {cut}");
        }
    }

    #[test]
    fn strict_vectors_reject_what_the_encoder_never_writes() {
        let vv_bytes = |entries: &[(u32, u64)]| {
            let mut out = Vec::new();
            put_varint(&mut out, entries.len() as u64);
            for &(r, h) in entries {
                put_u32(&mut out, r);
                put_u64(&mut out, h);
            }
            out
        };
        let ok = vv_bytes(&[(1, 5), (3, 2)]);
        let vv = Reader::new(&ok).vv_strict().unwrap();
        let mut again = Vec::new();
        put_vv(&mut again, &vv);
        assert_eq!(again, ok);
        for bad in [
            vv_bytes(&[(3, 2), (1, 5)]),
            vv_bytes(&[(1, 2), (1, 5)]),
            vv_bytes(&[(1, 0)]),
        ] {
            assert!(matches!(
                Reader::new(&bad).vv_strict(),
                Err(DecodeError::Invalid(_))
            ));
        }
        assert_eq!(prealloc(usize::MAX), PREALLOC_MAX);
    }

    #[test]
    fn counts_are_limited_before_allocation() {
        let mut out = Vec::new();
        put_varint(&mut out, ENTRIES_MAX as u64 + 1);
        assert!(matches!(
            Reader::new(&out).count("x"),
            Err(DecodeError::TooManyEntries { .. })
        ));
        let mut out = Vec::new();
        put_u64(&mut out, f64::NAN.to_bits());
        assert_eq!(Reader::new(&out).f64(), Err(DecodeError::BadFloat));
    }
}

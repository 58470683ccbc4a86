//! The op log: every write this shard originated, encoded once, kept in memory up to a byte
//! budget (`backlog_bytes_max`), oldest chunks dropped first.
//!
//! Each record is `{origin, seq, hlc, db, key, effect}` in the binary format below, written
//! straight from borrowed data (no owned op is built on the write path). The syncer streams
//! these bytes to peers and resumes from a sequence number while it is still retained.
//!
//! Record format (all integers little-endian):
//! `len:u32` (bytes after this field) `seq:u64 hlc:u64 origin:u32 db:u16 key:bytes tag:u8 payload`,
//! where `bytes` is `varint length + data`, `vv` is `varint n + n × (replica:u32 hlc:u64)`,
//! `dec` is `coef:i128 exp:i32`, and payloads are: Assign `keep_ttl:u8 observed value:bytes`;
//! Incr `0 i64` or `1 dec`; Remove `observed`; Expire `0` (persist) or `1 at_ms:u64`, then `vv`;
//! SetAdd `member:bytes`; SetRem `member:bytes vv`. `observed` is `vv varint n × (replica:u32
//! n:u64 int:i128 float:dec)`.

use std::collections::VecDeque;

use meridian_crdt::op::Observed;
use meridian_crdt::{Dec, Delta, Effect, Expire, Hlc, IncTotals, ReplicaId, Stamp, VersionVector};

/// Size at which the current chunk is sealed and a new one started.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Largest record the decoder accepts (a key and a value at proto-max-bulk-len, plus framing).
pub const RECORD_BYTES_MAX: usize = 1024 * 1024 * 1024 + 64 * 1024;
/// Most version-vector entries or counter origins in one record.
pub const VV_ENTRIES_MAX: usize = 4096;

#[derive(Debug)]
struct Chunk {
    first_seq: u64,
    last_seq: u64,
    ops: u64,
    buf: Vec<u8>,
}

/// The in-memory op log of one shard.
#[derive(Debug)]
pub struct OpLog {
    origin: ReplicaId,
    // Invariant: chunks hold consecutive sequence numbers, oldest first; `bytes` is the sum
    // of their buffer lengths.
    chunks: VecDeque<Chunk>,
    bytes: usize,
    bytes_max: u64,
}

impl OpLog {
    pub fn new(origin: ReplicaId, bytes_max: u64) -> OpLog {
        OpLog {
            origin,
            chunks: VecDeque::new(),
            bytes: 0,
            bytes_max,
        }
    }

    pub fn set_bytes_max(&mut self, bytes_max: u64) {
        self.bytes_max = bytes_max;
        self.trim();
    }

    /// Bytes retained.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Ops retained.
    pub fn ops(&self) -> u64 {
        self.chunks.iter().map(|c| c.ops).sum()
    }

    /// Oldest sequence number still retained (None when empty).
    pub fn first_seq(&self) -> Option<u64> {
        self.chunks.front().map(|c| c.first_seq)
    }

    /// Appends one op. `seq` must be the previous one plus 1.
    pub fn append<B: AsRef<[u8]>>(
        &mut self,
        seq: u64,
        hlc: Hlc,
        db: usize,
        key: &[u8],
        effect: &Effect<B>,
    ) {
        let needs_new = self
            .chunks
            .back()
            .is_none_or(|c| c.buf.len() >= CHUNK_BYTES);
        if needs_new {
            self.chunks.push_back(Chunk {
                first_seq: seq,
                last_seq: seq,
                ops: 0,
                buf: Vec::with_capacity(CHUNK_BYTES),
            });
        }
        let Some(chunk) = self.chunks.back_mut() else {
            return;
        };
        let before = chunk.buf.len();
        encode(
            &mut chunk.buf,
            self.origin,
            seq,
            hlc,
            db as u16,
            key,
            effect,
        );
        chunk.last_seq = seq;
        chunk.ops += 1;
        self.bytes += chunk.buf.len() - before;
        self.trim();
    }

    fn trim(&mut self) {
        while self.bytes as u64 > self.bytes_max && self.chunks.len() > 1 {
            if let Some(c) = self.chunks.pop_front() {
                self.bytes -= c.buf.len();
            }
        }
    }

    /// Encoded records with sequence numbers ≥ `from_seq`, as contiguous byte slices (the
    /// first may start mid-chunk). None when `from_seq` is older than what is retained.
    pub fn since(&self, from_seq: u64) -> Option<Vec<&[u8]>> {
        let first = self.first_seq()?;
        if from_seq < first {
            return None;
        }
        let mut out = Vec::new();
        for c in &self.chunks {
            if c.last_seq < from_seq {
                continue;
            }
            let mut pos = 0usize;
            if c.first_seq < from_seq {
                // Skip records before from_seq inside this chunk.
                while pos < c.buf.len() {
                    match decode(c.buf.get(pos..).unwrap_or_default()) {
                        Ok((rec, used)) if rec.seq < from_seq => pos += used,
                        _ => break,
                    }
                }
            }
            out.push(c.buf.get(pos..).unwrap_or_default());
        }
        Some(out)
    }
}

/// One decoded op.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpRecord {
    pub origin: ReplicaId,
    pub seq: u64,
    pub hlc: Hlc,
    pub db: u16,
    pub key: Vec<u8>,
    pub effect: Effect<Vec<u8>>,
}

impl OpRecord {
    pub fn stamp(&self) -> Stamp {
        Stamp {
            hlc: self.hlc,
            replica: self.origin,
        }
    }
}

/// Why bytes did not decode as an op record.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpDecodeError {
    #[error("record truncated")]
    Truncated,
    #[error("record of {len} bytes exceeds {max}")]
    TooLarge { len: usize, max: usize },
    #[error("unknown effect tag {0}")]
    BadTag(u8),
    #[error("{what}: {n} entries exceed {max}")]
    TooManyEntries {
        what: &'static str,
        n: usize,
        max: usize,
    },
    #[error("decimal out of range")]
    BadDecimal,
    #[error("record length {len} does not match its contents ({used} bytes used)")]
    LengthMismatch { len: usize, used: usize },
}

const TAG_ASSIGN: u8 = 1;
const TAG_INCR: u8 = 2;
const TAG_REMOVE: u8 = 3;
const TAG_EXPIRE: u8 = 4;
const TAG_SET_ADD: u8 = 5;
const TAG_SET_REM: u8 = 6;

/// Appends one record to `out`.
pub fn encode<B: AsRef<[u8]>>(
    out: &mut Vec<u8>,
    origin: ReplicaId,
    seq: u64,
    hlc: Hlc,
    db: u16,
    key: &[u8],
    effect: &Effect<B>,
) {
    let len_at = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&hlc.0.to_le_bytes());
    out.extend_from_slice(&origin.0.to_le_bytes());
    out.extend_from_slice(&db.to_le_bytes());
    put_bytes(out, key);
    match effect {
        Effect::Assign {
            value,
            observed,
            keep_ttl,
        } => {
            out.push(TAG_ASSIGN);
            out.push(u8::from(*keep_ttl));
            put_observed(out, observed);
            put_bytes(out, value.as_ref());
        }
        Effect::Incr { delta } => {
            out.push(TAG_INCR);
            match delta {
                Delta::Int(n) => {
                    out.push(0);
                    out.extend_from_slice(&n.to_le_bytes());
                }
                Delta::Float(d) => {
                    out.push(1);
                    put_dec(out, d);
                }
            }
        }
        Effect::Remove { observed } => {
            out.push(TAG_REMOVE);
            put_observed(out, observed);
        }
        Effect::Expire { expire, observed } => {
            out.push(TAG_EXPIRE);
            match expire {
                Expire::Persist => out.push(0),
                Expire::AtMs(at) => {
                    out.push(1);
                    out.extend_from_slice(&at.to_le_bytes());
                }
            }
            put_vv(out, observed);
        }
        Effect::SetAdd { member } => {
            out.push(TAG_SET_ADD);
            put_bytes(out, member.as_ref());
        }
        Effect::SetRem { member, observed } => {
            out.push(TAG_SET_REM);
            put_bytes(out, member.as_ref());
            put_vv(out, observed);
        }
    }
    let len = (out.len() - len_at - 4) as u32;
    if let Some(slot) = out.get_mut(len_at..len_at + 4) {
        slot.copy_from_slice(&len.to_le_bytes());
    }
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_varint(out, b.len() as u64);
    out.extend_from_slice(b);
}

fn put_dec(out: &mut Vec<u8>, d: &Dec) {
    let (coef, exp) = d.to_parts();
    out.extend_from_slice(&coef.to_le_bytes());
    out.extend_from_slice(&exp.to_le_bytes());
}

fn put_vv(out: &mut Vec<u8>, vv: &VersionVector) {
    put_varint(out, vv.len() as u64);
    for (r, h) in vv.iter() {
        out.extend_from_slice(&r.0.to_le_bytes());
        out.extend_from_slice(&h.0.to_le_bytes());
    }
}

fn put_observed(out: &mut Vec<u8>, o: &Observed) {
    put_vv(out, &o.stamps);
    put_varint(out, o.incs.len() as u64);
    for (r, t) in &o.incs {
        out.extend_from_slice(&r.0.to_le_bytes());
        out.extend_from_slice(&t.n.to_le_bytes());
        out.extend_from_slice(&t.int.to_le_bytes());
        put_dec(out, &t.float);
    }
}

/// A bounds-checked reader over one record.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], OpDecodeError> {
        let end = self.pos.checked_add(n).ok_or(OpDecodeError::Truncated)?;
        let s = self
            .buf
            .get(self.pos..end)
            .ok_or(OpDecodeError::Truncated)?;
        self.pos = end;
        Ok(s)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], OpDecodeError> {
        let s = self.take(N)?;
        let mut a = [0u8; N];
        a.copy_from_slice(s);
        Ok(a)
    }

    fn u8(&mut self) -> Result<u8, OpDecodeError> {
        Ok(self.array::<1>()?[0])
    }

    fn varint(&mut self) -> Result<u64, OpDecodeError> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(OpDecodeError::Truncated)
    }

    fn bytes(&mut self) -> Result<Vec<u8>, OpDecodeError> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| OpDecodeError::Truncated)?;
        Ok(self.take(n)?.to_vec())
    }

    fn count(&mut self, what: &'static str) -> Result<usize, OpDecodeError> {
        let n = self.varint()? as usize;
        if n > VV_ENTRIES_MAX {
            return Err(OpDecodeError::TooManyEntries {
                what,
                n,
                max: VV_ENTRIES_MAX,
            });
        }
        Ok(n)
    }

    fn dec(&mut self) -> Result<Dec, OpDecodeError> {
        let coef = i128::from_le_bytes(self.array()?);
        let exp = i32::from_le_bytes(self.array()?);
        Dec::from_parts(coef, exp).ok_or(OpDecodeError::BadDecimal)
    }

    fn vv(&mut self) -> Result<VersionVector, OpDecodeError> {
        let n = self.count("version vector")?;
        let mut vv = VersionVector::new();
        for _ in 0..n {
            let r = u32::from_le_bytes(self.array()?);
            let h = u64::from_le_bytes(self.array()?);
            vv.observe(Stamp {
                hlc: Hlc(h),
                replica: ReplicaId(r),
            });
        }
        Ok(vv)
    }

    fn observed(&mut self) -> Result<Observed, OpDecodeError> {
        let stamps = self.vv()?;
        let n = self.count("counter origins")?;
        let mut incs = smallvec::SmallVec::new();
        for _ in 0..n {
            let r = ReplicaId(u32::from_le_bytes(self.array()?));
            let total_n = u64::from_le_bytes(self.array()?);
            let int = i128::from_le_bytes(self.array()?);
            let float = self.dec()?;
            incs.push((
                r,
                IncTotals {
                    n: total_n,
                    int,
                    float,
                },
            ));
        }
        Ok(Observed { stamps, incs })
    }
}

/// Decodes the record at the start of `buf`; returns it and the bytes it used.
pub fn decode(buf: &[u8]) -> Result<(OpRecord, usize), OpDecodeError> {
    let mut r = Reader { buf, pos: 0 };
    let len = u32::from_le_bytes(r.array()?) as usize;
    if len > RECORD_BYTES_MAX {
        return Err(OpDecodeError::TooLarge {
            len,
            max: RECORD_BYTES_MAX,
        });
    }
    let body = r.take(len)?;
    let mut b = Reader { buf: body, pos: 0 };
    let seq = u64::from_le_bytes(b.array()?);
    let hlc = Hlc(u64::from_le_bytes(b.array()?));
    let origin = ReplicaId(u32::from_le_bytes(b.array()?));
    let db = u16::from_le_bytes(b.array()?);
    let key = b.bytes()?;
    let tag = b.u8()?;
    let effect = match tag {
        TAG_ASSIGN => {
            let keep_ttl = b.u8()? != 0;
            let observed = b.observed()?;
            let value = b.bytes()?;
            Effect::Assign {
                value,
                observed,
                keep_ttl,
            }
        }
        TAG_INCR => match b.u8()? {
            0 => Effect::Incr {
                delta: Delta::Int(i64::from_le_bytes(b.array()?)),
            },
            1 => Effect::Incr {
                delta: Delta::Float(b.dec()?),
            },
            other => return Err(OpDecodeError::BadTag(other)),
        },
        TAG_REMOVE => Effect::Remove {
            observed: b.observed()?,
        },
        TAG_EXPIRE => {
            let expire = match b.u8()? {
                0 => Expire::Persist,
                1 => Expire::AtMs(u64::from_le_bytes(b.array()?)),
                other => return Err(OpDecodeError::BadTag(other)),
            };
            Effect::Expire {
                expire,
                observed: b.vv()?,
            }
        }
        TAG_SET_ADD => Effect::SetAdd { member: b.bytes()? },
        TAG_SET_REM => {
            let member = b.bytes()?;
            Effect::SetRem {
                member,
                observed: b.vv()?,
            }
        }
        other => return Err(OpDecodeError::BadTag(other)),
    };
    if b.pos != body.len() {
        return Err(OpDecodeError::LengthMismatch { len, used: b.pos });
    }
    Ok((
        OpRecord {
            origin,
            seq,
            hlc,
            db,
            key,
            effect,
        },
        r.pos,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vv(entries: &[(u32, u64)]) -> VersionVector {
        let mut v = VersionVector::new();
        for &(r, h) in entries {
            v.observe(Stamp {
                hlc: Hlc(h),
                replica: ReplicaId(r),
            });
        }
        v
    }

    fn effects() -> Vec<Effect<Vec<u8>>> {
        let mut incs = smallvec::SmallVec::new();
        incs.push((
            ReplicaId(9),
            IncTotals {
                n: 3,
                int: -7,
                float: Dec::parse(b"1.25").unwrap(),
            },
        ));
        let observed = Observed {
            stamps: vv(&[(1, 5), (2, 8)]),
            incs,
        };
        vec![
            Effect::Assign {
                value: b"v\0\r\n".to_vec(),
                observed: observed.clone(),
                keep_ttl: true,
            },
            Effect::Incr {
                delta: Delta::Int(-42),
            },
            Effect::Incr {
                delta: Delta::Float(Dec::parse(b"-0.1").unwrap()),
            },
            Effect::Remove { observed },
            Effect::Expire {
                expire: Expire::AtMs(123),
                observed: vv(&[(1, 1)]),
            },
            Effect::Expire {
                expire: Expire::Persist,
                observed: VersionVector::new(),
            },
            Effect::SetAdd {
                member: b"m".to_vec(),
            },
            Effect::SetRem {
                member: b"m".to_vec(),
                observed: vv(&[(3, 3)]),
            },
        ]
    }

    #[test]
    fn every_effect_round_trips() {
        for (i, e) in effects().into_iter().enumerate() {
            let mut buf = Vec::new();
            encode(&mut buf, ReplicaId(7), i as u64 + 1, Hlc(99), 3, b"key", &e);
            let (rec, used) = decode(&buf).unwrap();
            assert_eq!(used, buf.len());
            assert_eq!(
                rec,
                OpRecord {
                    origin: ReplicaId(7),
                    seq: i as u64 + 1,
                    hlc: Hlc(99),
                    db: 3,
                    key: b"key".to_vec(),
                    effect: e
                }
            );
        }
    }

    #[test]
    fn truncated_and_corrupt_records_are_errors_not_panics() {
        let mut buf = Vec::new();
        encode(&mut buf, ReplicaId(7), 1, Hlc(1), 0, b"k", &effects()[0]);
        for cut in 0..buf.len() {
            assert!(decode(&buf[..cut]).is_err(), "cut at {cut}");
        }
        for i in 0..buf.len() {
            let mut bad = buf.clone();
            bad[i] ^= 0xff;
            let _ = decode(&bad);
        }
        let mut bad = buf.clone();
        bad[0..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(decode(&bad), Err(OpDecodeError::TooLarge { .. })));
    }

    #[test]
    fn log_is_bounded_by_bytes_and_resumes_by_sequence() {
        let mut log = OpLog::new(ReplicaId(1), (3 * CHUNK_BYTES) as u64);
        let value = vec![b'x'; 1000];
        for seq in 1..=1000u64 {
            let e: Effect<&[u8]> = Effect::Assign {
                value: &value,
                observed: Observed::new(),
                keep_ttl: false,
            };
            log.append(seq, Hlc(seq), 0, b"k", &e);
        }
        assert!(log.bytes() as u64 <= (3 * CHUNK_BYTES + 2000) as u64);
        let first = log.first_seq().unwrap();
        assert!(first > 1);
        assert!(log.since(first - 1).is_none());
        let parts = log.since(990).unwrap();
        let mut seqs = Vec::new();
        for p in parts {
            let mut pos = 0;
            while pos < p.len() {
                let (rec, used) = decode(&p[pos..]).unwrap();
                seqs.push(rec.seq);
                pos += used;
            }
        }
        assert_eq!(seqs, (990..=1000).collect::<Vec<_>>());
    }
}

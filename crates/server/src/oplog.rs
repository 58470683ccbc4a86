//! The op log: every write this shard originated, encoded once, kept in memory up to a byte
//! budget (`backlog_bytes_max` of sealed chunks, at least one, plus the chunk being written), oldest chunks
//! dropped first.
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

use meridian_crdt::codec::{DecodeError, Reader, put_bytes, put_dec, put_observed, put_u8, put_vv};
use meridian_crdt::{
    Delta, Effect, Expire, Hlc, IncAt, ReplicaId, Stamp, hash, hll, list, stream, zset,
};

/// Size at which the current chunk is sealed and a new one started.
pub const CHUNK_BYTES: usize = 64 * 1024;
/// Largest record the decoder accepts (a key and a value at proto-max-bulk-len, plus framing).
pub const RECORD_BYTES_MAX: usize = 1024 * 1024 * 1024 + 64 * 1024;

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
    /// Whether any peer may resume from the retained ops. A site with no peers keeps only the
    /// chunk being written: a backlog nobody can read would be memory spent for nothing.
    retain_for_peers: bool,
}

impl OpLog {
    pub fn new(origin: ReplicaId, bytes_max: u64) -> OpLog {
        OpLog {
            origin,
            chunks: VecDeque::new(),
            bytes: 0,
            bytes_max,
            retain_for_peers: true,
        }
    }

    /// The origin of the ops appended from now on (a new life's replica id); records already
    /// in the log keep theirs.
    pub fn set_origin(&mut self, origin: ReplicaId) {
        self.origin = origin;
    }

    /// Keeps `bytes_max` of ops when peers exist; only the current chunk when none do.
    pub fn set_retain_for_peers(&mut self, retain: bool) {
        self.retain_for_peers = retain;
        self.trim();
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

    /// Appends one op and returns its encoded record. `seq` must be the previous one plus 1.
    pub fn append<B: AsRef<[u8]>>(
        &mut self,
        seq: u64,
        hlc: Hlc,
        db: usize,
        key: &[u8],
        effect: &Effect<B>,
    ) -> &[u8] {
        let origin = self.origin;
        self.append_with(seq, |buf| {
            encode(buf, origin, seq, hlc, db as u16, key, effect)
        })
    }

    /// Appends a record already encoded (recovery replays the on-disk log).
    pub fn append_raw(&mut self, seq: u64, record: &[u8]) {
        self.append_with(seq, |buf| buf.extend_from_slice(record));
    }

    /// Appends one Pub/Sub record (PUBLISH/SPUBLISH for the other sites).
    pub fn append_publish(
        &mut self,
        seq: u64,
        hlc: Hlc,
        channel: &[u8],
        message: &[u8],
        sharded: bool,
    ) -> &[u8] {
        let origin = self.origin;
        self.append_with(seq, |buf| {
            encode_publish(buf, origin, seq, hlc, channel, message, sharded)
        })
    }

    /// Appends one FUNCTION library record (a library loaded with `code`, or deleted).
    pub fn append_library(
        &mut self,
        seq: u64,
        hlc: Hlc,
        name: &[u8],
        code: Option<&[u8]>,
    ) -> &[u8] {
        let origin = self.origin;
        self.append_with(seq, |buf| encode_library(buf, origin, seq, hlc, name, code))
    }

    fn append_with(&mut self, seq: u64, write: impl FnOnce(&mut Vec<u8>)) -> &[u8] {
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
            return &[];
        };
        let before = chunk.buf.len();
        write(&mut chunk.buf);
        chunk.last_seq = seq;
        chunk.ops += 1;
        self.bytes += chunk.buf.len() - before;
        self.trim();
        // The chunk written to is never trimmed (trim keeps the newest).
        self.chunks
            .back()
            .and_then(|c| c.buf.get(before..))
            .unwrap_or_default()
    }

    /// The hlc of the record with sequence number `seq`, if retained (lag in milliseconds).
    pub fn hlc_of(&self, seq: u64) -> Option<Hlc> {
        let parts = self.since(seq)?;
        let body = parts.first()?.get(4 + 8..4 + 16)?;
        Some(Hlc(u64::from_le_bytes(body.try_into().ok()?)))
    }

    /// Bytes of the retained records with sequence numbers above `seq` (lag in bytes).
    pub fn bytes_after(&self, seq: u64) -> usize {
        match self.since(seq.saturating_add(1)) {
            Some(parts) => parts.iter().map(|p| p.len()).sum(),
            None => self.bytes,
        }
    }

    /// Drops the oldest chunks while the *sealed* ones exceed the budget, always keeping the
    /// newest sealed chunk when peers may read: the budget is `bytes_max` of sealed ops (at
    /// least one chunk) plus the chunk being written. Counting that one, or dropping the chunk
    /// just sealed, would let the first record of a new chunk evict ops a live peer is still
    /// reading: at a budget of one chunk, every live peer would be cut into a full sync once
    /// per chunk.
    fn trim(&mut self) {
        let (max, chunks_min) = if self.retain_for_peers {
            (self.bytes_max, 2)
        } else {
            (0, 1)
        };
        let current = self.chunks.back().map_or(0, |c| c.buf.len());
        while (self.bytes - current) as u64 > max && self.chunks.len() > chunks_min {
            if let Some(c) = self.chunks.pop_front() {
                self.bytes -= c.buf.len();
            }
        }
    }

    /// With no peers, drops the chunk being written once it is full (`CHUNK_BYTES` or more):
    /// nobody reads it, and a large record would otherwise stay in memory until the next
    /// write seals it. The periodic cycle calls this; the on-disk log is untouched.
    pub fn release_idle(&mut self) {
        if self.retain_for_peers {
            return;
        }
        if self
            .chunks
            .back()
            .is_some_and(|c| c.buf.len() >= CHUNK_BYTES)
        {
            if let Some(c) = self.chunks.pop_back() {
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
                // Skip records before from_seq inside this chunk, reading headers only.
                while let (Some(len), Some(seq)) =
                    (c.buf.get(pos..pos + 4), c.buf.get(pos + 4..pos + 12))
                {
                    let len = u32::from_le_bytes(len.try_into().unwrap_or([0; 4])) as usize;
                    let seq = u64::from_le_bytes(seq.try_into().unwrap_or([0; 8]));
                    if seq >= from_seq {
                        break;
                    }
                    pos += 4 + len;
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
    pub body: OpBody,
}

/// What an op record carries: a keyspace write, or a Pub/Sub message for the other sites.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpBody {
    Write(Effect<Vec<u8>>),
    /// PUBLISH (or SPUBLISH when `sharded`) of `message` on the channel in the record's key.
    Publish {
        message: Vec<u8>,
        sharded: bool,
    },
    /// The FUNCTION library named by the record's key was loaded with `code` (`None`:
    /// deleted). Library records of one name settle last-writer-wins by stamp
    /// (`script::replicate`).
    Library {
        code: Option<Vec<u8>>,
    },
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
    #[error("record of {len} bytes exceeds {max}")]
    TooLarge { len: usize, max: usize },
    #[error("record body: {0}")]
    Body(#[from] DecodeError),
    #[error("record length {len} does not match its contents ({used} bytes used)")]
    LengthMismatch { len: usize, used: usize },
}

const TAG_ASSIGN: u8 = 1;
const TAG_INCR: u8 = 2;
const TAG_REMOVE: u8 = 3;
const TAG_EXPIRE: u8 = 4;
const TAG_SET_ADD: u8 = 5;
const TAG_SET_REM: u8 = 6;
const TAG_HASH: u8 = 7;
const TAG_ZSET: u8 = 8;
const TAG_LIST: u8 = 9;
const TAG_HLL: u8 = 10;
const TAG_PUBLISH: u8 = 11;
const TAG_SPUBLISH: u8 = 12;
const TAG_LIBRARY_SET: u8 = 13;
const TAG_LIBRARY_DEL: u8 = 14;
const TAG_STREAM: u8 = 15;
const TAG_STR_EDIT: u8 = 16;
/// The byte after `TAG_EXPIRE`: a PERSIST, a deadline (its ms follow), or an
/// `Effect::ExpireRetire`.
const EXPIRE_PERSIST: u8 = 0;
const EXPIRE_AT: u8 = 1;
const EXPIRE_RETIRE: u8 = 2;

/// The byte after `TAG_INCR`: where the increment stands (`IncAt`; records written before
/// runs carry `INCR_AT_UNKNOWN`), and `INCR_FLOAT` for an INCRBYFLOAT delta. `INCR_AT_AFTER`
/// is followed, after the delta, by the totals (`codec::put_totals_near`, relative to the
/// record's hlc).
const INCR_AT_UNKNOWN: u8 = 0;
const INCR_AT_STARTS: u8 = 2;
const INCR_AT_AFTER: u8 = 4;
const INCR_FLOAT: u8 = 1;
/// Bytes of a record body before `db`: `seq:u64 hlc:u64 origin:u32` (the wire form keeps hlc).
const SEQ_HLC_ORIGIN_BYTES: usize = 20;

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
    let len_at = begin_record(out, origin, seq, hlc, db, key);
    match effect {
        Effect::Assign {
            value,
            observed,
            keep_ttl,
        } => {
            put_u8(out, TAG_ASSIGN);
            put_u8(out, u8::from(*keep_ttl));
            put_observed(out, observed);
            put_bytes(out, value.as_ref());
        }
        Effect::Incr { delta, at } => {
            put_u8(out, TAG_INCR);
            let place = match at {
                IncAt::Unknown => INCR_AT_UNKNOWN,
                IncAt::Starts => INCR_AT_STARTS,
                IncAt::After(_) => INCR_AT_AFTER,
            };
            match delta {
                Delta::Int(n) => {
                    put_u8(out, place);
                    out.extend_from_slice(&n.to_le_bytes());
                }
                Delta::Float(d) => {
                    put_u8(out, place | INCR_FLOAT);
                    put_dec(out, d);
                }
            }
            if let IncAt::After(t) = at {
                // A run never starts after an increment of it (`IncAt::After` is built from
                // the totals of earlier increments); were it to, the run is clamped to the
                // op's hlc rather than writing a record no site could read.
                if meridian_crdt::codec::put_totals_near(out, t, hlc).is_none() {
                    let clamped = meridian_crdt::IncTotals { run: hlc, ..*t };
                    let _ = meridian_crdt::codec::put_totals_near(out, &clamped, hlc);
                }
            }
        }
        Effect::StrEdit(edit) => {
            put_u8(out, TAG_STR_EDIT);
            meridian_crdt::string::encode_edit(edit, out);
        }
        Effect::Remove { observed } => {
            put_u8(out, TAG_REMOVE);
            put_observed(out, observed);
        }
        Effect::Expire { expire, observed } => {
            put_u8(out, TAG_EXPIRE);
            match expire {
                Expire::Persist => put_u8(out, EXPIRE_PERSIST),
                Expire::AtMs(at) => {
                    put_u8(out, EXPIRE_AT);
                    out.extend_from_slice(&at.to_le_bytes());
                }
            }
            put_vv(out, observed);
        }
        Effect::ExpireRetire { observed } => {
            put_u8(out, TAG_EXPIRE);
            put_u8(out, EXPIRE_RETIRE);
            put_vv(out, observed);
        }
        Effect::SetAdd { member } => {
            put_u8(out, TAG_SET_ADD);
            put_bytes(out, member.as_ref());
        }
        Effect::SetRem { member, observed } => {
            put_u8(out, TAG_SET_REM);
            put_bytes(out, member.as_ref());
            put_vv(out, observed);
        }
        Effect::Hash(op) => {
            put_u8(out, TAG_HASH);
            hash::encode_op(op, out);
        }
        Effect::ZSet(op) => {
            put_u8(out, TAG_ZSET);
            zset::encode_op(op, out);
        }
        Effect::List(op) => {
            put_u8(out, TAG_LIST);
            list::encode_op(op, out);
        }
        Effect::Hll(op) => {
            put_u8(out, TAG_HLL);
            hll::encode_op(op, out);
        }
        Effect::Stream(op) => {
            put_u8(out, TAG_STREAM);
            stream::codec::encode_op(op, out);
        }
    }
    end_record(out, len_at);
}

/// Appends one Pub/Sub record: `channel` in the key field, then `message:bytes`.
pub fn encode_publish(
    out: &mut Vec<u8>,
    origin: ReplicaId,
    seq: u64,
    hlc: Hlc,
    channel: &[u8],
    message: &[u8],
    sharded: bool,
) {
    let len_at = begin_record(out, origin, seq, hlc, 0, channel);
    put_u8(out, if sharded { TAG_SPUBLISH } else { TAG_PUBLISH });
    put_bytes(out, message);
    end_record(out, len_at);
}

/// Appends one library record: the library name in the key field, then `code:bytes` (set)
/// or nothing (deleted).
pub fn encode_library(
    out: &mut Vec<u8>,
    origin: ReplicaId,
    seq: u64,
    hlc: Hlc,
    name: &[u8],
    code: Option<&[u8]>,
) {
    let len_at = begin_record(out, origin, seq, hlc, 0, name);
    match code {
        Some(code) => {
            put_u8(out, TAG_LIBRARY_SET);
            put_bytes(out, code);
        }
        None => put_u8(out, TAG_LIBRARY_DEL),
    }
    end_record(out, len_at);
}

fn begin_record(
    out: &mut Vec<u8>,
    origin: ReplicaId,
    seq: u64,
    hlc: Hlc,
    db: u16,
    key: &[u8],
) -> usize {
    let len_at = out.len();
    out.extend_from_slice(&[0u8; 4]);
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&hlc.0.to_le_bytes());
    out.extend_from_slice(&origin.0.to_le_bytes());
    out.extend_from_slice(&db.to_le_bytes());
    put_bytes(out, key);
    len_at
}

fn end_record(out: &mut [u8], len_at: usize) {
    let len = (out.len() - len_at - 4) as u32;
    if let Some(slot) = out.get_mut(len_at..len_at + 4) {
        slot.copy_from_slice(&len.to_le_bytes());
    }
}

/// Copies log records (whole records, as `since` returns them) into `out` in the wire form of
/// docs/replication.md §4 (`len:varint hlc:u64 db:u16 key tag payload`), records of the first
/// record's origin only (a batch has one origin: the log may hold ops of earlier lives before
/// the current one's), until `bytes_max`
/// bytes were written or the input ends.
pub fn copy_to_wire(parts: &[&[u8]], out: &mut Vec<u8>, bytes_max: usize) -> WireBatch {
    copy_to_wire_upto(parts, out, bytes_max, u64::MAX)
}

/// `copy_to_wire`, stopping before the first record with a sequence number above `seq_max`.
pub fn copy_to_wire_upto(
    parts: &[&[u8]],
    out: &mut Vec<u8>,
    bytes_max: usize,
    seq_max: u64,
) -> WireBatch {
    let (mut n, mut first, mut last, mut first_hlc) = (0u32, 0u64, 0u64, Hlc::ZERO);
    let mut origin = [0u8; 4];
    let start = out.len();
    'parts: for part in parts {
        let mut pos = 0usize;
        while let Some(head) = part.get(pos..pos + 4) {
            if out.len() - start >= bytes_max {
                break 'parts;
            }
            let len = u32::from_le_bytes(head.try_into().unwrap_or([0; 4])) as usize;
            let Some(body) = part.get(pos + 4..pos + 4 + len) else {
                break 'parts;
            };
            let (Some(seq), Some(hlc), Some(from), Some(rest)) = (
                body.get(..8),
                body.get(8..16),
                body.get(16..SEQ_HLC_ORIGIN_BYTES),
                body.get(SEQ_HLC_ORIGIN_BYTES..),
            ) else {
                break 'parts;
            };
            let seq = u64::from_le_bytes(seq.try_into().unwrap_or([0; 8]));
            if seq > seq_max {
                break 'parts;
            }
            if n == 0 {
                first = seq;
                first_hlc = Hlc(u64::from_le_bytes(hlc.try_into().unwrap_or([0; 8])));
                origin.copy_from_slice(from);
            } else if from != origin {
                break 'parts;
            }
            last = seq;
            n += 1;
            meridian_crdt::codec::put_varint(out, (8 + rest.len()) as u64);
            out.extend_from_slice(hlc);
            out.extend_from_slice(rest);
            pos += 4 + len;
        }
    }
    WireBatch {
        count: n,
        first_seq: first,
        last_seq: last,
        first_hlc,
        origin: ReplicaId(u32::from_le_bytes(origin)),
    }
}

/// What `copy_to_wire_filtered` covered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SparseBatch {
    /// Records kept.
    pub count: u32,
    /// Sequence numbers and hlc of the first and last record covered, kept or not.
    pub first_seq: u64,
    pub last_seq: u64,
    pub first_hlc: Hlc,
    pub last_hlc: Hlc,
    pub origin: ReplicaId,
}

/// `copy_to_wire_upto` for a dialer that owns only some slots: covers the records of one
/// origin up to `seq_max` (at most `bytes_max` bytes of them kept), keeping those whose key
/// `keep` accepts, each preceded by its sequence number's distance from the first record
/// covered (`OpsSparse`). Records skipped still count as covered: the batch says how far the
/// origin's stream went.
pub fn copy_to_wire_filtered(
    parts: &[&[u8]],
    out: &mut Vec<u8>,
    bytes_max: usize,
    seq_max: u64,
    keep: &dyn Fn(&[u8]) -> bool,
) -> SparseBatch {
    let mut b = SparseBatch {
        count: 0,
        first_seq: 0,
        last_seq: 0,
        first_hlc: Hlc::ZERO,
        last_hlc: Hlc::ZERO,
        origin: ReplicaId(0),
    };
    let mut covered = 0u64;
    let mut origin = [0u8; 4];
    let start = out.len();
    'parts: for part in parts {
        let mut pos = 0usize;
        while let Some(head) = part.get(pos..pos + 4) {
            // Skipped records cost reading too: bound the records covered as well.
            if out.len() - start >= bytes_max || covered >= SPARSE_COVER_MAX {
                break 'parts;
            }
            let len = u32::from_le_bytes(head.try_into().unwrap_or([0; 4])) as usize;
            let Some(body) = part.get(pos + 4..pos + 4 + len) else {
                break 'parts;
            };
            let (Some(seq), Some(hlc), Some(from), Some(rest)) = (
                body.get(..8),
                body.get(8..16),
                body.get(16..SEQ_HLC_ORIGIN_BYTES),
                body.get(SEQ_HLC_ORIGIN_BYTES..),
            ) else {
                break 'parts;
            };
            let seq = u64::from_le_bytes(seq.try_into().unwrap_or([0; 8]));
            if seq > seq_max {
                break 'parts;
            }
            let hlc_v = Hlc(u64::from_le_bytes(hlc.try_into().unwrap_or([0; 8])));
            if covered == 0 {
                b.first_seq = seq;
                b.first_hlc = hlc_v;
                origin.copy_from_slice(from);
            } else if from != origin {
                break 'parts;
            }
            covered += 1;
            b.last_seq = seq;
            b.last_hlc = hlc_v;
            // `rest` is `db:u16 key:bytes tag payload`.
            let mut r = Reader::new(rest);
            let key = r.array::<2>().and_then(|_| r.bytes()).unwrap_or_default();
            // FUNCTION libraries live on every shard: their records go to every dialer.
            let library = matches!(r.u8(), Ok(TAG_LIBRARY_SET | TAG_LIBRARY_DEL));
            if library || keep(key) {
                b.count += 1;
                meridian_crdt::codec::put_varint(out, seq - b.first_seq);
                meridian_crdt::codec::put_varint(out, (8 + rest.len()) as u64);
                out.extend_from_slice(hlc);
                out.extend_from_slice(rest);
            }
            pos += 4 + len;
        }
    }
    b.origin = ReplicaId(u32::from_le_bytes(origin));
    b
}

/// Records one sparse batch covers at most (kept or skipped): a dialer owning few slots
/// gets frames at least this often, and a frame never takes long to build.
pub const SPARSE_COVER_MAX: u64 = 64 * 1024;

/// What `copy_to_wire` copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WireBatch {
    pub count: u32,
    pub first_seq: u64,
    pub last_seq: u64,
    /// Hlc of the first record (replication lag is measured from it).
    pub first_hlc: Hlc,
    /// Origin of every record in the batch.
    pub origin: ReplicaId,
}

/// Decodes one wire record (see `copy_to_wire`) whose origin and sequence number the batch
/// header gives. Returns it and the bytes it used.
pub fn decode_wire(
    buf: &[u8],
    origin: ReplicaId,
    seq: u64,
) -> Result<(OpRecord, usize), OpDecodeError> {
    let mut r = Reader::new(buf);
    let len = r.varint()? as usize;
    if len > RECORD_BYTES_MAX {
        return Err(OpDecodeError::TooLarge {
            len,
            max: RECORD_BYTES_MAX,
        });
    }
    let body = r.take(len)?;
    let mut b = Reader::new(body);
    let hlc = Hlc(b.u64()?);
    let rec = decode_tail(&mut b, origin, seq, hlc, len)?;
    Ok((rec, r.pos()))
}

/// Decodes the record at the start of `buf`; returns it and the bytes it used.
pub fn decode(buf: &[u8]) -> Result<(OpRecord, usize), OpDecodeError> {
    let mut r = Reader::new(buf);
    let len = r.u32()? as usize;
    if len > RECORD_BYTES_MAX {
        return Err(OpDecodeError::TooLarge {
            len,
            max: RECORD_BYTES_MAX,
        });
    }
    let body = r.take(len)?;
    let mut b = Reader::new(body);
    let seq = b.u64()?;
    let hlc = Hlc(b.u64()?);
    let origin = ReplicaId(b.u32()?);
    let rec = decode_tail(&mut b, origin, seq, hlc, len)?;
    Ok((rec, r.pos()))
}

/// Decodes `db key tag payload` and checks that the body ends there.
fn decode_tail(
    b: &mut Reader<'_>,
    origin: ReplicaId,
    seq: u64,
    hlc: Hlc,
    len: usize,
) -> Result<OpRecord, OpDecodeError> {
    let db = u16::from_le_bytes(b.array()?);
    let key = b.bytes()?.to_vec();
    let effect = match b.u8()? {
        TAG_ASSIGN => {
            let keep_ttl = b.u8()? != 0;
            let observed = b.observed()?;
            let value = b.bytes()?.to_vec();
            Effect::Assign {
                value,
                observed,
                keep_ttl,
            }
        }
        TAG_INCR => {
            let kind = b.u8()?;
            let delta = match kind & INCR_FLOAT {
                0 => Delta::Int(b.i64()?),
                _ => Delta::Float(b.dec()?),
            };
            let at = match kind & !INCR_FLOAT {
                INCR_AT_UNKNOWN => IncAt::Unknown,
                INCR_AT_STARTS => IncAt::Starts,
                INCR_AT_AFTER => IncAt::After(b.totals_near(hlc)?),
                _ => return Err(DecodeError::BadTag(kind).into()),
            };
            Effect::Incr { delta, at }
        }
        TAG_REMOVE => Effect::Remove {
            observed: b.observed()?,
        },
        TAG_STR_EDIT => {
            Effect::StrEdit(meridian_crdt::string::decode_edit(b)?.map_bytes(<[u8]>::to_vec))
        }
        TAG_EXPIRE => {
            let expire = match b.u8()? {
                EXPIRE_PERSIST => Some(Expire::Persist),
                EXPIRE_AT => Some(Expire::AtMs(b.u64()?)),
                EXPIRE_RETIRE => None,
                other => return Err(DecodeError::BadTag(other).into()),
            };
            let observed = b.vv()?;
            match expire {
                Some(expire) => Effect::Expire { expire, observed },
                None => Effect::ExpireRetire { observed },
            }
        }
        TAG_SET_ADD => Effect::SetAdd {
            member: b.bytes()?.to_vec(),
        },
        TAG_SET_REM => {
            let member = b.bytes()?.to_vec();
            Effect::SetRem {
                member,
                observed: b.vv()?,
            }
        }
        TAG_HASH => Effect::Hash(hash::decode_op(b)?),
        TAG_ZSET => Effect::ZSet(zset::decode_op(b)?),
        TAG_LIST => Effect::List(list::decode_op(b)?),
        TAG_HLL => Effect::Hll(hll::decode_op(b)?),
        TAG_STREAM => Effect::Stream(stream::codec::decode_op(b)?),
        tag @ (TAG_PUBLISH | TAG_SPUBLISH) => {
            let message = b.bytes()?.to_vec();
            return finish(
                b,
                len,
                OpRecord {
                    origin,
                    seq,
                    hlc,
                    db,
                    key,
                    body: OpBody::Publish {
                        message,
                        sharded: tag == TAG_SPUBLISH,
                    },
                },
            );
        }
        tag @ (TAG_LIBRARY_SET | TAG_LIBRARY_DEL) => {
            let code = if tag == TAG_LIBRARY_SET {
                Some(b.bytes()?.to_vec())
            } else {
                None
            };
            return finish(
                b,
                len,
                OpRecord {
                    origin,
                    seq,
                    hlc,
                    db,
                    key,
                    body: OpBody::Library { code },
                },
            );
        }
        other => return Err(DecodeError::BadTag(other).into()),
    };
    finish(
        b,
        len,
        OpRecord {
            origin,
            seq,
            hlc,
            db,
            key,
            body: OpBody::Write(effect),
        },
    )
}

fn finish(b: &Reader<'_>, len: usize, rec: OpRecord) -> Result<OpRecord, OpDecodeError> {
    if !b.is_at_end() {
        return Err(OpDecodeError::LengthMismatch { len, used: b.pos() });
    }
    Ok(rec)
}

#[cfg(test)]
mod tests {
    use meridian_crdt::{Dec, IncTotals, Observed, StrEdit, VersionVector};

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
                run: Hlc(77),
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
                at: IncAt::Unknown,
            },
            Effect::Incr {
                delta: Delta::Float(Dec::parse(b"-0.1").unwrap()),
                at: IncAt::Starts,
            },
            Effect::Incr {
                delta: Delta::Int(5),
                at: IncAt::After(IncTotals {
                    run: Hlc(9),
                    n: 4,
                    int: 12,
                    float: Dec::ZERO,
                }),
            },
            Effect::Incr {
                delta: Delta::Float(Dec::parse(b"2.5").unwrap()),
                at: IncAt::After(IncTotals {
                    run: Hlc::ZERO,
                    n: 2,
                    int: 0,
                    float: Dec::parse(b"3").unwrap(),
                }),
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
            Effect::ExpireRetire {
                observed: vv(&[(2, 9)]),
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

    /// String edits, one per kind (not in `effects`: the wire tests count those).
    fn edits() -> Vec<Effect<Vec<u8>>> {
        vec![
            Effect::StrEdit(StrEdit::Append(b"tail".to_vec())),
            Effect::StrEdit(StrEdit::SetRange {
                offset: 1 << 20,
                bytes: b"r".to_vec(),
            }),
            Effect::StrEdit(StrEdit::SetBits {
                offset: 9,
                width: 5,
                value: 0x1f,
            }),
            Effect::StrEdit(StrEdit::IncrBits {
                offset: 17,
                width: 64,
                signed: true,
                incr: i64::MIN,
                overflow: meridian_crdt::BitOverflow::Fail,
            }),
        ]
    }

    #[test]
    fn every_effect_round_trips() {
        for (i, e) in effects().into_iter().chain(edits()).enumerate() {
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
                    body: OpBody::Write(e)
                }
            );
        }
    }

    #[test]
    fn a_batch_holds_one_origin_and_stops_where_a_new_life_begins() {
        let mut log = OpLog::new(ReplicaId(7), 1 << 20);
        let e = &effects()[0];
        for seq in 1..=3 {
            log.append(seq, Hlc(seq), 0, b"k", e);
        }
        log.set_origin(ReplicaId(8));
        for seq in 4..=5 {
            log.append(seq, Hlc(seq), 0, b"k", e);
        }
        let mut wire = Vec::new();
        let b = copy_to_wire_upto(&log.since(2).unwrap(), &mut wire, usize::MAX, u64::MAX);
        assert_eq!((b.origin, b.first_seq, b.last_seq), (ReplicaId(7), 2, 3));
        wire.clear();
        let b = copy_to_wire_upto(&log.since(4).unwrap(), &mut wire, usize::MAX, u64::MAX);
        assert_eq!((b.origin, b.first_seq, b.last_seq), (ReplicaId(8), 4, 5));
    }

    #[test]
    fn wire_form_drops_seq_and_origin_and_round_trips() {
        let mut log = OpLog::new(ReplicaId(7), 1 << 20);
        let n = effects().len() as u64;
        for (i, e) in effects().into_iter().enumerate() {
            log.append(i as u64 + 1, Hlc(100 + i as u64), 2, b"key", &e);
        }
        let publish = n + 1;
        log.append_publish(publish, Hlc(200), b"chan", b"hello", false);
        let parts = log.since(2).unwrap();
        let mut wire = Vec::new();
        let b = copy_to_wire(&parts, &mut wire, usize::MAX);
        assert_eq!(
            (b.count, b.first_seq, b.last_seq, b.first_hlc),
            (n as u32, 2, publish, Hlc(101))
        );
        let mut pos = 0;
        let mut seq = 2;
        while pos < wire.len() {
            let (rec, used) = decode_wire(&wire[pos..], ReplicaId(7), seq).unwrap();
            assert_eq!((rec.seq, rec.origin), (seq, ReplicaId(7)));
            if seq == publish {
                assert_eq!(
                    rec.body,
                    OpBody::Publish {
                        message: b"hello".to_vec(),
                        sharded: false
                    }
                );
            } else {
                assert_eq!(rec.body, OpBody::Write(effects()[seq as usize - 1].clone()));
                assert_eq!(rec.db, 2);
            }
            pos += used;
            seq += 1;
        }
        assert_eq!(seq, publish + 1);
        // A byte budget stops at a record boundary (after the first record past it).
        let mut small = Vec::new();
        let b = copy_to_wire(&parts, &mut small, 1);
        assert_eq!(b.count, 1);
        // A 100-byte SET of a 16-byte key overwriting a value: at most 150 bytes on the wire.
        let mut one = OpLog::new(ReplicaId(7), 1 << 20);
        let mut observed = Observed::new();
        observed.stamps = vv(&[(7, 1)]);
        let e: Effect<Vec<u8>> = Effect::Assign {
            value: vec![b'x'; 100],
            observed,
            keep_ttl: false,
        };
        one.append(1, Hlc(5), 0, b"key:000000123456", &e);
        let mut w = Vec::new();
        copy_to_wire(&one.since(1).unwrap(), &mut w, usize::MAX);
        assert!(w.len() <= 150, "{} bytes", w.len());
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
        assert!(log.bytes() as u64 <= (4 * CHUNK_BYTES + 2000) as u64);
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
        log.set_retain_for_peers(false);
        assert!(
            log.bytes() <= CHUNK_BYTES + 2000,
            "no peers: only the current chunk"
        );
        assert_eq!(log.since(1000).map(|p| p.len()), Some(1));
    }

    #[test]
    fn with_no_peers_a_full_current_chunk_is_released_when_idle() {
        let mut log = OpLog::new(ReplicaId(1), (4 * CHUNK_BYTES) as u64);
        log.set_retain_for_peers(false);
        // One record short of a full chunk stays.
        append_assign(&mut log, 1, &vec![b'x'; CHUNK_BYTES - 200]);
        assert!(log.bytes() < CHUNK_BYTES);
        log.release_idle();
        assert_eq!(log.first_seq(), Some(1));
        // At CHUNK_BYTES (here well past it: one large record) it goes.
        append_assign(&mut log, 2, &vec![b'y'; 1 << 20]);
        assert!(log.bytes() >= CHUNK_BYTES);
        log.release_idle();
        assert_eq!((log.bytes(), log.first_seq()), (0, None));
        // The next record starts a chunk again.
        append_assign(&mut log, 3, b"z");
        assert_eq!(log.first_seq(), Some(3));
        // Peers may read: kept.
        log.set_retain_for_peers(true);
        append_assign(&mut log, 4, &vec![b'w'; CHUNK_BYTES]);
        log.release_idle();
        assert_eq!(log.first_seq(), Some(3));
    }

    fn append_assign(log: &mut OpLog, seq: u64, value: &[u8]) {
        let e: Effect<&[u8]> = Effect::Assign {
            value,
            observed: Observed::new(),
            keep_ttl: false,
        };
        log.append(seq, Hlc(seq), 0, b"k", &e);
    }

    #[test]
    fn a_live_reader_one_batch_behind_is_never_cut_at_the_smallest_budget() {
        // Budget of one chunk; a reader that takes everything after each batch of 40
        // records (~40 KB, less than a chunk) must always find its next op retained.
        let mut log = OpLog::new(ReplicaId(1), CHUNK_BYTES as u64);
        let value = vec![b'v'; 1000];
        let mut next = 1u64;
        let mut seq = 0u64;
        for _batch in 0..200 {
            for _ in 0..40 {
                seq += 1;
                append_assign(&mut log, seq, &value);
            }
            assert!(log.since(next).is_some(), "reader at seq {next} cut");
            next = seq + 1;
        }
        // Still bounded: one sealed chunk (the budget) plus the one being written.
        assert!(log.bytes() <= 2 * (CHUNK_BYTES + 2000), "{}", log.bytes());
        // A reader more than the budget behind is cut.
        assert!(log.since(seq - 200).is_none());
    }

    #[test]
    fn budget_counts_sealed_chunks_at_the_limit_and_one_past() {
        let mut log = OpLog::new(ReplicaId(1), (2 * CHUNK_BYTES) as u64);
        // Records of exactly 1/16 chunk fill chunks exactly (header bytes included).
        let probe = {
            let mut b = Vec::new();
            let e: Effect<&[u8]> = Effect::Assign {
                value: &[][..],
                observed: Observed::new(),
                keep_ttl: false,
            };
            encode(&mut b, ReplicaId(1), 1, Hlc(1), 0, b"k", &e);
            b.len()
        };
        let value = vec![b'v'; CHUNK_BYTES / 16 - probe - 1];
        let mut seq = 0;
        // Two full sealed chunks plus one record of the third: nothing dropped.
        for _ in 0..(2 * 16 + 1) {
            seq += 1;
            append_assign(&mut log, seq, &value);
        }
        assert_eq!(log.first_seq(), Some(1));
        // Fill the third chunk and start a fourth: three sealed chunks, one past the
        // budget, so the oldest goes.
        for _ in 0..16 {
            seq += 1;
            append_assign(&mut log, seq, &value);
        }
        assert_eq!(log.first_seq(), Some(17));
    }
}

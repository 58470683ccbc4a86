//! The byte format of log segments (docs/persistence.md §2).
//!
//! A segment is a 24-byte header, `magic:8 replica:u32 first_pos:u64 crc:u32`, then records
//! `len:u32 crc:u32 kind:u8 payload`, where `len` counts `kind` and `payload` and `crc` is the
//! CRC-32 (IEEE) of those bytes. Records are numbered by their position in the shard's whole
//! log history; a segment's name and header give the position of its first record.
//!
//! `Scan` walks records and tells a torn tail (a write cut short by a crash: the bad record
//! runs to the end of the file, or only zeros follow) from corruption (valid records follow
//! the bad one), which must stop recovery. A whole record of a kind this version does not
//! know was written by a newer version: it stops recovery too, wherever it stands.

use meridian_crdt::codec::{DecodeError, Reader, put_bytes, put_vv};
use meridian_crdt::{Context, Gap, Hlc, ReplicaId, VersionVector};

pub const SEGMENT_MAGIC: &[u8; 8] = b"MRDNLOG\x01";
pub const SEGMENT_HEADER_BYTES: usize = 24;
/// `len:u32 crc:u32` before each record's kind.
pub const RECORD_HEADER_BYTES: usize = 8;
/// Largest candidate record the torn-tail check verifies while looking for valid records
/// after a bad one (bounds its work on a damaged file; real records past it are rare and
/// a file damaged only there is treated as torn).
pub const RESYNC_RECORD_BYTES_MAX: usize = 16 * 1024 * 1024;

/// What a record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An op record in the op log's format (`crate::oplog`): local or remote.
    Op = 1,
    /// A key state merged by a full sync: `db:u16 key:bytes floor:vv state:bytes`.
    State = 2,
    /// What this shard has applied from a peer: `site:bytes incarnation:u64 seq:u64`.
    Position = 3,
    /// This shard started an incarnation: `incarnation:u64 first_seq:u64`.
    Incarnation = 4,
    /// No timestamp above this one was issued before it was written: `hlc:u64`.
    ClockLease = 5,
    /// Ops a full sync carried in states (no op record names them): the delivered vector
    /// takes `vv` (docs/replication.md §5, §9).
    Delivered = 6,
    /// A FUNCTION library register entry a full sync carried: `name:bytes` then the
    /// snapshot's library encoding (`snapshot::encode_library`).
    Library = 7,
    /// A key state merged by a full sync, with the causal contexts of both sides:
    /// `db:u16 key:bytes mine:context theirs:context state:bytes`, a context being `vv` then
    /// `0`, or `1 replica:u32 after:u64 upto:u64` for one with a gap (`Kind::State` is the format before
    /// it, one floor for both sides, still replayed).
    Merge = 8,
    /// A key this shard evicted under `maxmemory` (local only, no op): `db:u16 key:bytes`.
    /// Replay drops it again, so a snapshot or a restart does not bring it back.
    Evicted = 9,
    /// Retired-life entries a full sync from a peer shard of fewer slots carried
    /// (`Peer::retired_in`): `peer:bytes vv`, the peer's key (`Peer::key`) and that link's
    /// whole vector after the sync (replay merges it, so a repeated record is harmless).
    RetiredIn = 10,
}

impl Kind {
    pub fn from_u8(b: u8) -> Option<Kind> {
        match b {
            1 => Some(Kind::Op),
            2 => Some(Kind::State),
            3 => Some(Kind::Position),
            4 => Some(Kind::Incarnation),
            5 => Some(Kind::ClockLease),
            6 => Some(Kind::Delivered),
            7 => Some(Kind::Library),
            8 => Some(Kind::Merge),
            9 => Some(Kind::Evicted),
            10 => Some(Kind::RetiredIn),
            _ => None,
        }
    }
}

/// Starts a record of `kind` at the end of `out`; `finish` completes it.
pub fn begin(out: &mut Vec<u8>, kind: Kind) -> usize {
    let start = out.len();
    out.extend_from_slice(&[0u8; RECORD_HEADER_BYTES]);
    out.push(kind as u8);
    start
}

/// Fills in the length and checksum of the record begun at `start`.
pub fn finish(out: &mut [u8], start: usize) {
    let Some(body) = out.get(start + RECORD_HEADER_BYTES..) else {
        return;
    };
    let len = body.len() as u32;
    let crc = crc32fast::hash(body);
    let mut head = [0u8; RECORD_HEADER_BYTES];
    head[..4].copy_from_slice(&len.to_le_bytes());
    head[4..].copy_from_slice(&crc.to_le_bytes());
    if let Some(slot) = out.get_mut(start..start + RECORD_HEADER_BYTES) {
        slot.copy_from_slice(&head);
    }
}

/// Appends a whole record.
pub fn put(out: &mut Vec<u8>, kind: Kind, payload: &[u8]) {
    let start = begin(out, kind);
    out.extend_from_slice(payload);
    finish(out, start);
}

/// A `Kind::State` record (no longer written; tests replay it as an older log would hold it).
#[cfg(test)]
pub fn put_state(out: &mut Vec<u8>, db: u16, key: &[u8], floor: &VersionVector, state: &[u8]) {
    let start = begin(out, Kind::State);
    out.extend_from_slice(&db.to_le_bytes());
    put_bytes(out, key);
    put_vv(out, floor);
    put_bytes(out, state);
    finish(out, start);
}

pub fn put_merge(
    out: &mut Vec<u8>,
    db: u16,
    key: &[u8],
    mine: &Context,
    theirs: &Context,
    state: &[u8],
) {
    let start = begin(out, Kind::Merge);
    out.extend_from_slice(&db.to_le_bytes());
    put_bytes(out, key);
    put_context(out, mine);
    put_context(out, theirs);
    put_bytes(out, state);
    finish(out, start);
}

/// `vv` then `0`, or `1 replica:u32 after:u64 upto:u64` for a context with a gap.
fn put_context(out: &mut Vec<u8>, c: &Context) {
    put_vv(out, &c.seen);
    match &c.gap {
        None => out.push(0),
        Some(g) => {
            out.push(1);
            out.extend_from_slice(&g.replica.0.to_le_bytes());
            out.extend_from_slice(&g.after.0.to_le_bytes());
            out.extend_from_slice(&g.upto.0.to_le_bytes());
        }
    }
}

fn read_context(r: &mut Reader<'_>) -> Result<Context, DecodeError> {
    let seen = r.vv()?;
    let gap = match r.u8()? {
        0 => None,
        1 => Some(Gap {
            replica: ReplicaId(r.u32()?),
            after: Hlc(r.u64()?),
            upto: Hlc(r.u64()?),
        }),
        t => return Err(DecodeError::BadTag(t)),
    };
    Ok(Context { seen, gap })
}

pub fn put_position(out: &mut Vec<u8>, site: &str, incarnation: u64, seq: u64) {
    let start = begin(out, Kind::Position);
    put_bytes(out, site.as_bytes());
    out.extend_from_slice(&incarnation.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    finish(out, start);
}

pub fn put_incarnation(out: &mut Vec<u8>, incarnation: u64, first_seq: u64) {
    let start = begin(out, Kind::Incarnation);
    out.extend_from_slice(&incarnation.to_le_bytes());
    out.extend_from_slice(&first_seq.to_le_bytes());
    finish(out, start);
}

pub fn put_clock_lease(out: &mut Vec<u8>, hlc: u64) {
    let start = begin(out, Kind::ClockLease);
    out.extend_from_slice(&hlc.to_le_bytes());
    finish(out, start);
}

pub fn put_delivered(out: &mut Vec<u8>, vv: &VersionVector) {
    let start = begin(out, Kind::Delivered);
    put_vv(out, vv);
    finish(out, start);
}

pub fn put_library(
    out: &mut Vec<u8>,
    name: &[u8],
    stamp: meridian_crdt::Stamp,
    code: Option<&[u8]>,
) {
    let start = begin(out, Kind::Library);
    put_bytes(out, name);
    crate::persist::snapshot::encode_library(out, stamp, code);
    finish(out, start);
}

/// A decoded library record: the name, its stamp, its code (`None`: deleted).
pub type LibraryRecord<'a> = (&'a [u8], meridian_crdt::Stamp, Option<&'a [u8]>);

/// A library record (`put_library`).
pub fn decode_library(payload: &[u8]) -> Result<LibraryRecord<'_>, DecodeError> {
    let mut r = Reader::new(payload);
    let name = r.bytes()?;
    let rest = payload.get(r.pos()..).unwrap_or_default();
    let (stamp, code) = crate::persist::snapshot::decode_library(rest)?;
    Ok((name, stamp, code))
}

pub fn decode_delivered(payload: &[u8]) -> Result<VersionVector, DecodeError> {
    let mut r = Reader::new(payload);
    let vv = r.vv()?;
    end(&r)?;
    Ok(vv)
}

pub fn put_retired_in(out: &mut Vec<u8>, peer: &str, vv: &VersionVector) {
    let start = begin(out, Kind::RetiredIn);
    put_bytes(out, peer.as_bytes());
    put_vv(out, vv);
    finish(out, start);
}

/// A `Kind::RetiredIn` payload: the peer's key and the link's retired entries.
pub fn decode_retired_in(payload: &[u8]) -> Result<(String, VersionVector), DecodeError> {
    let mut r = Reader::new(payload);
    let peer = std::str::from_utf8(r.bytes()?)
        .map_err(|_| DecodeError::Invalid("retired entries: peer name not UTF-8"))?
        .to_string();
    let vv = r.vv()?;
    end(&r)?;
    Ok((peer, vv))
}

fn end(r: &Reader<'_>) -> Result<(), DecodeError> {
    if r.is_at_end() {
        Ok(())
    } else {
        Err(DecodeError::Invalid(
            "trailing bytes after a record payload",
        ))
    }
}

/// A decoded State payload.
pub struct StatePayload<'a> {
    pub db: u16,
    pub key: &'a [u8],
    pub floor: VersionVector,
    pub state: &'a [u8],
}

pub fn decode_state(payload: &[u8]) -> Result<StatePayload<'_>, DecodeError> {
    let mut r = Reader::new(payload);
    let db = u16::from_le_bytes(r.array()?);
    let key = r.bytes()?;
    let floor = r.vv()?;
    let state = r.bytes()?;
    end(&r)?;
    Ok(StatePayload {
        db,
        key,
        floor,
        state,
    })
}

/// A decoded Merge payload.
pub struct MergePayload<'a> {
    pub db: u16,
    pub key: &'a [u8],
    /// This shard's causal context when it merged.
    pub mine: Context,
    /// The sender's.
    pub theirs: Context,
    pub state: &'a [u8],
}

pub fn put_evicted(out: &mut Vec<u8>, db: u16, key: &[u8]) {
    let start = begin(out, Kind::Evicted);
    out.extend_from_slice(&db.to_le_bytes());
    put_bytes(out, key);
    finish(out, start);
}

/// An eviction record (`put_evicted`): the database and the key.
pub fn decode_evicted(payload: &[u8]) -> Result<(u16, &[u8]), DecodeError> {
    let mut r = Reader::new(payload);
    let db = u16::from_le_bytes(r.array()?);
    let key = r.bytes()?;
    end(&r)?;
    Ok((db, key))
}

pub fn decode_merge(payload: &[u8]) -> Result<MergePayload<'_>, DecodeError> {
    let mut r = Reader::new(payload);
    let db = u16::from_le_bytes(r.array()?);
    let key = r.bytes()?;
    let mine = read_context(&mut r)?;
    let theirs = read_context(&mut r)?;
    let state = r.bytes()?;
    end(&r)?;
    Ok(MergePayload {
        db,
        key,
        mine,
        theirs,
        state,
    })
}

pub fn decode_position(payload: &[u8]) -> Result<(String, u64, u64), DecodeError> {
    let mut r = Reader::new(payload);
    let site = String::from_utf8_lossy(r.bytes()?).into_owned();
    let incarnation = r.u64()?;
    let seq = r.u64()?;
    end(&r)?;
    Ok((site, incarnation, seq))
}

pub fn decode_incarnation(payload: &[u8]) -> Result<(u64, u64), DecodeError> {
    let mut r = Reader::new(payload);
    let incarnation = r.u64()?;
    let first = r.u64()?;
    end(&r)?;
    Ok((incarnation, first))
}

pub fn decode_clock_lease(payload: &[u8]) -> Result<u64, DecodeError> {
    let mut r = Reader::new(payload);
    let hlc = r.u64()?;
    end(&r)?;
    Ok(hlc)
}

/// A segment's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    pub replica: ReplicaId,
    pub first_pos: u64,
}

impl SegmentHeader {
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_BYTES] {
        let mut out = [0u8; SEGMENT_HEADER_BYTES];
        out[..8].copy_from_slice(SEGMENT_MAGIC);
        out[8..12].copy_from_slice(&self.replica.0.to_le_bytes());
        out[12..20].copy_from_slice(&self.first_pos.to_le_bytes());
        let crc = crc32fast::hash(&out[..20]);
        out[20..24].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes the header at the start of a segment; the reason when it is not one.
    pub fn decode(buf: &[u8]) -> Result<SegmentHeader, String> {
        let Some(head) = buf.get(..SEGMENT_HEADER_BYTES) else {
            return Err(format!(
                "shorter ({} bytes) than a segment header ({SEGMENT_HEADER_BYTES})",
                buf.len()
            ));
        };
        let (magic, rest) = head.split_at(8);
        if magic != SEGMENT_MAGIC {
            return Err("not a Meridian log segment (bad magic)".to_string());
        }
        let (body, crc) = head.split_at(20);
        let crc = u32::from_le_bytes(crc.try_into().unwrap_or([0; 4]));
        if crc32fast::hash(body) != crc {
            return Err("segment header checksum mismatch".to_string());
        }
        let word = |r: std::ops::Range<usize>| rest.get(r).unwrap_or_default();
        let replica = u32::from_le_bytes(word(0..4).try_into().unwrap_or([0; 4]));
        let first_pos = u64::from_le_bytes(word(4..12).try_into().unwrap_or([0; 8]));
        Ok(SegmentHeader {
            replica: ReplicaId(replica),
            first_pos,
        })
    }
}

/// How a walk over records ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte belongs to a valid record.
    Clean,
    /// The bytes from `offset` on are an incomplete or damaged last write: cut them.
    Torn { offset: usize, reason: String },
    /// A damaged record at `offset` with valid records after it: never cut silently.
    Corrupt { offset: usize, reason: String },
}

impl ScanEnd {
    /// The same end with its offset counted `by` bytes further (a walk of part of a buffer).
    pub fn shifted(self, by: usize) -> ScanEnd {
        match self {
            ScanEnd::Clean => ScanEnd::Clean,
            ScanEnd::Torn { offset, reason } => ScanEnd::Torn {
                offset: offset + by,
                reason,
            },
            ScanEnd::Corrupt { offset, reason } => ScanEnd::Corrupt {
                offset: offset + by,
                reason,
            },
        }
    }
}

/// One record found by a walk: its offset in the buffer, kind byte and payload.
#[derive(Clone, Copy, Debug)]
pub struct Found<'a> {
    pub offset: usize,
    pub kind: Kind,
    pub payload: &'a [u8],
}

/// Why a record is not valid.
enum Bad {
    /// Cut short or damaged (a torn write, or the disk).
    Damaged(String),
    /// Whole (length and checksum right) but of a kind this version does not know: a later
    /// version wrote it.
    UnknownKind(u8),
}

/// Why the record at some offset is not valid (`Bad`), or its kind, payload and end.
fn check_at(buf: &[u8], at: usize) -> Result<(Kind, &[u8], usize), Bad> {
    check_bytes(buf, at)
        .map_err(Bad::Damaged)
        .and_then(|(k, payload, end)| match Kind::from_u8(k) {
            Some(kind) => Ok((kind, payload, end)),
            None => Err(Bad::UnknownKind(k)),
        })
}

/// `check_at` up to the kind byte: the record's kind byte, payload and end.
fn check_bytes(buf: &[u8], at: usize) -> Result<(u8, &[u8], usize), String> {
    let Some(head) = buf.get(at..at + RECORD_HEADER_BYTES) else {
        return Err(format!(
            "{} bytes left, a record header needs {RECORD_HEADER_BYTES}",
            buf.len().saturating_sub(at)
        ));
    };
    let word = |r: std::ops::Range<usize>| {
        u32::from_le_bytes(head.get(r).unwrap_or_default().try_into().unwrap_or([0; 4]))
    };
    let (len, crc) = (word(0..4) as usize, word(4..8));
    if len == 0 {
        return Err("record of length 0".to_string());
    }
    let start = at + RECORD_HEADER_BYTES;
    let Some(body) = buf.get(start..start.saturating_add(len)) else {
        return Err(format!(
            "record of {len} bytes runs past the end ({} bytes left)",
            buf.len().saturating_sub(start)
        ));
    };
    if crc32fast::hash(body) != crc {
        return Err("record checksum mismatch".to_string());
    }
    let Some(kind) = body.first().copied() else {
        return Err("record of length 0".to_string());
    };
    Ok((kind, body.get(1..).unwrap_or_default(), start + len))
}

/// Whether the record at `at` runs past the end of `buf` (its header, or the length its
/// header gives): more bytes may complete it.
pub fn incomplete_at(buf: &[u8], at: usize) -> bool {
    let Some(len) = buf.get(at..at + 4) else {
        return true;
    };
    let len = u32::from_le_bytes(len.try_into().unwrap_or([0; 4])) as usize;
    at + RECORD_HEADER_BYTES > buf.len() || (len > 0 && at + RECORD_HEADER_BYTES + len > buf.len())
}

/// Whether a whole record (of any kind, a later version's included) starts anywhere after
/// `at` (bounded work per candidate).
fn valid_record_after(buf: &[u8], at: usize) -> bool {
    let mut i = at + 1;
    while i + RECORD_HEADER_BYTES < buf.len() {
        if let Some(len) = buf.get(i..i + 4) {
            let len = u32::from_le_bytes(len.try_into().unwrap_or([0; 4])) as usize;
            if len > 0
                && len <= RESYNC_RECORD_BYTES_MAX
                && i + RECORD_HEADER_BYTES + len <= buf.len()
                && check_bytes(buf, i).is_ok()
            {
                return true;
            }
        }
        i += 1;
    }
    false
}

/// Walks the records of `buf` (a segment without its header, or any record stream), calling
/// `each` for every valid one, and says how the walk ended. `each` returning an error stops
/// the walk with that error.
pub fn scan<E>(
    buf: &[u8],
    mut each: impl FnMut(Found<'_>) -> Result<(), E>,
) -> Result<(ScanEnd, usize), E> {
    let mut at = 0usize;
    let mut n = 0usize;
    while at < buf.len() {
        match check_at(buf, at) {
            Ok((kind, payload, end)) => {
                each(Found {
                    offset: at,
                    kind,
                    payload,
                })?;
                n += 1;
                at = end;
            }
            // A checksummed record of a kind added after this version (`Kind`) is no torn
            // write: cutting it would drop what a newer version logged, so it is refused
            // wherever it stands (a newer data directory is never opened by an older build).
            Err(Bad::UnknownKind(k)) => {
                let reason = format!(
                    "record kind {k} unknown to this version (written by a newer version of Meridian)"
                );
                return Ok((ScanEnd::Corrupt { offset: at, reason }, n));
            }
            Err(Bad::Damaged(reason)) => {
                let rest = buf.get(at..).unwrap_or_default();
                let end = if rest.iter().all(|&b| b == 0) || !valid_record_after(buf, at) {
                    ScanEnd::Torn { offset: at, reason }
                } else {
                    ScanEnd::Corrupt { offset: at, reason }
                };
                return Ok((end, n));
            }
        }
    }
    Ok((ScanEnd::Clean, n))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn three() -> Vec<u8> {
        let mut b = Vec::new();
        put(&mut b, Kind::Op, b"first op");
        put_position(&mut b, "b", 7, 42);
        put_clock_lease(&mut b, 99);
        b
    }

    fn walk(buf: &[u8]) -> (ScanEnd, usize) {
        scan::<()>(buf, |_| Ok(())).unwrap()
    }

    #[test]
    fn records_round_trip() {
        let b = three();
        let mut kinds = Vec::new();
        let (end, n) = scan::<()>(&b, |f| {
            kinds.push(f.kind);
            if f.kind == Kind::Position {
                assert_eq!(
                    decode_position(f.payload).unwrap(),
                    ("b".to_string(), 7, 42)
                );
            }
            Ok(())
        })
        .unwrap();
        assert_eq!((end, n), (ScanEnd::Clean, 3));
        assert_eq!(kinds, vec![Kind::Op, Kind::Position, Kind::ClockLease]);
    }

    /// Eviction records round-trip; every cut of the payload, and a trailing byte, is an error.
    #[test]
    fn evicted_records_round_trip_and_refuse_cuts() {
        let mut b = Vec::new();
        put_evicted(&mut b, 3, b"some:key");
        let mut payloads = Vec::new();
        let (end, n) = scan::<()>(&b, |f| {
            assert_eq!(f.kind, Kind::Evicted);
            payloads.push(f.payload.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!((end, n), (ScanEnd::Clean, 1));
        let p = &payloads[0];
        assert_eq!(decode_evicted(p).unwrap(), (3, &b"some:key"[..]));
        for cut in 0..p.len() {
            assert!(decode_evicted(&p[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = p.clone();
        longer.push(0);
        assert!(decode_evicted(&longer).is_err());
        assert_eq!(Kind::from_u8(9), Some(Kind::Evicted));
    }

    /// Retired-entry records round-trip; every cut of the payload, a trailing byte and a
    /// peer name that is not UTF-8 are errors, never a panic.
    #[test]
    fn retired_in_records_round_trip_and_refuse_cuts() {
        let mut vv = VersionVector::new();
        for (r, h) in [(7u32, 1_000u64), (9, 2_000)] {
            vv.observe(meridian_crdt::Stamp {
                hlc: Hlc(h),
                replica: ReplicaId(r),
            });
        }
        let mut b = Vec::new();
        put_retired_in(&mut b, "b#1", &vv);
        put_retired_in(&mut b, "c", &VersionVector::new());
        let mut payloads = Vec::new();
        let (end, n) = scan::<()>(&b, |f| {
            assert_eq!(f.kind, Kind::RetiredIn);
            payloads.push(f.payload.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!((end, n), (ScanEnd::Clean, 2));
        assert_eq!(
            decode_retired_in(&payloads[0]).unwrap(),
            ("b#1".to_string(), vv)
        );
        assert_eq!(
            decode_retired_in(&payloads[1]).unwrap(),
            ("c".to_string(), VersionVector::new())
        );
        let p = &payloads[0];
        for cut in 0..p.len() {
            assert!(decode_retired_in(&p[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = p.clone();
        longer.push(0);
        assert!(decode_retired_in(&longer).is_err());
        let mut bad_name = Vec::new();
        put_bytes(&mut bad_name, &[0xff, 0xfe]);
        put_vv(&mut bad_name, &VersionVector::new());
        assert!(decode_retired_in(&bad_name).is_err());
        assert_eq!(Kind::from_u8(10), Some(Kind::RetiredIn));
    }

    /// A whole record of a kind this version does not know (a newer version wrote it) is
    /// refused as corrupt with a reason that says so, even as the last record: cutting it as
    /// a torn tail would drop what the newer version logged.
    #[test]
    fn a_record_of_an_unknown_kind_is_refused_not_cut() {
        let mut b = three();
        let at = b.len();
        let start = b.len();
        b.extend_from_slice(&[0u8; RECORD_HEADER_BYTES]);
        b.push(200);
        b.extend_from_slice(b"payload of a later version");
        finish(&mut b, start);
        match walk(&b) {
            (ScanEnd::Corrupt { offset, reason }, 3) => {
                assert_eq!(offset, at);
                assert!(reason.contains("record kind 200 unknown"), "{reason}");
                assert!(reason.contains("newer version"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // Damage before it is damage followed by a whole record: corrupt too.
        let mut d = b.clone();
        d[RECORD_HEADER_BYTES + 2] ^= 0x10;
        assert!(matches!(walk(&d), (ScanEnd::Corrupt { offset: 0, .. }, 0)));
        // A cut inside it is still a torn tail.
        assert!(matches!(walk(&b[..b.len() - 1]), (ScanEnd::Torn { .. }, 3)));
    }

    /// Merge records keep both contexts, gaps included; State records of earlier versions
    /// still decode; every cut of a merge payload is an error.
    #[test]
    fn merge_and_state_records_round_trip() {
        let mut vv = VersionVector::new();
        vv.observe(meridian_crdt::Stamp {
            hlc: Hlc(9),
            replica: ReplicaId(3),
        });
        let mine = Context::from(vv.clone());
        let theirs = Context {
            seen: vv.clone(),
            gap: Some(Gap {
                replica: ReplicaId(3),
                after: Hlc(2),
                upto: Hlc(5),
            }),
        };
        let mut b = Vec::new();
        put_merge(&mut b, 4, b"key", &mine, &theirs, b"state");
        put_state(&mut b, 5, b"old", &vv, b"st");
        let mut seen = Vec::new();
        let (end, n) = scan::<()>(&b, |f| {
            match f.kind {
                Kind::Merge => {
                    let p = decode_merge(f.payload).unwrap();
                    assert_eq!((p.db, p.key, p.state), (4, &b"key"[..], &b"state"[..]));
                    assert_eq!((&p.mine, &p.theirs), (&mine, &theirs));
                    for cut in 0..f.payload.len() {
                        assert!(decode_merge(&f.payload[..cut]).is_err(), "{cut}");
                    }
                }
                Kind::State => {
                    let p = decode_state(f.payload).unwrap();
                    assert_eq!((p.db, p.key, &p.floor), (5, &b"old"[..], &vv));
                }
                other => panic!("{other:?}"),
            }
            seen.push(f.kind);
            Ok(())
        })
        .unwrap();
        assert_eq!((end, n), (ScanEnd::Clean, 2));
        assert_eq!(seen, vec![Kind::Merge, Kind::State]);
    }

    #[test]
    fn a_cut_last_record_is_torn() {
        let b = three();
        for cut in 1..b.len() {
            let (end, _) = walk(&b[..cut]);
            assert!(
                matches!(end, ScanEnd::Torn { .. } | ScanEnd::Clean),
                "cut at {cut}: {end:?}"
            );
        }
        // Zeros after the last record (a preallocated tail) are torn, not corrupt.
        let mut z = three();
        z.extend_from_slice(&[0u8; 100]);
        assert!(matches!(walk(&z).0, ScanEnd::Torn { .. }));
    }

    #[test]
    fn damage_before_valid_records_is_corruption() {
        let mut b = three();
        b[RECORD_HEADER_BYTES + 2] ^= 0x10; // inside the first record's payload
        match walk(&b) {
            (ScanEnd::Corrupt { offset: 0, .. }, 0) => {}
            other => panic!("{other:?}"),
        }
        // The same damage in the last record is a torn tail.
        let mut b = three();
        let last = b.len() - 2;
        b[last] ^= 0x01;
        assert!(matches!(walk(&b), (ScanEnd::Torn { .. }, 2)));
    }

    #[test]
    fn segment_header_checks() {
        let h = SegmentHeader {
            replica: ReplicaId(5),
            first_pos: 1234,
        };
        let bytes = h.encode();
        assert_eq!(SegmentHeader::decode(&bytes).unwrap(), h);
        let mut bad = bytes;
        bad[13] ^= 1;
        assert!(SegmentHeader::decode(&bad).is_err());
        assert!(SegmentHeader::decode(b"MRDNLOG").is_err());
        assert!(SegmentHeader::decode(b"PK\x03\x04 something else entirely").is_err());
    }
}

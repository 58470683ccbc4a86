//! The protocol's messages and their body encodings (docs/replication.md §3–5).
//!
//! `Ops` and `FullSyncChunk` carry records the server encodes itself: this module gives their
//! headers only. Decoders are bounds-checked and allocate nothing from an untrusted count.

use meridian_crdt::codec::{DecodeError, Reader, put_bytes, put_u8, put_u32, put_u64, put_vv};
use meridian_crdt::{Context, Gap, Hlc, ReplicaId, VersionVector};

use crate::error::SyncError;
use crate::frame::{MAGIC, PROTOCOL_VERSION};

/// Longest site or deployment id accepted on the wire.
pub const ID_BYTES_MAX: usize = 255;
/// Number of hash slots: a slot range names slots below it.
pub const SLOTS: u16 = 16384;
/// Most slot ranges a message may list (every slot its own range).
pub const SLOT_RANGES_MAX: u64 = SLOTS as u64;

/// The 8 bytes a dialer sends on a new sync connection, before TLS: `MRDS` and the shard it
/// dials (u16 little-endian), then two zero bytes. The accepting process hands the
/// connection to that shard's thread; the Hello that follows (authenticated by TLS when
/// configured) names the shard again and is checked.
pub const PREAMBLE_MAGIC: [u8; 4] = *b"MRDS";
pub const PREAMBLE_BYTES: usize = 8;

/// The preamble for a connection to `shard`.
pub fn preamble(shard: u16) -> [u8; PREAMBLE_BYTES] {
    let s = shard.to_le_bytes();
    let [m0, m1, m2, m3] = PREAMBLE_MAGIC;
    let [s0, s1] = s;
    [m0, m1, m2, m3, s0, s1, 0, 0]
}

/// The shard a preamble names; `Refused` for anything else (not a Meridian syncer).
pub fn parse_preamble(b: &[u8; PREAMBLE_BYTES]) -> Result<u16, SyncError> {
    let [m0, m1, m2, m3, s0, s1, z0, z1] = *b;
    if [m0, m1, m2, m3] != PREAMBLE_MAGIC || z0 != 0 || z1 != 0 {
        return Err(SyncError::Refused(
            "not a Meridian sync connection (bad preamble)".into(),
        ));
    }
    Ok(u16::from_le_bytes([s0, s1]))
}

fn put_ranges(out: &mut Vec<u8>, ranges: &[(u16, u16)]) {
    meridian_crdt::codec::put_varint(out, ranges.len() as u64);
    for (a, b) in ranges {
        put_u16(out, *a);
        put_u16(out, *b);
    }
}

/// Slot ranges: ascending, disjoint, each `first <= last < SLOTS`.
fn get_ranges(r: &mut Reader<'_>) -> Result<Vec<(u16, u16)>, DecodeError> {
    let n = r.varint()?;
    if n > SLOT_RANGES_MAX {
        return Err(DecodeError::TooManyEntries {
            what: "slot ranges",
            n,
        });
    }
    let mut out: Vec<(u16, u16)> = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let a = get_u16(r)?;
        let b = get_u16(r)?;
        if a > b || b >= SLOTS || out.last().is_some_and(|&(_, last)| a <= last) {
            return Err(DecodeError::Invalid(
                "slot ranges must ascend within 0..16384",
            ));
        }
        out.push((a, b));
    }
    Ok(out)
}

fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn get_u16(r: &mut Reader<'_>) -> Result<u16, DecodeError> {
    Ok(u16::from_le_bytes(r.array()?))
}

fn get_id(r: &mut Reader<'_>) -> Result<String, DecodeError> {
    let b = r.bytes()?;
    if b.len() > ID_BYTES_MAX {
        return Err(DecodeError::TooManyEntries {
            what: "id bytes",
            n: b.len() as u64,
        });
    }
    // Strict: a lossy conversion would map distinct byte strings to one id (every invalid
    // byte becomes U+FFFD) and could grow an id past the limit when it is sent on.
    String::from_utf8(b.to_vec()).map_err(|_| DecodeError::Invalid("id is not UTF-8"))
}

/// The dialer's opening message: who it is, whom it wants, and what it has.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hello {
    pub version: u16,
    pub deployment: String,
    pub from_site: String,
    pub to_site: String,
    pub shard: u16,
    pub shards: u16,
    /// The sender's incarnation the dialer last applied ops from (0: none).
    pub known_incarnation: u64,
    /// Last sequence number applied from the sender's origin in `known_incarnation`.
    pub applied_seq: u64,
    /// Highest hlc the dialer has delivered from every origin.
    pub delivered: VersionVector,
    /// The dialer asks for a full sync whatever the backlog holds.
    pub want_full: bool,
    /// The dialer's own incarnation: an accepter that applied ops of another one knows the
    /// dialer restarted, and may hold ops of it the dialer lost.
    pub from_incarnation: u64,
    /// The dialer's life (docs/replication.md §9): its ops carry the replica id of
    /// (`from_site`, `shard`, `from_life`), and every earlier life of it is retired.
    pub from_life: u32,
    /// The shard of the accepting site the dialer wants the ops of.
    pub to_shard: u16,
    /// The slots the dialing shard owns: the sender streams only ops and keys of these.
    pub slots: Vec<(u16, u16)>,
}

impl Hello {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&MAGIC);
        put_u16(&mut out, self.version);
        put_bytes(&mut out, self.deployment.as_bytes());
        put_bytes(&mut out, self.from_site.as_bytes());
        put_bytes(&mut out, self.to_site.as_bytes());
        put_u16(&mut out, self.shard);
        put_u16(&mut out, self.shards);
        put_u64(&mut out, self.known_incarnation);
        put_u64(&mut out, self.applied_seq);
        put_vv(&mut out, &self.delivered);
        put_u8(&mut out, u8::from(self.want_full));
        put_u64(&mut out, self.from_incarnation);
        put_u32(&mut out, self.from_life);
        put_u16(&mut out, self.to_shard);
        put_ranges(&mut out, &self.slots);
        out
    }

    /// Decodes a Hello. A wrong magic is `Refused` (not a Meridian peer); a wrong version is
    /// decoded so that the accepter can name both versions in its refusal.
    pub fn decode(body: &[u8]) -> Result<Hello, SyncError> {
        let mut r = Reader::new(body);
        let bad = SyncError::malformed("Hello");
        let magic: [u8; 4] = r.array().map_err(SyncError::malformed("Hello"))?;
        if magic != MAGIC {
            return Err(SyncError::Refused(
                "not a Meridian syncer (bad magic)".into(),
            ));
        }
        let version = get_u16(&mut r).map_err(SyncError::malformed("Hello"))?;
        if version != PROTOCOL_VERSION {
            return Err(SyncError::Refused(format!(
                "protocol version {version}, this site speaks {PROTOCOL_VERSION}"
            )));
        }
        let parse = |r: &mut Reader<'_>| -> Result<Hello, DecodeError> {
            Ok(Hello {
                version,
                deployment: get_id(r)?,
                from_site: get_id(r)?,
                to_site: get_id(r)?,
                shard: get_u16(r)?,
                shards: get_u16(r)?,
                known_incarnation: r.u64()?,
                applied_seq: r.u64()?,
                delivered: r.vv()?,
                want_full: r.u8()? != 0,
                from_incarnation: r.u64()?,
                from_life: r.u32()?,
                to_shard: get_u16(r)?,
                slots: get_ranges(r)?,
            })
        };
        let h = parse(&mut r).map_err(bad)?;
        if !r.is_at_end() {
            return Err(SyncError::Refused("trailing bytes after a Hello".into()));
        }
        Ok(h)
    }
}

/// How the sender will bring the dialer up to date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The op stream starts at the given sequence number.
    Resume { from_seq: u64 },
    /// A delta full sync follows, then the op stream.
    FullSync,
}

/// The accepter's answer to a valid Hello.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Welcome {
    pub site: String,
    pub incarnation: u64,
    pub mode: Mode,
    /// The sender's current sequence number.
    pub seq: u64,
    /// The sender's life: its new ops carry the replica id of (`site`, shard, `life`); the
    /// stream may also carry ops of its earlier lives still in its log.
    pub life: u32,
    /// The sending shard and its site's shard count (the dialer dials each shard).
    pub shard: u16,
    pub shards: u16,
    /// The slots the sending shard owns.
    pub slots: Vec<(u16, u16)>,
}

impl Welcome {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        put_bytes(&mut out, self.site.as_bytes());
        put_u64(&mut out, self.incarnation);
        match self.mode {
            Mode::Resume { from_seq } => {
                put_u8(&mut out, 1);
                put_u64(&mut out, from_seq);
            }
            Mode::FullSync => put_u8(&mut out, 2),
        }
        put_u64(&mut out, self.seq);
        put_u32(&mut out, self.life);
        put_u16(&mut out, self.shard);
        put_u16(&mut out, self.shards);
        put_ranges(&mut out, &self.slots);
        out
    }

    pub fn decode(body: &[u8]) -> Result<Welcome, SyncError> {
        let parse = |r: &mut Reader<'_>| -> Result<Welcome, DecodeError> {
            let site = get_id(r)?;
            let incarnation = r.u64()?;
            let mode = match r.u8()? {
                1 => Mode::Resume { from_seq: r.u64()? },
                2 => Mode::FullSync,
                t => return Err(DecodeError::BadTag(t)),
            };
            Ok(Welcome {
                site,
                incarnation,
                mode,
                seq: r.u64()?,
                life: r.u32()?,
                shard: get_u16(r)?,
                shards: get_u16(r)?,
                slots: get_ranges(r)?,
            })
        };
        let mut r = Reader::new(body);
        let w = parse(&mut r).map_err(SyncError::malformed("Welcome"))?;
        if !r.is_at_end() {
            return Err(SyncError::Refused("trailing bytes after a Welcome".into()));
        }
        Ok(w)
    }
}

/// The header of an `Ops` frame; `count` records follow it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpsHeader {
    pub origin: ReplicaId,
    pub incarnation: u64,
    pub first_seq: u64,
    pub count: u32,
}

/// Bytes of an encoded `OpsHeader`.
pub const OPS_HEADER_BYTES: usize = 4 + 8 + 8 + 4;

impl OpsHeader {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        put_u32(out, self.origin.0);
        put_u64(out, self.incarnation);
        put_u64(out, self.first_seq);
        put_u32(out, self.count);
    }

    /// Decodes the header; returns it and the records that follow.
    pub fn decode(body: &[u8]) -> Result<(OpsHeader, &[u8]), SyncError> {
        let mut r = Reader::new(body);
        let parse = |r: &mut Reader<'_>| -> Result<OpsHeader, DecodeError> {
            Ok(OpsHeader {
                origin: ReplicaId(r.u32()?),
                incarnation: r.u64()?,
                first_seq: r.u64()?,
                count: r.u32()?,
            })
        };
        let h = parse(&mut r).map_err(SyncError::malformed("Ops"))?;
        Ok((h, body.get(r.pos()..).unwrap_or_default()))
    }

    /// The sequence number of the last record (`first_seq` when empty).
    pub fn last_seq(&self) -> u64 {
        self.first_seq
            .saturating_add(u64::from(self.count))
            .saturating_sub(1)
            .max(self.first_seq)
    }
}

/// The header of an `OpsSparse` frame: the ops of one origin from `first_seq` to `last_seq`
/// filtered to the dialer's slots; `count` records follow, each `seq_delta:varint` (from
/// `first_seq`, strictly increasing) then the record as in `Ops`. `last_hlc` is the hlc of
/// the op at `last_seq`, kept or not: the receiver has every op of the origin up to it that
/// is in its slots.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SparseHeader {
    pub origin: ReplicaId,
    pub incarnation: u64,
    pub first_seq: u64,
    pub last_seq: u64,
    pub last_hlc: u64,
    pub count: u32,
}

/// Bytes of an encoded `SparseHeader`.
pub const SPARSE_HEADER_BYTES: usize = 4 + 8 + 8 + 8 + 8 + 4;

impl SparseHeader {
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        put_u32(out, self.origin.0);
        put_u64(out, self.incarnation);
        put_u64(out, self.first_seq);
        put_u64(out, self.last_seq);
        put_u64(out, self.last_hlc);
        put_u32(out, self.count);
    }

    /// Decodes the header; returns it and the records that follow. `first_seq` is at least 1
    /// and at most `last_seq`.
    pub fn decode(body: &[u8]) -> Result<(SparseHeader, &[u8]), SyncError> {
        let mut r = Reader::new(body);
        let parse = |r: &mut Reader<'_>| -> Result<SparseHeader, DecodeError> {
            Ok(SparseHeader {
                origin: ReplicaId(r.u32()?),
                incarnation: r.u64()?,
                first_seq: r.u64()?,
                last_seq: r.u64()?,
                last_hlc: r.u64()?,
                count: r.u32()?,
            })
        };
        let h = parse(&mut r).map_err(SyncError::malformed("OpsSparse"))?;
        if h.first_seq == 0 || h.first_seq > h.last_seq {
            return Err(SyncError::Refused(format!(
                "sparse batch from seq {} to {}",
                h.first_seq, h.last_seq
            )));
        }
        Ok((h, body.get(r.pos()..).unwrap_or_default()))
    }
}

/// The receiver's acknowledgement: what it has applied from the sender, and from everyone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Ack {
    pub incarnation: u64,
    pub applied_seq: u64,
    pub delivered: VersionVector,
}

impl Ack {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        put_u64(&mut out, self.incarnation);
        put_u64(&mut out, self.applied_seq);
        put_vv(&mut out, &self.delivered);
        out
    }

    pub fn decode(body: &[u8]) -> Result<Ack, SyncError> {
        let parse = |r: &mut Reader<'_>| -> Result<Ack, DecodeError> {
            Ok(Ack {
                incarnation: r.u64()?,
                applied_seq: r.u64()?,
                delivered: r.vv()?,
            })
        };
        parse(&mut Reader::new(body)).map_err(SyncError::malformed("Ack"))
    }
}

/// Start of a full sync: the sender's sequence number when it began, and its causal context
/// (its delivered vector, own last op included, as the walk begins, less the gap of its own
/// ops it may have lost): every write it covers was applied at the sender, which holds it or
/// has removed it, so the receiver's merge drops a write it holds that the context covers and
/// the sender's states lack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FullSyncBegin {
    pub seq: u64,
    pub context: Context,
    /// The sender's delivered vector on retired lives (origins nobody streams any more) as
    /// the walk begins: the states sent carry those ops, so the receiver's delivered vector
    /// takes these entries once the full sync ends.
    pub retired: VersionVector,
    /// Every key the sender holds follows (no delta filter): the receiver merges the keys it
    /// holds and was not sent with the empty state.
    pub complete: bool,
}

impl FullSyncBegin {
    /// `seq:u64 context:vv retired:vv complete:u8 [gap]`, `gap` (present when the context
    /// has one) `replica:u32 after:u64 upto:u64`. Messages of earlier versions end after
    /// `retired` (not complete, no gap); they ignore what follows it.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        put_u64(&mut out, self.seq);
        put_vv(&mut out, &self.context.seen);
        put_vv(&mut out, &self.retired);
        out.push(u8::from(self.complete));
        if let Some(g) = &self.context.gap {
            put_u32(&mut out, g.replica.0);
            put_u64(&mut out, g.after.0);
            put_u64(&mut out, g.upto.0);
        }
        out
    }

    pub fn decode(body: &[u8]) -> Result<FullSyncBegin, SyncError> {
        let parse = |r: &mut Reader<'_>| -> Result<FullSyncBegin, DecodeError> {
            let seq = r.u64()?;
            let seen = r.vv()?;
            let retired = r.vv()?;
            let mut complete = false;
            let mut gap = None;
            if !r.is_at_end() {
                complete = match r.u8()? {
                    0 => false,
                    1 => true,
                    t => return Err(DecodeError::BadTag(t)),
                };
                if !r.is_at_end() {
                    gap = Some(Gap {
                        replica: ReplicaId(r.u32()?),
                        after: Hlc(r.u64()?),
                        upto: Hlc(r.u64()?),
                    });
                }
            }
            if !r.is_at_end() {
                return Err(DecodeError::Invalid("bytes after a FullSyncBegin"));
            }
            Ok(FullSyncBegin {
                seq,
                context: Context { seen, gap },
                retired,
                complete,
            })
        };
        parse(&mut Reader::new(body)).map_err(SyncError::malformed("FullSyncBegin"))
    }
}

/// End of a delta full sync: the stream continues at `seq + 1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FullSyncEnd {
    pub seq: u64,
    /// Keys sent, for the logs.
    pub keys: u64,
}

impl FullSyncEnd {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16);
        put_u64(&mut out, self.seq);
        put_u64(&mut out, self.keys);
        out
    }

    pub fn decode(body: &[u8]) -> Result<FullSyncEnd, SyncError> {
        let parse = |r: &mut Reader<'_>| -> Result<FullSyncEnd, DecodeError> {
            Ok(FullSyncEnd {
                seq: r.u64()?,
                keys: r.u64()?,
            })
        };
        parse(&mut Reader::new(body)).map_err(SyncError::malformed("FullSyncEnd"))
    }
}

/// Decodes a `Refuse` body: the reason, as text.
pub fn decode_refuse(body: &[u8]) -> String {
    let end = body.len().min(1024);
    String::from_utf8_lossy(body.get(..end).unwrap_or_default()).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_crdt::{Hlc, Stamp};

    fn vv() -> VersionVector {
        let mut v = VersionVector::new();
        v.observe(Stamp {
            hlc: Hlc(77),
            replica: ReplicaId(3),
        });
        v
    }

    #[test]
    fn ids_must_be_utf8() {
        // Found by the sync_frames fuzz target: 255 bytes of 0xff decoded lossily to 765
        // bytes, which re-encoded past the id limit.
        let w = Welcome {
            site: "a".into(),
            incarnation: 1,
            mode: Mode::FullSync,
            seq: 0,
            life: 0,
            shard: 1,
            shards: 2,
            slots: vec![(8192, 16383)],
        };
        let mut bad = Vec::new();
        put_bytes(&mut bad, &[0xff; 255]);
        bad.extend_from_slice(&w.encode()[2..]);
        assert!(Welcome::decode(&bad).is_err());
        let mut ok = Vec::new();
        put_bytes(&mut ok, "é".as_bytes());
        ok.extend_from_slice(&w.encode()[2..]);
        let back = Welcome::decode(&ok).unwrap();
        assert_eq!(back.site, "é");
        assert_eq!(Welcome::decode(&back.encode()).unwrap(), back);
    }

    #[test]
    fn messages_round_trip() {
        let h = Hello {
            version: PROTOCOL_VERSION,
            deployment: "dep".into(),
            from_site: "a".into(),
            to_site: "b".into(),
            shard: 0,
            shards: 1,
            known_incarnation: 9,
            from_incarnation: 3,
            applied_seq: 100,
            delivered: vv(),
            want_full: true,
            from_life: 2,
            to_shard: 3,
            slots: vec![(0, 5), (9, 9)],
        };
        assert_eq!(Hello::decode(&h.encode()).unwrap(), h);
        for bad in [vec![(5, 4)], vec![(0, 16384)], vec![(0, 5), (5, 9)]] {
            let mut b = h.clone();
            b.slots = bad;
            assert!(Hello::decode(&b.encode()).is_err(), "{:?}", b.slots);
        }
        assert_eq!(parse_preamble(&preamble(7)).unwrap(), 7);
        assert!(parse_preamble(b"GET / HT").is_err());
        let sh = SparseHeader {
            origin: ReplicaId(7),
            incarnation: 1,
            first_seq: 10,
            last_seq: 20,
            last_hlc: 99,
            count: 2,
        };
        let mut out = Vec::new();
        sh.encode_into(&mut out);
        assert_eq!(out.len(), SPARSE_HEADER_BYTES);
        assert_eq!(SparseHeader::decode(&out).unwrap().0, sh);
        let mut bad = sh;
        bad.first_seq = 21;
        out.clear();
        bad.encode_into(&mut out);
        assert!(SparseHeader::decode(&out).is_err());
        for mode in [Mode::Resume { from_seq: 5 }, Mode::FullSync] {
            let w = Welcome {
                site: "b".into(),
                incarnation: 4,
                mode,
                seq: 8,
                life: 5,
                shard: 0,
                shards: 3,
                slots: vec![(0, 5460)],
            };
            assert_eq!(Welcome::decode(&w.encode()).unwrap(), w);
        }
        let a = Ack {
            incarnation: 1,
            applied_seq: 2,
            delivered: vv(),
        };
        assert_eq!(Ack::decode(&a.encode()).unwrap(), a);
        let mut b = FullSyncBegin {
            seq: 4,
            context: Context::from(vv()),
            retired: vv(),
            complete: true,
        };
        assert_eq!(FullSyncBegin::decode(&b.encode()).unwrap(), b);
        // Without the trailing byte (an earlier version's message): not complete.
        let mut old = b.encode();
        old.pop();
        let d = FullSyncBegin::decode(&old).unwrap();
        assert_eq!((d.seq, d.complete), (4, false));
        let mut bad = b.encode();
        *bad.last_mut().unwrap() = 2;
        assert!(FullSyncBegin::decode(&bad).is_err());
        // A context with a gap; every truncation of it is an error or an earlier layout.
        b.context.gap = Some(Gap {
            replica: ReplicaId(7),
            after: Hlc(5),
            upto: Hlc(9),
        });
        let full = b.encode();
        assert_eq!(FullSyncBegin::decode(&full).unwrap(), b);
        for n in 0..full.len() {
            if let Ok(d) = FullSyncBegin::decode(&full[..n]) {
                assert_eq!(d.context.gap, None, "{n}");
            }
        }
        let mut long = full.clone();
        long.push(0);
        assert!(FullSyncBegin::decode(&long).is_err());
        let mut out = Vec::new();
        let oh = OpsHeader {
            origin: ReplicaId(7),
            incarnation: 1,
            first_seq: 10,
            count: 3,
        };
        oh.encode_into(&mut out);
        out.extend_from_slice(b"rest");
        let (d, rest) = OpsHeader::decode(&out).unwrap();
        assert_eq!((d, rest), (oh, &b"rest"[..]));
        assert_eq!(d.last_seq(), 12);
    }

    #[test]
    fn wrong_magic_or_version_is_refused_with_a_reason() {
        let mut h = Hello {
            version: PROTOCOL_VERSION + 1,
            deployment: "d".into(),
            from_site: "a".into(),
            to_site: "b".into(),
            shard: 0,
            shards: 1,
            known_incarnation: 0,
            from_incarnation: 1,
            applied_seq: 0,
            delivered: VersionVector::new(),
            want_full: false,
            from_life: 0,
            to_shard: 0,
            slots: vec![(0, 16383)],
        };
        let e = Hello::decode(&h.encode()).unwrap_err();
        let theirs = format!("protocol version {}", PROTOCOL_VERSION + 1);
        assert!(e.to_string().contains(&theirs), "{e}");
        h.version = PROTOCOL_VERSION;
        let mut bytes = h.encode();
        bytes[0] = b'X';
        assert!(matches!(Hello::decode(&bytes), Err(SyncError::Refused(_))));
        // Every truncation is an error, never a panic.
        let full = h.encode();
        for n in 0..full.len() {
            assert!(Hello::decode(&full[..n]).is_err());
        }
    }
}

//! Snapshot files: the CRDT state of every key of a shard at one log position, with what
//! replication must remember (docs/persistence.md §3).
//!
//! Layout: `magic:8`, a header block, key blocks, then an end block and `end magic:8`.
//! Every block is `len:u32 crc:u32 body` (CRC-32 of the body); the end block has `len` 0.
//! Header body: `replica:u32 pos:u64 seq:u64 hlc:u64 own_last:u64 keys:u64
//! incarnations:(varint n, n × (id:u64 first_seq:u64)) peers:(varint n, n × (site:bytes
//! incarnation:u64 seq:u64)) delivered:vv`, then optional sections `tag:u8 body`: tag
//! `HEADER_RETIRED_IN` lists the links' retired entries (`Peer::retired_in`); an unknown tag
//! refuses the snapshot as a newer version's. Key block bodies: entries `db:u16 key:bytes
//! state:bytes` (`KeyState::encode_state`); FUNCTION libraries follow the keys as entries of
//! database `LIBRARY_DB` whose key is the library name and whose state is `hlc:u64
//! replica:u32 loaded:u8 [code:bytes]` (the library register, `script::replicate`; not counted
//! in `keys`), then the keys this shard evicted (`Eviction::evicted`) as entries of
//! `EVICTED_DB` followed by `db:u16 key:bytes observed:bytes` (not counted in `keys`; a
//! version before them reads such a snapshot as damaged). A snapshot is written to `*.tmp`, fsynced, then
//! renamed: a file with the final name is whole unless the disk damaged it, which the
//! checksums and the key count catch.

use std::io::{BufReader, BufWriter, Read as _, Write as _};
use std::path::{Path, PathBuf};

use meridian_crdt::codec::{Reader, put_bytes, put_varint, put_vv};
use meridian_crdt::{Hlc, KeyState, Observed, ReplicaId, Stamp, VersionVector};

use crate::evict::EvictedMark;

use crate::shard::Shard;

pub const SNAPSHOT_MAGIC: &[u8; 8] = b"MRDNSNP\x01";
pub const END_MAGIC: &[u8; 8] = b"MRDNEND\x01";
/// Key blocks are cut at about this size.
pub const BLOCK_BYTES: usize = 256 * 1024;
/// Largest block a loader accepts (a single key's state may be large).
pub const BLOCK_BYTES_MAX: usize = 2 * 1024 * 1024 * 1024;
/// The database index that marks a library entry among the key entries.
pub const LIBRARY_DB: u16 = u16::MAX;
/// The database number that marks a key this shard evicted (docs/conflicts.md §18): in a
/// snapshot `db:u16 key:bytes mark:bytes` follow (`encode_evicted_mark`), in a full-sync
/// chunk `db:u16 key:bytes`.
pub const EVICTED_DB: u16 = u16::MAX - 1;

/// An evicted key's mark: `seen:observed live:vv received:observed` (`received` as the
/// counter totals of an observed with no stamps).
pub fn encode_evicted_mark(out: &mut Vec<u8>, mark: &EvictedMark) {
    meridian_crdt::codec::put_observed(out, &mark.seen);
    put_vv(out, &mark.live);
    meridian_crdt::codec::put_observed(
        out,
        &Observed {
            stamps: VersionVector::new(),
            incs: mark.received.clone(),
        },
    );
}

/// Decodes `encode_evicted_mark`'s bytes (all of them).
pub fn decode_evicted_mark(bytes: &[u8]) -> Result<EvictedMark, meridian_crdt::codec::DecodeError> {
    let mut r = Reader::new(bytes);
    let seen = r.observed()?;
    let live = r.vv()?;
    let received = r.observed()?;
    if !received.stamps.is_empty() || !r.is_at_end() {
        return Err(meridian_crdt::codec::DecodeError::Invalid(
            "evicted key mark: stamps in the totals, or trailing bytes",
        ));
    }
    Ok(EvictedMark {
        seen,
        live,
        received: received.incs,
    })
}
/// Most incarnations and peers a header may list (a peer per shard of each of `PEERS_MAX`
/// sites).
pub const HEADER_ITEMS_MAX: usize = 16 * 1024;

pub fn snapshot_name(pos: u64) -> String {
    format!("snap-{pos:020}.snap")
}

/// What a snapshot's header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SnapshotMeta {
    pub replica: ReplicaId,
    /// The snapshot holds the effect of every log record below this position.
    pub pos: u64,
    /// Last sequence number this shard had issued.
    pub seq: u64,
    /// The hybrid clock's last value.
    pub hlc: Hlc,
    /// Hlc of this shard's last own op.
    pub own_last: Hlc,
    pub keys: u64,
    /// (incarnation, first sequence number), oldest first.
    pub incarnations: Vec<(u64, u64)>,
    /// Per peer shard (`Peer::key`): the incarnation and sequence number applied from it.
    pub peers: Vec<(String, u64, u64)>,
    /// What this shard delivered from other origins.
    pub delivered: VersionVector,
    /// Per peer shard (`Peer::key`) whose link keeps retired entries (`Peer::retired_in`):
    /// those entries. Empty ones are left out, and with none the header ends at `delivered`
    /// as before this field (`HEADER_RETIRED_IN`).
    pub retired_in: Vec<(String, VersionVector)>,
}

/// The tag of the header section after `delivered` that lists the links' retired entries:
/// `1 · n:varint · n × (peer:bytes vv)`. A header may end at `delivered` (written before
/// sections, or with nothing to list); a section of a tag this version does not know was
/// written by a newer version and refuses the snapshot with that reason.
pub const HEADER_RETIRED_IN: u8 = 1;

impl SnapshotMeta {
    /// The header of `shard`'s current state at log position `pos`.
    pub fn of(shard: &Shard, pos: u64) -> SnapshotMeta {
        SnapshotMeta {
            replica: shard.replica,
            pos,
            seq: shard.seq,
            hlc: shard.clock.last(),
            own_last: shard.sync.own_last,
            keys: shard.dbs.iter().map(|d| d.table.len() as u64).sum(),
            incarnations: shard.sync.incarnations.clone(),
            peers: shard
                .sync
                .peers
                .iter()
                .map(|p| (p.key(), p.in_incarnation, p.in_applied_seq))
                .collect(),
            delivered: shard.sync.delivered.clone(),
            retired_in: shard
                .sync
                .peers
                .iter()
                .filter(|p| !p.retired_in.is_empty())
                .map(|p| (p.key(), p.retired_in.clone()))
                .collect(),
        }
    }

    fn encode(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.replica.0.to_le_bytes());
        for v in [self.pos, self.seq, self.hlc.0, self.own_last.0, self.keys] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        put_varint(out, self.incarnations.len() as u64);
        for (id, first) in &self.incarnations {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&first.to_le_bytes());
        }
        put_varint(out, self.peers.len() as u64);
        for (site, inc, seq) in &self.peers {
            put_bytes(out, site.as_bytes());
            out.extend_from_slice(&inc.to_le_bytes());
            out.extend_from_slice(&seq.to_le_bytes());
        }
        put_vv(out, &self.delivered);
        if !self.retired_in.is_empty() {
            out.push(HEADER_RETIRED_IN);
            put_varint(out, self.retired_in.len() as u64);
            for (peer, vv) in &self.retired_in {
                put_bytes(out, peer.as_bytes());
                put_vv(out, vv);
            }
        }
    }

    fn decode(body: &[u8]) -> Result<SnapshotMeta, String> {
        let bad = |e: meridian_crdt::codec::DecodeError| format!("snapshot header: {e}");
        let mut r = Reader::new(body);
        let replica = ReplicaId(r.u32().map_err(bad)?);
        let pos = r.u64().map_err(bad)?;
        let seq = r.u64().map_err(bad)?;
        let hlc = Hlc(r.u64().map_err(bad)?);
        let own_last = Hlc(r.u64().map_err(bad)?);
        let keys = r.u64().map_err(bad)?;
        let n = r.varint().map_err(bad)? as usize;
        if n > HEADER_ITEMS_MAX {
            return Err(format!("snapshot header lists {n} incarnations"));
        }
        let mut incarnations = Vec::with_capacity(n);
        for _ in 0..n {
            incarnations.push((r.u64().map_err(bad)?, r.u64().map_err(bad)?));
        }
        let n = r.varint().map_err(bad)? as usize;
        if n > HEADER_ITEMS_MAX {
            return Err(format!("snapshot header lists {n} peers"));
        }
        let mut peers = Vec::with_capacity(n);
        for _ in 0..n {
            let site = String::from_utf8_lossy(r.bytes().map_err(bad)?).into_owned();
            peers.push((site, r.u64().map_err(bad)?, r.u64().map_err(bad)?));
        }
        let delivered = r.vv().map_err(bad)?;
        let mut retired_in = None;
        while !r.is_at_end() {
            match r.u8().map_err(bad)? {
                HEADER_RETIRED_IN if retired_in.is_none() => {
                    let n = r.varint().map_err(bad)? as usize;
                    if n > HEADER_ITEMS_MAX {
                        return Err(format!("snapshot header lists {n} links' retired entries"));
                    }
                    let mut v = Vec::with_capacity(n);
                    for _ in 0..n {
                        let peer = std::str::from_utf8(r.bytes().map_err(bad)?)
                            .map_err(|_| "snapshot header: a peer name is not UTF-8".to_string())?
                            .to_string();
                        v.push((peer, r.vv().map_err(bad)?));
                    }
                    retired_in = Some(v);
                }
                HEADER_RETIRED_IN => {
                    return Err("snapshot header: two sections of retired entries".to_string());
                }
                t => {
                    return Err(format!(
                        "snapshot header: section {t} unknown to this version (written by a newer version of Meridian)"
                    ));
                }
            }
        }
        Ok(SnapshotMeta {
            replica,
            pos,
            seq,
            hlc,
            own_last,
            keys,
            incarnations,
            peers,
            delivered,
            retired_in: retired_in.unwrap_or_default(),
        })
    }
}

fn put_block(w: &mut impl std::io::Write, body: &[u8]) -> std::io::Result<()> {
    w.write_all(&(body.len() as u32).to_le_bytes())?;
    w.write_all(&crc32fast::hash(body).to_le_bytes())?;
    w.write_all(body)
}

/// Writes `shard`'s state as the snapshot at `pos` in `dir`: a temporary file, fsynced,
/// renamed, and the directory fsynced. Returns the path and its size.
pub fn write(shard: &Shard, pos: u64, dir: &Path) -> std::io::Result<(PathBuf, u64)> {
    let mut w = SnapshotWriter::create(dir, pos)?;
    w.header(&SnapshotMeta::of(shard, pos))?;
    w.keys_of(shard)?;
    w.libraries_of(shard)?;
    w.finish()
}

/// A snapshot written in parts (`job::background_snapshot` replays the keys a part at a
/// time): the header of the first part, then each part's keys and evicted marks, the
/// libraries once, and at `finish` the header again with the count of every part's keys
/// (the same length: only that fixed-width field differs).
pub struct SnapshotWriter {
    w: BufWriter<std::fs::File>,
    tmp: PathBuf,
    path: PathBuf,
    dir: PathBuf,
    /// The header written, with `keys` the keys written so far.
    meta: Option<SnapshotMeta>,
    body: Vec<u8>,
    state: Vec<u8>,
}

impl SnapshotWriter {
    /// Starts `dir`'s snapshot at `pos` in a temporary file.
    pub fn create(dir: &Path, pos: u64) -> std::io::Result<SnapshotWriter> {
        let path = dir.join(snapshot_name(pos));
        let tmp = dir.join(format!("{}.tmp", snapshot_name(pos)));
        let file = std::fs::File::create(&tmp)?;
        let mut w = BufWriter::with_capacity(1024 * 1024, file);
        w.write_all(SNAPSHOT_MAGIC)?;
        Ok(SnapshotWriter {
            w,
            tmp,
            path,
            dir: dir.to_path_buf(),
            meta: None,
            body: Vec::with_capacity(BLOCK_BYTES + 4096),
            state: Vec::new(),
        })
    }

    /// Writes the header (its `keys` is replaced at `finish`).
    pub fn header(&mut self, meta: &SnapshotMeta) -> std::io::Result<()> {
        let mut meta = meta.clone();
        meta.keys = 0;
        self.body.clear();
        meta.encode(&mut self.body);
        put_block(&mut self.w, &self.body)?;
        self.body.clear();
        self.meta = Some(meta);
        Ok(())
    }

    /// The header written (`keys`: those written so far).
    pub fn meta(&self) -> Option<&SnapshotMeta> {
        self.meta.as_ref()
    }

    /// Cuts a block once the body reached `BLOCK_BYTES`.
    fn entry_done(&mut self) -> std::io::Result<()> {
        if self.body.len() >= BLOCK_BYTES {
            put_block(&mut self.w, &self.body)?;
            self.body.clear();
        }
        Ok(())
    }

    /// Every key `shard` holds and every key it evicted.
    pub fn keys_of(&mut self, shard: &Shard) -> std::io::Result<()> {
        let mut n = 0u64;
        for (db, d) in shard.dbs.iter().enumerate() {
            for e in d.table.iter() {
                self.body.extend_from_slice(&(db as u16).to_le_bytes());
                put_bytes(&mut self.body, &e.key);
                self.state.clear();
                e.state.encode_state(&mut self.state);
                put_bytes(&mut self.body, &self.state);
                n += 1;
                self.entry_done()?;
            }
        }
        for ((db, key), mark) in shard.evict.evicted.iter() {
            self.body.extend_from_slice(&EVICTED_DB.to_le_bytes());
            self.body.extend_from_slice(&db.to_le_bytes());
            put_bytes(&mut self.body, key);
            self.state.clear();
            encode_evicted_mark(&mut self.state, mark);
            put_bytes(&mut self.body, &self.state);
            self.entry_done()?;
        }
        if let Some(m) = self.meta.as_mut() {
            m.keys += n;
        }
        Ok(())
    }

    /// `shard`'s FUNCTION libraries.
    pub fn libraries_of(&mut self, shard: &Shard) -> std::io::Result<()> {
        for (name, entry) in shard.scripting.register.iter() {
            self.body.extend_from_slice(&LIBRARY_DB.to_le_bytes());
            put_bytes(&mut self.body, name);
            self.state.clear();
            encode_library(&mut self.state, entry.stamp, entry.code.as_deref());
            put_bytes(&mut self.body, &self.state);
            self.entry_done()?;
        }
        Ok(())
    }

    /// Ends the file, writes the header's key count, fsyncs, renames, fsyncs the directory.
    /// Returns the path and its size.
    pub fn finish(mut self) -> std::io::Result<(PathBuf, u64)> {
        use std::io::{Seek as _, SeekFrom};
        if !self.body.is_empty() {
            put_block(&mut self.w, &self.body)?;
        }
        self.w.write_all(&0u32.to_le_bytes())?;
        self.w.write_all(&0u32.to_le_bytes())?;
        self.w.write_all(END_MAGIC)?;
        let mut file = self.w.into_inner().map_err(|e| e.into_error())?;
        let meta = self
            .meta
            .ok_or_else(|| std::io::Error::other("a snapshot without a header"))?;
        if meta.keys > 0 {
            self.body.clear();
            meta.encode(&mut self.body);
            file.seek(SeekFrom::Start(SNAPSHOT_MAGIC.len() as u64))?;
            put_block(&mut file, &self.body)?;
        }
        file.sync_all()?;
        let bytes = file.metadata()?.len();
        drop(file);
        std::fs::rename(&self.tmp, &self.path)?;
        super::writer::sync_dir(&self.dir)?;
        Ok((self.path, bytes))
    }

    /// Removes the unfinished file (a part outgrew its budget, or a part failed).
    pub fn abandon(self) {
        let tmp = self.tmp.clone();
        drop(self);
        let _ = std::fs::remove_file(tmp);
    }
}

/// A library entry's state: `hlc:u64 replica:u32 loaded:u8 [code:bytes]` (snapshots and
/// full-sync chunks).
pub fn encode_library(out: &mut Vec<u8>, stamp: Stamp, code: Option<&[u8]>) {
    out.extend_from_slice(&stamp.hlc.0.to_le_bytes());
    out.extend_from_slice(&stamp.replica.0.to_le_bytes());
    match code {
        Some(c) => {
            out.push(1);
            put_bytes(out, c);
        }
        None => out.push(0),
    }
}

pub fn decode_library(
    b: &[u8],
) -> Result<(Stamp, Option<&[u8]>), meridian_crdt::codec::DecodeError> {
    let mut r = Reader::new(b);
    let hlc = Hlc(r.u64()?);
    let replica = ReplicaId(r.u32()?);
    let code = match r.u8()? {
        0 => None,
        _ => Some(r.bytes()?),
    };
    if !r.is_at_end() {
        return Err(meridian_crdt::codec::DecodeError::Invalid(
            "trailing bytes after a library entry",
        ));
    }
    Ok((Stamp { hlc, replica }, code))
}

/// Reads blocks of a snapshot, checking each.
struct Blocks<R: std::io::Read> {
    r: R,
    offset: u64,
}

impl<R: std::io::Read> Blocks<R> {
    /// The next block's body; None at the end block.
    fn next(&mut self, buf: &mut Vec<u8>) -> Result<Option<u64>, String> {
        let at = self.offset;
        let mut head = [0u8; 8];
        self.r
            .read_exact(&mut head)
            .map_err(|e| format!("offset {at}: block header: {e}"))?;
        let len = u32::from_le_bytes(head[..4].try_into().unwrap_or([0; 4])) as usize;
        let crc = u32::from_le_bytes(head[4..].try_into().unwrap_or([0; 4]));
        self.offset += 8;
        if len == 0 {
            if crc != 0 {
                return Err(format!("offset {at}: bad end block"));
            }
            let mut magic = [0u8; 8];
            self.r
                .read_exact(&mut magic)
                .map_err(|e| format!("offset {at}: end marker: {e}"))?;
            if &magic != END_MAGIC {
                return Err(format!("offset {}: bad end marker", at + 8));
            }
            let mut rest = [0u8; 1];
            if self.r.read(&mut rest).map_err(|e| e.to_string())? != 0 {
                return Err(format!("offset {}: bytes after the end marker", at + 16));
            }
            return Ok(None);
        }
        if len > BLOCK_BYTES_MAX {
            return Err(format!("offset {at}: block of {len} bytes"));
        }
        buf.clear();
        // Grow with what is actually read, not with what the length claims.
        let got = (&mut self.r)
            .take(len as u64)
            .read_to_end(buf)
            .map_err(|e| format!("offset {at}: {e}"))?;
        if got != len {
            return Err(format!(
                "offset {at}: block of {len} bytes cut after {got} (truncated file)"
            ));
        }
        if crc32fast::hash(buf) != crc {
            return Err(format!("offset {at}: block checksum mismatch"));
        }
        self.offset += len as u64;
        Ok(Some(at))
    }
}

fn open<R: std::io::Read>(mut r: R) -> Result<Blocks<R>, String> {
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)
        .map_err(|e| format!("offset 0: magic: {e}"))?;
    if &magic != SNAPSHOT_MAGIC {
        return Err("offset 0: not a Meridian snapshot (bad magic)".to_string());
    }
    Ok(Blocks { r, offset: 8 })
}

/// Reads and checks the whole snapshot, calling `each(db, key, state)` for every key.
/// Errors name the offset of the damage.
pub fn read(
    path: &Path,
    databases: usize,
    each: impl FnMut(usize, &[u8], KeyState) -> Result<(), String>,
) -> Result<SnapshotMeta, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    read_from(BufReader::with_capacity(1024 * 1024, f), databases, each)
}

/// `read`, also calling `each_library(name, stamp, code)` for every library entry and
/// `each_evicted(db, key, observed)` for every evicted key's mark.
pub fn read_with_libraries(
    path: &Path,
    databases: usize,
    each: impl FnMut(usize, &[u8], KeyState) -> Result<(), String>,
    each_library: impl FnMut(&[u8], Stamp, Option<&[u8]>) -> Result<(), String>,
    each_evicted: impl FnMut(u16, &[u8], EvictedMark) -> Result<(), String>,
) -> Result<SnapshotMeta, String> {
    let f = std::fs::File::open(path).map_err(|e| format!("cannot open: {e}"))?;
    read_all(
        BufReader::with_capacity(1024 * 1024, f),
        databases,
        each,
        each_library,
        each_evicted,
    )
}

/// `read` from any byte source (the fuzz target feeds it bytes).
pub fn read_from<R: std::io::Read>(
    r: R,
    databases: usize,
    each: impl FnMut(usize, &[u8], KeyState) -> Result<(), String>,
) -> Result<SnapshotMeta, String> {
    read_all(r, databases, each, |_, _, _| Ok(()), |_, _, _| Ok(()))
}

/// Reads the whole snapshot: keys to `each`, library entries to `each_library`.
pub fn read_all<R: std::io::Read>(
    r: R,
    databases: usize,
    mut each: impl FnMut(usize, &[u8], KeyState) -> Result<(), String>,
    mut each_library: impl FnMut(&[u8], Stamp, Option<&[u8]>) -> Result<(), String>,
    mut each_evicted: impl FnMut(u16, &[u8], EvictedMark) -> Result<(), String>,
) -> Result<SnapshotMeta, String> {
    let mut blocks = open(r)?;
    let mut buf = Vec::new();
    let meta = match blocks.next(&mut buf)? {
        Some(_) => SnapshotMeta::decode(&buf)?,
        None => return Err("offset 8: no header block".to_string()),
    };
    let mut keys = 0u64;
    while let Some(at) = blocks.next(&mut buf)? {
        let mut r = Reader::new(&buf);
        while !r.is_at_end() {
            let bad = |e: meridian_crdt::codec::DecodeError| format!("block at offset {at}: {e}");
            let db16 = u16::from_le_bytes(r.array().map_err(bad)?);
            if db16 == LIBRARY_DB {
                let name = r.bytes().map_err(bad)?;
                let st = r.bytes().map_err(bad)?;
                let (stamp, code) = decode_library(st).map_err(bad)?;
                each_library(name, stamp, code)?;
                continue;
            }
            if db16 == EVICTED_DB {
                let db = u16::from_le_bytes(r.array().map_err(bad)?);
                if usize::from(db) >= databases {
                    return Err(format!(
                        "block at offset {at}: evicted key in database {db} of {databases}"
                    ));
                }
                let key = r.bytes().map_err(bad)?;
                let mark = decode_evicted_mark(r.bytes().map_err(bad)?).map_err(bad)?;
                each_evicted(db, key, mark)?;
                continue;
            }
            let db = usize::from(db16);
            if db >= databases {
                return Err(format!(
                    "block at offset {at}: key in database {db} of {databases}"
                ));
            }
            let key = r.bytes().map_err(bad)?;
            let st = r.bytes().map_err(bad)?;
            let mut sr = Reader::new(st);
            let state = KeyState::decode_state(&mut sr).map_err(bad)?;
            if !sr.is_at_end() {
                return Err(format!(
                    "block at offset {at}: trailing bytes after a state"
                ));
            }
            each(db, key, state)?;
            keys += 1;
        }
    }
    if keys != meta.keys {
        return Err(format!(
            "holds {keys} keys but its header says {}",
            meta.keys
        ));
    }
    Ok(meta)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let mut delivered = VersionVector::new();
        delivered.observe(meridian_crdt::Stamp {
            hlc: Hlc(77),
            replica: ReplicaId(3),
        });
        let m = SnapshotMeta {
            replica: ReplicaId(9),
            pos: 100,
            seq: 55,
            hlc: Hlc(1234),
            own_last: Hlc(1200),
            keys: 0,
            incarnations: vec![(11, 1), (12, 40)],
            peers: vec![("b".to_string(), 5, 6)],
            delivered: delivered.clone(),
            retired_in: Vec::new(),
        };
        let mut out = Vec::new();
        m.encode(&mut out);
        assert_eq!(SnapshotMeta::decode(&out).unwrap(), m);
        for cut in 0..out.len() {
            assert!(SnapshotMeta::decode(&out[..cut]).is_err());
        }
        // With links' retired entries: a section after `delivered`, which a header without
        // them (as every earlier version wrote) lacks.
        let with = SnapshotMeta {
            retired_in: vec![
                ("b#1".to_string(), delivered.clone()),
                ("c".to_string(), delivered),
            ],
            ..m.clone()
        };
        let mut longer = Vec::new();
        with.encode(&mut longer);
        assert_eq!(longer.get(..out.len()), Some(&out[..]));
        assert_eq!(SnapshotMeta::decode(&longer).unwrap(), with);
        // Every cut inside the section is an error (a cut at its start is the older header,
        // which the block's checksum stands for).
        for cut in out.len() + 1..longer.len() {
            assert!(
                SnapshotMeta::decode(&longer[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        // The section twice, or one of a tag this version does not know: clear errors.
        let mut twice = longer.clone();
        twice.extend_from_slice(&longer[out.len()..]);
        let e = SnapshotMeta::decode(&twice).unwrap_err();
        assert!(e.contains("two sections"), "{e}");
        let mut newer = out.clone();
        newer.extend_from_slice(&[7, 0]);
        let e = SnapshotMeta::decode(&newer).unwrap_err();
        assert!(
            e.contains("section 7 unknown") && e.contains("newer version"),
            "{e}"
        );
        // A peer name that is not UTF-8.
        let mut bad = out.clone();
        bad.push(HEADER_RETIRED_IN);
        put_varint(&mut bad, 1);
        put_bytes(&mut bad, &[0xff]);
        put_vv(&mut bad, &VersionVector::new());
        assert!(SnapshotMeta::decode(&bad).is_err());
    }
}

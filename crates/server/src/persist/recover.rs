//! Recovery: the newest valid snapshot, then every log record after it, replayed through the
//! same paths live writes take (docs/persistence.md §4).
//!
//! A torn tail of the newest segment (a crash cut its last write short) is cut at the last
//! valid record and logged with what was dropped; any other damage stops the start with the
//! file and offset. A damaged snapshot is passed over for an older one when the log still
//! reaches back to it. Background snapshots use the same replay on a private shard, up to
//! the segment boundary they were asked for.

use std::path::{Path, PathBuf};

use meridian_crdt::codec::Reader;
use meridian_crdt::{Context, Hlc, HlcClock, KeyState, Stamp};

use super::PersistError;
use super::record::{self, Kind, ScanEnd, SegmentHeader};
use super::snapshot::{self, SnapshotMeta};
use super::writer::SegmentInfo;
use crate::keyspace::Db;
use crate::oplog::{self, OpBody};
use crate::shard::Shard;

/// What recovery is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// Server start: cut a torn tail, remove leftover temporary files.
    Start,
    /// A background snapshot: replay records below `upto` only, change no file.
    Snapshot { upto: u64 },
}

/// What recovery found and did.
#[derive(Debug, Default)]
pub struct Recovered {
    /// Position of the next record.
    pub next_pos: u64,
    /// Segments kept, oldest first, with their extents.
    pub segments: Vec<SegmentInfo>,
    /// The snapshot loaded: its position, path and size.
    pub snapshot: Option<(u64, PathBuf, u64)>,
    /// Other valid snapshots' positions and paths (candidates to drop later).
    pub snapshots: Vec<(u64, PathBuf)>,
    pub keys_loaded: u64,
    pub records_replayed: u64,
    /// Highest clock lease found (an hlc).
    pub lease: u64,
}

/// Files of a data directory.
#[derive(Debug, Default)]
pub struct Listing {
    pub segments: Vec<(u64, PathBuf)>,
    pub snapshots: Vec<(u64, PathBuf)>,
    pub temporary: Vec<PathBuf>,
    pub unknown: Vec<PathBuf>,
}

fn numbered(name: &str, prefix: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Lists `dir`, sorting segments and snapshots by position.
pub fn list(dir: &Path) -> Result<Listing, PersistError> {
    let mut out = Listing::default();
    let rd = std::fs::read_dir(dir).map_err(|e| PersistError::io(dir, e))?;
    for entry in rd {
        let entry = entry.map_err(|e| PersistError::io(dir, e))?;
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(pos) = numbered(&name, "log-", ".log") {
            out.segments.push((pos, path));
        } else if let Some(pos) = numbered(&name, "snap-", ".snap") {
            out.snapshots.push((pos, path));
        } else if name.ends_with(".tmp") {
            out.temporary.push(path);
        } else if name != "LOCK" && name != "fsynced" && name != super::life::LIFE_FILE {
            out.unknown.push(path);
        }
    }
    out.segments.sort();
    out.snapshots.sort();
    Ok(out)
}

/// Empties `shard`'s keyspace and replication memory (after a snapshot failed half-way).
fn reset(shard: &mut Shard) {
    shard.dbs = (0..shard.dbs.len()).map(|_| Db::new()).collect();
    shard.seq = 0;
    shard.clock = HlcClock::new();
    shard.sync.own_last = Hlc::ZERO;
    shard.sync.delivered = meridian_crdt::VersionVector::new();
    shard.sync.own_logged = meridian_crdt::VersionVector::new();
    shard.sync.incarnations.clear();
    for p in &mut shard.sync.peers {
        p.in_incarnation = 0;
        p.in_applied_seq = 0;
        p.retired_in = meridian_crdt::VersionVector::new();
    }
}

fn raise_clock(shard: &mut Shard, hlc: Hlc) {
    if hlc > shard.clock.last() {
        shard.clock = HlcClock::resume_after(hlc);
    }
}

fn apply_meta(shard: &mut Shard, m: &SnapshotMeta) {
    shard.seq = m.seq;
    raise_clock(shard, m.hlc);
    shard.sync.own_last = m.own_last;
    shard.sync.delivered = m.delivered.clone();
    shard.sync.incarnations = m.incarnations.clone();
    for (key, inc, seq) in &m.peers {
        set_position(shard, key, *inc, *seq);
    }
    for (key, vv) in &m.retired_in {
        merge_retired_in(shard, key, vv);
    }
}

/// Sets the position of the peer shard `key` names (`Peer::key`), learning a shard of a
/// peer site the log knows of and the configuration cannot tell.
fn set_position(shard: &mut Shard, key: &str, inc: u64, seq: u64) {
    if let Some(p) = logged_peer(shard, key) {
        p.in_incarnation = inc;
        p.in_applied_seq = seq;
    }
}

/// The peer shard `key` names (`Peer::key`), learned as `set_position` does when the
/// configuration cannot tell it.
fn logged_peer<'a>(shard: &'a mut Shard, key: &str) -> Option<&'a mut crate::sync::Peer> {
    let (site, n) = crate::sync::parse_peer_key(key);
    if shard.sync.peer_index(site, n).is_none() {
        let now = shard.now_ms();
        shard.sync.discover(site, n.saturating_add(1), now);
    }
    let i = shard.sync.peer_index(site, n)?;
    shard.sync.peers.get_mut(i)
}

/// Restores the retired entries kept with the link from peer shard `key`
/// (`Peer::retired_in`; docs/persistence.md §6): merged, as a record may repeat what the
/// snapshot or an earlier record said.
fn merge_retired_in(shard: &mut Shard, key: &str, vv: &meridian_crdt::VersionVector) {
    if let Some(p) = logged_peer(shard, key) {
        p.retired_in.merge(vv);
    }
}

/// What a replay says when a background snapshot's part outgrew its memory budget
/// (`job::Part::over` tells it from damage).
const PART_OUTGROWN: &str = "the part outgrew its memory budget";

/// Per key or record loaded: a background snapshot's private shard says how much it holds
/// (not user data) and stops past its part's budget; the test hook `key-load-delay` sleeps
/// that many microseconds (as Redis's `debugDelay` does per key it loads), so tests can see
/// clients answered while loading.
fn key_load_delay(shard: &mut Shard) -> Result<(), String> {
    if let Some(bytes) = shard.evict.note_job_progress() {
        if let Some(part) = shard.persist.part.as_mut() {
            if bytes.saturating_sub(part.buffer_bytes) >= part.bytes_max {
                part.over = true;
                return Err(PART_OUTGROWN.to_string());
            }
        }
    }
    if let Ok(us) = u64::try_from(shard.config.key_load_delay) {
        if us > 0 {
            std::thread::sleep(std::time::Duration::from_micros(us));
        }
    }
    Ok(())
}

/// Whether the replay keeps `key` (all of them, but in a background snapshot's part).
fn in_part(shard: &Shard, key: &[u8]) -> bool {
    shard.persist.part.as_ref().is_none_or(|p| p.holds(key))
}

/// Loads a snapshot into `shard` (whose keyspace must be empty).
fn load_snapshot(shard: &mut Shard, path: &Path, now_ms: u64) -> Result<SnapshotMeta, String> {
    let databases = shard.dbs.len();
    let mut n = 0u64;
    let mut libraries = Vec::new();
    let mut evicted = Vec::new();
    let meta = snapshot::read_with_libraries(
        path,
        databases,
        |db, key, state| {
            key_load_delay(shard)?;
            if !in_part(shard, key) {
                return Ok(());
            }
            if !shard.insert_loaded(db, key, state, now_ms) {
                return Err(format!(
                    "key {:?} appears twice",
                    String::from_utf8_lossy(key)
                ));
            }
            n += 1;
            Ok(())
        },
        |name, stamp, code| {
            libraries.push((name.to_vec(), stamp, code.map(<[u8]>::to_vec)));
            Ok(())
        },
        |db, key, mark| {
            evicted.push((db, key.to_vec(), mark));
            Ok(())
        },
    )?;
    for (db, key, mark) in evicted {
        if in_part(shard, &key) {
            shard.load_evicted_mark(db, &key, mark);
        }
    }
    for (name, stamp, code) in libraries {
        shard.apply_library(&name, stamp, code.as_deref());
    }
    if !shard.sync.lives.contains(&meta.replica) {
        return Err(format!(
            "belongs to replica {:08x} (another site or shard), not {:08x}",
            meta.replica.0, shard.replica.0
        ));
    }
    apply_meta(shard, &meta);
    if meta.replica != shard.replica && shard.sync.own_last > Hlc::ZERO {
        // Taken in an earlier life: what it issued is another origin's now.
        let stamp = Stamp {
            hlc: shard.sync.own_last,
            replica: meta.replica,
        };
        shard.sync.delivered.observe(stamp);
        shard.sync.own_logged.observe(stamp);
        shard.sync.own_last = Hlc::ZERO;
    }
    Ok(meta)
}

/// Replays a full-sync merge of `state` (its encoding) into `key` with the logged contexts.
fn replay_merge(
    shard: &mut Shard,
    db: u16,
    key: &[u8],
    mine: &Context,
    theirs: &Context,
    state: &[u8],
    now_ms: u64,
) -> Result<(), String> {
    if usize::from(db) >= shard.dbs.len() {
        return Err(format!(
            "state on database {db} but only {} are configured",
            shard.dbs.len()
        ));
    }
    let mut r = Reader::new(state);
    let state = KeyState::decode_state(&mut r).map_err(|e| format!("state: {e}"))?;
    if !r.is_at_end() {
        return Err("state record: trailing bytes".to_string());
    }
    for (_, hlc) in state.observed().stamps.iter() {
        raise_clock(shard, hlc);
    }
    if in_part(shard, key) {
        shard.merge_state(usize::from(db), key, &state, mine, theirs, now_ms);
    }
    Ok(())
}

/// Applies one log record to `shard` (recovery: nothing is logged again).
pub fn replay(
    shard: &mut Shard,
    kind: Kind,
    payload: &[u8],
    now_ms: u64,
    lease: &mut u64,
) -> Result<(), String> {
    let databases = shard.dbs.len();
    match kind {
        Kind::Op => {
            key_load_delay(shard)?;
            let (rec, used) = oplog::decode(payload).map_err(|e| format!("op record: {e}"))?;
            if used != payload.len() {
                return Err("op record: trailing bytes".to_string());
            }
            if usize::from(rec.db) >= databases && matches!(rec.body, OpBody::Write(_)) {
                return Err(format!(
                    "op on database {} but only {databases} are configured",
                    rec.db
                ));
            }
            let stamp = Stamp {
                hlc: rec.hlc,
                replica: rec.origin,
            };
            raise_clock(shard, rec.hlc);
            // Own ops of every recognized life continue the sequence and the backlog; only
            // the current life's are `own_last`, the earlier ones' are delivered like others'.
            let own = shard.sync.lives.contains(&rec.origin);
            if own {
                shard.seq = shard.seq.max(rec.seq);
                // A background snapshot's replay streams nothing: no backlog to hold.
                if shard.persist.part.is_none() {
                    shard.oplog.append_raw(rec.seq, payload);
                }
            }
            // A remote op that a full sync had carried before it arrived (the delivered vector
            // took the sender's context first): skipped live by `apply_received`, so here too.
            let carried = !own && shard.sync.delivered.covers(stamp);
            if rec.origin == shard.replica {
                if rec.hlc > shard.sync.own_last {
                    shard.sync.own_last = rec.hlc;
                }
            } else {
                shard.sync.delivered.observe(stamp);
                if own {
                    shard.sync.own_logged.observe(stamp);
                }
            }
            match &rec.body {
                OpBody::Write(_) if carried || !in_part(shard, &rec.key) => {}
                OpBody::Write(effect) => {
                    let hash = shard.hash_key(&rec.key);
                    shard.apply_stamped(usize::from(rec.db), hash, &rec.key, now_ms, stamp, effect);
                }
                OpBody::Library { code } => shard.apply_library(&rec.key, stamp, code.as_deref()),
                OpBody::Publish { .. } => {}
            }
        }
        Kind::State => {
            // Written before `Kind::Merge`: one floor stood for both sides' contexts.
            let p = record::decode_state(payload).map_err(|e| format!("state record: {e}"))?;
            let floor = meridian_crdt::Context::from(p.floor);
            replay_merge(shard, p.db, p.key, &floor, &floor, p.state, now_ms)?;
        }
        Kind::Merge => {
            let p = record::decode_merge(payload).map_err(|e| format!("merge record: {e}"))?;
            replay_merge(shard, p.db, p.key, &p.mine, &p.theirs, p.state, now_ms)?;
        }
        Kind::Position => {
            let (site, inc, seq) =
                record::decode_position(payload).map_err(|e| format!("position record: {e}"))?;
            set_position(shard, &site, inc, seq);
        }
        Kind::Incarnation => {
            let (inc, first) = record::decode_incarnation(payload)
                .map_err(|e| format!("incarnation record: {e}"))?;
            shard.sync.incarnations.retain(|(_, f)| *f < first);
            shard.sync.incarnations.push((inc, first));
            shard.sync.incarnation = inc;
            shard.sync.own_before_incarnation = shard.sync.own_last;
        }
        Kind::Delivered => {
            let vv =
                record::decode_delivered(payload).map_err(|e| format!("delivered record: {e}"))?;
            shard.take_context(&meridian_crdt::Context::from(vv));
        }
        Kind::RetiredIn => {
            let (peer, vv) = record::decode_retired_in(payload)
                .map_err(|e| format!("retired entries record: {e}"))?;
            merge_retired_in(shard, &peer, &vv);
        }
        Kind::Library => {
            let (name, stamp, code) =
                record::decode_library(payload).map_err(|e| format!("library record: {e}"))?;
            raise_clock(shard, stamp.hlc);
            shard.apply_library(name, stamp, code);
        }
        Kind::Evicted => {
            let (db, key) =
                record::decode_evicted(payload).map_err(|e| format!("eviction record: {e}"))?;
            if in_part(shard, key) {
                shard.evict_key(usize::from(db), key);
            }
        }
        Kind::ClockLease => {
            let hlc = record::decode_clock_lease(payload)
                .map_err(|e| format!("clock lease record: {e}"))?;
            *lease = (*lease).max(hlc);
        }
    }
    Ok(())
}

/// Bytes a background snapshot's replay reads of a log segment at a time (a record longer
/// than that is read whole).
const SEGMENT_READ_BYTES: usize = 4 * 1024 * 1024;

/// `record::scan` over the records of the segment at `path`, read `SEGMENT_READ_BYTES` at a
/// time; offsets count from the end of its header, as with the whole body. A record cut by
/// a chunk's end is completed by the next read; at the end of the file the walk ends as
/// `record::scan` would end on the whole body.
fn scan_segment_chunked<E>(
    path: &Path,
    chunk_bytes: usize,
    mut each: impl FnMut(record::Found<'_>) -> Result<(), E>,
) -> std::io::Result<Result<(ScanEnd, usize), E>> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path)?;
    let mut head = Vec::with_capacity(record::SEGMENT_HEADER_BYTES);
    (&mut file)
        .take(record::SEGMENT_HEADER_BYTES as u64)
        .read_to_end(&mut head)?;
    let mut buf: Vec<u8> = Vec::with_capacity(chunk_bytes);
    let mut base = 0usize;
    let mut found = 0usize;
    let mut eof = false;
    loop {
        if !eof {
            let read = (&mut file)
                .take(chunk_bytes.max(1) as u64)
                .read_to_end(&mut buf)?;
            eof = read == 0;
        }
        let walk = record::scan(&buf, |f| {
            each(record::Found {
                offset: f.offset + base,
                ..f
            })
        });
        let (end, n) = match walk {
            Ok(w) => w,
            Err(e) => return Ok(Err(e)),
        };
        found += n;
        match end {
            ScanEnd::Clean => {
                base += buf.len();
                buf.clear();
                if eof {
                    return Ok(Ok((ScanEnd::Clean, found)));
                }
            }
            ScanEnd::Torn { offset, .. } | ScanEnd::Corrupt { offset, .. } if !eof => {
                buf.drain(..offset);
                base += offset;
                if !record::incomplete_at(&buf, 0) {
                    // A whole record that is not valid: what follows it tells a torn tail
                    // from damage, as in the whole body, so the rest is read.
                    file.read_to_end(&mut buf)?;
                    eof = true;
                }
            }
            end => return Ok(Ok((end.shifted(base), found))),
        }
    }
}

/// Recovers `shard` from `dir` (see the module comment).
pub fn recover(shard: &mut Shard, dir: &Path, purpose: Purpose) -> Result<Recovered, PersistError> {
    let now_ms = shard.now_ms();
    let listing = list(dir)?;
    if purpose == Purpose::Start {
        for t in &listing.temporary {
            tracing::warn!(file = %t.display(), "removing an unfinished temporary file");
            let _ = std::fs::remove_file(t);
        }
        for u in &listing.unknown {
            tracing::warn!(file = %u.display(), "ignoring a file Meridian did not write");
        }
    }
    let upto = match purpose {
        Purpose::Start => u64::MAX,
        Purpose::Snapshot { upto } => upto,
    };
    // Segment headers: foreign files stop everything.
    let mut segments: Vec<(u64, PathBuf)> = Vec::new();
    for (pos, path) in &listing.segments {
        if *pos >= upto {
            continue;
        }
        let mut head = [0u8; record::SEGMENT_HEADER_BYTES];
        let read = std::fs::File::open(path).and_then(|f| {
            use std::io::Read as _;
            let mut buf = Vec::with_capacity(head.len());
            f.take(head.len() as u64).read_to_end(&mut buf)?;
            if let Some(dst) = head.get_mut(..buf.len()) {
                dst.copy_from_slice(&buf);
            }
            Ok(buf.len())
        });
        let n = read.map_err(|e| PersistError::io(path, e))?;
        let h = match SegmentHeader::decode(head.get(..n).unwrap_or_default()) {
            Ok(h) => h,
            Err(reason) => {
                let last = listing.segments.last().is_some_and(|(p, _)| p == pos);
                if last && purpose == Purpose::Start && n < record::SEGMENT_HEADER_BYTES {
                    // A crash right after the segment was created: nothing in it.
                    tracing::warn!(file = %path.display(), "removing a log segment cut inside its header");
                    let _ = std::fs::remove_file(path);
                    continue;
                }
                return Err(PersistError::Corrupt {
                    path: path.display().to_string(),
                    offset: 0,
                    reason,
                });
            }
        };
        if !shard.sync.lives.contains(&h.replica) {
            return Err(PersistError::Foreign {
                path: path.display().to_string(),
                found: h.replica.0,
                expected: shard.replica.0,
            });
        }
        if h.first_pos != *pos {
            return Err(PersistError::Inconsistent(format!(
                "{}: its header says position {} but its name says {pos}",
                path.display(),
                h.first_pos
            )));
        }
        segments.push((*pos, path.clone()));
    }
    let log_start = segments.first().map(|(p, _)| *p);
    // Newest valid snapshot the log continues from.
    let mut out = Recovered::default();
    let mut base = 0u64;
    let candidates: Vec<&(u64, PathBuf)> = listing
        .snapshots
        .iter()
        .rev()
        .filter(|(p, _)| *p <= upto)
        .collect();
    for (pos, path) in candidates {
        if log_start.is_some_and(|s| s > *pos) {
            tracing::warn!(file = %path.display(), "snapshot older than the log kept: not usable");
            continue;
        }
        match load_snapshot(shard, path, now_ms) {
            Ok(meta) => {
                base = meta.pos;
                out.keys_loaded = meta.keys;
                let bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
                out.snapshot = Some((meta.pos, path.clone(), bytes));
                break;
            }
            Err(reason) => {
                // A part that outgrew its budget is no damage: the snapshot starts again.
                if shard.persist.part.as_ref().is_some_and(|p| p.over) {
                    return Err(PersistError::Inconsistent(reason));
                }
                if reason.contains("belongs to replica") {
                    return Err(PersistError::Inconsistent(format!(
                        "{}: {reason}",
                        path.display()
                    )));
                }
                tracing::error!(file = %path.display(), %reason, "snapshot is damaged; trying an older one");
                reset(shard);
            }
        }
    }
    for (pos, path) in &listing.snapshots {
        if out.snapshot.as_ref().is_none_or(|(p, _, _)| p != pos) {
            out.snapshots.push((*pos, path.clone()));
        }
    }
    if out.snapshot.is_none() && !listing.snapshots.is_empty() && log_start.is_some_and(|s| s > 0) {
        return Err(PersistError::Inconsistent(format!(
            "no usable snapshot in {} and the log starts at position {} (the records before it are gone)",
            dir.display(),
            log_start.unwrap_or(0)
        )));
    }
    if out.snapshot.is_none() && log_start.is_some_and(|s| s > 0) {
        return Err(PersistError::Inconsistent(format!(
            "{}: the log starts at position {} and no snapshot covers what came before",
            dir.display(),
            log_start.unwrap_or(0)
        )));
    }
    // Replay the log after the snapshot.
    let mut pos_expected: Option<u64> = None;
    let count = segments.len();
    for (i, (first, path)) in segments.iter().enumerate() {
        let next_first = segments.get(i + 1).map(|(p, _)| *p);
        if next_first.is_some_and(|n| n <= base) {
            // Wholly before the snapshot; kept only for peers.
            out.segments.push(SegmentInfo {
                first_pos: *first,
                end_pos: next_first.unwrap_or(*first),
                path: path.clone(),
                bytes: std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
                own_first_seq: 0,
                own_last_seq: 0,
            });
            // (A background snapshot needs no extents: it reads nothing it will not replay.)
            if purpose == Purpose::Start {
                note_own_seqs(out.segments.last_mut(), path, &shard.sync.lives);
            }
            continue;
        }
        if let Some(expected) = pos_expected {
            if expected != *first {
                let prev = i
                    .checked_sub(1)
                    .and_then(|j| segments.get(j))
                    .map(|(_, p)| p.display().to_string())
                    .unwrap_or_default();
                return Err(PersistError::Inconsistent(format!(
                    "{prev}: ends at position {expected} but the next segment, {}, starts at {first}: records {expected}..{first} are missing (the segment lost its tail)",
                    path.display()
                )));
            }
        }
        // A background snapshot reads a sealed segment a chunk at a time (its replay's
        // memory is budgeted); the start reads it whole (it may cut a torn tail).
        let chunked = matches!(purpose, Purpose::Snapshot { .. });
        let bytes = if chunked {
            Vec::new()
        } else {
            std::fs::read(path).map_err(|e| PersistError::io(path, e))?
        };
        let file_bytes = if chunked {
            std::fs::metadata(path)
                .map_err(|e| PersistError::io(path, e))?
                .len()
        } else {
            bytes.len() as u64
        };
        // The chunk read is the replay's buffer, not the part's keys (its budget).
        if let Some(part) = shard.persist.part.as_mut() {
            part.buffer_bytes = SEGMENT_READ_BYTES as u64;
        }
        let body = bytes
            .get(record::SEGMENT_HEADER_BYTES..)
            .unwrap_or_default();
        let mut pos = *first;
        let mut info = SegmentInfo {
            first_pos: *first,
            end_pos: *first,
            path: path.clone(),
            bytes: file_bytes,
            own_first_seq: 0,
            own_last_seq: 0,
        };
        let lives = shard.sync.lives.clone();
        let mut replayed = 0u64;
        let mut lease = out.lease;
        let each = |f: record::Found<'_>| -> Result<(), (usize, String)> {
            if f.kind == Kind::Op {
                if let Some(seq) = super::writer::own_seq(f.payload, &lives) {
                    if info.own_first_seq == 0 {
                        info.own_first_seq = seq;
                    }
                    info.own_last_seq = seq;
                }
            }
            if pos >= base && pos < upto {
                replay(shard, f.kind, f.payload, now_ms, &mut lease).map_err(|r| (f.offset, r))?;
                replayed += 1;
            }
            pos += 1;
            Ok(())
        };
        let walk = if chunked {
            scan_segment_chunked(path, SEGMENT_READ_BYTES, each)
                .map_err(|e| PersistError::io(path, e))?
        } else {
            record::scan(body, each)
        };
        out.lease = lease;
        out.records_replayed += replayed;
        let last = i + 1 == count;
        let file = path.display().to_string();
        match walk {
            Err((offset, reason)) => {
                return Err(PersistError::Corrupt {
                    path: file,
                    offset: (offset + record::SEGMENT_HEADER_BYTES) as u64,
                    reason,
                });
            }
            Ok((ScanEnd::Clean, _)) => {}
            Ok((ScanEnd::Torn { offset, reason }, _)) if last && purpose == Purpose::Start => {
                let at = (offset + record::SEGMENT_HEADER_BYTES) as u64;
                let dropped = file_bytes - at;
                tracing::warn!(
                    file = %file,
                    offset = at,
                    dropped_bytes = dropped,
                    %reason,
                    "log ends in a torn record (a write cut short by a crash): truncating it at the last valid record"
                );
                let f = std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| PersistError::io(path, e))?;
                f.set_len(at).map_err(|e| PersistError::io(path, e))?;
                f.sync_all().map_err(|e| PersistError::io(path, e))?;
                info.bytes = at;
            }
            Ok((ScanEnd::Torn { offset, reason } | ScanEnd::Corrupt { offset, reason }, _)) => {
                return Err(PersistError::Corrupt {
                    path: file,
                    offset: (offset + record::SEGMENT_HEADER_BYTES) as u64,
                    reason,
                });
            }
        }
        info.end_pos = pos;
        pos_expected = Some(pos);
        out.segments.push(info);
    }
    // The log may end before the snapshot (SAVE wrote records still on their way to the
    // log, then the machine lost power): the snapshot holds them.
    out.next_pos = pos_expected.unwrap_or(base).max(base);
    Ok(out)
}

fn note_own_seqs(info: Option<&mut SegmentInfo>, path: &Path, lives: &[meridian_crdt::ReplicaId]) {
    let Some(info) = info else {
        return;
    };
    if let Ok(bytes) = std::fs::read(path) {
        if let Some(body) = bytes.get(record::SEGMENT_HEADER_BYTES..) {
            info.note_records(body, lives);
            let mut n = 0u64;
            let _ = record::scan::<()>(body, |_| {
                n += 1;
                Ok(())
            });
            info.end_pos = info.first_pos + n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every walk of `path` read `chunk` bytes at a time: (offset, kind, payload) of each
    /// record, and how it ended.
    type Walk = (Vec<(usize, u8, Vec<u8>)>, String);

    fn walk_chunked(path: &Path, chunk: usize) -> Walk {
        let mut seen = Vec::new();
        let (end, n) = scan_segment_chunked::<()>(path, chunk, |f| {
            seen.push((f.offset, f.kind as u8, f.payload.to_vec()));
            Ok(())
        })
        .unwrap()
        .unwrap();
        assert_eq!(n, seen.len());
        (seen, format!("{end:?}"))
    }

    fn walk_whole(body: &[u8]) -> Walk {
        let mut seen = Vec::new();
        let (end, _) = record::scan::<()>(body, |f| {
            seen.push((f.offset, f.kind as u8, f.payload.to_vec()));
            Ok(())
        })
        .unwrap();
        (seen, format!("{end:?}"))
    }

    /// Read a chunk at a time, whatever the chunk (records cut anywhere, one longer than
    /// many chunks), a segment walks as read whole: the same records at the same offsets,
    /// and the same end for a clean, a torn and a damaged segment.
    #[test]
    fn a_segment_read_in_chunks_walks_as_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let mut body = Vec::new();
        record::put(&mut body, Kind::Op, b"first op");
        record::put(&mut body, Kind::Op, &[7u8; 300]);
        record::put_position(&mut body, "b", 7, 42);
        record::put_clock_lease(&mut body, 99);
        let clean = body.clone();
        let mut torn = clean.clone();
        record::put(&mut torn, Kind::Op, b"cut short");
        torn.truncate(torn.len() - 3);
        // The second record's length, then a byte of its payload.
        let mut damaged = clean.clone();
        damaged[20] ^= 0x40;
        let mut damaged_payload = clean.clone();
        damaged_payload[30] ^= 0x01;
        for (name, body) in [
            ("clean", clean),
            ("torn", torn),
            ("damaged", damaged),
            ("damaged payload", damaged_payload),
        ] {
            let path = dir.path().join(name);
            let mut file = vec![0u8; record::SEGMENT_HEADER_BYTES];
            file.extend_from_slice(&body);
            std::fs::write(&path, &file).unwrap();
            let want = walk_whole(&body);
            for chunk in [1, 2, 7, 8, 9, 64, 301, 4096] {
                assert_eq!(
                    walk_chunked(&path, chunk),
                    want,
                    "{name}, chunks of {chunk}"
                );
            }
        }
    }
}

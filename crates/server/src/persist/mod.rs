//! Durability: the per-shard op log on disk, snapshots, and recovery (docs/persistence.md).
//!
//! - `Persist` (here): the shard's side. Every record the shard must keep (its own ops,
//!   remote ops it applied, full-sync merges, peer positions, incarnations, clock leases) is
//!   encoded into a buffer on the shard thread and written to the current segment at the
//!   end of each batch, before its replies. Under `always` connections wait for the fsync
//!   covering their batch before replying.
//! - `record`: the segment and record format, and the walk that tells a torn tail from
//!   corruption.
//! - `writer`: segment files and the fsync thread (fsync by policy, failures).
//! - `snapshot`: snapshot files.
//! - `recover`: start-up (newest valid snapshot plus the log after it) and the replay a
//!   background snapshot uses.
//! - `job`: SAVE/BGSAVE/BGREWRITEAOF, the automatic policy, and dropping old files.
//! - `check`: `meridian check-log FILE [--fix]`.
//!
//! The same log is the syncer's on-disk backlog: `Shard::read_own_since` serves a peer that
//! fell behind the in-memory op log from the segments still kept for it.

pub mod check;
pub mod job;
pub mod life;
pub mod record;
pub mod recover;
pub mod snapshot;
pub mod writer;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use meridian_crdt::VersionVector;

use crate::shard::Shard;
use writer::WriterShared;

/// When log writes reach the disk (Redis's `appendfsync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fsync {
    Always,
    EverySec,
    No,
}

impl Fsync {
    pub fn parse(s: &str) -> Option<Fsync> {
        match s.to_ascii_lowercase().as_str() {
            "always" => Some(Fsync::Always),
            "everysec" => Some(Fsync::EverySec),
            "no" => Some(Fsync::No),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Fsync::Always => "always",
            Fsync::EverySec => "everysec",
            Fsync::No => "no",
        }
    }
}

/// Why the data directory could not be opened or recovered.
#[derive(Debug, thiserror::Error)]
pub enum PersistError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path} is in use by another Meridian process (lock held)")]
    Locked { path: String },
    #[error("{path}: belongs to replica {found} (another site or shard), not {expected}")]
    Foreign {
        path: String,
        found: u32,
        expected: u32,
    },
    #[error(
        "{path}: bad record at offset {offset}: {reason} (valid records follow it: not a torn tail). Inspect and repair with `meridian check-log {path} --fix`"
    )]
    Corrupt {
        path: String,
        offset: u64,
        reason: String,
    },
    #[error("{0}")]
    Inconsistent(String),
}

impl PersistError {
    pub fn io(path: &std::path::Path, source: std::io::Error) -> PersistError {
        PersistError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

/// Encoded records waiting past this size are written at once (mid-batch).
pub const PENDING_BYTES_MAX: usize = 256 * 1024;
/// Records logged outside a client's batch (remote ops, expiries) are written at least this
/// often.
pub const FLUSH_PERIOD_MS: u64 = 2;
/// The clock lease runs this far ahead of the clock...
pub const CLOCK_LEASE_AHEAD_MS: u64 = 3_000;
/// ...and is renewed when less than this is left (more than one `everysec` period, so a
/// renewed lease is on disk before the clock reaches the old one).
pub const CLOCK_LEASE_MARGIN_MS: u64 = 2_000;

/// Counters and outcomes for INFO persistence, LASTSAVE and the automatic policy.
#[derive(Debug, Default, Clone)]
pub struct SaveStats {
    /// Unix seconds of the last successful snapshot (LASTSAVE; process start before one).
    pub last_save_s: u64,
    pub last_save_ok: bool,
    pub saves: u64,
    pub last_save_secs: i64,
    pub last_rewrite_secs: i64,
    pub rewrites: u64,
    pub rewrite_failures_in_a_row: u64,
    pub last_rewrite_ok: bool,
    /// `stats.dirty` when the last snapshot started (changes since last save).
    pub dirty_at_save: u64,
    /// Size of the newest snapshot and of the log when it was made (auto rewrite base).
    pub snapshot_bytes: u64,
    pub log_bytes_at_snapshot: u64,
    /// Position of the newest snapshot.
    pub snapshot_pos: u64,
    /// Keys loaded and records replayed at start, and how long it took.
    pub loaded_keys: u64,
    pub loaded_records: u64,
    pub load_ms: u64,
    /// Unix seconds when the `save` policy last started a snapshot (a retry waits after a
    /// failure, `job::POLICY_RETRY_S`).
    pub last_try_s: u64,
}

/// The segment the shard writes to.
#[derive(Debug)]
pub struct LogFile {
    pub file: Arc<std::fs::File>,
    pub path: PathBuf,
    /// Its length: everything written so far (a failed write is cut back to it).
    pub bytes: u64,
}

/// What a connection does with the replies of a batch (`Persist::after_batch`).
#[derive(Debug)]
pub enum AfterBatch {
    Reply,
    /// `always`: wait until the log is durable up to this position.
    Wait(u64, Arc<WriterShared>),
    /// `always` and the batch's writes could not be logged: close without replying (they
    /// are not acknowledged).
    Drop,
}

/// The shard's side of persistence.
#[derive(Debug)]
pub struct Persist {
    /// `appendonly`: the log is the durability the operator asked for (INFO's `aof_enabled`,
    /// its `appendfsync`, its MISCONF text). The log may be written without it, for the
    /// `save` policy's snapshots (`job::log_kept`).
    pub appendonly: bool,
    pub fsync: Fsync,
    /// The shard's directory (`dir/shard-N`).
    pub dir: PathBuf,
    /// The replica id segment headers carry: the shard's life-0 id (every life of the shard
    /// writes the same directory).
    pub replica: meridian_crdt::ReplicaId,
    /// The shard's recognized lives (`SyncState::lives`): op records of these origins are its
    /// own, to be streamed to peers from the log.
    pub lives: Vec<meridian_crdt::ReplicaId>,
    /// The last own op written to the log (`write(2)`): the syncer streams no further. A
    /// killed process loses nothing written; a reboot that loses the unsynced tail begins a
    /// new life (`persist::life`), so peers may hold ops before they are fsynced.
    pub own_written_seq: u64,
    pub segment_bytes_max: u64,
    /// Encoded records not yet written.
    pending: Vec<u8>,
    /// Wakes the flush loop when a record is appended while it waits (`flush_waiting`): a
    /// shard with nothing to write does not wake every `FLUSH_PERIOD_MS`.
    pub flush_wanted: std::rc::Rc<tokio::sync::Notify>,
    /// The flush loop waits on `flush_wanted` (a plain flag: one test per record, no atomic
    /// unless it waits).
    pub flush_waiting: bool,
    /// Own ops in `pending`: the first and last sequence numbers (0: none).
    pending_own: (u64, u64),
    /// Position the next record will have (records ever appended, in the whole history).
    pub next_pos: u64,
    pub log: Option<LogFile>,
    pub writer: Option<Arc<WriterShared>>,
    thread: Option<std::thread::JoinHandle<()>>,
    /// Set while recovery replays records: nothing is logged again.
    pub recovering: bool,
    /// Hlc (physical milliseconds) below which every timestamp issued is covered by a
    /// lease record.
    pub lease_ms: u64,
    /// Scratch for re-encoding remote ops and key states.
    pub scratch: Vec<u8>,
    pub stats: SaveStats,
    /// The background snapshot in progress.
    pub job: Option<job::Job>,
    /// A BGREWRITEAOF or BGSAVE SCHEDULE asked for while a job ran.
    pub scheduled: bool,
    /// The segment read last for a peer (its first position and bytes).
    disk_cache: Option<(u64, Vec<u8>)>,
    /// Held while the process owns the directory.
    pub lock: Option<std::fs::File>,
    /// Set on a background snapshot's private shard: the part of the keys its replay keeps
    /// (`job::background_snapshot`), and whether that part outgrew its memory budget.
    pub part: Option<job::Part>,
}

impl Persist {
    /// Persistence off (tests of the keyspace alone, and background snapshots' replay).
    pub fn disabled() -> Persist {
        Persist {
            appendonly: false,
            fsync: Fsync::EverySec,
            dir: PathBuf::new(),
            replica: meridian_crdt::ReplicaId(0),
            lives: Vec::new(),
            own_written_seq: 0,
            segment_bytes_max: u64::MAX,
            pending: Vec::new(),
            flush_wanted: std::rc::Rc::new(tokio::sync::Notify::new()),
            flush_waiting: false,
            pending_own: (0, 0),
            next_pos: 0,
            log: None,
            writer: None,
            thread: None,
            recovering: false,
            lease_ms: 0,
            scratch: Vec::new(),
            stats: SaveStats {
                last_save_ok: true,
                last_rewrite_ok: true,
                last_save_secs: -1,
                last_rewrite_secs: -1,
                ..SaveStats::default()
            },
            job: None,
            scheduled: false,
            part: None,
            disk_cache: None,
            lock: None,
        }
    }

    /// A shard's persistence before `open_persistence` (or without a data directory): nothing
    /// is written, and the log's role is the configuration's `appendonly`, as CONFIG SET
    /// reads it.
    pub fn unopened(appendonly: bool) -> Persist {
        Persist {
            appendonly,
            ..Persist::disabled()
        }
    }

    /// Whether records are being written now.
    fn logging(&self) -> bool {
        self.writer.is_some() && !self.recovering
    }

    /// Logs one op record (op log format, as `OpLog::append` wrote it); `own_seq` when this
    /// shard originated it.
    pub fn append_op(&mut self, op: &[u8], own_seq: Option<u64>) {
        if !self.logging() {
            return;
        }
        record::put(&mut self.pending, record::Kind::Op, op);
        if let Some(seq) = own_seq {
            if self.pending_own.0 == 0 {
                self.pending_own.0 = seq;
            }
            self.pending_own.1 = seq;
        }
        self.appended();
    }

    /// Logs the (remote) op record in `self.scratch`.
    pub fn append_scratch_op(&mut self) {
        if !self.logging() {
            return;
        }
        record::put(&mut self.pending, record::Kind::Op, &self.scratch);
        self.appended();
    }

    pub fn append_merge(
        &mut self,
        db: u16,
        key: &[u8],
        mine: &meridian_crdt::Context,
        theirs: &meridian_crdt::Context,
        state: &[u8],
    ) {
        if !self.logging() {
            return;
        }
        record::put_merge(&mut self.pending, db, key, mine, theirs, state);
        self.appended();
    }

    /// Records a local eviction (`record::Kind::Evicted`): replay drops the key again.
    pub fn append_evicted(&mut self, db: u16, key: &[u8]) {
        if !self.logging() {
            return;
        }
        record::put_evicted(&mut self.pending, db, key);
        self.appended();
    }

    pub fn append_position(&mut self, site: &str, incarnation: u64, seq: u64) {
        if !self.logging() {
            return;
        }
        record::put_position(&mut self.pending, site, incarnation, seq);
        self.appended();
    }

    pub fn append_library(
        &mut self,
        name: &[u8],
        stamp: meridian_crdt::Stamp,
        code: Option<&[u8]>,
    ) {
        if !self.logging() {
            return;
        }
        record::put_library(&mut self.pending, name, stamp, code);
        self.appended();
    }

    pub fn append_delivered(&mut self, vv: &VersionVector) {
        if !self.logging() {
            return;
        }
        record::put_delivered(&mut self.pending, vv);
        self.appended();
    }

    /// Records the retired entries of the link from peer shard `peer` (`Peer::retired_in`).
    pub fn append_retired_in(&mut self, peer: &str, vv: &VersionVector) {
        if !self.logging() {
            return;
        }
        record::put_retired_in(&mut self.pending, peer, vv);
        self.appended();
    }

    pub fn append_incarnation(&mut self, incarnation: u64, first_seq: u64) {
        if !self.logging() {
            return;
        }
        record::put_incarnation(&mut self.pending, incarnation, first_seq);
        self.appended();
    }

    /// Renews the clock lease when the clock `hlc_ms` nears it.
    pub fn note_clock(&mut self, hlc_ms: u64) {
        if hlc_ms.saturating_add(CLOCK_LEASE_MARGIN_MS) < self.lease_ms || !self.logging() {
            return;
        }
        self.lease_ms = hlc_ms + CLOCK_LEASE_AHEAD_MS;
        let lease = meridian_crdt::Hlc::from_parts(self.lease_ms, 0).0;
        record::put_clock_lease(&mut self.pending, lease);
        self.appended();
    }

    fn appended(&mut self) {
        self.next_pos += 1;
        if self.flush_waiting {
            self.flush_waiting = false;
            self.flush_wanted.notify_one();
        }
        if self.pending.len() >= PENDING_BYTES_MAX {
            self.flush();
        }
    }

    /// Writes pending records to the current segment (`write(2)` on the shard thread, as
    /// Redis writes its AOF buffer before replying) and tells the fsync thread. A failed
    /// write is cut back and kept pending; returns whether everything is written.
    pub fn flush(&mut self) -> bool {
        let (Some(w), Some(log)) = (&self.writer, &mut self.log) else {
            return true;
        };
        if self.pending.is_empty() {
            return !w.write_failed.load(Ordering::Acquire);
        }
        use std::io::{Seek as _, Write as _};
        match (&*log.file).write_all(&self.pending) {
            Ok(()) => {
                log.bytes += self.pending.len() as u64;
                let own = (self.pending_own.1 > 0).then_some(self.pending_own.1);
                {
                    let mut st = w.state();
                    if let Some(seg) = st.segments.last_mut() {
                        if self.pending_own.0 > 0 {
                            seg.note_own(self.pending_own.0);
                            seg.note_own(self.pending_own.1);
                        }
                        seg.end_pos = self.next_pos;
                        seg.bytes = log.bytes;
                    }
                    if w.write_failed.load(Ordering::Acquire) {
                        if !w.fsync_failed.load(Ordering::Acquire) {
                            st.last_error = None;
                        }
                        w.write_failed.store(false, Ordering::Release);
                        tracing::warn!("writes to the op log succeed again");
                    }
                }
                if let Some(seq) = own {
                    self.own_written_seq = seq;
                }
                let urgent = self.fsync == Fsync::Always;
                w.note_written(self.next_pos, own, log.bytes, urgent);
                self.pending.clear();
                keep_small(&mut self.pending);
                self.pending_own = (0, 0);
                if log.bytes >= self.segment_bytes_max {
                    if let Err(e) = self.rotate() {
                        tracing::error!(error = %e, "cannot start a new log segment; going on with the current one");
                    }
                }
                true
            }
            Err(e) => {
                // No partial record may stay: cut back to the last good length.
                let _ = log.file.set_len(log.bytes);
                let _ = (&*log.file).seek(std::io::SeekFrom::Start(log.bytes));
                if !w.write_failed.swap(true, Ordering::AcqRel) {
                    tracing::error!(error = %e, "writing the op log failed; writes are refused until it succeeds");
                }
                w.set_error(writer::errno_text(&e));
                w.durable.notify_waiters();
                false
            }
        }
    }

    /// Closes the current segment and starts one at the next position (the fsync thread
    /// fsyncs the old one).
    pub fn rotate(&mut self) -> std::io::Result<()> {
        let Some(w) = self.writer.clone() else {
            return Ok(());
        };
        if !self.flush() {
            return Err(std::io::Error::other("pending records cannot be written"));
        }
        let first = self.next_pos;
        if w.state()
            .segments
            .last()
            .is_some_and(|s| s.first_pos == first)
        {
            return Ok(());
        }
        let (file, path) = writer::create_segment(&self.dir, self.replica, first)?;
        let file = Arc::new(file);
        let bytes = record::SEGMENT_HEADER_BYTES as u64;
        w.state().segments.push(writer::SegmentInfo {
            first_pos: first,
            end_pos: first,
            path: path.clone(),
            bytes,
            own_first_seq: 0,
            own_last_seq: 0,
        });
        w.note_rotated(file.clone(), path.clone(), bytes);
        self.log = Some(LogFile { file, path, bytes });
        Ok(())
    }

    /// After a batch of commands (`pos_before`: `next_pos` when it began): writes what it
    /// logged, and under `always` says how long its replies must wait. A log kept only for
    /// the `save` policy's snapshots (`appendonly no`) is written by the flush loop within
    /// `FLUSH_PERIOD_MS` instead (or at `PENDING_BYTES_MAX`, or when the syncer streams the
    /// ops): one `write(2)` per period rather than per batch, since no reply waits on it.
    pub fn after_batch(&mut self, pos_before: u64) -> AfterBatch {
        if !self.appendonly {
            return AfterBatch::Reply;
        }
        let Some(w) = self.writer.clone() else {
            return AfterBatch::Reply;
        };
        let wrote = self.next_pos > pos_before;
        let written = self.flush();
        if self.fsync != Fsync::Always {
            return AfterBatch::Reply;
        }
        if !written || w.failed() {
            // Writes were refused with MISCONF meanwhile; a batch that did log records whose
            // write failed is not acknowledged.
            return if wrote && !written {
                AfterBatch::Drop
            } else {
                AfterBatch::Reply
            };
        }
        if w.durable_pos.load(Ordering::Acquire) >= self.next_pos {
            return AfterBatch::Reply;
        }
        AfterBatch::Wait(self.next_pos, w)
    }

    /// Periodic: writes what is pending (remote ops, expiries).
    pub fn tick(&mut self) {
        if !self.pending.is_empty() {
            self.flush();
        }
    }

    /// Whether records wait to be written.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }

    /// The `-MISCONF` text while the log cannot be written.
    pub fn refusal(&self) -> Option<String> {
        let w = self.writer.as_ref()?;
        if !w.failed() {
            return None;
        }
        let why = w
            .state()
            .last_error
            .clone()
            .unwrap_or_else(|| "unknown error".to_string());
        Some(if self.appendonly {
            format!("MISCONF Errors writing to the AOF file: {why}")
        } else {
            format!(
                "MISCONF Meridian is configured to save snapshots, but it's currently unable to write the op log they are built from: {why}. Commands that may modify the data set are disabled. Please check the Meridian logs for details."
            )
        })
    }

    /// Records durable (fsynced).
    pub fn durable_pos(&self) -> u64 {
        self.writer
            .as_ref()
            .map_or(0, |w| w.durable_pos.load(Ordering::Acquire))
    }

    /// The last own sequence number peers may receive: everything when nothing is logged,
    /// else only ops already written to the log (`own_written_seq`).
    pub fn stream_limit(&self, seq: u64) -> u64 {
        match &self.writer {
            Some(_) => self.own_written_seq.min(seq),
            None => seq,
        }
    }

    /// Total bytes of the log segments on disk.
    pub fn log_bytes(&self) -> u64 {
        self.writer
            .as_ref()
            .map_or(0, |w| w.state().segments.iter().map(|s| s.bytes).sum())
    }

    /// Changes the fsync policy (CONFIG SET appendfsync).
    pub fn set_fsync(&mut self, fsync: Fsync) {
        self.fsync = fsync;
        if let Some(w) = &self.writer {
            w.set_fsync(fsync);
        }
    }

    /// Writes and fsyncs everything, then stops the fsync thread (shutdown).
    pub fn close(&mut self) {
        self.flush();
        if let Some(w) = &self.writer {
            w.stop();
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.writer = None;
        self.log = None;
    }

    pub fn start_writer(
        &mut self,
        shared: Arc<WriterShared>,
        setup: writer::WriterSetup,
        log: LogFile,
    ) {
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name("log-fsync".to_string())
            .spawn(move || writer::run(s, setup));
        match thread {
            Ok(t) => {
                self.thread = Some(t);
                self.writer = Some(shared);
                self.log = Some(log);
            }
            Err(e) => tracing::error!(error = %e, "cannot start the log fsync thread"),
        }
    }

    /// Oldest own sequence number kept on disk.
    pub fn disk_first_own_seq(&self) -> Option<u64> {
        let w = self.writer.as_ref()?;
        w.state()
            .segments
            .iter()
            .find(|s| s.own_first_seq > 0)
            .map(|s| s.own_first_seq)
    }

    /// Own op records with sequence numbers from `from_seq` on, read from the segments on
    /// disk (op log format, consecutive), up to about `bytes_max` bytes. None when the disk
    /// does not hold `from_seq`.
    pub fn read_own_since(&mut self, from_seq: u64, bytes_max: usize) -> Option<Vec<u8>> {
        let w = self.writer.as_ref()?;
        let written = w.written_pos.load(Ordering::Acquire);
        let segments: Vec<writer::SegmentInfo> = w
            .state()
            .segments
            .iter()
            .filter(|s| s.own_last_seq >= from_seq && s.own_first_seq > 0)
            .cloned()
            .collect();
        let first = segments.first()?;
        if first.own_first_seq > from_seq {
            return None;
        }
        let mut out = Vec::new();
        let mut next = from_seq;
        for seg in &segments {
            let cached = self
                .disk_cache
                .as_ref()
                .is_some_and(|(p, b)| *p == seg.first_pos && b.len() as u64 >= seg.bytes);
            if !cached {
                let bytes = std::fs::read(&seg.path).ok()?;
                self.disk_cache = Some((seg.first_pos, bytes));
            }
            let (_, bytes) = self.disk_cache.as_ref()?;
            let body = bytes.get(record::SEGMENT_HEADER_BYTES..)?;
            let mut pos = seg.first_pos;
            let _ = record::scan::<()>(body, |f| {
                if pos >= written || out.len() >= bytes_max {
                    return Err(());
                }
                pos += 1;
                if f.kind == record::Kind::Op {
                    if let Some(seq) = writer::own_seq(f.payload, &self.lives) {
                        if seq == next {
                            out.extend_from_slice(f.payload);
                            next += 1;
                        }
                    }
                }
                Ok(())
            });
            if out.len() >= bytes_max {
                break;
            }
        }
        (next > from_seq).then_some(out)
    }
}

impl Shard {
    /// Logs the current position of peer `peer` (after ops or a full sync from it applied).
    pub fn log_peer_position(&mut self, peer: usize) {
        if let Some(p) = self.sync.peers.get(peer) {
            let (site, inc, seq) = (p.key(), p.in_incarnation, p.in_applied_seq);
            self.persist.append_position(&site, inc, seq);
        }
    }

    /// Logs the retired entries kept with the link from peer `peer` (`Peer::retired_in`),
    /// after the merged states of the full sync that carried them and before its position.
    ///
    /// Crash safety: recovery replays a prefix of the log, so this record is replayed only
    /// with every `Merge` record before it (the states that hold those ops): a restored
    /// `retired_in` never states an op this shard does not hold. A crash before it leaves the
    /// link's older entries (or none): its Hello and acks then state less to that peer, which
    /// only makes the peer choose a full sync again (`ahead_on_retired`) and send more keys,
    /// never skip an op. The same holds for a snapshot, taken of a replay up to one position.
    pub fn log_retired_in(&mut self, peer: usize) {
        if let Some(p) = self.sync.peers.get(peer) {
            let key = p.key();
            self.persist.append_retired_in(&key, &p.retired_in);
        }
    }

    /// Logs a remote op record after it was applied.
    pub fn log_remote_op(&mut self, rec: &crate::oplog::OpRecord) {
        if !self.persist.logging() {
            return;
        }
        let mut buf = std::mem::take(&mut self.persist.scratch);
        buf.clear();
        match &rec.body {
            crate::oplog::OpBody::Write(effect) => crate::oplog::encode(
                &mut buf, rec.origin, rec.seq, rec.hlc, rec.db, &rec.key, effect,
            ),
            crate::oplog::OpBody::Publish { message, sharded } => crate::oplog::encode_publish(
                &mut buf, rec.origin, rec.seq, rec.hlc, &rec.key, message, *sharded,
            ),
            crate::oplog::OpBody::Library { code } => crate::oplog::encode_library(
                &mut buf,
                rec.origin,
                rec.seq,
                rec.hlc,
                &rec.key,
                code.as_deref(),
            ),
        }
        self.persist.scratch = buf;
        self.persist.append_scratch_op();
        keep_small(&mut self.persist.scratch);
    }

    /// Logs a key state a full sync merged, with both sides' causal contexts.
    pub fn log_merged_state(
        &mut self,
        db: usize,
        key: &[u8],
        state: &meridian_crdt::KeyState,
        mine: &meridian_crdt::Context,
        theirs: &meridian_crdt::Context,
    ) {
        if !self.persist.logging() {
            return;
        }
        let mut buf = std::mem::take(&mut self.persist.scratch);
        buf.clear();
        state.encode_state(&mut buf);
        self.persist
            .append_merge(db as u16, key, mine, theirs, &buf);
        keep_small(&mut buf);
        self.persist.scratch = buf;
    }
}

/// Room an empty write or scratch buffer keeps between uses: one large record (a value of
/// megabytes) would otherwise hold its size for the life of the process. Redis frees its
/// AOF buffer after each write unless it is small, for the same reason.
pub const BUF_BYTES_KEPT_MAX: usize = 64 * 1024;

/// Gives back what an empty buffer holds past `BUF_BYTES_KEPT_MAX`.
fn keep_small(buf: &mut Vec<u8>) {
    if buf.is_empty() && buf.capacity() > BUF_BYTES_KEPT_MAX {
        buf.shrink_to(BUF_BYTES_KEPT_MAX);
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::shard::Shard;

    fn shard(dir: &std::path::Path) -> Shard {
        let config = Config {
            dir: dir.to_path_buf(),
            ..Config::default()
        };
        Shard::new(0, config, crate::time::wall_ms())
    }

    /// Runs a command on `shard` as a new client (database 0).
    fn run(shard: &mut Shard, args: &[&str]) -> String {
        crate::cmd::testing::run_on(shard, 0, args)
    }

    fn dataset(s: &mut Shard) {
        for i in 0..200 {
            run(s, &["SET", &format!("s:{i}"), &format!("v{i}")]);
        }
        run(s, &["INCRBY", "cnt", "42"]);
        run(s, &["SADD", "set", "a", "b", "c"]);
        run(s, &["SREM", "set", "b"]);
        run(s, &["HSET", "h", "f1", "1", "f2", "2"]);
        run(s, &["ZADD", "z", "1", "one", "2", "two"]);
        run(s, &["RPUSH", "l", "x", "y", "z"]);
        run(s, &["LPOP", "l"]);
        run(s, &["PFADD", "hll", "a", "b"]);
        run(s, &["EXPIRE", "s:1", "1000"]);
        run(s, &["DEL", "s:2"]);
        run(s, &["SELECT", "3"]);
    }

    /// Every key's encoded state, by (db, key).
    fn states(s: &Shard) -> Vec<(usize, Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        for (db, d) in s.dbs.iter().enumerate() {
            for e in d.table.iter() {
                let mut st = Vec::new();
                e.state.encode_state(&mut st);
                out.push((db, e.key.to_vec(), st));
            }
        }
        out.sort();
        out
    }

    #[test]
    fn write_buffers_keep_at_most_their_limit_between_uses() {
        use super::{BUF_BYTES_KEPT_MAX, keep_small};
        let mut at = Vec::<u8>::with_capacity(BUF_BYTES_KEPT_MAX);
        let kept = at.capacity();
        keep_small(&mut at);
        assert_eq!(at.capacity(), kept, "at the limit: kept");
        let mut past = Vec::<u8>::with_capacity(BUF_BYTES_KEPT_MAX + 1);
        keep_small(&mut past);
        assert!(
            past.capacity() <= BUF_BYTES_KEPT_MAX,
            "one past: given back"
        );
        let mut holding = vec![0u8; 2 * BUF_BYTES_KEPT_MAX];
        keep_small(&mut holding);
        assert_eq!(
            holding.len(),
            2 * BUF_BYTES_KEPT_MAX,
            "a buffer in use is left alone"
        );

        // The log's write buffer after a record of a megabyte.
        let dir = tempfile::tempdir().unwrap();
        let mut a = shard(dir.path());
        a.open_persistence().unwrap();
        let big = "x".repeat(1 << 20);
        assert_eq!(run(&mut a, &["SET", "big", &big]), "+OK\r\n");
        assert!(a.persist.flush());
        assert!(a.persist.pending.capacity() <= BUF_BYTES_KEPT_MAX);
        a.persist.close();
    }

    #[test]
    fn log_replay_and_snapshot_rebuild_the_same_state() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = shard(dir.path());
        a.open_persistence().unwrap();
        dataset(&mut a);
        let before = states(&a);
        let seq = a.seq;
        a.persist.close();
        drop(a);
        // From the log alone.
        let mut b = shard(dir.path());
        b.open_persistence().unwrap();
        assert_eq!(states(&b), before);
        assert_eq!(b.seq, seq);
        assert_eq!(b.sync.incarnations.len(), 2, "{:?}", b.sync.incarnations);
        // From a snapshot plus a log tail.
        b.save_now().unwrap();
        run(&mut b, &["SET", "after", "1"]);
        let after = states(&b);
        b.persist.close();
        drop(b);
        let mut c = shard(dir.path());
        c.open_persistence().unwrap();
        assert_eq!(states(&c), after);
        assert_eq!(
            c.persist.stats.loaded_records, 1,
            "only the SET after the snapshot"
        );
        assert!(c.sync.incarnations.len() >= 3);
        // A second process on the same directory is refused.
        let mut d = shard(dir.path());
        assert!(matches!(
            d.open_persistence(),
            Err(super::PersistError::Locked { .. })
        ));
    }

    /// The retired entries kept with a link (`Peer::retired_in`) come back from the log and
    /// from a snapshot's header, with the peer shard the configuration alone does not name.
    #[test]
    fn links_retired_entries_survive_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let open = || {
            let config = Config {
                dir: dir.path().to_path_buf(),
                peer: vec!["b=127.0.0.1:1".into()],
                ..Config::default()
            };
            let mut s = Shard::new(0, config, crate::time::wall_ms());
            s.open_persistence().unwrap();
            s
        };
        let retired_in = |s: &Shard| {
            s.sync
                .peer_index("b", 1)
                .and_then(|i| s.sync.peers.get(i))
                .map(|p| p.retired_in.clone())
        };
        let mut vv = meridian_crdt::VersionVector::new();
        vv.observe(meridian_crdt::Stamp {
            hlc: meridian_crdt::Hlc(5_000),
            replica: meridian_crdt::ReplicaId(77),
        });
        let mut a = open();
        let now = a.now_ms();
        let added = a.sync.discover("b", 2, now);
        let i = *added.first().unwrap();
        a.sync.peers[i].retired_in = vv.clone();
        a.log_retired_in(i);
        run(&mut a, &["SET", "k", "v"]);
        a.persist.close();
        drop(a);
        // From the log.
        let mut b = open();
        assert_eq!(retired_in(&b), Some(vv.clone()));
        assert_eq!(
            b.sync
                .peer_index("b", 0)
                .and_then(|i| b.sync.peers.get(i))
                .map(|p| p.retired_in.is_empty()),
            Some(true)
        );
        // From a snapshot taken after the record.
        b.save_now().unwrap();
        b.persist.close();
        drop(b);
        let c = open();
        assert_eq!(c.persist.stats.loaded_records, 0);
        assert_eq!(retired_in(&c), Some(vv));
    }

    /// A background snapshot whose parts outgrow their budget starts again in twice the
    /// parts; the one it writes holds every key once, as the shard holds it.
    #[test]
    fn a_background_snapshot_in_parts_holds_every_key_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = shard(dir.path());
        a.open_persistence().unwrap();
        dataset(&mut a);
        // More records than a report of the replay's memory comes every.
        for i in 0..5000 {
            run(&mut a, &["SET", &format!("k:{i}"), "v"]);
        }
        run(
            &mut a,
            &[
                "FUNCTION",
                "LOAD",
                "#!lua name=lib\nredis.register_function('f', function() return 1 end)",
            ],
        );
        let before = states(&a);
        a.persist.rotate().unwrap();
        let upto = a.persist.next_pos;
        let memory = a.evict.job_share();
        let source = (
            a.persist.dir.as_path(),
            &a.config,
            a.index,
            &a.slots,
            a.sync.life,
        );
        // A budget of nothing: 1, 2 and 4 parts outgrow it, 8 (the most here) is taken.
        // (Test builds do not count allocations: every report says 0 bytes.)
        let (path, _, parts) =
            super::job::snapshot_in_parts(source, upto, &memory, (0, 8)).unwrap();
        assert_eq!(parts, 8);
        let mut loaded = Vec::new();
        let mut libraries = 0;
        let meta = super::snapshot::read_with_libraries(
            &path,
            16,
            |db, key, state| {
                let mut st = Vec::new();
                state.encode_state(&mut st);
                loaded.push((db, key.to_vec(), st));
                Ok(())
            },
            |_, _, _| {
                libraries += 1;
                Ok(())
            },
            |_, _, _| Ok(()),
        )
        .unwrap();
        loaded.sort();
        assert_eq!(loaded, before);
        assert_eq!(meta.keys, before.len() as u64);
        assert_eq!(meta.seq, a.seq);
        assert_eq!(libraries, 1);
        // Only the snapshot written is left: the abandoned attempts removed their files.
        let tmp = std::fs::read_dir(dir.path().join("shard-0"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".tmp")
            })
            .count();
        assert_eq!(tmp, 0);
    }

    /// A site `name` with peers `peers`, persisting in `dir` (or not).
    fn site(name: &str, peers: &[&str], dir: Option<&std::path::Path>) -> Shard {
        let config = Config {
            site: name.to_string(),
            peer: peers
                .iter()
                .enumerate()
                .map(|(i, p)| format!("{p}=127.0.0.1:{}", 7100 + i))
                .collect(),
            appendonly: dir.is_some(),
            dir: dir.map(|d| d.to_path_buf()).unwrap_or_default(),
            ..Config::default()
        };
        Shard::new(0, config, crate::time::wall_ms())
    }

    /// `from`'s ops from `first_seq` on, as site `to` decodes them from its link to `from`
    /// (peer index `peer`), then applied there.
    fn stream(from: &Shard, to: &mut Shard, peer: usize, first_seq: u64) {
        let parts = from.oplog.since(first_seq).unwrap();
        let mut body = Vec::new();
        meridian_syncer::OpsHeader {
            origin: from.replica,
            incarnation: from.sync.incarnation,
            first_seq,
            count: (from.seq + 1 - first_seq) as u32,
        }
        .encode_into(&mut body);
        crate::oplog::copy_to_wire(&parts, &mut body, usize::MAX);
        let now = crate::time::wall_ms();
        let lives = to.sync.peers[peer].lives.clone();
        let (_, records) =
            crate::sync::apply::decode_batch(&body, &lives, from.sync.incarnation, 16, now, 60_000)
                .unwrap();
        to.apply_batch(peer, &records, now);
    }

    /// A complete full sync of every key of `from` into `to` (peer index `peer`).
    fn full_sync(from: &Shard, to: &mut Shard, peer: usize) {
        let now = crate::time::wall_ms();
        let mut sync = to.begin_full_sync_in(
            peer,
            from.full_sync_begin_out(true),
            false,
            crate::slot::SlotSet::all(),
        );
        let mut body = Vec::new();
        let n = from.dbs.iter().map(|d| d.table.len()).sum::<usize>() + from.evict.evicted.len();
        body.extend_from_slice(&(n as u32).to_le_bytes());
        for (db, d) in from.dbs.iter().enumerate() {
            for e in d.table.iter() {
                crate::sync::apply::encode_chunk_entry(&mut body, db as u16, &e.key, &e.state);
            }
        }
        // The keys it evicted, named as `sync::link::full_sync` names them.
        for (db, key) in from.evict.evicted.keys() {
            crate::sync::apply::encode_chunk_evicted(&mut body, *db, key);
        }
        let entries = crate::sync::apply::decode_chunk(&body, 16).unwrap();
        to.apply_chunk(&mut sync, &entries, now);
        to.end_full_sync_in(sync, now);
    }

    /// A full sync carries a removal whose context its sender collected; the add it removed
    /// then arrives from its own origin's stream: the receiver skips it (its delivered vector
    /// took the sender's context), live and when it replays its log.
    #[test]
    fn an_op_a_full_sync_carried_is_skipped_live_and_in_replay() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = site("a", &["b", "c"], Some(dir.path()));
        a.open_persistence().unwrap();
        let mut b = site("b", &["a", "c"], None);
        let mut c = site("c", &["a", "b"], None);
        run(&mut a, &["SET", "k", "v"]);
        run(&mut c, &["SADD", "set", "y"]);
        run(&mut c, &["SADD", "keep", "z"]);
        stream(&c, &mut b, 1, 1);
        run(&mut b, &["SREM", "set", "y"]);
        // B collects the SREM's context (every peer acked everything).
        let all = b.delivered_vv();
        for p in &mut b.sync.peers {
            p.acked = Some(all.clone());
            p.acked_causal = Some(all.clone());
        }
        b.gc_step(crate::time::wall_ms(), crate::sync::gc::GC_STEP_BUCKETS_MAX);
        assert!(
            b.dbs[0].get(b.hash_key(b"set"), b"set").is_none(),
            "gone at B"
        );
        full_sync(&b, &mut a, 0);
        assert_eq!(run(&mut a, &["SMEMBERS", "keep"]), "*1\r\n$1\r\nz\r\n");
        // C's adds arrive by C's stream: both were carried by B's states.
        stream(&c, &mut a, 1, 1);
        assert_eq!(run(&mut a, &["EXISTS", "set"]), ":0\r\n");
        assert_eq!(a.sync.peers[1].in_applied_seq, 2);
        let before = states(&a);
        a.persist.close();
        drop(a);
        let mut a = site("a", &["b", "c"], Some(dir.path()));
        a.open_persistence().unwrap();
        assert_eq!(states(&a), before);
        assert_eq!(run(&mut a, &["EXISTS", "set"]), ":0\r\n");
    }

    /// What `key` holds at `s`, as comparable text (members and fields sorted: their order
    /// is the table's).
    fn value_text(s: &mut Shard, key: &str) -> String {
        let t = run(s, &["TYPE", key]);
        let mut lines: Vec<String> = match t.as_str() {
            "+none\r\n" => return "none".into(),
            "+string\r\n" => vec![run(s, &["GET", key])],
            "+list\r\n" => vec![run(s, &["LRANGE", key, "0", "-1"])],
            "+hash\r\n" | "+set\r\n" => {
                let cmd = if t == "+hash\r\n" {
                    "HGETALL"
                } else {
                    "SMEMBERS"
                };
                let r = run(s, &[cmd, key]);
                let mut items: Vec<String> = r.split("\r\n").map(str::to_string).collect();
                if cmd == "HGETALL" {
                    // Pairs of (len, field, len, value) lines after the header.
                    let body: Vec<String> = items.drain(1..).collect();
                    let mut pairs: Vec<String> = body.chunks(4).map(|c| c.join("|")).collect();
                    pairs.sort();
                    pairs
                } else {
                    items.sort();
                    items
                }
            }
            other => vec![other.to_string()],
        };
        lines.insert(0, t);
        lines.join(";")
    }

    /// What the model's evicting site keeps to (docs/conflicts.md §18); the tests switch
    /// each part off to show that it is needed.
    #[derive(Clone, Copy)]
    struct EvictionRule {
        /// Marks of the keys evicted (a miss, never a partial value).
        marks: bool,
        /// Only keys every peer holds are evicted (no write lost at every site).
        held_only: bool,
    }

    /// Random writes at two sites, evictions at one, ops delivered at random points, now and
    /// then a complete full sync from the evicting site, with ops of it still in flight
    /// (which must leave the other site's copies of the keys it evicted as they were). A
    /// third site receives every op of both and never evicts: the reference. Once every op
    /// is delivered, the evicting site must hold each key as the reference does, or miss it,
    /// and the other site must hold every key as the reference does (no write lost). `Err`
    /// names the first key that differs.
    fn eviction_model(seed: u64, rule: EvictionRule) -> Result<(), String> {
        let mut rng = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut next = move |n: u64| {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng % n
        };
        let mut a = site("a", &["b"], None);
        let mut b = site("b", &["a"], None);
        let mut reference = site("c", &["a", "b"], None);
        let (mut a_next, mut b_next) = (1u64, 1u64);
        let keys = ["k0", "k1", "k2"];
        for _ in 0..60 {
            let key = keys[next(keys.len() as u64) as usize];
            let member = format!("m{}", next(3));
            let n = format!("{}", next(5) + 1);
            let at_a = next(2) == 0;
            let s = if at_a { &mut a } else { &mut b };
            match next(10) {
                0 => drop(run(s, &["INCRBY", key, &n])),
                1 => drop(run(s, &["SET", key, &n])),
                2 => drop(run(s, &["HSET", key, &member, &n])),
                3 => drop(run(s, &["HINCRBY", key, &member, &n])),
                4 => drop(run(s, &["RPUSH", key, &member])),
                5 => drop(run(s, &["SADD", key, &member])),
                6 => drop(run(s, &["DEL", key])),
                7 => {
                    // B's latest ack says what it holds now.
                    a.sync.peers[0].acked = Some(b.delivered_vv());
                    let held = a.held_everywhere_vv();
                    let may = !rule.held_only
                        || a.dbs[0]
                            .get(a.hash_key(key.as_bytes()), key.as_bytes())
                            .is_some_and(|e| Shard::held_everywhere(&e.state, Some(&held)));
                    if may && a.evict_key(0, key.as_bytes()) && !rule.marks {
                        a.evict.evicted.clear();
                    }
                }
                8 if next(4) == 0 => {
                    // A complete full sync a→b (a rejoin after a quarantine), whatever of
                    // a's ops b has not received yet: b keeps its copies of the keys a
                    // evicted, unchanged.
                    let before: Vec<String> = keys
                        .iter()
                        .filter(|k| a.evicted_mark(0, k.as_bytes()).is_some())
                        .map(|k| value_text(&mut b, k))
                        .collect();
                    full_sync(&a, &mut b, 0);
                    a_next = a.seq + 1;
                    let after: Vec<String> = keys
                        .iter()
                        .filter(|k| a.evicted_mark(0, k.as_bytes()).is_some())
                        .map(|k| value_text(&mut b, k))
                        .collect();
                    if before != after {
                        return Err(format!(
                            "seed {seed}: a complete full sync changed b's copies of the keys a evicted: {before:?} → {after:?}"
                        ));
                    }
                }
                8 => {
                    if a.seq >= a_next {
                        stream(&a, &mut b, 0, a_next);
                        a_next = a.seq + 1;
                    }
                }
                _ => {
                    if b.seq >= b_next {
                        stream(&b, &mut a, 0, b_next);
                        b_next = b.seq + 1;
                    }
                }
            }
        }
        // Deliver everything, both ways, until neither has anything new (a local write to
        // an evicted key issues its removal too), and all of it to the reference.
        for _ in 0..3 {
            if a.seq >= a_next {
                stream(&a, &mut b, 0, a_next);
                a_next = a.seq + 1;
            }
            if b.seq >= b_next {
                stream(&b, &mut a, 0, b_next);
                b_next = b.seq + 1;
            }
        }
        if a.seq >= 1 {
            stream(&a, &mut reference, 0, 1);
        }
        if b.seq >= 1 {
            stream(&b, &mut reference, 1, 1);
        }
        for key in keys {
            let (va, vb) = (value_text(&mut a, key), value_text(&mut b, key));
            let vc = value_text(&mut reference, key);
            if va != "none" && va != vc {
                return Err(format!(
                    "seed {seed}: {key}: a holds {va}, every op gives {vc}"
                ));
            }
            if vb != vc {
                return Err(format!(
                    "seed {seed}: {key}: b holds {vb}, every op gives {vc}"
                ));
            }
            if a.evicted_mark(0, key.as_bytes()).is_some() && va != "none" {
                return Err(format!("seed {seed}: {key} marked and held"));
            }
        }
        Ok(())
    }

    /// The eviction rule as a property: over many random schedules the evicting site only
    /// ever misses a key and no write is lost; without its marks (the rule before) some
    /// schedule leaves it holding a different value, and evicting keys a peer lacks loses
    /// writes at a complete full sync.
    #[test]
    fn an_evicting_site_only_misses_keys_whatever_the_schedule() {
        let full = EvictionRule {
            marks: true,
            held_only: true,
        };
        for seed in 0..400 {
            if let Err(e) = eviction_model(seed, full) {
                panic!("{e}");
            }
        }
        for (name, rule) in [
            (
                "without the marks",
                EvictionRule {
                    marks: false,
                    ..full
                },
            ),
            (
                "evicting keys a peer lacks",
                EvictionRule {
                    held_only: false,
                    ..full
                },
            ),
        ] {
            let failed = (0..400)
                .filter(|&seed| eviction_model(seed, rule).is_err())
                .count();
            eprintln!("{name}: {failed} of 400 schedules fail");
            assert!(failed > 0, "no schedule fails {name}");
        }
    }

    /// An evicted key's mark (docs/conflicts.md §18) survives a restart, by the log's
    /// `Evicted` record, and a snapshot, which holds it past the records it replaces.
    #[test]
    fn evicted_marks_survive_restarts_and_snapshots() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = site("a", &["b"], Some(dir.path()));
        a.open_persistence().unwrap();
        run(&mut a, &["INCRBY", "cnt", "10"]);
        run(&mut a, &["SET", "x", "1"]);
        assert!(a.evict_key(0, b"cnt"));
        a.persist.append_evicted(0, b"cnt");
        let mark = a.evicted_mark(0, b"cnt").cloned().unwrap();
        a.persist.close();
        drop(a);
        let mut a = site("a", &["b"], Some(dir.path()));
        a.open_persistence().unwrap();
        assert_eq!(a.evicted_mark(0, b"cnt"), Some(&mark));
        assert_eq!(run(&mut a, &["SAVE"]), "+OK\r\n");
        a.persist.close();
        drop(a);
        let mut a = site("a", &["b"], Some(dir.path()));
        a.open_persistence().unwrap();
        assert_eq!(a.evicted_mark(0, b"cnt"), Some(&mark));
        assert_eq!(run(&mut a, &["EXISTS", "cnt"]), ":0\r\n");
        // A local write then brings it back whole, and a restart replays that too.
        assert_eq!(run(&mut a, &["INCR", "cnt"]), ":1\r\n");
        a.persist.close();
        drop(a);
        let mut a = site("a", &["b"], Some(dir.path()));
        a.open_persistence().unwrap();
        assert!(a.evict.evicted.is_empty());
        assert_eq!(run(&mut a, &["GET", "cnt"]), "$1\r\n1\r\n");
        assert_eq!(run(&mut a, &["INCR", "cnt"]), ":2\r\n");
    }

    #[test]
    fn a_snapshot_with_evicted_marks_reads_back_and_damage_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = site("a", &["b"], None);
        dataset(&mut a);
        run(&mut a, &["INCRBY", "cnt", "3"]);
        assert!(a.evict_key(0, b"cnt"));
        assert!(a.evict_key(1, b"db1:0") || a.evict_key(0, b"s:0"));
        let (path, _) = super::snapshot::write(&a, 7, dir.path()).unwrap();
        let mut marks = Vec::new();
        super::snapshot::read_with_libraries(
            &path,
            16,
            |_, _, _| Ok(()),
            |_, _, _| Ok(()),
            |db, key, mark| {
                marks.push((db, key.to_vec(), mark));
                Ok(())
            },
        )
        .unwrap();
        let mut want: Vec<_> = a
            .evict
            .evicted
            .iter()
            .map(|((db, k), m)| (*db, k.to_vec(), m.clone()))
            .collect();
        want.sort_by(|x, y| (x.0, &x.1).cmp(&(y.0, &y.1)));
        marks.sort_by(|x, y| (x.0, &x.1).cmp(&(y.0, &y.1)));
        assert_eq!(marks.len(), 2);
        assert_eq!(marks, want);
        // A mark of a database the loader lacks, or with bytes after it: refused.
        let mut bad = Vec::new();
        super::snapshot::encode_evicted_mark(&mut bad, &want[0].2);
        bad.push(0);
        assert!(super::snapshot::decode_evicted_mark(&bad).is_err());
        bad.pop();
        for cut in 0..bad.len() {
            assert!(super::snapshot::decode_evicted_mark(&bad[..cut]).is_err());
        }
    }

    #[test]
    fn every_damage_to_a_snapshot_is_detected() {
        let dir = tempfile::tempdir().unwrap();
        let mut a = shard(dir.path());
        dataset(&mut a);
        let (path, _) = super::snapshot::write(&a, 7, dir.path()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let load = |b: &[u8]| {
            let mut n = 0usize;
            super::snapshot::read_from(b, 16, |_, _, _| {
                n += 1;
                Ok(())
            })
            .map(|m| (m.pos, n))
        };
        assert_eq!(load(&bytes).unwrap(), (7, states(&a).len()));
        for cut in 0..bytes.len() {
            assert!(load(&bytes[..cut]).is_err(), "truncated at {cut} loaded");
        }
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..2000 {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let at = (rng as usize) % bytes.len();
            let bit = (rng >> 32) % 8;
            let mut damaged = bytes.clone();
            damaged[at] ^= 1 << bit;
            assert!(
                load(&damaged).is_err(),
                "a flip of bit {bit} at {at} loaded"
            );
        }
        // Garbage never panics.
        for len in [0usize, 7, 8, 16, 64, 1000] {
            let junk: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            assert!(load(&junk).is_err());
        }
    }
}

//! The log writer: one thread per shard that writes the records the shard hands it to the
//! current segment, fsyncs them by the policy, and starts new segments.
//!
//! The shard never waits on the disk: it appends encoded records to a buffer and hands the
//! buffer over (`Persist::hand_off`). Under `always`, connections whose batch wrote
//! something wait for `durable_pos` before their replies go out; every record handed over
//! by then shares the one fsync (group commit).
//!
//! A failed write is undone (the file is cut back to its last good length, so no partial
//! record stays) and retried; meanwhile `failed` is set and the shard refuses writes with
//! `-MISCONF`, as Redis does.

use std::fs::File;
use std::io::{Seek as _, SeekFrom, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use meridian_crdt::ReplicaId;

use super::Fsync;
use super::record::{self, Kind, SegmentHeader};

/// How long the writer waits before retrying after a failed write or fsync.
pub const RETRY_AFTER: Duration = Duration::from_millis(100);
/// The `everysec` period.
pub const FSYNC_PERIOD: Duration = Duration::from_secs(1);

/// One segment file of the log.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    pub first_pos: u64,
    /// Position after its last record.
    pub end_pos: u64,
    pub path: PathBuf,
    pub bytes: u64,
    /// Sequence numbers of this shard's own ops in it (0, 0: none).
    pub own_first_seq: u64,
    pub own_last_seq: u64,
}

impl SegmentInfo {
    /// Notes the own op records in `records` (a run of whole records).
    pub fn note_records(&mut self, records: &[u8], replica: ReplicaId) {
        let _ = record::scan::<()>(records, |f| {
            if f.kind == Kind::Op {
                if let Some(seq) = own_seq(f.payload, replica) {
                    if self.own_first_seq == 0 {
                        self.own_first_seq = seq;
                    }
                    self.own_last_seq = seq;
                }
            }
            Ok(())
        });
    }
}

/// The sequence number of an op record (op log format) when this replica originated it.
pub fn own_seq(op: &[u8], replica: ReplicaId) -> Option<u64> {
    let seq = u64::from_le_bytes(op.get(4..12)?.try_into().ok()?);
    let origin = u32::from_le_bytes(op.get(20..24)?.try_into().ok()?);
    (origin == replica.0).then_some(seq)
}

pub fn segment_name(first_pos: u64) -> String {
    format!("log-{first_pos:020}.log")
}

/// What the shard handed over and not yet taken.
#[derive(Debug, Default)]
struct Inbox {
    buf: Vec<u8>,
    /// Position after the last record in `buf`.
    end_pos: u64,
    fsync: Option<Fsync>,
    /// Close the current segment once `buf` is written (a snapshot starts at its end).
    rotate: bool,
    stop: bool,
}

/// Writer state the shard reads.
#[derive(Debug, Default)]
pub struct WriterState {
    /// Oldest first; the last one is being written.
    pub segments: Vec<SegmentInfo>,
    /// Why the last write or fsync failed (cleared by the next success).
    pub last_error: Option<String>,
    pub fsyncs: u64,
    /// Position at which the newest rotation started a segment.
    pub rotated_at: u64,
}

/// Shared between the shard and its writer thread.
#[derive(Debug, Default)]
pub struct WriterShared {
    inbox: Mutex<Inbox>,
    wake: Condvar,
    /// Records below this position are on disk (fsynced).
    pub durable_pos: AtomicU64,
    /// Records below this position were written to the file.
    pub written_pos: AtomicU64,
    /// Sequence number of the last own op on disk (fsynced): the syncer streams no further
    /// (a site must never lose an op a peer holds: docs/persistence.md §6).
    pub durable_own_seq: AtomicU64,
    /// Signalled after each fsync (and on failure), for connections waiting under `always`.
    pub durable: tokio::sync::Notify,
    /// The last write or fsync failed and was not yet redone.
    pub failed: AtomicBool,
    pub state: Mutex<WriterState>,
}

impl WriterShared {
    /// Hands `pending` (whole records ending at position `end_pos`) to the writer; leaves
    /// `pending` empty, keeping an allocation.
    pub fn hand_off(&self, pending: &mut Vec<u8>, end_pos: u64, rotate: bool) {
        let mut ib = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        if ib.buf.is_empty() {
            std::mem::swap(&mut ib.buf, pending);
        } else {
            ib.buf.extend_from_slice(pending);
            pending.clear();
        }
        ib.end_pos = end_pos;
        ib.rotate |= rotate;
        drop(ib);
        self.wake.notify_one();
    }

    pub fn set_fsync(&self, fsync: Fsync) {
        let mut ib = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        ib.fsync = Some(fsync);
        drop(ib);
        self.wake.notify_one();
    }

    pub fn stop(&self) {
        let mut ib = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        ib.stop = true;
        drop(ib);
        self.wake.notify_one();
    }

    pub fn state(&self) -> std::sync::MutexGuard<'_, WriterState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Creates segment `first_pos` in `dir` with its header, fsyncs it and the directory.
pub fn create_segment(
    dir: &Path,
    replica: ReplicaId,
    first_pos: u64,
) -> std::io::Result<(File, PathBuf)> {
    let path = dir.join(segment_name(first_pos));
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .open(&path)?;
    f.write_all(&SegmentHeader { replica, first_pos }.encode())?;
    f.sync_all()?;
    sync_dir(dir)?;
    Ok((f, path))
}

/// Makes a directory's entries (a created, renamed or deleted file) durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Settings of one writer thread.
pub struct WriterSetup {
    pub dir: PathBuf,
    pub replica: ReplicaId,
    pub segment_bytes_max: u64,
    pub watermark: bool,
    pub fsync: Fsync,
    /// The site has peers: own ops are fsynced as soon as they are written, whatever the
    /// policy, because peers receive them only once they are on disk.
    pub fsync_for_peers: bool,
    /// The open segment to append to, its path and length.
    pub file: File,
    pub path: PathBuf,
    pub bytes: u64,
}

/// Runs the writer until told to stop; everything handed over before is written and
/// fsynced when it returns.
pub fn run(shared: Arc<WriterShared>, setup: WriterSetup) {
    let WriterSetup {
        dir,
        replica,
        segment_bytes_max,
        watermark,
        mut fsync,
        fsync_for_peers,
        mut file,
        mut path,
        mut bytes,
    } = setup;
    let mut carry: Vec<u8> = Vec::new();
    let mut spare: Vec<u8> = Vec::new();
    let mut carry_end = shared.written_pos.load(Ordering::Acquire);
    let mut last_fsync = Instant::now();
    let mut unsynced = false;
    let mut failing = false;
    let mut own_written = shared.durable_own_seq.load(Ordering::Acquire);
    // Unsynced own ops a peer waits for.
    let mut own_unsynced = false;
    if watermark {
        write_watermark(&dir, &path, bytes);
    }
    loop {
        let (rotate, stop) = {
            let mut ib = shared.inbox.lock().unwrap_or_else(|e| e.into_inner());
            loop {
                if let Some(f) = ib.fsync.take() {
                    fsync = f;
                }
                if !ib.buf.is_empty() || ib.rotate || ib.stop {
                    break;
                }
                let wait = if failing {
                    RETRY_AFTER
                } else if own_unsynced && fsync_for_peers {
                    Duration::ZERO
                } else if unsynced && fsync == Fsync::EverySec {
                    FSYNC_PERIOD.saturating_sub(last_fsync.elapsed())
                } else {
                    FSYNC_PERIOD
                };
                if wait.is_zero() {
                    break;
                }
                let (guard, timeout) = shared
                    .wake
                    .wait_timeout(ib, wait)
                    .unwrap_or_else(|e| e.into_inner());
                ib = guard;
                if timeout.timed_out() && (failing || unsynced) {
                    break;
                }
            }
            if !ib.buf.is_empty() {
                std::mem::swap(&mut ib.buf, &mut spare);
                carry.extend_from_slice(&spare);
                spare.clear();
                carry_end = ib.end_pos;
            }
            let r = (ib.rotate, ib.stop);
            ib.rotate = false;
            (r.0, r.1)
        };
        if !carry.is_empty() {
            match file.write_all(&carry) {
                Ok(()) => {
                    bytes += carry.len() as u64;
                    {
                        let mut st = shared.state();
                        if let Some(seg) = st.segments.last_mut() {
                            let before = seg.own_last_seq;
                            seg.note_records(&carry, replica);
                            if seg.own_last_seq != before {
                                own_written = seg.own_last_seq;
                                own_unsynced = true;
                            }
                            seg.end_pos = carry_end;
                            seg.bytes = bytes;
                        }
                    }
                    carry.clear();
                    shared.written_pos.store(carry_end, Ordering::Release);
                    unsynced = true;
                }
                Err(e) => {
                    // Cut back any part of the batch that reached the file: the retry
                    // writes it whole.
                    let _ = file.set_len(bytes);
                    let _ = file.seek(SeekFrom::Start(bytes));
                    fail(&shared, &mut failing, format!("{e}"), errno_text(&e));
                    if stop {
                        return;
                    }
                    continue;
                }
            }
        }
        let due = match fsync {
            Fsync::Always => unsynced,
            Fsync::EverySec => {
                unsynced
                    && (last_fsync.elapsed() >= FSYNC_PERIOD || (fsync_for_peers && own_unsynced))
            }
            Fsync::No => unsynced && fsync_for_peers && own_unsynced,
        };
        let rotate = rotate || bytes >= segment_bytes_max;
        if due || ((rotate || stop) && unsynced) {
            let end = shared.written_pos.load(Ordering::Acquire);
            let own_end = own_written;
            last_fsync = Instant::now();
            match file.sync_data() {
                Ok(()) => {
                    unsynced = false;
                    own_unsynced = false;
                    shared.durable_pos.store(end, Ordering::Release);
                    shared.durable_own_seq.store(own_end, Ordering::Release);
                    shared.state().fsyncs += 1;
                    if watermark {
                        write_watermark(&dir, &path, bytes);
                    }
                    if failing {
                        failing = false;
                        shared.failed.store(false, Ordering::Release);
                        shared.state().last_error = None;
                        tracing::warn!("log writes succeed again");
                    }
                }
                Err(e) => {
                    fail(&shared, &mut failing, format!("{e}"), errno_text(&e));
                    shared.durable.notify_waiters();
                    if stop {
                        return;
                    }
                    continue;
                }
            }
            shared.durable.notify_waiters();
        } else if failing && carry.is_empty() {
            failing = false;
            shared.failed.store(false, Ordering::Release);
            shared.state().last_error = None;
        }
        if stop {
            return;
        }
        if rotate && !unsynced {
            let first = shared.written_pos.load(Ordering::Acquire);
            let same = shared
                .state()
                .segments
                .last()
                .is_some_and(|s| s.first_pos == first);
            if same {
                // Nothing written since the last rotation: the segment is already fresh.
                shared.state().rotated_at = first;
                continue;
            }
            match create_segment(&dir, replica, first) {
                Ok((f, p)) => {
                    file = f;
                    path = p.clone();
                    bytes = record::SEGMENT_HEADER_BYTES as u64;
                    let mut st = shared.state();
                    st.segments.push(SegmentInfo {
                        first_pos: first,
                        end_pos: first,
                        path: p,
                        bytes,
                        own_first_seq: 0,
                        own_last_seq: 0,
                    });
                    st.rotated_at = first;
                }
                Err(e) => {
                    fail(&shared, &mut failing, format!("{e}"), errno_text(&e));
                    // Ask again: the next loop retries the rotation.
                    let mut ib = shared.inbox.lock().unwrap_or_else(|e| e.into_inner());
                    ib.rotate = true;
                }
            }
        }
    }
}

fn fail(shared: &WriterShared, failing: &mut bool, detail: String, text: String) {
    if !*failing {
        tracing::error!(error = %detail, "writing the op log failed; writes are refused until it succeeds");
    }
    *failing = true;
    shared.failed.store(true, Ordering::Release);
    shared.state().last_error = Some(text);
}

/// The C library's text for an I/O error (what Redis puts in `-MISCONF`).
pub fn errno_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    // std formats "No space left on device (os error 28)": keep the strerror part.
    match s.find(" (os error") {
        Some(i) => s.get(..i).unwrap_or(&s).to_string(),
        None => s,
    }
}

/// Test hook: `fsynced` names the segment and the length known to be on disk.
fn write_watermark(dir: &Path, path: &Path, bytes: u64) {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let tmp = dir.join("fsynced.tmp");
    if std::fs::write(&tmp, format!("{name} {bytes}\n")).is_ok() {
        let _ = std::fs::rename(&tmp, dir.join("fsynced"));
    }
}

//! Segment files and the fsync thread.
//!
//! The shard thread `write(2)`s its records to the current segment itself at the end of every
//! batch of commands, before the replies go out (as Redis writes its AOF buffer in
//! `beforeSleep`), so a reply under any policy means the write is at least in the kernel: a
//! SIGKILL loses nothing acknowledged. It also starts new segments. The **fsync thread**
//! beside it (`run`) makes written data durable by the policy: at once under `always` (every
//! connection waiting then shares one fsync: group commit), once a second under `everysec`.
//! Peers receive own ops once written, not once fsynced: a reboot that loses the unsynced
//! tail begins a new life (`persist::life`). The shard never waits on an fsync.

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use meridian_crdt::ReplicaId;

use super::Fsync;
use super::record::{self, Kind, SegmentHeader};

/// How long the fsync thread waits before retrying a failed fsync.
pub const RETRY_AFTER: Duration = Duration::from_millis(100);
/// The `everysec` period.
pub const FSYNC_PERIOD: Duration = Duration::from_secs(1);
/// The `everysec` period when the site has peers. Own ops stream once written, so the fsync
/// is not in the replication lag, but each fdatasync stalls the shard's next `write(2)` while
/// the filesystem commits what is dirty (ext4's ordered journal): one fsync of a second of
/// log under load stalled it for up to ~50 ms on the development VM. Ten smaller fsyncs a
/// second keep each stall short, and shrink what a reboot may lose (and peers return).
pub const FSYNC_PERIOD_WITH_PEERS: Duration = Duration::from_millis(100);
/// Shortest sleep of the fsync thread: a deadline closer than this is waited for this long.
const WAIT_MIN: Duration = Duration::from_micros(100);

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
    pub fn note_records(&mut self, records: &[u8], lives: &[ReplicaId]) {
        let _ = record::scan::<()>(records, |f| {
            if f.kind == Kind::Op {
                if let Some(seq) = own_seq(f.payload, lives) {
                    self.note_own(seq);
                }
            }
            Ok(())
        });
    }

    pub fn note_own(&mut self, seq: u64) {
        if self.own_first_seq == 0 {
            self.own_first_seq = seq;
        }
        self.own_last_seq = seq;
    }
}

/// The sequence number of an op record (op log format) when one of this shard's `lives`
/// originated it.
pub fn own_seq(op: &[u8], lives: &[ReplicaId]) -> Option<u64> {
    let seq = u64::from_le_bytes(op.get(4..12)?.try_into().ok()?);
    let origin = ReplicaId(u32::from_le_bytes(op.get(20..24)?.try_into().ok()?));
    lives.contains(&origin).then_some(seq)
}

pub fn segment_name(first_pos: u64) -> String {
    format!("log-{first_pos:020}.log")
}

/// What the shard tells the fsync thread.
#[derive(Debug, Default)]
struct Inbox {
    /// The segment being written.
    current: Option<Arc<File>>,
    current_path: PathBuf,
    /// Length of the current segment after the last write.
    current_bytes: u64,
    /// Closed segments not fsynced yet.
    retired: Vec<Arc<File>>,
    /// Position after the last record written, and the last own op written.
    written_end: u64,
    own_written: u64,
    /// Written since the last fsync.
    dirty: bool,
    fsync: Option<Fsync>,
    stop: bool,
}

/// Log state shared by the shard, its fsync thread and waiting connections.
#[derive(Debug, Default)]
pub struct WriterShared {
    inbox: Mutex<Inbox>,
    wake: Condvar,
    /// Records below this position are on disk (fsynced).
    pub durable_pos: AtomicU64,
    /// Records below this position were written to the file.
    pub written_pos: AtomicU64,
    /// Sequence number of the last own op on disk: the syncer streams no further (a site
    /// must never lose an op a peer holds: docs/persistence.md §6).
    pub durable_own_seq: AtomicU64,
    /// Signalled after each fsync and on failures, for connections waiting under `always`.
    pub durable: tokio::sync::Notify,
    /// The last write(2) failed (set and cleared by the shard).
    pub write_failed: AtomicBool,
    /// The last fsync failed (set and cleared by the fsync thread).
    pub fsync_failed: AtomicBool,
    pub state: Mutex<WriterState>,
}

/// Fsync durations kept for `INFO persistence` (the last this many).
pub const FSYNC_SAMPLES_MAX: usize = 1024;

/// Upper bounds (µs) of the fsync duration histogram `/metrics` shows
/// (`meridian_fsync_duration_seconds`): 100 µs to 2.5 s.
pub const FSYNC_BUCKETS_US: [u64; 14] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000,
];

/// Writer state the shard reads.
#[derive(Debug, Default)]
pub struct WriterState {
    /// Oldest first; the last one is being written.
    pub segments: Vec<SegmentInfo>,
    /// Why the last write or fsync failed (cleared by the next success).
    pub last_error: Option<String>,
    pub fsyncs: u64,
    /// Durations of the last successful fsync passes in µs, oldest first: with peers they
    /// are most of the replication lag (own ops stream once on disk).
    // Invariant: at most FSYNC_SAMPLES_MAX entries.
    pub fsync_us: std::collections::VecDeque<u64>,
    /// Longest fsync pass since start, in µs.
    pub fsync_us_max: u64,
    /// Fsync passes at most `FSYNC_BUCKETS_US[i]` µs long, cumulative, since start.
    pub fsync_buckets: [u64; FSYNC_BUCKETS_US.len()],
    /// Sum of every fsync pass's duration since start, in µs.
    pub fsync_us_sum: u64,
}

impl WriterState {
    fn note_fsync(&mut self, us: u64) {
        self.fsyncs += 1;
        if self.fsync_us.len() >= FSYNC_SAMPLES_MAX {
            self.fsync_us.pop_front();
        }
        self.fsync_us.push_back(us);
        self.fsync_us_max = self.fsync_us_max.max(us);
        self.fsync_us_sum = self.fsync_us_sum.saturating_add(us);
        for (le, n) in FSYNC_BUCKETS_US.iter().zip(self.fsync_buckets.iter_mut()) {
            if us <= *le {
                *n += 1;
            }
        }
    }

    /// The `q` quantile (0..=1) of the recent fsync durations in µs (0 before any).
    pub fn fsync_quantile_us(&self, q: f64) -> u64 {
        crate::stats::quantile(self.fsync_us.iter().copied(), q)
    }
}

impl WriterShared {
    pub fn state(&self) -> std::sync::MutexGuard<'_, WriterState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn inbox(&self) -> std::sync::MutexGuard<'_, Inbox> {
        self.inbox.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether writes are failing (write or fsync).
    pub fn failed(&self) -> bool {
        self.write_failed.load(Ordering::Acquire) || self.fsync_failed.load(Ordering::Acquire)
    }

    /// The shard wrote records up to position `end` (`own` last own op, if any among them);
    /// the segment is now `bytes` long. Wakes the fsync thread when `urgent`, and only when
    /// this write makes it newly due: while the log is already dirty the thread has either
    /// not looked yet or sleeps towards a deadline that covers this write too, so waking it
    /// would cost a context switch per batch of commands and change nothing.
    pub fn note_written(&self, end: u64, own: Option<u64>, bytes: u64, urgent: bool) {
        self.written_pos.store(end, Ordering::Release);
        let mut ib = self.inbox();
        ib.written_end = end;
        ib.current_bytes = bytes;
        let newly_due = !ib.dirty;
        ib.dirty = true;
        if let Some(seq) = own {
            ib.own_written = seq;
        }
        drop(ib);
        if urgent && newly_due {
            self.wake.notify_one();
        }
    }

    /// The shard started segment `file` at `path`; the previous one is fsynced and closed.
    pub fn note_rotated(&self, file: Arc<File>, path: PathBuf, bytes: u64) {
        let mut ib = self.inbox();
        if let Some(old) = ib.current.replace(file) {
            ib.retired.push(old);
            ib.dirty = true;
        }
        ib.current_path = path;
        ib.current_bytes = bytes;
        drop(ib);
        self.wake.notify_one();
    }

    pub fn set_fsync(&self, fsync: Fsync) {
        self.inbox().fsync = Some(fsync);
        self.wake.notify_one();
    }

    pub fn stop(&self) {
        self.inbox().stop = true;
        self.wake.notify_one();
    }

    pub fn set_error(&self, text: String) {
        self.state().last_error = Some(text);
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

/// Settings of one fsync thread.
pub struct WriterSetup {
    pub dir: PathBuf,
    pub watermark: bool,
    pub fsync: Fsync,
    /// The `everysec` period: `FSYNC_PERIOD`, or `FSYNC_PERIOD_WITH_PEERS`.
    pub period: Duration,
    /// The open segment, its path and length.
    pub file: Arc<File>,
    pub path: PathBuf,
    pub bytes: u64,
}

/// Runs the fsync thread until told to stop; everything written before is fsynced when it
/// returns.
pub fn run(shared: Arc<WriterShared>, setup: WriterSetup) {
    let WriterSetup {
        dir,
        watermark,
        mut fsync,
        period,
        file,
        path,
        bytes,
    } = setup;
    {
        let mut ib = shared.inbox();
        ib.current = Some(file);
        ib.current_path = path.clone();
        ib.current_bytes = bytes;
    }
    if watermark {
        write_watermark(&dir, &path, bytes);
    }
    let mut last_fsync = Instant::now();
    let mut failing = false;
    loop {
        let (retired, current, path, bytes, end, own_end, stop) = {
            let mut ib = shared.inbox();
            loop {
                if let Some(f) = ib.fsync.take() {
                    fsync = f;
                }
                let due = !ib.retired.is_empty()
                    || (ib.dirty
                        && match fsync {
                            Fsync::Always => true,
                            Fsync::EverySec => last_fsync.elapsed() >= period,
                            Fsync::No => false,
                        });
                if (due && !failing) || ib.stop {
                    break;
                }
                let wait = if failing {
                    RETRY_AFTER
                } else if ib.dirty && fsync == Fsync::EverySec {
                    period.saturating_sub(last_fsync.elapsed())
                } else {
                    period
                };
                let (guard, timeout) = shared
                    .wake
                    .wait_timeout(ib, wait.max(WAIT_MIN))
                    .unwrap_or_else(|e| e.into_inner());
                ib = guard;
                if failing && timeout.timed_out() {
                    failing = false;
                }
            }
            let retired = std::mem::take(&mut ib.retired);
            ib.dirty = false;
            (
                retired,
                ib.current.clone(),
                ib.current_path.clone(),
                ib.current_bytes,
                ib.written_end,
                ib.own_written,
                ib.stop,
            )
        };
        last_fsync = Instant::now();
        let started = Instant::now();
        let mut result = Ok(());
        for f in &retired {
            if result.is_ok() {
                result = f.sync_data();
            }
        }
        if result.is_ok() {
            if let Some(f) = &current {
                result = f.sync_data();
            }
        }
        match result {
            Ok(()) => {
                if watermark {
                    write_watermark(&dir, &path, bytes);
                }
                shared.durable_pos.store(end, Ordering::Release);
                shared.durable_own_seq.store(own_end, Ordering::Release);
                shared
                    .state()
                    .note_fsync(started.elapsed().as_micros() as u64);
                if shared.fsync_failed.swap(false, Ordering::AcqRel) {
                    tracing::warn!("fsync of the op log succeeds again");
                    if !shared.write_failed.load(Ordering::Acquire) {
                        shared.state().last_error = None;
                    }
                }
            }
            Err(e) => {
                if !shared.fsync_failed.swap(true, Ordering::AcqRel) {
                    tracing::error!(error = %e, "fsync of the op log failed; writes are refused until it succeeds");
                }
                shared.set_error(errno_text(&e));
                failing = true;
                // Everything must be fsynced again.
                let mut ib = shared.inbox();
                let mut back = retired;
                back.append(&mut ib.retired);
                ib.retired = back;
                ib.dirty = true;
            }
        }
        shared.durable.notify_waiters();
        if stop {
            return;
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn start(fsync: Fsync) -> (Arc<WriterShared>, std::thread::JoinHandle<()>, PathBuf) {
        let dir = std::env::temp_dir().join(format!(
            "meridian-writer-{}-{}",
            std::process::id(),
            rand::random::<u64>()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let (file, path) = create_segment(&dir, ReplicaId(1), 0).unwrap();
        let shared = Arc::new(WriterShared::default());
        let setup = WriterSetup {
            dir: dir.clone(),
            watermark: false,
            fsync,
            period: FSYNC_PERIOD,
            file: Arc::new(file),
            path,
            bytes: 24,
        };
        let s = shared.clone();
        let handle = std::thread::spawn(move || run(s, setup));
        (shared, handle, dir)
    }

    fn wait_own(shared: &WriterShared, seq: u64, within: Duration) -> bool {
        let t = Instant::now();
        while t.elapsed() < within {
            if shared.durable_own_seq.load(Ordering::Acquire) >= seq {
                return true;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        false
    }

    fn stop(shared: &WriterShared, handle: std::thread::JoinHandle<()>, dir: &Path) {
        shared.stop();
        handle.join().unwrap();
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn fsync_durations_are_kept_up_to_the_limit() {
        let mut st = WriterState::default();
        assert_eq!(st.fsync_quantile_us(0.99), 0);
        for us in 1..=(FSYNC_SAMPLES_MAX as u64 + 1) {
            st.note_fsync(us);
        }
        assert_eq!(st.fsync_us.len(), FSYNC_SAMPLES_MAX);
        assert_eq!(st.fsync_us.front(), Some(&2), "the oldest went");
        assert_eq!(st.fsyncs, FSYNC_SAMPLES_MAX as u64 + 1);
        assert_eq!(st.fsync_us_max, FSYNC_SAMPLES_MAX as u64 + 1);
        assert_eq!(st.fsync_quantile_us(0.0), 2);
        assert_eq!(st.fsync_quantile_us(1.0), FSYNC_SAMPLES_MAX as u64 + 1);
        assert_eq!(st.fsync_quantile_us(0.5), 514);
    }

    #[test]
    fn everysec_waits_for_its_period_with_or_without_peers() {
        let (shared, handle, dir) = start(Fsync::EverySec);
        shared.note_written(30, Some(1), 30, false);
        assert!(!wait_own(&shared, 1, Duration::from_millis(300)));
        assert!(wait_own(&shared, 1, Duration::from_millis(1500)));
        stop(&shared, handle, &dir);
    }

    #[test]
    fn always_fsyncs_every_write_promptly() {
        let (shared, handle, dir) = start(Fsync::Always);
        for seq in 1..=20u64 {
            shared.note_written(24 + seq, Some(seq), 24 + seq, true);
            assert!(
                wait_own(&shared, seq, Duration::from_millis(500)),
                "seq {seq}"
            );
        }
        stop(&shared, handle, &dir);
    }
}

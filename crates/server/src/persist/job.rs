//! Opening the data directory at start, snapshots (SAVE, BGSAVE, BGREWRITEAOF, the automatic
//! policy) and dropping files nobody needs any more.
//!
//! A background snapshot never touches the live keyspace: the shard closes the current log
//! segment, and a thread replays the newest snapshot plus the sealed segments into a
//! private shard and writes that as the new snapshot (an incremental scheme: each snapshot
//! is the previous one plus the log since), and no pause of the shard. The replay keeps the
//! keys a part at a time (`Part`: a keyed hash of the key, modulo the parts) within
//! `snapshot-memory-bytes-max` (by default a quarter of `maxmemory`, unbounded without it):
//! a part that outgrows it is abandoned and the snapshot starts again with twice the parts,
//! up to `SNAPSHOT_PARTS_MAX`. So the second copy of the data a fork's copy-on-write costs
//! Redis at worst is bounded here, for a replay of the log per part. SAVE writes the live
//! state directly and blocks the shard, as Redis's SAVE blocks the server.
//!
//! The log is written when the process starts with `appendonly yes`, and also with
//! `appendonly no` and a `save` policy (`log_kept`): then it is there for the policy's
//! snapshots and BGSAVE, without fsync, as Redis's forked RDB saves need nothing of the kind.
//! A policy set at run time on a server started without the log writes its snapshots as
//! SAVE does (`persistence_cycle`).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::recover::{self, Purpose};
use super::writer::{self, WriterSetup, WriterShared};
use super::{Fsync, Persist, PersistError, life, snapshot};
use crate::shard::Shard;

/// Snapshots kept: the newest, and one before it in case the newest is found damaged.
pub const SNAPSHOTS_KEPT: usize = 2;
/// Most parts a background snapshot replays the keys in; at this many a part may outgrow
/// the budget (one key larger than it, say): it is written anyway.
pub const SNAPSHOT_PARTS_MAX: u64 = 1024;
/// The least memory budget a background snapshot's part gets (its buffers alone take
/// about 2 MiB): a smaller `snapshot-memory-bytes-max` or `maxmemory` would only multiply
/// the parts.
pub const SNAPSHOT_PART_BYTES_MIN: u64 = 8 * 1024 * 1024;
/// Seconds before the `save` policy tries again after its snapshot failed (Redis's
/// `CONFIG_BGSAVE_RETRY_DELAY`).
pub const POLICY_RETRY_S: u64 = 5;

/// Whether a shard started with `config` writes the op log: `appendonly yes`, or a `save`
/// policy (the log its background snapshots are built from; module docs).
pub fn log_kept(config: &crate::config::Config) -> bool {
    config.appendonly || !config.save.trim().is_empty()
}

/// The fsync policy of the log: `appendfsync` with `appendonly yes`; `no` when the log is
/// kept only for the `save` policy's snapshots (Redis's `appendfsync` concerns the AOF alone).
pub fn log_fsync(appendonly: bool, appendfsync: &str) -> Fsync {
    if appendonly {
        Fsync::parse(appendfsync).unwrap_or(Fsync::EverySec)
    } else {
        Fsync::No
    }
}

/// The keys one pass of a background snapshot's replay keeps: those whose keyed hash is
/// `index` modulo `count` (every pass of one snapshot shares the hasher, so each key falls
/// in exactly one part; the seed is random, so no client can pile keys into one part).
#[derive(Clone, Debug)]
pub struct Part {
    pub count: u64,
    pub index: u64,
    pub hasher: std::hash::RandomState,
    /// Bytes the private shard's thread may hold (`u64::MAX`: no bound), beyond
    /// `buffer_bytes`.
    pub bytes_max: u64,
    /// The log segment the replay holds in memory while it walks it (up to
    /// `log-segment-bytes-max`): not counted against `bytes_max`, which would otherwise be
    /// outgrown by every part.
    pub buffer_bytes: u64,
    /// Set when the replay stopped for holding more than `bytes_max`.
    pub over: bool,
}

impl Part {
    /// Whether this pass keeps `key`.
    pub fn holds(&self, key: &[u8]) -> bool {
        use std::hash::BuildHasher as _;
        self.count <= 1 || self.hasher.hash_one(key) % self.count == self.index
    }
}

/// What one background snapshot's part may hold: `snapshot-memory-bytes-max`, or a quarter
/// of `maxmemory`, or no bound; never under `SNAPSHOT_PART_BYTES_MIN`.
pub fn part_bytes_max(config: &crate::config::Config) -> u64 {
    let configured = if config.snapshot_memory_bytes_max > 0 {
        config.snapshot_memory_bytes_max
    } else if config.maxmemory > 0 {
        config.maxmemory / 4
    } else {
        return u64::MAX;
    };
    configured.max(SNAPSHOT_PART_BYTES_MIN)
}

/// Which command started a background snapshot (their replies and INFO fields differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JobKind {
    Bgsave,
    Rewrite,
}

/// A background snapshot in progress.
#[derive(Debug)]
pub struct Job {
    pub kind: JobKind,
    pub started: Instant,
    pub upto: u64,
    pub dirty_at_start: u64,
    handle: std::thread::JoinHandle<Result<(PathBuf, u64), String>>,
}

/// The directory of shard `index` under the configured `dir`.
pub fn shard_dir(dir: &Path, index: u16) -> PathBuf {
    dir.join(format!("shard-{index}"))
}

fn unix_s() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Shard {
    /// Opens the data directory at start: locks it, recovers, starts the writer on a new
    /// segment and a new incarnation. Without the log (`log_kept`), only what the directory
    /// holds is loaded and nothing is written until SAVE or a stop.
    pub fn open_persistence(&mut self) -> Result<(), PersistError> {
        let started = Instant::now();
        let dir = shard_dir(&self.config.dir, self.index);
        std::fs::create_dir_all(&dir).map_err(|e| PersistError::io(&dir, e))?;
        let lock_path = dir.join("LOCK");
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| PersistError::io(&lock_path, e))?;
        // flock: released by the kernel when the process dies, however it dies.
        match rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => {}
            Err(e) if e == rustix::io::Errno::WOULDBLOCK => {
                return Err(PersistError::Locked {
                    path: dir.display().to_string(),
                });
            }
            Err(e) => return Err(PersistError::io(&lock_path, e.into())),
        }
        let mut p = Persist::disabled();
        p.dir = dir.clone();
        p.lock = Some(lock);
        p.fsync = log_fsync(self.config.appendonly, &self.config.appendfsync);
        p.appendonly = self.config.appendonly;
        p.recovering = true;
        p.stats.last_save_s = unix_s();
        self.persist = p;
        self.sync.incarnations.clear();
        // Recover under the life the directory was last started in; then begin a new one if
        // this start may have lost ops peers hold (persist::life).
        let prev_life = life::read(&dir)?;
        let boot_id = life::boot_id(&self.config.debug_boot_id);
        self.set_life(prev_life.as_ref().map_or(0, |l| l.life));
        let rec = recover::recover(self, &dir, Purpose::Start)?;
        self.persist.recovering = false;
        // Recovery only fills the library register; load the libraries once, now.
        self.settle_libraries();
        let keep_log = log_kept(&self.config);
        let new_life = life::needs_new_life(prev_life.as_ref(), &boot_id, keep_log);
        if new_life {
            let from = self.sync.life;
            let to = self.begin_life();
            tracing::warn!(
                from,
                to,
                replica = %format_args!("{:08x}", self.replica.0),
                "a new life: this start may have lost ops peers hold (reboot, or no log), so new ops carry a new replica id"
            );
        }
        let now_life = self.life_record(keep_log);
        if prev_life.as_ref() != Some(&now_life) {
            life::write(&dir, &now_life)?;
        }
        self.persist.own_written_seq = self.seq;
        let lease = meridian_crdt::Hlc(rec.lease);
        // In the same life, own ops issued before the restart have hlcs up to the lease;
        // those after the last one recovered were lost if the disk lost written data (a
        // killed process keeps it): the causal context leaves them out (`SyncState::own_gap`).
        self.sync.own_gap =
            (!new_life && lease > self.sync.own_last).then_some(meridian_crdt::Gap {
                replica: self.replica,
                after: self.sync.own_last,
                upto: lease,
            });
        if lease > self.clock.last() {
            self.clock = meridian_crdt::HlcClock::resume_after(lease);
        }
        let first_seq = self.seq + 1;
        self.sync.begin_incarnation(first_seq);
        let stats = &mut self.persist.stats;
        stats.loaded_keys = rec.keys_loaded;
        stats.loaded_records = rec.records_replayed;
        stats.load_ms = started.elapsed().as_millis() as u64;
        stats.dirty_at_save = self.stats.dirty;
        if let Some((pos, _, bytes)) = &rec.snapshot {
            stats.snapshot_pos = *pos;
            stats.snapshot_bytes = *bytes;
        }
        self.persist.next_pos = rec.next_pos;
        if keep_log {
            // A fresh segment for this life (reuse an empty one left at the same position).
            let mut segments = rec.segments;
            if segments.last().is_some_and(|s| s.first_pos == rec.next_pos) {
                if let Some(s) = segments.pop() {
                    let _ = std::fs::remove_file(&s.path);
                }
            }
            self.start_writer_at(&dir, rec.next_pos, segments)?;
            let (inc, first) = (self.sync.incarnation, first_seq);
            self.persist.append_incarnation(inc, first);
            let now = self.now_ms();
            let clock_ms = self.clock.last().physical_ms().max(now);
            self.persist.note_clock(clock_ms);
            if !self.persist.flush() {
                return Err(PersistError::Inconsistent(format!(
                    "{}: cannot write to the new log segment",
                    dir.display()
                )));
            }
        }
        tracing::info!(
            dir = %dir.display(),
            keys = self.key_count(),
            snapshot_keys = rec.keys_loaded,
            records = rec.records_replayed,
            ms = started.elapsed().as_millis() as u64,
            seq = self.seq,
            "data loaded"
        );
        Ok(())
    }

    /// SAVE: writes the live state as a snapshot now (the shard serves nothing meanwhile).
    pub fn save_now(&mut self) -> Result<(), String> {
        if self.persist.dir.as_os_str().is_empty() {
            return Err("no data directory".to_string());
        }
        self.persist.flush();
        let pos = self.persist.next_pos;
        let started = Instant::now();
        let dirty = self.stats.dirty;
        match snapshot::write(self, pos, &self.persist.dir) {
            Ok((_, bytes)) => {
                self.snapshot_done(pos, bytes, dirty, started, JobKind::Bgsave);
                Ok(())
            }
            Err(e) => {
                tracing::error!(error = %e, "SAVE failed");
                self.persist.stats.last_save_ok = false;
                Err(e.to_string())
            }
        }
    }

    /// The snapshot a stop writes, as Redis's `prepareForShutdown` does: when asked
    /// (`Some(true)`: SHUTDOWN SAVE) or, unless refused (`Some(false)`: NOSAVE), when the
    /// `save` policy is set, whatever stopped the process (SHUTDOWN, SIGTERM, SIGINT). With
    /// `appendonly no` it is what keeps the data across the restart. `Ok(false)`: none was
    /// due (or there is no data directory).
    pub fn final_snapshot(&mut self, save: Option<bool>) -> Result<bool, String> {
        let due = save.unwrap_or_else(|| !self.config.save.trim().is_empty());
        if !due || self.persist.dir.as_os_str().is_empty() {
            return Ok(false);
        }
        let _saving = crate::stop::FinalSave::begin();
        tracing::info!("Saving the final snapshot before exiting.");
        self.save_now()?;
        tracing::info!("DB saved on disk");
        Ok(true)
    }

    /// Starts the writer on a new segment at `pos`, after `segments` (the log's older
    /// segments, kept for recovery and peers until snapshots cover them).
    fn start_writer_at(
        &mut self,
        dir: &Path,
        pos: u64,
        mut segments: Vec<writer::SegmentInfo>,
    ) -> Result<(), PersistError> {
        let (file, path) =
            writer::create_segment(dir, self.replica, pos).map_err(|e| PersistError::io(dir, e))?;
        let bytes = super::record::SEGMENT_HEADER_BYTES as u64;
        segments.push(writer::SegmentInfo {
            first_pos: pos,
            end_pos: pos,
            path: path.clone(),
            bytes,
            own_first_seq: 0,
            own_last_seq: 0,
        });
        self.persist.stats.log_bytes_at_snapshot = segments.iter().map(|s| s.bytes).sum();
        let shared = Arc::new(WriterShared::default());
        shared.written_pos.store(pos, Ordering::Release);
        shared.durable_pos.store(pos, Ordering::Release);
        shared.durable_own_seq.store(self.seq, Ordering::Release);
        shared.state().segments = segments;
        let file = Arc::new(file);
        let setup = WriterSetup {
            dir: dir.to_path_buf(),
            watermark: self.config.debug_fsync_watermark,
            fsync: self.persist.fsync,
            period: if self.sync.peers.is_empty() {
                writer::FSYNC_PERIOD
            } else {
                writer::FSYNC_PERIOD_WITH_PEERS
            },
            file: file.clone(),
            path: path.clone(),
            bytes,
        };
        self.persist.replica = self.replica;
        self.persist.segment_bytes_max = self.config.log_segment_bytes_max;
        self.persist
            .start_writer(shared, setup, super::LogFile { file, path, bytes });
        Ok(())
    }

    /// CONFIG SET appendonly (Redis's `startAppendOnly` / `stopAppendOnly`), on this shard:
    /// `on` makes the log the AOF (fsynced by `appendfsync`, the value the command leaves);
    /// off, it stays for the `save` policy's snapshots when `policy` (the `save` the command
    /// leaves) is set, and stops otherwise. Starting a log this shard runs without writes the
    /// snapshot it continues from first, blocking the shard as SAVE does (Redis forks its AOF
    /// rewrite instead).
    pub fn set_appendonly(
        &mut self,
        on: bool,
        appendfsync: &str,
        policy: bool,
    ) -> Result<(), String> {
        if self.persist.dir.as_os_str().is_empty() {
            return Err("no data directory".to_string());
        }
        if self.persist.writer.is_none() {
            if on || policy {
                self.start_log_now()?;
            }
        } else if !on && !policy {
            self.stop_log_now()?;
        }
        self.persist.appendonly = on;
        self.persist.set_fsync(log_fsync(on, appendfsync));
        self.persist.flush();
        let log = if self.persist.writer.is_some() {
            "kept"
        } else {
            "stopped"
        };
        tracing::info!(appendonly = on, log, "appendonly changed");
        Ok(())
    }

    /// Starts the log while the shard runs: a new segment at the next position, the snapshot
    /// of the live state at that position (recovery replays the segment from it; the own ops
    /// before it are in it, so none waits to be written), and the life file's `log yes`.
    /// Segments older runs left stay, for the snapshot kept before it.
    fn start_log_now(&mut self) -> Result<(), String> {
        let dir = self.persist.dir.clone();
        let pos = self.persist.next_pos;
        let listing = recover::list(&dir).map_err(|e| e.to_string())?;
        let (mut old, at_pos): (Vec<_>, Vec<_>) =
            listing.segments.into_iter().partition(|(p, _)| *p < pos);
        // A segment an earlier run began at this position holds no record (recovery ended
        // here): the new one takes its name.
        for (_, path) in at_pos.into_iter().filter(|(p, _)| *p == pos) {
            let _ = std::fs::remove_file(path);
        }
        old.sort();
        let ends: Vec<u64> = old.iter().skip(1).map(|(p, _)| *p).chain([pos]).collect();
        let segments = old
            .into_iter()
            .zip(ends)
            .map(|((first_pos, path), end_pos)| writer::SegmentInfo {
                first_pos,
                end_pos,
                bytes: std::fs::metadata(&path).map_or(0, |m| m.len()),
                path,
                own_first_seq: 0,
                own_last_seq: 0,
            })
            .collect();
        self.persist.own_written_seq = self.seq;
        self.start_writer_at(&dir, pos, segments)
            .map_err(|e| e.to_string())?;
        let saved = self
            .save_now()
            .and_then(|()| life::write(&dir, &self.life_record(true)).map_err(|e| e.to_string()));
        if let Err(e) = saved {
            let path = self.persist.log.as_ref().map(|l| l.path.clone());
            self.persist.close();
            if let Some(path) = path {
                let _ = std::fs::remove_file(path);
            }
            return Err(e);
        }
        Ok(())
    }

    /// Stops the log while the shard runs: the life file says `log no` first (a restart
    /// after this run may have lost own ops that peers hold: it begins a new life), then the
    /// log is written, fsynced and closed. Its segments stay; recovery replays them up to
    /// here.
    fn stop_log_now(&mut self) -> Result<(), String> {
        life::write(&self.persist.dir, &self.life_record(false)).map_err(|e| e.to_string())?;
        self.persist.close();
        Ok(())
    }

    /// The life file this shard's current life and boot give, with `logged`.
    fn life_record(&self, logged: bool) -> life::LifeRecord {
        life::LifeRecord {
            life: self.sync.life,
            boot_id: life::boot_id(&self.config.debug_boot_id),
            logged,
        }
    }

    /// BGSAVE / BGREWRITEAOF / the automatic policy: starts a background snapshot.
    /// Replays this shard's snapshot and log up to now, as a start does, into a private
    /// shard on a thread of its own, and returns what `look` makes of it (DEBUG LOADAOF
    /// compares it with the data in memory). The shard waits for it, as for SAVE. Err: no
    /// log, a background snapshot running, or the replay failed.
    pub fn with_replayed<T: Send>(
        &mut self,
        look: impl FnOnce(&Shard) -> T + Send,
    ) -> Result<T, String> {
        if self.persist.job.is_some() {
            return Err("Background save already in progress".to_string());
        }
        if self.persist.writer.is_none() {
            return Err(
                "no op log (start with appendonly yes or a save policy, or CONFIG SET appendonly yes)"
                    .to_string(),
            );
        }
        // Everything logged so far in closed segments, as a background snapshot reads them.
        self.persist.rotate().map_err(|e| e.to_string())?;
        let upto = self.persist.next_pos;
        let dir = self.persist.dir.clone();
        let config = self.config.clone();
        let (index, life) = (self.index, self.sync.life);
        let slots = self.slots.clone();
        let memory = self.evict.job_share();
        std::thread::scope(|scope| {
            let replay = scope.spawn(move || {
                let part = Part {
                    count: 1,
                    index: 0,
                    hasher: std::hash::RandomState::new(),
                    bytes_max: u64::MAX,
                    buffer_bytes: 0,
                    over: false,
                };
                let source = (dir.as_path(), &config, index, &slots, life);
                let private = replay_part(source, upto, &memory, part)?
                    .ok_or_else(|| "the replay outgrew its budget".to_string())?;
                let out = look(&private);
                drop(private);
                memory.0.publish_job(memory.1, 0);
                Ok(out)
            });
            replay
                .join()
                .unwrap_or_else(|_| Err("the replay's thread panicked".to_string()))
        })
    }

    pub fn start_background_snapshot(&mut self, kind: JobKind) -> Result<(), String> {
        if self.persist.job.is_some() {
            return Err("in progress".to_string());
        }
        if self.persist.writer.is_none() {
            return Err("no op log (appendonly no and no save policy at start)".to_string());
        }
        // The snapshot covers the closed segments: everything before `upto`.
        self.persist.rotate().map_err(|e| e.to_string())?;
        let upto = self.persist.next_pos;
        let dir = self.persist.dir.clone();
        let config = self.config.clone();
        let index = self.index;
        let slots = self.slots.clone();
        let life = self.sync.life;
        let memory = self.evict.job_share();
        let handle = std::thread::Builder::new()
            .name("snapshot".to_string())
            .spawn(move || {
                let (process, at) = memory.clone();
                let result = background_snapshot(dir, config, index, slots, life, upto, memory);
                process.publish_job(at, 0);
                result
            })
            .map_err(|e| e.to_string())?;
        self.persist.job = Some(Job {
            kind,
            started: Instant::now(),
            upto,
            dirty_at_start: self.stats.dirty,
            handle,
        });
        Ok(())
    }

    /// Periodic: finishes a background snapshot that ended, starts one the policy or a
    /// scheduled request asks for.
    pub fn persistence_cycle(&mut self, now_ms: u64) {
        self.persist.tick();
        let clock_ms = self.clock.last().physical_ms().max(now_ms);
        self.persist.note_clock(clock_ms);
        if self
            .persist
            .job
            .as_ref()
            .is_some_and(|j| j.handle.is_finished())
        {
            if let Some(job) = self.persist.job.take() {
                let result = job
                    .handle
                    .join()
                    .unwrap_or_else(|_| Err("snapshot thread panicked".to_string()));
                match result {
                    Ok((_, bytes)) => self.snapshot_done(
                        job.upto,
                        bytes,
                        job.dirty_at_start,
                        job.started,
                        job.kind,
                    ),
                    Err(e) => {
                        tracing::error!(error = %e, "background snapshot failed");
                        let st = &mut self.persist.stats;
                        match job.kind {
                            JobKind::Bgsave => st.last_save_ok = false,
                            JobKind::Rewrite => {
                                st.last_rewrite_ok = false;
                                st.rewrite_failures_in_a_row += 1;
                            }
                        }
                    }
                }
            }
        }
        if self.persist.job.is_some() {
            return;
        }
        if self.persist.writer.is_none() {
            self.foreground_policy_snapshot(now_ms);
            return;
        }
        if self.persist.scheduled {
            self.persist.scheduled = false;
            let _ = self.start_background_snapshot(JobKind::Rewrite);
            return;
        }
        if let Some((changes, since_s)) = self.save_policy_due(now_ms) {
            tracing::info!(changes, seconds = since_s, "snapshot by the save policy");
            let _ = self.start_background_snapshot(JobKind::Bgsave);
            return;
        }
        let pct = self.config.auto_aof_rewrite_percentage;
        if pct > 0 {
            let log = self.persist.log_bytes();
            let base = self
                .persist
                .stats
                .snapshot_bytes
                .max(self.persist.stats.log_bytes_at_snapshot)
                .max(1);
            let grown = log.saturating_sub(self.persist.stats.log_bytes_at_snapshot);
            if log >= self.config.auto_aof_rewrite_min_size && grown * 100 >= base * pct {
                tracing::info!(
                    log_bytes = log,
                    "snapshot and log compaction by auto-aof-rewrite"
                );
                let _ = self.start_background_snapshot(JobKind::Rewrite);
            }
        }
    }

    /// `(changes, seconds since the last snapshot)` when the `save` policy asks for one: not
    /// within `POLICY_RETRY_S` of a policy snapshot that failed (Redis's
    /// `CONFIG_BGSAVE_RETRY_DELAY`), which would otherwise be tried again at every tick.
    fn save_policy_due(&mut self, now_ms: u64) -> Option<(u64, u64)> {
        let now_s = now_ms / 1000;
        if !self.persist.stats.last_save_ok
            && now_s < self.persist.stats.last_try_s.saturating_add(POLICY_RETRY_S)
        {
            return None;
        }
        let since_s = now_s.saturating_sub(self.persist.stats.last_save_s);
        let changes = self
            .stats
            .dirty
            .saturating_sub(self.persist.stats.dirty_at_save);
        let rules = crate::config::parse_save(&self.config.save).unwrap_or_default();
        let due = changes > 0
            && rules
                .iter()
                .any(|&(secs, n)| changes >= n && since_s >= secs);
        if due {
            self.persist.stats.last_try_s = now_s;
        }
        due.then_some((changes, since_s))
    }

    /// The `save` policy on a shard without the log (one set by CONFIG SET on a server
    /// started with `appendonly no` and `save ""`): the snapshot is written as SAVE writes it,
    /// blocking the shard meanwhile, rather than not at all. A restart with the policy in the
    /// configuration starts the log, and the policy's snapshots are built in the background.
    fn foreground_policy_snapshot(&mut self, now_ms: u64) {
        if self.persist.dir.as_os_str().is_empty() {
            return;
        }
        let Some((changes, since_s)) = self.save_policy_due(now_ms) else {
            return;
        };
        tracing::warn!(
            changes,
            seconds = since_s,
            "snapshot by the save policy, in the foreground: this server started without the op log (appendonly no, save \"\"), which background snapshots are built from"
        );
        let _ = self.save_now();
    }

    fn snapshot_done(&mut self, pos: u64, bytes: u64, dirty: u64, started: Instant, kind: JobKind) {
        let secs = started.elapsed().as_secs() as i64;
        {
            let st = &mut self.persist.stats;
            st.last_save_s = unix_s();
            st.dirty_at_save = dirty;
            st.snapshot_pos = pos;
            st.snapshot_bytes = bytes;
            match kind {
                JobKind::Bgsave => {
                    st.saves += 1;
                    st.last_save_ok = true;
                    st.last_save_secs = secs;
                }
                JobKind::Rewrite => {
                    st.rewrites += 1;
                    st.last_rewrite_ok = true;
                    st.rewrite_failures_in_a_row = 0;
                    st.last_rewrite_secs = secs;
                    st.saves += 1;
                    st.last_save_ok = true;
                }
            }
        }
        self.drop_unneeded_files();
        self.persist.stats.log_bytes_at_snapshot = self.persist.log_bytes();
        tracing::info!(pos, bytes, "snapshot written");
    }

    /// Deletes snapshots beyond the newest `SNAPSHOTS_KEPT`, and log segments that neither
    /// recovery (from the oldest snapshot kept) nor a peer still needs, or that exceed
    /// `backlog-disk-bytes-max` beyond what recovery needs.
    pub fn drop_unneeded_files(&mut self) {
        let Ok(listing) = recover::list(&self.persist.dir) else {
            return;
        };
        let mut snaps = listing.snapshots;
        snaps.sort();
        let keep_from = snaps.len().saturating_sub(SNAPSHOTS_KEPT);
        for (_, path) in snaps.iter().take(keep_from) {
            let _ = std::fs::remove_file(path);
        }
        let Some(recovery_pos) = snaps.get(keep_from).map(|(p, _)| *p) else {
            return;
        };
        let Some(w) = self.persist.writer.clone() else {
            return;
        };
        // Own sequence numbers some peer still needs (none known yet: keep within budget).
        let peer_needs: Option<u64> = if self.sync.peers.is_empty() {
            None
        } else if self.sync.peers.iter().any(|p| p.acked_seq == 0) {
            Some(0)
        } else {
            self.sync.peers.iter().map(|p| p.acked_seq + 1).min()
        };
        let mut st = w.state();
        let budget = self.config.backlog_disk_bytes_max;
        let count = st.segments.len();
        let mut extra: u64 = st
            .segments
            .iter()
            .take(count.saturating_sub(1))
            .filter(|s| s.end_pos <= recovery_pos)
            .map(|s| s.bytes)
            .sum();
        let mut removed = 0usize;
        for s in st.segments.iter().take(count.saturating_sub(1)) {
            if s.end_pos > recovery_pos {
                break;
            }
            let needed =
                peer_needs.is_some_and(|need| s.own_first_seq > 0 && s.own_last_seq >= need);
            if needed && extra <= budget {
                break;
            }
            if std::fs::remove_file(&s.path).is_ok() || !s.path.exists() {
                extra = extra.saturating_sub(s.bytes);
                removed += 1;
            } else {
                break;
            }
        }
        st.segments.drain(..removed);
        drop(st);
        if removed > 0 {
            let _ = writer::sync_dir(&self.persist.dir);
        }
    }
}

/// The background snapshot thread: replays the closed segments into a private shard, a
/// part of the keys at a time (module docs), and writes each part into the snapshot.
fn background_snapshot(
    dir: PathBuf,
    config: crate::config::Config,
    index: u16,
    slots: std::sync::Arc<crate::slot::SlotMap>,
    life: u32,
    upto: u64,
    memory: (std::sync::Arc<crate::evict::ProcessMemory>, usize),
) -> Result<(PathBuf, u64), String> {
    let budget = (part_bytes_max(&config), SNAPSHOT_PARTS_MAX);
    let source = (dir.as_path(), &config, index, &slots, life);
    snapshot_in_parts(source, upto, &memory, budget).map(|(path, bytes, _)| (path, bytes))
}

/// Where a background snapshot replays from: the shard's directory and configuration, its
/// index, slots and life.
type SnapshotSource<'a> = (
    &'a Path,
    &'a crate::config::Config,
    u16,
    &'a std::sync::Arc<crate::slot::SlotMap>,
    u32,
);

/// `background_snapshot` with its budget `(bytes_max, parts_max)`: returns the path, the
/// size and the parts the keys were replayed in.
pub(super) fn snapshot_in_parts(
    (dir, config, index, slots, life): SnapshotSource<'_>,
    upto: u64,
    memory: &(std::sync::Arc<crate::evict::ProcessMemory>, usize),
    (bytes_max, parts_max): (u64, u64),
) -> Result<(PathBuf, u64, u64), String> {
    let hasher = std::hash::RandomState::new();
    let mut count = 1u64;
    loop {
        let mut out = snapshot::SnapshotWriter::create(dir, upto).map_err(|e| e.to_string())?;
        let mut outgrown = false;
        for index_in in 0..count {
            let part = Part {
                count,
                index: index_in,
                hasher: hasher.clone(),
                bytes_max: if count >= parts_max {
                    u64::MAX
                } else {
                    bytes_max
                },
                buffer_bytes: 0,
                over: false,
            };
            let replayed = replay_part((dir, config, index, slots, life), upto, memory, part);
            let private = match replayed {
                Ok(Some(private)) => private,
                Ok(None) => {
                    outgrown = true;
                    break;
                }
                Err(e) => {
                    out.abandon();
                    return Err(e);
                }
            };
            let written = write_part(&mut out, &private, upto, index_in == 0);
            drop(private);
            memory.0.publish_job(memory.1, 0);
            if let Err(e) = written {
                out.abandon();
                return Err(e);
            }
        }
        if !outgrown {
            let (path, bytes) = out.finish().map_err(|e| e.to_string())?;
            return Ok((path, bytes, count));
        }
        out.abandon();
        count = (count * 2).min(parts_max);
        tracing::info!(
            parts = count,
            bytes_max,
            "background snapshot: a part outgrew snapshot-memory-bytes-max; starting again in more parts"
        );
    }
}

/// Replays the keys of `part` into a private shard: None when it outgrew its budget.
fn replay_part(
    (dir, config, index, slots, life): SnapshotSource<'_>,
    upto: u64,
    memory: &(std::sync::Arc<crate::evict::ProcessMemory>, usize),
    part: Part,
) -> Result<Option<Shard>, String> {
    let now = crate::time::wall_ms();
    let mut private = Shard::in_site(index, slots.clone(), config.clone(), now);
    // What the private shard holds is reported apart from user data (`maxmemory`).
    private.evict.as_job(memory.0.clone(), memory.1);
    private.set_life(life);
    private.persist.recovering = true;
    private.persist.part = Some(part);
    private.sync.incarnations.clear();
    match recover::recover(&mut private, dir, Purpose::Snapshot { upto }) {
        Ok(_) => Ok(Some(private)),
        Err(_) if private.persist.part.as_ref().is_some_and(|p| p.over) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Writes one part's keys into `out`; the first part writes the header and the libraries
/// too, and every later part must reach the same header (every pass replays the same
/// records; only the keys kept differ).
fn write_part(
    out: &mut snapshot::SnapshotWriter,
    private: &Shard,
    upto: u64,
    first: bool,
) -> Result<(), String> {
    let meta = snapshot::SnapshotMeta::of(private, upto);
    if first {
        out.header(&meta).map_err(|e| e.to_string())?;
        out.libraries_of(private).map_err(|e| e.to_string())?;
    } else if out.meta().is_some_and(|m| {
        snapshot::SnapshotMeta {
            keys: m.keys,
            ..meta.clone()
        } != *m
    }) {
        return Err("background snapshot: two parts' replays reached different headers".into());
    }
    out.keys_of(private).map_err(|e| e.to_string())
}

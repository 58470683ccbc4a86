//! Shard statistics, the slow log and the latency monitor.
//!
//! Plain per-shard fields incremented on the hot path (`u64 += 1`, no atomics); INFO reads
//! them on the same thread.

use std::collections::{BTreeMap, VecDeque};

/// The `q` quantile (0..=1) of `samples` by the nearest rank (0 when there are none): the
/// lag and fsync percentiles INFO shows over their last few samples.
pub fn quantile(samples: impl Iterator<Item = u64>, q: f64) -> u64 {
    let mut v: Vec<u64> = samples.collect();
    v.sort_unstable();
    let i = (v.len().saturating_sub(1) as f64 * q).round() as usize;
    v.get(i).copied().unwrap_or(0)
}

/// Per-command counters (INFO commandstats).
#[derive(Debug, Clone, Default)]
pub struct CmdStat {
    pub calls: u64,
    pub usec: u64,
    pub rejected_calls: u64,
    pub failed_calls: u64,
    /// Latencies of the calls while `latency-tracking` is on (LATENCY HISTOGRAM, INFO
    /// latencystats); allocated at the first one, as Redis does.
    pub latency: Option<Box<LatencyHistogram>>,
}

/// A histogram of latencies in nanoseconds with the resolution of Redis's (hdr_histogram,
/// 2 significant digits, 1 ns to 1 s): every value below 256 has its own bucket, and each
/// power of two above it is split into 128 buckets. Values outside the range are clamped to
/// it, as Redis clamps them.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    counts: Box<[u64; LATENCY_BUCKETS]>,
    total: u64,
}

/// Smallest and largest latency recorded, in nanoseconds (Redis's
/// `LATENCY_HISTOGRAM_MIN_VALUE`, `LATENCY_HISTOGRAM_MAX_VALUE`).
pub const LATENCY_NS_MIN: u64 = 1;
pub const LATENCY_NS_MAX: u64 = 1_000_000_000;
/// Buckets: 256 exact ones, then 128 per power of two from 2^8 to 2^29 (1 s < 2^30).
const LATENCY_BUCKETS: usize = 256 + 22 * 128;

impl Default for LatencyHistogram {
    fn default() -> Self {
        LatencyHistogram {
            counts: Box::new([0; LATENCY_BUCKETS]),
            total: 0,
        }
    }
}

impl LatencyHistogram {
    /// The bucket of `ns` (already clamped).
    fn index(ns: u64) -> usize {
        if ns < 256 {
            return ns as usize;
        }
        let e = 63 - ns.leading_zeros() as usize; // 8..=29
        let sub = (ns >> (e - 7)) as usize; // 128..=255
        256 + (e - 8) * 128 + (sub - 128)
    }

    /// The highest value that falls in bucket `i` (hdr's `highest_equivalent_value`).
    fn highest(i: usize) -> u64 {
        if i < 256 {
            return i as u64;
        }
        let e = 8 + (i - 256) / 128;
        let sub = 128 + (i - 256) % 128;
        let low = (sub as u64) << (e - 7);
        low + (1u64 << (e - 7)) - 1
    }

    pub fn record(&mut self, ns: u64) {
        let ns = ns.clamp(LATENCY_NS_MIN, LATENCY_NS_MAX);
        if let Some(c) = self.counts.get_mut(Self::index(ns)) {
            *c += 1;
            self.total += 1;
        }
    }

    pub fn total(&self) -> u64 {
        self.total
    }

    /// hdr's `hdr_value_at_percentile`: the highest value of the bucket holding the
    /// `percentile`-th value, in nanoseconds (0 when empty).
    pub fn value_at_percentile(&self, percentile: f64) -> u64 {
        let wanted = ((percentile.clamp(0.0, 100.0) / 100.0) * self.total as f64 + 0.5) as u64;
        let wanted = wanted.max(1);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= wanted {
                return Self::highest(i);
            }
        }
        0
    }

    /// The cumulative distribution LATENCY HISTOGRAM replies (Redis's `fillCommandCDF` over
    /// hdr's logarithmic iterator from 1024 ns by powers of two): (microseconds, calls at or
    /// below), only where the count grows.
    pub fn cdf(&self) -> Vec<(u64, u64)> {
        let mut out = Vec::new();
        let (mut level, mut idx, mut seen, mut previous) = (1024u64, 0usize, 0u64, 0u64);
        while seen < self.total && level <= 2 * LATENCY_NS_MAX {
            let upto = Self::index(level.min(LATENCY_NS_MAX));
            while idx <= upto {
                seen += self.counts.get(idx).copied().unwrap_or(0);
                idx += 1;
            }
            if seen > previous {
                // hdr's highest equivalent value of the level: its bucket is 1/128 of it wide.
                out.push(((level + level / 128 - 1) / 1000, seen));
            }
            previous = seen;
            level *= 2;
        }
        out
    }
}

/// Counters of one shard.
#[derive(Debug, Default)]
pub struct Stats {
    pub total_connections_received: u64,
    pub rejected_connections: u64,
    pub total_commands_processed: u64,
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub expired_keys: u64,
    /// Keys dropped here by `maxmemory-policy` (INFO stats `evicted_keys`).
    pub evicted_keys: u64,
    /// Writes to keys this shard evicted that were not materialised here (they carried a
    /// change, not the whole value: INFO crdt `crdt_evicted_writes_not_applied`).
    pub evicted_writes_not_applied: u64,
    /// Eviction candidates passed over because some peer had not yet delivered all they
    /// held (INFO crdt `crdt_evictions_held_back`, docs/conflicts.md §18).
    pub evictions_held_back: u64,
    pub expired_stale_perc: f64,
    pub expire_cycle_cpu_milliseconds: u64,
    /// Writes since start (Redis `rdb_changes_since_last_save` analogue).
    pub dirty: u64,
    pub total_error_replies: u64,
    /// Per error code ("ERR", "WRONGTYPE"...): count (INFO errorstats).
    pub errors: BTreeMap<String, u64>,
    /// Indexed like `Table::specs`.
    pub commands: Vec<CmdStat>,
    /// Concurrent writes of different types to one key (INFO crdt `crdt_type_conflicts`).
    pub type_conflicts: u64,
    /// Remote ops applied (INFO crdt).
    pub sync_ops_applied: u64,
    /// Remote writes that lost on arrival (to a newer write, last writer wins, or to a
    /// removal already applied), by `EFFECT_KIND_NAMES` (`/metrics`).
    pub remote_lost: [u64; EFFECT_KINDS],
    /// Ops per second over the last sample window (INFO stats `instantaneous_ops_per_sec`).
    pub ops_sample: OpsSampler,
    /// Highest `used_memory` seen (INFO memory `used_memory_peak`); raised by `note_memory`.
    pub used_memory_peak: u64,
    /// Bytes allocated when the shard was built (MEMORY STATS `startup.allocated`); kept by
    /// `reset`.
    pub used_memory_startup: u64,
    /// DEBUG SET-ACTIVE-EXPIRE 0 turns the active expiry cycle off (tests); kept by `reset`.
    pub active_expire_disabled: bool,
    /// DEBUG PAUSE-CRON 1 skips the shard's periodic cycle (Redis's `pause_cron`: expiry,
    /// eviction, tracking limits, GC, the save policy, client timeouts; the log and the
    /// replication links go on); kept by `reset`.
    pub cron_paused: bool,
    /// DEBUG SET-SKIP-CHECKSUM-VALIDATION 1: RESTORE does not check a payload's CRC-64
    /// (Redis's `skip_checksum_validation`); kept by `reset`.
    pub skip_checksum_validation: bool,
    /// When the cross-protocol warning was last logged (unix seconds), so it is logged at most
    /// once a minute.
    pub security_warning_s: u64,
    /// RESTORE payload containers validated entry by entry (INFO stats
    /// `dump_payload_sanitizations`; Meridian always sanitizes deeply).
    pub dump_payload_sanitizations: u64,
}

impl Stats {
    pub fn new(n_commands: usize) -> Stats {
        Stats {
            commands: vec![CmdStat::default(); n_commands],
            ..Stats::default()
        }
    }

    /// Counts an error reply under its code.
    pub fn count_error(&mut self, code: &str) {
        self.total_error_replies += 1;
        if let Some(n) = self.errors.get_mut(code) {
            *n += 1;
        } else if self.errors.len() < ERROR_CODES_MAX {
            self.errors.insert(code.to_string(), 1);
        }
    }

    /// CONFIG RESETSTAT: clears every counter, as Redis's `resetServerStats` plus the
    /// command and error tables. Kept: `dirty` (Redis keeps `server.dirty`, INFO
    /// `rdb_changes_since_last_save`) and the DEBUG flag.
    pub fn reset(&mut self) {
        let n = self.commands.len();
        let dirty = self.dirty;
        let active_expire_disabled = self.active_expire_disabled;
        let cron_paused = self.cron_paused;
        let skip_checksum_validation = self.skip_checksum_validation;
        let startup = self.used_memory_startup;
        *self = Stats::new(n);
        self.dirty = dirty;
        self.active_expire_disabled = active_expire_disabled;
        self.cron_paused = cron_paused;
        self.skip_checksum_validation = skip_checksum_validation;
        self.used_memory_startup = startup;
    }

    /// Records the current memory use for the peak (Redis updates it in cron and in INFO).
    pub fn note_memory(&mut self, used: u64) {
        self.used_memory_peak = self.used_memory_peak.max(used);
    }
}

/// Kinds of writes, as `/metrics` labels them (`effect_kind`).
pub const EFFECT_KINDS: usize = 9;
pub const EFFECT_KIND_NAMES: [&str; EFFECT_KINDS] = [
    "string",
    "del",
    "expire",
    "set",
    "hash",
    "zset",
    "list",
    "hyperloglog",
    "stream",
];

/// The index in `EFFECT_KIND_NAMES` of an effect's kind.
pub fn effect_kind<B: AsRef<[u8]>>(effect: &meridian_crdt::Effect<B>) -> usize {
    use meridian_crdt::Effect;
    match effect {
        Effect::Assign { .. } | Effect::Incr { .. } | Effect::StrEdit(_) => 0,
        Effect::Remove { .. } => 1,
        Effect::Expire { .. } | Effect::ExpireRetire { .. } => 2,
        Effect::SetAdd { .. } | Effect::SetRem { .. } => 3,
        Effect::Hash(_) => 4,
        Effect::ZSet(_) => 5,
        Effect::List(_) => 6,
        Effect::Hll(_) => 7,
        Effect::Stream(_) => 8,
    }
}

/// Most distinct error codes tracked, as Redis's `ERROR_STATS_NUMBER`.
pub const ERROR_CODES_MAX: usize = 128;

/// A moving sample of commands per second, like Redis's `trackInstantaneousMetric`.
#[derive(Debug, Default, Clone)]
pub struct OpsSampler {
    samples: VecDeque<u64>,
    last_ms: u64,
    last_count: u64,
}

/// Samples kept for `instantaneous_ops_per_sec` (Redis: 16).
pub const OPS_SAMPLES_MAX: usize = 16;

impl OpsSampler {
    /// Records the command count at `now_ms` (called from the periodic timer).
    pub fn sample(&mut self, now_ms: u64, total_commands: u64) {
        if self.last_ms != 0 && now_ms > self.last_ms {
            let ops = (total_commands - self.last_count) * 1000 / (now_ms - self.last_ms);
            if self.samples.len() == OPS_SAMPLES_MAX {
                self.samples.pop_front();
            }
            self.samples.push_back(ops);
        }
        self.last_ms = now_ms;
        self.last_count = total_commands;
    }

    pub fn per_sec(&self) -> u64 {
        if self.samples.is_empty() {
            0
        } else {
            self.samples.iter().sum::<u64>() / self.samples.len() as u64
        }
    }
}

/// One slow log entry.
#[derive(Debug, Clone)]
pub struct SlowEntry {
    pub id: u64,
    pub time_s: u64,
    pub duration_us: u64,
    /// Arguments, at most `SLOWLOG_ARGC_MAX` of them, each cut to `SLOWLOG_ARG_BYTES_MAX`.
    pub args: Vec<Vec<u8>>,
    pub peer: String,
    pub name: String,
}

/// Redis keeps at most 32 arguments of a slow command, each at most 128 bytes.
pub const SLOWLOG_ARGC_MAX: usize = 32;
pub const SLOWLOG_ARG_BYTES_MAX: usize = 128;

/// The slow log (SLOWLOG GET/LEN/RESET).
#[derive(Debug, Clone, Default)]
pub struct SlowLog {
    pub entries: VecDeque<SlowEntry>,
    pub next_id: u64,
    pub len_max: u64,
}

impl SlowLog {
    pub fn new(len_max: u64) -> SlowLog {
        SlowLog {
            entries: VecDeque::new(),
            next_id: 0,
            len_max,
        }
    }

    /// Records a command that took `duration_us`, with Redis's argument truncation.
    pub fn push(
        &mut self,
        time_s: u64,
        duration_us: u64,
        argv: &[&[u8]],
        peer: String,
        name: String,
    ) {
        let mut args: Vec<Vec<u8>> = Vec::new();
        let shown = argv.len().min(SLOWLOG_ARGC_MAX);
        for (i, a) in argv.iter().take(shown).enumerate() {
            if i == SLOWLOG_ARGC_MAX - 1 && argv.len() > SLOWLOG_ARGC_MAX {
                args.push(
                    format!("... ({} more arguments)", argv.len() - SLOWLOG_ARGC_MAX + 1)
                        .into_bytes(),
                );
                break;
            }
            if a.len() > SLOWLOG_ARG_BYTES_MAX {
                let mut v = a.get(..SLOWLOG_ARG_BYTES_MAX).unwrap_or(a).to_vec();
                v.extend_from_slice(
                    format!("... ({} more bytes)", a.len() - SLOWLOG_ARG_BYTES_MAX).as_bytes(),
                );
                args.push(v);
            } else {
                args.push(a.to_vec());
            }
        }
        self.entries.push_front(SlowEntry {
            id: self.next_id,
            time_s,
            duration_us,
            args,
            peer,
            name,
        });
        self.next_id += 1;
        self.trim();
    }

    pub fn trim(&mut self) {
        while self.entries.len() as u64 > self.len_max {
            self.entries.pop_back();
        }
    }
}

/// Latency events (LATENCY LATEST/HISTORY/RESET): per event, the latest and the history.
#[derive(Debug, Clone, Default)]
pub struct LatencyMonitor {
    pub events: BTreeMap<String, LatencyEvent>,
}

/// Samples kept per event (Redis: 160).
pub const LATENCY_SAMPLES_MAX: usize = 160;

#[derive(Debug, Clone, Default)]
pub struct LatencyEvent {
    /// (unix seconds, milliseconds) samples, oldest first.
    pub samples: VecDeque<(u64, u64)>,
    pub max_ms: u64,
}

impl LatencyMonitor {
    /// Records `ms` for `event` at `time_s` when it reaches `threshold_ms` (0: monitor off).
    pub fn record(&mut self, event: &str, time_s: u64, ms: u64, threshold_ms: u64) {
        if threshold_ms == 0 || ms < threshold_ms {
            return;
        }
        let e = self.events.entry(event.to_string()).or_default();
        if let Some(last) = e.samples.back_mut() {
            if last.0 == time_s {
                last.1 = last.1.max(ms);
                e.max_ms = e.max_ms.max(ms);
                return;
            }
        }
        if e.samples.len() == LATENCY_SAMPLES_MAX {
            e.samples.pop_front();
        }
        e.samples.push_back((time_s, ms));
        e.max_ms = e.max_ms.max(ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slowlog_truncates_like_redis() {
        let mut s = SlowLog::new(2);
        let big = vec![b'x'; 130];
        let many: Vec<&[u8]> = (0..40).map(|_| &b"a"[..]).collect();
        s.push(1, 10, &[b"set", &big], String::new(), String::new());
        assert_eq!(s.entries[0].args[1].len(), 128 + "... (2 more bytes)".len());
        s.push(1, 10, &many, String::new(), String::new());
        assert_eq!(s.entries[0].args.len(), 32);
        assert_eq!(s.entries[0].args[31], b"... (9 more arguments)");
        s.push(1, 10, &[b"x"], String::new(), String::new());
        assert_eq!(s.entries.len(), 2, "len_max is kept");
    }
}

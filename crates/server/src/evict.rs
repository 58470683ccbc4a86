//! Eviction under `maxmemory` (Redis's `evict.c`), a local decision of each site.
//!
//! **Used memory** is the process's: jemalloc's `stats.allocated` less what the thread
//! caches hold (`alloc::allocated_live`: what the process has allocated and not freed) less the bytes of every shard's op log (the replication backlog,
//! which Redis leaves out too: `mem_not_counted_for_evict`). The limit is the process's, not a
//! fixed share per shard: a fixed share would refuse writes on a shard holding more than its
//! share of the data (uneven slots, hot keys) while others have room. The allocator's figure
//! is read at most once per `ALLOCATED_AGE_MS_MAX`, by whichever shard needs it first, for
//! every shard (`Reading`, a sequence lock: no shard waits on another); in between, each adds
//! what every shard's thread allocated and freed since (jemalloc's per-thread counters, which
//! each shard publishes through `ProcessMemory` when it reads used memory and when it hands
//! another shard a batch: one relaxed atomic store, and a relaxed load per shard; each
//! counted from its first figure after the reading, as an older one may be stale); the other
//! shards' op log sizes are published there too. So every shard sees the same figure, give or
//! take the commands running at that moment, and the shard a write lands on is the one that
//! evicts for it: a shard whose own reading ran high would otherwise do the others' evicting
//! and lose its recently used keys while they kept older ones. No shard takes another's lock.
//!
//! **Eviction** drops keys of the shard that runs the command, until the process is under
//! the limit as this shard sees it, or until this shard's thread has freed as much as the
//! process was over when the pass began (the rest is other threads' growth, which their
//! shards answer with their own keys; a shard that went on would empty itself for them): the key's entry leaves the table with no effect and no
//! op, so other sites keep it; a local record in the shard's log (`Kind::Evicted`) makes a
//! restart or a snapshot, which replay the log, drop it again (docs/conflicts.md, "Eviction"). Candidates
//! come from Redis's sampling: `maxmemory-samples` keys of each database, the best kept in a
//! pool of `POOL_KEYS_MAX`, by idle time (LRU), frequency (LFU) or expiry (TTL); or a random
//! key. Entries holding only removal metadata are not keys and are never evicted.
//!
//! **Only what every peer holds.** A shard with peers evicts a candidate only if every peer
//! still in the deployment (quarantined ones included) has said, in its latest ack, that it
//! delivered every write and removal the key holds (`Shard::held_everywhere_vv`). Another key
//! may carry a write no other site has yet; a full sync from here (a peer behind the backlog,
//! or rejoining after a quarantine) no longer carries it once evicted, so it would be lost at
//! every site. Such candidates are passed over (INFO crdt `crdt_evictions_held_back`); a shard
//! whose candidates all are answers -OOM until acks move (`HELD_BACK_RETRY_MS` between
//! samples while they do not), as Redis Enterprise's Active-Active eviction waits for its
//! writes to reach every participating cluster.
//!
//! **Evicted marks.** A shard with peers remembers each key it evicted (`Eviction::evicted`:
//! database, key, and what the key had seen, its `KeyState::observed`), until a write brings
//! the whole key back. The marks make eviction a *miss*, never a partial value or a removal
//! elsewhere (docs/conflicts.md §18): a complete full sync names them, so that the receiver
//! keeps its copies (it would otherwise take them for removed here); a peer's op that carries
//! a change (INCR, SADD, HSET...) to a marked key is not materialised here (it would rebuild
//! only that change); an op that removes everything the mark covers (a SET or DEL that had
//! seen it) brings the key back whole; a local write to a marked key first removes, at every
//! site, what this site had seen of it (it writes the key whole, as the write would after an
//! eviction in Redis). The marks are memory the allocator counts (so eviction makes room for
//! them too), are rebuilt by replaying the log's `Evicted` records, and are written into
//! snapshots.

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};

use meridian_crdt::{
    Delta, Effect, IncAt, IncTotals, KeyState, Observed, ReplicaId, SmallBytes, Stamp,
    VersionVector,
};
use smallvec::SmallVec;

use crate::keyspace::{LFU_INIT_VAL, Mark, NEW_ENTRY, lfu_decayed, lfu_minutes, lru_clock};
use crate::shard::Shard;

/// Redis's `EVPOOL_SIZE`: candidates kept between evictions.
pub const POOL_KEYS_MAX: usize = 16;
/// Times one eviction refills the pool when every candidate in it is gone.
const POOL_REFILLS_MAX: usize = 4;
/// Buckets a sample may walk per key it asks for (Redis's `dictGetSomeKeys` walks 10; the
/// tables here do not shrink after mass evictions, so a little more).
const SAMPLE_BUCKETS_PER_KEY_MAX: usize = 32;
/// Random starts one sample may try when its windows find no key.
const SAMPLE_STARTS_MAX: usize = 8;
/// Buckets a sample walks on, from its last start, when every window was empty.
const SAMPLE_SPARSE_WALK_BUCKETS: usize = 1 << 16;
/// Buckets one TTL-mark search covers (`KeyTable::next_marked` reads 64 marks a word).
const SAMPLE_TTL_SPAN_BUCKETS: usize = 4096;
/// Evictions between two readings of the clock against the tenacity limit (Redis: 16).
const TIME_CHECK_KEYS: u32 = 16;
/// Keys or records a snapshot's private shard loads between two reports of its memory.
const JOB_REPORT_RECORDS: u64 = 4096;
/// How old the allocator's figure may be, in milliseconds, before a shard reads it again
/// (reading it merges every arena's statistics: at 1 ms it took a sixth of a shard's time
/// under a write load past the limit). In between, every shard thread's own allocations are
/// counted from their published counters (`ProcessMemory::nets`); the reading brings in what
/// other threads (lazyfree, log writers) allocated and freed.
pub const ALLOCATED_AGE_MS_MAX: u64 = 100;
/// How long (ms) a shard whose eviction pass found only keys some peer lacks answers
/// -OOM without sampling again, while no peer's ack moves (`Eviction::held_back_at`).
pub const HELD_BACK_RETRY_MS: u64 = 100;
/// How long (ms) connections stop asking every shard to make room after a round in which
/// none could get the process under its limit (`ProcessMemory::room_futile_until_ms`).
pub const ROOM_FUTILE_RETRY_MS: u64 = 10;
/// The log says a site over its limit is applying its peers' ops at most this often.
pub const OVER_LIMIT_LOG_INTERVAL_MS: u64 = 10_000;

/// `maxmemory-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    NoEviction,
    AllkeysLru,
    AllkeysLfu,
    AllkeysRandom,
    VolatileLru,
    VolatileLfu,
    VolatileRandom,
    VolatileTtl,
}

impl Policy {
    pub fn parse(name: &str) -> Option<Policy> {
        Some(match name {
            "noeviction" => Policy::NoEviction,
            "allkeys-lru" => Policy::AllkeysLru,
            "allkeys-lfu" => Policy::AllkeysLfu,
            "allkeys-random" => Policy::AllkeysRandom,
            "volatile-lru" => Policy::VolatileLru,
            "volatile-lfu" => Policy::VolatileLfu,
            "volatile-random" => Policy::VolatileRandom,
            "volatile-ttl" => Policy::VolatileTtl,
            _ => return None,
        })
    }

    /// Whether only keys with a TTL may go.
    fn volatile(self) -> bool {
        matches!(
            self,
            Policy::VolatileLru
                | Policy::VolatileLfu
                | Policy::VolatileRandom
                | Policy::VolatileTtl
        )
    }

    fn random(self) -> bool {
        matches!(self, Policy::AllkeysRandom | Policy::VolatileRandom)
    }
}

/// What `Shard::perform_evictions` achieved (Redis's `EVICT_OK/RUNNING/FAIL`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Under the limit (or no limit).
    Ok,
    /// Still over, but the tenacity time ran out while keys were being evicted, or this
    /// shard freed as much as the process was over when the pass began (the rest is other
    /// shards' to free): the command runs, and the periodic cycle goes on evicting.
    Running,
    /// Over the limit and nothing (more) may be evicted: writes get -OOM.
    Fail,
}

/// Redis's `evictionTimeLimitUs`: microseconds one command may evict; `None`: no limit.
pub fn time_limit_us(tenacity: u64) -> Option<u64> {
    if tenacity <= 10 {
        return Some(50 * tenacity);
    }
    if tenacity < 100 {
        return Some((500.0 * 1.15f64.powf(tenacity as f64 - 10.0)) as u64);
    }
    None
}

/// What the shards of one process share for the used-memory figure: each shard's bytes that
/// do not count (its op log).
#[derive(Debug)]
pub struct ProcessMemory {
    /// Per shard: its op log.
    not_counted: Vec<AtomicU64>,
    /// Per shard: its thread's bytes allocated less those freed (jemalloc's per-thread
    /// counters), as of its last reading of used memory or its last batch handed to another
    /// shard (`publish_thread_net`). A line each: a shard stores its own on every batch it
    /// forwards, and another reads it only past a limit.
    nets: Vec<PaddedNet>,
    /// Per shard: the private shard of its background snapshot, while one runs (Redis's
    /// fork costs no allocated memory; this replay does).
    jobs: Vec<AtomicU64>,
    /// Some shard saw the process over `maxmemory` (after a client's write, or before a
    /// command) and none has seen it under since. With several shards a connection then
    /// asks each shard in turn to evict before its next command (`conn::Conn::make_room`):
    /// the shard that runs the command may hold nothing evictable while another does, and
    /// Redis, one keyspace, evicts before every command.
    over: AtomicBool,
    /// Until when (ms) asking every shard is not worth it: the last round left the process
    /// over (every shard out of candidates, or holding them back for peers).
    room_futile_until_ms: AtomicU64,
    /// Per shard: at its last eviction pass it held keys the policy evicts and the pass did
    /// not fail (it found the process under, or evicted). While another shard's is set, a shard with nothing to evict runs a
    /// command that may use memory rather than refuse it (`Shard::oom_refuses`).
    evictable: Vec<AtomicBool>,
    /// The last reading of the allocator (`Shard::used_memory_counted`).
    reading: Reading,
    /// Rounds of `conn::Conn::make_room` begun: each starts at the next shard, so that the
    /// shard asked first (which frees the whole excess when it can) is not always the same
    /// one, and every shard's oldest keys go before another's younger ones.
    room_rounds: AtomicUsize,
}

/// The allocator's figure, read by one shard for every shard of the process, and per shard
/// the base its net allocation counts from since (`nets_since`): a sequence lock (`seq` odd
/// while a shard writes it; readers retry, a bounded number of times, and never wait on a
/// lock).
#[derive(Debug)]
struct Reading {
    seq: AtomicU64,
    allocated: AtomicU64,
    /// When (ms, the reading shard's clock; 0: never).
    at_ms: AtomicU64,
    nets: Vec<AtomicI64>,
}

/// How many times a shard reads `Reading` again when a write raced it, before taking what
/// it read (a figure off by what one command allocated, for one decision).
const READING_RETRIES_MAX: u32 = 64;

/// A shard's net allocation before it first published one, and its base in `Reading` until
/// its first figure after the reading.
const NET_UNPUBLISHED: i64 = i64::MIN;

/// One shard's published net allocation, alone on its cache line: its shard stores it on
/// every batch it forwards, which must not make the other shards' lines bounce.
#[derive(Debug)]
#[repr(align(128))]
struct PaddedNet(AtomicI64);

impl ProcessMemory {
    pub fn new(shards: usize) -> Arc<ProcessMemory> {
        Arc::new(ProcessMemory {
            not_counted: (0..shards.max(1)).map(|_| AtomicU64::new(0)).collect(),
            nets: (0..shards.max(1))
                .map(|_| PaddedNet(AtomicI64::new(NET_UNPUBLISHED)))
                .collect(),
            jobs: (0..shards.max(1)).map(|_| AtomicU64::new(0)).collect(),
            over: AtomicBool::new(false),
            room_futile_until_ms: AtomicU64::new(0),
            evictable: (0..shards.max(1)).map(|_| AtomicBool::new(true)).collect(),
            room_rounds: AtomicUsize::new(0),
            reading: Reading {
                seq: AtomicU64::new(0),
                allocated: AtomicU64::new(0),
                at_ms: AtomicU64::new(0),
                nets: (0..shards.max(1))
                    .map(|_| AtomicI64::new(NET_UNPUBLISHED))
                    .collect(),
            },
        })
    }

    /// Records whether a shard found the process over its limit (a store only on change).
    fn note_over(&self, over: bool) {
        if self.over.load(Ordering::Relaxed) != over {
            self.over.store(over, Ordering::Release);
        }
    }

    /// Whether a connection should ask every shard to evict before its next command: some
    /// shard saw the process over and the last such round, if recent, did not prove futile.
    pub fn room_wanted(&self, now_ms: u64) -> bool {
        self.over.load(Ordering::Acquire)
            && now_ms >= self.room_futile_until_ms.load(Ordering::Relaxed)
    }

    /// A round of eviction on every shard left the process over: none for a while.
    pub fn note_room_futile(&self, now_ms: u64) {
        self.room_futile_until_ms.store(
            now_ms.saturating_add(ROOM_FUTILE_RETRY_MS),
            Ordering::Relaxed,
        );
    }

    fn shards(&self) -> usize {
        self.not_counted.len()
    }

    /// A number that grows by one per round of asking every shard to make room: the round
    /// starts at the shard it names, modulo the shards.
    pub fn next_room_round(&self) -> usize {
        self.room_rounds.fetch_add(1, Ordering::Relaxed)
    }

    fn note_evictable(&self, shard: usize, evictable: bool) {
        if let Some(a) = self.evictable.get(shard) {
            if a.load(Ordering::Relaxed) != evictable {
                a.store(evictable, Ordering::Relaxed);
            }
        }
    }

    /// Whether another shard than `me` may still evict (its last pass did not fail) and
    /// asking every shard is not known to be futile.
    fn others_evictable(&self, me: usize, now_ms: u64) -> bool {
        now_ms >= self.room_futile_until_ms.load(Ordering::Relaxed)
            && self
                .evictable
                .iter()
                .enumerate()
                .any(|(i, a)| i != me && a.load(Ordering::Relaxed))
    }

    /// Shard `shard`'s thread net allocation now.
    fn publish_net(&self, shard: usize, net: i64) {
        let Some(a) = self.nets.get(shard) else {
            return;
        };
        // The first figure since the last reading is the base the reading counts this
        // shard's changes from (`nets_since`).
        if let Some(base) = self.reading.nets.get(shard) {
            if base.load(Ordering::Relaxed) == NET_UNPUBLISHED {
                let _ = base.compare_exchange(
                    NET_UNPUBLISHED,
                    net,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
        }
        a.0.store(net, Ordering::Relaxed);
    }

    /// Publishes the calling thread's net allocation as shard `shard`'s (its place in the
    /// process), before it hands another shard a batch: the commands' arguments it
    /// allocated become that shard's keys and values, and the other shards' figures must
    /// count them from then on. Otherwise a shard whose connections forward most of their
    /// commands shows the others less than it holds until its own next reading, they find
    /// the process under its limit while it finds it over, and it alone evicts: its own
    /// recently read keys went while the others kept older ones (allkeys-lru stops being
    /// LRU across shards).
    pub fn publish_thread_net(&self, shard: usize) {
        self.publish_net(shard, thread_net());
    }

    /// The process's allocated bytes now, as every shard sees them: the last reading of the
    /// allocator, or a new one when it is `ALLOCATED_AGE_MS_MAX` old or `fresh` asks for
    /// one, plus what every shard's thread allocated less freed since (published nets).
    /// `own`: the asking shard's place and its thread's net allocation now, the base of its
    /// changes if this call reads the allocator.
    fn allocated_now(&self, now_ms: u64, fresh: bool, own: Option<(usize, i64)>) -> i64 {
        let r = &self.reading;
        for _ in 0..READING_RETRIES_MAX {
            let seq = r.seq.load(Ordering::Acquire);
            if seq % 2 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let at = r.at_ms.load(Ordering::Relaxed);
            let stale = fresh || at == 0 || now_ms.saturating_sub(at) >= ALLOCATED_AGE_MS_MAX;
            if stale
                && r.seq
                    .compare_exchange(
                        seq,
                        seq.wrapping_add(1),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    )
                    .is_ok()
            {
                std::sync::atomic::fence(Ordering::Release);
                let _ = tikv_jemalloc_ctl::epoch::advance();
                let allocated = crate::alloc::allocated_live();
                r.allocated.store(allocated, Ordering::Relaxed);
                r.at_ms.store(now_ms.max(1), Ordering::Relaxed);
                // Every other shard's base is its next figure: the one it published last may
                // be old (a shard publishes only while a limit is set, or when it forwards),
                // and what it did since then is in this reading already.
                for (i, base) in r.nets.iter().enumerate() {
                    let v = match own {
                        Some((me, net)) if me == i => net,
                        _ => NET_UNPUBLISHED,
                    };
                    base.store(v, Ordering::Relaxed);
                }
                r.seq.store(seq.wrapping_add(2), Ordering::Release);
                return i64::try_from(allocated).unwrap_or(i64::MAX);
            }
            let allocated = r.allocated.load(Ordering::Relaxed);
            let since = self.nets_since();
            std::sync::atomic::fence(Ordering::Acquire);
            if r.seq.load(Ordering::Relaxed) == seq {
                return i64::try_from(allocated)
                    .unwrap_or(i64::MAX)
                    .saturating_add(since);
            }
        }
        // Written over and over meanwhile: the figure as it stands, torn or not.
        i64::try_from(r.allocated.load(Ordering::Relaxed))
            .unwrap_or(i64::MAX)
            .saturating_add(self.nets_since())
    }

    /// What the shards' threads allocated less freed since the last reading, each counted
    /// from its first figure published after it (`publish_net`). The figure a shard
    /// published before the reading may be old (it publishes only while a limit is set, or
    /// when it forwards a batch): counted from it, what the shard allocated or freed in
    /// between, which the reading holds already, counted twice. A shard's first figure ever
    /// is all it holds since its thread started (everything it freed of memory other
    /// threads allocated, too): counted as a change, it made the others see the process
    /// under its limit by that much while that shard saw it over.
    fn nets_since(&self) -> i64 {
        self.nets
            .iter()
            .zip(&self.reading.nets)
            .map(
                |(a, b)| match (a.0.load(Ordering::Relaxed), b.load(Ordering::Relaxed)) {
                    (NET_UNPUBLISHED, _) | (_, NET_UNPUBLISHED) => 0,
                    (now, then) => now.wrapping_sub(then),
                },
            )
            .fold(0i64, i64::wrapping_add)
    }

    fn publish(&self, shard: usize, bytes: u64) {
        if let Some(a) = self.not_counted.get(shard) {
            a.store(bytes, Ordering::Relaxed);
        }
    }

    /// What shard `shard`'s background snapshot holds now (0: none running).
    pub fn publish_job(&self, shard: usize, bytes: u64) {
        if let Some(a) = self.jobs.get(shard) {
            a.store(bytes, Ordering::Relaxed);
        }
    }

    /// Bytes every shard leaves out of used memory (INFO `mem_not_counted_for_evict`): op
    /// logs and background snapshots.
    pub fn not_counted(&self) -> u64 {
        self.not_counted
            .iter()
            .chain(self.jobs.iter())
            .map(|a| a.load(Ordering::Relaxed))
            .sum()
    }
}

/// What a shard remembers of a key it evicted (module docs, "Evicted marks").
#[derive(Debug, Clone, Default, PartialEq)]
pub struct EvictedMark {
    /// What the key had seen when it was evicted (`KeyState::observed`), joined with the
    /// writes that reached it since and were not materialised.
    pub seen: Observed,
    /// The writes the key held when it was evicted (`KeyState::live_stamps`), joined with
    /// the writes that reached it since and were not materialised: a peer's write brings
    /// the key back only if it removes all of them. Removal contexts are left out: they
    /// name writes already removed, and their sites collect them, so a later whole write
    /// would no longer name them.
    pub live: VersionVector,
    /// Per origin, the increments of the key's string counter this shard has received (the
    /// counter's totals when it was evicted, plus those not materialised since): when the key
    /// is held again, its counter continues from them (`KeyState::seed_counter_totals`), as
    /// the other sites' counters, which never dropped them, do.
    pub received: SmallVec<[(ReplicaId, IncTotals); 1]>,
}

impl EvictedMark {
    /// The removal a local write issues first (everything this shard had seen or
    /// received of the key).
    pub fn removal(&self) -> Observed {
        let mut o = self.seen.clone();
        o.stamps.merge(&self.live);
        join_incs(&mut o.incs, &self.received);
        o
    }

    /// Whether a write whose context is `o` removes everything this mark covers.
    fn covered_by(&self, o: &Observed) -> bool {
        let incs_covered = |incs: &[(ReplicaId, IncTotals)]| {
            incs.iter()
                .all(|(r, t)| t.n == 0 || o.incs.iter().any(|(r2, t2)| r2 == r && t2.covers(t)))
        };
        o.stamps.dominates(&self.live)
            && incs_covered(&self.seen.incs)
            && incs_covered(&self.received)
    }
}

/// What `admit_on_evicted` decided.
#[derive(Debug)]
pub enum Admit {
    /// The key is not marked: the write applies as any other.
    Unmarked,
    /// The write removes everything the mark covered: it applies, and the key's counter
    /// continues from these totals (`EvictedMark::received`).
    Whole(SmallVec<[(ReplicaId, IncTotals); 1]>),
    /// The write carries a change: not materialised here.
    Dropped,
}

/// One candidate of the pool: higher `score` goes first.
#[derive(Debug)]
struct Candidate {
    score: u64,
    db: usize,
    key: SmallBytes,
}

/// A shard's eviction state.
#[derive(Debug)]
pub struct Eviction {
    pub process: Arc<ProcessMemory>,
    /// This shard's place in `process`.
    process_index: usize,
    /// The next reading of used memory asks the allocator (`forget_used_memory_reading`); a
    /// cell so that reads of used memory take `&Shard`.
    fresh_reading: Cell<bool>,
    /// The periodic cycle runs a pass next (`start_cycle`).
    cycle_wanted: bool,
    /// Candidates, ascending by score (the best last), at most `POOL_KEYS_MAX`.
    pool: Vec<Candidate>,
    rng: u64,
    /// The database a random policy starts from next (Redis's `next_db`).
    next_db: usize,
    /// Whether the last check found the process over its limit, with nothing evictable
    /// here or still evicting (INFO crdt `crdt_maxmemory_over`).
    pub over: bool,
    /// Whether the last check ended in `Outcome::Fail` (a script started then may not
    /// write: Redis's `script_oom`).
    pub failed: bool,
    /// Peers' ops applied while over the limit (INFO crdt).
    pub remote_ops_over: u64,
    /// When the log last said so (ms).
    pub logged_ms: u64,
    /// This is a background snapshot's private shard (`as_job`).
    job: bool,
    job_records: Cell<u64>,
    /// Keys this shard evicted and holds no write of since (module docs, "Evicted marks").
    /// Kept only while the shard has peers. A key in it is absent from its table.
    pub evicted: hashbrown::HashMap<(u16, SmallBytes), EvictedMark>,
    /// When the log last said eviction stopped at `maxmemory-evicted-marks-max` (ms).
    marks_full_logged_ms: u64,
    /// `Shard::held_everywhere_vv` when the last eviction pass found no candidate every
    /// peer held, and when (ms): until it moves no key becomes evictable (a key's writes
    /// only grow), so for `HELD_BACK_RETRY_MS` writes get -OOM without sampling again
    /// (a sample that met only keys some peer lacks may have missed others).
    held_back_at: Option<(VersionVector, u64)>,
}

impl Eviction {
    pub fn new(process: Arc<ProcessMemory>) -> Eviction {
        Eviction {
            process,
            process_index: 0,
            fresh_reading: Cell::new(false),
            cycle_wanted: false,
            pool: Vec::with_capacity(POOL_KEYS_MAX),
            rng: 0x2545_f491_4f6c_dd1d,
            next_db: 0,
            over: false,
            failed: false,
            remote_ops_over: 0,
            logged_ms: 0,
            job: false,
            job_records: Cell::new(0),
            evicted: hashbrown::HashMap::new(),
            marks_full_logged_ms: 0,
            held_back_at: None,
        }
    }

    /// The last eviction pass stopped at its time limit or its share with the process still
    /// over (`Outcome::Running`): the shard's timer goes on with it.
    pub fn running(&self) -> bool {
        (self.over && !self.failed) || self.cycle_wanted
    }

    /// Redis's `startEvictionTimeProc` (CONFIG SET maxmemory): the next periodic cycle runs
    /// a pass whatever the last one found.
    pub fn start_cycle(&mut self) {
        self.cycle_wanted = true;
    }

    /// What a background snapshot's thread needs to report its private shard.
    pub fn job_share(&self) -> (Arc<ProcessMemory>, usize) {
        (self.process.clone(), self.process_index)
    }

    /// Makes this the private shard of a background snapshot of shard `index`: it reports
    /// what its thread holds (`note_job_progress`).
    pub fn as_job(&mut self, process: Arc<ProcessMemory>, index: usize) {
        self.process = process;
        self.process_index = index;
        self.job = true;
    }

    /// Every `JOB_REPORT_RECORDS` keys or records a snapshot's private shard loads: publishes
    /// what its thread holds (the thread started with the job, so its net allocation is the
    /// job's), and returns it.
    pub fn note_job_progress(&self) -> Option<u64> {
        if !self.job {
            return None;
        }
        let n = self.job_records.get().wrapping_add(1);
        self.job_records.set(n);
        if n % JOB_REPORT_RECORDS != 0 {
            return None;
        }
        let bytes = u64::try_from(thread_net()).unwrap_or(0);
        self.process.publish_job(self.process_index, bytes);
        Some(bytes)
    }

    /// Joins the process's other shards (`index`: this shard's place among them).
    pub fn share(&mut self, process: Arc<ProcessMemory>, index: usize) {
        self.process = process;
        self.process_index = index;
    }

    fn next_rand(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Adds a candidate, keeping the pool sorted and bounded (the worst goes when full); a
    /// key already there is not added twice. A candidate no better than a full pool's worst
    /// is turned away before any key is compared: under a steady eviction load most are,
    /// and comparing each with the whole pool's keys was 5.5% of the shard's profile.
    fn offer(&mut self, c: Candidate) {
        let full = self.pool.len() >= POOL_KEYS_MAX;
        if full
            && self
                .pool
                .first()
                .is_some_and(|worst| worst.score >= c.score)
        {
            return;
        }
        if self.pool.iter().any(|p| p.db == c.db && p.key == c.key) {
            return;
        }
        if full {
            self.pool.remove(0);
        }
        let at = self.pool.partition_point(|p| p.score <= c.score);
        self.pool.insert(at, c);
        debug_assert!(self.pool.len() <= POOL_KEYS_MAX);
    }
}

thread_local! {
    /// This thread's jemalloc counters of bytes allocated and freed (None: jemalloc's
    /// per-thread statistics are unavailable).
    static THREAD_COUNTERS: Option<(
        tikv_jemalloc_ctl::thread::ThreadLocal<u64>,
        tikv_jemalloc_ctl::thread::ThreadLocal<u64>,
    )> = tikv_jemalloc_ctl::thread::allocatedp::read()
        .ok()
        .zip(tikv_jemalloc_ctl::thread::deallocatedp::read().ok());
}

/// Reads the entries a sample's walk gathered (`Shard::sample`) into `out`: each that exists
/// for clients (and, `volatile`, has a TTL), with its access field, expiry time (0: none) and
/// name. A first pass touches every entry, with no work between the reads, so that their
/// cache misses overlap; the second then finds them in cache.
fn take_sampled(
    found: &mut Vec<&crate::keyspace::Entry>,
    volatile: bool,
    out: &mut Vec<(u32, u64, SmallBytes)>,
) {
    let mut live: u64 = 0;
    for (i, e) in found.iter().enumerate().take(64) {
        live |= u64::from(!e.state.is_empty()) << i;
    }
    for (i, e) in found.drain(..).enumerate() {
        let shown = if i < 64 {
            live & (1 << i) != 0
        } else {
            !e.state.is_empty()
        };
        if !shown {
            continue;
        }
        let ttl = e.state.expire_at_ms();
        if volatile && ttl.is_none() {
            continue;
        }
        out.push((e.lru_s, ttl.unwrap_or(0), e.key.clone()));
    }
}

/// Joins `b` into `a`: per origin, the totals counting more increments (an origin's totals
/// on one key are prefixes of one sequence of increments).
fn join_incs(a: &mut SmallVec<[(ReplicaId, IncTotals); 1]>, b: &[(ReplicaId, IncTotals)]) {
    for &(r, t) in b {
        match a.iter_mut().find(|(r2, _)| *r2 == r) {
            Some((_, mine)) => *mine = IncTotals::merge(*mine, t),
            None => a.push((r, t)),
        }
    }
}

/// Counts the increment `stamp` into `totals` of its origin, as `Counter::apply_inc` would.
fn count_increment(
    totals: &mut SmallVec<[(ReplicaId, IncTotals); 1]>,
    stamp: Stamp,
    delta: &Delta,
    at: &IncAt,
) {
    let origin = stamp.replica;
    let i = match totals.iter().position(|(r, _)| *r == origin) {
        Some(i) => i,
        None => {
            totals.push((origin, IncTotals::default()));
            totals.len() - 1
        }
    };
    if let Some((_, t)) = totals.get_mut(i) {
        *t = match at.totals(stamp, delta) {
            Some(after) => IncTotals::merge(*t, after),
            None => t.plus(delta),
        };
    }
}

/// Bytes this thread allocated less those it freed, since it started.
fn thread_net() -> i64 {
    THREAD_COUNTERS.with(|c| match c {
        Some((a, d)) => (a.get() as i64).wrapping_sub(d.get() as i64),
        None => 0,
    })
}

impl Shard {
    /// Used memory as eviction counts it (module docs), as this shard sees it at `now_ms`.
    pub fn used_memory_counted(&self, now_ms: u64) -> u64 {
        let e = &self.evict;
        e.process
            .publish(e.process_index, self.oplog.bytes() as u64);
        // A background snapshot's private shard (another thread) publishes nothing here.
        let own = (!e.job).then(|| (e.process_index, thread_net()));
        if let Some((me, net)) = own {
            e.process.publish_net(me, net);
        }
        let used = e
            .process
            .allocated_now(now_ms, e.fresh_reading.replace(false), own);
        u64::try_from(used)
            .unwrap_or(0)
            .saturating_sub(e.process.not_counted())
    }

    /// Makes the next reading of used memory ask the allocator, so that it counts what
    /// threads other than the shards' (log writers, lazy frees) allocated and freed since
    /// the last reading.
    pub fn forget_used_memory_reading(&self) {
        self.evict.fresh_reading.set(true);
    }

    /// Counts `n` peers' ops applied while over the limit (applied all the same: refusing
    /// them would make this site diverge) and says so in the log, at most once per
    /// `OVER_LIMIT_LOG_INTERVAL_MS`.
    pub fn note_ops_over_limit(&mut self, n: u64, now_ms: u64) {
        self.evict.over = true;
        self.evict.remote_ops_over += n;
        if now_ms.saturating_sub(self.evict.logged_ms) >= OVER_LIMIT_LOG_INTERVAL_MS {
            self.evict.logged_ms = now_ms;
            tracing::warn!(
                shard = self.index,
                maxmemory = self.config.maxmemory,
                policy = %self.config.maxmemory_policy,
                ops_applied_over_limit = self.evict.remote_ops_over,
                "over maxmemory: still applying the peers' ops (refusing them would make this site diverge)"
            );
        }
    }

    /// Says in the log, at most once per `OVER_LIMIT_LOG_INTERVAL_MS`, that eviction
    /// stopped at `maxmemory-evicted-marks-max`.
    fn note_marks_full(&mut self, now_ms: u64) {
        if now_ms.saturating_sub(self.evict.marks_full_logged_ms) >= OVER_LIMIT_LOG_INTERVAL_MS {
            self.evict.marks_full_logged_ms = now_ms;
            tracing::warn!(
                shard = self.index,
                marks = self.evict.evicted.len(),
                limit = self.config.maxmemory_evicted_marks_max,
                "over maxmemory with maxmemory-evicted-marks-max evicted keys remembered: evicting no more (writes get -OOM) until writes bring evicted keys back"
            );
        }
    }

    /// Redis's `performEvictions`, before a command: evicts keys of this shard by
    /// `maxmemory-policy` until the process is under `maxmemory`, for at most the tenacity's
    /// time.
    pub fn perform_evictions(&mut self, now_ms: u64) -> Outcome {
        if self.config.maxmemory == 0 {
            self.evict.over = false;
            self.evict.failed = false;
            self.evict.process.note_over(false);
            return Outcome::Ok;
        }
        let outcome =
            self.perform_evictions_by(now_ms, &mut |s: &Shard| s.used_memory_counted(now_ms));
        let process = &self.evict.process;
        process.note_over(outcome != Outcome::Ok);
        if process.shards() > 1 {
            let policy = Policy::parse(&self.config.maxmemory_policy).unwrap_or(Policy::NoEviction);
            let evictable = outcome != Outcome::Fail
                && policy != Policy::NoEviction
                && (0..self.dbs.len()).any(|db| self.has_candidates(db, policy.volatile()));
            process.note_evictable(self.evict.process_index, evictable);
        }
        outcome
    }

    /// Before a client's command (Redis's `processCommand`): evicts, and says whether a
    /// command that may use memory must get -OOM. With several shards not while another
    /// shard may still evict: the command runs, over the limit by what it adds, and the
    /// connection's next command makes room on every shard first (`conn::Conn::make_room`:
    /// the commands of a pipeline forwarded together run here one after the other, with no
    /// chance to ask the others in between). A round that finds no shard able to evict
    /// ends that (`ProcessMemory::note_room_futile`, and each shard's failed pass).
    pub fn evict_or_refuse(&mut self, now_ms: u64) -> bool {
        self.perform_evictions(now_ms) == Outcome::Fail
            && (self.config.maxmemory_policy == "noeviction"
                || !self
                    .evict
                    .process
                    .others_evictable(self.evict.process_index, now_ms))
    }

    /// After a client's command that wrote, with several shards: records whether the
    /// process is now over its limit (`ProcessMemory::room_wanted`), so that the next
    /// command of any connection first makes room on every shard, not only on the one
    /// that runs it. One cheap reading of used memory; nothing with one shard.
    pub fn note_memory_after_write(&self, now_ms: u64) {
        let max = self.config.maxmemory;
        if max == 0 || self.evict.process.shards() < 2 || self.persist.recovering {
            return;
        }
        if self.used_memory_counted(now_ms) > max {
            self.evict.process.note_over(true);
        }
    }

    /// `perform_evictions` with the used-memory figure given by `used` (tests count keys).
    pub fn perform_evictions_by(
        &mut self,
        now_ms: u64,
        used: &mut dyn FnMut(&Shard) -> u64,
    ) -> Outcome {
        self.evict.cycle_wanted = false;
        let outcome = self.evict_until_under(now_ms, used);
        self.evict.over = outcome != Outcome::Ok;
        self.evict.failed = outcome == Outcome::Fail;
        outcome
    }

    fn evict_until_under(&mut self, now_ms: u64, used: &mut dyn FnMut(&Shard) -> u64) -> Outcome {
        let max = self.config.maxmemory;
        // Under CLIENT PAUSE the dataset must not change (Redis's isSafeToPerformEvictions);
        // a site still loading its data has not started serving.
        if max == 0 || self.pause_at(now_ms).is_some() || self.persist.recovering {
            return Outcome::Ok;
        }
        // What other shards freed is in their published nets: no new reading needed here.
        let used_at_start = used(self);
        if used_at_start <= max {
            return Outcome::Ok;
        }
        // What this pass owes: the excess it found, freed by this shard's own thread (the
        // keys it evicts are its own). Past it, what keeps the process over is other threads'
        // growth, which their shards answer by evicting their own keys; going on here would
        // empty this shard for them.
        let owed = used_at_start - max;
        let net_at_start = thread_net();
        let policy = Policy::parse(&self.config.maxmemory_policy).unwrap_or(Policy::NoEviction);
        if policy == Policy::NoEviction {
            return Outcome::Fail;
        }
        // With peers, only a key every peer holds may go: a write only this site held
        // would be lost at every site by a later full sync from here (docs/conflicts.md §18).
        let held = (self.peers > 0).then(|| self.held_everywhere_vv());
        if let (Some(vv), Some((at_vv, at_ms))) = (&held, &self.evict.held_back_at) {
            if vv == at_vv && now_ms < at_ms.saturating_add(HELD_BACK_RETRY_MS) {
                return Outcome::Fail;
            }
        }
        let limit_us = time_limit_us(self.config.maxmemory_eviction_tenacity);
        let started = std::time::Instant::now();
        // Each round evicts a key or finds none; a stale pool entry costs a round, so the
        // bound is the keys here plus one pool.
        let rounds_max = self.dbs.iter().map(|d| d.table.len()).sum::<usize>() + POOL_KEYS_MAX;
        let mut evicted = 0u32;
        for _ in 0..rounds_max {
            // With peers each eviction leaves a mark: at their limit, evict no more.
            if self.peers > 0
                && self.evict.evicted.len() as u64 >= self.config.maxmemory_evicted_marks_max
            {
                self.note_marks_full(now_ms);
                return Outcome::Fail;
            }
            let mut held_back = false;
            let Some((db, key)) =
                self.eviction_candidate(policy, now_ms, held.as_ref(), &mut held_back)
            else {
                if held_back {
                    self.evict.held_back_at = held.map(|vv| (vv, now_ms));
                }
                break;
            };
            if !self.evict_key(db, &key) {
                continue;
            }
            // Logged for this site only (no op): replay (restart, snapshot) drops it again.
            self.persist
                .append_evicted(u16::try_from(db).unwrap_or(u16::MAX), &key);
            evicted += 1;
            self.stats.evicted_keys += 1;
            // Redis's performEvictions: `evicted` (class e) after the key is gone.
            self.notify(crate::notify::EVICTED, "evicted", db, &key);
            if used(self) <= max {
                return Outcome::Ok;
            }
            let freed = u64::try_from(net_at_start.saturating_sub(thread_net())).unwrap_or(0);
            if freed >= owed {
                return Outcome::Running;
            }
            if evicted % TIME_CHECK_KEYS == 0 {
                if let Some(limit) = limit_us {
                    if started.elapsed().as_micros() as u64 > limit {
                        return Outcome::Running;
                    }
                }
            }
        }
        Outcome::Fail
    }

    /// Drops `key` of `db` here only (eviction, and its replay): no effect, no op. WATCH sees
    /// it as a change, as Redis's `signalModifiedKey` does. False when the key is absent or
    /// holds only removal metadata.
    pub fn evict_key(&mut self, db: usize, key: &[u8]) -> bool {
        let hash = self.hash_key(key);
        let Some(d) = self.dbs.get_mut(db) else {
            return false;
        };
        let Some(index) = d.table.find_index(hash, key) else {
            return false;
        };
        let (had_ttl, meta, seen) = match d.table.get_bucket(index) {
            Some(e) if !e.state.is_empty() => (
                e.state.expire_at_ms().is_some(),
                e.meta,
                (self.peers > 0).then(|| EvictedMark {
                    seen: e.state.observed(),
                    live: e.state.live_stamps(),
                    received: e.state.counter_totals(),
                }),
            ),
            _ => return false,
        };
        if !d.table.remove_bucket(index) {
            return false;
        }
        if had_ttl {
            d.expires = d.expires.saturating_sub(1);
        }
        if meta {
            d.meta_keys = d.meta_keys.saturating_sub(1);
        }
        if let (Some(seen), Ok(db16)) = (seen, u16::try_from(db)) {
            self.evict
                .evicted
                .insert((db16, SmallBytes::copy_from(key)), seen);
        }
        self.touch_watched(db, key);
        if self.tracking.active() {
            self.tracking_anonymous(|s| s.tracking_key_changed(key));
        }
        true
    }

    /// The mark of `key` of `db` if this shard evicted it and holds no write of it since.
    /// Costs nothing while no key is marked.
    pub fn evicted_mark(&self, db: usize, key: &[u8]) -> Option<&EvictedMark> {
        if self.evict.evicted.is_empty() {
            return None;
        }
        let db = u16::try_from(db).ok()?;
        self.evict.evicted.get(&(db, SmallBytes::copy_from(key)))
    }

    /// Decides a peer's write stamped `stamp` with `effect` to `key`, which this shard may
    /// have evicted. An effect that removes everything the mark covers (an Assign or Remove
    /// whose context covers what the key had seen and every write not materialised since)
    /// acts on nothing at every site: the key comes back whole and the mark goes. Any other
    /// would rebuild only its own change here: it is not materialised (reads keep missing),
    /// and the mark records it, so that a later whole write must have seen it too.
    pub fn admit_on_evicted<B: AsRef<[u8]>>(
        &mut self,
        db: usize,
        key: &[u8],
        stamp: Stamp,
        effect: &Effect<B>,
    ) -> Admit {
        if self.evict.evicted.is_empty() {
            return Admit::Unmarked;
        }
        let Ok(db16) = u16::try_from(db) else {
            return Admit::Unmarked;
        };
        let id = (db16, SmallBytes::copy_from(key));
        let Some(mark) = self.evict.evicted.get_mut(&id) else {
            return Admit::Unmarked;
        };
        let whole = match effect {
            Effect::Assign { observed, .. } | Effect::Remove { observed } => {
                mark.covered_by(observed)
            }
            _ => false,
        };
        if whole {
            let received = std::mem::take(&mut mark.received);
            self.evict.evicted.remove(&id);
            return Admit::Whole(received);
        }
        // A removal that does not cover the mark removes nothing this shard holds: a later
        // local removal carries it. Any other write is one the key holds at the other sites.
        match effect {
            Effect::Remove { .. } | Effect::ExpireRetire { .. } => mark.seen.stamps.observe(stamp),
            _ => mark.live.observe(stamp),
        }
        if let Effect::Incr { delta, at } = effect {
            count_increment(&mut mark.received, stamp, delta, at);
        }
        self.stats.evicted_writes_not_applied += 1;
        Admit::Dropped
    }

    /// A full sync's `state` for `key`, which this shard evicted: not merged (the merge
    /// drops what this shard's context covers and no longer holds, so it would rebuild only
    /// the writes made since), and recorded in the mark: what it had seen, and its counter's
    /// totals (this shard's context takes the sender's, so the increments they count will
    /// not come as ops). True when the key is not marked.
    pub fn admit_merge_on_evicted(&mut self, db: usize, key: &[u8], state: &KeyState) -> bool {
        if self.evict.evicted.is_empty() {
            return true;
        }
        let Ok(db16) = u16::try_from(db) else {
            return true;
        };
        let Some(mark) = self
            .evict
            .evicted
            .get_mut(&(db16, SmallBytes::copy_from(key)))
        else {
            return true;
        };
        let seen = state.observed();
        mark.seen.stamps.merge(&seen.stamps);
        mark.live.merge(&state.live_stamps());
        join_incs(&mut mark.seen.incs, &seen.incs);
        join_incs(&mut mark.received, &state.counter_totals());
        self.stats.evicted_writes_not_applied += 1;
        false
    }

    /// Removes and returns the mark of `key` of `db` (a local write brings it back whole).
    pub fn take_evicted_mark(&mut self, db: usize, key: &[u8]) -> Option<EvictedMark> {
        if self.evict.evicted.is_empty() {
            return None;
        }
        let db = u16::try_from(db).ok()?;
        self.evict.evicted.remove(&(db, SmallBytes::copy_from(key)))
    }

    /// Marks `key` of `db` evicted (a snapshot's entry).
    pub fn load_evicted_mark(&mut self, db: u16, key: &[u8], mark: EvictedMark) {
        self.evict
            .evicted
            .insert((db, SmallBytes::copy_from(key)), mark);
    }

    /// Whether every write and removal `state` holds lies within `held` (None: no peers,
    /// anything may go). Costs what `KeyState::observed` costs: paid only for the key about
    /// to be evicted, whose mark needs as much.
    pub(crate) fn held_everywhere(state: &KeyState, held: Option<&VersionVector>) -> bool {
        held.is_none_or(|vv| vv.dominates(&state.observed().stamps))
    }

    /// The next key to evict: a random one, or the best of the pool after sampling every
    /// database into it. Only keys that exist (and, for volatile policies, have a TTL) and
    /// that every peer holds (`held`; `held_back` says one was passed over for that).
    /// Bounded: `POOL_REFILLS_MAX` samples per database, each candidate checked once.
    fn eviction_candidate(
        &mut self,
        policy: Policy,
        now_ms: u64,
        held: Option<&VersionVector>,
        held_back: &mut bool,
    ) -> Option<(usize, SmallBytes)> {
        let n_dbs = self.dbs.len();
        let volatile = policy.volatile();
        if policy.random() {
            // A sparse stretch of a table may hold no key: a few random starts per database.
            for i in 0..n_dbs * POOL_REFILLS_MAX {
                let db = (self.evict.next_db + i / POOL_REFILLS_MAX) % n_dbs.max(1);
                if !self.has_candidates(db, volatile) {
                    continue;
                }
                let r = self.evict.next_rand();
                let mut one = Vec::with_capacity(1);
                self.sample(db, 1, volatile, r, &mut one);
                if let Some((_, _, key)) = one.pop() {
                    self.evict.next_db = db + 1;
                    let hash = self.hash_key(&key);
                    let everywhere = self
                        .dbs
                        .get(db)
                        .and_then(|d| d.get(hash, &key))
                        .is_some_and(|e| Self::held_everywhere(&e.state, held));
                    if everywhere {
                        return Some((db, key));
                    }
                    *held_back = true;
                    self.stats.evictions_held_back += 1;
                }
            }
            return None;
        }
        // Redis's `while (bestkey == NULL)`: the pool may hold only keys gone since they were
        // sampled; they leave it as they are popped, and fresh samples refill it.
        for _ in 0..POOL_REFILLS_MAX {
            let mut sampled = false;
            self.refill_pool(policy, now_ms, &mut sampled);
            while let Some(c) = self.evict.pool.pop() {
                let hash = self.hash_key(&c.key);
                let Some(e) = self.dbs.get(c.db).and_then(|d| d.get(hash, &c.key)) else {
                    continue;
                };
                if e.state.is_empty() || (volatile && e.state.expire_at_ms().is_none()) {
                    continue;
                }
                if Self::held_everywhere(&e.state, held) {
                    return Some((c.db, c.key));
                }
                *held_back = true;
                self.stats.evictions_held_back += 1;
            }
            if !sampled {
                return None;
            }
        }
        None
    }

    /// Whether database `db` holds keys a policy may evict: any key, or (`volatile`) a key
    /// with a TTL.
    fn has_candidates(&self, db: usize, volatile: bool) -> bool {
        self.dbs.get(db).is_some_and(|d| {
            if volatile {
                d.expires > 0
            } else {
                !d.is_empty()
            }
        })
    }

    /// Samples every database that holds candidates into the pool; `sampled`: whether any
    /// key was found.
    fn refill_pool(&mut self, policy: Policy, now_ms: u64, sampled: &mut bool) {
        let volatile = policy.volatile();
        let samples = usize::try_from(self.config.maxmemory_samples)
            .unwrap_or(usize::MAX)
            .clamp(1, 1 << 16);
        let mut found = Vec::with_capacity(samples);
        for db in 0..self.dbs.len() {
            if !self.has_candidates(db, volatile) {
                continue;
            }
            let r = self.evict.next_rand();
            found.clear();
            self.sample(db, samples, volatile, r, &mut found);
            *sampled |= !found.is_empty();
            for (lru_s, expire_at_ms, key) in found.drain(..) {
                let score = self.score(policy, lru_s, expire_at_ms, now_ms);
                self.evict.offer(Candidate { score, db, key });
            }
        }
    }

    /// Up to `count` evictable keys of `db` from a random bucket on (`r`), each with its
    /// access field (`lru_s`) and expiry time (0: none). Bounded:
    /// `count * SAMPLE_BUCKETS_PER_KEY_MAX * SAMPLE_STARTS_MAX + SAMPLE_SPARSE_WALK_BUCKETS`
    /// buckets or TTL spans.
    ///
    /// The buckets hold pointers to the entries, each of which is a cache miss to read: the
    /// walk gathers the entries it needs first and reads them afterwards (`take_sampled`),
    /// so that their misses overlap instead of following one another (under a write load
    /// past `maxmemory` this function was the top item of the shard's profile, nearly all of
    /// it the first read of each sampled entry).
    fn sample(
        &self,
        db: usize,
        count: usize,
        volatile: bool,
        r: u64,
        out: &mut Vec<(u32, u64, SmallBytes)>,
    ) {
        let Some(d) = self.dbs.get(db) else {
            return;
        };
        let n = d.table.num_buckets();
        if n == 0 {
            return;
        }
        // A stretch of the table may be empty (the new table early in a rehash, or what
        // evictions left): a window that finds nothing moves to another random start.
        let mut rng = r | 1;
        let mut pos = (r % n as u64) as usize;
        let window = count.saturating_mul(SAMPLE_BUCKETS_PER_KEY_MAX);
        // After the random windows, one walk on from the last start: a table left sparse
        // (tables do not shrink) still yields its keys.
        let steps_max = window
            .saturating_mul(SAMPLE_STARTS_MAX)
            .saturating_add(SAMPLE_SPARSE_WALK_BUCKETS);
        let mut steps = 0;
        let mut in_window = 0;
        // Entries found and not read yet: at most `count` (emptied into `out` when the walk
        // has as many as it needs).
        let mut found: Vec<&crate::keyspace::Entry> = Vec::with_capacity(count.min(64));
        while out.len() < count && steps < steps_max {
            steps += 1;
            in_window += 1;
            let windows_left = steps <= window.saturating_mul(SAMPLE_STARTS_MAX);
            if windows_left && in_window > window && out.is_empty() && found.is_empty() {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                pos = (rng % n as u64) as usize;
                in_window = 1;
            }
            let bucket = if volatile {
                let to = pos.saturating_add(SAMPLE_TTL_SPAN_BUCKETS).min(n);
                let found = d.table.next_marked(Mark::Ttl, pos, to);
                pos = match found {
                    Some(b) => b + 1,
                    None => to,
                };
                found
            } else {
                let b = pos;
                pos += 1;
                Some(b)
            };
            if pos >= n {
                pos = 0;
            }
            let Some(e) = bucket.and_then(|b| d.table.get_bucket(b)) else {
                continue;
            };
            found.push(e);
            if out.len() + found.len() >= count {
                take_sampled(&mut found, volatile, out);
            }
        }
        take_sampled(&mut found, volatile, out);
    }

    /// Redis's pool score (`evictionPoolPopulate`): higher evicts first.
    fn score(&self, policy: Policy, field: u32, expire_at_ms: u64, now_ms: u64) -> u64 {
        match policy {
            Policy::VolatileTtl => u64::MAX - expire_at_ms,
            Policy::AllkeysLfu | Policy::VolatileLfu => {
                let counter = if field == NEW_ENTRY {
                    LFU_INIT_VAL
                } else {
                    lfu_decayed(field, lfu_minutes(now_ms), self.config.lfu_decay_time)
                };
                255u64.saturating_sub(u64::from(counter))
            }
            _ => {
                if field == NEW_ENTRY {
                    return 0;
                }
                // `estimateObjectIdleTime`: seconds on the 24-bit clock, which wraps.
                let clock = lru_clock(now_ms);
                let lru = field & 0x00ff_ffff;
                u64::from(if clock >= lru {
                    clock - lru
                } else {
                    0x00ff_ffff - lru + clock
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testing::Harness;

    /// Bytes each key counts for in these tests' used-memory figure.
    const KEY_BYTES: u64 = 100;

    /// A harness whose limit is `keys_max` keys. The limit holds only inside `evict`: the
    /// commands in between run with none (their own checks read the allocator).
    fn harness(policy: &str, keys_max: u64) -> (Harness, u64) {
        let mut h = Harness::new();
        h.shard.config.maxmemory_policy = policy.to_string();
        h.shard.set_policy_flags();
        // Larger than the tables below: every key is sampled, so the choice is exact.
        h.shard.config.maxmemory_samples = 64;
        (h, keys_max * KEY_BYTES)
    }

    fn evict((h, limit): &mut (Harness, u64)) -> Outcome {
        let now = crate::time::wall_ms();
        h.shard.config.maxmemory = *limit;
        let outcome = h
            .shard
            .perform_evictions_by(now, &mut |s: &Shard| s.key_count() as u64 * KEY_BYTES);
        h.shard.config.maxmemory = 0;
        outcome
    }

    /// Every shard adds the same published nets to the one shared reading; each shard's
    /// changes count from its first figure after that reading (its first figure ever is all
    /// it freed of other threads' memory since it started; one published before the
    /// reading may be old), never from an older one.
    #[test]
    fn shards_share_one_reading_counted_from_each_shards_next_figure() {
        let p = ProcessMemory::new(2);
        p.publish_net(0, 1000);
        let base = p.allocated_now(1, true, Some((0, 1000)));
        p.publish_net(1, -5000);
        assert_eq!(p.allocated_now(2, false, None), base);
        p.publish_net(1, -4000);
        assert_eq!(p.allocated_now(3, false, None), base + 1000);
        p.publish_net(0, 1500);
        assert_eq!(p.allocated_now(4, false, None), base + 1500);
        // Not yet `ALLOCATED_AGE_MS_MAX` old: the same reading, whoever asks.
        assert_eq!(p.reading.at_ms.load(Ordering::Relaxed), 1);
        assert_eq!(
            p.allocated_now(ALLOCATED_AGE_MS_MAX, false, None),
            base + 1500
        );
        // Shard 1 goes quiet; shard 0 reads the allocator again. Shard 1's last figure
        // (-4000) is old by then: what it did since is in the new reading, so it counts
        // from its next figure, not from that one.
        let _ = p.allocated_now(ALLOCATED_AGE_MS_MAX + 1, false, Some((0, 1500)));
        assert_eq!(
            p.reading.at_ms.load(Ordering::Relaxed),
            ALLOCATED_AGE_MS_MAX + 1
        );
        assert_eq!(p.nets_since(), 0);
        p.publish_net(1, -9_000_000);
        assert_eq!(p.nets_since(), 0, "a stale base would count -8,996,000");
        p.publish_net(1, -8_999_000);
        p.publish_net(0, 2500);
        assert_eq!(p.nets_since(), 2000);
    }

    fn exists(h: &mut Harness, key: &str) -> bool {
        h.run(&["EXISTS", key]) == ":1\r\n"
    }

    #[test]
    fn at_the_limit_nothing_goes_one_past_one_key_goes() {
        let mut t = harness("allkeys-random", 10);
        for i in 0..10 {
            t.0.run(&["SET", &format!("k{i}"), "v"]);
        }
        assert_eq!(evict(&mut t), Outcome::Ok);
        assert_eq!(t.0.shard.key_count(), 10);
        assert_eq!(t.0.shard.stats.evicted_keys, 0);
        t.0.run(&["SET", "k10", "v"]);
        assert_eq!(evict(&mut t), Outcome::Ok);
        assert_eq!(t.0.shard.key_count(), 10);
        assert_eq!(t.0.shard.stats.evicted_keys, 1);
        assert!(!t.0.shard.evict.over);
    }

    #[test]
    fn noeviction_fails_one_past_the_limit_and_keeps_every_key() {
        let mut t = harness("noeviction", 3);
        for k in ["a", "b", "c"] {
            t.0.run(&["SET", k, "v"]);
        }
        assert_eq!(evict(&mut t), Outcome::Ok);
        t.0.run(&["SET", "d", "v"]);
        assert_eq!(evict(&mut t), Outcome::Fail);
        assert!(t.0.shard.evict.over && t.0.shard.evict.failed);
        assert_eq!(t.0.shard.key_count(), 4);
        assert_eq!(t.0.shard.stats.evicted_keys, 0);
    }

    #[test]
    fn no_limit_never_evicts() {
        let mut t = harness("allkeys-lru", 0);
        t.0.run(&["SET", "a", "v"]);
        assert_eq!(evict(&mut t), Outcome::Ok);
        assert_eq!(t.0.shard.key_count(), 1);
    }

    #[test]
    fn volatile_policies_take_only_keys_with_a_ttl() {
        for policy in [
            "volatile-lru",
            "volatile-lfu",
            "volatile-random",
            "volatile-ttl",
        ] {
            let mut t = harness(policy, 4);
            for k in ["p1", "p2", "p3"] {
                t.0.run(&["SET", k, "v"]);
            }
            for k in ["t1", "t2"] {
                t.0.run(&["SET", k, "v", "EX", "1000"]);
            }
            // One over: a key with a TTL goes.
            assert_eq!(evict(&mut t), Outcome::Ok, "{policy}");
            assert_eq!(t.0.shard.key_count(), 4);
            // Two over with one key with a TTL left: it goes, then nothing may.
            t.0.run(&["SET", "p4", "v"]);
            t.0.run(&["SET", "p5", "v"]);
            assert_eq!(evict(&mut t), Outcome::Fail, "{policy}");
            for k in ["p1", "p2", "p3", "p4", "p5"] {
                assert!(exists(&mut t.0, k), "{policy} evicted {k}");
            }
            assert!(
                !exists(&mut t.0, "t1") && !exists(&mut t.0, "t2"),
                "{policy}"
            );
            assert_eq!(t.0.shard.stats.evicted_keys, 2, "{policy}");
            assert_eq!(t.0.shard.dbs[0].expires, 0, "{policy}");
        }
    }

    #[test]
    fn volatile_ttl_takes_the_nearest_expiry_first() {
        let mut t = harness("volatile-ttl", 2);
        t.0.run(&["SET", "far", "v", "EX", "5000"]);
        t.0.run(&["SET", "near", "v", "EX", "50"]);
        t.0.run(&["SET", "mid", "v", "EX", "500"]);
        assert_eq!(evict(&mut t), Outcome::Ok);
        assert!(!exists(&mut t.0, "near"));
        assert!(exists(&mut t.0, "far") && exists(&mut t.0, "mid"));
    }

    #[test]
    fn allkeys_lru_takes_the_longest_idle() {
        let mut t = harness("allkeys-lru", 4);
        for i in 0..6 {
            t.0.run(&["SET", &format!("k{i}"), "v"]);
        }
        // k0 and k1 were last used 100 s ago.
        let clock = lru_clock(crate::time::wall_ms());
        for k in ["k0", "k1"] {
            let hash = t.0.shard.hash_key(k.as_bytes());
            if let Some(e) = t.0.shard.dbs[0].get_mut(hash, k.as_bytes()) {
                e.lru_s = clock - 100;
            }
        }
        assert_eq!(evict(&mut t), Outcome::Ok);
        assert!(!exists(&mut t.0, "k0") && !exists(&mut t.0, "k1"));
        for i in 2..6 {
            assert!(exists(&mut t.0, &format!("k{i}")));
        }
    }

    #[test]
    fn allkeys_lfu_takes_the_least_frequent() {
        let mut t = harness("allkeys-lfu", 2);
        for k in ["hot", "warm", "cold"] {
            t.0.run(&["SET", k, "v"]);
        }
        assert_eq!(t.0.run(&["OBJECT", "FREQ", "cold"]), ":5\r\n");
        let minutes = lfu_minutes(crate::time::wall_ms());
        for (k, counter) in [("hot", 200u32), ("warm", 100), ("cold", 1)] {
            let hash = t.0.shard.hash_key(k.as_bytes());
            if let Some(e) = t.0.shard.dbs[0].get_mut(hash, k.as_bytes()) {
                e.lru_s = (minutes << 8) | counter;
            }
        }
        assert_eq!(evict(&mut t), Outcome::Ok);
        assert!(!exists(&mut t.0, "cold"));
        assert!(exists(&mut t.0, "hot") && exists(&mut t.0, "warm"));
    }

    #[test]
    fn eviction_produces_no_op_and_dirties_watch() {
        let mut t = harness("allkeys-random", 1);
        t.0.run(&["SET", "a", "v"]);
        t.0.run(&["SET", "b", "v"]);
        let seq = t.0.shard.seq;
        let ops = t.0.shard.oplog.ops();
        t.0.run(&["WATCH", "a", "b"]);
        assert_eq!(evict(&mut t), Outcome::Ok);
        assert_eq!(t.0.shard.key_count(), 1);
        // Local only: no sequence number, no op for the peers.
        assert_eq!(t.0.shard.seq, seq);
        assert_eq!(t.0.shard.oplog.ops(), ops);
        t.0.run(&["MULTI"]);
        t.0.run(&["PING"]);
        assert_eq!(t.0.run(&["EXEC"]), "*-1\r\n");
    }

    /// A write stamped by another site, applied to `key` as the syncer would.
    fn remote(h: &mut Harness, key: &str, hlc: u64, effect: Effect<&[u8]>) -> bool {
        let stamp = Stamp {
            hlc: meridian_crdt::Hlc(hlc),
            replica: meridian_crdt::ReplicaId::for_site_shard("b", 0),
        };
        let hash = h.shard.hash_key(key.as_bytes());
        let now = crate::time::wall_ms();
        h.shard
            .apply_stamped(0, hash, key.as_bytes(), now, stamp, &effect);
        exists(h, key)
    }

    #[test]
    fn a_change_to_an_evicted_key_stays_a_miss_until_a_whole_write_that_saw_it() {
        let mut h = Harness::new();
        h.shard.peers = 1;
        assert_eq!(h.run(&["INCRBY", "cnt", "10"]), ":10\r\n");
        assert!(h.shard.evict_key(0, b"cnt"));
        assert_eq!(h.shard.evict.evicted.len(), 1);
        let at_eviction = h.shard.evicted_mark(0, b"cnt").cloned().unwrap();
        assert_eq!(at_eviction.received.first().map(|(_, t)| t.n), Some(1));
        // A peer's increment: not materialised, counted into the mark.
        let incr = Effect::Incr {
            delta: meridian_crdt::Delta::Int(1),
            at: IncAt::Starts,
        };
        assert!(!remote(&mut h, "cnt", 1 << 40, incr));
        let mark = h.shard.evicted_mark(0, b"cnt").cloned().unwrap();
        assert_eq!(mark.received.len(), 2);
        assert_eq!(h.shard.stats.evicted_writes_not_applied, 1);
        // A SET that saw only what the key held at the eviction: not whole.
        let partial = Effect::Assign {
            value: &b"5"[..],
            observed: at_eviction.removal(),
            keep_ttl: false,
        };
        assert!(!remote(&mut h, "cnt", 2 << 40, partial));
        // One that saw every write the mark records: whole.
        let whole = Effect::Assign {
            value: &b"7"[..],
            observed: h.shard.evicted_mark(0, b"cnt").unwrap().removal(),
            keep_ttl: false,
        };
        assert!(remote(&mut h, "cnt", 3 << 40, whole));
        assert_eq!(h.run(&["GET", "cnt"]), "$1\r\n7\r\n");
        assert!(h.shard.evict.evicted.is_empty());
        // The counter continues where the increments received left each origin: a
        // further increment shows alone on top of the SET, as at the sites that never
        // evicted the key.
        let incr = Effect::Incr {
            delta: meridian_crdt::Delta::Int(2),
            at: IncAt::After(IncTotals {
                run: meridian_crdt::Hlc(1 << 40),
                n: 2,
                int: 3,
                float: meridian_crdt::Dec::ZERO,
            }),
        };
        assert!(remote(&mut h, "cnt", 4 << 40, incr));
        assert_eq!(h.run(&["GET", "cnt"]), "$1\r\n9\r\n");
    }

    #[test]
    fn a_merge_into_an_evicted_key_is_not_materialised() {
        let mut h = Harness::new();
        h.shard.peers = 1;
        h.run(&["HSET", "h", "f", "1"]);
        let state = h.shard.dbs[0]
            .get(h.shard.hash_key(b"h"), b"h")
            .unwrap()
            .state
            .clone();
        assert!(h.shard.evict_key(0, b"h"));
        let ctx = meridian_crdt::Context::from(meridian_crdt::VersionVector::new());
        h.shard
            .merge_state(0, b"h", &state, &ctx, &ctx, crate::time::wall_ms());
        assert!(!exists(&mut h, "h"));
        assert_eq!(h.shard.evict.evicted.len(), 1);
    }

    #[test]
    fn a_local_write_to_an_evicted_key_writes_it_whole() {
        let mut h = Harness::new();
        h.shard.peers = 1;
        assert_eq!(h.run(&["INCRBY", "cnt", "10"]), ":10\r\n");
        assert!(h.shard.evict_key(0, b"cnt"));
        let ops = h.shard.oplog.ops();
        assert_eq!(h.run(&["INCR", "cnt"]), ":1\r\n");
        // A removal of what this site had seen of the key, then the increment (of the
        // same origin as the 10 evicted: its count continues from them).
        assert_eq!(h.shard.oplog.ops(), ops + 2);
        assert!(h.shard.evict.evicted.is_empty());
        assert_eq!(h.run(&["GET", "cnt"]), "$1\r\n1\r\n");
        assert_eq!(h.run(&["INCR", "cnt"]), ":2\r\n");
    }

    #[test]
    fn eviction_stops_at_the_marks_limit() {
        let mut t = harness("allkeys-random", 3);
        t.0.shard.peers = 1;
        t.0.shard.config.maxmemory_evicted_marks_max = 2;
        for k in ["a", "b", "c", "d", "e"] {
            t.0.run(&["SET", k, "v"]);
        }
        // Two keys over the limit: two evictions, two marks (at the marks' limit).
        assert_eq!(evict(&mut t), Outcome::Ok);
        assert_eq!(t.0.shard.evict.evicted.len(), 2);
        // One more key: a third mark would pass the limit.
        t.0.run(&["SET", "f", "v"]);
        assert_eq!(evict(&mut t), Outcome::Fail);
        assert_eq!(t.0.shard.key_count(), 4);
        assert_eq!(t.0.shard.stats.evicted_keys, 2);
        // A write that brings a marked key back frees a mark: eviction goes on.
        let (db, key) = t.0.shard.evict.evicted.keys().next().cloned().unwrap();
        assert_eq!(db, 0);
        t.0.run(&["SET", std::str::from_utf8(&key).unwrap(), "again"]);
        assert_eq!(t.0.shard.evict.evicted.len(), 1);
        t.0.run(&["DEL", "f"]);
        assert_eq!(evict(&mut t), Outcome::Ok);
        assert_eq!(t.0.shard.evict.evicted.len(), 2);
    }

    #[test]
    fn flushdb_removes_the_evicted_keys_everywhere_too() {
        let mut h = Harness::new();
        h.shard.peers = 1;
        h.run(&["SET", "gone", "v"]);
        h.run(&["SET", "kept", "v"]);
        assert!(h.shard.evict_key(0, b"gone"));
        let ops = h.shard.oplog.ops();
        assert_eq!(h.run(&["FLUSHDB"]), "+OK\r\n");
        // One removal for the key held, one for the key evicted.
        assert_eq!(h.shard.oplog.ops(), ops + 2);
        assert!(h.shard.evict.evicted.is_empty());
    }

    /// A shard with a peer evicts only keys whose writes the peer has said it holds: the
    /// others would be lost at every site by a later full sync from here (issue 20).
    #[test]
    fn only_keys_every_peer_holds_are_evicted() {
        let config = crate::config::Config {
            site: "a".to_string(),
            peer: vec!["b=127.0.0.1:7999".to_string()],
            maxmemory_policy: "allkeys-lru".to_string(),
            maxmemory_samples: 64,
            ..crate::config::Config::default()
        };
        let mut t = (
            Harness::with_shard(Shard::new(0, config, crate::time::wall_ms())),
            2 * KEY_BYTES,
        );
        t.0.shard.set_policy_flags();
        for k in ["a", "b", "c"] {
            t.0.run(&["SET", k, "v"]);
        }
        // The peer never acked: nothing may go, writes would get -OOM.
        assert_eq!(evict(&mut t), Outcome::Fail);
        assert_eq!(t.0.shard.stats.evicted_keys, 0);
        let held_back = t.0.shard.stats.evictions_held_back;
        assert!(held_back > 0);
        // Within HELD_BACK_RETRY_MS and with no new ack, the next check does not sample again.
        assert_eq!(evict(&mut t), Outcome::Fail);
        assert_eq!(t.0.shard.stats.evictions_held_back, held_back);
        // The peer acks what it holds: "a" and "b" (the ack before "c" was written).
        let before_c = {
            let mut vv = t.0.shard.delivered_vv();
            let c = t.0.shard.dbs[0]
                .get(t.0.shard.hash_key(b"c"), b"c")
                .unwrap()
                .state
                .observed()
                .stamps;
            let own = t.0.shard.replica;
            let mut cut = VersionVector::new();
            cut.observe(Stamp {
                hlc: meridian_crdt::Hlc(c.get(own).0 - 1),
                replica: own,
            });
            vv = crate::sync::gc::vv_min(&vv, &cut);
            vv
        };
        t.0.shard.sync.peers[0].acked = Some(before_c);
        assert_eq!(evict(&mut t), Outcome::Ok);
        assert_eq!(t.0.shard.stats.evicted_keys, 1);
        assert!(exists(&mut t.0, "c"), "c went before the peer held it");
        // One more key: only "c" is left besides one of "a"/"b", and the peer lacks "c".
        t.0.run(&["SET", "d", "v"]);
        assert_eq!(evict(&mut t), Outcome::Ok);
        assert_eq!(t.0.shard.stats.evicted_keys, 2);
        assert!(exists(&mut t.0, "c") && exists(&mut t.0, "d"));
        t.0.run(&["SET", "e", "v"]);
        assert_eq!(evict(&mut t), Outcome::Fail);
        // Once the peer holds everything, any key may go again.
        let all = t.0.shard.delivered_vv();
        t.0.shard.sync.peers[0].acked = Some(all);
        assert_eq!(evict(&mut t), Outcome::Ok);
        assert_eq!(t.0.shard.key_count(), 2);
    }

    #[test]
    fn a_site_without_peers_keeps_no_marks() {
        let mut h = Harness::new();
        h.run(&["SET", "k", "v"]);
        assert!(h.shard.evict_key(0, b"k"));
        assert!(h.shard.evict.evicted.is_empty());
    }

    #[test]
    fn a_sparse_table_still_yields_its_keys() {
        for policy in ["allkeys-lru", "allkeys-random", "volatile-ttl"] {
            let mut t = harness(policy, 5);
            t.0.shard.config.maxmemory_samples = 1;
            for i in 0..8_000 {
                t.0.run(&["SET", &format!("k{i}"), "v", "EX", "1000"]);
            }
            for i in 10..8_000 {
                t.0.run(&["DEL", &format!("k{i}")]);
            }
            assert!(t.0.shard.dbs[0].table.num_buckets() > 1 << 12, "{policy}");
            assert_eq!(evict(&mut t), Outcome::Ok, "{policy}");
            assert_eq!(t.0.shard.key_count(), 5, "{policy}");
        }
    }

    #[test]
    fn tenacity_is_redis_scale() {
        assert_eq!(time_limit_us(0), Some(0));
        assert_eq!(time_limit_us(10), Some(500));
        assert_eq!(time_limit_us(11), Some(575));
        assert_eq!(time_limit_us(99).map(|us| us / 1_000_000), Some(126));
        assert_eq!(time_limit_us(100), None);
    }

    #[test]
    fn pool_keeps_the_best_bounded() {
        let mut e = Eviction::new(ProcessMemory::new(1));
        for score in 0..(POOL_KEYS_MAX as u64 * 2) {
            e.offer(Candidate {
                score,
                db: 0,
                key: SmallBytes::copy_from(format!("k{score}").as_bytes()),
            });
        }
        // A key already in the pool is not added again.
        e.offer(Candidate {
            score: u64::MAX,
            db: 0,
            key: SmallBytes::copy_from(format!("k{}", POOL_KEYS_MAX * 2 - 1).as_bytes()),
        });
        assert_eq!(e.pool.len(), POOL_KEYS_MAX);
        assert_eq!(e.pool.first().map(|c| c.score), Some(POOL_KEYS_MAX as u64));
        assert_eq!(
            e.pool.last().map(|c| c.score),
            Some(POOL_KEYS_MAX as u64 * 2 - 1)
        );
    }
}

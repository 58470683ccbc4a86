//! The keyspace of one shard: logical databases of keys, each holding a CRDT `KeyState`.
//!
//! Every local write goes through `Shard::write_key`, which stamps it with the shard's hybrid
//! logical clock, applies the effect to the key's CRDT state, appends the op to the op log,
//! wakes WATCHers and drops the key once nothing is visible. Reads go through
//! `Shard::lookup_read`, which expires keys lazily first. Both are the only paths to the data.

use meridian_crdt::key::Applied;
use meridian_crdt::{Delta, Effect, KeyState, SmallBytes, Stamp};

use crate::shard::Shard;

mod table;
mod waiters;
pub use table::{KeyTable, Mark};
pub use waiters::{BlockRegistry, Wake, WatchFlag, Watcher};

/// One key: its name and CRDT state, in one allocation the table points to.
///
/// The table holds `Box<Entry>`: 8 bytes and a control byte per bucket, however large a key's
/// state is, so the half-empty buckets after each doubling cost little (Redis's dict buckets
/// are pointers too). Keys up to 22 bytes live inside the entry.
#[derive(Debug)]
pub struct Entry {
    pub key: SmallBytes,
    pub state: KeyState,
    /// Last access, in seconds of the shard's LRU clock (OBJECT IDLETIME).
    pub lru_s: u32,
    /// The encoding Redis would report for the string the last local write left, where the
    /// writing command decides it rather than the contents (`StrEnc`). A local hint only.
    pub str_enc: StrEnc,
    /// The state holds removal metadata (`KeyState::has_metadata`); see `Db::meta_keys`.
    pub meta: bool,
}

impl Entry {
    /// A new entry for `key` (its name copied once into the entry's storage).
    fn boxed(key: &[u8], state: KeyState, lru_s: u32) -> Box<Entry> {
        Box::new(Entry {
            key: SmallBytes::copy_from(key),
            state,
            lru_s,
            str_enc: StrEnc::Contents,
            meta: false,
        })
    }
}

/// How Redis would encode a string value, when the command that wrote it decides rather than
/// its contents (OBJECT ENCODING, OBJECT REFCOUNT). Each local assignment or increment sets it
/// (`Contents`, `Int`, `Text`), in-place edits mark `Raw`; remote writes leave it as it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum StrEnc {
    /// By its contents, as `tryObjectEncoding` leaves a SET value: int, embstr or raw.
    #[default]
    Contents,
    /// Modified in place (APPEND, SETRANGE, SETBIT, PFADD...): "raw" whatever its contents.
    Raw,
    /// An integer result (INCR, DECR, INCRBY, DECRBY): "int" (Redis's
    /// `createStringObjectFromLongLongForValue`), while the value reads as one.
    Int,
    /// INCRBYFLOAT's text (`createStringObjectFromLongDouble`): "embstr" up to 44 bytes,
    /// else "raw", never "int" even when it reads as an integer.
    Text,
}

// 96 is a jemalloc size class: the boxed entry takes exactly one.
const _: () = assert!(std::mem::size_of::<Entry>() <= 96);

/// One logical database (SELECT n).
#[derive(Debug)]
pub struct Db {
    /// The entries; grows by rehashing incrementally (`KeyTable`).
    pub table: KeyTable,
    /// Keys whose state carries a TTL (for INFO keyspace and to skip idle expiry cycles).
    pub expires: usize,
    /// Bucket index where the next active expiry cycle resumes.
    pub expire_cursor: usize,
    /// Estimated mean remaining TTL of the keys with one, in ms (`INFO keyspace` `avg_ttl`):
    /// a running average of the TTLs active expiry reads, each cycle's mean weighted 2%, as
    /// Redis estimates it. 0 while no key has a TTL.
    pub avg_ttl_ms: u64,
    /// Entries holding only removal metadata (a deleted key kept until its removal is causally
    /// stable): in the table, but not keys to clients.
    // Invariant: equals the number of entries whose state `is_empty()`.
    pub empty: usize,
    /// Entries holding removal metadata, which garbage collection must visit: with none, a
    /// GC step does no work (`sync::gc`).
    // Invariant: equals the number of entries with `meta` set, and every entry's `meta`
    // equals `state.has_metadata()` (kept by `settle`, `collect_bucket` and `insert_loaded`,
    // the only places a stored state changes).
    pub meta_keys: usize,
}

/// Folds one expiry cycle's mean TTL (`sum_ms / samples`, `samples > 0`) into the running
/// estimate with a weight of 2%, the first cycle's mean taken whole (Redis's
/// `activeExpireCycle` arithmetic, so `INFO keyspace` moves the way Redis's does).
fn running_avg_ttl(prev_ms: u64, sum_ms: u128, samples: u64) -> u64 {
    let mean = u64::try_from(sum_ms / u128::from(samples.max(1))).unwrap_or(u64::MAX);
    let prev = if prev_ms == 0 { mean } else { prev_ms };
    (prev / 50) * 49 + mean / 50
}

impl Db {
    pub fn new() -> Db {
        Db {
            table: KeyTable::new(),
            expires: 0,
            expire_cursor: 0,
            avg_ttl_ms: 0,
            empty: 0,
            meta_keys: 0,
        }
    }

    /// Keys clients can see (entries holding only removal metadata are not counted).
    pub fn len(&self) -> usize {
        self.table.len().saturating_sub(self.empty)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn get(&self, hash: u64, key: &[u8]) -> Option<&Entry> {
        self.table.get(hash, key)
    }

    pub fn get_mut(&mut self, hash: u64, key: &[u8]) -> Option<&mut Entry> {
        self.table.get_mut(hash, key)
    }

    /// Collects the causally stable removal metadata (`stable` covers only writes every
    /// replica not quarantined has delivered, `everywhere` those every replica has: see
    /// `KeyState::collect_with`) of the entry in bucket `index`, in place (the GC scan: no key
    /// copy, no second lookup), and removes the entry when nothing is left. Returns whether
    /// the entry still holds metadata; `None` when the bucket is empty.
    pub fn collect_bucket(
        &mut self,
        index: usize,
        stable: &meridian_crdt::VersionVector,
        everywhere: &meridian_crdt::VersionVector,
    ) -> Option<bool> {
        let e = self.table.get_bucket_mut(index)?;
        let had_ttl = e.state.expire_at_ms().is_some();
        let was_empty = e.state.is_empty();
        e.state.collect_with(stable, everywhere);
        let meta = e.state.has_metadata();
        let was_meta = std::mem::replace(&mut e.meta, meta);
        let remove = e.state.is_empty() && !meta;
        let ttl_gone = had_ttl && (remove || e.state.expire_at_ms().is_none());
        if ttl_gone {
            self.expires = self.expires.saturating_sub(1);
        }
        if was_empty && remove {
            self.empty = self.empty.saturating_sub(1);
        }
        self.count_meta((was_meta, meta));
        if remove {
            self.table.remove_bucket(index);
        }
        Some(!remove && meta)
    }

    /// Keeps `meta_keys` after an entry's `meta` went from `.0` to `.1`.
    fn count_meta(&mut self, (was, is): (bool, bool)) {
        match (was, is) {
            (false, true) => self.meta_keys += 1,
            (true, false) => self.meta_keys = self.meta_keys.saturating_sub(1),
            _ => {}
        }
    }
}

impl Default for Db {
    fn default() -> Self {
        Self::new()
    }
}

/// Entries a rehash cycle moves between two readings of the clock.
const REHASH_CYCLE_BATCH_ENTRIES: usize = 256;

/// Seconds on the 24-bit LRU clock Redis uses for OBJECT IDLETIME.
pub fn lru_clock(now_ms: u64) -> u32 {
    ((now_ms / 1000) & 0x00ff_ffff) as u32
}

/// `Entry::lru_s` of an entry just created, before its first `AccessClock::touched`.
pub const NEW_ENTRY: u32 = u32::MAX;
/// Redis's `LFU_INIT_VAL`: the frequency counter of a new key.
pub const LFU_INIT_VAL: u32 = 5;

/// What an access writes into `Entry::lru_s`, as Redis's `robj->lru`: under an LRU (or no)
/// eviction policy the LRU clock; under an LFU policy (`maxmemory-policy *-lfu`) 16 bits of
/// minutes and an 8-bit logarithmic frequency counter (OBJECT FREQ).
#[derive(Debug, Clone, Copy)]
pub enum AccessClock {
    Lru(u32),
    Lfu {
        minutes: u32,
        log_factor: u64,
        decay_time: u64,
        /// A uniform random number in [0, 1] for `LFULogIncr`.
        r: f64,
    },
}

impl AccessClock {
    /// The field after an access of an entry whose field was `prev`.
    pub fn touched(self, prev: u32) -> u32 {
        match self {
            AccessClock::Lru(clock) => clock,
            AccessClock::Lfu {
                minutes,
                log_factor,
                decay_time,
                r,
            } => {
                if prev == NEW_ENTRY {
                    return (minutes << 8) | LFU_INIT_VAL;
                }
                let mut counter = lfu_decayed(prev, minutes, decay_time);
                // `LFULogIncr`.
                if counter < 255 {
                    let base = counter.saturating_sub(LFU_INIT_VAL) as f64;
                    if r < 1.0 / (base * log_factor as f64 + 1.0) {
                        counter += 1;
                    }
                }
                (minutes << 8) | counter
            }
        }
    }
}

/// Redis's `LFUGetTimeInMinutes`: minutes on a 16-bit clock.
pub fn lfu_minutes(now_ms: u64) -> u32 {
    ((now_ms / 60_000) & 0xffff) as u32
}

/// Redis's `LFUDecrAndReturn`: the counter of an LFU field, less one per `decay_time`
/// minutes since its last access.
pub fn lfu_decayed(field: u32, minutes: u32, decay_time: u64) -> u32 {
    let ldt = (field >> 8) & 0xffff;
    let counter = field & 0xff;
    let elapsed = if minutes >= ldt {
        minutes - ldt
    } else {
        65_535 - ldt + minutes
    };
    let periods = u64::from(elapsed).checked_div(decay_time).unwrap_or(0);
    counter.saturating_sub(u32::try_from(periods).unwrap_or(u32::MAX))
}

/// Whether `state` shows a value whose TTL has passed at `now_ms` (`expire_if_needed`
/// removes it).
fn expire_due(state: &KeyState, now_ms: u64) -> bool {
    !state.is_empty() && state.expire_at_ms().is_some_and(|at| at <= now_ms)
}

/// What a write did, for the handler's reply.
#[derive(Debug, Clone, Copy, Default)]
pub struct Written {
    pub applied: Applied,
    /// Whether the key held a visible value before the write.
    pub existed: bool,
}

impl Shard {
    /// What an access at `now_ms` writes into an entry's `lru_s` (`AccessClock`).
    #[inline]
    pub fn access_clock(&mut self, now_ms: u64) -> AccessClock {
        if !self.lfu {
            return AccessClock::Lru(lru_clock(now_ms));
        }
        // xorshift64: LFULogIncr needs only a cheap uniform draw.
        let mut x = self.lfu_rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.lfu_rng = x;
        AccessClock::Lfu {
            minutes: lfu_minutes(now_ms),
            log_factor: self.config.lfu_log_factor,
            decay_time: self.config.lfu_decay_time,
            r: (x >> 11) as f64 / (1u64 << 53) as f64,
        }
    }

    pub fn hash_key(&self, key: &[u8]) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Looks keys up in `db` for nothing but the memory caches: a pipeline's look-ahead
    /// (`conn::Conn::look_ahead`) runs it for the keys of the commands after the first, so
    /// that their table probes, each a few cache misses in a large table, overlap instead of
    /// each waiting on memory in turn. Changes nothing (no expiry, statistics or LRU clock).
    /// `hashed` holds each key with its `hash_key`: the hashes come first so that the probes
    /// follow one another closely enough for the processor to run them side by side.
    pub fn warm_keys(&self, db: usize, hashed: &[(u64, &[u8])]) {
        let Some(d) = self.dbs.get(db) else {
            return;
        };
        for &(hash, key) in hashed {
            if let Some(e) = d.get(hash, key) {
                std::hint::black_box(e.lru_s);
            }
        }
    }

    /// Whether `db` is a valid index (handlers check it before touching a database).
    pub fn db_ok(&self, db: usize) -> bool {
        db < self.dbs.len()
    }

    /// Looks a key up for reading: expires it first when its TTL has passed, counts a
    /// keyspace hit or miss, and refreshes its LRU clock. `None` when it does not exist.
    pub fn lookup_read(&mut self, db: usize, key: &[u8], now_ms: u64) -> Option<&KeyState> {
        let hash = self.hash_key(key);
        if self.expire_if_needed(db, hash, key, now_ms) && self.expiry_paused(now_ms) {
            self.stats.keyspace_misses += 1;
            self.notify(crate::notify::KEY_MISS, "keymiss", db, key);
            return None;
        }
        let clock = self.access_clock(now_ms);
        if self.notifies(crate::notify::KEY_MISS) && !self.key_exists_quiet(db, key) {
            self.stats.keyspace_misses += 1;
            self.notify(crate::notify::KEY_MISS, "keymiss", db, key);
            return None;
        }
        let found = self
            .dbs
            .get_mut(db)
            .and_then(|d| d.get_mut(hash, key))
            .filter(|e| !e.state.is_empty());
        match found {
            Some(e) => {
                e.lru_s = clock.touched(e.lru_s);
                self.stats.keyspace_hits += 1;
                Some(&e.state)
            }
            None => {
                self.stats.keyspace_misses += 1;
                None
            }
        }
    }

    /// Looks a key up without touching statistics or the LRU clock (TYPE-like inspection,
    /// write preparation). Expires it first when its TTL has passed.
    pub fn lookup_quiet(&mut self, db: usize, key: &[u8], now_ms: u64) -> Option<&Entry> {
        let hash = self.hash_key(key);
        // One probe in the usual case (no TTL due); the bucket index serves the answer.
        let index = self.dbs.get(db)?.table.find_index(hash, key)?;
        let due = self
            .dbs
            .get(db)
            .and_then(|d| d.table.get_bucket(index))
            .is_some_and(|e| expire_due(&e.state, now_ms));
        if due {
            if self.expire_if_needed(db, hash, key, now_ms) && self.expiry_paused(now_ms) {
                return None;
            }
            return self
                .dbs
                .get(db)
                .and_then(|d| d.get(hash, key))
                .filter(|e| !e.state.is_empty());
        }
        self.dbs
            .get(db)
            .and_then(|d| d.table.get_bucket(index))
            .filter(|e| !e.state.is_empty())
    }

    /// Applies one local write to `key` in `db`. `build` sees the key's current state (empty
    /// when the key does not exist) and returns the effect; the effect is stamped, applied,
    /// logged and replicated. Expired keys are removed first, as Redis does before a write.
    pub fn write_key<B, F>(&mut self, db: usize, key: &[u8], now_ms: u64, build: F) -> Written
    where
        B: AsRef<[u8]>,
        F: FnOnce(&KeyState) -> Effect<B>,
    {
        let hash = self.hash_key(key);
        // One probe decides the usual case: no TTL due and no orphan TTL.
        let due = self
            .dbs
            .get(db)
            .and_then(|d| d.get(hash, key))
            .is_some_and(|e| expire_due(&e.state, now_ms) || e.state.has_orphan_expire());
        if due {
            self.expire_if_needed(db, hash, key, now_ms);
            // A TTL left on an empty key by a concurrent EXPIRE ∥ DEL must not attach to the
            // key this write may create: Redis creates keys without a TTL.
            let orphan = self
                .dbs
                .get(db)
                .and_then(|d| d.get(hash, key))
                .filter(|e| e.state.has_orphan_expire())
                .map(|e| e.state.remove_effect::<&[u8]>());
            if let Some(effect) = orphan {
                let mut effect = effect;
                self.apply_effect(db, hash, key, now_ms, &mut effect);
            }
        }
        let empty = KeyState::new();
        let (effect, existed) = {
            let current = self
                .dbs
                .get(db)
                .and_then(|d| d.get(hash, key))
                .map(|e| &e.state);
            let state = current.unwrap_or(&empty);
            (build(state), !state.is_empty())
        };
        let mut effect = effect;
        let applied = self.apply_effect(db, hash, key, now_ms, &mut effect);
        if !existed && self.notifies(crate::notify::NEW) && self.key_exists_quiet(db, key) {
            // Redis's dbAdd: before the command's own event.
            self.notify(crate::notify::NEW, "new", db, key);
        }
        Written { applied, existed }
    }

    /// Applies, logs and replicates the write that retires `key`'s TTL writes once they time
    /// nothing and no write concurrent with them can still arrive
    /// (`KeyState::retire_expire_effect`; `everywhere`: what every replica has delivered).
    /// Returns whether it wrote. Housekeeping of the garbage collection: no keyspace event,
    /// no client woken.
    pub fn retire_expire(
        &mut self,
        db: usize,
        key: &[u8],
        now_ms: u64,
        everywhere: &meridian_crdt::VersionVector,
    ) -> bool {
        let hash = self.hash_key(key);
        let effect = self
            .dbs
            .get(db)
            .and_then(|d| d.get(hash, key))
            .and_then(|e| e.state.retire_expire_effect::<&[u8]>(everywhere));
        let Some(mut effect) = effect else {
            return false;
        };
        self.apply_effect(db, hash, key, now_ms, &mut effect);
        true
    }

    /// `write_key` for a write that changes nothing a client can read: the re-add of a member
    /// a set already holds, replicated so that it wins over a remove at another site that
    /// did not see it (docs/conflicts.md §3). It neither fails a WATCH nor wakes a blocked
    /// client, as Redis's SADD and SMOVE signal nothing when they add nothing.
    pub fn write_key_unseen<B, F>(
        &mut self,
        db: usize,
        key: &[u8],
        now_ms: u64,
        build: F,
    ) -> Written
    where
        B: AsRef<[u8]>,
        F: FnOnce(&KeyState) -> Effect<B>,
    {
        self.unseen_write = true;
        let w = self.write_key(db, key, now_ms, build);
        self.unseen_write = false;
        w
    }

    /// Stamps and applies `effect` as a local op on `key` (hash given), logs it, wakes
    /// watchers and removes the key's entry when nothing visible or pending is left.
    fn apply_effect<B: AsRef<[u8]>>(
        &mut self,
        db: usize,
        hash: u64,
        key: &[u8],
        now_ms: u64,
        effect: &mut Effect<B>,
    ) -> Applied {
        // A key this site evicted is written whole (docs/conflicts.md §18): first removed,
        // at every site, as far as this site had seen it, so that the write acts on the
        // same (nothing) everywhere, as it does here. `apply_stamped` takes the mark.
        if let Some(removal) = self
            .evicted_mark(db, key)
            .map(crate::evict::EvictedMark::removal)
        {
            self.apply_local::<&[u8]>(
                db,
                hash,
                key,
                now_ms,
                &mut Effect::Remove { observed: removal },
            );
        }
        self.apply_local(db, hash, key, now_ms, effect)
    }

    /// `apply_effect` once the key is not marked evicted.
    fn apply_local<B: AsRef<[u8]>>(
        &mut self,
        db: usize,
        hash: u64,
        key: &[u8],
        now_ms: u64,
        effect: &mut Effect<B>,
    ) -> Applied {
        self.clamp_context(db, hash, key, effect);
        let effect = &*effect;
        let hlc = self.clock.tick(now_ms);
        let stamp = Stamp {
            hlc,
            replica: self.replica,
        };
        self.seq += 1;
        let seq = self.seq;
        let applied = self.apply_stamped(db, hash, key, now_ms, stamp, effect);
        // A string's encoding by the command that wrote it (`StrEnc`): an assignment goes by
        // its contents, INCR and its kin leave an integer, INCRBYFLOAT text.
        let str_enc = match effect {
            Effect::Assign { .. } => Some(StrEnc::Contents),
            Effect::Incr {
                delta: Delta::Int(_),
                ..
            } => Some(StrEnc::Int),
            Effect::Incr {
                delta: Delta::Float(_),
                ..
            } => Some(StrEnc::Text),
            _ => None,
        };
        if let Some(str_enc) = str_enc {
            if let Some(e) = self.dbs.get_mut(db).and_then(|d| d.get_mut(hash, key)) {
                e.str_enc = str_enc;
            }
        }
        let record = self.oplog.append(seq, hlc, db, key, effect);
        self.persist.append_op(record, Some(seq));
        self.sync.own_last = hlc;
        self.sync.ops_appended();
        applied
    }

    /// Limits the removal context of a local key-level effect (DEL, SET over a value, EXPIRE,
    /// SREM) to writes this site has seen: for each origin, what it delivered from it or the
    /// key still holds of it. A key's merged removal contexts may name, through another
    /// site's removal, writes of a third site not delivered here yet (contexts are version
    /// vectors: a prefix of each origin); carried as they are, they would remove a write no
    /// client here ever saw (docs/conflicts.md §0). Checked without allocating; the key is
    /// scanned only when the context goes beyond what was delivered.
    fn clamp_context<B: AsRef<[u8]>>(
        &self,
        db: usize,
        hash: u64,
        key: &[u8],
        effect: &mut Effect<B>,
    ) {
        let ctx: &mut meridian_crdt::VersionVector = match effect {
            Effect::Assign { observed, .. } | Effect::Remove { observed } => &mut observed.stamps,
            Effect::Expire { observed, .. }
            | Effect::ExpireRetire { observed }
            | Effect::SetRem { observed, .. } => observed,
            Effect::Incr { .. }
            | Effect::StrEdit(_)
            | Effect::SetAdd { .. }
            | Effect::Hash(_)
            | Effect::ZSet(_)
            | Effect::List(_)
            | Effect::Hll(_)
            | Effect::Stream(_) => return,
        };
        let known = |r: meridian_crdt::ReplicaId| {
            if r == self.replica {
                self.sync.own_last
            } else {
                self.sync.delivered.get(r)
            }
        };
        if ctx.iter().all(|(r, h)| h <= known(r)) {
            return;
        }
        let live = self
            .dbs
            .get(db)
            .and_then(|d| d.get(hash, key))
            .map(|e| e.state.live_stamps())
            .unwrap_or_default();
        ctx.clamp_by(|r| known(r).max(live.get(r)));
    }

    /// Applies an effect stamped elsewhere (a local op, or a remote one from the syncer):
    /// the one path by which `KeyState`s change. Then the bookkeeping every write does.
    pub fn apply_stamped<B: AsRef<[u8]>>(
        &mut self,
        db: usize,
        hash: u64,
        key: &[u8],
        now_ms: u64,
        stamp: Stamp,
        effect: &Effect<B>,
    ) -> Applied {
        // A key this shard evicted: its own writes (of any life) come after the removal
        // `apply_effect` issued (replay meets them in the same order); a peer's is applied
        // only when it carries the whole value (`admit_on_evicted`).
        // Either way the key's counter then continues from the increments this shard had
        // received of each origin (`EvictedMark::received`).
        let mut seed = None;
        if !self.evict.evicted.is_empty() {
            if stamp.replica == self.replica || self.sync.lives.contains(&stamp.replica) {
                seed = self.take_evicted_mark(db, key).map(|m| m.received);
            } else {
                match self.admit_on_evicted(db, key, stamp, effect) {
                    crate::evict::Admit::Unmarked => {}
                    crate::evict::Admit::Whole(received) => seed = Some(received),
                    // Not materialised: no keyspace event either.
                    crate::evict::Admit::Dropped => {
                        return Applied {
                            ignored: true,
                            ..Applied::default()
                        };
                    }
                }
            }
        }
        let lru = self.access_clock(now_ms);
        let stable = self.peers == 0;
        let Some((entry, was_empty)) = self.entry_for_write(db, hash, key) else {
            return Applied::default();
        };
        let had_ttl = entry.state.expire_at_ms().is_some();
        // With no peers `settle` collects every write at once: a string edit folds in place
        // (the same state, without the metadata collected right after).
        let folded = if stable {
            entry.state.apply_folded(stamp, effect)
        } else {
            None
        };
        let applied = match folded {
            Some(a) => a,
            None => entry.state.apply(stamp, effect),
        };
        if let Some(received) = &seed {
            entry.state.seed_counter_totals(received);
        }
        self.settle(db, hash, key, had_ttl, was_empty, lru);
        if applied.type_conflict {
            self.stats.type_conflicts += 1;
        }
        if applied.ignored && stamp.replica != self.replica && !self.persist.recovering {
            if let Some(n) = self
                .stats
                .remote_lost
                .get_mut(crate::stats::effect_kind(effect))
            {
                *n += 1;
            }
        }
        applied
    }

    /// Merges a key's CRDT state received in a full sync into the live key (a join: what
    /// either side wrote survives, what either side removed having seen it goes), then does
    /// the bookkeeping of a write. `mine` and `theirs`: this shard's causal context and the
    /// sender's (`KeyState::merge_with_contexts`, docs/replication.md §5).
    pub fn merge_state(
        &mut self,
        db: usize,
        key: &[u8],
        state: &KeyState,
        mine: &meridian_crdt::Context,
        theirs: &meridian_crdt::Context,
        now_ms: u64,
    ) {
        self.log_merged_state(db, key, state, mine, theirs);
        // Merged into a key this shard evicted, the state would lose what this shard's
        // context covers and no longer holds: the key stays a miss here.
        if !self.evict.evicted.is_empty() && !self.admit_merge_on_evicted(db, key, state) {
            return;
        }
        let hash = self.hash_key(key);
        let lru = self.access_clock(now_ms);
        let Some((entry, was_empty)) = self.entry_for_write(db, hash, key) else {
            return;
        };
        let had_ttl = entry.state.expire_at_ms().is_some();
        let applied = entry.state.merge_with_contexts(state, mine, theirs);
        if applied.type_conflict {
            self.stats.type_conflicts += 1;
        }
        self.settle(db, hash, key, had_ttl, was_empty, lru);
    }

    /// The entry a write to `key` changes, created empty when absent, and whether it held
    /// only removal metadata before (`None`: no such database).
    fn entry_for_write(&mut self, db: usize, hash: u64, key: &[u8]) -> Option<(&mut Entry, bool)> {
        let d = self.dbs.get_mut(db)?;
        // A present key (the usual write) in one probe.
        if let Some(index) = d.table.find_index(hash, key) {
            let entry = d.table.get_bucket_mut(index)?;
            let was_empty = entry.state.is_empty();
            return Some((entry, was_empty));
        }
        let was_empty = false;
        let hasher = &self.hasher;
        let entry = d.table.get_or_insert(
            hash,
            key,
            || Entry::boxed(key, KeyState::new(), NEW_ENTRY),
            &|k| hasher.hash_one(k),
        );
        Some((entry, was_empty))
    }

    /// What follows every change of a key's state: LRU clock, metadata collection when the
    /// site has no peers, TTL count, removal of an entry with nothing left, WATCH
    /// invalidation and waking blocked clients.
    fn settle(
        &mut self,
        db: usize,
        hash: u64,
        key: &[u8],
        had_ttl: bool,
        was_empty: bool,
        lru: AccessClock,
    ) {
        let keep_metadata = self.peers > 0;
        let Some(d) = self.dbs.get_mut(db) else {
            return;
        };
        let mut remove = false;
        let mut now_empty = false;
        let mut meta_change = (false, false);
        let mut ttl_gained = false;
        // One probe: the bucket index serves the update, the marks and the removal.
        let index = d.table.find_index(hash, key);
        if let Some(e) = index.and_then(|i| d.table.get_bucket_mut(i)) {
            e.lru_s = lru.touched(e.lru_s);
            // With no peers every write is causally stable at once: drop removal metadata now,
            // so a single site keeps neither tombstones nor removal contexts.
            if !keep_metadata && e.state.has_metadata() {
                e.state.collect_all();
            }
            let meta = e.state.has_metadata();
            meta_change = (std::mem::replace(&mut e.meta, meta), meta);
            if e.state.is_empty() {
                remove = !meta;
                now_empty = !remove;
            }
            let has_ttl = !remove && e.state.expire_at_ms().is_some();
            match (had_ttl, has_ttl) {
                (false, true) => {
                    d.expires += 1;
                    ttl_gained = true;
                }
                (true, false) => d.expires = d.expires.saturating_sub(1),
                _ => {}
            }
        }
        if let Some(i) = index {
            if ttl_gained {
                d.table.mark(i, Mark::Ttl);
            }
            if meta_change == (false, true) {
                d.table.mark(i, Mark::Metadata);
            }
        }
        match (was_empty, now_empty) {
            (false, true) => d.empty += 1,
            (true, false) => d.empty = d.empty.saturating_sub(1),
            _ => {}
        }
        d.count_meta(meta_change);
        if let (true, Some(i)) = (remove, index) {
            d.table.remove_bucket(i);
        }
        self.stats.dirty += 1;
        // A re-add changes nothing a client reads: no WATCH, wake-up or invalidation.
        if !self.unseen_write {
            self.touch_watched(db, key);
            self.signal_key_ready(db, key);
            if self.tracking.active() {
                self.tracking_key_changed(key);
            }
        }
    }

    /// Inserts a key loaded from a snapshot (recovery). Returns false when the key is
    /// already there (a damaged snapshot).
    pub fn insert_loaded(&mut self, db: usize, key: &[u8], state: KeyState, now_ms: u64) -> bool {
        let hash = self.hash_key(key);
        let first_access = self.access_clock(now_ms).touched(NEW_ENTRY);
        let hasher = &self.hasher;
        let Some(d) = self.dbs.get_mut(db) else {
            return false;
        };
        let empty = state.is_empty();
        let has_ttl = !empty && state.expire_at_ms().is_some();
        let meta = state.has_metadata();
        let mut e = Entry::boxed(key, state, first_access);
        e.meta = meta;
        if !d.table.insert_new(hash, e, &|k| hasher.hash_one(k)) {
            return false;
        }
        d.count_meta((false, meta));
        if empty {
            d.empty += 1;
        }
        if has_ttl {
            d.expires += 1;
        }
        true
    }

    /// Lends this shard copies of keys of other shards for the time of one command that only
    /// reads them (`crate::read_across`): each is inserted into `db` as it was read on its
    /// shard, unlogged and unannounced, so that the command's own code finds it where it
    /// finds its local keys. A copy whose TTL has passed at `now_ms` is left out (absent, as
    /// its shard would expire it); none can expire while the command runs, which reads the
    /// clock once. A copy's `StrEnc` is its entry's (OBJECT ENCODING, COPY). Returns the keys
    /// lent, for `take_back` after the command, or None (and nothing lent) when this shard
    /// holds an entry of one of them: a key of another shard's slots never is here.
    pub fn lend(
        &mut self,
        db: usize,
        copies: Vec<(Vec<u8>, KeyState, StrEnc)>,
        now_ms: u64,
    ) -> Option<Vec<Vec<u8>>> {
        let mut lent = Vec::with_capacity(copies.len());
        for (key, state, str_enc) in copies {
            if state.expire_at_ms().is_some_and(|at| at <= now_ms) {
                continue;
            }
            if !self.insert_loaded(db, &key, state, now_ms) {
                self.take_back(db, &lent);
                return None;
            }
            self.set_str_encoding(db, &key, str_enc);
            lent.push(key);
        }
        Some(lent)
    }

    /// Removes the keys `lend` inserted, unlogged, with the counts `insert_loaded` raised.
    pub fn take_back(&mut self, db: usize, keys: &[Vec<u8>]) {
        for key in keys {
            let hash = self.hash_key(key);
            let Some(d) = self.dbs.get_mut(db) else {
                return;
            };
            let Some(index) = d.table.find_index(hash, key) else {
                continue;
            };
            let (empty, ttl, meta) = match d.table.get_bucket(index) {
                Some(e) => {
                    let empty = e.state.is_empty();
                    (empty, !empty && e.state.expire_at_ms().is_some(), e.meta)
                }
                None => continue,
            };
            if d.table.remove_bucket(index) {
                d.count_meta((meta, false));
                if empty {
                    d.empty = d.empty.saturating_sub(1);
                }
                if ttl {
                    d.expires = d.expires.saturating_sub(1);
                }
            }
        }
    }

    /// Records that the string at `key` was modified in place (OBJECT ENCODING says "raw").
    pub fn mark_raw_encoding(&mut self, db: usize, key: &[u8]) {
        self.set_str_encoding(db, key, StrEnc::Raw);
    }

    /// SORT's conversion of the sorted set at `key` to Redis's skiplist encoding (a local
    /// hint: OBJECT ENCODING).
    pub fn convert_zset_to_skiplist(&mut self, db: usize, key: &[u8]) {
        let hash = self.hash_key(key);
        if let Some(e) = self.dbs.get_mut(db).and_then(|d| d.get_mut(hash, key)) {
            e.state.convert_zset_to_skiplist();
        }
    }

    /// Records how the command that wrote the string at `key` left it encoded (`StrEnc`).
    pub fn set_str_encoding(&mut self, db: usize, key: &[u8], str_enc: StrEnc) {
        let hash = self.hash_key(key);
        if let Some(e) = self.dbs.get_mut(db).and_then(|d| d.get_mut(hash, key)) {
            e.str_enc = str_enc;
        }
    }

    /// Expires `key` now if its TTL has passed: a local Remove of everything observed.
    /// Returns whether it expired. While CLIENT PAUSE holds, a key past its TTL is left in
    /// place (true is still returned: the key reads as missing), as Redis does.
    pub fn expire_if_needed(&mut self, db: usize, hash: u64, key: &[u8], now_ms: u64) -> bool {
        let observed = match self.dbs.get(db).and_then(|d| d.get(hash, key)) {
            Some(e) if expire_due(&e.state, now_ms) => {
                if self.expiry_paused(now_ms) {
                    return true;
                }
                e.state.observed()
            }
            _ => return false,
        };
        if self.tracking.active() {
            self.tracking_anonymous(|s| {
                s.apply_effect::<&[u8]>(db, hash, key, now_ms, &mut Effect::Remove { observed })
            });
        } else {
            self.apply_effect::<&[u8]>(db, hash, key, now_ms, &mut Effect::Remove { observed });
        }
        self.stats.expired_keys += 1;
        self.notify(crate::notify::EXPIRED, "expired", db, key);
        true
    }

    /// Deletes `key` (DEL/UNLINK): removes everything observed. Returns whether it existed.
    pub fn delete_key(&mut self, db: usize, key: &[u8], now_ms: u64) -> bool {
        let hash = self.hash_key(key);
        self.expire_if_needed(db, hash, key, now_ms);
        let observed = match self.dbs.get(db).and_then(|d| d.get(hash, key)) {
            Some(e) if !e.state.is_empty() => e.state.observed(),
            _ => return false,
        };
        self.apply_effect::<&[u8]>(db, hash, key, now_ms, &mut Effect::Remove { observed });
        true
    }

    /// Deletes `key` as UNLINK does: as `delete_key`, except that with no peers a value whose
    /// freeing costs more than `LAZYFREE_EFFORT_MIN` (`KeyState::free_effort`) is moved into
    /// `freed`, for the lazyfree thread to drop, as Redis's `dbAsyncDelete` does. Cheaper
    /// values, and every value while peers exist (the removal must see them), are removed
    /// here. Returns whether the key existed.
    pub fn unlink_key(
        &mut self,
        db: usize,
        key: &[u8],
        now_ms: u64,
        freed: &mut Vec<meridian_crdt::Value>,
    ) -> bool {
        let hash = self.hash_key(key);
        let costly = self.peers == 0
            && self.dbs.get(db).is_some_and(|d| {
                d.get(hash, key)
                    .is_some_and(|e| e.state.free_effort() > crate::lazyfree::LAZYFREE_EFFORT_MIN)
            });
        if costly {
            self.delete_key_taking(db, key, now_ms, freed)
        } else {
            self.delete_key(db, key, now_ms)
        }
    }

    /// `delete_key` that first moves the key's collection values into `out` (no peers only:
    /// `KeyState::take_collections`).
    fn delete_key_taking(
        &mut self,
        db: usize,
        key: &[u8],
        now_ms: u64,
        out: &mut Vec<meridian_crdt::Value>,
    ) -> bool {
        let hash = self.hash_key(key);
        self.expire_if_needed(db, hash, key, now_ms);
        let Some(d) = self.dbs.get_mut(db) else {
            return false;
        };
        let (observed, had_ttl, emptied) = match d.get_mut(hash, key) {
            Some(e) if !e.state.is_empty() => {
                let observed = e.state.observed();
                let had_ttl = e.state.expire_at_ms().is_some();
                let taken = e.state.take_collections();
                let emptied = !taken.is_empty() && e.state.is_empty();
                out.extend(taken);
                (observed, had_ttl, emptied)
            }
            _ => return false,
        };
        if emptied {
            // The entry holds nothing until its removal is applied: counted as `settle` will
            // find it (empty, without a TTL).
            d.empty += 1;
            if had_ttl {
                d.expires = d.expires.saturating_sub(1);
            }
        }
        self.apply_effect::<&[u8]>(db, hash, key, now_ms, &mut Effect::Remove { observed });
        true
    }

    /// Removes every key of `db` (FLUSHDB): one observed-remove per key. Returns the count.
    /// With `freed` (ASYNC) and no peers, the collection values are moved into it instead of
    /// being removed element by element (`KeyState::take_collections`), for the caller to
    /// free off the shard; each key's removal is still applied and logged here. With peers
    /// the removal runs on the values (a key keeps its removal metadata, docs/limits.md).
    pub fn flush_db(
        &mut self,
        db: usize,
        now_ms: u64,
        mut freed: Option<&mut Vec<meridian_crdt::Value>>,
    ) -> usize {
        let keys: Vec<SmallBytes> = match self.dbs.get(db) {
            Some(d) => d.table.iter().map(|e| e.key.clone()).collect(),
            None => return 0,
        };
        let mut n = 0;
        let lazy = self.peers == 0;
        for k in keys {
            match freed.as_deref_mut().filter(|_| lazy) {
                Some(out) => {
                    if self.delete_key_taking(db, &k, now_ms, out) {
                        n += 1;
                    }
                }
                None => {
                    if self.delete_key(db, &k, now_ms) {
                        n += 1;
                    }
                }
            }
        }
        // The keys this shard evicted go too, at every site, as far as this site had seen
        // them (docs/conflicts.md §18): the flush removes everything this site observed.
        let marked: Vec<SmallBytes> = self
            .evict
            .evicted
            .keys()
            .filter(|(d, _)| usize::from(*d) == db)
            .map(|(_, k)| k.clone())
            .collect();
        for k in marked {
            let hash = self.hash_key(&k);
            if let Some(removal) = self
                .evicted_mark(db, &k)
                .map(crate::evict::EvictedMark::removal)
            {
                self.apply_local::<&[u8]>(
                    db,
                    hash,
                    &k,
                    now_ms,
                    &mut Effect::Remove { observed: removal },
                );
            }
        }
        if let Some(d) = self.dbs.get_mut(db) {
            d.avg_ttl_ms = 0;
            if d.table.release_if_empty() {
                d.expire_cursor = 0;
            }
        }
        n
    }

    /// One active expiry cycle over `db`: examines the TTL marks of buckets from the saved
    /// cursor, expiring what has passed, until `buckets_max` buckets were examined or the end
    /// of the table.
    /// Returns the number of keys expired.
    pub fn active_expire_db(&mut self, db: usize, now_ms: u64, buckets_max: usize) -> usize {
        if self.expiry_paused(now_ms) {
            return 0;
        }
        let (start, n_buckets) = match self.dbs.get_mut(db) {
            Some(d) if d.expires > 0 => (d.expire_cursor, d.table.num_buckets()),
            Some(d) => {
                d.avg_ttl_ms = 0;
                return 0;
            }
            None => return 0,
        };
        let start = if start >= n_buckets { 0 } else { start };
        let end = start.saturating_add(buckets_max).min(n_buckets);
        let mut due: Vec<SmallBytes> = Vec::new();
        if let Some(d) = self.dbs.get_mut(db) {
            // Only buckets marked as holding a TTL are read (`Mark::Ttl`); a stale mark is
            // cleared on the way.
            let mut i = start;
            let (mut ttl_sum_ms, mut ttl_samples) = (0u128, 0u64);
            while let Some(b) = d.table.next_marked(Mark::Ttl, i, end) {
                match d.table.get_bucket(b) {
                    Some(e) => match e.state.expire_at_ms() {
                        Some(at) if at <= now_ms => {
                            if !e.state.is_empty() {
                                due.push(e.key.clone());
                            }
                        }
                        Some(at) => {
                            if !e.state.is_empty() {
                                ttl_sum_ms += u128::from(at - now_ms);
                                ttl_samples += 1;
                            }
                        }
                        None => d.table.unmark(b, Mark::Ttl),
                    },
                    None => d.table.unmark(b, Mark::Ttl),
                }
                i = b + 1;
            }
            d.expire_cursor = if end >= n_buckets { 0 } else { end };
            if ttl_samples > 0 {
                d.avg_ttl_ms = running_avg_ttl(d.avg_ttl_ms, ttl_sum_ms, ttl_samples);
            }
        }
        let mut expired = 0;
        for k in due {
            let hash = self.hash_key(&k);
            if self.expire_if_needed(db, hash, &k, now_ms) {
                expired += 1;
            }
        }
        expired
    }

    /// Moves up to `entries_max` entries of `db`'s incremental rehash, if one is in progress.
    pub fn rehash_db(&mut self, db: usize, entries_max: usize) {
        let hasher = &self.hasher;
        if let Some(d) = self.dbs.get_mut(db) {
            if d.table.is_rehashing() {
                d.table
                    .rehash_for(entries_max, &|k: &[u8]| hasher.hash_one(k));
            }
        }
    }

    /// Starts shrinking the databases' tables left sparse (`KeyTable::shrink_if_sparse`), then
    /// moves entries of their incremental rehashes for up to `budget` (the periodic cycle: a
    /// rehash finishes while the shard is idle, not only as new keys arrive). Returns the
    /// number of databases still rehashing.
    pub fn rehash_cycle(&mut self, budget: std::time::Duration) -> usize {
        let started = std::time::Instant::now();
        let hasher = &self.hasher;
        let hash_of = |k: &[u8]| hasher.hash_one(k);
        for d in self.dbs.iter_mut() {
            // Cursors (SCAN, active expiry, GC) stay valid: the table being shrunk keeps its
            // bucket indices, first in the combined space, as after a growth.
            d.table.shrink_if_sparse();
            while d.table.rehash_for(REHASH_CYCLE_BATCH_ENTRIES, &hash_of) {
                if started.elapsed() >= budget {
                    return self.dbs.iter().filter(|d| d.table.is_rehashing()).count();
                }
            }
        }
        0
    }

    /// Marks clients watching `key` dirty (their EXEC will fail), as Redis's
    /// `touchWatchedKey`: a watcher that found the key already expired is not, when the key
    /// is now gone (its deletion is no logical change; the mark goes), and is otherwise.
    pub fn touch_watched(&mut self, db: usize, key: &[u8]) {
        if self.watched.is_empty() {
            return;
        }
        let Some(watchers) = self.watched.get(&waiters::KeyRef(db, key)) else {
            return;
        };
        let gone = watchers.iter().any(|w| w.expired) && !self.key_exists_quiet(db, key);
        if let Some(watchers) = self.watched.get_mut(&waiters::KeyRef(db, key)) {
            for w in watchers.iter_mut() {
                if w.expired && gone {
                    w.expired = false;
                    continue;
                }
                w.flag.set(true);
            }
        }
    }

    /// The entry of `key` in `db` when it holds a value, its TTL passed or not, touching
    /// nothing (no expiry, statistics or LRU clock).
    pub fn peek(&self, db: usize, key: &[u8]) -> Option<&Entry> {
        let hash = self.hash_key(key);
        self.dbs
            .get(db)?
            .get(hash, key)
            .filter(|e| !e.state.is_empty())
    }

    /// Whether `key` of `db` has a value whose TTL has passed at `now_ms` (logically
    /// expired, not yet deleted).
    pub fn key_stale(&self, db: usize, key: &[u8], now_ms: u64) -> bool {
        self.peek(db, key)
            .is_some_and(|e| e.state.expire_at_ms().is_some_and(|at| at <= now_ms))
    }

    /// Redis's `isWatchedKeyExpired` for one key: whether `key` of `db`, WATCHed by the
    /// client whose flag is `dirty`, is expired now and was not already when watched (EXEC
    /// then fails as if the key had changed).
    pub fn watched_key_expired(
        &self,
        db: usize,
        key: &[u8],
        dirty: &WatchFlag,
        now_ms: u64,
    ) -> bool {
        self.key_stale(db, key, now_ms)
            && !self
                .watched
                .get(&waiters::KeyRef(db, key))
                .is_some_and(|ws| ws.iter().any(|w| w.expired && w.flag.same(dirty)))
    }

    /// Called by the write path for every keyspace write: wakes a client blocked on the key.
    /// Costs one emptiness check when no client is blocked.
    #[inline]
    pub fn signal_key_ready(&mut self, db: usize, key: &[u8]) {
        if !self.blocking.is_empty() {
            self.blocking.signal(db, key);
        }
    }

    /// Number of clients blocked on this shard's keys (INFO clients `blocked_clients`).
    pub fn blocked_count(&self) -> usize {
        self.blocking.len()
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::shard::Shard;

    /// The pipeline look-ahead changes nothing a client or the server's figures can see: no
    /// hit or miss counted, no LRU clock moved, an expired key left for its command to find.
    #[test]
    fn warm_keys_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let config = Config {
            dir: dir.path().to_path_buf(),
            ..Config::default()
        };
        let mut s = Shard::new(0, config, crate::time::wall_ms());
        crate::cmd::testing::run_on(&mut s, 0, &["SET", "k", "v"]);
        crate::cmd::testing::run_on(&mut s, 0, &["SET", "gone", "v", "PX", "1"]);
        let hk = s.hash_key(b"k");
        s.dbs[0].get_mut(hk, b"k").unwrap().lru_s = 0;
        std::thread::sleep(std::time::Duration::from_millis(5));
        let (hits, misses, keys) = (
            s.stats.keyspace_hits,
            s.stats.keyspace_misses,
            s.dbs[0].table.len(),
        );
        let hashed = [
            (hk, &b"k"[..]),
            (s.hash_key(b"gone"), &b"gone"[..]),
            (s.hash_key(b"absent"), &b"absent"[..]),
        ];
        s.warm_keys(0, &hashed);
        // A database that does not exist is no error.
        s.warm_keys(99, &hashed);
        assert_eq!(s.dbs[0].get(hk, b"k").unwrap().lru_s, 0);
        assert_eq!(s.stats.keyspace_hits, hits);
        assert_eq!(s.stats.keyspace_misses, misses);
        assert_eq!(s.dbs[0].table.len(), keys);
        assert_eq!(keys, 2);
    }
}

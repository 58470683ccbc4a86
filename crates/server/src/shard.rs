//! A shard: the part of the keyspace one thread owns, with everything that makes it durable
//! and replicated.
//!
//! A shard owns its databases, clock, sequence number, op log, persistence directory and
//! replication links outright, and the slots its keys hash to (`slot::SlotMap`). It knows
//! nothing of connections or commands: the keys a client WATCHes and the clients blocked on
//! its keys are flags and wake-ups registered here (`keyspace::waiters`), whatever thread the
//! clients live on. The command layer borrows a shard for the length of one command (or one
//! EXEC), never across an `.await`. No lock and no atomic is on the data path.

use std::sync::Arc;

use hashbrown::HashMap;
use meridian_crdt::{HlcClock, ReplicaId};

use crate::config::Config;
use crate::keyspace::{BlockRegistry, Db, WatchFlag, Watcher};
use crate::oplog::OpLog;
use crate::slot::SlotMap;
use crate::stats::Stats;

/// A watched key: (db, key).
pub type WatchedKey = (usize, Vec<u8>);

/// Delivers a message another site published: (channel, message, sharded, this shard's
/// settings (output limits), now in ms).
pub type Deliver = dyn Fn(&[u8], &[u8], bool, &Config, u64);

/// Where a message another site published goes: the site's subscribers (installed by the
/// server, which owns Pub/Sub; the shard only hands messages on).
pub struct PublishHook(pub Box<Deliver>);

impl std::fmt::Debug for PublishHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PublishHook")
    }
}

/// The state one shard thread owns.
#[derive(Debug)]
pub struct Shard {
    /// This shard's index in its site (`shard-N` directory, replica ids).
    pub index: u16,
    pub replica: ReplicaId,
    /// Runtime settings (CONFIG SET changes every shard's copy).
    pub config: Config,
    /// Which shard owns each slot; this one serves the keys of the slots it owns.
    pub slots: Arc<SlotMap>,
    pub dbs: Vec<Db>,
    /// Keyed hash for every keyspace table: clients choose keys, so it must resist HashDoS.
    pub hasher: ahash::RandomState,
    pub clock: HlcClock,
    /// Sequence number of the last op this shard originated.
    pub seq: u64,
    pub oplog: OpLog,
    /// The on-disk log and snapshots (`persist`); disabled until `open_persistence`.
    pub persist: crate::persist::Persist,
    /// Number of peer sites; with none, removal metadata is dropped at once.
    pub peers: usize,
    /// The thread that frees what FLUSHALL ASYNC and FLUSHDB ASYNC took out (`lazyfree`).
    pub lazyfree: crate::lazyfree::LazyFree,
    /// Replication: incarnation, delivered vector, peers, links (`sync`).
    pub sync: crate::sync::SyncState,
    /// Keyspace counters (hits, misses, expiries, writes); command counters are the
    /// connection threads'.
    pub stats: Stats,
    /// Keys watched by some client: (db, key) → its watchers.
    pub watched: HashMap<WatchedKey, Vec<Watcher>>,
    /// Clients blocked in BLPOP and the like, by key.
    pub blocking: BlockRegistry,
    /// Messages other sites published (`sync::apply`).
    pub publish_hook: Option<PublishHook>,
    /// Where keyspace notifications go: this process's subscribers (`notify`).
    pub notify_hook: Option<PublishHook>,
    /// The `notify-keyspace-events` classes (`notify::parse`), kept equal to the parameter
    /// by `set_notify_flags`: 0, the default, publishes nothing.
    pub notify_flags: u32,
    /// Client-side caching: who read which key, what a change sends (`tracking`).
    pub tracking: crate::tracking::Tracking,
    /// Set when the server is shutting down.
    pub shutting_down: bool,
    /// Lua scripting: engines, script cache, libraries, the running script (`script`).
    pub scripting: crate::script::Scripting,
    /// Users, their permissions and the ACL log (per site, not replicated).
    pub acl: crate::acl::Acl,
    /// CLIENT PAUSE in force (`cmd::client`): commands it covers are postponed and keys do
    /// not expire until it ends.
    pub pause: Option<ClientPause>,
    /// `maxmemory-policy` is an LFU one: accesses keep frequency counters, not LRU clocks
    /// (`keyspace::AccessClock`). Kept equal to the policy by `set_policy_flags`.
    pub lfu: bool,
    /// State of the draws LFU counters use.
    pub lfu_rng: u64,
    /// Eviction under `maxmemory` (`crate::evict`).
    pub evict: crate::evict::Eviction,
    /// Set while `write_key_unseen` writes: the write changes nothing a client reads, so it
    /// neither fails WATCH nor wakes blocked clients.
    pub unseen_write: bool,
}

/// A CLIENT PAUSE: which commands wait, and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientPause {
    /// ALL: every command waits; WRITE: commands that write or may replicate.
    pub all: bool,
    /// Shard milliseconds at which the pause ends.
    pub end_ms: u64,
}

impl Shard {
    /// Shard `index` of a one-shard site (tests, background snapshots of one shard).
    pub fn new(index: u16, config: Config, now_ms: u64) -> Shard {
        Shard::in_site(index, Arc::new(SlotMap::contiguous(1)), config, now_ms)
    }

    /// Shard `index` of a site whose slots `slots` spreads over its shards.
    pub fn in_site(index: u16, slots: Arc<SlotMap>, config: Config, now_ms: u64) -> Shard {
        let replica = ReplicaId::for_site_shard(&config.site, replica_shard(index));
        let appendonly = config.appendonly;
        let dbs = (0..config.databases).map(|_| Db::new()).collect();
        let mut oplog = OpLog::new(replica, config.backlog_bytes_max);
        let sync = crate::sync::SyncState::new(&config, index, now_ms, None);
        let peers = sync.peer_sites();
        // With no peers nobody will ever resume from the op log: keep only the current chunk.
        oplog.set_retain_for_peers(peers > 0);
        let mut shard = Shard {
            index,
            replica,
            slots,
            dbs,
            hasher: ahash::RandomState::new(),
            clock: HlcClock::new(),
            seq: 0,
            oplog,
            // The log's role follows the configuration until `open_persistence` opens it.
            persist: crate::persist::Persist::unopened(appendonly),
            peers,
            lazyfree: crate::lazyfree::LazyFree::default(),
            sync,
            stats: Stats::default(),
            watched: HashMap::new(),
            blocking: BlockRegistry::default(),
            publish_hook: None,
            notify_hook: None,
            notify_flags: 0,
            tracking: crate::tracking::Tracking::default(),
            shutting_down: false,
            scripting: crate::script::Scripting::new(),
            acl: crate::acl::Acl::new(),
            pause: None,
            lfu: false,
            lfu_rng: 0x9e37_79b9_7f4a_7c15,
            evict: crate::evict::Eviction::new(crate::evict::ProcessMemory::new(1)),
            unseen_write: false,
            config,
        };
        if !shard.config.requirepass.is_empty() {
            let pass = shard.config.requirepass.clone();
            shard.acl.set_requirepass(pass.as_bytes());
        }
        shard.set_life(0);
        shard.set_policy_flags();
        shard.set_notify_flags();
        shard.stats.used_memory_startup = crate::cmd::server::memory_use().allocated;
        shard
    }

    /// Wall-clock milliseconds, shifted by the test-only `debug-clock-offset-ms`.
    pub fn now_ms(&self) -> u64 {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        wall.saturating_add_signed(self.config.debug_clock_offset_ms)
    }

    /// Total keys with a visible or pending state, over all databases.
    pub fn key_count(&self) -> usize {
        self.dbs.iter().map(Db::len).sum()
    }

    /// This shard's index as replica ids carry it (8 bits; `slot::SHARDS_MAX`).
    pub fn replica_shard(&self) -> u8 {
        replica_shard(self.index)
    }

    /// Whether every slot this shard owns is in `set`.
    pub fn slots_within(&self, set: &crate::slot::SlotSet) -> bool {
        self.slots
            .ranges_of(self.index)
            .iter()
            .all(|&(a, b)| (a..=b).all(|slot| set.contains(slot)))
    }

    /// Whether this shard owns `slot`.
    #[inline]
    pub fn owns_slot(&self, slot: u16) -> bool {
        self.slots.shard_of_slot(slot) == self.index
    }

    /// Drops every watch whose flag is `dirty` (UNWATCH, EXEC, DISCARD, disconnect).
    pub fn unwatch_all(&mut self, dirty: &WatchFlag) {
        if self.watched.is_empty() {
            return;
        }
        self.watched.retain(|_, watchers| {
            watchers.retain(|w| !w.flag.same(dirty));
            !watchers.is_empty()
        });
    }

    /// Forgets what a departed client left here: its watches and its blocked registration.
    pub fn forget_client(&mut self, id: u64, dirty: &WatchFlag) {
        self.blocking.unregister(id);
        self.unwatch_all(dirty);
    }
}

/// A shard index as replica ids carry it: 8 bits (`slot::SHARDS_MAX` keeps indices below 256).
pub fn replica_shard(index: u16) -> u8 {
    u8::try_from(index).unwrap_or(u8::MAX)
}

impl Shard {
    /// Reads the flags the access path keeps from `maxmemory-policy`.
    pub fn set_policy_flags(&mut self) {
        self.lfu = self.config.maxmemory_policy.ends_with("-lfu");
    }

    /// The CLIENT PAUSE in force at `now_ms`, if any (one that ended is forgotten).
    pub fn pause_at(&mut self, now_ms: u64) -> Option<ClientPause> {
        match self.pause {
            Some(p) if p.end_ms > now_ms => Some(p),
            Some(_) => {
                self.pause = None;
                None
            }
            None => None,
        }
    }

    /// Whether expiry is suspended (any CLIENT PAUSE, as in Redis: a paused server neither
    /// deletes expired keys nor replicates their deletion; they read as missing).
    pub fn expiry_paused(&self, now_ms: u64) -> bool {
        self.pause.is_some_and(|p| p.end_ms > now_ms)
    }
}

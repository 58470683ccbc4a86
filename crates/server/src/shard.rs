//! A shard: one thread, one single-threaded runtime, and the part of the keyspace it owns.
//!
//! The shard owns its databases, clock, op log, statistics and client registry outright;
//! connection tasks on the same thread borrow it for the length of one command, never across
//! an `.await`. No lock and no atomic is on the data path.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;

use hashbrown::HashMap;
use meridian_crdt::{HlcClock, ReplicaId};

use crate::blocking::BlockRegistry;
use crate::client::ClientShared;
use crate::cmd::pubsub::PubSub;
use crate::cmd::table::Table;
use crate::config::Config;
use crate::keyspace::Db;
use crate::oplog::OpLog;
use crate::stats::{LatencyMonitor, SlowLog, Stats};

/// A watched key: (db, key).
pub type WatchedKey = (usize, Vec<u8>);
/// A WATCHing client's flag, set when a key it watches changes.
pub type DirtyFlag = Rc<Cell<bool>>;

/// The state one shard thread owns.
#[derive(Debug)]
pub struct Shard {
    pub index: u8,
    pub replica: ReplicaId,
    /// Runtime settings (CONFIG SET changes them).
    pub config: Config,
    pub table: &'static Table,
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
    /// Replication: incarnation, delivered vector, peers, links (`sync`).
    pub sync: crate::sync::SyncState,
    pub stats: Stats,
    pub slowlog: SlowLog,
    pub latency: LatencyMonitor,
    /// Connected clients by id (ids increase, so this is connection order).
    pub clients: BTreeMap<u64, Rc<ClientShared>>,
    pub next_client_id: u64,
    /// Keys watched by some client: (db, key) → the watchers' dirty flags.
    pub watched: HashMap<WatchedKey, Vec<DirtyFlag>>,
    /// Clients in MONITOR mode.
    pub monitors: Vec<Rc<ClientShared>>,
    /// Pub/Sub subscriptions (`cmd::pubsub`).
    pub pubsub: PubSub,
    /// Clients blocked in BLPOP and the like, by key (`blocking`).
    pub blocking: BlockRegistry,
    /// Process start, for INFO uptime.
    pub started_ms: u64,
    /// 40 hex characters naming this run (INFO run_id).
    pub run_id: String,
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
    pub fn new(index: u8, config: Config, table: &'static Table, now_ms: u64) -> Shard {
        let replica = ReplicaId::for_site_shard(&config.site, index);
        let dbs = (0..config.databases).map(|_| Db::new()).collect();
        let mut oplog = OpLog::new(replica, config.backlog_bytes_max);
        let sync = crate::sync::SyncState::new(&config, index, now_ms, None);
        let peers = sync.peers.len();
        // With no peers nobody will ever resume from the op log: keep only the current chunk.
        oplog.set_retain_for_peers(peers > 0);
        let slowlog = SlowLog::new(config.slowlog_max_len);
        let mut shard = Shard {
            index,
            replica,
            table,
            dbs,
            hasher: ahash::RandomState::new(),
            clock: HlcClock::new(),
            seq: 0,
            oplog,
            persist: crate::persist::Persist::disabled(),
            peers,
            sync,
            stats: Stats::new(table.len()),
            slowlog,
            latency: LatencyMonitor::default(),
            clients: BTreeMap::new(),
            next_client_id: 1,
            watched: HashMap::new(),
            monitors: Vec::new(),
            pubsub: PubSub::default(),
            blocking: BlockRegistry::default(),
            started_ms: now_ms,
            run_id: random_hex40(),
            shutting_down: false,
            scripting: crate::script::Scripting::new(),
            acl: crate::acl::Acl::new(),
            pause: None,
            lfu: false,
            lfu_rng: 0x9e37_79b9_7f4a_7c15,
            config,
        };
        if !shard.config.requirepass.is_empty() {
            let pass = shard.config.requirepass.clone();
            shard.acl.set_requirepass(pass.as_bytes());
        }
        shard.set_life(0);
        shard.set_policy_flags();
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

    /// Registers a new client and returns its shared state.
    pub fn register_client(
        &mut self,
        addr: std::net::SocketAddr,
        laddr: std::net::SocketAddr,
        now_ms: u64,
    ) -> Rc<ClientShared> {
        let id = self.next_client_id;
        self.next_client_id += 1;
        let shared = Rc::new(ClientShared::new(id, addr, laddr, now_ms));
        self.clients.insert(id, shared.clone());
        self.stats.total_connections_received += 1;
        shared
    }

    /// Forgets a client: its registry entry, monitor slot, watches, subscriptions and
    /// blocking registration.
    pub fn unregister_client(&mut self, id: u64, dirty: &Rc<Cell<bool>>) {
        if let Some(c) = self.clients.remove(&id) {
            self.pubsub.unsubscribe_all(&c);
        }
        self.blocking.unregister(id);
        self.monitors.retain(|m| m.id != id);
        self.unwatch_all(dirty);
    }

    /// Drops every watch whose flag is `dirty` (UNWATCH, EXEC, DISCARD, disconnect).
    pub fn unwatch_all(&mut self, dirty: &Rc<Cell<bool>>) {
        if self.watched.is_empty() {
            return;
        }
        self.watched.retain(|_, flags| {
            flags.retain(|f| !Rc::ptr_eq(f, dirty));
            !flags.is_empty()
        });
    }
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

fn random_hex40() -> String {
    use rand::RngExt as _;
    let mut rng = rand::rng();
    (0..40)
        .map(|_| char::from_digit(rng.random_range(0..16u32), 16).unwrap_or('0'))
        .collect()
}

//! What the threads of one process share: the node.
//!
//! A node is one `meridian server` process: N shard threads, each owning one shard and the
//! connections the acceptor handed it. Threads share nothing mutable on the data path; they
//! talk by messages (`hop`). What is process-wide lives here: the slot map, each thread's
//! inbox, and the registries every connection must see whichever thread it is on (Pub/Sub,
//! MONITOR, the slow log and the latency monitor, client ids and the client count). Those
//! registries are behind locks taken only off the data path (a subscription, a publish, a
//! slow command, a MONITOR line when someone monitors).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::mpsc;

use crate::client::Mailbox;
use crate::cmd::pubsub::PubSub;
use crate::hop::Msg;
use crate::numa::Place;
use crate::slot::SlotMap;
use crate::stats::{LatencyMonitor, SlowLog};

/// Messages a thread's inbox holds before senders wait (a connection then stops reading its
/// socket until the shard catches up).
pub const INBOX_MSGS_MAX: usize = 1024;

/// The process-wide state of a node. See the module doc.
///
/// Shard indices are the site's: a node of a multi-node site (`--topology`) runs shards
/// `first..first + local`, the other nodes the rest.
#[derive(Debug)]
pub struct Node {
    /// Shards of the whole site (this node's and other nodes').
    pub shards: u16,
    /// The site index of this node's first shard.
    pub first: u16,
    /// Shard threads in this process.
    pub local: u16,
    /// Which shard owns each slot.
    pub slots: Arc<SlotMap>,
    /// The site's nodes when it has several (`--topology`), and which one this is.
    pub site: Option<Arc<crate::topology::SiteNodes>>,
    /// Each thread's inbox, by local thread index (shard - first).
    inboxes: Vec<mpsc::Sender<Msg>>,
    /// Where each shard thread runs.
    pub placement: Vec<Place>,
    /// The NUMA topology it was placed on (`Topology::describe`).
    pub numa: String,
    /// The Redis Cluster API's view of the shards (None: the API is off).
    pub cluster: Option<crate::topology::ClusterMap>,
    /// Pub/Sub subscriptions of every connection of the process.
    pub pubsub: Mutex<PubSub>,
    /// Clients in MONITOR mode, and their number (read without the lock on every command).
    monitors: Mutex<Vec<Arc<Mailbox>>>,
    monitors_n: AtomicUsize,
    pub slowlog: Mutex<SlowLog>,
    pub latency: Mutex<LatencyMonitor>,
    /// The ACL log, every shard's `Acl::log`.
    pub acl_log: Arc<Mutex<crate::acl::AclLog>>,
    /// The script bodies every shard's EVAL cache holds (`script::ScriptBodies`).
    pub script_bodies: crate::script::ScriptBodies,
    /// Scripts that stopped to run again with every shard held (`Front::script_reaches_beyond`).
    pub scripts_beyond: crate::front::SharedScriptsBeyond,
    next_client_id: AtomicU64,
    /// Connected clients over all threads (maxclients).
    clients_n: AtomicUsize,
    /// Round-robin position of the acceptor.
    next_thread: AtomicUsize,
    /// Scripts running past busy-reply-threshold, for the other threads' connections.
    pub busy: Arc<crate::script::busy::BusyBoard>,
    /// What the threads' shards share for used memory under `maxmemory` (`crate::evict`).
    pub memory: Arc<crate::evict::ProcessMemory>,
    /// Process start, for INFO uptime.
    pub started_ms: u64,
    /// 40 hex characters naming this run (INFO run_id).
    pub run_id: String,
    /// The TLS port's configuration (None: no `tls-port`).
    pub client_tls: Option<Arc<crate::tls::ClientTls>>,
    /// Every connected client's mailbox by id (a CLIENT TRACKING redirect is looked up here).
    pub directory: Mutex<hashbrown::HashMap<u64, Arc<Mailbox>>>,
    /// Clients with CLIENT TRACKING on, by id (INFO `tracking_clients`: its size).
    pub trackers: Mutex<hashbrown::HashMap<u64, Arc<crate::client::Tracker>>>,
    /// What every shard's tracking table shares: BCAST prefixes, the key count.
    pub tracking: Arc<crate::tracking::Shared>,
    /// The plain client port (`port`), and the listener CONFIG SET bound that the client
    /// port's loop on thread `first` has not taken yet (`server::switch_client_port`).
    pub client_port: Mutex<ClientPort>,
    /// Wakes that loop when `client_port` holds a new listener.
    pub client_port_changed: tokio::sync::Notify,
}

/// The plain client port as CONFIG SET last set it.
#[derive(Debug, Default)]
pub struct ClientPort {
    /// The port bound (0: none).
    pub port: u16,
    /// A switch not taken yet: the new listener (None: port 0, no listener).
    pub next: Option<Option<std::net::TcpListener>>,
}

/// Locks `m`, taking the data of a lock a panicking thread left (the registries stay
/// consistent between statements).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Node {
    /// A node of `slots.shards()` threads (or its topology's share of them); returns it and
    /// each thread's inbox receiver.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        slots: Arc<SlotMap>,
        site: Option<Arc<crate::topology::SiteNodes>>,
        placement: Vec<Place>,
        numa: String,
        cluster: Option<crate::topology::ClusterMap>,
        slowlog_len_max: u64,
        now_ms: u64,
        client_tls: Option<Arc<crate::tls::ClientTls>>,
    ) -> (Arc<Node>, Vec<mpsc::Receiver<Msg>>) {
        let shards = slots.shards();
        let (first, local) = match &site {
            Some(t) => t.local(),
            None => (0, shards),
        };
        let (inboxes, receivers): (Vec<_>, Vec<_>) =
            (0..local).map(|_| mpsc::channel(INBOX_MSGS_MAX)).unzip();
        let node = Node {
            shards,
            first,
            local,
            slots,
            site,
            inboxes,
            placement,
            numa,
            cluster,
            pubsub: Mutex::new(PubSub::default()),
            monitors: Mutex::new(Vec::new()),
            monitors_n: AtomicUsize::new(0),
            slowlog: Mutex::new(SlowLog::new(slowlog_len_max)),
            latency: Mutex::new(LatencyMonitor::default()),
            acl_log: Arc::default(),
            script_bodies: Arc::default(),
            scripts_beyond: Default::default(),
            next_client_id: AtomicU64::new(1),
            clients_n: AtomicUsize::new(0),
            next_thread: AtomicUsize::new(0),
            busy: Arc::new(crate::script::busy::BusyBoard::new(usize::from(local))),
            memory: crate::evict::ProcessMemory::new(usize::from(local)),
            started_ms: now_ms,
            run_id: random_hex40(),
            client_tls,
            directory: Mutex::default(),
            trackers: Mutex::default(),
            tracking: Arc::default(),
            client_port: Mutex::default(),
            client_port_changed: tokio::sync::Notify::new(),
        };
        (Arc::new(node), receivers)
    }

    /// The inbox of shard `shard`'s thread (None: the shard is on another node).
    pub fn inbox(&self, shard: u16) -> Option<&mpsc::Sender<Msg>> {
        self.inboxes
            .get(usize::from(shard.checked_sub(self.first)?))
    }

    /// Whether shard `shard` runs in this process.
    pub fn is_local(&self, shard: u16) -> bool {
        shard >= self.first && shard - self.first < self.local
    }

    /// The shards of this process.
    pub fn local_shards(&self) -> std::ops::Range<u16> {
        self.first..self.first + self.local
    }

    /// The cluster endpoint ("ip:port") of shard `shard` on another node of the site.
    pub fn remote_endpoint(&self, shard: u16) -> Option<&str> {
        if self.is_local(shard) {
            return None;
        }
        self.site.as_ref()?.endpoint(shard)
    }

    /// The thread (shard) the next accepted connection goes to (round robin).
    pub fn next_conn_thread(&self) -> u16 {
        let n = self.next_thread.fetch_add(1, Ordering::Relaxed);
        self.first + (n % usize::from(self.local.max(1))) as u16
    }

    /// A new client id (ids increase over the whole process, as Redis's).
    pub fn client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Counts a client in; returns the number connected before it.
    pub fn client_connected(&self) -> usize {
        self.clients_n.fetch_add(1, Ordering::Relaxed)
    }

    pub fn client_gone(&self) {
        self.clients_n.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn clients(&self) -> usize {
        self.clients_n.load(Ordering::Relaxed)
    }

    /// Whether some client monitors (one relaxed load: the check every command makes).
    #[inline]
    pub fn monitored(&self) -> bool {
        self.monitors_n.load(Ordering::Relaxed) > 0
    }

    pub fn add_monitor(&self, m: Arc<Mailbox>) {
        let mut v = lock(&self.monitors);
        v.push(m);
        self.monitors_n.store(v.len(), Ordering::Relaxed);
    }

    pub fn remove_monitor(&self, id: u64) {
        let mut v = lock(&self.monitors);
        v.retain(|m| m.id != id);
        self.monitors_n.store(v.len(), Ordering::Relaxed);
    }

    /// Sends one MONITOR line to every monitor but `from`; a monitor whose pending output
    /// breaks `limit` (the normal class's) is closed.
    pub fn feed_monitors(
        &self,
        from: u64,
        line: &[u8],
        limit: &crate::config::OutputLimit,
        now_ms: u64,
    ) {
        for m in lock(&self.monitors).iter() {
            if m.id != from && !m.is_killed() && m.push_within(line, limit, now_ms) {
                m.wake.notify_one();
            }
        }
    }
}

fn random_hex40() -> String {
    use rand::RngExt as _;
    let mut rng = rand::rng();
    (0..40)
        .map(|_| char::from_digit(rng.random_range(0..16u32), 16).unwrap_or('0'))
        .collect()
}

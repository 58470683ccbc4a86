//! What a thread owns for its connections: the front of a shard thread.
//!
//! Each shard thread also runs the connections the acceptor handed it. Their registry
//! (CLIENT LIST, CLIENT KILL, INFO clients), the command counters of the commands that ran on
//! this thread (INFO stats, commandstats, errorstats; merged over threads at INFO) and the
//! command table live here; the keyspace is the shard's (`shard`).

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::client::ClientShared;
use crate::cmd::table::Table;
use crate::node::Node;
use crate::stats::Stats;

#[derive(Debug)]
pub struct Front {
    /// The thread's index (the index of its shard).
    pub index: u16,
    pub node: Arc<Node>,
    pub table: &'static Table,
    /// Connected clients of this thread by id (ids increase, so this is connection order).
    pub clients: BTreeMap<u64, Rc<ClientShared>>,
    /// Command and connection counters of this thread.
    pub stats: Stats,
    /// Subscribers given messages by this thread's PUBLISHes and not yet woken: woken once
    /// per pipeline round (`wake_deferred`), so one wake-up carries a round's messages and
    /// the output limit sees them together, as in one-threaded Redis.
    pub deferred_wakes: Vec<Arc<crate::client::Mailbox>>,
    /// Clients blocked on this thread's shard's keys (whatever thread their connection is
    /// on), with what serving them here needs (`blocking::serve_ready`), by client id.
    pub parked: std::collections::HashMap<u64, crate::blocking::Parked>,
    /// Clients blocked by a pop over keys of several shards that count here (their
    /// `blocked_clients` registration is this thread's shard's), by client id.
    pub cross_waits: std::collections::HashMap<u64, std::sync::Arc<crate::blocking::CrossWait>>,
    /// MONITOR lines of the script running now, held until it ends (`cmd::scripting`): a run
    /// that stops to start again on its keys' shard (`Scripting::relocate`) shows nothing,
    /// so MONITOR shows the script once, as Redis does. None: lines go out at once.
    pub monitor_held: Option<Vec<(u64, Vec<u8>)>>,
}

impl Front {
    pub fn new(index: u16, node: Arc<Node>, table: &'static Table) -> Front {
        Front {
            index,
            node,
            table,
            clients: BTreeMap::new(),
            stats: Stats::new(table.len()),
            deferred_wakes: Vec::new(),
            parked: std::collections::HashMap::new(),
            cross_waits: std::collections::HashMap::new(),
            monitor_held: None,
        }
    }

    /// Wakes the subscribers that this thread's PUBLISHes gave messages since the last call.
    pub fn wake_deferred(&mut self) {
        for m in self.deferred_wakes.drain(..) {
            m.wake.notify_one();
        }
    }

    /// Registers a new client (`id` from `Node::client_id`) and returns its shared state.
    pub fn register_client(
        &mut self,
        id: u64,
        addr: std::net::SocketAddr,
        laddr: std::net::SocketAddr,
        now_ms: u64,
    ) -> Rc<ClientShared> {
        let shared = Rc::new(ClientShared::new(id, addr, laddr, now_ms));
        self.clients.insert(id, shared.clone());
        crate::node::lock(&self.node.directory).insert(id, shared.mailbox.clone());
        self.stats.total_connections_received += 1;
        shared
    }

    /// Forgets a client of this thread: its registry entry, MONITOR slot and subscriptions
    /// (what it left on shards is the connection's to clean up).
    pub fn unregister_client(&mut self, id: u64) {
        if let Some(c) = self.clients.remove(&id) {
            crate::node::lock(&self.node.directory).remove(&id);
            crate::cmd::tracking::disable(&self.node, &c);
            crate::node::lock(&self.node.pubsub).unsubscribe_all(&c);
            if c.is_monitor.get() {
                self.node.remove_monitor(id);
            }
        }
    }
}

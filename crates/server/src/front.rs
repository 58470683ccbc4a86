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
    /// This thread's copy of the process's scripts that stopped to run again with every
    /// shard held (`Node::scripts_beyond`), as of generation `scripts_beyond_seen`.
    scripts_beyond: ScriptsBeyond,
    scripts_beyond_seen: u64,
}

/// The scripts (by `ScriptsBeyond::key`: the command and its script or function name) that
/// reach beyond their declared keys' shards, at most `SCRIPTS_BEYOND_MAX` (then forgotten
/// all at once and learned again).
#[derive(Debug, Default, Clone)]
pub struct ScriptsBeyond(std::collections::HashSet<u64>);

/// The process's `ScriptsBeyond`, learned by any thread, and its generation (bumped by every
/// change), which threads compare with their copy's before they look a script up.
#[derive(Debug, Default)]
pub struct SharedScriptsBeyond {
    set: std::sync::Mutex<ScriptsBeyond>,
    generation: std::sync::atomic::AtomicU64,
}

/// Most scripts the process remembers as reaching beyond their declared keys' shards.
pub const SCRIPTS_BEYOND_MAX: usize = 1024;

impl ScriptsBeyond {
    /// The key of a script command `argv` (EVAL and its body, EVALSHA and its sha, FCALL and
    /// its function), None for another command.
    pub fn key(argv: &[&[u8]]) -> Option<u64> {
        use std::hash::{Hash, Hasher};
        let (name, script) = (argv.first()?, argv.get(1)?);
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let lower = |h: &mut std::collections::hash_map::DefaultHasher, b: &[u8]| {
            for c in b {
                h.write_u8(c.to_ascii_lowercase());
            }
            h.write_u8(0xff);
        };
        lower(&mut h, name);
        if name.eq_ignore_ascii_case(b"eval") || name.eq_ignore_ascii_case(b"eval_ro") {
            script.hash(&mut h);
        } else {
            lower(&mut h, script);
        }
        Some(h.finish())
    }

    /// Remembers script command `argv` (past the limit, after forgetting every other).
    pub fn learn(&mut self, argv: &[&[u8]]) {
        if let Some(k) = Self::key(argv) {
            if self.0.len() >= SCRIPTS_BEYOND_MAX {
                self.0.clear();
            }
            self.0.insert(k);
        }
    }

    /// Whether script command `argv` is remembered.
    pub fn knows(&self, argv: &[&[u8]]) -> bool {
        !self.0.is_empty() && Self::key(argv).is_some_and(|k| self.0.contains(&k))
    }
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
            scripts_beyond: ScriptsBeyond::default(),
            scripts_beyond_seen: 0,
        }
    }

    /// Whether script command `argv` stopped before, on any thread, to run again with every
    /// shard held (`Scripting::relocate`): the dispatcher then runs it so at once. One atomic
    /// load per script command; the thread's copy is refreshed when the process's changed.
    pub fn script_reaches_beyond(&mut self, argv: &[&[u8]]) -> bool {
        use std::sync::atomic::Ordering;
        let shared = &self.node.scripts_beyond;
        let generation = shared.generation.load(Ordering::Acquire);
        if generation != self.scripts_beyond_seen {
            self.scripts_beyond = crate::node::lock(&shared.set).clone();
            self.scripts_beyond_seen = generation;
        }
        self.scripts_beyond.knows(argv)
    }

    /// Records that script command `argv` stopped to run again with every shard held, for
    /// every thread (`script_reaches_beyond`).
    pub fn learn_script_beyond(&mut self, argv: &[&[u8]]) {
        use std::sync::atomic::Ordering;
        let shared = &self.node.scripts_beyond;
        let mut set = crate::node::lock(&shared.set);
        set.learn(argv);
        shared.generation.fetch_add(1, Ordering::Release);
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

#[cfg(test)]
mod scripts_beyond_tests {
    use super::*;

    #[test]
    fn scripts_are_known_by_command_and_script_up_to_the_limit() {
        let mut b = ScriptsBeyond::default();
        let eval: [&[u8]; 3] = [b"EVAL", b"return 1", b"0"];
        assert!(!b.knows(&eval));
        b.learn(&eval);
        assert!(b.knows(&[b"eval", b"return 1", b"1", b"k"]));
        assert!(
            !b.knows(&[b"eval", b"RETURN 1", b"0"]),
            "bodies are case-sensitive"
        );
        assert!(!b.knows(&[b"evalsha", b"return 1", b"0"]));
        b.learn(&[b"EVALSHA", b"ABCDEF", b"0"]);
        assert!(b.knows(&[b"evalsha", b"abcdef", b"0"]), "shas are not");
        assert!(ScriptsBeyond::key(&[b"eval"]).is_none());
        // At the limit, then one past it: forgotten all at once.
        let mut b = ScriptsBeyond::default();
        for i in 0..SCRIPTS_BEYOND_MAX {
            b.learn(&[b"fcall", format!("f{i}").as_bytes(), b"0"]);
        }
        assert_eq!(b.0.len(), SCRIPTS_BEYOND_MAX);
        assert!(b.knows(&[b"fcall", b"f0", b"0"]));
        b.learn(&[b"fcall", b"one more", b"0"]);
        assert_eq!(b.0.len(), 1);
        assert!(!b.knows(&[b"fcall", b"f0", b"0"]));
    }
}

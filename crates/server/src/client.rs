//! Per-connection state: what the connection task owns (`Client`) and what other connections
//! may read or signal (`ClientShared`, held in the shard's client registry for CLIENT LIST,
//! CLIENT KILL and INFO clients).

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;

use tokio::sync::Notify;

use crate::resp::reply::Proto;

/// State visible to other connections. Only the owning connection writes it, except `kill`.
#[derive(Debug)]
pub struct ClientShared {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    pub created_ms: u64,
    pub name: RefCell<Option<Vec<u8>>>,
    pub lib_name: RefCell<Option<Vec<u8>>>,
    pub lib_ver: RefCell<Option<Vec<u8>>>,
    pub db: Cell<usize>,
    pub proto: Cell<Proto>,
    /// Last command run (full name, e.g. "client|list"), for CLIENT LIST `cmd=`.
    pub last_cmd: Cell<&'static str>,
    pub last_interaction_ms: Cell<u64>,
    /// Bytes of unparsed input and of pending output, updated once per read.
    pub qbuf_bytes: Cell<usize>,
    pub obuf_bytes: Cell<usize>,
    /// Whether the client is inside MULTI (flag 'x').
    pub in_multi: Cell<bool>,
    /// Whether the client is a monitor (flag 'O').
    pub is_monitor: Cell<bool>,
    /// Number of keys watched (CLIENT LIST `watch=`).
    pub watched: Cell<usize>,
    /// Set by CLIENT KILL or shutdown; the connection closes at its next step.
    pub killed: Cell<bool>,
    /// Wakes the connection task when `killed` is set or monitor output is queued.
    pub wake: Notify,
    /// Lines queued for a MONITOR client.
    pub monitor_out: RefCell<Vec<u8>>,
}

impl ClientShared {
    pub fn new(id: u64, addr: SocketAddr, laddr: SocketAddr, now_ms: u64) -> ClientShared {
        ClientShared {
            id,
            addr,
            laddr,
            created_ms: now_ms,
            name: RefCell::new(None),
            lib_name: RefCell::new(None),
            lib_ver: RefCell::new(None),
            db: Cell::new(0),
            proto: Cell::new(Proto::Resp2),
            last_cmd: Cell::new("NULL"),
            last_interaction_ms: Cell::new(now_ms),
            qbuf_bytes: Cell::new(0),
            obuf_bytes: Cell::new(0),
            in_multi: Cell::new(false),
            is_monitor: Cell::new(false),
            watched: Cell::new(0),
            killed: Cell::new(false),
            wake: Notify::new(),
            monitor_out: RefCell::new(Vec::new()),
        }
    }

    pub fn kill(&self) {
        self.killed.set(true);
        self.wake.notify_one();
    }
}

/// A command queued by MULTI: owned copies of its arguments.
#[derive(Debug, Clone)]
pub struct QueuedCommand {
    pub args: Vec<Vec<u8>>,
}

/// MULTI state.
#[derive(Debug, Default)]
pub struct MultiState {
    pub queued: Vec<QueuedCommand>,
    /// A command failed to queue (unknown, wrong arity): EXEC answers EXECABORT.
    pub aborted: bool,
}

/// Limit on commands queued in one MULTI, so a client cannot grow memory without bound.
pub const MULTI_QUEUED_MAX: usize = 1_000_000;

/// State owned by the connection task.
#[derive(Debug)]
pub struct Client {
    pub shared: Rc<ClientShared>,
    /// Selected database index (mirrored in `shared.db`).
    pub db: usize,
    pub multi: Option<MultiState>,
    /// Keys this client WATCHes: (db, key).
    pub watched: Vec<(usize, Vec<u8>)>,
    /// Set by the shard when a watched key changes; EXEC then fails.
    pub dirty: Rc<Cell<bool>>,
    /// Close the connection after writing the pending replies (QUIT, protocol error).
    pub close_after_reply: bool,
}

impl Client {
    pub fn new(shared: Rc<ClientShared>) -> Client {
        Client {
            shared,
            db: 0,
            multi: None,
            watched: Vec::new(),
            dirty: Rc::new(Cell::new(false)),
            close_after_reply: false,
        }
    }

    pub fn id(&self) -> u64 {
        self.shared.id
    }

    pub fn select(&mut self, db: usize) {
        self.db = db;
        self.shared.db.set(db);
    }
}

//! Per-connection state: what the connection task owns (`Client`), what other connections
//! of its thread may read or signal (`ClientShared`, held in the thread's client registry for
//! CLIENT LIST, CLIENT KILL and INFO clients), and what any thread may hold of it
//! (`Mailbox`: push output and wake-up, for Pub/Sub, MONITOR, blocked commands and CLIENT
//! KILL; `WatchFlag`, for WATCH).

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

pub use crate::keyspace::WatchFlag;

use tokio::sync::Notify;

use crate::config::{OutputBufferLimits, OutputLimit};
use crate::resp::reply::Proto;

/// A read buffer wasting less than this is left as it is (Redis: 4 KiB).
pub const QUERY_BUF_SPARE_BYTES_MIN: usize = 4 * 1024;
/// Seconds without input after which a client's read buffer is given back whole (Redis:
/// more than 2).
pub const QUERY_BUF_IDLE_S: u64 = 2;
/// A read buffer this large or smaller is never trimmed to its peak (Redis's
/// `PROTO_RESIZE_THRESHOLD`).
pub const QUERY_BUF_RESIZE_BYTES_MIN: usize = 32 * 1024;

/// What any thread may hold of a client: the output other clients queue for it (MONITOR
/// lines, Pub/Sub messages, already encoded in its protocol), its wake-up and its kill
/// switch. Locks are taken only off the data path (a publish, a MONITOR line, a kill).
#[derive(Debug)]
pub struct Mailbox {
    pub id: u64,
    pub addr: SocketAddr,
    /// Out-of-band output, written by the connection before its next batch of replies.
    pub push_out: Mutex<Vec<u8>>,
    /// Wakes the connection task: push output queued, a key it is blocked on written, a
    /// kill.
    pub wake: Notify,
    killed: AtomicBool,
    /// The shard owning the keys it was blocked on served its blocked command (the reply is
    /// in `push_out`): the connection's wait is over (`deliver_served`, `take_served`).
    served: AtomicBool,
    /// The sequence number of the served command's last write on its shard (0: none), for
    /// WAIT and CRDT.WAIT after it.
    served_seq: AtomicU64,
    /// The client's protocol (0: RESP2, 1: RESP3), for encoding pushes on other threads.
    proto: AtomicU8,
    /// Whether the client has any Pub/Sub subscription (Redis's CLIENT_PUBSUB), for
    /// invalidations redirected to it in RESP2 (`cmd::tracking`).
    subscribed: AtomicBool,
    /// When the pending output last went from under to at or over its class's soft limit
    /// (wall-clock ms; 0: under it), for `output_over_limit`.
    obuf_soft_since_ms: AtomicU64,
    /// The cluster endpoint (shard index) the connection came in on; `MAIN_PORT`: the main
    /// port. PUBSUB asked on an endpoint counts only that node's subscribers, as each Redis
    /// Cluster node does (`cmd::pubsub`).
    endpoint: AtomicU32,
    /// The connection's socket descriptor (CLIENT LIST's `fd`); -1 until its socket is
    /// known. In the mailbox so that a command run for the connection on another thread
    /// (ACL LOG's `client-info`, CLIENT INFO in a script) gives it too.
    fd: AtomicI32,
}

impl Mailbox {
    pub fn new(id: u64, addr: SocketAddr) -> Mailbox {
        Mailbox {
            id,
            addr,
            push_out: Mutex::new(Vec::new()),
            wake: Notify::new(),
            killed: AtomicBool::new(false),
            served: AtomicBool::new(false),
            served_seq: AtomicU64::new(0),
            proto: AtomicU8::new(0),
            subscribed: AtomicBool::new(false),
            obuf_soft_since_ms: AtomicU64::new(0),
            endpoint: AtomicU32::new(Mailbox::MAIN_PORT),
            fd: AtomicI32::new(-1),
        }
    }

    /// `endpoint`'s value for a connection on the main port.
    pub const MAIN_PORT: u32 = u32::MAX;

    /// Records the cluster endpoint the connection came in on (None: the main port).
    pub fn set_endpoint(&self, endpoint: Option<u16>) {
        let v = endpoint.map_or(Mailbox::MAIN_PORT, u32::from);
        self.endpoint.store(v, Ordering::Relaxed);
    }

    /// The connection's socket descriptor (-1: none known).
    pub fn fd(&self) -> i32 {
        self.fd.load(Ordering::Relaxed)
    }

    pub fn set_fd(&self, fd: i32) {
        self.fd.store(fd, Ordering::Relaxed);
    }

    /// The cluster endpoint the connection came in on (None: the main port).
    pub fn endpoint(&self) -> Option<u16> {
        u16::try_from(self.endpoint.load(Ordering::Relaxed)).ok()
    }

    /// Redis's `checkClientOutputBufferLimits`: whether `pending` bytes of output break
    /// `limit`, at or over its hard bound, or at or over its soft bound for longer than its
    /// seconds without a break (the start of that stretch is kept in `obuf_soft_since_ms`).
    pub fn output_over_limit(&self, pending: usize, limit: &OutputLimit, now_ms: u64) -> bool {
        let pending = pending as u64;
        if limit.hard_bytes > 0 && pending >= limit.hard_bytes {
            return true;
        }
        if limit.soft_bytes == 0 || pending < limit.soft_bytes {
            self.obuf_soft_since_ms.store(0, Ordering::Relaxed);
            return false;
        }
        let since = self.obuf_soft_since_ms.load(Ordering::Relaxed);
        if since == 0 {
            self.obuf_soft_since_ms
                .store(now_ms.max(1), Ordering::Relaxed);
            return false;
        }
        now_ms.saturating_sub(since) > limit.soft_seconds.saturating_mul(1000)
    }

    pub fn proto(&self) -> Proto {
        if self.proto.load(Ordering::Relaxed) == 1 {
            Proto::Resp3
        } else {
            Proto::Resp2
        }
    }

    pub fn set_proto(&self, p: Proto) {
        self.proto
            .store(u8::from(p == Proto::Resp3), Ordering::Relaxed);
    }

    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// Whether the client has a Pub/Sub subscription.
    pub fn is_subscribed(&self) -> bool {
        self.subscribed.load(Ordering::Relaxed)
    }

    /// Closes the connection at its next step (CLIENT KILL, shutdown, an output limit).
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        self.wake.notify_one();
    }

    /// Appends push output; returns the bytes now pending.
    pub fn push(&self, bytes: &[u8]) -> usize {
        let mut buf = self.push_out.lock().unwrap_or_else(|e| e.into_inner());
        buf.extend_from_slice(bytes);
        buf.len()
    }

    /// Appends push output under its class's `limit`. When the output pending breaks it, the
    /// client is closed with that output dropped (Redis's
    /// `closeClientOnOutputBufferLimitReached`) and this answers false; otherwise true, and
    /// the caller wakes the connection (now, or once for a batch of messages).
    pub fn push_within(&self, bytes: &[u8], limit: &OutputLimit, now_ms: u64) -> bool {
        let pending = self.push(bytes);
        if !self.output_over_limit(pending, limit, now_ms) {
            return true;
        }
        tracing::warn!(client = %self.addr, "client scheduled to be closed ASAP for overcoming of output buffer limits");
        self.clear();
        self.kill();
        false
    }

    /// A shard served this client's blocked command: its reply goes out after the push
    /// output already pending, and the connection is woken to end its wait.
    pub fn deliver_served(&self, reply: &[u8], wrote_seq: u64) {
        let mut buf = self.push_out.lock().unwrap_or_else(|e| e.into_inner());
        buf.extend_from_slice(reply);
        self.served_seq.store(wrote_seq, Ordering::Relaxed);
        // Set under the lock: whoever sees the flag (`take_served` before `take`) finds the
        // reply in `push_out`.
        self.served.store(true, Ordering::Release);
        drop(buf);
        self.wake.notify_one();
    }

    /// Whether a shard served the blocked command since the last call (its reply is then in
    /// the push output: call this before `take`).
    pub fn take_served(&self) -> bool {
        self.served.swap(false, Ordering::AcqRel)
    }

    /// After `take_served` returned true: the sequence number of the served command's last
    /// write on the shard that served it (0: it wrote nothing).
    pub fn served_seq(&self) -> u64 {
        self.served_seq.load(Ordering::Relaxed)
    }

    /// Whether no push output is pending.
    pub fn is_empty(&self) -> bool {
        self.push_out
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Takes the pending push output.
    pub fn take(&self) -> Vec<u8> {
        std::mem::take(&mut *self.push_out.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Drops the pending push output (a subscriber over its limit).
    pub fn clear(&self) {
        self.push_out
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

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
    /// When the input the connection is running arrived (the kernel's receive time,
    /// `ClientStream::read_ns`, wall-clock ns), or when it resumed running it after a
    /// blocked command was answered: the place of a command that blocks in its keys' queues
    /// (`BlockRegistry::register`). Redis serves clients blocked on a key in the order its
    /// one thread ran their commands, which is the order their input arrived; here a command
    /// read on one thread may reach the keys' shard after one that arrived later on
    /// another, and a thread woken later may even read first what arrived later.
    pub read_ns: Cell<u64>,
    /// Bytes the read buffer has allocated (CLIENT LIST `qbuf` + `qbuf-free`), updated when
    /// its size changes.
    pub qbuf_cap_bytes: Cell<usize>,
    /// Most input the read buffer held, or a bulk it waited for, since the thread's cron
    /// last looked (Redis's `querybuf_peak`).
    pub qbuf_peak_bytes: Cell<usize>,
    /// The capacity the cron asks the connection to resize its read buffer to
    /// (`plan_query_buffer_resize`); the connection takes it when it next waits for input.
    pub qbuf_resize: Cell<Option<usize>>,
    pub obuf_bytes: Cell<usize>,
    /// Whether the client is inside MULTI (flag 'x').
    pub in_multi: Cell<bool>,
    /// What the side path did to this client's transaction while a script ran long; the
    /// connection applies it before its next command (`cmd::admit`).
    pub busy_txn: Cell<BusyTxn>,
    /// Whether the client is a monitor (flag 'O').
    pub is_monitor: Cell<bool>,
    /// Number of keys watched (CLIENT LIST `watch=`).
    pub watched: Cell<usize>,
    /// Push output, wake-up and kill switch, shared with other threads.
    pub mailbox: Arc<Mailbox>,
    /// Pub/Sub subscriptions (`cmd::pubsub`), and their counts for CLIENT LIST `sub=`,
    /// `psub=`, `ssub=` (flag 'P' when any is non-zero).
    pub subs: RefCell<Subscriptions>,
    pub sub: Cell<usize>,
    pub psub: Cell<usize>,
    pub ssub: Cell<usize>,
    /// Blocked in a blocking command such as BLPOP (CLIENT LIST flag 'b').
    pub blocked: Cell<bool>,
    /// The connection's socket, for the side path that answers this client while a script
    /// runs long (`script::busy`); empty for the script client.
    pub socket: RefCell<std::rc::Weak<crate::stream::ClientStream>>,
    /// The connection task is writing replies (the side path must not interleave its own).
    pub writing: Cell<bool>,
    /// The ACL user this connection runs as (`None`: the default user).
    pub user: RefCell<Option<crate::acl::UserRef>>,
    /// Whether AUTH (or a default user without password at connect) authenticated it
    /// (Redis's `c->authenticated`).
    pub authenticated: Cell<bool>,
    /// CLIENT NO-EVICT on (flag 'e'); Meridian evicts no client, so it changes nothing else.
    pub no_evict: Cell<bool>,
    /// CLIENT TRACKING in force (None: off). Replaced whole by each CLIENT TRACKING.
    pub tracking: RefCell<Option<Arc<Tracker>>>,
}

/// A client's CLIENT TRACKING settings, as every thread sees them (`Node::trackers`): the
/// shards' invalidations find its mailbox and options here by id (`cmd::tracking`).
#[derive(Debug)]
pub struct Tracker {
    pub id: u64,
    pub mailbox: Arc<Mailbox>,
    /// The client invalidations go to instead (0: this one).
    pub redirect: u64,
    pub bcast: bool,
    pub optin: bool,
    pub optout: bool,
    pub noloop: bool,
    /// BCAST prefixes, in the order given.
    pub prefixes: Vec<Vec<u8>>,
    /// A link of another node of the site (`Client::site_link`): its BCAST prefixes are
    /// that node's clients', which it tells itself of invalidations from other nodes
    /// (`remote_tracking`), so this node neither registers them elsewhere nor relays to it.
    pub relay: bool,
    /// The redirect client was gone when an invalidation was due (flag `broken_redirect`).
    pub broken: AtomicBool,
}

/// How CLIENT UNBLOCK ends a wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unblock {
    /// As if the timeout passed.
    Timeout,
    /// With `-UNBLOCKED client unblocked via CLIENT UNBLOCK`.
    Error,
}

/// CLIENT REPLY: whether command replies are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReplyMode {
    #[default]
    On,
    Off,
    /// CLIENT REPLY SKIP ran: the next command's reply is dropped.
    SkipNext,
    /// The reply of the command running now is dropped.
    Skip,
}

/// One client's Pub/Sub subscriptions. Patterns keep subscription order (PUNSUBSCRIBE with no
/// argument answers in that order, as Redis 7.0's list); channels are a set, as in Redis.
#[derive(Debug, Default)]
pub struct Subscriptions {
    pub channels: hashbrown::HashSet<Vec<u8>>,
    pub patterns: Vec<Vec<u8>>,
    pub shard_channels: hashbrown::HashSet<Vec<u8>>,
}

impl Subscriptions {
    /// Channels plus patterns: the count SUBSCRIBE/PSUBSCRIBE replies show.
    pub fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }

    /// Every subscription, shard channels included: non-zero means "subscribed mode".
    pub fn total(&self) -> usize {
        self.count() + self.shard_channels.len()
    }
}

impl ClientShared {
    /// Whether the client tracks keys with NOLOOP (its own writes invalidate nothing for it).
    pub fn tracking_noloop(&self) -> bool {
        self.tracking.borrow().as_ref().is_some_and(|t| t.noloop)
    }

    pub fn new(id: u64, addr: SocketAddr, laddr: SocketAddr, now_ms: u64) -> ClientShared {
        ClientShared::with_mailbox(id, addr, laddr, now_ms, Arc::new(Mailbox::new(id, addr)))
    }

    /// A client whose mailbox exists already: the proxy a shard thread runs a command of a
    /// connection of another thread with (the mailbox is the connection's own).
    pub fn with_mailbox(
        id: u64,
        addr: SocketAddr,
        laddr: SocketAddr,
        now_ms: u64,
        mailbox: Arc<Mailbox>,
    ) -> ClientShared {
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
            qbuf_cap_bytes: Cell::new(0),
            read_ns: Cell::new(0),
            qbuf_peak_bytes: Cell::new(0),
            qbuf_resize: Cell::new(None),
            obuf_bytes: Cell::new(0),
            in_multi: Cell::new(false),
            busy_txn: Cell::new(BusyTxn::UNTOUCHED),
            is_monitor: Cell::new(false),
            watched: Cell::new(0),
            mailbox,
            subs: RefCell::new(Subscriptions::default()),
            sub: Cell::new(0),
            psub: Cell::new(0),
            ssub: Cell::new(0),
            blocked: Cell::new(false),
            socket: RefCell::new(std::rc::Weak::new()),
            writing: Cell::new(false),
            user: RefCell::new(None),
            authenticated: Cell::new(true),
            no_evict: Cell::new(false),
            tracking: RefCell::new(None),
        }
    }

    /// Whether the client has any Pub/Sub subscription (Redis's CLIENT_PUBSUB flag).
    pub fn is_subscribed(&self) -> bool {
        self.sub.get() + self.psub.get() + self.ssub.get() > 0
    }

    /// The thread's cron's look at this client's read buffer (Redis's
    /// `clientsCronResizeQueryBuffer`): when it wastes more than `QUERY_BUF_SPARE_BYTES_MIN`,
    /// a client idle for more than `QUERY_BUF_IDLE_S` seconds gives it all back, and one whose
    /// buffer is over `QUERY_BUF_RESIZE_BYTES_MIN` and twice its recent peak keeps only that
    /// peak (or what it holds, if more). Then the peak starts again from what the buffer
    /// holds. Returns whether a resize was asked for (the caller wakes the connection).
    pub fn plan_query_buffer_resize(&self, now_ms: u64) -> bool {
        let (len, cap, peak) = (
            self.qbuf_bytes.get(),
            self.qbuf_cap_bytes.get(),
            self.qbuf_peak_bytes.get(),
        );
        let idle_s = (now_ms / 1000).saturating_sub(self.last_interaction_ms.get() / 1000);
        let mut asked = false;
        if cap.saturating_sub(len) > QUERY_BUF_SPARE_BYTES_MIN {
            let target = if idle_s > QUERY_BUF_IDLE_S {
                Some(len)
            } else if cap > QUERY_BUF_RESIZE_BYTES_MIN && cap / 2 > peak {
                Some(len.max(peak))
            } else {
                None
            };
            if let Some(t) = target {
                self.qbuf_resize.set(Some(t));
                asked = true;
            }
        }
        self.qbuf_peak_bytes.set(len);
        asked
    }

    /// Refreshes the `sub`/`psub`/`ssub` counters from `subs`.
    pub fn sync_sub_counts(&self) {
        let subs = self.subs.borrow();
        self.sub.set(subs.channels.len());
        self.psub.set(subs.patterns.len());
        self.ssub.set(subs.shard_channels.len());
        self.mailbox
            .subscribed
            .store(subs.total() > 0, Ordering::Relaxed);
    }

    /// The output limit of this client's class (Redis's `getClientType`: subscribed clients
    /// are `pubsub`; MONITOR clients and the rest are `normal`).
    pub fn output_limit(&self, limits: &OutputBufferLimits) -> OutputLimit {
        if self.is_subscribed() {
            limits.pubsub
        } else {
            limits.normal
        }
    }

    /// Redis's `checkClientOutputBufferLimits` (see `Mailbox::output_over_limit`).
    pub fn output_over_limit(&self, pending: usize, limit: &OutputLimit, now_ms: u64) -> bool {
        self.mailbox.output_over_limit(pending, limit, now_ms)
    }

    pub fn kill(&self) {
        self.mailbox.kill();
    }

    pub fn is_killed(&self) -> bool {
        self.mailbox.is_killed()
    }

    /// Sets the client's protocol (HELLO, RESET).
    pub fn set_proto(&self, p: Proto) {
        self.proto.set(p);
        self.mailbox.set_proto(p);
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

impl MultiState {
    /// CLIENT LIST's `multi-mem`, as Redis counts it (`argv_len_sums`): the bytes of the
    /// queued commands' arguments and a pointer per argument.
    pub fn args_bytes(&self) -> usize {
        self.queued
            .iter()
            .flat_map(|q| q.args.iter())
            .map(|a| a.len() + std::mem::size_of::<usize>())
            .sum()
    }
}

/// The changes the side path of a long script (`script::busy`) made to a client's
/// transaction, as Redis makes them while a script is busy (MULTI and DISCARD run, EXEC and
/// every other command are refused and flag the transaction). Applied in field order by the
/// connection before its next command: `ended` ends the transaction and drops its watches
/// (EXECABORT, DISCARD), `opened` starts a new one (MULTI), `flagged` makes EXEC answer
/// EXECABORT (a refused command inside the transaction).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BusyTxn {
    pub ended: bool,
    pub opened: bool,
    pub flagged: bool,
}

impl BusyTxn {
    pub const UNTOUCHED: BusyTxn = BusyTxn {
        ended: false,
        opened: false,
        flagged: false,
    };
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
    /// Set by a shard when a watched key changes; EXEC then fails.
    pub dirty: WatchFlag,
    /// Close the connection after writing the pending replies (QUIT, protocol error).
    pub close_after_reply: bool,
    /// Nesting of `cmd::call`: 1 for a command the client sent, 2 for one run by EXEC.
    /// Blocking commands block only at depth 1 (`Ctx::can_block`).
    pub call_depth: u32,
    /// Set while the client waits in a blocking command (`crate::blocking`).
    pub blocked: Option<crate::blocking::BlockedOn>,
    /// Sequence number of the last op this connection's commands originated on the shard
    /// that ran them (CRDT.WAIT).
    pub last_write_seq: u64,
    /// With several shards: per shard written to, the sequence number of the last op this
    /// connection originated there (CRDT.WAIT waits for all of them).
    pub shard_writes: Vec<(u16, u64)>,
    /// The shard whose cluster endpoint this connection came in on (None: the main port).
    pub endpoint: Option<u16>,
    /// READONLY was sent (cluster API).
    pub cluster_readonly: bool,
    /// ASKING was sent: the next command may touch a slot being imported here.
    pub cluster_asking: bool,
    /// A link from another node of the site (`conn::LINK_HANDSHAKE`): commands run here
    /// as they are, and PUBLISH is neither logged nor forwarded again.
    pub site_link: bool,
    /// CLIENT REPLY ON/OFF/SKIP.
    pub reply_mode: ReplyMode,
    /// CLIENT CACHING YES (OPTIN) or NO (OPTOUT) applies to the next command (or the next
    /// transaction).
    pub caching: bool,
    /// While EXEC runs the queued commands: how many, and the bytes of their arguments.
    /// CLIENT INFO and CLIENT LIST then show the transaction as Redis does (flag `x`,
    /// `multi=n`, `cmd=exec`, EXEC's own request in `qbuf` and `argv-mem`).
    pub exec_running: Option<(usize, usize)>,
    /// What REPLCONF asked for (`cmd::replicas`): SYNC and PSYNC serve only `rdb-only`.
    pub repl: ReplRequest,
}

/// A client's REPLCONF settings (Redis's `CLIENT_REPL_RDBONLY`, `slave_req`, `slave_capa`).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReplRequest {
    /// `rdb-only 1`: it wants the RDB file and no replication stream (`redis-cli --rdb`).
    pub rdb_only: bool,
    /// `rdb-filter-only functions` (or `""`): the file holds the libraries and no keys.
    pub functions_only: bool,
    /// `rdb-filter-only` was given: a filtered file, which needs `capa eof`.
    pub filtered: bool,
    /// `capa eof`.
    pub capa_eof: bool,
}

impl Client {
    pub fn new(shared: Rc<ClientShared>) -> Client {
        Client {
            shared,
            db: 0,
            multi: None,
            watched: Vec::new(),
            dirty: WatchFlag::default(),
            close_after_reply: false,
            call_depth: 0,
            blocked: None,
            last_write_seq: 0,
            shard_writes: Vec::new(),
            endpoint: None,
            cluster_readonly: false,
            cluster_asking: false,
            site_link: false,
            reply_mode: ReplyMode::On,
            caching: false,
            exec_running: None,
            repl: ReplRequest::default(),
        }
    }

    pub fn id(&self) -> u64 {
        self.shared.id
    }

    /// Records that this connection's last op on shard `shard` has sequence number `seq`.
    pub fn note_write(&mut self, shard: u16, seq: u64) {
        match self.shard_writes.iter_mut().find(|(s, _)| *s == shard) {
            Some(w) => w.1 = w.1.max(seq),
            None => self.shard_writes.push((shard, seq)),
        }
    }

    /// Whether this is the client scripts run their commands as (`script::Scripting`).
    pub fn is_script(&self) -> bool {
        self.shared.id == 0
    }

    pub fn select(&mut self, db: usize) {
        self.db = db;
        self.shared.db.set(db);
    }
}

impl crate::keyspace::Wake for Mailbox {
    fn wake(&self) {
        self.wake.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client whose read buffer holds `len` of `cap` bytes, with `peak`, last heard from
    /// at `last_ms`.
    fn client(len: usize, cap: usize, peak: usize, last_ms: u64) -> ClientShared {
        let addr: SocketAddr = ([127, 0, 0, 1], 5000).into();
        let c = ClientShared::new(1, addr, addr, last_ms);
        c.qbuf_bytes.set(len);
        c.qbuf_cap_bytes.set(cap);
        c.qbuf_peak_bytes.set(peak);
        c
    }

    #[test]
    fn query_buffer_plan_at_each_limit_and_one_past() {
        let idle = (QUERY_BUF_IDLE_S + 1) * 1000;
        // Spare room at QUERY_BUF_SPARE_BYTES_MIN is left, one byte more is not.
        let c = client(0, QUERY_BUF_SPARE_BYTES_MIN, 0, 0);
        assert!(!c.plan_query_buffer_resize(idle));
        let c = client(0, QUERY_BUF_SPARE_BYTES_MIN + 1, 0, 0);
        assert!(c.plan_query_buffer_resize(idle));
        assert_eq!(c.qbuf_resize.take(), Some(0), "idle: given back whole");
        // Idle for QUERY_BUF_IDLE_S seconds is not idle yet; a second more is.
        let c = client(0, 16 * 1024, 16 * 1024, 0);
        assert!(!c.plan_query_buffer_resize(QUERY_BUF_IDLE_S * 1000));
        assert_eq!(c.qbuf_peak_bytes.get(), 0, "the peak starts again");
        assert!(c.plan_query_buffer_resize(idle));
        // What an idle buffer holds stays.
        let c = client(100, 16 * 1024, 0, 0);
        assert!(c.plan_query_buffer_resize(idle));
        assert_eq!(c.qbuf_resize.take(), Some(100));
        // Busy: a buffer of QUERY_BUF_RESIZE_BYTES_MIN is never trimmed, one byte more is,
        // when twice its peak.
        let c = client(0, QUERY_BUF_RESIZE_BYTES_MIN, 0, 1000);
        assert!(!c.plan_query_buffer_resize(1000));
        let c = client(0, QUERY_BUF_RESIZE_BYTES_MIN + 1, 10, 1000);
        assert!(c.plan_query_buffer_resize(1000));
        assert_eq!(c.qbuf_resize.take(), Some(10), "trimmed to the peak");
        // Half of it at the peak: kept; then the peak is what it holds, and it goes.
        let c = client(0, 400_000, 200_000, 1000);
        assert!(!c.plan_query_buffer_resize(1000));
        assert!(c.plan_query_buffer_resize(1000));
        assert_eq!(c.qbuf_resize.take(), Some(0));
    }
}

//! The threads of one process and the messages between them.
//!
//! Every shard thread runs a `current_thread` runtime with its `Thread`: its shard, its
//! front (the connections it serves) and its inbox. A connection's thread coordinates its
//! commands: those whose keys its own shard owns run inline (zero hop); the others travel to
//! the owning thread as a `Batch` (every command of one pipeline read for that shard in one
//! message, so one wake-up), run there in order through the same `cmd::call`, and come back
//! as one `Done` holding their replies. Process-wide work (DBSIZE, INFO, CONFIG SET) is a
//! batch to every thread, or a `Job` closure.
//!
//! Inboxes are bounded (`node::INBOX_MSGS_MAX`): a connection whose target inbox is full
//! waits before reading more of its socket. Replies come back on a one-shot channel per
//! batch, never through an inbox, so two threads waiting on each other's inboxes cannot
//! deadlock.

use std::cell::RefCell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use smallvec::SmallVec;
use tokio::sync::oneshot;

use crate::blocking::{self, BlockedOn};
use crate::client::{Client, ClientShared, Mailbox, MultiState};
use crate::cmd::{self, table::CommandSpec};
use crate::error::CmdError;
use crate::front::Front;
use crate::keyspace::WatchFlag;
use crate::node::Node;
use crate::persist::AfterBatch;
use crate::resp::reply::{Proto, Reply};
use crate::shard::Shard;

pub type ShardRc = Rc<RefCell<Shard>>;
pub type FrontRc = Rc<RefCell<Front>>;

/// One shard thread's state.
#[derive(Debug)]
pub struct Thread {
    /// Its shard's index in the site.
    pub index: u16,
    pub node: Arc<Node>,
    pub shard: ShardRc,
    pub front: FrontRc,
    /// Links to the shards of the site's other nodes (None: the site is this process).
    pub proxy: Option<Rc<meridian_proxy::Pool>>,
    /// Its clients' tracked reads on the other nodes (with `proxy`).
    pub remote_tracking: Option<Rc<crate::remote_tracking::RemoteTracking>>,
}

/// What a thread's inbox carries.
pub enum Msg {
    /// A client connection the acceptor handed to this thread, with the id it gave it (ids
    /// follow accept order, as Redis's), the bytes it sent already (while loading) and the
    /// port it came in on (a TLS one does its handshake on this thread).
    Accept(
        std::net::TcpStream,
        u64,
        bytes::BytesMut,
        crate::stream::Transport,
    ),
    /// Commands of one connection of another thread, for this thread's shard, and where
    /// their replies go.
    Batch(Batch, oneshot::Sender<Done>),
    /// Work to run on this thread (fan-out steps, start-up and shutdown).
    Job(Job),
    /// An inbound sync connection for this shard (its preamble named it).
    SyncLink(std::net::TcpStream),
}

impl std::fmt::Debug for Msg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Msg::Accept(..) => f.write_str("Accept"),
            Msg::Batch(b, _) => write!(f, "Batch({} items)", b.items.len()),
            Msg::Job(_) => f.write_str("Job"),
            Msg::SyncLink(_) => f.write_str("SyncLink"),
        }
    }
}

/// A closure run on a thread, with that thread's state.
pub type Job = Box<dyn FnOnce(&Rc<Thread>) + Send>;

/// What the owning thread may read of the client a batch comes from.
#[derive(Debug, Clone)]
pub struct ClientView {
    pub id: u64,
    pub addr: SocketAddr,
    pub laddr: SocketAddr,
    pub name: Option<Vec<u8>>,
    /// The ACL user it runs as, by name (None: the default user). Users are `Rc`s of each
    /// thread's shard, which holds the same users as every other (ACL SETUSER runs on all).
    pub user: Option<Vec<u8>>,
    /// The connection's mailbox: blocked commands register it, Pub/Sub writes to it.
    pub mailbox: Arc<Mailbox>,
    pub dirty: WatchFlag,
    /// CLIENT TRACKING in force: the keys its reads run here are remembered here.
    pub tracking: Option<Arc<crate::client::Tracker>>,
    /// `ClientShared::read_ns` when the batch was made.
    pub read_ns: u64,
    /// Reply bytes the batch may produce before its client breaks its hard output limit
    /// (`client-output-buffer-limit`, less what the connection already holds; 0: no limit).
    /// The batch runs no command past it (`Done::cut`), as Redis runs nothing more for a
    /// client it closes for its output.
    pub output_bytes_max: u64,
}

impl ClientView {
    pub fn of(client: &Client) -> ClientView {
        let mut view = ClientView::of_shared(&client.shared);
        view.dirty = client.dirty.clone();
        view
    }

    /// The view of a connection's shared state alone (no WATCH flag: a fresh one).
    pub fn of_shared(s: &ClientShared) -> ClientView {
        ClientView {
            id: s.id,
            addr: s.addr,
            laddr: s.laddr,
            name: s.name.borrow().clone(),
            user: s.user.borrow().as_ref().map(|u| u.name()),
            mailbox: s.mailbox.clone(),
            dirty: WatchFlag::default(),
            tracking: s.tracking.borrow().clone(),
            read_ns: s.read_ns.get(),
            output_bytes_max: 0,
        }
    }
}

/// The arguments of every item of a batch, in one buffer.
#[derive(Debug, Default, Clone)]
pub struct Args {
    data: Vec<u8>,
    /// End offset of each argument in `data`.
    ends: Vec<u32>,
}

impl Args {
    /// Appends `argv`; returns (index of its first argument, count).
    pub fn push(&mut self, argv: &[&[u8]]) -> (u32, u32) {
        let first = self.ends.len() as u32;
        for a in argv {
            self.data.extend_from_slice(a);
            self.ends.push(self.data.len() as u32);
        }
        (first, argv.len() as u32)
    }

    /// The arguments `(first, count)` names.
    pub fn get(&self, (first, n): (u32, u32)) -> SmallVec<[&[u8]; 8]> {
        let mut out = SmallVec::new();
        let mut start = match first.checked_sub(1) {
            Some(prev) => self.ends.get(prev as usize).copied().unwrap_or(0),
            None => 0,
        };
        for i in first..first.saturating_add(n) {
            let Some(&end) = self.ends.get(i as usize) else {
                break;
            };
            out.push(
                self.data
                    .get(start as usize..end as usize)
                    .unwrap_or_default(),
            );
            start = end;
        }
        out
    }

    /// Argument `i` of the item whose arguments `(first, count)` names, if it has one.
    pub fn arg(&self, (first, n): (u32, u32), i: u32) -> Option<&[u8]> {
        if i >= n {
            return None;
        }
        let at = first.checked_add(i)? as usize;
        let start = match at.checked_sub(1) {
            Some(prev) => *self.ends.get(prev)?,
            None => 0,
        };
        let end = *self.ends.get(at)?;
        self.data.get(start as usize..end as usize)
    }

    pub fn bytes(&self) -> usize {
        self.data.len()
    }
}

/// The pipeline look-ahead of a batch (`conn::Conn::look_ahead` for the commands another
/// thread sent): looks up the keys of its first `LOOKAHEAD_COMMANDS_MAX` commands in the
/// first one's database before any runs, so that their probes' cache misses overlap.
fn look_ahead(s: &Shard, items: &[Item], args: &Args) {
    let Some(db) = items.first().map(|i| i.db) else {
        return;
    };
    if items.len() < 2 {
        return;
    }
    let mut hashed: SmallVec<[(u64, &[u8]); crate::conn::LOOKAHEAD_COMMANDS_MAX]> = SmallVec::new();
    for item in items.iter().take(crate::conn::LOOKAHEAD_COMMANDS_MAX) {
        let spec = match item.op {
            Op::Call(spec) | Op::Quiet(spec) => spec,
            _ => continue,
        };
        if item.db != db || spec.is_container || spec.meta.first_key != 1 {
            continue;
        }
        if let Some(key) = args.arg(item.args, 1) {
            hashed.push((s.hash_key(key), key));
        }
    }
    s.warm_keys(db, &hashed);
}

/// Commands of one connection for one shard.
#[derive(Debug)]
pub struct Batch {
    pub client: ClientView,
    pub items: Vec<Item>,
    pub args: Args,
}

/// One step of a batch.
#[derive(Debug)]
pub struct Item {
    pub op: Op,
    /// The client's database and protocol when it sent the command.
    pub db: usize,
    pub proto: Proto,
    pub args: (u32, u32),
    /// CLIENT CACHING was in force for it (OPTIN/OPTOUT tracking).
    pub caching: bool,
    /// Its reply is dropped (CLIENT REPLY OFF or SKIP): pushes due to it must not ride on it.
    pub muted: bool,
}

/// What an item does on the owning thread.
#[derive(Debug)]
pub enum Op {
    /// Runs a command through `cmd::call`.
    Call(&'static CommandSpec),
    /// Runs a command's handler only (`cmd::call_quiet`): this shard's part of a command
    /// that runs on every shard and is counted once, on the connection's thread.
    Quiet(&'static CommandSpec),
    /// Runs EXEC over the transaction's queued commands and watched keys.
    Exec {
        multi: MultiState,
        watched: Vec<(usize, Vec<u8>)>,
    },
    /// A blocked client was woken: serves what is ready here (`blocking::settle`).
    Rerun(Box<BlockedOn>),
    /// A blocked command's deadline passed.
    TimeOut(Box<BlockedOn>),
    /// Drops the client's watches here (UNWATCH, DISCARD, RESET, after EXEC).
    Unwatch,
    /// Drops everything the client left here (it disconnected): watches, a blocked wait.
    Forget,
    /// The last step of a SORT the connection's thread coordinated across shards
    /// (`crate::sort_across`): its reply or STORE from what was gathered, counted as the
    /// command. Never sent to another node.
    SortFinish(&'static CommandSpec, Box<cmd::sort::Gathered>),
    /// The last step of a command that reads keys of other shards (`crate::read_across`):
    /// the command, with their copies lent to this shard's table while it runs. Never sent
    /// to another node.
    CallLent(&'static CommandSpec, Box<crate::read_across::Lent>),
    /// A step of a command the connection's thread coordinates across shards
    /// (`crate::move_across`): `run` in place of the command's handler, counted as the
    /// command (`cmd::call_with`) when `counted`, else not (`cmd::call_quiet_with`). Never
    /// sent to another node.
    Finish {
        spec: &'static CommandSpec,
        counted: bool,
        run: Finish,
    },
    /// A command that a script running on another shard of this process calls for keys of
    /// this one, while `tx_across` holds both (`tx_across::call_held`): it runs as this
    /// shard's script client, as the script's own shard runs its local calls. Never sent to
    /// another node.
    ScriptCall(&'static CommandSpec),
}

/// A step's handler: what it does with the command's context.
pub type FinishFn = dyn FnOnce(&mut cmd::Ctx<'_>) -> Result<(), CmdError> + Send;

/// The handler a `Op::Finish` step runs on the shard it is sent to.
pub struct Finish(pub Box<FinishFn>);

impl std::fmt::Debug for Finish {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Finish(..)")
    }
}

/// What one item left besides its reply.
#[derive(Debug, Default)]
pub struct Note {
    /// The command blocked: its wait state (its registration is on this shard).
    pub blocked: Option<Box<BlockedOn>>,
    /// The client's database after it (SELECT inside EXEC).
    pub db: usize,
    /// The command asked to close the connection (CLIENT KILL of itself).
    pub close: bool,
    /// A script stopped at a key of this other shard, having had no effect: it runs again
    /// (`Scripting::relocate`).
    pub relocate: Option<u16>,
}

/// The replies of a batch.
#[derive(Debug)]
pub struct Done {
    pub out: Vec<u8>,
    /// End offset of each item's reply in `out`.
    pub ends: Vec<u32>,
    pub notes: Vec<Note>,
    /// When the replies may be written (the owning shard's log: `appendfsync always`).
    pub after: AfterBatch,
    /// Sequence number of the last op the batch originated on that shard.
    pub wrote: Option<u64>,
    /// The replies reached `ClientView::output_bytes_max`: the items after that point did
    /// not run (their replies are empty), and the client must be closed.
    pub cut: bool,
    /// A script stopped, having done nothing, to run again with every shard held (its note's
    /// `relocate`): it and the items after it, which did not run, with the batch's
    /// arguments; the connection runs them (`Conn::finish_round`).
    pub unrun: Option<(Vec<Item>, Args)>,
}

impl Done {
    /// The reply of item `i`.
    pub fn reply(&self, i: usize) -> &[u8] {
        let start = match i.checked_sub(1) {
            Some(p) => self.ends.get(p).copied().unwrap_or(0),
            None => 0,
        } as usize;
        let end = self.ends.get(i).copied().unwrap_or(0) as usize;
        self.out.get(start..end).unwrap_or_default()
    }
}

/// Why a batch got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("shard {shard} is unavailable")]
pub struct Unavailable {
    pub shard: u16,
}

/// The error text a client gets for a command whose shard thread is gone (it panicked: the
/// process is going down).
pub fn unavailable_error(e: Unavailable) -> CmdError {
    CmdError::Raw(format!("CLUSTERDOWN {e}"))
}

/// Sends `batch` to `shard`'s thread (waiting while its inbox is full), or over a link to
/// its node when another node of the site runs it; returns the receiver of its replies.
pub async fn send(
    th: &Thread,
    shard: u16,
    batch: Batch,
) -> Result<oneshot::Receiver<Done>, Unavailable> {
    if let (Some(addr), Some(pool)) = (th.node.remote_endpoint(shard), &th.proxy) {
        let (tx, rx) = oneshot::channel();
        let rt = th.remote_tracking.clone();
        tokio::task::spawn_local(forward(pool.clone(), rt, addr.to_string(), batch, tx));
        return Ok(rx);
    }
    let inbox = th.node.inbox(shard).ok_or(Unavailable { shard })?;
    th.node
        .memory
        .publish_thread_net(usize::from(th.index.saturating_sub(th.node.first)));
    let (tx, rx) = oneshot::channel();
    inbox
        .send(Msg::Batch(batch, tx))
        .await
        .map_err(|_| Unavailable { shard })?;
    Ok(rx)
}

/// The error a client gets for a command the link to another node could not run: down
/// (or refusing this node) is CLUSTERDOWN; no answer in time or a broken link is TRYAGAIN
/// (a write may or may not have applied, as with any lost connection).
pub fn proxy_error_text(e: &meridian_proxy::ProxyError) -> String {
    use meridian_proxy::ProxyError as P;
    match e {
        P::Down { .. } | P::Refused { .. } => format!("CLUSTERDOWN {e}"),
        P::Timeout { .. } | P::Lost { .. } | P::Protocol { .. } => format!("TRYAGAIN {e}"),
    }
}

/// Runs `batch` on a shard of another node: each item as the command it is, over the
/// thread's pooled link to that shard's endpoint (a transaction as MULTI, its commands and
/// EXEC); the replies come back as a `Done`. The other node answers only once its own
/// fsync policy allows, so no wait is left here.
async fn forward(
    pool: Rc<meridian_proxy::Pool>,
    rt: Option<Rc<crate::remote_tracking::RemoteTracking>>,
    addr: String,
    batch: Batch,
    done: oneshot::Sender<Done>,
) {
    let Batch {
        items,
        args,
        client,
    } = batch;
    let resp3 = items.first().is_some_and(|i| i.proto == Proto::Resp3);
    let mut req = meridian_proxy::Request::new();
    // A tracking client's reads are tracked there for this thread (`remote_tracking`).
    let table = crate::cmd::table();
    let tracker = client.tracking.as_deref();
    let tracked = |item: &Item| match (&item.op, tracker) {
        (Op::Call(spec), Some(t)) => cmd::tracking::tracks_read(t, item.caching, spec),
        (Op::Exec { multi, .. }, Some(t)) => {
            !multi.aborted && cmd::tracking::tracks_transaction(t, item.caching)
        }
        _ => false,
    };
    let redirect = match &rt {
        Some(rt) if items.iter().any(&tracked) => rt.redirect_id(&pool, &addr).await,
        _ => None,
    };
    // A NOLOOP client's writes there run with the link's tracking NOLOOP, so that they
    // invalidate nothing this thread's clients read through it; the other readers are told
    // here (`RemoteTracking::written`), the writer not. Only for writes whose keys are
    // known (no scripts): an undeclared key a script wrote would be missed.
    let noloop_id = match (&rt, tracker) {
        (Some(rt), Some(t)) if t.noloop && !t.bcast => rt.ready_id(&addr).or(redirect),
        _ => None,
    }
    .map(|id| id.to_string());
    if let Some(id) = redirect {
        let db = items.first().map_or(0, |i| i.db);
        push_optin(&mut req, db, &id.to_string(), false);
    }
    // The keys of the tracked reads.
    let mut remember: Vec<Vec<u8>> = Vec::new();
    // The keys a NOLOOP client wrote with the link NOLOOP.
    let mut written: Vec<Vec<u8>> = Vec::new();
    // Per item: its reply from the link (None) or one made here.
    let mut local: Vec<Option<Vec<u8>>> = Vec::with_capacity(items.len());
    // The client's database after each item (a SELECT inside a transaction changes it).
    let mut dbs: Vec<usize> = Vec::with_capacity(items.len());
    for item in &items {
        let argv = args.get(item.args);
        dbs.push(item.db);
        let reads = redirect.is_some() && tracked(item);
        match &item.op {
            Op::Call(spec) | Op::Quiet(spec) => {
                if reads {
                    req.push_unanswered(item.db, &[b"CLIENT", b"CACHING", b"yes"]);
                    keys_into(table, spec, &argv, &mut remember);
                }
                let mut keys = Vec::new();
                let noloop = noloop_id.as_deref().filter(|_| {
                    writes_known_keys(spec)
                        && keys_into(table, spec, &argv, &mut keys)
                        && !keys.is_empty()
                });
                written.append(&mut keys);
                if let Some(id) = noloop {
                    push_optin(&mut req, item.db, id, true);
                }
                req.push(item.db, &argv);
                if let Some(id) = noloop {
                    push_optin(&mut req, item.db, id, false);
                }
                local.push(None);
            }
            Op::Exec { multi, .. } => {
                if multi.aborted {
                    local.push(Some(
                        b"-EXECABORT Transaction discarded because of previous errors.\r\n"
                            .to_vec(),
                    ));
                    continue;
                }
                // The keys the transaction writes, for a NOLOOP client; None where one
                // cannot be told (then it runs as any other client's).
                let mut tx_written: Option<Vec<Vec<u8>>> = noloop_id.as_ref().map(|_| Vec::new());
                for q in &multi.queued {
                    let a: Vec<&[u8]> = q.args.iter().map(Vec::as_slice).collect();
                    let Ok(spec) = cmd::resolve(table, &a) else {
                        continue;
                    };
                    if let (true, Some(t)) = (reads, tracker) {
                        if cmd::tracking::tracks_read(t, item.caching, spec) {
                            keys_into(table, spec, &a, &mut remember);
                        }
                    }
                    if let Some(w) = tx_written.as_mut() {
                        let known = if cmd::tracking::is_script(spec) {
                            false
                        } else {
                            !writes_known_keys(spec) || keys_into(table, spec, &a, w)
                        };
                        if !known {
                            tx_written = None;
                        }
                    }
                }
                let noloop = noloop_id.as_deref().filter(|_| tx_written.is_some());
                if let Some(id) = noloop {
                    push_optin(&mut req, item.db, id, true);
                    written.extend(tx_written.unwrap_or_default());
                }
                if reads {
                    // CLIENT CACHING before MULTI covers the whole transaction.
                    req.push_unanswered(item.db, &[b"CLIENT", b"CACHING", b"yes"]);
                }
                let selected = push_exec(&mut req, item.db, multi);
                if let Some(id) = noloop {
                    push_optin(&mut req, item.db, id, false);
                }
                if let (Some(db), Some(last)) = (selected, dbs.last_mut()) {
                    *last = db;
                }
                local.push(None);
            }
            Op::Unwatch | Op::Forget => local.push(Some(Vec::new())),
            Op::SortFinish(..) => {
                // `sort_across` refuses keys on other nodes before it gathers anything.
                local.push(Some(
                    b"-ERR SORT across nodes is not supported\r\n".to_vec(),
                ));
            }
            Op::CallLent(..) | Op::Finish { .. } | Op::ScriptCall(_) => {
                // `read_across::plan` (and a script's plan) leave keys on other nodes to
                // CROSSSLOT.
                local.push(Some(format!("-{}\r\n", CmdError::CrossSlot).into_bytes()));
            }
            Op::Rerun(_) | Op::TimeOut(_) => {
                local.push(Some(b"-ERR blocked on another node\r\n".to_vec()));
            }
        }
    }
    // Remembered before the reads go: an invalidation can overtake their replies (it comes
    // on another connection); the readers of a key whose read is in flight stay readers.
    if let (Some(rt), Some(_)) = (&rt, redirect) {
        for k in &remember {
            rt.remember(&addr, k, client.id);
        }
        // The pooled link the reads go over (the one `call` takes): its loss is a flush.
        if let Ok(link) = pool.link(&addr, resp3).await {
            rt.tracks_through(&addr, resp3, &link);
        }
    }
    let result = pool.call(&addr, resp3, &req).await;
    if let Some(rt) = &rt {
        if redirect.is_some() {
            rt.answered(&addr, &remember);
        } else if items.iter().any(&tracked) {
            rt.flush_client(client.id);
        }
        // Whatever the outcome: a write that timed out may have run.
        if !written.is_empty() {
            rt.written(&addr, written, client.id);
        }
    }
    let mut out = Vec::new();
    let mut ends = Vec::with_capacity(items.len());
    let mut replies = match &result {
        Ok(r) => r.iter(),
        Err(_) => [].iter(),
    };
    let err_line = result.as_ref().err().map(|e| {
        let mut r = Reply::new();
        r.error(&CmdError::Raw(proxy_error_text(e)));
        r.buf
    });
    for l in local {
        match l {
            Some(bytes) => out.extend_from_slice(&bytes),
            None => match (&err_line, replies.next()) {
                (Some(e), _) => out.extend_from_slice(e),
                (None, Some(r)) => out.extend_from_slice(r),
                (None, None) => out.extend_from_slice(b"-TRYAGAIN missing reply\r\n"),
            },
        }
        ends.push(out.len() as u32);
    }
    let notes = dbs
        .into_iter()
        .map(|db| Note {
            db,
            ..Note::default()
        })
        .collect();
    let _ = done.send(Done {
        out,
        ends,
        notes,
        after: AfterBatch::Reply,
        wrote: None,
        cut: false,
        unrun: None,
    });
}

/// Sets the link's tracking for this thread's reads there (`remote_tracking`): OPTIN,
/// invalidations to its redirect link `id`, and NOLOOP or not.
fn push_optin(req: &mut meridian_proxy::Request, db: usize, id: &str, noloop: bool) {
    let line: [&[u8]; 7] = [
        b"CLIENT",
        b"TRACKING",
        b"on",
        b"REDIRECT",
        id.as_bytes(),
        b"OPTIN",
        b"NOLOOP",
    ];
    req.push_unanswered(db, line.get(..if noloop { 7 } else { 6 }).unwrap_or(&line));
}

/// Whether `spec` is a write whose keys are all named where the command table says (not
/// a script or function, whose keys may be undeclared).
fn writes_known_keys(spec: &CommandSpec) -> bool {
    spec.meta.flags.contains(cmd::table::Flags::WRITE) && !cmd::tracking::is_script(spec)
}

/// Appends the keys `argv` names (as `spec`) to `out`; false when they cannot be told.
fn keys_into(
    table: &'static cmd::table::Table,
    spec: &CommandSpec,
    argv: &[&[u8]],
    out: &mut Vec<Vec<u8>>,
) -> bool {
    let mut pos = SmallVec::<[usize; 8]>::new();
    if !cmd::command::key_positions(table, spec, argv, &mut pos) {
        return false;
    }
    out.extend(pos.iter().filter_map(|&p| argv.get(p).map(|k| k.to_vec())));
    true
}

/// Puts a transaction on a link to another node's shard: MULTI, the queued commands and
/// EXEC (only EXEC's reply is kept), then a SELECT of `db` again when the transaction
/// selected another database (the link's database is the one its own SELECTs chose).
/// Returns the database the transaction left the client in, when it selected one.
pub fn push_exec(
    req: &mut meridian_proxy::Request,
    db: usize,
    multi: &MultiState,
) -> Option<usize> {
    req.push_unanswered(db, &[b"MULTI"]);
    for q in &multi.queued {
        let a: Vec<&[u8]> = q.args.iter().map(Vec::as_slice).collect();
        req.push_unanswered(db, &a);
    }
    req.push(db, &[b"EXEC"]);
    let selected = multi.queued.iter().rev().find_map(|q| {
        let name = q.args.first()?;
        if !name.eq_ignore_ascii_case(b"select") {
            return None;
        }
        std::str::from_utf8(q.args.get(1)?)
            .ok()?
            .parse::<usize>()
            .ok()
    })?;
    let n = db.to_string();
    req.push_unanswered(db, &[b"SELECT", n.as_bytes()]);
    Some(selected)
}

impl Batch {
    /// A batch with no items yet, for `client`.
    pub fn new(client: ClientView) -> Batch {
        Batch {
            client,
            items: Vec::new(),
            args: Args::default(),
        }
    }

    /// Appends an item.
    pub fn push(&mut self, op: Op, db: usize, proto: Proto, argv: &[&[u8]]) -> usize {
        let args = self.args.push(argv);
        self.items.push(Item {
            op,
            db,
            proto,
            args,
            caching: false,
            muted: false,
        });
        self.items.len() - 1
    }

    /// Marks item `idx` as sent under CLIENT CACHING (`caching`) and with its reply dropped
    /// (`muted`: CLIENT REPLY OFF or SKIP).
    pub fn set_client_state(&mut self, idx: usize, caching: bool, muted: bool) {
        if let Some(item) = self.items.get_mut(idx) {
            item.caching = caching;
            item.muted = muted;
        }
    }
}

/// Runs `job` on `shard`'s thread and returns its result.
pub async fn run_on<T: Send + 'static>(
    th: &Rc<Thread>,
    shard: u16,
    job: impl FnOnce(&Rc<Thread>) -> T + Send + 'static,
) -> Result<T, Unavailable> {
    if shard == th.index {
        return Ok(job(th));
    }
    let rx = send_job(th, shard, job).await?;
    rx.await.map_err(|_| Unavailable { shard })
}

/// Sends `job` to `shard`'s thread (waiting while its inbox is full; this thread's runs at
/// once) and returns the receiver of its result, so that jobs for several shards run at the
/// same time.
pub async fn send_job<T: Send + 'static>(
    th: &Rc<Thread>,
    shard: u16,
    job: impl FnOnce(&Rc<Thread>) -> T + Send + 'static,
) -> Result<oneshot::Receiver<T>, Unavailable> {
    let (tx, rx) = oneshot::channel();
    if shard == th.index {
        let _ = tx.send(job(th));
        return Ok(rx);
    }
    let inbox = th.node.inbox(shard).ok_or(Unavailable { shard })?;
    let boxed: Job = Box::new(move |t| {
        let _ = tx.send(job(t));
    });
    inbox
        .send(Msg::Job(boxed))
        .await
        .map_err(|_| Unavailable { shard })?;
    Ok(rx)
}

/// Runs `job` on every shard thread of this process (this one inline) and returns the
/// results in shard order.
pub async fn run_on_all<T: Send + 'static>(
    th: &Rc<Thread>,
    job: impl Fn(&Rc<Thread>) -> T + Send + Sync + Clone + 'static,
) -> Vec<Result<T, Unavailable>> {
    let mut waits = Vec::with_capacity(usize::from(th.node.local));
    for shard in th.node.local_shards() {
        if shard == th.index {
            waits.push(Ok(None));
            continue;
        }
        let (tx, rx) = oneshot::channel();
        let j = job.clone();
        let boxed: Job = Box::new(move |t| {
            let _ = tx.send(j(t));
        });
        let sent = match th.node.inbox(shard) {
            Some(inbox) => inbox.send(Msg::Job(boxed)).await.is_ok(),
            None => false,
        };
        waits.push(if sent {
            Ok(Some(rx))
        } else {
            Err(Unavailable { shard })
        });
    }
    let mut out = Vec::with_capacity(waits.len());
    for (shard, w) in th.node.local_shards().zip(waits) {
        out.push(match w {
            Ok(None) => Ok(job(th)),
            Ok(Some(rx)) => rx.await.map_err(|_| Unavailable { shard }),
            Err(e) => Err(e),
        });
    }
    out
}

/// Runs a batch another thread sent, on this thread's shard, in one borrow of the shard:
/// no other command interleaves with it.
pub fn run_batch(th: &Thread, batch: Batch, done: oneshot::Sender<Done>) {
    let Batch {
        client: view,
        items,
        args,
    } = batch;
    let output_bytes_max = view.output_bytes_max;
    let mut shard_guard = th.shard.borrow_mut();
    let s = &mut *shard_guard;
    let mut front_guard = th.front.borrow_mut();
    let f = &mut *front_guard;
    let now = s.now_ms();
    let pos_before = s.persist.next_pos;
    let shared = Rc::new(ClientShared::with_mailbox(
        view.id,
        view.addr,
        view.laddr,
        now,
        view.mailbox,
    ));
    *shared.name.borrow_mut() = view.name;
    *shared.user.borrow_mut() = view.user.and_then(|n| s.acl.user(&n).cloned());
    *shared.tracking.borrow_mut() = view.tracking;
    shared.read_ns.set(view.read_ns);
    let mut client = Client::new(shared);
    client.dirty = view.dirty;
    let mut out = Reply {
        buf: Vec::new(),
        proto: Proto::Resp2,
    };
    let mut ends = Vec::with_capacity(items.len());
    let mut notes = Vec::with_capacity(items.len());
    let mut cut = false;
    let mut unrun: Option<Vec<Item>> = None;
    look_ahead(s, &items, &args);
    let mut items = items.into_iter();
    while let Some(item) = items.next() {
        cut = cut || (output_bytes_max > 0 && out.len() as u64 >= output_bytes_max);
        if cut {
            ends.push(out.len() as u32);
            notes.push(Note::default());
            continue;
        }
        client.select(item.db);
        client.shared.set_proto(item.proto);
        client.caching = item.caching;
        client.reply_mode = if item.muted {
            crate::client::ReplyMode::Off
        } else {
            crate::client::ReplyMode::On
        };
        out.proto = item.proto;
        let argv = args.get(item.args);
        let mut note = Note::default();
        s.scripting.relocate = None;
        let call = match &item.op {
            Op::Call(spec) => Some(*spec),
            _ => None,
        };
        let (db, proto, item_args, caching, muted) =
            (item.db, item.proto, item.args, item.caching, item.muted);
        run_item(s, f, &mut client, &mut out, item.op, &argv, now, &mut note);
        note.relocate = s.scripting.relocate.take();
        note.db = client.db;
        note.close = std::mem::take(&mut client.close_after_reply);
        client.multi = None;
        client.watched.clear();
        ends.push(out.len() as u32);
        let stopped = note.relocate.is_some();
        notes.push(note);
        if let (true, Some(spec)) = (stopped, call) {
            // A script stopped to run again with every shard held: the connection runs it,
            // then what came after it, in order (`Done::unrun`).
            let again = Item {
                op: Op::Call(spec),
                db,
                proto,
                args: item_args,
                caching,
                muted,
            };
            unrun = Some(std::iter::once(again).chain(items.by_ref()).collect());
            break;
        }
    }
    f.wake_deferred();
    let wrote = (client.last_write_seq > 0).then_some(client.last_write_seq);
    let after = s.persist.after_batch(pos_before);
    let _ = done.send(Done {
        out: out.buf,
        ends,
        notes,
        after,
        wrote,
        cut,
        unrun: unrun.map(|items| (items, args)),
    });
}

#[allow(clippy::too_many_arguments)]
fn run_item(
    s: &mut Shard,
    f: &mut Front,
    client: &mut Client,
    out: &mut Reply,
    op: Op,
    argv: &[&[u8]],
    now: u64,
    note: &mut Note,
) {
    // The log of this shard cannot be written: writes get MISCONF, as `cmd::admit` answers
    // for the connection's own shard.
    let refused = |s: &Shard, f: &mut Front, out: &mut Reply, spec: &CommandSpec| {
        if !spec.meta.flags.contains(cmd::table::Flags::WRITE) {
            return false;
        }
        let Some(text) = s.persist.refusal() else {
            return false;
        };
        if let Some(st) = f.stats.commands.get_mut(spec.idx) {
            st.rejected_calls += 1;
        }
        cmd::reply_error(f, out, &CmdError::Raw(text));
        true
    };
    match op {
        Op::SortFinish(spec, gathered) => {
            if refused(s, f, out, spec) {
                return;
            }
            client.shared.last_cmd.set(spec.meta.name);
            cmd::call_with(s, f, client, out, spec, argv, now, |ctx| {
                cmd::sort::finish(ctx, argv, *gathered)
            });
        }
        Op::Finish { spec, counted, run } => {
            if refused(s, f, out, spec) {
                return;
            }
            client.shared.last_cmd.set(spec.meta.name);
            if counted {
                cmd::call_with(s, f, client, out, spec, argv, now, run.0);
            } else {
                cmd::call_quiet_with(s, f, client, out, spec, argv, now, run.0);
            }
        }
        Op::CallLent(spec, lent) => {
            if refused(s, f, out, spec) {
                return;
            }
            client.shared.last_cmd.set(spec.meta.name);
            crate::read_across::call_lent(s, f, client, out, spec, argv, now, *lent);
        }
        Op::Call(spec) => {
            if refused(s, f, out, spec) {
                return;
            }
            // The batch's client is built afresh on this thread: what it runs is its current
            // command (CLIENT LIST and ACL LOG entries made during it show `cmd=`), as the
            // connection's thread sets before running a command inline.
            client.shared.last_cmd.set(spec.meta.name);
            cmd::call(s, f, client, out, spec, argv, now);
            note.blocked = client.blocked.take().map(Box::new);
        }
        Op::Quiet(spec) => cmd::call_quiet(s, f, client, out, spec, argv, now),
        Op::ScriptCall(spec) => crate::script::call_for_held(s, f, client, out, spec, argv, now),
        Op::Exec { multi, watched } => {
            let writes = multi.queued.iter().any(|q| {
                let argv: Vec<&[u8]> = q.args.iter().map(Vec::as_slice).collect();
                cmd::resolve(f.table, &argv)
                    .is_ok_and(|sp| sp.meta.flags.contains(cmd::table::Flags::WRITE))
            });
            client.watched = watched;
            if writes {
                if let Some(text) = s.persist.refusal() {
                    cmd::exec_abort(s, f, client, out, &text);
                    return;
                }
            }
            client.multi = Some(multi);
            client.shared.in_multi.set(true);
            match cmd::resolve(f.table, &[b"exec"]) {
                Ok(spec) => cmd::call(s, f, client, out, spec, argv, now),
                Err(e) => cmd::reply_error(f, out, &e),
            }
        }
        Op::Rerun(b) => settle_item(s, f, client, out, b, blocking::Settle::Serve, now, note),
        Op::TimeOut(b) => settle_item(s, f, client, out, b, blocking::Settle::TimeOut, now, note),
        Op::Unwatch => s.unwatch_all(&client.dirty),
        Op::Forget => {
            let dirty = client.dirty.clone();
            blocking::forget(s, f, client.id());
            s.forget_client(client.id(), &dirty);
        }
    }
}

/// A blocked client's connection asks its keys' shard to serve it or end its wait: the reply
/// (if it was not served) goes in `out`; `note.blocked` gives back the wait while it lasts.
#[allow(clippy::too_many_arguments)]
fn settle_item(
    s: &mut Shard,
    f: &mut Front,
    client: &Client,
    out: &mut Reply,
    b: Box<BlockedOn>,
    how: blocking::Settle,
    now: u64,
    note: &mut Note,
) {
    let (reply, waits) = blocking::settle(s, f, client.id(), how, now);
    out.raw(&reply);
    if waits {
        note.blocked = Some(b);
    }
}

/// A thread's inbox loop: runs until every sender is gone (the process stops).
pub async fn inbox(th: Rc<Thread>, mut rx: tokio::sync::mpsc::Receiver<Msg>) {
    while let Some(msg) = rx.recv().await {
        match msg {
            Msg::Accept(stream, id, input, transport) => {
                let _ = stream.set_nonblocking(true);
                match tokio::net::TcpStream::from_std(stream) {
                    Ok(s) => crate::conn::accepted(&th, s, id, input, transport),
                    Err(e) => tracing::warn!(error = %e, "handed-over connection unusable"),
                }
            }
            Msg::Batch(b, done) => run_batch(&th, b, done),
            Msg::Job(j) => {
                j(&th);
                th.front.borrow_mut().wake_deferred();
            }
            Msg::SyncLink(stream) => crate::sync::link::serve_handed(&th.shard, stream),
        }
    }
}

/// Runs `run` on `shard` as a step of `spec` (counted as the command when `counted`) and
/// returns its reply (`run_one`).
#[allow(clippy::too_many_arguments)]
pub async fn finish_step(
    th: &Rc<Thread>,
    client: &mut crate::client::Client,
    afters: &mut Vec<crate::persist::AfterBatch>,
    shard: u16,
    spec: &'static CommandSpec,
    argv: &[&[u8]],
    counted: bool,
    run: Finish,
) -> Result<Vec<u8>, CmdError> {
    let op = Op::Finish { spec, counted, run };
    run_one(th, client, afters, shard, op, argv).await
}

/// Runs one item, `op` over `argv`, for the connection's `client` on `shard` (a step of a
/// command it coordinates): on this thread's shard as a batch there would run it
/// (`run_item`, with the client itself), else sent there (`send_one`). Returns its reply; a
/// write there is noted in the client (CRDT.WAIT).
pub async fn run_one(
    th: &Rc<Thread>,
    client: &mut crate::client::Client,
    afters: &mut Vec<crate::persist::AfterBatch>,
    shard: u16,
    op: Op,
    argv: &[&[u8]],
) -> Result<Vec<u8>, CmdError> {
    if shard != th.index {
        return send_one(th, client, afters, shard, op, argv).await;
    }
    let mut sg = th.shard.borrow_mut();
    let mut fg = th.front.borrow_mut();
    let now = sg.now_ms();
    let mut r = crate::resp::reply::Reply::new();
    r.proto = client.shared.proto.get();
    let seq_before = sg.seq;
    let mut note = Note::default();
    run_item(&mut sg, &mut fg, client, &mut r, op, argv, now, &mut note);
    if sg.seq != seq_before {
        client.note_write(shard, sg.seq);
    }
    Ok(r.buf)
}

/// Sends one item, `op` over `argv`, to another thread's `shard` for the connection's
/// `client` (a step of a command it coordinates) and returns its reply: a write there is
/// noted in the client (CRDT.WAIT), its persistence condition pushed to `afters`, and a
/// request to close the connection (CLIENT KILL of itself) kept in the client.
pub async fn send_one(
    th: &Rc<Thread>,
    client: &mut crate::client::Client,
    afters: &mut Vec<crate::persist::AfterBatch>,
    shard: u16,
    op: Op,
    argv: &[&[u8]],
) -> Result<Vec<u8>, CmdError> {
    let mut batch = Batch::new(ClientView::of(client));
    batch.push(op, client.db, client.shared.proto.get(), argv);
    let rx = send(th, shard, batch).await.map_err(unavailable_error)?;
    let mut done = rx
        .await
        .map_err(|_| unavailable_error(Unavailable { shard }))?;
    if let Some(seq) = done.wrote {
        client.note_write(shard, seq);
    }
    afters.push(std::mem::replace(
        &mut done.after,
        crate::persist::AfterBatch::Reply,
    ));
    if done.notes.first().is_some_and(|n| n.close) {
        client.close_after_reply = true;
    }
    Ok(done.reply(0).to_vec())
}

/// Writes `e` to `out` as a command's error (counted in errorstats on this thread).
pub fn reply_error(th: &Thread, out: &mut crate::resp::reply::Reply, e: &CmdError) {
    let mut fg = th.front.borrow_mut();
    cmd::reply_error(&mut fg, out, e);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_round_trip() {
        let mut a = Args::default();
        let x = a.push(&[b"set", b"k", b""]);
        let y = a.push(&[b"get", b"key"]);
        assert_eq!(&a.get(x)[..], &[&b"set"[..], b"k", b""]);
        assert_eq!(&a.get(y)[..], &[&b"get"[..], b"key"]);
        assert!(a.get((9, 2)).is_empty());
        assert_eq!(a.arg(x, 1), Some(&b"k"[..]));
        assert_eq!(a.arg(x, 2), Some(&b""[..]));
        assert_eq!(a.arg(y, 1), Some(&b"key"[..]));
        // Past the item's count, or arguments the buffer does not hold.
        assert_eq!(a.arg(x, 3), None);
        assert_eq!(a.arg((9, 2), 0), None);
        assert_eq!(a.arg((u32::MAX, 2), 1), None);
        let done = Done {
            out: b"+OK\r\n$1\r\nv\r\n".to_vec(),
            ends: vec![5, 12],
            notes: Vec::new(),
            after: AfterBatch::Reply,
            wrote: None,
            cut: false,
            unrun: None,
        };
        assert_eq!(done.reply(0), b"+OK\r\n");
        assert_eq!(done.reply(1), b"$1\r\nv\r\n");
        assert_eq!(done.reply(2), b"");
    }
}

//! One client connection: read, parse, dispatch, write replies in batches.
//!
//! Each read may hold many pipelined commands; all complete ones run in order and their
//! replies go out in one write. The parser resumes across reads, so a large argument arriving
//! in pieces is scanned once. A protocol error is answered with Redis's text, then the
//! connection closes, as Redis does.
//!
//! The connection's thread coordinates its commands (`route`): a command whose keys this
//! thread's shard owns runs inline; one for another shard joins that shard's batch of this
//! round (`hop::Batch`: every command of the read for that shard, one message); the replies
//! of the round are put back in command order before they are written. Commands that need
//! every shard or wait (`Barrier`: DBSIZE, INFO, EXEC on another shard, a blocking pop...)
//! end the round: what came before completes first, then they run alone. Commands for
//! different shards may take effect in any order; each shard runs a connection's commands
//! in the order sent, and replies keep the order of the requests.
//!
//! A command that blocks (`Ctx::block`, see `crate::blocking`) stops the batch: its arguments
//! are kept and the connection waits for a write to one of its keys (then re-runs it), its
//! deadline, or the client's end; the pipelined commands after it run once it is answered.
//! Output other connections queue (`Mailbox::push_out`: MONITOR, Pub/Sub) is written when
//! the task is woken, and before the replies of the next batch.

use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf as _, BytesMut};
use smallvec::SmallVec;

use crate::blocking;
use crate::client::ClientShared;
use crate::client::{Client, MultiState};
use crate::cmd::{
    self,
    table::{CommandSpec, Table},
};
use crate::config::OutputLimit;
use crate::error::CmdError;
use crate::front::Front;
use crate::hop::{self, Batch, ClientView, Done, Op, Thread};
use crate::persist::AfterBatch;
use crate::resp::parse::{ParseLimits, Parsed, Parser};
use crate::resp::read;
use crate::resp::reply::Reply;
use crate::route::{self, Class, KeysAt, Merge, Scatter, Special};
use crate::shard::Shard;
use crate::stream::ClientStream;

/// Initial read buffer per connection; it grows for large arguments.
pub const READ_BUF_BYTES_INITIAL: usize = 16 * 1024;
/// Reads are at least this large, so a pipeline is taken in few system calls.
pub const READ_CHUNK_BYTES_MIN: usize = 16 * 1024;
/// Output kept allocated between batches; a larger buffer is released after use.
pub const REPLY_BUF_BYTES_KEPT: usize = 64 * 1024;
/// Commands of one read dispatched before the round's batches are sent: a pipeline larger
/// than this travels in several rounds, which bounds the replies held at once.
pub const ROUND_COMMANDS_MAX: usize = 1024;
/// Commands of a pipeline whose keys `Conn::look_ahead` looks up before they run: enough
/// for the memory misses of that many probes to overlap, bounded so that a call of `plan`
/// (again after each barrier) does bounded extra work.
pub const LOOKAHEAD_COMMANDS_MAX: usize = 16;

/// The keys `Conn::look_ahead` looks up in `buf`: the key of each of the first
/// `LOOKAHEAD_COMMANDS_MAX` complete commands that `table` says take their key first and
/// that `mine` keeps (the key is this thread's shard's). None when nothing follows the first
/// command in `buf`: a lone command's own lookup comes next anyway.
fn lookahead_keys<'a>(
    buf: &'a [u8],
    table: &Table,
    mine: impl Fn(&[u8]) -> bool,
) -> SmallVec<[&'a [u8]; LOOKAHEAD_COMMANDS_MAX]> {
    let mut keys = SmallVec::new();
    match crate::resp::parse::peek_command(buf) {
        Some((_, _, first)) if first < buf.len() => {}
        _ => return keys,
    }
    let mut pos = 0usize;
    for _ in 0..LOOKAHEAD_COMMANDS_MAX {
        let Some((name, key, len)) = buf.get(pos..).and_then(crate::resp::parse::peek_command)
        else {
            break;
        };
        pos += len;
        let Some(spec) = table.lookup(name) else {
            continue;
        };
        if spec.is_container || spec.meta.first_key != 1 || !mine(key) {
            continue;
        }
        keys.push(key);
    }
    keys
}

/// What ended a blocked client's wait step.
enum BlockedEvent {
    /// Bytes arrived; they wait in the read buffer.
    Input(usize),
    /// A key it waits on was written (or push output, or CLIENT KILL).
    Wake,
    /// The deadline may have passed.
    Timeout,
}

/// Whether a batch's replies may be written: at once, after the fsync covering it
/// (`always`), or never (its writes could not be logged: the connection closes).
async fn replies_may_go(after: AfterBatch) -> bool {
    use std::sync::atomic::Ordering;
    match after {
        AfterBatch::Reply => true,
        AfterBatch::Drop => false,
        AfterBatch::Wait(target, w) => loop {
            let notified = w.durable.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if w.durable_pos.load(Ordering::Acquire) >= target {
                return true;
            }
            if w.failed() {
                return false;
            }
            notified.await;
        },
    }
}

/// Where a reply of the round comes from.
#[derive(Debug)]
enum Slot {
    /// Bytes `start..end` of the round's local output.
    Local(usize, usize),
    /// Item `idx` of the batch for `shard`.
    Remote(u16, usize),
    /// A command split over shards.
    Gather(Gather),
}

/// A scattered command's parts and how their replies merge.
#[derive(Debug)]
struct Gather {
    kind: Scatter,
    parts: Vec<Slot>,
    /// MGET: for each key in request order, (part, element of that part's reply).
    order: Vec<(usize, usize)>,
}

/// The commands of one read until a barrier: inline replies, and per shard the batch of
/// commands for it.
#[derive(Debug, Default)]
struct Round {
    /// Some command went to another shard: inline replies go to `local` until it is done.
    active: bool,
    local: Reply,
    slots: Vec<Slot>,
    batches: Vec<(u16, Batch)>,
    commands: usize,
}

impl Round {
    fn batch(&mut self, shard: u16, client: &Client) -> &mut Batch {
        let i = match self.batches.iter().position(|(s, _)| *s == shard) {
            None => {
                self.batches
                    .push((shard, Batch::new(ClientView::of(client))));
                self.batches.len() - 1
            }
            Some(i) => {
                // CLIENT TRACKING may have run since the batch began (it runs inline).
                if let Some((_, b)) = self.batches.get_mut(i) {
                    b.client.tracking = client.shared.tracking.borrow().clone();
                }
                i
            }
        };
        // Just found or pushed.
        match self.batches.get_mut(i) {
            Some((_, b)) => b,
            None => unreachable_batch(),
        }
    }
}

#[cold]
fn unreachable_batch() -> ! {
    // `Round::batch` returns the entry it found or pushed.
    std::process::abort()
}

/// A command that runs alone, after the round before it (see the module doc).
#[derive(Debug)]
struct Barrier {
    spec: &'static CommandSpec,
    argv: Vec<Vec<u8>>,
    kind: BarrierKind,
}

#[derive(Debug, Clone, Copy)]
enum BarrierKind {
    /// On every shard, replies merged.
    All(Merge),
    Special(Special),
    /// A blocking command, on this shard.
    Blocking(u16),
    /// A command reading keys of several shards (`crate::read_across`; its plan is made
    /// again when it runs, from the same arguments).
    ReadAcross,
    /// LMPOP or ZMPOP over keys of several shards: the pop runs on each key's shard in turn,
    /// until one pops (`Conn::pop_first_across`).
    PopAcross,
    /// RENAME or RENAMENX between two shards (`crate::move_across`).
    MoveAcross,
    /// A blocking pop over keys of several shards (`Conn::pop_blocking_across`).
    BlockAcross,
    /// XREAD or XREADGROUP over streams of several shards (`Conn::streams_across`).
    StreamsAcross,
    /// A script that declares no key, with several shards: it runs on this thread's shard,
    /// and again on the shard of the first key it reached there if it did nothing else
    /// (`Scripting::relocate`), as one Redis would run it wherever its keys are.
    Script,
    /// A script whose declared keys are on several shards of this process: it runs on its
    /// first key's shard with every shard of its keys held (`crate::tx_across`).
    ScriptAcross,
    /// A script that stopped, having done nothing, because it reached what the shards held
    /// for it do not own (`Scripting::relocate`): it runs on this shard (its first key's)
    /// with every shard of this process held.
    ScriptHeld(u16),
    /// LMOVE or RPOPLPUSH between two shards of this process, both held
    /// (`cmd::list::move_to_held_shard`).
    ListMoveAcross,
}

/// What dispatching one command led to.
enum Step {
    Next,
    Barrier(Barrier),
    /// Stop reading commands (the client blocked, or closes).
    Stop,
}

/// The blocking pops that may wait on keys of several shards (`Conn::pop_blocking_across`).
const POPS_ACROSS: &[&str] = &["blpop", "brpop", "bzpopmin", "bzpopmax", "blmpop", "bzmpop"];

/// The blocking list moves that may wait on a source of another shard than their
/// destination's (`Conn::pop_blocking_across`).
const MOVES_ACROSS: &[&str] = &["blmove", "brpoplpush"];

/// XREAD and XREADGROUP, whose streams may be on several shards (`Conn::streams_across`).
const STREAMS_ACROSS: &[&str] = &["xread", "xreadgroup"];

/// What a command waiting on keys of several shards tries each time (`Conn::wait_across`).
enum AcrossTry {
    /// A blocking pop: the command over each key alone, on its shard, in order.
    Pops {
        tries: Vec<(u16, Vec<Vec<u8>>)>,
        handler: cmd::Handler,
    },
    /// BLMOVE or BRPOPLPUSH: the move, with both shards held (`Conn::list_move_try`).
    Move { sides: (bool, bool) },
    /// XREAD or XREADGROUP: the command over each shard's streams, without BLOCK, the
    /// replies merged by `order` (`Conn::streams_try`).
    Streams {
        parts: Vec<(u16, Vec<Vec<u8>>)>,
        order: Vec<(usize, Vec<u8>)>,
    },
}

/// A transaction across shards (`Conn::exec_across_plan`): the shards to hold, ascending; its
/// segments, each a shard and its consecutive parts (a queued command's index, and that
/// command's arguments on this shard when it is split, None when it runs whole); and how
/// each queued command's parts make its reply.
struct ExecAcross {
    holds: Vec<u16>,
    segments: Vec<(u16, Vec<TxPart>)>,
    joins: Vec<crate::tx_across::Join>,
}

/// A part of a queued command in a transaction across shards (`ExecAcross`).
type TxPart = (usize, Option<Vec<Vec<u8>>>);

/// A queued command of a transaction that every shard runs: its place in the transaction,
/// spec and arguments (`Conn::exec_plan`).
type Broadcast = (usize, &'static CommandSpec, Vec<Vec<u8>>);

/// One connection's state between reads.
struct Conn {
    th: Rc<Thread>,
    client: Client,
    out: Reply,
    round: Round,
    /// Remote batches' persistence conditions, awaited before the replies go out.
    afters: Vec<AfterBatch>,
    /// The next barrier's reply is dropped (CLIENT REPLY OFF or SKIP).
    barrier_muted: bool,
    /// Where planning stopped before a command to make room on every shard first
    /// (`make_room`), and whether that was done for the command about to be parsed.
    room: Room,
    /// WATCH of keys on a shard of another node of the site: the watch lives on a
    /// connection of this client's own to that shard's endpoint, where its EXEC then runs
    /// (`watch`, `exec`); dropped (and the watch with it) by EXEC, UNWATCH, DISCARD, RESET.
    watch_link: Option<WatchLink>,
}

/// A client's own link to another node's shard, holding its WATCH there.
struct WatchLink {
    shard: u16,
    link: meridian_proxy::Link,
}

/// A connection's steps of making room under `maxmemory` across shards (`Conn::make_room`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Room {
    /// Nothing pending: the next command checks `ProcessMemory::room_wanted`.
    Check,
    /// Planning stopped before a command: make room, then plan it.
    Wanted,
    /// Made for the next command: it runs without checking again.
    Made,
}

/// Writes `buf` to the client. Gives up (false) when the connection fails, when the client
/// is killed meanwhile (CLIENT KILL, `timeout`, shutdown), or when the output still pending
/// breaks its class's limit (`ClientShared::output_over_limit`: the hard bound at once, the
/// soft one after its seconds): a client that never reads holds at most one batch of
/// replies, and not for longer than its class allows.
async fn write_out(
    stream: &ClientStream,
    buf: &[u8],
    shared: &ClientShared,
    limit: OutputLimit,
) -> bool {
    shared.writing.set(true);
    let mut written = 0usize;
    let mut woken = false;
    let ok = loop {
        let rest = buf.get(written..).unwrap_or_default();
        if rest.is_empty() {
            // All taken; a TLS session may still hold ciphertext the socket did not take.
            match stream.try_flush() {
                Ok(true) => break true,
                Ok(false) => {}
                Err(_) => break false,
            }
        } else {
            shared.obuf_bytes.set(rest.len());
            if shared.output_over_limit(rest.len(), &limit, crate::time::wall_ms()) {
                tracing::warn!(client = %shared.addr, "client scheduled to be closed ASAP for overcoming of output buffer limits");
                break false;
            }
            // The write goes first, so the timer is only set up when it would block.
            match stream.try_write(rest) {
                Ok(0) => break false,
                Ok(n) => {
                    written += n;
                    continue;
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                Err(_) => break false,
            }
        }
        tokio::select! {
            biased;
            r = stream.writable() => if r.is_err() {
                break false;
            },
            () = shared.mailbox.wake.notified() => {
                if shared.is_killed() {
                    break false;
                }
                // Push output queued meanwhile is written by the caller's loop.
                woken = true;
            }
            () = tokio::time::sleep(OUTPUT_CHECK_PERIOD) => {}
        }
    };
    shared.obuf_bytes.set(0);
    shared.writing.set(false);
    if woken {
        shared.mailbox.wake.notify_one();
    }
    ok
}

/// How often a write that does not progress re-checks the output limits.
pub const OUTPUT_CHECK_PERIOD: Duration = Duration::from_millis(250);

/// Reads what the client sent (at least one byte, or 0 at the end of the stream).
/// Cancel-safe: the stream is shared (by `Rc`) with the busy-script side path.
async fn read_some(
    stream: &ClientStream,
    buf: &mut BytesMut,
    want: usize,
    read_ns: &std::cell::Cell<u64>,
) -> std::io::Result<usize> {
    let n = stream.read_some(buf, want).await?;
    if n > 0 {
        read_ns.set(stream.read_ns());
    }
    Ok(n)
}

/// Drops the first `n` bytes of a read buffer (the commands run). `BytesMut::advance` alone
/// keeps the whole allocation and shows only what lies past the cut as capacity, so a buffer
/// that a 1 MB request grew looked like a few KiB to the cron (`resize_read_buf` never
/// shrank it) and stayed allocated while its connection lived: Redis's suite saw used memory
/// stay 1.5 MB up after lazyfree's 100,000-member SADD. The room before the cut is taken
/// back when what is left fits in it (nothing, or a partial command no longer than the cut:
/// at most that many bytes copied, never an allocation), so capacity is the allocation again.
pub(crate) fn consume_read(rbuf: &mut BytesMut, n: usize) {
    rbuf.advance(n);
    // One byte more than is visible can come only from the room before the cut.
    let _ = rbuf.try_reclaim(rbuf.capacity() + 1);
}

/// Resizes a read buffer to `target` bytes of room (never below what it holds; 0: gives it
/// all back), as the thread's cron asked (`ClientShared::plan_query_buffer_resize`).
fn resize_read_buf(rbuf: &mut BytesMut, target: usize) {
    let target = target.max(rbuf.len());
    if target >= rbuf.capacity() {
        return;
    }
    if target == 0 {
        *rbuf = BytesMut::new();
    } else {
        let mut smaller = BytesMut::with_capacity(target);
        smaller.extend_from_slice(rbuf);
        *rbuf = smaller;
    }
}

/// Serves one accepted connection until it closes, is killed, or the server stops.
/// `endpoint`: the shard whose cluster endpoint accepted it (None: the main port).
pub async fn serve(th: Rc<Thread>, stream: ClientStream, id: u64, endpoint: Option<u16>) {
    serve_with_input(th, stream, id, endpoint, BytesMut::new()).await;
}

/// A connection the busy script's side path accepted and served (`script::busy::EarlyConn`):
/// its task starts with the id the side path gave it and what AUTH and HELLO set there.
pub async fn serve_early(th: Rc<Thread>, early: crate::script::busy::EarlyConn) {
    let crate::script::busy::EarlyConn { stream, who, .. } = early;
    let Some(mut a) = admit(&th, stream, who.id, None, BytesMut::new()) else {
        return;
    };
    a.shared.set_proto(who.proto.get());
    a.shared.name.replace(who.name.take());
    a.shared.user.replace(who.user.take());
    if who.authenticated.get() {
        a.shared.authenticated.set(true);
        a.limits.authenticated = true;
    }
    serve_admitted(th, a).await;
}

/// `serve` for a connection that already sent `input` (accepted while the shards loaded,
/// `crate::loading`): those bytes are parsed first.
pub async fn serve_with_input(
    th: Rc<Thread>,
    stream: ClientStream,
    id: u64,
    endpoint: Option<u16>,
    input: BytesMut,
) {
    if let Some(a) = admit(&th, stream, id, endpoint, input) {
        serve_admitted(th, a).await;
    }
}

/// Starts serving a connection accepted on the main port or the TLS port, on this thread.
/// It is registered now, before a script could start running long here (a TLS one too, as
/// Redis creates its client before the handshake: it counts against maxclients, and the
/// busy-script side path drives its handshake). Its task completes a TLS handshake first,
/// within `tls-handshake-timeout-ms` (`serve_admitted`), so neither the acceptor nor other
/// connections wait for it.
pub fn accepted(
    th: &Rc<Thread>,
    tcp: tokio::net::TcpStream,
    id: u64,
    input: BytesMut,
    transport: crate::stream::Transport,
) {
    let stream = match transport {
        crate::stream::Transport::Tcp => ClientStream::plain(tcp),
        crate::stream::Transport::Tls => {
            let Some(tls) = th.node.client_tls.as_ref() else {
                return;
            };
            match tls.session() {
                Ok(session) => ClientStream::tls(tcp, session),
                Err(e) => {
                    tracing::warn!(error = %e, "TLS session not created; connection closed");
                    return;
                }
            }
        }
    };
    if let Some(a) = admit(th, stream, id, None, input) {
        tokio::task::spawn_local(serve_admitted(th.clone(), a));
    }
}

/// Redis's reply to a connection past `maxclients`.
pub const MAXCLIENTS_REACHED: &[u8] = b"-ERR max number of clients reached\r\n";

/// Redis's protected-mode refusal, sent to clients from other addresses than 127.0.0.1 and
/// ::1 while `protected-mode` is on and the default user has no password.
pub const PROTECTED_MODE_DENIED: &[u8] = b"-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// Redis's `islocalClient`: exactly 127.0.0.1 or ::1 (an IPv4-mapped 127.0.0.1 too).
pub(crate) fn is_local(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4 == std::net::Ipv4Addr::LOCALHOST,
        std::net::IpAddr::V6(v6) => {
            v6 == std::net::Ipv6Addr::LOCALHOST
                || v6.to_ipv4_mapped() == Some(std::net::Ipv4Addr::LOCALHOST)
        }
    }
}

/// Whether a new connection from `addr` is refused, and with which error (Redis's
/// `acceptCommonHandler` order: maxclients, then protected mode). `connected` counts the
/// connections there are already. The caller counts a refusal in `rejected_connections`.
pub fn refusal(
    shard: &Shard,
    connected: usize,
    addr: std::net::SocketAddr,
) -> Option<&'static [u8]> {
    if connected >= shard.config.maxclients as usize {
        Some(MAXCLIENTS_REACHED)
    } else if shard.config.protected_mode
        && shard.acl.default_user().get().nopass()
        && !is_local(addr.ip())
    {
        Some(PROTECTED_MODE_DENIED)
    } else {
        None
    }
}

/// A connection registered on its thread, its task not started yet.
pub struct Admitted {
    stream: Rc<ClientStream>,
    shared: Rc<ClientShared>,
    endpoint: Option<u16>,
    limits: ParseLimits,
    /// The error a refused connection gets before it closes (`refusal`).
    refused: Option<&'static [u8]>,
    /// Bytes the client sent before it was admitted (accepted while loading): parsed first,
    /// under the same limits (an unauthenticated client's included).
    input: BytesMut,
}

/// Registers an accepted connection at once, before its task first runs: a script that
/// starts running long in the meantime answers it from the side path (`script::busy`),
/// which finds the thread's clients in `Scripting::clients`. `None` when the socket has no
/// addresses (closed). The client starts authenticated only when the default user needs no
/// password; until then its parser applies Redis's unauthenticated limits.
pub fn admit(
    th: &Rc<Thread>,
    stream: ClientStream,
    id: u64,
    endpoint: Option<u16>,
    input: BytesMut,
) -> Option<Admitted> {
    let (addr, laddr) = match (stream.peer_addr(), stream.local_addr()) {
        (Ok(a), Ok(l)) => (a, l),
        _ => return None,
    };
    let _ = stream.set_nodelay(true);
    let mut s = th.shard.borrow_mut();
    let mut f = th.front.borrow_mut();
    let now = s.now_ms();
    let open = s.acl.default_is_open();
    let limits = ParseLimits {
        bulk_bytes_max: s.config.proto_max_bulk_len as i64,
        authenticated: open,
    };
    let refused = refusal(&s, th.node.client_connected(), addr);
    if refused.is_some() {
        f.stats.rejected_connections += 1;
    }
    let shared = f.register_client(id, addr, laddr, now);
    shared.mailbox.set_fd(stream.raw_fd());
    shared.authenticated.set(open);
    let stream = Rc::new(stream);
    // Shared (weakly) with the busy-script side path; a refused connection is never served
    // by it.
    if refused.is_none() {
        shared.socket.replace(Rc::downgrade(&stream));
        s.scripting.clients.insert(id, Rc::downgrade(&shared));
    }
    Some(Admitted {
        stream,
        shared,
        endpoint,
        limits,
        refused,
        input,
    })
}

/// Serves a connection `admit` registered.
pub async fn serve_admitted(th: Rc<Thread>, a: Admitted) {
    let Admitted {
        stream,
        shared,
        endpoint,
        limits,
        refused,
        input,
    } = a;
    let node = th.node.clone();
    let id = shared.id;
    let mut client = Client::new(shared.clone());
    client.endpoint = endpoint;
    shared.mailbox.set_endpoint(endpoint);
    let mut conn = Conn {
        th: th.clone(),
        client,
        out: Reply::new(),
        round: Round::default(),
        afters: Vec::new(),
        barrier_muted: false,
        room: Room::Check,
        watch_link: None,
    };
    // A TLS connection's handshake completes before anything is written or read, within
    // its bound (a client that never completes it holds its slot no longer).
    let timeout_ms = th.shard.borrow().config.tls_handshake_timeout_ms;
    let handshaken = match tokio::time::timeout(
        Duration::from_millis(timeout_ms),
        stream.handshake(),
    )
    .await
    {
        Ok(Ok(())) => true,
        // Redis logs these at verbose level: a port scanner or a client with the wrong CA
        // is no server fault.
        Ok(Err(e)) => {
            tracing::debug!(client = %shared.addr, error = %e, "TLS handshake failed");
            false
        }
        Err(_) => {
            tracing::debug!(client = %shared.addr, timeout_ms, "TLS handshake not completed in time");
            false
        }
    };
    match (handshaken, refused) {
        (false, _) => {}
        (true, Some(text)) => {
            let _ = write_out(
                &stream,
                text,
                &shared,
                OutputLimit {
                    hard_bytes: 0,
                    soft_bytes: 0,
                    soft_seconds: 0,
                },
            )
            .await;
        }
        (true, None) => conn.run(&stream, Parser::new(limits), input).await,
    }
    th.shard.borrow_mut().scripting.clients.remove(&id);
    shared.socket.replace(std::rc::Weak::new());
    if let Ok(mut stream) = Rc::try_unwrap(stream) {
        stream.shutdown().await;
    }
    conn.leave().await;
    node.client_gone();
}

impl Conn {
    fn is_killed(&self) -> bool {
        self.client.shared.is_killed()
    }

    /// This client's output limit (its class's `client-output-buffer-limit`).
    fn output_limit(&self) -> OutputLimit {
        let s = self.th.shard.borrow();
        self.client
            .shared
            .output_limit(&s.config.client_output_buffer_limit)
    }

    async fn run(&mut self, stream: &ClientStream, mut parser: Parser, input: BytesMut) {
        let mut rbuf = input;
        rbuf.reserve(READ_BUF_BYTES_INITIAL);
        self.client.shared.qbuf_cap_bytes.set(rbuf.capacity());
        // The read buffer may hold complete commands not run yet (a blocking command ended,
        // or the connection was handed over after loading).
        let mut buffered = !rbuf.is_empty();
        let addr = self.client.shared.addr;
        loop {
            if self.is_killed() {
                return;
            }
            if self.client.blocked.is_some() {
                match self.blocked_step(stream, &mut rbuf).await {
                    Some(unblocked) => buffered |= unblocked,
                    None => return,
                }
                continue;
            }
            if !buffered {
                let want = parser
                    .bytes_hint()
                    .unwrap_or(0)
                    .saturating_sub(rbuf.len())
                    .max(READ_CHUNK_BYTES_MIN);
                let mailbox = self.client.shared.mailbox.clone();
                let n = tokio::select! {
                    r = read_some(stream, &mut rbuf, want, &self.client.shared.read_ns) => r,
                    () = mailbox.wake.notified() => {
                        let shared = &self.client.shared;
                        if let Some(target) = shared.qbuf_resize.take() {
                            resize_read_buf(&mut rbuf, target);
                            shared.qbuf_cap_bytes.set(rbuf.capacity());
                        }
                        // MONITOR lines and Pub/Sub messages from other connections.
                        let pending = mailbox.take();
                        let limit = self.output_limit();
                        // A TLS session may hold output the side path left (`script::busy`).
                        if (!pending.is_empty() || stream.has_pending_output())
                            && !write_out(stream, &pending, &self.client.shared, limit).await
                        {
                            return;
                        }
                        continue;
                    }
                };
                let n = match n {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                self.th.front.borrow_mut().stats.net_input_bytes += n as u64;
                let shared = &self.client.shared;
                // A resize the cron planned before this input is stale.
                shared.qbuf_resize.set(None);
                let peak = rbuf.len().max(parser.bytes_hint().unwrap_or(0));
                shared
                    .qbuf_peak_bytes
                    .set(shared.qbuf_peak_bytes.get().max(peak));
            }
            buffered = false;
            let query_limit = self.th.shard.borrow().config.client_query_buffer_limit as usize;
            if !self.process(stream, &mut rbuf, &mut parser).await {
                return;
            }
            if rbuf.is_empty() && rbuf.capacity() < READ_BUF_BYTES_INITIAL {
                // The room behind the commands run is free again: no copy, as nothing is
                // left to move.
                rbuf.reserve(READ_BUF_BYTES_INITIAL);
            }
            self.client.shared.qbuf_cap_bytes.set(rbuf.capacity());
            if !self.flush(stream).await {
                return;
            }
            if self.client.close_after_reply {
                return;
            }
            if rbuf.len() > query_limit {
                tracing::warn!(client = %addr, bytes = rbuf.len(), "closing client that reached max query buffer length");
                return;
            }
        }
    }

    /// Writes the pending replies once their writes are logged as the policy demands.
    /// Returns false when the connection must close.
    async fn flush(&mut self, stream: &ClientStream) -> bool {
        // appendfsync always: no reply leaves before the records of the writes it answers
        // (or that it may have read) are on disk. A failed write closes the connection
        // unanswered: those writes are not acknowledged.
        for after in std::mem::take(&mut self.afters) {
            if !replies_may_go(after).await {
                return false;
            }
        }
        self.th.front.borrow_mut().wake_deferred();
        if !self.out.is_empty() {
            self.th.front.borrow_mut().stats.net_output_bytes += self.out.len() as u64;
            let limit = self.output_limit();
            if !write_out(stream, &self.out.buf, &self.client.shared, limit).await {
                return false;
            }
            self.out.clear();
            if self.out.buf.capacity() > REPLY_BUF_BYTES_KEPT {
                self.out.buf.shrink_to(REPLY_BUF_BYTES_KEPT);
            }
        }
        true
    }

    /// Runs the complete commands in `rbuf`, round after round. Returns false when the
    /// connection must close at once.
    async fn process(
        &mut self,
        stream: &ClientStream,
        rbuf: &mut BytesMut,
        parser: &mut Parser,
    ) -> bool {
        let pos_before = self.th.shard.borrow().persist.next_pos;
        let mut pos = 0usize;
        let mut first = true;
        let mut round_full;
        loop {
            let barrier = {
                let th = self.th.clone();
                let mut shard_guard = th.shard.borrow_mut();
                let s = &mut *shard_guard;
                let mut front_guard = th.front.borrow_mut();
                let f = &mut *front_guard;
                // CONFIG SET proto-max-bulk-len applies to commands parsed from now on, and
                // so does authentication.
                parser.set_limits(ParseLimits {
                    bulk_bytes_max: s.config.proto_max_bulk_len as i64,
                    authenticated: !cmd::acl::auth_required(s, &self.client),
                });
                let now = s.now_ms();
                self.client.shared.last_interaction_ms.set(now);
                if first {
                    // Pushes queued before this batch go out before its replies.
                    let pushed = self.client.shared.mailbox.take();
                    self.out.raw(&pushed);
                    first = false;
                }
                let buf = rbuf.get(pos..).unwrap_or_default();
                let (consumed, barrier) = self.plan(s, f, parser, buf, now);
                f.wake_deferred();
                pos += consumed;
                round_full = self.round.commands >= ROUND_COMMANDS_MAX;
                barrier
            };
            if !self.finish_round().await {
                return false;
            }
            if self.room == Room::Wanted {
                self.make_room().await;
                continue;
            }
            let b = match barrier {
                Some(b) => b,
                // The round filled: the commands left in the buffer run in the next one
                // (waiting for more input first would leave a pipeline unanswered).
                None if round_full && !self.client.close_after_reply && !self.is_killed() => {
                    continue;
                }
                None => break,
            };
            if !self.run_barrier(b, stream, rbuf, pos).await {
                return false;
            }
            if self.client.blocked.is_some() || self.client.close_after_reply || self.is_killed() {
                break;
            }
        }
        consume_read(rbuf, pos);
        self.client.shared.qbuf_bytes.set(rbuf.len());
        let mut s = self.th.shard.borrow_mut();
        if self.client.last_write_seq > 0 {
            let (local, seq) = (self.th.index, self.client.last_write_seq);
            self.client.note_write(local, seq);
        }
        // The batch's records are written (write(2)) before its replies go out.
        let after = s.persist.after_batch(pos_before);
        self.afters.push(after);
        true
    }

    /// Whether to make room on every shard before the next command (`make_room`): the
    /// process has several shards here, a `maxmemory` with a policy that evicts, and some
    /// shard saw it over. A site link's ops are applied whatever the memory.
    fn room_wanted(&self, s: &Shard, f: &Front, now: u64) -> bool {
        s.config.maxmemory != 0
            && f.node.local > 1
            && !self.client.site_link
            && s.config.maxmemory_policy != "noeviction"
            && s.evict.process.room_wanted(now)
    }

    /// Redis's `performEvictions` before a command, for a process of several shards: asks
    /// each shard of this process in turn to evict its own keys (`Shard::perform_evictions`)
    /// until one finds the process under the limit. The shard the command goes to may hold
    /// nothing the policy evicts (`volatile-*` with no TTL there) while another does; asking
    /// only it would refuse the command -OOM, or run it before the eviction it needed, as
    /// Redis never does. The invalidations and `evicted` notifications the evictions caused
    /// for this client go out before the command's reply, as Redis's do. When no shard could
    /// evict anything, connections stop asking for `evict::ROOM_FUTILE_RETRY_MS`.
    async fn make_room(&mut self) {
        use crate::evict::Outcome;
        self.room = Room::Made;
        let mut progress = false;
        let shards = self.th.node.local_shards();
        let n = shards.len().max(1);
        let first = self.th.shard.borrow().evict.process.next_room_round() % n;
        for i in 0..n {
            let t = shards.start + u16::try_from((first + i) % n).unwrap_or(0);
            let fresh = i == 0;
            let outcome = hop::run_on(&self.th, t, move |th| {
                let mut s = th.shard.borrow_mut();
                let now = s.now_ms();
                // Other threads' growth (lazy frees, log writers) counts at once: one new
                // reading of the allocator, which every shard shares.
                if fresh {
                    s.forget_used_memory_reading();
                }
                let outcome = s.perform_evictions(now);
                drop(s);
                th.front.borrow_mut().wake_deferred();
                outcome
            })
            .await;
            match outcome {
                Ok(Outcome::Ok) => {
                    progress = true;
                    break;
                }
                // It freed its share; the rest is the next shard's to find.
                Ok(Outcome::Running) => progress = true,
                Ok(Outcome::Fail) | Err(_) => {}
            }
        }
        if !progress {
            let s = self.th.shard.borrow();
            s.evict.process.note_room_futile(s.now_ms());
        }
        let pushed = self.client.shared.mailbox.take();
        self.out.raw(&pushed);
    }

    /// Before a pipeline runs, looks up the keys of its next commands for this thread's
    /// shard (`Shard::warm_keys`, the first `LOOKAHEAD_COMMANDS_MAX`), so that the memory
    /// misses of their table probes overlap, as Valkey 8 prefetches a batch's keys; each
    /// command then finds its entry in the cache. A hint only: a command it misreads (a
    /// SELECT in the pipeline, a key of another shard) costs one probe and changes nothing.
    /// Only commands whose first argument is their key are looked at, and nothing with one
    /// command in the buffer (its own lookup comes next anyway).
    fn look_ahead(&self, s: &Shard, f: &Front, buf: &[u8]) {
        if self.client.multi.is_some() {
            return;
        }
        let (shards, index) = (f.node.shards, self.th.index);
        let slots = &f.node.slots;
        let keys = lookahead_keys(buf, f.table, |key| {
            shards == 1 || slots.shard_of_key(key) == index
        });
        if keys.is_empty() {
            return;
        }
        let hashed: SmallVec<[(u64, &[u8]); LOOKAHEAD_COMMANDS_MAX]> =
            keys.iter().map(|&k| (s.hash_key(k), k)).collect();
        let db = self.client.db;
        s.warm_keys(db, &hashed);
    }

    /// Parses and dispatches commands of `buf` until it holds no complete command, a
    /// barrier, or a stop. Returns the bytes consumed and the barrier met.
    fn plan(
        &mut self,
        s: &mut Shard,
        f: &mut Front,
        parser: &mut Parser,
        buf: &[u8],
        now: u64,
    ) -> (usize, Option<Barrier>) {
        self.look_ahead(s, f, buf);
        let mut pos = 0usize;
        loop {
            if self.round.commands >= ROUND_COMMANDS_MAX {
                return (pos, None);
            }
            let rest = buf.get(pos..).unwrap_or_default();
            match parser.next(rest) {
                Parsed::Command { consumed } => {
                    if self.room == Room::Check && self.room_wanted(s, f, now) {
                        // Not consumed: parsed again once there is room (`make_room`).
                        self.room = Room::Wanted;
                        return (pos, None);
                    }
                    let mut argv: SmallVec<[&[u8]; 8]> = SmallVec::new();
                    parser.args(rest, &mut argv);
                    pos += consumed;
                    if argv.is_empty() {
                        continue;
                    }
                    self.room = Room::Check;
                    self.round.commands += 1;
                    let step = self.dispatch(s, f, &argv, now);
                    drop(argv);
                    // AUTH lifts the unauthenticated limits for what follows.
                    parser.set_limits(ParseLimits {
                        bulk_bytes_max: s.config.proto_max_bulk_len as i64,
                        authenticated: !cmd::acl::auth_required(s, &self.client),
                    });
                    match step {
                        Step::Next => {}
                        Step::Barrier(b) => return (pos, Some(b)),
                        Step::Stop => return (pos, None),
                    }
                    // A stop request ends the batch: the rest of a pipeline of long commands
                    // would otherwise delay the shard's stop. So does output at the hard
                    // limit: the rest would only grow it.
                    let hard = self
                        .client
                        .shared
                        .output_limit(&s.config.client_output_buffer_limit)
                        .hard_bytes;
                    let pending = (self.out.len() + self.round.local.len()) as u64;
                    if self.client.close_after_reply
                        || self.is_killed()
                        || crate::stop::requested()
                        || (hard > 0 && pending >= hard)
                    {
                        return (pos, None);
                    }
                }
                Parsed::Skip { consumed } => pos += consumed,
                Parsed::Incomplete => return (pos, None),
                Parsed::Error(e) => {
                    self.answer(|_, sink| {
                        sink.raw(b"-");
                        sink.raw(&e.message_bytes());
                        sink.raw(b"\r\n");
                    });
                    f.stats.count_error("ERR");
                    self.client.close_after_reply = true;
                    return (pos, None);
                }
            }
        }
    }

    /// Writes an inline reply with `w` where inline replies go: the output, or the round's
    /// local buffer once some command of the round went to another shard. Returns what `w`
    /// returns and where the reply began there (for `local_done`).
    fn write_sink<R>(&mut self, w: impl FnOnce(&mut Client, &mut Reply) -> R) -> (R, usize) {
        let proto = self.client.shared.proto.get();
        let Conn {
            client, round, out, ..
        } = self;
        let sink = if round.active {
            &mut round.local
        } else {
            &mut *out
        };
        sink.proto = proto;
        let start = sink.len();
        (w(client, sink), start)
    }

    /// `write_sink`, the reply recorded as the round's (`local_done`).
    fn answer<R>(&mut self, w: impl FnOnce(&mut Client, &mut Reply) -> R) -> R {
        let (res, start) = self.write_sink(w);
        self.local_done(start);
        res
    }

    /// Admits `argv` (`cmd::admit`): its spec, or None when it was answered here (refused,
    /// queued in a transaction).
    fn admit(
        &mut self,
        s: &mut Shard,
        f: &mut Front,
        argv: &[&[u8]],
        now: u64,
    ) -> Option<&'static CommandSpec> {
        let (spec, start) =
            self.write_sink(|client, sink| cmd::admit(s, f, client, sink, argv, now));
        if spec.is_none() {
            self.local_done(start);
        }
        spec
    }

    /// Records an inline reply that began at `start` of the sink.
    fn local_done(&mut self, start: usize) {
        if self.round.active {
            let end = self.round.local.len();
            self.round.slots.push(Slot::Local(start, end));
        }
    }

    /// Runs `spec` inline on this thread's shard.
    fn inline(
        &mut self,
        s: &mut Shard,
        f: &mut Front,
        spec: &'static CommandSpec,
        argv: &[&[u8]],
        now: u64,
    ) -> Step {
        let marks = (
            self.out.len(),
            self.round.local.len(),
            self.round.slots.len(),
        );
        self.answer(|client, sink| cmd::call(s, f, client, sink, spec, argv, now));
        if s.scripting.relocate.take().is_some() {
            // A script that stopped, having done nothing, to run again with every shard
            // held (`Scripting::relocate`): its reply is dropped, and it runs so next.
            f.learn_script_beyond(argv);
            self.out.truncate(marks.0);
            self.round.local.truncate(marks.1);
            self.round.slots.truncate(marks.2);
            return Step::Barrier(Barrier {
                spec,
                argv: owned(argv),
                kind: BarrierKind::ScriptHeld(self.th.index),
            });
        }
        if let Some(b) = self.client.blocked.as_mut() {
            // The command blocked: keep it to re-run; later commands wait.
            b.argv = argv.iter().map(|a| a.to_vec()).collect();
            return Step::Stop;
        }
        Step::Next
    }

    /// Appends a command for `shard` to the round.
    fn remote(&mut self, shard: u16, op: Op, argv: &[&[u8]], reply: bool) -> usize {
        let db = self.client.db;
        let proto = self.client.shared.proto.get();
        let caching = self.client.caching;
        let muted = self.client.reply_mode != crate::client::ReplyMode::On;
        let b = self.round.batch(shard, &self.client);
        let idx = b.push(op, db, proto, argv);
        if caching || muted {
            b.set_client_state(idx, caching, muted);
        }
        if reply {
            self.round.active = true;
            self.round.slots.push(Slot::Remote(shard, idx));
        }
        idx
    }

    /// Answers `e` inline, counting it as a rejected call of `spec`.
    fn reject(&mut self, f: &mut Front, spec: Option<&'static CommandSpec>, e: &CmdError) {
        if let Some(st) = spec.and_then(|sp| f.stats.commands.get_mut(sp.idx)) {
            st.rejected_calls += 1;
        }
        self.answer(|_, sink| cmd::reply_error(f, sink, e));
    }

    /// Dispatches one command (see the module doc), with what applies to its reply wherever
    /// it runs: the cross-protocol guard, CLIENT REPLY, and CLIENT PAUSE's postponement.
    fn dispatch(&mut self, s: &mut Shard, f: &mut Front, argv: &[&[u8]], now: u64) -> Step {
        use crate::client::ReplyMode;
        // Cross-protocol scripting guard: an HTTP request sent to the port closes the
        // connection unanswered, as Redis's `securityWarningCommand` does (the replies of the
        // commands before it in the same read are dropped too).
        if cmd::is_cross_protocol(argv) {
            cmd::security_warning(f, now);
            self.out.truncate(0);
            self.round.slots.clear();
            self.client.close_after_reply = true;
            return Step::Stop;
        }
        if self.client.reply_mode == ReplyMode::SkipNext {
            self.client.reply_mode = ReplyMode::Skip;
        }
        let (out_mark, slots_mark) = (self.out.len(), self.round.slots.len());
        let step = self.dispatch_command(s, f, argv, now);
        // CLIENT CACHING covers the next command, or the next transaction (Redis's
        // resetClient).
        if self.client.caching
            && self.client.multi.is_none()
            && !argv
                .first()
                .is_some_and(|a| a.eq_ignore_ascii_case(b"client"))
        {
            self.client.caching = false;
        }
        if self.client.reply_mode != ReplyMode::On
            && !cmd::keep_reply(&mut self.client, argv.first().copied().unwrap_or_default())
        {
            if matches!(step, Step::Barrier(_)) {
                self.barrier_muted = true;
            } else {
                self.out.truncate(out_mark);
                self.round.slots.truncate(slots_mark);
            }
        }
        if let Some(b) = self.client.blocked.as_mut() {
            if b.postponed && b.argv.is_empty() {
                // CLIENT PAUSE holds it: it is dispatched again when the pause ends.
                b.argv = owned(argv);
                return Step::Stop;
            }
        }
        step
    }

    /// Dispatches one command to where it runs.
    fn dispatch_command(&mut self, s: &mut Shard, f: &mut Front, argv: &[&[u8]], now: u64) -> Step {
        if f.node.busy.any() && !self.client.site_link {
            if let Some(step) = self.while_busy(s, f, argv, now) {
                return step;
            }
        }
        if let Some(me) = self.client.endpoint {
            return self.dispatch_endpoint(s, f, argv, now, me);
        }
        let shards = f.node.shards;
        let table = f.table;
        if shards > 1 && self.client.multi.is_some() {
            // Redis Cluster checks each queued command on its own: one whose keys span
            // shards is refused and the transaction is flagged (but a script, MGET, MSET,
            // DEL..., XREAD or XREADGROUP, a list move or a command reading keys of several
            // shards, which run with their keys' shards held: `exec_across_plan`).
            if let Ok(spec) = cmd::resolve(table, argv) {
                let held_across = || {
                    cmd::tracking::is_script(spec)
                        || STREAMS_ACROSS.contains(&spec.meta.name)
                        || crate::held_across::runs_across(spec.meta.name)
                        || matches!(route::classes(table).get(spec.idx), Some(Class::Scatter(_)))
                };
                if !cmd::runs_inside_multi(spec.meta.name)
                    && self.keys_at(f, spec, argv) == KeysAt::Many
                    && !(held_across() && self.keys_on_this_node(f, spec, argv))
                {
                    if let Some(m) = self.client.multi.as_mut() {
                        m.aborted = true;
                    }
                    self.reject(f, Some(spec), &CmdError::CrossSlot);
                    return Step::Next;
                }
            }
        }
        let Some(spec) = self.admit(s, f, argv, now) else {
            return Step::Next;
        };
        if shards == 1 {
            return self.inline(s, f, spec, argv, now);
        }
        let local = self.th.index;
        let class = route::classes(table)
            .get(spec.idx)
            .copied()
            .unwrap_or(Class::Local);
        if spec.meta.flags.contains(cmd::table::Flags::BLOCKING) {
            return match self.keys_at(f, spec, argv) {
                KeysAt::Many
                    if (POPS_ACROSS.contains(&spec.meta.name)
                        || MOVES_ACROSS.contains(&spec.meta.name))
                        && self.keys_on_this_node(f, spec, argv) =>
                {
                    Step::Barrier(Barrier {
                        spec,
                        argv: owned(argv),
                        kind: BarrierKind::BlockAcross,
                    })
                }
                KeysAt::Many
                    if STREAMS_ACROSS.contains(&spec.meta.name)
                        && self.keys_on_this_node(f, spec, argv) =>
                {
                    Step::Barrier(Barrier {
                        spec,
                        argv: owned(argv),
                        kind: BarrierKind::StreamsAcross,
                    })
                }
                KeysAt::Many => {
                    self.reject(f, Some(spec), &CmdError::CrossSlot);
                    Step::Next
                }
                KeysAt::Shard(t) if t != local || self.round.active => Step::Barrier(Barrier {
                    spec,
                    argv: owned(argv),
                    kind: BarrierKind::Blocking(t),
                }),
                _ if self.round.active => Step::Barrier(Barrier {
                    spec,
                    argv: owned(argv),
                    kind: BarrierKind::Blocking(local),
                }),
                _ => self.inline(s, f, spec, argv, now),
            };
        }
        match class {
            Class::Local => self.inline(s, f, spec, argv, now),
            Class::Keyed => self.keyed(s, f, spec, argv, now),
            Class::Scatter(kind) => match self.keys_at(f, spec, argv) {
                KeysAt::Many => {
                    self.scatter(s, f, spec, kind, argv, now);
                    Step::Next
                }
                _ => self.keyed(s, f, spec, argv, now),
            },
            Class::All(merge) => Step::Barrier(Barrier {
                spec,
                argv: owned(argv),
                kind: BarrierKind::All(merge),
            }),
            Class::Special(sp) => self.special(s, f, spec, sp, argv, now),
        }
    }

    /// A script of another thread runs past busy-reply-threshold: as Redis, this client gets
    /// BUSY, except for SCRIPT KILL and FUNCTION KILL (which reach the script through the
    /// process's `BusyBoard`), SHUTDOWN NOSAVE, and the commands Redis runs while busy.
    /// None: run the command as usual.
    fn while_busy(
        &mut self,
        s: &mut Shard,
        f: &mut Front,
        argv: &[&[u8]],
        now: u64,
    ) -> Option<Step> {
        let eq = |i: usize, w: &str| {
            argv.get(i)
                .is_some_and(|a| a.eq_ignore_ascii_case(w.as_bytes()))
        };
        let board = f.node.busy.clone();
        let text = board.busy_text()?;
        // Unknown commands and arities first (the usual path answers them), then
        // authentication and permissions, as `cmd::admit` checks them.
        let spec = cmd::resolve(f.table, argv).ok()?;
        if let Err(e) = cmd::acl::gate(s, &self.client, spec, argv, now) {
            flag_transaction(&mut self.client);
            self.reject(f, Some(spec), &e);
            return Some(Step::Next);
        }
        // The transaction commands as Redis runs them while a script is busy: MULTI and
        // DISCARD run, EXEC answers EXECABORT and ends the transaction (`execCommandAbort`);
        // every other command refused below flags an open transaction.
        match spec.meta.name {
            "multi" | "discard" => return None,
            "exec" => {
                self.answer(|client, sink| cmd::exec_abort(s, f, client, sink, text));
                return Some(Step::Next);
            }
            _ => {}
        }
        let reply: Result<(), String> =
            if (eq(0, "script") || eq(0, "function")) && eq(1, "kill") && argv.len() == 2 {
                board.kill(eq(0, "script")).map_err(str::to_string)
            } else if eq(0, "shutdown") {
                let nosave = argv
                    .iter()
                    .skip(1)
                    .any(|a| a.eq_ignore_ascii_case(b"nosave"));
                let save = argv.iter().skip(1).any(|a| a.eq_ignore_ascii_case(b"save"));
                if nosave && !save {
                    tracing::warn!("User requested shutdown...");
                    tracing::warn!("Meridian is now ready to exit, bye bye...");
                    std::process::exit(0);
                }
                Err("ERR Errors trying to SHUTDOWN. Check logs.".to_string())
            } else {
                let allowed = cmd::resolve(f.table, argv)
                    .is_ok_and(|sp| sp.meta.flags.contains(cmd::table::Flags::ALLOW_BUSY));
                if allowed {
                    return None;
                }
                Err(text.to_string())
            };
        self.answer(|client, sink| match reply {
            Ok(()) => sink.ok(),
            Err(e) => {
                flag_transaction(client);
                cmd::reply_error(f, sink, &CmdError::Raw(e));
            }
        });
        Some(Step::Next)
    }

    /// Dispatches one command that came in on shard `me`'s cluster endpoint: as a Redis
    /// Cluster node, every key of a command must be in one slot (else CROSSSLOT) and the slot
    /// this shard's (else `-MOVED slot ip:port`); then it runs here. Commands over the
    /// keyspace (DBSIZE, KEYS, SCAN...) cover this node's keys, as a cluster node's do;
    /// CONFIG SET and SHUTDOWN still reach every shard of the process.
    fn dispatch_endpoint(
        &mut self,
        s: &mut Shard,
        f: &mut Front,
        argv: &[&[u8]],
        now: u64,
        me: u16,
    ) -> Step {
        let table = f.table;
        if argv
            .first()
            .is_some_and(|a| a.eq_ignore_ascii_case(LINK_HANDSHAKE))
        {
            match link_refusal(s, f, argv) {
                None => {
                    self.client.site_link = true;
                    self.out.proto = self.client.shared.proto.get();
                    self.out.ok();
                }
                Some(why) => self.reject(f, None, &CmdError::Raw(why)),
            }
            return Step::Next;
        }
        if self.client.site_link {
            return self.dispatch_link(s, f, argv, now, me);
        }
        let asking = std::mem::take(&mut self.client.cluster_asking);
        if let Ok(spec) = cmd::resolve(table, argv) {
            let name = spec.meta.name;
            if name == "asking" {
                // ASKING sets the flag for the command after it.
                self.client.cluster_asking = asking;
            }
            let redirect = if name == "exec" {
                self.client.multi.as_ref().and_then(|m| {
                    let queued = queued_argvs(m);
                    cluster_redirect(f, me, queued.iter().map(Vec::as_slice))
                })
            } else if self.client.multi.is_some() && cmd::runs_inside_multi(name) {
                None
            } else {
                cluster_redirect(f, me, std::iter::once(argv))
            };
            if let Some(e) = redirect {
                if name == "exec" {
                    // Redis discards the transaction whose keys are elsewhere.
                    cmd::tx::end_transaction(s, &mut self.client);
                } else if let Some(m) = self.client.multi.as_mut() {
                    m.aborted = true;
                }
                self.reject(f, Some(spec), &e);
                return Step::Next;
            }
        }
        let Some(spec) = self.admit(s, f, argv, now) else {
            return Step::Next;
        };
        let class = route::classes(table)
            .get(spec.idx)
            .copied()
            .unwrap_or(Class::Local);
        let everywhere = |kind| {
            Step::Barrier(Barrier {
                spec,
                argv: owned(argv),
                kind,
            })
        };
        match (class, spec.meta.name) {
            (_, "config|set" | "config|resetstat") if f.node.local > 1 => {
                everywhere(BarrierKind::All(Merge::Same))
            }
            (Class::Special(Special::Shutdown), _) if f.node.local > 1 => {
                everywhere(BarrierKind::Special(Special::Shutdown))
            }
            (Class::Special(Special::Digest), _) if f.node.shards > 1 => {
                self.special(s, f, spec, Special::Digest, argv, now)
            }
            _ => self.inline(s, f, spec, argv, now),
        }
    }

    /// A command on a link from another node of the site: it runs here as it is, after the
    /// same slot check as a cluster client's, whose failure is TRYAGAIN (the nodes disagree
    /// on the slot: it must never run on a shard that does not own it).
    fn dispatch_link(
        &mut self,
        s: &mut Shard,
        f: &mut Front,
        argv: &[&[u8]],
        now: u64,
        me: u16,
    ) -> Step {
        if let Ok(spec) = cmd::resolve(f.table, argv) {
            let name = spec.meta.name;
            let pubsub = matches!(name, "publish" | "spublish");
            let redirect = if name == "exec" {
                self.client.multi.as_ref().and_then(|m| {
                    let queued = queued_argvs(m);
                    not_owned(f, me, queued.iter().map(Vec::as_slice))
                })
            } else if pubsub || (self.client.multi.is_some() && cmd::runs_inside_multi(name)) {
                None
            } else {
                not_owned(f, me, std::iter::once(argv))
            };
            if let Some(slot) = redirect {
                let text = format!(
                    "TRYAGAIN slot {slot} is not shard {me}'s on this node: the site's nodes disagree on the topology"
                );
                if name == "exec" {
                    self.client.multi = None;
                    self.client.shared.in_multi.set(false);
                } else if let Some(m) = self.client.multi.as_mut() {
                    m.aborted = true;
                }
                self.reject(f, Some(spec), &CmdError::Raw(text));
                return Step::Next;
            }
        }
        let Some(spec) = self.admit(s, f, argv, now) else {
            return Step::Next;
        };
        self.inline(s, f, spec, argv, now)
    }

    /// Where the keys of `argv` are.
    fn keys_at(&self, f: &Front, spec: &CommandSpec, argv: &[&[u8]]) -> KeysAt {
        match route::positions(f.table, spec, argv) {
            Some(p) => route::keys_at(&f.node.slots, argv, &p),
            None => KeysAt::None,
        }
    }

    /// A command whose keys must share a shard: inline, to their shard, or CROSSSLOT.
    fn keyed(
        &mut self,
        s: &mut Shard,
        f: &mut Front,
        spec: &'static CommandSpec,
        argv: &[&[u8]],
        now: u64,
    ) -> Step {
        match self.keys_at(f, spec, argv) {
            KeysAt::None => self.inline(s, f, spec, argv, now),
            KeysAt::Shard(t) if t == self.th.index => self.inline(s, f, spec, argv, now),
            KeysAt::Shard(t) => {
                self.client.shared.last_cmd.set(spec.meta.name);
                self.remote(t, Op::Call(spec), argv, true);
                Step::Next
            }
            KeysAt::Many => {
                let own = self.th.index;
                let node = &f.node;
                let plan =
                    crate::read_across::plan(&node.slots, f.table, spec, argv, (own, &[]), |t| {
                        node.is_local(t)
                    });
                let pops = matches!(spec.meta.name, "lmpop" | "zmpop");
                match plan {
                    Some(_) => Step::Barrier(Barrier {
                        spec,
                        argv: owned(argv),
                        kind: BarrierKind::ReadAcross,
                    }),
                    None if crate::move_across::shards(&self.th, spec, argv).is_some() => {
                        Step::Barrier(Barrier {
                            spec,
                            argv: owned(argv),
                            kind: BarrierKind::MoveAcross,
                        })
                    }
                    None if pops && self.keys_on_this_node(f, spec, argv) => {
                        Step::Barrier(Barrier {
                            spec,
                            argv: owned(argv),
                            kind: BarrierKind::PopAcross,
                        })
                    }
                    None if cmd::tracking::is_script(spec)
                        && self.keys_on_this_node(f, spec, argv) =>
                    {
                        Step::Barrier(Barrier {
                            spec,
                            argv: owned(argv),
                            kind: BarrierKind::ScriptAcross,
                        })
                    }
                    None if matches!(spec.meta.name, "lmove" | "rpoplpush")
                        && self.keys_on_this_node(f, spec, argv) =>
                    {
                        Step::Barrier(Barrier {
                            spec,
                            argv: owned(argv),
                            kind: BarrierKind::ListMoveAcross,
                        })
                    }
                    None => {
                        self.reject(f, Some(spec), &CmdError::CrossSlot);
                        Step::Next
                    }
                }
            }
        }
    }

    /// Whether every key of `argv` is on a shard of this process.
    fn keys_on_this_node(&self, f: &Front, spec: &CommandSpec, argv: &[&[u8]]) -> bool {
        route::positions(f.table, spec, argv).is_some_and(|p| {
            p.iter().all(|&i| {
                argv.get(i)
                    .is_some_and(|k| f.node.is_local(f.node.slots.shard_of_key(k)))
            })
        })
    }

    /// LMPOP/ZMPOP `numkeys key... rest` whose keys span shards: `LMPOP 1 key rest` (ZMPOP
    /// alike) on each key's shard in the order given, until one pops or fails (WRONGTYPE, a
    /// bad argument: the first key's shard answers those, as Redis checks them before any
    /// key); nil when none popped. Each pop is one command on its shard; together they are
    /// not atomic (a key before the one popped may be filled between the two tries).
    async fn pop_first_across(&mut self, spec: &'static CommandSpec, argv: Vec<Vec<u8>>) {
        let tries = {
            let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            let positions = route::positions(self.th.front.borrow().table, spec, &refs);
            route::pop_tries(&self.th.node.slots, &argv, &positions.unwrap_or_default())
        };
        if tries.is_empty() {
            self.out.error(&CmdError::CrossSlot);
            return;
        }
        self.client.shared.last_cmd.set(spec.meta.name);
        let mut last = Vec::new();
        for (shard, one) in tries {
            match self.one(shard, Op::Call(spec), &one).await {
                Ok((reply, _)) => {
                    let nil = matches!(reply.as_slice(), b"*-1\r\n" | b"_\r\n");
                    last = reply;
                    if !nil {
                        break;
                    }
                }
                Err(e) => {
                    self.out.error(&hop::unavailable_error(e));
                    return;
                }
            }
        }
        self.out.raw(&last);
    }

    /// A blocking pop of `POPS_ACROSS` whose keys span shards of this process, or BLMOVE or
    /// BRPOPLPUSH between two of its shards. A pop tries each key in the order given, as that
    /// command over that one key that may not block, on the key's shard (the first pop, or
    /// error, is the reply, as Redis takes the first non-empty key); a move tries the move
    /// with both shards held (`list_move_try`). It waits on its keys' shards as
    /// `wait_across` says (a move on its source's only). Returns false when the connection
    /// must close.
    async fn pop_blocking_across(
        &mut self,
        spec: &'static CommandSpec,
        argv: Vec<Vec<u8>>,
        stream: &ClientStream,
        rbuf: &mut BytesMut,
    ) -> bool {
        self.client.shared.last_cmd.set(spec.meta.name);
        self.out.proto = self.client.shared.proto.get();
        let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let positions = route::positions(self.th.front.borrow().table, spec, &refs);
        let Some(positions) = positions.filter(|p| !p.is_empty()) else {
            self.out.error(&CmdError::CrossSlot);
            return true;
        };
        let Some(handler) = spec.handler else {
            self.out
                .error(&CmdError::WrongArity(spec.meta.name.to_string()));
            return true;
        };
        {
            let mut f = self.th.front.borrow_mut();
            f.stats.total_commands_processed += 1;
            if let Some(st) = f.stats.commands.get_mut(spec.idx) {
                st.calls += 1;
            }
        }
        let slots = self.th.node.slots.clone();
        let moves = MOVES_ACROSS.contains(&spec.meta.name);
        // Per key, in order: its shard and the command over it alone. BLPOP, BRPOP,
        // BZPOPMIN, BZPOPMAX: `name key timeout`; BLMPOP, BZMPOP: `name timeout 1 key rest`.
        // BLMOVE, BRPOPLPUSH: the move, whose sides and timeout are checked first.
        let first_key = positions.first().copied().unwrap_or(1);
        let mpop = first_key > 1;
        let timeout_arg = if mpop {
            argv.get(1).cloned().unwrap_or_default()
        } else {
            argv.last().cloned().unwrap_or_default()
        };
        let how = if moves {
            let now = self.th.shard.borrow().now_ms();
            let checked = cmd::list::move_sides(&refs)
                .and_then(|sides| blocking::parse_timeout(&timeout_arg, now).map(|_| sides));
            match checked {
                Ok(sides) => AcrossTry::Move { sides },
                Err(e) => {
                    hop::reply_error(&self.th, &mut self.out, &e);
                    return true;
                }
            }
        } else {
            let tries = route::pop_tries(&slots, &argv, &positions);
            AcrossTry::Pops { tries, handler }
        };
        // Each shard's keys, the shards in the order of their first key (a move waits on its
        // source).
        let mut shard_keys: Vec<(u16, Vec<Vec<u8>>)> = Vec::new();
        for &p in positions
            .iter()
            .take(if moves { 1 } else { positions.len() })
        {
            let key = argv.get(p).cloned().unwrap_or_default();
            let t = slots.shard_of_key(&key);
            match shard_keys.iter_mut().find(|(s, _)| *s == t) {
                Some((_, keys)) => keys.push(key),
                None => shard_keys.push((t, vec![key])),
            }
        }
        // A bad timeout fails the first try (the command checks it), before any wait.
        let now = self.th.shard.borrow().now_ms();
        let deadline = blocking::parse_timeout(&timeout_arg, now).unwrap_or(None);
        self.wait_across(spec, &argv, &how, &shard_keys, Some(deadline), stream, rbuf)
            .await
    }

    /// The wait of a command over keys of several shards of this process
    /// (`pop_blocking_across`, `streams_across`): it tries `how`; when nothing came and
    /// `deadline` allows one (None: no wait; `Some(None)`: for ever), it registers on every
    /// shard of `shard_keys` to be woken by any write to them
    /// (`BlockRegistry::register_waking`: counted in `blocked_clients` on the first key's
    /// shard only, where CLIENT UNBLOCK finds it, `blocking::CrossWait`), tries again, and
    /// waits for a wake, its deadline (the null array, a move's too, as Redis answers a
    /// timed-out BLMOVE), CLIENT UNBLOCK or the client's end. Registered before each try, so
    /// no write between a try and the wait is missed. Unlike a wait on one shard, it takes no
    /// turn among that shard's blocked clients: those are served first, and between two such
    /// clients the one whose try runs first gets what came. Returns false when the
    /// connection must close.
    #[allow(clippy::too_many_arguments)]
    async fn wait_across(
        &mut self,
        spec: &'static CommandSpec,
        argv: &[Vec<u8>],
        how: &AcrossTry,
        shard_keys: &[(u16, Vec<Vec<u8>>)],
        deadline: Option<Option<u64>>,
        stream: &ClientStream,
        rbuf: &mut BytesMut,
    ) -> bool {
        let db = self.client.db;
        let mailbox = self.client.shared.mailbox.clone();
        let cross = std::sync::Arc::new(blocking::CrossWait::new(mailbox));
        let mut registered = false;
        let done = loop {
            if registered {
                self.register_waking(shard_keys, db, &cross).await;
            }
            let got = match how {
                AcrossTry::Pops { tries, handler } => self.pops_try(spec, tries, *handler).await,
                AcrossTry::Move { sides } => self.list_move_try(spec, argv, *sides, false).await,
                AcrossTry::Streams { parts, order } => self.streams_try(spec, parts, order).await,
            };
            if let Some(r) = got {
                break Some(r);
            }
            if let Some(how) = cross.requested() {
                break Some(self.unblocked_reply(how));
            }
            let now = self.th.shard.borrow().now_ms();
            let nothing = || {
                let mut r = Reply::new();
                r.proto = self.client.shared.proto.get();
                r.null_array();
                r.buf
            };
            let Some(due) = deadline else {
                break Some(nothing());
            };
            if due.is_some_and(|d| now >= d) {
                break Some(nothing());
            }
            if !registered {
                // Registered, then tried again at once: a write since the first try wakes it.
                registered = true;
                self.client.shared.blocked.set(true);
                continue;
            }
            let sleep_for = due.map(|d| Duration::from_millis(d.saturating_sub(now)));
            if !self.wait_wake(stream, rbuf, sleep_for).await {
                break None;
            }
        };
        if registered {
            self.forget_waking(shard_keys).await;
            self.client.shared.blocked.set(false);
        }
        match done {
            Some(reply) => {
                self.out.raw(&reply);
                true
            }
            None => false,
        }
    }

    /// The reply of a command waiting across shards that CLIENT UNBLOCK ended: the null
    /// array for TIMEOUT, Redis's UNBLOCKED error for ERROR.
    fn unblocked_reply(&self, how: crate::client::Unblock) -> Vec<u8> {
        let mut fg = self.th.front.borrow_mut();
        let mut r = Reply::new();
        r.proto = self.client.shared.proto.get();
        match how {
            crate::client::Unblock::Timeout => r.null_array(),
            crate::client::Unblock::Error => cmd::reply_error(
                &mut fg,
                &mut r,
                &CmdError::Raw("UNBLOCKED client unblocked via CLIENT UNBLOCK".to_string()),
            ),
        }
        r.buf
    }

    /// XREAD or XREADGROUP over streams of several shards of this process: a part per shard
    /// (the command over that shard's streams, its options but BLOCK), run without blocking,
    /// the parts' replies merged in request order (`route::merge_streams`). With BLOCK and
    /// nothing to give, it waits on the shards of its streams (`register_waking`: any write
    /// to one wakes it) and tries again at each wake, until the timeout, as a blocking pop
    /// across shards does. `$` means each stream's last ID when the command arrived (read on
    /// its shard first). Counted once. Not atomic across shards: each part is one command on
    /// its shard (a later part may see a write an earlier one did not).
    async fn streams_across(
        &mut self,
        spec: &'static CommandSpec,
        argv: Vec<Vec<u8>>,
        stream: &ClientStream,
        rbuf: &mut BytesMut,
    ) -> bool {
        self.client.shared.last_cmd.set(spec.meta.name);
        self.out.proto = self.client.shared.proto.get();
        let group_mode = spec.meta.name == "xreadgroup";
        let now = self.th.shard.borrow().now_ms();
        let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let read = match cmd::stream::parse_read(&refs, group_mode, false, now) {
            Ok(r) => r,
            Err(e) => {
                hop::reply_error(&self.th, &mut self.out, &e);
                return true;
            }
        };
        {
            let mut f = self.th.front.borrow_mut();
            f.stats.total_commands_processed += 1;
            if let Some(st) = f.stats.commands.get_mut(spec.idx) {
                st.calls += 1;
            }
        }
        let block = read.block;
        let slots = self.th.node.slots.clone();
        let db = self.client.db;
        let name = argv.first().map_or(&b""[..], Vec::as_slice);
        let options = read.part_options(&refs);
        let (mut part_args, order) =
            route::split_streams(&slots, name, &options, &read.keys, &read.ids);
        // Where each part's keys begin (after the name, the options and STREAMS); its IDs
        // follow them.
        let first = 2 + options.len();
        drop(options);
        drop(read);
        drop(refs);
        let keys_of = |a: &[Vec<u8>]| a.len().saturating_sub(first) / 2;
        // `$`: the last IDs now, on each stream's shard (XREADGROUP's parts refuse it).
        if !group_mode {
            for (t, a) in part_args.iter_mut() {
                let n = keys_of(a);
                let wanted: Vec<usize> = (0..n)
                    .filter(|&j| a.get(first + n + j).is_some_and(|x| x == b"$"))
                    .collect();
                if wanted.is_empty() {
                    continue;
                }
                let ks: Vec<Vec<u8>> = wanted
                    .iter()
                    .filter_map(|&j| a.get(first + j).cloned())
                    .collect();
                let last = hop::run_on(&self.th, *t, move |th| {
                    cmd::stream::last_ids(&mut th.shard.borrow_mut(), db, &ks)
                })
                .await;
                match last {
                    Ok(last) => {
                        for (j, id) in wanted.into_iter().zip(last) {
                            if let Some(x) = a.get_mut(first + n + j) {
                                *x = id.into_bytes();
                            }
                        }
                    }
                    Err(e) => {
                        self.out.error(&hop::unavailable_error(e));
                        return true;
                    }
                }
            }
        }
        let shard_keys: Vec<(u16, Vec<Vec<u8>>)> = part_args
            .iter()
            .map(|(t, a)| {
                let n = keys_of(a);
                (*t, a.get(first..first + n).unwrap_or_default().to_vec())
            })
            .collect();
        let how = AcrossTry::Streams {
            parts: part_args,
            order,
        };
        self.wait_across(spec, &argv, &how, &shard_keys, block, stream, rbuf)
            .await
    }

    /// One try of XREAD or XREADGROUP over streams of several shards (`streams_across`):
    /// every part on its shard, the replies merged in request order
    /// (`route::merge_streams`); None when no stream gave entries. A part's error is the
    /// reply, counted as the command's own.
    async fn streams_try(
        &mut self,
        spec: &'static CommandSpec,
        parts: &[(u16, Vec<Vec<u8>>)],
        order: &[(usize, Vec<u8>)],
    ) -> Option<Vec<u8>> {
        let mut replies: Vec<Vec<u8>> = Vec::with_capacity(parts.len());
        for (t, a) in parts {
            match self.one(*t, Op::Quiet(spec), a).await {
                Ok((r, _)) => replies.push(r),
                Err(e) => {
                    let mut r = Reply::new();
                    r.error(&hop::unavailable_error(e));
                    return Some(r.buf);
                }
            }
        }
        let refs: Vec<&[u8]> = replies.iter().map(Vec::as_slice).collect();
        let order: Vec<(usize, &[u8])> = order.iter().map(|(p, k)| (*p, k.as_slice())).collect();
        let mut merged = Reply::new();
        merged.proto = self.client.shared.proto.get();
        if route::merge_streams(&refs, &order, &mut merged) > 0 {
            return Some(merged.buf);
        }
        if merged.buf.first() != Some(&b'-') {
            return None;
        }
        let text = String::from_utf8_lossy(&merged.buf);
        let mut r = Reply::new();
        r.proto = merged.proto;
        hop::reply_error(
            &self.th,
            &mut r,
            &CmdError::Raw(text.trim_start_matches('-').trim_end().to_string()),
        );
        Some(r.buf)
    }

    /// One try of a blocking pop over several shards (`pop_blocking_across`): each key's pop
    /// on its shard, in order; the first reply that is not the null array (a pop or an
    /// error). None: nothing popped.
    async fn pops_try(
        &mut self,
        spec: &'static CommandSpec,
        tries: &[(u16, Vec<Vec<u8>>)],
        handler: cmd::Handler,
    ) -> Option<Vec<u8>> {
        for (shard, one) in tries {
            let one_refs: Vec<&[u8]> = one.iter().map(Vec::as_slice).collect();
            let one_owned = one.clone();
            let run = hop::Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
                // Two levels deep: the command may not block (`Ctx::can_block`) and
                // answers the null array when it finds nothing.
                ctx.client.call_depth += 1;
                let refs: Vec<&[u8]> = one_owned.iter().map(Vec::as_slice).collect();
                let r = handler(ctx, &refs);
                ctx.client.call_depth -= 1;
                r
            }));
            let th = self.th.clone();
            let Conn { client, afters, .. } = self;
            let reply =
                hop::finish_step(&th, client, afters, *shard, spec, &one_refs, false, run).await;
            match reply {
                Ok(r) if matches!(r.as_slice(), b"*-1\r\n" | b"_\r\n") => {}
                Ok(r) => return Some(r),
                Err(e) => {
                    let mut fg = self.th.front.borrow_mut();
                    let mut r = Reply::new();
                    r.proto = self.client.shared.proto.get();
                    cmd::reply_error(&mut fg, &mut r, &e);
                    return Some(r.buf);
                }
            }
        }
        None
    }

    /// One wait of a command that waits on other threads (a pop over several shards,
    /// CRDT.WAIT): until its mailbox is woken, `sleep_for` passes (None: no timer) or input
    /// comes (kept in `rbuf` for the commands after it, as a blocked client's, and counted).
    /// Pushes queued meanwhile go to the output. Returns false when the connection must
    /// close: the client went or was killed, or its input passed the query buffer's limit.
    async fn wait_wake(
        &mut self,
        stream: &ClientStream,
        rbuf: &mut BytesMut,
        sleep_for: Option<Duration>,
    ) -> bool {
        let mailbox = self.client.shared.mailbox.clone();
        let timer = async {
            match sleep_for {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            biased;
            r = read_some(stream, rbuf, READ_CHUNK_BYTES_MIN, &self.client.shared.read_ns) => match r {
                Ok(0) | Err(_) => return false,
                Ok(n) => {
                    self.th.front.borrow_mut().stats.net_input_bytes += n as u64;
                    self.client.shared.qbuf_bytes.set(rbuf.len());
                    let limit = self.th.shard.borrow().config.client_query_buffer_limit;
                    if rbuf.len() as u64 > limit {
                        tracing::warn!(client = %self.client.shared.addr, bytes = rbuf.len(), "closing client that reached max query buffer length");
                        return false;
                    }
                }
            },
            () = mailbox.wake.notified() => {
                if self.is_killed() {
                    return false;
                }
                let pushed = mailbox.take();
                self.out.raw(&pushed);
            }
            () = timer => {}
        }
        true
    }

    /// Registers this client on each shard of `shard_keys` to be woken by a write to its keys
    /// there (`pop_blocking_across`): counted on the first shard, which keeps `cross` for
    /// CLIENT UNBLOCK.
    async fn register_waking(
        &mut self,
        shard_keys: &[(u16, Vec<Vec<u8>>)],
        db: usize,
        cross: &std::sync::Arc<blocking::CrossWait>,
    ) {
        let id = self.client.id();
        for (i, (shard, keys)) in shard_keys.iter().enumerate() {
            let counted = i == 0;
            let keys = keys.clone();
            let mb = self.client.shared.mailbox.clone();
            let cross = cross.clone();
            let _ = hop::run_on(&self.th, *shard, move |t| {
                let refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                t.shard
                    .borrow_mut()
                    .blocking
                    .register_waking(id, mb, db, &refs, counted);
                if counted {
                    t.front.borrow_mut().cross_waits.insert(id, cross);
                }
            })
            .await;
        }
    }

    /// Drops what `register_waking` left on each shard of `shard_keys`.
    async fn forget_waking(&mut self, shard_keys: &[(u16, Vec<Vec<u8>>)]) {
        let id = self.client.id();
        for (shard, _) in shard_keys {
            let _ = hop::run_on(&self.th, *shard, move |t| {
                t.shard.borrow_mut().blocking.unregister(id);
                t.front.borrow_mut().cross_waits.remove(&id);
            })
            .await;
        }
    }

    /// Splits MGET, MSET, DEL, UNLINK, EXISTS, TOUCH by shard. Each part runs as that
    /// command on its shard (this shard's inline); `finish_round` merges the replies.
    fn scatter(
        &mut self,
        s: &mut Shard,
        f: &mut Front,
        spec: &'static CommandSpec,
        kind: Scatter,
        argv: &[&[u8]],
        now: u64,
    ) {
        let (parts, order) = route::split_scatter(&f.node.slots, kind, argv);
        self.client.shared.last_cmd.set(spec.meta.name);
        self.round.active = true;
        let mut slots_out = Vec::with_capacity(parts.len());
        let mut first = true;
        for (shard, sub) in &parts {
            // The command counts once: its first part is a call, the others quiet.
            let op = if first {
                Op::Call(spec)
            } else {
                Op::Quiet(spec)
            };
            first = false;
            if *shard == self.th.index {
                let start = self.round.local.len();
                self.round.local.proto = self.client.shared.proto.get();
                match op {
                    Op::Call(_) => cmd::call(
                        s,
                        f,
                        &mut self.client,
                        &mut self.round.local,
                        spec,
                        sub,
                        now,
                    ),
                    _ => cmd::call_quiet(
                        s,
                        f,
                        &mut self.client,
                        &mut self.round.local,
                        spec,
                        sub,
                        now,
                    ),
                }
                slots_out.push(Slot::Local(start, self.round.local.len()));
            } else {
                let idx = self.remote(*shard, op, sub, false);
                slots_out.push(Slot::Remote(*shard, idx));
            }
        }
        self.round.slots.push(Slot::Gather(Gather {
            kind,
            parts: slots_out,
            order,
        }));
    }

    /// The dispatcher's own commands (`route::Special`).
    fn special(
        &mut self,
        s: &mut Shard,
        f: &mut Front,
        spec: &'static CommandSpec,
        sp: Special,
        argv: &[&[u8]],
        now: u64,
    ) -> Step {
        let barrier = |kind| {
            Step::Barrier(Barrier {
                spec,
                argv: owned(argv),
                kind,
            })
        };
        match sp {
            Special::Unwatch => {
                // The watches on other shards go with an Unwatch item each, in order with
                // the commands after this one.
                let remote: Vec<u16> = self
                    .watch_shards(f)
                    .into_iter()
                    .filter(|&t| t != self.th.index)
                    .collect();
                let step = self.inline(s, f, spec, argv, now);
                for t in remote {
                    self.remote(t, Op::Unwatch, &[], false);
                }
                // Its connection closes: the other node drops the watch with it.
                self.watch_link = None;
                step
            }
            Special::Sort
                if crate::sort_across::spans_shards(&f.node.slots, f.table, spec, argv) =>
            {
                barrier(BarrierKind::Special(sp))
            }
            Special::Sort => self.keyed(s, f, spec, argv, now),
            Special::Script if self.keys_at(f, spec, argv) == KeysAt::None => {
                barrier(BarrierKind::Script)
            }
            // A script the process saw stop to run again with every shard held: so at once
            // (its first run would only stop again).
            Special::Script if f.node.local > 1 && f.script_reaches_beyond(argv) => {
                match self.keys_at(f, spec, argv) {
                    KeysAt::Shard(t) => barrier(BarrierKind::ScriptHeld(t)),
                    _ => self.keyed(s, f, spec, argv, now),
                }
            }
            Special::Script => self.keyed(s, f, spec, argv, now),
            Special::Debug => {
                let sub = argv.get(1).copied().unwrap_or_default();
                if cmd::debug::on_every_shard(sub) {
                    barrier(BarrierKind::All(Merge::Same))
                } else {
                    match cmd::debug::place(argv, &f.node.slots) {
                        cmd::debug::Place::Every if f.node.local > 1 => {
                            barrier(BarrierKind::Special(sp))
                        }
                        cmd::debug::Place::Shard(t) if t != self.th.index => {
                            self.remote(t, Op::Call(spec), argv, true);
                            Step::Next
                        }
                        _ => self.inline(s, f, spec, argv, now),
                    }
                }
            }
            Special::Digest => match argv.len() {
                1 => barrier(BarrierKind::All(Merge::Digest)),
                2 if argv
                    .get(1)
                    .is_some_and(|a| a.eq_ignore_ascii_case(b"slots")) =>
                {
                    barrier(BarrierKind::All(Merge::DigestSlots))
                }
                3 => {
                    let owner = argv
                        .get(2)
                        .and_then(|n| cmd::args::parse_i64(n))
                        .and_then(|n| u16::try_from(n).ok())
                        .filter(|n| usize::from(*n) < crate::slot::SLOTS)
                        .map(|n| f.node.slots.shard_of_slot(n));
                    match owner {
                        Some(t) if t != self.th.index => {
                            self.remote(t, Op::Call(spec), argv, true);
                            Step::Next
                        }
                        _ => self.inline(s, f, spec, argv, now),
                    }
                }
                _ => self.inline(s, f, spec, argv, now),
            },
            Special::Cluster => match cmd::cluster::slot_of_subcommand(argv)
                .map(|slot| f.node.slots.shard_of_slot(slot))
            {
                Some(t) if t != self.th.index => {
                    self.remote(t, Op::Call(spec), argv, true);
                    Step::Next
                }
                _ => self.inline(s, f, spec, argv, now),
            },
            Special::Watch if self.client.multi.is_some() => self.inline(s, f, spec, argv, now),
            Special::Exec if self.client.multi.is_none() => self.inline(s, f, spec, argv, now),
            Special::Exec
            | Special::Watch
            | Special::Scan
            | Special::RandomKey
            | Special::CrdtWait
            | Special::Shutdown
            | Special::Sync => barrier(BarrierKind::Special(sp)),
        }
    }

    /// The shards holding this client's watches.
    fn watch_shards(&self, f: &Front) -> Vec<u16> {
        let mut v: Vec<u16> = self
            .client
            .watched
            .iter()
            .map(|(_, k)| f.node.slots.shard_of_key(k))
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// What a batch's answer leaves besides its replies: the client closed when its output
    /// limit cut the batch short or a command asked it, the shard's last write (CRDT.WAIT),
    /// and when its replies may go (`afters`).
    fn took(&mut self, shard: u16, d: &mut Done) {
        if d.cut {
            // Commands were left unrun: the client is over its hard output limit and
            // closes without the replies, as Redis closes it.
            tracing::warn!(client = %self.client.shared.addr, "client scheduled to be closed ASAP for overcoming of output buffer limits");
            self.client.shared.kill();
        }
        if let Some(seq) = d.wrote {
            self.client.note_write(shard, seq);
        }
        for n in &d.notes {
            if n.close {
                self.client.close_after_reply = true;
            }
        }
        self.afters
            .push(std::mem::replace(&mut d.after, AfterBatch::Reply));
    }

    /// Runs what a batch for `shard` left unrun (`Done::unrun`, its first item at `first`):
    /// the script that stopped, with every shard of this process held (`run_held`'s way),
    /// then the rest of the batch there, again until none stops; each reply goes to `redone`
    /// under its item's place in the original batch. The script is remembered for every
    /// thread (`Front::learn_script_beyond`). A script before item `safe_from` may not run again
    /// (commands the client sent after it have run on other shards): it answers Redis
    /// Cluster's "non local key" error, counted as the command's failure.
    async fn run_unrun(
        &mut self,
        shard: u16,
        mut first: usize,
        (items, args): (Vec<hop::Item>, hop::Args),
        safe_from: usize,
        redone: &mut Vec<((u16, usize), Vec<u8>)>,
    ) {
        let (mut items, mut args) = (items, args);
        while !items.is_empty() {
            let rest = items.split_off(1);
            // Only `hop::run_batch`'s `Op::Call` of a script stops a batch.
            let script = items
                .first()
                .and_then(|i| match i.op {
                    Op::Call(spec) => Some((spec, i)),
                    _ => None,
                })
                .map(|(spec, i)| {
                    let argv: Vec<Vec<u8>> = args.get(i.args).iter().map(|a| a.to_vec()).collect();
                    (spec, argv, i.db, i.proto, (i.caching, i.muted))
                });
            let Some((spec, argv, db, proto, (caching, muted))) = script else {
                // Not one `run_batch` makes: every item still answers, so that the
                // replies stay in step with the commands.
                let mut r = Reply::new();
                r.error(&CmdError::Err("not run again".to_string()));
                for i in 0..=rest.len() {
                    redone.push(((shard, first + i), r.buf.clone()));
                }
                return;
            };
            let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            self.th.front.borrow_mut().learn_script_beyond(&refs);
            let reply = if first >= safe_from {
                let mut batch = Batch::new(hop::ClientView::of(&self.client));
                let idx = batch.push(Op::Call(spec), db, proto, &refs);
                batch.set_client_state(idx, caching, muted);
                self.held_everywhere_reply(shard, batch).await
            } else {
                let mut r = Reply::new();
                r.proto = proto;
                let mut f = self.th.front.borrow_mut();
                if let Some(st) = f.stats.commands.get_mut(spec.idx) {
                    st.calls += 1;
                    st.failed_calls += 1;
                }
                f.stats.total_commands_processed += 1;
                let e = CmdError::Err(crate::script::engine::NON_LOCAL.to_string());
                cmd::reply_error(&mut f, &mut r, &e);
                r.buf
            };
            redone.push(((shard, first), reply));
            first += 1;
            if rest.is_empty() {
                return;
            }
            let n = rest.len();
            let batch = Batch {
                client: hop::ClientView::of(&self.client),
                items: rest,
                args,
            };
            let answered = match hop::send(&self.th, shard, batch).await {
                Ok(rx) => rx.await.ok(),
                Err(_) => None,
            };
            let Some(mut d) = answered else {
                // Its thread is gone (the process is stopping): each item answers so.
                let mut r = Reply::new();
                r.error(&hop::unavailable_error(hop::Unavailable { shard }));
                for i in 0..n {
                    redone.push(((shard, first + i), r.buf.clone()));
                }
                return;
            };
            self.took(shard, &mut d);
            let ran = d
                .notes
                .iter()
                .position(|n| n.relocate.is_some())
                .filter(|_| d.unrun.is_some())
                .unwrap_or(n);
            for i in 0..ran {
                redone.push(((shard, first + i), d.reply(i).to_vec()));
            }
            first += ran;
            (items, args) = d.unrun.take().unwrap_or_default();
        }
    }

    /// Sends the round's batches, waits for their replies and writes every reply of the
    /// round in command order. Returns false when the connection must close.
    async fn finish_round(&mut self) -> bool {
        let mut round = std::mem::take(&mut self.round);
        if round.batches.is_empty() {
            debug_assert!(!round.active);
            return true;
        }
        // Each batch may produce what the client's hard output limit leaves after the
        // replies this connection holds already (`ClientView::output_bytes_max`).
        let hard = {
            let sg = self.th.shard.borrow();
            self.client
                .shared
                .output_limit(&sg.config.client_output_buffer_limit)
                .hard_bytes
        };
        let held = (self.out.len() + round.local.len()) as u64;
        let mut waits = Vec::with_capacity(round.batches.len());
        for (shard, mut batch) in round.batches.drain(..) {
            if hard > 0 {
                batch.client.output_bytes_max = hard.saturating_sub(held).max(1);
            }
            waits.push((shard, hop::send(&self.th, shard, batch).await));
        }
        let mut done: Vec<(u16, Result<Done, hop::Unavailable>)> = Vec::with_capacity(waits.len());
        for (shard, w) in waits {
            let r = match w {
                Ok(rx) => rx.await.map_err(|_| hop::Unavailable { shard }),
                Err(e) => Err(e),
            };
            done.push((shard, r));
        }
        for (shard, d) in &mut done {
            if let Ok(d) = d {
                self.took(*shard, d);
            }
        }
        // A script that stopped to run again with every shard held, and the items of its
        // batch after it: run now, in order; their replies by (shard, item).
        let mut redone: Vec<((u16, usize), Vec<u8>)> = Vec::new();
        for (shard, d) in &mut done {
            let Ok(d) = d else { continue };
            let (Some(first), Some(unrun)) = (
                d.notes.iter().position(|n| n.relocate.is_some()),
                d.unrun.take(),
            ) else {
                continue;
            };
            // A script may run again only if nothing the client sent after it has run: every
            // reply of the round after its own is its batch's (which stopped with it). So
            // only the scripts among the round's trailing replies of this batch may.
            let safe_from = round
                .slots
                .iter()
                .rev()
                .map_while(|slot| match slot {
                    Slot::Remote(t, i) if t == shard => Some(*i),
                    _ => None,
                })
                .min()
                .unwrap_or(usize::MAX);
            self.run_unrun(*shard, first, unrun, safe_from, &mut redone)
                .await;
        }
        let unavailable = |shard: u16| {
            let mut r = Reply::new();
            r.error(&hop::unavailable_error(hop::Unavailable { shard }));
            r.buf
        };
        let remote = |shard: u16, idx: usize| -> Option<&[u8]> {
            if let Some((_, r)) = redone.iter().find(|(at, _)| *at == (shard, idx)) {
                return Some(r);
            }
            match done.iter().find(|(t, _)| *t == shard) {
                Some((_, Ok(d))) => Some(d.reply(idx)),
                _ => None,
            }
        };
        let reply_of = |slot: &Slot, local: &Reply| -> Vec<u8> {
            match slot {
                Slot::Local(a, b) => local.buf.get(*a..*b).unwrap_or_default().to_vec(),
                Slot::Remote(shard, idx) => match remote(*shard, *idx) {
                    Some(r) => r.to_vec(),
                    None => unavailable(*shard),
                },
                Slot::Gather(_) => Vec::new(),
            }
        };
        // The replies go out in one buffer: sized once for them all, so that large replies
        // (a pipeline of 1 MB GETs) are copied once, not again at every doubling.
        let total: usize = round
            .slots
            .iter()
            .map(|slot| match slot {
                Slot::Local(a, b) => b.saturating_sub(*a),
                Slot::Remote(shard, idx) => remote(*shard, *idx).map_or(0, <[u8]>::len),
                Slot::Gather(_) => 0,
            })
            .sum();
        self.out.buf.reserve(total);
        for slot in &round.slots {
            match slot {
                Slot::Gather(g) => {
                    let parts: Vec<Vec<u8>> =
                        g.parts.iter().map(|p| reply_of(p, &round.local)).collect();
                    let parts: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                    route::gather(g.kind, &g.order, &parts, &mut self.out);
                }
                Slot::Local(a, b) => self
                    .out
                    .raw(round.local.buf.get(*a..*b).unwrap_or_default()),
                Slot::Remote(shard, idx) => match remote(*shard, *idx) {
                    Some(r) => self.out.raw(r),
                    None => self.out.raw(&unavailable(*shard)),
                },
            }
        }
        round.local.clear();
        round.slots.clear();
        round.active = false;
        round.commands = 0;
        self.round = round;
        true
    }

    /// Runs one command on `shard` (inline when it is this thread's): its reply and, for a
    /// remote shard, the batch's notes.
    async fn one(
        &mut self,
        shard: u16,
        op: Op,
        argv: &[Vec<u8>],
    ) -> Result<(Vec<u8>, Option<hop::Note>), hop::Unavailable> {
        let argv: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        if shard == self.th.index {
            let th = self.th.clone();
            let mut sg = th.shard.borrow_mut();
            let mut fg = th.front.borrow_mut();
            let now = sg.now_ms();
            let mut r = Reply::new();
            r.proto = self.client.shared.proto.get();
            sg.scripting.relocate = None;
            match op {
                Op::Call(spec) => {
                    cmd::call(&mut sg, &mut fg, &mut self.client, &mut r, spec, &argv, now)
                }
                Op::Quiet(spec) => {
                    cmd::call_quiet(&mut sg, &mut fg, &mut self.client, &mut r, spec, &argv, now)
                }
                _ => {}
            }
            let note = sg.scripting.relocate.take().map(|t| hop::Note {
                relocate: Some(t),
                ..hop::Note::default()
            });
            return Ok((r.buf, note));
        }
        let mut batch = self.batch_of(op, &argv);
        if self.client.caching {
            // CLIENT CACHING covers the transaction EXEC runs there.
            batch.set_client_state(0, true, false);
        }
        let rx = hop::send(&self.th, shard, batch).await?;
        let mut done = rx.await.map_err(|_| hop::Unavailable { shard })?;
        if let Some(seq) = done.wrote {
            self.client.note_write(shard, seq);
        }
        self.afters
            .push(std::mem::replace(&mut done.after, AfterBatch::Reply));
        let note = done.notes.pop();
        Ok((done.reply(0).to_vec(), note))
    }

    /// Runs a barrier command alone (see `Barrier`). Returns false when the connection must
    /// close at once.
    async fn run_barrier(
        &mut self,
        b: Barrier,
        stream: &ClientStream,
        rbuf: &mut BytesMut,
        pos: usize,
    ) -> bool {
        let muted = std::mem::take(&mut self.barrier_muted);
        let mark = self.out.len();
        let ok = self.run_barrier_inner(b, stream, rbuf, pos).await;
        if muted {
            self.out.truncate(mark);
        }
        ok
    }

    async fn run_barrier_inner(
        &mut self,
        b: Barrier,
        stream: &ClientStream,
        rbuf: &mut BytesMut,
        pos: usize,
    ) -> bool {
        let Barrier { spec, argv, kind } = b;
        match kind {
            BarrierKind::All(merge) => {
                let replies = self.on_every_shard(spec, &argv).await;
                let parts: Vec<&[u8]> = replies.iter().map(Vec::as_slice).collect();
                self.out.proto = self.client.shared.proto.get();
                route::merge(merge, &parts, &mut self.out);
            }
            BarrierKind::Blocking(t) if self.th.node.remote_endpoint(t).is_some() => {
                self.client.shared.last_cmd.set(spec.meta.name);
                let reply = self.remote_blocking(t, &argv).await;
                self.out.raw(&reply);
                // A read there (XREAD BLOCK) is not tracked on its link of its own.
                let tracked =
                    self.tracking_is(|tr, caching| cmd::tracking::tracks_read(tr, caching, spec));
                if tracked {
                    self.flush_tracking();
                }
            }
            BarrierKind::Blocking(t) => {
                self.client.shared.last_cmd.set(spec.meta.name);
                match self.one(t, Op::Call(spec), &argv).await {
                    Ok((reply, note)) => {
                        self.out.raw(&reply);
                        if t == self.th.index {
                            if let Some(b) = self.client.blocked.as_mut() {
                                b.argv = argv;
                            }
                        } else if let Some(mut b) = note.and_then(|n| n.blocked) {
                            b.argv = argv;
                            b.shard = t;
                            self.client.shared.blocked.set(true);
                            self.client.blocked = Some(*b);
                        }
                    }
                    Err(e) => self.out.error(&hop::unavailable_error(e)),
                }
            }
            BarrierKind::Special(sp) => {
                return self.run_special(sp, spec, argv, stream, rbuf, pos).await;
            }
            BarrierKind::PopAcross => self.pop_first_across(spec, argv).await,
            BarrierKind::BlockAcross => {
                return self.pop_blocking_across(spec, argv, stream, rbuf).await;
            }
            BarrierKind::StreamsAcross => {
                return self.streams_across(spec, argv, stream, rbuf).await;
            }
            BarrierKind::MoveAcross => {
                let th = self.th.clone();
                let Conn {
                    client,
                    out,
                    afters,
                    ..
                } = self;
                crate::move_across::run(&th, client, out, afters, spec, argv).await;
            }
            BarrierKind::ReadAcross => {
                let th = self.th.clone();
                let plan = {
                    let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
                    let node = &th.node;
                    crate::read_across::plan(
                        &node.slots,
                        th.front.borrow().table,
                        spec,
                        &refs,
                        (th.index, &[]),
                        |t| node.is_local(t),
                    )
                };
                let Some(plan) = plan else {
                    self.out.error(&CmdError::CrossSlot);
                    return true;
                };
                let Conn {
                    client,
                    out,
                    afters,
                    ..
                } = self;
                crate::read_across::run(&th, client, out, afters, spec, argv, plan).await;
            }
            BarrierKind::ScriptAcross => self.script_across(spec, &argv).await,
            BarrierKind::ScriptHeld(home) => {
                self.client.shared.last_cmd.set(spec.meta.name);
                let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
                let batch = self.batch_of(Op::Call(spec), &refs);
                self.run_held(home, batch).await;
            }
            BarrierKind::ListMoveAcross => self.list_move_across(spec, &argv).await,
            BarrierKind::Script => {
                self.client.shared.last_cmd.set(spec.meta.name);
                let mut tried: SmallVec<[u16; 4]> = SmallVec::new();
                let mut t = self.th.index;
                loop {
                    tried.push(t);
                    match self.one(t, Op::Call(spec), &argv).await {
                        Ok((reply, note)) => match note.and_then(|n| n.relocate) {
                            Some(next) if !tried.contains(&next) => t = next,
                            // It reaches keys of shards it has run on already, and has done
                            // nothing anywhere: it runs once more where it began, with every
                            // shard of this process held, its calls reaching them all.
                            Some(_) => {
                                let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
                                let batch = self.batch_of(Op::Call(spec), &refs);
                                self.run_held(self.th.index, batch).await;
                                break;
                            }
                            None => {
                                self.out.raw(&reply);
                                break;
                            }
                        },
                        Err(e) => {
                            self.out.error(&hop::unavailable_error(e));
                            break;
                        }
                    }
                }
            }
        }
        true
    }

    /// A script whose declared keys are on several shards of this process: handed to
    /// `tx_across`'s coordinator, which holds every shard of its keys and runs it on its
    /// first key's shard, from where its calls reach the others. Its reply waits for every
    /// shard's log it wrote (`appendfsync always`).
    async fn script_across(&mut self, spec: &'static CommandSpec, argv: &[Vec<u8>]) {
        self.client.shared.last_cmd.set(spec.meta.name);
        let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let owners: Vec<u16> = {
            let f = self.th.front.borrow();
            let slots = &self.th.node.slots;
            route::positions(f.table, spec, &refs)
                .map(|p| {
                    p.iter()
                        .filter_map(|&i| refs.get(i))
                        .map(|k| slots.shard_of_key(k))
                        .collect()
                })
                .unwrap_or_default()
        };
        let Some(&home) = owners.first() else {
            self.out.error(&CmdError::CrossSlot);
            return;
        };
        let batch = self.batch_of(Op::Call(spec), &refs);
        // A script the process saw stop: with every shard held at once.
        if self.th.front.borrow_mut().script_reaches_beyond(&refs) {
            self.run_held(home, batch).await;
            return;
        }
        let (reply, relocate) = self.held_reply(owners, home, batch).await;
        if relocate.is_none() {
            self.out.raw(&reply);
            return;
        }
        // It stopped, having done nothing, on what its keys' shards do not own: once more,
        // with every shard of this process held, and so at once from now on.
        self.th.front.borrow_mut().learn_script_beyond(&refs);
        let batch = self.batch_of(Op::Call(spec), &refs);
        self.run_held(home, batch).await;
    }

    /// LMOVE or RPOPLPUSH between two shards of this process: one step on the source's
    /// shard, with both held (`cmd::list::move_to_held_shard`), counted as the command.
    async fn list_move_across(&mut self, spec: &'static CommandSpec, argv: &[Vec<u8>]) {
        self.client.shared.last_cmd.set(spec.meta.name);
        let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let sides = match cmd::list::move_sides(&refs) {
            Ok(s) => s,
            Err(e) => {
                hop::reply_error(&self.th, &mut self.out, &e);
                return;
            }
        };
        let reply = self.list_move_try(spec, argv, sides, true).await;
        let mut null = Reply::new();
        null.proto = self.client.shared.proto.get();
        null.null();
        self.out.raw(reply.as_deref().unwrap_or(&null.buf));
    }

    /// The move of LMOVE, RPOPLPUSH, BLMOVE or BRPOPLPUSH (`argv`: source, destination) from
    /// the source's shard to the destination's, both held (`counted`: as the command). Its
    /// reply; None when the source was empty (the null bulk).
    async fn list_move_try(
        &mut self,
        spec: &'static CommandSpec,
        argv: &[Vec<u8>],
        sides: (bool, bool),
        counted: bool,
    ) -> Option<Vec<u8>> {
        let (Some(src), Some(dst)) = (argv.get(1).cloned(), argv.get(2).cloned()) else {
            let mut r = Reply::new();
            r.error(&CmdError::CrossSlot);
            return Some(r.buf);
        };
        let slots = &self.th.node.slots;
        let (from, to) = (slots.shard_of_key(&src), slots.shard_of_key(&dst));
        let run = hop::Finish(Box::new(move |ctx: &mut cmd::Ctx<'_>| {
            cmd::list::move_to_held_shard(ctx, &src, &dst, sides, to)
        }));
        let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let batch = self.batch_of(Op::Finish { spec, counted, run }, &refs);
        let (reply, _) = self.held_reply(vec![from, to], from, batch).await;
        (!matches!(reply.as_slice(), b"$-1\r\n" | b"_\r\n")).then_some(reply)
    }

    /// A batch of one item, `op` over `argv`, for this client in its database and protocol.
    fn batch_of(&self, op: Op, argv: &[&[u8]]) -> Batch {
        let mut batch = Batch::new(ClientView::of(&self.client));
        batch.push(op, self.client.db, self.client.shared.proto.get(), argv);
        batch
    }

    /// Runs `batch` (one item: a script) on shard `home` through `tx_across`'s coordinator
    /// with every shard of this process held, its item able to reach them all
    /// (`tx_across::call_held`); its reply goes out once every shard's log it wrote allows
    /// (`appendfsync always`).
    async fn run_held(&mut self, home: u16, batch: Batch) {
        let reply = self.held_everywhere_reply(home, batch).await;
        self.out.raw(&reply);
    }

    /// `run_held`'s reply.
    async fn held_everywhere_reply(&mut self, home: u16, batch: Batch) -> Vec<u8> {
        let shards: Vec<u16> = self.th.node.local_shards().collect();
        self.held_reply(shards, home, batch).await.0
    }

    /// Runs `batch` (one item) on shard `home` through `tx_across`'s coordinator with every
    /// shard of `shards` held, its item able to reach the others (`tx_across::call_held`): the
    /// item's reply (or the error that kept it from running), and the script's
    /// `Scripting::relocate` when it stopped to run again with more shards held.
    async fn held_reply(
        &mut self,
        mut shards: Vec<u16>,
        home: u16,
        batch: Batch,
    ) -> (Vec<u8>, Option<u16>) {
        let err = |e: CmdError| {
            let mut r = Reply::new();
            r.error(&e);
            (r.buf, None)
        };
        shards.sort_unstable();
        shards.dedup();
        let mut holds = Vec::with_capacity(shards.len());
        for t in shards {
            let Some(inbox) = self.th.node.inbox(t) else {
                return err(hop::unavailable_error(hop::Unavailable { shard: t }));
            };
            holds.push((t, inbox.clone(), Vec::new()));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        crate::tx_across::submit(crate::tx_across::TxJob {
            holds,
            steps: vec![(home, batch)],
            dirty: crate::keyspace::WatchFlag::default(),
            writes: false,
            outcome: tx,
        });
        match rx.await {
            Ok(crate::tx_across::Outcome::Ran(mut dones, sides)) => {
                for side in sides {
                    if let Some(seq) = side.wrote {
                        self.client.note_write(side.shard, seq);
                    }
                    self.afters.push(side.after);
                }
                let Some(done) = dones.first_mut() else {
                    return err(CmdError::Err("not run across shards".to_string()));
                };
                if let Some(seq) = done.wrote {
                    self.client.note_write(home, seq);
                }
                self.afters
                    .push(std::mem::replace(&mut done.after, AfterBatch::Reply));
                if done.notes.first().is_some_and(|n| n.close) {
                    self.client.close_after_reply = true;
                }
                let relocate = done.notes.first().and_then(|n| n.relocate);
                (done.reply(0).to_vec(), relocate)
            }
            Ok(crate::tx_across::Outcome::Unavailable(t)) => {
                err(hop::unavailable_error(hop::Unavailable { shard: t }))
            }
            Ok(_) | Err(_) => err(CmdError::Err("not run across shards".to_string())),
        }
    }

    /// A blocking command whose key is on another node's shard: it blocks there, on a link
    /// of its own (a shared one would hold up other clients' commands behind it), for as
    /// long as it blocks plus the request limit (its timeout argument is the command's own
    /// business; a command that blocks for ever waits as long as the link lives).
    async fn remote_blocking(&mut self, shard: u16, argv: &[Vec<u8>]) -> Vec<u8> {
        let err = |text: String| {
            let mut r = Reply::new();
            r.error(&CmdError::Raw(text));
            r.buf
        };
        let (Some(addr), Some(pool)) = (
            self.th.node.remote_endpoint(shard).map(str::to_string),
            self.th.proxy.clone(),
        ) else {
            return err(format!("CLUSTERDOWN shard {shard} is unavailable"));
        };
        let resp3 = self.client.shared.proto.get() == crate::resp::reply::Proto::Resp3;
        let link = match pool.dedicated(&addr, resp3).await {
            Ok(l) => l,
            Err(e) => return err(hop::proxy_error_text(&e)),
        };
        let mut req = meridian_proxy::Request::new();
        let a: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        req.push(self.client.db, &a);
        match link.call(&req, REMOTE_BLOCK_WAIT_MAX).await {
            Ok(mut r) => r.pop().unwrap_or_default(),
            Err(e) => err(hop::proxy_error_text(&e)),
        }
    }

    /// Runs `argv` on every shard: this thread's counted, the others quiet. Replies in shard
    /// order.
    async fn on_every_shard(
        &mut self,
        spec: &'static CommandSpec,
        argv: &[Vec<u8>],
    ) -> Vec<Vec<u8>> {
        self.on_shards_but(spec, argv, None).await
    }

    /// `on_every_shard`, leaving out shard `skip` when given (it ran the command already:
    /// a transaction's, `exec_plan`); the replies of the shards it ran on.
    async fn on_shards_but(
        &mut self,
        spec: &'static CommandSpec,
        argv: &[Vec<u8>],
        skip: Option<u16>,
    ) -> Vec<Vec<u8>> {
        let node = self.th.node.clone();
        // The keyspace's commands cover the whole site; settings, snapshots and clients are
        // each node's own (as a Redis Cluster node's).
        let range = if site_wide(spec.meta.name) {
            0..node.shards
        } else {
            node.local_shards()
        };
        let n = node.shards;
        // A setting, load or flush every shard holds (`Merge::Same`) runs here first, with
        // every check a client's command gets (the other shards run only its handler): one
        // refused here (-OOM, a bad argument) is refused everywhere, so the shards never
        // diverge on it.
        let table = self.th.front.borrow().table;
        let same_everywhere = route::classes(table).get(spec.idx) == Some(&Class::All(Merge::Same));
        let mut mine: Option<Vec<u8>> = None;
        if same_everywhere && skip != Some(self.th.index) {
            let reply = self
                .one(self.th.index, Op::Call(spec), argv)
                .await
                .unwrap_or_default()
                .0;
            if reply.first() == Some(&b'-') {
                return vec![reply];
            }
            mine = Some(reply);
        }
        let borrowed: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let mut waits = Vec::with_capacity(usize::from(n));
        for shard in range.clone() {
            if shard == self.th.index || Some(shard) == skip {
                continue;
            }
            let batch = self.batch_of(Op::Quiet(spec), &borrowed);
            waits.push((shard, hop::send(&self.th, shard, batch).await));
        }
        let mine = match mine {
            Some(reply) => reply,
            None if skip == Some(self.th.index) => Vec::new(),
            None => {
                self.one(self.th.index, Op::Call(spec), argv)
                    .await
                    .unwrap_or_default()
                    .0
            }
        };
        let mut out = vec![Vec::new(); usize::from(n)];
        if let Some(slot) = out.get_mut(usize::from(self.th.index)) {
            *slot = mine;
        }
        for (shard, w) in waits {
            let reply = match w {
                Ok(rx) => match rx.await {
                    Ok(mut d) => {
                        self.afters
                            .push(std::mem::replace(&mut d.after, AfterBatch::Reply));
                        if d.notes.first().is_some_and(|n| n.close) {
                            self.client.close_after_reply = true;
                        }
                        d.reply(0).to_vec()
                    }
                    Err(_) => error_bytes(&hop::unavailable_error(hop::Unavailable { shard })),
                },
                Err(e) => error_bytes(&hop::unavailable_error(e)),
            };
            if let Some(slot) = out.get_mut(usize::from(shard)) {
                *slot = reply;
            }
        }
        out.into_iter()
            .enumerate()
            .filter(|(i, _)| range.contains(&(*i as u16)) && Some(*i as u16) != skip)
            .map(|(_, r)| r)
            .collect()
    }

    async fn run_special(
        &mut self,
        sp: Special,
        spec: &'static CommandSpec,
        argv: Vec<Vec<u8>>,
        stream: &ClientStream,
        rbuf: &mut BytesMut,
        pos: usize,
    ) -> bool {
        match sp {
            Special::Exec => self.exec(spec, argv).await,
            Special::Watch => self.watch(spec, argv).await,
            Special::Scan => self.scan(spec, argv).await,
            Special::RandomKey => self.randomkey(spec, argv).await,
            Special::CrdtWait => return self.crdt_wait(spec, argv, stream, rbuf, pos).await,
            Special::Shutdown => self.shutdown(spec, argv).await,
            Special::Sync => self.sync_rdb(spec, argv).await,
            Special::Debug => self.debug_across(argv).await,
            Special::Sort => {
                let th = self.th.clone();
                let Conn {
                    client,
                    out,
                    afters,
                    ..
                } = self;
                crate::sort_across::run(&th, client, out, afters, spec, argv).await;
            }
            Special::Unwatch | Special::Digest | Special::Cluster | Special::Script => {
                // Dispatched without a barrier.
                self.out
                    .error(&CmdError::Err("internal routing error".to_string()));
            }
        }
        true
    }

    /// EXEC with several shards: every key of the transaction (its queued commands' and its
    /// WATCHed keys) must be on one shard, which runs it whole; else the transaction is
    /// discarded with CROSSSLOT, as Redis Cluster's EXEC.
    async fn exec(&mut self, spec: &'static CommandSpec, argv: Vec<Vec<u8>>) {
        let local = self.th.index;
        let plan = {
            let f = self.th.front.borrow();
            self.exec_plan(&f)
        };
        let target = plan.as_ref().map(|&(t, _)| t);
        let mark = self.out.len();
        if target.is_none() && self.client.multi.as_ref().is_some_and(|m| m.aborted) {
            // A command failed to queue: EXECABORT, as one server answers, wherever the
            // keys are.
            let remote: Vec<u16> = {
                let f = self.th.front.borrow();
                self.watch_shards(&f)
            };
            self.take_transaction(spec);
            let local = self.th.index;
            for t in remote.into_iter().filter(|&t| t != local) {
                let _ = self.one(t, Op::Unwatch, &[]).await;
            }
            {
                let th = self.th.clone();
                let mut sg = th.shard.borrow_mut();
                sg.unwatch_all(&self.client.dirty);
            }
            self.watch_link = None;
            self.client.dirty.set(false);
            self.out.proto = self.client.shared.proto.get();
            let e = CmdError::Raw(
                "EXECABORT Transaction discarded because of previous errors.".to_string(),
            );
            hop::reply_error(&self.th, &mut self.out, &e);
            return;
        }
        if target.is_none() && self.watch_link.is_none() {
            let across = {
                let f = self.th.front.borrow();
                self.exec_across_plan(&f)
            };
            if let Some(across) = across {
                self.exec_across(spec, argv, across).await;
                return;
            }
        }
        // EXEC ends every watch: one held on another node's link goes with its link.
        let watch_link = self.watch_link.take();
        match target {
            None => {
                let remote: Vec<u16> = {
                    let f = self.th.front.borrow();
                    self.watch_shards(&f)
                };
                {
                    let th = self.th.clone();
                    let mut sg = th.shard.borrow_mut();
                    let mut fg = th.front.borrow_mut();
                    if let Some(st) = fg.stats.commands.get_mut(spec.idx) {
                        st.rejected_calls += 1;
                    }
                    cmd::tx::end_transaction(&mut sg, &mut self.client);
                    self.out.proto = self.client.shared.proto.get();
                    cmd::reply_error(&mut fg, &mut self.out, &CmdError::CrossSlot);
                }
                for t in remote.into_iter().filter(|&t| t != local) {
                    let _ = self.one(t, Op::Unwatch, &[]).await;
                }
            }
            Some(t) if t == local => {
                let th = self.th.clone();
                let mut sg = th.shard.borrow_mut();
                let mut fg = th.front.borrow_mut();
                let now = sg.now_ms();
                let argv: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
                self.out.proto = self.client.shared.proto.get();
                cmd::call(
                    &mut sg,
                    &mut fg,
                    &mut self.client,
                    &mut self.out,
                    spec,
                    &argv,
                    now,
                );
            }
            Some(t) if watch_link.as_ref().is_some_and(|w| w.shard == t) => {
                // Its WATCH lives on its own link to that shard: the transaction runs there.
                // Its reads are not tracked on that link (it closes after EXEC).
                let tracked = self.tracking_is(cmd::tracking::tracks_transaction);
                let (multi, _) = self.take_transaction(spec);
                let reply = match watch_link {
                    Some(w) if !multi.aborted => {
                        let mut req = meridian_proxy::Request::new();
                        let selected = hop::push_exec(&mut req, self.client.db, &multi);
                        let limit = self
                            .th
                            .proxy
                            .as_ref()
                            .map_or(Duration::from_secs(1), |p| p.limits().request);
                        match w.link.call(&req, limit).await {
                            Ok(mut r) => {
                                if let Some(db) = selected {
                                    self.client.select(db);
                                }
                                r.pop().unwrap_or_default()
                            }
                            Err(e) => {
                                let mut r = Reply::new();
                                r.error(&CmdError::Raw(hop::proxy_error_text(&e)));
                                r.buf
                            }
                        }
                    }
                    _ => {
                        b"-EXECABORT Transaction discarded because of previous errors.\r\n".to_vec()
                    }
                };
                self.out.raw(&reply);
                self.client.dirty.set(false);
                if tracked {
                    self.flush_tracking();
                }
            }
            Some(t)
                if self.th.node.remote_endpoint(t).is_some() && !self.client.watched.is_empty() =>
            {
                // Its WATCH on that shard was lost with its link (a failed WATCH there): a
                // watched key may have changed unseen, so the transaction is not run.
                self.take_transaction(spec);
                self.out.proto = self.client.shared.proto.get();
                self.out.null_array();
                self.client.dirty.set(false);
            }
            Some(t) => {
                let (multi, watched) = self.take_transaction(spec);
                match self.one(t, Op::Exec { multi, watched }, &argv).await {
                    Ok((reply, note)) => {
                        self.out.raw(&reply);
                        if let Some(n) = note {
                            self.client.select(n.db);
                        }
                    }
                    Err(e) => self.out.error(&hop::unavailable_error(e)),
                }
                self.client.dirty.set(false);
            }
        }
        if let Some((t, broadcasts)) = plan.filter(|(_, b)| !b.is_empty()) {
            // The transaction ran on shard `t`; its settings and controls (CONFIG SET,
            // CLIENT PAUSE, FLUSHALL...) now reach the other shards, each one that
            // succeeded in it, in its order.
            let reply = self.out.buf.get(mark..).unwrap_or_default().to_vec();
            let Some((items, _)) = crate::resp::read::elements(&reply, 0) else {
                return;
            };
            // What every shard answers for itself (DBSIZE, KEYS, INFO...) becomes the site's:
            // the transaction's element is merged with the other shards' parts, as outside
            // a transaction, and rewritten, the last first so that earlier offsets hold.
            let mut totals: Vec<((usize, usize), Vec<u8>)> = Vec::new();
            for (i, spec, args) in broadcasts {
                let Some(&(a, e)) = items.get(i) else {
                    continue;
                };
                let ok = reply.get(a).is_some_and(|&b| b != b'-' && b != b'!');
                if !ok {
                    continue;
                }
                let replies = self.on_shards_but(spec, &args, Some(t)).await;
                let table = self.th.front.borrow().table;
                let kind = match route::classes(table).get(spec.idx) {
                    Some(Class::All(Merge::Same)) | None => continue,
                    Some(Class::All(kind)) => *kind,
                    Some(_) => continue,
                };
                let mut parts: Vec<&[u8]> = vec![reply.get(a..e).unwrap_or_default()];
                parts.extend(replies.iter().map(Vec::as_slice));
                let mut merged = Reply::new();
                merged.proto = self.client.shared.proto.get();
                route::merge(kind, &parts, &mut merged);
                totals.push(((mark + a, mark + e), merged.buf));
            }
            for ((a, e), merged) in totals.into_iter().rev() {
                if e <= self.out.buf.len() && a < e {
                    self.out.buf.splice(a..e, merged);
                }
            }
        }
        // CLIENT CACHING covered the transaction and ends with it (Redis's resetClient after
        // EXEC): `dispatch` left it on, as EXEC runs after it, as a barrier.
        self.client.caching = false;
    }

    /// Whether the client tracks and `says` of its tracker and its CLIENT CACHING state.
    fn tracking_is(&self, says: impl Fn(&crate::client::Tracker, bool) -> bool) -> bool {
        let tracking = self.client.shared.tracking.borrow();
        tracking
            .as_deref()
            .is_some_and(|tr| says(tr, self.client.caching))
    }

    /// A flush for this client's cache after a read on another node that could not be
    /// tracked there (on a link of its own): it caches nothing it would not hear about.
    fn flush_tracking(&self) {
        if let Some(rt) = &self.th.remote_tracking {
            rt.flush_client(self.client.id());
        }
    }

    /// EXEC running elsewhere than this thread: the transaction and the watched keys leave
    /// the connection's state, which EXEC ends.
    /// A transaction whose keys span shards of this process, when `tx_across` can run it:
    /// each queued command's keys on one shard (a keyless one joins the segment before it,
    /// or the first), none acting on the connection (but those that run after the segments,
    /// `tx_across::runs_after_segments`) or on every shard, the transaction not flagged.
    /// Returns the shards to hold (ascending: those of its commands and of its WATCHed keys)
    /// and the segments: runs of consecutive commands of one shard.
    fn exec_across_plan(&self, f: &Front) -> Option<ExecAcross> {
        use crate::tx_across::Join;
        let m = self.client.multi.as_ref()?;
        if m.aborted {
            return None;
        }
        let slots = &f.node.slots;
        let mut holds: Vec<u16> = Vec::new();
        for (_, key) in &self.client.watched {
            holds.push(slots.shard_of_key(key));
        }
        // Each queued command's parts: (its shard, None for a keyless one that runs with the
        // segment before it; its arguments there when it is split).
        type Part = (Option<u16>, Option<Vec<Vec<u8>>>);
        let mut parts: Vec<(usize, Part)> = Vec::with_capacity(m.queued.len());
        let mut joins: Vec<Join> = Vec::with_capacity(m.queued.len());
        let every_shard_local = (0..f.node.shards).all(|t| f.node.is_local(t));
        for (i, q) in m.queued.iter().enumerate() {
            let argv: Vec<&[u8]> = q.args.iter().map(Vec::as_slice).collect();
            let spec = cmd::resolve(f.table, &argv).ok()?;
            let class = route::classes(f.table)
                .get(spec.idx)
                .copied()
                .unwrap_or(Class::Local);
            let mut whole = |at: Option<u16>| {
                parts.push((i, (at, None)));
                joins.push(Join::One);
            };
            match class {
                // CLIENT SETNAME...: on the connection, after the segments.
                Class::Local if crate::tx_across::runs_after_segments(spec.meta.name) => {
                    joins.push(Join::Connection);
                }
                Class::Local if pins_to_connection(spec.meta.name) => return None,
                Class::Local => whole(None),
                // Every shard is held: each answers for itself, merged as outside a
                // transaction (DBSIZE, KEYS, FLUSHALL, CONFIG SET...); RANDOMKEY: every
                // shard's size and a key of its, one picked by size; SCAN: a step on the
                // shard its cursor names and on each after it, joined as `Conn::scan` walks
                // them (`Join::Scan`); a cursor that is not one runs where keyless commands
                // do, whose handler refuses it.
                Class::All(_) | Class::Special(Special::RandomKey | Special::Scan)
                    if every_shard_local =>
                {
                    match crate::tx_across::every_shard_parts(class, &q.args, f.node.shards) {
                        Some((split, join)) => {
                            for (t, args) in split {
                                holds.push(t);
                                parts.push((i, (Some(t), Some(args))));
                            }
                            joins.push(join);
                        }
                        None => whole(None),
                    }
                }
                // SORT whose BY or GET patterns may form keys of any shard: on its key's
                // shard, every shard held (`held_across::sort_plan`).
                Class::Special(Special::Sort)
                    if every_shard_local
                        && crate::held_across::sort_patterns_span(slots, spec, &argv) =>
                {
                    let key = argv.get(1)?;
                    holds.extend(f.node.local_shards());
                    whole(Some(slots.shard_of_key(key)));
                }
                // A script may call keys it did not declare, of any shard, and whole-keyspace
                // commands: on its first declared key's shard (a keyless one: with the
                // segment before it), every shard held, which its calls reach (`tx_across`).
                Class::Special(Special::Script) if every_shard_local => {
                    holds.extend(f.node.local_shards());
                    let first = route::positions(f.table, spec, &argv)
                        .and_then(|p| p.first().and_then(|&i| argv.get(i)).copied());
                    whole(first.map(|k| slots.shard_of_key(k)));
                }
                Class::All(_)
                | Class::Special(
                    Special::Scan
                    | Special::RandomKey
                    | Special::CrdtWait
                    | Special::Shutdown
                    | Special::Debug
                    | Special::Digest
                    | Special::Exec
                    | Special::Watch
                    | Special::Unwatch
                    | Special::Cluster,
                ) => return None,
                _ => match self.keys_at(f, spec, &argv) {
                    // A keyless command runs on the connection's thread outside a
                    // transaction: one that acts on the connection must run there, which a
                    // held shard's segment is not (CLIENT SETNAME...: there, after the
                    // segments). A command that takes keys but names none here (a bad
                    // `numkeys`) only answers its error.
                    KeysAt::None if crate::tx_across::runs_after_segments(spec.meta.name) => {
                        joins.push(Join::Connection);
                    }
                    KeysAt::None
                        if pins_to_connection(spec.meta.name) && !takes_keys(spec.meta) =>
                    {
                        return None;
                    }
                    KeysAt::None => whole(None),
                    KeysAt::Shard(t) => {
                        holds.push(t);
                        whole(Some(t));
                    }
                    // A script over keys of several shards: on its first key's shard, with
                    // every shard of its keys held, which its calls reach (`tx_across`).
                    KeysAt::Many if cmd::tracking::is_script(spec) => {
                        let owners: Vec<u16> = route::positions(f.table, spec, &argv)?
                            .iter()
                            .filter_map(|&i| argv.get(i))
                            .map(|k| slots.shard_of_key(k))
                            .collect();
                        whole(Some(*owners.first()?));
                        holds.extend(owners);
                    }
                    // XREAD, XREADGROUP: the command over each shard's streams (BLOCK is
                    // ignored inside MULTI), every shard held; one whose arguments are
                    // wrong runs whole on its first key's shard, which refuses it.
                    KeysAt::Many if STREAMS_ACROSS.contains(&spec.meta.name) => {
                        let group_mode = spec.meta.name == "xreadgroup";
                        match cmd::stream::parse_read(&argv, group_mode, false, 0) {
                            Ok(read) => {
                                let (split, order) = route::split_streams(
                                    slots,
                                    argv.first().copied().unwrap_or_default(),
                                    &read.part_options(&argv),
                                    &read.keys,
                                    &read.ids,
                                );
                                for (t, sub) in split {
                                    holds.push(t);
                                    parts.push((i, (Some(t), Some(sub))));
                                }
                                joins.push(Join::Streams { order });
                            }
                            Err(_) => {
                                let positions = route::positions(f.table, spec, &argv)?;
                                let key = positions.first().and_then(|&p| argv.get(p))?;
                                let t = slots.shard_of_key(key);
                                holds.push(t);
                                whole(Some(t));
                            }
                        }
                    }
                    // LMOVE, RPOPLPUSH, SUNIONSTORE, COPY...: on its home shard, every
                    // shard it reaches held (`held_across`, which EXEC runs there).
                    KeysAt::Many if crate::held_across::runs_across(spec.meta.name) => {
                        let across = crate::held_across::plan_on(
                            slots,
                            f.table,
                            spec,
                            &argv,
                            self.th.index,
                            |t| f.node.is_local(t),
                        )?;
                        let (home, shards) = crate::held_across::home(&across)?;
                        holds.extend(shards);
                        whole(Some(home));
                    }
                    // MGET, MSET, DEL...: a part on each shard of its keys, every one held,
                    // gathered as outside a transaction (so MSET is atomic here).
                    KeysAt::Many => {
                        let Class::Scatter(kind) = class else {
                            return None;
                        };
                        let (split, order) = route::split_scatter(slots, kind, &argv);
                        for (t, sub) in split {
                            holds.push(t);
                            parts.push((i, (Some(t), Some(owned(&sub)))));
                        }
                        joins.push(Join::Gather { kind, order });
                    }
                },
            }
        }
        // Keyless commands run with the segment before them (the first: with the first
        // keyed command's; with none, on this thread's shard).
        let first = match parts.iter().find_map(|(_, (t, _))| *t) {
            Some(t) => t,
            None if parts.is_empty() => self.th.index,
            None => {
                holds.push(self.th.index);
                self.th.index
            }
        };
        // A transaction of one shard comes here only when `exec_plan` could not run it there
        // (SCAN, RANDOMKEY): held like any other. One whose commands have no part (a SCAN
        // past the last shard) holds this thread's shard.
        if holds.is_empty() {
            holds.push(self.th.index);
        }
        holds.sort_unstable();
        holds.dedup();
        if !holds.iter().all(|&t| f.node.is_local(t)) {
            return None;
        }
        let mut segments: Vec<(u16, Vec<TxPart>)> = Vec::new();
        let mut current = first;
        for (i, (t, args)) in parts {
            if let Some(t) = t {
                current = t;
            }
            match segments.last_mut() {
                Some((s, v)) if *s == current => v.push((i, args)),
                _ => segments.push((current, vec![(i, args)])),
            }
        }
        Some(ExecAcross {
            holds,
            segments,
            joins,
        })
    }

    /// EXEC of a transaction `exec_across_plan` planned: handed to `tx_across`'s coordinator,
    /// which holds its shards, runs its segments and lets them go; the reply is theirs joined
    /// (or nil when a WATCHed key changed, EXECABORT when a log refuses writes). Its watches
    /// end on every shard.
    async fn exec_across(
        &mut self,
        spec: &'static CommandSpec,
        argv: Vec<Vec<u8>>,
        plan: ExecAcross,
    ) {
        let watch_shards: Vec<u16> = {
            let f = self.th.front.borrow();
            self.watch_shards(&f)
        };
        let dirty = self.client.dirty.clone();
        let (multi, watched) = self.take_transaction(spec);
        self.out.proto = self.client.shared.proto.get();
        let table = self.th.front.borrow().table;
        let writes = multi.queued.iter().any(|q| {
            let a: Vec<&[u8]> = q.args.iter().map(Vec::as_slice).collect();
            cmd::resolve(table, &a).is_ok_and(|sp| sp.meta.flags.contains(cmd::table::Flags::WRITE))
        });
        let slots = self.th.node.slots.clone();
        let mut holds = Vec::with_capacity(plan.holds.len());
        for &t in &plan.holds {
            let Some(inbox) = self.th.node.inbox(t) else {
                self.out
                    .error(&hop::unavailable_error(hop::Unavailable { shard: t }));
                return;
            };
            let mine: Vec<(usize, Vec<u8>)> = watched
                .iter()
                .filter(|(_, k)| slots.shard_of_key(k) == t)
                .cloned()
                .collect();
            holds.push((t, inbox.clone(), mine));
        }
        let mut queued = multi.queued;
        let ExecAcross {
            holds: _,
            segments,
            joins,
        } = plan;
        let mut steps = Vec::with_capacity(segments.len());
        // The queued command of each part, over every segment in order.
        let mut owners: Vec<usize> = Vec::new();
        let mut shards: Vec<u16> = Vec::with_capacity(segments.len());
        for (t, seg) in segments {
            shards.push(t);
            let part = crate::client::MultiState {
                queued: seg
                    .into_iter()
                    .map(|(i, args)| {
                        owners.push(i);
                        crate::client::QueuedCommand {
                            args: args.unwrap_or_else(|| {
                                queued
                                    .get_mut(i)
                                    .map(|q| std::mem::take(&mut q.args))
                                    .unwrap_or_default()
                            }),
                        }
                    })
                    .collect(),
                aborted: false,
            };
            let mut view = hop::ClientView::of(&self.client);
            // The transaction's own writes must not fail its later segments: WATCH was
            // checked once, with every shard held.
            view.dirty = crate::keyspace::WatchFlag::default();
            let mut batch = Batch::new(view);
            let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            batch.push(
                Op::Exec {
                    multi: part,
                    watched: Vec::new(),
                },
                self.client.db,
                self.client.shared.proto.get(),
                &refs,
            );
            steps.push((t, batch));
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        crate::tx_across::submit(crate::tx_across::TxJob {
            holds,
            steps,
            dirty,
            writes,
            outcome: tx,
        });
        let outcome = rx.await;
        // EXEC ends every watch: this thread's shard's here, the others' by an item each.
        self.th.shard.borrow_mut().unwatch_all(&self.client.dirty);
        let local = self.th.index;
        for t in watch_shards.into_iter().filter(|&t| t != local) {
            let _ = self.one(t, Op::Unwatch, &[]).await;
        }
        self.client.dirty.set(false);
        match outcome {
            Ok(crate::tx_across::Outcome::Ran(mut dones, sides)) => {
                // What its scripts' calls wrote on other held shards.
                for side in sides {
                    if let Some(seq) = side.wrote {
                        self.client.note_write(side.shard, seq);
                    }
                    self.afters.push(side.after);
                }
                let mut parts: Vec<Vec<u8>> = Vec::with_capacity(dones.len());
                for (t, d) in shards.iter().zip(dones.iter_mut()) {
                    if let Some(seq) = d.wrote {
                        self.client.note_write(*t, seq);
                    }
                    self.afters
                        .push(std::mem::replace(&mut d.after, AfterBatch::Reply));
                    if let Some(n) = d.notes.first() {
                        self.client.select(n.db);
                        if n.close {
                            self.client.close_after_reply = true;
                        }
                    }
                    parts.push(d.reply(0).to_vec());
                }
                // The commands that act on the connection alone, here, now that the
                // others ran and a SELECT among them took effect
                // (`tx_across::runs_after_segments`).
                let mut apart: Vec<(usize, Vec<u8>)> = Vec::new();
                for (i, join) in joins.iter().enumerate() {
                    if !matches!(join, crate::tx_across::Join::Connection) {
                        continue;
                    }
                    let args = queued.get(i).map(|q| q.args.as_slice()).unwrap_or_default();
                    let argv: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                    let th = self.th.clone();
                    let mut sg = th.shard.borrow_mut();
                    let mut fg = th.front.borrow_mut();
                    let mut r = Reply::new();
                    r.proto = self.out.proto;
                    match cmd::resolve(fg.table, &argv) {
                        Ok(sp) => {
                            let now = sg.now_ms();
                            cmd::call(&mut sg, &mut fg, &mut self.client, &mut r, sp, &argv, now);
                        }
                        Err(e) => cmd::reply_error(&mut fg, &mut r, &e),
                    }
                    apart.push((i, r.buf));
                }
                let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
                match crate::tx_across::join_replies(&refs, &owners, &joins, &apart, self.out.proto)
                {
                    Some(r) => self.out.raw(&r),
                    None => self.out.raw(parts.last().map_or(&b""[..], Vec::as_slice)),
                }
            }
            Ok(crate::tx_across::Outcome::Watched) => self.out.null_array(),
            Ok(crate::tx_across::Outcome::Refused(text)) => {
                let e = CmdError::Raw(format!(
                    "EXECABORT Transaction discarded because of: {text}"
                ));
                hop::reply_error(&self.th, &mut self.out, &e);
            }
            Ok(crate::tx_across::Outcome::Unavailable(t)) => self
                .out
                .error(&hop::unavailable_error(hop::Unavailable { shard: t })),
            Err(_) => self.out.error(&CmdError::Err(
                "transaction across shards not run".to_string(),
            )),
        }
    }

    fn take_transaction(
        &mut self,
        spec: &'static CommandSpec,
    ) -> (MultiState, Vec<(usize, Vec<u8>)>) {
        let multi = self.client.multi.take().unwrap_or_default();
        let watched = std::mem::take(&mut self.client.watched);
        self.client.shared.in_multi.set(false);
        self.client.shared.watched.set(0);
        self.client.shared.last_cmd.set(spec.meta.name);
        (multi, watched)
    }

    /// The shard a transaction runs on, with the queued commands every shard runs after it
    /// (`Class::All` with `Merge::Same`: settings, pauses, flushes, script loads; with any
    /// other merge: DBSIZE, KEYS, INFO, CLIENT LIST..., the other shards' parts merged into
    /// the transaction's) and their places in it; None when its keys span shards. One pass
    /// resolves each queued command.
    fn exec_plan(&self, f: &Front) -> Option<(u16, Vec<Broadcast>)> {
        let slots = &f.node.slots;
        let local = self.th.index;
        let mut target: Option<u16> = None;
        let mut add = |t: u16| match target {
            None => {
                target = Some(t);
                true
            }
            Some(x) => x == t,
        };
        for (_, key) in &self.client.watched {
            if !add(slots.shard_of_key(key)) {
                return None;
            }
        }
        let Some(m) = self.client.multi.as_ref() else {
            return Some((local, Vec::new()));
        };
        let mut broadcasts = Vec::new();
        for (i, q) in m.queued.iter().enumerate() {
            let argv: Vec<&[u8]> = q.args.iter().map(Vec::as_slice).collect();
            let Ok(spec) = cmd::resolve(f.table, &argv) else {
                continue;
            };
            let class = route::classes(f.table)
                .get(spec.idx)
                .copied()
                .unwrap_or(Class::Local);
            match class {
                Class::Local => {
                    if pins_to_connection(spec.meta.name) && !add(local) {
                        return None;
                    }
                }
                // Settings and controls run in the transaction on its shard, then on the
                // others.
                // So do the commands every shard answers for itself (DBSIZE, KEYS, INFO,
                // CLIENT LIST...): their other shards' parts are merged into the
                // transaction's reply, as outside a transaction.
                Class::All(_) => {
                    broadcasts.push((i, spec, q.args.clone()));
                }
                Class::Special(
                    Special::Scan | Special::RandomKey | Special::CrdtWait | Special::Shutdown,
                ) => return None,
                Class::Special(Special::Debug) => {
                    if argv.get(1).is_some_and(|a| cmd::debug::on_every_shard(a))
                        || (f.node.local > 1
                            && cmd::debug::place(&argv, slots) == cmd::debug::Place::Every)
                    {
                        return None;
                    }
                }
                Class::Special(Special::Digest) if argv.len() != 3 => return None,
                // A script may reach keys it did not declare on any shard: with every
                // shard held (`exec_across_plan`).
                Class::Special(Special::Script)
                    if f.node.shards > 1 && (0..f.node.shards).all(|t| f.node.is_local(t)) =>
                {
                    return None;
                }
                // Its patterns' keys may be any shard's: with every shard held
                // (`exec_across_plan`).
                Class::Special(Special::Sort)
                    if (0..f.node.shards).all(|t| f.node.is_local(t))
                        && crate::held_across::sort_patterns_span(slots, spec, &argv) =>
                {
                    return None;
                }
                _ => match self.keys_at(f, spec, &argv) {
                    KeysAt::None => {}
                    KeysAt::Shard(t) => {
                        if !add(t) {
                            return None;
                        }
                    }
                    KeysAt::Many => return None,
                },
            }
        }
        Some((target.unwrap_or(local), broadcasts))
    }

    /// WATCH with several shards: the keys must share a shard, where they are registered.
    async fn watch(&mut self, spec: &'static CommandSpec, argv: Vec<Vec<u8>>) {
        let at = {
            let f = self.th.front.borrow();
            let borrowed: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            self.keys_at(&f, spec, &borrowed)
        };
        // Keys of two shards of other nodes cannot be one transaction's: its watch link
        // holds one shard's.
        let other_link = |t: u16| self.watch_link.as_ref().is_some_and(|w| w.shard != t);
        let t = match at {
            KeysAt::Shard(t) if !other_link(t) => Some(t),
            KeysAt::None if !other_link(self.th.index) => Some(self.th.index),
            // Keys of several shards of this process: each shard watches its own, for a
            // transaction that runs across them (`tx_across`).
            KeysAt::Many if self.watch_link.is_none() && self.client.multi.is_none() => {
                let slots = self.th.node.slots.clone();
                let mut parts: Vec<(u16, Vec<Vec<u8>>)> = Vec::new();
                for key in argv.iter().skip(1) {
                    let t = slots.shard_of_key(key);
                    match parts.iter_mut().find(|(s, _)| *s == t) {
                        Some((_, p)) => p.push(key.clone()),
                        None => parts.push((
                            t,
                            vec![argv.first().cloned().unwrap_or_default(), key.clone()],
                        )),
                    }
                }
                if parts.iter().all(|(t, _)| self.th.node.is_local(*t)) {
                    self.client.shared.last_cmd.set(spec.meta.name);
                    let mut reply = b"+OK\r\n".to_vec();
                    for (t, part) in parts {
                        match self.one(t, Op::Call(spec), &part).await {
                            Ok((r, _)) if r == b"+OK\r\n" => {
                                if t != self.th.index {
                                    self.note_watched(&part);
                                }
                            }
                            Ok((r, _)) => {
                                reply = r;
                                break;
                            }
                            Err(e) => {
                                let mut r = Reply::new();
                                r.error(&hop::unavailable_error(e));
                                reply = r.buf;
                                break;
                            }
                        }
                    }
                    self.out.raw(&reply);
                    return;
                }
                None
            }
            _ => None,
        };
        let Some(t) = t else {
            let mut f = self.th.front.borrow_mut();
            if let Some(st) = f.stats.commands.get_mut(spec.idx) {
                st.rejected_calls += 1;
            }
            self.out.proto = self.client.shared.proto.get();
            cmd::reply_error(&mut f, &mut self.out, &CmdError::CrossSlot);
            return;
        };
        if self.th.node.remote_endpoint(t).is_some() {
            let reply = self.watch_remote(t, &argv).await;
            if reply == b"+OK\r\n" {
                self.note_watched(&argv);
            }
            self.out.raw(&reply);
            return;
        }
        match self.one(t, Op::Call(spec), &argv).await {
            Ok((reply, _)) => {
                if t != self.th.index && reply == b"+OK\r\n" {
                    self.note_watched(&argv);
                }
                self.out.raw(&reply);
            }
            Err(e) => self.out.error(&hop::unavailable_error(e)),
        }
    }

    /// Keeps the keys of a WATCH another thread or node holds (`watch_shards`, EXEC's plan).
    fn note_watched(&mut self, argv: &[Vec<u8>]) {
        let db = self.client.db;
        for key in argv.iter().skip(1) {
            if !self
                .client
                .watched
                .iter()
                .any(|(d, k)| *d == db && k == key)
            {
                self.client.watched.push((db, key.clone()));
            }
        }
        self.client.shared.watched.set(self.client.watched.len());
    }

    /// WATCH of keys on shard `t` of another node: sent on this client's own link to that
    /// shard's endpoint (opened by the first such WATCH), where the watch lives until EXEC
    /// runs there or the link is dropped. A shared link would mix the watches of every
    /// client on it.
    async fn watch_remote(&mut self, t: u16, argv: &[Vec<u8>]) -> Vec<u8> {
        let err = |e: CmdError| {
            let mut r = Reply::new();
            r.error(&e);
            r.buf
        };
        let (Some(addr), Some(pool)) = (
            self.th.node.remote_endpoint(t).map(str::to_string),
            self.th.proxy.clone(),
        ) else {
            return err(hop::unavailable_error(hop::Unavailable { shard: t }));
        };
        if self.watch_link.is_none() {
            let resp3 = self.client.shared.proto.get() == crate::resp::reply::Proto::Resp3;
            match pool.dedicated(&addr, resp3).await {
                Ok(link) => self.watch_link = Some(WatchLink { shard: t, link }),
                Err(e) => return err(CmdError::Raw(hop::proxy_error_text(&e))),
            }
        }
        let Some(w) = self.watch_link.as_ref() else {
            return Vec::new();
        };
        let mut req = meridian_proxy::Request::new();
        let a: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        req.push(self.client.db, &a);
        match w.link.call(&req, pool.limits().request).await {
            Ok(mut r) => r.pop().unwrap_or_default(),
            Err(e) => {
                // Its watches are gone with it: EXEC must not run on a fresh link.
                self.watch_link = None;
                err(CmdError::Raw(hop::proxy_error_text(&e)))
            }
        }
    }

    /// SCAN with several shards: the cursor's top byte names the shard it walks. A call
    /// walks that shard as SCAN does; when the shard is done and fewer than COUNT keys were
    /// found, it goes on with the next shard in the same call, so a cursor only stops
    /// between shards when a shard has more to give (and "0" means every shard is done).
    async fn scan(&mut self, spec: &'static CommandSpec, mut argv: Vec<Vec<u8>>) {
        let shards = self.th.node.shards;
        let cursor = argv.get(1).and_then(|c| cmd::args::parse_cursor(c));
        let Some(cursor) = cursor else {
            // Not a cursor: the handler says so.
            let (r, _) = self
                .one(self.th.index, Op::Call(spec), &argv)
                .await
                .unwrap_or_default();
            self.out.raw(&r);
            return;
        };
        let count = crate::tx_across::scan_count(&argv);
        let (mut shard, mut inner) = route::scan_split(cursor);
        let mut keys: Vec<Vec<u8>> = Vec::new();
        let mut first = true;
        let next = loop {
            if shard >= shards {
                break 0;
            }
            if let Some(c) = argv.get_mut(1) {
                *c = inner.to_string().into_bytes();
            }
            // The command counts once: the first shard's part is a call.
            let op = if first {
                Op::Call(spec)
            } else {
                Op::Quiet(spec)
            };
            first = false;
            let reply = match self.one(shard, op, &argv).await {
                Ok((r, _)) => r,
                Err(e) => error_bytes(&hop::unavailable_error(e)),
            };
            let Some((next, found)) = route::scan_reply(&reply) else {
                // An error (COUNT 0, an unknown option...): as the shard answered it.
                self.out.raw(&reply);
                return;
            };
            keys.extend(
                found
                    .iter()
                    .filter_map(|&(a, _)| read::bulk(&reply, a).map(<[u8]>::to_vec)),
            );
            let joined = route::scan_next(shard, inner, next, shards);
            if next != 0 || joined == 0 || keys.len() as u64 >= count {
                break joined;
            }
            (shard, inner) = route::scan_split(joined);
        };
        self.out.proto = self.client.shared.proto.get();
        self.out.array(2);
        self.out.bulk(next.to_string().as_bytes());
        self.out.array(keys.len());
        for k in &keys {
            self.out.bulk(k);
        }
    }

    /// RANDOMKEY with several shards: a key of a shard chosen in proportion to its keys.
    async fn randomkey(&mut self, spec: &'static CommandSpec, argv: Vec<Vec<u8>>) {
        use rand::RngExt as _;
        let table = self.th.front.borrow().table;
        let dbsize = cmd::resolve(table, &[b"dbsize"]).ok();
        let mut candidates: Vec<(u64, Vec<u8>)> = Vec::new();
        for shard in 0..self.th.node.shards {
            let size = match dbsize {
                Some(d) => match self.one(shard, Op::Quiet(d), &[b"dbsize".to_vec()]).await {
                    Ok((r, _)) => read::int(&r, 0).unwrap_or(0).max(0) as u64,
                    Err(_) => 0,
                },
                None => 0,
            };
            if size == 0 {
                continue;
            }
            let op = if shard == self.th.index {
                Op::Call(spec)
            } else {
                Op::Quiet(spec)
            };
            if let Ok((r, _)) = self.one(shard, op, &argv).await {
                if read::bulk(&r, 0).is_some() {
                    candidates.push((size, r));
                }
            }
        }
        let total: u64 = candidates.iter().map(|(n, _)| n).sum();
        self.out.proto = self.client.shared.proto.get();
        if total == 0 {
            self.out.null();
            return;
        }
        let mut pick = rand::rng().random_range(0..total);
        for (n, r) in &candidates {
            if pick < *n {
                self.out.raw(r);
                return;
            }
            pick -= n;
        }
        self.out.null();
    }

    /// SYNC / PSYNC on the main port (`Special::Sync`, `cmd::replicas`): for a `REPLCONF
    /// rdb-only 1` client, the RDB file of every shard's part of this process, as Redis's full
    /// resync sends it (`cmd::replicas::sync_head`), and the connection closes once it is
    /// written, as Redis closes an rdb-only replica.
    async fn sync_rdb(&mut self, _spec: &'static CommandSpec, argv: Vec<Vec<u8>>) {
        let borrowed: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let req = self.client.repl;
        self.out.proto = self.client.shared.proto.get();
        // Redis's check: the file must follow the replies already sent, not share a write
        // with them.
        if !self.out.buf.is_empty() {
            self.out.error(&CmdError::Err(
                "SYNC and PSYNC are invalid with pending output".to_string(),
            ));
            return;
        }
        if let Err(e) = cmd::replicas::sync_allowed(&borrowed, req) {
            self.out.error(&e);
            return;
        }
        let now = crate::time::wall_ms();
        let functions_only = req.functions_only;
        let results = hop::run_on_all(&self.th, move |t| {
            cmd::replicas::rdb_part(&mut t.shard.borrow_mut(), functions_only, now)
        })
        .await;
        let mut parts = Vec::with_capacity(results.len());
        for r in results {
            match r {
                Ok(Ok(part)) => parts.push(part),
                Ok(Err(why)) => {
                    self.out.error(&cmd::replicas::sync_failed(why));
                    return;
                }
                Err(e) => {
                    self.out.error(&hop::unavailable_error(e));
                    return;
                }
            }
        }
        let config = self.th.shard.borrow().config.clone();
        match cmd::replicas::write_sync_reply(&mut self.out, parts, &config, &borrowed, now) {
            Ok(()) => self.client.close_after_reply = true,
            Err(e) => self.out.error(&e),
        }
    }

    /// DEBUG DIGEST, DIGEST-VALUE, POPULATE, RELOAD and LOADAOF on the main port of a
    /// process of several shards (`cmd::debug::Place::Every`): every shard's part, as one
    /// server holding all the keys answers. DIGEST joins the shards' parts
    /// (`cmd::debug::digest_join`); DIGEST-VALUE takes each key's from its shard; POPULATE
    /// creates on each shard the keys of its slots; RELOAD and LOADAOF run on every shard.
    async fn debug_across(&mut self, argv: Vec<Vec<u8>>) {
        let borrowed: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        self.out.proto = self.client.shared.proto.get();
        let sub = borrowed.get(1).copied().unwrap_or_default();
        let job = {
            let s = self.th.shard.borrow();
            let ip = self.client.shared.addr.ip();
            cmd::protected_allowed_for(&s.config, ip, "enable-debug-command", "DEBUG").and_then(
                |()| {
                    if sub.eq_ignore_ascii_case(b"populate") {
                        cmd::debug::populate_args(&borrowed, s.config.proto_max_bulk_len)
                            .map(|p| Some(DebugWrite::Populate(std::sync::Arc::new(p))))
                    } else if sub.eq_ignore_ascii_case(b"reload") {
                        cmd::debug::reload_args(&borrowed).and_then(|how| {
                            // NOSAVE: the file is read once here, for every shard.
                            let file = how
                                .nosave
                                .then(|| cmd::debug::read_rdb_file(&s.config))
                                .transpose()?;
                            Ok(Some(DebugWrite::Reload(how, file)))
                        })
                    } else if sub.eq_ignore_ascii_case(b"loadaof") {
                        Ok(Some(DebugWrite::LoadAof))
                    } else {
                        Ok(None)
                    }
                },
            )
        };
        match job {
            Err(e) => self.out.error(&e),
            Ok(Some(write)) => self.debug_writes_across(write).await,
            Ok(None) if cmd::debug::is_digest_value(&borrowed) => {
                self.debug_value_digests_across(argv.get(2..).unwrap_or_default().to_vec())
                    .await
            }
            Ok(None) => {
                let results =
                    hop::run_on_all(&self.th, |t| cmd::debug::digest_parts(&t.shard.borrow()))
                        .await;
                let mut parts = Vec::new();
                for r in results {
                    match r {
                        Ok(part) => parts.extend(part),
                        Err(e) => {
                            self.out.error(&hop::unavailable_error(e));
                            return;
                        }
                    }
                }
                let digest = cmd::debug::digest_join(parts);
                self.out.simple(&cmd::debug::digest_hex(&digest));
            }
        }
    }

    /// DEBUG DIGEST-VALUE of keys of several shards: each key's digest from the shard owning
    /// it (zeros for a key no shard holds).
    async fn debug_value_digests_across(&mut self, keys: Vec<Vec<u8>>) {
        let n = keys.len();
        let db = self.client.db;
        let results = hop::run_on_all(&self.th, move |t| {
            let s = t.shard.borrow();
            let owned: Vec<bool> = keys
                .iter()
                .map(|k| s.owns_slot(crate::slot::slot(k)))
                .collect();
            (owned, cmd::debug::value_digests(&s, db, &keys))
        })
        .await;
        let mut digests = vec![[0u8; 20]; n];
        for r in results {
            match r {
                Ok((owned, values)) => {
                    for ((d, own), v) in digests.iter_mut().zip(owned).zip(values) {
                        if own {
                            *d = v;
                        }
                    }
                }
                Err(e) => {
                    self.out.error(&hop::unavailable_error(e));
                    return;
                }
            }
        }
        self.out.array(digests.len());
        for d in &digests {
            self.out.simple(&cmd::debug::digest_hex(d));
        }
    }

    /// DEBUG POPULATE, RELOAD or LOADAOF on every shard, each writing its log as a batch
    /// does (under `appendfsync always` the reply waits for them: `afters`): OK once all
    /// did, else the first error.
    async fn debug_writes_across(&mut self, write: DebugWrite) {
        let db = self.client.db;
        let now = crate::time::wall_ms();
        // DEBUG RELOAD (not NOSAVE) also writes the RDB file, from every shard's part.
        let rdb = matches!(&write, DebugWrite::Reload(how, _) if !how.nosave);
        let results = hop::run_on_all(&self.th, move |t| {
            let mut shard = t.shard.borrow_mut();
            let pos_before = shard.persist.next_pos;
            let (done, part) = match &write {
                DebugWrite::Populate(p) => (cmd::debug::populate(&mut shard, db, p, now), None),
                DebugWrite::Reload(how, file) => {
                    match cmd::debug::reload(&mut shard, *how, file.as_deref(), now) {
                        Ok(part) => (Ok(()), part),
                        Err(e) => (Err(e), None),
                    }
                }
                DebugWrite::LoadAof => (cmd::debug::loadaof(&mut shard), None),
            };
            (done, part, shard.persist.after_batch(pos_before))
        })
        .await;
        let mut failed = None;
        let mut parts = Vec::new();
        for r in results {
            match r {
                Ok((done, part, after)) => {
                    self.afters.push(after);
                    parts.extend(part);
                    if let Err(e) = done {
                        failed.get_or_insert(e);
                    }
                }
                Err(e) => {
                    failed.get_or_insert(hop::unavailable_error(e));
                }
            }
        }
        if failed.is_none() && rdb {
            let config = self.th.shard.borrow().config.clone();
            if let Err(e) = cmd::debug::write_rdb_file(parts, &config, now) {
                failed = Some(e);
            }
        }
        match failed {
            Some(e) => self.out.error(&e),
            None => self.out.ok(),
        }
    }

    /// SHUTDOWN with several shards, in two steps so that a snapshot that fails leaves every
    /// shard serving as before (Redis's "Errors trying to SHUTDOWN"): every shard writes its
    /// snapshot (when asked), this thread's too; once all did, the other shards close their
    /// logs, and this thread's handler closes its own and ends the process.
    async fn shutdown(&mut self, spec: &'static CommandSpec, argv: Vec<Vec<u8>>) {
        let borrowed: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
        let plan = match cmd::server::shutdown_plan(&borrowed) {
            Ok(p) => p,
            Err(_) => {
                // The handler answers the error.
                let (r, _) = self
                    .one(self.th.index, Op::Call(spec), &argv)
                    .await
                    .unwrap_or_default();
                self.out.raw(&r);
                return;
            }
        };
        let me = self.th.index;
        let results = hop::run_on_all(&self.th, move |t| {
            cmd::server::shutdown_save(&mut t.shard.borrow_mut(), plan)
        })
        .await;
        let failed = results.iter().any(|r| !matches!(r, Ok(Ok(()))));
        if failed && !plan.force {
            self.out.proto = self.client.shared.proto.get();
            self.out.error(&CmdError::Err(
                "Errors trying to SHUTDOWN. Check logs.".to_string(),
            ));
            return;
        }
        let _ = hop::run_on_all(&self.th, move |t| {
            if t.index != me {
                cmd::server::shutdown_close(&mut t.shard.borrow_mut());
            }
            Ok::<(), CmdError>(())
        })
        .await;
        // Every snapshot is written: the handler only closes this shard's log and exits.
        let argv = vec![b"SHUTDOWN".to_vec(), b"NOSAVE".to_vec()];
        let (r, _) = self
            .one(self.th.index, Op::Call(spec), &argv)
            .await
            .unwrap_or_default();
        self.out.raw(&r);
    }

    /// CRDT.WAIT with several shards: waits until `numsites` other sites acked this
    /// connection's last write on every shard it wrote to (or the timeout).
    async fn crdt_wait(
        &mut self,
        spec: &'static CommandSpec,
        argv: Vec<Vec<u8>>,
        stream: &ClientStream,
        rbuf: &mut BytesMut,
        pos: usize,
    ) -> bool {
        let _ = pos;
        let parsed = cmd::crdt::wait_args(&argv.iter().map(Vec::as_slice).collect::<Vec<_>>());
        let (numsites, timeout_ms) = match parsed {
            Ok(p) => p,
            Err(e) => {
                let mut f = self.th.front.borrow_mut();
                self.out.proto = self.client.shared.proto.get();
                cmd::reply_error(&mut f, &mut self.out, &e);
                return true;
            }
        };
        let started = std::time::Instant::now();
        {
            let mut f = self.th.front.borrow_mut();
            f.stats.total_commands_processed += 1;
            if let Some(st) = f.stats.commands.get_mut(spec.idx) {
                st.calls += 1;
            }
        }
        let targets: Vec<(u16, u64)> = if self.client.shard_writes.is_empty() {
            vec![(self.th.index, 0)]
        } else {
            self.client.shard_writes.clone()
        };
        let deadline = (timeout_ms > 0).then(|| started + Duration::from_millis(timeout_ms));
        let id = self.client.id();
        let mailbox = self.client.shared.mailbox.clone();
        let acked = loop {
            let mut sites: Option<Vec<String>> = None;
            for &(shard, target) in &targets {
                let mb = mailbox.clone();
                let got = hop::run_on(&self.th, shard, move |t| {
                    let mut s = t.shard.borrow_mut();
                    // Registered before looking: an ack after the look still wakes us.
                    s.blocking.register(
                        id,
                        mb,
                        crate::sync::WAIT_DB,
                        &[crate::sync::WAIT_KEY],
                        crate::time::wall_ns(),
                    );
                    s.sites_acked(target)
                })
                .await
                .unwrap_or_default();
                sites = Some(match sites {
                    None => got,
                    Some(prev) => prev.into_iter().filter(|x| got.contains(x)).collect(),
                });
            }
            let n = sites.map_or(0, |v| v.len()) as i64;
            if n >= numsites || deadline.is_some_and(|d| std::time::Instant::now() >= d) {
                break n;
            }
            let sleep_for =
                deadline.map(|d| d.saturating_duration_since(std::time::Instant::now()));
            if !self.wait_wake(stream, rbuf, sleep_for).await {
                self.forget_wait(&targets).await;
                return false;
            }
        };
        self.forget_wait(&targets).await;
        self.out.proto = self.client.shared.proto.get();
        self.out.int(acked);
        true
    }

    async fn forget_wait(&mut self, targets: &[(u16, u64)]) {
        let id = self.client.id();
        for &(shard, _) in targets {
            let _ = hop::run_on(&self.th, shard, move |t| {
                t.shard.borrow_mut().blocking.unregister(id);
            })
            .await;
        }
    }

    /// One wait step of a blocked client. Returns None when the connection must close,
    /// else whether the client is no longer blocked (the read buffer may hold commands).
    async fn blocked_step(&mut self, stream: &ClientStream, rbuf: &mut BytesMut) -> Option<bool> {
        let deadline = self.client.blocked.as_ref().and_then(|b| b.deadline_ms);
        let shard = self
            .client
            .blocked
            .as_ref()
            .map_or(self.th.index, |b| b.shard);
        // Blocked (BLPOP...): run nothing more until a key is written, the deadline
        // passes, or the client goes; keep reading so a close is seen.
        let sleep_for = deadline
            .map(|d| Duration::from_millis(d.saturating_sub(self.th.shard.borrow().now_ms())));
        let timer = async {
            match sleep_for {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending::<()>().await,
            }
        };
        let mailbox = self.client.shared.mailbox.clone();
        // Biased: a close seen at the same time as a wake wins, so a client that is gone
        // consumes nothing.
        let event = tokio::select! {
            biased;
            r = read_some(stream, rbuf, READ_CHUNK_BYTES_MIN, &self.client.shared.read_ns) => match r {
                Ok(0) | Err(_) => return None,
                Ok(n) => BlockedEvent::Input(n),
            },
            () = mailbox.wake.notified() => BlockedEvent::Wake,
            () = timer => BlockedEvent::Timeout,
        };
        if self.is_killed() {
            return None;
        }
        let pos_before = self.th.shard.borrow().persist.next_pos;
        // Served by the shard of its keys (`blocking::serve_ready`): the reply is in the push
        // output (the flag first: whoever sees it finds the reply there).
        let served = mailbox.take_served();
        let pushed = mailbox.take();
        self.out.raw(&pushed);
        let now = self.th.shard.borrow().now_ms();
        if served {
            self.end_served(shard, &mailbox);
        }
        match event {
            BlockedEvent::Input(n) => {
                self.th.front.borrow_mut().stats.net_input_bytes += n as u64;
                self.client.shared.qbuf_bytes.set(rbuf.len());
            }
            _ if served => {}
            BlockedEvent::Wake | BlockedEvent::Timeout
                if self.client.blocked.as_ref().is_some_and(|b| b.postponed) =>
            {
                let due =
                    matches!(event, BlockedEvent::Timeout) && deadline.is_some_and(|d| now >= d);
                let woken = matches!(event, BlockedEvent::Wake)
                    && self.th.shard.borrow().blocking.is_ready(self.client.id());
                if due || woken {
                    self.requeue_postponed(rbuf);
                }
            }
            BlockedEvent::Wake | BlockedEvent::Timeout => {
                // CLIENT UNBLOCK is not the connection's: the shard where the client is
                // parked ends the wait, as a serve (`blocking::unblock_parked`).
                let how = match event {
                    BlockedEvent::Timeout if deadline.is_some_and(|d| now >= d) => {
                        blocking::Settle::TimeOut
                    }
                    _ => blocking::Settle::Serve,
                };
                self.settle(shard, how, now).await;
            }
        }
        let unblocked = self.client.blocked.is_none();
        if unblocked {
            self.client.shared.last_interaction_ms.set(now);
        }
        let after = self.th.shard.borrow_mut().persist.after_batch(pos_before);
        self.afters.push(after);
        if !self.flush(stream).await {
            return None;
        }
        let query_limit = self.th.shard.borrow().config.client_query_buffer_limit as usize;
        if rbuf.len() > query_limit {
            tracing::warn!(client = %self.client.shared.addr, bytes = rbuf.len(), "closing client that reached max query buffer length");
            return None;
        }
        Some(unblocked)
    }

    /// The blocked command was answered: the connection runs commands again.
    fn end_wait(&mut self) {
        self.client.blocked = None;
        self.client.shared.blocked.set(false);
        // The commands pipelined behind it run now, as Redis runs them when it unblocks
        // the client: a later one that blocks queues behind those that blocked meanwhile.
        self.client.shared.read_ns.set(crate::time::wall_ns());
    }

    /// The shard `shard` served the blocked command: its write counts as this connection's
    /// (WAIT after it), and the wait is over.
    fn end_served(&mut self, shard: u16, mailbox: &crate::client::Mailbox) {
        let seq = mailbox.served_seq();
        if seq > 0 {
            self.client.note_write(shard, seq);
            if shard == self.th.index {
                self.client.last_write_seq = self.client.last_write_seq.max(seq);
            }
        }
        self.end_wait();
    }

    /// Asks the shard owning the blocked client's keys to serve it, or to end its wait as
    /// `how` says (`blocking::settle`); writes the reply and ends the wait when it is over.
    async fn settle(&mut self, shard: u16, how: blocking::Settle, now: u64) {
        self.out.proto = self.client.shared.proto.get();
        let waits = if shard == self.th.index {
            let th = self.th.clone();
            let mut sg = th.shard.borrow_mut();
            let mut fg = th.front.borrow_mut();
            let (reply, waits) = blocking::settle(&mut sg, &mut fg, self.client.id(), how, now);
            self.out.raw(&reply);
            waits
        } else {
            let state = Box::new(self.client.blocked.clone().unwrap_or_default());
            let op = match how {
                blocking::Settle::Serve => Op::Rerun(state),
                blocking::Settle::TimeOut => Op::TimeOut(state),
            };
            match self.one(shard, op, &[]).await {
                Ok((reply, note)) => {
                    self.out.raw(&reply);
                    note.is_some_and(|n| n.blocked.is_some())
                }
                Err(e) => {
                    self.out.error(&hop::unavailable_error(e));
                    false
                }
            }
        };
        // Served there meanwhile: its reply is in the mailbox.
        let mailbox = self.client.shared.mailbox.clone();
        if mailbox.take_served() {
            let pushed = mailbox.take();
            self.out.raw(&pushed);
            self.end_served(shard, &mailbox);
        } else if !waits {
            self.end_wait();
        }
    }

    /// CLIENT PAUSE ended for a postponed command: it goes back in front of the read buffer
    /// (the parser stands at a command boundary: the command was the last one parsed), to
    /// be dispatched again from the start, wherever its keys are.
    fn requeue_postponed(&mut self, rbuf: &mut BytesMut) {
        let Some(b) = self.client.blocked.take() else {
            return;
        };
        self.client.shared.blocked.set(false);
        self.th
            .shard
            .borrow_mut()
            .blocking
            .unregister(self.client.id());
        let mut again = Vec::with_capacity(16 + b.argv.iter().map(|a| a.len() + 16).sum::<usize>());
        again.extend_from_slice(format!("*{}\r\n", b.argv.len()).as_bytes());
        for a in &b.argv {
            again.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
            again.extend_from_slice(a);
            again.extend_from_slice(b"\r\n");
        }
        again.extend_from_slice(rbuf);
        rbuf.clear();
        rbuf.extend_from_slice(&again);
    }

    /// The client is gone: forget it here and on every shard it left state on.
    async fn leave(&mut self) {
        let id = self.client.id();
        let remote: Vec<u16> = {
            let th = self.th.clone();
            let mut sg = th.shard.borrow_mut();
            let mut fg = th.front.borrow_mut();
            fg.unregister_client(id);
            blocking::forget(&mut sg, &mut fg, id);
            sg.forget_client(id, &self.client.dirty);
            let mut v = self.watch_shards(&fg);
            if let Some(b) = &self.client.blocked {
                v.push(b.shard);
            }
            v.sort_unstable();
            v.dedup();
            v.into_iter().filter(|&t| t != self.th.index).collect()
        };
        for t in remote {
            let _ = self.one(t, Op::Forget, &[]).await;
        }
    }
}

/// The queued commands of a transaction, each as the argument slices the checks read.
fn queued_argvs(m: &MultiState) -> Vec<Vec<&[u8]>> {
    m.queued
        .iter()
        .map(|q| q.args.iter().map(Vec::as_slice).collect())
        .collect()
}

/// Redis Cluster's redirection of a command (or of every command of a transaction) that came
/// in on shard `me`'s endpoint (`getNodeByQuery`): None when its keys are all in one slot of
/// this shard (or it has none), else CROSSSLOT or MOVED.
fn cluster_redirect<'a>(
    f: &Front,
    me: u16,
    commands: impl Iterator<Item = &'a [&'a [u8]]>,
) -> Option<CmdError> {
    let cluster = f.node.cluster.as_ref()?;
    let mut first: Option<u16> = None;
    for argv in commands {
        let Ok(spec) = cmd::resolve(f.table, argv) else {
            continue;
        };
        // Shard channels are routed by slot in Redis Cluster.
        let positions: SmallVec<[usize; 8]> = match spec.meta.name {
            "spublish" => SmallVec::from_slice(&[1]),
            "ssubscribe" | "sunsubscribe" => (1..argv.len()).collect(),
            _ => route::positions(f.table, spec, argv)?,
        };
        for p in positions {
            let Some(key) = argv.get(p) else { continue };
            let slot = crate::slot::slot(key);
            match first {
                None => first = Some(slot),
                Some(s) if s != slot => return Some(CmdError::CrossSlot),
                Some(_) => {}
            }
        }
    }
    let slot = first?;
    let owner = f.node.slots.shard_of_slot(slot);
    (owner != me).then(|| CmdError::Raw(cluster.moved(slot, owner)))
}

/// Longest a blocking command forwarded to another node waits for its reply (a day: the
/// link ends sooner when that node goes).
pub const REMOTE_BLOCK_WAIT_MAX: Duration = Duration::from_secs(24 * 3600);

/// Commands run on every shard that cover the whole site (a node's main port answers for
/// the site); the others are each node's own.
fn site_wide(name: &str) -> bool {
    matches!(
        name,
        "dbsize"
            | "keys"
            | "flushdb"
            | "flushall"
            | "lastsave"
            | "crdt.digest"
            | "script|load"
            | "script|flush"
            | "function|load"
            | "function|delete"
            | "function|flush"
            | "function|restore"
    )
}

/// The first command of a link from another node of the site:
/// `MERIDIAN.LINK <deployment> <site> <topology epoch> <node name>`.
pub const LINK_HANDSHAKE: &[u8] = b"MERIDIAN.LINK";

/// Why this endpoint refuses a link handshake (None: it accepts it). Each reason names both
/// sides' values.
fn link_refusal(s: &Shard, f: &Front, argv: &[&[u8]]) -> Option<String> {
    let text =
        |i: usize| String::from_utf8_lossy(argv.get(i).copied().unwrap_or_default()).to_string();
    if argv.len() != 5 {
        return Some(format!(
            "ERR {} needs deployment, site, epoch and node name",
            String::from_utf8_lossy(LINK_HANDSHAKE)
        ));
    }
    let Some(site) = &f.node.site else {
        return Some("ERR this node is not part of a multi-node site (no --topology)".to_string());
    };
    if text(1) != s.config.deployment_id {
        return Some(format!(
            "ERR deployment {:?} is not this node's {:?}",
            text(1),
            s.config.deployment_id
        ));
    }
    if text(2) != s.config.site {
        return Some(format!(
            "ERR site {:?} is not this node's site {:?}",
            text(2),
            s.config.site
        ));
    }
    let epoch = text(3);
    if epoch != site.topology.epoch.to_string() {
        return Some(format!(
            "ERR topology epoch mismatch: node {:?} has epoch {epoch}, this node ({:?}) has epoch {}",
            text(4),
            site.this().map_or("", |n| n.name.as_str()),
            site.topology.epoch
        ));
    }
    if site.topology.node_index(&text(4)).is_err() {
        return Some(format!(
            "ERR node {:?} is not in this node's topology (epoch {})",
            text(4),
            site.topology.epoch
        ));
    }
    None
}

/// On a link from another node: the first slot of the commands' keys that shard `me` does
/// not own (the keys of one forwarded command may be in several of its slots).
fn not_owned<'a>(
    f: &Front,
    me: u16,
    commands: impl Iterator<Item = &'a [&'a [u8]]>,
) -> Option<u16> {
    for argv in commands {
        let Ok(spec) = cmd::resolve(f.table, argv) else {
            continue;
        };
        let Some(positions) = route::positions(f.table, spec, argv) else {
            continue;
        };
        for p in positions {
            let Some(key) = argv.get(p) else { continue };
            let slot = crate::slot::slot(key);
            if f.node.slots.shard_of_slot(slot) != me {
                return Some(slot);
            }
        }
    }
    None
}

/// Whether the command's arguments name keys (fixed positions, or found in its arguments as
/// EVAL's `numkeys` says): such a command never acts on the connection itself.
fn takes_keys(meta: &cmd::table::CommandMeta) -> bool {
    meta.first_key != 0 || meta.flags.contains(cmd::table::Flags::MOVABLE_KEYS)
}

/// A DEBUG subcommand that writes on every shard (`Conn::debug_writes_across`).
#[derive(Clone)]
enum DebugWrite {
    Populate(std::sync::Arc<cmd::debug::Populate>),
    /// With NOSAVE, the RDB file (read once for every shard).
    Reload(cmd::debug::Reload, Option<std::sync::Arc<[u8]>>),
    LoadAof,
}

/// Local commands that act on the connection itself: inside a transaction they pin it to
/// the connection's shard.
fn pins_to_connection(name: &str) -> bool {
    !matches!(
        name,
        "ping"
            | "echo"
            | "time"
            | "select"
            | "publish"
            | "spublish"
            | "config|get"
            | "command"
            | "command|count"
            | "command|docs"
            | "command|getkeys"
            | "command|getkeysandflags"
            | "command|help"
            | "command|info"
            | "command|list"
            | "object|help"
            | "pubsub|channels"
            | "pubsub|numsub"
            | "pubsub|numpat"
            | "pubsub|shardchannels"
            | "pubsub|shardnumsub"
            | "pubsub|help"
    )
}

fn owned(argv: &[&[u8]]) -> Vec<Vec<u8>> {
    argv.iter().map(|a| a.to_vec()).collect()
}

fn error_bytes(e: &CmdError) -> Vec<u8> {
    let mut r = Reply::new();
    r.error(e);
    r.buf
}

/// Redis's `flagTransaction`: a command refused inside MULTI makes its EXEC fail.
fn flag_transaction(client: &mut Client) {
    if let Some(m) = client.multi.as_mut() {
        m.aborted = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_buffer_shrinks_to_its_target_but_keeps_what_it_holds() {
        let mut b = BytesMut::with_capacity(400_000);
        b.extend_from_slice(b"*1\r\n$4\r\nPI");
        resize_read_buf(&mut b, 0);
        assert_eq!(&b[..], b"*1\r\n$4\r\nPI");
        assert!(b.capacity() < 400_000);
        let mut b = BytesMut::with_capacity(400_000);
        resize_read_buf(&mut b, 0);
        assert_eq!(b.capacity(), 0);
        let mut b = BytesMut::with_capacity(1000);
        resize_read_buf(&mut b, 5000);
        assert_eq!(b.capacity(), 1000, "never grown");
    }

    #[test]
    fn consumed_commands_give_their_room_back_to_the_capacity() {
        // A buffer grown past a large request: what the request used stays allocated.
        let mut b = BytesMut::with_capacity(1 << 20);
        b.extend_from_slice(&vec![b'x'; 1_000_000]);
        consume_read(&mut b, 1_000_000);
        assert!(b.is_empty());
        assert_eq!(b.capacity(), 1 << 20, "the whole allocation, not its tail");
        // A partial command left after the cut moves to the front.
        let mut b = BytesMut::with_capacity(1 << 20);
        b.extend_from_slice(&vec![b'x'; 1_000_000]);
        b.extend_from_slice(b"*1\r\n$4\r\nPI");
        consume_read(&mut b, 1_000_000);
        assert_eq!(&b[..], b"*1\r\n$4\r\nPI");
        assert_eq!(b.capacity(), 1 << 20);
        // More left than was cut stays where it is (the copy would cost more than the room).
        let mut b = BytesMut::with_capacity(1000);
        b.extend_from_slice(&[b'y'; 900]);
        consume_read(&mut b, 100);
        assert_eq!(b.len(), 800);
        assert_eq!(b.capacity(), 900);
        // Nothing cut: nothing moves, nothing is allocated.
        let mut b = BytesMut::with_capacity(1000);
        b.extend_from_slice(&[b'z'; 10]);
        consume_read(&mut b, 0);
        assert_eq!(b.capacity(), 1000);
    }

    fn command(args: &[&str]) -> Vec<u8> {
        let mut b = format!("*{}\r\n", args.len()).into_bytes();
        for a in args {
            b.extend_from_slice(format!("${}\r\n{a}\r\n", a.len()).as_bytes());
        }
        b
    }

    /// The look-ahead takes the keys of the first `LOOKAHEAD_COMMANDS_MAX` commands and not
    /// one more, skips commands whose first argument is no key and keys another shard owns,
    /// and takes nothing from a lone command or from what is not a whole command.
    #[test]
    fn lookahead_keys_at_the_limit_and_one_past_it() {
        let table = cmd::table();
        let all = |_: &[u8]| true;
        let pipeline = |n: usize| {
            let mut b = Vec::new();
            for i in 0..n {
                b.extend(command(&["GET", &format!("k{i}")]));
            }
            b
        };
        let at = pipeline(LOOKAHEAD_COMMANDS_MAX);
        let keys = lookahead_keys(&at, table, all);
        assert_eq!(keys.len(), LOOKAHEAD_COMMANDS_MAX);
        let past = pipeline(LOOKAHEAD_COMMANDS_MAX + 1);
        let keys = lookahead_keys(&past, table, all);
        assert_eq!(keys.len(), LOOKAHEAD_COMMANDS_MAX);
        assert_eq!(keys.last().copied(), Some(&b"k15"[..]));
        // A lone command and inline commands: nothing. Of a pipeline whose rest is still on
        // its way, the whole commands.
        assert!(lookahead_keys(&pipeline(1), table, all).is_empty());
        assert!(lookahead_keys(b"GET a\r\nGET b\r\n", table, all).is_empty());
        let mut cut = pipeline(2);
        cut.pop();
        assert_eq!(&lookahead_keys(&cut, table, all)[..], &[&b"k0"[..]]);
        // Skipped: a container (CLIENT), a command whose first argument is no key (EVAL's
        // script), an unknown command, and a key `mine` refuses.
        let mut mixed = Vec::new();
        for c in [
            &["CLIENT", "ID"][..],
            &["EVAL", "return 1", "0"],
            &["NOSUCH", "x"],
            &["SET", "theirs", "v"],
            &["SET", "mine", "v"],
        ] {
            mixed.extend(command(c));
        }
        let keys = lookahead_keys(&mixed, table, |k: &[u8]| k != b"theirs");
        assert_eq!(&keys[..], &[&b"mine"[..]]);
    }
}

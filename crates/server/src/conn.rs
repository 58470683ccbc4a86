//! One client connection: read, parse, execute, write replies in batches.
//!
//! Each read may hold many pipelined commands; all complete ones run in order and their
//! replies go out in one write. The parser resumes across reads, so a large argument arriving
//! in pieces is scanned once. A protocol error is answered with Redis's text, then the
//! connection closes, as Redis does.
//!
//! A command that blocks (`Ctx::block`, see `crate::blocking`) stops the batch: its arguments
//! are kept and the connection waits for a write to one of its keys (then re-runs it), its
//! deadline, or the client's end; the pipelined commands after it run once it is answered.
//! Output other connections queue (`ClientShared::push_out`: MONITOR, Pub/Sub) is written when
//! the task is woken, and before the replies of the next batch.

use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf as _, BytesMut};
use smallvec::SmallVec;
use tokio::io::AsyncWriteExt as _;
use tokio::net::TcpStream;

use crate::blocking;
use crate::client::{Client, ClientShared};
use crate::cmd;
use crate::config::OutputLimit;
use crate::resp::parse::{ParseLimits, Parsed, Parser};
use crate::resp::reply::Reply;
use crate::shard::Shard;

/// Initial read buffer per connection; it grows for large arguments.
pub const READ_BUF_BYTES_INITIAL: usize = 16 * 1024;
/// Reads are at least this large, so a pipeline is taken in few system calls.
pub const READ_CHUNK_BYTES_MIN: usize = 16 * 1024;
/// Output kept allocated between batches; a larger buffer is released after use.
pub const REPLY_BUF_BYTES_KEPT: usize = 64 * 1024;

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
async fn replies_may_go(after: crate::persist::AfterBatch) -> bool {
    use crate::persist::AfterBatch;
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

/// Writes `buf` to the client, marking it as writing meanwhile (the busy-script side path
/// must not put its replies in the middle of these). Gives up (false) when the connection
/// fails, when the client is killed meanwhile (CLIENT KILL, `timeout`, shutdown), or when the
/// output still pending breaks its class's limit (`ClientShared::output_over_limit`: the hard
/// bound at once, the soft one after its seconds): a client that never reads holds at most
/// one batch of replies, and not for longer than its class allows.
async fn write_out(
    stream: &TcpStream,
    buf: &[u8],
    shared: &ClientShared,
    limit: OutputLimit,
) -> bool {
    shared.writing.set(true);
    let mut written = 0usize;
    let mut woken = false;
    let ok = loop {
        let Some(rest) = buf.get(written..).filter(|r| !r.is_empty()) else {
            break true;
        };
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
        tokio::select! {
            biased;
            r = stream.writable() => if r.is_err() {
                break false;
            },
            () = shared.wake.notified() => {
                if shared.killed.get() {
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
        shared.wake.notify_one();
    }
    ok
}

/// How often a write that does not progress re-checks the output limits.
pub const OUTPUT_CHECK_PERIOD: Duration = Duration::from_millis(250);

/// Reads what the socket holds (at least one byte, or 0 at the end of the stream). Cancel-safe.
async fn read_some(stream: &TcpStream, buf: &mut BytesMut) -> std::io::Result<usize> {
    loop {
        stream.readable().await?;
        match stream.try_read_buf(buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            r => return r,
        }
    }
}

/// Writes all of `bytes`, marking the client as writing meanwhile (the busy-script side path
/// must not put its replies in the middle of these).
async fn write_all(
    stream: &TcpStream,
    shared: &crate::client::ClientShared,
    mut bytes: &[u8],
) -> std::io::Result<()> {
    shared.writing.set(true);
    let r = async {
        while !bytes.is_empty() {
            match stream.try_write(bytes) {
                Ok(n) => bytes = bytes.get(n..).unwrap_or_default(),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    stream.writable().await?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
    .await;
    shared.writing.set(false);
    r
}

/// Redis's reply to a connection past `maxclients`.
pub const MAXCLIENTS_REACHED: &[u8] = b"-ERR max number of clients reached\r\n";

/// Redis's protected-mode refusal, sent to clients from other addresses than 127.0.0.1 and
/// ::1 while `protected-mode` is on and the default user has no password.
pub const PROTECTED_MODE_DENIED: &[u8] = b"-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// Redis's `islocalClient`: exactly 127.0.0.1 or ::1 (an IPv4-mapped 127.0.0.1 too).
fn is_local(ip: std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => v4 == std::net::Ipv4Addr::LOCALHOST,
        std::net::IpAddr::V6(v6) => {
            v6 == std::net::Ipv6Addr::LOCALHOST
                || v6.to_ipv4_mapped() == Some(std::net::Ipv4Addr::LOCALHOST)
        }
    }
}

/// Whether a new connection from `addr` is refused, and with which error (Redis's
/// `acceptCommonHandler` order: maxclients, then protected mode). `already` counts
/// connections accepted but not registered yet (the busy-script side path's). A refusal is
/// counted in `rejected_connections`.
pub fn refusal(
    shard: &mut Shard,
    addr: std::net::SocketAddr,
    already: usize,
) -> Option<&'static [u8]> {
    let refused = if shard.clients.len() + already >= shard.config.maxclients as usize {
        Some(MAXCLIENTS_REACHED)
    } else if shard.config.protected_mode
        && shard.acl.default_user().get().nopass()
        && !is_local(addr.ip())
    {
        Some(PROTECTED_MODE_DENIED)
    } else {
        None
    };
    if refused.is_some() {
        shard.stats.rejected_connections += 1;
    }
    refused
}

/// A connection registered in the shard's client registry, its task not started yet.
pub struct Admitted {
    stream: Rc<TcpStream>,
    shared: Rc<crate::client::ClientShared>,
    limits: ParseLimits,
    /// The error a refused connection gets before it closes (`refusal`).
    refused: Option<&'static [u8]>,
    /// Bytes the client sent before it was admitted (accepted while the shard loaded,
    /// `crate::loading`): parsed first, under the same limits (an unauthenticated client's
    /// included).
    input: BytesMut,
}

/// Registers an accepted connection at once, before its task first runs: a script that
/// starts running long in the meantime answers it from the side path (`script::busy`),
/// which finds clients in the registry. `None` when the socket has no addresses (closed).
/// The client starts authenticated only when the default user needs no password; until
/// then its parser applies Redis's unauthenticated limits.
pub fn admit(shard: &mut Shard, stream: TcpStream, input: BytesMut) -> Option<Admitted> {
    let (addr, laddr) = match (stream.peer_addr(), stream.local_addr()) {
        (Ok(a), Ok(l)) => (a, l),
        _ => return None,
    };
    let _ = stream.set_nodelay(true);
    let now = shard.now_ms();
    let open = shard.acl.default_is_open();
    let limits = ParseLimits {
        bulk_bytes_max: shard.config.proto_max_bulk_len as i64,
        authenticated: open,
    };
    let refused = refusal(shard, addr, 0);
    let shared = shard.register_client(addr, laddr, now);
    shared.authenticated.set(open);
    let stream = Rc::new(stream);
    // Shared (weakly) with the client registry, for that side path; a refused connection
    // is never served by it.
    if refused.is_none() {
        shared.socket.replace(Rc::downgrade(&stream));
    }
    Some(Admitted {
        stream,
        shared,
        limits,
        refused,
        input,
    })
}

/// Serves one accepted connection until it closes, is killed, or the server stops.
pub async fn serve(shard: Rc<RefCell<Shard>>, stream: TcpStream) {
    serve_with_input(shard, stream, BytesMut::new()).await;
}

/// `serve` for a connection that already sent `input` (accepted while the shard loaded,
/// `crate::loading`): those bytes are parsed first.
pub async fn serve_with_input(shard: Rc<RefCell<Shard>>, stream: TcpStream, input: BytesMut) {
    let admitted = admit(&mut shard.borrow_mut(), stream, input);
    if let Some(a) = admitted {
        serve_admitted(shard, a).await;
    }
}

/// Serves a connection `admit` registered.
pub async fn serve_admitted(shard: Rc<RefCell<Shard>>, admitted: Admitted) {
    let Admitted {
        stream,
        shared,
        limits,
        refused,
        input,
    } = admitted;
    let addr = shared.addr;
    let mut client = Client::new(shared.clone());
    if let Some(text) = refused {
        let _ = write_all(&stream, &shared, text).await;
        shard
            .borrow_mut()
            .unregister_client(client.id(), &client.dirty);
        return;
    }
    let mut parser = Parser::new(limits);
    let mut rbuf = input;
    rbuf.reserve(READ_BUF_BYTES_INITIAL);
    let mut out = Reply::new();
    // The read buffer may hold complete commands not run yet (a blocking command ended, or
    // the connection was handed over after loading).
    let mut buffered = !rbuf.is_empty();
    'conn: loop {
        if shared.killed.get() {
            break;
        }
        if let Some(deadline) = client.blocked.as_ref().map(|b| b.deadline_ms) {
            // Blocked (BLPOP...): run nothing more until a key is written, the deadline
            // passes, or the client goes; keep reading so a close is seen.
            let sleep_for =
                deadline.map(|d| Duration::from_millis(d.saturating_sub(shard.borrow().now_ms())));
            let timer = async {
                match sleep_for {
                    Some(d) => tokio::time::sleep(d).await,
                    None => std::future::pending::<()>().await,
                }
            };
            rbuf.reserve(READ_CHUNK_BYTES_MIN);
            // Biased: a close seen at the same time as a wake wins, so a client that is gone
            // consumes nothing.
            let event = tokio::select! {
                biased;
                r = read_some(&stream, &mut rbuf) => match r {
                    Ok(0) | Err(_) => break 'conn,
                    Ok(n) => BlockedEvent::Input(n),
                },
                () = shared.wake.notified() => BlockedEvent::Wake,
                () = timer => BlockedEvent::Timeout,
            };
            if shared.killed.get() {
                break;
            }
            let query_limit;
            let out_limit;
            let after;
            {
                let mut guard = shard.borrow_mut();
                let s = &mut *guard;
                let pos_before = s.persist.next_pos;
                query_limit = s.config.client_query_buffer_limit as usize;
                out_limit = shared.output_limit(&s.config.client_output_buffer_limit);
                let pushed = std::mem::take(&mut *shared.push_out.borrow_mut());
                out.raw(&pushed);
                let now = s.now_ms();
                match event {
                    BlockedEvent::Input(n) => {
                        s.stats.net_input_bytes += n as u64;
                        shared.qbuf_bytes.set(rbuf.len());
                    }
                    BlockedEvent::Wake => {
                        if let Some(how) = shared.unblock.take() {
                            blocking::unblock_by_request(s, &mut client, &mut out, how);
                        } else if s.blocking.is_ready(client.id()) {
                            blocking::reprocess(s, &mut client, &mut out, now);
                        }
                    }
                    BlockedEvent::Timeout => {
                        if deadline.is_some_and(|d| now >= d) {
                            blocking::time_out(s, &mut client, &mut out);
                        }
                    }
                }
                if client.blocked.is_none() {
                    shared.last_interaction_ms.set(now);
                    buffered = true;
                }
                s.stats.net_output_bytes += out.len() as u64;
                after = s.persist.after_batch(pos_before);
            }
            if !replies_may_go(after).await {
                break 'conn;
            }
            if !out.is_empty() {
                if !write_out(&stream, &out.buf, &shared, out_limit).await {
                    break;
                }
                out.clear();
            }
            if rbuf.len() > query_limit {
                tracing::warn!(client = %addr, bytes = rbuf.len(), "closing client that reached max query buffer length");
                break;
            }
            continue 'conn;
        }
        if !buffered {
            let want = parser
                .bytes_hint()
                .unwrap_or(0)
                .saturating_sub(rbuf.len())
                .max(READ_CHUNK_BYTES_MIN);
            rbuf.reserve(want);
            let n = tokio::select! {
                r = read_some(&stream, &mut rbuf) => r,
                () = shared.wake.notified() => {
                    // MONITOR lines and Pub/Sub messages from other connections.
                    let pending = std::mem::take(&mut *shared.push_out.borrow_mut());
                    let limit = shared
                        .output_limit(&shard.borrow().config.client_output_buffer_limit);
                    if !pending.is_empty() && !write_out(&stream, &pending, &shared, limit).await {
                        break 'conn;
                    }
                    continue 'conn;
                }
            };
            let n = match n {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            shard.borrow_mut().stats.net_input_bytes += n as u64;
        }
        buffered = false;
        let query_limit;
        let out_limit;
        let after;
        {
            let mut guard = shard.borrow_mut();
            let s = &mut *guard;
            let pos_before = s.persist.next_pos;
            query_limit = s.config.client_query_buffer_limit as usize;
            out_limit = shared.output_limit(&s.config.client_output_buffer_limit);
            // CONFIG SET proto-max-bulk-len applies to commands parsed from now on, and so
            // does authentication (AUTH in this batch lifts the limits for what follows).
            let bulk_bytes_max = s.config.proto_max_bulk_len as i64;
            parser.set_limits(ParseLimits {
                bulk_bytes_max,
                authenticated: !crate::cmd::acl::auth_required(s, &client),
            });
            let now = s.now_ms();
            shared.last_interaction_ms.set(now);
            // Pushes queued before this batch go out before its replies.
            let pushed = std::mem::take(&mut *shared.push_out.borrow_mut());
            out.raw(&pushed);
            let mut pos = 0usize;
            loop {
                let buf = rbuf.get(pos..).unwrap_or_default();
                match parser.next(buf) {
                    Parsed::Command { consumed } => {
                        let mut argv: SmallVec<[&[u8]; 8]> = SmallVec::new();
                        parser.args(buf, &mut argv);
                        cmd::execute(s, &mut client, &mut out, &argv, now);
                        pos += consumed;
                        if let Some(b) = client.blocked.as_mut() {
                            // The command blocked: keep it to re-run; later commands wait.
                            b.argv = argv.iter().map(|a| a.to_vec()).collect();
                            break;
                        }
                        // A stop request ends the batch: the rest of a pipeline of long
                        // commands would otherwise delay the shard's stop.
                        // So does output at the hard limit: the rest would only grow it.
                        if client.close_after_reply
                            || shared.killed.get()
                            || crate::stop::requested()
                            || (out_limit.hard_bytes > 0
                                && out.len() as u64 >= out_limit.hard_bytes)
                        {
                            break;
                        }
                        drop(argv);
                        parser.set_limits(ParseLimits {
                            bulk_bytes_max,
                            authenticated: !crate::cmd::acl::auth_required(s, &client),
                        });
                    }
                    Parsed::Skip { consumed } => pos += consumed,
                    Parsed::Incomplete => break,
                    Parsed::Error(e) => {
                        out.raw(b"-");
                        out.raw(&e.message_bytes());
                        out.raw(b"\r\n");
                        s.stats.count_error("ERR");
                        client.close_after_reply = true;
                        break;
                    }
                }
            }
            rbuf.advance(pos);
            shared.qbuf_bytes.set(rbuf.len());
            s.stats.net_output_bytes += out.len() as u64;
            // The batch's records are written (write(2)) before its replies go out.
            after = s.persist.after_batch(pos_before);
        }
        // appendfsync always: no reply leaves before the records of the writes it answers
        // (or that it may have read) are on disk. A failed write closes the connection
        // unanswered: those writes are not acknowledged.
        if !replies_may_go(after).await {
            break;
        }
        if !out.is_empty() {
            if !write_out(&stream, &out.buf, &shared, out_limit).await {
                break;
            }
            out.clear();
            if out.buf.capacity() > REPLY_BUF_BYTES_KEPT {
                out.buf.shrink_to(REPLY_BUF_BYTES_KEPT);
            }
        }
        if client.close_after_reply {
            break;
        }
        if rbuf.len() > query_limit {
            tracing::warn!(client = %addr, bytes = rbuf.len(), "closing client that reached max query buffer length");
            break;
        }
    }
    shared.socket.replace(std::rc::Weak::new());
    if let Ok(mut stream) = Rc::try_unwrap(stream) {
        let _ = stream.shutdown().await;
    }
    shard
        .borrow_mut()
        .unregister_client(client.id(), &client.dirty);
}

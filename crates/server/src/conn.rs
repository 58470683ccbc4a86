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
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
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

/// Writes `buf` to the client. Gives up (false) when the connection fails, when the client
/// is killed meanwhile (CLIENT KILL, `timeout`, shutdown), or when the output still pending
/// breaks its class's limit (`ClientShared::output_over_limit`: the hard bound at once, the
/// soft one after its seconds): a client that never reads holds at most one batch of
/// replies, and not for longer than its class allows.
async fn write_out(
    stream: &mut TcpStream,
    buf: &[u8],
    shared: &ClientShared,
    limit: OutputLimit,
) -> bool {
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
        // Biased: the write goes first, so the timer is only set up when it would block.
        tokio::select! {
            biased;
            r = stream.write(rest) => match r {
                Ok(0) | Err(_) => break false,
                Ok(n) => written += n,
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
    if woken {
        shared.wake.notify_one();
    }
    ok
}

/// How often a write that does not progress re-checks the output limits.
pub const OUTPUT_CHECK_PERIOD: Duration = Duration::from_millis(250);

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

/// Serves one accepted connection until it closes, is killed, or the server stops.
pub async fn serve(shard: Rc<RefCell<Shard>>, mut stream: TcpStream) {
    let (addr, laddr) = match (stream.peer_addr(), stream.local_addr()) {
        (Ok(a), Ok(l)) => (a, l),
        _ => return,
    };
    let _ = stream.set_nodelay(true);
    let (shared, limits, refusal) = {
        let mut s = shard.borrow_mut();
        let now = s.now_ms();
        let open = s.acl.default_is_open();
        let limits = ParseLimits {
            bulk_bytes_max: s.config.proto_max_bulk_len as i64,
            authenticated: open,
        };
        // Redis's order: maxclients, then protected mode.
        let refusal: Option<&[u8]> = if s.clients.len() >= s.config.maxclients as usize {
            Some(b"-ERR max number of clients reached\r\n")
        } else if s.config.protected_mode
            && s.acl.default_user().get().nopass()
            && !is_local(addr.ip())
        {
            Some(PROTECTED_MODE_DENIED)
        } else {
            None
        };
        if refusal.is_some() {
            s.stats.rejected_connections += 1;
        }
        let shared = s.register_client(addr, laddr, now);
        shared.authenticated.set(open);
        (shared, limits, refusal)
    };
    let mut client = Client::new(shared.clone());
    if let Some(text) = refusal {
        let _ = stream.write_all(text).await;
        shard
            .borrow_mut()
            .unregister_client(client.id(), &client.dirty);
        return;
    }
    let mut parser = Parser::new(limits);
    let mut rbuf = BytesMut::with_capacity(READ_BUF_BYTES_INITIAL);
    let mut out = Reply::new();
    // The read buffer may hold complete commands not run yet (a blocking command ended).
    let mut buffered = false;
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
                r = stream.read_buf(&mut rbuf) => match r {
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
                        if s.blocking.is_ready(client.id()) {
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
                if !write_out(&mut stream, &out.buf, &shared, out_limit).await {
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
                r = stream.read_buf(&mut rbuf) => r,
                () = shared.wake.notified() => {
                    // MONITOR lines and Pub/Sub messages from other connections.
                    let pending = std::mem::take(&mut *shared.push_out.borrow_mut());
                    let limit = shared
                        .output_limit(&shard.borrow().config.client_output_buffer_limit);
                    if !pending.is_empty() && !write_out(&mut stream, &pending, &shared, limit).await {
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
            if !write_out(&mut stream, &out.buf, &shared, out_limit).await {
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
    let _ = stream.shutdown().await;
    shard
        .borrow_mut()
        .unregister_client(client.id(), &client.dirty);
}

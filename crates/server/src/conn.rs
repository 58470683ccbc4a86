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
use crate::client::Client;
use crate::cmd;
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

/// Serves one accepted connection until it closes, is killed, or the server stops.
pub async fn serve(shard: Rc<RefCell<Shard>>, stream: TcpStream) {
    serve_with(shard, stream, Vec::new()).await;
}

/// `serve` for a connection that already sent `pending` bytes (the start of a command it
/// sent while the shard was loading, `crate::loading`).
pub async fn serve_with(shard: Rc<RefCell<Shard>>, mut stream: TcpStream, pending: Vec<u8>) {
    let (addr, laddr) = match (stream.peer_addr(), stream.local_addr()) {
        (Ok(a), Ok(l)) => (a, l),
        _ => return,
    };
    let _ = stream.set_nodelay(true);
    let (shared, limits, maxclients) = {
        let mut s = shard.borrow_mut();
        let now = s.now_ms();
        let limits = ParseLimits {
            bulk_bytes_max: s.config.proto_max_bulk_len as i64,
            authenticated: true,
        };
        let maxclients = s.clients.len() >= s.config.maxclients as usize;
        if maxclients {
            s.stats.rejected_connections += 1;
        }
        (s.register_client(addr, laddr, now), limits, maxclients)
    };
    let mut client = Client::new(shared.clone());
    if maxclients {
        let _ = stream
            .write_all(b"-ERR max number of clients reached\r\n")
            .await;
        shard
            .borrow_mut()
            .unregister_client(client.id(), &client.dirty);
        return;
    }
    let mut parser = Parser::new(limits);
    let mut rbuf = BytesMut::with_capacity(READ_BUF_BYTES_INITIAL.max(pending.len()));
    let mut out = Reply::new();
    // The read buffer may hold complete commands not run yet (a blocking command ended, or
    // bytes sent while the shard was loading).
    let mut buffered = !pending.is_empty();
    rbuf.extend_from_slice(&pending);
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
            let after;
            {
                let mut guard = shard.borrow_mut();
                let s = &mut *guard;
                let pos_before = s.persist.next_pos;
                query_limit = s.config.client_query_buffer_limit as usize;
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
                if stream.write_all(&out.buf).await.is_err() {
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
                    if !pending.is_empty() && stream.write_all(&pending).await.is_err() {
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
        let after;
        {
            let mut guard = shard.borrow_mut();
            let s = &mut *guard;
            let pos_before = s.persist.next_pos;
            query_limit = s.config.client_query_buffer_limit as usize;
            // CONFIG SET proto-max-bulk-len applies to commands parsed from now on.
            parser.set_limits(ParseLimits {
                bulk_bytes_max: s.config.proto_max_bulk_len as i64,
                authenticated: true,
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
                        if client.close_after_reply || shared.killed.get() {
                            break;
                        }
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
            if stream.write_all(&out.buf).await.is_err() {
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

//! While the shards load their data, the client port answers `-LOADING`.
//!
//! The port is bound before loading starts, so a client never meets a refused connection or a
//! silent one: the control thread accepts on it until every shard has loaded and answers each
//! command as Redis does while loading (`processCommand`): an unknown command or a wrong
//! arity gets its usual error, QUIT closes, and anything else gets `-LOADING Redis is loading
//! the dataset in memory`. (Redis also runs the few commands flagged `loading`, INFO and HELLO
//! among them; here they get `-LOADING` too.) When loading ends, every such connection is
//! handed to the shard with the bytes of a command not yet complete, so clients keep their
//! connections.

use bytes::{Buf as _, BytesMut};
use smallvec::SmallVec;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

use crate::error::CmdError;
use crate::resp::parse::{ParseLimits, Parsed, Parser};

/// A connection accepted while loading, handed to the shard once loaded.
#[derive(Debug)]
pub struct Handover {
    pub stream: std::net::TcpStream,
    /// Bytes received and not yet run: the start of a command that was not complete.
    pub input: BytesMut,
}

/// What the loading port enforces, from the configuration.
#[derive(Clone, Copy, Debug)]
pub struct LoadingLimits {
    /// `maxclients`: connections served at once while loading.
    pub clients_max: usize,
    /// `proto-max-bulk-len`.
    pub bulk_bytes_max: i64,
    /// `client-query-buffer-limit`: unparsed input kept per connection.
    pub query_bytes_max: usize,
}

impl LoadingLimits {
    pub fn of(config: &crate::config::Config) -> LoadingLimits {
        LoadingLimits {
            clients_max: config.maxclients as usize,
            bulk_bytes_max: config.proto_max_bulk_len as i64,
            query_bytes_max: config.client_query_buffer_limit as usize,
        }
    }
}

/// Read size while loading.
const READ_CHUNK_BYTES: usize = 16 * 1024;

/// Accepts on `listener` until `loaded` turns true, then returns (dropping its handle on the
/// socket; the shard's stays open). Connections it accepted go on answering until then and
/// are sent through `handover` (capacity: `clients_max`).
pub async fn serve(
    listener: std::net::TcpListener,
    limits: LoadingLimits,
    mut loaded: watch::Receiver<bool>,
    handover: mpsc::Sender<Handover>,
) {
    let listener = match TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            tracing::warn!(error = %e, "client port unusable while loading");
            return;
        }
    };
    let mut conns = tokio::task::JoinSet::new();
    let for_conns = loaded.clone();
    loop {
        while conns.try_join_next().is_some() {}
        let accepted = tokio::select! {
            biased;
            _ = loaded.wait_for(|l| *l) => {
                // Each connection hands itself over; one stuck writing to a slow client
                // must not hold readiness back, so they are not waited for.
                conns.detach_all();
                return;
            }
            accepted = listener.accept() => accepted,
        };
        match accepted {
            Ok((mut stream, _)) => {
                if conns.len() >= limits.clients_max {
                    let _ = stream
                        .write_all(b"-ERR max number of clients reached\r\n")
                        .await;
                    continue;
                }
                let _ = stream.set_nodelay(true);
                conns.spawn(serve_conn(
                    stream,
                    limits,
                    for_conns.clone(),
                    handover.clone(),
                ));
            }
            Err(e) => {
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
        }
    }
}

/// One connection while loading; hands it over when `loaded` turns true.
async fn serve_conn(
    mut stream: TcpStream,
    limits: LoadingLimits,
    mut loaded: watch::Receiver<bool>,
    handover: mpsc::Sender<Handover>,
) {
    let table = crate::cmd::table();
    let mut parser = Parser::new(ParseLimits {
        bulk_bytes_max: limits.bulk_bytes_max,
        authenticated: true,
    });
    let mut rbuf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut out: Vec<u8> = Vec::new();
    loop {
        rbuf.reserve(parser.bytes_hint().unwrap_or(0).max(READ_CHUNK_BYTES));
        // Biased: once loaded, nothing more is answered here; bytes that arrive go with the
        // connection (a read not polled consumes nothing).
        let read = tokio::select! {
            biased;
            _ = loaded.wait_for(|l| *l) => None,
            r = stream.read_buf(&mut rbuf) => Some(r),
        };
        let Some(n) = read else {
            if let Ok(stream) = stream.into_std() {
                let _ = handover
                    .send(Handover {
                        stream,
                        input: rbuf,
                    })
                    .await;
            }
            return;
        };
        if !matches!(n, Ok(n) if n > 0) {
            return;
        }
        let mut pos = 0usize;
        let mut close = false;
        loop {
            let buf = rbuf.get(pos..).unwrap_or_default();
            match parser.next(buf) {
                Parsed::Command { consumed } => {
                    let mut argv: SmallVec<[&[u8]; 8]> = SmallVec::new();
                    parser.args(buf, &mut argv);
                    close = answer(table, &argv, &mut out);
                    pos += consumed;
                    if close {
                        break;
                    }
                }
                Parsed::Skip { consumed } => pos += consumed,
                Parsed::Incomplete => break,
                Parsed::Error(e) => {
                    out.push(b'-');
                    out.extend_from_slice(&e.message_bytes());
                    out.extend_from_slice(b"\r\n");
                    close = true;
                    break;
                }
            }
        }
        rbuf.advance(pos);
        if !out.is_empty() {
            if stream.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
        }
        if close || rbuf.len() > limits.query_bytes_max {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

/// The reply to one command while loading; returns whether the connection closes after it.
fn answer(table: &'static crate::cmd::table::Table, argv: &[&[u8]], out: &mut Vec<u8>) -> bool {
    let Some(name) = argv.first() else {
        return false;
    };
    let err = match crate::cmd::resolve(table, argv) {
        Ok(spec) if spec.meta.name == "quit" || name.eq_ignore_ascii_case(b"quit") => {
            out.extend_from_slice(b"+OK\r\n");
            return true;
        }
        Ok(_) => CmdError::Loading,
        Err(e) => e,
    };
    out.push(b'-');
    err.write_text(out);
    out.extend_from_slice(b"\r\n");
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(argv: &[&[u8]]) -> (String, bool) {
        let mut out = Vec::new();
        let close = answer(crate::cmd::table(), argv, &mut out);
        (String::from_utf8(out).unwrap(), close)
    }

    #[test]
    fn answers_as_redis_does_while_loading() {
        assert_eq!(
            reply(&[b"PING"]),
            (
                "-LOADING Redis is loading the dataset in memory\r\n".to_string(),
                false
            )
        );
        assert_eq!(
            reply(&[b"get"]),
            (
                "-ERR wrong number of arguments for 'get' command\r\n".to_string(),
                false
            )
        );
        assert!(
            reply(&[b"nosuch", b"x"])
                .0
                .starts_with("-ERR unknown command 'nosuch'")
        );
        assert_eq!(reply(&[b"quit"]), ("+OK\r\n".to_string(), true));
    }
}

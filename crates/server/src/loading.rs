//! While the shards load their data, the client port answers `-LOADING`.
//!
//! The port is bound before loading starts, so a client never meets a refused connection or a
//! silent one: the control thread accepts on it until every shard has loaded and answers each
//! command as Redis does while loading (`processCommand`): an unknown command or a wrong
//! arity gets its usual error, QUIT closes, a command named POST or Host: closes the
//! connection unanswered (the cross-protocol scripting guard, as `cmd::execute`), and
//! anything else gets `-LOADING Redis is loading the dataset in memory`. HELLO and AUTH,
//! which Redis runs while loading and which set up the connection's state the shard will
//! hold (protocol, name, user, client id in HELLO's reply), are not answered here: the
//! connection's input from that command on is held, unread further, and handed over with the
//! connection, so the shard answers them as Redis does once loaded (a client that connects
//! and says HELLO 3 gets its reply, not `-LOADING`, as from a Redis with little to load;
//! commands pipelined after it wait with it). (Redis also runs the other commands flagged
//! `loading`, INFO among them; here they get `-LOADING`, and so does a client that has not
//! authenticated, where Redis would answer `-NOAUTH` first.) While the default user has a
//! password, the parser applies Redis's unauthenticated limits, as the shard does after the
//! handover. When loading ends, every such connection is handed to the shard with the bytes
//! of a command not yet complete, so clients keep their connections.

use bytes::BytesMut;
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
    /// Whether clients start authenticated (the default user needs no password); when not,
    /// the parser applies Redis's unauthenticated limits here as the shard does after the
    /// handover (AUTH itself waits for the shard: it gets `-LOADING`).
    pub authenticated: bool,
}

impl LoadingLimits {
    pub fn of(config: &crate::config::Config, authenticated: bool) -> LoadingLimits {
        LoadingLimits {
            clients_max: config.maxclients as usize,
            bulk_bytes_max: config.proto_max_bulk_len as i64,
            query_bytes_max: config.client_query_buffer_limit as usize,
            authenticated,
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
        authenticated: limits.authenticated,
    });
    let mut rbuf = BytesMut::with_capacity(READ_CHUNK_BYTES);
    let mut out: Vec<u8> = Vec::new();
    // A command the shard must answer (`held_for_shard`) came: nothing more is read or
    // answered here; the input from it on goes with the connection.
    let mut held = false;
    loop {
        rbuf.reserve(parser.bytes_hint().unwrap_or(0).max(READ_CHUNK_BYTES));
        // Biased: once loaded, nothing more is answered here; bytes that arrive go with the
        // connection (a read not polled consumes nothing).
        let read = tokio::select! {
            biased;
            _ = loaded.wait_for(|l| *l) => None,
            r = stream.read_buf(&mut rbuf), if !held => Some(r),
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
                    if crate::cmd::is_cross_protocol(&argv) {
                        // Redis frees the client before writing: nothing of this read is
                        // answered.
                        security_warning();
                        return;
                    }
                    if held_for_shard(table, &argv) {
                        held = true;
                        break;
                    }
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
        crate::conn::consume_read(&mut rbuf, pos);
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

/// Logs the cross-protocol guard's warning at most once a minute, as the shard does.
fn security_warning() {
    use std::sync::atomic::{AtomicU64, Ordering};
    static WARNED_S: AtomicU64 = AtomicU64::new(0);
    let now_s = crate::time::wall_ms() / 1000;
    let last = WARNED_S.load(Ordering::Relaxed);
    if (last == 0 || now_s.abs_diff(last) > 60)
        && WARNED_S
            .compare_exchange(last, now_s, Ordering::Relaxed, Ordering::Relaxed)
            .is_ok()
    {
        tracing::warn!("{}", crate::cmd::SECURITY_WARNING);
    }
}

/// Whether the shard answers this command once loaded (HELLO and AUTH, valid in name and
/// arity: they set up state the connection keeps after the handover).
fn held_for_shard(table: &'static crate::cmd::table::Table, argv: &[&[u8]]) -> bool {
    crate::cmd::resolve(table, argv).is_ok_and(|spec| matches!(spec.meta.name, "hello" | "auth"))
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

    #[test]
    fn hello_and_auth_are_left_to_the_shard() {
        let table = crate::cmd::table();
        assert!(held_for_shard(table, &[b"HELLO", b"3"]));
        assert!(held_for_shard(table, &[b"hello"]));
        assert!(held_for_shard(table, &[b"AUTH", b"pw"]));
        // Errors of name or arity are answered here, as Redis does before running anything.
        assert!(!held_for_shard(table, &[b"AUTH"]));
        assert!(!held_for_shard(table, &[b"HELLOX"]));
        assert!(!held_for_shard(table, &[b"INFO"]));
        assert!(!held_for_shard(table, &[b"PING"]));
    }

    /// A HELLO sent while loading is not answered -LOADING: what was answered before it
    /// stays answered, nothing from it on is, and the connection goes to the shard with
    /// HELLO and the commands pipelined after it, for the shard to answer once loaded.
    #[test]
    fn hello_while_loading_is_handed_over_unanswered() {
        runtime().block_on(async {
            let (port, loaded_tx, mut handover_rx, server) = gate(true);
            let loading = b"-LOADING Redis is loading the dataset in memory\r\n";
            let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let held = b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n*1\r\n$4\r\nPING\r\n";
            let mut sent = b"*1\r\n$4\r\nPING\r\n".to_vec();
            sent.extend_from_slice(held);
            c.write_all(&sent).await.unwrap();
            let mut got = vec![0u8; loading.len()];
            c.read_exact(&mut got).await.unwrap();
            assert_eq!(got, loading);
            // Nothing more is answered while loading, whatever else arrives.
            c.write_all(b"*1\r\n$4\r\nPING\r\n").await.unwrap();
            let mut more = [0u8; 1];
            let wait = std::time::Duration::from_millis(300);
            assert!(tokio::time::timeout(wait, c.read(&mut more)).await.is_err());
            loaded_tx.send(true).unwrap();
            let handed = handover_rx.recv().await.expect("handed over");
            assert_eq!(&handed.input[..], held);
            // What the gate did not read is still in the socket, for the shard.
            let mut rest = [0u8; 14];
            let mut stream = TcpStream::from_std(handed.stream).unwrap();
            stream.read_exact(&mut rest).await.unwrap();
            assert_eq!(&rest, b"*1\r\n$4\r\nPING\r\n");
            server.await.unwrap();
        });
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// The loading gate on a loopback port (`authenticated`: whether clients start
    /// authenticated), within a runtime: its port, the loaded signal, the handovers it sends
    /// and its task.
    fn gate(
        authenticated: bool,
    ) -> (
        u16,
        watch::Sender<bool>,
        mpsc::Receiver<Handover>,
        tokio::task::JoinHandle<()>,
    ) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let port = listener.local_addr().unwrap().port();
        let limits = LoadingLimits {
            clients_max: 8,
            bulk_bytes_max: 512 * 1024 * 1024,
            query_bytes_max: 1024 * 1024 * 1024,
            authenticated,
        };
        let (loaded_tx, loaded_rx) = watch::channel(false);
        let (handover_tx, handover_rx) = mpsc::channel(8);
        let server = tokio::spawn(serve(listener, limits, loaded_rx, handover_tx));
        (port, loaded_tx, handover_rx, server)
    }

    /// Reads until the server closes the connection (bounded by a timeout).
    async fn read_to_close(c: &mut TcpStream) -> Vec<u8> {
        let mut got = Vec::new();
        let read = c.read_to_end(&mut got);
        let r = tokio::time::timeout(std::time::Duration::from_secs(10), read).await;
        assert!(matches!(r, Ok(Ok(_))), "not closed: {r:?}");
        got
    }

    /// While the default user has a password, the loading port applies Redis's
    /// unauthenticated limits as the shard does after the handover: 10 arguments and a
    /// 16384-byte bulk are parsed (and answered), one past either is the protocol error and
    /// the close. POST closes unanswered. Loaded, a connection is handed over with the bytes
    /// it sent.
    #[test]
    fn unauthenticated_limits_apply_while_loading() {
        runtime().block_on(async {
            let (port, loaded_tx, mut handover_rx, server) = gate(false);
            let loading = b"-LOADING Redis is loading the dataset in memory\r\n";
            let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let mut ten = b"*10\r\n$3\r\nDEL\r\n".to_vec();
            for _ in 0..9 {
                ten.extend_from_slice(b"$1\r\nk\r\n");
            }
            let mut bulk = b"*2\r\n$4\r\nECHO\r\n$16384\r\n".to_vec();
            bulk.extend(std::iter::repeat_n(b'v', 16384));
            bulk.extend_from_slice(b"\r\n");
            for cmd in [&ten, &bulk] {
                c.write_all(cmd).await.unwrap();
                let mut got = vec![0u8; loading.len()];
                c.read_exact(&mut got).await.unwrap();
                assert_eq!(got, loading);
            }
            c.write_all(b"*11\r\n").await.unwrap();
            assert_eq!(
                read_to_close(&mut c).await,
                b"-ERR Protocol error: unauthenticated multibulk length\r\n"
            );
            let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            c.write_all(b"*2\r\n$4\r\nECHO\r\n$16385\r\n")
                .await
                .unwrap();
            assert_eq!(
                read_to_close(&mut c).await,
                b"-ERR Protocol error: unauthenticated bulk length\r\n"
            );
            // An HTTP request closes the connection unanswered (the cross-protocol guard),
            // the replies of the commands before it in the same read included.
            let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            c.write_all(b"PING\r\nPOST / HTTP/1.1\r\n").await.unwrap();
            assert_eq!(read_to_close(&mut c).await, b"");
            // A partial command goes to the shard with the connection.
            let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            c.write_all(&ten).await.unwrap();
            let mut got = vec![0u8; loading.len()];
            c.read_exact(&mut got).await.unwrap();
            c.write_all(b"*2\r\n$4\r\nAUTH\r\n$2\r\npw").await.unwrap();
            // Let the gate read it before loading ends (what it has not read stays in the
            // socket for the shard anyway).
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            loaded_tx.send(true).unwrap();
            let handed = handover_rx.recv().await.expect("handed over");
            assert_eq!(&handed.input[..], b"*2\r\n$4\r\nAUTH\r\n$2\r\npw");
            server.await.unwrap();
        });
    }
}

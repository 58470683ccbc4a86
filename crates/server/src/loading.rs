//! Clients connected while a shard loads its data at start (snapshot and log replay): every
//! command they send is answered with Redis's `-LOADING Redis is loading the dataset in
//! memory`, as Redis answers while it loads; when loading ends, their connections (with any
//! command they were in the middle of sending) are handed to the shard and served as usual.
//!
//! The gate is a thread of its own that polls the listening socket and its connections
//! (non-blocking) while the shard thread is busy loading; it stops, and returns the
//! connections, when `Gate::finish` is called. Redis also runs the few commands flagged
//! `loading` (INFO, CONFIG...) while it loads; the gate has no keyspace to run them against
//! and answers `-LOADING` to every command (docs/compatibility.md).

use std::io::{Read as _, Write as _};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::resp::parse::{ParseLimits, Parsed, Parser};

/// Redis's `shared.loadingerr`.
pub const LOADING_REPLY: &[u8] = b"-LOADING Redis is loading the dataset in memory\r\n";
/// How long the gate sleeps when no socket had anything for it.
const IDLE_SLEEP: Duration = Duration::from_millis(2);
/// Bytes read from a connection at a time.
const READ_CHUNK_BYTES: usize = 16 * 1024;
/// How long a connection handed back may take to accept the replies the gate still owes it.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// What the gate serves with: the limits of the configuration.
#[derive(Debug, Clone, Copy)]
pub struct GateLimits {
    pub clients_max: usize,
    pub query_bytes_max: usize,
    pub bulk_bytes_max: i64,
}

/// A connection accepted during loading, handed to the shard: `pending` holds what it sent
/// that is not a complete command yet.
#[derive(Debug)]
pub struct Handed {
    pub stream: TcpStream,
    pub pending: Vec<u8>,
}

struct Conn {
    stream: TcpStream,
    parser: Parser,
    input: Vec<u8>,
    output: Vec<u8>,
    closed: bool,
}

/// The running gate.
pub struct Gate {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<Handed>>>,
}

impl Gate {
    /// Starts answering clients of `listener` (a duplicate of the shard's listening socket).
    pub fn start(listener: TcpListener, limits: GateLimits) -> std::io::Result<Gate> {
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("loading-gate".to_string())
            .spawn(move || run(listener, limits, &flag))?;
        Ok(Gate {
            stop,
            thread: Some(thread),
        })
    }

    /// Stops the gate and returns the connections it holds, in the order they arrived.
    pub fn finish(mut self) -> Vec<Handed> {
        self.stop.store(true, Ordering::Release);
        self.thread
            .take()
            .and_then(|t| t.join().ok())
            .unwrap_or_default()
    }
}

impl Drop for Gate {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(listener: TcpListener, limits: GateLimits, stop: &AtomicBool) -> Vec<Handed> {
    let mut conns: Vec<Conn> = Vec::new();
    let parse_limits = ParseLimits {
        bulk_bytes_max: limits.bulk_bytes_max,
        authenticated: true,
    };
    while !stop.load(Ordering::Acquire) {
        let mut busy = false;
        while let Ok((stream, _)) = listener.accept() {
            busy = true;
            if conns.len() >= limits.clients_max {
                let mut s = stream;
                let _ = s.write_all(b"-ERR max number of clients reached\r\n");
                continue;
            }
            if stream.set_nonblocking(true).is_ok() {
                let _ = stream.set_nodelay(true);
                conns.push(Conn {
                    stream,
                    parser: Parser::new(parse_limits),
                    input: Vec::new(),
                    output: Vec::new(),
                    closed: false,
                });
            }
        }
        for c in &mut conns {
            busy |= serve(c, limits.query_bytes_max);
        }
        conns.retain(|c| !c.closed);
        if !busy {
            std::thread::sleep(IDLE_SLEEP);
        }
    }
    conns
        .into_iter()
        .filter_map(|mut c| {
            if !c.output.is_empty() {
                c.stream.set_nonblocking(false).ok()?;
                c.stream.set_write_timeout(Some(FLUSH_TIMEOUT)).ok()?;
                c.stream.write_all(&c.output).ok()?;
                c.stream.set_write_timeout(None).ok()?;
            }
            Some(Handed {
                stream: c.stream,
                pending: c.input,
            })
        })
        .collect()
}

/// One step of one connection: read what arrived, answer each complete command, write what
/// the socket takes. Returns whether anything happened.
fn serve(c: &mut Conn, query_bytes_max: usize) -> bool {
    let mut busy = false;
    let mut chunk = [0u8; READ_CHUNK_BYTES];
    loop {
        match c.stream.read(&mut chunk) {
            Ok(0) => {
                c.closed = true;
                return true;
            }
            Ok(n) => {
                busy = true;
                c.input
                    .extend_from_slice(chunk.get(..n).unwrap_or_default());
                if c.input.len() > query_bytes_max {
                    c.closed = true;
                    return true;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(_) => {
                c.closed = true;
                return true;
            }
        }
    }
    let mut pos = 0;
    loop {
        let buf = c.input.get(pos..).unwrap_or_default();
        match c.parser.next(buf) {
            Parsed::Command { consumed } => {
                let mut argv = smallvec::SmallVec::<[&[u8]; 8]>::new();
                c.parser.args(buf, &mut argv);
                let name = argv.first().copied().unwrap_or_default();
                // The cross-protocol guard applies while loading too (`cmd::execute`).
                if name.eq_ignore_ascii_case(b"post") || name.eq_ignore_ascii_case(b"host:") {
                    c.closed = true;
                    return true;
                }
                c.output.extend_from_slice(LOADING_REPLY);
                pos += consumed;
            }
            Parsed::Skip { consumed } => pos += consumed,
            Parsed::Incomplete => break,
            Parsed::Error(e) => {
                c.output.extend_from_slice(b"-");
                c.output.extend_from_slice(&e.message_bytes());
                c.output.extend_from_slice(b"\r\n");
                let _ = c.stream.set_nonblocking(false);
                let _ = c.stream.set_write_timeout(Some(FLUSH_TIMEOUT));
                let _ = c.stream.write_all(&c.output);
                c.closed = true;
                return true;
            }
        }
    }
    if pos > 0 {
        // The parser's state is relative to the start of the command it is in, as in
        // `conn::serve`.
        c.input.drain(..pos);
        busy = true;
    }
    while !c.output.is_empty() {
        match c.stream.write(&c.output) {
            Ok(0) => break,
            Ok(n) => {
                c.output.drain(..n);
                busy = true;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(_) => {
                c.closed = true;
                return true;
            }
        }
    }
    busy
}

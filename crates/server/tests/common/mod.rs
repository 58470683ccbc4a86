//! Helpers shared by the integration tests: start a Meridian server or the reference
//! `redis-server` on a free port in a temporary directory, and a raw blocking RESP client
//! that reads exactly one reply at a time (RESP2 and RESP3).

#![allow(dead_code)]

pub mod disk;
pub mod proxy;
pub mod sites;
pub mod text;

use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a server may take to accept its first connection.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Default read timeout of a [`Raw`] client.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Ports a test server may take above the one it is given: with several shards, a server
/// on port P also listens on its cluster endpoints P+1…P+shards (`Config::endpoint_port`).
/// Every port handed out reserves this whole block, so two servers of one test process never
/// share a port, and a test never talks to another server's endpoint that answers on "its"
/// port.
pub const PORT_BLOCK: u16 = 8;

/// Lets the tests' servers run DEBUG (Redis's `enable-debug-command`, off by default), unless
/// a test gives the flag itself.
pub fn enable_debug(args: &mut Vec<String>) {
    if !args.iter().any(|a| a == "--enable-debug-command") {
        args.push("--enable-debug-command".into());
        args.push("yes".into());
    }
}

/// A port that was free a moment ago (bind, release), with the `PORT_BLOCK - 1` ports above it
/// free too, never one of a block this test process handed out before: tests run in parallel
/// threads, and the kernel may give a port released by one thread to another before the
/// first thread's server has bound it.
pub fn free_port() -> u16 {
    free_ports(PORT_BLOCK)
}

/// `n` consecutive ports (`n` at least [`PORT_BLOCK`]), free a moment ago and never handed out
/// by this process before; returns the first.
pub fn free_ports(n: u16) -> u16 {
    static HANDED_OUT: std::sync::Mutex<Vec<std::ops::Range<u16>>> =
        std::sync::Mutex::new(Vec::new());
    // Below the kernel's ephemeral range (32768–60999 by default): a port bound to 0 and
    // released is an ephemeral port, which any outgoing connection (a test client, a site
    // dialing its peer) may take as its local end before the server binds it; the server
    // then exits with "address in use" before listening.
    const FIRST: u16 = 15_000;
    const SPAN: u16 = 17_000;
    let n = n.max(PORT_BLOCK);
    assert!(n < SPAN / 4, "{n} consecutive ports");
    let slots = (SPAN - n) / PORT_BLOCK;
    let mut slot = rand::random::<u16>() % slots;
    for _ in 0..slots {
        slot = (slot + 1) % slots;
        let base = FIRST + slot * PORT_BLOCK;
        let block = base..base + n;
        let mut given = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
        if given
            .iter()
            .any(|r| r.start < block.end && block.start < r.end)
        {
            continue;
        }
        if block
            .clone()
            .all(|p| TcpListener::bind(("127.0.0.1", p)).is_ok())
        {
            given.push(block);
            return base;
        }
    }
    panic!(
        "no {n} consecutive free ports between {FIRST} and {}",
        FIRST + SPAN
    );
}

/// Whether the server on `port` serves commands now: it answers PING with anything but
/// `-LOADING` (PONG, or -NOAUTH when the default user has a password). A server still
/// loading its data accepts connections but answers `-LOADING`: it is not ready yet.
pub fn serves(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    if stream.write_all(b"*1\r\n$4\r\nPING\r\n").is_err()
        || stream
            .set_read_timeout(Some(Duration::from_millis(500)))
            .is_err()
    {
        return false;
    }
    let mut buf = [0u8; 64];
    matches!(stream.read(&mut buf), Ok(n) if n > 0 && !buf.starts_with(b"-LOADING"))
}

/// Starts `program args…` with its output in `<dir>/server.log`, then waits until the port
/// answers PING. Panics with the log when the process exits or never listens.
pub fn spawn_and_wait(program: &str, args: &[String], dir: &Path, port: u16) -> Child {
    let log_path = dir.join("server.log");
    let log = std::fs::File::create(&log_path).expect("create server.log");
    let log_err = log.try_clone().expect("clone server.log");
    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log_err))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {program}: {e}"));
    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        // Whether the child exited comes first: a port that answers while the child has
        // exited (it could not bind) belongs to some other process.
        if let Ok(Some(status)) = child.try_wait() {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            panic!("{program} exited with {status} before listening on {port}; log:\n{log}");
        }
        if serves(port) {
            return child;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            panic!("{program} did not listen on {port} within {START_TIMEOUT:?}; log:\n{log}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Shard threads of a test server started without `--shards`: several, so that every test
/// of single-slot commands also exercises routing between threads (`MERIDIAN_TEST_SHARDS`
/// overrides it). Tests of commands that span slots (RENAME, multi-key set operations...)
/// start with `--shards 1`, as a single Redis.
pub fn test_shards() -> String {
    std::env::var("MERIDIAN_TEST_SHARDS").unwrap_or_else(|_| "3".to_string())
}

/// A Meridian server (`meridian server --port P --dir D`), killed on drop.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&[])
    }

    /// A one-shard server: a single Redis, whatever the keys of a command.
    pub fn start_single() -> Server {
        Server::start_with(&["--shards", "1"])
    }

    /// Starts with extra flags after `--port` and `--dir` (and `--shards`, unless they give
    /// it: `test_shards`).
    pub fn start_with(extra: &[&str]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let port = free_port();
        let mut args: Vec<String> = vec![
            "server".into(),
            "--port".into(),
            port.to_string(),
            "--dir".into(),
            dir.path().display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        enable_debug(&mut args);
        if !extra.contains(&"--shards") {
            // Replication tests read one shard's INFO crdt unless they ask for more.
            let syncs = extra.contains(&"--sync-port") || extra.contains(&"--peer");
            args.push("--shards".into());
            args.push(if syncs {
                "1".to_string()
            } else {
                test_shards()
            });
        }
        let child = spawn_and_wait(env!("CARGO_BIN_EXE_meridian"), &args, dir.path(), port);
        Server { child, port, dir }
    }

    pub fn connect(&self) -> Raw {
        Raw::connect(self.port)
    }

    /// The server's log so far (stdout and stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if std::thread::panicking() {
            // The test failed: show how the server saw it (the directory goes with us).
            let status = self.child.try_wait().ok().flatten();
            let log = self.log();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            eprintln!(
                "--- meridian on port {} ({}), last log lines:\n{}",
                self.port,
                status.map_or("running".to_string(), |s| format!("exited: {s}")),
                tail.join("\n")
            );
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The reference `redis-server` (7.0.15), killed on drop.
pub struct RedisRef {
    pub child: Child,
    pub port: u16,
    pub dir: tempfile::TempDir,
}

impl RedisRef {
    /// Whether `redis-server` is on PATH.
    pub fn available() -> bool {
        Command::new("redis-server")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false)
    }

    pub fn start() -> RedisRef {
        Self::start_in(tempfile::tempdir().expect("tempdir"))
    }

    /// A `redis-server` that loads `rdb` as its `dump.rdb` at start.
    pub fn load(rdb: &[u8]) -> RedisRef {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("dump.rdb"), rdb).expect("write dump.rdb");
        Self::start_in(dir)
    }

    fn start_in(dir: tempfile::TempDir) -> RedisRef {
        let port = free_port();
        let args: Vec<String> = [
            "--port",
            &port.to_string(),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            &dir.path().display().to_string(),
            "--enable-debug-command",
            "yes",
            "--daemonize",
            "no",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let child = spawn_and_wait("redis-server", &args, dir.path(), port);
        RedisRef { child, port, dir }
    }

    pub fn connect(&self) -> Raw {
        Raw::connect(self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }
}

impl Drop for RedisRef {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Encodes a command as a RESP multibulk.
pub fn cmd(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Length of the first complete RESP2/RESP3 value in `buf`; `Ok(None)` when more bytes are
/// needed, `Err` when the bytes are not a valid reply.
pub fn reply_len(buf: &[u8]) -> Result<Option<usize>, String> {
    value_end(buf, 0)
}

fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    buf.get(from..)?
        .windows(2)
        .position(|w| w == b"\r\n")
        .map(|i| from + i)
}

fn parse_len(line: &[u8]) -> Result<i64, String> {
    std::str::from_utf8(line)
        .ok()
        .and_then(|s| s.parse::<i64>().ok())
        .ok_or_else(|| format!("bad length {:?}", String::from_utf8_lossy(line)))
}

/// End offset (exclusive) of the value starting at `at`.
fn value_end(buf: &[u8], at: usize) -> Result<Option<usize>, String> {
    let Some(&kind) = buf.get(at) else {
        return Ok(None);
    };
    let Some(eol) = line_end(buf, at + 1) else {
        return Ok(None);
    };
    let line = &buf[at + 1..eol];
    let after = eol + 2;
    match kind {
        b'+' | b'-' | b':' | b'_' | b',' | b'#' | b'(' => Ok(Some(after)),
        b'$' | b'=' | b'!' => {
            let n = parse_len(line)?;
            if n < 0 {
                return Ok(Some(after));
            }
            let end = after + n as usize + 2;
            if buf.len() < end {
                return Ok(None);
            }
            if &buf[end - 2..end] != b"\r\n" {
                return Err("bulk not terminated by CRLF".into());
            }
            Ok(Some(end))
        }
        b'*' | b'~' | b'>' | b'%' | b'|' => {
            let n = parse_len(line)?;
            if n < 0 {
                return Ok(Some(after));
            }
            let items = if matches!(kind, b'%' | b'|') {
                2 * n
            } else {
                n
            };
            let mut pos = after;
            for _ in 0..items {
                match value_end(buf, pos)? {
                    Some(end) => pos = end,
                    None => return Ok(None),
                }
            }
            if kind == b'|' {
                // An attribute is followed by the value it describes.
                return value_end(buf, pos);
            }
            Ok(Some(pos))
        }
        other => Err(format!("unknown reply type byte {:?}", other as char)),
    }
}

/// Escapes bytes for messages: printable ASCII as is, `\r` `\n` `\t` `\\` `"`, else `\xHH`.
pub fn escape(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() + 2);
    for &b in bytes {
        match b {
            b'\r' => s.push_str("\\r"),
            b'\n' => s.push_str("\\n"),
            b'\t' => s.push_str("\\t"),
            b'\\' => s.push_str("\\\\"),
            b'"' => s.push_str("\\\""),
            0x20..=0x7e => s.push(b as char),
            _ => s.push_str(&format!("\\x{b:02x}")),
        }
    }
    s
}

/// A raw blocking RESP connection.
pub struct Raw {
    pub stream: TcpStream,
    /// Bytes read but not yet returned.
    buf: Vec<u8>,
    /// The peer closed its side (a read returned 0 or the connection was reset).
    eof: bool,
}

impl Raw {
    pub fn connect(port: u16) -> Raw {
        // A reset of a connection that has sent nothing is retried a few times: on a loaded
        // machine the kernel itself sometimes resets a loopback handshake (seen once in CI,
        // ECONNRESET from connect() while the server was up and accepting). Any other error,
        // or a reset every time, still fails the test.
        const RESET_RETRIES_MAX: u32 = 5;
        let mut resets = 0;
        let stream = loop {
            match TcpStream::connect(("127.0.0.1", port)) {
                Ok(stream) => break stream,
                Err(e)
                    if e.kind() == std::io::ErrorKind::ConnectionReset
                        && resets < RESET_RETRIES_MAX =>
                {
                    resets += 1;
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(e) => panic!("connect 127.0.0.1:{port}: {e} (after {resets} resets)"),
            }
        };
        Raw::from_stream(stream)
    }

    /// Wraps a connection made by the test itself.
    pub fn from_stream(stream: TcpStream) -> Raw {
        let _ = stream.set_nodelay(true);
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("set_read_timeout");
        Raw {
            stream,
            buf: Vec::new(),
            eof: false,
        }
    }

    /// A client whose source address is `from` (a loopback address other than 127.0.0.1:
    /// protected mode treats it as a remote client).
    pub fn connect_from(from: std::net::Ipv4Addr, port: u16) -> Raw {
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
            .expect("socket");
        socket
            .bind(&std::net::SocketAddr::from((from, 0)).into())
            .expect("bind source address");
        socket
            .connect(&std::net::SocketAddr::from(([127, 0, 0, 1], port)).into())
            .expect("connect");
        let stream: TcpStream = socket.into();
        stream
            .set_read_timeout(Some(READ_TIMEOUT))
            .expect("set_read_timeout");
        Raw {
            stream,
            buf: Vec::new(),
            eof: false,
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write to server");
    }

    /// Writes, reporting errors (the peer may have closed already).
    pub fn try_send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)
    }

    /// Sends a command as a multibulk.
    pub fn send_cmd(&mut self, args: &[&[u8]]) {
        self.send(&cmd(args));
    }

    /// Sends a command and reads its reply.
    pub fn call(&mut self, args: &[&[u8]]) -> Vec<u8> {
        self.send_cmd(args);
        self.read_reply()
    }

    /// One read into the buffer; `Ok(0)` at EOF. A reset counts as EOF.
    fn fill(&mut self, timeout: Duration) -> io::Result<usize> {
        if self.eof {
            return Ok(0);
        }
        self.stream
            .set_read_timeout(Some(timeout.max(Duration::from_millis(1))))?;
        let mut chunk = [0u8; 64 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) => {
                self.eof = true;
                Ok(0)
            }
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Ok(n)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                ) =>
            {
                self.eof = true;
                Ok(0)
            }
            Err(e) => Err(e),
        }
    }

    /// Reads exactly one complete reply within `timeout`.
    pub fn try_read_reply(&mut self, timeout: Duration) -> io::Result<Vec<u8>> {
        let deadline = Instant::now() + timeout;
        loop {
            match reply_len(&self.buf) {
                Ok(Some(n)) => return Ok(self.buf.drain(..n).collect()),
                Ok(None) => {}
                Err(e) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("{e} in {}", escape(&self.buf)),
                    ));
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!(
                        "no complete reply within {timeout:?}; have {}",
                        escape(&self.buf)
                    ),
                ));
            }
            match self.fill(left) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("connection closed; have {}", escape(&self.buf)),
                    ));
                }
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads exactly one complete reply; panics after [`READ_TIMEOUT`] or on close.
    pub fn read_reply(&mut self) -> Vec<u8> {
        self.try_read_reply(READ_TIMEOUT)
            .unwrap_or_else(|e| panic!("read_reply: {e}"))
    }

    /// Reads whatever arrives until the peer closes or nothing arrives for `quiet`; returns
    /// the bytes (including any buffered ones) and whether the connection is closed.
    pub fn read_until_quiet(&mut self, quiet: Duration) -> (Vec<u8>, bool) {
        loop {
            match self.fill(quiet) {
                Ok(0) => break,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        (std::mem::take(&mut self.buf), self.eof)
    }

    /// Whether the peer has closed: a read returns 0 (or a reset) within `timeout`. Bytes
    /// that arrive meanwhile are kept for the next read.
    pub fn is_closed(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.eof {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            match self.fill(left) {
                Ok(_) => {}
                Err(_) => break,
            }
        }
        self.eof
    }

    /// Bytes received but not returned yet.
    pub fn pending(&self) -> &[u8] {
        &self.buf
    }

    pub fn shutdown(&self) {
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

/// Splits a line into arguments like redis-cli (`sdssplitargs`): double quotes with
/// `\xHH` `\n` `\r` `\t` `\b` `\a` `\\` `\"` escapes, single quotes with `\'`; a closing
/// quote must be followed by a space or the end. `None` on unbalanced quotes.
pub fn split_args(line: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0;
    let n = line.len();
    loop {
        while i < n && line[i].is_ascii_whitespace() {
            i += 1;
        }
        if i >= n {
            return Some(args);
        }
        let mut cur = Vec::new();
        let mut in_dq = false;
        let mut in_sq = false;
        loop {
            if in_dq {
                if i >= n {
                    return None;
                }
                let c = line[i];
                if c == b'\\'
                    && i + 3 < n
                    && line[i + 1] == b'x'
                    && is_hex(line[i + 2])
                    && is_hex(line[i + 3])
                {
                    cur.push(hex(line[i + 2]) * 16 + hex(line[i + 3]));
                    i += 3;
                } else if c == b'\\' && i + 1 < n {
                    i += 1;
                    cur.push(match line[i] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 0x08,
                        b'a' => 0x07,
                        other => other,
                    });
                } else if c == b'"' {
                    if i + 1 < n && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(c);
                }
            } else if in_sq {
                if i >= n {
                    return None;
                }
                let c = line[i];
                if c == b'\\' && i + 1 < n && line[i + 1] == b'\'' {
                    i += 1;
                    cur.push(b'\'');
                } else if c == b'\'' {
                    if i + 1 < n && !line[i + 1].is_ascii_whitespace() {
                        return None;
                    }
                    i += 1;
                    break;
                } else {
                    cur.push(c);
                }
            } else {
                if i >= n {
                    break;
                }
                match line[i] {
                    b' ' | b'\n' | b'\r' | b'\t' | 0 => break,
                    b'"' => in_dq = true,
                    b'\'' => in_sq = true,
                    c => cur.push(c),
                }
            }
            i += 1;
        }
        args.push(cur);
    }
}

fn is_hex(b: u8) -> bool {
    b.is_ascii_hexdigit()
}

fn hex(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

/// A RESP2 bulk string reply, as text: `$<len>\r\n<s>\r\n`.
pub fn bulk(s: &str) -> String {
    format!("${}\r\n{}\r\n", s.len(), s)
}

/// A RESP integer reply, as text: `:<n>\r\n`.
pub fn int(n: i64) -> String {
    format!(":{n}\r\n")
}

/// Conveniences for tests that write their arguments as text.
impl Raw {
    /// Sends a command and returns its reply rendered lossily as text.
    pub fn call_lossy(&mut self, args: &[&[u8]]) -> String {
        String::from_utf8_lossy(&self.call(args)).into_owned()
    }

    /// Sends a command of text arguments and returns the raw bytes of its reply.
    pub fn call_strs(&mut self, args: &[&str]) -> Vec<u8> {
        let argv: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        self.call(&argv)
    }

    /// Sends a command of text arguments and returns its reply rendered lossily as text.
    /// CLIENT LIST's `qbuf` + `qbuf-free` (its read buffer's size) of the client named
    /// `name`.
    pub fn query_buffer_of(&mut self, name: &str) -> usize {
        let list = self.call_lossy(&[b"CLIENT", b"LIST"]);
        let line = list
            .lines()
            .find(|l| l.contains(&format!(" name={name} ")))
            .unwrap_or_else(|| panic!("{name} not in {list}"));
        let field = |f: &str| -> usize {
            line.split(' ')
                .find_map(|kv| kv.strip_prefix(f))
                .and_then(|v| v.parse().ok())
                .unwrap_or_else(|| panic!("{f} in {line}"))
        };
        field("qbuf=") + field("qbuf-free=")
    }

    pub fn call_text(&mut self, args: &[&str]) -> String {
        String::from_utf8_lossy(&self.call_strs(args)).into_owned()
    }

    /// [`Raw::call_text`] with the arguments split on single spaces (so `"SET k "` sends an
    /// empty value).
    pub fn call_line(&mut self, line: &str) -> String {
        let args: Vec<&str> = line.split(' ').collect();
        self.call_text(&args)
    }

    /// Sends a command of text arguments and parses its reply.
    pub fn reply(&mut self, args: &[&str]) -> Reply {
        parse_reply(&self.call_strs(args))
    }

    /// Sends a command and parses its reply.
    pub fn reply_b(&mut self, args: &[&[u8]]) -> Reply {
        parse_reply(&self.call(args))
    }

    /// Asserts that the command answers `+OK`.
    pub fn ok(&mut self, args: &[&str]) {
        assert_eq!(self.reply(args), Reply::Simple("OK".into()), "{args:?}");
    }

    /// The integer reply of the command; panics on any other reply.
    pub fn int(&mut self, args: &[&str]) -> i64 {
        match self.reply(args) {
            Reply::Int(n) => n,
            other => panic!("{args:?}: expected integer, got {other:?}"),
        }
    }

    /// The error text (without `-`) of the command; panics on any other reply.
    pub fn err(&mut self, args: &[&str]) -> String {
        match self.reply(args) {
            Reply::Err(e) => e,
            other => panic!("{args:?}: expected error, got {other:?}"),
        }
    }
}

/// A reply parsed into a tree, for tests that check values rather than bytes.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Simple(String),
    Err(String),
    Int(i64),
    Bulk(Vec<u8>),
    /// RESP2 null bulk or null array.
    Nil,
    /// RESP3 `_`.
    Null,
    /// Arrays, RESP3 sets and pushes.
    Array(Vec<Reply>),
    /// RESP3 maps (`map [k1, v1, …]` with the items' Debug form), and doubles, booleans, big
    /// numbers, verbatim and blob errors, attributes, kept as their first line.
    Other(String),
}

impl Reply {
    pub fn bulk(s: &str) -> Reply {
        Reply::Bulk(s.as_bytes().to_vec())
    }

    /// The items of an array of bulk or simple strings; panics on anything else.
    pub fn strings(&self) -> Vec<String> {
        match self {
            Reply::Array(items) => items
                .iter()
                .map(|v| match v {
                    Reply::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
                    Reply::Simple(s) => s.clone(),
                    other => panic!("not a string: {other:?}"),
                })
                .collect(),
            other => panic!("not an array: {other:?}"),
        }
    }
}

/// Parses one complete reply (as [`Raw::read_reply`] returns it); panics on malformed bytes
/// or bytes left over.
pub fn parse_reply(bytes: &[u8]) -> Reply {
    let (reply, end) = parse_reply_at(bytes, 0);
    assert_eq!(
        end,
        bytes.len(),
        "bytes after the reply: {}",
        escape(&bytes[end..])
    );
    reply
}

/// The value starting at `at` and the offset just after it.
fn parse_reply_at(buf: &[u8], at: usize) -> (Reply, usize) {
    let eol = line_end(buf, at).unwrap_or_else(|| panic!("no line in {}", escape(&buf[at..])));
    let line = String::from_utf8_lossy(&buf[at..eol]).into_owned();
    let after = eol + 2;
    let (kind, rest) = line.split_at(line.chars().next().map_or(0, char::len_utf8));
    let len = || {
        rest.parse::<i64>()
            .unwrap_or_else(|_| panic!("bad length {line:?}"))
    };
    match kind {
        "+" => (Reply::Simple(rest.to_string()), after),
        "-" => (Reply::Err(rest.to_string()), after),
        ":" => (Reply::Int(rest.parse().expect("int")), after),
        "_" => (Reply::Null, after),
        "$" => {
            let n = len();
            if n < 0 {
                return (Reply::Nil, after);
            }
            let end = after + n as usize;
            (Reply::Bulk(buf[after..end].to_vec()), end + 2)
        }
        "*" | "~" | ">" => {
            let n = len();
            if n < 0 {
                return (Reply::Nil, after);
            }
            let mut pos = after;
            let mut items = Vec::with_capacity(n as usize);
            for _ in 0..n {
                let (item, end) = parse_reply_at(buf, pos);
                items.push(item);
                pos = end;
            }
            (Reply::Array(items), pos)
        }
        "%" => {
            let n = len();
            let mut pos = after;
            let mut items = Vec::new();
            for _ in 0..2 * n.max(0) {
                let (item, end) = parse_reply_at(buf, pos);
                items.push(item);
                pos = end;
            }
            (Reply::Other(format!("map {items:?}")), pos)
        }
        _ => {
            let end = reply_len(&buf[at..])
                .ok()
                .flatten()
                .map_or(buf.len(), |n| at + n);
            (Reply::Other(line), end)
        }
    }
}

/// Redis Cluster's slot of a key: CRC16/XMODEM of the key, or of its hash tag (the text
/// between the first `{` and the next `}`, when not empty), mod 16384.
pub fn key_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let k = match b.iter().position(|&c| c == b'{') {
        Some(s) => match b[s + 1..].iter().position(|&c| c == b'}') {
            Some(0) | None => b,
            Some(e) => &b[s + 1..s + 1 + e],
        },
        None => b,
    };
    let mut crc: u16 = 0;
    for &byte in k {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Polls `cond` every 20 ms until it holds or `timeout` passes; returns whether it held.
pub fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

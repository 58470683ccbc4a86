//! A loopback TCP proxy for one sync link, with faults.
//!
//! The proxy sits on the link a dialer (site A, whose `--peer b=` names the proxy) opens to an
//! accepter (site B's sync port). Bytes from A to B (Hello, Acks) are copied as they are.
//! Bytes from B back to A (Welcome, Ops, full sync, Pings) are cut into frames
//! (`len:u32le kind:u8 codec:u8 body`, plain text only) so that `Ops` frames (kind 4) can be
//! duplicated or reordered.
//!
//! Controls: [`Proxy::partition`] (close every connection and close new ones at once until
//! [`Proxy::heal`]), [`Proxy::reset`] (close the current connections once),
//! [`Proxy::duplicate_frames`] and [`Proxy::reorder_frames`].
//!
//! Everything runs on std threads whose loops wake at least every 100 ms to look at the stop
//! flag; dropping the proxy closes every socket and joins every thread.

#![allow(dead_code)]

use std::io::{self, Read as _, Write as _};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Frame kind of `Ops` (docs/replication.md §2).
pub const KIND_OPS: u8 = 4;
/// How long a held `Ops` frame waits for a successor to swap with before it goes alone.
const REORDER_HOLD: Duration = Duration::from_millis(50);
/// Poll period of every loop (the stop flag is seen within this).
const TICK: Duration = Duration::from_millis(100);
/// Longest a write to either side may block before the connection is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// Frames larger than this are not expected (the servers' default limit is 64 MiB); the
/// pump gives up on the connection rather than buffering without bound.
const FRAME_LEN_MAX: usize = 64 * 1024 * 1024 + 16;

/// Counters of what the proxy did, to show that a fault really happened.
#[derive(Debug, Default)]
pub struct ProxyStats {
    /// Connections accepted and forwarded.
    pub connections: AtomicU64,
    /// Connections closed at once because of a partition.
    pub refused: AtomicU64,
    /// Frames seen from the accepter, and `Ops` frames among them.
    pub frames: AtomicU64,
    pub ops_frames: AtomicU64,
    /// `Ops` frames sent twice, and pairs of `Ops` frames swapped.
    pub duplicated: AtomicU64,
    pub reordered: AtomicU64,
    /// Connections closed by `reset` or `partition`.
    pub closed_by_control: AtomicU64,
}

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    partitioned: AtomicBool,
    duplicate: AtomicBool,
    reorder: AtomicBool,
    /// Clones of both sockets of every live connection, keyed by connection number.
    conns: Mutex<Vec<(u64, TcpStream, TcpStream)>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stats: ProxyStats,
}

impl Shared {
    /// Shuts down every live connection; returns how many there were.
    fn close_all(&self) -> usize {
        let conns: Vec<(u64, TcpStream, TcpStream)> =
            std::mem::take(&mut *self.conns.lock().unwrap_or_else(|e| e.into_inner()));
        for (_, a, b) in &conns {
            let _ = a.shutdown(Shutdown::Both);
            let _ = b.shutdown(Shutdown::Both);
        }
        self.stats
            .closed_by_control
            .fetch_add(conns.len() as u64, Ordering::SeqCst);
        conns.len()
    }

    fn forget(&self, id: u64) {
        self.conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|(i, _, _)| *i != id);
    }
}

/// A proxy listening on `127.0.0.1:port` and forwarding to `127.0.0.1:target`.
pub struct Proxy {
    pub port: u16,
    pub target: u16,
    shared: Arc<Shared>,
    accept_thread: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Binds a listener on a free loopback port (kept bound for the proxy's life, so no other
    /// test can take the port) and starts forwarding to `127.0.0.1:target`, cutting the
    /// accepter's bytes into frames (plain-text links only).
    pub fn start(target: u16) -> Proxy {
        Proxy::start_with(target, true)
    }

    /// A proxy that copies bytes both ways without looking at them (TLS links): partition and
    /// reset work, frame faults do nothing.
    pub fn start_raw(target: u16) -> Proxy {
        Proxy::start_with(target, false)
    }

    fn start_with(target: u16, frames: bool) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("proxy bind 127.0.0.1:0");
        listener
            .set_nonblocking(true)
            .expect("proxy listener nonblocking");
        let port = listener.local_addr().expect("proxy local_addr").port();
        let shared = Arc::new(Shared::default());
        let sh = shared.clone();
        let accept_thread = std::thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn(move || accept_loop(listener, target, frames, sh))
            .expect("spawn proxy accept thread");
        Proxy {
            port,
            target,
            shared,
            accept_thread: Some(accept_thread),
        }
    }

    /// `127.0.0.1:port`, for a `--peer id=` flag.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Cuts the link: closes every connection and closes new ones as soon as they are accepted,
    /// until [`Proxy::heal`].
    pub fn partition(&self) {
        self.shared.partitioned.store(true, Ordering::SeqCst);
        self.shared.close_all();
    }

    /// Lets connections through again (the dialer reconnects on its own schedule).
    pub fn heal(&self) {
        self.shared.partitioned.store(false, Ordering::SeqCst);
    }

    pub fn is_partitioned(&self) -> bool {
        self.shared.partitioned.load(Ordering::SeqCst)
    }

    /// Closes the connections open now, once; returns how many were closed.
    pub fn reset(&self) -> usize {
        self.shared.close_all()
    }

    /// Sends every `Ops` frame from the accepter to the dialer twice.
    pub fn duplicate_frames(&self, on: bool) {
        self.shared.duplicate.store(on, Ordering::SeqCst);
    }

    /// Swaps each pair of consecutive `Ops` frames from the accepter to the dialer (a frame
    /// with no successor within 50 ms goes alone).
    pub fn reorder_frames(&self, on: bool) {
        self.shared.reorder.store(on, Ordering::SeqCst);
    }

    /// Connections open now.
    pub fn live_connections(&self) -> usize {
        self.shared
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    pub fn stats(&self) -> &ProxyStats {
        &self.shared.stats
    }

    /// Waits (bounded) until a connection is open through the proxy.
    pub fn wait_connected(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.live_connections() > 0 {
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        false
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.close_all();
        if let Some(t) = self.accept_thread.take() {
            let _ = t.join();
        }
        let threads: Vec<JoinHandle<()>> = std::mem::take(
            &mut *self
                .shared
                .threads
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for t in threads {
            let _ = t.join();
        }
    }
}

fn accept_loop(listener: TcpListener, target: u16, frames: bool, shared: Arc<Shared>) {
    let mut next_id = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        let (client, _) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        if shared.partitioned.load(Ordering::SeqCst) {
            shared.stats.refused.fetch_add(1, Ordering::SeqCst);
            let _ = client.shutdown(Shutdown::Both);
            continue;
        }
        let _ = client.set_nonblocking(false);
        let upstream = match TcpStream::connect_timeout(
            &std::net::SocketAddr::from(([127, 0, 0, 1], target)),
            Duration::from_secs(2),
        ) {
            Ok(s) => s,
            Err(_) => {
                let _ = client.shutdown(Shutdown::Both);
                continue;
            }
        };
        let _ = client.set_nodelay(true);
        let _ = upstream.set_nodelay(true);
        for s in [&client, &upstream] {
            let _ = s.set_read_timeout(Some(TICK));
            let _ = s.set_write_timeout(Some(WRITE_TIMEOUT));
        }
        let clones = (client.try_clone(), upstream.try_clone());
        let (Ok(c2), Ok(u2)) = clones else {
            continue;
        };
        let (Ok(c3), Ok(u3)) = (client.try_clone(), upstream.try_clone()) else {
            continue;
        };
        next_id += 1;
        let id = next_id;
        shared
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((id, c3, u3));
        // A partition that began between the check above and the registration closes it too.
        if shared.partitioned.load(Ordering::SeqCst) {
            shared.close_all();
            continue;
        }
        shared.stats.connections.fetch_add(1, Ordering::SeqCst);
        let sh1 = shared.clone();
        let up = std::thread::spawn(move || {
            pump_raw(client, u2, &sh1);
            sh1.forget(id);
        });
        let sh2 = shared.clone();
        let down = std::thread::spawn(move || {
            if frames {
                pump_frames(upstream, c2, &sh2);
            } else {
                pump_raw(upstream, c2, &sh2);
            }
            sh2.forget(id);
        });
        let mut threads = shared.threads.lock().unwrap_or_else(|e| e.into_inner());
        threads.retain(|t| !t.is_finished());
        threads.push(up);
        threads.push(down);
    }
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Copies bytes from `from` to `to` until either side closes or the proxy stops; then shuts
/// both down so the other pump ends too.
fn pump_raw(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let mut buf = vec![0u8; 64 * 1024];
    while !shared.stop.load(Ordering::SeqCst) {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

/// Length of the first complete frame in `buf` (header included), if there is one.
fn frame_len(buf: &[u8]) -> Result<Option<usize>, ()> {
    let Some(head) = buf.get(..4) else {
        return Ok(None);
    };
    let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
    if len > FRAME_LEN_MAX {
        return Err(());
    }
    if buf.len() < 4 + len {
        return Ok(None);
    }
    Ok(Some(4 + len))
}

/// Copies frames from the accepter (`from`) to the dialer (`to`), duplicating or reordering
/// `Ops` frames when asked.
fn pump_frames(mut from: TcpStream, mut to: TcpStream, shared: &Shared) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    // An `Ops` frame held back to be swapped with the next one, and since when.
    let mut held: Option<(Vec<u8>, Instant)> = None;
    let stats = &shared.stats;
    let mut out: Vec<u8> = Vec::new();
    'conn: while !shared.stop.load(Ordering::SeqCst) {
        out.clear();
        loop {
            let n = match frame_len(&buf) {
                Ok(Some(n)) => n,
                Ok(None) => break,
                Err(()) => break 'conn,
            };
            let frame: Vec<u8> = buf.drain(..n).collect();
            stats.frames.fetch_add(1, Ordering::SeqCst);
            let kind = frame.get(4).copied().unwrap_or(0);
            let dup = shared.duplicate.load(Ordering::SeqCst);
            let emit = |out: &mut Vec<u8>, f: &[u8], is_ops: bool| {
                out.extend_from_slice(f);
                if is_ops && dup {
                    out.extend_from_slice(f);
                    stats.duplicated.fetch_add(1, Ordering::SeqCst);
                }
            };
            if kind == KIND_OPS {
                stats.ops_frames.fetch_add(1, Ordering::SeqCst);
                if shared.reorder.load(Ordering::SeqCst) {
                    match held.take() {
                        Some((first, _)) => {
                            emit(&mut out, &frame, true);
                            emit(&mut out, &first, true);
                            stats.reordered.fetch_add(1, Ordering::SeqCst);
                        }
                        None => held = Some((frame, Instant::now())),
                    }
                } else {
                    if let Some((h, _)) = held.take() {
                        emit(&mut out, &h, true);
                    }
                    emit(&mut out, &frame, true);
                }
            } else {
                // Other kinds keep their place after any held `Ops` frame.
                if let Some((h, _)) = held.take() {
                    emit(&mut out, &h, true);
                }
                emit(&mut out, &frame, false);
            }
        }
        if held
            .as_ref()
            .is_some_and(|(_, since)| since.elapsed() >= REORDER_HOLD)
        {
            if let Some((h, _)) = held.take() {
                out.extend_from_slice(&h);
                if shared.duplicate.load(Ordering::SeqCst) {
                    out.extend_from_slice(&h);
                    stats.duplicated.fetch_add(1, Ordering::SeqCst);
                }
            }
        }
        if !out.is_empty() && to.write_all(&out).is_err() {
            break;
        }
        let wait = if held.is_some() {
            Duration::from_millis(10)
        } else {
            TICK
        };
        let _ = from.set_read_timeout(Some(wait));
        match from.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if is_timeout(&e) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}

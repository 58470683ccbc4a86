//! The fault-injecting TCP proxy on each sync link (testing.md §5.1), modelled on Toxiproxy.
//!
//! One [`Proxy`] per link, in the dialer's namespace: the dialer's `--peer` names the proxy's
//! listener, and the proxy connects to the accepter's sync port. Bytes are copied both ways, per
//! direction with: one-way latency plus seeded jitter that never reorders bytes (each chunk is
//! released at `max(previous release, arrival + latency + jitter)`), a bandwidth cap, stall (hold
//! bytes, then release them), blackhole (drop bytes, keep both sockets open). For the whole link:
//! reset (close every connection with `SO_LINGER` 0, an RST) and partition (refuse new
//! connections with an RST and blackhole existing ones; heal resets those, whose streams lost
//! bytes). Each connection runs two pump threads whose loops wake at least every `TICK`.

use std::collections::VecDeque;
use std::io::{self, Read as _, Write as _};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::netns;
use crate::rng::Rng;

/// Longest any pump loop sleeps before looking at its flags again.
const TICK: Duration = Duration::from_millis(20);
/// Most bytes one direction holds back (latency, stall); beyond it the pump stops reading, so
/// TCP's own flow control pushes back on the sender.
pub const QUEUE_BYTES_MAX: usize = 64 * 1024 * 1024;
/// Longest a write to either side may block before the connection is dropped.
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the proxy waits for the accepter to take a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Read size of a pump.
const CHUNK_BYTES: usize = 64 * 1024;

/// A direction of a link: `Up` carries the dialer's bytes (Hello, acks) to the accepter,
/// `Down` the accepter's (ops, full sync) to the dialer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Up,
    Down,
}

impl Dir {
    fn idx(self) -> usize {
        match self {
            Dir::Up => 0,
            Dir::Down => 1,
        }
    }
}

/// Faults of one direction.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DirFaults {
    pub latency_ms: u64,
    pub jitter_ms: u64,
    /// Bytes per second (0: no cap).
    pub bandwidth_bps: u64,
    pub stall: bool,
    pub blackhole: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Faults {
    dirs: [DirFaults; 2],
    partitioned: bool,
}

/// What the proxy did, to show that a fault really happened.
#[derive(Debug, Default)]
pub struct ProxyStats {
    pub connections: AtomicU64,
    pub refused: AtomicU64,
    pub resets: AtomicU64,
    pub bytes: [AtomicU64; 2],
    pub dropped: [AtomicU64; 2],
}

struct ConnEntry {
    id: u64,
    sockets: [TcpStream; 2],
    kill: Arc<AtomicBool>,
    /// Bytes were dropped on this connection (its stream is corrupt: reset it at heal).
    lossy: Arc<AtomicBool>,
}

struct Shared {
    name: String,
    ns: Option<String>,
    target: SocketAddr,
    seed: u64,
    stop: AtomicBool,
    faults: Mutex<Faults>,
    conns: Mutex<Vec<ConnEntry>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
    stats: ProxyStats,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Shared {
    fn faults(&self) -> Faults {
        *lock(&self.faults)
    }

    /// Resets (RST) the connections `pick` selects; returns how many.
    fn reset_where(&self, pick: impl Fn(&ConnEntry) -> bool) -> usize {
        let mut conns = lock(&self.conns);
        let mut n = 0;
        conns.retain(|c| {
            if !pick(c) {
                return true;
            }
            for s in &c.sockets {
                let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
            }
            c.kill.store(true, Ordering::SeqCst);
            n += 1;
            false
        });
        self.stats.resets.fetch_add(n as u64, Ordering::SeqCst);
        n
    }

    fn forget(&self, id: u64) {
        lock(&self.conns).retain(|c| c.id != id);
    }
}

/// A proxy for one link. Dropping it closes every socket and joins every thread.
pub struct Proxy {
    pub listen: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Binds `listen` in namespace `ns` and forwards each connection to `target` (connected from
    /// the same namespace). `seed` drives the jitter.
    pub fn start(
        name: &str,
        ns: Option<&str>,
        listen: SocketAddr,
        target: SocketAddr,
        seed: u64,
    ) -> io::Result<Proxy> {
        let listener = netns::in_netns(ns, || TcpListener::bind(listen))?;
        listener.set_nonblocking(true)?;
        let listen = listener.local_addr()?;
        let shared = Arc::new(Shared {
            name: name.to_string(),
            ns: ns.map(str::to_string),
            target,
            seed,
            stop: AtomicBool::new(false),
            faults: Mutex::new(Faults::default()),
            conns: Mutex::new(Vec::new()),
            threads: Mutex::new(Vec::new()),
            stats: ProxyStats::default(),
        });
        let sh = shared.clone();
        let accept = std::thread::Builder::new()
            .name(format!("proxy-{name}"))
            .spawn(move || accept_loop(&listener, &sh))?;
        Ok(Proxy {
            listen,
            shared,
            accept: Some(accept),
        })
    }

    fn edit(&self, f: impl FnOnce(&mut Faults)) {
        f(&mut lock(&self.shared.faults));
    }

    pub fn set_latency(&self, dir: Dir, latency_ms: u64, jitter_ms: u64) {
        self.edit(|f| {
            if let Some(d) = f.dirs.get_mut(dir.idx()) {
                d.latency_ms = latency_ms;
                d.jitter_ms = jitter_ms;
            }
        });
    }

    pub fn set_bandwidth(&self, dir: Dir, bytes_per_s: u64) {
        self.edit(|f| {
            if let Some(d) = f.dirs.get_mut(dir.idx()) {
                d.bandwidth_bps = bytes_per_s;
            }
        });
    }

    pub fn stall(&self, dir: Dir, on: bool) {
        self.edit(|f| {
            if let Some(d) = f.dirs.get_mut(dir.idx()) {
                d.stall = on;
            }
        });
    }

    pub fn blackhole(&self, dir: Dir, on: bool) {
        self.edit(|f| {
            if let Some(d) = f.dirs.get_mut(dir.idx()) {
                d.blackhole = on;
            }
        });
        if !on {
            self.shared.reset_where(|c| c.lossy.load(Ordering::SeqCst));
        }
    }

    /// Refuses new connections (RST) and blackholes existing ones until [`Proxy::heal`].
    pub fn partition(&self) {
        self.edit(|f| f.partitioned = true);
    }

    /// Ends a partition, stalls and blackholes (latency and bandwidth stay); connections that
    /// lost bytes are reset, as their streams cannot continue.
    pub fn heal(&self) {
        self.edit(|f| {
            f.partitioned = false;
            for d in &mut f.dirs {
                d.stall = false;
                d.blackhole = false;
            }
        });
        self.shared.reset_where(|c| c.lossy.load(Ordering::SeqCst));
    }

    /// Closes every open connection with an RST; returns how many.
    pub fn reset(&self) -> usize {
        self.shared.reset_where(|_| true)
    }

    pub fn stats(&self) -> &ProxyStats {
        &self.shared.stats
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.reset_where(|_| true);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
        // Bounded: connection threads end within a tick or a write timeout once stop is set.
        let threads: Vec<JoinHandle<()>> = std::mem::take(&mut *lock(&self.shared.threads));
        for t in threads {
            let _ = t.join();
        }
    }
}

fn rst(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
}

fn accept_loop(listener: &TcpListener, shared: &Arc<Shared>) {
    let mut next_id = 0u64;
    while !shared.stop.load(Ordering::SeqCst) {
        let client = match listener.accept() {
            Ok((c, _)) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
            Err(_) => {
                std::thread::sleep(Duration::from_millis(5));
                continue;
            }
        };
        if shared.faults().partitioned {
            shared.stats.refused.fetch_add(1, Ordering::SeqCst);
            rst(&client);
            drop(client);
            continue;
        }
        next_id += 1;
        let id = next_id;
        let sh = shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("proxy-{}-{id}", shared.name))
            .spawn(move || connection(client, id, &sh));
        if let Ok(h) = spawned {
            let mut threads = lock(&shared.threads);
            threads.retain(|t| !t.is_finished());
            threads.push(h);
        }
    }
}

/// Connects upstream and runs both pumps of one connection (the down pump on this thread).
fn connection(client: TcpStream, id: u64, shared: &Arc<Shared>) {
    let _ = client.set_nonblocking(false);
    let target = shared.target;
    let upstream = match netns::in_netns(shared.ns.as_deref(), || {
        TcpStream::connect_timeout(&target, CONNECT_TIMEOUT)
    }) {
        Ok(s) => s,
        Err(_) => {
            rst(&client);
            return;
        }
    };
    let setup = || -> io::Result<(TcpStream, TcpStream, TcpStream, TcpStream)> {
        for s in [&client, &upstream] {
            s.set_nodelay(true)?;
            s.set_write_timeout(Some(WRITE_TIMEOUT))?;
        }
        Ok((
            client.try_clone()?,
            upstream.try_clone()?,
            client.try_clone()?,
            upstream.try_clone()?,
        ))
    };
    let Ok((c2, u2, c3, u3)) = setup() else {
        rst(&client);
        rst(&upstream);
        return;
    };
    let kill = Arc::new(AtomicBool::new(false));
    let lossy = Arc::new(AtomicBool::new(false));
    lock(&shared.conns).push(ConnEntry {
        id,
        sockets: [c3, u3],
        kill: kill.clone(),
        lossy: lossy.clone(),
    });
    shared.stats.connections.fetch_add(1, Ordering::SeqCst);
    let sh = shared.clone();
    let (k2, l2) = (kill.clone(), lossy.clone());
    let up = std::thread::Builder::new()
        .name(format!("proxy-{}-{id}-up", shared.name))
        .spawn(move || pump(client, u2, Dir::Up, id, &sh, &k2, &l2));
    pump(upstream, c2, Dir::Down, id, shared, &kill, &lossy);
    if let Ok(h) = up {
        let _ = h.join();
    }
    shared.forget(id);
}

/// The release time of each chunk of one direction: never before the previous chunk's, so
/// jitter delays bytes but never reorders them.
#[derive(Debug, Default)]
pub struct Releaser {
    last: Option<Instant>,
}

impl Releaser {
    pub fn release_at(&mut self, arrival: Instant, delay: Duration) -> Instant {
        let t = arrival + delay;
        let r = match self.last {
            Some(l) if l > t => l,
            _ => t,
        };
        self.last = Some(r);
        r
    }
}

/// Latency plus a jitter drawn uniformly from `-jitter..=+jitter` ms (never below zero).
pub fn delay(latency_ms: u64, jitter_ms: u64, rng: &mut Rng) -> Duration {
    let j = rng.range_i64(-(jitter_ms as i64), jitter_ms as i64);
    Duration::from_millis((latency_ms as i64).saturating_add(j).max(0) as u64)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

/// Copies `from` to `to` with the faults of `dir`, until either side closes, the connection is
/// killed, or the proxy stops. Then shuts both sockets down so the other pump ends too.
fn pump(
    mut from: TcpStream,
    mut to: TcpStream,
    dir: Dir,
    id: u64,
    shared: &Shared,
    kill: &AtomicBool,
    lossy: &AtomicBool,
) {
    let mut rng = Rng::derive(shared.seed, &[id, dir.idx() as u64]);
    let mut releaser = Releaser::default();
    let mut queue: VecDeque<(Instant, Vec<u8>)> = VecDeque::new();
    let mut queued = 0usize;
    let mut next_send = Instant::now();
    let mut eof = false;
    let mut eof_deadline: Option<Instant> = None;
    let mut chunk = vec![0u8; CHUNK_BYTES];
    let stats = &shared.stats;
    'conn: while !shared.stop.load(Ordering::SeqCst) && !kill.load(Ordering::SeqCst) {
        let all = shared.faults();
        let f = all.dirs.get(dir.idx()).copied().unwrap_or_default();
        let dropping = f.blackhole || all.partitioned;
        // Release what is due.
        let now = Instant::now();
        // Bounded: each pass pops one queued chunk.
        while let (false, Some((at, _))) = (f.stall, queue.front()) {
            if *at > now || (f.bandwidth_bps > 0 && next_send > now) {
                break;
            }
            let Some((_, bytes)) = queue.pop_front() else {
                break;
            };
            queued -= bytes.len();
            if dropping {
                stats.dropped[dir.idx()].fetch_add(bytes.len() as u64, Ordering::Relaxed);
                lossy.store(true, Ordering::SeqCst);
                continue;
            }
            if to.write_all(&bytes).is_err() {
                break 'conn;
            }
            stats.bytes[dir.idx()].fetch_add(bytes.len() as u64, Ordering::Relaxed);
            if let Some(cost_us) = (bytes.len() as u64 * 1_000_000).checked_div(f.bandwidth_bps) {
                next_send = next_send.max(now) + Duration::from_micros(cost_us);
            }
        }
        if eof {
            let deadline = *eof_deadline.get_or_insert(now + Duration::from_secs(10));
            if queue.is_empty() || now > deadline {
                break;
            }
            std::thread::sleep(TICK.min(Duration::from_millis(5)));
            continue;
        }
        if queued >= QUEUE_BYTES_MAX {
            std::thread::sleep(Duration::from_millis(5));
            continue;
        }
        let mut wait = TICK;
        if let (false, Some((at, _))) = (f.stall, queue.front()) {
            let due = (*at).max(if f.bandwidth_bps > 0 { next_send } else { *at });
            wait = wait.min(due.saturating_duration_since(now));
        }
        let _ = from.set_read_timeout(Some(wait.max(Duration::from_millis(1))));
        match from.read(&mut chunk) {
            Ok(0) => eof = true,
            Ok(n) => {
                let data = chunk.get(..n).unwrap_or_default().to_vec();
                if dropping {
                    stats.dropped[dir.idx()].fetch_add(n as u64, Ordering::Relaxed);
                    lossy.store(true, Ordering::SeqCst);
                    continue;
                }
                let at =
                    releaser.release_at(Instant::now(), delay(f.latency_ms, f.jitter_ms, &mut rng));
                queued += data.len();
                queue.push_back((at, data));
            }
            Err(e) if is_timeout(&e) => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(std::net::Shutdown::Both);
    let _ = to.shutdown(std::net::Shutdown::Both);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_times_never_go_back_with_jitter() {
        let mut rng = Rng::new(42);
        let mut r = Releaser::default();
        let t0 = Instant::now();
        let mut last = t0;
        for i in 0..10_000u64 {
            let arrival = t0 + Duration::from_micros(i * 100);
            let at = r.release_at(arrival, delay(25, 20, &mut rng));
            assert!(at >= last, "chunk {i} released before its predecessor");
            assert!(at >= arrival + Duration::from_millis(5));
            last = at;
        }
    }

    /// Bytes through a proxy with heavy jitter arrive whole and in order.
    #[test]
    fn proxy_with_jitter_keeps_byte_order() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = server.local_addr().unwrap();
        let proxy = Proxy::start("t", None, "127.0.0.1:0".parse().unwrap(), target, 9).unwrap();
        proxy.set_latency(Dir::Up, 5, 5);
        proxy.set_latency(Dir::Down, 5, 5);
        let echo = std::thread::spawn(move || {
            let (mut s, _) = server.accept().unwrap();
            let mut buf = [0u8; 4096];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => s.write_all(&buf[..n]).unwrap(),
                }
            }
        });
        let mut c = TcpStream::connect(proxy.listen).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let sent: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut got = Vec::new();
        for part in sent.chunks(997) {
            c.write_all(part).unwrap();
        }
        let mut buf = [0u8; 8192];
        while got.len() < sent.len() {
            let n = c.read(&mut buf).unwrap();
            assert!(n > 0);
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, sent);
        assert!(proxy.stats().bytes[0].load(Ordering::SeqCst) >= sent.len() as u64);
        drop(c);
        drop(proxy);
        echo.join().unwrap();
    }

    #[test]
    fn partition_refuses_and_heal_lets_through() {
        let server = TcpListener::bind("127.0.0.1:0").unwrap();
        let target = server.local_addr().unwrap();
        let proxy = Proxy::start("p", None, "127.0.0.1:0".parse().unwrap(), target, 1).unwrap();
        proxy.partition();
        let mut c = TcpStream::connect(proxy.listen).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        // Refused: the proxy closes at once (RST or EOF), never forwarding.
        assert!(matches!(c.read(&mut b), Ok(0) | Err(_)));
        assert_eq!(proxy.stats().refused.load(Ordering::SeqCst), 1);
        proxy.heal();
        let mut c = TcpStream::connect(proxy.listen).unwrap();
        let (mut s, _) = server.accept().unwrap();
        c.write_all(b"x").unwrap();
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(s.read(&mut b).unwrap(), 1);
        assert_eq!(proxy.reset(), 1);
    }
}

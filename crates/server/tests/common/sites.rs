//! Several Meridian sites on loopback, linked by their syncers (docs/replication.md).
//!
//! [`Cluster::start`] picks free ports (client and sync), optionally puts a [`Proxy`] on every
//! link (site X's `--peer y=` then names the proxy X→Y, which forwards to Y's sync port), and
//! starts one `meridian server` per site in its own directory. [`Site::restart`] SIGKILLs a site
//! and starts it again with the same flags and ports. [`wait_converged`] polls until every link
//! is up, every peer has acked everything, and `CRDT.DIGEST` is equal everywhere, and panics
//! with the per-slot difference, `INFO crdt` and the logs when that does not happen in time.
//!
//! Every wait has a deadline; every process is SIGKILLed on drop.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::proxy::Proxy;
use super::{Raw, Reply, START_TIMEOUT, free_port, parse_reply};

/// Default bound of [`Cluster::wait_converged`].
pub const CONVERGE_TIMEOUT: Duration = Duration::from_secs(20);
/// A site whose peers can resume only from its 64 KiB in-memory backlog (`backlog-bytes-max`): no
/// log on disk extends it (`appendonly no`, and `save ""`: a policy would keep one).
pub const MEMORY_BACKLOG_ONLY: &[&str] = &[
    "--backlog-bytes-max",
    "65536",
    "--appendonly",
    "no",
    "--save",
    "",
];
/// Poll period of the waits here.
const POLL: Duration = Duration::from_millis(50);

/// One site: one `meridian server` process (started or not).
pub struct Site {
    pub id: String,
    pub port: u16,
    pub sync_port: u16,
    pub dir: tempfile::TempDir,
    /// Arguments after `meridian`.
    pub args: Vec<String>,
    child: Mutex<Option<Child>>,
    /// How many times it was started.
    pub starts: u32,
}

impl Site {
    /// A site that is not started yet: `--site id --port P --dir D --sync-port S`, one `--peer`
    /// per entry of `peers` (`(id, "127.0.0.1:port")`), then `extra`.
    pub fn new(
        id: &str,
        port: u16,
        sync_port: u16,
        peers: &[(String, String)],
        extra: &[String],
    ) -> Site {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut args: Vec<String> = vec![
            "server".into(),
            "--site".into(),
            id.into(),
            "--port".into(),
            port.to_string(),
            "--dir".into(),
            dir.path().display().to_string(),
            "--sync-port".into(),
            sync_port.to_string(),
        ];
        for (peer, addr) in peers {
            args.push("--peer".into());
            args.push(format!("{peer}={addr}"));
        }
        args.extend(extra.iter().cloned());
        super::enable_debug(&mut args);
        // Replication tests read one shard's INFO crdt and positions unless they ask for more.
        if !extra.iter().any(|a| a == "--shards") {
            args.push("--shards".into());
            args.push("1".into());
        }
        if !extra.iter().any(|a| a == "--cluster-api") {
            args.push("--cluster-api".into());
            args.push("no".into());
        }
        Site {
            id: id.to_string(),
            port,
            sync_port,
            dir,
            args,
            child: Mutex::new(None),
            starts: 0,
        }
    }

    fn log_path(&self) -> std::path::PathBuf {
        self.dir.path().join("server.log")
    }

    /// Starts the process (its output appended to `<dir>/server.log`) and waits until the client
    /// port answers PING (loaded); panics with the log if it exits or never listens.
    pub fn start(&mut self) {
        assert!(
            self.child
                .get_mut()
                .unwrap_or_else(|e| e.into_inner())
                .is_none(),
            "site {} is already running",
            self.id
        );
        self.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open server.log");
        let _ = writeln!(
            log,
            "=== test harness: start #{} of site {} ===",
            self.starts, self.id
        );
        let log_err = log.try_clone().expect("clone server.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_meridian"))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn meridian: {e}"));
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if super::serves(self.port) {
                *self.child.get_mut().unwrap_or_else(|e| e.into_inner()) = Some(child);
                return;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "site {} exited with {status} before listening on {}; log:\n{}",
                    self.id,
                    self.port,
                    self.log()
                );
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "site {} did not listen on {} within {START_TIMEOUT:?}; log:\n{}",
                    self.id,
                    self.port,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL (no shutdown path runs), then reaps the process.
    pub fn kill(&mut self) {
        if let Some(mut c) = self
            .child
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGKILL, then start again with the same flags, ports and directory.
    pub fn restart(&mut self) {
        self.kill();
        self.start();
    }

    /// The process id while it runs (to send it signals).
    pub fn pid(&self) -> Option<u32> {
        self.child
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(Child::id)
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    /// A client connection; when the site does not answer, panics with its exit status and
    /// the end of its log (a crash shows here).
    pub fn connect(&self) -> Raw {
        // A reset is left to `Raw::connect`, which retries it (see there).
        if TcpStream::connect(("127.0.0.1", self.port))
            .is_err_and(|e| e.kind() != std::io::ErrorKind::ConnectionReset)
        {
            let status = match self
                .child
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
            {
                Some(c) => format!("{:?}", c.try_wait()),
                None => "not started".to_string(),
            };
            panic!(
                "site {} does not accept connections on {} (process: {status}); log tail:\n{}",
                self.id,
                self.port,
                self.log_tail(200)
            );
        }
        Raw::connect(self.port)
    }

    /// Every run's output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// The last `n` lines of the log.
    pub fn log_tail(&self, n: usize) -> String {
        let log = self.log();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// One command on a fresh connection, parsed.
    pub fn cmd(&self, args: &[&str]) -> Reply {
        self.connect().reply(args)
    }

    /// `INFO crdt` as `field → value`.
    pub fn info_crdt(&self) -> BTreeMap<String, String> {
        let text = match self.cmd(&["INFO", "crdt"]) {
            Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            other => panic!("site {}: INFO crdt answered {other:?}", self.id),
        };
        text.lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// One numeric field of `INFO crdt` (`crdt_seq`…).
    pub fn info_u64(&self, field: &str) -> u64 {
        let info = self.info_crdt();
        info.get(field)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "site {}: no numeric {field} in INFO crdt: {info:?}",
                    self.id
                )
            })
    }

    /// The `crdt_peer_<peer>` line of `INFO crdt` as `field → value`.
    pub fn peer_info(&self, peer: &str) -> BTreeMap<String, String> {
        let info = self.info_crdt();
        let line = info.get(&format!("crdt_peer_{peer}")).unwrap_or_else(|| {
            panic!(
                "site {}: no crdt_peer_{peer} in INFO crdt: {info:?}",
                self.id
            )
        });
        parse_peer_line(line)
    }

    /// One numeric field of the peer line (`full_syncs_in`, `lag_ops`…).
    pub fn peer_u64(&self, peer: &str, field: &str) -> u64 {
        let p = self.peer_info(peer);
        p.get(field)
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| {
                panic!(
                    "site {}: peer {peer} has no numeric {field}: {p:?}",
                    self.id
                )
            })
    }

    /// `CRDT.DIGEST`.
    pub fn digest(&self) -> String {
        match self.cmd(&["CRDT.DIGEST"]) {
            Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
            other => panic!("site {}: CRDT.DIGEST answered {other:?}", self.id),
        }
    }

    /// `CRDT.DIGEST SLOTS` as `slot → (keys, digest)`.
    pub fn slot_digests(&self) -> BTreeMap<i64, (i64, String)> {
        let mut out = BTreeMap::new();
        let Reply::Array(items) = self.cmd(&["CRDT.DIGEST", "SLOTS"]) else {
            return out;
        };
        for item in items {
            if let Reply::Array(v) = item {
                if let [Reply::Int(slot), Reply::Int(keys), Reply::Bulk(d)] = v.as_slice() {
                    out.insert(*slot, (*keys, String::from_utf8_lossy(d).into_owned()));
                }
            }
        }
        out
    }

    /// Every key name of database 0 (small keyspaces only).
    pub fn keys(&self) -> BTreeSet<String> {
        match self.cmd(&["KEYS", "*"]) {
            r @ Reply::Array(_) => r.strings().into_iter().collect(),
            other => panic!("site {}: KEYS answered {other:?}", self.id),
        }
    }
}

impl Drop for Site {
    /// Kills the process; with `MERIDIAN_TEST_KEEP_LOGS=<dir>`, copies its log to
    /// `<dir>/<test name>.<site>.log` first.
    fn drop(&mut self) {
        self.kill();
        if let Some(dir) = std::env::var_os("MERIDIAN_TEST_KEEP_LOGS") {
            let test = std::thread::current()
                .name()
                .unwrap_or("unnamed")
                .replace("::", "-");
            let dir = std::path::PathBuf::from(dir);
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::copy(self.log_path(), dir.join(format!("{test}.{}.log", self.id)));
        }
    }
}

/// `addr=..,in_link=up,...` as `field → value` (the address keeps its colon).
pub fn parse_peer_line(line: &str) -> BTreeMap<String, String> {
    line.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// How to build a cluster.
#[derive(Clone, Debug, Default)]
pub struct Opts {
    /// Put a proxy on every link.
    pub proxied: bool,
    /// Proxies copy bytes without framing (for TLS links).
    pub raw_proxies: bool,
    /// Flags for every site.
    pub flags: Vec<String>,
    /// Flags per site (by index), after the common ones.
    pub site_flags: BTreeMap<usize, Vec<String>>,
    /// Which sites each site lists as peers (by index); default: all the others.
    pub peers: BTreeMap<usize, Vec<usize>>,
}

impl Opts {
    pub fn proxied() -> Opts {
        Opts {
            proxied: true,
            ..Opts::default()
        }
    }

    pub fn flags(mut self, flags: &[&str]) -> Opts {
        self.flags.extend(flags.iter().map(|s| s.to_string()));
        self
    }

    pub fn site_flags(mut self, site: usize, flags: &[&str]) -> Opts {
        self.site_flags
            .entry(site)
            .or_default()
            .extend(flags.iter().map(|s| s.to_string()));
        self
    }

    pub fn peers_of(mut self, site: usize, peers: &[usize]) -> Opts {
        self.peers.insert(site, peers.to_vec());
        self
    }
}

/// Sites on loopback, and the proxies on their links.
pub struct Cluster {
    pub sites: Vec<Site>,
    /// `(dialer, accepter) → proxy`: the dialer's `--peer` names it; it carries the accepter's
    /// ops to the dialer (and the dialer's acks back).
    proxies: BTreeMap<(usize, usize), Proxy>,
}

impl Cluster {
    /// Starts one site per id (all of them before waiting for any link).
    pub fn start(ids: &[&str], opts: Opts) -> Cluster {
        let ports: Vec<(u16, u16)> = ids.iter().map(|_| (free_port(), free_port())).collect();
        let mut proxies = BTreeMap::new();
        let mut sites = Vec::new();
        for (i, id) in ids.iter().enumerate() {
            let listed: Vec<usize> = opts
                .peers
                .get(&i)
                .cloned()
                .unwrap_or_else(|| (0..ids.len()).filter(|&j| j != i).collect());
            let mut peers = Vec::new();
            for j in listed {
                let target = ports[j].1;
                let addr = if opts.proxied {
                    let p = if opts.raw_proxies {
                        Proxy::start_raw(target)
                    } else {
                        Proxy::start(target)
                    };
                    let a = p.addr();
                    proxies.insert((i, j), p);
                    a
                } else {
                    format!("127.0.0.1:{target}")
                };
                peers.push((ids[j].to_string(), addr));
            }
            let mut extra = opts.flags.clone();
            extra.extend(opts.site_flags.get(&i).cloned().unwrap_or_default());
            sites.push(Site::new(id, ports[i].0, ports[i].1, &peers, &extra));
        }
        for s in &mut sites {
            s.start();
        }
        Cluster { sites, proxies }
    }

    pub fn site(&self, i: usize) -> &Site {
        &self.sites[i]
    }

    pub fn site_mut(&mut self, i: usize) -> &mut Site {
        &mut self.sites[i]
    }

    /// The proxy `dialer`'s `--peer` names for `accepter` (it carries `accepter`'s ops).
    pub fn proxy(&self, dialer: usize, accepter: usize) -> &Proxy {
        self.proxies
            .get(&(dialer, accepter))
            .unwrap_or_else(|| panic!("no proxy on link {dialer}→{accepter}"))
    }

    /// Cuts both links between `x` and `y`.
    pub fn partition(&self, x: usize, y: usize) {
        self.proxy(x, y).partition();
        self.proxy(y, x).partition();
    }

    pub fn heal(&self, x: usize, y: usize) {
        self.proxy(x, y).heal();
        self.proxy(y, x).heal();
    }

    /// Cuts every link of `x`.
    pub fn isolate(&self, x: usize) {
        for (&(d, a), p) in &self.proxies {
            if d == x || a == x {
                p.partition();
            }
        }
    }

    pub fn heal_all(&self) {
        for p in self.proxies.values() {
            p.heal();
        }
    }

    /// Every site, for [`wait_converged`].
    pub fn all(&self) -> Vec<&Site> {
        self.sites.iter().collect()
    }

    /// Waits until every link between the sites is up both ways.
    pub fn wait_links_up(&self, timeout: Duration) {
        wait_links_up(&self.all(), timeout);
    }

    /// [`wait_converged`] over every site.
    pub fn wait_converged(&self, timeout: Duration) -> Duration {
        wait_converged(&self.all(), timeout)
    }
}

/// Whether every site's link to every other site in `sites` is up both ways; else a reason.
fn links_state(sites: &[&Site], need_acked: bool) -> Result<(), String> {
    for s in sites {
        let info = s.info_crdt();
        for o in sites {
            if o.id == s.id {
                continue;
            }
            let Some(line) = info.get(&format!("crdt_peer_{}", o.id)) else {
                return Err(format!("{} has no peer {}", s.id, o.id));
            };
            let p = parse_peer_line(line);
            let get = |k: &str| p.get(k).map(String::as_str).unwrap_or("?");
            if get("in_link") != "up" || get("out_link") != "up" {
                return Err(format!(
                    "{}→{}: in_link={} out_link={} last_error={}",
                    s.id,
                    o.id,
                    get("in_link"),
                    get("out_link"),
                    get("last_error")
                ));
            }
            if need_acked && get("lag_ops") != "0" {
                return Err(format!(
                    "{}: peer {} lag_ops={}",
                    s.id,
                    o.id,
                    get("lag_ops")
                ));
            }
        }
    }
    Ok(())
}

/// Waits until every link between `sites` is up both ways; panics with `INFO crdt` and the
/// logs after `timeout`.
pub fn wait_links_up(sites: &[&Site], timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let state = links_state(sites, false);
        if state.is_ok() {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "links not up within {timeout:?}: {}\n{}",
                state.unwrap_err(),
                report(sites)
            );
        }
        std::thread::sleep(POLL);
    }
}

/// Waits until `sites` have converged: every link up, every peer acked every op (`lag_ops`
/// 0), then `CRDT.DIGEST` equal on all. Returns how long it took; panics after `timeout` with
/// the slots whose digests differ, the keys one site has and another lacks, `INFO crdt` and
/// the end of every log.
pub fn wait_converged(sites: &[&Site], timeout: Duration) -> Duration {
    let start = Instant::now();
    let deadline = start + timeout;
    loop {
        let last = match links_state(sites, true) {
            Ok(()) => {
                let digests: Vec<String> = sites.iter().map(|s| s.digest()).collect();
                if digests.iter().all(|d| *d == digests[0]) {
                    return start.elapsed();
                }
                format!("digests differ: {digests:?}")
            }
            Err(e) => e,
        };
        if Instant::now() > deadline {
            panic!(
                "sites did not converge within {timeout:?}: {last}\n{}\n{}",
                slot_diff(sites),
                report(sites)
            );
        }
        std::thread::sleep(POLL);
    }
}

/// The slots whose digests differ between sites, and keys present at one site only.
pub fn slot_diff(sites: &[&Site]) -> String {
    let per_site: Vec<BTreeMap<i64, (i64, String)>> =
        sites.iter().map(|s| s.slot_digests()).collect();
    let slots: BTreeSet<i64> = per_site.iter().flat_map(|m| m.keys().copied()).collect();
    let mut out = String::from("slots that differ (slot: per site keys/digest):\n");
    let mut shown = 0;
    for slot in slots {
        let vals: Vec<Option<&(i64, String)>> = per_site.iter().map(|m| m.get(&slot)).collect();
        if vals.iter().all(|v| *v == vals[0]) {
            continue;
        }
        shown += 1;
        if shown > 20 {
            out.push_str("  …\n");
            break;
        }
        out.push_str(&format!("  {slot}:"));
        for (s, v) in sites.iter().zip(&vals) {
            match v {
                Some((k, d)) => out.push_str(&format!(" {}={k}/{d}", s.id)),
                None => out.push_str(&format!(" {}=-", s.id)),
            }
        }
        out.push('\n');
    }
    let keys: Vec<BTreeSet<String>> = sites.iter().map(|s| s.keys()).collect();
    if keys.iter().map(BTreeSet::len).sum::<usize>() < 100_000 {
        for (i, s) in sites.iter().enumerate() {
            for (j, o) in sites.iter().enumerate() {
                if i == j {
                    continue;
                }
                let only: Vec<&String> = keys[i].difference(&keys[j]).take(20).collect();
                if !only.is_empty() {
                    out.push_str(&format!("keys at {} missing at {}: {only:?}\n", s.id, o.id));
                }
            }
        }
    }
    out
}

/// `INFO crdt` and the end of the log of every site.
pub fn report(sites: &[&Site]) -> String {
    let mut out = String::new();
    for s in sites {
        let info = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.info_crdt()))
            .map(|m| {
                m.iter()
                    .map(|(k, v)| format!("  {k}:{v}"))
                    .collect::<Vec<_>>()
                    .join("\n")
            })
            .unwrap_or_else(|_| "  (INFO crdt failed)".to_string());
        out.push_str(&format!(
            "--- site {} (port {}, sync {}) INFO crdt:\n{info}\n--- log tail:\n{}\n",
            s.id,
            s.port,
            s.sync_port,
            s.log_tail(40)
        ));
    }
    out
}

// The tests that drive sites and disks poll through this module's name too.
#[allow(unused_imports)]
pub use super::eventually;

/// Parses a reply, for callers holding raw bytes.
pub fn parsed(bytes: &[u8]) -> Reply {
    parse_reply(bytes)
}

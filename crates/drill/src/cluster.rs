//! One drill cluster: N sites (a, b, c...), a fault proxy on every sync link, and optionally
//! their namespaces; faults by link or site; convergence waits and state reads.
//!
//! Namespace mode: site i lives in its namespace at 10.77.0.(i+1); its clients use 127.0.0.1:7001
//! there, its sync port is 10.77.0.(i+1):7101, and the proxy for its link to site j listens on
//! 127.0.0.1:(7200+j) in its namespace and dials 10.77.0.(j+1):7101. Sync runs over mutual TLS.
//! Loopback mode: the same on 127.0.0.1 with free ports. Fields drop in order: sites (killed),
//! proxies (closed), namespaces (deleted).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::check::{State, Value};
use crate::netns::{self, NetnsSet, NftRules};
use crate::proxy::{Dir, Proxy};
use crate::resp::Reply;
use crate::site::{Site, SiteSpec, parse_peer_line};
use crate::tls;
use crate::workload::Endpoint;

mod membership;

/// Client port of every site in namespace mode.
const NS_CLIENT_PORT: u16 = 7001;
const NS_SYNC_PORT: u16 = 7101;
const NS_PROXY_PORT_BASE: u16 = 7200;
/// Poll period of the waits here.
const POLL: Duration = Duration::from_millis(100);
/// Most keys `read_state` reads (a bigger keyspace is compared by digest only).
pub const STATE_KEYS_MAX: usize = 200_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetMode {
    Netns,
    Loopback,
}

/// How to build a cluster.
#[derive(Clone, Debug, Default)]
pub struct Options {
    pub sites: usize,
    pub seed: u64,
    /// Flags for every site, and per site (by index) after them.
    pub flags: Vec<String>,
    pub site_flags: BTreeMap<usize, Vec<String>>,
    /// Base one-way latency and jitter of every link direction, in ms.
    pub one_way_ms: u64,
    pub jitter_ms: u64,
    /// Which sites each site lists as peers (by index); default: all the others.
    pub peers: BTreeMap<usize, Vec<usize>>,
    /// Sites `Cluster::start` leaves stopped (they join later: `membership`).
    pub later: Vec<usize>,
    /// Site ids beyond the cluster's that get a certificate from its CA (for a site that
    /// joins later under a new id: `Cluster::reset_site`).
    pub spare_ids: Vec<String>,
    /// A site that runs as two nodes (processes) of one shard each, from one topology file:
    /// node n1 serves the site's client address and sync port (its `Site`), n2 is
    /// `Cluster::nodes[i]`; other sites' links to n2's shard reach it through n1.
    pub two_nodes: Option<usize>,
}

/// See [`Cluster::stage`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stage {
    LinksDown(String),
    Lagging(String),
    DigestsDiffer(String),
    Converged,
}

/// How long convergence took from the start of the wait, and when every link was first up.
#[derive(Clone, Copy, Debug)]
pub struct Converged {
    pub total: Duration,
    pub links_up: Duration,
}

/// Sync counters of one site's view of one peer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SyncCounts {
    pub full_in: u64,
    pub partial_in: u64,
    pub full_out: u64,
    pub partial_out: u64,
    /// Shard links from the peer into this site: every shard of a site dials every shard of
    /// the peer (docs/replication.md §1), and the counters above are their sums.
    pub links: u64,
}

pub struct Cluster {
    pub sites: Vec<Site>,
    /// The second node of a two-node site (`Options::two_nodes`), by site index. Dropped
    /// (killed) right after the sites, before the proxies and namespaces.
    pub nodes: BTreeMap<usize, Site>,
    proxies: BTreeMap<(usize, usize), Proxy>,
    nft: Vec<NftRules>,
    pub nft_ok: Result<(), String>,
    netns: Option<NetnsSet>,
    pub ids: Vec<String>,
}

/// A free loopback port below the kernel's ephemeral range (32768–60999 by default): a port
/// bound to 0 and released may be taken by an outgoing connection's local end before the
/// site binds it.
fn free_port() -> anyhow::Result<u16> {
    use std::hash::{BuildHasher as _, Hasher as _};
    const FIRST: u16 = 15_000;
    const SPAN: u16 = 17_000;
    static HANDED_OUT: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    // std's hasher keys are random per process: a start that differs between runs.
    let start = (std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
        % u64::from(SPAN)) as u16;
    let mut given = HANDED_OUT.lock().unwrap_or_else(|e| e.into_inner());
    for i in 0..SPAN {
        let port = FIRST + (start + i) % SPAN;
        if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.push(port);
            return Ok(port);
        }
    }
    anyhow::bail!("no free loopback port in {FIRST}..{}", FIRST + SPAN)
}

pub fn site_ids(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| ((b'a' + i as u8) as char).to_string())
        .collect()
}

/// Node n1's and n2's specs of a two-node site (`Options::two_nodes`): one topology file
/// (`site_dir/topology.toml`), one shard a node, n1 on the site's client address and sync
/// port. Nodes reach each other's endpoints and sync ports on 127.0.0.1 (both run in the
/// site's namespace), so the sync ports listen on every address of the namespace.
fn two_node_specs(
    ns: Option<String>,
    mode: NetMode,
    id: &str,
    (client, sync): (SocketAddr, SocketAddr),
    site_dir: &Path,
    deployment: &str,
    common: &[String],
) -> anyhow::Result<(SiteSpec, SiteSpec)> {
    // (main, endpoint, sync) ports of n1 and n2.
    let ports = match mode {
        NetMode::Netns => [
            (client.port(), NS_CLIENT_PORT + 10, sync.port()),
            (NS_CLIENT_PORT + 1, NS_CLIENT_PORT + 11, NS_SYNC_PORT + 1),
        ],
        NetMode::Loopback => [
            (client.port(), free_port()?, sync.port()),
            (free_port()?, free_port()?, free_port()?),
        ],
    };
    let mut topology = String::from("epoch = 1\n");
    for (k, (main, endpoint, sync_port)) in ports.iter().enumerate() {
        topology.push_str(&format!(
            "[[node]]\nname = \"n{}\"\nip = \"127.0.0.1\"\nport = {main}\nendpoint-port = {endpoint}\nsync-port = {sync_port}\nshards = 1\n",
            k + 1
        ));
    }
    let file = site_dir.join("topology.toml");
    std::fs::write(&file, topology).with_context(|| format!("write {}", file.display()))?;
    let sync_bind = match mode {
        NetMode::Netns => "0.0.0.0",
        NetMode::Loopback => "127.0.0.1",
    };
    let spec = |k: usize, main: u16| -> SiteSpec {
        let (data, log) = match k {
            1 => ("data".to_string(), "server.log".to_string()),
            _ => (format!("data-n{k}"), format!("server-n{k}.log")),
        };
        let mut args: Vec<String> = vec![
            "server".into(),
            "--site".into(),
            id.to_string(),
            "--topology".into(),
            file.display().to_string(),
            "--node".into(),
            format!("n{k}"),
            "--bind".into(),
            client.ip().to_string(),
            "--sync-bind".into(),
            sync_bind.into(),
            "--dir".into(),
            site_dir.join(&data).display().to_string(),
            "--deployment-id".into(),
            deployment.to_string(),
        ];
        args.extend(common.iter().cloned());
        SiteSpec {
            id: id.to_string(),
            ns: ns.clone(),
            client: SocketAddr::new(client.ip(), main),
            args,
            dir: site_dir.join(data),
            log: site_dir.join(log),
        }
    };
    let [(m1, _, _), (m2, _, _)] = ports;
    Ok((spec(1, m1), spec(2, m2)))
}

impl Cluster {
    /// Creates the namespaces (in `Netns` mode), the certificates, the proxies and the sites,
    /// and starts every site. `tag` makes namespace names unique to this run.
    pub fn start(
        opts: &Options,
        bin: &Path,
        dir: &Path,
        mode: NetMode,
        tag: &str,
    ) -> anyhow::Result<Cluster> {
        let n = opts.sites;
        if !(2..=netns::SITES_MAX).contains(&n) {
            bail!("--sites must be between 2 and {}", netns::SITES_MAX);
        }
        let ids = site_ids(n);
        std::fs::create_dir_all(dir)?;
        let netns = match mode {
            NetMode::Netns => Some(NetnsSet::create(tag, &ids)?),
            NetMode::Loopback => None,
        };
        let mut cluster = Cluster {
            sites: Vec::new(),
            nodes: BTreeMap::new(),
            proxies: BTreeMap::new(),
            nft: vec![NftRules::default(); n],
            nft_ok: Err("loopback mode: no namespaces".to_string()),
            netns,
            ids: ids.clone(),
        };
        let certified: Vec<String> = ids.iter().chain(&opts.spare_ids).cloned().collect();
        let tls = tls::make(&dir.join("tls"), &certified)?;
        let lo = Ipv4Addr::LOCALHOST;
        let mut client = Vec::new();
        let mut sync = Vec::new();
        for i in 0..n {
            match mode {
                NetMode::Netns => {
                    client.push(SocketAddr::from((lo, NS_CLIENT_PORT)));
                    sync.push(SocketAddr::from((netns::site_ip(i), NS_SYNC_PORT)));
                }
                NetMode::Loopback => {
                    client.push(SocketAddr::from((lo, free_port()?)));
                    sync.push(SocketAddr::from((lo, free_port()?)));
                }
            }
        }
        for d in 0..n {
            for a in (0..n).filter(|&a| a != d) {
                let listen = match mode {
                    NetMode::Netns => SocketAddr::from((lo, NS_PROXY_PORT_BASE + a as u16)),
                    NetMode::Loopback => SocketAddr::from((lo, 0)),
                };
                let target = *sync.get(a).context("sync address")?;
                let name = format!(
                    "{}{}",
                    ids.get(d).map_or("?", String::as_str),
                    ids.get(a).map_or("?", String::as_str)
                );
                let seed = opts.seed ^ ((d as u64) << 32 | a as u64);
                let p = Proxy::start(&name, cluster.ns(d), listen, target, seed)
                    .with_context(|| format!("start proxy {name} on {listen}"))?;
                p.set_latency(Dir::Up, opts.one_way_ms, opts.jitter_ms);
                p.set_latency(Dir::Down, opts.one_way_ms, opts.jitter_ms);
                cluster.proxies.insert((d, a), p);
            }
        }
        for i in 0..n {
            let id = ids.get(i).cloned().unwrap_or_default();
            let (c, s) = (
                *client.get(i).context("client")?,
                *sync.get(i).context("sync")?,
            );
            let site_dir = dir.join(format!("site-{id}"));
            // The flags after a node's own: peers, TLS, every site's and this site's.
            let mut common: Vec<String> = Vec::new();
            let listed = opts
                .peers
                .get(&i)
                .cloned()
                .unwrap_or_else(|| (0..n).filter(|&a| a != i).collect());
            for a in listed {
                let p = cluster.proxies.get(&(i, a)).context("proxy")?;
                common.push("--peer".into());
                common.push(format!(
                    "{}={}",
                    ids.get(a).map_or("?", String::as_str),
                    p.listen
                ));
            }
            if let Some(t) = tls.get(i) {
                common.extend(t.flags());
            }
            common.extend(opts.flags.iter().cloned());
            common.extend(opts.site_flags.get(&i).cloned().unwrap_or_default());
            std::fs::create_dir_all(&site_dir)?;
            let deployment = format!("drill-{tag}");
            if opts.two_nodes == Some(i) {
                let ns = cluster.ns(i).map(str::to_string);
                let (n1, n2) =
                    two_node_specs(ns, mode, &id, (c, s), &site_dir, &deployment, &common)?;
                cluster.sites.push(Site::new(n1, bin));
                cluster.nodes.insert(i, Site::new(n2, bin));
                continue;
            }
            let mut args: Vec<String> = vec![
                "server".into(),
                "--site".into(),
                id.clone(),
                "--bind".into(),
                c.ip().to_string(),
                "--port".into(),
                c.port().to_string(),
                "--sync-bind".into(),
                s.ip().to_string(),
                "--sync-port".into(),
                s.port().to_string(),
                "--dir".into(),
                site_dir.join("data").display().to_string(),
                "--deployment-id".into(),
                deployment,
                // Cluster endpoints would take ports next to the client port, which another
                // site may hold in loopback mode; drills test replication, not that API.
                "--cluster-api".into(),
                "no".into(),
            ];
            args.extend(common);
            let spec = SiteSpec {
                id: id.clone(),
                ns: cluster.ns(i).map(str::to_string),
                client: c,
                args,
                dir: site_dir.join("data"),
                log: site_dir.join("server.log"),
            };
            cluster.sites.push(Site::new(spec, bin));
        }
        for (i, s) in cluster.sites.iter_mut().enumerate() {
            if !opts.later.contains(&i) {
                s.start()?;
                if let Some(n) = cluster.nodes.get_mut(&i) {
                    n.start()?;
                }
            }
        }
        if let Some(ns) = cluster.ns(0) {
            cluster.nft_ok = netns::nft_available(ns);
        }
        Ok(cluster)
    }

    /// Namespace of site `i` (None in loopback mode).
    pub fn ns(&self, i: usize) -> Option<&str> {
        self.netns.as_ref().and_then(|n| n.site(i))
    }

    pub fn n(&self) -> usize {
        self.sites.len()
    }

    pub fn id(&self, i: usize) -> &str {
        self.ids.get(i).map_or("?", String::as_str)
    }

    pub fn site(&self, i: usize) -> anyhow::Result<&Site> {
        self.sites.get(i).with_context(|| format!("no site {i}"))
    }

    /// Every server process with its site's index: the sites (a two-node site's n1), then
    /// the second nodes.
    pub fn processes(&self) -> impl Iterator<Item = (usize, &Site)> {
        self.sites
            .iter()
            .enumerate()
            .chain(self.nodes.iter().map(|(i, s)| (*i, s)))
    }

    /// Node n2 of two-node site `i`.
    pub fn node_mut(&mut self, i: usize) -> anyhow::Result<&mut Site> {
        self.nodes
            .get_mut(&i)
            .with_context(|| format!("site {i} runs as one node"))
    }

    pub fn site_mut(&mut self, i: usize) -> anyhow::Result<&mut Site> {
        self.sites
            .get_mut(i)
            .with_context(|| format!("no site {i}"))
    }

    pub fn endpoints(&self) -> Vec<Endpoint> {
        self.sites
            .iter()
            .enumerate()
            .map(|(i, s)| Endpoint {
                site: i,
                ns: s.spec.ns.clone(),
                addr: s.spec.client,
            })
            .collect()
    }

    fn proxy(&self, d: usize, a: usize) -> Option<&Proxy> {
        self.proxies.get(&(d, a))
    }

    fn pair_proxies(&self, x: usize, y: usize) -> impl Iterator<Item = &Proxy> {
        [self.proxy(x, y), self.proxy(y, x)].into_iter().flatten()
    }

    /// Cuts both links between `x` and `y` at the proxies.
    pub fn partition(&self, x: usize, y: usize) {
        self.pair_proxies(x, y).for_each(Proxy::partition);
    }

    /// Cuts the link `x` dials to `y` (it carries `y`'s ops to `x` and `x`'s acks to `y`) with
    /// an RST on its open connections, so both ends see it down at once; `y`'s link to `x`
    /// flows on.
    pub fn cut(&self, x: usize, y: usize) {
        if let Some(p) = self.proxy(x, y) {
            p.partition();
            p.reset();
        }
    }

    /// RST on every open connection of every link.
    pub fn reset_all(&self) -> usize {
        self.proxies.values().map(Proxy::reset).sum()
    }

    /// Cuts every link of `x`.
    pub fn isolate(&self, x: usize) {
        for y in (0..self.n()).filter(|&y| y != x) {
            self.partition(x, y);
        }
    }

    /// Bytes from `from` to `to` are dropped (both links between them carry some).
    pub fn one_way(&self, from: usize, to: usize, on: bool) {
        if let Some(p) = self.proxy(from, to) {
            p.blackhole(Dir::Up, on);
        }
        if let Some(p) = self.proxy(to, from) {
            p.blackhole(Dir::Down, on);
        }
    }

    pub fn stall(&self, x: usize, y: usize, on: bool) {
        for p in self.pair_proxies(x, y) {
            p.stall(Dir::Up, on);
            p.stall(Dir::Down, on);
        }
    }

    /// RST on every connection between `x` and `y`; returns how many were reset.
    pub fn reset(&self, x: usize, y: usize) -> usize {
        self.pair_proxies(x, y).map(Proxy::reset).sum()
    }

    pub fn set_latency(&self, x: usize, y: usize, one_way_ms: u64, jitter_ms: u64) {
        for p in self.pair_proxies(x, y) {
            p.set_latency(Dir::Up, one_way_ms, jitter_ms);
            p.set_latency(Dir::Down, one_way_ms, jitter_ms);
        }
    }

    pub fn set_bandwidth(&self, x: usize, y: usize, bytes_per_s: u64) {
        for p in self.pair_proxies(x, y) {
            p.set_bandwidth(Dir::Up, bytes_per_s);
            p.set_bandwidth(Dir::Down, bytes_per_s);
        }
    }

    fn apply_nft(&self, i: usize) -> anyhow::Result<()> {
        let (Some(ns), Some(rules)) = (self.ns(i), self.nft.get(i)) else {
            bail!("packet-level faults need namespaces");
        };
        netns::nft_apply(ns, rules)
    }

    /// Silent packet-level partition between `x` and `y` (nftables drop in both namespaces).
    pub fn nft_partition(&mut self, x: usize, y: usize) -> anyhow::Result<()> {
        for (a, b) in [(x, y), (y, x)] {
            if let Some(r) = self.nft.get_mut(a) {
                let ip = netns::site_ip(b);
                if !r.drop.contains(&ip) {
                    r.drop.push(ip);
                }
            }
            self.apply_nft(a)?;
        }
        Ok(())
    }

    /// Random loss of `pct` % of the packets `x` sends to any peer.
    pub fn nft_loss(&mut self, x: usize, pct: u8) -> anyhow::Result<()> {
        if let Some(r) = self.nft.get_mut(x) {
            r.loss_pct = pct;
        }
        self.apply_nft(x)
    }

    /// Heals every proxy (latency kept, bandwidth caps removed).
    pub fn heal_proxies(&self) {
        for p in self.proxies.values() {
            p.heal();
            p.set_bandwidth(Dir::Up, 0);
            p.set_bandwidth(Dir::Down, 0);
        }
    }

    /// Ends every fault: proxies healed (latency kept), nft tables deleted, paused sites resumed.
    pub fn heal_all(&mut self) -> anyhow::Result<()> {
        self.heal_proxies();
        for i in 0..self.n() {
            if self.nft.get(i).is_some_and(|r| !r.is_empty()) {
                if let Some(r) = self.nft.get_mut(i) {
                    *r = NftRules::default();
                }
                self.apply_nft(i)?;
            }
        }
        for s in &mut self.sites {
            if s.paused {
                s.resume()?;
            }
        }
        Ok(())
    }

    /// What the proxies did (connections, refusals, resets, dropped bytes), summed.
    pub fn proxy_summary(&self) -> String {
        use std::sync::atomic::Ordering::Relaxed;
        let (mut conns, mut refused, mut resets, mut bytes, mut dropped) = (0, 0, 0, 0, 0);
        for p in self.proxies.values() {
            let s = p.stats();
            conns += s.connections.load(Relaxed);
            refused += s.refused.load(Relaxed);
            resets += s.resets.load(Relaxed);
            bytes += s.bytes.iter().map(|b| b.load(Relaxed)).sum::<u64>();
            dropped += s.dropped.iter().map(|b| b.load(Relaxed)).sum::<u64>();
        }
        format!(
            "{conns} connections, {refused} refused, {resets} reset, {bytes} bytes forwarded, {dropped} bytes dropped"
        )
    }

    /// Sync counters per `(site, peer)` from `INFO crdt`.
    pub fn sync_counts(&self) -> anyhow::Result<BTreeMap<(usize, usize), SyncCounts>> {
        let mut out = BTreeMap::new();
        for (i, s) in self.sites.iter().enumerate() {
            let info = s.info_crdt()?;
            // A server without the field runs one shard.
            let shards = info
                .get("crdt_shards")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(1);
            for j in (0..self.n()).filter(|&j| j != i) {
                let line = info
                    .get(&format!("crdt_peer_{}", self.id(j)))
                    .with_context(|| format!("site {} has no crdt_peer_{}", s.id(), self.id(j)))?;
                let p = parse_peer_line(line);
                let g = |k: &str| p.get(k).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
                let peer_shards = p
                    .get("shards")
                    .and_then(|v| v.parse::<u64>().ok())
                    .unwrap_or(1);
                out.insert(
                    (i, j),
                    SyncCounts {
                        full_in: g("full_syncs_in"),
                        partial_in: g("partial_syncs_in"),
                        full_out: g("full_syncs_out"),
                        partial_out: g("partial_syncs_out"),
                        links: shards * peer_shards,
                    },
                );
            }
        }
        Ok(out)
    }

    /// How far the cluster is from converged: links down, links up but peers not caught up
    /// (`lag_ops` > 0), digests differing, or converged.
    pub fn stage(&self) -> anyhow::Result<Stage> {
        let mut lagging = None;
        for (i, s) in self.processes() {
            let info = s.info_crdt()?;
            for j in (0..self.n()).filter(|&j| j != i) {
                let Some(line) = info.get(&format!("crdt_peer_{}", self.id(j))) else {
                    return Ok(Stage::LinksDown(format!(
                        "{} has no peer {}",
                        s.id(),
                        self.id(j)
                    )));
                };
                let p = parse_peer_line(line);
                let g = |k: &str| p.get(k).map_or("?", String::as_str);
                if g("in_link") != "up" || g("out_link") != "up" {
                    return Ok(Stage::LinksDown(format!(
                        "{}→{}: in_link={} out_link={} last_error={}",
                        s.id(),
                        self.id(j),
                        g("in_link"),
                        g("out_link"),
                        g("last_error")
                    )));
                }
                if g("lag_ops") != "0" && lagging.is_none() {
                    lagging = Some(format!(
                        "{}: peer {} lag_ops={}",
                        s.id(),
                        self.id(j),
                        g("lag_ops")
                    ));
                }
            }
        }
        if let Some(why) = lagging {
            return Ok(Stage::Lagging(why));
        }
        let digests = self
            .sites
            .iter()
            .map(Site::digest)
            .collect::<anyhow::Result<Vec<_>>>()?;
        if digests.iter().any(|d| Some(d) != digests.first()) {
            return Ok(Stage::DigestsDiffer(format!("digests differ: {digests:?}")));
        }
        Ok(Stage::Converged)
    }

    /// Polls until converged; returns how long it took (and when every link was first up), or
    /// the last reason after `timeout`.
    pub fn wait_converged(
        &self,
        timeout: Duration,
        stop: &dyn Fn() -> bool,
    ) -> anyhow::Result<Result<Converged, String>> {
        let start = Instant::now();
        let mut links_up = None;
        // Bounded by `timeout`.
        loop {
            let last = match self.stage() {
                Ok(Stage::Converged) => {
                    let total = start.elapsed();
                    return Ok(Ok(Converged {
                        total,
                        links_up: links_up.unwrap_or(total),
                    }));
                }
                Ok(Stage::LinksDown(why)) => why,
                Ok(Stage::Lagging(why) | Stage::DigestsDiffer(why)) => {
                    links_up.get_or_insert(start.elapsed());
                    why
                }
                Err(e) => format!("{e:#}"),
            };
            if start.elapsed() > timeout || stop() {
                return Ok(Err(last));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits until every link is up (not necessarily caught up).
    pub fn wait_links_up(&self, timeout: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        loop {
            let mut down = None;
            for (i, s) in self.processes() {
                let info = s.info_crdt()?;
                for j in (0..self.n()).filter(|&j| j != i) {
                    let p = parse_peer_line(
                        info.get(&format!("crdt_peer_{}", self.id(j)))
                            .map_or("", String::as_str),
                    );
                    if p.get("in_link").map(String::as_str) != Some("up")
                        || p.get("out_link").map(String::as_str) != Some("up")
                    {
                        down = Some(format!("{}→{}", s.id(), self.id(j)));
                    }
                }
            }
            let Some(d) = down else { return Ok(()) };
            if start.elapsed() > timeout {
                bail!("link {d} not up within {timeout:?}");
            }
            std::thread::sleep(POLL);
        }
    }

    /// Every key of site `i` with its value (SCAN, then TYPE and a read per key, pipelined).
    pub fn read_state(&self, i: usize) -> anyhow::Result<State> {
        let site = self.site(i)?;
        let mut conn = site.connect(crate::site::ADMIN_TIMEOUT)?;
        let mut keys: Vec<String> = Vec::new();
        let mut cursor = "0".to_string();
        for _ in 0..100_000 {
            let r = conn.cmd(&["SCAN", &cursor, "COUNT", "1000"])?;
            let Reply::Array(Some(parts)) = r else {
                bail!("SCAN answered {r:?}");
            };
            let (Some(c), Some(page)) = (parts.first(), parts.get(1)) else {
                bail!("SCAN answered {parts:?}");
            };
            cursor = c.bulk_str().unwrap_or_else(|| "0".into());
            keys.extend(page.strings());
            if cursor == "0" || keys.len() > STATE_KEYS_MAX {
                break;
            }
        }
        keys.sort();
        keys.dedup();
        let mut state = State::new();
        for chunk in keys.chunks(500) {
            let types = conn.pipeline(
                &chunk
                    .iter()
                    .map(|k| vec!["TYPE".into(), k.clone()])
                    .collect::<Vec<_>>(),
            )?;
            let mut reads = Vec::new();
            let mut which = Vec::new();
            for (k, t) in chunk.iter().zip(&types) {
                let t = t.bulk_str().unwrap_or_default();
                let cmd: Vec<String> = match t.as_str() {
                    "string" => vec!["GET".into(), k.clone()],
                    "set" => vec!["SMEMBERS".into(), k.clone()],
                    "hash" => vec!["HGETALL".into(), k.clone()],
                    "zset" => vec![
                        "ZRANGE".into(),
                        k.clone(),
                        "0".into(),
                        "-1".into(),
                        "WITHSCORES".into(),
                    ],
                    "list" => vec!["LRANGE".into(), k.clone(), "0".into(), "-1".into()],
                    "none" => continue,
                    other => {
                        state.insert(k.clone(), Value::Other(other.to_string()));
                        continue;
                    }
                };
                reads.push(cmd);
                which.push((k.clone(), t));
            }
            let replies = conn.pipeline(&reads)?;
            for ((k, t), r) in which.into_iter().zip(replies) {
                let v = match (t.as_str(), &r) {
                    (_, Reply::Bulk(None)) => continue,
                    // A HyperLogLog: its registers as text, then its bytes (sites agree on
                    // both, sparse layout and cache flag included: docs/conflicts.md §12).
                    ("string", Reply::Bulk(Some(b))) if b.starts_with(b"HYLL") => {
                        Value::Str(format!("{} bytes={}", hll_registers(b), hex(b)))
                    }
                    ("string", _) => Value::Str(r.bulk_str().unwrap_or_default()),
                    ("set", _) => Value::Set(r.strings().into_iter().collect()),
                    ("list", _) => Value::List(r.strings()),
                    ("hash" | "zset", _) => {
                        let items = r.strings();
                        let pairs: BTreeMap<String, String> = items
                            .chunks(2)
                            .filter_map(|p| Some((p.first()?.clone(), p.get(1)?.clone())))
                            .collect();
                        if pairs.is_empty() {
                            continue;
                        }
                        if t == "hash" {
                            Value::Hash(pairs)
                        } else {
                            Value::Zset(pairs)
                        }
                    }
                    _ => Value::Other(t.clone()),
                };
                if matches!(&v, Value::Set(s) if s.is_empty())
                    || matches!(&v, Value::List(l) if l.is_empty())
                {
                    continue;
                }
                state.insert(k, v);
            }
        }
        Ok(state)
    }

    /// Slots whose digests differ, and the keys in them with each site's value (bounded).
    pub fn slot_diff(&self) -> String {
        let per_site: Vec<BTreeMap<i64, (i64, String)>> = self
            .sites
            .iter()
            .map(|s| s.slot_digests().unwrap_or_default())
            .collect();
        let mut bad: Vec<i64> = per_site
            .iter()
            .flat_map(|m| m.keys().copied())
            .filter(|slot| {
                let v: Vec<Option<&(i64, String)>> = per_site.iter().map(|m| m.get(slot)).collect();
                v.iter().any(|x| Some(x) != v.first())
            })
            .collect();
        bad.sort_unstable();
        bad.dedup();
        let mut out = format!(
            "{} slots differ: {:?}\n",
            bad.len(),
            bad.iter().take(20).collect::<Vec<_>>()
        );
        let states: Vec<State> = (0..self.n())
            .map(|i| self.read_state(i).unwrap_or_default())
            .collect();
        let mut shown = 0;
        let mut keys: Vec<&String> = states.iter().flat_map(|s| s.keys()).collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            if !bad.contains(&i64::from(crate::check::slot(k.as_bytes()))) {
                continue;
            }
            let vals: Vec<Option<&Value>> = states.iter().map(|s| s.get(k)).collect();
            if vals.iter().all(|v| Some(v) == vals.first()) {
                continue;
            }
            shown += 1;
            if shown > 30 {
                out.push_str("  …\n");
                break;
            }
            out.push_str(&format!("  key {k}:"));
            for (i, v) in vals.iter().enumerate() {
                out.push_str(&format!(" {}={v:?}", self.id(i)));
            }
            out.push('\n');
        }
        out
    }

    /// Sites whose process ended by itself (crashes), with their log tails.
    pub fn crashed(&mut self) -> Vec<String> {
        let mut out = Vec::new();
        for s in self.sites.iter_mut().chain(self.nodes.values_mut()) {
            if let Some(status) = s.exited() {
                out.push(format!(
                    "site {} exited with {status}; log tail:\n{}",
                    s.id(),
                    s.log_tail(20)
                ));
            }
        }
        out
    }
}

/// Bytes as lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A HyperLogLog's non-zero registers as text (`hll index=count ...`), or its bytes when they
/// do not decode.
fn hll_registers(bytes: &[u8]) -> String {
    match meridian_crdt::hll::registers(bytes) {
        Ok(r) => {
            let mut out = String::from("hll");
            for (i, c) in r.iter().enumerate().filter(|(_, c)| **c != 0) {
                out.push_str(&format!(" {i}={c}"));
            }
            out
        }
        Err(_) => String::from_utf8_lossy(bytes).into_owned(),
    }
}

//! The Redis Cluster view of a site: one cluster node per shard, each with its own endpoint
//! (address and port) and a stable 40-hex node id, and the slot map that says which slots
//! each serves.
//!
//! Node ids are derived from the deployment id, the site id and the shard's index, so they
//! are the same across restarts and in every listing (CLUSTER SLOTS, SHARDS, NODES, MYID).

use crate::slot::SlotMap;

/// One cluster node: a shard's endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: String,
    pub port: u16,
    pub id: String,
}

/// What the cluster API says of the site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMap {
    /// By shard index.
    pub endpoints: Vec<Endpoint>,
    /// Configuration epoch of the slot map (0 until a topology change bumps it).
    pub epoch: u64,
}

/// The node id of shard `shard` of `site` in `deployment`: 160 bits of FNV-1a over the
/// three, in 40 lowercase hex characters (Redis's node id format).
pub fn node_id(deployment: &str, site: &str, shard: u16) -> String {
    let mut input = Vec::with_capacity(deployment.len() + site.len() + 4);
    input.extend_from_slice(deployment.as_bytes());
    input.push(0);
    input.extend_from_slice(site.as_bytes());
    input.push(0);
    input.extend_from_slice(&shard.to_le_bytes());
    let mut out = String::with_capacity(40);
    for lane in 0u32..5 {
        let mut h: u32 = 0x811c_9dc5 ^ lane.wrapping_mul(0x9e37_79b9);
        for b in &input {
            h ^= u32::from(*b);
            h = h.wrapping_mul(0x0100_0193);
        }
        // One more mix so lanes differ in every bit.
        h ^= h >> 15;
        h = h.wrapping_mul(0x2c1b_3c6d);
        h ^= h >> 12;
        out.push_str(&format!("{h:08x}"));
    }
    out
}

impl ClusterMap {
    /// The endpoints of `shards` shards: `ip`, ports from `first_port`, ids from the site.
    pub fn new(deployment: &str, site: &str, ip: &str, ports: &[u16]) -> ClusterMap {
        let endpoints = ports
            .iter()
            .enumerate()
            .map(|(i, &port)| Endpoint {
                ip: ip.to_string(),
                port,
                id: node_id(deployment, site, i as u16),
            })
            .collect();
        ClusterMap {
            endpoints,
            epoch: 0,
        }
    }

    pub fn endpoint(&self, shard: u16) -> Option<&Endpoint> {
        self.endpoints.get(usize::from(shard))
    }

    /// `-MOVED slot ip:port` for `slot`, owned by `shard`.
    pub fn moved(&self, slot: u16, shard: u16) -> String {
        match self.endpoint(shard) {
            Some(e) => format!("MOVED {slot} {}:{}", e.ip, e.port),
            None => "CLUSTERDOWN Hash slot not served".to_string(),
        }
    }

    /// The config epoch of a node: shards are distinct masters, each its own epoch.
    pub fn node_epoch(&self, shard: u16) -> u64 {
        self.epoch + u64::from(shard) + 1
    }

    /// The current epoch: the highest node epoch.
    pub fn current_epoch(&self) -> u64 {
        self.epoch + self.endpoints.len() as u64
    }

    /// CLUSTER NODES text: one line per node ending in `\n`, `myself` flagging `me`.
    pub fn nodes_text(&self, slots: &SlotMap, me: Option<u16>) -> String {
        let ranges = slots.ranges();
        let mut out = String::new();
        for (i, e) in self.endpoints.iter().enumerate() {
            let shard = i as u16;
            let flags = if me == Some(shard) {
                "myself,master"
            } else {
                "master"
            };
            out.push_str(&format!(
                "{} {}:{}@0 {flags} - 0 0 {} connected",
                e.id,
                e.ip,
                e.port,
                self.node_epoch(shard)
            ));
            for (a, b, o) in &ranges {
                if *o == shard {
                    if a == b {
                        out.push_str(&format!(" {a}"));
                    } else {
                        out.push_str(&format!(" {a}-{b}"));
                    }
                }
            }
            out.push('\n');
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_are_stable_hex_and_distinct() {
        let a = node_id("meridian", "a", 0);
        assert_eq!(a.len(), 40);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
        assert_eq!(a, node_id("meridian", "a", 0));
        assert_ne!(a, node_id("meridian", "a", 1));
        assert_ne!(a, node_id("meridian", "b", 0));
        assert_ne!(a, node_id("other", "a", 0));
    }

    #[test]
    fn nodes_text_like_redis() {
        let m = ClusterMap::new("d", "a", "127.0.0.1", &[7001, 7002]);
        let text = m.nodes_text(&SlotMap::contiguous(2), Some(1));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(text.ends_with('\n'));
        assert!(lines[0].ends_with(" 127.0.0.1:7001@0 master - 0 0 1 connected 0-8191"));
        assert!(lines[1].ends_with(" 127.0.0.1:7002@0 myself,master - 0 0 2 connected 8192-16383"));
        assert_eq!(m.moved(9000, 1), "MOVED 9000 127.0.0.1:7002");
    }
}

// ---------------------------------------------------------------------------------------
// A site across several nodes

/// Most nodes a site may list.
pub const NODES_MAX: usize = 64;
/// Bytes of a topology file read at most.
pub const TOPOLOGY_BYTES_MAX: u64 = 1024 * 1024;

/// One node of a site in the topology file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct NodeSpec {
    pub name: String,
    /// Where other nodes and cluster clients reach it.
    pub ip: String,
    /// Its main client port.
    pub port: u16,
    /// Its first shard's cluster endpoint; its shards listen on consecutive ports.
    pub endpoint_port: u16,
    /// Its sync port (other sites may dial any node: each forwards to the shard's node).
    #[serde(default)]
    pub sync_port: u16,
    /// How many shards it runs.
    pub shards: u16,
}

/// One slot range's owner in the topology file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotsSpec {
    /// "first-last" or a single slot.
    pub range: String,
    pub shard: u16,
}

/// The topology file: identical on every node of the site.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopologyFile {
    /// Changes only upward; nodes of two epochs refuse each other's links.
    pub epoch: u64,
    #[serde(rename = "node")]
    pub nodes: Vec<NodeSpec>,
    /// Slot ranges by global shard index; absent: contiguous over every shard in node order.
    #[serde(default)]
    pub slots: Vec<SlotsSpec>,
}

/// Why a topology cannot be used; each names the problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("topology file {path}: {message}")]
    Read { path: String, message: String },
    #[error("topology: {0}")]
    Parse(String),
    #[error("topology: epoch must be at least 1")]
    Epoch,
    #[error("topology: no node")]
    NoNode,
    #[error("topology: {n} nodes, at most {NODES_MAX}")]
    TooManyNodes { n: usize },
    #[error("topology: node {name:?} is listed twice")]
    DuplicateNode { name: String },
    #[error("topology: node {name:?}: {message}")]
    Node { name: String, message: String },
    #[error("topology: node {name:?} is not in the file (nodes: {known})")]
    UnknownNode { name: String, known: String },
    #[error("topology: {total} shards, at most {max}")]
    TooManyShards { total: usize, max: usize },
    #[error("topology: slot ranges: {0}")]
    Slots(#[from] crate::slot::SlotMapError),
    #[error("topology: epoch {got} is not above the current epoch {current}")]
    StaleEpoch { got: u64, current: u64 },
}

/// A site's topology, checked: its nodes, where each shard is, the slot map and the epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub epoch: u64,
    pub nodes: Vec<NodeSpec>,
    /// Global index of each node's first shard.
    pub first: Vec<u16>,
    pub slots: SlotMap,
}

impl Topology {
    /// Parses and checks a topology file's text.
    pub fn parse(text: &str) -> Result<Topology, TopologyError> {
        let file: TopologyFile =
            toml::from_str(text).map_err(|e| TopologyError::Parse(e.to_string()))?;
        Topology::check(file)
    }

    /// Reads a topology file.
    pub fn read(path: &std::path::Path) -> Result<Topology, TopologyError> {
        let err = |message: String| TopologyError::Read {
            path: path.display().to_string(),
            message,
        };
        let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
        if meta.len() > TOPOLOGY_BYTES_MAX {
            return Err(err(format!("larger than {TOPOLOGY_BYTES_MAX} bytes")));
        }
        let text = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
        Topology::parse(&text)
    }

    fn check(file: TopologyFile) -> Result<Topology, TopologyError> {
        if file.epoch == 0 {
            return Err(TopologyError::Epoch);
        }
        if file.nodes.is_empty() {
            return Err(TopologyError::NoNode);
        }
        if file.nodes.len() > NODES_MAX {
            return Err(TopologyError::TooManyNodes {
                n: file.nodes.len(),
            });
        }
        let mut first = Vec::with_capacity(file.nodes.len());
        let mut total = 0usize;
        for (i, n) in file.nodes.iter().enumerate() {
            let bad = |message: String| TopologyError::Node {
                name: n.name.clone(),
                message,
            };
            if file.nodes.iter().take(i).any(|m| m.name == n.name) {
                return Err(TopologyError::DuplicateNode {
                    name: n.name.clone(),
                });
            }
            if n.name.is_empty() || n.name.len() > 64 {
                return Err(bad("a name of 1 to 64 characters".to_string()));
            }
            if n.ip.parse::<std::net::IpAddr>().is_err() {
                return Err(bad(format!("ip {:?} is not an IP address", n.ip)));
            }
            if n.shards == 0 {
                return Err(bad("shards must be at least 1".to_string()));
            }
            if n.port == 0 || n.endpoint_port == 0 {
                return Err(bad("port and endpoint-port must not be 0".to_string()));
            }
            if u32::from(n.endpoint_port) + u32::from(n.shards) > 65_536 {
                return Err(bad(format!(
                    "endpoint ports {} + {} shards go beyond 65535",
                    n.endpoint_port, n.shards
                )));
            }
            first.push(total as u16);
            total += usize::from(n.shards);
            if total > crate::slot::SHARDS_MAX {
                return Err(TopologyError::TooManyShards {
                    total,
                    max: crate::slot::SHARDS_MAX,
                });
            }
        }
        let slots = if file.slots.is_empty() {
            SlotMap::contiguous(total as u16)
        } else {
            let mut ranges = Vec::with_capacity(file.slots.len());
            for s in &file.slots {
                let (a, b) = match s.range.split_once('-') {
                    Some((a, b)) => (a.trim(), b.trim()),
                    None => (s.range.trim(), s.range.trim()),
                };
                let parse = |v: &str| {
                    v.parse::<u16>()
                        .ok()
                        .filter(|x| usize::from(*x) < crate::slot::SLOTS)
                        .ok_or_else(|| crate::slot::SlotMapError::BadRange {
                            text: s.range.clone(),
                        })
                };
                let (a, b) = (parse(a)?, parse(b)?);
                if a > b {
                    return Err(crate::slot::SlotMapError::BadRange {
                        text: s.range.clone(),
                    }
                    .into());
                }
                ranges.push((a, b, s.shard));
            }
            SlotMap::from_ranges(total as u16, &ranges)?
        };
        Ok(Topology {
            epoch: file.epoch,
            nodes: file.nodes,
            first,
            slots,
        })
    }

    /// The index of the node named `name`.
    pub fn node_index(&self, name: &str) -> Result<usize, TopologyError> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .ok_or_else(|| TopologyError::UnknownNode {
                name: name.to_string(),
                known: self
                    .nodes
                    .iter()
                    .map(|n| n.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Total shards of the site.
    pub fn shards(&self) -> u16 {
        self.slots.shards()
    }

    /// The node that runs global shard `shard`.
    pub fn node_of(&self, shard: u16) -> Option<usize> {
        (0..self.nodes.len()).find(|&i| {
            let f = self.first.get(i).copied().unwrap_or(0);
            let n = self.nodes.get(i).map_or(0, |n| n.shards);
            shard >= f && shard < f + n
        })
    }

    /// The cluster endpoint of global shard `shard`: "ip:port".
    pub fn endpoint_addr(&self, shard: u16) -> Option<String> {
        let i = self.node_of(shard)?;
        let n = self.nodes.get(i)?;
        let f = self.first.get(i)?;
        Some(format!("{}:{}", n.ip, n.endpoint_port + (shard - f)))
    }

    /// The cluster view: every shard's endpoint, ids from the site.
    pub fn cluster_map(&self, deployment: &str, site: &str) -> ClusterMap {
        let mut endpoints = Vec::with_capacity(usize::from(self.shards()));
        for (i, n) in self.nodes.iter().enumerate() {
            let f = self.first.get(i).copied().unwrap_or(0);
            for k in 0..n.shards {
                endpoints.push(Endpoint {
                    ip: n.ip.clone(),
                    port: n.endpoint_port + k,
                    id: node_id(deployment, site, f + k),
                });
            }
        }
        ClusterMap {
            endpoints,
            epoch: self.epoch,
        }
    }

    /// A new topology may replace this one only with a higher epoch.
    pub fn check_successor(&self, next: &Topology) -> Result<(), TopologyError> {
        if next.epoch <= self.epoch {
            return Err(TopologyError::StaleEpoch {
                got: next.epoch,
                current: self.epoch,
            });
        }
        Ok(())
    }
}

/// A multi-node site as one node sees it: the topology and which node this is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SiteNodes {
    pub topology: Topology,
    /// This node's index in `topology.nodes`.
    pub me: usize,
    /// Each shard's cluster endpoint, "ip:port", by site shard index.
    endpoints: Vec<String>,
}

impl SiteNodes {
    /// The site of `topology` as node `name` sees it.
    pub fn new(topology: Topology, name: &str) -> Result<SiteNodes, TopologyError> {
        let me = topology.node_index(name)?;
        let endpoints = (0..topology.shards())
            .map(|s| topology.endpoint_addr(s).unwrap_or_default())
            .collect();
        Ok(SiteNodes {
            topology,
            me,
            endpoints,
        })
    }

    /// This node's spec.
    pub fn this(&self) -> Option<&NodeSpec> {
        self.topology.nodes.get(self.me)
    }

    /// (site index of this node's first shard, how many it runs).
    pub fn local(&self) -> (u16, u16) {
        (
            self.topology.first.get(self.me).copied().unwrap_or(0),
            self.this().map_or(0, |n| n.shards),
        )
    }

    /// Shard `shard`'s cluster endpoint.
    pub fn endpoint(&self, shard: u16) -> Option<&str> {
        self.endpoints.get(usize::from(shard)).map(String::as_str)
    }

    /// For each other node: the endpoint of its first shard (where node-wide commands such
    /// as a forwarded PUBLISH go).
    pub fn other_nodes(&self) -> Vec<String> {
        let mut v = Vec::new();
        for (i, _) in self.topology.nodes.iter().enumerate() {
            if i == self.me {
                continue;
            }
            if let Some(f) = self.topology.first.get(i) {
                if let Some(e) = self.endpoint(*f) {
                    v.push(e.to_string());
                }
            }
        }
        v
    }

    /// The sync port ("ip:port") of the node that runs shard `shard` (None: it has none).
    pub fn sync_addr(&self, shard: u16) -> Option<String> {
        let n = self.topology.nodes.get(self.topology.node_of(shard)?)?;
        (n.sync_port != 0).then(|| format!("{}:{}", n.ip, n.sync_port))
    }
}

#[cfg(test)]
mod topology_tests {
    use super::*;

    const TWO: &str = r#"
epoch = 3
[[node]]
name = "n1"
ip = "127.0.0.1"
port = 7001
endpoint-port = 7101
sync-port = 7201
shards = 2
[[node]]
name = "n2"
ip = "127.0.0.2"
port = 7002
endpoint-port = 7111
shards = 1
"#;

    #[test]
    fn a_topology_file_parses_into_shards_nodes_and_slots() {
        let t = Topology::parse(TWO).unwrap();
        assert_eq!(t.shards(), 3);
        assert_eq!(t.first, vec![0, 2]);
        assert_eq!(t.node_of(1), Some(0));
        assert_eq!(t.node_of(2), Some(1));
        assert_eq!(t.node_of(3), None);
        assert_eq!(t.endpoint_addr(1).as_deref(), Some("127.0.0.1:7102"));
        assert_eq!(t.endpoint_addr(2).as_deref(), Some("127.0.0.2:7111"));
        assert_eq!(t.slots, SlotMap::contiguous(3));
        let m = t.cluster_map("d", "a");
        assert_eq!(m.endpoints.len(), 3);
        assert_eq!(m.epoch, 3);
        assert_eq!(m.endpoints[2].id, node_id("d", "a", 2));
        assert_eq!(t.node_index("n2"), Ok(1));
        assert!(matches!(
            t.node_index("n9"),
            Err(TopologyError::UnknownNode { .. })
        ));
    }

    #[test]
    fn every_problem_is_named() {
        let cases: &[(&str, &str)] = &[
            ("epoch = 1", "node"),
            ("nonsense", "topology"),
            (
                &TWO.replace("epoch = 3", "epoch = 0"),
                "epoch must be at least 1",
            ),
            (&TWO.replace("\"n2\"", "\"n1\""), "listed twice"),
            (&TWO.replace("127.0.0.2", "nowhere"), "not an IP address"),
            (
                &TWO.replace("shards = 1", "shards = 0"),
                "shards must be at least 1",
            ),
            (
                &TWO.replace("endpoint-port = 7101", "endpoint-port = 65535"),
                "beyond 65535",
            ),
            (
                &(TWO.to_string()
                    + "[[slots]]\nrange = \"0-9000\"\nshard = 0\n[[slots]]\nrange = \"9000-16383\"\nshard = 1\n"),
                "owned twice",
            ),
            (
                &(TWO.to_string() + "[[slots]]\nrange = \"0-9000\"\nshard = 0\n"),
                "owned by no shard",
            ),
            (
                &(TWO.to_string() + "[[slots]]\nrange = \"0-16383\"\nshard = 7\n"),
                "does not exist",
            ),
            (
                &(TWO.to_string() + "[[slots]]\nrange = \"0-16384\"\nshard = 0\n"),
                "bad slot range",
            ),
            (&TWO.replace("shards = 2", "shards = 2\nbogus = 1"), "bogus"),
        ];
        for (text, want) in cases {
            let e = Topology::parse(text).unwrap_err().to_string();
            assert!(e.contains(want), "{want:?} not in {e:?} for:\n{text}");
        }
        let t = Topology::parse(TWO).unwrap();
        let same = t.clone();
        assert_eq!(
            t.check_successor(&same),
            Err(TopologyError::StaleEpoch { got: 3, current: 3 })
        );
    }
}

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

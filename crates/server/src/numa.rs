//! Where shard threads run: the CPUs this process may use and their NUMA nodes.
//!
//! Read from `/sys` and `/proc` without a C dependency: the allowed CPUs
//! (`Cpus_allowed_list` in `/proc/self/status`, which cgroups, `CPUAffinity=` and taskset
//! set), the online NUMA nodes (`/sys/devices/system/node/online`), each node's CPUs
//! (`nodeN/cpulist`) and distances (`nodeN/distance`, 10 = local). Shards are placed node by
//! node: shard 0 on the first allowed CPU of the first node, and so on, so that consecutive
//! shards share a node and each thread, pinned, allocates its memory on its own node (Linux
//! places a page on the node of the CPU that first touches it; jemalloc gives each thread its
//! own arena). A machine without `/sys/devices/system/node` is one node.

use std::collections::BTreeSet;

/// One shard thread's place.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place {
    /// The CPU it is pinned to (None: could not pin; more shards than allowed CPUs share).
    pub cpu: Option<usize>,
    /// The NUMA node of that CPU.
    pub node: usize,
}

/// The machine as this process sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Allowed CPUs, ascending.
    pub allowed: Vec<usize>,
    /// NUMA nodes: (node id, its CPUs).
    pub nodes: Vec<(usize, BTreeSet<usize>)>,
    /// Distance rows by node, as `/sys` gives them (empty when unknown).
    pub distances: Vec<(usize, Vec<u32>)>,
}

/// Most CPUs or nodes a list may name (a bound on what a malformed file can make us build).
pub const CPUS_MAX: usize = 65_536;

/// Parses a kernel CPU or node list ("0-3,8,10-11"). None when malformed.
pub fn parse_list(text: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (
                a.trim().parse::<usize>().ok()?,
                b.trim().parse::<usize>().ok()?,
            ),
            None => {
                let v = part.trim().parse::<usize>().ok()?;
                (v, v)
            }
        };
        if a > b || b >= CPUS_MAX || out.len() + (b - a) >= CPUS_MAX {
            return None;
        }
        out.extend(a..=b);
    }
    Some(out)
}

fn read(path: &str) -> Option<String> {
    std::fs::read_to_string(path).ok()
}

impl Topology {
    /// Reads the machine. Missing files mean: every online CPU allowed, one node.
    pub fn read() -> Topology {
        let allowed = read("/proc/self/status")
            .and_then(|s| {
                s.lines()
                    .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
                    .and_then(parse_list)
            })
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| {
                (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
            });
        let mut nodes = Vec::new();
        let mut distances = Vec::new();
        if let Some(online) = read("/sys/devices/system/node/online").and_then(|s| parse_list(&s)) {
            for n in online {
                let base = format!("/sys/devices/system/node/node{n}");
                let Some(cpus) = read(&format!("{base}/cpulist")).and_then(|s| parse_list(&s))
                else {
                    continue;
                };
                nodes.push((n, cpus.into_iter().collect()));
                if let Some(d) = read(&format!("{base}/distance")) {
                    let row: Vec<u32> = d
                        .split_whitespace()
                        .filter_map(|v| v.parse().ok())
                        .collect();
                    distances.push((n, row));
                }
            }
        }
        Topology::from_parts(allowed, nodes, distances)
    }

    /// A topology from its parts; CPUs no node lists go to node 0.
    pub fn from_parts(
        mut allowed: Vec<usize>,
        mut nodes: Vec<(usize, BTreeSet<usize>)>,
        distances: Vec<(usize, Vec<u32>)>,
    ) -> Topology {
        allowed.sort_unstable();
        allowed.dedup();
        if nodes.is_empty() {
            nodes.push((0, allowed.iter().copied().collect()));
        }
        Topology {
            allowed,
            nodes,
            distances,
        }
    }

    /// The node of `cpu` (0 when no node lists it).
    pub fn node_of(&self, cpu: usize) -> usize {
        self.nodes
            .iter()
            .find(|(_, cpus)| cpus.contains(&cpu))
            .map_or(0, |(n, _)| *n)
    }

    /// The allowed CPUs in placement order: node by node (nodes in id order), CPUs ascending
    /// within a node; allowed CPUs no node lists come last.
    pub fn cpus_node_by_node(&self) -> Vec<usize> {
        let mut out = Vec::with_capacity(self.allowed.len());
        for (_, cpus) in &self.nodes {
            out.extend(cpus.iter().copied().filter(|c| self.allowed.contains(c)));
        }
        for c in &self.allowed {
            if !out.contains(c) {
                out.push(*c);
            }
        }
        out
    }

    /// Places `shards` threads: one per allowed CPU, node by node; with more shards than
    /// CPUs, the extra ones are not pinned (the scheduler spreads them).
    pub fn place(&self, shards: usize) -> Vec<Place> {
        let cpus = self.cpus_node_by_node();
        (0..shards)
            .map(|i| match cpus.get(i) {
                Some(&cpu) => Place {
                    cpu: Some(cpu),
                    node: self.node_of(cpu),
                },
                None => Place { cpu: None, node: 0 },
            })
            .collect()
    }

    /// "node0:cpus=0-3,distances=10 21;node1:..." for INFO and the start-up log.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (n, cpus) in &self.nodes {
            let d = self
                .distances
                .iter()
                .find(|(m, _)| m == n)
                .map(|(_, row)| row.iter().map(u32::to_string).collect::<Vec<_>>().join(" "))
                .unwrap_or_default();
            parts.push(format!(
                "node{n}:cpus={},distances={d}",
                format_list(&cpus.iter().copied().collect::<Vec<_>>())
            ));
        }
        parts.join(";")
    }
}

/// The kernel's list form of ascending numbers ("0-3,8").
pub fn format_list(v: &[usize]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while let Some(&a) = v.get(i) {
        let mut j = i;
        while v
            .get(j + 1)
            .is_some_and(|&n| n == v.get(j).copied().unwrap_or(0) + 1)
        {
            j += 1;
        }
        let b = v.get(j).copied().unwrap_or(a);
        out.push(if a == b {
            a.to_string()
        } else {
            format!("{a}-{b}")
        });
        i = j + 1;
    }
    out.join(",")
}

/// Pins the calling thread to `cpu`. Returns whether it worked.
pub fn pin(cpu: usize) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id: cpu })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse_like_the_kernel_writes_them() {
        assert_eq!(
            parse_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_list("5"), Some(vec![5]));
        assert_eq!(parse_list(""), Some(vec![]));
        for bad in ["3-1", "a", "1-", "0-70000"] {
            assert_eq!(parse_list(bad), None, "{bad}");
        }
        assert_eq!(format_list(&[0, 1, 2, 3, 8, 10, 11]), "0-3,8,10-11");
        assert_eq!(format_list(&[]), "");
    }

    #[test]
    fn shards_are_placed_node_by_node() {
        // Two nodes whose CPUs interleave (0,2,4,6 on node 0; 1,3,5,7 on node 1), CPU 3 not
        // allowed.
        let t = Topology::from_parts(
            vec![0, 1, 2, 4, 5, 6, 7],
            vec![
                (0, [0, 2, 4, 6].into_iter().collect()),
                (1, [1, 3, 5, 7].into_iter().collect()),
            ],
            vec![(0, vec![10, 21]), (1, vec![21, 10])],
        );
        let p = t.place(5);
        let cpus: Vec<Option<usize>> = p.iter().map(|x| x.cpu).collect();
        assert_eq!(cpus, vec![Some(0), Some(2), Some(4), Some(6), Some(1)]);
        let nodes: Vec<usize> = p.iter().map(|x| x.node).collect();
        assert_eq!(nodes, vec![0, 0, 0, 0, 1]);
        // More shards than CPUs: the rest float.
        assert_eq!(t.place(9).last(), Some(&Place { cpu: None, node: 0 }));
        assert_eq!(
            t.describe(),
            "node0:cpus=0,2,4,6,distances=10 21;node1:cpus=1,3,5,7,distances=21 10"
        );
    }

    #[test]
    fn a_machine_without_nodes_is_one_node() {
        let t = Topology::from_parts(vec![1, 0], vec![], vec![]);
        assert_eq!(t.nodes.len(), 1);
        assert_eq!(
            t.place(2),
            vec![
                Place {
                    cpu: Some(0),
                    node: 0
                },
                Place {
                    cpu: Some(1),
                    node: 0
                }
            ]
        );
        // This machine's own files parse.
        let here = Topology::read();
        assert!(!here.allowed.is_empty());
    }
}

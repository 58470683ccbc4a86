//! Network namespaces for one drill cluster (testing.md §5.3) and nftables rules inside them
//! (§5.2).
//!
//! [`NetnsSet::create`] makes a `wan` namespace holding a bridge and one namespace per site, each
//! with a veth to the bridge and the address 10.77.0.(i+1)/24: the addresses exist only inside
//! these namespaces, which have no route out. Names carry the harness's pid and a run counter
//! (`mdrill-<pid>-<n>-a`), so parallel runs never collide. Dropping the set deletes every
//! namespace it created (and any veth left in the host namespace by a failed setup).
//! [`in_netns`] runs a closure on a thread moved into a namespace: sockets it creates stay there.

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::AsFd as _;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, bail};

/// Prefix of every namespace this harness creates.
pub const NS_PREFIX: &str = "mdrill";
/// First three octets of the drill's private network (inside the namespaces only).
pub const NET_PREFIX: [u8; 3] = [10, 77, 0];
/// Most sites: addresses 10.77.0.1..=10.77.0.SITES_MAX and site ids a..=h.
pub const SITES_MAX: usize = 8;

/// Runs `ip args…`; the error carries its stderr.
pub fn ip(args: &[&str]) -> anyhow::Result<()> {
    run("ip", args, None)
}

/// Runs `program args…` (with `input` on stdin); the error carries the command and its stderr.
pub fn run(program: &str, args: &[&str], input: Option<&str>) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    if input.is_some() {
        cmd.stdin(std::process::Stdio::piped());
    } else {
        cmd.stdin(std::process::Stdio::null());
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("spawn {program} {}", args.join(" ")))?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "{program} {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The address of site `i` (0-based) inside its namespace.
pub fn site_ip(i: usize) -> Ipv4Addr {
    let [a, b, c] = NET_PREFIX;
    Ipv4Addr::new(a, b, c, (i + 1) as u8)
}

/// Whether this process can make namespaces: root, and `ip netns` works.
pub fn available() -> Result<(), String> {
    if !rustix::process::geteuid().is_root() {
        return Err("not running as root".to_string());
    }
    match Command::new("ip").args(["netns", "list"]).output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "`ip netns list` failed: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("no `ip` command: {e}")),
    }
}

/// Namespaces of one cluster; deleted on drop.
#[derive(Debug)]
pub struct NetnsSet {
    pub wan: String,
    /// One namespace per site, in site order.
    pub sites: Vec<String>,
    /// Namespaces created so far (deleted on drop, last first).
    created: Vec<String>,
    /// Host-side veth names, deleted on drop in case a failed setup left one in the host.
    veths: Vec<String>,
}

impl NetnsSet {
    /// Creates the `wan` namespace with its bridge and `n` site namespaces (ids `site_ids`).
    /// On error, whatever was created is deleted.
    pub fn create(tag: &str, site_ids: &[String]) -> anyhow::Result<NetnsSet> {
        if site_ids.len() > SITES_MAX {
            bail!("at most {SITES_MAX} sites");
        }
        let mut set = NetnsSet {
            wan: format!("{NS_PREFIX}-{tag}-wan"),
            sites: site_ids
                .iter()
                .map(|s| format!("{NS_PREFIX}-{tag}-{s}"))
                .collect(),
            created: Vec::new(),
            veths: Vec::new(),
        };
        let wan = set.wan.clone();
        ip(&["netns", "add", &wan])?;
        set.created.push(wan.clone());
        ip(&[
            "netns", "exec", &wan, "ip", "link", "add", "br0", "type", "bridge",
        ])?;
        ip(&["netns", "exec", &wan, "ip", "link", "set", "br0", "up"])?;
        ip(&["netns", "exec", &wan, "ip", "link", "set", "lo", "up"])?;
        // Interface names are at most 15 bytes: "md" + pid-and-counter digits + site + "b".
        let short: String = tag.chars().filter(char::is_ascii_digit).collect();
        for (i, id) in site_ids.iter().enumerate() {
            let ns = set.sites.get(i).cloned().unwrap_or_default();
            let v = format!("md{short}{id}");
            let vbr = format!("md{short}{id}b");
            if vbr.len() > 15 {
                bail!("interface name {vbr} is longer than 15 bytes");
            }
            ip(&["netns", "add", &ns])?;
            set.created.push(ns.clone());
            ip(&["link", "add", &v, "type", "veth", "peer", "name", &vbr])?;
            set.veths.push(v.clone());
            ip(&["link", "set", &v, "netns", &ns])?;
            ip(&["link", "set", &vbr, "netns", &wan])?;
            ip(&[
                "netns", "exec", &wan, "ip", "link", "set", &vbr, "master", "br0",
            ])?;
            ip(&["netns", "exec", &wan, "ip", "link", "set", &vbr, "up"])?;
            let addr = format!("{}/24", site_ip(i));
            ip(&["netns", "exec", &ns, "ip", "addr", "add", &addr, "dev", &v])?;
            ip(&["netns", "exec", &ns, "ip", "link", "set", &v, "up"])?;
            ip(&["netns", "exec", &ns, "ip", "link", "set", "lo", "up"])?;
        }
        Ok(set)
    }

    pub fn site(&self, i: usize) -> Option<&str> {
        self.sites.get(i).map(String::as_str)
    }
}

impl Drop for NetnsSet {
    fn drop(&mut self) {
        for ns in self.created.iter().rev() {
            if let Err(e) = ip(&["netns", "del", ns]) {
                eprintln!("drill: deleting namespace {ns}: {e:#}");
            }
        }
        for v in &self.veths {
            // Normally gone with its namespace; this only matters after a failed setup.
            let _ = Command::new("ip")
                .args(["link", "del", v])
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// Deletes namespaces left by drill runs whose harness no longer exists (a SIGKILLed run),
/// after SIGKILLing the processes still inside them. Returns what it removed.
pub fn sweep_stale() -> Vec<String> {
    let mut removed = Vec::new();
    let Ok(out) = Command::new("ip").args(["netns", "list"]).output() else {
        return removed;
    };
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    for line in text.lines().take(10_000) {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(&format!("{NS_PREFIX}-")) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<u32>().ok()) else {
            continue;
        };
        if std::path::Path::new(&format!("/proc/{pid}")).exists() {
            continue;
        }
        if let Ok(o) = Command::new("ip").args(["netns", "pids", name]).output() {
            for p in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                if let Some(pid) = p
                    .parse::<i32>()
                    .ok()
                    .and_then(rustix::process::Pid::from_raw)
                {
                    let _ = rustix::process::kill_process(pid, rustix::process::Signal::KILL);
                }
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        if ip(&["netns", "del", name]).is_ok() {
            removed.push(name.to_string());
        }
    }
    removed
}

/// Moves the calling thread into namespace `name`.
fn enter(name: &str) -> io::Result<()> {
    let f = std::fs::File::open(format!("/var/run/netns/{name}"))?;
    rustix::thread::move_into_link_name_space(
        f.as_fd(),
        Some(rustix::thread::LinkNameSpaceType::Network),
    )
    .map_err(io::Error::from)
}

/// Runs `f` in namespace `ns` (on a short-lived thread that entered it), or here when `ns` is
/// None. Sockets created by `f` belong to that namespace for their whole life.
pub fn in_netns<T: Send>(
    ns: Option<&str>,
    f: impl FnOnce() -> io::Result<T> + Send,
) -> io::Result<T> {
    let Some(name) = ns else {
        return f();
    };
    std::thread::scope(|s| {
        let h = s.spawn(|| {
            enter(name)?;
            f()
        });
        h.join()
            .unwrap_or_else(|_| Err(io::Error::other("thread in namespace panicked")))
    })
}

/// Packet-level faults of one site, applied as the `inet mdrill` table in its namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NftRules {
    /// Peer addresses whose packets are silently dropped both ways.
    pub drop: Vec<Ipv4Addr>,
    /// Percent of packets to every peer dropped at random (0: none).
    pub loss_pct: u8,
}

impl NftRules {
    pub fn is_empty(&self) -> bool {
        self.drop.is_empty() && self.loss_pct == 0
    }

    /// The nft script installing these rules (replacing the table's previous rules).
    pub fn script(&self) -> String {
        let mut s =
            String::from("table inet mdrill {}\nflush table inet mdrill\ntable inet mdrill {\n");
        s.push_str("  chain out {\n    type filter hook output priority 0; policy accept;\n");
        for a in &self.drop {
            s.push_str(&format!("    ip daddr {a} drop\n"));
        }
        if self.loss_pct > 0 {
            let [a, b, c] = NET_PREFIX;
            s.push_str(&format!(
                "    ip daddr {a}.{b}.{c}.0/24 numgen random mod 100 < {} drop\n",
                self.loss_pct
            ));
        }
        s.push_str("  }\n  chain in {\n    type filter hook input priority 0; policy accept;\n");
        for a in &self.drop {
            s.push_str(&format!("    ip saddr {a} drop\n"));
        }
        s.push_str("  }\n}\n");
        s
    }
}

/// Installs `rules` in namespace `ns` (an empty set deletes the table: heal).
pub fn nft_apply(ns: &str, rules: &NftRules) -> anyhow::Result<()> {
    if rules.is_empty() {
        let script = "table inet mdrill {}\ndelete table inet mdrill\n";
        return run("ip", &["netns", "exec", ns, "nft", "-f", "-"], Some(script));
    }
    run(
        "ip",
        &["netns", "exec", ns, "nft", "-f", "-"],
        Some(&rules.script()),
    )
}

/// Whether nft works in namespace `ns` (installs and deletes an empty table).
pub fn nft_available(ns: &str) -> Result<(), String> {
    nft_apply(
        ns,
        &NftRules {
            drop: vec![],
            loss_pct: 1,
        },
    )
    .and_then(|()| nft_apply(ns, &NftRules::default()))
    .map_err(|e| format!("{e:#}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nft_script_names_every_rule() {
        let r = NftRules {
            drop: vec![site_ip(1)],
            loss_pct: 3,
        };
        let s = r.script();
        assert!(s.contains("ip daddr 10.77.0.2 drop"), "{s}");
        assert!(s.contains("ip saddr 10.77.0.2 drop"), "{s}");
        assert!(s.contains("numgen random mod 100 < 3 drop"), "{s}");
        assert!(NftRules::default().is_empty());
    }
}

//! Membership changes of a running cluster (docs/operations.md §4, §5): sites that join later
//! (`Options::later`), waits over a subset of the sites, the `meridian admin` client run
//! against one site, and a removed site's machine reset to join again under a new id.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use super::{Cluster, POLL};
use crate::site::parse_peer_line;

/// Longest a `meridian admin` call may take (its own limit is 10 s per site).
const ADMIN_WAIT_MAX: Duration = Duration::from_secs(15);

impl Cluster {
    /// The address site `dialer` lists for site `accepter` (the proxy of that link).
    pub fn peer_addr(&self, dialer: usize, accepter: usize) -> anyhow::Result<SocketAddr> {
        self.proxy(dialer, accepter)
            .map(|p| p.listen)
            .with_context(|| format!("no proxy on link {dialer}→{accepter}"))
    }

    /// Waits until every link between the sites of `members` is up both ways.
    pub fn wait_links_up_among(&self, members: &[usize], timeout: Duration) -> anyhow::Result<()> {
        let start = Instant::now();
        // Bounded by `timeout`.
        loop {
            let mut down = None;
            for &i in members {
                let info = self.site(i)?.info_crdt()?;
                for &j in members.iter().filter(|&&j| j != i) {
                    let p = parse_peer_line(
                        info.get(&format!("crdt_peer_{}", self.id(j)))
                            .map_or("", String::as_str),
                    );
                    if p.get("in_link").map(String::as_str) != Some("up")
                        || p.get("out_link").map(String::as_str) != Some("up")
                    {
                        down = Some(format!(
                            "{}→{} ({})",
                            self.id(i),
                            self.id(j),
                            p.get("last_error").map_or("not a peer", String::as_str)
                        ));
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

    /// Runs `meridian admin --site <site i's client address> ARGS` where site `i`'s clients
    /// connect (in its namespace, if any); returns whether it exited 0, and its output.
    pub fn admin(&self, bin: &Path, i: usize, args: &[&str]) -> anyhow::Result<(bool, String)> {
        let s = self.site(i)?;
        let mut cmd = match &s.spec.ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        let mut child = cmd
            .args(["admin", "--site", &s.spec.client.to_string()])
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .with_context(|| format!("spawn {} admin", bin.display()))?;
        let deadline = Instant::now() + ADMIN_WAIT_MAX;
        // Bounded by ADMIN_WAIT_MAX.
        while child.try_wait()?.is_none() {
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                bail!("meridian admin {args:?} on site {} hung", self.id(i));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output()?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok((out.status.success(), text.trim_end().to_string()))
    }

    /// A removed site's machine reset (docs/operations.md §5): site `i` is killed, its data
    /// directory emptied, and it is set up to start as `new_id` (whose certificate
    /// `Options::spare_ids` made) listing `peers`, in the same namespace and on the same
    /// addresses, with a directory and log of its own. It is not started.
    pub fn reset_site(&mut self, i: usize, new_id: &str, peers: &[usize]) -> anyhow::Result<()> {
        let peer_args: Vec<String> = peers
            .iter()
            .map(|&j| Ok(format!("{}={}", self.id(j), self.peer_addr(i, j)?)))
            .collect::<anyhow::Result<_>>()?;
        let site = self.site_mut(i)?;
        site.kill();
        if site.spec.dir.exists() {
            std::fs::remove_dir_all(&site.spec.dir)?;
        }
        let cluster_dir = site
            .spec
            .log
            .parent()
            .and_then(Path::parent)
            .context("site directory")?
            .to_path_buf();
        let site_dir = cluster_dir.join(format!("site-{new_id}"));
        std::fs::create_dir_all(&site_dir)?;
        let data = site_dir.join("data");
        let swap_file = |old: &str, ext: &str| -> String {
            PathBuf::from(old)
                .with_file_name(format!("{new_id}.{ext}"))
                .display()
                .to_string()
        };
        let mut args = Vec::new();
        let mut it = site.spec.args.iter();
        while let Some(a) = it.next() {
            let value = |v: Option<&String>| v.cloned().unwrap_or_default();
            match a.as_str() {
                "--site" => {
                    it.next();
                    args.extend([a.clone(), new_id.to_string()]);
                }
                "--dir" => {
                    it.next();
                    args.extend([a.clone(), data.display().to_string()]);
                }
                "--sync-tls-cert" => {
                    let v = value(it.next());
                    args.extend([a.clone(), swap_file(&v, "crt")]);
                }
                "--sync-tls-key" => {
                    let v = value(it.next());
                    args.extend([a.clone(), swap_file(&v, "key")]);
                }
                "--peer" => {
                    it.next();
                }
                _ => args.push(a.clone()),
            }
        }
        for p in peer_args {
            args.extend(["--peer".to_string(), p]);
        }
        site.spec.args = args;
        site.spec.id = new_id.to_string();
        site.spec.dir = data;
        site.spec.log = site_dir.join("server.log");
        site.boots = 0;
        if let Some(id) = self.ids.get_mut(i) {
            *id = new_id.to_string();
        }
        Ok(())
    }
}

//! Process control of one site: start (in the site's namespace through `ip netns exec`, which
//! execs, so the recorded PID is the server's), SIGKILL, SIGSTOP/SIGCONT by that PID, restart
//! with the same directory, and simulated power loss against the server's fsync watermark
//! (`DIR/shard-N/fsynced`: one line `<segment> <bytes on disk>`). Children run in their own
//! process group, so a Ctrl-C reaches only the harness, which then stops them in order.

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use crate::resp::{Conn, Reply};

/// How long a started server may take to accept its first client.
pub const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Timeout of the harness's own admin commands (INFO, digests).
pub const ADMIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Where and how one site runs.
#[derive(Clone, Debug)]
pub struct SiteSpec {
    pub id: String,
    pub ns: Option<String>,
    /// Client endpoint, as seen from `ns`.
    pub client: SocketAddr,
    /// Arguments after the binary (`server --site …`).
    pub args: Vec<String>,
    pub dir: PathBuf,
    pub log: PathBuf,
}

/// One site's server process (started or not). Dropping it SIGKILLs the process.
#[derive(Debug)]
pub struct Site {
    pub spec: SiteSpec,
    bin: PathBuf,
    child: Option<Child>,
    pub starts: u32,
    /// Simulated reboots so far: every start passes `--debug-boot-id <site>-boot-<n>`, and a
    /// power loss moves to the next one, so the server knows its log may have lost its
    /// unsynced tail and begins a new life (docs/replication.md §9).
    pub boots: u32,
    pub paused: bool,
}

impl Site {
    pub fn new(spec: SiteSpec, bin: &Path) -> Site {
        Site {
            spec,
            bin: bin.to_path_buf(),
            child: None,
            starts: 0,
            boots: 0,
            paused: false,
        }
    }

    pub fn id(&self) -> &str {
        &self.spec.id
    }

    /// Starts the process (output appended to its log) and waits until its client port
    /// answers PING. Fails with the log's tail when it exits or never answers.
    pub fn start(&mut self) -> anyhow::Result<()> {
        if self.child.is_some() {
            bail!("site {} is already running", self.spec.id);
        }
        std::fs::create_dir_all(&self.spec.dir)?;
        self.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.spec.log)
            .with_context(|| format!("open {}", self.spec.log.display()))?;
        writeln!(
            log,
            "=== drill: start #{} of site {} ===",
            self.starts, self.spec.id
        )?;
        let log_err = log.try_clone()?;
        let mut cmd = match &self.spec.ns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns]).arg(&self.bin);
                c
            }
            None => Command::new(&self.bin),
        };
        let boot_id = format!("{}-boot-{}", self.spec.id, self.boots);
        cmd.args(&self.spec.args)
            .args(["--debug-boot-id", &boot_id])
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .env("NO_COLOR", "1")
            .process_group(0);
        let child = cmd
            .spawn()
            .with_context(|| format!("spawn {}", self.bin.display()))?;
        self.child = Some(child);
        self.paused = false;
        let deadline = Instant::now() + START_TIMEOUT;
        // Bounded by START_TIMEOUT.
        loop {
            let pong = Conn::connect(
                self.spec.ns.as_deref(),
                self.spec.client,
                Duration::from_millis(500),
            )
            .ok()
            .and_then(|mut c| c.cmd(&["PING"]).ok());
            if let Some(Reply::Simple(_)) = pong {
                return Ok(());
            }
            if let Some(status) = self
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten())
            {
                self.child = None;
                bail!(
                    "site {} exited with {status} before answering; log tail:\n{}",
                    self.spec.id,
                    self.log_tail(30)
                );
            }
            if Instant::now() > deadline {
                self.kill();
                bail!(
                    "site {} did not answer within {START_TIMEOUT:?}; log tail:\n{}",
                    self.spec.id,
                    self.log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(25));
        }
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn signal(&self, sig: rustix::process::Signal) -> anyhow::Result<()> {
        let pid = self
            .pid()
            .and_then(|p| i32::try_from(p).ok())
            .and_then(rustix::process::Pid::from_raw)
            .with_context(|| format!("site {} is not running", self.spec.id))?;
        rustix::process::kill_process(pid, sig)
            .with_context(|| format!("signal site {} (pid {pid:?})", self.spec.id))
    }

    /// SIGSTOP: the process freezes with its sockets open.
    pub fn pause(&mut self) -> anyhow::Result<()> {
        self.signal(rustix::process::Signal::STOP)?;
        self.paused = true;
        Ok(())
    }

    pub fn resume(&mut self) -> anyhow::Result<()> {
        self.signal(rustix::process::Signal::CONT)?;
        self.paused = false;
        Ok(())
    }

    /// SIGKILL (no shutdown path runs), then reaps the process.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.paused = false;
    }

    /// SIGKILL, then cuts every shard's log back to what was fsynced (see [`power_loss`]).
    pub fn power_loss(&mut self, torn: Option<&mut crate::rng::Rng>) -> anyhow::Result<String> {
        self.kill();
        self.boots += 1;
        power_loss(&self.spec.dir, torn)
    }

    /// The exit status when the process ended by itself.
    pub fn exited(&mut self) -> Option<String> {
        let c = self.child.as_mut()?;
        c.try_wait().ok().flatten().map(|s| s.to_string())
    }

    pub fn connect(&self, timeout: Duration) -> anyhow::Result<Conn> {
        Conn::connect(self.spec.ns.as_deref(), self.spec.client, timeout)
            .with_context(|| format!("connect to site {} at {}", self.spec.id, self.spec.client))
    }

    /// One command on a fresh connection.
    pub fn cmd(&self, args: &[&str]) -> anyhow::Result<Reply> {
        let mut c = self.connect(ADMIN_TIMEOUT)?;
        c.cmd(args)
            .with_context(|| format!("site {}: {}", self.spec.id, args.join(" ")))
    }

    /// `INFO crdt` as `field → value`.
    pub fn info_crdt(&self) -> anyhow::Result<BTreeMap<String, String>> {
        let r = self.cmd(&["INFO", "crdt"])?;
        let text = r
            .bulk_str()
            .with_context(|| format!("site {}: INFO crdt answered {r:?}", self.spec.id))?;
        Ok(parse_info(&text))
    }

    /// `CRDT.DIGEST`.
    pub fn digest(&self) -> anyhow::Result<String> {
        let r = self.cmd(&["CRDT.DIGEST"])?;
        r.bulk_str()
            .with_context(|| format!("site {}: CRDT.DIGEST answered {r:?}", self.spec.id))
    }

    /// `CRDT.DIGEST SLOTS` as `slot → (keys, digest)`.
    pub fn slot_digests(&self) -> anyhow::Result<BTreeMap<i64, (i64, String)>> {
        let mut out = BTreeMap::new();
        if let Reply::Array(Some(items)) = self.cmd(&["CRDT.DIGEST", "SLOTS"])? {
            for item in items {
                let Reply::Array(Some(v)) = item else {
                    continue;
                };
                if let [Reply::Int(slot), Reply::Int(keys), d] = v.as_slice() {
                    out.insert(*slot, (*keys, d.bulk_str().unwrap_or_default()));
                }
            }
        }
        Ok(out)
    }

    pub fn log_tail(&self, n: usize) -> String {
        let log = std::fs::read_to_string(&self.spec.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines
            .get(lines.len().saturating_sub(n)..)
            .unwrap_or_default()
            .join("\n")
    }

    /// Lines of the server's log (every run of it) that contain `what`.
    pub fn log_count(&self, what: &str) -> usize {
        let log = std::fs::read_to_string(&self.spec.log).unwrap_or_default();
        log.lines().filter(|l| l.contains(what)).count()
    }

    /// Lines of the log at ERROR level or reporting a panic.
    pub fn log_errors(&self) -> Vec<String> {
        let log = std::fs::read_to_string(&self.spec.log).unwrap_or_default();
        log.lines()
            .filter(|l| l.contains("ERROR") || l.contains("panicked"))
            .take(20)
            .map(str::to_string)
            .collect()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.kill();
    }
}

/// `INFO` text as `field → value` (section headers skipped).
pub fn parse_info(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim_end().to_string()))
        .collect()
}

/// `addr=..,in_link=up,...` as `field → value`.
pub fn parse_peer_line(line: &str) -> BTreeMap<String, String> {
    line.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Simulated power loss on a stopped site's data directory: in every `shard-*` directory, reads
/// the watermark file `fsynced` (`<segment file name> <byte length>`), truncates that segment to
/// the length (or, with `torn`, to a random point between it and the written length: a torn
/// tail) and deletes every `*.log` segment whose name sorts after it. Without a watermark file
/// nothing was ever fsynced, so every segment goes. Returns what it did, for the report.
pub fn power_loss(dir: &Path, mut torn: Option<&mut crate::rng::Rng>) -> anyhow::Result<String> {
    let mut report = Vec::new();
    let mut shards: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("read {}", dir.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_dir()
                && p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("shard-"))
        })
        .collect();
    shards.sort();
    if shards.is_empty() {
        bail!("no shard-* directory in {}", dir.display());
    }
    for shard in shards {
        let mut segments: Vec<String> = std::fs::read_dir(&shard)?
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| n.ends_with(".log"))
            .collect();
        segments.sort();
        let mark = std::fs::read_to_string(shard.join("fsynced")).ok();
        let (keep_name, keep_len) = match mark.as_deref().map(str::trim) {
            Some(line) if !line.is_empty() => {
                let (name, len) = line.rsplit_once(' ').with_context(|| {
                    format!("bad watermark line {line:?} in {}", shard.display())
                })?;
                let len: u64 = len
                    .parse()
                    .with_context(|| format!("bad watermark length in {line:?}"))?;
                (Some(name.to_string()), len)
            }
            _ => (None, 0),
        };
        for seg in &segments {
            let path = shard.join(seg);
            match &keep_name {
                Some(k) if seg == k => {
                    let written = std::fs::metadata(&path)?.len();
                    let cut = match torn.as_deref_mut() {
                        Some(rng) if written > keep_len => rng.range(keep_len, written),
                        _ => keep_len.min(written),
                    };
                    if cut < written {
                        OpenOptions::new().write(true).open(&path)?.set_len(cut)?;
                    }
                    report.push(format!(
                        "{}/{seg}: {written} → {cut} bytes (fsynced {keep_len})",
                        shard.display()
                    ));
                }
                Some(k) if seg.as_str() < k.as_str() => {}
                _ => {
                    std::fs::remove_file(&path)?;
                    report.push(format!(
                        "{}/{seg}: deleted (after the fsynced segment)",
                        shard.display()
                    ));
                }
            }
        }
    }
    Ok(report.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn power_loss_cuts_to_the_watermark_and_drops_later_segments() {
        let dir = std::env::temp_dir().join(format!("mdrill-test-{}", std::process::id()));
        let shard = dir.join("shard-0");
        std::fs::create_dir_all(&shard).unwrap();
        std::fs::write(shard.join("0001.log"), vec![1u8; 100]).unwrap();
        std::fs::write(shard.join("0002.log"), vec![2u8; 100]).unwrap();
        std::fs::write(shard.join("0003.log"), vec![3u8; 100]).unwrap();
        std::fs::write(shard.join("fsynced"), "0002.log 40\n").unwrap();
        let r = power_loss(&dir, None).unwrap();
        assert!(r.contains("0002.log"), "{r}");
        assert_eq!(
            std::fs::metadata(shard.join("0001.log")).unwrap().len(),
            100
        );
        assert_eq!(std::fs::metadata(shard.join("0002.log")).unwrap().len(), 40);
        assert!(!shard.join("0003.log").exists());
        // Torn: somewhere between the watermark and what was written.
        std::fs::write(shard.join("0002.log"), vec![2u8; 100]).unwrap();
        let mut rng = crate::rng::Rng::new(3);
        power_loss(&dir, Some(&mut rng)).unwrap();
        let len = std::fs::metadata(shard.join("0002.log")).unwrap().len();
        assert!((40..=100).contains(&len), "{len}");
        // No watermark: nothing was fsynced.
        std::fs::remove_file(shard.join("fsynced")).unwrap();
        power_loss(&dir, None).unwrap();
        assert!(!shard.join("0001.log").exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn info_and_peer_lines_parse() {
        let info = parse_info("# CRDT\r\ncrdt_seq:5\r\ncrdt_peer_b:addr=1.2.3.4:5,in_link=up\r\n");
        assert_eq!(info["crdt_seq"], "5");
        let p = parse_peer_line(&info["crdt_peer_b"]);
        assert_eq!(p["addr"], "1.2.3.4:5");
        assert_eq!(p["in_link"], "up");
    }
}

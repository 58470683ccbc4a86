//! Helpers for the persistence tests (docs/persistence.md): a server process that is killed
//! and started again on the same data directory and port, the files of a shard directory,
//! simulated power loss from the `fsynced` watermark, the record layout of a log segment,
//! `meridian check-log`, and a tmpfs mount that is unmounted on drop.
//!
//! A server binds its port before it loads its data, so "started" here means "answered a
//! PING", and "refused" means "exited"; a process that does neither is reported as hung.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use super::{Raw, Reply, free_port};

/// How long a server may take to load its data and answer a PING (generous: the machine
/// running the tests is shared and noisy).
pub const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a server that must refuse to start may take to exit.
pub const REFUSE_TIMEOUT: Duration = Duration::from_secs(15);
/// Poll period of the waits here.
const POLL: Duration = Duration::from_millis(10);

/// `env!("CARGO_BIN_EXE_meridian")`.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_meridian")
}

/// How a start ended.
#[derive(Debug)]
pub enum Start {
    /// It answered a PING.
    Serving,
    /// It exited before answering one.
    Exited(ExitStatus),
    /// It neither answered nor exited in time (it was then sent SIGTERM and reaped, so its
    /// log holds whatever it prints on shutdown).
    Hung,
}

/// A `meridian server` process on a fixed port and data directory, started any number of
/// times. Its output (every start, marked) goes to `server.log` outside the data directory.
pub struct Node {
    /// Holds `server.log`, and `data/` unless the data directory is elsewhere.
    root: tempfile::TempDir,
    /// `--dir`.
    pub data: PathBuf,
    pub port: u16,
    /// Flags after `--port` and `--dir`.
    pub flags: Vec<String>,
    child: Option<Child>,
    /// How many times it was started.
    pub starts: u32,
    /// Length of the log when the last start began.
    log_mark: usize,
}

impl Node {
    /// A node on a fresh data directory (not started).
    pub fn new(flags: &[&str]) -> Node {
        let root = tempfile::tempdir().expect("tempdir");
        let data = root.path().join("data");
        std::fs::create_dir(&data).expect("create data dir");
        Node::build(root, data, flags)
    }

    /// A node whose data directory is `data` (a mount point, a copy).
    pub fn on_dir(data: &Path, flags: &[&str]) -> Node {
        let root = tempfile::tempdir().expect("tempdir");
        Node::build(root, data.to_path_buf(), flags)
    }

    fn build(root: tempfile::TempDir, data: PathBuf, flags: &[&str]) -> Node {
        Node {
            root,
            data,
            port: free_port(),
            flags: flags.iter().map(|s| s.to_string()).collect(),
            child: None,
            starts: 0,
            log_mark: 0,
        }
    }

    /// A node started on a fresh data directory; panics unless it serves.
    pub fn start_new(flags: &[&str]) -> Node {
        let mut n = Node::new(flags);
        n.start();
        n
    }

    /// `DIR/shard-0`.
    pub fn shard_dir(&self) -> PathBuf {
        self.shard_dir_of(0)
    }

    /// `DIR/shard-N`.
    pub fn shard_dir_of(&self, shard: u16) -> PathBuf {
        self.data.join(format!("shard-{shard}"))
    }

    pub fn log_path(&self) -> PathBuf {
        self.root.path().join("server.log")
    }

    /// Every start's output so far, without terminal colour codes.
    pub fn log(&self) -> String {
        strip_ansi(&std::fs::read_to_string(self.log_path()).unwrap_or_default())
    }

    /// The output of the last start only.
    pub fn last_log(&self) -> String {
        let raw = std::fs::read_to_string(self.log_path()).unwrap_or_default();
        strip_ansi(raw.get(self.log_mark..).unwrap_or_default())
    }

    /// Starts the process without waiting for it to serve.
    pub fn spawn(&mut self) {
        assert!(
            self.child.is_none(),
            "node on port {} already runs",
            self.port
        );
        self.starts += 1;
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())
            .expect("open server.log");
        self.log_mark = log.metadata().map(|m| m.len() as usize).unwrap_or(0);
        let _ = writeln!(log, "=== test harness: start #{} ===", self.starts);
        let log_err = log.try_clone().expect("clone server.log");
        let mut args: Vec<String> = vec![
            "server".into(),
            "--port".into(),
            self.port.to_string(),
            "--dir".into(),
            self.data.display().to_string(),
        ];
        args.extend(self.flags.iter().cloned());
        super::enable_debug(&mut args);
        // Persistence tests look into `shard-0` unless they ask for more shards.
        if !self.flags.iter().any(|a| a == "--shards") {
            args.push("--shards".into());
            args.push("1".into());
        }
        if !self.flags.iter().any(|a| a == "--cluster-api") {
            args.push("--cluster-api".into());
            args.push("no".into());
        }
        let child = Command::new(bin())
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err))
            .spawn()
            .unwrap_or_else(|e| panic!("spawn meridian: {e}"));
        self.child = Some(child);
    }

    /// Starts the process and waits until it answers a PING, exits, or `timeout` passes.
    pub fn try_start(&mut self, timeout: Duration) -> Start {
        self.spawn();
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.exit_status() {
                self.child = None;
                return Start::Exited(status);
            }
            if ping_answers(self.port) {
                return Start::Serving;
            }
            if Instant::now() > deadline {
                self.terminate();
                return Start::Hung;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Starts and panics, with the log, unless the server serves.
    pub fn start(&mut self) {
        match self.try_start(READY_TIMEOUT) {
            Start::Serving => {}
            other => panic!(
                "server on port {} did not start ({other:?}); log:\n{}",
                self.port,
                self.last_log()
            ),
        }
    }

    /// Starts and expects a refusal: returns the exit status and the log of this start;
    /// panics when the server serves or hangs.
    pub fn start_refused(&mut self) -> (ExitStatus, String) {
        match self.try_start(REFUSE_TIMEOUT) {
            Start::Exited(status) => (status, self.last_log()),
            Start::Serving => {
                self.kill();
                panic!(
                    "the server started although it must refuse; log:\n{}",
                    self.last_log()
                )
            }
            Start::Hung => panic!(
                "the server neither served nor exited within {REFUSE_TIMEOUT:?} (it must refuse to start: exit non-zero); log after SIGTERM:\n{}",
                self.last_log()
            ),
        }
    }

    /// The exit status once the process has exited (and reaps it).
    fn exit_status(&mut self) -> Option<ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL (no shutdown path runs), then reaps the process.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// SIGTERM (the clean shutdown path), then waits up to `READY_TIMEOUT` for the exit
    /// (SIGKILL after that); returns the exit status.
    pub fn terminate(&mut self) -> Option<ExitStatus> {
        let mut c = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = c.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                return c.wait().ok();
            }
            std::thread::sleep(POLL);
        }
    }

    /// The running process's id.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Waits up to `READY_TIMEOUT` for the process to exit by itself (SIGKILL after that,
    /// which shows in the status); returns the exit status.
    pub fn wait_exit(&mut self) -> Option<ExitStatus> {
        let mut c = self.child.take()?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = c.try_wait() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = c.kill();
                return c.wait().ok();
            }
            std::thread::sleep(POLL);
        }
    }

    /// SIGKILL, then start again on the same directory and port.
    pub fn restart(&mut self) {
        self.kill();
        self.start();
    }

    pub fn is_running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| matches!(c.try_wait(), Ok(None)))
    }

    pub fn connect(&self) -> Raw {
        Raw::connect(self.port)
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether a fresh connection to `port` gets a reply to PING within half a second (PONG,
/// or an error: either means the server serves).
fn ping_answers(port: u16) -> bool {
    super::serves(port)
}

/// Removes terminal colour sequences (`ESC [ ... m`) from a log.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Files of a shard directory

/// Files of `dir` whose names start with `prefix` and end with `suffix`, sorted by name
/// (which sorts them by position: the numbers have 20 digits).
fn numbered_files(dir: &Path, prefix: &str, suffix: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .map(|n| n.to_string_lossy())
                        .is_some_and(|n| n.starts_with(prefix) && n.ends_with(suffix))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Log segments, oldest first.
pub fn segments(dir: &Path) -> Vec<PathBuf> {
    numbered_files(dir, "log-", ".log")
}

/// Snapshots, oldest first.
pub fn snapshots(dir: &Path) -> Vec<PathBuf> {
    numbered_files(dir, "snap-", ".snap")
}

/// The position in a segment's or snapshot's name (`log-<20 digits>.log`).
pub fn position_of(path: &Path) -> u64 {
    let name = file_name(path);
    let digits: String = name.chars().filter(char::is_ascii_digit).collect();
    digits
        .parse()
        .unwrap_or_else(|_| panic!("no position in {name}"))
}

pub fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The `fsynced` watermark: the segment name and the length known to be on disk.
pub fn fsynced(dir: &Path) -> Option<(String, u64)> {
    let text = std::fs::read_to_string(dir.join("fsynced")).ok()?;
    let (name, len) = text.trim().split_once(' ')?;
    Some((name.to_string(), len.parse().ok()?))
}

/// What a simulated power loss did.
#[derive(Debug)]
pub struct PowerLoss {
    /// The segment the watermark names, its written length and the length it was cut to.
    pub segment: String,
    pub written: u64,
    pub cut_to: u64,
    /// Newer segments deleted (never fsynced).
    pub deleted: Vec<String>,
}

/// Simulates a power loss after the process was killed (testing.md §5.5): cuts the segment
/// the `fsynced` watermark names back to `cut(fsynced, written)` (a length between the
/// fsynced and the written length) and deletes every segment whose name sorts after it.
pub fn power_loss(dir: &Path, cut: impl FnOnce(u64, u64) -> u64) -> PowerLoss {
    let (segment, fsynced_len) =
        fsynced(dir).unwrap_or_else(|| panic!("no fsynced watermark in {}", dir.display()));
    let path = dir.join(&segment);
    let written = std::fs::metadata(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .len();
    assert!(
        fsynced_len <= written,
        "watermark {fsynced_len} beyond the written length {written} of {segment}"
    );
    let cut_to = cut(fsynced_len, written);
    assert!((fsynced_len..=written).contains(&cut_to));
    let f = OpenOptions::new()
        .write(true)
        .open(&path)
        .expect("open segment");
    f.set_len(cut_to).expect("truncate segment");
    let mut deleted = Vec::new();
    for s in segments(dir) {
        let name = file_name(&s);
        if name > segment {
            std::fs::remove_file(&s).expect("delete segment");
            deleted.push(name);
        }
    }
    PowerLoss {
        segment,
        written,
        cut_to,
        deleted,
    }
}

/// Bytes of a segment header (docs/persistence.md §2).
pub const SEGMENT_HEADER_BYTES: usize = 24;
/// `len:u32 crc:u32` before each record's body.
pub const RECORD_HEADER_BYTES: usize = 8;

/// The kind byte of a clock lease record (`persist::record::Kind::ClockLease`), which each
/// shard writes on its own as its clock advances.
pub const CLOCK_LEASE_KIND: u8 = meridian_server::persist::record::Kind::ClockLease as u8;

/// The extents `[start, end)` of the records of an undamaged segment, in file offsets, by
/// their length fields alone (the test knows the file is whole).
pub fn record_extents(segment: &[u8]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut at = SEGMENT_HEADER_BYTES;
    while at + RECORD_HEADER_BYTES <= segment.len() {
        let len = u32::from_le_bytes(segment[at..at + 4].try_into().expect("4 bytes")) as usize;
        let end = at + RECORD_HEADER_BYTES + len;
        assert!(
            len > 0 && end <= segment.len(),
            "not a whole segment at {at}"
        );
        out.push((at, end));
        at = end;
    }
    assert_eq!(at, segment.len(), "trailing bytes in a whole segment");
    out
}

/// Copies every regular file of `from` into `to` (created).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for e in std::fs::read_dir(from).expect("read_dir") {
        let e = e.expect("dir entry");
        if e.file_type().is_ok_and(|t| t.is_file()) {
            std::fs::copy(e.path(), to.join(e.file_name())).expect("copy file");
        }
    }
}

/// `meridian check-log FILE [--fix]`: the exit code and the output.
pub fn check_log(file: &Path, fix: bool) -> (i32, String) {
    let mut cmd = Command::new(bin());
    cmd.arg("check-log").arg(file);
    if fix {
        cmd.arg("--fix");
    }
    let out = cmd.output().expect("run check-log");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().unwrap_or(-1), text)
}

// ---------------------------------------------------------------------------------------
// Replies

/// `INFO <section>` as a map.
pub fn info(c: &mut Raw, section: &str) -> BTreeMap<String, String> {
    let body = match c.reply(&["INFO", section]) {
        Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
        other => panic!("INFO {section}: {other:?}"),
    };
    body.lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_string(), v.trim().to_string()))
        .collect()
}

/// One numeric field of `INFO <section>`.
pub fn info_u64(c: &mut Raw, section: &str, field: &str) -> u64 {
    let m = info(c, section);
    m.get(field)
        .unwrap_or_else(|| panic!("no {field} in INFO {section}: {m:?}"))
        .parse()
        .unwrap_or_else(|_| panic!("{field} is not a number: {m:?}"))
}

// The tests that drive sites and disks poll through this module's name too.
#[allow(unused_imports)]
pub use super::eventually;

// ---------------------------------------------------------------------------------------
// A tmpfs mount

/// A small tmpfs mounted on a fresh directory, unmounted on drop (lazily when still busy).
/// Needs root; [`Tmpfs::mount`] says why it could not mount instead of failing.
pub struct Tmpfs {
    pub path: PathBuf,
    /// Holds the mount point; removed after the unmount.
    _parent: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (as `mount -o size=`, e.g. "2m").
    pub fn mount(size: &str) -> Result<Tmpfs, String> {
        let parent = tempfile::tempdir().map_err(|e| e.to_string())?;
        let path = parent.path().join("mnt");
        std::fs::create_dir(&path).map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(&path)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs {
            path,
            _parent: parent,
        })
    }

    /// Remounts read-only (`ro`) or read-write.
    pub fn remount(&self, read_only: bool) {
        let mode = if read_only {
            "remount,ro"
        } else {
            "remount,rw"
        };
        let st = Command::new("mount")
            .args(["-o", mode])
            .arg(&self.path)
            .status()
            .expect("run mount");
        assert!(st.success(), "mount -o {mode} failed: {st}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount")
            .arg(&self.path)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.path).status();
        }
    }
}

/// Whether this process runs as root (mount needs it).
pub fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

// ---------------------------------------------------------------------------------------
// A seeded generator

/// SplitMix64: a small seeded generator, so a run replays exactly.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, n)`; `n` > 0.
    pub fn below(&mut self, n: u64) -> u64 {
        assert!(n > 0);
        self.next() % n
    }

    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        assert!(lo < hi, "empty range {lo}..{hi}");
        lo + self.below((hi - lo) as u64) as usize
    }
}

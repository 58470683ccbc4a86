//! Configuration: embedded defaults, then an optional TOML file, then command-line flags.
//!
//! Every flag has a TOML key of the same name (`--proto-max-bulk-len` ↔ `proto-max-bulk-len`).
//! Unknown keys and bad values are refused at start with a message naming the key.
//! `params::PARAMS` is the table of every parameter (Redis 7.0's and Meridian's own): the
//! TOML keys, `CONFIG GET`/`SET`/`REWRITE` and the documentation read it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::error::ConfigError;

pub mod params;
mod rewrite;

/// Settings of one server process. `Default` is the embedded default configuration.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case", default)]
pub struct Config {
    /// Address the client port listens on.
    pub bind: String,
    pub port: u16,
    /// Data directory: the op log segments and snapshots of each shard (`shard-N/`).
    pub dir: PathBuf,
    /// Number of logical databases (SELECT 0..databases-1).
    pub databases: u32,
    /// This site's id; replica ids derive from it and the shard index.
    pub site: String,
    /// Largest bulk string accepted in a request, in bytes (Redis `proto-max-bulk-len`).
    pub proto_max_bulk_len: u64,
    /// Largest unparsed input buffered per client, in bytes (Redis `client-query-buffer-limit`).
    pub client_query_buffer_limit: u64,
    /// Most clients connected at once (Redis `maxclients`); sync links do not count.
    pub maxclients: u32,
    /// Pending output per client class past which a client is closed (Redis
    /// `client-output-buffer-limit`: "class hard soft soft-seconds" groups).
    pub client_output_buffer_limit: OutputBufferLimits,
    /// Close a client idle for this many seconds (0: never).
    pub timeout: u64,
    /// Active expiry cycles per second, as Redis's `hz`.
    pub hz: u32,
    /// Slow log threshold in microseconds (negative: off).
    pub slowlog_log_slower_than: i64,
    pub slowlog_max_len: u64,
    /// Latency monitor threshold in milliseconds (0: off).
    pub latency_monitor_threshold: u64,
    /// Milliseconds a script may run before other clients get BUSY and SCRIPT KILL /
    /// FUNCTION KILL are served (Redis's busy-reply-threshold, alias lua-time-limit; 0: never).
    pub busy_reply_threshold: u64,
    /// Bytes of recent ops each shard keeps in memory for peers that reconnect (16 MiB: the
    /// reference product clamps its CRDT backlog to 1 MB–250 MB per shard). A site with no
    /// peers keeps only the op log chunk being written.
    pub backlog_bytes_max: u64,
    /// Deployment id: peers with another one are refused (docs/replication.md §3).
    pub deployment_id: String,
    /// Port the syncer listens on for peers (0: no sync listener; required with peers).
    pub sync_port: u16,
    /// Address the sync port listens on (empty: the `bind` address).
    pub sync_bind: String,
    /// The other sites: `id=ip:port` of each one's sync endpoint.
    pub peer: Vec<String>,
    /// This site's certificate, key and trusted CA for mutual TLS between sites (PEM). Without
    /// them the syncer speaks plain text, which is allowed only on loopback.
    pub sync_tls_cert: Option<PathBuf>,
    pub sync_tls_key: Option<PathBuf>,
    pub sync_tls_ca: Option<PathBuf>,
    /// Compression of op and full-sync frames this site sends: lz4, zstd or none.
    pub sync_compression: String,
    /// Largest frame accepted from a peer, in bytes (checked before allocating).
    pub sync_frame_bytes_max: u64,
    /// A peer that has not acked for this long no longer holds back garbage collection, and
    /// must rejoin by a full sync (docs/replication.md §6).
    pub sync_quarantine_ms: u64,
    /// Remote timestamps further than this ahead of the local clock are refused.
    pub sync_clock_skew_ms_max: u64,
    /// Write every op to the on-disk log (docs/persistence.md). `no`: memory only, except
    /// for snapshots made by SAVE.
    pub appendonly: bool,
    /// When log writes reach the disk: `always` (a write is acknowledged once its record is
    /// fsynced; many clients share one fsync), `everysec` or `no` (the kernel decides).
    pub appendfsync: String,
    /// Automatic snapshots, as Redis's `save`: pairs "seconds changes" ("" turns them off).
    pub save: String,
    /// Snapshot (and drop the log before it) once the log written since the last snapshot
    /// has grown by this percentage of the snapshot's size (0: off)...
    pub auto_aof_rewrite_percentage: u64,
    /// ...and is at least this many bytes.
    pub auto_aof_rewrite_min_size: u64,
    /// A log segment is closed and a new one started past this many bytes.
    pub log_segment_bytes_max: u64,
    /// Disk the op log may keep beyond what recovery needs, for peers that resume from it
    /// (the on-disk extension of `backlog-bytes-max`); the oldest segments go first.
    pub backlog_disk_bytes_max: u64,
    /// Test-only: after every fsync, write `shard-N/fsynced` naming the log segment and its
    /// length known to be on disk (power-loss drills cut the log back to it).
    pub debug_fsync_watermark: bool,
    /// Logging filter, as `RUST_LOG` (e.g. "info", "meridian=debug").
    pub log_level: String,
    /// Test-only: offset added to the wall clock, in milliseconds.
    pub debug_clock_offset_ms: i64,
    /// Test-only: taken as the kernel's boot id instead of `/proc/sys/kernel/random/boot_id`
    /// (empty: read the kernel's). Drills simulate a reboot by changing it: a start on another
    /// boot id may have lost the unsynced tail of the log and begins a new life
    /// (docs/replication.md §9).
    pub debug_boot_id: String,
    /// OBJECT ENCODING's thresholds, as Redis's (`params` tells what each one drives).
    #[serde(alias = "hash-max-ziplist-entries")]
    pub hash_max_listpack_entries: u64,
    #[serde(alias = "hash-max-ziplist-value")]
    pub hash_max_listpack_value: u64,
    #[serde(alias = "zset-max-ziplist-entries")]
    pub zset_max_listpack_entries: u64,
    #[serde(alias = "zset-max-ziplist-value")]
    pub zset_max_listpack_value: u64,
    pub set_max_intset_entries: u64,
    /// Stream block sizes (`meridian_crdt::stream::set_node_limits`), as Redis's nodes.
    pub stream_node_max_entries: u64,
    pub stream_node_max_bytes: u64,
    /// LRU or LFU access tracking for OBJECT IDLETIME/FREQ (Meridian never evicts).
    pub maxmemory_policy: String,
    pub lfu_log_factor: u64,
    pub lfu_decay_time: u64,
    /// Per-command latency histograms (LATENCY HISTOGRAM, INFO latencystats).
    pub latency_tracking: bool,
    /// The percentiles INFO latencystats shows, space separated.
    pub latency_tracking_info_percentiles: String,
    /// Redis parameters with no effect in Meridian set to something other than their default
    /// (`params::Binding::Stored`): name → canonical value.
    #[serde(skip)]
    pub stored: BTreeMap<String, String>,
    /// The TOML file this configuration was read from (CONFIG REWRITE writes it back).
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            bind: "127.0.0.1".to_string(),
            port: 6379,
            dir: PathBuf::from("./meridian-data"),
            databases: 16,
            site: "local".to_string(),
            proto_max_bulk_len: 512 * 1024 * 1024,
            client_query_buffer_limit: 1024 * 1024 * 1024,
            maxclients: 10_000,
            client_output_buffer_limit: OutputBufferLimits::default(),
            timeout: 0,
            hz: 10,
            slowlog_log_slower_than: 10_000,
            slowlog_max_len: 128,
            latency_monitor_threshold: 0,
            busy_reply_threshold: 5_000,
            backlog_bytes_max: 16 * 1024 * 1024,
            deployment_id: "meridian".to_string(),
            sync_port: 0,
            sync_bind: String::new(),
            peer: Vec::new(),
            sync_tls_cert: None,
            sync_tls_key: None,
            sync_tls_ca: None,
            sync_compression: "lz4".to_string(),
            sync_frame_bytes_max: 64 * 1024 * 1024,
            sync_quarantine_ms: 3_600_000,
            sync_clock_skew_ms_max: 60_000,
            appendonly: true,
            appendfsync: "everysec".to_string(),
            save: "3600 1 300 100 60 10000".to_string(),
            auto_aof_rewrite_percentage: 100,
            auto_aof_rewrite_min_size: 64 * 1024 * 1024,
            log_segment_bytes_max: 64 * 1024 * 1024,
            backlog_disk_bytes_max: 1024 * 1024 * 1024,
            debug_fsync_watermark: false,
            log_level: "info".to_string(),
            debug_clock_offset_ms: 0,
            debug_boot_id: String::new(),
            hash_max_listpack_entries: 512,
            hash_max_listpack_value: 64,
            zset_max_listpack_entries: 128,
            zset_max_listpack_value: 64,
            set_max_intset_entries: 512,
            stream_node_max_entries: 100,
            stream_node_max_bytes: 4096,
            maxmemory_policy: "noeviction".to_string(),
            lfu_log_factor: 10,
            lfu_decay_time: 1,
            latency_tracking: true,
            latency_tracking_info_percentiles: "50 99 99.9".to_string(),
            stored: BTreeMap::new(),
            config_file: None,
        }
    }
}

/// The sizes below which Redis keeps a hash or sorted set as a listpack (OBJECT ENCODING;
/// HSCAN and ZSCAN reply a listpack whole).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListpackLimits {
    pub entries_max: u64,
    pub value_max: u64,
}

impl Config {
    pub fn hash_listpack(&self) -> ListpackLimits {
        ListpackLimits {
            entries_max: self.hash_max_listpack_entries,
            value_max: self.hash_max_listpack_value,
        }
    }

    pub fn zset_listpack(&self) -> ListpackLimits {
        ListpackLimits {
            entries_max: self.zset_max_listpack_entries,
            value_max: self.zset_max_listpack_value,
        }
    }
}

/// One client class's output limit (Redis `clientBufferLimitsConfig`): a client whose pending
/// output reaches `hard_bytes`, or stays at or over `soft_bytes` for `soft_seconds`, is closed.
/// 0 turns a bound off.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputLimit {
    pub hard_bytes: u64,
    pub soft_bytes: u64,
    pub soft_seconds: u64,
}

/// `client-output-buffer-limit`: the limits of the three client classes. Meridian has no
/// Redis replicas: the `replica` class is kept for CONFIG and configuration files, and sync
/// links are bounded by `backlog-bytes-max` instead (they stream from the op log and queue
/// nothing per link).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutputBufferLimits {
    pub normal: OutputLimit,
    pub replica: OutputLimit,
    pub pubsub: OutputLimit,
}

impl Default for OutputBufferLimits {
    /// Redis's defaults: `normal 0 0 0 replica 256mb 64mb 60 pubsub 32mb 8mb 60`.
    fn default() -> OutputBufferLimits {
        const MB: u64 = 1024 * 1024;
        OutputBufferLimits {
            normal: OutputLimit {
                hard_bytes: 0,
                soft_bytes: 0,
                soft_seconds: 0,
            },
            replica: OutputLimit {
                hard_bytes: 256 * MB,
                soft_bytes: 64 * MB,
                soft_seconds: 60,
            },
            pubsub: OutputLimit {
                hard_bytes: 32 * MB,
                soft_bytes: 8 * MB,
                soft_seconds: 60,
            },
        }
    }
}

impl OutputBufferLimits {
    /// Redis's `setConfigClientOutputBufferLimitOption`: groups of "class hard soft seconds"
    /// (class normal, replica or slave, pubsub; sizes with Redis's units) applied over
    /// `self`, all or nothing. The error is Redis's CONFIG SET message.
    pub fn apply(&mut self, text: &str) -> Result<(), &'static str> {
        let words: Vec<&str> = text.split_whitespace().collect();
        if words.len() % 4 != 0 {
            return Err("Wrong number of arguments in buffer limit configuration.");
        }
        let mut next = *self;
        for group in words.chunks_exact(4) {
            let &[class, hard, soft, secs] = group else {
                continue;
            };
            let slot = match class.to_ascii_lowercase().as_str() {
                "normal" => &mut next.normal,
                "replica" | "slave" => &mut next.replica,
                "pubsub" => &mut next.pubsub,
                _ => return Err("Invalid client class specified in buffer limit configuration."),
            };
            let bad = "Error in hard, soft or soft_seconds setting in buffer limit configuration.";
            let hard_bytes = params::parse_memory(hard.as_bytes()).ok_or(bad)?;
            let soft_bytes = params::parse_memory(soft.as_bytes()).ok_or(bad)?;
            let soft_seconds = crate::cmd::args::parse_i64(secs.as_bytes())
                .and_then(|n| u64::try_from(n).ok())
                .ok_or(bad)?;
            *slot = OutputLimit {
                hard_bytes,
                soft_bytes,
                soft_seconds,
            };
        }
        *self = next;
        Ok(())
    }
}

impl std::fmt::Display for OutputBufferLimits {
    /// CONFIG GET's form (Redis 7.0 still names the replica class "slave" there).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, (name, l)) in [
            ("normal", &self.normal),
            ("slave", &self.replica),
            ("pubsub", &self.pubsub),
        ]
        .iter()
        .enumerate()
        {
            let sep = if i == 0 { "" } else { " " };
            write!(
                f,
                "{sep}{name} {} {} {}",
                l.hard_bytes, l.soft_bytes, l.soft_seconds
            )?;
        }
        Ok(())
    }
}

/// Written as `CONFIG GET` shows it, which `Deserialize` reads back (CONFIG REWRITE).
impl Serialize for OutputBufferLimits {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for OutputBufferLimits {
    /// A TOML string in Redis's form; the classes it names replace the defaults.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<OutputBufferLimits, D::Error> {
        let text = String::deserialize(d)?;
        let mut limits = OutputBufferLimits::default();
        limits.apply(&text).map_err(serde::de::Error::custom)?;
        Ok(limits)
    }
}

/// Upper bound on `databases`, so a typo cannot allocate millions of tables.
pub const DATABASES_MAX: u32 = 1024;
/// Shortest `sync-quarantine-ms`: several keepalive periods and the idle timeout.
pub const SYNC_QUARANTINE_MS_MIN: u64 = 1_000;
/// Most peers a site may list.
pub const PEERS_MAX: usize = 64;
/// Bounds on `sync-frame-bytes-max`: a frame must hold the largest record.
pub const SYNC_FRAME_BYTES_MIN: u64 = 1024 * 1024;
pub const SYNC_FRAME_BYTES_MAX: u64 = 2 * 1024 * 1024 * 1024 - 1;

/// Bounds on `log-segment-bytes-max`.
pub const LOG_SEGMENT_BYTES_MIN: u64 = 64 * 1024;
pub const LOG_SEGMENT_BYTES_MAX: u64 = 4 * 1024 * 1024 * 1024;

/// Parses a `save` value: pairs "seconds changes", empty for none.
pub fn parse_save(text: &str) -> Option<Vec<(u64, u64)>> {
    let words: Vec<&str> = text.split_whitespace().collect();
    if words.len() % 2 != 0 {
        return None;
    }
    let mut out = Vec::with_capacity(words.len() / 2);
    for pair in words.chunks(2) {
        let (Some(secs), Some(changes)) = (pair.first(), pair.get(1)) else {
            return None;
        };
        out.push((secs.parse().ok()?, changes.parse().ok()?));
    }
    Some(out)
}

/// One configured peer site.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerAddr {
    pub site: String,
    pub addr: std::net::SocketAddr,
}

fn site_id_ok(s: &str) -> bool {
    // A DNS label: certificates name sites, so a site id must be a valid DNS name.
    !s.is_empty()
        && s.len() <= 32
        && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

impl Config {
    /// The configured peers, parsed and checked (`id=ip:port`, distinct ids, not this site).
    pub fn peers(&self) -> Result<Vec<PeerAddr>, ConfigError> {
        let bad = |message: String| ConfigError::Invalid {
            key: "peer".to_string(),
            message,
        };
        if self.peer.len() > PEERS_MAX {
            return Err(bad(format!("at most {PEERS_MAX} peers")));
        }
        let mut out: Vec<PeerAddr> = Vec::with_capacity(self.peer.len());
        for p in &self.peer {
            let Some((site, addr)) = p.split_once('=') else {
                return Err(bad(format!("'{p}' must be id=ip:port")));
            };
            if !site_id_ok(site) {
                return Err(bad(format!("'{site}' is not a valid site id")));
            }
            if site == self.site {
                return Err(bad(format!("'{site}' is this site's own id")));
            }
            if out.iter().any(|o| o.site == site) {
                return Err(bad(format!("site '{site}' is listed twice")));
            }
            let addr: std::net::SocketAddr = addr
                .parse()
                .map_err(|_| bad(format!("'{addr}' is not ip:port")))?;
            out.push(PeerAddr {
                site: site.to_string(),
                addr,
            });
        }
        Ok(out)
    }

    /// The address the sync port listens on.
    pub fn sync_bind_ip(&self) -> Option<std::net::IpAddr> {
        let text = if self.sync_bind.is_empty() {
            &self.bind
        } else {
            &self.sync_bind
        };
        text.parse().ok()
    }

    /// The TLS files, when all three are configured.
    pub fn sync_tls_files(&self) -> Option<meridian_syncer::TlsFiles> {
        match (&self.sync_tls_cert, &self.sync_tls_key, &self.sync_tls_ca) {
            (Some(cert), Some(key), Some(ca)) => Some(meridian_syncer::TlsFiles {
                cert: cert.clone(),
                key: key.clone(),
                ca: ca.clone(),
            }),
            _ => None,
        }
    }

    /// Reads a TOML file over the defaults; remembers the path for CONFIG REWRITE.
    pub fn from_file(path: &std::path::Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        let mut cfg = Self::from_toml(&text).map_err(|e| match e {
            ConfigError::Parse { message, .. } => ConfigError::Parse {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })?;
        cfg.config_file = Some(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()));
        Ok(cfg)
    }

    /// Parses TOML text over the defaults. Keys of Redis parameters that have no effect in
    /// Meridian (`params::Binding::Stored`) are checked as `CONFIG SET` checks them and kept
    /// in `stored`; every other key must be a `Config` field.
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let parse_err = |message: String| ConfigError::Parse {
            path: String::new(),
            message,
        };
        let mut table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| parse_err(e.to_string()))?;
        let mut stored = BTreeMap::new();
        let keys: Vec<String> = table.keys().cloned().collect();
        for key in keys {
            let Some(p) = params::find(key.as_bytes()) else {
                continue;
            };
            if !matches!(p.binding, params::Binding::Stored) {
                continue;
            }
            let Some(value) = table.remove(&key) else {
                continue;
            };
            let invalid = |message: String| ConfigError::Invalid {
                key: key.clone(),
                message,
            };
            let text = params::toml_text(&value)
                .ok_or_else(|| invalid("must be a string, number or boolean".to_string()))?;
            let canonical = p.parse(&text).map_err(invalid)?;
            if canonical != p.default {
                stored.insert(p.name.to_string(), canonical);
            }
        }
        let mut cfg: Config = toml::Value::Table(table)
            .try_into()
            .map_err(|e: toml::de::Error| parse_err(e.to_string()))?;
        cfg.stored = stored;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Checks every value; the error names the key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: String| {
            Err(ConfigError::Invalid {
                key: key.to_string(),
                message,
            })
        };
        if self.bind.parse::<std::net::IpAddr>().is_err() {
            return bad("bind", format!("'{}' is not an IP address", self.bind));
        }
        if self.databases == 0 || self.databases > DATABASES_MAX {
            return bad(
                "databases",
                format!(
                    "must be between 1 and {DATABASES_MAX}, got {}",
                    self.databases
                ),
            );
        }
        if !site_id_ok(&self.site) {
            return bad(
                "site",
                format!(
                    "'{}' must be a DNS label: 1-32 characters of [A-Za-z0-9-], not starting or ending with '-'",
                    self.site
                ),
            );
        }
        if self.deployment_id.is_empty() || self.deployment_id.len() > 255 {
            return bad("deployment-id", "must be 1-255 bytes".to_string());
        }
        let peers = self.peers()?;
        if !peers.is_empty() && self.sync_port == 0 {
            return bad(
                "sync-port",
                "a site with peers needs a sync port".to_string(),
            );
        }
        if self.sync_bind_ip().is_none() {
            return bad(
                "sync-bind",
                format!("'{}' is not an IP address", self.sync_bind),
            );
        }
        if meridian_syncer::Codec::parse(&self.sync_compression).is_none() {
            return bad(
                "sync-compression",
                format!("'{}' must be lz4, zstd or none", self.sync_compression),
            );
        }
        if !(SYNC_FRAME_BYTES_MIN..=SYNC_FRAME_BYTES_MAX).contains(&self.sync_frame_bytes_max) {
            return bad(
                "sync-frame-bytes-max",
                format!(
                    "must be between {SYNC_FRAME_BYTES_MIN} and {SYNC_FRAME_BYTES_MAX}, got {}",
                    self.sync_frame_bytes_max
                ),
            );
        }
        if self.sync_quarantine_ms < SYNC_QUARANTINE_MS_MIN {
            return bad(
                "sync-quarantine-ms",
                format!(
                    "must be at least {SYNC_QUARANTINE_MS_MIN} (links ack every second or two), got {}",
                    self.sync_quarantine_ms
                ),
            );
        }
        let tls = [&self.sync_tls_cert, &self.sync_tls_key, &self.sync_tls_ca];
        let given = tls.iter().filter(|f| f.is_some()).count();
        if given != 0 && given != 3 {
            return bad(
                "sync-tls-cert",
                "sync-tls-cert, sync-tls-key and sync-tls-ca go together".to_string(),
            );
        }
        if given == 0 && (self.sync_port != 0 || !peers.is_empty()) {
            let bind_loopback = self.sync_bind_ip().is_some_and(|ip| ip.is_loopback());
            if !bind_loopback {
                return bad(
                    "sync-tls-cert",
                    format!(
                        "without TLS files the syncer runs only on loopback, but sync-bind is {}",
                        self.sync_bind_ip()
                            .map(|i| i.to_string())
                            .unwrap_or_default()
                    ),
                );
            }
            if let Some(p) = peers.iter().find(|p| !p.addr.ip().is_loopback()) {
                return bad(
                    "sync-tls-cert",
                    format!(
                        "without TLS files the syncer runs only on loopback, but peer {} is at {}",
                        p.site, p.addr
                    ),
                );
            }
        }
        if self.proto_max_bulk_len < 1024 * 1024 {
            return bad(
                "proto-max-bulk-len",
                format!("must be at least 1048576, got {}", self.proto_max_bulk_len),
            );
        }
        if self.client_query_buffer_limit < 1024 * 1024 {
            return bad(
                "client-query-buffer-limit",
                format!(
                    "must be at least 1048576, got {}",
                    self.client_query_buffer_limit
                ),
            );
        }
        if self.maxclients == 0 {
            return bad("maxclients", "must be at least 1".to_string());
        }
        if !(1..=500).contains(&self.hz) {
            return bad("hz", format!("must be between 1 and 500, got {}", self.hz));
        }
        if crate::persist::Fsync::parse(&self.appendfsync).is_none() {
            return bad(
                "appendfsync",
                format!("'{}' must be always, everysec or no", self.appendfsync),
            );
        }
        if parse_save(&self.save).is_none() {
            return bad(
                "save",
                format!("'{}' must be pairs of \"seconds changes\"", self.save),
            );
        }
        if !(LOG_SEGMENT_BYTES_MIN..=LOG_SEGMENT_BYTES_MAX).contains(&self.log_segment_bytes_max) {
            return bad(
                "log-segment-bytes-max",
                format!(
                    "must be between {LOG_SEGMENT_BYTES_MIN} and {LOG_SEGMENT_BYTES_MAX}, got {}",
                    self.log_segment_bytes_max
                ),
            );
        }
        if self
            .log_level
            .parse::<tracing_subscriber::EnvFilter>()
            .is_err()
        {
            return bad(
                "log-level",
                format!("'{}' is not a log filter", self.log_level),
            );
        }
        // Every other field holds what its parameter's kind accepts (bounds, enum words).
        for p in params::PARAMS {
            if let params::Binding::Field { get, .. } = p.binding {
                if p.name != "dir" {
                    if let Err(message) = p.parse(&get(self)) {
                        return bad(p.name, message);
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_is_the_default() {
        assert_eq!(Config::from_toml("").unwrap(), Config::default());
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let e = Config::from_toml("bogus-key = 1").unwrap_err().to_string();
        assert!(e.contains("bogus-key"), "{e}");
        let e = Config::from_toml("port = 70000").unwrap_err().to_string();
        assert!(e.contains("port"), "{e}");
        let e = Config::from_toml("databases = 0").unwrap_err().to_string();
        assert!(e.contains("databases"), "{e}");
        let e = Config::from_toml("bind = \"nope\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bind"), "{e}");
    }

    #[test]
    fn example_file_is_the_embedded_default() {
        let text = include_str!("../../../deploy/meridian.example.toml");
        assert_eq!(Config::from_toml(text).unwrap(), Config::default());
    }

    #[test]
    fn peers_and_plain_text_rules() {
        let c = Config::from_toml(
            "site = \"a\"\nsync-port = 7101\npeer = [\"b=127.0.0.1:7102\", \"c=127.0.0.1:7103\"]",
        )
        .unwrap();
        assert_eq!(c.peers().unwrap().len(), 2);
        for (toml, key) in [
            ("peer = [\"b=127.0.0.1:7102\"]", "sync-port"),
            ("sync-port = 1\npeer = [\"local=127.0.0.1:7102\"]", "peer"),
            ("sync-port = 1\npeer = [\"b=nowhere\"]", "peer"),
            (
                "sync-port = 1\npeer = [\"b=127.0.0.1:1\", \"b=127.0.0.1:2\"]",
                "peer",
            ),
            (
                "sync-port = 1\npeer = [\"b=10.1.2.3:7102\"]",
                "sync-tls-cert",
            ),
            ("sync-port = 1\nsync-bind = \"0.0.0.0\"", "sync-tls-cert"),
            ("sync-tls-cert = \"x\"", "sync-tls-cert"),
            ("sync-compression = \"gzip\"", "sync-compression"),
            ("sync-frame-bytes-max = 1048575", "sync-frame-bytes-max"),
            ("site = \"a_b\"", "site"),
        ] {
            let e = Config::from_toml(toml).unwrap_err().to_string();
            assert!(e.contains(key), "{toml}: {e}");
        }
        // At the frame limit's lower bound: accepted.
        Config::from_toml("sync-frame-bytes-max = 1048576").unwrap();
        // With TLS files, non-loopback peers are fine.
        Config::from_toml(
            "sync-port = 1\npeer = [\"b=10.1.2.3:7102\"]\nsync-tls-cert = \"c\"\nsync-tls-key = \"k\"\nsync-tls-ca = \"ca\"",
        )
        .unwrap();
    }

    #[test]
    fn output_buffer_limits_parse_like_redis() {
        let c = Config::from_toml("client-output-buffer-limit = \"normal 1mb 512kb 5\"").unwrap();
        assert_eq!(
            c.client_output_buffer_limit.to_string(),
            "normal 1048576 524288 5 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
        );
        let mut l = OutputBufferLimits::default();
        assert_eq!(
            l.apply("normal 1mb 512kb"),
            Err("Wrong number of arguments in buffer limit configuration.")
        );
        assert_eq!(
            l.apply("master 1 2 3"),
            Err("Invalid client class specified in buffer limit configuration.")
        );
        for bad in ["normal 1 2 -3", "replica 1x 2 3", "pubsub 1 2 3x"] {
            assert_eq!(
                l.apply(bad),
                Err("Error in hard, soft or soft_seconds setting in buffer limit configuration.")
            );
        }
        // All or nothing: a bad second group leaves the first unapplied.
        assert!(l.apply("normal 1 1 1 bogus 1 1 1").is_err());
        assert_eq!(l, OutputBufferLimits::default());
        assert_eq!(l.apply(""), Ok(()));
        l.apply("SLAVE 1k 2 3 pubsub 0 0 0").unwrap();
        assert_eq!(l.replica.hard_bytes, 1000);
        assert_eq!(l.pubsub.hard_bytes, 0);
        let e = Config::from_toml("client-output-buffer-limit = \"normal 1\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("buffer limit"), "{e}");
    }

    #[test]
    fn file_values_apply() {
        let c = Config::from_toml("port = 7001\ndatabases = 4\nsite = \"a\"").unwrap();
        assert_eq!((c.port, c.databases, c.site.as_str()), (7001, 4, "a"));
    }
}

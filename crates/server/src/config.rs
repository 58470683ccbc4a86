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
    /// Address the client ports listen on.
    pub bind: String,
    /// The plain TCP client port (0: none, only `tls-port`).
    pub port: u16,
    /// The TLS client port (0: none), Redis's `tls-port`; `crate::tls` reads the `tls-*`
    /// settings below, Redis 7.0's names and meanings.
    pub tls_port: u16,
    pub tls_cert_file: String,
    pub tls_key_file: String,
    /// Always empty: an encrypted key is refused (`crate::tls`).
    pub tls_key_file_pass: String,
    pub tls_ca_cert_file: String,
    pub tls_ca_cert_dir: String,
    /// yes, no or optional.
    pub tls_auth_clients: String,
    /// "TLSv1.2", "TLSv1.3" or both (empty: both).
    pub tls_protocols: String,
    /// TLS 1.2 suites, OpenSSL names, colon-separated (empty: all rustls offers).
    pub tls_ciphers: String,
    /// TLS 1.3 suites, OpenSSL names, colon-separated (empty: all rustls offers).
    pub tls_ciphersuites: String,
    pub tls_prefer_server_ciphers: bool,
    /// A connection to `tls-port` that has not completed its handshake within this many
    /// milliseconds is closed.
    pub tls_handshake_timeout_ms: u64,
    /// Data directory: the op log segments and snapshots of each shard (`shard-N/`) and the
    /// slot map (`slot-map`).
    pub dir: PathBuf,
    /// Shard threads in this process (0: one per CPU the process may run on). Each owns a
    /// range of hash slots; a data directory keeps the count it was created with.
    pub shards: u32,
    /// The Redis Cluster API: each shard also listens on its own port as a cluster node
    /// (`cluster-port` + its index) and the CLUSTER commands describe them. Unset: on when
    /// the process has more than one shard.
    pub cluster_api: Option<bool>,
    /// Port of shard 0's cluster endpoint (0: the larger of `port` and `tls-port`, + 1); shard
    /// N listens on it + N.
    pub cluster_endpoint_port: u16,
    /// The address CLUSTER SLOTS/SHARDS/NODES and MOVED give for the endpoints (empty: the
    /// `bind` address, or 127.0.0.1 when it is a wildcard).
    pub cluster_announce_ip: String,
    /// A site across several nodes: the topology file (nodes, their shards and ports, slot
    /// ranges, epoch; identical on every node). Empty: the site is this process.
    pub topology: PathBuf,
    /// This node's name in the topology file.
    pub node_name: String,
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
    /// The default user's password (Redis `requirepass`; empty: none, clients need no
    /// AUTH). Users and passwords are per site, never replicated.
    pub requirepass: String,
    /// Refuse clients from addresses other than 127.0.0.1 and ::1 while the default user
    /// has no password (Redis `protected-mode`).
    pub protected_mode: bool,
    /// DEL frees as UNLINK does (Redis `lazyfree-lazy-user-del`).
    pub lazyfree_lazy_user_del: bool,
    /// FLUSHALL and FLUSHDB without ASYNC or SYNC run as ASYNC (Redis
    /// `lazyfree-lazy-user-flush`).
    pub lazyfree_lazy_user_flush: bool,
    /// ACL users file (Redis `aclfile`; empty: none), loaded at start and by ACL LOAD.
    pub aclfile: String,
    /// Entries the ACL log keeps (Redis `acllog-max-len`).
    pub acllog_max_len: u64,
    /// Channels of new users: `resetchannels` (none) or `allchannels` (Redis
    /// `acl-pubsub-default`).
    pub acl_pubsub_default: String,
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
    /// The other sites: `id=host:port` of each one's sync endpoint (an IP address or a DNS
    /// name, resolved again on every reconnect).
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
    /// What a background snapshot's replay may hold at once (0: a quarter of `maxmemory`,
    /// or no bound without one): it replays the keys in parts to stay under it
    /// (`persist::job`).
    pub snapshot_memory_bytes_max: u64,
    /// Test-only: after every fsync, write `shard-N/fsynced` naming the log segment and its
    /// length known to be on disk (power-loss drills cut the log back to it).
    pub debug_fsync_watermark: bool,
    /// Logging filter, as `RUST_LOG` (e.g. "info", "meridian=debug"). The `--log-level` flag
    /// wins over `RUST_LOG`, which wins over this key.
    pub log_level: String,
    /// Log line format: `text` or `json`.
    pub log_format: String,
    /// Log file (empty: standard output). SIGHUP reopens it, for logrotate.
    pub log_file: String,
    /// Port of the HTTP endpoint serving `/metrics` and `/health` (0: off).
    pub metrics_port: u16,
    /// Address the metrics port listens on.
    pub metrics_bind: String,
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
    /// Keys the process's client-side caching tables hold before some are invalidated to
    /// make room (0: no limit).
    pub tracking_table_max_keys: u64,
    /// The process's memory limit in bytes (0: none): past it, writes evict keys of the
    /// shard they run on by `maxmemory_policy` or get -OOM (`crate::evict`).
    pub maxmemory: u64,
    /// Which keys eviction takes (Redis's policies), and LRU or LFU access tracking for
    /// OBJECT IDLETIME/FREQ.
    pub maxmemory_policy: String,
    /// Keys sampled per database for each eviction pool refill.
    pub maxmemory_samples: u64,
    /// How long one command may evict (0..100, Redis's scale: `evict::time_limit_us`).
    pub maxmemory_eviction_tenacity: u64,
    /// Most keys one shard with peers keeps marked as evicted (`evict::EvictedMark`); at
    /// the limit it evicts no more (writes get -OOM) until writes bring marked keys back.
    pub maxmemory_evicted_marks_max: u64,
    pub lfu_log_factor: u64,
    pub lfu_decay_time: u64,
    /// Per-command latency histograms (LATENCY HISTOGRAM, INFO latencystats).
    pub latency_tracking: bool,
    /// The percentiles INFO latencystats shows, space separated.
    pub latency_tracking_info_percentiles: String,
    /// Keyspace notification classes (Redis `notify-keyspace-events`; "" publishes none).
    pub notify_keyspace_events: String,
    /// Test hook (Redis's hidden `key-load-delay`): microseconds slept per key or log record
    /// loaded at start.
    pub key_load_delay: i64,
    /// Redis parameters with no effect in Meridian set to something other than their default
    /// (`params::Binding::Stored`): name → canonical value.
    #[serde(skip)]
    pub stored: BTreeMap<String, String>,
    /// The TOML file this configuration was read from, absolute (not a key): CONFIG REWRITE
    /// writes it back, CRDT.ADDPEER and CRDT.REMOVEPEER rewrite its peer list.
    #[serde(skip)]
    pub config_file: Option<PathBuf>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            bind: "127.0.0.1".to_string(),
            port: 6379,
            tls_port: 0,
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            tls_key_file_pass: String::new(),
            tls_ca_cert_file: String::new(),
            tls_ca_cert_dir: String::new(),
            tls_auth_clients: "yes".to_string(),
            tls_protocols: String::new(),
            tls_ciphers: String::new(),
            tls_ciphersuites: String::new(),
            tls_prefer_server_ciphers: false,
            tls_handshake_timeout_ms: crate::tls::HANDSHAKE_TIMEOUT_MS_DEFAULT,
            dir: PathBuf::from("./meridian-data"),
            shards: 0,
            cluster_api: None,
            cluster_endpoint_port: 0,
            cluster_announce_ip: String::new(),
            topology: PathBuf::new(),
            node_name: String::new(),
            databases: 16,
            site: "local".to_string(),
            proto_max_bulk_len: 512 * 1024 * 1024,
            client_query_buffer_limit: 1024 * 1024 * 1024,
            maxclients: 10_000,
            client_output_buffer_limit: OutputBufferLimits::default(),
            timeout: 0,
            requirepass: String::new(),
            protected_mode: true,
            lazyfree_lazy_user_del: false,
            lazyfree_lazy_user_flush: false,
            aclfile: String::new(),
            acllog_max_len: 128,
            acl_pubsub_default: "resetchannels".to_string(),
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
            snapshot_memory_bytes_max: 0,
            debug_fsync_watermark: false,
            log_level: "info".to_string(),
            log_format: "text".to_string(),
            log_file: String::new(),
            metrics_port: 0,
            metrics_bind: "127.0.0.1".to_string(),
            debug_clock_offset_ms: 0,
            debug_boot_id: String::new(),
            hash_max_listpack_entries: 512,
            hash_max_listpack_value: 64,
            zset_max_listpack_entries: 128,
            zset_max_listpack_value: 64,
            set_max_intset_entries: 512,
            stream_node_max_entries: 100,
            stream_node_max_bytes: 4096,
            tracking_table_max_keys: 1_000_000,
            maxmemory: 0,
            maxmemory_policy: "noeviction".to_string(),
            maxmemory_samples: 5,
            maxmemory_evicted_marks_max: 1_000_000,
            maxmemory_eviction_tenacity: 10,
            lfu_log_factor: 10,
            lfu_decay_time: 1,
            latency_tracking: true,
            latency_tracking_info_percentiles: "50 99 99.9".to_string(),
            notify_keyspace_events: String::new(),
            key_load_delay: 0,
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
    /// `host:port`, the host an IP address (IPv6 in brackets) or a DNS name.
    pub addr: String,
}

impl PeerAddr {
    /// Whether the address is on loopback without asking DNS: a loopback IP or `localhost`.
    pub fn is_loopback(&self) -> bool {
        match self.addr.parse::<std::net::SocketAddr>() {
            Ok(a) => a.ip().is_loopback(),
            Err(_) => self
                .addr
                .rsplit_once(':')
                .is_some_and(|(h, _)| h.eq_ignore_ascii_case("localhost")),
        }
    }
}

/// Checks `host:port`: a socket address, or a DNS name (letters, digits, '-', '.') and a
/// port. Returns None when it is neither.
fn host_port_ok(addr: &str) -> bool {
    if addr.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    let Some((host, port)) = addr.rsplit_once(':') else {
        return false;
    };
    let port_ok = port.parse::<u16>().is_ok_and(|p| p != 0);
    let host_ok = !host.is_empty()
        && host.len() <= 253
        && host
            .split('.')
            .all(|label| !label.is_empty() && label.len() <= 63 && site_id_chars(label));
    port_ok && host_ok
}

fn site_id_chars(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` is a valid site id: a DNS label of at most 32 characters (certificates name
/// sites by it).
pub fn site_id_ok(s: &str) -> bool {
    // A DNS label: certificates name sites, so a site id must be a valid DNS name.
    !s.is_empty() && s.len() <= 32 && site_id_chars(s)
}

impl Config {
    /// The number of shard threads to run: `shards`, or with 0 one per allowed CPU (at
    /// most `slot::SHARDS_MAX`).
    pub fn shard_count(&self, allowed_cpus: usize) -> u16 {
        let n = if self.shards == 0 {
            allowed_cpus.max(1)
        } else {
            self.shards as usize
        };
        n.clamp(1, crate::slot::SHARDS_MAX) as u16
    }

    /// Whether the cluster API is on for a process of `shards` shards.
    pub fn cluster_enabled(&self, shards: u16) -> bool {
        // Its endpoints are plain TCP: with `port 0` (TLS only) it is off unless asked for,
        // and asking for it is refused (`validate`).
        self.cluster_api.unwrap_or(shards > 1 && self.port != 0)
    }

    /// The port of shard `shard`'s cluster endpoint.
    pub fn endpoint_port(&self, shard: u16) -> Option<u16> {
        // Past both client ports, so that the usual `port 6379` and `tls-port 6380` leave
        // the endpoints at 6381 and up.
        let base = if self.cluster_endpoint_port == 0 {
            self.port.max(self.tls_port).checked_add(1)?
        } else {
            self.cluster_endpoint_port
        };
        base.checked_add(shard)
    }

    /// The address the endpoints are announced at.
    pub fn cluster_ip(&self) -> String {
        if !self.cluster_announce_ip.is_empty() {
            return self.cluster_announce_ip.clone();
        }
        match self.bind.parse::<std::net::IpAddr>() {
            Ok(ip) if !ip.is_unspecified() => ip.to_string(),
            _ => "127.0.0.1".to_string(),
        }
    }

    /// Whether new ACL users get every channel (`acl-pubsub-default allchannels`).
    pub fn pubsub_all(&self) -> bool {
        self.acl_pubsub_default == "allchannels"
    }

    /// The configured peers, parsed and checked (`id=host:port`, distinct ids, not this
    /// site). Names are not resolved here.
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
                return Err(bad(format!("'{p}' must be id=host:port")));
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
            if !host_port_ok(addr) {
                return Err(bad(format!(
                    "'{addr}' is not host:port (an IP address or a DNS name, and a port)"
                )));
            }
            out.push(PeerAddr {
                site: site.to_string(),
                addr: addr.to_string(),
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
    /// The client ports and the `tls-*` values (the files are read at start, `crate::tls`).
    fn validate_tls(&self) -> Result<(), ConfigError> {
        let bad = |key: &str, message: String| {
            Err(ConfigError::Invalid {
                key: key.to_string(),
                message,
            })
        };
        if self.port == 0 && self.tls_port == 0 {
            return bad(
                "port",
                "port and tls-port are both 0: configured to not listen anywhere".to_string(),
            );
        }
        if self.port == 0 && self.cluster_api == Some(true) {
            return bad(
                "cluster-api",
                "the cluster API's endpoints are plain TCP; with port 0 (TLS only) set cluster-api no".to_string(),
            );
        }
        if !matches!(self.tls_auth_clients.as_str(), "yes" | "no" | "optional") {
            return bad(
                "tls-auth-clients",
                format!("'{}' must be yes, no or optional", self.tls_auth_clients),
            );
        }
        if self.tls_handshake_timeout_ms == 0 {
            return bad("tls-handshake-timeout-ms", "must be at least 1".to_string());
        }
        type Check = fn(&str) -> Result<String, String>;
        let checks: [(&str, &str, Check); 4] = [
            (
                "tls-key-file-pass",
                &self.tls_key_file_pass,
                crate::tls::check_key_file_pass,
            ),
            (
                "tls-protocols",
                &self.tls_protocols,
                crate::tls::check_protocols,
            ),
            ("tls-ciphers", &self.tls_ciphers, crate::tls::check_ciphers),
            (
                "tls-ciphersuites",
                &self.tls_ciphersuites,
                crate::tls::check_ciphersuites,
            ),
        ];
        for (key, value, check) in checks {
            if let Err(message) = check(value) {
                return bad(key, message);
            }
        }
        Ok(())
    }

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
    /// in `stored`; every other key must be a `Config` field. A syntax error, an unknown key
    /// or a bad value gives one line naming the line and column (`ConfigError::Parse`) or the
    /// key (`ConfigError::Invalid`).
    pub fn from_toml(text: &str) -> Result<Config, ConfigError> {
        let parse_err = |message: String| ConfigError::Parse {
            path: String::new(),
            message,
        };
        let mut table: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| parse_err(toml_error_line(text, &e)))?;
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
        // Spans are lost once the table is taken apart; the message names the key instead.
        let mut cfg: Config =
            toml::Value::Table(table)
                .try_into()
                .map_err(|e: toml::de::Error| {
                    parse_err(
                        e.to_string()
                            .replace(['\r', '\n'], " ")
                            .trim_end()
                            .to_string(),
                    )
                })?;
        cfg.stored = stored;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Sets a Redis parameter kept in `stored` (a start flag): checked as `CONFIG SET`
    /// checks it; an unknown name or one bound to a field is refused.
    pub fn set_stored(&mut self, name: &str, text: &str) -> Result<(), String> {
        let p = params::find(name.as_bytes()).ok_or_else(|| format!("unknown parameter {name}"))?;
        if !matches!(p.binding, params::Binding::Stored) {
            return Err(format!("{name} is not a stored parameter"));
        }
        let canonical = p.parse(text)?;
        if canonical == p.default {
            self.stored.remove(p.name);
        } else {
            self.stored.insert(p.name.to_string(), canonical);
        }
        Ok(())
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
        if self.shards as usize > crate::slot::SHARDS_MAX {
            return bad(
                "shards",
                format!(
                    "must be between 0 (one per CPU) and {}, got {}",
                    crate::slot::SHARDS_MAX,
                    self.shards
                ),
            );
        }
        if !self.cluster_announce_ip.is_empty()
            && self
                .cluster_announce_ip
                .parse::<std::net::IpAddr>()
                .is_err()
        {
            return bad(
                "cluster-announce-ip",
                format!("'{}' is not an IP address", self.cluster_announce_ip),
            );
        }
        if crate::evict::Policy::parse(&self.maxmemory_policy).is_none() {
            return bad(
                "maxmemory-policy",
                format!(
                    "must be one of noeviction, allkeys-lru, allkeys-lfu, allkeys-random, volatile-lru, volatile-lfu, volatile-random, volatile-ttl; got '{}'",
                    self.maxmemory_policy
                ),
            );
        }
        if self.maxmemory_samples == 0 || self.maxmemory_samples > i32::MAX as u64 {
            return bad(
                "maxmemory-samples",
                format!(
                    "must be between 1 and 2147483647, got {}",
                    self.maxmemory_samples
                ),
            );
        }
        if self.maxmemory_evicted_marks_max == 0
            || self.maxmemory_evicted_marks_max > i64::MAX as u64
        {
            return bad(
                "maxmemory-evicted-marks-max",
                format!(
                    "must be between 1 and {}, got {}",
                    i64::MAX,
                    self.maxmemory_evicted_marks_max
                ),
            );
        }
        if self.maxmemory_eviction_tenacity > 100 {
            return bad(
                "maxmemory-eviction-tenacity",
                format!(
                    "must be between 0 and 100, got {}",
                    self.maxmemory_eviction_tenacity
                ),
            );
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
        // A node of a multi-node site takes its sync port from the topology file.
        if !peers.is_empty() && self.sync_port == 0 && self.topology.as_os_str().is_empty() {
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
            if let Some(p) = peers.iter().find(|p| !p.is_loopback()) {
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
        if !matches!(
            self.acl_pubsub_default.as_str(),
            "resetchannels" | "allchannels"
        ) {
            return bad(
                "acl-pubsub-default",
                format!(
                    "'{}' must be resetchannels or allchannels",
                    self.acl_pubsub_default
                ),
            );
        }
        if self.maxclients == 0 {
            return bad("maxclients", "must be at least 1".to_string());
        }
        if !(1..=500).contains(&self.hz) {
            return bad("hz", format!("must be between 1 and 500, got {}", self.hz));
        }
        self.validate_tls()?;
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
        if crate::logging::LogFormat::parse(&self.log_format).is_none() {
            return bad(
                "log-format",
                format!("'{}' must be text or json", self.log_format),
            );
        }
        if self.metrics_bind.parse::<std::net::IpAddr>().is_err() {
            return bad(
                "metrics-bind",
                format!("'{}' is not an IP address", self.metrics_bind),
            );
        }
        Ok(())
    }
}

/// Replaces the `peer` key of the TOML file at `path` with `peers` (appends the key when the
/// file has none), keeping every other line as it was. The result is checked by the same
/// TOML parser, then written to a temporary file that replaces the original (a crash
/// leaves the old file or the new one, never half of one). Fails, changing nothing, when the
/// file cannot be read, would not parse, or cannot be written.
pub fn write_peers(path: &std::path::Path, peers: &[String]) -> Result<(), ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })?;
    let list: Vec<String> = peers
        .iter()
        .map(|p| {
            let mut q = String::new();
            crate::logging::json_str(&mut q, p);
            q
        })
        .collect();
    let line = format!("peer = [{}]", list.join(", "));
    let next = replace_key(&text, "peer", &line);
    // The file alone need not be a complete configuration (flags may add to it): check that
    // it still parses and now says exactly `peers`. The values themselves were validated
    // with the running configuration by the caller.
    let parsed: Result<toml::Table, _> = toml::from_str(&next);
    let written: Option<Vec<String>> = parsed.ok().and_then(|t| {
        t.get("peer")?
            .as_array()?
            .iter()
            .map(|v| v.as_str().map(str::to_string))
            .collect()
    });
    if written.as_deref() != Some(peers) {
        return Err(ConfigError::Parse {
            path: path.display().to_string(),
            message: "the rewritten file would not hold the peer list; left unchanged".to_string(),
        });
    }
    let tmp = path.with_extension("toml.tmp");
    let io = |source| ConfigError::Read {
        path: tmp.display().to_string(),
        source,
    };
    std::fs::write(&tmp, next.as_bytes()).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(|source| ConfigError::Read {
        path: path.display().to_string(),
        source,
    })
}

/// `text` with the top-level assignment of `key` (which may span lines, as an array does)
/// replaced by `line`; `line` appended when the key is not set before the first table.
fn replace_key(text: &str, key: &str, line: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let mut out: Vec<String> = Vec::with_capacity(lines.len() + 1);
    let mut i = 0;
    let mut done = false;
    while let Some(l) = lines.get(i) {
        let t = l.trim_start();
        let is_key = !done
            && t.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='));
        if is_key {
            // Skip to the line closing the value: brackets balance outside strings.
            let mut depth: i32 = 0;
            let mut j = i;
            while let Some(cur) = lines.get(j) {
                depth += bracket_balance(cur);
                if depth <= 0 {
                    break;
                }
                j += 1;
            }
            out.push(line.to_string());
            i = j + 1;
            done = true;
            continue;
        }
        if !done && t.starts_with('[') {
            out.push(line.to_string());
            done = true;
        }
        out.push((*l).to_string());
        i += 1;
    }
    if !done {
        out.push(line.to_string());
    }
    let mut s = out.join("\n");
    s.push('\n');
    s
}

/// '[' minus ']' on a line, outside strings and comments.
fn bracket_balance(line: &str) -> i32 {
    let mut n = 0;
    let mut in_str: Option<char> = None;
    let mut escaped = false;
    for c in line.chars() {
        match in_str {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' && q == '"' {
                    escaped = true;
                } else if c == q {
                    in_str = None;
                }
            }
            None => match c {
                '"' | '\'' => in_str = Some(c),
                '#' => break,
                '[' => n += 1,
                ']' => n -= 1,
                _ => {}
            },
        }
    }
    n
}

/// A TOML error on one line: `line L, column C: message`, the message cut before serde's
/// list of every expected key (it would list them all).
fn toml_error_line(text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim();
    let message = message
        .split_once(", expected one of")
        .map_or(message, |(head, _)| head)
        .replace(['\r', '\n'], " ");
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let line_start = before.rsplit('\n').next().unwrap_or("");
            let column = line_start.chars().count() + 1;
            // The key of that line, when the error is in its value.
            match line_start.split_once('=') {
                Some((key, _)) if !key.trim().is_empty() => format!(
                    "line {line}, column {column}: key '{}': {message}",
                    key.trim()
                ),
                _ => format!("line {line}, column {column}: {message}"),
            }
        }
        None => message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_ports_and_endpoints() {
        let mut c = Config::default();
        assert_eq!(c.endpoint_port(0), Some(6380));
        // The usual TLS layout: the endpoints start past the TLS port.
        c.tls_port = 6380;
        assert_eq!(
            (c.endpoint_port(0), c.endpoint_port(2)),
            (Some(6381), Some(6383))
        );
        c.tls_port = 6000;
        assert_eq!(c.endpoint_port(0), Some(6380));
        // TLS only: the cluster API (plain TCP) is off unless asked for, and then refused.
        c.port = 0;
        assert!(!c.cluster_enabled(3));
        assert!(c.validate().is_ok());
        c.cluster_api = Some(true);
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("cluster-api")
        );
        c.cluster_api = None;
        c.tls_port = 0;
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("configured to not listen anywhere"), "{e}");
        c.port = 6379;
        c.tls_protocols = "TLSv1.3 SSLv3".into();
        assert!(
            c.validate()
                .unwrap_err()
                .to_string()
                .contains("tls-protocols")
        );
    }

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
    fn notify_keyspace_events_from_the_file() {
        let c = Config::from_toml("notify-keyspace-events = \"KEA\"").unwrap();
        assert_eq!(
            crate::notify::parse(&c.notify_keyspace_events),
            crate::notify::parse("AKE")
        );
        let e = Config::from_toml("notify-keyspace-events = \"KQ\"").unwrap_err();
        assert!(e.to_string().contains("notify-keyspace-events"), "{e}");
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
    fn peers_by_dns_name() {
        let tls = "sync-tls-cert = \"c\"\nsync-tls-key = \"k\"\nsync-tls-ca = \"ca\"";
        let c = Config::from_toml(&format!(
            "sync-port = 1\npeer = [\"b=site-b.example.net:7102\", \"c=[::1]:7103\"]\n{tls}"
        ))
        .unwrap();
        let peers = c.peers().unwrap();
        assert_eq!(peers[0].addr, "site-b.example.net:7102");
        assert!(!peers[0].is_loopback());
        assert!(peers[1].is_loopback());
        // Plain text: a name other than localhost cannot be known to be loopback.
        Config::from_toml("sync-port = 1\npeer = [\"b=localhost:7102\"]").unwrap();
        let e = Config::from_toml("sync-port = 1\npeer = [\"b=site-b.example.net:7102\"]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("sync-tls-cert"), "{e}");
        for bad in [
            "b=host:0",
            "b=host:",
            "b=:7102",
            "b=bad_name:7102",
            "b=a..b:1",
        ] {
            let e = Config::from_toml(&format!("sync-port = 1\npeer = [\"{bad}\"]\n{tls}"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("peer"), "{bad}: {e}");
        }
    }

    #[test]
    fn write_peers_replaces_the_key_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.toml");
        let before = "# site a\nsite = \"a\"\nsync-port = 7101\npeer = [\n  \"b=127.0.0.1:7102\", # b\n]\nhz = 10\n";
        std::fs::write(&path, before).unwrap();
        write_peers(
            &path,
            &["b=127.0.0.1:7102".into(), "c=localhost:7103".into()],
        )
        .unwrap();
        let after = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            after,
            "# site a\nsite = \"a\"\nsync-port = 7101\npeer = [\"b=127.0.0.1:7102\", \"c=localhost:7103\"]\nhz = 10\n"
        );
        let c = Config::from_file(&path).unwrap();
        assert_eq!(c.peers().unwrap().len(), 2);
        assert_eq!(c.config_file.as_deref(), Some(path.as_path()));
        // No key yet: appended.
        std::fs::write(&path, "site = \"a\"\nsync-port = 7101\n").unwrap();
        write_peers(&path, &["b=127.0.0.1:7102".into()]).unwrap();
        assert!(
            std::fs::read_to_string(&path)
                .unwrap()
                .ends_with("peer = [\"b=127.0.0.1:7102\"]\n")
        );
        // A `peer` value the line scan cannot replace (a multi-line string): left unchanged.
        let odd = "peer = \"\"\"\nb=1\n\"\"\"\n";
        std::fs::write(&path, odd).unwrap();
        assert!(write_peers(&path, &["b=127.0.0.1:7102".into()]).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), odd);
    }

    #[test]
    fn toml_errors_are_one_line_with_the_place() {
        for (text, want) in [
            ("port = ", "line 1, column 8"),
            ("hz = 10\nbogus-key = 1", "unknown field `bogus-key`"),
            // A value of the wrong type is found once the syntax is read: named by its key.
            ("port = \"x\"", "in `port`"),
        ] {
            let e = Config::from_toml(text).unwrap_err().to_string();
            assert!(!e.contains('\n'), "{text}: {e}");
            assert!(e.contains(want), "{text}: {e}");
        }
        let e = Config::from_toml("log-format = \"xml\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("log-format"), "{e}");
    }

    #[test]
    fn file_values_apply() {
        let c = Config::from_toml("port = 7001\ndatabases = 4\nsite = \"a\"").unwrap();
        assert_eq!((c.port, c.databases, c.site.as_str()), (7001, 4, "a"));
    }
}

//! The parameter table: every setting Meridian knows, Redis 7.0's and its own, in one place.
//!
//! `CONFIG GET`/`SET`/`REWRITE` and the TOML file read this table; `--help` and
//! docs/configuration.md are meant to be generated from it. Each row says how a value parses
//! (`Kind`, with Redis's error texts), whether it may change at run time (`Access`), its
//! default as `CONFIG GET` shows it, and where it lives: a `Config` field Meridian honours
//! (`Binding::Field`), or a Redis parameter accepted and shown with no effect here
//! (`Binding::Stored`, kept in `Config::stored`), with the reason in `note`.

use super::Config;

/// How a value parses (Redis's config types).
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    /// yes or no.
    Bool,
    /// An integer in [min, max] (Redis INTEGER_CONFIG).
    Int { min: i64, max: i64 },
    /// Bytes, with an optional unit: k, kb, m, mb, g, gb (Redis MEMORY_CONFIG).
    Mem { min: i64, max: i64 },
    /// Bytes or a percentage `N%` (Redis MEMORY_CONFIG | PERCENT_CONFIG; `min` is minus the
    /// largest percentage).
    MemPercent { min: i64, max: i64 },
    /// An octal number (Redis OCTAL_CONFIG).
    Octal { min: i64, max: i64 },
    /// One of the words.
    Enum(&'static [&'static str]),
    /// One or more of the words, space separated (Redis MULTI_ARG enums).
    EnumSet(&'static [&'static str]),
    /// Any text.
    Text,
    /// A syntax of its own: the function checks a value and returns its canonical text.
    Special(fn(&str) -> Result<String, String>),
}

/// Whether `CONFIG SET` may change a parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Modifiable,
    /// Redis: "can't set immutable config".
    Immutable,
    /// Redis with enable-protected-configs no: "can't set protected config".
    Protected,
    /// Only the current value is accepted (a no-op, so that tools which write back what
    /// `CONFIG GET *` showed keep working); another value answers "can't set immutable
    /// config". For settings fixed at start and for Redis features Meridian lacks, whose
    /// other values would promise behaviour it does not have.
    Fixed,
}

/// Where a parameter's value lives.
#[derive(Clone, Copy)]
pub enum Binding {
    /// A `Config` field Meridian reads: `get` shows it, `set` assigns a value `Kind` accepted
    /// (in its canonical text).
    Field {
        get: fn(&Config) -> String,
        set: fn(&mut Config, &str),
    },
    /// A Redis parameter with no effect in Meridian: accepted, checked and shown; a value
    /// other than the default is kept in `Config::stored`.
    Stored,
}

impl std::fmt::Debug for Binding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Binding::Field { .. } => f.write_str("Field"),
            Binding::Stored => f.write_str("Stored"),
        }
    }
}

/// One parameter.
#[derive(Clone, Copy, Debug)]
pub struct Param {
    /// The name, as `CONFIG GET` and the TOML file spell it.
    pub name: &'static str,
    /// Redis's other name for it (the `ziplist` names, `slave-*`), answered alike.
    pub alias: Option<&'static str>,
    pub kind: Kind,
    pub access: Access,
    /// The default as `CONFIG GET` shows it: Redis 7.0's for a `Stored` parameter; for a
    /// `Field`, ignored (the default is `Config::default()`'s).
    pub default: &'static str,
    pub binding: Binding,
    /// Redis lists it under `CONFIG GET *`; hidden ones answer only by exact name.
    pub hidden: bool,
    /// Whether Redis 7.0 has this parameter (false: Meridian's own).
    pub redis: bool,
    /// What it does in Meridian, or why it has no effect.
    pub note: &'static str,
}

const I32: i64 = i32::MAX as i64;
const I32_MIN: i64 = i32::MIN as i64;
const U32: i64 = u32::MAX as i64;
const I64: i64 = i64::MAX;
const I64_MIN: i64 = i64::MIN;
// Redis stores unsigned long long values in a signed field for the boundary check.
const U64: i64 = i64::MAX;

/// Redis's `hz` range after clamping (CONFIG_MIN_HZ, CONFIG_MAX_HZ).
pub const HZ_MIN: i64 = 1;
pub const HZ_MAX: i64 = 500;
/// Most addresses `bind` takes (CONFIG_BINDADDR_MAX).
const BIND_ADDRESSES_MAX: usize = 16;

const fn stored(
    name: &'static str,
    kind: Kind,
    default: &'static str,
    note: &'static str,
) -> Param {
    Param {
        name,
        alias: None,
        kind,
        access: Access::Modifiable,
        default,
        binding: Binding::Stored,
        hidden: false,
        redis: true,
        note,
    }
}

const fn field(name: &'static str, kind: Kind, binding: Binding, note: &'static str) -> Param {
    Param {
        name,
        alias: None,
        kind,
        access: Access::Modifiable,
        default: "",
        binding,
        hidden: false,
        redis: true,
        note,
    }
}

impl Param {
    const fn alias(mut self, alias: &'static str) -> Param {
        self.alias = Some(alias);
        self
    }
    const fn immutable(mut self) -> Param {
        self.access = Access::Immutable;
        self
    }
    const fn protected(mut self) -> Param {
        self.access = Access::Protected;
        self
    }
    const fn fixed(mut self) -> Param {
        self.access = Access::Fixed;
        self
    }
    const fn hidden(mut self) -> Param {
        self.hidden = true;
        self
    }
    const fn meridian(mut self) -> Param {
        self.redis = false;
        self
    }
}

/// A `Config` field shown and assigned through `FieldText`.
macro_rules! field {
    ($f:ident) => {
        Binding::Field {
            get: |c| FieldText::show(&c.$f),
            set: |c, v| FieldText::assign(&mut c.$f, v),
        }
    };
}

/// How a field's value reads and writes as `CONFIG GET`/`SET` text. `assign` takes text the
/// parameter's `Kind` accepted, so it cannot fail; anything else leaves the field as it was.
trait FieldText {
    fn show(&self) -> String;
    fn assign(&mut self, text: &str);
}

macro_rules! number_text {
    ($($t:ty),*) => {$(
        impl FieldText for $t {
            fn show(&self) -> String {
                self.to_string()
            }
            fn assign(&mut self, text: &str) {
                if let Ok(v) = text.parse() {
                    *self = v;
                }
            }
        }
    )*};
}
number_text!(u16, u32, u64, i64);

impl FieldText for bool {
    fn show(&self) -> String {
        if *self { "yes" } else { "no" }.to_string()
    }
    fn assign(&mut self, text: &str) {
        *self = text.eq_ignore_ascii_case("yes");
    }
}

impl FieldText for String {
    fn show(&self) -> String {
        self.clone()
    }
    fn assign(&mut self, text: &str) {
        *self = text.to_string();
    }
}

impl FieldText for Option<std::path::PathBuf> {
    fn show(&self) -> String {
        self.as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default()
    }
    fn assign(&mut self, text: &str) {
        *self = (!text.is_empty()).then(|| std::path::PathBuf::from(text));
    }
}

impl FieldText for Vec<String> {
    fn show(&self) -> String {
        self.join(" ")
    }
    fn assign(&mut self, text: &str) {
        *self = text.split_whitespace().map(str::to_string).collect();
    }
}

const DEBUG_ENABLED: &str =
    "Who may run DEBUG: `yes`, `local` (clients on loopback) or nobody (`no`), as in Redis.";
const DEFRAG: &str = "Meridian has no active defragmentation.";
const EXPIRY: &str = "Active expiry runs `hz` cycles per second, each bounded in buckets.";
const HLL_SPARSE: &str = "A sparse HyperLogLog becomes dense past 3000 bytes, Redis's default, on every site: the encoding is part of the replicated value.";
const IO_THREADS: &str = "Each shard thread does its own network I/O.";
const LAZYFREE: &str =
    "Evictions, expiries and server-side deletions free values on the shard thread.";
const LIST_ENCODING: &str = "Lists are a CRDT of their own; Redis 7.0 reports every list as `quicklist` whatever these are. DUMP lays a list out in quicklist nodes by them, as Redis does.";
const LOG_TAIL_CUT: &str =
    "A torn tail of the op log is always cut at start (docs/persistence.md).";
const MISCONF_ALWAYS: &str =
    "Meridian always refuses writes with MISCONF while its log cannot be written.";
const NO_AOF: &str =
    "Meridian keeps an op log of its own format, not an AOF (docs/persistence.md).";
const TLS_SESSIONS: &str = "rustls keeps its own session cache (256 sessions) and TLS 1.3 tickets.";
const TLS_CLUSTER: &str = "The cluster API's endpoints are plain TCP: CLUSTER SLOTS/SHARDS/NODES give their ports to every client, as Redis with tls-cluster no.";
const TLS_NO_CLIENT_SIDE: &str =
    "Meridian dials no Redis server; sites use their own TLS files (`sync-tls-*`).";
const TLS_NO_DH: &str = "rustls offers only ECDHE key exchange: no DH parameters.";
const NO_CLUSTER: &str = "Redis Cluster is not enabled.";
const DUMP_SANITIZE: &str =
    "RESTORE always validates a payload entry by entry, as Redis's `yes` does.";
const NO_CLIENT_EVICTION: &str = "Meridian evicts no client.";
const NO_MODULES: &str = "Meridian loads no modules.";
const DUMP_COMPRESSION: &str = "Meridian writes no RDB file (docs/persistence.md); DUMP compresses strings with LZF as Redis does when yes.";
const DBFILENAME: &str = "The RDB file in `dir` that DEBUG RELOAD writes and DEBUG RELOAD NOSAVE loads (or one Redis or `redis-cli --rdb` wrote); SAVE and BGSAVE write Meridian's own snapshots, not RDB files (docs/persistence.md).";
const NO_RDB: &str =
    "Meridian writes no RDB file: snapshots are its own format (docs/persistence.md).";
const NO_REPLICAS: &str =
    "Meridian has no Redis replicas; writes never wait for them (WAIT answers 0).";
const NO_REPLICATION: &str = "Meridian has no Redis primary/replica replication: sites replicate active-active (docs/replication.md).";
const NO_REPLICATION_AUTH: &str = "Meridian has no Redis primary/replica replication.";
const PINNED: &str = "Each shard thread pins itself to a core of its own.";
const PROCESS: &str = "Process management and logging are the service manager's and `log-level`'s.";
const PROTECTED_CONFIGS: &str = "Protected parameters (dir, dbfilename) cannot be set at run time.";
const RDB_TEST_HOOKS: &str = "Redis test hooks for RDB saving and loading.";
const REHASH: &str = "Tables always grow by incremental rehash, bounded per step.";
const SIGNALS: &str = "How the signal stops Meridian, as in Redis: `save` writes a final snapshot, `nosave` none, `default` one when `save` is set; `now` and `force` change nothing (no replica is waited for; a failed snapshot is logged and the stop goes on).";
const SOCKETS: &str = "Meridian uses the operating system's socket defaults.";
const TCP_ONLY: &str = "Meridian listens on TCP only.";

/// Every parameter, in Redis's `config.c` order, then Meridian's own.
pub static PARAMS: &[Param] = &[
    stored("rdbchecksum", Kind::Bool, "yes", NO_RDB)
        .immutable(),
    stored("daemonize", Kind::Bool, "no", PROCESS)
        .immutable(),
    stored("io-threads-do-reads", Kind::Bool, "no", IO_THREADS)
        .immutable(),
    stored("always-show-logo", Kind::Bool, "no", PROCESS)
        .immutable(),
    field("protected-mode", Kind::Bool, field!(protected_mode), "While the default user has no password, refuse clients from addresses other than 127.0.0.1 and ::1 (-DENIED)."),
    stored("rdbcompression", Kind::Bool, "yes", DUMP_COMPRESSION),
    stored("rdb-del-sync-files", Kind::Bool, "no", NO_RDB),
    stored("activerehashing", Kind::Bool, "yes", REHASH),
    stored("stop-writes-on-bgsave-error", Kind::Bool, "yes", MISCONF_ALWAYS)
        .fixed(),
    stored("set-proc-title", Kind::Bool, "yes", PROCESS)
        .immutable(),
    stored("dynamic-hz", Kind::Bool, "yes", EXPIRY),
    stored("lazyfree-lazy-eviction", Kind::Bool, "no", LAZYFREE),
    stored("lazyfree-lazy-expire", Kind::Bool, "no", LAZYFREE),
    stored("lazyfree-lazy-server-del", Kind::Bool, "no", LAZYFREE),
    field("lazyfree-lazy-user-del", Kind::Bool, field!(lazyfree_lazy_user_del), "DEL frees a large value on the shard's lazyfree thread, as UNLINK does."),
    field("lazyfree-lazy-user-flush", Kind::Bool, field!(lazyfree_lazy_user_flush), "FLUSHALL and FLUSHDB without ASYNC or SYNC run as ASYNC."),
    stored("repl-disable-tcp-nodelay", Kind::Bool, "no", NO_REPLICATION),
    stored("repl-diskless-sync", Kind::Bool, "yes", NO_REPLICATION),
    stored("aof-rewrite-incremental-fsync", Kind::Bool, "yes", NO_AOF),
    stored("no-appendfsync-on-rewrite", Kind::Bool, "no", NO_AOF),
    stored("cluster-require-full-coverage", Kind::Bool, "yes", NO_CLUSTER),
    stored("rdb-save-incremental-fsync", Kind::Bool, "yes", NO_RDB),
    stored("aof-load-truncated", Kind::Bool, "yes", LOG_TAIL_CUT)
        .fixed(),
    stored("aof-use-rdb-preamble", Kind::Bool, "yes", NO_AOF),
    stored("aof-timestamp-enabled", Kind::Bool, "no", NO_AOF),
    stored("cluster-replica-no-failover", Kind::Bool, "no", NO_CLUSTER)
        .alias("cluster-slave-no-failover"),
    stored("replica-lazy-flush", Kind::Bool, "no", LAZYFREE)
        .alias("slave-lazy-flush"),
    stored("replica-serve-stale-data", Kind::Bool, "yes", NO_REPLICATION)
        .alias("slave-serve-stale-data"),
    stored("replica-read-only", Kind::Bool, "yes", NO_REPLICATION)
        .alias("slave-read-only"),
    stored("replica-ignore-maxmemory", Kind::Bool, "yes", NO_REPLICATION)
        .alias("slave-ignore-maxmemory"),
    stored("jemalloc-bg-thread", Kind::Bool, "yes", PROCESS),
    stored("activedefrag", Kind::Bool, "no", DEFRAG),
    stored("syslog-enabled", Kind::Bool, "no", PROCESS)
        .immutable(),
    field("cluster-enabled", Kind::Bool, Binding::Field {
            get: |c| if c.cluster_api == Some(true) { "yes" } else { "no" }.to_string(),
            set: |c, v| c.cluster_api = Some(v == "yes"),
        }, "Whether the Redis Cluster API is on (`cluster-api`, resolved at start).")
        .immutable(),
    field("appendonly", Kind::Bool, field!(appendonly), "Write every op to the on-disk log as the AOF, fsynced by `appendfsync`. With `no`, a `save` policy still keeps the log, never fsynced, for its background snapshots; CONFIG SET starts a log with a snapshot of the live state (docs/persistence.md §4)."),
    stored("cluster-allow-reads-when-down", Kind::Bool, "no", NO_CLUSTER),
    stored("cluster-allow-pubsubshard-when-down", Kind::Bool, "yes", NO_CLUSTER),
    stored("crash-log-enabled", Kind::Bool, "yes", PROCESS),
    stored("crash-memcheck-enabled", Kind::Bool, "yes", PROCESS),
    stored("use-exit-on-panic", Kind::Bool, "no", PROCESS)
        .hidden(),
    stored("disable-thp", Kind::Bool, "yes", PROCESS)
        .immutable(),
    stored("cluster-allow-replica-migration", Kind::Bool, "yes", NO_CLUSTER),
    stored("replica-announced", Kind::Bool, "yes", NO_REPLICATION),
    field("latency-tracking", Kind::Bool, field!(latency_tracking), "Per-command latency histograms (LATENCY HISTOGRAM, INFO latencystats)."),
    stored("aof-disable-auto-gc", Kind::Bool, "no", NO_AOF),
    stored("replica-ignore-disk-write-errors", Kind::Bool, "no", NO_REPLICATION),
    field("aclfile", Kind::Text, field!(aclfile), "ACL users file (empty: none), loaded at start and by ACL LOAD, written by ACL SAVE; users are per site, never replicated.")
        .immutable(),
    stored("unixsocket", Kind::Text, "", TCP_ONLY)
        .immutable(),
    stored("pidfile", Kind::Text, "", PROCESS)
        .immutable(),
    stored("replica-announce-ip", Kind::Text, "", NO_REPLICATION)
        .alias("slave-announce-ip"),
    stored("masteruser", Kind::Text, "", NO_REPLICATION_AUTH)
        .fixed(),
    field("cluster-announce-ip", Kind::Text, field!(cluster_announce_ip), "The address CLUSTER SLOTS/SHARDS/NODES and MOVED give for the shard endpoints (empty: the bind address, or 127.0.0.1 when it is a wildcard).")
        .fixed(),
    stored("cluster-config-file", Kind::Text, "nodes.conf", NO_CLUSTER)
        .immutable(),
    stored("cluster-announce-hostname", Kind::Text, "", NO_CLUSTER),
    stored("syslog-ident", Kind::Text, "redis", PROCESS)
        .immutable(),
    stored("dbfilename", Kind::Text, "dump.rdb", DBFILENAME)
        .protected(),
    stored("appendfilename", Kind::Text, "appendonly.aof", NO_AOF)
        .immutable(),
    stored("appenddirname", Kind::Text, "appendonlydir", NO_AOF)
        .immutable(),
    stored("server_cpulist", Kind::Text, "", PINNED)
        .immutable(),
    stored("bio_cpulist", Kind::Text, "", PINNED)
        .immutable(),
    stored("aof_rewrite_cpulist", Kind::Text, "", PINNED)
        .immutable(),
    stored("bgsave_cpulist", Kind::Text, "", PINNED)
        .immutable(),
    stored("ignore-warnings", Kind::Text, "", PROCESS),
    stored("proc-title-template", Kind::Text, "{title} {listen-addr} {server-mode}", PROCESS),
    stored("bind-source-addr", Kind::Text, "", SOCKETS),
    stored("logfile", Kind::Text, "", PROCESS)
        .immutable(),
    stored("masterauth", Kind::Text, "", NO_REPLICATION_AUTH)
        .fixed(),
    field("requirepass", Kind::Text, field!(requirepass), "The default user's password (empty: none); setting it replaces the default user's passwords, as Redis does."),
    stored("supervised", Kind::Enum(&["upstart", "systemd", "auto", "no"]), "no", PROCESS)
        .immutable(),
    stored("syslog-facility", Kind::Enum(&["user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7"]), "local0", PROCESS)
        .immutable(),
    stored("repl-diskless-load", Kind::Enum(&["disabled", "on-empty-db", "swapdb"]), "disabled", NO_REPLICATION),
    stored("loglevel", Kind::Enum(&["debug", "verbose", "notice", "warning"]), "notice", PROCESS),
    field("maxmemory-policy", Kind::Enum(&["volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lru", "allkeys-lfu", "allkeys-random", "noeviction"]), field!(maxmemory_policy), "Which keys a shard evicts past maxmemory (noeviction: writes get -OOM), and LRU or LFU access tracking (OBJECT IDLETIME, OBJECT FREQ). Eviction is local to the site (docs/conflicts.md)."),
    field("appendfsync", Kind::Enum(&["everysec", "always", "no"]), field!(appendfsync), "When log writes reach the disk: always, everysec or no."),
    stored("oom-score-adj", Kind::Enum(&["no", "yes", "relative", "absolute"]), "no", PROCESS),
    field("acl-pubsub-default", Kind::Enum(&["allchannels", "resetchannels"]), field!(acl_pubsub_default), "Channels of new ACL users: resetchannels (none) or allchannels."),
    stored("sanitize-dump-payload", Kind::Enum(&["no", "yes", "clients"]), "no", DUMP_SANITIZE),
    stored("enable-protected-configs", Kind::Enum(&["no", "yes", "local"]), "no", PROTECTED_CONFIGS)
        .immutable(),
    stored("enable-debug-command", Kind::Enum(&["no", "yes", "local"]), "no", DEBUG_ENABLED)
        .immutable(),
    stored("enable-module-command", Kind::Enum(&["no", "yes", "local"]), "no", NO_MODULES)
        .immutable(),
    stored("cluster-preferred-endpoint-type", Kind::Enum(&["ip", "hostname", "unknown-endpoint"]), "ip", NO_CLUSTER),
    stored("propagation-error-behavior", Kind::Enum(&["ignore", "panic", "panic-on-replicas"]), "ignore", NO_REPLICATION),
    stored("shutdown-on-sigint", Kind::EnumSet(&["default", "save", "nosave", "now", "force"]), "default", SIGNALS),
    stored("shutdown-on-sigterm", Kind::EnumSet(&["default", "save", "nosave", "now", "force"]), "default", SIGNALS),
    field("databases", Kind::Int { min: 1, max: I32 }, field!(databases), "Number of logical databases.")
        .immutable(),
    field("port", Kind::Int { min: 0, max: 65535 }, field!(port), "Plain TCP client port (0: none, clients use tls-port only). CONFIG SET binds the new port and closes the old one (clients connected stay); the cluster endpoints keep the ports bound at start."),
    stored("io-threads", Kind::Int { min: 1, max: 128 }, "1", IO_THREADS)
        .immutable(),
    field("auto-aof-rewrite-percentage", Kind::Int { min: 0, max: I32 }, field!(auto_aof_rewrite_percentage), "Snapshot (and drop the log before it) once the log written since the last snapshot has grown by this percentage of the snapshot's size (0: off), and by auto-aof-rewrite-min-size."),
    stored("cluster-replica-validity-factor", Kind::Int { min: 0, max: I32 }, "10", NO_CLUSTER)
        .alias("cluster-slave-validity-factor"),
    stored("list-max-listpack-size", Kind::Int { min: I32_MIN, max: I32 }, "-2", LIST_ENCODING)
        .alias("list-max-ziplist-size"),
    stored("tcp-keepalive", Kind::Int { min: 0, max: I32 }, "300", SOCKETS),
    stored("cluster-migration-barrier", Kind::Int { min: 0, max: I32 }, "1", NO_CLUSTER),
    stored("active-defrag-cycle-min", Kind::Int { min: 1, max: 99 }, "1", DEFRAG),
    stored("active-defrag-cycle-max", Kind::Int { min: 1, max: 99 }, "25", DEFRAG),
    stored("active-defrag-threshold-lower", Kind::Int { min: 0, max: 1000 }, "10", DEFRAG),
    stored("active-defrag-threshold-upper", Kind::Int { min: 0, max: 1000 }, "100", DEFRAG),
    field("lfu-log-factor", Kind::Int { min: 0, max: I32 }, field!(lfu_log_factor), "LFU counter logarithm factor (OBJECT FREQ)."),
    field("lfu-decay-time", Kind::Int { min: 0, max: I32 }, field!(lfu_decay_time), "Minutes for an LFU counter to halve (OBJECT FREQ)."),
    stored("replica-priority", Kind::Int { min: 0, max: I32 }, "100", NO_REPLICATION)
        .alias("slave-priority"),
    stored("repl-diskless-sync-delay", Kind::Int { min: 0, max: I32 }, "5", NO_REPLICATION),
    field("maxmemory-samples", Kind::Int { min: 1, max: I32 }, field!(maxmemory_samples), "Keys sampled per database each time eviction refills its pool of candidates."),
    field("maxmemory-evicted-marks-max", Kind::Int { min: 1, max: I64 }, field!(maxmemory_evicted_marks_max), "Most evicted keys one shard of a site with peers remembers (docs/conflicts.md §18); at the limit it evicts no more and writes get -OOM until writes bring marked keys back."),
    field("maxmemory-eviction-tenacity", Kind::Int { min: 0, max: 100 }, field!(maxmemory_eviction_tenacity), "How long one command may evict (Redis's scale: 10 is 500 us, 100 unlimited); the periodic cycle goes on where it stopped."),
    field("timeout", Kind::Int { min: 0, max: I32 }, field!(timeout), "Close a client idle for this many seconds (0: never)."),
    stored("replica-announce-port", Kind::Int { min: 0, max: 65535 }, "0", NO_REPLICATION)
        .alias("slave-announce-port"),
    stored("tcp-backlog", Kind::Int { min: 0, max: I32 }, "511", SOCKETS)
        .immutable(),
    stored("cluster-port", Kind::Int { min: 0, max: 65535 }, "0", NO_CLUSTER)
        .immutable(),
    stored("cluster-announce-bus-port", Kind::Int { min: 0, max: 65535 }, "0", NO_CLUSTER),
    stored("cluster-announce-port", Kind::Int { min: 0, max: 65535 }, "0", NO_CLUSTER),
    stored("cluster-announce-tls-port", Kind::Int { min: 0, max: 65535 }, "0", NO_CLUSTER),
    stored("repl-timeout", Kind::Int { min: 1, max: I32 }, "60", NO_REPLICATION),
    stored("repl-ping-replica-period", Kind::Int { min: 1, max: I32 }, "10", NO_REPLICATION)
        .alias("repl-ping-slave-period"),
    stored("list-compress-depth", Kind::Int { min: 0, max: I32 }, "0", LIST_ENCODING),
    stored("rdb-key-save-delay", Kind::Int { min: I32_MIN, max: I32 }, "0", RDB_TEST_HOOKS)
        .hidden(),
    field("key-load-delay", Kind::Int { min: I32_MIN, max: I32 }, field!(key_load_delay), "Test hook: microseconds slept per key or log record loaded at start (0 or less: none), so tests can watch clients answered -LOADING.")
        .hidden(),
    stored("active-expire-effort", Kind::Int { min: 1, max: 10 }, "1", EXPIRY),
    field("hz", Kind::Int { min: 0, max: I32 }, Binding::Field {
            get: |c| c.hz.to_string(),
            set: |c, v| c.hz = v.parse::<i64>().unwrap_or(10).clamp(HZ_MIN, HZ_MAX) as u32,
        }, "Active expiry and background cycles per second (clamped to 1..500)."),
    stored("min-replicas-to-write", Kind::Int { min: 0, max: I32 }, "0", NO_REPLICAS)
        .alias("min-slaves-to-write")
        .fixed(),
    stored("min-replicas-max-lag", Kind::Int { min: 0, max: I32 }, "10", NO_REPLICAS)
        .alias("min-slaves-max-lag")
        .fixed(),
    stored("watchdog-period", Kind::Int { min: 0, max: I32 }, "0", PROCESS)
        .hidden(),
    stored("shutdown-timeout", Kind::Int { min: 0, max: I32 }, "10", PROCESS),
    stored("repl-diskless-sync-max-replicas", Kind::Int { min: 0, max: I32 }, "0", NO_REPLICATION),
    field("maxclients", Kind::Int { min: 1, max: U32 }, field!(maxclients), "Most clients connected at once."),
    stored("unixsocketperm", Kind::Octal { min: 0, max: 0o777 }, "0", TCP_ONLY)
        .immutable(),
    stored("socket-mark-id", Kind::Int { min: 0, max: U32 }, "0", SOCKETS)
        .immutable(),
    stored("active-defrag-max-scan-fields", Kind::Int { min: 1, max: I64 }, "1000", DEFRAG),
    field("slowlog-max-len", Kind::Int { min: 0, max: I64 }, field!(slowlog_max_len), "Slow log entries kept."),
    field("acllog-max-len", Kind::Int { min: 0, max: I64 }, field!(acllog_max_len), "Entries the ACL log keeps."),
    field("busy-reply-threshold", Kind::Int { min: 0, max: I64 }, field!(busy_reply_threshold), "Milliseconds a script or function runs before other clients get -BUSY and SCRIPT KILL or FUNCTION KILL may stop it.")
        .alias("lua-time-limit"),
    stored("cluster-node-timeout", Kind::Int { min: 0, max: I64 }, "15000", NO_CLUSTER),
    field("slowlog-log-slower-than", Kind::Int { min: -1, max: I64 }, field!(slowlog_log_slower_than), "Slow log threshold in microseconds (negative: off)."),
    field("latency-monitor-threshold", Kind::Int { min: 0, max: I64 }, field!(latency_monitor_threshold), "Latency monitor threshold in milliseconds (0: off)."),
    field("proto-max-bulk-len", Kind::Mem { min: 1_048_576, max: I64 }, field!(proto_max_bulk_len), "Largest bulk string accepted in a request, in bytes."),
    field("stream-node-max-entries", Kind::Int { min: 0, max: I64 }, field!(stream_node_max_entries), "Entries in a stream block before XADD opens a new one (0: no limit); `~` trimming removes whole blocks."),
    field("maxmemory", Kind::Mem { min: 0, max: U64 }, field!(maxmemory), "The process's memory limit in bytes (0: none): the allocator's figure less the op logs' backlog (docs/operations.md)."),
    stored("cluster-link-sendbuf-limit", Kind::Mem { min: 0, max: U64 }, "0", NO_CLUSTER),
    field("hash-max-listpack-entries", Kind::Int { min: 0, max: I64 }, field!(hash_max_listpack_entries), "OBJECT ENCODING reports a hash with at most this many fields as listpack (with hash-max-listpack-value); HSCAN returns such a hash whole.")
        .alias("hash-max-ziplist-entries"),
    field("set-max-intset-entries", Kind::Int { min: 0, max: I64 }, field!(set_max_intset_entries), "OBJECT ENCODING reports a set of at most this many integers as intset."),
    field("zset-max-listpack-entries", Kind::Int { min: 0, max: I64 }, field!(zset_max_listpack_entries), "OBJECT ENCODING reports a sorted set with at most this many members as listpack (with zset-max-listpack-value); ZSCAN returns such a set whole.")
        .alias("zset-max-ziplist-entries"),
    stored("active-defrag-ignore-bytes", Kind::Mem { min: 1, max: I64 }, "104857600", DEFRAG),
    field("hash-max-listpack-value", Kind::Mem { min: 0, max: I64 }, field!(hash_max_listpack_value), "OBJECT ENCODING reports a hash whose fields and values all have at most this many bytes as listpack (with hash-max-listpack-entries).")
        .alias("hash-max-ziplist-value"),
    field("stream-node-max-bytes", Kind::Mem { min: 0, max: I64 }, field!(stream_node_max_bytes), "Bytes of a stream block, counted as Redis's listpack would, before XADD opens a new one (0: no limit)."),
    field("zset-max-listpack-value", Kind::Mem { min: 0, max: I64 }, field!(zset_max_listpack_value), "OBJECT ENCODING reports a sorted set whose members all have at most this many bytes as listpack (with zset-max-listpack-entries).")
        .alias("zset-max-ziplist-value"),
    stored("hll-sparse-max-bytes", Kind::Mem { min: 0, max: I64 }, "3000", HLL_SPARSE),
    field("tracking-table-max-keys", Kind::Int { min: 0, max: I64 }, field!(tracking_table_max_keys), "Keys the process's client-side caching tables (CLIENT TRACKING, default mode) hold, over all shards, before random ones are invalidated to make room (0: no limit)."),
    field("client-query-buffer-limit", Kind::Mem { min: 1_048_576, max: I64 }, field!(client_query_buffer_limit), "Largest unparsed input buffered per client, in bytes."),
    stored("maxmemory-clients", Kind::MemPercent { min: -100, max: I64 }, "0", NO_CLIENT_EVICTION)
        .fixed(),
    stored("repl-backlog-ttl", Kind::Int { min: 0, max: I64 }, "3600", NO_REPLICATION),
    field("auto-aof-rewrite-min-size", Kind::Mem { min: 0, max: I64 }, field!(auto_aof_rewrite_min_size), "The least log growth, in bytes, that triggers a snapshot by auto-aof-rewrite-percentage."),
    stored("loading-process-events-interval-bytes", Kind::Int { min: 1024, max: I32 }, "2097152", RDB_TEST_HOOKS)
        .hidden(),
    field("tls-port", Kind::Int { min: 0, max: 65535 }, field!(tls_port), "TLS client port (0: none; set at start). Connections on it are spread over the connection threads like the plain port's.")
        .fixed(),
    stored("tls-session-cache-size", Kind::Int { min: 0, max: I32 }, "20480", TLS_SESSIONS),
    stored("tls-session-cache-timeout", Kind::Int { min: 0, max: I32 }, "300", TLS_SESSIONS),
    stored("tls-cluster", Kind::Bool, "no", TLS_CLUSTER)
        .fixed(),
    stored("tls-replication", Kind::Bool, "no", NO_REPLICATION)
        .fixed(),
    field("tls-auth-clients", Kind::Enum(&["no", "yes", "optional"]), field!(tls_auth_clients), "Client certificates on the TLS port: yes (required), optional (checked when given) or no (not asked for)."),
    field("tls-prefer-server-ciphers", Kind::Bool, field!(tls_prefer_server_ciphers), "Pick the cipher suite by the server's order (tls-ciphers, tls-ciphersuites) rather than the client's."),
    stored("tls-session-caching", Kind::Bool, "yes", TLS_SESSIONS),
    field("tls-cert-file", Kind::Text, field!(tls_cert_file), "The TLS port's certificate chain (PEM); CONFIG SET and SIGHUP reload it."),
    field("tls-key-file", Kind::Text, field!(tls_key_file), "The TLS port's private key (PEM, unencrypted); CONFIG SET and SIGHUP reload it."),
    field("tls-key-file-pass", Kind::Special(crate::tls::check_key_file_pass), field!(tls_key_file_pass), "Only empty: rustls reads no encrypted private key (decrypt it with `openssl pkey`)."),
    stored("tls-client-cert-file", Kind::Text, "", TLS_NO_CLIENT_SIDE)
        .fixed(),
    stored("tls-client-key-file", Kind::Text, "", TLS_NO_CLIENT_SIDE)
        .fixed(),
    stored("tls-client-key-file-pass", Kind::Text, "", TLS_NO_CLIENT_SIDE)
        .fixed(),
    stored("tls-dh-params-file", Kind::Text, "", TLS_NO_DH)
        .fixed(),
    field("tls-ca-cert-file", Kind::Text, field!(tls_ca_cert_file), "CA certificates (PEM) client certificates must chain to."),
    field("tls-ca-cert-dir", Kind::Text, field!(tls_ca_cert_dir), "A directory of CA certificate files (PEM), read whole, as well as or instead of tls-ca-cert-file."),
    field("tls-protocols", Kind::Special(crate::tls::check_protocols), field!(tls_protocols), "TLS versions accepted: TLSv1.2, TLSv1.3 or both (empty: both)."),
    field("tls-ciphers", Kind::Special(crate::tls::check_ciphers), field!(tls_ciphers), "TLS 1.2 cipher suites, OpenSSL names separated by colons, in preference order (empty: every one rustls offers)."),
    field("tls-ciphersuites", Kind::Special(crate::tls::check_ciphersuites), field!(tls_ciphersuites), "TLS 1.3 cipher suites, OpenSSL names separated by colons, in preference order (empty: every one rustls offers)."),
    field("dir", Kind::Text, Binding::Field {
            get: |c| std::fs::canonicalize(&c.dir).unwrap_or_else(|_| c.dir.clone()).display().to_string(),
            set: |c, v| c.dir = std::path::PathBuf::from(v),
        }, "Data directory: op log segments and snapshots of each shard.")
        .protected(),
    field("save", Kind::Special(parse_save_value), field!(save), "Automatic snapshots: pairs \"seconds changes\" (\"\" turns them off)."),
    field("client-output-buffer-limit", Kind::Special(parse_obuf_limits), Binding::Field {
            get: |c| c.client_output_buffer_limit.to_string(),
            // `parse_obuf_limits` accepted the text and made it canonical: every class, in
            // Redis's units, so `apply` takes it whole.
            set: |c, v| {
                let _ = c.client_output_buffer_limit.apply(v);
            },
        }, "Output kept for a client that does not read: \"class hard soft seconds\" per class (normal, replica/slave, pubsub); past hard, or past soft for seconds, the client is closed."),
    stored("oom-score-adj-values", Kind::Special(parse_oom_values), "0 200 800", PROCESS),
    field("notify-keyspace-events", Kind::Special(parse_notify_flags), Binding::Field {
            // Text that is no set of classes (a bad configuration file) shows as it is, so
            // that `Config::validate` refuses it.
            get: |c| crate::notify::parse(&c.notify_keyspace_events)
                .map_or_else(|| c.notify_keyspace_events.clone(), crate::notify::to_text),
            set: |c, v| c.notify_keyspace_events = v.to_string(),
        }, "Keyspace notification classes, as Redis 7.0; writes applied from other sites notify too (docs/replication.md §4)."),
    field("bind", Kind::Special(parse_bind), field!(bind), "Address the client port listens on (one address; set at start).")
        .fixed(),
    stored("replicaof", Kind::Text, "", NO_REPLICATION_AUTH)
        .alias("slaveof")
        .immutable(),
    field("latency-tracking-info-percentiles", Kind::Special(parse_percentiles), field!(latency_tracking_info_percentiles), "Percentiles INFO latencystats shows."),
    // Meridian's own parameters.
    field("backlog-bytes-max", Kind::Mem { min: 1, max: I64 }, field!(backlog_bytes_max), "Bytes of recent ops each shard keeps in memory for peers that reconnect (docs/replication.md).")
        .alias("repl-backlog-size"),
    field("site", Kind::Text, field!(site), "This site's id; replica ids derive from it and the shard index.")
        .fixed()
        .meridian(),
    field("shards", Kind::Int { min: 0, max: 256 }, field!(shards), "Shard threads, each owning a range of hash slots (0: one per CPU the process may run on; a data directory keeps its count).")
        .fixed()
        .meridian(),
    field("cluster-api", Kind::Bool, Binding::Field {
            get: |c| if c.cluster_api == Some(true) { "yes" } else { "no" }.to_string(),
            set: |c, v| c.cluster_api = Some(v == "yes"),
        }, "The Redis Cluster API: an endpoint and a node id per shard (default: on with several shards).")
        .fixed()
        .meridian(),
    field("cluster-endpoint-port", Kind::Int { min: 0, max: 65535 }, field!(cluster_endpoint_port), "Port of shard 0's cluster endpoint; shard N listens on it + N (0: the larger of port and tls-port, + 1).")
        .fixed()
        .meridian(),
    field("topology", Kind::Text, Binding::Field {
            get: |c| c.topology.display().to_string(),
            set: |c, v| c.topology = std::path::PathBuf::from(v),
        }, "A site across several nodes: the topology file, identical on every node (empty: the site is this process).")
        .fixed()
        .meridian(),
    field("node-name", Kind::Text, field!(node_name), "This node's name in the topology file.")
        .fixed()
        .meridian(),
    field("deployment-id", Kind::Text, field!(deployment_id), "Deployment id: peers with another one are refused.")
        .fixed()
        .meridian(),
    field("sync-port", Kind::Int { min: 0, max: 65535 }, field!(sync_port), "Port the syncer listens on for peers (0: none).")
        .fixed()
        .meridian(),
    field("sync-bind", Kind::Text, field!(sync_bind), "Address the sync port listens on (empty: the bind address).")
        .fixed()
        .meridian(),
    field("peer", Kind::Text, field!(peer), "The other sites: id=ip:port of each one's sync endpoint.")
        .fixed()
        .meridian(),
    field("sync-tls-cert", Kind::Text, field!(sync_tls_cert), "This site's certificate for TLS between sites (PEM).")
        .fixed()
        .meridian(),
    field("sync-tls-key", Kind::Text, field!(sync_tls_key), "This site's private key for TLS between sites (PEM).")
        .fixed()
        .meridian(),
    field("sync-tls-ca", Kind::Text, field!(sync_tls_ca), "The CA every site's certificate chains to (PEM).")
        .fixed()
        .meridian(),
    field("tls-handshake-timeout-ms", Kind::Int { min: 1, max: I64 }, field!(tls_handshake_timeout_ms), "A connection to tls-port that has not completed its TLS handshake within this many milliseconds is closed.")
        .meridian(),
    field("sync-compression", Kind::Enum(&["lz4", "zstd", "none"]), field!(sync_compression), "Compression of the frames this site sends.")
        .fixed()
        .meridian(),
    field("sync-frame-bytes-max", Kind::Int { min: 1_048_576, max: 2_147_483_647 }, field!(sync_frame_bytes_max), "Largest frame accepted from a peer, in bytes.")
        .fixed()
        .meridian(),
    field("sync-quarantine-ms", Kind::Int { min: 1000, max: I64 }, field!(sync_quarantine_ms), "A peer silent this long no longer holds back garbage collection and must rejoin by a full sync.")
        .fixed()
        .meridian(),
    field("sync-clock-skew-ms-max", Kind::Int { min: 0, max: I64 }, field!(sync_clock_skew_ms_max), "Remote timestamps further ahead of the local clock are refused.")
        .fixed()
        .meridian(),
    field("log-segment-bytes-max", Kind::Int { min: 65_536, max: 4_294_967_296 }, field!(log_segment_bytes_max), "A log segment is closed and a new one started past this many bytes.")
        .fixed()
        .meridian(),
    field("backlog-disk-bytes-max", Kind::Int { min: 0, max: I64 }, field!(backlog_disk_bytes_max), "Disk the op log may keep beyond what recovery needs, for peers that resume from it.")
        .fixed()
        .meridian(),
    field("snapshot-memory-bytes-max", Kind::Mem { min: 0, max: U64 }, field!(snapshot_memory_bytes_max), "What a background snapshot's replay may hold at once (0: a quarter of maxmemory, or no bound without it; at least 8 MiB): past it the snapshot replays the keys in more parts (docs/persistence.md).")
        .meridian(),
    field("log-level", Kind::Text, field!(log_level), "Logging filter, as RUST_LOG.")
        .fixed()
        .meridian(),
    field("log-format", Kind::Enum(&["text", "json"]), field!(log_format), "Log lines as text or as one JSON object each; every line names the site.")
        .fixed()
        .meridian(),
    field("log-file", Kind::Text, field!(log_file), "File the log is written to (empty: standard output); SIGHUP reopens it, for logrotate.")
        .fixed()
        .meridian(),
    field("metrics-port", Kind::Int { min: 0, max: 65535 }, field!(metrics_port), "Port of the HTTP endpoint serving /metrics (Prometheus) and /health (0: off).")
        .fixed()
        .meridian(),
    field("metrics-bind", Kind::Text, field!(metrics_bind), "Address the metrics port listens on.")
        .fixed()
        .meridian(),
    field("debug-fsync-watermark", Kind::Bool, field!(debug_fsync_watermark), "Test only: record the log length known to be on disk after every fsync.")
        .fixed()
        .meridian(),
    field("debug-clock-offset-ms", Kind::Int { min: I64_MIN, max: I64 }, field!(debug_clock_offset_ms), "Test only: offset added to the wall clock, in milliseconds.")
        .fixed()
        .meridian(),
    field("debug-boot-id", Kind::Text, field!(debug_boot_id), "Test only: taken as the kernel's boot id (empty: the kernel's).")
        .fixed()
        .meridian(),
];

/// The parameter `name` (or its alias) names, case-insensitively.
pub fn find(name: &[u8]) -> Option<&'static Param> {
    PARAMS.iter().find(|p| {
        p.name.as_bytes().eq_ignore_ascii_case(name)
            || p.alias
                .is_some_and(|a| a.as_bytes().eq_ignore_ascii_case(name))
    })
}

impl Param {
    /// Checks `value` as Redis's CONFIG SET would and returns its canonical text (what
    /// `CONFIG GET` will show). The error is Redis's text for the failure.
    pub fn parse(&self, value: &str) -> Result<String, String> {
        match self.kind {
            Kind::Bool => {
                if value.eq_ignore_ascii_case("yes") {
                    Ok("yes".to_string())
                } else if value.eq_ignore_ascii_case("no") {
                    Ok("no".to_string())
                } else {
                    Err("argument must be 'yes' or 'no'".to_string())
                }
            }
            Kind::Int { min, max } => {
                let n = parse_i64_strict(value)
                    .ok_or_else(|| "argument couldn't be parsed into an integer".to_string())?;
                bounded(n, min, max).map(|n| n.to_string())
            }
            Kind::Mem { min, max } => {
                // Redis keeps the unsigned result in a signed field: above i64::MAX wraps.
                let n = parse_memory(value.as_bytes())
                    .ok_or_else(|| "argument must be a memory value".to_string())?
                    as i64;
                bounded(n, min, max).map(|n| n.to_string())
            }
            Kind::MemPercent { min, max } => {
                if let Some(n) = parse_memory(value.as_bytes()) {
                    return bounded(n as i64, min, max).map(|n| n.to_string());
                }
                let pct = value
                    .strip_suffix('%')
                    .filter(|d| !d.is_empty())
                    .and_then(parse_i64_strict)
                    .filter(|n| *n >= 0)
                    .ok_or_else(|| "argument must be a memory or percent value".to_string())?;
                if -pct < min {
                    return Err(format!(
                        "percentage argument must be less or equal to {}",
                        -min
                    ));
                }
                Ok(format!("{pct}%"))
            }
            Kind::Octal { min, max } => {
                let n = i64::from_str_radix(value, 8)
                    .map_err(|_| "argument couldn't be parsed as an octal number".to_string())?;
                bounded(n, min, max).map(|n| format!("{n:o}"))
            }
            Kind::Enum(words) => words
                .iter()
                .find(|w| w.eq_ignore_ascii_case(value))
                .map(|w| w.to_string())
                .ok_or_else(|| enum_error(words)),
            Kind::EnumSet(words) => parse_enum_set(words, value),
            Kind::Text => Ok(value.to_string()),
            Kind::Special(parse) => parse(value),
        }
    }

    /// The value `CONFIG GET` shows.
    pub fn get(&self, c: &Config) -> String {
        match self.binding {
            Binding::Field { get, .. } => get(c),
            Binding::Stored => c
                .stored
                .get(self.name)
                .cloned()
                .unwrap_or_else(|| self.default.to_string()),
        }
    }

    /// Sets a value `parse` returned.
    pub fn set(&self, c: &mut Config, canonical: &str) {
        match self.binding {
            Binding::Field { set, .. } => set(c, canonical),
            Binding::Stored => {
                if canonical == self.default {
                    c.stored.remove(self.name);
                } else {
                    c.stored
                        .insert(self.name.to_string(), canonical.to_string());
                }
            }
        }
    }

    /// The TOML value of a `Stored` parameter's canonical text (CONFIG REWRITE): booleans
    /// and integers as TOML's own, the rest as strings.
    pub fn toml_value(&self, canonical: &str) -> toml::Value {
        match self.kind {
            Kind::Bool => toml::Value::Boolean(canonical == "yes"),
            Kind::Int { .. } | Kind::Mem { .. } => canonical
                .parse::<i64>()
                .map(toml::Value::Integer)
                .unwrap_or_else(|_| toml::Value::String(canonical.to_string())),
            Kind::MemPercent { .. }
            | Kind::Octal { .. }
            | Kind::Enum(_)
            | Kind::EnumSet(_)
            | Kind::Text
            | Kind::Special(_) => toml::Value::String(canonical.to_string()),
        }
    }
}

/// The text a TOML value stands for, as a `CONFIG SET` argument (`true` is "yes").
pub fn toml_text(v: &toml::Value) -> Option<String> {
    match v {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(n) => Some(n.to_string()),
        toml::Value::Boolean(b) => Some(if *b { "yes" } else { "no" }.to_string()),
        toml::Value::Float(f) => Some(f.to_string()),
        toml::Value::Array(items) => items
            .iter()
            .map(toml_text)
            .collect::<Option<Vec<_>>>()
            .map(|v| v.join(" ")),
        toml::Value::Datetime(_) | toml::Value::Table(_) => None,
    }
}

fn bounded(n: i64, min: i64, max: i64) -> Result<i64, String> {
    if n < min || n > max {
        return Err(format!(
            "argument must be between {min} and {max} inclusive"
        ));
    }
    Ok(n)
}

fn enum_error(words: &[&str]) -> String {
    format!(
        "argument(s) must be one of the following: {}",
        words.join(", ")
    )
}

/// Redis's `string2ll`: an optional '-' and digits, no spaces or '+', no leading zeros.
fn parse_i64_strict(s: &str) -> Option<i64> {
    let digits = s.strip_prefix('-').unwrap_or(s);
    if digits.is_empty()
        || !digits.bytes().all(|b| b.is_ascii_digit())
        || (digits.len() > 1 && digits.starts_with('0'))
    {
        return None;
    }
    s.parse().ok()
}

/// Redis's `memtoull`: digits with an optional unit b, k, kb, m, mb, g, gb (any case).
pub fn parse_memory(v: &[u8]) -> Option<u64> {
    let digits = v.iter().take_while(|c| c.is_ascii_digit()).count();
    let (num, unit) = v.split_at(digits);
    if num.is_empty() {
        return None;
    }
    let unit = String::from_utf8_lossy(unit).to_ascii_lowercase();
    let mul: u64 = match unit.as_str() {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    let n: u64 = std::str::from_utf8(num).ok()?.parse().ok()?;
    n.checked_mul(mul)
}

/// The shutdown flags' words (Redis's `shutdown_on_sig_enum`): "default" alone, or any of
/// the others, shown in the table's order; SAVE and NOSAVE exclude each other.
fn parse_enum_set(words: &[&str], value: &str) -> Result<String, String> {
    let given: Vec<&str> = value.split_whitespace().collect();
    if given.is_empty() {
        return Err(enum_error(words));
    }
    let mut chosen = vec![false; words.len()];
    for g in &given {
        let i = words
            .iter()
            .position(|w| w.eq_ignore_ascii_case(g))
            .ok_or_else(|| enum_error(words))?;
        if let Some(c) = chosen.get_mut(i) {
            *c = true;
        }
    }
    let picked: Vec<&str> = words
        .iter()
        .zip(&chosen)
        .filter(|(w, c)| **c && **w != "default")
        .map(|(w, _)| *w)
        .collect();
    if picked.contains(&"save") && picked.contains(&"nosave") {
        return Err("shutdown options SAVE and NOSAVE can't be used simultaneously".to_string());
    }
    if picked.is_empty() {
        return Ok("default".to_string());
    }
    Ok(picked.join(" "))
}

/// `save`: pairs "seconds changes", seconds at least 1; "" for none.
fn parse_save_value(v: &str) -> Result<String, String> {
    let words: Vec<&str> = v.split_whitespace().collect();
    let bad = || "Invalid save parameters".to_string();
    if words.len() % 2 != 0 {
        return Err(bad());
    }
    for (i, w) in words.iter().enumerate() {
        let n: i64 = w.parse().map_err(|_| bad())?;
        if (i % 2 == 0 && n < 1) || n < 0 {
            return Err(bad());
        }
    }
    Ok(words.join(" "))
}

/// `bind`: up to 16 addresses.
fn parse_bind(v: &str) -> Result<String, String> {
    let words: Vec<&str> = v.split_whitespace().collect();
    if words.len() > BIND_ADDRESSES_MAX {
        return Err("Too many bind addresses specified.".to_string());
    }
    Ok(words.join(" "))
}

/// Redis's output buffer limit classes and defaults: (name, hard, soft, seconds).
const OBUF_DEFAULTS: [(&str, u64, u64, u64); 3] = [
    ("normal", 0, 0, 0),
    ("slave", 268_435_456, 67_108_864, 60),
    ("pubsub", 33_554_432, 8_388_608, 60),
];

/// `client-output-buffer-limit`: groups of "class hard soft seconds" over the defaults.
fn parse_obuf_limits(v: &str) -> Result<String, String> {
    let words: Vec<&str> = v.split_whitespace().collect();
    if words.len() % 4 != 0 {
        return Err("Wrong number of arguments in buffer limit configuration.".to_string());
    }
    let mut limits = OBUF_DEFAULTS;
    for group in words.chunks(4) {
        let [class, hard, soft, secs] = group else {
            return Err("Wrong number of arguments in buffer limit configuration.".to_string());
        };
        let class = if class.eq_ignore_ascii_case("replica") {
            "slave"
        } else {
            class
        };
        let slot = limits
            .iter_mut()
            .find(|l| l.0.eq_ignore_ascii_case(class))
            .ok_or_else(|| {
                "Invalid client class specified in buffer limit configuration.".to_string()
            })?;
        let (Some(h), Some(s), Ok(sec)) = (
            parse_memory(hard.as_bytes()),
            parse_memory(soft.as_bytes()),
            secs.parse::<u64>(),
        ) else {
            return Err(
                "Error in hard, soft or soft_seconds setting in buffer limit configuration."
                    .to_string(),
            );
        };
        *slot = (slot.0, h, s, sec);
    }
    Ok(limits
        .iter()
        .map(|(c, h, s, sec)| format!("{c} {h} {s} {sec}"))
        .collect::<Vec<_>>()
        .join(" "))
}

/// `oom-score-adj-values`: three integers in [-2000, 2000].
fn parse_oom_values(v: &str) -> Result<String, String> {
    let words: Vec<&str> = v.split_whitespace().collect();
    if words.len() != 3 {
        return Err("wrong number of arguments".to_string());
    }
    for w in &words {
        match w.parse::<i64>() {
            Ok(n) if (-2000..=2000).contains(&n) => {}
            _ => {
                return Err(
                    "Invalid oom-score-adj-values, elements must be between -2000 and 2000."
                        .to_string(),
                );
            }
        }
    }
    Ok(words.join(" "))
}

/// `notify-keyspace-events`: class characters (Redis's error text for any other); kept as
/// `notify::to_stored` (every flag), shown as `notify::to_text` (Redis's canonical order).
fn parse_notify_flags(v: &str) -> Result<String, String> {
    crate::notify::parse(v)
        .map(crate::notify::to_stored)
        .ok_or_else(|| "Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".to_string())
}

/// `latency-tracking-info-percentiles`: numbers in [0, 100], shown as Redis's `%f` with
/// trailing zeros trimmed; "" for none.
fn parse_percentiles(v: &str) -> Result<String, String> {
    let mut out = Vec::new();
    for w in v.split_whitespace() {
        let p: f64 = w
            .parse()
            .ok()
            .filter(|p: &f64| !p.is_nan())
            .ok_or_else(|| "Invalid latency-tracking-info-percentiles parameters".to_string())?;
        if !(0.0..=100.0).contains(&p) {
            return Err(
                "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
                    .to_string(),
            );
        }
        out.push(format_percentile(p));
    }
    Ok(out.join(" "))
}

/// Redis's `%f` then `trimDoubleString`: "99.900000" → "99.9", "50.000000" → "50".
pub fn format_percentile(p: f64) -> String {
    let s = format!("{p:.6}");
    let s = s.trim_end_matches('0');
    s.trim_end_matches('.').to_string()
}

/// The percentiles of `latency-tracking-info-percentiles` (checked when set).
pub fn percentiles(text: &str) -> Vec<f64> {
    text.split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect()
}

/// docs/configuration.md: the table as Markdown (a test keeps the file equal to it).
pub fn markdown() -> String {
    let mut out = String::from(
        "# Configuration\n\n\
         Generated from `crates/server/src/config/params.rs` (the parameter table); do not edit by\n\
         hand: `MERIDIAN_BLESS=1 cargo test -p meridian-server --lib docs_configuration` rewrites it.\n\n\
         Every parameter is a key of the TOML file given with `--config`, with the same name and\n\
         value (`true`/`false` for yes/no), and answers `CONFIG GET`. `CONFIG SET` changes the\n\
         *modifiable* ones at run time, all of one call or none; `CONFIG REWRITE` writes the running\n\
         values back into the TOML file.\n\n\
         Access: **modifiable**; **immutable** (`can't set immutable config`, as Redis);\n\
         **protected** (`can't set protected config`, as Redis with `enable-protected-configs no`);\n\
         **fixed**: only the current value is accepted, so tools that write back what `CONFIG GET *`\n\
         showed keep working, and any other value answers `can't set immutable config`.\n\n",
    );
    let default_of = |p: &Param| {
        let v = p.get(&Config::default());
        if p.name == "dir" {
            "./meridian-data".to_string()
        } else {
            v
        }
    };
    let cell = |s: &str| s.replace('|', "\\|");
    let section = |out: &mut String, title: &str, rows: &mut dyn Iterator<Item = &Param>| {
        out.push_str(title);
        out.push_str("\n\n| Parameter | Default | Access | In Meridian |\n|---|---|---|---|\n");
        for p in rows {
            let name = match p.alias {
                Some(a) => format!("`{}` (`{}`)", p.name, a),
                None => format!("`{}`", p.name),
            };
            let access = match p.access {
                Access::Modifiable => "modifiable",
                Access::Immutable => "immutable",
                Access::Protected => "protected",
                Access::Fixed => "fixed",
            };
            let _ = std::fmt::Write::write_fmt(
                out,
                format_args!(
                    "| {name} | `{}` | {access} | {} |\n",
                    cell(&default_of(p)),
                    cell(p.note)
                ),
            );
        }
        out.push('\n');
    };
    section(
        &mut out,
        "## Parameters Meridian honours",
        &mut PARAMS
            .iter()
            .filter(|p| matches!(p.binding, Binding::Field { .. })),
    );
    section(
        &mut out,
        "## Redis parameters with no effect in Meridian\n\n\
         Accepted, checked as Redis checks them and shown, so clients, tools and Redis's own test\n\
         suite that read or set them keep working; the last column says why each one does nothing.",
        &mut PARAMS
            .iter()
            .filter(|p| matches!(p.binding, Binding::Stored)),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_configuration_is_current() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/configuration.md");
        let want = markdown();
        if std::env::var_os("MERIDIAN_BLESS").is_some() {
            std::fs::write(path, &want).unwrap();
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            have == want,
            "docs/configuration.md is stale: MERIDIAN_BLESS=1 cargo test -p meridian-server --lib docs_configuration"
        );
    }

    #[test]
    fn names_are_unique_and_lowercase() {
        let mut seen = std::collections::HashSet::new();
        for p in PARAMS {
            for n in std::iter::once(p.name).chain(p.alias) {
                assert!(seen.insert(n), "{n} twice");
                assert_eq!(n, n.to_ascii_lowercase());
            }
        }
    }

    #[test]
    fn stored_defaults_parse_to_themselves() {
        for p in PARAMS {
            if let Binding::Stored = p.binding {
                assert_eq!(p.parse(p.default).as_deref(), Ok(p.default), "{}", p.name);
            }
        }
    }

    #[test]
    fn field_values_parse_to_themselves() {
        let c = Config::default();
        for p in PARAMS {
            if p.name == "dir" {
                continue;
            }
            let v = p.get(&c);
            assert_eq!(p.parse(&v).as_deref(), Ok(v.as_str()), "{}", p.name);
        }
    }

    #[test]
    fn every_config_field_is_a_parameter() {
        // A new `Config` field must get a row (CONFIG GET, REWRITE and the docs read them).
        let c = Config {
            sync_tls_cert: Some("c".into()),
            sync_tls_key: Some("k".into()),
            sync_tls_ca: Some("a".into()),
            ..Config::default()
        };
        let toml::Value::Table(t) = toml::Value::try_from(&c).unwrap() else {
            panic!("config is a table");
        };
        for key in t.keys() {
            let p = find(key.as_bytes()).unwrap_or_else(|| panic!("no row for {key}"));
            assert!(matches!(p.binding, Binding::Field { .. }), "{key}");
            assert_eq!(p.name, key.as_str());
        }
    }

    #[test]
    fn kinds_answer_redis_texts() {
        let p = |n: &str| find(n.as_bytes()).unwrap();
        assert_eq!(
            p("activerehashing").parse("maybe"),
            Err("argument must be 'yes' or 'no'".to_string())
        );
        assert_eq!(
            p("tcp-keepalive").parse("-1"),
            Err("argument must be between 0 and 2147483647 inclusive".to_string())
        );
        assert_eq!(
            p("tcp-keepalive").parse("1.5"),
            Err("argument couldn't be parsed into an integer".to_string())
        );
        assert_eq!(
            p("hash-max-ziplist-value").parse("1kb").as_deref(),
            Ok("1024")
        );
        assert_eq!(
            p("stream-node-max-bytes").parse("x"),
            Err("argument must be a memory value".to_string())
        );
        assert_eq!(p("maxmemory-clients").parse("10%").as_deref(), Ok("10%"));
        assert_eq!(
            p("maxmemory-clients").parse("200%"),
            Err("percentage argument must be less or equal to 100".to_string())
        );
        assert_eq!(p("unixsocketperm").parse("700").as_deref(), Ok("700"));
        assert_eq!(
            p("loglevel").parse("loud"),
            Err(
                "argument(s) must be one of the following: debug, verbose, notice, warning"
                    .to_string()
            )
        );
        assert_eq!(
            p("shutdown-on-sigterm").parse("now NOSAVE").as_deref(),
            Ok("nosave now")
        );
        assert!(p("shutdown-on-sigterm").parse("save nosave").is_err());
        assert_eq!(
            p("notify-keyspace-events").parse("KEA").as_deref(),
            Ok("AKE")
        );
        assert_eq!(
            p("notify-keyspace-events").parse("xgK").as_deref(),
            Ok("gxK")
        );
        assert!(p("notify-keyspace-events").parse("Q").is_err());
        assert_eq!(p("save").parse(" 100  10 ").as_deref(), Ok("100 10"));
        assert!(p("save").parse("0 10").is_err());
        assert_eq!(
            p("latency-tracking-info-percentiles")
                .parse("50 99.90 100")
                .as_deref(),
            Ok("50 99.9 100")
        );
        assert!(p("latency-tracking-info-percentiles").parse("101").is_err());
        assert_eq!(
            p("client-output-buffer-limit")
                .parse("pubsub 1mb 0 0")
                .as_deref(),
            Ok("normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 0 0")
        );
    }

    #[test]
    fn aliases_and_stored_values() {
        let mut c = Config::default();
        let p = find(b"HASH-MAX-ZIPLIST-ENTRIES").unwrap();
        assert_eq!(p.name, "hash-max-listpack-entries");
        p.set(&mut c, "20");
        assert_eq!(c.hash_max_listpack_entries, 20);
        let s = find(b"lfu-log-factor").unwrap();
        let t = find(b"tcp-keepalive").unwrap();
        t.set(&mut c, "60");
        assert_eq!(t.get(&c), "60");
        t.set(&mut c, "300");
        assert!(c.stored.is_empty());
        assert_eq!(s.get(&c), "10");
    }
}

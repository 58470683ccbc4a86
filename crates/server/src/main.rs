//! The `meridian` binary: `meridian server [flags]` runs a server.

use std::path::PathBuf;

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use meridian_server::config::Config;
use meridian_server::logging::{LogFormat, LogOptions};

#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[derive(Parser, Debug)]
#[command(
    name = "meridian",
    version,
    about = "Redis-compatible active-active key-value server"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the server (embedded defaults, then --config FILE, then flags).
    Server(Box<ServerFlags>),
    /// Check a log segment or snapshot of the data directory; --fix cuts a damaged log
    /// segment at its first bad record.
    CheckLog {
        file: PathBuf,
        /// Cut a damaged segment at its first bad record.
        #[arg(long)]
        fix: bool,
    },
    /// Configuration files.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Change or inspect every site of a deployment at once over RESP (CRDT.PEERS,
    /// CRDT.ADDPEER, CRDT.REMOVEPEER); each site writes the change to its configuration file.
    Admin {
        /// A site's client address, host:port (repeat for each site).
        #[arg(long = "site", required = true, value_name = "HOST:PORT")]
        sites: Vec<String>,
        #[command(flatten)]
        tls: TlsFlags,
        #[command(subcommand)]
        command: AdminCommand,
    },
    /// Load an RDB file (a Redis dump.rdb, or what `redis-cli --rdb` saved) into a running
    /// server: FUNCTION RESTORE, then SELECT and RESTORE ... ABSTTL per key, pipelined.
    /// The whole file is checked before anything is sent.
    ImportRdb {
        file: PathBuf,
        /// The server's client address, host:port (a site's main port).
        #[arg(long, value_name = "HOST:PORT")]
        to: String,
        /// AUTH with this user (with --password).
        #[arg(long)]
        user: Option<String>,
        /// AUTH with this password (default: $MERIDIAN_IMPORT_PASSWORD, if set).
        #[arg(long, env = "MERIDIAN_IMPORT_PASSWORD", hide_env_values = true)]
        password: Option<String>,
        /// The file's keys and libraries replace those of the same name (else such a key
        /// is refused with BUSYKEY and counted, and such a library stops the import).
        #[arg(long)]
        replace: bool,
        #[command(flatten)]
        tls: TlsFlags,
    },
    /// Certificates for mutual TLS between sites.
    Certs {
        #[command(subcommand)]
        command: CertsCommand,
    },
}

/// TLS to a server's tls-port, as `redis-cli --tls` takes it (`meridian admin`,
/// `meridian import-rdb`).
#[derive(Args, Debug)]
struct TlsFlags {
    /// Connect over TLS (the server's tls-port), trusting --cacert.
    #[arg(long, requires = "cacert")]
    tls: bool,
    /// The CA certificate (PEM) that signed the server's certificate.
    #[arg(long, value_name = "FILE", requires = "tls")]
    cacert: Option<PathBuf>,
    /// This client's certificate (PEM), when the server asks for one (tls-auth-clients).
    #[arg(long, value_name = "FILE", requires_all = ["tls", "key"])]
    cert: Option<PathBuf>,
    /// The key (PEM) of --cert.
    #[arg(long, value_name = "FILE", requires_all = ["tls", "cert"])]
    key: Option<PathBuf>,
    /// The name the server's certificate must carry (default: the host of the address).
    #[arg(long, value_name = "NAME", requires = "tls")]
    sni: Option<String>,
}

impl TlsFlags {
    fn options(self) -> Option<meridian_server::admin::TlsOptions> {
        match (self.tls, self.cacert) {
            (true, Some(ca)) => Some(meridian_server::admin::TlsOptions {
                ca,
                cert: self.cert,
                key: self.key,
                server_name: self.sni,
            }),
            _ => None,
        }
    }
}

#[derive(Subcommand, Debug)]
enum AdminCommand {
    /// Each site's peers, links and lag.
    Peers,
    /// Add a peer site to every site given (it takes a full sync from each).
    AddPeer {
        /// The new site's id.
        site: String,
        /// Its sync endpoint, host:port, as the sites given reach it.
        addr: String,
    },
    /// Remove a peer site from every site given (they stop waiting for it).
    RemovePeer { site: String },
}

#[derive(Subcommand, Debug)]
enum CertsCommand {
    /// Create a CA (ca.crt, ca.key) and, for each site, a certificate valid for its site id
    /// (SITE.crt, SITE.key) in DIR. An existing ca.crt/ca.key in DIR (from an earlier init)
    /// signs the new sites instead; no file is ever overwritten.
    Init {
        /// Site ids, comma-separated (a,b,c).
        #[arg(long, value_delimiter = ',', required = true)]
        sites: Vec<String>,
        /// Output directory (created if missing).
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Validity of the site certificates, in days. [default: 825]
        #[arg(long, default_value_t = meridian_server::certs::SITE_VALIDITY_DAYS_DEFAULT, hide_default_value = true)]
        days: u32,
    },
}

#[derive(Subcommand, Debug)]
enum ConfigCommand {
    /// Validate a configuration file: TOML syntax, every key known, every value in range,
    /// every peer name resolvable. Prints "FILE: OK" (exit 0) or the problem (exit 1).
    Check { file: PathBuf },
}

/// Each flag overrides the TOML key of the same name; the defaults shown are the embedded
/// ones (`deploy/meridian.example.toml`).
#[derive(Args, Debug, Default)]
struct ServerFlags {
    /// TOML configuration file, read over the embedded defaults; flags win over it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Address the client port listens on. [default: 127.0.0.1]
    #[arg(long, value_name = "IP")]
    bind: Option<String>,
    /// Plain TCP client (RESP) port (0: none, TLS only). [default: 6379]
    #[arg(long)]
    port: Option<u16>,
    /// Data directory: each shard's op log and snapshots. [default: ./meridian-data]
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Number of logical databases (SELECT 0..N-1). [default: 16]
    #[arg(long)]
    databases: Option<u32>,
    /// Shard threads, each owning a range of hash slots (0: one per CPU this process may
    /// run on; a data directory keeps its count). [default: 0]
    #[arg(long)]
    shards: Option<u32>,
    /// The Redis Cluster API, an endpoint and a node id per shard: yes or no. [default: yes
    /// with more than one shard]
    #[arg(long, value_parser = parse_yes_no, value_name = "YES|NO")]
    cluster_api: Option<bool>,
    /// Port of shard 0's cluster endpoint; shard N listens on it + N (0: the larger of port and
    /// tls-port, + 1). [default: 0]
    #[arg(long)]
    cluster_endpoint_port: Option<u16>,
    /// The address CLUSTER SLOTS/SHARDS/NODES and MOVED give for the endpoints (empty: the
    /// bind address, or 127.0.0.1 when it is a wildcard). [default: ""]
    #[arg(long, value_name = "IP")]
    cluster_announce_ip: Option<String>,
    /// A site across several nodes: the topology file, identical on every node (this
    /// node's ports come from it). [default: ""]
    #[arg(long, value_name = "FILE")]
    topology: Option<PathBuf>,
    /// This node's name in the topology file (also `--node`). [default: ""]
    #[arg(long = "node-name", visible_alias = "node", value_name = "NAME")]
    node_name: Option<String>,
    /// This site's id, a DNS label (certificates name sites by it). [default: local]
    #[arg(long)]
    site: Option<String>,
    /// Largest bulk string accepted in a request, in bytes. [default: 536870912]
    #[arg(long, value_name = "BYTES")]
    proto_max_bulk_len: Option<u64>,
    /// Largest unparsed input buffered per client, in bytes. [default: 1073741824]
    #[arg(long, value_name = "BYTES")]
    client_query_buffer_limit: Option<u64>,
    /// Most clients connected at once. [default: 10000]
    #[arg(long)]
    maxclients: Option<u32>,
    /// Output kept for a client that does not read: "class hard soft seconds" groups
    /// (normal, replica, pubsub), applied over the file's value. [default: normal 0 0 0 replica 268435456 67108864 60 pubsub 33554432 8388608 60]
    #[arg(long, value_name = "LIMITS")]
    client_output_buffer_limit: Option<String>,
    /// Close a client idle for this many seconds (0: never). [default: 0]
    #[arg(long, value_name = "SECONDS")]
    timeout: Option<u64>,
    /// The process's memory limit in bytes (0: none). [default: 0]
    #[arg(long, value_name = "BYTES")]
    maxmemory: Option<u64>,
    /// Which keys are evicted past maxmemory: noeviction, allkeys-lru, allkeys-lfu,
    /// allkeys-random, volatile-lru, volatile-lfu, volatile-random or volatile-ttl.
    /// [default: noeviction]
    #[arg(long, value_name = "POLICY")]
    maxmemory_policy: Option<String>,
    /// The default user's password; clients must AUTH (empty: none). [default: ""]
    #[arg(long, value_name = "PASSWORD")]
    requirepass: Option<String>,
    /// While the default user has no password, refuse clients from other addresses than
    /// 127.0.0.1 and ::1: yes or no. [default: yes]
    #[arg(long, value_parser = parse_yes_no, value_name = "yes|no")]
    protected_mode: Option<bool>,
    /// ACL users file, loaded at start and by ACL LOAD (empty: none). [default: ""]
    #[arg(long, value_name = "FILE")]
    aclfile: Option<String>,
    /// Entries the ACL log keeps. [default: 128]
    #[arg(long)]
    acllog_max_len: Option<u64>,
    /// Channels of new ACL users: resetchannels or allchannels. [default: resetchannels]
    #[arg(long, value_name = "resetchannels|allchannels")]
    acl_pubsub_default: Option<String>,
    /// Background cycles per second (active expiry, GC, snapshots). [default: 10]
    #[arg(long)]
    hz: Option<u32>,
    /// Slow log threshold in microseconds (negative: off). [default: 10000]
    #[arg(long, allow_negative_numbers = true, value_name = "MICROSECONDS")]
    slowlog_log_slower_than: Option<i64>,
    /// Entries the slow log keeps. [default: 128]
    #[arg(long)]
    slowlog_max_len: Option<u64>,
    /// Latency monitor threshold in milliseconds (0: off). [default: 0]
    #[arg(long, value_name = "MS")]
    latency_monitor_threshold: Option<u64>,
    /// Milliseconds a script runs before other clients get -BUSY and it may be killed. [default: 5000]
    #[arg(long, value_name = "MS")]
    busy_reply_threshold: Option<u64>,
    /// Bytes of recent ops each shard keeps in memory for peers that reconnect. [default: 16777216]
    #[arg(long, value_name = "BYTES")]
    backlog_bytes_max: Option<u64>,
    /// Deployment id: peers with another one are refused. [default: meridian]
    #[arg(long)]
    deployment_id: Option<String>,
    /// Port the syncer listens on for peers (0: none; required with peers). [default: 0]
    #[arg(long)]
    sync_port: Option<u16>,
    /// Address the sync port listens on (empty: the bind address). [default: ""]
    #[arg(long, value_name = "IP")]
    sync_bind: Option<String>,
    /// A peer site, `id=host:port` of its sync port, the host an IP address or a DNS name
    /// (repeat for each peer; replaces the file's list). [default: none]
    #[arg(long = "peer", value_name = "ID=HOST:PORT")]
    peer: Vec<String>,
    /// This site's certificate (PEM) for mutual TLS between sites. [default: none]
    #[arg(long, value_name = "FILE")]
    sync_tls_cert: Option<PathBuf>,
    /// This site's private key (PEM). [default: none]
    #[arg(long, value_name = "FILE")]
    sync_tls_key: Option<PathBuf>,
    /// The CA every site trusts (PEM). [default: none]
    #[arg(long, value_name = "FILE")]
    sync_tls_ca: Option<PathBuf>,
    /// TLS client port (0: none). [default: 0]
    #[arg(long)]
    tls_port: Option<u16>,
    /// The TLS port's certificate chain (PEM). [default: ""]
    #[arg(long, value_name = "FILE")]
    tls_cert_file: Option<String>,
    /// The TLS port's private key (PEM, unencrypted). [default: ""]
    #[arg(long, value_name = "FILE")]
    tls_key_file: Option<String>,
    /// Only empty: encrypted private keys are refused. [default: ""]
    #[arg(long, value_name = "PASS")]
    tls_key_file_pass: Option<String>,
    /// CA certificates (PEM) client certificates must chain to. [default: ""]
    #[arg(long, value_name = "FILE")]
    tls_ca_cert_file: Option<String>,
    /// A directory of CA certificate files (PEM). [default: ""]
    #[arg(long, value_name = "DIR")]
    tls_ca_cert_dir: Option<String>,
    /// Client certificates on the TLS port: yes, no or optional. [default: yes]
    #[arg(long, value_name = "yes|no|optional")]
    tls_auth_clients: Option<String>,
    /// TLS versions: "TLSv1.2 TLSv1.3" or one of them (empty: both). [default: ""]
    #[arg(long, value_name = "VERSIONS")]
    tls_protocols: Option<String>,
    /// TLS 1.2 cipher suites, OpenSSL names, colon-separated (empty: all). [default: ""]
    #[arg(long, value_name = "SUITES")]
    tls_ciphers: Option<String>,
    /// TLS 1.3 cipher suites, OpenSSL names, colon-separated (empty: all). [default: ""]
    #[arg(long, value_name = "SUITES")]
    tls_ciphersuites: Option<String>,
    /// Choose the cipher suite by the server's order: yes or no. [default: no]
    #[arg(long, value_parser = parse_yes_no, value_name = "yes|no")]
    tls_prefer_server_ciphers: Option<bool>,
    /// Milliseconds a TLS handshake may take before the connection is closed. [default: 10000]
    #[arg(long, value_name = "MS")]
    tls_handshake_timeout_ms: Option<u64>,
    /// Compression of the frames this site sends: lz4, zstd or none. [default: lz4]
    #[arg(long)]
    sync_compression: Option<String>,
    /// Largest frame accepted from a peer, in bytes. [default: 67108864]
    #[arg(long, value_name = "BYTES")]
    sync_frame_bytes_max: Option<u64>,
    /// A peer silent this long stops holding back GC and must rejoin by a full sync. [default: 3600000]
    #[arg(long, value_name = "MS")]
    sync_quarantine_ms: Option<u64>,
    /// Remote timestamps further than this ahead of the local clock are refused. [default: 60000]
    #[arg(long, value_name = "MS")]
    sync_clock_skew_ms_max: Option<u64>,
    /// Write every op to the on-disk log: yes or no. [default: yes]
    #[arg(long, value_parser = parse_yes_no, value_name = "yes|no")]
    appendonly: Option<bool>,
    /// When log writes reach the disk: always, everysec or no. [default: everysec]
    #[arg(long)]
    appendfsync: Option<String>,
    /// Automatic snapshots: "seconds changes" pairs ("" for none). [default: 3600 1 300 100 60 10000]
    #[arg(long)]
    save: Option<String>,
    /// Snapshot once the log grew by this percentage of the last snapshot (0: off). [default: 100]
    #[arg(long, value_name = "PERCENT")]
    auto_aof_rewrite_percentage: Option<u64>,
    /// ...and is at least this many bytes. [default: 67108864]
    #[arg(long, value_name = "BYTES")]
    auto_aof_rewrite_min_size: Option<u64>,
    /// A log segment is closed and a new one started past this many bytes. [default: 67108864]
    #[arg(long, value_name = "BYTES")]
    log_segment_bytes_max: Option<u64>,
    /// Disk the op log may keep beyond what recovery needs, for peers that resume. [default: 1073741824]
    #[arg(long, value_name = "BYTES")]
    backlog_disk_bytes_max: Option<u64>,
    /// Log filter, as RUST_LOG ("info", "meridian_server=debug"); this flag wins over
    /// RUST_LOG, which wins over the file's log-level. [default: info]
    #[arg(long, value_name = "FILTER")]
    log_level: Option<String>,
    /// Log line format: text or json. [default: text]
    #[arg(long, value_name = "text|json")]
    log_format: Option<String>,
    /// Log file, reopened on SIGHUP (empty: standard output). [default: ""]
    #[arg(long, value_name = "FILE")]
    log_file: Option<String>,
    /// Port serving /metrics (Prometheus) and /health over HTTP (0: off). [default: 0]
    #[arg(long)]
    metrics_port: Option<u16>,
    /// Address the metrics port listens on. [default: 127.0.0.1]
    #[arg(long, value_name = "IP")]
    metrics_bind: Option<String>,
    /// Who may run DEBUG: no, yes, or local (clients on loopback), Redis's
    /// `enable-debug-command`. [default: no]
    #[arg(long, value_name = "no|yes|local")]
    enable_debug_command: Option<String>,
    /// Who may run MODULE: no, yes, or local (clients on loopback), Redis's
    /// `enable-module-command`. [default: no]
    #[arg(long, value_name = "no|yes|local")]
    enable_module_command: Option<String>,
    /// Test-only: write shard-N/fsynced after every fsync.
    #[arg(long, value_parser = parse_yes_no, hide = true)]
    debug_fsync_watermark: Option<bool>,
    /// Test-only: milliseconds added to the wall clock.
    #[arg(long, allow_negative_numbers = true, hide = true)]
    debug_clock_offset_ms: Option<i64>,
    /// Test-only: taken as the kernel's boot id.
    #[arg(long, hide = true)]
    debug_boot_id: Option<String>,
}

impl ServerFlags {
    fn resolve(self) -> anyhow::Result<Config> {
        let mut c = match &self.config {
            Some(path) => Config::from_file(path)?,
            None => Config::default(),
        };
        macro_rules! over {
            ($($f:ident),*) => { $( if let Some(v) = self.$f { c.$f = v; } )* };
        }
        over!(
            bind,
            port,
            tls_port,
            tls_cert_file,
            tls_key_file,
            tls_key_file_pass,
            tls_ca_cert_file,
            tls_ca_cert_dir,
            tls_auth_clients,
            tls_protocols,
            tls_ciphers,
            tls_ciphersuites,
            tls_prefer_server_ciphers,
            tls_handshake_timeout_ms,
            dir,
            shards,
            cluster_endpoint_port,
            cluster_announce_ip,
            topology,
            node_name,
            databases,
            site,
            proto_max_bulk_len,
            client_query_buffer_limit,
            maxclients,
            timeout,
            maxmemory,
            maxmemory_policy,
            requirepass,
            protected_mode,
            aclfile,
            acllog_max_len,
            acl_pubsub_default,
            hz,
            slowlog_log_slower_than,
            slowlog_max_len,
            latency_monitor_threshold,
            busy_reply_threshold,
            backlog_bytes_max,
            deployment_id,
            sync_port,
            sync_bind,
            sync_compression,
            sync_frame_bytes_max,
            sync_quarantine_ms,
            sync_clock_skew_ms_max,
            appendonly,
            appendfsync,
            save,
            auto_aof_rewrite_percentage,
            auto_aof_rewrite_min_size,
            log_segment_bytes_max,
            backlog_disk_bytes_max,
            debug_fsync_watermark,
            log_format,
            log_file,
            metrics_port,
            metrics_bind,
            debug_clock_offset_ms,
            debug_boot_id
        );
        // The log filter: the flag, else RUST_LOG, else the file's, else the default.
        match (self.log_level, std::env::var("RUST_LOG")) {
            (Some(flag), _) => c.log_level = flag,
            (None, Ok(env)) if !env.trim().is_empty() => {
                if env.parse::<tracing_subscriber::EnvFilter>().is_err() {
                    anyhow::bail!("RUST_LOG: '{env}' is not a log filter");
                }
                c.log_level = env;
            }
            (None, _) => {}
        }
        if !self.peer.is_empty() {
            c.peer = self.peer;
        }
        if self.cluster_api.is_some() {
            c.cluster_api = self.cluster_api;
        }
        for (name, flag) in [
            ("enable-debug-command", &self.enable_debug_command),
            ("enable-module-command", &self.enable_module_command),
        ] {
            if let Some(text) = flag {
                c.set_stored(name, text)
                    .map_err(|e| anyhow::anyhow!("--{name}: {e}"))?;
            }
        }
        if let Some(text) = &self.client_output_buffer_limit {
            c.client_output_buffer_limit
                .apply(text)
                .map_err(|e| anyhow::anyhow!("--client-output-buffer-limit: {e}"))?;
        }
        for (flag, slot) in [
            (self.sync_tls_cert, &mut c.sync_tls_cert),
            (self.sync_tls_key, &mut c.sync_tls_key),
            (self.sync_tls_ca, &mut c.sync_tls_ca),
        ] {
            if flag.is_some() {
                *slot = flag;
            }
        }
        c.validate()?;
        Ok(c)
    }
}

fn parse_yes_no(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "yes" | "true" => Ok(true),
        "no" | "false" => Ok(false),
        _ => Err(format!("'{s}' must be yes or no")),
    }
}

fn main() -> ExitCode {
    exit_on_panic();
    let cli = Cli::parse();
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            // One line: the causes joined by ": ", no backtrace (a configuration mistake is
            // not a crash). The journal gets standard error; a log file gets it too.
            let line = one_line(&e);
            if meridian_server::logging::is_file() {
                tracing::error!("{line}");
            }
            eprintln!("meridian: {line}");
            ExitCode::FAILURE
        }
    }
}

/// Makes a panic on any thread end the process, as an assertion ends Redis's: the panic's
/// message and backtrace go to standard error (the journal), one line to the log, then the
/// process aborts, so that the service manager restarts it (`Restart=on-failure`) and the
/// op log replays. A panic is a defect; left to itself it ended only the task it happened in
/// (tokio keeps the runtime going), and a shard whose inbox task had ended answered every
/// message from the other threads `CLUSTERDOWN` while it still served its own connections.
fn exit_on_panic() {
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        let thread = std::thread::current();
        let at = info
            .location()
            .map(|l| format!("{}:{}", l.file(), l.line()))
            .unwrap_or_default();
        tracing::error!(
            thread = thread.name().unwrap_or("unnamed"),
            at,
            "panicked: {}; exiting (a defect: please report it with the lines above)",
            panic_message(info)
        );
        std::process::abort();
    }));
}

/// A panic's message: `panic!`'s text (a `&str` or a `String` payload), else nothing.
fn panic_message<'a>(info: &'a std::panic::PanicHookInfo<'_>) -> &'a str {
    let payload = info.payload();
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("")
}

/// An error and its causes on one line, joined by ": ", leaving out a cause whose text the
/// line already holds (errors that print their source, as `{path}: {source}` does).
fn one_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line.replace(['\r', '\n'], " ")
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Server(flags) => {
            let config = flags.resolve().context("invalid configuration")?;
            let format = LogFormat::parse(&config.log_format).unwrap_or(LogFormat::Text);
            meridian_server::logging::init(&LogOptions {
                filter: config.log_level.clone(),
                format,
                file: (!config.log_file.is_empty()).then(|| PathBuf::from(&config.log_file)),
                site: config.site.clone(),
            })?;
            meridian_server::server::run(config)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Config {
            command: ConfigCommand::Check { file },
        } => {
            let checked = Config::from_file(&file)
                .map_err(anyhow::Error::from)
                .and_then(|c| {
                    meridian_server::server::resolve_peers(&c)?;
                    Ok(c)
                });
            match checked {
                Ok(_) => {
                    println!("{}: OK", file.display());
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    println!("{}: {}", file.display(), one_line(&e));
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        Command::Certs {
            command: CertsCommand::Init { sites, out, days },
        } => {
            let w = meridian_server::certs::init(&sites, &out, days)?;
            let ca = w.ca_cert.display();
            if w.ca_created {
                println!(
                    "created the CA: {ca} (its key, ca.key, signs new sites: keep it offline)"
                );
            } else {
                println!("signed by the existing CA: {ca}");
            }
            for (site, cert, key) in &w.sites {
                println!(
                    "site {site}: --site {site} --sync-tls-cert {} --sync-tls-key {} --sync-tls-ca {ca}",
                    cert.display(),
                    key.display()
                );
            }
            Ok(ExitCode::SUCCESS)
        }
        Command::Admin {
            sites,
            tls,
            command,
        } => {
            let tls = tls.options();
            let args: Vec<&str> = match &command {
                AdminCommand::Peers => vec!["CRDT.PEERS"],
                AdminCommand::AddPeer { site, addr } => vec!["CRDT.ADDPEER", site, addr],
                AdminCommand::RemovePeer { site } => vec!["CRDT.REMOVEPEER", site],
            };
            let mut failed = false;
            for s in &sites {
                match meridian_server::admin::call_with(s, &args, tls.as_ref()) {
                    Ok(r) => {
                        failed |= r.is_error();
                        println!("{s}: {}", r.to_line());
                    }
                    Err(e) => {
                        failed = true;
                        println!("{s}: {e}");
                    }
                }
            }
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::ImportRdb {
            file,
            to,
            user,
            password,
            replace,
            tls,
        } => {
            let opts = meridian_server::rdb_import::ImportOptions {
                to,
                user,
                password,
                tls: tls.options(),
                replace,
            };
            let r = meridian_server::rdb_import::import_file(&file, &opts)?;
            for e in &r.errors {
                println!("refused: {e}");
            }
            println!(
                "{} keys restored, {} refused, {} expired (left out), {} empty (left out), {} function libraries",
                r.keys, r.failed, r.expired, r.empty, r.libraries
            );
            Ok(if r.failed > 0 {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::CheckLog { file, fix } => {
            let report = meridian_server::persist::check::check_file(&file, fix);
            print!("{}", report.text);
            Ok(if report.ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
    }
}

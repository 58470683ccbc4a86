//! The `meridian` binary: `meridian server [flags]` runs a server.

use std::path::PathBuf;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use meridian_server::config::Config;

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
        #[arg(long)]
        fix: bool,
    },
}

/// Each flag overrides the TOML key of the same name.
#[derive(Args, Debug, Default)]
struct ServerFlags {
    /// TOML configuration file.
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long)]
    bind: Option<String>,
    #[arg(long)]
    port: Option<u16>,
    #[arg(long)]
    dir: Option<PathBuf>,
    #[arg(long)]
    databases: Option<u32>,
    #[arg(long)]
    site: Option<String>,
    #[arg(long)]
    proto_max_bulk_len: Option<u64>,
    #[arg(long)]
    client_query_buffer_limit: Option<u64>,
    #[arg(long)]
    maxclients: Option<u32>,
    /// "class hard soft seconds" groups, applied over the file's value.
    #[arg(long)]
    client_output_buffer_limit: Option<String>,
    #[arg(long)]
    timeout: Option<u64>,
    #[arg(long)]
    requirepass: Option<String>,
    #[arg(long, value_parser = parse_yes_no)]
    protected_mode: Option<bool>,
    #[arg(long)]
    aclfile: Option<String>,
    #[arg(long)]
    acllog_max_len: Option<u64>,
    #[arg(long)]
    acl_pubsub_default: Option<String>,
    #[arg(long)]
    hz: Option<u32>,
    #[arg(long, allow_negative_numbers = true)]
    slowlog_log_slower_than: Option<i64>,
    #[arg(long)]
    slowlog_max_len: Option<u64>,
    #[arg(long)]
    latency_monitor_threshold: Option<u64>,
    #[arg(long)]
    backlog_bytes_max: Option<u64>,
    #[arg(long)]
    deployment_id: Option<String>,
    #[arg(long)]
    sync_port: Option<u16>,
    #[arg(long)]
    sync_bind: Option<String>,
    /// A peer site, `id=ip:port` (repeat for each peer).
    #[arg(long = "peer")]
    peer: Vec<String>,
    #[arg(long)]
    sync_tls_cert: Option<PathBuf>,
    #[arg(long)]
    sync_tls_key: Option<PathBuf>,
    #[arg(long)]
    sync_tls_ca: Option<PathBuf>,
    #[arg(long)]
    sync_compression: Option<String>,
    #[arg(long)]
    sync_frame_bytes_max: Option<u64>,
    #[arg(long)]
    sync_quarantine_ms: Option<u64>,
    #[arg(long)]
    sync_clock_skew_ms_max: Option<u64>,
    /// yes or no.
    #[arg(long, value_parser = parse_yes_no)]
    appendonly: Option<bool>,
    /// always, everysec or no.
    #[arg(long)]
    appendfsync: Option<String>,
    /// Automatic snapshots: "seconds changes" pairs ("" for none).
    #[arg(long)]
    save: Option<String>,
    #[arg(long)]
    auto_aof_rewrite_percentage: Option<u64>,
    #[arg(long)]
    auto_aof_rewrite_min_size: Option<u64>,
    #[arg(long)]
    log_segment_bytes_max: Option<u64>,
    #[arg(long)]
    backlog_disk_bytes_max: Option<u64>,
    #[arg(long, value_parser = parse_yes_no)]
    debug_fsync_watermark: Option<bool>,
    #[arg(long)]
    log_level: Option<String>,
    #[arg(long, allow_negative_numbers = true)]
    debug_clock_offset_ms: Option<i64>,
    #[arg(long)]
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
            dir,
            databases,
            site,
            proto_max_bulk_len,
            client_query_buffer_limit,
            maxclients,
            timeout,
            requirepass,
            protected_mode,
            aclfile,
            acllog_max_len,
            acl_pubsub_default,
            hz,
            slowlog_log_slower_than,
            slowlog_max_len,
            latency_monitor_threshold,
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
            log_level,
            debug_clock_offset_ms,
            debug_boot_id
        );
        if !self.peer.is_empty() {
            c.peer = self.peer;
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

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Server(flags) => {
            let config = flags.resolve().context("invalid configuration")?;
            let filter = tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.log_level));
            tracing_subscriber::fmt()
                .with_env_filter(filter)
                .with_target(false)
                .init();
            meridian_server::server::run(config).context("server failed")?;
            Ok(())
        }
        Command::CheckLog { file, fix } => {
            let report = meridian_server::persist::check::check_file(&file, fix);
            print!("{}", report.text);
            if !report.ok {
                std::process::exit(1);
            }
            Ok(())
        }
    }
}

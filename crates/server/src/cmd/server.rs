//! Server commands: INFO CONFIG TIME DBSIZE FLUSHDB FLUSHALL SLOWLOG LATENCY DEBUG MONITOR
//! SHUTDOWN.
//!
//! Texts and reply shapes follow Redis 7.0.15 (`server.c` genRedisInfoString, `config.c`,
//! `slowlog.c`, `latency.c`, `debug.c`). INFO reports only what is true for Meridian: fields
//! of features Meridian lacks (persistence, replication in Redis's sense) carry the values
//! Redis shows when the feature is off.

use std::fmt::Write as _;

use super::args::{eq_ic, parse_f64, parse_i64};
use super::{Ctx, Handler};
use crate::error::CmdError;
use crate::front::Front;
use crate::node::lock;
use crate::shard::Shard;

pub const HANDLERS: &[(&str, Handler)] = &[
    ("info", info),
    ("config|get", config_get),
    ("config|set", config_set),
    ("config|resetstat", config_resetstat),
    ("config|rewrite", config_rewrite),
    ("config|help", config_help),
    ("time", time),
    ("dbsize", dbsize),
    ("flushdb", flushdb),
    ("flushall", flushall),
    ("slowlog|get", slowlog_get),
    ("slowlog|len", slowlog_len),
    ("slowlog|reset", slowlog_reset),
    ("slowlog|help", slowlog_help),
    ("latency|latest", latency_latest),
    ("latency|history", latency_history),
    ("latency|reset", latency_reset),
    ("latency|help", latency_help),
    ("debug", debug),
    ("monitor", monitor),
    ("shutdown", shutdown),
    ("save", save),
    ("bgsave", bgsave),
    ("bgrewriteaof", bgrewriteaof),
    ("lastsave", lastsave),
];

// ---------------------------------------------------------------------------------------
// Help texts (Redis's `addReplyHelp`: a header, the lines, then HELP).

pub(crate) fn reply_help(ctx: &mut Ctx<'_>, cmd: &str, lines: &[&str]) {
    ctx.out.array(lines.len() + 3);
    ctx.out.simple(&format!(
        "{cmd} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    ));
    for l in lines {
        ctx.out.simple(l);
    }
    ctx.out.simple("HELP");
    ctx.out.simple("    Prints this help.");
}

/// Redis's `addReplySubcommandSyntaxError`.
pub(crate) fn subcommand_syntax_error(argv: &[&[u8]]) -> CmdError {
    let cmd =
        String::from_utf8_lossy(argv.first().copied().unwrap_or_default()).to_ascii_uppercase();
    let sub = argv.get(1).copied().unwrap_or_default();
    let sub = String::from_utf8_lossy(sub.get(..sub.len().min(128)).unwrap_or(sub)).into_owned();
    CmdError::Err(format!(
        "unknown subcommand or wrong number of arguments for '{sub}'. Try {cmd} HELP."
    ))
}

// ---------------------------------------------------------------------------------------
// INFO

/// Sections INFO prints with no argument or "default" (Redis's, then Meridian's `crdt`).
const DEFAULT_SECTIONS: &[&str] = &[
    "server",
    "clients",
    "memory",
    "persistence",
    "stats",
    "replication",
    "cpu",
    "module_list",
    "errorstats",
    "cluster",
    "keyspace",
    "crdt",
];

/// Which sections a list of INFO arguments asks for (Redis 7.0's `genInfoSectionDict`).
struct Sections {
    all: bool,
    names: Vec<String>,
}

impl Sections {
    fn parse(args: &[&[u8]]) -> Sections {
        let mut s = Sections {
            all: false,
            names: Vec::new(),
        };
        if args.is_empty() {
            s.names = DEFAULT_SECTIONS.iter().map(|n| n.to_string()).collect();
            return s;
        }
        for a in args {
            if eq_ic(a, "all") || eq_ic(a, "everything") {
                s.all = true;
            } else if eq_ic(a, "default") {
                s.names
                    .extend(DEFAULT_SECTIONS.iter().map(|n| n.to_string()));
            } else {
                s.names
                    .push(String::from_utf8_lossy(a).to_ascii_lowercase());
            }
        }
        s
    }

    fn has(&self, name: &str) -> bool {
        self.all || self.names.iter().any(|n| n == name)
    }
}

/// INFO [section ...]: a bulk string in RESP2, a verbatim "txt" string in RESP3.
fn info(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let sections = Sections::parse(argv.get(1..).unwrap_or_default());
    let text = info_string(ctx.shard, ctx.front, &sections, ctx.now_ms);
    ctx.out.verbatim(b"txt", text.as_bytes());
    Ok(())
}

/// Starts a section: "\r\n" between sections, then "# Title\r\n".
fn section(out: &mut String, count: &mut usize, title: &str) {
    if *count > 0 {
        out.push_str("\r\n");
    }
    *count += 1;
    out.push_str("# ");
    out.push_str(title);
    out.push_str("\r\n");
}

/// Appends "key:value\r\n".
fn field(out: &mut String, key: &str, value: impl std::fmt::Display) {
    let _ = write!(out, "{key}:{value}\r\n");
}

/// This thread's INFO: its shard's keyspace, persistence and replication, its front's
/// clients and command counters (a process with several shards merges every thread's:
/// `info_merge`).
fn info_string(shard: &mut Shard, front: &Front, s: &Sections, now_ms: u64) -> String {
    let mut out = String::with_capacity(4096);
    let mut n = 0usize;
    if s.has("server") {
        section(&mut out, &mut n, "Server");
        info_server(shard, front, &mut out, now_ms);
    }
    if s.has("clients") {
        section(&mut out, &mut n, "Clients");
        info_clients(shard, front, &mut out);
    }
    if s.has("memory") {
        section(&mut out, &mut n, "Memory");
        info_memory(shard, &mut out);
    }
    if s.has("persistence") {
        section(&mut out, &mut n, "Persistence");
        info_persistence(shard, &mut out);
    }
    if s.has("stats") {
        section(&mut out, &mut n, "Stats");
        info_stats(shard, front, &mut out);
    }
    if s.has("replication") {
        section(&mut out, &mut n, "Replication");
        info_replication(shard, front, &mut out);
    }
    if s.has("cpu") {
        section(&mut out, &mut n, "CPU");
        info_cpu(&mut out);
    }
    if s.has("module_list") || s.has("modules") {
        section(&mut out, &mut n, "Modules");
    }
    if s.has("commandstats") {
        section(&mut out, &mut n, "Commandstats");
        for spec in &front.table.specs {
            let Some(st) = front.stats.commands.get(spec.idx) else {
                continue;
            };
            if st.calls == 0 && st.failed_calls == 0 && st.rejected_calls == 0 {
                continue;
            }
            let per_call = if st.calls == 0 {
                0.0
            } else {
                st.usec as f64 / st.calls as f64
            };
            let _ = write!(
                out,
                "cmdstat_{}:calls={},usec={},usec_per_call={:.2},rejected_calls={},failed_calls={}\r\n",
                spec.meta.name, st.calls, st.usec, per_call, st.rejected_calls, st.failed_calls
            );
        }
    }
    if s.has("errorstats") {
        section(&mut out, &mut n, "Errorstats");
        for (code, count) in &front.stats.errors {
            let _ = write!(out, "errorstat_{code}:count={count}\r\n");
        }
    }
    if s.has("latencystats") {
        section(&mut out, &mut n, "Latencystats");
        super::latency::info_latencystats(shard, front, &mut out);
    }
    if s.has("cluster") {
        section(&mut out, &mut n, "Cluster");
        field(
            &mut out,
            "cluster_enabled",
            u8::from(front.node.cluster.is_some()),
        );
    }
    if s.has("keyspace") {
        section(&mut out, &mut n, "Keyspace");
        for (i, db) in shard.dbs.iter().enumerate() {
            if !db.is_empty() {
                let _ = write!(
                    out,
                    "db{i}:keys={},expires={},avg_ttl={}\r\n",
                    db.len(),
                    db.expires,
                    db.avg_ttl_ms
                );
            }
        }
    }
    if s.has("crdt") {
        section(&mut out, &mut n, "CRDT");
        info_crdt(shard, &mut out);
    }
    out
}

fn info_server(shard: &Shard, front: &Front, out: &mut String, now_ms: u64) {
    let uptime_s = now_ms.saturating_sub(front.node.started_ms) / 1000;
    let os = format!(
        "{} {} {}",
        read_trimmed("/proc/sys/kernel/ostype").unwrap_or_else(|| "Linux".to_string()),
        read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_default(),
        std::env::consts::ARCH
    );
    let exe = std::env::current_exe()
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let wall_us = clock_us(shard);
    field(out, "redis_version", crate::server::REDIS_VERSION);
    field(out, "redis_git_sha1", "00000000");
    field(out, "redis_git_dirty", 0);
    field(out, "redis_build_id", "0");
    field(
        out,
        "redis_mode",
        if front.node.cluster.is_some() {
            "cluster"
        } else {
            "standalone"
        },
    );
    field(out, "meridian_version", env!("CARGO_PKG_VERSION"));
    field(out, "os", os);
    field(out, "arch_bits", usize::BITS);
    field(out, "monotonic_clock", "POSIX clock_gettime");
    field(out, "multiplexing_api", "epoll");
    field(out, "process_id", std::process::id());
    field(out, "process_supervised", "no");
    field(out, "run_id", &front.node.run_id);
    field(out, "tcp_port", shard.config.port);
    field(out, "server_time_usec", wall_us);
    field(out, "uptime_in_seconds", uptime_s);
    field(out, "uptime_in_days", uptime_s / 86400);
    field(out, "hz", shard.config.hz);
    field(out, "configured_hz", shard.config.hz);
    field(out, "lru_clock", crate::keyspace::lru_clock(now_ms));
    field(out, "executable", exe);
    field(
        out,
        "config_file",
        shard
            .config
            .config_file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
    );
    field(out, "io_threads_active", 0);
    // Meridian's own: the shard threads and where they run.
    field(out, "shards", front.node.local);
    field(
        out,
        "shard_placement",
        crate::server::describe_placement(front.node.first, &front.node.placement),
    );
    if let Some(site) = &front.node.site {
        field(
            out,
            "site_node",
            site.this().map_or("", |n| n.name.as_str()),
        );
        field(out, "site_nodes", site.topology.nodes.len());
        field(out, "site_shards", front.node.shards);
        field(out, "topology_epoch", site.topology.epoch);
    }
    field(out, "numa_topology", &front.node.numa);
}

fn info_clients(shard: &Shard, front: &Front, out: &mut String) {
    let max_in = front
        .clients
        .values()
        .map(|c| c.qbuf_bytes.get())
        .max()
        .unwrap_or(0);
    let max_out = front
        .clients
        .values()
        .map(|c| c.obuf_bytes.get())
        .max()
        .unwrap_or(0);
    field(out, "connected_clients", front.clients.len());
    field(out, "cluster_connections", 0);
    field(out, "maxclients", shard.config.maxclients);
    field(out, "client_recent_max_input_buffer", max_in);
    field(out, "client_recent_max_output_buffer", max_out);
    field(out, "blocked_clients", shard.blocked_count());
    field(out, "tracking_clients", lock(&front.node.trackers).len());
    field(out, "clients_in_timeout_table", 0);
}

/// Memory figures: the allocator's (jemalloc) and the process's.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryUse {
    /// What the program holds (`alloc::allocated_live`): INFO's `used_memory`.
    pub allocated: u64,
    pub active: u64,
    pub resident: u64,
    pub rss: u64,
}

/// Reads jemalloc's statistics (after advancing its epoch) and the process RSS. Where jemalloc
/// is not the allocator (unit tests), its counters are near zero and `used_memory` falls back
/// to the RSS.
impl MemoryUse {
    /// INFO's `used_memory`: what the program holds, or the RSS where jemalloc is not the
    /// allocator.
    pub fn used(&self) -> u64 {
        if self.allocated > 0 {
            self.allocated
        } else {
            self.rss
        }
    }
}

pub fn memory_use() -> MemoryUse {
    let _ = tikv_jemalloc_ctl::epoch::advance();
    let read = |r: Result<usize, tikv_jemalloc_ctl::Error>| r.map(|v| v as u64).unwrap_or(0);
    MemoryUse {
        allocated: crate::alloc::allocated_live(),
        active: read(tikv_jemalloc_ctl::stats::active::read()),
        resident: read(tikv_jemalloc_ctl::stats::resident::read()),
        rss: process_rss(),
    }
}

/// Resident set size from /proc/self/statm (pages × 4096 on every platform Meridian runs on).
fn process_rss() -> u64 {
    read_trimmed("/proc/self/statm")
        .and_then(|s| {
            s.split_whitespace()
                .nth(1)
                .and_then(|v| v.parse::<u64>().ok())
        })
        .map_or(0, |pages| pages * 4096)
}

fn total_system_memory() -> u64 {
    let text = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Redis's `bytesToHuman`.
pub fn bytes_to_human(n: u64) -> String {
    const K: u64 = 1024;
    let d = n as f64;
    if n < K {
        format!("{n}B")
    } else if n < K * K {
        format!("{:.2}K", d / K as f64)
    } else if n < K * K * K {
        format!("{:.2}M", d / (K * K) as f64)
    } else if n < K * K * K * K {
        format!("{:.2}G", d / (K * K * K) as f64)
    } else if n < K * K * K * K * K {
        format!("{:.2}T", d / (K * K * K * K) as f64)
    } else if n < K * K * K * K * K * K {
        format!("{:.2}P", d / (K * K * K * K * K) as f64)
    } else {
        format!("{n}B")
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    if b == 0 { 0.0 } else { a as f64 / b as f64 }
}

fn info_memory(shard: &mut Shard, out: &mut String) {
    let m = memory_use();
    let used = m.used();
    shard.stats.note_memory(used);
    let peak = shard.stats.used_memory_peak.max(used);
    let total = total_system_memory();
    let version = tikv_jemalloc_ctl::version::read().unwrap_or("");
    let version = version.split('-').next().unwrap_or("");
    field(out, "used_memory", used);
    field(out, "used_memory_human", bytes_to_human(used));
    field(out, "used_memory_rss", m.rss);
    field(out, "used_memory_rss_human", bytes_to_human(m.rss));
    field(out, "used_memory_peak", peak);
    field(out, "used_memory_peak_human", bytes_to_human(peak));
    field(
        out,
        "used_memory_peak_perc",
        format!("{:.2}%", ratio(used, peak) * 100.0),
    );
    field(out, "allocator_allocated", m.allocated);
    field(out, "allocator_active", m.active);
    field(out, "allocator_resident", m.resident);
    field(out, "total_system_memory", total);
    field(out, "total_system_memory_human", bytes_to_human(total));
    let (vm_eval, vm_functions) = shard.scripting.vm_memory();
    let (scripts_bytes, functions_bytes) = shard.scripting.code_memory();
    field(out, "used_memory_lua", vm_eval);
    field(out, "used_memory_vm_eval", vm_eval);
    field(out, "used_memory_lua_human", bytes_to_human(vm_eval as u64));
    field(out, "used_memory_scripts_eval", scripts_bytes);
    field(
        out,
        "number_of_cached_scripts",
        shard.scripting.scripts.len(),
    );
    field(
        out,
        "number_of_functions",
        shard.scripting.libraries.function_count(),
    );
    field(out, "used_memory_vm_functions", vm_functions);
    field(out, "used_memory_vm_total", vm_eval + vm_functions);
    field(
        out,
        "used_memory_vm_total_human",
        bytes_to_human((vm_eval + vm_functions) as u64),
    );
    field(out, "used_memory_functions", functions_bytes);
    field(out, "used_memory_scripts", scripts_bytes + functions_bytes);
    field(
        out,
        "used_memory_scripts_human",
        bytes_to_human((scripts_bytes + functions_bytes) as u64),
    );
    field(out, "maxmemory", shard.config.maxmemory);
    field(
        out,
        "maxmemory_human",
        bytes_to_human(shard.config.maxmemory),
    );
    field(out, "maxmemory_policy", &shard.config.maxmemory_policy);
    field(
        out,
        "allocator_frag_ratio",
        format!("{:.2}", ratio(m.active, m.allocated)),
    );
    field(
        out,
        "allocator_frag_bytes",
        m.active.saturating_sub(m.allocated),
    );
    field(
        out,
        "allocator_rss_ratio",
        format!("{:.2}", ratio(m.resident, m.active)),
    );
    field(
        out,
        "allocator_rss_bytes",
        m.resident.saturating_sub(m.active),
    );
    field(
        out,
        "rss_overhead_ratio",
        format!("{:.2}", ratio(m.rss, m.resident)),
    );
    field(out, "rss_overhead_bytes", m.rss.saturating_sub(m.resident));
    field(
        out,
        "mem_fragmentation_ratio",
        format!("{:.2}", ratio(m.rss, used)),
    );
    field(out, "mem_fragmentation_bytes", m.rss as i64 - used as i64);
    // The op logs of every shard of the process (the replication backlog) and background
    // snapshots, as Redis leaves out its replication backlog and AOF buffers. Reading used
    // memory publishes this shard's share.
    let _ = shard.used_memory_counted(shard.now_ms());
    field(
        out,
        "mem_not_counted_for_evict",
        shard.evict.process.not_counted(),
    );
    field(
        out,
        "mem_allocator",
        if version.is_empty() {
            "jemalloc".to_string()
        } else {
            format!("jemalloc-{version}")
        },
    );
    field(out, "active_defrag_running", 0);
    field(out, "lazyfree_pending_objects", shard.lazyfree.pending());
    field(out, "lazyfreed_objects", shard.lazyfree.freed());
}

fn info_persistence(shard: &Shard, out: &mut String) {
    let p = &shard.persist;
    let st = &p.stats;
    let job = p.job.as_ref();
    let bgsave = job.is_some_and(|j| j.kind == crate::persist::job::JobKind::Bgsave);
    let rewrite = job.is_some_and(|j| j.kind == crate::persist::job::JobKind::Rewrite);
    let running_s = job.map_or(-1, |j| j.started.elapsed().as_secs() as i64);
    field(out, "loading", 0);
    field(out, "async_loading", 0);
    field(out, "current_cow_peak", 0);
    field(out, "current_cow_size", 0);
    field(out, "current_cow_size_age", 0);
    field(out, "current_fork_perc", "0.00");
    field(out, "current_save_keys_processed", 0);
    field(out, "current_save_keys_total", 0);
    field(
        out,
        "rdb_changes_since_last_save",
        shard.stats.dirty.saturating_sub(st.dirty_at_save),
    );
    field(out, "rdb_bgsave_in_progress", u8::from(bgsave));
    field(out, "rdb_last_save_time", st.last_save_s);
    field(
        out,
        "rdb_last_bgsave_status",
        if st.last_save_ok { "ok" } else { "err" },
    );
    field(out, "rdb_last_bgsave_time_sec", st.last_save_secs);
    field(
        out,
        "rdb_current_bgsave_time_sec",
        if bgsave { running_s } else { -1 },
    );
    field(out, "rdb_saves", st.saves);
    field(out, "rdb_last_cow_size", 0);
    field(out, "rdb_last_load_keys_expired", 0);
    field(out, "rdb_last_load_keys_loaded", st.loaded_keys);
    field(out, "aof_enabled", u8::from(p.appendonly));
    field(out, "aof_rewrite_in_progress", u8::from(rewrite));
    field(out, "aof_rewrite_scheduled", u8::from(p.scheduled));
    field(out, "aof_last_rewrite_time_sec", st.last_rewrite_secs);
    field(
        out,
        "aof_current_rewrite_time_sec",
        if rewrite { running_s } else { -1 },
    );
    field(
        out,
        "aof_last_bgrewrite_status",
        if st.last_rewrite_ok { "ok" } else { "err" },
    );
    field(out, "aof_rewrites", st.rewrites);
    field(
        out,
        "aof_rewrites_consecutive_failures",
        st.rewrite_failures_in_a_row,
    );
    field(
        out,
        "aof_last_write_status",
        if p.refusal().is_some() { "err" } else { "ok" },
    );
    field(out, "aof_last_cow_size", 0);
    field(out, "module_fork_in_progress", 0);
    field(out, "module_fork_last_cow_size", 0);
    if let Some(w) = &p.writer {
        let log = p.log_bytes();
        field(out, "aof_current_size", log);
        field(out, "aof_base_size", st.snapshot_bytes);
        field(out, "aof_pending_rewrite", u8::from(p.scheduled));
        field(out, "aof_buffer_length", 0);
        field(out, "aof_pending_bio_fsync", 0);
        field(out, "aof_delayed_fsync", 0);
        let durable = w.durable_pos.load(std::sync::atomic::Ordering::Acquire);
        // Meridian's own fields: where the log stands.
        field(out, "aof_fsync", p.fsync.name());
        field(out, "aof_position", p.next_pos);
        field(out, "aof_durable_position", durable);
        field(out, "aof_segments", w.state().segments.len());
        {
            let ws = w.state();
            field(out, "aof_fsyncs", ws.fsyncs);
            // Over the last FSYNC_SAMPLES_MAX fsyncs: with peers, the lag's floor.
            field(out, "aof_fsync_p50_us", ws.fsync_quantile_us(0.5));
            field(out, "aof_fsync_p99_us", ws.fsync_quantile_us(0.99));
            field(out, "aof_fsync_max_us", ws.fsync_us_max);
        }
        field(out, "aof_snapshot_position", st.snapshot_pos);
        field(out, "aof_load_records", st.loaded_records);
        field(out, "aof_load_time_ms", st.load_ms);
    }
}

fn info_stats(shard: &Shard, front: &Front, out: &mut String) {
    let st = &front.stats;
    let keys = &shard.stats;
    field(
        out,
        "total_connections_received",
        st.total_connections_received,
    );
    field(out, "total_commands_processed", st.total_commands_processed);
    field(out, "instantaneous_ops_per_sec", st.ops_sample.per_sec());
    field(out, "total_net_input_bytes", st.net_input_bytes);
    field(out, "total_net_output_bytes", st.net_output_bytes);
    field(out, "total_net_repl_input_bytes", 0);
    field(out, "total_net_repl_output_bytes", 0);
    // A connection refused by the busy-script side path is counted in the shard's stats (that
    // path holds the shard, not the thread's front).
    field(
        out,
        "rejected_connections",
        st.rejected_connections + keys.rejected_connections,
    );
    field(out, "sync_full", 0);
    field(out, "sync_partial_ok", 0);
    field(out, "sync_partial_err", 0);
    field(out, "expired_keys", keys.expired_keys);
    field(
        out,
        "expired_stale_perc",
        format!("{:.2}", keys.expired_stale_perc),
    );
    field(
        out,
        "expire_cycle_cpu_milliseconds",
        keys.expire_cycle_cpu_milliseconds,
    );
    field(out, "evicted_keys", keys.evicted_keys);
    field(out, "evicted_clients", 0);
    field(out, "keyspace_hits", keys.keyspace_hits);
    field(out, "keyspace_misses", keys.keyspace_misses);
    {
        let ps = lock(&front.node.pubsub);
        field(out, "pubsub_channels", ps.channel_count());
        field(out, "pubsub_patterns", ps.pattern_count());
        field(out, "pubsubshard_channels", ps.shard_channel_count());
    }
    field(out, "latest_fork_usec", 0);
    field(out, "total_forks", 0);
    // MIGRATE opens a connection per command and keeps none (cmd/dump.rs).
    field(out, "migrate_cached_sockets", 0);
    // This shard's tracking table (summed over shards by `info_merge`); prefixes are the
    // process's.
    field(out, "tracking_total_keys", shard.tracking.keys());
    field(out, "tracking_total_items", shard.tracking.items());
    field(
        out,
        "tracking_total_prefixes",
        shard.tracking.shared.prefixes(),
    );
    field(
        out,
        "total_error_replies",
        st.total_error_replies + keys.total_error_replies,
    );
    field(
        out,
        "dump_payload_sanitizations",
        keys.dump_payload_sanitizations,
    );
}

fn info_replication(shard: &Shard, front: &Front, out: &mut String) {
    field(out, "role", "master");
    field(out, "connected_slaves", 0);
    field(out, "master_failover_state", "no-failover");
    field(out, "master_replid", &front.node.run_id);
    field(
        out,
        "master_replid2",
        "0000000000000000000000000000000000000000",
    );
    field(out, "master_repl_offset", 0);
    field(out, "second_repl_offset", -1);
    field(out, "repl_backlog_active", 0);
    field(out, "repl_backlog_size", shard.config.backlog_bytes_max);
    field(out, "repl_backlog_first_byte_offset", 0);
    field(out, "repl_backlog_histlen", 0);
}

/// Clock ticks per second of /proc times (USER_HZ, 100 on Linux's user-visible interfaces).
pub(crate) const USER_HZ: u64 = 100;

/// (utime, stime, cutime, cstime) in ticks from a /proc `stat` file.
pub(crate) fn proc_times(path: &str) -> Option<[u64; 4]> {
    let text = std::fs::read_to_string(path).ok()?;
    // Fields after the command name, which is in parentheses and may hold spaces.
    let rest = text.get(text.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15, cutime 16, cstime 17.
    let get = |i: usize| {
        f.get(i)
            .and_then(|v| v.parse::<i64>().ok())
            .map(|v| v.max(0) as u64)
    };
    Some([get(11)?, get(12)?, get(13)?, get(14)?])
}

/// "%ld.%06ld" seconds of `ticks`.
fn cpu_secs(ticks: u64) -> String {
    let us = ticks * (1_000_000 / USER_HZ);
    format!("{}.{:06}", us / 1_000_000, us % 1_000_000)
}

fn info_cpu(out: &mut String) {
    let p = proc_times("/proc/self/stat").unwrap_or_default();
    let t = proc_times("/proc/thread-self/stat").unwrap_or_default();
    field(out, "used_cpu_sys", cpu_secs(p[1]));
    field(out, "used_cpu_user", cpu_secs(p[0]));
    field(out, "used_cpu_sys_children", cpu_secs(p[3]));
    field(out, "used_cpu_user_children", cpu_secs(p[2]));
    field(out, "used_cpu_sys_main_thread", cpu_secs(t[1]));
    field(out, "used_cpu_user_main_thread", cpu_secs(t[0]));
}

fn info_crdt(shard: &Shard, out: &mut String) {
    shard.info_crdt(out);
}

fn read_trimmed(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

// ---------------------------------------------------------------------------------------
// CONFIG

pub use crate::config::params::parse_memory;
use crate::config::params::{self, Access, Param};

/// CONFIG GET pattern [pattern ...]: a map of matching parameters (Redis 7.0). An exact name
/// answers under the name as given, hidden parameters included; a pattern matches every
/// name and alias of the visible ones.
fn config_get(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let mut matches: Vec<(String, &'static Param)> = Vec::new();
    let seen =
        |m: &[(String, &Param)], name: &str| m.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    for pat in argv.get(2..).unwrap_or_default() {
        if !pat.iter().any(|c| matches!(c, b'[' | b'*' | b'?')) {
            let name = String::from_utf8_lossy(pat).into_owned();
            if let Some(p) = params::find(pat) {
                if !seen(&matches, &name) {
                    matches.push((name, p));
                }
            }
            continue;
        }
        for p in params::PARAMS.iter().filter(|p| !p.hidden) {
            for name in std::iter::once(p.name).chain(p.alias) {
                if !seen(&matches, name) && crate::glob::matches(pat, name.as_bytes(), true) {
                    matches.push((name.to_string(), p));
                }
            }
        }
    }
    ctx.out.map(matches.len());
    for (name, p) in &matches {
        ctx.out.bulk(name.as_bytes());
        ctx.out.bulk(p.get(&ctx.shard.config).as_bytes());
    }
    Ok(())
}

/// CONFIG SET parameter value [parameter value ...]: all or nothing (Redis 7.0). Every
/// parameter is checked and every value parsed before any is applied; a parameter with
/// `Access::Fixed` accepts only its current value.
fn config_set(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if argv.len() < 4 || argv.len() % 2 == 1 {
        return Err(CmdError::Syntax);
    }
    let pairs: Vec<(&[u8], &[u8])> = argv
        .get(2..)
        .unwrap_or_default()
        .chunks_exact(2)
        .map(|c| {
            (
                c.first().copied().unwrap_or_default(),
                c.get(1).copied().unwrap_or_default(),
            )
        })
        .collect();
    let failed = |arg: &[u8], why: &str| {
        CmdError::Err(format!(
            "CONFIG SET failed (possibly related to argument '{}') - {why}",
            String::from_utf8_lossy(arg)
        ))
    };
    // First pass, in Redis's order: the first unknown, immutable, protected or duplicate
    // parameter is the error.
    let mut unknown: Option<&[u8]> = None;
    let mut first_err: Option<CmdError> = None;
    let mut found: Vec<(&'static Param, &[u8], &[u8])> = Vec::new();
    for &(name, value) in &pairs {
        let Some(p) = params::find(name) else {
            if unknown.is_none() && first_err.is_none() {
                unknown = Some(name);
            }
            continue;
        };
        if unknown.is_some() || first_err.is_some() {
            continue;
        }
        if p.access == Access::Immutable {
            first_err = Some(failed(name, "can't set immutable config"));
        } else if p.access == Access::Protected {
            first_err = Some(failed(name, "can't set protected config"));
        } else if found.iter().any(|(q, _, _)| std::ptr::eq(*q, p)) {
            first_err = Some(failed(name, "duplicate parameter"));
        }
        found.push((p, name, value));
    }
    if let Some(name) = unknown {
        return Err(CmdError::Err(format!(
            "Unknown option or number of arguments for CONFIG SET - '{}'",
            String::from_utf8_lossy(name)
        )));
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    // Second pass: parse every value; nothing is applied unless all are valid.
    let mut parsed: Vec<(&'static Param, String)> = Vec::with_capacity(found.len());
    for (p, name, value) in found {
        let text = String::from_utf8_lossy(value);
        let v = p.parse(&text).map_err(|why| failed(name, &why))?;
        if p.access == Access::Fixed && v != p.get(&ctx.shard.config) {
            return Err(failed(name, "can't set immutable config"));
        }
        parsed.push((p, v));
    }
    // A changed `tls-*` file or setting reloads the TLS port's configuration now, as Redis's
    // `applyTlsCfg` does; when it cannot be built nothing is applied.
    if let Some(tls) = &ctx.front.node.client_tls {
        if let Some((p, _)) = parsed
            .iter()
            .find(|(p, _)| crate::tls::PARAMS.contains(&p.name))
        {
            let mut next = ctx.shard.config.clone();
            for (q, v) in &parsed {
                q.set(&mut next, v);
            }
            if let Err(e) = tls.reload(&next) {
                // CONFIG SET runs on the client's shard first, and on the others only once it
                // succeeded there (`Conn::on_shards_but`): the shard that fails says why.
                tracing::warn!(error = %e, "CONFIG SET: TLS configuration not updated");
                return Err(failed(
                    p.name.as_bytes(),
                    "Unable to update TLS configuration. Check server logs.",
                ));
            }
        }
    }
    // A new `port` is bound now (Redis's `updatePort`); when it cannot be, nothing is
    // applied. The shards after the first find it bound already.
    if let Some((p, v)) = parsed.iter().find(|(p, _)| p.name == "port") {
        let port = v.parse::<u16>().unwrap_or(0);
        if let Err(e) =
            crate::server::switch_client_port(&ctx.front.node, &ctx.shard.config.bind, port)
        {
            tracing::warn!(error = %e, port, "CONFIG SET port: not listening on the new port");
            return Err(failed(
                p.name.as_bytes(),
                "Unable to listen on this port. Check server logs.",
            ));
        }
    }
    // A changed `appendonly` starts, turns or stops the log now (Redis's `updateAppendonly`);
    // when it cannot, nothing is applied. `save` and `appendfsync` set in the same command, in
    // any order, decide whether an `appendonly no` log stays for the policy's snapshots and
    // how the AOF is fsynced.
    if let Some((p, v)) = parsed.iter().find(|(p, _)| p.name == "appendonly") {
        let on = v == "yes";
        if on != ctx.shard.config.appendonly {
            // The value `name` has once the command applied.
            let after = |name: &str, now: &str| -> String {
                parsed
                    .iter()
                    .find(|(q, _)| q.name == name)
                    .map_or_else(|| now.to_string(), |(_, v)| v.clone())
            };
            let policy = !after("save", &ctx.shard.config.save).trim().is_empty();
            let appendfsync = after("appendfsync", &ctx.shard.config.appendfsync);
            if let Err(e) = ctx.shard.set_appendonly(on, &appendfsync, policy) {
                tracing::warn!(error = %e, appendonly = on, "CONFIG SET appendonly: the log did not change");
                let why = if on {
                    "Unable to turn on AOF. Check server logs."
                } else {
                    "Unable to turn off AOF. Check server logs."
                };
                return Err(failed(p.name.as_bytes(), why));
            }
        }
    }
    for (p, v) in &parsed {
        p.set(&mut ctx.shard.config, v);
        config_applied(ctx.shard, ctx.front, p.name);
    }
    ctx.out.ok();
    Ok(())
}

/// What a changed parameter does beyond its `Config` field (the rest read the field where
/// they act).
fn config_applied(shard: &mut Shard, front: &Front, name: &str) {
    match name {
        "slowlog-max-len" => {
            let mut log = lock(&front.node.slowlog);
            log.len_max = shard.config.slowlog_max_len;
            log.trim();
        }
        // Only the AOF's: a log kept for the `save` policy alone is never fsynced. The log's
        // role (`Persist::appendonly`) is the one this command leaves: it changed first.
        "appendfsync" if shard.persist.appendonly => {
            if let Some(f) = crate::persist::Fsync::parse(&shard.config.appendfsync) {
                shard.persist.set_fsync(f);
            }
        }
        "save"
            if shard.persist.writer.is_none()
                && !shard.config.save.trim().is_empty()
                && !shard.persist.dir.as_os_str().is_empty() =>
        {
            tracing::warn!(
                save = %shard.config.save,
                "CONFIG SET save on a server started without the op log (appendonly no, save \"\"): the policy's snapshots are written in the foreground, blocking the shard as SAVE does, until a restart with the policy starts the log"
            );
        }
        "backlog-bytes-max" => shard.oplog.set_bytes_max(shard.config.backlog_bytes_max),
        // Redis's `updateRequirePass`: the default user's passwords become this one (none:
        // nopass).
        "requirepass" => {
            let pass = shard.config.requirepass.clone();
            shard.acl.set_requirepass(pass.as_bytes());
        }
        "maxmemory-policy" => shard.set_policy_flags(),
        // Redis warns when the new limit is below what is used, and starts its eviction
        // time proc: each shard's periodic cycle evicts at once, not only the next command.
        "maxmemory" if shard.config.maxmemory != 0 => {
            let used = shard.used_memory_counted(shard.now_ms());
            if used > shard.config.maxmemory && shard.index == 0 {
                tracing::warn!(
                    "WARNING: the new maxmemory value set via CONFIG SET ({}) is smaller than the current memory usage ({used}). This will result in key eviction and/or the inability to accept new write commands depending on the maxmemory-policy.",
                    shard.config.maxmemory
                );
            }
            shard.evict.start_cycle();
        }
        "notify-keyspace-events" => shard.set_notify_flags(),
        // Redis trims the tracking table before the next command of any client. Here a
        // connection's command trims only its own thread's shard, so a lowered limit is
        // applied on every shard now: a client tracking keys of another shard gets its
        // invalidations even while the periodic cycle is paused (DEBUG PAUSE-CRON).
        "tracking-table-max-keys" if shard.tracking.active() => shard.tracking_limit(),
        _ => {}
    }
}

/// CONFIG RESETSTAT: statistics, command and error tables (not the slow log).
fn config_resetstat(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    ctx.front.stats.reset();
    ctx.shard.stats.reset();
    ctx.shard.lazyfree.reset_stats();
    ctx.out.ok();
    Ok(())
}

/// CONFIG REWRITE: writes the running configuration into the TOML file Meridian was started
/// with (`config::rewrite`).
fn config_rewrite(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    match ctx.shard.config.rewrite() {
        Ok(()) => {
            ctx.out.ok();
            Ok(())
        }
        Err(crate::error::ConfigError::NoFile) => Err(CmdError::Err(
            "The server is running without a config file".to_string(),
        )),
        Err(e) => {
            tracing::warn!("CONFIG REWRITE failed: {e}");
            Err(CmdError::Err(format!("Rewriting config file: {e}")))
        }
    }
}

fn config_help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    reply_help(
        ctx,
        "CONFIG",
        &[
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>.",
            "RESETSTAT",
            "    Reset statistics reported by the INFO command.",
            "REWRITE",
            "    Rewrite the configuration file.",
        ],
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// TIME DBSIZE FLUSHDB FLUSHALL

fn time(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let us = clock_us(ctx.shard);
    ctx.out.array(2);
    ctx.out.bulk_int((us / 1_000_000) as i64);
    ctx.out.bulk_int((us % 1_000_000) as i64);
    Ok(())
}

/// Wall-clock microseconds, shifted like `Shard::now_ms` by the test-only clock offset.
fn clock_us(shard: &Shard) -> u64 {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0);
    wall.saturating_add_signed(shard.config.debug_clock_offset_ms.saturating_mul(1000))
}

fn dbsize(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let n = ctx.shard.dbs.get(ctx.client.db).map_or(0, |d| d.len());
    ctx.out.int(n as i64);
    Ok(())
}

/// Redis's `getFlushCommandFlags`: nothing, ASYNC or SYNC; whether ASYNC (the bare form
/// follows `lazyfree-lazy-user-flush`).
fn flush_mode(ctx: &Ctx<'_>, argv: &[&[u8]]) -> Result<bool, CmdError> {
    match argv.get(1) {
        None => Ok(ctx.shard.config.lazyfree_lazy_user_flush),
        Some(a) if argv.len() == 2 && eq_ic(a, "sync") => Ok(false),
        Some(a) if argv.len() == 2 && eq_ic(a, "async") => Ok(true),
        _ => Err(CmdError::Syntax),
    }
}

/// FLUSHDB [ASYNC|SYNC]. Each existing key is removed through the write path (replicated
/// and waking its WATCHers, as Redis touches only watched keys that existed). ASYNC with no
/// peers frees the collections on the shard's lazyfree thread (`Keyspace::flush_db`).
fn flushdb(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let lazy = flush_mode(ctx, argv)?;
    let db = ctx.client.db;
    let now = ctx.now_ms;
    let mut freed = Vec::new();
    ctx.shard
        .tracking_flush(|s| s.flush_db(db, now, lazy.then_some(&mut freed)));
    ctx.shard.lazyfree.free(freed);
    tracking_flushed(ctx);
    ctx.out.ok();
    Ok(())
}

fn flushall(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let lazy = flush_mode(ctx, argv)?;
    let now = ctx.now_ms;
    let mut freed = Vec::new();
    ctx.shard.tracking_flush(|s| {
        for db in 0..s.dbs.len() {
            s.flush_db(db, now, lazy.then_some(&mut freed));
        }
    });
    ctx.shard.lazyfree.free(freed);
    // Redis's `flushAllDataAndResetRDB`: with a `save` policy the emptied data set is saved
    // at once, so no older snapshot brings the flushed keys back at a restart (this shard may
    // run without the log), and the changes since the last save are 0.
    if !ctx.shard.config.save.trim().is_empty() && ctx.shard.persist.job.is_none() {
        let _ = ctx.shard.save_now();
    }
    tracking_flushed(ctx);
    ctx.out.ok();
    Ok(())
}

/// After a flush: one null invalidation to every tracking client, sent by the thread of the
/// connection that flushed (each shard runs the flush; the connection's own thread is the
/// one whose front holds the client).
fn tracking_flushed(ctx: &mut Ctx<'_>) {
    let own_thread = ctx.front.clients.contains_key(&ctx.client.id());
    if own_thread && !lock(&ctx.front.node.trackers).is_empty() {
        super::tracking::flushed(ctx.shard, &ctx.front.node, ctx.client, ctx.now_ms);
    }
}

// ---------------------------------------------------------------------------------------
// SLOWLOG

/// SLOWLOG GET [count]: newest first; count defaults to 10, -1 means all.
fn slowlog_get(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    if argv.len() > 3 {
        return Err(subcommand_syntax_error(argv));
    }
    let mut count: usize = 10;
    if let Some(a) = argv.get(2) {
        let msg = || CmdError::Err("count should be greater than or equal to -1".to_string());
        let n = parse_i64(a).ok_or_else(msg)?;
        if n < -1 {
            return Err(msg());
        }
        count = if n == -1 { usize::MAX } else { n as usize };
    }
    let entries: Vec<_> = lock(&ctx.front.node.slowlog)
        .entries
        .iter()
        .take(count)
        .cloned()
        .collect();
    let out = &mut *ctx.out;
    out.array(entries.len());
    for e in &entries {
        out.array(6);
        out.int(e.id as i64);
        out.int(e.time_s as i64);
        out.int(e.duration_us as i64);
        out.array(e.args.len());
        for a in &e.args {
            out.bulk(a);
        }
        out.bulk(e.peer.as_bytes());
        out.bulk(e.name.as_bytes());
    }
    Ok(())
}

fn slowlog_len(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let n = lock(&ctx.front.node.slowlog).entries.len();
    ctx.out.int(n as i64);
    Ok(())
}

fn slowlog_reset(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    lock(&ctx.front.node.slowlog).entries.clear();
    ctx.out.ok();
    Ok(())
}

fn slowlog_help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    reply_help(
        ctx,
        "SLOWLOG",
        &[
            "GET [<count>]",
            "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
            "    Entries are made of:",
            "    id, timestamp, time in microseconds, arguments array, client IP and port,",
            "    client name",
            "LEN",
            "    Return the length of the slowlog.",
            "RESET",
            "    Reset the slowlog.",
        ],
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// LATENCY

/// LATENCY LATEST: [event, time of the latest sample, its latency, the all-time max].
fn latency_latest(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let out = &mut *ctx.out;
    let latency = lock(&ctx.front.node.latency);
    out.array(latency.events.len());
    for (name, e) in &latency.events {
        let (t, ms) = e.samples.back().copied().unwrap_or((0, 0));
        out.array(4);
        out.bulk(name.as_bytes());
        out.int(t as i64);
        out.int(ms as i64);
        out.int(e.max_ms as i64);
    }
    Ok(())
}

/// LATENCY HISTORY event: [time, latency] pairs, oldest first; unknown event: empty.
fn latency_history(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let name = String::from_utf8_lossy(argv.get(2).copied().unwrap_or_default()).into_owned();
    let out = &mut *ctx.out;
    let latency = lock(&ctx.front.node.latency);
    match latency.events.get(&name) {
        None => out.array(0),
        Some(e) => {
            out.array(e.samples.len());
            for &(t, ms) in &e.samples {
                out.array(2);
                out.int(t as i64);
                out.int(ms as i64);
            }
        }
    }
    Ok(())
}

/// LATENCY RESET [event ...]: the number of event series reset.
fn latency_reset(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let mut latency = lock(&ctx.front.node.latency);
    let events = &mut latency.events;
    let n = if argv.len() == 2 {
        let n = events.len();
        events.clear();
        n
    } else {
        argv.get(2..)
            .unwrap_or_default()
            .iter()
            .filter(|a| events.remove(String::from_utf8_lossy(a).as_ref()).is_some())
            .count()
    };
    ctx.out.int(n as i64);
    Ok(())
}

fn latency_help(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    reply_help(
        ctx,
        "LATENCY",
        &[
            "DOCTOR",
            "    Return a human readable latency analysis report.",
            "GRAPH <event>",
            "    Return an ASCII latency graph for the <event> class.",
            "HISTORY <event>",
            "    Return time-latency samples for the <event> class.",
            "LATEST",
            "    Return the latest latency samples for all events.",
            "RESET [<event> ...]",
            "    Reset latency data of one or more <event> classes.",
            "    (default: reset all data for all event classes)",
            "HISTOGRAM [COMMAND ...]",
            "    Return a cumulative distribution of latencies in the format of a histogram for the specified command names.",
            "    If no commands are specified then all histograms are replied.",
        ],
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------
// DEBUG

/// DEBUG subcommand ...: a single command whose first argument the handler parses, as in
/// Redis 7.0. Only the subcommands Meridian can honour exist.
/// DEBUG SLEEP looks at the stop flag at least this often.
pub const DEBUG_SLEEP_SLICE: std::time::Duration = std::time::Duration::from_millis(20);

/// The largest DEBUG QUICKLIST-PACKED-THRESHOLD Redis accepts: 1 MiB below 4 GiB
/// (`quicklistisSetPackedThreshold`).
const QUICKLIST_PACKED_THRESHOLD_MAX: u64 = (1 << 32) - (1 << 20);

fn debug(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    super::protected_allowed(ctx, "enable-debug-command", "DEBUG")?;
    let sub = argv.get(1).copied().unwrap_or_default();
    let argc = argv.len();
    if eq_ic(sub, "help") && argc == 2 {
        reply_help(
            ctx,
            "DEBUG",
            &[
                "DIGEST",
                "    Output a hex signature representing the current DB content.",
                "DIGEST-VALUE <key> [<key> ...]",
                "    Output a hex signature of the values of all the specified keys.",
                "ERROR <string>",
                "    Return a Redis protocol error with <string> as message. Useful for clients",
                "    unit tests to simulate Redis errors.",
                "LOADAOF",
                "    Replay the op log (from the snapshot it starts with) as a start does, and",
                "    check that it gives the data in memory (which stays as it is).",
                "LOG <message>",
                "    Write <message> to the server log.",
                "OBJECT <key>",
                "    Show low level info about `key` and associated value.",
                "PAUSE-CRON <0|1>",
                "    Stop periodic cron job processing (active expiry, eviction, tracking limits,",
                "    garbage collection, the save policy, client timeouts).",
                "PANIC",
                "    Crash the server simulating a panic.",
                "POPULATE <count> [<prefix>] [<size>]",
                "    Create <count> string keys named key:<num>. If <prefix> is specified then",
                "    it is used instead of the 'key' prefix. They are written as SET writes are,",
                "    for the other sites too. On a shard's cluster endpoint, only the keys of",
                "    that shard's slots are created.",
                "PROTOCOL <type>",
                "    Reply with a test value of the specified type. <type> can be: string,",
                "    integer, double, bignum, null, array, set, map, attrib, push, verbatim,",
                "    true, false.",
                "QUICKLIST-PACKED-THRESHOLD <size>",
                "    Accepted as Redis checks it (a memory value below 4gb); Meridian's lists",
                "    have no packed or plain nodes, so it changes nothing.",
                "RELOAD [option ...]",
                "    Save the snapshot and the RDB file <dir>/<dbfilename> on disk and reload",
                "    every key. Valid <option> values:",
                "    * MERGE: conflicting keys will be loaded from the file.",
                "    * NOFLUSH: the existing database will not be removed before load, but",
                "      conflicting keys are an error (nothing is loaded).",
                "    * NOSAVE: the database will be loaded from the RDB file <dir>/<dbfilename>",
                "      (one Redis or redis-cli --rdb wrote), read whole before anything changes.",
                "    Examples:",
                "    * DEBUG RELOAD: verify that the server is able to persist, flush and reload",
                "      the database.",
                "    * DEBUG RELOAD NOSAVE: replace the current database with the contents of an",
                "      existing RDB file.",
                "    * DEBUG RELOAD NOSAVE NOFLUSH MERGE: add the contents of an existing RDB",
                "      file to the database.",
                "SET-SKIP-CHECKSUM-VALIDATION <0|1>",
                "    Enables or disables checksum checks for RDB files and RESTORE's payload.",
                "SET-DISABLE-DENY-SCRIPTS <0|1>",
                "    Enable or disable the ability to call commands flagged 'noscript' (such as",
                "    DEBUG) from a script.",
                "SET-ACTIVE-EXPIRE <0|1>",
                "    Setting it to 0 disables expiring keys in background when they are not",
                "    accessed (otherwise the Redis behavior). Setting it to 1 reenables back the",
                "    default.",
                "SLEEP <seconds>",
                "    Stop the server for <seconds>. Decimals allowed.",
            ],
        );
        return Ok(());
    }
    if eq_ic(sub, "panic") && argc == 2 {
        // Redis's serverPanic: the process ends (`exit_on_panic` in main), with a report.
        panic!("DEBUG PANIC called at Unix time {}", ctx.now_ms / 1000);
    }
    if eq_ic(sub, "object") && argc == 3 {
        return super::debug::object(ctx, argv.get(2).copied().unwrap_or_default());
    }
    if eq_ic(sub, "protocol") && argc == 3 {
        return super::debug::protocol(ctx, argv.get(2).copied().unwrap_or_default());
    }
    if eq_ic(sub, "digest") && argc == 2 {
        return super::debug::digest(ctx);
    }
    if eq_ic(sub, "quicklist-packed-threshold") && argc == 3 {
        // Redis stores lists as quicklists whose elements past this size get a node of their
        // own ("plain"); Meridian's lists have no such nodes, so the threshold changes no
        // layout. The argument is checked as Redis checks it (docs/compatibility.md).
        let size = crate::config::params::parse_memory(argv.get(2).copied().unwrap_or_default());
        return match size {
            Some(sz) if sz <= QUICKLIST_PACKED_THRESHOLD_MAX => {
                ctx.out.ok();
                Ok(())
            }
            _ => Err(CmdError::Err(
                "argument must be a memory value bigger than 1 and smaller than 4gb".to_string(),
            )),
        };
    }
    if eq_ic(sub, "loadaof") && argc == 2 {
        super::debug::loadaof(ctx.shard)?;
        ctx.out.ok();
        return Ok(());
    }
    if eq_ic(sub, "reload") {
        let how = super::debug::reload_args(argv)?;
        let file = how
            .nosave
            .then(|| super::debug::read_rdb_file(&ctx.shard.config))
            .transpose()?;
        if let Some(part) = super::debug::reload(ctx.shard, how, file.as_deref(), ctx.now_ms)? {
            super::debug::write_rdb_file(vec![part], &ctx.shard.config, ctx.now_ms)?;
        }
        ctx.out.ok();
        return Ok(());
    }
    if eq_ic(sub, "populate") && (3..=5).contains(&argc) {
        let p = super::debug::populate_args(argv, ctx.shard.config.proto_max_bulk_len)?;
        let db = ctx.db();
        super::debug::populate(ctx.shard, db, &p, ctx.now_ms)?;
        ctx.out.ok();
        return Ok(());
    }
    if eq_ic(sub, "digest-value") {
        return super::debug::digest_value(ctx, argv.get(2..).unwrap_or_default());
    }
    if eq_ic(sub, "sleep") && argc == 3 {
        // Redis: strtod, whatever it parses (0 for junk); the shard thread blocks, as Redis's
        // main thread does.
        // It sleeps in slices so that a stop signal ends it (`crate::stop`).
        let secs = parse_f64(argv.get(2).copied().unwrap_or_default()).unwrap_or(0.0);
        let us = (secs * 1_000_000.0) as i64;
        if us > 0 {
            let until = std::time::Instant::now() + std::time::Duration::from_micros(us as u64);
            loop {
                if crate::stop::requested() {
                    return Err(CmdError::ShuttingDown);
                }
                let left = until.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                std::thread::sleep(left.min(DEBUG_SLEEP_SLICE));
            }
        }
        ctx.out.ok();
        return Ok(());
    }
    if argc == 3 {
        if let Some((flag, set_by_one)) = super::debug::flag(ctx.shard, sub) {
            // Redis reads the `<0|1>` with atoi.
            let one = c_atoi(argv.get(2).copied().unwrap_or_default()) != 0;
            *flag = one == set_by_one;
            ctx.out.ok();
            return Ok(());
        }
    }
    if eq_ic(sub, "error") && argc == 3 {
        let text = String::from_utf8_lossy(argv.get(2).copied().unwrap_or_default()).into_owned();
        return Err(CmdError::Raw(text));
    }
    if eq_ic(sub, "log") && argc == 3 {
        tracing::warn!(
            "DEBUG LOG: {}",
            String::from_utf8_lossy(argv.get(2).copied().unwrap_or_default())
        );
        ctx.out.ok();
        return Ok(());
    }
    Err(subcommand_syntax_error(argv))
}

/// C's `atoi`: optional sign and leading digits, 0 otherwise.
fn c_atoi(b: &[u8]) -> i64 {
    let t = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .and_then(|i| b.get(i..))
        .unwrap_or_default();
    let (neg, t) = match t.split_first() {
        Some((b'-', r)) => (true, r),
        Some((b'+', r)) => (false, r),
        _ => (false, t),
    };
    let mut v: i64 = 0;
    for &c in t.iter().take_while(|c| c.is_ascii_digit()) {
        v = v.saturating_mul(10).saturating_add(i64::from(c - b'0'));
    }
    if neg { -v } else { v }
}

// ---------------------------------------------------------------------------------------
// MONITOR SHUTDOWN

/// MONITOR: `+OK`, then this connection receives every command other clients run. A client
/// already monitoring gets no reply, as in Redis.
fn monitor(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    if ctx.client.shared.is_monitor.get() {
        return Ok(());
    }
    ctx.client.shared.is_monitor.set(true);
    ctx.front
        .node
        .add_monitor(ctx.client.shared.mailbox.clone());
    ctx.out.ok();
    Ok(())
}

/// What SHUTDOWN's flags ask for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownPlan {
    /// Snapshot before exiting (SAVE, or a `save` policy without NOSAVE).
    pub save: Option<bool>,
    pub force: bool,
}

/// Parses SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]. ABORT answers that no shutdown is in
/// progress (Meridian's shutdown does not wait for replicas).
pub fn shutdown_plan(argv: &[&[u8]]) -> Result<ShutdownPlan, CmdError> {
    let (mut nosave, mut save, mut now, mut force, mut abort) = (false, false, false, false, false);
    for a in argv.get(1..).unwrap_or_default() {
        if eq_ic(a, "nosave") {
            nosave = true;
        } else if eq_ic(a, "save") {
            save = true;
        } else if eq_ic(a, "now") {
            now = true;
        } else if eq_ic(a, "force") {
            force = true;
        } else if eq_ic(a, "abort") {
            abort = true;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    if (abort && (nosave || save || now || force)) || (nosave && save) {
        return Err(CmdError::Syntax);
    }
    if abort {
        return Err(CmdError::Err("No shutdown in progress.".to_string()));
    }
    let save = if save {
        Some(true)
    } else if nosave {
        Some(false)
    } else {
        None
    };
    Ok(ShutdownPlan { save, force })
}

/// One shard's part of a shutdown: the snapshot the plan asks for, then every logged record
/// to disk and no more writes. Fails (with FORCE not given) when the snapshot fails.
pub fn shutdown_prepare(shard: &mut Shard, plan: ShutdownPlan) -> Result<(), CmdError> {
    shutdown_save(shard, plan)?;
    shutdown_close(shard);
    Ok(())
}

/// The snapshot a shutdown's plan asks for, on one shard; the shard goes on serving. Fails
/// (with FORCE not given) when the snapshot fails.
pub fn shutdown_save(shard: &mut Shard, plan: ShutdownPlan) -> Result<(), CmdError> {
    if let Err(e) = shard.final_snapshot(plan.save) {
        tracing::error!(error = %e, "Error trying to save the DB, can't exit.");
        if !plan.force {
            return Err(CmdError::Err(
                "Errors trying to SHUTDOWN. Check logs.".to_string(),
            ));
        }
    }
    Ok(())
}

/// The end of a shard's part of a shutdown: every logged record to disk, and no more writes.
pub fn shutdown_close(shard: &mut Shard) {
    shard.persist.close();
    shard.shutting_down = true;
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] [ABORT]: a snapshot when asked (or by the `save`
/// policy), the log closed, then the process exits at once, without a reply, like Redis.
/// With several shards the dispatcher prepares the other shards first.
fn shutdown(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let plan = shutdown_plan(argv)?;
    tracing::warn!("User requested shutdown...");
    shutdown_prepare(ctx.shard, plan)?;
    for c in ctx.front.clients.values() {
        c.kill();
    }
    tracing::warn!("Meridian is now ready to exit, bye bye...");
    std::process::exit(0);
}

// ---------------------------------------------------------------------------------------
// SAVE BGSAVE BGREWRITEAOF LASTSAVE

/// SAVE: a snapshot of the live state, written now (the shard waits, as Redis's server does).
fn save(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    if ctx.shard.persist.job.is_some() {
        return Err(CmdError::Err(
            "Background save already in progress".to_string(),
        ));
    }
    match ctx.shard.save_now() {
        Ok(()) => {
            ctx.out.ok();
            Ok(())
        }
        Err(_) => Err(CmdError::Raw("ERR".to_string())),
    }
}

/// BGSAVE [SCHEDULE]: a snapshot built in the background (docs/persistence.md §3).
fn bgsave(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let schedule = match argv.get(1) {
        None => false,
        Some(a) if eq_ic(a, "schedule") && argv.len() == 2 => true,
        Some(_) => return Err(CmdError::Syntax),
    };
    if ctx.shard.persist.writer.is_none() {
        return Err(CmdError::Err(
            "BGSAVE needs the op log, which this server started without (appendonly no and save \"\"): Meridian builds background snapshots from it. SAVE works without it".to_string(),
        ));
    }
    match ctx.shard.persist.job.as_ref().map(|j| j.kind) {
        Some(crate::persist::job::JobKind::Bgsave) => Err(CmdError::Err(
            "Background save already in progress".to_string(),
        )),
        Some(crate::persist::job::JobKind::Rewrite) => {
            if schedule {
                ctx.shard.persist.scheduled = true;
                ctx.out.simple("Background saving scheduled");
                Ok(())
            } else {
                Err(CmdError::Err("An AOF log rewriting in progress: can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule a BGSAVE whenever possible.".to_string()))
            }
        }
        None => {
            ctx.shard
                .start_background_snapshot(crate::persist::job::JobKind::Bgsave)
                .map_err(|e| CmdError::Err(format!("Background save failed to start: {e}")))?;
            ctx.out.simple("Background saving started");
            Ok(())
        }
    }
}

/// BGREWRITEAOF: a background snapshot, after which the log before it is dropped.
fn bgrewriteaof(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    if ctx.shard.persist.writer.is_none() {
        return Err(CmdError::Err(
            "BGREWRITEAOF needs the op log, which this server started without (appendonly no and save \"\")".to_string(),
        ));
    }
    match ctx.shard.persist.job.as_ref().map(|j| j.kind) {
        Some(crate::persist::job::JobKind::Rewrite) => Err(CmdError::Err(
            "Background append only file rewriting already in progress".to_string(),
        )),
        Some(crate::persist::job::JobKind::Bgsave) => {
            ctx.shard.persist.scheduled = true;
            ctx.out
                .simple("Background append only file rewriting scheduled");
            Ok(())
        }
        None => {
            ctx.shard
                .start_background_snapshot(crate::persist::job::JobKind::Rewrite)
                .map_err(|e| {
                    CmdError::Err(format!("Can't execute an AOF background rewriting: {e}"))
                })?;
            ctx.out
                .simple("Background append only file rewriting started");
            Ok(())
        }
    }
}

/// LASTSAVE: Unix time of the last successful snapshot (the start time before one).
fn lastsave(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    ctx.out.int(ctx.shard.persist.stats.last_save_s as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testing::Harness as T;
    use crate::resp::reply::Proto;

    #[test]
    fn handlers_are_in_the_table() {
        let t = crate::cmd::table();
        for (name, _) in HANDLERS {
            let base = name.split('|').next().unwrap();
            assert!(t.lookup(base.as_bytes()).is_some(), "{name}");
        }
    }

    /// FLUSHALL ASYNC's work on the shard, counted: one logged removal per key, the
    /// collections handed whole to the lazyfree thread (`lazyfreed_objects`), the keyspace's
    /// counts (empty entries, TTLs) as after a SYNC flush. SYNC hands nothing over.
    #[test]
    fn flushall_async_frees_collections_off_the_shard() {
        let mut h = T::new();
        for c in 0..20 {
            let mut args = vec!["SADD".to_string(), "s".to_string()];
            args.extend((0..1000).map(|i| format!("m{c}:{i}")));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            assert_eq!(h.run(&args), ":1000\r\n");
        }
        h.run(&["HSET", "h", "f", "v"]);
        h.run(&["EXPIRE", "h", "100"]);
        h.run(&["SET", "str", "v", "EX", "100"]);
        h.run(&["SELECT", "1"]);
        h.run(&["RPUSH", "l", "a", "b"]);
        h.run(&["SELECT", "0"]);
        let seq = h.shard.seq;
        assert_eq!(h.run(&["FLUSHALL", "ASYNC"]), "+OK\r\n");
        assert_eq!(h.shard.seq, seq + 4, "one removal per key");
        assert_eq!(h.run(&["DBSIZE"]), ":0\r\n");
        assert_eq!(h.run(&["EXISTS", "s", "h", "str"]), ":0\r\n");
        for d in &h.shard.dbs {
            assert_eq!((d.table.len(), d.empty, d.expires), (0, 0, 0));
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while h.shard.lazyfree.freed() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(
            h.shard.lazyfree.freed(),
            3,
            "the set, the hash and the list"
        );
        h.run(&["SADD", "s", "a"]);
        assert_eq!(h.run(&["FLUSHDB", "SYNC"]), "+OK\r\n");
        assert_eq!(h.run(&["FLUSHDB"]), "+OK\r\n");
        assert_eq!(h.shard.lazyfree.freed(), 3);
        assert_eq!(h.run(&["FLUSHALL", "LAZY"]), "-ERR syntax error\r\n");
    }

    /// Waits (bounded) until the lazyfree thread has freed `n` values in all.
    fn wait_freed(h: &T, n: u64) -> u64 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while h.shard.lazyfree.freed() < n && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        h.shard.lazyfree.freed()
    }

    #[test]
    fn unlink_frees_only_values_past_the_effort_threshold_off_the_shard() {
        use crate::lazyfree::LAZYFREE_EFFORT_MIN;
        let mut h = T::new();
        let sadd = |h: &mut T, key: &str, n: usize| {
            let mut args = vec!["SADD".to_string(), key.to_string()];
            args.extend((0..n).map(|i| format!("m{i}")));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            assert_eq!(h.run(&args), format!(":{n}\r\n"));
        };
        sadd(&mut h, "at", LAZYFREE_EFFORT_MIN);
        sadd(&mut h, "past", LAZYFREE_EFFORT_MIN + 1);
        h.run(&["SET", "str", "v"]);
        h.run(&["XADD", "s", "*", "a", "b"]);
        // At the threshold, a string, a one-entry stream: freed here, as Redis does.
        assert_eq!(h.run(&["UNLINK", "at", "str", "s", "missing"]), ":3\r\n");
        assert_eq!(h.shard.lazyfree.freed(), 0);
        assert_eq!(h.shard.lazyfree.pending(), 0);
        // One past it: handed to the lazyfree thread.
        assert_eq!(h.run(&["UNLINK", "past"]), ":1\r\n");
        assert_eq!(wait_freed(&h, 1), 1);
        assert_eq!(h.run(&["EXISTS", "at", "past", "str", "s"]), ":0\r\n");
        // DEL frees here unless lazyfree-lazy-user-del says otherwise.
        sadd(&mut h, "past", LAZYFREE_EFFORT_MIN + 1);
        assert_eq!(h.run(&["DEL", "past"]), ":1\r\n");
        assert_eq!(h.shard.lazyfree.freed(), 1);
        h.run(&["CONFIG", "SET", "lazyfree-lazy-user-del", "yes"]);
        sadd(&mut h, "past", LAZYFREE_EFFORT_MIN + 1);
        assert_eq!(h.run(&["DEL", "past"]), ":1\r\n");
        assert_eq!(wait_freed(&h, 2), 2);
        // CONFIG RESETSTAT starts the count again (Redis's lazyfreeResetStats).
        assert_eq!(h.run(&["CONFIG", "RESETSTAT"]), "+OK\r\n");
        assert_eq!(h.shard.lazyfree.freed(), 0);
        // The bare FLUSHALL follows lazyfree-lazy-user-flush.
        sadd(&mut h, "past", 2);
        assert_eq!(h.run(&["FLUSHALL"]), "+OK\r\n");
        assert_eq!(h.shard.lazyfree.freed(), 0);
        h.run(&["CONFIG", "SET", "lazyfree-lazy-user-flush", "yes"]);
        sadd(&mut h, "past", 2);
        assert_eq!(h.run(&["FLUSHALL"]), "+OK\r\n");
        assert_eq!(wait_freed(&h, 1), 1);
    }

    #[test]
    fn human_bytes() {
        assert_eq!(bytes_to_human(1023), "1023B");
        assert_eq!(bytes_to_human(916456), "894.98K");
        assert_eq!(bytes_to_human(6774784), "6.46M");
        assert_eq!(bytes_to_human(25276514304), "23.54G");
    }

    #[test]
    fn memory_units() {
        assert_eq!(parse_memory(b"1mb"), Some(1 << 20));
        assert_eq!(parse_memory(b"1GB"), Some(1 << 30));
        assert_eq!(parse_memory(b"2k"), Some(2000));
        assert_eq!(parse_memory(b"10"), Some(10));
        assert_eq!(parse_memory(b"-1"), None);
        assert_eq!(parse_memory(b"1xb"), None);
        assert_eq!(parse_memory(b""), None);
    }

    #[test]
    fn info_sections() {
        let mut t = T::new();
        let r = t.run(&["info"]);
        for s in [
            "# Server\r\n",
            "# Clients",
            "# Memory",
            "# Persistence",
            "# Stats",
            "# Replication",
            "# CPU",
            "# Keyspace",
            "# CRDT",
        ] {
            assert!(r.contains(s), "{s} missing");
        }
        assert!(!r.contains("# Commandstats"));
        assert!(r.contains("redis_version:7.0.15\r\n"));
        assert!(r.contains("\r\n\r\n# Clients\r\n"));
        let r = t.run(&["info", "server", "CLIENTS"]);
        assert!(r.contains("# Server") && r.contains("# Clients") && !r.contains("# Memory"));
        assert_eq!(t.run(&["info", "nosuch"]), "$0\r\n\r\n");
        let r = t.run(&["info", "commandstats"]);
        assert!(r.contains("cmdstat_info:calls=3,"), "{r}");
        t.run(&["config", "get"]);
        t.run(&["config", "nosuch"]);
        let r = t.run(&["info", "commandstats", "errorstats"]);
        assert!(r.contains("cmdstat_config|get:calls=0,usec=0,usec_per_call=0.00,rejected_calls=1,failed_calls=0"), "{r}");
        assert!(r.contains("errorstat_ERR:count=2"), "{r}");
        t.out.proto = Proto::Resp3;
        let r = t.run(&["info", "cpu"]);
        assert!(
            r.starts_with('=') && r.contains("txt:# CPU\r\nused_cpu_sys:"),
            "{r}"
        );
    }

    #[test]
    fn config_round_trip_and_errors() {
        let mut t = T::new();
        assert_eq!(
            t.run(&["config", "get", "maxmemory"]),
            "*2\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n"
        );
        assert_eq!(
            t.run(&["config", "set", "hz", "20", "timeout", "5"]),
            "+OK\r\n"
        );
        assert_eq!(
            t.run(&["config", "get", "hz", "HZ", "time*"]),
            "*4\r\n$2\r\nhz\r\n$2\r\n20\r\n$7\r\ntimeout\r\n$1\r\n5\r\n"
        );
        assert_eq!(t.run(&["config", "set", "hz", "1000"]), "+OK\r\n");
        assert!(
            t.run(&["config", "set", "databases", "1", "foo", "1"])
                .contains("'databases') - can't set immutable")
        );
        assert!(
            t.run(&["config", "set", "foo", "1", "databases", "1"])
                .contains("CONFIG SET - 'foo'")
        );
        assert_eq!(t.shard.config.hz, 500);
        assert_eq!(
            t.run(&["config", "set", "foo", "1"]),
            "-ERR Unknown option or number of arguments for CONFIG SET - 'foo'\r\n"
        );
        assert_eq!(
            t.run(&["config", "set", "databases", "3"]),
            "-ERR CONFIG SET failed (possibly related to argument 'databases') - can't set immutable config\r\n"
        );
        assert_eq!(
            t.run(&["config", "set", "timeout", "7", "hz", "abc"]),
            "-ERR CONFIG SET failed (possibly related to argument 'hz') - argument couldn't be parsed into an integer\r\n"
        );
        assert_eq!(t.shard.config.timeout, 5, "nothing applied on failure");
        assert_eq!(
            t.run(&["config", "set", "hz", "5", "Hz", "6"]),
            "-ERR CONFIG SET failed (possibly related to argument 'Hz') - duplicate parameter\r\n"
        );
        assert_eq!(
            t.run(&["config", "set", "hz", "5", "x"]),
            "-ERR syntax error\r\n"
        );
        assert_eq!(
            t.run(&["config", "set", "proto-max-bulk-len", "10"]),
            "-ERR CONFIG SET failed (possibly related to argument 'proto-max-bulk-len') - argument must be between 1048576 and 9223372036854775807 inclusive\r\n"
        );
        assert_eq!(
            t.run(&["config", "set", "proto-max-bulk-len", "2mb"]),
            "+OK\r\n"
        );
        assert_eq!(t.shard.config.proto_max_bulk_len, 2 << 20);
        assert_eq!(
            t.run(&[
                "config",
                "set",
                "save",
                "",
                "appendonly",
                "yes",
                "maxmemory",
                "0"
            ]),
            "+OK\r\n"
        );
        assert_eq!(t.shard.config.save, "");
        // No data directory here: the log cannot start or stop.
        assert!(
            t.run(&["config", "set", "appendonly", "no"])
                .contains("Unable to turn off AOF")
        );
        assert!(
            t.run(&["config", "set", "save", "10"])
                .contains("Invalid save parameters")
        );
        assert_eq!(
            t.run(&["config", "set", "appendfsync", "always"]),
            "+OK\r\n"
        );
        assert_eq!(t.shard.persist.fsync, crate::persist::Fsync::Always);
        assert!(
            t.run(&["config", "set", "appendfsync", "sometimes"])
                .contains("argument(s) must be one of the following")
        );
        assert!(
            t.run(&["config", "set", "dir", "/tmp"])
                .contains("can't set protected config")
        );
        for i in 0..5 {
            lock(&t.front.node.slowlog).push(0, 1, &[b"x"], String::new(), i.to_string());
        }
        assert_eq!(t.run(&["config", "set", "slowlog-max-len", "2"]), "+OK\r\n");
        assert_eq!(lock(&t.front.node.slowlog).entries.len(), 2);
        assert_eq!(
            t.run(&["config", "rewrite"]),
            "-ERR The server is running without a config file\r\n"
        );
    }

    #[test]
    fn config_table_aliases_fixed_and_stored() {
        let mut t = T::new();
        // Aliases answer under the name asked; a pattern lists names and aliases.
        assert_eq!(
            t.run(&["config", "set", "hash-max-ziplist-entries", "20"]),
            "+OK\r\n"
        );
        assert_eq!(t.shard.config.hash_max_listpack_entries, 20);
        assert_eq!(
            t.run(&["config", "get", "hash-max-*-entries"]),
            "*4\r\n$25\r\nhash-max-listpack-entries\r\n$2\r\n20\r\n$24\r\nhash-max-ziplist-entries\r\n$2\r\n20\r\n"
        );
        assert!(
            t.run(&[
                "config",
                "set",
                "hash-max-listpack-entries",
                "1",
                "hash-max-ziplist-entries",
                "2"
            ])
            .contains("duplicate parameter")
        );
        // A parameter without effect is kept and shown.
        assert_eq!(
            t.run(&["config", "set", "lazyfree-lazy-user-del", "YES"]),
            "+OK\r\n"
        );
        assert_eq!(
            t.run(&["config", "get", "lazyfree-lazy-user-del"]),
            "*2\r\n$22\r\nlazyfree-lazy-user-del\r\n$3\r\nyes\r\n"
        );
        // Fixed: the current value is a no-op, another one is refused.
        assert_eq!(
            t.run(&["config", "set", "maxmemory", "0", "port", "6379"]),
            "+OK\r\n"
        );
        assert_eq!(
            t.run(&["config", "set", "aof-load-truncated", "no"]),
            "-ERR CONFIG SET failed (possibly related to argument 'aof-load-truncated') - can't set immutable config\r\n"
        );
        // All or nothing: a bad value later in the list applies none of the earlier ones.
        assert!(
            t.run(&[
                "config",
                "set",
                "tcp-keepalive",
                "5",
                "maxmemory-clients",
                "200%"
            ])
            .contains("percentage argument must be less or equal to 100")
        );
        assert!(
            t.run(&["config", "get", "tcp-keepalive"])
                .ends_with("$3\r\n300\r\n")
        );
        // Hidden parameters answer only by exact name.
        assert!(
            t.run(&["config", "get", "key-load-delay"])
                .contains("$1\r\n0\r\n")
        );
        assert!(!t.run(&["config", "get", "*"]).contains("key-load-delay"));
        let all = t.run(&["config", "get", "*"]);
        assert!(all.contains("$12\r\nslave-read-only\r\n") || all.contains("slave-read-only"));
        assert!(
            t.run(&["config", "help"])
                .starts_with("*11\r\n+CONFIG <subcommand>")
        );
    }

    #[test]
    fn resetstat_keeps_slowlog_and_dirty() {
        let mut t = T::new();
        t.shard.stats.dirty = 3;
        lock(&t.front.node.slowlog).push(0, 1, &[b"x"], String::new(), String::new());
        t.run(&["dbsize"]);
        assert_eq!(t.run(&["config", "resetstat"]), "+OK\r\n");
        assert_eq!(
            t.front.stats.total_commands_processed, 1,
            "RESETSTAT itself counts"
        );
        assert_eq!(t.shard.stats.dirty, 3);
        assert_eq!(lock(&t.front.node.slowlog).entries.len(), 1);
    }

    #[test]
    fn slowlog_and_latency() {
        let mut t = T::new();
        t.shard.config.slowlog_log_slower_than = 0;
        t.run(&["dbsize"]);
        assert_eq!(t.run(&["slowlog", "len"]), ":1\r\n");
        let r = t.run(&["slowlog", "get"]);
        assert!(
            r.starts_with("*2\r\n*6\r\n:1\r\n") || r.starts_with("*2\r\n*6\r\n:"),
            "{r}"
        );
        assert!(
            r.contains("$6\r\ndbsize\r\n$14\r\n127.0.0.1:5000\r\n$0\r\n"),
            "{r}"
        );
        assert_eq!(
            t.run(&["slowlog", "get", "-2"]),
            "-ERR count should be greater than or equal to -1\r\n"
        );
        assert_eq!(
            t.run(&["slowlog", "get", "1", "2"]),
            "-ERR unknown subcommand or wrong number of arguments for 'get'. Try SLOWLOG HELP.\r\n"
        );
        assert_eq!(t.run(&["slowlog", "reset"]), "+OK\r\n");
        lock(&t.front.node.latency).record("command", 10, 5, 1);
        lock(&t.front.node.latency).record("command", 11, 7, 1);
        assert_eq!(
            t.run(&["latency", "latest"]),
            "*1\r\n*4\r\n$7\r\ncommand\r\n:11\r\n:7\r\n:7\r\n"
        );
        assert_eq!(
            t.run(&["latency", "history", "command"]),
            "*2\r\n*2\r\n:10\r\n:5\r\n*2\r\n:11\r\n:7\r\n"
        );
        assert_eq!(t.run(&["latency", "history", "nope"]), "*0\r\n");
        assert_eq!(t.run(&["latency", "reset", "nope", "command"]), ":1\r\n");
        assert_eq!(t.run(&["latency", "reset"]), ":0\r\n");
    }

    #[test]
    fn misc_commands() {
        let mut t = T::new();
        assert!(t.run(&["time"]).starts_with("*2\r\n$10\r\n"));
        assert_eq!(t.run(&["dbsize"]), ":0\r\n");
        assert_eq!(t.run(&["flushall"]), "+OK\r\n");
        assert_eq!(t.run(&["flushdb", "async"]), "+OK\r\n");
        assert_eq!(t.run(&["flushdb", "foo"]), "-ERR syntax error\r\n");
        // DEBUG is refused unless enable-debug-command allows it, as in Redis 7.0.
        assert_eq!(
            t.run(&["debug", "sleep", "0"]),
            "-ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it from a local connection, otherwise you need to set this option in the configuration file, and then restart the server.\r\n"
        );
        assert!(
            t.run(&["config", "set", "enable-debug-command", "yes"])
                .starts_with("-ERR CONFIG SET failed")
        );
        t.shard
            .config
            .set_stored("enable-debug-command", "local")
            .unwrap();
        assert_eq!(
            t.run(&["debug", "sleep", "0"]),
            "+OK\r\n",
            "a loopback client"
        );
        t.shard
            .config
            .set_stored("enable-debug-command", "yes")
            .unwrap();
        assert_eq!(t.run(&["debug", "sleep", "0"]), "+OK\r\n");
        assert_eq!(
            t.run(&["debug", "sleep"]),
            "-ERR unknown subcommand or wrong number of arguments for 'sleep'. Try DEBUG HELP.\r\n"
        );
        assert_eq!(t.run(&["debug", "set-active-expire", "0"]), "+OK\r\n");
        assert!(t.shard.stats.active_expire_disabled);
        assert_eq!(t.run(&["debug", "error", "FOO bar"]), "-FOO bar\r\n");
        assert_eq!(
            t.run(&["shutdown", "abort"]),
            "-ERR No shutdown in progress.\r\n"
        );
        assert_eq!(
            t.run(&["shutdown", "abort", "now"]),
            "-ERR syntax error\r\n"
        );
        assert_eq!(t.run(&["monitor"]), "+OK\r\n");
        assert_eq!(t.run(&["monitor"]), "");
        assert!(t.front.node.monitored());
    }
}

//! `meridian-drill`: multi-site fault drills for Meridian, runnable in CI.
//!
//! Starts N sites of the `meridian` binary, each in its own network namespace (or on loopback
//! when that is not possible), puts a fault proxy on every sync link, runs a bounded workload
//! with a ledger, injects a seeded schedule of faults, heals, and checks convergence and the
//! ledger. Not here: the server itself (`crates/server`), CRDT laws (`crates/crdt` tests).
//!
//! # Layout
//! - `rng`: the seeded generator behind schedules, jitter and workload choices.
//! - `netns`: namespaces, veths and the bridge; `in_netns`; nftables rules.
//! - `proxy`: the fault-injecting TCP proxy (latency, jitter, bandwidth, stall, blackhole,
//!   reset, partition).
//! - `tls`: the run's CA and site certificates.
//! - `resp`: a small blocking RESP client.
//! - `site`: process control (start, SIGKILL, SIGSTOP/SIGCONT, power loss), INFO parsing.
//! - `cluster`: sites plus proxies plus namespaces; faults by link; convergence; state reads.
//! - `ledger`, `workload`: the load and its records.
//! - `check`: the checkers.
//! - `schedule`: seeded fault schedules.
//! - `scenario`: the named drills.
//! - `report`: results and the final lines.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

mod check;
mod cluster;
mod ledger;
mod netns;
mod proxy;
mod report;
mod resp;
mod rng;
mod scenario;
mod schedule;
mod site;
mod tls;
mod workload;

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context as _, bail};
use clap::Parser;

use crate::cluster::NetMode;
use crate::report::Status;
use crate::scenario::{Ctx, INTERRUPTED, SCENARIOS};

#[derive(Parser, Debug)]
#[command(
    name = "meridian-drill",
    about = "Multi-site fault drills and convergence checks for Meridian",
    after_help = "Short (CI) mode runs every scenario; `partitions` and `quarantine-rejoin` once per seed, the others with the first seed.\nLong (soak) mode, with --duration, runs every scenario for every seed with that load phase."
)]
struct Cli {
    /// Number of sites (2-8).
    #[arg(long, default_value_t = 3)]
    sites: usize,
    /// Seeds, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,2,3")]
    seeds: Vec<u64>,
    /// Long mode: load phase of each drill (e.g. 60s, 2m); every scenario runs every seed.
    #[arg(long)]
    duration: Option<String>,
    /// Scenario(s) to run (repeat or comma-separate); default: all. `--list` names them.
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<String>,
    /// The meridian server binary (default: `meridian` next to this executable).
    #[arg(long)]
    meridian: Option<PathBuf>,
    /// Output directory (default: target/drill/<UTC timestamp>).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Use loopback ports even when namespaces are available.
    #[arg(long)]
    loopback: bool,
    /// Total workload rate in ops/s (capped at 10000).
    #[arg(long, default_value_t = 1500)]
    rate: u32,
    /// List the scenarios and exit.
    #[arg(long)]
    list: bool,
}

/// Parses `500ms`, `60s`, `2m`, `1h` (a bare number is seconds).
fn parse_duration(s: &str) -> anyhow::Result<Duration> {
    let s = s.trim();
    let (num, unit) = s.split_at(
        s.find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(s.len()),
    );
    let n: f64 = num.parse().with_context(|| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "" | "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        other => bail!("bad duration unit {other:?} in {s:?}"),
    };
    if !(0.0..=86_400.0).contains(&secs) {
        bail!("duration {s:?} out of range (0 to 24h)");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// `YYYYMMDD-HHMMSS` in UTC.
fn timestamp() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil from days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Sets `INTERRUPTED` on SIGINT or SIGTERM (a thread with a small runtime waits for them).
fn install_signal_handler() -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            rt.block_on(async move {
                use tokio::signal::unix::{SignalKind, signal};
                let (mut int, mut term) = match (
                    signal(SignalKind::interrupt()),
                    signal(SignalKind::terminate()),
                ) {
                    (Ok(i), Ok(t)) => (i, t),
                    (Err(e), _) | (_, Err(e)) => {
                        let _ = ready_tx.send(Err(e.to_string()));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                // Runs for the life of the process; each signal only sets the flag.
                loop {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                    eprintln!("\ndrill: interrupted; stopping processes and removing namespaces…");
                    INTERRUPTED.store(true, Ordering::SeqCst);
                }
            });
        })?;
    match ready_rx.recv_timeout(Duration::from_secs(5)) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => bail!("signal handler: {e}"),
        Err(_) => bail!("signal handler did not start"),
    }
}

/// Whether the server has the persistence flags the power-loss drills need. The test-only
/// flags are hidden from `--help`, so each flag is offered to the parser with `--help` after
/// it: clap refuses an unknown flag before it prints the help (exit status 2), and prints the
/// help (exit status 0) when every flag before it parsed.
fn probe_persistence(bin: &std::path::Path) -> Result<(), String> {
    let flags: [&[&str]; 4] = [
        &["--appendfsync", "always"],
        &["--appendonly", "yes"],
        &["--debug-fsync-watermark", "yes"],
        &["--debug-boot-id", "probe"],
    ];
    let mut missing = Vec::new();
    for flag in flags {
        let out = std::process::Command::new(bin)
            .arg("server")
            .args(flag)
            .arg("--help")
            .output()
            .map_err(|e| format!("cannot run {} server --help: {e}", bin.display()))?;
        if !out.status.success() {
            missing.push(flag[0]);
        }
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "`meridian server` takes no {} (persistence has not landed)",
            missing.join(", ")
        ))
    }
}

fn main() -> ExitCode {
    match real_main() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("drill: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn real_main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    if cli.list {
        for (name, what, _) in SCENARIOS {
            println!("{name:<18} {what}");
        }
        return Ok(ExitCode::SUCCESS);
    }
    let started = Instant::now();
    install_signal_handler()?;
    let long = cli.duration.as_deref().map(parse_duration).transpose()?;
    let names: Vec<String> = if cli.scenario.is_empty() {
        SCENARIOS.iter().map(|(n, _, _)| n.to_string()).collect()
    } else {
        cli.scenario.clone()
    };
    for n in &names {
        if !SCENARIOS.iter().any(|(s, _, _)| s == n) {
            bail!("unknown scenario {n:?} (try --list)");
        }
    }
    if cli.seeds.is_empty() {
        bail!("--seeds needs at least one seed");
    }
    let bin = match cli.meridian {
        Some(p) => p,
        None => std::env::current_exe()?
            .parent()
            .context("no directory for the drill's own executable")?
            .join("meridian"),
    };
    if !bin.is_file() {
        bail!(
            "no meridian binary at {} (build it: cargo build --release -p meridian-server, or pass --meridian PATH)",
            bin.display()
        );
    }
    let out = match cli.out {
        Some(p) => p,
        None => PathBuf::from("target/drill").join(timestamp()),
    };
    std::fs::create_dir_all(&out).with_context(|| format!("create {}", out.display()))?;
    let out = out.canonicalize()?;
    let mode = if cli.loopback {
        println!(
            "drill: loopback mode (asked for): sites on 127.0.0.1 with free ports; no packet-level faults"
        );
        NetMode::Loopback
    } else {
        match netns::available() {
            Ok(()) => {
                let swept = netns::sweep_stale();
                if !swept.is_empty() {
                    println!(
                        "drill: removed namespaces left by dead drill runs: {}",
                        swept.join(", ")
                    );
                }
                NetMode::Netns
            }
            Err(why) => {
                println!(
                    "drill: no network namespaces ({why}): falling back to loopback ports on 127.0.0.1; no packet-level faults"
                );
                NetMode::Loopback
            }
        }
    };
    let persistence = probe_persistence(&bin);
    if let Err(why) = &persistence {
        println!("drill: power-loss drills will be SKIPPED: {why}");
    }
    let ctx = Ctx {
        bin: bin.canonicalize()?,
        out: out.clone(),
        mode,
        sites: cli.sites,
        long,
        rate: cli.rate.min(workload::RATE_MAX),
        persistence,
        runs: AtomicU32::new(0),
    };
    println!(
        "drill: {} sites, seeds {:?}, {} mode, server {}, output {}",
        ctx.sites,
        cli.seeds,
        if long.is_some() { "long" } else { "short" },
        ctx.bin.display(),
        out.display()
    );
    let mut outcomes = Vec::new();
    'all: for name in &names {
        let every_seed = long.is_some() || SCENARIOS.iter().any(|(n, _, e)| n == name && *e);
        let seeds: Vec<u64> = if every_seed {
            cli.seeds.clone()
        } else {
            cli.seeds.iter().take(1).copied().collect()
        };
        for seed in seeds {
            if INTERRUPTED.load(Ordering::SeqCst) {
                break 'all;
            }
            outcomes.push(scenario::run(&ctx, name, seed));
        }
    }
    let text = report::summary(&outcomes, &out.display().to_string(), started.elapsed());
    let _ = std::fs::write(out.join("report.txt"), format!("{text}\n"));
    println!("{text}");
    let failed = outcomes.iter().any(|o| o.status == Status::Fail);
    let ran = outcomes
        .iter()
        .filter(|o| scenario::counted(o.status))
        .count();
    if INTERRUPTED.load(Ordering::SeqCst) {
        return Ok(ExitCode::from(130));
    }
    Ok(if failed || ran == 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("60s").unwrap(), Duration::from_secs(60));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("48h").is_err());
    }

    #[test]
    fn timestamp_shape() {
        let t = timestamp();
        assert_eq!(t.len(), 15, "{t}");
        assert_eq!(t.as_bytes()[8], b'-');
    }
}

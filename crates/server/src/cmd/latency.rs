//! LATENCY HISTOGRAM, DOCTOR and GRAPH (Redis 7.0 `latency.c`, `sparkline.c`); LATEST,
//! HISTORY, RESET and HELP are in `server`. INFO latencystats is written here too.
//!
//! Per-command histograms are `stats::LatencyHistogram`s, filled by `cmd::call` while
//! `latency-tracking` is on; events (`command`, `fast-command`, `expire-cycle`) are the
//! latency monitor's (`stats::LatencyMonitor`).

use std::fmt::Write as _;

use super::{Ctx, Handler};
use crate::error::CmdError;
use crate::shard::Shard;
use crate::stats::{LatencyEvent, LatencyHistogram};

pub const HANDLERS: &[(&str, Handler)] = &[
    ("latency|histogram", histogram),
    ("latency|doctor", doctor),
    ("latency|graph", graph),
];

/// Columns of LATENCY GRAPH (`LATENCY_GRAPH_COLS`).
const GRAPH_COLS: usize = 80;
/// Rows of the sparkline (Redis renders 4).
const GRAPH_ROWS: usize = 4;

/// Writes one command's `{calls, histogram_usec}` map.
fn reply_cdf(out: &mut crate::resp::reply::Reply, name: &str, h: &LatencyHistogram) {
    out.bulk(name.as_bytes());
    out.map(2);
    out.bulk(b"calls");
    out.int(i64::try_from(h.total()).unwrap_or(i64::MAX));
    out.bulk(b"histogram_usec");
    let cdf = h.cdf();
    out.map(cdf.len());
    for (us, n) in cdf {
        out.int(i64::try_from(us).unwrap_or(i64::MAX));
        out.int(i64::try_from(n).unwrap_or(i64::MAX));
    }
}

/// LATENCY HISTOGRAM [command ...]: per command, its calls and the cumulative distribution
/// of their latencies; a container names its subcommands; unknown names are skipped.
fn histogram(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let table = ctx.shard.table;
    let mut picked: Vec<usize> = Vec::new();
    let names = argv.get(2..).unwrap_or_default();
    if names.is_empty() {
        picked.extend(table.specs.iter().map(|s| s.idx));
    } else {
        for n in names {
            let spec = match std::str::from_utf8(n).ok().and_then(|t| t.split_once('|')) {
                Some((c, sub)) => table.lookup_sub(c, sub.as_bytes()),
                None => table.lookup(n),
            };
            let Some(spec) = spec else { continue };
            picked.push(spec.idx);
            if spec.is_container {
                picked.extend(table.subcommands(spec.meta.name).map(|s| s.idx));
            }
        }
    }
    let stats = &ctx.shard.stats.commands;
    let with_data: Vec<(&str, &LatencyHistogram)> = picked
        .iter()
        .filter_map(|&i| {
            let h = stats.get(i)?.latency.as_deref()?;
            Some((table.specs.get(i)?.meta.name, h))
        })
        .collect();
    ctx.out.map(with_data.len());
    for (name, h) in with_data {
        reply_cdf(ctx.out, name, h);
    }
    Ok(())
}

/// INFO latencystats: `latency_percentiles_usec_<command>:p50=...,p99=...` for every command
/// with a histogram, at the percentiles of `latency-tracking-info-percentiles`.
pub fn info_latencystats(shard: &Shard, out: &mut String) {
    if !shard.config.latency_tracking {
        return;
    }
    let percentiles =
        crate::config::params::percentiles(&shard.config.latency_tracking_info_percentiles);
    for spec in &shard.table.specs {
        let Some(h) = shard
            .stats
            .commands
            .get(spec.idx)
            .and_then(|s| s.latency.as_deref())
        else {
            continue;
        };
        let _ = write!(out, "latency_percentiles_usec_{}:", spec.meta.name);
        for (j, p) in percentiles.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            let _ = write!(
                out,
                "p{}={:.3}",
                crate::config::params::format_percentile(*p),
                h.value_at_percentile(*p) as f64 / 1000.0
            );
        }
        out.push_str("\r\n");
    }
}

/// Statistics of one event's samples (`analyzeLatencyForEvent`).
struct EventStats {
    samples: u64,
    avg: u64,
    mad: u64,
    period_s: u64,
}

fn analyze(e: &LatencyEvent, now_s: u64) -> EventStats {
    let n = e.samples.len() as u64;
    if n == 0 {
        return EventStats {
            samples: 0,
            avg: 0,
            mad: 0,
            period_s: 0,
        };
    }
    let sum: u64 = e.samples.iter().map(|s| s.1).sum();
    let avg = sum / n;
    let oldest = e.samples.iter().map(|s| s.0).min().unwrap_or(now_s);
    let period_s = now_s.saturating_sub(oldest).max(1);
    let mad = e.samples.iter().map(|s| s.1.abs_diff(avg)).sum::<u64>() / n;
    EventStats {
        samples: n,
        avg,
        mad,
        period_s,
    }
}

/// Bytes of transparent huge pages the process holds (`THPGetAnonHugePagesSize`).
fn anon_huge_pages_bytes() -> u64 {
    let text = std::fs::read_to_string("/proc/self/smaps_rollup").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("AnonHugePages:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// LATENCY DOCTOR: Redis's report and advice, for the events Meridian records.
fn doctor(ctx: &mut Ctx<'_>, _argv: &[&[u8]]) -> Result<(), CmdError> {
    let now_s = ctx.now_ms / 1000;
    let report = latency_report(ctx.shard, now_s, anon_huge_pages_bytes() > 0);
    ctx.out.verbatim(b"txt", report.as_bytes());
    Ok(())
}

fn latency_report(shard: &Shard, now_s: u64, thp: bool) -> String {
    let threshold = shard.config.latency_monitor_threshold;
    let events = &shard.latency.events;
    if events.is_empty() && threshold == 0 {
        return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n".to_string();
    }
    let mut report = String::new();
    let (mut slowlog_enabled, mut slowlog_tuning, mut slowlog_inspect) = (false, false, false);
    let (mut scheduler, mut hz, mut large_objects) = (false, false, false);
    let mut advices = 0;
    for (n, (name, e)) in events.iter().enumerate() {
        if n == 0 {
            report.push_str("Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you Dave?\n\n");
        }
        let ls = analyze(e, now_s);
        let _ = write!(
            report,
            "{}. {}: {} latency spikes (average {}ms, mean deviation {}ms, period {:.2} sec). Worst all time event {}ms.",
            n + 1,
            name,
            ls.samples,
            ls.avg,
            ls.mad,
            ls.period_s as f64 / ls.samples.max(1) as f64,
            e.max_ms
        );
        match name.as_str() {
            "command" => {
                let slower_than = shard.config.slowlog_log_slower_than;
                if slower_than < 0 {
                    slowlog_enabled = true;
                    advices += 1;
                } else if (slower_than / 1000) as u64 > threshold {
                    slowlog_tuning = true;
                    advices += 1;
                }
                slowlog_inspect = true;
                large_objects = true;
                advices += 2;
            }
            "fast-command" => {
                scheduler = true;
                advices += 1;
            }
            "expire-cycle" => {
                hz = true;
                large_objects = true;
                advices += 2;
            }
            _ => {}
        }
        report.push('\n');
    }
    if thp {
        advices += 1;
    }
    if events.is_empty() && advices == 0 {
        report.push_str("Dave, no latency spike was observed during the lifetime of this Redis instance, not in the slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things over.\n");
        return report;
    }
    if advices == 0 {
        report.push_str("\nWhile there are latency events logged, I'm not able to suggest any easy fix. Please use the Redis community to get some help, providing this report in your help request.\n");
        return report;
    }
    report.push_str("\nI have a few advices for you:\n\n");
    if slowlog_enabled {
        let _ = writeln!(
            report,
            "- There are latency issues with potentially slow commands you are using. Try to enable the Slow Log Redis feature using the command 'CONFIG SET slowlog-log-slower-than {}'. If the Slow log is disabled Redis is not able to log slow commands execution for you.",
            threshold * 1000
        );
    }
    if slowlog_tuning {
        let _ = writeln!(
            report,
            "- Your current Slow Log configuration only logs events that are slower than your configured latency monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than {}'.",
            threshold * 1000
        );
    }
    if slowlog_inspect {
        report.push_str("- Check your Slow Log to understand what are the commands you are running which are too slow to execute. Please check https://redis.io/commands/slowlog for more information.\n");
    }
    if scheduler {
        report.push_str("- The system is slow to execute Redis code paths not containing system calls. This usually means the system does not provide Redis CPU time to run for long periods. You should try to:\n  1) Lower the system load.\n  2) Use a computer / VM just for Redis if you are running other software in the same system.\n  3) Check if you have a \"noisy neighbour\" problem.\n  4) Check with 'redis-cli --intrinsic-latency 100' what is the intrinsic latency in your system.\n  5) Check if the problem is allocator-related by recompiling Redis with MALLOC=libc, if you are using Jemalloc. However this may create fragmentation problems.\n");
    }
    if hz && shard.config.hz < 100 {
        report.push_str("- In order to make the Redis keys expiring process more incremental, try to set the 'hz' configuration parameter to 100 using 'CONFIG SET hz 100'.\n");
    }
    if large_objects {
        report.push_str("- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking operation. If you have very large objects that are often deleted, expired, or evicted, try to fragment those objects into multiple smaller objects.\n");
    }
    if thp {
        report.push_str("- I detected a non zero amount of anonymous huge pages used by your process. This creates very serious latency events in different conditions, especially when Redis is persisting on disk. To disable THP support use the command 'echo never > /sys/kernel/mm/transparent_hugepage/enabled', make sure to also add it into /etc/rc.local so that the command will be executed again after a reboot. Note that even if you have already disabled THP, you still need to restart the Redis process to get rid of the huge pages already created.\n");
    }
    report
}

/// LATENCY GRAPH event: Redis's ASCII sparkline of the event's samples.
fn graph(ctx: &mut Ctx<'_>, argv: &[&[u8]]) -> Result<(), CmdError> {
    let name = String::from_utf8_lossy(argv.get(2).copied().unwrap_or_default()).into_owned();
    let Some(e) = ctx.shard.latency.events.get(&name) else {
        return Err(CmdError::Err(format!(
            "No samples available for event '{name}'"
        )));
    };
    let text = sparkline_graph(&name, e, ctx.now_ms / 1000);
    ctx.out.verbatim(b"txt", text.as_bytes());
    Ok(())
}

/// `latencyCommandGenSparkeline`: a title line, a rule, the filled sparkline with each
/// sample's age as its label.
fn sparkline_graph(name: &str, e: &LatencyEvent, now_s: u64) -> String {
    let samples: Vec<(f64, String)> = e
        .samples
        .iter()
        .map(|&(t, ms)| {
            let age = now_s.saturating_sub(t);
            let label = if age < 60 {
                format!("{age}s")
            } else if age < 3600 {
                format!("{}m", age / 60)
            } else if age < 86_400 {
                format!("{}h", age / 3600)
            } else {
                format!("{}d", age / 86_400)
            };
            (ms as f64, label)
        })
        .collect();
    let max = e.samples.iter().map(|s| s.1).max().unwrap_or(0);
    let min = e.samples.iter().map(|s| s.1).min().unwrap_or(0);
    let mut out = format!(
        "{name} - high {max} ms, low {min} ms (all time high {} ms)\n",
        e.max_ms
    );
    out.push_str(&"-".repeat(GRAPH_COLS));
    out.push('\n');
    let (lo, hi) = (min as f64, max as f64);
    for (j, chunk) in samples.chunks(GRAPH_COLS).enumerate() {
        if j > 0 {
            out.push('\n');
        }
        render_range(&mut out, chunk, lo, hi);
    }
    out
}

/// `sparklineRenderRange` with SPARKLINE_FILL: rows of `_o#` (and `|` below the top row),
/// then the labels written downwards, one character per row.
fn render_range(out: &mut String, seq: &[(f64, String)], min: f64, max: f64) {
    const FILL: [char; 3] = ['_', 'o', '#'];
    let charset_len = FILL.len() as i64;
    let rows = GRAPH_ROWS as i64;
    let steps = charset_len * rows;
    let relmax = if max - min == 0.0 { 1.0 } else { max - min };
    let step_of = |v: f64| -> i64 {
        let step = (((v - min) * steps as f64) as i64) as f64 / relmax;
        (step as i64).clamp(0, steps - 1)
    };
    let has_labels = seq.iter().any(|s| !s.1.is_empty());
    let mut row: i64 = 0;
    loop {
        let mut line = vec![' '; seq.len()];
        let mut any = false;
        for (j, (v, label)) in seq.iter().enumerate() {
            if row < rows {
                any = true;
                let charidx = step_of(*v) - (rows - row - 1) * charset_len;
                if let Some(c) = line.get_mut(j) {
                    if (0..charset_len).contains(&charidx) {
                        *c = FILL.get(charidx as usize).copied().unwrap_or(' ');
                    } else if charidx >= charset_len {
                        *c = '|';
                    }
                }
            } else {
                // One blank row between the graph and the labels.
                if has_labels && row - rows < 1 {
                    any = true;
                    break;
                }
                let at = (row - rows - 1) as usize;
                if let Some(ch) = label.chars().nth(at) {
                    any = true;
                    if let Some(c) = line.get_mut(j) {
                        *c = ch;
                    }
                }
            }
        }
        if !any {
            break;
        }
        row += 1;
        out.extend(line);
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparkline_like_redis() {
        let mut e = LatencyEvent::default();
        for (t, ms) in [(100, 300), (101, 400), (102, 500)] {
            e.samples.push_back((t, ms));
        }
        e.max_ms = 500;
        let g = sparkline_graph("command", &e, 105);
        assert_eq!(
            g,
            format!(
                "command - high 500 ms, low 300 ms (all time high 500 ms)\n{}\n  #\n _|\n ||\n_||\n   \n543\nsss\n",
                "-".repeat(80)
            )
        );
    }

    #[test]
    fn histogram_cdf_and_percentiles() {
        let mut h = LatencyHistogram::default();
        for ns in [500, 1500, 1500, 70_000, 2_000_000_000] {
            h.record(ns);
        }
        assert_eq!(h.total(), 5);
        assert_eq!(h.cdf(), vec![(1, 1), (2, 3), (132, 4), (1_082_130, 5)]);
        assert_eq!(h.value_at_percentile(50.0), 1503);
        assert_eq!(h.value_at_percentile(100.0), 1_002_438_655);
    }
}

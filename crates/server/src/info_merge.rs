//! INFO for a process of several shards: every thread writes its own INFO (its shard's
//! keyspace, persistence and replication, its connections' counters); this merges the texts
//! field by field into one server's.
//!
//! Sections and fields keep the order in which they first appear. A field every text gives
//! the same value keeps it; otherwise its rule decides: counters add up, gauges of "any"
//! take the largest, times of the last success take the oldest, statuses take "err" when any
//! shard has it, keyspace and command statistics add up per database and per command, and
//! the CRDT section's per-peer lines merge link states (the worst) and counters (added).
//! Fields of one thread only (`crdt_shard_N`) are kept as they are.

use std::collections::BTreeMap;

/// How a field's values merge when they differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rule {
    Sum,
    Max,
    Min,
    /// "err" (or "down"...) if any text has it: the worst value by `severity`.
    Worst,
    /// Per-database `keys=..,expires=..,avg_ttl=..`.
    Keyspace,
    /// `cmdstat_*`: calls, usec, rejected and failed added, usec_per_call recomputed.
    CmdStat,
    /// Comma-separated `k=v` subfields, each by `sub_rule`.
    Subfields,
    /// `replica=hlc` pairs joined by ';': union, the highest per replica.
    VersionVector,
    First,
}

fn rule(key: &str) -> Rule {
    if key.len() > 2 && key.starts_with("db") && key.bytes().skip(2).all(|b| b.is_ascii_digit()) {
        return Rule::Keyspace;
    }
    if key.starts_with("cmdstat_") {
        return Rule::CmdStat;
    }
    // `latency_percentiles_usec_<cmd>:p50=..,p99=..`: each thread's percentiles of the
    // commands it ran; the merged line gives the largest (an upper bound of the process's:
    // percentiles do not add up, LATENCY HISTOGRAM merges the exact distributions).
    if key.starts_with("errorstat_")
        || key.starts_with("crdt_peer_")
        || key.starts_with("latency_percentiles_usec_")
    {
        return Rule::Subfields;
    }
    match key {
        "connected_clients"
        | "blocked_clients"
        | "total_connections_received"
        | "total_commands_processed"
        | "instantaneous_ops_per_sec"
        | "total_net_input_bytes"
        | "total_net_output_bytes"
        | "rejected_connections"
        | "expired_keys"
        | "expire_cycle_cpu_milliseconds"
        | "keyspace_hits"
        | "keyspace_misses"
        | "total_error_replies"
        | "dump_payload_sanitizations"
        | "rdb_changes_since_last_save"
        | "rdb_saves"
        | "rdb_last_load_keys_loaded"
        | "aof_rewrites"
        | "aof_current_size"
        | "aof_base_size"
        | "aof_segments"
        | "aof_fsyncs"
        | "aof_position"
        | "aof_durable_position"
        | "aof_snapshot_position"
        | "aof_load_records"
        | "lazyfree_pending_objects"
        | "lazyfreed_objects"
        | "crdt_seq"
        | "crdt_oplog_bytes"
        | "crdt_oplog_ops"
        | "crdt_frames_refused"
        | "crdt_gc_pending_keys"
        | "crdt_gc_waiting_full_sync"
        | "crdt_gc_collected_keys"
        | "crdt_gc_dropped_keys"
        | "crdt_gc_retired_ttls"
        | "crdt_type_conflicts"
        | "crdt_ops_applied_over_maxmemory"
        | "crdt_evicted_keys_marked"
        | "crdt_evicted_writes_not_applied"
        | "crdt_evictions_held_back"
        | "evicted_keys"
        | "tracking_total_keys"
        | "tracking_total_items"
        | "aof_rewrites_consecutive_failures" => Rule::Sum,
        "client_recent_max_input_buffer"
        | "client_recent_max_output_buffer"
        | "rdb_bgsave_in_progress"
        | "aof_rewrite_in_progress"
        | "aof_rewrite_scheduled"
        | "aof_pending_rewrite"
        | "rdb_last_bgsave_time_sec"
        | "rdb_current_bgsave_time_sec"
        | "aof_last_rewrite_time_sec"
        | "aof_current_rewrite_time_sec"
        | "aof_fsync_p50_us"
        | "aof_fsync_p99_us"
        | "aof_fsync_max_us"
        | "aof_load_time_ms"
        | "used_memory_peak"
        | "crdt_clock"
        | "crdt_maxmemory_over"
        | "aof_enabled" => Rule::Max,
        "rdb_last_save_time" => Rule::Min,
        "rdb_last_bgsave_status" | "aof_last_bgrewrite_status" | "aof_last_write_status" => {
            Rule::Worst
        }
        "crdt_version_vector" => Rule::VersionVector,
        _ => Rule::First,
    }
}

/// How a subfield of a `k=v,k=v` line merges.
fn sub_rule(key: &str) -> Rule {
    match key {
        "in_link" | "out_link" | "quarantined" | "last_error" => Rule::Worst,
        "lag_ops" | "lag_bytes" | "ops_in" | "in_bytes" | "in_bytes_raw" | "out_bytes"
        | "out_bytes_raw" | "partial_syncs_in" | "full_syncs_in" | "partial_syncs_out"
        | "full_syncs_out" | "count" => Rule::Sum,
        "lag_ms" | "lag_p50_ms" | "lag_p99_ms" => Rule::Max,
        // A percentile of `latency_percentiles_usec_*` (p50, p99.9...).
        k if k.strip_prefix('p').is_some_and(|n| {
            !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit() || b == b'.')
        }) =>
        {
            Rule::Max
        }
        "acked_vv" => Rule::VersionVector,
        _ => Rule::First,
    }
}

/// Higher is worse.
fn severity(v: &str) -> u8 {
    match v {
        "err" | "down" | "1" => 4,
        "connecting" => 3,
        "full_sync" => 2,
        "none" | "ok" | "up" | "0" => 0,
        _ => 1,
    }
}

fn merge_values(rule: Rule, values: &[&str]) -> String {
    let first = values.first().copied().unwrap_or_default();
    if values.iter().all(|v| *v == first)
        && !matches!(
            rule,
            Rule::Sum | Rule::Keyspace | Rule::CmdStat | Rule::Subfields
        )
    {
        return first.to_string();
    }
    let ints = || values.iter().filter_map(|v| v.parse::<i64>().ok());
    match rule {
        Rule::Sum => {
            if values.iter().all(|v| v.parse::<i64>().is_ok()) {
                ints().fold(0i64, i64::saturating_add).to_string()
            } else {
                first.to_string()
            }
        }
        Rule::Max if values.iter().all(|v| v.parse::<i64>().is_ok()) => {
            ints().max().map_or(first.to_string(), |n| n.to_string())
        }
        // Decimals (percentiles in milliseconds): the largest, written as its thread wrote it.
        Rule::Max => values
            .iter()
            .copied()
            .filter_map(|v| Some((v.parse::<f64>().ok()?, v)))
            .max_by(|a, b| a.0.total_cmp(&b.0))
            .map_or(first, |(_, v)| v)
            .to_string(),
        Rule::Min => ints().min().map_or(first.to_string(), |n| n.to_string()),
        Rule::Worst => values
            .iter()
            .copied()
            .max_by_key(|v| severity(v))
            .unwrap_or(first)
            .to_string(),
        Rule::VersionVector => {
            let mut vv: BTreeMap<&str, u64> = BTreeMap::new();
            for v in values {
                for pair in v.split(';').filter(|p| !p.is_empty()) {
                    if let Some((r, h)) = pair.split_once('=') {
                        let h = h.parse::<u64>().unwrap_or(0);
                        let e = vv.entry(r).or_insert(0);
                        *e = (*e).max(h);
                    }
                }
            }
            vv.iter()
                .map(|(r, h)| format!("{r}={h}"))
                .collect::<Vec<_>>()
                .join(";")
        }
        Rule::Keyspace => {
            let (mut keys, mut expires, mut ttl_weighted) = (0i64, 0i64, 0i128);
            for v in values {
                let f = subfields(v);
                let get = |k: &str| {
                    f.iter()
                        .find(|(n, _)| *n == k)
                        .and_then(|(_, v)| v.parse::<i64>().ok())
                        .unwrap_or(0)
                };
                keys += get("keys");
                expires += get("expires");
                ttl_weighted += i128::from(get("avg_ttl")) * i128::from(get("expires"));
            }
            let avg = if expires > 0 {
                (ttl_weighted / i128::from(expires)) as i64
            } else {
                0
            };
            format!("keys={keys},expires={expires},avg_ttl={avg}")
        }
        Rule::CmdStat => {
            let mut sums: [i64; 4] = [0; 4];
            let names = ["calls", "usec", "rejected_calls", "failed_calls"];
            for v in values {
                for (k, val) in subfields(v) {
                    if let Some(i) = names.iter().position(|n| *n == k) {
                        if let Some(s) = sums.get_mut(i) {
                            *s += val.parse::<i64>().unwrap_or(0);
                        }
                    }
                }
            }
            let [calls, usec, rejected, failed] = sums;
            let per = if calls == 0 {
                0.0
            } else {
                usec as f64 / calls as f64
            };
            format!(
                "calls={calls},usec={usec},usec_per_call={per:.2},rejected_calls={rejected},failed_calls={failed}"
            )
        }
        Rule::Subfields => {
            let parsed: Vec<Vec<(&str, &str)>> = values.iter().map(|v| subfields(v)).collect();
            let mut keys: Vec<&str> = Vec::new();
            for p in &parsed {
                for (k, _) in p {
                    if !keys.contains(k) {
                        keys.push(k);
                    }
                }
            }
            keys.iter()
                .map(|k| {
                    let vals: Vec<&str> = parsed
                        .iter()
                        .filter_map(|p| p.iter().find(|(n, _)| n == k).map(|(_, v)| *v))
                        .collect();
                    format!("{k}={}", merge_values(sub_rule(k), &vals))
                })
                .collect::<Vec<_>>()
                .join(",")
        }
        Rule::First => first.to_string(),
    }
}

/// Merges `k=v,k=v` lines (one peer site's links) by the subfield rules.
pub fn merge_subfields(values: &[&str]) -> String {
    merge_values(Rule::Subfields, values)
}

fn subfields(v: &str) -> Vec<(&str, &str)> {
    v.split(',').filter_map(|p| p.split_once('=')).collect()
}

/// One INFO text as sections of (key, value) lines, in order.
fn parse(text: &str) -> Vec<(&str, Vec<(&str, &str)>)> {
    let mut out: Vec<(&str, Vec<(&str, &str)>)> = Vec::new();
    for line in text.split("\r\n") {
        if let Some(title) = line.strip_prefix("# ") {
            out.push((title, Vec::new()));
        } else if let Some((k, v)) = line.split_once(':') {
            match out.last_mut() {
                Some(s) => s.1.push((k, v)),
                None => out.push(("", vec![(k, v)])),
            }
        }
    }
    out
}

/// Merges the INFO texts of every thread into one (see the module doc).
pub fn merge(texts: &[&[u8]]) -> String {
    let texts: Vec<String> = texts
        .iter()
        .map(|t| String::from_utf8_lossy(t).into_owned())
        .collect();
    let parsed: Vec<_> = texts.iter().map(|t| parse(t)).collect();
    let mut titles: Vec<&str> = Vec::new();
    for p in &parsed {
        for (t, _) in p {
            if !titles.contains(t) {
                titles.push(t);
            }
        }
    }
    let mut out = String::with_capacity(texts.first().map_or(4096, String::len));
    for (i, title) in titles.iter().enumerate() {
        if i > 0 {
            out.push_str("\r\n");
        }
        if !title.is_empty() {
            out.push_str("# ");
            out.push_str(title);
            out.push_str("\r\n");
        }
        let sections: Vec<&Vec<(&str, &str)>> = parsed
            .iter()
            .filter_map(|p| p.iter().find(|(t, _)| t == title).map(|(_, f)| f))
            .collect();
        let mut keys: Vec<&str> = Vec::new();
        for s in &sections {
            for (k, _) in s.iter() {
                if !keys.contains(k) {
                    keys.push(k);
                }
            }
        }
        if *title == "Errorstats" {
            keys.sort_unstable();
        }
        for k in keys {
            let values: Vec<&str> = sections
                .iter()
                .filter_map(|s| s.iter().find(|(n, _)| *n == k).map(|(_, v)| *v))
                .collect();
            out.push_str(k);
            out.push(':');
            out.push_str(&merge_values(rule(k), &values));
            out.push_str("\r\n");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_text_is_kept_as_it_is() {
        let t = "# Server\r\nredis_version:7.0.15\r\n\r\n# Keyspace\r\ndb0:keys=2,expires=0,avg_ttl=0\r\n";
        assert_eq!(merge(&[t.as_bytes()]), t);
    }

    #[test]
    fn fields_merge_by_rule() {
        let a = "# Clients\r\nconnected_clients:2\r\nmaxclients:10000\r\n\r\n# Persistence\r\nrdb_last_save_time:100\r\naof_last_write_status:ok\r\n\r\n# Commandstats\r\ncmdstat_get:calls=2,usec=10,usec_per_call=5.00,rejected_calls=0,failed_calls=0\r\n\r\n# Keyspace\r\ndb0:keys=2,expires=1,avg_ttl=100\r\n\r\n# CRDT\r\ncrdt_version_vector:a=5;b=7\r\ncrdt_peer_b:addr=x,in_link=up,ops_in=3,lag_ms=4\r\n";
        let b = "# Clients\r\nconnected_clients:1\r\nmaxclients:10000\r\n\r\n# Persistence\r\nrdb_last_save_time:90\r\naof_last_write_status:err\r\n\r\n# Commandstats\r\ncmdstat_get:calls=2,usec=2,usec_per_call=1.00,rejected_calls=1,failed_calls=0\r\ncmdstat_set:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n\r\n# Keyspace\r\ndb0:keys=3,expires=1,avg_ttl=300\r\ndb2:keys=1,expires=0,avg_ttl=0\r\n\r\n# CRDT\r\ncrdt_version_vector:c=1;b=9\r\ncrdt_peer_b:addr=x,in_link=connecting,ops_in=2,lag_ms=9\r\n";
        let m = merge(&[a.as_bytes(), b.as_bytes()]);
        for want in [
            "connected_clients:3\r\n",
            "maxclients:10000\r\n",
            "rdb_last_save_time:90\r\n",
            "aof_last_write_status:err\r\n",
            "cmdstat_get:calls=4,usec=12,usec_per_call=3.00,rejected_calls=1,failed_calls=0\r\n",
            "cmdstat_set:calls=1,",
            "db0:keys=5,expires=2,avg_ttl=200\r\n",
            "db2:keys=1,expires=0,avg_ttl=0\r\n",
            "crdt_version_vector:a=5;b=9;c=1\r\n",
            "crdt_peer_b:addr=x,in_link=connecting,ops_in=5,lag_ms=9\r\n",
        ] {
            assert!(m.contains(want), "{want:?} not in:\n{m}");
        }
        assert!(m.starts_with("# Clients\r\n"));
        assert!(m.contains("\r\n\r\n# Persistence\r\n"));
    }

    #[test]
    fn latency_percentiles_take_each_threads_largest() {
        let a =
            "# Latencystats\r\nlatency_percentiles_usec_set:p50=1.003,p99=16.127,p99.9=16.127\r\n";
        let b = "# Latencystats\r\nlatency_percentiles_usec_set:p50=2.007,p99=4.015,p99.9=16.127\r\nlatency_percentiles_usec_get:p50=1.003,p99=1.003,p99.9=1.003\r\n";
        let m = merge(&[a.as_bytes(), b.as_bytes()]);
        assert!(
            m.contains("latency_percentiles_usec_set:p50=2.007,p99=16.127,p99.9=16.127\r\n"),
            "{m}"
        );
        assert!(m.contains("latency_percentiles_usec_get:p50=1.003,p99=1.003,p99.9=1.003\r\n"));
    }
}

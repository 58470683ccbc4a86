//! Prometheus text for `/metrics`, built from every shard's figures at scrape time.
//!
//! Names follow redis_exporter's (`redis_*`), so dashboards made for Redis work unchanged;
//! what only Meridian has is `meridian_*`. Counters of several shards are summed; a
//! per-peer figure takes the worst shard (largest lag, lowest link status).

use prometheus::proto::{
    Bucket, Counter, Gauge, Histogram, LabelPair, Metric, MetricFamily, MetricType,
};

use super::figures::ShardFigures;

/// The figures of the process as a whole (not of a shard).
#[derive(Clone, Debug, Default)]
pub struct ProcessFigures {
    pub site: String,
    pub deployment_id: String,
    pub version: &'static str,
    pub uptime_s: u64,
    /// Shards configured, and how many answered this scrape.
    pub shards: u64,
    pub shards_answered: u64,
    pub loading: bool,
    pub memory_used_bytes: u64,
    pub memory_rss_bytes: u64,
    pub memory_max_bytes: u64,
    pub cpu_user_seconds: f64,
    pub cpu_sys_seconds: f64,
}

/// Metric families in the order they were first named.
#[derive(Default)]
struct Families {
    list: Vec<MetricFamily>,
}

impl Families {
    fn push(&mut self, name: &str, help: &str, ty: MetricType, labels: &[(&str, &str)], m: Metric) {
        let i = match self.list.iter().position(|f| f.name() == name) {
            Some(i) => i,
            None => {
                let mut f = MetricFamily::default();
                f.set_name(name.to_string());
                f.set_help(help.to_string());
                f.set_field_type(ty);
                self.list.push(f);
                self.list.len() - 1
            }
        };
        let mut m = m;
        m.set_label(
            labels
                .iter()
                .map(|(k, v)| {
                    let mut l = LabelPair::default();
                    l.set_name((*k).to_string());
                    l.set_value((*v).to_string());
                    l
                })
                .collect(),
        );
        if let Some(f) = self.list.get_mut(i) {
            f.mut_metric().push(m);
        }
    }

    fn counter(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: f64) {
        let mut c = Counter::default();
        c.set_value(v);
        let mut m = Metric::default();
        m.set_counter(c);
        self.push(name, help, MetricType::COUNTER, labels, m);
    }

    fn gauge(&mut self, name: &str, help: &str, labels: &[(&str, &str)], v: f64) {
        let mut m = Metric::default();
        let mut g = Gauge::default();
        g.set_value(v);
        m.set_gauge(g);
        self.push(name, help, MetricType::GAUGE, labels, m);
    }

    /// `buckets`: (upper bound, cumulative count), increasing bounds.
    fn histogram(&mut self, name: &str, help: &str, buckets: &[(f64, u64)], count: u64, sum: f64) {
        let mut h = Histogram::default();
        h.set_sample_count(count);
        h.set_sample_sum(sum);
        h.set_bucket(
            buckets
                .iter()
                .map(|(le, n)| {
                    let mut b = Bucket::default();
                    b.set_upper_bound(*le);
                    b.set_cumulative_count(*n);
                    b
                })
                .collect(),
        );
        let mut m = Metric::default();
        m.set_histogram(h);
        self.push(name, help, MetricType::HISTOGRAM, &[], m);
    }
}

/// Sums `f` over the shards.
fn sum(shards: &[ShardFigures], f: impl Fn(&ShardFigures) -> u64) -> f64 {
    shards.iter().map(f).sum::<u64>() as f64
}

/// The `/metrics` body.
pub fn render(p: &ProcessFigures, shards: &[ShardFigures]) -> String {
    let mut m = Families::default();
    redis_families(&mut m, p, shards);
    meridian_families(&mut m, p, shards);
    let mut out = String::new();
    if let Err(e) = prometheus::TextEncoder::new().encode_utf8(&m.list, &mut out) {
        tracing::warn!(error = %e, "metrics encoding failed");
    }
    out
}

/// redis_exporter's names for what Redis also has.
fn redis_families(m: &mut Families, p: &ProcessFigures, s: &[ShardFigures]) {
    m.gauge(
        "redis_up",
        "Whether the server answers (1: every shard answered this scrape).",
        &[],
        f64::from(u8::from(p.shards_answered == p.shards && !p.loading)),
    );
    m.gauge(
        "redis_uptime_in_seconds",
        "Seconds since the process started.",
        &[],
        p.uptime_s as f64,
    );
    m.gauge(
        "redis_connected_clients",
        "Client connections open.",
        &[],
        sum(s, |f| f.connected_clients),
    );
    m.gauge(
        "redis_blocked_clients",
        "Clients blocked in BLPOP and the like.",
        &[],
        sum(s, |f| f.blocked_clients),
    );
    m.counter(
        "redis_connections_received_total",
        "Client connections accepted.",
        &[],
        sum(s, |f| f.connections_received),
    );
    m.counter(
        "redis_rejected_connections_total",
        "Client connections refused (maxclients).",
        &[],
        sum(s, |f| f.rejected_connections),
    );
    m.counter(
        "redis_commands_processed_total",
        "Commands run.",
        &[],
        sum(s, |f| f.commands_processed),
    );
    m.counter(
        "redis_net_input_bytes_total",
        "Bytes read from clients.",
        &[],
        sum(s, |f| f.net_input_bytes),
    );
    m.counter(
        "redis_net_output_bytes_total",
        "Bytes written to clients.",
        &[],
        sum(s, |f| f.net_output_bytes),
    );
    m.counter(
        "redis_keyspace_hits_total",
        "Reads that found their key.",
        &[],
        sum(s, |f| f.keyspace_hits),
    );
    m.counter(
        "redis_keyspace_misses_total",
        "Reads that did not find their key.",
        &[],
        sum(s, |f| f.keyspace_misses),
    );
    m.counter(
        "redis_expired_keys_total",
        "Keys removed by expiry.",
        &[],
        sum(s, |f| f.expired_keys),
    );
    m.counter(
        "redis_evicted_keys_total",
        "Keys evicted for maxmemory, at this site only (other sites keep them).",
        &[],
        sum(s, |f| f.evicted_keys),
    );
    m.counter(
        "redis_error_replies_total",
        "Error replies sent.",
        &[],
        sum(s, |f| f.error_replies),
    );
    m.gauge(
        "redis_memory_used_bytes",
        "Bytes allocated (jemalloc).",
        &[],
        p.memory_used_bytes as f64,
    );
    m.gauge(
        "redis_memory_used_rss_bytes",
        "Resident set size of the process.",
        &[],
        p.memory_rss_bytes as f64,
    );
    m.gauge(
        "redis_memory_max_bytes",
        "maxmemory (0: no limit).",
        &[],
        s.iter()
            .map(|f| f.maxmemory)
            .max()
            .unwrap_or(p.memory_max_bytes) as f64,
    );
    m.counter(
        "redis_cpu_user_seconds_total",
        "User CPU time of the process.",
        &[],
        p.cpu_user_seconds,
    );
    m.counter(
        "redis_cpu_sys_seconds_total",
        "System CPU time of the process.",
        &[],
        p.cpu_sys_seconds,
    );
    let mut cmds: std::collections::BTreeMap<&str, crate::metrics::figures::CommandFigures> =
        Default::default();
    for f in s {
        for (name, c) in &f.commands {
            let e = cmds.entry(name).or_default();
            e.calls += c.calls;
            e.usec += c.usec;
            e.rejected_calls += c.rejected_calls;
            e.failed_calls += c.failed_calls;
        }
    }
    for (name, c) in &cmds {
        m.counter(
            "redis_commands_total",
            "Calls of each command.",
            &[("cmd", name)],
            c.calls as f64,
        );
    }
    for (name, c) in &cmds {
        m.counter(
            "redis_commands_duration_seconds_total",
            "Time spent in each command.",
            &[("cmd", name)],
            c.usec as f64 / 1e6,
        );
    }
    for (name, c) in &cmds {
        m.counter(
            "redis_commands_rejected_calls_total",
            "Calls refused before running (unknown, arity, MULTI...).",
            &[("cmd", name)],
            c.rejected_calls as f64,
        );
        m.counter(
            "redis_commands_failed_calls_total",
            "Calls that ran and replied an error.",
            &[("cmd", name)],
            c.failed_calls as f64,
        );
    }
    let mut errors: std::collections::BTreeMap<&str, u64> = Default::default();
    for f in s {
        for (code, n) in &f.errors {
            *errors.entry(code).or_default() += n;
        }
    }
    for (code, n) in &errors {
        m.counter(
            "redis_errors_total",
            "Error replies by error code.",
            &[("err", code)],
            *n as f64,
        );
    }
    let mut dbs: std::collections::BTreeMap<usize, (u64, u64)> = Default::default();
    for f in s {
        for (db, keys, expires) in &f.dbs {
            let e = dbs.entry(*db).or_default();
            e.0 += keys;
            e.1 += expires;
        }
    }
    for (db, (keys, _)) in &dbs {
        m.gauge(
            "redis_db_keys",
            "Keys in each database.",
            &[("db", &format!("db{db}"))],
            *keys as f64,
        );
    }
    for (db, (_, expiring)) in &dbs {
        m.gauge(
            "redis_db_keys_expiring",
            "Keys with a TTL in each database.",
            &[("db", &format!("db{db}"))],
            *expiring as f64,
        );
    }
}

/// What only Meridian has.
fn meridian_families(m: &mut Families, p: &ProcessFigures, s: &[ShardFigures]) {
    m.gauge(
        "meridian_info",
        "This site's identity (always 1).",
        &[
            ("site", &p.site),
            ("deployment_id", &p.deployment_id),
            ("version", p.version),
        ],
        1.0,
    );
    m.gauge(
        "meridian_shards",
        "Shards of this site.",
        &[],
        p.shards as f64,
    );
    m.gauge(
        "meridian_loading",
        "1 while shards load their data at start.",
        &[],
        f64::from(u8::from(p.loading)),
    );
    m.gauge(
        "meridian_backlog_bytes",
        "Bytes of recent own ops kept in memory for peers that resume.",
        &[],
        sum(s, |f| f.oplog_bytes),
    );
    m.gauge(
        "meridian_backlog_ops",
        "Own ops kept in memory for peers that resume.",
        &[],
        sum(s, |f| f.oplog_ops),
    );
    m.gauge(
        "meridian_oplog_disk_bytes",
        "Bytes of op log segments on disk.",
        &[],
        sum(s, |f| f.log_disk_bytes),
    );
    m.gauge(
        "meridian_gc_pending_keys",
        "Keys holding removal metadata not yet collectable.",
        &[],
        sum(s, |f| f.gc_pending_keys),
    );
    m.gauge(
        "meridian_gc_waiting_full_sync_shards",
        "Shards collecting no metadata until a full sync brings them a retired life's ops a peer holds.",
        &[],
        sum(s, |f| f.gc_waiting_full_sync),
    );
    m.counter(
        "meridian_gc_collected_keys_total",
        "Keys whose removal metadata was collected.",
        &[],
        sum(s, |f| f.gc_collected_keys),
    );
    m.counter(
        "meridian_gc_dropped_keys_total",
        "Keys removed once their last metadata was collected.",
        &[],
        sum(s, |f| f.gc_dropped_keys),
    );
    m.counter(
        "meridian_gc_retired_ttls_total",
        "Writes issued to retire TTL writes that timed nothing (EXPIRE left by a concurrent DEL, PERSIST once no concurrent EXPIRE can arrive).",
        &[],
        sum(s, |f| f.gc_retired_ttls),
    );
    m.counter(
        "meridian_crdt_type_conflicts_total",
        "Concurrent writes of different types to one key.",
        &[],
        sum(s, |f| f.type_conflicts),
    );
    for (i, kind) in crate::stats::EFFECT_KIND_NAMES.iter().enumerate() {
        let n = sum(s, |f| f.remote_lost.get(i).copied().unwrap_or(0));
        m.counter("meridian_crdt_remote_writes_lost_total", "Remote writes that lost on arrival, to a newer write (last writer wins) or to a removal, by kind.", &[("type", kind)], n);
    }
    m.counter(
        "meridian_sync_remote_ops_applied_total",
        "Ops of other sites applied here.",
        &[],
        sum(s, |f| f.remote_ops_applied),
    );
    m.counter(
        "meridian_sync_frames_refused_total",
        "Frames refused from peers (bad origin, clock skew, malformed).",
        &[],
        sum(s, |f| f.frames_refused),
    );
    // Per peer: the worst shard's figure for gauges, the sum for counters.
    let mut peers: Vec<super::figures::PeerFigures> = Vec::new();
    for f in s {
        for pf in &f.peers {
            match peers.iter_mut().find(|x| x.site == pf.site) {
                None => peers.push(pf.clone()),
                Some(x) => {
                    if pf.link_status() > x.link_status() {
                        x.inbound = pf.inbound;
                        x.outbound = pf.outbound;
                    }
                    x.lag_ms = x.lag_ms.max(pf.lag_ms);
                    x.lag_ops += pf.lag_ops;
                    x.lag_bytes += pf.lag_bytes;
                    x.ops_in += pf.ops_in;
                    x.in_wire_bytes += pf.in_wire_bytes;
                    x.out_wire_bytes += pf.out_wire_bytes;
                    x.full_syncs_in += pf.full_syncs_in;
                    x.full_syncs_out += pf.full_syncs_out;
                    x.partial_syncs_in += pf.partial_syncs_in;
                    x.partial_syncs_out += pf.partial_syncs_out;
                    x.quarantined |= pf.quarantined;
                }
            }
        }
    }
    for x in &peers {
        let peer = [("peer", x.site.as_str())];
        m.gauge("meridian_sync_lag_seconds", "Age of the oldest write the peer has not acknowledged, or time since its last ack while the link is down.", &peer, x.lag_ms as f64 / 1000.0);
        m.gauge(
            "meridian_sync_lag_ops",
            "Own ops the peer has not acknowledged.",
            &peer,
            x.lag_ops as f64,
        );
        m.gauge(
            "meridian_sync_lag_bytes",
            "Bytes of own ops the peer has not acknowledged.",
            &peer,
            x.lag_bytes as f64,
        );
        m.gauge(
            "meridian_sync_link_status",
            "0 in sync (both links up), 1 syncing, 2 out of sync (a link down).",
            &peer,
            f64::from(x.link_status()),
        );
        m.gauge(
            "meridian_sync_quarantined",
            "1 when the peer is left out of garbage collection for silence.",
            &peer,
            f64::from(u8::from(x.quarantined)),
        );
        m.counter(
            "meridian_sync_ops_in_total",
            "Ops of the peer applied here.",
            &peer,
            x.ops_in as f64,
        );
        m.counter(
            "meridian_sync_ingress_bytes_total",
            "Bytes received from the peer on the wire.",
            &peer,
            x.in_wire_bytes as f64,
        );
        m.counter(
            "meridian_sync_egress_bytes_total",
            "Bytes sent to the peer on the wire.",
            &peer,
            x.out_wire_bytes as f64,
        );
        for (dir, full, partial) in [
            ("in", x.full_syncs_in, x.partial_syncs_in),
            ("out", x.full_syncs_out, x.partial_syncs_out),
        ] {
            m.counter(
                "meridian_sync_full_syncs_total",
                "Full syncs with the peer, by direction of the data.",
                &[("peer", &x.site), ("direction", dir)],
                full as f64,
            );
            m.counter(
                "meridian_sync_partial_syncs_total",
                "Resumed streams with the peer, by direction of the data.",
                &[("peer", &x.site), ("direction", dir)],
                partial as f64,
            );
        }
    }
    // Fsync durations, all shards' log writers together.
    let with_fsync: Vec<&super::figures::FsyncFigures> =
        s.iter().filter_map(|f| f.fsync.as_ref()).collect();
    if !with_fsync.is_empty() {
        let mut buckets: Vec<(f64, u64)> = crate::persist::writer::FSYNC_BUCKETS_US
            .iter()
            .map(|le| (*le as f64 / 1e6, 0))
            .collect();
        let (mut count, mut sum_us) = (0u64, 0u64);
        for f in with_fsync {
            for ((_, acc), (_, n)) in buckets.iter_mut().zip(f.buckets.iter()) {
                *acc += n;
            }
            count += f.count;
            sum_us += f.sum_us;
        }
        m.histogram(
            "meridian_fsync_duration_seconds",
            "Duration of the op log's fsync passes.",
            &buckets,
            count,
            sum_us as f64 / 1e6,
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_metric_the_dashboard_reads_is_rendered() {
        use crate::metrics::figures::FsyncFigures;
        let f = ShardFigures {
            commands: vec![("set", CommandFigures::default())],
            errors: vec![("ERR".to_string(), 1)],
            dbs: vec![(0, 1, 0)],
            fsync: Some(FsyncFigures::default()),
            peers: vec![PeerFigures {
                site: "b".into(),
                ..PeerFigures::default()
            }],
            ..ShardFigures::default()
        };
        let text = render(&ProcessFigures::default(), &[f]);
        let dashboard = include_str!("../../../../deploy/grafana/meridian.json");
        let mut names = std::collections::BTreeSet::new();
        for start in dashboard
            .match_indices("redis_")
            .chain(dashboard.match_indices("meridian_"))
        {
            let name: String = dashboard[start.0..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            names.insert(name);
        }
        assert!(names.len() > 10, "{names:?}");
        for name in names {
            let family = name.trim_end_matches("_bucket");
            assert!(
                text.contains(&format!("# TYPE {family} ")),
                "the dashboard reads {name}, which /metrics does not have"
            );
        }
    }

    use super::*;
    use crate::metrics::figures::CommandFigures;
    use crate::metrics::figures::PeerFigures;
    use crate::sync::LinkState;

    #[test]
    fn shards_sum_and_names_follow_redis_exporter() {
        let shard = |i: u16, lag: u64| ShardFigures {
            index: i,
            connected_clients: 2,
            commands: vec![(
                "get",
                CommandFigures {
                    calls: 3,
                    usec: 1_500_000,
                    ..CommandFigures::default()
                },
            )],
            errors: vec![("WRONGTYPE".to_string(), 1)],
            dbs: vec![(0, 10, 1)],
            peers: vec![PeerFigures {
                site: "b".into(),
                inbound: LinkState::Up,
                outbound: if i == 0 {
                    LinkState::Up
                } else {
                    LinkState::Down
                },
                lag_ms: lag,
                ..PeerFigures::default()
            }],
            ..ShardFigures::default()
        };
        let p = ProcessFigures {
            site: "a".into(),
            shards: 2,
            shards_answered: 2,
            ..ProcessFigures::default()
        };
        let text = render(&p, &[shard(0, 5), shard(1, 1500)]);
        for line in [
            "redis_up 1",
            "redis_connected_clients 4",
            "redis_commands_total{cmd=\"get\"} 6",
            "redis_commands_duration_seconds_total{cmd=\"get\"} 3",
            "redis_errors_total{err=\"WRONGTYPE\"} 2",
            "redis_db_keys{db=\"db0\"} 20",
            "meridian_sync_lag_seconds{peer=\"b\"} 1.5",
            "meridian_sync_link_status{peer=\"b\"} 2",
            "# TYPE redis_commands_total counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} not in:\n{text}");
        }
    }
}

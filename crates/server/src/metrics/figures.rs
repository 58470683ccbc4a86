//! What a shard reports when scraped: a copy of its plain counters, taken on its own thread
//! between commands (`control::ShardRequest::Figures`). The command path keeps incrementing
//! plain fields; only this copy crosses threads.

use crate::shard::Shard;
use crate::sync::LinkState;

/// One command's counters (INFO commandstats' figures, without the latency histogram).
#[derive(Clone, Copy, Debug, Default)]
pub struct CommandFigures {
    pub calls: u64,
    pub usec: u64,
    pub rejected_calls: u64,
    pub failed_calls: u64,
}

/// One shard's figures at one instant.
#[derive(Clone, Debug, Default)]
pub struct ShardFigures {
    pub index: u16,
    pub connected_clients: u64,
    pub blocked_clients: u64,
    pub connections_received: u64,
    pub rejected_connections: u64,
    pub commands_processed: u64,
    pub net_input_bytes: u64,
    pub net_output_bytes: u64,
    pub keyspace_hits: u64,
    pub keyspace_misses: u64,
    pub expired_keys: u64,
    /// Keys dropped here by `maxmemory-policy`.
    pub evicted_keys: u64,
    /// `maxmemory` as this shard has it (the process's limit).
    pub maxmemory: u64,
    pub error_replies: u64,
    /// Commands with any call, rejection or failure, named as INFO commandstats names them.
    pub commands: Vec<(&'static str, CommandFigures)>,
    pub errors: Vec<(String, u64)>,
    /// (db index, keys, keys with a TTL), non-empty databases only.
    pub dbs: Vec<(usize, u64, u64)>,
    pub type_conflicts: u64,
    /// Remote writes that lost on arrival, by `stats::EFFECT_KIND_NAMES`.
    pub remote_lost: [u64; crate::stats::EFFECT_KINDS],
    pub remote_ops_applied: u64,
    pub frames_refused: u64,
    pub oplog_bytes: u64,
    pub oplog_ops: u64,
    pub log_disk_bytes: u64,
    pub fsync: Option<FsyncFigures>,
    pub gc_pending_keys: u64,
    /// 1 while this shard's collection waits for a full sync (`Shard::retired_ops_owed`).
    pub gc_waiting_full_sync: u64,
    pub gc_collected_keys: u64,
    pub gc_dropped_keys: u64,
    pub gc_retired_ttls: u64,
    pub peers: Vec<PeerFigures>,
}

/// Fsync durations as a histogram.
#[derive(Clone, Debug, Default)]
pub struct FsyncFigures {
    /// Count of fsyncs at most `FSYNC_BUCKETS_US[i]` µs, cumulative.
    pub buckets: Vec<(u64, u64)>,
    pub count: u64,
    pub sum_us: u64,
}

/// What this shard knows of one peer.
#[derive(Clone, Debug, Default)]
pub struct PeerFigures {
    pub site: String,
    pub inbound: LinkState,
    pub outbound: LinkState,
    /// How far this site's writes are from the peer: the age of the oldest write the peer
    /// has not acknowledged or, while the link that carries them is not up, the time since
    /// the peer's last acknowledgement (so a cut link shows as growing lag, writes or not).
    pub lag_ms: u64,
    pub lag_ops: u64,
    pub lag_bytes: u64,
    pub ops_in: u64,
    pub in_wire_bytes: u64,
    pub out_wire_bytes: u64,
    pub full_syncs_in: u64,
    pub full_syncs_out: u64,
    pub partial_syncs_in: u64,
    pub partial_syncs_out: u64,
    pub quarantined: bool,
}

impl PeerFigures {
    /// Redis Enterprise's syncer status: 0 in sync (both links up), 1 syncing (connecting or
    /// a full sync under way, none down), 2 out of sync (a link down).
    pub fn link_status(&self) -> u8 {
        match (self.inbound, self.outbound) {
            (LinkState::Up, LinkState::Up) => 0,
            (LinkState::Down, _) | (_, LinkState::Down) => 2,
            _ => 1,
        }
    }
}

impl Shard {
    /// The figures `/metrics` and `/health` read. Work is linear in commands, error codes,
    /// databases and peers, never in keys.
    ///
    /// With several shard threads, a shard's command, connection and error counters are its
    /// thread's (`Front`: the connections it serves), its keyspace counters its own.
    pub fn figures(&self, front: &crate::front::Front) -> ShardFigures {
        let st = &self.stats;
        let fst = &front.stats;
        let commands = front
            .table
            .specs
            .iter()
            .filter_map(|spec| {
                let c = fst.commands.get(spec.idx)?;
                (c.calls > 0 || c.failed_calls > 0 || c.rejected_calls > 0).then_some((
                    spec.meta.name,
                    CommandFigures {
                        calls: c.calls,
                        usec: c.usec,
                        rejected_calls: c.rejected_calls,
                        failed_calls: c.failed_calls,
                    },
                ))
            })
            .collect();
        let dbs = self
            .dbs
            .iter()
            .enumerate()
            .filter(|(_, db)| !db.is_empty())
            .map(|(i, db)| (i, db.len() as u64, db.expires as u64))
            .collect();
        let now = self.now_ms();
        let peers: Vec<PeerFigures> = self
            .sync
            .peers
            .iter()
            .filter(|p| !p.removed)
            .map(|p| {
                let lag_ops = self.seq.saturating_sub(p.acked_seq);
                let since_ack = now.saturating_sub(p.last_ack_ms);
                let unacked_age = if lag_ops == 0 {
                    0
                } else {
                    self.oplog
                        .hlc_of(p.acked_seq + 1)
                        .map_or(since_ack, |h| now.saturating_sub(h.physical_ms()))
                };
                let silent = if p.outbound == LinkState::Up {
                    0
                } else {
                    since_ack
                };
                PeerFigures {
                    site: p.site.clone(),
                    inbound: p.inbound,
                    outbound: p.outbound,
                    lag_ms: unacked_age.max(silent),
                    lag_ops,
                    lag_bytes: if lag_ops == 0 {
                        0
                    } else {
                        self.oplog.bytes_after(p.acked_seq) as u64
                    },
                    ops_in: p.ops_in,
                    in_wire_bytes: p.in_wire_bytes,
                    out_wire_bytes: p.out_wire_bytes,
                    full_syncs_in: p.full_syncs_in,
                    full_syncs_out: p.full_syncs_out,
                    partial_syncs_in: p.partial_syncs_in,
                    partial_syncs_out: p.partial_syncs_out,
                    quarantined: p.quarantined,
                }
            })
            .collect();
        // A peer site of several shards has an entry per shard: one line per site, its worst.
        let mut by_site: Vec<PeerFigures> = Vec::new();
        for p in peers {
            match by_site.iter_mut().find(|q| q.site == p.site) {
                Some(q) => {
                    if p.lag_ms > q.lag_ms {
                        q.lag_ms = p.lag_ms;
                    }
                    q.lag_ops += p.lag_ops;
                    q.lag_bytes += p.lag_bytes;
                    q.ops_in += p.ops_in;
                    q.in_wire_bytes += p.in_wire_bytes;
                    q.out_wire_bytes += p.out_wire_bytes;
                    q.full_syncs_in += p.full_syncs_in;
                    q.full_syncs_out += p.full_syncs_out;
                    q.partial_syncs_in += p.partial_syncs_in;
                    q.partial_syncs_out += p.partial_syncs_out;
                    q.quarantined |= p.quarantined;
                    if p.inbound != LinkState::Up {
                        q.inbound = p.inbound;
                    }
                    if p.outbound != LinkState::Up {
                        q.outbound = p.outbound;
                    }
                }
                None => by_site.push(p),
            }
        }
        let peers = by_site;
        let fsync = self.persist.writer.as_ref().map(|w| {
            let ws = w.state();
            FsyncFigures {
                buckets: crate::persist::writer::FSYNC_BUCKETS_US
                    .iter()
                    .zip(ws.fsync_buckets.iter())
                    .map(|(le, n)| (*le, *n))
                    .collect(),
                count: ws.fsyncs,
                sum_us: ws.fsync_us_sum,
            }
        });
        ShardFigures {
            index: self.index,
            connected_clients: front.clients.len() as u64,
            blocked_clients: self.blocked_count() as u64,
            connections_received: fst.total_connections_received,
            rejected_connections: fst.rejected_connections + st.rejected_connections,
            commands_processed: fst.total_commands_processed,
            net_input_bytes: fst.net_input_bytes,
            net_output_bytes: fst.net_output_bytes,
            keyspace_hits: st.keyspace_hits,
            keyspace_misses: st.keyspace_misses,
            expired_keys: st.expired_keys,
            evicted_keys: st.evicted_keys,
            maxmemory: self.config.maxmemory,
            error_replies: fst.total_error_replies,
            commands,
            errors: fst.errors.iter().map(|(k, v)| (k.clone(), *v)).collect(),
            dbs,
            type_conflicts: st.type_conflicts,
            remote_lost: st.remote_lost,
            remote_ops_applied: st.sync_ops_applied,
            frames_refused: self.sync.frames_refused,
            oplog_bytes: self.oplog.bytes() as u64,
            oplog_ops: self.oplog.ops(),
            log_disk_bytes: self.persist.log_bytes(),
            fsync,
            gc_pending_keys: self.sync.gc.pending_keys,
            gc_waiting_full_sync: u64::from(self.sync.gc.held_by.is_some()),
            gc_collected_keys: self.sync.gc.collected_keys,
            gc_dropped_keys: self.sync.gc.dropped_keys,
            gc_retired_ttls: self.sync.gc.retired_ttls,
            peers,
        }
    }
}

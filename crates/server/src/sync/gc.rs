//! Garbage collection of removal metadata once it is causally stable (docs/replication.md §6).

use meridian_crdt::{SmallBytes, Stamp, VersionVector};

use crate::shard::Shard;

/// Buckets examined per GC step (a pass over a large table spans several steps).
pub const GC_STEP_BUCKETS_MAX: usize = 16 * 1024;

/// Pointwise minimum of two version vectors (an origin absent from either is absent).
pub fn vv_min(a: &VersionVector, b: &VersionVector) -> VersionVector {
    let mut out = VersionVector::new();
    for (replica, hlc) in a.iter() {
        let m = hlc.min(b.get(replica));
        out.observe(Stamp { hlc: m, replica });
    }
    out
}

impl Shard {
    /// Promotes each peer's latest ack to `acked_causal` once every op the peer issued before
    /// it has been applied here.
    pub fn update_causal_acks(&mut self) {
        let delivered = &self.sync.delivered;
        for p in &mut self.sync.peers {
            if let Some(acked) = &p.acked {
                if delivered.get(p.replica) >= acked.get(p.replica)
                    && p.acked_causal.as_ref() != Some(acked)
                {
                    p.acked_causal = Some(acked.clone());
                }
            }
        }
    }

    /// Marks peers silent for longer than `sync-quarantine-ms` as quarantined. A peer whose
    /// link to it is up is not silent, however long ago its last ack (idle links ack every
    /// second or two; a stalled link is dropped after `SYNC_IDLE_TIMEOUT`).
    pub fn update_quarantine(&mut self, now_ms: u64) {
        let q = self.config.sync_quarantine_ms;
        for p in &mut self.sync.peers {
            let silent = now_ms.saturating_sub(p.last_ack_ms) > q
                && p.outbound != super::LinkState::Up
                && p.outbound != super::LinkState::FullSync;
            if silent && !p.quarantined {
                tracing::warn!(
                    peer = %p.site,
                    silent_ms = now_ms.saturating_sub(p.last_ack_ms),
                    "peer quarantined: it no longer holds back garbage collection and must rejoin by a full sync"
                );
                p.quarantined = true;
                p.rejoin_pull = true;
            }
        }
    }

    /// The causally stable vector: the pointwise minimum of what this shard and every
    /// non-quarantined peer have delivered. None while some such peer has never acked.
    pub fn stable_vv(&self) -> Option<VersionVector> {
        let mut stable = self.delivered_vv();
        for p in &self.sync.peers {
            if p.quarantined {
                continue;
            }
            stable = vv_min(&stable, p.acked_causal.as_ref()?);
        }
        Some(stable)
    }

    /// One step of the GC pass: examines up to `buckets_max` buckets from the saved cursor
    /// and collects the stable metadata of every key holding some.
    pub fn gc_step(&mut self, now_ms: u64, buckets_max: usize) {
        if self.peers == 0 {
            return;
        }
        self.update_quarantine(now_ms);
        self.update_causal_acks();
        let Some(stable) = self.stable_vv() else {
            return;
        };
        let (mut db, mut bucket) = self.sync.gc.cursor;
        if db >= self.dbs.len() {
            db = 0;
            bucket = 0;
        }
        if self.sync.peers.iter().all(|p| !p.quarantined) {
            self.sync.collected.merge(&stable);
        }
        let scan_db = db;
        let mut due: Vec<SmallBytes> = Vec::new();
        let mut pass_done = false;
        if let Some(d) = self.dbs.get(db) {
            let n = d.table.num_buckets();
            let end = bucket.saturating_add(buckets_max).min(n);
            for i in bucket..end {
                if let Some(e) = d.table.get_bucket(i) {
                    if e.state.has_metadata() {
                        due.push(e.key.clone());
                    }
                }
            }
            if end >= n {
                bucket = 0;
                db += 1;
                if db >= self.dbs.len() {
                    db = 0;
                    pass_done = true;
                }
            } else {
                bucket = end;
            }
        }
        self.sync.gc.cursor = (db, bucket);
        let gc_db = scan_db;
        let mut still = 0u64;
        for k in &due {
            let before = self.dbs.get(gc_db).map_or(0, |d| d.table.len());
            let left = self.collect_key(gc_db, k, &stable);
            let after = self.dbs.get(gc_db).map_or(0, |d| d.table.len());
            self.sync.gc.collected_keys += u64::from(!left);
            self.sync.gc.dropped_keys += (before - after.min(before)) as u64;
            still += u64::from(left);
        }
        self.sync.gc.pass_pending += still;
        if pass_done {
            self.sync.gc.pending_keys = self.sync.gc.pass_pending;
            self.sync.gc.pass_pending = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_crdt::{Hlc, ReplicaId};

    fn vv(e: &[(u32, u64)]) -> VersionVector {
        let mut v = VersionVector::new();
        for &(r, h) in e {
            v.observe(Stamp {
                hlc: Hlc(h),
                replica: ReplicaId(r),
            });
        }
        v
    }

    #[test]
    fn min_is_pointwise_and_drops_absent_origins() {
        assert_eq!(
            vv_min(&vv(&[(1, 5), (2, 9), (3, 4)]), &vv(&[(1, 7), (2, 3)])),
            vv(&[(1, 5), (2, 3)])
        );
    }
}

//! Garbage collection of removal metadata once it is causally stable (docs/replication.md §6).

use meridian_crdt::{Stamp, VersionVector};

use crate::keyspace::Mark;
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

/// Whether two sets of inclusive slot ranges share a slot.
fn ranges_meet(a: &[(u16, u16)], b: &[(u16, u16)]) -> bool {
    a.iter()
        .any(|&(a0, a1)| b.iter().any(|&(b0, b1)| a0 <= b1 && b0 <= a1))
}

/// Why collection waits for a full sync (`Shard::retired_ops_owed`): peer shard `site`/`shard`
/// acked ops of retired life `origin` up to `acked`; this shard holds them up to `here`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetiredOwed {
    pub site: String,
    pub shard: u16,
    pub origin: meridian_crdt::ReplicaId,
    pub acked: meridian_crdt::Hlc,
    pub here: meridian_crdt::Hlc,
}

impl std::fmt::Display for RetiredOwed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} acked {:08x} up to {} (here {})",
            self.site, self.shard, self.origin.0, self.acked.0, self.here.0
        )
    }
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
    /// non-quarantined peer shard have delivered. None while some such peer has never acked.
    ///
    /// A shard of a site of several shards never receives the ops of its site's other
    /// shards (they own other slots, so none of their stamps is ever in its keys): its acks
    /// say nothing of those origins, and the minimum for such an origin is taken over the
    /// other peers only. An origin no peer entry claims is a site's shard not learned yet,
    /// and every ack counts for it (conservative).
    pub fn stable_vv(&self) -> Option<VersionVector> {
        if self.retired_ops_owed().is_some() {
            return None;
        }
        self.delivered_everywhere(|p| (!p.quarantined).then_some(p.acked_causal.as_ref()))
    }

    /// Whether a peer that still counts (neither removed nor quarantined) acked ops of a
    /// retired life of another site (a rebooted site's lost tail, any life of a removed
    /// site) that this shard has not: nobody streams them any more, so they come here only
    /// by a full sync from that peer, and one of them (a ZREM that saw part of a member's
    /// increments, say) must not meet metadata collected meanwhile (those increments folded
    /// into one running sum), or the sites diverge for good. Collection waits for them, as
    /// `Peer::acked_causal` makes it wait for a live peer's ops that its ack overtook.
    ///
    /// The comparison is the peer's own (`SyncState::ahead_on_retired`) seen from this side:
    /// the peer's ack against what this shard acks to it (its delivered vector and the
    /// link's `retired_in`), so whenever this holds the peer finds this shard behind and
    /// resets the link for a full sync within `RETIRED_RESYNC_AFTER_MS`, and that full sync
    /// ends it. Lives of this shard's own site are not compared: a sibling shard's ops are
    /// of other slots and never come here.
    ///
    /// Only peers whose slots meet this shard's count (`Peer::slots`; unknown ones do): a
    /// shard of other slots holds no op this shard needs, and the entries it acks for a
    /// retired life of other slots may come from the context of a full sync by a site that
    /// does not know that life as retired (one that joined after the removal) and so never
    /// sends it here.
    pub(crate) fn retired_ops_owed(&self) -> Option<RetiredOwed> {
        let sync = &self.sync;
        let delivered = self.delivered_vv();
        let mine = self.slots.ranges_of(self.index);
        sync.peers
            .iter()
            .filter(|q| !q.removed && !q.quarantined)
            .filter(|q| q.slots.is_empty() || ranges_meet(&q.slots, &mine))
            .find_map(|q| {
                let acked = q.acked.as_ref()?;
                acked.iter().find_map(|(r, hlc)| {
                    let here = delivered.get(r).max(q.retired_in.get(r));
                    (hlc > here
                        && sync.is_retired(r)
                        && sync.peers.iter().any(|p| p.lives.contains(&r))
                        && !sync.lives.contains(&r))
                    .then(|| RetiredOwed {
                        site: q.site.clone(),
                        shard: q.shard,
                        origin: r,
                        acked: hlc,
                        here,
                    })
                })
            })
    }

    /// What every peer still in the deployment (quarantined ones included) said it had
    /// delivered at its last ack, and this shard has too: a key whose every write and
    /// removal lies within it is held by every peer, so evicting it here loses nothing at
    /// any site (evict.rs, docs/conflicts.md §18). Empty while some such peer has never
    /// acked. Unlike `everywhere_vv` it takes each peer's latest ack, not its causal one:
    /// eviction asks only what the peer holds, not what no later op of it can still need.
    pub fn held_everywhere_vv(&self) -> VersionVector {
        self.delivered_everywhere(|p| (!p.removed).then_some(p.acked.as_ref()))
            .unwrap_or_default()
    }

    /// What every peer, quarantined ones included (as of its last causal ack), and this
    /// shard have delivered: the bound of what no causal context stands in for once
    /// collected (`KeyState::collect_with`). Empty while some peer has never acked. A peer
    /// removed from the deployment (CRDT.REMOVEPEER) never syncs again, so it holds back
    /// nothing. A peer shard's acks count for the origins it receives, as in `stable_vv`.
    pub fn everywhere_vv(&self) -> VersionVector {
        if self.retired_ops_owed().is_some() {
            return VersionVector::new();
        }
        self.delivered_everywhere(|p| (!p.removed).then_some(p.acked_causal.as_ref()))
            .unwrap_or_default()
    }

    /// The pointwise minimum of this shard's delivered vector and the acks `ack` takes of
    /// the peers (None: the peer does not count; Some(None): it counts and never acked),
    /// each origin over the peers that receive it (see `stable_vv`). None while a peer that
    /// counts has never acked.
    fn delivered_everywhere<'a>(
        &'a self,
        ack: impl Fn(&'a super::Peer) -> Option<Option<&'a VersionVector>>,
    ) -> Option<VersionVector> {
        let acks: Vec<(&super::Peer, &VersionVector)> = self
            .sync
            .peers
            .iter()
            .filter_map(|p| ack(p).map(|a| a.map(|a| (p, a))))
            .collect::<Option<_>>()?;
        let mut out = VersionVector::new();
        for (origin, hlc) in self.delivered_vv().iter() {
            let mut m = hlc;
            for (p, acked) in &acks {
                let sibling =
                    self.sync.peers.iter().any(|q| {
                        q.site == p.site && q.shard != p.shard && q.lives.contains(&origin)
                    });
                if !sibling {
                    m = m.min(acked.get(origin));
                }
            }
            if m > meridian_crdt::Hlc::ZERO {
                out.observe(Stamp {
                    hlc: m,
                    replica: origin,
                });
            }
        }
        Some(out)
    }

    /// One GC step: examines up to `buckets_max` buckets from the saved cursor and collects the
    /// stable metadata of every key holding some. Databases where no key holds any are
    /// skipped, and so is the whole scan when none does (`Db::meta_keys`): a shard at rest
    /// does no GC work, however large its table.
    pub fn gc_step(&mut self, now_ms: u64, buckets_max: usize) {
        if self.peers == 0 {
            return;
        }
        self.update_quarantine(now_ms);
        self.update_causal_acks();
        self.note_gc_pending();
        let owed = self.retired_ops_owed();
        if owed != self.sync.gc.held_by {
            match &owed {
                Some(o) => tracing::info!(
                    shard = self.index,
                    "garbage collection waits for a full sync: peer {o}"
                ),
                None => tracing::info!(shard = self.index, "garbage collection goes on"),
            }
            self.sync.gc.held_by = owed;
        }
        let Some(stable) = self.stable_vv() else {
            return;
        };
        if self.sync.gc.pending_keys == 0 {
            return;
        }
        let everywhere = self.everywhere_vv();
        let n_dbs = self.dbs.len();
        let (mut db, mut bucket) = self.sync.gc.cursor;
        if db >= n_dbs {
            db = 0;
            bucket = 0;
        }
        // Some database holds metadata (pending_keys > 0): this finds it within n_dbs moves.
        for _ in 0..n_dbs {
            if self.dbs.get(db).is_some_and(|d| d.meta_keys > 0) {
                break;
            }
            db = (db + 1) % n_dbs;
            bucket = 0;
        }
        let (mut collected, mut dropped) = (0u64, 0u64);
        // Keys whose TTL writes time nothing any more: retired after the scan (a write each,
        // `Shard::retire_expire`). At most one per bucket examined.
        let mut retire: Vec<Vec<u8>> = Vec::new();
        let scan_db = db;
        if let Some(d) = self.dbs.get_mut(db) {
            let n = d.table.num_buckets();
            let end = bucket.saturating_add(buckets_max).min(n);
            // Only buckets marked as holding metadata are read (`Mark::Metadata`); a stale
            // mark is cleared on the way.
            let mut i = bucket;
            while let Some(b) = d.table.next_marked(Mark::Metadata, i, end) {
                i = b + 1;
                if !d.table.get_bucket(b).is_some_and(|e| e.meta) {
                    d.table.unmark(b, Mark::Metadata);
                    continue;
                }
                let before = d.table.len();
                match d.collect_bucket(b, &stable, &everywhere) {
                    Some(false) => {
                        collected += 1;
                        d.table.unmark(b, Mark::Metadata);
                    }
                    Some(true) => {
                        if let Some(e) = d.table.get_bucket(b).filter(|e| {
                            e.state.retire_expire_effect::<&[u8]>(&everywhere).is_some()
                        }) {
                            retire.push(e.key.as_slice().to_vec());
                        }
                    }
                    None => d.table.unmark(b, Mark::Metadata),
                }
                dropped += (before - d.table.len().min(before)) as u64;
            }
            if end >= n {
                bucket = 0;
                db = (db + 1) % n_dbs;
            } else {
                bucket = end;
            }
        }
        let mut retired = 0u64;
        for key in &retire {
            retired += u64::from(self.retire_expire(scan_db, key, now_ms, &everywhere));
        }
        self.sync.gc.retired_ttls += retired;
        self.sync.gc.cursor = (db, bucket);
        self.sync.gc.collected_keys += collected;
        self.sync.gc.dropped_keys += dropped;
        self.note_gc_pending();
    }

    /// `crdt_gc_pending_keys`: keys holding removal metadata now.
    fn note_gc_pending(&mut self) {
        self.sync.gc.pending_keys = self.dbs.iter().map(|d| d.meta_keys as u64).sum();
    }
}

#[cfg(test)]
pub(super) mod tests {
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

    /// A shard of site "a" with one peer "b" and no persistence.
    fn shard_with_peer() -> Shard {
        let config = crate::config::Config {
            site: "a".to_string(),
            peer: vec!["b=127.0.0.1:7999".to_string()],
            appendonly: false,
            ..crate::config::Config::default()
        };
        Shard::new(0, config, 1_000)
    }

    /// Runs one command on `shard` in database `db` (reply discarded).
    /// Site A with peers B and C, quarantined after 1 s of silence.
    fn shard_with_peers_b_and_c() -> Shard {
        let config = crate::config::Config {
            site: "a".to_string(),
            peer: vec![
                "b=127.0.0.1:7998".to_string(),
                "c=127.0.0.1:7999".to_string(),
            ],
            appendonly: false,
            sync_quarantine_ms: 1_000,
            ..crate::config::Config::default()
        };
        Shard::new(0, config, 1_000)
    }

    pub(in crate::sync) fn run(shard: &mut Shard, db: usize, args: &[&str]) {
        crate::cmd::testing::run_on(shard, db, args);
    }

    /// The peer acks everything the shard delivered.
    fn ack_all(shard: &mut Shard) {
        let all = shard.delivered_vv();
        let p = &mut shard.sync.peers[0];
        p.acked = Some(all.clone());
        p.acked_causal = Some(all);
    }

    /// `Db::meta_keys` and every entry's `meta` agree with the states.
    fn assert_meta_counted(shard: &Shard) {
        for (i, d) in shard.dbs.iter().enumerate() {
            let mut n = 0;
            for e in d.table.iter() {
                assert_eq!(e.meta, e.state.has_metadata(), "db {i} key {:?}", e.key);
                n += usize::from(e.meta);
            }
            assert_eq!(d.meta_keys, n, "db {i}");
            assert_eq!(d.table.unmarked_entry(), None, "db {i}");
        }
    }

    #[test]
    fn a_step_scans_nothing_while_no_key_holds_metadata() {
        let mut s = shard_with_peer();
        for i in 0..100 {
            run(&mut s, 0, &["SET", &format!("k{i}"), "v"]);
        }
        ack_all(&mut s);
        s.gc_step(2_000, 16);
        assert_eq!(s.sync.gc.cursor, (0, 0), "no bucket examined");
        assert_eq!(s.sync.gc.pending_keys, 0);
        // One overwrite leaves metadata: counted at once, collected once acked.
        run(&mut s, 0, &["SET", "k7", "w"]);
        assert_eq!(s.dbs[0].meta_keys, 1);
        s.gc_step(2_100, GC_STEP_BUCKETS_MAX);
        assert_eq!(s.sync.gc.pending_keys, 1, "not acked yet");
        ack_all(&mut s);
        s.gc_step(2_200, GC_STEP_BUCKETS_MAX);
        assert_eq!(s.sync.gc.pending_keys, 0);
        assert_eq!(s.sync.gc.collected_keys, 1);
        assert_meta_counted(&s);
    }

    #[test]
    fn a_step_goes_straight_to_the_database_holding_metadata() {
        let mut s = shard_with_peer();
        run(&mut s, 5, &["SADD", "set", "m"]);
        run(&mut s, 5, &["SREM", "set", "m"]);
        assert_eq!(s.dbs[5].meta_keys, 1);
        ack_all(&mut s);
        s.gc_step(2_000, GC_STEP_BUCKETS_MAX);
        assert_eq!(s.sync.gc.collected_keys, 1);
        assert_eq!(s.sync.gc.dropped_keys, 1, "the empty set is gone");
        assert_eq!(s.sync.gc.pending_keys, 0);
        assert_meta_counted(&s);
    }

    #[test]
    fn metadata_is_counted_exactly_through_every_kind_of_write_and_collection() {
        let mut s = shard_with_peer();
        let script: &[&[&str]] = &[
            &["SET", "s", "1"],
            &["SET", "s", "2"],
            &["APPEND", "s", "x"],
            &["EXPIRE", "s", "100"],
            &["PERSIST", "s"],
            &["DEL", "s"],
            &["INCRBY", "c", "5"],
            &["DEL", "c"],
            &["SADD", "set", "a", "b"],
            &["SREM", "set", "a"],
            &["HSET", "h", "f", "1", "g", "2"],
            &["HDEL", "h", "f"],
            &["ZADD", "z", "1", "m"],
            &["ZREM", "z", "m"],
            &["RPUSH", "l", "a", "b"],
            &["LPOP", "l"],
            &["PFADD", "p", "a"],
            &["DEL", "p"],
            &["SET", "t", "1", "PX", "1"],
        ];
        for (i, cmd) in script.iter().enumerate() {
            run(&mut s, i % 3, cmd);
            assert_meta_counted(&s);
            if i % 4 == 3 {
                ack_all(&mut s);
                s.gc_step(2_000, 4);
                assert_meta_counted(&s);
            }
        }
        ack_all(&mut s);
        for _ in 0..64 {
            s.gc_step(2_000, GC_STEP_BUCKETS_MAX);
        }
        assert_meta_counted(&s);
        assert_eq!(s.sync.gc.pending_keys, 0);
    }

    /// Keys gaining metadata while the table grows (rehashes in progress) are all found by
    /// the marks: GC collects every one of them, and a pass reads only marked buckets.
    #[test]
    fn metadata_written_across_rehashes_is_all_collected() {
        let mut s = shard_with_peer();
        for i in 0..3_000 {
            run(&mut s, 0, &["SET", &format!("k{i}"), "v"]);
            if i % 2 == 0 {
                run(&mut s, 0, &["SET", &format!("k{}", i / 2), "w"]);
            }
            if i % 500 == 0 {
                assert_meta_counted(&s);
            }
        }
        assert_meta_counted(&s);
        let pending = s.dbs[0].meta_keys;
        assert!(pending > 500, "{pending} keys with metadata");
        ack_all(&mut s);
        for _ in 0..64 {
            s.gc_step(2_000, GC_STEP_BUCKETS_MAX);
            if s.sync.gc.pending_keys == 0 {
                break;
            }
        }
        assert_eq!(s.dbs[0].meta_keys, 0);
        assert_eq!(s.sync.gc.collected_keys as usize, pending);
        assert_eq!(
            s.dbs[0].table.next_marked(Mark::Metadata, 0, usize::MAX),
            None,
            "marks cleared"
        );
        assert_meta_counted(&s);
    }

    /// While a peer is quarantined, GC goes on for what a causal context stands in for (an
    /// SREM's member context) and keeps what none does (a DEL's key context, which decides a
    /// HyperLogLog raise the quarantined peer may hold concurrently) until that peer acks it.
    /// A peer removed from the deployment (CRDT.REMOVEPEER) never syncs again: unlike a
    /// quarantined one, it holds back no key removal context either.
    #[test]
    fn a_removed_peer_holds_back_nothing() {
        let mut s = shard_with_peers_b_and_c();
        run(&mut s, 0, &["SADD", "set", "x", "y"]);
        run(&mut s, 0, &["SET", "k", "1"]);
        let before = s.delivered_vv();
        for p in &mut s.sync.peers {
            p.acked = Some(before.clone());
            p.acked_causal = Some(before.clone());
        }
        run(&mut s, 0, &["SREM", "set", "x"]);
        run(&mut s, 0, &["DEL", "k"]);
        assert!(s.remove_peer("c"));
        // B acks everything; C, removed, never will.
        let all = s.delivered_vv();
        s.sync.peers[0].acked = Some(all.clone());
        s.sync.peers[0].acked_causal = Some(all);
        s.sync.peers[0].last_ack_ms = 1_100;
        s.gc_step(1_100, GC_STEP_BUCKETS_MAX);
        assert_eq!(s.dbs[0].meta_keys, 0, "both contexts went");
        let k = s.hash_key(b"k");
        assert!(s.dbs[0].get(k, b"k").is_none());
        assert_meta_counted(&s);
    }

    /// Until this shard has every op of a removed site's lives that a remaining peer acked
    /// (they come by a full sync from that peer), it collects nothing: one of them may
    /// remove part of what collection would fold (operations.rs
    /// `a_removed_sites_last_zrem_removes_what_it_saw_everywhere`). What the link's full
    /// syncs carried for other slots (`Peer::retired_in`) counts as for the peer's own check,
    /// and a quarantined peer holds back nothing.
    #[test]
    fn a_removed_peers_ops_that_another_peer_holds_hold_back_collection_until_they_come() {
        let mut s = shard_with_peers_b_and_c();
        run(&mut s, 0, &["SADD", "set", "x", "y"]);
        run(&mut s, 0, &["SREM", "set", "x"]);
        // C's life, as learned from its handshake; B delivered ops of it that A lacks.
        let c_life = meridian_crdt::ReplicaId(0x00c0_ffee);
        s.sync.peers[1].lives = vec![c_life];
        let c_op = |hlc: u64| meridian_crdt::Stamp {
            hlc: meridian_crdt::Hlc(hlc),
            replica: c_life,
        };
        let mut b_has = s.delivered_vv();
        b_has.observe(c_op(5));
        s.sync.peers[0].acked = Some(b_has.clone());
        s.sync.peers[0].acked_causal = Some(b_has.clone());
        assert!(
            s.retired_ops_owed().is_none(),
            "C is live: its ops stream to A"
        );
        assert!(s.remove_peer("c"));
        assert!(s.stable_vv().is_none(), "C's op that B holds is owed here");
        assert!(s.everywhere_vv().is_empty());
        s.gc_step(1_100, GC_STEP_BUCKETS_MAX);
        assert_eq!(s.dbs[0].meta_keys, 1, "nothing collected meanwhile");
        assert!(
            s.sync
                .gc
                .held_by
                .as_ref()
                .is_some_and(|o| o.site == "b" && o.origin == c_life),
            "INFO's crdt_gc_waiting_full_sync says so: {:?}",
            s.sync.gc.held_by
        );
        // B's full sync brought it, from a shard of other slots: the link's entry counts.
        s.sync.peers[0].retired_in.observe(c_op(5));
        assert!(s.stable_vv().is_some());
        // Another op of C's that B acks; B falls silent: it no longer holds anything back.
        b_has.observe(c_op(6));
        s.sync.peers[0].acked = Some(b_has);
        assert!(s.stable_vv().is_none(), "C's op at 6 is owed");
        s.sync.peers[0].quarantined = true;
        assert!(s.stable_vv().is_some());
        s.sync.peers[0].quarantined = false;
        // As a shard of slots 0-8191 with B's of 8192-16383, B holds no op of C's it needs.
        s.slots = std::sync::Arc::new(crate::slot::SlotMap::contiguous(2));
        s.sync.peers[0].slots = vec![(8192, 16383)];
        assert!(s.stable_vv().is_some(), "B's shard owns other slots");
        s.sync.peers[0].slots = vec![(0, 9000)];
        assert!(s.stable_vv().is_none(), "B's shard owns some of its slots");
        // It arrives here (delivered, as from a shard of the same slots): collection goes on.
        s.sync.delivered.observe(c_op(6));
        assert!(s.stable_vv().is_some());
        s.gc_step(1_200, GC_STEP_BUCKETS_MAX);
        assert_eq!(s.dbs[0].meta_keys, 0, "the SREM's context went");
        assert!(s.sync.gc.held_by.is_none());
        assert_meta_counted(&s);
    }

    #[test]
    fn a_quarantined_peer_holds_back_key_contexts_only() {
        let mut s = shard_with_peers_b_and_c();
        run(&mut s, 0, &["SADD", "set", "x", "y"]);
        run(&mut s, 0, &["SET", "k", "1"]);
        let before = s.delivered_vv();
        for p in &mut s.sync.peers {
            p.acked = Some(before.clone());
            p.acked_causal = Some(before.clone());
        }
        run(&mut s, 0, &["SREM", "set", "x"]);
        run(&mut s, 0, &["DEL", "k"]);
        // B acks everything; C has been silent past the quarantine.
        let all = s.delivered_vv();
        s.sync.peers[0].acked = Some(all.clone());
        s.sync.peers[0].acked_causal = Some(all.clone());
        s.sync.peers[0].last_ack_ms = 5_000;
        s.gc_step(5_000, GC_STEP_BUCKETS_MAX);
        assert!(s.sync.peers[1].quarantined && !s.sync.peers[0].quarantined);
        assert_eq!(
            s.dbs[0].meta_keys, 1,
            "the set's context went, the DEL's stays"
        );
        let k = s.hash_key(b"k");
        assert!(s.dbs[0].get(k, b"k").is_some_and(|e| e.meta));
        // C acks everything (as its rejoin would): the DEL's context goes too.
        s.sync.peers[1].acked = Some(all.clone());
        s.sync.peers[1].acked_causal = Some(all);
        s.gc_step(5_100, GC_STEP_BUCKETS_MAX);
        assert_eq!(s.dbs[0].meta_keys, 0);
        assert!(s.dbs[0].get(k, b"k").is_none());
        assert_meta_counted(&s);
    }

    #[test]
    fn min_is_pointwise_and_drops_absent_origins() {
        assert_eq!(
            vv_min(&vv(&[(1, 5), (2, 9), (3, 4)]), &vv(&[(1, 7), (2, 3)])),
            vv(&[(1, 5), (2, 3)])
        );
    }
}

//! The link protocol's steps without I/O (docs/replication.md §3–6): the Hello a dialer
//! states, how the accepter answers it (resume or full sync, and whether every key is sent),
//! how the dialer takes the Welcome, what an ack changes, and the start of a full sync.
//!
//! The link tasks (`link`) read and write the frames around these steps; the protocol model
//! test (`model_tests`) drives the same steps between shards with no sockets, so what it
//! checks is what the server does. Time is a parameter (`now_ms`).

use std::collections::VecDeque;

use meridian_crdt::VersionVector;
use meridian_syncer::{Ack, FullSyncBegin, Hello, Mode, PROTOCOL_VERSION, SyncError, Welcome};

use super::LinkState;
use crate::shard::Shard;

/// What the accepter of a link decided (`Shard::accept_hello`).
#[derive(Debug)]
pub struct Accepted {
    /// The dialer's index among this shard's peers.
    pub peer: usize,
    /// The link's generation: a newer link from the same peer replaces it.
    pub generation: u64,
    pub welcome: Welcome,
    /// A full sync sends every key this shard holds, marked complete
    /// (`FullSyncBegin::complete`), instead of the keys the dialer's vector does not cover.
    pub complete: bool,
    /// Why a full sync was chosen (`""` for a resume), for the log.
    pub why: &'static str,
}

impl Shard {
    /// The Hello this shard sends when it dials peer `peer` (whose ops it receives); `None`
    /// for an unknown peer.
    pub fn hello_to(&self, peer: usize) -> Option<Hello> {
        let p = self.sync.peers.get(peer)?;
        Some(Hello {
            version: PROTOCOL_VERSION,
            deployment: self.config.deployment_id.clone(),
            from_site: self.config.site.clone(),
            to_site: p.site.clone(),
            shard: self.index,
            shards: self.slots.shards(),
            to_shard: p.shard,
            slots: self.slots.ranges_of(self.index),
            known_incarnation: p.in_incarnation,
            applied_seq: p.in_applied_seq,
            // What it has from others and its own last op: a peer holding more of this site's
            // ops than that (a restart lost some) sends them back by a full sync. After it
            // collected metadata without this peer (quarantine), it states nothing, so that
            // every key the peer holds comes back to be merged.
            delivered: if p.rejoin_pull {
                VersionVector::new()
            } else {
                let mut v = self.hello_delivered();
                v.merge(&p.retired_in);
                v
            },
            want_full: p.rejoin_pull,
            from_incarnation: self.sync.incarnation,
            from_life: self.sync.life,
        })
    }

    /// The accepter's answer to a Hello that passed the checks (`link::refusal`): the peer's
    /// life is learned, resume or full sync chosen (`choose_mode`), and the peer's outbound
    /// link state begins a new generation. `Refused` when `from_site` is no peer.
    pub fn accept_hello(&mut self, hello: &Hello, now_ms: u64) -> Result<Accepted, SyncError> {
        let Some(peer) = self.sync.peer_index(&hello.from_site, hello.shard) else {
            return Err(SyncError::Refused("peer vanished".into()));
        };
        if let Some(p) = self.sync.peers.get_mut(peer) {
            if p.learn_life(hello.from_life) {
                tracing::info!(peer = %hello.from_site, life = hello.from_life, "peer began a new life");
            }
            p.slots.clone_from(&hello.slots);
        }
        let (mode, why) = choose_mode(self, peer, hello);
        // A dialer that asked for every key, or that this site quarantined, gets every key
        // (marked complete): it may hold writes this site removed and collected, in keys this
        // site no longer holds, which a delta would not send (docs/replication.md §6).
        let complete = mode == Mode::FullSync
            && (hello.want_full || self.sync.peers.get(peer).is_some_and(|p| p.quarantined));
        let seq = self.seq;
        let incarnation = self.sync.incarnation;
        let life = self.sync.life;
        let site = self.config.site.clone();
        let (shard, shards, slots) = (
            self.index,
            self.slots.shards(),
            self.slots.ranges_of(self.index),
        );
        let Some(p) = self.sync.peers.get_mut(peer) else {
            return Err(SyncError::Refused("peer vanished".into()));
        };
        p.out_generation += 1;
        p.outbound = LinkState::Connecting;
        p.last_ack_ms = now_ms;
        p.acked_seq = match mode {
            // The dialer holds every op of this shard before `from_seq`.
            Mode::Resume { from_seq } => p.acked_seq.max(from_seq.saturating_sub(1).min(seq)),
            Mode::FullSync if hello.known_incarnation == incarnation => {
                p.acked_seq.max(hello.applied_seq.min(seq))
            }
            Mode::FullSync => 0,
        };
        match mode {
            Mode::Resume { .. } => p.partial_syncs_out += 1,
            Mode::FullSync => {
                p.full_syncs_out += 1;
                p.owes_full_sync = false;
            }
        }
        Ok(Accepted {
            peer,
            generation: p.out_generation,
            welcome: Welcome {
                site,
                incarnation,
                mode,
                seq,
                life,
                shard,
                shards,
                slots,
            },
            complete,
            why: if mode == Mode::FullSync { why } else { "" },
        })
    }

    /// The dialer takes the accepter's Welcome on its link to peer `peer`: the peer's life
    /// and incarnation, where its stream resumes. `Refused` when the accepter resumes beyond
    /// what this shard applied.
    pub fn take_welcome(&mut self, peer: usize, welcome: &Welcome) -> Result<(), SyncError> {
        let Some(p) = self.sync.peers.get_mut(peer) else {
            return Ok(());
        };
        if p.learn_life(welcome.life) {
            tracing::info!(peer = %p.site, life = welcome.life, "peer began a new life");
        }
        p.slots.clone_from(&welcome.slots);
        let new_life = welcome.life != p.in_life;
        p.in_life = welcome.life;
        if welcome.incarnation != p.in_incarnation {
            if let Mode::Resume { from_seq } = welcome.mode {
                // In a new life the ops it lost are a retired life's, which come back to it
                // by the full sync `choose_mode` gives it (`ahead_on_retired`).
                if p.in_incarnation != 0 && from_seq <= p.in_applied_seq && !new_life {
                    p.owes_full_sync = true;
                    tracing::warn!(peer = %p.site, from_seq, applied = p.in_applied_seq, "peer restarted without ops of its own that this site holds; it gets them back by a full sync");
                }
            }
            p.in_incarnation = welcome.incarnation;
            // Sequence numbers continue across the sender's incarnations: resuming at
            // `from_seq` says this site holds every op before it.
            p.in_applied_seq = match welcome.mode {
                Mode::Resume { from_seq } => from_seq.saturating_sub(1),
                Mode::FullSync => 0,
            };
        }
        match welcome.mode {
            Mode::Resume { from_seq } => {
                if from_seq > p.in_applied_seq.saturating_add(1) {
                    return Err(SyncError::Refused(format!(
                        "peer resumes at seq {from_seq}, this site applied up to {}",
                        p.in_applied_seq
                    )));
                }
                p.partial_syncs_in += 1;
                p.inbound = LinkState::Up;
            }
            Mode::FullSync => {
                p.full_syncs_in += 1;
                p.inbound = LinkState::FullSync;
            }
        }
        Ok(())
    }

    /// What a Hello states this shard has delivered: its delivered vector, its own entry no
    /// higher than the start of its own gap (`SyncState::own_gap`), so that a sender holding
    /// own ops this shard lost sends them back (its delta filter sends the keys holding them,
    /// and `choose_mode` sees it holds more of this shard's ops than this shard does).
    fn hello_delivered(&self) -> VersionVector {
        let mut v = self.delivered_vv();
        if let Some(g) = self.sync.own_gap {
            v.clamp_by(|r| {
                if r == g.replica {
                    g.after
                } else {
                    meridian_crdt::Hlc(u64::MAX)
                }
            });
        }
        v
    }

    /// The ack this shard sends on its link to peer `peer` (whose stream is of incarnation
    /// `incarnation`).
    pub fn ack_to(&self, peer: usize, incarnation: u64) -> Ack {
        Ack {
            incarnation,
            applied_seq: self.sync.peers.get(peer).map_or(0, |p| p.in_applied_seq),
            // What this link's full syncs carried of retired lives counts for it
            // (`Peer::retired_in`).
            delivered: {
                let mut v = self.delivered_vv();
                if let Some(p) = self.sync.peers.get(peer) {
                    v.merge(&p.retired_in);
                }
                v
            },
        }
    }

    /// An ack from peer `peer` on its link of generation `generation` (an older link's is
    /// ignored): its position in this shard's stream (lag samples from `in_flight`, the
    /// batches sent and not yet acked, `(last seq, hlc ms of the first op)`), its delivered
    /// vector (garbage collection) and the time of the ack (quarantine).
    pub fn on_ack(
        &mut self,
        peer: usize,
        generation: u64,
        ack: Ack,
        in_flight: &mut VecDeque<(u64, u64)>,
        now_ms: u64,
    ) {
        let incarnation = self.sync.incarnation;
        let seq = self.seq;
        let Some(p) = self.sync.peers.get_mut(peer) else {
            return;
        };
        if p.out_generation != generation {
            return;
        }
        if ack.incarnation == incarnation {
            let acked = ack.applied_seq.min(seq);
            while let Some(&(last, first_ms)) = in_flight.front() {
                if last > acked {
                    break;
                }
                in_flight.pop_front();
                p.note_lag(now_ms.saturating_sub(first_ms));
            }
            p.acked_seq = p.acked_seq.max(acked);
        }
        p.acked = Some(ack.delivered);
        p.last_ack_ms = now_ms;
        // CRDT.WAIT clients re-check on every ack.
        while self
            .blocking
            .signal(super::WAIT_DB, super::WAIT_KEY)
            .is_some()
        {}
    }

    /// A full sync to peer `peer` was sent whole: the peer no longer needs one for having
    /// been quarantined.
    pub fn full_sync_sent(&mut self, peer: usize) {
        if let Some(p) = self.sync.peers.get_mut(peer) {
            p.quarantined = false;
        }
    }

    /// Whether peer `peer` has stayed behind this site on a retired life for
    /// `RETIRED_RESYNC_AFTER_MS` (by its acks): then its link is reset, and the handshake that
    /// follows chooses a full sync (`choose_mode`).
    pub fn behind_on_retired(&mut self, peer: usize, now_ms: u64) -> bool {
        let behind = self
            .sync
            .peers
            .get(peer)
            .and_then(|p| p.acked.as_ref())
            .is_some_and(|acked| self.sync.ahead_on_retired(acked, peer));
        let Some(p) = self.sync.peers.get_mut(peer) else {
            return false;
        };
        if !behind {
            p.retired_behind_since_ms = None;
            return false;
        }
        let since = *p.retired_behind_since_ms.get_or_insert(now_ms);
        if now_ms.saturating_sub(since) < super::RETIRED_RESYNC_AFTER_MS {
            return false;
        }
        p.retired_behind_since_ms = None;
        true
    }

    /// The start of a full sync this shard sends: its sequence number, its causal context
    /// (its delivered vector, own last op included: every write it covers is in the states
    /// that follow or was removed here), its delivered entries of retired lives, and whether
    /// every key follows.
    pub fn full_sync_begin_out(&self, complete: bool) -> FullSyncBegin {
        FullSyncBegin {
            seq: self.seq,
            context: self.context(),
            retired: self.sync.retired_delivered(),
            complete,
        }
    }
}

/// How the sender brings a dialer up to date (docs/replication.md §3), and why.
pub fn choose_mode(s: &Shard, peer: usize, hello: &Hello) -> (Mode, &'static str) {
    let Some(p) = s.sync.peers.get(peer) else {
        return (Mode::FullSync, "unknown peer");
    };
    if hello.want_full {
        return (Mode::FullSync, "the dialer asked for one (rejoin)");
    }
    if p.quarantined {
        return (Mode::FullSync, "the dialer was quarantined");
    }
    if p.owes_full_sync {
        return (
            Mode::FullSync,
            "the dialer restarted without ops of its own this site holds",
        );
    }
    // The dialer states its own last op: holding more of its ops than it does means it
    // lost some (a restart without them): they come back to it only by a full sync.
    // Within one incarnation of the dialer this cannot happen; across a restart it can.
    // (A Hello is built before the ops that overtake it on the other link.)
    if hello.from_incarnation != p.in_incarnation
        && s.sync.delivered.get(p.replica) > hello.delivered.get(p.replica)
    {
        return (
            Mode::FullSync,
            "this site holds ops of the dialer that the dialer lost",
        );
    }
    // Ops of a retired life (the dialer's own lost tail after a reboot, or a third site's)
    // are streamed by nobody: a dialer lacking some of them gets them only by a full sync.
    if s.sync.ahead_on_retired(&hello.delivered, peer) {
        return (
            Mode::FullSync,
            "the dialer lacks ops of a retired life that this site holds",
        );
    }
    let first_retained = match (s.oplog.first_seq(), s.persist.disk_first_own_seq()) {
        (Some(m), Some(d)) => Some(m.min(d)),
        (m, d) => m.or(d),
    };
    let retained = |from: u64| from > s.seq || first_retained.is_some_and(|f| f <= from);
    // The dialer knows one of this shard's incarnations (sequence numbers continue across
    // them): resume after what it applied, if that is still this shard's history.
    if let Some(end) = s.sync.incarnation_end(hello.known_incarnation, s.seq) {
        if hello.applied_seq <= end && retained(hello.applied_seq + 1) {
            return (
                Mode::Resume {
                    from_seq: hello.applied_seq + 1,
                },
                "resume",
            );
        }
        if hello.known_incarnation == s.sync.incarnation {
            return (Mode::FullSync, "the dialer is behind the backlog");
        }
    }
    // New to this incarnation: replaying it suffices only if the dialer already holds
    // everything this shard holds from other origins and from its own earlier lives.
    let mut others = s.sync.delivered.clone();
    others.observe(meridian_crdt::Stamp {
        hlc: s.sync.own_before_incarnation,
        replica: s.replica,
    });
    others.forget_covered(&hello.delivered);
    let first = s.sync.incarnation_first_seq();
    if others.is_empty() && retained(first) {
        return (Mode::Resume { from_seq: first }, "resume this incarnation");
    }
    (
        Mode::FullSync,
        "the dialer lacks ops this site holds from before this incarnation",
    )
}

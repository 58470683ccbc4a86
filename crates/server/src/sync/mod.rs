//! The shard's side of replication between sites (protocol: docs/replication.md).
//!
//! - `SyncState` (here): what a shard knows of replication: its incarnation, the version
//!   vector of what it has delivered, and per peer the state of both links, acks, lag and
//!   counters. `INFO crdt` prints it.
//! - `link`: the tasks. The accept loop of the sync port and the sender of this shard's ops to
//!   a peer that dialed in (resume from the op log, or a delta full sync); the dialer of each
//!   peer that receives its ops, validates each frame whole and applies it.
//! - `apply`: remote op batches and full-sync states into the keyspace, through the same
//!   `Shard::apply_stamped` a local write uses.
//! - `protocol`: the link protocol's steps without I/O (the handshake on each side, acks,
//!   the start of a full sync), which `link` drives around its frames.
//! - `gc`: causal stability and collection of removal metadata.
//! - `digest`: `CRDT.DIGEST`, a digest of the observable state.
//!
//! Links run as tasks on the shard thread: they borrow the shard between awaits only, like
//! client connections, so remote ops need no channel and no lock.

pub mod apply;
pub mod digest;
pub mod gc;
pub mod link;
#[cfg(test)]
mod model_tests;
pub mod protocol;

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::rc::Rc;
use std::sync::Arc;

use meridian_crdt::{ReplicaId, VersionVector};
use meridian_syncer::{Codec, TlsContext};
use tokio::sync::Notify;

use crate::config::Config;

/// Seconds of silence after which a link is dropped (the other side pings every second).
pub const SYNC_IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);
/// The pseudo-key CRDT.WAIT clients block on; acks signal it. No client can name this
/// database, so no write ever collides with it.
pub const WAIT_DB: usize = usize::MAX;
pub const WAIT_KEY: &[u8] = b"crdt.wait";
/// Incarnations remembered (restarts whose ops peers may still resume from).
pub const INCARNATIONS_MAX: usize = 64;
/// Lag samples kept per peer for the p99 in `INFO crdt`.
pub const LAG_SAMPLES_MAX: usize = 1024;
/// Lives of one site (its own or a peer's) whose replica ids are recognized: the current one
/// and the ones before it, newest last. Ops of older lives are long delivered everywhere or
/// come back by full syncs (docs/replication.md §9).
pub const LIVES_RECOGNIZED: u32 = 64;
/// How long a peer may stay behind this site on a retired life before its link is reset,
/// so that its next handshake gets the full sync that brings those ops (acks arrive every
/// second; a full sync just sent needs one of them to show).
pub const RETIRED_RESYNC_AFTER_MS: u64 = 3_000;

/// The replica ids of `site`'s shard `shard` in lives up to `life` that are recognized,
/// oldest first; the last is `life`'s.
pub fn lives_of(site: &str, shard: u8, life: u32) -> Vec<ReplicaId> {
    let first = life.saturating_sub(LIVES_RECOGNIZED - 1);
    (first..=life)
        .map(|l| ReplicaId::for_life(site, shard, l))
        .collect()
}

/// State of one direction of a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum LinkState {
    #[default]
    Down,
    Connecting,
    FullSync,
    Up,
}

impl LinkState {
    pub fn name(self) -> &'static str {
        match self {
            LinkState::Down => "down",
            LinkState::Connecting => "connecting",
            LinkState::FullSync => "full_sync",
            LinkState::Up => "up",
        }
    }
}

/// What a shard knows of one shard of a peer site: both directions of the links between
/// them. A shard has one `Peer` per shard of every peer site (each streams only the ops of
/// the slots the other owns), learned from handshakes (`SyncState::discover`).
#[derive(Debug)]
pub struct Peer {
    pub site: String,
    /// The peer site's shard this entry is for.
    pub shard: u16,
    /// `host:port` of its sync port; a name is resolved again on every dial.
    pub addr: String,
    /// The replica of the peer's shard that streams to this shard: its current life's.
    pub replica: ReplicaId,
    /// The peer's life as last learned from a handshake (0 until then).
    pub life: u32,
    /// The slot ranges the peer's shard owns, as its last handshake stated them (empty until
    /// one): garbage collection waits only for peers whose slots meet this shard's
    /// (`Shard::retired_ops_owed`).
    pub slots: Vec<(u16, u16)>,
    /// The peer's recognized lives, oldest first (`lives_of`); the last is `replica`. Its
    /// stream may carry ops of any of them; all but the last are retired.
    pub lives: Vec<ReplicaId>,
    /// Since when (ms) the peer's acks show it behind this site on a retired life: past
    /// `RETIRED_RESYNC_AFTER_MS` its link is reset for a full sync.
    pub retired_behind_since_ms: Option<u64>,
    // --- The peer's ops coming here (the link this shard dials). ---
    pub inbound: LinkState,
    /// The peer's incarnation whose ops were applied last (0: none).
    pub in_incarnation: u64,
    /// Last sequence number applied from the peer in `in_incarnation`.
    pub in_applied_seq: u64,
    /// The peer's life when `in_incarnation` was announced (not kept across restarts).
    pub in_life: u32,
    pub in_wire_bytes: u64,
    pub in_raw_bytes: u64,
    pub full_syncs_in: u64,
    pub partial_syncs_in: u64,
    /// Ops applied from the peer (duplicates skipped are not counted).
    pub ops_in: u64,
    // --- This shard's ops going to the peer (the link the peer dials). ---
    pub outbound: LinkState,
    /// Generation of the current outbound link: a new link from the peer replaces the old.
    pub out_generation: u64,
    /// Last sequence number of this incarnation the peer acked.
    pub acked_seq: u64,
    /// What the peer has delivered from every origin, as of its last ack (None: never acked).
    pub acked: Option<VersionVector>,
    /// Retired-life entries that full syncs from this peer carried while it owned fewer
    /// slots than this shard (`end_full_sync_in`): its word covers only its slots, so the
    /// delivered vector does not take them, but this link has them: the Hello and acks to
    /// this peer state them, or it would choose a full sync again on every handshake.
    /// Kept on disk (`Kind::RetiredIn` records, the snapshot header) and restored by
    /// recovery before the first Hello: a restart costs such a link no full sync
    /// (`Shard::log_retired_in` says why a crash can only leave it older, never ahead).
    pub retired_in: VersionVector,
    /// The latest acked vector that garbage collection may use: one whose ack came after
    /// this shard had applied every op the peer issued before acking (its own entry in the
    /// vector). Acks travel on another connection than the peer's ops, so an ack can overtake
    /// an op the peer issued earlier; such an op (a DEL that observed part of a counter's
    /// increments, say) must not meet metadata already collected on the ack's word.
    pub acked_causal: Option<VersionVector>,
    /// Wall-clock ms of the last ack (or of start-up, before any).
    pub last_ack_ms: u64,
    pub out_wire_bytes: u64,
    pub out_raw_bytes: u64,
    pub full_syncs_out: u64,
    pub partial_syncs_out: u64,
    /// Left out of garbage collection for silence beyond `sync-quarantine-ms`; its next
    /// resume becomes a full sync.
    pub quarantined: bool,
    /// The peer restarted without some of its own ops this site holds (its new incarnation
    /// resumed below what this site had applied): its next dial gets a full sync, which
    /// brings them back to it.
    pub owes_full_sync: bool,
    /// Set with `quarantined`: this site collected metadata without the peer, so when it next
    /// dials the peer it asks for a full sync of every key (cleared when that one completes).
    pub rejoin_pull: bool,
    pub last_error: String,
    /// Replication lag samples in ms (age of the oldest op of each acked range).
    pub lag_ms: VecDeque<u64>,
    /// Removed by CRDT.REMOVEPEER: its links are dropped and refused, garbage collection no
    /// longer waits for it (it is also `quarantined`). Kept in `peers` so that the indices of
    /// the other peers' tasks stay valid and its replica ids stay recognized.
    pub removed: bool,
    /// The peer's latest promise (a `Ping` body, `link::promise`), taken once every op it
    /// sent before it was applied here: none of its later ops carries an hlc at or below
    /// this. In memory only; never goes down.
    pub promised: meridian_crdt::Hlc,
}

impl Peer {
    fn new(site: &str, addr: &str, shard: u16, now_ms: u64) -> Peer {
        let r = crate::shard::replica_shard(shard);
        Peer {
            site: site.to_string(),
            shard,
            addr: addr.to_string(),
            replica: ReplicaId::for_site_shard(site, r),
            life: 0,
            lives: lives_of(site, r, 0),
            slots: Vec::new(),
            retired_behind_since_ms: None,
            inbound: LinkState::Down,
            in_incarnation: 0,
            in_applied_seq: 0,
            in_life: 0,
            in_wire_bytes: 0,
            in_raw_bytes: 0,
            full_syncs_in: 0,
            partial_syncs_in: 0,
            ops_in: 0,
            outbound: LinkState::Down,
            out_generation: 0,
            acked_seq: 0,
            acked: None,
            retired_in: VersionVector::new(),
            acked_causal: None,
            last_ack_ms: now_ms,
            out_wire_bytes: 0,
            out_raw_bytes: 0,
            full_syncs_out: 0,
            partial_syncs_out: 0,
            quarantined: false,
            owes_full_sync: false,
            rejoin_pull: false,
            last_error: String::new(),
            lag_ms: VecDeque::new(),
            removed: false,
            promised: meridian_crdt::Hlc::ZERO,
        }
    }

    /// Records one lag sample, keeping the last `LAG_SAMPLES_MAX`.
    pub fn note_lag(&mut self, ms: u64) {
        if self.lag_ms.len() >= LAG_SAMPLES_MAX {
            self.lag_ms.pop_front();
        }
        self.lag_ms.push_back(ms);
    }

    /// The name its positions are logged under: the site, with `#shard` after it for any
    /// shard but 0 (a one-shard site's entries keep their names).
    pub fn key(&self) -> String {
        peer_key(&self.site, self.shard)
    }

    /// Takes the life the peer stated in a handshake: its new ops carry that life's replica
    /// id. Returns whether it changed.
    pub fn learn_life(&mut self, life: u32) -> bool {
        if life == self.life {
            return false;
        }
        self.life = life;
        self.lives = lives_of(&self.site, crate::shard::replica_shard(self.shard), life);
        if let Some(r) = self.lives.last() {
            self.replica = *r;
        }
        true
    }

    /// The `q` quantile (0..=1) of the recent lag samples.
    pub fn lag_quantile(&self, q: f64) -> u64 {
        crate::stats::quantile(self.lag_ms.iter().copied(), q)
    }
}

/// The name of (site, shard)'s entry in logs and snapshots (`Peer::key`).
pub fn peer_key(site: &str, shard: u16) -> String {
    if shard == 0 {
        site.to_string()
    } else {
        format!("{site}#{shard}")
    }
}

/// The (site, shard) a `peer_key` names.
pub fn parse_peer_key(key: &str) -> (&str, u16) {
    match key.rsplit_once('#') {
        Some((site, n)) => match n.parse() {
            Ok(shard) => (site, shard),
            Err(_) => (key, 0),
        },
        None => (key, 0),
    }
}

/// Most shards a peer site may announce (each becomes a `Peer` with its own link).
pub const PEER_SHARDS_MAX: u16 = crate::slot::SHARDS_MAX as u16;

/// Garbage-collection counters.
#[derive(Debug, Default)]
pub struct GcStats {
    /// Keys holding removal metadata, as of the last GC step (`Db::meta_keys`).
    pub pending_keys: u64,
    /// Keys whose metadata was collected (partly or wholly), in total.
    pub collected_keys: u64,
    /// Keys removed from the table once their last metadata was collected.
    pub dropped_keys: u64,
    /// Writes this shard issued to retire TTL writes that timed nothing
    /// (`Effect::ExpireRetire`), in total.
    pub retired_ttls: u64,
    /// Where the next GC step resumes its scan: (db, bucket).
    pub cursor: (usize, usize),
    /// Why collection waits for a full sync, as of the last GC step (logged as it changes).
    pub held_by: Option<gc::RetiredOwed>,
}

/// A shard's replication state. See the module doc.
#[derive(Debug)]
pub struct SyncState {
    /// This process's life: a random non-zero number, so peers never confuse sequence numbers
    /// of two lives.
    pub incarnation: u64,
    /// This shard's incarnations whose ops may still be retained, oldest first, each with
    /// the first sequence number it issued; the last is `incarnation`. Sequence numbers
    /// continue across incarnations (a restart recovered from disk goes on after its last
    /// recovered op), so a peer that knows an earlier one can resume where it stopped.
    // Invariant: first sequence numbers strictly increase; the last entry is `incarnation`.
    pub incarnations: Vec<(u64, u64)>,
    /// Hlc of this shard's last own op before the current incarnation began.
    pub own_before_incarnation: meridian_crdt::Hlc,
    /// This shard's life (docs/replication.md §9): 0 at first, one more after every start
    /// that may have lost ops peers hold (a reboot, or no log). `Shard::replica` is its
    /// replica id.
    pub life: u32,
    /// This shard's recognized lives' replica ids, oldest first; the last is the current one.
    /// Ops of the earlier ones (retired) may still be in the log and streamed, but no new op
    /// is ever issued under them.
    pub lives: Vec<ReplicaId>,
    /// For each of this shard's retired lives, the hlc of the last op it issued and kept (in
    /// its log or snapshot): its stream delivers those to a peer that resumes. What it holds
    /// beyond that of a retired life of its own came back from peers by a full sync, and
    /// reaches another peer only by one.
    pub own_logged: VersionVector,
    /// Highest hlc applied from each origin other than this shard's current life (`own_last`
    /// stands for that one; this shard's retired lives are here).
    pub delivered: VersionVector,
    /// Hlc of the last op this shard originated (its own entry in what it has delivered).
    pub own_last: meridian_crdt::Hlc,
    /// Own ops of this life that this shard may have issued before a restart and lost from
    /// its log (above the last one recovered, up to the clock lease): its causal context
    /// does not cover them (`Shard::context`), so a peer's copy of one is never taken for
    /// removed here or there. Set at a restart in the same life; empty in practice, since a
    /// killed process keeps what it wrote, unless the disk lost acknowledged data.
    pub own_gap: Option<meridian_crdt::Gap>,
    pub peers: Vec<Peer>,
    /// Compression of frames this site sends.
    pub codec: Codec,
    pub tls: Option<Arc<TlsContext>>,
    // Set by a sender that found nothing to send; the next local write clears it and wakes
    // senders (one bool test per write, no atomic, when nobody waits).
    sender_waiting: bool,
    pub new_ops: Rc<Notify>,
    pub gc: GcStats,
    /// The full sync being received now, if any: the sending peer and its causal context
    /// (`FullSyncBegin::context`). One at a time: another peer's full sync, and another
    /// peer's ops that the context covers and this shard has not delivered, wait until it
    /// ends (docs/replication.md §5).
    pub receiving: Option<(usize, meridian_crdt::Context)>,
    /// Signalled when `receiving` ends (complete or not).
    pub receiving_ended: Rc<Notify>,
    /// Frames refused from peers (forged origin, future timestamps, malformed...).
    pub frames_refused: u64,
    /// Peers added at run time whose dialer is not started yet (`link::dial_supervisor`).
    pub dials_wanted: Vec<usize>,
    pub dial_wanted: Rc<Notify>,
}

impl SyncState {
    pub fn new(
        config: &Config,
        shard: u16,
        now_ms: u64,
        tls: Option<Arc<TlsContext>>,
    ) -> SyncState {
        let shard = crate::shard::replica_shard(shard);
        // Shard 0 of every peer site; the others are learned from handshakes.
        let peers = config
            .peers()
            .unwrap_or_default()
            .iter()
            .map(|p| Peer::new(&p.site, &p.addr, 0, now_ms))
            .collect();
        let incarnation = rand::random::<u64>().max(1);
        SyncState {
            incarnation,
            incarnations: vec![(incarnation, 1)],
            own_before_incarnation: meridian_crdt::Hlc::ZERO,
            life: 0,
            lives: lives_of(&config.site, shard, 0),
            own_logged: VersionVector::new(),
            delivered: VersionVector::new(),
            own_last: meridian_crdt::Hlc::ZERO,
            own_gap: None,
            peers,
            codec: Codec::parse(&config.sync_compression).unwrap_or_default(),
            tls,
            sender_waiting: false,
            new_ops: Rc::new(Notify::new()),
            gc: GcStats::default(),
            receiving: None,
            receiving_ended: Rc::new(Notify::new()),
            frames_refused: 0,
            dials_wanted: Vec::new(),
            dial_wanted: Rc::new(Notify::new()),
        }
    }

    /// Starts a new incarnation whose first op will have sequence number `first_seq`.
    pub fn begin_incarnation(&mut self, first_seq: u64) {
        let incarnation = loop {
            let n = rand::random::<u64>().max(1);
            if self.incarnations.iter().all(|(i, _)| *i != n) {
                break n;
            }
        };
        self.incarnation = incarnation;
        self.own_before_incarnation = self.own_last;
        self.incarnations.retain(|(_, first)| *first < first_seq);
        self.incarnations.push((incarnation, first_seq));
        if self.incarnations.len() > INCARNATIONS_MAX {
            let excess = self.incarnations.len() - INCARNATIONS_MAX;
            self.incarnations.drain(..excess);
        }
    }

    /// The last sequence number of incarnation `id` (`current_seq` for the current one),
    /// if it is one of this shard's.
    pub fn incarnation_end(&self, id: u64, current_seq: u64) -> Option<u64> {
        let i = self.incarnations.iter().position(|(n, _)| *n == id)?;
        match self.incarnations.get(i + 1) {
            Some((_, next_first)) => Some(next_first.saturating_sub(1)),
            None => Some(current_seq),
        }
    }

    /// First sequence number of the current incarnation.
    pub fn incarnation_first_seq(&self) -> u64 {
        self.incarnations.last().map_or(1, |(_, f)| *f)
    }

    /// Called after every op appended to the op log: wakes senders waiting for ops.
    #[inline]
    pub fn ops_appended(&mut self) {
        if self.sender_waiting {
            self.sender_waiting = false;
            self.new_ops.notify_waiters();
        }
    }

    /// A sender found nothing to send: the next op appended wakes it.
    pub fn wait_for_ops(&mut self) {
        self.sender_waiting = true;
    }

    /// Whether `r` is a retired life (this shard's or a peer's, as far as handshakes told), or
    /// any life of a removed peer (CRDT.REMOVEPEER): nobody streams its ops any more, so a
    /// site that lacks some of them gets them only by a full sync. Ops are not relayed, so a
    /// removed site's ops that reached only some of the remaining sites reach the others
    /// this way.
    pub fn is_retired(&self, r: ReplicaId) -> bool {
        // A current life's id is never retired, even if another site's old life hashed to it.
        let current = |lives: &[ReplicaId]| lives.last() == Some(&r);
        if current(&self.lives) || self.peers.iter().any(|p| !p.removed && current(&p.lives)) {
            return false;
        }
        let retired =
            |lives: &[ReplicaId]| lives.split_last().is_some_and(|(_, old)| old.contains(&r));
        retired(&self.lives)
            || self.peers.iter().any(|p| {
                if p.removed {
                    p.lives.contains(&r)
                } else {
                    retired(&p.lives)
                }
            })
    }

    /// What this shard has delivered of retired lives.
    pub fn retired_delivered(&self) -> VersionVector {
        let mut v = VersionVector::new();
        for (r, hlc) in self.delivered.iter() {
            if self.is_retired(r) {
                v.observe(meridian_crdt::Stamp { hlc, replica: r });
            }
        }
        v
    }

    /// Whether peer shard `peer`, whose delivered vector is `other`, lacks ops of a retired
    /// life that this shard holds and no stream will deliver. This shard's own retired lives
    /// count only beyond what it issued and kept (`own_logged`): its own stream resumes
    /// through the rest, or its handshake chooses a full sync when its log no longer holds
    /// the resume point. The lives of the peer's sibling shards (the other shards of its
    /// site) do not count: their ops are of the sibling's slots, which the peer does not own,
    /// so it never receives them and lacks nothing it should hold, while this shard's entry
    /// for them advances with every (empty) sparse batch of the sibling's stream.
    pub fn ahead_on_retired(&self, other: &VersionVector, peer: usize) -> bool {
        let of_sibling = |r: ReplicaId| {
            self.peers.get(peer).is_some_and(|d| {
                self.peers
                    .iter()
                    .any(|q| q.site == d.site && q.shard != d.shard && q.lives.contains(&r))
            })
        };
        self.delivered.iter().any(|(r, hlc)| {
            hlc > other.get(r)
                && self.is_retired(r)
                && !(self.lives.contains(&r) && hlc <= self.own_logged.get(r))
                && !of_sibling(r)
        })
    }

    /// Number of peer sites.
    pub fn peer_sites(&self) -> usize {
        let mut sites: Vec<&str> = self
            .peers
            .iter()
            .filter(|p| !p.removed)
            .map(|p| p.site.as_str())
            .collect();
        sites.sort_unstable();
        sites.dedup();
        sites.len()
    }

    /// The first entry of peer site `site` (its shard 0's): its address and whether it was
    /// removed are the site's.
    pub fn peer(&self, site: &str) -> Option<&Peer> {
        self.peers.iter().find(|p| p.site == site)
    }

    pub fn peer_mut(&mut self, site: &str) -> Option<&mut Peer> {
        self.peers.iter_mut().find(|p| p.site == site)
    }

    /// Whether `site` is a configured peer site.
    pub fn knows_site(&self, site: &str) -> bool {
        self.peers.iter().any(|p| p.site == site)
    }

    /// The index of the entry of shard `shard` of `site`.
    pub fn peer_index(&self, site: &str, shard: u16) -> Option<usize> {
        self.peers
            .iter()
            .position(|p| p.site == site && p.shard == shard)
    }

    /// The hlc below which no op of any peer is still to come: for each peer shard not
    /// removed (quarantined ones included: they may still deliver), the larger of its promise
    /// and the last op applied from its current life; the least of those. `None` with no
    /// peers. A peer never heard from counts as zero.
    pub fn stable_hlc(&self) -> Option<meridian_crdt::Hlc> {
        self.peers
            .iter()
            .filter(|p| !p.removed)
            .map(|p| p.promised.max(self.delivered.get(p.replica)))
            .min()
    }

    /// `site` has `shards` shards: adds an entry for each one not known yet (a configured
    /// site only). Returns the indices added; their links start at the caller's. Shard
    /// counts above `PEER_SHARDS_MAX` are taken as that many.
    pub fn discover(&mut self, site: &str, shards: u16, now_ms: u64) -> Vec<usize> {
        let Some(addr) = self
            .peer(site)
            .filter(|p| !p.removed)
            .map(|p| p.addr.clone())
        else {
            return Vec::new();
        };
        let mut added = Vec::new();
        for shard in 0..shards.min(PEER_SHARDS_MAX) {
            if self.peer_index(site, shard).is_none() {
                self.peers.push(Peer::new(site, &addr, shard, now_ms));
                added.push(self.peers.len() - 1);
            }
        }
        added
    }
}

/// Formats a version vector for INFO: `replica_hex=hlc` joined by `;` (commas separate
/// INFO sub-fields).
pub fn vv_text(vv: &VersionVector) -> String {
    let mut s = String::new();
    for (i, (r, h)) in vv.iter().enumerate() {
        if i > 0 {
            s.push(';');
        }
        let _ = write!(s, "{:08x}={}", r.0, h.0);
    }
    s
}

impl crate::shard::Shard {
    /// Takes peer `peer`'s promise `h` (a `Ping` body) once every op it sent before is
    /// applied: the clock moves past it, so that this site's own later `XADD *` IDs are above
    /// the stable ID too. Refused like an op when it is ahead of the clock by more than
    /// `sync-clock-skew-ms-max`.
    pub fn take_promise(
        &mut self,
        peer: usize,
        h: meridian_crdt::Hlc,
        now_ms: u64,
    ) -> Result<(), meridian_syncer::SyncError> {
        let skew = self.config.sync_clock_skew_ms_max;
        if self.clock.observe(h, now_ms, skew).is_err() {
            return Err(meridian_syncer::SyncError::Refused(format!(
                "promise is stamped {} ms ahead of this site's clock (limit {skew})",
                h.physical_ms().saturating_sub(now_ms)
            )));
        }
        if let Some(p) = self.sync.peers.get_mut(peer) {
            p.promised = p.promised.max(h);
        }
        Ok(())
    }

    /// CRDT.ADDPEER: a new peer; its dialer starts at once, its links are accepted from now.
    pub fn add_peer(&mut self, site: &str, addr: &str) {
        let now = self.now_ms();
        let index = self.sync.peers.len();
        // Its shard 0 first: its handshake tells how many shards it has (`discover`).
        self.sync.peers.push(Peer::new(site, addr, 0, now));
        self.sync.dials_wanted.push(index);
        self.sync.dial_wanted.notify_one();
        self.peers += 1;
        self.oplog.set_retain_for_peers(true);
    }

    /// CRDT.REMOVEPEER: drops the peer's links (its sender sees a new generation, its
    /// receiver and dialer see `removed`), refuses its links from now, and leaves it out of
    /// garbage collection. Returns false when there is no such peer.
    pub fn remove_peer(&mut self, site: &str) -> bool {
        if self.sync.peer(site).is_none_or(|p| p.removed) {
            return false;
        }
        // Every entry of the site (one per shard of it).
        for p in self.sync.peers.iter_mut().filter(|p| p.site == site) {
            p.removed = true;
            p.quarantined = true;
            p.out_generation += 1;
            p.inbound = LinkState::Down;
            p.outbound = LinkState::Down;
            p.last_error = "removed from this deployment".to_string();
        }
        self.peers = self.peers.saturating_sub(1);
        // CRDT.WAIT counts acks of live peers: a waiter may be done now.
        while self.blocking.signal(WAIT_DB, WAIT_KEY).is_some() {}
        true
    }

    /// Takes `life` as this shard's life: its replica id (new ops carry it) and the lives
    /// it recognizes as its own in the log.
    pub fn set_life(&mut self, life: u32) {
        self.sync.life = life;
        self.sync.lives = lives_of(&self.config.site, self.replica_shard(), life);
        let id = ReplicaId::for_life(&self.config.site, self.replica_shard(), life);
        self.replica = id;
        self.oplog.set_origin(id);
        self.persist.replica = id;
        self.persist.lives = self.sync.lives.clone();
    }

    /// After a full sync: the delivered vector takes the sender's causal context
    /// (`FullSyncBegin::context`; `retired` from senders that sent no more): the merged states
    /// carried every op it covers, which this shard now holds or knows removed (retired lives'
    /// ops included, which no stream delivers), so `apply_received` skips those ops when their
    /// streams bring them. Logged as a `Delivered` record. Never this shard's current life.
    pub fn take_context(&mut self, context: &meridian_crdt::Context) {
        let mut taken = VersionVector::new();
        for (r, hlc) in context.seen.iter() {
            // Of an origin with a gap, only the part before it: the ops in the gap were lost
            // at the sender (and its later ops come by its stream).
            let hlc = match context.gap {
                Some(g) if g.replica == r => hlc.min(g.after),
                _ => hlc,
            };
            if r != self.replica && hlc > self.sync.delivered.get(r) {
                let stamp = meridian_crdt::Stamp { hlc, replica: r };
                self.sync.delivered.observe(stamp);
                taken.observe(stamp);
            }
        }
        if !taken.is_empty() {
            self.persist.append_delivered(&taken);
        }
    }

    /// Begins the next life (after recovery, before any op is issued): the first life number
    /// after the current one whose replica id is no origin this shard knows of. What the
    /// current life issued becomes an entry of `delivered` like any other origin's.
    pub fn begin_life(&mut self) -> u32 {
        let old = self.replica;
        if self.sync.own_last > meridian_crdt::Hlc::ZERO {
            let stamp = meridian_crdt::Stamp {
                hlc: self.sync.own_last,
                replica: old,
            };
            self.sync.delivered.observe(stamp);
            self.sync.own_logged.observe(stamp);
        }
        self.sync.own_last = meridian_crdt::Hlc::ZERO;
        let mut life = self.sync.life;
        loop {
            life = life.wrapping_add(1).max(1);
            let id = ReplicaId::for_life(&self.config.site, self.replica_shard(), life);
            let taken = self.sync.delivered.get(id) > meridian_crdt::Hlc::ZERO
                || self.sync.lives.contains(&id)
                || self.sync.peers.iter().any(|p| p.lives.contains(&id));
            if !taken {
                break;
            }
            tracing::warn!(life, replica = %format_args!("{:08x}", id.0), "life skipped: its replica id is taken");
        }
        self.set_life(life);
        life
    }

    /// The peer sites that acked this shard's ops up to `seq` (with 0: that acked at all),
    /// over every link to each site (a site of several shards acks on each).
    pub fn sites_acked(&self, seq: u64) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut failed: Vec<&str> = Vec::new();
        for p in &self.sync.peers {
            let ok = p.acked_seq >= seq && (seq > 0 || p.acked.is_some());
            if !ok {
                failed.push(&p.site);
            }
        }
        for p in &self.sync.peers {
            if !failed.contains(&p.site.as_str()) && !out.contains(&p.site) {
                out.push(p.site.clone());
            }
        }
        out
    }

    /// This shard's causal context: what it has delivered (its own ops included, less the
    /// ones it may have lost, `SyncState::own_gap`). Every write it covers is held here or
    /// was removed here, whatever was collected since (docs/replication.md §5).
    pub fn context(&self) -> meridian_crdt::Context {
        meridian_crdt::Context {
            seen: self.delivered_vv(),
            gap: self.sync.own_gap,
        }
    }

    /// This shard's delivered vector including its own origin.
    pub fn delivered_vv(&self) -> VersionVector {
        let mut vv = self.sync.delivered.clone();
        vv.observe(meridian_crdt::Stamp {
            hlc: self.sync.own_last,
            replica: self.replica,
        });
        vv
    }

    /// One peer link's `crdt_peer_*` subfields.
    fn peer_line(&self, p: &Peer, now: u64) -> String {
        let lag_ops = self.seq.saturating_sub(p.acked_seq);
        let lag_bytes = if lag_ops == 0 {
            0
        } else {
            self.oplog.bytes_after(p.acked_seq)
        };
        let lag_ms = if lag_ops == 0 {
            0
        } else {
            self.oplog
                .hlc_of(p.acked_seq + 1)
                .map_or(0, |h| now.saturating_sub(h.physical_ms()))
        };
        let mut line = String::new();
        let _ = write!(
            line,
            "addr={},in_link={},out_link={},in_incarnation={:016x},in_applied_seq={},ops_in={},\
             acked_seq={},acked_vv={},lag_ops={},lag_bytes={},lag_ms={},lag_p50_ms={},lag_p99_ms={},\
             in_bytes={},in_bytes_raw={},out_bytes={},out_bytes_raw={},\
             partial_syncs_in={},full_syncs_in={},partial_syncs_out={},full_syncs_out={},\
             quarantined={},last_error={}",
            p.addr,
            p.inbound.name(),
            p.outbound.name(),
            p.in_incarnation,
            p.in_applied_seq,
            p.ops_in,
            p.acked_seq,
            p.acked.as_ref().map(vv_text).unwrap_or_default(),
            lag_ops,
            lag_bytes,
            lag_ms,
            p.lag_quantile(0.5),
            p.lag_quantile(0.99),
            p.in_wire_bytes,
            p.in_raw_bytes,
            p.out_wire_bytes,
            p.out_raw_bytes,
            p.partial_syncs_in,
            p.full_syncs_in,
            p.partial_syncs_out,
            p.full_syncs_out,
            u8::from(p.quarantined),
            if p.last_error.is_empty() {
                "none".to_string()
            } else {
                p.last_error.replace([',', '\r', '\n', ':'], " ")
            },
        );
        line
    }

    /// The `# CRDT` section of INFO.
    pub fn info_crdt(&self, out: &mut String) {
        let now = self.now_ms();
        let mut f = |k: &str, v: &dyn std::fmt::Display| {
            let _ = write!(out, "{k}:{v}\r\n");
        };
        f("crdt_site", &self.config.site);
        f("crdt_deployment_id", &self.config.deployment_id);
        f("crdt_replica_id", &format_args!("{:08x}", self.replica.0));
        f("crdt_life", &self.sync.life);
        f("crdt_shards", &self.slots.shards());
        f(
            "crdt_incarnation",
            &format_args!("{:016x}", self.sync.incarnation),
        );
        f("crdt_seq", &self.seq);
        f("crdt_clock", &self.clock.last().0);
        f("crdt_version_vector", &vv_text(&self.delivered_vv()));
        f("crdt_oplog_bytes", &self.oplog.bytes());
        f("crdt_oplog_ops", &self.oplog.ops());
        f("crdt_oplog_first_seq", &self.oplog.first_seq().unwrap_or(0));
        // Past maxmemory this site still applies its peers' ops (docs/conflicts.md).
        f("crdt_maxmemory_over", &u8::from(self.evict.over));
        f(
            "crdt_ops_applied_over_maxmemory",
            &self.evict.remote_ops_over,
        );
        // Keys evicted here and not written whole since (docs/conflicts.md §18).
        f("crdt_evicted_keys_marked", &self.evict.evicted.len());
        f(
            "crdt_evicted_writes_not_applied",
            &self.stats.evicted_writes_not_applied,
        );
        f("crdt_evictions_held_back", &self.stats.evictions_held_back);
        f("crdt_sync_compression", &self.sync.codec.name());
        f("crdt_sync_tls", &u8::from(self.sync.tls.is_some()));
        f("crdt_peers", &self.sync.peer_sites());
        // One line per peer site; a site of several shards has a link to each, merged.
        let mut lines: Vec<(String, Vec<String>)> = Vec::new();
        for p in self.sync.peers.iter().filter(|p| !p.removed) {
            let line = self.peer_line(p, now);
            match lines.iter_mut().find(|(site, _)| *site == p.site) {
                Some((_, v)) => v.push(line),
                None => lines.push((p.site.clone(), vec![line])),
            }
        }
        for (site, v) in &lines {
            let refs: Vec<&str> = v.iter().map(String::as_str).collect();
            let merged = crate::info_merge::merge_subfields(&refs);
            f(
                &format!("crdt_peer_{site}"),
                &format_args!("{merged},shards={}", v.len()),
            );
        }
        if self.slots.shards() > 1 {
            // This shard's own line: the site's INFO shows one per shard.
            let stable = self.stable_vv();
            f(
                &format!("crdt_shard_{}", self.index),
                &format_args!(
                    "replica={:08x},life={},seq={},slots={},keys={},peer_links={},gc_pending_keys={},gc_stable={}",
                    self.replica.0,
                    self.sync.life,
                    self.seq,
                    self.slots.slot_count(self.index),
                    self.key_count(),
                    self.sync.peers.len(),
                    self.sync.gc.pending_keys,
                    stable.as_ref().map_or("none".to_string(), vv_text),
                ),
            );
        }
        f("crdt_frames_refused", &self.sync.frames_refused);
        f("crdt_gc_pending_keys", &self.sync.gc.pending_keys);
        // Shards whose collection waits for a full sync (`Shard::retired_ops_owed`).
        f(
            "crdt_gc_waiting_full_sync",
            &u64::from(self.sync.gc.held_by.is_some()),
        );
        f("crdt_gc_collected_keys", &self.sync.gc.collected_keys);
        f("crdt_gc_dropped_keys", &self.sync.gc.dropped_keys);
        f("crdt_gc_retired_ttls", &self.sync.gc.retired_ttls);
        f("crdt_type_conflicts", &self.stats.type_conflicts);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use meridian_crdt::{Hlc, Stamp};

    fn state() -> SyncState {
        let config = Config {
            site: "a".into(),
            peer: vec!["b=127.0.0.1:1".into(), "c=127.0.0.1:2".into()],
            ..Config::default()
        };
        SyncState::new(&config, 0, 0, None)
    }

    fn vv(entries: &[(ReplicaId, u64)]) -> VersionVector {
        let mut v = VersionVector::new();
        for (r, h) in entries {
            v.observe(Stamp {
                hlc: Hlc(*h),
                replica: *r,
            });
        }
        v
    }

    #[test]
    fn only_lives_a_handshake_told_of_are_retired_and_never_a_current_one() {
        let mut s = state();
        let b0 = ReplicaId::for_life("b", 0, 0);
        let b1 = ReplicaId::for_life("b", 0, 1);
        s.delivered = vv(&[(b0, 10)]);
        let c = s.peer_index("c", 0).unwrap();
        // Until b says it began life 1, its life-0 ops stream from b itself.
        assert!(!s.is_retired(b0));
        assert!(!s.ahead_on_retired(&VersionVector::new(), c));
        let b = s.peers.iter_mut().find(|p| p.site == "b").unwrap();
        assert!(b.learn_life(1));
        assert!(!b.learn_life(1), "nothing new the second time");
        assert_eq!((b.replica, b.lives.clone()), (b1, vec![b0, b1]));
        assert!(s.is_retired(b0));
        assert!(!s.is_retired(b1));
        // A site lacking b's life-0 ops that this one holds gets a full sync; one that has
        // them does not.
        assert!(s.ahead_on_retired(&vv(&[(b0, 9)]), c));
        assert!(!s.ahead_on_retired(&vv(&[(b0, 10)]), c));
    }

    #[test]
    fn every_life_of_a_removed_peer_is_retired() {
        let mut s = state();
        let c0 = ReplicaId::for_life("c", 0, 0);
        let b0 = ReplicaId::for_life("b", 0, 0);
        s.delivered = vv(&[(c0, 10), (b0, 10)]);
        assert!(
            !s.is_retired(c0),
            "c streams its own ops while it is a peer"
        );
        let c = s.peers.iter_mut().find(|p| p.site == "c").unwrap();
        c.removed = true;
        // Nobody streams c's ops now: a site lacking some that this one holds gets them by
        // a full sync; b's current life is unaffected.
        assert!(s.is_retired(c0));
        assert!(!s.is_retired(b0));
        let b = s.peer_index("b", 0).unwrap();
        assert!(s.ahead_on_retired(&vv(&[(c0, 9), (b0, 10)]), b));
        assert!(!s.ahead_on_retired(&vv(&[(c0, 10), (b0, 5)]), b));
    }

    #[test]
    fn own_retired_ops_kept_in_the_log_stream_but_ones_that_came_back_do_not() {
        let mut s = state();
        let a0 = ReplicaId::for_life("a", 0, 0);
        let a1 = ReplicaId::for_life("a", 0, 1);
        s.life = 1;
        s.lives = vec![a0, a1];
        s.own_logged = vv(&[(a0, 10)]);
        let b = s.peer_index("b", 0).unwrap();
        s.delivered = vv(&[(a0, 10)]);
        assert!(
            !s.ahead_on_retired(&vv(&[(a0, 5)]), b),
            "the stream resumes them"
        );
        // The lost tail came back from a peer (up to 12): past 10, only a full sync has it.
        s.delivered = vv(&[(a0, 12)]);
        assert!(s.ahead_on_retired(&vv(&[(a0, 10)]), b));
        assert!(!s.ahead_on_retired(&vv(&[(a0, 12)]), b));
    }

    /// A peer site of two shards that began a new life: each shard's old life is retired,
    /// and this shard holds both (the sibling's through empty sparse batches). A shard of
    /// that site never receives its sibling's ops, so lacking them is no reason for a full
    /// sync (the drill `site-power-off` with two shards per site got one on every link
    /// between different shards); lacking its own old life's ops, or a third site lacking
    /// either, still is.
    #[test]
    fn a_dialer_lacking_its_sibling_shards_retired_ops_is_not_behind() {
        let mut s = state();
        s.discover("b", 2, 0);
        let (b_0, b_1) = (s.peer_index("b", 0).unwrap(), s.peer_index("b", 1).unwrap());
        let c = s.peer_index("c", 0).unwrap();
        let old0 = ReplicaId::for_life("b", 0, 0);
        let old1 = ReplicaId::for_life("b", 1, 0);
        s.delivered = vv(&[(old0, 10), (old1, 20)]);
        for i in [b_0, b_1] {
            assert!(s.peers.get_mut(i).unwrap().learn_life(1));
        }
        assert!(s.is_retired(old0) && s.is_retired(old1));
        assert!(!s.ahead_on_retired(&vv(&[(old0, 10)]), b_0));
        assert!(!s.ahead_on_retired(&vv(&[(old1, 20)]), b_1));
        assert!(
            s.ahead_on_retired(&vv(&[(old0, 9)]), b_0),
            "its own lost tail"
        );
        assert!(
            s.ahead_on_retired(&vv(&[(old1, 19)]), b_1),
            "its own lost tail"
        );
        assert!(s.ahead_on_retired(&vv(&[(old0, 10)]), c));
        assert!(!s.ahead_on_retired(&vv(&[(old0, 10), (old1, 20)]), c));
    }
}

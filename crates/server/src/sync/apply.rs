//! Remote ops and full-sync states into the keyspace.
//!
//! A frame is decoded and validated whole (`decode_batch`, `decode_chunk`) before anything is
//! applied, so a bad frame applies nothing. Applying then runs in one borrow of the shard:
//! no client command interleaves with a batch.

use meridian_crdt::codec::{Reader, put_bytes};
use meridian_crdt::{Hlc, KeyState, ReplicaId, Stamp, VersionVector};
use meridian_syncer::{FullSyncBegin, OpsHeader, SparseHeader, SyncError};

use crate::oplog::{self, OpBody, OpRecord};
use crate::shard::Shard;

/// Most records one `Ops` frame may carry (the frame size bounds them too).
pub const BATCH_RECORDS_MAX: u32 = 1 << 20;
/// Most keys in one full-sync chunk.
pub const CHUNK_KEYS_MAX: usize = 1 << 16;

/// Decodes an `Ops` body from the peer whose recognized lives are `lives` (its log may still
/// hold ops of earlier ones), checking every record: the origin is one of them, the
/// incarnation, the database index and the clock skew.
pub fn decode_batch(
    body: &[u8],
    lives: &[ReplicaId],
    incarnation: u64,
    databases: usize,
    now_ms: u64,
    skew_ms_max: u64,
) -> Result<(OpsHeader, Vec<OpRecord>), SyncError> {
    let (h, mut rest) = OpsHeader::decode(body)?;
    if !lives.contains(&h.origin) {
        return Err(SyncError::Refused(format!(
            "forged origin: ops as replica {:08x} on the link of replica {:08x}",
            h.origin.0,
            lives.last().map_or(0, |r| r.0)
        )));
    }
    let origin = h.origin;
    if h.incarnation != incarnation {
        return Err(SyncError::Refused(format!(
            "ops of incarnation {:016x} on a link announced as {:016x}",
            h.incarnation, incarnation
        )));
    }
    // Sequence numbers past u64::MAX would wrap (found by the sync_frames fuzz target).
    if h.count > BATCH_RECORDS_MAX
        || h.first_seq == 0
        || h.first_seq.checked_add(u64::from(h.count)).is_none()
    {
        return Err(SyncError::Refused(format!(
            "batch of {} records from seq {}",
            h.count, h.first_seq
        )));
    }
    let mut records = Vec::with_capacity((h.count as usize).min(4096));
    for i in 0..u64::from(h.count) {
        let (rec, used) = oplog::decode_wire(rest, origin, h.first_seq + i).map_err(|e| {
            SyncError::Refused(format!("record {} of the batch: {e}", h.first_seq + i))
        })?;
        check_record(&rec, databases, now_ms, skew_ms_max)?;
        records.push(rec);
        rest = rest.get(used..).unwrap_or_default();
    }
    if !rest.is_empty() {
        return Err(SyncError::Refused(format!(
            "{} bytes after the last record",
            rest.len()
        )));
    }
    Ok((h, records))
}

/// A batch of ops received from a peer's shard: every op of `origin` from `first_seq` to
/// `last_seq` that is in this shard's slots (all of them from an `Ops` frame, some from an
/// `OpsSparse` one). `last_hlc` is the hlc of the op at `last_seq`: once applied, this shard
/// has every op of the origin up to it that it should have.
#[derive(Debug)]
pub struct Received {
    pub origin: ReplicaId,
    pub first_seq: u64,
    pub last_seq: u64,
    pub last_hlc: Hlc,
    pub records: Vec<OpRecord>,
}

impl Received {
    /// A dense batch (`decode_batch`).
    pub fn dense(h: &OpsHeader, records: Vec<OpRecord>) -> Received {
        Received {
            origin: h.origin,
            first_seq: h.first_seq,
            last_seq: h.last_seq(),
            last_hlc: records.last().map_or(Hlc::ZERO, |r| r.hlc),
            records,
        }
    }
}

/// Checks one decoded record of a batch: its database and its clock skew.
fn check_record(
    rec: &OpRecord,
    databases: usize,
    now_ms: u64,
    skew_ms_max: u64,
) -> Result<(), SyncError> {
    if usize::from(rec.db) >= databases {
        return Err(SyncError::Refused(format!(
            "record {} names database {}",
            rec.seq, rec.db
        )));
    }
    if rec.hlc.physical_ms() > now_ms.saturating_add(skew_ms_max) {
        return Err(SyncError::Refused(format!(
            "record {} is stamped {} ms ahead of this site's clock (limit {skew_ms_max})",
            rec.seq,
            rec.hlc.physical_ms() - now_ms
        )));
    }
    Ok(())
}

/// Decodes an `OpsSparse` body, checking what `decode_batch` checks and that sequence
/// numbers strictly increase within `first_seq..=last_seq`, and that the watermark is not
/// ahead of the clock.
pub fn decode_sparse(
    body: &[u8],
    lives: &[ReplicaId],
    incarnation: u64,
    databases: usize,
    now_ms: u64,
    skew_ms_max: u64,
) -> Result<Received, SyncError> {
    let (h, mut rest) = SparseHeader::decode(body)?;
    if !lives.contains(&h.origin) {
        return Err(SyncError::Refused(format!(
            "forged origin: ops as replica {:08x} on the link of replica {:08x}",
            h.origin.0,
            lives.last().map_or(0, |r| r.0)
        )));
    }
    if h.incarnation != incarnation {
        return Err(SyncError::Refused(format!(
            "ops of incarnation {:016x} on a link announced as {:016x}",
            h.incarnation, incarnation
        )));
    }
    let span = h.last_seq - h.first_seq;
    if h.count > BATCH_RECORDS_MAX || u64::from(h.count) > span.saturating_add(1) {
        return Err(SyncError::Refused(format!(
            "sparse batch of {} records from seq {} to {}",
            h.count, h.first_seq, h.last_seq
        )));
    }
    if Hlc(h.last_hlc).physical_ms() > now_ms.saturating_add(skew_ms_max) {
        return Err(SyncError::Refused(format!(
            "sparse batch watermark {} ms ahead of this site's clock",
            Hlc(h.last_hlc).physical_ms() - now_ms
        )));
    }
    let mut records = Vec::with_capacity((h.count as usize).min(4096));
    let mut prev: Option<u64> = None;
    for _ in 0..h.count {
        let mut r = Reader::new(rest);
        let delta = r
            .varint()
            .map_err(|e| SyncError::Refused(format!("sparse record delta: {e}")))?;
        if delta > span || prev.is_some_and(|p| delta <= p) {
            return Err(SyncError::Refused(format!(
                "sparse record at distance {delta} out of order (span {span})"
            )));
        }
        prev = Some(delta);
        rest = rest.get(r.pos()..).unwrap_or_default();
        let seq = h.first_seq + delta;
        let (rec, used) = oplog::decode_wire(rest, h.origin, seq)
            .map_err(|e| SyncError::Refused(format!("record {seq} of the batch: {e}")))?;
        check_record(&rec, databases, now_ms, skew_ms_max)?;
        records.push(rec);
        rest = rest.get(used..).unwrap_or_default();
    }
    if !rest.is_empty() {
        return Err(SyncError::Refused(format!(
            "{} bytes after the last record",
            rest.len()
        )));
    }
    Ok(Received {
        origin: h.origin,
        first_seq: h.first_seq,
        last_seq: h.last_seq,
        last_hlc: Hlc(h.last_hlc),
        records,
    })
}

/// One key of a full-sync chunk.
#[derive(Debug, PartialEq)]
pub struct ChunkEntry {
    pub db: u16,
    pub key: Vec<u8>,
    pub state: KeyState,
    /// A FUNCTION library entry (`db` is `LIBRARY_DB`, `key` the library name, `state`
    /// empty): its register stamp and code (`None`: deleted).
    pub library: Option<(meridian_crdt::Stamp, Option<Vec<u8>>)>,
    /// A key the sender evicted (`state` empty): its state there is unknown, so the
    /// receiver of a complete full sync keeps its own copy (docs/conflicts.md §18).
    pub evicted: bool,
}

/// Appends one key the sender evicted to a full-sync chunk body: `EVICTED_DB db:u16
/// key:bytes`.
pub fn encode_chunk_evicted(out: &mut Vec<u8>, db: u16, key: &[u8]) {
    out.extend_from_slice(&crate::persist::snapshot::EVICTED_DB.to_le_bytes());
    out.extend_from_slice(&db.to_le_bytes());
    put_bytes(out, key);
}

/// Appends one FUNCTION library entry to a full-sync chunk body (the snapshot's encoding).
pub fn encode_chunk_library(
    out: &mut Vec<u8>,
    name: &[u8],
    stamp: meridian_crdt::Stamp,
    code: Option<&[u8]>,
) {
    out.extend_from_slice(&crate::persist::snapshot::LIBRARY_DB.to_le_bytes());
    put_bytes(out, name);
    let mut st = Vec::new();
    crate::persist::snapshot::encode_library(&mut st, stamp, code);
    put_bytes(out, &st);
}

/// Appends one key to a full-sync chunk body.
pub fn encode_chunk_entry(out: &mut Vec<u8>, db: u16, key: &[u8], state: &KeyState) {
    out.extend_from_slice(&db.to_le_bytes());
    put_bytes(out, key);
    let mut st = Vec::new();
    state.encode_state(&mut st);
    put_bytes(out, &st);
}

/// Encodes `entries` as a `FullSyncChunk` body (`decode_chunk`'s inverse).
pub fn encode_chunk(entries: &[ChunkEntry]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for e in entries {
        match &e.library {
            Some((stamp, code)) => encode_chunk_library(&mut out, &e.key, *stamp, code.as_deref()),
            None if e.evicted => encode_chunk_evicted(&mut out, e.db, &e.key),
            None => encode_chunk_entry(&mut out, e.db, &e.key, &e.state),
        }
    }
    out
}

/// Decodes a `FullSyncChunk` body (`n:u32` then n × `db:u16 key:bytes state:bytes`; a
/// library entry is `LIBRARY_DB name:bytes entry:bytes`, an evicted key `EVICTED_DB db:u16
/// key:bytes`).
pub fn decode_chunk(body: &[u8], databases: usize) -> Result<Vec<ChunkEntry>, SyncError> {
    let mut r = Reader::new(body);
    let bad = |e| SyncError::Malformed {
        what: "FullSyncChunk",
        source: e,
    };
    let n = r.u32().map_err(bad)? as usize;
    if n > CHUNK_KEYS_MAX {
        return Err(SyncError::Refused(format!("full-sync chunk of {n} keys")));
    }
    let mut out = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        let db = u16::from_le_bytes(r.array().map_err(bad)?);
        if db == crate::persist::snapshot::LIBRARY_DB {
            let key = r.bytes().map_err(bad)?.to_vec();
            let st = r.bytes().map_err(bad)?;
            let (stamp, code) = crate::persist::snapshot::decode_library(st).map_err(bad)?;
            out.push(ChunkEntry {
                db,
                key,
                state: KeyState::new(),
                library: Some((stamp, code.map(<[u8]>::to_vec))),
                evicted: false,
            });
            continue;
        }
        if db == crate::persist::snapshot::EVICTED_DB {
            let db = u16::from_le_bytes(r.array().map_err(bad)?);
            if usize::from(db) >= databases {
                return Err(SyncError::Refused(format!(
                    "full-sync evicted key in database {db}"
                )));
            }
            out.push(ChunkEntry {
                db,
                key: r.bytes().map_err(bad)?.to_vec(),
                state: KeyState::new(),
                library: None,
                evicted: true,
            });
            continue;
        }
        if usize::from(db) >= databases {
            return Err(SyncError::Refused(format!(
                "full-sync key in database {db}"
            )));
        }
        let key = r.bytes().map_err(bad)?.to_vec();
        let st = r.bytes().map_err(bad)?;
        let mut sr = Reader::new(st);
        let state = KeyState::decode_state(&mut sr).map_err(bad)?;
        if !sr.is_at_end() {
            return Err(SyncError::Refused(
                "trailing bytes after a key state".into(),
            ));
        }
        out.push(ChunkEntry {
            db,
            key,
            state,
            library: None,
            evicted: false,
        });
    }
    if !r.is_at_end() {
        return Err(SyncError::Refused(
            "trailing bytes after a full-sync chunk".into(),
        ));
    }
    Ok(out)
}

impl Shard {
    /// Logs a PUBLISH for the other sites (nothing when the site has no peers).
    pub fn log_publish(&mut self, channel: &[u8], message: &[u8], sharded: bool, now_ms: u64) {
        if self.peers == 0 {
            return;
        }
        let hlc = self.clock.tick(now_ms);
        self.seq += 1;
        let record = self
            .oplog
            .append_publish(self.seq, hlc, channel, message, sharded);
        self.persist.append_op(record, Some(self.seq));
        self.sync.own_last = hlc;
        self.sync.ops_appended();
    }

    /// Applies validated records from peer `peer` in order, skipping those already applied.
    /// Stops at a gap (a record beyond `in_applied_seq + 1`) and returns how many it applied.
    /// A write the delivered vector covers already was carried by a full sync's states
    /// (`take_context`): this shard holds it or knows it removed, so it is not applied again
    /// (it would come back where a removal dropped it); the stream's position moves on.
    pub fn apply_batch(&mut self, peer: usize, records: &[OpRecord], now_ms: u64) -> u64 {
        let skew = self.config.sync_clock_skew_ms_max;
        let mut applied = 0;
        for rec in records {
            let Some(p) = self.sync.peers.get(peer) else {
                return applied;
            };
            if rec.seq <= p.in_applied_seq {
                continue;
            }
            if Some(rec.seq) != p.in_applied_seq.checked_add(1) {
                break;
            }
            self.apply_record(rec, now_ms, skew);
            if let Some(p) = self.sync.peers.get_mut(peer) {
                p.in_applied_seq = rec.seq;
                p.ops_in += 1;
            }
            applied += 1;
        }
        if applied > 0 {
            self.log_peer_position(peer);
        }
        applied
    }

    /// Applies a received batch from peer `peer` whose first op is at most
    /// `in_applied_seq + 1` (the caller holds later ones back): the records not applied yet,
    /// in order, then the stream's position moves to `last_seq` and the delivered vector to
    /// `last_hlc` for the origin, as every op of it up to there that is in this shard's slots
    /// is now here. A record of a slot this shard does not own (a sender's stale view) is not
    /// applied. Returns how many records it applied.
    pub fn apply_received(&mut self, peer: usize, r: &Received, now_ms: u64) -> u64 {
        let skew = self.config.sync_clock_skew_ms_max;
        let Some(before) = self.sync.peers.get(peer).map(|p| p.in_applied_seq) else {
            return 0;
        };
        if r.last_seq <= before || r.first_seq > before.saturating_add(1) {
            return 0;
        }
        // Over maxmemory, the batch is applied all the same (docs/conflicts.md, "Eviction").
        let over =
            self.config.maxmemory != 0 && self.used_memory_counted(now_ms) > self.config.maxmemory;
        let mut applied = 0;
        let mut last_applied = Hlc::ZERO;
        for rec in r.records.iter().filter(|rec| rec.seq > before) {
            // FUNCTION libraries live on every shard.
            let library = matches!(rec.body, OpBody::Library { .. });
            if !library && !self.owns_slot(crate::slot::slot(&rec.key)) {
                tracing::debug!(
                    seq = rec.seq,
                    "remote op of a slot this shard does not own skipped"
                );
                continue;
            }
            self.apply_record(rec, now_ms, skew);
            last_applied = rec.hlc;
            applied += 1;
        }
        if let Some(p) = self.sync.peers.get_mut(peer) {
            p.in_applied_seq = r.last_seq;
            p.ops_in += applied;
        }
        if r.last_hlc > Hlc::ZERO {
            let mark = Stamp {
                hlc: r.last_hlc,
                replica: r.origin,
            };
            let moved = r.last_hlc > self.sync.delivered.get(r.origin);
            self.sync.delivered.observe(mark);
            // Ops skipped at the end of the batch moved the mark past what the log holds of
            // the origin: log the mark too, so that a restart keeps it.
            if moved && r.last_hlc > last_applied {
                let mut v = VersionVector::new();
                v.observe(mark);
                self.persist.append_delivered(&v);
            }
        }
        self.log_peer_position(peer);
        // Peers' writes take memory too: make room here, locally (docs/conflicts.md).
        if over {
            self.note_ops_over_limit(applied, now_ms);
        }
        if self.config.maxmemory != 0 {
            self.perform_evictions(now_ms);
        }
        applied
    }

    /// Applies one validated remote record: a write through `apply_stamped`, or a message
    /// published at the other site.
    fn apply_record(&mut self, rec: &OpRecord, now_ms: u64, skew: u64) {
        // Validated against the skew limit already; observing lifts the local clock so
        // that later local writes order after this one.
        let _ = self.clock.observe(rec.hlc, now_ms, skew);
        let stamp = Stamp {
            hlc: rec.hlc,
            replica: rec.origin,
        };
        match &rec.body {
            // Carried by a full sync's states already (`take_context`): held here or known
            // removed here; applied again it would come back where a removal dropped it.
            OpBody::Write(_) if self.sync.delivered.covers(stamp) => {}
            OpBody::Write(effect) => {
                let hash = self.hash_key(&rec.key);
                let db = usize::from(rec.db);
                // Keyspace notifications fire here too (one test when they are off).
                let before =
                    (self.notify_flags != 0).then(|| self.remote_before(db, &rec.key, effect));
                let applied = self.apply_stamped(db, hash, &rec.key, now_ms, stamp, effect);
                if let Some(before) = before {
                    self.notify_remote(db, &rec.key, stamp, effect, before, applied);
                }
            }
            OpBody::Publish { message, sharded } => {
                if let Some(hook) = &self.publish_hook {
                    (hook.0)(&rec.key, message, *sharded, &self.config, now_ms);
                }
            }
            OpBody::Library { code } => {
                self.apply_library(&rec.key, stamp, code.as_deref());
            }
        }
        self.sync.delivered.observe(stamp);
        self.log_remote_op(rec);
        self.stats.sync_ops_applied += 1;
    }

    /// Starts receiving a full sync from peer `peer` (its `FullSyncBegin`): this shard merges
    /// the states that follow with its own causal context and the sender's
    /// (`merge_with_contexts`). When the sender sends every key it holds (it says so, or
    /// `asked_all`: this shard asked for every key, which a sender of an earlier version does
    /// not confirm), the keys not sent are merged with the empty state at the end. `sender`:
    /// the slots the sending shard owns (its `Welcome`), the only keys it sends. The caller
    /// waits first while another peer's full sync is being received (`full_sync_waits`).
    pub fn begin_full_sync_in(
        &mut self,
        peer: usize,
        begin: FullSyncBegin,
        asked_all: bool,
        sender: crate::slot::SlotSet,
    ) -> FullSyncIn {
        debug_assert!(self.sync.receiving.as_ref().is_none_or(|(p, _)| *p == peer));
        self.sync.receiving = Some((peer, begin.context.clone()));
        FullSyncIn {
            peer,
            seq: begin.seq,
            context: begin.context,
            retired: begin.retired,
            complete: begin.complete || asked_all,
            sent: hashbrown::HashSet::new(),
            sender,
        }
    }

    /// Merges the states of a full-sync chunk into the live keyspace.
    pub fn apply_chunk(&mut self, sync: &mut FullSyncIn, entries: &[ChunkEntry], now_ms: u64) {
        // This shard's context as of this chunk: every write it covers is held here or was
        // removed here, whatever this shard collected since.
        let mine = self.context();
        for e in entries {
            // A FUNCTION library: last writer wins by its stamp, outside the keyspace.
            if let Some((stamp, code)) = &e.library {
                let _ = self
                    .clock
                    .observe(stamp.hlc, now_ms, self.config.sync_clock_skew_ms_max);
                self.apply_library(&e.key, *stamp, code.as_deref());
                self.log_library_record(&e.key, *stamp, code.as_deref());
                continue;
            }
            // A key the sender evicted: its state there is unknown, not empty. In a complete
            // full sync it counts as sent, so that the copy here is kept.
            if e.evicted {
                if sync.complete {
                    sync.sent.insert((e.db, e.key.clone()));
                }
                continue;
            }
            // Observe the state's stamps so that later local writes order after them.
            let seen = e.state.observed().stamps;
            for (_, hlc) in seen.iter() {
                let _ = self
                    .clock
                    .observe(hlc, now_ms, self.config.sync_clock_skew_ms_max);
            }
            if sync.complete {
                sync.sent.insert((e.db, e.key.clone()));
            }
            self.merge_state(
                usize::from(e.db),
                &e.key,
                &e.state,
                &mine,
                &sync.context,
                now_ms,
            );
        }
    }

    /// Ends a full sync (its `FullSyncEnd` at `seq`): after a complete one, every key held
    /// here and not sent is absent at the sender and is merged with the empty state (what
    /// the sender removed and collected goes here too); then the delivered vector takes the
    /// sender's context (`take_context`), the peer's position is `seq`, and a full sync
    /// another peer holds back may start.
    ///
    /// The sender's context speaks for the keys of its slots only (a shard delivers the ops
    /// of its slots): the delivered vector takes it only when the sender owns every slot this
    /// shard owns (one shard per site, or shards of the same slot ranges). From a sender of
    /// fewer slots, the ops it covers of this shard's other slots are still to come on their
    /// own links, and must not be skipped as delivered.
    pub fn end_full_sync_in(&mut self, sync: FullSyncIn, now_ms: u64) {
        if sync.complete {
            self.merge_unsent(&sync.sent, &sync.sender, &sync.context, now_ms);
        }
        // The retired entries speak for the sender's slots too: from a sender of fewer
        // slots they stay with its link (`Peer::retired_in`), or a delta full sync from the
        // shard holding those ops in this shard's other slots would leave them out.
        let within = self.slots_within(&sync.sender);
        if within {
            self.take_context(&sync.context);
            self.take_context(&meridian_crdt::Context::from(sync.retired.clone()));
        }
        let mut retired_grew = false;
        if let Some(p) = self.sync.peers.get_mut(sync.peer) {
            if !within && !p.retired_in.dominates(&sync.retired) {
                p.retired_in.merge(&sync.retired);
                retired_grew = true;
            }
            p.in_applied_seq = sync.seq;
            p.inbound = super::LinkState::Up;
            p.rejoin_pull = false;
        }
        // Before the position: the log is replayed in order (`log_retired_in`).
        if retired_grew {
            self.log_retired_in(sync.peer);
        }
        self.log_peer_position(sync.peer);
        self.end_receiving(sync.peer);
    }

    /// The full sync being received from `peer` (if any) ends: complete, or not (its link was
    /// lost; the states merged so far stay, merging them again is harmless).
    pub fn end_receiving(&mut self, peer: usize) {
        if self
            .sync
            .receiving
            .as_ref()
            .is_some_and(|(p, _)| *p == peer)
        {
            self.sync.receiving = None;
            self.sync.receiving_ended.notify_waiters();
        }
    }

    /// Whether a frame from peer `peer` must wait for the full sync being received from
    /// another peer to end: a full sync of its own (one at a time), or ops (`records`) one of
    /// which that sync's context covers and this shard has not delivered. Such an op is
    /// carried by the states on their way (or was removed at the sender): applied now, it
    /// would come back where the sender's state had dropped it; once the sync ends, the
    /// delivered vector covers it and `apply_received` skips it. A merge with another peer's
    /// state in the middle of a sync would likewise judge by a context that does not yet
    /// record what the sync removed.
    pub fn full_sync_waits(&self, peer: usize, records: Option<&[OpRecord]>) -> bool {
        let Some((from, context)) = &self.sync.receiving else {
            return false;
        };
        if *from == peer {
            return false;
        }
        match records {
            None => true,
            Some(records) => records.iter().any(|r| {
                let stamp = Stamp {
                    hlc: r.hlc,
                    replica: r.origin,
                };
                context.covers(stamp) && !self.sync.delivered.covers(stamp)
            }),
        }
    }

    /// After a complete full sync, every key the sender holds was sent: a key held here and
    /// not sent is absent there, and is merged with the empty state under the sender's
    /// context `theirs` (what the sender removed and collected goes here too). Only keys of
    /// the sender's slots (`sender`) count: the others were not its to send.
    fn merge_unsent(
        &mut self,
        sent: &hashbrown::HashSet<(u16, Vec<u8>)>,
        sender: &crate::slot::SlotSet,
        theirs: &meridian_crdt::Context,
        now_ms: u64,
    ) {
        let mut unsent: Vec<(usize, meridian_crdt::SmallBytes)> = Vec::new();
        for (db, d) in self.dbs.iter().enumerate() {
            for e in d.table.iter() {
                if sender.contains_key(&e.key) && !sent.contains(&(db as u16, e.key.to_vec())) {
                    unsent.push((db, e.key.clone()));
                }
            }
        }
        let mine = self.context();
        let empty = KeyState::new();
        for (db, key) in unsent {
            self.merge_state(db, &key, &empty, &mine, theirs, now_ms);
        }
    }
}

/// A full sync being received (docs/replication.md §5): from `begin_full_sync_in` to
/// `end_full_sync_in`.
#[derive(Debug)]
pub struct FullSyncIn {
    pub peer: usize,
    /// The sender's sequence number at the start: the stream continues after it.
    pub seq: u64,
    /// The sender's causal context (`FullSyncBegin::context`).
    pub context: meridian_crdt::Context,
    /// The sender's delivered entries of retired lives (`FullSyncBegin::retired`).
    pub retired: VersionVector,
    /// Every key the sender holds is sent (see `begin_full_sync_in`).
    pub complete: bool,
    /// Keys received in a complete full sync: the others are absent at the sender.
    pub sent: hashbrown::HashSet<(u16, Vec<u8>)>,
    /// The slots the sender owns: it sends keys of these only.
    pub sender: crate::slot::SlotSet,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::oplog::OpLog;
    use meridian_crdt::{Effect, Hlc, Observed};

    fn batch(origin: ReplicaId, incarnation: u64, hlc_ms: u64, db: usize) -> Vec<u8> {
        let mut log = OpLog::new(origin, 1 << 20);
        for seq in 1..=3u64 {
            let e: Effect<&[u8]> = Effect::Assign {
                value: b"v",
                observed: Observed::new(),
                keep_ttl: false,
            };
            log.append(seq, Hlc::from_parts(hlc_ms, seq as u16), db, b"k", &e);
        }
        let mut body = Vec::new();
        OpsHeader {
            origin,
            incarnation,
            first_seq: 1,
            count: 3,
        }
        .encode_into(&mut body);
        oplog::copy_to_wire(&log.since(1).unwrap(), &mut body, usize::MAX);
        body
    }

    #[test]
    fn chunks_round_trip_with_evicted_keys() {
        let mut state = KeyState::new();
        let stamp = meridian_crdt::Stamp {
            hlc: Hlc(9),
            replica: ReplicaId(2),
        };
        state.apply(
            stamp,
            &Effect::<&[u8]>::Assign {
                value: b"v",
                observed: Observed::new(),
                keep_ttl: false,
            },
        );
        let entries = vec![
            ChunkEntry {
                db: 1,
                key: b"k".to_vec(),
                state,
                library: None,
                evicted: false,
            },
            ChunkEntry {
                db: 3,
                key: b"gone".to_vec(),
                state: KeyState::new(),
                library: None,
                evicted: true,
            },
            ChunkEntry {
                db: crate::persist::snapshot::LIBRARY_DB,
                key: b"lib".to_vec(),
                state: KeyState::new(),
                library: Some((stamp, Some(b"code".to_vec()))),
                evicted: false,
            },
        ];
        let body = encode_chunk(&entries);
        assert_eq!(decode_chunk(&body, 16).unwrap(), entries);
        // An evicted key of a database the receiver lacks: refused.
        assert!(decode_chunk(&body, 3).is_err());
        // Every truncation, and trailing bytes: errors, never panics.
        for cut in 0..body.len() {
            assert!(decode_chunk(&body[..cut], 16).is_err(), "{cut}");
        }
        let mut long = body.clone();
        long.push(0);
        assert!(decode_chunk(&long, 16).is_err());
        for i in 0..body.len() {
            let mut bad = body.clone();
            bad[i] ^= 0x5a;
            if let Ok(d) = decode_chunk(&bad, 16) {
                assert_eq!(decode_chunk(&encode_chunk(&d), 16).unwrap(), d);
            }
        }
    }

    #[test]
    fn batches_are_validated_whole() {
        let b = ReplicaId::for_site_shard("b", 0);
        let now = 1_000_000;
        let ok = batch(b, 7, now, 0);
        let (h, recs) = decode_batch(&ok, &[b], 7, 16, now, 60_000).unwrap();
        assert_eq!((h.count, recs.len(), recs[2].seq), (3, 3, 3));
        // A site sending ops as another site.
        let c = ReplicaId::for_site_shard("c", 0);
        let e = decode_batch(&ok, &[c], 7, 16, now, 60_000).unwrap_err();
        assert!(e.to_string().contains("forged origin"), "{e}");
        // Ops of a peer's earlier life are its own; of a life it has not reached, forged.
        let b1 = ReplicaId::for_life("b", 0, 1);
        assert!(decode_batch(&ok, &[b, b1], 7, 16, now, 60_000).is_ok());
        let later = batch(ReplicaId::for_life("b", 0, 2), 7, now, 0);
        assert!(decode_batch(&later, &[b, b1], 7, 16, now, 60_000).is_err());
        // Another incarnation than announced.
        assert!(decode_batch(&ok, &[b], 8, 16, now, 60_000).is_err());
        // Timestamps beyond the skew limit: refused; at the limit: accepted.
        let future = batch(b, 7, now + 60_001, 0);
        let e = decode_batch(&future, &[b], 7, 16, now, 60_000).unwrap_err();
        assert!(e.to_string().contains("ahead"), "{e}");
        let edge = batch(b, 7, now + 60_000, 0);
        assert!(decode_batch(&edge, &[b], 7, 16, now, 60_000).is_ok());
        // A database the receiver does not have.
        let far = batch(b, 7, now, 16);
        assert!(decode_batch(&far, &[b], 7, 16, now, 60_000).is_err());
        // Trailing garbage, and every truncation: errors, never panics.
        let mut trailing = ok.clone();
        trailing.push(0);
        assert!(decode_batch(&trailing, &[b], 7, 16, now, 60_000).is_err());
        for cut in 0..ok.len() {
            assert!(decode_batch(&ok[..cut], &[b], 7, 16, now, 60_000).is_err());
        }
        for i in 0..ok.len() {
            let mut bad = ok.clone();
            bad[i] ^= 0x5a;
            let _ = decode_batch(&bad, &[b], 7, 16, now, 60_000);
        }
        // Sequence numbers that would run past u64::MAX: refused (the last one that fits
        // is accepted).
        for (first, fits) in [(u64::MAX - 1, false), (u64::MAX - 3, true)] {
            let mut big = ok.clone();
            big[12..20].copy_from_slice(&first.to_le_bytes());
            assert_eq!(
                decode_batch(&big, &[b], 7, 16, now, 60_000).is_ok(),
                fits,
                "{first}"
            );
        }
    }
}

//! Consumer groups: cursor, consumers and pending entries lists, as CRDTs.
//!
//! - **Existence** (XGROUP CREATE ∥ DESTROY): a group is shown while it holds a dot (the
//!   latest write per origin among CREATE, SETID, XREADGROUP, XCLAIM/XAUTOCLAIM and
//!   CREATECONSUMER). DESTROY (and DEL of the key) removes everything it observed and keeps
//!   its context until causally stable, so a covered write arriving late is dropped; a write
//!   it did not observe survives, with what it wrote (update wins, as for every Meridian
//!   collection).
//! - **Cursor** (the last delivered ID): epochs. CREATE and SETID open an epoch named by their
//!   stamp, with a floor ID; the epoch with the highest stamp is current, so a SETID wins over
//!   concurrent reads of the epoch it replaced. Within an epoch, each XREADGROUP/XCLAIM LASTID
//!   contributes, per writing site (its latest write), a floor and a position per *entry
//!   origin*: the last entry of that origin delivered. `>` delivers an entry whose ID is above
//!   the cursor of its origin (`max(floor, position)`), so entries that arrive late from a
//!   site, with IDs below what the group already delivered, are still delivered: each site's
//!   own entries arrive in ID order.
//! - **Pending entries** (XREADGROUP, XCLAIM, XAUTOCLAIM, XACK): per entry ID a multi-value
//!   register of versions (pending with owner, delivery time and count; or acknowledged),
//!   shown by the highest stamp. Each write carries the version vector it observed and removes
//!   the versions it covers; its context is kept per ID until stable. So an XACK and an XCLAIM
//!   of one entry at two sites resolve by stamp order (the later action wins), whatever the
//!   order they arrive in.
//! - **Consumers** (CREATECONSUMER ∥ DELCONSUMER): a consumer is shown while it holds a dot;
//!   DELCONSUMER removes the dots and pending versions of that consumer it observed.

use std::collections::{BTreeMap, BTreeSet};

use smallvec::SmallVec;

use super::StreamId;
use crate::bytes::SmallBytes;
use crate::dot::{ReplicaId, Stamp, VersionVector};

/// Owner value of an acknowledged (or removed) version.
const ACKED: u32 = u32::MAX;

/// Redis's `SCG_INVALID_ENTRIES_READ`: the group's read counter is unknown.
pub const ENTRIES_READ_INVALID: i64 = -1;

/// One version of a pending entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pel {
    pub stamp: Stamp,
    /// Consumer (local id), or `ACKED`.
    owner: u32,
    pub time_ms: u64,
    pub count: u64,
}

impl Pel {
    fn is_pending(&self) -> bool {
        self.owner != ACKED
    }
}

/// What an XREADGROUP or XCLAIM LASTID writes to the cursor.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CursorUpdate {
    /// The epoch it was computed in.
    pub epoch: Stamp,
    /// The floor as the writer saw it (raised by XCLAIM LASTID).
    pub floor: StreamId,
    /// Per entry origin, the last entry delivered (only those above `floor`).
    pub pos: Vec<(ReplicaId, StreamId)>,
    /// The group's read counter after the write, when it changed it.
    pub entries_read: Option<i64>,
}

/// One site's latest contribution to an epoch.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Contribution {
    stamp: Stamp,
    floor: StreamId,
    pos: SmallVec<[(ReplicaId, StreamId); 2]>,
    entries_read: Option<i64>,
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Epoch {
    stamp: Stamp,
    /// From the CREATE/SETID that opened it (absent until it arrives, or once removed).
    base: Option<(StreamId, i64)>,
    /// Latest contribution per writing site.
    reads: SmallVec<[Contribution; 1]>,
}

impl Epoch {
    fn has_content(&self) -> bool {
        self.base.is_some() || !self.reads.is_empty()
    }

    fn floor(&self) -> StreamId {
        match self.base {
            Some((f, _)) => self
                .reads
                .iter()
                .map(|c| c.floor)
                .max()
                .map_or(f, |r| r.max(f)),
            None => self.reads.iter().map(|c| c.floor).max().unwrap_or_default(),
        }
    }

    fn pos(&self, origin: ReplicaId) -> Option<StreamId> {
        self.reads
            .iter()
            .flat_map(|c| c.pos.iter())
            .filter(|(o, _)| *o == origin)
            .map(|(_, id)| *id)
            .max()
    }

    fn entries_read(&self) -> i64 {
        let mut best: Option<(Stamp, i64)> = self.base.map(|(_, e)| (self.stamp, e));
        for c in &self.reads {
            if let Some(e) = c.entries_read {
                if best.is_none_or(|(s, _)| c.stamp > s) {
                    best = Some((c.stamp, e));
                }
            }
        }
        best.map_or(ENTRIES_READ_INVALID, |(_, e)| e)
    }

    fn remove_covered(&mut self, vv: &VersionVector) {
        if vv.covers(self.stamp) {
            self.base = None;
        }
        self.reads.retain(|c| !vv.covers(c.stamp));
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Consumer {
    id: u32,
    name: SmallBytes,
    /// Latest write per origin and the seen time it carried.
    dots: SmallVec<[(Stamp, u64); 1]>,
    removed: VersionVector,
    /// IDs whose shown version is pending with this consumer.
    pel: BTreeSet<StreamId>,
}

impl Consumer {
    fn is_live(&self) -> bool {
        !self.dots.is_empty()
    }

    fn seen_ms(&self) -> u64 {
        self.dots.iter().map(|d| d.1).max().unwrap_or(0)
    }

    fn touch(&mut self, stamp: Stamp, seen_ms: u64) {
        match self.dots.iter_mut().find(|d| d.0.replica == stamp.replica) {
            Some(d) => {
                if d.0 < stamp {
                    *d = (stamp, seen_ms);
                }
            }
            None => {
                let i = self.dots.partition_point(|d| d.0.replica < stamp.replica);
                self.dots.insert(i, (stamp, seen_ms));
            }
        }
    }
}

/// A consumer group. See the module doc.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Group {
    pub name: SmallBytes,
    dots: VersionVector,
    /// Merged contexts of DESTROYs, until stable.
    removed: VersionVector,
    epochs: SmallVec<[Epoch; 1]>,
    /// Sorted by id (ids only grow).
    consumers: Vec<Consumer>,
    next_consumer: u32,
    pel: BTreeMap<StreamId, SmallVec<[Pel; 1]>>,
    /// Per ID, the merged contexts of the writes to it, until stable.
    pel_ctx: BTreeMap<StreamId, VersionVector>,
    /// IDs whose shown version is pending.
    pending: u64,
}

/// A shown pending entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingRef<'a> {
    pub id: StreamId,
    pub consumer: &'a [u8],
    pub time_ms: u64,
    pub count: u64,
}

/// A shown consumer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConsumerRef<'a> {
    pub name: &'a [u8],
    pub pending: u64,
    pub seen_ms: u64,
}

fn shown(versions: &[Pel]) -> Option<&Pel> {
    versions.iter().max_by_key(|p| p.stamp)
}

impl Group {
    pub fn new(name: &[u8]) -> Group {
        Group {
            name: SmallBytes::copy_from(name),
            dots: VersionVector::new(),
            removed: VersionVector::new(),
            epochs: SmallVec::new(),
            consumers: Vec::new(),
            next_consumer: 0,
            pel: BTreeMap::new(),
            pel_ctx: BTreeMap::new(),
            pending: 0,
        }
    }

    /// Whether the group is shown.
    pub fn is_live(&self) -> bool {
        !self.dots.is_empty()
    }

    fn covered(&self, stamp: Stamp) -> bool {
        self.removed.covers(stamp)
    }

    fn consumer_idx(&self, name: &[u8]) -> Option<usize> {
        self.consumers
            .iter()
            .position(|c| c.name.as_slice() == name)
    }

    fn consumer_by_id(&self, id: u32) -> Option<&Consumer> {
        self.consumers
            .binary_search_by_key(&id, |c| c.id)
            .ok()
            .and_then(|i| self.consumers.get(i))
    }

    fn consumer_by_id_mut(&mut self, id: u32) -> Option<&mut Consumer> {
        match self.consumers.binary_search_by_key(&id, |c| c.id) {
            Ok(i) => self.consumers.get_mut(i),
            Err(_) => None,
        }
    }

    /// The consumer named `name`, created (without dots) when absent; its index.
    fn consumer_entry(&mut self, name: &[u8]) -> usize {
        if let Some(i) = self.consumer_idx(name) {
            return i;
        }
        let id = self.next_consumer;
        self.next_consumer = self.next_consumer.saturating_add(1);
        self.consumers.push(Consumer {
            id,
            name: SmallBytes::copy_from(name),
            dots: SmallVec::new(),
            removed: VersionVector::new(),
            pel: BTreeSet::new(),
        });
        self.consumers.len() - 1
    }

    // --------------------------------------------------------------------------------------
    // Writes
    // --------------------------------------------------------------------------------------

    /// XGROUP CREATE / SETID: a new epoch with `floor`; CREATE/SETID also assert the group.
    pub fn open_epoch(&mut self, stamp: Stamp, floor: StreamId, entries_read: i64) {
        if self.covered(stamp) {
            return;
        }
        self.dots.observe(stamp);
        match self.epochs.iter_mut().find(|e| e.stamp == stamp) {
            Some(e) => e.base = Some((floor, entries_read)),
            None => {
                let i = self.epochs.partition_point(|e| e.stamp < stamp);
                self.epochs.insert(
                    i,
                    Epoch {
                        stamp,
                        base: Some((floor, entries_read)),
                        reads: SmallVec::new(),
                    },
                );
            }
        }
    }

    /// XGROUP DESTROY: removes what `observed` covers; keeps the context until stable.
    pub fn destroy(&mut self, observed: &VersionVector) {
        self.removed.merge(observed);
        self.remove_covered(observed);
    }

    /// XGROUP CREATECONSUMER.
    pub fn create_consumer(&mut self, stamp: Stamp, name: &[u8], seen_ms: u64) {
        if self.covered(stamp) {
            return;
        }
        self.dots.observe(stamp);
        let i = self.consumer_entry(name);
        if let Some(c) = self.consumers.get_mut(i) {
            if !c.removed.covers(stamp) {
                c.touch(stamp, seen_ms);
            }
        }
    }

    /// XGROUP DELCONSUMER: removes the consumer's dots and pending versions `observed` covers.
    pub fn delete_consumer(&mut self, name: &[u8], observed: &VersionVector) {
        let i = self.consumer_entry(name);
        let Some(c) = self.consumers.get_mut(i) else {
            return;
        };
        c.removed.merge(observed);
        c.dots.retain(|d| !observed.covers(d.0));
        let id = c.id;
        let ids: Vec<StreamId> = self
            .pel
            .iter()
            .filter(|(_, vs)| vs.iter().any(|p| p.owner == id && observed.covers(p.stamp)))
            .map(|(k, _)| *k)
            .collect();
        for k in ids {
            self.update_versions(k, |vs| {
                vs.retain(|p| !(p.owner == id && observed.covers(p.stamp)))
            });
        }
    }

    /// XREADGROUP / XCLAIM / XAUTOCLAIM: consumer touch, pending versions, acknowledged
    /// versions for `gone` (entries deleted from the stream), and the cursor contribution.
    #[allow(clippy::too_many_arguments)]
    pub fn deliver(
        &mut self,
        stamp: Stamp,
        consumer: Option<&[u8]>,
        seen_ms: u64,
        pending: &[(StreamId, u64, u64)],
        gone: &[StreamId],
        cursor: Option<&CursorUpdate>,
        observed: &VersionVector,
    ) {
        if self.covered(stamp) {
            // A write the group's DESTROY had seen adds nothing here, but what it removed of
            // versions the DESTROY had not seen (a claim's move from the previous owner, the
            // acknowledgement of a deleted entry) stays removed: where it arrived before the
            // DESTROY, it removed them.
            for &(id, _, _) in pending {
                self.remove_versions(id, observed);
            }
            for &id in gone {
                self.remove_versions(id, observed);
            }
            return;
        }
        self.dots.observe(stamp);
        let mut owner = None;
        if let Some(name) = consumer {
            let i = self.consumer_entry(name);
            if let Some(c) = self.consumers.get_mut(i) {
                if !c.removed.covers(stamp) {
                    c.touch(stamp, seen_ms);
                    owner = Some(c.id);
                }
            }
        }
        if let Some(owner) = owner {
            for &(id, time_ms, count) in pending {
                self.write_version(
                    id,
                    Pel {
                        stamp,
                        owner,
                        time_ms,
                        count,
                    },
                    observed,
                );
            }
        }
        for &id in gone {
            self.write_version(
                id,
                Pel {
                    stamp,
                    owner: ACKED,
                    time_ms: 0,
                    count: 0,
                },
                observed,
            );
        }
        if let Some(u) = cursor {
            self.contribute(stamp, u);
        }
    }

    /// XACK of `ids`.
    pub fn ack(&mut self, stamp: Stamp, ids: &[StreamId], observed: &VersionVector) {
        if self.covered(stamp) {
            // As in `deliver`: what the XACK removed of versions a DESTROY had not seen.
            for &id in ids {
                self.remove_versions(id, observed);
            }
            return;
        }
        for &id in ids {
            self.write_version(
                id,
                Pel {
                    stamp,
                    owner: ACKED,
                    time_ms: 0,
                    count: 0,
                },
                observed,
            );
        }
    }

    fn contribute(&mut self, stamp: Stamp, u: &CursorUpdate) {
        // An epoch a DESTROY removed keeps the contributions of writes it had not seen: they
        // name what those writes delivered.
        let i = match self.epochs.iter().position(|e| e.stamp == u.epoch) {
            Some(i) => i,
            None => {
                let i = self.epochs.partition_point(|e| e.stamp < u.epoch);
                self.epochs.insert(
                    i,
                    Epoch {
                        stamp: u.epoch,
                        base: None,
                        reads: SmallVec::new(),
                    },
                );
                i
            }
        };
        let Some(e) = self.epochs.get_mut(i) else {
            return;
        };
        let c = Contribution {
            stamp,
            floor: u.floor,
            pos: u.pos.iter().copied().collect(),
            entries_read: u.entries_read,
        };
        match e
            .reads
            .iter_mut()
            .find(|r| r.stamp.replica == stamp.replica)
        {
            Some(r) => {
                if r.stamp < stamp {
                    *r = c;
                }
            }
            None => e.reads.push(c),
        }
    }

    /// The removal half of `write_version`: removes the versions of `id` that `observed`
    /// covers and keeps `observed` as the id's context (a version it covers that arrives later
    /// is dropped).
    fn remove_versions(&mut self, id: StreamId, observed: &VersionVector) {
        if observed.is_empty() {
            return;
        }
        match self.pel_ctx.get_mut(&id) {
            Some(c) => c.merge(observed),
            None => {
                self.pel_ctx.insert(id, observed.clone());
            }
        }
        self.update_versions(id, |vs| vs.retain(|p| !observed.covers(p.stamp)));
    }

    /// Writes one version of `id`: removes the versions `observed` covers, adds `v` unless
    /// a write that had observed it was applied.
    fn write_version(&mut self, id: StreamId, v: Pel, observed: &VersionVector) {
        let dropped = self.pel_ctx.get(&id).is_some_and(|c| c.covers(v.stamp));
        if !observed.is_empty() {
            match self.pel_ctx.get_mut(&id) {
                Some(c) => c.merge(observed),
                None => {
                    self.pel_ctx.insert(id, observed.clone());
                }
            }
        }
        self.update_versions(id, |vs| {
            vs.retain(|p| !observed.covers(p.stamp));
            if !dropped && vs.iter().all(|p| p.stamp != v.stamp) {
                vs.push(v);
            }
        });
    }

    /// Changes the versions of `id` and keeps the derived sets (owner's PEL, count) right.
    fn update_versions(&mut self, id: StreamId, f: impl FnOnce(&mut SmallVec<[Pel; 1]>)) {
        let before = self
            .pel
            .get(&id)
            .and_then(|vs| shown(vs))
            .filter(|p| p.is_pending())
            .map(|p| p.owner);
        let mut vs = self.pel.remove(&id).unwrap_or_default();
        f(&mut vs);
        let after = shown(&vs).filter(|p| p.is_pending()).map(|p| p.owner);
        if !vs.is_empty() {
            self.pel.insert(id, vs);
        }
        if before != after {
            if let Some(o) = before {
                if let Some(c) = self.consumer_by_id_mut(o) {
                    c.pel.remove(&id);
                }
                self.pending = self.pending.saturating_sub(1);
            }
            if let Some(o) = after {
                if let Some(c) = self.consumer_by_id_mut(o) {
                    c.pel.insert(id);
                }
                self.pending += 1;
            }
        }
    }

    /// Removes every write `vv` covers (DESTROY, DEL of the key).
    pub fn remove_covered(&mut self, vv: &VersionVector) {
        if vv.is_empty() {
            return;
        }
        self.dots.forget_covered(vv);
        for e in self.epochs.iter_mut() {
            e.remove_covered(vv);
        }
        self.epochs.retain(|e| e.has_content());
        for c in self.consumers.iter_mut() {
            c.dots.retain(|d| !vv.covers(d.0));
        }
        let ids: Vec<StreamId> = self
            .pel
            .iter()
            .filter(|(_, vs)| vs.iter().any(|p| vv.covers(p.stamp)))
            .map(|(k, _)| *k)
            .collect();
        for k in ids {
            self.update_versions(k, |vs| vs.retain(|p| !vv.covers(p.stamp)));
        }
    }

    // --------------------------------------------------------------------------------------
    // Views
    // --------------------------------------------------------------------------------------

    fn current(&self) -> Option<&Epoch> {
        self.epochs.iter().rev().find(|e| e.has_content())
    }

    /// The current epoch's stamp (XREADGROUP's cursor updates name it).
    pub fn epoch(&self) -> Option<Stamp> {
        self.current().map(|e| e.stamp)
    }

    /// The floor of the cursor: every entry at or below it counts as delivered.
    pub fn floor(&self) -> StreamId {
        self.current().map(Epoch::floor).unwrap_or_default()
    }

    /// The cursor for entries of `origin`.
    pub fn cursor(&self, origin: ReplicaId) -> StreamId {
        match self.current() {
            Some(e) => {
                let f = e.floor();
                e.pos(origin).map_or(f, |p| p.max(f))
            }
            None => StreamId::MIN,
        }
    }

    /// The last delivered ID (XINFO GROUPS `last-delivered-id`).
    pub fn last_id(&self) -> StreamId {
        match self.current() {
            Some(e) => e
                .reads
                .iter()
                .flat_map(|c| c.pos.iter().map(|p| p.1))
                .fold(e.floor(), StreamId::max),
            None => StreamId::MIN,
        }
    }

    /// The read counter (`ENTRIES_READ_INVALID` when unknown).
    pub fn entries_read(&self) -> i64 {
        self.current()
            .map_or(ENTRIES_READ_INVALID, Epoch::entries_read)
    }

    /// Positions per entry origin in the current epoch (above the floor).
    pub fn positions(&self) -> Vec<(ReplicaId, StreamId)> {
        let Some(e) = self.current() else {
            return Vec::new();
        };
        let floor = e.floor();
        let mut out: Vec<(ReplicaId, StreamId)> = Vec::new();
        for (o, id) in e.reads.iter().flat_map(|c| c.pos.iter()) {
            if *id <= floor {
                continue;
            }
            match out.iter_mut().find(|p| p.0 == *o) {
                Some(p) => p.1 = p.1.max(*id),
                None => out.push((*o, *id)),
            }
        }
        out.sort();
        out
    }

    pub fn pending_count(&self) -> u64 {
        self.pending
    }

    fn pending_of(&self, id: StreamId, vs: &[Pel]) -> Option<PendingRef<'_>> {
        let p = shown(vs).filter(|p| p.is_pending())?;
        let c = self.consumer_by_id(p.owner)?;
        Some(PendingRef {
            id,
            consumer: c.name.as_slice(),
            time_ms: p.time_ms,
            count: p.count,
        })
    }

    /// The lowest pending ID.
    pub fn first_pending(&self) -> Option<StreamId> {
        self.pel
            .iter()
            .find(|(_, vs)| shown(vs).is_some_and(Pel::is_pending))
            .map(|(id, _)| *id)
    }

    /// The highest pending ID.
    pub fn last_pending(&self) -> Option<StreamId> {
        self.pel
            .iter()
            .rev()
            .find(|(_, vs)| shown(vs).is_some_and(Pel::is_pending))
            .map(|(id, _)| *id)
    }

    /// The shown pending entry of `id`.
    pub fn pending(&self, id: StreamId) -> Option<PendingRef<'_>> {
        self.pending_of(id, self.pel.get(&id)?)
    }

    /// Pending entries with IDs in `start..=end`, in ID order.
    pub fn pending_range(
        &self,
        start: StreamId,
        end: StreamId,
    ) -> impl Iterator<Item = PendingRef<'_>> + '_ {
        let range = if start <= end {
            Some(self.pel.range(start..=end))
        } else {
            None
        };
        range
            .into_iter()
            .flatten()
            .filter_map(|(id, vs)| self.pending_of(*id, vs))
    }

    /// Pending entries of consumer `name` with IDs in `start..=end`, in ID order.
    pub fn consumer_pending_range<'a>(
        &'a self,
        name: &[u8],
        start: StreamId,
        end: StreamId,
    ) -> impl Iterator<Item = PendingRef<'a>> + 'a {
        let c = self
            .consumer_idx(name)
            .and_then(|i| self.consumers.get(i))
            .filter(|c| c.is_live());
        let range = match c {
            Some(c) if start <= end => Some(c.pel.range(start..=end)),
            _ => None,
        };
        range
            .into_iter()
            .flatten()
            .filter_map(|id| self.pending(*id))
    }

    /// Shown consumers, by name.
    pub fn consumers(&self) -> Vec<ConsumerRef<'_>> {
        let mut v: Vec<ConsumerRef<'_>> = self
            .consumers
            .iter()
            .filter(|c| c.is_live())
            .map(|c| ConsumerRef {
                name: c.name.as_slice(),
                pending: c.pel.len() as u64,
                seen_ms: c.seen_ms(),
            })
            .collect();
        v.sort_by(|a, b| a.name.cmp(b.name));
        v
    }

    /// The shown consumer `name`.
    pub fn consumer(&self, name: &[u8]) -> Option<ConsumerRef<'_>> {
        let c = self.consumers.get(self.consumer_idx(name)?)?;
        c.is_live().then(|| ConsumerRef {
            name: c.name.as_slice(),
            pending: c.pel.len() as u64,
            seen_ms: c.seen_ms(),
        })
    }

    // --------------------------------------------------------------------------------------
    // Metadata
    // --------------------------------------------------------------------------------------

    /// Holds anything that is not shown: removal contexts, acknowledged versions, versions
    /// hidden by a higher stamp, non-current epochs, removed consumers, or content of a group
    /// that is not shown.
    pub fn has_metadata(&self) -> bool {
        !self.removed.is_empty()
            || !self.pel_ctx.is_empty()
            || self.epochs.len() > 1
            || (!self.is_live() && (!self.epochs.is_empty() || !self.pel.is_empty()))
            || self
                .consumers
                .iter()
                .any(|c| !c.removed.is_empty() || !c.is_live())
            || self.pel.len() as u64 != self.pending
            || self.pel.values().any(|vs| vs.len() > 1)
    }

    /// Holds nothing at all.
    pub fn is_blank(&self) -> bool {
        !self.is_live()
            && self.removed.is_empty()
            && self.epochs.is_empty()
            && self.pel.is_empty()
            && self.pel_ctx.is_empty()
            && self.consumers.is_empty()
    }

    pub fn observe_into(&self, vv: &mut VersionVector) {
        vv.merge(&self.dots);
        vv.merge(&self.removed);
        for ctx in self.pel_ctx.values() {
            vv.merge(ctx);
        }
        for c in &self.consumers {
            vv.merge(&c.removed);
            for d in &c.dots {
                vv.observe(d.0);
            }
        }
        for vs in self.pel.values() {
            for p in vs {
                vv.observe(p.stamp);
            }
        }
        for e in &self.epochs {
            vv.observe(e.stamp);
            for c in &e.reads {
                vv.observe(c.stamp);
            }
        }
    }

    pub fn live_into(&self, vv: &mut VersionVector) {
        vv.merge(&self.dots);
        for c in &self.consumers {
            for d in &c.dots {
                vv.observe(d.0);
            }
        }
        for vs in self.pel.values() {
            for p in vs {
                vv.observe(p.stamp);
            }
        }
    }

    /// Drops what `stable` makes unnecessary (`None`: no peers, everything is stable).
    pub fn collect(&mut self, stable: Option<&VersionVector>) {
        let is_stable = |s: Stamp| stable.is_none_or(|v| v.covers(s));
        let ctx_done = |c: &VersionVector| stable.is_none_or(|v| v.dominates(c));
        if ctx_done(&self.removed) {
            self.removed = VersionVector::new();
        }
        self.pel_ctx.retain(|_, c| !ctx_done(c));
        // Acknowledged entries whose acknowledgement is stable: nothing can bring them back.
        let acked: Vec<StreamId> = self
            .pel
            .iter()
            .filter(|(_, vs)| shown(vs).is_some_and(|p| !p.is_pending() && is_stable(p.stamp)))
            .map(|(k, _)| *k)
            .collect();
        for k in acked {
            if !self.pel_ctx.contains_key(&k) {
                self.pel.remove(&k);
            }
        }
        if stable.is_none() {
            // No peers: versions hidden by a higher stamp can never be shown again.
            let ids: Vec<StreamId> = self
                .pel
                .iter()
                .filter(|(_, vs)| vs.len() > 1)
                .map(|(k, _)| *k)
                .collect();
            for k in ids {
                self.update_versions(k, |vs| {
                    if let Some(top) = shown(vs).copied() {
                        vs.clear();
                        if top.is_pending() {
                            vs.push(top);
                        }
                    }
                });
            }
        }
        if let Some(cur) = self.current().map(|e| e.stamp) {
            if is_stable(cur) {
                self.epochs.retain(|e| e.stamp >= cur);
            }
        }
        for c in self.consumers.iter_mut() {
            if ctx_done(&c.removed) {
                c.removed = VersionVector::new();
            }
        }
        self.consumers
            .retain(|c| c.is_live() || !c.removed.is_empty() || !c.pel.is_empty());
        if !self.is_live() && self.removed.is_empty() {
            // Nothing shown and no context left: what remains (a contribution to a destroyed
            // epoch, acknowledgements) can no longer matter.
            let keep_versions = stable.is_some()
                && self
                    .pel
                    .values()
                    .any(|vs| vs.iter().any(|p| !is_stable(p.stamp)));
            // A DELCONSUMER's context that is not stable yet still has to drop the writes it
            // covers that are in flight (a CREATECONSUMER from a third site).
            let keep_consumers = self.consumers.iter().any(|c| !c.removed.is_empty());
            if !keep_versions && !keep_consumers {
                self.epochs.clear();
                self.pel.clear();
                self.pel_ctx.clear();
                self.consumers.clear();
                self.pending = 0;
            }
        }
    }
}

/// A cursor contribution's parts: (stamp, floor, positions, entries read).
pub type ContributionParts = (Stamp, StreamId, Vec<(ReplicaId, StreamId)>, Option<i64>);
/// An epoch's parts: (stamp, base (floor, entries read), contributions).
pub type EpochParts = (Stamp, Option<(StreamId, i64)>, Vec<ContributionParts>);
/// A consumer's parts: (name, dots (stamp, seen ms), removal context).
pub type ConsumerParts = (Vec<u8>, Vec<(Stamp, u64)>, VersionVector);
/// A pending version's parts: (stamp, owner name or `None` when acknowledged, time, count).
pub type VersionParts = (Stamp, Option<Vec<u8>>, u64, u64);

/// Plain data of a group, for state encoding, state merges and recreation.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupParts {
    pub name: Vec<u8>,
    pub dots: VersionVector,
    pub removed: VersionVector,
    pub epochs: Vec<EpochParts>,
    pub consumers: Vec<ConsumerParts>,
    /// Per ID, its versions.
    pub pel: Vec<(StreamId, Vec<VersionParts>)>,
    pub pel_ctx: Vec<(StreamId, VersionVector)>,
}

impl Group {
    /// The group's full state as plain data, canonical (sorted).
    pub fn parts(&self) -> GroupParts {
        let name_of = |id: u32| self.consumer_by_id(id).map(|c| c.name.to_vec());
        let mut consumers: Vec<ConsumerParts> = self
            .consumers
            .iter()
            .map(|c| (c.name.to_vec(), c.dots.to_vec(), c.removed.clone()))
            .collect();
        consumers.sort_by(|a, b| a.0.cmp(&b.0));
        GroupParts {
            name: self.name.to_vec(),
            dots: self.dots.clone(),
            removed: self.removed.clone(),
            epochs: self
                .epochs
                .iter()
                .map(|e| {
                    let mut reads: Vec<_> = e
                        .reads
                        .iter()
                        .map(|c| {
                            let mut pos: Vec<(ReplicaId, StreamId)> = c.pos.to_vec();
                            pos.sort();
                            (c.stamp, c.floor, pos, c.entries_read)
                        })
                        .collect();
                    reads.sort_by_key(|r| r.0);
                    (e.stamp, e.base, reads)
                })
                .collect(),
            consumers,
            pel: self
                .pel
                .iter()
                .map(|(id, vs)| {
                    let mut vs: Vec<VersionParts> = vs
                        .iter()
                        .map(|p| {
                            let owner = if p.is_pending() {
                                name_of(p.owner)
                            } else {
                                None
                            };
                            (p.stamp, owner, p.time_ms, p.count)
                        })
                        .collect();
                    vs.sort_by_key(|v| v.0);
                    (*id, vs)
                })
                .collect(),
            pel_ctx: self.pel_ctx.iter().map(|(k, v)| (*k, v.clone())).collect(),
        }
    }

    /// Rebuilds a group from its parts (a version owned by an unknown consumer name gets a
    /// consumer without dots).
    pub fn from_parts(p: &GroupParts) -> Group {
        let mut g = Group::new(&p.name);
        g.dots = p.dots.clone();
        g.removed = p.removed.clone();
        for (stamp, base, reads) in &p.epochs {
            g.epochs.push(Epoch {
                stamp: *stamp,
                base: *base,
                reads: reads
                    .iter()
                    .map(|(s, f, pos, er)| Contribution {
                        stamp: *s,
                        floor: *f,
                        pos: pos.iter().copied().collect(),
                        entries_read: *er,
                    })
                    .collect(),
            });
        }
        g.epochs.sort_by_key(|e| e.stamp);
        for (name, dots, removed) in &p.consumers {
            let i = g.consumer_entry(name);
            if let Some(c) = g.consumers.get_mut(i) {
                c.dots = dots.iter().copied().collect();
                c.dots.sort_by_key(|d| d.0.replica);
                c.removed = removed.clone();
            }
        }
        for (id, ctx) in &p.pel_ctx {
            g.pel_ctx.insert(*id, ctx.clone());
        }
        for (id, vs) in &p.pel {
            let mut out: SmallVec<[Pel; 1]> = SmallVec::new();
            for (stamp, owner, time_ms, count) in vs {
                let owner = match owner {
                    Some(name) => {
                        let i = g.consumer_entry(name);
                        g.consumers.get(i).map_or(ACKED, |c| c.id)
                    }
                    None => ACKED,
                };
                out.push(Pel {
                    stamp: *stamp,
                    owner,
                    time_ms: *time_ms,
                    count: *count,
                });
            }
            g.update_versions(*id, |vs| *vs = out);
        }
        g
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::st;

    fn id(ms: u64) -> StreamId {
        StreamId { ms, seq: 0 }
    }

    fn vv(stamps: &[Stamp]) -> VersionVector {
        let mut v = VersionVector::new();
        for s in stamps {
            v.observe(*s);
        }
        v
    }

    #[test]
    fn ack_and_claim_of_one_entry_resolve_by_stamp_in_any_order() {
        let mut base = Group::new(b"g");
        base.open_epoch(st(1, 1), StreamId::MIN, ENTRIES_READ_INVALID);
        base.deliver(
            st(2, 1),
            Some(b"alice"),
            2,
            &[(id(5), 2, 1)],
            &[],
            None,
            &vv(&[st(1, 1)]),
        );
        let seen = vv(&[st(1, 1), st(2, 1)]);
        // Site 1 acks at 3, site 2 claims for bob at 4.
        let apply = |g: &mut Group, first: bool| {
            let ack = |g: &mut Group| g.ack(st(3, 1), &[id(5)], &seen);
            let claim = |g: &mut Group| {
                g.deliver(
                    st(4, 2),
                    Some(b"bob"),
                    4,
                    &[(id(5), 4, 2)],
                    &[],
                    None,
                    &seen,
                )
            };
            if first {
                ack(g);
                claim(g);
            } else {
                claim(g);
                ack(g);
            }
        };
        let (mut a, mut b) = (base.clone(), base.clone());
        apply(&mut a, true);
        apply(&mut b, false);
        assert_eq!(a.parts(), b.parts());
        assert_eq!(a.pending(id(5)).map(|p| p.consumer), Some(&b"bob"[..]));
        assert_eq!(a.pending_count(), 1);
        assert_eq!(a.consumers().iter().map(|c| c.pending).sum::<u64>(), 1);
    }

    #[test]
    fn setid_wins_over_concurrent_reads_and_origins_have_their_own_cursor() {
        let mut g = Group::new(b"g");
        g.open_epoch(st(1, 1), id(10), 0);
        let u = CursorUpdate {
            epoch: st(1, 1),
            floor: id(10),
            pos: vec![(ReplicaId(1), id(20)), (ReplicaId(2), id(15))],
            entries_read: Some(3),
        };
        g.deliver(
            st(5, 2),
            Some(b"c"),
            5,
            &[],
            &[],
            Some(&u),
            &VersionVector::new(),
        );
        assert_eq!(g.cursor(ReplicaId(1)), id(20));
        assert_eq!(g.cursor(ReplicaId(2)), id(15));
        assert_eq!(g.cursor(ReplicaId(3)), id(10));
        assert_eq!(g.last_id(), id(20));
        assert_eq!(g.entries_read(), 3);
        g.open_epoch(st(4, 3), id(1), ENTRIES_READ_INVALID);
        // Epoch 4 is later than epoch 1: the reads of epoch 1 no longer count.
        assert_eq!(g.last_id(), id(1));
        assert_eq!(g.entries_read(), ENTRIES_READ_INVALID);
    }

    #[test]
    fn destroy_removes_what_it_saw_and_drops_late_covered_writes() {
        let mut g = Group::new(b"g");
        g.open_epoch(st(1, 1), StreamId::MIN, 0);
        let d = vv(&[st(1, 1), st(2, 2)]);
        g.destroy(&d);
        assert!(!g.is_live());
        // A write the destroy had seen arrives late: dropped.
        g.deliver(
            st(2, 2),
            Some(b"x"),
            2,
            &[(id(1), 2, 1)],
            &[],
            None,
            &VersionVector::new(),
        );
        assert!(!g.is_live());
        assert_eq!(g.pending_count(), 0);
        // One it had not seen survives.
        g.create_consumer(st(3, 2), b"y", 3);
        assert!(g.is_live());
        assert_eq!(g.consumers().len(), 1);
        g.collect(None);
        assert!(!g.has_metadata());
    }
}

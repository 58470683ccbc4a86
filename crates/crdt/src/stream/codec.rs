//! Binary encoding of stream ops (op log, sync) and of a stream's full state (full sync,
//! snapshots), with `crate::codec`'s building blocks. Decoding is bounds-checked, never
//! panics, and allocates nothing ahead of the bytes that back it.

use smallvec::SmallVec;

use super::group::{CursorUpdate, GroupParts};
use super::{Group, Inner, Origin, Removal, SetIdRec, StreamCrdt, StreamId, StreamOp, Totals};
use crate::codec::{self, DecodeError, Reader};
use crate::dot::{ReplicaId, Stamp};
use crate::hlc::Hlc;

const TAG_ADD: u8 = 0;
const TAG_LOAD: u8 = 1;
const TAG_TRIM: u8 = 2;
const TAG_DELETE: u8 = 3;
const TAG_SETID: u8 = 4;
const TAG_GROUP_EPOCH: u8 = 5;
const TAG_GROUP_DESTROY: u8 = 6;
const TAG_CONSUMER_CREATE: u8 = 7;
const TAG_CONSUMER_DELETE: u8 = 8;
const TAG_DELIVER: u8 = 9;
const TAG_ACK: u8 = 10;

/// Format byte that opens `StreamCrdt::encode_state`'s output.
const STATE_V1: u8 = 1;

pub fn put_id(out: &mut Vec<u8>, id: StreamId) {
    codec::put_varint(out, id.ms);
    codec::put_varint(out, id.seq);
}

pub fn read_id(r: &mut Reader<'_>) -> Result<StreamId, DecodeError> {
    Ok(StreamId {
        ms: r.varint()?,
        seq: r.varint()?,
    })
}

fn put_i64(out: &mut Vec<u8>, v: i64) {
    codec::put_varint(out, ((v << 1) ^ (v >> 63)) as u64);
}

fn read_i64(r: &mut Reader<'_>) -> Result<i64, DecodeError> {
    let v = r.varint()?;
    Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
}

/// Appends `v` as a presence byte (0 or 1) and, when present, `put`'s encoding of it.
fn put_opt<T>(out: &mut Vec<u8>, v: Option<T>, put: impl FnOnce(&mut Vec<u8>, T)) {
    match v {
        None => codec::put_u8(out, 0),
        Some(x) => {
            codec::put_u8(out, 1);
            put(out, x);
        }
    }
}

/// Reads what `put_opt` wrote, the value with `read`.
fn read_opt<'a, T>(
    r: &mut Reader<'a>,
    read: impl FnOnce(&mut Reader<'a>) -> Result<T, DecodeError>,
) -> Result<Option<T>, DecodeError> {
    Ok(if r.bool()? { Some(read(r)?) } else { None })
}

/// A group's read positions, one ID per origin.
fn put_positions(out: &mut Vec<u8>, pos: &[(ReplicaId, StreamId)]) {
    codec::put_varint(out, pos.len() as u64);
    for (o, id) in pos {
        codec::put_u32(out, o.0);
        put_id(out, *id);
    }
}

fn read_positions(r: &mut Reader<'_>) -> Result<Vec<(ReplicaId, StreamId)>, DecodeError> {
    let n = r.count("group positions")?;
    let mut pos = Vec::with_capacity(codec::prealloc(n));
    for _ in 0..n {
        let o = ReplicaId(r.u32()?);
        pos.push((o, read_id(r)?));
    }
    Ok(pos)
}

/// A SETID's baseline: entries added per origin.
fn put_baseline(out: &mut Vec<u8>, baseline: &[(ReplicaId, u64)]) {
    codec::put_varint(out, baseline.len() as u64);
    for (o, n) in baseline {
        codec::put_u32(out, o.0);
        codec::put_varint(out, *n);
    }
}

fn read_baseline<C: FromIterator<(ReplicaId, u64)>>(r: &mut Reader<'_>) -> Result<C, DecodeError> {
    let n = r.count("stream baseline")?;
    (0..n)
        .map(|_| {
            let o = ReplicaId(r.u32()?);
            Ok((o, r.varint()?))
        })
        .collect()
}

fn put_totals(out: &mut Vec<u8>, t: &Totals) {
    codec::put_varint(out, t.adds);
    put_id(out, t.last_add);
    codec::put_varint(out, t.last_add_hlc.0);
    put_id(out, t.max_del);
    codec::put_varint(out, t.last_del_hlc.0);
}

fn read_totals(r: &mut Reader<'_>) -> Result<Totals, DecodeError> {
    Ok(Totals {
        adds: r.varint()?,
        last_add: read_id(r)?,
        last_add_hlc: Hlc(r.varint()?),
        max_del: read_id(r)?,
        last_del_hlc: Hlc(r.varint()?),
    })
}

fn put_fields<B: AsRef<[u8]>>(out: &mut Vec<u8>, fields: &[B]) {
    codec::put_varint(out, fields.len() as u64);
    for f in fields {
        codec::put_bytes(out, f.as_ref());
    }
}

fn read_fields(r: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, DecodeError> {
    let n = r.items(1)?;
    if n % 2 != 0 {
        return Err(DecodeError::Invalid("stream fields not in pairs"));
    }
    let mut v = Vec::with_capacity(codec::prealloc(n));
    for _ in 0..n {
        v.push(r.bytes()?.to_vec());
    }
    Ok(v)
}

fn put_ids(out: &mut Vec<u8>, ids: &[StreamId]) {
    codec::put_varint(out, ids.len() as u64);
    for id in ids {
        put_id(out, *id);
    }
}

fn read_ids(r: &mut Reader<'_>) -> Result<Vec<StreamId>, DecodeError> {
    let n = r.items(2)?;
    let mut v = Vec::with_capacity(codec::prealloc(n));
    for _ in 0..n {
        v.push(read_id(r)?);
    }
    Ok(v)
}

fn put_cursor(out: &mut Vec<u8>, c: &CursorUpdate) {
    codec::put_stamp(out, c.epoch);
    put_id(out, c.floor);
    put_positions(out, &c.pos);
    put_opt_i64(out, c.entries_read);
}

fn read_cursor(r: &mut Reader<'_>) -> Result<CursorUpdate, DecodeError> {
    let epoch = r.stamp()?;
    let floor = read_id(r)?;
    let pos = read_positions(r)?;
    let entries_read = read_opt_i64(r)?;
    Ok(CursorUpdate {
        epoch,
        floor,
        pos,
        entries_read,
    })
}

/// Appends the encoding of `op` to `out`.
pub fn encode_op<B: AsRef<[u8]>>(op: &StreamOp<B>, out: &mut Vec<u8>) {
    match op {
        StreamOp::Add { id, fields, totals } => {
            codec::put_u8(out, TAG_ADD);
            put_id(out, *id);
            put_totals(out, totals);
            put_fields(out, fields);
        }
        StreamOp::Load { entries, totals } => {
            codec::put_u8(out, TAG_LOAD);
            put_totals(out, totals);
            codec::put_varint(out, entries.len() as u64);
            for (id, fields) in entries {
                put_id(out, *id);
                put_fields(out, fields);
            }
        }
        StreamOp::Trim { upto, observed } => {
            codec::put_u8(out, TAG_TRIM);
            put_id(out, *upto);
            codec::put_vv(out, observed);
        }
        StreamOp::Delete {
            ids,
            observed,
            totals,
        } => {
            codec::put_u8(out, TAG_DELETE);
            put_ids(out, ids);
            codec::put_vv(out, observed);
            put_totals(out, totals);
        }
        StreamOp::SetId {
            last_id,
            entries_added,
            max_deleted,
            observed,
            baseline,
        } => {
            codec::put_u8(out, TAG_SETID);
            put_id(out, *last_id);
            codec::put_varint(out, *entries_added);
            put_id(out, *max_deleted);
            codec::put_vv(out, observed);
            put_baseline(out, baseline);
        }
        StreamOp::GroupEpoch {
            group,
            floor,
            entries_read,
        } => {
            codec::put_u8(out, TAG_GROUP_EPOCH);
            codec::put_bytes(out, group.as_ref());
            put_id(out, *floor);
            put_i64(out, *entries_read);
        }
        StreamOp::GroupDestroy { group, observed } => {
            codec::put_u8(out, TAG_GROUP_DESTROY);
            codec::put_bytes(out, group.as_ref());
            codec::put_vv(out, observed);
        }
        StreamOp::ConsumerCreate {
            group,
            consumer,
            seen_ms,
        } => {
            codec::put_u8(out, TAG_CONSUMER_CREATE);
            codec::put_bytes(out, group.as_ref());
            codec::put_bytes(out, consumer.as_ref());
            codec::put_varint(out, *seen_ms);
        }
        StreamOp::ConsumerDelete {
            group,
            consumer,
            observed,
        } => {
            codec::put_u8(out, TAG_CONSUMER_DELETE);
            codec::put_bytes(out, group.as_ref());
            codec::put_bytes(out, consumer.as_ref());
            codec::put_vv(out, observed);
        }
        StreamOp::Deliver {
            group,
            consumer,
            seen_ms,
            pending,
            gone,
            cursor,
            observed,
        } => {
            codec::put_u8(out, TAG_DELIVER);
            codec::put_bytes(out, group.as_ref());
            put_opt(out, consumer.as_ref(), |out, c| {
                codec::put_bytes(out, c.as_ref())
            });
            codec::put_varint(out, *seen_ms);
            codec::put_varint(out, pending.len() as u64);
            for (id, ms, count) in pending {
                put_id(out, *id);
                codec::put_varint(out, *ms);
                codec::put_varint(out, *count);
            }
            put_ids(out, gone);
            put_opt(out, cursor.as_ref(), put_cursor);
            codec::put_vv(out, observed);
        }
        StreamOp::Ack {
            group,
            ids,
            observed,
        } => {
            codec::put_u8(out, TAG_ACK);
            codec::put_bytes(out, group.as_ref());
            put_ids(out, ids);
            codec::put_vv(out, observed);
        }
    }
}

/// Decodes one op written by `encode_op`.
pub fn decode_op(r: &mut Reader<'_>) -> Result<StreamOp<Vec<u8>>, DecodeError> {
    Ok(match r.u8()? {
        TAG_ADD => {
            let id = read_id(r)?;
            let totals = read_totals(r)?;
            StreamOp::Add {
                id,
                fields: read_fields(r)?,
                totals,
            }
        }
        TAG_LOAD => {
            let totals = read_totals(r)?;
            let n = r.items(3)?;
            let mut entries = Vec::with_capacity(codec::prealloc(n));
            for _ in 0..n {
                let id = read_id(r)?;
                entries.push((id, read_fields(r)?));
            }
            StreamOp::Load { entries, totals }
        }
        TAG_TRIM => StreamOp::Trim {
            upto: read_id(r)?,
            observed: r.vv()?,
        },
        TAG_DELETE => StreamOp::Delete {
            ids: read_ids(r)?,
            observed: r.vv()?,
            totals: read_totals(r)?,
        },
        TAG_SETID => {
            let last_id = read_id(r)?;
            let entries_added = r.varint()?;
            let max_deleted = read_id(r)?;
            let observed = r.vv()?;
            let baseline = read_baseline(r)?;
            StreamOp::SetId {
                last_id,
                entries_added,
                max_deleted,
                observed,
                baseline,
            }
        }
        TAG_GROUP_EPOCH => StreamOp::GroupEpoch {
            group: r.bytes()?.to_vec(),
            floor: read_id(r)?,
            entries_read: read_i64(r)?,
        },
        TAG_GROUP_DESTROY => StreamOp::GroupDestroy {
            group: r.bytes()?.to_vec(),
            observed: r.vv()?,
        },
        TAG_CONSUMER_CREATE => StreamOp::ConsumerCreate {
            group: r.bytes()?.to_vec(),
            consumer: r.bytes()?.to_vec(),
            seen_ms: r.varint()?,
        },
        TAG_CONSUMER_DELETE => StreamOp::ConsumerDelete {
            group: r.bytes()?.to_vec(),
            consumer: r.bytes()?.to_vec(),
            observed: r.vv()?,
        },
        TAG_DELIVER => {
            let group = r.bytes()?.to_vec();
            let consumer = read_opt(r, |r| Ok(r.bytes()?.to_vec()))?;
            let seen_ms = r.varint()?;
            let n = r.items(4)?;
            let mut pending = Vec::with_capacity(codec::prealloc(n));
            for _ in 0..n {
                let id = read_id(r)?;
                let ms = r.varint()?;
                pending.push((id, ms, r.varint()?));
            }
            let gone = read_ids(r)?;
            let cursor = read_opt(r, read_cursor)?;
            StreamOp::Deliver {
                group,
                consumer,
                seen_ms,
                pending,
                gone,
                cursor,
                observed: r.vv()?,
            }
        }
        TAG_ACK => StreamOp::Ack {
            group: r.bytes()?.to_vec(),
            ids: read_ids(r)?,
            observed: r.vv()?,
        },
        t => return Err(DecodeError::BadTag(t)),
    })
}

// ------------------------------------------------------------------------------------------
// State (full sync)
// ------------------------------------------------------------------------------------------

fn put_opt_i64(out: &mut Vec<u8>, v: Option<i64>) {
    put_opt(out, v, put_i64);
}

fn read_opt_i64(r: &mut Reader<'_>) -> Result<Option<i64>, DecodeError> {
    read_opt(r, read_i64)
}

pub(crate) fn put_group(out: &mut Vec<u8>, p: &GroupParts) {
    codec::put_bytes(out, &p.name);
    codec::put_vv(out, &p.dots);
    codec::put_vv(out, &p.removed);
    codec::put_varint(out, p.epochs.len() as u64);
    for (stamp, base, reads) in &p.epochs {
        codec::put_stamp(out, *stamp);
        put_opt(out, base.as_ref(), |out, (floor, er)| {
            put_id(out, *floor);
            put_i64(out, *er);
        });
        codec::put_varint(out, reads.len() as u64);
        for (s, floor, pos, er) in reads {
            codec::put_stamp(out, *s);
            put_id(out, *floor);
            put_positions(out, pos);
            put_opt_i64(out, *er);
        }
    }
    codec::put_varint(out, p.consumers.len() as u64);
    for (name, dots, removed) in &p.consumers {
        codec::put_bytes(out, name);
        codec::put_varint(out, dots.len() as u64);
        for (s, ms) in dots {
            codec::put_stamp(out, *s);
            codec::put_varint(out, *ms);
        }
        codec::put_vv(out, removed);
    }
    codec::put_varint(out, p.pel.len() as u64);
    for (id, versions) in &p.pel {
        put_id(out, *id);
        codec::put_varint(out, versions.len() as u64);
        for (s, owner, ms, count) in versions {
            codec::put_stamp(out, *s);
            put_opt(out, owner.as_ref(), |out, o| codec::put_bytes(out, o));
            codec::put_varint(out, *ms);
            codec::put_varint(out, *count);
        }
    }
    codec::put_varint(out, p.pel_ctx.len() as u64);
    for (id, vv) in &p.pel_ctx {
        put_id(out, *id);
        codec::put_vv(out, vv);
    }
}

pub(crate) fn read_group(r: &mut Reader<'_>) -> Result<GroupParts, DecodeError> {
    let name = r.bytes()?.to_vec();
    let dots = r.vv_strict()?;
    let removed = r.vv_strict()?;
    let n = r.count("group epochs")?;
    let mut epochs = Vec::with_capacity(codec::prealloc(n));
    let mut prev: Option<Stamp> = None;
    for _ in 0..n {
        let stamp = r.stamp()?;
        if prev.is_some_and(|p| p >= stamp) {
            return Err(DecodeError::Invalid("group epochs not sorted"));
        }
        prev = Some(stamp);
        let base = read_opt(r, |r| Ok((read_id(r)?, read_i64(r)?)))?;
        let k = r.count("epoch contributions")?;
        let mut reads = Vec::with_capacity(codec::prealloc(k));
        for _ in 0..k {
            let s = r.stamp()?;
            let floor = read_id(r)?;
            let pos = read_positions(r)?;
            reads.push((s, floor, pos, read_opt_i64(r)?));
        }
        if base.is_none() && reads.is_empty() {
            return Err(DecodeError::Invalid("empty group epoch"));
        }
        epochs.push((stamp, base, reads));
    }
    let n = r.items(2)?;
    let mut consumers = Vec::with_capacity(codec::prealloc(n));
    let mut prev_name: Option<Vec<u8>> = None;
    for _ in 0..n {
        let cname = r.bytes()?.to_vec();
        if prev_name.as_ref().is_some_and(|p| *p >= cname) {
            return Err(DecodeError::Invalid("consumers not sorted"));
        }
        prev_name = Some(cname.clone());
        let k = r.count("consumer dots")?;
        let mut dots = Vec::with_capacity(codec::prealloc(k));
        for _ in 0..k {
            let s = r.stamp()?;
            dots.push((s, r.varint()?));
        }
        consumers.push((cname, dots, r.vv_strict()?));
    }
    let n = r.items(3)?;
    let mut pel = Vec::with_capacity(codec::prealloc(n));
    let mut prev_id: Option<StreamId> = None;
    for _ in 0..n {
        let id = read_id(r)?;
        if prev_id.is_some_and(|p| p >= id) {
            return Err(DecodeError::Invalid("pending entries not sorted"));
        }
        prev_id = Some(id);
        let k = r.count("pending versions")?;
        if k == 0 {
            return Err(DecodeError::Invalid("pending entry without versions"));
        }
        let mut versions = Vec::with_capacity(codec::prealloc(k));
        for _ in 0..k {
            let s = r.stamp()?;
            let owner = read_opt(r, |r| Ok(r.bytes()?.to_vec()))?;
            let ms = r.varint()?;
            versions.push((s, owner, ms, r.varint()?));
        }
        pel.push((id, versions));
    }
    let n = r.items(3)?;
    let mut pel_ctx = Vec::with_capacity(codec::prealloc(n));
    for _ in 0..n {
        let id = read_id(r)?;
        pel_ctx.push((id, r.vv_strict()?));
    }
    Ok(GroupParts {
        name,
        dots,
        removed,
        epochs,
        consumers,
        pel,
        pel_ctx,
    })
}

fn removal_key(r: &Removal) -> Vec<u8> {
    let mut k = Vec::new();
    put_removal(&mut k, r);
    k
}

fn put_removal(out: &mut Vec<u8>, r: &Removal) {
    codec::put_varint(out, r.ranges.len() as u64);
    for (lo, hi) in &r.ranges {
        put_id(out, *lo);
        put_id(out, *hi);
    }
    codec::put_vv(out, &r.observed);
}

impl StreamCrdt {
    /// Appends the whole replicated state. Canonical: equal states encode to equal bytes.
    pub fn encode_state(&self, out: &mut Vec<u8>) {
        codec::put_u8(out, STATE_V1);
        let empty = Inner::default();
        let i = self.inner.as_deref().unwrap_or(&empty);
        codec::put_vv(out, &i.seen);
        codec::put_vv(out, &i.alive);
        codec::put_varint(out, i.origins.len() as u64);
        for o in &i.origins {
            codec::put_u32(out, o.replica.0);
            codec::put_u64(out, o.hlc.0);
            put_totals(out, &o.t);
        }
        codec::put_varint(out, i.setids.len() as u64);
        for s in &i.setids {
            codec::put_stamp(out, s.stamp);
            put_id(out, s.last_id);
            codec::put_varint(out, s.entries_added);
            put_id(out, s.max_deleted);
            codec::put_vv(out, &s.observed);
            put_baseline(out, &s.baseline);
        }
        codec::put_vv(out, &i.setid_ctx);
        let mut removals: Vec<Vec<u8>> = i.removals.iter().map(removal_key).collect();
        removals.sort();
        removals.dedup();
        codec::put_varint(out, removals.len() as u64);
        for r in &removals {
            out.extend_from_slice(r);
        }
        // Every version, shown and hidden, in (id, stamp) order.
        let mut versions: Vec<(StreamId, Stamp, Vec<Vec<u8>>)> = Vec::new();
        for b in &i.blocks {
            for e in b.iter() {
                versions.push((
                    e.id,
                    e.stamp,
                    e.fields()
                        .flat_map(|(f, v)| [f.to_vec(), v.to_vec()])
                        .collect(),
                ));
            }
        }
        for s in &i.shadows {
            versions.push((s.id, s.stamp, s.fields.clone()));
        }
        versions.sort_by_key(|a| (a.0, a.1));
        codec::put_varint(out, versions.len() as u64);
        for (id, stamp, fields) in &versions {
            put_id(out, *id);
            codec::put_stamp(out, *stamp);
            put_fields(out, fields);
        }
        let groups: Vec<&Group> = i.groups.iter().filter(|g| !g.is_blank()).collect();
        codec::put_varint(out, groups.len() as u64);
        for g in groups {
            put_group(out, &g.parts());
        }
    }

    /// Reads a state written by `encode_state`. Refuses, as `DecodeError::Invalid`, states
    /// that break an invariant: vectors not in their sorted form, entries out of order, an
    /// entry `seen` does not cover or a removal record covers, unsorted parts.
    pub fn decode_state(r: &mut Reader<'_>) -> Result<StreamCrdt, DecodeError> {
        match r.u8()? {
            STATE_V1 => {}
            t => return Err(DecodeError::BadTag(t)),
        }
        let mut i = Inner {
            seen: r.vv_strict()?,
            alive: r.vv_strict()?,
            ..Inner::default()
        };
        let n = r.count("stream origins")?;
        let mut prev: Option<ReplicaId> = None;
        for _ in 0..n {
            let replica = ReplicaId(r.u32()?);
            if prev.is_some_and(|p| p >= replica) {
                return Err(DecodeError::Invalid("stream origins not sorted"));
            }
            prev = Some(replica);
            let o = Origin {
                replica,
                hlc: Hlc(r.u64()?),
                t: read_totals(r)?,
            };
            i.origins.push(o);
        }
        let n = r.count("stream setids")?;
        for _ in 0..n {
            let stamp = r.stamp()?;
            if i.setids.last().is_some_and(|s| s.stamp >= stamp) {
                return Err(DecodeError::Invalid("stream setids not sorted"));
            }
            let last_id = read_id(r)?;
            let entries_added = r.varint()?;
            let max_deleted = read_id(r)?;
            let observed = r.vv_strict()?;
            let baseline = read_baseline(r)?;
            i.setids.push(SetIdRec {
                stamp,
                last_id,
                entries_added,
                max_deleted,
                observed,
                baseline,
            });
        }
        i.setid_ctx = r.vv_strict()?;
        let n = r.items(2)?;
        for _ in 0..n {
            let k = r.count("removal ranges")?;
            let mut ranges = SmallVec::new();
            for _ in 0..k {
                let lo = read_id(r)?;
                ranges.push((lo, read_id(r)?));
            }
            let observed = r.vv_strict()?;
            i.push_removal(Removal { ranges, observed });
        }
        let n = r.items(15)?;
        let mut last: Option<(StreamId, Stamp)> = None;
        for _ in 0..n {
            let id = read_id(r)?;
            let stamp = r.stamp()?;
            let fields = read_fields(r)?;
            if last.is_some_and(|l| l >= (id, stamp)) {
                return Err(DecodeError::Invalid("stream entries not in order"));
            }
            last = Some((id, stamp));
            if stamp.hlc == Hlc::ZERO || !i.seen.covers(stamp) {
                return Err(DecodeError::Invalid("stream entry not seen"));
            }
            if i.removed_by_record(id, stamp) {
                return Err(DecodeError::Invalid("stream entry covered by a removal"));
            }
            i.insert(id, stamp, &fields);
        }
        let n = r.items(8)?;
        let mut prev_name: Option<Vec<u8>> = None;
        for _ in 0..n {
            let p = read_group(r)?;
            if prev_name.as_ref().is_some_and(|x| *x >= p.name) {
                return Err(DecodeError::Invalid("stream groups not sorted"));
            }
            prev_name = Some(p.name.clone());
            i.groups.push(Group::from_parts(&p));
        }
        Ok(StreamCrdt {
            inner: (!i.is_droppable()).then(|| Box::new(i)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::VersionVector;
    use crate::dot::st;

    fn vv(s: &[Stamp]) -> VersionVector {
        let mut v = VersionVector::new();
        for x in s {
            v.observe(*x);
        }
        v
    }

    #[test]
    fn ops_round_trip_and_truncation_is_an_error() {
        let ops: Vec<StreamOp<Vec<u8>>> = vec![
            StreamOp::Add {
                id: StreamId::new(5, 7),
                fields: vec![b"f".to_vec(), b"v".to_vec()],
                totals: Totals {
                    adds: 3,
                    last_add: StreamId::new(5, 6),
                    last_add_hlc: Hlc(9),
                    max_del: StreamId::new(1, 1),
                    last_del_hlc: Hlc(2),
                },
            },
            StreamOp::Load {
                entries: vec![
                    (StreamId::new(1, 1), vec![]),
                    (StreamId::MAX, vec![b"a".to_vec(), vec![]]),
                ],
                totals: Totals::default(),
            },
            StreamOp::Trim {
                upto: StreamId::new(9, 9),
                observed: vv(&[st(3, 1)]),
            },
            StreamOp::Delete {
                ids: vec![StreamId::new(2, 0)],
                observed: vv(&[st(3, 1), st(4, 2)]),
                totals: Totals::default(),
            },
            StreamOp::SetId {
                last_id: StreamId::new(200, 0),
                entries_added: 4,
                max_deleted: StreamId::MIN,
                observed: vv(&[st(1, 1)]),
                baseline: vec![(ReplicaId(1), 4)],
            },
            StreamOp::GroupEpoch {
                group: b"g".to_vec(),
                floor: StreamId::MIN,
                entries_read: -1,
            },
            StreamOp::GroupDestroy {
                group: b"g".to_vec(),
                observed: vv(&[st(1, 1)]),
            },
            StreamOp::ConsumerCreate {
                group: b"g".to_vec(),
                consumer: b"c".to_vec(),
                seen_ms: 77,
            },
            StreamOp::ConsumerDelete {
                group: b"g".to_vec(),
                consumer: b"c".to_vec(),
                observed: VersionVector::new(),
            },
            StreamOp::Deliver {
                group: b"g".to_vec(),
                consumer: Some(b"c".to_vec()),
                seen_ms: 5,
                pending: vec![(StreamId::new(1, 0), 5, 1)],
                gone: vec![StreamId::new(0, 1)],
                cursor: Some(CursorUpdate {
                    epoch: st(1, 1),
                    floor: StreamId::MIN,
                    pos: vec![(ReplicaId(1), StreamId::new(1, 0))],
                    entries_read: Some(1),
                }),
                observed: vv(&[st(1, 1)]),
            },
            StreamOp::Deliver {
                group: b"g".to_vec(),
                consumer: None,
                seen_ms: 0,
                pending: vec![],
                gone: vec![],
                cursor: None,
                observed: VersionVector::new(),
            },
            StreamOp::Ack {
                group: b"g".to_vec(),
                ids: vec![StreamId::new(1, 0)],
                observed: vv(&[st(2, 1)]),
            },
        ];
        for op in ops {
            let mut out = Vec::new();
            encode_op(&op, &mut out);
            let mut r = Reader::new(&out);
            assert_eq!(decode_op(&mut r).unwrap(), op);
            assert!(r.is_at_end());
            for cut in 0..out.len() {
                assert!(
                    decode_op(&mut Reader::new(&out[..cut])).is_err(),
                    "{op:?} cut {cut}"
                );
            }
        }
    }
}

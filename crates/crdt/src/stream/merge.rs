//! The state join of two streams (full sync).
//!
//! One rule throughout: a write held on both sides is kept; a write held on one side only is
//! kept unless the other side saw it (its `seen` or its replica's causal context covers the
//! stamp: it applied the write and removed or superseded it since) or one of the other side's
//! removal contexts covers it. Registers that keep the latest write per origin (existence
//! dots, running values, group and consumer dots, cursor contributions) keep the highest of
//! the writes so kept. The same law as the list's and the hash's (`ListCrdt::merge_with_contexts`).

use super::group::{GroupParts, VersionParts};
use super::{Group, Inner, Origin, StreamCrdt, StreamId};
use crate::dot::{Context, ReplicaId, Stamp, VersionVector};
use crate::hlc::Hlc;

/// What one side of a join saw: the stream's own `seen` (every write applied to it, and the
/// stable vectors it collected with) and the causal context of the replica holding it
/// (empty for a plain `merge`).
#[derive(Clone, Copy)]
struct Saw<'a> {
    seen: &'a VersionVector,
    ctx: &'a Context,
}

impl Saw<'_> {
    fn covers(&self, stamp: Stamp) -> bool {
        self.seen.covers(stamp) || self.ctx.covers(stamp)
    }
}

/// Whether a write held by one side survives: held by the other too, or not seen there.
fn keep(stamp: Stamp, held_by_other: bool, other_saw: Saw<'_>) -> bool {
    held_by_other || !other_saw.covers(stamp)
}

/// Joins two latest-write-per-origin vectors.
fn join_latest(
    x: &VersionVector,
    x_seen: Saw<'_>,
    y: &VersionVector,
    y_seen: Saw<'_>,
) -> VersionVector {
    let mut out = VersionVector::new();
    let replicas: Vec<ReplicaId> = x.iter().chain(y.iter()).map(|(r, _)| r).collect();
    for r in replicas {
        let (hx, hy) = (x.get(r), y.get(r));
        for (h, other, other_seen) in [(hx, hy, y_seen), (hy, hx, x_seen)] {
            if h > Hlc::ZERO && keep(Stamp { hlc: h, replica: r }, other == h, other_seen) {
                out.observe(Stamp { hlc: h, replica: r });
            }
        }
    }
    out
}

/// Joins two lists keyed by `key`, each item carrying a stamp: one item per key, the highest
/// kept one.
fn join_keyed<T: Clone, K: PartialEq + Ord + Copy>(
    x: &[T],
    x_seen: Saw<'_>,
    y: &[T],
    y_seen: Saw<'_>,
    key: impl Fn(&T) -> K,
    stamp: impl Fn(&T) -> Stamp,
) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    let mut consider = |t: &T, others: &[T], other_seen: Saw<'_>| {
        let held = others
            .iter()
            .any(|o| key(o) == key(t) && stamp(o) == stamp(t));
        if !keep(stamp(t), held, other_seen) {
            return;
        }
        match out.iter_mut().find(|o| key(o) == key(t)) {
            Some(o) => {
                if stamp(o) < stamp(t) {
                    *o = t.clone();
                }
            }
            None => out.push(t.clone()),
        }
    };
    for t in x {
        consider(t, y, y_seen);
    }
    for t in y {
        consider(t, x, x_seen);
    }
    out.sort_by_key(|t| key(t));
    out
}

fn join_groups(gx: &GroupParts, x_seen: Saw<'_>, gy: &GroupParts, y_seen: Saw<'_>) -> GroupParts {
    let mut removed = gx.removed.clone();
    removed.merge(&gy.removed);
    let dots = join_latest(&gx.dots, x_seen, &gy.dots, y_seen);
    // Epochs: the base with the epoch's stamp, contributions per writer.
    let mut stamps: Vec<Stamp> = gx
        .epochs
        .iter()
        .chain(gy.epochs.iter())
        .map(|e| e.0)
        .collect();
    stamps.sort();
    stamps.dedup();
    let mut epochs = Vec::new();
    for s in stamps {
        let ex = gx.epochs.iter().find(|e| e.0 == s);
        let ey = gy.epochs.iter().find(|e| e.0 == s);
        let bx = ex.and_then(|e| e.1);
        let by = ey.and_then(|e| e.1);
        let base = match (bx, by) {
            (Some(b), Some(_)) => Some(b),
            (Some(b), None) => keep(s, false, y_seen).then_some(b),
            (None, Some(b)) => keep(s, false, x_seen).then_some(b),
            (None, None) => None,
        }
        .filter(|_| !removed.covers(s));
        let rx = ex.map(|e| e.2.clone()).unwrap_or_default();
        let ry = ey.map(|e| e.2.clone()).unwrap_or_default();
        let reads: Vec<_> = join_keyed(&rx, x_seen, &ry, y_seen, |c| c.0.replica, |c| c.0)
            .into_iter()
            .filter(|c| !removed.covers(c.0))
            .collect();
        if base.is_some() || !reads.is_empty() {
            epochs.push((s, base, reads));
        }
    }
    // Consumers.
    let mut names: Vec<Vec<u8>> = gx
        .consumers
        .iter()
        .chain(gy.consumers.iter())
        .map(|c| c.0.clone())
        .collect();
    names.sort();
    names.dedup();
    let mut consumers = Vec::new();
    for name in names {
        let cx = gx.consumers.iter().find(|c| c.0 == name);
        let cy = gy.consumers.iter().find(|c| c.0 == name);
        let mut cremoved = cx.map(|c| c.2.clone()).unwrap_or_default();
        if let Some(c) = cy {
            cremoved.merge(&c.2);
        }
        let dx = cx.map(|c| c.1.clone()).unwrap_or_default();
        let dy = cy.map(|c| c.1.clone()).unwrap_or_default();
        let dots: Vec<(Stamp, u64)> =
            join_keyed(&dx, x_seen, &dy, y_seen, |d| d.0.replica, |d| d.0)
                .into_iter()
                .filter(|d| !removed.covers(d.0) && !cremoved.covers(d.0))
                .collect();
        consumers.push((name, dots, cremoved));
    }
    let removed_of = |name: &[u8]| {
        consumers
            .iter()
            .find(|c| c.0.as_slice() == name)
            .map(|c| c.2.clone())
            .unwrap_or_default()
    };
    // Pending versions.
    let mut ctx: Vec<(StreamId, VersionVector)> = gx.pel_ctx.clone();
    for (id, v) in &gy.pel_ctx {
        match ctx.iter_mut().find(|c| c.0 == *id) {
            Some(c) => c.1.merge(v),
            None => ctx.push((*id, v.clone())),
        }
    }
    ctx.sort_by_key(|c| c.0);
    let mut ids: Vec<StreamId> = gx.pel.iter().chain(gy.pel.iter()).map(|p| p.0).collect();
    ids.sort();
    ids.dedup();
    let mut pel = Vec::new();
    for id in ids {
        let vx = gx
            .pel
            .iter()
            .find(|p| p.0 == id)
            .map(|p| p.1.clone())
            .unwrap_or_default();
        let vy = gy
            .pel
            .iter()
            .find(|p| p.0 == id)
            .map(|p| p.1.clone())
            .unwrap_or_default();
        let id_ctx = ctx
            .iter()
            .find(|c| c.0 == id)
            .map(|c| c.1.clone())
            .unwrap_or_default();
        let mut versions = Vec::new();
        for (mine, theirs, their_seen) in [(&vx, &vy, y_seen), (&vy, &vx, x_seen)] {
            for v in mine {
                if versions.iter().any(|w: &VersionParts| w.0 == v.0) {
                    continue;
                }
                let held = theirs.iter().any(|w| w.0 == v.0);
                let owner_removed = v.1.as_ref().is_some_and(|o| removed_of(o).covers(v.0));
                // A context covers a write only when it is not the write's own: the context
                // of a write holds what it observed, never itself.
                if keep(v.0, held, their_seen)
                    && !removed.covers(v.0)
                    && !owner_removed
                    && (held || !id_ctx.covers(v.0))
                {
                    versions.push(v.clone());
                }
            }
        }
        versions.sort_by_key(|v| v.0);
        if !versions.is_empty() {
            pel.push((id, versions));
        }
    }
    GroupParts {
        name: gx.name.clone(),
        dots: {
            let mut d = dots;
            d.forget_covered(&removed);
            d
        },
        removed,
        epochs,
        consumers,
        pel,
        pel_ctx: ctx,
    }
}

impl StreamCrdt {
    /// The state join (full sync): afterwards `self` is the state of a replica that applied
    /// the writes of both sides (see the module doc). Commutative, associative and
    /// idempotent. Exact when each side dropped metadata only through `collect(Some(stable))`
    /// with causally stable vectors (joined into `seen`). Key-level removals leave no record
    /// here: the caller (`KeyState`) applies its contexts with `remove_observed`.
    pub fn merge(&mut self, other: &StreamCrdt) {
        let none = Context::default();
        self.merge_with_contexts(other, &none, &none);
    }

    /// `merge`, where `mine` and `theirs` are causal contexts of the replicas that hold
    /// `self` and `other`: every write a context covers was delivered there, so an entry,
    /// existence dot, running value, XSETID, group or consumer dot, cursor contribution or
    /// pending version held by one side only that the other side's context covers was
    /// removed (or superseded) there and goes, as one its `seen` covers does; one the context
    /// does not cover is new to that side and stays. This is what keeps an entry XDEL'd or
    /// trimmed, an XACK, a DESTROY or a DELCONSUMER in force against a peer that was
    /// quarantined while its record was collected (docs/replication.md §6). The contexts are
    /// not kept in the result. With empty contexts it is `merge`; commutative (swapping the
    /// contexts with the sides) and, given the join of the contexts as the result's,
    /// associative and idempotent.
    pub fn merge_with_contexts(&mut self, other: &StreamCrdt, mine: &Context, theirs: &Context) {
        let empty_other = Inner::default();
        let y = match other.inner.as_deref() {
            Some(y) => y,
            None if self.inner.is_some() => &empty_other,
            None => return,
        };
        let own = self.inner.take();
        let empty = Inner::default();
        let x = own.as_deref().unwrap_or(&empty);
        let (saw_x, saw_y) = (
            Saw {
                seen: &x.seen,
                ctx: mine,
            },
            Saw {
                seen: &y.seen,
                ctx: theirs,
            },
        );
        let mut out = Inner {
            seen: x.seen.clone(),
            ..Inner::default()
        };
        out.seen.merge(&y.seen);
        out.alive = join_latest(&x.alive, saw_x, &y.alive, saw_y);
        let origins: Vec<Origin> = join_keyed(
            &x.origins,
            saw_x,
            &y.origins,
            saw_y,
            |o| o.replica,
            |o| Stamp {
                hlc: o.hlc,
                replica: o.replica,
            },
        );
        out.origins = origins.into_iter().collect();
        // XSETIDs: a multi-value register; each side's contexts drop what they superseded.
        let mut ctx = x.setid_ctx.clone();
        ctx.merge(&y.setid_ctx);
        for (held_here, held_there, their_seen) in
            [(&x.setids, &y.setids, saw_y), (&y.setids, &x.setids, saw_x)]
        {
            for rec in held_here {
                if out.setids.iter().any(|r| r.stamp == rec.stamp) {
                    continue;
                }
                let held = held_there.iter().any(|r| r.stamp == rec.stamp);
                if keep(rec.stamp, held, their_seen) && (held || !ctx.covers(rec.stamp)) {
                    out.setids.push(rec.clone());
                }
            }
        }
        out.setids.sort_by_key(|r| r.stamp);
        out.setid_ctx = ctx;
        for r in x.removals.iter().chain(y.removals.iter()) {
            out.push_removal(r.clone());
        }
        // Entries: every version of both sides.
        let versions = |i: &Inner| -> Vec<(StreamId, Stamp, Vec<Vec<u8>>)> {
            let mut v: Vec<_> = i
                .blocks
                .iter()
                .flat_map(|b| b.iter())
                .map(|e| {
                    (
                        e.id,
                        e.stamp,
                        e.fields()
                            .flat_map(|(f, v)| [f.to_vec(), v.to_vec()])
                            .collect(),
                    )
                })
                .collect();
            v.extend(i.shadows.iter().map(|s| (s.id, s.stamp, s.fields.clone())));
            v.sort_by_key(|a| (a.0, a.1));
            v
        };
        let (vx, vy) = (versions(x), versions(y));
        let (mut a, mut b) = (vx.iter().peekable(), vy.iter().peekable());
        loop {
            let pick = match (a.peek(), b.peek()) {
                (Some(p), Some(q)) if (p.0, p.1) == (q.0, q.1) => {
                    b.next();
                    a.next()
                }
                (Some(p), q) if q.is_none_or(|q| (p.0, p.1) < (q.0, q.1)) => {
                    let p = a.next();
                    p.filter(|p| keep(p.1, false, saw_y) && !y.removed_by_record(p.0, p.1))
                }
                (_, Some(_)) => {
                    let q = b.next();
                    q.filter(|q| keep(q.1, false, saw_x) && !x.removed_by_record(q.0, q.1))
                }
                _ => break,
            };
            if let Some((id, stamp, fields)) = pick {
                out.insert(*id, *stamp, fields);
            }
        }
        // Groups.
        let mut names: Vec<Vec<u8>> = x
            .groups
            .iter()
            .chain(y.groups.iter())
            .map(|g| g.name.to_vec())
            .collect();
        names.sort();
        names.dedup();
        for name in names {
            let px = x
                .groups
                .iter()
                .find(|g| g.name.as_slice() == name.as_slice())
                .map(Group::parts)
                .unwrap_or_else(|| GroupParts {
                    name: name.clone(),
                    ..GroupParts::default()
                });
            let py = y
                .groups
                .iter()
                .find(|g| g.name.as_slice() == name.as_slice())
                .map(Group::parts)
                .unwrap_or_else(|| GroupParts {
                    name: name.clone(),
                    ..GroupParts::default()
                });
            let g = Group::from_parts(&join_groups(&px, saw_x, &py, saw_y));
            if !g.is_blank() {
                out.groups.push(g);
            }
        }
        self.inner = (!out.is_droppable()).then(|| Box::new(out));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dot::st;
    use crate::stream::{StreamOp, Totals};

    fn vv(stamps: &[Stamp]) -> VersionVector {
        let mut v = VersionVector::new();
        for s in stamps {
            v.observe(*s);
        }
        v
    }

    fn add(ms: u64, seq: u64) -> StreamOp<Vec<u8>> {
        StreamOp::Add {
            id: StreamId::new(ms, seq),
            fields: vec![b"f".to_vec(), b"v".to_vec()],
            totals: Totals::default(),
        }
    }

    fn ids(s: &StreamCrdt) -> Vec<StreamId> {
        s.range(StreamId::MIN, StreamId::MAX)
            .map(|e| e.id)
            .collect()
    }

    /// A peer (Q) was quarantined while site A removed entries, acknowledged pending entries,
    /// destroyed a group and deleted a consumer, and then collected every record of it (A
    /// holds no stream any more: its value is the empty one a complete full sync merges in).
    /// A's context covers what Q holds of it: nothing of it comes back, whichever side
    /// merges, while the entry Q added during the outage (not covered) survives. The plain
    /// join (no contexts) brings all of it back.
    #[test]
    fn what_a_context_covers_and_the_other_side_lacks_was_removed_there() {
        let mut q = StreamCrdt::new();
        q.apply(st(1, 1), &add(1, 0));
        q.apply(st(2, 1), &add(2, 0));
        let group = |g: &str| g.as_bytes().to_vec();
        for (h, g) in [(3, "g1"), (4, "g2")] {
            q.apply(
                st(h, 1),
                &StreamOp::GroupEpoch {
                    group: group(g),
                    floor: StreamId::MIN,
                    entries_read: -1,
                },
            );
        }
        let observed = q.observed_vv();
        q.apply(
            st(5, 1),
            &StreamOp::Deliver {
                group: group("g1"),
                consumer: Some(b"c1".to_vec()),
                seen_ms: 7,
                pending: vec![(StreamId::new(1, 0), 7, 1), (StreamId::new(2, 0), 7, 1)],
                gone: Vec::new(),
                cursor: None,
                observed,
            },
        );
        q.apply(
            st(6, 1),
            &StreamOp::ConsumerCreate {
                group: group("g1"),
                consumer: b"c2".to_vec(),
                seen_ms: 8,
            },
        );
        assert_eq!(q.len(), 2);
        assert_eq!(q.group(b"g1").map(|g| g.pending_count()), Some(2));
        let removed_at_a = q.clone();
        // Q's own write during the outage.
        q.apply(st(9, 2), &add(3, 2));
        let a_ctx = Context::from(vv(&[st(20, 1)]));
        let q_ctx = Context::from(vv(&[st(6, 1), st(9, 2)]));
        let a = StreamCrdt::new();
        let mut aq = a.clone();
        aq.merge_with_contexts(&q, &a_ctx, &q_ctx);
        let mut qa = q.clone();
        qa.merge_with_contexts(&a, &q_ctx, &a_ctx);
        assert_eq!(ids(&aq), vec![StreamId::new(3, 2)]);
        assert!(aq.groups().next().is_none(), "{aq:?}");
        assert_eq!(aq, qa);
        // Idempotent, and what A held is absorbed.
        let mut again = aq.clone();
        let joined = {
            let mut c = a_ctx.seen.clone();
            c.merge(&q_ctx.seen);
            Context::from(c)
        };
        again.merge_with_contexts(&aq, &joined, &joined);
        assert_eq!(again, aq);
        // Without contexts everything A removed is back.
        let mut plain = a.clone();
        plain.merge(&removed_at_a);
        assert_eq!(ids(&plain).len(), 2);
        assert_eq!(plain.group(b"g1").map(|g| g.pending_count()), Some(2));
    }

    /// Where A still holds part of what Q holds, the context decides per write: a pending
    /// entry A acknowledged and collected goes, a consumer A deleted goes, a group A
    /// destroyed goes, an entry A deleted goes; what A still holds stays.
    #[test]
    fn a_context_judges_each_write_a_side_lacks() {
        let mut base = StreamCrdt::new();
        base.apply(st(1, 1), &add(1, 0));
        base.apply(st(2, 1), &add(2, 0));
        for (h, g) in [(3, b"g1"), (4, b"g2")] {
            base.apply(
                st(h, 1),
                &StreamOp::GroupEpoch {
                    group: g.to_vec(),
                    floor: StreamId::MIN,
                    entries_read: -1,
                },
            );
        }
        let observed = base.observed_vv();
        base.apply(
            st(5, 1),
            &StreamOp::Deliver {
                group: b"g1".to_vec(),
                consumer: Some(b"c1".to_vec()),
                seen_ms: 7,
                pending: vec![(StreamId::new(1, 0), 7, 1), (StreamId::new(2, 0), 7, 1)],
                gone: Vec::new(),
                cursor: None,
                observed,
            },
        );
        base.apply(
            st(6, 1),
            &StreamOp::ConsumerCreate {
                group: b"g1".to_vec(),
                consumer: b"c2".to_vec(),
                seen_ms: 8,
            },
        );
        let q = base.clone();
        let mut a = base;
        let o = a.observed_vv();
        a.apply(
            st(10, 3),
            &StreamOp::<Vec<u8>>::Delete {
                ids: vec![StreamId::new(1, 0)],
                observed: o.clone(),
                totals: Totals::default(),
            },
        );
        a.apply(
            st(11, 3),
            &StreamOp::Ack {
                group: b"g1".to_vec(),
                ids: vec![StreamId::new(2, 0)],
                observed: o.clone(),
            },
        );
        a.apply(
            st(12, 3),
            &StreamOp::ConsumerDelete {
                group: b"g1".to_vec(),
                consumer: b"c2".to_vec(),
                observed: o.clone(),
            },
        );
        a.apply(
            st(13, 3),
            &StreamOp::GroupDestroy {
                group: b"g2".to_vec(),
                observed: o,
            },
        );
        a.collect(Some(&vv(&[st(6, 1), st(13, 3)])));
        assert!(!a.has_metadata(), "{a:?}");
        // A's value forgets, for the test, what its `seen` says of origin 1, so that only the
        // context can tell what A removed (a value's `seen` is the context of the writes it
        // applied; the replica's context covers at least as much).
        if let Some(i) = a.inner.as_mut() {
            i.seen = vv(&[st(13, 3)]);
        }
        let a_ctx = Context::from(vv(&[st(6, 1), st(13, 3)]));
        let q_ctx = Context::from(vv(&[st(6, 1)]));
        let mut aq = a.clone();
        aq.merge_with_contexts(&q, &a_ctx, &q_ctx);
        let mut qa = q.clone();
        qa.merge_with_contexts(&a, &q_ctx, &a_ctx);
        assert_eq!(aq, qa);
        assert_eq!(ids(&aq), vec![StreamId::new(2, 0)]);
        // 1-0 was deleted, not acknowledged: it stays pending (as in Redis); 2-0 was acked.
        let g1 = aq.group(b"g1");
        let pending: Vec<StreamId> = g1
            .map(|g| {
                g.pending_range(StreamId::MIN, StreamId::MAX)
                    .map(|p| p.id)
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(pending, vec![StreamId::new(1, 0)], "{aq:?}");
        assert!(g1.is_some_and(|g| g.consumer(b"c2").is_none()));
        assert!(aq.group(b"g2").is_none());
        // The plain join brings them back.
        let mut plain = a.clone();
        plain.merge(&q);
        assert_eq!(ids(&plain).len(), 2);
    }
}

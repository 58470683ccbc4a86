//! The state join of two streams (full sync).
//!
//! One rule throughout: a write held on both sides is kept; a write held on one side only is
//! kept unless the other side saw it (its `seen` covers the stamp: it applied the write and
//! removed or superseded it since) or one of the other side's removal contexts covers it.
//! Registers that keep the latest write per origin (existence dots, running values, group and
//! consumer dots, cursor contributions) keep the highest of the writes so kept.

use super::group::{GroupParts, VersionParts};
use super::{Group, Inner, Origin, StreamCrdt, StreamId};
use crate::dot::{ReplicaId, Stamp, VersionVector};
use crate::hlc::Hlc;

/// Whether a write held by one side survives: held by the other too, or not seen there.
fn keep(stamp: Stamp, held_by_other: bool, other_seen: &VersionVector) -> bool {
    held_by_other || !other_seen.covers(stamp)
}

/// Joins two latest-write-per-origin vectors.
fn join_latest(
    x: &VersionVector,
    x_seen: &VersionVector,
    y: &VersionVector,
    y_seen: &VersionVector,
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
    x_seen: &VersionVector,
    y: &[T],
    y_seen: &VersionVector,
    key: impl Fn(&T) -> K,
    stamp: impl Fn(&T) -> Stamp,
) -> Vec<T> {
    let mut out: Vec<T> = Vec::new();
    let mut consider = |t: &T, others: &[T], other_seen: &VersionVector| {
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

fn join_groups(
    gx: &GroupParts,
    x_seen: &VersionVector,
    gy: &GroupParts,
    y_seen: &VersionVector,
) -> GroupParts {
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
        let own = self.inner.take();
        let empty = Inner::default();
        let x = own.as_deref().unwrap_or(&empty);
        let y = other.inner.as_deref().unwrap_or(&empty);
        let mut out = Inner {
            seen: x.seen.clone(),
            ..Inner::default()
        };
        out.seen.merge(&y.seen);
        out.alive = join_latest(&x.alive, &x.seen, &y.alive, &y.seen);
        let origins: Vec<Origin> = join_keyed(
            &x.origins,
            &x.seen,
            &y.origins,
            &y.seen,
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
        for (mine, theirs, their_seen) in [
            (&x.setids, &y.setids, &y.seen),
            (&y.setids, &x.setids, &x.seen),
        ] {
            for rec in mine {
                if out.setids.iter().any(|r| r.stamp == rec.stamp) {
                    continue;
                }
                let held = theirs.iter().any(|r| r.stamp == rec.stamp);
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
                    p.filter(|p| keep(p.1, false, &y.seen) && !y.removed_by_record(p.0, p.1))
                }
                (_, Some(_)) => {
                    let q = b.next();
                    q.filter(|q| keep(q.1, false, &x.seen) && !x.removed_by_record(q.0, q.1))
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
            let g = Group::from_parts(&join_groups(&px, &x.seen, &py, &y.seen));
            if !g.is_blank() {
                out.groups.push(g);
            }
        }
        self.inner = (!out.is_droppable()).then(|| Box::new(out));
    }
}

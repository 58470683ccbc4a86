//! Stream commands as the server issues them (`crates/server/src/cmd/stream.rs`), for the
//! law tests: each command becomes the `StreamOp` the server would build from the stream's
//! current state, or a removal of the whole key, or nothing.
#![allow(dead_code)]

use meridian_crdt::ReplicaId;
use meridian_crdt::stream::{CursorUpdate, StreamCrdt, StreamId, StreamOp, TrimBy};
use proptest::prelude::*;

#[derive(Clone, Debug)]
pub enum StreamCmd {
    /// XADD with an ID `bump` ms after the last (0: the same ms, next sequence).
    Add {
        bump: u8,
        v: u8,
    },
    /// XADD with an explicit ID (sites may pick the same one).
    AddAt {
        ms: u8,
        v: u8,
    },
    /// XDEL of the `k`-th entry.
    Del {
        k: u8,
    },
    /// XTRIM MAXLEN [~] n.
    Trim {
        n: u8,
        approx: bool,
    },
    /// XTRIM MINID of the `k`-th entry's ID.
    TrimMin {
        k: u8,
    },
    /// XSETID to the last ID plus `bump` ms.
    SetId {
        bump: u8,
    },
    /// XGROUP CREATE g 0 | $.
    Create {
        g: u8,
        at_end: bool,
    },
    /// XGROUP SETID g 0 | $.
    SetGroup {
        g: u8,
        at_end: bool,
    },
    Destroy {
        g: u8,
    },
    /// XREADGROUP GROUP g c COUNT n [NOACK] STREAMS key >.
    ReadNew {
        g: u8,
        c: u8,
        n: u8,
        noack: bool,
    },
    /// XREADGROUP GROUP g c STREAMS key 0.
    ReadHistory {
        g: u8,
        c: u8,
    },
    /// XCLAIM g c 0 <k-th pending> [FORCE].
    Claim {
        g: u8,
        c: u8,
        k: u8,
    },
    /// XAUTOCLAIM g c 0 0 COUNT n.
    AutoClaim {
        g: u8,
        c: u8,
        n: u8,
    },
    /// XACK g <k-th pending>.
    Ack {
        g: u8,
        k: u8,
    },
    CreateConsumer {
        g: u8,
        c: u8,
    },
    DelConsumer {
        g: u8,
        c: u8,
    },
    /// DEL of the key.
    DelKey,
}

pub fn stream_cmd() -> impl Strategy<Value = StreamCmd> {
    let g = 0u8..2;
    let c = 0u8..2;
    prop_oneof![
        6 => (0u8..3, 0u8..4).prop_map(|(bump, v)| StreamCmd::Add { bump, v }),
        2 => (1u8..6, 0u8..4).prop_map(|(ms, v)| StreamCmd::AddAt { ms, v }),
        2 => (0u8..8).prop_map(|k| StreamCmd::Del { k }),
        1 => (0u8..4, any::<bool>()).prop_map(|(n, approx)| StreamCmd::Trim { n, approx }),
        1 => (0u8..6).prop_map(|k| StreamCmd::TrimMin { k }),
        1 => (0u8..3).prop_map(|bump| StreamCmd::SetId { bump }),
        2 => (g.clone(), any::<bool>()).prop_map(|(g, at_end)| StreamCmd::Create { g, at_end }),
        1 => (g.clone(), any::<bool>()).prop_map(|(g, at_end)| StreamCmd::SetGroup { g, at_end }),
        1 => g.clone().prop_map(|g| StreamCmd::Destroy { g }),
        4 => (g.clone(), c.clone(), 0u8..3, any::<bool>())
            .prop_map(|(g, c, n, noack)| StreamCmd::ReadNew { g, c, n, noack }),
        1 => (g.clone(), c.clone()).prop_map(|(g, c)| StreamCmd::ReadHistory { g, c }),
        2 => (g.clone(), c.clone(), 0u8..4).prop_map(|(g, c, k)| StreamCmd::Claim { g, c, k }),
        1 => (g.clone(), c.clone(), 1u8..3).prop_map(|(g, c, n)| StreamCmd::AutoClaim { g, c, n }),
        2 => (g.clone(), 0u8..4).prop_map(|(g, k)| StreamCmd::Ack { g, k }),
        1 => (g.clone(), c.clone()).prop_map(|(g, c)| StreamCmd::CreateConsumer { g, c }),
        1 => (g.clone(), c.clone()).prop_map(|(g, c)| StreamCmd::DelConsumer { g, c }),
        1 => Just(StreamCmd::DelKey),
    ]
}

pub enum Issued {
    Op(StreamOp<Vec<u8>>),
    DelKey,
}

fn name(prefix: u8, i: u8) -> Vec<u8> {
    vec![prefix, b'0' + i]
}

fn fields(v: u8) -> Vec<Vec<u8>> {
    vec![b"f".to_vec(), vec![b'a' + v]]
}

/// The write the server would issue for `cmd` on `s` (an empty stream when the key does not
/// exist), at `replica` (`Some` when the site has peers), at time `now`.
pub fn issue(
    s: Option<&StreamCrdt>,
    cmd: &StreamCmd,
    replica: ReplicaId,
    peers: bool,
    now: u64,
) -> Option<Issued> {
    let empty = StreamCrdt::new();
    let exists = s.is_some();
    let s = s.unwrap_or(&empty);
    let origin = peers.then_some(replica);
    let nth = |k: u8| {
        let n = s.len();
        if n == 0 {
            None
        } else {
            s.range(StreamId::MIN, StreamId::MAX)
                .nth((u64::from(k) % n) as usize)
                .map(|e| e.id)
        }
    };
    let op = match cmd {
        StreamCmd::Add { bump, v } => {
            let last = s.last_id();
            let id = meridian_crdt::stream::auto_id(last, last.ms + u64::from(*bump), origin)?;
            s.add_op(id, fields(*v), replica)
        }
        StreamCmd::AddAt { ms, v } => {
            let id = StreamId::new(u64::from(*ms), 1);
            if id <= s.last_id() {
                return None;
            }
            s.add_op(id, fields(*v), replica)
        }
        StreamCmd::Del { k } => {
            let id = nth(*k)?;
            s.delete_op(vec![id], replica)
        }
        StreamCmd::Trim { n, approx } => {
            let (upto, _) = s.trim_plan(TrimBy::MaxLen(u64::from(*n)), *approx, 0)?;
            s.trim_op(upto)
        }
        StreamCmd::TrimMin { k } => {
            let id = nth(*k)?;
            let (upto, _) = s.trim_plan(TrimBy::MinId(id), false, 0)?;
            s.trim_op(upto)
        }
        StreamCmd::SetId { bump } => {
            if !exists {
                return None;
            }
            let last = s.last_id();
            let id = StreamId::new(last.ms + u64::from(*bump), last.seq);
            s.setid_op(id, s.entries_added(), s.max_deleted())
        }
        StreamCmd::Create { g, at_end } => {
            let g = name(b'g', *g);
            if s.group(&g).is_some() {
                return None;
            }
            StreamOp::GroupEpoch {
                group: g,
                floor: if *at_end { s.last_id() } else { StreamId::MIN },
                entries_read: -1,
            }
        }
        StreamCmd::SetGroup { g, at_end } => {
            let g = name(b'g', *g);
            s.group(&g)?;
            StreamOp::GroupEpoch {
                group: g,
                floor: if *at_end { s.last_id() } else { StreamId::MIN },
                entries_read: -1,
            }
        }
        StreamCmd::Destroy { g } => {
            let g = name(b'g', *g);
            s.group(&g)?;
            StreamOp::GroupDestroy {
                group: g,
                observed: s.observed_vv(),
            }
        }
        StreamCmd::ReadNew { g, c, n, noack } => {
            let gname = name(b'g', *g);
            let grp = s.group(&gname)?;
            let ne = s.new_entries(grp, usize::from(*n));
            if !ne.moved {
                return None;
            }
            let cursor = grp.epoch().map(|epoch| CursorUpdate {
                epoch,
                floor: grp.floor(),
                pos: ne.pos.clone(),
                entries_read: s.entries_read_after(grp, &ne.ids),
            });
            let served = !ne.ids.is_empty();
            StreamOp::Deliver {
                group: gname,
                consumer: served.then(|| name(b'c', *c)),
                seen_ms: now,
                pending: if *noack {
                    Vec::new()
                } else {
                    ne.ids.iter().map(|id| (*id, now, 1)).collect()
                },
                gone: Vec::new(),
                cursor,
                observed: s.observed_vv(),
            }
        }
        StreamCmd::ReadHistory { g, c } => {
            let gname = name(b'g', *g);
            let cname = name(b'c', *c);
            let grp = s.group(&gname)?;
            let pending = grp
                .consumer_pending_range(&cname, StreamId::MIN, StreamId::MAX)
                .filter(|p| s.entry(p.id).is_some())
                .map(|p| (p.id, now, p.count + 1))
                .collect();
            StreamOp::Deliver {
                group: gname,
                consumer: Some(cname),
                seen_ms: now,
                pending,
                gone: Vec::new(),
                cursor: None,
                observed: s.observed_vv(),
            }
        }
        StreamCmd::Claim { g, c, k } => {
            let gname = name(b'g', *g);
            let grp = s.group(&gname)?;
            let all: Vec<_> = grp.pending_range(StreamId::MIN, StreamId::MAX).collect();
            let p = *all.get(usize::from(*k) % all.len().max(1))?;
            let (pending, gone) = if s.entry(p.id).is_some() {
                (vec![(p.id, now, p.count + 1)], Vec::new())
            } else {
                (Vec::new(), vec![p.id])
            };
            StreamOp::Deliver {
                group: gname,
                consumer: (!pending.is_empty()).then(|| name(b'c', *c)),
                seen_ms: now,
                pending,
                gone,
                cursor: None,
                observed: s.observed_vv(),
            }
        }
        StreamCmd::AutoClaim { g, c, n } => {
            let gname = name(b'g', *g);
            let grp = s.group(&gname)?;
            let mut pending = Vec::new();
            let mut gone = Vec::new();
            for p in grp
                .pending_range(StreamId::MIN, StreamId::MAX)
                .take(usize::from(*n))
            {
                if s.entry(p.id).is_some() {
                    pending.push((p.id, now, p.count + 1));
                } else {
                    gone.push(p.id);
                }
            }
            if pending.is_empty() && gone.is_empty() {
                return None;
            }
            StreamOp::Deliver {
                group: gname,
                consumer: (!pending.is_empty()).then(|| name(b'c', *c)),
                seen_ms: now,
                pending,
                gone,
                cursor: None,
                observed: s.observed_vv(),
            }
        }
        StreamCmd::Ack { g, k } => {
            let gname = name(b'g', *g);
            let grp = s.group(&gname)?;
            let all: Vec<_> = grp.pending_range(StreamId::MIN, StreamId::MAX).collect();
            let p = *all.get(usize::from(*k) % all.len().max(1))?;
            StreamOp::Ack {
                group: gname,
                ids: vec![p.id],
                observed: s.observed_vv(),
            }
        }
        StreamCmd::CreateConsumer { g, c } => {
            let gname = name(b'g', *g);
            let cname = name(b'c', *c);
            if s.group(&gname)?.consumer(&cname).is_some() {
                return None;
            }
            StreamOp::ConsumerCreate {
                group: gname,
                consumer: cname,
                seen_ms: now,
            }
        }
        StreamCmd::DelConsumer { g, c } => {
            let gname = name(b'g', *g);
            let cname = name(b'c', *c);
            s.group(&gname)?.consumer(&cname)?;
            StreamOp::ConsumerDelete {
                group: gname,
                consumer: cname,
                observed: s.observed_vv(),
            }
        }
        StreamCmd::DelKey => {
            if !exists {
                return None;
            }
            return Some(Issued::DelKey);
        }
    };
    Some(Issued::Op(op))
}

/// What clients see of a stream, as text: entries, counters, groups with their cursors,
/// read counters, consumers and pending entries.
pub fn view(s: Option<&StreamCrdt>) -> String {
    let Some(s) = s else {
        return "none".to_string();
    };
    let mut out = String::new();
    for e in s.range(StreamId::MIN, StreamId::MAX) {
        out.push_str(&format!("{} ", e.id));
        for (f, v) in e.fields() {
            out.push_str(&format!(
                "{}={} ",
                String::from_utf8_lossy(f),
                String::from_utf8_lossy(v)
            ));
        }
    }
    out.push_str(&format!(
        "| len {} last {} added {} maxdel {} first {} |",
        s.len(),
        s.last_id(),
        s.entries_added(),
        s.max_deleted(),
        s.first_id()
    ));
    for g in s.groups() {
        out.push_str(&format!(
            " group {} last {} read {} pending {}:",
            String::from_utf8_lossy(&g.name),
            g.last_id(),
            g.entries_read(),
            g.pending_count()
        ));
        for c in g.consumers() {
            out.push_str(&format!(
                " consumer {} {} {}",
                String::from_utf8_lossy(c.name),
                c.pending,
                c.seen_ms
            ));
        }
        for p in g.pending_range(StreamId::MIN, StreamId::MAX) {
            out.push_str(&format!(
                " pel {} {} {} {}",
                p.id,
                String::from_utf8_lossy(p.consumer),
                p.time_ms,
                p.count
            ));
        }
    }
    out
}

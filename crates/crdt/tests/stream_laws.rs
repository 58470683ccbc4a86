//! Laws of the stream CRDT: replicas issuing random stream writes (XADD with generated and
//! explicit IDs, XDEL, XTRIM, XSETID, consumer groups, XREADGROUP, XCLAIM, XAUTOCLAIM, XACK,
//! DEL) the way the server does, exchanging them in random per-origin-FIFO orders with
//! duplicates, end with identical streams; a single site keeps no metadata; XREADGROUP `>`
//! delivers every entry exactly once to a group even when entries of another site arrive
//! below what the group already delivered; the op codec round-trips and never panics.

#[path = "common/one_key.rs"]
mod one_key;
#[path = "common/stream_model.rs"]
mod stream_model;

use meridian_crdt::codec::Reader;
use meridian_crdt::stream::codec::{decode_op, encode_op};
use meridian_crdt::stream::{CursorUpdate, StreamCrdt, StreamId, StreamOp, Totals};
use meridian_crdt::{Effect, ReplicaId, Stamp};
use one_key::{Mix, Replica, Step, deliver};
use proptest::prelude::*;
use stream_model::{Issued, StreamCmd, issue, stream_cmd, view};

impl Replica {
    fn issue(&mut self, me: usize, cmd: &StreamCmd, peers: bool) {
        let e = match issue(self.key.stream(), cmd, self.id, peers, self.now_ms) {
            None => return,
            Some(Issued::Op(op)) => Effect::Stream(op),
            Some(Issued::DelKey) => self.key.remove_effect(),
        };
        self.write(me, e);
    }
}

fn step() -> impl Strategy<Value = Step<StreamCmd>> {
    one_key::step(stream_cmd(), Mix::PLAIN)
}

fn run(steps: &[Step<StreamCmd>], peers: bool) -> Vec<Replica> {
    one_key::run(steps, |r, me, cmd| r.issue(me, cmd, peers))
}

fn any_id() -> impl Strategy<Value = StreamId> {
    (any::<u64>(), any::<u64>()).prop_map(|(ms, seq)| StreamId::new(ms, seq))
}

fn any_op() -> impl Strategy<Value = StreamOp<Vec<u8>>> {
    let bytes = prop::collection::vec(any::<u8>(), 0..5);
    let stamp = (any::<u64>(), any::<u32>()).prop_map(|(h, r)| Stamp {
        hlc: meridian_crdt::Hlc(h),
        replica: ReplicaId(r),
    });
    let vv = prop::collection::vec(stamp.clone(), 0..3).prop_map(|ss| {
        let mut v = meridian_crdt::VersionVector::new();
        for s in ss {
            v.observe(s);
        }
        v
    });
    prop_oneof![
        (
            any_id(),
            prop::collection::vec(bytes.clone(), 0..2),
            any::<u64>()
        )
            .prop_map(|(id, f, adds)| {
                let mut fields = Vec::new();
                for x in f {
                    fields.push(x.clone());
                    fields.push(x);
                }
                StreamOp::Add {
                    id,
                    fields,
                    totals: Totals {
                        adds,
                        ..Totals::default()
                    },
                }
            }),
        (any_id(), vv.clone()).prop_map(|(upto, observed)| StreamOp::Trim { upto, observed }),
        (prop::collection::vec(any_id(), 0..3), vv.clone(), any_id()).prop_map(
            |(ids, observed, max_del)| StreamOp::Delete {
                ids,
                observed,
                totals: Totals {
                    max_del,
                    ..Totals::default()
                },
            }
        ),
        (bytes.clone(), any_id(), any::<i64>()).prop_map(|(group, floor, entries_read)| {
            StreamOp::GroupEpoch {
                group,
                floor,
                entries_read,
            }
        }),
        (bytes.clone(), vv.clone())
            .prop_map(|(group, observed)| StreamOp::GroupDestroy { group, observed }),
        (
            bytes.clone(),
            prop::option::of(bytes.clone()),
            prop::collection::vec((any_id(), any::<u64>(), any::<u64>()), 0..3),
            prop::collection::vec(any_id(), 0..2),
            prop::option::of((stamp, any_id(), any_id())),
            vv.clone()
        )
            .prop_map(|(group, consumer, pending, gone, cursor, observed)| {
                StreamOp::Deliver {
                    group,
                    consumer,
                    seen_ms: 5,
                    pending,
                    gone,
                    cursor: cursor.map(|(epoch, floor, p)| CursorUpdate {
                        epoch,
                        floor,
                        pos: vec![(ReplicaId(1), p)],
                        entries_read: Some(3),
                    }),
                    observed,
                }
            }),
        (bytes.clone(), prop::collection::vec(any_id(), 0..3), vv).prop_map(
            |(group, ids, observed)| StreamOp::Ack {
                group,
                ids,
                observed
            }
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn replicas_converge(steps in prop::collection::vec(step(), 1..60), peers in any::<bool>()) {
        // What clients see is equal; the states may differ in what each replica knows of
        // removed writes (a replica that dropped a dead value forgot its `seen`).
        let reps = run(&steps, peers);
        let v0 = view(reps[0].key.stream());
        for r in &reps[1..] {
            prop_assert_eq!(&view(r.key.stream()), &v0);
            prop_assert_eq!(r.key.type_tag(), reps[0].key.type_tag());
        }
    }

    #[test]
    fn single_site_keeps_no_metadata(cmds in prop::collection::vec(stream_cmd(), 1..80)) {
        let mut r = Replica::new(0);
        for cmd in &cmds {
            r.issue(0, cmd, false);
            r.key.collect_all();
            prop_assert!(!r.key.has_metadata(), "after {:?}: {:?}", cmd, r.key);
            if let Some(s) = r.key.stream() {
                let ids: Vec<StreamId> = s.range(StreamId::MIN, StreamId::MAX).map(|e| e.id).collect();
                prop_assert_eq!(ids.len() as u64, s.len());
                prop_assert!(ids.windows(2).all(|w| w[0] < w[1]));
                prop_assert!(s.last_id() >= ids.last().copied().unwrap_or_default());
                for g in s.groups() {
                    let n = g.pending_range(StreamId::MIN, StreamId::MAX).count() as u64;
                    prop_assert_eq!(n, g.pending_count());
                    let by_consumer: u64 = g.consumers().iter().map(|c| c.pending).sum();
                    prop_assert_eq!(by_consumer, n);
                }
            }
        }
    }

    #[test]
    fn codec_round_trips(op in any_op()) {
        one_key::round_trips(&op, encode_op, decode_op)?;
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode_op(&mut Reader::new(&bytes));
        let _ = StreamCrdt::decode_state(&mut Reader::new(&bytes));
    }

    #[test]
    fn remote_ops_never_panic(ops in prop::collection::vec((any_op(), any::<u64>()), 0..12)) {
        let mut s = StreamCrdt::new();
        for (i, (op, h)) in ops.iter().enumerate() {
            let st = Stamp { hlc: meridian_crdt::Hlc(*h), replica: ReplicaId(i as u32) };
            s.apply(st, op);
            let n = s.range(StreamId::MIN, StreamId::MAX).count() as u64;
            prop_assert_eq!(n, s.len());
            let _ = view(Some(&s));
        }
    }
}

/// `>` delivers every entry once to a group, even entries of a site whose clock is behind
/// that arrive after the group delivered higher IDs.
#[test]
fn group_reads_never_skip_late_entries_of_another_site() {
    let mut a = Replica::new(0);
    let mut b = Replica::new(1);
    b.now_ms = 500;
    a.issue(
        0,
        &StreamCmd::Create {
            g: 0,
            at_end: false,
        },
        true,
    );
    deliver_pair(&mut a, &mut b);
    let mut delivered: Vec<StreamId> = Vec::new();
    for round in 0..20u8 {
        a.issue(
            0,
            &StreamCmd::Add {
                bump: 1,
                v: round % 4,
            },
            true,
        );
        b.issue(
            1,
            &StreamCmd::Add {
                bump: 0,
                v: round % 4,
            },
            true,
        );
        a.now_ms += 1;
        b.now_ms += 1;
        read_all(&mut a, &mut delivered);
        if round % 3 == 2 {
            deliver_pair(&mut a, &mut b);
        }
    }
    deliver_pair(&mut a, &mut b);
    read_all(&mut a, &mut delivered);
    let s = a.key.stream().unwrap();
    let all: Vec<StreamId> = s
        .range(StreamId::MIN, StreamId::MAX)
        .map(|e| e.id)
        .collect();
    let mut got = delivered.clone();
    got.sort();
    assert_eq!(got, all, "every entry delivered once");
    // B's entries have lower IDs than A's: some were delivered after higher ones.
    assert_ne!(delivered, all);
}

/// Delivers both ways what the other lacks (A is replica 0, B replica 1).
fn deliver_pair(a: &mut Replica, b: &mut Replica) {
    let mut reps = [
        std::mem::replace(a, Replica::new(0)),
        std::mem::replace(b, Replica::new(1)),
        Replica::new(2),
    ];
    deliver(&mut reps, 0, 1, usize::MAX);
    deliver(&mut reps, 1, 0, usize::MAX);
    let [x, y, _] = reps;
    *a = x;
    *b = y;
}

/// XREADGROUP `>` COUNT 2 until nothing is left; records what each call delivered.
fn read_all(r: &mut Replica, out: &mut Vec<StreamId>) {
    for _ in 0..100 {
        let before = r.outbox.len();
        let pending_before: Vec<StreamId> = pending_ids(r);
        r.issue(
            0,
            &StreamCmd::ReadNew {
                g: 0,
                c: 0,
                n: 2,
                noack: false,
            },
            true,
        );
        if r.outbox.len() == before {
            return;
        }
        let now: Vec<StreamId> = pending_ids(r);
        let new: Vec<StreamId> = now
            .into_iter()
            .filter(|id| !pending_before.contains(id))
            .collect();
        if new.is_empty() {
            continue;
        }
        out.extend(new);
    }
}

fn pending_ids(r: &Replica) -> Vec<StreamId> {
    r.key
        .stream()
        .and_then(|s| s.group(b"g0"))
        .map(|g| {
            g.pending_range(StreamId::MIN, StreamId::MAX)
                .map(|p| p.id)
                .collect()
        })
        .unwrap_or_default()
}

/// An acknowledgement and a claim of one entry at two sites: the later action wins at both.
#[test]
fn concurrent_ack_and_claim_converge_by_stamp() {
    let mut reps: Vec<Replica> = (0..2).map(Replica::new).collect();
    reps[0].issue(0, &StreamCmd::Add { bump: 1, v: 0 }, true);
    reps[0].issue(
        0,
        &StreamCmd::Create {
            g: 0,
            at_end: false,
        },
        true,
    );
    reps[0].issue(
        0,
        &StreamCmd::ReadNew {
            g: 0,
            c: 0,
            n: 1,
            noack: false,
        },
        true,
    );
    deliver(&mut reps, 0, 1, usize::MAX);
    reps[1].now_ms += 10;
    reps[0].issue(0, &StreamCmd::Ack { g: 0, k: 0 }, true);
    reps[1].issue(1, &StreamCmd::Claim { g: 0, c: 1, k: 0 }, true);
    deliver(&mut reps, 0, 1, usize::MAX);
    deliver(&mut reps, 1, 0, usize::MAX);
    assert_eq!(view(reps[0].key.stream()), view(reps[1].key.stream()));
    // The claim has the later clock: the entry stays pending, with c1.
    let g = reps[0].key.stream().unwrap().group(b"g0").unwrap();
    assert_eq!(g.pending_count(), 1);
    assert_eq!(
        g.consumers()
            .iter()
            .find(|c| c.name == b"c1")
            .map(|c| c.pending),
        Some(1)
    );
}

/// MAXLEN trims at two sites at once converge to one set: each removes what it had seen.
#[test]
fn concurrent_maxlen_trims_converge() {
    let mut reps: Vec<Replica> = (0..2).map(Replica::new).collect();
    for _ in 0..10 {
        reps[0].issue(0, &StreamCmd::Add { bump: 1, v: 0 }, true);
    }
    deliver(&mut reps, 0, 1, usize::MAX);
    reps[1].issue(1, &StreamCmd::Add { bump: 1, v: 1 }, true);
    reps[0].issue(
        0,
        &StreamCmd::Trim {
            n: 3,
            approx: false,
        },
        true,
    );
    reps[1].issue(
        1,
        &StreamCmd::Trim {
            n: 5,
            approx: false,
        },
        true,
    );
    deliver(&mut reps, 0, 1, usize::MAX);
    deliver(&mut reps, 1, 0, usize::MAX);
    assert_eq!(view(reps[0].key.stream()), view(reps[1].key.stream()));
    let s = reps[0].key.stream().unwrap();
    // Site 0 kept its 3 newest (it had not seen site 1's entry); site 1 kept 5 including its
    // own: together, site 0's 3 newest and site 1's entry.
    assert_eq!(s.len(), 4);
}

/// A queue: a hundred thousand XADD MAXLEN cycles on one site keep a bounded structure.
#[test]
fn capped_stream_stays_compact() {
    let mut r = Replica::new(0);
    for i in 0..100_000u32 {
        r.issue(
            0,
            &StreamCmd::Add {
                bump: (i % 2) as u8,
                v: (i % 4) as u8,
            },
            false,
        );
        if i % 7 == 0 {
            r.issue(
                0,
                &StreamCmd::Trim {
                    n: 200,
                    approx: true,
                },
                false,
            );
        }
        r.key.collect_all();
        assert!(!r.key.has_metadata());
    }
    let s = r.key.stream().unwrap();
    assert!(s.len() <= 300, "len {}", s.len());
    assert!(s.blocks() <= 4, "blocks {}", s.blocks());
    assert!(s.heap_bytes() < 16 * 1024, "bytes {}", s.heap_bytes());
}

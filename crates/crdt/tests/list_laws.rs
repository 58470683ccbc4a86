//! Laws of the list CRDT: replicas issuing random list writes (pushes, inserts, LSET, pops,
//! LREM, LTRIM, DEL) the way the server does, exchanging them in random per-origin-FIFO
//! orders with duplicates, end with identical sequences; a single site behaves as a deque;
//! the op codec round-trips and never panics on garbage; a long push/pop queue stays compact.

#[path = "common/list_model.rs"]
mod list_model;
#[path = "common/one_key.rs"]
mod one_key;

use std::collections::VecDeque;

use list_model::{Issued, ListCmd, list_cmd, trim_counts};
use meridian_crdt::codec::Reader;
use meridian_crdt::list::{ElemId, Pos, decode_op, encode_op};
use meridian_crdt::{Effect, KeyState, ListCrdt, ListOp, ReplicaId, Stamp};
use one_key::{Mix, Replica, Step, deliver};
use proptest::prelude::*;

fn list(k: &KeyState) -> Option<&ListCrdt> {
    k.list()
}

fn values(k: &KeyState) -> Vec<Vec<u8>> {
    list(k).map_or_else(Vec::new, |l| l.iter().map(|e| e.value.to_vec()).collect())
}

/// The effect a server would issue for `cmd` on `k` (None: no write).
fn effect_of(k: &KeyState, cmd: &ListCmd) -> Option<Effect<Vec<u8>>> {
    let empty = ListCrdt::new();
    Some(match list_model::issue(list(k).unwrap_or(&empty), cmd)? {
        Issued::Op(op) => Effect::List(op),
        Issued::DelKey => k.remove_effect(),
    })
}

/// The deque model of `op` (Redis's semantics at one site).
fn model(d: &mut VecDeque<Vec<u8>>, op: &ListCmd) {
    let len = d.len();
    match op {
        ListCmd::LPush(vs) => {
            for v in vs {
                d.push_front(vec![*v]);
            }
        }
        ListCmd::RPush(a, b) => {
            d.push_back(vec![*a]);
            d.push_back(vec![*b]);
        }
        ListCmd::Insert(i, after, v) => {
            if len > 0 {
                let at = i % len + usize::from(*after);
                d.insert(at, vec![*v]);
            }
        }
        ListCmd::Set(i, v) => {
            if len > 0 {
                d[i % len] = vec![*v];
            }
        }
        ListCmd::LPop(n) => {
            for _ in 0..*n {
                d.pop_front();
            }
        }
        ListCmd::RPop(n) => {
            for _ in 0..*n {
                d.pop_back();
            }
        }
        ListCmd::Rem(c, v) => {
            let mut idx: Vec<usize> = (0..len).filter(|&i| d[i] == [*v]).collect();
            if *c < 0 {
                idx.reverse();
            }
            if *c != 0 {
                idx.truncate(c.unsigned_abs() as usize);
            }
            idx.sort_unstable();
            for i in idx.into_iter().rev() {
                d.remove(i);
            }
        }
        ListCmd::Trim(a, b) => {
            let (lt, rt) = trim_counts(i64::from(*a), i64::from(*b), len as i64);
            if lt + rt >= len {
                d.clear();
            } else {
                d.drain(..lt);
                let keep = d.len() - rt;
                d.truncate(keep);
            }
        }
        ListCmd::Del => d.clear(),
    }
}

impl Replica {
    fn issue(&mut self, me: usize, op: &ListCmd) {
        if let Some(e) = effect_of(&self.key, op) {
            self.write(me, e);
        }
    }
}

fn step() -> impl Strategy<Value = Step<ListCmd>> {
    one_key::step(list_cmd(), Mix::PLAIN)
}

fn run(steps: &[Step<ListCmd>]) -> Vec<Replica> {
    one_key::run(steps, |r, me, op| r.issue(me, op))
}

fn any_op() -> impl Strategy<Value = ListOp<Vec<u8>>> {
    let pos = prop::collection::vec(any::<i64>(), 1..4).prop_map(|v| Pos::from_slice(&v));
    let stamp = (any::<u64>(), any::<u32>()).prop_map(|(h, r)| Stamp {
        hlc: meridian_crdt::Hlc(h),
        replica: ReplicaId(r),
    });
    let id = (pos.clone(), stamp.clone()).prop_map(|(pos, stamp)| ElemId { pos, stamp });
    let bytes = prop::collection::vec(any::<u8>(), 0..6);
    prop_oneof![
        (pos, prop::collection::vec(bytes.clone(), 0..4))
            .prop_map(|(pos, values)| ListOp::Insert { pos, values }),
        (
            prop::collection::vec((id.clone(), id.clone()), 0..3),
            prop::collection::vec(stamp, 0..3)
        )
            .prop_map(|(ranges, ss)| {
                let mut observed = meridian_crdt::VersionVector::new();
                for s in ss {
                    observed.observe(s);
                }
                ListOp::Remove { ranges, observed }
            }),
        (id, bytes).prop_map(|(id, value)| ListOp::Replace { id, value }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    #[test]
    fn replicas_converge(steps in prop::collection::vec(step(), 1..60)) {
        let reps = run(&steps);
        let v0 = values(&reps[0].key);
        for r in &reps[1..] {
            prop_assert_eq!(&values(&r.key), &v0);
            let ids = |k: &KeyState| -> Vec<ElemId> {
                list(k).map_or_else(Vec::new, |l| l.iter().map(|e| e.id).collect())
            };
            prop_assert_eq!(ids(&r.key), ids(&reps[0].key));
        }
    }

    #[test]
    fn single_site_is_a_deque(ops in prop::collection::vec(list_cmd(), 1..80)) {
        let mut r = Replica::new(0);
        let mut d: VecDeque<Vec<u8>> = VecDeque::new();
        for op in &ops {
            r.issue(0, op);
            model(&mut d, op);
            r.key.collect_all();
            let want: Vec<Vec<u8>> = d.iter().cloned().collect();
            prop_assert_eq!(values(&r.key), want);
            prop_assert!(!r.key.has_metadata());
        }
    }

    #[test]
    fn codec_round_trips(op in any_op()) {
        one_key::round_trips(&op, encode_op, decode_op)?;
    }

    #[test]
    fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode_op(&mut Reader::new(&bytes));
    }

    #[test]
    fn remote_ops_never_panic(ops in prop::collection::vec((any_op(), any::<u64>()), 0..12)) {
        let mut l = ListCrdt::new();
        for (i, (op, h)) in ops.iter().enumerate() {
            let s = Stamp { hlc: meridian_crdt::Hlc(*h), replica: ReplicaId(i as u32) };
            l.apply(s, op);
            let n = l.iter().count();
            prop_assert_eq!(n, l.len());
        }
    }
}

/// Concurrent LINSERTs after one element: both kept, the same order at both sites.
#[test]
fn concurrent_linserts_same_order() {
    let mut reps: Vec<Replica> = (0..2).map(Replica::new).collect();
    reps[0].issue(0, &ListCmd::LPush(vec![9]));
    deliver(&mut reps, 0, 1, 1);
    reps[0].issue(0, &ListCmd::Insert(0, true, 1));
    reps[1].issue(1, &ListCmd::Insert(0, true, 2));
    deliver(&mut reps, 0, 1, 5);
    deliver(&mut reps, 1, 0, 5);
    assert_eq!(values(&reps[0].key), values(&reps[1].key));
    assert_eq!(values(&reps[0].key).len(), 3);
}

/// LPUSH ∥ DEL: the concurrently pushed element survives.
#[test]
fn del_spares_concurrent_push() {
    let mut reps: Vec<Replica> = (0..2).map(Replica::new).collect();
    reps[0].issue(0, &ListCmd::LPush(vec![0]));
    deliver(&mut reps, 0, 1, 1);
    reps[0].issue(0, &ListCmd::LPush(vec![1]));
    reps[1].issue(1, &ListCmd::Del);
    deliver(&mut reps, 0, 1, 5);
    deliver(&mut reps, 1, 0, 5);
    assert_eq!(values(&reps[0].key), vec![vec![1]]);
    assert_eq!(values(&reps[1].key), vec![vec![1]]);
}

/// A queue: a million RPUSH/LPOP cycles with no peers keep the structure bounded.
#[test]
fn million_push_pop_cycles_stay_compact() {
    let mut l = ListCrdt::new();
    let mut h = 1u64;
    let stamp = |h: u64| Stamp {
        hlc: meridian_crdt::Hlc(h),
        replica: ReplicaId(1),
    };
    for i in 0..100u32 {
        let op = l.push_op(false, vec![i.to_le_bytes().to_vec()]);
        l.apply(stamp(h), &op);
        h += 1;
    }
    let mut max_blocks = 0;
    let mut max_bytes = 0;
    for i in 0..1_000_000u32 {
        let op = l.push_op(false, vec![i.to_le_bytes().to_vec()]);
        l.apply(stamp(h), &op);
        h += 1;
        let op: ListOp<Vec<u8>> = l.remove_range_op(0, 0).expect("non-empty");
        l.apply(stamp(h), &op);
        h += 1;
        l.collect(None);
        let (b, bytes) = l.footprint();
        max_blocks = max_blocks.max(b);
        max_bytes = max_bytes.max(bytes);
        assert_eq!(l.removal_records(), 0);
    }
    assert_eq!(l.len(), 100);
    assert!(max_blocks <= 3, "blocks {max_blocks}");
    assert!(max_bytes <= 3 * 4096, "bytes {max_bytes}");
}

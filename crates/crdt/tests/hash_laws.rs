//! Hash laws: three replicas issue random HSET/HINCRBY/HINCRBYFLOAT/HDEL/DEL and exchange
//! them in random per-origin-FIFO orders with duplicates, and end with identical visible
//! state; a single site equals a plain model; every op survives its codec; truncated or
//! garbage bytes never make the decoder panic.

#[path = "common/hash_model.rs"]
mod hash_model;
#[path = "common/one_key.rs"]
mod one_key;

use std::collections::BTreeMap;

use hash_model::{HashCmd, Issued, field};
use meridian_crdt::codec::Reader;
use meridian_crdt::hash::{decode_op, encode_op};
use meridian_crdt::{
    Dec, Delta, Effect, HashCrdt, HashOp, Hlc, KeyState, ReplicaId, Stamp, StrView, TypeTag,
    VersionVector,
};
use one_key::{Mix, Replica, Step};
use proptest::prelude::*;

fn op() -> impl Strategy<Value = HashCmd> {
    prop_oneof![
        4 => (0u8..5, 0u8..4).prop_map(|(f, v)| HashCmd::HSet(f, v)),
        3 => (0u8..5, any::<i8>()).prop_map(|(f, d)| HashCmd::HIncr(f, d)),
        2 => (0u8..5, any::<i8>()).prop_map(|(f, d)| HashCmd::HIncrFloat(f, d)),
        3 => (0u8..5).prop_map(HashCmd::HDel),
        1 => Just(HashCmd::Del),
    ]
}

fn step() -> impl Strategy<Value = Step<HashCmd>> {
    one_key::step(
        op(),
        Mix {
            tick: 0,
            ..Mix::PLAIN
        },
    )
}

fn float_delta(d: i8) -> Delta {
    Delta::Float(Dec::parse(format!("{}.5", d).as_bytes()).unwrap_or(Dec::ZERO))
}

/// The effect a server would build for `cmd` on `state`.
fn effect(state: &KeyState, cmd: &HashCmd) -> Option<Effect<Vec<u8>>> {
    let empty = HashCrdt::new();
    Some(
        match hash_model::issue(state.hash().unwrap_or(&empty), cmd)? {
            Issued::Op(op) => Effect::Hash(op),
            Issued::DelKey => state.remove_effect(),
        },
    )
}

/// The visible type and the fields with their values, sorted.
type View = (Option<TypeTag>, Vec<(Vec<u8>, Vec<u8>)>);

fn view(state: &KeyState) -> View {
    let mut v: Vec<(Vec<u8>, Vec<u8>)> = state
        .hash()
        .map(|h| h.iter().map(|(f, v)| (f.to_vec(), v.to_bytes())).collect())
        .unwrap_or_default();
    v.sort();
    (state.type_tag(), v)
}

impl Replica {
    fn issue(&mut self, me: usize, op: &HashCmd) {
        if let Some(e) = effect(&self.key, op) {
            self.write(me, e);
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn replicas_converge(steps in proptest::collection::vec(step(), 1..60)) {
        let mut reps = one_key::run(&steps, |r, me, op| r.issue(me, op));
        let v0 = view(&reps[0].key);
        for r in &reps[1..] {
            prop_assert_eq!(&view(&r.key), &v0);
        }
        // Collecting everything keeps what is shown.
        for r in &mut reps {
            r.key.collect_all();
            prop_assert_eq!(&view(&r.key), &v0);
        }
    }

    #[test]
    fn single_site_equals_a_plain_map(ops in proptest::collection::vec(op(), 1..80)) {
        let mut k = KeyState::new();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        let mut t = 0;
        for op in &ops {
            // The server refuses increments of values that are not numbers.
            let cur = match op {
                HashCmd::HIncr(f, _) | HashCmd::HIncrFloat(f, _) => model.get(&field(*f)).cloned(),
                _ => None,
            };
            match op {
                HashCmd::HSet(f, v) => { model.insert(field(*f), format!("{v}").into_bytes()); }
                HashCmd::HIncr(f, d) => {
                    let base = match &cur { None => Some(0), Some(b) => std::str::from_utf8(b).ok().and_then(|s| s.parse::<i64>().ok()) };
                    let Some(base) = base else { continue };
                    model.insert(field(*f), (base + i64::from(*d)).to_string().into_bytes());
                }
                HashCmd::HIncrFloat(f, d) => {
                    let base = match &cur { None => Some(Dec::ZERO), Some(b) => Dec::parse(b) };
                    let Some(base) = base else { continue };
                    let Delta::Float(dd) = float_delta(*d) else { continue };
                    let Some(sum) = base.add(dd) else { continue };
                    model.insert(field(*f), sum.format_redis().into_bytes());
                }
                HashCmd::HDel(f) => { model.remove(&field(*f)); }
                HashCmd::Del => model.clear(),
            }
            if let Some(e) = effect(&k, op) {
                t += 1;
                k.apply(Stamp { hlc: Hlc(t), replica: ReplicaId(1) }, &e);
                if k.has_metadata() {
                    k.collect_all();
                }
            }
            let (tag, got) = view(&k);
            let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(a, b)| (a.clone(), b.clone())).collect();
            prop_assert_eq!(&got, &want);
            prop_assert_eq!(tag.is_some(), !model.is_empty());
            prop_assert!(!k.has_metadata());
        }
    }

    #[test]
    fn ops_round_trip(f in proptest::collection::vec(any::<u8>(), 0..40),
                      v in proptest::collection::vec(any::<u8>(), 0..80),
                      n in any::<i64>(), h in 1u64..u64::MAX, r in any::<u32>(), kind in 0u8..4) {
        let mut vv = VersionVector::new();
        vv.observe(Stamp { hlc: Hlc(h), replica: ReplicaId(r) });
        let op: HashOp<Vec<u8>> = match kind {
            0 => HashOp::Set { field: f.clone(), value: v.clone(), observed: vv },
            1 => HashOp::Incr { field: f.clone(), delta: Delta::Int(n) },
            2 => HashOp::Incr { field: f.clone(), delta: Delta::Float(Dec::from_i64(n)) },
            _ => HashOp::Del { field: f.clone(), observed: vv },
        };
        let out = one_key::round_trips(&op, encode_op, decode_op)?;
        for cut in 0..out.len() {
            prop_assert!(decode_op(&mut Reader::new(&out[..cut])).is_err());
        }
    }

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
        let _ = decode_op(&mut Reader::new(&bytes));
    }
}

#[test]
fn update_wins_over_concurrent_hdel_and_increments_add_up() {
    let st = |h, r| Stamp {
        hlc: Hlc(h),
        replica: ReplicaId(r),
    };
    let mut a = KeyState::new();
    let set = effect(&a, &HashCmd::HSet(1, 1)).unwrap();
    a.apply(st(1, 1), &set);
    let mut b = a.clone();
    let del = effect(&a, &HashCmd::HDel(1)).unwrap();
    let inc = effect(&b, &HashCmd::HIncr(1, 5)).unwrap();
    a.apply(st(2, 1), &del);
    b.apply(st(2, 2), &inc);
    a.apply(st(2, 2), &inc);
    b.apply(st(2, 1), &del);
    assert_eq!(view(&a), view(&b));
    // HDEL removed the observed "1"; the concurrent increment survives on a base of 0.
    assert_eq!(a.hash().and_then(|h| h.get(b"f1")), Some(StrView::Int(5)));
}

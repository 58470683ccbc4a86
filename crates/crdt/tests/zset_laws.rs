//! Laws of the sorted-set CRDT: three replicas issuing random ZADD/ZINCRBY/ZREM/DEL the way the
//! server does, exchanging them in random per-origin-FIFO orders with duplicates, end with
//! identical members and bit-identical scores; a single site (collect after every write, as
//! with no peers) behaves as Redis; the §3.4 table of conflict-semantics; the op codec
//! round-trips and never panics on garbage.

#[path = "common/one_key.rs"]
mod one_key;
#[path = "common/zset_model.rs"]
mod zset_model;

use std::collections::BTreeMap;

use meridian_crdt::codec::Reader;
use meridian_crdt::zset::{F64, decode_op, encode_op};
use meridian_crdt::{Effect, Hlc, KeyState, ReplicaId, Stamp, VersionVector, ZSetCrdt, ZSetOp};
use one_key::{Mix, Replica, Step};
use proptest::prelude::*;
use zset_model::{Issued, ZCmd, member};

fn score_s() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.1),
        Just(0.2),
        Just(1.5),
        Just(-2.25),
        Just(3.0),
        Just(1e17),
        Just(f64::INFINITY),
        (-100i32..100).prop_map(f64::from),
    ]
}

fn op() -> impl Strategy<Value = ZCmd> {
    prop_oneof![
        4 => (0u8..4, score_s()).prop_map(|(m, s)| ZCmd::Add(m, s)),
        4 => (0u8..4, score_s()).prop_map(|(m, s)| ZCmd::Incr(m, s)),
        2 => (0u8..4).prop_map(ZCmd::Rem),
        1 => Just(ZCmd::Del),
    ]
}

/// The effect a server would issue for `cmd` on `k` (None: no write).
fn effect_of(k: &KeyState, cmd: &ZCmd) -> Option<Effect<Vec<u8>>> {
    let empty = ZSetCrdt::new();
    Some(match zset_model::issue(k.zset().unwrap_or(&empty), cmd)? {
        Issued::Op(op) => Effect::ZSet(op),
        Issued::DelKey => k.remove_effect(),
    })
}

/// Members and score bits shown.
fn shown(k: &KeyState) -> Vec<(Vec<u8>, u64)> {
    k.zset().map_or_else(Vec::new, |z| {
        z.iter().map(|(m, s)| (m.to_vec(), s.to_bits())).collect()
    })
}

impl Replica {
    fn issue(&mut self, me: usize, op: &ZCmd) {
        if let Some(e) = effect_of(&self.key, op) {
            self.write(me, e);
        }
    }
}

fn step() -> impl Strategy<Value = Step<ZCmd>> {
    one_key::step(
        op(),
        Mix {
            collect: 1,
            ..Mix::PLAIN
        },
    )
}

fn run(steps: &[Step<ZCmd>]) -> Vec<Replica> {
    one_key::run(steps, |r, me, op| r.issue(me, op))
}

/// Redis's behaviour for a single site.
fn model(m: &mut BTreeMap<Vec<u8>, f64>, op: &ZCmd) {
    match op {
        ZCmd::Add(x, s) => {
            m.insert(member(*x), *s);
        }
        ZCmd::Incr(x, d) => {
            let cur = m.get(&member(*x)).copied().unwrap_or(0.0);
            if !(cur + d).is_nan() {
                m.insert(member(*x), cur + d);
            }
        }
        ZCmd::Rem(x) => {
            m.remove(&member(*x));
        }
        ZCmd::Del => m.clear(),
    }
}

fn any_op() -> impl Strategy<Value = ZSetOp<Vec<u8>>> {
    let vv = prop::collection::vec((any::<u32>(), 1u64..u64::MAX), 0..3).prop_map(|v| {
        let mut vv = VersionVector::new();
        for (r, h) in v {
            vv.observe(Stamp {
                hlc: Hlc(h),
                replica: ReplicaId(r),
            });
        }
        vv
    });
    let m = prop::collection::vec(any::<u8>(), 0..30);
    prop_oneof![
        (
            m.clone(),
            any::<f64>().prop_filter("not NaN", |f| !f.is_nan()),
            vv.clone()
        )
            .prop_map(|(member, s, observed)| ZSetOp::Add {
                member,
                score: F64(s),
                observed
            }),
        (
            m.clone(),
            any::<f64>().prop_filter("not NaN", |f| !f.is_nan())
        )
            .prop_map(|(member, d)| ZSetOp::Incr {
                member,
                delta: F64(d)
            }),
        (m, vv).prop_map(|(member, observed)| ZSetOp::Rem { member, observed }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn replicas_converge(steps in prop::collection::vec(step(), 1..80)) {
        let reps = run(&steps);
        let first = shown(&reps[0].key);
        let collected = steps.iter().any(|s| matches!(s, Step::Collect { .. }));
        for r in &reps[1..] {
            prop_assert_eq!(&shown(&r.key), &first);
            // Collection folds stable increments, so internals may differ; views may not.
            if !collected {
                prop_assert_eq!(r.key.zset(), reps[0].key.zset());
            }
        }
    }

    #[test]
    fn single_site_is_redis(ops in prop::collection::vec(op(), 1..80)) {
        let mut r = Replica::new(0);
        let mut m = BTreeMap::new();
        for op in &ops {
            r.issue(0, op);
            r.key.collect_all();
            model(&mut m, op);
            let mut want: Vec<(Vec<u8>, f64)> = m.iter().map(|(k, v)| (k.clone(), *v)).collect();
            want.sort_by(|a, b| a.1.partial_cmp(&b.1).unwrap().then_with(|| a.0.cmp(&b.0)));
            let want: Vec<(Vec<u8>, u64)> = want.into_iter().map(|(k, v)| (k, v.to_bits())).collect();
            prop_assert_eq!(shown(&r.key), want);
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
    fn remote_ops_never_panic(ops in prop::collection::vec((any_op(), 1u64..1000, 0u32..3), 0..16)) {
        let mut z = ZSetCrdt::new();
        for (op, h, r) in &ops {
            z.apply(Stamp { hlc: Hlc(*h), replica: ReplicaId(*r) }, op);
            let n = z.iter().count();
            prop_assert_eq!(n, z.len());
        }
        z.collect(Some(&VersionVector::new()));
        z.collect(None);
    }
}

// ---------------------------------------------------------------------------------------------
// conflict-semantics §3.4, instance A = replica 1, B = replica 2.
// ---------------------------------------------------------------------------------------------

fn st(h: u64, r: u32) -> Stamp {
    Stamp {
        hlc: Hlc(h),
        replica: ReplicaId(r),
    }
}

fn add(k: &KeyState, m: &str, s: f64) -> Effect<Vec<u8>> {
    Effect::ZSet(ZSetOp::Add {
        member: m.as_bytes().to_vec(),
        score: F64(s),
        observed: k
            .zset()
            .map(|z| z.member_observed(m.as_bytes()))
            .unwrap_or_default(),
    })
}

fn incr(m: &str, d: f64) -> Effect<Vec<u8>> {
    Effect::ZSet(ZSetOp::Incr {
        member: m.as_bytes().to_vec(),
        delta: F64(d),
    })
}

fn score(k: &KeyState, m: &str) -> Option<f64> {
    k.zset().and_then(|z| z.score(m.as_bytes()))
}

/// Applies `a` at A and `b` at B, then each other's.
fn exchange(
    a: &mut KeyState,
    b: &mut KeyState,
    ea: (Stamp, Effect<Vec<u8>>),
    eb: (Stamp, Effect<Vec<u8>>),
) {
    a.apply(ea.0, &ea.1);
    b.apply(eb.0, &eb.1);
    a.apply(eb.0, &eb.1);
    b.apply(ea.0, &ea.1);
}

#[test]
fn table_concurrent_zadd_latest_wins() {
    let (mut a, mut b) = (KeyState::new(), KeyState::new());
    let ea = add(&a, "x", 1.1);
    let eb = add(&b, "x", 2.1);
    exchange(&mut a, &mut b, (st(1, 1), ea), (st(2, 2), eb));
    assert_eq!(score(&a, "x"), Some(2.1));
    assert_eq!(score(&b, "x"), Some(2.1));
}

#[test]
fn table_concurrent_zadd_same_time_goes_to_one_replica() {
    // A has the higher replica id here: the exact tie goes to it on both sites.
    let (mut a, mut b) = (KeyState::new(), KeyState::new());
    let ea = add(&a, "x", 1.1);
    let eb = add(&b, "x", 2.1);
    exchange(&mut a, &mut b, (st(5, 9), ea), (st(5, 2), eb));
    assert_eq!(score(&a, "x"), Some(1.1));
    assert_eq!(score(&b, "x"), Some(1.1));
}

#[test]
fn table_concurrent_zincrby_sum() {
    let (mut a, mut b) = (KeyState::new(), KeyState::new());
    let e = add(&a, "x", 1.1);
    a.apply(st(1, 1), &e);
    b.apply(st(1, 1), &e);
    exchange(
        &mut a,
        &mut b,
        (st(2, 1), incr("x", 1.0)),
        (st(2, 2), incr("x", 1.0)),
    );
    assert_eq!(score(&a, "x"), Some(1.1 + 1.0 + 1.0));
    assert_eq!(
        score(&a, "x").map(f64::to_bits),
        score(&b, "x").map(f64::to_bits)
    );
    assert_eq!(format!("{:.1}", score(&a, "x").unwrap()), "3.1");
}

#[test]
fn table_zrem_concurrent_with_zincrby_keeps_the_increment() {
    let (mut a, mut b) = (KeyState::new(), KeyState::new());
    let e = add(&a, "x", 4.1);
    a.apply(st(1, 1), &e);
    b.apply(st(1, 1), &e);
    // x is the only member: ZREM removes the key, carrying what A observed.
    let rem: Effect<Vec<u8>> = a.remove_effect();
    exchange(&mut a, &mut b, (st(2, 1), rem), (st(2, 2), incr("x", 2.0)));
    assert_eq!(score(&a, "x"), Some(2.0));
    assert_eq!(score(&b, "x"), Some(2.0));
    // With another member, ZREM is a member op: same result.
    let (mut a, mut b) = (KeyState::new(), KeyState::new());
    for (i, (m, s)) in [("x", 4.1), ("y", 1.0)].iter().enumerate() {
        let e = add(&a, m, *s);
        a.apply(st(i as u64 + 1, 1), &e);
        b.apply(st(i as u64 + 1, 1), &e);
    }
    let rem = Effect::ZSet(ZSetOp::Rem {
        member: b"x".to_vec(),
        observed: a.zset().unwrap().member_observed(b"x"),
    });
    exchange(&mut a, &mut b, (st(3, 1), rem), (st(3, 2), incr("x", 2.0)));
    assert_eq!(score(&a, "x"), Some(2.0));
    assert_eq!(score(&b, "x"), Some(2.0));
}

#[test]
fn zadd_after_seeing_increments_resets_them() {
    let mut a = KeyState::new();
    let e = add(&a, "x", 1.0);
    a.apply(st(1, 1), &e);
    a.apply(st(2, 2), &incr("x", 5.0));
    let e = add(&a, "x", 10.0);
    a.apply(st(3, 1), &e);
    assert_eq!(score(&a, "x"), Some(10.0));
    // A late duplicate of the observed increment changes nothing.
    a.apply(st(2, 2), &incr("x", 5.0));
    assert_eq!(score(&a, "x"), Some(10.0));
}

#[test]
fn removal_context_drops_a_late_write_it_observed() {
    // C sees B's ZADD (which observed A's add) before A's add itself.
    let mut a = KeyState::new();
    let ea = add(&a, "x", 1.0);
    a.apply(st(1, 1), &ea);
    let mut b = KeyState::new();
    b.apply(st(1, 1), &ea);
    let eb = add(&b, "x", 2.0);
    b.apply(st(2, 2), &eb);
    let mut c = KeyState::new();
    c.apply(st(2, 2), &eb);
    c.apply(st(1, 1), &ea);
    assert_eq!(score(&c, "x"), Some(2.0));
    assert_eq!(c.zset(), b.zset());
}

fn int_step() -> impl Strategy<Value = Step<ZCmd>> {
    let iop = prop_oneof![
        3 => (0u8..4, -5i8..5).prop_map(|(m, s)| ZCmd::Add(m, f64::from(s))),
        3 => (0u8..4, -5i8..5).prop_map(|(m, d)| ZCmd::Incr(m, f64::from(d))),
        2 => (0u8..4).prop_map(ZCmd::Rem),
        1 => Just(ZCmd::Del),
    ];
    one_key::step(
        iop,
        Mix {
            collect: 2,
            ..Mix::PLAIN
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Integer scores and increments (exact in doubles), with collection at causally stable
    /// points: every replica shows the same sorted set.
    #[test]
    fn replicas_converge_with_collection(steps in prop::collection::vec(int_step(), 1..120)) {
        let reps = run(&steps);
        let first = shown(&reps[0].key);
        for r in &reps[1..] {
            prop_assert_eq!(&shown(&r.key), &first);
        }
    }
}

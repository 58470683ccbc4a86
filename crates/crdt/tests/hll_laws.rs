//! HyperLogLog laws: replicas issuing random PFADD/PFMERGE-style raises, SETs of HyperLogLog
//! values and DELs, exchanging them in random per-origin-FIFO orders with duplicates, end in
//! identical states and identical Redis bytes; a DEL wins over every raise concurrent with it; the op codec round-trips
//! and never panics on garbage.

#[path = "common/one_key.rs"]
mod one_key;

use meridian_crdt::hll::{self, HllOp, REGISTERS, decode_op, encode_op};
use meridian_crdt::{Effect, Hlc, KeyState, ReplicaId, Stamp, VersionVector, codec::Reader};
use one_key::{Mix, REPLICAS, Replica, Step};
use proptest::prelude::*;

type Eff = Effect<Vec<u8>>;

#[derive(Clone, Debug)]
enum Op {
    /// PFADD of these elements.
    Add(Vec<u16>),
    /// PFMERGE raising these registers; `dense`: an input was dense.
    Merge(Vec<(u16, u8)>, bool),
    /// SET of a HyperLogLog value (Remove, then Load).
    Set(Vec<u16>),
    Del,
    /// PFCOUNT of the key: validates the cache when it is invalid.
    Count,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => prop::collection::vec(0u16..400, 0..6).prop_map(Op::Add),
        2 => (prop::collection::vec((0u16..16384, 1u8..64), 0..6), any::<bool>())
            .prop_map(|(r, d)| Op::Merge(r, d)),
        1 => prop::collection::vec(0u16..400, 0..4).prop_map(Op::Set),
        2 => Just(Op::Del),
        2 => Just(Op::Count),
    ]
}

fn step() -> impl Strategy<Value = Step<Op>> {
    one_key::step(
        op(),
        Mix {
            local: 5,
            tick: 0,
            collect: 0,
        },
    )
}

/// Steps that also fold stable writes, at each site when its causally stable vector allows.
fn step_collecting() -> impl Strategy<Value = Step<Op>> {
    one_key::step(
        op(),
        Mix {
            local: 5,
            tick: 0,
            collect: 2,
        },
    )
}

fn elem(e: u16) -> Vec<u8> {
    format!("el{e}").into_bytes()
}

fn add_op(elems: &[u16], seen: VersionVector) -> Eff {
    Effect::Hll(HllOp::Add {
        pairs: hll::pack_pairs(elems.iter().map(|e| hll::pat_len(&elem(*e)))),
        seen,
    })
}

/// What a raise carries as seen, as the server builds it (`raise_context`): the key's
/// stamps and every write delivered at the site, which covers a removal it already folded.
fn raise_seen(r: &Replica) -> VersionVector {
    let mut seen = r.key.observed().stamps;
    seen.merge(&r.delivered_vv);
    seen
}

/// Runs `op` at site `me` as the server issues it.
fn issue(r: &mut Replica, me: usize, op: &Op) {
    let seen = raise_seen(r);
    match op {
        Op::Add(elems) => r.write(me, add_op(elems, seen)),
        Op::Merge(regs, dense) => r.write(
            me,
            Effect::Hll(HllOp::Merge {
                pairs: hll::pack_pairs(regs.iter().copied()),
                dense: *dense,
                seen,
            }),
        ),
        Op::Set(elems) => {
            let mut b = Vec::new();
            hll::apply_raise(&mut b, &add_op(elems, VersionVector::new()).into_hll()).unwrap();
            if !r.key.is_empty() {
                let e = r.key.remove_effect();
                r.write(me, e);
            }
            let seen = raise_seen(r);
            r.write(me, Effect::Hll(HllOp::Load { hyll: b, seen }));
        }
        Op::Del => {
            if !r.key.is_empty() {
                let e = r.key.remove_effect();
                r.write(me, e);
            }
        }
        Op::Count => {
            if r.key.hll().is_some_and(|h| !hll::cache_valid(h.bytes())) {
                r.write(me, Effect::Hll(HllOp::Cache));
            }
        }
    }
}

trait IntoHll {
    fn into_hll(self) -> HllOp<Vec<u8>>;
}

impl IntoHll for Eff {
    fn into_hll(self) -> HllOp<Vec<u8>> {
        match self {
            Effect::Hll(op) => op,
            _ => HllOp::Cache,
        }
    }
}

fn run(steps: &[Step<Op>]) -> Vec<Replica> {
    one_key::run(steps, issue)
}

fn regs(k: &KeyState) -> Option<Box<[u8; REGISTERS]>> {
    k.hll().and_then(|h| h.registers())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1_000))]

    /// Strong eventual consistency: identical states (registers, liveness, metadata) and
    /// identical counts everywhere after every write was delivered.
    #[test]
    fn replicas_converge(steps in prop::collection::vec(step(), 1..50)) {
        let rs = run(&steps);
        for r in &rs[1..] {
            prop_assert_eq!(&r.key, &rs[0].key);
            prop_assert_eq!(regs(&r.key), regs(&rs[0].key));
            prop_assert_eq!(r.key.is_empty(), rs[0].key.is_empty());
            let count = |k: &KeyState| k.hll().map(|h| hll::count(h.bytes()));
            prop_assert_eq!(count(&r.key), count(&rs[0].key));
            // What GET shows, sparse layout and cache flag included.
            let bytes = |k: &KeyState| k.hll().map(|h| h.bytes().to_vec());
            prop_assert_eq!(bytes(&r.key), bytes(&rs[0].key));
        }
    }

    /// Sites that fold their stable writes at different times show the same bytes once every
    /// write was delivered: a fold keeps the bytes before the writes still pending, so a
    /// concurrent write that comes late still goes in stamp order.
    #[test]
    fn folding_sites_show_the_same_bytes(steps in prop::collection::vec(step_collecting(), 1..60)) {
        let rs = run(&steps);
        let bytes = |k: &KeyState| k.hll().map(|h| h.bytes().to_vec());
        for r in &rs[1..] {
            prop_assert_eq!(bytes(&r.key), bytes(&rs[0].key));
            prop_assert_eq!(regs(&r.key), regs(&rs[0].key));
        }
    }

    /// Folding stable raises (`collect_all` once everything was delivered) changes nothing
    /// visible, and leaves no metadata.
    #[test]
    fn collect_keeps_the_value(steps in prop::collection::vec(step(), 1..40)) {
        let mut rs = run(&steps);
        let before = regs(&rs[0].key);
        rs[0].key.collect_all();
        prop_assert_eq!(regs(&rs[0].key), before);
        prop_assert!(!rs[0].key.has_metadata());
    }

    /// The registers are the maximum over the raises that survived, and with no DEL at all
    /// they are the maximum over every raise issued.
    #[test]
    fn without_del_registers_are_the_max(ops in prop::collection::vec((0..REPLICAS, prop::collection::vec(0u16..400, 0..6)), 1..20)) {
        let steps: Vec<Step<Op>> = ops
            .iter()
            .map(|(r, e)| Step::Local { r: *r, cmd: Op::Add(e.clone()) })
            .collect();
        let rs = run(&steps);
        let mut expect = [0u8; REGISTERS];
        let mut any = false;
        for (_, elems) in &ops {
            any = true;
            for e in elems {
                let (i, c) = hll::pat_len(&elem(*e));
                expect[usize::from(i)] = expect[usize::from(i)].max(c);
            }
        }
        prop_assert_eq!(regs(&rs[0].key).map(|b| b.to_vec()), any.then(|| expect.to_vec()));
    }

    /// Encoding then decoding gives the op back.
    #[test]
    fn codec_round_trips(op in op(), hlc in 1u64..1000, rep in 1u32..5) {
        let mut seen = VersionVector::new();
        seen.observe(Stamp { hlc: Hlc(hlc), replica: ReplicaId(rep) });
        let hop = match op {
            Op::Add(e) => add_op(&e, seen).into_hll(),
            Op::Merge(r, d) => HllOp::Merge { pairs: hll::pack_pairs(r), dense: d, seen },
            Op::Set(e) => {
                let mut b = Vec::new();
                hll::apply_raise(&mut b, &add_op(&e, VersionVector::new()).into_hll()).unwrap();
                HllOp::Load { hyll: b, seen }
            }
            Op::Del | Op::Count => HllOp::Cache,
        };
        one_key::round_trips(&hop, encode_op, decode_op)?;
    }

    /// Garbage never panics the decoder; whatever decodes applies without panicking.
    #[test]
    fn garbage_decode_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut r = Reader::new(&bytes);
        if let Ok(op) = decode_op(&mut r) {
            let mut k = KeyState::new();
            k.apply(Stamp { hlc: Hlc(1), replica: ReplicaId(1) }, &Effect::Hll(op));
        }
    }

    /// Random bytes are never taken for a valid HyperLogLog unless they are one, and the
    /// checks never panic.
    #[test]
    fn random_strings_are_checked(mut bytes in prop::collection::vec(any::<u8>(), 0..40), sparse in any::<bool>()) {
        if sparse && bytes.len() >= 16 {
            bytes[..5].copy_from_slice(b"HYLL\x01");
        }
        if hll::is_valid(&bytes) {
            prop_assert!(hll::count(&bytes).is_ok());
        }
        let _ = hll::count(&bytes);
        let _ = hll::registers(&bytes);
    }
}

fn st(h: u64, r: u32) -> Stamp {
    Stamp {
        hlc: Hlc(h),
        replica: ReplicaId(r),
    }
}

/// A: PFADD x, synced; then A: DEL ∥ B: PFADD y. Both orders of arrival: deleted everywhere.
#[test]
fn del_wins_over_concurrent_pfadd() {
    let mut a = KeyState::new();
    let x = add_op(&[1], VersionVector::new());
    a.apply(st(1, 1), &x);
    let mut b = a.clone();
    let del: Eff = a.remove_effect();
    a.apply(st(2, 1), &del);
    let y = add_op(&[2], b.key_seen());
    b.apply(st(2, 2), &y);
    // A gets y after its DEL, B gets the DEL after y.
    a.apply(st(2, 2), &y);
    b.apply(st(2, 1), &del);
    assert!(a.is_empty(), "{a:?}");
    assert!(b.is_empty(), "{b:?}");
    assert_eq!(a, b);
    // A PFADD issued after the DEL was seen survives, wherever it arrives.
    let z = add_op(&[3], a.key_seen());
    a.apply(st(3, 1), &z);
    b.apply(st(3, 1), &z);
    let mut c = KeyState::new();
    c.apply(st(3, 1), &z);
    c.apply(st(1, 1), &x);
    c.apply(st(2, 2), &y);
    c.apply(st(2, 1), &del);
    for k in [&a, &b, &c] {
        let r = regs(k).expect("live");
        let (i, v) = hll::pat_len(&elem(3));
        assert_eq!(r[usize::from(i)], v);
        assert_eq!(r.iter().filter(|v| **v != 0).count(), 1);
    }
    assert_eq!(a, b);
    assert_eq!(b, c);
}

/// A PFMERGE concurrent with a DEL of its destination loses too; a raise that had seen the
/// DEL through another site (transitively) survives.
#[test]
fn del_wins_over_concurrent_pfmerge_and_causal_raise_survives() {
    let mut a = KeyState::new();
    let x = add_op(&[1], VersionVector::new());
    a.apply(st(1, 1), &x);
    let mut b = a.clone();
    let mut c = a.clone();
    let del: Eff = a.remove_effect();
    a.apply(st(2, 1), &del);
    let m: Eff = Effect::Hll(HllOp::Merge {
        pairs: hll::pack_pairs([(7, 3)]),
        dense: true,
        seen: b.key_seen(),
    });
    b.apply(st(2, 2), &m);
    // C sees the DEL, then raises: its raise reaches B before the DEL does.
    c.apply(st(2, 1), &del);
    let z = add_op(&[5], c.key_seen());
    c.apply(st(3, 3), &z);
    b.apply(st(3, 3), &z);
    assert!(!b.is_empty());
    b.apply(st(2, 1), &del);
    a.apply(st(2, 2), &m);
    a.apply(st(3, 3), &z);
    c.apply(st(2, 2), &m);
    for k in [&a, &b, &c] {
        let r = regs(k).expect("the causal raise survives");
        assert_eq!(r[7], 0, "the concurrent PFMERGE lost");
        assert_eq!(r.iter().filter(|v| **v != 0).count(), 1);
    }
    assert_eq!(a, b);
    assert_eq!(b, c);
}

trait Seen {
    fn key_seen(&self) -> VersionVector;
}

impl Seen for KeyState {
    fn key_seen(&self) -> VersionVector {
        self.observed().stamps
    }
}

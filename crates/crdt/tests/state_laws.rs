//! State laws (full sync). Three replicas issue random writes (strings, counters, TTLs, sets,
//! HyperLogLogs, hashes, sorted sets, lists, streams) on two keys and exchange them in random
//! per-origin-FIFO orders, sometimes collecting removal metadata (also as a site does while a
//! peer is quarantined: with a stable vector that leaves that peer out); then, key by key:
//! - `KeyState::merge` of two replicas' states equals the state of a replica that applied the
//!   union of their writes: same view, and the same view again after the writes still in
//!   flight and new writes built on either state are applied to both;
//! - `merge` is a join: commutative, associative, idempotent (compared with `==`);
//! - `decode_state(encode_state(s)) == s`, and re-encoding gives the same bytes;
//! - decoding garbage or damaged encodings never panics.

mod common;
#[path = "common/stream_model.rs"]
mod stream_model;

use std::collections::{BTreeMap, BTreeSet};

use common::{Msg, Net, Replica, Reply};
use meridian_crdt::codec::Reader;
use meridian_crdt::hll;
use meridian_crdt::zset::F64;
use meridian_crdt::{
    Context, Delta, Effect, Expire, HashOp, Hlc, HllOp, KeyState, ListCrdt, Observed, ReplicaId,
    Stamp, TypeTag, Value, VersionVector, ZSetOp,
};
use proptest::prelude::*;

const REPLICAS: usize = 3;
/// Cases per property: the file runs in about ten seconds in a debug build.
const CASES: u32 = 600;

#[derive(Clone, Debug)]
enum Op {
    Set(u8),
    Append(u8),
    SetBit(u8, bool),
    BitIncr(u8, i8),
    Incr(i8),
    IncrFloat(i8),
    Del,
    Expire(u16),
    Persist,
    SAdd(u8),
    SRem(u8),
    /// PFADD of `n` elements from `first` on.
    PfAdd(u8, u8),
    /// PFCOUNT of the key: validates an invalid cache.
    PfCount,
    HSet(u8, u8),
    HIncr(u8, i8),
    HDel(u8),
    ZAdd(u8, i8),
    ZIncr(u8, i8),
    ZRem(u8),
    /// LPUSH (`true`) or RPUSH of one value.
    Push(bool, u8),
    LSet(u8, u8),
    /// LPOP (`true`) or RPOP of one element.
    Pop(bool),
    /// A stream command (XADD, XDEL, XTRIM, XGROUP, XREADGROUP, XACK, XCLAIM...).
    Stream(stream_model::StreamCmd),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..6).prop_map(Op::Set),
        2 => (0u8..3).prop_map(Op::Append),
        2 => (0u8..24, any::<bool>()).prop_map(|(b, on)| Op::SetBit(b, on)),
        1 => (0u8..12, -20i8..20).prop_map(|(o, d)| Op::BitIncr(o, d)),
        3 => any::<i8>().prop_map(Op::Incr),
        1 => any::<i8>().prop_map(Op::IncrFloat),
        2 => Just(Op::Del),
        2 => (1u16..100).prop_map(Op::Expire),
        1 => Just(Op::Persist),
        3 => (0u8..4).prop_map(Op::SAdd),
        2 => (0u8..4).prop_map(Op::SRem),
        2 => (0u8..40, 1u8..4).prop_map(|(f, n)| Op::PfAdd(f, n)),
        1 => Just(Op::PfCount),
        2 => (0u8..3, 0u8..4).prop_map(|(f, v)| Op::HSet(f, v)),
        1 => (0u8..3, any::<i8>()).prop_map(|(f, d)| Op::HIncr(f, d)),
        1 => (0u8..3).prop_map(Op::HDel),
        2 => (0u8..3, any::<i8>()).prop_map(|(m, s)| Op::ZAdd(m, s)),
        1 => (0u8..3, any::<i8>()).prop_map(|(m, d)| Op::ZIncr(m, d)),
        1 => (0u8..3).prop_map(Op::ZRem),
        2 => (any::<bool>(), 0u8..4).prop_map(|(l, v)| Op::Push(l, v)),
        1 => (0u8..4, 0u8..4).prop_map(|(i, v)| Op::LSet(i, v)),
        1 => any::<bool>().prop_map(Op::Pop),
        6 => stream_model::stream_cmd().prop_map(Op::Stream),
    ]
}

#[derive(Clone, Debug)]
enum Step {
    Local {
        r: usize,
        key: u8,
        op: Op,
    },
    Deliver {
        from: usize,
        to: usize,
        n: usize,
    },
    Tick {
        r: usize,
        ms: u64,
    },
    /// Deliver everything, then collect at the replicas marked, with every write stable.
    SyncCollect {
        which: [bool; REPLICAS],
    },
    /// Collect at `r` with the causally stable vector of the moment (no sync).
    CollectStable {
        r: usize,
    },
    /// Collect at `r` as a site does while it quarantines `q` (`KeyState::collect_with`):
    /// with the causally stable vector of the replicas other than `q`, and, for what no
    /// context stands in for, the one of every replica (`q` as of what it has delivered).
    CollectQuarantined {
        r: usize,
        q: usize,
    },
}

/// Steps; `partial` adds collects with a causally stable vector taken mid-flight.
fn steps(partial: bool, max: usize) -> impl Strategy<Value = Vec<Step>> {
    let step = prop_oneof![
        6 => (0..REPLICAS, 0u8..2, op()).prop_map(|(r, key, op)| Step::Local { r, key, op }),
        3 => (0..REPLICAS, 0..REPLICAS, 1usize..4)
            .prop_map(|(from, to, n)| Step::Deliver { from, to, n }),
        1 => (0..REPLICAS, 0u64..3).prop_map(|(r, ms)| Step::Tick { r, ms }),
        1 => any::<[bool; REPLICAS]>().prop_map(|which| Step::SyncCollect { which }),
        if partial { 2 } else { 0 } => (0..REPLICAS).prop_map(|r| Step::CollectStable { r }),
        if partial { 2 } else { 0 } => (0..REPLICAS, 1..REPLICAS)
            .prop_map(|(r, d)| Step::CollectQuarantined { r, q: (r + d) % REPLICAS }),
    ];
    prop::collection::vec(step, 1..max)
}

fn key_name(k: u8) -> Vec<u8> {
    vec![b'k', b'0' + k]
}

/// Runs `op` at `r`. `delivered`: the writes `r` has applied, which a raise's context
/// includes (as a server may: with per-origin FIFO delivery it has seen all of them), so that
/// it dominates removal contexts another replica has collected.
fn run_op(r: &mut Replica, key: &[u8], op: &Op, delivered: &VersionVector) -> Reply {
    match op {
        Op::Set(v) => r.set(key, format!("{}", i32::from(*v) * 7 - 10).as_bytes()),
        Op::Append(v) => r.append(key, [b"x".as_slice(), b"1", b".5"][usize::from(*v)]),
        Op::SetBit(b, on) => r.setbit(key, u64::from(*b), *on),
        Op::BitIncr(o, d) => r.bitincr(key, u64::from(*o), i64::from(*d), true),
        Op::Incr(d) => r.incrby(key, i64::from(*d)),
        Op::IncrFloat(d) => r.incrbyfloat(key, &format!("{}", f64::from(*d) / 10.0)),
        Op::Del => r.del(key),
        Op::Expire(t) => r.expire_at(key, 10_000 + u64::from(*t)),
        Op::Persist => r.persist(key),
        Op::SAdd(m) => r.sadd(key, &[b'a' + m]),
        Op::SRem(m) => r.srem(key, &[b'a' + m]),
        Op::PfAdd(first, n) => write(r, key, TypeTag::Hll, |k| {
            let pairs = hll::pack_pairs((0..*n).map(|i| {
                hll::pat_len(format!("e{}", u16::from(*first) + u16::from(i)).as_bytes())
            }));
            let mut seen = k.observed().stamps;
            seen.merge(delivered);
            Some(Effect::Hll(HllOp::Add { pairs, seen }))
        }),
        Op::PfCount => write(r, key, TypeTag::Hll, |k| {
            k.hll()
                .is_some_and(|h| !hll::cache_valid(h.bytes()))
                .then_some(Effect::Hll(HllOp::Cache))
        }),
        Op::HSet(f, v) => write(r, key, TypeTag::Hash, |k| {
            let field = vec![b'f', *f];
            let observed = k
                .hash()
                .map(|h| h.field_observed(&field))
                .unwrap_or_default();
            Some(Effect::Hash(HashOp::Set {
                field,
                value: vec![b'0' + v],
                observed,
            }))
        }),
        Op::HIncr(f, d) => write(r, key, TypeTag::Hash, |_| {
            Some(Effect::Hash(HashOp::Incr {
                field: vec![b'f', *f],
                delta: Delta::Int(i64::from(*d)),
            }))
        }),
        Op::HDel(f) => write(r, key, TypeTag::Hash, |k| {
            let h = k.hash()?;
            let field = vec![b'f', *f];
            if !h.contains(&field) {
                return None;
            }
            Some(if h.len() == 1 {
                k.remove_effect()
            } else {
                Effect::Hash(HashOp::Del {
                    observed: h.field_observed(&field),
                    field,
                })
            })
        }),
        Op::ZAdd(m, sc) => write(r, key, TypeTag::ZSet, |k| {
            let member = vec![b'm', *m];
            let observed = k
                .zset()
                .map(|z| z.member_observed(&member))
                .unwrap_or_default();
            Some(Effect::ZSet(ZSetOp::Add {
                member,
                score: F64(f64::from(*sc) / 4.0),
                observed,
            }))
        }),
        Op::ZIncr(m, d) => write(r, key, TypeTag::ZSet, |_| {
            Some(Effect::ZSet(ZSetOp::Incr {
                member: vec![b'm', *m],
                delta: F64(f64::from(*d) / 2.0),
            }))
        }),
        Op::ZRem(m) => write(r, key, TypeTag::ZSet, |k| {
            let z = k.zset()?;
            let member = vec![b'm', *m];
            z.score(&member)?;
            Some(if z.len() == 1 {
                k.remove_effect()
            } else {
                Effect::ZSet(ZSetOp::Rem {
                    observed: z.member_observed(&member),
                    member,
                })
            })
        }),
        Op::Push(left, v) => write(r, key, TypeTag::List, |k| {
            let empty = ListCrdt::new();
            let l = k.list().unwrap_or(&empty);
            Some(Effect::List(l.push_op(*left, vec![vec![b'0' + v]])))
        }),
        Op::LSet(i, v) => write(r, key, TypeTag::List, |k| {
            let l = k.list()?;
            let i = usize::from(*i) % l.len().max(1);
            Some(Effect::List(l.replace_op(i, vec![b'0' + v])?))
        }),
        Op::Pop(left) => write(r, key, TypeTag::List, |k| {
            let l = k.list()?;
            let len = l.len();
            if len <= 1 {
                return Some(k.remove_effect());
            }
            let i = if *left { 0 } else { len - 1 };
            Some(Effect::List(l.remove_range_op(i, i)?))
        }),
        Op::Stream(cmd) => {
            let (id, now) = (r.id, r.now_ms);
            write(r, key, TypeTag::Stream, |k| {
                match stream_model::issue(k.stream(), cmd, id, true, now)? {
                    stream_model::Issued::Op(op) => Some(Effect::Stream(op)),
                    stream_model::Issued::DelKey => Some(k.remove_effect()),
                }
            })
        }
    }
}

/// A write of type `tag` at `key`, built by `make` on the key's state (`None`: no write), as
/// a server does: WRONGTYPE on a key of another type; an empty key holding expire writes is
/// removed first.
fn write(
    r: &mut Replica,
    key: &[u8],
    tag: TypeTag,
    make: impl FnOnce(&KeyState) -> Option<Effect<Vec<u8>>>,
) -> Reply {
    let state = |r: &Replica| r.keys.get(key).cloned().unwrap_or_default();
    if state(r).type_tag().is_some_and(|t| t != tag) {
        return Reply::WrongType;
    }
    if state(r).has_orphan_expire() {
        let e = state(r).remove_effect();
        r.issue(key, e);
    }
    match make(&state(r)) {
        Some(e) => {
            r.issue(key, e);
            Reply::Ok
        }
        None => Reply::Nil,
    }
}

/// Replicas, channels, and for each message the counts its issuer had delivered from every
/// origin when it issued it (to find causally stable vectors).
struct World {
    rs: Vec<Replica>,
    net: Net,
    deps: Vec<Vec<Vec<usize>>>,
}

impl World {
    fn new() -> World {
        World {
            rs: (0..REPLICAS).map(|i| Replica::new(i as u32 + 1)).collect(),
            net: Net::new(REPLICAS),
            deps: vec![Vec::new(); REPLICAS],
        }
    }

    /// Replica `at`'s causal context: the writes it has applied (every one it does not hold
    /// was removed there).
    fn context(&self, at: usize) -> Context {
        let counts: Vec<usize> = (0..REPLICAS).map(|j| self.delivered(at, j)).collect();
        Context::from(self.vv_of(&counts))
    }

    /// How many writes of `origin` replica `at` has applied.
    fn delivered(&self, at: usize, origin: usize) -> usize {
        if at == origin {
            self.rs[at].outbox.len()
        } else {
            self.net.cursor[origin][at]
        }
    }

    /// The vector of the first `counts[j]` writes of each origin `j`.
    fn vv_of(&self, counts: &[usize]) -> VersionVector {
        let mut vv = VersionVector::new();
        for (j, &c) in counts.iter().enumerate() {
            if c > 0 {
                vv.observe(self.rs[j].outbox[c - 1].stamp);
            }
        }
        vv
    }

    /// The largest causally stable vector: every write it covers is delivered everywhere,
    /// and every write not yet delivered everywhere was issued after its issuer had
    /// delivered all it covers.
    fn stable(&self) -> VersionVector {
        self.stable_without(None)
    }

    /// `stable` over the replicas other than `left_out` (a site's stable vector while it
    /// quarantines that peer: `Shard::stable_vv`).
    fn stable_without(&self, left_out: Option<usize>) -> VersionVector {
        let counted: Vec<usize> = (0..REPLICAS).filter(|&i| Some(i) != left_out).collect();
        let mut s: Vec<usize> = (0..REPLICAS)
            .map(|j| {
                counted
                    .iter()
                    .map(|&i| self.delivered(i, j))
                    .min()
                    .unwrap_or(0)
            })
            .collect();
        for &origin in &counted {
            let everywhere = counted
                .iter()
                .map(|&i| self.delivered(i, origin))
                .min()
                .unwrap_or(0);
            for dep in &self.deps[origin][everywhere..] {
                for j in 0..REPLICAS {
                    if j != origin {
                        s[j] = s[j].min(dep[j]);
                    }
                }
            }
        }
        self.vv_of(&s)
    }

    fn run(&mut self, steps: &[Step]) {
        for s in steps {
            match s {
                Step::Local { r, key, op } => {
                    let before = self.rs[*r].outbox.len();
                    let counts: Vec<usize> = (0..REPLICAS).map(|j| self.delivered(*r, j)).collect();
                    let delivered = self.vv_of(&counts);
                    run_op(&mut self.rs[*r], &key_name(*key), op, &delivered);
                    for _ in before..self.rs[*r].outbox.len() {
                        let dep = (0..REPLICAS).map(|j| self.delivered(*r, j)).collect();
                        self.deps[*r].push(dep);
                    }
                }
                Step::Deliver { from, to, n } => self.net.deliver(&mut self.rs, *from, *to, *n),
                Step::Tick { r, ms } => self.rs[*r].now_ms += ms,
                Step::SyncCollect { which } => {
                    self.net.sync_all(&mut self.rs);
                    let all = self.vv_of(
                        &(0..REPLICAS)
                            .map(|j| self.delivered(j, j))
                            .collect::<Vec<_>>(),
                    );
                    for (i, yes) in which.iter().enumerate() {
                        if *yes {
                            collect_keys(&mut self.rs[i].keys, &all);
                        }
                    }
                }
                Step::CollectStable { r } => {
                    let s = self.stable();
                    collect_keys(&mut self.rs[*r].keys, &s);
                }
                Step::CollectQuarantined { r, q } => {
                    let (s, all) = (self.stable_without(Some(*q)), self.stable());
                    let keys = &mut self.rs[*r].keys;
                    for k in keys.values_mut() {
                        k.collect_with(&s, &all);
                    }
                    keys.retain(|_, k| !k.is_empty() || k.has_metadata());
                }
            }
        }
    }
}

fn collect_keys(keys: &mut BTreeMap<Vec<u8>, KeyState>, stable: &VersionVector) {
    for k in keys.values_mut() {
        k.collect(stable);
    }
    // As the server does: an empty key without metadata leaves the keyspace.
    keys.retain(|_, k| !k.is_empty() || k.has_metadata());
}

type Keys = BTreeMap<Vec<u8>, KeyState>;

/// Every key of `a` and `b`, merged (a key absent on one side is an empty state there), with
/// `merge_with_contexts` when the sides' causal contexts are given.
fn merge_keys(a: &Keys, b: &Keys, contexts: Option<(&Context, &Context)>) -> Keys {
    let names: BTreeSet<&Vec<u8>> = a.keys().chain(b.keys()).collect();
    names
        .into_iter()
        .map(|n| {
            let mut k = a.get(n).cloned().unwrap_or_default();
            let other = b.get(n).cloned().unwrap_or_default();
            match contexts {
                Some((ca, cb)) => k.merge_with_contexts(&other, ca, cb),
                None => k.merge(&other),
            };
            (n.clone(), k)
        })
        .collect()
}

/// Checks that `merged`, the merge of replicas `a` and `b`, equals a replica that applied the
/// union of their writes (see `merge_equals_applying_the_union`).
fn check_union(
    w: &World,
    a: usize,
    b: usize,
    mut merged: Keys,
    picks: &[usize],
    later: &[(bool, u8, Op)],
) -> Result<(), TestCaseError> {
    let union: Vec<usize> = (0..REPLICAS)
        .map(|j| w.delivered(a, j).max(w.delivered(b, j)))
        .collect();
    let mut reference = Keys::new();
    replay(&mut reference, w, &[0; REPLICAS], &union, picks);
    prop_assert_eq!(digest(&merged), digest(&reference));

    // The writes neither side had applied yet.
    let all: Vec<usize> = (0..REPLICAS).map(|j| w.delivered(j, j)).collect();
    replay(&mut merged, w, &union, &all, picks);
    replay(&mut reference, w, &union, &all, &[]);
    prop_assert_eq!(digest(&merged), digest(&reference));

    // New writes, each built on one of the two states and applied to both.
    let mut m = replica_with(7, merged, w);
    let mut x = replica_with(8, reference, w);
    let mut delivered = w.vv_of(&all);
    for (on_merged, key, op) in later {
        let (issuer, other) = if *on_merged {
            (&mut m, &mut x)
        } else {
            (&mut x, &mut m)
        };
        let before = issuer.outbox.len();
        run_op(issuer, &key_name(*key), op, &delivered);
        for msg in &issuer.outbox[before..] {
            other.receive(msg);
            delivered.observe(msg.stamp);
        }
        prop_assert_eq!(digest(&m.keys), digest(&x.keys), "after {:?}", op);
    }
    Ok(())
}

/// What clients see at a key: type, value, TTL.
fn view(k: &KeyState) -> String {
    let v = match k.value() {
        None => "none".to_string(),
        Some(Value::Str(_)) => format!("str {:?}", k.view_str().map(|v| v.to_bytes())),
        Some(Value::Set(s)) => {
            let mut m: Vec<&[u8]> = s.members().collect();
            m.sort();
            format!("set {m:?}")
        }
        Some(Value::Hll(h)) => {
            let regs: Option<Vec<(usize, u8)>> = h.registers().map(|r| {
                r.iter()
                    .enumerate()
                    .filter(|(_, v)| **v != 0)
                    .map(|(i, v)| (i, *v))
                    .collect()
            });
            // GET shows the bytes: sparse layout and cache flag included.
            format!("hll {regs:?} {:?}", h.bytes())
        }
        Some(Value::Hash(h)) => {
            let mut f: Vec<(Vec<u8>, Vec<u8>)> =
                h.iter().map(|(f, v)| (f.to_vec(), v.to_bytes())).collect();
            f.sort();
            format!("hash {f:?}")
        }
        Some(Value::ZSet(z)) => {
            let m: Vec<(&[u8], u64)> = z.iter().map(|(m, s)| (m, s.to_bits())).collect();
            format!("zset {m:?}")
        }
        Some(Value::List(l)) => {
            let v: Vec<&[u8]> = l.iter().map(|e| e.value).collect();
            format!("list {v:?}")
        }
        Some(Value::Stream(x)) => format!("stream {}", stream_model::view(Some(x))),
    };
    format!("{:?} {v} ttl={:?}", k.type_tag(), k.expire_at_ms())
}

fn digest(keys: &Keys) -> Vec<(Vec<u8>, String)> {
    keys.iter()
        .filter(|(_, k)| !k.is_empty())
        .map(|(n, k)| (n.clone(), view(k)))
        .collect()
}

fn apply_msg(keys: &mut Keys, m: &Msg) {
    keys.entry(m.key.clone())
        .or_default()
        .apply(m.stamp, &m.effect);
}

/// Applies the writes `from[j]..to[j]` of each origin, interleaved as `picks` says, in an
/// order a replica could see: each origin's in issue order, and each write after the writes
/// its issuer had applied (within `to`). Collects assume it: a write issued after a collect
/// reaches replicas that had the writes collected as stable.
fn replay(keys: &mut Keys, w: &World, from: &[usize], to: &[usize], picks: &[usize]) {
    let mut cur = from.to_vec();
    let ready = |cur: &[usize], o: usize| {
        cur[o] < to[o] && (0..REPLICAS).all(|j| j == o || cur[j] >= w.deps[o][cur[o]][j].min(to[j]))
    };
    let step = |cur: &mut Vec<usize>, o: usize, keys: &mut Keys| {
        apply_msg(keys, &w.rs[o].outbox[cur[o]]);
        cur[o] += 1;
    };
    for &p in picks {
        let o = p % REPLICAS;
        if ready(&cur, o) {
            step(&mut cur, o, keys);
        }
    }
    while let Some(o) = (0..REPLICAS).find(|&o| ready(&cur, o)) {
        step(&mut cur, o, keys);
    }
    assert_eq!(cur, to, "a causal order exists");
}

/// A replica holding `keys`, able to issue writes with fresh stamps after every write in `w`.
fn replica_with(id: u32, keys: Keys, w: &World) -> Replica {
    let mut r = Replica::new(id);
    r.keys = keys;
    r.now_ms = w.rs.iter().map(|r| r.now_ms).max().unwrap_or(0);
    for o in &w.rs {
        if let Some(m) = o.outbox.last() {
            let _ = r.clock.observe(m.stamp.hlc, r.now_ms, u64::MAX / 2);
        }
    }
    r
}

fn join_plain(a: &KeyState, b: &KeyState) -> KeyState {
    let mut z = a.clone();
    z.merge(b);
    z
}

fn round_trip(k: &KeyState) -> Result<(), TestCaseError> {
    let mut out = Vec::new();
    k.encode_state(&mut out);
    let mut r = Reader::new(&out);
    let back = KeyState::decode_state(&mut r);
    prop_assert!(back.is_ok(), "{:?} for {:?}", back, k);
    let back = back.unwrap_or_default();
    prop_assert!(r.is_at_end());
    prop_assert_eq!(&back, k);
    let mut again = Vec::new();
    back.encode_state(&mut again);
    prop_assert_eq!(again, out);
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// The merge of two replicas' states is the state of a replica that applied the union of
    /// their writes: same view now, and after the writes still in flight and new writes built
    /// on either state are applied to both. Collects here follow a full sync (see
    /// `merge_after_partial_collect_can_keep_a_removed_write` for why).
    #[test]
    fn merge_equals_applying_the_union(
        steps in steps(false, 50),
        pair in (0..REPLICAS, 1..REPLICAS),
        picks in prop::collection::vec(any::<usize>(), 0..80),
        later in prop::collection::vec((any::<bool>(), 0u8..2, op()), 0..8),
    ) {
        let mut w = World::new();
        w.run(&steps);
        let (a, b) = (pair.0, (pair.0 + pair.1) % REPLICAS);
        let merged = merge_keys(&w.rs[a].keys, &w.rs[b].keys, None);
        check_union(&w, a, b, merged, &picks, &later)?;
    }

    /// The same with collects at any time (with causally stable vectors) and
    /// `merge_with_contexts`, each side's context being what its replica has delivered (as
    /// the server's full sync does): the writes one side removed and collected, the other
    /// still holds, go; the writes one side never saw stay.
    #[test]
    fn merge_with_contexts_equals_applying_the_union(
        steps in steps(true, 50),
        pair in (0..REPLICAS, 1..REPLICAS),
        picks in prop::collection::vec(any::<usize>(), 0..80),
        later in prop::collection::vec((any::<bool>(), 0u8..2, op()), 0..8),
    ) {
        let mut w = World::new();
        w.run(&steps);
        let (a, b) = (pair.0, (pair.0 + pair.1) % REPLICAS);
        let (ca, cb) = (w.context(a), w.context(b));
        let merged = merge_keys(&w.rs[a].keys, &w.rs[b].keys, Some((&ca, &cb)));
        check_union(&w, a, b, merged, &picks, &later)?;
    }

    /// `merge` is a join of the states replicas reach, whatever they collected (with causally
    /// stable vectors): commutative, associative, idempotent, compared with `==`; so is
    /// `merge_with_contexts` with the replicas' contexts (the context of a join being the
    /// join of its sides'); every state and every merge result survives its encoding.
    #[test]
    fn merge_is_a_join_and_states_round_trip(steps in steps(true, 60)) {
        let mut w = World::new();
        w.run(&steps);
        let names: BTreeSet<Vec<u8>> = w.rs.iter().flat_map(|r| r.keys.keys().cloned()).collect();
        let ctx = [0, 1, 2].map(|i| w.context(i));
        let both = |x: &Context, y: &Context| {
            let mut z = x.seen.clone();
            z.merge(&y.seen);
            Context::from(z)
        };
        for n in &names {
            let [a, b, c] = [0, 1, 2].map(|i| w.rs[i].keys.get(n).cloned().unwrap_or_default());
            for with_contexts in [false, true] {
                let none = Context::default();
                let cx = |i: usize| if with_contexts { ctx[i].clone() } else { none.clone() };
                let join = |x: &KeyState, y: &KeyState, cx: &Context, cy: &Context| {
                    let mut z = x.clone();
                    if with_contexts {
                        z.merge_with_contexts(y, cx, cy);
                    } else {
                        z.merge(y);
                    }
                    z
                };
                let (ca, cb, cc) = (cx(0), cx(1), cx(2));
                let (cab, cbc) = (both(&ca, &cb), both(&cb, &cc));
                let ab = join(&a, &b, &ca, &cb);
                prop_assert_eq!(&ab, &join(&b, &a, &cb, &ca));
                prop_assert_eq!(view(&ab), view(&join(&b, &a, &cb, &ca)));
                let bc = join(&b, &c, &cb, &cc);
                prop_assert_eq!(join(&ab, &c, &cab, &cc), join(&a, &bc, &ca, &cbc));
                prop_assert_eq!(&join(&ab, &ab, &cab, &cab), &ab);
                prop_assert_eq!(&join(&ab, &a, &cab, &ca), &ab);
                prop_assert_eq!(&join(&ab, &b, &cab, &cb), &ab);
                for k in [&ab, &join(&ab, &c, &cab, &cc)] {
                    round_trip(k)?;
                }
            }
            prop_assert!(join_plain(&a, &b).merge(&b).ignored);
            for k in [&a, &b, &c] {
                round_trip(k)?;
            }
        }
    }

    /// Damaged encodings (cut, one byte changed) and random bytes never make the decoder
    /// panic; whatever decodes merges and re-encodes without panicking.
    #[test]
    fn decoding_damaged_states_never_panics(
        steps in steps(true, 30),
        cut in any::<prop::sample::Index>(),
        at in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        garbage in prop::collection::vec(any::<u8>(), 0..96),
    ) {
        let mut w = World::new();
        w.run(&steps);
        let mut inputs: Vec<Vec<u8>> = Vec::new();
        for k in w.rs.iter().flat_map(|r| r.keys.values()) {
            let mut out = Vec::new();
            k.encode_state(&mut out);
            inputs.push(out[..cut.index(out.len() + 1)].to_vec());
            let mut changed = out.clone();
            changed[at.index(out.len())] = byte;
            inputs.push(changed);
        }
        let mut g = garbage.clone();
        inputs.push(g.clone());
        if let Some(first) = g.first_mut() {
            *first = meridian_crdt::key::KEY_STATE_V2;
        }
        inputs.push(g);
        for bytes in &inputs {
            if let Ok(k) = KeyState::decode_state(&mut Reader::new(bytes)) {
                let mut m = k.clone();
                for other in w.rs.iter().flat_map(|r| r.keys.values()) {
                    m.merge(other);
                }
                let mut out = Vec::new();
                m.encode_state(&mut out);
                let _ = KeyState::decode_state(&mut Reader::new(&out));
            }
        }
    }
}

fn st(h: u64, r: u32) -> Stamp {
    Stamp {
        hlc: Hlc(h),
        replica: ReplicaId(r),
    }
}

type E = Effect<Vec<u8>>;

fn set(v: &[u8], observed: Observed) -> E {
    E::Assign {
        value: v.to_vec(),
        observed,
        keep_ttl: false,
    }
}

/// A SET ∥ SADD type conflict and a DEL ∥ EXPIRE orphan merge to what applying both gives.
#[test]
fn type_conflict_and_expire_merge_like_apply() {
    let mut a = KeyState::new();
    a.apply(st(1, 1), &set(b"v", Observed::new()));
    let mut b = KeyState::new();
    b.apply(
        st(2, 2),
        &E::SetAdd {
            member: b"m".to_vec(),
        },
    );
    let e: E = b.expire_effect(Expire::AtMs(50));
    b.apply(st(3, 2), &e);
    let mut both = a.clone();
    both.apply(
        st(2, 2),
        &E::SetAdd {
            member: b"m".to_vec(),
        },
    );
    both.apply(st(3, 2), &e);
    let mut ab = a.clone();
    let r = ab.merge(&b);
    assert!(r.type_conflict && !r.ignored);
    assert_eq!(ab, both);
    assert_eq!(view(&ab), "Some(Set) set [[109]] ttl=Some(50)");
    assert_eq!(ab.hidden().count(), 1);
    // A DEL at A that saw only the string: the set stays, the string goes.
    let del: E = a.remove_effect();
    a.apply(st(4, 1), &del);
    both.apply(st(4, 1), &del);
    let mut ab = a.clone();
    ab.merge(&b);
    assert_eq!(ab, both);
    assert_eq!(ab.hidden().count(), 0);
    let mut ba = b.clone();
    ba.merge(&a);
    assert_eq!(ba, ab);
}

/// A DEL's context names the DEL itself, so `collect` keeps it until the DEL is stable: a
/// write the DEL removed stays removed in a merge with a side that never received the DEL,
/// even when that write was stable.
#[test]
fn merge_after_collect_keeps_a_del() {
    let w1 = set(b"v", Observed::new());
    let mut a = KeyState::new();
    a.apply(st(1, 2), &w1);
    let mut b = a.clone();
    let del: E = a.remove_effect();
    a.apply(st(2, 1), &del);
    let mut stable = VersionVector::new();
    stable.observe(st(1, 2));
    a.collect(&stable);
    assert!(a.is_empty() && a.has_metadata());
    b.merge(&a);
    assert!(b.is_empty());
    let mut c = KeyState::new();
    c.apply(st(1, 2), &w1);
    c.apply(st(2, 1), &del);
    assert_eq!(b, c);
}

/// A context stays until the write that carried it is stable, not only what it covers. B's
/// SET reaches A and B (it is stable); A overwrites it with a SET whose context is B's write
/// alone; B never receives A's SET. `collect` with B's write stable keeps A's context (A's SET
/// is not stable), so the plain merge into B removes B's write, and a later DEL issued at A
/// empties both. Before contexts waited for their writes, B kept its write hidden under A's
/// and the DEL showed it again. Once A's SET is stable too, the context goes.
#[test]
fn collect_keeps_a_context_until_its_write_is_stable() {
    let w1 = set(b"v", Observed::new());
    let mut a = KeyState::new();
    a.apply(st(1, 2), &w1);
    let b = a.clone();
    let s: E = a.assign_effect(b"s".to_vec(), false);
    a.apply(st(2, 1), &s);
    let mut stable = VersionVector::new();
    stable.observe(st(1, 2));
    a.collect(&stable);
    assert!(a.has_metadata(), "A's SET is not stable: its context stays");
    assert!(a.observed().stamps.covers(st(2, 1)));
    let mut ab = b.clone();
    ab.merge(&a);
    let mut ab_contexts = b.clone();
    let floor = Context::from(stable.clone());
    ab_contexts.merge_with_contexts(&a, &floor, &floor);
    assert_eq!(ab, a);
    assert_eq!(ab_contexts, a);
    let del: E = a.remove_effect();
    a.apply(st(3, 1), &del);
    ab.apply(st(3, 1), &del);
    assert!(a.is_empty() && ab.is_empty());
    // Had B received A's SET, the DEL would have removed everything as well.
    let mut c = b.clone();
    c.apply(st(2, 1), &s);
    c.apply(st(3, 1), &del);
    assert!(c.is_empty());
    // Stable up to A's SET: the SET's context goes.
    let mut d = b.clone();
    d.apply(st(2, 1), &s);
    stable.observe(st(2, 1));
    d.collect(&stable);
    assert!(!d.has_metadata());
}

/// An SREM names itself in the member's context, so a delta full sync (which sends a key
/// only when its state names a write the receiver lacks) finds the key, and the context
/// stays whole until the SREM is stable: the merge into a replica that never received the
/// SREM removes the member there. The same for an HDEL.
#[test]
fn srem_and_hdel_stay_visible_to_a_full_sync_until_stable() {
    let mut a = KeyState::new();
    a.apply(
        st(1, 2),
        &E::SetAdd {
            member: b"m".to_vec(),
        },
    );
    let mut h = KeyState::new();
    h.apply(
        st(1, 2),
        &E::Hash(HashOp::Set {
            field: b"f".to_vec(),
            value: b"1".to_vec(),
            observed: VersionVector::new(),
        }),
    );
    let (b, hb) = (a.clone(), h.clone());
    let rem: E = a.set_rem_effect(b"m".to_vec());
    a.apply(st(2, 1), &rem);
    let hdel = E::Hash(HashOp::Del {
        field: b"f".to_vec(),
        observed: h.observed().stamps,
    });
    h.apply(st(2, 1), &hdel);
    // B has delivered the adds, not the removals: both keys must be sent.
    let mut b_delivered = VersionVector::new();
    b_delivered.observe(st(1, 2));
    assert!(!b_delivered.dominates(&a.observed().stamps));
    assert!(!b_delivered.dominates(&h.observed().stamps));
    // The adds are stable, the removals not: nothing a merge needs is collected.
    a.collect(&b_delivered);
    h.collect(&b_delivered);
    let mut ba = b.clone();
    ba.merge(&a);
    assert!(ba.is_empty(), "the SREM reached B by the merge: {ba:?}");
    let mut hba = hb.clone();
    hba.merge(&h);
    assert!(hba.is_empty(), "the HDEL reached B by the merge: {hba:?}");
    // Once the removals are stable too, their metadata goes.
    let mut all = b_delivered.clone();
    all.observe(st(2, 1));
    a.collect(&all);
    h.collect(&all);
    assert!(!a.has_metadata() && !h.has_metadata(), "{a:?} {h:?}");
}

/// A write that arrives after a key removal that had seen it still removes what it removed.
/// B wrote f; C overwrote it (its context names B's write); A received C's HSET, deleted the
/// field and then the key, having collected C's context meanwhile (B's write was stable), so
/// A's DEL names C's write and not B's. B receives A's HDEL and DEL before C's HSET: the
/// HSET's own write is covered by the DEL, but its context must still remove B's write.
#[test]
fn a_covered_write_still_removes_what_it_observed() {
    let hset = |v: &str, observed: VersionVector| {
        E::Hash(HashOp::Set {
            field: b"f".to_vec(),
            value: v.as_bytes().to_vec(),
            observed,
        })
    };
    let mut b = KeyState::new();
    b.apply(st(1, 2), &hset("from-b", VersionVector::new()));
    let mut c = b.clone();
    let c_set = hset("from-c", c.observed().stamps);
    c.apply(st(2, 3), &c_set);
    let mut a = c.clone();
    let mut stable = VersionVector::new();
    stable.observe(st(1, 2));
    a.collect(&stable);
    let a_del_field = E::Hash(HashOp::Del {
        field: b"f".to_vec(),
        observed: {
            let mut o = VersionVector::new();
            o.observe(st(2, 3));
            o
        },
    });
    a.apply(st(3, 1), &a_del_field);
    let a_del: E = a.remove_effect();
    a.apply(st(4, 1), &a_del);
    assert!(a.is_empty());
    b.apply(st(3, 1), &a_del_field);
    b.apply(st(4, 1), &a_del);
    assert!(!b.is_empty(), "B's write is not named by A's removals");
    let applied = b.apply(st(2, 3), &c_set);
    assert!(applied.ignored, "C's write itself was deleted");
    assert!(b.is_empty(), "C's HSET removed B's write: {b:?}");
}

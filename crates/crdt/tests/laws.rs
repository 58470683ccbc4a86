//! Convergence laws: replicas that issue random writes with causal contexts and exchange them
//! in random per-origin-FIFO orders, with duplicates, end with identical visible state.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::{Msg, Net, Replica, Reply, digest_view};
use meridian_crdt::{
    Counter, Dec, Delta, Hlc, IncTotals, KeyState, ReplicaId, Stamp, VersionVector,
};
use proptest::prelude::*;

const REPLICAS: usize = 3;
const CASES: u32 = 2_000;

#[derive(Clone, Debug)]
enum Op {
    Set(u8),
    Append(u8),
    SetRange(u8, u8),
    SetBit(u8, bool),
    BitIncr(u8, i8, bool),
    Incr(i8),
    IncrFloat(i8),
    Del,
    Expire(u16),
    Persist,
    SAdd(u8),
    SRem(u8),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0u8..6).prop_map(Op::Set),
        2 => (0u8..3).prop_map(Op::Append),
        1 => (0u8..4, 0u8..3).prop_map(|(o, v)| Op::SetRange(o, v)),
        2 => (0u8..24, any::<bool>()).prop_map(|(b, on)| Op::SetBit(b, on)),
        2 => (0u8..12, -20i8..20, any::<bool>()).prop_map(|(o, d, sat)| Op::BitIncr(o, d, sat)),
        3 => any::<i8>().prop_map(Op::Incr),
        2 => any::<i8>().prop_map(Op::IncrFloat),
        2 => Just(Op::Del),
        2 => (1u16..100).prop_map(Op::Expire),
        1 => Just(Op::Persist),
        3 => (0u8..4).prop_map(Op::SAdd),
        2 => (0u8..4).prop_map(Op::SRem),
    ]
}

#[derive(Clone, Debug)]
enum Step {
    Local { r: usize, key: u8, op: Op },
    Deliver { from: usize, to: usize, n: usize },
    Dup { from: usize, to: usize, pick: usize },
    Tick { r: usize, ms: u64 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (0..REPLICAS, 0u8..2, op()).prop_map(|(r, key, op)| Step::Local { r, key, op }),
        3 => (0..REPLICAS, 0..REPLICAS, 1usize..4).prop_map(|(from, to, n)| Step::Deliver { from, to, n }),
        1 => (0..REPLICAS, 0..REPLICAS, any::<usize>()).prop_map(|(from, to, pick)| Step::Dup { from, to, pick }),
        1 => (0..REPLICAS, 0u64..3).prop_map(|(r, ms)| Step::Tick { r, ms }),
    ]
}

fn key_name(k: u8) -> Vec<u8> {
    vec![b'k', b'0' + k]
}

fn run_op(r: &mut Replica, key: &[u8], op: &Op) -> Reply {
    match op {
        Op::Set(v) => r.set(key, format!("{}", i32::from(*v) * 7 - 10).as_bytes()),
        Op::Append(v) => r.append(key, [b"x".as_slice(), b"1", b".5"][usize::from(*v)]),
        Op::SetRange(o, v) => r.setrange(
            key,
            u64::from(*o),
            [b"y".as_slice(), b"2", b"34"][usize::from(*v)],
        ),
        Op::SetBit(b, on) => r.setbit(key, u64::from(*b), *on),
        Op::BitIncr(o, d, sat) => r.bitincr(key, u64::from(*o), i64::from(*d), *sat),
        Op::Incr(d) => r.incrby(key, i64::from(*d)),
        Op::IncrFloat(d) => r.incrbyfloat(key, &format!("{}", f64::from(*d) / 10.0)),
        Op::Del => r.del(key),
        Op::Expire(t) => r.expire_at(key, 10_000 + u64::from(*t)),
        Op::Persist => r.persist(key),
        Op::SAdd(m) => r.sadd(key, &[b'a' + m]),
        Op::SRem(m) => r.srem(key, &[b'a' + m]),
    }
}

fn run(steps: &[Step]) -> (Vec<Replica>, Net) {
    let mut rs: Vec<Replica> = (0..REPLICAS).map(|i| Replica::new(i as u32 + 1)).collect();
    let mut net = Net::new(REPLICAS);
    run_more(&mut rs, &mut net, steps);
    (rs, net)
}

fn run_more(rs: &mut [Replica], net: &mut Net, steps: &[Step]) {
    for s in steps {
        match s {
            Step::Local { r, key, op } => {
                run_op(&mut rs[*r], &key_name(*key), op);
            }
            Step::Deliver { from, to, n } => net.deliver(rs, *from, *to, *n),
            Step::Dup { from, to, pick } => net.duplicate(rs, *from, *to, *pick),
            Step::Tick { r, ms } => rs[*r].now_ms += ms,
        }
    }
}

/// Applies `logs` (one per origin) to a fresh state in the interleaving chosen by `picks`.
fn replay(logs: &[Vec<Msg>], picks: &[usize]) -> BTreeMap<Vec<u8>, KeyState> {
    let mut keys: BTreeMap<Vec<u8>, KeyState> = BTreeMap::new();
    let mut cur = vec![0usize; logs.len()];
    let apply = |m: &Msg, keys: &mut BTreeMap<Vec<u8>, KeyState>| {
        keys.entry(m.key.clone())
            .or_default()
            .apply(m.stamp, &m.effect);
    };
    for &p in picks {
        let o = p % logs.len();
        if let Some(m) = logs[o].get(cur[o]) {
            apply(m, &mut keys);
            cur[o] += 1;
        }
    }
    for (o, log) in logs.iter().enumerate() {
        for m in &log[cur[o]..] {
            apply(m, &mut keys);
        }
    }
    keys
}

fn digest(keys: &BTreeMap<Vec<u8>, KeyState>) -> Vec<(Vec<u8>, String)> {
    keys.iter()
        .filter(|(_, k)| !k.is_empty())
        .map(|(n, k)| (n.clone(), digest_view(k)))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// Strong eventual consistency: after every message is delivered, all replicas show the
    /// same thing, whatever the interleaving and duplicates.
    #[test]
    fn replicas_converge(steps in prop::collection::vec(step(), 1..60)) {
        let (mut rs, mut net) = run(&steps);
        net.sync_all(&mut rs);
        let d0 = rs[0].digest();
        for r in &rs[1..] {
            prop_assert_eq!(&r.digest(), &d0);
        }
    }

    /// The same writes applied in two different per-origin-FIFO interleavings, by a replica
    /// that issued none of them, give the state the issuing replicas converged to.
    #[test]
    fn merge_order_does_not_matter(
        steps in prop::collection::vec(step(), 1..60),
        picks_a in prop::collection::vec(any::<usize>(), 0..120),
        picks_b in prop::collection::vec(any::<usize>(), 0..120),
    ) {
        let (mut rs, mut net) = run(&steps);
        net.sync_all(&mut rs);
        let logs: Vec<Vec<Msg>> = rs.iter().map(|r| r.outbox.clone()).collect();
        let a = replay(&logs, &picks_a);
        let b = replay(&logs, &picks_b);
        prop_assert_eq!(digest(&a), digest(&b));
        prop_assert_eq!(digest(&a), rs[0].digest());
    }

    /// Redelivering every write changes nothing, visible or observed.
    #[test]
    fn redelivery_is_idempotent(steps in prop::collection::vec(step(), 1..60)) {
        let (mut rs, mut net) = run(&steps);
        net.sync_all(&mut rs);
        let logs: Vec<Vec<Msg>> = rs.iter().map(|r| r.outbox.clone()).collect();
        for r in rs.iter_mut() {
            let before: Vec<_> = r.keys.iter().map(|(n, k)| (n.clone(), digest_view(k), k.observed())).collect();
            for log in &logs {
                for m in log {
                    r.receive(m);
                }
            }
            let after: Vec<_> = r.keys.iter().map(|(n, k)| (n.clone(), digest_view(k), k.observed())).collect();
            prop_assert_eq!(before, after);
        }
    }

    /// Collecting removal metadata covered by a stable vector, at some replicas and not at
    /// others, does not break convergence of later writes.
    #[test]
    fn collect_stable_keeps_convergence(
        first in prop::collection::vec(step(), 1..40),
        which in prop::collection::vec(any::<bool>(), REPLICAS),
        second in prop::collection::vec(step(), 1..40),
    ) {
        let (mut rs, mut net) = run(&first);
        net.sync_all(&mut rs);
        let mut stable = VersionVector::new();
        for r in &rs {
            for m in &r.outbox {
                stable.observe(m.stamp);
            }
        }
        for (r, yes) in rs.iter_mut().zip(&which) {
            if *yes {
                for k in r.keys.values_mut() {
                    k.collect(&stable);
                }
            }
        }
        // Redelivery of a collected (stable) write is filtered by the server's per-origin
        // sequence numbers before it reaches `apply`, so the second phase has no duplicates.
        let second: Vec<Step> = second.into_iter().filter(|s| !matches!(s, Step::Dup { .. })).collect();
        run_more(&mut rs, &mut net, &second);
        net.sync_all(&mut rs);
        let d0 = rs[0].digest();
        for r in &rs[1..] {
            prop_assert_eq!(&r.digest(), &d0);
        }
    }

    /// A single replica behaves like Redis (a plain model of strings, sets and TTLs).
    #[test]
    fn single_site_matches_redis(ops in prop::collection::vec((0u8..2, op()), 1..80)) {
        let mut r = Replica::new(1);
        let mut model: BTreeMap<Vec<u8>, (Model, Option<u64>)> = BTreeMap::new();
        for (k, o) in &ops {
            let key = key_name(*k);
            let got = run_op(&mut r, &key, o);
            let want = model_op(&mut model, &key, o);
            prop_assert_eq!(&got, &want, "{:?}", o);
            let shown = match model.get(&key) {
                None => (Reply::Nil, vec![], None),
                Some((Model::Str(v), t)) => (Reply::Bulk(v.clone()), vec![], *t),
                Some((Model::Set(s), t)) => (Reply::WrongType, s.iter().cloned().collect(), *t),
            };
            prop_assert_eq!((r.get(&key), r.smembers(&key), r.ttl_at(&key)), shown);
        }
        prop_assert_eq!(r.type_conflicts, 0);
    }

    #[test]
    fn version_vector_merge_is_a_join(
        a in prop::collection::vec((0u32..4, 1u64..20), 0..6),
        b in prop::collection::vec((0u32..4, 1u64..20), 0..6),
        c in prop::collection::vec((0u32..4, 1u64..20), 0..6),
    ) {
        let vv = |v: &Vec<(u32, u64)>| {
            let mut x = VersionVector::new();
            for &(r, h) in v {
                x.observe(Stamp { hlc: Hlc(h), replica: ReplicaId(r) });
            }
            x
        };
        let (a, b, c) = (vv(&a), vv(&b), vv(&c));
        let join = |x: &VersionVector, y: &VersionVector| {
            let mut z = x.clone();
            z.merge(y);
            z
        };
        prop_assert_eq!(join(&a, &b), join(&b, &a));
        prop_assert_eq!(join(&join(&a, &b), &c), join(&a, &join(&b, &c)));
        prop_assert_eq!(join(&a, &a), a.clone());
        prop_assert!(join(&a, &b).dominates(&a));
    }

    /// Totals of one origin's increments merge by the larger count: a join over prefixes.
    #[test]
    fn counter_totals_merge_is_a_join(
        deltas in prop::collection::vec(any::<i32>(), 1..20),
        i in any::<usize>(), j in any::<usize>(), k in any::<usize>(),
    ) {
        let mut c = Counter::new();
        let mut prefixes = vec![IncTotals::default()];
        for (n, d) in deltas.iter().enumerate() {
            let d = Delta::Int(i64::from(*d));
            let at = c.next_at(ReplicaId(1), &d);
            c.apply_inc(Stamp { hlc: Hlc(n as u64 + 1), replica: ReplicaId(1) }, &d, &at);
            prefixes.push(c.totals().next().map(|t| *t.1).unwrap_or_default());
        }
        let p = |x: usize| prefixes[x % prefixes.len()];
        let (a, b, cc) = (p(i), p(j), p(k));
        prop_assert_eq!(IncTotals::merge(a, b), IncTotals::merge(b, a));
        prop_assert_eq!(IncTotals::merge(IncTotals::merge(a, b), cc), IncTotals::merge(a, IncTotals::merge(b, cc)));
        prop_assert_eq!(IncTotals::merge(a, a), a);
        // Resetting to any prefix leaves exactly the increments after it.
        let mut r = c.clone();
        r.reset(&[(ReplicaId(1), a)]);
        let total: i128 = deltas.iter().map(|d| i128::from(*d)).sum();
        prop_assert_eq!(r.unobserved().0, total - a.int);
    }
}

#[derive(Clone, Debug)]
enum Model {
    Str(Vec<u8>),
    Set(BTreeSet<Vec<u8>>),
}

fn model_op(m: &mut BTreeMap<Vec<u8>, (Model, Option<u64>)>, key: &[u8], op: &Op) -> Reply {
    let cur = m.get(key).cloned();
    let is_set = matches!(cur, Some((Model::Set(_), _)));
    let ttl = cur.as_ref().and_then(|c| c.1);
    let cur_str = match &cur {
        Some((Model::Str(v), _)) => Some(v.clone()),
        _ => None,
    };
    match op {
        Op::Set(v) => {
            m.insert(
                key.to_vec(),
                (
                    Model::Str(format!("{}", i32::from(*v) * 7 - 10).into_bytes()),
                    None,
                ),
            );
            Reply::Ok
        }
        Op::Append(v) => {
            if is_set {
                return Reply::WrongType;
            }
            let mut s = cur_str.unwrap_or_default();
            s.extend_from_slice([b"x".as_slice(), b"1", b".5"][usize::from(*v)]);
            let n = s.len() as i64;
            m.insert(key.to_vec(), (Model::Str(s), ttl));
            Reply::Int(n)
        }
        Op::SetRange(o, v) => {
            if is_set {
                return Reply::WrongType;
            }
            let mut s = cur_str.unwrap_or_default();
            let b = [b"y".as_slice(), b"2", b"34"][usize::from(*v)];
            let off = usize::from(*o);
            if s.len() < off + b.len() {
                s.resize(off + b.len(), 0);
            }
            s[off..off + b.len()].copy_from_slice(b);
            let n = s.len() as i64;
            m.insert(key.to_vec(), (Model::Str(s), ttl));
            Reply::Int(n)
        }
        Op::SetBit(bit, on) => {
            if is_set {
                return Reply::WrongType;
            }
            let mut s = cur_str.unwrap_or_default();
            let byte = usize::from(*bit / 8);
            if s.len() <= byte {
                s.resize(byte + 1, 0);
            }
            let mask = 0x80u8 >> (bit % 8);
            let old = s[byte] & mask != 0;
            if *on {
                s[byte] |= mask;
            } else {
                s[byte] &= !mask;
            }
            m.insert(key.to_vec(), (Model::Str(s), ttl));
            Reply::Int(i64::from(old))
        }
        Op::BitIncr(o, d, sat) => {
            if is_set {
                return Reply::WrongType;
            }
            let mut s = cur_str.unwrap_or_default();
            let off = usize::from(*o);
            if s.len() * 8 < off + 5 {
                s.resize((off + 5).div_ceil(8), 0);
            }
            // A plain model of a signed 5-bit field: read, add, saturate or fail.
            let mut raw = 0i64;
            for i in off..off + 5 {
                raw = (raw << 1) | i64::from(s[i / 8] >> (7 - i % 8) & 1);
            }
            let old = if raw >= 16 { raw - 32 } else { raw };
            let sum = old + i64::from(*d);
            let new = match (sum.clamp(-16, 15) == sum, *sat) {
                (true, _) => Some(sum),
                (false, true) => Some(sum.clamp(-16, 15)),
                (false, false) => None,
            };
            if let Some(n) = new {
                let bits = n & 31;
                for (j, i) in (off..off + 5).enumerate() {
                    let bit = (bits >> (4 - j)) & 1;
                    let mask = 0x80u8 >> (i % 8);
                    if bit == 1 {
                        s[i / 8] |= mask;
                    } else {
                        s[i / 8] &= !mask;
                    }
                }
            }
            m.insert(key.to_vec(), (Model::Str(s), ttl));
            new.map_or(Reply::Nil, Reply::Int)
        }
        Op::Incr(d) => {
            if is_set {
                return Reply::WrongType;
            }
            let base = match &cur_str {
                None => 0,
                Some(b) => match meridian_crdt::string::parse_i64_redis(b) {
                    Some(v) => v,
                    None => return Reply::NotANumber,
                },
            };
            let Some(n) = base.checked_add(i64::from(*d)) else {
                return Reply::NotANumber;
            };
            m.insert(key.to_vec(), (Model::Str(n.to_string().into_bytes()), ttl));
            Reply::Int(n)
        }
        Op::IncrFloat(d) => {
            if is_set {
                return Reply::WrongType;
            }
            let base = match &cur_str {
                None => Dec::ZERO,
                Some(b) => match Dec::parse(b) {
                    Some(v) => v,
                    None => return Reply::NotANumber,
                },
            };
            let by = Dec::parse(format!("{}", f64::from(*d) / 10.0).as_bytes()).unwrap();
            let s = base.add(by).unwrap().format_redis();
            m.insert(key.to_vec(), (Model::Str(s.clone().into_bytes()), ttl));
            Reply::Bulk(s.into_bytes())
        }
        Op::Del => Reply::Int(i64::from(m.remove(key).is_some())),
        Op::Expire(t) => match m.get_mut(key) {
            Some(e) => {
                e.1 = Some(10_000 + u64::from(*t));
                Reply::Int(1)
            }
            None => Reply::Int(0),
        },
        Op::Persist => match m.get_mut(key) {
            Some(e) if e.1.is_some() => {
                e.1 = None;
                Reply::Int(1)
            }
            _ => Reply::Int(0),
        },
        Op::SAdd(x) => {
            if cur_str.is_some() {
                return Reply::WrongType;
            }
            let e = m
                .entry(key.to_vec())
                .or_insert((Model::Set(BTreeSet::new()), None));
            let Model::Set(s) = &mut e.0 else {
                return Reply::WrongType;
            };
            Reply::Int(i64::from(s.insert(vec![b'a' + x])))
        }
        Op::SRem(x) => {
            if cur_str.is_some() {
                return Reply::WrongType;
            }
            let Some((Model::Set(s), _)) = m.get_mut(key) else {
                return Reply::Int(0);
            };
            let removed = s.remove(&vec![b'a' + x]);
            if s.is_empty() {
                m.remove(key);
            }
            Reply::Int(i64::from(removed))
        }
    }
}

/// A write of one site, for the fold-on-apply law: bit offsets up to 600 and values up to
/// 70 bytes, so strings cross `EDIT_HELD_BYTES` (where folding stops being immediate).
#[derive(Clone, Debug)]
enum FoldOp {
    Set(u8),
    SetBit(u16, bool),
    BitIncr(u16, i8, bool),
    SetRange(u8, u8),
    Append(u8),
    Incr(i8),
    Del,
    Expire(u16),
    Persist,
}

fn fold_op() -> impl Strategy<Value = FoldOp> {
    prop_oneof![
        2 => (0u8..70).prop_map(FoldOp::Set),
        4 => (0u16..600, any::<bool>()).prop_map(|(b, on)| FoldOp::SetBit(b, on)),
        4 => (0u16..600, -20i8..20, any::<bool>()).prop_map(|(o, d, s)| FoldOp::BitIncr(o, d, s)),
        2 => (0u8..80, 1u8..4).prop_map(|(o, n)| FoldOp::SetRange(o, n)),
        1 => (1u8..8).prop_map(FoldOp::Append),
        1 => any::<i8>().prop_map(FoldOp::Incr),
        1 => Just(FoldOp::Del),
        1 => (1u16..100).prop_map(FoldOp::Expire),
        1 => Just(FoldOp::Persist),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    /// A replica with no peers collects every write at once (the server's `settle`);
    /// `KeyState::apply_folded`, where it applies, leaves exactly the state `apply` then
    /// `collect_all` leaves, with the same `Applied`.
    #[test]
    fn folding_on_apply_is_apply_then_collect(ops in prop::collection::vec(fold_op(), 1..60)) {
        let mut r = Replica::new(1);
        let key = b"k".as_slice();
        for op in &ops {
            r.now_ms += 1;
            match op {
                FoldOp::Set(n) => r.set(key, &vec![b'a'; usize::from(*n)]),
                FoldOp::SetBit(b, on) => r.setbit(key, u64::from(*b), *on),
                FoldOp::BitIncr(o, d, sat) => r.bitincr(key, u64::from(*o), i64::from(*d), *sat),
                FoldOp::SetRange(o, n) => r.setrange(key, u64::from(*o), &vec![b'z'; usize::from(*n)]),
                FoldOp::Append(n) => r.append(key, &vec![b'y'; usize::from(*n)]),
                FoldOp::Incr(d) => r.incrby(key, i64::from(*d)),
                FoldOp::Del => r.del(key),
                FoldOp::Expire(t) => r.expire_at(key, 10_000 + u64::from(*t)),
                FoldOp::Persist => r.persist(key),
            };
        }
        let mut plain = KeyState::new();
        let mut folded = KeyState::new();
        for m in &r.outbox {
            let a = plain.apply(m.stamp, &m.effect);
            if plain.has_metadata() {
                plain.collect_all();
            }
            let b = match folded.apply_folded(m.stamp, &m.effect) {
                Some(b) => b,
                None => folded.apply(m.stamp, &m.effect),
            };
            if folded.has_metadata() {
                folded.collect_all();
            }
            prop_assert_eq!(a, b);
            prop_assert_eq!(&plain, &folded);
        }
    }
}

/// Where `apply_folded` applies: an edit of a short plain string; not over 64 bytes, nor on a
/// key with a TTL (its extra part), nor for other effects.
#[test]
fn folding_on_apply_takes_short_plain_strings_only() {
    let mut r = Replica::new(1);
    r.set(b"short", b"abc");
    r.setbit(b"short", 3, true);
    r.set(b"long", &[b'x'; 65]);
    r.setbit(b"long", 3, true);
    r.set(b"ttl", b"abc");
    r.expire_at(b"ttl", 50_000);
    r.setbit(b"ttl", 3, true);
    let mut keys: BTreeMap<Vec<u8>, KeyState> = BTreeMap::new();
    let mut took = Vec::new();
    for m in &r.outbox {
        let k = keys.entry(m.key.clone()).or_default();
        match k.apply_folded(m.stamp, &m.effect) {
            Some(_) => took.push(m.key.clone()),
            None => {
                k.apply(m.stamp, &m.effect);
            }
        }
        if k.has_metadata() {
            k.collect_all();
        }
    }
    assert_eq!(took, vec![b"short".to_vec()]);
    assert_eq!(
        keys.get(b"short".as_slice())
            .and_then(|k| k.view_str())
            .map(|v| v.to_bytes()),
        Some(b"qbc".to_vec())
    );
}

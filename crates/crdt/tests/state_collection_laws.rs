//! State-based laws of the collection types (hash, sorted set, list, stream) (full sync):
//! `merge` is the join of the op-based semantics, and the state codec round-trips and never
//! panics.
//!
//! Three replicas issue random writes of one type the way the server does and exchange them
//! over per-origin FIFO channels, with duplicates, and now and then a replica collects its
//! removal metadata with a causally stable vector. Then, for replicas `a` and `b`:
//! - `Sa ⊔ Sb` shows what a replica that applied `Oa ∪ Ob` shows, and keeps doing so while
//!   both receive the ops neither had and issue further writes;
//! - the join is commutative, associative and idempotent;
//! - `decode_state(encode_state(s))` equals `s` and re-encodes to the same bytes;
//! - `decode_state` of random or mutated bytes returns (an error or a state) without panicking.
//!
//! Key-level removals (DEL) are modelled by `Site`, a small stand-in for `KeyState`: it keeps
//! the key's removal context, filters writes it covers, and after a join applies the joined
//! context to the joined value with `remove_observed`.

use std::fmt::Debug;

use hash_model::HashCmd;
use list_model::{ListCmd, list_cmd};
use meridian_crdt::codec::{DecodeError, Reader};
use meridian_crdt::list::{ElemId, Pos};
use meridian_crdt::op::Observed;
use meridian_crdt::zset::F64;
use meridian_crdt::{
    HashCrdt, HashOp, Hlc, ListCrdt, ListOp, ReplicaId, Stamp, VersionVector, ZSetCrdt, ZSetOp,
};
use proptest::prelude::*;
use zset_model::{ZCmd, member};

#[path = "common/hash_model.rs"]
mod hash_model;
#[path = "common/list_model.rs"]
mod list_model;
#[path = "common/stream_model.rs"]
mod stream_model;
#[path = "common/zset_model.rs"]
mod zset_model;

const REPLICAS: usize = 3;

// ------------------------------------------------------------------------------------------
// The harness, generic over the type
// ------------------------------------------------------------------------------------------

/// The `Crdt` methods each type under test has as inherent methods of the same names.
macro_rules! inherent_crdt_methods {
    ($t:ty) => {
        fn apply(&mut self, stamp: Stamp, op: &Self::Op) {
            <$t>::apply(self, stamp, op);
        }
        fn remove_observed(&mut self, observed: &Observed) {
            <$t>::remove_observed(self, observed);
        }
        fn observe_into(&self, vv: &mut VersionVector) {
            <$t>::observe_into(self, vv);
        }
        fn collect(&mut self, stable: Option<&VersionVector>) {
            <$t>::collect(self, stable);
        }
        fn merge(&mut self, other: &Self) {
            <$t>::merge(self, other);
        }
        fn encode_state(&self, out: &mut Vec<u8>) {
            <$t>::encode_state(self, out);
        }
        fn decode_state(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
            <$t>::decode_state(r)
        }
    };
}

/// What a server issues: a write of the type, or a removal of the whole key.
enum Issue<O> {
    Op(O),
    Del,
}

/// One collection type under test.
trait Crdt: Clone + Default + Debug + PartialEq {
    type Op: Clone + Debug;
    /// A client command, before it is turned into an op against a state.
    type Cmd: Clone + Debug;

    fn apply(&mut self, stamp: Stamp, op: &Self::Op);
    fn remove_observed(&mut self, observed: &Observed);
    fn observe_into(&self, vv: &mut VersionVector);
    fn collect(&mut self, stable: Option<&VersionVector>);
    fn merge(&mut self, other: &Self);
    fn encode_state(&self, out: &mut Vec<u8>);
    fn decode_state(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
    /// What clients see, as text.
    fn view(&self) -> String;
    /// The write the server would issue for `cmd` (None: no write).
    fn issue(&self, cmd: &Self::Cmd) -> Option<Issue<Self::Op>>;
    /// Whether the encoding is canonical (equal states encode to equal bytes whatever the
    /// order of joins), so that joins can be compared by bytes.
    const CANONICAL: bool;
}

/// A key holding one value of the type: `KeyState`'s removal context and filtering.
#[derive(Clone, Debug, Default)]
struct Site<T> {
    value: T,
    /// The merged contexts of DELs (each naming the DEL itself too, as `KeyState` does).
    removed: VersionVector,
}

#[derive(Clone, Debug)]
enum KOp<O> {
    Op(O),
    Del(Observed),
}

impl<T: Crdt> Site<T> {
    fn observed(&self) -> Observed {
        let mut stamps = self.removed.clone();
        self.value.observe_into(&mut stamps);
        Observed {
            stamps,
            incs: Default::default(),
        }
    }

    fn issue(&self, cmd: &T::Cmd) -> Option<KOp<T::Op>> {
        Some(match self.value.issue(cmd)? {
            Issue::Op(op) => KOp::Op(op),
            Issue::Del => KOp::Del(self.observed()),
        })
    }

    fn apply(&mut self, stamp: Stamp, op: &KOp<T::Op>) {
        match op {
            KOp::Op(op) => {
                if !self.removed.covers(stamp) {
                    self.value.apply(stamp, op);
                }
            }
            KOp::Del(observed) => {
                let mut with_self = observed.clone();
                with_self.stamps.observe(stamp);
                self.removed.merge(&with_self.stamps);
                self.value.remove_observed(&with_self);
            }
        }
    }

    fn collect(&mut self, stable: &VersionVector) {
        self.removed.forget_covered(stable);
        self.value.collect(Some(stable));
    }

    fn merge(&mut self, other: &Site<T>) {
        self.removed.merge(&other.removed);
        self.value.merge(&other.value);
        let observed = Observed {
            stamps: self.removed.clone(),
            incs: Default::default(),
        };
        self.value.remove_observed(&observed);
    }
}

fn joined<T: Crdt>(a: &Site<T>, b: &Site<T>) -> Site<T> {
    let mut m = a.clone();
    m.merge(b);
    m
}

type Log<O> = Vec<(Stamp, KOp<O>)>;

struct Rep<T: Crdt> {
    site: Site<T>,
    hlc: u64,
    log: Log<T::Op>,
    /// Per op in `log`, the hlc this replica had delivered from each origin when issuing it.
    pasts: Vec<[u64; REPLICAS]>,
    /// Per op in `log`, its place in the order of issue across replicas (a causal order).
    seqs: Vec<usize>,
    /// Per origin, how many of its ops were delivered here.
    delivered: [usize; REPLICAS],
    collected: bool,
}

#[derive(Clone, Debug)]
enum Step<C> {
    Local {
        r: usize,
        cmd: C,
    },
    Deliver {
        from: usize,
        to: usize,
        n: usize,
    },
    Dup {
        from: usize,
        to: usize,
        pick: usize,
    },
    Collect {
        r: usize,
    },
    /// Delivers everything pending everywhere (makes more of the history stable).
    SyncAll,
}

fn steps<C: Clone + Debug + 'static>(
    cmd: impl Strategy<Value = C> + 'static,
    max: usize,
) -> impl Strategy<Value = Vec<Step<C>>> {
    let step = prop_oneof![
        6 => (0..REPLICAS, cmd).prop_map(|(r, cmd)| Step::Local { r, cmd }),
        4 => (0..REPLICAS, 0..REPLICAS, 1usize..4)
            .prop_map(|(from, to, n)| Step::Deliver { from, to, n }),
        1 => (0..REPLICAS, 0..REPLICAS, any::<usize>())
            .prop_map(|(from, to, pick)| Step::Dup { from, to, pick }),
        2 => (0..REPLICAS).prop_map(|r| Step::Collect { r }),
        1 => Just(Step::SyncAll),
    ];
    prop::collection::vec(step, 1..max)
}

fn stamp(r: usize, hlc: u64) -> Stamp {
    Stamp {
        hlc: Hlc(hlc),
        replica: ReplicaId(r as u32 + 1),
    }
}

struct World<T: Crdt> {
    reps: Vec<Rep<T>>,
    /// Ops issued so far.
    issued: usize,
}

impl<T: Crdt> World<T> {
    fn new() -> World<T> {
        World {
            reps: (0..REPLICAS)
                .map(|_| Rep {
                    site: Site::default(),
                    hlc: 0,
                    log: Vec::new(),
                    pasts: Vec::new(),
                    seqs: Vec::new(),
                    delivered: [0; REPLICAS],
                    collected: false,
                })
                .collect(),
            issued: 0,
        }
    }

    /// The hlc of the `k`-th op of `origin` (0: none).
    fn hlc_of(&self, origin: usize, k: usize) -> u64 {
        k.checked_sub(1)
            .and_then(|i| self.reps[origin].log.get(i))
            .map_or(0, |(s, _)| s.hlc.0)
    }

    /// A causally stable vector: delivered everywhere, and every op not yet delivered
    /// everywhere had seen it (so nothing concurrent with a covered op is still in flight).
    fn stable(&self) -> VersionVector {
        let mut vv = VersionVector::new();
        for o in 0..REPLICAS {
            let everywhere = (0..REPLICAS)
                .map(|r| self.reps[r].delivered[o])
                .min()
                .unwrap_or(0);
            let mut h = self.hlc_of(o, everywhere);
            for (origin, rep) in self.reps.iter().enumerate() {
                let done = (0..REPLICAS)
                    .map(|r| self.reps[r].delivered[origin])
                    .min()
                    .unwrap_or(0);
                for past in rep.pasts.iter().skip(done) {
                    h = h.min(past[o]);
                }
            }
            vv.observe(stamp(o, h));
        }
        vv
    }

    fn deliver(&mut self, from: usize, to: usize, n: usize) {
        if from == to {
            return;
        }
        for _ in 0..n {
            let k = self.reps[to].delivered[from];
            let Some((s, op)) = self.reps[from].log.get(k).cloned() else {
                return;
            };
            let rep = &mut self.reps[to];
            rep.site.apply(s, &op);
            rep.hlc = rep.hlc.max(s.hlc.0);
            rep.delivered[from] = k + 1;
        }
    }

    fn run(&mut self, steps: &[Step<T::Cmd>]) {
        for s in steps {
            match s {
                Step::Local { r, cmd } => {
                    let Some(op) = self.reps[*r].site.issue(cmd) else {
                        continue;
                    };
                    let past: [u64; REPLICAS] =
                        std::array::from_fn(|o| self.hlc_of(o, self.reps[*r].delivered[o]));
                    let rep = &mut self.reps[*r];
                    rep.hlc += 1;
                    let st = stamp(*r, rep.hlc);
                    rep.site.apply(st, &op);
                    rep.log.push((st, op));
                    rep.pasts.push(past);
                    rep.seqs.push(self.issued);
                    self.issued += 1;
                    rep.delivered[*r] = rep.log.len();
                }
                Step::Deliver { from, to, n } => self.deliver(*from, *to, *n),
                Step::Dup { from, to, pick } => {
                    // After a collect, the server's sequence numbers filter duplicates.
                    let done = self.reps[*to].delivered[*from];
                    if done == 0 || from == to || self.reps[*to].collected {
                        continue;
                    }
                    let (s, op) = self.reps[*from].log[pick % done].clone();
                    self.reps[*to].site.apply(s, &op);
                }
                Step::SyncAll => {
                    for from in 0..REPLICAS {
                        for to in 0..REPLICAS {
                            self.deliver(from, to, usize::MAX);
                        }
                    }
                }
                Step::Collect { r } => {
                    let stable = self.stable();
                    let rep = &mut self.reps[*r];
                    rep.site.collect(&stable);
                    rep.collected = true;
                }
            }
        }
    }

    /// Per origin, how many ops `a` or `b` delivered.
    fn union_delivered(&self, a: usize, b: usize) -> [usize; REPLICAS] {
        std::array::from_fn(|o| self.reps[a].delivered[o].max(self.reps[b].delivered[o]))
    }

    /// The ops of every origin from `from[o]` up to (not including) `to[o]`, in issue order:
    /// a causal order, as a replica that had delivered the stable vectors used would apply
    /// them (an order that delivers a removal before a stable write it had seen is not one).
    fn ops_between(&self, from: [usize; REPLICAS], to: [usize; REPLICAS]) -> Log<T::Op> {
        let mut v = Vec::new();
        for o in 0..REPLICAS {
            let rep = &self.reps[o];
            let ops = rep.seqs.iter().zip(&rep.log);
            v.extend(
                ops.take(to[o])
                    .skip(from[o])
                    .map(|(q, op)| (*q, op.clone())),
            );
        }
        v.sort_by_key(|e| e.0);
        v.into_iter().map(|e| e.1).collect()
    }

    fn all_ops_after(&self, from: [usize; REPLICAS]) -> Log<T::Op> {
        self.ops_between(from, [usize::MAX; REPLICAS])
    }
}

fn encoded<T: Crdt>(v: &T) -> Vec<u8> {
    let mut out = Vec::new();
    v.encode_state(&mut out);
    out
}

/// `a` and `b` show the same, now and after the same further ops (`later`, then local writes
/// `cmds` issued alternately at each with a fourth origin's stamps).
fn same_future<T: Crdt>(
    a: &Site<T>,
    b: &Site<T>,
    later: &Log<T::Op>,
    cmds: &[T::Cmd],
    hlc0: u64,
) -> Result<(), TestCaseError> {
    prop_assert_eq!(a.value.view(), b.value.view());
    let (mut a, mut b) = (a.clone(), b.clone());
    for (s, op) in later {
        a.apply(*s, op);
        b.apply(*s, op);
    }
    prop_assert_eq!(a.value.view(), b.value.view(), "after the remaining ops");
    for (i, cmd) in cmds.iter().enumerate() {
        let from = if i % 2 == 0 { &a } else { &b };
        let Some(op) = from.issue(cmd) else { continue };
        let s = stamp(3, hlc0 + 1 + i as u64);
        a.apply(s, &op);
        b.apply(s, &op);
        prop_assert_eq!(a.value.view(), b.value.view(), "after local {:?}", cmd);
    }
    Ok(())
}

/// The laws for one random history: see the module doc.
fn check_laws<T: Crdt>(
    steps: &[Step<T::Cmd>],
    pair: (usize, usize),
    cmds: &[T::Cmd],
) -> Result<(), TestCaseError> {
    let mut w: World<T> = World::new();
    w.run(steps);
    let (a, b) = pair;
    let c = 3 - a - b;
    let hlc0 = w.reps.iter().map(|r| r.hlc).max().unwrap_or(0) + 1;
    let sa = &w.reps[a].site;
    let sb = &w.reps[b].site;
    let sc = &w.reps[c].site;

    // The join equals the replica that applied both sides' ops.
    let union = w.union_delivered(a, b);
    let mut reference: Site<T> = Site::default();
    for (s, op) in w.ops_between([0; REPLICAS], union) {
        reference.apply(s, &op);
    }
    let m = joined(sa, sb);
    let later = w.all_ops_after(union);
    same_future(&m, &reference, &later, cmds, hlc0)?;

    // Commutative, idempotent, associative.
    let m2 = joined(sb, sa);
    prop_assert_eq!(&m.value, &m2.value);
    prop_assert_eq!(&m.removed, &m2.removed);
    if T::CANONICAL {
        prop_assert_eq!(encoded(&m.value), encoded(&m2.value));
    }
    same_future(&m, &m2, &later, cmds, hlc0)?;
    for s in [sa, sb, &m] {
        // The type's join alone is idempotent to the byte; the key's (which applies the key
        // context again, trimming member contexts it covers) shows and behaves the same.
        let mut twice = s.value.clone();
        twice.merge(&s.value);
        prop_assert_eq!(encoded(&twice), encoded(&s.value), "idempotent");
        same_future(&joined(s, s), s, &later, cmds, hlc0)?;
    }
    let left = joined(&m, sc);
    let right = joined(sa, &joined(sb, sc));
    prop_assert_eq!(&left.value, &right.value);
    if T::CANONICAL {
        prop_assert_eq!(encoded(&left.value), encoded(&right.value));
    }
    let all = w.all_ops_after(std::array::from_fn(|o| {
        (0..REPLICAS)
            .map(|r| w.reps[r].delivered[o])
            .max()
            .unwrap_or(0)
    }));
    same_future(&left, &right, &all, cmds, hlc0)?;

    // The codec round-trips every state met.
    for v in [&sa.value, &sb.value, &sc.value, &m.value, &left.value] {
        round_trip(v)?;
    }
    Ok(())
}

fn round_trip<T: Crdt>(v: &T) -> Result<(), TestCaseError> {
    let bytes = encoded(v);
    let mut r = Reader::new(&bytes);
    let back = T::decode_state(&mut r);
    prop_assert!(back.is_ok(), "{:?} for {:?}", back, v);
    let back = back.unwrap_or_default();
    prop_assert!(r.is_at_end());
    prop_assert_eq!(&back, v);
    prop_assert_eq!(back.view(), v.view());
    prop_assert_eq!(encoded(&back), bytes);
    Ok(())
}

/// Decodes `bytes`; whatever comes back must be usable: encoded, joined, shown.
fn decode_any<T: Crdt>(bytes: &[u8]) {
    if let Ok(v) = T::decode_state(&mut Reader::new(bytes)) {
        let again = encoded(&v);
        let mut m = v.clone();
        m.merge(&v);
        let _ = (m.view(), again);
    }
}

/// A state reached by a random history, encoded, then mutated.
fn mutated<T: Crdt>(steps: &[Step<T::Cmd>], edits: &[(usize, u8, u8)]) {
    let mut w: World<T> = World::new();
    w.run(steps);
    let mut bytes = encoded(&w.reps[0].site.value);
    decode_any::<T>(&bytes);
    for &(at, kind, b) in edits {
        let i = if bytes.is_empty() {
            0
        } else {
            at % bytes.len()
        };
        match kind % 4 {
            0 if !bytes.is_empty() => bytes[i] ^= b | 1,
            1 => bytes.insert(i, b),
            2 if !bytes.is_empty() => {
                bytes.remove(i);
            }
            _ => bytes.truncate(i),
        }
        decode_any::<T>(&bytes);
    }
}

fn pair() -> impl Strategy<Value = (usize, usize)> {
    prop_oneof![Just((0, 1)), Just((1, 2)), Just((2, 0))]
}

fn edits() -> impl Strategy<Value = Vec<(usize, u8, u8)>> {
    prop::collection::vec((any::<usize>(), any::<u8>(), any::<u8>()), 1..8)
}

// ------------------------------------------------------------------------------------------
// Hash
// ------------------------------------------------------------------------------------------

fn hash_cmd() -> impl Strategy<Value = HashCmd> {
    prop_oneof![
        4 => (0u8..4, 0u8..4).prop_map(|(f, v)| HashCmd::HSet(f, v)),
        3 => (0u8..4, -3i8..4).prop_map(|(f, d)| HashCmd::HIncr(f, d)),
        2 => (0u8..4, -3i8..4).prop_map(|(f, d)| HashCmd::HIncrFloat(f, d)),
        3 => (0u8..4).prop_map(HashCmd::HDel),
        1 => Just(HashCmd::Del),
    ]
}

impl Crdt for HashCrdt {
    type Op = HashOp<Vec<u8>>;
    type Cmd = HashCmd;
    const CANONICAL: bool = false;

    inherent_crdt_methods!(HashCrdt);

    fn view(&self) -> String {
        let mut v: Vec<(Vec<u8>, Vec<u8>)> = self
            .iter()
            .map(|(f, v)| (f.to_vec(), v.to_bytes()))
            .collect();
        v.sort();
        format!("{v:?}")
    }
    fn issue(&self, cmd: &HashCmd) -> Option<Issue<Self::Op>> {
        Some(match hash_model::issue(self, cmd)? {
            hash_model::Issued::Op(op) => Issue::Op(op),
            hash_model::Issued::DelKey => Issue::Del,
        })
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn hash_join_is_the_union_of_ops(
        steps in steps(hash_cmd(), 60),
        pair in pair(),
        cmds in prop::collection::vec(hash_cmd(), 0..8),
    ) {
        check_laws::<HashCrdt>(&steps, pair, &cmds)?;
    }

    #[test]
    fn hash_decode_never_panics(
        garbage in prop::collection::vec(any::<u8>(), 0..80),
        steps in steps(hash_cmd(), 30),
        edits in edits(),
    ) {
        decode_any::<HashCrdt>(&garbage);
        mutated::<HashCrdt>(&steps, &edits);
    }
}

// ------------------------------------------------------------------------------------------
// Sorted set
// ------------------------------------------------------------------------------------------

fn score() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(0.1),
        Just(1.5),
        Just(-2.25),
        Just(1e17),
        Just(f64::INFINITY),
        (-5i32..5).prop_map(f64::from),
    ]
}

fn zset_cmd() -> impl Strategy<Value = ZCmd> {
    prop_oneof![
        4 => (0u8..3, score()).prop_map(|(m, s)| ZCmd::Add(m, s)),
        4 => (0u8..3, score()).prop_map(|(m, s)| ZCmd::Incr(m, s)),
        2 => (0u8..3).prop_map(ZCmd::Rem),
        1 => Just(ZCmd::Del),
    ]
}

impl Crdt for ZSetCrdt {
    type Op = ZSetOp<Vec<u8>>;
    type Cmd = ZCmd;
    const CANONICAL: bool = true;

    inherent_crdt_methods!(ZSetCrdt);

    fn view(&self) -> String {
        // In order, with score bits: ranks and the exact sums are part of what clients see.
        let v: Vec<(Vec<u8>, u64)> = self
            .iter()
            .map(|(m, s)| (m.to_vec(), s.to_bits()))
            .collect();
        let ranks: Vec<Option<usize>> = (0..3).map(|m| self.rank(&member(m))).collect();
        format!("{v:?} {ranks:?} {}", self.len())
    }
    fn issue(&self, cmd: &ZCmd) -> Option<Issue<Self::Op>> {
        Some(match zset_model::issue(self, cmd)? {
            zset_model::Issued::Op(op) => Issue::Op(op),
            zset_model::Issued::DelKey => Issue::Del,
        })
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn zset_join_is_the_union_of_ops(
        steps in steps(zset_cmd(), 60),
        pair in pair(),
        cmds in prop::collection::vec(zset_cmd(), 0..8),
    ) {
        check_laws::<ZSetCrdt>(&steps, pair, &cmds)?;
    }

    #[test]
    fn zset_decode_never_panics(
        garbage in prop::collection::vec(any::<u8>(), 0..80),
        steps in steps(zset_cmd(), 30),
        edits in edits(),
    ) {
        decode_any::<ZSetCrdt>(&garbage);
        mutated::<ZSetCrdt>(&steps, &edits);
    }
}

// ------------------------------------------------------------------------------------------
// List
// ------------------------------------------------------------------------------------------

impl Crdt for ListCrdt {
    type Op = ListOp<Vec<u8>>;
    type Cmd = ListCmd;
    const CANONICAL: bool = true;

    inherent_crdt_methods!(ListCrdt);

    fn view(&self) -> String {
        // Values in order and their ids (ids decide where later inserts go).
        let v: Vec<(Vec<u8>, ElemId)> = self.iter().map(|e| (e.value.to_vec(), e.id)).collect();
        format!("{v:?} {}", self.len())
    }
    fn issue(&self, cmd: &ListCmd) -> Option<Issue<Self::Op>> {
        Some(match list_model::issue(self, cmd)? {
            list_model::Issued::Op(op) => Issue::Op(op),
            list_model::Issued::DelKey => Issue::Del,
        })
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn list_join_is_the_union_of_ops(
        steps in steps(list_cmd(), 60),
        pair in pair(),
        cmds in prop::collection::vec(list_cmd(), 0..8),
    ) {
        check_laws::<ListCrdt>(&steps, pair, &cmds)?;
    }

    #[test]
    fn list_decode_never_panics(
        garbage in prop::collection::vec(any::<u8>(), 0..80),
        steps in steps(list_cmd(), 30),
        edits in edits(),
    ) {
        decode_any::<ListCrdt>(&garbage);
        mutated::<ListCrdt>(&steps, &edits);
    }
}

// ------------------------------------------------------------------------------------------
// Directed cases
// ------------------------------------------------------------------------------------------

/// A write reaches replica 1 after a DEL that had seen it (so the key drops it unapplied),
/// then replica 1 collects the DEL's context, which a stable vector covers; replica 0 never
/// got the DEL. The join must still drop the write: the value's floor (the stable vector)
/// says replica 1 had it.
fn write_dropped_under_a_collected_key_context<T: Crdt>(write: T::Cmd, del: T::Cmd) {
    let steps = vec![
        Step::Local { r: 0, cmd: write },
        Step::Deliver {
            from: 0,
            to: 2,
            n: 1,
        },
        Step::Local { r: 2, cmd: del },
        Step::Deliver {
            from: 2,
            to: 1,
            n: 1,
        },
        Step::Deliver {
            from: 0,
            to: 1,
            n: 1,
        },
        Step::Collect { r: 1 },
    ];
    let res = check_laws::<T>(&steps, (0, 1), &[]);
    assert!(res.is_ok(), "{res:?}");
}

#[test]
fn hash_write_dropped_under_a_collected_key_context() {
    write_dropped_under_a_collected_key_context::<HashCrdt>(HashCmd::HSet(0, 1), HashCmd::Del);
}

#[test]
fn zset_write_dropped_under_a_collected_key_context() {
    write_dropped_under_a_collected_key_context::<ZSetCrdt>(ZCmd::Add(0, 1.5), ZCmd::Del);
}

#[test]
fn list_write_dropped_under_a_collected_key_context() {
    write_dropped_under_a_collected_key_context::<ListCrdt>(ListCmd::RPush(0, 1), ListCmd::Del);
}

/// Large joins stay near linear: two replicas with 20 000 entries of the union, each having
/// all of its own origin's writes and the first half of the other's.
#[test]
fn large_joins_are_not_quadratic() {
    const N: u64 = 20_000;
    let started = std::time::Instant::now();
    let side = |me: u32| {
        let (mut h, mut z, mut l) = (HashCrdt::new(), ZSetCrdt::new(), ListCrdt::new());
        for i in 0..N {
            let origin = 1 + (i % 2) as u32;
            if origin != me && i >= N / 2 {
                continue;
            }
            let s = Stamp {
                hlc: Hlc(i + 1),
                replica: ReplicaId(origin),
            };
            let f = format!("f{i}").into_bytes();
            let set = HashOp::Set {
                field: f.clone(),
                value: f.clone(),
                observed: VersionVector::new(),
            };
            h.apply(s, &set);
            let add = ZSetOp::Add {
                member: f.clone(),
                score: F64((i % 977) as f64),
                observed: VersionVector::new(),
            };
            z.apply(s, &add);
            let push = ListOp::Insert {
                pos: Pos::from_slice(&[(i % 1013) as i64]),
                values: vec![f],
            };
            l.apply(s, &push);
        }
        (h, z, l)
    };
    let (ha, za, la) = side(1);
    let (hb, zb, lb) = side(2);
    let mut h = ha.clone();
    h.merge(&hb);
    let mut z = za.clone();
    z.merge(&zb);
    let mut l = la.clone();
    l.merge(&lb);
    assert_eq!(h.len(), N as usize);
    assert_eq!(z.len(), N as usize);
    assert_eq!(l.len(), N as usize);
    let elapsed = started.elapsed();
    assert!(elapsed.as_secs() < 20, "{elapsed:?}");
}

// ------------------------------------------------------------------------------------------
// Stream
// ------------------------------------------------------------------------------------------

impl Crdt for meridian_crdt::StreamCrdt {
    type Op = meridian_crdt::StreamOp<Vec<u8>>;
    type Cmd = stream_model::StreamCmd;
    const CANONICAL: bool = true;

    inherent_crdt_methods!(meridian_crdt::StreamCrdt);

    fn view(&self) -> String {
        stream_model::view(self.is_live().then_some(self))
    }
    fn issue(&self, cmd: &Self::Cmd) -> Option<Issue<Self::Op>> {
        // The issuing replica is not known here: every write names replica 0 as its origin
        // for the running values, which keeps ops a function of the state (what the laws
        // need), if not the counts a server would show.
        let live = self.is_live().then_some(self);
        match stream_model::issue(live, cmd, ReplicaId(0), false, 1_000)? {
            stream_model::Issued::Op(op) => Some(Issue::Op(op)),
            stream_model::Issued::DelKey => Some(Issue::Del),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn stream_join_is_the_union_of_ops(
        steps in steps(stream_model::stream_cmd(), 60),
        pair in pair(),
        cmds in prop::collection::vec(stream_model::stream_cmd(), 0..8),
    ) {
        check_laws::<meridian_crdt::StreamCrdt>(&steps, pair, &cmds)?;
    }

    #[test]
    fn stream_decode_never_panics(
        garbage in prop::collection::vec(any::<u8>(), 0..80),
        steps in steps(stream_model::stream_cmd(), 30),
        edits in edits(),
    ) {
        decode_any::<meridian_crdt::StreamCrdt>(&garbage);
        mutated::<meridian_crdt::StreamCrdt>(&steps, &edits);
    }
}

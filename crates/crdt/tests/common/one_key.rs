//! The law harness of the one-key CRDTs (hash, HyperLogLog, list, sorted set, stream): sites
//! that each hold one key issue writes the way the server does (effect built from the key's
//! state, applied locally, queued for the others) and exchange them over per-origin FIFO
//! channels, in random orders, with duplicates, clock ticks and collection at causally
//! stable points. Each law test supplies its commands and how a site turns one into writes
//! (`run`'s `issue`); the laws it checks on the outcome stay its own.
#![allow(dead_code)]

use std::fmt::Debug;

use meridian_crdt::codec::{DecodeError, Reader};
use meridian_crdt::{Effect, HlcClock, KeyState, ReplicaId, Stamp, VersionVector};
use proptest::prelude::*;
use proptest::strategy::Union;

pub const REPLICAS: usize = 3;

/// One site's copy of the key.
pub struct Replica {
    pub id: ReplicaId,
    pub clock: HlcClock,
    pub now_ms: u64,
    pub key: KeyState,
    /// The writes this site issued, in order.
    pub outbox: Vec<(Stamp, Effect<Vec<u8>>)>,
    /// For each write in `outbox`, what this site had delivered when it issued it.
    pub issued_with: Vec<[usize; REPLICAS]>,
    /// Per origin, how many of its writes were delivered here.
    pub delivered: [usize; REPLICAS],
    /// The stamps of the writes delivered here (the server's delivered vector).
    pub delivered_vv: VersionVector,
    /// Per origin, how many of its writes were delivered here at this site's last collect:
    /// `Dup` redelivers none of them. The server never hands a key a write it delivered
    /// (the link's delivered vector drops it); a duplicate that crossed a collect could
    /// bring back a write a removal dropped and the collect forgot (`KeyState::collect`).
    pub collected_upto: [usize; REPLICAS],
}

impl Replica {
    /// Site `i` (replica id `i + 1`).
    pub fn new(i: usize) -> Replica {
        Replica {
            id: ReplicaId(i as u32 + 1),
            clock: HlcClock::new(),
            now_ms: 1_000,
            key: KeyState::new(),
            outbox: Vec::new(),
            issued_with: Vec::new(),
            delivered: [0; REPLICAS],
            delivered_vv: VersionVector::new(),
            collected_upto: [0; REPLICAS],
        }
    }

    /// Issues `e` at this site, which is site `me`: stamped, applied here, queued for the
    /// others.
    pub fn write(&mut self, me: usize, e: Effect<Vec<u8>>) {
        let stamp = Stamp {
            hlc: self.clock.tick(self.now_ms),
            replica: self.id,
        };
        self.key.apply(stamp, &e);
        self.issued_with.push(self.delivered);
        self.outbox.push((stamp, e));
        self.delivered[me] = self.outbox.len();
        self.delivered_vv.observe(stamp);
    }

    /// Applies a write of another site.
    pub fn receive(&mut self, stamp: Stamp, e: &Effect<Vec<u8>>) {
        let _ = self.clock.observe(stamp.hlc, self.now_ms, u64::MAX / 4);
        self.key.apply(stamp, e);
        self.delivered_vv.observe(stamp);
    }
}

#[derive(Clone, Debug)]
pub enum Step<C> {
    /// Site `r` runs `cmd`.
    Local { r: usize, cmd: C },
    /// The next `n` writes of `from` reach `to`.
    Deliver { from: usize, to: usize, n: usize },
    /// A write of `from` that `to` has already reached it again.
    Dup { from: usize, to: usize, pick: usize },
    /// Site `r`'s clock moves on `ms`.
    Tick { r: usize, ms: u64 },
    /// Site `r` collects removal metadata with the causally stable vector as it can know it.
    Collect { r: usize },
}

/// How often each kind of step comes, relative to the 3 of `Deliver` and the 1 of `Dup`;
/// a kind of weight 0 never comes.
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    pub local: u32,
    pub tick: u32,
    pub collect: u32,
}

impl Mix {
    /// Local writes, deliveries, duplicates and ticks; no collection.
    pub const PLAIN: Mix = Mix {
        local: 6,
        tick: 1,
        collect: 0,
    };
}

/// Random steps over `cmd`, in the proportions of `mix`.
pub fn step<C: Clone + Debug + 'static>(
    cmd: impl Strategy<Value = C> + 'static,
    mix: Mix,
) -> BoxedStrategy<Step<C>> {
    let mut arms: Vec<(u32, BoxedStrategy<Step<C>>)> = vec![
        (
            mix.local,
            (0..REPLICAS, cmd)
                .prop_map(|(r, cmd)| Step::Local { r, cmd })
                .boxed(),
        ),
        (
            3,
            (0..REPLICAS, 0..REPLICAS, 1usize..4)
                .prop_map(|(from, to, n)| Step::Deliver { from, to, n })
                .boxed(),
        ),
        (
            1,
            (0..REPLICAS, 0..REPLICAS, any::<usize>())
                .prop_map(|(from, to, pick)| Step::Dup { from, to, pick })
                .boxed(),
        ),
        (
            mix.tick,
            (0..REPLICAS, 0u64..3)
                .prop_map(|(r, ms)| Step::Tick { r, ms })
                .boxed(),
        ),
        (
            mix.collect,
            (0..REPLICAS).prop_map(|r| Step::Collect { r }).boxed(),
        ),
    ];
    arms.retain(|(w, _)| *w > 0);
    Union::new_weighted(arms).boxed()
}

/// Delivers the next `n` writes of `from` to `to`, in order.
pub fn deliver(reps: &mut [Replica], from: usize, to: usize, n: usize) {
    if from == to {
        return;
    }
    for _ in 0..n {
        let k = reps[to].delivered[from];
        let Some((s, e)) = reps[from].outbox.get(k).cloned() else {
            return;
        };
        reps[to].receive(s, &e);
        reps[to].delivered[from] = k + 1;
    }
}

/// Delivers every write everywhere.
pub fn deliver_all(reps: &mut [Replica]) {
    for from in 0..reps.len() {
        for to in 0..reps.len() {
            deliver(reps, from, to, usize::MAX);
        }
    }
}

/// The causally stable vector at `r`: per origin, the lowest hlc every replica `t` is known to
/// have delivered, where what `t` delivered counts only as of the first op of `t` that `r`
/// has not received yet (that op, in flight, may have observed less). This is what the
/// server's rule gives: a peer's ack counts once every op it issued before it was delivered.
pub fn stable(reps: &[Replica], r: usize) -> VersionVector {
    let known: Vec<[usize; REPLICAS]> = (0..reps.len())
        .map(|t| {
            let k = reps[r].delivered[t];
            if t == r || k >= reps[t].outbox.len() {
                reps[t].delivered
            } else {
                reps[t].issued_with[k]
            }
        })
        .collect();
    let mut vv = VersionVector::new();
    for (o, origin) in reps.iter().enumerate() {
        let min = known.iter().map(|d| d[o]).min().unwrap_or(0);
        if min > 0 {
            vv.observe(origin.outbox[min - 1].0);
        }
    }
    vv
}

/// Runs `steps` on `REPLICAS` fresh sites, site `r` running a command with
/// `issue(site, r, cmd)`, then delivers every write everywhere.
pub fn run<C>(steps: &[Step<C>], mut issue: impl FnMut(&mut Replica, usize, &C)) -> Vec<Replica> {
    let mut reps: Vec<Replica> = (0..REPLICAS).map(Replica::new).collect();
    for s in steps {
        match s {
            Step::Local { r, cmd } => issue(&mut reps[*r], *r, cmd),
            Step::Deliver { from, to, n } => deliver(&mut reps, *from, *to, *n),
            Step::Dup { from, to, pick } => {
                let k = reps[*to].delivered[*from];
                if k > 0 && from != to && pick % k >= reps[*to].collected_upto[*from] {
                    let (s, e) = reps[*from].outbox[pick % k].clone();
                    reps[*to].receive(s, &e);
                }
            }
            Step::Tick { r, ms } => reps[*r].now_ms += ms,
            Step::Collect { r } => {
                let st = stable(&reps, *r);
                reps[*r].key.collect(&st);
                reps[*r].collected_upto = reps[*r].delivered;
            }
        }
    }
    deliver_all(&mut reps);
    reps
}

/// The codec law of an op type: `op` encoded then decoded is `op`, read to the end. Returns
/// the encoding.
pub fn round_trips<O: PartialEq + Debug>(
    op: &O,
    encode: impl Fn(&O, &mut Vec<u8>),
    decode: impl Fn(&mut Reader<'_>) -> Result<O, DecodeError>,
) -> Result<Vec<u8>, TestCaseError> {
    let mut out = Vec::new();
    encode(op, &mut out);
    let mut r = Reader::new(&out);
    let back = decode(&mut r).map_err(|e| TestCaseError::fail(format!("{op:?}: {e:?}")))?;
    prop_assert_eq!(&back, op);
    prop_assert!(r.is_at_end());
    Ok(out)
}

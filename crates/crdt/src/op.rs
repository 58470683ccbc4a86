//! `Effect`: what one write replicates.
//!
//! A write is named by its `Stamp`. The server builds the effect of a command from the key's
//! current state (`KeyState::observed` and the view), applies it locally with
//! `KeyState::apply`, and sends `(stamp, effect)` to the other replicas, which apply it the same
//! way. Removals carry `Observed`: they remove only what the issuing replica had seen.

use smallvec::SmallVec;

use crate::counter::{Delta, IncAt, IncTotals};
use crate::dot::{ReplicaId, VersionVector};
use crate::expire::Expire;
use crate::hash::HashOp;
use crate::hll::HllOp;
use crate::list::ListOp;
use crate::stream::StreamOp;
use crate::string::StrEdit;
use crate::zset::ZSetOp;

/// What the issuing replica had seen at a key when it issued a removal.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Observed {
    /// Every stamp seen at the key: register writes, increments, expire writes, set dots,
    /// and the removal contexts held. The server may also merge in its delivered (or stable)
    /// version vector: with per-origin FIFO delivery, everything it covers has been seen.
    pub stamps: VersionVector,
    /// Counter totals seen, per origin.
    pub incs: SmallVec<[(ReplicaId, IncTotals); 1]>,
}

impl Observed {
    pub fn new() -> Observed {
        Observed::default()
    }

    pub fn is_empty(&self) -> bool {
        self.stamps.is_empty() && self.incs.is_empty()
    }
}

/// The effect of one write on one key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Effect<B: AsRef<[u8]>> {
    /// SET, GETSET, and APPEND/SETRANGE/SETBIT where no edit applies: removes what `observed` covers (string
    /// writes, values of any type, increments, and unless `keep_ttl` the expire writes), then
    /// writes `value`. A TTL set with the value (SET EX) is a separate `Expire` effect.
    Assign {
        value: B,
        observed: Observed,
        keep_ttl: bool,
    },
    /// INCR, INCRBY, DECRBY, INCRBYFLOAT: `delta`, and where the increment stands among
    /// its origin's increments at the key (`Counter::next_at`).
    Incr { delta: Delta, at: IncAt },
    /// APPEND, SETRANGE, SETBIT, BITFIELD SET/INCRBY on a string shown: only what changed,
    /// applied in stamp order among the string's writes (docs/conflicts.md §1.1).
    StrEdit(StrEdit<B>),
    /// DEL, UNLINK, expiry, FLUSH: removes everything `observed` covers.
    Remove { observed: Observed },
    /// EXPIRE family and PERSIST: removes the expire writes `observed` covers, adds this one.
    Expire {
        expire: Expire,
        observed: VersionVector,
    },
    /// Garbage collection of TTL writes that time nothing (`KeyState::retire_expire_effect`):
    /// removes the expire writes `observed` covers and adds none. Issued by a shard's
    /// collection, never by a command; replicated like any write, so that a write its site
    /// makes afterwards finds them gone at every site too (docs/replication.md §6).
    ExpireRetire { observed: VersionVector },
    /// SADD of one member.
    SetAdd { member: B },
    /// SREM of one member: removes the dots of it that `observed` covers.
    SetRem { member: B, observed: VersionVector },
    /// A write to a hash (HSET, HINCRBY, HDEL...).
    Hash(HashOp<B>),
    /// A write to a sorted set (ZADD, ZINCRBY, ZREM...).
    ZSet(ZSetOp<B>),
    /// A write to a list (LPUSH, LINSERT, LSET, pops, LREM, LTRIM...).
    List(ListOp<B>),
    /// A write to a HyperLogLog (PFADD, PFMERGE).
    Hll(HllOp<B>),
    /// A write to a stream (XADD, XDEL, XTRIM, XSETID, consumer groups).
    Stream(StreamOp<B>),
}

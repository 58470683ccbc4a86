//! One key's CRDT state: typed value, TTL register, and the removal context.
//!
//! `KeyState::apply(stamp, effect)` applies a local or remote write; applying the same set of
//! writes in any order (each origin's in issue order), with duplicates, gives the same state.
//!
//! Removal contexts. Ops from different origins arrive in any order, so a write can arrive
//! after a removal that had observed it; the removal's context is kept until it is causally
//! stable and such a late write is dropped. Three contexts, each the merge of the `Observed`
//! stamps of the removals of one kind, so that each write is tested against exactly the
//! removals that remove its kind:
//! - `removed`: DEL and SET without KEEPTTL, which remove values and expire writes;
//! - `value_removed`: SET KEEPTTL, APPEND, SETRANGE..., which remove values only;
//! - `expire_removed`: EXPIRE and PERSIST, which remove expire writes only.
//!
//! Type conflicts (SET k ∥ SADD k). Each live value has the highest stamp of its live writes;
//! the value with the highest such stamp is visible, the others stay live but hidden, so the
//! result does not depend on arrival order. A write that observed a hidden value removes it
//! (SET and DEL remove what they observed, of any type). See docs/conflicts.md.
//!
//! Full sync. `encode_state` writes the complete state (a format byte, every value with its
//! metadata, the three removal contexts, the expire writes); `merge` joins a peer's state
//! into this one: each side's removal contexts are applied to the other side's values and
//! expire writes, values of one type are joined by their type's `merge`, contexts and expire
//! writes are unioned, and the type-conflict rule picks the visible value again.

use smallvec::SmallVec;

use crate::codec::{self, DecodeError, Reader};
use crate::counter::{Counter, Delta, IncAt, IncTotals};
use crate::dot::{Context, ReplicaId, Stamp, VersionVector};
use crate::expire::{Expire, ExpireReg};
use crate::hash::HashCrdt;
use crate::hll::HllCrdt;
use crate::list::ListCrdt;
use crate::op::{Effect, Observed};
use crate::orset::OrSet;
use crate::stream::StreamCrdt;
use crate::string::{StrCrdt, StrEdit, StrView};
use crate::zset::ZSetCrdt;

/// A key's type as clients see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TypeTag {
    String,
    Set,
    Hash,
    ZSet,
    List,
    /// A HyperLogLog: TYPE says "string" (Redis stores it as a string), but it merges as
    /// registers, and a DEL wins over concurrent PFADDs.
    Hll,
    Stream,
}

/// One typed value of a key.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Value {
    Str(StrCrdt),
    Set(OrSet),
    Hash(HashCrdt),
    ZSet(ZSetCrdt),
    List(ListCrdt),
    Hll(HllCrdt),
    Stream(StreamCrdt),
}

impl Value {
    pub fn type_tag(&self) -> TypeTag {
        match self {
            Value::Str(_) => TypeTag::String,
            Value::Set(_) => TypeTag::Set,
            Value::Hash(_) => TypeTag::Hash,
            Value::ZSet(_) => TypeTag::ZSet,
            Value::List(_) => TypeTag::List,
            Value::Hll(_) => TypeTag::Hll,
            Value::Stream(_) => TypeTag::Stream,
        }
    }

    /// Whether it shows anything.
    pub fn is_live(&self) -> bool {
        match self {
            Value::Str(s) => s.is_live(),
            Value::Set(s) => !s.is_empty(),
            Value::Hash(h) => h.is_live(),
            Value::ZSet(z) => z.is_live(),
            Value::List(l) => l.is_live(),
            Value::Hll(h) => h.is_live(),
            Value::Stream(x) => x.is_live(),
        }
    }

    /// The highest stamp among its live writes (the type-conflict order).
    pub fn live_stamp(&self) -> Option<Stamp> {
        match self {
            Value::Str(s) => s.live_stamp(),
            Value::Set(s) => s.max_stamp(),
            Value::Hash(h) => h.live_stamp(),
            Value::ZSet(z) => z.live_stamp(),
            Value::List(l) => l.live_stamp(),
            Value::Hll(h) => h.live_stamp(),
            Value::Stream(x) => x.live_stamp(),
        }
    }

    /// Holds nothing at all: neither live writes nor metadata.
    fn is_blank(&self) -> bool {
        match self {
            Value::Str(s) => !s.is_live() && s.counter().is_none(),
            Value::Set(s) => s.is_empty() && !s.has_metadata(),
            Value::Hash(h) => h.is_blank(),
            Value::ZSet(z) => z.is_blank(),
            Value::List(l) => l.is_blank(),
            Value::Hll(h) => h.is_blank(),
            Value::Stream(x) => x.is_blank(),
        }
    }

    fn has_metadata(&self) -> bool {
        match self {
            Value::Str(s) => s.has_metadata(),
            Value::Set(s) => s.has_metadata(),
            Value::Hash(h) => h.has_metadata(),
            Value::ZSet(z) => z.has_metadata(),
            Value::List(l) => l.has_metadata(),
            Value::Hll(h) => h.has_metadata(),
            Value::Stream(x) => x.has_metadata(),
        }
    }

    fn observe_into(&self, vv: &mut VersionVector) {
        match self {
            Value::Str(s) => s.observe_into(vv),
            Value::Set(s) => s.observe_into(vv),
            Value::Hash(h) => h.observe_into(vv),
            Value::ZSet(z) => z.observe_into(vv),
            Value::List(l) => l.observe_into(vv),
            Value::Hll(h) => h.observe_into(vv),
            Value::Stream(x) => x.observe_into(vv),
        }
    }

    /// Appends the value's type byte and its complete state.
    pub fn encode_state(&self, out: &mut Vec<u8>) {
        match self {
            Value::Str(s) if s.has_edits() => {
                codec::put_u8(out, VALUE_STR_EDITS);
                s.encode_state(out);
                s.encode_edits(out);
            }
            Value::Str(s) => {
                codec::put_u8(out, VALUE_STR);
                s.encode_state(out);
            }
            Value::Set(s) => {
                codec::put_u8(out, VALUE_SET);
                s.encode_state(out);
            }
            Value::Hash(h) => {
                codec::put_u8(out, VALUE_HASH);
                h.encode_state(out);
            }
            Value::ZSet(z) => {
                codec::put_u8(out, VALUE_ZSET);
                z.encode_state(out);
            }
            Value::List(l) => {
                codec::put_u8(out, VALUE_LIST);
                l.encode_state(out);
            }
            Value::Hll(h) => {
                codec::put_u8(out, VALUE_HLL);
                h.encode_state(out);
            }
            Value::Stream(x) => {
                codec::put_u8(out, VALUE_STREAM);
                x.encode_state(out);
            }
        }
    }

    /// Decodes what `encode_state` wrote (an unknown type byte is `BadTag`).
    pub fn decode_state(r: &mut Reader<'_>) -> Result<Value, DecodeError> {
        Ok(match r.u8()? {
            VALUE_STR => Value::Str(StrCrdt::decode_state(r)?),
            VALUE_STR_EDITS => {
                let mut s = StrCrdt::decode_state(r)?;
                s.decode_edits(r)?;
                Value::Str(s)
            }
            VALUE_SET => Value::Set(OrSet::decode_state(r)?),
            VALUE_HASH => Value::Hash(HashCrdt::decode_state(r)?),
            VALUE_ZSET => Value::ZSet(ZSetCrdt::decode_state(r)?),
            VALUE_LIST => Value::List(ListCrdt::decode_state(r)?),
            VALUE_HLL => Value::Hll(HllCrdt::decode_state(r)?),
            VALUE_STREAM => Value::Stream(StreamCrdt::decode_state(r)?),
            t => return Err(DecodeError::BadTag(t)),
        })
    }

    /// Joins `other`, a value of the same type, by that type's `merge` (hashes, sorted sets,
    /// lists and streams with the sides' causal contexts `mine` and `theirs`). Returns false (and
    /// changes nothing) when the types differ.
    fn merge_same(&mut self, other: &Value, mine: &Context, theirs: &Context) -> bool {
        match (self, other) {
            (Value::Str(a), Value::Str(b)) => a.merge(b),
            (Value::Set(a), Value::Set(b)) => a.merge(b),
            (Value::Hash(a), Value::Hash(b)) => a.merge_with_contexts(b, mine, theirs),
            (Value::ZSet(a), Value::ZSet(b)) => a.merge_with_contexts(b, mine, theirs),
            (Value::List(a), Value::List(b)) => a.merge_with_contexts(b, mine, theirs),
            (Value::Hll(a), Value::Hll(b)) => a.merge(b),
            (Value::Stream(a), Value::Stream(b)) => a.merge_with_contexts(b, mine, theirs),
            _ => return false,
        }
        true
    }

    /// Removes what the removals merged into `ctx`, a removal context of the other side of a
    /// state merge, remove of this value. Removal is idempotent for every type, so contexts
    /// this side had applied already remove nothing more (for a HyperLogLog, see
    /// `HllCrdt::remove_context`).
    fn remove_context(&mut self, ctx: &VersionVector) {
        if ctx.is_empty() {
            return;
        }
        match self {
            Value::Str(s) => s.remove(ctx, &[]),
            Value::Set(s) => {
                s.remove_observed(ctx);
            }
            Value::Hll(h) => {
                h.remove_context(ctx);
            }
            Value::Hash(_) | Value::ZSet(_) | Value::List(_) | Value::Stream(_) => {
                self.remove_observed(&Observed {
                    stamps: ctx.clone(),
                    incs: SmallVec::new(),
                });
            }
        }
    }

    fn remove_observed(&mut self, observed: &Observed) {
        match self {
            Value::Str(s) => s.remove(&observed.stamps, &observed.incs),
            Value::Set(s) => {
                s.remove_observed(&observed.stamps);
            }
            Value::Hash(h) => h.remove_observed(observed),
            Value::ZSet(z) => z.remove_observed(observed),
            Value::List(l) => l.remove_observed(observed),
            Value::Hll(h) => h.remove_observed(observed),
            Value::Stream(x) => x.remove_observed(observed),
        }
    }
}

/// Format byte of version 1 of `KeyState::encode_state`'s layout (no `removers`): still
/// decoded, for snapshots and logs written before version 2.
pub const KEY_STATE_V1: u8 = 1;
/// Format byte that opens `KeyState::encode_state`'s output: version 2 adds `removers`.
pub const KEY_STATE_V2: u8 = 2;

const VALUE_STR: u8 = 0;
const VALUE_SET: u8 = 1;
const VALUE_HASH: u8 = 2;
const VALUE_ZSET: u8 = 3;
const VALUE_LIST: u8 = 4;
const VALUE_HLL: u8 = 5;
const VALUE_STREAM: u8 = 6;
/// A string holding edits or folded edit stamps: `StrCrdt::encode_state`, then
/// `StrCrdt::encode_edits` (a string without them keeps `VALUE_STR`, readable by older code).
const VALUE_STR_EDITS: u8 = 7;

/// What `KeyState::apply` (or `KeyState::merge`) did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Applied {
    /// The effect (or the merged state) made a second type live at the key (a type conflict
    /// began here).
    pub type_conflict: bool,
    /// `apply`: the effect's own write was dropped (a duplicate, or covered by a removal
    /// already applied). `merge`: the other state brought nothing (the state is unchanged).
    pub ignored: bool,
}

/// Rare parts of a key, boxed so that a plain key stays small.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
struct Extra {
    /// Live values of types that lost a type conflict, and dead values that still hold
    /// metadata. At most one value per type across `value` and `hidden`.
    hidden: Vec<Value>,
    /// Merged contexts of DEL and SET-without-KEEPTTL.
    removed: VersionVector,
    expire: ExpireReg,
    expire_removed: VersionVector,
    value_removed: VersionVector,
    /// Join of the stamps of the writes that merged a context into `removed`,
    /// `value_removed` or `expire_removed` without naming themselves in it (SET, APPEND,
    /// EXPIRE... carry their own stamp in the value or expire write they add, which a context
    /// naming it would remove). Until every replica has delivered them, `collect` keeps the
    /// three contexts whole: a state merge into a replica that has not applied such a write
    /// must still remove what the write removed. `observed` names these stamps, so a delta
    /// full sync sends the key to a replica that lacks one of them.
    removers: VersionVector,
}

impl Extra {
    fn is_blank(&self) -> bool {
        self.hidden.is_empty()
            && self.removed.is_empty()
            && self.expire.is_empty()
            && self.expire_removed.is_empty()
            && self.value_removed.is_empty()
            && self.removers.is_empty()
    }
}

/// One key's replicated state. See the module doc.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct KeyState {
    /// The visible value when one is live; otherwise a dead value holding metadata, or none.
    value: Option<Value>,
    /// Removal contexts, TTL and hidden values: absent for most keys. Keeping even the
    /// removal context out of line matters: the keyspace table holds this struct inline, and
    /// with no peers the server drops removal metadata after every write.
    extra: Option<Box<Extra>>,
}

/// Bytes of a `KeyState`: the value (one string write inline, or a collection header) 56, box 8.
pub const KEY_STATE_BYTES_MAX: usize = 64;
const _: () = assert!(std::mem::size_of::<KeyState>() <= KEY_STATE_BYTES_MAX);

impl KeyState {
    pub fn new() -> KeyState {
        KeyState::default()
    }

    fn values(&self) -> impl Iterator<Item = &Value> + '_ {
        self.value
            .iter()
            .chain(self.extra.iter().flat_map(|x| x.hidden.iter()))
    }

    fn values_mut(&mut self) -> impl Iterator<Item = &mut Value> + '_ {
        let KeyState { value, extra, .. } = self;
        value
            .iter_mut()
            .chain(extra.iter_mut().flat_map(|x| x.hidden.iter_mut()))
    }

    fn extra_mut(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Box::default)
    }

    fn value_covered(&self, stamp: Stamp) -> bool {
        self.extra
            .as_ref()
            .is_some_and(|x| x.removed.covers(stamp) || x.value_removed.covers(stamp))
    }

    fn expire_covered(&self, stamp: Stamp) -> bool {
        self.extra
            .as_ref()
            .is_some_and(|x| x.removed.covers(stamp) || x.expire_removed.covers(stamp))
    }

    /// Merges a DEL / SET-without-KEEPTTL context (allocating the rare part only if needed).
    fn merge_removed(&mut self, observed: &VersionVector) {
        if !observed.is_empty() {
            self.extra_mut().removed.merge(observed);
        }
    }

    /// Takes the value of type `tag` out (from `value` or `hidden`).
    fn take(&mut self, tag: TypeTag) -> Option<Value> {
        if self.value.as_ref().is_some_and(|v| v.type_tag() == tag) {
            return self.value.take();
        }
        let x = self.extra.as_mut()?;
        let i = x.hidden.iter().position(|v| v.type_tag() == tag)?;
        Some(x.hidden.swap_remove(i))
    }

    /// Puts a value back; `normalize` then decides which one is visible.
    fn put(&mut self, v: Value) {
        if self.value.is_none() {
            self.value = Some(v);
        } else {
            self.extra_mut().hidden.push(v);
        }
    }

    fn take_str(&mut self) -> StrCrdt {
        match self.take(TypeTag::String) {
            Some(Value::Str(s)) => s,
            Some(other) => {
                self.put(other);
                StrCrdt::new()
            }
            None => StrCrdt::new(),
        }
    }

    fn take_set(&mut self) -> OrSet {
        match self.take(TypeTag::Set) {
            Some(Value::Set(s)) => s,
            Some(other) => {
                self.put(other);
                OrSet::new()
            }
            None => OrSet::new(),
        }
    }

    /// Applies `f` to the value of type `tag` (a new empty one when absent), then puts it
    /// back; returns whether the write was fresh.
    ///
    /// A write a key removal covers arrived after a DEL (or SET) that had seen it. What it
    /// adds is removed again at once, but what it removes must still go: the DEL's context
    /// names only what its site still held or remembered, and that site may have collected
    /// the context of this very write (an HSET over another site's value, say) before every
    /// replica had applied it. A HyperLogLog raise carries no removal and is simply dropped.
    fn apply_typed(
        &mut self,
        stamp: Stamp,
        tag: TypeTag,
        f: impl FnOnce(&mut Value) -> bool,
    ) -> bool {
        let covered = self.value_covered(stamp);
        if covered && tag == TypeTag::Hll {
            return false;
        }
        let mut v = match self.take(tag) {
            Some(v) => v,
            None => match tag {
                TypeTag::String => Value::Str(StrCrdt::new()),
                TypeTag::Set => Value::Set(OrSet::new()),
                TypeTag::Hash => Value::Hash(HashCrdt::new()),
                TypeTag::ZSet => Value::ZSet(ZSetCrdt::new()),
                TypeTag::List => Value::List(ListCrdt::new()),
                TypeTag::Hll => Value::Hll(HllCrdt::new()),
                TypeTag::Stream => Value::Stream(StreamCrdt::new()),
            },
        };
        let fresh = f(&mut v);
        if covered {
            if let Some(x) = &self.extra {
                v.remove_context(&x.removed);
                v.remove_context(&x.value_removed);
            }
        }
        self.put(v);
        fresh && !covered
    }

    fn live_types(&self) -> usize {
        self.values().filter(|v| v.is_live()).count()
    }

    /// Removes from every value what `observed` covers; records counter baselines even when
    /// no string value is held yet (the increments may arrive later).
    fn remove_values(&mut self, observed: &Observed) {
        let mut has_str = false;
        for v in self.values_mut() {
            has_str |= v.type_tag() == TypeTag::String;
            v.remove_observed(observed);
        }
        if !has_str && !observed.incs.is_empty() {
            let mut s = StrCrdt::new();
            s.remove(&VersionVector::new(), &observed.incs);
            self.put(Value::Str(s));
        }
    }

    /// Re-establishes the invariants: blank values dropped, the live value with the highest
    /// stamp in `value`, the rest in `hidden`, no empty `extra`.
    fn normalize(&mut self) {
        let single = self.extra.as_ref().is_none_or(|x| x.hidden.is_empty());
        if single {
            if self.value.as_ref().is_some_and(|v| v.is_blank()) {
                self.value = None;
            }
        } else {
            let hidden = self
                .extra
                .as_mut()
                .map(|x| std::mem::take(&mut x.hidden))
                .unwrap_or_default();
            let mut all: SmallVec<[Value; 2]> = self
                .value
                .take()
                .into_iter()
                .chain(hidden)
                .filter(|v| !v.is_blank())
                .collect();
            // One order for equal states, whatever order the values arrived in: by type, so
            // that with no live value the first type holds the dead value's place.
            all.sort_by_key(Value::type_tag);
            let win = all
                .iter()
                .enumerate()
                .filter(|(_, v)| v.is_live())
                .max_by_key(|(_, v)| v.live_stamp())
                .map_or(0, |(i, _)| i);
            if win < all.len() {
                self.value = Some(all.remove(win));
            }
            if !all.is_empty() {
                self.extra_mut().hidden = all.into_vec();
            }
        }
        if self.extra.as_ref().is_some_and(|x| x.is_blank()) {
            self.extra = None;
        }
    }

    /// The stamps of the writes this key holds now (values, elements, TTLs), without the
    /// removal contexts merged from other sites' removals: those may name writes this site
    /// has never seen (a context made elsewhere covers what its origin had seen).
    pub fn live_stamps(&self) -> VersionVector {
        let mut vv = VersionVector::new();
        for v in self.values() {
            match v {
                Value::Str(s) => s.observe_into(&mut vv),
                Value::Set(s) => s.live_into(&mut vv),
                Value::Hash(h) => h.live_into(&mut vv),
                Value::ZSet(z) => z.live_into(&mut vv),
                Value::List(l) => l.live_into(&mut vv),
                Value::Hll(h) => h.live_into(&mut vv),
                Value::Stream(x) => x.live_into(&mut vv),
            }
        }
        if let Some(x) = &self.extra {
            for (s, _) in x.expire.0.iter() {
                vv.observe(*s);
            }
        }
        vv
    }

    /// The increments of the string counter held here, per origin, as applied here (not
    /// merged with the baselines a removal recorded): what a site that evicts the key has
    /// received of each origin.
    pub fn counter_totals(&self) -> SmallVec<[(ReplicaId, IncTotals); 1]> {
        for v in self.values() {
            if let Value::Str(s) = v {
                if let Some(c) = s.counter() {
                    return c.totals().map(|(r, t)| (r, *t)).collect();
                }
            }
        }
        SmallVec::new()
    }

    /// Continues the string counter's per-origin totals from `totals`
    /// (`Counter::seed_totals`), on the string value held (if any: without one, no removal
    /// recorded a baseline here, and totals alone would show as a value).
    pub fn seed_counter_totals(&mut self, totals: &[(ReplicaId, IncTotals)]) {
        for v in self.values_mut() {
            if let Value::Str(s) = v {
                s.seed_counter_totals(totals);
                return;
            }
        }
    }

    /// Everything seen at this key: a local removal carries it.
    pub fn observed(&self) -> Observed {
        let mut stamps = VersionVector::new();
        let mut incs: SmallVec<[(ReplicaId, IncTotals); 1]> = SmallVec::new();
        for v in self.values() {
            v.observe_into(&mut stamps);
            if let Value::Str(s) = v {
                if let Some(c) = s.counter() {
                    incs = c.observed();
                }
            }
        }
        if let Some(x) = &self.extra {
            stamps.merge(&x.removed);
            stamps.merge(&x.value_removed);
            stamps.merge(&x.expire_removed);
            stamps.merge(&x.removers);
            for (s, _) in x.expire.0.iter() {
                stamps.observe(*s);
            }
        }
        Observed { stamps, incs }
    }

    /// What freeing this state's values costs, as Redis's `lazyfreeGetFreeEffort` counts it:
    /// one per string or HyperLogLog, one per element of a collection (hidden values
    /// included). UNLINK frees a value elsewhere only when this exceeds a threshold.
    pub fn free_effort(&self) -> usize {
        self.values()
            .map(|v| match v {
                Value::Str(_) | Value::Hll(_) => 1,
                Value::Set(s) => s.len(),
                Value::Hash(h) => h.len(),
                Value::ZSet(z) => z.len(),
                Value::List(l) => l.len(),
                Value::Stream(s) => usize::try_from(s.len()).unwrap_or(usize::MAX),
            })
            .fold(0, usize::saturating_add)
    }

    /// Moves out the collection values (sets, hashes, sorted sets, lists, streams), for the
    /// caller to free elsewhere (FLUSHALL ASYNC), and returns them. Only for a replica with no
    /// peers, just before it applies a removal carrying this state's own `observed()`: that
    /// removal leaves such values blank, and `collect_all` then drops what is left, so the
    /// state ends as it would have with them, without removing their elements one by one.
    /// Strings and HyperLogLogs stay (freeing one is one deallocation).
    pub fn take_collections(&mut self) -> Vec<Value> {
        let is_collection = |v: &Value| {
            matches!(
                v,
                Value::Set(_) | Value::Hash(_) | Value::ZSet(_) | Value::List(_) | Value::Stream(_)
            )
        };
        let mut out = Vec::new();
        if self.value.as_ref().is_some_and(is_collection) {
            out.extend(self.value.take());
        }
        if let Some(x) = &mut self.extra {
            let (taken, kept) = std::mem::take(&mut x.hidden)
                .into_iter()
                .partition(is_collection);
            x.hidden = kept;
            out.extend::<Vec<Value>>(taken);
        }
        if !out.is_empty() {
            self.normalize();
        }
        out
    }

    /// Applies the write `stamp` with `effect`, local or remote. Idempotent and convergent.
    pub fn apply<B: AsRef<[u8]>>(&mut self, stamp: Stamp, effect: &Effect<B>) -> Applied {
        let before = self.live_types();
        let ignored = match effect {
            Effect::Assign {
                value,
                observed,
                keep_ttl,
            } => {
                if !observed.stamps.is_empty() {
                    let x = self.extra_mut();
                    x.removers.observe(stamp);
                    if *keep_ttl {
                        x.value_removed.merge(&observed.stamps);
                    } else {
                        x.removed.merge(&observed.stamps);
                        x.expire.remove(&observed.stamps);
                    }
                }
                self.remove_values(observed);
                if self.value_covered(stamp) {
                    true
                } else {
                    let mut s = self.take_str();
                    let fresh = s.assign(stamp, value.as_ref());
                    self.put(Value::Str(s));
                    !fresh
                }
            }
            Effect::Incr { delta, at } => {
                let mut s = self.take_str();
                let fresh = s.incr(stamp, delta, at);
                self.put(Value::Str(s));
                !fresh
            }
            // An edit removes nothing; one a removal already applied covers was removed.
            Effect::StrEdit(edit) => {
                if self.value_covered(stamp) {
                    true
                } else {
                    let mut s = self.take_str();
                    let fresh = s.edit(stamp, edit);
                    self.put(Value::Str(s));
                    !fresh
                }
            }
            Effect::Remove { observed } => {
                // The removal context also names the DEL itself, so a later write carries
                // whether it had seen this DEL: a HyperLogLog raise that had not loses to it
                // (DEL wins, docs/conflicts.md "HyperLogLog"). Harmless for every other write:
                // the writes of the DEL's origin to this key that its stamp covers were all
                // seen by the DEL and arrive before it.
                let mut with_self = observed.clone();
                with_self.stamps.observe(stamp);
                self.merge_removed(&with_self.stamps);
                if let Some(x) = &mut self.extra {
                    x.expire.remove(&observed.stamps);
                }
                self.remove_values(&with_self);
                false
            }
            Effect::Expire { expire, observed } => {
                if !observed.is_empty() {
                    let x = self.extra_mut();
                    x.removers.observe(stamp);
                    x.expire_removed.merge(observed);
                    x.expire.remove(observed);
                }
                if self.expire_covered(stamp) {
                    true
                } else {
                    !self
                        .extra_mut()
                        .expire
                        .write(stamp, *expire, &VersionVector::new())
                }
            }
            // Like an EXPIRE's removals, without a write of its own.
            Effect::ExpireRetire { observed } => {
                if !observed.is_empty() {
                    let x = self.extra_mut();
                    x.removers.observe(stamp);
                    x.expire_removed.merge(observed);
                    x.expire.remove(observed);
                }
                false
            }
            Effect::SetAdd { member } => {
                if self.value_covered(stamp) {
                    true
                } else {
                    let mut s = self.take_set();
                    let fresh = s.add(stamp, member.as_ref());
                    self.put(Value::Set(s));
                    !fresh
                }
            }
            Effect::SetRem { member, observed } => {
                let dominated = match &self.extra {
                    Some(x) => x.removed.dominates(observed),
                    None => observed.is_empty(),
                };
                if !dominated {
                    // Named in the member's context until every replica has it, so that a
                    // delta full sync finds the key (docs/replication.md §6).
                    let mut s = self.take_set();
                    s.remove_by(stamp, member.as_ref(), observed);
                    self.put(Value::Set(s));
                }
                false
            }
            Effect::Hash(op) => !self.apply_typed(stamp, TypeTag::Hash, |v| match v {
                Value::Hash(h) => h.apply(stamp, op),
                _ => false,
            }),
            Effect::ZSet(op) => !self.apply_typed(stamp, TypeTag::ZSet, |v| match v {
                Value::ZSet(z) => z.apply(stamp, op),
                _ => false,
            }),
            Effect::List(op) => !self.apply_typed(stamp, TypeTag::List, |v| match v {
                Value::List(l) => l.apply(stamp, op),
                _ => false,
            }),
            Effect::Stream(op) => !self.apply_typed(stamp, TypeTag::Stream, |v| match v {
                Value::Stream(x) => x.apply(stamp, op),
                _ => false,
            }),
            // HyperLogLog: a DEL wins over a concurrent PFADD/PFMERGE (docs/conflicts.md,
            // "HyperLogLog"). A raise that had not seen every removal context held here was
            // concurrent with one of those removals: it is dropped, as `HllCrdt::remove_observed`
            // drops it where the raise arrived first.
            Effect::Hll(op)
                if self
                    .extra
                    .as_ref()
                    .is_some_and(|x| !op.saw(&x.removed) || !op.saw(&x.value_removed)) =>
            {
                true
            }
            Effect::Hll(op) => !self.apply_typed(stamp, TypeTag::Hll, |v| match v {
                Value::Hll(h) => h.apply(stamp, op),
                _ => false,
            }),
        };
        self.normalize();
        let after = self.live_types();
        Applied {
            type_conflict: !ignored && before < 2 && after >= 2,
            ignored,
        }
    }

    /// `apply` followed by `collect_all`, for a replica whose writes are stable at once (no
    /// peers), where that can skip the metadata `collect_all` would drop at once: a string
    /// edit on a plain key (no removal contexts, TTL or hidden values) whose string folds it
    /// in place (`StrCrdt::edit_folded`), or a HyperLogLog write on a plain key holding a
    /// HyperLogLog with nothing pending (`HllCrdt::apply_folded`). `None`, with nothing
    /// changed, otherwise: the caller applies and collects.
    pub fn apply_folded<B: AsRef<[u8]>>(
        &mut self,
        stamp: Stamp,
        effect: &Effect<B>,
    ) -> Option<Applied> {
        if self.extra.is_some() {
            return None;
        }
        match (effect, &mut self.value) {
            (Effect::StrEdit(edit), Some(Value::Str(s))) => {
                s.edit_folded(stamp, edit).then_some(Applied {
                    type_conflict: false,
                    ignored: false,
                })
            }
            (Effect::Hll(op), Some(Value::Hll(h))) if h.is_live() => {
                h.apply_folded(stamp, op).map(|fresh| Applied {
                    type_conflict: false,
                    ignored: !fresh,
                })
            }
            _ => None,
        }
    }

    /// The effect of SET/APPEND/SETRANGE... writing `value`. `keep_ttl` (SET KEEPTTL, APPEND,
    /// SETRANGE) is kept only when the key exists with expire writes; otherwise the write also
    /// removes the observed expire writes (Redis: a new key has no TTL).
    pub fn assign_effect<B: AsRef<[u8]>>(&self, value: B, keep_ttl: bool) -> Effect<B> {
        let keep = keep_ttl
            && !self.is_empty()
            && self.extra.as_ref().is_some_and(|x| !x.expire.is_empty());
        Effect::Assign {
            value,
            observed: self.observed(),
            keep_ttl: keep,
        }
    }

    /// The effect of APPEND, SETRANGE, SETBIT, BITFIELD SET... as an edit of the string
    /// shown (docs/conflicts.md §1.1). `None` where an edit would not show what Redis shows
    /// (unobserved increments under the bytes, a value of another type hidden by a type
    /// conflict) or the key shows no string: the caller assigns the whole value instead.
    pub fn edit_effect<B: AsRef<[u8]>>(&self, edit: StrEdit<B>) -> Option<Effect<B>> {
        self.can_edit().then_some(Effect::StrEdit(edit))
    }

    /// Whether `edit_effect` gives an edit.
    pub fn can_edit(&self) -> bool {
        let Some(Value::Str(s)) = &self.value else {
            return false;
        };
        let hidden = self
            .extra
            .as_ref()
            .is_some_and(|x| x.hidden.iter().any(|v| v.is_live()));
        s.is_live() && !s.has_live_increments() && !hidden && s.bytes().is_some()
    }

    /// The effect of DEL/UNLINK/expiry of this key.
    pub fn remove_effect<B: AsRef<[u8]>>(&self) -> Effect<B> {
        Effect::Remove {
            observed: self.observed(),
        }
    }

    /// The effect of EXPIRE (`AtMs`) or PERSIST (`Persist`).
    pub fn expire_effect<B: AsRef<[u8]>>(&self, expire: Expire) -> Effect<B> {
        Effect::Expire {
            expire,
            observed: self.observed().stamps,
        }
    }

    /// The write that retires this key's TTL writes once they time nothing and never can
    /// again: `Effect::ExpireRetire` of them, when the key holds expire writes that time no
    /// value (an empty key's, left by EXPIRE ∥ DEL) or only PERSISTs (which beat EXPIREs
    /// concurrent with them, and `everywhere` says none can still arrive), and `everywhere`
    /// covers them (for an empty key, everything the key holds: no write concurrent with its
    /// removal can arrive either). `None` otherwise.
    ///
    /// Why a replicated write and not a local drop, as for removal contexts: a site that
    /// dropped them would then write the key (SET, EXPIRE) with a context that does not name
    /// them, and a site that had not dropped them yet would keep them against that write (a
    /// TTL on the new key, or a PERSIST beating the new EXPIRE). The retiring write reaches
    /// every site before any later write of its site.
    pub fn retire_expire_effect<B: AsRef<[u8]>>(
        &self,
        everywhere: &VersionVector,
    ) -> Option<Effect<B>> {
        let x = self.extra.as_ref()?;
        if x.expire.is_empty() {
            return None;
        }
        let empty = self.is_empty();
        if !empty && !x.expire.is_inert() {
            return None;
        }
        let mut writes = VersionVector::new();
        for (s, _) in x.expire.0.iter() {
            writes.observe(*s);
        }
        let settled = if empty {
            everywhere.dominates(&self.observed().stamps)
        } else {
            everywhere.dominates(&writes)
        };
        settled.then_some(Effect::ExpireRetire { observed: writes })
    }

    /// The effect of SREM of `member`.
    pub fn set_rem_effect<B: AsRef<[u8]>>(&self, member: B) -> Effect<B> {
        Effect::SetRem {
            member,
            observed: self.observed().stamps,
        }
    }

    /// The string shown; `None` when the key is empty or not a string.
    pub fn view_str(&self) -> Option<StrView<'_>> {
        match &self.value {
            Some(Value::Str(s)) => s.view(),
            _ => None,
        }
    }

    /// The visible type; `None` when the key is empty.
    pub fn type_tag(&self) -> Option<TypeTag> {
        self.value
            .as_ref()
            .filter(|v| v.is_live())
            .map(Value::type_tag)
    }

    /// The visible set; `None` when the key is empty or not a set.
    pub fn set(&self) -> Option<&OrSet> {
        match &self.value {
            Some(Value::Set(s)) if !s.is_empty() => Some(s),
            _ => None,
        }
    }

    /// The visible value (`None` when the key is empty).
    /// Effects that rebuild this key's visible value on an empty key (RENAME, COPY): the
    /// caller removes the destination first, then applies them in order.
    pub fn recreate_effects(&self) -> Vec<Effect<Vec<u8>>> {
        match &self.value {
            Some(v) if v.is_live() => match v {
                Value::Str(s) => s
                    .view()
                    .map(|view| Effect::Assign {
                        value: view.to_bytes(),
                        observed: Observed::new(),
                        keep_ttl: false,
                    })
                    .into_iter()
                    .collect(),
                Value::Set(s) => s
                    .members()
                    .map(|m| Effect::SetAdd { member: m.to_vec() })
                    .collect(),
                Value::Hash(h) => h.recreate_ops().into_iter().map(Effect::Hash).collect(),
                Value::ZSet(z) => z.recreate_ops().into_iter().map(Effect::ZSet).collect(),
                Value::List(l) => l.recreate_ops().into_iter().map(Effect::List).collect(),
                Value::Hll(h) => h.recreate_ops().into_iter().map(Effect::Hll).collect(),
                Value::Stream(x) => x.recreate_ops().into_iter().map(Effect::Stream).collect(),
            },
            _ => Vec::new(),
        }
    }

    /// The visible hash, if the key holds one.
    pub fn hash(&self) -> Option<&HashCrdt> {
        match &self.value {
            Some(Value::Hash(h)) if h.is_live() => Some(h),
            _ => None,
        }
    }

    /// The visible sorted set, if the key holds one.
    pub fn zset(&self) -> Option<&ZSetCrdt> {
        match &self.value {
            Some(Value::ZSet(z)) if z.is_live() => Some(z),
            _ => None,
        }
    }

    /// The visible sorted set's encoding hint becomes Redis's skiplist
    /// (`ZSetCrdt::convert_to_skiplist`); nothing when the key holds no sorted set.
    pub fn convert_zset_to_skiplist(&mut self) {
        if let Some(Value::ZSet(z)) = &mut self.value {
            if z.is_live() {
                z.convert_to_skiplist();
            }
        }
    }

    /// The visible list, if the key holds one.
    pub fn list(&self) -> Option<&ListCrdt> {
        match &self.value {
            Some(Value::List(l)) if l.is_live() => Some(l),
            _ => None,
        }
    }

    /// The visible stream, if the key holds one.
    pub fn stream(&self) -> Option<&StreamCrdt> {
        match &self.value {
            Some(Value::Stream(x)) if x.is_live() => Some(x),
            _ => None,
        }
    }

    /// The visible HyperLogLog, if the key holds one.
    pub fn hll(&self) -> Option<&HllCrdt> {
        match &self.value {
            Some(Value::Hll(h)) if h.is_live() => Some(h),
            _ => None,
        }
    }

    pub fn value(&self) -> Option<&Value> {
        self.value.as_ref().filter(|v| v.is_live())
    }

    /// Live values of other types hidden by a type conflict.
    pub fn hidden(&self) -> impl Iterator<Item = &Value> + '_ {
        self.extra
            .iter()
            .flat_map(|x| x.hidden.iter())
            .filter(|v| v.is_live())
    }

    /// The key's deadline in Unix ms; `None` when it has no TTL or is empty.
    pub fn expire_at_ms(&self) -> Option<u64> {
        if self.is_empty() {
            return None;
        }
        self.extra.as_ref().and_then(|x| x.expire.at_ms())
    }

    /// An empty key that still holds expire writes (left by DEL ∥ EXPIRE). A command that
    /// creates the key should first apply and send `remove_effect()`, as Redis creates keys
    /// without a TTL.
    pub fn has_orphan_expire(&self) -> bool {
        self.is_empty() && self.extra.as_ref().is_some_and(|x| !x.expire.is_empty())
    }

    /// The expire register (all concurrent expire writes held).
    pub fn expire_reg(&self) -> Option<&ExpireReg> {
        self.extra.as_ref().map(|x| &x.expire)
    }

    /// No visible value: the key does not exist for clients.
    pub fn is_empty(&self) -> bool {
        !self.value.as_ref().is_some_and(|v| v.is_live())
    }

    /// Whether metadata that `collect_all` would drop is held (removal contexts, cleared
    /// counters, set removal contexts, dead values, expire writes with no effect). An empty
    /// key without metadata can be dropped from the keyspace.
    pub fn has_metadata(&self) -> bool {
        if self.values().any(|v| v.has_metadata() || !v.is_live()) {
            return true;
        }
        self.extra.as_ref().is_some_and(|x| {
            !x.removed.is_empty()
                || !x.value_removed.is_empty()
                || !x.expire_removed.is_empty()
                || !x.removers.is_empty()
                || (!x.expire.is_empty() && (x.expire.is_inert() || self.is_empty()))
        })
    }

    /// Appends the complete state: the format byte `KEY_STATE_V2`; the values (the visible
    /// one first, then hidden and dead ones), each as `Value::encode_state`; the removal
    /// contexts `removed`, `value_removed`, `expire_removed`; the expire writes; `removers`.
    pub fn encode_state(&self, out: &mut Vec<u8>) {
        codec::put_u8(out, KEY_STATE_V2);
        let n_values = self.values().count();
        codec::put_varint(out, n_values as u64);
        for v in self.values() {
            v.encode_state(out);
        }
        match &self.extra {
            Some(x) => {
                codec::put_vv(out, &x.removed);
                codec::put_vv(out, &x.value_removed);
                codec::put_vv(out, &x.expire_removed);
                x.expire.encode_state(out);
                codec::put_vv(out, &x.removers);
            }
            None => {
                let none = VersionVector::new();
                codec::put_vv(out, &none);
                codec::put_vv(out, &none);
                codec::put_vv(out, &none);
                ExpireReg::new().encode_state(out);
                codec::put_vv(out, &none);
            }
        }
    }

    /// Decodes what `encode_state` wrote (or version 1 of it), leaving the reader after it.
    /// `BadTag`: an unknown format byte. `Invalid`: two values of one type, or a state
    /// `apply` never leaves (a blank value, a hidden value that should be the visible one, an
    /// expire write a removal context covers...).
    pub fn decode_state(r: &mut Reader<'_>) -> Result<KeyState, DecodeError> {
        let format = r.u8()?;
        if format != KEY_STATE_V1 && format != KEY_STATE_V2 {
            return Err(DecodeError::BadTag(format));
        }
        let n = r.count("key values")?;
        let mut values: SmallVec<[Value; 2]> = SmallVec::new();
        for _ in 0..n {
            let v = Value::decode_state(r)?;
            if values.iter().any(|o| o.type_tag() == v.type_tag()) {
                return Err(DecodeError::Invalid("two values of one type"));
            }
            values.push(v);
        }
        let removed = r.vv_strict()?;
        let value_removed = r.vv_strict()?;
        let expire_removed = r.vv_strict()?;
        let expire = ExpireReg::decode_state(r)?;
        let removers = if format == KEY_STATE_V2 {
            r.vv_strict()?
        } else {
            VersionVector::new()
        };
        if expire
            .0
            .iter()
            .any(|(s, _)| removed.covers(*s) || expire_removed.covers(*s))
        {
            return Err(DecodeError::Invalid("expire write removed"));
        }
        let mut values = values.into_iter();
        let mut k = KeyState {
            value: values.next(),
            extra: None,
        };
        let extra = Extra {
            hidden: values.collect(),
            removed,
            expire,
            expire_removed,
            value_removed,
            removers,
        };
        if !extra.is_blank() {
            k.extra = Some(Box::new(extra));
        }
        let mut normal = k.clone();
        normal.normalize();
        if normal != k {
            return Err(DecodeError::Invalid("key state not normalized"));
        }
        Ok(k)
    }

    /// State join (full sync): afterwards `self` is, in what it shows and in how it takes
    /// later writes, the state of a replica that applied the writes of both sides.
    ///
    /// Each side's removal contexts (`removed` and `value_removed` for values, `removed` and
    /// `expire_removed` for expire writes) are applied to the other side's values and expire
    /// writes: a write held on one side only that the other side's context covers was removed
    /// there. Then the values of each type are joined by that type's `merge` (a type present
    /// on one side only is taken as it is), the expire writes and the three contexts are
    /// unioned, and `normalize` applies the type-conflict rule: the live value with the
    /// highest live stamp is visible, the others hidden. Commutative, associative and
    /// idempotent (a HyperLogLog's Redis bytes aside, whose layout depends on order).
    ///
    /// Exact when neither side had dropped (by `collect`) the removal context of a removal
    /// the other side had not applied: a write held by the other side that such a removal
    /// removed would be kept (the context that said so is gone). `collect` keeps a context
    /// until all of it is stable and so is every write that merged into it (a DEL and an
    /// SREM name themselves in their contexts; SET, APPEND and EXPIRE are in `removers`), so
    /// this holds between replicas that each collected only with vectors the other had
    /// delivered. Replicas that did not (one was quarantined) need `merge_with_contexts`.
    ///
    /// Returns `type_conflict` when the join made a second type live, and `ignored` when
    /// `other` brought nothing new (`self` is unchanged).
    pub fn merge(&mut self, other: &KeyState) -> Applied {
        let before = self.clone();
        let none = Context::default();
        self.join(other.clone(), &none, &none);
        self.applied_since(&before)
    }

    /// State join with causal contexts, the ORSWOT rule: `mine` and `theirs` are causal
    /// contexts of the replicas holding `self` and `other` (every write a context covers was
    /// delivered there, so that replica holds it or has removed it). A write held on one
    /// side only that the other side's context covers was removed there: it goes, whether or
    /// not the removal's context is still held anywhere. One the other side's context does
    /// not cover is new to it and stays. Each side is judged by its own context, so both
    /// replicas of a pair decide alike whichever of them merges, and the result is what a
    /// replica that applied the writes of both sides holds, whatever either side collected
    /// (docs/replication.md §6).
    ///
    /// Applies to string writes, set dots, HyperLogLog raises and expire writes here; hash,
    /// sorted-set, list and stream values take the contexts in their own `merge_with_contexts` (a
    /// side holding no such value takes an empty one, which says: what its context covers
    /// was removed here). A key one side does not hold at all is `KeyState::new()` there (so
    /// a receiver of a complete full sync also merges the sender's "nothing" into keys the
    /// sender lacks). Commutative (swapping the contexts with the sides), idempotent, and,
    /// given the join of the contexts as the context of a result, associative; with empty
    /// contexts it is `merge`. The contexts are not kept in the result: the replica's own
    /// context stands for it afterwards.
    pub fn merge_with_contexts(
        &mut self,
        other: &KeyState,
        mine: &Context,
        theirs: &Context,
    ) -> Applied {
        let before = self.clone();
        let mut their_state = other.clone();
        self.drop_unheld(other, theirs);
        their_state.drop_unheld(&before, mine);
        let tags: SmallVec<[TypeTag; 4]> =
            [TypeTag::Hash, TypeTag::ZSet, TypeTag::List, TypeTag::Stream]
                .into_iter()
                .filter(|t| {
                    before.values().any(|v| v.type_tag() == *t)
                        || other.values().any(|v| v.type_tag() == *t)
                })
                .collect();
        self.hold_collections(&tags);
        their_state.hold_collections(&tags);
        self.join(their_state, mine, theirs);
        self.applied_since(&before)
    }

    /// The join itself (see `merge`); `theirs` is the other side's state, consumed; `mine`
    /// and `theirs_ctx` the sides' causal contexts for the collection types' merges.
    fn join(&mut self, mut theirs: KeyState, mine: &Context, theirs_ctx: &Context) {
        theirs.remove_contexts_of(self);
        self.remove_contexts_of(&theirs);
        let KeyState { value, extra } = theirs;
        let (hidden, extra) = match extra {
            Some(mut x) => (std::mem::take(&mut x.hidden), Some(x)),
            None => (Vec::new(), None),
        };
        for v in value.into_iter().chain(hidden) {
            match self.take(v.type_tag()) {
                Some(mut held) => {
                    let same = held.merge_same(&v, mine, theirs_ctx);
                    debug_assert!(same, "values paired by type");
                    self.put(held);
                }
                None => self.put(v),
            }
        }
        if let Some(x) = extra.filter(|x| !x.is_blank()) {
            let held = self.extra_mut();
            held.removed.merge(&x.removed);
            held.value_removed.merge(&x.value_removed);
            held.expire_removed.merge(&x.expire_removed);
            held.expire.merge(&x.expire);
            held.removers.merge(&x.removers);
        }
        if let Some(x) = &self.extra {
            // The joined contexts once more over the joined values: what they make redundant
            // (set and member contexts they cover) goes, so that the result does not depend
            // on which side's contexts reached which value first. Removing what a context
            // covers twice removes nothing more; a HyperLogLog passed both sides' contexts
            // already.
            let mut key_ctx = x.removed.clone();
            key_ctx.merge(&x.value_removed);
            let KeyState { value, extra } = self;
            let hidden = extra.iter_mut().flat_map(|x| x.hidden.iter_mut());
            for v in value.iter_mut().chain(hidden) {
                match v {
                    Value::Set(s) => s.trim_contexts(&key_ctx),
                    Value::Hll(_) => {}
                    _ => v.remove_context(&key_ctx),
                }
            }
        }
        self.normalize();
    }

    fn applied_since(&self, before: &KeyState) -> Applied {
        Applied {
            type_conflict: before.live_types() < 2 && self.live_types() >= 2,
            ignored: *self == *before,
        }
    }

    /// Drops the writes `floor` (the other side's causal context) covers that this side
    /// holds and `other` does not (string writes, set dots, HyperLogLog raises, expire
    /// writes; see `merge_with_contexts`).
    fn drop_unheld(&mut self, other: &KeyState, floor: &Context) {
        if floor.is_empty() {
            return;
        }
        let other_str = other.values().find_map(|v| match v {
            Value::Str(s) => Some(s),
            _ => None,
        });
        let other_set = other.values().find_map(|v| match v {
            Value::Set(s) => Some(s),
            _ => None,
        });
        let other_hll = other.values().find_map(|v| match v {
            Value::Hll(h) => Some(h),
            _ => None,
        });
        for v in self.values_mut() {
            match v {
                Value::Str(s) => {
                    s.retain_writes(|w| !floor.covers(w) || other_str.is_some_and(|o| o.holds(w)))
                }
                Value::Set(s) => s.retain_dots(|m, d| {
                    !floor.covers(d) || other_set.is_some_and(|o| o.has_dot(m, d))
                }),
                Value::Hll(h) => h.drop_unheld(other_hll, floor),
                // They take the contexts in their own merge (`merge_with_contexts`).
                Value::Hash(_) | Value::ZSet(_) | Value::List(_) | Value::Stream(_) => {}
            }
        }
        if let Some(x) = &mut self.extra {
            let theirs = other.extra.as_ref().map(|x| &x.expire);
            x.expire
                .0
                .retain(|s| !floor.covers(s) || theirs.is_some_and(|e| e.0.contains(s)));
        }
    }

    /// Adds an empty value of each of the types `tags` that this side does not hold, so that
    /// the join merges the other side's value of that type with this side's context (it then
    /// says: what the context covers was removed here).
    fn hold_collections(&mut self, tags: &[TypeTag]) {
        for &tag in tags {
            if self.values().any(|v| v.type_tag() == tag) {
                continue;
            }
            match tag {
                TypeTag::Hash => self.put(Value::Hash(HashCrdt::new())),
                TypeTag::ZSet => self.put(Value::ZSet(ZSetCrdt::new())),
                TypeTag::List => self.put(Value::List(ListCrdt::new())),
                TypeTag::Stream => self.put(Value::Stream(StreamCrdt::new())),
                TypeTag::String | TypeTag::Set | TypeTag::Hll => {}
            }
        }
    }

    /// Applies `other`'s removal contexts to this side's values and expire writes.
    fn remove_contexts_of(&mut self, other: &KeyState) {
        let Some(x) = &other.extra else {
            return;
        };
        for v in self.values_mut() {
            v.remove_context(&x.removed);
            v.remove_context(&x.value_removed);
        }
        if let Some(mine) = &mut self.extra {
            mine.expire.remove(&x.removed);
            mine.expire.remove(&x.expire_removed);
        }
    }

    /// Drops all removal metadata: removal contexts, cleared counters, set removal contexts,
    /// expire writes with no effect (PERSIST only) and expire writes of an empty key. Only
    /// for a replica with no peers, where every write is causally stable.
    pub fn collect_all(&mut self) {
        let empty = self.is_empty();
        for v in self.values_mut() {
            match v {
                Value::Str(s) => s.collect_all(),
                Value::Set(s) => s.collect(None),
                Value::Hash(h) => h.collect(None),
                Value::ZSet(z) => z.collect(None),
                Value::List(l) => l.collect(None),
                Value::Hll(h) => h.collect(None),
                Value::Stream(s) => s.collect(None),
            }
        }
        if let Some(x) = &mut self.extra {
            x.removed = VersionVector::new();
            x.value_removed = VersionVector::new();
            x.expire_removed = VersionVector::new();
            x.removers = VersionVector::new();
            if empty || x.expire.is_inert() {
                x.expire = ExpireReg::new();
            }
            // Dead values that only held metadata are blank now; normalize drops them.
        }
        self.normalize();
    }

    /// Drops the removal metadata `stable` covers: each removal context once `stable` covers
    /// all of it, and what the values' own `collect` drops. `stable` must be a version vector
    /// that every replica has delivered (no write it covers can still arrive). Live writes and
    /// counter totals are kept. Afterwards a redelivered duplicate of a write `stable` covers
    /// could come back: the caller must filter duplicates before `apply` (per-origin sequence
    /// numbers), as it does anyway.
    pub fn collect(&mut self, stable: &VersionVector) {
        self.collect_with(stable, stable);
    }

    /// `collect` while some replicas are left out of `stable` (quarantined peers): `stable`
    /// collects what a causal context stands in for once dropped (member contexts of sets,
    /// hashes, sorted sets; list removal records), and `everywhere` (delivered at every
    /// replica, those left out included, as of their last ack; no more than `stable`) what
    /// no context stands in for: the key's removal contexts, which decide a HyperLogLog raise
    /// concurrent with them (DEL wins, docs/conflicts.md §12) that a left-out replica may
    /// still hold, and the folds of increments and raises, which a removal observing part
    /// of them, still to come from such a replica, must find apart (docs/replication.md §6).
    pub fn collect_with(&mut self, stable: &VersionVector, everywhere: &VersionVector) {
        for v in self.values_mut() {
            match v {
                Value::Str(s) => s.collect(everywhere),
                Value::Set(s) => s.collect(Some(stable)),
                Value::Hash(h) => h.collect_with(Some(stable), Some(everywhere)),
                Value::ZSet(z) => z.collect_with(Some(stable), Some(everywhere)),
                Value::List(l) => l.collect(Some(stable)),
                Value::Hll(h) => h.collect(Some(everywhere)),
                Value::Stream(x) => x.collect(Some(everywhere)),
            }
        }
        if let Some(x) = &mut self.extra {
            // A context goes as a whole once `everywhere` covers all of it (per-entry
            // forgetting would empty it at the same moment) and every write that merged into
            // it (`removers`; a DEL names itself in its context): until then it still covers,
            // for a state merge, the writes its removals removed, even those already stable.
            if everywhere.dominates(&x.removers) {
                x.removers = VersionVector::new();
                for ctx in [&mut x.removed, &mut x.value_removed, &mut x.expire_removed] {
                    if everywhere.dominates(ctx) {
                        *ctx = VersionVector::new();
                    }
                }
            }
        }
        // Every removal of the key delivered everywhere (no removal context held: none
        // made, or all of them collected just now): a cleared counter entry whose increments
        // are too goes (`Counter::drop_settled`).
        if self
            .extra
            .as_ref()
            .is_none_or(|x| x.removed.is_empty() && x.value_removed.is_empty())
        {
            for v in self.values_mut() {
                if let Value::Str(s) = v {
                    s.drop_settled_counter(everywhere);
                }
            }
        }
        self.normalize();
    }

    /// The effect of INCR/INCRBY/DECRBY/INCRBYFLOAT of `delta` issued here by `origin`.
    pub fn incr_effect<B: AsRef<[u8]>>(&self, origin: ReplicaId, delta: Delta) -> Effect<B> {
        let at = self
            .values()
            .find_map(|v| match v {
                Value::Str(s) => s.counter(),
                _ => None,
            })
            .map_or(IncAt::Starts, |c: &Counter| c.next_at(origin, &delta));
        Effect::Incr { delta, at }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counter::Delta;
    use crate::dot::ReplicaId;
    use crate::dot::st;
    use crate::hlc::Hlc;

    type E = Effect<&'static [u8]>;

    /// FLUSHALL ASYNC with no peers: the removal of a key whose collection was taken out
    /// first leaves what the removal over the collection leaves, once collected, and the
    /// shard removed none of its elements (all of them are in the value taken, to be freed
    /// on another thread).
    #[test]
    fn taking_collections_before_a_removal_ends_as_the_removal() {
        let n = 50_000u64;
        let mut k = KeyState::new();
        for i in 0..n {
            let m = format!("member:{i}").into_bytes();
            k.apply(st(i + 1, 1), &Effect::SetAdd { member: m });
        }
        k.apply(
            st(n + 1, 1),
            &Effect::<&[u8]>::Expire {
                expire: crate::expire::Expire::AtMs(u64::MAX / 2),
                observed: VersionVector::new(),
            },
        );
        let mut slow = k.clone();
        let observed = slow.observed();
        slow.apply(st(n + 2, 1), &E::Remove { observed });
        slow.collect_all();

        let observed = k.observed();
        let taken = k.take_collections();
        assert_eq!(taken.len(), 1);
        match taken.first() {
            Some(Value::Set(s)) => assert_eq!(s.len() as u64, n, "no member removed"),
            other => panic!("{other:?}"),
        }
        assert!(k.is_empty());
        k.apply(st(n + 2, 1), &E::Remove { observed });
        k.collect_all();
        assert_eq!(k, slow);
        assert!(k.is_empty() && !k.has_metadata());

        // Strings stay: a removal frees one in one deallocation.
        let mut s = string_state(b"v");
        assert!(s.take_collections().is_empty());
        assert!(!s.is_empty());
    }

    /// A key holding the string `value`, assigned at `st(1, 1)`.
    fn string_state(value: &'static [u8]) -> KeyState {
        let mut s = KeyState::new();
        s.apply(
            st(1, 1),
            &E::Assign {
                value,
                observed: Observed::default(),
                keep_ttl: false,
            },
        );
        s
    }

    #[test]
    fn free_effort_counts_elements_and_one_per_string() {
        assert_eq!(KeyState::new().free_effort(), 0);
        assert_eq!(string_state(b"v").free_effort(), 1);
        let mut k = KeyState::new();
        for i in 0..100u64 {
            let m = format!("member:{i}").into_bytes();
            k.apply(st(i + 1, 1), &Effect::SetAdd { member: m });
        }
        assert_eq!(k.free_effort(), 100);
    }

    #[test]
    fn sizes_stay_small() {
        assert!(std::mem::size_of::<KeyState>() <= KEY_STATE_BYTES_MAX);
    }

    #[test]
    fn set_incr_append_like_redis() {
        let mut k = KeyState::new();
        let e: E = k.assign_effect(b"10", false);
        k.apply(st(1, 1), &e);
        let e: E = k.incr_effect(ReplicaId(1), Delta::Int(1));
        k.apply(st(2, 1), &e);
        assert_eq!(k.view_str(), Some(StrView::Int(11)));
        let mut bytes = k.view_str().unwrap().to_bytes();
        bytes.extend_from_slice(b"x");
        let e = k.assign_effect(bytes, true);
        k.apply(st(3, 1), &e);
        assert_eq!(k.view_str(), Some(StrView::Bytes(b"11x")));
        assert_eq!(k.type_tag(), Some(TypeTag::String));
    }

    #[test]
    fn del_removes_and_late_write_stays_removed() {
        let mut a = KeyState::new();
        let set: E = E::Assign {
            value: b"v",
            observed: Observed::new(),
            keep_ttl: false,
        };
        a.apply(st(1, 1), &set);
        let del: E = a.remove_effect();
        // Another replica receives the DEL before the SET.
        let mut b = KeyState::new();
        b.apply(st(2, 2), &del);
        let r = b.apply(st(1, 1), &set);
        assert!(r.ignored);
        assert!(b.is_empty());
        a.apply(st(2, 2), &del);
        assert!(a.is_empty());
        assert!(a.has_metadata());
        a.collect_all();
        assert!(!a.has_metadata());
        assert_eq!(a, KeyState::new());
    }

    #[test]
    fn type_conflict_latest_stamp_wins_and_observing_write_clears_it() {
        let mut k = KeyState::new();
        let set: E = E::Assign {
            value: b"v",
            observed: Observed::new(),
            keep_ttl: false,
        };
        let sadd: E = E::SetAdd { member: b"m" };
        assert!(!k.apply(st(5, 1), &set).type_conflict);
        let r = k.apply(st(4, 2), &sadd);
        assert!(r.type_conflict);
        assert_eq!(k.type_tag(), Some(TypeTag::String));
        assert_eq!(k.hidden().count(), 1);
        let del: E = k.remove_effect();
        k.apply(st(6, 1), &del);
        assert!(k.is_empty());
    }

    /// The ORSWOT rule with each side's context: a write held on one side only goes when the
    /// other side's context covers it, and stays when it does not, also when the other
    /// side's vector covers it but its gap (own ops it may have lost) leaves it out.
    #[test]
    fn merge_judges_each_side_by_its_own_context() {
        let add = |m: &'static [u8]| E::SetAdd { member: m };
        let mut a = KeyState::new();
        a.apply(st(1, 1), &add(b"x"));
        let mut b = a.clone();
        b.apply(st(4, 1), &add(b"y"));
        b.apply(st(6, 2), &add(b"z"));
        let rem: E = a.set_rem_effect(b"x");
        a.apply(st(7, 1), &rem);
        a.collect_all();
        let mut seen = VersionVector::new();
        seen.observe(st(10, 1));
        let ctx_a = Context {
            seen: seen.clone(),
            gap: None,
        };
        let ctx_b = Context::from({
            let mut v = VersionVector::new();
            v.observe(st(4, 1));
            v.observe(st(6, 2));
            v
        });
        let members = |k: &KeyState| {
            let mut m: Vec<Vec<u8>> = k
                .set()
                .map_or(Vec::new(), |s| s.members().map(<[u8]>::to_vec).collect());
            m.sort();
            m
        };
        // A removed x (collected) and, its vector says, y: both go; z is new to A.
        let mut ab = a.clone();
        ab.merge_with_contexts(&b, &ctx_a, &ctx_b);
        let mut ba = b.clone();
        ba.merge_with_contexts(&a, &ctx_b, &ctx_a);
        assert_eq!(members(&ab), vec![b"z".to_vec()]);
        assert_eq!(ab, ba);
        // With y's stamp in A's gap (A may have lost it), y stays, whichever side merges.
        let gapped = Context {
            seen,
            gap: Some(crate::dot::Gap {
                replica: ReplicaId(1),
                after: Hlc(2),
                upto: Hlc(5),
            }),
        };
        let mut ab = a.clone();
        ab.merge_with_contexts(&b, &gapped, &ctx_b);
        let mut ba = b.clone();
        ba.merge_with_contexts(&a, &ctx_b, &gapped);
        assert_eq!(members(&ab), vec![b"y".to_vec(), b"z".to_vec()]);
        assert_eq!(ab, ba);
    }

    /// A stream's entries that the other side's context covers and that side does not hold
    /// were removed there: a site that deleted them (and collected every record of it) while
    /// a peer was quarantined keeps them deleted when the peer rejoins by a complete full
    /// sync, whichever side merges; the entry the peer added meanwhile stays.
    #[test]
    fn a_stream_a_context_covers_does_not_come_back() {
        let add = |ms: u64| -> E {
            Effect::Stream(crate::stream::StreamOp::Add {
                id: crate::StreamId::new(ms, 0),
                fields: vec![b"f".as_slice(), b"v".as_slice()],
                totals: crate::stream::Totals::default(),
            })
        };
        let mut q = KeyState::new();
        q.apply(st(1, 1), &add(1));
        q.apply(st(2, 1), &add(2));
        let removed = q.clone();
        q.apply(st(5, 2), &add(3));
        // A removed 1-0 and 2-0 and collected it all: it holds no such key.
        let a = KeyState::new();
        let ctx_a = Context::from({
            let mut v = VersionVector::new();
            v.observe(st(4, 1));
            v
        });
        let ctx_q = Context::from({
            let mut v = VersionVector::new();
            v.observe(st(2, 1));
            v.observe(st(5, 2));
            v
        });
        let ids = |k: &KeyState| -> Vec<crate::StreamId> {
            k.stream().map_or(Vec::new(), |s| {
                s.range(crate::StreamId::MIN, crate::StreamId::MAX)
                    .map(|e| e.id)
                    .collect()
            })
        };
        let mut aq = a.clone();
        aq.merge_with_contexts(&q, &ctx_a, &ctx_q);
        let mut qa = q.clone();
        qa.merge_with_contexts(&a, &ctx_q, &ctx_a);
        assert_eq!(ids(&aq), vec![crate::StreamId::new(3, 0)]);
        assert_eq!(aq, qa);
        let mut gone = a.clone();
        gone.merge_with_contexts(&removed, &ctx_a, &ctx_q);
        assert!(gone.is_empty(), "{gone:?}");
    }

    #[test]
    fn expire_longest_wins_and_orphans_do_not_show() {
        let mut k = KeyState::new();
        let set: E = k.assign_effect(b"v", false);
        k.apply(st(1, 1), &set);
        let e1: E = k.expire_effect(Expire::AtMs(10));
        let e2: E = k.expire_effect(Expire::AtMs(50));
        k.apply(st(2, 1), &e1);
        k.apply(st(2, 2), &e2);
        assert_eq!(k.expire_at_ms(), Some(50));
        let p: E = E::Expire {
            expire: Expire::Persist,
            observed: VersionVector::new(),
        };
        k.apply(st(3, 3), &p);
        assert_eq!(k.expire_at_ms(), None);
    }

    fn vv_upto(h: u64) -> VersionVector {
        let mut v = VersionVector::new();
        for r in 1..=3 {
            v.observe(st(h, r));
        }
        v
    }

    /// TTL writes are retired only when they time nothing (a PERSIST alone, or a key with no
    /// value) and `everywhere` covers them (for an empty key, all it holds); the retiring
    /// write removes them and adds none.
    #[test]
    fn ttl_writes_that_time_nothing_are_retired_once_settled() {
        let mut k = KeyState::new();
        let set: E = k.assign_effect(b"v", false);
        k.apply(st(1, 1), &set);
        let e: E = k.expire_effect(Expire::AtMs(50));
        k.apply(st(2, 1), &e);
        // A deadline in force: never retired.
        assert!(k.retire_expire_effect::<&[u8]>(&vv_upto(9)).is_none());
        let p: E = k.expire_effect(Expire::Persist);
        k.apply(st(3, 2), &p);
        assert!(k.has_metadata());
        // The PERSIST alone, not yet delivered everywhere: kept.
        assert!(k.retire_expire_effect::<&[u8]>(&vv_upto(2)).is_none());
        let r: E = k.retire_expire_effect(&vv_upto(3)).unwrap();
        k.apply(st(4, 1), &r);
        assert!(k.expire_reg().is_none_or(|x| x.is_empty()));
        assert_eq!(k.view_str().map(|v| v.to_bytes()), Some(b"v".to_vec()));
        k.collect(&vv_upto(4));
        assert!(!k.has_metadata());
        // EXPIRE ∥ DEL: the TTL write of an empty key goes once all the key holds is settled.
        let e: E = k.expire_effect(Expire::AtMs(70));
        let d: E = k.remove_effect();
        k.apply(st(5, 1), &e);
        k.apply(st(6, 2), &d);
        assert!(k.is_empty() && k.has_orphan_expire());
        assert!(k.retire_expire_effect::<&[u8]>(&vv_upto(5)).is_none());
        let r: E = k.retire_expire_effect(&vv_upto(6)).unwrap();
        k.apply(st(7, 3), &r);
        assert!(!k.has_orphan_expire());
        k.collect(&vv_upto(7));
        assert!(!k.has_metadata());
    }
}

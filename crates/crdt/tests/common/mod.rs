//! Test harness: in-memory replicas that issue writes the way the server does (effect built
//! from the key's state, applied locally, queued for the others) and exchange them over
//! per-origin FIFO channels.
#![allow(dead_code)]

use std::collections::BTreeMap;

use meridian_crdt::key::Applied;
use meridian_crdt::op::Effect;
use meridian_crdt::string::{bitfield_incr, parse_i64_redis, read_bits, sign_extend};
use meridian_crdt::{
    BitOverflow, Dec, Delta, Expire, HlcClock, KeyState, ReplicaId, Stamp, StrEdit, StrView,
    TypeTag,
};

#[derive(Clone, Debug)]
pub struct Msg {
    pub key: Vec<u8>,
    pub stamp: Stamp,
    pub effect: Effect<Vec<u8>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    Ok,
    Int(i64),
    Bulk(Vec<u8>),
    Nil,
    WrongType,
    NotANumber,
}

pub struct Replica {
    pub id: ReplicaId,
    pub clock: HlcClock,
    pub now_ms: u64,
    pub keys: BTreeMap<Vec<u8>, KeyState>,
    /// Every write this replica issued, in issue order (its outgoing log).
    pub outbox: Vec<Msg>,
    pub type_conflicts: u64,
}

impl Replica {
    pub fn new(id: u32) -> Replica {
        Replica {
            id: ReplicaId(id),
            clock: HlcClock::new(),
            now_ms: 1_000,
            keys: BTreeMap::new(),
            outbox: Vec::new(),
            type_conflicts: 0,
        }
    }

    /// Before a write that may create `key`: an empty key holding expire writes is removed
    /// first (Redis creates keys without a TTL).
    fn clear_orphans(&mut self, key: &[u8]) {
        let k = self.key(key);
        if k.has_orphan_expire() {
            let e = k.remove_effect();
            self.issue(key, e);
        }
    }

    fn key(&self, key: &[u8]) -> KeyState {
        self.keys.get(key).cloned().unwrap_or_default()
    }

    fn store(&mut self, key: &[u8], k: KeyState) {
        if k.is_empty() && !k.has_metadata() {
            self.keys.remove(key);
        } else {
            self.keys.insert(key.to_vec(), k);
        }
    }

    /// Issues a local write: stamp, apply, queue.
    pub fn issue(&mut self, key: &[u8], effect: Effect<Vec<u8>>) {
        let stamp = Stamp {
            hlc: self.clock.tick(self.now_ms),
            replica: self.id,
        };
        let mut k = self.key(key);
        let a = k.apply(stamp, &effect);
        self.count(a);
        self.store(key, k);
        self.outbox.push(Msg {
            key: key.to_vec(),
            stamp,
            effect,
        });
    }

    fn count(&mut self, a: Applied) {
        if a.type_conflict {
            self.type_conflicts += 1;
        }
    }

    /// Applies a write from another replica.
    pub fn receive(&mut self, m: &Msg) {
        let _ = self.clock.observe(m.stamp.hlc, self.now_ms, u64::MAX / 2);
        let mut k = self.key(&m.key);
        let a = k.apply(m.stamp, &m.effect);
        self.count(a);
        self.store(&m.key, k);
    }

    pub fn set(&mut self, key: &[u8], value: &[u8]) -> Reply {
        let e = self.key(key).assign_effect(value.to_vec(), false);
        self.issue(key, e);
        Reply::Ok
    }

    pub fn get(&self, key: &[u8]) -> Reply {
        let k = self.key(key);
        match k.type_tag() {
            None => Reply::Nil,
            Some(TypeTag::String) => k
                .view_str()
                .map_or(Reply::Nil, |v| Reply::Bulk(v.to_bytes())),
            Some(_) => Reply::WrongType,
        }
    }

    pub fn append(&mut self, key: &[u8], suffix: &[u8]) -> Reply {
        self.clear_orphans(key);
        let k = self.key(key);
        if k.type_tag().is_some_and(|t| t != TypeTag::String) {
            return Reply::WrongType;
        }
        let mut v = k.view_str().map(|v| v.to_bytes()).unwrap_or_default();
        v.extend_from_slice(suffix);
        let len = v.len() as i64;
        // As the server: the whole new value (APPEND ∥ DEL keeps the old value with the
        // suffix, the seed paper's Table 7).
        let e = k.assign_effect(v, true);
        self.issue(key, e);
        Reply::Int(len)
    }

    /// SETRANGE (a non-empty `bytes`) as a string edit: a capability of the string type the
    /// laws check; the server replicates SETRANGE as the whole value, like APPEND.
    pub fn setrange(&mut self, key: &[u8], offset: u64, bytes: &[u8]) -> Reply {
        self.edit(
            key,
            StrEdit::SetRange {
                offset,
                bytes: bytes.to_vec(),
            },
        )
    }

    /// SETBIT, as the server replicates it; replies with the bit's old value.
    pub fn setbit(&mut self, key: &[u8], bit: u64, on: bool) -> Reply {
        let k = self.key(key);
        if k.type_tag().is_some_and(|t| t != TypeTag::String) {
            return Reply::WrongType;
        }
        let v = k.view_str().map(|v| v.to_bytes()).unwrap_or_default();
        let old = v
            .get(usize::try_from(bit / 8).unwrap())
            .is_some_and(|b| b & (0x80 >> (bit % 8)) != 0);
        self.edit(
            key,
            StrEdit::SetBits {
                offset: bit,
                width: 1,
                value: u64::from(on),
            },
        );
        Reply::Int(i64::from(old))
    }

    /// BITFIELD INCRBY of one signed 5-bit field, as the server replicates it (the increment
    /// itself); replies the new value, or nil when it overflows under FAIL.
    pub fn bitincr(&mut self, key: &[u8], offset: u64, incr: i64, sat: bool) -> Reply {
        self.clear_orphans(key);
        let k = self.key(key);
        if k.type_tag().is_some_and(|t| t != TypeTag::String) {
            return Reply::WrongType;
        }
        let overflow = if sat {
            BitOverflow::Sat
        } else {
            BitOverflow::Fail
        };
        let v = k.view_str().map(|v| v.to_bytes()).unwrap_or_default();
        let old = read_bits(&v, offset, 5);
        let reply = match bitfield_incr(old, 5, true, incr, overflow) {
            Some(n) => Reply::Int(sign_extend(n, 5)),
            None => Reply::Nil,
        };
        let edit = StrEdit::IncrBits {
            offset,
            width: 5,
            signed: true,
            incr,
            overflow,
        };
        let mut nv = v.clone();
        edit.apply_to(&mut nv);
        if k.is_empty() {
            let e = k.assign_effect(nv, false);
            self.issue(key, e);
        } else if nv != v {
            let e = match k.edit_effect(edit) {
                Some(e) => e,
                None => k.assign_effect(nv, true),
            };
            self.issue(key, e);
        }
        reply
    }

    fn edit(&mut self, key: &[u8], edit: StrEdit<Vec<u8>>) -> Reply {
        self.clear_orphans(key);
        let k = self.key(key);
        if k.type_tag().is_some_and(|t| t != TypeTag::String) {
            return Reply::WrongType;
        }
        let mut v = k.view_str().map(|v| v.to_bytes()).unwrap_or_default();
        edit.apply_to(&mut v);
        let len = v.len() as i64;
        let e = match k.edit_effect(edit) {
            Some(e) => e,
            None => k.assign_effect(v, true),
        };
        self.issue(key, e);
        Reply::Int(len)
    }

    pub fn incrby(&mut self, key: &[u8], by: i64) -> Reply {
        self.clear_orphans(key);
        let k = self.key(key);
        if k.type_tag().is_some_and(|t| t != TypeTag::String) {
            return Reply::WrongType;
        }
        let cur = match k.view_str() {
            None => 0,
            Some(StrView::Int(v)) => v,
            Some(StrView::Bytes(b)) => match parse_i64_redis(b) {
                Some(v) => v,
                None => return Reply::NotANumber,
            },
            Some(StrView::Float(d)) => match d.to_i64_exact() {
                Some(v) => v,
                None => return Reply::NotANumber,
            },
        };
        let Some(new) = cur.checked_add(by) else {
            return Reply::NotANumber;
        };
        let e = k.incr_effect(self.id, Delta::Int(by));
        self.issue(key, e);
        Reply::Int(new)
    }

    pub fn incrbyfloat(&mut self, key: &[u8], by: &str) -> Reply {
        self.clear_orphans(key);
        let k = self.key(key);
        if k.type_tag().is_some_and(|t| t != TypeTag::String) {
            return Reply::WrongType;
        }
        let cur = match k.view_str() {
            None => Dec::ZERO,
            Some(StrView::Int(v)) => Dec::from_i64(v),
            Some(StrView::Float(d)) => d,
            Some(StrView::Bytes(b)) => match Dec::parse(b) {
                Some(d) => d,
                None => return Reply::NotANumber,
            },
        };
        let Some(by) = Dec::parse(by.as_bytes()) else {
            return Reply::NotANumber;
        };
        let Some(new) = cur.add(by) else {
            return Reply::NotANumber;
        };
        let e = k.incr_effect(self.id, Delta::Float(by));
        self.issue(key, e);
        Reply::Bulk(new.format_redis().into_bytes())
    }

    pub fn del(&mut self, key: &[u8]) -> Reply {
        let k = self.key(key);
        if k.is_empty() {
            return Reply::Int(0);
        }
        let e = k.remove_effect();
        self.issue(key, e);
        Reply::Int(1)
    }

    pub fn expire_at(&mut self, key: &[u8], at_ms: u64) -> Reply {
        let k = self.key(key);
        if k.is_empty() {
            return Reply::Int(0);
        }
        let e = k.expire_effect(Expire::AtMs(at_ms));
        self.issue(key, e);
        Reply::Int(1)
    }

    pub fn persist(&mut self, key: &[u8]) -> Reply {
        let k = self.key(key);
        if k.is_empty() || k.expire_at_ms().is_none() {
            return Reply::Int(0);
        }
        let e = k.expire_effect(Expire::Persist);
        self.issue(key, e);
        Reply::Int(1)
    }

    pub fn sadd(&mut self, key: &[u8], member: &[u8]) -> Reply {
        self.clear_orphans(key);
        let k = self.key(key);
        if k.type_tag().is_some_and(|t| t != TypeTag::Set) {
            return Reply::WrongType;
        }
        let new = !k.set().is_some_and(|s| s.contains(member));
        self.issue(
            key,
            Effect::SetAdd {
                member: member.to_vec(),
            },
        );
        Reply::Int(i64::from(new))
    }

    pub fn srem(&mut self, key: &[u8], member: &[u8]) -> Reply {
        let k = self.key(key);
        if k.type_tag().is_some_and(|t| t != TypeTag::Set) {
            return Reply::WrongType;
        }
        if !k.set().is_some_and(|s| s.contains(member)) {
            return Reply::Int(0);
        }
        // Removing the last member deletes the key (and its TTL), as in Redis.
        let e = if k.set().is_some_and(|s| s.len() == 1) {
            k.remove_effect()
        } else {
            k.set_rem_effect(member.to_vec())
        };
        self.issue(key, e);
        Reply::Int(1)
    }

    pub fn smembers(&self, key: &[u8]) -> Vec<Vec<u8>> {
        // Sorted: a set's iteration order is hash order, not part of its state.
        let mut m: Vec<Vec<u8>> = self
            .key(key)
            .set()
            .map(|s| s.members().map(<[u8]>::to_vec).collect())
            .unwrap_or_default();
        m.sort();
        m
    }

    pub fn ttl_at(&self, key: &[u8]) -> Option<u64> {
        self.key(key).expire_at_ms()
    }

    /// What a client can see of every key.
    pub fn digest(&self) -> Vec<(Vec<u8>, String)> {
        self.keys
            .iter()
            .filter(|(_, k)| !k.is_empty())
            .map(|(name, k)| (name.clone(), digest_view(k)))
            .collect()
    }
}

/// A canonical text of what clients see at a key: type, value, TTL.
pub fn digest_view(k: &KeyState) -> String {
    let value = match k.type_tag() {
        None => "none".to_string(),
        Some(TypeTag::String) => format!(
            "string {:?}",
            k.view_str()
                .map(|v| v.to_bytes().escape_ascii().to_string())
        ),
        Some(TypeTag::Set) => {
            let mut m: Vec<Vec<u8>> = k
                .set()
                .map(|s| s.members().map(<[u8]>::to_vec).collect())
                .unwrap_or_default();
            m.sort();
            let m: Vec<String> = m.iter().map(|m| m.escape_ascii().to_string()).collect();
            format!("set {m:?}")
        }
        // This harness generates only string and set ops; the other types have their own
        // law tests (hash_laws, zset_laws, list_laws, hll_laws, stream_laws) with
        // visible-state digests.
        Some(
            tag @ (TypeTag::Hash | TypeTag::ZSet | TypeTag::List | TypeTag::Hll | TypeTag::Stream),
        ) => {
            format!("{tag:?} {:?}", k.value())
        }
    };
    format!("{value} ttl={:?}", k.expire_at_ms())
}

/// Per-origin FIFO channels between `n` replicas: `cursor[from][to]` = next message index.
pub struct Net {
    pub cursor: Vec<Vec<usize>>,
}

impl Net {
    pub fn new(n: usize) -> Net {
        Net {
            cursor: vec![vec![0; n]; n],
        }
    }

    /// Delivers up to `k` pending messages from `from` to `to`, in order.
    pub fn deliver(&mut self, rs: &mut [Replica], from: usize, to: usize, k: usize) {
        if from == to {
            return;
        }
        for _ in 0..k {
            let i = self.cursor[from][to];
            let Some(m) = rs[from].outbox.get(i).cloned() else {
                return;
            };
            self.cursor[from][to] += 1;
            rs[to].receive(&m);
        }
    }

    /// Delivers again a message `to` has already received from `from`.
    pub fn duplicate(&mut self, rs: &mut [Replica], from: usize, to: usize, pick: usize) {
        let done = self.cursor[from][to];
        if from == to || done == 0 {
            return;
        }
        let m = rs[from].outbox[pick % done].clone();
        rs[to].receive(&m);
    }

    /// Delivers everything pending.
    pub fn sync_all(&mut self, rs: &mut [Replica]) {
        let n = rs.len();
        for from in 0..n {
            for to in 0..n {
                self.deliver(rs, from, to, usize::MAX);
            }
        }
    }
}

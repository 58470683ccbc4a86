//! `CRDT.DIGEST`: a digest of the observable state, equal on two sites exactly when they hold
//! the same data (up to 128-bit hash collisions).
//!
//! What is digested per live key: database, name, type, value and absolute expiry; keys whose
//! TTL has passed are left out, as are removal metadata and hidden values, which clients
//! cannot see. Unordered collections (sets, hashes, sorted sets) add their elements' hashes,
//! so their internal order does not matter; lists hash their elements in order. Key digests
//! are added (wrapping), so the digest of a slot or of the keyspace does not depend on table
//! order. The hash is a fixed-key FNV-1a pair: the same on every machine and build, not a
//! cryptographic commitment.

use meridian_crdt::{KeyState, Value};

use crate::shard::Shard;
use crate::slot::{SLOTS, slot};

/// A 128-bit FNV-1a hash (two 64-bit lanes with distinct offsets).
#[derive(Clone, Copy)]
struct Fnv128(u64, u64);

impl Fnv128 {
    fn new() -> Fnv128 {
        Fnv128(0xcbf2_9ce4_8422_2325, 0x6c62_272e_07bb_0142)
    }

    fn write(&mut self, bytes: &[u8]) {
        const P: u64 = 0x0000_0100_0000_01b3;
        for &b in bytes {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(P);
            self.1 = (self.1 ^ u64::from(b)).wrapping_mul(P).rotate_left(5);
        }
    }

    /// Length-prefixed, so that ("ab","c") and ("a","bc") differ.
    fn field(&mut self, bytes: &[u8]) {
        self.write(&(bytes.len() as u64).to_le_bytes());
        self.write(bytes);
    }

    fn value(self) -> u128 {
        (u128::from(self.0) << 64) | u128::from(self.1)
    }
}

/// The digest of one live key; None when the key is not visible at `now_ms`.
pub fn key_digest(db: usize, key: &[u8], state: &KeyState, now_ms: u64) -> Option<u128> {
    if state.is_empty() {
        return None;
    }
    let expire = state.expire_at_ms();
    if expire.is_some_and(|at| at <= now_ms) {
        return None;
    }
    let mut h = Fnv128::new();
    h.field(&(db as u64).to_le_bytes());
    h.field(key);
    h.field(&expire.map_or(0, |at| at.wrapping_add(1)).to_le_bytes());
    let mut sum: u128 = 0;
    let member = |parts: &[&[u8]]| {
        let mut m = Fnv128::new();
        for p in parts {
            m.field(p);
        }
        m.value()
    };
    match state.value() {
        Some(Value::Str(_)) => {
            h.field(b"string");
            h.field(&state.view_str().map(|v| v.to_bytes()).unwrap_or_default());
        }
        Some(Value::Set(_)) => {
            h.field(b"set");
            if let Some(s) = state.set() {
                for m in s.members() {
                    sum = sum.wrapping_add(member(&[m]));
                }
            }
        }
        Some(Value::Hash(_)) => {
            h.field(b"hash");
            if let Some(hs) = state.hash() {
                for (f, v) in hs.iter() {
                    sum = sum.wrapping_add(member(&[f, &v.to_bytes()]));
                }
            }
        }
        Some(Value::ZSet(_)) => {
            h.field(b"zset");
            if let Some(z) = state.zset() {
                for (m, score) in z.iter_unordered() {
                    // -0 and 0 are one score to clients.
                    let bits = if score == 0.0 { 0u64 } else { score.to_bits() };
                    sum = sum.wrapping_add(member(&[m, &bits.to_le_bytes()]));
                }
            }
        }
        Some(Value::List(_)) => {
            h.field(b"list");
            if let Some(l) = state.list() {
                for e in l.iter() {
                    h.field(e.value);
                }
            }
        }
        Some(Value::Hll(_)) => {
            // What GET shows, sparse layout and cache flag included: sites apply concurrent
            // writes in stamp order, so these bytes converge as the registers do.
            h.field(b"hll");
            if let Some(x) = state.hll() {
                h.field(x.bytes());
            }
        }
        Some(Value::Stream(_)) => {
            h.field(b"stream");
            if let Some(s) = state.stream() {
                stream_digest(&mut h, s);
            }
        }
        None => return None,
    }
    h.field(&sum.to_le_bytes());
    Some(h.value())
}

/// A stream's entries in order, its counters, and each group's cursor, read counter,
/// consumers (with their seen times) and pending entries (owner, delivery time and count).
fn stream_digest(h: &mut Fnv128, s: &meridian_crdt::StreamCrdt) {
    use meridian_crdt::StreamId;
    let id = |h: &mut Fnv128, id: StreamId| {
        h.field(&id.ms.to_le_bytes());
        h.field(&id.seq.to_le_bytes());
    };
    h.field(&s.len().to_le_bytes());
    for e in s.range(StreamId::MIN, StreamId::MAX) {
        id(h, e.id);
        for (f, v) in e.fields() {
            h.field(f);
            h.field(v);
        }
    }
    id(h, s.last_id());
    id(h, s.max_deleted());
    h.field(&s.entries_added().to_le_bytes());
    for g in s.groups() {
        h.field(&g.name);
        id(h, g.last_id());
        h.field(&g.entries_read().to_le_bytes());
        for c in g.consumers() {
            h.field(c.name);
            h.field(&c.seen_ms.to_le_bytes());
        }
        for p in g.pending_range(StreamId::MIN, StreamId::MAX) {
            id(h, p.id);
            h.field(p.consumer);
            h.field(&p.time_ms.to_le_bytes());
            h.field(&p.count.to_le_bytes());
        }
    }
}

/// Digest of a set of keys: (keys, digest).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Digest {
    pub keys: u64,
    pub sum: u128,
}

impl Digest {
    fn add(&mut self, d: u128) {
        self.keys += 1;
        self.sum = self.sum.wrapping_add(d);
    }

    pub fn hex(&self) -> String {
        format!("{:032x}", self.sum)
    }
}

impl Shard {
    /// Calls `f(slot, key digest)` for every live key at `now_ms` whose slot `want` accepts.
    fn each_key_digest(
        &self,
        now_ms: u64,
        want: impl Fn(u16) -> bool,
        mut f: impl FnMut(u16, u128),
    ) {
        for (db, d) in self.dbs.iter().enumerate() {
            for e in d.table.iter() {
                let s = slot(&e.key);
                if !want(s) {
                    continue;
                }
                if let Some(kd) = key_digest(db, &e.key, &e.state, now_ms) {
                    f(s, kd);
                }
            }
        }
    }

    /// Digests every live key, by slot (`SLOTS` entries), at `now_ms`.
    pub fn digest_slots(&self, now_ms: u64) -> Vec<Digest> {
        let mut out = vec![Digest::default(); SLOTS];
        self.each_key_digest(
            now_ms,
            |_| true,
            |s, kd| {
                if let Some(d) = out.get_mut(usize::from(s)) {
                    d.add(kd);
                }
            },
        );
        out
    }

    /// Digests the live keys of one slot.
    pub fn digest_slot(&self, wanted: u16, now_ms: u64) -> Digest {
        let mut out = Digest::default();
        self.each_key_digest(now_ms, |s| s == wanted, |_, kd| out.add(kd));
        out
    }

    /// Digest of the whole observable keyspace.
    pub fn digest_all(&self, now_ms: u64) -> Digest {
        let mut out = Digest::default();
        self.each_key_digest(now_ms, |_| true, |_, kd| out.add(kd));
        out
    }
}

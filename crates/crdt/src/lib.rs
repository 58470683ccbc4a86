//! Conflict-free replicated data types for Meridian.
//!
//! Pure data types: no I/O, no clocks, no threads. Time (`now_ms`) and randomness are
//! parameters. Every type applies a local operation, reports what the operation must carry
//! to other replicas, and applies the same operation arriving from a remote replica. For a
//! full sync, every type also encodes its complete state and joins a peer's into its own
//! (`encode_state`, `decode_state`, `merge`; `KeyState::merge_with_contexts` between replicas
//! that collected removal metadata, each judged by its own causal context).
//! Not here: wire encoding (the server's op log and the syncer), storage and commands (`server`).
//!
//! # Layout
//! - `dot`: `ReplicaId`, `Stamp` (a write's identity and its LWW order), `VersionVector`,
//!   `Context` (a replica's causal context for state merges).
//! - `hlc`: hybrid logical clock values and the clock that issues them.
//! - `bytes`: `SmallBytes`, right-sized byte strings stored inline when short.
//! - `num`: `Dec`, the exact decimal used for float increments and INCRBYFLOAT.
//! - `counter`: per-replica increment totals and the observed baseline that resets them.
//! - `mvreg`: multi-value register of concurrent writes, shown as last-writer-wins.
//! - `string`: the string value: a register, edits of its bytes and a counter (SET, APPEND,
//!   SETBIT, INCR...).
//! - `expire`: the TTL register: the longest concurrent TTL wins, PERSIST beats EXPIRE.
//! - `orset`: add-wins observed-remove set.
//! - `key`: `KeyState`, one key's typed value, TTL and removal context; the type-conflict rule.
//! - `hash`: observed-remove map of fields, each a register plus a counter.
//! - `zset`: sorted set: observed-remove members, LWW base score plus summed increments.
//! - `list`: sequence CRDT: concurrent inserts all kept in one order, observed removes.
//! - `hll`: HyperLogLog registers merged by maximum, in Redis's own encoding.
//! - `stream`: entries in ID order (packed blocks) and consumer groups.
//! - `op`: `Effect`, what one write replicates.
//! - `hashing`: the keyed hash of collection tables (the host supplies the key).
//! - `table`: `SteppedTable`, the collections' hash table, grown a few buckets per write.
//! - `codec`: binary encoding of effects' and states' building blocks, bounds-checked decoding.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod bytes;
pub mod codec;
pub mod counter;
pub mod dot;
pub mod expire;
pub mod hash;
pub mod hashing;
pub mod hlc;
pub mod hll;
pub mod key;
pub mod list;
pub mod mvreg;
pub mod num;
pub mod op;
pub mod orset;
pub mod stream;
pub mod string;
pub mod table;
pub mod zset;

pub use crate::bytes::SmallBytes;
pub use crate::counter::{Counter, Delta, IncAt, IncTotals};
pub use crate::dot::{Context, Gap, ReplicaId, Stamp, VersionVector};
pub use crate::expire::{Expire, ExpireReg};
pub use crate::hash::{HashCrdt, HashOp};
pub use crate::hlc::{Hlc, HlcClock};
pub use crate::hll::{HllCrdt, HllOp};
pub use crate::key::{Applied, KeyState, TypeTag, Value};
pub use crate::list::{ListCrdt, ListOp};
pub use crate::mvreg::MvReg;
pub use crate::num::{DIGITS_MAX, Dec};
pub use crate::op::{Effect, Observed};
pub use crate::orset::OrSet;
pub use crate::stream::{StreamCrdt, StreamId, StreamOp};
pub use crate::string::{BitOverflow, StrCrdt, StrEdit, StrView, parse_i64_redis};
pub use crate::zset::{ZSetCrdt, ZSetOp};

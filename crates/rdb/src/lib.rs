//! Redis's serialization of one value, as DUMP writes and RESTORE reads it, and of a whole RDB file.
//!
//! A payload is one value in RDB version 10's encoding (a type byte, then the value), the
//! 2-byte RDB version and a CRC-64 of everything before it (Redis 7.0.15's
//! `createDumpPayload`/`verifyDumpPayload`, `rdbSaveObject`/`rdbLoadObject`). This crate
//! turns such a payload into plain contents (`Value`) and plain contents into the payload
//! Redis would write for a value of those contents under the given encoding thresholds.
//! Pure: no I/O, no clock, nothing of Meridian's keyspace or CRDTs (the server maps
//! `Value` to and from its types); it borrows only `meridian-crdt`'s `string2ll`, so that one
//! rule decides what an integer is everywhere. Every decoder validates the way Redis's deep
//! sanitization does and never allocates more than the bytes present justify.
//!
//! # Layout
//! - `num`: Redis's number texts (`string2ll`, `d2string`, `%.17g`, `strtod` prefixes).
//! - `lzf`: LZF compression, byte-identical to Redis's `lzf_compress`, and decompression.
//! - `listpack`, `ziplist`, `intset`, `zipmap`: the packed containers, built and validated.
//! - `decode`: `decode_payload`, the RESTORE side (every type Redis 7.0 still loads).
//! - `encode`: `encode_*`, the DUMP side (the encoding Redis 7.0 chooses).
//! - `file`: a whole RDB file of such values (what `redis-cli --rdb` saves).
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod decode;
pub mod encode;
pub mod file;
pub mod intset;
pub mod listpack;
pub mod lzf;
pub mod num;
#[cfg(test)]
mod stream_tests;
pub mod ziplist;
pub mod zipmap;

pub use crate::decode::{
    Crc, Decoded, Limits, decode_payload, decode_payload_with, verify_footer, verify_footer_with,
};
pub use crate::encode::StreamNodes;
pub use crate::encode::{Encoder, ListOptions};

/// The RDB version Redis 7.0 writes in DUMP payloads, and the highest it reads.
pub const RDB_VERSION: u16 = 10;

/// Bytes after the value: the RDB version (2) and the CRC-64 (8).
pub const FOOTER_BYTES: usize = 10;

/// Redis's CRC-64 (Jones polynomial, reflected), little endian in payloads.
pub const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);

/// RDB object type bytes (rdb.h).
pub mod rdb_type {
    pub const STRING: u8 = 0;
    pub const LIST: u8 = 1;
    pub const SET: u8 = 2;
    pub const ZSET: u8 = 3;
    pub const HASH: u8 = 4;
    pub const ZSET_2: u8 = 5;
    pub const MODULE: u8 = 6;
    pub const MODULE_2: u8 = 7;
    pub const HASH_ZIPMAP: u8 = 9;
    pub const LIST_ZIPLIST: u8 = 10;
    pub const SET_INTSET: u8 = 11;
    pub const ZSET_ZIPLIST: u8 = 12;
    pub const HASH_ZIPLIST: u8 = 13;
    pub const LIST_QUICKLIST: u8 = 14;
    pub const STREAM_LISTPACKS: u8 = 15;
    pub const HASH_LISTPACK: u8 = 16;
    pub const ZSET_LISTPACK: u8 = 17;
    pub const LIST_QUICKLIST_2: u8 = 18;
    pub const STREAM_LISTPACKS_2: u8 = 19;
}

/// The contents of one value, whatever encoding carried them.
///
/// Adding a type is a variant here, its decoder in `decode::decode_value`'s dispatch on the
/// type byte, and its encoder in `encode`.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A string (HyperLogLogs are strings in Redis).
    Str(Vec<u8>),
    /// A list, head first.
    List(Vec<Vec<u8>>),
    /// A set's members, each once.
    Set(Vec<Vec<u8>>),
    /// A hash's fields and values, each field once, in the payload's order.
    Hash(Vec<(Vec<u8>, Vec<u8>)>),
    /// A sorted set's members and scores (never NaN), each member once.
    ZSet(Vec<(Vec<u8>, f64)>),
    /// A stream with its consumer groups.
    Stream(Stream),
}

/// A stream entry ID: (milliseconds, sequence).
pub type StreamId = (u64, u64);

/// A stream entry: its ID and its field/value pairs.
pub type StreamEntry = (StreamId, Vec<(Vec<u8>, Vec<u8>)>);

/// A stream's contents, as `RDB_TYPE_STREAM_LISTPACKS_2` holds them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stream {
    /// (ID, field/value pairs), in strictly increasing ID order.
    pub entries: Vec<StreamEntry>,
    /// `last-generated-id`, not below the last entry's ID.
    pub last_id: StreamId,
    /// `recorded-first-entry-id` (Redis's `first_id`).
    pub first_id: StreamId,
    /// `max-deleted-entry-id`.
    pub max_deleted: StreamId,
    /// `entries-added`.
    pub entries_added: u64,
    /// In name order, each name once.
    pub groups: Vec<StreamGroup>,
}

/// A consumer group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamGroup {
    pub name: Vec<u8>,
    /// `last-delivered-id`.
    pub last_id: StreamId,
    /// The logical read counter, `-1` when unknown (`SCG_INVALID_ENTRIES_READ`).
    pub entries_read: i64,
    /// (name, seen time ms), in name order, each name once.
    pub consumers: Vec<(Vec<u8>, i64)>,
    /// The pending entries in ID order, each ID once and owned by one of `consumers`.
    pub pending: Vec<StreamPending>,
}

/// A pending entry of a consumer group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamPending {
    pub id: StreamId,
    pub consumer: Vec<u8>,
    /// Last delivery time, ms.
    pub delivery_time: i64,
    pub delivery_count: u64,
}

/// Why a payload was refused. RESTORE answers `Footer` with Redis's "DUMP payload version
/// or checksum are wrong" and everything else with "Bad data format"; the variants say what
/// was wrong, for logs and tests.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RdbError {
    #[error("DUMP payload version or checksum are wrong")]
    Footer,
    #[error("unknown or unsupported RDB type {0}")]
    Type(u8),
    #[error("payload ends inside the value")]
    Truncated,
    #[error("bad length encoding")]
    Length,
    #[error("bad string encoding")]
    StringEncoding,
    #[error("invalid LZF compressed string")]
    Lzf,
    #[error("{0} integrity check failed")]
    Integrity(&'static str),
    #[error("duplicate {0}")]
    Duplicate(&'static str),
    #[error("sorted set score is NaN or not a number")]
    Score,
    #[error("empty value")]
    Empty,
    #[error("value decodes to more than {0} bytes")]
    TooLarge(u64),
}

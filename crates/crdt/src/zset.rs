//! SKELETON (being written by its owner; the lead's plumbing in key.rs and the op log calls
//! exactly the items below): the  sorted set (ZADD...) CRDT.

use crate::codec::{DecodeError, Reader};
use crate::dot::{Stamp, VersionVector};
use crate::op::Observed;

/// The value. Must stay at most 40 bytes (`Value` holds it inline); box the rest.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct ZSetCrdt {}

/// What one write of this type replicates.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ZSetOp<B: AsRef<[u8]>> {
    Placeholder(B),
}

impl ZSetCrdt {
    pub fn new() -> ZSetCrdt {
        ZSetCrdt::default()
    }

    /// Applies a local or remote write; false when it was a duplicate or already removed.
    pub fn apply<B: AsRef<[u8]>>(&mut self, _stamp: Stamp, _op: &ZSetOp<B>) -> bool {
        todo!()
    }

    /// Whether it shows anything (the key exists).
    pub fn is_live(&self) -> bool {
        false
    }

    /// The highest stamp among its live writes (the type-conflict order).
    pub fn live_stamp(&self) -> Option<Stamp> {
        None
    }

    /// Holds neither live writes nor metadata.
    pub fn is_blank(&self) -> bool {
        true
    }

    /// Holds removal metadata that `collect` would drop.
    pub fn has_metadata(&self) -> bool {
        false
    }

    /// Adds every stamp seen (live writes and removal contexts) to `vv`.
    pub fn observe_into(&self, _vv: &mut VersionVector) {}

    /// DEL (or a SET of the key): removes everything `observed` covers.
    pub fn remove_observed(&mut self, _observed: &Observed) {}

    /// Drops removal metadata covered by `stable` (`None`: everything is stable).
    pub fn collect(&mut self, _stable: Option<&VersionVector>) {}

    /// Ops that rebuild an equal visible value on an empty key (RENAME, COPY).
    pub fn recreate_ops(&self) -> Vec<ZSetOp<Vec<u8>>> {
        Vec::new()
    }
}

/// Appends the encoding of `op` to `out`.
pub fn encode_op<B: AsRef<[u8]>>(_op: &ZSetOp<B>, _out: &mut Vec<u8>) {
    todo!()
}

/// Decodes one op written by `encode_op`.
pub fn decode_op(_r: &mut Reader<'_>) -> Result<ZSetOp<Vec<u8>>, DecodeError> {
    todo!()
}
